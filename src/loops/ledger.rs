//! The durable ledger of a run: its run row, and one lap row plus one `kind = lap` memory per
//! lap (tagged `loop`, `loop:<name>` and `run:<suffix>`, so `slm recall --tag loop:<name>`
//! finds it).
//!
//! Writes are fail-open: an error is logged and counted in `ledger_errors`, and the loop goes
//! on. The gate is the correctness guarantee; the ledger is observability.

use sha2::{Digest, Sha256};

use super::run::RunResult;
use crate::engine::Engine;
use crate::memory::{now_rfc3339, Kind};
use crate::storage::{LapRow, RunRow};
use super::gate::Observation;

/// The text of a lap's ledger memory: embedded for recall and counted as tokens. It holds no
/// run id or clock, so its token count is predictable from the name, lap and detail.
pub fn lap_text(name: &str, lap: i64, detail: &str) -> String {
    format!("loop {name} lap {lap}: {detail}")
}

/// The tags of a lap's ledger memory: `loop`, `loop:<name>` and `run:<suffix>` (sorted, as the
/// store keeps them). The run tag keeps identical lap texts of different runs apart.
pub fn lap_tags(name: &str, run_id: &str) -> Vec<String> {
    let suffix = run_id.strip_prefix(name).and_then(|r| r.strip_prefix('-')).unwrap_or(run_id);
    let mut tags = vec!["loop".to_string(), format!("loop:{name}"), format!("run:{suffix}")];
    tags.sort();
    tags
}

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

/// The ledger of one run in progress.
pub struct Ledger<'e> {
    engine: &'e Engine,
    run_id: String,
    tags: Vec<String>,
    errors: u64,
}

impl<'e> Ledger<'e> {
    /// Records the run as `running` (fail-open).
    pub fn start(engine: &'e Engine, name: &str, params: &serde_json::Value) -> crate::Result<Self> {
        let run_id = new_run_id(name);
        let tags = lap_tags(name, &run_id);
        let mut ledger = Ledger { engine, run_id, tags, errors: 0 };
        let pid = std::process::id();
        let row = RunRow {
            run_id: ledger.run_id.clone(),
            name: name.to_string(),
            params: params.to_string(),
            status: "running".into(),
            reason: None,
            laps: 0,
            started_at: now_rfc3339(),
            ended_at: None,
            pid: i64::from(pid),
            proc_start: process_start(pid).unwrap_or(0),
            result: None,
            state: None,
        };
        let r = engine.store().run_start(&row);
        ledger.check(r);
        Ok(ledger)
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    fn check<T>(&mut self, r: crate::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors += 1;
                tracing::warn!(run_id = %self.run_id, "ledger write failed: {e}");
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

    /// Records a lap: its memory (embedded) and its structured row (fail-open).
    pub fn record_lap(&mut self, lap: i64, decision: &str, obs: &Observation, text: &str, budget: &serde_json::Value) {
        let r = self.engine.insert_rows(Kind::Lap, &[(text, self.tags.clone())]);
        let memory_id = self.check(r).and_then(|v| v.first().map(|m| m.id));
        let row = LapRow {
            lap,
            ts: now_rfc3339(),
            decision: decision.to_string(),
            passed: obs.passed,
            detail: obs.detail.clone(),
            score: obs.best_score.map(f64::from),
            budget: budget.to_string(),
            memory_id,
        };
        let r = self.engine.store().lap_insert(&self.run_id, &row);
        self.check(r);
    }

    /// Records the end of the run and returns the result with `ledger_errors` filled in.
    pub fn finish(mut self, mut result: RunResult) -> RunResult {
        result.termination.ledger_errors = self.errors;
        let json = serde_json::to_string(&result).unwrap_or_default();
        let r = self.engine.store().run_finish(&self.run_id, result.status.as_str(), &result.reason, result.laps, &json);
        if self.check(r).is_none() {
            result.termination.ledger_errors = self.errors;
        }
        result
    }
}
