//! Affine quantization: `quantize_per_tensor` (scalar and tensor params), `quantize_per_channel`
//! and `quantize_per_token`.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use half::f16;
use pteron_core::{
    ArgAccess, ArgView, Element, KernelContext, KernelError, ScalarType, TensorInfo,
};

use crate::util::require_contiguous;

/// Range of the quantized dtype (ExecuTorch's `check_quantize_per_tensor_args`).
pub(super) fn quant_bounds(dt: ScalarType) -> Option<(i64, i64)> {
    Some(match dt {
        ScalarType::Byte => (0, 255),
        ScalarType::Char => (-128, 127),
        ScalarType::Short => (i16::MIN as i64, i16::MAX as i64),
        ScalarType::Int => (i32::MIN as i64, i32::MAX as i64),
        _ => return None,
    })
}

fn check_quantize_common<'p>(
    a: &impl ArgAccess<'p>,
    input: usize,
    qmin: usize,
    dtype: usize,
    out: usize,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if !matches!(
        x.dtype(),
        ScalarType::Float | ScalarType::Double | ScalarType::Half
    ) {
        return Err(KernelError::dtype(x.dtype(), "quantize input"));
    }
    let dt = a
        .opt_dtype(dtype)?
        .ok_or_else(|| KernelError::invalid("quantize: dtype is None"))?;
    if o.dtype() != dt {
        return Err(KernelError::dtype_mismatch(
            "quantize",
            "out",
            dt,
            o.dtype(),
        ));
    }
    let (lo, hi) = quant_bounds(dt).ok_or_else(|| KernelError::dtype(dt, "quantize output"))?;
    let (qmin, qmax) = (a.int(qmin)?, a.int(qmin + 1)?);
    if qmin < lo || qmax > hi || qmin > qmax {
        return Err(KernelError::invalid(format!(
            "quantize: [{qmin}, {qmax}] is not a range within that of {dt}"
        )));
    }
    require_contiguous("quantize", &[x, o])
}

/// `f32(x · inv_scale)` as ExecuTorch's `quantize_val` forms it for each input type.
trait QIn: Element + Copy {
    fn scaled(self, inv: f32) -> f32;
}
impl QIn for f32 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        inv * self
    }
}
impl QIn for f64 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        (inv as f64 * self) as f32
    }
}
impl QIn for f16 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        inv * self.to_f32()
    }
}

/// Quantized outputs.
trait QOut: Element + Copy {
    fn from_q(q: i64) -> Self;
}
macro_rules! qout {
    ($($t:ty),*) => {$(impl QOut for $t {
        #[inline(always)]
        fn from_q(q: i64) -> Self { q as $t }
    })*};
}
qout!(u8, i8, i16, i32);

#[inline(always)]
fn quantize_val<I: QIn>(x: I, inv: f32, zp: i32, qmin: i64, qmax: i64) -> i64 {
    // int32 + float is a float addition in C++; the sum then truncates to int64.
    let q = (zp as f32 + x.scaled(inv).round_ties_even()) as i64;
    q.clamp(qmin, qmax)
}

/// Quantizes `x` in blocks of `block` elements; block `i` uses channel `(i % channels)`'s
/// parameters from `param(ch) -> (scale, zero_point)`.
fn quantize_blocks<I: QIn, O: QOut>(
    x: &[I],
    out: &mut [O],
    block: usize,
    channels: usize,
    qmin: i64,
    qmax: i64,
    param: &dyn Fn(usize) -> (f64, i64),
) {
    if block == 0 {
        return;
    }
    for (bi, (xs, os)) in x.chunks(block).zip(out.chunks_mut(block)).enumerate() {
        let (scale, zp) = param(bi % channels);
        let inv = 1.0f32 / scale as f32;
        for (o, &v) in os.iter_mut().zip(xs) {
            *o = O::from_q(quantize_val(v, inv, zp as i32, qmin, qmax));
        }
    }
}

fn dispatch_quantize(
    ctx: &mut KernelContext,
    input: usize,
    out: usize,
    block: usize,
    channels: usize,
    qmin: i64,
    qmax: i64,
    params: Params,
) -> Result<(), KernelError> {
    // Checked at load too; here again because an Int value can be written at run time
    // (`i64::clamp` panics on an inverted range).
    if qmin > qmax {
        return Err(KernelError::invalid(format!(
            "quantize: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    let x = *ctx.tensor(input)?;
    ctx.resize(out, x.sizes())?;
    macro_rules! run {
        ($x:ident, $o:ident, $param:expr) => {{
            macro_rules! outs {
                ($I:ty) => {{
                    let xs = $x.as_slice::<$I>()?;
                    match $o.info.dtype() {
                        ScalarType::Byte => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<u8>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Char => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i8>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Short => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i16>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Int => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i32>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        dt => return Err(KernelError::dtype(dt, "quantize output")),
                    }
                }};
            }
            match $x.info.dtype() {
                ScalarType::Float => outs!(f32),
                ScalarType::Double => outs!(f64),
                ScalarType::Half => outs!(f16),
                dt => return Err(KernelError::dtype(dt, "quantize input")),
            }
        }};
    }
    match params {
        Params::Scalar(scale, zp) => {
            let ([x], [mut o]) = ctx.io([input], [out])?;
            run!(x, o, &|_| (scale, zp));
        }
        Params::Tensors(s, z) => {
            let ([x, s, z], [mut o]) = ctx.io([input, s, z], [out])?;
            let (sd, zd) = (s.as_slice::<f64>()?, z.as_slice::<i64>()?);
            if sd.len() < channels || zd.len() < channels {
                return Err(KernelError::shape(
                    "quantize: fewer parameters than channels",
                ));
            }
            run!(x, o, &|c| (sd[c], zd[c]));
        }
    }
    Ok(())
}

enum Params {
    Scalar(f64, i64),
    /// Argument positions of Double scales and Long zero points.
    Tensors(usize, usize),
}

pub(super) fn check_quantize_per_tensor(a: &ArgView) -> Result<(), KernelError> {
    a.double(1)?;
    a.int(2)?;
    check_quantize_common(a, 0, 3, 5, 6)
}

pub(super) fn quantize_per_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    let (scale, zp, qmin, qmax) = (ctx.double(1)?, ctx.int(2)?, ctx.int(3)?, ctx.int(4)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_quantize(ctx, 0, 6, n, 1, qmin, qmax, Params::Scalar(scale, zp))
}

/// Per-tensor parameters given as one-element tensors (Double scale, Long zero point).
pub(super) fn check_scalar_param_tensors<'p>(
    a: &impl ArgAccess<'p>,
    s: usize,
    z: usize,
    scale_dtypes: &[ScalarType],
) -> Result<(), KernelError> {
    let (st, zt) = (a.tensor(s)?, a.tensor(z)?);
    if !scale_dtypes.contains(&st.dtype()) {
        return Err(KernelError::dtype(st.dtype(), "quantization scale"));
    }
    if zt.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(zt.dtype(), "quantization zero point"));
    }
    Ok(())
}

pub(super) fn check_quantize_per_tensor_t(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    check_quantize_common(a, 0, 3, 5, 6)
}

pub(super) fn quantize_per_tensor_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    if ctx.tensor(1)?.numel() != 1 || ctx.tensor(2)?.numel() != 1 {
        return Err(KernelError::shape(
            "quantize_per_tensor: scale and zero point must have one element",
        ));
    }
    let (qmin, qmax) = (ctx.int(3)?, ctx.int(4)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_quantize(ctx, 0, 6, n, 1, qmin, qmax, Params::Tensors(1, 2))
}

pub(super) fn check_quantize_per_channel(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    a.int(3)?;
    check_quantize_common(a, 0, 4, 6, 7)
}

pub(super) fn quantize_per_channel_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 4, 6, 7)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    let x = *ctx.tensor(0)?;
    let axis = x.dim_index(ctx.int(3)?)?;
    let channels = if x.rank() == 0 { 1 } else { x.size(axis) };
    if ctx.tensor(1)?.numel() != channels || ctx.tensor(2)?.numel() != channels {
        return Err(KernelError::shape(format!(
            "quantize_per_channel: {channels} channels need as many scales and zero points"
        )));
    }
    let block: usize = x.sizes().get(axis + 1..).map_or(1, |s| s.iter().product());
    let (qmin, qmax) = (ctx.int(4)?, ctx.int(5)?);
    dispatch_quantize(
        ctx,
        0,
        7,
        block,
        channels,
        qmin,
        qmax,
        Params::Tensors(1, 2),
    )
}

/// Tokens (every dim but the last) and the last dim of a per-token tensor.
pub(super) fn tokens_of(x: &TensorInfo) -> (usize, usize) {
    match x.sizes().split_last() {
        Some((&last, rest)) => (rest.iter().product(), last),
        None => (1, 1),
    }
}

pub(super) fn check_quantize_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    check_quantize_common(a, 0, 3, 5, 6)
}

pub(super) fn quantize_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    let (tokens, dim) = tokens_of(ctx.tensor(0)?);
    if ctx.tensor(1)?.numel() != tokens || ctx.tensor(2)?.numel() != tokens {
        return Err(KernelError::shape(format!(
            "quantize_per_token: {tokens} tokens need as many scales and zero points"
        )));
    }
    let (qmin, qmax) = (ctx.int(3)?, ctx.int(4)?);
    dispatch_quantize(
        ctx,
        0,
        6,
        dim,
        tokens.max(1),
        qmin,
        qmax,
        Params::Tensors(1, 2),
    )
}
