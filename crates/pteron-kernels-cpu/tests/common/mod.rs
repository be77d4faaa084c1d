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
        if cfg!(target_family = "wasm") {
            // No threads here (wasm32 without atomics): the same ranges, one after another.
            (0..n).for_each(|i| f(i..i + 1));
            return;
        }
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
    let best = pteron_kernels_cpu::simd::with_level(Level::Avx512, pteron_kernels_cpu::simd::level);
    Level::all()
        .iter()
        .copied()
        .filter(|l| l.tier() <= best.tier())
        .collect()
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

use pteron_core::testing::TestCall;

/// Runs `op` from the portable registry and from the cpu registry on two identical calls made
/// by `build` (which returns the argument positions of the outputs to compare), and checks
/// that every float32 output agrees within `atol + rtol·|want|` (NaN matches NaN).
pub fn check_against_portable(
    op: &str,
    par: &dyn Parallel,
    atol: f32,
    rtol: f32,
    build: &dyn Fn(&mut TestCall) -> Vec<usize>,
) {
    let portable = pteron_kernels::registry();
    let cpu = pteron_kernels_cpu::registry();
    let (mut a, mut b) = (TestCall::new(), TestCall::new());
    let outs = build(&mut a);
    build(&mut b);
    a.run_kernel(
        op,
        portable.get(op).expect("portable kernel"),
        &pteron_core::INLINE,
    )
    .unwrap_or_else(|e| panic!("{op}: portable: {e}"));
    b.run_kernel(op, cpu.get(op).expect("cpu kernel"), par)
        .unwrap_or_else(|e| panic!("{op}: cpu: {e}"));
    for &o in &outs {
        assert_eq!(
            a.info(o).sizes(),
            b.info(o).sizes(),
            "{op}: output {o} sizes"
        );
        let (want, got) = (a.output::<f32>(o), b.output::<f32>(o));
        assert_close(&got, &want, atol, rtol, &format!("{op} output {o}"));
    }
}
