//! One run of a bounded loop: laps, bounds, the ledger, cancellation.
//!
//! The order of checks after each lap is SPEC §2's: gate passed → `converged`; lap ==
//! max_iterations → `max_iterations`; tokens ≥ max_tokens → `max_tokens`; observation
//! unchanged for `no_progress_window` laps → `no_progress`; deadline reached →
//! `max_wallclock`. Between laps the runner sleeps in slices of at most [`CANCEL_SLICE`],
//! checking the in-process cancel flag and the run's row (for `slm loop cancel` from another
//! process), and never past the deadline; at the deadline one last lap is evaluated.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::gate::{Gate, Observation};
use super::ledger::{self, Ledger};
use super::params::{Clamp, Limits};
use super::Status;
use crate::engine::Engine;
use crate::memory::Hit;
use crate::Result;

/// Longest sleep between two cancellation checks.
pub const CANCEL_SLICE: Duration = Duration::from_millis(40);

/// Why and how a run ended.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Termination {
    pub elapsed_s: f64,
    pub tokens_used: u64,
    pub best_score: Option<f32>,
    pub best_memory_id: Option<i64>,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    pub ledger_errors: u64,
}

/// The result of a run, shared by every surface (SPEC §2 "Result of a run").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunResult {
    pub ok: bool,
    pub status: Status,
    pub reason: String,
    pub laps: i64,
    pub run_id: String,
    pub termination: Termination,
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub matched: Option<Hit>,
}

/// One lap as reported to a live observer (the CLI prints these as they happen).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LapEvent {
    pub run_id: String,
    pub lap: i64,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    pub score: Option<f32>,
    pub budget: serde_json::Value,
}

/// Ways to stop a run from outside: a flag (Ctrl-C, MCP cancel) checked with the ledger row.
#[derive(Debug, Default)]
pub struct Cancel {
    pub flag: AtomicBool,
}

impl Cancel {
    pub fn requested(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
    pub fn request(&self) {
        self.flag.store(true, Ordering::Release);
    }
}

/// Everything a run needs besides the gate.
pub struct RunSpec<'a> {
    pub name: &'a str,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    /// Recorded with the run (gate settings), beside the limits.
    pub params: serde_json::Value,
}

/// The terminal status a lap reaches, if any, checked in SPEC §2's order: gate passed →
/// `converged`; lap = max_iterations → `max_iterations`; tokens ≥ max_tokens (when set) →
/// `max_tokens`; `stalled` ≥ no_progress_window (when set) → `no_progress`; deadline reached →
/// `max_wallclock`. Shared by memory-gated runs and agent-driven steps.
pub fn decide(l: &Limits, passed: bool, lap: i64, tokens: u64, stalled: i64, past_deadline: bool) -> Option<Status> {
    if passed {
        Some(Status::Converged)
    } else if lap >= l.max_iterations {
        Some(Status::MaxIterations)
    } else if l.max_tokens > 0 && tokens >= l.max_tokens as u64 {
        Some(Status::MaxTokens)
    } else if l.no_progress_window > 0 && stalled >= l.no_progress_window {
        Some(Status::NoProgress)
    } else if past_deadline {
        Some(Status::MaxWallclock)
    } else {
        None
    }
}

/// Runs a loop to a terminal status. Invalid input must have been rejected before (see
/// [`super::params`]); errors returned here are internal failures of the gate.
pub fn run(
    engine: &Engine,
    spec: RunSpec<'_>,
    gate: &mut dyn Gate,
    cancel: &Cancel,
    on_lap: &mut dyn FnMut(&LapEvent),
) -> Result<RunResult> {
    let started = Instant::now();
    let limits = spec.limits.clone();
    let deadline = started + Duration::from_secs_f64(limits.max_wallclock_s);
    let mut ledger = Ledger::start(engine, spec.name, &json!({"limits": limits, "gate": spec.params}))?;
    let mut tokens: u64 = 0;
    let mut stalled: i64 = 0;
    let mut last: Option<Observation> = None;
    let mut lap: i64 = 0;
    let (status, obs) = loop {
        lap += 1;
        let obs = gate.observe(lap)?;
        if lap == 1 {
            tokens += gate.setup_tokens();
        }
        let text = ledger::lap_text(spec.name, lap, &obs.detail);
        tokens += ledger.count_tokens(&text);
        if let Some(prev) = &last {
            stalled = if prev.fingerprint() == obs.fingerprint() { stalled + 1 } else { 0 };
        }
        let status = decide(&limits, obs.passed, lap, tokens, stalled, Instant::now() >= deadline);
        let decision = status.map_or("continue", Status::as_str);
        let budget = json!({
            "tokens_used": tokens, "max_tokens": limits.max_tokens,
            "elapsed_s": round3(started.elapsed().as_secs_f64()), "max_wallclock_s": limits.max_wallclock_s,
        });
        ledger.record_lap(lap, decision, &obs, &text, &budget);
        on_lap(&LapEvent {
            run_id: ledger.run_id().to_string(),
            lap,
            decision: decision.to_string(),
            passed: obs.passed,
            detail: obs.detail.clone(),
            score: obs.best_score,
            budget,
        });
        if let Some(s) = status {
            break (s, obs);
        }
        let wake = (Instant::now() + Duration::from_secs_f64(limits.poll_interval_s)).min(deadline);
        if sleep_until(engine, ledger.run_id(), cancel, wake) {
            break (Status::Cancelled, obs);
        }
        last = Some(obs);
    };
    let reason = reason(status, lap, &obs, &limits, tokens);
    let matched = match (status, obs.best_memory_id) {
        (Status::Converged, Some(id)) => engine.get(&[id])?.into_iter().next().map(|m| Hit {
            id: m.id,
            content: m.content,
            tags: m.tags,
            score: obs.best_score.unwrap_or_default(),
            created_at: m.created_at,
            kind: m.kind,
        }),
        _ => None,
    };
    let result = RunResult {
        ok: true,
        status,
        reason,
        laps: lap,
        run_id: ledger.run_id().to_string(),
        termination: Termination {
            elapsed_s: round3(started.elapsed().as_secs_f64()),
            tokens_used: tokens,
            best_score: obs.best_score,
            best_memory_id: obs.best_memory_id,
            limits,
            clamped: spec.clamped,
            ledger_errors: 0,
        },
        matched,
    };
    Ok(ledger.finish(result))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Sleeps until `until`, waking every [`CANCEL_SLICE`] to check for cancellation. Returns
/// true when the run was cancelled.
fn sleep_until(engine: &Engine, run_id: &str, cancel: &Cancel, until: Instant) -> bool {
    loop {
        if cancel.requested() || engine.store().run_cancel_requested(run_id).unwrap_or(false) {
            return true;
        }
        let now = Instant::now();
        if now >= until {
            return false;
        }
        std::thread::sleep((until - now).min(CANCEL_SLICE));
    }
}

fn reason(status: Status, lap: i64, obs: &Observation, limits: &Limits, tokens: u64) -> String {
    match status {
        Status::Converged => format!("the gate passed on lap {lap}: {}", obs.detail),
        Status::MaxIterations => format!("stopped after {lap} laps (max_iterations); the gate never passed"),
        Status::MaxTokens => format!("stopped on lap {lap}: {tokens} tokens used, limit {}", limits.max_tokens),
        Status::NoProgress => format!(
            "stopped on lap {lap}: the gate observation did not change for {} laps",
            limits.no_progress_window
        ),
        Status::MaxWallclock => {
            format!("stopped on lap {lap}: the {} s wall-clock limit was reached", limits.max_wallclock_s)
        }
        Status::Cancelled => format!("cancelled after {lap} laps"),
        Status::Interrupted => "the process running this loop died".to_string(),
    }
}
