//! Dashboard API latency with a large data root: 100k memories and 10k runs (10 loops).
//! Each request is a fresh HTTP/1.1 connection to the real `slm dashboard` process.
//!
//! Short run (CI): `cargo bench --bench dashboard -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use criterion::{criterion_group, criterion_main, Criterion};

mod common;

/// Memories in the data root.
const MEMORIES: usize = 100_000;
/// Runs in the data root, spread over `LOOPS` loop names.
const RUNS: usize = 10_000;
const LOOPS: usize = 10;

struct Server(Child, String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> usize {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).unwrap();
    assert!(body.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&body[..body.len().min(300)]));
    body.len()
}

fn bench_api(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    common::fill_store(&dir, MEMORIES, 31);
    {
        let mut store = slm::storage::Store::open(&dir.join(slm::storage::DB_FILE)).unwrap();
        for i in 0..RUNS {
            let row = slm::storage::RunRow {
                run_id: format!("loop{}-{i:06}", i % LOOPS),
                name: format!("loop{}", i % LOOPS),
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
                host: None,
            };
            store.run_start(&row).unwrap();
            store.run_finish(&row.run_id, slm::record::RunStatus::MaxIterations, "synthetic run", 20, "{}").unwrap();
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_slm"))
        .arg("--data-dir")
        .arg(&dir)
        .args(["dashboard", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().trim_start_matches("dashboard: http://").trim_end_matches('/').to_string();
    let server = Server(child, addr);
    let addr = server.1.clone();

    let mut g = c.benchmark_group("dashboard_api");
    for (name, path) in [
        ("runs_page_50_of_10k", "/api/runs?name=loop3&limit=50".to_string()),
        ("runs_page_50_all_loops", "/api/runs?limit=50".to_string()),
        ("loops_list", "/api/loops".to_string()),
        ("memories_page_50_of_100k", "/api/memories?limit=50".to_string()),
        ("memories_deep_page", format!("/api/memories?limit=50&before={}", MEMORIES / 2)),
        ("status", "/api/status".to_string()),
        ("page_html", "/".to_string()),
    ] {
        g.bench_function(name, |b| b.iter(|| get(&addr, &path)));
    }
    g.finish();
    drop(server);
}

criterion_group!(benches, bench_api);
criterion_main!(benches);

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
