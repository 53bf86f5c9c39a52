//! Recall speed: embedding, cosine kernels, exact scans and HNSW search, and a whole
//! `slm recall` process.
//!
//! Vectors are synthetic but clustered (unit vectors drawn around `CLUSTERS` random centres),
//! which is closer to real sentence embeddings than uniform noise. The HNSW size is
//! `SLM_BENCH_HNSW_N` (default 100k; CI's short run sets 20k because a 100k build takes
//! minutes on 2 cores). recall@10 of HNSW against the exact scan and the peak memory of the
//! recall process are printed to stderr beside criterion's timings.
//!
//! Run: `cargo bench --bench recall` (full) or with
//! `-- --warm-up-time 0.5 --measurement-time 2 --sample-size 10` (short, as CI does).

use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use slm::embed::{Embedder, OnnxEmbedder};
use slm::index::exact;
use slm::index::hnsw::HnswIndex;
use slm::index::Filter;
use slm::index::VectorSet;
use slm::memory::Kind;
use slm::spaces::{cosine, cosine_plain};

mod common;
use common::synthetic;

/// Store sizes for the exact scan.
const SCAN_SIZES: [usize; 2] = [10_000, 100_000];
/// Default HNSW size (override with SLM_BENCH_HNSW_N).
const HNSW_N: usize = 100_000;
/// Queries used to measure recall@10.
const RECALL_QUERIES: usize = 200;
/// Memories in the data root of the whole-process benchmark.
const PROCESS_N: usize = 10_000;
/// HNSW search list size, as the engine uses.
const EF: usize = 96;

fn set_of(vecs: &[Vec<f32>]) -> VectorSet {
    let mut s = VectorSet::new();
    for (i, v) in vecs.iter().enumerate() {
        s.push(i as i64 + 1, Kind::Memory, v);
    }
    s
}

const ALL: Filter<'static> = Filter { include_laps: false, only_ids: None, after_id: 0, min_score: -1.0 };

fn bench_cosine(c: &mut Criterion) {
    let v = synthetic(2, 1);
    let mut g = c.benchmark_group("cosine_384d");
    g.bench_function("simsimd", |b| b.iter(|| cosine(std::hint::black_box(&v[0]), std::hint::black_box(&v[1]))));
    g.bench_function("plain", |b| b.iter(|| cosine_plain(std::hint::black_box(&v[0]), std::hint::black_box(&v[1]))));
    g.finish();
}

fn bench_exact(c: &mut Criterion) {
    let mut g = c.benchmark_group("exact_scan_top10");
    for n in SCAN_SIZES {
        let vecs = synthetic(n, 2);
        let set = set_of(&vecs);
        let q = synthetic(1, 99).remove(0);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| b.iter(|| exact::top_k(&set, &q, 10, &ALL)));
    }
    g.finish();
}

fn bench_hnsw(c: &mut Criterion) {
    let n: usize = std::env::var("SLM_BENCH_HNSW_N").ok().and_then(|v| v.parse().ok()).unwrap_or(HNSW_N);
    let vecs = synthetic(n, 3);
    let items: Vec<(i64, &[f32])> = vecs.iter().enumerate().map(|(i, v)| (i as i64 + 1, v.as_slice())).collect();
    let t = Instant::now();
    let index = HnswIndex::build(&items);
    eprintln!("hnsw: built {n} vectors in {:.1} s", t.elapsed().as_secs_f64());
    let set = set_of(&vecs);
    let queries = synthetic(RECALL_QUERIES, 4);
    let mut found = 0usize;
    for q in &queries {
        let truth: Vec<i64> = exact::top_k(&set, q, 10, &ALL).iter().map(|s| s.id).collect();
        let got = index.candidates(q, 10, EF);
        found += truth.iter().filter(|id| got.contains(id)).count();
    }
    eprintln!("hnsw: recall@10 = {:.4} at n = {n}, ef = {EF}", found as f64 / (10 * RECALL_QUERIES) as f64);
    let mut g = c.benchmark_group("hnsw_search_top10");
    let mut i = 0;
    g.bench_function(BenchmarkId::new("candidates_and_exact_rescore", n), |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            let q = &queries[i];
            let mut hits: Vec<_> = index
                .candidates(q, 30, EF)
                .into_iter()
                .map(|id| slm::index::Scored { id, score: cosine(q, &vecs[id as usize - 1]) })
                .collect();
            exact::sort_best_first(&mut hits);
            hits.truncate(10);
            hits
        })
    });
    g.finish();
}

fn bench_embed(c: &mut Criterion) {
    let e = OnnxEmbedder::locate();
    if let Err(err) = e.load() {
        eprintln!("embed: skipped, model not available: {err}");
        return;
    }
    let mut g = c.benchmark_group("embed");
    g.bench_function("one_short_query", |b| b.iter(|| e.embed_one("PR 42 approved").unwrap()));
    let texts: Vec<String> = (0..64).map(|i| format!("imported note number {i}: the deploy of service {} finished", i * 7)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    g.throughput(Throughput::Elements(64));
    g.bench_function("batch_64", |b| b.iter(|| e.embed(&refs).unwrap()));
    g.finish();

    // The import path: validate, embed in batches, write one transaction (memories/s).
    let tmp = tempfile::tempdir().unwrap();
    let root = slm::engine::DataRoot { dir: tmp.path().join("data"), explicit: true, store: None };
    let engine = slm::engine::Engine::open(&root, Arc::new(OnnxEmbedder::locate())).unwrap();
    let mut g = c.benchmark_group("import");
    g.sample_size(10);
    g.throughput(Throughput::Elements(slm::import::BATCH as u64));
    let mut round = 0u64;
    g.bench_function("remember_batch_256", |b| {
        b.iter(|| {
            round += 1;
            let texts: Vec<String> = (0..slm::import::BATCH).map(|i| format!("round {round} note {i}: build {} is green", i * 3)).collect();
            let rows: Vec<(&str, Vec<String>)> = texts.iter().map(|t| (t.as_str(), Vec::new())).collect();
            engine.insert_rows(Kind::Memory, &rows).unwrap()
        })
    });
    g.finish();
}

/// A data root holding `PROCESS_N` memories with synthetic vectors.
fn process_root() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    common::fill_store(&tmp.path().join("data"), PROCESS_N, 5);
    tmp
}

/// The peak RSS in MB of one `slm` run, measured by GNU time (Debian package `time`).
///
/// Not `wait4`'s rusage: Rust spawns children with vfork semantics, and the kernel then folds
/// the parent's (this benchmark's, several hundred MB) high-water mark into the child's.
fn peak_rss_mb(bin: &str, args: &[&std::ffi::OsStr]) -> Option<f64> {
    let out = std::process::Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stderr);
    let kb: f64 = text.lines().last()?.trim().parse().ok()?;
    Some(kb / 1024.0)
}

fn bench_process(c: &mut Criterion) {
    if OnnxEmbedder::locate().load().is_err() {
        eprintln!("process: skipped, model not available");
        return;
    }
    let root = process_root();
    let dir = root.path().join("data");
    let bin = env!("CARGO_BIN_EXE_slm");
    let run = || {
        let out = std::process::Command::new(bin)
            .arg("--data-dir")
            .arg(&dir)
            .args(["recall", "synthetic memory about deploys", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    let mut g = c.benchmark_group("process");
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("slm_recall", PROCESS_N), |b| b.iter(run));
    g.finish();
    let args = [
        std::ffi::OsStr::new("--data-dir"),
        dir.as_os_str(),
        std::ffi::OsStr::new("recall"),
        std::ffi::OsStr::new("synthetic memory about deploys"),
    ];
    match peak_rss_mb(bin, &args) {
        Some(mb) => eprintln!("process: peak RSS of `slm recall` at {PROCESS_N} memories = {mb:.1} MB"),
        None => eprintln!("process: peak RSS unavailable (/usr/bin/time missing)"),
    }
}

criterion_group!(benches, bench_cosine, bench_exact, bench_embed, bench_process, bench_hnsw);
criterion_main!(benches);
