//! `cortex_m::quantize_per_tensor.out` and `cortex_m::dequantize_per_tensor.out`: float ↔ int8
//! per tensor, elementwise over memory (input and output share a dim order), as the backend's
//! reference computes them (those of the `quantized_decomposed` Python operators):
//! `clamp(round_half_even(x · f32(1 / scale)) + zp)` and `(f32(q) − zp) · f32(scale)`.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    register_op!(
        S,
        r,
        "cortex_m::quantize_per_tensor.out",
        Kernel::with_check(quantize_out, check_quantize).dtypes(DtypeSet::of(&[ScalarType::Float]))
    );
    register_op!(
        S,
        r,
        "cortex_m::dequantize_per_tensor.out",
        Kernel::with_check(dequantize_out, check_dequantize)
            .dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
}

/// Arguments: input, scale, zero_point, quant_min, quant_max, dtype, out.
fn check_common<'p>(
    a: &impl ArgAccess<'p>,
    from: ScalarType,
    to: ScalarType,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(0)?, a.tensor(6)?);
    if x.dtype() != from || o.dtype() != to {
        return Err(KernelError::unsupported(
            "cortex_m (de)quantize: only float32 <-> int8",
        ));
    }
    if a.opt_dtype(5)? != Some(ScalarType::Char) {
        return Err(KernelError::unsupported("cortex_m (de)quantize: only int8"));
    }
    if x.sizes() != o.sizes() || x.dim_order() != o.dim_order() {
        return Err(KernelError::shape(
            "cortex_m (de)quantize: input and output layouts differ",
        ));
    }
    let (qmin, qmax) = (a.int(3)?, a.int(4)?);
    if !(-128..=127).contains(&qmin) || !(-128..=127).contains(&qmax) || qmin > qmax {
        return Err(KernelError::invalid(
            "cortex_m (de)quantize: bad int8 range",
        ));
    }
    let scale = a.double(1)?;
    if !(scale.is_finite() && scale > 0.0) {
        return Err(KernelError::invalid(
            "cortex_m (de)quantize: scale must be positive",
        ));
    }
    Ok(())
}

fn check_quantize(a: &ArgView) -> Result<(), KernelError> {
    check_common(a, ScalarType::Float, ScalarType::Char)
}

fn check_dequantize(a: &ArgView) -> Result<(), KernelError> {
    check_common(a, ScalarType::Char, ScalarType::Float)
}

fn quantize_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_common(ctx, ScalarType::Float, ScalarType::Char)?;
    let (scale, zp, qmin, qmax) = (ctx.double(1)?, ctx.int(2)?, ctx.int(3)?, ctx.int(4)?);
    let ([x], [mut o]) = ctx.io([0], [6])?;
    quantize(
        x.as_slice()?,
        o.as_mut_slice()?,
        scale,
        zp,
        qmin as i32,
        qmax as i32,
    );
    Ok(())
}

fn dequantize_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_common(ctx, ScalarType::Char, ScalarType::Float)?;
    let (scale, zp) = (ctx.double(1)?, ctx.int(2)?);
    let ([q], [mut o]) = ctx.io([0], [6])?;
    dequantize(q.as_slice()?, o.as_mut_slice()?, scale, zp);
    Ok(())
}

/// `round_half_even(x · f32(1 / scale))` (a float32 product, the reciprocal formed in double
/// and rounded once), plus the zero point, clamped.
pub fn quantize(x: &[f32], out: &mut [i8], scale: f64, zp: i64, qmin: i32, qmax: i32) {
    let inv = (1.0 / scale) as f32;
    let zp = zp as f32;
    for (o, &v) in out.iter_mut().zip(x) {
        let q = round_half_even(v * inv) + zp;
        // NaN (whose int cast the reference leaves to the platform) becomes qmin.
        *o = if q.is_nan() {
            qmin
        } else {
            (q.max(qmin as f32).min(qmax as f32)) as i32
        } as i8;
    }
}

/// `(f32(q) − zp) · f32(scale)`.
pub fn dequantize(q: &[i8], out: &mut [f32], scale: f64, zp: i64) {
    let (scale, zp) = (scale as f32, zp as f32);
    for (o, &v) in out.iter_mut().zip(q) {
        *o = (f32::from(v) - zp) * scale;
    }
}

/// Round to nearest, ties to even (`libm`'s, so the same with and without `std`).
pub fn round_half_even(x: f32) -> f32 {
    libm::roundevenf(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_half_to_even() {
        for (x, want) in [
            (0.5f32, 0.0f32),
            (1.5, 2.0),
            (2.5, 2.0),
            (-2.5, -2.0),
            (-0.4, -0.0),
            (3.7, 4.0),
            (1e9, 1e9),
        ] {
            assert_eq!(round_half_even(x).to_bits(), want.to_bits(), "{x}");
        }
        for i in -10_000..10_000 {
            let x = i as f32 * 0.173;
            assert_eq!(round_half_even(x), x.round_ties_even(), "{x}");
        }
    }

    #[test]
    fn quantizes_and_dequantizes() {
        let mut q = [0i8; 5];
        quantize(
            &[0.0, 0.05, -1.0, 100.0, f32::NAN],
            &mut q,
            0.1,
            3,
            -128,
            127,
        );
        // 0.05 · 10 is 0.5 in f32, a tie that rounds to 0.
        assert_eq!(q, [3, 3, -7, 127, -128]);
        let mut f = [0f32; 2];
        dequantize(&[3, -7], &mut f, 0.1, 3);
        assert_eq!(f, [0.0, -1.0]);
    }
}
