//! A deterministic embedder for unit tests of index and loop logic.
//!
//! It hashes word trigrams into a 384-d vector, so equal texts get equal vectors and texts that
//! share words score higher than texts that do not. It knows nothing of meaning. The product
//! never constructs it: every surface uses [`super::OnnxEmbedder`], and an engine opened on a
//! data root records its model name, so vectors from the two can never be mixed silently.

use ndarray::Array2;

use super::{Embedder, DIM};
use crate::Result;

/// Model name recorded for databases written by the hash embedder.
pub const HASH_MODEL_NAME: &str = "test-hash-embedder";

/// A deterministic, dependency-free stand-in for tests. Not for production use.
#[derive(Debug, Default, Clone, Copy)]
pub struct HashEmbedder;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

impl HashEmbedder {
    /// The vector for one text: word and character-trigram hashes, L2-normalised.
    pub fn vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; DIM];
        let lower = text.to_lowercase();
        for word in lower.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            let h = fnv1a(word.as_bytes());
            v[(h % DIM as u64) as usize] += 1.0;
            let chars: Vec<char> = word.chars().collect();
            for tri in chars.windows(3) {
                let s: String = tri.iter().collect();
                let h = fnv1a(s.as_bytes());
                v[(h % DIM as u64) as usize] += if h & (1 << 40) == 0 { 0.5 } else { -0.5 };
            }
        }
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        } else {
            v[0] = 1.0;
        }
        v
    }
}

impl Embedder for HashEmbedder {
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>> {
        let flat: Vec<f32> = texts.iter().flat_map(|t| Self::vector(t)).collect();
        Array2::from_shape_vec((texts.len(), DIM), flat).map_err(|e| crate::Error::Model { message: format!("hash embedder shape: {e}") })
    }

    fn count_tokens(&self, text: &str) -> Result<usize> {
        // Two special tokens plus one per whitespace-separated word: predictable in tests.
        Ok(text.split_whitespace().count() + 2)
    }

    fn model_name(&self) -> &str {
        HASH_MODEL_NAME
    }
}
