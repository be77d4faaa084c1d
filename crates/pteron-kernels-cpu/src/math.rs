//! Vectorized f32 functions for any [`Simd`]: exp, erf, tanh, sigmoid, gelu, clamp.
//!
//! Accuracy (tested in tests/math.rs against f64 references): exp within 2 ulp for inputs
//! above −86 (below, results under 4.5e-38 are flushed to 0);
//! erf and tanh within 1e-6 absolute; sigmoid and gelu within a few ulp of their f32
//! formulas on the same inputs.

use crate::simd::Simd;

/// `exp(x)` (NaN stays NaN; overflow gives +inf; below −86, where results near the
/// subnormal range would make the arithmetic slow, 0): `2^n · p(r)` with `n = round(x / ln 2)`, `r = x − n ln 2` (two-part ln 2), `p` a
/// degree-7 polynomial (Cephes' expf coefficients).
#[inline(always)]
pub fn exp<S: Simd>(s: S, x: S::V) -> S::V {
    // Constants first: x86 min/max return the second operand when one is NaN, so NaN stays.
    let x0 = x;
    let x = s.min(s.splat(88.722_84), s.max(s.splat(-86.0), x));
    let n = s.round(s.mul(x, s.splat(core::f32::consts::LOG2_E)));
    let r = s.fma(n, s.splat(-0.693_359_4), x);
    let r = s.fma(n, s.splat(2.121_944_4e-4), r);
    let mut p = s.splat(1.987_569_1e-4);
    p = s.fma(p, r, s.splat(1.398_2e-3));
    p = s.fma(p, r, s.splat(8.333_452e-3));
    p = s.fma(p, r, s.splat(4.166_579_6e-2));
    p = s.fma(p, r, s.splat(1.666_666_5e-1));
    p = s.fma(p, r, s.splat(5e-1));
    let r2 = s.mul(r, r);
    let p = s.fma(p, r2, s.add(r, s.splat(1.0)));
    let e = s.ldexp(p, n);
    // Overflow to +inf and underflow (below the normal range) to 0, as libm; NaN stays.
    let e = s.select_lt(s.splat(88.722_84), x0, s.splat(f32::INFINITY), e);
    s.select_lt(x0, s.splat(-86.0), s.zero(), e)
}

/// `erf(x)`: `x · P(x²) / Q(x²)` on [−3.83, 3.83] (±1 beyond, in f32), a rational minimax
/// approximation.
#[inline(always)]
pub fn erf<S: Simd>(s: S, x: S::V) -> S::V {
    let x = s.min(s.splat(3.832_507), s.max(s.splat(-3.832_507), x));
    let x2 = s.mul(x, x);
    let mut p = s.splat(-2.726_142_3e-10);
    p = s.fma(p, x2, s.splat(2.770_681_4e-8));
    p = s.fma(p, x2, s.splat(-2.101_024e-6));
    p = s.fma(p, x2, s.splat(-5.692_506_4e-5));
    p = s.fma(p, x2, s.splat(-7.349_906e-4));
    p = s.fma(p, x2, s.splat(-2.954_600_2e-3));
    p = s.fma(p, x2, s.splat(-1.609_603_3e-2));
    let p = s.mul(p, x);
    let mut q = s.splat(-1.456_607_2e-5);
    q = s.fma(q, x2, s.splat(-2.133_740_6e-4));
    q = s.fma(q, x2, s.splat(-1.682_827e-3));
    q = s.fma(q, x2, s.splat(-7.373_329_4e-3));
    q = s.fma(q, x2, s.splat(-1.426_474e-2));
    // Exactly ±1 at the ends (so that 1 + erf(−∞) is 0, as in libm); NaN stays.
    let one = s.copysign(s.splat(1.0), x);
    s.select_le(s.splat(3.832_507), s.abs(x), one, s.div(p, q))
}

/// `tanh(x)`: `x · P(x²) / Q(x²)` on [−7.9, 7.9] (±1 beyond), `x` itself for |x| < 4e-4.
#[inline(always)]
pub fn tanh<S: Simd>(s: S, x: S::V) -> S::V {
    let c = s.min(s.splat(7.905_311), s.max(s.splat(-7.905_311), x));
    let x2 = s.mul(c, c);
    let mut p = s.splat(-2.760_768_5e-16);
    p = s.fma(p, x2, s.splat(2.000_188e-13));
    p = s.fma(p, x2, s.splat(-8.604_672e-11));
    p = s.fma(p, x2, s.splat(5.122_297e-8));
    p = s.fma(p, x2, s.splat(1.485_722_4e-5));
    p = s.fma(p, x2, s.splat(6.372_619e-4));
    p = s.fma(p, x2, s.splat(4.893_524_6e-3));
    let p = s.mul(p, c);
    let mut q = s.splat(1.198_258_4e-6);
    q = s.fma(q, x2, s.splat(1.185_347e-4));
    q = s.fma(q, x2, s.splat(2.268_434_6e-3));
    q = s.fma(q, x2, s.splat(4.893_525e-3));
    let r = s.div(p, q);
    let r = s.select_le(s.splat(7.905_311), s.abs(x), s.copysign(s.splat(1.0), x), r);
    // Tiny inputs: tanh(x) = x to within rounding (and keeps -0.0).
    s.select_lt(s.abs(x), s.splat(4e-4), x, r)
}

/// `1 / (1 + exp(−x))`.
#[inline(always)]
pub fn sigmoid<S: Simd>(s: S, x: S::V) -> S::V {
    let e = exp(s, s.sub(s.zero(), x));
    s.div(s.splat(1.0), s.add(s.splat(1.0), e))
}

/// GELU with the exact erf form: `x/2 · (1 + erf(x/√2))`.
#[inline(always)]
pub fn gelu_erf<S: Simd>(s: S, x: S::V) -> S::V {
    let e = erf(s, s.mul(x, s.splat(core::f32::consts::FRAC_1_SQRT_2)));
    s.mul(s.mul(x, s.splat(0.5)), s.add(s.splat(1.0), e))
}

/// GELU with the tanh form: `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
#[inline(always)]
pub fn gelu_tanh<S: Simd>(s: S, x: S::V) -> S::V {
    let k = (core::f64::consts::SQRT_2 * core::f64::consts::FRAC_2_SQRT_PI * 0.5) as f32;
    let x3 = s.mul(s.mul(x, x), x);
    let inner = s.mul(s.splat(k), s.fma(x3, s.splat(0.044715), x));
    s.mul(s.mul(x, s.splat(0.5)), s.add(s.splat(1.0), tanh(s, inner)))
}

/// `clamp(x, lo, hi)` as `aten::clamp`: `max(x, lo)` then `min(·, hi)`; NaN stays NaN.
#[inline(always)]
pub fn clamp<S: Simd>(s: S, x: S::V, lo: S::V, hi: S::V) -> S::V {
    // `max(lo, x)` is `x < lo ? lo : x` and `min(hi, r)` is `hi < r ? hi : r` (see the
    // trait): NaN and signed zeros as with selects, in one instruction each instead of a
    // compare and a blend (a sixth of a shallow GEMM tile's time went to the clamp).
    s.min(hi, s.max(lo, x))
}

/// `expf` as glibc (≥ 2.27, its FMA build: every x86-64 CPU with AVX2) and musl compute it, bit
/// for bit: Arm's optimized-routines algorithm, which ExecuTorch's portable kernels reach
/// through `std::exp`. In double precision, `x·32/ln 2 = k + r` (`k` rounded to nearest by the
/// 1.5·2^52 shift), `2^(k/32)` from a 32-entry table of `2^(i/32)` with `k`'s high bits added
/// to the exponent, times a degree-3 polynomial in `r`, each step a fused multiply-add as glibc
/// is compiled; one rounding to f32 at the end. Checked over every f32 input against glibc in
/// tests/math.rs (without the fused steps, 2 of 2.2·10^9 inputs differ). Used where pteron
/// must give ExecuTorch's bits: a dynamically quantized program turns one ulp into another int8
/// value.
#[inline(always)]
pub fn expf_libc(x: f32) -> f32 {
    // Overflow above 0x1.62e42ep6, 0 below -0x1.9fe368p6; NaN propagates.
    if x.is_nan() {
        return x;
    }
    if x > 88.722_83 {
        return f32::INFINITY;
    }
    if x < -103.972_08 {
        return 0.0;
    }
    let f = f64::from_bits;
    let xd = x as f64;
    let shifted = f(EXPF_INV_LN2_N).mul_add(xd, f(EXPF_SHIFT));
    let ki = shifted.to_bits();
    let r = f(EXPF_INV_LN2_N).mul_add(xd, -(shifted - f(EXPF_SHIFT)));
    let t = EXPF_POW2[(ki & 31) as usize].wrapping_add(ki << 47);
    let p = f(EXPF_POLY[0]).mul_add(r, f(EXPF_POLY[1]));
    let q = f(EXPF_POLY[2]).mul_add(r, 1.0);
    (p.mul_add(r * r, q) * f64::from_bits(t)) as f32
}

/// `1 / (1 + expf(-x))` in f32 with [`expf_libc`]: ExecuTorch's portable `sigmoid.out`.
#[inline(always)]
pub fn sigmoid_libc(x: f32) -> f32 {
    1.0 / (1.0 + expf_libc(-x))
}

/// `32 / ln 2`.
const EXPF_INV_LN2_N: u64 = 0x4047_1547_652b_82fe;
/// 1.5·2^52: adding it rounds a double below 2^51 to an integer in the low mantissa bits.
const EXPF_SHIFT: u64 = 0x4338_0000_0000_0000;
/// The polynomial's coefficients of r³, r², r (2^(r/32) − 1 on |r| ≤ 1/2).
const EXPF_POLY: [u64; 3] = [
    0x3ebc_6af8_4b91_2394,
    0x3f2e_bfce_50fa_c4f3,
    0x3f96_2e42_ff0c_52d6,
];
/// Bits of `2^(i/32)` (nearest double) minus `i << 47`, so that adding `k << 47` for
/// `k ≡ i (mod 32)` yields `2^(k/32)`.
const EXPF_POW2: [u64; 32] = [
    0x3ff0_0000_0000_0000,
    0x3fef_d9b0_d315_8574,
    0x3fef_b558_6cf9_890f,
    0x3fef_9301_d012_5b51,
    0x3fef_72b8_3c7d_517b,
    0x3fef_5487_3168_b9aa,
    0x3fef_387a_6e75_6238,
    0x3fef_1e9d_f51f_dee1,
    0x3fef_06fe_0a31_b715,
    0x3fee_f1a7_373a_a9cb,
    0x3fee_dea6_4c12_3422,
    0x3fee_ce08_6061_892d,
    0x3fee_bfda_d536_2a27,
    0x3fee_b42b_569d_4f82,
    0x3fee_ab07_dd48_5429,
    0x3fee_a47e_b03a_5585,
    0x3fee_a09e_667f_3bcd,
    0x3fee_9f75_e8ec_5f74,
    0x3fee_a114_73eb_0187,
    0x3fee_a589_994c_ce13,
    0x3fee_ace5_422a_a0db,
    0x3fee_b737_b0cd_c5e5,
    0x3fee_c491_82a3_f090,
    0x3fee_d503_b23e_255d,
    0x3fee_e89f_995a_d3ad,
    0x3fee_ff76_f2fb_5e47,
    0x3fef_199b_dd85_529c,
    0x3fef_3720_dcef_9069,
    0x3fef_5818_dcfb_a487,
    0x3fef_7c97_337b_9b5f,
    0x3fef_a4af_a2a4_90da,
    0x3fef_d076_5b6e_4540,
];
