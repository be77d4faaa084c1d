use super::{depthwise, taps, DwWeights, Geom};
use crate::graph::Window;
use pteron_kernels_cpu::simd::{with_level, Level};

/// Depthwise convolution by the definition (multiplier 1).
#[allow(clippy::too_many_arguments)]
fn dw_reference(
    win: &Window,
    g: &Geom,
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    clamp: (f32, f32),
) -> Vec<f32> {
    let c = g.c;
    let mut out = vec![0.0; g.n * g.oh * g.ow * c];
    for b in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for ch in 0..c {
                    let mut acc = bias[ch];
                    for a in 0..win.kh {
                        for t in 0..win.kw {
                            let y = (oy * win.sh + a * win.dh) as isize - win.pad_top as isize;
                            let xx = (ox * win.sw + t * win.dw) as isize - win.pad_left as isize;
                            if y < 0 || xx < 0 || y >= g.ih as isize || xx >= g.iw as isize {
                                continue;
                            }
                            let xi = ((b * g.ih + y as usize) * g.iw + xx as usize) * c + ch;
                            acc += x[xi] * w[(a * win.kw + t) * c + ch];
                        }
                    }
                    out[((b * g.oh + oy) * g.ow + ox) * c + ch] = acc.max(clamp.0).min(clamp.1);
                }
            }
        }
    }
    out
}

/// The 3×3 pixel kernels (interior rows, border pixels through zeros) and the generic
/// kernel (other windows) against the definition, over strides, dilations, paddings,
/// channel tails and batches.
#[test]
fn depthwise_matches_definition() {
    let mut seed = 7u32;
    let mut rnd = move || {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    for &(kh, kw) in &[(3, 3), (3, 3), (5, 5), (2, 3)] {
        for &c in &[1, 5, 16, 17, 40, 48] {
            for &(s, d, pad) in &[(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 1, 0), (1, 1, 3)] {
                for &(ih, iw) in &[(1, 1), (3, 4), (7, 6), (5, 12)] {
                    let win = Window {
                        pad_top: pad,
                        pad_right: pad.min(1),
                        pad_bottom: pad.min(1),
                        pad_left: pad,
                        kh,
                        kw,
                        sh: s,
                        sw: s,
                        dh: d,
                        dw: d,
                    };
                    let (oh, ow) = win.out_hw(ih, iw).unwrap();
                    let g = Geom {
                        n: 2,
                        ih,
                        iw,
                        oh,
                        ow,
                        c,
                    };
                    let x: Vec<f32> = (0..2 * ih * iw * c).map(|_| rnd()).collect();
                    let w: Vec<f32> = (0..kh * kw * c).map(|_| rnd()).collect();
                    let bias: Vec<f32> = (0..c).map(|_| rnd()).collect();
                    let clamp = (-0.4, 0.6);
                    let wt =
                        DwWeights::new(win, c, 1, w.clone(), bias.clone(), Some(clamp)).unwrap();
                    let want = dw_reference(&win, &g, &x, &w, &bias, clamp);
                    for lv in [Level::Portable, Level::Avx2, Level::Avx512] {
                        let mut out = vec![f32::NAN; 2 * oh * ow * c];
                        with_level(lv, || depthwise(&pteron_core::INLINE, &wt, g, &x, &mut out))
                            .unwrap();
                        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                (a - b).abs() <= 1e-5,
                                "{lv:?} {kh}x{kw} c {c} s {s} d {d} pad {pad} {ih}x{iw}: [{i}] {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The taps by walking every one of them.
fn taps_by_walking(o: usize, s: usize, d: usize, p: usize, k: usize, len: usize) -> (usize, usize) {
    let inside: Vec<usize> = (0..k)
        .filter(|&t| {
            let i = (o * s + t * d) as isize - p as isize;
            i >= 0 && i < len as isize
        })
        .collect();
    match (inside.first(), inside.last()) {
        (Some(&a), Some(&b)) => (a, b + 1),
        _ => {
            let (lo, _) = taps(o, s, d, p, k, len);
            (lo, lo)
        }
    }
}

#[test]
fn closed_form_taps_match_walking() {
    for len in 0..6 {
        for k in 1..7 {
            for d in 1..4 {
                for s in 1..3 {
                    for p in 0..6 {
                        for o in 0..8 {
                            let (lo, hi) = taps(o, s, d, p, k, len);
                            assert!(lo <= hi && hi <= k);
                            let want = taps_by_walking(o, s, d, p, k, len);
                            if want.0 < want.1 {
                                assert_eq!(
                                    (lo, hi),
                                    want,
                                    "o {o} s {s} d {d} p {p} k {k} len {len}"
                                );
                            } else {
                                assert_eq!(lo, hi, "o {o} s {s} d {d} p {p} k {k} len {len}");
                            }
                        }
                    }
                }
            }
        }
    }
    // A kernel of 2^40 taps over 3 positions costs nothing to clip (64-bit targets).
    #[cfg(target_pointer_width = "64")]
    assert_eq!(
        taps(0, 1, 1, 1 << 39, 1 << 40, 3),
        ((1 << 39), (1 << 39) + 3)
    );
}
