//! `_upsample_bilinear2d_aa.out`: antialiased bilinear resize with triangle-filter weights in f32,
//! accumulated in the element type.

use pteron_core::{
    ArgAccess, ArgView, Element, KernelContext, KernelError, ScalarType, TensorInfo,
};

use super::grid::strides4;
use super::real;
use crate::util::require_rank;

/// _upsample_bilinear2d_aa.out: [input, output_size, align_corners, scales_h, scales_w, out].
pub(super) fn check_upsample_aa(a: &ArgView) -> Result<(), KernelError> {
    let op = "_upsample_bilinear2d_aa";
    let (x, o) = (a.tensor(0)?, a.tensor(5)?);
    real(op, x.dtype())?;
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    require_rank(op, 4, &[("input", x), ("out", o)])?;
    if a.int_list(1)?.len() != 2 {
        return Err(KernelError::invalid(format!(
            "{op}: output_size must have 2 entries"
        )));
    }
    a.bool(2)?;
    a.opt_double(3)?;
    a.opt_double(4)?;
    Ok(())
}

/// The input range and normalisation of one output pixel along one axis (f32, as ExecuTorch's
/// `compute_aa_kernel_params<float>`).
#[derive(Clone, Copy, Debug)]
struct AaParams {
    lo: usize,
    hi: usize,
    /// `Some(i)`: no input pixel has weight; `i` alone gets weight 1.
    fallback: Option<usize>,
    center: f32,
    invscale: f32,
    total: f32,
}

#[inline]
fn aa_filter(x: f32) -> f32 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

/// `static_cast<int64_t>(float)` (truncation; out-of-range saturates where C++ is undefined).
#[inline]
fn trunc_i64(v: f32) -> i64 {
    v as i64
}

impl AaParams {
    fn new(o: usize, scale: f32, input: usize) -> AaParams {
        let center = scale * (o as f32 + 0.5);
        let support = if scale >= 1.0 { scale } else { 1.0 };
        let lo = trunc_i64(center - support + 0.5).max(0);
        let hi = trunc_i64(center + support + 0.5).min(input as i64);
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let fallback = |center: f32| {
            let i = trunc_i64(center).min(input as i64 - 1).max(0) as usize;
            AaParams {
                lo: i,
                hi: i + 1,
                fallback: Some(i),
                center,
                invscale,
                total: 1.0,
            }
        };
        if hi <= lo {
            return fallback(center);
        }
        let mut total = 0.0f32;
        for x in lo..hi {
            total += aa_filter((x as f32 - center + 0.5) * invscale);
        }
        if total <= 0.0 {
            return fallback(center);
        }
        AaParams {
            lo: lo as usize,
            hi: hi as usize,
            fallback: None,
            center,
            invscale,
            total,
        }
    }

    #[inline]
    fn weight(&self, i: usize) -> f32 {
        match self.fallback {
            Some(f) => (i == f) as u8 as f32,
            None => aa_filter((i as f32 - self.center + 0.5) * self.invscale) / self.total,
        }
    }
}

/// `value += in * h_weight * w_weight` in the element type, as C++ computes it.
pub trait AaElem: Element {
    fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self;
}

macro_rules! aa_float {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                value + input * hw as $t * ww as $t
            }
        }
    };
}
aa_float!(f32);
aa_float!(f64);

macro_rules! aa_half {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                // Half * float is float; `Half += float` converts the float to Half first.
                let x = <$t>::from_f32(input.to_f32() * hw * ww);
                <$t>::from_f32(value.to_f32() + x.to_f32())
            }
        }
    };
}
aa_half!(half::f16);
aa_half!(half::bf16);

macro_rules! aa_int {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                // int * float is float; `int += float` truncates the float sum.
                (value as f32 + input as f32 * hw * ww) as $t
            }
        }
    };
}
aa_int!(u8);
aa_int!(i8);
aa_int!(i16);
aa_int!(i32);
aa_int!(i64);

fn upsample_aa<T: AaElem>(
    x: &[T],
    out: &mut [T],
    (xi, oi): (&TensorInfo, &TensorInfo),
    (scale_h, scale_w): (f32, f32),
) {
    let (xs, os) = (strides4(xi), strides4(oi));
    let (ih, iw) = (xi.size(2), xi.size(3));
    for n in 0..oi.size(0) {
        for oh in 0..oi.size(2) {
            let hp = AaParams::new(oh, scale_h, ih);
            for ow in 0..oi.size(3) {
                let wp = AaParams::new(ow, scale_w, iw);
                for c in 0..oi.size(1) {
                    let base = n * xs[0] + c * xs[1];
                    let mut value = T::from_i64(0);
                    for h in hp.lo..hp.hi {
                        let hw = hp.weight(h);
                        for w in wp.lo..wp.hi {
                            let ww = wp.weight(w);
                            value = T::step(value, x[base + h * xs[2] + w * xs[3]], hw, ww);
                        }
                    }
                    out[n * os[0] + c * os[1] + oh * os[2] + ow * os[3]] = value;
                }
            }
        }
    }
}

/// ExecuTorch's `area_pixel_compute_scale<double>` with the scale it derives first.
fn aa_scale(input: usize, output: usize, align: bool, scale: Option<f64>) -> f64 {
    if align {
        if output > 1 {
            (input as f64 - 1.0) / (output as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) => 1.0 / s,
            None => input as f64 / output as f64,
        }
    }
}

pub(super) fn upsample_bilinear2d_aa_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "_upsample_bilinear2d_aa";
    let x = *ctx.tensor(0)?;
    if x.rank() != 4 {
        return Err(KernelError::rank_mismatch(op, "input", 4, x.rank()));
    }
    let l = ctx.int_list(1)?;
    if l.len() != 2 {
        return Err(KernelError::invalid(format!(
            "{op}: output_size must have 2 entries"
        )));
    }
    let (oh, ow) = (l.get(0)?, l.get(1)?);
    if oh <= 0 || ow <= 0 {
        return Err(KernelError::invalid(format!(
            "{op}: output size ({oh}, {ow}) must be positive"
        )));
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let align = ctx.bool(2)?;
    let (sh, sw) = (ctx.opt_double(3)?, ctx.opt_double(4)?);
    let (ih, iw) = (x.size(2), x.size(3));
    // Both scales given: used; otherwise derived from the sizes (output / input).
    let (fh, fw) = match (sh, sw) {
        (Some(h), Some(w)) => (h, w),
        _ => (oh as f64 / ih as f64, ow as f64 / iw as f64),
    };
    let kh = aa_scale(ih, oh, align, Some(fh)) as f32;
    let kw = aa_scale(iw, ow, align, Some(fw)) as f32;
    if !kh.is_finite() || !kw.is_finite() {
        return Err(KernelError::invalid(format!(
            "{op}: scales ({fh}, {fw}) give a non-finite sampling step"
        )));
    }
    ctx.resize(5, &[x.size(0), x.size(1), oh, ow])?;
    let ([xr], [mut o]) = ctx.io([0], [5])?;
    let dt = x.dtype();
    if o.info.dtype() != dt {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    if o.info.numel() == 0 {
        return Ok(());
    }
    if ih == 0 || iw == 0 {
        return Err(KernelError::shape(format!("{op}: empty input image")));
    }
    let oi = *o.info;
    macro_rules! go {
        ($T:ty) => {
            upsample_aa::<$T>(xr.as_slice()?, o.as_mut_slice()?, (&x, &oi), (kh, kw))
        };
    }
    match dt {
        ScalarType::Float => go!(f32),
        ScalarType::Double => go!(f64),
        ScalarType::Half => go!(half::f16),
        ScalarType::BFloat16 => go!(half::bf16),
        ScalarType::Byte => go!(u8),
        ScalarType::Char => go!(i8),
        ScalarType::Short => go!(i16),
        ScalarType::Int => go!(i32),
        ScalarType::Long => go!(i64),
        _ => return Err(KernelError::dtype(dt, op)),
    }
    Ok(())
}
