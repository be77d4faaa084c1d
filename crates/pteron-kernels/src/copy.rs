//! Copies with dtype conversion and/or dim-order change: `_to_copy`, the `dim_order_ops`
//! variants, `copy`, `copy_`. Values are copied by *logical* index, so any combination of input
//! and output dim orders works; conversions follow C++ `static_cast` as PyTorch does.

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, Scalar,
};

use crate::creation::{copy_into, size_arg};
use crate::elementwise::engine::*;

fn check_in_out<const IN: usize, const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("copy", v.tensor(IN)?.dtype())?;
    require_supported("copy", out_dtype(v, OUT)?)
}

/// A `memory_format` argument: None, contiguous (0), preserve (1), channels_last (2),
/// channels_last_3d (3). The out tensor's dim order (fixed by the program) decides the layout.
fn check_memory_format<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<(), KernelError> {
    match v.opt_int(i)? {
        None | Some(0..=3) => Ok(()),
        Some(m) => Err(KernelError::invalid(format!("unknown memory_format {m}"))),
    }
}

/// An optional `dim_order` argument must agree with the out tensor's dim order.
fn check_dim_order_arg<'p>(
    v: &impl ArgAccess<'p>,
    i: usize,
    out: usize,
) -> Result<(), KernelError> {
    if let Some(l) = v.opt_int_list(i)? {
        let o = v.tensor(out)?;
        let mut same = l.len() == o.rank();
        for k in 0..l.len().min(o.rank()) {
            same &= l.get(k)? == o.dim_order()[k] as i64;
        }
        if !same {
            return Err(KernelError::invalid(format!(
                "dim_order argument does not match the out tensor's dim order {:?}",
                o.dim_order()
            )));
        }
    }
    Ok(())
}

fn check_to_copy(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    check_in_out::<0, 3>(v)?;
    check_memory_format(v, 2)
}

/// _to_copy.out: [self, non_blocking, memory_format, out].
fn to_copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    check_memory_format(ctx, 2)?;
    copy_into(ctx, 3)
}

fn check_dim_order_copy(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    check_in_out::<0, 3>(v)?;
    check_dim_order_arg(v, 2, 3)
}

/// dim_order_ops::_to_dim_order_copy.out / _clone_dim_order.out: [self, non_blocking, dim_order, out].
fn dim_order_copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    check_dim_order_arg(ctx, 2, 3)?;
    copy_into(ctx, 3)
}

fn check_empty_dim_order(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("_empty_dim_order", out_dtype(v, 2)?)?;
    check_dim_order_arg(v, 1, 2)
}

/// dim_order_ops::_empty_dim_order.out: [size, dim_order, out] (zero-filled).
fn empty_dim_order_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    check_dim_order_arg(ctx, 1, 2)?;
    let shape = size_arg(ctx, 0)?;
    ctx.resize(2, &shape)?;
    let ([], [mut o]) = ctx.io([], [2])?;
    fill_scalar(&mut o, Scalar::Int(0))
}

fn check_copy(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("copy", v.tensor(0)?.dtype())?;
    require_supported("copy", v.tensor(1)?.dtype())?;
    if v.num_args() > 4 {
        require_supported("copy", out_dtype(v, 3)?)?;
    }
    Ok(())
}

/// copy.out: [self, src, non_blocking, out]: `src` broadcast to `self`'s shape, in out's dtype.
fn copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let shape = ctx.tensor(0)?.dims();
    ctx.resize(3, &shape)?;
    let ([src], [mut o]) = ctx.io([1], [3])?;
    copy_cast(&src, &mut o)
}

/// copy_: [self, src, non_blocking, ret]: writes `src` (broadcast) into `self` in place.
fn copy_inplace(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let ([src], [mut o]) = ctx.io([1], [0])?;
    copy_cast(&src, &mut o)
}

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::_to_copy.out",
        Kernel::with_check(to_copy_out, check_to_copy).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "dim_order_ops::_to_dim_order_copy.out",
        Kernel::with_check(dim_order_copy_out, check_dim_order_copy).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "dim_order_ops::_clone_dim_order.out",
        Kernel::with_check(dim_order_copy_out, check_dim_order_copy).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "dim_order_ops::_empty_dim_order.out",
        Kernel::with_check(empty_dim_order_out, check_empty_dim_order).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::copy.out",
        Kernel::with_check(copy_out, check_copy).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::copy_",
        // Copies `src` into `self` (argument 0) in place.
        Kernel::with_check(copy_inplace, check_copy)
            .dtypes(DtypeSet::ALL)
            .writes_in_place(&[0]),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::tests_util::b;
    use pteron_core::half::{bf16, f16};
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, ScalarType};

    #[test]
    fn to_copy_conversions() {
        // float -> int truncates toward zero; -> bool is != 0; -> half/bf16 rounds to nearest
        let x = [-2.7f32, -0.0, 0.5, 3.9, 65519.0];
        let mut c = TestCall::new();
        c.tensor(&[5], &x);
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Int, &[5]);
        c.ret(o);
        c.check(check_to_copy).unwrap();
        c.run(to_copy_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-2, 0, 0, 3, 65519]);

        for (dt, want) in [
            (ScalarType::Bool, None),
            (
                ScalarType::Half,
                Some(vec![-2.69921875f32, -0.0, 0.5, 3.900390625, 65504.0]),
            ),
            (
                ScalarType::BFloat16,
                Some(vec![-2.703125f32, -0.0, 0.5, 3.90625, 65536.0]),
            ),
        ] {
            let mut c = TestCall::new();
            c.tensor(&[5], &x);
            c.bool(false);
            c.none();
            let o = c.out(dt, &[5]);
            c.ret(o);
            c.run(to_copy_out).unwrap();
            match dt {
                ScalarType::Bool => {
                    assert_eq!(c.output::<Bool>(o), b(&[true, false, true, true, true]))
                }
                ScalarType::Half => {
                    let got: Vec<f32> = c.output::<f16>(o).iter().map(|v| v.to_f32()).collect();
                    assert_eq!(got, want.unwrap());
                }
                _ => {
                    let got: Vec<f32> = c.output::<bf16>(o).iter().map(|v| v.to_f32()).collect();
                    assert_eq!(got, want.unwrap());
                }
            }
        }

        // int64 -> int8 wraps; bool -> float
        let mut c = TestCall::new();
        c.tensor(&[3], &[300i64, -129, 5]);
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Char, &[3]);
        c.ret(o);
        c.run(to_copy_out).unwrap();
        assert_eq!(c.output::<i8>(o), vec![44, 127, 5]);
        let mut c = TestCall::new();
        c.tensor(&[2], &b(&[true, false]));
        c.bool(false);
        c.int(1);
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        c.run(to_copy_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1.0, 0.0]);
    }

    #[test]
    fn dim_order_copy_contiguous_to_channels_last_and_back() {
        // logical x[0,c,h,w] = c*4 + h*2 + w  (shape [1,2,2,2])
        let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
        let mut c = TestCall::new();
        c.tensor(&[1, 2, 2, 2], &x);
        c.bool(false);
        c.int_list(&[0, 2, 3, 1]);
        let o = c.tensor_with_dim_order(&[1, 2, 2, 2], &[0, 2, 3, 1], &[0.0f32; 8]);
        c.ret(o);
        c.check(check_dim_order_copy).unwrap();
        c.run(dim_order_copy_out).unwrap();
        // memory order (n, h, w, c)
        assert_eq!(
            c.output::<f32>(o),
            vec![0.0, 4.0, 1.0, 5.0, 2.0, 6.0, 3.0, 7.0]
        );

        let mem = c.output::<f32>(o);
        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[1, 2, 2, 2], &[0, 2, 3, 1], &mem);
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Half, &[1, 2, 2, 2]);
        c.ret(o);
        c.run(dim_order_copy_out).unwrap();
        let got: Vec<f32> = c.output::<f16>(o).iter().map(|v| v.to_f32()).collect();
        assert_eq!(got, x);

        // a dim_order argument that disagrees with the out tensor is rejected
        let mut c = TestCall::new();
        c.tensor(&[1, 2, 2, 2], &x);
        c.bool(false);
        c.int_list(&[0, 2, 3, 1]);
        let o = c.out(ScalarType::Float, &[1, 2, 2, 2]);
        c.ret(o);
        assert!(c.check(check_dim_order_copy).is_err());
        assert!(c.run(dim_order_copy_out).is_err());
    }

    #[test]
    fn copy_and_copy_inplace_broadcast() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[0.0f32; 4]);
        c.tensor(&[2], &[1i64, 2]);
        c.bool(false);
        let o = c.out(ScalarType::Float, &[2, 2]);
        c.ret(o);
        c.check(check_copy).unwrap();
        c.run(copy_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1.0, 2.0, 1.0, 2.0]);

        let mut c = TestCall::new();
        let s = c.tensor(&[2, 2], &[0.0f32; 4]);
        c.tensor(&[2, 1], &[5.0f32, 6.0]);
        c.bool(false);
        c.ret(s);
        c.check(check_copy).unwrap();
        c.run(copy_inplace).unwrap();
        assert_eq!(c.output::<f32>(s), vec![5.0, 5.0, 6.0, 6.0]);
    }

    #[test]
    fn empty_dim_order() {
        let mut c = TestCall::new();
        c.int_list(&[2, 3]);
        c.none();
        let o = c.out(ScalarType::Long, &[1, 1]);
        c.ret(o);
        c.check(check_empty_dim_order).unwrap();
        c.run(empty_dim_order_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 3]);
        assert_eq!(c.output::<i64>(o), vec![0; 6]);
    }
}
