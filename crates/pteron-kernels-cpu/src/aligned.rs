//! Float buffers that start on a cache line: packed operands are read in whole 64-byte
//! vectors, and a vector that straddles two lines costs two loads (a `Vec<f32>` is only
//! 16-byte aligned, so three of four AVX-512 loads of it would straddle).

use core::fmt;
use core::ops::{Deref, DerefMut};

/// One cache line of floats.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// `len` floats from a 64-byte boundary.
#[derive(Clone, Default)]
pub struct AlignedVec {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedVec {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        AlignedVec {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }
}

impl Deref for AlignedVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
}

impl DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

impl fmt::Debug for AlignedVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedVec({} floats)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedVec;

    #[test]
    fn starts_on_a_line_and_holds_len_floats() {
        for len in [0, 1, 15, 16, 17, 1000] {
            let mut v = AlignedVec::zeroed(len);
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0);
            v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32));
        }
    }
}
