//! Gates: what decides, each lap, whether a loop is done.
//!
//! [`MemoryGate`] is the product gate: the best exact cosine between the gate query and any
//! gate-eligible memory. It has no scan of its own: each lap asks the engine for a sweep of
//! the rows that arrived since the last lap ([`Engine::gate_sweep`], which applies the one
//! eligibility rule of [`crate::index::Filter`]: `kind = memory`, not forgotten, carrying
//! every gate tag). Lap 1 sweeps every eligible memory; later laps only what arrived, so a
//! poll costs microseconds rather than a scan. Ledger laps are `kind = lap` and never
//! eligible, so a loop can never converge on its own ledger. [`StubGate`] is the keyless
//! demo's gate.

use serde::Serialize;

use crate::engine::Engine;
use crate::index::Scored;
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
    /// Largest row id already swept.
    seen: i64,
}

impl<'e> MemoryGate<'e> {
    /// Embeds `query` once and prepares a gate with threshold `threshold` and `tags`
    /// (already checked and normalised, see [`super::params::CheckedLoop`]).
    pub fn new(engine: &'e Engine, query: &str, threshold: f32, tags: Vec<String>) -> Result<Self> {
        let query_tokens = engine.embedder().count_tokens(query)? as u64;
        let qv = engine.embedder().embed_one(query)?;
        Ok(MemoryGate { engine, query: qv, query_tokens, threshold, tags, best: None, eligible: 0, seen: 0 })
    }
}

impl Gate for MemoryGate<'_> {
    fn observe(&mut self, _lap: i64) -> Result<Observation> {
        // A best match forgotten since the last lap: start over from scratch.
        if let Some(b) = self.best {
            if !self.engine.exists(b.id)? {
                self.engine.tombstone(&[b.id]);
                (self.best, self.eligible, self.seen) = (None, 0, 0);
            }
        }
        let sweep = self.engine.gate_sweep(&self.query, &self.tags, self.seen, self.threshold)?;
        if let Some(s) = sweep.best {
            if self.best.is_none_or(|b| s.score > b.score) {
                self.best = Some(s);
            }
        }
        self.eligible += sweep.eligible;
        self.seen = sweep.upto;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use crate::engine::DataRoot;
    use std::sync::Arc;

    fn engine(dir: &std::path::Path) -> Engine {
        Engine::open(&DataRoot { dir: dir.join("data"), explicit: true }, Arc::new(HashEmbedder)).unwrap()
    }

    #[test]
    fn sees_old_and_new_memories_never_laps_and_respects_tags() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let old = e.remember("deploy of build 7 finished", &[]).unwrap().id;
        let lap_tags = vec!["loop".to_string(), "loop:x".to_string()];
        e.insert_rows(crate::memory::Kind::Lap, &[("deploy of build 7 finished, lap", lap_tags)]).unwrap();
        let mut g = MemoryGate::new(&e, "deploy of build 7 finished", 0.99, Vec::new()).unwrap();
        let o = g.observe(1).unwrap();
        assert!(o.passed, "a memory from before the run counts: {}", o.detail);
        assert_eq!((o.best_memory_id, o.eligible), (Some(old), 1), "the lap is not eligible");

        let tagged = vec!["ci".to_string()];
        let mut g = MemoryGate::new(&e, "deploy of build 7 finished", 0.99, tagged.clone()).unwrap();
        assert!(!g.observe(1).unwrap().passed, "untagged memories are not eligible");
        let poll = g.observe(2).unwrap();
        assert_eq!(poll.eligible, 0);
        let new = e.remember("deploy of build 7 finished", &tagged).unwrap().id;
        let o = g.observe(3).unwrap();
        assert!(o.passed);
        assert_eq!((o.best_memory_id, o.eligible), (Some(new), 1));
    }

    #[test]
    fn a_forgotten_best_is_dropped_and_the_rest_rescanned() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let a = e.remember("invoice 1031 paid in full", &[]).unwrap().id;
        let b = e.remember("invoice 1031 paid", &[]).unwrap().id;
        let mut g = MemoryGate::new(&e, "invoice 1031 paid", 0.999, Vec::new()).unwrap();
        assert_eq!(g.observe(1).unwrap().best_memory_id, Some(b));
        engine(tmp.path()).forget(&[b]).unwrap(); // another process
        let o = g.observe(2).unwrap();
        assert_eq!(o.best_memory_id, Some(a));
        assert!(!o.passed);
        assert_eq!(o.eligible, 1);
    }
}
