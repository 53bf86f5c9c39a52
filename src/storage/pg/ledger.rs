//! The loop ledger on PostgreSQL: run and lap records with the meanings of
//! [`crate::storage::SqliteStore`]'s. Runs carry the host that started them, so a run owned
//! by a process on another host is never judged dead by a pid lookup here.

use ::postgres::Row;

use super::{begin_inserts, insert_row, notify, pg_error, PgStore};
use crate::feed::Topic;
use crate::record::RunStatus;
pub(super) use crate::storage::ledger::LAP_COLUMNS;
use crate::storage::ledger::{RawRun, RunEnding, RUN_COLUMNS};
use crate::storage::LedgerRows;
use crate::storage::{LapRow, LapWrite, LoopName, PagedRun, RunEnd, RunRow, StepWrite};
use crate::Result;

impl PgStore {
    /// The typed run of a row of `RUN_COLUMNS, host`.
    fn run_row(&self, r: &Row) -> Result<RunRow> {
        let mut row = RawRun {
            run_id: r.get(0),
            name: r.get(1),
            params: r.get(2),
            status: r.get(3),
            reason: r.get(4),
            laps: r.get(5),
            started_at: r.get(6),
            ended_at: r.get(7),
            pid: r.get(8),
            proc_start: r.get(9),
            result: r.get(10),
            state: r.get(11),
        }
        .typed()?;
        let host: String = r.get(12);
        row.host = (host != self.host).then_some(host);
        Ok(row)
    }
}

/// Reads a lap from the first columns of a row selected with `LAP_COLUMNS`.
pub(super) fn lap_row(r: &::postgres::Row) -> LapRow {
    LapRow {
        lap: r.get(0),
        ts: r.get(1),
        decision: r.get(2),
        passed: r.get(3),
        detail: r.get(4),
        score: r.get(5),
        budget: r.get(6),
        memory_id: r.get(7),
        rejected: r.get(8),
    }
}

impl LedgerRows for PgStore {
    /// One step of an agent-driven run, atomically: the run row is read `FOR UPDATE`, so
    /// concurrent steps on any host number their laps one after another.
    fn step_locked_with(&mut self, run_id: &str, decide: &mut dyn FnMut(RunRow) -> Result<StepWrite>) -> Result<()> {
        let store = self.url.redacted().to_string();
        let pg = |e: ::postgres::Error| pg_error(&store, &e);
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(pg)?;
        let row = tx
            .query_opt(&format!("SELECT {RUN_COLUMNS}, host FROM loop_runs WHERE run_id = $1 FOR UPDATE"), &[&run_id])
            .map_err(pg)?
            .ok_or_else(|| crate::Error::NotFound { what: "run", id: run_id.to_string() })?;
        let run = self.run_row(&row)?;
        let w = decide(run)?;
        tx.execute(
            "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL)",
            &[&run_id, &w.lap.lap, &w.lap.ts, &w.lap.decision, &w.lap.passed, &w.lap.detail, &w.lap.score, &w.lap.budget],
        )
        .map_err(pg)?;
        tx.execute("UPDATE loop_runs SET laps = $2, state = $3 WHERE run_id = $1", &[&run_id, &w.lap.lap, &w.state]).map_err(pg)?;
        if let Some(RunEnding { status, reason, result }) = &w.end {
            tx.execute(
                "UPDATE loop_runs SET status = $2, reason = $3, ended_at = $4, result = $5 WHERE run_id = $1",
                &[&run_id, &status.as_str(), reason, &crate::memory::now_rfc3339(), result],
            )
            .map_err(pg)?;
        }
        notify(&mut tx, Topic::Ledger).map_err(pg)?;
        tx.commit().map_err(pg)?;
        Ok(())
    }

    fn laps_record(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        self.laps_insert_with_memory(laps)
    }

    fn run_start(&mut self, run: &RunRow) -> Result<()> {
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO loop_runs(run_id, name, params, status, started_at, host, pid, proc_start, state)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &run.run_id,
                    &run.name,
                    &run.params.to_json(),
                    &RunStatus::Running.as_str(),
                    &run.started_at,
                    &self.host,
                    &run.pid,
                    &run.proc_start,
                    &run.state,
                ],
            )?;
            notify(&mut tx, Topic::Ledger)?;
            tx.commit()
        })();
        r.map_err(|e| pg_error(self.url.redacted(), &e))
    }

    /// Records laps of blocking runs with their ledger memories, in one transaction (which
    /// inserts memories, so it holds the id lock). The run row is left alone: a running run's
    /// lap count is read from its laps (`run_laps!`), as on SQLite.
    fn laps_insert_with_memory(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = begin_inserts(&mut c)?;
            for w in laps {
                let id = insert_row(&mut tx, &w.memory, &w.lap.ts)?.id;
                let l = w.lap;
                tx.execute(
                    "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    &[&w.run_id, &l.lap, &l.ts, &l.decision, &l.passed, &l.detail, &l.score, &l.budget, &id, &l.rejected],
                )?;
            }
            notify(&mut tx, Topic::Ledger)?;
            tx.commit()
        })();
        r.map_err(|e| pg_error(self.url.redacted(), &e))
    }

    fn runs_finish(&mut self, ends: &[RunEnd<'_>]) -> Result<()> {
        let now = crate::memory::now_rfc3339();
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = c.transaction()?;
            for e in ends {
                tx.execute(
                    "UPDATE loop_runs SET status = $2, reason = $3, laps = $4, ended_at = $5, result = $6 WHERE run_id = $1",
                    &[&e.run_id, &e.status.as_str(), &e.reason, &e.laps, &now, &e.result],
                )?;
            }
            notify(&mut tx, Topic::Ledger)?;
            tx.commit()
        })();
        r.map_err(|e| pg_error(self.url.redacted(), &e))
    }

    fn lap_set_memory(&mut self, run_id: &str, lap: i64, memory_id: i64) -> Result<()> {
        self.client()?
            .execute("UPDATE loop_laps SET memory_id = $3 WHERE run_id = $1 AND lap = $2", &[&run_id, &lap, &memory_id])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn run_end_if_running(&mut self, run_id: &str, status: RunStatus, reason: &str) -> Result<bool> {
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = c.transaction()?;
            let n = tx.execute(
                "UPDATE loop_runs SET status = $2, reason = $3, ended_at = $4 WHERE run_id = $1 AND status = $5",
                &[&run_id, &status.as_str(), &reason, &crate::memory::now_rfc3339(), &RunStatus::Running.as_str()],
            )?;
            notify(&mut tx, Topic::Control)?;
            tx.commit()?;
            Ok(n == 1)
        })();
        r.map_err(|e| pg_error(self.url.redacted(), &e))
    }

    fn run_request_cancel(&mut self, run_id: &str) -> Result<Option<RunStatus>> {
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = c.transaction()?;
            tx.execute(
                "UPDATE loop_runs SET cancel_requested = true WHERE run_id = $1 AND status = $2",
                &[&run_id, &RunStatus::Running.as_str()],
            )?;
            let status = tx.query_opt("SELECT status FROM loop_runs WHERE run_id = $1", &[&run_id])?;
            notify(&mut tx, Topic::Control)?;
            tx.commit()?;
            Ok(status.map(|r| r.get::<_, String>(0)))
        })();
        let status = r.map_err(|e| pg_error(self.url.redacted(), &e))?;
        status.map(|s| RunStatus::parse(&s)).transpose()
    }

    fn runs_cancelling(&self) -> Result<std::collections::HashSet<String>> {
        let rows = self
            .client()?
            .query("SELECT run_id FROM loop_runs WHERE cancel_requested AND status = 'running'", &[])
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn run_get(&self, run_id: &str) -> Result<Option<RunRow>> {
        let row = self
            .client()?
            .query_opt(&format!("SELECT {RUN_COLUMNS}, host FROM loop_runs WHERE run_id = $1"), &[&run_id])
            .map_err(|e| self.err(e))?;
        row.map(|r| self.run_row(&r)).transpose()
    }

    fn run_history(&self, name: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        Ok(self.run_page(name, limit, None)?.into_iter().map(|r| r.run).collect())
    }

    /// A page of runs newest first (start order), with their sequence numbers for paging.
    fn run_page(&self, name: Option<&str>, limit: usize, before: Option<i64>) -> Result<Vec<PagedRun>> {
        let rows = self
            .client()?
            .query(
                &format!(
                    "SELECT {RUN_COLUMNS}, host, seq FROM loop_runs WHERE ($1::text IS NULL OR name = $1) AND seq < $2
                     ORDER BY seq DESC LIMIT $3"
                ),
                &[&name, &before.unwrap_or(i64::MAX), &(limit as i64)],
            )
            .map_err(|e| self.err(e))?;
        rows.iter().map(|r| Ok(PagedRun { cursor: r.get(13), run: self.run_row(r)? })).collect()
    }

    fn loop_names(&self, limit: usize) -> Result<Vec<LoopName>> {
        let rows = self
            .client()?
            .query(
                "SELECT g.name, g.n, (SELECT run_id FROM loop_runs WHERE seq = g.last)
                 FROM (SELECT name, count(*) AS n, max(seq) AS last FROM loop_runs GROUP BY name) g
                 ORDER BY g.last DESC LIMIT $1",
                &[&(limit as i64)],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| LoopName { name: r.get(0), runs: r.get(1), last_run_id: r.get(2) }).collect())
    }

    fn run_laps_after(&self, run_id: &str, after: i64, limit: usize) -> Result<Vec<LapRow>> {
        let rows = self
            .client()?
            .query(
                &format!("SELECT {LAP_COLUMNS} FROM loop_laps WHERE run_id = $1 AND lap > $3 ORDER BY lap LIMIT $2"),
                &[&run_id, &(limit as i64), &after],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(lap_row).collect())
    }
}
