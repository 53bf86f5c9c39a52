//! The loop runtime of one process: what only loops need, kept out of the memory engine.
//!
//! A [`LoopHost`] wraps the process's [`Engine`] (it derefs to it, so loop code reads
//! memories, the store and the feed through it) and owns what the loops of the process
//! share: the ledger writer that commits every blocking run's laps in batches, the gate
//! queries already embedded, the gate refresh and the cancel requests that a thousand
//! waiting loops read once (see [`crate::fresh`]). The engine knows nothing of it: the host
//! hears of the engine's commits through [`Engine::on_announce`] and counts its runs as
//! foreground work ([`Engine::busy`]) so background embedding yields to them.
//!
//! Surfaces make one host per process next to their engine (the CLI for a `loop` command,
//! the MCP server at start) and hand it to [`super::run_memory_loop`], [`super::demo`] and
//! the agent-driven [`super::command`] calls; the read-only loop helpers take the engine.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::engine::Engine;
use crate::feed::Topic;
use crate::fresh::Fresh;
use crate::index::exact::Sweep;
use crate::storage::writer::LedgerWriter;
use crate::Result;

/// An embedded gate query and its token count.
pub type QueryVector = (Arc<[f32]>, u64);

/// Most gate queries [`LoopHost::query_vector`] keeps.
const QUERY_CACHE: usize = 256;

/// Longest sleep between two cancellation checks, and the oldest the shared view of the
/// runs asked to stop may be.
pub const CANCEL_SLICE: Duration = Duration::from_millis(40);

/// Longest a waiting loop's view of new memories is shared without a feed announcement: a
/// writer that does not announce is seen within this (on top of the poll interval).
const GATE_FRESH: Duration = Duration::from_millis(50);

/// The loops' share of one process: see the module docs.
pub struct LoopHost {
    engine: Arc<Engine>,
    /// Commits the laps and ends of this process's blocking runs in batches (started on
    /// first use; dropping it writes what is queued).
    ledger_writer: OnceLock<LedgerWriter>,
    /// Gate queries already embedded, with their token counts: many loops waiting on the same
    /// signal embed it once (a model call costs milliseconds; the text decides the vector).
    query_vectors: Mutex<HashMap<String, QueryVector>>,
    /// The gate refresh that waiting loops share.
    gate_fresh: Arc<Fresh<()>>,
    /// The runs asked to stop through the store, read once for every waiting loop.
    cancelling: Arc<Fresh<HashSet<String>>>,
    /// The store's forget counter read by the last gate refresh (-1: not read yet).
    forgets: AtomicI64,
}

impl std::ops::Deref for LoopHost {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl LoopHost {
    /// The loop runtime over `engine`. Its shared views are invalidated by the engine's own
    /// commits at once (this process's loops must not wait for the file watch to see them).
    pub fn new(engine: Arc<Engine>) -> LoopHost {
        let gate_fresh: Arc<Fresh<()>> = Arc::default();
        let cancelling: Arc<Fresh<HashSet<String>>> = Arc::default();
        let (g, c) = (Arc::downgrade(&gate_fresh), Arc::downgrade(&cancelling));
        engine.on_announce(Box::new(move |topic| match topic {
            Topic::Memories => {
                if let Some(g) = g.upgrade() {
                    g.invalidate();
                }
            }
            Topic::Control => {
                if let Some(c) = c.upgrade() {
                    c.invalidate();
                }
            }
            Topic::Ledger => {}
        }));
        LoopHost {
            engine,
            ledger_writer: OnceLock::new(),
            query_vectors: Mutex::new(HashMap::new()),
            gate_fresh,
            cancelling,
            forgets: AtomicI64::new(-1),
        }
    }

    /// True when `run_id` was asked to stop through the store (`slm loop cancel` from any
    /// process). One read serves every waiting loop of this process: it is redone after a
    /// control announcement, and at least every [`CANCEL_SLICE`] (the fallback
    /// for writers that do not announce, and for no feed at all).
    pub fn cancel_requested(&self, run_id: &str) -> Result<bool> {
        let generation = self.engine.feed_started().map(|f| f.control_generation());
        let set = self.cancelling.get(generation, CANCEL_SLICE, || self.engine.store().runs_cancelling())?;
        Ok(set.contains(run_id))
    }

    /// The ledger writer of this process's blocking runs (started on first use).
    pub(crate) fn ledger_writer(&self) -> &LedgerWriter {
        self.ledger_writer.get_or_init(|| {
            let root = self.engine.data_dir().to_path_buf();
            LedgerWriter::start(self.engine.location().clone(), Box::new(move || crate::feed::announce(&root, Topic::Ledger)))
        })
    }

    /// Stores what the ledger writer still holds and stops it (later laps are refused and
    /// counted as ledger errors). For a one-shot process that exits without dropping it.
    pub fn flush_ledger(&self) {
        if let Some(w) = self.ledger_writer.get() {
            w.close();
        }
    }

    /// The vector and token count of a gate query, embedded once per process and text.
    pub fn query_vector(&self, query: &str) -> Result<QueryVector> {
        // Held across the model call: a thousand loops starting on one query wait for the
        // first embedding instead of all running the model (which serialises them anyway).
        let mut cache = self.query_vectors.lock();
        if let Some(hit) = cache.get(query) {
            return Ok(hit.clone());
        }
        let tokens = self.engine.embedder().count_tokens(query)? as u64;
        let v: Arc<[f32]> = self.engine.embed_query(query)?.into();
        if cache.len() >= QUERY_CACHE {
            cache.clear();
        }
        cache.insert(query.to_string(), (Arc::clone(&v), tokens));
        Ok((v, tokens))
    }

    /// [`Engine::refresh`] as a gate needs it. Waiting loops share one look at the store
    /// while the feed announces nothing (see crate::fresh); without a feed every call looks.
    /// A new gate calls this before embedding its query, so that in a fresh process the
    /// store is read while the model loads. (In `loop run` the gate is built before the run
    /// subscribes to the feed, so its first sweep reads what arrived meanwhile, typically
    /// nothing: one cheap query.)
    ///
    /// The same look reads the store's forget counter ([`crate::storage::MemoryRows::forgets`]),
    /// kept for [`LoopHost::forgets_seen`].
    pub fn refresh_for_gate(&self) -> Result<()> {
        let load = || {
            self.engine.refresh()?;
            let n = self.engine.store().forgets()?;
            self.forgets.store(n, Ordering::Release);
            Ok(())
        };
        match self.engine.feed_started().map(|f| f.gate().generation()) {
            Some(g) => self.gate_fresh.get(Some(g), GATE_FRESH, load).map(|_| ()),
            None => load(),
        }
    }

    /// The store's forget counter as of the last gate refresh: a gate holding a memory by id
    /// asks the store whether it still exists only when this has moved since it last asked,
    /// so an idle lap reads nothing from the store.
    pub fn forgets_seen(&self) -> i64 {
        self.forgets.load(Ordering::Acquire)
    }

    /// A loop gate's pass over what the store holds now (see [`Engine::sweep`]).
    pub fn gate_sweep(&self, qv: &[f32], tags: &[String], after: i64, min_score: f32) -> Result<Sweep> {
        self.refresh_for_gate()?;
        self.engine.sweep(qv, tags, after, min_score)
    }
}
