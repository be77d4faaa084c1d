//! Shared test helpers: random data and a simple thread-per-call `Parallel`.
#![allow(dead_code)]

use std::ops::Range;

use pteron_core::Parallel;

/// Deterministic pseudo-random floats in [-1, 1).
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs the tasks on `n` scoped threads per call (tests only; allocates).
pub struct Scoped(pub usize);

impl Parallel for Scoped {
    fn num_threads(&self) -> usize {
        self.0
    }
    fn parallel_for(&self, n: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        let t = self.0.max(1);
        std::thread::scope(|s| {
            for k in 0..t {
                let r = n * k / t..n * (k + 1) / t;
                if !r.is_empty() {
                    s.spawn(move || {
                        // Split further to exercise ranges of one task.
                        for i in r {
                            f(i..i + 1)
                        }
                    });
                }
            }
        });
    }
}

/// Every SIMD level this CPU has.
pub fn levels() -> Vec<pteron_kernels_cpu::simd::Level> {
    use pteron_kernels_cpu::simd::Level;
    let mut v = vec![Level::Portable];
    let best = pteron_kernels_cpu::simd::with_level(Level::Avx512, pteron_kernels_cpu::simd::level);
    if best >= Level::Avx2 {
        v.push(Level::Avx2);
    }
    if best >= Level::Avx512 {
        v.push(Level::Avx512);
    }
    v
}

pub fn assert_close(got: &[f32], want: &[f32], atol: f32, rtol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else {
            (g - w).abs() <= atol + rtol * w.abs() || g == w
        };
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}
