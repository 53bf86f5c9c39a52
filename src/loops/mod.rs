//! Bounded loops: block until a gate passes, under hard bounds, recording every lap.
//!
//! - [`params`]: parameters, validation, clamps.
//! - [`gate`]: the [`gate::Gate`] seam, the exact [`gate::MemoryGate`], the demo's stub.
//! - [`run`]: the lap loop itself and the shared [`run::RunResult`].
//! - [`ledger`]: the durable record of runs and laps.
//!
//! This module knows nothing of the CLI, MCP or dashboard: they call [`run_memory_loop`],
//! [`demo`], [`history`], [`show`] and [`cancel`] and print what comes back.

pub mod command;
pub mod gate;
pub mod ledger;
pub mod params;
pub mod run;

use serde::Serialize;
use serde_json::json;

use crate::engine::Engine;
use crate::{Error, Result};
pub use gate::{Gate, MemoryGate, Observation, StubGate};
pub use params::{Clamp, Limits, LoopParams};
pub use run::{Cancel, LapEvent, RunResult, RunSpec};

/// The name the demo's runs are recorded under.
pub const DEMO_NAME: &str = "convergence-demo";

/// How a run ended (or that it has not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Converged,
    MaxIterations,
    MaxWallclock,
    MaxTokens,
    NoProgress,
    Cancelled,
    /// Shown in history for a run whose process died; never returned by a run.
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Converged => "converged",
            Status::MaxIterations => "max_iterations",
            Status::MaxWallclock => "max_wallclock",
            Status::MaxTokens => "max_tokens",
            Status::NoProgress => "no_progress",
            Status::Cancelled => "cancelled",
            Status::Interrupted => "interrupted",
        }
    }
}

/// Validates `params`, then runs the memory-gated loop to a terminal status.
pub fn run_memory_loop(
    engine: &Engine,
    params: &LoopParams,
    cancel: &Cancel,
    on_lap: &mut dyn FnMut(&LapEvent),
) -> Result<RunResult> {
    let (limits, clamped, tags) = params.check()?;
    let mut gate = MemoryGate::new(engine, &params.gate_query, limits.gate_min_score, tags.clone())?;
    let spec = RunSpec {
        name: &params.name,
        limits,
        clamped,
        params: json!({"gate": "memory", "gate_query": params.gate_query, "gate_tags": tags}),
    };
    run::run(engine, spec, &mut gate, cancel, on_lap)
}

/// The keyless convergence demo: a stub gate that fails laps 1–2 and passes lap 3.
pub fn demo(engine: &Engine, iterations: i64, cancel: &Cancel, on_lap: &mut dyn FnMut(&LapEvent)) -> Result<RunResult> {
    let (limits, clamped) = params::bounds(DEMO_NAME, 1.0, iterations, 10.0, params::POLL_FLOOR, 0, 0)?;
    let spec = RunSpec { name: DEMO_NAME, limits, clamped, params: json!({"gate": "stub", "passes_on_lap": 3}) };
    run::run(engine, spec, &mut StubGate { pass_on: 3 }, cancel, on_lap)
}

/// One run in a history listing.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HistoryRun {
    pub run_id: String,
    pub name: String,
    pub laps: i64,
    pub final_status: String,
    /// When the run started.
    pub ts: String,
    pub ended_at: Option<String>,
    pub reason: Option<String>,
}

/// Runs of one loop (or all), newest first.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct History {
    pub name: Option<String>,
    pub runs: Vec<HistoryRun>,
}

/// A lap as `show` reports it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LapView {
    pub lap: i64,
    pub ts: String,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    pub score: Option<f64>,
    pub budget: serde_json::Value,
}

impl From<crate::storage::LapRow> for LapView {
    fn from(l: crate::storage::LapRow) -> Self {
        LapView {
            lap: l.lap,
            ts: l.ts,
            decision: l.decision,
            passed: l.passed,
            detail: l.detail,
            score: l.score,
            budget: serde_json::from_str(&l.budget).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// A run with its laps.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Show {
    pub run_id: String,
    pub name: String,
    pub status: String,
    pub reason: Option<String>,
    pub laps: Vec<LapView>,
}

/// The status to show for a stored run: a `running` run whose process is gone is
/// `interrupted`; an agent-driven run past its deadline is `max_wallclock`. Computed on read,
/// so reads never write.
pub fn effective_status(row: &crate::storage::RunRow) -> String {
    if command::expired(row) {
        Status::MaxWallclock.as_str().to_string()
    } else if row.status == "running" && !ledger::is_alive(row.pid, row.proc_start) {
        Status::Interrupted.as_str().to_string()
    } else {
        row.status.clone()
    }
}

/// `history(name?, limit)`.
pub fn history(engine: &Engine, name: Option<&str>, limit: usize) -> Result<History> {
    crate::memory::validate_limit("limit", limit, 1000)?;
    if let Some(n) = name {
        params::validate_name(n)?;
    }
    let rows = engine.store().run_history(name, limit)?;
    let runs = rows
        .iter()
        .map(|r| HistoryRun {
            run_id: r.run_id.clone(),
            name: r.name.clone(),
            laps: r.laps,
            final_status: effective_status(r),
            ts: r.started_at.clone(),
            ended_at: r.ended_at.clone(),
            reason: r.reason.clone(),
        })
        .collect();
    Ok(History { name: name.map(str::to_string), runs })
}

/// `show(run_id, limit)`; an unknown run id is [`Error::NotFound`].
pub fn show(engine: &Engine, run_id: &str, limit: usize) -> Result<Show> {
    crate::memory::validate_limit("limit", limit, 10_000)?;
    let store = engine.store();
    let run = store.run_get(run_id)?.ok_or_else(|| Error::NotFound { what: "run", id: run_id.to_string() })?;
    let laps = store.run_laps(run_id, limit)?.into_iter().map(LapView::from).collect();
    Ok(Show { run_id: run.run_id.clone(), name: run.name.clone(), status: effective_status(&run), reason: run.reason.clone(), laps })
}

/// What `cancel` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CancelOutcome {
    pub run_id: String,
    /// True when the run was running and has been asked to stop.
    pub requested: bool,
    /// The run's status when asked (`running`, or its final status).
    pub status: String,
}

/// Asks a running run (in any process) to stop; it ends `cancelled` at its next check.
pub fn cancel(engine: &Engine, run_id: &str) -> Result<CancelOutcome> {
    // An agent-driven run has no process polling for the flag: end it here.
    let row = engine.store().run_get(run_id)?; // the store guard ends here: no re-entry below
    if let Some(row) = row {
        if command::is_command_run(&row) {
            let ended = engine.store().run_end_if_running(run_id, "cancelled", "cancelled by slm loop cancel")?;
            let status = if ended { "cancelled".to_string() } else { row.status };
            return Ok(CancelOutcome { run_id: run_id.to_string(), requested: ended, status });
        }
    }
    let status = engine
        .store()
        .run_request_cancel(run_id)?
        .ok_or_else(|| Error::NotFound { what: "run", id: run_id.to_string() })?;
    let row = engine.store().run_get(run_id)?;
    let effective = row.as_ref().map_or(status.clone(), effective_status);
    Ok(CancelOutcome { run_id: run_id.to_string(), requested: effective == "running", status: effective })
}
