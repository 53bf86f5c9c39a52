//! Vector space helpers: exact cosine similarity and the on-disk vector encoding.
//!
//! Every score slm reports or compares with a threshold comes from [`cosine`], computed
//! exactly with SIMD by `simsimd`. [`cosine_plain`] is the scalar reference the benchmarks
//! and tests compare it against. Vectors are stored in SQLite as little-endian `f32` bytes.

use simsimd::SpatialSimilarity;

use crate::embed::DIM;
use crate::{Error, Result};

/// Exact cosine similarity in [-1, 1] (SIMD). Zero vectors score 0.
#[inline]
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    // simsimd returns the cosine *distance* 1 - cos; it is None only for mismatched lengths.
    match f32::cosine(a, b) {
        Some(d) => (1.0 - d).clamp(-1.0, 1.0) as f32,
        None => cosine_plain(a, b),
    }
}

/// Scalar cosine similarity, the reference for [`cosine`].
pub fn cosine_plain(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        dot += f64::from(*x) * f64::from(*y);
        na += f64::from(*x) * f64::from(*x);
        nb += f64::from(*y) * f64::from(*y);
    }
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    (dot / (na.sqrt() * nb.sqrt())).clamp(-1.0, 1.0) as f32
}

/// Encodes a vector as little-endian `f32` bytes for a BLOB column.
pub fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes a BLOB written by [`to_blob`], checking its length.
pub fn from_blob(bytes: &[u8]) -> Result<Vec<f32>> {
    if bytes.len() != DIM * 4 {
        return Err(Error::Corrupt(format!("stored vector has {} bytes, want {}", bytes.len(), DIM * 4)));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Appends a BLOB written by [`to_blob`] to a flat buffer, checking its length.
pub fn extend_from_blob(out: &mut Vec<f32>, bytes: &[u8]) -> Result<()> {
    if bytes.len() != DIM * 4 {
        return Err(Error::Corrupt(format!("stored vector has {} bytes, want {}", bytes.len(), DIM * 4)));
    }
    out.extend(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_matches_plain() {
        let a: Vec<f32> = (0..DIM).map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0).collect();
        let b: Vec<f32> = (0..DIM).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
        assert!((cosine(&a, &b) - cosine_plain(&a, &b)).abs() < 1e-4);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-4);
    }

    #[test]
    fn blob_round_trip_and_length_check() {
        let v: Vec<f32> = (0..DIM).map(|i| i as f32 * 0.5).collect();
        assert_eq!(from_blob(&to_blob(&v)).unwrap(), v);
        assert!(from_blob(&[0u8; 12]).is_err());
    }
}
