//! Gates: what decides, each lap, whether a loop is done.
//!
//! [`MemoryGate`] is the product gate, in two stages. Candidates: every gate-eligible memory
//! whose exact cosine with the gate query reaches the threshold. The gate has no scan of its
//! own: each lap asks the engine for a sweep of the rows that arrived since the last lap
//! ([`crate::engine::Engine::sweep`] through [`super::host::LoopHost::gate_sweep`], which applies the one eligibility rule of
//! [`crate::index::Filter`]: `kind = memory`, not forgotten, carrying every gate tag), so lap
//! 1 sweeps everything and a poll costs microseconds. Verification: the candidates, best
//! first, at most [`CANDIDATES_PER_LAP`] a lap, go through the run's verifier chain
//! ([`super::verify`]); the gate passes on the first one every verifier accepts. A rejected
//! candidate never hides a later one (the rest wait in a pool for the next lap), and is not
//! asked again unless a verifier says its answer can change. Ledger laps are `kind = lap` and
//! never eligible, so a loop can never converge on its own ledger. [`StubGate`] is the
//! keyless demo's gate.

use std::collections::HashSet;
use std::time::Instant;

use serde::Serialize;

use super::host::LoopHost;
use super::verify::{Candidate, Chain, Rejected};
use crate::index::exact::{sort_best_first, Sweep};
use crate::index::Scored;
use crate::record::GateDef;
use crate::Result;

/// Most candidates verified in one lap (the rest wait for the next lap, best first).
pub const CANDIDATES_PER_LAP: usize = 32;

/// What a gate saw on one lap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Observation {
    pub passed: bool,
    /// The passing candidate's score when passed, else the best score seen (`None` for a
    /// tag-only gate: its memories are not scored).
    pub best_score: Option<f32>,
    pub best_memory_id: Option<i64>,
    /// Gate-eligible memories seen so far in this run.
    pub eligible: u64,
    /// One human sentence: best match, its score, the threshold, how many were eligible, and
    /// why candidates were rejected.
    pub detail: String,
    /// Candidates rejected on this lap.
    pub rejected: Vec<Rejected>,
    /// The verifiers that accepted the passing candidate (empty: plain cosine).
    pub verified_by: Vec<String>,
    /// Each gate's progress, in the run's order (empty for the demo's stub).
    pub gates: Vec<GateProgress>,
}

/// How far one gate of a run is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateProgress {
    /// The memories that passed it so far (distinct, best first).
    pub accepted: Vec<Scored>,
    /// How many must pass.
    pub count: u32,
    /// The verifiers that accepted them.
    pub verified_by: Vec<String>,
}

impl GateProgress {
    pub fn passed(&self) -> bool {
        self.accepted.len() >= self.count as usize
    }
}

impl Observation {
    /// The part of an observation that no-progress detection compares.
    pub fn fingerprint(&self) -> (Option<i64>, Option<u32>, u64, Vec<usize>) {
        let progress = self.gates.iter().map(|g| g.accepted.len()).collect();
        (self.best_memory_id, self.best_score.map(f32::to_bits), self.eligible, progress)
    }
}

/// A gate evaluated once per lap.
pub trait Gate {
    /// Evaluates the gate for lap `lap` (1-based); slow verification stops at `deadline`.
    fn observe(&mut self, lap: i64, deadline: Instant) -> Result<Observation>;
    /// Tokens spent setting the gate up (the gate query's tokens), counted on lap 1.
    fn setup_tokens(&self) -> u64 {
        0
    }
    /// Called when the change feed says something committed: takes in what arrived and
    /// returns true when it could pass the gate (a new candidate), so the loop evaluates a
    /// lap now rather than at its next poll. Unrelated writes return false and cost no lap.
    fn probe(&mut self) -> Result<bool> {
        Ok(false)
    }
    /// False for a gate with nothing to wait for (the demo's stub): its laps run back to back.
    fn waits(&self) -> bool {
        true
    }
    /// Called once, when the run first waits (lap 1 did not end it): the gate may get its
    /// verifiers ready in the background.
    fn prepare_wait(&self) {}
}

/// Where a run's eligible memories begin (`since`), resolved when the run starts: only rows
/// with an id above `after` count; `label` is how the detail names it (`since start`).
#[derive(Debug, Clone, PartialEq)]
pub struct Watermark {
    pub after: i64,
    pub label: String,
}

/// The memory gate of SPEC §2: one gate, with a query (scored) or tags alone, that passes
/// once `count` distinct memories have passed it.
pub struct MemoryGate<'e> {
    engine: &'e LoopHost,
    /// The embedded query; `None` for a tag-only gate (no model, no score).
    query: Option<std::sync::Arc<[f32]>>,
    query_tokens: u64,
    threshold: f32,
    tags: Vec<String>,
    chain: Chain,
    count: usize,
    since: Option<Watermark>,
    /// Matches at or below the watermark, counted on lap 1 (said in every detail).
    ignored: Option<usize>,
    /// The best eligible memory seen, whatever its score (for the detail and no-progress).
    best: Option<Scored>,
    eligible: u64,
    /// Largest row id already swept.
    seen: i64,
    /// Candidates at or above the threshold waiting for verification, best first.
    pool: Vec<Scored>,
    /// Candidates rejected for good (the chain's answers cannot change).
    rejected: HashSet<i64>,
    /// Memories that passed, best first (at most `count`).
    accepted: Vec<Scored>,
    /// Candidates and passed memories dropped because they expired (said in the detail).
    expired: usize,
    /// True inside a [`super::gate_set::GateSet`], which brings the index up to date once per
    /// lap for all its gates: this gate then sweeps the index without refreshing it itself.
    refreshed_by_set: bool,
    /// The forget counter when `best` was last checked to exist (`None`: never,
    /// or a tag-only gate, which checks on every lap).
    forgets_checked: Option<i64>,
    /// A sweep the set made for this gate together with its neighbours, from the watermark
    /// it holds; taken by the next sweep if the watermark is still that one.
    supplied: Option<(i64, Sweep)>,
}

impl<'e> MemoryGate<'e> {
    /// Prepares gate `def` (checked, see [`super::params::CheckedLoop`]): embeds its query
    /// once (a tag-only gate loads no model) and builds its verifier chain. Only rows above
    /// `since` are eligible.
    pub fn new(engine: &'e LoopHost, def: &GateDef, since: Option<Watermark>) -> Result<Self> {
        let chain = Chain::build(&def.verify, def.query.as_deref().unwrap_or(""), def.nli_min)?;
        let (query, query_tokens) = match &def.query {
            Some(q) => {
                engine.refresh_for_gate()?;
                let (qv, tokens) = engine.query_vector(q)?;
                (Some(qv), tokens)
            }
            None => (None, 0),
        };
        let seen = since.as_ref().map_or(0, |w| w.after);
        Ok(MemoryGate {
            engine,
            query,
            query_tokens,
            threshold: def.min_score as f32,
            tags: def.tags.clone(),
            chain,
            count: def.count.max(1) as usize,
            since,
            ignored: None,
            best: None,
            eligible: 0,
            seen,
            pool: Vec::new(),
            rejected: HashSet::new(),
            accepted: Vec::new(),
            expired: 0,
            refreshed_by_set: false,
            forgets_checked: None,
            supplied: None,
        })
    }

    /// Marks this gate as one of a set that refreshes the index for it (see
    /// [`super::gate_set::GateSet`]).
    pub(super) fn in_set(mut self) -> Self {
        self.refreshed_by_set = true;
        self
    }

    /// False for a tag-only gate (no query, no index).
    pub(super) fn has_query(&self) -> bool {
        self.query.is_some()
    }

    /// The runtime this gate reads through.
    pub(super) fn host(&self) -> &'e LoopHost {
        self.engine
    }

    /// What this gate's next sweep reads, so a set can sweep gates alike in one pass: its
    /// query and threshold, its tags and its watermark (`None` for a tag-only gate).
    pub(super) fn sweep_request(&self) -> Option<SweepRequest<'_>> {
        self.query.as_deref().map(|q| SweepRequest { query: (q, self.threshold), tags: &self.tags[..], after: self.seen })
    }

    /// Hands the gate the sweep its set made for it from watermark `after`.
    pub(super) fn supply(&mut self, after: i64, sweep: Sweep) {
        self.supplied = Some((after, sweep));
    }

    /// Takes in what arrived since the last lap; returns how many new candidates joined the
    /// pool (or 1 when a forgotten best forced a fresh start).
    fn sweep(&mut self) -> Result<usize> {
        let mut fresh_count = 0;
        let floor = self.since.as_ref().map_or(0, |w| w.after);
        // One look at the store (shared by the process's waiting loops) before anything else,
        // so the forget counter below is as new as what the sweep reads.
        let forgets = match &self.query {
            Some(_) => {
                if !self.refreshed_by_set {
                    self.engine.refresh_for_gate()?;
                }
                Some(self.engine.forgets_seen())
            }
            // A tag-only gate reads the store on every sweep anyway.
            None => None,
        };
        // A best match forgotten since the last lap: start over from scratch. Asked of the
        // store only when a forget has happened since the last time (or for a tag-only gate).
        let unchanged = forgets.is_some() && forgets == self.forgets_checked;
        self.forgets_checked = forgets;
        if let (Some(b), false) = (self.best, unchanged) {
            if !self.engine.exists(b.id)? {
                self.engine.tombstone(&[b.id]);
                (self.best, self.eligible, self.seen) = (None, 0, floor);
                self.pool.clear();
                fresh_count = 1;
            }
        }
        if self.ignored.is_none() {
            self.ignored = Some(match &self.since {
                Some(w) => self.count_ignored(w.after)?,
                None => 0,
            });
        }
        let supplied = self.supplied.take();
        let sweep = match (&self.query, supplied) {
            // The set swept this gate's rows with its neighbours' (the watermark still holds:
            // a forgotten best above would have moved it).
            (Some(_), Some((after, s))) if after == self.seen => s,
            // Refreshed above (or, in a set, by the set for every gate this lap).
            (Some(qv), _) => self.engine.sweep(qv, &self.tags, self.seen, self.threshold)?,
            (None, _) => self.engine.tag_sweep(&self.tags, self.seen)?,
        };
        if let Some(s) = sweep.best {
            if self.best.is_none_or(|b| s.score > b.score) {
                self.best = Some(s);
            }
        }
        self.eligible += sweep.eligible;
        self.seen = sweep.upto;
        if !sweep.above.is_empty() {
            let known: HashSet<i64> = self.pool.iter().chain(&self.accepted).map(|s| s.id).collect();
            let before = self.pool.len();
            let fresh = sweep.above.into_iter().filter(|s| !self.rejected.contains(&s.id) && !known.contains(&s.id));
            self.pool.extend(fresh);
            fresh_count += self.pool.len() - before;
            sort_best_first(&mut self.pool);
        }
        Ok(fresh_count)
    }

    /// Matches written at or before the watermark: what `since` keeps out.
    fn count_ignored(&self, upto: i64) -> Result<usize> {
        if upto <= 0 {
            return Ok(0);
        }
        Ok(match &self.query {
            Some(qv) => self.engine.gate_sweep(qv, &self.tags, 0, self.threshold)?.above.iter().filter(|s| s.id <= upto).count(),
            None => self.engine.tag_sweep_upto(&self.tags, upto)?,
        })
    }

    /// Drops passed memories that were forgotten or have expired since they passed: a gate
    /// that has passed stays passed only while its memories exist and hold.
    fn recheck_accepted(&mut self) -> Result<()> {
        if self.accepted.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = self.accepted.iter().map(|s| s.id).collect();
        let rows = self.engine.get(&ids)?;
        let now = crate::memory::now_rfc3339();
        let present: HashSet<i64> = rows.iter().map(|m| m.id).collect();
        let live: HashSet<i64> = rows.iter().filter(|m| !m.expired_at(&now)).map(|m| m.id).collect();
        let gone: Vec<i64> = ids.into_iter().filter(|id| !present.contains(id)).collect();
        if !gone.is_empty() {
            self.engine.tombstone(&gone);
        }
        self.expired += self.accepted.iter().filter(|s| present.contains(&s.id) && !live.contains(&s.id)).count();
        self.accepted.retain(|s| live.contains(&s.id));
        Ok(())
    }

    /// Verifies the best waiting candidates, one batch at a time, until `count` memories have
    /// passed, the pool is empty or [`CANDIDATES_PER_LAP`] were decided; returns the lap's
    /// rejections.
    fn verify(&mut self, deadline: Instant) -> Result<Vec<Rejected>> {
        let mut rejected_now = Vec::new();
        let mut decided_now = 0;
        while self.accepted.len() < self.count && !self.pool.is_empty() && decided_now < CANDIDATES_PER_LAP {
            let (accepted, rejected, decided) = self.verify_batch(deadline, CANDIDATES_PER_LAP - decided_now)?;
            decided_now += decided.max(1);
            rejected_now.extend(rejected);
            match accepted {
                Some(c) => {
                    self.accepted.push(Scored { id: c.id, score: c.score });
                    sort_best_first(&mut self.accepted);
                }
                None => break,
            }
        }
        Ok(rejected_now)
    }

    /// One pass of the chain over at most `most` of the best waiting candidates: the one that
    /// passed (it leaves the pool), the rejections, and how many were decided.
    fn verify_batch(&mut self, deadline: Instant, most: usize) -> Result<(Option<Candidate>, Vec<Rejected>, usize)> {
        // Candidates whose rows vanished are dropped; keep taking until a batch is full.
        let mut batch: Vec<Candidate> = Vec::new();
        while batch.is_empty() && !self.pool.is_empty() {
            let take: Vec<Scored> = self.pool.iter().take(most).copied().collect();
            let ids: Vec<i64> = take.iter().map(|s| s.id).collect();
            let mut rows = self.engine.get(&ids)?;
            let gone: Vec<i64> = ids.iter().filter(|id| !rows.iter().any(|m| m.id == **id)).copied().collect();
            if !gone.is_empty() {
                self.engine.tombstone(&gone);
                self.pool.retain(|s| !gone.contains(&s.id));
            }
            // An expired memory never passes; it leaves the pool for good (its expiry can only
            // move by a rewrite, which a later sweep does not see again: the id is behind it).
            let now = crate::memory::now_rfc3339();
            let stale: Vec<i64> = rows.iter().filter(|m| m.expired_at(&now)).map(|m| m.id).collect();
            if !stale.is_empty() {
                self.expired += stale.len();
                self.pool.retain(|s| !stale.contains(&s.id));
                rows.retain(|m| !stale.contains(&m.id));
            }
            batch = take
                .iter()
                .filter_map(|s| {
                    rows.iter().find(|m| m.id == s.id).map(|m| Candidate {
                        id: m.id,
                        content: m.content.clone(),
                        tags: m.tags.clone(),
                        score: s.score,
                    })
                })
                .collect();
        }
        if batch.is_empty() {
            return Ok((None, Vec::new(), 0));
        }
        let verdict = self.chain.verify(&batch, deadline)?;
        let untested: HashSet<i64> = verdict.untested.iter().map(|&i| batch[i].id).collect();
        let may_change = self.chain.may_change();
        // Everything in the batch was decided except the untested: those stay in the pool.
        let decided: HashSet<i64> = batch.iter().map(|c| c.id).filter(|id| !untested.contains(id)).collect();
        let accepted = verdict.accepted.map(|i| batch[i].clone());
        let accepted_id = accepted.as_ref().map(|c| c.id);
        if may_change {
            // A command may say yes later: rejected candidates stay, but move behind the rest.
            let (mut back, front): (Vec<Scored>, Vec<Scored>) = self.pool.drain(..).partition(|s| decided.contains(&s.id));
            self.pool = front;
            back.retain(|s| Some(s.id) != accepted_id);
            self.pool.append(&mut back);
        } else {
            self.pool.retain(|s| !decided.contains(&s.id));
            self.rejected.extend(verdict.rejected.iter().map(|r| r.id));
        }
        Ok((accepted, verdict.rejected, decided.len()))
    }

    /// This gate's progress (for the run's result and for [`super::gate_set::GateSet`]).
    pub fn progress(&self) -> GateProgress {
        GateProgress { accepted: self.accepted.clone(), count: self.count as u32, verified_by: self.chain.names() }
    }

    fn passed(&self) -> bool {
        self.accepted.len() >= self.count
    }
}

impl Gate for MemoryGate<'_> {
    fn prepare_wait(&self) {
        self.chain.prepare();
    }

    fn observe(&mut self, _lap: i64, deadline: Instant) -> Result<Observation> {
        self.recheck_accepted()?;
        self.sweep()?;
        let rejected = self.verify(deadline)?;
        let passed = self.passed();
        let t = self.threshold;
        let tag_only = self.query.is_none();
        let why: Vec<String> = rejected.iter().map(|r| if tag_only { r.sentence_unscored() } else { r.sentence() }).collect();
        let verified_by = if passed { self.chain.names() } else { Vec::new() };
        let by = if verified_by.is_empty() {
            if tag_only {
                "its tags".to_string()
            } else {
                "plain cosine".to_string()
            }
        } else {
            verified_by.join(", ")
        };
        let first = self.accepted.first().copied();
        let mut detail = match (passed, first, self.best) {
            (true, Some(c), _) if self.count > 1 => {
                format!("{} of {} memories passed (best #{}), verified by {by}", self.accepted.len(), self.count, c.id)
            }
            (true, Some(c), _) if tag_only => format!("match #{} carries every gate tag, verified by {by}", c.id),
            (true, Some(c), _) => format!("match #{} scored {:.3} >= threshold {t:.3}, verified by {by}", c.id, c.score),
            (_, _, None) if tag_only => "no memory carries every gate tag yet".to_string(),
            (_, _, None) => format!("no eligible memories yet; threshold {t:.3}"),
            (_, _, Some(_)) if self.count > 1 => format!("{} of {} memories passed", self.accepted.len(), self.count),
            (_, _, Some(_)) if tag_only => "no memory carrying every gate tag passed verification".to_string(),
            (_, _, Some(b)) if why.is_empty() => format!(
                "best match #{} scored {:.3} {} threshold {t:.3}{}",
                b.id,
                b.score,
                if b.score >= t { ">=" } else { "<" },
                // Without this, a lap after a rejection would read as if it should have passed.
                if self.rejected.contains(&b.id) { " but was rejected on an earlier lap" } else { "" }
            ),
            (_, _, Some(_)) => format!("no candidate passed verification (threshold {t:.3})"),
        };
        if self.best.is_some() {
            detail.push_str(&format!("; {} eligible memories", self.eligible));
        }
        if let (Some(n), Some(w)) = (self.ignored.filter(|n| *n > 0), &self.since) {
            detail.push_str(&format!("; {n} older match{} ignored ({})", if n == 1 { "" } else { "es" }, w.label));
        }
        if self.expired > 0 {
            let n = self.expired;
            detail.push_str(&format!("; {n} expired memor{} not counted", if n == 1 { "y" } else { "ies" }));
        }
        if !why.is_empty() {
            detail.push_str(&format!("; rejected: {}", why.join("; ")));
        }
        let pending = self.pool.len();
        if !passed && pending > 0 {
            detail.push_str(&format!("; {pending} candidates wait for the next lap"));
        }
        let (best_score, best_memory_id) = match (passed, first) {
            (true, Some(c)) => (Some(c.score), Some(c.id)),
            _ => (self.best.map(|b| b.score), self.best.map(|b| b.id)),
        };
        Ok(Observation {
            passed,
            best_score: if tag_only { None } else { best_score },
            best_memory_id,
            eligible: self.eligible,
            detail,
            rejected,
            verified_by,
            gates: vec![self.progress()],
        })
    }

    fn setup_tokens(&self) -> u64 {
        self.query_tokens
    }

    fn probe(&mut self) -> Result<bool> {
        Ok(self.sweep()? > 0)
    }
}

/// The keyless demo's gate: fails on laps before `pass_on`, passes from it on.
pub struct StubGate {
    pub pass_on: i64,
}

impl Gate for StubGate {
    fn observe(&mut self, lap: i64, _deadline: Instant) -> Result<Observation> {
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
            rejected: Vec::new(),
            verified_by: Vec::new(),
            gates: Vec::new(),
        })
    }

    fn waits(&self) -> bool {
        false
    }
}

/// What a query gate's next sweep reads ([`MemoryGate::sweep_request`]): gates whose tags and
/// watermark agree can share one pass over the vectors.
pub(super) struct SweepRequest<'a> {
    /// The query's embedding and the gate's cosine threshold.
    pub query: (&'a [f32], f32),
    /// The tags every candidate must carry.
    pub tags: &'a [String],
    /// The watermark: only rows with a larger id are read.
    pub after: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use crate::engine::{DataRoot, Engine};
    use crate::record::VerifySpec;
    use std::sync::Arc;

    fn gate<'e>(e: &'e LoopHost, q: &str, t: f32, tags: Vec<String>, v: VerifySpec) -> MemoryGate<'e> {
        let verify = if v == VerifySpec::None { vec![] } else { vec![v] };
        let def = GateDef { query: Some(q.into()), tags, min_score: t as f64, verify, nli_min: 0.5, count: 1 };
        MemoryGate::new(e, &def, None).unwrap()
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    /// The loop runtime over a test engine (a deterministic embedder: index and loop logic).
    fn engine(dir: &std::path::Path) -> LoopHost {
        LoopHost::new(Arc::new(
            Engine::open(&DataRoot { dir: dir.join("data"), explicit: true, store: None }, Arc::new(HashEmbedder)).unwrap(),
        ))
    }

    #[test]
    fn sees_old_and_new_memories_never_laps_and_respects_tags() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let old = e.remember("deploy of build 7 finished", &[]).unwrap().id;
        let lap_tags = vec!["loop".to_string(), "loop:x".to_string()];
        e.insert_rows(crate::memory::Kind::Lap, &[("deploy of build 7 finished, lap", lap_tags)]).unwrap();
        let mut g = gate(&e, "deploy of build 7 finished", 0.99, Vec::new(), VerifySpec::None);
        let o = g.observe(1, far()).unwrap();
        assert!(o.passed, "a memory from before the run counts: {}", o.detail);
        assert_eq!((o.best_memory_id, o.eligible), (Some(old), 1), "the lap is not eligible");

        let tagged = vec!["ci".to_string()];
        let mut g = gate(&e, "deploy of build 7 finished", 0.99, tagged.clone(), VerifySpec::None);
        assert!(!g.observe(1, far()).unwrap().passed, "untagged memories are not eligible");
        let poll = g.observe(2, far()).unwrap();
        assert_eq!(poll.eligible, 0);
        let new = e.remember("deploy of build 7 finished", &tagged).unwrap().id;
        let o = g.observe(3, far()).unwrap();
        assert!(o.passed);
        assert_eq!((o.best_memory_id, o.eligible), (Some(new), 1));
    }

    #[test]
    fn a_forgotten_best_is_dropped_and_the_rest_rescanned() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let a = e.remember("invoice 1031 paid in full", &[]).unwrap().id;
        let b = e.remember("invoice 1031 paid", &[]).unwrap().id;
        let mut g = gate(&e, "invoice 1031 paid", 0.999, Vec::new(), VerifySpec::None);
        assert_eq!(g.observe(1, far()).unwrap().best_memory_id, Some(b));
        engine(tmp.path()).forget(&[b]).unwrap(); // another process
        let o = g.observe(2, far()).unwrap();
        assert_eq!(o.best_memory_id, Some(a));
        assert!(!o.passed);
        assert_eq!(o.eligible, 1);
    }

    #[test]
    fn a_contradiction_never_passes_and_never_hides_the_true_signal() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let no = e.remember("review of PR #42: NOT approved, changes requested", &[]).unwrap().id;
        let other = e.remember("PR #43 approved", &[]).unwrap().id;
        let mut g = gate(&e, "PR #42 approved", 0.0, Vec::new(), VerifySpec::Guard);
        let o = g.observe(1, far()).unwrap();
        assert!(!o.passed, "{}", o.detail);
        let ids: Vec<i64> = o.rejected.iter().map(|r| r.id).collect();
        assert!(ids.contains(&no) && ids.contains(&other), "{:?}", o.rejected);
        assert!(o.detail.contains("rejected: #"), "{}", o.detail);
        // Rejected once, never asked again: the next poll verifies nothing.
        assert!(g.observe(2, far()).unwrap().rejected.is_empty());
        let yes = e.remember("review complete: PR #42 is approved", &[]).unwrap().id;
        let o = g.observe(3, far()).unwrap();
        assert!(o.passed, "{}", o.detail);
        assert_eq!(o.best_memory_id, Some(yes));
        assert_eq!(o.verified_by, vec!["guard".to_string()]);
        // The same store with plain cosine passes on the contradiction (this is what the
        // guard is for).
        let mut plain = gate(&e, "PR #42 approved", 0.0, Vec::new(), VerifySpec::None);
        assert!(plain.observe(1, far()).unwrap().passed);
    }

    #[test]
    fn candidates_beyond_one_lap_wait_in_the_pool_best_first() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let items: Vec<(String, Vec<String>)> =
            (0..40).map(|i| (format!("deployment {i} of the service was NOT finished"), vec![])).collect();
        let refs: Vec<(&str, &[String])> = items.iter().map(|(c, t)| (c.as_str(), t.as_slice())).collect();
        e.remember_batch(&refs).unwrap();
        let yes = e.remember("the deployment of the service finished", &[]).unwrap().id;
        let mut g = gate(&e, "deployment of the service finished", -1.0, Vec::new(), VerifySpec::Guard);
        let mut laps = 0;
        let passed = loop {
            laps += 1;
            let o = g.observe(laps, far()).unwrap();
            assert!(o.rejected.len() <= CANDIDATES_PER_LAP);
            if o.passed || laps == 5 {
                break o;
            }
        };
        assert!(passed.passed, "{}", passed.detail);
        assert_eq!(passed.best_memory_id, Some(yes));
    }
}
