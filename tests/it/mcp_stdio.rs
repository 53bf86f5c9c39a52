//! `slm mcp` as a process: answers before the model loads, exits when stdin closes.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{slm_bin, Root};

#[test]
fn answers_before_loading_the_model_and_exits_when_stdin_closes() {
    let root = Root::new();
    let mut child = Command::new(slm_bin())
        .arg("--data-dir")
        .arg(root.dir())
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}));
    let init: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(init["result"]["serverInfo"]["name"], "slm");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(list["result"]["tools"].as_array().unwrap().len(), 10, "default profile is full");
    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "status", "arguments": {}}}));
    let status: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(status["result"]["structuredContent"]["model_loaded"], false, "nothing needed the model yet");

    drop(stdin); // EOF
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            assert!(st.success(), "exit status {st:?}");
            break;
        }
        assert!(Instant::now() < deadline, "slm mcp did not exit after stdin closed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_bad_profile_is_invalid_input() {
    let root = Root::new();
    let out = root.cmd(&["mcp", "--profile", "everything"]).stdin(Stdio::null()).output().unwrap();
    let err = crate::common::expect_exit(&out, 2, "bad profile");
    assert!(err.contains("profile") && err.contains("core, code, full, power, whole"), "{err}");
}
