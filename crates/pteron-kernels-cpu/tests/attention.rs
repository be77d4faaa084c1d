//! Blocked attention (`custom_sdpa` / `sdpa_with_kv_cache` in f32) against the reference:
//! several key blocks, causal limits inside a block, grouped-query heads, additive masks
//! (with a fully masked row), head dims that are not a multiple of the SIMD width, every SIMD
//! level, one and two threads.

mod common;

use common::{levels, rand_vec, Scoped};
use pteron_core::{Parallel, INLINE};
use pteron_kernels::llm::{attend_f32, Attn};
use pteron_kernels_cpu::attention::attend_blocked;
use pteron_kernels_cpu::simd::with_level;

#[allow(clippy::too_many_arguments)]
fn attn(
    batch: usize,
    q_len: usize,
    heads: usize,
    kv_heads: usize,
    dim: usize,
    kv_rows: usize,
    start: usize,
    causal: bool,
    masked: bool,
) -> Attn {
    Attn {
        batch,
        q_len,
        heads,
        kv_heads,
        dim,
        kv_rows,
        num_keys: if masked { kv_rows } else { start + q_len },
        start,
        causal,
        scale: 1.0 / (dim as f32).sqrt(),
    }
}

fn check(at: &Attn, mask: Option<&[f32]>, seed: u64) {
    let q = rand_vec(at.batch * at.q_len * at.heads * at.dim, seed);
    // Scores of a few units: the softmax is not flat.
    let k: Vec<f32> = rand_vec(at.batch * at.kv_rows * at.kv_heads * at.dim, seed + 1)
        .iter()
        .map(|x| x * 3.0)
        .collect();
    let v = rand_vec(k.len(), seed + 2);
    let mut want = vec![0.0; q.len()];
    attend_f32(at, &INLINE, &q, &k, &v, mask, &mut want).unwrap();
    for l in levels() {
        for par in [&INLINE as &dyn Parallel, &Scoped(2)] {
            let mut got = vec![f32::NAN; q.len()];
            with_level(l, || attend_blocked(at, par, &q, &k, &v, mask, &mut got)).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-5 + 1e-4 * w.abs();
                assert!(
                    ok,
                    "{at:?} {l:?} threads {}: [{i}] {g} vs {w}",
                    par.num_threads()
                );
            }
        }
    }
}

#[test]
fn non_causal_over_several_key_blocks() {
    // Whisper's encoder shape, smaller: every query sees all 1100 keys (3 blocks of 512).
    check(&attn(1, 70, 3, 3, 64, 1100, 1030, false, false), None, 1);
    // Cross attention of one decoder token over the encoder's keys.
    check(&attn(1, 1, 6, 6, 64, 1500, 1499, false, false), None, 2);
}

#[test]
fn causal_prefill_with_grouped_heads() {
    // 40 rows x 3 heads per kv head: blocks of 32 rows cut inside a position's heads.
    check(&attn(2, 40, 6, 2, 24, 100, 10, true, false), None, 3);
    // Prefill past one key block; head dim with a tail.
    check(&attn(1, 600, 2, 1, 20, 700, 0, true, false), None, 4);
}

#[test]
fn decode_over_a_long_cache() {
    check(&attn(1, 1, 9, 3, 64, 1024, 700, true, false), None, 5);
    check(&attn(1, 1, 4, 4, 8, 16, 0, true, false), None, 6);
}

#[test]
fn additive_mask_and_fully_masked_row() {
    let at = attn(1, 5, 2, 2, 8, 520, 0, false, true);
    let mut mask: Vec<f32> = rand_vec(at.q_len * at.kv_rows, 7);
    for (j, m) in mask.iter_mut().enumerate() {
        if j % 7 == 0 {
            *m = f32::NEG_INFINITY;
        }
    }
    // Row 2 sees nothing: both give NaN.
    mask[2 * at.kv_rows..3 * at.kv_rows].fill(f32::NEG_INFINITY);
    // Row 4 sees only the second key block.
    mask[4 * at.kv_rows..4 * at.kv_rows + 512].fill(f32::NEG_INFINITY);
    check(&at, Some(&mask), 8);
}

#[test]
fn short_data_is_an_error() {
    let at = attn(1, 2, 2, 2, 8, 4, 2, false, false);
    let (q, k) = (vec![0.0; 32], vec![0.0; 63]);
    let mut out = vec![0.0; 32];
    assert!(attend_blocked(&at, &INLINE, &q, &k, &k, None, &mut out).is_err());
}

/// A prompt attended in one call gives, row for row, the bits of one token per call (what a
/// dynamically quantized program needs to keep ExecuTorch's greedy tokens): at every SIMD
/// level, one and two threads, grouped heads, past several row blocks.
#[test]
fn one_call_equals_one_row_per_call() {
    let (heads, kv_heads, dim, kv_rows, start, n) = (6, 2, 40, 64, 3, 19);
    let q = rand_vec(n * heads * dim, 7);
    let k: Vec<f32> = rand_vec(kv_rows * kv_heads * dim, 8)
        .iter()
        .map(|x| x * 3.0)
        .collect();
    let v = rand_vec(k.len(), 9);
    for l in levels() {
        for par in [&INLINE as &dyn Parallel, &Scoped(2)] {
            let at = attn(1, n, heads, kv_heads, dim, kv_rows, start, true, false);
            let mut all = vec![0.0; q.len()];
            with_level(l, || attend_blocked(&at, par, &q, &k, &v, None, &mut all)).unwrap();
            for m in 0..n {
                let one = attn(1, 1, heads, kv_heads, dim, kv_rows, start + m, true, false);
                let row = &q[m * heads * dim..(m + 1) * heads * dim];
                let mut out = vec![0.0; heads * dim];
                with_level(l, || attend_blocked(&one, par, row, &k, &v, None, &mut out)).unwrap();
                assert_eq!(
                    &all[m * heads * dim..(m + 1) * heads * dim],
                    &out[..],
                    "row {m} {l:?} threads {}",
                    par.num_threads()
                );
            }
        }
    }
}
