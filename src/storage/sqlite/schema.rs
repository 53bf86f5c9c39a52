//! The database schema and its migrations.
//!
//! The schema version lives in SQLite's `user_version`. Opening a database applies every
//! migration above that version inside one `BEGIN IMMEDIATE` transaction, re-reading the
//! version once the write lock is held, so several processes opening a fresh data root at the
//! same moment create the schema exactly once. A database newer than this binary is refused.

use rusqlite::Connection;

/// Each entry upgrades the schema from version `i` to `i + 1`.
pub(super) const MIGRATIONS: &[&str] = &[
    // v1: memories with their vectors, tags in their own table, a key/value meta table.
    r#"
    CREATE TABLE memories (
        -- AUTOINCREMENT: ids are never reused after a forget, so "id > last seen" finds
        -- exactly the rows that arrived since, in every process.
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        kind        TEXT NOT NULL CHECK (kind IN ('memory', 'lap')),
        content     TEXT NOT NULL,
        created_at  TEXT NOT NULL,
        -- sha256 of (kind, content, sorted tags): exact dedup, enforced by the database.
        dedup_key   BLOB NOT NULL UNIQUE,
        -- 384 little-endian f32, L2-normalised.
        embedding   BLOB NOT NULL
    );
    CREATE INDEX memories_by_kind ON memories(kind, id);
    CREATE TABLE memory_tags (
        memory_id INTEGER NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
        tag       TEXT NOT NULL,
        PRIMARY KEY (tag, memory_id)
    ) WITHOUT ROWID;
    CREATE INDEX memory_tags_by_memory ON memory_tags(memory_id, tag);
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    "#,
    // v2: the loop ledger's structured records (laps are also `kind = 'lap'` memories).
    r#"
    CREATE TABLE loop_runs (
        run_id      TEXT PRIMARY KEY,
        name        TEXT NOT NULL,
        params      TEXT NOT NULL,              -- JSON: applied limits and gate settings
        status      TEXT NOT NULL,              -- running, or the terminal status
        reason      TEXT,
        laps        INTEGER NOT NULL DEFAULT 0,
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        pid         INTEGER NOT NULL,           -- with proc_start: tells a dead run from a live one
        proc_start  INTEGER NOT NULL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        result      TEXT                        -- the final result JSON
    );
    -- rowid order is start order: history is an index range scan, newest first.
    CREATE INDEX loop_runs_by_name ON loop_runs(name);
    CREATE TABLE loop_laps (
        run_id    TEXT NOT NULL,
        lap       INTEGER NOT NULL,
        ts        TEXT NOT NULL,
        decision  TEXT NOT NULL,
        passed    INTEGER NOT NULL,
        detail    TEXT NOT NULL,
        score     REAL,
        budget    TEXT NOT NULL,                -- JSON
        memory_id INTEGER,                      -- the lap's `kind = 'lap'` memory
        PRIMARY KEY (run_id, lap)
    ) WITHOUT ROWID;
    "#,
    // v3: agent-driven (command-gated) runs keep their counters between `slm loop step`
    // processes: tokens used, stalled laps, the last gate outcome's digest (JSON).
    r#"
    ALTER TABLE loop_runs ADD COLUMN state TEXT;
    "#,
    // v4: rows stored before their embedding (agent-driven ledger laps) are found by a small
    // partial index, so the background backfill never scans the table.
    r#"
    CREATE INDEX memories_pending ON memories(id) WHERE length(embedding) = 0;
    "#,
    // v5: the gate's verifiers: the candidates each lap rejected, with reasons (JSON array).
    r#"
    ALTER TABLE loop_laps ADD COLUMN rejected TEXT;
    "#,
    // v6: laps in arrival order. A thousand runs waiting in one process each add a lap a
    // second; keyed by (run_id, lap) as a WITHOUT ROWID table, every lap landed (whole row)
    // in a different leaf page, which made idle laps most of what waiting cost. Rows now
    // append to the rowid table; only a small (run_id, lap) index entry goes in key order.
    r#"
    CREATE TABLE loop_laps_v6 (
        seq       INTEGER PRIMARY KEY,
        run_id    TEXT NOT NULL,
        lap       INTEGER NOT NULL,
        ts        TEXT NOT NULL,
        decision  TEXT NOT NULL,
        passed    INTEGER NOT NULL,
        detail    TEXT NOT NULL,
        score     REAL,
        budget    TEXT NOT NULL,                -- JSON
        memory_id INTEGER,                      -- the lap's `kind = 'lap'` memory
        rejected  TEXT
    );
    INSERT INTO loop_laps_v6(run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected)
        SELECT run_id, lap, ts, decision, passed, detail, score, budget, memory_id, rejected
        FROM loop_laps ORDER BY ts, run_id, lap;
    DROP TABLE loop_laps;
    ALTER TABLE loop_laps_v6 RENAME TO loop_laps;
    CREATE UNIQUE INDEX loop_laps_by_run ON loop_laps(run_id, lap);
    "#,
    // v7: a blocking run's lap is stored as its ledger row alone; its `kind = lap` memory is
    // derived from the row later, many laps at once, grouped by run (`laps_fold`), so an idle
    // lap no longer scatters tag entries over the index. This small index finds the laps that
    // still need their memory (new rows append to it; folding empties it).
    r#"
    CREATE INDEX loop_laps_unfolded ON loop_laps(seq) WHERE memory_id IS NULL;
    -- The runs asked to stop and not stopped yet: what waiting loops check, all in one read.
    CREATE INDEX loop_runs_cancelling ON loop_runs(run_id) WHERE cancel_requested = 1 AND status = 'running';
    "#,
    // v8: memories that expire (crate::expiry): the time as canonical UTC text, NULL for never.
    // Few memories expire, so the partial index holds only those: "which have expired now" is
    // a short range scan, and rows that never expire cost nothing.
    r#"
    ALTER TABLE memories ADD COLUMN expires_at TEXT;
    CREATE INDEX memories_expiring ON memories(expires_at) WHERE expires_at IS NOT NULL;
    "#,
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}
