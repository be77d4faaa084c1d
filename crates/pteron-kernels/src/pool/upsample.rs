//! Upsampling: `upsample_nearest2d.vec` and `upsample_bilinear2d.vec`.

use super::geom::{out_sizes, Nchw};
use crate::linalg::dispatch_acc as dispatch_real;
#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::{ArgAccess, Element, KernelContext, KernelError, ScalarType, TensorInfo};

/// Output size and scale of the `.vec` upsampling overloads: exactly one of `output_size`
/// (argument `osz`) and `scale_factors` (argument `sf`) is given.
fn upsample_target(
    ctx: &KernelContext,
    x: &TensorInfo,
    osz: usize,
    sf: usize,
) -> Result<([usize; 2], [Option<f64>; 2]), KernelError> {
    let g = Nchw::of(x)?;
    let (ih, iw) = (g.h, g.w);
    if x.rank() != 4 {
        return Err(KernelError::rank_mismatch(
            "upsample2d",
            "input",
            4,
            x.rank(),
        ));
    }
    match (ctx.opt_int_list(osz)?, ctx.is_none(sf)?) {
        (Some(l), true) if l.len() == 2 => {
            let (h, w) = (l.get(0)?, l.get(1)?);
            if h <= 0 || w <= 0 {
                return Err(KernelError::invalid(
                    "upsample2d: output size must be positive",
                ));
            }
            Ok(([h as usize, w as usize], [None, None]))
        }
        (None, false) => {
            let s = ctx.double_list(sf)?;
            if s.len() != 2 {
                return Err(KernelError::invalid(
                    "upsample2d: scale_factors must have 2 entries",
                ));
            }
            let oh = (ih as f64 * s[0]).floor();
            let ow = (iw as f64 * s[1]).floor();
            if !(oh >= 1.0 && ow >= 1.0) || oh > u32::MAX as f64 || ow > u32::MAX as f64 {
                return Err(KernelError::invalid("upsample2d: bad scale factors"));
            }
            Ok(([oh as usize, ow as usize], [Some(s[0]), Some(s[1])]))
        }
        _ => Err(KernelError::invalid(
            "upsample2d: give exactly one of output_size and scale_factors",
        )),
    }
}

/// PyTorch's `compute_scales_value<float>`.
fn scales_value(scale: Option<f64>, input: usize, output: usize) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => input as f32 / output as f32,
    }
}

fn nearest_idx(o: usize, input: usize, output: usize, scale: Option<f64>) -> usize {
    if output == input {
        o
    } else if output == 2 * input {
        o >> 1
    } else {
        let s = scales_value(scale, input, output);
        ((o as f32 * s).floor() as usize).min(input - 1)
    }
}

pub(super) fn upsample_nearest2d_vec_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let ([oh, ow], scales) = upsample_target(ctx, &x, 1, 2)?;
    ctx.resize(3, &out_sizes(&x, oh, ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(3)?)?);
    if x.numel() == 0 {
        return Ok(());
    }
    let ([xr], [mut o]) = ctx.io([0], [3])?;
    fn run<T: Copy>(x: &[T], o: &mut [T], xg: &Nchw, og: &Nchw, scales: [Option<f64>; 2]) {
        for n in 0..og.n {
            for c in 0..og.c {
                for y in 0..og.h {
                    let h = nearest_idx(y, xg.h, og.h, scales[0]);
                    for xo in 0..og.w {
                        let w = nearest_idx(xo, xg.w, og.w, scales[1]);
                        o[og.at(n, c, y, xo)] = x[xg.at(n, c, h, w)];
                    }
                }
            }
        }
    }
    let dt = x.dtype();
    dispatch_real!(dt, T => run::<T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og, scales),
        _ => return Err(KernelError::dtype(dt, "upsample_nearest2d")));
    Ok(())
}

/// Linear interpolation along one axis: maps an output index to its two source indices and
/// their weights.
#[derive(Clone, Copy)]
struct LinearAxis {
    input: usize,
    align_corners: bool,
    scale: f32,
}

impl LinearAxis {
    fn new(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> Self {
        let scale = if align_corners {
            if output > 1 {
                (input as f32 - 1.0) / (output as f32 - 1.0)
            } else {
                0.0
            }
        } else {
            scales_value(scale, input, output)
        };
        LinearAxis {
            input,
            align_corners,
            scale,
        }
    }

    /// `(i0, i1, w0, w1)` for output index `o`.
    #[inline]
    fn weights(&self, o: usize) -> (usize, usize, f32, f32) {
        let (s, input) = (self.scale, self.input);
        let real = if self.align_corners {
            s * o as f32
        } else {
            (s * (o as f32 + 0.5) - 0.5).max(0.0)
        };
        let i0 = (real as usize).min(input - 1);
        let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
        let l1 = (real - i0 as f32).clamp(0.0, 1.0);
        (i0, i1, 1.0 - l1, l1)
    }
}

/// Bilinear interpolation arithmetic: f32 weights; values in f32 (f64 for f64), converted back
/// to the element type (C++ conversion: truncation for integers).
trait Lerp: Element {
    fn lerp4(tl: Self, tr: Self, bl: Self, br: Self, ww: [f32; 2], wh: [f32; 2]) -> Self;
}
macro_rules! lerp_via {
    ($t:ty, $c:ty) => {
        impl Lerp for $t {
            #[inline]
            fn lerp4(tl: Self, tr: Self, bl: Self, br: Self, ww: [f32; 2], wh: [f32; 2]) -> Self {
                let f = |v: $t| <$t as Element>::to_f64(v) as $c;
                let (w0, w1) = (ww[0] as $c, ww[1] as $c);
                let top = f(tl) * w0 + f(tr) * w1;
                let bot = f(bl) * w0 + f(br) * w1;
                <$t as Element>::from_f64((top * wh[0] as $c + bot * wh[1] as $c) as f64)
            }
        }
    };
}
lerp_via!(f32, f32);
lerp_via!(f64, f64);
lerp_via!(half::f16, f32);
lerp_via!(half::bf16, f32);
lerp_via!(u8, f32);
lerp_via!(i8, f32);
lerp_via!(i16, f32);
lerp_via!(i32, f32);
lerp_via!(i64, f32);

pub(super) fn upsample_bilinear2d_vec_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let align = ctx.bool(2)?;
    let ([oh, ow], scales) = upsample_target(ctx, &x, 1, 3)?;
    ctx.resize(4, &out_sizes(&x, oh, ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(4)?)?);
    if x.numel() == 0 {
        return Ok(());
    }
    let hw = LinearAxis::new(xg.h, oh, align, scales[0]);
    let ww = LinearAxis::new(xg.w, ow, align, scales[1]);
    let ([xr], [mut o]) = ctx.io([0], [4])?;
    fn run<T: Lerp>(
        x: &[T],
        o: &mut [T],
        xg: &Nchw,
        og: &Nchw,
        (hw, ww): (LinearAxis, LinearAxis),
    ) {
        for n in 0..og.n {
            for c in 0..og.c {
                for y in 0..og.h {
                    let (h0, h1, lh0, lh1) = hw.weights(y);
                    for xo in 0..og.w {
                        let (w0, w1, lw0, lw1) = ww.weights(xo);
                        o[og.at(n, c, y, xo)] = T::lerp4(
                            x[xg.at(n, c, h0, w0)],
                            x[xg.at(n, c, h0, w1)],
                            x[xg.at(n, c, h1, w0)],
                            x[xg.at(n, c, h1, w1)],
                            [lw0, lw1],
                            [lh0, lh1],
                        );
                    }
                }
            }
        }
    }
    let dt = x.dtype();
    macro_rules! go {
        ($T:ty) => {
            run::<$T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og, (hw, ww))
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
        _ => return Err(KernelError::dtype(dt, "upsample_bilinear2d")),
    }
    Ok(())
}
