//! Bulk import of JSON Lines: one `{"content": "...", "tags": ["..."]}` object per line.
//!
//! Lines are validated one by one, so a bad line is reported with its number and skipped while
//! the rest are imported. Valid lines are embedded and written in batches of [`BATCH`]: one
//! model call per 64 texts and one short write transaction per batch, which keeps other
//! processes' writes flowing during a long import.

use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::memory;
use crate::Result;

/// Lines embedded and written together.
pub const BATCH: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    content: String,
    #[serde(default)]
    tags: Vec<String>,
}

/// A line that was not imported, and why.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SkippedLine {
    pub line: usize,
    pub error: String,
}

/// What an import did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ImportSummary {
    /// Non-blank lines read.
    pub lines: usize,
    /// New memories stored.
    pub imported: usize,
    /// Lines whose content and tags were already stored.
    pub deduped: usize,
    /// Lines rejected, with their 1-based numbers.
    pub skipped: Vec<SkippedLine>,
}

/// Imports every line of `reader`; `progress` is called with the bytes consumed so far.
pub fn import_jsonl(engine: &Engine, reader: impl BufRead, progress: &mut dyn FnMut(u64)) -> Result<ImportSummary> {
    let mut summary = ImportSummary::default();
    let mut batch: Vec<(String, Vec<String>)> = Vec::with_capacity(BATCH);
    let mut consumed = 0u64;
    for (i, line) in reader.split(b'\n').enumerate() {
        let line_no = i + 1;
        let raw = line.map_err(|e| crate::Error::io("cannot read the import file", e))?;
        consumed += raw.len() as u64 + 1;
        let text = match std::str::from_utf8(&raw) {
            Ok(t) => t.trim(),
            Err(e) => {
                summary.lines += 1;
                summary.skipped.push(SkippedLine { line: line_no, error: format!("not UTF-8: {e}") });
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        summary.lines += 1;
        match parse_line(text) {
            Ok(item) => batch.push(item),
            Err(error) => summary.skipped.push(SkippedLine { line: line_no, error }),
        }
        if batch.len() == BATCH {
            flush(engine, &mut batch, &mut summary)?;
            progress(consumed);
        }
    }
    flush(engine, &mut batch, &mut summary)?;
    progress(consumed);
    Ok(summary)
}

fn parse_line(text: &str) -> std::result::Result<(String, Vec<String>), String> {
    let line: Line = serde_json::from_str(text).map_err(|e| format!("invalid JSON object: {e}"))?;
    memory::validate_content("content", &line.content).map_err(|e| e.to_string())?;
    let tags = memory::normalize_tags(&line.tags).map_err(|e| e.to_string())?;
    Ok((line.content, tags))
}

fn flush(engine: &Engine, batch: &mut Vec<(String, Vec<String>)>, summary: &mut ImportSummary) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let items: Vec<(&str, Vec<String>)> = batch.iter().map(|(c, t)| (c.as_str(), t.clone())).collect();
    for r in engine.insert_rows(memory::Kind::Memory, &items)? {
        if r.deduped {
            summary.deduped += 1;
        } else {
            summary.imported += 1;
        }
    }
    batch.clear();
    Ok(())
}
