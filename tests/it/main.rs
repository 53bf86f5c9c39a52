//! Integration tests, compiled as one binary so linking stays fast on 2 cores.
//!
//! They run the real `slm` binary as a subprocess against a real SQLite file in a temporary
//! data root, with the real model installed by `scripts/setup.sh`.

mod adversarial;
mod agent_loops;
mod cli_conventions;
mod common;
mod concurrency;
mod coordination;
mod dashboard;
mod deps;
mod derived_files;
mod docs;
mod errors;
mod feed;
mod gate_model;
mod gate_verify;
mod hard_edges_loops;
mod hard_edges_store;
mod import;
mod loops;
mod mcp_inproc;
mod mcp_python;
mod mcp_stdio;
mod mcp_ts;
mod memory_cli;
mod nli;
mod pg;
mod pg_store;
mod pg_tls;
mod plugin;
mod setup;
mod wheel;
