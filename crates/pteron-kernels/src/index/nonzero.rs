//! `nonzero`: the coordinates of the nonzero elements, as an `[n, rank]` int64 tensor.

use pteron_core::{
    dispatch_dtype, ArgAccess, Element, KernelContext, KernelError, TensorInfo, MAX_RANK,
};

use super::advanced::next_index;

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

pub(super) fn nonzero_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
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
