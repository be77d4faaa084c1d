//! Depthwise convolution against a direct reference: filter sizes, strides, paddings, odd
//! widths (tails), clamps, every SIMD level, several tasks.

mod common;

use common::{assert_close, levels, rand_vec, Scoped};
use pteron_core::INLINE;
use pteron_kernels_cpu::dwconv::{depthwise, DwGeom};
use pteron_kernels_cpu::simd::with_level;

fn reference(
    g: &DwGeom,
    batch: usize,
    x: &[f32],
    w: &[f32],
    b: &[f32],
    clamp: Option<(f32, f32)>,
) -> Vec<f32> {
    let (oh, ow) = (g.oh(), g.ow());
    let mut out = vec![0.0; batch * g.channels * oh * ow];
    for n in 0..batch {
        for c in 0..g.channels {
            let p = n * g.channels + c;
            for r in 0..oh {
                for q in 0..ow {
                    let mut acc = b[c] as f64;
                    for kh in 0..g.kh {
                        for kw in 0..g.kw {
                            let ih = (r * g.sh + kh) as isize - g.ph as isize;
                            let iw = (q * g.sw + kw) as isize - g.pw as isize;
                            if ih >= 0 && iw >= 0 && (ih as usize) < g.ih && (iw as usize) < g.iw {
                                acc += w[c * g.kh * g.kw + kh * g.kw + kw] as f64
                                    * x[(p * g.ih + ih as usize) * g.iw + iw as usize] as f64;
                            }
                        }
                    }
                    let mut v = acc as f32;
                    if let Some((lo, hi)) = clamp {
                        v = v.max(lo).min(hi);
                    }
                    out[(p * oh + r) * ow + q] = v;
                }
            }
        }
    }
    out
}

#[test]
fn matches_reference() {
    let geoms = [
        // (channels, ih, iw, k, stride, pad)
        (3, 7, 9, 3, 1, 1),
        (4, 12, 37, 3, 1, 1),
        (5, 13, 35, 3, 2, 1),
        (2, 16, 16, 3, 2, 1),
        (3, 9, 21, 5, 1, 2),
        (2, 11, 19, 5, 2, 2),
        (2, 10, 10, 3, 1, 0),
        (2, 9, 40, 3, 3, 1),
        (2, 6, 6, 1, 1, 0),
        (1, 33, 70, 3, 2, 1),
        (2, 14, 14, 7, 1, 3),
    ];
    for l in levels() {
        with_level(l, || {
            for (i, &(c, ih, iw, k, st, pad)) in geoms.iter().enumerate() {
                let g = DwGeom {
                    channels: c,
                    ih,
                    iw,
                    kh: k,
                    kw: k,
                    sh: st,
                    sw: st,
                    ph: pad,
                    pw: pad,
                };
                for batch in [1, 2] {
                    let x = rand_vec(batch * c * ih * iw, i as u64);
                    let w = rand_vec(c * k * k, 50 + i as u64);
                    let b = rand_vec(c, 90 + i as u64);
                    for clamp in [None, Some((0.0, 0.5))] {
                        let want = reference(&g, batch, &x, &w, &b, clamp);
                        for threads in [1, 3] {
                            let mut out = vec![f32::NAN; want.len()];
                            let mut scratch = vec![0.0; g.buffer_len() * threads];
                            let r = if threads == 1 {
                                depthwise(
                                    &INLINE,
                                    &g,
                                    batch,
                                    &x,
                                    &w,
                                    &b,
                                    clamp,
                                    &mut out,
                                    &mut scratch,
                                )
                            } else {
                                depthwise(
                                    &Scoped(threads),
                                    &g,
                                    batch,
                                    &x,
                                    &w,
                                    &b,
                                    clamp,
                                    &mut out,
                                    &mut scratch,
                                )
                            };
                            r.unwrap();
                            assert_close(
                                &out,
                                &want,
                                1e-5,
                                1e-5,
                                &format!("{l:?} {g:?} batch {batch} {clamp:?} threads {threads}"),
                            );
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn rejects_small_scratch() {
    let g = DwGeom {
        channels: 1,
        ih: 4,
        iw: 4,
        kh: 3,
        kw: 3,
        sh: 1,
        sw: 1,
        ph: 1,
        pw: 1,
    };
    let (x, w, b) = (vec![0.0; 16], vec![0.0; 9], vec![0.0; 1]);
    let mut out = vec![0.0; 16];
    assert!(depthwise(&INLINE, &g, 1, &x, &w, &b, None, &mut out, &mut [0.0; 3]).is_err());
}
