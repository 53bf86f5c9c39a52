//! Checkpoints of a bulk import on a thread of their own.
//!
//! A checkpoint copies the write-ahead log's pages into the database file. SQLite runs one
//! inside the commit that crosses `wal_autocheckpoint`, on the writing thread: in a 1M-row
//! import that was a third of the writer's time, while the writer is what the import waits
//! for. An import's connection ([`super::SqliteStore::bulk_mode`]) therefore turns the
//! automatic checkpoint off and keeps a [`Background`]: once the log holds `limit` pages, a
//! thread with its own connection copies them (`wal_checkpoint(PASSIVE)`, which takes no
//! write lock, so the inserts go on meanwhile).
//!
//! The log can start over from its beginning only when every frame in it has been copied as
//! a write begins. While the thread copies, the writer appends more, so the thread makes
//! passes until one finds little new (at most [`MAX_PASSES`]), and then the writer copies
//! what arrived during the last one itself at its next commit; its next transaction then
//! rewinds the log (unless a reader in another process still needs the old frames, in which
//! case the log grows until the next cycle, as it would with SQLite's own checkpoints).
//!
//! That copy is not small: an import's writer builds a batch in its page cache and writes it
//! at commit, so what arrives after the thread's last pass is the whole next batch (about
//! 19,000 pages). It stays on the writer because SQLite rewinds the log only for a
//! transaction that *began* with every frame copied, and the writer begins its next batch as
//! soon as it commits: with the thread asked to copy it instead, the log never started over
//! (it grew to 240,000 pages, 1 GB) and the import spent more kernel time appending to it
//! than the writer spends copying (measured: 20.2-22.1 s against 19.1-20.0 s for 1M rows).
//!
//! Whatever the writer does between its calls to [`Background::committed`] (an import's loop
//! records commit one by one), the WAL hook itself checkpoints on the committing thread once
//! the log holds [`SAFETY_FACTOR`] times the limit, as SQLite's own automatic checkpoint
//! would: the log stays bounded even if the thread is gone or starved of CPU (a busy machine
//! can keep it from finishing a cycle for the whole of a short import).

use std::cell::Cell;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use rusqlite::hooks::Wal;
use rusqlite::Connection;

/// The log's length, in limits, at which the WAL hook checkpoints on the committing thread
/// itself: a background cycle that keeps up never lets the log reach it.
const SAFETY_FACTOR: c_int = 4;

/// Most passes of one background cycle (see [`run`]).
const MAX_PASSES: usize = 4;

/// New pages below which one more pass is not worth it: the writer copies them itself.
const TAIL_PAGES: i64 = 4_096;

thread_local! {
    /// Pages in the write-ahead log after this thread's last commit on a bulk connection, as
    /// SQLite's WAL hook reports them. rusqlite's hook is a plain function (no state); the hook
    /// runs on the committing thread, which is also the one that calls
    /// [`Background::committed`], so a thread-local keeps two importing connections apart.
    static WAL_PAGES: Cell<i64> = const { Cell::new(0) };
    /// Pages at which the hook checkpoints itself: [`SAFETY_FACTOR`] times the limit of the
    /// bulk connection this thread writes on (set by [`Background::start`]).
    static SAFETY_PAGES: Cell<c_int> = const { Cell::new(SAFETY_FACTOR * super::BULK_CHECKPOINT_PAGES as c_int) };
}

fn wal_hook(wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(i64::from(pages)));
    if pages >= SAFETY_PAGES.with(Cell::get) {
        // A passive checkpoint of what is committed; a busy answer just leaves it for later.
        if let Err(e) = wal.checkpoint() {
            tracing::debug!("checkpoint in the WAL hook: {e}");
        }
    }
    Ok(())
}

fn wal_pages() -> i64 {
    WAL_PAGES.with(Cell::get)
}

fn reset_wal_pages() {
    WAL_PAGES.with(|p| p.set(0));
}

/// The checkpointing thread of one bulk connection; stopped and joined on drop.
pub(super) struct Background {
    shared: Arc<Shared>,
    limit: i64,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// A cycle of passes is asked for or under way.
    busy: bool,
    /// A cycle finished since the writer last copied the tail.
    done: bool,
    closed: bool,
}

impl Background {
    /// Starts the thread on its own connection to `path` and installs the WAL hook on
    /// `conn` (whose automatic checkpoint the caller turned off). Without a thread (it could
    /// not start, or its connection not open), the writer checkpoints as SQLite would.
    pub(super) fn start(conn: &Connection, path: &Path, limit: u32) -> Background {
        conn.wal_hook(Some(wal_hook));
        reset_wal_pages();
        SAFETY_PAGES.with(|p| p.set(SAFETY_FACTOR.saturating_mul(c_int::try_from(limit).unwrap_or(c_int::MAX))));
        let shared = Arc::new(Shared::default());
        let s = Arc::clone(&shared);
        let own = Connection::open(path).and_then(|c| c.busy_timeout(super::BUSY_TIMEOUT).map(|()| c));
        let thread = match own {
            Ok(c) => std::thread::Builder::new().name("slm-checkpoint".into()).spawn(move || run(&c, &s)).ok(),
            Err(e) => {
                tracing::warn!("no background checkpoints ({e}); the import checkpoints as it goes");
                None
            }
        };
        Background { shared, limit: i64::from(limit), thread }
    }

    /// Called by the writer after each commit on `conn`.
    pub(super) fn committed(&self, conn: &Connection) {
        let pages = wal_pages();
        if self.thread.is_none() {
            if pages >= self.limit {
                checkpoint(conn);
                reset_wal_pages();
            }
            return;
        }
        let mut st = self.shared.state.lock();
        if st.done {
            st.done = false;
            drop(st);
            // What arrived during the thread's last pass; the next write rewinds the log.
            checkpoint(conn);
            reset_wal_pages();
        } else if pages >= self.limit && !st.busy {
            st.busy = true;
            self.shared.wake.notify_one();
        }
    }
}

#[cfg(test)]
impl Background {
    /// Waits until no cycle is asked for or under way: a test's way to let the thread keep
    /// up whatever else the machine is doing (its fsync can stall behind other processes'
    /// write-back for seconds, during which the log rightly grows).
    pub(super) fn settle(&self) {
        while self.shared.state.lock().busy {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread: a cycle of passes whenever one is asked for, until closed.
fn run(conn: &Connection, shared: &Shared) {
    loop {
        let mut st = shared.state.lock();
        while !st.busy && !st.closed {
            shared.wake.wait(&mut st);
        }
        if st.closed {
            return;
        }
        drop(st);
        // Passes until one finds little new: each copies what the writer appended during the
        // one before, so the tail left to the writer (appended during the last, short pass)
        // is small. A single pass left it 15,000-40,000 pages, a quarter of the writer's time.
        let mut seen = 0;
        for _ in 0..MAX_PASSES {
            match checkpoint(conn) {
                Some((log, _)) if log - seen > TAIL_PAGES => seen = log,
                _ => break,
            }
        }
        let mut st = shared.state.lock();
        st.busy = false;
        st.done = true;
    }
}

/// A passive checkpoint (it never waits for a lock nor blocks a writer); a failure only
/// leaves the log longer, so it is logged and the import goes on.
/// Returns the log's length and how much of it is copied, in pages.
fn checkpoint(conn: &Connection) -> Option<(i64, i64)> {
    let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)));
    match r {
        Ok((log, copied)) => {
            tracing::debug!(log, copied, "checkpoint");
            Some((log, copied))
        }
        Err(e) => {
            tracing::warn!("checkpoint: {e}");
            None
        }
    }
}
