//! Scatters of a slice: `select_scatter` and `slice_scatter` copy `self`, then write `src` over a
//! view of the output.

use pteron_core::{
    normalize_dim, ArgAccess, Dims, KernelContext, KernelError, TensorInfo, MAX_RANK,
};

use super::{copy_input_to_out, same_dtype, wrap};
use crate::shape::{slice_bounds, View};
use crate::util::{contiguous_strides, copy_view};

/// Copies `self` to `out`, then writes `src` over view `v` of `out`.
fn scatter_view(
    ctx: &mut KernelContext,
    src: usize,
    out: usize,
    v: &View,
) -> Result<(), KernelError> {
    let s = *ctx.tensor(src)?;
    if s.sizes() != v.sizes.as_slice() {
        return Err(KernelError::shape_mismatch(
            "scatter",
            "src",
            &v.sizes,
            s.sizes(),
        ));
    }
    copy_input_to_out(ctx, 0, out)?;
    let ([sr], [o]) = ctx.io([src], [out])?;
    same_dtype("scatter", sr.info, o.info)?;
    let sv = View::of(&s);
    copy_view(
        sr.bytes,
        0,
        sv.strides(),
        o.bytes,
        v.offset,
        v.strides(),
        &v.sizes,
        s.dtype().elem_size(),
    )
}

/// The view of a contiguous tensor of shape `x` (as `out` will be).
fn contiguous_view(x: &TensorInfo) -> View {
    let mut v = View::of(x);
    let st = contiguous_strides(x.sizes());
    for (k, &s) in st.iter().enumerate() {
        v.strides[k] = s as isize;
    }
    v
}

pub(super) fn select_scatter_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid("select_scatter: 0-d input"));
    }
    let dim = normalize_dim(ctx.int(2)?, x.rank())?;
    let i = wrap(ctx.int(3)?, x.size(dim), "select_scatter")?;
    let full = contiguous_view(&x);
    let mut v = View::of(&x);
    v.offset = i as isize * full.strides[dim];
    // Drop `dim`.
    let mut sizes = Dims::new();
    let mut strides = [0isize; MAX_RANK];
    for k in 0..x.rank() {
        if k != dim {
            strides[sizes.len()] = full.strides[k];
            sizes.push(x.size(k))?;
        }
    }
    v.sizes = sizes;
    v.strides = strides;
    scatter_view(ctx, 1, 4, &v)
}

pub(super) fn slice_scatter_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid("slice_scatter: 0-d input"));
    }
    let dim = normalize_dim(ctx.int(2)?, x.rank())?;
    let step = ctx.int(5)?;
    let (start, len) = slice_bounds(x.size(dim), ctx.opt_int(3)?, ctx.opt_int(4)?, step)?;
    let mut v = contiguous_view(&x);
    v.offset = start as isize * v.strides[dim];
    v.sizes.as_mut_slice()[dim] = len;
    v.strides[dim] *= step as isize;
    scatter_view(ctx, 1, 6, &v)
}
