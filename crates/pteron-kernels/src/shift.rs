//! Bit shifts: `bitwise_left_shift.{Tensor_out,Tensor_Scalar_out}`,
//! `bitwise_right_shift.{Tensor_out,Tensor_Scalar_out}`.
//!
//! Type promotion as the other bitwise ops (`torch.result_type`, which must be an integer type
//! or bool; the out dtype must be castable from it), broadcasting, any dim order: the kernels
//! run on the elementwise engine in i64 and round the result through the common dtype.
//!
//! Shift amounts outside `0..bits` (bits of the common dtype) are undefined behaviour in
//! ExecuTorch's portable kernel (a plain C++ `<<` / `>>`); pteron gives PyTorch's results for
//! them: a left shift gives 0, a right shift gives the sign fill (`-1` or `0`) for signed types
//! and `0` for `uint8`. Within range both agree. On bool the shift is C++'s on 0/1 values
//! (`a << b` is `a`, `a >> b` is `a && !b`), as ExecuTorch's kernel computes it.

use pteron_core::{
    ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
};

use crate::elementwise::engine::{broadcast_opnds, out_dtype, run2, Opnd};
use crate::elementwise::{binary_common, Mode};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    let dts = DtypeSet::INT_AND_BOOL;
    macro_rules! both {
        ($($overload:literal),*) => {$(
            pteron_core::register_op!(S, r, concat!("aten::bitwise_left_shift.", $overload),
                Kernel::with_check(left_shift_out, check_left).dtypes(dts));
            pteron_core::register_op!(S, r, concat!("aten::bitwise_right_shift.", $overload),
                Kernel::with_check(right_shift_out, check_right).dtypes(dts));
        )*};
    }
    both!("Tensor_out", "Tensor_Scalar_out");
}

fn common<'p>(
    v: &impl pteron_core::ArgAccess<'p>,
    op: &'static str,
) -> Result<ScalarType, KernelError> {
    let a = Opnd::read(v, 0)?;
    let b = Opnd::read(v, 1)?;
    if !matches!(a, Opnd::Tensor(_)) {
        return Err(KernelError::invalid(format!("{op}: self must be a tensor")));
    }
    binary_common(op, &[a, b], out_dtype(v, 2)?, Mode::Bitwise)
}

fn check_left(v: &ArgView) -> Result<(), KernelError> {
    common(v, "bitwise_left_shift").map(|_| ())
}
fn check_right(v: &ArgView) -> Result<(), KernelError> {
    common(v, "bitwise_right_shift").map(|_| ())
}

/// `(bits, signed)` of an integer (or bool) dtype.
fn width(dt: ScalarType) -> (u32, bool) {
    match dt {
        ScalarType::Bool => (1, false),
        ScalarType::Byte => (8, false),
        other => (8 * other.elem_size() as u32, true),
    }
}

/// `a << b` in a type of `bits` bits (`a` already in that type's range, sign-extended).
#[inline]
pub(crate) fn shl(a: i64, b: i64, bits: u32, is_bool: bool) -> i64 {
    if is_bool {
        // C++ on 0/1 operands: nonzero exactly when `a` is.
        return a;
    }
    if b < 0 || b >= bits as i64 {
        0
    } else {
        ((a as u64) << b) as i64
    }
}

/// `a >> b` (arithmetic for signed types, logical for unsigned).
#[inline]
pub(crate) fn shr(a: i64, b: i64, (bits, signed): (u32, bool), is_bool: bool) -> i64 {
    if is_bool {
        return (a != 0 && b == 0) as i64;
    }
    if b < 0 || b >= bits as i64 {
        if signed {
            a >> 63
        } else {
            0
        }
    } else {
        // `a` is sign-extended (signed) or non-negative (unsigned): one i64 shift is exact.
        a >> b
    }
}

fn shift_out(ctx: &mut KernelContext, left: bool) -> Result<(), KernelError> {
    let op = if left {
        "bitwise_left_shift"
    } else {
        "bitwise_right_shift"
    };
    let common = common(ctx, op)?;
    let shape = broadcast_opnds(&[Opnd::read(ctx, 0)?, Opnd::read(ctx, 1)?])?;
    let w = width(common);
    let is_bool = common == ScalarType::Bool;
    if left {
        run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |a, b| {
            shl(a, b, w.0, is_bool)
        })
    } else {
        run2::<i64, i64>(ctx, 0, 1, 2, &shape, Some(common), |a, b| {
            shr(a, b, w, is_bool)
        })
    }
}

fn left_shift_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    shift_out(ctx, true)
}
fn right_shift_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    shift_out(ctx, false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    #[test]
    fn shifts_in_range() {
        // torch.tensor([1, -3, 5, 100], dtype=torch.int8) << torch.tensor([1, 2, 0, 1])
        let mut c = TestCall::new();
        c.tensor(&[4], &[1i8, -3, 5, 100]);
        c.tensor(&[4], &[1i8, 2, 0, 1]);
        let o = c.out(St::Char, &[4]);
        c.ret(o);
        c.check(check_left).unwrap();
        c.run(left_shift_out).unwrap();
        assert_eq!(c.output::<i8>(o), vec![2, -12, 5, -56]);

        let mut c = TestCall::new();
        c.tensor(&[4], &[16i32, -16, 7, -1]);
        c.int(2);
        let o = c.out(St::Int, &[4]);
        c.ret(o);
        c.check(check_right).unwrap();
        c.run(right_shift_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![4, -4, 1, -1]);
    }

    #[test]
    fn out_of_range_amounts_follow_pytorch() {
        // int8: << 8 and << -1 give 0; >> 9 and >> -1 give the sign fill.
        assert_eq!(shl(5, 8, 8, false), 0);
        assert_eq!(shl(5, -1, 8, false), 0);
        assert_eq!(shr(-5, 9, (8, true), false), -1);
        assert_eq!(shr(5, -1, (8, true), false), 0);
        // uint8 >> 8 is 0; int64 << 63 keeps the low bit as the sign bit.
        assert_eq!(shr(200, 8, (8, false), false), 0);
        assert_eq!(shl(1, 63, 64, false), i64::MIN);
        assert_eq!(shl(1, 64, 64, false), 0);
        assert_eq!(shr(i64::MIN, 100, (64, true), false), -1);
        // bool: C++ shifts of 0/1.
        assert_eq!(shl(1, 1, 1, true), 1);
        assert_eq!(shr(1, 1, (1, false), true), 0);
        assert_eq!(shr(1, 0, (1, false), true), 1);
    }

    #[test]
    fn promotion_and_broadcast() {
        // uint8 tensor << int64 tensor: promoted to int64.
        let mut c = TestCall::new();
        c.tensor(&[2, 1], &[3u8, 200]);
        c.tensor(&[3], &[0i64, 1, 8]);
        let o = c.out(St::Long, &[2, 3]);
        c.ret(o);
        c.check(check_left).unwrap();
        c.run(left_shift_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![3, 6, 768, 200, 400, 51200]);

        // uint8 result wraps.
        let mut c = TestCall::new();
        c.tensor(&[2], &[3u8, 200]);
        c.int(1);
        let o = c.out(St::Byte, &[2]);
        c.ret(o);
        c.run(left_shift_out).unwrap();
        assert_eq!(c.output::<u8>(o), vec![6, 144]);
    }

    #[test]
    fn float_operands_fail_at_load() {
        let mut c = TestCall::new();
        c.tensor(&[2], &[1.0f32, 2.]);
        c.int(1);
        let o = c.out(St::Float, &[2]);
        c.ret(o);
        assert!(matches!(
            c.check(check_left),
            Err(KernelError::UnsupportedDType { .. })
        ));
        let mut c = TestCall::new();
        c.tensor(&[2], &[1i32, 2]);
        c.double(1.5);
        let o = c.out(St::Int, &[2]);
        c.ret(o);
        assert!(c.check(check_right).is_err());
    }
}
