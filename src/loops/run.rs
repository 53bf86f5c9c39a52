//! One blocking run of a bounded loop: laps, bounds, the ledger, cancellation.
//!
//! The runner asks its [`Gate`] each lap, lets [`ledger::decide_lap`] apply the bounds in
//! SPEC §2's order (the same function agent steps use) and records the lap. Between laps it
//! waits for the next poll, never past the deadline (where one last lap is evaluated):
//!
//! - with the data root's change feed ([`crate::feed`]), it sleeps on the feed's signal and
//!   wakes when memories or control records commit anywhere. A wake-up checks the cancel flag
//!   and the run's row, then lets the gate take in what arrived ([`Gate::probe`]); only a new
//!   candidate turns a wake-up into a lap, so a burst of unrelated writes costs no laps and
//!   cannot use up `max_iterations` faster than the poll schedule. No change, no work: an idle
//!   waiting loop costs nothing between polls.
//! - without a feed, it sleeps in slices of at most [`CANCEL_SLICE`], checking the cancel
//!   flag and the run's row (for `slm loop cancel` from another process), as before.
//!
//! Either way a lap happens at least every poll interval, so the poll interval is the
//! fallback and the longest wait. The thread's timer slack lets a poll fire up to 1/50 of its
//! interval late (at most 10 ms), so a thousand runs waiting in one process share timer
//! interrupts: this alone cut their idle CPU by a quarter.
//!
//! A shared store that cannot be reached (a PostgreSQL restart, the network) is not the end
//! of a waiting run: that lap saw nothing new, its ledger write fails open, the bounds still
//! apply, and a later lap (or the listener's wake-up once it is back) looks again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use super::gate::{Gate, Observation};
use super::host::LoopHost;
use super::ledger::{self, Driver, LapInput, Ledger};
use super::params::CheckedLoop;
use super::result::{GateMatches, LapEvent, Match, RunResult, Termination};
use crate::engine::Engine;
use crate::feed::{Feed, Signal};
use crate::memory::Hit;
use crate::record::{GateSpec, RunParams, RunStatus};
use crate::Result;

pub use super::host::CANCEL_SLICE;

/// Ways to stop a run from outside: a flag (Ctrl-C, MCP cancel) checked with the ledger row.
/// Raising it wakes the run at once when it waits on a change feed.
#[derive(Debug, Default)]
pub struct Cancel {
    pub flag: AtomicBool,
    waker: Mutex<Option<Arc<Signal>>>,
}

impl Cancel {
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
    pub fn request(&self) {
        self.flag.store(true, Ordering::Release);
        if let Some(s) = self.waker.lock().as_ref() {
            s.bump();
        }
    }
    /// The signal the run waits on, so a request wakes it.
    fn attach(&self, signal: &Arc<Signal>) {
        *self.waker.lock() = Some(Arc::clone(signal));
    }
}

/// A poll may fire up to this fraction of its interval late (at most [`MAX_POLL_SLACK`]).
const POLL_SLACK_DIVISOR: u32 = 50;
/// Latest a poll may fire.
const MAX_POLL_SLACK: Duration = Duration::from_millis(10);

/// This thread's timer slack while a run waits on it: the kernel may fire its poll timeouts
/// up to the slack late, so the wake-ups of many runs waiting in one process are served by
/// one timer interrupt instead of one each. Restored on drop (the thread is a pool's).
struct TimerSlack(Option<libc::c_ulong>);

impl TimerSlack {
    #[cfg(target_os = "linux")]
    fn set(slack: Duration) -> TimerSlack {
        let ns = slack.min(MAX_POLL_SLACK).as_nanos() as libc::c_ulong;
        // SAFETY: PR_GET/SET_TIMERSLACK read and write a plain integer of the calling thread.
        unsafe {
            let old = libc::prctl(libc::PR_GET_TIMERSLACK);
            if old < 0 || libc::prctl(libc::PR_SET_TIMERSLACK, ns) != 0 {
                return TimerSlack(None);
            }
            TimerSlack(Some(old as libc::c_ulong))
        }
    }
    #[cfg(not(target_os = "linux"))]
    fn set(_: Duration) -> TimerSlack {
        TimerSlack(None)
    }
}

impl Drop for TimerSlack {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if let Some(old) = self.0 {
            // SAFETY: as in `set`.
            unsafe {
                libc::prctl(libc::PR_SET_TIMERSLACK, old);
            }
        }
    }
}

/// Unwraps a lap's result; on an error, ends the run `error` after `$laps` laps (see
/// [`Ledger::fail`]) and returns the error, so no run is left `running` by a failed lap.
macro_rules! or_fail {
    ($ledger:ident, $laps:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => {
                $ledger.fail($laps, &e);
                return Err(e);
            }
        }
    };
}

/// Runs a checked loop with `gate` to a terminal status. Errors returned here are internal
/// failures of the gate (the run is then recorded as `error`); invalid input was rejected
/// when the loop was checked.
pub fn run(
    engine: &LoopHost,
    spec: &CheckedLoop,
    gate: &mut dyn Gate,
    cancel: &Cancel,
    on_lap: &mut dyn FnMut(&LapEvent),
) -> Result<RunResult> {
    let started = Instant::now();
    let _running = engine.busy();
    let limits = &spec.limits;
    let deadline = started + Duration::from_secs_f64(limits.max_wallclock_s);
    let params = RunParams { limits: limits.clone(), gate: spec.gate.clone() };
    // The change feed starts once lap 1 has not ended the run: a run that converges at once
    // (an agreed signal already stored) never pays for a file watch, whose start and whose
    // teardown by the kernel at exit cost a one-shot `slm loop run` 10-25 ms here. See
    // `start_feed` for why nothing committed in between is missed.
    let mut feed: Option<Arc<Feed>> = None;
    let _slack = gate.waits().then(|| TimerSlack::set(Duration::from_secs_f64(limits.poll_interval_s) / POLL_SLACK_DIVISOR));
    let mut generation = 0;
    let mut ledger = Ledger::start(engine, &spec.name, params, Driver::ThisProcess, None)?;
    let mut tokens: u64 = 0;
    let mut stalled: i64 = 0;
    let mut last: Option<Observation> = None;
    let mut lap: i64 = 0;
    let mut rejected_candidates: u64 = 0;
    let (outcome, obs) = loop {
        lap += 1;
        let obs = match gate.observe(lap, deadline) {
            Err(e) if e.is_unreachable() => unreachable_lap(last.as_ref(), &e),
            r => or_fail!(ledger, lap - 1, r),
        };
        rejected_candidates += obs.rejected.len() as u64;
        if lap == 1 {
            tokens += gate.setup_tokens();
        }
        if let Some(prev) = &last {
            stalled = if prev.fingerprint() == obs.fingerprint() { stalled + 1 } else { 0 };
        }
        let input = LapInput {
            lap,
            passed: obs.passed,
            detail: &obs.detail,
            tokens,
            stalled,
            elapsed_s: started.elapsed().as_secs_f64(),
            past_deadline: Instant::now() >= deadline,
        };
        let outcome = ledger::decide_lap(&spec.name, limits, &input, |t| ledger.count_tokens(t));
        tokens = outcome.tokens_used;
        ledger.record_lap(&outcome, obs.best_score.map(f64::from), &obs.rejected);
        on_lap(&LapEvent {
            run_id: ledger.run_id().to_string(),
            lap,
            decision: outcome.decision().to_string(),
            passed: obs.passed,
            detail: obs.detail.clone(),
            score: obs.best_score,
            budget: outcome.budget.clone(),
            rejected: obs.rejected.clone(),
        });
        if outcome.status.is_some() {
            break (outcome, obs);
        }
        if gate.waits() {
            if lap == 1 {
                gate.prepare_wait();
                feed = engine.feed();
                if let Some(f) = &feed {
                    cancel.attach(f.gate());
                    generation = f.gate().generation();
                    if or_fail!(ledger, lap, start_feed(gate)) {
                        last = Some(obs);
                        continue;
                    }
                }
            }
            let next = (Instant::now() + Duration::from_secs_f64(limits.poll_interval_s)).min(deadline);
            let cancelled = match &feed {
                Some(f) => or_fail!(ledger, lap, wait_for_change(engine, ledger.run_id(), cancel, gate, f, &mut generation, next)),
                None => sleep_until(engine, ledger.run_id(), cancel, next),
            };
            if cancelled {
                break (outcome, obs);
            }
        } else if cancel.requested() {
            break (outcome, obs);
        }
        last = Some(obs);
    };
    let status = outcome.status.unwrap_or(RunStatus::Cancelled);
    let reason = outcome.reason.unwrap_or_else(|| ledger::reason(status, lap, &obs.detail, limits, tokens));
    let (matched, matches) = or_fail!(ledger, lap, matches(engine, spec, status, &obs));
    let result = RunResult {
        ok: true,
        status,
        reason,
        laps: lap,
        run_id: ledger.run_id().to_string(),
        termination: Termination {
            elapsed_s: ledger::round3(started.elapsed().as_secs_f64()),
            tokens_used: tokens,
            best_score: obs.best_score,
            best_memory_id: obs.best_memory_id,
            limits: limits.clone(),
            clamped: spec.clamped.clone(),
            notes: spec.notes.clone(),
            ledger_errors: 0,
            rejected_candidates,
        },
        matched,
        matches,
    };
    Ok(ledger.finish(result))
}

/// The run's `match` and `matches` from its last observation: every gate's passed memories,
/// read once, best first; `match` is the best of the first gate that passed, when the run
/// converged.
fn matches(engine: &Engine, spec: &CheckedLoop, status: RunStatus, obs: &Observation) -> Result<(Option<Match>, Vec<GateMatches>)> {
    if obs.gates.is_empty() {
        return Ok((None, Vec::new()));
    }
    let defs: Vec<(Option<String>, Vec<String>)> = match &spec.gate {
        GateSpec::Memory { gate_query, gate_tags, .. } => vec![(Some(gate_query.clone()), gate_tags.clone())],
        GateSpec::Gates { gates, .. } => gates.iter().map(|g| (g.query.clone(), g.tags.clone())).collect(),
        _ => Vec::new(),
    };
    let ids: Vec<i64> = obs.gates.iter().flat_map(|g| g.accepted.iter().map(|s| s.id)).collect();
    let rows = if ids.is_empty() { Vec::new() } else { engine.get(&ids)? };
    let mut out = Vec::with_capacity(obs.gates.len());
    for (i, g) in obs.gates.iter().enumerate() {
        let (query, tags) = defs.get(i).cloned().unwrap_or_default();
        let tag_only = query.is_none();
        let memories = g
            .accepted
            .iter()
            .filter_map(|s| rows.iter().find(|m| m.id == s.id).map(|m| (s, m)))
            .map(|(s, m)| Match {
                hit: Hit {
                    id: m.id,
                    content: m.content.clone(),
                    tags: m.tags.clone(),
                    // A tag-only gate does not score; its matches show 1.0 (every tag held).
                    score: if tag_only { 1.0 } else { s.score },
                    created_at: m.created_at.clone(),
                    expires_at: m.expires_at.clone(),
                    kind: m.kind,
                },
                verified_by: g.verified_by.clone(),
            })
            .collect();
        out.push(GateMatches { gate: i + 1, query, tags, count: g.count, passed: g.passed(), memories });
    }
    let matched =
        if status == RunStatus::Converged { out.iter().find(|g| g.passed).and_then(|g| g.memories.first().cloned()) } else { None };
    Ok((matched, out))
}

/// The observation of a lap on which the shared store could not be reached: nothing new
/// (the previous lap's view, so no-progress counts it like any quiet lap), with the reason in
/// the detail. The run keeps its bounds and looks again on the next lap.
fn unreachable_lap(last: Option<&Observation>, e: &crate::Error) -> Observation {
    let mut obs = last.cloned().unwrap_or(Observation {
        passed: false,
        best_score: None,
        best_memory_id: None,
        eligible: 0,
        detail: String::new(),
        rejected: Vec::new(),
        verified_by: Vec::new(),
        gates: Vec::new(),
    });
    obs.rejected.clear();
    obs.detail = format!("the store is unreachable, nothing new this lap ({e})");
    obs
}

fn cancelled(engine: &LoopHost, run_id: &str, cancel: &Cancel) -> bool {
    cancel.requested() || engine.cancel_requested(run_id).unwrap_or(false)
}

/// Waits on the change feed until the next poll (`next`), a cancellation (returns true) or a
/// change that brings a new candidate (returns false: evaluate a lap now). `generation` is
/// the feed generation already looked at; it is moved on before each look. The store's
/// cancel flag is read once per wait (the fallback for a writer that does not announce) and
/// again only after a control announcement, so a burst of memories costs no cancel reads.
fn wait_for_change(
    engine: &LoopHost,
    run_id: &str,
    cancel: &Cancel,
    gate: &mut dyn Gate,
    feed: &Feed,
    generation: &mut u64,
    next: Instant,
) -> Result<bool> {
    let signal = feed.gate();
    let mut control = feed.control_generation();
    if cancelled(engine, run_id, cancel) {
        return Ok(true);
    }
    loop {
        if cancel.requested() {
            return Ok(true);
        }
        if Instant::now() >= next {
            *generation = signal.generation();
            return Ok(false);
        }
        let now = signal.wait_past(*generation, next);
        if now != *generation {
            *generation = now;
            let c = feed.control_generation();
            if c != control {
                control = c;
                if cancelled(engine, run_id, cancel) {
                    return Ok(true);
                }
            }
            match gate.probe() {
                Ok(true) => return Ok(false),
                Ok(false) => {}
                // The listener bumps again once it is back; the poll is the fallback.
                Err(e) if e.is_unreachable() => tracing::debug!("probe: {e}"),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Called once the feed watches (its generation read): probes the gate for what committed
/// since lap 1 looked at the store, which the watch, started after that look, could not have
/// announced. True: a new candidate arrived, so lap 2 runs now. Anything committed after the
/// probe's own look is announced to the running watch and wakes the wait.
fn start_feed(gate: &mut dyn Gate) -> Result<bool> {
    match gate.probe() {
        Ok(news) => Ok(news),
        // The poll is the fallback, as in a wait.
        Err(e) if e.is_unreachable() => {
            tracing::debug!("probe: {e}");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Sleeps until `until`, waking every [`CANCEL_SLICE`] to check for cancellation. Returns
/// true when the run was cancelled.
fn sleep_until(engine: &LoopHost, run_id: &str, cancel: &Cancel, until: Instant) -> bool {
    loop {
        if cancelled(engine, run_id, cancel) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep((until - now).min(CANCEL_SLICE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use crate::engine::DataRoot;
    use crate::loops::{LoopParams, MemoryGate};
    use crate::record::{GateDef, RunStatus};

    fn host(dir: &std::path::Path) -> LoopHost {
        LoopHost::new(Arc::new(
            Engine::open(&DataRoot { dir: dir.join("data"), explicit: true, store: None }, Arc::new(HashEmbedder)).unwrap(),
        ))
    }

    fn spec(query: &str, wallclock_s: f64, poll_s: f64) -> CheckedLoop {
        let mut p = LoopParams::new("lazy-feed", query);
        p.gate_min_score = 0.99;
        p.max_wallclock_s = wallclock_s;
        p.poll_interval_s = poll_s;
        CheckedLoop::try_from(p).unwrap()
    }

    fn memory_gate<'e>(e: &'e LoopHost, query: &str) -> MemoryGate<'e> {
        let def = GateDef { query: Some(query.into()), tags: vec![], min_score: 0.99, verify: vec![], nli_min: 0.5, count: 1 };
        MemoryGate::new(e, &def, None).unwrap()
    }

    /// A gate whose lap 1 is followed, before the run can start its watch, by a matching
    /// commit: the window that starting the feed after lap 1 opens.
    struct CommitAfterLapOne<'e> {
        inner: MemoryGate<'e>,
        engine: &'e LoopHost,
        text: &'static str,
        /// What the run asked of the gate, in order.
        calls: Vec<String>,
    }

    impl Gate for CommitAfterLapOne<'_> {
        fn observe(&mut self, lap: i64, deadline: Instant) -> Result<Observation> {
            let o = self.inner.observe(lap, deadline)?;
            // A lap that comes from the poll, not from news, comes at the deadline here.
            let when = if Instant::now() >= deadline { "at the deadline" } else { "before the deadline" };
            self.calls.push(format!("lap {lap} {when}: {}", if o.passed { "passed" } else { "not passed" }));
            if lap == 1 {
                self.engine.remember(self.text, &[]).unwrap();
            }
            Ok(o)
        }
        fn probe(&mut self) -> Result<bool> {
            let news = self.inner.probe()?;
            self.calls.push(format!("probe: {news}"));
            Ok(news)
        }
    }

    #[test]
    fn a_run_that_converges_on_lap_one_starts_no_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let e = host(tmp.path());
        e.remember("deploy of build 7 finished", &[]).unwrap();
        let s = spec("deploy of build 7 finished", 10.0, 1.0);
        let r = run(&e, &s, &mut memory_gate(&e, "deploy of build 7 finished"), &Cancel::default(), &mut |_| {}).unwrap();
        assert_eq!((r.status, r.laps), (RunStatus::Converged, 1), "{}", r.reason);
        assert!(e.feed_started().is_none(), "a run that ends on lap 1 started the change feed");
    }

    #[test]
    fn a_commit_between_lap_one_and_the_watch_is_not_missed() {
        if !crate::feed::enabled() {
            return; // SLM_FEED=off: the run polls, and this window does not exist.
        }
        let tmp = tempfile::tempdir().unwrap();
        let e = host(tmp.path());
        // The poll interval is the whole run: had the watch missed the commit, the run would
        // sleep to its deadline with no probe finding news, and lap 2 would come from the poll.
        let s = spec("deploy of build 8 finished", 20.0, 20.0);
        let inner = memory_gate(&e, "deploy of build 8 finished");
        let mut gate = CommitAfterLapOne { inner, engine: &e, text: "deploy of build 8 finished", calls: Vec::new() };
        let r = run(&e, &s, &mut gate, &Cancel::default(), &mut |_| {}).unwrap();
        assert_eq!((r.status, r.laps), (RunStatus::Converged, 2), "{}", r.reason);
        assert_eq!(gate.calls, ["lap 1 before the deadline: not passed", "probe: true", "lap 2 before the deadline: passed"]);
        assert!(e.feed_started().is_some(), "a run that waits watches the feed");
    }
}
