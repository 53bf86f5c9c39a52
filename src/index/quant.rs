//! The quantised first pass of exact search: an int8 copy of every vector with a proven
//! error bound, so a scan can read a quarter of the bytes and still never skip a row that
//! could reach a gate's threshold or recall's top k.
//!
//! Each vector `v` is normalised in `f64` (`u = v / |v|`, so cosine is a dot product of unit
//! vectors) and stored as a [`REC`]-byte record: 384 `i8` codes `c`, the step `inv` (so that
//! `û = c · inv`) and `err = |u − û|`, rounded up. A query is encoded the same way
//! (`q = q̂ + f`). Then, exactly in real arithmetic,
//!
//! ```text
//! cos(q, v) = q · u = q̂ · û + q̂ · e + f · u,   |q̂ · e| ≤ |q̂|·err,   |f · u| ≤ |f|
//! ```
//!
//! by Cauchy–Schwarz (`|u| = 1`). `q̂ · û` is an integer dot product (exact) times two
//! steps, so every row gets an interval `[approx − bound, approx + bound]` that holds its
//! true cosine. [`SLACK`] widens it to cover the rounding of the `f32` SIMD cosine that
//! finally scores the survivors (well under 1e-5 for 384 dimensions; see `spaces`). The
//! callers in [`super::exact`] keep every row whose interval can reach the threshold or the
//! k-th best lower bound and rescore those exactly from the `f32` vectors, so results are
//! identical to a full `f32` scan: the tests below check this against brute force on
//! random, clustered and tied data.

use simsimd::SpatialSimilarity;

use crate::embed::DIM;

/// Bytes of one record: the codes, then `inv` and `err` as little-endian `f32`.
pub const REC: usize = DIM + 8;

/// Added to every bound: covers the rounding of the `f32` cosine and of this module's own
/// arithmetic, with a wide margin (both are below 1e-5).
pub const SLACK: f64 = 5e-4;

/// Writes the record of `v` into `out` (`REC` bytes).
pub fn encode(v: &[f32], out: &mut [u8]) {
    debug_assert!(v.len() == DIM && out.len() == REC);
    let (codes, inv, err) = quantise(v);
    for (o, c) in out[..DIM].iter_mut().zip(codes) {
        *o = c as u8;
    }
    out[DIM..DIM + 4].copy_from_slice(&inv.to_le_bytes());
    out[DIM + 4..REC].copy_from_slice(&err.to_le_bytes());
}

/// `(codes, inv, err)` of `v`: `v / |v| ≈ codes · inv` with `|v/|v| − codes · inv| ≤ err`.
/// A zero (or non-finite) vector gets zero codes and `err = 0`: its cosine is 0, as
/// [`crate::spaces::cosine`] defines it, and so is its approximation.
fn quantise(v: &[f32]) -> ([i8; DIM], f32, f32) {
    let norm = v.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
    let mut codes = [0i8; DIM];
    if norm == 0.0 || !norm.is_finite() {
        return (codes, 0.0, 0.0);
    }
    let max = v.iter().map(|x| (f64::from(*x) / norm).abs()).fold(0.0, f64::max);
    // The step actually used is the f32 one that gets stored, so the residual is measured
    // against exactly what a scan multiplies by.
    let inv = (max / 127.0) as f32;
    let step = f64::from(inv);
    let mut sq = 0.0f64;
    for (c, x) in codes.iter_mut().zip(v) {
        let u = f64::from(*x) / norm;
        let q = (u / step).round().clamp(-127.0, 127.0);
        *c = q as i8;
        let e = u - q * step;
        sq += e * e;
    }
    // Round up: the bound must never be smaller than the true residual.
    let err = ((sq.sqrt() * (1.0 + 1e-9)) as f32).next_up();
    (codes, inv, err)
}

/// A query prepared for scanning records.
#[derive(Debug, Clone)]
pub struct Query {
    codes: [i8; DIM],
    inv: f64,
    /// `|q̂|`: multiplies each row's `err`.
    hat_norm: f64,
    /// `|f| + SLACK`: the part of every bound that does not depend on the row.
    fixed: f64,
}

impl Query {
    /// Encodes a query vector.
    pub fn new(q: &[f32]) -> Query {
        let (codes, inv, err) = quantise(q);
        let inv = f64::from(inv);
        let hat_norm = codes.iter().map(|c| (f64::from(*c) * inv).powi(2)).sum::<f64>().sqrt() * (1.0 + 1e-9);
        Query { codes, inv, hat_norm, fixed: f64::from(err) + SLACK }
    }

    /// The interval `(approx, bound)` holding the true cosine with the record `rec`:
    /// `approx − bound ≤ cos ≤ approx + bound`.
    #[inline]
    pub fn interval(&self, rec: &[u8]) -> (f64, f64) {
        let (codes, tail) = rec.split_at(DIM);
        let inv = f32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let err = f32::from_le_bytes([tail[4], tail[5], tail[6], tail[7]]);
        // SAFETY-free reinterpretation: i8 and u8 have the same size and alignment.
        let codes: &[i8] = bytes_as_i8(codes);
        let dot = dot_i8(&self.codes, codes);
        (dot * self.inv * f64::from(inv), self.hat_norm * f64::from(err) + self.fixed)
    }
}

#[inline]
fn bytes_as_i8(b: &[u8]) -> &[i8] {
    // `u8` and `i8` have identical size and alignment, so this view is always valid.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
}

/// The integer dot product of two code vectors, exactly (|sum| ≤ 384·127² < 2²⁴, so even a
/// floating-point accumulator would be exact).
#[inline]
fn dot_i8(a: &[i8], b: &[i8]) -> f64 {
    match i8::dot(a, b) {
        Some(d) => d,
        None => a.iter().zip(b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum::<i32>().into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spaces::cosine;

    fn rng(seed: u64) -> impl FnMut() -> f32 {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }
    }

    fn unit(mut v: Vec<f32>) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    #[test]
    fn the_interval_always_holds_the_exact_cosine() {
        let mut r = rng(7);
        let mut rec = vec![0u8; REC];
        let mut widest = 0.0f64;
        for i in 0..3000 {
            // Mix dense random vectors with spiky ones (one large component), which stress
            // the per-vector step.
            let mut v: Vec<f32> = (0..DIM).map(|_| r()).collect();
            if i % 3 == 0 {
                v[i % DIM] = 40.0;
            }
            let v = unit(v);
            let q = unit((0..DIM).map(|_| r()).collect());
            encode(&v, &mut rec);
            let (approx, bound) = Query::new(&q).interval(&rec);
            let exact = f64::from(cosine(&q, &v));
            assert!((exact - approx).abs() <= bound, "row {i}: exact {exact}, approx {approx} ± {bound}");
            widest = widest.max(bound);
        }
        assert!(widest < 0.1, "the bound is useful, not just true: {widest}");
    }

    #[test]
    fn zero_and_identical_vectors() {
        let mut rec = vec![0u8; REC];
        encode(&[0.0; DIM], &mut rec);
        let q = unit((0..DIM).map(|i| i as f32 + 1.0).collect());
        let (a, b) = Query::new(&q).interval(&rec);
        assert!(a.abs() <= b && f64::from(cosine(&q, &[0.0; DIM])).abs() <= a.abs() + b);
        encode(&q, &mut rec);
        let (a, b) = Query::new(&q).interval(&rec);
        assert!((1.0 - a).abs() <= b, "{a} ± {b}");
    }
}
