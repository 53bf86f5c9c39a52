//! `slm mcp` driven by the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`, pinned in
//! tests/mcp-ts/package.json and installed by scripts/test.sh with `npm ci`): every profile's
//! tools listed, every input and output schema compiled by Ajv 2020 in strict mode with no
//! warning, every tool called on its success path and on an error path, and the error text the
//! SDK surfaces is slm's own message (not a schema-validation error).
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::path::PathBuf;
use std::process::Command;

use crate::common::{client_limit, output_within, slm_bin, Root};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts")
}

#[test]
fn typescript_sdk_compiles_every_schema_strictly_and_shows_slms_errors() {
    let modules = dir().join("node_modules/@modelcontextprotocol/sdk");
    assert!(modules.is_dir(), "{} is missing: run scripts/test.sh (it runs `npm ci` in tests/mcp-ts)", modules.display());
    let root = Root::new();
    let mut cmd = Command::new("node");
    cmd.arg(dir().join("client.mjs")).arg(slm_bin()).arg(root.dir()).env_remove("SLM_DATA_DIR").env_remove("SLM_MCP_PROFILE");
    // The server inherits the client's environment (client.mjs passes it on): the root's store.
    match &root.store {
        Some(url) => cmd.env("SLM_STORE", url),
        None => cmd.env_remove("SLM_STORE"),
    };
    // Bounded: a hang fails here with the processes' stacks and the store's locks.
    let out = output_within(&mut cmd, client_limit(), &root.dir());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the TypeScript SDK client failed:\n{stdout}\n{stderr}");
    let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let facts = &v["facts"];
    assert_eq!(facts["profiles"]["core"], 5);
    assert_eq!(facts["profiles"]["whole"], 12);
    // Input and output schemas of 5 + 9 + 10 + 11 + 12 tools.
    assert_eq!(facts["compiled"], 2 * (5 + 9 + 10 + 11 + 12));
    assert_eq!(facts["called"], 12);
    assert_eq!(facts["errors"]["recall"], "invalid limit: 0 (must be between 1 and 1000)");
    assert_eq!(facts["errors"]["forget"], "memory not found: 999999");
    assert_eq!(facts["errors"]["slm_loop_show"], "run not found: nope");
}
