//! Blocked attention vs the reference on Whisper-tiny encoder and decoder shapes.
//!
//!     cargo run --release -p pteron-kernels-cpu --example attn_bench

use std::time::Instant;

use pteron_core::INLINE;
use pteron_kernels::llm::{attend_f32, Attn};
use pteron_kernels_cpu::attention::attend_blocked;

fn best_ms(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    for (name, q_len, kv, start, causal, heads, kv_heads) in [
        ("encoder 1500x1500", 1500, 1500, 0, false, 6, 6),
        ("cross 1x1500", 1, 1500, 1499, false, 6, 6),
        ("prefill 128 causal", 128, 128, 0, true, 6, 6),
        ("llama decode at 200 (12 heads)", 1, 1024, 200, true, 12, 12),
        // SmolLM2-135M's decode: grouped-query attention, 150 keys of a 2048-row cache.
        (
            "smollm2 decode at 150 (9 heads, 3 kv)",
            1,
            2048,
            149,
            true,
            9,
            3,
        ),
    ] {
        let width = heads * 64;
        let kv_width = kv_heads * 64;
        let at = Attn {
            batch: 1,
            q_len,
            heads,
            kv_heads,
            dim: 64,
            kv_rows: kv,
            num_keys: start + q_len,
            start,
            causal,
            scale: 0.125,
        };
        let q: Vec<f32> = (0..q_len * width)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
            .collect();
        let k: Vec<f32> = (0..kv * kv_width)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1)
            .collect();
        let mut out = vec![0.0; q.len()];
        let flop = 4.0 * (q_len * heads) as f64 * (start + q_len) as f64 * 64.0;
        let reps = if q_len > 1000 { 3 } else { 200 };
        let fast = best_ms(reps, || {
            attend_blocked(&at, &INLINE, &q, &k, &k, None, &mut out).unwrap()
        });
        let slow = best_ms(reps.min(3), || {
            attend_f32(&at, &INLINE, &q, &k, &k, None, &mut out).unwrap()
        });
        println!(
            "{name}: blocked {fast:.4} ms ({:.1} GFLOP/s), reference {slow:.4} ms",
            flop / fast / 1e6
        );
    }
}
