//! The ledger writer: one thread per loop runtime (process) that commits the laps and ends of every blocking
//! loop run in the process together, on its own connection.
//!
//! A waiting loop records a lap every poll interval, so a thousand loops waiting in one
//! `slm mcp` at a 1 s poll would otherwise make a thousand SQLite commits (and a thousand
//! announcements) a second, which is most of what waiting costs. The writer takes laps from
//! a queue and commits what arrived within [`BATCH_WINDOW`] in one transaction, then calls
//! `on_commit` once (the engine announces `ledger` on the change feed). Every lap is still
//! written, in order per run; a lap is on disk at most [`BATCH_WINDOW`] after its decision,
//! so a process killed without warning can lose at most that much of its ledger.
//!
//! The end of a run does not wait for the window: it is committed as soon as the writer sees
//! it (with whatever else is queued), after the run's laps, and the runner blocks until it is
//! on disk, so a `loop run` that returned has its whole ledger stored.
//!
//! On SQLite a lap is committed as its row alone, and its ledger memory (what `recall
//! --tag loop:<name>` finds) is derived from the rows later, many at once, grouped by run
//! ([`Store::laps_fold`]): at most [`FOLD_EVERY`] after the lap, before a run's end is stored
//! when few laps wait (so a finished run's laps are found at once), a second later when many
//! do (a crowd of runs converging together is answered first), and when the writer closes. Any
//! laps a killed process left without memories are folded by the next writer. Writes stay fail-open
//! (SPEC: the ledger is observability): a batch that fails is retried one write at a time so
//! one bad row costs only itself, and each run counts its failed writes in `ledger_errors`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::{LapRow, LapWrite, Location, NewRow, RunEnd, Store};
use crate::memory::Kind;
use crate::record::RunStatus;
use crate::Result;

/// How long the writer gathers laps before committing them.
pub const BATCH_WINDOW: Duration = Duration::from_millis(250);

/// Most writes in one transaction (more wakes the writer early).
const MAX_BATCH: usize = 4096;

/// Longest a lap waits for its ledger memory while its run goes on.
pub const FOLD_EVERY: Duration = Duration::from_secs(5);

/// When a run ends with at most this many laps waiting for their memories, they are folded
/// before the end is stored; with more, [`FOLD_AFTER_CROWD`] after the ends are answered.
const FOLD_INLINE: usize = 512;

/// How long after a crowd of ends (more than [`FOLD_INLINE`] laps waiting) their laps are
/// folded: the other runs ending with them are not held up behind the fold.
const FOLD_AFTER_CROWD: Duration = Duration::from_secs(1);

/// The writer's account of laps stored without their ledger memory.
struct Folding {
    /// Laps this writer stored since its last fold.
    unfolded: usize,
    /// When to fold next, if anything may wait.
    due: Option<Instant>,
}

/// One lap to record: its row and its ledger memory (stored without a vector).
pub struct Lap {
    pub run_id: Arc<str>,
    pub row: LapRow,
    pub text: String,
    pub tags: Arc<[String]>,
    /// The run's count of failed ledger writes.
    pub failed: Arc<AtomicU64>,
}

/// The end of a run. `result` renders the result JSON given the run's failed ledger writes
/// so far (its laps are written by then); `done` hears whether the end was stored.
pub struct End {
    pub run_id: Arc<str>,
    pub status: RunStatus,
    pub reason: String,
    pub laps: i64,
    pub result: Box<dyn FnOnce(u64) -> String + Send>,
    pub failed: Arc<AtomicU64>,
    pub done: SyncSender<Result<()>>,
}

enum Job {
    Lap(Lap),
    End(End),
}

/// The handle the loop runtime keeps (`loops::host`): a queue into the writer thread, closed
/// and joined on drop so everything queued is written before the runtime goes away.
pub struct LedgerWriter {
    queue: Arc<Queue>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Jobs waiting for the writer. A lap wakes the writer only when it finds the queue empty
/// (starting a window); an end wakes it at once. So a thousand laps a second cost the writer
/// a handful of wake-ups, not a thousand.
#[derive(Default)]
struct Queue {
    state: Mutex<QueueState>,
    wake: Condvar,
}

#[derive(Default)]
struct QueueState {
    jobs: Vec<Job>,
    urgent: bool,
    closed: bool,
    running: bool,
}

impl LedgerWriter {
    /// Starts the writer on the store at `location` (a connection of its own); `on_commit`
    /// runs after each commit.
    pub fn start(location: Location, on_commit: Box<dyn Fn() + Send>) -> LedgerWriter {
        let queue = Arc::new(Queue::default());
        let q = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name("slm-ledger".into())
            .spawn(move || run(location, &q, on_commit))
            .map_err(|e| tracing::warn!("cannot start the ledger writer: {e}"))
            .ok();
        queue.state.lock().running = thread.is_some();
        LedgerWriter { queue, thread: Mutex::new(thread) }
    }

    /// Queues a lap. False when the writer is gone (the caller counts a ledger error).
    pub fn lap(&self, lap: Lap) -> bool {
        self.send(Job::Lap(lap), false)
    }

    /// Queues the end of a run; wait on the receiver of `end.done` for it to be stored.
    pub fn end(&self, end: End) -> bool {
        self.send(Job::End(end), true)
    }

    fn send(&self, job: Job, urgent: bool) -> bool {
        let mut st = self.queue.state.lock();
        if !st.running || st.closed {
            return false;
        }
        let was_empty = st.jobs.is_empty();
        st.jobs.push(job);
        st.urgent |= urgent;
        if was_empty || urgent || st.jobs.len() == MAX_BATCH {
            self.queue.wake.notify_one();
        }
        true
    }
}

impl LedgerWriter {
    /// Writes everything queued, then stops the thread; later writes are refused (counted as
    /// ledger errors by their runs).
    pub fn close(&self) {
        {
            let mut st = self.queue.state.lock();
            st.closed = true;
            self.queue.wake.notify_one();
        }
        if let Some(t) = self.thread.lock().take() {
            let _ = t.join();
        }
    }
}

impl Drop for LedgerWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// Takes the next batch: waits for a first job (or until `fold`, then returns an empty
/// batch), then up to [`BATCH_WINDOW`] for more, unless an end is queued or the writer is
/// closing. `None` when closed and empty.
fn next_batch(q: &Queue, fold: Option<Instant>) -> Option<Vec<Job>> {
    let mut st = q.state.lock();
    while st.jobs.is_empty() {
        if st.closed {
            return None;
        }
        match fold {
            Some(at) => {
                if q.wake.wait_until(&mut st, at).timed_out() && st.jobs.is_empty() && !st.closed {
                    return Some(Vec::new());
                }
            }
            None => q.wake.wait(&mut st),
        }
    }
    let until = Instant::now() + BATCH_WINDOW;
    while !st.urgent && !st.closed && st.jobs.len() < MAX_BATCH {
        if q.wake.wait_until(&mut st, until).timed_out() {
            break;
        }
    }
    st.urgent = false;
    Some(std::mem::take(&mut st.jobs))
}

fn run(location: Location, q: &Queue, on_commit: Box<dyn Fn() + Send>) {
    let open = || {
        let s = Store::open_at(&location)?;
        s.tune_for_ledger_writer();
        Ok::<_, crate::Error>(s)
    };
    let mut store = open().map_err(|e| tracing::warn!("ledger writer: {e}"));
    // Laps a killed process left without memories are folded soon after a writer starts.
    let mut folding = Folding { unfolded: 0, due: Some(Instant::now() + FOLD_EVERY) };
    while let Some(batch) = next_batch(q, folding.due) {
        if store.is_err() {
            // The first open can race a migration in another process: try again per batch.
            store = open().map_err(|e| tracing::warn!("ledger writer: {e}"));
        }
        commit(store.as_mut().ok(), batch, &*on_commit, &mut folding);
        if folding.due.is_some_and(|at| Instant::now() >= at) && fold(store.as_mut().ok(), &mut folding, usize::MAX) > 0 {
            on_commit();
        }
    }
    if fold(store.as_mut().ok(), &mut folding, usize::MAX) > 0 {
        on_commit();
    }
}

/// Folds up to `most` laps waiting for their ledger memory ([`Store::laps_fold`]) and says
/// how many (the caller announces them). Fail-open: an error is logged and the fold tried
/// again [`FOLD_EVERY`] later.
fn fold(store: Option<&mut Store>, folding: &mut Folding, most: usize) -> usize {
    let Some(store) = store else { return 0 };
    let t0 = Instant::now();
    let crate::storage::Folded { laps: done, outcome: r } = store.laps_fold(most);
    if done > 0 {
        tracing::debug!(laps = done, ms = t0.elapsed().as_secs_f64() * 1e3, "ledger writer: folded lap memories");
    }
    folding.unfolded = 0;
    folding.due = match r {
        Ok(true) => None,
        // More wait than this call would take: soon, after whatever is queued.
        Ok(false) => Some(Instant::now()),
        Err(e) => {
            tracing::warn!("ledger writer: deriving lap memories failed (tried again later): {e}");
            Some(Instant::now() + FOLD_EVERY)
        }
    };
    done
}

/// Writes a batch: its laps in one transaction, then its ends in another (their result JSON
/// is rendered once the laps' fate is known). A failed transaction is retried write by write.
fn commit(mut store: Option<&mut Store>, batch: Vec<Job>, on_commit: &dyn Fn(), folding: &mut Folding) {
    let (mut laps, mut ends) = (Vec::new(), Vec::new());
    for job in batch {
        match job {
            Job::Lap(l) => laps.push(l),
            Job::End(e) => ends.push(e),
        }
    }
    let mut wrote = false;
    if !laps.is_empty() {
        let t0 = Instant::now();
        let writes: Vec<LapWrite<'_>> = laps.iter().map(lap_write).collect();
        let all = match store.as_deref_mut() {
            Some(s) => s.laps_record(&writes),
            None => Err(crate::Error::Internal("the ledger writer has no database".into())),
        };
        match all {
            Ok(()) => {
                wrote = true;
                folding.unfolded += writes.len();
                tracing::debug!(laps = writes.len(), ms = t0.elapsed().as_secs_f64() * 1e3, "ledger writer: stored laps");
            }
            Err(e) => {
                tracing::warn!("ledger batch of {} laps failed, writing them one by one: {e}", writes.len());
                for l in &laps {
                    match store.as_deref_mut().map(|s| s.laps_record(&[lap_write(l)])) {
                        Some(Ok(())) => {
                            wrote = true;
                            folding.unfolded += 1;
                        }
                        Some(Err(e)) => {
                            tracing::warn!(run_id = %l.run_id, "ledger write failed: {e}");
                            l.failed.fetch_add(1, Ordering::AcqRel);
                        }
                        None => {
                            l.failed.fetch_add(1, Ordering::AcqRel);
                        }
                    }
                }
            }
        }
    }
    if folding.unfolded > 0 && folding.due.is_none() {
        folding.due = Some(Instant::now() + FOLD_EVERY);
    }
    let crowd = !ends.is_empty() && folding.unfolded > FOLD_INLINE;
    if !ends.is_empty() && !crowd && folding.unfolded > 0 {
        // Few laps wait: their memories go in before the ends, so a run that answered has
        // its laps findable by recall.
        wrote |= fold(store.as_deref_mut(), folding, FOLD_INLINE) > 0;
    }
    if !ends.is_empty() {
        let mut rendered = Vec::with_capacity(ends.len());
        let mut dones = Vec::with_capacity(ends.len());
        let mut rows = Vec::with_capacity(ends.len());
        for e in ends {
            rendered.push((e.result)(e.failed.load(Ordering::Acquire)));
            dones.push(e.done);
            rows.push((e.run_id, e.status, e.reason, e.laps));
        }
        let writes: Vec<RunEnd<'_>> = rows
            .iter()
            .zip(&rendered)
            .map(|((run_id, status, reason, laps), result)| RunEnd { run_id, status: *status, reason, laps: *laps, result })
            .collect();
        let all = match store.as_deref_mut() {
            Some(s) => s.runs_finish(&writes),
            None => Err(crate::Error::Internal("the ledger writer has no database".into())),
        };
        // Announce before answering, so a run's end is announced by the time its caller returns.
        if all.is_ok() || wrote {
            on_commit();
            wrote = false;
        }
        match all {
            Ok(()) => {
                for d in dones {
                    let _ = d.send(Ok(()));
                }
            }
            Err(_) => {
                for (w, d) in writes.iter().zip(dones) {
                    let r = match store.as_deref_mut() {
                        Some(s) => s.runs_finish(std::slice::from_ref(w)),
                        None => Err(crate::Error::Internal("the ledger writer has no database".into())),
                    };
                    if r.is_ok() {
                        wrote = true;
                    }
                    let _ = d.send(r);
                }
            }
        }
    }
    if wrote {
        on_commit();
    }
    if crowd {
        // Many runs are ending together: their ends go first, their laps' memories once the
        // crowd has passed.
        let soon = Instant::now() + FOLD_AFTER_CROWD;
        folding.due = Some(folding.due.map_or(soon, |d| d.min(soon)));
    }
}

fn lap_write(l: &Lap) -> LapWrite<'_> {
    LapWrite {
        run_id: &l.run_id,
        lap: &l.row,
        memory: NewRow { kind: Kind::Lap, content: &l.text, tags: &l.tags, embedding: &[], created_at: None, expires_at: None },
    }
}
