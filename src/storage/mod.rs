//! The store: memories, their tags and vectors, and the loop ledger, behind one seam.
//!
//! [`Backend`] (in `backend.rs`) is the contract: every method the engine, the loop runtime
//! and the surfaces may call on a store, each documented once with what it reads or writes,
//! in which transaction, and how it fails. Two backends implement it: `sqlite/`, the embedded
//! store (one database file in the data root), and `pg/`, the shared PostgreSQL store
//! (`--store postgres://…`). [`Store`] holds one of them, chosen once by [`Location`], and is
//! where what both backends decide the same way is written once (a lap's ledger memory
//! folded in chunks, an imported lap's link to its memory, a locked step's return value).
//!
//! This file holds the row types both backends hand out and take; `ledger.rs` the loop
//! ledger's, `transfer.rs` those of `slm export` / `slm import`; `writer.rs` the ledger
//! writer thread that batches blocking runs' laps over any backend.
//!
//! Rules every backend follows, because many processes (and hosts) share one store: writes in
//! short transactions that never include embedding work (the engine embeds first, then
//! writes); read paths never write; ids are issued in commit order. The store knows nothing
//! of embeddings beyond storing bytes: the engine ([`crate::engine`]) decides what to embed
//! and the index ([`crate::index`]) scores.

pub(crate) mod backend;
pub mod ledger;
pub mod pg;
pub mod sqlite;
pub mod transfer;
pub mod writer;

use sha2::{Digest, Sha256};

pub use backend::{Backend, Folded, LedgerRows, Location, MemoryRows, Store, TransferRows, FORGETS_META, PG_MARK};
pub use ledger::{LapRow, LapWrite, LoopName, PagedRun, RunEnd, RunEnding, RunRow, StepWrite};
pub use pg::{PgStore, PgUrl, PG_SCHEMA_VERSION};
pub use sqlite::{SqliteStore, CREATED_META, DB_FILE, SCHEMA_VERSION};
pub use transfer::{ExportItem, LapMemoryRef, LapOut, MemoryOut, RunOut};

use crate::memory::Kind;
use crate::Result;

/// What [`MemoryRows::insert`] did with one row: the id it has, and whether an equal row (same
/// kind, content and tags) was already stored, whose id that is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inserted {
    pub id: i64,
    pub deduped: bool,
}

/// Rows by kind ([`MemoryRows::counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Memories written by agents (`kind = memory`).
    pub memories: u64,
    /// Loop ledger laps (`kind = lap`).
    pub laps: u64,
}

/// The two id watermarks of a store ([`MemoryRows::id_marks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMarks {
    /// The largest id stored (0 when empty); goes down when the newest rows are forgotten.
    pub max: i64,
    /// The largest id ever issued; never goes down (unless an older copy is restored).
    pub issued: i64,
}

/// A row stored without a vector yet, to embed ([`MemoryRows::pending_rows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRow {
    pub id: i64,
    pub content: String,
}

/// A row's stored vector bytes, empty when it has none yet, and its text to embed then
/// ([`MemoryRows::vectors_or_content`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredVector {
    pub id: i64,
    pub blob: Vec<u8>,
    pub content: String,
}

/// Which memories [`MemoryRows::list`] returns, newest first.
#[derive(Debug, Clone, Copy)]
pub struct ListFilter<'a> {
    /// Only rows carrying every one of these tags (normalised, deduplicated; empty: any).
    pub tags: &'a [String],
    pub kind: Option<Kind>,
    pub limit: usize,
    /// Only ids below this one (paging).
    pub before: Option<i64>,
    /// Only rows that have not expired at this time (RFC 3339 UTC); `None`: expired too.
    pub live_at: Option<&'a str>,
}

impl ListFilter<'_> {
    /// The newest `limit` rows of any kind, tags and expiry (narrow it with struct update:
    /// `ListFilter { kind: Some(Kind::Lap), ..ListFilter::newest(10) }`).
    pub fn newest(limit: usize) -> ListFilter<'static> {
        ListFilter { tags: &[], kind: None, limit, before: None, live_at: None }
    }
}

/// A row to insert: everything but the id, which the store assigns.
#[derive(Debug, Clone)]
pub struct NewRow<'a> {
    pub kind: Kind,
    pub content: &'a str,
    /// Sorted and deduplicated (see [`crate::memory::normalize_tags`]).
    pub tags: &'a [String],
    pub embedding: &'a [f32],
    /// When the row was first stored (an import keeps it); `None` is now.
    pub created_at: Option<&'a str>,
    /// When the memory expires (canonical UTC text, see [`crate::expiry`]); `None`: never.
    /// A row that dedups onto a stored memory sets that memory's expiry to this one.
    pub expires_at: Option<&'a str>,
}

/// Visits stored vectors: `(id, kind, little-endian f32 bytes)`.
pub type VectorVisitor<'v> = dyn FnMut(i64, Kind, &[u8]) -> Result<()> + 'v;

/// The stored dedup key of a row created at `created_at` (RFC 3339 UTC, as stored). A
/// memory's is its [`dedup_key`]: the same content with the same tags is stored once. A
/// ledger lap's starts with `0xFF` and its creation time, then 16 bytes of that digest: laps
/// are records of distinct moments, and a time-ordered key appends to the unique index
/// instead of landing on a random page for every idle lap (a thousand waiting loops write a
/// thousand laps a second). The same lap (content, tags, time) is still stored once, so an
/// export imported twice stores its laps once.
pub fn row_key(kind: Kind, content: &str, sorted_tags: &[String], created_at: &str) -> Vec<u8> {
    let digest = dedup_key(kind, content, sorted_tags);
    match kind {
        Kind::Memory => digest.to_vec(),
        Kind::Lap => [&[0xFF][..], created_at.as_bytes(), &digest[..16]].concat(),
    }
}

/// The id of a stored row with this kind, content and tags (and, for a ledger lap, creation
/// time: without it only a lap stored before schema v6 is found), using `find` to look a key up.
pub(crate) fn find_row(
    find: impl Fn(&[u8]) -> Result<Option<i64>>,
    kind: Kind,
    content: &str,
    sorted_tags: &[String],
    created_at: Option<&str>,
) -> Result<Option<i64>> {
    if let (Kind::Lap, Some(at)) = (kind, created_at) {
        if let Some(id) = find(&row_key(kind, content, sorted_tags, at))? {
            return Ok(Some(id));
        }
    }
    // A memory's key; for a lap, the key laps had before schema v6 (a store upgraded in place).
    find(&dedup_key(kind, content, sorted_tags))
}

/// The exact-dedup digest of a row: sha256 over kind, content and the sorted tag set.
pub fn dedup_key(kind: Kind, content: &str, sorted_tags: &[String]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(kind.as_str().as_bytes());
    h.update([0]);
    h.update((content.len() as u64).to_le_bytes());
    h.update(content.as_bytes());
    for t in sorted_tags {
        h.update([0]);
        h.update(t.as_bytes());
    }
    h.finalize().into()
}
