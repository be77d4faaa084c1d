//! Float types converted like C++ `static_cast` from/to `float` ([`F32Cast`]), and
//! `with_f32cast!`, which binds one of them from a dtype.

use half::{bf16, f16};
use pteron_core::Element;

/// Float types converted like C++ `static_cast` from/to `float`.
pub(super) trait F32Cast: Element + Copy {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl F32Cast for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}
impl F32Cast for f64 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
}
impl F32Cast for f16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}
impl F32Cast for bf16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

macro_rules! with_f32cast {
    ($dt:expr, $T:ident => $body:expr, $what:expr) => {
        match $dt {
            ScalarType::Float => {
                type $T = f32;
                $body
            }
            ScalarType::Double => {
                type $T = f64;
                $body
            }
            ScalarType::Half => {
                type $T = f16;
                $body
            }
            ScalarType::BFloat16 => {
                type $T = bf16;
                $body
            }
            dt => return Err(KernelError::dtype(dt, $what)),
        }
    };
}
