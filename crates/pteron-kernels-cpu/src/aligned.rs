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
#[derive(Default)]
pub struct AlignedVec {
    store: Store,
    len: usize,
}

enum Store {
    Lines(Vec<Line>),
    /// Big buffers: an anonymous map whose pages the kernel zeroes and maps in one call
    /// (`MAP_POPULATE`), several times cheaper here than one page fault per page as the
    /// buffer is first written (weights packed at load).
    Map(memmap2::MmapMut),
}

impl Default for Store {
    fn default() -> Self {
        Store::Lines(Vec::new())
    }
}

/// Buffers from this size are mapped (smaller ones come from the allocator).
const MAP_BYTES: usize = 256 << 10;

impl AlignedVec {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let lines = len.div_ceil(16);
        let bytes = lines.saturating_mul(64);
        if bytes >= MAP_BYTES {
            if let Ok(map) = memmap2::MmapOptions::new().len(bytes).populate().map_anon() {
                return AlignedVec {
                    store: Store::Map(map),
                    len,
                };
            }
        }
        AlignedVec {
            store: Store::Lines(bytemuck::zeroed_vec(lines)),
            len,
        }
    }
}

impl Clone for AlignedVec {
    fn clone(&self) -> Self {
        let mut v = AlignedVec::zeroed(self.len);
        v.copy_from_slice(self);
        v
    }
}

impl Deref for AlignedVec {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        let all: &[f32] = match &self.store {
            Store::Lines(l) => bytemuck::cast_slice(l),
            // A map starts on a page boundary and holds `len` floats (rounded up to lines).
            Store::Map(m) => bytemuck::cast_slice(&m[..]),
        };
        &all[..self.len]
    }
}

impl DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        let all: &mut [f32] = match &mut self.store {
            Store::Lines(l) => bytemuck::cast_slice_mut(l),
            Store::Map(m) => bytemuck::cast_slice_mut(&mut m[..]),
        };
        &mut all[..self.len]
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
        for len in [0, 1, 15, 16, 17, 1000, 100_000] {
            let mut v = AlignedVec::zeroed(len);
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0);
            v.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32);
            assert!(v.iter().enumerate().all(|(i, &x)| x == i as f32));
        }
    }
}
