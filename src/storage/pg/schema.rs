//! The PostgreSQL schema and its migrations: the SQLite tables (memories with their vector
//! bytes, tags, meta, loop runs and laps), versioned in `slm_schema`.
//!
//! An open that finds the current version reads it (with the meta rows, in one round trip) and
//! takes no lock. Otherwise it takes the session advisory lock [`SCHEMA_LOCK`], re-reads the
//! version, and applies what is missing in one transaction: hosts opening a fresh database at
//! the same moment create the schema once. A database whose version is newer than this
//! binary's is refused.

use std::collections::HashMap;

use ::postgres::error::SqlState;
use ::postgres::{Client, SimpleQueryMessage};

use super::pg_error;
use crate::{Error, Result};

/// The advisory lock held while migrating.
const SCHEMA_LOCK: i64 = 0x736c_6d00_0000_0001;

/// Each entry upgrades the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // v1: everything SQLite's v5 holds. `created_at`, `ts` and the JSON columns stay text, so
    // both stores print byte-identical records; `seq` is the start order SQLite's rowid gives.
    r#"
    CREATE TABLE memories (
        id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind        TEXT NOT NULL CHECK (kind IN ('memory', 'lap')),
        content     TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        dedup_key   BYTEA NOT NULL UNIQUE,
        embedding   BYTEA NOT NULL
    );
    CREATE INDEX memories_by_kind ON memories(kind, id);
    CREATE INDEX memories_pending ON memories(id) WHERE octet_length(embedding) = 0;
    CREATE TABLE memory_tags (
        memory_id BIGINT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
        tag       TEXT NOT NULL,
        PRIMARY KEY (tag, memory_id)
    );
    CREATE INDEX memory_tags_by_memory ON memory_tags(memory_id, tag);
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE loop_runs (
        seq         BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        run_id      TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        params      TEXT NOT NULL,
        status      TEXT NOT NULL,
        reason      TEXT,
        laps        BIGINT NOT NULL DEFAULT 0,
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        host        TEXT NOT NULL,
        pid         BIGINT NOT NULL,
        proc_start  BIGINT NOT NULL,
        cancel_requested BOOLEAN NOT NULL DEFAULT false,
        result      TEXT,
        state       TEXT
    );
    CREATE INDEX loop_runs_by_name ON loop_runs(name, seq);
    CREATE TABLE loop_laps (
        run_id    TEXT NOT NULL,
        lap       BIGINT NOT NULL,
        ts        TEXT NOT NULL,
        decision  TEXT NOT NULL,
        passed    BOOLEAN NOT NULL,
        detail    TEXT NOT NULL,
        score     DOUBLE PRECISION,
        budget    TEXT NOT NULL,
        memory_id BIGINT,
        rejected  TEXT,
        PRIMARY KEY (run_id, lap)
    );
    "#,
    // v2: the runs asked to stop and not stopped yet, which waiting loops read in one query.
    r#"
    CREATE INDEX loop_runs_cancelling ON loop_runs(run_id) WHERE cancel_requested AND status = 'running';
    "#,
    // v3: memories that expire (SQLite's v8): canonical UTC text, NULL for never.
    r#"
    ALTER TABLE memories ADD COLUMN expires_at TEXT;
    CREATE INDEX memories_expiring ON memories(expires_at) WHERE expires_at IS NOT NULL;
    "#,
];

/// The schema version this binary writes.
pub const PG_SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// The version recorded in the database (0: no schema yet).
fn version(c: &mut Client) -> std::result::Result<i32, ::postgres::Error> {
    // Re-read under the schema lock; one round trip (no separate prepare).
    match c.query_typed_one("SELECT coalesce(max(version), 0) FROM slm_schema", &[]) {
        Ok(r) => Ok(r.get(0)),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(0),
        Err(e) => Err(e),
    }
}

fn too_new(store: &str, found: i32) -> Error {
    Error::Postgres {
        store: store.to_string(),
        unreachable: false,
        message: format!("the database has slm schema version {found}, newer than this slm's ({PG_SCHEMA_VERSION}); upgrade slm"),
    }
}

/// What an open reads in one round trip: the schema version and the meta rows (both empty on
/// a database without the schema). Every one-shot process asks both at once; on a fresh
/// server backend each separate query costs a wait for its catalog look-ups.
pub(super) fn open_snapshot(c: &mut Client) -> std::result::Result<(i32, HashMap<String, String>), ::postgres::Error> {
    let messages = match c.simple_query("SELECT coalesce(max(version), 0) FROM slm_schema; SELECT key, value FROM meta") {
        Ok(m) => m,
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok((0, HashMap::new())),
        Err(e) => return Err(e),
    };
    let (mut statement, mut version, mut meta) = (0, 0, HashMap::new());
    for m in &messages {
        match m {
            SimpleQueryMessage::CommandComplete(_) => statement += 1,
            SimpleQueryMessage::Row(r) if statement == 0 => version = r.get(0).and_then(|v| v.parse().ok()).unwrap_or(0),
            SimpleQueryMessage::Row(r) => {
                if let (Some(k), Some(v)) = (r.get(0), r.get(1)) {
                    meta.insert(k.to_string(), v.to_string());
                }
            }
            _ => {}
        }
    }
    Ok((version, meta))
}

/// Brings the schema up to date from version `found` (see the module docs).
pub(super) fn migrate(c: &mut Client, store: &str, found: i32) -> Result<()> {
    let err = |e: ::postgres::Error| pg_error(store, &e);
    if found == PG_SCHEMA_VERSION {
        return Ok(());
    }
    if found > PG_SCHEMA_VERSION {
        return Err(too_new(store, found));
    }
    c.execute("SELECT pg_advisory_lock($1)", &[&SCHEMA_LOCK]).map_err(err)?;
    let applied = (|| {
        let found = version(c)?;
        if found > PG_SCHEMA_VERSION {
            return Ok(Err(too_new(store, found)));
        }
        let mut tx = c.transaction()?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS slm_schema (version INTEGER NOT NULL)")?;
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
            tx.batch_execute(sql)?;
            tx.execute("INSERT INTO slm_schema(version) VALUES ($1)", &[&(i as i32 + 1)])?;
        }
        if found == 0 {
            tx.execute(
                "INSERT INTO meta(key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING",
                &[&crate::storage::CREATED_META, &crate::memory::now_rfc3339()],
            )?;
        }
        tx.commit()?;
        Ok(Ok(()))
    })();
    let unlocked = c.execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK]);
    applied.map_err(err)??;
    unlocked.map_err(err)?;
    Ok(())
}
