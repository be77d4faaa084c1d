//! Binary (and ternary) elementwise ops with PyTorch type promotion and broadcasting:
//! arithmetic, comparisons, logical and bitwise ops, `where`, clamps.
//!
//! Every kernel accepts any dim orders (loads and stores go through strides), 0-d and empty
//! tensors. Tensor and Scalar overloads share one kernel: operands are read as tensor or scalar.

pub mod engine;

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use core::cell::Cell;

use pteron_core::DtypeSet;
use pteron_core::{
    ArgAccess, ArgView, Kernel, KernelContext, KernelError, KernelRegistry, Scalar, ScalarType,
};

use crate::{with_comp, with_float, with_num};
use engine::*;

/// How an op's compute dtype follows from its operands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    /// result_type; the out dtype must be castable from it.
    Arith,
    /// result_type, integers promoted to float32 (true division, atan2).
    TrueDiv,
    /// result_type; the result is bool, stored to any out dtype.
    Cmp,
    /// Operands are read as bool; any out dtype.
    Logical,
    /// result_type, which must be integral or bool.
    Bitwise,
}

const ARITH: u8 = 0;
const TRUEDIV: u8 = 1;
const CMP: u8 = 2;
const LOGICAL: u8 = 3;
const BITWISE: u8 = 4;

fn mode_of(m: u8) -> Mode {
    match m {
        ARITH => Mode::Arith,
        TRUEDIV => Mode::TrueDiv,
        CMP => Mode::Cmp,
        LOGICAL => Mode::Logical,
        _ => Mode::Bitwise,
    }
}

/// The compute dtype of a binary op, checked against the out dtype.
pub(crate) fn binary_common(
    op: &'static str,
    ops: &[Opnd],
    out: ScalarType,
    mode: Mode,
) -> Result<ScalarType, KernelError> {
    require_supported(op, out)?;
    for o in ops {
        require_supported(op, o.dtype())?;
    }
    let rt = result_type_of(ops)?;
    let common = match mode {
        Mode::Arith => rt,
        Mode::TrueDiv => {
            if rt.is_floating() {
                rt
            } else {
                ScalarType::Float
            }
        }
        Mode::Cmp => return Ok(rt),
        Mode::Logical => return Ok(ScalarType::Bool),
        Mode::Bitwise => {
            if !rt.is_integral(true) {
                return Err(KernelError::dtype(rt, op));
            }
            rt
        }
    };
    require_can_cast(op, common, out)?;
    Ok(common)
}

fn check_bin<const A: usize, const B: usize, const OUT: usize, const M: u8>(
    v: &ArgView<'_, '_>,
) -> Result<(), KernelError> {
    let a = Opnd::read(v, A)?;
    let b = Opnd::read(v, B)?;
    binary_common("binary op", &[a, b], out_dtype(v, OUT)?, mode_of(M))?;
    Ok(())
}

/// Reads operands `a`, `b` and the out dtype; returns the compute dtype and broadcast shape.
fn prep2(
    ctx: &KernelContext<'_, '_>,
    op: &'static str,
    a: usize,
    b: usize,
    out: usize,
    mode: Mode,
) -> Result<(ScalarType, pteron_core::Dims), KernelError> {
    let oa = Opnd::read(ctx, a)?;
    let ob = Opnd::read(ctx, b)?;
    let common = binary_common(op, &[oa, ob], out_dtype(ctx, out)?, mode)?;
    let shape = broadcast_opnds(&[oa, ob])?;
    Ok((common, shape))
}

fn zero_div() -> KernelError {
    KernelError::invalid("ZeroDivisionError: integer division by zero")
}

// ---- add / sub / rsub / mul ----

/// PyTorch's CPU mul and true div read a scalar (or 0-d) operand of an f16/bf16 op in float
/// without first rounding it to f16/bf16 (`original_scalar_value<opmath_t>`); other ops and
/// dtypes cast operands to the common dtype first.
fn opmath_scalar(common: ScalarType) -> Option<ScalarType> {
    if matches!(common, ScalarType::Half | ScalarType::BFloat16) {
        None
    } else {
        Some(common)
    }
}

fn alpha_of(
    ctx: &KernelContext<'_, '_>,
    i: usize,
    common: ScalarType,
) -> Result<Scalar, KernelError> {
    let alpha = ctx.scalar(i)?;
    if common.is_integral(true) && alpha.is_floating() {
        return Err(KernelError::invalid(
            "for integral input tensors, argument alpha must not be a floating point number",
        ));
    }
    if common != ScalarType::Bool && matches!(alpha, Scalar::Bool(_)) {
        return Err(KernelError::invalid(
            "boolean alpha only supported for boolean results",
        ));
    }
    Ok(alpha)
}

fn is_one(s: Scalar) -> bool {
    s.to_f64() == 1.0
}

/// add.out / add.Scalar_out: [self, other, alpha, out] → self + alpha * other.
fn add_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "add", 0, 1, 3, Mode::Arith)?;
    let alpha = alpha_of(ctx, 2, common)?;
    let one = is_one(alpha);
    with_num!(comp_kind(common)?, C => {
        let al = C::from_scalar(alpha);
        run2::<C, C>(ctx, 0, 1, 3, &shape, Some(common), |x, y| if one { x.add(y) } else { x.add(al.mul(y)) })
    })
}

/// sub.out / sub.Scalar_out: [self, other, alpha, out] → self - alpha * other.
fn sub_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sub_check(ctx, 0, 1, 3)?;
    let (common, shape) = prep2(ctx, "sub", 0, 1, 3, Mode::Arith)?;
    if common == ScalarType::Bool {
        return Err(KernelError::dtype(
            common,
            "sub: subtraction with two bool tensors is not supported",
        ));
    }
    let alpha = alpha_of(ctx, 2, common)?;
    let one = is_one(alpha);
    with_num!(comp_kind(common)?, C => {
        let al = C::from_scalar(alpha);
        run2::<C, C>(ctx, 0, 1, 3, &shape, Some(common), |x, y| if one { x.sub(y) } else { x.sub(al.mul(y)) })
    })
}

/// rsub.Scalar_out / rsub.Tensor_out: [self, other, alpha, out] → other - alpha * self.
fn rsub_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sub_check(ctx, 0, 1, 3)?;
    let (common, shape) = prep2(ctx, "rsub", 0, 1, 3, Mode::Arith)?;
    if common == ScalarType::Bool {
        return Err(KernelError::dtype(
            common,
            "rsub: subtraction with two bool tensors is not supported",
        ));
    }
    let alpha = alpha_of(ctx, 2, common)?;
    let one = is_one(alpha);
    with_num!(comp_kind(common)?, C => {
        let al = C::from_scalar(alpha);
        run2::<C, C>(ctx, 0, 1, 3, &shape, Some(common), |x, y| if one { y.sub(x) } else { y.sub(al.mul(x)) })
    })
}

/// sub / rsub: any bool operand is an error (as PyTorch's `sub_check`).
fn check_sub<const A: usize, const B: usize, const OUT: usize>(
    v: &ArgView<'_, '_>,
) -> Result<(), KernelError> {
    sub_check(v, A, B, OUT)
}

fn sub_check<'p>(
    v: &impl ArgAccess<'p>,
    a: usize,
    b: usize,
    out: usize,
) -> Result<(), KernelError> {
    let a = Opnd::read(v, a)?;
    let b = Opnd::read(v, b)?;
    if a.dtype() == ScalarType::Bool || b.dtype() == ScalarType::Bool {
        return Err(KernelError::dtype(
            ScalarType::Bool,
            "subtraction with a bool tensor is not supported",
        ));
    }
    binary_common("sub", &[a, b], out_dtype(v, out)?, Mode::Arith).map(|_| ())
}

/// Arithmetic ops PyTorch does not implement for bool (floor_divide, remainder, fmod, pow).
fn check_nobool<const A: usize, const B: usize, const OUT: usize>(
    v: &ArgView<'_, '_>,
) -> Result<(), KernelError> {
    nobool(v, A, B, OUT).map(|_| ())
}

fn nobool<'p>(
    v: &impl ArgAccess<'p>,
    a: usize,
    b: usize,
    out: usize,
) -> Result<ScalarType, KernelError> {
    let c = binary_common(
        "op",
        &[Opnd::read(v, a)?, Opnd::read(v, b)?],
        out_dtype(v, out)?,
        Mode::Arith,
    )?;
    if c == ScalarType::Bool {
        return Err(KernelError::dtype(c, "op is not implemented for bool"));
    }
    Ok(c)
}

/// mul.out / mul.Scalar_out: [self, other, out].
fn mul_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "mul", 0, 1, 2, Mode::Arith)?;
    let in_common = opmath_scalar(common);
    with_num!(comp_kind(common)?, C => run2x::<C, C>(ctx, 0, 1, 2, &shape, in_common, Some(common), |x, y| x.mul(y)))
}

// ---- div ----

/// div.out / div.Scalar_out: [self, other, out], true division.
fn div_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "div", 0, 1, 2, Mode::TrueDiv)?;
    let in_common = opmath_scalar(common);
    with_float!(comp_kind(common)?, C => run2x::<C, C>(ctx, 0, 1, 2, &shape, in_common, Some(common), |x, y| x / y),
        _ => Err(KernelError::dtype(common, "div")))
}

#[derive(Clone, Copy, PartialEq)]
enum Rounding {
    True,
    Trunc,
    Floor,
}

fn rounding_mode<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<Rounding, KernelError> {
    if v.is_none(i)? {
        return Ok(Rounding::True);
    }
    match v.string(i)? {
        "trunc" => Ok(Rounding::Trunc),
        "floor" => Ok(Rounding::Floor),
        m => Err(KernelError::invalid(format!(
            "div: unknown rounding_mode {m:?}"
        ))),
    }
}

fn check_div_mode(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let mode = if rounding_mode(v, 2)? == Rounding::True {
        Mode::TrueDiv
    } else {
        Mode::Arith
    };
    let c = binary_common(
        "div",
        &[Opnd::read(v, 0)?, Opnd::read(v, 1)?],
        out_dtype(v, 3)?,
        mode,
    )?;
    if c == ScalarType::Bool && mode == Mode::Arith {
        return Err(KernelError::dtype(c, "div with rounding_mode"));
    }
    Ok(())
}

/// div.out_mode / div.Scalar_mode_out: [self, other, rounding_mode, out].
fn div_mode_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let rm = rounding_mode(ctx, 2)?;
    let mode = if rm == Rounding::True {
        Mode::TrueDiv
    } else {
        Mode::Arith
    };
    let (common, shape) = prep2(ctx, "div", 0, 1, 3, mode)?;
    match comp_kind(common)? {
        CompKind::Int => {
            let bad = Cell::new(false);
            run2::<i64, i64>(ctx, 0, 1, 3, &shape, Some(common), |x, y| {
                let r = if rm == Rounding::Trunc {
                    if y == 0 {
                        None
                    } else {
                        Some(x.wrapping_div(y))
                    }
                } else {
                    int_div_floor(x, y)
                };
                r.unwrap_or_else(|| {
                    bad.set(true);
                    0
                })
            })?;
            if bad.get() {
                return Err(zero_div());
            }
            Ok(())
        }
        CompKind::Bool => Err(KernelError::dtype(common, "div with rounding_mode")),
        k => with_float!(k, C => run2::<C, C>(ctx, 0, 1, 3, &shape, Some(common), |x, y| match rm {
            Rounding::True => x / y,
            Rounding::Trunc => (x / y).trunc(),
            Rounding::Floor => x.div_floor(y),
        }), _ => unreachable!()),
    }
}

/// floor_divide.out: [self, other, out].
fn floor_divide_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    nobool(ctx, 0, 1, 2)?;
    let (common, shape) = prep2(ctx, "floor_divide", 0, 1, 2, Mode::Arith)?;
    match comp_kind(common)? {
        CompKind::F32 | CompKind::F64 => with_float!(comp_kind(common)?, C =>
            run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x.div_floor(y)), _ => unreachable!()),
        _ => {
            let bad = Cell::new(false);
            run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |x, y| {
                int_div_floor(x, y).unwrap_or_else(|| {
                    bad.set(true);
                    0
                })
            })?;
            if bad.get() {
                return Err(zero_div());
            }
            Ok(())
        }
    }
}

/// remainder.Tensor_out / remainder.Scalar_out: [self, other, out].
///
/// As ExecuTorch's portable kernel (`utils::remainder_override`), which differs from PyTorch:
/// integers take C's `%` (the sign of the dividend: `-3 % 5 == -3`, PyTorch gives 2); floats
/// take the sign of the divisor (`fmod`, plus the divisor when the signs differ), the
/// intermediate held in f32 even for f64.
fn remainder_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    nobool(ctx, 0, 1, 2)?;
    let (common, shape) = prep2(ctx, "remainder", 0, 1, 2, Mode::Arith)?;
    match comp_kind(common)? {
        CompKind::F32 => run2::<f32, f32>(ctx, 0, 1, 2, &shape, Some(common), |a, b| {
            let mut r = a % b;
            if ((a < 0.0) ^ (b < 0.0)) && r != 0.0 {
                r += b;
            }
            r
        }),
        CompKind::F64 => run2::<f64, f64>(ctx, 0, 1, 2, &shape, Some(common), |a, b| {
            let mut r = (a % b) as f32;
            if ((a < 0.0) ^ (b < 0.0)) && r != 0.0 {
                r = (r as f64 + b) as f32;
            }
            r as f64
        }),
        _ => {
            let bad = Cell::new(false);
            run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |x, y| {
                if y == 0 {
                    bad.set(true);
                    0
                } else {
                    x.wrapping_rem(y)
                }
            })?;
            if bad.get() {
                return Err(zero_div());
            }
            Ok(())
        }
    }
}

/// fmod.Tensor_out / fmod.Scalar_out: [self, other, out] (sign of the dividend).
fn fmod_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    nobool(ctx, 0, 1, 2)?;
    let (common, shape) = prep2(ctx, "fmod", 0, 1, 2, Mode::Arith)?;
    match comp_kind(common)? {
        CompKind::F32 | CompKind::F64 => with_float!(comp_kind(common)?, C =>
            run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x % y), _ => unreachable!()),
        _ => {
            let bad = Cell::new(false);
            run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |x, y| {
                if y == 0 {
                    bad.set(true);
                    0
                } else {
                    x.wrapping_rem(y)
                }
            })?;
            if bad.get() {
                return Err(zero_div());
            }
            Ok(())
        }
    }
}

// ---- pow / atan2 / maximum / minimum ----

/// pow.Tensor_Tensor_out, pow.Tensor_Scalar_out, pow.Scalar_out: [self, exponent, out].
fn pow_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    nobool(ctx, 0, 1, 2)?;
    let (common, shape) = prep2(ctx, "pow", 0, 1, 2, Mode::Arith)?;
    match comp_kind(common)? {
        CompKind::F32 | CompKind::F64 => {
            // pow.Tensor_Scalar: PyTorch special-cases these exponents (x*x, sqrt, ...).
            let special = match Opnd::read(ctx, 1)? {
                Opnd::Scalar(e) if matches!(Opnd::read(ctx, 0)?, Opnd::Tensor(_)) => {
                    Some(e.to_f64())
                }
                _ => None,
            };
            with_float!(comp_kind(common)?, C =>
                run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), |x, y| match special {
                    Some(2.0) => x * x,
                    Some(3.0) => x * x * x,
                    Some(0.5) => x.sqrt(),
                    Some(-0.5) => 1.0 / x.sqrt(),
                    Some(-1.0) => 1.0 / x,
                    Some(-2.0) => 1.0 / (x * x),
                    _ => x.powf(y),
                }), _ => unreachable!())
        }
        CompKind::Bool => run2::<bool, bool>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x || !y),
        CompKind::Int => {
            if let Opnd::Scalar(s) = Opnd::read(ctx, 1)? {
                if s.to_i64() < 0 {
                    return Err(KernelError::invalid(
                        "pow: integers to negative integer powers are not allowed",
                    ));
                }
            }
            run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), int_pow)
        }
    }
}

/// atan2.out: [self, other, out].
fn atan2_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "atan2", 0, 1, 2, Mode::TrueDiv)?;
    with_float!(comp_kind(common)?, C => run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x.atan2(y)),
        _ => Err(KernelError::dtype(common, "atan2")))
}

/// maximum.out: [self, other, out] (NaN propagates).
fn maximum_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "maximum", 0, 1, 2, Mode::Arith)?;
    with_num!(comp_kind(common)?, C => run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), nan_max))
}

/// minimum.out: [self, other, out] (NaN propagates).
fn minimum_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = prep2(ctx, "minimum", 0, 1, 2, Mode::Arith)?;
    with_num!(comp_kind(common)?, C => run2::<C, C>(ctx, 0, 1, 2, &shape, Some(common), nan_min))
}

// ---- comparisons, logical, bitwise ----

macro_rules! cmp_kernel {
    ($name:ident, $op:tt) => {
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let (common, shape) = prep2(ctx, stringify!($name), 0, 1, 2, Mode::Cmp)?;
            with_comp!(comp_kind(common)?, C => run2::<C, bool>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x $op y))
        }
    };
}
cmp_kernel!(eq_out, ==);
cmp_kernel!(ne_out, !=);
cmp_kernel!(lt_out, <);
cmp_kernel!(le_out, <=);
cmp_kernel!(gt_out, >);
cmp_kernel!(ge_out, >=);

macro_rules! logical_kernel {
    ($name:ident, |$x:ident, $y:ident| $e:expr) => {
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let (_, shape) = prep2(ctx, stringify!($name), 0, 1, 2, Mode::Logical)?;
            run2::<bool, bool>(ctx, 0, 1, 2, &shape, None, |$x, $y| $e)
        }
    };
}
logical_kernel!(logical_and_out, |x, y| x && y);
logical_kernel!(logical_or_out, |x, y| x || y);
logical_kernel!(logical_xor_out, |x, y| x != y);

macro_rules! bitwise_kernel {
    ($name:ident, $op:tt) => {
        fn $name(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            let (common, shape) = prep2(ctx, stringify!($name), 0, 1, 2, Mode::Bitwise)?;
            run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |x, y| x $op y)
        }
    };
}
bitwise_kernel!(bitwise_and_out, &);
bitwise_kernel!(bitwise_or_out, |);
bitwise_kernel!(bitwise_xor_out, ^);

// ---- where / masked_fill ----

fn where_common<'p>(
    v: &impl ArgAccess<'p>,
) -> Result<(ScalarType, pteron_core::Dims), KernelError> {
    let cond = *v.tensor(0)?;
    if cond.dtype() != ScalarType::Bool && cond.dtype() != ScalarType::Byte {
        return Err(KernelError::dtype(
            cond.dtype(),
            "where: condition must be bool",
        ));
    }
    let a = Opnd::read(v, 1)?;
    let b = Opnd::read(v, 2)?;
    let common = binary_common("where", &[a, b], out_dtype(v, 3)?, Mode::Arith)?;
    let shape = broadcast_opnds(&[Opnd::Tensor(cond), a, b])?;
    Ok((common, shape))
}

fn check_where(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    where_common(v).map(|_| ())
}

/// where.self_out: [condition, self, other, out].
fn where_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (common, shape) = where_common(ctx)?;
    with_comp!(comp_kind(common)?, C => run3::<bool, C, C>(ctx, [0, 1, 2], 3, &shape, Some(common),
        |c, x, y| if c { x } else { y }))
}

fn check_masked_fill(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    masked_fill_check(v)
}

fn masked_fill_check<'p>(v: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let s = v.tensor(0)?.dtype();
    let m = v.tensor(1)?.dtype();
    require_supported("masked_fill", s)?;
    if m != ScalarType::Bool {
        return Err(KernelError::dtype(m, "masked_fill: mask must be bool"));
    }
    v.scalar(2)?;
    require_can_cast("masked_fill", s, out_dtype(v, 3)?)
}

/// masked_fill.Scalar_out: [self, mask, value, out].
fn masked_fill_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    masked_fill_check(ctx)?;
    let common = ctx.tensor(0)?.dtype();
    let value = ctx.scalar(2)?;
    let shape = broadcast_opnds(&[Opnd::read(ctx, 0)?, Opnd::read(ctx, 1)?])?;
    with_comp!(comp_kind(common)?, C => {
        let fill = C::from_scalar(value);
        run2m::<C>(ctx, &shape, common, fill)
    })
}

fn run2m<C: Comp>(
    ctx: &mut KernelContext<'_, '_>,
    shape: &[usize],
    common: ScalarType,
    fill: C,
) -> Result<(), KernelError> {
    ctx.resize(3, shape)?;
    let ([x, m], [mut o]) = ctx.io([0, 1], [3])?;
    let ix = Input::<C>::tensor(&x, shape, None)?;
    let im = Input::<bool>::tensor(&m, shape, None)?;
    let strides = [ix.strides(shape.len())?, im.strides(shape.len())?];
    let (mut xv, mut mv) = ([C::default(); BLOCK], [false; BLOCK]);
    stream(&mut o, shape, &strides, Some(common), |blk, r| {
        let (xv, mv) = (&mut xv[..r.len()], &mut mv[..r.len()]);
        ix.read(blk, 0, xv)?;
        im.read(blk, 1, mv)?;
        for ((r, &x), &m) in r.iter_mut().zip(xv.iter()).zip(mv.iter()) {
            *r = if m { fill } else { x };
        }
        Ok(())
    })
}

// ---- clamp / hardtanh / leaky_relu ----

/// The common dtype of a clamp. Bool only for clamp.Tensor (as ExecuTorch: REALB there, and
/// clamp.out takes no bool computation).
fn clamp_common<'p>(v: &impl ArgAccess<'p>) -> Result<ScalarType, KernelError> {
    clamp_common_b(v, false)
}

fn clamp_common_b<'p>(v: &impl ArgAccess<'p>, allow_bool: bool) -> Result<ScalarType, KernelError> {
    if let Value::Tensor(_) = v.value(0)? {
    } else {
        return Err(KernelError::invalid("clamp: self must be a tensor"));
    }
    let (ops, n) = clamp_opnds(v)?;
    if n == 1 {
        return Err(KernelError::invalid(
            "clamp: at least one of 'min' or 'max' must not be None",
        ));
    }
    let common = binary_common("clamp", &ops[..n], out_dtype(v, 3)?, Mode::Arith)?;
    if common == ScalarType::Bool && !allow_bool {
        return Err(KernelError::dtype(common, "clamp"));
    }
    Ok(common)
}

/// The operands of a clamp (self, then the bounds that are not None) and how many there are.
fn clamp_opnds<'p>(v: &impl ArgAccess<'p>) -> Result<([Opnd; 3], usize), KernelError> {
    let this = Opnd::read(v, 0)?;
    let mut ops = [this; 3];
    let mut n = 1;
    for i in [1, 2] {
        if !v.is_none(i)? {
            ops[n] = Opnd::read(v, i)?;
            n += 1;
        }
    }
    Ok((ops, n))
}

use pteron_core::Value;

fn check_clamp(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    clamp_common(v).map(|_| ())
}

fn check_clamp_tensor(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    clamp_common_b(v, true).map(|_| ())
}

#[inline]
fn std_max<C: PartialOrd>(a: C, b: C) -> C {
    if a < b {
        b
    } else {
        a
    }
}
#[inline]
fn std_min<C: PartialOrd>(a: C, b: C) -> C {
    if b < a {
        b
    } else {
        a
    }
}

#[inline]
fn clamp_val<C: Num>(x: C, lo: Option<C>, hi: Option<C>) -> C {
    if x.is_nan() {
        return x;
    }
    let mut r = x;
    if let Some(lo) = lo {
        r = std_max(r, lo);
    }
    if let Some(hi) = hi {
        r = std_min(r, hi);
    }
    r
}

/// clamp.out: [self, min?, max?, out] with Scalar bounds.
fn clamp_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = clamp_common(ctx)?;
    let lo = ctx.opt_scalar(1)?;
    let hi = ctx.opt_scalar(2)?;
    let shape = ctx.tensor(0)?.dims();
    with_num!(comp_kind(common)?, C => {
        let lo = match lo { Some(s) => Some(scalar_in::<C>(s, common)?), None => None };
        let hi = match hi { Some(s) => Some(scalar_in::<C>(s, common)?), None => None };
        run1::<C, C>(ctx, 0, 3, &shape, Some(common), |x| clamp_val(x, lo, hi))
    })
}

/// clamp.Tensor_out: [self, min?, max?, out] with tensor bounds (broadcast).
fn clamp_tensor_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let common = clamp_common_b(ctx, true)?;
    let (has_lo, has_hi) = (!ctx.is_none(1)?, !ctx.is_none(2)?);
    let (ops, n) = clamp_opnds(ctx)?;
    let shape = broadcast_opnds(&ops[..n])?;
    with_num!(comp_kind(common)?, C => match (has_lo, has_hi) {
        (true, true) => run3::<C, C, C>(ctx, [0, 1, 2], 3, &shape, Some(common), |x, l, h| clamp_val(x, Some(l), Some(h))),
        (true, false) => run2::<C, C>(ctx, 0, 1, 3, &shape, Some(common), |x, l| clamp_val(x, Some(l), None)),
        _ => run2::<C, C>(ctx, 0, 2, 3, &shape, Some(common), |x, h| clamp_val(x, None, Some(h))),
    })
}

fn check_same_real<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    same_real::<OUT>(v)
}

fn same_real<'p, const OUT: usize>(v: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let s = v.tensor(0)?.dtype();
    crate::util::require_dtype("op", s, &crate::util::REALS)?;
    require_can_cast("op", s, out_dtype(v, OUT)?)
}

/// hardtanh.out: [self, min_val, max_val, out].
fn hardtanh_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    same_real::<3>(ctx)?;
    let x = *ctx.tensor(0)?;
    let common = x.dtype();
    let (lo, hi) = (ctx.scalar(1)?, ctx.scalar(2)?);
    with_num!(comp_kind(common)?, C => {
        let (lo, hi) = (scalar_in::<C>(lo, common)?, scalar_in::<C>(hi, common)?);
        run1::<C, C>(ctx, 0, 3, x.sizes(), Some(common), |a| if a <= lo { lo } else if a >= hi { hi } else { a })
    })
}

fn check_float_self<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    float_self::<OUT>(v)
}

pub(crate) fn float_self<'p, const OUT: usize>(v: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let s = v.tensor(0)?.dtype();
    crate::util::require_dtype("op", s, &crate::util::FLOATS)?;
    require_can_cast("op", s, out_dtype(v, OUT)?)
}

/// leaky_relu.out: [self, negative_slope, out].
fn leaky_relu_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    float_self::<2>(ctx)?;
    let x = *ctx.tensor(0)?;
    let common = x.dtype();
    let slope = ctx.scalar(1)?;
    with_float!(comp_kind(common)?, C => {
        let s = C::from_scalar(slope);
        run1::<C, C>(ctx, 0, 2, x.sizes(), Some(common), |a| if a > 0.0 { a } else { a * s })
    }, _ => Err(KernelError::dtype(common, "leaky_relu")))
}

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::add.out",
        Kernel::with_check(add_out, check_bin::<0, 1, 3, ARITH>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::add.Scalar_out",
        Kernel::with_check(add_out, check_bin::<0, 1, 3, ARITH>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::sub.out",
        Kernel::with_check(sub_out, check_sub::<0, 1, 3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::sub.Scalar_out",
        Kernel::with_check(sub_out, check_sub::<0, 1, 3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::rsub.Scalar_out",
        Kernel::with_check(rsub_out, check_sub::<0, 1, 3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::rsub.Tensor_out",
        Kernel::with_check(rsub_out, check_sub::<0, 1, 3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::mul.out",
        Kernel::with_check(mul_out, check_bin::<0, 1, 2, ARITH>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::mul.Scalar_out",
        Kernel::with_check(mul_out, check_bin::<0, 1, 2, ARITH>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::div.out",
        Kernel::with_check(div_out, check_bin::<0, 1, 2, TRUEDIV>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::div.Scalar_out",
        Kernel::with_check(div_out, check_bin::<0, 1, 2, TRUEDIV>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::div.out_mode",
        Kernel::with_check(div_mode_out, check_div_mode).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::div.Scalar_mode_out",
        Kernel::with_check(div_mode_out, check_div_mode).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::floor_divide.out",
        Kernel::with_check(floor_divide_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::floor_divide.Scalar_out",
        Kernel::with_check(floor_divide_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::remainder.Tensor_out",
        Kernel::with_check(remainder_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::remainder.Scalar_out",
        Kernel::with_check(remainder_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::fmod.Tensor_out",
        Kernel::with_check(fmod_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::fmod.Scalar_out",
        Kernel::with_check(fmod_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::pow.Tensor_Tensor_out",
        Kernel::with_check(pow_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::pow.Tensor_Scalar_out",
        Kernel::with_check(pow_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::pow.Scalar_out",
        Kernel::with_check(pow_out, check_nobool::<0, 1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::atan2.out",
        Kernel::with_check(atan2_out, check_bin::<0, 1, 2, TRUEDIV>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::maximum.out",
        Kernel::with_check(maximum_out, check_bin::<0, 1, 2, ARITH>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::minimum.out",
        Kernel::with_check(minimum_out, check_bin::<0, 1, 2, ARITH>).dtypes(DtypeSet::ALL),
    );
    // `aten::<name>.Tensor_out` and `.Scalar_out`, one kernel for both.
    macro_rules! tensor_and_scalar {
        ($check:expr, $dtypes:expr, $($name:literal => $f:ident),*) => {$(
            pteron_core::register_op!(S, r, concat!("aten::", $name, ".Tensor_out"),
                Kernel::with_check($f, $check).dtypes($dtypes));
            pteron_core::register_op!(S, r, concat!("aten::", $name, ".Scalar_out"),
                Kernel::with_check($f, $check).dtypes($dtypes));
        )*};
    }
    tensor_and_scalar!(check_bin::<0, 1, 2, CMP>, DtypeSet::ALL,
        "eq" => eq_out, "ne" => ne_out, "lt" => lt_out, "le" => le_out, "gt" => gt_out, "ge" => ge_out);
    pteron_core::register_op!(
        S,
        r,
        "aten::logical_and.out",
        Kernel::with_check(logical_and_out, check_bin::<0, 1, 2, LOGICAL>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::logical_or.out",
        Kernel::with_check(logical_or_out, check_bin::<0, 1, 2, LOGICAL>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::logical_xor.out",
        Kernel::with_check(logical_xor_out, check_bin::<0, 1, 2, LOGICAL>).dtypes(DtypeSet::ALL),
    );
    tensor_and_scalar!(check_bin::<0, 1, 2, BITWISE>, DtypeSet::INT_AND_BOOL,
        "bitwise_and" => bitwise_and_out, "bitwise_or" => bitwise_or_out,
        "bitwise_xor" => bitwise_xor_out);
    pteron_core::register_op!(
        S,
        r,
        "aten::where.self_out",
        Kernel::with_check(where_out, check_where).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::masked_fill.Scalar_out",
        Kernel::with_check(masked_fill_out, check_masked_fill).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::clamp.out",
        Kernel::with_check(clamp_out, check_clamp).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::clamp.Tensor_out",
        Kernel::with_check(clamp_tensor_out, check_clamp_tensor).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::hardtanh.out",
        Kernel::with_check(hardtanh_out, check_same_real::<3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::leaky_relu.out",
        Kernel::with_check(leaky_relu_out, check_float_self::<2>).dtypes(DtypeSet::FLOAT),
    );
}

#[cfg(test)]
// Expected values are PyTorch's outputs as printed, not approximations of constants.
#[allow(clippy::approx_constant)]
mod tests;

#[cfg(test)]
pub(crate) mod tests_util {
    use pteron_core::Bool;

    pub(crate) fn b(v: &[bool]) -> Vec<Bool> {
        v.iter().map(|&x| Bool(x as u8)).collect()
    }

    /// Elementwise closeness (relative `tol`), NaN equal to NaN.
    pub(crate) fn close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len(), "len: got {got:?} want {want:?}");
        for (g, w) in got.iter().zip(want) {
            let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= tol * (1.0 + w.abs()) || g == w;
            assert!(ok, "got {got:?}, want {want:?}");
        }
    }
}

#[cfg(test)]
// Expected values are PyTorch's outputs as printed, not approximations of constants.
#[allow(clippy::approx_constant)]
mod torch_cases;
