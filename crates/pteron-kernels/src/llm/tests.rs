use super::*;
use pteron_core::testing::TestCall;
use pteron_core::ScalarType as St;

/// Deterministic pseudo-random values in (-1, 1).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Plain attention in f64: softmax over the allowed keys of each row.
#[allow(clippy::too_many_arguments)]
fn reference(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    (b, s, h, d): (usize, usize, usize, usize),
    (rows, hk): (usize, usize),
    start: usize,
    causal: bool,
    scale: f64,
) -> Vec<f32> {
    let mut out = vec![0f32; b * s * h * d];
    let keys = if mask.is_some() { rows } else { start + s };
    for bi in 0..b {
        for m in 0..s {
            for hi in 0..h {
                let kh = hi / (h / hk);
                let qo = ((bi * s + m) * h + hi) * d;
                let lim = if causal { start + m + 1 } else { keys };
                let mut sc: Vec<f64> = (0..lim)
                    .map(|n| {
                        let ko = ((bi * rows + n) * hk + kh) * d;
                        let dot: f64 = (0..d).map(|i| q[qo + i] as f64 * k[ko + i] as f64).sum();
                        dot * scale + mask.map_or(0.0, |mk| mk[m * rows + n] as f64)
                    })
                    .collect();
                let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for x in sc.iter_mut() {
                    *x = (*x - mx).exp();
                    sum += *x;
                }
                for i in 0..d {
                    let mut a = 0.0;
                    for (n, p) in sc.iter().enumerate() {
                        let vo = ((bi * rows + n) * hk + kh) * d;
                        a += p * v[vo + i] as f64;
                    }
                    out[qo + i] = (a / sum) as f32;
                }
            }
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "at {i}: {g} vs {w}");
    }
}

struct Case {
    b: usize,
    s: usize,
    h: usize,
    hk: usize,
    d: usize,
    rows: usize,
    start: usize,
}

fn custom_sdpa_case(c: &Case, causal: bool, with_mask: bool, scale: Option<f64>) {
    let q = vals(c.b * c.s * c.h * c.d, 1);
    let k = vals(c.b * c.rows * c.hk * c.d, 2);
    let v = vals(c.b * c.rows * c.hk * c.d, 3);
    let mask: Vec<f32> = vals(c.s * c.rows, 4)
        .iter()
        .enumerate()
        .map(|(i, x)| if i % 7 == 3 { f32::NEG_INFINITY } else { *x })
        .collect();
    let mut t = TestCall::new();
    t.tensor(&[c.b, c.s, c.h, c.d], &q);
    t.tensor(&[c.b, c.rows, c.hk, c.d], &k);
    t.tensor(&[c.b, c.rows, c.hk, c.d], &v);
    t.int(c.start as i64);
    if with_mask {
        t.tensor(&[c.s, c.rows], &mask);
    } else {
        t.none();
    }
    t.double(0.0);
    t.bool(causal);
    match scale {
        Some(s) => t.double(s),
        None => t.none(),
    };
    let o = t.out(St::Float, &[c.b, c.s, c.h, c.d]);
    t.ret(o);
    t.check(check_custom_sdpa).unwrap();
    t.run(custom_sdpa_out).unwrap();
    let sc = scale.unwrap_or(1.0 / (c.d as f64).sqrt());
    let want = reference(
        &q,
        &k,
        &v,
        with_mask.then_some(&mask[..]),
        (c.b, c.s, c.h, c.d),
        (c.rows, c.hk),
        c.start,
        causal,
        sc,
    );
    assert_close(&t.output::<f32>(o), &want, 2e-5);
}

#[test]
fn custom_sdpa_matches_plain_softmax() {
    // Decode (1 row), prefill (several rows), GQA, start_pos > 0, batch 2.
    let cases = [
        Case {
            b: 1,
            s: 1,
            h: 4,
            hk: 2,
            d: 16,
            rows: 32,
            start: 9,
        },
        Case {
            b: 1,
            s: 5,
            h: 4,
            hk: 2,
            d: 16,
            rows: 32,
            start: 0,
        },
        Case {
            b: 2,
            s: 3,
            h: 6,
            hk: 3,
            d: 8,
            rows: 20,
            start: 11,
        },
        Case {
            b: 1,
            s: 4,
            h: 2,
            hk: 2,
            d: 5,
            rows: 8,
            start: 4,
        },
    ];
    for c in &cases {
        custom_sdpa_case(c, true, false, None);
        custom_sdpa_case(c, false, false, Some(0.3));
        custom_sdpa_case(c, false, true, None);
    }
}

#[test]
fn custom_sdpa_spans_several_key_blocks() {
    // More than 512 keys: the online softmax rescales across blocks.
    let c = Case {
        b: 1,
        s: 3,
        h: 2,
        hk: 1,
        d: 8,
        rows: 1300,
        start: 1200,
    };
    custom_sdpa_case(&c, true, false, None);
    custom_sdpa_case(&c, false, true, None);
}

#[test]
fn custom_sdpa_errors() {
    let base = |start: i64, causal: bool, mask: bool| {
        let mut t = TestCall::new();
        t.tensor(&[1, 2, 2, 4], &vals(16, 1));
        t.tensor(&[1, 8, 1, 4], &vals(32, 2));
        t.tensor(&[1, 8, 1, 4], &vals(32, 3));
        t.int(start);
        if mask {
            t.tensor(&[2, 8], &[0f32; 16]);
        } else {
            t.none();
        }
        t.double(0.0);
        t.bool(causal);
        t.none();
        let o = t.out(St::Float, &[1, 2, 2, 4]);
        t.ret(o);
        t
    };
    // start_pos + seq beyond the cache, negative start_pos, mask together with is_causal.
    for (start, causal, mask) in [(7, true, false), (-1, true, false), (0, true, true)] {
        let mut t = base(start, causal, mask);
        assert!(t.run(custom_sdpa_out).is_err(), "{start} {causal} {mask}");
    }
    let mut t = base(6, true, false);
    t.run(custom_sdpa_out).unwrap();

    // int8 query: load-time error.
    let mut t = TestCall::new();
    t.tensor(&[1, 1, 1, 4], &[1i8; 4]);
    t.tensor(&[1, 2, 1, 4], &[1i8; 8]);
    t.tensor(&[1, 2, 1, 4], &[1i8; 8]);
    t.int(0);
    t.none();
    t.double(0.0);
    t.bool(true);
    t.none();
    let o = t.out(St::Char, &[1, 1, 1, 4]);
    t.ret(o);
    assert!(matches!(
        t.check(check_custom_sdpa),
        Err(KernelError::UnsupportedDType { .. })
    ));
}

#[test]
fn update_cache_writes_rows_in_place() {
    let mut t = TestCall::new();
    let value: Vec<f32> = (0..2 * 2 * 3).map(|x| x as f32 + 1.0).collect(); // [2, 2, 1, 3]
    t.tensor(&[2, 2, 1, 3], &value);
    let cache = t.tensor(&[2, 4, 1, 3], &[0f32; 24]);
    t.int(1);
    let o = t.out(St::Float, &[1]);
    t.ret(o);
    t.check(check_update_cache).unwrap();
    t.run(update_cache_out).unwrap();
    let c = t.output::<f32>(cache);
    let mut want = vec![0f32; 24];
    want[3..9].copy_from_slice(&value[0..6]);
    want[12 + 3..12 + 9].copy_from_slice(&value[6..12]);
    assert_eq!(c, want);

    for start in [3i64, 4, -1] {
        let mut t = TestCall::new();
        t.tensor(&[1, 2, 1, 3], &[1f32; 6]);
        t.tensor(&[1, 4, 1, 3], &[0f32; 12]);
        t.int(start);
        let o = t.out(St::Float, &[1]);
        t.ret(o);
        assert!(t.run(update_cache_out).is_err(), "start {start}");
    }
}

#[test]
fn sdpa_with_kv_cache_updates_then_attends() {
    let (h, hk, d, rows, s, start) = (4, 2, 8, 16, 3, 5);
    let q = vals(s * h * d, 1);
    let kp = vals(s * hk * d, 2);
    let vp = vals(s * hk * d, 3);
    let kc0 = vals(rows * hk * d, 4);
    let vc0 = vals(rows * hk * d, 5);
    let mut t = TestCall::new();
    t.tensor(&[1, s, h, d], &q);
    t.tensor(&[1, s, hk, d], &kp);
    t.tensor(&[1, s, hk, d], &vp);
    let kc = t.tensor(&[1, rows, hk, d], &kc0);
    let vc = t.tensor(&[1, rows, hk, d], &vc0);
    t.int(start as i64);
    t.int(s as i64);
    t.none();
    t.double(0.0);
    t.bool(true);
    t.none();
    let o = t.out(St::Float, &[1, s, h, d]);
    t.ret(o);
    t.check(check_sdpa_with_kv_cache).unwrap();
    t.run(sdpa_with_kv_cache_out).unwrap();
    let (mut kw, mut vw) = (kc0.clone(), vc0.clone());
    kw[start * hk * d..(start + s) * hk * d].copy_from_slice(&kp);
    vw[start * hk * d..(start + s) * hk * d].copy_from_slice(&vp);
    assert_eq!(t.output::<f32>(kc), kw);
    assert_eq!(t.output::<f32>(vc), vw);
    let want = reference(
        &q,
        &kw,
        &vw,
        None,
        (1, s, h, d),
        (rows, hk),
        start,
        true,
        1.0 / (d as f64).sqrt(),
    );
    assert_close(&t.output::<f32>(o), &want, 2e-5);
}

#[test]
fn half_types_round_probabilities() {
    let (s, h, d, rows) = (2, 2, 4, 6);
    let q = vals(s * h * d, 1);
    let k = vals(rows * h * d, 2);
    let v = vals(rows * h * d, 3);
    let want = reference(&q, &k, &v, None, (1, s, h, d), (rows, h), 2, true, 0.5);
    let cv = |x: &[f32]| x.iter().map(|&a| bf16::from_f32(a)).collect::<Vec<_>>();
    let mut t = TestCall::new();
    t.tensor(&[1, s, h, d], &cv(&q));
    t.tensor(&[1, rows, h, d], &cv(&k));
    t.tensor(&[1, rows, h, d], &cv(&v));
    t.int(2);
    t.none();
    t.double(0.0);
    t.bool(true);
    t.double(0.5);
    let o = t.out(St::BFloat16, &[1, s, h, d]);
    t.ret(o);
    t.check(check_custom_sdpa).unwrap();
    t.run(custom_sdpa_out).unwrap();
    let got: Vec<f32> = t.output::<bf16>(o).iter().map(|x| x.to_f32()).collect();
    assert_close(&got, &want, 3e-2);
}

/// The gated delta rule written as matrices in f64: per head, `S ← diag(decay) S`,
/// `S ← S + β k (v − Sᵀk)ᵀ`, `o = Sᵀ q` for every query head of the group.
#[allow(clippy::type_complexity)]
fn delta_reference(
    (q, k, v, decay, beta, s0): (&[f32], &[f32], &[f32], &[f32], &[f32], &[f32]),
    (b, h, r, t, kd, vd): (usize, usize, usize, usize, usize, usize),
    channelwise: bool,
) -> (Vec<f32>, Vec<f32>) {
    let mut out = vec![0f32; b * h * r * t * vd];
    let mut fin = vec![0f32; b * h * kd * vd];
    for bi in 0..b {
        for hi in 0..h {
            let bh = bi * h + hi;
            let mut s: Vec<Vec<f64>> = (0..kd)
                .map(|i| (0..vd).map(|j| s0[(bh * kd + i) * vd + j] as f64).collect())
                .collect();
            for ti in 0..t {
                let kt: Vec<f64> = (0..kd).map(|i| k[(bh * t + ti) * kd + i] as f64).collect();
                for (i, row) in s.iter_mut().enumerate() {
                    let f = if channelwise {
                        decay[(bh * t + ti) * kd + i]
                    } else {
                        decay[bh * t + ti]
                    } as f64;
                    row.iter_mut().for_each(|x| *x *= f);
                }
                let bt = beta[bh * t + ti] as f64;
                let delta: Vec<f64> = (0..vd)
                    .map(|j| {
                        let m: f64 = (0..kd).map(|i| s[i][j] * kt[i]).sum();
                        (v[(bh * t + ti) * vd + j] as f64 - m) * bt
                    })
                    .collect();
                for i in 0..kd {
                    for j in 0..vd {
                        s[i][j] += kt[i] * delta[j];
                    }
                }
                for ri in 0..r {
                    let qh = bh * r + ri;
                    for j in 0..vd {
                        let o: f64 = (0..kd)
                            .map(|i| s[i][j] * q[(qh * t + ti) * kd + i] as f64)
                            .sum();
                        out[(qh * t + ti) * vd + j] = o as f32;
                    }
                }
            }
            for i in 0..kd {
                for j in 0..vd {
                    fin[(bh * kd + i) * vd + j] = s[i][j] as f32;
                }
            }
        }
    }
    (out, fin)
}

#[test]
fn gated_delta_rule_matches_matrix_form() {
    let mut reg = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut reg);
    let kernel = *reg.get("llama::gated_delta_rule.out").unwrap();
    // (b, h, r, t, k, v, channelwise): decode, prefill, grouped queries, batch 2, K != V.
    for &(b, h, r, t, kd, vd, cw) in &[
        (1, 2, 1, 1, 8, 8, false),
        (1, 4, 1, 7, 16, 16, false),
        (1, 2, 2, 5, 8, 4, false),
        (2, 3, 1, 3, 4, 6, true),
        (1, 1, 3, 9, 5, 7, true),
    ] {
        let q = vals(b * h * r * t * kd, 1);
        let k: Vec<f32> = vals(b * h * t * kd, 2).iter().map(|x| x * 0.5).collect();
        let v = vals(b * h * t * vd, 3);
        let nd = if cw { b * h * t * kd } else { b * h * t };
        let decay: Vec<f32> = vals(nd, 4).iter().map(|x| 0.6 + 0.35 * x).collect();
        let beta: Vec<f32> = vals(b * h * t, 5).iter().map(|x| 0.5 + 0.4 * x).collect();
        let s0 = vals(b * h * kd * vd, 6);
        let mut c = TestCall::new();
        c.tensor(&[b, h * r, t, kd], &q);
        c.tensor(&[b, h, t, kd], &k);
        c.tensor(&[b, h, t, vd], &v);
        if cw {
            c.tensor(&[b, h, t, kd], &decay);
        } else {
            c.tensor(&[b, h, t], &decay);
        }
        c.tensor(&[b, h, t], &beta);
        c.tensor(&[b, h, kd, vd], &s0);
        let o = c.out(St::Float, &[b, h * r, t, vd]);
        let s = c.out(St::Float, &[b, h, kd, vd]);
        c.ret(o);
        c.ret(s);
        c.run_kernel("llama::gated_delta_rule.out", &kernel, &pteron_core::INLINE)
            .unwrap();
        let (want_o, want_s) =
            delta_reference((&q, &k, &v, &decay, &beta, &s0), (b, h, r, t, kd, vd), cw);
        assert_close(&c.output::<f32>(o), &want_o, 1e-5);
        assert_close(&c.output::<f32>(s), &want_s, 1e-5);
    }
}

#[test]
fn gated_delta_rule_refuses_mismatched_shapes() {
    let mut reg = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut reg);
    let kernel = *reg.get("llama::gated_delta_rule.out").unwrap();
    let (b, h, t, kd, vd) = (1, 2, 3, 4, 4);
    let mut c = TestCall::new();
    c.tensor(&[b, 3, t, kd], &vals(3 * t * kd, 1)); // 3 query heads over 2 state heads
    c.tensor(&[b, h, t, kd], &vals(h * t * kd, 2));
    c.tensor(&[b, h, t, vd], &vals(h * t * vd, 3));
    c.tensor(&[b, h, t], &vals(h * t, 4));
    c.tensor(&[b, h, t], &vals(h * t, 5));
    c.tensor(&[b, h, kd, vd], &vals(h * kd * vd, 6));
    let o = c.out(St::Float, &[b, 3, t, vd]);
    let s = c.out(St::Float, &[b, h, kd, vd]);
    c.ret(o);
    c.ret(s);
    let err = c
        .run_kernel("llama::gated_delta_rule.out", &kernel, &pteron_core::INLINE)
        .unwrap_err();
    assert!(err.to_string().contains("query"), "{err}");
}

/// int8 values with a per-row (token, head) scale and zero point, and their dequantized
/// floats: rows of `d` elements.
fn quantized_rows(rows: usize, d: usize, seed: u64) -> (Vec<i8>, Vec<i8>, Vec<f32>, Vec<f32>) {
    let raw = vals(rows * d, seed);
    let (mut q, mut zp, mut sc, mut deq) = (vec![], vec![], vec![], vec![]);
    for r in 0..rows {
        let z = ((r * 37 + seed as usize) % 41) as i32 - 20;
        let s = 0.01 + 0.002 * (r % 7) as f32;
        zp.push(z as i8);
        sc.push(s);
        for i in 0..d {
            let x = (raw[r * d + i] * 100.0).round() as i32 + z;
            let x = x.clamp(-128, 127);
            q.push(x as i8);
            deq.push((x - z) as f32 * s);
        }
    }
    (q, zp, sc, deq)
}

#[test]
fn custom_quantized_sdpa_matches_dequantized_attention() {
    let mut reg = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut reg);
    let kernel = *reg.get("llama::custom_quantized_sdpa.out").unwrap();
    let cases = [
        Case {
            b: 1,
            s: 1,
            h: 4,
            hk: 2,
            d: 16,
            rows: 24,
            start: 9,
        },
        Case {
            b: 1,
            s: 5,
            h: 2,
            hk: 2,
            d: 8,
            rows: 16,
            start: 0,
        },
        Case {
            b: 2,
            s: 3,
            h: 6,
            hk: 3,
            d: 12,
            rows: 700,
            start: 600,
        },
    ];
    for c in &cases {
        for with_mask in [false, true] {
            let (q, qz, qs, qd) = quantized_rows(c.b * c.s * c.h, c.d, 1);
            let (k, kz, ks, kd) = quantized_rows(c.b * c.rows * c.hk, c.d, 2);
            let (v, vz, vs, vd) = quantized_rows(c.b * c.rows * c.hk, c.d, 3);
            let mask: Vec<f32> = vals(c.s * c.rows, 4)
                .iter()
                .map(|x| if *x > 0.6 { f32::NEG_INFINITY } else { *x })
                .collect();
            let mut t = TestCall::new();
            t.tensor(&[c.b, c.s, c.h, c.d], &q);
            t.tensor(&[c.b, c.rows, c.hk, c.d], &k);
            t.tensor(&[c.b, c.rows, c.hk, c.d], &v);
            t.int(c.start as i64);
            if with_mask {
                t.tensor(&[c.s, c.rows], &mask);
            } else {
                t.none();
            }
            t.double(0.0);
            t.bool(!with_mask);
            t.none();
            t.tensor(&[c.b, c.s, c.h, 1], &qz);
            t.tensor(&[c.b, c.s, c.h, 1], &qs);
            t.tensor(&[c.b, c.rows, c.hk, 1], &kz);
            t.tensor(&[c.b, c.rows, c.hk, 1], &ks);
            t.tensor(&[c.b, c.rows, c.hk, 1], &vz);
            t.tensor(&[c.b, c.rows, c.hk, 1], &vs);
            t.bool(false);
            let o = t.out(St::Float, &[c.b, c.s, c.h, c.d]);
            t.ret(o);
            t.run_kernel(
                "llama::custom_quantized_sdpa.out",
                &kernel,
                &pteron_core::INLINE,
            )
            .unwrap();
            let want = reference(
                &qd,
                &kd,
                &vd,
                with_mask.then_some(&mask[..]),
                (c.b, c.s, c.h, c.d),
                (c.rows, c.hk),
                c.start,
                !with_mask,
                1.0 / (c.d as f64).sqrt(),
            );
            assert_close(&t.output::<f32>(o), &want, 2e-5);
        }
    }
}

#[test]
fn custom_quantized_sdpa_refuses_what_it_cannot_do() {
    let mut reg = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut reg);
    let kernel = *reg.get("llama::custom_quantized_sdpa.out").unwrap();
    let (b, s, h, d, rows) = (1, 1, 2, 4, 8);
    let (q, qz, qs, _) = quantized_rows(b * s * h, d, 1);
    let (k, kz, ks, _) = quantized_rows(b * rows * h, d, 2);
    for (seq_at_dim_2, drop_scale, want) in [
        (true, false, "is_seq_at_dim_2"),
        (false, true, "zero point and scale"),
    ] {
        let mut t = TestCall::new();
        t.tensor(&[b, s, h, d], &q);
        t.tensor(&[b, rows, h, d], &k);
        t.tensor(&[b, rows, h, d], &k);
        t.int(0);
        t.none();
        t.double(0.0);
        t.bool(true);
        t.none();
        t.tensor(&[b, s, h, 1], &qz);
        t.tensor(&[b, s, h, 1], &qs);
        t.tensor(&[b, rows, h, 1], &kz);
        if drop_scale {
            t.none();
        } else {
            t.tensor(&[b, rows, h, 1], &ks);
        }
        t.tensor(&[b, rows, h, 1], &kz);
        t.tensor(&[b, rows, h, 1], &ks);
        t.bool(seq_at_dim_2);
        let o = t.out(St::Float, &[b, s, h, d]);
        t.ret(o);
        let err = t
            .run_kernel(
                "llama::custom_quantized_sdpa.out",
                &kernel,
                &pteron_core::INLINE,
            )
            .unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
    }
}

#[test]
fn gated_delta_rule_with_empty_value_heads_is_empty() {
    let mut reg = KernelRegistry::new();
    register::<pteron_core::AllOps>(&mut reg);
    let kernel = *reg.get("llama::gated_delta_rule.out").unwrap();
    let (b, h, t, kd) = (1, 2, 3, 4);
    let mut c = TestCall::new();
    c.tensor(&[b, h, t, kd], &vals(h * t * kd, 1));
    c.tensor(&[b, h, t, kd], &vals(h * t * kd, 2));
    c.tensor::<f32>(&[b, h, t, 0], &[]);
    c.tensor(&[b, h, t], &vals(h * t, 4));
    c.tensor(&[b, h, t], &vals(h * t, 5));
    c.tensor::<f32>(&[b, h, kd, 0], &[]);
    let o = c.out(St::Float, &[b, h, t, 0]);
    let s = c.out(St::Float, &[b, h, kd, 0]);
    c.ret(o);
    c.ret(s);
    c.run_kernel("llama::gated_delta_rule.out", &kernel, &pteron_core::INLINE)
        .unwrap();
    assert!(c.output::<f32>(o).is_empty());
}
