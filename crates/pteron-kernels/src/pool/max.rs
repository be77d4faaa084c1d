//! `max_pool2d_with_indices`: running maximum in the element type, first maximum wins.

use super::geom::{inside_taps, out_sizes, pool_geom, Nchw, PoolGeom};
use crate::linalg::dispatch_acc as dispatch_real;
use core::cmp::Ordering;
use pteron_core::{ArgAccess, Element, KernelContext, KernelError};

/// ExecuTorch's `kernel_reduction_then_map_2d` for max pooling: the first in-bounds element
/// of the (dilated) window starts the running maximum, a later one replaces it when greater.
fn max_pool<T: Element + PartialOrd>(
    g: &PoolGeom,
    xg: &Nchw,
    og: &Nchw,
    x: &[T],
    out: &mut [T],
    idx: &mut [i64],
) {
    let (ih, iw) = (xg.h as i64, xg.w as i64);
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let h0 = (y * g.s[0]) as i64 - g.p[0] as i64;
                    let w0 = (xo * g.s[1]) as i64 - g.p[1] as i64;
                    let mut best: Option<(T, i64)> = None;
                    for ky in inside_taps(h0, g.k[0], g.d[0], ih) {
                        let h = h0 + (ky * g.d[0]) as i64;
                        for kx in inside_taps(w0, g.k[1], g.d[1], iw) {
                            let w = w0 + (kx * g.d[1]) as i64;
                            let v = x[xg.at(n, c, h as usize, w as usize)];
                            let replace = match best {
                                None => true,
                                Some((b, _)) => v.partial_cmp(&b) == Some(Ordering::Greater),
                            };
                            if replace {
                                best = Some((v, h * iw + w));
                            }
                        }
                    }
                    let o = og.at(n, c, y, xo);
                    if let Some((v, i)) = best {
                        out[o] = v;
                        idx[o] = i;
                    } else {
                        out[o] = T::from_i64(0);
                        idx[o] = 0;
                    }
                }
            }
        }
    }
}

pub(super) fn max_pool2d_with_indices_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let ceil = ctx.bool(5)?;
    let g = pool_geom(ctx, &x, Some(4), ceil)?;
    let os = out_sizes(&x, g.oh, g.ow);
    ctx.resize(6, &os)?;
    ctx.resize(7, &os)?;
    let (o_info, i_info) = (*ctx.tensor(6)?, *ctx.tensor(7)?);
    if o_info.dim_order() != i_info.dim_order() {
        return Err(KernelError::unsupported(
            "max_pool2d_with_indices: output and indices of different dim orders",
        ));
    }
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(&o_info)?);
    let ([xr], [mut o, mut ir]) = ctx.io([0], [6, 7])?;
    let dt = x.dtype();
    let idx = ir.as_mut_slice::<i64>()?;
    dispatch_real!(dt, T => max_pool::<T>(&g, &xg, &og, xr.as_slice()?, o.as_mut_slice()?, idx),
        _ => return Err(KernelError::dtype(dt, "max_pool2d_with_indices")));
    Ok(())
}
