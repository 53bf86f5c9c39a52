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

use super::ledger::lap_row;
use super::{db_error, SqliteStore};
use crate::memory::Kind;
use crate::storage::ledger::LAP_COLUMNS;
use crate::storage::transfer::split_tags;
use crate::storage::{ExportItem, LapMemoryRef, LapOut, LapRow, MemoryOut, RunOut, TransferRows};
use crate::Result;

impl TransferRows for SqliteStore {
    fn run_exists(&self, run_id: &str) -> Result<bool> {
        let found: Option<i64> =
            self.conn.query_row("SELECT 1 FROM loop_runs WHERE run_id = ?1", [run_id], |r| r.get(0)).optional().map_err(|e| self.err(e))?;
        Ok(found.is_some())
    }

    fn lap_import_row(&mut self, run_id: &str, row: &LapRow, memory_id: Option<i64>) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT(run_id, lap) DO NOTHING",
                params![
                    run_id,
                    row.lap,
                    row.ts,
                    row.decision,
                    row.passed as i64,
                    row.detail,
                    row.score,
                    row.budget,
                    memory_id,
                    row.rejected
                ],
            )
            .map_err(|e| self.err(e))?;
        self.committed();
        Ok(n == 1)
    }

    /// Visits the whole store in one read transaction.
    fn export(&mut self, visit: &mut dyn FnMut(ExportItem) -> Result<()>) -> Result<()> {
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
                    memory: content.map(|content| LapMemoryRef { content, tags }),
                }))?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(())
    }

    /// Stores an imported run unless its id is already stored; true when it was stored. The
    /// owner is recorded as pid 0, which no process has: a run exported while `running` reads
    /// as `interrupted` here, which is what it is.
    fn run_import(&mut self, run: &RunOut) -> Result<bool> {
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
}
