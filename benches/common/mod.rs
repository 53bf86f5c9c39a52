//! Synthetic, clustered unit vectors shared by the benchmarks: unit vectors drawn around
//! `CLUSTERS` random centres, closer to real sentence embeddings than uniform noise.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use slm::embed::DIM;

/// Cluster centres in the synthetic data.
const CLUSTERS: usize = 2_000;
/// Seed of the cluster centres, shared by data and queries.
const CENTRE_SEED: u64 = 7;
/// Noise around a centre (per dimension, before normalising).
const NOISE: f32 = 0.6;

fn normalize(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

/// `n` unit vectors around the shared centres; different seeds give different samples of the
/// same distribution, so queries look like the data they search.
pub fn synthetic(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut crng = StdRng::seed_from_u64(CENTRE_SEED);
    let centres: Vec<Vec<f32>> = (0..CLUSTERS).map(|_| normalize((0..DIM).map(|_| crng.random_range(-1.0..1.0)).collect())).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let c = &centres[rng.random_range(0..CLUSTERS)];
            normalize(c.iter().map(|x| x + NOISE * rng.random_range(-1.0f32..1.0) / (DIM as f32).sqrt() * 4.0).collect())
        })
        .collect()
}

/// Writes `n` memories with synthetic vectors (ids continue from what is stored), in
/// transactions of 10k rows, recording the product model's name so the engine accepts them.
#[allow(dead_code)] // not every bench uses it
pub fn fill_store(dir: &std::path::Path, n: usize, seed: u64) {
    use slm::embed::Embedder;
    std::fs::create_dir_all(dir).unwrap();
    let mut store = slm::storage::Store::open(&dir.join(slm::storage::DB_FILE)).unwrap();
    store.meta_init("embedding_model", slm::embed::OnnxEmbedder::locate().model_name()).unwrap();
    let no_tags: Vec<String> = Vec::new();
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(10_000);
        let vecs = synthetic(chunk, seed.wrapping_add(done as u64));
        let contents: Vec<String> = (0..chunk).map(|i| format!("synthetic memory {seed}-{}", done + i)).collect();
        let rows: Vec<slm::storage::NewRow<'_>> = contents
            .iter()
            .zip(&vecs)
            .map(|(c, v)| slm::storage::NewRow {
                kind: slm::memory::Kind::Memory,
                content: c,
                tags: &no_tags,
                embedding: v,
                created_at: None,
                expires_at: None,
            })
            .collect();
        store.insert(&rows).unwrap();
        done += chunk;
    }
}
