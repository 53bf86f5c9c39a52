//! The approximate index: an HNSW graph (`hnsw_rs`) over memory vectors.
//!
//! It only proposes candidates; the engine rescores every candidate exactly before reporting
//! or thresholding it. Building one at 100k vectors takes minutes on 2 cores, so it is only
//! ever built by a long-lived process in a background thread (see
//! [`super::Searcher::with_graph_from`]); until it is ready, and in every one-shot CLI call,
//! recall uses the exact scan. hnsw_rs only builds and extends: the result is saved by
//! [`super::graph_file`], and searches go through its neighbour lists mapped from
//! `graph.links` ([`super::links`]), not through this structure. [`HnswIndex::candidates`]
//! (hnsw_rs's own search) remains for benches and tests.

use hnsw_rs::anndists::dist::Distance;
use hnsw_rs::api::AnnT;
use hnsw_rs::prelude::Hnsw;

/// Cosine distance (1 - cos, clamped at 0) computed by simsimd. `hnsw_rs`'s own `DistDot`
/// and `DistCosine` assert on rounding edge cases; a background thread must never panic.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimdCosine;

impl Distance<f32> for SimdCosine {
    fn eval(&self, a: &[f32], b: &[f32]) -> f32 {
        (1.0 - crate::spaces::cosine(a, b)).max(0.0)
    }
}

/// Neighbours per node (the graph's M).
pub const M: usize = 16;
/// Candidate list size while building.
pub const EF_CONSTRUCTION: usize = 200;
/// Largest layer count.
const MAX_LAYER: usize = 16;

/// An HNSW graph whose data ids are row ids.
pub struct HnswIndex {
    graph: Hnsw<'static, f32, SimdCosine>,
}

impl HnswIndex {
    /// Builds a graph from `(id, vector)` pairs using every core.
    pub fn build(items: &[(i64, &[f32])]) -> Self {
        let index = Self::with_capacity(items.len());
        index.insert(items);
        index
    }

    /// An empty graph sized for about `n` vectors (the size only shapes its layers).
    pub fn with_capacity(n: usize) -> Self {
        HnswIndex { graph: Hnsw::new(M, n.max(1024), MAX_LAYER, EF_CONSTRUCTION, SimdCosine) }
    }

    /// A graph reloaded from a dump ([`super::graph_file`]).
    pub fn from_graph(graph: Hnsw<'static, f32, SimdCosine>) -> Self {
        HnswIndex { graph }
    }

    /// Adds `(id, vector)` pairs to the graph (searches may run meanwhile).
    pub fn insert(&self, items: &[(i64, &[f32])]) {
        let batch: Vec<(&[f32], usize)> = items.iter().map(|(id, v)| (*v, *id as usize)).collect();
        self.graph.parallel_insert_slice(&batch);
    }

    /// Writes the graph and its vectors as `<basename>.hnsw.graph` and `.hnsw.data` in `dir`;
    /// returns the basename used (hnsw_rs picks another one rather than overwrite a dump a
    /// reloaded graph came from).
    pub fn dump(&self, dir: &std::path::Path, basename: &str) -> Result<String, String> {
        self.graph.file_dump(dir, basename).map_err(|e| e.to_string())
    }

    /// Every point's row id and its neighbours' row ids, layer 0 first (a point of level L
    /// has L + 1 lists), for [`super::links::write`].
    pub fn neighbour_lists(&self) -> Vec<(i64, Vec<Vec<i64>>)> {
        let points = self.graph.get_point_indexation();
        let top = points.get_max_level_observed() as usize;
        let mut out = Vec::with_capacity(self.len());
        for layer in 0..=top {
            for p in points.get_layer_iterator(layer) {
                let lists = p.get_neighborhood_id().into_iter().take(layer + 1);
                out.push((p.get_origin_id() as i64, lists.map(|ns| ns.iter().map(|n| n.d_id as i64).collect()).collect()));
            }
        }
        out
    }

    /// Number of vectors in the graph.
    pub fn len(&self) -> usize {
        self.graph.get_nb_point()
    }

    /// True when the graph is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Up to `k` candidate ids near `q`, searching with list size `ef` (≥ k).
    pub fn candidates(&self, q: &[f32], k: usize, ef: usize) -> Vec<i64> {
        self.graph.search(q, k, ef.max(k)).into_iter().map(|n| n.d_id as i64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;

    #[test]
    fn finds_the_exact_neighbour_in_a_small_graph() {
        let texts: Vec<String> = (0..500).map(|i| format!("note {i} topic {}", i % 17)).collect();
        let vecs: Vec<Vec<f32>> = texts.iter().map(|t| HashEmbedder::vector(t)).collect();
        let items: Vec<(i64, &[f32])> = vecs.iter().enumerate().map(|(i, v)| (i as i64 + 1, v.as_slice())).collect();
        let index = HnswIndex::build(&items);
        assert_eq!(index.len(), 500);
        let got = index.candidates(&vecs[123], 5, 64);
        assert_eq!(got[0], 124, "a stored vector is its own nearest neighbour");
    }
}
