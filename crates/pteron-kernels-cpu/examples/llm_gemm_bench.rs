//! GFLOP/s of the GEMM on the linear shapes of a 110M Llama prefill (128 tokens, width 768):
//! activations read in place, packed weights cold (each product finds its weights out of the
//! caches, as in a network) except where the copy count is 1.
//! `cargo run --release -p pteron-kernels-cpu --example llm_gemm_bench [THREADS]`
//!
//! This host's speed drifts by up to 1.5× over seconds (other tenants): compare variants
//! within one process, or by the fastest of several runs.

use std::time::Instant;

use pteron::ThreadPool;
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedB};

fn rand_vec(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let pool = ThreadPool::new(threads).unwrap();
    println!(
        "{threads} thread(s), simd level {:?}",
        pteron_kernels_cpu::simd::level()
    );
    // (m, k, n, copies of the weights used in turn)
    for (m, k, n, copies) in [
        (128, 256, 128, 1),
        (128, 768, 768, 12),
        (128, 768, 2048, 8),
        (128, 2048, 768, 8),
        (128, 768, 32000, 1),
    ] {
        let a = rand_vec(m * k);
        let w = rand_vec(k * n);
        let pbs: Vec<PackedB> = (0..copies)
            .map(|_| PackedB::new(k, n, |kk, j| w[j * k + kk]))
            .collect();
        let mut c = vec![0.0; m * n];
        let epi = Epilogue {
            init: Init::Zero,
            affine: None,
            residual: None,
            clamp: None,
        };
        let reps = if n > 10_000 { 8 } else { 40 };
        let mut v = Vec::new();
        for it in 0..reps {
            let t = Instant::now();
            let b = MatB::Packed(&pbs[it % copies]);
            gemm(
                &pool,
                m,
                n,
                k,
                MatA::Rows { data: &a, lda: k },
                b,
                &mut c,
                n,
                &epi,
            )
            .unwrap();
            v.push(t.elapsed().as_secs_f64());
        }
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
        let gflops = |t: f64| 2.0 * (m * n * k) as f64 / t / 1e9;
        println!(
            "m{m:4} k{k:5} n{n:6} ({}): median {:8.1} us {:6.1} GFLOP/s, fastest {:6.1} GFLOP/s",
            if copies > 1 { "cold" } else { "warm" },
            v[reps / 2] * 1e6,
            gflops(v[reps / 2]),
            gflops(v[0])
        );
    }
}
