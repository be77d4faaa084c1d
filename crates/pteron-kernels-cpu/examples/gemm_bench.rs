//! GFLOP/s of the GEMM on the shapes of MiniLM's linears and MobileNetV2's 1×1 convolutions.
//! `cargo run --release -p pteron-kernels-cpu --example gemm_bench [THREADS [cold]]`

use std::time::Instant;

use pteron::ThreadPool;
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedA, PackedB};

fn rand_vec(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

fn time(mut f: impl FnMut()) -> f64 {
    f();
    let mut v = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        f();
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[0]
}

fn main() {
    let threads = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    // `gemm_bench THREADS cold`: filters and outputs out of the caches (the linear shapes).
    let cold = std::env::args().nth(2).is_some_and(|a| a == "cold");
    let pool = ThreadPool::new(threads).unwrap();
    println!("{threads} thread(s)");
    println!("simd level {:?}", pteron_kernels_cpu::simd::level());
    // Linear: A = activations (rows), B = packed weights.
    for (m, k, n) in [
        (128, 384, 384),
        (128, 384, 1536),
        (128, 1536, 384),
        (1, 1280, 1000),
        // MobileNetV2's 1×1 convolutions in NHWC (the XNNPACK path): pixels × channels.
        // (The first, 27 = 3×3×3 deep, is the first layer's im2col.)
        (12544, 27, 32),
        (12544, 32, 16),
        (12544, 16, 96),
        (3136, 96, 24),
        (3136, 24, 144),
        (3136, 144, 24),
        (784, 144, 32),
        (784, 32, 192),
        (784, 192, 32),
        (196, 192, 64),
        (196, 64, 384),
        (196, 384, 64),
        (196, 384, 96),
        (196, 96, 576),
        (196, 576, 96),
        (49, 576, 160),
        (49, 160, 960),
        (49, 960, 160),
        (49, 960, 320),
        (49, 320, 1280),
    ] {
        let a = rand_vec(m * k);
        let w = rand_vec(k * n);
        // `COPIES` filters and outputs used in turn: with `cold`, each product finds its
        // filter and output out of the caches, as a layer of a network does.
        let copies = if cold { 24 } else { 1 };
        let pbs: Vec<PackedB> = (0..copies)
            .map(|_| PackedB::new(k, n, |kk, j| w[j * k + kk]))
            .collect();
        let bias = rand_vec(n);
        let mut cs = vec![vec![0.0; m * n]; copies];
        let mut it = 0;
        let t = time(|| {
            it += 1;
            let i = it % copies;
            gemm(
                &pool,
                m,
                n,
                k,
                MatA::Rows { data: &a, lda: k },
                MatB::Packed(&pbs[i]),
                &mut cs[i],
                n,
                &Epilogue {
                    init: Init::ColBias(&bias),
                    affine: None,
                    residual: None,
                    clamp: None,
                },
            )
            .unwrap()
        });
        println!(
            "linear m{m:5} k{k:5} n{n:5}: {:8.1} us {:6.1} GFLOP/s",
            t * 1e6,
            2.0 * (m * n * k) as f64 / t / 1e9
        );
    }
    // 1x1 conv: A = packed weights, B = activations (rows).
    for (m, k, n) in [
        (32, 27, 12544),
        (96, 16, 12544),
        (576, 96, 196),
        (96, 576, 196),
        (320, 960, 49),
        (24, 96, 3136),
        (24, 144, 3136),
        (144, 24, 3136),
        (32, 192, 784),
        (64, 384, 196),
        (960, 160, 49),
        (160, 960, 49),
        (1280, 320, 49),
    ] {
        let w = rand_vec(m * k);
        let pa = PackedA::new(m, k, |i, kk| w[i * k + kk]);
        let x = rand_vec(k * n);
        let bias = rand_vec(m);
        let mut c = vec![0.0; m * n];
        let t = time(|| {
            gemm(
                &pool,
                m,
                n,
                k,
                MatA::Packed(&pa),
                MatB::Rows { data: &x, ldb: n },
                &mut c,
                n,
                &Epilogue {
                    init: Init::RowBias(&bias),
                    affine: None,
                    residual: None,
                    clamp: Some((0.0, 6.0)),
                },
            )
            .unwrap()
        });
        let t2 = time(|| {
            gemm(
                &pool,
                m,
                n,
                k,
                MatA::Rows { data: &w, lda: k },
                MatB::Rows { data: &x, ldb: n },
                &mut c,
                n,
                &Epilogue {
                    init: Init::RowBias(&bias),
                    affine: None,
                    residual: None,
                    clamp: Some((0.0, 6.0)),
                },
            )
            .unwrap()
        });
        println!(
            "conv1x1 m{m:5} k{k:5} n{n:5}: {:8.1} us {:6.1} GFLOP/s; A in place {:8.1} us",
            t * 1e6,
            2.0 * (m * n * k) as f64 / t / 1e9,
            t2 * 1e6
        );
    }
}
