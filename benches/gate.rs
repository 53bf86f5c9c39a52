//! Gate speed: the guard verifier on its own (compiling a query, checking one memory); one poll with 0, 1 and 10 new memories, and lap 1, on stores of 10k, 100k
//! (and 1M with `SLM_BENCH_GATE_1M=1`) memories, with one gate and with three (issue #28:
//! an idle poll and a lap of three gates against one); the end-to-end latency from a
//! `remember` commit in this process to `slm loop run` returning in another; and a tag-only
//! `slm loop run` as a whole process on a 1,000-memory store (no model to load).
//!
//! Stores hold synthetic vectors written straight through the store (embedding a million
//! texts would take an hour); the gate query is embedded by the real model.
//!
//! Short run (CI): `cargo bench --bench gate -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};

use slm::embed::OnnxEmbedder;
use slm::engine::{DataRoot, Engine};
use slm::loops::gate_set::GateSet;
use slm::loops::{Gate, LoopHost, MemoryGate};
use slm::memory::Kind;
use slm::record::{GateDef, GateMode, VerifySpec};

mod common;

/// Store sizes; 1M joins with SLM_BENCH_GATE_1M=1 (it takes minutes to write).
const SIZES: [usize; 2] = [10_000, 100_000];
const SIZE_1M: usize = 1_000_000;
/// New memories arriving between two polls.
const NEW_PER_POLL: [usize; 3] = [0, 1, 10];
/// Gate query used throughout.
const QUERY: &str = "the nightly build finished and every test passed";
/// Gate threshold of the poll benchmarks: nothing synthetic reaches it.
const THRESHOLD: f32 = 0.99;
/// The guard benchmarks' query and a ~200-character true signal it must accept (the accepting
/// path reads the whole memory, so it is the slower one).
const GUARD_QUERY: &str = "PR #42 approved";
const GUARD_MEMORY: &str = "review complete: PR #42 is approved by both reviewers after the second round; \
the CI pipeline is green, the changelog entry was added and the branch is ready to merge into main today";
/// Poll interval of the end-to-end latency runs: the default, so only the change feed can
/// make them fast (SPEC §4: ≤ 25 ms median from commit to return, whatever the poll).
const POLL_S: f64 = 1.0;

fn sizes() -> Vec<usize> {
    let mut v = SIZES.to_vec();
    if std::env::var_os("SLM_BENCH_GATE_1M").is_some() {
        v.push(SIZE_1M);
    }
    v
}

/// The benchmarked gate: the query, the threshold, the guard.
fn guard_gate() -> GateDef {
    gate_for(QUERY)
}

/// The queries of the three-gate benchmarks (the first is [`QUERY`]).
const QUERIES_3: [&str; 3] = [QUERY, "the release candidate was approved by QA", "the database migration completed on staging"];
/// Memories in the tag-only whole-process benchmark's store.
const TAG_STORE: usize = 1_000;

fn gate_for(query: &str) -> GateDef {
    GateDef {
        query: Some(query.into()),
        tags: Vec::new(),
        min_score: THRESHOLD as f64,
        verify: vec![VerifySpec::Guard],
        nli_min: 0.5,
        count: 1,
    }
}

/// Three gates joined by `all`, as a run of `--gate-query` x3 builds them.
fn three_gates(engine: &LoopHost) -> GateSet<'_> {
    GateSet::new(QUERIES_3.iter().map(|q| MemoryGate::new(engine, &gate_for(q), None).unwrap()).collect(), GateMode::All)
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(60)
}

fn open(dir: &std::path::Path) -> Engine {
    let root = DataRoot { dir: dir.to_path_buf(), explicit: true, store: None };
    Engine::open(&root, Arc::new(OnnxEmbedder::locate())).unwrap()
}

/// The guard alone: no model, no store.
fn bench_guard(c: &mut Criterion) {
    use slm::loops::verify::guard::Guard;
    let guard = Guard::new(GUARD_QUERY);
    assert!(guard.check(GUARD_MEMORY).is_ok(), "the benchmark memory must be a true signal");
    let mut g = c.benchmark_group("guard");
    g.bench_function("check_one", |b| b.iter(|| std::hint::black_box(&guard).check(std::hint::black_box(GUARD_MEMORY))));
    g.bench_function("new", |b| b.iter(|| Guard::new(std::hint::black_box(GUARD_QUERY))));
    g.finish();
}

fn bench_polls(c: &mut Criterion) {
    if OnnxEmbedder::locate().load().is_err() {
        eprintln!("gate: skipped, model not available");
        return;
    }
    for n in sizes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let t = Instant::now();
        common::fill_store(&dir, n, 11);
        eprintln!("gate: wrote {n} synthetic memories in {:.1} s", t.elapsed().as_secs_f64());
        let engine = LoopHost::new(Arc::new(open(&dir)));
        engine.refresh().unwrap(); // a long-lived process already holds the vectors

        let mut g = c.benchmark_group(format!("gate_{n}"));
        g.sample_size(10);
        g.bench_function("lap1", |b| {
            b.iter_batched(
                || MemoryGate::new(&engine, &guard_gate(), None).unwrap(),
                |mut gate| gate.observe(1, far()).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("lap1_3_gates", |b| {
            b.iter_batched(|| three_gates(&engine), |mut gate| gate.observe(1, far()).unwrap(), BatchSize::PerIteration)
        });
        let mut idle = three_gates(&engine);
        idle.observe(1, far()).unwrap();
        g.bench_function("poll_idle_3_gates", |b| b.iter(|| idle.observe(2, far()).unwrap()));
        for new in NEW_PER_POLL {
            let mut gate = MemoryGate::new(&engine, &guard_gate(), None).unwrap();
            gate.observe(1, far()).unwrap();
            let mut writer = slm::storage::Store::open(&dir.join(slm::storage::DB_FILE)).unwrap();
            let mut seed = 1_000u64;
            g.bench_function(BenchmarkId::new("poll_new", new), |b| {
                b.iter_batched(
                    || {
                        seed += 1;
                        if new > 0 {
                            let vecs = common::synthetic(new, seed);
                            let texts: Vec<String> = (0..new).map(|i| format!("poll {seed} new {i}")).collect();
                            let none: Vec<String> = Vec::new();
                            let rows: Vec<slm::storage::NewRow<'_>> = texts
                                .iter()
                                .zip(&vecs)
                                .map(|(c, v)| slm::storage::NewRow {
                                    kind: Kind::Memory,
                                    content: c,
                                    tags: &none,
                                    embedding: v,
                                    created_at: None,
                                    expires_at: None,
                                })
                                .collect();
                            writer.insert(&rows).unwrap();
                        }
                    },
                    |_| gate.observe(2, far()).unwrap(),
                    BatchSize::PerIteration,
                )
            });
        }
        g.finish();
    }
}

/// From a remember's commit here to `slm loop run` returning in another process, with the
/// change feed and (`feed_off`) without it.
fn bench_end_to_end(c: &mut Criterion) {
    if OnnxEmbedder::locate().load().is_err() {
        return;
    }
    let mut g = c.benchmark_group("end_to_end");
    g.sample_size(10);
    for feed_off in [false, true] {
        end_to_end(&mut g, feed_off);
    }
    g.finish();
}

fn end_to_end(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, feed_off: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let engine = open(&dir);
    let bin = env!("CARGO_BIN_EXE_slm");
    let mut round = 0u32;
    let label = if feed_off { "commit_to_loop_return_poll_1s_feed_off" } else { "commit_to_loop_return_poll_1s" };
    g.bench_function(label, |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                round += 1;
                let name = format!("e2e-{round}");
                let topic = format!("deploy number {round} of the payments service is complete");
                let mut child = std::process::Command::new(bin)
                    .env("SLM_FEED", if feed_off { "off" } else { "on" })
                    .arg("--data-dir")
                    .arg(&dir)
                    .args(["loop", "run", "--name", &name, "--gate-query", &topic, "--gate-min-score", "0.95"])
                    .args(["--poll-interval-s", &POLL_S.to_string(), "--max-wallclock-s", "60", "--json"])
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .unwrap();
                // Wait until the run is waiting (its first lap is recorded), then commit.
                while slm::loops::history(&engine, Some(&name), 1).unwrap().runs.first().is_none_or(|r| r.laps < 1) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                std::thread::sleep(Duration::from_millis(100));
                engine.remember(&topic, &[]).unwrap();
                let t = Instant::now();
                assert!(child.wait().unwrap().success());
                total += t.elapsed();
            }
            total
        })
    });
}

/// `slm loop demo` as a whole process: nothing to wait for, no model to load.
fn bench_demo(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let bin = env!("CARGO_BIN_EXE_slm");
    let mut g = c.benchmark_group("demo");
    g.sample_size(10);
    g.bench_function("whole_process", |b| {
        b.iter(|| {
            let out = std::process::Command::new(bin).arg("--data-dir").arg(&dir).args(["loop", "demo", "--json"]).output().unwrap();
            assert!(out.status.success());
        })
    });
    g.finish();
}

/// A tag-only `slm loop run` as a whole process on a store of [`TAG_STORE`] memories, one
/// of which carries the tags: lap 1 converges, and no model or runtime is loaded.
fn bench_tag_only(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    common::fill_store(&dir, TAG_STORE, 5);
    let engine = open(&dir);
    let tags = vec!["pr-42".to_string(), "approved".to_string()];
    engine.insert_rows(Kind::Memory, &[("review done, LGTM", tags)]).unwrap();
    drop(engine);
    let bin = env!("CARGO_BIN_EXE_slm");
    let mut g = c.benchmark_group("tag_only");
    g.sample_size(10);
    let mut round = 0u32;
    g.bench_function("loop_run_whole_process_1k", |b| {
        b.iter(|| {
            round += 1;
            let name = format!("tags-{round}");
            let out = std::process::Command::new(bin)
                .arg("--data-dir")
                .arg(&dir)
                .args(["loop", "run", "--name", &name, "--gate-tag", "pr-42", "--gate-tag", "approved", "--json"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        })
    });
    g.finish();
}

criterion_group!(benches, bench_guard, bench_polls, bench_end_to_end, bench_demo, bench_tag_only);
criterion_main!(benches);
