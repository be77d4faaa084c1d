//! Ops that reorder or repeat elements: `repeat`, `flip`, `roll`, `pixel_shuffle` and
//! `pixel_unshuffle`.

use pteron_core::{normalize_dim, ArgAccess, Dims, KernelContext, KernelError, MAX_RANK};

use super::same_dtype_out;
use super::strided::{copy_out, copy_view_out, usize_of, View};
use crate::util::{contiguous_strides, copy_view, read_int_list, require_contiguous};

pub(super) fn repeat_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

pub(super) fn flip_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (dims, n) = read_int_list(ctx, 1)?;
    let mut v = View::of(&x);
    let mut seen = [false; MAX_RANK];
    for &d in &dims[..n] {
        let d = normalize_dim(d, x.rank())?;
        if core::mem::replace(&mut seen[d], true) {
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

pub(super) fn roll_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

pub(super) fn pixel_shuffle_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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

pub(super) fn pixel_unshuffle_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
