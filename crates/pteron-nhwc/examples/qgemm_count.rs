//! One int8 requantizing product (a 1×1 convolution's: `M` pixels × `K` inputs × `N` outputs)
//! run `REPEAT` times, for instruction counts under QEMU (`tools/qemu-insn-count`): the count
//! of REPEAT = 3 less that of REPEAT = 1, halved, is one product's.
//! `cargo run --release -p pteron-nhwc --example qgemm_count -- M K N REPEAT`

use pteron_core::INLINE;
use pteron_nhwc::quant::gemm::{qgemm, Epilogue, Out, QWeights};

fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (m, k, n, repeat) = (arg(1, 12544), arg(2, 16), arg(3, 96), arg(4, 1));
    let w = QWeights::new(n, k, 0, |j, kk| ((j * 31 + kk * 7) % 255) as i8 - 127).unwrap();
    let kp = w.quads * 4;
    let a: Vec<u8> = (0..m * kp).map(|i| (i * 7919 % 256) as u8).collect();
    let bias: Vec<i32> = (0..n).map(|j| j as i32 * 11 - 300).collect();
    let scale: Vec<f32> = (0..n).map(|j| 0.001 + j as f32 * 1e-5).collect();
    let epi = Epilogue::Requant {
        bias: &bias,
        scale: &scale,
        zp: 3,
        qmin: -128,
        qmax: 127,
    };
    let mut out = vec![0i8; m * n];
    for _ in 0..repeat {
        qgemm(&INLINE, &a, kp, m, &w, &epi, Out::I8(&mut out), n).unwrap();
    }
    let check: i64 = out.iter().map(|&v| v as i64).sum();
    println!("{m}x{k}x{n}: checksum {check}");
}
