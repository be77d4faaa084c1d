//! Concatenation and splitting: `cat`, `stack`, `split_copy`, `split_with_sizes_copy`,
//! `unbind_copy`.

use pteron_core::{
    dispatch_dtype, normalize_dim, ArgAccess, Dims, KernelContext, KernelError, TensorInfo,
};

use super::strided::{dim_arg, usize_of, View};
use super::view::remove_dim;
use super::{cat_dtypes, same_dtype_out};
use crate::util::copy_view;

/// Is `t` the legacy empty 1-d tensor that `cat` skips?
fn skipped_in_cat(t: &TensorInfo) -> bool {
    t.rank() == 1 && t.size(0) == 0
}

/// Copies the list items of argument `list` into the output `out` along `dim`; each input is
/// viewed with `unsqueeze_at` inserted as a size-1 dim when stacking.
fn concat(
    ctx: &mut KernelContext,
    op: &'static str,
    dim_i: i64,
    out: usize,
    stack: bool,
) -> Result<(), KernelError> {
    let n_items = ctx.tensor_list(0)?.len();
    // The list item `k` as a value index (re-read each time: the list borrows `ctx`).
    let item = |ctx: &KernelContext, k: usize| -> Result<usize, KernelError> {
        Ok(ctx.tensor_list(0)?[k] as usize)
    };
    let o = *ctx.tensor(out)?;
    cat_dtypes(
        op,
        o.dtype(),
        (0..n_items).map(|k| ctx.tensor_at(item(ctx, k)?)),
    )?;
    // Reference shape: the first non-skipped tensor.
    let mut reference: Option<TensorInfo> = None;
    for k in 0..n_items {
        let t = *ctx.tensor_at(item(ctx, k)?)?;
        if (stack || !skipped_in_cat(&t)) && reference.is_none() {
            reference = Some(t);
        }
    }
    let Some(r) = reference else {
        if stack {
            return Err(KernelError::invalid(
                "stack: expects a non-empty list of tensors",
            ));
        }
        // Every input is an empty 1-d tensor: the result is one too.
        if n_items == 0 {
            return Err(KernelError::invalid(
                "cat: expects a non-empty list of tensors",
            ));
        }
        ctx.resize(out, &[0])?;
        return Ok(());
    };
    let out_rank = r.rank() + stack as usize;
    let dim = normalize_dim(dim_i, out_rank)?;
    if !stack && r.rank() == 0 {
        return Err(KernelError::invalid(
            "cat: zero-dimensional tensors cannot be concatenated",
        ));
    }
    // Validate shapes and compute the output size along `dim`.
    let mut total = 0usize;
    for k in 0..n_items {
        let t = *ctx.tensor_at(item(ctx, k)?)?;
        if !stack && skipped_in_cat(&t) {
            continue;
        }
        if stack {
            if t.sizes() != r.sizes() {
                return Err(KernelError::shape_mismatch(
                    "stack",
                    "input",
                    r.sizes(),
                    t.sizes(),
                ));
            }
            total += 1;
        } else {
            if t.rank() != r.rank() || (0..r.rank()).any(|k| k != dim && t.size(k) != r.size(k)) {
                return Err(KernelError::shape(format!(
                    "cat: shapes {:?} and {:?} do not match outside dim {dim}",
                    r.sizes(),
                    t.sizes()
                )));
            }
            total += t.size(dim);
        }
    }
    let mut out_sizes = Dims::new();
    for k in 0..out_rank {
        let s = if k == dim {
            total
        } else if stack {
            r.size(if k < dim { k } else { k - 1 })
        } else {
            r.size(k)
        };
        out_sizes.push(s)?;
    }
    ctx.resize(out, &out_sizes)?;
    let out_vi = ctx.value_index(out)?;
    // the output's own strides: any dim order
    let dst_strides = crate::util::istrides(ctx.tensor(out)?);
    let elem = o.dtype().elem_size();
    let mut pos = 0usize;
    for k in 0..n_items {
        let vi = item(ctx, k)?;
        let t = *ctx.tensor_at(vi)?;
        if !stack && skipped_in_cat(&t) {
            continue;
        }
        let mut v = View::of(&t);
        if stack {
            let src = v;
            v = View::empty();
            for k in 0..out_rank {
                if k == dim {
                    v.push(1, 0)?;
                } else {
                    let j = if k < dim { k } else { k - 1 };
                    v.push(src.sizes[j], src.strides[j])?;
                }
            }
        }
        let n = v.sizes[dim];
        let ([x], [mut or]) = ctx.io_values([vi], [out_vi])?;
        let dst_off = pos as isize * dst_strides[dim];
        if t.dtype() == o.dtype() {
            copy_view(
                x.bytes,
                v.offset,
                v.strides(),
                or.bytes,
                dst_off,
                &dst_strides[..out_rank],
                &v.sizes,
                elem,
            )?;
        } else {
            let (sd, od) = (t.dtype(), o.dtype());
            dispatch_dtype!(sd, S => dispatch_dtype!(od, D => crate::util::copy_view_cast::<S, D>(
                    x.as_slice::<S>()?,
                    v.offset,
                    v.strides(),
                    or.as_mut_slice::<D>()?,
                    dst_off,
                    &dst_strides[..out_rank],
                    &v.sizes,
                )?,
                _ => return Err(KernelError::dtype(od, op))),
                _ => return Err(KernelError::dtype(sd, op)));
        }
        pos += n;
    }
    Ok(())
}

pub(super) fn cat_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let d = ctx.int(1)?;
    concat(ctx, "cat", d, 2, false)
}

pub(super) fn stack_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let d = ctx.int(1)?;
    concat(ctx, "stack", d, 2, true)
}

/// The sizes of the consecutive pieces a split cuts along its dim.
#[derive(Clone, Copy)]
enum Pieces {
    /// `count` pieces of `size` (the last one possibly smaller) out of `total`.
    Even {
        size: usize,
        count: usize,
        total: usize,
    },
    /// The sizes listed in the `int[]` argument `arg`.
    Listed { arg: usize },
    /// `count` pieces of size 1.
    Ones { count: usize },
}

impl Pieces {
    fn count(&self, ctx: &KernelContext) -> Result<usize, KernelError> {
        match *self {
            Pieces::Even { count, .. } | Pieces::Ones { count } => Ok(count),
            Pieces::Listed { arg } => Ok(ctx.int_list(arg)?.len()),
        }
    }

    /// The size of piece `k`.
    fn size(&self, ctx: &KernelContext, k: usize) -> Result<usize, KernelError> {
        match *self {
            Pieces::Even { size, total, .. } => Ok(size.min(total - (k * size).min(total))),
            Pieces::Listed { arg } => usize_of(ctx.int_list(arg)?.get(k)?, "split size"),
            Pieces::Ones { .. } => Ok(1),
        }
    }
}

/// Copies consecutive pieces of argument 0 along `dim` into the list items of argument
/// `outs`; when `drop_dim` (unbind), each piece has size 1 and the dim is removed.
fn split_into(
    ctx: &mut KernelContext,
    dim: usize,
    pieces: Pieces,
    outs: usize,
    drop_dim: bool,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let n_items = ctx.tensor_list(outs)?.len();
    let n_pieces = pieces.count(ctx)?;
    if n_items != n_pieces {
        return Err(KernelError::invalid(format!(
            "split: {n_items} outputs for {n_pieces} pieces"
        )));
    }
    let mut sum = 0usize;
    for k in 0..n_pieces {
        sum = sum.saturating_add(pieces.size(ctx, k)?);
    }
    if sum != x.size(dim) {
        return Err(KernelError::shape(format!(
            "split: pieces summing to {sum} do not fit size {}",
            x.size(dim)
        )));
    }
    let in_vi = ctx.value_index(0)?;
    let src = View::of(&x);
    let mut start = 0usize;
    for k in 0..n_items {
        let vi = ctx.tensor_list(outs)?[k] as usize;
        let len = pieces.size(ctx, k)?;
        let o = *ctx.tensor_at(vi)?;
        same_dtype_out("split", &x, &o)?;
        let mut v = src;
        v.offset = start as isize * src.strides[dim];
        v.sizes.as_mut_slice()[dim] = len;
        if drop_dim {
            v = remove_dim(&v, dim)?;
        }
        ctx.resize_value(vi, &v.sizes)?;
        let dst = crate::util::istrides(ctx.tensor_at(vi)?);
        let ([xr], [or]) = ctx.io_values([in_vi], [vi])?;
        copy_view(
            xr.bytes,
            v.offset,
            v.strides(),
            or.bytes,
            0,
            &dst[..v.sizes.len()],
            &v.sizes,
            x.dtype().elem_size(),
        )?;
        start += len;
    }
    Ok(())
}

pub(super) fn split_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "split_copy: cannot split a 0-d tensor",
        ));
    }
    let size = ctx.int(1)?;
    let dim = dim_arg(ctx, 2, x.rank())?;
    let n = x.size(dim);
    let nout = ctx.tensor_list(3)?.len();
    if size < 0 {
        return Err(KernelError::invalid("split_copy: negative split size"));
    }
    let size = size as usize;
    // PyTorch: ceil(n / size) chunks (at least one), the last one possibly smaller.
    let chunks = if size == 0 {
        1
    } else {
        n.div_ceil(size).max(1)
    };
    if chunks != nout {
        return Err(KernelError::invalid(format!(
            "split_copy: {nout} outputs, expected {chunks}"
        )));
    }
    let pieces = Pieces::Even {
        size,
        count: chunks,
        total: n,
    };
    split_into(ctx, dim, pieces, 3, false)
}

pub(super) fn split_with_sizes_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "split_with_sizes_copy: cannot split a 0-d tensor",
        ));
    }
    let dim = dim_arg(ctx, 2, x.rank())?;
    split_into(ctx, dim, Pieces::Listed { arg: 1 }, 3, false)
}

pub(super) fn unbind_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "unbind_copy: cannot unbind a 0-d tensor",
        ));
    }
    let dim = dim_arg(ctx, 1, x.rank())?;
    let pieces = Pieces::Ones { count: x.size(dim) };
    split_into(ctx, dim, pieces, 2, true)
}
