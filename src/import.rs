//! Bulk import of JSON Lines: one `{"content": "...", "tags": ["..."]}` object per line.
//!
//! Lines are validated one by one, so a bad line is reported with its number and skipped while
//! the rest are imported. Valid lines are embedded and written in batches of [`BATCH`]: one
//! model call per 64 texts and one short write transaction per batch, which keeps other
//! processes' writes flowing during a long import.
//!
//! An import that fails part-way (a full disk, any store error) keeps what it committed and
//! returns [`ImportStopped`]: the summary so far, with the last line whose batch committed.
//! Re-running the same import resumes it, since stored lines are deduplicated.

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
    /// Every line up to this 1-based number is stored, deduplicated or skipped (0: none).
    pub last_committed_line: usize,
}

/// An import that stopped on an error after committing `summary`.
#[derive(Debug)]
pub struct ImportStopped {
    pub summary: ImportSummary,
    pub error: crate::Error,
}

impl From<Box<ImportStopped>> for crate::Error {
    fn from(s: Box<ImportStopped>) -> Self {
        s.error
    }
}

/// Collects validated items into batches and writes each batch, counting what happened.
struct Batcher<'e> {
    engine: &'e Engine,
    batch: Vec<(String, Vec<String>)>,
    summary: ImportSummary,
    /// The number of the last line taken (what a successful flush commits through).
    last_line: usize,
}

impl<'e> Batcher<'e> {
    fn new(engine: &'e Engine) -> Self {
        Batcher { engine, batch: Vec::with_capacity(BATCH), summary: ImportSummary::default(), last_line: 0 }
    }

    /// Takes item number `line` (1-based): validated, it joins the batch; otherwise it is
    /// reported. Returns true when a full batch was written.
    fn push(&mut self, line: usize, item: std::result::Result<(String, Vec<String>), String>) -> Result<bool> {
        self.summary.lines += 1;
        self.last_line = line;
        match item.and_then(|(content, tags)| validate(content, &tags)) {
            Ok(item) => self.batch.push(item),
            Err(error) => self.summary.skipped.push(SkippedLine { line, error }),
        }
        if self.batch.len() < BATCH {
            return Ok(false);
        }
        self.flush()?;
        Ok(true)
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            self.summary.last_committed_line = self.last_line;
            return Ok(());
        }
        let items: Vec<(&str, Vec<String>)> = self.batch.iter().map(|(c, t)| (c.as_str(), t.clone())).collect();
        for r in self.engine.insert_rows(memory::Kind::Memory, &items)? {
            if r.deduped {
                self.summary.deduped += 1;
            } else {
                self.summary.imported += 1;
            }
        }
        self.batch.clear();
        self.summary.last_committed_line = self.last_line;
        Ok(())
    }

    fn finish(mut self) -> Result<ImportSummary, Box<ImportStopped>> {
        match self.flush() {
            Ok(()) => Ok(self.summary),
            Err(e) => Err(self.stopped(e)),
        }
    }

    fn stopped(self, error: crate::Error) -> Box<ImportStopped> {
        Box::new(ImportStopped { summary: self.summary, error })
    }
}

fn validate(content: String, tags: &[String]) -> std::result::Result<(String, Vec<String>), String> {
    memory::validate_content("content", &content).map_err(|e| e.to_string())?;
    let tags = memory::normalize_tags(tags).map_err(|e| e.to_string())?;
    Ok((content, tags))
}

/// Imports `(content, tags)` items (numbered from 1 in the summary): the same validation,
/// batching and summary as a JSON Lines import, for callers that already hold the items.
pub fn import_items(engine: &Engine, items: impl IntoIterator<Item = (String, Vec<String>)>) -> Result<ImportSummary> {
    let mut b = Batcher::new(engine);
    for (i, item) in items.into_iter().enumerate() {
        b.push(i + 1, Ok(item))?;
    }
    Ok(b.finish()?)
}

/// Imports every line of `reader`; `progress` is called with the bytes consumed so far.
pub fn import_jsonl(
    engine: &Engine,
    reader: impl BufRead,
    progress: &mut dyn FnMut(u64),
) -> Result<ImportSummary, Box<ImportStopped>> {
    let mut b = Batcher::new(engine);
    let mut consumed = 0u64;
    for (i, line) in reader.split(b'\n').enumerate() {
        let raw = match line {
            Ok(raw) => raw,
            Err(e) => return Err(b.stopped(crate::Error::io("cannot read the import file", e))),
        };
        consumed += raw.len() as u64 + 1;
        let item = match std::str::from_utf8(&raw) {
            Ok(t) if t.trim().is_empty() => continue,
            Ok(t) => serde_json::from_str::<Line>(t.trim())
                .map(|l| (l.content, l.tags))
                .map_err(|e| format!("invalid JSON object: {e}")),
            Err(e) => Err(format!("not UTF-8: {e}")),
        };
        match b.push(i + 1, item) {
            Ok(true) => progress(consumed),
            Ok(false) => {}
            Err(e) => return Err(b.stopped(e)),
        }
    }
    let summary = b.finish()?;
    progress(consumed);
    Ok(summary)
}
