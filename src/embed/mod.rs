//! Turning text into vectors: the [`Embedder`] seam and its implementations.
//!
//! The memory engine ([`crate::engine`]) and the loop engine only ever see the [`Embedder`]
//! trait, which returns a batch as one `n × DIM` matrix. The product uses [`OnnxEmbedder`], which runs all-MiniLM-L6-v2 locally
//! through fastembed and ONNX Runtime from files found by [`locate`]. [`testing::HashEmbedder`]
//! is a deterministic stand-in for unit tests of index and loop logic only; nothing in the
//! product constructs it, so there is no silent fallback to it.

mod count;
pub mod locate;
mod onnx;
pub mod query_cache;
pub mod testing;
mod tokenizer;

pub use locate::ModelFiles;
pub(crate) use onnx::runtime;
pub use onnx::{prepare_optimized_model, OnnxEmbedder};

use ndarray::Array2;

use crate::Result;

/// The dimension of every embedding slm stores (all-MiniLM-L6-v2).
pub const DIM: usize = 384;

/// Something that maps texts to L2-normalised [`DIM`]-dimensional vectors.
pub trait Embedder: Send + Sync {
    /// Embeds a batch of texts: an `n × DIM` matrix, one row per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Array2<f32>>;

    /// Embeds one text.
    fn embed_one(&self, text: &str) -> Result<Vec<f32>> {
        let m = self.embed(&[text])?;
        match m.outer_iter().next() {
            Some(row) => Ok(row.to_vec()),
            None => Err(crate::Error::Model { message: "the model returned no embedding".into() }),
        }
    }

    /// Counts the tokens of `text` with the model's tokenizer (no padding, no truncation).
    fn count_tokens(&self, text: &str) -> Result<usize>;

    /// A short human name for the model, stored with the data and shown by `status`.
    fn model_name(&self) -> &str;

    /// True once the model is in memory (lazy embedders load on first use).
    fn is_loaded(&self) -> bool {
        true
    }

    /// The model's files, when it is read from disk: they identify the model for vectors kept
    /// between processes ([`query_cache`]). `None`: nothing is kept.
    fn model_files(&self) -> Option<&ModelFiles> {
        None
    }
}
