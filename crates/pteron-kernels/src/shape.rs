//! Shape and layout ops: views that copy (`view_copy`, `permute_copy`, `slice_copy`, …),
//! concatenation and splitting, repetition, padding, flips and rolls.
//!
//! Most ops here are a strided view of their input (sizes, element strides, offset) copied
//! into a contiguous output: they work on raw bytes, so every dtype is supported, and they
//! read inputs through their real strides, so inputs of any dim order work.

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelError, KernelRegistry, ScalarType, TensorInfo,
};

use crate::util::require_contiguous;

mod cat_split;
mod pad;
mod rearrange;
mod strided;
mod view;

#[cfg(test)]
mod tests;

use cat_split::{cat_out, split_copy_out, split_with_sizes_copy_out, stack_out, unbind_copy_out};
use pad::constant_pad_nd_out;
use rearrange::{flip_out, pixel_shuffle_out, pixel_unshuffle_out, repeat_out, roll_out};
pub use strided::View;
use view::{
    alias_copy_out, as_strided_copy_out, diagonal_copy_out, expand_copy_out, narrow_copy_out,
    permute_copy_out, select_copy_out, slice_copy_out, squeeze_all_out, squeeze_dim_out,
    squeeze_dims_out, t_copy_out, transpose_copy_out, unfold_copy_out, unsqueeze_copy_out,
    view_copy_out,
};
pub use view::{infer_view_sizes, slice_bounds};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    let v = |f| Kernel::with_check(f, check_unary_copy).dtypes(DtypeSet::ALL);
    let rs = |f| Kernel::with_check(f, check_reshape_copy).dtypes(DtypeSet::ALL);
    pteron_core::register_op!(S, r, "aten::view_copy.out", rs(view_copy_out));
    pteron_core::register_op!(S, r, "aten::_unsafe_view.out", rs(view_copy_out));
    pteron_core::register_op!(
        S,
        r,
        "aten::alias_copy.out",
        Kernel::with_check(alias_copy_out, check_alias).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(S, r, "aten::permute_copy.out", v(permute_copy_out));
    pteron_core::register_op!(
        S,
        r,
        "aten::transpose_copy.int_out",
        Kernel::with_check(transpose_copy_out, check_copy_out3).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::t_copy.out",
        Kernel::with_check(t_copy_out, check_alias).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::slice_copy.Tensor_out",
        Kernel::with_check(slice_copy_out, check_slice).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::select_copy.int_out",
        Kernel::with_check(select_copy_out, check_copy_out3).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(S, r, "aten::unsqueeze_copy.out", v(unsqueeze_copy_out));
    pteron_core::register_op!(S, r, "aten::squeeze_copy.dim_out", v(squeeze_dim_out));
    pteron_core::register_op!(S, r, "aten::squeeze_copy.dims_out", v(squeeze_dims_out));
    pteron_core::register_op!(
        S,
        r,
        "aten::squeeze_copy.out",
        Kernel::with_check(squeeze_all_out, check_alias).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::expand_copy.out",
        Kernel::with_check(expand_copy_out, check_expand).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::narrow_copy.out",
        Kernel::with_check(narrow_copy_out, check_narrow).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(S, r, "aten::repeat.out", rs(repeat_out));
    pteron_core::register_op!(S, r, "aten::flip.out", v(flip_out));
    pteron_core::register_op!(
        S,
        r,
        "aten::roll.out",
        Kernel::with_check(roll_out, check_roll).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(S, r, "aten::pixel_shuffle.out", rs(pixel_shuffle_out));
    pteron_core::register_op!(S, r, "aten::pixel_unshuffle.out", rs(pixel_unshuffle_out));
    pteron_core::register_op!(
        S,
        r,
        "aten::as_strided_copy.out",
        Kernel::with_check(as_strided_copy_out, check_as_strided).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::diagonal_copy.out",
        Kernel::with_check(diagonal_copy_out, check_diagonal).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::unfold_copy.out",
        Kernel::with_check(unfold_copy_out, check_unfold).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::constant_pad_nd.out",
        Kernel::with_check(constant_pad_nd_out, check_pad).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::cat.out",
        Kernel::with_check(cat_out, check_cat).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::stack.out",
        Kernel::with_check(stack_out, check_cat).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::split_copy.Tensor_out",
        Kernel::with_check(split_copy_out, check_split).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::split_with_sizes_copy.out",
        Kernel::with_check(split_with_sizes_copy_out, check_split).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::unbind_copy.int_out",
        Kernel::with_check(unbind_copy_out, check_unbind).dtypes(DtypeSet::ALL),
    );
}

// ---- checks ----

fn same_dtype_contig_out(
    op: &'static str,
    x: &TensorInfo,
    out: &TensorInfo,
) -> Result<(), KernelError> {
    if x.dtype() != out.dtype() {
        return Err(KernelError::dtype(out.dtype(), op));
    }
    require_contiguous(op, &[out])
}

/// The output has the input's dtype (any dim order: the ops below write through its strides).
fn same_dtype_out(op: &'static str, x: &TensorInfo, out: &TensorInfo) -> Result<(), KernelError> {
    if x.dtype() != out.dtype() {
        return Err(KernelError::dtype(out.dtype(), op));
    }
    Ok(())
}

/// `(self, <one more arg>, out)`: ops whose output is a reshape of the input's elements
/// (view_copy, repeat, pixel_shuffle...) want a contiguous output.
fn check_reshape_copy(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_contig_out("shape op", a.tensor(0)?, a.tensor(2)?)
}
/// `(self, <one more arg>, out)`: permute, unsqueeze, squeeze, flip (any output dim order).
fn check_unary_copy(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("shape op", a.tensor(0)?, a.tensor(2)?)
}
/// `(self, a, b, out)`: select_copy.int_out, transpose_copy.int_out.
fn check_copy_out3(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("shape op", a.tensor(0)?, a.tensor(3)?)
}
/// `(self, out)`.
fn check_alias(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("shape op", a.tensor(0)?, a.tensor(1)?)
}
fn check_slice(a: &ArgView) -> Result<(), KernelError> {
    if a.int(4)? <= 0 {
        return Err(KernelError::invalid("slice_copy: step must be positive"));
    }
    same_dtype_out("slice_copy", a.tensor(0)?, a.tensor(5)?)
}
fn check_expand(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("expand_copy", a.tensor(0)?, a.tensor(3)?)
}
fn check_narrow(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("narrow_copy", a.tensor(0)?, a.tensor(4)?)
}
fn check_roll(a: &ArgView) -> Result<(), KernelError> {
    if a.int_list(2)?.is_empty() {
        // rolling the flattened tensor needs the logical element order in memory
        require_contiguous("roll", &[a.tensor(0)?, a.tensor(3)?])?;
    }
    same_dtype_out("roll", a.tensor(0)?, a.tensor(3)?)
}
fn check_as_strided(a: &ArgView) -> Result<(), KernelError> {
    require_contiguous("as_strided_copy", &[a.tensor(0)?])?;
    same_dtype_out("as_strided_copy", a.tensor(0)?, a.tensor(4)?)
}
fn check_diagonal(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("diagonal_copy", a.tensor(0)?, a.tensor(4)?)
}
fn check_unfold(a: &ArgView) -> Result<(), KernelError> {
    same_dtype_out("unfold_copy", a.tensor(0)?, a.tensor(4)?)
}
fn check_pad(a: &ArgView) -> Result<(), KernelError> {
    let x = a.tensor(0)?;
    if !ScalarType::REAL_AND_BOOL.contains(&x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), "constant_pad_nd"));
    }
    a.scalar(2)?;
    same_dtype_out("constant_pad_nd", x, a.tensor(3)?)
}
/// cat/stack: inputs of any dtype that casts to the output's (ExecuTorch's `canCast`), any
/// dim orders.
fn check_cat(a: &ArgView) -> Result<(), KernelError> {
    let out = a.tensor(2)?;
    cat_dtypes(
        "cat/stack",
        out.dtype(),
        a.tensor_list(0)?.iter().map(|&vi| a.tensor_at(vi as usize)),
    )
}

fn cat_dtypes<'t>(
    op: &'static str,
    out: ScalarType,
    inputs: impl Iterator<Item = Result<&'t TensorInfo, KernelError>>,
) -> Result<(), KernelError> {
    if !ScalarType::REAL_AND_BOOL.contains(&out) {
        return Err(KernelError::dtype(out, op));
    }
    for t in inputs {
        let t = t?.dtype();
        if !ScalarType::REAL_AND_BOOL.contains(&t) {
            return Err(KernelError::dtype(t, op));
        }
        if !crate::elementwise::engine::can_cast(t, out) {
            return Err(KernelError::invalid(format!(
                "{op}: input dtype {t} cannot be cast to the output dtype {out}"
            )));
        }
    }
    Ok(())
}
fn check_split_outs(a: &ArgView, x: &TensorInfo, outs: usize) -> Result<(), KernelError> {
    for &vi in a.tensor_list(outs)? {
        same_dtype_out("split", x, a.tensor_at(vi as usize)?)?;
    }
    Ok(())
}
fn check_split(a: &ArgView) -> Result<(), KernelError> {
    check_split_outs(a, a.tensor(0)?, 3)
}
fn check_unbind(a: &ArgView) -> Result<(), KernelError> {
    check_split_outs(a, a.tensor(0)?, 2)
}
