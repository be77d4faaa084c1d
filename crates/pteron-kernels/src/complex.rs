//! Complex-number ops of the portable set: `_conj_physical.out` and `view_as_real_copy.out`.
//!
//! ExecuTorch's portable kernels take complex inputs only (`ET_SWITCH_COMPLEXH_TYPES`: neither
//! accepts a real dtype), and pteron has no complex dtypes yet. Both are registered so that a
//! program using them fails at method load with an error naming the op and the dtype, rather
//! than as a missing operator; nothing is ever computed.

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::_conj_physical.out",
        Kernel::with_check(conj_physical_out, check_conj_physical).dtypes(DtypeSet::EMPTY),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::view_as_real_copy.out",
        Kernel::with_check(view_as_real_copy_out, check_view_as_real).dtypes(DtypeSet::EMPTY),
    );
}

fn refuse(dt: ScalarType, op_complex: &'static str, op_real: &'static str) -> KernelError {
    let complex = matches!(
        dt,
        ScalarType::ComplexHalf | ScalarType::ComplexFloat | ScalarType::ComplexDouble
    );
    KernelError::dtype(dt, if complex { op_complex } else { op_real })
}

fn conj_error<'p>(a: &impl ArgAccess<'p>) -> KernelError {
    match a.tensor(0) {
        Ok(t) => refuse(
            t.dtype(),
            "_conj_physical: complex dtypes are not supported by pteron yet",
            "_conj_physical: ExecuTorch's kernel takes complex tensors only",
        ),
        Err(e) => e,
    }
}

fn view_as_real_error<'p>(a: &impl ArgAccess<'p>) -> KernelError {
    match a.tensor(0) {
        Ok(t) => refuse(
            t.dtype(),
            "view_as_real_copy: complex dtypes are not supported by pteron yet",
            "view_as_real_copy: the input must be complex",
        ),
        Err(e) => e,
    }
}

/// _conj_physical.out: [self, out].
fn check_conj_physical(a: &ArgView) -> Result<(), KernelError> {
    Err(conj_error(a))
}
fn conj_physical_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    Err(conj_error(ctx))
}

/// view_as_real_copy.out: [self, out].
fn check_view_as_real(a: &ArgView) -> Result<(), KernelError> {
    Err(view_as_real_error(a))
}
fn view_as_real_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    Err(view_as_real_error(ctx))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;

    #[test]
    fn refused_at_load_naming_the_op() {
        let mut c = TestCall::new();
        c.tensor(&[2], &[1.0f32, 2.]);
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        let e = c.check(check_conj_physical).unwrap_err();
        assert!(matches!(
            e,
            KernelError::UnsupportedDType {
                dtype: ScalarType::Float,
                ..
            }
        ));
        assert!(e.to_string().contains("_conj_physical"), "{e}");
        assert!(c.run(conj_physical_out).is_err());
        let e = c.check(check_view_as_real).unwrap_err();
        assert!(e.to_string().contains("view_as_real_copy"), "{e}");
        assert!(c.run(view_as_real_copy_out).is_err());
    }
}
