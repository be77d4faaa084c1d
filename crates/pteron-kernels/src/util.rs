//! Helpers shared by the kernels: broadcasting, contiguity checks, index arithmetic.
//! (Append new shared helpers at the end of this file.)

use pteron_core::{Dims, KernelError, ScalarType, TensorInfo};

/// PyTorch broadcasting of two shapes (aligned from the right; 1 stretches).
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Result<Dims, KernelError> {
    let rank = a.len().max(b.len());
    let mut out = [0usize; pteron_core::MAX_RANK];
    if rank > pteron_core::MAX_RANK {
        return Err(KernelError::RankTooLarge { rank });
    }
    for i in 0..rank {
        let da = if i < rank - a.len() { 1 } else { a[i - (rank - a.len())] };
        let db = if i < rank - b.len() { 1 } else { b[i - (rank - b.len())] };
        out[i] = if da == db {
            da
        } else if da == 1 {
            db
        } else if db == 1 {
            da
        } else {
            return Err(KernelError::shape(format!("cannot broadcast {a:?} with {b:?}")));
        };
    }
    Dims::from_slice(&out[..rank])
}

/// Strides (in elements) to read a contiguous tensor of shape `src` as if it had the broadcast
/// shape `out`: 0 where the dim is stretched or missing.
pub fn broadcast_strides(src: &[usize], out: &[usize]) -> Dims {
    let mut strides = Dims::from_slice(out).expect("out rank already checked");
    let off = out.len() - src.len();
    let mut stride = 1usize;
    for i in (0..out.len()).rev() {
        if i < off {
            strides.as_mut_slice()[i] = 0;
        } else {
            let s = src[i - off];
            strides.as_mut_slice()[i] = if s == 1 && out[i] != 1 { 0 } else { stride };
            stride *= s.max(1);
        }
    }
    strides
}

/// Errors unless every tensor has the default (contiguous) dim order.
pub fn require_contiguous(op: &'static str, tensors: &[&TensorInfo]) -> Result<(), KernelError> {
    for t in tensors {
        if !t.is_contiguous() {
            return Err(KernelError::unsupported(format!(
                "{op}: non-default dim order {:?} is not supported yet",
                t.dim_order()
            )));
        }
    }
    Ok(())
}

/// Errors unless `dtype` is one of `allowed`.
pub fn require_dtype(op: &'static str, dtype: ScalarType, allowed: &[ScalarType]) -> Result<(), KernelError> {
    if allowed.contains(&dtype) {
        Ok(())
    } else {
        Err(KernelError::dtype(dtype, op))
    }
}

/// Errors unless `a` and `b` have the same dtype.
pub fn require_same_dtype(op: &'static str, a: ScalarType, b: ScalarType) -> Result<(), KernelError> {
    if a == b {
        Ok(())
    } else {
        Err(KernelError::invalid(format!("{op}: dtypes differ ({a} vs {b})")))
    }
}

pub const FLOATS: [ScalarType; 4] = [ScalarType::Float, ScalarType::Double, ScalarType::Half, ScalarType::BFloat16];
pub const REALS: [ScalarType; 9] = [
    ScalarType::Byte,
    ScalarType::Char,
    ScalarType::Short,
    ScalarType::Int,
    ScalarType::Long,
    ScalarType::Float,
    ScalarType::Double,
    ScalarType::Half,
    ScalarType::BFloat16,
];
pub const REALS_AND_BOOL: [ScalarType; 10] = ScalarType::REAL_AND_BOOL;

/// Splits a contiguous shape around `dim` into (outer, size, inner) element counts.
pub fn outer_dim_inner(sizes: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = sizes[..dim].iter().product();
    let inner = sizes[dim + 1..].iter().product();
    (outer, sizes[dim], inner)
}

/// Calls `f(out_linear_index, offsets)` for every element of a contiguous output of shape `out`,
/// where `offsets[k]` is the element offset into input `k` read with `strides[k]`.
pub fn for_each_strided<const K: usize>(out: &[usize], strides: [&[usize]; K], mut f: impl FnMut(usize, [usize; K])) {
    let rank = out.len();
    let numel: usize = out.iter().product();
    if numel == 0 {
        return;
    }
    let mut idx = [0usize; pteron_core::MAX_RANK];
    let mut off = [0usize; K];
    for lin in 0..numel {
        f(lin, off);
        // Increment the multi-index, updating offsets incrementally.
        let mut d = rank;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                off[k] += strides[k][d];
            }
            if idx[d] < out[d] {
                break;
            }
            for k in 0..K {
                off[k] -= strides[k][d] * out[d];
            }
            idx[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]).unwrap().as_slice(), &[2, 4, 3]);
        assert_eq!(broadcast_shapes(&[], &[3]).unwrap().as_slice(), &[3]);
        assert!(broadcast_shapes(&[2], &[3]).is_err());
        assert_eq!(broadcast_strides(&[4, 1], &[2, 4, 3]).as_slice(), &[0, 1, 0]);
    }

    #[test]
    fn strided_walk() {
        let out = [2, 3];
        let sa = broadcast_strides(&[3], &out);
        let sb = broadcast_strides(&[2, 1], &out);
        let mut seen = vec![];
        for_each_strided(&out, [&sa, &sb], |lin, [a, b]| seen.push((lin, a, b)));
        assert_eq!(seen, vec![(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 0, 1), (4, 1, 1), (5, 2, 1)]);
    }
}
