//! Exact scoring: every row a [`Filter`] admits is scored with SIMD cosine.
//!
//! Two shapes of question: [`top_k`] (the best k, for recall) and [`sweep`] (every row at or
//! above a threshold, plus the best row and how many were eligible, for loop gates, which
//! must never miss a row above their threshold). Below [`PARALLEL_MIN`] rows a single thread
//! is fastest; above it the scan is split across rayon's threads. Rows in the mapped base are
//! read through their int8 copy first ([`super::quant`]): each gets an interval that holds
//! its exact cosine, only rows whose interval can still matter are rescored from their `f32`
//! vectors, so the answer is the same as a full `f32` scan while reading a quarter of the
//! bytes. Results are sorted best first, ties broken by the newer id.

use rayon::prelude::*;

use super::derived::WINDOW;
use super::quant;
use super::{Filter, Scored, VectorSet};
use crate::spaces::cosine;

/// Below this many base rows in a scan, the quantised pass is not worth its set-up.
pub const QUANT_MIN: usize = 4_096;

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
    if let Some(split) = quant_split(set, filter) {
        let mut hits = quant_top_k(set, q, k, filter, split.clone());
        hits.extend((split.end..set.len()).filter_map(|p| score_at(set, p, q, filter)));
        return truncate_best(hits, k);
    }
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

/// The best `k` rows by scoring every admitted row from its `f32` vector, one thread, no
/// shortcut: the reference `slm index verify` compares [`top_k`] with.
pub fn brute_top_k(set: &VectorSet, q: &[f32], k: usize, filter: &Filter<'_>) -> Vec<Scored> {
    let hits = (0..set.len()).filter_map(|p| score_at(set, p, q, filter)).collect();
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
    sweep_many(set, &[(q, filter.min_score)], filter).pop().unwrap_or_default()
}

/// [`sweep`] for several queries over the same rows, each with its own threshold (the
/// filter's own `min_score` is not used): one pass reads each row once and scores it against
/// every query while it is in cache, so a lap of three gates reads the vectors once, not
/// three times. The answers are those of one [`sweep`] per query.
pub fn sweep_many(set: &VectorSet, queries: &[(&[f32], f32)], filter: &Filter<'_>) -> Vec<Sweep> {
    let n = queries.len();
    let fresh = || vec![Sweep::default(); n];
    // Scores one admitted row against every query.
    let score_row = |mut acc: Vec<Sweep>, p: usize| -> Vec<Sweep> {
        let (id, v) = (set.id_at(p), set.vector(p));
        for ((q, min), out) in queries.iter().zip(acc.iter_mut()) {
            let score = cosine(q, v);
            if !score.is_nan() {
                *out = std::mem::take(out).add(Scored { id, score }, *min);
            }
        }
        acc
    };
    let admitted_row = |acc: Vec<Sweep>, p: usize| if filter.admits(set, p) { score_row(acc, p) } else { acc };
    let mut outs = if let Some(split) = quant_split(set, filter) {
        let base = quant_sweep_many(set, queries, filter, split.clone());
        (split.end..set.len()).fold(base, admitted_row)
    } else {
        let pos = positions(set, filter);
        if pos.len() < PARALLEL_MIN {
            // `admitted` already applied the filter: score each row once, without asking again.
            set.admitted(filter).fold(fresh(), score_row)
        } else {
            let merge = |a: Vec<Sweep>, b: Vec<Sweep>| a.into_iter().zip(b).map(|(x, y)| x.merge(y)).collect();
            match pos {
                Positions::Listed(v) => v.into_par_iter().fold(fresh, admitted_row).reduce(fresh, merge),
                Positions::Range(r) => r.into_par_iter().fold(fresh, admitted_row).reduce(fresh, merge),
            }
        }
    };
    for out in &mut outs {
        sort_best_first(&mut out.above);
        out.upto = set.last_id();
    }
    outs
}

/// The base rows an unfiltered scan visits, when a quantised pass is worth it.
fn quant_split(set: &VectorSet, filter: &Filter<'_>) -> Option<std::ops::Range<usize>> {
    let nb = set.base_len();
    if filter.only_ids.is_some() || nb == 0 {
        return None;
    }
    let start = set.first_after(filter.after_id);
    (start < nb && nb - start >= QUANT_MIN).then_some(start..nb)
}

/// The scan windows covering `range` (aligned to [`WINDOW`], clipped to the range).
fn windows(range: std::ops::Range<usize>) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut w = range.start / WINDOW * WINDOW;
    while w < range.end {
        out.push((w, (w + WINDOW).min(range.end)));
        w += WINDOW;
    }
    out
}

/// Calls `visit(pos, i, approx, bound)` for every admitted row of `range` within window
/// `(w, end)` and every query `i` of `qs`: the int8 interval, or (when the window cannot be
/// mapped) the exact score with a zero bound. A row's record is read once for all queries.
fn scan_window(
    set: &VectorSet,
    qs: &[(&[f32], quant::Query)],
    filter: &Filter<'_>,
    range: &std::ops::Range<usize>,
    (w, end): (usize, usize),
    visit: &mut dyn FnMut(usize, usize, f64, f64),
) {
    let base = set.base().expect("quant_split checked the base");
    let from = range.start.max(w);
    let map = base.quant_window(w..end);
    for p in from..end {
        if !filter.admits(set, p) {
            continue;
        }
        match &map {
            Some(m) => {
                let rec = &m[(p - w) * quant::REC..(p - w + 1) * quant::REC];
                for (i, (_, qq)) in qs.iter().enumerate() {
                    let (approx, bound) = qq.interval(rec);
                    visit(p, i, approx, bound);
                }
            }
            None => {
                let v = set.vector(p);
                for (i, (q, _)) in qs.iter().enumerate() {
                    visit(p, i, f64::from(cosine(q, v)), 0.0);
                }
            }
        }
    }
}

/// One window's top-k pass: the lower bounds kept, and the candidates `(position, upper bound)`.
type WindowTopK = (Vec<f64>, Vec<(usize, f64)>);

/// One window's sweep pass: rows admitted, and per query the best lower bound and the
/// candidates.
type WindowSweep = (u64, Vec<f64>, Vec<Vec<(usize, f64)>>);

/// Exact scores of base rows `positions` (ascending) that `filter` admits at its threshold.
/// Their `f32` vectors are read through one window mapping at a time (dropped after use),
/// so near-duplicate-heavy stores with many survivors do not grow the process's resident
/// memory by a page per survivor; positions the windows cannot map are scored as usual.
fn rescore_base(set: &VectorSet, q: &[f32], filter: &Filter<'_>, positions: Vec<usize>) -> Vec<Scored> {
    let Some(base) = set.base() else {
        return positions.into_iter().filter_map(|p| score_at(set, p, q, filter)).collect();
    };
    let mut out = Vec::with_capacity(positions.len());
    let mut i = 0;
    while i < positions.len() {
        let w = positions[i] / RESCORE_WINDOW * RESCORE_WINDOW;
        let end = (w + RESCORE_WINDOW).min(base.len());
        let j = i + positions[i..].partition_point(|&p| p < end);
        match base.vector_window(w..end) {
            Some(map) => {
                for &p in &positions[i..j] {
                    if !filter.admits(set, p) {
                        continue;
                    }
                    let v = crate::index::derived::as_vector(&map, p - w);
                    let score = cosine(q, v);
                    if score >= filter.min_score {
                        out.push(Scored { id: set.id_at(p), score });
                    }
                }
            }
            None => out.extend(positions[i..j].iter().filter_map(|&p| score_at(set, p, q, filter))),
        }
        i = j;
    }
    out
}

/// Base rows per rescoring window: 4,096 vectors (6 MB), page-aligned.
const RESCORE_WINDOW: usize = 4_096;

/// The `k` largest of `v` (unordered), and the smallest of those (−∞ when fewer than `k`).
fn keep_largest(v: &mut Vec<f64>, k: usize) -> f64 {
    if v.len() < k || k == 0 {
        return f64::NEG_INFINITY;
    }
    let n = v.len();
    v.select_nth_unstable_by(n - k, |a, b| a.total_cmp(b));
    v.drain(..n - k);
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Top-k over base rows `range` by the two-stage scan. A row is dropped only when its upper
/// bound is below the k-th largest lower bound: k rows are at least that good, so it cannot
/// be in the top k (ties at the k-th score survive, so the id tie-break is the exact one).
fn quant_top_k(set: &VectorSet, q: &[f32], k: usize, filter: &Filter<'_>, range: std::ops::Range<usize>) -> Vec<Scored> {
    let qs = [(q, quant::Query::new(q))];
    let min = f64::from(filter.min_score);
    let per_window = |win: (usize, usize)| {
        let mut lbs: Vec<f64> = Vec::with_capacity(4 * k);
        let mut cut = f64::NEG_INFINITY;
        let mut cands: Vec<(usize, f64)> = Vec::new();
        scan_window(set, &qs, filter, &range, win, &mut |p, _, approx, bound| {
            let (lb, ub) = (approx - bound, approx + bound);
            if ub < min || ub < cut {
                return;
            }
            lbs.push(lb);
            cands.push((p, ub));
            if lbs.len() >= 8 * k.max(8) {
                cut = keep_largest(&mut lbs, k);
                cands.retain(|c| c.1 >= cut);
            }
        });
        (lbs, cands)
    };
    let parts: Vec<WindowTopK> = windows(range.clone()).into_par_iter().map(per_window).collect();
    let mut all_lbs: Vec<f64> = parts.iter().flat_map(|p| p.0.iter().copied()).collect();
    let cut = keep_largest(&mut all_lbs, k);
    let survivors: Vec<usize> = parts.iter().flat_map(|p| p.1.iter()).filter(|c| c.1 >= cut).map(|c| c.0).collect();
    truncate_best(rescore_base(set, q, filter, survivors), k)
}

/// The gates' sweeps over base rows `range` by the two-stage scan, one per query (each with
/// its own threshold): every row whose interval reaches the threshold or the best lower bound
/// is rescored exactly, so `above` and `best` are exact; `eligible` counts every admitted row.
fn quant_sweep_many(set: &VectorSet, queries: &[(&[f32], f32)], filter: &Filter<'_>, range: std::ops::Range<usize>) -> Vec<Sweep> {
    let n = queries.len();
    let qs: Vec<(&[f32], quant::Query)> = queries.iter().map(|(q, _)| (*q, quant::Query::new(q))).collect();
    let ts: Vec<f64> = queries.iter().map(|(_, min)| f64::from(*min)).collect();
    let per_window = |win: (usize, usize)| {
        let mut eligible = 0u64;
        let mut best_lb = vec![f64::NEG_INFINITY; n];
        let mut cands: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
        scan_window(set, &qs, filter, &range, win, &mut |p, i, approx, bound| {
            if i == 0 {
                eligible += 1;
            }
            let (lb, ub) = (approx - bound, approx + bound);
            best_lb[i] = best_lb[i].max(lb);
            if ub >= ts[i] || ub >= best_lb[i] {
                cands[i].push((p, ub));
            }
        });
        for (i, c) in cands.iter_mut().enumerate() {
            c.retain(|c| c.1 >= ts[i] || c.1 >= best_lb[i]);
        }
        (eligible, best_lb, cands)
    };
    let parts: Vec<WindowSweep> = windows(range.clone()).into_par_iter().map(per_window).collect();
    // `add` counts only the rescored rows; every admitted row is eligible.
    let eligible = parts.iter().map(|p| p.0).sum();
    let all = Filter { min_score: f32::NEG_INFINITY, ..*filter };
    (0..n)
        .map(|i| {
            let best_lb = parts.iter().map(|p| p.1[i]).fold(f64::NEG_INFINITY, f64::max);
            let survivors: Vec<usize> =
                parts.iter().flat_map(|p| p.2[i].iter()).filter(|c| c.1 >= ts[i] || c.1 >= best_lb).map(|c| c.0).collect();
            let mut out = rescore_base(set, queries[i].0, &all, survivors)
                .into_iter()
                .filter(|s| !s.score.is_nan())
                .fold(Sweep::default(), |acc, s| acc.add(s, queries[i].1));
            out.eligible = eligible;
            out
        })
        .collect()
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

    /// A set whose first `n` rows live in real derived files (a temp dir), the rest in memory.
    fn mapped_set(dir: &std::path::Path, vecs: &[Vec<f32>], in_files: usize) -> VectorSet {
        use crate::index::derived::{store_id_bytes, Derived};
        let d = Derived::open(dir).unwrap();
        let id = store_id_bytes("0123456789abcdef0123456789abcdef");
        let mut load = |after: i64, visit: &mut crate::index::derived::RowVisitor<'_>| {
            for (i, v) in vecs[..in_files].iter().enumerate() {
                let rid = i as i64 + 1;
                if rid > after {
                    let kind = if i % 50 == 7 { Kind::Lap } else { Kind::Memory };
                    visit(rid, kind, &crate::spaces::to_blob(v))?;
                }
            }
            Ok(())
        };
        d.append(&id, &[], &mut load, &mut |_| {}).unwrap().unwrap();
        let mut set = VectorSet::with_base(std::sync::Arc::new(d.load().unwrap().unwrap()));
        for (i, v) in vecs.iter().enumerate().skip(in_files) {
            set.push(i as i64 + 1, if i % 50 == 7 { Kind::Lap } else { Kind::Memory }, v);
        }
        set
    }

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed | 1;
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    fn unit(mut v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    fn brute(set: &VectorSet, q: &[f32], f: &Filter<'_>) -> Vec<Scored> {
        let mut all: Vec<Scored> = (0..set.len()).filter_map(|p| score_at(set, p, q, f)).collect();
        sort_best_first(&mut all);
        all
    }

    /// Checks top-k and the sweep of the two-stage scan against a brute-force f32 scan.
    fn check_no_miss(set: &VectorSet, queries: &[Vec<f32>]) {
        assert!(set.base_len() >= QUANT_MIN, "the quantised pass must run");
        for (n, q) in queries.iter().enumerate() {
            for f in [Filter::memories(), Filter { include_laps: true, after_id: 1000, ..Filter::memories() }] {
                let exact = brute(set, q, &f);
                for k in [1, 10, 100] {
                    let got = top_k(set, q, k, &f);
                    assert_eq!(got, exact[..k.min(exact.len())].to_vec(), "query {n}, k {k}");
                }
                // A threshold exactly at a row's score (a tie at the threshold must pass).
                for rank in [0, 9, 99, 999] {
                    let t = exact[rank].score;
                    let sw = sweep(set, q, &Filter { min_score: t, ..f });
                    let want: Vec<Scored> = exact.iter().copied().filter(|s| s.score >= t).collect();
                    assert_eq!(sw.above, want, "query {n}, threshold at rank {rank}");
                    assert_eq!(sw.best, exact.first().copied());
                    assert_eq!(sw.eligible as usize, exact.len());
                }
            }
        }
        // Every query in one pass, each at its own threshold, answers as each alone.
        for f in [Filter::memories(), Filter { include_laps: true, after_id: 1000, ..Filter::memories() }] {
            let exacts: Vec<Vec<Scored>> = queries.iter().map(|q| brute(set, q, &f)).collect();
            let ts: Vec<f32> = exacts.iter().enumerate().map(|(n, e)| e[[0, 9, 99, 999][n % 4]].score).collect();
            let qs: Vec<(&[f32], f32)> = queries.iter().zip(&ts).map(|(q, t)| (&q[..], *t)).collect();
            for (n, sw) in sweep_many(set, &qs, &f).iter().enumerate() {
                let want: Vec<Scored> = exacts[n].iter().copied().filter(|s| s.score >= ts[n]).collect();
                assert_eq!(sw.above, want, "query {n} of a shared sweep");
                assert_eq!((sw.best, sw.eligible as usize), (exacts[n].first().copied(), exacts[n].len()));
            }
        }
    }

    #[test]
    fn a_shared_sweep_answers_as_one_sweep_per_query() {
        let queries: Vec<Vec<f32>> =
            ["memory about 42", "memory number 7", "about 13 and 14"].iter().map(|q| HashEmbedder::vector(q)).collect();
        // Serial (small) and parallel scans, unfiltered, past a watermark, and by listed ids.
        for rows in [300, PARALLEL_MIN + 100] {
            let mut set = VectorSet::new();
            for i in 0..rows {
                let kind = if i % 50 == 7 { Kind::Lap } else { Kind::Memory };
                set.push(i as i64 + 1, kind, &HashEmbedder::vector(&format!("memory number {i} about {}", i % 97)));
            }
            set.tombstone(9);
            let listed: Vec<i64> = (1..rows as i64).filter(|i| i % 3 == 0).collect();
            for f in [
                Filter::memories(),
                Filter { after_id: 120, ..Filter::memories() },
                Filter { only_ids: Some(&listed), after_id: 30, ..Filter::memories() },
            ] {
                let ts = [0.1f32, 0.3, -1.0];
                let qs: Vec<(&[f32], f32)> = queries.iter().zip(ts).map(|(q, t)| (&q[..], t)).collect();
                let many = sweep_many(&set, &qs, &f);
                assert_eq!(many.len(), 3);
                for (n, got) in many.iter().enumerate() {
                    let alone = sweep(&set, &queries[n], &Filter { min_score: ts[n], ..f });
                    assert_eq!(got, &alone, "{rows} rows, query {n}");
                    assert!(!got.above.is_empty() || ts[n] > 0.0, "the -1 threshold keeps every row");
                }
            }
        }
    }

    #[test]
    fn quantised_scan_misses_nothing_on_random_vectors() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = rng(11);
        let vecs: Vec<Vec<f32>> = (0..40_000).map(|_| unit((0..crate::embed::DIM).map(|_| r()).collect())).collect();
        let mut set = mapped_set(tmp.path(), &vecs, 38_000);
        set.tombstone(5);
        set.tombstone(20_000);
        let queries: Vec<Vec<f32>> = (0..12)
            .map(|i| if i % 3 == 0 { vecs[i * 1000].clone() } else { unit((0..crate::embed::DIM).map(|_| r()).collect()) })
            .collect();
        check_no_miss(&set, &queries);
    }

    #[test]
    fn quantised_scan_misses_nothing_on_clustered_and_tied_vectors() {
        let tmp = tempfile::tempdir().unwrap();
        let mut r = rng(29);
        let centres: Vec<Vec<f32>> = (0..8).map(|_| unit((0..crate::embed::DIM).map(|_| r()).collect())).collect();
        let mut vecs = Vec::new();
        for i in 0..36_000 {
            let c = &centres[i % 8];
            // Tight clusters (scores within a few hundredths of each other), with exact
            // duplicates every 97 rows: many ties at every threshold.
            if i % 97 == 0 {
                vecs.push(c.clone());
            } else {
                vecs.push(unit(c.iter().map(|x| x + 0.02 * r()).collect()));
            }
        }
        let set = mapped_set(tmp.path(), &vecs, 36_000);
        let mut queries: Vec<Vec<f32>> = centres.iter().take(4).cloned().collect();
        queries.push(unit(centres[0].iter().zip(&centres[1]).map(|(a, b)| a + b).collect()));
        queries.push(vecs[12_345].clone());
        check_no_miss(&set, &queries);
    }
}
