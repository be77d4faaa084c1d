//! Affine dequantization: `dequantize_per_tensor` (scalar and tensor params),
//! `dequantize_per_channel` and `dequantize_per_token`.

use half::f16;
use pteron_core::{ArgAccess, ArgView, Element, KernelContext, KernelError, ScalarType};

use super::cast::F32Cast;
use super::quantize::{check_scalar_param_tensors, quant_bounds, tokens_of};
use crate::util::require_contiguous;

fn check_dequantize_common<'p>(
    a: &impl ArgAccess<'p>,
    input: usize,
    qmin: usize,
    dtype: usize,
    out_dtype: Option<usize>,
    out: usize,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if quant_bounds(x.dtype()).is_none() {
        return Err(KernelError::dtype(x.dtype(), "dequantize input"));
    }
    match a.opt_dtype(dtype)? {
        Some(dt) if dt == x.dtype() => {}
        Some(dt) => {
            return Err(KernelError::dtype_mismatch(
                "dequantize",
                "input",
                dt,
                x.dtype(),
            ))
        }
        None => {
            return Err(KernelError::invalid(format!(
                "dequantize: input is {}, dtype argument None",
                x.dtype()
            )))
        }
    }
    if let Some(i) = out_dtype {
        if let Some(od) = a.opt_dtype(i)? {
            if od != o.dtype() {
                return Err(KernelError::dtype_mismatch(
                    "dequantize",
                    "out",
                    od,
                    o.dtype(),
                ));
            }
        }
    }
    if !matches!(
        o.dtype(),
        ScalarType::Float | ScalarType::Double | ScalarType::Half
    ) {
        return Err(KernelError::dtype(o.dtype(), "dequantize output"));
    }
    let (qmin, qmax) = (a.int(qmin)?, a.int(qmin + 1)?);
    if qmin > qmax {
        return Err(KernelError::invalid(format!(
            "dequantize: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    require_contiguous("dequantize", &[x, o])
}

/// Dequantizes in blocks like [`quantize_blocks`]; `param(ch) -> (f32 scale, zero point)`.
fn dequantize_blocks<I: Element + Copy + Into<i64>, O: F32Cast>(
    x: &[I],
    out: &mut [O],
    block: usize,
    channels: usize,
    param: &dyn Fn(usize) -> (f32, i64),
) {
    if block == 0 {
        return;
    }
    for (bi, (xs, os)) in x.chunks(block).zip(out.chunks_mut(block)).enumerate() {
        let (scale, zp) = param(bi % channels);
        let zp = zp as i32 as i64;
        for (o, &v) in os.iter_mut().zip(xs) {
            // (q - i32(zp)) is an int; the product with the float scale is a float.
            *o = O::from_f32((v.into() - zp) as i32 as f32 * scale);
        }
    }
}

fn dispatch_dequantize(
    ctx: &mut KernelContext,
    input: usize,
    out: usize,
    block: usize,
    channels: usize,
    params: DqParams,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(input)?;
    ctx.resize(out, x.sizes())?;
    macro_rules! run {
        ($x:ident, $o:ident, $param:expr) => {{
            macro_rules! ins {
                ($O:ty) => {{
                    let os = $o.as_mut_slice::<$O>()?;
                    match $x.info.dtype() {
                        ScalarType::Byte => {
                            dequantize_blocks($x.as_slice::<u8>()?, os, block, channels, $param)
                        }
                        ScalarType::Char => {
                            dequantize_blocks($x.as_slice::<i8>()?, os, block, channels, $param)
                        }
                        ScalarType::Short => {
                            dequantize_blocks($x.as_slice::<i16>()?, os, block, channels, $param)
                        }
                        ScalarType::Int => {
                            dequantize_blocks($x.as_slice::<i32>()?, os, block, channels, $param)
                        }
                        dt => return Err(KernelError::dtype(dt, "dequantize input")),
                    }
                }};
            }
            match $o.info.dtype() {
                ScalarType::Float => ins!(f32),
                ScalarType::Double => ins!(f64),
                ScalarType::Half => ins!(f16),
                dt => return Err(KernelError::dtype(dt, "dequantize output")),
            }
        }};
    }
    match params {
        DqParams::Scalar(scale, zp) => {
            let ([x], [mut o]) = ctx.io([input], [out])?;
            run!(x, o, &|_| (scale as f32, zp));
        }
        DqParams::Tensors(s, z) => {
            let scale_f64 = ctx.tensor(s)?.dtype() == ScalarType::Double;
            match z {
                Some(z) => {
                    let ([x, s, z], [mut o]) = ctx.io([input, s, z], [out])?;
                    let zd = z.as_slice::<i64>()?;
                    if zd.len() < channels {
                        return Err(KernelError::shape(
                            "dequantize: fewer zero points than channels",
                        ));
                    }
                    if scale_f64 {
                        let sd = s.as_slice::<f64>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c] as f32, zd[c]));
                    } else {
                        let sd = s.as_slice::<f32>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c], zd[c]));
                    }
                }
                None => {
                    let ([x, s], [mut o]) = ctx.io([input, s], [out])?;
                    if scale_f64 {
                        let sd = s.as_slice::<f64>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c] as f32, 0));
                    } else {
                        let sd = s.as_slice::<f32>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c], 0));
                    }
                }
            }
        }
    }
    Ok(())
}

enum DqParams {
    Scalar(f64, i64),
    /// Scales (Double or Float) and optional Long zero points.
    Tensors(usize, Option<usize>),
}

pub(super) fn check_dequantize_per_tensor(a: &ArgView) -> Result<(), KernelError> {
    a.double(1)?;
    a.int(2)?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

pub(super) fn dequantize_per_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    let (scale, zp) = (ctx.double(1)?, ctx.int(2)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_dequantize(ctx, 0, 7, n, 1, DqParams::Scalar(scale, zp))
}

pub(super) fn check_dequantize_per_tensor_t(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double, ScalarType::Float])?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

pub(super) fn dequantize_per_tensor_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double, ScalarType::Float])?;
    if ctx.tensor(1)?.numel() != 1 || ctx.tensor(2)?.numel() != 1 {
        return Err(KernelError::shape(
            "dequantize_per_tensor: scale and zero point must have one element",
        ));
    }
    let n = ctx.tensor(0)?.numel();
    dispatch_dequantize(ctx, 0, 7, n, 1, DqParams::Tensors(1, Some(2)))
}

fn check_channel_params<'p>(a: &impl ArgAccess<'p>, s: usize, z: usize) -> Result<(), KernelError> {
    let st = a.tensor(s)?;
    if !matches!(st.dtype(), ScalarType::Double | ScalarType::Float) {
        return Err(KernelError::dtype(st.dtype(), "dequantize scales"));
    }
    if let Some(zt) = a.opt_tensor(z)? {
        // ExecuTorch accepts Int zero points but reads them as int64: refused here.
        if zt.dtype() != ScalarType::Long {
            return Err(KernelError::dtype(zt.dtype(), "dequantize zero points"));
        }
    }
    Ok(())
}

pub(super) fn check_dequantize_per_channel(a: &ArgView) -> Result<(), KernelError> {
    check_channel_params(a, 1, 2)?;
    a.int(3)?;
    check_dequantize_common(a, 0, 4, 6, Some(7), 8)
}

pub(super) fn dequantize_per_channel_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 4, 6, Some(7), 8)?;
    check_channel_params(ctx, 1, 2)?;
    let x = *ctx.tensor(0)?;
    let axis = x.dim_index(ctx.int(3)?)?;
    let channels = if x.rank() == 0 { 1 } else { x.size(axis) };
    let zp = if ctx.is_none(2)? { None } else { Some(2) };
    if ctx.tensor(1)?.numel() != channels
        || zp.map_or(Ok(false), |z| ctx.tensor(z).map(|t| t.numel() != channels))?
    {
        return Err(KernelError::shape(format!(
            "dequantize_per_channel: {channels} channels need as many scales and zero points"
        )));
    }
    let block: usize = x.sizes().get(axis + 1..).map_or(1, |s| s.iter().product());
    dispatch_dequantize(ctx, 0, 8, block, channels, DqParams::Tensors(1, zp))
}

pub(super) fn check_dequantize_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_channel_params(a, 1, 2)?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

pub(super) fn dequantize_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    check_channel_params(ctx, 1, 2)?;
    let (tokens, dim) = tokens_of(ctx.tensor(0)?);
    if ctx.tensor(1)?.numel() != tokens || ctx.tensor(2)?.numel() != tokens {
        return Err(KernelError::shape(format!(
            "dequantize_per_token: {tokens} tokens need as many scales and zero points"
        )));
    }
    dispatch_dequantize(ctx, 0, 7, dim, tokens.max(1), DqParams::Tensors(1, Some(2)))
}
