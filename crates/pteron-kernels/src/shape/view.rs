//! View ops: `view_copy`/`alias_copy`, permute and transpose, slice/narrow/select,
//! (un)squeeze, expand, and the raw `as_strided_copy`, `diagonal_copy`, `unfold_copy`.

use pteron_core::{
    normalize_dim, ArgAccess, Dims, KernelContext, KernelError, TensorInfo, MAX_RANK,
};

use super::strided::{copy_out, copy_view_out, dim_arg, usize_of, View};
use crate::util::{read_int_list, require_contiguous};

/// Sizes of a `view`/`reshape`: one `-1` is inferred; the element count must match.
pub fn infer_view_sizes(numel: usize, req: &[i64]) -> Result<Dims, KernelError> {
    let mut out = Dims::new();
    let mut infer = None;
    let mut known = 1usize;
    for (i, &s) in req.iter().enumerate() {
        if s == -1 {
            if infer.replace(i).is_some() {
                return Err(KernelError::invalid(
                    "view: only one dimension can be inferred",
                ));
            }
            out.push(1)?;
        } else {
            let s = usize_of(s, "view size")?;
            known = known.checked_mul(s).ok_or(KernelError::SizeOverflow)?;
            out.push(s)?;
        }
    }
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(KernelError::shape(format!(
                "view: shape {req:?} is invalid for {numel} elements"
            )));
        }
        out.as_mut_slice()[i] = numel / known;
    } else if known != numel {
        return Err(KernelError::shape(format!(
            "view: shape {req:?} is invalid for {numel} elements"
        )));
    }
    Ok(out)
}

pub(super) fn view_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (req, n) = read_int_list(ctx, 1)?;
    let sizes = infer_view_sizes(x.numel(), &req[..n])?;
    copy_out(ctx, "view_copy", 0, 2, &View::of(&x), &sizes)
}

pub(super) fn alias_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    copy_view_out(ctx, "alias_copy", 0, 1, &View::of(&x))
}

pub(super) fn permute_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (dims, n) = read_int_list(ctx, 1)?;
    if n != x.rank() {
        return Err(KernelError::shape(format!(
            "permute: {n} dims for a rank-{} tensor",
            x.rank()
        )));
    }
    let src = View::of(&x);
    let mut v = View::empty();
    let mut seen = [false; MAX_RANK];
    for &d in &dims[..n] {
        let d = normalize_dim(d, x.rank())?;
        if core::mem::replace(&mut seen[d], true) {
            return Err(KernelError::invalid("permute: repeated dim"));
        }
        v.push(x.size(d), src.strides[d])?;
    }
    copy_view_out(ctx, "permute_copy", 0, 2, &v)
}

fn transposed(x: &TensorInfo, d0: usize, d1: usize) -> View {
    let mut v = View::of(x);
    v.sizes.as_mut_slice().swap(d0, d1);
    v.strides.swap(d0, d1);
    v
}

pub(super) fn transpose_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (d0, d1) = (dim_arg(ctx, 1, x.rank())?, dim_arg(ctx, 2, x.rank())?);
    copy_view_out(ctx, "transpose_copy", 0, 3, &transposed(&x, d0, d1))
}

pub(super) fn t_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() > 2 {
        return Err(KernelError::shape("t_copy: input has more than 2 dims"));
    }
    let v = if x.rank() == 2 {
        transposed(&x, 0, 1)
    } else {
        View::of(&x)
    };
    copy_view_out(ctx, "t_copy", 0, 1, &v)
}

/// PyTorch's slice bounds: negative indices wrap once, then everything clamps to `[0, size]`.
/// Returns (start, length) for a positive step.
pub fn slice_bounds(
    size: usize,
    start: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<(usize, usize), KernelError> {
    if step <= 0 {
        return Err(KernelError::invalid(format!(
            "slice step must be positive, got {step}"
        )));
    }
    let n = size as i64;
    let mut s = start.unwrap_or(0);
    let mut e = end.unwrap_or(i64::MAX);
    if s < 0 {
        s = s.saturating_add(n);
    }
    if e < 0 {
        e = e.saturating_add(n);
    }
    let s = s.clamp(0, n);
    let e = e.clamp(s, n);
    let len = (e - s + step - 1) / step;
    Ok((s as usize, len as usize))
}

pub(super) fn slice_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "slice_copy: cannot slice a 0-d tensor",
        ));
    }
    let d = dim_arg(ctx, 1, x.rank())?;
    let step = ctx.int(4)?;
    let (s, len) = slice_bounds(x.size(d), ctx.opt_int(2)?, ctx.opt_int(3)?, step)?;
    let mut v = View::of(&x);
    v.offset = s as isize * v.strides[d];
    v.sizes.as_mut_slice()[d] = len;
    v.strides[d] *= step as isize;
    copy_view_out(ctx, "slice_copy", 0, 5, &v)
}

pub(super) fn narrow_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "narrow_copy: cannot narrow a 0-d tensor",
        ));
    }
    let d = dim_arg(ctx, 1, x.rank())?;
    let size = x.size(d) as i64;
    let mut start = ctx.int(2)?;
    let len = ctx.int(3)?;
    if start < 0 {
        start += size;
    }
    if start < 0 || start > size || len < 0 || start + len > size {
        return Err(KernelError::invalid(format!(
            "narrow_copy: start {start}, length {len} out of range for size {size}"
        )));
    }
    let mut v = View::of(&x);
    v.offset = start as isize * v.strides[d];
    v.sizes.as_mut_slice()[d] = len as usize;
    copy_view_out(ctx, "narrow_copy", 0, 4, &v)
}

/// Removes dim `d` from a view.
pub(super) fn remove_dim(v: &View, d: usize) -> Result<View, KernelError> {
    let mut o = View::empty();
    o.offset = v.offset;
    for k in 0..v.sizes.len() {
        if k != d {
            o.push(v.sizes[k], v.strides[k])?;
        }
    }
    Ok(o)
}

pub(super) fn select_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "select_copy: cannot select from a 0-d tensor",
        ));
    }
    let d = dim_arg(ctx, 1, x.rank())?;
    let n = x.size(d) as i64;
    let mut i = ctx.int(2)?;
    if i < -n || i >= n {
        return Err(KernelError::IndexOutOfRange {
            op: "select_copy",
            index: i,
            size: x.size(d),
        });
    }
    if i < 0 {
        i += n;
    }
    let src = View::of(&x);
    let mut v = remove_dim(&src, d)?;
    v.offset = i as isize * src.strides[d];
    copy_view_out(ctx, "select_copy", 0, 3, &v)
}

pub(super) fn unsqueeze_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let d = normalize_dim(ctx.int(1)?, x.rank() + 1)?;
    let src = View::of(&x);
    let mut v = View::empty();
    for k in 0..=x.rank() {
        if k == d {
            v.push(1, 0)?;
        }
        if k < x.rank() {
            v.push(x.size(k), src.strides[k])?;
        }
    }
    copy_view_out(ctx, "unsqueeze_copy", 0, 2, &v)
}

fn squeeze_with(
    ctx: &mut KernelContext,
    x: &TensorInfo,
    mask: &[bool; MAX_RANK],
    out: usize,
) -> Result<(), KernelError> {
    let src = View::of(x);
    let mut v = View::empty();
    for k in 0..x.rank() {
        if !(mask[k] && x.size(k) == 1) {
            v.push(x.size(k), src.strides[k])?;
        }
    }
    copy_view_out(ctx, "squeeze_copy", 0, out, &v)
}

pub(super) fn squeeze_dim_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let mut mask = [false; MAX_RANK];
    if x.rank() > 0 {
        mask[dim_arg(ctx, 1, x.rank())?] = true;
    } else {
        dim_arg(ctx, 1, 0)?;
    }
    squeeze_with(ctx, &x, &mask, 2)
}

pub(super) fn squeeze_dims_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (dims, n) = read_int_list(ctx, 1)?;
    let mut mask = [false; MAX_RANK];
    for &d in &dims[..n] {
        let d = normalize_dim(d, x.rank())?;
        if x.rank() > 0 {
            mask[d] = true;
        }
    }
    squeeze_with(ctx, &x, &mask, 2)
}

pub(super) fn squeeze_all_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    squeeze_with(ctx, &x, &[true; MAX_RANK], 1)
}

pub(super) fn expand_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (req, n) = read_int_list(ctx, 1)?;
    if ctx.bool(2)? {
        // `implicit` only affects autograd bookkeeping; the values are the same.
    }
    if n < x.rank() {
        return Err(KernelError::shape(format!(
            "expand: {n} sizes for a rank-{} tensor",
            x.rank()
        )));
    }
    let src = View::of(&x);
    let lead = n - x.rank();
    let mut v = View::empty();
    for (k, &r) in req[..n].iter().enumerate() {
        if k < lead {
            if r < 0 {
                return Err(KernelError::invalid(
                    "expand: -1 is not allowed for new leading dims",
                ));
            }
            v.push(r as usize, 0)?;
        } else {
            let s = x.size(k - lead);
            if r == -1 || r as usize == s && r >= 0 {
                v.push(s, src.strides[k - lead])?;
            } else if s == 1 && r >= 0 {
                v.push(r as usize, 0)?;
            } else {
                return Err(KernelError::shape(format!(
                    "expand: cannot expand {:?} to {:?}",
                    x.sizes(),
                    &req[..n]
                )));
            }
        }
    }
    copy_view_out(ctx, "expand_copy", 0, 3, &v)
}

pub(super) fn as_strided_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    require_contiguous("as_strided_copy", &[&x])?;
    let (sizes, n) = read_int_list(ctx, 1)?;
    let (strides, ns) = read_int_list(ctx, 2)?;
    if n != ns {
        return Err(KernelError::invalid(
            "as_strided_copy: sizes and strides differ in length",
        ));
    }
    let mut v = View::empty();
    v.offset = isize::try_from(ctx.opt_int(3)?.unwrap_or(0))
        .ok()
        .filter(|&o| o >= 0)
        .ok_or_else(|| KernelError::invalid("as_strided_copy: bad storage offset"))?;
    for k in 0..n {
        let st = isize::try_from(strides[k]).ok().filter(|&s| s >= 0);
        v.push(
            usize_of(sizes[k], "size")?,
            st.ok_or_else(|| KernelError::invalid("as_strided_copy: negative stride"))?,
        )?;
    }
    // The view is bounds-checked against the input's bytes by the copy.
    copy_view_out(ctx, "as_strided_copy", 0, 4, &v)
}

pub(super) fn diagonal_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() < 2 {
        return Err(KernelError::invalid("diagonal_copy: needs at least 2 dims"));
    }
    let off = ctx.int(1)?;
    let (d1, d2) = (dim_arg(ctx, 2, x.rank())?, dim_arg(ctx, 3, x.rank())?);
    if d1 == d2 {
        return Err(KernelError::invalid("diagonal_copy: dims must differ"));
    }
    let (s1, s2) = (x.size(d1) as i64, x.size(d2) as i64);
    let len = if off >= 0 {
        (s2 - off).min(s1).max(0)
    } else {
        (s1 + off).min(s2).max(0)
    };
    let src = View::of(&x);
    let mut v = View::empty();
    for k in 0..x.rank() {
        if k != d1 && k != d2 {
            v.push(x.size(k), src.strides[k])?;
        }
    }
    if len > 0 {
        v.offset = if off >= 0 {
            off as isize * src.strides[d2]
        } else {
            -off as isize * src.strides[d1]
        };
    }
    v.push(len as usize, src.strides[d1] + src.strides[d2])?;
    copy_view_out(ctx, "diagonal_copy", 0, 4, &v)
}

pub(super) fn unfold_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let size = ctx.int(2)?;
    let step = ctx.int(3)?;
    if step <= 0 || size < 0 {
        return Err(KernelError::invalid(
            "unfold_copy: step must be positive and size non-negative",
        ));
    }
    let src = View::of(&x);
    let mut v = View::empty();
    if x.rank() == 0 {
        dim_arg(ctx, 1, 0)?;
        if size > 1 {
            return Err(KernelError::invalid(
                "unfold_copy: size too large for a 0-d tensor",
            ));
        }
        v.push(size as usize, 1)?;
        return copy_view_out(ctx, "unfold_copy", 0, 4, &v);
    }
    let d = dim_arg(ctx, 1, x.rank())?;
    let n = x.size(d) as i64;
    if size > n {
        return Err(KernelError::invalid(format!(
            "unfold_copy: size {size} exceeds dim size {n}"
        )));
    }
    for k in 0..x.rank() {
        if k == d {
            v.push(
                ((n - size) / step + 1) as usize,
                src.strides[k] * step as isize,
            )?;
        } else {
            v.push(x.size(k), src.strides[k])?;
        }
    }
    v.push(size as usize, src.strides[d])?;
    copy_view_out(ctx, "unfold_copy", 0, 4, &v)
}
