//! slm: a local memory engine for AI agents.
//!
//! Agents `remember` text; it is embedded locally ([`embed`]), stored in SQLite
//! ([`storage`]) and recalled by exact cosine similarity ([`index`], [`spaces`]). The
//! [`engine::Engine`] ties these together; [`loops`] runs bounded loops on top of it. The
//! surfaces (the `slm` CLI in `src/main.rs` and `src/cli/`, [`mcp`], [`dashboard`]) talk to
//! those two and nothing below. `ARCHITECTURE.md` walks the data flow.
//!
//! ```no_run
//! use std::sync::Arc;
//! use slm::engine::{DataRoot, Engine, RecallQuery};
//! use slm::embed::OnnxEmbedder;
//!
//! # fn main() -> slm::Result<()> {
//! let root = DataRoot::resolve(Some("/tmp/slm-demo".into()))?;
//! let engine = Engine::open(&root, Arc::new(OnnxEmbedder::locate()))?;
//! engine.remember("review complete: PR #42 is approved", &["pr-42".to_string()])?;
//! let found = engine.recall(&RecallQuery::new("PR 42 approved"))?;
//! assert!(found.hits[0].score > 0.8);
//! # Ok(()) }
//! ```

pub mod dashboard;
pub mod embed;
pub mod engine;
mod error;
pub mod expiry;
pub mod export;
pub mod feed;
pub mod fresh;
pub mod import;
pub mod index;
pub mod loops;
pub mod mcp;
pub mod memory;
pub mod memstat;
pub mod mirror;
pub mod nli;
pub mod record;
pub mod serve;
pub mod spaces;
pub mod storage;

pub use error::{Error, ErrorBody, ErrorEnvelope, Result};
