//! Vector indexes: an in-memory copy of the stored vectors, scored exactly, plus an optional
//! HNSW graph that proposes candidates for large stores.
//!
//! [`VectorSet`] mirrors the `embedding` column in id order and catches up incrementally
//! (`id > last seen`), which is how a long-lived process sees memories other processes commit
//! without a restart. [`exact`] scores a set with SIMD cosine; [`hnsw::HnswIndex`] is the
//! approximate candidate generator whose results are always rescored exactly. Forgotten rows
//! are not removed from these structures eagerly: the engine drops them when it fetches hits
//! and records them in [`VectorSet::tombstone`].

pub mod exact;
pub mod hnsw;

use std::collections::HashSet;

use crate::embed::DIM;
use crate::memory::Kind;
use crate::storage::Store;
use crate::Result;

/// A candidate: a row id and its exact cosine score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scored {
    pub id: i64,
    pub score: f32,
}

/// The stored vectors of one data root, in id order, flat in memory.
#[derive(Debug, Default)]
pub struct VectorSet {
    ids: Vec<i64>,
    kinds: Vec<Kind>,
    data: Vec<f32>,
    /// Ids known to be forgotten; skipped by every scan.
    removed: HashSet<i64>,
    /// Rows stored without a vector yet (agent-driven ledger laps, embedded later by a
    /// background `slm embed-pending`); recall scores them from the store instead.
    pending: std::collections::BTreeSet<i64>,
    /// Largest id loaded so far.
    last_id: i64,
}

impl VectorSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads every row stored since the last refresh; returns how many arrived.
    pub fn refresh(&mut self, store: &Store) -> Result<usize> {
        let before = self.ids.len();
        let (ids, kinds, data, pending) = (&mut self.ids, &mut self.kinds, &mut self.data, &mut self.pending);
        let mut last = self.last_id;
        store.vectors_after(self.last_id, None, &mut |id, kind, blob| {
            last = id;
            if blob.is_empty() {
                pending.insert(id);
                return Ok(());
            }
            crate::spaces::extend_from_blob(data, blob)?;
            ids.push(id);
            kinds.push(kind);
            Ok(())
        })?;
        self.last_id = last;
        Ok(self.ids.len() - before)
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

    /// The largest id loaded.
    pub fn last_id(&self) -> i64 {
        self.last_id
    }

    /// Marks an id as forgotten.
    pub fn tombstone(&mut self, id: i64) {
        self.removed.insert(id);
    }

    /// True when `id` is known to be forgotten.
    pub fn is_removed(&self, id: i64) -> bool {
        self.removed.contains(&id)
    }

    /// The id, kind and vector at a position.
    pub fn get(&self, pos: usize) -> (i64, Kind, &[f32]) {
        (self.ids[pos], self.kinds[pos], &self.data[pos * DIM..(pos + 1) * DIM])
    }

    /// The position of the first row with an id above `id` (`len()` when there is none).
    pub fn first_after(&self, id: i64) -> usize {
        self.ids.partition_point(|&x| x <= id)
    }

    /// Rows seen without a vector (not yet embedded), ascending.
    pub fn pending(&self) -> impl Iterator<Item = i64> + '_ {
        self.pending.iter().copied().filter(|id| !self.removed.contains(id))
    }

    /// The position of `id`, if held.
    pub fn position(&self, id: i64) -> Option<usize> {
        self.ids.binary_search(&id).ok()
    }

    /// Number of rows of a kind that are not tombstoned.
    pub fn count_kind(&self, kind: Kind) -> usize {
        self.kinds
            .iter()
            .zip(&self.ids)
            .filter(|(k, id)| **k == kind && !self.removed.contains(id))
            .count()
    }
}
