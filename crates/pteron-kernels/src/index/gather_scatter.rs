//! `index_select`, `gather` and `scatter` (src, value, add) along one dim.

use pteron_core::{
    dispatch_dtype, normalize_dim, ArgAccess, Element, KernelContext, KernelError, Scalar,
    ScalarType,
};

use super::{copy_input_to_out, same_dtype, wrap};
use crate::embedding::Indices;
use crate::util::{contiguous_strides, for_each_strided, require_contiguous};

pub(super) fn index_select_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
        return Err(KernelError::rank_mismatch(
            op,
            "index",
            tshape.len().max(1),
            ishape.len(),
        ));
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

pub(super) fn gather_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
pub(super) fn add_elem<T: Element>(a: T, b: T) -> T {
    if T::DTYPE.is_floating() {
        T::from_f64(a.to_f64() + b.to_f64())
    } else if T::DTYPE == ScalarType::Bool {
        T::from_bool(a.to_bool() || b.to_bool())
    } else {
        T::from_i64(a.to_i64().wrapping_add(b.to_i64()))
    }
}

pub(super) fn scatter_src_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    scatter_common(ctx, ScatterSrc::Tensor, false)
}
pub(super) fn scatter_value_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let v = ctx.scalar(3)?;
    scatter_common(ctx, ScatterSrc::Value(v), false)
}
pub(super) fn scatter_add_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    scatter_common(ctx, ScatterSrc::Tensor, true)
}
