//! Activation and elementwise kernels against the portable ones: random inputs with odd
//! lengths (tails), specials (NaN, ±inf, ±0, large magnitudes), every SIMD level, threads.

mod common;

use common::{check_against_portable, levels, rand_vec, Scoped};
use pteron_core::{Parallel, Scalar, ScalarType, INLINE};
use pteron_kernels_cpu::simd::with_level;

fn inputs(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut v: Vec<f32> = rand_vec(n, seed).iter().map(|x| x * scale).collect();
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        30.0,
        -30.0,
        1e-8,
    ];
    for (i, s) in specials.iter().enumerate() {
        if i * 7 < n {
            v[i * 7] = *s;
        }
    }
    v
}

fn unary(op: &str, extra: &[(&str, f64)], out_pos: usize, par: &dyn Parallel, n: usize, seed: u64) {
    let x = inputs(n, seed, 6.0);
    check_against_portable(op, par, 2e-6, 2e-6, &|c| {
        c.tensor(&[n], &x);
        for &(kind, v) in extra {
            match kind {
                "str" => {
                    c.string(if v == 0.0 { "none" } else { "tanh" });
                }
                "double" => {
                    c.double(v);
                }
                "none" => {
                    c.none();
                }
                _ => unreachable!(),
            }
        }
        let o = c.out(ScalarType::Float, &[n]);
        assert_eq!(o, out_pos);
        c.ret(o);
        vec![o]
    });
}

#[test]
fn activations_match_portable() {
    for l in levels() {
        with_level(l, || {
            for (i, n) in [1usize, 7, 16, 33, 1000, 70_001].into_iter().enumerate() {
                let threads: &dyn Parallel = if n > 50_000 { &Scoped(3) } else { &INLINE };
                let s = i as u64;
                unary("aten::gelu.out", &[("str", 0.0)], 2, threads, n, s);
                unary("aten::gelu.out", &[("str", 1.0)], 2, threads, n, s);
                unary("aten::sigmoid.out", &[], 1, threads, n, s);
                unary("aten::tanh.out", &[], 1, threads, n, s);
                unary("aten::silu.out", &[], 1, threads, n, s);
                unary("aten::relu.out", &[], 1, threads, n, s);
                unary(
                    "aten::hardtanh.out",
                    &[("double", -0.5), ("double", 6.0)],
                    3,
                    threads,
                    n,
                    s,
                );
                unary(
                    "aten::hardtanh.out",
                    &[("double", 1.0), ("double", -1.0)],
                    3,
                    threads,
                    n,
                    s,
                );
                unary(
                    "aten::clamp.out",
                    &[("double", -0.5), ("double", 2.0)],
                    3,
                    threads,
                    n,
                    s,
                );
                unary(
                    "aten::clamp.out",
                    &[("none", 0.0), ("double", 2.0)],
                    3,
                    threads,
                    n,
                    s,
                );
                unary(
                    "aten::clamp.out",
                    &[("double", 3.0), ("double", 2.0)],
                    3,
                    threads,
                    n,
                    s,
                );
            }
        });
    }
}

#[test]
fn binary_ops_broadcast_like_portable() {
    let shapes: &[(&[usize], &[usize])] = &[
        (&[37], &[37]),
        (&[2, 3, 17], &[17]),
        (&[2, 3, 17], &[3, 1]),
        (&[1, 12, 9, 9], &[1, 1, 9, 9]),
        (&[4, 1, 5], &[1, 3, 1]),
        (&[5, 4], &[]),
        (&[], &[6, 2]),
        (&[3, 50_000], &[3, 1]),
        (&[2, 40_000], &[40_000]),
    ];
    for l in levels() {
        with_level(l, || {
            for (i, &(a, b)) in shapes.iter().enumerate() {
                let na: usize = a.iter().product();
                let nb: usize = b.iter().product();
                let out: Vec<usize> = pteron_kernels::util::broadcast_shapes(a, b)
                    .unwrap()
                    .to_vec();
                let xa = inputs(na.max(1), i as u64, 3.0);
                let xb: Vec<f32> = rand_vec(nb.max(1), 100 + i as u64)
                    .iter()
                    .map(|v| v + 1.5)
                    .collect();
                let par: &dyn Parallel = if na.max(nb) > 50_000 {
                    &Scoped(2)
                } else {
                    &INLINE
                };
                for (op, alpha) in [
                    ("aten::add.out", Some(1.0)),
                    ("aten::add.out", Some(0.5)),
                    ("aten::sub.out", Some(1.0)),
                    ("aten::sub.out", Some(2.0)),
                    ("aten::mul.out", None),
                    ("aten::div.out", None),
                ] {
                    check_against_portable(op, par, 1e-6, 1e-6, &|c| {
                        c.tensor(a, &xa[..na]);
                        c.tensor(b, &xb[..nb]);
                        if let Some(al) = alpha {
                            c.double(al);
                        }
                        let o = c.out(ScalarType::Float, &out);
                        c.ret(o);
                        vec![o]
                    });
                }
                for (op, alpha) in [
                    ("aten::add.Scalar_out", Some(2.0)),
                    ("aten::mul.Scalar_out", None),
                ] {
                    check_against_portable(op, par, 1e-6, 1e-6, &|c| {
                        c.tensor(a, &xa[..na]);
                        c.double(0.75);
                        if let Some(al) = alpha {
                            c.double(al);
                        }
                        let o = c.out(ScalarType::Float, a);
                        c.ret(o);
                        vec![o]
                    });
                }
                // pow to a scalar: 2 (int or double) runs here as x·x, 3 runs the portable
                // kernel; both bit for bit.
                for e in [Scalar::Int(2), Scalar::Double(2.0), Scalar::Double(3.0)] {
                    check_against_portable("aten::pow.Tensor_Scalar_out", par, 0.0, 0.0, &|c| {
                        c.tensor(a, &xa[..na]);
                        match e {
                            Scalar::Int(v) => c.int(v),
                            Scalar::Double(v) => c.double(v),
                            Scalar::Bool(v) => c.bool(v),
                        };
                        let o = c.out(ScalarType::Float, a);
                        c.ret(o);
                        vec![o]
                    });
                }
            }
        });
    }
}
