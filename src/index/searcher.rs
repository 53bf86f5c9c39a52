//! [`Searcher`]: the one search seam of the crate. It owns the [`VectorSet`], the optional
//! HNSW graph and the thread that builds it, and answers recall's top-k and the gate's sweep.
//!
//! The engine feeds it rows ([`Searcher::catch_up`]) and tells it what was forgotten; it never
//! reads the store itself. One-shot processes never build a graph (they would pay minutes
//! and throw it away); a long-lived process opts in with [`Searcher::with_graph_from`] and,
//! once the store is large enough, reloads the graph saved in the mapped base's generation
//! folder ([`super::graph_file`]) or builds one, on a background thread, scanning exactly
//! until it is ready. Rows newer than the graph are scanned exactly; once that tail grows,
//! it is inserted into the graph in the background and the graph saved again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::Serialize;

use super::exact::{self, Sweep};
use super::graph_file::GraphHome;
use super::hnsw::HnswIndex;
use super::derived::Segment;
use super::{Filter, Scored, VectorSet};
use crate::embed::DIM;
use crate::memory::Kind;
use crate::Result;

/// Below this many memories recall always scans exactly; at and above it a long-lived process
/// builds an HNSW graph in the background. Measured here (benches/recall.rs): the parallel
/// exact scan costs ≈ 0.03 ms per 1k vectors, a graph search with rescoring ≈ 1.7 ms at 100k,
/// so they cross near 57k (README, "How recall is computed").
pub const HNSW_MIN: usize = 60_000;

/// HNSW search list size; with M = 16 this gave recall@10 ≥ 0.99 at 100k in `benches/`.
pub const HNSW_EF: usize = 96;

/// Rows newer than the graph that trigger a background extension (and a tenth of the graph).
/// A graph saved part-built is different: the next process completes it whatever its tail.
const REBUILD_TAIL: usize = 5_000;

/// Most vectors inserted between two looks at the clock while a graph is built (an eighth
/// of the build when that is less, but at least 500).
const BUILD_CHUNK: usize = 20_000;

/// How often a graph being built is saved, so that a process which exits before the build
/// ends (an MCP server lives as long as its client's session; a 1M-row build takes tens of
/// minutes at low priority) leaves its progress to the next one, which resumes from it.
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(180);

/// [`SAVE_EVERY`], or `SLM_GRAPH_SAVE_S` seconds (for tests and tuning; 0 saves after every
/// chunk).
fn save_every() -> std::time::Duration {
    std::env::var("SLM_GRAPH_SAVE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(SAVE_EVERY, std::time::Duration::from_secs)
}

struct Graph {
    index: Arc<HnswIndex>,
    /// Largest row id present when the graph was built or last extended; newer rows are
    /// scanned exactly.
    built_upto: i64,
    /// Reloaded from the generation folder (and perhaps completed here, when an earlier
    /// process saved it part-built) rather than built from nothing by this process.
    loaded: bool,
}

/// What `status` reports about search in this process.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct IndexState {
    /// `exact` or `hnsw`: what the next unfiltered recall in this process would use.
    pub mode: &'static str,
    pub hnsw_min_memories: usize,
    pub hnsw_vectors: usize,
    pub hnsw_building: bool,
    /// The graph in use was reloaded from its saved file, not built from nothing by this
    /// process (which may have completed a graph an earlier process saved part-built).
    pub hnsw_loaded: bool,
    /// The largest row id the graph in use covers (0: no graph).
    pub hnsw_upto: i64,
}

/// The vectors of one data root and the structures that search them.
pub struct Searcher {
    set: RwLock<VectorSet>,
    graph: Arc<RwLock<Option<Arc<Graph>>>>,
    building: Arc<AtomicBool>,
    /// Memories needed before a background graph build starts; `None` = never.
    graph_min: Option<usize>,
    /// Where the graph of the mapped base's generation is saved (none without a base).
    graph_home: RwLock<Option<GraphHome>>,
}

impl Default for Searcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Searcher {
    /// An empty searcher that always scans exactly.
    pub fn new() -> Self {
        Searcher {
            set: RwLock::new(VectorSet::new()),
            graph: Arc::new(RwLock::new(None)),
            building: Arc::new(AtomicBool::new(false)),
            graph_min: None,
            graph_home: RwLock::new(None),
        }
    }

    /// Lets this (long-lived) process build an HNSW graph in the background once the set
    /// holds `min_memories` memories.
    pub fn with_graph_from(mut self, min_memories: usize) -> Self {
        self.graph_min = Some(min_memories.max(1));
        self
    }

    /// Catches up with the store: `load(after, visit)` must visit every stored row with an id
    /// above `after`, in id order, as `(id, kind, vector bytes)` (empty bytes = no vector yet).
    /// Returns how many rows arrived.
    pub fn catch_up(
        &self,
        load: impl FnOnce(i64, &mut dyn FnMut(i64, Kind, &[u8]) -> Result<()>) -> Result<()>,
    ) -> Result<usize> {
        let mut set = self.set.write();
        let before = set.len();
        let after = set.last_id();
        load(after, &mut |id, kind, blob| set.append_blob(id, kind, blob))?;
        Ok(set.len() - before)
    }

    /// Makes `base` (the mapped derived files) the first rows of the set. Rows this process
    /// already holds beyond the base's `upto` stay in the tail; everything known to be
    /// forgotten stays forgotten.
    pub fn set_base(&self, base: Arc<Segment>) {
        *self.graph_home.write() = Some(GraphHome {
            dir: base.dir.clone(),
            store_id: String::from_utf8_lossy(&base.head.store_id).into_owned(),
            generation: base.generation,
        });
        let mut set = self.set.write();
        let upto = base.head.upto;
        let mut next = VectorSet::with_base(base);
        for (id, kind, v) in set.tail_after(upto) {
            next.push(id, kind, v);
        }
        for id in set.pending(&Filter { include_laps: true, only_ids: None, after_id: upto, min_score: -1.0 }) {
            next.note_pending(id);
        }
        set.removed().iter().for_each(|id| next.tombstone(*id));
        next.raise_last_id(set.last_id());
        *set = next;
    }

    /// Compares the exact search this process uses ([`exact::top_k`], two-stage over the
    /// mapped base) with a brute-force `f32` scan for `queries` (each `k` deep); returns the
    /// queries whose results differ in any id or score.
    pub fn verify(&self, queries: &[Vec<f32>], k: usize) -> usize {
        let set = self.set.read();
        let f = Filter::memories();
        queries.iter().filter(|q| exact::top_k(&set, q, k, &f) != exact::brute_top_k(&set, q, k, &f)).count()
    }

    /// A stored vector (at `pos % len`), for building test queries.
    pub fn sample(&self, pos: usize) -> Option<Vec<f32>> {
        let set = self.set.read();
        (!set.is_empty()).then(|| set.vector(pos % set.len()).to_vec())
    }

    /// The mapped base's generation, `upto` and row count, if the set has one.
    pub fn base_info(&self) -> Option<(u64, i64, usize)> {
        self.set.read().base().map(|b| (b.generation, b.head.upto, b.len()))
    }

    /// Rows held in memory (newer than the mapped base).
    pub fn tail_len(&self) -> usize {
        let set = self.set.read();
        set.len() - set.base_len()
    }

    /// Records that rows were forgotten, so no search returns them.
    pub fn tombstone(&self, ids: &[i64]) {
        let mut set = self.set.write();
        ids.iter().for_each(|id| set.tombstone(*id));
    }

    /// The largest row id seen.
    pub fn last_id(&self) -> i64 {
        self.set.read().last_id()
    }

    /// Rows seen without a vector that `filter` admits by id (their vectors are not here).
    pub fn pending(&self, filter: &Filter<'_>) -> Vec<i64> {
        self.set.read().pending(filter)
    }

    /// The best `k` rows for `q` under `filter`, exact scores, best first. `extra` holds rows
    /// whose vectors are not in the set (stored without one); they are ranked with the rest.
    /// Uses the graph, when this process has one, for unfiltered memory searches.
    pub fn search(&self, q: &[f32], k: usize, filter: &Filter<'_>, extra: &[(i64, Vec<f32>)]) -> Vec<Scored> {
        let set = self.set.read();
        let graph = if filter.only_ids.is_none() && !filter.include_laps && filter.after_id == 0 {
            self.graph_for(&set)
        } else {
            None
        };
        let mut hits = match graph {
            Some(g) => rescore(&set, &g, q, k, filter),
            None => exact::top_k(&set, q, k, filter),
        };
        let before = hits.len();
        hits.extend(extra.iter().map(|(id, v)| Scored { id: *id, score: crate::spaces::cosine(q, v) }));
        if hits.len() == before {
            return hits;
        }
        hits.retain(|s| s.score >= filter.min_score);
        exact::truncate_best(hits, k)
    }

    /// Every row `filter` admits, exactly: all at or above `filter.min_score` best first, the
    /// best overall and the count (see [`exact::sweep`]). Never approximate.
    pub fn sweep(&self, q: &[f32], filter: &Filter<'_>) -> Sweep {
        exact::sweep(&self.set.read(), q, filter)
    }

    /// Number of rows `filter` admits.
    pub fn count(&self, filter: &Filter<'_>) -> usize {
        self.set.read().count(filter)
    }

    /// What the next unfiltered search would use.
    pub fn state(&self) -> IndexState {
        let graph = self.graph.read().clone();
        IndexState {
            mode: if graph.is_some() { "hnsw" } else { "exact" },
            hnsw_min_memories: self.graph_min.unwrap_or(HNSW_MIN),
            hnsw_vectors: graph.as_ref().map_or(0, |g| g.index.len()),
            hnsw_building: self.building.load(Ordering::Acquire),
            hnsw_loaded: graph.as_ref().is_some_and(|g| g.loaded),
            hnsw_upto: graph.as_ref().map_or(0, |g| g.built_upto),
        }
    }

    /// The graph to use, if this process keeps one. Starts the background work when due:
    /// the first time the set is large enough, reload the generation's saved graph or build
    /// one; once the exactly-scanned tail has grown, insert it into the graph. Either way
    /// the result is saved for the next process.
    fn graph_for(&self, set: &VectorSet) -> Option<Arc<Graph>> {
        let min = self.graph_min?;
        let graph = self.graph.read().clone();
        let due = match &graph {
            Some(g) => set.len() - set.first_after(g.built_upto) >= REBUILD_TAIL.max(g.index.len() / 10),
            None => set.len() >= min && set.count(&Filter::memories()) >= min,
        };
        if due && !self.building.swap(true, Ordering::AcqRel) {
            self.spawn(set, graph.clone());
        }
        graph
    }

    /// Starts the background thread that reloads, builds or extends the graph.
    fn spawn(&self, set: &VectorSet, graph: Option<Arc<Graph>>) {
        let after = graph.as_ref().map_or(0, |g| g.built_upto);
        let f = Filter { after_id: after, ..Filter::memories() };
        let rows = GraphRows::of(set, &f);
        let upto = set.last_id();
        let home = self.graph_home.read().clone();
        let slot = Arc::clone(&self.graph);
        let building = Arc::clone(&self.building);
        let spawned = std::thread::Builder::new().name("slm-hnsw-build".into()).spawn(move || {
            Priority::Background.apply();
            let items = rows.items();
            let publish = |g: Graph| *slot.write() = Some(Arc::new(g));
            let grown = match graph {
                Some(g) => {
                    // Into the live graph, which searches read meanwhile under its node
                    // locks: at normal priority, so a niced thread never holds one long.
                    in_own_pool(Priority::Foreground, || g.index.insert(&items));
                    tracing::info!(added = items.len(), vectors = g.index.len(), "HNSW graph extended");
                    Graph { index: Arc::clone(&g.index), built_upto: upto, loaded: g.loaded }
                }
                None => {
                    let (index, from, resumed) = match home.as_ref().map(GraphHome::load) {
                        Some(Ok(Some((index, meta)))) => {
                            if !meta.part {
                                tracing::info!(vectors = index.len(), upto = meta.upto, "HNSW graph loaded from {}", home.as_ref().map_or(String::new(), |h| h.dir.display().to_string()));
                                // Rows after its coverage are scanned exactly until the tail
                                // is large enough to be inserted into the graph in use.
                                publish(Graph { index: Arc::new(index), built_upto: meta.upto, loaded: true });
                                building.store(false, Ordering::Release);
                                return;
                            }
                            // A build an earlier process saved before it exited: go on
                            // from it, and search exactly until it is complete.
                            let from = items.partition_point(|(id, _)| *id <= meta.upto);
                            tracing::info!(vectors = index.len(), upto = meta.upto, rest = items.len() - from, "resuming the saved HNSW graph's build");
                            (index, from, true)
                        }
                        other => {
                            if let Some(Err(e)) = other {
                                tracing::warn!("the saved HNSW graph is unusable, rebuilding it: {e}");
                            }
                            (HnswIndex::with_capacity(items.len()), 0, false)
                        }
                    };
                    let save = |index: &HnswIndex, upto: i64| save_logged(home.as_ref(), index, upto, true);
                    let rest = &items[from..];
                    let chunk = (rest.len() / 8).clamp(500, BUILD_CHUNK);
                    in_own_pool(Priority::Background, || grow(&index, rest, chunk, save_every(), save));
                    tracing::info!(vectors = index.len(), "HNSW graph built");
                    Graph { index: Arc::new(index), built_upto: upto, loaded: resumed }
                }
            };
            let index = Arc::clone(&grown.index);
            publish(grown);
            save_logged(home.as_ref(), &index, upto, false);
            building.store(false, Ordering::Release);
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the HNSW build thread: {e}");
            self.building.store(false, Ordering::Release);
        }
    }
}

impl Searcher {
    /// Builds a graph of every memory now, saves it in the mapped base's generation folder
    /// and uses it (`slm index rebuild`; blocking). `None` when the set has no base.
    pub fn rebuild_graph(&self) -> Option<std::result::Result<super::graph_file::GraphMeta, String>> {
        let home = self.graph_home.read().clone()?;
        let (rows, upto) = {
            let set = self.set.read();
            (GraphRows::of(&set, &Filter::memories()), set.last_id())
        };
        let items = rows.items();
        let index = Arc::new(in_own_pool(Priority::Foreground, || HnswIndex::build(&items)));
        let saved = home.save(&index, upto, false);
        *self.graph.write() = Some(Arc::new(Graph { index, built_upto: upto, loaded: false }));
        Some(saved)
    }
}

/// Saves `index` in `home`, if the set has one (`part`: a build still under way), and logs
/// how that went: a failed save only means the next process builds again.
fn save_logged(home: Option<&GraphHome>, index: &HnswIndex, upto: i64, part: bool) {
    let Some(h) = home else { return };
    match h.save(index, upto, part) {
        Ok(m) => tracing::info!(vectors = m.vectors, bytes = m.bytes, upto, part, "HNSW graph saved"),
        Err(e) => tracing::warn!("cannot save the HNSW graph: {e}"),
    }
}

/// The rows a graph build inserts, without a copy of the mapped base: the build reads those
/// vectors from the mapped file itself (the `Arc` keeps it mapped), and only rows held in
/// memory, past the base, are copied. A copy of every vector (1.5 GB at 1M rows) made the
/// search that started a build wait for it, and stayed in memory as long as the build ran.
struct GraphRows {
    ids: Vec<i64>,
    positions: Vec<usize>,
    base: Option<Arc<Segment>>,
    base_len: usize,
    tail: Vec<f32>,
}

impl GraphRows {
    fn of(set: &VectorSet, filter: &Filter<'_>) -> Self {
        let positions: Vec<usize> = set.admitted(filter).collect();
        let ids = positions.iter().map(|&p| set.id_at(p)).collect();
        let base_len = set.base_len();
        let mut tail = Vec::new();
        positions.iter().filter(|&&p| p >= base_len).for_each(|&p| tail.extend_from_slice(set.vector(p)));
        GraphRows { ids, positions, base: set.base().cloned(), base_len, tail }
    }

    /// `(id, vector)` of every row, in id order.
    fn items(&self) -> Vec<(i64, &[f32])> {
        let mut from_tail = self.tail.chunks_exact(DIM);
        self.ids
            .iter()
            .zip(&self.positions)
            .filter_map(|(id, &p)| match &self.base {
                Some(b) if p < self.base_len => Some((*id, b.vector(p))),
                _ => from_tail.next().map(|v| (*id, v)),
            })
            .collect()
    }
}

/// Inserts `items` (in id order) into a graph nobody searches yet, `size` at a time, and
/// after a chunk calls `save(index, largest id so far)` once `every` has passed since the
/// last save (never after the last chunk: the caller saves the finished graph). Every
/// memory up to that id is then in the graph, which is what a saved graph's `upto`
/// promises, so the next process can resume from it.
fn grow(
    index: &HnswIndex,
    items: &[(i64, &[f32])],
    size: usize,
    every: std::time::Duration,
    mut save: impl FnMut(&HnswIndex, i64),
) {
    let mut since = std::time::Instant::now();
    let chunks = items.chunks(size.max(1));
    let last = chunks.len();
    for (i, chunk) in chunks.enumerate() {
        index.insert(chunk);
        if i + 1 < last && since.elapsed() >= every {
            if let Some((id, _)) = chunk.last() {
                save(index, *id);
            }
            since = std::time::Instant::now();
        }
    }
}

/// How much CPU graph work may take from the searches around it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// `slm index rebuild` (the user waits for it), and extending the live graph.
    Foreground,
    /// A long-lived process's own build or load of a graph nobody searches yet: it runs at
    /// the lowest CPU priority (nice 19, these threads only), so the searches it serves
    /// meanwhile (exact, from the mapped files) take the cores first. On a 2-core machine a
    /// 1M build at normal priority made a restarted `slm mcp` answer its first recall seconds
    /// late.
    Background,
}

impl Priority {
    /// Sets the calling thread's priority (Linux: per thread). Best effort.
    fn apply(self) {
        #[cfg(target_os = "linux")]
        if self == Priority::Background {
            // SAFETY: plain system calls on the calling thread's own id.
            unsafe {
                let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                libc::setpriority(libc::PRIO_PROCESS, tid, 19);
            }
        }
    }
}

/// Runs graph work on a rayon pool of its own. hnsw_rs inserts on the current pool; on the
/// global one, a build (minutes at 100k) would queue every search's parallel scan behind it.
fn in_own_pool<R: Send>(priority: Priority, f: impl FnOnce() -> R + Send) -> R {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("slm-hnsw-{i}"))
        .start_handler(move |_| priority.apply())
        .build();
    match pool {
        Ok(pool) => pool.install(f),
        Err(_) => f(),
    }
}

/// Graph candidates plus every row newer than the graph, all rescored exactly.
fn rescore(set: &VectorSet, g: &Graph, q: &[f32], want: usize, filter: &Filter<'_>) -> Vec<Scored> {
    let k = want * 2 + 10;
    let tail = set.first_after(g.built_upto)..set.len();
    let tail_start = tail.start;
    // The graph may already hold rows of the tail (an extension in progress): the tail
    // scores those, once.
    let from_graph =
        g.index.candidates(q, k, HNSW_EF.max(k)).into_iter().filter_map(|id| set.position(id)).filter(move |p| *p < tail_start);
    let hits = from_graph.chain(tail).filter_map(|p| exact::score_at(set, p, q, filter)).collect();
    exact::truncate_best(hits, want)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;

    #[test]
    fn a_build_saves_its_progress_at_chunk_ends_but_not_after_the_last() {
        let vecs: Vec<Vec<f32>> = (0..230).map(|i| HashEmbedder::vector(&format!("note {i}"))).collect();
        let items: Vec<(i64, &[f32])> = vecs.iter().enumerate().map(|(i, v)| (i as i64 + 1, v.as_slice())).collect();
        let index = HnswIndex::with_capacity(items.len());
        let mut saves = Vec::new();
        grow(&index, &items, 50, std::time::Duration::ZERO, |g, upto| saves.push((upto, g.len())));
        // Each save covers every item up to its id: a resumed build starts right after it.
        assert_eq!(saves, vec![(50, 50), (100, 100), (150, 150), (200, 200)]);
        assert_eq!(index.len(), 230);
        let mut none = Vec::new();
        grow(&HnswIndex::with_capacity(10), &items[..120], 50, std::time::Duration::from_secs(3600), |_, u| none.push(u));
        assert!(none.is_empty(), "no save before the interval has passed: {none:?}");
    }
}
