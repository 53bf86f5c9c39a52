//! SQL for the loop ledger: run records and lap records.
//!
//! The loop engine ([`crate::loops`]) decides what to record; this file only knows how. Each
//! write is its own short transaction, except
//! the laps and ends of blocking runs, which the ledger writer commits in batches. History and show are indexed reads: history walks
//! `loop_runs` by rowid (start order) or by the `name` index, show is a range of the
//! `(run_id, lap)` index of `loop_laps` (rows stored in arrival order, see schema v6), so both
//! stay fast with millions of laps.

use rusqlite::{params, OptionalExtension};

use super::SqliteStore;
use crate::record::RunStatus;
use crate::storage::ledger::{
    LapRow, LapWrite, LoopName, PagedRun, RawRun, RunEnd, RunEnding, RunRow, StepWrite, LAP_COLUMNS, RUN_COLUMNS,
};
use crate::storage::LedgerRows;
use crate::Result;

/// Reads a lap from the first columns of a row selected with [`LAP_COLUMNS`].
pub(crate) fn lap_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LapRow> {
    Ok(LapRow {
        lap: r.get(0)?,
        ts: r.get(1)?,
        decision: r.get(2)?,
        passed: r.get(3)?,
        detail: r.get(4)?,
        score: r.get(5)?,
        budget: r.get(6)?,
        memory_id: r.get(7)?,
        rejected: r.get(8)?,
    })
}

fn raw_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        run_id: r.get(0)?,
        name: r.get(1)?,
        params: r.get(2)?,
        status: r.get(3)?,
        reason: r.get(4)?,
        laps: r.get(5)?,
        started_at: r.get(6)?,
        ended_at: r.get(7)?,
        pid: r.get(8)?,
        proc_start: r.get(9)?,
        result: r.get(10)?,
        state: r.get(11)?,
    })
}

impl LedgerRows for SqliteStore {
    /// Records one step of an agent-driven run atomically: `decide` sees the run row as it is
    /// under the write lock (so concurrent steps from several processes number their laps
    /// one after another and see each other's counters) and returns what to write, or an
    /// error (e.g. the run already ended) that rolls everything back.
    fn step_locked_with(&mut self, run_id: &str, decide: &mut dyn FnMut(RunRow) -> Result<StepWrite>) -> Result<()> {
        let path = self.path.clone();
        let db_err = |source| super::db_error(&path, source);
        let r = (|| {
            let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
            let run = tx
                .query_row(&format!("SELECT {RUN_COLUMNS} FROM loop_runs WHERE run_id = ?1"), [run_id], raw_run)
                .optional()
                .map_err(db_err)?
                .ok_or_else(|| crate::Error::NotFound { what: "run", id: run_id.to_string() })?
                .typed()?;
            let w = decide(run)?;
            tx.execute(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL)",
                params![run_id, w.lap.lap, w.lap.ts, w.lap.decision, w.lap.passed, w.lap.detail, w.lap.score, w.lap.budget],
            )
            .map_err(db_err)?;
            tx.execute("UPDATE loop_runs SET laps = ?2, state = ?3 WHERE run_id = ?1", params![run_id, w.lap.lap, w.state])
                .map_err(db_err)?;
            if let Some(RunEnding { status, reason, result }) = &w.end {
                tx.execute(
                    "UPDATE loop_runs SET status = ?2, reason = ?3, ended_at = ?4, result = ?5 WHERE run_id = ?1",
                    params![run_id, status.as_str(), reason, crate::memory::now_rfc3339(), result],
                )
                .map_err(db_err)?;
            }
            tx.commit().map_err(db_err)?;
            Ok(())
        })();
        r.map_err(|e| self.checked(e))
    }

    /// Records laps of blocking runs, their rows only, in one transaction: the ledger writer
    /// ([`crate::storage::writer`]) gathers the laps of every run in the process, so idle laps cost a
    /// share of one commit, not a commit each. Each lap's ledger memory is derived from its
    /// row later by [`LedgerRows::laps_fold_chunk`]: written now, a thousand waiting runs would put
    /// their `loop:<name>` and `run:<suffix>` tag entries on a thousand index pages a second.
    fn laps_record(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        let path = self.path.clone();
        let db_err = |source| super::db_error(&path, source);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
        for w in laps {
            let lap = w.lap;
            tx.prepare_cached(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9)",
            )
            .and_then(|mut st| {
                st.execute(params![w.run_id, lap.lap, lap.ts, lap.decision, lap.passed, lap.detail, lap.score, lap.budget, lap.rejected])
            })
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        Ok(())
    }

    /// Gives up to `limit` laps stored without a ledger memory their memory, in one
    /// transaction, and returns how many: the text and tags follow from the run's name, the
    /// lap and its detail ([`crate::record::lap_text`], [`crate::record::lap_tags`]), its
    /// time is the lap's, and its vector comes later (`embed-pending`), as for every lap.
    /// Laps are taken in arrival order and written grouped by run, so one run's memories get
    /// neighbouring ids and share their tag index pages. Idempotent and safe to race: the
    /// laps are chosen inside the write transaction, and the memory's time-keyed dedup key
    /// makes a lap whose memory another writer already stored (an agent step's own write)
    /// link to that one.
    fn laps_fold_chunk(&mut self, limit: usize) -> Result<usize> {
        let path = self.path.clone();
        let db_err = |source| super::db_error(&path, source);
        // Nothing waiting (the usual answer): no write lock taken.
        let waiting: bool = self
            .conn
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM loop_laps WHERE memory_id IS NULL)")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .map_err(db_err)?;
        if !waiting {
            return Ok(0);
        }
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
        let mut laps: Vec<(String, i64, i64, String, String, String)> = tx
            .prepare_cached(
                "SELECT l.run_id, l.lap, l.seq, l.ts, l.detail, r.name FROM loop_laps l
                 JOIN loop_runs r ON r.run_id = l.run_id
                 WHERE l.memory_id IS NULL ORDER BY l.seq LIMIT ?1",
            )
            .and_then(|mut st| {
                st.query_map([limit as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)))?
                    .collect::<rusqlite::Result<_>>()
            })
            .map_err(db_err)?;
        laps.sort_unstable_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        let mut tags: Option<(String, Vec<String>)> = None;
        for (run_id, lap, seq, ts, detail, name) in &laps {
            if tags.as_ref().is_none_or(|(r, _)| r != run_id) {
                tags = Some((run_id.clone(), crate::record::lap_tags(name, run_id)));
            }
            let text = crate::record::lap_text(name, *lap, detail);
            let row = super::NewRow {
                kind: crate::memory::Kind::Lap,
                content: &text,
                tags: tags.as_ref().map_or(&[][..], |(_, t)| &t[..]),
                embedding: &[],
                created_at: Some(ts),
                expires_at: None,
            };
            let id = super::insert_row(&tx, &row, ts).map_err(db_err)?.id;
            tx.prepare_cached("UPDATE loop_laps SET memory_id = ?2 WHERE seq = ?1")
                .and_then(|mut st| st.execute(params![seq, id]))
                .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        Ok(laps.len())
    }

    /// Records a new run as `running`.
    fn run_start(&mut self, run: &RunRow) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO loop_runs(run_id, name, params, status, started_at, pid, proc_start, state)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    run.run_id,
                    run.name,
                    run.params.to_json(),
                    RunStatus::Running.as_str(),
                    run.started_at,
                    run.pid,
                    run.proc_start,
                    run.state
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Records laps of blocking runs, each with its ledger memory (stored without a vector
    /// when its embedding is empty), in one transaction: the ledger writer
    /// ([`crate::storage::writer`]) gathers the laps of every run in the process, so idle laps cost a
    /// share of one commit, not a commit each.
    fn laps_insert_with_memory(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        let path = self.path.clone();
        let db_err = |source| super::db_error(&path, source);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
        for w in laps {
            let id = super::insert_row(&tx, &w.memory, &w.lap.ts).map_err(db_err)?.id;
            let lap = w.lap;
            tx.prepare_cached(
                "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    w.run_id,
                    lap.lap,
                    lap.ts,
                    lap.decision,
                    lap.passed,
                    lap.detail,
                    lap.score,
                    lap.budget,
                    id,
                    lap.rejected
                ])
            })
            .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        Ok(())
    }

    /// Records the ends of runs in one transaction.
    fn runs_finish(&mut self, ends: &[RunEnd<'_>]) -> Result<()> {
        let path = self.path.clone();
        let db_err = |source| super::db_error(&path, source);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
        let now = crate::memory::now_rfc3339();
        for e in ends {
            tx.prepare_cached("UPDATE loop_runs SET status = ?2, reason = ?3, laps = ?4, ended_at = ?5, result = ?6 WHERE run_id = ?1")
                .and_then(|mut st| st.execute(params![e.run_id, e.status.as_str(), e.reason, e.laps, now, e.result]))
                .map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        Ok(())
    }

    /// Records a run's end.
    fn run_finish(&mut self, run_id: &str, status: RunStatus, reason: &str, laps: i64, result: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE loop_runs SET status = ?2, reason = ?3, laps = ?4, ended_at = ?5, result = ?6
                 WHERE run_id = ?1",
                params![run_id, status.as_str(), reason, laps, crate::memory::now_rfc3339(), result],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Links a lap to its ledger memory once that is written.
    fn lap_set_memory(&mut self, run_id: &str, lap: i64, memory_id: i64) -> Result<()> {
        self.conn
            .execute("UPDATE loop_laps SET memory_id = ?3 WHERE run_id = ?1 AND lap = ?2", params![run_id, lap, memory_id])
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Ends a running run that no process is driving (agent-driven runs on `cancel`).
    fn run_end_if_running(&mut self, run_id: &str, status: RunStatus, reason: &str) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "UPDATE loop_runs SET status = ?2, reason = ?3, ended_at = ?4 WHERE run_id = ?1 AND status = ?5",
                params![run_id, status.as_str(), reason, crate::memory::now_rfc3339(), RunStatus::Running.as_str()],
            )
            .map_err(|e| self.err(e))?;
        Ok(n == 1)
    }

    /// Asks a running run to stop; returns the run's current status (None: unknown run).
    fn run_request_cancel(&mut self, run_id: &str) -> Result<Option<RunStatus>> {
        self.conn
            .execute("UPDATE loop_runs SET cancel_requested = 1 WHERE run_id = ?1 AND status = ?2", [run_id, RunStatus::Running.as_str()])
            .map_err(|e| self.err(e))?;
        let status: Option<String> = self
            .conn
            .query_row("SELECT status FROM loop_runs WHERE run_id = ?1", [run_id], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        status.map(|s| RunStatus::parse(&s)).transpose()
    }

    /// The running runs asked to stop (`slm loop cancel`), by a partial index.
    fn runs_cancelling(&self) -> Result<std::collections::HashSet<String>> {
        self.conn
            .prepare_cached("SELECT run_id FROM loop_runs WHERE cancel_requested = 1 AND status = 'running'")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .map_err(|e| self.err(e))
    }

    /// One run by id.
    fn run_get(&self, run_id: &str) -> Result<Option<RunRow>> {
        self.conn
            .query_row(&format!("SELECT {RUN_COLUMNS} FROM loop_runs WHERE run_id = ?1"), [run_id], raw_run)
            .optional()
            .map_err(|e| self.err(e))?
            .map(RawRun::typed)
            .transpose()
    }

    /// Runs newest first, of one loop name or of all.
    fn run_history(&self, name: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        let (sql, arg) = match name {
            Some(n) => (format!("SELECT {RUN_COLUMNS} FROM loop_runs WHERE name = ?1 ORDER BY rowid DESC LIMIT ?2"), n),
            None => (format!("SELECT {RUN_COLUMNS} FROM loop_runs WHERE ?1 = ?1 ORDER BY rowid DESC LIMIT ?2"), ""),
        };
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt.query_map(params![arg, limit as i64], raw_run).map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e)).and_then(RawRun::typed)).collect()
    }

    /// A page of runs newest first (by start order), of one loop or of all, with their rowids
    /// so the next page can start `before` the last one.
    fn run_page(&self, name: Option<&str>, limit: usize, before: Option<i64>) -> Result<Vec<PagedRun>> {
        let filter = if name.is_some() { "name = ?1" } else { "?1 = ?1" };
        // rowid comes last, after the columns `raw_run` reads by position.
        let sql = format!("SELECT {RUN_COLUMNS}, rowid FROM loop_runs WHERE {filter} AND rowid < ?2 ORDER BY rowid DESC LIMIT ?3");
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![name.unwrap_or(""), before.unwrap_or(i64::MAX), limit as i64], |r| Ok((r.get(12)?, raw_run(r)?)))
            .map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e)).and_then(|(cursor, raw)| Ok(PagedRun { cursor, run: raw.typed()? }))).collect()
    }

    /// Every loop name with its number of runs and its newest run id, by newest run first.
    fn loop_names(&self, limit: usize) -> Result<Vec<LoopName>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT name, n, (SELECT run_id FROM loop_runs WHERE rowid = last)
                 FROM (SELECT name, count(*) AS n, max(rowid) AS last FROM loop_runs GROUP BY name)
                 ORDER BY last DESC LIMIT ?1",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([limit as i64], |r| Ok(LoopName { name: r.get(0)?, runs: r.get(1)?, last_run_id: r.get(2)? }))
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| self.err(e))
    }

    /// Up to `limit` laps of a run numbered above `after`, in lap order.
    fn run_laps_after(&self, run_id: &str, after: i64, limit: usize) -> Result<Vec<LapRow>> {
        let mut stmt = self
            .conn
            .prepare_cached(&format!("SELECT {LAP_COLUMNS} FROM loop_laps WHERE run_id = ?1 AND lap > ?3 ORDER BY lap LIMIT ?2"))
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map(params![run_id, limit as i64, after], lap_row).map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| self.err(e))
    }
}
