//! Tensor metadata: dtype, sizes, dim order and strides, kept in fixed arrays so that resizing
//! during execution never allocates.

use crate::dtype::ScalarType;
use crate::error::KernelError;
use alloc::format;

/// The largest rank a tensor may have (ExecuTorch's `kTensorDimensionLimit`).
pub const MAX_RANK: usize = 16;

/// Sizes of at most [`MAX_RANK`] dims, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Dims {
    len: u8,
    d: [usize; MAX_RANK],
}

impl Dims {
    pub const fn new() -> Self {
        Dims {
            len: 0,
            d: [0; MAX_RANK],
        }
    }

    /// Dims from a slice; errors when it has more than [`MAX_RANK`] entries.
    pub fn from_slice(s: &[usize]) -> Result<Self, KernelError> {
        if s.len() > MAX_RANK {
            return Err(KernelError::RankTooLarge { rank: s.len() });
        }
        let mut d = Dims::new();
        d.d[..s.len()].copy_from_slice(s);
        d.len = s.len() as u8;
        Ok(d)
    }

    pub fn push(&mut self, v: usize) -> Result<(), KernelError> {
        if self.len as usize >= MAX_RANK {
            return Err(KernelError::RankTooLarge { rank: MAX_RANK + 1 });
        }
        self.d[self.len as usize] = v;
        self.len += 1;
        Ok(())
    }

    pub fn as_slice(&self) -> &[usize] {
        &self.d[..self.len as usize]
    }

    pub fn as_mut_slice(&mut self) -> &mut [usize] {
        &mut self.d[..self.len as usize]
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Product of the dims, `None` on overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        self.as_slice()
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
}

impl core::ops::Deref for Dims {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        self.as_slice()
    }
}

impl core::fmt::Debug for Dims {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// The most positions the non-zero dims of an empty tensor may span (2^28).
///
/// A non-empty tensor's dims are bounded by its bytes, which live in a planned arena; an empty
/// one's are not (`[2^30, 2^30, 0]` holds nothing). Kernels loop over the outer dims of their
/// operands, so a hostile program could otherwise make a kernel spin through 2^60 empty rows.
/// Real programs' empty tensors (a zero-length sequence, an empty KV slice) span far less.
pub const MAX_EMPTY_EXTENT: usize = 1 << 28;

/// Everything about a tensor but its bytes.
///
/// `sizes` are the current sizes (for dynamic tensors: at most the capacity given at load);
/// `dim_order` lists dims from outermost to innermost in memory; `strides` follow from both.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo {
    dtype: ScalarType,
    sizes: Dims,
    dim_order: [u8; MAX_RANK],
    strides: Dims,
    numel: usize,
}

impl TensorInfo {
    /// A contiguous tensor (dim order 0, 1, …, rank−1).
    pub fn contiguous(dtype: ScalarType, sizes: &[usize]) -> Result<Self, KernelError> {
        let mut order = [0u8; MAX_RANK];
        for (i, o) in order.iter_mut().enumerate() {
            *o = i as u8;
        }
        Self::with_dim_order(dtype, sizes, &order[..sizes.len().min(MAX_RANK)])
    }

    /// A tensor with an explicit dim order, which must be a permutation of `0..rank`.
    pub fn with_dim_order(
        dtype: ScalarType,
        sizes: &[usize],
        dim_order: &[u8],
    ) -> Result<Self, KernelError> {
        let sizes = Dims::from_slice(sizes)?;
        let bad = KernelError::DimOrder {
            entries: dim_order.len(),
            rank: sizes.len(),
        };
        if dim_order.len() != sizes.len() {
            return Err(bad);
        }
        let mut seen = [false; MAX_RANK];
        for &d in dim_order {
            let d = d as usize;
            if d >= sizes.len() || seen[d] {
                return Err(bad);
            }
            seen[d] = true;
        }
        let mut order = [0u8; MAX_RANK];
        order[..dim_order.len()].copy_from_slice(dim_order);
        let mut t = TensorInfo {
            dtype,
            sizes,
            dim_order: order,
            strides: sizes,
            numel: 0,
        };
        t.update_strides()?;
        Ok(t)
    }

    fn update_strides(&mut self) -> Result<(), KernelError> {
        let rank = self.sizes.len();
        let mut stride = 1usize;
        // Innermost dim in memory is the last entry of the dim order. A size-0 dim does not zero
        // the strides of the dims outside it (as ExecuTorch's `dim_order_to_stride`).
        for i in (0..rank).rev() {
            let dim = self.dim_order[i] as usize;
            self.strides.d[dim] = stride;
            let s = self.sizes.d[dim].max(1);
            stride = stride.checked_mul(s).ok_or(KernelError::SizeOverflow)?;
        }
        self.numel = self
            .sizes
            .checked_numel()
            .ok_or(KernelError::SizeOverflow)?;
        if self.numel == 0 && stride > MAX_EMPTY_EXTENT {
            return Err(KernelError::EmptyExtent {
                extent: stride,
                limit: MAX_EMPTY_EXTENT,
            });
        }
        self.numel
            .checked_mul(self.dtype.elem_size())
            .ok_or(KernelError::SizeOverflow)?;
        Ok(())
    }

    /// Changes the sizes (same rank) and recomputes strides. Callers check capacity.
    pub(crate) fn set_sizes(&mut self, sizes: &[usize]) -> Result<(), KernelError> {
        if sizes.len() != self.sizes.len() {
            return Err(KernelError::invalid(format!(
                "cannot resize a rank-{} tensor to {:?}",
                self.sizes.len(),
                sizes
            )));
        }
        let old = self.sizes;
        self.sizes = Dims::from_slice(sizes)?;
        if let Err(e) = self.update_strides() {
            self.sizes = old;
            self.update_strides()?;
            return Err(e);
        }
        Ok(())
    }

    pub fn dtype(&self) -> ScalarType {
        self.dtype
    }
    pub fn sizes(&self) -> &[usize] {
        self.sizes.as_slice()
    }
    pub fn dims(&self) -> Dims {
        self.sizes
    }
    pub fn size(&self, dim: usize) -> usize {
        self.sizes()[dim]
    }
    pub fn rank(&self) -> usize {
        self.sizes.len()
    }
    pub fn strides(&self) -> &[usize] {
        self.strides.as_slice()
    }
    pub fn dim_order(&self) -> &[u8] {
        &self.dim_order[..self.rank()]
    }
    pub fn numel(&self) -> usize {
        self.numel
    }
    /// Bytes the current sizes occupy.
    pub fn nbytes(&self) -> usize {
        // Checked in `update_strides`.
        self.numel * self.dtype.elem_size()
    }
    /// True when the dim order is 0, 1, …, rank−1 (row-major, what most kernels expect).
    pub fn is_contiguous(&self) -> bool {
        self.dim_order()
            .iter()
            .enumerate()
            .all(|(i, &d)| d as usize == i)
    }
    /// True when the dim order is channels-last (0, 2, 3, 1) for a 4-d tensor.
    pub fn is_channels_last(&self) -> bool {
        self.rank() == 4 && self.dim_order() == [0, 2, 3, 1]
    }

    /// Normalises a possibly negative dim index against this tensor's rank.
    pub fn dim_index(&self, dim: i64) -> Result<usize, KernelError> {
        normalize_dim(dim, self.rank())
    }
}

/// `dim` in `-rank..rank` → `0..rank`. A 0-d tensor accepts dims 0 and −1, as PyTorch does.
pub fn normalize_dim(dim: i64, rank: usize) -> Result<usize, KernelError> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(KernelError::invalid(format!(
            "dim {dim} out of range for rank {rank}"
        )));
    }
    Ok(d as usize)
}

impl core::fmt::Debug for TensorInfo {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.sizes)?;
        if !self.is_contiguous() {
            write!(f, " dim_order={:?}", self.dim_order())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides() {
        let t = TensorInfo::contiguous(ScalarType::Float, &[2, 3, 4]).unwrap();
        assert_eq!(t.strides(), &[12, 4, 1]);
        assert_eq!(t.numel(), 24);
        assert_eq!(t.nbytes(), 96);
    }

    #[test]
    fn channels_last_strides() {
        let t =
            TensorInfo::with_dim_order(ScalarType::Float, &[1, 3, 4, 5], &[0, 2, 3, 1]).unwrap();
        assert_eq!(t.strides(), &[60, 1, 15, 3]);
        assert!(t.is_channels_last());
    }

    #[test]
    fn zero_size_dim_keeps_outer_strides() {
        let t = TensorInfo::contiguous(ScalarType::Float, &[2, 0, 3]).unwrap();
        assert_eq!(t.strides(), &[3, 3, 1]);
        assert_eq!(t.numel(), 0);
    }

    #[test]
    fn empty_tensors_span_a_bounded_extent() {
        let ok = TensorInfo::contiguous(ScalarType::Float, &[1 << 14, 0, 1 << 14]).unwrap();
        assert_eq!(ok.numel(), 0);
        let err = TensorInfo::contiguous(ScalarType::Float, &[1 << 30, 1 << 30, 0]).unwrap_err();
        assert!(matches!(err, KernelError::EmptyExtent { extent, .. } if extent == 1 << 60));
        // Resizing to such a shape is refused too, and leaves the sizes as they were.
        let mut t = TensorInfo::contiguous(ScalarType::Float, &[2, 0, 3]).unwrap();
        assert!(t.set_sizes(&[1 << 20, 0, 1 << 20]).is_err());
        assert_eq!(t.sizes(), &[2, 0, 3]);
    }

    #[test]
    fn rejects_bad_dim_orders_and_overflow() {
        assert!(TensorInfo::with_dim_order(ScalarType::Float, &[2, 2], &[0, 0]).is_err());
        assert!(TensorInfo::with_dim_order(ScalarType::Float, &[2, 2], &[0, 2]).is_err());
        assert!(TensorInfo::with_dim_order(ScalarType::Float, &[2, 2], &[0]).is_err());
        assert!(TensorInfo::contiguous(ScalarType::Long, &[usize::MAX / 2, 4]).is_err());
        assert!(TensorInfo::contiguous(ScalarType::Long, &[1; 17]).is_err());
    }

    #[test]
    fn negative_dims() {
        assert_eq!(normalize_dim(-1, 3).unwrap(), 2);
        assert_eq!(normalize_dim(0, 0).unwrap(), 0);
        assert!(normalize_dim(3, 3).is_err());
        assert!(normalize_dim(-4, 3).is_err());
    }
}
