//! `slm dashboard`: the JSON API against a real data root over real HTTP, the Host check and
//! the read-only rule, and the page in a real browser (Debian's Chromium via playwright-core).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::common::{expect_exit, Root};

struct Dashboard {
    child: Child,
    addr: String,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &Root) -> Dashboard {
    let mut child = root.cmd(&["dashboard", "--port", "0"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("dashboard: ").unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    let addr = url.trim_start_matches("http://").trim_end_matches('/').to_string();
    Dashboard { child, addr }
}

/// One HTTP/1.1 request; returns (status, body).
fn http(addr: &str, method: &str, path: &str, host: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status: u16 = raw.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    // Chunked bodies: axum sends JSON with a length, HTML too; keep it simple.
    (status, body)
}

fn get(d: &Dashboard, path: &str) -> Value {
    let (status, body) = http(&d.addr, "GET", path, &d.addr);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

#[test]
fn api_serves_memories_loops_runs_and_laps() {
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    root.remember("the weather is nice", &[]);
    let demo = root.run(&["loop", "demo", "--json"]);
    assert!(demo.status.success());
    let d = start(&root);

    let (status, html) = http(&d.addr, "GET", "/", &d.addr);
    assert_eq!(status, 200);
    assert!(html.contains("<title>slm dashboard</title>") && !html.contains("https://"), "assets are inline, no CDN");

    let s = get(&d, "/api/status");
    assert_eq!(s["memories"], 2);
    let r = get(&d, "/api/memories?q=PR%2042%20approved&limit=1");
    assert_eq!(r["hits"][0]["content"], "review complete: PR #42 is approved");
    assert!((r["hits"][0]["score"].as_f64().unwrap() - 0.834).abs() < 0.01);
    let l = get(&d, "/api/memories?limit=1");
    assert_eq!(l["memories"].as_array().unwrap().len(), 1);
    let next = l["next_before"].as_i64().unwrap();
    let l2 = get(&d, &format!("/api/memories?limit=1&before={next}"));
    assert_eq!(l2["memories"][0]["content"], "review complete: PR #42 is approved");
    assert_eq!(get(&d, "/api/memories?tags=pr-42")["memories"].as_array().unwrap().len(), 1);
    let laps = get(&d, "/api/memories?kind=lap&tags=loop:convergence-demo");
    assert_eq!(laps["memories"].as_array().unwrap().len(), 3);

    let loops = get(&d, "/api/loops");
    assert_eq!(loops["loops"][0]["name"], "convergence-demo");
    assert_eq!(loops["loops"][0]["runs"], 1);
    assert_eq!(loops["loops"][0]["last_status"], "converged");
    let runs = get(&d, "/api/runs?name=convergence-demo");
    let run_id = runs["runs"][0]["run_id"].as_str().unwrap().to_string();
    assert_eq!(runs["runs"][0]["laps"], 3);
    assert!(runs["runs"][0]["duration_s"].as_f64().unwrap() > 0.0);
    let run = get(&d, &format!("/api/runs/{run_id}"));
    assert_eq!(run["laps"].as_array().unwrap().len(), 3);
    assert_eq!(run["params"]["limits"]["gate_min_score"], 1.0);
    let after = get(&d, &format!("/api/runs/{run_id}?after_lap=2"));
    assert_eq!(after["laps"].as_array().unwrap().len(), 1);
    assert_eq!(after["laps"][0]["decision"], "converged");

    // Errors: unknown run 404, bad parameters 400 naming the field.
    let (status, body) = http(&d.addr, "GET", "/api/runs/nope", &d.addr);
    assert_eq!(status, 404, "{body}");
    let (status, body) = http(&d.addr, "GET", "/api/memories?kind=everything", &d.addr);
    assert_eq!(status, 400);
    assert!(body.contains("\"field\":\"kind\""), "{body}");
    let (status, _) = http(&d.addr, "GET", "/api/runs?limit=100000", &d.addr);
    assert_eq!(status, 400);
}

#[test]
fn runs_are_paginated() {
    let root = Root::new();
    root.json(&["status"]);
    {
        let mut store = slm::storage::Store::open(&root.db_path()).unwrap();
        for i in 0..120 {
            let row = slm::storage::RunRow {
                run_id: format!("bulk-{i:04}"),
                name: "bulk".into(),
                params: synthetic_params(),
                status: slm::record::RunStatus::Running,
                reason: None,
                laps: 0,
                started_at: slm::memory::now_rfc3339(),
                ended_at: None,
                pid: 0,
                proc_start: 0,
                result: None,
                state: None,
            };
            store.run_start(&row).unwrap();
            store.run_finish(&row.run_id, slm::record::RunStatus::MaxIterations, "synthetic", 1, "{}").unwrap();
        }
    }
    let d = start(&root);
    let mut seen = Vec::new();
    let mut path = "/api/runs?name=bulk&limit=50".to_string();
    loop {
        let page = get(&d, &path);
        seen.extend(page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_string()));
        match page["next_before"].as_i64() {
            Some(c) => path = format!("/api/runs?name=bulk&limit=50&before={c}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 120);
    assert_eq!(seen.first().unwrap(), "bulk-0119", "newest first");
    assert_eq!(seen.last().unwrap(), "bulk-0000");
}

#[test]
fn host_check_and_read_only() {
    let root = Root::new();
    let d = start(&root);
    let port = d.addr.rsplit(':').next().unwrap();
    for host in ["evil.example", "evil.example:80", "127.0.0.1:1", ""] {
        let (status, body) = http(&d.addr, "GET", "/api/status", host);
        assert_eq!(status, 403, "Host {host:?}: {body}");
    }
    let (status, _) = http(&d.addr, "GET", "/api/status", &format!("localhost:{port}"));
    assert_eq!(status, 200);
    for method in ["POST", "PUT", "DELETE", "PATCH"] {
        let (status, _) = http(&d.addr, method, "/api/memories", &d.addr);
        assert_eq!(status, 405, "{method} must not be allowed");
    }
    let (status, _) = http(&d.addr, "POST", "/api/loops/anything", &d.addr);
    assert_eq!(status, 404);
    // A non-loopback bind needs the explicit flag.
    let err = expect_exit(&root.run(&["dashboard", "--bind", "0.0.0.0", "--port", "0"]), 2, "non-loopback");
    assert!(err.contains("bind") && err.contains("--allow-remote"), "{err}");
}

#[test]
fn the_page_works_in_a_real_browser() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let script = repo.join("tests/browser/dashboard.mjs");
    assert!(
        repo.join("tests/browser/node_modules/playwright-core").is_dir() && std::path::Path::new("/usr/bin/chromium").exists(),
        "the browser test needs Debian's chromium and playwright-core: run scripts/test.sh"
    );
    let root = Root::new();
    root.remember("review complete: PR #42 is approved", &["pr-42"]);
    root.remember("the weather is nice", &[]);
    assert!(root.run(&["loop", "demo"]).status.success());
    // A run that stays live while the browser watches (1 lap a second for up to 60 s).
    let mut live = root
        .cmd(&["loop", "run", "--name", "live", "--gate-query", "never happens", "--gate-min-score", "0.99",
               "--max-wallclock-s", "60", "--poll-interval-s", "1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let d = start(&root);
    let shot = repo.join("target/dashboard.png");
    let out = Command::new("node").arg(&script).arg(format!("http://{}/", d.addr)).arg(&shot).arg("live").output().unwrap();
    let history = root.json(&["loop", "history", "--name", "live"]);
    let _ = root.run(&["loop", "cancel", history["runs"][0]["run_id"].as_str().unwrap()]);
    let _ = live.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "browser test failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let f: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert!(f["top_hit"].as_str().unwrap().contains("PR #42"));
    assert!((f["top_score"].as_f64().unwrap() - 0.834).abs() < 0.01);
    assert_eq!(f["demo_laps"], 3);
    assert_eq!(f["demo_points"], 3);
    assert_eq!(f["threshold_line"], 1);
    assert_eq!(f["demo_status"], "converged");
    assert!(f["live_after"].as_i64() > f["live_before"].as_i64());
    assert!(shot.is_file());
    eprintln!("browser facts: {f}");
}

/// The params of a synthetic run row: a memory gate at 0.8 with the default bounds.
fn synthetic_params() -> slm::record::RunParams {
    let limits = slm::record::Limits {
        max_iterations: 20,
        max_wallclock_s: 15.0,
        poll_interval_s: 1.0,
        max_tokens: 0,
        no_progress_window: 0,
        gate_min_score: 0.8,
    };
    let gate = slm::record::GateSpec::Memory {
        gate_query: "synthetic".into(),
        gate_tags: Vec::new(),
        gate_verify: vec![slm::record::VerifySpec::Guard],
        gate_nli_min: 0.5,
    };
    slm::record::RunParams { limits, gate }
}
