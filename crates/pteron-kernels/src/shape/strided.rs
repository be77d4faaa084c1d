//! The view machinery: a strided [`View`] of an input and copying one into an output.

use pteron_core::{
    normalize_dim, ArgAccess, Dims, KernelContext, KernelError, TensorInfo, MAX_RANK,
};

use super::same_dtype_out;
use crate::util::{copy_view, strided_copy};

/// A strided view of an input: sizes, element strides and element offset.
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub sizes: Dims,
    pub strides: [isize; MAX_RANK],
    pub offset: isize,
}

impl View {
    /// The tensor itself, through its real strides.
    pub fn of(t: &TensorInfo) -> View {
        let mut strides = [0isize; MAX_RANK];
        for (o, &s) in strides.iter_mut().zip(t.strides()) {
            *o = s as isize;
        }
        View {
            sizes: t.dims(),
            strides,
            offset: 0,
        }
    }
    pub(super) fn empty() -> View {
        View {
            sizes: Dims::new(),
            strides: [0; MAX_RANK],
            offset: 0,
        }
    }
    pub(super) fn push(&mut self, size: usize, stride: isize) -> Result<(), KernelError> {
        let r = self.sizes.len();
        self.sizes.push(size)?;
        self.strides[r] = stride;
        Ok(())
    }
    pub fn strides(&self) -> &[isize] {
        &self.strides[..self.sizes.len()]
    }
}

/// Copies view `v` of argument `input` into the contiguous output argument `out`, resized to
/// `out_sizes` (which must have as many elements as the view, in the same order).
pub(super) fn copy_out(
    ctx: &mut KernelContext,
    op: &'static str,
    input: usize,
    out: usize,
    v: &View,
    out_sizes: &[usize],
) -> Result<(), KernelError> {
    let (x, o) = (*ctx.tensor(input)?, *ctx.tensor(out)?);
    same_dtype_out(op, &x, &o)?;
    ctx.resize(out, out_sizes)?;
    let o = *ctx.tensor(out)?;
    let ([x], [or]) = ctx.io([input], [out])?;
    let elem = x.info.dtype().elem_size();
    if o.is_contiguous() {
        return strided_copy(x.bytes, elem, v.offset, &v.sizes, v.strides(), or.bytes);
    }
    // a non-default output dim order: write the view through the output's strides, which
    // needs the view to have the output's shape (not a reshape)
    if v.sizes.as_slice() != out_sizes {
        return Err(KernelError::unsupported(format!(
            "{op}: output dim order {:?} for a reshape (only the default dim order)",
            o.dim_order()
        )));
    }
    let dst = crate::util::istrides(&o);
    copy_view(
        x.bytes,
        v.offset,
        v.strides(),
        or.bytes,
        0,
        &dst[..o.rank()],
        &v.sizes,
        elem,
    )
}

pub(super) fn copy_view_out(
    ctx: &mut KernelContext,
    op: &'static str,
    input: usize,
    out: usize,
    v: &View,
) -> Result<(), KernelError> {
    let sizes = v.sizes;
    copy_out(ctx, op, input, out, v, &sizes)
}

pub(super) fn dim_arg(ctx: &KernelContext, i: usize, rank: usize) -> Result<usize, KernelError> {
    normalize_dim(ctx.int(i)?, rank)
}

pub(super) fn usize_of(v: i64, what: &str) -> Result<usize, KernelError> {
    usize::try_from(v)
        .map_err(|_| KernelError::invalid(format!("{what} must be non-negative, got {v}")))
}
