//! Import parsing: turning one JSON Lines record's `"embedding"` (384 numbers, ~4 KB of text)
//! into a unit vector, the import's costliest step after the store's own writes (a 1M-row
//! import parses 4 GB of numbers). Two number styles: six significant digits (`%.6g`, what
//! `scripts/gen-store.py` and many tools write) and the shortest round-trip form of an `f32`
//! (what `slm export` writes, through serde_json).
//!
//! Short run (CI): `cargo bench --bench import -- --warm-up-time 0.5 --measurement-time 2 --sample-size 10`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use slm::import::embedding::split_line;

mod common;

/// Lines per measured iteration.
const LINES: usize = 1_000;
/// Seed of the synthetic vectors.
const SEED: u64 = 11;

/// `x` with six significant digits, as C's `%.6g` prints it (exponent below 1e-4).
fn g6(x: f32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let e = f64::from(x.abs()).log10().floor() as i32;
    if e < -4 {
        return format!("{x:.5e}");
    }
    let s = format!("{x:.prec$}", prec = (5 - e).max(0) as usize);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// How a vector's numbers are written: the whole JSON array.
type Style = fn(&[f32]) -> String;

fn lines(style: Style) -> Vec<String> {
    common::synthetic(LINES, SEED)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(r#"{{"content":"the build of service {i} passed","tags":["bench","t{}"],"embedding":{}}}"#, i % 100, style(v))
        })
        .collect()
}

fn bench_parse(c: &mut Criterion) {
    let styles: [(&str, Style); 2] = [
        ("g6", |v| format!("[{}]", v.iter().map(|&x| g6(x)).collect::<Vec<_>>().join(","))),
        ("export", |v| serde_json::to_string(v).unwrap_or_default()),
    ];
    let mut g = c.benchmark_group("import_parse");
    g.throughput(Throughput::Elements(LINES as u64));
    for (name, style) in styles {
        let input = lines(style);
        assert!(input.iter().all(|l| split_line(l).is_some()), "{name}: every line parses");
        g.bench_function(name, |b| b.iter(|| input.iter().map(|l| split_line(l).map_or(0, |(r, v)| r.len() + v.len())).sum::<usize>()));
    }
    g.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
