//! Advanced indexing: `index.Tensor` and `index_put` with a `Tensor?[]` list of integer and
//! boolean-mask indices.

use pteron_core::{
    dispatch_dtype, ArgAccess, Dims, Element, KernelContext, KernelError, ScalarType, TensorInfo,
    TensorRef, MAX_RANK, NONE_INDEX,
};

use super::gather_scatter::add_elem;
use super::{copy_input_to_out, same_dtype, wrap};
use crate::embedding::Indices;
use crate::util::{
    broadcast_shapes, broadcast_strides, contiguous_strides, for_each_strided, require_contiguous,
};

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
pub(super) fn next_index(idx: &mut [usize], shape: &[usize]) {
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

pub(super) fn index_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

pub(super) fn index_put_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
