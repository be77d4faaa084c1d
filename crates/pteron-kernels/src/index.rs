//! Indexing: `index_select`, `gather`, `scatter` (src/value/add), advanced indexing
//! (`index.Tensor`, `index_put`), `select_scatter`, `slice_scatter`, `nonzero`.
//!
//! Every index is bounds-checked (negative ones wrap once, as PyTorch): an out-of-range index
//! is an error, never an out-of-bounds access. Copies work on raw bytes (any dtype); ops that
//! add (`scatter_add`, `index_put` with accumulate) dispatch on the dtype.

use pteron_core::DtypeSet;
use pteron_core::{
    dispatch_dtype, normalize_dim, ArgAccess, ArgView, Dims, Element, Kernel, KernelContext,
    KernelError, KernelRegistry, Scalar, ScalarType, TensorInfo, TensorRef, MAX_RANK, NONE_INDEX,
};

use crate::embedding::Indices;
use crate::shape::{slice_bounds, View};
use crate::util::{
    broadcast_shapes, broadcast_strides, contiguous_strides, copy_view, for_each_strided,
    require_contiguous,
};

pub fn register(r: &mut KernelRegistry) {
    r.register(
        "aten::index_select.out",
        Kernel::with_check(index_select_out, check_index_select).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::gather.out",
        Kernel::with_check(gather_out, check_gather).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::scatter.src_out",
        Kernel::with_check(scatter_src_out, check_scatter_src).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::scatter.value_out",
        Kernel::with_check(scatter_value_out, check_scatter_value).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::scatter_add.out",
        Kernel::with_check(scatter_add_out, check_scatter_add).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::index.Tensor_out",
        Kernel::with_check(index_tensor_out, check_index).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::index_put.out",
        Kernel::with_check(index_put_out, check_index_put).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::select_scatter.out",
        Kernel::with_check(select_scatter_out, check_select_scatter).dtypes(DtypeSet::ALL),
    );
    r.register(
        "aten::slice_scatter.out",
        Kernel::with_check(slice_scatter_out, check_slice_scatter).dtypes(DtypeSet::ALL),
    );
    r.register(
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
fn wrap(i: i64, size: usize, op: &str) -> Result<usize, KernelError> {
    let n = size as i64;
    let j = if i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(KernelError::invalid(format!(
            "{op}: index {i} out of range for size {size}"
        )));
    }
    Ok(j as usize)
}

/// Copies the whole of argument `src` into the output `out` (resized to its shape).
fn copy_input_to_out(ctx: &mut KernelContext, src: usize, out: usize) -> Result<(), KernelError> {
    let x = *ctx.tensor(src)?;
    ctx.resize(out, x.sizes())?;
    let ([xr], [mut or]) = ctx.io([src], [out])?;
    let v = View::of(&x);
    crate::util::strided_copy(
        xr.bytes,
        x.dtype().elem_size(),
        0,
        &v.sizes,
        v.strides(),
        &mut or.bytes,
    )
}

// ---- index_select, gather, scatter ----

fn index_select_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, idx) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    require_contiguous("index_select", &[&x, &idx, ctx.tensor(3)?])?;
    if idx.rank() > 1 {
        return Err(KernelError::shape("index_select: index must be 0-d or 1-d"));
    }
    let dim = normalize_dim(ctx.int(1)?, x.rank())?;
    let (outer, size, inner) = if x.rank() == 0 {
        (1, 1, 1)
    } else {
        crate::util::outer_dim_inner(x.sizes(), dim)
    };
    let mut osz = x.dims();
    if x.rank() > 0 {
        osz.as_mut_slice()[dim] = idx.numel();
    } else if idx.numel() != 1 {
        return Err(KernelError::shape(
            "index_select: a 0-d input needs exactly one index",
        ));
    }
    ctx.resize(3, &osz)?;
    let ([xr, ir], [o]) = ctx.io([0, 2], [3])?;
    same_dtype("index_select", xr.info, o.info)?;
    let ids = Indices::of(&ir)?;
    let eb = x.dtype().elem_size() * inner;
    let n = ids.len();
    for k in 0..n {
        let i = wrap(ids.get(k), size, "index_select")?;
        for p in 0..outer {
            let d = (p * n + k) * eb;
            let s = (p * size + i) * eb;
            o.bytes[d..d + eb].copy_from_slice(&xr.bytes[s..s + eb]);
        }
    }
    Ok(())
}

/// For every element of `index` (contiguous, shape `ishape`, values `ids`): calls
/// `f(k, t, s)` with `k` its offset into `index`, `t` the offset into a contiguous tensor of
/// shape `tshape` with the `dim` coordinate replaced by the index value, and `s` the offset of
/// the same position in a contiguous `src` of shape `sshape` (`None`: `src` is laid out like
/// `index`, so `s == k`). Checks `index.size(d) <= tshape[d]` for `d != dim`.
fn scatter_offsets(
    op: &'static str,
    ishape: &[usize],
    ids: Indices,
    (tshape, dim): (&[usize], usize),
    sshape: Option<&[usize]>,
    mut f: impl FnMut(usize, usize, usize) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    if let Some(sshape) = sshape {
        if ishape.len() != sshape.len() || ishape.iter().zip(sshape).any(|(i, s)| i > s) {
            return Err(KernelError::shape(format!(
                "{op}: index {ishape:?} larger than src {sshape:?}"
            )));
        }
    }
    if ishape.len() != tshape.len().max(1) && !(ishape.is_empty() && tshape.is_empty()) {
        return Err(KernelError::shape(format!(
            "{op}: index rank {} differs from input rank {}",
            ishape.len(),
            tshape.len()
        )));
    }
    for d in 0..ishape.len().min(tshape.len()) {
        if d != dim && ishape[d] > tshape[d] {
            return Err(KernelError::shape(format!(
                "{op}: index {ishape:?} larger than input {tshape:?} outside dim {dim}"
            )));
        }
    }
    if tshape.is_empty() {
        // `index` has at most one dim, read with stride 1 in `src` too.
        for k in 0..ids.len() {
            wrap(ids.get(k), 1, op)?;
            f(k, 0, k)?;
        }
        return Ok(());
    }
    let tst = contiguous_strides(tshape);
    let mut st = tst;
    st.as_mut_slice()[dim] = 0;
    let sst = contiguous_strides(sshape.unwrap_or(ishape));
    let size = tshape[dim];
    let mut res = Ok(());
    for_each_strided(ishape, [&st, &sst], |k, [off, s]| {
        if res.is_ok() {
            res = wrap(ids.get(k), size, op).and_then(|i| f(k, off + i * tst[dim], s));
        }
    });
    res
}

fn gather_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, idx) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    require_contiguous("gather", &[&x, &idx, ctx.tensor(4)?])?;
    let dim = normalize_dim(ctx.int(1)?, x.rank())?;
    ctx.resize(4, idx.sizes())?;
    let ([xr, ir], [o]) = ctx.io([0, 2], [4])?;
    same_dtype("gather", xr.info, o.info)?;
    let ids = Indices::of(&ir)?;
    let e = x.dtype().elem_size();
    scatter_offsets(
        "gather",
        idx.sizes(),
        ids,
        (x.sizes(), dim),
        None,
        |k, s, _| {
            o.bytes[k * e..(k + 1) * e].copy_from_slice(&xr.bytes[s * e..(s + 1) * e]);
            Ok(())
        },
    )
}

enum ScatterSrc {
    Tensor,
    Value(Scalar),
}

fn scatter_common(ctx: &mut KernelContext, src: ScatterSrc, add: bool) -> Result<(), KernelError> {
    let (x, idx) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    require_contiguous("scatter", &[&x, &idx, ctx.tensor(4)?])?;
    let dim = normalize_dim(ctx.int(1)?, x.rank())?;
    let target = (x.sizes(), dim);
    let e = x.dtype().elem_size();
    match src {
        ScatterSrc::Value(v) => {
            copy_input_to_out(ctx, 0, 4)?;
            let ([ir], [o]) = ctx.io([2], [4])?;
            let dt = x.dtype();
            let mut val = [0u8; 8];
            dispatch_dtype!(dt, T => {
                let t: T = match v {
                    Scalar::Int(i) => T::from_i64(i),
                    Scalar::Double(d) => T::from_f64(d),
                    Scalar::Bool(b) => T::from_bool(b),
                };
                val[..e].copy_from_slice(bytemuck::bytes_of(&t));
            }, _ => return Err(KernelError::dtype(dt, "scatter")));
            scatter_offsets(
                "scatter",
                idx.sizes(),
                Indices::of(&ir)?,
                target,
                None,
                |_, d, _| {
                    o.bytes[d * e..(d + 1) * e].copy_from_slice(&val[..e]);
                    Ok(())
                },
            )
        }
        ScatterSrc::Tensor => {
            let s = *ctx.tensor(3)?;
            require_contiguous("scatter", &[&s])?;
            copy_input_to_out(ctx, 0, 4)?;
            let ([ir, sr], [mut o]) = ctx.io([2, 3], [4])?;
            same_dtype("scatter", sr.info, o.info)?;
            let ids = Indices::of(&ir)?;
            let sshape = Some(s.sizes());
            if add {
                let dt = x.dtype();
                fn run<T: Element>(
                    o: &mut [T],
                    s: &[T],
                    (ishape, ids, sshape): (&[usize], Indices, Option<&[usize]>),
                    target: (&[usize], usize),
                ) -> Result<(), KernelError> {
                    scatter_offsets("scatter_add", ishape, ids, target, sshape, |_, d, k| {
                        o[d] = add_elem(o[d], s[k]);
                        Ok(())
                    })
                }
                dispatch_dtype!(dt, T => run::<T>(o.as_mut_slice()?, sr.as_slice()?, (idx.sizes(), ids, sshape), target),
                    _ => Err(KernelError::dtype(dt, "scatter_add")))
            } else {
                scatter_offsets("scatter", idx.sizes(), ids, target, sshape, |_, d, k| {
                    o.bytes[d * e..(d + 1) * e].copy_from_slice(&sr.bytes[k * e..(k + 1) * e]);
                    Ok(())
                })
            }
        }
    }
}

/// `a + b` in the element type (integers wrap, bool is logical or), computed through f64 for
/// floats and i64 for integers.
#[inline]
fn add_elem<T: Element>(a: T, b: T) -> T {
    if T::DTYPE.is_floating() {
        T::from_f64(a.to_f64() + b.to_f64())
    } else if T::DTYPE == ScalarType::Bool {
        T::from_bool(a.to_bool() || b.to_bool())
    } else {
        T::from_i64(a.to_i64().wrapping_add(b.to_i64()))
    }
}

fn scatter_src_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    scatter_common(ctx, ScatterSrc::Tensor, false)
}
fn scatter_value_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let v = ctx.scalar(3)?;
    scatter_common(ctx, ScatterSrc::Value(v), false)
}
fn scatter_add_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    scatter_common(ctx, ScatterSrc::Tensor, true)
}

// ---- advanced indexing ----

/// How an entry of a `Tensor?[]` index list indexes the tensor.
#[derive(Clone, Copy)]
enum IndexKind {
    /// Integer indices into one dim.
    Ints,
    /// A bool (or uint8) mask over `rank` consecutive dims: the 1-d index of its nonzero
    /// positions, in row-major order.
    Mask { rank: usize },
}

/// One index tensor of an advanced index.
#[derive(Clone, Copy)]
struct IndexItem {
    /// Value index of the index tensor.
    vi: usize,
    /// The first dim it indexes.
    dim: usize,
    kind: IndexKind,
    /// Strides that read the item's index positions (its own shape, or `[nonzero count]` for
    /// a mask) along the broadcast shape.
    bstrides: Dims,
}

impl IndexItem {
    const UNUSED: IndexItem = IndexItem {
        vi: 0,
        dim: 0,
        kind: IndexKind::Ints,
        bstrides: Dims::new(),
    };
}

/// The result of resolving a `Tensor?[]` index list against a tensor. The index values stay
/// in their tensors: [`AdvIndex::for_each`] reads them through [`AdvIndex::borrow_list`].
struct AdvIndex {
    op: &'static str,
    /// The indexed tensor.
    x: TensorInfo,
    items: [IndexItem; MAX_RANK],
    n_items: usize,
    /// Nonzero count of each mask item (to recheck against the data when it is read).
    mask_counts: [usize; MAX_RANK],
    /// Broadcast shape of the index tensors.
    bshape: Dims,
    /// Sizes and (indexed tensor) strides of the dims not indexed, in order.
    rest: Dims,
    rest_strides: Dims,
    /// How many of the `rest` dims come before the broadcast dims in the result.
    before: usize,
}

/// An index tensor's data while an [`AdvIndex`] is walked.
#[derive(Clone, Copy)]
enum IndexData<'a> {
    Ints(Indices<'a>),
    Mask { bytes: &'a [u8], cursor: MaskCursor },
}

/// Finds the `j`-th nonzero byte of a mask by moving from the one found last, so that walking
/// the nonzero positions in order costs one pass over the mask.
#[derive(Clone, Copy, Default)]
struct MaskCursor {
    j: usize,
    p: usize,
    started: bool,
}

impl MaskCursor {
    /// Position of the `j`-th nonzero byte of `mask`; `None` if it has no more than `j`.
    fn seek(&mut self, mask: &[u8], j: usize) -> Option<usize> {
        if !self.started {
            self.p = mask.iter().position(|&b| b != 0)?;
            self.j = 0;
            self.started = true;
        }
        while self.j < j {
            self.p += 1 + mask.get(self.p + 1..)?.iter().position(|&b| b != 0)?;
            self.j += 1;
        }
        while self.j > j {
            self.p = mask.get(..self.p)?.iter().rposition(|&b| b != 0)?;
            self.j -= 1;
        }
        Some(self.p)
    }
}

/// Advances the row-major multi-index `idx` within `shape` (wrapping to zeros at the end).
fn next_index(idx: &mut [usize], shape: &[usize]) {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return;
        }
        idx[d] = 0;
    }
}

impl AdvIndex {
    /// The result shape: `rest[..before] + bshape + rest[before..]`.
    fn result_shape(&self) -> Result<Dims, KernelError> {
        let mut s = Dims::new();
        for &d in &self.rest[..self.before] {
            s.push(d)?;
        }
        for &d in self.bshape.iter() {
            s.push(d)?;
        }
        for &d in &self.rest[self.before..] {
            s.push(d)?;
        }
        Ok(s)
    }

    /// Value indices to borrow with `ctx.io_values`: the index tensors first (padded with
    /// `extra`), then `extra` itself at position `MAX_RANK`.
    fn borrow_list(&self, extra: usize) -> [usize; MAX_RANK + 1] {
        let mut vis = [extra; MAX_RANK + 1];
        for (v, item) in vis.iter_mut().zip(&self.items[..self.n_items]) {
            *v = item.vi;
        }
        vis
    }

    /// Calls `f(tensor_offset, result_offset)` for every element of the result, where
    /// `result_offset` is read with `res_strides` (strides over the result shape). `tensors`
    /// are the index tensors, borrowed in [`AdvIndex::borrow_list`] order.
    fn for_each(
        &self,
        tensors: &[TensorRef<'_>],
        res_strides: &[usize],
        mut f: impl FnMut(usize, usize),
    ) -> Result<(), KernelError> {
        let mut data = [IndexData::Ints(Indices::Long(&[])); MAX_RANK];
        for (k, item) in self.items[..self.n_items].iter().enumerate() {
            data[k] = match item.kind {
                IndexKind::Ints => IndexData::Ints(Indices::of(&tensors[k])?),
                IndexKind::Mask { .. } => {
                    let bytes = tensors[k].bytes;
                    if bytes.iter().filter(|&&b| b != 0).count() != self.mask_counts[k] {
                        return Err(KernelError::invalid(format!(
                            "{}: index mask changed while indexing",
                            self.op
                        )));
                    }
                    IndexData::Mask {
                        bytes,
                        cursor: MaskCursor::default(),
                    }
                }
            };
        }
        let nbr = self.bshape.len();
        // Result strides of the rest dims and of the broadcast dims.
        let mut rest_res = Dims::new();
        for k in 0..self.rest.len() {
            rest_res.push(if k < self.before {
                res_strides[k]
            } else {
                res_strides[k + nbr]
            })?;
        }
        let b_res = &res_strides[self.before..self.before + nbr];
        let nb = self
            .bshape
            .checked_numel()
            .ok_or(KernelError::SizeOverflow)?;
        let mut idx = [0usize; MAX_RANK];
        let idx = &mut idx[..nbr];
        for _ in 0..nb {
            let base = self.offset_at(idx, &mut data[..self.n_items])?;
            let rbase: usize = idx.iter().zip(b_res).map(|(i, s)| i * s).sum();
            for_each_strided(&self.rest, [&self.rest_strides, &rest_res], |_, [t, r]| {
                f(base + t, rbase + r)
            });
            next_index(idx, &self.bshape);
        }
        Ok(())
    }

    /// Element offset into the indexed tensor selected by broadcast position `idx`.
    fn offset_at(&self, idx: &[usize], data: &mut [IndexData<'_>]) -> Result<usize, KernelError> {
        let (xsizes, xst) = (self.x.sizes(), self.x.strides());
        let mut off = 0;
        for (item, d) in self.items.iter().zip(data.iter_mut()) {
            let k: usize = idx
                .iter()
                .zip(item.bstrides.iter())
                .map(|(i, s)| i * s)
                .sum();
            match d {
                IndexData::Ints(ids) => {
                    off += wrap(ids.get(k), xsizes[item.dim], self.op)? * xst[item.dim];
                }
                IndexData::Mask { bytes, cursor } => {
                    let IndexKind::Mask { rank } = item.kind else {
                        return Err(KernelError::invalid(format!(
                            "{}: mask data for a non-mask index",
                            self.op
                        )));
                    };
                    // Unravel the mask position over the dims it covers.
                    let mut p = cursor.seek(bytes, k).ok_or_else(|| {
                        KernelError::invalid(format!(
                            "{}: mask has fewer true entries than indexed",
                            self.op
                        ))
                    })?;
                    for dim in (item.dim..item.dim + rank).rev() {
                        off += (p % xsizes[dim]) * xst[dim];
                        p /= xsizes[dim];
                    }
                }
            }
        }
        Ok(off)
    }
}

/// Resolves the index list at argument `list` against the tensor at argument `x`.
fn resolve_indices(
    ctx: &mut KernelContext,
    x: usize,
    list: usize,
    op: &'static str,
) -> Result<AdvIndex, KernelError> {
    let xt = *ctx.tensor(x)?;
    let mut items = [IndexItem::UNUSED; MAX_RANK];
    let mut shapes = [Dims::new(); MAX_RANK];
    let mut mask_counts = [0usize; MAX_RANK];
    let mut n_items = 0;
    let mut indexed = [false; MAX_RANK];
    // The next input dim to index.
    let mut dim = 0;
    for k in 0..ctx.opt_tensor_list(list)?.len() {
        let vi = ctx.opt_tensor_list(list)?[k];
        if vi == NONE_INDEX {
            dim += 1;
            continue;
        }
        let t = *ctx.tensor_at(vi as usize)?;
        let (kind, covers, shape) = match t.dtype() {
            ScalarType::Bool | ScalarType::Byte => {
                // A mask over the next `rank` dims.
                if dim + t.rank() > xt.rank() {
                    return Err(KernelError::shape(format!(
                        "{op}: too many indices for a tensor of rank {}",
                        xt.rank()
                    )));
                }
                for k in 0..t.rank() {
                    if t.size(k) != xt.size(dim + k) {
                        return Err(KernelError::shape(format!(
                            "{op}: mask {:?} does not match the indexed dims",
                            t.sizes()
                        )));
                    }
                }
                if t.rank() == 0 {
                    return Err(KernelError::unsupported(format!("{op}: 0-d boolean index")));
                }
                let ([tr], []) = ctx.io_values([vi as usize], [])?;
                let count = tr.bytes.iter().filter(|&&b| b != 0).count();
                mask_counts[n_items] = count;
                (
                    IndexKind::Mask { rank: t.rank() },
                    t.rank(),
                    Dims::from_slice(&[count])?,
                )
            }
            ScalarType::Long | ScalarType::Int => (IndexKind::Ints, 1, t.dims()),
            dt => return Err(KernelError::dtype(dt, "index tensor")),
        };
        if dim + covers <= xt.rank() {
            items[n_items] = IndexItem {
                vi: vi as usize,
                dim,
                kind,
                bstrides: Dims::new(),
            };
            shapes[n_items] = shape;
            n_items += 1;
            indexed[dim..dim + covers].fill(true);
        }
        dim += covers;
    }
    if dim > xt.rank() {
        return Err(KernelError::shape(format!(
            "{op}: {dim} indices for a tensor of rank {}",
            xt.rank()
        )));
    }
    let indexed = &indexed[..xt.rank()];
    let Some(first) = indexed.iter().position(|&i| i) else {
        return Err(KernelError::unsupported(format!("{op}: no index tensors")));
    };
    let last = indexed.iter().rposition(|&i| i).unwrap_or(first);
    let adjacent = indexed[first..=last].iter().all(|&i| i);
    let mut bshape = Dims::new();
    for shape in &shapes[..n_items] {
        bshape = broadcast_shapes(&bshape, shape)?;
    }
    for (item, shape) in items.iter_mut().zip(&shapes[..n_items]) {
        item.bstrides = broadcast_strides(shape, &bshape)?;
    }
    let xst = xt.strides();
    let mut rest = Dims::new();
    let mut rest_strides = Dims::new();
    for d in 0..xt.rank() {
        if !indexed[d] {
            rest.push(xt.size(d))?;
            rest_strides.push(xst[d])?;
        }
    }
    Ok(AdvIndex {
        op,
        x: xt,
        items,
        n_items,
        mask_counts,
        bshape,
        rest,
        rest_strides,
        before: if adjacent { first } else { 0 },
    })
}

fn index_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    require_contiguous("index", &[&x, ctx.tensor(2)?])?;
    let adv = resolve_indices(ctx, 0, 1, "index")?;
    let rs = adv.result_shape()?;
    ctx.resize(2, &rs)?;
    let (xv, ov) = (ctx.value_index(0)?, ctx.value_index(2)?);
    let (ins, [o]) = ctx.io_values(adv.borrow_list(xv), [ov])?;
    let xr = &ins[MAX_RANK];
    same_dtype("index", xr.info, o.info)?;
    let e = x.dtype().elem_size();
    adv.for_each(&ins[..MAX_RANK], &contiguous_strides(&rs), |s, d| {
        o.bytes[d * e..(d + 1) * e].copy_from_slice(&xr.bytes[s * e..(s + 1) * e]);
    })
}

fn index_put_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, v) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    require_contiguous("index_put", &[&x, &v, ctx.tensor(4)?])?;
    let accumulate = ctx.bool(3)?;
    let adv = resolve_indices(ctx, 0, 1, "index_put")?;
    let rs = adv.result_shape()?;
    if broadcast_shapes(v.sizes(), &rs)?.as_slice() != rs.as_slice() {
        return Err(KernelError::shape(format!(
            "index_put: values {:?} do not broadcast to {:?}",
            v.sizes(),
            rs.as_slice()
        )));
    }
    // Read along the result shape, these strides give each result position's offset in `values`.
    let vst = broadcast_strides(v.sizes(), &rs)?;
    copy_input_to_out(ctx, 0, 4)?;
    let (vv, ov) = (ctx.value_index(2)?, ctx.value_index(4)?);
    let (ins, [mut o]) = ctx.io_values(adv.borrow_list(vv), [ov])?;
    let (vr, idx) = (&ins[MAX_RANK], &ins[..MAX_RANK]);
    same_dtype("index_put", vr.info, o.info)?;
    if accumulate {
        let dt = x.dtype();
        fn run<T: Element>(
            o: &mut [T],
            v: &[T],
            vst: &[usize],
            (adv, idx): (&AdvIndex, &[TensorRef]),
        ) -> Result<(), KernelError> {
            adv.for_each(idx, vst, |d, s| o[d] = add_elem(o[d], v[s]))
        }
        dispatch_dtype!(dt, T => run::<T>(o.as_mut_slice()?, vr.as_slice()?, &vst, (&adv, idx)),
            _ => Err(KernelError::dtype(dt, "index_put")))
    } else {
        let e = x.dtype().elem_size();
        adv.for_each(idx, &vst, |d, s| {
            o.bytes[d * e..(d + 1) * e].copy_from_slice(&vr.bytes[s * e..(s + 1) * e]);
        })
    }
}

// ---- scatters of a slice ----

/// Copies `self` to `out`, then writes `src` over view `v` of `out`.
fn scatter_view(
    ctx: &mut KernelContext,
    src: usize,
    out: usize,
    v: &View,
) -> Result<(), KernelError> {
    let s = *ctx.tensor(src)?;
    if s.sizes() != v.sizes.as_slice() {
        return Err(KernelError::shape(format!(
            "scatter: src {:?} does not match the slice {:?}",
            s.sizes(),
            v.sizes.as_slice()
        )));
    }
    copy_input_to_out(ctx, 0, out)?;
    let ([sr], [mut o]) = ctx.io([src], [out])?;
    same_dtype("scatter", sr.info, o.info)?;
    let sv = View::of(&s);
    copy_view(
        sr.bytes,
        0,
        sv.strides(),
        &mut o.bytes,
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

fn select_scatter_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

fn slice_scatter_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

/// Number of nonzero elements.
fn count_nonzero<T: Element>(s: &[T]) -> usize {
    s.iter().filter(|v| v.to_bool()).count()
}

/// Writes the coordinates of the nonzero elements of `s` (tensor `xi`, read in logical order
/// through its strides) to `out`, one row of `rank` coordinates each, through the output's
/// strides `os` (any dim orders).
fn write_nonzero_coords<T: Element>(s: &[T], xi: &TensorInfo, out: &mut [i64], os: [usize; 2]) {
    let r = xi.rank();
    let sizes = xi.sizes();
    let mut idx = [0usize; MAX_RANK];
    let mut row = 0;
    crate::util::for_each_strided(sizes, [xi.strides()], |_, [off]| {
        if s[off].to_bool() {
            for (j, &i) in idx[..r].iter().enumerate() {
                out[row * os[0] + j * os[1]] = i as i64;
            }
            row += 1;
        }
        next_index(&mut idx[..r], sizes);
    });
}

fn nonzero_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dt = x.dtype();
    // Two passes: count (to size the output), then write the coordinates.
    let n = {
        let ([xr], []) = ctx.io([0], [])?;
        dispatch_dtype!(dt, T => count_nonzero::<T>(xr.as_slice()?),
            _ => return Err(KernelError::dtype(dt, "nonzero")))
    };
    let r = x.rank();
    ctx.resize(1, &[n, r])?;
    let oi = *ctx.tensor(1)?;
    let os = [oi.strides()[0], oi.strides()[1]];
    let ([xr], [mut o]) = ctx.io([0], [1])?;
    let out = o.as_mut_slice::<i64>()?;
    dispatch_dtype!(dt, T => write_nonzero_coords::<T>(xr.as_slice()?, &x, out, os),
        _ => return Err(KernelError::dtype(dt, "nonzero")));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, ScalarType as St};

    fn arange(n: usize) -> Vec<f32> {
        (0..n).map(|v| v as f32).collect()
    }

    #[test]
    fn index_select_and_gather() {
        let mut c = TestCall::new();
        c.tensor(&[3, 4], &arange(12));
        c.int(-1);
        c.tensor(&[3], &[3i64, 0, -1]);
        let o = c.out(St::Float, &[1, 1]);
        c.ret(o);
        c.check(check_index_select).unwrap();
        c.run(index_select_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[3, 3]);
        assert_eq!(
            c.output::<f32>(o),
            vec![3., 0., 3., 7., 4., 7., 11., 8., 11.]
        );

        // torch.gather(torch.arange(12.).view(3,4), 1, torch.tensor([[0,3],[1,1]]))
        let mut c = TestCall::new();
        c.tensor(&[3, 4], &arange(12));
        c.int(1);
        c.tensor(&[2, 2], &[0i32, 3, 1, 1]);
        c.bool(false);
        let o = c.out(St::Float, &[1, 1]);
        c.ret(o);
        c.run(gather_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0., 3., 5., 5.]);

        let mut c = TestCall::new();
        c.tensor(&[3, 4], &arange(12));
        c.int(0);
        c.tensor(&[1, 1], &[3i64]);
        c.bool(false);
        let o = c.out(St::Float, &[1, 1]);
        c.ret(o);
        assert!(matches!(c.run(gather_out), Err(KernelError::Invalid(_))));
    }

    #[test]
    fn scatters() {
        // torch.zeros(2,3).scatter(1, [[2,0]], [[1.,2.]]) ; scatter_add with duplicates
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0.0f32; 6]);
        c.int(1);
        c.tensor(&[1, 2], &[2i64, 0]);
        c.tensor(&[1, 3], &[1.0f32, 2., 9.]);
        let o = c.out(St::Float, &[2, 3]);
        c.ret(o);
        c.check(check_scatter_src).unwrap();
        c.run(scatter_src_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![2., 0., 1., 0., 0., 0.]);

        let mut c = TestCall::new();
        c.tensor(&[4], &[1i64, 1, 1, 1]);
        c.int(0);
        c.tensor(&[3], &[1i64, 1, 3]);
        c.tensor(&[3], &[10i64, 20, 30]);
        let o = c.out(St::Long, &[4]);
        c.ret(o);
        c.run(scatter_add_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![1, 31, 1, 31]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[0.0f32; 4]);
        c.int(0);
        c.tensor(&[1, 2], &[1i64, 0]);
        c.double(-2.5);
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        c.run(scatter_value_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0., -2.5, -2.5, 0.]);
    }

    /// Runs index.Tensor on arange(24).view(2,3,4) with the given index list builder.
    fn index_case(
        build: impl FnOnce(&mut TestCall) -> Vec<Option<u32>>,
        want_sizes: &[usize],
        want: &[f32],
    ) {
        let mut c = TestCall::new();
        c.tensor(&[2, 3, 4], &arange(24));
        let items = build(&mut c);
        c.opt_tensor_list(&items);
        let o = c.out(St::Float, &vec![1; want_sizes.len()]);
        c.ret(o);
        c.check(check_index).unwrap();
        c.run(index_tensor_out).unwrap();
        assert_eq!(c.info(o).sizes(), want_sizes);
        assert_eq!(c.output::<f32>(o), want);
    }

    #[test]
    fn advanced_indexing() {
        // x[[1, 0]]
        index_case(
            |c| vec![Some(c.tensor_value(&[2], &[1i64, 0]))],
            &[2, 3, 4],
            &{
                let mut v = arange(24)[12..].to_vec();
                v.extend(arange(12));
                v
            },
        );
        // x[:, [2, -1]]  (adjacent, after a None)
        index_case(
            |c| vec![None, Some(c.tensor_value(&[2], &[2i64, -1]))],
            &[2, 2, 4],
            &[
                8., 9., 10., 11., 8., 9., 10., 11., 20., 21., 22., 23., 20., 21., 22., 23.,
            ],
        );
        // x[[0, 1], :, [1, 3]]  (non-adjacent: broadcast dims first) -> [[1,5,9],[15,19,23]]
        index_case(
            |c| {
                vec![
                    Some(c.tensor_value(&[2], &[0i64, 1])),
                    None,
                    Some(c.tensor_value(&[2], &[1i64, 3])),
                ]
            },
            &[2, 3],
            &[1., 5., 9., 15., 19., 23.],
        );
        // x[[[1],[0]], [0, 2]]  (broadcast to [2, 2]) -> shape [2, 2, 4]
        index_case(
            |c| {
                vec![
                    Some(c.tensor_value(&[2, 1], &[1i64, 0])),
                    Some(c.tensor_value(&[2], &[0i32, 2])),
                ]
            },
            &[2, 2, 4],
            &[
                12., 13., 14., 15., 20., 21., 22., 23., 0., 1., 2., 3., 8., 9., 10., 11.,
            ],
        );
        // x[mask] with mask over the first two dims
        index_case(
            |c| {
                let m: Vec<Bool> = [1u8, 0, 0, 0, 0, 1].iter().map(|&b| Bool(b)).collect();
                vec![Some(c.tensor_value(&[2, 3], &m))]
            },
            &[2, 4],
            &[0., 1., 2., 3., 20., 21., 22., 23.],
        );
        // x[:, :, bool_mask] over the last dim
        index_case(
            |c| {
                let m: Vec<Bool> = [0u8, 1, 0, 1].iter().map(|&b| Bool(b)).collect();
                vec![None, None, Some(c.tensor_value(&[4], &m))]
            },
            &[2, 3, 2],
            &[1., 3., 5., 7., 9., 11., 13., 15., 17., 19., 21., 23.],
        );
    }

    #[test]
    fn advanced_index_out_of_range() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &arange(6));
        let i = c.tensor_value(&[1], &[2i64]);
        c.opt_tensor_list(&[Some(i)]);
        let o = c.out(St::Float, &[1, 3]);
        c.ret(o);
        assert!(matches!(
            c.run(index_tensor_out),
            Err(KernelError::Invalid(_))
        ));
    }

    #[test]
    fn index_put_assign_and_accumulate() {
        for (acc, want) in [(false, vec![0., 7., 0., 7.]), (true, vec![0., 14., 0., 7.])] {
            let mut c = TestCall::new();
            c.tensor(&[4], &[0.0f32; 4]);
            let i = c.tensor_value(&[3], &[1i64, 3, 1]);
            c.opt_tensor_list(&[Some(i)]);
            c.tensor(&[], &[7.0f32]);
            c.bool(acc);
            let o = c.out(St::Float, &[4]);
            c.ret(o);
            c.check(check_index_put).unwrap();
            c.run(index_put_out).unwrap();
            assert_eq!(c.output::<f32>(o), want, "accumulate={acc}");
        }
    }

    #[test]
    fn select_and_slice_scatter() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0.0f32; 6]);
        c.tensor(&[2], &[1.0f32, 2.]);
        c.int(1);
        c.int(-1);
        let o = c.out(St::Float, &[2, 3]);
        c.ret(o);
        c.run(select_scatter_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0., 0., 1., 0., 0., 2.]);

        // torch.zeros(5).slice_scatter(torch.tensor([1.,2.]), 0, 1, None, 2)
        let mut c = TestCall::new();
        c.tensor(&[5], &[0.0f32; 5]);
        c.tensor(&[2], &[1.0f32, 2.]);
        c.int(0);
        c.int(1);
        c.none();
        c.int(2);
        let o = c.out(St::Float, &[5]);
        c.ret(o);
        c.run(slice_scatter_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0., 1., 0., 2., 0.]);
    }

    #[test]
    fn nonzero_2d() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0i32, 5, 0, -1, 0, 2]);
        let o = c.out(St::Long, &[6, 2]);
        c.ret(o);
        c.check(check_nonzero).unwrap();
        c.run(nonzero_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[3, 2]);
        assert_eq!(c.output::<i64>(o), vec![0, 1, 1, 0, 1, 2]);
    }
}
