//! Compute-type dispatch (`with_comp!`, `with_num!`, `with_float!`) and wrapping arithmetic
//! ([`Num`]), with NaN-propagating `nan_max`/`nan_min`.

use super::Comp;

/// Calls `$body` with `$C` bound to the compute type of `$common` (bool, i64, f32 or f64).
#[macro_export]
#[doc(hidden)]
macro_rules! with_comp {
    ($kind:expr, $C:ident => $body:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::Bool => {
                type $C = bool;
                $body
            }
            __K::Int => {
                type $C = i64;
                $body
            }
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
        }
    }};
}

/// Like [`with_comp!`] but bool computes as i64 (for arithmetic).
#[macro_export]
#[doc(hidden)]
macro_rules! with_num {
    ($kind:expr, $C:ident => $body:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::Bool | __K::Int => {
                type $C = i64;
                $body
            }
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
        }
    }};
}

/// Like [`with_comp!`] for floating kinds only; `$other` for bool/int.
#[macro_export]
#[doc(hidden)]
macro_rules! with_float {
    ($kind:expr, $C:ident => $body:expr, _ => $other:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
            _ => $other,
        }
    }};
}

/// Arithmetic with wrapping integers, for the numeric compute types.
pub trait Num: Comp {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! num_float {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn is_nan(self) -> bool {
                self != self
            }
        }
    };
}
num_float!(f32);
num_float!(f64);

impl Num for i64 {
    const ZERO: Self = 0;
    const ONE: Self = 1;
    #[inline]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline]
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    #[inline]
    fn is_nan(self) -> bool {
        false
    }
}

/// Maximum / minimum that propagate NaN (as `torch.maximum`, `amax`).
#[inline]
pub fn nan_max<C: Num>(a: C, b: C) -> C {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a >= b {
        a
    } else {
        b
    }
}

#[inline]
pub fn nan_min<C: Num>(a: C, b: C) -> C {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a <= b {
        a
    } else {
        b
    }
}
