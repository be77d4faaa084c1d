//! Times the float32 depthwise convolution on MobileNetV2's shapes: with the input hot (the
//! same buffer every run) and cold (one of 16 buffers, 8 MB apart, in turn: as in a network
//! whose previous layer's output has left the caches). Buffers start on a cache line, as the
//! delegate's arena does. Min of 40 runs, µs; `dwbench N` only runs each shape N times, hot
//! (for a profiler).
//! `cargo run --release -p pteron-nhwc --example dwbench`

use std::time::Instant;

use pteron_core::INLINE;
use pteron_nhwc::graph::Window;
use pteron_nhwc::kernels::spatial::{depthwise, DwWeights, Geom};

/// `v[a..]` starts on a 64-byte boundary.
fn aligned_start(v: &[f32]) -> usize {
    (v.as_ptr() as usize).wrapping_neg() % 64 / 4
}

fn main() {
    let reps = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok());
    for (c, hw, s) in [
        (32, 112, 1),
        (96, 112, 2),
        (144, 56, 1),
        (144, 56, 2),
        (192, 28, 1),
        (384, 14, 1),
        (576, 14, 1),
        (960, 7, 1),
    ] {
        let win = Window::square(3, s, 1);
        let (oh, ow) = win.out_hw(hw, hw).unwrap();
        let g = Geom {
            n: 1,
            ih: hw,
            iw: hw,
            oh,
            ow,
            c,
        };
        let wt = DwWeights::new(
            win,
            c,
            1,
            (0..9 * c).map(|i| (i % 7) as f32 * 0.1).collect(),
            vec![0.5; c],
            Some((0.0, 6.0)),
        )
        .unwrap();
        let n_in = hw * hw * c;
        let per = oh * ow * c;
        let copies = 16;
        let stride = n_in.max(2 << 20);
        let x0: Vec<f32> = (0..stride * copies + 16)
            .map(|i| (i % 13) as f32 * 0.01)
            .collect();
        let mut out0 = vec![0.0f32; per * copies + 16];
        let (xa, oa) = (aligned_start(&x0), aligned_start(&out0));
        let x = &x0[xa..];
        let out = &mut out0[oa..];
        let mut run = |k: usize| {
            depthwise(
                &INLINE,
                &wt,
                g,
                &x[k * stride..k * stride + n_in],
                &mut out[k * per..(k + 1) * per],
            )
            .unwrap()
        };
        if let Some(reps) = reps {
            for _ in 0..reps {
                run(0);
            }
            continue;
        }
        let mut hot = f64::INFINITY;
        let mut cold = f64::INFINITY;
        for r in 0..40 {
            let t = Instant::now();
            run(0);
            hot = hot.min(t.elapsed().as_secs_f64());
            let k = 1 + r % (copies - 1);
            let t = Instant::now();
            run(k);
            cold = cold.min(t.elapsed().as_secs_f64());
        }
        let mb = (n_in + per) as f64 * 4.0 / 1e6;
        println!(
            "dw c{c:4} {hw:3}x{hw:<3} s{s}: hot {:7.1} us  cold {:7.1} us  ({mb:.1} MB in+out: {:5.1} GB/s cold)",
            hot * 1e6,
            cold * 1e6,
            mb / 1e3 / cold
        );
    }
}
