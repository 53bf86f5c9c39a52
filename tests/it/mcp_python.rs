//! `slm mcp` driven by a client nobody here wrote: the official MCP Python SDK (`mcp` from
//! PyPI, installed into `target/pyenv` by scripts/test.sh), spawning the real binary over stdio.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::path::PathBuf;
use std::process::Command;

use crate::common::{client_limit, output_within, slm_bin, Root};

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/test.sh (it installs the MCP Python SDK)", p.display());
    p
}

fn scenario(name: &str) -> serde_json::Value {
    let root = Root::new();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/mcp_client.py");
    let mut cmd = Command::new(python());
    // The servers the script starts get its whole environment: none of a developer's own
    // slm settings.
    cmd.arg(script).arg(name).arg(slm_bin()).arg(root.dir()).env_remove("SLM_DATA_DIR").env_remove("SLM_MCP_PROFILE");
    // And the root's store.
    match &root.store {
        Some(url) => cmd.env("SLM_STORE", url),
        None => cmd.env_remove("SLM_STORE"),
    };
    // Bounded: a hang fails here with the processes' stacks and the store's locks.
    let out = output_within(&mut cmd, client_limit(), &root.dir());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "scenario {name} failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn python_sdk_lists_tools_in_each_profile() {
    let v = scenario("profiles");
    assert_eq!(v["facts"]["core"].as_array().unwrap().len(), 5);
    assert_eq!(v["facts"]["whole"].as_array().unwrap().len(), 12);
}

#[test]
fn python_sdk_remembers_recalls_and_gets_errors() {
    let v = scenario("memory");
    assert!((v["facts"]["score"].as_f64().unwrap() - 0.834).abs() < 0.01);
}

#[test]
fn python_sdk_loop_converges_on_a_second_servers_memory_with_progress() {
    let v = scenario("loop");
    assert_eq!(v["facts"]["laps"], v["facts"]["progress"]);
}

#[test]
fn python_sdk_cancellation_stops_the_loop() {
    assert_eq!(scenario("cancel")["facts"]["status"], "cancelled");
}

#[test]
fn python_sdk_gate_verifies_candidates_and_refuses_cmd_verifiers() {
    let v = scenario("gate");
    assert!(v["facts"]["rejected"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["facts"]["rule"], "model", "{v}");
    assert_eq!(v["facts"]["verified_by"], serde_json::json!(["guard:entities", "model"]));
}

#[test]
fn python_sdk_fifty_loops_in_one_server_record_every_lap() {
    let v = scenario("many_loops");
    assert_eq!(v["facts"]["runs"], 50, "{v}");
}

#[test]
fn python_sdk_a_burst_of_unrelated_writes_ends_no_loop_early() {
    let v = scenario("burst");
    assert_eq!(v["facts"]["laps"].as_array().map(Vec::len), Some(10), "{v}");
}

/// Issue #28 through the Python SDK: since, a barrier, `any`, a tag-only gate, bad input.
#[test]
fn python_sdk_coordinates_with_since_gates_and_tags() {
    let v = scenario("coordination");
    assert_eq!(v["facts"]["barrier"], 3, "{v}");
    assert_eq!(v["facts"]["cases"], 9, "{v}");
}
