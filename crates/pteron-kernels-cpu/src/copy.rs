//! Copies that avoid per-element work when the layout allows: `permute_copy` (contiguous runs
//! copied with `copy_from_slice`, otherwise a strided gather per output row), and identity
//! `expand_copy`, `clone`, `_clone_dim_order`, `_to_dim_order_copy` (one `copy_from_slice`).
//! Any dtype; contiguous tensors only. Other cases run the portable kernels.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, TensorInfo, MAX_RANK,
};

use crate::par::for_chunks_mut;
use crate::{fallback, register_over};

pub fn register(r: &mut KernelRegistry) {
    register_over(r, PERMUTE, Kernel::new(permute_copy_out));
    register_over(r, EXPAND, Kernel::new(expand_copy_out));
    register_over(r, CLONE, Kernel::new(clone_out));
    register_over(r, CLONE_DO, Kernel::new(clone_dim_order_out));
    register_over(r, TO_DO, Kernel::new(to_dim_order_copy_out));
}

const PERMUTE: &str = "aten::permute_copy.out";
const EXPAND: &str = "aten::expand_copy.out";
const CLONE: &str = "aten::clone.out";
const CLONE_DO: &str = "dim_order_ops::_clone_dim_order.out";
const TO_DO: &str = "dim_order_ops::_to_dim_order_copy.out";

/// Bytes per task before a copy is split across threads.
const PAR_BYTES: usize = 1 << 18;

/// `dst = src`, split across threads when large.
pub fn copy_bytes(par: &dyn pteron_core::Parallel, src: &[u8], dst: &mut [u8]) {
    let n = src.len().min(dst.len());
    if n < 2 * PAR_BYTES || par.num_threads() <= 1 {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    for_chunks_mut(par, &mut dst[..n], PAR_BYTES, 1, &|k, d| {
        d.copy_from_slice(&src[k * PAR_BYTES..k * PAR_BYTES + d.len()])
    });
}

/// Copies argument 0 into argument `out` unchanged when both are contiguous, of one dtype,
/// and `out` can take `x`'s sizes. `Ok(false)` when not handled.
fn identity_copy(ctx: &mut KernelContext<'_, '_>, out: usize) -> Result<bool, KernelError> {
    let (x, o) = (*ctx.tensor(0)?, *ctx.tensor(out)?);
    if x.dtype() != o.dtype() || !x.is_contiguous() || !o.is_contiguous() || x.rank() != o.rank() {
        return Ok(false);
    }
    ctx.resize(out, x.sizes())?;
    let par = ctx.parallel();
    let ([xr], [or]) = ctx.io([0], [out])?;
    copy_bytes(par, xr.bytes, or.bytes);
    Ok(true)
}

fn clone_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    // memory_format (arg 1) must be None or preserve/contiguous for a plain copy.
    let plain = ctx.is_none(1)? || matches!(ctx.int(1), Ok(0) | Ok(1));
    if plain && identity_copy(ctx, 2)? {
        return Ok(());
    }
    fallback(CLONE, ctx)
}

/// `dim_order` (arg 2) absent or the default order of `x`'s rank.
fn default_order(ctx: &KernelContext<'_, '_>, rank: usize) -> Result<bool, KernelError> {
    if ctx.is_none(2)? {
        return Ok(true);
    }
    let l = ctx.int_list(2)?;
    if l.len() != rank {
        return Ok(false);
    }
    for k in 0..rank {
        if l.get(k)? != k as i64 {
            return Ok(false);
        }
    }
    Ok(true)
}

fn clone_dim_order_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let r = ctx.tensor(0)?.rank();
    if default_order(ctx, r)? && identity_copy(ctx, 3)? {
        return Ok(());
    }
    fallback(CLONE_DO, ctx)
}

fn to_dim_order_copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let r = ctx.tensor(0)?.rank();
    if default_order(ctx, r)? && identity_copy(ctx, 3)? {
        return Ok(());
    }
    fallback(TO_DO, ctx)
}

fn expand_copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let req = ctx.int_list(1)?;
    let mut same = req.len() == x.rank();
    if same {
        for k in 0..req.len() {
            let r = req.get(k)?;
            same &= r == -1 || r == x.size(k) as i64;
        }
    }
    if same && identity_copy(ctx, 3)? {
        return Ok(());
    }
    fallback(EXPAND, ctx)
}

/// Collapsed permutation: output dims (size, input stride in elements), size-1 dims dropped
/// and neighbours that stay adjacent in the input merged.
fn permute_plan(x: &TensorInfo, perm: &[usize]) -> ([(usize, usize); MAX_RANK], usize) {
    let mut dims = [(0usize, 0usize); MAX_RANK];
    let mut n = 0;
    for &p in perm {
        let (size, st) = (x.size(p), x.strides()[p]);
        if size == 1 {
            continue;
        }
        if n > 0 && dims[n - 1].1 == st * size {
            dims[n - 1] = (dims[n - 1].0 * size, st);
            continue;
        }
        dims[n] = (size, st);
        n += 1;
    }
    if n == 0 {
        dims[0] = (1, 1);
        n = 1;
    }
    (dims, n)
}

fn permute_copy_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (x, o) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    let dims = ctx.int_list(1)?;
    let rank = x.rank();
    if x.dtype() != o.dtype() || !x.is_contiguous() || !o.is_contiguous() || dims.len() != rank {
        return fallback(PERMUTE, ctx);
    }
    let mut perm = [0usize; MAX_RANK];
    let mut seen = 0u32;
    for (k, p) in perm.iter_mut().enumerate().take(rank) {
        let Ok(d) = x.dim_index(dims.get(k)?) else {
            return fallback(PERMUTE, ctx);
        };
        if seen & (1 << d) != 0 {
            return fallback(PERMUTE, ctx);
        }
        seen |= 1 << d;
        *p = d;
    }
    let perm = &perm[..rank];
    let mut osz = [0usize; MAX_RANK];
    for (d, &p) in perm.iter().enumerate() {
        osz[d] = x.size(p);
    }
    if o.rank() != rank {
        return fallback(PERMUTE, ctx);
    }
    ctx.resize(2, &osz[..rank])?;
    let (plan, n) = permute_plan(&x, perm);
    let es = x.dtype().elem_size();
    let par = ctx.parallel();
    let ([xr], [or]) = ctx.io([0], [2])?;
    let (src, dst) = (xr.bytes, or.bytes);
    if x.numel() == 0 {
        return Ok(());
    }
    let (inner, inner_st) = plan[n - 1];
    let outer = &plan[..n - 1];
    let base_of = |mut k: usize| {
        let mut off = 0usize;
        for &(size, st) in outer.iter().rev() {
            off += (k % size) * st;
            k /= size;
        }
        off
    };
    let row_bytes = inner * es;
    let one_row = |k: usize, d: &mut [u8]| {
        let b = base_of(k);
        if inner_st == 1 {
            d.copy_from_slice(&src[b * es..(b + inner) * es]);
            return;
        }
        match es {
            4 => gather::<4>(src, b, inner_st, d),
            8 => gather::<8>(src, b, inner_st, d),
            2 => gather::<2>(src, b, inner_st, d),
            _ => gather::<1>(src, b, inner_st, d),
        }
    };
    if dst.len() < 2 * PAR_BYTES || par.num_threads() <= 1 {
        for (k, d) in dst.chunks_mut(row_bytes).enumerate() {
            one_row(k, d);
        }
    } else {
        let rows_per = (PAR_BYTES / row_bytes.max(1)).max(1);
        for_chunks_mut(par, dst, rows_per * row_bytes, 1, &|c, d| {
            for (j, row) in d.chunks_mut(row_bytes).enumerate() {
                one_row(c * rows_per + j, row);
            }
        });
    }
    Ok(())
}

/// `d[j] = src[(base + j * stride)]` for `E`-byte elements.
#[inline]
fn gather<const E: usize>(src: &[u8], base: usize, stride: usize, d: &mut [u8]) {
    for (j, o) in d.chunks_exact_mut(E).enumerate() {
        let at = (base + j * stride) * E;
        o.copy_from_slice(&src[at..at + E]);
    }
}
