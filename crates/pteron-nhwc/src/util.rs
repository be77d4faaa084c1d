//! Small shared pieces: tensor shapes (rank ≤ 6, as XNNPACK), aligned byte buffers and the
//! disjoint borrow of a node's inputs and output from one arena.

use core::ops::Range;

use pteron_core::KernelError;

/// Most dimensions a value may have (`XNN_MAX_TENSOR_DIMS`).
pub const MAX_DIMS: usize = 6;

/// A shape of rank ≤ [`MAX_DIMS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    dims: [usize; MAX_DIMS],
    rank: u8,
}

impl Shape {
    pub fn new(dims: &[usize]) -> Result<Self, KernelError> {
        if dims.len() > MAX_DIMS {
            return Err(KernelError::unsupported(format!(
                "rank {} exceeds XNNPACK's {MAX_DIMS}",
                dims.len()
            )));
        }
        let mut d = [0usize; MAX_DIMS];
        d[..dims.len()].copy_from_slice(dims);
        Ok(Shape {
            dims: d,
            rank: dims.len() as u8,
        })
    }
    pub fn rank(&self) -> usize {
        self.rank as usize
    }
    pub fn dims(&self) -> &[usize] {
        &self.dims[..self.rank as usize]
    }
    pub fn dims_mut(&mut self) -> &mut [usize] {
        &mut self.dims[..self.rank as usize]
    }
    /// Dimension `i` counted from the end (`back(1)` is the last).
    pub fn back(&self, i: usize) -> usize {
        self.dims()[self.rank() - i]
    }
    /// Number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<usize> {
        self.dims()
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
    /// Number of elements, an error on overflow.
    pub fn count(&self) -> Result<usize, KernelError> {
        self.numel().ok_or(KernelError::SizeOverflow)
    }
}

/// 64-byte aligned bytes (so that every element type can be viewed in place).
///
/// Held as 8-byte words with the aligned start found inside: zeroed words come from `calloc`,
/// whose large blocks are fresh pages, resident only once written (a 64-byte aligned zeroed
/// allocation is filled with zeros instead, making every page resident at once).
#[derive(Default)]
pub struct Buf {
    words: Vec<u64>,
    /// Byte offset of the aligned start within `words`.
    start: usize,
    len: usize,
}

impl Clone for Buf {
    fn clone(&self) -> Self {
        // The copy's allocation has its own alignment: find its aligned start again.
        let mut b = Self::zeroed(self.len).unwrap_or_default();
        if b.len == self.len {
            b.bytes_mut().copy_from_slice(self.bytes());
        }
        b
    }
}

impl Buf {
    /// `len` zero bytes; an error (not an abort) when the memory cannot be had.
    pub fn zeroed(len: usize) -> Result<Self, KernelError> {
        let err = || KernelError::unsupported(format!("cannot allocate {len} bytes"));
        let n = len.checked_add(127).ok_or_else(err)? / 8;
        let words = bytemuck::allocation::try_zeroed_vec::<u64>(n).map_err(|_| err())?;
        let start = (words.as_ptr() as usize).wrapping_neg() % 64;
        Ok(Buf { words, start, len })
    }
    pub fn from_bytes(b: &[u8]) -> Result<Self, KernelError> {
        let mut s = Self::zeroed(b.len())?;
        s.bytes_mut().copy_from_slice(b);
        Ok(s)
    }
    pub fn from_f32(v: &[f32]) -> Result<Self, KernelError> {
        Self::from_bytes(bytemuck::cast_slice(v))
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
            .get(self.start..self.start + self.len)
            .unwrap_or(&[])
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (a, b) = (self.start, self.start + self.len);
        bytemuck::cast_slice_mut(&mut self.words)
            .get_mut(a..b)
            .unwrap_or(&mut [])
    }
    pub fn f32(&self) -> &[f32] {
        bytemuck::cast_slice(&self.bytes()[..self.len / 4 * 4])
    }
}

/// Where a node's input lives.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    /// Bytes of the arena.
    Arena(usize, usize),
    /// Constant number `k`.
    Const(usize),
}

/// Where a node writes its output: a range of the arena, or a method tensor's bytes (an
/// external output written in place).
pub enum Dst<'a> {
    Arena(Range<usize>),
    Ext(&'a mut [u8]),
}

/// Borrows the inputs `ins` (arena ranges or constants; `ext[k]`, when set, replaces input
/// k: a method tensor read in place) and the output at once. An input overlapping an arena
/// output is an error (the memory plan never does that).
pub fn io<'a, const N: usize>(
    arena: &'a mut [u8],
    consts: &'a [Buf],
    ins: [Src; N],
    ext: [Option<&'a [u8]>; N],
    out: Dst<'a>,
) -> Result<([&'a [u8]; N], &'a mut [u8]), KernelError> {
    // Arena inputs end before `before`'s end or start at `resume` (in `after`).
    let (before, o, after, resume): (&'a [u8], &'a mut [u8], &'a [u8], usize) = match out {
        Dst::Ext(o) => {
            let n = arena.len();
            (arena, o, &[], n)
        }
        Dst::Arena(out) => {
            if out.start > out.end || out.end > arena.len() {
                return Err(KernelError::invalid("output outside the delegate's arena"));
            }
            let (before, rest) = arena.split_at_mut(out.start);
            let (o, after) = rest.split_at_mut(out.end - out.start);
            (before, o, after, out.end)
        }
    };
    let split = before.len();
    let mut res: [&'a [u8]; N] = [&[]; N];
    for (k, src) in ins.iter().enumerate() {
        if let Some(b) = ext[k] {
            res[k] = b;
            continue;
        }
        res[k] = match *src {
            Src::Const(c) => consts
                .get(c)
                .map(|b| b.bytes())
                .ok_or_else(|| KernelError::invalid("constant index out of range"))?,
            Src::Arena(s, e) if s > e => return Err(KernelError::invalid("reversed range")),
            Src::Arena(s, e) if e <= split => before
                .get(s..e)
                .ok_or_else(|| KernelError::invalid("input outside the delegate's arena"))?,
            Src::Arena(s, e) if s >= resume => after
                .get(s - resume..e - resume)
                .ok_or_else(|| KernelError::invalid("input outside the delegate's arena"))?,
            Src::Arena(s, e) if s == e => &[],
            Src::Arena(..) => {
                return Err(KernelError::invalid(
                    "a node's input overlaps its output in the delegate's arena",
                ))
            }
        };
    }
    Ok((res, o))
}

/// Reads `b` as f32 (the arena and constants are aligned; a length that is not a multiple of 4
/// is an error).
pub fn f32s(b: &[u8]) -> Result<&[f32], KernelError> {
    bytemuck::try_cast_slice(b).map_err(|_| KernelError::invalid("misaligned f32 data"))
}

pub fn f32s_mut(b: &mut [u8]) -> Result<&mut [f32], KernelError> {
    bytemuck::try_cast_slice_mut(b).map_err(|_| KernelError::invalid("misaligned f32 data"))
}

/// Reads `n` little-endian half values from bytes of any alignment, as f32.
pub fn read_f16(b: &[u8], n: usize) -> Result<Vec<f32>, KernelError> {
    let need = n.checked_mul(2).ok_or(KernelError::SizeOverflow)?;
    let b = b.get(..need).ok_or_else(|| {
        KernelError::invalid(format!("constant has {} bytes, needs {need}", b.len()))
    })?;
    Ok(b.chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect())
}

/// Rounds every value to the nearest half (ties to even), keeping it as f32.
pub fn round_to_f16(v: &mut [f32]) {
    for x in v {
        *x = half::f16::from_f32(*x).to_f32();
    }
}

/// Reads little-endian f32 values from bytes of any alignment.
pub fn read_f32(b: &[u8], n: usize) -> Result<Vec<f32>, KernelError> {
    let need = n.checked_mul(4).ok_or(KernelError::SizeOverflow)?;
    let b = b.get(..need).ok_or_else(|| {
        KernelError::invalid(format!("constant has {} bytes, needs {need}", b.len()))
    })?;
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_splits_and_refuses_overlap() {
        let mut arena = vec![0u8; 256];
        let consts = vec![Buf::from_bytes(&[1, 2, 3, 4]).unwrap()];
        let a = |r: core::ops::Range<usize>| Dst::Arena(r);
        let (ins, out) = io(
            &mut arena,
            &consts,
            [Src::Arena(0, 64), Src::Arena(128, 192), Src::Const(0)],
            [None; 3],
            a(64..128),
        )
        .unwrap();
        assert_eq!(ins[0].len(), 64);
        assert_eq!(ins[1].len(), 64);
        assert_eq!(ins[2], &[1, 2, 3, 4]);
        assert_eq!(out.len(), 64);
        assert!(io(
            &mut arena,
            &consts,
            [Src::Arena(32, 96)],
            [None],
            a(64..128)
        )
        .is_err());
        assert!(io(
            &mut arena,
            &consts,
            [Src::Arena(0, 300)],
            [None],
            a(64..128)
        )
        .is_err());
        assert!(io(&mut arena, &consts, [Src::Const(1)], [None], a(64..128)).is_err());
        assert!(io::<0>(&mut arena, &consts, [], [], a(200..300)).is_err());
    }

    /// A method tensor in place of an input, and as the output: the whole arena is readable.
    #[test]
    fn io_with_external_operands() {
        let mut arena = vec![7u8; 256];
        let consts = vec![];
        let ext_in = [9u8; 8];
        let mut ext_out = [0u8; 16];
        let (ins, out) = io(
            &mut arena,
            &consts,
            [Src::Arena(0, 256), Src::Arena(0, 0)],
            [None, Some(&ext_in[..])],
            Dst::Ext(&mut ext_out),
        )
        .unwrap();
        assert_eq!(ins[0].len(), 256);
        assert_eq!(ins[1], &[9u8; 8]);
        assert_eq!(out.len(), 16);
        let mut ext_out = [0u8; 16];
        let far = [Src::Arena(200, 300)];
        assert!(io(&mut arena, &consts, far, [None], Dst::Ext(&mut ext_out)).is_err());
    }

    #[test]
    fn shapes() {
        let s = Shape::new(&[2, 3, 4]).unwrap();
        assert_eq!(s.numel(), Some(24));
        assert_eq!(s.back(1), 4);
        assert!(Shape::new(&[1; 7]).is_err());
        assert_eq!(Shape::new(&[usize::MAX, 2]).unwrap().numel(), None);
    }
}
