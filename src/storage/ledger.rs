//! The loop ledger's rows as both stores hand them out: runs ([`RunRow`], [`PagedRun`],
//! [`LoopName`]), laps ([`LapRow`]) and what the loop engine writes ([`LapWrite`],
//! [`RunEnd`], [`StepWrite`]), with the column lists and SQL expressions the SQLite and
//! PostgreSQL ledgers share. The loop engine ([`crate::loops`]) decides what to record; the
//! backends (`sqlite/ledger.rs`, `pg/ledger.rs`) only know how.

use crate::record::{RunParams, RunStatus};
use crate::Result;

/// A run of a page of runs ([`crate::storage::LedgerRows::run_page`]) with its cursor: the next
/// page starts `before` the last one's.
#[derive(Debug, Clone)]
pub struct PagedRun {
    pub cursor: i64,
    pub run: RunRow,
}

/// A loop name with its number of runs and its newest run's id
/// ([`crate::storage::LedgerRows::loop_names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopName {
    pub name: String,
    pub runs: i64,
    pub last_run_id: String,
}

/// A run row as stored, typed: the status and the params are parsed once, here.
#[derive(Debug, Clone)]
pub struct RunRow {
    pub run_id: String,
    pub name: String,
    pub params: RunParams,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub laps: i64,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub pid: i64,
    pub proc_start: i64,
    pub result: Option<String>,
    /// Counters of an agent-driven run, carried between steps (JSON).
    pub state: Option<String>,
    /// The host that started the run when it is not this one (a shared PostgreSQL store):
    /// its process cannot be checked from here. `None`: this host (always, with SQLite).
    pub host: Option<String>,
}

/// A lap row as stored.
#[derive(Debug, Clone)]
pub struct LapRow {
    pub lap: i64,
    pub ts: String,
    pub decision: String,
    pub passed: bool,
    pub detail: String,
    pub score: Option<f64>,
    pub budget: String,
    pub memory_id: Option<i64>,
    /// Candidates the gate's verifiers rejected on this lap (JSON array), if any.
    pub rejected: Option<String>,
}

/// The columns [`lap_row`] reads, in its order.
pub(crate) const LAP_COLUMNS: &str = "lap, ts, decision, passed, detail, score, budget, memory_id, rejected";

/// One lap of a blocking run to record, with its ledger memory.
pub struct LapWrite<'a> {
    pub run_id: &'a str,
    pub lap: &'a LapRow,
    pub memory: super::NewRow<'a>,
}

/// The end of a run to record.
pub struct RunEnd<'a> {
    pub run_id: &'a str,
    pub status: RunStatus,
    pub reason: &'a str,
    pub laps: i64,
    /// The result JSON.
    pub result: &'a str,
}

/// A run's lap count as read (an SQL expression over `loop_runs`): a running run's is its
/// last lap, because the ledger writer does not update the run row on every lap (an idle lap
/// would touch the run's page too), only at the end. One probe of `loop_laps`' (run_id, lap)
/// key; the same SQL on SQLite and PostgreSQL.
macro_rules! run_laps {
    () => {
        "CASE WHEN status = 'running'
         THEN coalesce((SELECT max(l.lap) FROM loop_laps l WHERE l.run_id = loop_runs.run_id), laps)
         ELSE laps END"
    };
}
pub(crate) use run_laps;

/// The columns [`raw_run`] reads.
pub(crate) const RUN_COLUMNS: &str =
    concat!("run_id, name, params, status, reason, ", run_laps!(), ", started_at, ended_at, pid, proc_start, result, state");

/// The columns of [`RUN_COLUMNS`] before they are typed.
pub(crate) struct RawRun {
    pub(crate) run_id: String,
    pub(crate) name: String,
    pub(crate) params: String,
    pub(crate) status: String,
    pub(crate) reason: Option<String>,
    pub(crate) laps: i64,
    pub(crate) started_at: String,
    pub(crate) ended_at: Option<String>,
    pub(crate) pid: i64,
    pub(crate) proc_start: i64,
    pub(crate) result: Option<String>,
    pub(crate) state: Option<String>,
}

impl RawRun {
    /// Parses the status and params; a row that does not parse is an error naming the run.
    pub(crate) fn typed(self) -> Result<RunRow> {
        let status = RunStatus::parse(&self.status)
            .map_err(|_| crate::Error::Corrupt(format!("run {}: unknown status {:?}", self.run_id, self.status)))?;
        Ok(RunRow {
            params: RunParams::parse(&self.run_id, &self.params)?,
            status,
            run_id: self.run_id,
            name: self.name,
            reason: self.reason,
            laps: self.laps,
            started_at: self.started_at,
            ended_at: self.ended_at,
            pid: self.pid,
            proc_start: self.proc_start,
            result: self.result,
            state: self.state,
            host: None,
        })
    }
}

/// What a locked step decided: the lap to insert and the run row's new values.
pub struct StepWrite {
    pub lap: LapRow,
    pub state: String,
    /// Set when the run ends on this lap.
    pub end: Option<RunEnding>,
}

/// How a run ends on a locked step ([`StepWrite::end`]).
#[derive(Debug, Clone)]
pub struct RunEnding {
    pub status: RunStatus,
    pub reason: String,
    /// The result JSON.
    pub result: String,
}
