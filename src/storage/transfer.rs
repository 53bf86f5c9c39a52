//! SQL for moving a whole store: reading every memory, run and lap for `slm export`, and
//! writing run and lap records back for `slm import`.
//!
//! Export reads inside one read transaction, so the lines describe one committed state of the
//! store even while other processes write (WAL readers never block writers). Memories come in
//! id order, so an import stores them in the same order; laps name their ledger memory by
//! content and tags rather than by id, because ids are the importing store's own. Imported
//! records keep their run ids and are inserted only when absent, so importing the same export
//! twice stores everything once.

use rusqlite::{params, OptionalExtension};

use super::ledger::{lap_row, LAP_COLUMNS};
use super::{db_error, find_row, LapRow, SqliteStore};
use crate::memory::Kind;
use crate::Result;

/// One memory as exported.
pub struct MemoryOut {
    pub kind: Kind,
    pub content: String,
    pub tags: Vec<String>,
    pub created_at: String,
    /// Little-endian f32 bytes; empty for a ledger lap not embedded yet.
    pub embedding: Vec<u8>,
    /// When the memory expires (canonical UTC text); `None`: never.
    pub expires_at: Option<String>,
}

/// One run record as stored (its JSON columns as text).
#[derive(Debug, Clone, Default)]
pub struct RunOut {
    pub run_id: String,
    pub name: String,
    pub params: String,
    pub status: String,
    pub reason: Option<String>,
    pub laps: i64,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub cancel_requested: bool,
    pub result: Option<String>,
    pub state: Option<String>,
}

/// One lap record, with its ledger memory named by content and tags. `row.memory_id` is the
/// exporting store's id: an import ignores it and links the lap through `memory` instead.
#[derive(Debug, Clone)]
pub struct LapOut {
    pub run_id: String,
    pub row: LapRow,
    pub memory: Option<(String, Vec<String>)>,
}

/// What an export visitor is handed, in this order: every memory, then every run, then every lap.
pub enum ExportItem {
    Memory(MemoryOut),
    Run(RunOut),
    Lap(LapOut),
}

/// The tags of a row as both stores' queries aggregate them (one per line; none = NULL).
pub(crate) fn split_tags(t: Option<String>) -> Vec<String> {
    t.map(|t| t.split('\n').map(str::to_string).collect()).unwrap_or_default()
}

impl SqliteStore {
    /// Visits the whole store in one read transaction.
    pub fn export(&mut self, visit: &mut dyn FnMut(ExportItem) -> Result<()>) -> Result<()> {
        let path = self.path.clone();
        let err = |e| db_error(&path, e);
        let tx = self.conn.transaction().map_err(err)?;
        {
            let mut st = tx
                .prepare(
                    "SELECT m.kind, m.content, m.created_at, m.embedding,
                            (SELECT group_concat(tag, char(10)) FROM (SELECT tag FROM memory_tags WHERE memory_id = m.id ORDER BY tag)),
                            m.expires_at
                     FROM memories m ORDER BY m.id",
                )
                .map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            while let Some(r) = rows.next().map_err(err)? {
                let kind: String = r.get(0).map_err(err)?;
                visit(ExportItem::Memory(MemoryOut {
                    kind: Kind::parse(&kind)?,
                    content: r.get(1).map_err(err)?,
                    created_at: r.get(2).map_err(err)?,
                    embedding: r.get(3).map_err(err)?,
                    tags: split_tags(r.get(4).map_err(err)?),
                    expires_at: r.get(5).map_err(err)?,
                }))?;
            }
        }
        {
            let mut st = tx
                .prepare(concat!(
                    "SELECT run_id, name, params, status, reason, ",
                    crate::storage::ledger::run_laps!(),
                    ", started_at, ended_at, cancel_requested, result, state FROM loop_runs ORDER BY rowid"
                ))
                .map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            while let Some(r) = rows.next().map_err(err)? {
                visit(ExportItem::Run(RunOut {
                    run_id: r.get(0).map_err(err)?,
                    name: r.get(1).map_err(err)?,
                    params: r.get(2).map_err(err)?,
                    status: r.get(3).map_err(err)?,
                    reason: r.get(4).map_err(err)?,
                    laps: r.get(5).map_err(err)?,
                    started_at: r.get(6).map_err(err)?,
                    ended_at: r.get(7).map_err(err)?,
                    cancel_requested: r.get::<_, i64>(8).map_err(err)? != 0,
                    result: r.get(9).map_err(err)?,
                    state: r.get(10).map_err(err)?,
                }))?;
            }
        }
        {
            // The lap's own columns first, as `lap_row` reads them (prefixed for the join).
            let lap_columns: Vec<String> = LAP_COLUMNS.split(", ").map(|c| format!("l.{c}")).collect();
            let mut st = tx
                .prepare(&format!(
                    "SELECT {}, l.run_id, m.content,
                            (SELECT group_concat(tag, char(10)) FROM (SELECT tag FROM memory_tags WHERE memory_id = m.id ORDER BY tag))
                     FROM loop_laps l LEFT JOIN memories m ON m.id = l.memory_id
                     ORDER BY l.run_id, l.lap",
                    lap_columns.join(", ")
                ))
                .map_err(err)?;
            let mut rows = st.query([]).map_err(err)?;
            while let Some(r) = rows.next().map_err(err)? {
                let content: Option<String> = r.get(10).map_err(err)?;
                let tags = split_tags(r.get(11).map_err(err)?);
                visit(ExportItem::Lap(LapOut {
                    row: lap_row(r).map_err(err)?,
                    run_id: r.get(9).map_err(err)?,
                    memory: content.map(|c| (c, tags)),
                }))?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(())
    }

    /// Stores an imported run unless its id is already stored; true when it was stored. The
    /// owner is recorded as pid 0, which no process has: a run exported while `running` reads
    /// as `interrupted` here, which is what it is.
    pub fn run_import(&mut self, run: &RunOut) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "INSERT INTO loop_runs(run_id, name, params, status, reason, laps, started_at, ended_at, pid, proc_start,
                                       cancel_requested, result, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, 0, ?9, ?10, ?11) ON CONFLICT(run_id) DO NOTHING",
                params![
                    run.run_id,
                    run.name,
                    run.params,
                    run.status,
                    run.reason,
                    run.laps,
                    run.started_at,
                    run.ended_at,
                    run.cancel_requested as i64,
                    run.result,
                    run.state
                ],
            )
            .map_err(|e| self.err(e))?;
        self.committed();
        Ok(n == 1)
    }

    /// Stores an imported lap unless (run, lap) is already stored, linked to its ledger memory
    /// when one with that content and those (normalised) tags is stored; true when stored.
    pub fn lap_import(&mut self, lap: &LapOut) -> Result<bool> {
        let memory_id = match &lap.memory {
            Some((content, tags)) => find_row(|k| self.find_dedup(k), Kind::Lap, content, tags, Some(&lap.row.ts))?,
            None => None,
        };
        let exists: Option<i64> = self
            .conn
            .query_row("SELECT 1 FROM loop_runs WHERE run_id = ?1", [&lap.run_id], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        if exists.is_none() {
            return Err(crate::Error::invalid("loop_lap.run_id", &lap.run_id, "must name a run stored earlier in the import"));
        }
        let n = self
            .conn
            .execute(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT(run_id, lap) DO NOTHING",
                params![
                    lap.run_id,
                    lap.row.lap,
                    lap.row.ts,
                    lap.row.decision,
                    lap.row.passed as i64,
                    lap.row.detail,
                    lap.row.score,
                    lap.row.budget,
                    memory_id,
                    lap.row.rejected
                ],
            )
            .map_err(|e| self.err(e))?;
        self.committed();
        Ok(n == 1)
    }
}
