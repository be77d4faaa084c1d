//! Planned memory: arenas allocated once at method load, and the safe, checked split of arena
//! bytes into the read-only input and writable output slices of one kernel call.

use alloc::vec::Vec;

/// Alignment of every arena (enough for any SIMD load the kernels use).
pub const ARENA_ALIGN: usize = 64;

/// One zero-initialised, 64-byte aligned buffer: allocated, or lent by the caller for `'m`
/// (memory handed to [`crate::Method::load_in`], as ExecuTorch's `MemoryManager` takes it).
pub struct Arena<'m> {
    mem: Memory<'m>,
    /// Byte offset of the 64-byte aligned start within `mem`.
    start: usize,
    len: usize,
}

/// An arena's memory.
enum Memory<'m> {
    /// 8-byte words with the aligned start found inside: the allocator hands out zeroed
    /// memory of that alignment with `calloc`, whose large blocks are fresh pages that become
    /// resident only when written (an over-aligned zeroed allocation is `memset` instead,
    /// which makes every page of every arena resident at load).
    Owned(Vec<u64>),
    Lent(&'m mut [u8]),
}

impl Arena<'static> {
    /// Allocates `len` zeroed bytes; `None` when the allocation fails or its size overflows.
    /// Pages a method never writes are typically never made resident.
    pub fn new(len: usize) -> Option<Self> {
        if len == 0 {
            return Some(Arena::empty());
        }
        let n = len.checked_add(2 * ARENA_ALIGN - 1)? / 8;
        let words = bytemuck::allocation::try_zeroed_vec::<u64>(n).ok()?;
        let start = (words.as_ptr() as usize).wrapping_neg() % ARENA_ALIGN;
        Some(Arena {
            mem: Memory::Owned(words),
            start,
            len,
        })
    }
}

impl<'m> Arena<'m> {
    /// An arena of no bytes, allocating nothing. Its (empty) slices start at an 8-byte
    /// aligned address, as element views of empty tensors check.
    fn empty() -> Self {
        Arena {
            mem: Memory::Owned(Vec::new()),
            start: 0,
            len: 0,
        }
    }

    /// The first `len` bytes of `mem` from its first 64-byte aligned byte, zeroed, and the rest
    /// of `mem` after them (all of it when `len` is 0); `None` when `mem` is too small.
    pub fn lend(mem: &'m mut [u8], len: usize) -> Option<(Self, &'m mut [u8])> {
        if len == 0 {
            return Some((Arena::empty(), mem));
        }
        let start = (mem.as_ptr() as usize).wrapping_neg() % ARENA_ALIGN;
        let end = start.checked_add(len)?;
        if end > mem.len() {
            return None;
        }
        let (mine, rest) = mem.split_at_mut(end);
        mine[start..].fill(0);
        let arena = Arena {
            mem: Memory::Lent(mine),
            start,
            len,
        };
        Some((arena, rest))
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.mem {
            Memory::Owned(words) => bytemuck::cast_slice(words),
            Memory::Lent(bytes) => bytes,
        };
        &all[self.start..self.start + self.len]
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let all: &mut [u8] = match &mut self.mem {
            Memory::Owned(words) => bytemuck::cast_slice_mut(words),
            Memory::Lent(bytes) => bytes,
        };
        &mut all[self.start..self.start + self.len]
    }
}

/// Where one argument's bytes are.
#[derive(Clone, Copy, Debug)]
pub enum Region<'p> {
    Arena {
        arena: usize,
        start: usize,
        end: usize,
    },
    Bytes(&'p [u8]),
}

/// The most outputs one borrow may hold at once (multi-output kernels write ≤ 3).
pub const MAX_OUTPUTS: usize = 8;

/// Borrows `ins` read-only and `outs` writable from `arenas`, checking that no output overlaps
/// another output or any input. Returns `Err(k)` naming the conflicting argument position
/// (inputs first, then outputs) on overlap or a range outside its arena.
pub fn borrow_disjoint<'a, const N: usize, const M: usize>(
    arenas: &'a mut [Arena],
    ins: [Region<'a>; N],
    outs: [(usize, usize, usize); M],
) -> Result<([&'a [u8]; N], [&'a mut [u8]; M]), usize> {
    assert!(M <= MAX_OUTPUTS, "at most {MAX_OUTPUTS} outputs per borrow");
    let mut in_slices: [Option<&'a [u8]>; N] = [None; N];
    let mut out_slices: [Option<&'a mut [u8]>; M] = core::array::from_fn(|_| None);
    for (j, r) in ins.iter().enumerate() {
        if let Region::Bytes(b) = r {
            in_slices[j] = Some(b);
        }
    }
    for (id, arena) in arenas.iter_mut().enumerate() {
        let touched = outs.iter().any(|o| o.0 == id)
            || ins
                .iter()
                .any(|r| matches!(r, Region::Arena { arena, .. } if *arena == id));
        if !touched {
            continue;
        }
        // Outputs in this arena, sorted by start.
        let mut order = [0usize; MAX_OUTPUTS];
        let mut n = 0;
        for (k, o) in outs.iter().enumerate() {
            if o.0 == id {
                order[n] = k;
                n += 1;
            }
        }
        order[..n].sort_unstable_by_key(|&k| outs[k].1);
        let mut gaps: [(usize, &'a [u8]); MAX_OUTPUTS + 1] = [(0, &[]); MAX_OUTPUTS + 1];
        let mut rest: &'a mut [u8] = arena.bytes_mut();
        let mut base = 0usize;
        for (g, &k) in order[..n].iter().enumerate() {
            let (_, start, end) = outs[k];
            if start < base || end < start || end - base > rest.len() {
                return Err(N + k);
            }
            let (gap, tail) = rest.split_at_mut(start - base);
            let (o, tail) = tail.split_at_mut(end - start);
            gaps[g] = (base, gap);
            out_slices[k] = Some(o);
            rest = tail;
            base = end;
        }
        gaps[n] = (base, rest);
        for (j, r) in ins.iter().enumerate() {
            if let Region::Arena { arena, start, end } = *r {
                if arena != id {
                    continue;
                }
                let hit = gaps[..=n]
                    .iter()
                    .find(|(gb, g)| start >= *gb && end >= start && end - *gb <= g.len());
                match hit {
                    Some((gb, g)) => in_slices[j] = Some(&g[start - gb..end - gb]),
                    None => return Err(j),
                }
            }
        }
    }
    // Any region whose arena id was out of range was never filled.
    if let Some(j) = in_slices.iter().position(Option::is_none) {
        return Err(j);
    }
    if let Some(k) = out_slices.iter().position(Option::is_none) {
        return Err(N + k);
    }
    let ins_out = in_slices.map(Option::unwrap_or_default);
    let outs_out = out_slices.map(Option::unwrap_or_default);
    Ok((ins_out, outs_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arenas() -> Vec<Arena<'static>> {
        let mut a = Arena::new(64).unwrap();
        for (i, b) in a.bytes_mut().iter_mut().enumerate() {
            *b = i as u8;
        }
        alloc::vec![a, Arena::new(16).unwrap()]
    }

    #[test]
    fn splits_disjoint_ranges() {
        let mut a = arenas();
        let ins = [
            Region::Arena {
                arena: 0,
                start: 0,
                end: 8,
            },
            Region::Arena {
                arena: 0,
                start: 40,
                end: 48,
            },
        ];
        let (i, o) = borrow_disjoint(&mut a, ins, [(0, 16, 32), (1, 0, 16)]).unwrap();
        assert_eq!(i[0], &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(i[1][0], 40);
        assert_eq!(o[0][0], 16);
        o[0][0] = 99;
        assert_eq!(o[1].len(), 16);
        assert_eq!(a[0].bytes()[16], 99);
    }

    #[test]
    fn rejects_overlap_and_out_of_range() {
        let mut a = arenas();
        let ins = [Region::Arena {
            arena: 0,
            start: 8,
            end: 20,
        }];
        assert_eq!(borrow_disjoint(&mut a, ins, [(0, 16, 32)]).unwrap_err(), 0);
        assert_eq!(
            borrow_disjoint::<0, 2>(&mut a, [], [(0, 0, 8), (0, 4, 12)]).unwrap_err(),
            1
        );
        assert!(borrow_disjoint::<0, 1>(&mut a, [], [(0, 60, 70)]).is_err());
        assert!(borrow_disjoint::<0, 1>(&mut a, [], [(5, 0, 1)]).is_err());
        let ins = [Region::Arena {
            arena: 9,
            start: 0,
            end: 1,
        }];
        assert!(borrow_disjoint::<1, 0>(&mut a, ins, []).is_err());
    }

    #[test]
    fn inputs_may_overlap_each_other() {
        let mut a = arenas();
        let r = Region::Arena {
            arena: 0,
            start: 0,
            end: 8,
        };
        let c: &[u8] = &[1, 2];
        let (i, _) = borrow_disjoint::<3, 0>(&mut a, [r, r, Region::Bytes(c)], []).unwrap();
        assert_eq!(i[0], i[1]);
        assert_eq!(i[2], &[1, 2]);
    }

    /// Lent arenas start 64-byte aligned, are zeroed, and leave the rest of the region; an
    /// empty one takes nothing; a region too small is refused.
    #[test]
    fn lent_arenas() {
        let mut region = alloc::vec![0xffu8; 300];
        let (mut a, rest) = Arena::lend(&mut region[1..], 100).unwrap();
        assert_eq!(a.bytes().as_ptr() as usize % ARENA_ALIGN, 0);
        assert!(a.bytes().iter().all(|&b| b == 0));
        a.bytes_mut()[99] = 7;
        let rest_len = rest.len();
        let (empty, rest) = Arena::lend(rest, 0).unwrap();
        assert!(empty.is_empty());
        assert_eq!(rest.len(), rest_len);
        let (b, rest) = Arena::lend(rest, 64).unwrap();
        assert_eq!(b.bytes().as_ptr() as usize % ARENA_ALIGN, 0);
        assert!(b.bytes().as_ptr() as usize >= a.bytes().as_ptr() as usize + 100);
        assert!(Arena::lend(rest, 200).is_none());
        assert_eq!(a.bytes()[99], 7);
        assert!(Arena::new(0).unwrap().is_empty());
        // Empty tensors' views check the alignment of their (empty) slices.
        assert_eq!(Arena::new(0).unwrap().bytes().as_ptr() as usize % 8, 0);
    }
}
