//! Vector search: the one place that decides which rows a query may see and scores them.
//!
//! [`VectorSet`] holds the stored vectors in id order in two parts: a memory-mapped base
//! ([`derived::Segment`], the data root's derived files, shared by every process through the
//! page cache) and an in-memory tail of rows newer than the files, one contiguous `n × DIM`
//! matrix ([`VectorSet::tail_matrix`]). Both catch up incrementally (`id > last seen`): that is
//! how a long-lived process sees what other processes commit without a restart. The set is
//! fed by the engine, so this module knows nothing of the store. [`Filter::admits`] is the
//! single eligibility rule (kind, forgotten, newer than a watermark); [`exact`] scores with
//! SIMD cosine, reading the base through its int8 copy first ([`quant`], with a proven
//! bound, so nothing is missed); [`hnsw::HnswIndex`] proposes candidates for large stores in
//! long-lived processes and is always rescored exactly; [`Searcher`] owns all of it and
//! offers the two searches the crate needs:
//! [`Searcher::search`] (top k, for recall) and [`Searcher::sweep`] (everything above a
//! threshold plus the best and a count, for loop gates). Forgotten rows are not removed
//! eagerly: the engine notices them when it fetches hits and records them with
//! [`Searcher::tombstone`].

pub mod derived;
pub mod exact;
pub mod graph_file;
pub mod hnsw;
pub mod links;
pub mod quant;
mod searcher;

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use ndarray::ArrayView2;

pub use searcher::{IndexState, Searcher, HNSW_EF, HNSW_MIN};

use crate::embed::DIM;
use crate::memory::Kind;
use crate::Result;

/// A candidate: a row id and its exact cosine score.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
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
        let (id, kind) = (set.id_at(pos), set.kind_at(pos));
        // Most sets have nothing forgotten: skip the hash lookup then (it is the scan's cost).
        id > self.after_id && (self.include_laps || kind == Kind::Memory) && (set.removed.is_empty() || !set.removed.contains(&id))
    }
}

/// The stored vectors of one data root, in id order: the mapped base, then the tail.
#[derive(Debug, Default)]
pub struct VectorSet {
    /// Rows `0..base_len()`: the derived files, when this data root has them.
    base: Option<Arc<derived::Segment>>,
    /// The tail: rows newer than the base, flat in memory.
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

    /// A set whose first rows are the mapped `base`; its pending and forgotten rows are
    /// taken over, and the tail starts after its `upto`.
    pub fn with_base(base: Arc<derived::Segment>) -> Self {
        VectorSet {
            last_id: base.head.upto,
            pending: base.pending.iter().copied().collect(),
            removed: base.forgotten.iter().copied().collect(),
            base: Some(base),
            ..Self::default()
        }
    }

    /// The mapped base, if any.
    pub fn base(&self) -> Option<&Arc<derived::Segment>> {
        self.base.as_ref()
    }

    /// Rows in the mapped base.
    #[inline]
    pub fn base_len(&self) -> usize {
        self.base.as_ref().map_or(0, |b| b.len())
    }

    /// The tail's rows `(id, kind, vector)` with ids above `after`: what moves into the
    /// derived files on the next append.
    pub fn tail_after(&self, after: i64) -> impl Iterator<Item = (i64, Kind, &[f32])> {
        let from = self.ids.partition_point(|&x| x <= after);
        (from..self.ids.len()).map(move |i| (self.ids[i], self.kinds[i], &self.data[i * DIM..(i + 1) * DIM]))
    }

    /// Adds one stored row (ids must keep increasing); an empty `blob` marks a row stored
    /// without a vector yet. The blob is the store's little-endian `f32` encoding.
    pub fn append_blob(&mut self, id: i64, kind: Kind, blob: &[u8]) -> Result<()> {
        if id <= self.last_id {
            return Ok(());
        }
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

    /// Records a row stored without a vector (ids must keep increasing).
    pub fn note_pending(&mut self, id: i64) {
        self.pending.insert(id);
        self.last_id = self.last_id.max(id);
    }

    /// Raises the largest id seen (rows up to it are accounted for).
    pub fn raise_last_id(&mut self, id: i64) {
        self.last_id = self.last_id.max(id);
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
        self.base_len() + self.ids.len()
    }

    /// True when no rows are held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The largest id seen.
    pub fn last_id(&self) -> i64 {
        self.last_id
    }

    /// Marks an id as forgotten.
    pub fn tombstone(&mut self, id: i64) {
        self.removed.insert(id);
    }

    /// Ids known to be forgotten.
    pub fn removed(&self) -> &HashSet<i64> {
        &self.removed
    }

    /// True when some row is known to be forgotten.
    #[inline]
    pub fn has_removed(&self) -> bool {
        !self.removed.is_empty()
    }

    /// True when `id` is known to be forgotten.
    #[inline]
    pub fn is_removed(&self, id: i64) -> bool {
        !self.removed.is_empty() && self.removed.contains(&id)
    }

    /// The id at a position.
    #[inline]
    pub fn id_at(&self, pos: usize) -> i64 {
        match &self.base {
            Some(b) if pos < b.len() => b.ids()[pos],
            _ => self.ids[pos - self.base_len()],
        }
    }

    /// The kind at a position.
    #[inline]
    pub fn kind_at(&self, pos: usize) -> Kind {
        match &self.base {
            Some(b) if pos < b.len() => b.kind(pos),
            _ => self.kinds[pos - self.base_len()],
        }
    }

    /// The vector at a position.
    #[inline]
    pub fn vector(&self, pos: usize) -> &[f32] {
        match &self.base {
            Some(b) if pos < b.len() => b.vector(pos),
            _ => {
                let p = pos - self.base_len();
                &self.data[p * DIM..(p + 1) * DIM]
            }
        }
    }

    /// The tail's vectors as one matrix view (no copy): rows `base_len()..len()`.
    pub fn tail_matrix(&self) -> ArrayView2<'_, f32> {
        ArrayView2::from_shape((self.ids.len(), DIM), &self.data).expect("the data is always a whole number of DIM-wide rows, one per id")
    }

    /// The position of the first row with an id above `id` (`len()` when there is none).
    pub fn first_after(&self, id: i64) -> usize {
        let nb = self.base_len();
        if let Some(b) = &self.base {
            let p = b.ids().partition_point(|&x| x <= id);
            if p < nb {
                return p;
            }
        }
        nb + self.ids.partition_point(|&x| x <= id)
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
        if let Some(b) = &self.base {
            if let Ok(p) = b.ids().binary_search(&id) {
                return Some(p);
            }
        }
        self.ids.binary_search(&id).ok().map(|p| p + self.base_len())
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
