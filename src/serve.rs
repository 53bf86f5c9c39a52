//! Shared start-up of the long-lived surfaces (`slm mcp`, `slm dashboard`): an engine that may
//! build an HNSW graph in the background, and a small tokio runtime to serve it on.

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
