//! Depthwise convolution throughput on MobileNetV2's shapes.
use std::time::Instant;

use pteron_core::INLINE;
use pteron_kernels_cpu::dwconv::{depthwise, DwGeom};

fn main() {
    let only: Option<usize> = std::env::var("ONLY").ok().and_then(|v| v.parse().ok());
    let cases = [
        (32, 112, 1),
        (96, 112, 2),
        (144, 56, 1),
        (144, 56, 2),
        (192, 28, 1),
        (384, 14, 1),
        (960, 7, 1),
    ];
    for (case, (c, hw, s)) in cases.into_iter().enumerate() {
        if only.is_some_and(|o| o != case) {
            continue;
        }
        let reps = if only.is_some() { 2000 } else { 30 };
        let g = DwGeom {
            channels: c,
            ih: hw,
            iw: hw,
            kh: 3,
            kw: 3,
            sh: s,
            sw: s,
            ph: 1,
            pw: 1,
        };
        let x: Vec<f32> = (0..c * hw * hw).map(|i| (i % 7) as f32).collect();
        let w = vec![0.1f32; c * 9];
        let b = vec![0.0f32; c];
        let mut out = vec![0.0f32; c * g.oh() * g.ow()];
        let mut scratch = vec![0.0f32; g.buffer_len()];
        let mut v = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            depthwise(
                &INLINE,
                &g,
                1,
                &x,
                &w,
                &b,
                Some((0.0, 6.0)),
                &mut out,
                &mut scratch,
            )
            .unwrap();
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let macs = (c * g.oh() * g.ow() * 9) as f64;
        println!(
            "dw c{c:4} {hw:3}x{hw:<3} s{s}: {:8.1} us  {:6.1} GMAC/s (min)",
            v[0],
            macs / v[0] / 1e3
        );
    }
}
