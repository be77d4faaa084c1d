//! Compute types ([`Comp`]: the type elementwise math is done in) and the element cast [`cast`]
//! (C++ `static_cast`). A leaf module: `util`'s strided copies cast through it too.

use pteron_core::{Element, Scalar, ScalarType};

/// A compute type: the type elementwise math is done in.
pub trait Comp: Copy + Default + PartialOrd + core::fmt::Debug + 'static {
    fn load<E: Element>(e: E) -> Self;
    fn store<E: Element>(self) -> E;
    fn from_scalar(s: Scalar) -> Self;
}

impl Comp for f32 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_f64() as f32
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_f64(self as f64)
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_f64() as f32
    }
}

impl Comp for f64 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_f64()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        if matches!(E::DTYPE, ScalarType::Half | ScalarType::BFloat16) {
            // c10::Half / BFloat16 convert from double through float.
            E::from_f64(self as f32 as f64)
        } else {
            E::from_f64(self)
        }
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_f64()
    }
}

impl Comp for i64 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_i64()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_i64(self)
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_i64()
    }
}

impl Comp for bool {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_bool()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_bool(self)
    }
    fn from_scalar(s: Scalar) -> Self {
        match s {
            Scalar::Bool(b) => b,
            Scalar::Int(v) => v != 0,
            Scalar::Double(v) => v != 0.0,
        }
    }
}

/// Converts one element as C++ `static_cast` does (ints through i64, floats through f64).
#[inline]
pub fn cast<S: Element, D: Element>(s: S) -> D {
    if S::DTYPE.is_floating() {
        <f64 as Comp>::store::<D>(s.to_f64())
    } else {
        D::from_i64(s.to_i64())
    }
}
