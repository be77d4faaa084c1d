//! The Cortex-M backend's elementwise int8 operators, as its reference computes them:
//!
//! - `cortex_m::quantized_mul.out`: `(a − zp_a) · (b − zp_b)` in `i32`, requantized
//!   (`requantize_cmsis`) with the output's multiplier and shift, plus the output zero point,
//!   clamped to int8. Operands of the output's shape and dim order, or (channels-last) one
//!   holding one value per channel, as `quantized_add`.
//! - `cortex_m::quantized_activation.out`: a 256-entry int8 table the exporter computed from
//!   the activation (sigmoid, tanh, …) and the quantization: `out = lut[x + 128]`.
//! - `cortex_m::minimum.out`, `cortex_m::maximum.out`: `torch.minimum` / `torch.maximum` of
//!   int8 tensors: same layout, a one-element operand, or a per-channel one.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

use crate::add::{at, reads, Reads};
use crate::args::int32;
use crate::requant::{requantize, to_i8};

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    let int8 = DtypeSet::of(&[ScalarType::Char]);
    register_op!(
        S,
        r,
        "cortex_m::quantized_mul.out",
        Kernel::with_check(mul_out, check_mul).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::quantized_activation.out",
        Kernel::with_check(activation_out, check_activation).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::minimum.out",
        Kernel::with_check(minimum_out, check_extremum).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::maximum.out",
        Kernel::with_check(maximum_out, check_extremum).dtypes(int8)
    );
}

fn int8<'p>(a: &impl ArgAccess<'p>, args: &[usize], op: &'static str) -> Result<(), KernelError> {
    for &i in args {
        let t = a.tensor(i)?;
        if t.dtype() != ScalarType::Char {
            return Err(KernelError::dtype(t.dtype(), op));
        }
    }
    Ok(())
}

// ---- quantized_mul: [self, self_zp, other, other_zp, out_zp, multiplier, shift, out] ----

const MUL: &str = "cortex_m quantized_mul";

/// `quantized_mul`'s parameters.
#[derive(Clone, Copy, Debug)]
pub struct Mul {
    pub a_zero_point: i32,
    pub b_zero_point: i32,
    pub out_zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
    pub a_reads: Reads,
    pub b_reads: Reads,
}

fn mul_params<'p>(a: &impl ArgAccess<'p>) -> Result<Mul, KernelError> {
    int8(a, &[0, 2, 7], MUL)?;
    let o = a.tensor(7)?;
    Ok(Mul {
        a_zero_point: int32(a, 1, MUL)?,
        b_zero_point: int32(a, 3, MUL)?,
        out_zero_point: int32(a, 4, MUL)?,
        multiplier: int32(a, 5, MUL)?,
        shift: int32(a, 6, MUL)?,
        a_reads: reads(a.tensor(0)?, o, MUL)?,
        b_reads: reads(a.tensor(2)?, o, MUL)?,
    })
}

fn check_mul(a: &ArgView) -> Result<(), KernelError> {
    mul_params(a).map(|_| ())
}

fn mul_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = mul_params(ctx)?;
    let ([x, y], [mut o]) = ctx.io([0, 2], [7])?;
    mul(&p, x.as_slice()?, y.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn mul(p: &Mul, x: &[i8], y: &[i8], out: &mut [i8]) {
    for (i, o) in out.iter_mut().enumerate() {
        let a = i32::from(at(x, p.a_reads, i)).wrapping_sub(p.a_zero_point);
        let b = i32::from(at(y, p.b_reads, i)).wrapping_sub(p.b_zero_point);
        let r = requantize(a.wrapping_mul(b), p.multiplier, p.shift);
        *o = to_i8(r, p.out_zero_point, -128, 127);
    }
}

// ---- quantized_activation: [input, lut, out] ----

const ACTIVATION: &str = "cortex_m quantized_activation";

fn check_activation(a: &ArgView) -> Result<(), KernelError> {
    activation_args(a)
}

fn activation_args<'p>(a: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    int8(a, &[0, 1, 2], ACTIVATION)?;
    let (x, lut, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    if lut.numel() != 256 {
        return Err(KernelError::invalid(
            "cortex_m quantized_activation: the table needs 256 entries",
        ));
    }
    if x.sizes() != o.sizes() || x.dim_order() != o.dim_order() {
        return Err(KernelError::shape(
            "cortex_m quantized_activation: output unlike the input",
        ));
    }
    Ok(())
}

fn activation_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    activation_args(ctx)?;
    let ([x, lut], [mut o]) = ctx.io([0, 1], [2])?;
    let lut: &[i8; 256] = lut
        .as_slice::<i8>()?
        .try_into()
        .map_err(|_| KernelError::invalid("cortex_m quantized_activation: table size"))?;
    activation(lut, x.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn activation(lut: &[i8; 256], x: &[i8], out: &mut [i8]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = lut[(i32::from(v) + 128) as usize];
    }
}

// ---- minimum / maximum: [self, other, out] ----

const EXTREMUM: &str = "cortex_m minimum/maximum";

/// How each operand is read: `reads` for matching or per-channel operands; a one-element
/// operand is repeated.
fn extremum_reads<'p>(a: &impl ArgAccess<'p>) -> Result<[Reads; 2], KernelError> {
    int8(a, &[0, 1, 2], EXTREMUM)?;
    let o = a.tensor(2)?;
    let mut r = [Reads::Same; 2];
    for (k, slot) in r.iter_mut().enumerate() {
        let t = a.tensor(k)?;
        *slot = if t.numel() == 1 && o.numel() != 1 {
            Reads::PerChannel(1)
        } else {
            reads(t, o, EXTREMUM)?
        };
    }
    Ok(r)
}

fn check_extremum(a: &ArgView) -> Result<(), KernelError> {
    extremum_reads(a).map(|_| ())
}

fn extremum(ctx: &mut KernelContext, pick: fn(i8, i8) -> i8) -> Result<(), KernelError> {
    let [ra, rb] = extremum_reads(ctx)?;
    let ([x, y], [mut o]) = ctx.io([0, 1], [2])?;
    let (x, y) = (x.as_slice::<i8>()?, y.as_slice::<i8>()?);
    for (i, v) in o.as_mut_slice::<i8>()?.iter_mut().enumerate() {
        *v = pick(at(x, ra, i), at(y, rb, i));
    }
    Ok(())
}

fn minimum_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    extremum(ctx, core::cmp::min)
}

fn maximum_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    extremum(ctx, core::cmp::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `quantized_mul` against the reference's formula written out: product of the offset
    /// operands, `requantize_cmsis`, plus the output zero point, clamped.
    #[test]
    fn mul_matches_the_formula() {
        let x: [i8; 6] = [-128, -3, 0, 5, 77, 127];
        let y: [i8; 6] = [127, 9, -128, -1, 33, 127];
        let p = Mul {
            a_zero_point: -5,
            b_zero_point: 3,
            out_zero_point: -2,
            multiplier: 1_518_500_250,
            shift: -8,
            a_reads: Reads::Same,
            b_reads: Reads::Same,
        };
        let mut out = [0i8; 6];
        mul(&p, &x, &y, &mut out);
        for i in 0..6 {
            let prod = (i32::from(x[i]) + 5) * (i32::from(y[i]) - 3);
            // round(prod · m / 2^31) then a rounding shift by 8 (ties away from zero).
            let q31 = ((i64::from(prod) * 1_518_500_250 + (1 << 30)) >> 31) as f64;
            let want = ((q31 / 256.0).abs() + 0.5).floor().copysign(q31 / 256.0) as i32;
            let want = (want - 2).clamp(-128, 127) as i8;
            assert_eq!(out[i], want, "{i}");
        }
    }

    #[test]
    fn activation_looks_up_the_table() {
        let lut: [i8; 256] = core::array::from_fn(|i| (255 - i) as u8 as i8);
        let mut out = [0i8; 3];
        activation(&lut, &[-128, 0, 127], &mut out);
        assert_eq!(out, [-1, 127u8 as i8, 0]);
    }
}
