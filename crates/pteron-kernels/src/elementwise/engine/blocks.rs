//! Block-wise walks of a logical index space: [`Blocks`] gives each operand's element offsets
//! for one block of at most [`BLOCK`] elements.

use pteron_core::{Dims, KernelError};

use super::elems::Offsets;

/// Elements per block of a streamed op (its stack buffers hold this many values).
pub const BLOCK: usize = 256;
/// The most tensors (inputs and output) one [`Blocks`] walk tracks.
pub const MAX_OPERANDS: usize = 4;

/// Whether reading with `strides` visits the elements of `shape` at consecutive offsets.
fn is_linear(strides: &[usize], shape: &[usize]) -> bool {
    let mut expected = 1;
    for (&st, &n) in strides.iter().zip(shape).rev() {
        if n != 1 && st != expected {
            return false;
        }
        expected *= n;
    }
    true
}

/// Walks the logical (row-major) index space of a shape in blocks of at most [`BLOCK`]
/// elements, giving for each operand (read or written with its own strides) the element offsets
/// of the block. An operand whose strides are those of a
/// contiguous tensor of the shape gets a plain run, so when every operand is contiguous a
/// block is a zip over slices and no offsets are computed at all.
pub struct Blocks {
    n: usize,
    shape: Dims,
    strides: [Dims; MAX_OPERANDS],
    linear: [bool; MAX_OPERANDS],
    all_linear: bool,
    /// Multi-index and offsets of the next element to list.
    idx: [usize; pteron_core::MAX_RANK],
    off: [usize; MAX_OPERANDS],
    numel: usize,
    start: usize,
    len: usize,
    offs: [[usize; BLOCK]; MAX_OPERANDS],
}

impl Blocks {
    /// A walk over `shape` for operands read with `strides` (one per operand, each of rank
    /// `shape.len()`).
    pub fn new(shape: &[usize], strides: &[&[usize]]) -> Result<Self, KernelError> {
        let n = strides.len();
        if n > MAX_OPERANDS {
            return Err(KernelError::invalid("elementwise walk: too many operands"));
        }
        let mut b = Blocks {
            n,
            shape: Dims::from_slice(shape)?,
            strides: [Dims::new(); MAX_OPERANDS],
            linear: [true; MAX_OPERANDS],
            all_linear: true,
            idx: [0; pteron_core::MAX_RANK],
            off: [0; MAX_OPERANDS],
            numel: shape.iter().product(),
            start: 0,
            len: 0,
            offs: [[0; BLOCK]; MAX_OPERANDS],
        };
        for (k, &st) in strides.iter().enumerate() {
            if st.len() != shape.len() {
                return Err(KernelError::invalid(format!(
                    "elementwise walk: strides {st:?} for shape {shape:?}"
                )));
            }
            b.strides[k] = Dims::from_slice(st)?;
            b.linear[k] = is_linear(st, shape);
            b.all_linear &= b.linear[k];
        }
        Ok(b)
    }

    /// Moves to the next block; false once every element has been visited.
    pub fn advance(&mut self) -> bool {
        self.start += self.len;
        if self.start >= self.numel {
            self.len = 0;
            return false;
        }
        self.len = BLOCK.min(self.numel - self.start);
        if !self.all_linear {
            self.list_offsets();
        }
        true
    }

    /// Logical index of the block's first element.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Number of elements in the block.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offsets of the block's elements for operand `k`.
    pub fn offsets(&self, k: usize) -> Offsets<'_> {
        if self.linear[k] {
            Offsets::Run(self.start)
        } else {
            Offsets::List(&self.offs[k][..self.len])
        }
    }

    /// Fills `offs` for the strided operands, a run of the innermost dim at a time.
    fn list_offsets(&mut self) {
        let rank = self.shape.len();
        let mut t = 0;
        while t < self.len {
            let Some(last) = rank.checked_sub(1) else {
                // 0-d: the one element is at offset 0.
                for k in 0..self.n {
                    self.offs[k][0] = self.off[k];
                }
                return;
            };
            let run = (self.shape[last] - self.idx[last]).min(self.len - t);
            for k in 0..self.n {
                if !self.linear[k] {
                    let (o, s) = (self.off[k], self.strides[k][last]);
                    for (j, slot) in self.offs[k][t..t + run].iter_mut().enumerate() {
                        *slot = o + j * s;
                    }
                }
                self.off[k] += run * self.strides[k][last];
            }
            t += run;
            self.idx[last] += run;
            // Carry into the outer dims.
            let mut d = last;
            while self.idx[d] == self.shape[d] {
                for k in 0..self.n {
                    self.off[k] -= self.strides[k][d] * self.shape[d];
                }
                self.idx[d] = 0;
                if d == 0 {
                    break;
                }
                d -= 1;
                self.idx[d] += 1;
                for k in 0..self.n {
                    self.off[k] += self.strides[k][d];
                }
            }
        }
    }
}
