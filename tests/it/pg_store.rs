//! The shared PostgreSQL store (issue #13): two "hosts" (two data roots with their own feed
//! and derived files) on one private server, the real binary and the real model.
//!
//! Waits use a poll interval far longer than what is measured, so a prompt pass can only
//! come from LISTEN/NOTIFY (the two data roots share no feed folder).

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use slm::embed::DIM;
use slm::memory::Kind;
use slm::storage::{Location, NewRow, PgUrl, Store};

use crate::common::{expect_exit, loop_result, spawn_loop_run, Root};
use crate::pg::Cluster;

/// Waits until a run of `name` has recorded a lap, as seen from `root`; returns its run id.
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

fn store_at(url: &str) -> Store {
    let url = PgUrl::from_flag(Some(url)).unwrap().unwrap();
    Store::open_at(&Location::Postgres(url)).unwrap()
}

/// Host A remembers, host B recalls and lists it; a loop waiting on B converges on A's write
/// at once (woken by NOTIFY: the hosts share no feed folder); the ledger is one for both;
/// a forget on A is seen on B.
#[test]
fn two_hosts_share_memories_loops_and_the_ledger() {
    let cluster = Cluster::shared();
    let url = cluster.database();
    let (a, b) = (Root::on(&url), Root::on(&url));
    let first = a.remember("the nightly backup of the billing database completed", &["ops"]);
    let r = b.json(&["recall", "did the billing backup complete", "--tag", "ops"]);
    assert_eq!(r["hits"][0]["id"], first, "{r}");
    assert_eq!(b.json(&["list"])["memories"][0]["id"], first);
    assert_eq!(b.count(), 1);
    assert!(!b.dir().join("slm.db").exists(), "no SQLite file on a PostgreSQL host");

    let mut args = vec!["--name", "review", "--gate-query", "review complete: PR 42 is approved"];
    args.extend_from_slice(SLOW_POLL);
    let child = spawn_loop_run(&b, &args);
    let run_id = wait_first_lap(&a, "review"); // B's lap, read on A
    let id = a.remember("review complete: PR 42 is approved", &[]);
    let written = Instant::now();
    let r = loop_result(child);
    let after = written.elapsed();
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["match"]["id"], id);
    assert_eq!(r["run_id"], run_id);
    assert_eq!(r["laps"], 2, "one lap at the start, one on the notification");
    assert!(after < Duration::from_secs(30), "converged {after:?} after A's write; B polls every 60 s");

    let h = a.json(&["loop", "history", "--name", "review"]);
    assert_eq!(h["runs"][0]["final_status"], "converged", "{h}");
    let s = a.json(&["loop", "show", &run_id]);
    assert_eq!(s["laps"].as_array().unwrap().len(), 2, "{s}");

    a.json(&["forget", &first.to_string()]);
    let r = b.json(&["recall", "did the billing backup complete", "--tag", "ops"]);
    assert!(r["hits"].as_array().unwrap().is_empty(), "{r}");
}

/// A run recorded by another host stays `running` here: its pid means nothing on this host,
/// so it is never judged `interrupted` by a local process lookup.
#[test]
fn a_run_of_another_host_is_not_judged_by_a_local_pid() {
    let cluster = Cluster::shared();
    let url = cluster.database();
    let a = Root::on(&url);
    let started = a.json(&["loop", "start", "--name", "remote", "--gate-cmd", "true", "--max-wallclock-s", "120"]);
    let run_id = started["run_id"].as_str().unwrap().to_string();
    // Make it a blocking run owned by a process that does not exist on this machine.
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap().to_string();
    cluster.sql(&db, &format!("UPDATE loop_runs SET host = 'elsewhere', pid = 999999999, proc_start = 1 WHERE run_id = '{run_id}'"));
    let h = a.json(&["loop", "history", "--name", "remote"]);
    assert_eq!(h["runs"][0]["final_status"], "running", "{h}");
    // The same row on this host, with a dead pid, reads as interrupted.
    let host = slm_host();
    cluster.sql(&db, &format!("UPDATE loop_runs SET host = '{host}' WHERE run_id = '{run_id}'"));
    let h = a.json(&["loop", "history", "--name", "remote"]);
    assert_eq!(h["runs"][0]["final_status"], "interrupted", "{h}");
}

fn slm_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string()
}

/// The trap of sequence ids: a transaction can draw id 41, and id 42 commit first. Each insert
/// transaction here sleeps a random moment between drawing its id and committing (a trigger
/// the test adds), two writer connections insert at once, and a reader follows by watermark
/// (`id > last seen`, as every host's catch-up does). Over 1,000 rounds it never misses a row.
#[test]
fn interleaved_commits_never_hide_a_row_from_a_watermark_reader() {
    let cluster = Cluster::shared();
    let url = cluster.database();
    drop(store_at(&url)); // creates the schema
    let db = url.split('/').nth(3).unwrap().split('?').next().unwrap().to_string();
    cluster.sql(
        &db,
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(random() * 0.002); RETURN NEW; END $$;
         CREATE TRIGGER slow AFTER INSERT ON memories FOR EACH ROW EXECUTE FUNCTION slow();",
    );
    const ROUNDS: usize = 1000;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (url, done) = (url.clone(), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut s = store_at(&url);
                let v = vec![0.5f32; DIM];
                for i in 0..ROUNDS / 2 {
                    let content = format!("writer {w} row {i}");
                    s.insert(&[NewRow {
                        kind: Kind::Memory,
                        content: &content,
                        tags: &[],
                        embedding: &v,
                        created_at: None,
                        expires_at: None,
                    }])
                    .unwrap();
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    let reader = store_at(&url);
    let (mut seen, mut watermark) = (BTreeSet::new(), 0i64);
    loop {
        let finished = done.load(std::sync::atomic::Ordering::SeqCst) == 2;
        reader
            .vectors_after(watermark, None, &mut |id, _, _| {
                seen.insert(id);
                watermark = watermark.max(id);
                Ok(())
            })
            .unwrap();
        if finished {
            break;
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    let mut all = BTreeSet::new();
    reader
        .vectors_after(0, None, &mut |id, _, _| {
            all.insert(id);
            Ok(())
        })
        .unwrap();
    assert_eq!(all.len(), ROUNDS);
    let missed: Vec<_> = all.difference(&seen).collect();
    assert!(missed.is_empty(), "the watermark reader missed {} rows, e.g. {:?}", missed.len(), &missed[..missed.len().min(5)]);
}

/// 4 processes on each of 2 hosts, `n` `slm remember` each: exactly `8 n` memories, and both
/// hosts' status, list and recall agree. `n` is 25 (200 memories, about a minute on a busy
/// 2-core machine: each remember is a process that loads the model); the size,
/// 250 each (2,000), runs with `SLM_TEST_PG_REMEMBERS=250`.
#[test]
fn eight_processes_on_two_hosts_store_exactly_the_count() {
    let n: usize = std::env::var("SLM_TEST_PG_REMEMBERS").ok().and_then(|v| v.parse().ok()).unwrap_or(25);
    let cluster = Cluster::shared();
    let url = cluster.database();
    let hosts = [Arc::new(Root::on(&url)), Arc::new(Root::on(&url))];
    let workers: Vec<_> = (0..8)
        .map(|w| {
            let root = Arc::clone(&hosts[w % 2]);
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                for i in 0..n {
                    let content = format!("host {} worker {w} finished task {i}", w % 2);
                    let out = root.run(&["remember", &content, "--tag", &format!("worker-{w}"), "--json"]);
                    if !out.status.success() {
                        failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                    }
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = workers.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(failures.is_empty(), "{} calls failed, first: {:?}", failures.len(), failures.first());
    let total = 8 * n as u64;
    assert_eq!(hosts[0].count(), total);
    assert_eq!(hosts[1].count(), total);
    let ids = |r: &Root| -> Vec<i64> {
        r.json(&["recall", "worker 5 finished task 7", "--limit", "20"])["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(ids(&hosts[0]), ids(&hosts[1]));
    for h in &hosts {
        let listed = h.json(&["list", "--tag", "worker-3", "--limit", "1000"]);
        assert_eq!(listed["memories"].as_array().unwrap().len(), n, "{}", h.dir().display());
    }
}

/// Bad store values: a malformed or foreign URL is invalid input naming `store` (exit 2); an
/// unreachable server, a wrong password and a database from a newer slm exit 1 with one
/// line. The password never appears, in text or JSON, and `status` shows the URL redacted.
#[test]
fn bad_store_values_exit_cleanly_and_never_show_the_password() {
    let cluster = Cluster::shared();
    let root = Root::new();
    let pw = "hunter2-pw";
    let run = |store: &str, args: &[&str]| {
        let mut c = root.cmd(args);
        c.env("SLM_STORE", store);
        c.output().unwrap()
    };
    let check = |o: &std::process::Output, code: i32, what: &str, needle: &str| {
        let err = expect_exit(o, code, what);
        let all = format!("{err}{}", String::from_utf8_lossy(&o.stdout));
        assert!(!all.contains(pw) && !all.contains("wrong-pw"), "{what}: password shown: {all}");
        assert!(err.contains(needle), "{what}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
        err
    };
    for (store, what) in [
        (format!("mysql://root:{pw}@localhost/slm"), "a foreign scheme"),
        (format!("postgres://u:{pw}@localhost:notaport/slm"), "a bad port"),
        ("/var/lib/slm".to_string(), "a path"),
    ] {
        let err = check(&run(&store, &["status"]), 2, what, "invalid store");
        assert!(!root.dir().join("slm.db").exists(), "{what}: nothing written: {err}");
        let o = run(&store, &["status", "--json"]);
        let err = check(&o, 2, what, "\"field\":\"store\"");
        assert!(err.contains("invalid_input"), "{err}");
    }
    let unreachable = format!("postgres://u:{pw}@localhost/slm?host=/nonexistent-dir&port=1");
    check(&run(&unreachable, &["remember", "x"]), 1, "unreachable", "database error at postgres://u:***@");
    let db = cluster.database();
    let name = db.split('/').nth(3).unwrap().split('?').next().unwrap().to_string();
    let wrong = cluster.url_for("secret", Some("wrong-pw"), &name);
    check(&run(&wrong, &["status"]), 1, "wrong password", "password authentication failed");
    let right = cluster.url_for("secret", Some(pw), &name);
    let o = run(&right, &["status"]);
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(shown.contains("postgres://secret:***@localhost/") && !shown.contains(pw), "{shown}");
    cluster.sql(&name, "INSERT INTO slm_schema(version) VALUES (99)");
    check(&run(&right, &["status"]), 1, "a newer schema", "newer than this slm");
}

/// The server is stopped (`pg_ctl -m fast`) while a loop on host B waits with a 0.5 s poll,
/// so it laps through the outage: those laps see nothing new (their ledger writes fail open,
/// counted in `ledger_errors`) instead of ending the run `error`. A remember on host A during
/// the outage exits 1 with one line naming the store, password redacted, and stores nothing.
/// Once the server is back on the same port, the loop (within its bounds) converges on A's
/// next remember.
#[test]
fn a_server_restart_while_a_loop_waits() {
    let cluster = Cluster::private();
    let url = cluster.database();
    let pw = "hunter2-pw";
    let a = Root::on(&cluster.url_for("secret", Some(pw), &db_name(&url)));
    let b = Root::on(&url);
    a.remember("an unrelated note about lunch", &[]);
    let mut args = vec!["--name", "outage", "--gate-query", "the database migration 31 finished"];
    args.extend_from_slice(&["--poll-interval-s", "0.5", "--max-wallclock-s", "60", "--max-iterations", "200", "--gate-min-score", "0.8"]);
    let child = spawn_loop_run(&b, &args);
    let run_id = wait_first_lap(&a, "outage");
    cluster.stop_fast();
    let o = a.run(&["remember", "written during the outage"]);
    let err = expect_exit(&o, 1, "remember during the outage");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("database error at postgres://secret:***@localhost/"), "names the store: {err}");
    assert!(err.contains("error connecting to server"), "says why: {err}");
    assert!(!err.contains(pw) && !String::from_utf8_lossy(&o.stdout).contains(pw), "{err}");
    // Several of B's polls fall in the outage.
    std::thread::sleep(Duration::from_secs(2));
    cluster.restart();
    let id = a.remember("the database migration 31 finished", &[]);
    let r = loop_result(child);
    assert_eq!(r["status"], "converged", "{r}");
    assert_eq!(r["run_id"], run_id.as_str());
    assert_eq!(r["match"]["id"], id);
    assert!(r["termination"]["ledger_errors"].as_u64() > Some(0), "laps ran during the outage: {r}");
    let list = a.json(&["list", "--limit", "10"]);
    let contents: Vec<&str> = list["memories"].as_array().unwrap().iter().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["the database migration 31 finished", "an unrelated note about lunch"], "nothing half-written");
    let h = a.json(&["loop", "history", "--name", "outage"]);
    assert_eq!(h["runs"][0]["final_status"], "converged", "{h}");
}

fn db_name(url: &str) -> String {
    url.split('/').nth(3).unwrap().split('?').next().unwrap().to_string()
}

/// `slm export` from a local SQLite data root (memories and a loop run with its laps) piped
/// into `slm import -` on a PostgreSQL store moves everything: the shared store exports the
/// same lines back, byte for byte.
#[test]
fn export_from_sqlite_imports_into_postgres() {
    let cluster = Cluster::shared();
    let local = Root { tmp: tempfile::tempdir().unwrap(), store: None };
    local.remember("the staging cluster was upgraded to version 15", &["ops", "staging"]);
    local.remember("alice owns the billing service", &[]);
    let demo = local.run(&["loop", "demo", "--json"]);
    assert!(demo.status.success(), "{}", String::from_utf8_lossy(&demo.stderr));
    let exported = local.run(&["export"]);
    assert!(exported.status.success(), "{}", String::from_utf8_lossy(&exported.stderr));
    assert!(String::from_utf8_lossy(&exported.stdout).lines().count() >= 5);

    let shared = Root::on(&cluster.database());
    let mut import =
        shared.cmd(&["import", "-", "--json"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(import.stdin.as_mut().unwrap(), &exported.stdout).unwrap();
    drop(import.stdin.take());
    let out = import.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let hits = shared.json(&["recall", "which version runs on staging", "--tag", "staging"]);
    assert_eq!(hits["hits"][0]["content"], "the staging cluster was upgraded to version 15", "{hits}");
    assert_eq!(shared.json(&["loop", "history"])["runs"].as_array().unwrap().len(), 1);

    let back = shared.run(&["export"]);
    assert!(back.status.success(), "{}", String::from_utf8_lossy(&back.stderr));
    assert!(
        exported.stdout == back.stdout,
        "the shared store exports what it imported:\n{}\n---\n{}",
        String::from_utf8_lossy(&exported.stdout).chars().take(2000).collect::<String>(),
        String::from_utf8_lossy(&back.stdout).chars().take(2000).collect::<String>()
    );
}

/// `slm mcp` on host B sees a memory host A stored after the server started, in its next
/// recall, with no restart.
#[test]
fn mcp_on_one_host_recalls_what_another_host_just_stored() {
    use std::io::{BufRead, BufReader, Write};
    let cluster = Cluster::shared();
    let url = cluster.database();
    let (a, b) = (Root::on(&url), Root::on(&url));
    a.remember("an early note about the weather", &[]);
    let mut child = b.cmd(&["mcp"]).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut call = |id: u64, method: &str, params: Value| -> Value {
        writeln!(stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        if method == "initialize" {
            writeln!(stdin, "{}", serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        }
        serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap()
    };
    call(
        1,
        "initialize",
        serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
    );
    let recall = serde_json::json!({"name": "recall", "arguments": {"query": "the canary deploy of the search service passed"}});
    let before = call(2, "tools/call", recall.clone());
    let hits = before["result"]["structuredContent"]["hits"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 1, "{before}");
    let id = a.remember("the canary deploy of the search service passed", &[]);
    let after = call(3, "tools/call", recall);
    assert_eq!(after["result"]["structuredContent"]["hits"][0]["id"], id, "{after}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// `slm status` on PostgreSQL reports the PostgreSQL schema's version; a data root used with
/// `--store` and then without is refused as a usage error (exit 2, field `store`) naming the
/// store it serves, password redacted, and nothing is created in it.
#[test]
fn status_shows_the_postgres_schema_and_a_data_root_remembers_its_store() {
    let cluster = Cluster::shared();
    let url = cluster.database();
    let pw = "hunter2-pw";
    let host = Root::on(&cluster.url_for("secret", Some(pw), &db_name(&url)));
    host.remember("the release notes were published", &[]);
    let s = host.json(&["status"]);
    assert_eq!(s["schema_version"], slm::storage::PG_SCHEMA_VERSION, "{s}");
    let local = Root::new();
    if local.store.is_none() {
        assert_eq!(local.json(&["status"])["schema_version"], slm::storage::SCHEMA_VERSION);
    }

    let bare = Root { tmp: tempfile::tempdir().unwrap(), store: None };
    std::fs::rename(host.dir(), bare.dir()).unwrap();
    for args in [&["status"][..], &["remember", "a local note"][..], &["status", "--json"][..]] {
        let o = bare.run(args);
        let err = expect_exit(&o, 2, "the data root of a PostgreSQL host without --store");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("PostgreSQL store postgres://secret:***@localhost/"), "names the store: {err}");
        assert!(err.contains("--store"), "says the fix: {err}");
        assert!(!err.contains(pw), "{err}");
    }
    assert!(!bare.db_path().exists(), "no SQLite file was created");
}
