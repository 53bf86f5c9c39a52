//! What the long-lived surfaces (`slm mcp`, `slm dashboard`) share: start-up (an engine that
//! may build an HNSW graph in the background, and a small tokio runtime to serve it on) and
//! the helper that runs blocking engine work off the async workers.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::engine::{DataRoot, Engine};
use crate::{Error, Result};

/// Opens the data root for a server and builds the runtime it runs on (2 workers: the
/// machines slm targets have few cores, and blocking work goes to tokio's blocking pool).
pub fn long_lived(root: &DataRoot, embedder: Arc<dyn Embedder>) -> Result<(Arc<Engine>, tokio::runtime::Runtime)> {
    let engine = Arc::new(Engine::open(root, embedder)?.with_background_index(crate::engine::hnsw_min()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // A waiting loop holds one blocking thread asleep on the change feed (no CPU); a
        // thousand of them must not queue behind tokio's default cap of 512.
        .max_blocking_threads(MAX_BLOCKING)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    spawn_ledger_embedder(&engine);
    Ok((engine, runtime))
}

/// Blocking threads of a server: waiting loops plus ordinary requests.
const MAX_BLOCKING: usize = 2048;

/// How often the ledger embedder looks for laps stored without a vector.
const EMBED_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Embeds ledger laps stored without their vector (loops write them so, to keep idle laps
/// cheap), a batch at a time, but only while no loop waits in this process: waiting must stay
/// free, and recall embeds any lap it needs on the fly meanwhile.
fn spawn_ledger_embedder(engine: &Arc<Engine>) {
    let weak = Arc::downgrade(engine);
    let _ = std::thread::Builder::new().name("slm-ledger-embed".into()).spawn(move || loop {
        std::thread::sleep(EMBED_EVERY);
        let Some(engine) = weak.upgrade() else { return };
        if engine.busy_count() == 0 {
            if let Err(e) = engine.backfill_pending(64) {
                tracing::warn!("embedding ledger laps failed: {e}");
            }
        }
    });
}

/// Runs blocking engine work (embedding, SQLite) on tokio's blocking pool, so a slow call
/// never holds up other requests; a worker that panicked becomes [`Error::Internal`].
pub async fn blocking<T, F>(engine: &Arc<Engine>, f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce(&Engine) -> Result<T> + Send + 'static,
{
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || f(&engine)).await.unwrap_or_else(|join| Err(Error::Internal(join.to_string())))
}
