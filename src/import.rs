//! Bulk import of JSON Lines: one `{"content": "...", "tags": ["..."], "embedding": [...]}`
//! object per line (`tags` and `embedding` optional).
//!
//! Lines are validated one by one, so a bad line is reported with its number and skipped while
//! the rest are imported. Valid lines are written in batches of [`BATCH`]: one short write
//! transaction per batch, which keeps other processes' writes flowing during a long import.
//! Lines without an embedding are embedded (one model call per 64 texts); a line that carries
//! one (384 finite numbers, from the same model: slm cannot tell) is stored as given, after
//! normalising it, so moving a store from another tool needs no model at all.
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

/// Lines written together when they all brought their embedding (no model call to pace):
/// still a short transaction (tens of milliseconds), with far fewer commits.
pub const BATCH_GIVEN: usize = 2048;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    content: String,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    embedding: Option<Vec<f64>>,
}

/// One validated line: content, normalised tags, and its unit vector when it brought one.
type Item = (String, Vec<String>, Option<Vec<f32>>);

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
    batch: Vec<Item>,
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
    fn push(&mut self, line: usize, item: std::result::Result<Item, String>) -> Result<bool> {
        self.summary.lines += 1;
        self.last_line = line;
        match item.and_then(|(content, tags, v)| validate(content, &tags, v)) {
            Ok(item) => self.batch.push(item),
            Err(error) => self.summary.skipped.push(SkippedLine { line, error }),
        }
        let given = self.batch.iter().all(|(_, _, v)| v.is_some());
        if self.batch.len() < if given { BATCH_GIVEN } else { BATCH } {
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
        let items: Vec<(&str, Vec<String>)> = self.batch.iter().map(|(c, t, _)| (c.as_str(), t.clone())).collect();
        let given: Vec<Option<&[f32]>> = self.batch.iter().map(|(_, _, v)| v.as_deref()).collect();
        for r in self.engine.insert_rows_given(memory::Kind::Memory, &items, &given)? {
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

fn validate(content: String, tags: &[String], embedding: Option<Vec<f32>>) -> std::result::Result<Item, String> {
    memory::validate_content("content", &content).map_err(|e| e.to_string())?;
    let tags = memory::normalize_tags(tags).map_err(|e| e.to_string())?;
    Ok((content, tags, embedding))
}

/// Checks a given embedding (384 finite numbers, not all zero) and normalises it.
fn unit_vector(v: Vec<f64>) -> std::result::Result<Vec<f32>, String> {
    let dim = crate::embed::DIM;
    if v.len() != dim {
        return Err(format!("invalid embedding: must have {dim} numbers, got {}", v.len()));
    }
    if let Some(i) = v.iter().position(|x| !x.is_finite() || x.abs() > f64::from(f32::MAX)) {
        return Err(format!("invalid embedding: number {} is not a finite 32-bit float", i + 1));
    }
    let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm == 0.0 {
        return Err("invalid embedding: must not be all zeros".into());
    }
    Ok(v.iter().map(|x| (x / norm) as f32).collect())
}

/// Imports `(content, tags)` items (numbered from 1 in the summary): the same validation,
/// batching and summary as a JSON Lines import, for callers that already hold the items.
pub fn import_items(engine: &Engine, items: impl IntoIterator<Item = (String, Vec<String>)>) -> Result<ImportSummary> {
    let mut b = Batcher::new(engine);
    for (i, (content, tags)) in items.into_iter().enumerate() {
        b.push(i + 1, Ok((content, tags, None)))?;
    }
    Ok(b.finish()?)
}

/// Imports every line of `reader`; `progress` is called with the bytes consumed so far.
pub fn import_jsonl(
    engine: &Engine,
    reader: impl BufRead,
    progress: &mut dyn FnMut(u64),
) -> Result<ImportSummary, Box<ImportStopped>> {
    use rayon::prelude::*;
    if let Err(e) = engine.prepare_bulk() {
        return Err(Batcher::new(engine).stopped(e));
    }
    let mut b = Batcher::new(engine);
    let mut consumed = 0u64;
    let mut lines = reader.split(b'\n').enumerate().peekable();
    // Lines are read a chunk at a time and parsed in parallel (384 numbers per line make
    // parsing the largest cost of an import with embeddings), then taken in order.
    while lines.peek().is_some() {
        let mut chunk: Vec<(usize, Vec<u8>)> = Vec::with_capacity(PARSE_CHUNK);
        for (i, line) in lines.by_ref().take(PARSE_CHUNK) {
            let raw = match line {
                Ok(raw) => raw,
                Err(e) => return Err(b.stopped(crate::Error::io("cannot read the import file", e))),
            };
            consumed += raw.len() as u64 + 1;
            chunk.push((i + 1, raw));
        }
        let parsed: Vec<(usize, Option<std::result::Result<Item, String>>)> =
            chunk.into_par_iter().map(|(n, raw)| (n, parse_line(&raw))).collect();
        let mut wrote = false;
        for (n, item) in parsed {
            if let Some(item) = item {
                match b.push(n, item) {
                    Ok(w) => wrote |= w,
                    Err(e) => return Err(b.stopped(e)),
                }
            }
        }
        if wrote {
            progress(consumed);
        }
    }
    let summary = b.finish()?;
    progress(consumed);
    Ok(summary)
}

/// Lines parsed together.
const PARSE_CHUNK: usize = 1024;

/// One line: `None` when blank, else the item or why it is rejected.
fn parse_line(raw: &[u8]) -> Option<std::result::Result<Item, String>> {
    match std::str::from_utf8(raw) {
        Ok(t) if t.trim().is_empty() => None,
        Ok(t) => Some(
            serde_json::from_str::<Line>(t.trim())
                .map_err(|e| format!("invalid JSON object: {e}"))
                .and_then(|l| Ok((l.content, l.tags, l.embedding.map(unit_vector).transpose()?))),
        ),
        Err(e) => Some(Err(format!("not UTF-8: {e}"))),
    }
}
