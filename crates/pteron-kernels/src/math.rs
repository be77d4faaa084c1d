//! Float functions that work without `std`.
//!
//! `f32::exp` and the other transcendental and rounding methods live in `std`, not `core`.
//! [`Libm`] gives the two float types the same methods under the same names: with the `std`
//! feature they are std's own (so results stay bit-identical to a std build), without it they
//! come from the `libm` crate (a Rust port of musl's libm). A module that calls these methods on
//! a concrete float imports the trait only without `std`:
//!
//! ```ignore
//! #[cfg(not(feature = "std"))]
//! use crate::math::Libm as _;
//! ```
//!
//! (with `std` the inherent methods win and the import would be unused; the import also
//! carries `#[allow(unused_imports)]`, because std's methods are visible, and win, whenever
//! any crate of the build links std). An impl of another
//! trait that forwards to a float method of the same name calls `Libm::name(x)` explicitly.

/// The float methods kernels use that `core` lacks, named as in `std`.
pub trait Libm: Sized {
    fn exp(self) -> Self;
    fn exp_m1(self) -> Self;
    fn ln(self) -> Self;
    fn ln_1p(self) -> Self;
    fn log2(self) -> Self;
    fn log10(self) -> Self;
    fn sqrt(self) -> Self;
    fn cbrt(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn sin_cos(self) -> (Self, Self);
    fn tan(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn atan2(self, x: Self) -> Self;
    fn sinh(self) -> Self;
    fn cosh(self) -> Self;
    fn tanh(self) -> Self;
    fn asinh(self) -> Self;
    fn acosh(self) -> Self;
    fn atanh(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round(self) -> Self;
    fn round_ties_even(self) -> Self;
    fn trunc(self) -> Self;
}

/// With `std`: each method is the inherent one (inherent methods take precedence, so these
/// bodies do not recurse).
#[cfg(feature = "std")]
macro_rules! impl_libm_std {
    ($t:ty) => {
        impl Libm for $t {
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            fn log2(self) -> Self {
                <$t>::log2(self)
            }
            fn log10(self) -> Self {
                <$t>::log10(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn cbrt(self) -> Self {
                <$t>::cbrt(self)
            }
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            fn sin_cos(self) -> (Self, Self) {
                <$t>::sin_cos(self)
            }
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            fn asin(self) -> Self {
                <$t>::asin(self)
            }
            fn acos(self) -> Self {
                <$t>::acos(self)
            }
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            fn atan2(self, x: Self) -> Self {
                <$t>::atan2(self, x)
            }
            fn sinh(self) -> Self {
                <$t>::sinh(self)
            }
            fn cosh(self) -> Self {
                <$t>::cosh(self)
            }
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            fn asinh(self) -> Self {
                <$t>::asinh(self)
            }
            fn acosh(self) -> Self {
                <$t>::acosh(self)
            }
            fn atanh(self) -> Self {
                <$t>::atanh(self)
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            fn round(self) -> Self {
                <$t>::round(self)
            }
            fn round_ties_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
        }
    };
}
#[cfg(feature = "std")]
impl_libm_std!(f32);
#[cfg(feature = "std")]
impl_libm_std!(f64);

/// Without `std`: the `libm` function of each name (`f` suffix for `f32`). std's `asinh`,
/// `acosh` and `atanh` are formulas over `ln`/`ln_1p`/`sqrt`; libm's are the direct functions,
/// which agree to within an ulp or two.
#[cfg(not(feature = "std"))]
macro_rules! impl_libm {
    ($t:ty, $($name:ident => $f:ident),* ; $pow:ident, $sincos:ident, $atan2:ident) => {
        impl Libm for $t {
            $(fn $name(self) -> Self { libm::$f(self) })*
            fn powf(self, e: Self) -> Self { libm::$pow(self, e) }
            fn sin_cos(self) -> (Self, Self) { libm::$sincos(self) }
            fn atan2(self, x: Self) -> Self { libm::$atan2(self, x) }
        }
    };
}
#[cfg(not(feature = "std"))]
impl_libm!(f32,
    exp => expf, exp_m1 => expm1f, ln => logf, ln_1p => log1pf, log2 => log2f, log10 => log10f,
    sqrt => sqrtf, cbrt => cbrtf, sin => sinf, cos => cosf, tan => tanf, asin => asinf,
    acos => acosf, atan => atanf, sinh => sinhf, cosh => coshf, tanh => tanhf, asinh => asinhf,
    acosh => acoshf, atanh => atanhf, floor => floorf, ceil => ceilf, round => roundf,
    round_ties_even => roundevenf, trunc => truncf;
    powf, sincosf, atan2f);
#[cfg(not(feature = "std"))]
impl_libm!(f64,
    exp => exp, exp_m1 => expm1, ln => log, ln_1p => log1p, log2 => log2, log10 => log10,
    sqrt => sqrt, cbrt => cbrt, sin => sin, cos => cos, tan => tan, asin => asin,
    acos => acos, atan => atan, sinh => sinh, cosh => cosh, tanh => tanh, asinh => asinh,
    acosh => acosh, atanh => atanh, floor => floor, ceil => ceil, round => round,
    round_ties_even => roundeven, trunc => trunc;
    pow, sincos, atan2);

#[cfg(test)]
mod tests {
    use super::Libm;

    /// The trait's methods are the inherent ones under `std` (bit-identical).
    #[test]
    fn same_as_inherent_methods() {
        for &x in &[-2.75f32, -0.5, 0.0, 0.3, 1.5, 2.5, 7.0] {
            assert_eq!(Libm::exp(x).to_bits(), x.exp().to_bits());
            assert_eq!(
                Libm::round_ties_even(x).to_bits(),
                x.round_ties_even().to_bits()
            );
            assert_eq!(Libm::tanh(x as f64).to_bits(), (x as f64).tanh().to_bits());
        }
    }
}
