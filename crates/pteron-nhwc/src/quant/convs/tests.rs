//! The transposed and dynamic int8 convolutions against plain scalar references of their
//! formulas.

use super::*;
use crate::graph::{ConvKind, DType};
use pteron_core::parallel::INLINE;

/// A small deterministic generator.
fn rng(seed: &mut u64) -> u32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 16) as u32
}

fn i8s(seed: &mut u64, n: usize) -> Vec<i8> {
    (0..n).map(|_| rng(seed) as u8 as i8).collect()
}

fn win(k: usize, s: usize, pads: [usize; 4], d: usize) -> Window {
    Window {
        pad_top: pads[0],
        pad_right: pads[1],
        pad_bottom: pads[2],
        pad_left: pads[3],
        kh: k,
        kw: k,
        sh: s,
        sw: s,
        dh: d,
        dw: d,
    }
}

/// Scatter form: every input pixel adds its taps to the output pixels they land on.
#[test]
fn deconv_matches_scatter_reference() {
    let mut seed = 0x0ddc_0ffe_e123_4567u64;
    // (groups, gi, go, kernel, stride, pads, dilation, adjustment)
    for &(g, gi, go, k, s, pads, d, adj) in &[
        (1, 3, 5, 2, 2, [0, 0, 0, 0], 1, 0),
        (1, 4, 3, 3, 2, [1, 1, 1, 1], 1, 1),
        (2, 3, 2, 3, 1, [1, 0, 0, 1], 1, 0),
        (3, 2, 4, 2, 3, [0, 1, 1, 0], 2, 2),
    ] {
        let (n, ih, iw) = (2, 4, 5);
        let w_ = win(k, s, pads, d);
        let (oh, ow) = w_.deconv_out_hw(ih, iw, (adj, adj)).unwrap();
        let conv = Conv {
            kind: ConvKind::Deconv,
            win: w_,
            groups: g,
            group_in: gi,
            group_out: go,
            adjustment: (adj, adj),
        };
        let (cin, cout, taps) = (g * gi, g * go, k * k);
        let x = i8s(&mut seed, n * ih * iw * cin);
        let wv: Vec<i32> = i8s(&mut seed, cout * taps * gi)
            .iter()
            .map(|&v| v as i32)
            .collect();
        let bias: Vec<i32> = (0..cout).map(|c| c as i32 * 301 - 700).collect();
        let scale: Vec<f32> = (0..cout).map(|c| 1e-3 * (c % 5 + 1) as f32).collect();
        let p = QDeconv {
            conv,
            w: wv.clone(),
            bias: bias.clone(),
            scale: scale.clone(),
            qi: Q { scale: 0.1, zp: 7 },
            qo: Q { scale: 0.2, zp: -5 },
            lo: -120,
            hi: 110,
        };
        let mut acc = vec![0i32; n * oh * ow * cout];
        for (i, a) in acc.iter_mut().enumerate() {
            *a = bias[i % cout];
        }
        for b in 0..n {
            for iy in 0..ih {
                for ix in 0..iw {
                    for ky in 0..k {
                        for kx in 0..k {
                            let oy = (iy * s + ky * d) as isize - pads[0] as isize;
                            let ox = (ix * s + kx * d) as isize - pads[3] as isize;
                            if oy < 0 || ox < 0 || oy as usize >= oh || ox as usize >= ow {
                                continue;
                            }
                            let o = ((b * oh + oy as usize) * ow + ox as usize) * cout;
                            for oc in 0..cout {
                                let gr = oc / go;
                                for ci in 0..gi {
                                    let xv = x[((b * ih + iy) * iw + ix) * cin + gr * gi + ci];
                                    let wt = wv[(oc * taps + ky * k + kx) * gi + ci];
                                    acc[o + oc] += (xv as i32 - 7) * wt;
                                }
                            }
                        }
                    }
                }
            }
        }
        let want: Vec<i8> = acc
            .iter()
            .enumerate()
            .map(|(i, &a)| {
                let f = (a as f32 * scale[i % cout]).min(115.0);
                (f.round_ties_even() as i32 - 5).clamp(-120, 110) as i8
            })
            .collect();
        let mut got = vec![0i8; want.len()];
        deconv(&INLINE, &p, &x, n, ih, iw, &mut got, oh, ow).unwrap();
        assert_eq!(
            got, want,
            "groups {g} {gi}→{go} k{k} s{s} {pads:?} d{d} adj{adj}"
        );
        assert!(deconv(&INLINE, &p, &x[1..], n, ih, iw, &mut got, oh, ow).is_err());
    }
}

#[test]
fn dynamic_conv_matches_reference() {
    let mut seed = 0x5eed_1234_abcd_0001u64;
    // (groups, gi, go, kernel, stride, pads, one row for all images)
    for &(groups, gi, go, k, s, pads, shared) in &[
        (1, 3, 16, 4, 4, [0, 0, 0, 0], false),
        (1, 16, 8, 3, 1, [1, 1, 1, 1], false),
        (1, 5, 19, 3, 2, [1, 0, 2, 1], true),
        (2, 8, 4, 3, 1, [1, 1, 1, 1], false),
        (3, 2, 5, 2, 2, [0, 1, 1, 0], true),
    ] {
        let (n, ih, iw) = (2, 9, 8);
        let (cin, oc) = (groups * gi, groups * go);
        let w_ = win(k, s, pads, 1);
        let (oh, ow) = w_.out_hw(ih, iw).unwrap();
        let kk = k * k * gi;
        let wv = i8s(&mut seed, oc * kk);
        let packed = (0..groups)
            .map(|g| QWeights::new(go, kk, 0, |j, t| wv[(g * go + j) * kk + t]).unwrap())
            .collect();
        let wscale: Vec<f32> = (0..oc).map(|c| 2e-3 * (c % 7 + 1) as f32).collect();
        let bias: Vec<f32> = (0..oc).map(|c| c as f32 * 0.125 - 1.0).collect();
        let x = i8s(&mut seed, n * ih * iw * cin);
        let rows = if shared { 1 } else { n };
        let rs: Vec<f32> = (0..rows).map(|r| 0.03 + 0.01 * r as f32).collect();
        let zps: Vec<i32> = (0..rows).map(|r| r as i32 * 40 - 17).collect();
        let p = DConv {
            w: packed,
            scale: wscale.clone(),
            bias: Some(bias.clone()),
            lo: -3.0,
            hi: 4.0,
        };
        let mut scratch = vec![0u8; p.scratch_len(ih, iw, cin, oh * ow)];
        let mut got = vec![0f32; n * oh * ow * oc];
        let dims = [n, ih, iw, cin];
        dynamic_conv(
            &INLINE,
            &p,
            &w_,
            dims,
            (oh, ow),
            &x,
            &rs,
            &zps,
            &mut got,
            &mut scratch,
        )
        .unwrap();
        for b in 0..n {
            let r = if shared { 0 } else { b };
            for oy in 0..oh {
                for ox in 0..ow {
                    for c in 0..oc {
                        let mut acc = 0i32;
                        for ky in 0..k {
                            for kx in 0..k {
                                let y = (oy * s + ky) as isize - pads[0] as isize;
                                let xx = (ox * s + kx) as isize - pads[3] as isize;
                                if y < 0 || xx < 0 || y as usize >= ih || xx as usize >= iw {
                                    continue;
                                }
                                let px = ((b * ih + y as usize) * iw + xx as usize) * cin;
                                for ci in 0..gi {
                                    let xv = x[px + (c / go) * gi + ci] as i32;
                                    let wt = wv[c * kk + (ky * k + kx) * gi + ci] as i32;
                                    acc += (xv - zps[r]) * wt;
                                }
                            }
                        }
                        let want = (acc as f32 * rs[r] * wscale[c] + bias[c]).clamp(-3.0, 4.0);
                        let g = got[((b * oh + oy) * ow + ox) * oc + c];
                        assert!(
                            (g - want).abs() <= 1e-5 * want.abs().max(1.0),
                            "groups {groups} {gi}→{go} k{k} s{s}: {g} vs {want}"
                        );
                    }
                }
            }
        }
        // One row per image or one for all: three rows for two images is refused, and so is
        // too little scratch.
        let mut run = |rs: &[f32], zps: &[i32], scratch: &mut [u8]| {
            dynamic_conv(
                &INLINE,
                &p,
                &w_,
                dims,
                (oh, ow),
                &x,
                rs,
                zps,
                &mut got,
                scratch,
            )
        };
        assert!(run(&[0.1, 0.2, 0.3], &[0, 0, 0], &mut scratch).is_err());
        let short = scratch.len() - 1;
        assert!(run(&rs, &zps, &mut scratch[..short]).is_err());
    }
}

/// What `exec::prepare` makes of a convolution node with input `xd` (`[1, 4, 4, cin]`),
/// filter `wd` and output `od`.
fn prepare_conv(conv: Conv, xd: DType, wd: DType, od: DType) -> Result<bool, KernelError> {
    use crate::graph::{Graph, Kind, Node, Value};
    use crate::quant::exec::{prepare, QPrep};
    use crate::util::Shape;
    static FILTER: [u8; 64] = [3; 64];
    let (cin, cout) = (conv.in_channels(), conv.out_channels());
    let v = |dtype, dims: &[usize], kind| Value {
        dtype,
        shape: Shape::new(dims).unwrap(),
        kind,
    };
    let g = Graph {
        values: vec![
            v(xd, &[1, 4, 4, cin], Kind::Input(0)),
            v(
                wd,
                &[cout, conv.win.kh, conv.win.kw, conv.group_in],
                Kind::Constant(&FILTER),
            ),
            v(od, &[1, 4, 4, cout], Kind::Output(1)),
        ],
        nodes: vec![],
        inputs: vec![(0, 0)],
        outputs: vec![(1, 2)],
        node_names: vec![],
        scales: vec![vec![0.5; cout]],
    };
    let node = Node::Conv {
        conv,
        x: 0,
        w: 1,
        bias: None,
        out: 2,
        clamp: None,
    };
    Ok(matches!(
        prepare(&g, &node)?,
        Some(QPrep::DynConv(_) | QPrep::Deconv(_))
    ))
}

/// The combinations the new paths take, and clear refusals (never numbers) for the others.
#[test]
fn prepare_takes_or_refuses() {
    let conv = |kind, groups, gi, go| Conv {
        kind,
        win: win(2, 2, [0; 4], 1),
        groups,
        group_in: gi,
        group_out: go,
        adjustment: (0, 0),
    };
    let qd8 = |nonbatch| DType::QD8 { nonbatch };
    let qc8 = DType::QC8 { axis: 0, scales: 0 };
    let qs8 = |zp| DType::QS8 { scale: 0.1, zp };
    let unsupported = |r: Result<bool, KernelError>, what: &str| match r {
        Err(KernelError::Unsupported(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    let c = conv(ConvKind::Conv, 1, 3, 4);
    assert!(prepare_conv(c, qd8(3), qc8, DType::F32).unwrap());
    unsupported(prepare_conv(c, qd8(1), qc8, DType::F32), "1 non-batch dims");
    assert!(prepare_conv(conv(ConvKind::Conv, 2, 1, 2), qd8(3), qc8, DType::F32).unwrap());
    unsupported(
        prepare_conv(conv(ConvKind::Depthwise, 2, 1, 1), qd8(3), qc8, DType::F32),
        "dynamic int8 Depthwise",
    );
    unsupported(
        prepare_conv(conv(ConvKind::Deconv, 1, 3, 4), qd8(3), qc8, DType::F32),
        "dynamic int8 Deconv",
    );
    unsupported(
        prepare_conv(c, qd8(3), qs8(0), DType::F32),
        "filter of datatype",
    );
    let d = conv(ConvKind::Deconv, 1, 3, 4);
    assert!(prepare_conv(d, qs8(-3), qc8, qs8(5)).unwrap());
    assert!(prepare_conv(conv(ConvKind::Deconv, 2, 2, 2), qs8(-3), qc8, qs8(5)).unwrap());
    unsupported(
        prepare_conv(d, qs8(-3), qs8(4), qs8(5)),
        "filter of datatype",
    );
    unsupported(prepare_conv(d, qs8(-3), qc8, DType::F32), "datatypes");
}
