//! What a run returns and what it reports while it goes: [`RunResult`] (SPEC §2 "Result of a
//! run"), its [`Termination`], and the [`LapEvent`] a live observer receives once per lap.
//! Shared by every surface; kept apart from the runner and the ledger so neither imports the
//! other for it.

use serde::Serialize;

use super::params::{Clamp, Limits, Note};
use super::verify::Rejected;
use crate::memory::Hit;
use crate::record::RunStatus;

/// Why and how a run ended.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Termination {
    pub elapsed_s: f64,
    pub tokens_used: u64,
    pub best_score: Option<f32>,
    pub best_memory_id: Option<i64>,
    pub limits: Limits,
    pub clamped: Vec<Clamp>,
    /// What the applied bounds imply that the caller may not expect (e.g. a wall-clock the
    /// laps can never wait out).
    pub notes: Vec<Note>,
    pub ledger_errors: u64,
    /// Candidates the gate's verifiers rejected over the whole run.
    pub rejected_candidates: u64,
}

/// The memory that passed the gate, and the verifiers that accepted it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Match {
    #[serde(flatten)]
    pub hit: Hit,
    /// The verifiers that accepted it (empty: plain cosine, `none`).
    pub verified_by: Vec<String>,
}

/// The result of a run, shared by every surface (SPEC §2 "Result of a run").
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RunResult {
    pub ok: bool,
    pub status: RunStatus,
    pub reason: String,
    pub laps: i64,
    pub run_id: String,
    pub termination: Termination,
    /// The memory that ended the run: with one gate, the best that passed it; with several,
    /// the best of the first gate (in the run's order) that passed.
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub matched: Option<Match>,
    /// Per gate, in the run's order: the memories that passed it, best first, and whether it
    /// passed (empty for the demo's stub gate).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<GateMatches>,
}

/// One gate of a run and the memories that passed it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct GateMatches {
    /// 1-based, in the run's order.
    pub gate: usize,
    /// Its query (absent for a tag-only gate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    pub tags: Vec<String>,
    /// How many distinct memories had to pass it.
    pub count: u32,
    pub passed: bool,
    /// Best first.
    pub memories: Vec<Match>,
}

/// One lap as reported to a live observer (the CLI prints these as they happen; MCP sends
/// them as progress notifications).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct LapEvent {
    pub run_id: String,
    pub lap: i64,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    pub score: Option<f32>,
    pub budget: serde_json::Value,
    /// Candidates the gate's verifiers rejected on this lap.
    pub rejected: Vec<Rejected>,
}
