//! Bounded loops end to end: the real binary, the real model, several processes.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).
use serde_json::Value;
use slm::embed::{Embedder, OnnxEmbedder};
use slm::loops::ledger::lap_text;

use crate::common::{expect_exit, spawn_loop_run, wait_running, Root};

fn parse(out: &std::process::Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn demo_converges_on_lap_three_and_records_everything() {
    let root = Root::new();
    let out = root.run(&["loop", "demo"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("lap   1") && text.contains("lap   3") && text.contains("converged"), "{text}");

    let r = parse(&root.run(&["loop", "demo", "--json"]));
    assert_eq!(r["ok"], true);
    assert_eq!(r["status"], "converged");
    assert_eq!(r["laps"], 3);
    assert!(r["run_id"].as_str().unwrap().starts_with("convergence-demo-"));

    let out = root.run(&["loop", "demo", "--iterations", "2", "--json"]);
    expect_exit(&out, 3, "demo --iterations 2");
    let r = parse(&out);
    assert_eq!(r["status"], "max_iterations");
    assert_eq!(r["laps"], 2);
    let run_id = r["run_id"].as_str().unwrap();

    // History and show, from new processes, agree on the lap count.
    let h = root.json(&["loop", "history", "--name", "convergence-demo"]);
    assert_eq!(h["name"], "convergence-demo");
    let runs = h["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["run_id"], run_id, "newest first");
    assert_eq!(runs[0]["laps"], 2);
    assert_eq!(runs[0]["final_status"], "max_iterations");
    assert_eq!(runs[1]["final_status"], "converged");
    assert_eq!(runs[1]["laps"], 3);
    let s = root.json(&["loop", "show", run_id]);
    let laps = s["laps"].as_array().unwrap();
    assert_eq!(laps.len(), 2);
    assert_eq!(laps[0]["decision"], "continue");
    assert_eq!(laps[1]["decision"], "max_iterations");
    for key in ["lap", "ts", "decision", "passed", "detail", "score", "budget"] {
        assert!(laps[0].get(key).is_some(), "lap lacks {key}");
    }
    // All loops, without a name.
    assert_eq!(root.json(&["loop", "history"])["runs"].as_array().unwrap().len(), 3);
    // The laps are recallable ledger memories.
    let hits = root.json(&["recall", "stub gate failed", "--tag", "loop:convergence-demo"]);
    assert!(!hits["hits"].as_array().unwrap().is_empty());
    // Unknown run: exit 1, not found.
    let err = expect_exit(&root.run(&["loop", "show", "nope-123"]), 1, "show unknown");
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn a_memory_from_another_process_satisfies_a_waiting_loop() {
    let root = Root::new();
    root.remember("The pull request number 42 was rejected", &[]);
    let child = spawn_loop_run(
        &root,
        &[
            "--name",
            "pr-42",
            "--gate-query",
            "PR 42 approved",
            "--gate-min-score",
            "0.75",
            "--max-wallclock-s",
            "60",
            "--poll-interval-s",
            "0.25",
            "--max-iterations",
            "200",
        ],
    );
    wait_running(&root, "pr-42");
    let id = root.remember("review complete: PR #42 is approved", &["pr-42"]);
    let out = child.wait_with_output().unwrap();
    expect_exit(&out, 0, "converged run");
    let r = parse(&out);
    assert_eq!(r["status"], "converged");
    assert_eq!(r["match"]["id"].as_i64(), Some(id));
    assert_eq!(r["match"]["content"], "review complete: PR #42 is approved");
    assert!(r["termination"]["best_score"].as_f64().unwrap() >= 0.75);
    assert!(r["laps"].as_i64().unwrap() >= 2, "lap 1 saw only the rejected PR");
    assert_eq!(r["termination"]["ledger_errors"], 0);
}

#[test]
fn gate_tags_restrict_eligibility() {
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &[]);
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "tagged",
        "--gate-query",
        "PR 42 approved",
        "--gate-min-score",
        "0.7",
        "--gate-tag",
        "approved",
        "--max-iterations",
        "2",
        "--poll-interval-s",
        "0.25",
        "--json",
    ]);
    expect_exit(&out, 3, "untagged memory is not eligible");
    root.remember("review complete: PR #42 is approved", &["approved"]);
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "tagged",
        "--gate-query",
        "PR 42 approved",
        "--gate-min-score",
        "0.7",
        "--gate-tag",
        "approved",
        "--max-iterations",
        "2",
        "--poll-interval-s",
        "0.25",
        "--json",
    ]);
    expect_exit(&out, 0, "tagged memory converges");
    assert_eq!(parse(&out)["match"]["tags"], serde_json::json!(["approved"]));
}

#[test]
fn a_loop_never_converges_on_its_own_ledger() {
    let root = Root::new();
    let detail = "no eligible memories yet; threshold 0.500";
    // The gate query is the exact text of the laps this run writes.
    let query = lap_text("selfref", 2, detail);
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "selfref",
        "--gate-query",
        &query,
        "--gate-min-score",
        "0.5",
        "--max-iterations",
        "4",
        "--poll-interval-s",
        "0.25",
        "--json",
    ]);
    expect_exit(&out, 3, "self-referential loop");
    let r = parse(&out);
    assert_eq!(r["status"], "max_iterations");
    assert!(r["termination"]["best_memory_id"].is_null());
    // The ledger laps exist and would score far above the threshold if they were eligible.
    let hits = root.json(&["recall", &query, "--tag", "loop:selfref", "--limit", "1"]);
    assert!(hits["hits"][0]["score"].as_f64().unwrap() > 0.95, "{hits}");
}

#[test]
fn each_bound_stops_the_run_with_its_own_status() {
    let root = Root::new();
    // Wall-clock: at most one gate evaluation past the deadline.
    let r = parse(&root.run(&[
        "loop",
        "run",
        "--name",
        "wall",
        "--gate-query",
        "never",
        "--gate-min-score",
        "0.99",
        "--max-wallclock-s",
        "1",
        "--poll-interval-s",
        "0.3",
        "--json",
    ]));
    assert_eq!(r["status"], "max_wallclock");
    let elapsed = r["termination"]["elapsed_s"].as_f64().unwrap();
    assert!(elapsed >= 1.0, "stopped early: {elapsed}");
    assert!(elapsed < 2.0, "overran the deadline by more than a gate evaluation: {elapsed}");
    // Laps at about 0, 0.3, 0.6, 0.9 and one last at the deadline, which decides the stop.
    let s = root.json(&["loop", "show", r["run_id"].as_str().unwrap()]);
    let laps = s["laps"].as_array().unwrap();
    assert!(laps.len() >= 2);
    let last = laps.last().unwrap();
    assert_eq!(last["decision"], "max_wallclock");
    assert!(last["budget"]["elapsed_s"].as_f64().unwrap() >= 1.0, "{last}");

    // Tokens: predicted from the tokenizer (gate query on lap 1, plus each lap's ledger text).
    let e = OnnxEmbedder::locate();
    let q = "deployment finished";
    let detail = "no eligible memories yet; threshold 0.900";
    let lap = |n: i64| e.count_tokens(&lap_text("tok", n, detail)).unwrap() as i64;
    let after_two = e.count_tokens(q).unwrap() as i64 + lap(1) + lap(2);
    let max = after_two + 1; // lap 2 stays below, lap 3 reaches it
    let r = parse(&root.run(&[
        "loop",
        "run",
        "--name",
        "tok",
        "--gate-query",
        q,
        "--gate-min-score",
        "0.9",
        "--max-tokens",
        &max.to_string(),
        "--poll-interval-s",
        "0.25",
        "--json",
    ]));
    assert_eq!(r["status"], "max_tokens");
    assert_eq!(r["laps"], 3);
    assert_eq!(r["termination"]["tokens_used"].as_i64().unwrap(), after_two + lap(3));

    // No progress: the observation never changes on an empty store; window 2 → stalled laps
    // 2 and 3 → stop on lap 3.
    let r = parse(&root.run(&[
        "loop",
        "run",
        "--name",
        "stall",
        "--gate-query",
        "anything",
        "--gate-min-score",
        "0.9",
        "--no-progress-window",
        "2",
        "--poll-interval-s",
        "0.25",
        "--json",
    ]));
    assert_eq!(r["status"], "no_progress");
    assert_eq!(r["laps"], 3);
}

#[test]
fn clamps_are_applied_and_reported() {
    let root = Root::new();
    let r = parse(&root.run(&[
        "loop",
        "run",
        "--name",
        "clamp",
        "--gate-query",
        "x",
        "--gate-min-score",
        "0.99",
        "--max-iterations",
        "500",
        "--max-wallclock-s",
        "500",
        "--poll-interval-s",
        "0.01",
        "--max-tokens",
        "1",
        "--json",
    ]));
    assert_eq!(r["status"], "max_tokens");
    let limits = &r["termination"]["limits"];
    assert_eq!(limits["max_iterations"], 200);
    assert_eq!(limits["max_wallclock_s"], 120.0);
    assert_eq!(limits["poll_interval_s"], 0.25);
    let clamped = r["termination"]["clamped"].as_array().unwrap();
    let fields: Vec<&str> = clamped.iter().map(|c| c["field"].as_str().unwrap()).collect();
    assert_eq!(fields, vec!["max_iterations", "max_wallclock_s", "poll_interval_s"]);
    assert_eq!(clamped[0]["requested"], 500);
    assert_eq!(clamped[0]["applied"], 200);
}

#[test]
fn invalid_loop_input_is_rejected_and_nothing_is_written() {
    let root = Root::new();
    let base = ["loop", "run", "--name", "ok", "--gate-query", "q"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--gate-min-score", "NaN"], "gate_min_score"),
        (vec!["--max-wallclock-s", "inf"], "max_wallclock_s"),
        (vec!["--max-iterations", "0"], "max_iterations"),
        (vec!["--poll-interval-s", "-1"], "poll_interval_s"),
        (vec!["--max-tokens", "-5"], "max_tokens"),
        (vec!["--gate-tag", "a b"], "gate_tags"),
    ];
    for (extra, field) in cases {
        let mut args = base.to_vec();
        args.extend(extra.iter());
        let err = expect_exit(&root.run(&args), 2, &format!("{extra:?}"));
        assert!(err.contains(field), "{extra:?}: {err}");
    }
    let err = expect_exit(&root.run(&["loop", "run", "--name", "bad name!", "--gate-query", "q"]), 2, "bad name");
    assert!(err.contains("name"), "{err}");
    let err = expect_exit(&root.run(&["loop", "run", "--name", "ok", "--gate-query", ""]), 2, "empty query");
    assert!(err.contains("gate_query"), "{err}");
    let err = expect_exit(&root.run(&["loop", "demo", "--iterations", "0"]), 2, "demo 0");
    assert!(err.contains("invalid iterations: 0"), "the demo's own parameter name: {err}");
    assert!(!root.dir().exists(), "invalid input must not even create the data root");
}

#[test]
fn cancel_from_another_process_and_ctrl_c() {
    let root = Root::new();
    let child = spawn_loop_run(
        &root,
        &["--name", "waiter", "--gate-query", "never happens", "--gate-min-score", "0.99", "--max-wallclock-s", "60"],
    );
    let run_id = wait_running(&root, "waiter");
    let c = root.json(&["loop", "cancel", &run_id]);
    assert_eq!(c["requested"], true);
    let out = child.wait_with_output().unwrap();
    expect_exit(&out, 130, "cancelled run");
    let r = parse(&out);
    assert_eq!(r["status"], "cancelled");
    assert!(r["termination"]["elapsed_s"].as_f64().unwrap() < 60.0);
    let h = root.json(&["loop", "history", "--name", "waiter"]);
    assert_eq!(h["runs"][0]["final_status"], "cancelled");
    // Cancelling an ended run says so; an unknown run is not found.
    let c = root.json(&["loop", "cancel", &run_id]);
    assert_eq!(c["requested"], false);
    assert_eq!(c["status"], "cancelled");
    expect_exit(&root.run(&["loop", "cancel", "nope-1"]), 1, "unknown run");

    // Ctrl-C (SIGINT) → cancelled, exit 130.
    let child = spawn_loop_run(
        &root,
        &["--name", "sigint", "--gate-query", "never happens", "--gate-min-score", "0.99", "--max-wallclock-s", "60"],
    );
    wait_running(&root, "sigint");
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    expect_exit(&out, 130, "ctrl-c");
    assert_eq!(parse(&out)["status"], "cancelled");
    assert_eq!(root.json(&["loop", "history", "--name", "sigint"])["runs"][0]["final_status"], "cancelled");
}

#[test]
fn a_killed_run_shows_as_interrupted() {
    let root = Root::new();
    let mut child =
        spawn_loop_run(&root, &["--name", "doomed", "--gate-query", "never", "--gate-min-score", "0.99", "--max-wallclock-s", "60"]);
    let run_id = wait_running(&root, "doomed");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let h = root.json(&["loop", "history", "--name", "doomed"]);
    assert_eq!(h["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(h["runs"][0]["final_status"], "interrupted");
    assert_eq!(root.json(&["loop", "show", &run_id])["status"], "interrupted");
}

/// A lap is on disk as its ledger row within 250 ms; its ledger memory may still be waiting
/// for the writer's fold when the process is killed. The next process that writes the ledger
/// (here `embed-pending`, which `loop run` starts when it ends) gives every such lap its
/// memory: the text, tags and time the lap would have had, nothing lost, nothing doubled.
#[test]
fn a_killed_runs_laps_get_their_memories_from_the_next_writer() {
    let root = Root::new();
    let mut child = spawn_loop_run(
        &root,
        &["--name", "cut", "--gate-query", "never", "--gate-min-score", "0.99", "--max-wallclock-s", "60", "--poll-interval-s", "0.25"],
    );
    let run_id = wait_running(&root, "cut");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while root.json(&["loop", "show", &run_id])["laps"].as_array().map_or(0, Vec::len) < 4 {
        assert!(std::time::Instant::now() < deadline, "the run never recorded 4 laps");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let show = root.json(&["loop", "show", &run_id]);
    let mut want: Vec<String> = show["laps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| lap_text("cut", l["lap"].as_i64().unwrap(), l["detail"].as_str().unwrap()))
        .collect();
    expect_exit(&root.run(&["embed-pending"]), 0, "embed-pending");
    let list = root.json(&["list", "--kind", "lap", "--tag", "loop:cut", "--limit", "1000"]);
    let mut got: Vec<String> = list["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap().to_string()).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "every recorded lap has exactly one ledger memory");
    let suffix = run_id.strip_prefix("cut-").unwrap();
    for m in list["memories"].as_array().unwrap() {
        let tags: Vec<&str> = m["tags"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
        assert_eq!(tags, ["loop", "loop:cut", &format!("run:{suffix}")]);
    }
    // Found by recall too, now that embed-pending has given them vectors.
    let hits = root.json(&["recall", "loop cut lap 2", "--tag", "loop:cut", "--limit", "1"]);
    assert!(hits["hits"][0]["content"].as_str().unwrap().starts_with("loop cut lap "), "{hits}");
}

#[test]
fn ledger_failures_are_counted_and_the_loop_goes_on_sqlite_only() {
    let root = Root::new();
    root.json(&["status"]); // creates the database
    let conn = rusqlite::Connection::open(root.db_path()).unwrap();
    conn.execute_batch("CREATE TRIGGER fail_laps BEFORE INSERT ON loop_laps BEGIN SELECT RAISE(ABORT, 'injected failure'); END;").unwrap();
    drop(conn);
    let out = root.run(&["loop", "demo", "--json"]);
    expect_exit(&out, 0, "demo with a failing ledger");
    let r = parse(&out);
    assert_eq!(r["status"], "converged");
    assert_eq!(r["laps"], 3);
    assert_eq!(r["termination"]["ledger_errors"], 3);
    // The run record itself still landed.
    let h = root.json(&["loop", "history", "--name", "convergence-demo"]);
    assert_eq!(h["runs"][0]["final_status"], "converged");
    assert_eq!(h["runs"][0]["laps"], 3);
}
