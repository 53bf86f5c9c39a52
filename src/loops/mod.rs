//! Bounded loops: block until a gate passes, under hard bounds, recording every lap.
//!
//! - [`params`]: requests, checked once at the boundary into [`CheckedLoop`],
//!   [`params::CheckedStart`], [`params::CheckedStep`] (validation, clamps).
//! - [`gate`]: the [`gate::Gate`] seam, the exact [`gate::MemoryGate`], the demo's stub.
//! - [`host`]: [`LoopHost`], the loop runtime of a process (ledger writer, shared gate
//!   views, cancel requests) over the memory engine, which knows nothing of loops.
//! - [`run`]: the blocking lap loop and its cancellation.
//! - [`command`]: agent-driven runs (`start`/`step` with shell-command gates).
//! - [`shell`]: the shell-command runner both command gates and the `cmd:` verifier use.
//! - [`ledger`]: the lap decision both kinds share and the durable record of runs and laps.
//! - [`verify`]: the gate's second stage, the verifier chain (guard, nli, cmd, none).
//! - [`explain`]: `slm gate check`, one gate decision explained.
//! - [`result`]: [`RunResult`] and [`LapEvent`], what surfaces print.
//!
//! This module knows nothing of the CLI, MCP or dashboard: they call [`run_memory_loop`],
//! [`demo`], [`history`], [`show`], [`cancel`] and the dashboard's read helpers, and print
//! what comes back.

pub mod command;
pub mod eval;
pub mod explain;
pub mod gate;
pub mod gate_set;
pub mod host;
pub mod ledger;
pub mod params;
pub mod result;
pub mod run;
pub mod shell;
pub mod since;
pub mod verify;

use serde::Serialize;

use crate::engine::Engine;
use crate::record::{GateSpec, RunStatus};
use crate::storage::RunRow;
use crate::{Error, Result};
pub use gate::{Gate, MemoryGate, Observation, StubGate};
pub use host::LoopHost;
pub use params::{CheckedLoop, Clamp, Limits, LoopParams};
pub use result::{GateMatches, LapEvent, Match, RunResult, Termination};
pub use run::Cancel;

/// The name the demo's runs are recorded under.
pub const DEMO_NAME: &str = "convergence-demo";

/// Runs a checked memory-gated loop (or the demo, whose gate is a stub) to a terminal status.
pub fn run_memory_loop(engine: &LoopHost, spec: &CheckedLoop, cancel: &Cancel, on_lap: &mut dyn FnMut(&LapEvent)) -> Result<RunResult> {
    match &spec.gate {
        GateSpec::Memory { gate_query, gate_tags, gate_verify, gate_nli_min } => {
            let def = crate::record::GateDef {
                query: Some(gate_query.clone()),
                tags: gate_tags.clone(),
                min_score: spec.limits.gate_min_score,
                verify: gate_verify.clone(),
                nli_min: *gate_nli_min,
                count: 1,
            };
            let mut gate = MemoryGate::new(engine, &def, None)?;
            run::run(engine, spec, &mut gate, cancel, on_lap)
        }
        GateSpec::Gates { gates, gate_mode, since } => {
            // Resolved before any gate looks, so "start" is the store as this run found it.
            let mark = since.as_ref().map(|s| since::resolve(engine, &spec.name, s)).transpose()?;
            let mut built = gates.iter().map(|d| MemoryGate::new(engine, d, mark.clone())).collect::<Result<Vec<_>>>()?;
            if built.len() == 1 {
                let mut gate = built.pop().expect("one gate");
                return run::run(engine, spec, &mut gate, cancel, on_lap);
            }
            run::run(engine, spec, &mut gate_set::GateSet::new(built, *gate_mode), cancel, on_lap)
        }
        GateSpec::Stub { passes_on_lap } => run::run(engine, spec, &mut StubGate { pass_on: *passes_on_lap }, cancel, on_lap),
        GateSpec::Command { .. } => Err(Error::invalid("gate", "command", "command gates run through slm loop start / slm loop step")),
    }
}

/// The keyless convergence demo: a stub gate that fails laps 1–2 and passes lap 3.
pub fn demo(engine: &LoopHost, spec: &CheckedLoop, cancel: &Cancel, on_lap: &mut dyn FnMut(&LapEvent)) -> Result<RunResult> {
    run_memory_loop(engine, spec, cancel, on_lap)
}

/// One run in a history listing.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct HistoryRun {
    pub run_id: String,
    pub name: String,
    pub laps: i64,
    pub final_status: RunStatus,
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
    /// Candidates the gate's verifiers rejected on this lap, with reasons.
    pub rejected: Vec<verify::Rejected>,
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
            // The budget was written by this crate as JSON; anything else shows as null.
            budget: serde_json::from_str(&l.budget).unwrap_or(serde_json::Value::Null),
            rejected: l.rejected.as_deref().and_then(|r| serde_json::from_str(r).ok()).unwrap_or_default(),
        }
    }
}

/// A run with its laps.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Show {
    pub run_id: String,
    pub name: String,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// An agent-driven run's gate command (null for a memory-gated run).
    pub gate_cmd: Option<String>,
    /// The directory and environment its steps run the command with, recorded at `loop start`.
    pub gate_env: Option<crate::record::GateEnv>,
    pub laps: Vec<LapView>,
}

/// The status to show for a stored run: a `running` run whose process is gone is
/// `interrupted`; an agent-driven run past its deadline is `max_wallclock`. Computed on read,
/// so reads never write. A run started on another host (a shared PostgreSQL store) stays
/// `running`: its process cannot be checked from here.
pub fn effective_status(row: &RunRow) -> RunStatus {
    if command::expired(row) {
        RunStatus::MaxWallclock
    } else if row.status == RunStatus::Running && row.host.is_none() && !ledger::is_alive(row.pid, row.proc_start) {
        RunStatus::Interrupted
    } else {
        row.status
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
        .into_iter()
        .map(|r| HistoryRun {
            final_status: effective_status(&r),
            run_id: r.run_id,
            name: r.name,
            laps: r.laps,
            ts: r.started_at,
            ended_at: r.ended_at,
            reason: r.reason,
        })
        .collect();
    Ok(History { name: name.map(str::to_string), runs })
}

/// One run by id; an unknown run id is [`Error::NotFound`].
pub fn run_row(engine: &Engine, run_id: &str) -> Result<RunRow> {
    engine.store().run_get(run_id)?.ok_or_else(|| Error::NotFound { what: "run", id: run_id.to_string() })
}

/// Laps of a run numbered above `after_lap`, at most `limit`, in lap order.
pub fn laps(engine: &Engine, run_id: &str, after_lap: i64, limit: usize) -> Result<Vec<LapView>> {
    Ok(engine.store().run_laps_after(run_id, after_lap, limit)?.into_iter().map(LapView::from).collect())
}

/// `show(run_id, limit)`; an unknown run id is [`Error::NotFound`].
pub fn show(engine: &Engine, run_id: &str, limit: usize) -> Result<Show> {
    crate::memory::validate_limit("limit", limit, 10_000)?;
    let run = run_row(engine, run_id)?;
    let laps = laps(engine, run_id, 0, limit)?;
    let (gate_cmd, gate_env) = match &run.params.gate {
        GateSpec::Command { gate_cmd, gate_env, .. } => (Some(gate_cmd.clone()), gate_env.clone()),
        _ => (None, None),
    };
    Ok(Show { status: effective_status(&run), run_id: run.run_id, name: run.name, reason: run.reason, gate_cmd, gate_env, laps })
}

/// A page of runs newest first, with the cursor of the next page (`before`), if any.
pub fn runs_page(engine: &Engine, name: Option<&str>, limit: usize, before: Option<i64>) -> Result<(Vec<RunRow>, Option<i64>)> {
    if let Some(n) = name {
        params::validate_name(n)?;
    }
    let rows = engine.store().run_page(name, limit, before)?;
    let next = if rows.len() == limit { rows.last().map(|r| r.cursor) } else { None };
    Ok((rows.into_iter().map(|r| r.run).collect(), next))
}

/// A loop name with its number of runs and its newest run.
#[derive(Debug, Clone, Serialize)]
pub struct LoopSummary {
    pub name: String,
    pub runs: i64,
    pub last_run_id: String,
    pub last_status: Option<RunStatus>,
    pub last_started: Option<String>,
}

/// Every loop name, by newest run first.
pub fn loop_names(engine: &Engine, limit: usize) -> Result<Vec<LoopSummary>> {
    let store = engine.store();
    let mut out = Vec::new();
    for crate::storage::LoopName { name, runs, last_run_id } in store.loop_names(limit)? {
        let last = store.run_get(&last_run_id)?;
        out.push(LoopSummary {
            name,
            runs,
            last_run_id,
            last_status: last.as_ref().map(effective_status),
            last_started: last.map(|r| r.started_at),
        });
    }
    Ok(out)
}

/// What `cancel` did.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CancelOutcome {
    pub run_id: String,
    /// True when the run was running and has been asked to stop.
    pub requested: bool,
    /// The run's status when asked (`running`, or its final status).
    pub status: RunStatus,
}

/// Asks a running run (in any process) to stop; it ends `cancelled` at its next check.
pub fn cancel(engine: &Engine, run_id: &str) -> Result<CancelOutcome> {
    let row = run_row(engine, run_id)?;
    // An agent-driven run has no process polling for the flag: end it here.
    if command::is_command_run(&row) {
        let ended = engine.store().run_end_if_running(run_id, RunStatus::Cancelled, "cancelled by slm loop cancel")?;
        engine.announce(crate::feed::Topic::Control);
        let status = if ended { RunStatus::Cancelled } else { effective_status(&row) };
        return Ok(CancelOutcome { run_id: run_id.to_string(), requested: ended, status });
    }
    // Whether the run was asked is decided by what it was before the request: a run woken by
    // the feed can end `cancelled` before the row is read again.
    let requested = effective_status(&row) == RunStatus::Running;
    engine.store().run_request_cancel(run_id)?.ok_or_else(|| Error::NotFound { what: "run", id: run_id.to_string() })?;
    engine.announce(crate::feed::Topic::Control);
    let status = effective_status(&run_row(engine, run_id)?);
    Ok(CancelOutcome { run_id: run_id.to_string(), requested, status })
}
