//! Times the float32 first-layer convolution of MobileNetV2 (3 → 32 channels, 3×3, stride 2,
//! 224×224 NHWC input) on one thread, min of N runs, µs; `convbench N` only runs it N times
//! (for a profiler).
//! `cargo run --release -p pteron-nhwc --example convbench`

use std::time::Instant;

use pteron_core::INLINE;
use pteron_nhwc::graph::{Conv, ConvKind, Window};
use pteron_nhwc::kernels::gemm::ConvWeights;

fn main() {
    let win = Window {
        pad_top: 1,
        pad_right: 1,
        pad_bottom: 1,
        pad_left: 1,
        kh: 3,
        kw: 3,
        sh: 2,
        sw: 2,
        dh: 1,
        dw: 1,
    };
    let conv = Conv {
        kind: ConvKind::Conv,
        win,
        groups: 1,
        group_in: 3,
        group_out: 32,
        adjustment: (0, 0),
    };
    let w: Vec<f32> = (0..32 * 27).map(|i| (i % 11) as f32 * 0.05 - 0.2).collect();
    let bias = vec![0.1f32; 32];
    let cw = ConvWeights::new(conv, &w, Some(&bias), Some((0.0, 6.0))).unwrap();
    let (ih, iw) = (224, 224);
    let (oh, ow) = win.out_hw(ih, iw).unwrap();
    let x: Vec<f32> = (0..ih * iw * 3).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut out = vec![0.0f32; oh * ow * 32];
    let mut scratch = vec![0.0f32; cw.scratch_len(ih, iw).unwrap()];
    let mut run = || {
        cw.run(&INLINE, &x, 1, ih, iw, &mut out, oh, ow, &mut scratch, None)
            .unwrap()
    };
    if let Some(n) = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
    {
        for _ in 0..n {
            run();
        }
        return;
    }
    let mut best = f64::INFINITY;
    for _ in 0..50 {
        let t = Instant::now();
        run();
        best = best.min(t.elapsed().as_secs_f64());
    }
    let flops = 2.0 * (oh * ow * 32 * 27) as f64;
    println!(
        "conv 3->32 3x3 s2 224x224: {:7.1} us, {:5.1} GFLOP/s",
        best * 1e6,
        flops / best / 1e9
    );
}
