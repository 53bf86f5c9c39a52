//! The MCP surface: `slm mcp` serves the engine's tools over stdio with `rmcp`.
//!
//! [`server`] holds the tools (thin adapters over [`crate::engine`] and [`crate::loops`]),
//! [`profile`] the nested tool sets. The engine is opened before serving (a cheap SQLite
//! open), the model loads lazily on the first tool that embeds, so `initialize` and
//! `tools/list` are answered at once. The server exits when stdin closes.

pub mod profile;
pub mod schema;
pub mod server;

use std::sync::Arc;

use rmcp::ServiceExt;

pub use profile::Profile;
pub use server::SlmServer;

use crate::engine::DataRoot;
use crate::{Error, Result};

/// Serves MCP on stdin/stdout until stdin closes.
pub fn serve_stdio(root: &DataRoot, profile: Profile, embedder: Arc<dyn crate::embed::Embedder>) -> Result<()> {
    let (engine, runtime) = crate::serve::long_lived(root, embedder)?;
    let result = runtime.block_on(async move {
        let server = SlmServer::new(engine, profile);
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| Error::Io { context: "MCP handshake failed".into(), source: std::io::Error::other(e.to_string()) })?;
        running
            .waiting()
            .await
            .map_err(|e| Error::Io { context: "MCP server stopped".into(), source: std::io::Error::other(e.to_string()) })?;
        Ok(())
    });
    // Blocking work (a loop being cancelled) gets a moment to finish; then we go.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
