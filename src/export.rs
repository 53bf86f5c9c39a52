//! `slm export`: every memory (`kind = memory`) as JSON Lines, oldest first, in the shape
//! `slm import` reads: `{"content", "tags", "embedding", "kind", "created_at"}`. Carrying the
//! stored vector means an import needs no model, so `slm export --data-dir A | slm import
//! --store postgres://… -` moves a local store into a shared one. Ledger laps and loop records
//! are not exported (they describe runs of the old store).

use std::io::Write;

use serde::Serialize;

use crate::engine::Engine;
use crate::memory::Kind;
use crate::{Error, Result};

/// Memories fetched together.
const CHUNK: usize = 500;

#[derive(Serialize)]
struct Line<'a> {
    content: &'a str,
    tags: &'a [String],
    embedding: Vec<f32>,
    kind: &'static str,
    created_at: &'a str,
}

/// Writes every memory to `out`; returns how many.
pub fn export_jsonl(engine: &Engine, out: &mut dyn Write) -> Result<u64> {
    // Ids first (8 bytes each), newest first by page, then oldest first in chunks.
    let mut ids = Vec::new();
    let mut before = None;
    loop {
        let page = engine.list(&[], Some(Kind::Memory), crate::engine::MAX_LIMIT, before)?;
        let Some(last) = page.last() else { break };
        before = Some(last.id);
        ids.extend(page.iter().map(|m| m.id));
    }
    ids.reverse();
    let io = |e| Error::io("cannot write the export", e);
    let mut n = 0;
    for chunk in ids.chunks(CHUNK) {
        let rows = engine.get(chunk)?;
        let vectors = engine.stored_vectors(chunk)?;
        for m in rows {
            // A memory forgotten meanwhile has no vector left: it is simply not exported.
            let Some(v) = vectors.get(&m.id) else { continue };
            let line = Line { content: &m.content, tags: &m.tags, embedding: v.clone(), kind: "memory", created_at: &m.created_at };
            serde_json::to_writer(&mut *out, &line).map_err(|e| Error::Internal(e.to_string()))?;
            out.write_all(b"\n").map_err(io)?;
            n += 1;
        }
    }
    out.flush().map_err(io)?;
    Ok(n)
}
