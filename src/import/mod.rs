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

pub mod embedding;

use std::io::BufRead;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::export::Record;
use crate::memory;
use crate::Result;

/// Lines embedded and written together.
pub const BATCH: usize = 256;

/// Lines written together when they all brought their embedding (no model call to pace):
/// about 0.65 s of write lock at 50k rows/s, and each commit rewrites the index pages its rows
/// touch (the dedup key's index is random), so fewer, larger commits write far less log: at
/// 1M rows, 32,768 keys rewrite about the whole index once where four batches of 8,192
/// rewrote about half of it each (a 1M import: 19.4 s against 20.7 s, averages of four).
pub const BATCH_GIVEN: usize = 32768;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line<'a> {
    content: String,
    #[serde(default)]
    tags: Vec<String>,
    /// Left as text by serde_json (which still checks its syntax): [`embedding`] converts it.
    #[serde(default, borrow)]
    embedding: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
}

/// One memory line.
struct Item {
    content: String,
    /// Normalised once validated.
    tags: Vec<String>,
    /// A unit vector, when the line brought one.
    embedding: Option<Vec<f32>>,
    kind: memory::Kind,
    created_at: Option<String>,
    /// Canonical UTC text once validated; past times import as expired.
    expires_at: Option<String>,
}

impl Item {
    fn new(content: String, tags: Vec<String>) -> Item {
        Item { content, tags, embedding: None, kind: memory::Kind::Memory, created_at: None, expires_at: None }
    }
}

/// A parsed line: a memory, or a loop record of an export.
enum Entry {
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
    /// Items in `batch` that came without a vector (they pace the batch: the model runs).
    to_embed: usize,
    summary: ImportSummary,
    /// The number of the last line taken (what a successful flush commits through).
    last_line: usize,
}

impl<'e> Batcher<'e> {
    fn new(engine: &'e Engine) -> Self {
        Batcher { engine, batch: Vec::with_capacity(BATCH), to_embed: 0, summary: ImportSummary::default(), last_line: 0 }
    }

    /// Takes item number `line` (1-based), already validated: a valid one joins the batch;
    /// otherwise it is reported. Returns true when a full batch was written.
    fn push(&mut self, line: usize, item: std::result::Result<Entry, String>) -> Result<bool> {
        self.summary.lines += 1;
        self.last_line = line;
        match item {
            Ok(Entry::Memory(item)) => {
                // A batch holds one kind: an export lists memories and laps interleaved.
                if self.batch.last().is_some_and(|b| b.kind != item.kind) {
                    self.flush()?;
                }
                self.to_embed += usize::from(item.embedding.is_none());
                self.batch.push(item);
            }
            Ok(Entry::Record(r)) => return self.record(line, r),
            Err(error) => self.summary.skipped.push(SkippedLine { line, error }),
        }
        if self.batch.len() < if self.to_embed == 0 { BATCH_GIVEN } else { BATCH } {
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
        Ok(true)
    }

    fn flush(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            self.summary.last_committed_line = self.last_line;
            return Ok(());
        }
        let kind = self.batch[0].kind;
        // The batch is cleared after the write either way, so its tags can move out.
        let tags: Vec<Vec<String>> = self.batch.iter_mut().map(|i| std::mem::take(&mut i.tags)).collect();
        let items: Vec<(&str, Vec<String>)> = self.batch.iter().map(|i| i.content.as_str()).zip(tags).collect();
        let given: Vec<Option<&[f32]>> = self.batch.iter().map(|i| i.embedding.as_deref()).collect();
        let created: Vec<Option<&str>> = self.batch.iter().map(|i| i.created_at.as_deref()).collect();
        let expires: Vec<Option<&str>> = self.batch.iter().map(|i| i.expires_at.as_deref()).collect();
        // A ledger lap exported before it was embedded is stored the same way, for the
        // importing store's background embedder; memories are always embedded now.
        let embed = kind == memory::Kind::Memory;
        let written = self.engine.insert_imported(kind, &items, &given, &created, &expires, embed);
        drop((items, given, created, expires));
        self.batch.clear();
        self.to_embed = 0;
        for r in written? {
            if r.deduped {
                self.summary.deduped += 1;
            } else {
                self.summary.imported += 1;
            }
        }
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

fn validate(mut item: Item) -> std::result::Result<Entry, String> {
    memory::validate_content("content", &item.content).map_err(|e| e.to_string())?;
    item.tags = memory::normalize_tags(&item.tags).map_err(|e| e.to_string())?;
    if let Some(t) = &item.created_at {
        // Stored as every other time is (UTC, microseconds), so times sort as text.
        let at = chrono::DateTime::parse_from_rfc3339(t).map_err(|_| format!("invalid created_at: {t:?} must be an RFC 3339 time"))?;
        item.created_at = Some(at.with_timezone(&chrono::Utc).to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
    }
    if let Some(t) = &item.expires_at {
        if item.kind == memory::Kind::Lap {
            return Err("invalid expires_at: a ledger lap never expires".to_string());
        }
        item.expires_at =
            Some(crate::expiry::normalize("expires_at", t).map_err(|_| format!("invalid expires_at: {t:?} must be an RFC 3339 time"))?);
    }
    Ok(Entry::Memory(item))
}

/// A memory line's fields into an item (its embedding already read).
fn item(l: Line<'_>, embedding: Option<Vec<f32>>) -> std::result::Result<Entry, String> {
    let kind = match l.kind.as_deref() {
        None | Some("memory") => memory::Kind::Memory,
        Some("lap") => memory::Kind::Lap,
        Some(other) => return Err(format!("invalid kind: {other:?} must be memory or lap")),
    };
    validate(Item { content: l.content, tags: l.tags, embedding, kind, created_at: l.created_at, expires_at: l.expires_at })
}

/// Imports `(content, tags)` items (numbered from 1 in the summary): the same validation,
/// batching and summary as a JSON Lines import, for callers that already hold the items.
pub fn import_items(engine: &Engine, items: impl IntoIterator<Item = (String, Vec<String>)>) -> Result<ImportSummary> {
    let mut b = Batcher::new(engine);
    for (i, (content, tags)) in items.into_iter().enumerate() {
        b.push(i + 1, validate(Item::new(content, tags)))?;
    }
    Ok(b.finish()?)
}

/// Imports every line of `reader`; `progress` is called with the bytes consumed so far.
///
/// Two stages overlap: this thread reads and parses (a chunk of lines at a time, in parallel:
/// 384 numbers per line make parsing as costly as the store's writes) while a writer thread
/// takes the parsed lines in order and writes the batches.
pub fn import_jsonl(engine: &Engine, reader: impl BufRead, progress: &mut dyn FnMut(u64)) -> Result<ImportSummary, Box<ImportStopped>> {
    if let Err(e) = engine.prepare_bulk() {
        return Err(Batcher::new(engine).stopped(e));
    }
    // Bytes read through the last chunk whose batches were written (for the progress bar).
    let written = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(IN_FLIGHT);
    std::thread::scope(|scope| {
        let writer = std::thread::Builder::new().name("slm-import-write".into()).spawn_scoped(scope, || write_parsed(engine, rx, &written));
        let writer = match writer {
            Ok(w) => w,
            Err(e) => return Err(Batcher::new(engine).stopped(crate::Error::io("cannot start the import's writer", e))),
        };
        let consumed = read_parsed(reader, &tx, &mut |_| progress(written.load(Ordering::Acquire)));
        drop(tx);
        let summary = writer.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        progress(consumed);
        Ok(summary)
    })
}

/// What the reading stage hands the writing stage.
enum Chunk {
    /// Parsed lines in order (`None`: blank), and the bytes read through them.
    Lines(Vec<(usize, Option<std::result::Result<Entry, String>>)>, u64),
    /// Reading failed: stop without writing the batch in progress.
    Failed(crate::Error),
}

/// Chunks parsed ahead of the writer: a batch's worth, so parsing goes on while the writer
/// inserts and commits a batch (with 2, the two stages mostly took turns: a 1M import used
/// one core of two).
const IN_FLIGHT: usize = BATCH_GIVEN / PARSE_CHUNK;

/// Reads and parses `reader` a chunk at a time into `tx` until the input ends, reading fails
/// or the writer stops; returns the bytes read. `chunk_sent` runs after each chunk.
fn read_parsed(reader: impl BufRead, tx: &SyncSender<Chunk>, chunk_sent: &mut dyn FnMut(u64)) -> u64 {
    use rayon::prelude::*;
    let mut consumed = 0u64;
    let mut lines = reader.split(b'\n').enumerate().peekable();
    while lines.peek().is_some() {
        let mut chunk: Vec<(usize, Vec<u8>)> = Vec::with_capacity(PARSE_CHUNK);
        for (i, line) in lines.by_ref().take(PARSE_CHUNK) {
            match line {
                Ok(raw) => {
                    consumed += raw.len() as u64 + 1;
                    chunk.push((i + 1, raw));
                }
                Err(e) => {
                    let _ = tx.send(Chunk::Failed(crate::Error::io("cannot read the import file", e)));
                    return consumed;
                }
            }
        }
        let parsed = chunk.into_par_iter().map(|(n, raw)| (n, parse_line(&raw))).collect();
        if tx.send(Chunk::Lines(parsed, consumed)).is_err() {
            break; // the writer stopped on an error, which it reports
        }
        chunk_sent(consumed);
    }
    consumed
}

/// Writes what [`read_parsed`] sends, in order; `written` follows the bytes written through.
fn write_parsed(engine: &Engine, rx: Receiver<Chunk>, written: &AtomicU64) -> Result<ImportSummary, Box<ImportStopped>> {
    let mut b = Batcher::new(engine);
    for msg in rx {
        match msg {
            Chunk::Lines(lines, consumed) => {
                let mut wrote = false;
                for (n, item) in lines {
                    if let Some(item) = item {
                        match b.push(n, item) {
                            Ok(w) => wrote |= w,
                            Err(e) => return Err(b.stopped(e)),
                        }
                    }
                }
                if wrote {
                    written.store(consumed, Ordering::Release);
                }
            }
            Chunk::Failed(e) => return Err(b.stopped(e)),
        }
    }
    b.finish()
}

/// Lines parsed together.
const PARSE_CHUNK: usize = 1024;

/// One line: `None` when blank, else the item or why it is rejected.
fn parse_line(raw: &[u8]) -> Option<std::result::Result<Entry, String>> {
    let t = match std::str::from_utf8(raw) {
        Ok(t) if t.trim().is_empty() => return None,
        Ok(t) => t.trim(),
        Err(e) => return Some(Err(format!("not UTF-8: {e}"))),
    };
    // Record lines open with their one key; anything else is a memory line.
    let head = t.trim_start_matches('{').trim_start();
    if head.starts_with("\"loop_run\"") || head.starts_with("\"loop_lap\"") {
        return Some(serde_json::from_str::<Record>(t).map(Entry::Record).map_err(|e| format!("invalid loop record: {e}")));
    }
    // The usual line with an embedding: its numbers are read by hand and serde_json reads
    // the rest with `null` in their place (the same object: the array was strict JSON).
    if let Some((range, v)) = embedding::split_line(t) {
        let rest = format!("{}null{}", &t[..range.start], &t[range.end..]);
        if let Ok(l @ Line { embedding: None, .. }) = serde_json::from_str::<Line>(&rest) {
            return Some(item(l, Some(v)));
        }
    }
    // Anything else, and every line with an error (its message then names the real line).
    Some(serde_json::from_str::<Line>(t).map_err(|e| format!("invalid JSON object: {e}")).and_then(|l| {
        let v = l.embedding.map(|r| embedding::unit_vector(r.get())).transpose()?;
        item(l, v)
    }))
}
