//! Agent-driven loops (`slm loop start` / `slm loop step`) with real gate commands.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::process::Output;

use serde_json::Value;

use crate::common::{expect_exit, Root};

fn last_json(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {text}\n{}", String::from_utf8_lossy(&out.stderr)))
}

fn start(root: &Root, name: &str, gate: &str, bounds: &[&str]) -> String {
    let mut args = vec!["loop", "start", "--name", name, "--gate-cmd", gate];
    args.extend_from_slice(bounds);
    let v = root.json(&args);
    assert_eq!(v["ok"], true);
    assert_eq!(v["gate_cmd"], gate);
    v["run_id"].as_str().unwrap().to_string()
}

fn step(root: &Root, run_id: &str, extra: &[&str]) -> (Output, Value) {
    let mut args = vec!["loop", "step", run_id, "--json"];
    args.extend_from_slice(extra);
    let out = root.run(&args);
    let v = if out.status.success() || out.status.code() == Some(3) { last_json(&out) } else { Value::Null };
    (out, v)
}

#[test]
fn converges_on_the_lap_where_the_gate_file_appears() {
    let root = Root::new();
    let flag = root.tmp.path().join("done.flag");
    let gate = format!("test -f '{}' && echo ready || {{ echo waiting; exit 1; }}", flag.display());
    let run = start(&root, "build", &gate, &["--max-iterations", "10", "--max-wallclock-s", "60"]);
    for lap in 1..=2 {
        let (out, v) = step(&root, &run, &["--note", "still working"]);
        expect_exit(&out, 0, "continue");
        assert_eq!(v["lap"], lap);
        assert_eq!(v["decision"], "continue");
        assert_eq!(v["status"], "running");
        assert_eq!(v["exit_code"], 1);
        assert!(v["detail"].as_str().unwrap().contains("waiting"), "{v}");
    }
    std::fs::write(&flag, "").unwrap();
    let (out, v) = step(&root, &run, &[]);
    expect_exit(&out, 0, "converged");
    assert_eq!(v["lap"], 3);
    assert_eq!(v["decision"], "converged");
    assert_eq!(v["passed"], true);
    // Refused after the end, with the final status; nothing is recorded.
    let out = root.run(&["loop", "step", &run]);
    let err = expect_exit(&out, 1, "step after the end");
    assert!(err.contains("already ended") && err.contains("converged"), "{err}");
    let show = root.json(&["loop", "show", &run]);
    assert_eq!(show["status"], "converged");
    let laps = show["laps"].as_array().unwrap();
    assert_eq!(laps.len(), 3);
    assert!(laps[0]["detail"].as_str().unwrap().contains("note: still working"));
    assert_eq!(root.json(&["loop", "history", "--name", "build"])["runs"][0]["laps"], 3);
    // The laps are ledger memories, found by recall with the loop tag, and a background
    // `slm embed-pending` gives them their vectors.
    let hits = root.json(&["recall", "gate command passed", "--tag", "loop:build"]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 3);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let store = root.open_store();
        if store.pending_rows(10).unwrap().is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "ledger laps were never embedded");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn an_always_failing_gate_hits_max_iterations() {
    let root = Root::new();
    let run = start(&root, "never", "exit 1", &["--max-iterations", "3"]);
    for _ in 0..2 {
        assert_eq!(step(&root, &run, &[]).1["decision"], "continue");
    }
    let (out, v) = step(&root, &run, &[]);
    expect_exit(&out, 3, "max_iterations");
    assert_eq!(v["decision"], "max_iterations");
    assert_eq!(v["lap"], 3);
}

#[test]
fn a_gate_that_sleeps_past_the_deadline_is_killed_with_its_group() {
    let root = Root::new();
    // A background child and a foreground sleep, with a duration no other process uses.
    let marker = format!("sleep 97.{}", std::process::id());
    let gate = format!("{marker} & {marker}");
    let run = start(&root, "slow", &gate, &["--max-wallclock-s", "1"]);
    let (out, v) = step(&root, &run, &[]);
    expect_exit(&out, 3, "max_wallclock");
    assert_eq!(v["decision"], "max_wallclock");
    assert_eq!(v["timed_out"], true);
    assert!(v["detail"].as_str().unwrap().contains("killed at the wall-clock deadline"), "{v}");
    // Killed processes may take a moment to be gone on a busy machine.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let left = loop {
        let left = std::process::Command::new("pgrep").args(["-f", &marker]).output().unwrap();
        if left.stdout.is_empty() || std::time::Instant::now() > until {
            break left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(left.stdout.is_empty(), "leftover gate processes: {}", String::from_utf8_lossy(&left.stdout));
}

#[test]
fn an_abandoned_run_shows_max_wallclock_after_its_deadline() {
    let root = Root::new();
    // 3 s: the start and the first look must both come before the deadline, on a busy machine.
    let started = std::time::Instant::now();
    let run = start(&root, "abandoned", "exit 1", &["--max-wallclock-s", "3"]);
    assert_eq!(root.json(&["loop", "history", "--name", "abandoned"])["runs"][0]["final_status"], "running");
    std::thread::sleep((started + std::time::Duration::from_millis(3300)).saturating_duration_since(std::time::Instant::now()));
    assert_eq!(root.json(&["loop", "history", "--name", "abandoned"])["runs"][0]["final_status"], "max_wallclock");
    // A late step records the deadline lap without running the gate, then the run is over.
    let (out, v) = step(&root, &run, &[]);
    expect_exit(&out, 3, "late step");
    assert_eq!(v["decision"], "max_wallclock");
    assert_eq!(v["timed_out"], true);
    expect_exit(&root.run(&["loop", "step", &run]), 1, "after the end");
}

#[test]
fn reported_tokens_and_identical_outcomes_stop_the_run() {
    let root = Root::new();
    let run = start(&root, "tokens", "exit 1", &["--max-tokens", "500"]);
    let (_, v) = step(&root, &run, &["--tokens", "200"]);
    assert_eq!(v["decision"], "continue");
    let used = v["budget"]["tokens_used"].as_i64().unwrap();
    assert!(used > 200, "ledger text tokens are counted too: {used}");
    let (out, v) = step(&root, &run, &["--tokens", "400"]);
    expect_exit(&out, 3, "max_tokens");
    assert_eq!(v["decision"], "max_tokens");

    let run = start(&root, "stuck", "echo same output; exit 1", &["--no-progress-window", "2"]);
    assert_eq!(step(&root, &run, &[]).1["decision"], "continue");
    assert_eq!(step(&root, &run, &[]).1["decision"], "continue");
    let (_, v) = step(&root, &run, &[]);
    assert_eq!(v["decision"], "no_progress", "lap 3 repeats lap 2, which repeated lap 1");
    // A changing outcome resets the count.
    let counter = root.tmp.path().join("n");
    let gate = format!("echo x >> '{}'; wc -l < '{}'; exit 1", counter.display(), counter.display());
    let run = start(&root, "moving", &gate, &["--no-progress-window", "2", "--max-iterations", "4"]);
    for _ in 0..3 {
        assert_eq!(step(&root, &run, &[]).1["decision"], "continue");
    }
}

#[test]
fn steps_from_two_processes_share_one_run() {
    let root = Root::new();
    let run = start(&root, "shared", "sleep 0.3; exit 1", &["--max-iterations", "10", "--max-wallclock-s", "60"]);
    let a = root.cmd(&["loop", "step", &run, "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let b = root.cmd(&["loop", "step", &run, "--json"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let mut laps = vec![last_json(&a)["lap"].as_i64().unwrap(), last_json(&b)["lap"].as_i64().unwrap()];
    laps.sort();
    assert_eq!(laps, vec![1, 2]);
    let (_, v) = step(&root, &run, &[]);
    assert_eq!(v["lap"], 3);
    assert_eq!(root.json(&["loop", "show", &run])["laps"].as_array().unwrap().len(), 3);
}

#[test]
fn bad_input_and_cancel() {
    let root = Root::new();
    let err = expect_exit(&root.run(&["loop", "start", "--name", "x", "--gate-cmd", "  "]), 2, "empty gate");
    assert!(err.contains("gate_cmd"), "{err}");
    let err = expect_exit(&root.run(&["loop", "start", "--name", "x", "--gate-cmd", "true", "--max-iterations", "0"]), 2, "0 laps");
    assert!(err.contains("max_iterations"), "{err}");
    assert!(!root.dir().exists(), "invalid input writes nothing");
    let err = expect_exit(&root.run(&["loop", "step", "nope-20260101T000000-000000"]), 1, "bad run id");
    assert!(err.contains("not found"), "{err}");

    let run = start(&root, "abandon", "exit 1", &[]);
    let err = expect_exit(&root.run(&["loop", "step", &run, "--tokens", "-1"]), 2, "negative tokens");
    assert!(err.contains("tokens"), "{err}");
    let c = root.json(&["loop", "cancel", &run]);
    assert_eq!(c["requested"], true);
    assert_eq!(c["status"], "cancelled");
    let err = expect_exit(&root.run(&["loop", "step", &run]), 1, "step after cancel");
    assert!(err.contains("cancelled"), "{err}");
    // A memory-gated run id is not an agent-driven run.
    let demo = last_json(&root.run(&["loop", "demo", "--iterations", "1", "--json"]));
    let out = root.run(&["loop", "step", demo["run_id"].as_str().unwrap()]);
    let err = expect_exit(&out, 2, "not agent-driven");
    assert!(err.contains("agent-driven"), "{err}");
}
