//! Bulk import of JSON Lines: one `{"content": "...", "tags": ["..."], "embedding": [...]}`
//! object per line (`tags` and `embedding` optional), plus what `slm export` writes
//! ([`crate::export`]): a memory line may carry `kind` (`memory` or `lap`) and `created_at`
//! (RFC 3339, kept), and `{"loop_run": …}` / `{"loop_lap": …}` lines restore the loop ledger
//! (each stored once: a run or lap already stored is counted as deduped).
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
use crate::export::Record;
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
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// One validated memory line.
struct Item {
    content: String,
    /// Normalised once validated.
    tags: Vec<String>,
    /// A unit vector, when the line brought one.
    embedding: Option<Vec<f32>>,
    kind: memory::Kind,
    created_at: Option<String>,
}

impl Item {
    fn new(content: String, tags: Vec<String>) -> Item {
        Item { content, tags, embedding: None, kind: memory::Kind::Memory, created_at: None }
    }
}

/// A parsed line: a memory, or a loop record of an export.
enum Parsed {
    Memory(Item),
    Record(Record),
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
    /// Loop records (`loop_run` and `loop_lap` lines of an export) newly stored.
    #[serde(skip_serializing_if = "is_zero")]
    pub records: usize,
    /// Every line up to this 1-based number is stored, deduplicated or skipped (0: none).
    pub last_committed_line: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    fn push(&mut self, line: usize, item: std::result::Result<Parsed, String>) -> Result<bool> {
        self.summary.lines += 1;
        self.last_line = line;
        let item = match item {
            Ok(Parsed::Memory(item)) => validate(item),
            Ok(Parsed::Record(r)) => return self.record(line, r),
            Err(e) => Err(e),
        };
        match item {
            Ok(item) => {
                // A batch holds one kind: an export lists memories and laps interleaved.
                if self.batch.last().is_some_and(|b| b.kind != item.kind) {
                    self.flush()?;
                }
                self.batch.push(item)
            }
            Err(error) => self.summary.skipped.push(SkippedLine { line, error }),
        }
        let given = self.batch.iter().all(|i| i.embedding.is_some());
        if self.batch.len() < if given { BATCH_GIVEN } else { BATCH } {
            return Ok(false);
        }
        self.flush()?;
        Ok(true)
    }

    /// Stores a loop record after everything before it (a lap's memory comes first).
    fn record(&mut self, line: usize, r: Record) -> Result<bool> {
        self.flush()?;
        let stored = match r {
            Record::Run(run) => self.engine.import_run(&run.into()),
            Record::Lap(lap) => self.engine.import_lap(&lap.into()),
        };
        match stored {
            Ok(true) => self.summary.records += 1,
            Ok(false) => self.summary.deduped += 1,
            Err(e @ crate::Error::InvalidInput { .. }) => self.summary.skipped.push(SkippedLine { line, error: e.to_string() }),
            Err(e) => return Err(e),
        }
        self.summary.last_committed_line = line;
        Ok(false)
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            self.summary.last_committed_line = self.last_line;
            return Ok(());
        }
        let kind = self.batch[0].kind;
        let items: Vec<(&str, Vec<String>)> = self.batch.iter().map(|i| (i.content.as_str(), i.tags.clone())).collect();
        let given: Vec<Option<&[f32]>> = self.batch.iter().map(|i| i.embedding.as_deref()).collect();
        let created: Vec<Option<&str>> = self.batch.iter().map(|i| i.created_at.as_deref()).collect();
        // A ledger lap exported before it was embedded is stored the same way, for the
        // importing store's background embedder; memories are always embedded now.
        let embed = kind == memory::Kind::Memory;
        for r in self.engine.insert_imported(kind, &items, &given, &created, embed)? {
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

fn validate(mut item: Item) -> std::result::Result<Item, String> {
    memory::validate_content("content", &item.content).map_err(|e| e.to_string())?;
    item.tags = memory::normalize_tags(&item.tags).map_err(|e| e.to_string())?;
    if let Some(t) = &item.created_at {
        // Stored as every other time is (UTC, microseconds), so times sort as text.
        let at = chrono::DateTime::parse_from_rfc3339(t)
            .map_err(|_| format!("invalid created_at: {t:?} must be an RFC 3339 time"))?;
        item.created_at = Some(at.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    }
    Ok(item)
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
    // A vector that is already a unit vector to f32 precision (every vector `slm export`
    // writes) is kept bit for bit, so an export imported elsewhere scores exactly the same.
    if (norm - 1.0).abs() < 1e-6 {
        return Ok(v.iter().map(|&x| x as f32).collect());
    }
    Ok(v.iter().map(|x| (x / norm) as f32).collect())
}

/// Imports `(content, tags)` items (numbered from 1 in the summary): the same validation,
/// batching and summary as a JSON Lines import, for callers that already hold the items.
pub fn import_items(engine: &Engine, items: impl IntoIterator<Item = (String, Vec<String>)>) -> Result<ImportSummary> {
    let mut b = Batcher::new(engine);
    for (i, (content, tags)) in items.into_iter().enumerate() {
        b.push(i + 1, Ok(Parsed::Memory(Item::new(content, tags))))?;
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
        let parsed: Vec<(usize, Option<std::result::Result<Parsed, String>>)> =
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
fn parse_line(raw: &[u8]) -> Option<std::result::Result<Parsed, String>> {
    match std::str::from_utf8(raw) {
        Ok(t) if t.trim().is_empty() => None,
        Ok(t) => Some(parse_text(t.trim())),
        Err(e) => Some(Err(format!("not UTF-8: {e}"))),
    }
}

fn parse_text(t: &str) -> std::result::Result<Parsed, String> {
    // Record lines open with their one key; anything else is a memory line.
    let head = t.trim_start_matches('{').trim_start();
    if head.starts_with("\"loop_run\"") || head.starts_with("\"loop_lap\"") {
        return serde_json::from_str::<Record>(t).map(Parsed::Record).map_err(|e| format!("invalid loop record: {e}"));
    }
    let l = serde_json::from_str::<Line>(t).map_err(|e| format!("invalid JSON object: {e}"))?;
    let kind = match l.kind.as_deref() {
        None | Some("memory") => memory::Kind::Memory,
        Some("lap") => memory::Kind::Lap,
        Some(other) => return Err(format!("invalid kind: {other:?} must be memory or lap")),
    };
    Ok(Parsed::Memory(Item {
        content: l.content,
        tags: l.tags,
        embedding: l.embedding.map(unit_vector).transpose()?,
        kind,
        created_at: l.created_at,
    }))
}
