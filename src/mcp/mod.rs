//! The MCP surface: `slm mcp` serves the engine's tools over stdio with `rmcp`.
//!
//! [`server`] holds the tools (thin adapters over [`crate::engine`] and [`crate::loops`]),
//! [`profile`] the nested tool sets, [`envelope`] the JSON-RPC envelope check that stands
//! between stdio and rmcp (it answers malformed lines rmcp would drop or answer without id). The engine is opened before serving (a cheap SQLite
//! open), the model loads lazily on the first tool that embeds, so `initialize` and
//! `tools/list` are answered at once. The server exits when stdin closes.

pub mod envelope;
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
        // stdin → envelope check → rmcp → stdout; the check's own answers share stdout.
        let (stdin, stdout) = rmcp::transport::stdio();
        let (rmcp_in, filter_out) = tokio::io::duplex(1 << 16);
        let (rmcp_out, forward_in) = tokio::io::duplex(1 << 16);
        let (lines_tx, lines_rx) = tokio::sync::mpsc::unbounded_channel();
        let writer = tokio::spawn(envelope::write_lines(stdout, lines_rx));
        tokio::spawn(envelope::filter_input(stdin, filter_out, lines_tx.clone()));
        tokio::spawn(envelope::forward_output(forward_in, lines_tx));
        let running = server
            .serve((rmcp_in, rmcp_out))
            .await
            .map_err(|e| Error::Io { context: "MCP handshake failed".into(), source: std::io::Error::other(e.to_string()) })?;
        running
            .waiting()
            .await
            .map_err(|e| Error::Io { context: "MCP server stopped".into(), source: std::io::Error::other(e.to_string()) })?;
        // rmcp has stopped: let what it and the check wrote reach stdout.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
        Ok(())
    });
    // Blocking work (a loop being cancelled) gets a moment to finish; then we go.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
