//! `constant_pad_nd`: padding (or cropping, for negative pads) with a constant.

use pteron_core::{
    dispatch_dtype, ArgAccess, Dims, Element, KernelContext, KernelError, Scalar, MAX_RANK,
};

use super::same_dtype_out;
use super::strided::View;
use crate::util::{copy_view, read_int_list};

fn fill_scalar<T: Element>(out: &mut [T], v: Scalar) {
    let v = match v {
        Scalar::Int(i) => T::from_i64(i),
        Scalar::Double(d) => T::from_f64(d),
        Scalar::Bool(b) => T::from_bool(b),
    };
    out.fill(v);
}

pub(super) fn constant_pad_nd_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
