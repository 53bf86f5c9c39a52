//! What moves when a whole store moves (`slm export` / `slm import`): the line types both
//! backends read and write ([`ExportItem`] and its parts). The SQL is each backend's
//! (`sqlite/transfer.rs`, `pg/transfer.rs`); what an import decides (a lap links to its
//! ledger memory by content and tags, and must name a run stored earlier) is decided once, in
//! [`super::Store::lap_import`].

use super::LapRow;
use crate::memory::Kind;

/// One memory as exported.
pub struct MemoryOut {
    pub kind: Kind,
    pub content: String,
    pub tags: Vec<String>,
    pub created_at: String,
    /// Little-endian f32 bytes; empty for a ledger lap not embedded yet.
    pub embedding: Vec<u8>,
    /// When the memory expires (canonical UTC text); `None`: never.
    pub expires_at: Option<String>,
}

/// One run record as stored (its JSON columns as text).
#[derive(Debug, Clone, Default)]
pub struct RunOut {
    pub run_id: String,
    pub name: String,
    pub params: String,
    pub status: String,
    pub reason: Option<String>,
    pub laps: i64,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub cancel_requested: bool,
    pub result: Option<String>,
    pub state: Option<String>,
}

/// One lap record, with its ledger memory named by content and tags. `row.memory_id` is the
/// exporting store's id: an import ignores it and links the lap through `memory` instead.
#[derive(Debug, Clone)]
pub struct LapOut {
    pub run_id: String,
    pub row: LapRow,
    pub memory: Option<LapMemoryRef>,
}

/// An exported lap's ledger memory, named by what identifies it in any store.
#[derive(Debug, Clone)]
pub struct LapMemoryRef {
    pub content: String,
    /// Normalised (sorted, deduplicated).
    pub tags: Vec<String>,
}

/// What an export visitor is handed, in this order: every memory, then every run, then every lap.
pub enum ExportItem {
    Memory(MemoryOut),
    Run(RunOut),
    Lap(LapOut),
}

/// The tags of a row as both stores' queries aggregate them (one per line; none = NULL).
pub(crate) fn split_tags(t: Option<String>) -> Vec<String> {
    t.map(|t| t.split('\n').map(str::to_string).collect()).unwrap_or_default()
}
