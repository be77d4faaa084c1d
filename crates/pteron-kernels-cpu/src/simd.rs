//! A small SIMD layer: one generic kernel body, instantiated per instruction set.
//!
//! [`Simd`] is implemented by zero-sized *tokens*: [`Avx512`] and [`Avx2`] (x86-64),
//! [`Neon`] (aarch64) and `Simd128` (WebAssembly built with `+simd128`) can only be made through `new()`, which checks at run time that the CPU
//! has the features, so holding a token proves its intrinsics may run; [`Portable`] works
//! everywhere (arrays the compiler vectorizes
//! for the baseline target). Kernels are written once as `#[inline(always)]` generic functions
//! over `S: Simd` and entered through [`dispatch!`], which calls the body from a
//! `#[target_feature]` function so that everything inlines into code compiled for that ISA.
//!
//! Arithmetic methods are safe (the token proves support); loads and stores through raw
//! pointers are `unsafe` (the caller guarantees the pointed-to lanes are in bounds), and the
//! slice forms check lengths.

use std::cell::Cell;

pub use crate::cpu::Level;

thread_local! {
    static OVERRIDE: Cell<u8> = const { Cell::new(0) };
}

/// Runs `f` with kernels on this thread using at most level `l` (tests of every path), and
/// at most the process's cap ([`crate::cpu::set_max_level`]).
pub fn with_level<R>(l: Level, f: impl FnOnce() -> R) -> R {
    let l = crate::cpu::max_level().lower(l);
    let old = OVERRIDE.with(|o| o.replace(l as u8));
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let _restore = Restore(old);
    f()
}

/// The best level this CPU supports, lowered by [`crate::cpu::set_max_level`] for the
/// process, or by [`with_level`] on this thread.
pub fn level() -> Level {
    let o = OVERRIDE.with(|o| o.get());
    if o != 0 {
        return from_u8(o);
    }
    crate::cpu::max_level()
}

fn from_u8(v: u8) -> Level {
    match v {
        5 => Level::Simd128,
        4 => Level::Neon,
        3 => Level::Avx512,
        2 => Level::Avx2,
        _ => Level::Portable,
    }
}

/// One instruction set's f32 vectors.
pub trait Simd: Copy + Send + Sync + 'static {
    const LANES: usize;
    type V: Copy;

    fn splat(self, x: f32) -> Self::V;
    fn zero(self) -> Self::V {
        self.splat(0.0)
    }
    /// # Safety
    /// `p..p + LANES` must be readable.
    unsafe fn load(self, p: *const f32) -> Self::V;
    /// # Safety
    /// `p..p + LANES` must be writable.
    unsafe fn store(self, p: *mut f32, v: Self::V);
    /// The first `n < LANES` lanes from `p`, the rest zero.
    /// # Safety
    /// `p..p + n` must be readable.
    unsafe fn load_partial(self, p: *const f32, n: usize) -> Self::V;
    /// Stores the first `n < LANES` lanes.
    /// # Safety
    /// `p..p + n` must be writable.
    unsafe fn store_partial(self, p: *mut f32, v: Self::V, n: usize);

    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;
    fn div(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c` (fused where the ISA has it).
    fn fma(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `if a < b { a } else { b }` per lane: `b` when either is NaN or both are zeros (x86
    /// `minps`; `math::clamp` relies on it).
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// `if a > b { a } else { b }` per lane: `b` when either is NaN or both are zeros (x86
    /// `maxps`; `math::clamp` relies on it).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    fn abs(self, a: Self::V) -> Self::V;
    /// Round to nearest integer (ties to even).
    fn round(self, a: Self::V) -> Self::V;
    /// `a * 2^n` for integral `n` in [-252, 254].
    fn ldexp(self, a: Self::V, n: Self::V) -> Self::V;
    /// `if a < b { x } else { y }` per lane (false when either is NaN).
    fn select_lt(self, a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// `if a <= b { x } else { y }` per lane (false when either is NaN).
    fn select_le(self, a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// `a` with the sign of `s`.
    fn copysign(self, a: Self::V, s: Self::V) -> Self::V;
    fn reduce_add(self, a: Self::V) -> f32;
    /// `LANES` horizontal sums at once: lane `k` is `reduce_add(a[k])`, bit for bit (the
    /// same additions in the same tree), for `a` of `LANES` vectors.
    #[inline(always)]
    fn reduce_add_each(self, a: &[Self::V]) -> Self::V {
        let mut lanes = [0.0f32; 16];
        for (x, v) in lanes.iter_mut().zip(&a[..Self::LANES]) {
            *x = self.reduce_add(*v);
        }
        self.ld(&lanes)
    }
    fn reduce_max(self, a: Self::V) -> f32;
    /// The even and the odd elements of the `2 * LANES` elements `a, b`.
    fn deinterleave(self, a: Self::V, b: Self::V) -> (Self::V, Self::V);

    /// This token's level.
    const LEVEL: Level;

    /// Runs `op` inside a function compiled for this instruction set. Generic SIMD code reached
    /// through a `dyn` call (a task handed to [`pteron_core::Parallel`]) must re-enter through
    /// this, or it is compiled without the ISA's features and every intrinsic becomes a call.
    fn enter<O: SimdOp>(self, op: O) -> O::Output;

    /// Loads the first `LANES` elements of `s`.
    #[inline(always)]
    fn ld(self, s: &[f32]) -> Self::V {
        assert!(s.len() >= Self::LANES);
        // Safety: just checked that LANES elements are readable.
        unsafe { self.load(s.as_ptr()) }
    }
    /// Stores into the first `LANES` elements of `s`.
    #[inline(always)]
    fn st(self, s: &mut [f32], v: Self::V) {
        assert!(s.len() >= Self::LANES);
        // Safety: just checked that LANES elements are writable.
        unsafe { self.store(s.as_mut_ptr(), v) }
    }
    /// Loads `s` (shorter than `LANES`), zero-filled.
    #[inline(always)]
    fn ld_tail(self, s: &[f32]) -> Self::V {
        let n = s.len().min(Self::LANES);
        if n == Self::LANES {
            return self.ld(s);
        }
        // Safety: `n <= s.len()` elements are read.
        unsafe { self.load_partial(s.as_ptr(), n) }
    }
    /// Stores the first `s.len()` (< `LANES`) lanes of `v` into `s`.
    #[inline(always)]
    fn st_tail(self, s: &mut [f32], v: Self::V) {
        let n = s.len().min(Self::LANES);
        if n == Self::LANES {
            return self.st(s, v);
        }
        // Safety: `n <= s.len()` elements are written.
        unsafe { self.store_partial(s.as_mut_ptr(), v, n) }
    }
}

/// A SIMD computation: `run` is instantiated per instruction set and called from a function
/// compiled for it. Implementations must mark `run` `#[inline(always)]`, so that it and the
/// generic code it calls (also `#[inline(always)]`) inline into that function.
pub trait SimdOp {
    type Output;
    fn run<S: Simd>(self, s: S) -> Self::Output;
}

/// Runs `op` with the best instruction set of this thread's [`level`].
#[inline]
pub fn run_op<O: SimdOp>(op: O) -> O::Output {
    run_op_at(level(), op)
}

/// Runs `op` with instruction set `l` (at most what the CPU has).
#[inline]
pub fn run_op_at<O: SimdOp>(l: Level, op: O) -> O::Output {
    match l {
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => match Avx512::new() {
            Some(s) => s.enter(op),
            None => op.run(Portable),
        },
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => match Avx2::new() {
            Some(s) => s.enter(op),
            None => op.run(Portable),
        },
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        Level::Neon => match Neon::new() {
            Some(s) => s.enter(op),
            None => op.run(Portable),
        },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => op.run(Simd128::new()),
        _ => op.run(Portable),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
unsafe fn enter_avx512<O: SimdOp>(s: Avx512, op: O) -> O::Output {
    op.run(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn enter_avx2<O: SimdOp>(s: Avx2, op: O) -> O::Output {
    op.run(s)
}

/// Portable vectors: arrays of 8 lanes, vectorized by the compiler for the baseline target.
#[derive(Clone, Copy, Debug, Default)]
pub struct Portable;

type A8 = [f32; 8];

#[inline(always)]
fn map2(a: A8, b: A8, f: impl Fn(f32, f32) -> f32) -> A8 {
    let mut r = [0.0; 8];
    for i in 0..8 {
        r[i] = f(a[i], b[i]);
    }
    r
}

impl Simd for Portable {
    const LANES: usize = 8;
    type V = A8;
    const LEVEL: Level = Level::Portable;
    #[inline(always)]
    fn enter<O: SimdOp>(self, op: O) -> O::Output {
        op.run(self)
    }
    #[inline(always)]
    fn splat(self, x: f32) -> A8 {
        [x; 8]
    }
    #[inline(always)]
    unsafe fn load(self, p: *const f32) -> A8 {
        // Safety: the caller guarantees 8 readable lanes.
        unsafe { core::ptr::read_unaligned(p as *const A8) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32, v: A8) {
        // Safety: the caller guarantees 8 writable lanes.
        unsafe { core::ptr::write_unaligned(p as *mut A8, v) }
    }
    #[inline(always)]
    unsafe fn load_partial(self, p: *const f32, n: usize) -> A8 {
        let mut v = [0.0; 8];
        for (i, x) in v.iter_mut().enumerate().take(n.min(8)) {
            // Safety: the caller guarantees `n` readable lanes.
            *x = unsafe { *p.add(i) };
        }
        v
    }
    #[inline(always)]
    unsafe fn store_partial(self, p: *mut f32, v: A8, n: usize) {
        for (i, x) in v.iter().enumerate().take(n.min(8)) {
            // Safety: the caller guarantees `n` writable lanes.
            unsafe { *p.add(i) = *x };
        }
    }
    #[inline(always)]
    fn add(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| x + y)
    }
    #[inline(always)]
    fn sub(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| x - y)
    }
    #[inline(always)]
    fn mul(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| x * y)
    }
    #[inline(always)]
    fn div(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| x / y)
    }
    #[inline(always)]
    fn fma(self, a: A8, b: A8, c: A8) -> A8 {
        let mut r = [0.0; 8];
        for i in 0..8 {
            r[i] = a[i] * b[i] + c[i];
        }
        r
    }
    #[inline(always)]
    fn min(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| if x < y { x } else { y })
    }
    #[inline(always)]
    fn max(self, a: A8, b: A8) -> A8 {
        map2(a, b, |x, y| if x > y { x } else { y })
    }
    #[inline(always)]
    fn abs(self, a: A8) -> A8 {
        a.map(f32::abs)
    }
    #[inline(always)]
    fn round(self, a: A8) -> A8 {
        a.map(|x| {
            // Round half to even without libm: add and subtract 1.5 * 2^23.
            let big = 12_582_912.0f32;
            if x.abs() < 4_194_304.0 {
                (x + big) - big
            } else {
                x
            }
        })
    }
    #[inline(always)]
    fn ldexp(self, a: A8, n: A8) -> A8 {
        map2(a, n, |x, e| {
            // 2^e as 2^h · 2^(e−h), h = e/2, so that e up to 254 stays in range.
            let e = e as i32;
            let h = e >> 1;
            let p1 = f32::from_bits(((h + 127) as u32) << 23);
            let p2 = f32::from_bits(((e - h + 127) as u32) << 23);
            x * p1 * p2
        })
    }
    #[inline(always)]
    fn select_lt(self, a: A8, b: A8, x: A8, y: A8) -> A8 {
        let mut r = y;
        for i in 0..8 {
            if a[i] < b[i] {
                r[i] = x[i];
            }
        }
        r
    }
    #[inline(always)]
    fn select_le(self, a: A8, b: A8, x: A8, y: A8) -> A8 {
        let mut r = y;
        for i in 0..8 {
            if a[i] <= b[i] {
                r[i] = x[i];
            }
        }
        r
    }
    #[inline(always)]
    fn copysign(self, a: A8, s: A8) -> A8 {
        map2(a, s, f32::copysign)
    }
    #[inline(always)]
    fn reduce_add(self, a: A8) -> f32 {
        ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))
    }
    #[inline(always)]
    fn reduce_max(self, a: A8) -> f32 {
        a.iter().copied().fold(f32::NEG_INFINITY, f32::max)
    }
    #[inline(always)]
    fn deinterleave(self, a: A8, b: A8) -> (A8, A8) {
        let at = |i: usize| if i < 8 { a[i] } else { b[i - 8] };
        (
            [at(0), at(2), at(4), at(6), at(8), at(10), at(12), at(14)],
            [at(1), at(3), at(5), at(7), at(9), at(11), at(13), at(15)],
        )
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Simd, SimdOp};
    use core::arch::x86_64::*;

    /// AVX-512F (with VL/DQ) token: 16 lanes.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx512(());

    impl Avx512 {
        pub fn new() -> Option<Self> {
            crate::cpu::features().avx512.then_some(Avx512(()))
        }
    }

    #[inline(always)]
    fn mask16(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }

    // Safety (every `unsafe` block in this impl): the token exists only when `new` found the
    // features these intrinsics need; pointer arguments follow the trait's contracts.
    impl Simd for Avx512 {
        const LANES: usize = 16;
        type V = __m512;
        const LEVEL: super::Level = super::Level::Avx512;
        #[inline(always)]
        fn enter<O: SimdOp>(self, op: O) -> O::Output {
            // Safety: see the impl comment.
            unsafe { super::enter_avx512(self, op) }
        }
        #[inline(always)]
        fn splat(self, x: f32) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: __m512) {
            // Safety: see the impl comment.
            unsafe { _mm512_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn load_partial(self, p: *const f32, n: usize) -> __m512 {
            // Safety: masked-off lanes are not accessed.
            unsafe { _mm512_maskz_loadu_ps(mask16(n), p) }
        }
        #[inline(always)]
        unsafe fn store_partial(self, p: *mut f32, v: __m512, n: usize) {
            // Safety: masked-off lanes are not accessed.
            unsafe { _mm512_mask_storeu_ps(p, mask16(n), v) }
        }
        #[inline(always)]
        fn add(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_mul_ps(a, b) }
        }
        #[inline(always)]
        fn div(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_div_ps(a, b) }
        }
        #[inline(always)]
        fn fma(self, a: __m512, b: __m512, c: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn min(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_min_ps(a, b) }
        }
        #[inline(always)]
        fn max(self, a: __m512, b: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_max_ps(a, b) }
        }
        #[inline(always)]
        fn abs(self, a: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_abs_ps(a) }
        }
        #[inline(always)]
        fn round(self, a: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn ldexp(self, a: __m512, n: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe { _mm512_scalef_ps(a, n) }
        }
        #[inline(always)]
        fn select_lt(self, a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe {
                let m = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b);
                _mm512_mask_blend_ps(m, y, x)
            }
        }
        #[inline(always)]
        fn select_le(self, a: __m512, b: __m512, x: __m512, y: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe {
                let m = _mm512_cmp_ps_mask::<_CMP_LE_OQ>(a, b);
                _mm512_mask_blend_ps(m, y, x)
            }
        }
        #[inline(always)]
        fn copysign(self, a: __m512, s: __m512) -> __m512 {
            // Safety: see the impl comment.
            unsafe {
                let sign = _mm512_set1_epi32(i32::MIN);
                let r = _mm512_or_si512(
                    _mm512_andnot_si512(sign, _mm512_castps_si512(a)),
                    _mm512_and_si512(sign, _mm512_castps_si512(s)),
                );
                _mm512_castsi512_ps(r)
            }
        }
        #[inline(always)]
        fn reduce_add(self, a: __m512) -> f32 {
            // Safety: see the impl comment.
            unsafe { _mm512_reduce_add_ps(a) }
        }
        /// `_mm512_reduce_add_ps`'s tree (`x[i] + x[i+8]`, then `+4`, `+2`, `+1`) on 16
        /// vectors at once, two vectors' halves per addition; the last step leaves key k
        /// in lane 4·(k mod 4) + k / 4, put back in order by one permutation.
        #[inline(always)]
        fn reduce_add_each(self, a: &[__m512]) -> __m512 {
            let a = &a[..16];
            // Safety: see the impl comment. (Plain loops: a closure would be compiled without
            // the target features, and the intrinsics in it called, not inlined.)
            unsafe {
                let mut t = [_mm512_setzero_ps(); 8];
                for m in 0..8 {
                    let (x, y) = (a[2 * m], a[2 * m + 1]);
                    t[m] = _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0x44>(x, y),
                        _mm512_shuffle_f32x4::<0xEE>(x, y),
                    );
                }
                let mut u = [_mm512_setzero_ps(); 4];
                for m in 0..4 {
                    let (x, y) = (t[2 * m], t[2 * m + 1]);
                    u[m] = _mm512_add_ps(
                        _mm512_shuffle_f32x4::<0x88>(x, y),
                        _mm512_shuffle_f32x4::<0xDD>(x, y),
                    );
                }
                let mut w = [_mm512_setzero_ps(); 2];
                for m in 0..2 {
                    let (x, y) = (u[2 * m], u[2 * m + 1]);
                    w[m] = _mm512_add_ps(
                        _mm512_shuffle_ps::<0x44>(x, y),
                        _mm512_shuffle_ps::<0xEE>(x, y),
                    );
                }
                let r = _mm512_add_ps(
                    _mm512_shuffle_ps::<0x88>(w[0], w[1]),
                    _mm512_shuffle_ps::<0xDD>(w[0], w[1]),
                );
                let idx = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
                _mm512_permutexvar_ps(idx, r)
            }
        }
        #[inline(always)]
        fn reduce_max(self, a: __m512) -> f32 {
            // Safety: see the impl comment.
            unsafe { _mm512_reduce_max_ps(a) }
        }
        #[inline(always)]
        fn deinterleave(self, a: __m512, b: __m512) -> (__m512, __m512) {
            // Safety: see the impl comment.
            unsafe {
                let even =
                    _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
                let odd =
                    _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
                (
                    _mm512_permutex2var_ps(a, even, b),
                    _mm512_permutex2var_ps(a, odd, b),
                )
            }
        }
    }

    /// AVX2 + FMA token: 8 lanes.
    #[derive(Clone, Copy, Debug)]
    pub struct Avx2(());

    impl Avx2 {
        pub fn new() -> Option<Self> {
            crate::cpu::features().avx2_fma.then_some(Avx2(()))
        }
    }

    static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

    #[inline(always)]
    fn mask8(n: usize) -> __m256i {
        let n = n.min(8);
        // Safety: `8 - n + 8 <= 16` elements of MASKS are read.
        unsafe { _mm256_loadu_si256(MASKS.as_ptr().add(8 - n) as *const __m256i) }
    }

    // Safety (every `unsafe` block in this impl): the token exists only when `new` found the
    // features these intrinsics need; pointer arguments follow the trait's contracts.
    impl Simd for Avx2 {
        const LANES: usize = 8;
        type V = __m256;
        const LEVEL: super::Level = super::Level::Avx2;
        #[inline(always)]
        fn enter<O: SimdOp>(self, op: O) -> O::Output {
            // Safety: see the impl comment.
            unsafe { super::enter_avx2(self, op) }
        }
        #[inline(always)]
        fn splat(self, x: f32) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_set1_ps(x) }
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_loadu_ps(p) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: __m256) {
            // Safety: see the impl comment.
            unsafe { _mm256_storeu_ps(p, v) }
        }
        #[inline(always)]
        unsafe fn load_partial(self, p: *const f32, n: usize) -> __m256 {
            // Safety: masked-off lanes are not accessed.
            unsafe { _mm256_maskload_ps(p, mask8(n)) }
        }
        #[inline(always)]
        unsafe fn store_partial(self, p: *mut f32, v: __m256, n: usize) {
            // Safety: masked-off lanes are not accessed.
            unsafe { _mm256_maskstore_ps(p, mask8(n), v) }
        }
        #[inline(always)]
        fn add(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_add_ps(a, b) }
        }
        #[inline(always)]
        fn sub(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_sub_ps(a, b) }
        }
        #[inline(always)]
        fn mul(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_mul_ps(a, b) }
        }
        #[inline(always)]
        fn div(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_div_ps(a, b) }
        }
        #[inline(always)]
        fn fma(self, a: __m256, b: __m256, c: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_fmadd_ps(a, b, c) }
        }
        #[inline(always)]
        fn min(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_min_ps(a, b) }
        }
        #[inline(always)]
        fn max(self, a: __m256, b: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_max_ps(a, b) }
        }
        #[inline(always)]
        fn abs(self, a: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_andnot_ps(_mm256_set1_ps(-0.0), a) }
        }
        #[inline(always)]
        fn round(self, a: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a) }
        }
        #[inline(always)]
        fn ldexp(self, a: __m256, n: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe {
                // 2^n as 2^h · 2^(n−h), h = n/2, so that n up to 254 stays in range.
                let e = _mm256_cvtps_epi32(n);
                let h = _mm256_srai_epi32::<1>(e);
                let bias = _mm256_set1_epi32(127);
                let p1 = _mm256_slli_epi32::<23>(_mm256_add_epi32(h, bias));
                let p2 = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_sub_epi32(e, h), bias));
                _mm256_mul_ps(
                    _mm256_mul_ps(a, _mm256_castsi256_ps(p1)),
                    _mm256_castsi256_ps(p2),
                )
            }
        }
        #[inline(always)]
        fn select_lt(self, a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)) }
        }
        #[inline(always)]
        fn select_le(self, a: __m256, b: __m256, x: __m256, y: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe { _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LE_OQ>(a, b)) }
        }
        #[inline(always)]
        fn copysign(self, a: __m256, s: __m256) -> __m256 {
            // Safety: see the impl comment.
            unsafe {
                let sign = _mm256_set1_ps(-0.0);
                _mm256_or_ps(_mm256_andnot_ps(sign, a), _mm256_and_ps(sign, s))
            }
        }
        #[inline(always)]
        fn reduce_add(self, a: __m256) -> f32 {
            // Safety: see the impl comment.
            unsafe {
                let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
                _mm_cvtss_f32(s)
            }
        }
        /// `reduce_add`'s tree (`x[i] + x[i+4]`, then `+2`, `+1`) on 8 vectors at once; the
        /// last step leaves key k in lane 4·(k mod 2) + k / 2, put back in order.
        #[inline(always)]
        fn reduce_add_each(self, a: &[__m256]) -> __m256 {
            let a = &a[..8];
            // Safety: see the impl comment. (Plain loops, as in the AVX-512 one.)
            unsafe {
                let mut t = [_mm256_setzero_ps(); 4];
                for m in 0..4 {
                    let (x, y) = (a[2 * m], a[2 * m + 1]);
                    t[m] = _mm256_add_ps(
                        _mm256_permute2f128_ps::<0x20>(x, y),
                        _mm256_permute2f128_ps::<0x31>(x, y),
                    );
                }
                let mut u = [_mm256_setzero_ps(); 2];
                for m in 0..2 {
                    let (x, y) = (t[2 * m], t[2 * m + 1]);
                    u[m] = _mm256_add_ps(
                        _mm256_shuffle_ps::<0x44>(x, y),
                        _mm256_shuffle_ps::<0xEE>(x, y),
                    );
                }
                let r = _mm256_add_ps(
                    _mm256_shuffle_ps::<0x88>(u[0], u[1]),
                    _mm256_shuffle_ps::<0xDD>(u[0], u[1]),
                );
                _mm256_permutevar8x32_ps(r, _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0))
            }
        }
        #[inline(always)]
        fn reduce_max(self, a: __m256) -> f32 {
            // Safety: see the impl comment.
            unsafe {
                let s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
                let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_max_ss(s, _mm_shuffle_ps::<1>(s, s));
                _mm_cvtss_f32(s)
            }
        }
        #[inline(always)]
        fn deinterleave(self, a: __m256, b: __m256) -> (__m256, __m256) {
            // Safety: see the impl comment.
            unsafe {
                let t0 = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
                let t1 = _mm256_shuffle_ps::<0b11_01_11_01>(a, b);
                (
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(t0))),
                    _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(t1))),
                )
            }
        }
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
pub use arm::Neon;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod arm {
    use super::{Level, Simd, SimdOp};
    use core::arch::aarch64::*;

    /// NEON token: 8 lanes as two 128-bit registers, so that the kernel bodies and tile
    /// shapes tuned for AVX2's 8 lanes carry over (AArch64 has 32 vector registers, twice
    /// AVX2's 16, so the two halves fit the same register budgets).
    #[derive(Clone, Copy, Debug)]
    pub struct Neon(());

    impl Neon {
        pub fn new() -> Option<Self> {
            crate::cpu::features().neon.then_some(Neon(()))
        }
    }

    /// Eight f32 lanes: `lo` holds lanes 0–3, `hi` lanes 4–7.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x8 {
        lo: float32x4_t,
        hi: float32x4_t,
    }

    #[inline(always)]
    fn pair(lo: float32x4_t, hi: float32x4_t) -> F32x8 {
        F32x8 { lo, hi }
    }

    /// `f` on both halves.
    #[inline(always)]
    fn map2(a: F32x8, b: F32x8, f: impl Fn(float32x4_t, float32x4_t) -> float32x4_t) -> F32x8 {
        pair(f(a.lo, b.lo), f(a.hi, b.hi))
    }

    // Safety (every `unsafe` block in this impl): NEON is part of the target (the module is
    // compiled only with `target_feature = "neon"`), and pointer arguments follow the trait's
    // contracts.
    impl Simd for Neon {
        const LANES: usize = 8;
        type V = F32x8;
        const LEVEL: Level = Level::Neon;
        #[inline(always)]
        fn enter<O: SimdOp>(self, op: O) -> O::Output {
            // NEON is in the target's baseline: no function with extra features is needed.
            op.run(self)
        }
        #[inline(always)]
        fn splat(self, x: f32) -> F32x8 {
            // Safety: see the impl comment.
            let v = unsafe { vdupq_n_f32(x) };
            pair(v, v)
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32) -> F32x8 {
            // Safety: see the impl comment (8 readable lanes).
            unsafe { pair(vld1q_f32(p), vld1q_f32(p.add(4))) }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: F32x8) {
            // Safety: see the impl comment (8 writable lanes).
            unsafe {
                vst1q_f32(p, v.lo);
                vst1q_f32(p.add(4), v.hi);
            }
        }
        #[inline(always)]
        unsafe fn load_partial(self, p: *const f32, n: usize) -> F32x8 {
            let mut t = [0.0f32; 8];
            // Safety: the caller guarantees `n` readable lanes; `t` holds 8.
            unsafe {
                core::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n.min(8));
                self.load(t.as_ptr())
            }
        }
        #[inline(always)]
        unsafe fn store_partial(self, p: *mut f32, v: F32x8, n: usize) {
            let mut t = [0.0f32; 8];
            // Safety: `t` holds 8 lanes; the caller guarantees `n` writable lanes at `p`.
            unsafe {
                self.store(t.as_mut_ptr(), v);
                core::ptr::copy_nonoverlapping(t.as_ptr(), p, n.min(8));
            }
        }
        #[inline(always)]
        fn add(self, a: F32x8, b: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vaddq_f32(x, y) })
        }
        #[inline(always)]
        fn sub(self, a: F32x8, b: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vsubq_f32(x, y) })
        }
        #[inline(always)]
        fn mul(self, a: F32x8, b: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vmulq_f32(x, y) })
        }
        #[inline(always)]
        fn div(self, a: F32x8, b: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vdivq_f32(x, y) })
        }
        #[inline(always)]
        fn fma(self, a: F32x8, b: F32x8, c: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            unsafe { pair(vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)) }
        }
        #[inline(always)]
        fn min(self, a: F32x8, b: F32x8) -> F32x8 {
            // x86 semantics, not `fmin`'s: `a` only where `a < b`, else `b` (NaN → `b`).
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vbslq_f32(vcltq_f32(x, y), x, y) })
        }
        #[inline(always)]
        fn max(self, a: F32x8, b: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, b, |x, y| unsafe { vbslq_f32(vcgtq_f32(x, y), x, y) })
        }
        #[inline(always)]
        fn abs(self, a: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            unsafe { pair(vabsq_f32(a.lo), vabsq_f32(a.hi)) }
        }
        #[inline(always)]
        fn round(self, a: F32x8) -> F32x8 {
            // Safety: see the impl comment (`frintn`: to nearest, ties to even).
            unsafe { pair(vrndnq_f32(a.lo), vrndnq_f32(a.hi)) }
        }
        #[inline(always)]
        fn ldexp(self, a: F32x8, n: F32x8) -> F32x8 {
            // 2^n as 2^h · 2^(n−h), h = n/2, so that n up to 254 stays in range.
            // Safety: see the impl comment.
            map2(a, n, |x, n| unsafe {
                let e = vcvtnq_s32_f32(n);
                let h = vshrq_n_s32::<1>(e);
                let bias = vdupq_n_s32(127);
                let p1 = vshlq_n_s32::<23>(vaddq_s32(h, bias));
                let p2 = vshlq_n_s32::<23>(vaddq_s32(vsubq_s32(e, h), bias));
                vmulq_f32(
                    vmulq_f32(x, vreinterpretq_f32_s32(p1)),
                    vreinterpretq_f32_s32(p2),
                )
            })
        }
        #[inline(always)]
        fn select_lt(self, a: F32x8, b: F32x8, x: F32x8, y: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            unsafe {
                pair(
                    vbslq_f32(vcltq_f32(a.lo, b.lo), x.lo, y.lo),
                    vbslq_f32(vcltq_f32(a.hi, b.hi), x.hi, y.hi),
                )
            }
        }
        #[inline(always)]
        fn select_le(self, a: F32x8, b: F32x8, x: F32x8, y: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            unsafe {
                pair(
                    vbslq_f32(vcleq_f32(a.lo, b.lo), x.lo, y.lo),
                    vbslq_f32(vcleq_f32(a.hi, b.hi), x.hi, y.hi),
                )
            }
        }
        #[inline(always)]
        fn copysign(self, a: F32x8, s: F32x8) -> F32x8 {
            // Safety: see the impl comment.
            map2(a, s, |a, s| unsafe {
                vbslq_f32(vdupq_n_u32(0x8000_0000), s, a)
            })
        }
        #[inline(always)]
        fn reduce_add(self, a: F32x8) -> f32 {
            // The portable order: (a0 + a4) + (a1 + a5) first, then pairwise.
            // Safety: see the impl comment.
            unsafe {
                let s = vaddq_f32(a.lo, a.hi);
                let p = vpaddq_f32(s, s);
                vgetq_lane_f32::<0>(p) + vgetq_lane_f32::<1>(p)
            }
        }
        #[inline(always)]
        fn reduce_max(self, a: F32x8) -> f32 {
            // Safety: see the impl comment.
            unsafe { vmaxnmvq_f32(vmaxnmq_f32(a.lo, a.hi)) }
        }
        #[inline(always)]
        fn deinterleave(self, a: F32x8, b: F32x8) -> (F32x8, F32x8) {
            // Safety: see the impl comment.
            unsafe {
                (
                    pair(vuzp1q_f32(a.lo, a.hi), vuzp1q_f32(b.lo, b.hi)),
                    pair(vuzp2q_f32(a.lo, a.hi), vuzp2q_f32(b.lo, b.hi)),
                )
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub use wasm::Simd128;

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::{Level, Simd, SimdOp};
    use core::arch::wasm32::*;

    /// WebAssembly SIMD128 token: 8 lanes as two `v128`, like [`super::Neon`]. The module is
    /// built with `+simd128` (validated when it loads), so the token is always available.
    /// No fused multiply-add without the relaxed-SIMD proposal: `fma` rounds twice, as
    /// [`super::Portable`] does.
    #[derive(Clone, Copy, Debug)]
    pub struct Simd128(());

    impl Simd128 {
        #[allow(clippy::new_without_default)]
        pub fn new() -> Self {
            Simd128(())
        }
    }

    /// Eight f32 lanes: `lo` holds lanes 0–3, `hi` lanes 4–7.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x8 {
        lo: v128,
        hi: v128,
    }

    #[inline(always)]
    fn pair(lo: v128, hi: v128) -> F32x8 {
        F32x8 { lo, hi }
    }

    #[inline(always)]
    fn map2(a: F32x8, b: F32x8, f: impl Fn(v128, v128) -> v128) -> F32x8 {
        pair(f(a.lo, b.lo), f(a.hi, b.hi))
    }

    impl Simd for Simd128 {
        const LANES: usize = 8;
        type V = F32x8;
        const LEVEL: Level = Level::Simd128;
        #[inline(always)]
        fn enter<O: SimdOp>(self, op: O) -> O::Output {
            // SIMD128 is enabled for the whole module.
            op.run(self)
        }
        #[inline(always)]
        fn splat(self, x: f32) -> F32x8 {
            pair(f32x4_splat(x), f32x4_splat(x))
        }
        #[inline(always)]
        unsafe fn load(self, p: *const f32) -> F32x8 {
            // Safety: the caller guarantees 8 readable lanes (unaligned loads are allowed).
            unsafe {
                pair(
                    v128_load(p as *const v128),
                    v128_load(p.add(4) as *const v128),
                )
            }
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32, v: F32x8) {
            // Safety: the caller guarantees 8 writable lanes.
            unsafe {
                v128_store(p as *mut v128, v.lo);
                v128_store(p.add(4) as *mut v128, v.hi);
            }
        }
        #[inline(always)]
        unsafe fn load_partial(self, p: *const f32, n: usize) -> F32x8 {
            let mut t = [0.0f32; 8];
            // Safety: the caller guarantees `n` readable lanes; `t` holds 8.
            unsafe {
                core::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n.min(8));
                self.load(t.as_ptr())
            }
        }
        #[inline(always)]
        unsafe fn store_partial(self, p: *mut f32, v: F32x8, n: usize) {
            let mut t = [0.0f32; 8];
            // Safety: `t` holds 8 lanes; the caller guarantees `n` writable lanes at `p`.
            unsafe {
                self.store(t.as_mut_ptr(), v);
                core::ptr::copy_nonoverlapping(t.as_ptr(), p, n.min(8));
            }
        }
        #[inline(always)]
        fn add(self, a: F32x8, b: F32x8) -> F32x8 {
            map2(a, b, |x, y| f32x4_add(x, y))
        }
        #[inline(always)]
        fn sub(self, a: F32x8, b: F32x8) -> F32x8 {
            map2(a, b, |x, y| f32x4_sub(x, y))
        }
        #[inline(always)]
        fn mul(self, a: F32x8, b: F32x8) -> F32x8 {
            map2(a, b, |x, y| f32x4_mul(x, y))
        }
        #[inline(always)]
        fn div(self, a: F32x8, b: F32x8) -> F32x8 {
            map2(a, b, |x, y| f32x4_div(x, y))
        }
        #[inline(always)]
        fn fma(self, a: F32x8, b: F32x8, c: F32x8) -> F32x8 {
            self.add(self.mul(a, b), c)
        }
        #[inline(always)]
        fn min(self, a: F32x8, b: F32x8) -> F32x8 {
            // x86 semantics (`b` unless `a < b`): `f32x4_pmin(b, a)` is `a < b ? a : b`.
            map2(a, b, |x, y| f32x4_pmin(y, x))
        }
        #[inline(always)]
        fn max(self, a: F32x8, b: F32x8) -> F32x8 {
            // `f32x4_pmax(b, a)` is `b < a ? a : b`.
            map2(a, b, |x, y| f32x4_pmax(y, x))
        }
        #[inline(always)]
        fn abs(self, a: F32x8) -> F32x8 {
            pair(f32x4_abs(a.lo), f32x4_abs(a.hi))
        }
        #[inline(always)]
        fn round(self, a: F32x8) -> F32x8 {
            pair(f32x4_nearest(a.lo), f32x4_nearest(a.hi))
        }
        #[inline(always)]
        fn ldexp(self, a: F32x8, n: F32x8) -> F32x8 {
            // 2^n as 2^h · 2^(n−h), h = n/2, so that n up to 254 stays in range.
            map2(a, n, |x, n| {
                let e = i32x4_trunc_sat_f32x4(n);
                let h = i32x4_shr(e, 1);
                let bias = i32x4_splat(127);
                let p1 = i32x4_shl(i32x4_add(h, bias), 23);
                let p2 = i32x4_shl(i32x4_add(i32x4_sub(e, h), bias), 23);
                f32x4_mul(f32x4_mul(x, p1), p2)
            })
        }
        #[inline(always)]
        fn select_lt(self, a: F32x8, b: F32x8, x: F32x8, y: F32x8) -> F32x8 {
            pair(
                v128_bitselect(x.lo, y.lo, f32x4_lt(a.lo, b.lo)),
                v128_bitselect(x.hi, y.hi, f32x4_lt(a.hi, b.hi)),
            )
        }
        #[inline(always)]
        fn select_le(self, a: F32x8, b: F32x8, x: F32x8, y: F32x8) -> F32x8 {
            pair(
                v128_bitselect(x.lo, y.lo, f32x4_le(a.lo, b.lo)),
                v128_bitselect(x.hi, y.hi, f32x4_le(a.hi, b.hi)),
            )
        }
        #[inline(always)]
        fn copysign(self, a: F32x8, s: F32x8) -> F32x8 {
            let sign = u32x4_splat(0x8000_0000);
            map2(a, s, |a, s| v128_bitselect(s, a, sign))
        }
        #[inline(always)]
        fn reduce_add(self, a: F32x8) -> f32 {
            // The portable order: (a0 + a4) + (a1 + a5) first, then pairwise.
            let s = f32x4_add(a.lo, a.hi);
            (f32x4_extract_lane::<0>(s) + f32x4_extract_lane::<1>(s))
                + (f32x4_extract_lane::<2>(s) + f32x4_extract_lane::<3>(s))
        }
        #[inline(always)]
        fn reduce_max(self, a: F32x8) -> f32 {
            let m = f32x4_max(a.lo, a.hi);
            f32x4_extract_lane::<0>(m)
                .max(f32x4_extract_lane::<1>(m))
                .max(f32x4_extract_lane::<2>(m).max(f32x4_extract_lane::<3>(m)))
        }
        #[inline(always)]
        fn deinterleave(self, a: F32x8, b: F32x8) -> (F32x8, F32x8) {
            (
                pair(
                    i32x4_shuffle::<0, 2, 4, 6>(a.lo, a.hi),
                    i32x4_shuffle::<0, 2, 4, 6>(b.lo, b.hi),
                ),
                pair(
                    i32x4_shuffle::<1, 3, 5, 7>(a.lo, a.hi),
                    i32x4_shuffle::<1, 3, 5, 7>(b.lo, b.hi),
                ),
            )
        }
    }
}
