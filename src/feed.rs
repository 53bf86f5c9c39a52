//! The change feed: tells waiting loops, at once, that a write committed somewhere on the
//! data root, so they need not wait for their next poll.
//!
//! On one machine with SQLite, no daemon is needed: after each committed write the writing
//! process *announces* it by rewriting a tiny file in the data root's `feed/` folder, one file
//! per topic ([`Topic`]), and every process waiting on the data root watches that folder
//! (`notify`, inotify on Linux). Announcing after the commit, rather than watching the WAL,
//! matters: a WAL write is visible to inotify before SQLite publishes the commit in its shared
//! index, so a reader woken by the WAL could look too early and miss the row until its next
//! poll. Topics keep the noise away from the waiters: loops wait on memories and control
//! (cancel requests), not on the ledger laps that every waiting loop writes.
//!
//! A woken waiter still checks what it cares about (new rows above its watermark, the cancel
//! flag) and reads the generation *before* looking, so a commit that races the look causes
//! at most one extra wake-up, never a missed change. Without a feed (a failed watch, an older
//! writer that does not announce, `SLM_FEED=off`) loops poll exactly as before: the poll
//! interval is always the fallback and the longest wait. With a PostgreSQL store, a listener
//! (`storage::pg::listen`) bumps the same signals through a [`Notifier`] when another host's
//! commit is announced by NOTIFY.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher};
use parking_lot::{Condvar, Mutex};

use crate::Result;

/// The folder of announcement files inside a data root.
pub const FEED_DIR: &str = "feed";

/// What a committed write changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// Memories were stored or forgotten (what gates look at).
    Memories,
    /// A run was asked to stop, or ended from outside (what waiting loops obey).
    Control,
    /// Ledger laps and run records (what dashboards follow).
    Ledger,
}

impl Topic {
    fn file(self) -> &'static str {
        match self {
            Topic::Memories => "memories",
            Topic::Control => "control",
            Topic::Ledger => "ledger",
        }
    }
}

/// Announces a committed write of `topic` to every process watching `data_root`. Best effort:
/// a data root where the file cannot be written (read-only media) simply has no feed, and
/// waiters fall back to polling.
pub fn announce(data_root: &Path, topic: Topic) {
    let dir = data_root.join(FEED_DIR);
    let path = dir.join(topic.file());
    if std::fs::write(&path, b"1").is_err() && std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(&path, b"1");
    }
}

/// A generation counter that threads can wait on.
#[derive(Debug, Default)]
pub struct Signal {
    generation: Mutex<u64>,
    changed: Condvar,
}

impl Signal {
    /// The current generation.
    pub fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    /// Moves the generation on and wakes every waiter.
    pub fn bump(&self) {
        *self.generation.lock() += 1;
        self.changed.notify_all();
    }

    /// Waits until the generation differs from `seen` or `until` passes; returns the
    /// generation then.
    pub fn wait_past(&self, seen: u64, until: Instant) -> u64 {
        let mut g = self.generation.lock();
        while *g == seen {
            if self.changed.wait_until(&mut g, until).timed_out() {
                break;
            }
        }
        *g
    }
}

/// A running watch on one data root.
pub struct Feed {
    /// Bumped for [`Topic::Memories`] and [`Topic::Control`]: what waiting loops wake on.
    gate: Arc<Signal>,
    /// Counts [`Topic::Control`] announcements (and lost watches), so a woken loop asks the
    /// store about cancellation only when a control record may have changed.
    control: Arc<AtomicU64>,
    /// Bumped for [`Topic::Ledger`].
    ledger: Arc<Signal>,
    // Dropping the watcher stops its thread.
    _watcher: notify::RecommendedWatcher,
}

impl Feed {
    /// Starts watching `data_root`'s feed folder (created if missing).
    pub fn watch(data_root: &Path) -> Result<Feed> {
        let dir: PathBuf = data_root.join(FEED_DIR);
        let io =
            |e: &dyn std::fmt::Display| crate::Error::io(format!("cannot watch {}", dir.display()), std::io::Error::other(e.to_string()));
        std::fs::create_dir_all(&dir).map_err(|e| io(&e))?;
        let (gate, ledger) = (Arc::new(Signal::default()), Arc::new(Signal::default()));
        let control = Arc::new(AtomicU64::new(0));
        let (g, l, c) = (Arc::clone(&gate), Arc::clone(&ledger), Arc::clone(&control));
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let event = match event {
                Ok(e) => e,
                Err(_) => {
                    // A lost watch (e.g. a queue overflow) may hide a change: wake everyone.
                    c.fetch_add(1, Ordering::AcqRel);
                    g.bump();
                    l.bump();
                    return;
                }
            };
            // One close-after-write per announcement; other events of the same write are noise.
            if event.kind != EventKind::Access(AccessKind::Close(AccessMode::Write)) {
                return;
            }
            for p in &event.paths {
                match p.file_name().and_then(|n| n.to_str()) {
                    Some("memories") => g.bump(),
                    Some("control") => {
                        c.fetch_add(1, Ordering::AcqRel);
                        g.bump();
                    }
                    Some("ledger") => l.bump(),
                    _ => {}
                }
            }
        })
        .map_err(|e| io(&e))?;
        watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(|e| io(&e))?;
        Ok(Feed { gate, control, ledger, _watcher: watcher })
    }

    /// What waiting loops wait on: memories and control announcements.
    pub fn gate(&self) -> &Arc<Signal> {
        &self.gate
    }

    /// How many control announcements arrived (read it before looking at the store).
    pub fn control_generation(&self) -> u64 {
        self.control.load(Ordering::Acquire)
    }

    /// Ledger announcements.
    pub fn ledger(&self) -> &Arc<Signal> {
        &self.ledger
    }
}

/// Bumps a feed's signals from outside the file watch (the PostgreSQL listener). Holds them
/// weakly: once the feed is dropped, every call answers false and the listener stops.
#[derive(Clone)]
pub struct Notifier {
    gate: std::sync::Weak<Signal>,
    control: std::sync::Weak<AtomicU64>,
    ledger: std::sync::Weak<Signal>,
}

impl Notifier {
    /// Wakes the waiters of `topic`, as an announcement in `feed/` would. False: feed gone.
    pub fn topic(&self, topic: Topic) -> bool {
        let (Some(g), Some(c), Some(l)) = (self.gate.upgrade(), self.control.upgrade(), self.ledger.upgrade()) else {
            return false;
        };
        match topic {
            Topic::Memories => g.bump(),
            Topic::Control => {
                c.fetch_add(1, Ordering::AcqRel);
                g.bump();
            }
            Topic::Ledger => l.bump(),
        }
        true
    }

    /// Wakes everyone (after a gap in which announcements may have been lost).
    pub fn all(&self) -> bool {
        self.topic(Topic::Control) && self.topic(Topic::Ledger)
    }

    /// True once the feed was dropped.
    pub fn gone(&self) -> bool {
        self.gate.strong_count() == 0
    }
}

impl Feed {
    /// A handle that bumps this feed's signals (see [`Notifier`]).
    pub fn notifier(&self) -> Notifier {
        Notifier { gate: Arc::downgrade(&self.gate), control: Arc::downgrade(&self.control), ledger: Arc::downgrade(&self.ledger) }
    }
}

/// True unless `SLM_FEED=off` asks for polling only (for tests and benchmarks of the fallback).
pub fn enabled() -> bool {
    std::env::var("SLM_FEED").map_or(true, |v| v != "off")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_announcement_wakes_its_topic_only() {
        let tmp = tempfile::tempdir().unwrap();
        let feed = Feed::watch(tmp.path()).unwrap();
        let (g0, l0) = (feed.gate().generation(), feed.ledger().generation());
        let root = tmp.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            announce(&root, Topic::Memories);
        });
        let g1 = feed.gate().wait_past(g0, Instant::now() + Duration::from_secs(10));
        writer.join().unwrap();
        assert!(g1 > g0, "the announcement woke the waiter");
        assert_eq!(feed.ledger().generation(), l0, "another topic stays quiet");
        // Ledger noise does not wake gate waiters; an unrelated file wakes nobody.
        announce(tmp.path(), Topic::Ledger);
        std::fs::write(tmp.path().join(FEED_DIR).join("other"), "x").unwrap();
        let l1 = feed.ledger().wait_past(l0, Instant::now() + Duration::from_secs(10));
        assert!(l1 > l0);
        assert_eq!(feed.gate().wait_past(g1, Instant::now() + Duration::from_millis(200)), g1);
    }

    #[test]
    fn a_bump_wakes_every_waiter_and_a_timeout_returns_the_same_generation() {
        let s = Arc::new(Signal::default());
        let g = s.generation();
        assert_eq!(s.wait_past(g, Instant::now() + Duration::from_millis(20)), g);
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || s.wait_past(g, Instant::now() + Duration::from_secs(10)))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        s.bump();
        for w in waiters {
            assert_eq!(w.join().unwrap(), g + 1);
        }
    }
}
