//! The shared PostgreSQL store (`--store postgres://…`): the same rows, rules and meaning as
//! the SQLite file, in one database that processes on many hosts use at once.
//!
//! One connection per role (the engine's reader/writer behind its mutex, the ledger writer's
//! own, a LISTEN connection per feed in [`listen`]), through the synchronous `postgres` client.
//! A dropped connection is reopened by the next call; the call that met it fails (exit 1), and
//! its transaction rolled back on the server, so nothing is half-written. A one-shot `slm
//! remember` or `recall` spends most of its extra time on round trips, so the queries every
//! such process makes (the schema version, meta, catch-up, reading hits, inserting) give their
//! parameter types and go in one round trip each (`query_typed`), not a prepare and then an
//! execute.
//!
//! Two rules make the shared store behave like the single-writer file:
//! - **Ids in commit order.** A PostgreSQL sequence hands out ids at insert time, so id 41 can
//!   commit after id 42 and a reader that already passed 42 would never see 41. Every
//!   transaction that inserts memories takes the transaction-scoped advisory lock [`IDS_LOCK`]
//!   before its first insert: ids are drawn and committed in one order, and the lock is
//!   released only after the commit is visible, so `id > watermark` catch-up stays complete.
//! - **Announcements on commit.** Writers `NOTIFY slm_memories|slm_control|slm_ledger` inside
//!   their transaction; PostgreSQL delivers it on commit to every listening host.
//!
//! TLS follows the URL's `sslmode` with libpq's meanings, on rustls (see `pg::tls`).

mod ledger;
pub mod listen;
mod schema;
mod tls;
mod transfer;

pub use schema::PG_SCHEMA_VERSION;

use std::cell::{Cell, RefCell, RefMut};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ::postgres::fallible_iterator::FallibleIterator;
use ::postgres::types::Type;
use ::postgres::{Client, Config, NoTls, Transaction};

use self::tls::Connector;

use super::{
    row_key, Backend, Counts, IdMarks, Inserted, ListFilter, MemoryRows, NewRow, PendingRow, StoredVector, VectorVisitor, FORGETS_META,
};
use crate::feed::Topic;
use crate::memory::{now_rfc3339, Kind, Memory};
use crate::{Error, Result};

/// The advisory lock every transaction that inserts memories holds (ids in commit order).
pub const IDS_LOCK: i64 = 0x736c_6d00_0000_0002;

/// The session advisory lock `slm embed-pending` holds on PostgreSQL: one backfill at a time
/// across every host (see [`PgStore::try_backfill_lock`]).
const BACKFILL_LOCK: i64 = 0x736c_6d00_0000_0003;

/// A connection idle this long is checked (one empty query) before it is used again: the
/// server may have restarted meanwhile, and the sync client notices only when it is used.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// How long the meta rows read at open answer for them (a one-shot process's whole life).
const META_SNAPSHOT_FOR: Duration = Duration::from_secs(2);

/// How long connecting may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A PostgreSQL URL, parsed once; it prints (`Debug` too) only with its password redacted.
#[derive(Clone)]
pub struct PgUrl {
    config: Box<Config>,
    /// Plain, or TLS with the verifier `sslmode` asks for (built once per URL).
    connector: Connector,
    redacted: String,
    /// The URL as given, password included: only ever handed to a child process's environment.
    raw: String,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

impl PgUrl {
    /// Reads `--store`/`SLM_STORE`: `None` (unset or empty) keeps the SQLite file; a
    /// `postgres://` or `postgresql://` URL selects PostgreSQL; anything else is invalid input.
    pub fn from_flag(value: Option<&str>) -> Result<Option<PgUrl>> {
        let Some(raw) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
        let redacted = redact(raw);
        if !(raw.starts_with("postgres://") || raw.starts_with("postgresql://")) {
            return Err(Error::invalid(
                "store",
                &redacted,
                "must be a postgres:// or postgresql:// URL (unset, the data root's SQLite file is used)",
            ));
        }
        // `sslmode`/`sslrootcert` are read here: the client knows neither `verify-*` nor
        // `sslrootcert`.
        let ssl = tls::split_params(raw);
        let mut config = Config::from_str(&query_host_wins(&ssl.url))
            .map_err(|e| Error::invalid("store", &redacted, format!("must be a valid PostgreSQL URL: {e}")))?;
        if config.get_hosts().is_empty() {
            return Err(Error::invalid("store", &redacted, "must name a host (or a socket directory: ?host=/run/postgresql)"));
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("slm");
        }
        let connector = tls::connector(&ssl, &mut config, &redacted)?;
        Ok(Some(PgUrl { config: Box::new(config), connector, redacted, raw: raw.to_string() }))
    }

    /// The URL with any password replaced by `***`: what messages and `status` show.
    pub fn redacted(&self) -> &str {
        &self.redacted
    }

    /// The URL as given, password included, for the `SLM_STORE` environment of a child `slm`
    /// (never an argument: those show in `ps`). Never print it.
    pub fn for_child_env(&self) -> &str {
        &self.raw
    }

    /// Opens a connection, with TLS as `sslmode` says (see `pg::tls`).
    pub(crate) fn connect(&self) -> Result<Client> {
        match &self.connector {
            Connector::Plain => self.config.connect(NoTls),
            Connector::Tls(tls) => self.config.connect(tls.clone()),
        }
        .map_err(|e| pg_error(&self.redacted, &e))
    }
}

/// `url` with the host (and port) of its authority dropped when its query names a `host`:
/// in libpq a query parameter replaces the URL part it names, so
/// `postgres://u@localhost/db?host=/run/postgresql` means the socket alone. The client crate
/// would add the socket after `localhost` and try TCP on port 5432 first, which can reach a
/// different server. An authority port the query does not replace is kept as `port=`.
fn query_host_wins(url: &str) -> std::borrow::Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else { return url.into() };
    let Some((before, query)) = rest.split_once('?') else { return url.into() };
    // libpq treats an empty `host=` as not given; the client crate would add an empty host.
    let params: Vec<&str> = query.split('&').filter(|p| *p != "host=").collect();
    let named = |key: &str| params.iter().any(|p| p.split_once('=').is_some_and(|(k, _)| k == key));
    if !named("host") {
        return if params.len() == query.split('&').count() {
            url.into()
        } else if params.is_empty() {
            format!("{scheme}://{before}").into()
        } else {
            format!("{scheme}://{before}?{}", params.join("&")).into()
        };
    }
    let query = params.join("&");
    let (authority, path) = before.split_at(before.find('/').unwrap_or(before.len()));
    let (user, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    // One `host:port` (a bracketed IPv6 address has colons of its own).
    let port = match hosts.rsplit_once(':') {
        Some((h, p)) if !h.contains(',') && !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !p.contains(']') => Some(p),
        _ => None,
    };
    let mut out = format!("{scheme}://{user}{path}?{query}");
    if let Some(p) = port.filter(|_| !named("port")) {
        out.push_str("&port=");
        out.push_str(p);
    }
    out.into()
}

/// `url` with the password of its user-info and any `password=` parameter replaced by `***`.
/// Works on malformed URLs too (they are echoed in errors): everything between the scheme and
/// the last `@` after the user name is treated as the password, so an unencoded `/`, `?` or
/// `@` in it cannot leak a part.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    let rest = match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{user}:***{}", &rest[at..]),
            None => rest.to_string(),
        },
        None => rest.to_string(),
    };
    let mut out = scheme + &rest;
    let mut from = 0;
    while let Some(i) = out[from..].to_ascii_lowercase().find("password=").map(|i| i + from) {
        let start = i + "password=".len();
        let end = out[start..].find(['&', ' ']).map_or(out.len(), |e| start + e);
        out.replace_range(start..end, "***");
        from = start + 3;
    }
    out
}

/// A client error as one line naming the store (redacted).
pub(crate) fn pg_error(store: &str, e: &::postgres::Error) -> Error {
    let message = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        // The client's own text names only the kind ("error connecting to server"); the
        // cause says why (no such socket, connection refused, timed out).
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    };
    Error::Postgres { store: store.to_string(), message: redact(&message), unreachable: unreachable(e) }
}

/// True when `e` says the server is out of reach rather than that a statement failed: no
/// connection could be made, the connection dropped or timed out, or the server is shutting
/// down, crashed or still starting (SQLSTATE class 08, 57P01–57P03).
fn unreachable(e: &::postgres::Error) -> bool {
    if let Some(code) = e.code() {
        let c = code.code();
        return c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03");
    }
    e.is_closed()
        || e.to_string().starts_with("timeout")
        || std::error::Error::source(e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some())
}

/// Set by [`leave_at_exit`].
static LEAVING: AtomicBool = AtomicBool::new(false);

/// Tells every PostgreSQL session of this process that the process is about to `_exit`, with
/// everything committed: closing one then skips the goodbye handshake (a round trip, then the
/// client's runtime shut down: several milliseconds per connection, which `slm loop run`
/// callers waited for). The server sees the socket close outside any transaction, which it
/// records only at DEBUG1 and treats like a goodbye.
pub fn leave_at_exit() {
    LEAVING.store(true, Ordering::Release);
}

/// The host name recorded with the runs this host starts.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it or
    // truncates, and the last byte stays 0.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let end = buf.iter().position(|b| *b == 0).unwrap_or(0);
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown".into()
    }
}

/// The channel a topic is announced on.
pub(crate) fn channel(topic: Topic) -> &'static str {
    match topic {
        Topic::Memories => "slm_memories",
        Topic::Control => "slm_control",
        Topic::Ledger => "slm_ledger",
    }
}

/// An open connection to the shared database.
pub struct PgStore {
    url: PgUrl,
    /// When the store was opened, and the meta rows read then: they answer [`PgStore::meta`]
    /// for [`META_SNAPSHOT_FOR`] (meta rows are written once, but a restored database may
    /// bring others, which a long-lived process must see).
    opened: (Instant, HashMap<String, String>),
    /// `None` once closed, or after a failed reconnect.
    conn: RefCell<Option<Client>>,
    /// The redacted URL, as the "path" `status` shows.
    shown: PathBuf,
    integrity: Option<String>,
    host: String,
    /// When the connection last answered.
    used: Cell<Instant>,
}

impl PgStore {
    /// Connects and brings the schema up to date (under an advisory lock: racing first opens
    /// on several hosts create it once). A database newer than this binary is refused.
    pub fn open(url: &PgUrl) -> Result<PgStore> {
        let mut client = url.connect()?;
        let (found, meta) = schema::open_snapshot(&mut client).map_err(|e| pg_error(url.redacted(), &e))?;
        schema::migrate(&mut client, url.redacted(), found)?;
        Ok(PgStore {
            url: url.clone(),
            opened: (Instant::now(), meta),
            conn: RefCell::new(Some(client)),
            shown: PathBuf::from(url.redacted()),
            integrity: None,
            host: host_name(),
            used: Cell::new(Instant::now()),
        })
    }

    /// The connection, reopened if the server dropped it since the last call (checked when it
    /// sat idle, so a server restart costs no failed call).
    fn client(&self) -> Result<RefMut<'_, Client>> {
        let mut slot = self.conn.borrow_mut();
        let idle = self.used.get().elapsed() >= IDLE_RECHECK;
        if let Some(c) = slot.as_mut() {
            if c.is_closed() || (idle && c.is_valid(CONNECT_TIMEOUT).is_err()) {
                *slot = None;
            }
        }
        if slot.is_none() {
            *slot = Some(self.url.connect()?);
        }
        self.used.set(Instant::now());
        Ok(RefMut::map(slot, |c| c.as_mut().expect("connected above")))
    }

    fn err(&self, e: ::postgres::Error) -> Error {
        pg_error(self.url.redacted(), &e)
    }

    /// The meta value of `key` as read at open, while that read is recent.
    fn opened_meta(&self, key: &str) -> Option<&String> {
        (self.opened.0.elapsed() < META_SNAPSHOT_FOR).then(|| self.opened.1.get(key)).flatten()
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// Runs `f` (which blocks on the client's own runtime) on a plain thread when called from
/// inside a tokio runtime, where blocking on another runtime panics: the servers drop their
/// engine inside theirs.
fn off_async(f: impl FnOnce() + Send + 'static) {
    if tokio::runtime::Handle::try_current().is_ok() {
        let _ = std::thread::spawn(f).join();
    } else {
        f();
    }
}

/// `id, kind, content, created_at, tags (newline-joined, sorted), expires_at` of memories `m`.
const MEMORY_SELECT: &str = "SELECT m.id, m.kind, m.content, m.created_at,
    (SELECT string_agg(tag, E'\\n' ORDER BY tag) FROM memory_tags WHERE memory_id = m.id), m.expires_at
    FROM memories m";

fn to_memory(r: &::postgres::Row) -> Result<Memory> {
    let tags: Option<String> = r.get(4);
    let kind: &str = r.get(1);
    Ok(Memory {
        id: r.get(0),
        kind: Kind::parse(kind)?,
        content: r.get(2),
        created_at: r.get(3),
        expires_at: r.get(5),
        tags: tags.map(|t| t.split('\n').map(str::to_string).collect()).unwrap_or_default(),
    })
}

/// Begins a transaction that will insert memories: takes [`IDS_LOCK`] first, before any id is
/// drawn, so ids commit in the order they were drawn.
fn begin_inserts<'c>(c: &'c mut Client) -> Result<Transaction<'c>, ::postgres::Error> {
    let mut tx = c.transaction()?;
    tx.query_typed("SELECT pg_advisory_xact_lock($1)", &[(&IDS_LOCK, Type::INT8)])?;
    Ok(tx)
}

/// Announces `topic` to every listening host when the transaction commits.
fn notify(tx: &mut Transaction<'_>, topic: Topic) -> Result<(), ::postgres::Error> {
    tx.batch_execute(&format!("NOTIFY {}", channel(topic)))
}

/// Inserts one row and its tags (the caller holds [`IDS_LOCK`]): `(id, deduped)`.
fn insert_row(tx: &mut Transaction<'_>, row: &NewRow<'_>, created_at: &str) -> Result<Inserted, ::postgres::Error> {
    let key = row_key(row.kind, row.content, row.tags, created_at);
    let blob = crate::spaces::to_blob(row.embedding);
    let inserted = tx.query_typed_opt(
        "INSERT INTO memories(kind, content, created_at, dedup_key, embedding, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (dedup_key) DO NOTHING RETURNING id",
        &[
            (&row.kind.as_str(), Type::TEXT),
            (&row.content, Type::TEXT),
            (&created_at, Type::TEXT),
            (&&key[..], Type::BYTEA),
            (&blob, Type::BYTEA),
            (&row.expires_at, Type::TEXT),
        ],
    )?;
    let Some(r) = inserted else {
        let id: i64 = tx.query_typed_one("SELECT id FROM memories WHERE dedup_key = $1", &[(&&key[..], Type::BYTEA)])?.get(0);
        if row.kind == Kind::Memory {
            // The latest write says how long the memory holds (SQLite's insert_row does the same).
            tx.query_typed(
                "UPDATE memories SET expires_at = $2 WHERE id = $1 AND expires_at IS DISTINCT FROM $2",
                &[(&id, Type::INT8), (&row.expires_at, Type::TEXT)],
            )?;
        }
        return Ok(Inserted { id, deduped: true });
    };
    let id: i64 = r.get(0);
    if !row.tags.is_empty() {
        tx.query_typed(
            "INSERT INTO memory_tags(memory_id, tag) SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING",
            &[(&id, Type::INT8), (&row.tags, Type::TEXT_ARRAY)],
        )?;
    }
    Ok(Inserted { id, deduped: false })
}

impl Backend for PgStore {
    fn schema_version(&self) -> i64 {
        i64::from(PG_SCHEMA_VERSION)
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn read_only(&self) -> bool {
        false
    }

    fn writable(&self) -> Result<()> {
        Ok(())
    }

    /// slm's own check of the shared database: the schema version, and every stored vector of
    /// the right size (page-level checks are the server's job: `amcheck`, backups).
    fn check_integrity(&mut self, _full: bool) -> Result<String> {
        let bytes = (crate::embed::DIM * 4) as i32;
        let bad: i64 = self
            .client()?
            .query_one("SELECT count(*) FROM memories WHERE octet_length(embedding) NOT IN (0, $1)", &[&bytes])
            .map_err(|e| self.err(e))?
            .get(0);
        let verdict = if bad == 0 { "ok".to_string() } else { format!("{bad} rows hold a vector of the wrong size") };
        self.integrity = Some(verdict.clone());
        Ok(verdict)
    }

    fn integrity(&self) -> Option<&str> {
        self.integrity.as_deref()
    }

    fn path(&self) -> &Path {
        &self.shown
    }

    fn meta(&self, key: &str) -> Result<Option<String>> {
        if let Some(v) = self.opened_meta(key) {
            return Ok(Some(v.clone()));
        }
        let row =
            self.client()?.query_typed_opt("SELECT value FROM meta WHERE key = $1", &[(&key, Type::TEXT)]).map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn meta_init(&mut self, key: &str, value: &str) -> Result<String> {
        if let Some(v) = self.opened_meta(key) {
            return Ok(v.clone());
        }
        self.client()?
            .execute("INSERT INTO meta(key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING", &[&key, &value])
            .map_err(|e| self.err(e))?;
        Ok(self.meta(key)?.unwrap_or_else(|| value.to_string()))
    }

    /// Ends the session cleanly (the server sees a goodbye, not a dropped socket), or, once
    /// the process is about to exit ([`leave_at_exit`]), leaves it to the exit.
    fn close(&mut self) {
        if let Some(c) = self.conn.borrow_mut().take() {
            if LEAVING.load(Ordering::Acquire) {
                std::mem::forget(c);
                return;
            }
            off_async(move || drop(c.close()));
        }
    }

    /// Nothing to set up: each batch is one transaction on the server either way.
    fn bulk_mode(&mut self) -> Result<()> {
        Ok(())
    }

    /// Takes `BACKFILL_LOCK` for this session if no other session holds it. Every `loop run`
    /// and `loop step` on every host starts a backfill of the same shared pending rows; without
    /// this, a burst of runs made a herd of processes embedding the same laps at once (each
    /// with its model's threads), slowing every host. Released by [`PgStore::backfill_unlock`].
    fn try_backfill_lock(&self) -> Result<bool> {
        let row = self.client()?.query_one("SELECT pg_try_advisory_lock($1)", &[&BACKFILL_LOCK]).map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    /// Releases `BACKFILL_LOCK` (taken by [`PgStore::try_backfill_lock`]). Best effort: a
    /// session that ends releases it too.
    fn backfill_unlock(&self) {
        if let Ok(mut c) = self.client() {
            let _ = c.execute("SELECT pg_advisory_unlock($1)", &[&BACKFILL_LOCK]);
        }
    }
}

impl MemoryRows for PgStore {
    fn find_dedup(&self, key: &[u8]) -> Result<Option<i64>> {
        let row = self
            .client()?
            .query_typed_opt("SELECT id FROM memories WHERE dedup_key = $1", &[(&key, Type::BYTEA)])
            .map_err(|e| self.err(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Inserts rows in one transaction, in commit order (see the module docs).
    fn insert(&mut self, rows: &[NewRow<'_>]) -> Result<Vec<Inserted>> {
        let topic = if rows.iter().any(|r| r.kind == Kind::Memory) { Topic::Memories } else { Topic::Ledger };
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = begin_inserts(&mut c)?;
            let now = now_rfc3339();
            let out = rows.iter().map(|row| insert_row(&mut tx, row, row.created_at.unwrap_or(&now))).collect::<Result<Vec<_>, _>>()?;
            notify(&mut tx, topic)?;
            tx.commit()?;
            Ok(out)
        })();
        r.map_err(|e| pg_error(self.url.redacted(), &e))
    }

    fn forget(&mut self, ids: &[i64]) -> Result<Vec<i64>> {
        let mut c = self.client()?;
        let r = (|| {
            let mut tx = c.transaction()?;
            let gone: Vec<i64> =
                tx.query("DELETE FROM memories WHERE id = ANY($1) RETURNING id", &[&ids])?.iter().map(|r| r.get(0)).collect();
            if !gone.is_empty() {
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES ($1, '1')
                     ON CONFLICT (key) DO UPDATE SET value = (meta.value::bigint + 1)::text",
                    &[&FORGETS_META],
                )?;
            }
            notify(&mut tx, Topic::Memories)?;
            tx.commit()?;
            Ok(gone)
        })();
        let gone = r.map_err(|e| pg_error(self.url.redacted(), &e))?;
        Ok(ids.iter().copied().filter(|id| gone.contains(id)).collect())
    }

    fn forgets(&self) -> Result<i64> {
        // Not from the meta rows read at open: this counter moves while the store is open.
        let row = self
            .client()?
            .query_typed_opt("SELECT value FROM meta WHERE key = $1", &[(&FORGETS_META, Type::TEXT)])
            .map_err(|e| self.err(e))?;
        Ok(row.and_then(|r| r.get::<_, String>(0).parse().ok()).unwrap_or(0))
    }

    fn get_many(&self, ids: &[i64]) -> Result<Vec<Memory>> {
        let rows = self
            .client()?
            .query_typed(&format!("{MEMORY_SELECT} WHERE m.id = ANY($1)"), &[(&ids, Type::INT8_ARRAY)])
            .map_err(|e| self.err(e))?;
        let mut by_id: std::collections::HashMap<i64, Memory> =
            rows.iter().map(to_memory).collect::<Result<Vec<_>>>()?.into_iter().map(|m| (m.id, m)).collect();
        Ok(ids.iter().filter_map(|id| by_id.remove(id)).collect())
    }

    fn list(&self, f: &ListFilter<'_>) -> Result<Vec<Memory>> {
        let ListFilter { tags, kind, limit, before, live_at } = *f;
        let kind = kind.map(|k| k.as_str().to_string());
        let tags = tags.to_vec();
        let sql = format!(
            "{MEMORY_SELECT} WHERE m.id < $1 AND ($2::text IS NULL OR m.kind = $2)
               AND (cardinality($3::text[]) = 0 OR (SELECT count(*) FROM memory_tags t
                    WHERE t.memory_id = m.id AND t.tag = ANY($3)) = cardinality($3::text[]))
               AND ($5::text IS NULL OR m.expires_at IS NULL OR m.expires_at > $5)
             ORDER BY m.id DESC LIMIT $4"
        );
        let rows =
            self.client()?.query(&sql, &[&before.unwrap_or(i64::MAX), &kind, &tags, &(limit as i64), &live_at]).map_err(|e| self.err(e))?;
        rows.iter().map(to_memory).collect()
    }

    fn counts(&self) -> Result<Counts> {
        let row = self
            .client()?
            .query_one("SELECT count(*) FILTER (WHERE kind = 'memory'), count(*) FILTER (WHERE kind = 'lap') FROM memories", &[])
            .map_err(|e| self.err(e))?;
        Ok(Counts { memories: row.get::<_, i64>(0) as u64, laps: row.get::<_, i64>(1) as u64 })
    }

    fn max_id(&self) -> Result<i64> {
        let row = self.client()?.query_typed_one("SELECT coalesce(max(id), 0) FROM memories", &[]).map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    /// The largest id stored, and the largest the sequence has handed out (never goes down,
    /// like `AUTOINCREMENT`), in one round trip.
    fn id_marks(&self) -> Result<IdMarks> {
        let row = self
            .client()?
            .query_typed_one(
                "SELECT (SELECT coalesce(max(id), 0) FROM memories),
                        (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM memories_id_seq)",
                &[],
            )
            .map_err(|e| self.err(e))?;
        Ok(IdMarks { max: row.get(0), issued: row.get(1) })
    }

    /// The stored vector bytes of those of `ids` that exist, in one round trip.
    fn vector_blobs(&self, ids: &[i64]) -> Result<HashMap<i64, Vec<u8>>> {
        let rows = self
            .client()?
            .query_typed("SELECT id, embedding FROM memories WHERE id = ANY($1)", &[(&ids, Type::INT8_ARRAY)])
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Streams the vectors of rows with `id > after` in id order (never the whole set in memory).
    fn vectors_after(&self, after: i64, kind: Option<Kind>, visit: &mut VectorVisitor<'_>) -> Result<()> {
        let kind = kind.map(|k| k.as_str().to_string());
        let mut c = self.client()?;
        let params: [(&(dyn ::postgres::types::ToSql + Sync), Type); 2] = [(&after, Type::INT8), (&kind, Type::TEXT)];
        let mut rows = c
            .query_typed_raw(
                "SELECT id, kind, embedding FROM memories WHERE id > $1 AND ($2::text IS NULL OR kind = $2) ORDER BY id",
                params,
            )
            .map_err(|e| pg_error(self.url.redacted(), &e))?;
        while let Some(row) = rows.next().map_err(|e| pg_error(self.url.redacted(), &e))? {
            let kind: &str = row.get(1);
            visit(row.get(0), Kind::parse(kind)?, row.get::<_, &[u8]>(2))?;
        }
        Ok(())
    }

    fn ids_with_all_tags_in(&self, tags: &[String], after: i64, upto: i64) -> Result<Vec<i64>> {
        if tags.is_empty() {
            return Ok(Vec::new());
        }
        let tags = tags.to_vec();
        let rows = self
            .client()?
            .query(
                "SELECT memory_id FROM memory_tags WHERE tag = ANY($3) AND memory_id > $1 AND memory_id <= $2
                 GROUP BY memory_id HAVING count(*) = $4 ORDER BY memory_id",
                &[&after, &upto, &tags, &(tags.len() as i64)],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    fn pending_rows(&self, limit: usize) -> Result<Vec<PendingRow>> {
        let rows = self
            .client()?
            .query("SELECT id, content FROM memories WHERE octet_length(embedding) = 0 ORDER BY id LIMIT $1", &[&(limit as i64)])
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| PendingRow { id: r.get(0), content: r.get(1) }).collect())
    }

    /// Stores the vectors of rows stored without one, in one transaction (see SQLite's).
    fn set_embeddings(&mut self, rows: &[(i64, Vec<f32>)]) -> Result<usize> {
        let store = self.url.redacted().to_string();
        let pg = |e: ::postgres::Error| pg_error(&store, &e);
        let mut c = self.client()?;
        let mut tx = c.transaction().map_err(pg)?;
        let st = tx.prepare("UPDATE memories SET embedding = $2 WHERE id = $1 AND octet_length(embedding) = 0").map_err(pg)?;
        let mut n = 0;
        for (id, v) in rows {
            n += tx.execute(&st, &[id, &crate::spaces::to_blob(v)]).map_err(pg)? as usize;
        }
        tx.commit().map_err(pg)?;
        Ok(n)
    }

    fn vectors_or_content(&self, ids: &[i64]) -> Result<Vec<StoredVector>> {
        let rows =
            self.client()?.query("SELECT id, embedding, content FROM memories WHERE id = ANY($1)", &[&ids]).map_err(|e| self.err(e))?;
        let mut by_id: std::collections::HashMap<i64, (Vec<u8>, String)> = rows.iter().map(|r| (r.get(0), (r.get(1), r.get(2)))).collect();
        Ok(ids.iter().filter_map(|id| by_id.remove(id).map(|(blob, content)| StoredVector { id: *id, blob, content })).collect())
    }

    /// See [`crate::storage::SqliteStore::last_id_before`].
    fn last_id_before(&self, at: &str) -> Result<i64> {
        let row = self
            .client()?
            .query_typed_one(
                "SELECT coalesce((SELECT id FROM memories WHERE created_at < $1 ORDER BY id DESC LIMIT 1), 0)",
                &[(&at, ::postgres::types::Type::TEXT)],
            )
            .map_err(|e| self.err(e))?;
        Ok(row.get(0))
    }

    /// Memories that have expired at `now`, oldest expiry first (the partial index).
    fn expired_ids(&self, now: &str) -> Result<Vec<i64>> {
        let rows = self
            .client()?
            .query_typed(
                "SELECT id FROM memories WHERE expires_at IS NOT NULL AND expires_at <= $1 ORDER BY expires_at",
                &[(&now, Type::TEXT)],
            )
            .map_err(|e| self.err(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Sets each memory's expiry to the given one where it differs: one statement, which
    /// writes no row whose expiry is already so.
    fn set_expiry(&mut self, rows: &[(i64, Option<&str>)]) -> Result<()> {
        let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let ats: Vec<Option<&str>> = rows.iter().map(|r| r.1).collect();
        self.client()?
            .query_typed(
                "UPDATE memories m SET expires_at = v.at FROM unnest($1::bigint[], $2::text[]) AS v(id, at)
                 WHERE m.id = v.id AND m.expires_at IS DISTINCT FROM v.at",
                &[(&ids, Type::INT8_ARRAY), (&ats, Type::TEXT_ARRAY)],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    fn existing(&self, ids: &[i64]) -> Result<Vec<i64>> {
        let rows = self.client()?.query("SELECT id FROM memories WHERE id = ANY($1)", &[&ids]).map_err(|e| self.err(e))?;
        let found: std::collections::HashSet<i64> = rows.iter().map(|r| r.get(0)).collect();
        Ok(ids.iter().copied().filter(|id| found.contains(id)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::postgres::config::Host;

    #[test]
    fn passwords_never_survive_redaction() {
        assert_eq!(redact("postgres://u:secret@db.example/slm"), "postgres://u:***@db.example/slm");
        assert_eq!(redact("postgresql://u@db/slm"), "postgresql://u@db/slm");
        assert_eq!(redact("postgres://u:se/c?r@t@h:5432/d"), "postgres://u:***@h:5432/d");
        assert_eq!(redact("postgres://u@h/d?password=secret&sslmode=disable"), "postgres://u@h/d?password=***&sslmode=disable");
        assert_eq!(redact("mysql://root:pw@h/x"), "mysql://root:***@h/x");
        for bad in ["postgres://u:secret@h:notaport/d", "mysql://root:secret@h/x", "postgres://u:secret@/d"] {
            let e = PgUrl::from_flag(Some(bad)).expect_err(bad);
            assert!(e.is_invalid_input() && e.field() == Some("store"), "{e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert!(PgUrl::from_flag(Some("")).unwrap().is_none());
        let ok = PgUrl::from_flag(Some("postgres://u:secret@localhost/slm")).unwrap().unwrap();
        assert!(!format!("{ok:?}").contains("secret"));
    }

    #[test]
    fn a_host_in_the_query_replaces_the_urls_host_as_in_libpq() {
        let hosts = |url: &str| PgUrl::from_flag(Some(url)).unwrap().unwrap().config.get_hosts().to_vec();
        let ports = |url: &str| PgUrl::from_flag(Some(url)).unwrap().unwrap().config.get_ports().to_vec();
        let sock = Host::Unix("/run/postgresql".into());
        assert_eq!(hosts("postgres://u@localhost/slm?host=/run/postgresql"), vec![sock.clone()]);
        assert_eq!(hosts("postgres://u:pw@localhost:5433/slm?sslmode=disable&host=/run/postgresql"), vec![sock.clone()]);
        assert_eq!(ports("postgres://u:pw@localhost:5433/slm?host=/run/postgresql"), vec![5433]);
        assert_eq!(ports("postgres://u@localhost:5433/slm?host=/run/postgresql&port=6000"), vec![6000]);
        assert_eq!(hosts("postgres:///slm?host=/run/postgresql&user=u"), vec![sock]);
        assert_eq!(hosts("postgres://u@db.example:5432/slm?application_name=x"), vec![Host::Tcp("db.example".into())]);
        assert_eq!(hosts("postgres://u@db.example/slm?host=&port=5433"), vec![Host::Tcp("db.example".into())]);
        assert_eq!(hosts("postgres://u@[::1]:5432/slm?connect_timeout=3"), vec![Host::Tcp("::1".into())]);
    }
}
