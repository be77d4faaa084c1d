//! Indexing: `index_select`, `gather`, `scatter` (src/value/add), advanced indexing
//! (`index.Tensor`, `index_put`), `select_scatter`, `slice_scatter`, `nonzero`.
//!
//! Every index is bounds-checked (negative ones wrap once, as PyTorch): an out-of-range index
//! is an error, never an out-of-bounds access. Copies work on raw bytes (any dtype); ops that
//! add (`scatter_add`, `index_put` with accumulate) dispatch on the dtype.

use pteron_core::DtypeSet;
use pteron_core::{
    ArgAccess, ArgView, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType, TensorInfo,
    NONE_INDEX,
};

use crate::shape::View;
use crate::util::require_contiguous;

mod advanced;
mod gather_scatter;
mod nonzero;
mod slice_scatter;

#[cfg(test)]
mod tests;

use advanced::{index_put_out, index_tensor_out};
use gather_scatter::{
    gather_out, index_select_out, scatter_add_out, scatter_src_out, scatter_value_out,
};
use nonzero::nonzero_out;
use slice_scatter::{select_scatter_out, slice_scatter_out};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::index_select.out",
        Kernel::with_check(index_select_out, check_index_select).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::gather.out",
        Kernel::with_check(gather_out, check_gather).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::scatter.src_out",
        Kernel::with_check(scatter_src_out, check_scatter_src).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::scatter.value_out",
        Kernel::with_check(scatter_value_out, check_scatter_value).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::scatter_add.out",
        Kernel::with_check(scatter_add_out, check_scatter_add).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::index.Tensor_out",
        Kernel::with_check(index_tensor_out, check_index).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::index_put.out",
        Kernel::with_check(index_put_out, check_index_put).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::select_scatter.out",
        Kernel::with_check(select_scatter_out, check_select_scatter).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::slice_scatter.out",
        Kernel::with_check(slice_scatter_out, check_slice_scatter).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::nonzero.out",
        Kernel::with_check(nonzero_out, check_nonzero).dtypes(DtypeSet::ALL),
    );
}

fn is_index_dtype(dt: ScalarType) -> bool {
    matches!(dt, ScalarType::Long | ScalarType::Int)
}

fn same_dtype(op: &'static str, a: &TensorInfo, b: &TensorInfo) -> Result<(), KernelError> {
    if a.dtype() != b.dtype() {
        return Err(KernelError::dtype(b.dtype(), op));
    }
    Ok(())
}

fn check_basic(
    a: &ArgView,
    op: &'static str,
    x: usize,
    index: usize,
    out: usize,
) -> Result<(), KernelError> {
    let (xt, it, ot) = (a.tensor(x)?, a.tensor(index)?, a.tensor(out)?);
    if !is_index_dtype(it.dtype()) {
        return Err(KernelError::dtype(it.dtype(), op));
    }
    same_dtype(op, xt, ot)?;
    require_contiguous(op, &[xt, it, ot])
}
fn check_index_select(a: &ArgView) -> Result<(), KernelError> {
    check_basic(a, "index_select", 0, 2, 3)
}
fn check_gather(a: &ArgView) -> Result<(), KernelError> {
    check_basic(a, "gather", 0, 2, 4)
}
fn check_scatter_src(a: &ArgView) -> Result<(), KernelError> {
    check_basic(a, "scatter", 0, 2, 4)?;
    same_dtype("scatter", a.tensor(0)?, a.tensor(3)?)?;
    require_contiguous("scatter", &[a.tensor(3)?])
}
fn check_scatter_value(a: &ArgView) -> Result<(), KernelError> {
    a.scalar(3)?;
    let dt = a.tensor(0)?.dtype();
    if !ScalarType::REAL_AND_BOOL.contains(&dt) {
        return Err(KernelError::dtype(dt, "scatter"));
    }
    check_basic(a, "scatter", 0, 2, 4)
}
fn check_scatter_add(a: &ArgView) -> Result<(), KernelError> {
    check_scatter_src(a)?;
    let dt = a.tensor(0)?.dtype();
    if !ScalarType::REAL_AND_BOOL.contains(&dt) {
        return Err(KernelError::dtype(dt, "scatter_add"));
    }
    Ok(())
}
fn check_index_list(a: &ArgView, op: &'static str, list: usize) -> Result<(), KernelError> {
    for &vi in a.opt_tensor_list(list)? {
        if vi == NONE_INDEX {
            continue;
        }
        let t = a.tensor_at(vi as usize)?;
        if !matches!(
            t.dtype(),
            ScalarType::Long | ScalarType::Int | ScalarType::Bool | ScalarType::Byte
        ) {
            return Err(KernelError::dtype(t.dtype(), op));
        }
        require_contiguous(op, &[t])?;
    }
    Ok(())
}
fn check_index(a: &ArgView) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(0)?, a.tensor(2)?);
    same_dtype("index", x, o)?;
    require_contiguous("index", &[x, o])?;
    check_index_list(a, "index", 1)
}
fn check_index_put(a: &ArgView) -> Result<(), KernelError> {
    let (x, v, o) = (a.tensor(0)?, a.tensor(2)?, a.tensor(4)?);
    same_dtype("index_put", x, o)?;
    same_dtype("index_put", x, v)?;
    if a.bool(3)? && !ScalarType::REAL_AND_BOOL.contains(&x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), "index_put"));
    }
    require_contiguous("index_put", &[x, v, o])?;
    check_index_list(a, "index_put", 1)
}
fn check_select_scatter(a: &ArgView) -> Result<(), KernelError> {
    let (x, s, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(4)?);
    same_dtype("select_scatter", x, o)?;
    same_dtype("select_scatter", x, s)?;
    require_contiguous("select_scatter", &[o])
}
fn check_slice_scatter(a: &ArgView) -> Result<(), KernelError> {
    let (x, s, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(6)?);
    same_dtype("slice_scatter", x, o)?;
    same_dtype("slice_scatter", x, s)?;
    require_contiguous("slice_scatter", &[o])
}
fn check_nonzero(a: &ArgView) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(0)?, a.tensor(1)?);
    if !ScalarType::REAL_AND_BOOL.contains(&x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), "nonzero"));
    }
    if o.dtype() != ScalarType::Long || o.rank() != 2 {
        return Err(KernelError::unsupported(
            "nonzero: output must be a 2-d int64 tensor",
        ));
    }
    Ok(())
}

/// Wraps a possibly negative index into `0..size`, or errors.
#[inline]
fn wrap(i: i64, size: usize, op: &'static str) -> Result<usize, KernelError> {
    let n = size as i64;
    let j = if i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(KernelError::IndexOutOfRange { op, index: i, size });
    }
    Ok(j as usize)
}

/// Copies the whole of argument `src` into the output `out` (resized to its shape).
fn copy_input_to_out(ctx: &mut KernelContext, src: usize, out: usize) -> Result<(), KernelError> {
    let x = *ctx.tensor(src)?;
    ctx.resize(out, x.sizes())?;
    let ([xr], [or]) = ctx.io([src], [out])?;
    let v = View::of(&x);
    crate::util::strided_copy(
        xr.bytes,
        x.dtype().elem_size(),
        0,
        &v.sizes,
        v.strides(),
        or.bytes,
    )
}
