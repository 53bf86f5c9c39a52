//! The store seam: the [`Backend`] contract, stated once, and [`Store`], the one open backend
//! (the embedded SQLite file or a shared PostgreSQL database, chosen once by [`Location`]).
//!
//! A backend is four small traits by concern: [`Backend`] itself (opening state, integrity,
//! meta), [`MemoryRows`] (memories, tags, vectors), [`LedgerRows`] (loop runs and laps) and
//! [`TransferRows`] (export and import). Each method's doc says what it reads or writes, in
//! which transaction, and how it fails; [`super::SqliteStore`] and [`super::pg::PgStore`]
//! implement them with the same meaning (dedup, id order, tag filters, run records), each in
//! its own SQL. Every write method is one short transaction that commits or rolls back whole,
//! and fails as [`crate::Error::ReadOnly`] on a store opened read-only; every read is a read
//! (no write on a read path). Errors are the crate's: [`crate::Error::Database`] for SQLite,
//! [`crate::Error::Postgres`] (naming the redacted URL) for PostgreSQL,
//! [`crate::Error::Corrupt`] for a row that does not parse.
//!
//! The engine, the mirror, the loops and the surfaces hold a `Store` and never learn which
//! backend it is: a `Store` dereferences to `dyn Backend`, and its own methods are what both
//! backends decide the same way, written once here (a locked step's return value, folding
//! laps' ledger memories in chunks, an imported lap's link to its memory and run).

use std::path::{Path, PathBuf};

use std::collections::{HashMap, HashSet};

use super::pg::{PgStore, PgUrl};
use super::{
    find_row, Counts, ExportItem, IdMarks, Inserted, LapOut, LapRow, LapWrite, ListFilter, LoopName, NewRow, PagedRun, PendingRow, RunEnd,
    RunOut, RunRow, SqliteStore, StepWrite, StoredVector, VectorVisitor,
};
use crate::memory::{Kind, Memory};
use crate::record::RunStatus;
use crate::{Error, Result};

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

/// The meta key counting the forgets that removed rows ([`MemoryRows::forgets`]).
pub const FORGETS_META: &str = "forgets";

/// An open store's own state: how it was opened, its integrity, its meta rows, and the few
/// decisions that differ by backend (each named here, so no caller matches on the kind).
pub trait Backend: MemoryRows + LedgerRows + TransferRows + Send {
    /// The schema version of the open store (an open brings it up to this binary's, or fails).
    fn schema_version(&self) -> i64;
    /// True for a store shared by many hosts (PostgreSQL): runs may belong to another host.
    fn is_shared(&self) -> bool;
    /// True when the store was opened read-only (read-only media or permissions); every write
    /// then fails as [`Error::ReadOnly`].
    fn read_only(&self) -> bool;
    /// `Ok` when writes may be attempted, else the [`Error::ReadOnly`] they would meet.
    fn writable(&self) -> Result<()>;
    /// Runs the backend's integrity check (`quick_check`, or the full `integrity_check` when
    /// `full`; a round trip on PostgreSQL, whose server keeps its own pages) and remembers the
    /// verdict for [`Backend::integrity`]: `"ok"` or the first findings. Reads only.
    fn check_integrity(&mut self, full: bool) -> Result<String>;
    /// The last verdict of [`Backend::check_integrity`] in this process, if any.
    fn integrity(&self) -> Option<&str>;
    /// The database file, or the redacted URL of a PostgreSQL store.
    fn path(&self) -> &std::path::Path;
    /// Flushes and closes what can be closed early (SQLite's log is checkpointed by the last
    /// connection); later calls reopen or fail as the backend's connection does.
    fn close(&mut self);
    /// Sets this connection up for a bulk import (larger caches, checkpoints on a thread of
    /// their own on SQLite). Changes nothing stored.
    fn bulk_mode(&mut self) -> Result<()>;
    /// Tunes this connection for the ledger writer's batches (a larger page cache and a
    /// longer log on SQLite). Best effort; nothing stored changes.
    fn tune_for_ledger_writer(&self) {}
    /// A value of the meta table (`None` when absent). Reads only.
    fn meta(&self, key: &str) -> Result<Option<String>>;
    /// Sets a meta value unless one is stored, in one transaction, and returns the stored
    /// value (the first writer's when processes race).
    fn meta_init(&mut self, key: &str, value: &str) -> Result<String>;
    /// True when this process may backfill pending vectors now: always on SQLite (whose
    /// writers serialise on the file); on PostgreSQL when no session on any host holds the
    /// backfill advisory lock, which this call then takes.
    fn try_backfill_lock(&self) -> Result<bool> {
        Ok(true)
    }
    /// Releases what [`Backend::try_backfill_lock`] took, if anything.
    fn backfill_unlock(&self) {}
}

/// Memories, their tags and vectors. Ids are issued in commit order and never reused.
pub trait MemoryRows {
    /// The id of the row with this stored dedup key ([`super::row_key`]), if any. Reads only.
    fn find_dedup(&self, key: &[u8]) -> Result<Option<i64>>;
    /// Inserts rows in one transaction, in order; a row equal to a stored one (same dedup key)
    /// is not stored again and reports that row's id with `deduped` (its expiry becomes the
    /// new row's). All or nothing.
    fn insert(&mut self, rows: &[NewRow<'_>]) -> Result<Vec<Inserted>>;
    /// Deletes these memories with their tags, in one transaction; returns the ids that
    /// existed (an unknown id is not an error). A forget that removed rows also bumps the
    /// store's forget counter ([`MemoryRows::forgets`]) in the same transaction.
    fn forget(&mut self, ids: &[i64]) -> Result<Vec<i64>>;
    /// How many forgets have removed rows from this store (the [`FORGETS_META`] counter; 0 when
    /// none has, or only binaries older than the counter have): a process holding memories
    /// by id re-checks them only when it moved. Always read from the store. Reads only.
    fn forgets(&self) -> Result<i64>;
    /// The stored memories among `ids`, in id order (unknown ids are skipped). Reads only.
    fn get_many(&self, ids: &[i64]) -> Result<Vec<Memory>>;
    /// Memories newest first, as `filter` narrows them. Reads only.
    fn list(&self, filter: &ListFilter<'_>) -> Result<Vec<Memory>>;
    /// Memories that have expired at `now` (RFC 3339 UTC), in id order. Reads only.
    fn expired_ids(&self, now: &str) -> Result<Vec<i64>>;
    /// Sets memories' expiry where it differs (a remember that deduped), in one transaction.
    fn set_expiry(&mut self, rows: &[(i64, Option<&str>)]) -> Result<()>;
    /// Rows by kind. Reads only.
    fn counts(&self) -> Result<Counts>;
    /// The largest id stored (0 when empty). Reads only.
    fn max_id(&self) -> Result<i64>;
    /// The largest id of a row created before `at` (RFC 3339), 0 if none: ids are issued in
    /// commit order, so "written before `at`" is "id at most this". Reads only.
    fn last_id_before(&self, at: &str) -> Result<i64>;
    /// The stored and the issued id watermarks, read together (one round trip on
    /// PostgreSQL; the issued id second, so it is never below the stored one). Reads only.
    fn id_marks(&self) -> Result<IdMarks>;
    /// The vector bytes (little-endian f32) of these rows that have one. Reads only.
    fn vector_blobs(&self, ids: &[i64]) -> Result<HashMap<i64, Vec<u8>>>;
    /// Visits every stored vector with id above `after` (of `kind`, or of any), in id order;
    /// an error from `visit` stops the walk and is returned. Reads only.
    fn vectors_after(&self, after: i64, kind: Option<Kind>, visit: &mut VectorVisitor<'_>) -> Result<()>;
    /// Ids (ascending) in `after < id <= upto` carrying every one of `tags` (none: empty).
    /// One statement at any number of tags. Reads only.
    fn ids_with_all_tags_in(&self, tags: &[String], after: i64, upto: i64) -> Result<Vec<i64>>;
    /// Ids (ascending) of rows carrying every one of `tags`.
    fn ids_with_all_tags(&self, tags: &[String]) -> Result<Vec<i64>> {
        self.ids_with_all_tags_in(tags, 0, i64::MAX)
    }
    /// Up to `limit` rows stored without a vector, oldest first. Reads only.
    fn pending_rows(&self, limit: usize) -> Result<Vec<PendingRow>>;
    /// Stores vectors for rows that have none, in one transaction; returns how many were set
    /// (a row forgotten or embedded meanwhile is skipped).
    fn set_embeddings(&mut self, rows: &[(i64, Vec<f32>)]) -> Result<usize>;
    /// For each stored id of `ids`: its vector bytes, or (when it has none yet) its text to
    /// embed. Reads only.
    fn vectors_or_content(&self, ids: &[i64]) -> Result<Vec<StoredVector>>;
    /// The ids of `ids` that are stored, ascending. Reads only.
    fn existing(&self, ids: &[i64]) -> Result<Vec<i64>>;
}

/// The loop ledger: one row per run, one per lap. The loop engine decides what to record; a
/// backend only knows how.
pub trait LedgerRows {
    /// Records a new running run, in one transaction (a run id already stored is an error).
    fn run_start(&mut self, run: &RunRow) -> Result<()>;
    /// Records laps with their ledger memories, in one transaction (the memory first, then
    /// the lap linked to it).
    fn laps_insert_with_memory(&mut self, laps: &[LapWrite<'_>]) -> Result<()>;
    /// Records the laps of blocking runs in one transaction. SQLite stores the lap rows now and
    /// their ledger memories later ([`LedgerRows::laps_fold_chunk`]); PostgreSQL stores both
    /// at once (its laps carry their memory in one round trip, and its index pages are the
    /// server's to manage).
    fn laps_record(&mut self, laps: &[LapWrite<'_>]) -> Result<()>;
    /// Gives up to `limit` laps recorded without a ledger memory their memory, in one
    /// transaction; returns how many (fewer than `limit`: none is left). Idempotent and safe
    /// to race. Nothing to do where laps are stored with their memory.
    fn laps_fold_chunk(&mut self, _limit: usize) -> Result<usize> {
        Ok(0)
    }
    /// Records the ends of runs (status, reason, laps, result, end time), in one transaction.
    fn runs_finish(&mut self, ends: &[RunEnd<'_>]) -> Result<()>;
    /// Records one run's end (see [`LedgerRows::runs_finish`]).
    fn run_finish(&mut self, run_id: &str, status: RunStatus, reason: &str, laps: i64, result: &str) -> Result<()> {
        self.runs_finish(&[RunEnd { run_id, status, reason, laps, result }])
    }
    /// One step of an agent-driven run, in one transaction that holds the run's row locked:
    /// `decide` sees the row as it is under the lock (so steps from several processes or
    /// hosts number their laps one after another) and returns what to write; an error from it
    /// rolls everything back and is returned. A missing run is [`Error::NotFound`].
    /// Callers use [`Store::step_locked`], which carries a value out of `decide`.
    fn step_locked_with(&mut self, run_id: &str, decide: &mut dyn FnMut(RunRow) -> Result<StepWrite>) -> Result<()>;
    /// Links a lap to its ledger memory once that is written.
    fn lap_set_memory(&mut self, run_id: &str, lap: i64, memory_id: i64) -> Result<()>;
    /// Ends a run that is still running (an agent-driven run on `cancel`); false when it had
    /// ended already. One transaction.
    fn run_end_if_running(&mut self, run_id: &str, status: RunStatus, reason: &str) -> Result<bool>;
    /// Asks a running run to stop (its own process ends it at its next look) and returns the
    /// run's status as it is now (`None`: no such run). One transaction; a run that has ended
    /// is left as it is.
    fn run_request_cancel(&mut self, run_id: &str) -> Result<Option<RunStatus>>;
    /// The running runs asked to stop, in one read (waiting loops share it).
    fn runs_cancelling(&self) -> Result<HashSet<String>>;
    /// One run by id. Reads only.
    fn run_get(&self, run_id: &str) -> Result<Option<RunRow>>;
    /// Runs newest first, of one loop name or of all, at most `limit`. Reads only.
    fn run_history(&self, name: Option<&str>, limit: usize) -> Result<Vec<RunRow>>;
    /// A page of runs newest first, starting below the cursor `before`. Reads only.
    fn run_page(&self, name: Option<&str>, limit: usize, before: Option<i64>) -> Result<Vec<PagedRun>>;
    /// Loop names with their run counts, most recently run first. Reads only.
    fn loop_names(&self, limit: usize) -> Result<Vec<LoopName>>;
    /// Up to `limit` laps of a run numbered above `after`, in lap order. Reads only.
    fn run_laps_after(&self, run_id: &str, after: i64, limit: usize) -> Result<Vec<LapRow>>;
    /// The first `limit` laps of a run, in lap order. Reads only.
    fn run_laps(&self, run_id: &str, limit: usize) -> Result<Vec<LapRow>> {
        self.run_laps_after(run_id, 0, limit)
    }
}

/// Moving a whole store (`slm export` / `slm import`).
pub trait TransferRows {
    /// Visits every memory, then every run, then every lap, inside one read transaction (one
    /// committed state, however other processes write meanwhile). Reads only.
    fn export(&mut self, visit: &mut dyn FnMut(ExportItem) -> Result<()>) -> Result<()>;
    /// Stores an imported run record unless its run id is stored; true when stored. The run
    /// keeps its id; its process fields are cleared (no process of this store drives it).
    fn run_import(&mut self, run: &RunOut) -> Result<bool>;
    /// True when a run with this id is stored. Reads only.
    fn run_exists(&self, run_id: &str) -> Result<bool>;
    /// Stores an imported lap row unless (run, lap) is stored, linked to `memory_id`; true when
    /// stored. Callers use [`Store::lap_import`], which finds the memory and checks the run.
    fn lap_import_row(&mut self, run_id: &str, row: &LapRow, memory_id: Option<i64>) -> Result<bool>;
}

/// An open store, of either kind: dereferences to its [`Backend`].
pub struct Store(Box<dyn Backend>);

impl std::ops::Deref for Store {
    type Target = dyn Backend;
    fn deref(&self) -> &(dyn Backend + 'static) {
        &*self.0
    }
}

impl std::ops::DerefMut for Store {
    fn deref_mut(&mut self) -> &mut (dyn Backend + 'static) {
        &mut *self.0
    }
}

/// Laps given their ledger memory per transaction by [`Store::laps_fold`].
const FOLD_CHUNK: usize = 4096;

/// What [`Store::laps_fold`] did: laps folded before it stopped, and whether none is left
/// waiting (or the error that stopped it, after the chunks already committed).
#[derive(Debug)]
pub struct Folded {
    pub laps: usize,
    pub outcome: Result<bool>,
}

impl Store {
    /// Opens the SQLite database at `path` (see [`SqliteStore::open`]).
    pub fn open(path: &std::path::Path) -> Result<Store> {
        SqliteStore::open(path).map(|s| Store(Box::new(s)))
    }

    /// Opens the store at `location`, bringing its schema up to date.
    pub fn open_at(location: &Location) -> Result<Store> {
        Ok(match location {
            Location::Sqlite(path) => Store(Box::new(SqliteStore::open(path)?)),
            Location::Postgres(url) => Store(Box::new(PgStore::open(url)?)),
        })
    }

    /// True for the shared PostgreSQL store.
    pub fn is_postgres(&self) -> bool {
        self.0.is_shared()
    }

    /// Records one step of an agent-driven run (see [`LedgerRows::step_locked_with`]) and
    /// returns the value `decide` produced with its write.
    pub fn step_locked<T>(&mut self, run_id: &str, decide: impl FnOnce(RunRow) -> Result<(StepWrite, T)>) -> Result<T> {
        let mut decide = Some(decide);
        let mut out = None;
        self.0.step_locked_with(run_id, &mut |row| {
            let f = decide.take().ok_or_else(|| Error::Corrupt(format!("run {run_id}: a step decided twice")))?;
            let (write, value) = f(row)?;
            out = Some(value);
            Ok(write)
        })?;
        out.ok_or_else(|| Error::Corrupt(format!("run {run_id}: a step committed without deciding")))
    }

    /// Derives the ledger memories of up to `most` laps recorded without one, in transactions
    /// of `FOLD_CHUNK` laps (see [`LedgerRows::laps_fold_chunk`]).
    pub fn laps_fold(&mut self, most: usize) -> Folded {
        let mut laps = 0;
        loop {
            let chunk = FOLD_CHUNK.min(most - laps);
            match self.0.laps_fold_chunk(chunk) {
                Ok(n) if n < chunk => return Folded { laps: laps + n, outcome: Ok(true) },
                Ok(n) => {
                    laps += n;
                    if laps >= most {
                        return Folded { laps, outcome: Ok(false) };
                    }
                }
                Err(e) => return Folded { laps, outcome: Err(e) },
            }
        }
    }

    /// Stores an imported lap unless (run, lap) is already stored, linked to its ledger memory
    /// when one with that content and those (normalised) tags is stored; true when stored. The
    /// run must be stored (an export lists runs before laps): a lap of an unknown run is
    /// invalid input naming `loop_lap.run_id`.
    pub fn lap_import(&mut self, lap: &LapOut) -> Result<bool> {
        let memory_id = match &lap.memory {
            Some(m) => find_row(|k| self.0.find_dedup(k), Kind::Lap, &m.content, &m.tags, Some(&lap.row.ts))?,
            None => None,
        };
        if !self.0.run_exists(&lap.run_id)? {
            return Err(Error::invalid("loop_lap.run_id", &lap.run_id, "must name a run stored earlier in the import"));
        }
        self.0.lap_import_row(&lap.run_id, &lap.row, memory_id)
    }
}
