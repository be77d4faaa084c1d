//! The one-row product over 4-bit blockwise weights (an 8da4w decode step's linear layers) on
//! SmolLM2-135M's shapes: every layer's weights in turn, as a decode step reads them (cold:
//! 30 layers of 7 products and the output layer, 72 MiB), against a streaming read of the
//! same bytes. Median of the passes.
//! `cargo run --release -p pteron-nhwc --example q4bench [PASSES] [LAYERS] [avx2]` (one
//! thread; LAYERS 0 is one 576 × 1536 product, 0.4 MiB, which stays in L2: the kernel's own
//! speed; `avx2` caps the kernels at AVX2, as on CPUs without AVX-512)

use std::time::Instant;

use pteron_core::INLINE;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};
use pteron_nhwc::quant::gemm::{qgemm, Epilogue, Out};

/// Sums the bytes as floats in eight vector accumulators (a read at the bandwidth).
struct StreamSum<'a>(&'a [f32]);

impl SimdOp for StreamSum<'_> {
    type Output = f32;
    #[inline(always)]
    fn run<S: Simd>(self, s: S) -> f32 {
        let l = S::LANES;
        let mut acc = [s.zero(); 8];
        for c in self.0.chunks_exact(8 * l) {
            for (v, a) in acc.iter_mut().enumerate() {
                *a = s.add(*a, s.ld(&c[v * l..]));
            }
        }
        let mut lanes = [0.0f32; 16];
        let mut t = 0.0;
        for a in acc {
            s.st(&mut lanes[..l], a);
            t += lanes[..l].iter().sum::<f32>();
        }
        t
    }
}

#[path = "common/q4layer.rs"]
mod q4layer;
use q4layer::layer;

fn main() {
    let mut args = std::env::args().skip(1);
    let passes = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let layers = args.next().and_then(|a| a.parse().ok()).unwrap_or(30);
    if args.next().as_deref() == Some("avx2") {
        pteron_kernels_cpu::cpu::set_max_level(pteron_kernels_cpu::cpu::Level::Avx2);
    }
    let (d, h, kv, vocab) = (576, 1536, 192, 49152);
    let mut model = Vec::new();
    for l in 0..layers {
        for (i, (k, n)) in [(d, d), (d, kv), (d, kv), (d, d), (d, h), (d, h), (h, d)]
            .into_iter()
            .enumerate()
        {
            model.push(layer(k, n, l * 7 + i));
        }
    }
    if layers == 0 {
        model.push(layer(d, h, 1));
    }
    if layers == 30 {
        model.push(layer(d, vocab, 999));
    }
    // Each product's streams lead on to the next one's, as a program's do.
    for pair in model.windows(2) {
        pair[0].w.link_stream().point_to(&pair[1].w);
    }
    // In L2 one product takes microseconds: repeat it to time it.
    let repeat = if layers == 0 { 1000 } else { 1 };
    let bytes: usize = repeat * model.iter().map(|l| l.w.k * l.w.n / 2).sum::<usize>();
    let raw = vec![0.5f32; bytes / 4 / repeat];
    let a: Vec<u8> = (0..h).map(|i| (i * 7919 % 251) as u8).collect();
    let mut out = vec![0f32; vocab];
    let (rows, zps) = ([0.02f32], [3i32]);
    let mut tg = Vec::new();
    let mut ts = Vec::new();
    let mut sink = 0.0;
    for _ in 0..passes {
        let t = Instant::now();
        for l in model.iter().cycle().take(repeat * model.len()) {
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
                &a[..k],
                k,
                1,
                &l.w,
                &epi,
                Out::F32(&mut out[..l.w.n]),
                l.w.n,
            )
            .unwrap();
        }
        tg.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        sink += run_op_at(level(), StreamSum(&raw));
        ts.push(t.elapsed().as_secs_f64());
    }
    tg.sort_by(|x, y| x.partial_cmp(y).unwrap());
    ts.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let (g, s) = (tg[passes / 2], ts[passes / 2]);
    println!(
        "{:.1} MiB of nibbles: products {:.2} ms ({:.1} GB/s, {:.0} steps/s, spread {:.2}-{:.2} ms) | stream read {:.2} ms ({:.1} GB/s) | products/stream {:.2} ({sink:.0})",
        bytes as f64 / (1 << 20) as f64,
        g * 1e3,
        bytes as f64 / g / 1e9,
        1.0 / g,
        tg[0] * 1e3,
        tg[passes - 1] * 1e3,
        s * 1e3,
        bytes as f64 / s / 1e9,
        g / s
    );
}
