//! MCP server speed: spawn to `initialize` reply, idle RSS before and after the model loads,
//! and `recall` latency through MCP at 10k memories. A raw JSON-RPC client over the real
//! binary's stdio, so the numbers include everything a client sees.
//!
//! Short run (CI): `cargo bench --bench mcp -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10`.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

mod common;

/// Memories in the data root of the recall benchmark.
const RECALL_N: usize = 10_000;

struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Server {
    fn spawn(dir: &std::path::Path) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_slm"))
            .arg("--data-dir")
            .arg(dir)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Server { child, stdin, lines, next_id: 1 }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})).unwrap();
        serde_json::from_str(&self.lines.next().unwrap().unwrap()).unwrap()
    }

    fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        r
    }

    fn rss_mb(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bench_startup(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut g = c.benchmark_group("mcp");
    g.sample_size(10);
    g.bench_function("spawn_to_initialize_reply", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let mut s = Server::spawn(&dir);
                let r = s.initialize();
                total += t.elapsed();
                assert_eq!(r["result"]["serverInfo"]["name"], "slm");
            }
            total
        })
    });
    g.finish();

    let mut s = Server::spawn(&dir);
    s.initialize();
    std::thread::sleep(Duration::from_millis(200));
    let before = s.rss_mb();
    let r = s.request("tools/call", json!({"name": "recall", "arguments": {"query": "load the model"}}));
    assert!(r["result"]["isError"] != json!(true), "{r}");
    std::thread::sleep(Duration::from_millis(200));
    eprintln!("mcp: idle RSS before the model loads = {before:.1} MB, after = {:.1} MB", s.rss_mb());
}

fn bench_recall(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    common::fill_store(&dir, RECALL_N, 21);
    let mut s = Server::spawn(&dir);
    s.initialize();
    s.request("tools/call", json!({"name": "recall", "arguments": {"query": "warm up"}}));
    let mut g = c.benchmark_group("mcp");
    g.bench_function(format!("recall_{RECALL_N}"), |b| {
        b.iter(|| s.request("tools/call", json!({"name": "recall", "arguments": {"query": "deploy finished", "limit": 10}})))
    });
    g.finish();
}

criterion_group!(benches, bench_startup, bench_recall);
criterion_main!(benches);
