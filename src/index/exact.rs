//! Exact scoring: every row a [`Filter`] admits is scored with SIMD cosine.
//!
//! Two shapes of question: [`top_k`] (the best k, for recall) and [`sweep`] (every row at or
//! above a threshold, plus the best row and how many were eligible, for loop gates, which
//! must never miss a row above their threshold). Below [`PARALLEL_MIN`] rows a single thread
//! is fastest; above it the scan is split across rayon's threads. Results are sorted best
//! first, ties broken by the newer id.

use rayon::prelude::*;

use super::{Filter, Scored, VectorSet};
use crate::spaces::cosine;

/// Below this many candidates, a parallel scan costs more than it saves.
pub const PARALLEL_MIN: usize = 16_384;

/// Orders candidates best first (score descending, then id descending).
pub fn sort_best_first(v: &mut [Scored]) {
    v.sort_unstable_by(better);
}

fn better(a: &Scored, b: &Scored) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(b.id.cmp(&a.id))
}

/// Keeps the best `k` of `v`, sorted best first.
pub fn truncate_best(mut v: Vec<Scored>, k: usize) -> Vec<Scored> {
    if v.len() > k {
        v.select_nth_unstable_by(k, better);
        v.truncate(k);
    }
    sort_best_first(&mut v);
    v
}

/// Scores the row at `pos` if the filter admits it and it reaches the threshold.
#[inline]
pub fn score_at(set: &VectorSet, pos: usize, q: &[f32], f: &Filter<'_>) -> Option<Scored> {
    if !f.admits(set, pos) {
        return None;
    }
    let score = cosine(q, set.vector(pos));
    (score >= f.min_score).then_some(Scored { id: set.id_at(pos), score })
}

/// The positions a filter may visit, for a parallel scan: a slice of the tag filter's
/// positions, or a range of the set.
fn positions(set: &VectorSet, f: &Filter<'_>) -> Positions {
    match f.only_ids {
        Some(ids) => {
            let from = ids.partition_point(|&x| x <= f.after_id);
            Positions::Listed(ids[from..].iter().filter_map(|id| set.position(*id)).collect())
        }
        None => Positions::Range(set.first_after(f.after_id)..set.len()),
    }
}

enum Positions {
    Listed(Vec<usize>),
    Range(std::ops::Range<usize>),
}

impl Positions {
    fn len(&self) -> usize {
        match self {
            Positions::Listed(v) => v.len(),
            Positions::Range(r) => r.len(),
        }
    }
}

/// The best `k` rows of `set` for query `q` under `filter`, scored exactly.
pub fn top_k(set: &VectorSet, q: &[f32], k: usize, filter: &Filter<'_>) -> Vec<Scored> {
    let pos = positions(set, filter);
    if pos.len() < PARALLEL_MIN {
        let hits = set.admitted(filter).filter_map(|p| score_at(set, p, q, filter)).collect();
        return truncate_best(hits, k);
    }
    // Each thread keeps its own best k, so the merge is small.
    let fold = |mut acc: Vec<Scored>, p: usize| {
        if let Some(s) = score_at(set, p, q, filter) {
            acc.push(s);
            if acc.len() >= 4 * k.max(64) {
                acc = truncate_best(acc, k);
            }
        }
        acc
    };
    let merge = |mut a: Vec<Scored>, b: Vec<Scored>| {
        a.extend(b);
        truncate_best(a, k)
    };
    let hits = match pos {
        Positions::Listed(v) => v.into_par_iter().fold(Vec::new, fold).reduce(Vec::new, merge),
        Positions::Range(r) => r.into_par_iter().fold(Vec::new, fold).reduce(Vec::new, merge),
    };
    truncate_best(hits, k)
}

/// What a gate needs from one pass over the rows a filter admits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sweep {
    /// Every admitted row scoring at least `filter.min_score`, best first.
    pub above: Vec<Scored>,
    /// The best admitted row, whatever its score.
    pub best: Option<Scored>,
    /// How many rows the filter admitted.
    pub eligible: u64,
    /// The largest row id the pass could see: a watermark for the next pass.
    pub upto: i64,
}

impl Sweep {
    fn add(mut self, s: Scored, min: f32) -> Sweep {
        self.eligible += 1;
        if self.best.is_none_or(|b| better(&s, &b).is_lt()) {
            self.best = Some(s);
        }
        if s.score >= min {
            self.above.push(s);
        }
        self
    }

    fn merge(mut self, o: Sweep) -> Sweep {
        self.eligible += o.eligible;
        self.above.extend(o.above);
        self.best = match (self.best, o.best) {
            (Some(a), Some(b)) => Some(if better(&a, &b).is_le() { a } else { b }),
            (a, b) => a.or(b),
        };
        self
    }
}

/// Every row `filter` admits, scored exactly: those at or above `filter.min_score` (best
/// first), the best overall, and the count. Exact by construction: nothing is skipped.
pub fn sweep(set: &VectorSet, q: &[f32], filter: &Filter<'_>) -> Sweep {
    let min = filter.min_score;
    // Score everything admitted; the threshold only decides what goes into `above`.
    let all = Filter { min_score: f32::NEG_INFINITY, ..*filter };
    let pos = positions(set, filter);
    let mut out = if pos.len() < PARALLEL_MIN {
        // `admitted` already applied the filter: score each row once, without asking again.
        set.admitted(filter)
            .map(|p| Scored { id: set.id_at(p), score: cosine(q, set.vector(p)) })
            .filter(|s| !s.score.is_nan())
            .fold(Sweep::default(), |acc, s| acc.add(s, min))
    } else {
        let fold = |acc: Sweep, p: usize| match score_at(set, p, q, &all) {
            Some(s) => acc.add(s, min),
            None => acc,
        };
        match pos {
            Positions::Listed(v) => v.into_par_iter().fold(Sweep::default, fold).reduce(Sweep::default, Sweep::merge),
            Positions::Range(r) => r.into_par_iter().fold(Sweep::default, fold).reduce(Sweep::default, Sweep::merge),
        }
    };
    sort_best_first(&mut out.above);
    out.upto = set.last_id();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use crate::memory::Kind;

    fn set_of(texts: &[(&str, Kind)]) -> VectorSet {
        let mut s = VectorSet::new();
        for (i, (t, k)) in texts.iter().enumerate() {
            s.push(i as i64 + 1, *k, &HashEmbedder::vector(t));
        }
        s
    }

    #[test]
    fn finds_best_and_respects_filters() {
        let mut set = set_of(&[
            ("the cat sat on the mat", Kind::Memory),
            ("stock prices fell sharply", Kind::Memory),
            ("the cat sat on the mat, lap", Kind::Lap),
        ]);
        let q = HashEmbedder::vector("cat on mat");
        let all = Filter::memories();
        let hits = top_k(&set, &q, 10, &all);
        assert_eq!(hits.len(), 2, "laps are excluded by default");
        assert_eq!(hits[0].id, 1);
        let with_laps = Filter { include_laps: true, ..all };
        assert_eq!(top_k(&set, &q, 10, &with_laps).len(), 3);
        let only = Filter { only_ids: Some(&[2]), ..all };
        assert_eq!(top_k(&set, &q, 10, &only).iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
        let after = Filter { after_id: 1, ..with_laps };
        assert_eq!(top_k(&set, &q, 10, &after).iter().map(|s| s.id).collect::<Vec<_>>(), vec![3, 2]);
        set.tombstone(1);
        assert_eq!(top_k(&set, &q, 10, &all)[0].id, 2);
        let strict = Filter { min_score: 0.99, ..with_laps };
        assert!(top_k(&set, &q, 10, &strict).is_empty());
    }

    #[test]
    fn sweep_counts_every_eligible_row_and_keeps_all_above_threshold() {
        let set = set_of(&[
            ("deploy 1 done", Kind::Memory),
            ("deploy 2 done", Kind::Memory),
            ("deploy 1 done", Kind::Lap),
            ("weather report", Kind::Memory),
        ]);
        let q = HashEmbedder::vector("deploy 1 done");
        let f = Filter { min_score: 0.5, ..Filter::memories() };
        let s = sweep(&set, &q, &f);
        assert_eq!(s.eligible, 3, "the lap is never eligible");
        assert_eq!(s.best.map(|b| b.id), Some(1));
        assert!(s.above.iter().all(|c| c.score >= 0.5));
        assert_eq!(s.above.first().map(|c| c.id), Some(1));
        assert!(!s.above.iter().any(|c| c.id == 3 || c.id == 4));
        // A watermark sees only newer rows.
        let later = sweep(&set, &q, &Filter { after_id: 1, ..f });
        assert_eq!(later.eligible, 2);
        assert_eq!(later.best.map(|b| b.id), Some(2));
    }

    #[test]
    fn parallel_scans_match_serial() {
        let mut set = VectorSet::new();
        for i in 0..(PARALLEL_MIN + 100) {
            set.push(i as i64 + 1, Kind::Memory, &HashEmbedder::vector(&format!("memory number {i} about {}", i % 97)));
        }
        set.tombstone(7);
        let q = HashEmbedder::vector("memory about 42");
        let f = Filter::memories();
        let par = top_k(&set, &q, 10, &f);
        let mut serial: Vec<Scored> = (0..set.len()).filter_map(|p| score_at(&set, p, &q, &f)).collect();
        sort_best_first(&mut serial);
        let mut threshold = serial.clone();
        serial.truncate(10);
        assert_eq!(par, serial);
        let t = threshold[200].score;
        threshold.retain(|s| s.score >= t);
        let sw = sweep(&set, &q, &Filter { min_score: t, ..f });
        assert_eq!(sw.above, threshold, "the parallel sweep misses nothing above the threshold");
        assert_eq!(sw.eligible as usize, set.len() - 1);
        assert_eq!(sw.best, Some(par[0]));
    }
}
