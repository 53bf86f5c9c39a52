//! Coordination beyond one signal (issue #28), through the real binary across processes:
//! a barrier of eight writers (`--gate-count 8`), `since start` and `since last`, two gates
//! joined by `all` and `any` in every order of arrival, a tag-only gate that never maps the
//! model or ONNX Runtime, memories that expire (before and during a run), and the bad input
//! these add. Runs on SQLite and, in the PostgreSQL
//! pass of scripts/test.sh, on a private PostgreSQL server (Root::new).
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::collections::BTreeSet;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{expect_exit, loop_result, spawn_loop_run, Root};

/// A waiting run's flags: it can only end by converging (or a generous wall-clock).
const WAIT: &[&str] = &["--poll-interval-s", "30", "--max-wallclock-s", "90", "--max-iterations", "200"];

/// `slm loop run` with [`WAIT`] added.
fn spawn_run(root: &Root, args: &[&str]) -> Child {
    spawn_loop_run(root, &[args, WAIT].concat())
}

/// The newest run of `name` once it has recorded `laps` laps: (run id, its laps).
fn wait_laps(root: &Root, name: &str, laps: i64) -> (String, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let h = root.json(&["loop", "history", "--name", name]);
        if let Some(r) = h["runs"].as_array().and_then(|r| r.first()) {
            if r["laps"].as_i64() >= Some(laps) {
                let id = r["run_id"].as_str().unwrap().to_string();
                let show = root.json(&["loop", "show", &id]);
                return (id, show);
            }
        }
        assert!(Instant::now() < deadline, "run of {name} never recorded {laps} laps");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the run's last lap detail contains `text` (the gate took in a write): the
/// run may record laps on wake-ups of its own.
fn wait_detail(root: &Root, run_id: &str, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let show = root.json(&["loop", "show", run_id]);
        let last = show["laps"].as_array().and_then(|l| l.last()).map(|l| l["detail"].as_str().unwrap_or("").to_string());
        if last.as_deref().is_some_and(|d| d.contains(text)) {
            return;
        }
        assert!(Instant::now() < deadline, "run {run_id} never said {text:?}: {show}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status_of(root: &Root, run_id: &str) -> String {
    root.json(&["loop", "show", run_id])["status"].as_str().unwrap().to_string()
}

fn ids(v: &Value) -> BTreeSet<i64> {
    v.as_array().unwrap().iter().map(|m| m["id"].as_i64().unwrap()).collect()
}

/// Eight writer processes each remember "shard k done"; a `--gate-count 8` loop converges
/// only after the eighth commit, with all eight in `matches`.
#[test]
fn a_barrier_of_eight_writers_converges_on_the_eighth() {
    let root = Root::new();
    root.remember("warm-up: the batch is queued", &[]);
    let gate = [
        "--name",
        "barrier",
        "--gate-query",
        "shard done",
        "--gate-tag",
        "batch-7",
        "--gate-count",
        "8",
        "--gate-verify",
        "guard:entities",
    ];
    let child = spawn_run(&root, &gate);
    let (run_id, _) = wait_laps(&root, "barrier", 1);
    let spawn = |k: usize| {
        root.cmd(&["remember", &format!("shard {k} done"), "--tag", "batch-7", "--json"]).stdout(Stdio::piped()).spawn().unwrap()
    };
    let writers: Vec<Child> = (1..=7).map(spawn).collect();
    let mut written = BTreeSet::new();
    for w in writers {
        let out = w.wait_with_output().unwrap();
        assert!(out.status.success());
        written.insert(serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_i64().unwrap());
    }
    wait_detail(&root, &run_id, "7 of 8 memories passed");
    assert_eq!(status_of(&root, &run_id), "running", "seven of eight must not end the barrier");
    let out = spawn(8).wait_with_output().unwrap();
    written.insert(serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_i64().unwrap());
    let r = loop_result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["matches"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["matches"][0]["count"], 8);
    assert_eq!(r["matches"][0]["passed"], true);
    assert_eq!(ids(&r["matches"][0]["memories"]), written, "{r}");
    assert!(r["reason"].as_str().unwrap().contains("8 of 8 memories passed"), "{r}");
}

/// `since start` ignores a matching memory written before the run and converges on one
/// written after; a second run with `since last` ignores the memory that ended the first.
#[test]
fn since_start_and_since_last_skip_stale_signals() {
    let root = Root::new();
    let stale = root.remember("deploy of api finished", &[]);
    let gate = ["--name", "deploy", "--gate-query", "deploy of api finished", "--since", "start"];
    let child = spawn_run(&root, &gate);
    let (run_id, show) = wait_laps(&root, "deploy", 1);
    let detail = show["laps"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("1 older match ignored (since start)"), "{detail}");
    assert!(!detail.contains(&format!("#{stale}")), "the stale memory is not even a candidate: {detail}");
    let fresh = root.remember("the api deploy has finished, all pods healthy", &[]);
    let r = loop_result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], fresh, "{r}");
    assert_eq!(status_of(&root, &run_id), "converged");

    // A duration reaching past the calendar's start keeps nothing out (and is no panic).
    let all = root.json(&[
        "loop",
        "run",
        "--name",
        "ages",
        "--gate-query",
        "deploy of api finished",
        "--since",
        "9000000000000000s",
        "--max-iterations",
        "1",
    ]);
    assert_eq!(all["status"], "converged", "{all}");

    // Without since, the stale memory would end it at once; with since last, a short run
    // ends on its bound, having ignored both the stale and the fresh one.
    let plain = root.json(&["loop", "run", "--name", "deploy-plain", "--gate-query", "deploy of api finished", "--max-iterations", "1"]);
    assert_eq!(plain["status"], "converged", "{plain}");
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "deploy",
        "--gate-query",
        "deploy of api finished",
        "--since",
        "last",
        "--max-iterations",
        "1",
        "--json",
    ]);
    let again: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(again["status"], "max_iterations", "{again}");
    assert!(again["reason"].as_str().unwrap().contains("2 older matches ignored (since last)"), "{again}");

    // And it converges on the next deploy.
    let child = spawn_run(&root, &["--name", "deploy", "--gate-query", "deploy of api finished", "--since", "last"]);
    wait_laps(&root, "deploy", 1);
    let next = root.remember("deploy of api finished (today's)", &[]);
    let r = loop_result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], next, "{r}");
    // `#ID` keeps out everything up to that memory.
    let since = format!("#{next}");
    let out = root.run(&[
        "loop",
        "run",
        "--name",
        "by-id",
        "--gate-query",
        "deploy of api finished",
        "--since",
        &since,
        "--max-iterations",
        "1",
        "--json",
    ]);
    let r: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(r["status"], "max_iterations", "{r}");
    assert!(r["reason"].as_str().unwrap().contains(&format!("older matches ignored (since #{next})")), "{r}");
}

/// Two gates, `all` and `any`, in both orders of arrival.
#[test]
fn two_gates_all_and_any_in_every_order() {
    let signals = [("tests green on main", "all tests green on main"), ("review of PR 7 approved", "PR 7 review: approved")];
    for mode in ["all", "any"] {
        for order in [[0, 1], [1, 0]] {
            let root = Root::new();
            let name = format!("join-{mode}-{}{}", order[0], order[1]);
            let gate = ["--name", &name, "--gate-query", signals[0].0, "--gate-query", signals[1].0, "--gate-mode", mode];
            let child = spawn_run(&root, &gate);
            let (run_id, _) = wait_laps(&root, &name, 1);
            let first = root.remember(signals[order[0]].1, &[]);
            if mode == "all" {
                wait_detail(&root, &run_id, "1 of 2 gates passed (all needed)");
                assert_eq!(status_of(&root, &run_id), "running", "{mode} {order:?}: one of two gates must not end it");
                let second = root.remember(signals[order[1]].1, &[]);
                let r = loop_result(child);
                assert_eq!(r["status"], "converged", "{r}");
                let m = r["matches"].as_array().unwrap();
                assert_eq!(m.len(), 2, "{r}");
                assert_eq!(m[order[0]]["memories"][0]["id"], first, "{r}");
                assert_eq!(m[order[1]]["memories"][0]["id"], second, "{r}");
                assert!(m.iter().all(|g| g["passed"] == true), "{r}");
                assert!(r["reason"].as_str().unwrap().contains("2 of 2 gates passed"), "{r}");
            } else {
                let r = loop_result(child);
                assert_eq!(r["status"], "converged", "{r}");
                assert_eq!(r["match"]["id"], first, "{r}");
                let m = r["matches"].as_array().unwrap();
                assert_eq!(m[order[0]]["passed"], true, "{r}");
                assert_eq!(m[order[1]]["passed"], false, "{r}");
            }
        }
    }
}

/// Files of the model and its runtime mapped by a process.
fn model_mappings(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut found: Vec<String> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("onnxruntime") || p.ends_with(".onnx"))
        .map(str::to_string)
        .collect();
    found.dedup();
    found
}

/// A tag-only gate converges on the memory carrying every tag, and the process never maps
/// ONNX Runtime or a model file; a gate with a query does (so the check can fail).
#[test]
fn a_tag_only_gate_converges_without_the_model_loaded() {
    let root = Root::new();
    root.remember("PR 42: approved by the reviewer", &["pr-42"]);
    // The control: a query gate embeds its query, so it maps the runtime and the model.
    let control = spawn_run(&root, &["--name", "control", "--gate-query", "a signal nobody writes, xyzzy", "--gate-min-score", "0.99"]);
    wait_laps(&root, "control", 1);
    let mapped = model_mappings(control.id());
    let _ = root.run(&["loop", "cancel", &wait_laps(&root, "control", 1).0]);
    let _ = loop_result(control);
    assert!(mapped.iter().any(|p| p.contains("onnxruntime")), "the control maps ONNX Runtime: {mapped:?}");

    let child = spawn_run(&root, &["--name", "tags", "--gate-tag", "pr-42", "--gate-tag", "approved"]);
    let (_, show) = wait_laps(&root, "tags", 1);
    assert!(show["laps"][0]["detail"].as_str().unwrap().contains("no memory carries every gate tag yet"), "{show}");
    // Read while the run waits (it has set up everything it needs and looked once).
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    assert!(maps.contains("slm"), "the waiting process's maps were read");
    let mapped = model_mappings(child.id());
    let id = root.remember("LGTM, shipping it", &["approved", "pr-42"]);
    let r = loop_result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], id, "{r}");
    assert!(r["termination"]["best_score"].is_null(), "a tag-only gate does not score: {r}");
    assert!(mapped.is_empty(), "a tag-only run mapped {mapped:?}");
}

/// Rows stored without a vector, read from the store itself.
fn pending(root: &Root) -> usize {
    root.open_store().pending_rows(1000).unwrap().len()
}

/// A tag-only `loop run` never loaded the model, so it does not start a background
/// `embed-pending` (which would load it) for its own lap memory: the lap waits, found by
/// recall meanwhile, until a batch of 64 rows is waiting; the run that makes it 64 starts
/// the backfill, which embeds them all. (The "does not start" half waits 2 s for a process
/// that would take the lock file at once; a backfill that ran would leave no row pending.)
#[test]
fn tag_only_runs_leave_lap_vectors_until_a_batch_is_waiting() {
    let root = Root::new();
    root.remember("PR 42: approved by the reviewer", &["approved", "pr-42"]);
    assert_eq!(pending(&root), 0, "remember embeds its own row");
    let tag_run = |name: &str| {
        let v = root.json(&["loop", "run", "--name", name, "--gate-tag", "pr-42", "--gate-tag", "approved"]);
        assert_eq!(v["status"], "converged", "{v}");
    };
    tag_run("t0");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(pending(&root), 1, "the lap memory waits for a vector");
    assert!(!root.dir().join("embed-pending.lock").exists(), "no backfill was started");
    let hits = root.json(&["recall", "gate passed", "--tag", "loop:t0"]);
    assert_eq!(hits["hits"].as_array().unwrap().len(), 1, "recall finds the pending lap: {hits}");
    for k in 1..64 {
        tag_run(&format!("t{k}"));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while pending(&root) > 0 {
        assert!(Instant::now() < deadline, "the 64th run started no backfill: {} rows pending", pending(&root));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The ids of the hits or memories of a recall or list result.
fn listed(v: &Value, key: &str) -> BTreeSet<i64> {
    ids(&v[key])
}

/// An expired memory ends no loop and is hidden from recall and list unless asked for;
/// `forget --expired` removes it and nothing else; remembering it again renews it.
#[test]
fn an_expired_signal_ends_no_loop_and_is_hidden() {
    let root = Root::new();
    let written = Instant::now();
    let lock = root.json(&["remember", "the deploy lock is held by agent A", "--ttl", "3s"])["id"].as_i64().unwrap();
    // Before its expiry the memory is a memory like any other.
    let fresh = root.json(&["list", "--limit", "10"]);
    assert!(listed(&fresh, "memories").contains(&lock), "{fresh}");
    let other = root.json(&["remember", "the deploy lock is held by agent B", "--ttl", "1h"])["id"].as_i64().unwrap();
    let plain = root.remember("agent C deployed the docs site", &[]);
    std::thread::sleep(Duration::from_millis(3300).saturating_sub(written.elapsed()));

    let hits = root.json(&["recall", "deploy lock held by agent A", "--limit", "5"]);
    assert!(!listed(&hits, "hits").contains(&lock), "an expired memory is hidden from recall: {hits}");
    assert!(listed(&hits, "hits").contains(&other), "{hits}");
    let all = root.json(&["recall", "deploy lock held by agent A", "--limit", "5", "--include-expired"]);
    assert_eq!(all["hits"][0]["id"], lock, "asked for, it is found (and best): {all}");
    assert!(all["hits"][0]["expires_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{all}");
    let list = root.json(&["list", "--limit", "10"]);
    assert_eq!(listed(&list, "memories"), BTreeSet::from([other, plain]), "{list}");
    let list_all = root.json(&["list", "--limit", "10", "--include-expired"]);
    assert_eq!(listed(&list_all, "memories"), BTreeSet::from([lock, other, plain]), "{list_all}");

    // A loop on exactly its words does not converge on it.
    let out = root.run(&[
        "--json",
        "loop",
        "run",
        "--name",
        "lock-a",
        "--gate-query",
        "the deploy lock is held by agent A",
        "--gate-min-score",
        "0.95",
        "--gate-verify",
        "none",
        "--max-iterations",
        "2",
        "--poll-interval-s",
        "0.1",
    ]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", crate::common::stderr(&out)));
    assert_eq!(r["status"], "max_iterations", "{r}");
    let show = root.json(&["loop", "show", r["run_id"].as_str().unwrap()]);
    let detail = show["laps"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("1 expired memory not counted"), "{detail}");

    // forget --expired removes the expired one only.
    let gone = root.json(&["forget", "--expired"]);
    assert_eq!(gone["forgotten"], serde_json::json!([lock]), "{gone}");
    assert_eq!(root.json(&["forget", "--expired"])["forgotten"], serde_json::json!([]));
    let left = root.json(&["list", "--limit", "10", "--include-expired"]);
    assert_eq!(listed(&left, "memories"), BTreeSet::from([other, plain]), "{left}");

    // Remembering the same memory again sets its expiry to the new write's (here: none).
    let again = root.json(&["remember", "the deploy lock is held by agent B"]);
    assert_eq!(again["id"], other, "{again}");
    assert_eq!(again["deduped"], true, "{again}");
    let row = root.json(&["list", "--limit", "10"]);
    let b = row["memories"].as_array().unwrap().iter().find(|m| m["id"] == other).unwrap().clone();
    assert!(b.get("expires_at").is_none(), "the renewal cleared the expiry: {b}");
}

/// A memory that passed one gate of two stops counting when it expires during the run: the
/// run does not converge when the second gate's signal arrives after the expiry.
#[test]
fn a_signal_that_expires_during_a_run_stops_counting() {
    let root = Root::new();
    let gate = [
        "--name",
        "lock-and-tests",
        "--gate-query",
        "the staging lock is held by agent B",
        "--gate-query",
        "all tests green on main",
        "--gate-min-score",
        "0.6",
        "--gate-verify",
        "none",
    ];
    let child = spawn_run(&root, &gate);
    let (run_id, _) = wait_laps(&root, "lock-and-tests", 1);
    let written = Instant::now();
    root.json(&["remember", "the staging lock is held by agent B", "--ttl", "4s"]);
    wait_detail(&root, &run_id, "1 of 2 gates passed (all needed)");
    let left = Duration::from_millis(4300).saturating_sub(written.elapsed());
    std::thread::sleep(left);
    root.remember("all tests green on main", &[]);
    wait_detail(&root, &run_id, "1 expired memory not counted");
    assert_eq!(status_of(&root, &run_id), "running", "an expired signal must not end the run");
    let _ = root.run(&["loop", "cancel", &run_id]);
    let r = loop_result(child);
    assert_eq!(r["status"], "cancelled", "{r}");
}

/// Bad input is exit 2 naming the field; nothing is written (the store keeps its one memory,
/// and no run is recorded).
#[test]
fn bad_coordination_input_is_refused_and_writes_nothing() {
    let root = Root::new();
    root.remember("something", &[]);
    let seventeen: Vec<String> = (0..17).flat_map(|i| ["--gate-query".to_string(), format!("signal {i}")]).collect();
    let mut many = vec!["loop", "run", "--name", "x"];
    many.extend(seventeen.iter().map(String::as_str));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--since", "yesterday"], "since"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--since", "2999-01-01T00:00:00Z"], "since"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--since", "-5m"], "since"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--gate-count", "0"], "gate_count"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--gate-count", "1001"], "gate_count"),
        (many, "gates"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--gates", r#"[{"query": "a"}]"#], "gates"),
        (vec!["loop", "run", "--name", "x", "--gates", "[{}]"], "gates"),
        (vec!["loop", "run", "--name", "x", "--gates", "[]"], "gates"),
        (vec!["loop", "run", "--name", "x", "--gates", r#"[{"query": "a", "count": 0}]"#], "gates"),
        (vec!["loop", "run", "--name", "x", "--gates", r#"[{"qeury": "a"}]"#], "gates"),
        (vec!["loop", "run", "--name", "x"], "gate_query"),
        (vec!["loop", "run", "--name", "x", "--gate-query", "q", "--gate-mode", "some"], "gate_mode"),
        (vec!["loop", "run", "--name", "x", "--gate-tag", "t", "--gate-verify", "model"], "gate_verify"),
        (vec!["remember", "a lock", "--ttl", "-5m"], "ttl"),
        (vec!["remember", "a lock", "--ttl", "soon"], "ttl"),
        (vec!["remember", "a lock", "--ttl", "0s"], "ttl"),
        (vec!["remember", "a lock", "--expires-at", "2020-01-01T00:00:00Z"], "expires_at"),
        (vec!["remember", "a lock", "--expires-at", "tomorrow"], "expires_at"),
    ];
    for (args, field) in cases {
        let err = expect_exit(&root.run(&args), 2, &format!("{args:?}"));
        assert!(err.contains(&format!("invalid {field}")), "{args:?}: {err}");
    }
    assert_eq!(root.count(), 1);
    assert!(root.json(&["loop", "history"])["runs"].as_array().unwrap().is_empty(), "no run was recorded");
}
