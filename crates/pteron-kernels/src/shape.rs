//! Shape and layout ops: views that copy (`view_copy`, `permute_copy`, `slice_copy`, …),
//! concatenation and splitting, repetition, padding, flips and rolls.
//!
//! Most ops here are a strided view of their input (sizes, element strides, offset) copied
//! into a contiguous output: they work on raw bytes, so every dtype is supported, and they
//! read inputs through their real strides, so inputs of any dim order work.

use pteron_core::{
    dispatch_dtype, normalize_dim, ArgAccess, ArgView, Dims, DtypeSet, Element, Kernel,
    KernelContext, KernelError, KernelRegistry, Scalar, ScalarType, TensorInfo, MAX_RANK,
};

use crate::util::{contiguous_strides, copy_view, read_int_list, require_contiguous, strided_copy};

pub fn register(r: &mut KernelRegistry) {
    let v = |f| Kernel::with_check(f, check_unary_copy).dtypes(DtypeSet::ALL);
    let rs = |f| Kernel::with_check(f, check_reshape_copy).dtypes(DtypeSet::ALL);
    r.register("aten::view_copy.out", rs(view_copy_out));
    r.register("aten::_unsafe_view.out", rs(view_copy_out));
    r.register(
        "aten::alias_copy.out",
        Kernel::with_check(alias_copy_out, check_alias).dtypes(DtypeSet::ALL),
    );
    r.register("aten::permute_copy.out", v(permute_copy_out));
    r.register(
        "aten::transpose_copy.int_out",
        Kernel::with_check(transpose_copy_out, check_copy_out3).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::t_copy.out",
        Kernel::with_check(t_copy_out, check_alias).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::slice_copy.Tensor_out",
        Kernel::with_check(slice_copy_out, check_slice).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::select_copy.int_out",
        Kernel::with_check(select_copy_out, check_copy_out3).dtypes(DtypeSet::ALL),
    );
    r.register("aten::unsqueeze_copy.out", v(unsqueeze_copy_out));
    r.register("aten::squeeze_copy.dim_out", v(squeeze_dim_out));
    r.register("aten::squeeze_copy.dims_out", v(squeeze_dims_out));
    r.register(
        "aten::squeeze_copy.out",
        Kernel::with_check(squeeze_all_out, check_alias).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::expand_copy.out",
        Kernel::with_check(expand_copy_out, check_expand).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::narrow_copy.out",
        Kernel::with_check(narrow_copy_out, check_narrow).dtypes(DtypeSet::ALL),
    );
    r.register("aten::repeat.out", rs(repeat_out));
    r.register("aten::flip.out", v(flip_out));
    r.register(
        "aten::roll.out",
        Kernel::with_check(roll_out, check_roll).dtypes(DtypeSet::ALL),
    );
    r.register("aten::pixel_shuffle.out", rs(pixel_shuffle_out));
    r.register("aten::pixel_unshuffle.out", rs(pixel_unshuffle_out));
    r.register(
        "aten::as_strided_copy.out",
        Kernel::with_check(as_strided_copy_out, check_as_strided).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::diagonal_copy.out",
        Kernel::with_check(diagonal_copy_out, check_diagonal).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::unfold_copy.out",
        Kernel::with_check(unfold_copy_out, check_unfold).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::constant_pad_nd.out",
        Kernel::with_check(constant_pad_nd_out, check_pad).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::cat.out",
        Kernel::with_check(cat_out, check_cat).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::stack.out",
        Kernel::with_check(stack_out, check_cat).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::split_copy.Tensor_out",
        Kernel::with_check(split_copy_out, check_split).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::split_with_sizes_copy.out",
        Kernel::with_check(split_with_sizes_copy_out, check_split).dtypes(DtypeSet::ALL),
    );
    r.register(
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

// ---- the view machinery ----

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
    fn empty() -> View {
        View {
            sizes: Dims::new(),
            strides: [0; MAX_RANK],
            offset: 0,
        }
    }
    fn push(&mut self, size: usize, stride: isize) -> Result<(), KernelError> {
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
fn copy_out(
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

fn copy_view_out(
    ctx: &mut KernelContext,
    op: &'static str,
    input: usize,
    out: usize,
    v: &View,
) -> Result<(), KernelError> {
    let sizes = v.sizes;
    copy_out(ctx, op, input, out, v, &sizes)
}

fn dim_arg(ctx: &KernelContext, i: usize, rank: usize) -> Result<usize, KernelError> {
    normalize_dim(ctx.int(i)?, rank)
}

fn usize_of(v: i64, what: &str) -> Result<usize, KernelError> {
    usize::try_from(v)
        .map_err(|_| KernelError::invalid(format!("{what} must be non-negative, got {v}")))
}

// ---- views ----

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
        if known == 0 || numel % known != 0 {
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

fn view_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (req, n) = read_int_list(ctx, 1)?;
    let sizes = infer_view_sizes(x.numel(), &req[..n])?;
    copy_out(ctx, "view_copy", 0, 2, &View::of(&x), &sizes)
}

fn alias_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    copy_view_out(ctx, "alias_copy", 0, 1, &View::of(&x))
}

fn permute_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
        if std::mem::replace(&mut seen[d], true) {
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

fn transpose_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (d0, d1) = (dim_arg(ctx, 1, x.rank())?, dim_arg(ctx, 2, x.rank())?);
    copy_view_out(ctx, "transpose_copy", 0, 3, &transposed(&x, d0, d1))
}

fn t_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn slice_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn narrow_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
fn remove_dim(v: &View, d: usize) -> Result<View, KernelError> {
    let mut o = View::empty();
    o.offset = v.offset;
    for k in 0..v.sizes.len() {
        if k != d {
            o.push(v.sizes[k], v.strides[k])?;
        }
    }
    Ok(o)
}

fn select_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
        return Err(KernelError::invalid(format!(
            "select_copy: index {i} out of range for size {n}"
        )));
    }
    if i < 0 {
        i += n;
    }
    let src = View::of(&x);
    let mut v = remove_dim(&src, d)?;
    v.offset = i as isize * src.strides[d];
    copy_view_out(ctx, "select_copy", 0, 3, &v)
}

fn unsqueeze_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn squeeze_dim_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let mut mask = [false; MAX_RANK];
    if x.rank() > 0 {
        mask[dim_arg(ctx, 1, x.rank())?] = true;
    } else {
        dim_arg(ctx, 1, 0)?;
    }
    squeeze_with(ctx, &x, &mask, 2)
}

fn squeeze_dims_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn squeeze_all_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    squeeze_with(ctx, &x, &[true; MAX_RANK], 1)
}

fn expand_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn repeat_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (reps, n) = read_int_list(ctx, 1)?;
    if n < x.rank() {
        return Err(KernelError::shape("repeat: fewer repeats than dims"));
    }
    if 2 * n > MAX_RANK {
        return Err(KernelError::unsupported("repeat: more than 8 repeat dims"));
    }
    let src = View::of(&x);
    let lead = n - x.rank();
    // Output [r0*s0, r1*s1, …] in row-major order is the view [r0, s0, r1, s1, …] with stride 0
    // on the repeat dims.
    let mut v = View::empty();
    let mut out = Dims::new();
    for (k, &r) in reps[..n].iter().enumerate() {
        let r = usize_of(r, "repeat count")?;
        let (s, st) = if k < lead {
            (1, 0)
        } else {
            (x.size(k - lead), src.strides[k - lead])
        };
        v.push(r, 0)?;
        v.push(s, st)?;
        out.push(r.checked_mul(s).ok_or(KernelError::SizeOverflow)?)?;
    }
    copy_out(ctx, "repeat", 0, 2, &v, &out)
}

fn flip_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (dims, n) = read_int_list(ctx, 1)?;
    let mut v = View::of(&x);
    let mut seen = [false; MAX_RANK];
    for &d in &dims[..n] {
        let d = normalize_dim(d, x.rank())?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(KernelError::invalid("flip: dim appears multiple times"));
        }
        if x.rank() == 0 || x.size(d) == 0 {
            continue;
        }
        v.offset += (x.size(d) as isize - 1) * v.strides[d];
        v.strides[d] = -v.strides[d];
    }
    copy_view_out(ctx, "flip", 0, 2, &v)
}

fn roll_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (shifts, ns) = read_int_list(ctx, 1)?;
    let (dims, nd) = read_int_list(ctx, 2)?;
    let o = *ctx.tensor(3)?;
    same_dtype_out("roll", &x, &o)?;
    ctx.resize(3, x.sizes())?;
    let o = *ctx.tensor(3)?;
    let ([xr], [or]) = ctx.io([0], [3])?;
    let elem = x.dtype().elem_size();
    if x.numel() == 0 {
        return Ok(());
    }
    // Work on the flattened tensor (dims = []) or on the tensor itself.
    let (sizes, dims_used): (Dims, ([i64; MAX_RANK], usize)) = if nd == 0 {
        if ns != 1 {
            return Err(KernelError::invalid(
                "roll: shifts must have one entry when dims is empty",
            ));
        }
        (Dims::from_slice(&[x.numel()])?, ([0; MAX_RANK], 1))
    } else {
        if ns != nd {
            return Err(KernelError::invalid(
                "roll: shifts and dims differ in length",
            ));
        }
        (x.dims(), (dims, nd))
    };
    let src_view = if nd == 0 {
        // Flattening needs the logical element order: only valid for contiguous tensors.
        require_contiguous("roll", &[&x, &o])?;
        let mut v = View::empty();
        v.push(x.numel(), 1)?;
        v
    } else {
        View::of(&x)
    };
    let rank = sizes.len();
    let mut shift = [0usize; MAX_RANK];
    for k in 0..dims_used.1 {
        let d = normalize_dim(dims_used.0[k], rank)?;
        let n = sizes[d] as i64;
        shift[d] = ((shift[d] as i64 + shifts[k].rem_euclid(n)) % n) as usize;
    }
    // Each dim splits into two ranges; copy the 2^rank blocks (only dims with a shift split).
    let dst_st = if nd == 0 {
        contiguous_strides(&sizes)
    } else {
        Dims::from_slice(o.strides())?
    };
    let mut split = [0usize; MAX_RANK];
    let mut n_split = 0;
    for d in (0..rank).filter(|&d| shift[d] != 0) {
        split[n_split] = d;
        n_split += 1;
    }
    let split = &split[..n_split];
    for mask in 0..(1usize << split.len()) {
        let mut blk = src_view;
        let mut dst_off = 0isize;
        let mut dst_strides = [0isize; MAX_RANK];
        for d in 0..rank {
            dst_strides[d] = dst_st[d] as isize;
        }
        for (bit, &d) in split.iter().enumerate() {
            let n = sizes[d];
            let s = shift[d];
            // out[i] = in[(i - s) mod n]: first block out[s..n] <- in[0..n-s], second out[0..s] <- in[n-s..n].
            if mask >> bit & 1 == 0 {
                blk.sizes.as_mut_slice()[d] = n - s;
                dst_off += s as isize * dst_strides[d];
            } else {
                blk.sizes.as_mut_slice()[d] = s;
                blk.offset += (n - s) as isize * src_view.strides[d];
            }
        }
        copy_view(
            xr.bytes,
            blk.offset,
            blk.strides(),
            or.bytes,
            dst_off,
            &dst_strides[..rank],
            &blk.sizes,
            elem,
        )?;
    }
    Ok(())
}

fn pixel_shuffle_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let r = ctx.int(1)?;
    let rank = x.rank();
    if rank < 3 || r <= 0 {
        return Err(KernelError::invalid(
            "pixel_shuffle: needs rank >= 3 and a positive factor",
        ));
    }
    // The factor comes from the program: every product with it is checked (r² wrapped to 0
    // and divided by it).
    let ovf = || KernelError::SizeOverflow;
    let r = usize::try_from(r).map_err(|_| ovf())?;
    let rr = r.checked_mul(r).ok_or_else(ovf)?;
    let (r_i, rr_i) = (
        isize::try_from(r).map_err(|_| ovf())?,
        isize::try_from(rr).map_err(|_| ovf())?,
    );
    let (c, h, w) = (x.size(rank - 3), x.size(rank - 2), x.size(rank - 1));
    if c % rr != 0 {
        return Err(KernelError::shape(format!(
            "pixel_shuffle: {c} channels not divisible by {rr}"
        )));
    }
    let src = View::of(&x);
    let (sc, sh, sw) = (
        src.strides[rank - 3],
        src.strides[rank - 2],
        src.strides[rank - 1],
    );
    let mut v = View::empty();
    let mut out = Dims::new();
    for k in 0..rank - 3 {
        v.push(x.size(k), src.strides[k])?;
        out.push(x.size(k))?;
    }
    // out[c, h*r+i, w*r+j] = in[c*r*r + i*r + j, h, w]; the output as [C, H, r, W, r].
    v.push(c / rr, sc.checked_mul(rr_i).ok_or_else(ovf)?)?;
    v.push(h, sh)?;
    v.push(r, sc.checked_mul(r_i).ok_or_else(ovf)?)?;
    v.push(w, sw)?;
    v.push(r, sc)?;
    out.push(c / rr)?;
    out.push(h.checked_mul(r).ok_or_else(ovf)?)?;
    out.push(w.checked_mul(r).ok_or_else(ovf)?)?;
    copy_out(ctx, "pixel_shuffle", 0, 2, &v, &out)
}

fn pixel_unshuffle_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let r = ctx.int(1)?;
    let rank = x.rank();
    if rank < 3 || r <= 0 {
        return Err(KernelError::invalid(
            "pixel_unshuffle: needs rank >= 3 and a positive factor",
        ));
    }
    let ovf = || KernelError::SizeOverflow;
    let r = usize::try_from(r).map_err(|_| ovf())?;
    let r_i = isize::try_from(r).map_err(|_| ovf())?;
    let (c, h, w) = (x.size(rank - 3), x.size(rank - 2), x.size(rank - 1));
    if h % r != 0 || w % r != 0 {
        return Err(KernelError::shape(format!(
            "pixel_unshuffle: {h}x{w} not divisible by {r}"
        )));
    }
    let src = View::of(&x);
    let (sc, sh, sw) = (
        src.strides[rank - 3],
        src.strides[rank - 2],
        src.strides[rank - 1],
    );
    let mut v = View::empty();
    let mut out = Dims::new();
    for k in 0..rank - 3 {
        v.push(x.size(k), src.strides[k])?;
        out.push(x.size(k))?;
    }
    // out[c*r*r + i*r + j, h, w] = in[c, h*r+i, w*r+j]; the output as [C, r, r, H, W].
    v.push(c, sc)?;
    v.push(r, sh)?;
    v.push(r, sw)?;
    v.push(h / r, sh.checked_mul(r_i).ok_or_else(ovf)?)?;
    v.push(w / r, sw.checked_mul(r_i).ok_or_else(ovf)?)?;
    out.push(
        c.checked_mul(r)
            .and_then(|v| v.checked_mul(r))
            .ok_or_else(ovf)?,
    )?;
    out.push(h / r)?;
    out.push(w / r)?;
    copy_out(ctx, "pixel_unshuffle", 0, 2, &v, &out)
}

fn as_strided_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn diagonal_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn unfold_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

// ---- padding ----

fn fill_scalar<T: Element>(out: &mut [T], v: Scalar) {
    let v = match v {
        Scalar::Int(i) => T::from_i64(i),
        Scalar::Double(d) => T::from_f64(d),
        Scalar::Bool(b) => T::from_bool(b),
    };
    out.fill(v);
}

fn constant_pad_nd_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (pad, np) = read_int_list(ctx, 1)?;
    let value = ctx.scalar(2)?;
    let o = *ctx.tensor(3)?;
    same_dtype_out("constant_pad_nd", &x, &o)?;
    let rank = x.rank();
    if np % 2 != 0 || np / 2 > rank {
        return Err(KernelError::invalid(format!(
            "constant_pad_nd: bad padding length {np} for rank {rank}"
        )));
    }
    let mut out = x.dims();
    let src = View::of(&x);
    let mut blk = src;
    let mut dst_off_idx = [0usize; MAX_RANK];
    for k in 0..np / 2 {
        let d = rank - 1 - k;
        let (lo, hi) = (pad[2 * k], pad[2 * k + 1]);
        let n = x.size(d) as i64;
        let on = n + lo + hi;
        if on < 0 {
            return Err(KernelError::shape(
                "constant_pad_nd: resulting size is negative",
            ));
        }
        out.as_mut_slice()[d] = on as usize;
        let in_start = (-lo).max(0);
        let out_start = lo.max(0);
        let len = (n - in_start).min(on - out_start).max(0);
        blk.offset += in_start as isize * src.strides[d];
        blk.sizes.as_mut_slice()[d] = len as usize;
        dst_off_idx[d] = out_start as usize;
    }
    ctx.resize(3, &out)?;
    let ([xr], [mut or]) = ctx.io([0], [3])?;
    let dt = x.dtype();
    dispatch_dtype!(dt, T => fill_scalar::<T>(or.as_mut_slice()?, value), _ => return Err(KernelError::dtype(dt, "constant_pad_nd")));
    let dst_st = Dims::from_slice(or.info.strides())?;
    let mut dst_strides = [0isize; MAX_RANK];
    let mut dst_off = 0isize;
    for d in 0..rank {
        dst_strides[d] = dst_st[d] as isize;
        dst_off += dst_off_idx[d] as isize * dst_strides[d];
    }
    copy_view(
        xr.bytes,
        blk.offset,
        blk.strides(),
        or.bytes,
        dst_off,
        &dst_strides[..rank],
        &blk.sizes,
        dt.elem_size(),
    )
}

// ---- cat, stack, split ----

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
        if stack || !skipped_in_cat(&t) {
            if reference.is_none() {
                reference = Some(t);
            }
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
                return Err(KernelError::shape(format!(
                    "stack: shapes {:?} and {:?} differ",
                    r.sizes(),
                    t.sizes()
                )));
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

fn cat_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let d = ctx.int(1)?;
    concat(ctx, "cat", d, 2, false)
}

fn stack_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn split_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn split_with_sizes_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if x.rank() == 0 {
        return Err(KernelError::invalid(
            "split_with_sizes_copy: cannot split a 0-d tensor",
        ));
    }
    let dim = dim_arg(ctx, 2, x.rank())?;
    split_into(ctx, dim, Pieces::Listed { arg: 1 }, 3, false)
}

fn unbind_copy_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn arange(n: usize) -> Vec<f32> {
        (0..n).map(|v| v as f32).collect()
    }

    /// Runs a `(self, args…, out)` op on `arange(numel(in))` and compares with PyTorch.
    fn run1(
        kernel: pteron_core::KernelFn,
        input: &[usize],
        args: impl FnOnce(&mut TestCall),
        want_sizes: &[usize],
        want: &[f32],
    ) {
        let mut c = TestCall::new();
        let n = input.iter().product();
        c.tensor(input, &arange(n));
        args(&mut c);
        let o = c.out(St::Float, &vec![1; want_sizes.len()]);
        c.ret(o);
        c.run(kernel).unwrap();
        assert_eq!(c.info(o).sizes(), want_sizes);
        assert_eq!(c.output::<f32>(o), want);
    }

    #[test]
    fn view_and_alias() {
        run1(
            view_copy_out,
            &[2, 3],
            |c| {
                c.int_list(&[3, -1]);
            },
            &[3, 2],
            &arange(6),
        );
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &arange(6));
        c.int_list(&[4, -1]);
        let o = c.out(St::Float, &[1, 1]);
        c.ret(o);
        assert!(c.run(view_copy_out).is_err());
    }

    #[test]
    fn permute_transpose_t() {
        // torch.arange(24.).view(2,3,4).permute(2,0,1)
        run1(
            permute_copy_out,
            &[2, 3, 4],
            |c| {
                c.int_list(&[2, 0, -2]);
            },
            &[4, 2, 3],
            &[
                0., 4., 8., 12., 16., 20., 1., 5., 9., 13., 17., 21., 2., 6., 10., 14., 18., 22.,
                3., 7., 11., 15., 19., 23.,
            ],
        );
        run1(
            transpose_copy_out,
            &[2, 3],
            |c| {
                c.int(0);
                c.int(-1);
            },
            &[3, 2],
            &[0., 3., 1., 4., 2., 5.],
        );
        run1(
            t_copy_out,
            &[2, 3],
            |_| {},
            &[3, 2],
            &[0., 3., 1., 4., 2., 5.],
        );
        run1(t_copy_out, &[3], |_| {}, &[3], &[0., 1., 2.]);
    }

    #[test]
    fn permute_reads_channels_last_input() {
        // A [1,2,2,2] tensor stored channels-last: logical x[0,c,h,w] = memory[(h*2+w)*2+c].
        let mut c = TestCall::new();
        c.tensor_with_dim_order(
            &[1, 2, 2, 2],
            &[0, 2, 3, 1],
            &[0.0f32, 4., 1., 5., 2., 6., 3., 7.],
        );
        c.int_list(&[0, 1, 2, 3]);
        let o = c.out(St::Float, &[1, 2, 2, 2]);
        c.ret(o);
        c.run(permute_copy_out).unwrap();
        assert_eq!(c.output::<f32>(o), arange(8));
    }

    #[test]
    fn slice_cases() {
        // (dim, start, end, step, sizes, values) for torch.arange(12.).view(3,4)
        let cases: &[(i64, Option<i64>, Option<i64>, i64, &[usize], &[f32])] = &[
            (1, Some(1), Some(3), 1, &[3, 2], &[1., 2., 5., 6., 9., 10.]),
            (
                0,
                None,
                None,
                2,
                &[2, 4],
                &[0., 1., 2., 3., 8., 9., 10., 11.],
            ),
            (
                -1,
                Some(-3),
                Some(i64::MAX),
                2,
                &[3, 2],
                &[1., 3., 5., 7., 9., 11.],
            ),
            (0, Some(-100), Some(1), 1, &[1, 4], &[0., 1., 2., 3.]),
            (0, Some(2), Some(1), 1, &[0, 4], &[]),
            (1, Some(5), None, 1, &[3, 0], &[]),
        ];
        for &(d, s, e, step, sz, want) in cases {
            run1(
                slice_copy_out,
                &[3, 4],
                |c| {
                    c.int(d);
                    match s {
                        Some(v) => c.int(v),
                        None => c.none(),
                    };
                    match e {
                        Some(v) => c.int(v),
                        None => c.none(),
                    };
                    c.int(step);
                },
                sz,
                want,
            );
        }
    }

    #[test]
    fn select_unsqueeze_squeeze() {
        run1(
            select_copy_out,
            &[3, 4],
            |c| {
                c.int(1);
                c.int(-1);
            },
            &[3],
            &[3., 7., 11.],
        );
        // The load-time check reads the out tensor at argument 3.
        let mut c = TestCall::new();
        c.tensor(&[3, 4], &arange(12));
        c.int(1);
        c.int(-1);
        let o = c.out(St::Float, &[3]);
        c.ret(o);
        c.check(check_copy_out3).unwrap();
        let mut c = TestCall::new();
        c.tensor(&[3], &arange(3));
        c.int(0);
        c.int(3);
        let o = c.out(St::Float, &[]);
        c.ret(o);
        assert!(c.run(select_copy_out).is_err());

        run1(
            unsqueeze_copy_out,
            &[2, 3],
            |c| {
                c.int(-1);
            },
            &[2, 3, 1],
            &arange(6),
        );
        run1(
            unsqueeze_copy_out,
            &[2, 3],
            |c| {
                c.int(1);
            },
            &[2, 1, 3],
            &arange(6),
        );
        run1(
            squeeze_dim_out,
            &[2, 1, 3],
            |c| {
                c.int(-2);
            },
            &[2, 3],
            &arange(6),
        );
        run1(
            squeeze_dim_out,
            &[2, 1, 3],
            |c| {
                c.int(0);
            },
            &[2, 1, 3],
            &arange(6),
        );
        run1(
            squeeze_dims_out,
            &[1, 2, 1, 3, 1],
            |c| {
                c.int_list(&[0, 2]);
            },
            &[2, 3, 1],
            &arange(6),
        );
        run1(
            squeeze_all_out,
            &[1, 2, 1, 3, 1],
            |_| {},
            &[2, 3],
            &arange(6),
        );
    }

    #[test]
    fn expand_repeat() {
        // torch.arange(3.).view(3,1).expand(2,-1,2)
        run1(
            expand_copy_out,
            &[3, 1],
            |c| {
                c.int_list(&[2, -1, 2]);
                c.bool(false);
            },
            &[2, 3, 2],
            &[0., 0., 1., 1., 2., 2., 0., 0., 1., 1., 2., 2.],
        );
        let mut c = TestCall::new();
        c.tensor(&[3, 2], &arange(6));
        c.int_list(&[3, 3]);
        c.bool(false);
        let o = c.out(St::Float, &[3, 3]);
        c.ret(o);
        assert!(c.run(expand_copy_out).is_err());
        // torch.arange(6.).view(2,3).repeat(2,1,2)
        run1(
            repeat_out,
            &[2, 3],
            |c| {
                c.int_list(&[2, 1, 2]);
            },
            &[2, 2, 6],
            &[
                0., 1., 2., 0., 1., 2., 3., 4., 5., 3., 4., 5., 0., 1., 2., 0., 1., 2., 3., 4., 5.,
                3., 4., 5.,
            ],
        );
    }

    #[test]
    fn flip_roll_narrow() {
        run1(
            flip_out,
            &[2, 3],
            |c| {
                c.int_list(&[0, -1]);
            },
            &[2, 3],
            &[5., 4., 3., 2., 1., 0.],
        );
        run1(
            flip_out,
            &[2, 3],
            |c| {
                c.int_list(&[1]);
            },
            &[2, 3],
            &[2., 1., 0., 5., 4., 3.],
        );
        // torch.arange(6.).view(2,3).roll(1) and .roll((1,-1),(0,1))
        run1(
            roll_out,
            &[2, 3],
            |c| {
                c.int_list(&[1]);
                c.int_list(&[]);
            },
            &[2, 3],
            &[5., 0., 1., 2., 3., 4.],
        );
        run1(
            roll_out,
            &[2, 3],
            |c| {
                c.int_list(&[1, -1]);
                c.int_list(&[0, 1]);
            },
            &[2, 3],
            &[4., 5., 3., 1., 2., 0.],
        );
        run1(
            roll_out,
            &[2, 3],
            |c| {
                c.int_list(&[7]);
                c.int_list(&[1]);
            },
            &[2, 3],
            &[2., 0., 1., 5., 3., 4.],
        );
        run1(
            narrow_copy_out,
            &[3, 4],
            |c| {
                c.int(1);
                c.int(-2);
                c.int(2);
            },
            &[3, 2],
            &[2., 3., 6., 7., 10., 11.],
        );
    }

    #[test]
    fn pixel_shuffle_round_trip() {
        // torch.pixel_shuffle(torch.arange(16.).view(1,4,2,2), 2)
        let want = [
            0., 4., 1., 5., 8., 12., 9., 13., 2., 6., 3., 7., 10., 14., 11., 15.,
        ];
        run1(
            pixel_shuffle_out,
            &[1, 4, 2, 2],
            |c| {
                c.int(2);
            },
            &[1, 1, 4, 4],
            &want,
        );
        // torch.pixel_unshuffle(torch.arange(16.).view(1,1,4,4), 2)
        run1(
            pixel_unshuffle_out,
            &[1, 1, 4, 4],
            |c| {
                c.int(2);
            },
            &[1, 4, 2, 2],
            &[
                0., 2., 8., 10., 1., 3., 9., 11., 4., 6., 12., 14., 5., 7., 13., 15.,
            ],
        );
    }

    #[test]
    fn as_strided_diagonal_unfold() {
        run1(
            as_strided_copy_out,
            &[3, 4],
            |c| {
                c.int_list(&[2, 2]);
                c.int_list(&[1, 4]);
                c.int(1);
            },
            &[2, 2],
            &[1., 5., 2., 6.],
        );
        let mut c = TestCall::new();
        c.tensor(&[3, 4], &arange(12));
        c.int_list(&[2, 2]);
        c.int_list(&[8, 4]);
        c.int(1);
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        assert!(c.run(as_strided_copy_out).is_err(), "reads past the input");
        run1(
            diagonal_copy_out,
            &[3, 4],
            |c| {
                c.int(1);
                c.int(0);
                c.int(1);
            },
            &[3],
            &[1., 6., 11.],
        );
        run1(
            diagonal_copy_out,
            &[3, 4],
            |c| {
                c.int(-1);
                c.int(1);
                c.int(0);
            },
            &[3],
            &[1., 6., 11.],
        );
        run1(
            diagonal_copy_out,
            &[3, 4],
            |c| {
                c.int(5);
                c.int(0);
                c.int(1);
            },
            &[0],
            &[],
        );
        // torch.arange(7.).unfold(0, 3, 2)
        run1(
            unfold_copy_out,
            &[7],
            |c| {
                c.int(0);
                c.int(3);
                c.int(2);
            },
            &[3, 3],
            &[0., 1., 2., 2., 3., 4., 4., 5., 6.],
        );
    }

    #[test]
    fn constant_pad() {
        // F.pad(torch.arange(6.).view(2,3), (1,-1,0,1), value=9)
        run1(
            constant_pad_nd_out,
            &[2, 3],
            |c| {
                c.int_list(&[1, -1, 0, 1]);
                c.double(9.0);
            },
            &[3, 3],
            &[9., 0., 1., 9., 3., 4., 9., 9., 9.],
        );
        let mut c = TestCall::new();
        c.tensor(&[2], &[1i64, 2]);
        c.int_list(&[2, 1]);
        c.int(-7);
        let o = c.out(St::Long, &[5]);
        c.ret(o);
        c.run(constant_pad_nd_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![-7, -7, 1, 2, -7]);
    }

    #[test]
    fn cat_and_stack() {
        let mut c = TestCall::new();
        let a = c.tensor_value(&[2, 1], &[0.0f32, 1.]);
        let e = c.tensor_value::<f32>(&[0], &[]);
        let b = c.tensor_value(&[2, 2], &[2.0f32, 3., 4., 5.]);
        c.tensor_list(&[a, e, b]);
        c.int(-1);
        let o = c.out(St::Float, &[2, 3]);
        c.ret(o);
        c.check(check_cat).unwrap();
        c.run(cat_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 3]);
        assert_eq!(c.output::<f32>(o), vec![0., 2., 3., 1., 4., 5.]);

        let mut c = TestCall::new();
        let a = c.tensor_value(&[2], &[0.0f32, 1.]);
        let b = c.tensor_value(&[2], &[2.0f32, 3.]);
        c.tensor_list(&[a, b]);
        c.int(1);
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        c.run(stack_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0., 2., 1., 3.]);

        // mixed dtypes: each input is cast to the output dtype (ExecuTorch's cat)
        let mut c = TestCall::new();
        let a = c.tensor_value(&[2], &[0.5f32, 1.]);
        let b = c.tensor_value(&[2], &[2i64, 3]);
        c.tensor_list(&[a, b]);
        c.int(0);
        let o = c.out(St::Float, &[4]);
        c.ret(o);
        c.check(check_cat).unwrap();
        c.run(cat_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0.5, 1., 2., 3.]);

        // ...but not into a dtype it cannot be cast to (float into int)
        let mut c = TestCall::new();
        let a = c.tensor_value(&[2], &[0.5f32, 1.]);
        let b = c.tensor_value(&[2], &[2i64, 3]);
        c.tensor_list(&[a, b]);
        c.int(0);
        let o = c.out(St::Long, &[4]);
        c.ret(o);
        assert!(c.check(check_cat).is_err());
        assert!(c.run(cat_out).is_err());

        // a channels-last output is written through its strides
        let mut c = TestCall::new();
        let a = c.tensor_value(&[1, 1, 1, 2], &[1.0f32, 2.]);
        let b = c.tensor_value(&[1, 1, 1, 2], &[3.0f32, 4.]);
        c.tensor_list(&[a, b]);
        c.int(1);
        let o = c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[0.0f32; 4]);
        c.ret(o);
        c.check(check_cat).unwrap();
        c.run(cat_out).unwrap();
        // logical [[1, 2], [3, 4]] over (C, W), stored W-major: 1 3 2 4
        assert_eq!(c.output::<f32>(o), vec![1., 3., 2., 4.]);
    }

    #[test]
    fn split_and_unbind() {
        let mut c = TestCall::new();
        c.tensor(&[5, 2], &arange(10));
        c.int(2);
        c.int(0);
        let outs: Vec<u32> = (0..3).map(|_| c.out_value(St::Float, &[1, 1])).collect();
        c.tensor_list(&outs);
        c.none();
        c.run(split_copy_out).unwrap();
        assert_eq!(c.output_value::<f32>(outs[0]), vec![0., 1., 2., 3.]);
        assert_eq!(c.output_value::<f32>(outs[2]), vec![8., 9.]);
        assert_eq!(c.info_value(outs[2]).sizes(), &[1, 2]);

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &arange(6));
        c.int_list(&[1, 2]);
        c.int(-1);
        let outs: Vec<u32> = (0..2).map(|_| c.out_value(St::Float, &[1, 1])).collect();
        c.tensor_list(&outs);
        c.none();
        c.run(split_with_sizes_copy_out).unwrap();
        assert_eq!(c.output_value::<f32>(outs[0]), vec![0., 3.]);
        assert_eq!(c.output_value::<f32>(outs[1]), vec![1., 2., 4., 5.]);

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &arange(6));
        c.int(1);
        let outs: Vec<u32> = (0..3).map(|_| c.out_value(St::Float, &[1])).collect();
        c.tensor_list(&outs);
        c.none();
        c.run(unbind_copy_out).unwrap();
        assert_eq!(c.output_value::<f32>(outs[1]), vec![1., 4.]);
        assert_eq!(c.info_value(outs[1]).sizes(), &[2]);
    }
}
