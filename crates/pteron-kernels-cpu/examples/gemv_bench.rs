//! GB/s of the one-row product (a decode step's linear layers) on a 42M Llama's shapes, the
//! weights cold (copies cycled through more bytes than the last-level cache holds), beside a
//! plain streaming read of the same bytes (the bound one thread reaches).
//! `cargo run --release -p pteron-kernels-cpu --example gemv_bench [THREADS] [MB]`
//!
//! Compare variants within one process, or by the fastest of several runs: a shared host's
//! bandwidth drifts.

use std::time::Instant;

use pteron::ThreadPool;
use pteron_kernels_cpu::gemm::{gemm, Epilogue, MatA, MatB, PackedB};
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

fn rand_vec(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

/// Sums every float of `w` in eight vector accumulators at the widest SIMD level (what a
/// read at the bandwidth costs).
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

fn stream_sum(w: &[f32]) -> f32 {
    run_op_at(level(), StreamSum(w))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let threads = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let total_mb: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(512);
    let pool = ThreadPool::new(threads).unwrap();
    println!(
        "{threads} thread(s), simd level {:?}, {total_mb} MB of weights cycled",
        pteron_kernels_cpu::simd::level()
    );
    for (k, n) in [
        (512, 512),
        (512, 1376),
        (1376, 512),
        (512, 32000),
        (576, 1536),
    ] {
        let bytes = k * n * 4;
        let copies = (total_mb << 20).div_ceil(bytes).max(1);
        let w = rand_vec(k * n);
        let pbs: Vec<PackedB> = (0..copies)
            .map(|_| PackedB::new(k, n, |kk, j| w[j * k + kk]))
            .collect();
        let raw: Vec<Vec<f32>> = (0..copies).map(|_| w.clone()).collect();
        let a = rand_vec(k);
        let mut c = vec![0.0; n];
        let epi = Epilogue::default();
        let reps = copies * 4;
        let (mut tg, mut ts) = (Vec::new(), Vec::new());
        let mut sink = 0.0;
        for it in 0..reps {
            let t = Instant::now();
            gemm(
                &pool,
                1,
                n,
                k,
                MatA::Rows { data: &a, lda: k },
                MatB::Packed(&pbs[it % copies]),
                &mut c,
                n,
                &epi,
            )
            .unwrap();
            tg.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            sink += stream_sum(&raw[it % copies]);
            ts.push(t.elapsed().as_secs_f64());
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|x, y| x.partial_cmp(y).unwrap());
            v[v.len() / 2]
        };
        let (g, s) = (med(&mut tg), med(&mut ts));
        let gbs = |t: f64| bytes as f64 / t / 1e9;
        println!(
            "k{k:5} n{n:6} ({copies:3} copies): gemv {:7.1} us {:5.1} GB/s | stream read {:7.1} us {:5.1} GB/s | gemv/stream {:.2} ({sink:.0})",
            g * 1e6,
            gbs(g),
            s * 1e6,
            gbs(s),
            g / s
        );
    }
}
