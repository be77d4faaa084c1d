//! Softmax, layer norm and mean against the portable kernels: odd row lengths (tails), rows
//! with NaN / -inf, optional affine parameters, every SIMD level, threads.

mod common;

use common::{check_against_portable, levels, rand_vec, Scoped};
use pteron_core::{Parallel, ScalarType, INLINE};
use pteron_kernels_cpu::simd::with_level;

#[test]
fn softmax_matches_portable() {
    for l in levels() {
        with_level(l, || {
            for (i, shape) in [&[7][..], &[3, 16], &[2, 3, 37], &[12, 128, 128], &[4, 1]]
                .iter()
                .enumerate()
            {
                let n: usize = shape.iter().product();
                let mut x: Vec<f32> = rand_vec(n, i as u64).iter().map(|v| v * 8.0).collect();
                if n > 20 {
                    x[3] = f32::NEG_INFINITY;
                    x[n - 1] = -3.4e38;
                }
                let par: &dyn Parallel = if n > 100_000 { &Scoped(2) } else { &INLINE };
                for dim in [-1i64, shape.len() as i64 - 1] {
                    check_against_portable("aten::_softmax.out", par, 1e-6, 1e-5, &|c| {
                        c.tensor(shape, &x);
                        c.int(dim);
                        c.bool(false);
                        let o = c.out(ScalarType::Float, shape);
                        c.ret(o);
                        vec![o]
                    });
                }
            }
            // A NaN makes its row NaN; other dims fall back.
            let x = [1.0, f32::NAN, 2.0, 0.5, 0.25, 3.0];
            for dim in [-1i64, 0] {
                check_against_portable("aten::_softmax.out", &INLINE, 1e-6, 1e-5, &|c| {
                    c.tensor(&[2, 3], &x);
                    c.int(dim);
                    c.bool(false);
                    let o = c.out(ScalarType::Float, &[2, 3]);
                    c.ret(o);
                    vec![o]
                });
            }
        });
    }
}

#[test]
fn layer_norm_matches_portable() {
    for l in levels() {
        with_level(l, || {
            for (i, (shape, k)) in [
                (&[5, 7][..], 1),
                (&[2, 3, 37], 1),
                (&[2, 3, 8], 2),
                (&[128, 384], 1),
                (&[300, 384], 1),
            ]
            .into_iter()
            .enumerate()
            {
                let n: usize = shape.iter().product();
                let inner: usize = shape[shape.len() - k..].iter().product();
                let x: Vec<f32> = rand_vec(n, i as u64)
                    .iter()
                    .map(|v| v * 3.0 + 0.5)
                    .collect();
                let w = rand_vec(inner, 10 + i as u64);
                let b = rand_vec(inner, 20 + i as u64);
                let par: &dyn Parallel = if n > 100_000 { &Scoped(3) } else { &INLINE };
                let ns: Vec<i64> = shape[shape.len() - k..].iter().map(|&v| v as i64).collect();
                let mut stat = shape.to_vec();
                for s in &mut stat[shape.len() - k..] {
                    *s = 1;
                }
                for (with_w, with_b) in [(true, true), (false, true), (true, false), (false, false)]
                {
                    check_against_portable("aten::native_layer_norm.out", par, 1e-5, 1e-5, &|c| {
                        c.tensor(shape, &x);
                        c.int_list(&ns);
                        if with_w {
                            c.tensor(&shape[shape.len() - k..], &w);
                        } else {
                            c.none();
                        }
                        if with_b {
                            c.tensor(&shape[shape.len() - k..], &b);
                        } else {
                            c.none();
                        }
                        c.double(1e-5);
                        let o = c.out(ScalarType::Float, shape);
                        let m = c.out(ScalarType::Float, &stat);
                        let r = c.out(ScalarType::Float, &stat);
                        let list = c.tensor_list(&[c.args[o], c.args[m], c.args[r]]);
                        let _ = list;
                        vec![o, m, r]
                    });
                }
            }
        });
    }
}

#[test]
fn mean_matches_portable() {
    for l in levels() {
        with_level(l, || {
            for (shape, dims, keep) in [
                (&[1, 1280, 7, 7][..], &[-1i64, -2][..], true),
                (&[2, 3, 5], &[2], false),
                (&[2, 3, 5], &[1, 2], false),
                (&[2, 3, 5], &[0], true),
                (&[4, 33], &[-1], true),
            ] {
                let n: usize = shape.iter().product();
                let x = rand_vec(n, 7);
                let rank = shape.len() as i64;
                let mut out = Vec::new();
                for (d, &size) in shape.iter().enumerate() {
                    let reduced = dims.iter().any(|&r| (r + rank) % rank == d as i64);
                    if !reduced {
                        out.push(size);
                    } else if keep {
                        out.push(1);
                    }
                }
                check_against_portable("aten::mean.out", &INLINE, 1e-6, 1e-5, &|c| {
                    c.tensor(shape, &x);
                    c.int_list(dims);
                    c.bool(keep);
                    c.none();
                    let o = c.out(ScalarType::Float, &out);
                    c.ret(o);
                    vec![o]
                });
            }
        });
    }
}
