//! Times the float32 depthwise convolution on MobileNetV2's shapes: with the input hot (the
//! same buffer every run) and cold (a different 8 MB-apart buffer every run, as in a network
//! whose previous layer's output has left the caches). Min of N runs, µs.
//! `cargo run --release -p pteron-xnnpack --example dwbench`

use std::time::Instant;

use pteron_core::INLINE;
use pteron_xnnpack::graph::Window;
use pteron_xnnpack::kernels::spatial::{depthwise, DwWeights, Geom};

fn main() {
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
        // 16 inputs, 32 MB apart in all: cycling through them evicts each from L2.
        let copies = 16;
        let stride = n_in.max(2 << 20);
        let x0: Vec<f32> = (0..stride * copies + 16)
            .map(|i| (i % 13) as f32 * 0.01)
            .collect();
        let mut out0 = vec![0.0f32; oh * ow * c * copies + 1024 + 16];
        let (xa, oa) = if let Some(off) = std::env::var("OFF")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
        {
            // Output `off` bytes past the input modulo 4 KiB (both 64-byte aligned).
            let xa = (x0.as_ptr() as usize).wrapping_neg() % 64 / 4;
            let xp = x0.as_ptr() as usize + xa * 4;
            let op = out0.as_ptr() as usize;
            let want = (xp + off) % 4096;
            let oa = (want + 4096 - op % 4096) % 4096 / 4;
            (xa, oa)
        } else if std::env::var_os("ALIGN").is_some() {
            (
                (x0.as_ptr() as usize).wrapping_neg() % 64 / 4,
                (out0.as_ptr() as usize).wrapping_neg() % 64 / 4,
            )
        } else {
            (0, 0)
        };
        let x = &x0[xa..];
        let out = &mut out0[oa..];
        if std::env::var_os("ALIGN").is_some() {
            eprintln!(
                "x % 64 = {}, w % 64 = {}, out % 64 = {}",
                x.as_ptr() as usize % 64,
                wt.w.as_ptr() as usize % 64,
                out.as_ptr() as usize % 64
            );
        }
        let per = oh * ow * c;
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
        if let Some(reps) = std::env::args()
            .nth(1)
            .and_then(|a| a.parse::<usize>().ok())
        {
            // `dwbench N`: only the hot runs, N times each (for a profiler).
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
            "dw c{c:4} {hw:3}x{hw:<3} s{s}: hot {:7.1} us  cold {:7.1} us  ({:.1} MB in+out: {:5.1} GB/s cold)",
            hot * 1e6,
            cold * 1e6,
            mb,
            mb / 1e3 / cold
        );
    }
}
