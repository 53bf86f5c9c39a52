//! Vector search: the one place that decides which rows a query may see and scores them.
//!
//! [`VectorSet`] is an in-memory copy of the stored vectors in id order, one contiguous
//! `n × DIM` matrix ([`VectorSet::matrix`]) that catches up incrementally (`id > last seen`):
//! that is how a long-lived process sees what other processes commit without a restart. It
//! is fed by the engine, so this module knows nothing of the store. [`Filter::admits`] is the
//! single eligibility rule (kind, forgotten, newer than a watermark); [`exact`] scores with
//! SIMD cosine; [`hnsw::HnswIndex`] proposes candidates for large stores and is always
//! rescored exactly; [`Searcher`] owns all of it and offers the two searches the crate needs:
//! [`Searcher::search`] (top k, for recall) and [`Searcher::sweep`] (everything above a
//! threshold plus the best and a count, for loop gates). Forgotten rows are not removed
//! eagerly: the engine notices them when it fetches hits and records them with
//! [`Searcher::tombstone`].

pub mod exact;
pub mod hnsw;
mod searcher;

use std::collections::{BTreeSet, HashSet};

use ndarray::ArrayView2;

pub use searcher::{IndexState, Searcher, HNSW_EF, HNSW_MIN};

use crate::embed::DIM;
use crate::memory::Kind;
use crate::Result;

/// A candidate: a row id and its exact cosine score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub id: i64,
    pub score: f32,
}

/// Which rows a search may return. Every search path asks [`Filter::admits`], so "eligible"
/// means the same thing for recall, the loop gate and the HNSW rescoring.
#[derive(Debug, Clone, Copy)]
pub struct Filter<'a> {
    /// Include ledger laps as well as memories (gates never do).
    pub include_laps: bool,
    /// Only these ids (ascending), when set (a tag filter's result).
    pub only_ids: Option<&'a [i64]>,
    /// Only rows with an id above this (a gate's watermark; 0 = all).
    pub after_id: i64,
    /// Drop scores below this.
    pub min_score: f32,
}

impl Filter<'_> {
    /// Memories only, every id, no threshold.
    pub fn memories() -> Filter<'static> {
        Filter { include_laps: false, only_ids: None, after_id: 0, min_score: -1.0 }
    }

    /// True when the row at `pos` of `set` may be returned (its score aside).
    #[inline]
    pub fn admits(&self, set: &VectorSet, pos: usize) -> bool {
        let (id, kind) = (set.ids[pos], set.kinds[pos]);
        // Most sets have nothing forgotten: skip the hash lookup then (it is the scan's cost).
        id > self.after_id
            && (self.include_laps || kind == Kind::Memory)
            && (set.removed.is_empty() || !set.removed.contains(&id))
    }
}

/// The stored vectors of one data root, in id order, flat in memory.
#[derive(Debug, Default)]
pub struct VectorSet {
    ids: Vec<i64>,
    kinds: Vec<Kind>,
    /// Row-major `len() × DIM`.
    data: Vec<f32>,
    /// Ids known to be forgotten; skipped by every scan.
    removed: HashSet<i64>,
    /// Rows stored without a vector yet (agent-driven ledger laps, embedded later by a
    /// background `slm embed-pending`); the engine scores them from the store instead.
    pending: BTreeSet<i64>,
    /// Largest id seen so far (with or without a vector).
    last_id: i64,
}

impl VectorSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one stored row (ids must keep increasing); an empty `blob` marks a row stored
    /// without a vector yet. The blob is the store's little-endian `f32` encoding.
    pub fn append_blob(&mut self, id: i64, kind: Kind, blob: &[u8]) -> Result<()> {
        if blob.is_empty() {
            self.pending.insert(id);
        } else {
            crate::spaces::extend_from_blob(&mut self.data, blob)?;
            self.ids.push(id);
            self.kinds.push(kind);
        }
        self.last_id = self.last_id.max(id);
        Ok(())
    }

    /// Adds one row directly (ids must keep increasing).
    pub fn push(&mut self, id: i64, kind: Kind, v: &[f32]) {
        debug_assert!(id > self.last_id && v.len() == DIM);
        self.ids.push(id);
        self.kinds.push(kind);
        self.data.extend_from_slice(v);
        self.last_id = id;
    }

    /// Number of rows held (including tombstoned ones).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no rows are held.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The largest id seen.
    pub fn last_id(&self) -> i64 {
        self.last_id
    }

    /// Marks an id as forgotten.
    pub fn tombstone(&mut self, id: i64) {
        self.removed.insert(id);
    }

    /// The id at a position.
    #[inline]
    pub fn id_at(&self, pos: usize) -> i64 {
        self.ids[pos]
    }

    /// The vector at a position.
    #[inline]
    pub fn vector(&self, pos: usize) -> &[f32] {
        &self.data[pos * DIM..(pos + 1) * DIM]
    }

    /// Every vector as one `len() × DIM` matrix view (no copy).
    pub fn matrix(&self) -> ArrayView2<'_, f32> {
        ArrayView2::from_shape((self.ids.len(), DIM), &self.data)
            .expect("the data is always a whole number of DIM-wide rows, one per id")
    }

    /// The position of the first row with an id above `id` (`len()` when there is none).
    pub fn first_after(&self, id: i64) -> usize {
        self.ids.partition_point(|&x| x <= id)
    }

    /// Rows seen without a vector (not yet embedded) that `filter` admits by id, ascending.
    pub fn pending(&self, filter: &Filter<'_>) -> Vec<i64> {
        self.pending
            .range(filter.after_id.saturating_add(1)..)
            .copied()
            .filter(|id| !self.removed.contains(id))
            .filter(|id| filter.only_ids.is_none_or(|only| only.binary_search(id).is_ok()))
            .collect()
    }

    /// The position of `id`, if held.
    pub fn position(&self, id: i64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// Positions `start..` (or, with `only_ids`, the positions of those ids from `start`) that
    /// `filter` admits, in id order.
    pub(crate) fn admitted<'s>(&'s self, filter: &'s Filter<'_>) -> Box<dyn Iterator<Item = usize> + 's> {
        let start = self.first_after(filter.after_id);
        match filter.only_ids {
            Some(ids) => {
                let from = ids.partition_point(|&x| x <= filter.after_id);
                Box::new(ids[from..].iter().filter_map(|id| self.position(*id)).filter(|&p| filter.admits(self, p)))
            }
            None => Box::new((start..self.len()).filter(|&p| filter.admits(self, p))),
        }
    }

    /// Number of rows `filter` admits.
    pub fn count(&self, filter: &Filter<'_>) -> usize {
        self.admitted(filter).count()
    }
}
