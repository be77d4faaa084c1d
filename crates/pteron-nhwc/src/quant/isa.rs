//! Compiling plain loops for the CPU's vector width, and the rounding that lets them vectorize.

/// Runs `f` compiled for the best instruction set this CPU has (so that its loops vectorize:
/// `f` and what it calls must inline into it, so callers mark the closure
/// `#[inline(always)]`; a closure left out of line keeps the baseline's instructions).
#[inline(always)]
pub(crate) fn multiversion<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        use pteron_kernels_cpu::simd::{level, Level};
        match level() {
            // Safety: `level()` reports only instruction sets the CPU has.
            Level::Avx512 => return unsafe { avx512(f) },
            // Safety: as above.
            Level::Avx2 => return unsafe { avx2(f) },
            Level::Portable | Level::Neon | Level::Simd128 => {}
        }
    }
    f()
}

/// Rounds to nearest even and converts, for |v| < 2²²: adding 1.5·2²³ rounds (in the
/// default rounding mode) and leaves the integer in the low mantissa bits. Integer-only after
/// the add, so loops of it vectorize (a float → int `as` cast does not, here).
#[inline(always)]
pub(crate) fn round_small(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    ((v + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32)
}
