//! One-thread decode attention on SmolLM2-135M's shapes (9 heads, 3 kv heads of 64, a
//! 2048-row cache) as a decode step meets it: 30 layers' caches read in turn after a 96 MiB
//! flush, as the weights streamed through the caches since the last step; beside it, a plain
//! read of the same cache rows. Median of 60 passes.
//!
//!     cargo run --release -p pteron-kernels-cpu --example attn_cold [POS] [warm]
//!
//! `warm`: one layer's cache, no flush (the kernel's arithmetic with the rows in L2).

use std::time::Instant;

use pteron_core::INLINE;
use pteron_kernels::llm::Attn;
use pteron_kernels_cpu::aligned::AlignedVec;
use pteron_kernels_cpu::attention::attend_blocked;

fn main() {
    let mut args = std::env::args().skip(1);
    let pos: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(150);
    let warm = args.next().as_deref() == Some("warm");
    let (heads, kv_heads, d, rows) = (9, 3, 64, 2048);
    let layers = if warm { 1 } else { 30 };
    let at = Attn {
        batch: 1,
        q_len: 1,
        heads,
        kv_heads,
        dim: d,
        kv_rows: rows,
        num_keys: pos + 1,
        start: pos,
        causal: true,
        scale: 0.125,
    };
    let q: Vec<f32> = (0..heads * d)
        .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1)
        .collect();
    // From a 64-byte boundary, as a program's planned memory is.
    let cache = |l: usize, m: usize, c: usize| {
        let mut x = AlignedVec::zeroed(rows * kv_heads * d);
        for (i, v) in x.iter_mut().enumerate() {
            *v = (((i + l) * m % c) as f32 - 3.0) * 0.1;
        }
        x
    };
    let caches: Vec<(AlignedVec, AlignedVec)> = (0..layers)
        .map(|l| (cache(l, 5, 11), cache(l, 3, 7)))
        .collect();
    let flush = vec![1.0f32; if warm { 16 } else { 24 << 20 }];
    let mut out = vec![0.0; q.len()];
    let (mut times, mut reads) = (Vec::new(), Vec::new());
    let mut sink = 0.0;
    let used = (pos + 1) * kv_heads * d;
    for _ in 0..if warm { 20_000 } else { 60 } {
        sink += flush.iter().step_by(16).sum::<f32>();
        let t = Instant::now();
        for (k, v) in &caches {
            attend_blocked(&at, &INLINE, &q, k, v, None, &mut out).unwrap();
            sink += out[0];
        }
        times.push(t.elapsed().as_secs_f64() * 1e6 / layers as f64);
        sink += flush.iter().step_by(16).sum::<f32>();
        let t = Instant::now();
        for (k, v) in &caches {
            let mut acc = [0f32; 16];
            let (k, v) = (&k[..used], &v[..used]);
            for c in k.chunks_exact(16).chain(v.chunks_exact(16)) {
                for (a, x) in acc.iter_mut().zip(c) {
                    *a += x;
                }
            }
            sink += acc.iter().sum::<f32>();
        }
        reads.push(t.elapsed().as_secs_f64() * 1e6 / layers as f64);
    }
    let median = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let (att, read) = (median(&mut times), median(&mut reads));
    let bytes = 2 * used * 4;
    println!(
        "position {pos}: attention {att:.2} µs a layer ({:.1} GB/s of cache rows), \
         plain read of the rows {read:.2} µs ({:.1} GB/s)  [{sink}]",
        bytes as f64 / att / 1e3,
        bytes as f64 / read / 1e3
    );
}
