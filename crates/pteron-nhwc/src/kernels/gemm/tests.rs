use super::ConvWeights;
use crate::graph::{Conv, ConvKind, Window};
use pteron_core::INLINE;
use pteron_kernels_cpu::simd::{with_level, Level};

/// Convolution by the definition: NHWC `x`, filter `[cout, kh, kw, cin]`, one group.
#[allow(clippy::too_many_arguments)]
fn conv_reference(
    win: &Window,
    x: &[f32],
    (n, ih, iw, cin): (usize, usize, usize, usize),
    w: &[f32],
    bias: &[f32],
    cout: usize,
    (oh, ow): (usize, usize),
    clamp: (f32, f32),
) -> Vec<f32> {
    let mut out = vec![0.0; n * oh * ow * cout];
    for b in 0..n {
        for oy in 0..oh {
            for ox in 0..ow {
                for co in 0..cout {
                    let mut acc = bias[co];
                    for a in 0..win.kh {
                        for t in 0..win.kw {
                            let y = (oy * win.sh + a * win.dh) as isize - win.pad_top as isize;
                            let xx = (ox * win.sw + t * win.dw) as isize - win.pad_left as isize;
                            if y < 0 || xx < 0 || y >= ih as isize || xx >= iw as isize {
                                continue;
                            }
                            for ci in 0..cin {
                                let xi = ((b * ih + y as usize) * iw + xx as usize) * cin + ci;
                                acc += x[xi] * w[((co * win.kh + a) * win.kw + t) * cin + ci];
                            }
                        }
                    }
                    out[((b * oh + oy) * ow + ox) * cout + co] = acc.max(clamp.0).min(clamp.1);
                }
            }
        }
    }
    out
}

/// Few input channels (the tap-pointer kernel: window inside the input, or partly in the
/// padding) and more (im2col), against the definition.
#[test]
fn convolution_matches_definition() {
    let mut seed = 11u32;
    let mut rnd = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    for &cin in &[1, 2, 3, 4, 6] {
        for &cout in &[5, 16, 32, 40] {
            for &(k, s, d, pad) in &[
                (3, 2, 1, 1),
                (3, 1, 1, 1),
                (1, 1, 1, 0),
                (3, 1, 2, 2),
                (5, 2, 1, 3),
            ] {
                // (23, 29): more output pixels than one task's share of the first-layer
                // kernel, so tasks start inside rows.
                for &(ih, iw) in &[(1, 1), (5, 4), (9, 13), (23, 29)] {
                    let win = Window {
                        pad_top: pad,
                        pad_right: pad.min(1),
                        pad_bottom: pad.min(1),
                        pad_left: pad,
                        kh: k,
                        kw: k,
                        sh: s,
                        sw: s,
                        dh: d,
                        dw: d,
                    };
                    let conv = Conv {
                        kind: ConvKind::Conv,
                        win,
                        groups: 1,
                        group_in: cin,
                        group_out: cout,
                        adjustment: (0, 0),
                    };
                    let (oh, ow) = win.out_hw(ih, iw).unwrap();
                    let n = 2;
                    let x: Vec<f32> = (0..n * ih * iw * cin).map(|_| rnd()).collect();
                    let w: Vec<f32> = (0..cout * k * k * cin).map(|_| rnd()).collect();
                    let bias: Vec<f32> = (0..cout).map(|_| rnd()).collect();
                    let clamp = (-0.7, 0.9);
                    // Packed and run at each SIMD level, and packed for one run at another.
                    let mut outs = Vec::new();
                    for (pack, run) in [
                        (Level::Portable, Level::Portable),
                        (Level::Avx2, Level::Avx2),
                        (Level::Avx512, Level::Avx512),
                        (Level::Avx512, Level::Avx2),
                    ] {
                        let cw = with_level(pack, || {
                            ConvWeights::new(conv, &w, Some(&bias), Some(clamp)).unwrap()
                        });
                        let mut scratch = vec![0.0; cw.scratch_len(ih, iw).unwrap()];
                        let mut out = vec![f32::NAN; n * oh * ow * cout];
                        with_level(run, || {
                            cw.run(&INLINE, &x, n, ih, iw, &mut out, oh, ow, &mut scratch, None)
                        })
                        .unwrap();
                        outs.push(out);
                    }
                    let want = conv_reference(
                        &win,
                        &x,
                        (n, ih, iw, cin),
                        &w,
                        &bias,
                        cout,
                        (oh, ow),
                        clamp,
                    );
                    for out in &outs {
                        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5,
                                "cin {cin} cout {cout} k {k} s {s} d {d} pad {pad} {ih}x{iw}: [{i}] {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}
