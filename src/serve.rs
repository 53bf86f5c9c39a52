//! What the long-lived surfaces (`slm mcp`, `slm dashboard`) share: start-up (an engine that
//! may build an HNSW graph in the background, and a small tokio runtime to serve it on) and
//! the helper that runs blocking engine work off the async workers.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::engine::{DataRoot, Engine, HNSW_MIN};
use crate::{Error, Result};

/// Opens the data root for a server and builds the runtime it runs on (2 workers: the
/// machines slm targets have few cores, and blocking work goes to tokio's blocking pool).
pub fn long_lived(root: &DataRoot, embedder: Arc<dyn Embedder>) -> Result<(Arc<Engine>, tokio::runtime::Runtime)> {
    let engine = Arc::new(Engine::open(root, embedder)?.with_background_index(HNSW_MIN));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    Ok((engine, runtime))
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
