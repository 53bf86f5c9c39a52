//! [`Searcher`]: the one search seam of the crate. It owns the [`VectorSet`], the optional
//! HNSW graph and the thread that builds it, and answers recall's top-k and the gate's sweep.
//!
//! The engine feeds it rows ([`Searcher::catch_up`]) and tells it what was forgotten; it never
//! reads the store itself. One-shot processes never build a graph (they would pay minutes
//! and throw it away); a long-lived process opts in with [`Searcher::with_graph_from`] and,
//! once the store is large enough, maps the graph's neighbour lists saved in the mapped
//! base's generation folder ([`super::links`], [`super::graph_file`]) or, holding the
//! generation's build lock, builds them with hnsw_rs on a background thread, scanning
//! exactly until they are ready. Rows newer than the graph are scanned exactly; once the
//! derived files hold many of them, the graph is extended (or another process's newer links
//! mapped) in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::RwLock;
use serde::Serialize;

use super::derived::Segment;
use super::exact::{self, Sweep};
use super::graph_file::GraphHome;
use super::hnsw::HnswIndex;
use super::links::Links;
use super::{Filter, Scored, VectorSet};
use crate::embed::DIM;
use crate::memory::Kind;
use crate::Result;

/// Below this many memories recall always scans exactly; at and above it a long-lived process
/// builds an HNSW graph in the background. Measured here (benches/recall.rs): the parallel
/// exact scan costs ≈ 0.03 ms per 1k vectors, a graph search with rescoring ≈ 1.7 ms at 100k,
/// so they cross near 57k (docs/internals.md, "How recall is computed").
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
    std::env::var("SLM_GRAPH_SAVE_S").ok().and_then(|v| v.parse().ok()).map_or(SAVE_EVERY, std::time::Duration::from_secs)
}

struct Graph {
    /// The generation's neighbour lists, mapped (shared with every process on the data root).
    links: Arc<Links>,
    /// The generation whose row positions the links use.
    generation: u64,
    /// Every memory up to this id is a node; newer rows are scanned exactly.
    built_upto: i64,
    /// Vectors in the graph the links were written from.
    vectors: usize,
    /// Mapped from a saved file, or extended or completed from a saved dump, rather than
    /// built from nothing by this process.
    loaded: bool,
}

impl Graph {
    fn of(links: Links, meta: &super::graph_file::GraphMeta, loaded: bool) -> Option<Graph> {
        let lm = meta.links.as_ref()?;
        Some(Graph { links: Arc::new(links), generation: meta.generation, built_upto: lm.upto, vectors: meta.vectors, loaded })
    }
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
    /// Bytes of the graph's neighbour lists this process maps (shared through the page
    /// cache with every process on the data root; 0: no graph).
    pub hnsw_mapped_bytes: usize,
}

/// The vectors of one data root and the structures that search them.
pub struct Searcher {
    /// Shared with the background graph thread, which reads the rows only once it holds the
    /// build lock (a server waiting for another process's build copies nothing).
    set: Arc<RwLock<VectorSet>>,
    graph: Arc<RwLock<Option<Arc<Graph>>>>,
    building: Arc<AtomicBool>,
    /// True only while this process holds the build lock and hnsw_rs's structures (the
    /// background thread may run without: mapping links another process saved, or finding
    /// the lock taken).
    private: Arc<AtomicBool>,
    /// Memories needed before a background graph build starts; `None` = never.
    graph_min: Option<usize>,
    /// Where the graph of the mapped base's generation is saved (none without a base).
    graph_home: RwLock<Option<GraphHome>>,
    /// No background graph work starts before this (another process holds the build).
    next_try: Arc<parking_lot::Mutex<Option<Instant>>>,
}

/// Rows read from the store during [`Searcher::catch_up`], waiting to be appended: one flat
/// byte buffer and `(id, kind, byte range)` per row, so staging allocates once per batch.
#[derive(Default)]
struct Staged {
    bytes: Vec<u8>,
    rows: Vec<(i64, Kind, std::ops::Range<usize>)>,
}

impl Staged {
    fn push(&mut self, id: i64, kind: Kind, blob: &[u8]) {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(blob);
        self.rows.push((id, kind, at..self.bytes.len()));
    }
}

/// Rows staged before a catch-up appends them (about 6 MB of vectors): large enough that the
/// write lock is taken rarely, small enough that a search waits at most one batch.
const CATCH_UP_BATCH: usize = 4096;

impl Default for Searcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Searcher {
    /// An empty searcher that always scans exactly.
    pub fn new() -> Self {
        Searcher {
            set: Arc::new(RwLock::new(VectorSet::new())),
            graph: Arc::new(RwLock::new(None)),
            building: Arc::new(AtomicBool::new(false)),
            private: Arc::new(AtomicBool::new(false)),
            graph_min: None,
            graph_home: RwLock::new(None),
            next_try: Arc::new(parking_lot::Mutex::new(None)),
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
    /// Returns how many vectors arrived.
    ///
    /// `load` reads the store, so it takes the store's lock: the set's lock is *not* held while
    /// it runs (rows are staged and appended in short write-locked batches). Holding it would
    /// order index → store here against store → index elsewhere (`status` reads counts, then
    /// the index's state) and let two threads of one server wait on each other for ever.
    /// ARCHITECTURE.md states the rule: the store lock may be held when an index lock is
    /// taken, never the reverse.
    pub fn catch_up(&self, load: impl FnOnce(i64, &mut dyn FnMut(i64, Kind, &[u8]) -> Result<()>) -> Result<()>) -> Result<usize> {
        let after = self.set.read().last_id();
        let mut staged = Staged::default();
        let mut arrived = 0;
        load(after, &mut |id, kind, blob| {
            staged.push(id, kind, blob);
            if staged.rows.len() >= CATCH_UP_BATCH {
                arrived += self.append_staged(&mut staged)?;
            }
            Ok(())
        })?;
        arrived += self.append_staged(&mut staged)?;
        Ok(arrived)
    }

    /// Appends the staged rows under one short write lock and empties the stage; returns how
    /// many vectors were added. Rows the set already accounts for (a base mapped meanwhile
    /// covers them) are skipped by [`VectorSet::append_blob`].
    fn append_staged(&self, staged: &mut Staged) -> Result<usize> {
        if staged.rows.is_empty() {
            return Ok(0);
        }
        let mut set = self.set.write();
        let before = set.len();
        for &(id, kind, ref range) in &staged.rows {
            set.append_blob(id, kind, &staged.bytes[range.clone()])?;
        }
        let added = set.len() - before;
        drop(set);
        staged.rows.clear();
        staged.bytes.clear();
        Ok(added)
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
        let graph = if filter.only_ids.is_none() && !filter.include_laps && filter.after_id == 0 { self.graph_for(&set) } else { None };
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

    /// One [`Searcher::sweep`] per query, each at its own threshold, in one pass over the rows
    /// (see [`exact::sweep_many`]).
    pub fn sweep_many(&self, queries: &[(&[f32], f32)], filter: &Filter<'_>) -> Vec<Sweep> {
        exact::sweep_many(&self.set.read(), queries, filter)
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
            hnsw_vectors: graph.as_ref().map_or(0, |g| g.vectors),
            hnsw_building: self.building.load(Ordering::Acquire),
            hnsw_loaded: graph.as_ref().is_some_and(|g| g.loaded),
            hnsw_upto: graph.as_ref().map_or(0, |g| g.built_upto),
            hnsw_mapped_bytes: graph.as_ref().map_or(0, |g| g.links.bytes()),
        }
    }

    /// This process's memory, with what the search structures map and hold.
    pub fn memory(&self) -> crate::memstat::ProcessMemory {
        let (rss_bytes, anon_bytes, file_bytes) = crate::memstat::resident();
        let set = self.set.read();
        let graph = self.graph.read().clone();
        crate::memstat::ProcessMemory {
            rss_bytes,
            anon_bytes,
            file_bytes,
            vectors_mapped_bytes: set.base().map_or(0, |b| b.mapped_bytes()) as u64,
            graph_mapped_bytes: graph.map_or(0, |g| g.links.bytes()) as u64,
            tail_rows: set.len() - set.base_len(),
            graph_private: self.private.load(Ordering::Acquire),
        }
    }

    /// The graph to use, if the data root has one. Starts the background work when due:
    /// the first time the set is large enough, map the generation's saved links or (one
    /// process at a time) build them; once the files hold many rows newer than the graph,
    /// map newer links or extend the graph. The result is saved for every process.
    fn graph_for(&self, set: &VectorSet) -> Option<Arc<Graph>> {
        let min = self.graph_min?;
        let base = set.base()?;
        // Links of another generation are no use: row positions differ between generations.
        let graph = self.graph.read().clone().filter(|g| g.generation == base.generation);
        let due = match &graph {
            Some(g) => {
                let newer = set.base_len().saturating_sub(set.first_after(g.built_upto));
                newer >= REBUILD_TAIL.max(g.links.nodes() / 10)
            }
            None => set.len() >= min && set.count(&Filter::memories()) >= min,
        };
        let waiting = self.next_try.lock().is_some_and(|t| Instant::now() < t);
        if due && !waiting && !self.building.swap(true, Ordering::AcqRel) {
            self.spawn(graph.clone());
        }
        graph
    }

    /// Starts the background thread that maps, builds or extends the graph.
    fn spawn(&self, graph: Option<Arc<Graph>>) {
        let set = Arc::clone(&self.set);
        let home = self.graph_home.read().clone();
        let slot = Arc::clone(&self.graph);
        let building = Arc::clone(&self.building);
        let private = Arc::clone(&self.private);
        let next_try = Arc::clone(&self.next_try);
        let spawned = std::thread::Builder::new().name("slm-hnsw-build".into()).spawn(move || {
            Priority::Background.apply();
            let have = graph.as_ref().map_or(i64::MIN, |g| g.built_upto);
            match home.as_ref().map(|h| graph_work(h, &set, have, &private)) {
                Some(Work::Ready(g)) => *slot.write() = Some(Arc::new(g)),
                Some(Work::Busy) => *next_try.lock() = Some(Instant::now() + BUSY_RETRY),
                Some(Work::Failed) => *next_try.lock() = Some(Instant::now() + FAILED_RETRY),
                None => {}
            }
            building.store(false, Ordering::Release);
        });
        if let Err(e) = spawned {
            tracing::warn!("cannot start the HNSW build thread: {e}");
            self.building.store(false, Ordering::Release);
        }
    }
}

/// How long a process waits before looking again while another one builds the graph.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(2);
/// ... and after its own attempt failed (a full disk, say).
const FAILED_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

enum Work {
    Ready(Graph),
    /// Another process holds the build.
    Busy,
    Failed,
}

/// The background work of [`Searcher::spawn`]: links newer than `have` saved by anyone are
/// mapped; otherwise, holding the generation's build lock, the saved dump (finished or
/// part-built) is loaded and completed with the set's memories, or a graph is built from
/// nothing, and saved with its links. hnsw_rs's structures (about 5 KB a memory) live only while that
/// runs, and only in the one process that holds the lock.
fn graph_work(home: &GraphHome, set: &RwLock<VectorSet>, have: i64, private: &AtomicBool) -> Work {
    let newer = |home: &GraphHome| match home.open_links() {
        Ok(Some((links, meta))) if meta.links.as_ref().is_some_and(|l| l.upto > have && l.nodes <= set.read().base_len()) => {
            tracing::info!(vectors = meta.vectors, upto = meta.upto, "HNSW graph mapped from {}", home.dir.display());
            Graph::of(links, &meta, true)
        }
        Ok(_) => None,
        Err(e) => {
            tracing::warn!("the saved HNSW graph's links are unusable: {e}");
            None
        }
    };
    if let Some(g) = newer(home) {
        return Work::Ready(g);
    }
    let Some(_lock) = home.build_lock() else { return Work::Busy };
    // Another process may have saved while this one waited for the lock.
    if let Some(g) = newer(home) {
        return Work::Ready(g);
    }
    // From here to the return this process holds a private graph (status: graph_private).
    struct Private<'a>(&'a AtomicBool);
    impl Drop for Private<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    private.store(true, Ordering::Release);
    let _private = Private(private);
    let (rows, upto) = {
        let set = set.read();
        (GraphRows::of(&set, &Filter::memories()), set.last_id())
    };
    let items = rows.items();
    let (index, from, resumed) = match home.load() {
        Ok(Some((index, meta))) => {
            let from = items.partition_point(|(id, _)| *id <= meta.upto);
            tracing::info!(
                vectors = index.len(),
                upto = meta.upto,
                rest = items.len() - from,
                part = meta.part,
                "extending the saved HNSW graph"
            );
            (index, from, true)
        }
        other => {
            if let Err(e) = other {
                tracing::warn!("the saved HNSW graph is unusable, rebuilding it: {e}");
            }
            (HnswIndex::with_capacity(items.len()), 0, false)
        }
    };
    let rest = &items[from..];
    let chunk = (rest.len() / 8).clamp(500, BUILD_CHUNK);
    let save = |index: &HnswIndex, upto: i64| save_part(home, index, upto);
    in_own_pool(Priority::Background, || grow(&index, rest, chunk, save_every(), save));
    tracing::info!(vectors = index.len(), "HNSW graph built");
    let saved = home.save(&index, upto, false, rows.base.as_deref());
    drop(index);
    release_freed_memory();
    let meta = match saved {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("cannot save the HNSW graph: {e}");
            return Work::Failed;
        }
    };
    tracing::info!(vectors = meta.vectors, bytes = meta.bytes, upto, "HNSW graph saved");
    match home.open_links() {
        Ok(Some((links, meta))) => Graph::of(links, &meta, resumed).map_or(Work::Failed, Work::Ready),
        Ok(None) => Work::Failed,
        Err(e) => {
            tracing::warn!("cannot map the HNSW graph just saved: {e}");
            Work::Failed
        }
    }
}

/// Hands the heap that hnsw_rs's structures held back to the system (glibc keeps freed
/// memory in its arenas otherwise, and the process would stay as large as at its build).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe {
        libc::malloc_trim(0);
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
        rows.base.as_ref()?;
        // The user asked for this build: it runs whether or not a server holds the lock
        // (two finished saves race safely; the one covering more rows is kept).
        let _lock = home.build_lock();
        let items = rows.items();
        let index = in_own_pool(Priority::Foreground, || HnswIndex::build(&items));
        let saved = home.save(&index, upto, false, rows.base.as_deref());
        drop(index);
        release_freed_memory();
        if let Ok(Some((links, meta))) = home.open_links() {
            *self.graph.write() = Graph::of(links, &meta, false).map(Arc::new);
        }
        Some(saved)
    }
}

/// Saves a build still under way in `home` (its dump only: links are written for finished
/// graphs), and logs how that went: a failed save only means the next process builds more.
fn save_part(home: &GraphHome, index: &HnswIndex, upto: i64) {
    match home.save(index, upto, true, None) {
        Ok(m) => tracing::info!(vectors = m.vectors, bytes = m.bytes, upto, part = true, "HNSW graph saved"),
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
fn grow(index: &HnswIndex, items: &[(i64, &[f32])], size: usize, every: std::time::Duration, mut save: impl FnMut(&HnswIndex, i64)) {
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
    /// `slm index rebuild` (the user waits for it).
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
    let nodes = tail.start.min(set.base_len());
    let dist = |p: usize| 1.0 - crate::spaces::cosine(q, set.vector(p));
    let from_graph = g.links.search(dist, HNSW_EF.max(k), nodes);
    let hits = from_graph.into_iter().chain(tail).filter_map(|p| exact::score_at(set, p, q, filter)).collect();
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
