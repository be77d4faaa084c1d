//! The batched product over 4-bit blockwise weights (an 8da4w prefill's linear layers) on
//! SmolLM2-135M's layer shapes, `ROWS` prompt rows at a time: the time of one layer's seven
//! products, and the rate of `vpdpbusd`-sized steps (64 multiply-adds) it reaches. Median of
//! the passes, one thread.
//! `cargo run --release -p pteron-nhwc --example q4prefill [ROWS] [PASSES] [LAYERS] [avx2]`
//! (LAYERS 30: the model's 30 layers in turn, their int8 weights read from memory or L3 as in
//! a prefill; the time printed is per layer)

use std::time::Instant;

use pteron_core::INLINE;
use pteron_nhwc::quant::gemm::{qgemm, Epilogue, Out};

#[path = "common/q4layer.rs"]
mod q4layer;
use q4layer::{layer, Layer};

fn main() {
    let mut args = std::env::args().skip(1);
    let m: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(85);
    let passes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let layers: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    if args.next().as_deref() == Some("avx2") {
        pteron_kernels_cpu::cpu::set_max_level(pteron_kernels_cpu::cpu::Level::Avx2);
    }
    let (d, h, kv) = (576, 1536, 192);
    let model: Vec<Layer> = (0..layers)
        .flat_map(|l| {
            [(d, d), (d, kv), (d, kv), (d, d), (d, h), (d, h), (h, d)]
                .into_iter()
                .enumerate()
                .map(move |(i, (k, n))| layer(k, n, l * 7 + i))
        })
        .collect();
    let macs: usize = model.iter().map(|l| l.w.k * l.w.n * m).sum::<usize>() / layers;
    let a: Vec<u8> = (0..m * h).map(|i| (i * 7919 % 251) as u8).collect();
    let mut out = vec![0f32; m * h];
    let rows = vec![0.02f32; m];
    let zps: Vec<i32> = (0..m as i32).map(|i| i % 7 - 3).collect();
    let mut times = Vec::new();
    for _ in 0..passes {
        let t = Instant::now();
        for l in &model {
            let epi = Epilogue::Dequant {
                rows: &rows,
                zps: &zps,
                scale: &l.scale,
                bias: None,
                lo: f32::NEG_INFINITY,
                hi: f32::INFINITY,
            };
            let k = l.w.quads * 4;
            qgemm(
                &INLINE,
                &a[..m * k],
                k,
                m,
                &l.w,
                &epi,
                Out::F32(&mut out[..m * l.w.n]),
                l.w.n,
            )
            .unwrap();
        }
        times.push(t.elapsed().as_secs_f64() / layers as f64);
    }
    times.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let t = times[passes / 2];
    println!(
        "{m} rows: one layer's products {:.3} ms (spread {:.3}-{:.3}), {:.2} G 64-wide int8 steps/s",
        t * 1e3,
        times[0] * 1e3,
        times[passes - 1] * 1e3,
        macs as f64 / 64.0 / t / 1e9
    );
}
