//! Moving a whole store on PostgreSQL: the export reads in one `REPEATABLE READ` transaction
//! (one committed state, as SQLite's read transaction gives), and imported run and lap records
//! are inserted only when absent, with the meanings of the SQLite store's `transfer`.

use super::ledger::{lap_row, LAP_COLUMNS};
use super::{pg_error, PgStore};
use crate::memory::Kind;
use crate::storage::transfer::split_tags;
use crate::storage::{ExportItem, LapMemoryRef, LapOut, LapRow, MemoryOut, RunOut, TransferRows};
use crate::Result;

impl TransferRows for PgStore {
    fn run_exists(&self, run_id: &str) -> Result<bool> {
        let found = self.client()?.query_opt("SELECT 1 FROM loop_runs WHERE run_id = $1", &[&run_id]).map_err(|e| self.err(e))?;
        Ok(found.is_some())
    }

    fn lap_import_row(&mut self, run_id: &str, row: &LapRow, memory_id: Option<i64>) -> Result<bool> {
        let n = self
            .client()?
            .execute(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (run_id, lap) DO NOTHING",
                &[&run_id, &row.lap, &row.ts, &row.decision, &row.passed, &row.detail, &row.score, &row.budget, &memory_id, &row.rejected],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    fn export(&mut self, visit: &mut dyn FnMut(ExportItem) -> Result<()>) -> Result<()> {
        let store = self.url.redacted().to_string();
        let pg = |e: ::postgres::Error| pg_error(&store, &e);
        let mut c = self.client()?;
        let mut tx =
            c.build_transaction().isolation_level(::postgres::IsolationLevel::RepeatableRead).read_only(true).start().map_err(pg)?;
        for r in tx
            .query(
                "SELECT m.kind, m.content, m.created_at, m.embedding,
                        (SELECT string_agg(tag, E'\\n' ORDER BY tag) FROM memory_tags WHERE memory_id = m.id), m.expires_at
                 FROM memories m ORDER BY m.id",
                &[],
            )
            .map_err(pg)?
        {
            let kind: &str = r.get(0);
            visit(ExportItem::Memory(MemoryOut {
                kind: Kind::parse(kind)?,
                content: r.get(1),
                created_at: r.get(2),
                embedding: r.get(3),
                tags: split_tags(r.get(4)),
                expires_at: r.get(5),
            }))?;
        }
        for r in tx
            .query(
                concat!(
                    "SELECT run_id, name, params, status, reason, ",
                    crate::storage::ledger::run_laps!(),
                    ", started_at, ended_at, cancel_requested, result, state FROM loop_runs ORDER BY seq"
                ),
                &[],
            )
            .map_err(pg)?
        {
            visit(ExportItem::Run(RunOut {
                run_id: r.get(0),
                name: r.get(1),
                params: r.get(2),
                status: r.get(3),
                reason: r.get(4),
                laps: r.get(5),
                started_at: r.get(6),
                ended_at: r.get(7),
                cancel_requested: r.get(8),
                result: r.get(9),
                state: r.get(10),
            }))?;
        }
        // The lap's own columns first, as `lap_row` reads them (prefixed for the join).
        let lap_columns: Vec<String> = LAP_COLUMNS.split(", ").map(|c| format!("l.{c}")).collect();
        for r in tx
            .query(
                &format!(
                    "SELECT {}, l.run_id, m.content,
                            (SELECT string_agg(tag, E'\\n' ORDER BY tag) FROM memory_tags WHERE memory_id = m.id)
                     FROM loop_laps l LEFT JOIN memories m ON m.id = l.memory_id
                     ORDER BY l.run_id COLLATE \"C\", l.lap",
                    lap_columns.join(", ")
                ),
                &[],
            )
            .map_err(pg)?
        {
            let content: Option<String> = r.get(10);
            let tags = split_tags(r.get(11));
            visit(ExportItem::Lap(LapOut {
                row: lap_row(&r),
                run_id: r.get(9),
                memory: content.map(|content| LapMemoryRef { content, tags }),
            }))?;
        }
        tx.commit().map_err(pg)
    }

    /// Stores an imported run unless its id is stored (owner: pid 0 on this host).
    fn run_import(&mut self, run: &RunOut) -> Result<bool> {
        let n = self
            .client()?
            .execute(
                "INSERT INTO loop_runs(run_id, name, params, status, reason, laps, started_at, ended_at, host, pid, proc_start,
                                       cancel_requested, result, state)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, 0, $10, $11, $12) ON CONFLICT (run_id) DO NOTHING",
                &[
                    &run.run_id,
                    &run.name,
                    &run.params,
                    &run.status,
                    &run.reason,
                    &run.laps,
                    &run.started_at,
                    &run.ended_at,
                    &self.host,
                    &run.cancel_requested,
                    &run.result,
                    &run.state,
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }
}
