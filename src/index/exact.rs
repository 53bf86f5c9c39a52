//! Exact top-k search: every eligible vector is scored with SIMD cosine.
//!
//! Below [`PARALLEL_MIN`] vectors a single thread is fastest; above it the scan is split
//! across rayon's threads. Results are sorted best first, ties broken by the newer id.

use rayon::prelude::*;

use super::{Scored, VectorSet};
use crate::memory::Kind;
use crate::spaces::cosine;

/// Below this many candidates, a parallel scan costs more than it saves.
pub const PARALLEL_MIN: usize = 16_384;

/// Which rows a scan may return.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// Include ledger laps as well as memories.
    pub include_laps: bool,
    /// Only these ids (ascending), when set.
    pub only_ids: Option<&'a [i64]>,
    /// Drop scores below this.
    pub min_score: f32,
}

/// Orders candidates best first (score descending, then id descending).
pub fn sort_best_first(v: &mut [Scored]) {
    v.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
}

/// Keeps the best `k` of `v`, sorted best first.
pub fn truncate_best(mut v: Vec<Scored>, k: usize) -> Vec<Scored> {
    if v.len() > k {
        v.select_nth_unstable_by(k, |a, b| b.score.total_cmp(&a.score).then(b.id.cmp(&a.id)));
        v.truncate(k);
    }
    sort_best_first(&mut v);
    v
}

/// Scores the row at `pos` if the filter admits it.
pub fn score_at(set: &VectorSet, pos: usize, q: &[f32], f: &Filter<'_>) -> Option<Scored> {
    let (id, kind, v) = set.get(pos);
    if (kind == Kind::Lap && !f.include_laps) || set.is_removed(id) {
        return None;
    }
    let score = cosine(q, v);
    (score >= f.min_score).then_some(Scored { id, score })
}

/// The best `k` rows of `set` for query `q` under `filter`, scored exactly.
pub fn top_k(set: &VectorSet, q: &[f32], k: usize, filter: &Filter<'_>) -> Vec<Scored> {
    top_k_from(set, q, k, filter, 0)
}

/// [`top_k`] over the rows at positions `start..` only (rows newer than some point).
pub fn top_k_from(set: &VectorSet, q: &[f32], k: usize, filter: &Filter<'_>, start: usize) -> Vec<Scored> {
    let hits: Vec<Scored> = match filter.only_ids {
        Some(ids) => {
            let positions: Vec<usize> = ids.iter().filter_map(|id| set.position(*id)).collect();
            if positions.len() >= PARALLEL_MIN {
                positions.par_iter().filter_map(|&p| score_at(set, p, q, filter)).collect()
            } else {
                positions.iter().filter_map(|&p| score_at(set, p, q, filter)).collect()
            }
        }
        None if set.len().saturating_sub(start) >= PARALLEL_MIN => {
            // Each thread keeps its own best k, so the merge is small.
            (start..set.len())
                .into_par_iter()
                .fold(Vec::new, |mut acc, p| {
                    if let Some(s) = score_at(set, p, q, filter) {
                        acc.push(s);
                        if acc.len() >= 4 * k.max(64) {
                            acc = truncate_best(acc, k);
                        }
                    }
                    acc
                })
                .reduce(Vec::new, |mut a, b| {
                    a.extend(b);
                    truncate_best(a, k)
                })
        }
        None => (start..set.len()).filter_map(|p| score_at(set, p, q, filter)).collect(),
    };
    truncate_best(hits, k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;

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
        let all = Filter { include_laps: false, only_ids: None, min_score: -1.0 };
        let hits = top_k(&set, &q, 10, &all);
        assert_eq!(hits.len(), 2, "laps are excluded by default");
        assert_eq!(hits[0].id, 1);
        let with_laps = Filter { include_laps: true, ..all };
        assert_eq!(top_k(&set, &q, 10, &with_laps).len(), 3);
        let only = Filter { only_ids: Some(&[2]), ..all };
        assert_eq!(top_k(&set, &q, 10, &only).iter().map(|s| s.id).collect::<Vec<_>>(), vec![2]);
        set.tombstone(1);
        assert_eq!(top_k(&set, &q, 10, &all)[0].id, 2);
        let strict = Filter { min_score: 0.99, ..with_laps };
        assert!(top_k(&set, &q, 10, &strict).is_empty());
    }

    #[test]
    fn parallel_scan_matches_serial() {
        let mut set = VectorSet::new();
        for i in 0..(PARALLEL_MIN + 100) {
            set.push(i as i64 + 1, Kind::Memory, &HashEmbedder::vector(&format!("memory number {i} about {}", i % 97)));
        }
        let q = HashEmbedder::vector("memory about 42");
        let f = Filter { include_laps: false, only_ids: None, min_score: -1.0 };
        let par = top_k(&set, &q, 10, &f);
        let mut serial: Vec<Scored> = (0..set.len()).filter_map(|p| score_at(&set, p, &q, &f)).collect();
        sort_best_first(&mut serial);
        serial.truncate(10);
        assert_eq!(par, serial);
    }
}
