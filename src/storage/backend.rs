//! The store seam: [`Store`] is the embedded SQLite file or a shared PostgreSQL database,
//! chosen once by [`Location`], behind one set of methods.
//!
//! The engine, the mirror, the loops and the surfaces hold a `Store` and never learn which
//! one it is; each method forwards to the backend, whose SQL keeps the same meaning (dedup,
//! id order, tag filters, run records). The SQLite code is [`super::SqliteStore`], the
//! PostgreSQL code [`super::pg::PgStore`].

use std::path::{Path, PathBuf};

use super::pg::{PgStore, PgUrl};
use super::{
    Counts, ExportItem, IdMarks, Inserted, LapOut, LapRow, LapWrite, ListFilter, LoopName, NewRow, PagedRun, PendingRow, RunEnd, RunOut,
    RunRow, SqliteStore, StepWrite, StoredVector, VectorVisitor,
};
use crate::memory::{Kind, Memory};
use crate::record::RunStatus;
use crate::Result;

/// Where a data root's rows live.
#[derive(Debug, Clone)]
pub enum Location {
    /// The SQLite database file (in the data root).
    Sqlite(PathBuf),
    /// A PostgreSQL database shared by many hosts.
    Postgres(PgUrl),
}

impl Location {
    /// The location as users may see it (a PostgreSQL URL with its password redacted).
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(p) => p.display().to_string(),
            Location::Postgres(u) => u.redacted().to_string(),
        }
    }
}

/// The file in a data root that says it serves a PostgreSQL store (its redacted URL): a later
/// open of that data root without `--store` is refused with a message naming the store, not
/// taken for a SQLite data root whose database file went missing.
pub const PG_MARK: &str = "postgres-store";

impl Location {
    /// Records in the data root `root` that it serves this store, when it is a PostgreSQL one
    /// (see [`PG_MARK`]); written only when missing or different. Best effort: the mark only
    /// sharpens a later error message.
    pub fn mark(&self, root: &Path) {
        let Location::Postgres(url) = self else { return };
        let path = root.join(PG_MARK);
        let text = format!("{}\n", url.redacted());
        if std::fs::read_to_string(&path).is_ok_and(|t| t == text) {
            return;
        }
        if let Err(e) = std::fs::write(&path, text) {
            tracing::debug!("cannot write {}: {e}", path.display());
        }
    }
}

/// The PostgreSQL store the data root `root` was used with (its [`PG_MARK`]), if any.
pub(crate) fn pg_mark(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(PG_MARK)).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// An open store, of either kind.
pub enum Store {
    Sqlite(Box<SqliteStore>),
    Postgres(Box<PgStore>),
}

/// Forwards a call to whichever backend this is.
macro_rules! both {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Sqlite($s) => $e,
            Store::Postgres($s) => $e,
        }
    };
}

/// Laps given their ledger memory per transaction by [`Store::laps_fold`].
const FOLD_CHUNK: usize = 4096;

impl Store {
    /// Opens the SQLite database at `path` (see [`SqliteStore::open`]).
    pub fn open(path: &Path) -> Result<Store> {
        SqliteStore::open(path).map(|s| Store::Sqlite(Box::new(s)))
    }

    /// Opens the store at `location`, bringing its schema up to date.
    pub fn open_at(location: &Location) -> Result<Store> {
        Ok(match location {
            Location::Sqlite(path) => Store::Sqlite(Box::new(SqliteStore::open(path)?)),
            Location::Postgres(url) => Store::Postgres(Box::new(PgStore::open(url)?)),
        })
    }

    /// The schema version of the open store (an open brings it up to this binary's, or fails).
    pub fn schema_version(&self) -> i64 {
        match self {
            Store::Sqlite(_) => super::SCHEMA_VERSION,
            Store::Postgres(_) => i64::from(super::pg::PG_SCHEMA_VERSION),
        }
    }

    /// True for the shared PostgreSQL store.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    pub fn read_only(&self) -> bool {
        both!(self, s => s.read_only())
    }
    pub fn writable(&self) -> Result<()> {
        both!(self, s => s.writable())
    }
    pub fn check_integrity(&mut self, full: bool) -> Result<String> {
        both!(self, s => s.check_integrity(full))
    }
    pub fn integrity(&self) -> Option<&str> {
        both!(self, s => s.integrity())
    }
    /// The database file, or the redacted URL of a PostgreSQL store.
    pub fn path(&self) -> &Path {
        both!(self, s => s.path())
    }
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        both!(self, s => s.meta(key))
    }
    pub fn meta_init(&mut self, key: &str, value: &str) -> Result<String> {
        both!(self, s => s.meta_init(key, value))
    }
    pub fn find_dedup(&self, key: &[u8]) -> Result<Option<i64>> {
        both!(self, s => s.find_dedup(key))
    }
    pub fn insert(&mut self, rows: &[NewRow<'_>]) -> Result<Vec<Inserted>> {
        both!(self, s => s.insert(rows))
    }
    pub fn forget(&mut self, ids: &[i64]) -> Result<Vec<i64>> {
        both!(self, s => s.forget(ids))
    }
    pub fn get_many(&self, ids: &[i64]) -> Result<Vec<Memory>> {
        both!(self, s => s.get_many(ids))
    }
    /// Memories newest first, as `filter` narrows them.
    pub fn list(&self, filter: &ListFilter<'_>) -> Result<Vec<Memory>> {
        both!(self, s => s.list(filter))
    }
    /// Memories that have expired at `now`.
    pub fn expired_ids(&self, now: &str) -> Result<Vec<i64>> {
        both!(self, s => s.expired_ids(now))
    }
    /// Sets memories' expiry where it differs (a remember that deduped).
    pub fn set_expiry(&mut self, rows: &[(i64, Option<&str>)]) -> Result<()> {
        both!(self, s => s.set_expiry(rows))
    }
    pub fn close(&mut self) {
        both!(self, s => s.close())
    }
    pub fn bulk_mode(&mut self) -> Result<()> {
        both!(self, s => s.bulk_mode())
    }
    pub fn counts(&self) -> Result<Counts> {
        both!(self, s => s.counts())
    }
    pub fn max_id(&self) -> Result<i64> {
        both!(self, s => s.max_id())
    }
    pub fn last_id_before(&self, at: &str) -> Result<i64> {
        both!(self, s => s.last_id_before(at))
    }
    /// `(max_id, max_issued_id)`: one round trip on PostgreSQL; the issued id read second.
    pub fn id_marks(&self) -> Result<IdMarks> {
        both!(self, s => s.id_marks())
    }
    pub fn vector_blobs(&self, ids: &[i64]) -> Result<std::collections::HashMap<i64, Vec<u8>>> {
        both!(self, s => s.vector_blobs(ids))
    }
    pub fn vectors_after(&self, after: i64, kind: Option<Kind>, visit: &mut VectorVisitor<'_>) -> Result<()> {
        both!(self, s => s.vectors_after(after, kind, visit))
    }
    pub fn ids_with_all_tags(&self, tags: &[String]) -> Result<Vec<i64>> {
        both!(self, s => s.ids_with_all_tags_in(tags, 0, i64::MAX))
    }
    pub fn ids_with_all_tags_in(&self, tags: &[String], after: i64, upto: i64) -> Result<Vec<i64>> {
        both!(self, s => s.ids_with_all_tags_in(tags, after, upto))
    }
    pub fn pending_rows(&self, limit: usize) -> Result<Vec<PendingRow>> {
        both!(self, s => s.pending_rows(limit))
    }
    /// True when this process may backfill pending vectors now: always on SQLite; on
    /// PostgreSQL when no other session (on any host) is backfilling.
    pub fn try_backfill_lock(&self) -> Result<bool> {
        match self {
            Store::Sqlite(_) => Ok(true),
            Store::Postgres(s) => s.try_backfill_lock(),
        }
    }
    pub fn backfill_unlock(&self) {
        if let Store::Postgres(s) = self {
            s.backfill_unlock();
        }
    }
    pub fn set_embeddings(&mut self, rows: &[(i64, Vec<f32>)]) -> Result<usize> {
        both!(self, s => s.set_embeddings(rows))
    }
    pub fn vectors_or_content(&self, ids: &[i64]) -> Result<Vec<StoredVector>> {
        both!(self, s => s.vectors_or_content(ids))
    }
    pub fn existing(&self, ids: &[i64]) -> Result<Vec<i64>> {
        both!(self, s => s.existing(ids))
    }

    // Moving a whole store (`slm export` / `slm import`).
    pub fn export(&mut self, visit: &mut dyn FnMut(ExportItem) -> Result<()>) -> Result<()> {
        both!(self, s => s.export(visit))
    }
    pub fn run_import(&mut self, run: &RunOut) -> Result<bool> {
        both!(self, s => s.run_import(run))
    }
    pub fn lap_import(&mut self, lap: &LapOut) -> Result<bool> {
        both!(self, s => s.lap_import(lap))
    }

    // The loop ledger.
    pub fn run_start(&mut self, run: &RunRow) -> Result<()> {
        both!(self, s => s.run_start(run))
    }
    pub fn laps_insert_with_memory(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        both!(self, s => s.laps_insert_with_memory(laps))
    }
    /// Records the laps of blocking runs. SQLite stores the rows and derives their ledger
    /// memories later ([`Store::laps_fold`]); PostgreSQL stores both at once (its laps carry
    /// their memory in one round trip, and its index pages are the server's to manage).
    pub fn laps_record(&mut self, laps: &[LapWrite<'_>]) -> Result<()> {
        match self {
            Store::Sqlite(s) => s.laps_insert(laps),
            Store::Postgres(s) => s.laps_insert_with_memory(laps),
        }
    }
    /// Derives the ledger memories of up to `most` laps stored without one, in transactions of
    /// `FOLD_CHUNK` laps: how many, and whether none is left waiting (or the error that
    /// stopped it, after the chunks already committed). Nothing to do on PostgreSQL, whose
    /// laps are stored with their memory.
    pub fn laps_fold(&mut self, most: usize) -> (usize, Result<bool>) {
        let Store::Sqlite(s) = self else { return (0, Ok(true)) };
        let mut done = 0;
        loop {
            let chunk = FOLD_CHUNK.min(most - done);
            match s.laps_fold(chunk) {
                Ok(n) if n < chunk => return (done + n, Ok(true)),
                Ok(n) => {
                    done += n;
                    if done >= most {
                        return (done, Ok(false));
                    }
                }
                Err(e) => return (done, Err(e)),
            }
        }
    }
    pub fn runs_finish(&mut self, ends: &[RunEnd<'_>]) -> Result<()> {
        both!(self, s => s.runs_finish(ends))
    }
    pub fn run_finish(&mut self, run_id: &str, status: RunStatus, reason: &str, laps: i64, result: &str) -> Result<()> {
        both!(self, s => s.run_finish(run_id, status, reason, laps, result))
    }
    pub fn step_locked<T>(&mut self, run_id: &str, decide: impl FnOnce(RunRow) -> Result<(StepWrite, T)>) -> Result<T> {
        both!(self, s => s.step_locked(run_id, decide))
    }
    pub fn lap_set_memory(&mut self, run_id: &str, lap: i64, memory_id: i64) -> Result<()> {
        both!(self, s => s.lap_set_memory(run_id, lap, memory_id))
    }
    pub fn run_end_if_running(&mut self, run_id: &str, status: RunStatus, reason: &str) -> Result<bool> {
        both!(self, s => s.run_end_if_running(run_id, status, reason))
    }
    pub fn run_request_cancel(&mut self, run_id: &str) -> Result<Option<RunStatus>> {
        both!(self, s => s.run_request_cancel(run_id))
    }
    /// The running runs asked to stop, in one read (waiting loops share it).
    pub fn runs_cancelling(&self) -> Result<std::collections::HashSet<String>> {
        both!(self, s => s.runs_cancelling())
    }
    pub fn run_get(&self, run_id: &str) -> Result<Option<RunRow>> {
        both!(self, s => s.run_get(run_id))
    }
    pub fn run_history(&self, name: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        both!(self, s => s.run_history(name, limit))
    }
    pub fn run_page(&self, name: Option<&str>, limit: usize, before: Option<i64>) -> Result<Vec<PagedRun>> {
        both!(self, s => s.run_page(name, limit, before))
    }
    pub fn loop_names(&self, limit: usize) -> Result<Vec<LoopName>> {
        both!(self, s => s.loop_names(limit))
    }
    pub fn run_laps(&self, run_id: &str, limit: usize) -> Result<Vec<LapRow>> {
        both!(self, s => s.run_laps_after(run_id, 0, limit))
    }
    pub fn run_laps_after(&self, run_id: &str, after: i64, limit: usize) -> Result<Vec<LapRow>> {
        both!(self, s => s.run_laps_after(run_id, after, limit))
    }
}
