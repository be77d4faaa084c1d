use super::*;
use crate::graph::BinaryOp;
use crate::kernels::spatial::Geom;
use crate::quant::gemm::requant;
use crate::util::Shape;
use pteron_core::INLINE;
use pteron_kernels_cpu::simd::{with_level, Level};

/// Dynamic row quantization gives XNNPACK's qd8 parameters (`scale = 255 / (max − min)`
/// over the range extended to 0; the zero point from the min when `(−128 + min·scale) +
/// (127 + max·scale) > 0`, else from the max; clamped, rounded to nearest even) and rounds
/// values to nearest even. Expected values worked out by hand from those formulas (rows D
/// and the ties of B also checked against ExecuTorch's XNNPACK on a 4-bit linear layer).
#[test]
fn dynamic_rows_follow_xnnpack_qd8() {
    let (d_min, d_max) = (f32::from_bits(0xc072_e5bb), f32::from_bits(0x3fe8_562d));
    #[rustfmt::skip]
    let x = [
        // A: scale 63.75, zero point −128 + 63.75 = −64.25 → −64.
        -1.0, 0.5, 3.0,
        // B: scale 64 (exact), zero point −128; 0.0390625·64 = 2.5 ties to 2 (not 3).
        0.0, 3.984375, 0.0390625,
        // C: negative only, scale 127.5, zero point from the max: 127 − 0 = 127.
        -2.0, -0.5, 0.0,
        // D: −3.7952716, 1.8151299: scale 45.45129, min·scale = −172.49998, max·scale =
        // 82.49999; the sum test picks the max: 127 − 82.49999 = 44.500008 → 45 (the min
        // would give −128 + 172.49998 = 44.499985 → 44, as XNNPACK's unsigned qdu8 form).
        d_min, d_max, 0.0,
        // E: all zero: scale 1, zero point 127 (−128 + 127 is not > 0).
        0.0, 0.0, 0.0,
    ];
    let want_q: [i8; 15] = [
        -128, -32, 127, //
        -128, 127, -126, //
        -128, 63, 127, //
        -127, 127, 45, //
        127, 127, 127,
    ];
    let want_zp = [-64, -128, 127, 45, 127];
    let mult = [63.75f32, 64.0, 127.5, 255.0 / (d_max - d_min), 1.0];
    for lv in [Level::Portable, Level::Avx2, Level::Avx512] {
        with_level(lv, || {
            let (mut q, mut s, mut z) = ([0i8; 15], [0f32; 5], [0i32; 5]);
            quantize_rows(&x, 3, &mut q, &mut s, &mut z);
            assert_eq!(q, want_q, "{lv:?}");
            assert_eq!(z, want_zp, "{lv:?}");
            for (got, m) in s.iter().zip(mult) {
                assert_eq!(*got, 1.0 / m, "{lv:?}");
            }
        });
    }
}

/// Rows of every length up to 70 (whole vectors and tails), with NaNs and infinities:
/// the AVX-512 and AVX2 row quantizers give the portable loop's values, scales and zero
/// points.
#[test]
fn quantize_rows_levels_agree() {
    let mut state = 0x9e37_79b9u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    for row in 1..71 {
        let x: Vec<f32> = (0..row * 3)
            .map(|_| match next() % 40 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -1e30,
                _ => (next() % 2000) as f32 / 100.0 - 10.0,
            })
            .collect();
        let run = |lv| {
            let (mut q, mut s, mut z) = (vec![0i8; row * 3], [0f32; 3], [0i32; 3]);
            with_level(lv, || quantize_rows(&x, row, &mut q, &mut s, &mut z));
            (q, s.map(f32::to_bits), z)
        };
        let portable = run(Level::Portable);
        assert_eq!(run(Level::Avx512), portable, "row {row}");
        assert_eq!(run(Level::Avx2), portable, "row {row}");
    }
}

#[test]
fn requant_matches_reference() {
    let mut state = 0x1234_5678u32;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        state
    };
    for _ in 0..200_000 {
        let acc = (next() as i32) >> (next() % 24);
        let scale = f32::from_bits(0x3000_0000 + (next() % 0x0C00_0000));
        let zp = (next() % 256) as i32 - 128;
        let (qmin, qmax) = if next() % 2 == 0 {
            (-128, 127)
        } else {
            (zp, 100.max(zp))
        };
        let want = requant(acc, scale, zp, qmin, qmax);
        let got = requant_vec(acc, scale, zp, (qmin - zp) as f32, (qmax - zp) as f32);
        assert_eq!(
            got, want,
            "acc {acc} scale {scale:e} zp {zp} [{qmin}, {qmax}]"
        );
    }
    // Ties round to even.
    for acc in -20..20 {
        assert_eq!(
            requant_vec(acc, 0.5, 0, -128.0, 127.0),
            requant(acc, 0.5, 0, -128, 127)
        );
    }
}

/// The direct sum of every tap, as XNNPACK defines it.
fn naive(wt: &QDwWeights, g: &Geom, x: &[i8]) -> Vec<i8> {
    let w = &wt.win;
    let mut out = vec![0i8; g.n * g.oh * g.ow * g.c];
    for b in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for ch in 0..g.c {
                    let mut acc = wt.bias[ch];
                    for ky in 0..w.kh {
                        for kx in 0..w.kw {
                            let y = (oy * w.sh + ky * w.dh) as isize - w.pad_top as isize;
                            let xx = (ox * w.sw + kx * w.dw) as isize - w.pad_left as isize;
                            if y < 0 || xx < 0 || y >= g.ih as isize || xx >= g.iw as isize {
                                continue;
                            }
                            let xv = x[((b * g.ih + y as usize) * g.iw + xx as usize) * g.c + ch];
                            acc +=
                                (xv as i32 - wt.qi.zp) * wt.w[(ky * w.kw + kx) * g.c + ch] as i32;
                        }
                    }
                    out[((b * g.oh + oy) * g.ow + ox) * g.c + ch] =
                        requant(acc, wt.scale[ch], wt.qo.zp, wt.lo, wt.hi) as i8;
                }
            }
        }
    }
    out
}

#[test]
fn depthwise_matches_naive() {
    let mut seed = 7u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        seed >> 8
    };
    // (c, ih, iw, k, stride, dilation, pads t/l/b/r)
    let cases = [
        (16, 9, 9, 3, 1, 1, [1, 1, 1, 1]),
        (24, 10, 7, 3, 2, 1, [0, 1, 1, 0]),
        (5, 8, 8, 5, 1, 2, [4, 4, 4, 4]),
        (33, 6, 11, 3, 3, 1, [2, 0, 0, 2]),
        (64, 4, 4, 1, 1, 1, [0, 0, 0, 0]),
        (1030, 4, 5, 3, 1, 1, [1, 1, 1, 1]),
    ];
    for (c, ih, iw, k, s, d, p) in cases {
        let win = Window {
            pad_top: p[0],
            pad_left: p[1],
            pad_bottom: p[2],
            pad_right: p[3],
            kh: k,
            kw: k,
            sh: s,
            sw: s,
            dh: d,
            dw: d,
        };
        let oh = (ih + p[0] + p[2] - (k - 1) * d - 1) / s + 1;
        let ow = (iw + p[1] + p[3] - (k - 1) * d - 1) / s + 1;
        let g = Geom {
            n: 2,
            ih,
            iw,
            oh,
            ow,
            c,
        };
        let w: Vec<i16> = (0..k * k * c)
            .map(|_| (next() % 256) as i16 - 128)
            .collect();
        let wt = QDwWeights {
            win,
            channels: c,
            w32: w.iter().map(|&v| v as i32).collect(),
            w,
            bias: (0..c).map(|_| (next() % 20000) as i32 - 10000).collect(),
            scale: (0..c)
                .map(|_| 1e-4 + (next() % 1000) as f32 * 1e-6)
                .collect(),
            qi: Q {
                scale: 0.1,
                zp: (next() % 256) as i32 - 128,
            },
            qo: Q {
                scale: 0.2,
                zp: (next() % 256) as i32 - 128,
            },
            lo: -120,
            hi: 110,
        };
        let x: Vec<i8> = (0..2 * ih * iw * c)
            .map(|_| (next() % 256) as u8 as i8)
            .collect();
        let want = naive(&wt, &g, &x);
        // Every SIMD level this CPU has (the AVX-512 row kernel and the portable one).
        for level in [Level::Avx512, Level::Avx2, Level::Portable] {
            let mut out = vec![0i8; 2 * oh * ow * c];
            with_level(level, || depthwise(&INLINE, &wt, g, &x, &mut out)).unwrap();
            assert_eq!(
                out, want,
                "case c{c} {ih}x{iw} k{k} s{s} d{d} {p:?} {level:?}"
            );
        }
        // The AVX-512 kernels without VBMI + VNNI (what `depthwise` picks on CPUs that lack
        // them), called directly; the 3×3 one on pixel ranges that split rows.
        #[cfg(target_arch = "x86_64")]
        // (AVX-512 VNNI implies the F, BW and VL the kernels need.)
        if pteron_kernels_cpu::cpu::features().avx512_vnni {
            let zrow = vec![wt.qi.zp as i8; c];
            let mut out = vec![0i8; 2 * oh * ow * c];
            if k == 3 && d == 1 {
                let split = (2 * oh * ow / 3).max(1);
                let (a, b) = out.split_at_mut(split * c);
                // Safety: the CPU has AVX-512 F/BW/VL; sizes as `depthwise` checks them.
                unsafe {
                    avx512::depthwise_px3x3(&wt, &g, &x, &zrow, 0, a);
                    avx512::depthwise_px3x3(&wt, &g, &x, &zrow, split, b);
                }
                assert_eq!(
                    out, want,
                    "case c{c} {ih}x{iw} k{k} s{s} d{d} {p:?} avx512 pixels"
                );
            }
            // The row kernels (every window; 3×3 ones too, for layers wider than the 3×3
            // kernels take).
            for (row, orow) in out.chunks_exact_mut(ow * c).enumerate() {
                // Safety: the CPU has AVX-512 F/BW/VL; sizes as `depthwise` checks them.
                unsafe { avx512::depthwise_row(&wt, &g, &x, row / oh, row % oh, orow) };
            }
            assert_eq!(
                out, want,
                "case c{c} {ih}x{iw} k{k} s{s} d{d} {p:?} avx512 rows"
            );
            if avx512::has_vbmi_vnni() {
                out.fill(0);
                for (row, orow) in out.chunks_exact_mut(ow * c).enumerate() {
                    // Safety: as above, and the CPU has VBMI and VNNI.
                    unsafe { avx512::depthwise_row_vnni(&wt, &g, &x, row / oh, row % oh, orow) };
                }
                assert_eq!(
                    out, want,
                    "case c{c} {ih}x{iw} k{k} s{s} d{d} {p:?} vnni rows"
                );
            }
        }
    }
}

/// int8 addition rounds as XNNPACK's fixed point does: halves round up (float rounding to
/// nearest even gives 0 and 2 for 0.5 and 2.5), with the same result on every path (same
/// shapes, broadcast) and subtraction negating the second operand.
#[test]
fn add_rounds_as_xnnpack_fixed_point() {
    let q1 = Q { scale: 1.0, zp: 0 };
    let qo = Q { scale: 2.0, zp: 0 };
    let p = binary::AddParams::new(q1, q1, qo, false).unwrap();
    assert_eq!((p.ma, p.mb, p.shift), (1 << 20, 1 << 20, 21));
    let a: Vec<i8> = vec![1, -1, 3, 5, -3, 127, -128, 0];
    let b: Vec<i8> = vec![0, 0, 0, 0, 0, 127, -128, 1];
    let s = Shape::new(&[8]).unwrap();
    let mut out = vec![0i8; 8];
    for op in [BinaryOp::Add, BinaryOp::Sub] {
        binary(
            &INLINE, op, &a, &s, q1, &b, &s, q1, &mut out, &s, qo, -128, 127,
        )
        .unwrap();
        let want: Vec<i8> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let twice = x as i32
                    + if op == BinaryOp::Add {
                        y as i32
                    } else {
                        -(y as i32)
                    };
                // (x ± y) / 2 with halves rounded up.
                (twice + 1).div_euclid(2).clamp(-128, 127) as i8
            })
            .collect();
        assert_eq!(out, want, "{op:?}");
    }
    assert_eq!(&out[..5], &[1, 0, 2, 3, -1]);
    // Broadcast of a one-element operand: the same arithmetic.
    let one = Shape::new(&[1]).unwrap();
    let mut outb = vec![0i8; 8];
    binary(
        &INLINE,
        BinaryOp::Add,
        &a,
        &s,
        q1,
        &[0],
        &one,
        q1,
        &mut outb,
        &s,
        qo,
        -128,
        127,
    )
    .unwrap();
    assert_eq!(&outb[..5], &[1, 0, 2, 3, -1]);
    // A ratio with no exact 21-bit multiplier and zero points: bit-exact with the formula.
    let (qa, qb, qo) = (
        Q {
            scale: 0.009105,
            zp: -5,
        },
        Q {
            scale: 0.002601,
            zp: -128,
        },
        Q {
            scale: 0.005806,
            zp: -128,
        },
    );
    let p = binary::AddParams::new(qa, qb, qo, false).unwrap();
    let ma = ((qa.scale / qo.scale) * (1 << p.shift) as f32).round_ties_even() as i64;
    let mb = ((qb.scale / qo.scale) * (1 << p.shift) as f32).round_ties_even() as i64;
    for x in -128..=127i64 {
        for y in [-128i64, -1, 0, 77, 127] {
            let acc = (1i64 << (p.shift - 1)) + ma * (x - qa.zp as i64) + mb * (y - qb.zp as i64);
            let want = ((acc >> p.shift) + qo.zp as i64).clamp(-128, 127) as i32;
            assert_eq!(
                p.apply(x as i32, y as i32).clamp(-128, 127),
                want,
                "{x} {y}"
            );
        }
    }
}

/// The int8 mean adds the output zero point before rounding to nearest even (XNNPACK): with
/// an odd zero point, exact ties round the other way than rounding first would.
#[test]
fn mean_rounds_with_the_zero_point() {
    let q = Q {
        scale: 0.5,
        zp: -19,
    };
    // Four positions, two channels: sums relative to the zero point 2 and 6 (means 0.5, 1.5).
    let x: Vec<i8> = vec![-18, -19, -18, -17, -19, -17, -19, -17];
    let mut out = vec![0i8; 2];
    global_mean(&x, 1, 4, 2, q, q, -128, 127, &mut out).unwrap();
    // 0.5 − 19 = −18.5 → −18 (even); 1.5 − 19 = −17.5 → −18 (even).
    assert_eq!(out, [-18, -18]);
}
