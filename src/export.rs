//! `slm export`: the whole store as JSON Lines that `slm import` reads back (SPEC §1).
//!
//! Three kinds of line, in this order:
//! - a memory: `{"content", "tags", "kind", "created_at", "expires_at" (when set), "embedding"}`, in id order, the very
//!   line format `slm import` takes (`kind` and `created_at` optional there); the embedding is
//!   left out for a ledger lap not embedded yet, which the importing store then embeds later;
//! - `{"loop_run": {run_id, name, params, status, reason, laps, started_at, ended_at,
//!   cancel_requested, result, state}}`;
//! - `{"loop_lap": {run_id, lap, ts, decision, passed, detail, score, budget, rejected,
//!   memory: {content, tags} | null}}`, its ledger memory named by content and tags, since
//!   ids belong to each store.
//!
//! JSON columns (params, result, state, budget, rejected) are written as JSON values, not as
//! strings holding JSON. The owner of a run (pid, process start) is not exported: it means
//! nothing on another machine, and an imported `running` run reads as `interrupted`.

use std::io::Write;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::Engine;
use crate::storage::{ExportItem, LapOut, LapRow, RunOut};
use crate::{Error, Result};

/// A memory line (export writes every field; import requires only `content`).
#[derive(Serialize)]
struct MemoryLine<'a> {
    content: &'a str,
    tags: &'a [String],
    kind: &'a str,
    created_at: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expires_at: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedding: Option<Vec<f32>>,
}

/// A run record line's body.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunLine {
    pub run_id: String,
    pub name: String,
    pub params: Value,
    pub status: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub laps: i64,
    pub started_at: String,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub cancel_requested: bool,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub state: Option<Value>,
}

/// A lap's ledger memory, named by what identifies it in any store.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LapMemory {
    pub content: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A lap record line's body.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LapLine {
    pub run_id: String,
    pub lap: i64,
    pub ts: String,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    #[serde(default)]
    pub score: Option<f64>,
    pub budget: Value,
    #[serde(default)]
    pub rejected: Option<Value>,
    #[serde(default)]
    pub memory: Option<LapMemory>,
}

/// A record line: `{"loop_run": {...}}` or `{"loop_lap": {...}}`.
#[derive(Serialize, Deserialize)]
pub enum Record {
    #[serde(rename = "loop_run")]
    Run(RunLine),
    #[serde(rename = "loop_lap")]
    Lap(LapLine),
}

/// What an export wrote.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ExportSummary {
    pub memories: u64,
    pub runs: u64,
    pub laps: u64,
}

/// A JSON column as a JSON value; text that is not JSON stays a string.
fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// The stored text of a JSON column read back from an export line.
fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl From<RunLine> for RunOut {
    fn from(r: RunLine) -> RunOut {
        RunOut {
            run_id: r.run_id,
            name: r.name,
            params: json_text(&r.params),
            status: r.status,
            reason: r.reason,
            laps: r.laps,
            started_at: r.started_at,
            ended_at: r.ended_at,
            cancel_requested: r.cancel_requested,
            result: r.result.as_ref().map(json_text),
            state: r.state.as_ref().map(json_text),
        }
    }
}

impl From<LapLine> for LapOut {
    fn from(l: LapLine) -> LapOut {
        LapOut {
            run_id: l.run_id,
            row: LapRow {
                lap: l.lap,
                ts: l.ts,
                decision: l.decision,
                passed: l.passed,
                detail: l.detail,
                score: l.score,
                budget: json_text(&l.budget),
                rejected: l.rejected.as_ref().map(json_text),
                memory_id: None,
            },
            memory: l.memory.map(|m| crate::storage::LapMemoryRef { content: m.content, tags: m.tags }),
        }
    }
}

/// Writes the whole store to `out` as JSON Lines.
pub fn export_jsonl(engine: &Engine, out: &mut dyn Write) -> Result<ExportSummary> {
    let mut summary = ExportSummary::default();
    let io = |e: std::io::Error| Error::io("cannot write the export", e);
    engine.export(&mut |item| {
        let line = match item {
            ExportItem::Memory(m) => {
                summary.memories += 1;
                let embedding = if m.embedding.is_empty() { None } else { Some(crate::spaces::from_blob(&m.embedding)?) };
                serde_json::to_string(&MemoryLine {
                    content: &m.content,
                    tags: &m.tags,
                    kind: m.kind.as_str(),
                    created_at: &m.created_at,
                    expires_at: m.expires_at.as_deref(),
                    embedding,
                })
            }
            ExportItem::Run(r) => {
                summary.runs += 1;
                serde_json::to_string(&Record::Run(RunLine {
                    params: json_value(&r.params),
                    result: r.result.as_deref().map(json_value),
                    state: r.state.as_deref().map(json_value),
                    run_id: r.run_id,
                    name: r.name,
                    status: r.status,
                    reason: r.reason,
                    laps: r.laps,
                    started_at: r.started_at,
                    ended_at: r.ended_at,
                    cancel_requested: r.cancel_requested,
                }))
            }
            ExportItem::Lap(l) => {
                summary.laps += 1;
                let LapOut { run_id, row, memory } = l;
                serde_json::to_string(&Record::Lap(LapLine {
                    budget: json_value(&row.budget),
                    rejected: row.rejected.as_deref().map(json_value),
                    memory: memory.map(|m| LapMemory { content: m.content, tags: m.tags }),
                    run_id,
                    lap: row.lap,
                    ts: row.ts,
                    decision: row.decision,
                    passed: row.passed,
                    detail: row.detail,
                    score: row.score,
                }))
            }
        }
        .map_err(|e| Error::Internal(format!("cannot encode an export line: {e}")))?;
        out.write_all(line.as_bytes()).map_err(io)?;
        out.write_all(b"\n").map_err(io)
    })?;
    out.flush().map_err(io)?;
    Ok(summary)
}
