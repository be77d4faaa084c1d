//! Tensor creation: full / zeros / ones / empty / scalar_tensor / arange / fill, the plain copies
//! (clone, alias_copy, detach_copy, lift_fresh_copy) and tril. Outputs may have any dim order.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::{
    ArgAccess, ArgView, Dims, DtypeSet, Element, Kernel, KernelContext, KernelError,
    KernelRegistry, Scalar, ScalarType,
};

use crate::elementwise::engine::*;
use crate::with_comp;

/// Reads an `int[]` size argument as a shape.
pub(crate) fn size_arg<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<Dims, KernelError> {
    let l = v.int_list(i)?;
    let mut d = Dims::new();
    for k in 0..l.len() {
        let s = l.get(k)?;
        if s < 0 {
            return Err(KernelError::invalid(format!("negative dimension {s}")));
        }
        d.push(s as usize)?;
    }
    Ok(d)
}

fn check_out_at<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("creation op", out_dtype(v, OUT)?)
}

fn check_in_out<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("op", v.tensor(0)?.dtype())?;
    require_supported("op", out_dtype(v, OUT)?)
}

fn fill_out(
    ctx: &mut KernelContext<'_, '_>,
    out: usize,
    shape: &[usize],
    v: Scalar,
) -> Result<(), KernelError> {
    ctx.resize(out, shape)?;
    let ([], [mut o]) = ctx.io([], [out])?;
    fill_scalar(&mut o, v)
}

/// full.out: [size, fill_value, out].
fn full_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = size_arg(ctx, 0)?;
    let v = ctx.scalar(1)?;
    fill_out(ctx, 2, &shape, v)
}

/// zeros.out: [size, out].
fn zeros_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = size_arg(ctx, 0)?;
    fill_out(ctx, 1, &shape, Scalar::Int(0))
}

/// ones.out: [size, out].
fn ones_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = size_arg(ctx, 0)?;
    fill_out(ctx, 1, &shape, Scalar::Int(1))
}

/// empty.out: [size, memory_format, out] (filled with zeros, deterministically).
fn empty_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = size_arg(ctx, 0)?;
    fill_out(ctx, 2, &shape, Scalar::Int(0))
}

/// full_like.out: [self, fill_value, memory_format, out].
fn full_like_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    let v = ctx.scalar(1)?;
    fill_out(ctx, 3, &shape, v)
}

/// scalar_tensor.out: [s, out].
fn scalar_tensor_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let v = ctx.scalar(0)?;
    let shape = ctx.tensor(1)?.dims();
    if shape.iter().product::<usize>() != 1 {
        return Err(KernelError::shape(format!(
            "scalar_tensor: out has shape {shape:?}"
        )));
    }
    fill_out(ctx, 1, &shape, v)
}

/// fill.Scalar_out: [self, value, out].
fn fill_scalar_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    let v = ctx.scalar(1)?;
    fill_out(ctx, 2, &shape, v)
}

/// fill.Tensor_out: [self, value (0-d), out].
fn fill_tensor_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    let v = *ctx.tensor(1)?;
    if v.rank() != 0 {
        return Err(KernelError::shape(format!(
            "fill only supports 0-dimension value tensor but got tensor with {} dimensions",
            v.rank()
        )));
    }
    ctx.resize(2, &shape)?;
    let ([vt], [mut o]) = ctx.io([1], [2])?;
    copy_cast(&vt, &mut o)
}

fn check_fill_tensor(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    check_in_out::<2>(v)?;
    require_supported("fill", v.tensor(1)?.dtype())?;
    if v.tensor(1)?.rank() != 0 {
        return Err(KernelError::shape(
            "fill: value must be a 0-dimension tensor",
        ));
    }
    Ok(())
}

/// Copies argument 0 into `out` (resized to its shape), converting dtype if they differ.
pub(crate) fn copy_into(ctx: &mut KernelContext<'_, '_>, out: usize) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    ctx.resize(out, &shape)?;
    let ([x], [mut o]) = ctx.io([0], [out])?;
    copy_cast(&x, &mut o)
}

/// lift_fresh_copy.out / alias_copy.out / detach_copy.out: [self, out].
fn copy1_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    copy_into(ctx, 1)
}

/// clone.out: [self, memory_format, out] (the out's dim order decides the layout).
fn clone_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    copy_into(ctx, 2)
}

// ---- arange ----

fn arange_len(
    start: Scalar,
    end: Scalar,
    step: Scalar,
    dtype: ScalarType,
) -> Result<usize, KernelError> {
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    if st == 0.0 {
        return Err(KernelError::invalid("arange: step must be nonzero"));
    }
    if !s.is_finite() || !e.is_finite() {
        return Err(KernelError::invalid("arange: unsupported range"));
    }
    if !((st > 0.0 && e >= s) || (st < 0.0 && e <= s)) {
        return Err(KernelError::invalid(
            "arange: upper bound and larger bound inconsistent with step sign",
        ));
    }
    let size = if dtype == ScalarType::Long {
        let (xs, xe, xst) = (start.to_i64(), end.to_i64(), step.to_i64());
        if xst == 0 {
            return Err(KernelError::invalid("arange: step must be nonzero"));
        }
        let sgn = (xst > 0) as i64 - (xst < 0) as i64;
        // i64::MIN / -1 overflows (a panic even in release builds): an error instead.
        let num = xe.wrapping_sub(xs).wrapping_add(xst).wrapping_sub(sgn);
        let Some(q) = num.checked_div(xst) else {
            return Err(KernelError::invalid("arange: the range's size overflows"));
        };
        q as f64
    } else {
        ((e - s) / st).ceil()
    };
    if size.is_nan() || size < 0.0 || size > (1u64 << 48) as f64 {
        return Err(KernelError::invalid(format!("arange: invalid size {size}")));
    }
    Ok(size as usize)
}

fn arange_fill(
    ctx: &mut KernelContext<'_, '_>,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    out: usize,
) -> Result<(), KernelError> {
    let info = *ctx.tensor(out)?;
    if info.rank() != 1 {
        return Err(KernelError::rank_mismatch("arange", "out", 1, info.rank()));
    }
    let dtype = info.dtype();
    let n = arange_len(start, end, step, dtype)?;
    ctx.resize(out, &[n])?;
    let ([], [mut o]) = ctx.io([], [out])?;
    fn go<E: Element>(
        o: &mut pteron_core::TensorMut<'_>,
        start: Scalar,
        step: Scalar,
    ) -> Result<(), KernelError> {
        let d = o.as_mut_slice::<E>()?;
        match E::DTYPE {
            ScalarType::Half | ScalarType::BFloat16 => {
                let (s, st) = (start.to_f64() as f32, step.to_f64() as f32);
                for (i, x) in d.iter_mut().enumerate() {
                    *x = E::from_f64((s + st * i as f32) as f64);
                }
            }
            ScalarType::Float | ScalarType::Double => {
                let (s, st) = (start.to_f64(), step.to_f64());
                for (i, x) in d.iter_mut().enumerate() {
                    *x = <f64 as Comp>::store::<E>(s + st * i as f64);
                }
            }
            _ => {
                let (s, st) = (start.to_i64(), step.to_i64());
                for (i, x) in d.iter_mut().enumerate() {
                    *x = E::from_i64(s.wrapping_add(st.wrapping_mul(i as i64)));
                }
            }
        }
        Ok(())
    }
    pteron_core::dispatch_dtype!(dtype, E => go::<E>(&mut o, start, step), _ => Err(KernelError::dtype(dtype, "arange")))
}

fn check_arange<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let d = out_dtype(v, OUT)?;
    if d == ScalarType::Bool || !is_supported(d) {
        return Err(KernelError::dtype(d, "arange"));
    }
    Ok(())
}

/// arange.out: [end, out].
fn arange_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let end = ctx.scalar(0)?;
    arange_fill(ctx, Scalar::Int(0), end, Scalar::Int(1), 1)
}

/// arange.start_out: [start, end, step, out].
fn arange_start_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (s, e, st) = (ctx.scalar(0)?, ctx.scalar(1)?, ctx.scalar(2)?);
    arange_fill(ctx, s, e, st, 3)
}

// ---- tril ----

fn check_tril(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let x = v.tensor(0)?;
    require_supported("tril", x.dtype())?;
    if x.rank() < 2 {
        return Err(KernelError::shape(
            "tril: input tensor must have at least 2 dimensions",
        ));
    }
    let od = out_dtype(v, 2)?;
    if od != x.dtype() {
        return Err(KernelError::dtype_mismatch("tril", "out", x.dtype(), od));
    }
    Ok(())
}

/// tril.out: [self, diagonal, out].
fn tril_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() < 2 {
        return Err(KernelError::shape(
            "tril: input tensor must have at least 2 dimensions",
        ));
    }
    let diag = ctx.int(1)?;
    ctx.resize(2, x.sizes())?;
    let (rows, c) = (x.size(x.rank() - 2), x.size(x.rank() - 1));
    let ([xt], [mut o]) = ctx.io([0], [2])?;
    with_comp!(comp_kind(x.dtype())?, C => {
        let ix = Input::<C>::tensor(&xt, x.sizes(), None)?;
        stream(&mut o, x.sizes(), &[ix.strides(x.rank())?], Some(x.dtype()), |blk, r| {
            ix.read(blk, 0, r)?;
            for (k, e) in (blk.start()..).zip(r.iter_mut()) {
                let (i, j) = (((k / c) % rows) as i64, (k % c) as i64);
                if j - i > diag {
                    *e = C::default();
                }
            }
            Ok(())
        })
    })
}

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::full.out",
        Kernel::with_check(full_out, check_out_at::<2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::zeros.out",
        Kernel::with_check(zeros_out, check_out_at::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::ones.out",
        Kernel::with_check(ones_out, check_out_at::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::empty.out",
        Kernel::with_check(empty_out, check_out_at::<2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::full_like.out",
        Kernel::with_check(full_like_out, check_out_at::<3>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::scalar_tensor.out",
        Kernel::with_check(scalar_tensor_out, check_out_at::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::fill.Scalar_out",
        Kernel::with_check(fill_scalar_out, check_in_out::<2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::fill.Tensor_out",
        Kernel::with_check(fill_tensor_out, check_fill_tensor).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::arange.out",
        Kernel::with_check(arange_out, check_arange::<1>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::arange.start_out",
        Kernel::with_check(arange_start_out, check_arange::<3>).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::lift_fresh_copy.out",
        Kernel::with_check(copy1_out, check_in_out::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::alias_copy.out",
        Kernel::with_check(copy1_out, check_in_out::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::detach_copy.out",
        Kernel::with_check(copy1_out, check_in_out::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::clone.out",
        Kernel::with_check(clone_out, check_in_out::<2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::tril.out",
        Kernel::with_check(tril_out, check_tril).dtypes(DtypeSet::ALL),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::tests_util::{b, close};
    use pteron_core::half::f16;
    use pteron_core::testing::TestCall;
    use pteron_core::Bool;

    #[test]
    fn full_zeros_ones_empty() {
        let mut c = TestCall::new();
        c.int_list(&[2, 3]);
        c.double(1.5);
        let o = c.out(ScalarType::Float, &[1, 1]);
        c.ret(o);
        c.check(check_out_at::<2>).unwrap();
        c.run(full_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 3]);
        assert_eq!(c.output::<f32>(o), vec![1.5; 6]);

        // float fill into an int out truncates (static_cast)
        let mut c = TestCall::new();
        c.int_list(&[2]);
        c.double(-2.7);
        let o = c.out(ScalarType::Int, &[2]);
        c.ret(o);
        c.run(full_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-2, -2]);

        let mut c = TestCall::new();
        c.int_list(&[3]);
        let o = c.out(ScalarType::Half, &[3]);
        c.ret(o);
        c.run(ones_out).unwrap();
        assert_eq!(c.output::<f16>(o), vec![f16::ONE; 3]);
        c.run(zeros_out).unwrap();
        assert_eq!(c.output::<f16>(o), vec![f16::ZERO; 3]);

        let mut c = TestCall::new();
        c.int_list(&[0, 4]);
        c.none();
        let o = c.out(ScalarType::Bool, &[0, 4]);
        c.ret(o);
        c.run(empty_out).unwrap();
        assert!(c.output::<Bool>(o).is_empty());

        let mut c = TestCall::new();
        c.bool(true);
        let o = c.out(ScalarType::Float, &[]);
        c.ret(o);
        c.run(scalar_tensor_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1.0]);
    }

    #[test]
    fn fills_and_copies() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1i64, 2, 3, 4]);
        c.tensor::<f32>(&[], &[7.9]);
        let o = c.out(ScalarType::Long, &[2, 2]);
        c.ret(o);
        c.check(check_fill_tensor).unwrap();
        c.run(fill_tensor_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![7; 4]);

        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[1.0f32, 3.0, 2.0, 4.0]);
        c.none();
        let o = c.out(ScalarType::Float, &[1, 2, 1, 2]);
        c.ret(o);
        c.run(clone_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1.0, 2.0, 3.0, 4.0]);

        let mut c = TestCall::new();
        c.tensor(&[3], &b(&[true, false, true]));
        let o = c.out(ScalarType::Bool, &[3]);
        c.ret(o);
        c.run(copy1_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[true, false, true]));
    }

    #[test]
    fn arange_matches_pytorch() {
        // torch.arange(0, 1, 0.3) -> [0, 0.3, 0.6, 0.9]
        let mut c = TestCall::new();
        c.int(0);
        c.double(1.0);
        c.double(0.3);
        let o = c.out(ScalarType::Float, &[1]);
        c.ret(o);
        c.check(check_arange::<3>).unwrap();
        c.run(arange_start_out).unwrap();
        close(&c.output::<f32>(o), &[0.0, 0.3, 0.6, 0.9], 1e-7);
        // torch.arange(5, -3, -3, dtype=long) -> [5, 2, -1]
        let mut c = TestCall::new();
        c.int(5);
        c.int(-3);
        c.int(-3);
        let o = c.out(ScalarType::Long, &[1]);
        c.ret(o);
        c.run(arange_start_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![5, 2, -1]);
        // arange(4)
        let mut c = TestCall::new();
        c.int(4);
        let o = c.out(ScalarType::Long, &[4]);
        c.ret(o);
        c.run(arange_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![0, 1, 2, 3]);
        // float32 values are computed in double (torch's [5] is 5.55e-17 from a fused multiply-add;
        // we give 0.0: within an ulp of the step)
        let mut c = TestCall::new();
        c.int(-1);
        c.int(1);
        c.double(0.2);
        let o = c.out(ScalarType::Float, &[1]);
        c.ret(o);
        c.run(arange_start_out).unwrap();
        let got = c.output::<f32>(o);
        assert_eq!(got.len(), 10);
        assert!(got[5].abs() < 1e-16);
        assert_eq!(got[1], -0.800000011920929f64 as f32);
        // f16 computes in f32: arange(0, 1, 0.1, dtype=half)
        let mut c = TestCall::new();
        c.int(0);
        c.int(1);
        c.double(0.1);
        let o = c.out(ScalarType::Half, &[1]);
        c.ret(o);
        c.run(arange_start_out).unwrap();
        let got: Vec<f64> = c.output::<f16>(o).iter().map(|v| v.to_f64()).collect();
        assert_eq!(
            got,
            vec![
                0.0,
                0.0999755859375,
                0.199951171875,
                0.300048828125,
                0.39990234375,
                0.5,
                0.60009765625,
                0.7001953125,
                0.7998046875,
                0.89990234375
            ]
        );
        // int32 out: bounds and step truncate to int64 first: arange(1, 2.5, 0.5, dtype=int32) = [1, 1, 1]
        let mut c = TestCall::new();
        c.int(1);
        c.double(2.5);
        c.double(0.5);
        let o = c.out(ScalarType::Int, &[1]);
        c.ret(o);
        c.run(arange_start_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![1, 1, 1]);
        // wrong sign, zero step
        let mut c = TestCall::new();
        c.int(0);
        c.int(5);
        c.int(-1);
        let o = c.out(ScalarType::Long, &[4]);
        c.ret(o);
        assert!(c.run(arange_start_out).is_err());
    }

    #[test]
    fn tril() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2, 3], &[1i32, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        c.int(0);
        let o = c.out(ScalarType::Int, &[2, 2, 3]);
        c.ret(o);
        c.check(check_tril).unwrap();
        c.run(tril_out).unwrap();
        assert_eq!(
            c.output::<i32>(o),
            vec![1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0]
        );
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        c.int(-1);
        let o = c.out(ScalarType::Float, &[2, 3]);
        c.ret(o);
        c.run(tril_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0.0, 0.0, 0.0, 4.0, 0.0, 0.0]);
    }
}
