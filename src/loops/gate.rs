//! Gates: what decides, each lap, whether a loop is done.
//!
//! [`MemoryGate`] is the product gate: the best exact cosine between the gate query and any
//! gate-eligible memory (`kind = memory`, not forgotten, carrying every gate tag). Lap 1
//! scores every eligible memory; later laps score only rows that arrived since (ids only
//! grow) and re-check that the best match still exists, so a poll costs microseconds rather
//! than a scan. Ledger laps are `kind = lap` and are skipped by kind, so a loop can never
//! converge on its own ledger. [`StubGate`] is the keyless demo's gate.

use serde::Serialize;

use crate::engine::Engine;
use crate::index::exact::{self, Filter};
use crate::index::Scored;
use crate::memory::Kind;
use crate::Result;

/// What a gate saw on one lap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    pub passed: bool,
    pub best_score: Option<f32>,
    pub best_memory_id: Option<i64>,
    /// Gate-eligible memories seen so far in this run.
    pub eligible: u64,
    /// One human sentence: best match, its score, the threshold, how many were eligible.
    pub detail: String,
}

impl Observation {
    /// The part of an observation that no-progress detection compares.
    pub fn fingerprint(&self) -> (Option<i64>, Option<u32>, u64) {
        (self.best_memory_id, self.best_score.map(f32::to_bits), self.eligible)
    }
}

/// A gate evaluated once per lap.
pub trait Gate {
    /// Evaluates the gate for lap `lap` (1-based).
    fn observe(&mut self, lap: i64) -> Result<Observation>;
    /// Tokens spent setting the gate up (the gate query's tokens), counted on lap 1.
    fn setup_tokens(&self) -> u64 {
        0
    }
}

/// The memory gate of SPEC §2.
pub struct MemoryGate<'e> {
    engine: &'e Engine,
    query: Vec<f32>,
    query_tokens: u64,
    threshold: f32,
    tags: Vec<String>,
    best: Option<Scored>,
    eligible: u64,
    /// Largest row id already scored.
    seen: i64,
}

impl<'e> MemoryGate<'e> {
    /// Embeds `query` once and prepares a gate with threshold `min_score` and `tags`.
    pub fn new(engine: &'e Engine, query: &str, min_score: f64, tags: Vec<String>) -> Result<Self> {
        let query_tokens = engine.embedder().count_tokens(query)? as u64;
        let qv = engine.embedder().embed_one(query)?;
        Ok(MemoryGate { engine, query: qv, query_tokens, threshold: min_score as f32, tags, best: None, eligible: 0, seen: 0 })
    }

    /// Scores rows with id > `self.seen`: every new eligible memory.
    fn scan_new(&mut self) -> Result<()> {
        self.engine.refresh()?;
        let only = if self.tags.is_empty() {
            None
        } else {
            Some(self.engine.store().ids_with_all_tags_after(&self.tags, self.seen)?)
        };
        let set = self.engine.vectors();
        let start = set.first_after(self.seen);
        let filter = Filter { include_laps: false, only_ids: None, min_score: -1.0 };
        let consider = |p: usize, best: &mut Option<Scored>, eligible: &mut u64| {
            if let Some(s) = exact::score_at(&set, p, &self.query, &filter) {
                *eligible += 1;
                if best.is_none_or(|b| s.score > b.score) {
                    *best = Some(s);
                }
            }
        };
        let (mut best, mut eligible) = (self.best, self.eligible);
        match &only {
            Some(ids) => ids.iter().filter_map(|id| set.position(*id)).for_each(|p| consider(p, &mut best, &mut eligible)),
            None if set.len() - start >= exact::PARALLEL_MIN => {
                // Lap 1 on a large store: the parallel exact scan finds the best; count separately.
                if let Some(top) = exact::top_k_from(&set, &self.query, 1, &filter, start).first() {
                    if best.is_none_or(|b| top.score > b.score) {
                        best = Some(*top);
                    }
                }
                eligible += (start..set.len()).filter(|&p| {
                    let (id, kind, _) = set.get(p);
                    kind == Kind::Memory && !set.is_removed(id)
                }).count() as u64;
            }
            None => (start..set.len()).for_each(|p| consider(p, &mut best, &mut eligible)),
        }
        self.best = best;
        self.eligible = eligible;
        self.seen = set.last_id();
        Ok(())
    }
}

impl Gate for MemoryGate<'_> {
    fn observe(&mut self, _lap: i64) -> Result<Observation> {
        // A best match forgotten since the last lap: start over from scratch.
        if let Some(b) = self.best {
            if self.engine.store().existing(&[b.id])?.is_empty() {
                self.engine.tombstone(b.id);
                self.best = None;
                self.eligible = 0;
                self.seen = 0;
            }
        }
        self.scan_new()?;
        let passed = self.best.is_some_and(|b| b.score >= self.threshold);
        let detail = match self.best {
            None => format!("no eligible memories yet; threshold {:.3}", self.threshold),
            Some(b) => format!(
                "best match #{} scored {:.3} {} threshold {:.3}; {} eligible memories",
                b.id,
                b.score,
                if passed { ">=" } else { "<" },
                self.threshold,
                self.eligible
            ),
        };
        Ok(Observation {
            passed,
            best_score: self.best.map(|b| b.score),
            best_memory_id: self.best.map(|b| b.id),
            eligible: self.eligible,
            detail,
        })
    }

    fn setup_tokens(&self) -> u64 {
        self.query_tokens
    }
}

/// The keyless demo's gate: fails on laps before `pass_on`, passes from it on.
pub struct StubGate {
    pub pass_on: i64,
}

impl Gate for StubGate {
    fn observe(&mut self, lap: i64) -> Result<Observation> {
        let passed = lap >= self.pass_on;
        let score = if passed { 1.0 } else { lap as f32 / self.pass_on as f32 };
        Ok(Observation {
            passed,
            best_score: Some(score),
            best_memory_id: None,
            eligible: 0,
            detail: format!(
                "stub gate {} on lap {lap} (it passes from lap {}); score {score:.3} vs threshold 1.000",
                if passed { "passed" } else { "failed" },
                self.pass_on
            ),
        })
    }
}
