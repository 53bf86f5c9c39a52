//! The embedded SQLite store: one database file in the data root, implementing the
//! [`Backend`] contract. This file opens the connection and holds the
//! memory rows (`MemoryRows`); `ledger.rs` the loop ledger's SQL, `transfer.rs` export and
//! import, `schema.rs` the schema and its migrations, `checkpoint.rs` a bulk import's
//! background checkpoints. The shared PostgreSQL store next door (`../pg/`) keeps the same
//! meanings.
//!
//! Rules every method follows, because many processes share one data root:
//! WAL mode and a busy timeout on every connection; writes in short `BEGIN IMMEDIATE`
//! transactions that never include embedding work (the engine embeds first, then writes);
//! read paths never write. The store knows nothing of embeddings beyond storing bytes: the
//! engine ([`crate::engine`]) decides what to embed and the index ([`crate::index`]) scores.
//!
//! Hard edges, decided here once for every surface: a data root on read-only media (or a
//! database file the process may not write) is opened read-only, immutable when it was
//! cleanly closed, and every write then fails as [`Error::ReadOnly`]; SQLite reporting a
//! damaged file runs `PRAGMA quick_check` and fails as [`Error::Corrupt`] with its verdict;
//! an empty database file in a data root whose `feed/` folder shows a store lived there is
//! refused instead of silently becoming a new, empty store.

mod checkpoint;
mod ledger;
mod schema;
mod transfer;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, params_from_iter, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

pub use schema::SCHEMA_VERSION;

use crate::memory::{now_rfc3339, Kind, Memory};
use crate::storage::{
    backend, row_key, Backend, Counts, IdMarks, Inserted, ListFilter, MemoryRows, NewRow, PendingRow, StoredVector, VectorVisitor,
    FORGETS_META,
};
use crate::{Error, Result};

/// Counts a forget in the meta table ([`MemoryRows::forgets`]), inside the forget's transaction.
const BUMP_FORGETS: &str = "INSERT INTO meta(key, value) VALUES (?1, '1')
     ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)";

/// The database file's name inside the data root.
pub const DB_FILE: &str = "slm.db";

/// How long a connection waits for another process's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The meta key recording when the store was created (written with the schema).
pub const CREATED_META: &str = "created_at";

/// WAL pages between checkpoints on a bulk connection ([`SqliteStore::bulk_mode`]):
/// about 200 MB, several batches. The random dedup keys of every batch rewrite leaf pages of
/// that index (11,000 pages in a 1M-row store), so each checkpoint copies those pages once for
/// all the batches since the last, where one every 10,000 pages copied them again each time
/// (with [`BULK_CACHE_KIB`], a 1M import took 91 s, was 112 s).
const BULK_CHECKPOINT_PAGES: u32 = 50_000;

/// The page cache of a bulk connection, in KiB (SQLite's negative `cache_size`): 256 MB holds
/// every index of a 1M-row store (about 130 MB) besides a batch, so inserts stop re-reading
/// index pages that the batch's data pages pushed out of a 64 MB cache.
const BULK_CACHE_KIB: u32 = 262_144;

/// Lines of an integrity check kept in a report (SQLite lists every damaged page).
const CHECK_LINES: usize = 5;

/// True when this process cannot write `path` (a read-only mount, `chattr +i`, or missing
/// permission): `access(2)` answers for the real situation, root included, unlike mode bits.
fn not_writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) != 0 }
}

/// A `file:` URI for `path` with `query`, percent-encoding every byte URIs reserve.
fn file_uri(path: &Path, query: &str) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{uri}?{query}")
}

/// Turns a SQLite error into the crate's error, naming read-only storage as such.
pub(crate) fn db_error(path: &Path, source: rusqlite::Error) -> Error {
    if source.sqlite_error_code() == Some(rusqlite::ErrorCode::ReadOnly) {
        return Error::ReadOnly { path: path.parent().unwrap_or(path).to_path_buf() };
    }
    Error::Database { path: path.to_path_buf(), source }
}

/// True for SQLite's "the file is damaged" answers (SQLITE_CORRUPT, SQLITE_NOTADB).
fn is_corrupt_code(source: &rusqlite::Error) -> bool {
    matches!(source.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase))
}

/// The [`Error::Corrupt`] for a damaged-file answer, with the integrity check's verdict.
fn corrupt(path: &Path, source: &rusqlite::Error, verdict: &str) -> Error {
    Error::Corrupt(format!("{}: {source}; quick_check: {verdict}", path.display()))
}

/// Runs `PRAGMA quick_check` (or the full `integrity_check`) and returns `"ok"` or its first
/// findings joined by "; ". SQLite may abort a check part-way on a damaged page: what it
/// found until then is kept, with the abort as the last finding.
fn run_check(conn: &Connection, full: bool) -> rusqlite::Result<String> {
    let sql = if full { "PRAGMA integrity_check" } else { "PRAGMA quick_check" };
    let mut lines = Vec::new();
    let walked = conn.prepare(sql).and_then(|mut stmt| {
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            lines.push(row.get::<_, String>(0)?);
        }
        Ok(())
    });
    match walked {
        Ok(()) => {}
        Err(e) if is_corrupt_code(&e) => lines.push(format!("the check stopped: {e}")),
        Err(e) => return Err(e),
    }
    if lines.len() == 1 && lines[0] == "ok" {
        return Ok("ok".into());
    }
    let mut out = lines.iter().take(CHECK_LINES).cloned().collect::<Vec<_>>().join("; ");
    if lines.len() > CHECK_LINES {
        out.push_str(&format!("; ... ({} findings)", lines.len()));
    }
    Ok(out)
}

/// Retries `f` while SQLite reports the database busy or locked (up to ~10 s).
fn retry_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let mut tries = 0;
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if tries < 200 && matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) =>
            {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// An open connection to the data root's SQLite database (the embedded store).
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// Opened read-only because the data root cannot be written.
    read_only: bool,
    /// The last integrity verdict in this process (`None`: never checked).
    integrity: Option<String>,
    /// Set up for bulk inserts ([`SqliteStore::bulk_mode`]): its background checkpointer.
    bulk: Option<checkpoint::Background>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// A data root this process cannot write is opened read-only (see the module docs).
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if not_writable(dir) || (path.exists() && not_writable(path)) {
            return Self::open_read_only(path);
        }
        // Before SQLite writes a header into an emptied file, and under no lock: a data root
        // with a feed folder was created by an earlier open, so no first open can race this.
        if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
            if let Some(e) = Self::emptied(path) {
                return Err(e);
            }
        }
        let db_err = |source| Self::classify_open(path, db_error(path, source));
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(db_err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(db_err)?;
        // journal_mode=WAL is persistent and a no-op once set; it needs the lock only the first
        // time, and when several processes open a fresh data root at once SQLite can answer
        // BUSY without consulting the busy handler, so retry for a while.
        let mode: String = retry_busy(|| conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))).map_err(db_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Corrupt(format!("{}: cannot switch to WAL mode (got {mode})", path.display())));
        }
        conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;").map_err(db_err)?;
        let mut store = SqliteStore { conn, path: path.to_path_buf(), read_only: false, integrity: None, bulk: None };
        store.migrate()?;
        Ok(store)
    }

    /// Opens an existing store without writing anything: read-only, and immutable (no
    /// `-shm` to create) when it was cleanly closed, i.e. has no write-ahead log with content.
    fn open_read_only(path: &Path) -> Result<SqliteStore> {
        let root = path.parent().unwrap_or(path).to_path_buf();
        if !path.is_file() {
            return Err(Error::ReadOnly { path: root });
        }
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let wal_in_use = std::fs::metadata(&wal).map(|m| m.len() > 0).unwrap_or(false);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        // Immutable would ignore a log's commits, so a store left with one is read through it
        // (SQLite can when its -shm exists), or not at all.
        let uri = if wal_in_use { file_uri(path, "mode=ro") } else { file_uri(path, "immutable=1") };
        let db_err = |source| Self::classify_open(path, db_error(path, source));
        let conn = Connection::open_with_flags(&uri, flags).map_err(|e| {
            if wal_in_use {
                Error::Corrupt(format!(
                    "{} was not closed cleanly (its write-ahead log {} holds data) and the data root is read-only, so it cannot be read safely; open it once where it can be written",
                    path.display(),
                    wal.display()
                ))
            } else {
                db_err(e)
            }
        })?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(db_err)?;
        let version = schema::user_version(&conn).map_err(db_err)?;
        if version == 0 {
            return Err(Self::emptied(path).unwrap_or(Error::ReadOnly { path: root }));
        }
        if version != SCHEMA_VERSION {
            return Err(Error::Corrupt(format!(
                "{} has schema version {version} and this slm needs {SCHEMA_VERSION}; the data root is read-only, so it cannot be upgraded",
                path.display()
            )));
        }
        Ok(SqliteStore { conn, path: path.to_path_buf(), read_only: true, integrity: None, bulk: None })
    }

    /// A damaged file reported at open is corruption, not a generic database error.
    fn classify_open(path: &Path, e: Error) -> Error {
        match e {
            Error::Database { source, .. } if is_corrupt_code(&source) => Error::Corrupt(format!("{}: {source}", path.display())),
            e => e,
        }
    }

    /// The error for a database without a schema in a data root that shows a store lived
    /// there (its `feed/` folder: every committed write and every watch creates it, always
    /// after the store was created), or `None` when the data root looks brand new.
    fn emptied(path: &Path) -> Option<Error> {
        let root = path.parent().unwrap_or(path);
        if let Some(store) = backend::pg_mark(root) {
            return Some(Error::invalid(
                "store",
                "unset",
                format!(
                    "this data root serves the PostgreSQL store {store} (see its {} file) and holds no SQLite \
                     database; pass that --store (or SLM_STORE) again, or use another --data-dir for a local \
                     SQLite store",
                    backend::PG_MARK
                ),
            ));
        }
        let feed = root.join(crate::feed::FEED_DIR);
        if !feed.is_dir() {
            return None;
        }
        let state = match std::fs::metadata(path) {
            Err(_) => "is missing".to_string(),
            Ok(m) if m.len() == 0 => "is empty (0 bytes)".to_string(),
            Ok(m) => format!("has no schema ({} bytes)", m.len()),
        };
        Some(Error::Corrupt(format!(
            "{} {state} but {} shows a store lived in this data root; restore the file from a \
             backup, or move the data root aside to start a new store",
            path.display(),
            feed.display()
        )))
    }

    /// `PRAGMA quick_check` on a connection of its own: the failing statement may still hold
    /// this one, and SQLite then refuses to walk the file from it.
    fn quick_check(&self) -> String {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let uri = file_uri(&self.path, if self.read_only { "immutable=1" } else { "mode=ro" });
        Connection::open_with_flags(uri, flags).and_then(|c| run_check(&c, false)).unwrap_or_else(|e| format!("the check failed: {e}"))
    }

    /// Maps an error of this store: SQLite reporting damage runs `quick_check` and becomes
    /// [`Error::Corrupt`] with its verdict.
    pub(crate) fn checked(&mut self, e: Error) -> Error {
        match e {
            Error::Database { source, .. } if is_corrupt_code(&source) => {
                let verdict = self.quick_check();
                self.integrity = Some(verdict.clone());
                corrupt(&self.path, &source, &verdict)
            }
            e => e,
        }
    }

    /// Maps an error of a read (or a single-statement write): see [`Store::checked`]. Reads
    /// take `&self`, so the verdict is reported but not kept.
    fn err(&self, source: rusqlite::Error) -> Error {
        if is_corrupt_code(&source) {
            return corrupt(&self.path, &source, &self.quick_check());
        }
        db_error(&self.path, source)
    }

    fn migrate(&mut self) -> Result<()> {
        let current = schema::user_version(&self.conn).map_err(|e| self.err(e))?;
        if current == SCHEMA_VERSION {
            return Ok(()); // the common path: no write, no lock
        }
        if current > SCHEMA_VERSION {
            return Err(Error::Corrupt(format!(
                "{} has schema version {current}, newer than this slm ({SCHEMA_VERSION}); upgrade slm",
                self.path.display()
            )));
        }
        let path = self.path.clone();
        let db_err = |source| db_error(&path, source);
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db_err)?;
        // Another process may have migrated while we waited for the lock.
        let current = schema::user_version(&tx).map_err(db_err)?;
        if current == 0 {
            if let Some(e) = Self::emptied(&path) {
                return Err(e);
            }
        }
        for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
            tx.execute_batch(sql).map_err(db_err)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64).map_err(db_err)?;
        }
        if current == 0 {
            tx.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)", [CREATED_META, &now_rfc3339()]).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)
    }

    /// After a commit: a bulk connection's checkpointer hears how long the log is.
    fn committed(&self) {
        if let Some(b) = &self.bulk {
            b.committed(&self.conn);
        }
    }

    /// [`SqliteStore::bulk_mode`] with a checkpoint every `pages` log pages.
    fn bulk_mode_at(&mut self, pages: u32) -> Result<()> {
        self.conn
            .execute_batch(&format!("PRAGMA cache_size = -{BULK_CACHE_KIB}; PRAGMA wal_autocheckpoint = 0"))
            .map_err(|e| self.err(e))?;
        self.bulk = Some(checkpoint::Background::start(&self.conn, &self.path, pages));
        Ok(())
    }

    /// The largest id this store has ever issued (`AUTOINCREMENT`'s sequence; 0 when none):
    /// unlike `max(id)` it never goes down, except when an older copy of the file is restored.
    fn max_issued_id(&self) -> Result<i64> {
        self.conn
            .query_row("SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'memories'), 0)", [], |r| r.get(0))
            .or_else(|e| match e {
                // No AUTOINCREMENT row has ever been written: the table does not exist yet.
                rusqlite::Error::SqliteFailure(_, Some(ref m)) if m.contains("no such table") => Ok(0),
                e => Err(e),
            })
            .map_err(|e| self.err(e))
    }
}

/// Inserts one row and its tags inside `tx`: `(id, deduped)`. A row whose (kind, content,
/// tags) is already stored keeps its id (`ON CONFLICT DO NOTHING` makes two processes storing
/// the same text at once harmless).
fn insert_row(tx: &rusqlite::Transaction<'_>, row: &NewRow<'_>, created_at: &str) -> rusqlite::Result<Inserted> {
    let key = row_key(row.kind, row.content, row.tags, created_at);
    let n = tx
        .prepare_cached(
            "INSERT INTO memories(kind, content, created_at, dedup_key, embedding, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(dedup_key) DO NOTHING",
        )?
        .execute(params![row.kind.as_str(), row.content, created_at, &key[..], crate::spaces::to_blob(row.embedding), row.expires_at])?;
    if n == 0 {
        let id = tx.prepare_cached("SELECT id FROM memories WHERE dedup_key = ?1")?.query_row([&key[..]], |r| r.get(0))?;
        if row.kind == Kind::Memory {
            // The latest write says how long the memory holds (a renewed lock, a made-permanent note).
            tx.prepare_cached("UPDATE memories SET expires_at = ?2 WHERE id = ?1 AND expires_at IS NOT ?2")?
                .execute(params![id, row.expires_at])?;
        }
        return Ok(Inserted { id, deduped: true });
    }
    let id = tx.last_insert_rowid();
    let mut tag = tx.prepare_cached("INSERT OR IGNORE INTO memory_tags(memory_id, tag) VALUES (?1, ?2)")?;
    for t in row.tags {
        tag.execute(params![id, t])?;
    }
    Ok(Inserted { id, deduped: false })
}

/// A tag set as one JSON array parameter, for `json_each`.
pub(crate) fn tags_json(tags: &[String]) -> String {
    serde_json::Value::from(tags.to_vec()).to_string()
}

type RawRow = (i64, String, String, String, Option<String>, Option<String>);

/// Reads the columns `id, kind, content, created_at, tags (newline-joined), expires_at`.
fn raw_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

fn to_memory((id, kind, content, created_at, tags, expires_at): RawRow) -> Result<Memory> {
    let tags = tags.map(|t| t.split('\n').map(str::to_string).collect()).unwrap_or_default();
    Ok(Memory { id, content, tags, created_at, kind: Kind::parse(&kind)?, expires_at })
}

impl Backend for SqliteStore {
    fn schema_version(&self) -> i64 {
        SCHEMA_VERSION
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn tune_for_ledger_writer(&self) {
        // Laps of a thousand runs land on pages all over the tag, dedup and lap indexes: keep
        // those pages cached between batches, and let the WAL grow to 16 MB before this
        // connection checkpoints, so a page rewritten by many batches is copied back once.
        let _ = self.conn.execute_batch("PRAGMA cache_size = -16384; PRAGMA wal_autocheckpoint = 4000;");
    }

    /// True when the store was opened read-only (the data root cannot be written).
    fn read_only(&self) -> bool {
        self.read_only
    }

    /// Fails with [`Error::ReadOnly`] on a read-only store: writers call it before doing any
    /// work (embedding) that the write would waste.
    fn writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly { path: self.path.parent().unwrap_or(&self.path).to_path_buf() });
        }
        Ok(())
    }

    /// Runs SQLite's integrity check (`full`: `integrity_check`, else `quick_check`) and
    /// returns `"ok"` or the first findings; the verdict is kept for [`Backend::integrity`].
    fn check_integrity(&mut self, full: bool) -> Result<String> {
        let verdict = run_check(&self.conn, full).unwrap_or_else(|e| format!("the check failed: {e}"));
        self.integrity = Some(verdict.clone());
        Ok(verdict)
    }

    /// The last integrity verdict in this process, if a check ran.
    fn integrity(&self) -> Option<&str> {
        self.integrity.as_deref()
    }

    /// The database file's path.
    fn path(&self) -> &Path {
        &self.path
    }

    /// Reads a value from the meta table.
    fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT value FROM meta WHERE key = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }

    /// Sets a meta value unless one is already there; returns the value now stored.
    fn meta_init(&mut self, key: &str, value: &str) -> Result<String> {
        if let Some(v) = self.meta(key)? {
            return Ok(v);
        }
        self.conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES (?1, ?2)", [key, value]).map_err(|e| self.err(e))?;
        Ok(self.meta(key)?.unwrap_or_else(|| value.to_string()))
    }

    /// Closes the database connection now (SQLite checkpoints the write-ahead log and removes
    /// it when this was the last connection), leaving a closed in-memory one in its place;
    /// later calls fail cleanly. For a process that ends without dropping its engine.
    fn close(&mut self) {
        // The checkpointer first (it finishes a pass under way, then stops), so this close is
        // the last connection's and copies the rest of the log.
        self.bulk = None;
        if let Ok(placeholder) = Connection::open_in_memory() {
            let old = std::mem::replace(&mut self.conn, placeholder);
            if let Err((_, e)) = old.close() {
                tracing::warn!("closing {}: {e}", self.path.display());
            }
        }
    }

    /// Sets this connection up for a long series of large insert batches (an import): a page
    /// cache of `BULK_CACHE_KIB` that holds a batch (it would otherwise spill pages to the
    /// WAL before the commit) and the indexes, checkpoints every `BULK_CHECKPOINT_PAGES`
    /// instead of every 1,000 pages (the index pages every batch touches are then copied into
    /// the database once per checkpoint, not once per batch), and no per-tag foreign-key probe in [`SqliteStore::insert`] (its tags belong
    /// to the row it has just inserted in the same transaction). Durability is unchanged
    /// (WAL, `synchronous = NORMAL`); other connections keep their own settings.
    ///
    /// The checkpoints themselves run on a thread of their own (`checkpoint::Background`),
    /// beside the inserts: in a 1M import they were a third of the writer thread's time.
    fn bulk_mode(&mut self) -> Result<()> {
        self.bulk_mode_at(BULK_CHECKPOINT_PAGES)
    }
}

impl MemoryRows for SqliteStore {
    /// The id of a row with this dedup key, if one exists.
    fn find_dedup(&self, key: &[u8]) -> Result<Option<i64>> {
        self.conn
            .prepare_cached("SELECT id FROM memories WHERE dedup_key = ?1")
            .and_then(|mut st| st.query_row([key], |r| r.get(0)).optional())
            .map_err(|e| self.err(e))
    }

    /// Inserts rows in one short transaction. Returns what became of each row, in order; a
    /// row whose (kind, content, tags) is already stored returns the existing id.
    fn insert(&mut self, rows: &[NewRow<'_>]) -> Result<Vec<Inserted>> {
        // A no-op inside a transaction, so it brackets the transaction (see `bulk_mode`).
        let bulk = self.bulk.is_some();
        let fk =
            |conn: &Connection, on: bool| conn.execute_batch(if on { "PRAGMA foreign_keys = ON" } else { "PRAGMA foreign_keys = OFF" });
        let r = (|| {
            if bulk {
                fk(&self.conn, false)?;
            }
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = now_rfc3339();
            let out = rows.iter().map(|row| insert_row(&tx, row, row.created_at.unwrap_or(&now))).collect::<rusqlite::Result<Vec<_>>>()?;
            tx.commit()?;
            Ok(out)
        })();
        let r = match (bulk, r) {
            (true, r) => fk(&self.conn, true).and(r),
            (false, r) => r,
        };
        if r.is_ok() {
            self.committed();
        }
        r.map_err(|e| {
            let e = db_error(&self.path, e);
            self.checked(e)
        })
    }

    /// Deletes memories by id; returns the ids that existed (and are now gone).
    fn forget(&mut self, ids: &[i64]) -> Result<Vec<i64>> {
        let r = (|| {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut gone = Vec::new();
            {
                let mut del = tx.prepare_cached("DELETE FROM memories WHERE id = ?1")?;
                for &id in ids {
                    if del.execute([id])? == 1 {
                        gone.push(id);
                    }
                }
            }
            if !gone.is_empty() {
                tx.prepare_cached(BUMP_FORGETS)?.execute([FORGETS_META])?;
            }
            tx.commit()?;
            Ok(gone)
        })();
        r.map_err(|e| {
            let e = db_error(&self.path, e);
            self.checked(e)
        })
    }

    fn forgets(&self) -> Result<i64> {
        Ok(self.meta(FORGETS_META)?.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Fetches memories by id, in the order given; ids that do not exist are skipped.
    fn get_many(&self, ids: &[i64]) -> Result<Vec<Memory>> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT m.id, m.kind, m.content, m.created_at,
                        (SELECT group_concat(tag, char(10)) FROM
                           (SELECT tag FROM memory_tags WHERE memory_id = m.id ORDER BY tag)),
                        m.expires_at
                 FROM memories m WHERE m.id = ?1",
            )
            .map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(raw) = stmt.query_row([id], raw_row).optional().map_err(|e| self.err(e))? {
                out.push(to_memory(raw)?);
            }
        }
        Ok(out)
    }

    /// Lists memories newest first, optionally only those carrying every tag in `tags`,
    /// only of `kind`, and only with ids below `before` (for paging).
    fn list(&self, f: &ListFilter<'_>) -> Result<Vec<Memory>> {
        let ListFilter { tags, kind, limit, before, live_at } = *f;
        let mut sql = String::from(
            "SELECT m.id, m.kind, m.content, m.created_at,
                    (SELECT group_concat(tag, char(10)) FROM
                       (SELECT tag FROM memory_tags WHERE memory_id = m.id ORDER BY tag)),
                    m.expires_at
             FROM memories m WHERE m.id < ?1",
        );
        let mut args: Vec<rusqlite::types::Value> = vec![before.unwrap_or(i64::MAX).into()];
        if let Some(k) = kind {
            args.push(k.as_str().to_string().into());
            sql.push_str(&format!(" AND m.kind = ?{}", args.len()));
        }
        if let Some(now) = live_at {
            args.push(now.to_string().into());
            sql.push_str(&format!(" AND (m.expires_at IS NULL OR m.expires_at > ?{})", args.len()));
        }
        if !tags.is_empty() {
            // One parameter for the whole set, whatever its size (`tags` is deduplicated):
            // a clause per tag would hit SQLite's expression-depth limit.
            args.push(tags_json(tags).into());
            args.push((tags.len() as i64).into());
            sql.push_str(&format!(
                " AND (SELECT count(*) FROM memory_tags t WHERE t.memory_id = m.id
                       AND t.tag IN (SELECT value FROM json_each(?{}))) = ?{}",
                args.len() - 1,
                args.len()
            ));
        }
        args.push((limit as i64).into());
        sql.push_str(&format!(" ORDER BY m.id DESC LIMIT ?{}", args.len()));
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let rows = stmt.query_map(params_from_iter(args), raw_row).map_err(|e| self.err(e))?;
        rows.map(|r| r.map_err(|e| self.err(e)).and_then(to_memory)).collect()
    }

    /// Counts rows of each kind.
    fn counts(&self) -> Result<Counts> {
        let count = |k: Kind| -> Result<u64> {
            self.conn
                .query_row("SELECT count(*) FROM memories WHERE kind = ?1", [k.as_str()], |r| r.get::<_, i64>(0))
                .map(|n| n as u64)
                .map_err(|e| self.err(e))
        };
        Ok(Counts { memories: count(Kind::Memory)?, laps: count(Kind::Lap)? })
    }

    /// The largest id ever stored (0 for an empty store).
    fn max_id(&self) -> Result<i64> {
        self.conn.query_row("SELECT coalesce(max(id), 0) FROM memories", [], |r| r.get(0)).map_err(|e| self.err(e))
    }

    /// The stored vector bytes (empty when stored without one) of those of `ids` that exist.
    fn vector_blobs(&self, ids: &[i64]) -> Result<HashMap<i64, Vec<u8>>> {
        let mut st = self.conn.prepare_cached("SELECT embedding FROM memories WHERE id = ?1").map_err(|e| self.err(e))?;
        let mut out = HashMap::with_capacity(ids.len());
        for &id in ids {
            let blob = st.query_row([id], |r| r.get::<_, Vec<u8>>(0)).optional().map_err(|e| self.err(e))?;
            out.extend(blob.map(|b| (id, b)));
        }
        Ok(out)
    }

    /// The largest id stored and the largest ever issued.
    fn id_marks(&self) -> Result<IdMarks> {
        Ok(IdMarks { max: self.max_id()?, issued: self.max_issued_id()? })
    }

    /// Visits the vectors of every row with `id > after`, in id order, optionally of one kind.
    fn vectors_after(&self, after: i64, kind: Option<Kind>, visit: &mut VectorVisitor<'_>) -> Result<()> {
        let sql = match kind {
            None => "SELECT id, kind, embedding FROM memories WHERE id > ?1 ORDER BY id",
            Some(_) => "SELECT id, kind, embedding FROM memories WHERE id > ?1 AND kind = ?2 ORDER BY id",
        };
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let mut rows = match kind {
            None => stmt.query(params![after]),
            Some(k) => stmt.query(params![after, k.as_str()]),
        }
        .map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            let id: i64 = row.get(0).map_err(|e| self.err(e))?;
            let kind: String = row.get(1).map_err(|e| self.err(e))?;
            let blob = row.get_ref(2).map_err(|e| self.err(e))?.as_blob().map_err(|e| self.err(e.into()))?;
            visit(id, Kind::parse(&kind)?, blob)?;
        }
        Ok(())
    }

    /// Rows stored without a vector yet, oldest first.
    fn pending_rows(&self, limit: usize) -> Result<Vec<PendingRow>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id, content FROM memories WHERE length(embedding) = 0 ORDER BY id LIMIT ?1")
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([limit as i64], |r| Ok(PendingRow { id: r.get(0)?, content: r.get(1)? })).map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| self.err(e))
    }

    /// Stores the vectors of rows stored without one, in one transaction; a row embedded
    /// meanwhile (by another process) keeps its vector. Returns how many were set.
    fn set_embeddings(&mut self, rows: &[(i64, Vec<f32>)]) -> Result<usize> {
        let path = self.path.clone();
        let db_err = |source| db_error(&path, source);
        let tx = self.conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(db_err)?;
        let mut n = 0;
        {
            let mut st = tx.prepare_cached("UPDATE memories SET embedding = ?2 WHERE id = ?1 AND length(embedding) = 0").map_err(db_err)?;
            for (id, v) in rows {
                n += st.execute(params![id, crate::spaces::to_blob(v)]).map_err(db_err)?;
            }
        }
        tx.commit().map_err(db_err)?;
        Ok(n)
    }

    /// For each id that exists: its embedding bytes (empty if not embedded yet) and content.
    fn vectors_or_content(&self, ids: &[i64]) -> Result<Vec<StoredVector>> {
        let mut stmt = self.conn.prepare_cached("SELECT embedding, content FROM memories WHERE id = ?1").map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for &id in ids {
            if let Some((blob, content)) =
                stmt.query_row([id], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, String>(1)?))).optional().map_err(|e| self.err(e))?
            {
                out.push(StoredVector { id, blob, content });
            }
        }
        Ok(out)
    }

    /// Which of `ids` still exist (a cheap primary-key probe per id).
    /// The id of the newest row written before `at` (RFC 3339 UTC; stored times compare as
    /// text), 0 when none. Scans ids downwards, so a recent `at` reads few rows.
    fn last_id_before(&self, at: &str) -> Result<i64> {
        self.conn
            .query_row("SELECT coalesce((SELECT id FROM memories WHERE created_at < ?1 ORDER BY id DESC LIMIT 1), 0)", [at], |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    /// Memories that have expired at `now`, oldest expiry first (the partial index).
    fn expired_ids(&self, now: &str) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= ?1 ORDER BY expires_at")
            .map_err(|e| self.err(e))?;
        let rows = stmt.query_map([now], |r| r.get(0)).map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<i64>>>().map_err(|e| self.err(e))
    }

    /// Sets each memory's expiry to the given one where it differs (a remember that deduped
    /// before its insert); reads first, so an unchanged expiry writes nothing.
    fn set_expiry(&mut self, rows: &[(i64, Option<&str>)]) -> Result<()> {
        let changed: Vec<(i64, Option<&str>)> = {
            let mut stmt = self.conn.prepare_cached("SELECT expires_at FROM memories WHERE id = ?1").map_err(|e| self.err(e))?;
            let mut out = Vec::new();
            for &(id, at) in rows {
                let now: Option<Option<String>> = stmt.query_row([id], |r| r.get(0)).optional().map_err(|e| self.err(e))?;
                if now.is_some_and(|n| n.as_deref() != at) {
                    out.push((id, at));
                }
            }
            out
        };
        if changed.is_empty() {
            return Ok(());
        }
        let r = (|| {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut up = tx.prepare_cached("UPDATE memories SET expires_at = ?2 WHERE id = ?1")?;
                for (id, at) in &changed {
                    up.execute(params![id, at])?;
                }
            }
            tx.commit()
        })();
        r.map_err(|e| {
            let e = db_error(&self.path, e);
            self.checked(e)
        })
    }

    fn existing(&self, ids: &[i64]) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare_cached("SELECT 1 FROM memories WHERE id = ?1").map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for &id in ids {
            if stmt.exists([id]).map_err(|e| self.err(e))? {
                out.push(id);
            }
        }
        Ok(out)
    }

    /// Ids (ascending) in `after < id <= upto` carrying every one of `tags` (non-empty).
    fn ids_with_all_tags_in(&self, tags: &[String], after: i64, upto: i64) -> Result<Vec<i64>> {
        if tags.is_empty() {
            return Ok(Vec::new());
        }
        // The set is one JSON parameter and `tags` is deduplicated, so "carries every tag" is
        // "matches as many rows of memory_tags as there are tags": one statement at any count
        // (a compound SELECT per tag stops at SQLite's 500-term limit).
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT memory_id FROM memory_tags
                 WHERE tag IN (SELECT value FROM json_each(?3)) AND memory_id > ?1 AND memory_id <= ?2
                 GROUP BY memory_id HAVING count(*) = ?4 ORDER BY memory_id",
            )
            .map_err(|e| self.err(e))?;
        let args = params![after, upto, tags_json(tags), tags.len() as i64];
        let rows = stmt.query_map(args, |r| r.get::<_, i64>(0)).map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{dedup_key, find_row, LapRow, LapWrite, LedgerRows, RunRow};

    /// A forget that removes rows counts once in the store's forget counter, in its own
    /// transaction; one that removes nothing does not count.
    #[test]
    fn forgets_that_remove_rows_are_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&tmp.path().join(DB_FILE)).unwrap();
        assert_eq!(store.forgets().unwrap(), 0);
        let v = vec![0.0f32; crate::embed::DIM];
        let row = |content| NewRow { kind: Kind::Memory, content, tags: &[], embedding: &v, created_at: None, expires_at: None };
        let ids: Vec<i64> = store.insert(&[row("one"), row("two")]).unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(store.forget(&ids).unwrap(), ids);
        assert_eq!(store.forgets().unwrap(), 1, "one forget of two rows counts once");
        assert!(store.forget(&ids).unwrap().is_empty());
        assert_eq!(store.forgets().unwrap(), 1, "a forget that removed nothing does not count");
        let three = store.insert(&[row("three")]).unwrap()[0].id;
        store.forget(&[three]).unwrap();
        assert_eq!(store.forgets().unwrap(), 2);
    }

    /// Tag filters are one statement at any tag count: a row carrying 700 tags is found by
    /// all of them (a compound SELECT per tag stopped at 500, an EXISTS per tag at ~1000).
    #[test]
    fn tag_filters_work_at_any_count() {
        let tmp = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&tmp.path().join(DB_FILE)).unwrap();
        let mut tags: Vec<String> = (0..1200).map(|i| format!("tag{i:04}")).collect();
        tags.sort();
        let v = vec![0.0f32; crate::embed::DIM];
        let rows = [
            NewRow { kind: Kind::Memory, content: "all of them", tags: &tags, embedding: &v, created_at: None, expires_at: None },
            NewRow { kind: Kind::Memory, content: "most of them", tags: &tags[1..], embedding: &v, created_at: None, expires_at: None },
        ];
        let ids: Vec<i64> = store.insert(&rows).unwrap().into_iter().map(|r| r.id).collect();
        assert_eq!(store.ids_with_all_tags(&tags).unwrap(), vec![ids[0]]);
        assert_eq!(store.ids_with_all_tags(&tags[1..]).unwrap(), ids);
        assert_eq!(store.ids_with_all_tags_in(&tags[1..], ids[0], i64::MAX).unwrap(), vec![ids[1]]);
        let listed: Vec<i64> = store.list(&ListFilter { tags: &tags, ..ListFilter::newest(10) }).unwrap().iter().map(|m| m.id).collect();
        assert_eq!(listed, vec![ids[0]]);
        let listed: Vec<i64> =
            store.list(&ListFilter { tags: &tags[1..], ..ListFilter::newest(10) }).unwrap().iter().map(|m| m.id).collect();
        assert_eq!(listed, vec![ids[1], ids[0]]);
        assert!(store.list(&ListFilter { tags: &["absent".to_string()], ..ListFilter::newest(10) }).unwrap().is_empty());
    }

    /// Bulk inserts with the checkpoints on their own thread: every row is stored, the log is
    /// copied into the database as it goes and starts over (its file stays a few batches long
    /// instead of holding the whole import), and a second connection reads everything.
    ///
    /// The test waits for each cycle the thread is asked for before the next batch: how far
    /// the log gets ahead of a thread that runs free depends on the machine (in CI, on a disk
    /// busy with a fresh build, one fsync of the thread's outlasted the whole insert and the
    /// log held all of it), and what is tested is that a finished cycle rewinds the log.
    #[test]
    fn bulk_inserts_checkpoint_beside_the_writer_and_the_log_starts_over() {
        const LIMIT: u32 = 64;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(DB_FILE);
        let mut store = SqliteStore::open(&path).unwrap();
        store.bulk_mode_at(LIMIT).unwrap();
        let v: Vec<f32> = (0..crate::embed::DIM).map(|i| (i as f32).sin()).collect();
        let tags = vec!["bulk".to_string()];
        let (batches, per) = (60, 200);
        let mut wal_max = 0;
        for b in 0..batches {
            let texts: Vec<String> = (0..per).map(|i| format!("row {b}.{i}")).collect();
            let rows: Vec<NewRow<'_>> = texts
                .iter()
                .map(|t| NewRow { kind: Kind::Memory, content: t, tags: &tags, embedding: &v, created_at: None, expires_at: None })
                .collect();
            assert!(store.insert(&rows).unwrap().iter().all(|r| !r.deduped));
            wal_max = wal_max.max(std::fs::metadata(path.with_extension("db-wal")).map_or(0, |m| m.len()));
            store.bulk.as_ref().unwrap().settle();
        }
        // 12,000 rows of 1.5 KB are about 4,500 log pages, a batch about 80; one limit is 64.
        // Each batch crosses the limit, so the thread copies the log after it, the writer
        // copies what is left at its next commit and the log starts over at the one after.
        let page = 4096 + 24;
        assert!(wal_max < 400 * page, "the log grew to {wal_max} bytes");
        store.bulk = None;
        let other = SqliteStore::open(&path).unwrap();
        assert_eq!(other.counts().unwrap(), Counts { memories: (batches * per) as u64, laps: 0 });
        assert_eq!(other.ids_with_all_tags(&tags).unwrap().len(), batches * per);
    }

    /// A store at schema v5 (laps keyed by run and lap, lap memories by content) upgrades in
    /// place: its laps keep their order and memories, a running run's lap count is its last
    /// lap, and an imported lap line still finds its memory by the old key. New laps are keyed
    /// by time: the same text at two moments is two records, at the same moment one.
    #[test]
    fn a_v5_ledger_upgrades_in_place_and_new_laps_are_keyed_by_time() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(DB_FILE);
        let tags = vec!["loop".to_string(), "loop:old".to_string()];
        let text = "loop old lap 1: continue";
        {
            let conn = Connection::open(&path).unwrap();
            for (i, sql) in schema::MIGRATIONS[..5].iter().enumerate() {
                conn.execute_batch(sql).unwrap();
                conn.pragma_update(None, "user_version", (i + 1) as i64).unwrap();
            }
            let params = crate::record::RunParams {
                limits: crate::record::Limits {
                    max_iterations: 20,
                    max_wallclock_s: 60.0,
                    poll_interval_s: 1.0,
                    max_tokens: 0,
                    no_progress_window: 0,
                    gate_min_score: 0.8,
                },
                gate: crate::record::GateSpec::Memory { gate_query: "q".into(), gate_tags: vec![], gate_verify: vec![], gate_nli_min: 0.5 },
            };
            conn.execute(
                "INSERT INTO loop_runs(run_id, name, params, status, laps, started_at, pid, proc_start)
                 VALUES ('old-1', 'old', ?1, 'running', 1, '2026-01-01T00:00:00.000000Z', 1, 1)",
                [params.to_json()],
            )
            .unwrap();
            let key = dedup_key(Kind::Lap, text, &tags);
            conn.execute(
                "INSERT INTO memories(kind, content, created_at, dedup_key, embedding)
                 VALUES ('lap', ?1, '2026-01-01T00:00:01.000000Z', ?2, x'')",
                params![text, &key[..]],
            )
            .unwrap();
            for t in &tags {
                conn.execute("INSERT INTO memory_tags(memory_id, tag) VALUES (1, ?1)", [t]).unwrap();
            }
            for lap in [3, 1, 2] {
                conn.execute(
                    "INSERT INTO loop_laps(run_id, lap, ts, decision, passed, detail, score, budget, memory_id)
                     VALUES ('old-1', ?1, ?2, 'continue', 0, 'd', 0.5, '{}', 1)",
                    params![lap, format!("2026-01-01T00:00:0{lap}.000000Z")],
                )
                .unwrap();
            }
        }
        let mut store = SqliteStore::open(&path).unwrap();
        assert_eq!(schema::user_version(&store.conn).unwrap(), SCHEMA_VERSION);
        let laps: Vec<(i64, Option<i64>)> = store.run_laps("old-1", 10).unwrap().iter().map(|l| (l.lap, l.memory_id)).collect();
        assert_eq!(laps, [(1, Some(1)), (2, Some(1)), (3, Some(1))]);
        assert_eq!(store.run_get("old-1").unwrap().unwrap().laps, 3, "a running run's count is its last lap");
        let find = |store: &SqliteStore, at: Option<&str>| find_row(|k| store.find_dedup(k), Kind::Lap, text, &tags, at).unwrap();
        assert_eq!(find(&store, Some("2026-01-01T00:00:01.000000Z")), Some(1), "the v5 key still finds the lap");

        let at = ["2026-12-01T00:00:01.000001Z", "2026-12-01T00:00:02.000002Z"];
        let row = |i: usize| NewRow {
            kind: Kind::Lap,
            content: "loop new lap 1: continue",
            tags: &tags,
            embedding: &[],
            created_at: Some(at[i]),
            expires_at: None,
        };
        let first = store.insert(&[row(0), row(1)]).unwrap();
        assert!(first.iter().all(|r| !r.deduped) && first[0].id != first[1].id, "{first:?}");
        assert_eq!(store.insert(&[row(1)]).unwrap(), [Inserted { id: first[1].id, deduped: true }]);
        let find_new = |at: Option<&str>| find_row(|k| store.find_dedup(k), Kind::Lap, "loop new lap 1: continue", &tags, at).unwrap();
        assert_eq!(find_new(Some(at[0])), Some(first[0].id));
        assert_eq!(find_new(None), None, "a time-keyed lap is found only with its time");
        // Memories keep content dedup whatever their time.
        let m = |at: &'static str| NewRow {
            kind: Kind::Memory,
            content: "the build passed",
            tags: &[],
            embedding: &[],
            created_at: Some(at),
            expires_at: None,
        };
        let a = store.insert(&[m(at[0])]).unwrap()[0];
        assert_eq!(store.insert(&[m(at[1])]).unwrap(), [Inserted { id: a.id, deduped: true }]);
    }

    /// Laps recorded as rows alone get their ledger memories from the fold: the text, tags
    /// and time a memory written with the lap would have had, one run's memories side by
    /// side, each lap linked to its memory; a second fold finds nothing, and a lap whose
    /// memory was already written (an agent step's own write) links to that one.
    #[test]
    fn folded_laps_get_the_memories_they_would_have_had() {
        use crate::record::{lap_tags, lap_text, GateSpec, Limits, RunParams, RunStatus};
        let tmp = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&tmp.path().join(DB_FILE)).unwrap();
        let params = RunParams {
            limits: Limits {
                max_iterations: 20,
                max_wallclock_s: 60.0,
                poll_interval_s: 1.0,
                max_tokens: 0,
                no_progress_window: 0,
                gate_min_score: 0.8,
            },
            gate: GateSpec::Memory { gate_query: "q".into(), gate_tags: vec![], gate_verify: vec![], gate_nli_min: 0.5 },
        };
        let runs = ["a-20261201T000000-aaaaaa", "b-20261201T000000-bbbbbb"];
        for (run, name) in runs.iter().zip(["a", "b"]) {
            store
                .run_start(&RunRow {
                    run_id: run.to_string(),
                    name: name.into(),
                    params: params.clone(),
                    status: RunStatus::Running,
                    reason: None,
                    laps: 0,
                    started_at: "2026-12-01T00:00:00.000000Z".into(),
                    ended_at: None,
                    pid: 1,
                    proc_start: 1,
                    result: None,
                    state: None,
                    host: None,
                })
                .unwrap();
        }
        let row = |lap: i64, k: usize| LapRow {
            lap,
            ts: format!("2026-12-01T00:00:{lap:02}.{k:06}Z"),
            decision: "continue".into(),
            passed: false,
            detail: format!("no eligible memories yet ({k})"),
            score: None,
            budget: "{}".into(),
            memory_id: None,
            rejected: None,
        };
        // Laps of the two runs interleaved, as a writer stores them.
        let rows: Vec<(usize, LapRow)> = (1..=3).flat_map(|lap| [(0, row(lap, 0)), (1, row(lap, 1))]).collect();
        let tags: Vec<Vec<String>> = (0..2).map(|k| lap_tags(["a", "b"][k], runs[k])).collect();
        let texts: Vec<String> = rows.iter().map(|(k, l)| lap_text(["a", "b"][*k], l.lap, &l.detail)).collect();
        let writes: Vec<LapWrite<'_>> = rows
            .iter()
            .zip(&texts)
            .map(|((k, l), text)| LapWrite {
                run_id: runs[*k],
                lap: l,
                memory: NewRow { kind: Kind::Lap, content: text, tags: &tags[*k], embedding: &[], created_at: None, expires_at: None },
            })
            .collect();
        store.laps_record(&writes).unwrap();
        assert!(
            store.list(&ListFilter { kind: Some(Kind::Lap), ..ListFilter::newest(10) }).unwrap().is_empty(),
            "rows alone until the fold"
        );
        // Run b's lap 2 already has its memory (written by someone else, same text and time).
        let b2 = NewRow {
            kind: Kind::Lap,
            content: &texts[3],
            tags: &tags[1],
            embedding: &[],
            created_at: Some(&rows[3].1.ts),
            expires_at: None,
        };
        let b2_id = store.insert(&[b2]).unwrap()[0].id;

        assert_eq!(store.laps_fold_chunk(100).unwrap(), 6);
        assert_eq!(store.laps_fold_chunk(100).unwrap(), 0, "nothing left");
        for (k, run) in runs.iter().enumerate() {
            let laps = store.run_laps(run, 10).unwrap();
            let ids: Vec<i64> = laps.iter().map(|l| l.memory_id.expect("linked")).collect();
            let mems = store.get_many(&ids).unwrap();
            for (l, m) in laps.iter().zip(&mems) {
                assert_eq!(m.content, lap_text(["a", "b"][k], l.lap, &l.detail));
                assert_eq!(m.tags, tags[k]);
                assert_eq!(m.created_at, l.ts);
                assert_eq!(m.kind, Kind::Lap);
            }
            if k == 0 {
                assert_eq!(ids, [ids[0], ids[0] + 1, ids[0] + 2], "one run's memories side by side");
            } else {
                assert_eq!(ids[1], b2_id, "the memory already written is linked, not doubled");
            }
        }
        assert_eq!(store.list(&ListFilter { kind: Some(Kind::Lap), ..ListFilter::newest(10) }).unwrap().len(), 6);
    }
}
