//! Loops wake on commit (issue #11): the real binary, several processes, one data root.
//!
//! Every test uses a poll interval far longer than what it measures, so a pass can only come
//! from the change feed; the fallback test turns the feed off and shows the poll schedule.
//! Bounds are generous (the machine is shared): what is asserted is the order of magnitude.
//!
//! Stores: both (scripts/test.sh runs this module again with every data root on PostgreSQL;
//! a test of SQLite itself ends in `_sqlite_only` and is left out there).

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::Root;

fn spawn_run(root: &Root, args: &[&str], feed_off: bool) -> Child {
    let mut a = vec!["loop", "run"];
    a.extend_from_slice(args);
    a.push("--json");
    let mut c = root.cmd(&a);
    if feed_off {
        c.env("SLM_FEED", "off");
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn loop run")
}

fn result(child: Child) -> Value {
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Waits until a run of `name` has recorded its first lap; returns its run id.
fn wait_first_lap(root: &Root, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let h = root.json(&["loop", "history", "--name", name]);
        if let Some(r) = h["runs"].as_array().and_then(|r| r.first()) {
            if r["laps"].as_i64() >= Some(1) {
                return r["run_id"].as_str().unwrap().to_string();
            }
        }
        assert!(Instant::now() < deadline, "run of {name} never recorded a lap");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const SLOW_POLL: &[&str] = &["--poll-interval-s", "60", "--max-wallclock-s", "120", "--gate-min-score", "0.8"];

#[test]
fn a_commit_wakes_a_loop_long_before_its_poll() {
    let root = Root::new();
    root.remember("an unrelated note about gardening", &[]);
    let mut args = vec!["--name", "wake", "--gate-query", "deploy 12 of the payments service finished"];
    args.extend_from_slice(SLOW_POLL);
    let child = spawn_run(&root, &args, false);
    wait_first_lap(&root, "wake");
    let id = root.remember("the deploy 12 of the payments service has finished", &[]);
    let written = Instant::now();
    let r = result(child);
    let after = written.elapsed();
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], id);
    assert_eq!(r["laps"], 2, "one lap at the start, one on the wake-up");
    assert!(after < Duration::from_secs(30), "converged {after:?} after the write; the poll is 60 s");
}

#[test]
fn without_the_feed_a_loop_falls_back_to_its_poll() {
    let root = Root::new();
    let args = [
        "--name",
        "poll",
        "--gate-query",
        "invoice 77 was paid in full",
        "--poll-interval-s",
        "2",
        "--max-wallclock-s",
        "60",
        "--gate-min-score",
        "0.8",
    ];
    let child = spawn_run(&root, &args, true);
    let run_id = wait_first_lap(&root, "poll");
    let started = Instant::now();
    let id = root.remember("invoice 77 was paid in full", &[]);
    let r = result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert!(started.elapsed() < Duration::from_secs(30));
    // Laps come on the poll schedule, 2 s apart: never sooner (nothing wakes the loop), and
    // the first lap after the commit converges (nothing is missed). Usually that is lap 2; a
    // remember slower than the 2 s poll (a loaded machine) makes it lap 3.
    let laps = root.json(&["loop", "show", &run_id])["laps"].as_array().unwrap().clone();
    assert_eq!(r["laps"].as_u64(), Some(laps.len() as u64), "{r}");
    assert!(laps.len() >= 2, "{laps:?}");
    let ts = |l: &Value| chrono::DateTime::parse_from_rfc3339(l["ts"].as_str().unwrap()).unwrap();
    for pair in laps.windows(2) {
        let gap = (ts(&pair[1]) - ts(&pair[0])).as_seconds_f64();
        // Never sooner than the poll, and never a poll skipped (a loaded machine adds a lap's
        // own time, well under a second).
        assert!((1.9..3.9).contains(&gap), "without a feed the next lap comes at the poll: {gap} s between {pair:?}");
    }
    let written = root.json(&["list", "--limit", "1"])["memories"][0].clone();
    assert_eq!(written["id"], id);
    let written = chrono::DateTime::parse_from_rfc3339(written["created_at"].as_str().unwrap()).unwrap();
    // A lap's time is stamped after it looked at the store, and a memory's just before its
    // commit: a lap that looked just before the commit may carry a slightly later time.
    let before_last = ts(&laps[laps.len() - 2]) - chrono::Duration::milliseconds(1000);
    assert!(before_last < written, "the lap before the converging one came after the commit: {laps:?}");
}

#[test]
fn a_cancel_from_another_process_arrives_through_the_feed() {
    let root = Root::new();
    let mut args = vec!["--name", "stop", "--gate-query", "this memory will never be written"];
    args.extend_from_slice(SLOW_POLL);
    let child = spawn_run(&root, &args, false);
    let run_id = wait_first_lap(&root, "stop");
    let asked = Instant::now();
    root.json(&["loop", "cancel", &run_id]);
    let r = result(child);
    assert_eq!(r["status"], "cancelled", "{r}");
    assert_eq!(r["laps"], 1);
    assert!(asked.elapsed() < Duration::from_secs(30), "cancelled {:?} after asking; the poll is 60 s", asked.elapsed());
}

#[test]
fn a_burst_of_unrelated_writes_costs_no_laps() {
    let root = Root::new();
    let args = [
        "--name",
        "burst",
        "--gate-query",
        "the security audit of release 9 signed off",
        "--poll-interval-s",
        "2",
        "--max-wallclock-s",
        "7",
        "--max-iterations",
        "200",
        "--gate-min-score",
        "0.9",
    ];
    let child = spawn_run(&root, &args, false);
    wait_first_lap(&root, "burst");
    // Unrelated memories from other processes, each its own commit and announcement.
    for i in 0..12 {
        root.remember(&format!("gardening tip number {i}: water the roses early"), &[]);
    }
    let r = result(child);
    assert_eq!(r["status"], "max_wallclock", "{r}");
    // 7 s at a 2 s poll: laps at 0, 2, 4, 6 and the deadline lap at 7, whatever was written.
    let laps = r["laps"].as_i64().unwrap();
    assert!((4..=6).contains(&laps), "{laps} laps: the writes must not add laps");
}

#[test]
fn writes_racing_the_start_of_a_loop_are_never_missed() {
    let root = Root::new();
    root.remember("warm up the data root", &[]);
    for round in 0..4 {
        let name = format!("race-{round}");
        let topic = format!("migration {round} of the orders database completed");
        let mut args = vec!["--name", name.as_str(), "--gate-query", topic.as_str()];
        args.extend_from_slice(SLOW_POLL);
        let child = spawn_run(&root, &args, false);
        // No wait: the write lands before, during or after the loop sets up its watch.
        std::thread::sleep(Duration::from_millis(40 * round as u64));
        let id = root.remember(&topic, &[]);
        let started = Instant::now();
        let r = result(child);
        assert_eq!(r["status"], "converged", "round {round}: {r}");
        assert_eq!(r["match"]["id"], id);
        assert!(started.elapsed() < Duration::from_secs(30), "round {round}: waited for the poll (60 s)");
    }
}
