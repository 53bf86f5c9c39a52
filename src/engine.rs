//! The memory engine: `remember`, `recall`, `list`, `forget`, `status` on one data root.
//!
//! This is the one place that ties the pieces together: text goes through the [`Embedder`],
//! rows go to the [`Store`], and every search goes through the [`Searcher`] (exact SIMD
//! cosine, optionally with HNSW candidates in long-lived processes), fed here with the rows
//! the store holds. Every surface (CLI, MCP server, dashboard) and the loop engine call this
//! type and nothing below it, so they all share the same rules and the same results.
//!
//! An `Engine` is `Sync`: a server can share one behind an `Arc`. The store sits behind a
//! mutex held only for the length of one short database call; embedding happens outside it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};
use serde::Serialize;

use crate::embed::query_cache::QueryCache;
use crate::embed::Embedder;
use crate::feed::{Feed, Topic};
use crate::index::exact::Sweep;
use crate::index::{Filter, IndexState, Scored, Searcher};
use crate::memory::{self, Hit, Kind, Memory, Remembered};
use crate::mirror::{IndexFiles, Mirror, ProgressFn, STORE_ID_META};
use crate::storage::{Location, NewRow, PgUrl, Store, DB_FILE};
use crate::{Error, Result};

pub use crate::index::HNSW_MIN;

/// Memories a store needs before long-lived processes keep an HNSW graph: [`HNSW_MIN`], or
/// `SLM_HNSW_MIN` (for tests and tuning).
pub fn hnsw_min() -> usize {
    std::env::var("SLM_HNSW_MIN").ok().and_then(|v| v.parse().ok()).filter(|n| *n > 0).unwrap_or(HNSW_MIN)
}

/// Largest `limit` accepted by recall and list.
pub const MAX_LIMIT: usize = 1000;

/// Most queries `slm index verify` generates (`n` in 1..=this).
pub const MAX_VERIFY_QUERIES: usize = 10_000;

/// The meta key recording which model wrote a data root's vectors.
const MODEL_META: &str = "embedding_model";

/// Where the data root is, and whether it was chosen explicitly by the user.
#[derive(Debug, Clone)]
pub struct DataRoot {
    pub dir: PathBuf,
    /// An explicit `--data-dir`/`SLM_DATA_DIR` must have an existing parent; the platform
    /// default is created with all its parents.
    pub explicit: bool,
    /// A shared PostgreSQL store (`--store`/`SLM_STORE`); `None`: the SQLite file in `dir`.
    /// The data root stays local either way: it holds the feed and the derived vector files.
    pub store: Option<PgUrl>,
}

impl DataRoot {
    /// `--data-dir` (or `SLM_DATA_DIR`, which the CLI folds into the flag) when given, else
    /// `slm` under the platform data dir (`$XDG_DATA_HOME`, usually `~/.local/share`).
    pub fn resolve(flag: Option<PathBuf>) -> Result<DataRoot> {
        match flag {
            Some(dir) if dir.as_os_str().is_empty() => Err(Error::invalid("data_dir", "", "must not be empty")),
            Some(dir) => Ok(DataRoot { dir, explicit: true, store: None }),
            None => dirs::data_dir()
                .map(|d| DataRoot { dir: d.join("slm"), explicit: false, store: None })
                .ok_or_else(|| Error::invalid("data_dir", "", "no platform data directory; pass --data-dir")),
        }
    }

    /// Uses the store named by `--store`/`SLM_STORE` (see [`PgUrl::from_flag`]): a malformed
    /// value is invalid input, checked before anything is opened.
    pub fn with_store(mut self, value: Option<&str>) -> Result<DataRoot> {
        self.store = PgUrl::from_flag(value)?;
        Ok(self)
    }

    /// Where this data root's rows live.
    pub fn location(&self) -> Location {
        match &self.store {
            Some(url) => Location::Postgres(url.clone()),
            None => Location::Sqlite(self.dir.join(DB_FILE)),
        }
    }

    /// Creates the directory if needed, following the rules in [`DataRoot::explicit`].
    fn ensure(&self) -> Result<()> {
        let dir = &self.dir;
        if dir.is_dir() {
            return Ok(());
        }
        // Re-checked: another process may have created the directory since the first look.
        if dir.exists() && !dir.is_dir() {
            return Err(Error::invalid("data_dir", dir.display(), "must be a directory; a file is in the way"));
        }
        if self.explicit {
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(Error::invalid("data_dir", dir.display(), format!("its parent directory {} must exist", parent.display())));
            }
            std::fs::create_dir(dir).or_else(|e| if dir.is_dir() { Ok(()) } else { Err(e) })
        } else {
            std::fs::create_dir_all(dir)
        }
        .map_err(|e| Error::io(format!("cannot create data directory {}", dir.display()), e))
    }
}

/// Options of a recall.
#[derive(Debug, Clone)]
pub struct RecallQuery {
    pub query: String,
    pub limit: usize,
    pub tags: Vec<String>,
    pub min_score: Option<f64>,
    /// Include ledger laps even without a `loop:*` tag filter.
    pub include_laps: bool,
    /// Include memories that have expired (see [`crate::expiry`]); hidden by default.
    pub include_expired: bool,
}

impl RecallQuery {
    /// A query with the defaults of SPEC §1 (limit 10, no tags, no threshold).
    pub fn new(query: impl Into<String>) -> Self {
        RecallQuery { query: query.into(), limit: 10, tags: Vec::new(), min_score: None, include_laps: false, include_expired: false }
    }
}

/// The result of a recall.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Recalled {
    pub query: String,
    pub hits: Vec<Hit>,
}

/// What [`Engine::list`] lists: the newest memories, narrowed by tags, kind and paging.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    /// Only memories carrying every one of these tags (validated and normalised by `list`).
    pub tags: &'a [String],
    pub kind: Option<Kind>,
    /// At most this many (1 to 1000).
    pub limit: usize,
    /// Only ids below this one: the next page after a page whose last id it is.
    pub before: Option<i64>,
    /// Memories that have expired too.
    pub include_expired: bool,
}

/// What `status` reports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Status {
    pub data_dir: PathBuf,
    pub db_path: PathBuf,
    pub schema_version: i64,
    /// Memories written by agents (`kind = memory`).
    pub memories: u64,
    /// Loop ledger laps (`kind = lap`).
    pub laps: u64,
    pub model: String,
    pub model_loaded: bool,
    /// Where the model would be loaded from (`SLM_MODEL_DIR`, or the models folder: see
    /// [`crate::embed::locate`]).
    pub model_dir: Option<PathBuf>,
    /// Which place the model's folder was found in: `"SLM_MODELS"`, `"installed package"`,
    /// `"repository"` or `"SLM_MODEL_DIR"` (null when none is found).
    pub models_source: Option<String>,
    /// The ONNX Runtime library (`ORT_DYLIB_PATH`, the models folder's, or the installed
    /// `onnxruntime` package's).
    pub runtime: Option<PathBuf>,
    /// Why the model files cannot be found, when they cannot.
    pub model_error: Option<String>,
    pub index: IndexState,
    /// This process's memory and what holds it.
    pub memory: crate::memstat::ProcessMemory,
    /// True when the data root cannot be written: reads work, writes fail as `read_only`.
    pub read_only: bool,
    /// When the store was created (stores created before slm recorded it: null).
    pub created_at: Option<String>,
    /// `"not checked"`, `"ok"`, or what SQLite's integrity check found (`slm status --check`
    /// runs the full check; a read or write that meets a damaged page runs a quick one).
    pub integrity: String,
}

/// The memory engine over one data root.
pub struct Engine {
    root: PathBuf,
    location: Location,
    store: Mutex<Store>,
    embedder: Arc<dyn Embedder>,
    index: Searcher,
    /// The derived vector files that back the searcher in large stores.
    mirror: Mirror,
    /// The store's id is recorded (done at the first write of this process).
    store_id_set: std::sync::atomic::AtomicBool,
    /// The change feed, started by the first caller that waits on it (None: polling only).
    feed: OnceLock<Option<Arc<Feed>>>,
    /// Foreground work in progress in this process (waiting loops): background embedding
    /// yields to it (see [`Engine::busy`]).
    busy: AtomicUsize,
    /// Called after every commit this engine announces (see [`Engine::on_announce`]).
    announce_hooks: Mutex<Vec<AnnounceHook>>,
    /// Query vectors kept in the data root for later processes (`None`: a test embedder).
    query_cache: Option<QueryCache>,
    refreshes: Refreshes,
}

/// What [`Engine::on_announce`] registers.
pub type AnnounceHook = Box<dyn Fn(Topic) + Send + Sync>;

/// Sequence numbers of [`Engine::refresh`] loads, so concurrent callers share one.
#[derive(Default)]
struct Refreshes {
    lock: Mutex<()>,
    /// Loads begun (under `lock`).
    started: AtomicU64,
    /// The number of the last load that finished.
    done: AtomicU64,
}

/// Counts foreground work as in progress for as long as it lives (see [`Engine::busy`]).
pub struct Busy<'e>(&'e AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Engine {
    /// Opens the data root (creating it and its database if needed) with `embedder`.
    pub fn open(root: &DataRoot, embedder: Arc<dyn Embedder>) -> Result<Engine> {
        root.ensure()?;
        let location = root.location();
        let store = Store::open_at(&location)?;
        location.mark(&root.dir);
        if let Some(stored) = store.meta(MODEL_META)? {
            if stored != embedder.model_name() {
                return Err(Error::Model {
                    message: format!(
                        "{} holds vectors from model {stored:?}, not {:?}; use another data dir",
                        root.dir.display(),
                        embedder.model_name()
                    ),
                });
            }
        }
        let query_cache = embedder.model_files().and_then(|f| QueryCache::new(&root.dir, f));
        Ok(Engine {
            root: root.dir.clone(),
            location,
            store: Mutex::new(store),
            embedder,
            index: Searcher::new(),
            mirror: Mirror::new(&root.dir),
            store_id_set: std::sync::atomic::AtomicBool::new(false),
            feed: OnceLock::new(),
            busy: AtomicUsize::new(0),
            announce_hooks: Mutex::new(Vec::new()),
            query_cache,
            refreshes: Refreshes::default(),
        })
    }

    /// Lets this (long-lived) process build an HNSW graph in a background thread once the
    /// store holds `min_memories` memories ([`HNSW_MIN`] in the product). One-shot processes
    /// never do: they would pay the build and throw it away.
    pub fn with_background_index(mut self, min_memories: usize) -> Self {
        self.index = self.index.with_graph_from(min_memories);
        self
    }

    /// The data root directory.
    pub fn data_dir(&self) -> &Path {
        &self.root
    }

    /// The shared PostgreSQL store this engine uses, if any (`None`: the data root's file).
    pub fn data_root_store(&self) -> Option<&PgUrl> {
        match &self.location {
            Location::Postgres(url) => Some(url),
            Location::Sqlite(_) => None,
        }
    }

    /// The data root's change feed, started on first use; `None` when it cannot be watched
    /// or `SLM_FEED=off` (then waiting loops poll).
    pub fn feed(&self) -> Option<Arc<Feed>> {
        self.feed
            .get_or_init(|| {
                if !crate::feed::enabled() {
                    return None;
                }
                let feed = Feed::watch(&self.root).map_err(|e| tracing::warn!("no change feed, loops will poll: {e}")).ok()?;
                if let Location::Postgres(url) = &self.location {
                    // Other hosts' commits arrive by NOTIFY; this host's also by the file.
                    crate::storage::pg::listen::spawn(url.clone(), feed.notifier());
                }
                Some(Arc::new(feed))
            })
            .clone()
    }

    /// The change feed if something has started it (never starts it).
    pub fn feed_started(&self) -> Option<Arc<Feed>> {
        self.feed.get().and_then(|f| f.clone())
    }

    /// Where the store lives.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Marks foreground work (a waiting loop) as in progress until the guard drops; the
    /// servers' background embedding of ledger laps runs only while none is.
    pub fn busy(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(&self.busy)
    }

    /// Foreground work in progress in this process.
    pub fn busy_count(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }

    /// Calls `hook` after every commit this engine announces, in the committing thread (the
    /// loop runtime drops its shared views of the store there, see crate::loops::host).
    pub fn on_announce(&self, hook: AnnounceHook) {
        self.announce_hooks.lock().push(hook);
    }

    /// Tells every process watching this data root that a write of `topic` committed.
    pub fn announce(&self, topic: Topic) {
        // This process's own waiters must not wait for the file watch to see its write.
        for hook in self.announce_hooks.lock().iter() {
            hook(topic);
        }
        crate::feed::announce(&self.root, topic);
    }

    /// Ends this engine's use of the store before the process exits without dropping it:
    /// closes the connection, so the data root is left cleanly closed (no write-ahead log),
    /// as read-only media and backups need.
    pub fn close(&self) {
        self.store().close();
    }

    /// The vector of a query: from the data root's [`QueryCache`] when an earlier process
    /// embedded the same text with the same model, else from the model (and kept there).
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>> {
        if let Some(v) = self.query_cache.as_ref().and_then(|c| c.get(query)) {
            return Ok(v);
        }
        let v = self.embedder.embed_one(query)?;
        if let Some(c) = &self.query_cache {
            if !self.store().read_only() {
                c.put(query, &v);
            }
        }
        Ok(v)
    }

    /// The embedder this engine uses.
    pub fn embedder(&self) -> &Arc<dyn Embedder> {
        &self.embedder
    }

    /// Locks the store for one short call. Crate-private: surfaces go through the engine and
    /// the loop layer, never to SQL.
    pub(crate) fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock()
    }

    /// Stores `content` with `tags`; the same content and tags again returns the same id.
    pub fn remember(&self, content: &str, tags: &[String]) -> Result<Remembered> {
        self.remember_expiring(content, tags, None)
    }

    /// [`Engine::remember`] with an expiry (canonical UTC text from [`crate::expiry`]): from
    /// then on no gate counts the memory and recall and list hide it. Remembering the same
    /// content and tags again sets the stored memory's expiry to this one (`None`: never),
    /// so a lock is renewed by writing it again.
    pub fn remember_expiring(&self, content: &str, tags: &[String], expires_at: Option<&str>) -> Result<Remembered> {
        memory::validate_content("content", content)?;
        let prepared = [(content, memory::normalize_tags(tags)?)];
        let mut out = self.write_rows(Kind::Memory, &prepared, true, &[], &[], &[expires_at])?;
        out.pop().ok_or_else(|| Error::Corrupt("insert returned no row".into()))
    }

    /// Stores many memories: validates all first, embeds only the new ones in batches, then
    /// writes them in one short transaction. Results are in input order.
    pub fn remember_batch(&self, items: &[(&str, &[String])]) -> Result<Vec<Remembered>> {
        let mut prepared = Vec::with_capacity(items.len());
        for (content, tags) in items {
            memory::validate_content("content", content)?;
            prepared.push((*content, memory::normalize_tags(tags)?));
        }
        self.insert_rows(Kind::Memory, &prepared)
    }

    /// Stores rows of `kind` whose content and tags are already validated and normalised.
    /// Used by `remember` and by the loop ledger.
    pub fn insert_rows(&self, kind: Kind, rows: &[(&str, Vec<String>)]) -> Result<Vec<Remembered>> {
        self.write_rows(kind, rows, true, &[], &[], &[])
    }

    /// Like [`Engine::insert_rows`], with vectors the caller already has: `given[i]`, when
    /// present, is row `i`'s unit vector (384-d) and the model is not run for it (import).
    pub fn insert_rows_given(&self, kind: Kind, rows: &[(&str, Vec<String>)], given: &[Option<&[f32]>]) -> Result<Vec<Remembered>> {
        self.write_rows(kind, rows, true, given, &[], &[])
    }

    /// Stores imported rows: like [`Engine::insert_rows_given`], keeping each row's
    /// `created_at` and `expires_at` where given; with `embed` false, rows without a vector
    /// are stored pending (ledger laps exported before they were embedded).
    pub fn insert_imported(
        &self,
        kind: Kind,
        rows: &[(&str, Vec<String>)],
        given: &[Option<&[f32]>],
        created: &[Option<&str>],
        expires: &[Option<&str>],
        embed: bool,
    ) -> Result<Vec<Remembered>> {
        self.write_rows(kind, rows, embed, given, created, expires)
    }

    /// Stores an imported run record unless its id is stored; true when stored.
    pub fn import_run(&self, run: &crate::storage::RunOut) -> Result<bool> {
        self.store().writable()?;
        let stored = self.store().run_import(run)?;
        if stored {
            self.announce(Topic::Ledger);
        }
        Ok(stored)
    }

    /// Stores an imported lap record unless stored; true when stored.
    pub fn import_lap(&self, lap: &crate::storage::LapOut) -> Result<bool> {
        self.store().writable()?;
        self.store().lap_import(lap)
    }

    /// Visits the whole store (see [`crate::storage::TransferRows::export`]).
    pub fn export(&self, visit: &mut dyn FnMut(crate::storage::ExportItem) -> Result<()>) -> Result<()> {
        self.store().export(visit)
    }

    /// Stores rows without embedding them (no model load): a later [`Engine::backfill_pending`]
    /// adds their vectors, and until then recall embeds them on the fly. Only for ledger laps,
    /// which no gate ever reads, so a missing vector can never change a gate's decision.
    pub fn insert_pending(&self, kind: Kind, rows: &[(&str, Vec<String>)], created: &[Option<&str>]) -> Result<Vec<Remembered>> {
        self.write_rows(kind, rows, false, &[], created, &[])
    }

    /// Prepares this engine for a long series of batch writes (an import): see
    /// [`Backend::bulk_mode`](crate::storage::Backend::bulk_mode).
    pub fn prepare_bulk(&self) -> Result<()> {
        self.store().bulk_mode()
    }

    /// True when this process has loaded the embedding model.
    pub fn model_loaded(&self) -> bool {
        self.embedder.is_loaded()
    }

    /// True when at least `n` rows are stored without a vector (one indexed read).
    pub fn pending_at_least(&self, n: usize) -> Result<bool> {
        Ok(self.store().pending_rows(n)?.len() >= n)
    }

    /// Embeds and stores the vectors of up to `max` rows stored without one; returns how many.
    pub fn backfill_pending(&self, max: usize) -> Result<usize> {
        if self.store().read_only() {
            return Ok(0); // nothing can be stored; recall embeds pending rows on the fly
        }
        // Laps stored without their ledger memory (a killed process's, or waiting for the
        // ledger writer's next fold) get it first, so they are embedded in this pass.
        if let Err(e) = self.fold_laps() {
            tracing::warn!("deriving lap memories: {e}");
        }
        if !self.store().try_backfill_lock()? {
            return Ok(0); // another host's backfill embeds them (it runs until none is left)
        }
        let r = self.backfill_rows(max);
        self.store().backfill_unlock();
        r
    }

    /// Derives the ledger memory of every lap stored without one (see
    /// [`crate::storage::writer`]); how many.
    pub fn fold_laps(&self) -> Result<usize> {
        let folded = self.store().laps_fold(usize::MAX);
        if folded.laps > 0 {
            self.announce(Topic::Ledger);
        }
        folded.outcome.map(|_| folded.laps)
    }

    fn backfill_rows(&self, max: usize) -> Result<usize> {
        let mut done = 0;
        while done < max {
            let rows = self.store().pending_rows(64.min(max - done))?;
            if rows.is_empty() {
                break;
            }
            let texts: Vec<&str> = rows.iter().map(|r| r.content.as_str()).collect();
            let vectors = self.embedder.embed(&texts)?;
            let set: Vec<(i64, Vec<f32>)> = rows.iter().zip(vectors.outer_iter()).map(|(r, v)| (r.id, v.to_vec())).collect();
            self.store().set_embeddings(&set)?;
            done += rows.len();
        }
        Ok(done)
    }

    /// [`Engine::backfill_pending`] of every pending row, by one process per data root at a
    /// time (`slm embed-pending`). Each `slm loop run` starts one when it ends, so runs ending
    /// together would otherwise load the model as many times over to race for the same rows.
    /// A process that finds the data root's `embed-pending.lock` held leaves the work to the
    /// holder (returns 0); the holder looks again after letting go, so rows stored while it was
    /// finishing are not left behind. Without a lock file (read-only media) it just runs.
    pub fn backfill_pending_alone(&self) -> Result<usize> {
        let path = self.data_dir().join("embed-pending.lock");
        let mut done = 0;
        loop {
            let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path);
            let held = match &lock {
                Ok(f) => match f.try_lock() {
                    Ok(()) => true,
                    Err(std::fs::TryLockError::WouldBlock) => return Ok(done),
                    Err(std::fs::TryLockError::Error(e)) => {
                        tracing::warn!("cannot lock {}: {e}", path.display());
                        false
                    }
                },
                Err(_) => false,
            };
            let pass = self.backfill_pending(usize::MAX)?;
            done += pass;
            drop(lock);
            // A pass that embedded nothing found no rows, or (PostgreSQL) another host's
            // backfill holds the store-wide lock and runs until none is left: stop either way.
            if !held || pass == 0 || self.store().pending_rows(1)?.is_empty() {
                return Ok(done);
            }
        }
    }

    fn write_rows(
        &self,
        kind: Kind,
        rows: &[(&str, Vec<String>)],
        embed: bool,
        given: &[Option<&[f32]>],
        created: &[Option<&str>],
        expires: &[Option<&str>],
    ) -> Result<Vec<Remembered>> {
        // Read-only media: fail before the model loads, naming the cause.
        self.store().writable()?;
        // Skip the model for rows already stored: a dedup costs a lookup, not an inference.
        let mut known = Vec::with_capacity(rows.len());
        // With every vector given there is no model call to save: the insert itself finds
        // the rows already stored (ON CONFLICT), without a lookup per row first.
        if embed && rows.len() == given.len() && given.iter().all(Option::is_some) {
            known.resize(rows.len(), None);
        } else {
            let store = self.store();
            for (i, (c, t)) in rows.iter().enumerate() {
                let at = created.get(i).copied().flatten();
                known.push(crate::storage::find_row(|k| store.find_dedup(k), kind, c, t, at)?);
            }
        }
        if let Some(v) = given.iter().flatten().find(|v| v.len() != crate::embed::DIM) {
            return Err(Error::invalid("embedding", v.len(), format!("must have {} numbers", crate::embed::DIM)));
        }
        let fresh: Vec<usize> = (0..rows.len()).filter(|&i| known[i].is_none()).collect();
        let given_at = |i: usize| given.get(i).copied().flatten();
        // Only rows that came without a vector go through the model.
        let to_embed: Vec<usize> = fresh.iter().copied().filter(|&i| given_at(i).is_none()).collect();
        let texts: Vec<&str> = to_embed.iter().map(|&i| rows[i].0).collect();
        let vectors = if embed && !texts.is_empty() { Some(self.embedder.embed(&texts)?) } else { None };
        let embedded_row = |i: usize| to_embed.binary_search(&i).ok();
        let new_rows: Vec<NewRow<'_>> = fresh
            .iter()
            .map(|&i| NewRow {
                kind,
                content: rows[i].0,
                tags: &rows[i].1,
                created_at: created.get(i).copied().flatten(),
                expires_at: expires.get(i).copied().flatten(),
                // Rows of an embedder's matrix are contiguous (standard layout).
                embedding: match given_at(i) {
                    Some(v) => v,
                    None => embedded_row(i).and_then(|n| vectors.as_ref().and_then(|m| m.row(n).to_slice())).unwrap_or(&[]),
                },
            })
            .collect();
        let inserted = {
            let mut store = self.store();
            if !new_rows.is_empty() && !self.store_id_set.load(Ordering::Acquire) {
                store.meta_init(MODEL_META, self.embedder.model_name())?;
                store.meta_init(STORE_ID_META, &new_store_id())?;
                self.store_id_set.store(true, Ordering::Release);
            }
            let inserted = store.insert(&new_rows)?;
            // Rows found stored before the insert: the latest write sets their expiry too.
            if kind == Kind::Memory {
                let renewed: Vec<(i64, Option<&str>)> =
                    known.iter().enumerate().filter_map(|(i, k)| k.map(|id| (id, expires.get(i).copied().flatten()))).collect();
                if !renewed.is_empty() {
                    store.set_expiry(&renewed)?;
                }
            }
            inserted
        };
        if !new_rows.is_empty() {
            self.announce(if kind == Kind::Memory { Topic::Memories } else { Topic::Ledger });
        }
        let mut fresh_results = inserted.into_iter();
        Ok(known
            .into_iter()
            .map(|k| match k {
                Some(id) => Remembered { id, deduped: true },
                None => {
                    let r = fresh_results.next().unwrap_or(crate::storage::Inserted { id: 0, deduped: true });
                    Remembered { id: r.id, deduped: r.deduped }
                }
            })
            .collect())
    }

    /// Semantic search: the best memories for `q.query`, scored by exact cosine.
    pub fn recall(&self, q: &RecallQuery) -> Result<Recalled> {
        memory::validate_content("query", &q.query)?;
        memory::validate_limit("limit", q.limit, MAX_LIMIT)?;
        if let Some(s) = q.min_score {
            memory::validate_score("min_score", s)?;
        }
        let tags = memory::normalize_tags(&q.tags)?;
        let include_laps = q.include_laps || tags.iter().any(|t| t.starts_with("loop:"));
        // The store is read before the query is embedded: in a fresh process the model is
        // still loading on another thread then, so these reads (round trips, on PostgreSQL)
        // cost no time of their own.
        self.refresh()?;
        let only_ids = if tags.is_empty() { None } else { Some(self.store().ids_with_all_tags(&tags)?) };
        let qv = self.embed_query(&q.query)?;
        let min_score = q.min_score.map_or(-1.0, |s| s as f32);
        let filter = Filter { include_laps, only_ids: only_ids.as_deref(), after_id: 0, min_score };
        // Expired memories are dropped from the hits (unless asked for); the search goes deeper
        // by as many as it dropped until `limit` live hits or the end, so the result is exact
        // and a store whose hits hold none costs one search, as before.
        let now = memory::now_rfc3339();
        let mut want = q.limit;
        let hits = loop {
            let mut hits = self.search_refreshed(&qv, want, &filter)?;
            let found = hits.len();
            if !q.include_expired {
                hits.retain(|h| !crate::expiry::expired(h.expires_at.as_deref(), &now));
            }
            if hits.len() >= q.limit || found < want {
                hits.truncate(q.limit);
                break hits;
            }
            want += q.limit - hits.len();
        };
        Ok(Recalled { query: q.query.clone(), hits })
    }

    /// Loads rows other processes committed since the last call into the searcher.
    ///
    /// Callers that arrive together share one load: a caller that finds a load running waits
    /// for it and then needs its own only if that load began before it arrived. A thousand
    /// loops woken by one commit thus cost one query, not a thousand.
    pub fn refresh(&self) -> Result<()> {
        let arrived = self.refreshes.started.load(Ordering::Acquire);
        let _one = self.refreshes.lock.lock();
        if self.refreshes.done.load(Ordering::Acquire) > arrived {
            return Ok(()); // a load that began after we arrived has finished
        }
        let mine = self.refreshes.started.fetch_add(1, Ordering::AcqRel) + 1;
        self.mirror.sync(&self.store, &self.index)?;
        self.index.catch_up(|after, visit| self.store().vectors_after(after, None, visit))?;
        self.refreshes.done.store(mine, Ordering::Release);
        Ok(())
    }

    /// The best `limit` rows for an embedded query under `filter`, exact scores, with rows
    /// forgotten by another process dropped (and remembered as such). The caller has just
    /// called [`Engine::refresh`].
    fn search_refreshed(&self, qv: &[f32], limit: usize, filter: &Filter<'_>) -> Result<Vec<Hit>> {
        let extra = if filter.include_laps { self.pending_vectors(filter)? } else { Vec::new() };
        loop {
            let candidates = self.index.search(qv, limit, filter, &extra);
            let ids: Vec<i64> = candidates.iter().map(|s| s.id).collect();
            let rows = self.store().get_many(&ids)?;
            if rows.len() == ids.len() {
                return Ok(to_hits(&candidates, rows));
            }
            // Some candidates were forgotten by another process: remember that, look again.
            let present: std::collections::HashSet<i64> = rows.iter().map(|m| m.id).collect();
            let gone: Vec<i64> = ids.into_iter().filter(|id| !present.contains(id)).collect();
            self.index.tombstone(&gone);
            self.mirror.note_forgotten(&gone);
            if extra.iter().any(|(id, _)| gone.contains(id)) {
                return self.search_refreshed(qv, limit, filter);
            }
        }
    }

    /// Vectors of the rows stored without one yet (ledger laps awaiting their backfill) that
    /// `filter` admits: their vector if it has been stored since, else embedded now.
    fn pending_vectors(&self, filter: &Filter<'_>) -> Result<Vec<(i64, Vec<f32>)>> {
        let pending = self.index.pending(filter);
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let rows = self.store().vectors_or_content(&pending)?;
        let (ready, todo): (Vec<_>, Vec<_>) = rows.into_iter().partition(|r| !r.blob.is_empty());
        let mut out = Vec::with_capacity(ready.len() + todo.len());
        for r in ready {
            out.push((r.id, crate::spaces::from_blob(&r.blob)?));
        }
        let texts: Vec<&str> = todo.iter().map(|r| r.content.as_str()).collect();
        let embedded = self.embedder.embed(&texts)?;
        out.extend(todo.iter().zip(embedded.outer_iter()).map(|(r, v)| (r.id, v.to_vec())));
        Ok(out)
    }

    /// A sweep of what this engine holds (call [`Engine::refresh`] first to see other
    /// processes' commits): every memory (`kind = memory`, not forgotten, carrying every one
    /// of `tags`) with an id above `after`, scored exactly against `qv`; those at or above
    /// `min_score` best first, the best, the count, and the watermark to pass as `after`
    /// next time (see [`Sweep`]). Exact: no row above the threshold is missed. The loop
    /// gates' pass.
    pub fn sweep(&self, qv: &[f32], tags: &[String], after: i64, min_score: f32) -> Result<Sweep> {
        Ok(self.sweep_many(&[(qv, min_score)], tags, after)?.pop().unwrap_or_default())
    }

    /// [`Engine::sweep`] for several queries sharing `tags` and `after`, each at its own
    /// threshold: one tag query and one pass over the vectors for all of them (the gates of
    /// one run, [`crate::loops`]'s `GateSet`).
    pub fn sweep_many(&self, queries: &[(&[f32], f32)], tags: &[String], after: i64) -> Result<Vec<Sweep>> {
        let filter = Filter { include_laps: false, only_ids: None, after_id: after, min_score: f32::NEG_INFINITY };
        if tags.is_empty() {
            return Ok(self.index.sweep_many(queries, &filter));
        }
        // Bound the tag query by what the searcher holds, so a row committed in between is
        // neither swept without its tags checked nor passed by the watermark.
        let upto = self.index.last_id();
        // Nothing new since the watermark (an idle lap): no tag query.
        let ids = if upto > after { self.store().ids_with_all_tags_in(tags, after, upto)? } else { Vec::new() };
        let mut sweeps = self.index.sweep_many(queries, &Filter { only_ids: Some(&ids), ..filter });
        for s in &mut sweeps {
            s.upto = upto;
        }
        Ok(sweeps)
    }

    /// A tag-only gate's pass: every memory (`kind = memory`, not forgotten) with an id above
    /// `after` carrying every one of `tags`, oldest first, unscored (each counts as 1.0), and
    /// the watermark for the next pass. Reads the store alone: no vectors, no model.
    pub fn tag_sweep(&self, tags: &[String], after: i64) -> Result<Sweep> {
        let upto = self.store().max_id()?.max(after);
        let above = self.tagged_memories(tags, after, upto)?;
        Ok(Sweep { best: above.first().copied(), eligible: above.len() as u64, above, upto })
    }

    /// How many memories with an id up to `upto` carry every one of `tags` (what a tag-only
    /// gate's `since` keeps out).
    pub fn tag_sweep_upto(&self, tags: &[String], upto: i64) -> Result<usize> {
        Ok(self.tagged_memories(tags, 0, upto)?.len())
    }

    /// Memories (not ledger laps) in `after < id <= upto` carrying every one of `tags`,
    /// oldest first, each scored 1.0.
    fn tagged_memories(&self, tags: &[String], after: i64, upto: i64) -> Result<Vec<Scored>> {
        if upto <= after {
            return Ok(Vec::new());
        }
        let ids = self.store().ids_with_all_tags_in(tags, after, upto)?;
        let rows = if ids.is_empty() { Vec::new() } else { self.store().get_many(&ids)? };
        Ok(rows.iter().filter(|m| m.kind == Kind::Memory).map(|m| Scored { id: m.id, score: 1.0 }).collect())
    }

    /// Which of `ids` exist (primary-key probes).
    pub fn existing(&self, ids: &[i64]) -> Result<Vec<i64>> {
        self.store().existing(ids)
    }

    /// True when a row with this id exists (a primary-key probe).
    pub fn exists(&self, id: i64) -> Result<bool> {
        Ok(!self.store().existing(&[id])?.is_empty())
    }

    /// Records that rows were forgotten (seen from another process), so searches skip them.
    pub fn tombstone(&self, ids: &[i64]) {
        self.index.tombstone(ids);
        self.mirror.note_forgotten(ids);
    }

    /// Reports the progress of long index work (first catch-up of a large store, rebuilds)
    /// to `f(done, total)`; the CLI draws a progress bar with it on a terminal.
    pub fn set_progress(&self, f: ProgressFn) {
        self.mirror.set_progress(f);
    }

    /// The state of the data root's derived vector files (`slm index`). Reads only.
    pub fn index_files(&self) -> Result<IndexFiles> {
        self.mirror.status(&self.store(), &self.root)
    }

    /// Checks the search against brute force on `n` queries (half random unit vectors, half
    /// stored vectors with noise), 10 deep: returns `(queries, mismatches)`. `slm index verify`.
    pub fn verify_index(&self, n: usize) -> Result<(usize, usize)> {
        // The queries are generated up front (1.5 KiB each): an unchecked count is an
        // allocation that aborts the process.
        memory::validate_limit("queries", n, MAX_VERIFY_QUERIES)?;
        self.refresh()?;
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut r = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut queries = Vec::with_capacity(n);
        for i in 0..n {
            let mut v: Vec<f32> = match self.index.sample(i.wrapping_mul(7919)) {
                Some(base) if i % 2 == 1 => base.iter().map(|x| x + 0.03 * r()).collect(),
                _ => (0..crate::embed::DIM).map(|_| r()).collect(),
            };
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
            v.iter_mut().for_each(|x| *x /= norm);
            queries.push(v);
        }
        Ok((n, self.index.verify(&queries, 10)))
    }

    /// Rewrites the derived vector files from the store (`slm index rebuild`), dropping
    /// forgotten rows, and uses them from now on.
    pub fn rebuild_index(&self) -> Result<IndexFiles> {
        let files = self.mirror.rebuild(&self.store, &self.index)?;
        let memories = self.store().counts()?.memories;
        if memories as usize >= hnsw_min() {
            match self.index.rebuild_graph() {
                Some(Err(e)) => tracing::warn!("cannot save the HNSW graph: {e}"),
                Some(Ok(_)) => return self.index_files(),
                None => {}
            }
        }
        Ok(files)
    }

    /// Memories newest first (`limit` ≤ 1000), optionally filtered by tags, kind and paging.
    /// Memories that have expired are left out unless `include_expired`.
    pub fn list(&self, q: &ListQuery<'_>) -> Result<Vec<Memory>> {
        memory::validate_limit("limit", q.limit, MAX_LIMIT)?;
        let tags = memory::normalize_tags(q.tags)?;
        let now = (!q.include_expired).then(memory::now_rfc3339);
        let filter = crate::storage::ListFilter { tags: &tags, kind: q.kind, limit: q.limit, before: q.before, live_at: now.as_deref() };
        self.store().list(&filter)
    }

    /// Deletes every memory that has expired by now (`slm forget --expired`); returns their ids
    /// (none is not an error).
    pub fn forget_expired(&self) -> Result<Vec<i64>> {
        let gone = {
            let mut store = self.store();
            store.writable()?;
            let ids = store.expired_ids(&memory::now_rfc3339())?;
            if ids.is_empty() {
                return Ok(ids);
            }
            store.forget(&ids)?
        };
        self.index.tombstone(&gone);
        self.mirror.note_forgotten(&gone);
        self.announce(Topic::Memories);
        Ok(gone)
    }

    /// Fetches memories by id (missing ids are skipped).
    pub fn get(&self, ids: &[i64]) -> Result<Vec<Memory>> {
        self.store().get_many(ids)
    }

    /// Deletes memories by id. Unknown ids are a not-found error and nothing is deleted.
    pub fn forget(&self, ids: &[i64]) -> Result<Vec<i64>> {
        if ids.is_empty() {
            return Err(Error::invalid("id", "", "give at least one memory id"));
        }
        let gone = {
            let mut store = self.store();
            store.writable()?;
            let existing = store.existing(ids)?;
            if let Some(missing) = ids.iter().find(|id| !existing.contains(id)) {
                return Err(Error::NotFound { what: "memory", id: missing.to_string() });
            }
            store.forget(ids)?
        };
        self.index.tombstone(&gone);
        self.mirror.note_forgotten(&gone);
        self.announce(Topic::Memories);
        Ok(gone)
    }

    /// Runs SQLite's full integrity check (every page and index): `"ok"` or its findings.
    /// [`Engine::status`] reports the verdict afterwards.
    pub fn check_integrity(&self) -> Result<String> {
        self.store().check_integrity(true)
    }

    /// Counts, paths, model and index state. Never loads the model and never writes.
    pub fn status(&self) -> Result<Status> {
        // The store stays held while the index is asked: store then index is the allowed order
        // (ARCHITECTURE.md, "Locks, in order"), and the unit test below relies on this call
        // taking it, to catch a refresh that takes the reverse.
        let store = self.store();
        let crate::storage::Counts { memories, laps } = store.counts()?;
        let created_at = store.meta(crate::storage::CREATED_META)?;
        let files = crate::embed::ModelFiles::locate();
        Ok(Status {
            model_dir: files.as_ref().ok().map(|f| f.model_dir.clone()),
            models_source: files.as_ref().ok().and_then(|f| f.source).map(|s| s.describe().to_string()),
            runtime: files.as_ref().ok().map(|f| f.ort_lib.clone()),
            model_error: files.as_ref().err().map(|e| e.to_string()),
            data_dir: self.root.clone(),
            db_path: store.path().to_path_buf(),
            schema_version: store.schema_version(),
            memories,
            laps,
            model: self.embedder.model_name().to_string(),
            model_loaded: self.embedder.is_loaded(),
            index: self.index.state(),
            memory: self.index.memory(),
            read_only: store.read_only(),
            created_at,
            integrity: store.integrity().unwrap_or("not checked").to_string(),
        })
    }
}

/// A fresh random store id: 32 hex digits from the OS RNG (a clock-and-pid fallback keeps a
/// write from failing where no RNG answers; the id only has to differ between stores).
fn new_store_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        b = (t ^ (u128::from(std::process::id()) << 64)).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn to_hits(candidates: &[Scored], rows: Vec<Memory>) -> Vec<Hit> {
    let mut by_id: std::collections::HashMap<i64, Memory> = rows.into_iter().map(|m| (m.id, m)).collect();
    candidates
        .iter()
        .filter_map(|s| {
            by_id.remove(&s.id).map(|m| Hit {
                id: m.id,
                content: m.content,
                tags: m.tags,
                score: s.score,
                created_at: m.created_at,
                kind: m.kind,
                expires_at: m.expires_at,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;

    fn engine(dir: &Path) -> Engine {
        let root = DataRoot { dir: dir.join("data"), explicit: true, store: None };
        Engine::open(&root, Arc::new(HashEmbedder)).unwrap()
    }

    fn top_ids(e: &Engine, q: &str, k: usize) -> Vec<i64> {
        let mut rq = RecallQuery::new(q);
        rq.limit = k;
        e.recall(&rq).unwrap().hits.iter().map(|h| h.id).collect()
    }

    #[test]
    fn background_hnsw_agrees_with_exact_and_keeps_up() {
        let tmp = tempfile::tempdir().unwrap();
        let exact = engine(tmp.path());
        let items: Vec<(String, Vec<String>)> =
            (0..2500).map(|i| (format!("note {i} about topic {} and {}", i % 23, i % 7), vec![])).collect();
        let refs: Vec<(&str, &[String])> = items.iter().map(|(c, t)| (c.as_str(), t.as_slice())).collect();
        exact.remember_batch(&refs).unwrap();

        // Enough rows for derived files (crate::mirror::MIRROR_MIN): the graph's links are
        // positions in them.
        let fast = engine(tmp.path()).with_background_index(2000);
        assert_eq!(fast.status().unwrap().index.mode, "exact");
        let _ = top_ids(&fast, "topic 5", 5); // triggers the build
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while fast.status().unwrap().index.mode != "hnsw" {
            assert!(std::time::Instant::now() < deadline, "HNSW build did not finish");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(fast.status().unwrap().index.hnsw_vectors, 2500);
        // The top hit of an exact scan is found through the graph, with the same exact score.
        for q in ["note 17 about topic 17 and 3", "topic 9 and 2", "note 250"] {
            let a = top_ids(&exact, q, 1);
            let b = top_ids(&fast, q, 1);
            assert_eq!(a, b, "query {q:?}");
        }
        // A memory written after the build is found on the next recall (exact tail scan).
        let new = exact.remember("a completely new sentence about zebras", &[]).unwrap();
        assert_eq!(top_ids(&fast, "completely new sentence about zebras", 1), vec![new.id]);
        assert_eq!(fast.status().unwrap().index.hnsw_vectors, 2500);
        // A memory forgotten elsewhere disappears from graph results.
        exact.forget(&[new.id]).unwrap();
        assert!(!top_ids(&fast, "completely new sentence about zebras", 5).contains(&new.id));
    }

    #[test]
    fn laps_are_hidden_unless_asked_for() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        e.remember("gate passed for the build", &[]).unwrap();
        let tags = vec!["loop".to_string(), "loop:ci".to_string()];
        e.insert_rows(Kind::Lap, &[("lap 1 gate passed for the build", tags)]).unwrap();
        assert_eq!(top_ids(&e, "gate passed build", 10).len(), 1);
        let mut q = RecallQuery::new("gate passed build");
        q.tags = vec!["loop:ci".into()];
        let hits = e.recall(&q).unwrap().hits;
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].kind, Kind::Lap);
        q.tags.clear();
        q.include_laps = true;
        assert_eq!(e.recall(&q).unwrap().hits.len(), 2);
    }

    #[test]
    fn rows_stored_without_vectors_are_recalled_and_backfilled() {
        let tmp = tempfile::tempdir().unwrap();
        let e = engine(tmp.path());
        let tags = vec!["loop".to_string(), "loop:agent".to_string()];
        let id = e.insert_pending(Kind::Lap, &[("loop agent lap 1: gate command failed", tags.clone())], &[]).unwrap()[0].id;
        e.remember("an unrelated memory", &[]).unwrap();
        let mut q = RecallQuery::new("gate command failed");
        q.tags = vec!["loop:agent".into()];
        let want = crate::spaces::cosine(
            &HashEmbedder::vector("gate command failed"),
            &HashEmbedder::vector("loop agent lap 1: gate command failed"),
        );
        let before = e.recall(&q).unwrap().hits;
        assert_eq!(before.len(), 1);
        assert_eq!(before[0].id, id);
        assert!((before[0].score - want).abs() < 1e-6, "embedded on the fly");
        // Not visible without laps, even pending.
        assert!(top_ids(&e, "gate command failed", 10).iter().all(|i| *i != id));
        assert_eq!(e.backfill_pending(100).unwrap(), 1);
        assert_eq!(e.backfill_pending(100).unwrap(), 0);
        assert!(e.store().pending_rows(10).unwrap().is_empty());
        let after = e.recall(&q).unwrap().hits;
        assert!((after[0].score - want).abs() < 1e-6, "the stored vector gives the same score");
        // A fresh process sees it as an ordinary row.
        let fresh = engine(tmp.path());
        assert_eq!(fresh.recall(&q).unwrap().hits[0].id, id);
    }

    #[test]
    fn a_data_root_written_by_one_model_refuses_another() {
        struct Other;
        impl Embedder for Other {
            fn embed(&self, t: &[&str]) -> Result<ndarray::Array2<f32>> {
                HashEmbedder.embed(t)
            }
            fn count_tokens(&self, t: &str) -> Result<usize> {
                HashEmbedder.count_tokens(t)
            }
            fn model_name(&self) -> &str {
                "other-model"
            }
        }
        let tmp = tempfile::tempdir().unwrap();
        engine(tmp.path()).remember("x", &[]).unwrap();
        let root = DataRoot { dir: tmp.path().join("data"), explicit: true, store: None };
        let err = Engine::open(&root, Arc::new(Other)).err().expect("must refuse");
        assert!(err.to_string().contains("other-model"), "{err}");
    }

    /// `status` (store, then index) and a refresh catching up with another process's rows
    /// (index, then store, before the fix) once waited on each other for ever in one MCP
    /// server; `status` still takes store then index, so a refresh that took the reverse
    /// order again would hang here. Both run side by side many times; the watchdog fails the
    /// test instead of hanging it.
    #[test]
    fn status_and_refresh_never_wait_on_each_other() {
        let tmp = tempfile::tempdir().unwrap();
        let reader = Arc::new(engine(tmp.path()));
        let writer = engine(tmp.path());
        reader.remember("first", &[]).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let (r, d) = (Arc::clone(&reader), done.clone());
        let refreshing = std::thread::spawn(move || {
            for i in 0..400 {
                writer.remember(&format!("row {i} from another process"), &[]).unwrap();
                r.refresh().unwrap();
            }
            d.send("refresh").unwrap();
        });
        let (r, d) = (Arc::clone(&reader), done);
        let asking = std::thread::spawn(move || {
            let mut last = 0;
            for _ in 0..4000 {
                last = r.status().unwrap().memories;
            }
            d.send(if last > 0 { "status" } else { "status saw no rows" }).unwrap();
        });
        for _ in 0..2 {
            let who = finished.recv_timeout(std::time::Duration::from_secs(120)).expect("status and refresh deadlocked");
            assert_ne!(who, "status saw no rows");
        }
        refreshing.join().unwrap();
        asking.join().unwrap();
        assert_eq!(reader.status().unwrap().memories, 401);
        assert_eq!(reader.index.last_id(), 401);
    }
}
