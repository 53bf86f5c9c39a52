//! The durable ledger of a run, and the lap decision both kinds of run share.
//!
//! [`decide_lap`] turns what a lap saw into its outcome: the SPEC §2 bound order, the token
//! count, the budget, the decision and, on the last lap, the reason. Memory-gated runs
//! ([`super::run`]) and agent steps ([`super::command`]) both call it, so a lap means the same
//! thing whichever drove it. [`Ledger`] records the run row, one lap row and one `kind = lap`
//! memory per lap (tagged `loop`, `loop:<name>` and `run:<suffix>`, so `slm recall --tag
//! loop:<name>` finds it), and the end. Writes are fail-open: an error is logged and counted
//! in `ledger_errors`, and the loop goes on. The gate is the correctness guarantee; the ledger
//! is observability.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::json;
use sha2::{Digest, Sha256};

use super::host::LoopHost;
use super::params::Limits;
use super::result::RunResult;
use super::verify::Rejected;
use crate::memory::{now_rfc3339, Kind};
use crate::record::{RunParams, RunStatus};
use crate::storage::{writer, LapRow, RunRow};

pub use crate::record::{lap_tags, lap_text};

/// How long a run waits for the ledger writer to store its end before it reports a ledger
/// error instead (many times SQLite's 10 s busy timeout; a PostgreSQL write that takes longer
/// is stuck, not slow).
const END_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// A fresh run id: `<name>-<UTC time>-<6 hex>`.
pub fn new_run_id(name: &str) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = chrono::Utc::now();
    let mut h = Sha256::new();
    h.update(now.timestamp_nanos_opt().unwrap_or_default().to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_le_bytes());
    let hex: String = h.finalize().iter().take(3).map(|b| format!("{b:02x}")).collect();
    format!("{name}-{}-{hex}", now.format("%Y%m%dT%H%M%S"))
}

/// When a process started (`/proc/<pid>/stat` field 22), to tell a live run from a dead one
/// whose pid was reused.
pub fn process_start(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it follow the last ')'.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19)?.parse().ok()
}

/// True when the process that started a run is still running. Agent-driven runs are not
/// bound to a process (pid 0) and are always "alive".
pub fn is_alive(pid: i64, proc_start: i64) -> bool {
    if pid == 0 {
        return true;
    }
    u32::try_from(pid).ok().and_then(process_start) == Some(proc_start)
}

/// What one lap saw, whichever kind of gate produced it.
#[derive(Debug, Clone)]
pub struct LapInput<'a> {
    pub lap: i64,
    pub passed: bool,
    /// The gate's one human sentence about this lap.
    pub detail: &'a str,
    /// Tokens used before this lap's ledger text: earlier laps, the gate query on lap 1, the
    /// agent's own report for a step.
    pub tokens: u64,
    /// Consecutive laps whose observation did not change.
    pub stalled: i64,
    pub elapsed_s: f64,
    pub past_deadline: bool,
}

/// How a lap ended, as both kinds of run record it.
#[derive(Debug, Clone)]
pub struct LapOutcome {
    pub lap: i64,
    pub passed: bool,
    pub detail: String,
    /// The ledger memory's text.
    pub text: String,
    pub tokens_used: u64,
    /// The terminal status this lap reached, if any.
    pub status: Option<RunStatus>,
    pub budget: serde_json::Value,
    /// Why the run ended, when it did.
    pub reason: Option<String>,
}

impl LapOutcome {
    /// `continue`, or the terminal status reached.
    pub fn decision(&self) -> &'static str {
        self.status.map_or("continue", RunStatus::as_str)
    }

    /// The lap's structured row (`score` as the gate reported it, the candidates its
    /// verifiers rejected).
    pub fn row(&self, score: Option<f64>, memory_id: Option<i64>, rejected: &[Rejected]) -> LapRow {
        LapRow {
            lap: self.lap,
            ts: now_rfc3339(),
            decision: self.decision().to_string(),
            passed: self.passed,
            detail: self.detail.clone(),
            score,
            budget: self.budget.to_string(),
            memory_id,
            rejected: (!rejected.is_empty()).then(|| serde_json::to_string(rejected).unwrap_or_default()),
        }
    }
}

/// The terminal status a lap reaches, if any, checked in SPEC §2's order: gate passed →
/// `converged`; lap = max_iterations → `max_iterations`; tokens ≥ max_tokens (when set) →
/// `max_tokens`; `stalled` ≥ no_progress_window (when set) → `no_progress`; deadline reached →
/// `max_wallclock`.
pub fn decide(l: &Limits, passed: bool, lap: i64, tokens: u64, stalled: i64, past_deadline: bool) -> Option<RunStatus> {
    if passed {
        Some(RunStatus::Converged)
    } else if lap >= l.max_iterations {
        Some(RunStatus::MaxIterations)
    } else if l.max_tokens > 0 && tokens >= l.max_tokens as u64 {
        Some(RunStatus::MaxTokens)
    } else if l.no_progress_window > 0 && stalled >= l.no_progress_window {
        Some(RunStatus::NoProgress)
    } else if past_deadline {
        Some(RunStatus::MaxWallclock)
    } else {
        None
    }
}

/// Decides one lap: counts its ledger text's tokens (`count_tokens`), applies the bounds, and
/// builds its budget and, on the last lap, the reason.
pub fn decide_lap(name: &str, l: &Limits, input: &LapInput<'_>, count_tokens: impl FnOnce(&str) -> u64) -> LapOutcome {
    let text = lap_text(name, input.lap, input.detail);
    let tokens = input.tokens.saturating_add(count_tokens(&text));
    let status = decide(l, input.passed, input.lap, tokens, input.stalled, input.past_deadline);
    let budget = json!({
        "tokens_used": tokens, "max_tokens": l.max_tokens,
        "elapsed_s": round3(input.elapsed_s), "max_wallclock_s": l.max_wallclock_s,
        "laps": input.lap, "max_iterations": l.max_iterations,
    });
    LapOutcome {
        lap: input.lap,
        passed: input.passed,
        detail: input.detail.to_string(),
        text,
        tokens_used: tokens,
        status,
        budget,
        reason: status.map(|s| reason(s, input.lap, input.detail, l, tokens)),
    }
}

/// The one human sentence saying why a run ended.
pub fn reason(status: RunStatus, lap: i64, detail: &str, l: &Limits, tokens: u64) -> String {
    match status {
        RunStatus::Converged => format!("the gate passed on lap {lap}: {detail}"),
        RunStatus::MaxIterations => format!("stopped after {lap} laps (max_iterations); the gate never passed: {detail}"),
        RunStatus::MaxTokens => format!("stopped on lap {lap}: {tokens} tokens used, limit {}", l.max_tokens),
        RunStatus::NoProgress => {
            format!("stopped on lap {lap}: the gate observation did not change for {} laps", l.no_progress_window)
        }
        RunStatus::MaxWallclock => format!("stopped on lap {lap}: the {} s wall-clock limit was reached", l.max_wallclock_s),
        RunStatus::Cancelled => format!("cancelled after {lap} laps"),
        RunStatus::Error => format!("stopped by an error after {lap} laps"),
        RunStatus::Running | RunStatus::Interrupted => format!("{status} on lap {lap}"),
    }
}

/// Rounds seconds to milliseconds for display.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Who drives a run: the process that started it (memory-gated runs, which block), or
/// nobody in particular (agent-driven runs, stepped from any process).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    ThisProcess,
    AnyProcess,
}

/// The ledger of one run.
pub struct Ledger<'e> {
    engine: &'e LoopHost,
    run_id: Arc<str>,
    tags: Arc<[String]>,
    /// Failed ledger writes, shared with the engine's ledger writer (which counts the laps it
    /// could not store).
    errors: Arc<AtomicU64>,
    /// A blocking run this ledger started and has not ended yet: if it is dropped so (a
    /// panic unwinding past the runner), the run is ended `error` rather than left open.
    open: bool,
}

impl<'e> Ledger<'e> {
    /// Records a new run as `running`. Fail-open for a blocking run (it goes on and counts
    /// the error); an agent-driven run exists only through its row, so there the error is
    /// returned.
    pub fn start(engine: &'e LoopHost, name: &str, params: RunParams, driver: Driver, state: Option<String>) -> crate::Result<Self> {
        let run_id = new_run_id(name);
        let mut ledger = Ledger::attach(engine, name, &run_id);
        ledger.open = driver == Driver::ThisProcess;
        let (pid, proc_start) = match driver {
            Driver::ThisProcess => {
                let pid = std::process::id();
                (i64::from(pid), process_start(pid).unwrap_or(0))
            }
            Driver::AnyProcess => (0, 0),
        };
        let row = RunRow {
            run_id: ledger.run_id.to_string(),
            name: name.to_string(),
            params,
            status: RunStatus::Running,
            reason: None,
            laps: 0,
            started_at: now_rfc3339(),
            ended_at: None,
            pid,
            proc_start,
            result: None,
            state,
            host: None,
        };
        let r = engine.store().run_start(&row);
        match driver {
            Driver::ThisProcess => {
                ledger.check(r);
            }
            Driver::AnyProcess => r?,
        }
        Ok(ledger)
    }

    /// The ledger of an existing run (an agent step).
    pub fn attach(engine: &'e LoopHost, name: &str, run_id: &str) -> Self {
        Ledger { engine, run_id: run_id.into(), tags: lap_tags(name, run_id).into(), errors: Arc::default(), open: false }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Ledger writes that failed so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Acquire)
    }

    fn check<T>(&mut self, r: crate::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                let before = self.errors.fetch_add(1, Ordering::AcqRel);
                tracing::warn!(run_id = %self.run_id, "ledger write failed: {e}");
                if before == 0 {
                    // Fail-open must not be silent: once per run, whatever the log level.
                    eprintln!("slm: warning: run {}: the ledger cannot be written ({e}); the loop goes on without it", self.run_id);
                }
                None
            }
        }
    }

    /// Tokens of a ledger text, by the model's tokenizer (a failure counts as a ledger error
    /// and falls back to one token per word plus two).
    pub fn count_tokens(&mut self, text: &str) -> u64 {
        let r = self.engine.embedder().count_tokens(text);
        self.check(r).unwrap_or_else(|| text.split_whitespace().count() + 2) as u64
    }

    /// Records a lap of a blocking run: its structured row and its memory, committed together
    /// by the engine's ledger writer with the laps of the process's other runs (within
    /// [`crate::storage::writer::BATCH_WINDOW`]). The memory is stored without its vector, so
    /// an idle lap never runs the model: a background embedder adds it
    /// ([`crate::engine::Engine::backfill_pending`]) and recall embeds it on the fly until then.
    pub fn record_lap(&mut self, lap: &LapOutcome, score: Option<f64>, rejected: &[Rejected]) {
        let queued = self.engine.ledger_writer().lap(writer::Lap {
            run_id: Arc::clone(&self.run_id),
            row: lap.row(score, None, rejected),
            text: lap.text.clone(),
            tags: Arc::clone(&self.tags),
            failed: Arc::clone(&self.errors),
        });
        if !queued {
            self.check::<()>(Err(crate::Error::Internal("the ledger writer is not running".into())));
        }
    }

    /// Adds the ledger memory of a lap whose row is already written (an agent step, whose row
    /// is decided and written under the database lock), stored without its vector. Its
    /// creation time is the lap's `ts`, as for laps the ledger writer stores, so an export's
    /// lap line finds its memory again by content, tags and time ([`crate::storage::row_key`]).
    pub fn attach_lap_memory(&mut self, lap: &LapOutcome, ts: &str) {
        let r = self.engine.insert_pending(Kind::Lap, &[(lap.text.as_str(), self.tags.to_vec())], &[Some(ts)]);
        if let Some(id) = self.check(r).and_then(|v| v.first().map(|m| m.id)) {
            let r = self.engine.store().lap_set_memory(&self.run_id, lap.lap, id);
            self.check(r);
        }
    }

    /// Records the end of the run, after all its laps, and returns the result with
    /// `ledger_errors` filled in. Returns once the end is on disk (or failed).
    pub fn finish(mut self, mut result: RunResult) -> RunResult {
        self.open = false;
        let snapshot = result.clone();
        let r = self.end_run(
            result.status,
            result.reason.clone(),
            result.laps,
            Box::new(move |errors| {
                let mut r = snapshot;
                r.termination.ledger_errors = errors;
                serde_json::to_string(&r).unwrap_or_default()
            }),
        );
        if let Err(e) = r {
            self.errors.fetch_add(1, Ordering::AcqRel);
            tracing::warn!(run_id = %self.run_id, "ledger write failed: {e}");
        }
        result.termination.ledger_errors = self.errors();
        result
    }

    /// Queues the run's end with the ledger writer (so it lands after the run's queued laps)
    /// and waits until it is on disk or failed. `result(ledger errors)` renders the result JSON.
    fn end_run(&self, status: RunStatus, reason: String, laps: i64, result: Box<dyn FnOnce(u64) -> String + Send>) -> crate::Result<()> {
        let (done, stored) = std::sync::mpsc::sync_channel(1);
        let queued = self.engine.ledger_writer().end(writer::End {
            run_id: Arc::clone(&self.run_id),
            status,
            reason,
            laps,
            result,
            failed: Arc::clone(&self.errors),
            done,
        });
        if queued {
            // Bounded: a store that stops answering must not hold a finished run for ever
            // (its end still lands if the writer gets through later).
            match stored.recv_timeout(END_WAIT) {
                Ok(stored) => stored,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    Err(crate::Error::Internal(format!("the ledger writer did not store the run's end within {} s", END_WAIT.as_secs())))
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(crate::Error::Internal("the ledger writer stopped".into())),
            }
        } else {
            Err(crate::Error::Internal("the ledger writer is not running".into()))
        }
    }

    /// Ends a run whose lap failed with `error` after `laps` recorded laps: status `error`,
    /// the error as its reason and in its result. Best effort (the store may be what broke):
    /// if this write fails too, the run reads `interrupted` once its process is gone.
    pub fn fail(mut self, laps: i64, error: &crate::Error) {
        self.open = false;
        self.end_with_error(laps, &format!("lap {} failed: {error}", laps + 1), Some(error));
    }

    fn end_with_error(&mut self, laps: i64, reason: &str, error: Option<&crate::Error>) {
        let result = json!({
            "ok": false, "status": RunStatus::Error, "reason": reason, "laps": laps, "run_id": &*self.run_id,
            "error": error.map(|e| crate::ErrorEnvelope::from(e).error),
        })
        .to_string();
        let r = self.end_run(RunStatus::Error, reason.to_string(), laps, Box::new(move |_| result));
        self.check(r);
    }
}

impl Drop for Ledger<'_> {
    fn drop(&mut self) {
        if self.open {
            let laps = self.engine.store().run_get(&self.run_id).ok().flatten().map_or(0, |r| r.laps);
            self.end_with_error(laps, "the run stopped without a result (an internal failure)", None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_iterations: 5,
            max_wallclock_s: 10.0,
            poll_interval_s: 1.0,
            max_tokens: 100,
            no_progress_window: 2,
            gate_min_score: 0.5,
        }
    }

    fn input(lap: i64, passed: bool, tokens: u64, stalled: i64, past_deadline: bool) -> LapInput<'static> {
        LapInput { lap, passed, detail: "best match #1", tokens, stalled, elapsed_s: 1.23456, past_deadline }
    }

    #[test]
    fn bounds_are_checked_in_spec_order() {
        let l = limits();
        // Everything at once: converged wins, then max_iterations, tokens, no progress, deadline.
        assert_eq!(decide(&l, true, 5, 500, 9, true), Some(RunStatus::Converged));
        assert_eq!(decide(&l, false, 5, 500, 9, true), Some(RunStatus::MaxIterations));
        assert_eq!(decide(&l, false, 4, 100, 9, true), Some(RunStatus::MaxTokens));
        assert_eq!(decide(&l, false, 4, 99, 2, true), Some(RunStatus::NoProgress));
        assert_eq!(decide(&l, false, 4, 99, 1, true), Some(RunStatus::MaxWallclock));
        assert_eq!(decide(&l, false, 4, 99, 1, false), None);
        let off = Limits { max_tokens: 0, no_progress_window: 0, ..l };
        assert_eq!(decide(&off, false, 4, 1_000_000, 1_000, false), None, "0 disables tokens and no-progress");
    }

    #[test]
    fn a_lap_counts_its_own_text_and_explains_the_end() {
        let l = limits();
        let words = |t: &str| t.split_whitespace().count() as u64;
        let go = decide_lap("ci", &l, &input(1, false, 10, 0, false), words);
        assert_eq!(go.text, "loop ci lap 1: best match #1");
        assert_eq!(go.tokens_used, 10 + 7, "seven words of ledger text on top of the ten before");
        assert_eq!(go.decision(), "continue");
        assert!(go.reason.is_none());
        assert_eq!(go.budget["elapsed_s"], 1.235);
        assert_eq!(go.budget["laps"], 1);
        let end = decide_lap("ci", &l, &input(2, false, 95, 0, false), words);
        assert_eq!(end.status, Some(RunStatus::MaxTokens));
        assert_eq!(end.reason.as_deref(), Some("stopped on lap 2: 102 tokens used, limit 100"));
        let row = end.row(Some(0.25), Some(7), &[]);
        assert_eq!((row.decision.as_str(), row.memory_id, row.score), ("max_tokens", Some(7), Some(0.25)));
    }

    #[test]
    fn lap_tags_name_the_loop_and_the_run() {
        assert_eq!(lap_tags("ci", "ci-20260101T000000-abcdef"), vec!["loop", "loop:ci", "run:20260101T000000-abcdef"]);
    }
}
