//! Average pooling: `avg_pool2d` (sums in the element type) and `_adaptive_avg_pool2d`
//! (sums in f32).

use super::geom::{out_sizes, pair, pool_geom, Nchw, PoolGeom};
use super::AVG;
#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::{dispatch_dtype, ArgAccess, Element, KernelContext, KernelError, ScalarType};

/// Addition and division in the element type, as ExecuTorch's portable average pooling does
/// (`CTYPE` accumulators: f16/bf16 round after each step; int64 divides with truncation).
trait AvgElem: Element {
    fn add(self, o: Self) -> Self;
    fn div_count(self, n: i64) -> Self;
}
macro_rules! avg_float {
    ($t:ty) => {
        impl AvgElem for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn div_count(self, n: i64) -> Self {
                self / n as $t
            }
        }
    };
}
avg_float!(f32);
avg_float!(f64);
macro_rules! avg_half {
    ($t:ty) => {
        impl AvgElem for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            #[inline]
            fn div_count(self, n: i64) -> Self {
                <$t>::from_f32(self.to_f32() / <$t>::from_f32(n as f32).to_f32())
            }
        }
    };
}
avg_half!(half::f16);
avg_half!(half::bf16);
impl AvgElem for i64 {
    #[inline]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline]
    fn div_count(self, n: i64) -> Self {
        if n == 0 {
            0
        } else {
            self.wrapping_div(n)
        }
    }
}

fn avg_pool<T: AvgElem>(
    g: &PoolGeom,
    xg: &Nchw,
    og: &Nchw,
    x: &[T],
    out: &mut [T],
    count_include_pad: bool,
    divisor: Option<i64>,
) {
    let (ih, iw) = (xg.h as i64, xg.w as i64);
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let mut h0 = (y * g.s[0]) as i64 - g.p[0] as i64;
                    let mut w0 = (xo * g.s[1]) as i64 - g.p[1] as i64;
                    let mut h1 = (h0 + g.k[0] as i64).min(ih + g.p[0] as i64);
                    let mut w1 = (w0 + g.k[1] as i64).min(iw + g.p[1] as i64);
                    let pool_size = (h1 - h0) * (w1 - w0);
                    h0 = h0.max(0);
                    w0 = w0.max(0);
                    h1 = h1.min(ih);
                    w1 = w1.min(iw);
                    let o = og.at(n, c, y, xo);
                    if h0 >= h1 || w0 >= w1 {
                        out[o] = T::from_i64(0);
                        continue;
                    }
                    let mut s: Option<T> = None;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            let v = x[xg.at(n, c, h as usize, w as usize)];
                            s = Some(match s {
                                None => v,
                                Some(a) => v.add(a),
                            });
                        }
                    }
                    let div = match divisor {
                        Some(d) => d,
                        None if count_include_pad => pool_size,
                        None => (h1 - h0) * (w1 - w0),
                    };
                    out[o] = s.unwrap_or(T::from_i64(0)).div_count(div);
                }
            }
        }
    }
}

pub(super) fn avg_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (ceil, cip, divisor) = (ctx.bool(4)?, ctx.bool(5)?, ctx.opt_int(6)?);
    if divisor == Some(0) {
        return Err(KernelError::invalid("avg_pool2d: divisor must not be zero"));
    }
    let g = pool_geom(ctx, &x, None, ceil)?;
    ctx.resize(7, &out_sizes(&x, g.oh, g.ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(7)?)?);
    let ([xr], [mut o]) = ctx.io([0], [7])?;
    let dt = x.dtype();
    macro_rules! go {
        ($T:ty) => {
            avg_pool::<$T>(
                &g,
                &xg,
                &og,
                xr.as_slice()?,
                o.as_mut_slice()?,
                cip,
                divisor,
            )
        };
    }
    match dt {
        ScalarType::Float => go!(f32),
        ScalarType::Double => go!(f64),
        ScalarType::Half => go!(half::f16),
        ScalarType::BFloat16 => go!(half::bf16),
        ScalarType::Long => go!(i64),
        _ => return Err(KernelError::dtype(dt, "avg_pool2d")),
    }
    Ok(())
}

/// ExecuTorch's adaptive average pooling: windows `[floor(o·in/out), ceil((o+1)·in/out))`
/// (computed in f32), summed in f32, divided in f32, converted back.
fn adaptive_avg<T: Element>(x: &[T], out: &mut [T], xg: &Nchw, og: &Nchw) {
    let start = |o: usize, os: usize, is: usize| ((o * is) as f32 / os as f32).floor() as usize;
    let end = |o: usize, os: usize, is: usize| (((o + 1) * is) as f32 / os as f32).ceil() as usize;
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..og.h {
                let (h0, h1) = (start(y, og.h, xg.h), end(y, og.h, xg.h).min(xg.h));
                for xo in 0..og.w {
                    let (w0, w1) = (start(xo, og.w, xg.w), end(xo, og.w, xg.w).min(xg.w));
                    let mut s = 0f32;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            s += x[xg.at(n, c, h, w)].to_f64() as f32;
                        }
                    }
                    let cnt = (h1.saturating_sub(h0) * w1.saturating_sub(w0)) as f32;
                    out[og.at(n, c, y, xo)] = T::from_f64((s / cnt) as f64);
                }
            }
        }
    }
}

pub(super) fn adaptive_avg_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let xg = Nchw::of(&x)?;
    let [oh, ow] = pair(ctx, 1, None, "output_size")?;
    if oh == 0 || ow == 0 || xg.h == 0 || xg.w == 0 {
        return Err(KernelError::shape(
            "adaptive_avg_pool2d: empty input or output size",
        ));
    }
    ctx.resize(2, &out_sizes(&x, oh, ow))?;
    let og = Nchw::of(ctx.tensor(2)?)?;
    let ([xr], [mut o]) = ctx.io([0], [2])?;
    let dt = x.dtype();
    if !AVG.contains(dt) {
        return Err(KernelError::dtype(dt, "adaptive_avg_pool2d"));
    }
    dispatch_dtype!(dt, T => adaptive_avg::<T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og),
        _ => return Err(KernelError::dtype(dt, "adaptive_avg_pool2d")));
    Ok(())
}
