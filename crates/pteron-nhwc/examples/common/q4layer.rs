//! An 8da4w linear layer of the 4-bit benchmarks (`q4bench`, `q4prefill`): synthetic weights
//! in -8..=7 with bf16 block scales in blocks of 32 inputs, as the recipe stores them.

use pteron_nhwc::quant::gemm::QWeights;

pub struct Layer {
    pub w: QWeights,
    pub scale: Vec<f32>,
}

/// A layer of `n` outputs over `k` inputs; `seed` varies the weights.
pub fn layer(k: usize, n: usize, seed: usize) -> Layer {
    const BLOCK: usize = 32;
    let mut w = QWeights::new_int4(n, k, BLOCK, |j, kk| {
        ((j * 31 + kk * 17 + seed) % 16) as i8 - 8
    })
    .unwrap();
    // bf16 values, as the 8da4w recipe stores them.
    let scale: Vec<f32> = (0..n * k / BLOCK)
        .map(|i| f32::from_bits((0.01f32 + (i % 97) as f32 * 1e-4).to_bits() & 0xFFFF_0000))
        .collect();
    w.set_block_scales(&scale).unwrap();
    Layer { w, scale }
}
