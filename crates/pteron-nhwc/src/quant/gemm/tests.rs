use super::*;

/// A small deterministic generator.
fn rng(seed: &mut u64) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 16) as u32
}

/// The VNNI rows match the plain integer rows bit for bit, for every epilogue, odd sizes.
#[cfg(target_arch = "x86_64")]
#[test]
fn vnni_matches_scalar() {
    if !has_vnni() {
        return;
    }
    let mut seed = 0x1234_5678_9abc_def0u64;
    for &(m, n, k, block) in &[
        (1, 1, 1, 0),
        (3, 17, 13, 0),
        (9, 33, 64, 32),
        (17, 40, 96, 0),
        (5, 16, 128, 64),
        // Blockwise over several panel pairs and a lone last panel, two row tiles.
        (11, 80, 96, 32),
    ] {
        let w = QWeights::new(n, k, block, |j, kk| ((j * 31 + kk * 7) % 255) as i8).unwrap();
        let kp = w.quads * 4;
        let a: Vec<u8> = (0..m * kp).map(|_| rng(&mut seed) as u8).collect();
        let blocks = if block == 0 { 1 } else { k / block };
        let bias: Vec<i32> = (0..n).map(|j| j as i32 * 37 - 500).collect();
        let scale: Vec<f32> = (0..n * blocks).map(|j| 1e-3 * (1 + j % 7) as f32).collect();
        let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
        let rows: Vec<f32> = (0..m).map(|r| 0.01 * (r + 1) as f32).collect();
        let zps: Vec<i32> = (0..m).map(|r| r as i32 * 9 - 20).collect();
        let epis = [
            Epilogue::Requant {
                bias: &bias,
                scale: &scale,
                zp: -3,
                qmin: -100,
                qmax: 120,
            },
            Epilogue::Dequant {
                rows: &rows,
                zps: &zps,
                scale: &scale,
                bias: Some(&fb),
                lo: -50.0,
                hi: 50.0,
            },
        ];
        for (e, epi) in epis.iter().enumerate() {
            if e == 0 && block != 0 {
                continue;
            }
            if e == 0 {
                let (mut x1, mut x2) = (vec![0i8; m * n], vec![0i8; m * n]);
                scalar_rows(&a, kp, 0, m, &w, epi, Out::I8(&mut x1), n);
                // Safety: has_vnni() above; operand sizes as `qgemm` checks them.
                unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::I8(&mut x2), n) };
                assert_eq!(x1, x2, "m {m} n {n} k {k} block {block}");
            } else {
                let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
                scalar_rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f1), n);
                // Safety: as above.
                unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f2), n) };
                assert_eq!(f1, f2, "m {m} n {n} k {k} block {block}");
            }
        }
        if block != 0 {
            // With the scales and block sums kept panel by panel (vector loads, the
            // zero-point correction in float): still the integer formula bit for bit.
            let mut w = w;
            w.set_block_scales(&scale).unwrap();
            assert!(w.one_row_ready());
            let epi = &epis[1];
            let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
            scalar_rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f1), n);
            // Safety: as above.
            unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f2), n) };
            assert_eq!(f1, f2, "panel-major: m {m} n {n} k {k} block {block}");
        }
    }
}

/// Calls of at most one tile of rows over 4-bit blockwise weights (verifying drafts) read the
/// nibbles on AVX-512: the plain integer rows' results bit for bit, 1 to 8 rows, panel
/// counts odd and even, blocks of one and two pairs of 16 inputs, weights and activations at
/// their extremes.
#[cfg(target_arch = "x86_64")]
#[test]
fn vnni_nibble_rows_match_scalar() {
    if !has_vnni() {
        return;
    }
    let mut seed = 0x005e_ed0f_4b17_u64;
    for &(n, k, block) in &[(48, 64, 32), (80, 128, 64), (33, 96, 32), (16, 256, 128)] {
        let mut w = QWeights::new_int4(n, k, block, |j, kk| match (j + kk) % 5 {
            0 => -8,
            1 => 7,
            _ => ((j * 7 + kk * 3) % 16) as i8 - 8,
        })
        .unwrap();
        let blocks = k / block;
        let scale: Vec<f32> = (0..n * blocks)
            .map(|j| f32::from_bits((1e-3 * (1 + j % 5) as f32).to_bits() & 0xFFFF_0000))
            .collect();
        w.set_block_scales(&scale).unwrap();
        assert!(!w.nib.is_empty() && w.one_row_ready());
        for m in 1..=8 {
            let a: Vec<u8> = (0..m * k)
                .map(|i| {
                    if i % 7 == 0 {
                        255
                    } else {
                        rng(&mut seed) as u8
                    }
                })
                .collect();
            let rows: Vec<f32> = (0..m).map(|r| 0.01 * (r + 1) as f32).collect();
            let zps: Vec<i32> = (0..m).map(|r| r as i32 * 31 - 128).collect();
            let epi = Epilogue::Dequant {
                rows: &rows,
                zps: &zps,
                scale: &scale,
                bias: None,
                lo: f32::NEG_INFINITY,
                hi: f32::INFINITY,
            };
            let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
            scalar_rows(&a, k, 0, m, &w, &epi, Out::F32(&mut f1), n);
            // Safety: has_vnni() above; operand sizes as `qgemm` checks them.
            unsafe { x86::rows(&a, k, 0, m, &w, &epi, Out::F32(&mut f2), n) };
            assert_eq!(f1, f2, "m {m} n {n} k {k} block {block}");
        }
    }
}

/// Long blocks (sums past 2^24 in float, as XNNPACK rounds them too) give the scalar
/// results on the one-row path.
#[test]
fn long_blocks_match_the_scalar_path() {
    let (n, k, block) = (20, 2 * 516, 516);
    let mut w = QWeights::new(n, k, block, |j, kk| ((j * 13 + kk * 5) % 255) as i8).unwrap();
    let scale: Vec<f32> = (0..n * 2).map(|j| 1e-3 * (1 + j % 5) as f32).collect();
    w.set_block_scales(&scale).unwrap();
    assert!(w.one_row_ready());
    let a: Vec<u8> = (0..k).map(|i| (i * 29 % 256) as u8).collect();
    let epi = Epilogue::Dequant {
        rows: &[0.03],
        zps: &[5],
        scale: &scale,
        bias: None,
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
    };
    let (f1, f2) = one_row(&a, &w, &epi);
    assert_eq!(f1, f2);
}

/// One row `a` (of `4·quads` bytes) times `w`: the plain integer rows' results, and
/// `qgemm`'s (its one-row path where it takes one) over three "threads".
fn one_row(a: &[u8], w: &QWeights, epi: &Epilogue<'_>) -> (Vec<f32>, Vec<f32>) {
    let (k, n) = (w.quads * 4, w.n);
    let (mut f1, mut f2) = (vec![0f32; n], vec![0f32; n]);
    scalar_rows(a, k, 0, 1, w, epi, Out::F32(&mut f1), n);
    qgemm(&Split, a, k, 1, w, epi, Out::F32(&mut f2), n).unwrap();
    (f1, f2)
}

/// Three "threads" run one after another: exercises the task split.
struct Split;
impl Parallel for Split {
    fn num_threads(&self) -> usize {
        3
    }
    fn parallel_for(&self, n: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        for t in 0..n {
            f(t..t + 1);
        }
    }
}

/// The one-row path (panels in parallel, 4-bit weights from nibbles) gives the plain
/// integer rows' results bit for bit (whatever path this CPU takes).
#[test]
fn one_row_matches_scalar() {
    let mut seed = 0x0bad_cafe_f00d_1234u64;
    for &(n, k, block, int4) in &[
        (1, 4, 0, false),
        (17, 13, 0, false),
        (200, 64, 32, true),
        (100, 96, 0, true),
        (576, 576, 32, true),
        // Blocks of several 32-input groups, whole and partial panel groups.
        (96, 256, 128, true),
        (90, 192, 64, true),
        (33, 128, 64, false),
        // Odd quads per block and in all: pairs of 4-bit quads cut at either end.
        (40, 36, 12, true),
        (20, 20, 0, true),
    ] {
        let at = |j: usize, kk: usize| {
            if int4 {
                ((j * 5 + kk * 3) % 16) as i8 - 8
            } else {
                ((j * 31 + kk * 7) % 255) as i8
            }
        };
        let mut w = if int4 {
            QWeights::new_int4(n, k, block, at).unwrap()
        } else {
            QWeights::new(n, k, block, at).unwrap()
        };
        let kp = w.quads * 4;
        let a: Vec<u8> = (0..kp).map(|_| rng(&mut seed) as u8).collect();
        let blocks = if block == 0 { 1 } else { k / block };
        // f32 scales, and bf16 values (kept as bf16 by `set_block_scales`).
        for bf16 in [false, true] {
            let scale: Vec<f32> = (0..n * blocks)
                .map(|j| 1e-3 * (1 + j % 7) as f32)
                .map(|v| {
                    if bf16 {
                        f32::from_bits(v.to_bits() & 0xFFFF_0000)
                    } else {
                        v
                    }
                })
                .collect();
            w.set_block_scales(&scale).unwrap();
            assert_eq!(w.pscale16.is_empty(), !bf16 || block == 0);
            let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
            for bias in [Some(&fb[..]), None] {
                let epi = Epilogue::Dequant {
                    rows: &[0.02],
                    zps: &[-7],
                    scale: &scale,
                    bias,
                    lo: -50.0,
                    hi: 50.0,
                };
                let (f1, f2) = one_row(&a, &w, &epi);
                assert_eq!(f1, f2, "n {n} k {k} block {block} int4 {int4} bf16 {bf16}");
            }
        }
    }
}

/// The AVX2 one-row path over nibbles (taken by CPUs without AVX-512 VNNI, called here
/// directly) gives the plain integer rows' results bit for bit: blocks of 32 and of several
/// 32s, whole and partial groups of panels, a partial last panel, weights and activations at
/// their extremes, bf16 and f32 scales, with and without bias.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_nibbles_match_scalar() {
    let mut seed = 0xfeed_beef_0bad_f00du64;
    for &(n, k, block) in &[
        (200, 64, 32),
        (9, 256, 128),
        (90, 192, 64),
        (64, 32, 32),
        (130, 256, 128),
    ] {
        let mut w =
            QWeights::new_int4(n, k, block, |j, kk| ((j * 5 + kk * 3) % 16) as i8 - 8).unwrap();
        let blocks = k / block;
        let mut a: Vec<u8> = (0..k).map(|_| rng(&mut seed) as u8).collect();
        a[0] = 255;
        a[1] = 0;
        for bf16 in [false, true] {
            let scale: Vec<f32> = (0..n * blocks)
                .map(|j| 1e-3 * (1 + j % 7) as f32 + if bf16 { 0.0 } else { 1e-7 })
                .map(|v| {
                    if bf16 {
                        f32::from_bits(v.to_bits() & 0xFFFF_0000)
                    } else {
                        v
                    }
                })
                .collect();
            w.set_block_scales(&scale).unwrap();
            if !avx2::nibbles_apply(&w) {
                return;
            }
            let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 3.0).collect();
            for bias in [Some(&fb[..]), None] {
                let epi = Epilogue::Dequant {
                    rows: &[0.02],
                    zps: &[-7],
                    scale: &scale,
                    bias,
                    lo: -50.0,
                    hi: 50.0,
                };
                let (mut f1, mut f2) = (vec![0f32; n], vec![0f32; n]);
                scalar_rows(&a, k, 0, 1, &w, &epi, Out::F32(&mut f1), n);
                // Two calls, as two tasks would split the panels.
                let (panels, cut) = (n.div_ceil(NR), 5.min(n.div_ceil(NR)));
                let (x, y) = f2.split_at_mut((cut * NR).min(n));
                let mut offs = vec![0i32; k / block];
                // Safety: `nibbles_apply` (AVX2, FMA); one row of k bytes; `offs` holds its
                // blocks; `x` and `y` are the columns of their panels.
                unsafe {
                    avx2::block_offsets(&a, &w, &mut offs);
                    avx2::gemv_nibbles(&a, &w, &epi, &offs, 0..cut, x);
                    avx2::gemv_nibbles(&a, &w, &epi, &offs, cut..panels, y);
                }
                assert_eq!(f1, f2, "n {n} k {k} block {block} bf16 {bf16}");
            }
        }
    }
}

/// The AVX2 rows over nibbles (prefill on CPUs without AVX-512 VNNI, called directly) give
/// the plain integer rows' results bit for bit: 1 to 9 rows (groups of four and the rest),
/// each row with its own scale and zero point, a padded row stride; and at the extremes
/// (activations 255 against weights 7, the largest i16 pair sums).
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_nibble_rows_match_scalar() {
    let mut seed = 0x0123_4567_fedc_ba98u64;
    for &(m, n, k, block) in &[
        (7, 40, 64, 32),
        (4, 16, 256, 128),
        (1, 33, 96, 32),
        (5, 90, 192, 64),
        (9, 32, 128, 32),
    ] {
        let extreme = m == 9;
        let mut w = QWeights::new_int4(n, k, block, |j, kk| {
            if extreme {
                if (j + kk / 64) % 2 == 0 {
                    7
                } else {
                    -8
                }
            } else {
                ((j * 7 + kk * 5) % 16) as i8 - 8
            }
        })
        .unwrap();
        let blocks = k / block;
        let scale: Vec<f32> = (0..n * blocks)
            .map(|j| f32::from_bits((1e-3 * (1 + j % 5) as f32).to_bits() & 0xFFFF_0000))
            .collect();
        w.set_block_scales(&scale).unwrap();
        if !avx2::nibbles_apply(&w) {
            return;
        }
        let (lda, ldc) = (k + 8, n + 3);
        let a: Vec<u8> = (0..m * lda)
            .map(|i| {
                if extreme && i % 3 != 0 {
                    255
                } else {
                    rng(&mut seed) as u8
                }
            })
            .collect();
        let rows: Vec<f32> = (0..m).map(|i| 0.01 + i as f32 * 1e-3).collect();
        let zps: Vec<i32> = (0..m).map(|i| i as i32 * 37 - 128).collect();
        let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.5 - 7.0).collect();
        for bias in [Some(&fb[..]), None] {
            let epi = Epilogue::Dequant {
                rows: &rows,
                zps: &zps,
                scale: &scale,
                bias,
                lo: -30.0,
                hi: 30.0,
            };
            let (mut f1, mut f2) = (vec![0f32; m * ldc], vec![0f32; m * ldc]);
            scalar_rows(&a, lda, 0, m, &w, &epi, Out::F32(&mut f1), ldc);
            // Two calls (rows 0..2 and the rest), as two tasks would split them.
            let cut = 2.min(m);
            let (x, y) = f2.split_at_mut(cut * ldc);
            // Safety: `nibbles_apply`; `a` holds m rows of lda ≥ k bytes; `x` and `y` hold
            // their rows of ldc ≥ n.
            unsafe {
                avx2::rows_nibbles(&a, lda, 0, cut, &w, &epi, x, ldc);
                avx2::rows_nibbles(&a, lda, cut, m - cut, &w, &epi, y, ldc);
            }
            assert_eq!(f1, f2, "m {m} n {n} k {k} block {block}");
        }
    }
}

/// 4-bit weights deeper than a sum of nibble products can hold in i32 keep no nibbles (the
/// one-row path reads their int8 copy) and still give the plain rows' results.
#[test]
fn deep_int4_rows_skip_the_nibbles() {
    let (n, k) = (3, 4 * (NIB_MAX_QUADS + 1));
    let w = QWeights::new_int4(n, k, 0, |j, kk| if (j + kk) % 3 == 0 { -8 } else { 7 }).unwrap();
    assert!(w.nib.is_empty());
    let short = QWeights::new_int4(n, 4 * NIB_MAX_QUADS, 0, |_, _| -8).unwrap();
    assert!(!short.nib.is_empty());
    let a: Vec<u8> = (0..k).map(|i| if i % 2 == 0 { 255 } else { 0 }).collect();
    let scale = [1e-3f32, 2e-3, 3e-3];
    let epi = Epilogue::Dequant {
        rows: &[0.5],
        zps: &[-128],
        scale: &scale,
        bias: None,
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
    };
    let (f1, f2) = one_row(&a, &w, &epi);
    assert_eq!(f1, f2);
}

/// Every tile-sum kernel this CPU may run adds the plain loops' sums, for 1–4 rows, every
/// panel, quad ranges with tails of 1–3 quads, weights and activations at their extremes.
#[test]
fn tile_sums_match_scalar() {
    let mut seed = 0x5eed_0123_4567_89abu64;
    for &(n, k, min) in &[
        (1, 4, -128),
        (17, 13, -128),
        (40, 96, -128),
        (40, 96, -127),
        (33, 60, -127),
        (16, 4, -128),
    ] {
        let w = QWeights::new(n, k, 0, |j, kk| match (j + kk) % 5 {
            0 => min,
            1 => 127,
            _ => (((j * 131 + kk * 71 + 13) % 256) as u8 as i8).max(min),
        })
        .unwrap();
        assert_eq!(w.no_i8_min, min != -128);
        let a: Vec<u8> = (0..TR * w.quads * 4)
            .map(|i| match i % 7 {
                0 => 255,
                1 => 0,
                _ => rng(&mut seed) as u8,
            })
            .collect();
        let rows: Vec<&[u8]> = a.chunks(w.quads * 4).collect();
        let q = w.quads;
        let ranges = [
            (0, q),
            (1.min(q), q),
            (0, q.saturating_sub(1)),
            (q / 2, q),
            (0, 0),
        ];
        for (name, kernel) in tile_sum_kernels() {
            for r in 1..=TR {
                for p in 0..n.div_ceil(NR) {
                    for &(q0, q1) in &ranges {
                        let wsum: [i32; NR] = core::array::from_fn(|jj| {
                            let j = p * NR + jj;
                            (4 * q0..(4 * q1).min(k))
                                .filter(|_| j < n)
                                .map(|kk| w.data[((p * q + kk / 4) * NR + jj) * 4 + kk % 4] as i32)
                                .sum()
                        });
                        let init: [[i32; NR]; TR] = core::array::from_fn(|i| {
                            core::array::from_fn(|jj| (i * 100 + jj) as i32)
                        });
                        let (mut want, mut got) = (init, init);
                        let input = SumsIn {
                            a: &rows[..r],
                            w: &w,
                            p,
                            q0,
                            q1,
                            wsum: &wsum,
                        };
                        scalar_sums(&input, &mut want);
                        kernel(&input, &mut got);
                        assert_eq!(
                            got, want,
                            "{name}: n {n} k {k} rows {r} panel {p} quads {q0}..{q1}"
                        );
                    }
                }
            }
        }
    }
}

/// Multi-row products through `qgemm` (whatever path this CPU takes, several tasks) give
/// the plain integer rows' results bit for bit, for both epilogues and blockwise weights.
#[test]
fn qgemm_matches_scalar() {
    let mut seed = 0xfeed_beef_1234_5678u64;
    for &(m, n, k, block) in &[
        (1, 5, 8, 0),
        (7, 17, 13, 0),
        (9, 33, 64, 32),
        (13, 40, 96, 0),
        (37, 80, 96, 32),
    ] {
        let mut w = QWeights::new(n, k, block, |j, kk| ((j * 31 + kk * 7) % 255) as i8).unwrap();
        let kp = w.quads * 4;
        let a: Vec<u8> = (0..m * kp).map(|_| rng(&mut seed) as u8).collect();
        let blocks = if block == 0 { 1 } else { k / block };
        let bias: Vec<i32> = (0..n).map(|j| j as i32 * 37 - 500).collect();
        let scale: Vec<f32> = (0..n * blocks).map(|j| 1e-3 * (1 + j % 7) as f32).collect();
        let rows: Vec<f32> = (0..m).map(|r| 0.01 * (r + 1) as f32).collect();
        let zps: Vec<i32> = (0..m).map(|r| r as i32 * 9 - 20).collect();
        if m > 16 && block != 0 {
            // Scales kept panel by panel: the blockwise tiles (8da4w prefill), rows split in
            // one chunk per thread.
            w.set_block_scales(&scale).unwrap();
        }
        if block == 0 {
            let epi = Epilogue::Requant {
                bias: &bias,
                scale: &scale,
                zp: -3,
                qmin: -100,
                qmax: 120,
            };
            let (mut x1, mut x2) = (vec![0i8; m * n], vec![0i8; m * n]);
            scalar_rows(&a, kp, 0, m, &w, &epi, Out::I8(&mut x1), n);
            qgemm(&Split, &a, kp, m, &w, &epi, Out::I8(&mut x2), n).unwrap();
            assert_eq!(x1, x2, "m {m} n {n} k {k}");
            // And the formula itself (aarch64 requantizes both of the above with one path).
            let naive: Vec<i8> = (0..m * n)
                .map(|i| {
                    let (r, j) = (i / n, i % n);
                    let acc: i32 = (0..k)
                        .map(|kk| a[r * kp + kk] as i32 * ((j * 31 + kk * 7) % 255) as i8 as i32)
                        .sum();
                    requant(acc + bias[j], scale[j], -3, -100, 120) as i8
                })
                .collect();
            assert_eq!(x2, naive, "m {m} n {n} k {k}");
        }
        let epi = Epilogue::Dequant {
            rows: &rows,
            zps: &zps,
            scale: &scale,
            bias: None,
            lo: -50.0,
            hi: 50.0,
        };
        let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
        scalar_rows(&a, kp, 0, m, &w, &epi, Out::F32(&mut f1), n);
        qgemm(&Split, &a, kp, m, &w, &epi, Out::F32(&mut f2), n).unwrap();
        assert_eq!(f1, f2, "m {m} n {n} k {k} block {block}");
    }
}

/// The vectorizable requantization equals the plain formula (round to nearest even, clamps)
/// on sums, scales and int8 parameters across their ranges, extremes, ties and NaN scales
/// included.
#[test]
fn requant_matches_the_plain_formula() {
    // In i64, so that extreme sums cannot wrap (the former i32 form did, for acc near i32::MIN).
    let plain = |acc: i32, scale: f32, zp: i32, qmin: i32, qmax: i32| {
        let f = (acc as f32 * scale).min((qmax - zp) as f32);
        (f.round_ties_even() as i64 + zp as i64)
            .max(qmin as i64)
            .min(qmax as i64) as i32
    };
    let mut seed = 0x0dd_ba11_u64;
    let scales = [0.5f32, 0.25, 1.0, 1e-3, 3.7e-5, 0.0, -0.5, f32::NAN, 1e6];
    for _ in 0..200_000 {
        let r = rng(&mut seed);
        let acc = match r % 4 {
            0 => (rng(&mut seed) as i32) >> (r % 31),
            1 => (r % 2001) as i32 - 1000,
            2 => i32::MAX - (r % 3) as i32,
            _ => i32::MIN + (r % 3) as i32,
        };
        let scale = if r.is_multiple_of(3) {
            scales[(r / 3) as usize % scales.len()]
        } else {
            f32::from_bits(0x3000_0000 + (rng(&mut seed) & 0x0FFF_FFFF))
        };
        let zp = (rng(&mut seed) % 256) as i32 - 128;
        let qmin = (rng(&mut seed) % 256) as i32 - 128;
        let qmax = (rng(&mut seed) % 256) as i32 - 128;
        assert_eq!(
            requant(acc, scale, zp, qmin, qmax),
            plain(acc, scale, zp, qmin, qmax),
            "acc {acc} scale {scale} zp {zp} qmin {qmin} qmax {qmax}"
        );
    }
}

/// The AVX2 rows (register tiles, for CPUs without VNNI) give the plain integer rows' results
/// bit for bit: both epilogues, odd sizes, tails of quads and channels, panel ranges.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_rows_match_scalar() {
    if !pteron_kernels_cpu::cpu::features().avx2_fma {
        return;
    }
    let mut seed = 0xa5a5_1234_0f0f_9876u64;
    for &(m, n, k) in &[
        (1, 1, 1),
        (3, 17, 13),
        (2, 16, 16),
        (9, 33, 64),
        (17, 40, 96),
        (5, 7, 30),
    ] {
        let w = QWeights::new(n, k, 0, |j, kk| match (j + 3 * kk) % 7 {
            0 => -128,
            1 => 127,
            _ => ((j * 31 + kk * 7) % 255) as i8,
        })
        .unwrap();
        let kp = w.quads * 4;
        let a: Vec<u8> = (0..m * kp).map(|_| rng(&mut seed) as u8).collect();
        let bias: Vec<i32> = (0..n).map(|j| j as i32 * 37 - 500).collect();
        let scale: Vec<f32> = (0..n).map(|j| 1e-3 * (1 + j % 7) as f32).collect();
        let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
        let rows: Vec<f32> = (0..m).map(|r| 0.01 * (r + 1) as f32).collect();
        let zps: Vec<i32> = (0..m).map(|r| r as i32 * 9 - 20).collect();
        let panels = 0..n.div_ceil(NR);
        let requant = Epilogue::Requant {
            bias: &bias,
            scale: &scale,
            zp: -3,
            qmin: -100,
            qmax: 120,
        };
        let (mut x1, mut x2) = (vec![0i8; m * n], vec![0i8; m * n]);
        scalar_rows(&a, kp, 0, m, &w, &requant, Out::I8(&mut x1), n);
        // Safety: AVX2 and FMA checked above; operand sizes as `qgemm` checks them.
        unsafe {
            avx2::rows(
                &a,
                kp,
                0,
                m,
                &w,
                &requant,
                Out::I8(&mut x2),
                n,
                panels.clone(),
            )
        };
        assert_eq!(x1, x2, "requant: m {m} n {n} k {k}");
        for bias in [Some(&fb[..]), None] {
            let dequant = Epilogue::Dequant {
                rows: &rows,
                zps: &zps,
                scale: &scale,
                bias,
                lo: -5.0,
                hi: 5.0,
            };
            let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
            scalar_rows(&a, kp, 0, m, &w, &dequant, Out::F32(&mut f1), n);
            // Safety: as above.
            unsafe {
                avx2::rows(
                    &a,
                    kp,
                    0,
                    m,
                    &w,
                    &dequant,
                    Out::F32(&mut f2),
                    n,
                    panels.clone(),
                )
            };
            assert_eq!(f1, f2, "dequant: m {m} n {n} k {k}");
            // The last panel alone, one row (the one-row path's chunks).
            let last = panels.end - 1;
            let mut f3 = vec![0f32; n - last * NR];
            // Safety: as above; `f3` holds the last panel's columns.
            unsafe {
                avx2::rows(
                    &a,
                    kp,
                    0,
                    1,
                    &w,
                    &dequant,
                    Out::F32(&mut f3),
                    0,
                    last..last + 1,
                )
            };
            assert_eq!(f3[..], f1[last * NR..n], "one row, last panel: n {n} k {k}");
        }
    }
}

/// The panel-wide requantization (NEON on aarch64) equals the scalar `requant` bit for bit:
/// ordinary and extreme sums, scales that are tiny, huge, infinite or NaN, several zero points
/// and bounds.
#[test]
fn requant16_matches_requant() {
    let scales = [
        1e-3f32,
        0.0173,
        1.0,
        3.5e4,
        1e-30,
        0.0,
        -0.02,
        f32::INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
    ];
    let mut x = 0x9e37_79b9u32;
    for round in 0..400 {
        let mut s = [0i32; NR];
        let mut bias = [0i32; NR];
        let mut scale = [0f32; NR];
        for jj in 0..NR {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            s[jj] = match jj % 4 {
                0 => (x as i32) >> 8,
                1 => (x as i32) >> 20,
                2 => [i32::MIN / 2, i32::MAX / 2, 0, -1][(x % 4) as usize],
                _ => x as i32 >> 1,
            };
            bias[jj] = (x >> 3) as i32 % 5000 - 2500;
            scale[jj] =
                scales[(x as usize >> 7) % scales.len()] * if jj % 3 == 0 { 1.0 } else { 0.37 };
        }
        let (zp, qmin, qmax) = [
            (0, -128, 127),
            (-3, -128, 127),
            (5, 0, 127),
            (-128, -128, 6),
        ][round % 4];
        let got = requant16(&s, &bias, &scale, zp, qmin, qmax);
        for jj in 0..NR {
            let want = requant(s[jj] + bias[jj], scale[jj], zp, qmin, qmax) as i8;
            assert_eq!(
                got[jj], want,
                "round {round} channel {jj}: s {} bias {} scale {}",
                s[jj], bias[jj], scale[jj]
            );
        }
    }
}

/// A linked product's streams (nibbles, block scales, packed zero-point terms) run their
/// read-ahead on into the next product's, and the link changes no result (it only steers
/// prefetches).
#[cfg(target_arch = "x86_64")]
#[test]
fn linked_streams_continue_into_the_next_weights() {
    let at = |j: usize, kk: usize| ((j * 5 + kk * 3) % 16) as i8 - 8;
    let mut first = QWeights::new_int4(64, 64, 32, at).unwrap();
    let mut second = QWeights::new_int4(32, 64, 32, at).unwrap();
    let len = first.nib.len();
    assert!(first.streams_nibbles() && second.streams_nibbles());
    // bf16 scales for the first, f32 for the second.
    let bf16 = f32::from_bits(1e-3f32.to_bits() & 0xFFFF_0000);
    let scale = vec![bf16; 64 * 2];
    first.set_block_scales(&scale).unwrap();
    second.set_block_scales(&[1e-3f32; 32 * 2]).unwrap();
    assert!(!first.pscale16.is_empty() && second.pscale16.is_empty());
    // Unlinked: past the end is past the allocation.
    let none = first.next_streams();
    assert_eq!(
        first.nib_ahead(len + 64, &none),
        first.nib.as_ptr().wrapping_add(len + 64)
    );
    let epi = Epilogue::Dequant {
        rows: &[0.02],
        zps: &[-7],
        scale: &scale,
        bias: None,
        lo: f32::NEG_INFINITY,
        hi: f32::INFINITY,
    };
    let a: Vec<u8> = (0..first.quads * 4).map(|i| (i * 37 % 256) as u8).collect();
    let (plain, before) = one_row(&a, &first, &epi);
    first.link_stream().point_to(&second);
    let next = first.next_streams();
    // Inside each stream nothing moves; past it the stream goes on in `second`'s.
    assert_eq!(
        first.nib_ahead(64, &next),
        first.nib.as_ptr().wrapping_add(64)
    );
    assert_eq!(first.nib_ahead(len, &next), second.nib.as_ptr());
    let past = first.nib_ahead(len + 128, &next);
    assert_eq!(past, second.nib.as_ptr().wrapping_add(128));
    // Two-byte scales here, four-byte ones in `second`: the stream goes on byte for byte.
    let scales = first.pscale16.len();
    let at = |p: *const u8, bytes: usize| p.wrapping_add(bytes);
    assert_eq!(
        first.scales_ahead(1, &next),
        at(first.pscale16.as_ptr() as _, 2)
    );
    let past = first.scales_ahead(scales + 3, &next);
    assert_eq!(past, at(second.pscale.as_ptr() as _, 6));
    let starts = first.pkscaled.len();
    let past = first.starts_ahead(starts + 2, &next);
    assert_eq!(past, at(second.pkscaled.as_ptr() as _, 8));
    let (_, after) = one_row(&a, &first, &epi);
    assert_eq!(before, after);
    assert_eq!(plain, after);
    // Weights without nibbles point nowhere.
    let int8 = QWeights::new(4, 8, 0, |_, _| 1).unwrap();
    first.link_stream().point_to(&int8);
    assert_eq!(
        first.nib_ahead(len, &first.next_streams()),
        first.nib.as_ptr().wrapping_add(len)
    );
}

/// Every kernel that reads the nibbles or the block scales addresses them through
/// `nib_at`/`pair_off` and `scale_at` (the AVX-512 ones too, which CPUs without AVX-512
/// cannot run): each quad and scale lies where those say, once, inside its stream.
#[test]
fn nibble_and_scale_layouts_follow_their_offsets() {
    for (n, k, block) in [
        (5, 12, 0),
        (70, 96, 32),
        (33, 200, 8),
        (16, 4, 4),
        (130, 64, 64),
    ] {
        let at = |j: usize, kk: usize| ((j * 7 + kk * 3 + j * kk) % 16) as i8 - 8;
        let mut w = QWeights::new_int4(n, k, block, at).unwrap();
        let (panels, quads) = (n.div_ceil(NR), w.quads);
        let mut seen = vec![false; w.nib.len()];
        for p in 0..panels {
            for q in 0..quads {
                let (t, base) = (q / 2, w.nib_at(p, 0));
                assert_eq!(w.nib_at(p, t), base + pair_off(t));
                // The AVX-512 paths step from an even pair by pair_off of the rest.
                let even = t - t % 2;
                assert_eq!(pair_off(t), pair_off(even) + pair_off(t - even));
                for e in 0..64 {
                    let byte = w.nib[base + pair_off(t) + e];
                    let v = ((byte >> (4 * (q % 2))) << 4) as i8 >> 4;
                    let (j, kk) = (p * NR + e / 4, 4 * q + e % 4);
                    let want = if j < n && kk < k { at(j, kk) } else { 0 };
                    assert_eq!(v, want, "n {n} k {k} panel {p} quad {q} byte {e}");
                    if q % 2 == 0 {
                        assert!(!seen[base + pair_off(t) + e], "n {n} k {k}");
                        seen[base + pair_off(t) + e] = true;
                    }
                }
            }
        }
        if block == 0 {
            continue;
        }
        let blocks = k / block;
        // bf16 values where few (kept as bf16), f32 ones past 256.
        let scale: Vec<f32> = (0..n * blocks).map(|i| 1.0 + i as f32).collect();
        w.set_block_scales(&scale).unwrap();
        let mut seen = vec![false; w.scales_len()];
        for j in 0..n {
            for b in 0..blocks {
                let i = scale_at(j / NR, b, blocks) + j % NR;
                let got = if w.pscale16.is_empty() {
                    w.pscale[i]
                } else {
                    f32::from_bits((w.pscale16[i] as u32) << 16)
                };
                assert_eq!(
                    got,
                    scale[j * blocks + b],
                    "n {n} k {k} output {j} block {b}"
                );
                assert!(!seen[i]);
                seen[i] = true;
            }
        }
    }
}
