//! Issue #15's loop and MCP edges, against the real binary: a command gate runs with what
//! `loop start` recorded whatever the stepping process does; a lap that fails ends its run
//! `error` (CLI and MCP); a wall-clock the laps can never wait out is said; `slm mcp`
//! answers every malformed or invalid JSON-RPC line, with its id.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{expect_exit, slm_bin, stderr, wait_running, RawMcp, Root};

/// An executable shell script at `path` that exits with `code`.
fn script(path: &Path, code: i32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\nexit {code}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs `slm ARGS --json` from `cwd`, with `env` on top of this process's environment.
fn json_in(root: &Root, cwd: &Path, env: &[(&str, String)], args: &[&str]) -> (i32, Value) {
    let mut a = args.to_vec();
    a.push("--json");
    let mut c = root.cmd(&a);
    c.current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("slm {args:?}: {e}: {}", stderr(&out)));
    (out.status.code().unwrap(), v)
}

#[test]
fn a_step_from_another_directory_path_or_environment_gets_the_recorded_verdict() {
    let root = Root::new();
    let base = root.tmp.path();
    let (home, elsewhere, fake) = (base.join("project"), base.join("elsewhere"), base.join("fakebin"));
    for d in [&home, &elsewhere, &fake] {
        std::fs::create_dir(d).unwrap();
    }
    // Where the agent steps from, everything would pass: a ./check.sh, a `mygate` on its PATH,
    // and GATE_OK=yes. None of these exist where and with what the run was started.
    script(&elsewhere.join("check.sh"), 0);
    script(&fake.join("mygate"), 0);
    let steering = [("PATH", format!("{}:{}", fake.display(), std::env::var("PATH").unwrap())), ("GATE_OK", "yes".to_string())];
    let gate = r#"./check.sh || mygate || test "$GATE_OK" = yes"#;
    let (code, started) = json_in(&root, &home, &[], &["loop", "start", "--name", "pinned", "--gate-cmd", gate, "--max-wallclock-s", "60"]);
    assert_eq!(code, 0, "{started}");
    let run_id = started["run_id"].as_str().unwrap().to_string();
    assert_eq!(started["gate_env"]["cwd"], home.to_str().unwrap(), "{started}");
    assert_eq!(started["gate_env"]["vars"]["PATH"], std::env::var("PATH").unwrap(), "{started}");

    let (code, step) = json_in(&root, &elsewhere, &steering, &["loop", "step", &run_id]);
    assert_eq!(code, 0, "{step}");
    // Here every alternative fails: no ./check.sh, no mygate, no GATE_OK (the last one's exit 1).
    assert_eq!((step["passed"].as_bool(), step["exit_code"].as_i64()), (Some(false), Some(1)), "{step}");
    assert!(step["detail"].as_str().unwrap().contains("not found"), "{step}");
    assert_eq!(step["decision"], "continue");

    // show (CLI and, below, MCP) says where and with what the gate runs.
    let (_, shown) = json_in(&root, &elsewhere, &[], &["loop", "show", &run_id]);
    assert_eq!(shown["gate_cmd"], gate);
    assert_eq!(shown["gate_env"]["cwd"], home.to_str().unwrap());
    assert!(shown["gate_env"]["vars"].get("GATE_OK").is_none(), "{shown}");
    let human = root.run(&["loop", "show", &run_id]);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains(&format!("gate runs in {}", home.display())) && text.contains("PATH="), "{text}");

    // The gate's own directory decides: a passing ./check.sh there converges, from anywhere.
    script(&home.join("check.sh"), 0);
    let (code, step) = json_in(&root, &elsewhere, &[("PATH", "/nonexistent".into())], &["loop", "step", &run_id]);
    assert_eq!((code, step["status"].as_str()), (0, Some("converged")), "{step}");

    // A variable named with --gate-env is recorded; a recorded directory that is gone fails
    // the lap, saying so (no panic, no error exit).
    let gone = base.join("gone");
    std::fs::create_dir(&gone).unwrap();
    let (code, started) = json_in(
        &root,
        &gone,
        &[("GATE_OK", "yes".into())],
        &["loop", "start", "--name", "gone", "--gate-cmd", r#"test "$GATE_OK" = yes"#, "--gate-env", "GATE_OK"],
    );
    assert_eq!(code, 0, "{started}");
    assert_eq!(started["gate_env"]["vars"]["GATE_OK"], "yes");
    std::fs::remove_dir(&gone).unwrap();
    let run_id = started["run_id"].as_str().unwrap();
    let (code, step) = json_in(&root, &elsewhere, &[], &["loop", "step", run_id]);
    assert_eq!((code, step["passed"].as_bool()), (0, Some(false)), "{step}");
    assert!(step["detail"].as_str().unwrap().contains("no longer exists"), "{step}");

    let bad = root.run(&["loop", "start", "--name", "x", "--gate-cmd", "true", "--gate-env", "NOT_SET_ANYWHERE_15"]);
    assert!(expect_exit(&bad, 2, "unset --gate-env").contains("gate_env"));
}

/// Damages the store the way a bad disk or a foreign writer could: a memory row whose
/// vector has the wrong length. The next lap that reads new rows fails on it.
fn insert_damaged_row(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn.execute(
        "INSERT INTO memories(kind, content, created_at, dedup_key, embedding)
         VALUES ('memory', 'damaged', '2026-01-01T00:00:00.000000Z', randomblob(32), x'0102')",
        [],
    )
    .unwrap();
}

#[test]
fn a_lap_that_fails_ends_its_run_with_status_error() {
    let root = Root::new();
    root.remember("the nightly build is still running", &[]);
    let mut child = root
        .cmd(&[
            "loop",
            "run",
            "--name",
            "breaks",
            "--gate-query",
            "deploy of release 9 finished",
            "--gate-min-score",
            "0.99",
            "--max-wallclock-s",
            "60",
            "--max-iterations",
            "200",
            "--poll-interval-s",
            "0.25",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run_id = wait_running(&root, "breaks");
    insert_damaged_row(&root.db_path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the run did not stop on the damaged row");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = expect_exit(&out, 1, "lap error");
    assert!(err.contains("stored vector"), "{err}");

    let h = root.json(&["loop", "history", "--name", "breaks"]);
    let run = &h["runs"][0];
    assert_eq!((run["run_id"].as_str(), run["final_status"].as_str()), (Some(run_id.as_str()), Some("error")), "{h}");
    let reason = run["reason"].as_str().unwrap();
    assert!(reason.contains("failed") && reason.contains("stored vector"), "{reason}");
    let shown = root.json(&["loop", "show", &run_id]);
    assert_eq!(shown["status"], "error");
    assert_eq!(shown["laps"].as_array().unwrap().len() as i64, run["laps"].as_i64().unwrap(), "laps agree");
    let c = root.json(&["loop", "cancel", &run_id]);
    assert_eq!((c["requested"].as_bool(), c["status"].as_str()), (Some(false), Some("error")), "{c}");
}

#[test]
fn a_wall_clock_the_laps_cannot_wait_out_is_said_once() {
    let root = Root::new();
    let args = ["loop", "run", "--name", "short", "--gate-query", "never", "--max-wallclock-s", "60", "--poll-interval-s", "0.25"];
    let out = root.run(&[&args[..], &["--max-iterations", "3", "--json"]].concat());
    let err = expect_exit(&out, 3, "bounded run");
    assert_eq!(err.matches("slm: note: max_wallclock_s 60 cannot be reached").count(), 1, "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["status"], "max_iterations");
    let notes = r["termination"]["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{r}");
    assert_eq!(notes[0]["field"], "max_wallclock_s");
    assert!(notes[0]["message"].as_str().unwrap().contains("after about 0.5 s"), "{r}");
    // A wall-clock the laps can fill: no note.
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "full",
        "--gate-query",
        "never",
        "--max-wallclock-s",
        "1",
        "--poll-interval-s",
        "0.25",
        "--json",
    ]);
    let err = expect_exit(&out, 3, "bounded run");
    assert!(!err.contains("note"), "{err}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["termination"]["notes"], json!([]));
}

#[test]
fn slm_mcp_answers_every_malformed_or_invalid_line_with_its_id() {
    let root = Root::new();
    let mut m = RawMcp::start(&root);
    let cases: Vec<(String, Value, i64)> = vec![
        (r#"{"jsonrpc":"2.0","id":10,"method":"tools/list""#.into(), Value::Null, -32700),
        ("not json at all".into(), Value::Null, -32700),
        (json!({"id": 11, "method": "tools/list"}).to_string(), json!(11), -32600),
        (json!({"jsonrpc": "1.0", "id": "twelve", "method": "tools/list"}).to_string(), json!("twelve"), -32600),
        (json!({"jsonrpc": "2.0", "id": 13, "method": 5}).to_string(), json!(13), -32600),
        (json!({"jsonrpc": "2.0", "id": 14, "method": "tools/list", "params": [1]}).to_string(), json!(14), -32602),
        (json!({"jsonrpc": "2.0", "id": 15, "method": "tools/call"}).to_string(), json!(15), -32602),
        (
            json!({"jsonrpc": "2.0", "id": 16, "method": "tools/call", "params": {"name": "status", "arguments": "x"}}).to_string(),
            json!(16),
            -32602,
        ),
    ];
    for (line, id, code) in &cases {
        m.send(line);
        let r = m.reply();
        assert_eq!((&r["jsonrpc"], &r["id"], r["error"]["code"].as_i64()), (&json!("2.0"), id, Some(*code)), "{line} -> {r}");
    }
    // Wrong argument types: a tool error with slm's {kind, field, message}.
    m.send(
        &json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {"name": "recall", "arguments": {"query": 5}}}).to_string(),
    );
    let r = m.reply();
    assert_eq!((r["id"].as_i64(), r["result"]["isError"].as_bool()), (Some(20), Some(true)), "{r}");
    let e = &r["result"]["_meta"]["slm/error"];
    assert_eq!((e["kind"].as_str(), e["field"].as_str()), (Some("invalid_input"), Some("query")), "{r}");
    assert_eq!(r["result"]["content"][0]["text"], e["message"]);
    m.send(&json!({"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "remember", "arguments": {"content": "x", "tags": ["a", 7]}}}).to_string());
    let e = m.reply()["result"]["_meta"]["slm/error"].clone();
    assert_eq!(e["field"], "tags[1]", "{e}");
    // The connection still works.
    m.send(&json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}).to_string());
    assert_eq!(m.reply()["id"], 99);
    assert_eq!(root.count(), 0, "nothing was written");
}

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python");
    assert!(p.exists(), "{} is missing: run scripts/test.sh (it installs the MCP Python SDK)", p.display());
    p
}

#[test]
fn over_mcp_a_failed_lap_ends_the_run_and_notes_and_gate_env_are_shown() {
    let root = Root::new();
    // An agent-driven run (CLI only), to read back over MCP.
    let started = root.json(&["loop", "start", "--name", "pinned", "--gate-cmd", "true"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/mcp_hard_edges.py");
    let out = Command::new(python()).arg(script).arg(slm_bin()).arg(root.dir()).arg(started["run_id"].as_str().unwrap()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "python scenario failed:\n{stdout}\n{}", stderr(&out));
    let facts: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(facts["status_after_error"], "error", "{facts}");
    assert_eq!(facts["note_field"], "max_wallclock_s", "{facts}");
    assert_eq!(facts["gate_cwd"], std::env::current_dir().unwrap().to_str().unwrap(), "{facts}");
}
