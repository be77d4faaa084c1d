//! The operators' scalar arguments, read and range-checked once for every kernel.

use alloc::format;

use pteron_core::{ArgAccess, KernelError};

/// Largest stride, padding, dilation, kernel or spatial size accepted (keeps the geometry's
/// arithmetic far from overflow).
pub(crate) const MAX_GEOMETRY: i64 = 1 << 20;

/// An `int[]` of one entry (used for both dims) or two, each in `min..=MAX_GEOMETRY`.
pub(crate) fn pair<'p>(
    a: &impl ArgAccess<'p>,
    i: usize,
    op: &str,
    what: &str,
    min: i64,
) -> Result<[usize; 2], KernelError> {
    let l = a.int_list(i)?;
    if l.len() != 1 && l.len() != 2 {
        return Err(KernelError::invalid(format!(
            "{op}: {what} needs 1 or 2 entries"
        )));
    }
    let mut out = [0usize; 2];
    for k in 0..2 {
        let v = l.get(if l.len() == 1 { 0 } else { k })?;
        if !(min..=MAX_GEOMETRY).contains(&v) {
            return Err(KernelError::invalid(format!(
                "{op}: {what} {v} out of range"
            )));
        }
        out[k] = v as usize;
    }
    Ok(out)
}

/// An `int` argument that must fit `i32` (offsets, bounds, multipliers, shifts).
pub(crate) fn int32<'p>(a: &impl ArgAccess<'p>, i: usize, op: &str) -> Result<i32, KernelError> {
    let v = a.int(i)?;
    i32::try_from(v)
        .map_err(|_| KernelError::invalid(format!("{op}: argument {i} ({v}) exceeds i32")))
}
