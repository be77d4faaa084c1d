//! `choose_qparams_per_token_asymmetric`: per-token scale and zero point from the row's min
//! and max.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::{ArgAccess, ArgView, KernelContext, KernelError, ScalarType};

use super::quantize::tokens_of;
use crate::util::{require_contiguous, require_rank};

const SMALL_SCALE_THRESHOLD: f32 = 6.1e-5;

/// ExecuTorch's `calculate_scale_and_zero_point` (op_choose_qparams.cpp), step for step.
fn scale_and_zero_point(mut min: f32, mut max: f32, qmin: i32, qmax: i32) -> (f64, i64) {
    min = min.min(0.0);
    max = max.max(0.0);
    let mut scale = (max as f64 - min as f64) / (qmax - qmin) as f64;
    if scale as f32 == 0.0 || (1.0f32 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale < SMALL_SCALE_THRESHOLD as f64 {
        let org = scale as f32;
        scale = SMALL_SCALE_THRESHOLD as f64;
        if min == 0.0 {
            max = SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
        } else if max == 0.0 {
            min = -SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
        } else {
            let amp = SMALL_SCALE_THRESHOLD / org;
            min *= amp;
            max *= amp;
        }
    }
    let zp_min = qmin as f64 - min as f64 / scale;
    let zp_max = qmax as f64 - max as f64 / scale;
    let err_min = (qmin.abs() as f64) - (min as f64 / scale).abs();
    let err_max = (qmax.abs() as f64) - (max as f64 / scale).abs();
    let initial = if err_min < err_max { zp_min } else { zp_max };
    let zp = if initial < qmin as f64 {
        qmin as i64
    } else if initial > qmax as f64 {
        qmax as i64
    } else {
        (initial as f32).round_ties_even() as i64
    };
    (scale, zp)
}

pub(super) fn check_choose_qparams_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_choose_qparams(a)
}

fn check_choose_qparams<'p>(a: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let (x, s, z) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
    if x.dtype() != ScalarType::Float {
        return Err(KernelError::dtype(x.dtype(), "choose_qparams input"));
    }
    if s.dtype() != ScalarType::Double {
        return Err(KernelError::dtype(s.dtype(), "choose_qparams scale_out"));
    }
    if z.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(
            z.dtype(),
            "choose_qparams zero_point_out",
        ));
    }
    let op = "choose_qparams_per_token_asymmetric";
    if x.rank() == 0 {
        return Err(KernelError::shape(format!("{op}: 0-d input (no tokens)")));
    }
    require_rank(op, x.rank(), &[("scale_out", s), ("zero_point_out", z)])?;
    require_contiguous("choose_qparams", &[x, s, z])
}

pub(super) fn choose_qparams_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_choose_qparams(ctx)?;
    let x = *ctx.tensor(0)?;
    let mut sz = x.dims();
    if let Some(l) = sz.as_mut_slice().last_mut() {
        *l = 1;
    }
    ctx.resize(2, &sz)?;
    ctx.resize(3, &sz)?;
    let (tokens, dim) = tokens_of(&x);
    let ([x], [mut s, mut z]) = ctx.io([0], [2, 3])?;
    let xs = x.as_slice::<f32>()?;
    let ss = s.as_mut_slice::<f64>()?;
    let zs = z.as_mut_slice::<i64>()?;
    for t in 0..tokens {
        let row = &xs[t * dim..(t + 1) * dim];
        // std::min_element / std::max_element: the first extreme by `<`.
        let (mut mn, mut mx) = match row.first() {
            Some(&v) => (v, v),
            None => (0.0, 0.0),
        };
        for &v in row {
            if v < mn {
                mn = v;
            }
            if mx < v {
                mx = v;
            }
        }
        let (scale, zp) = scale_and_zero_point(mn, mx, -128, 127);
        ss[t] = scale;
        zs[t] = zp;
    }
    Ok(())
}
