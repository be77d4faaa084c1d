//! Times the int8 kernels other than the products on MobileNetV2's shapes (min of N runs).
//! `cargo run --release -p pteron-nhwc --example qbench`

use std::time::Instant;

use pteron_core::INLINE;
use pteron_nhwc::graph::Window;
use pteron_nhwc::kernels::spatial::Geom;
use pteron_nhwc::quant::ops::{depthwise, quantize_rows, requantize, QDwWeights, Q};

fn best(mut f: impl FnMut()) -> f64 {
    f();
    (0..20)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let qi = Q {
        scale: 0.02,
        zp: -3,
    };
    let qo = Q { scale: 0.03, zp: 5 };
    for (c, hw, s) in [
        (32, 112, 1),
        (96, 112, 2),
        (144, 56, 1),
        (144, 56, 2),
        (384, 14, 1),
        (960, 7, 1),
    ] {
        let o = (hw + 2 - 3) / s + 1;
        let g = Geom {
            n: 1,
            ih: hw,
            iw: hw,
            oh: o,
            ow: o,
            c,
        };
        let win = Window {
            pad_top: 1,
            pad_right: 1,
            pad_bottom: 1,
            pad_left: 1,
            kh: 3,
            kw: 3,
            sh: s,
            sw: s,
            dh: 1,
            dw: 1,
        };
        let w: Vec<i16> = (0..9 * c).map(|i| (i * 37 % 255) as i16 - 127).collect();
        let wt = QDwWeights {
            win,
            channels: c,
            w32: w.iter().map(|&v| v as i32).collect(),
            w,
            bias: (0..c).map(|i| i as i32 * 11 - 300).collect(),
            scale: (0..c).map(|i| 0.001 + i as f32 * 1e-5).collect(),
            qi,
            qo,
            lo: -128,
            hi: 127,
        };
        let x: Vec<i8> = (0..hw * hw * c)
            .map(|i| (i * 7919 % 256) as u8 as i8)
            .collect();
        let mut out = vec![0i8; o * o * c];
        let t = best(|| depthwise(&INLINE, &wt, g, &x, &mut out).unwrap());
        println!(
            "depthwise c{c:4} {hw:3}x{hw:<3} s{s}: {:8.1} us  {:6.2} GMAC/s",
            t * 1e6,
            (o * o * c * 9) as f64 / t / 1e9
        );
    }
    let n = 112 * 112 * 96;
    let x: Vec<i8> = (0..n).map(|i| (i * 7919 % 256) as u8 as i8).collect();
    let mut out = vec![0i8; n];
    let t = best(|| requantize(&x, qi, qi, -100, 100, &mut out));
    println!("clamp (same params) {n}: {:8.1} us", t * 1e6);
    let t = best(|| requantize(&x, qi, qo, -128, 127, &mut out));
    println!("requantize {n}: {:8.1} us", t * 1e6);
    let (rows, k) = (128, 1536);
    let xf: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0 - 5.0)
        .collect();
    let (mut q, mut sc, mut zp) = (vec![0i8; rows * k], vec![0f32; rows], vec![0i32; rows]);
    let t = best(|| quantize_rows(&xf, k, &mut q, &mut sc, &mut zp));
    println!("dynamic quantization {rows}x{k}: {:8.1} us", t * 1e6);
}
