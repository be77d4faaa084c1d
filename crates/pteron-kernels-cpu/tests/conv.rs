//! `aten::convolution.out` (weights prepared at load) against the portable kernel: pointwise,
//! im2col (strides, paddings, dilations, odd sizes), depthwise, grouped and transposed
//! (portable fallback), with and without bias, batches of 2, every SIMD level, threads.

mod common;

use common::{check_against_portable, levels, rand_vec, Scoped};
use pteron_core::{Parallel, ScalarType, INLINE};
use pteron_kernels_cpu::simd::with_level;

struct Case {
    x: [usize; 4],
    w: [usize; 4],
    stride: [i64; 2],
    pad: [i64; 2],
    dil: [i64; 2],
    groups: i64,
    transposed: bool,
}

fn out_shape(c: &Case) -> Vec<usize> {
    let o = |i: usize, k: usize| {
        if c.transposed {
            (i - 1) * c.stride[k] as usize - 2 * c.pad[k] as usize
                + c.dil[k] as usize * (c.w[2 + k] - 1)
                + 1
        } else {
            (i + 2 * c.pad[k] as usize - c.dil[k] as usize * (c.w[2 + k] - 1) - 1)
                / c.stride[k] as usize
                + 1
        }
    };
    let cout = if c.transposed {
        c.w[1] * c.groups as usize
    } else {
        c.w[0]
    };
    vec![c.x[0], cout, o(c.x[2], 0), o(c.x[3], 1)]
}

#[test]
fn convolution_matches_portable() {
    let cases = [
        // pointwise, tails in every dim
        Case {
            x: [1, 5, 7, 9],
            w: [11, 5, 1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        Case {
            x: [2, 40, 6, 6],
            w: [20, 40, 1, 1],
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        // im2col
        Case {
            x: [1, 3, 23, 21],
            w: [8, 3, 3, 3],
            stride: [2, 2],
            pad: [1, 1],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        Case {
            x: [2, 4, 11, 13],
            w: [6, 4, 3, 2],
            stride: [1, 2],
            pad: [1, 0],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        Case {
            x: [1, 3, 12, 12],
            w: [5, 3, 3, 3],
            stride: [1, 1],
            pad: [2, 2],
            dil: [2, 2],
            groups: 1,
            transposed: false,
        },
        Case {
            x: [1, 2, 9, 9],
            w: [4, 2, 5, 5],
            stride: [3, 3],
            pad: [2, 1],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        Case {
            x: [1, 8, 5, 5],
            w: [4, 8, 1, 1],
            stride: [2, 2],
            pad: [0, 0],
            dil: [1, 1],
            groups: 1,
            transposed: false,
        },
        // depthwise
        Case {
            x: [1, 6, 15, 17],
            w: [6, 1, 3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dil: [1, 1],
            groups: 6,
            transposed: false,
        },
        Case {
            x: [2, 5, 16, 19],
            w: [5, 1, 3, 3],
            stride: [2, 2],
            pad: [1, 1],
            dil: [1, 1],
            groups: 5,
            transposed: false,
        },
        Case {
            x: [1, 4, 10, 10],
            w: [4, 1, 5, 5],
            stride: [1, 1],
            pad: [2, 2],
            dil: [1, 1],
            groups: 4,
            transposed: false,
        },
        // fallbacks: grouped, dilated depthwise, transposed
        Case {
            x: [1, 4, 8, 8],
            w: [6, 2, 3, 3],
            stride: [1, 1],
            pad: [1, 1],
            dil: [1, 1],
            groups: 2,
            transposed: false,
        },
        Case {
            x: [1, 3, 9, 9],
            w: [3, 1, 3, 3],
            stride: [1, 1],
            pad: [2, 2],
            dil: [2, 2],
            groups: 3,
            transposed: false,
        },
        Case {
            x: [1, 3, 5, 5],
            w: [3, 2, 3, 3],
            stride: [2, 2],
            pad: [1, 1],
            dil: [1, 1],
            groups: 1,
            transposed: true,
        },
    ];
    for l in levels() {
        with_level(l, || {
            for (i, c) in cases.iter().enumerate() {
                let nx: usize = c.x.iter().product();
                let nw: usize = c.w.iter().product();
                let x = rand_vec(nx, i as u64);
                let w = rand_vec(nw, 100 + i as u64);
                let out = out_shape(c);
                let b = rand_vec(out[1], 200 + i as u64);
                for bias in [false, true] {
                    for par in [&INLINE as &dyn Parallel, &Scoped(3)] {
                        check_against_portable("aten::convolution.out", par, 1e-5, 1e-5, &|t| {
                            t.tensor(&c.x, &x);
                            t.constant(&c.w, &w);
                            if bias {
                                t.constant(&[out[1]], &b);
                            } else {
                                t.none();
                            }
                            t.int_list(&c.stride);
                            t.int_list(&c.pad);
                            t.int_list(&c.dil);
                            t.bool(c.transposed);
                            t.int_list(&[0, 0]);
                            t.int(c.groups);
                            let o = t.out(ScalarType::Float, &out);
                            t.ret(o);
                            vec![o]
                        });
                    }
                }
            }
        });
    }
}
