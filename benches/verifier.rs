//! The gate verifier model's costs (SPEC §4: loads in ≤ 150 ms; ≤ 6 ms a candidate at batch 1
//! with 128 tokens, ≤ 2 ms a candidate at batch 32): loading the shipped model (checksums,
//! tokenizer, ONNX session), one (query, memory) pair truncated to 128 tokens, and 32 pairs
//! in one call, reported per candidate. The verdict cache is bypassed: these are the model's
//! own costs, paid once per (query, memory) in a process.
//!
//! Short run (CI): `cargo bench --bench verifier -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use slm::loops::verify::model::VerifierModel;

/// The gate query of every pair.
const QUERY: &str = "the v5.0 release is deployed to production";
/// A memory long enough that the pair is cut at the model's 128 tokens.
const LONG_MEMORY: &str = "status update from the release agent: the v5.0 release train left the station this \
morning; the first rollout attempt in eu-west stalled on a readiness probe that pointed at the old health path, \
which we fixed and re-applied, and after that every region went green one after the other; canaries held for \
thirty minutes with error rates flat, latency p99 unchanged at 180 ms, no pages fired, the database migration \
had already finished last night, and the dashboards look normal; v5.0 is now serving all production traffic and \
the old pods were scaled down, so the deploy to production is complete and the change freeze can end";
/// Candidates per lap at most (loops::gate::CANDIDATES_PER_LAP).
const BATCH: usize = 32;

fn memories() -> Vec<String> {
    let kinds = ["deployed to production", "built and pushed", "rolled back", "live in staging", "scheduled for Friday"];
    (0..BATCH)
        .map(|i| format!("release {i}: v5.0 {} after the change review, checks {} of 12 green", kinds[i % kinds.len()], i % 13))
        .collect()
}

fn bench(c: &mut Criterion) {
    let dir = VerifierModel::locate().expect("models/verifier");
    let mut g = c.benchmark_group("verifier");
    g.bench_function("load", |b| b.iter(|| VerifierModel::load(&dir).unwrap()));
    let model = VerifierModel::load(&dir).unwrap();
    g.throughput(Throughput::Elements(1));
    g.bench_function("batch1_128_tokens", |b| b.iter(|| model.probabilities(QUERY, &[LONG_MEMORY]).unwrap()));
    let texts = memories();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("batch32", |b| b.iter(|| model.probabilities(QUERY, &refs).unwrap()));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
