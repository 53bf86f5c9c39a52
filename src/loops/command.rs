//! Agent-driven loops: the gate is a shell command, and each lap is one `slm loop step`.
//!
//! `start` validates the bounds and the command, fixes them in the run's record and returns
//! the run id; the command cannot be changed afterwards. Each `step` runs the command (exit 0
//! = pass) in its own process group, bounded by the run's remaining wall-clock (killed with its
//! group at the deadline), then records the lap under the database write lock, so steps from
//! several processes number their laps one after another and share one set of counters
//! (tokens, stalled laps). After a terminal status every step is refused with that status.
//! The agent reports its tokens; no-progress compares each lap's gate outcome (exit code and
//! an output digest). The engine, not the agent, decides when the loop is done.
//!
//! Nor can the agent steer the gate: `start` records the working directory and the
//! environment the command runs with ([`crate::loops::params::capture_gate_env`]), and every
//! step runs it with exactly those (`/bin/sh`, a cleared environment, the recorded directory),
//! whatever the stepping process's directory, PATH or variables. A recorded directory that no
//! longer exists fails the lap, saying so.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::host::LoopHost;
use super::ledger::{self, Driver, LapInput, Ledger};
use super::params::{CheckedStart, CheckedStep, Clamp, Limits};
pub use super::shell::{run_gate, GateInput, GateOutcome};
use crate::record::{GateEnv, GateSpec, RunParams, RunStatus};
use crate::storage::{RunRow, StepWrite};
use crate::{Error, Result};

/// The result of `start`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Started {
    pub ok: bool,
    pub run_id: String,
    pub name: String,
    pub gate_cmd: String,
    /// The directory and the whole environment every step runs the command with.
    pub gate_env: GateEnv,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    /// When the run's wall-clock ends (RFC 3339 UTC).
    pub deadline: String,
}

/// Counters carried between steps (the `state` JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct StepState {
    tokens_used: u64,
    stalled: i64,
    last_digest: Option<String>,
}

impl StepState {
    /// Reads a run's counters; a row whose state does not parse is an error naming the run,
    /// never a silent reset to zero.
    fn of(row: &RunRow) -> Result<StepState> {
        match row.state.as_deref() {
            None => Ok(StepState::default()),
            Some(s) => serde_json::from_str(s).map_err(|e| Error::Corrupt(format!("run {}: unreadable step state ({e})", row.run_id))),
        }
    }

    fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Starts an agent-driven run. Nothing is written when the input is invalid (it was checked).
pub fn start(engine: &LoopHost, p: &CheckedStart) -> Result<Started> {
    let deadline_ms = now_ms() + (p.limits.max_wallclock_s * 1000.0).round() as i64;
    let params = RunParams {
        limits: p.limits.clone(),
        gate: GateSpec::Command { gate_cmd: p.gate_cmd.clone(), deadline_ms, gate_env: Some(p.gate_env.clone()) },
    };
    let ledger = Ledger::start(engine, &p.name, params, Driver::AnyProcess, Some(StepState::default().to_json()))?;
    let deadline = chrono::DateTime::from_timestamp_millis(deadline_ms)
        .map(|d| d.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .unwrap_or_default();
    Ok(Started {
        ok: true,
        run_id: ledger.run_id().to_string(),
        name: p.name.clone(),
        gate_cmd: p.gate_cmd.clone(),
        gate_env: p.gate_env.clone(),
        limits: p.limits.clone(),
        clamped: p.clamped.clone(),
        deadline,
    })
}

/// The result of one step.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Stepped {
    pub ok: bool,
    pub run_id: String,
    pub name: String,
    pub lap: i64,
    /// `continue`, or the terminal status this lap reached.
    pub decision: String,
    pub passed: bool,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub detail: String,
    /// `running`, or the run's terminal status.
    pub status: RunStatus,
    /// A human sentence on why the run ended, when it did.
    pub reason: Option<String>,
    pub budget: serde_json::Value,
    pub ledger_errors: u64,
}

/// The command gate of an agent-driven run (command, deadline, recorded directory and
/// environment), or an error saying the run is not one.
fn command_gate(run: &RunRow) -> Result<(&str, i64, Option<&GateEnv>)> {
    match &run.params.gate {
        GateSpec::Command { gate_cmd, deadline_ms, gate_env } => Ok((gate_cmd, *deadline_ms, gate_env.as_ref())),
        _ => Err(Error::invalid("run_id", &run.run_id, "is not an agent-driven run (start one with slm loop start)")),
    }
}

/// Runs one lap of an agent-driven run: the gate command, then the engine's decision.
pub fn step(engine: &LoopHost, run_id: &str, args: &CheckedStep) -> Result<Stepped> {
    let run = super::run_row(engine, run_id)?;
    let (gate_cmd, deadline_ms, gate_env) = command_gate(&run)?;
    if run.status.is_terminal() {
        return Err(Error::Ended { run_id: run_id.to_string(), status: run.status.to_string() });
    }
    let remaining = Duration::from_millis((deadline_ms - now_ms()).max(0) as u64);
    let outcome = run_gate(gate_cmd, remaining, &GateInput { recorded: gate_env.cloned(), ..GateInput::default() })?;
    let detail = outcome.detail(args.note.as_deref());
    let digest = outcome.digest();
    let passed = outcome.passed();
    let limits = run.params.limits.clone();
    let started_ms = chrono::DateTime::parse_from_rfc3339(&run.started_at)
        .map(|d| d.timestamp_millis())
        .map_err(|e| Error::Corrupt(format!("run {run_id}: unreadable started_at ({e})")))?;

    let mut store = engine.store();
    let (lap, ts) = store.step_locked(run_id, |row| {
        if row.status.is_terminal() {
            return Err(Error::Ended { run_id: row.run_id, status: row.status.to_string() });
        }
        let mut st = StepState::of(&row)?;
        st.stalled = if st.last_digest.as_deref() == Some(digest.as_str()) { st.stalled + 1 } else { 0 };
        st.last_digest = Some(digest.clone());
        let now = now_ms();
        let input = LapInput {
            lap: row.laps + 1,
            passed,
            detail: &detail,
            // Steps report what they like (up to i64::MAX each): the sum saturates, never wraps.
            tokens: st.tokens_used.saturating_add(args.tokens),
            stalled: st.stalled,
            elapsed_s: (now - started_ms) as f64 / 1000.0,
            past_deadline: now >= deadline_ms,
        };
        let mut count_err = None;
        let lap = ledger::decide_lap(&row.name, &limits, &input, |t| match engine.embedder().count_tokens(t) {
            Ok(n) => n as u64,
            Err(e) => {
                count_err = Some(e);
                0
            }
        });
        if let Some(e) = count_err {
            return Err(e);
        }
        st.tokens_used = lap.tokens_used;
        let end = lap.status.map(|s| {
            let reason = lap.reason.clone().unwrap_or_default();
            let result = serde_json::json!({"status": s, "laps": lap.lap, "reason": reason, "budget": lap.budget});
            crate::storage::RunEnding { status: s, reason, result: result.to_string() }
        });
        let write = StepWrite { lap: lap.row(Some(if passed { 1.0 } else { 0.0 }), None, &[]), state: st.to_json(), end };
        let ts = write.lap.ts.clone();
        Ok((write, (lap, ts)))
    })?;
    drop(store);
    engine.announce(crate::feed::Topic::Ledger);

    // The ledger memory is written after the lap is decided, outside the write lock, and
    // without its vector: loading the model would cost a step ~100 ms, so a background
    // `slm embed-pending` (started by the CLI) adds it, and recall embeds it on the fly until
    // then. Like every ledger write it is fail-open.
    let mut ledger = Ledger::attach(engine, &run.name, run_id);
    ledger.attach_lap_memory(&lap, &ts);
    Ok(Stepped {
        ok: true,
        run_id: run_id.to_string(),
        name: run.name,
        lap: lap.lap,
        decision: lap.decision().to_string(),
        passed,
        exit_code: outcome.exit_code,
        timed_out: outcome.timed_out,
        detail,
        status: lap.status.unwrap_or(RunStatus::Running),
        reason: lap.reason,
        budget: lap.budget,
        ledger_errors: ledger.errors(),
    })
}

/// True when an agent-driven run is still `running` but its deadline has passed: its agent
/// stopped stepping. Shown as `max_wallclock` (the status its next step would record).
pub fn expired(row: &RunRow) -> bool {
    row.status == RunStatus::Running && matches!(row.params.gate, GateSpec::Command { deadline_ms, .. } if now_ms() > deadline_ms)
}

/// True when a stored run is agent-driven.
pub fn is_command_run(row: &RunRow) -> bool {
    matches!(row.params.gate, GateSpec::Command { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use crate::engine::{DataRoot, Engine};
    use crate::loops::params::{CheckedStart, CheckedStep, StartParams};
    use std::sync::Arc;

    fn engine(dir: &std::path::Path) -> LoopHost {
        LoopHost::new(Arc::new(
            Engine::open(&DataRoot { dir: dir.join("data"), explicit: true, store: None }, Arc::new(HashEmbedder)).unwrap(),
        ))
    }

    fn start_run(e: &LoopHost, cmd: &str, iterations: i64, window: i64) -> String {
        let p = StartParams {
            name: "unit".into(),
            gate_cmd: cmd.into(),
            max_iterations: iterations,
            max_wallclock_s: 30.0,
            max_tokens: 0,
            no_progress_window: window,
            gate_env: crate::loops::params::capture_gate_env(&[]).unwrap(),
        };
        start(e, &CheckedStart::try_from(p).unwrap()).unwrap().run_id
    }

    fn step_ok(e: &LoopHost, run_id: &str, tokens: u64) -> Stepped {
        step(e, run_id, &CheckedStep { tokens, note: Some("working".into()) }).unwrap()
    }

    #[test]
    fn steps_number_laps_share_counters_and_end_on_the_gate() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let marker = tmp.path().join("done");
        let run_id = start_run(&e, &format!("test -e {}", marker.display()), 10, 0);
        let s1 = step_ok(&e, &run_id, 5);
        assert_eq!((s1.lap, s1.decision.as_str(), s1.status), (1, "continue", RunStatus::Running));
        assert_eq!(s1.exit_code, Some(1));
        // HashEmbedder counts words + 2: the ledger text's tokens plus the reported ones.
        let text = ledger::lap_text("unit", 1, &s1.detail);
        assert_eq!(s1.budget["tokens_used"], 5 + text.split_whitespace().count() as u64 + 2);
        std::fs::write(&marker, "").unwrap();
        let s2 = step_ok(&e, &run_id, 0);
        assert_eq!((s2.lap, s2.status), (2, RunStatus::Converged));
        assert!(s2.reason.as_deref().unwrap().starts_with("the gate passed on lap 2"), "{:?}", s2.reason);
        // After the end every step is refused, naming the status.
        let err = step(&e, &run_id, &CheckedStep::default()).unwrap_err();
        assert!(err.to_string().contains("converged"), "{err}");
        // Each lap left a ledger memory (without a vector until a backfill).
        let laps = crate::loops::show(&e, &run_id, 10).unwrap().laps;
        assert_eq!(laps.len(), 2);
        assert_eq!(e.backfill_pending(10).unwrap(), 2);
    }

    #[test]
    fn a_repeating_outcome_ends_on_no_progress_and_a_memory_run_is_not_steppable() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let run_id = start_run(&e, "echo same; exit 3", 10, 2);
        let statuses: Vec<RunStatus> = (0..3).map(|_| step_ok(&e, &run_id, 0).status).collect();
        assert_eq!(statuses, vec![RunStatus::Running, RunStatus::Running, RunStatus::NoProgress]);
        let demo = crate::loops::CheckedLoop::demo(3).unwrap();
        let r = crate::loops::demo(&e, &demo, &crate::loops::Cancel::default(), &mut |_| {}).unwrap();
        assert_eq!(r.status, RunStatus::Converged);
        let err = step(&e, &r.run_id, &CheckedStep::default()).unwrap_err();
        assert_eq!(err.field(), Some("run_id"), "{err}");
    }
}
