//! The GEMM against a plain f64 reference: every operand layout, init, row affine, residual and
//! clamp, odd sizes
//! (tails in every dimension), k across several blocks, each SIMD level, 1 and 3 threads.

mod common;

use common::{assert_close, levels, rand_vec, Scoped};
use pteron_core::{Parallel, INLINE};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedA, PackedB, KC};
use pteron_kernels_cpu::simd::with_level;

/// The exact product `A·B` in f64, row-major `m × n`: computed once per size, since every
/// operand layout holds the same logical matrices.
fn product(
    m: usize,
    n: usize,
    k: usize,
    a: impl Fn(usize, usize) -> f32,
    b: impl Fn(usize, usize) -> f32,
) -> Vec<f64> {
    let mut p = vec![0.0f64; m * n];
    for i in 0..m {
        for kk in 0..k {
            let aik = a(i, kk) as f64;
            for j in 0..n {
                p[i * n + j] += aik * b(kk, j) as f64;
            }
        }
    }
    p
}

/// What the GEMM must write: the init, plus the product, then the row affine, the residual and
/// the clamp, in that order.
#[allow(clippy::too_many_arguments)]
fn reference(
    m: usize,
    n: usize,
    prod: &[f64],
    c0: &[f32],
    ldc: usize,
    init: &str,
    bias: &[f32],
    affine: Option<(&[f32], &[f32])>,
    residual: Option<(&[f32], usize)>,
    clamp: Option<(f32, f32)>,
) -> Vec<f32> {
    let mut c = c0.to_vec();
    for i in 0..m {
        for j in 0..n {
            let mut acc: f64 = match init {
                "zero" => 0.0,
                "acc" => c0[i * ldc + j] as f64,
                "row" => bias[i] as f64,
                _ => bias[j] as f64,
            };
            acc += prod[i * n + j];
            if let Some((sc, sh)) = affine {
                acc = acc * sc[i] as f64 + sh[i] as f64;
            }
            if let Some((r, ldr)) = residual {
                acc += r[i * ldr + j] as f64;
            }
            let mut v = acc as f32;
            if let Some((lo, hi)) = clamp {
                v = v.max(lo).min(hi);
            }
            c[i * ldc + j] = v;
        }
    }
    c
}

fn check(m: usize, n: usize, k: usize, par: &dyn Parallel, seed: u64) {
    let lda_r = k + 3;
    let lda_c = m + 2;
    let ldb_r = n + 1;
    let ldb_c = k + 5;
    let ldc = n + 4;
    let a_rows = rand_vec(m * lda_r, seed);
    // The column-major copies hold the same matrices as the row-major ones (padding differs).
    let mut a_cols = rand_vec(k * lda_c, seed + 1);
    for i in 0..m {
        for kk in 0..k {
            a_cols[kk * lda_c + i] = a_rows[i * lda_r + kk];
        }
    }
    let b_rows = rand_vec(k * ldb_r, seed + 2);
    let mut b_cols = rand_vec(n * ldb_c, seed + 3);
    for kk in 0..k {
        for j in 0..n {
            b_cols[j * ldb_c + kk] = b_rows[kk * ldb_r + j];
        }
    }
    let bias = rand_vec(m.max(n), seed + 4);
    let scale = rand_vec(m, seed + 6);
    let shift = rand_vec(m, seed + 7);
    let c0 = rand_vec(m * ldc, seed + 5);
    let ldr = n + 2;
    let res = rand_vec(m * ldr, seed + 8);
    let fa = |i: usize, kk: usize| a_rows[i * lda_r + kk];
    let fb = |kk: usize, j: usize| b_rows[kk * ldb_r + j];
    let pa = PackedA::new(m, k, fa);
    let pb = PackedB::new(k, n, fb);
    let prod = product(m, n, k, fa, fb);
    let tol = 1e-5 * (k as f32).sqrt().max(1.0);
    let mut combo = 0usize;
    for (ai, a) in [
        MatA::Packed(&pa),
        MatA::Rows {
            data: &a_rows,
            lda: lda_r,
        },
        MatA::Cols {
            data: &a_cols,
            lda: lda_c,
        },
    ]
    .into_iter()
    .enumerate()
    {
        for (bi, b) in [
            MatB::Packed(&pb),
            MatB::Rows {
                data: &b_rows,
                ldb: ldb_r,
            },
            MatB::Cols {
                data: &b_cols,
                ldb: ldb_c,
            },
        ]
        .into_iter()
        .enumerate()
        {
            for (init_name, init) in [
                ("zero", Init::Zero),
                ("acc", Init::Accumulate),
                ("row", Init::RowBias(&bias)),
                ("col", Init::ColBias(&bias)),
            ] {
                for (clamp, affine, residual) in [
                    (None, None, None),
                    (Some((-0.5f32, 0.75f32)), None, None),
                    (
                        Some((-0.5f32, 0.75f32)),
                        Some((&scale[..], &shift[..])),
                        None,
                    ),
                    (None, None, Some((&res[..], ldr))),
                    (
                        Some((-0.5f32, 0.75f32)),
                        Some((&scale[..], &shift[..])),
                        Some((&res[..], ldr)),
                    ),
                ] {
                    // Large sizes take every sixth of the 180 combinations, offset by the size
                    // (small ones take them all): under emulation each costs seconds.
                    combo += 1;
                    if m * n * k > 50_000 && !(combo + m + n + k).is_multiple_of(6) {
                        continue;
                    }
                    let want = reference(
                        m, n, &prod, &c0, ldc, init_name, &bias, affine, residual, clamp,
                    );
                    let mut c = c0.clone();
                    let epi = Epilogue {
                        init,
                        affine,
                        residual,
                        clamp,
                    };
                    gemm(par, m, n, k, a, b, &mut c, ldc, &epi).unwrap();
                    assert_close(
                        &c,
                        &want,
                        tol,
                        tol,
                        &format!(
                            "m{m} n{n} k{k} a{ai} b{bi} {init_name} {clamp:?} affine {} \
                             residual {}",
                            affine.is_some(),
                            residual.is_some()
                        ),
                    );
                }
            }
        }
    }
}

#[test]
fn matches_reference_on_odd_sizes() {
    let sizes = [
        (1, 1, 1),
        (3, 5, 7),
        (8, 32, 16),
        (9, 33, 17),
        (17, 70, 3),
        (6, 16, 300),
        (13, 47, KC + 1),
        (40, 20, 2 * KC + 5),
        // Packed weights deeper than one packed k block, and a task's rows too many for one.
        (13, 47, 1100),
        (600, 5, 500),
        (2, 100, 0),
        // A row-major B wider than the in-place stride limit: copied panel by panel.
        (20, 4100, 40),
        // Last row tiles of 1, 2, 3, 4 and 5 rows (the fewer-row kernels).
        (49, 160, 64),
        (50, 33, 19),
        (51, 17, 5),
        (52, 64, 12),
        (53, 40, 30),
    ];
    for l in levels() {
        with_level(l, || {
            for (i, &(m, n, k)) in sizes.iter().enumerate() {
                check(m, n, k, &INLINE, i as u64 * 10);
            }
        });
    }
}

#[test]
fn threads_split_the_work_correctly() {
    for l in levels() {
        with_level(l, || {
            for (i, &(m, n, k)) in [(64, 200, 40), (7, 9, 5), (130, 49, 96)].iter().enumerate() {
                check(m, n, k, &Scoped(3), 100 + i as u64);
            }
        });
    }
}

/// One-row products (decode steps of LLMs and speech decoders): wide, with column tails.
#[test]
fn one_row_products() {
    for l in levels() {
        with_level(l, || {
            for (i, &(m, n, k)) in [
                (1, 1063, 384),
                (1, 1000, 160),
                (2, 389, 300),
                (1, 70, 2 * KC + 5),
                // Panels per task that are no multiple of the panels streamed side by side.
                (1, 1381, 512),
            ]
            .iter()
            .enumerate()
            {
                check(m, n, k, &INLINE, 200 + i as u64);
                check(m, n, k, &Scoped(2), 300 + i as u64);
                check(m, n, k, &Scoped(3), 400 + i as u64);
            }
        });
    }
}

#[test]
fn rejects_short_operands() {
    let a = vec![0.0f32; 5];
    let b = vec![0.0f32; 6];
    let mut c = vec![0.0f32; 6];
    let r = gemm(
        &INLINE,
        2,
        3,
        3,
        MatA::Rows { data: &a, lda: 3 },
        MatB::Rows { data: &b, ldb: 3 },
        &mut c,
        3,
        &Epilogue::default(),
    );
    assert!(r.is_err());
}
