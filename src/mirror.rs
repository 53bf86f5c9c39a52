//! Keeps the data root's derived vector files ([`crate::index::derived`]) in step with the
//! store, and hands them to the searcher as its mapped base.
//!
//! The engine calls [`Mirror::sync`] before every search. It is cheap when nothing changed
//! (no system call). It does real work in four cases:
//! - the first search of a process: map the live generation after checking that it mirrors
//!   this store (the store's id, no row issued past its end missing from the store's
//!   sequence, sampled rows byte for byte); a mismatch (a restored backup, another store's
//!   files, damage) rebuilds it, so a stale or wrong vector is never served;
//! - a store with many rows and no files, or files behind the store: stream the missing
//!   rows from the store straight into the files (with a progress bar on a terminal), instead
//!   of loading them into this process's heap;
//! - this process's in-memory tail has grown past [`APPEND_AT`] rows: append them and remap;
//! - about once a second, notice that another process rebuilt the files (new generation).
//!
//! Small stores (under [`MIRROR_MIN`] rows) never get files: the in-memory path is as fast,
//! and a `slm remember` never touches them at all. Read-only data roots, stores without an id
//! yet (never written by this version) and `SLM_INDEX_FILES=off` keep everything in memory,
//! exactly as before the files existed.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use crate::index::derived::{self, Derived, Head};
use crate::index::Searcher;
use crate::storage::Store;
use crate::{Error, Result};

/// Rows a store needs before it gets derived files.
pub const MIRROR_MIN: usize = 2_048;

/// In-memory rows that trigger an append to the files.
pub const APPEND_AT: usize = 1_024;

/// The meta key holding the store's random id (32 hex digits), set by the first write.
pub const STORE_ID_META: &str = "store_id";

/// How often a process looks for a generation switched by another process.
const GENERATION_CHECK: Duration = Duration::from_secs(1);

/// Progress of long work: `(done, total)` rows.
pub type ProgressFn = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// What `slm index` reports.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct IndexFiles {
    /// Where the files are.
    pub dir: std::path::PathBuf,
    /// `ready`, `missing` (no files yet), `disabled` (read-only or `SLM_INDEX_FILES=off`), or
    /// `foreign` (the files mirror another store; the next search rebuilds them).
    pub state: &'static str,
    pub generation: Option<u64>,
    /// Rows with vectors in the files.
    pub rows: u64,
    /// The largest row id the files account for.
    pub upto: i64,
    /// Rows stored without a vector when appended (scored from the store).
    pub pending: u64,
    /// Rows known to be forgotten (dropped by the next rebuild).
    pub forgotten: u64,
    /// Rows the store has issued past the files' end (caught up by the next search).
    pub behind: i64,
    /// Bytes on disk.
    pub bytes: u64,
    /// The HNSW graph saved for this generation (long-lived processes build, extend and
    /// reload it), if any: the rows it covers (`upto`, `vectors`) and its size (`bytes`).
    pub graph: Option<crate::index::graph_file::GraphMeta>,
}

#[derive(Default)]
struct State {
    /// The files were looked at by this process.
    started: bool,
    /// This store cannot have files (no id, or they failed once): stay in memory.
    off: bool,
    store_id: Option<[u8; 32]>,
    generation: Option<u64>,
    checked_at: Option<Instant>,
    /// Forgotten ids to record at the next append.
    forgotten: Vec<i64>,
}

/// The derived files of one engine's data root and what this process knows of them.
pub struct Mirror {
    derived: Option<Derived>,
    state: Mutex<State>,
    progress: Mutex<Option<ProgressFn>>,
}

impl Mirror {
    /// The mirror of the data root `root` (disabled on read-only media or with
    /// `SLM_INDEX_FILES=off`).
    pub fn new(root: &Path) -> Mirror {
        let enabled = std::env::var("SLM_INDEX_FILES").map_or(true, |v| v != "off");
        Mirror {
            derived: if enabled { Derived::open(root) } else { None },
            state: Mutex::new(State::default()),
            progress: Mutex::new(None),
        }
    }

    /// Reports the progress of long catch-ups and rebuilds to `f`.
    pub fn set_progress(&self, f: ProgressFn) {
        *self.progress.lock() = Some(f);
    }

    fn report(&self) -> impl FnMut(u64) + '_ {
        let f = self.progress.lock().clone();
        let mut total = 0u64;
        move |done| {
            if let Some(f) = &f {
                total = total.max(done);
                f(done, total);
            }
        }
    }

    /// Brings the searcher's mapped base up to date with the store (see the module docs).
    pub fn sync(&self, store: &Mutex<Store>, index: &Searcher) -> Result<()> {
        let Some(d) = &self.derived else { return Ok(()) };
        let mut st = self.state.lock();
        if st.off {
            return Ok(());
        }
        let outcome = self.sync_locked(d, &mut st, store, index);
        if let Err(e) = &outcome {
            // The files are a cache: a failure to keep them is logged once and the process
            // goes on with vectors in memory, which are always right.
            tracing::warn!("derived vector files unusable, keeping vectors in memory: {e}");
            st.off = true;
        }
        Ok(())
    }

    fn sync_locked(&self, d: &Derived, st: &mut State, store: &Mutex<Store>, index: &Searcher) -> Result<()> {
        if !st.started {
            st.started = true;
            let Some(id) = store.lock().meta(STORE_ID_META)? else {
                st.off = true;
                return Ok(());
            };
            st.store_id = Some(derived::store_id_bytes(&id));
            self.first_open(d, st, store, index)?;
            st.checked_at = Some(Instant::now());
            return Ok(());
        }
        let stale_check = st.checked_at.is_none_or(|t| t.elapsed() >= GENERATION_CHECK);
        if stale_check && st.generation.is_some() {
            st.checked_at = Some(Instant::now());
            if d.current() != st.generation {
                self.load(d, st, store, index)?;
            }
        }
        if index.tail_len() >= APPEND_AT || (!st.forgotten.is_empty() && st.generation.is_some()) {
            self.append(d, st, store, index)?;
        }
        Ok(())
    }

    /// Maps the live generation if it mirrors this store, rebuilds it if not, and streams a
    /// large backlog into it.
    fn first_open(&self, d: &Derived, st: &mut State, store: &Mutex<Store>, index: &Searcher) -> Result<()> {
        // The head first: the marks read after it cover every id it accounts for.
        let head = d.head();
        let crate::storage::IdMarks { max, issued } = store.lock().id_marks()?;
        match head {
            Some((_, head)) => {
                if Some(head.store_id) != st.store_id || !self.matches(d, &head, issued, store)? {
                    tracing::info!("derived vector files do not match the store; rebuilding");
                    self.rebuild_locked(d, st, store)?;
                } else if max > head.upto {
                    // Rows arrived since the last append: add them now, so this process maps
                    // everything and the next one starts from here too.
                    self.append_from_store(d, st, store)?;
                }
            }
            None if max >= MIRROR_MIN as i64 => {
                self.append_from_store(d, st, store)?;
            }
            None => return Ok(()),
        }
        self.load(d, st, store, index)
    }

    /// True when the live generation is a faithful copy of the store so far: the store has
    /// issued every id the head accounts for (`issued`, read after the head), and sampled rows
    /// carry the same bytes.
    fn matches(&self, d: &Derived, head: &Head, issued: i64, store: &Mutex<Store>) -> Result<bool> {
        if issued < head.upto {
            return Ok(false);
        }
        let store = store.lock();
        let Some(seg) = d.load()? else { return Ok(false) };
        let n = seg.len();
        if n == 0 {
            return Ok(true);
        }
        let ids = seg.ids();
        let mut samples: Vec<usize> = vec![n - 1, 0, n / 2, n / 4, 3 * n / 4, n / 8, 7 * n / 8];
        samples.dedup();
        for &pos in &samples {
            if ids.get(pos).is_none_or(|id| pos > 0 && *id <= ids[pos - 1]) {
                return Ok(false);
            }
        }
        // One read for all the samples (a round trip each would be most of a PostgreSQL
        // process's start-up).
        let stored = store.vector_blobs(&samples.iter().map(|&p| ids[p]).collect::<Vec<_>>())?;
        Ok(samples.iter().all(|&pos| stored.get(&ids[pos]).is_none_or(|blob| *blob == crate::spaces::to_blob(seg.vector(pos)))))
    }

    fn append_from_store(&self, d: &Derived, st: &mut State, store: &Mutex<Store>) -> Result<Option<Head>> {
        let id = st.store_id.ok_or_else(|| Error::Corrupt("store id missing".into()))?;
        let forgotten = std::mem::take(&mut st.forgotten);
        let mut report = self.report();
        let head = d.append(&id, &forgotten, &mut |after, visit| store.lock().vectors_after(after, None, visit), &mut |n| report(n))?;
        if head.is_none() {
            // Another store's files: replace them.
            self.rebuild_locked(d, st, store)?;
        }
        Ok(head)
    }

    fn append(&self, d: &Derived, st: &mut State, store: &Mutex<Store>, index: &Searcher) -> Result<()> {
        if st.generation.is_none() && index.tail_len() < MIRROR_MIN {
            return Ok(());
        }
        self.append_from_store(d, st, store)?;
        self.load(d, st, store, index)
    }

    fn rebuild_locked(&self, d: &Derived, st: &mut State, store: &Mutex<Store>) -> Result<Head> {
        let id = st.store_id.ok_or_else(|| Error::Corrupt("store id missing".into()))?;
        st.forgotten.clear();
        let mut report = self.report();
        d.rebuild(&id, &mut |after, visit| store.lock().vectors_after(after, None, visit), &mut |n| report(n))
    }

    fn load(&self, d: &Derived, st: &mut State, store: &Mutex<Store>, index: &Searcher) -> Result<()> {
        let Some(seg) = d.load()? else { return Ok(()) };
        if Some(seg.head.store_id) != st.store_id {
            self.rebuild_locked(d, st, store)?;
            return self.load_again(d, st, index);
        }
        st.generation = Some(seg.generation);
        index.set_base(Arc::new(seg));
        Ok(())
    }

    fn load_again(&self, d: &Derived, st: &mut State, index: &Searcher) -> Result<()> {
        if let Some(seg) = d.load()? {
            st.generation = Some(seg.generation);
            index.set_base(Arc::new(seg));
        }
        Ok(())
    }

    /// Notes ids forgotten (by this process, or found missing) for the next append.
    pub fn note_forgotten(&self, ids: &[i64]) {
        if self.derived.is_some() {
            self.state.lock().forgotten.extend_from_slice(ids);
        }
    }

    /// What the files hold, for `slm index`. Reads only.
    pub fn status(&self, store: &Store, root: &Path) -> Result<IndexFiles> {
        let dir = root.join(derived::DIR);
        let mut out = IndexFiles {
            dir: dir.clone(),
            state: "disabled",
            generation: None,
            rows: 0,
            upto: 0,
            pending: 0,
            forgotten: 0,
            behind: store.max_id()?,
            bytes: 0,
            graph: None,
        };
        let Some(d) = &self.derived else { return Ok(out) };
        let Some((g, head)) = d.head() else {
            out.state = "missing";
            return Ok(out);
        };
        let own = store.meta(STORE_ID_META)?.map(|s| derived::store_id_bytes(&s));
        out.state = if own == Some(head.store_id) { "ready" } else { "foreign" };
        out.generation = Some(g);
        out.rows = head.rows;
        out.upto = head.upto;
        out.pending = head.pending;
        out.forgotten = head.forgotten;
        out.behind = (store.max_id()? - head.upto).max(0);
        out.graph = own.as_ref().and_then(|id| {
            crate::index::graph_file::GraphHome {
                dir: dir.join(format!("g{g}")),
                store_id: String::from_utf8_lossy(id).into_owned(),
                generation: g,
            }
            .meta()
        });
        out.bytes = std::fs::read_dir(dir.join(format!("g{g}")))
            .map(|es| es.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0);
        Ok(out)
    }

    /// Rewrites the files from the store (compacting forgotten rows) and maps them.
    pub fn rebuild(&self, store: &Mutex<Store>, index: &Searcher) -> Result<IndexFiles> {
        let d = self
            .derived
            .as_ref()
            .ok_or_else(|| Error::invalid("index", "", "derived files are disabled here (read-only data root or SLM_INDEX_FILES=off)"))?;
        let mut st = self.state.lock();
        let id = match store.lock().meta(STORE_ID_META)? {
            Some(id) => id,
            None => return Err(Error::invalid("index", "", "the store has no memories yet; nothing to index")),
        };
        st.started = true;
        st.off = false;
        st.store_id = Some(derived::store_id_bytes(&id));
        self.rebuild_locked(d, &mut st, store)?;
        self.load_again(d, &mut st, index)?;
        st.checked_at = Some(Instant::now());
        drop(st);
        let store = store.lock();
        let root = d.dir().parent().unwrap_or(Path::new("."));
        self.status(&store, root)
    }
}
