//! The memory plan: one arena per planned buffer (`non_const_buffer_sizes[1..]`; entry 0 is
//! reserved and `memory_id` is 1-based), plus one "I/O arena" that gives every tensor the
//! plan leaves unplanned (user inputs, some outputs) a home, all within
//! [`MethodConfig::max_planned_bytes`].

use alloc::vec::Vec;

use pteron_format::schema;

use crate::config::MethodConfig;
use crate::error::{Error, Result};
use crate::memory::{Arena, ARENA_ALIGN};
use crate::value::Storage;

/// The memory a method's arenas take: what [`crate::Method::memory_needs`] reports and
/// [`crate::Method::load_in`] carves from the caller's region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryNeeds {
    /// Bytes of each arena: the plan's buffers (`memory_id` 1, 2, …), then the I/O arena
    /// (inputs and outputs the plan leaves unplanned).
    pub arenas: Vec<usize>,
    /// A lent region of this many bytes holds them all, each 64-byte aligned, wherever the
    /// region starts (63 fewer suffice when it starts 64-byte aligned).
    pub region_bytes: usize,
}

/// The arenas' sizes, filled in as values are decoded, and the initial contents of planned
/// values (mutable buffers) to copy in once they are allocated.
pub(crate) struct ArenaLayout<'p> {
    sizes: Vec<usize>,
    /// Bytes of the planned buffers together.
    planned: u64,
    io_size: usize,
    initial: Vec<(u32, usize, &'p [u8])>,
    limit: u64,
}

impl<'p> ArenaLayout<'p> {
    /// The planned buffers of `plan`, checked against the configured limit.
    // A load stage, called once: not inlined, which keeps firmware smaller (size_test).
    #[inline(never)]
    pub fn from_plan(plan: &schema::ExecutionPlan<'_>, config: &MethodConfig) -> Result<Self> {
        let sizes = plan
            .non_const_buffer_sizes()
            .ok_or_else(|| Error::invalid("plan has no non_const_buffer_sizes"))?;
        let mut layout = ArenaLayout {
            sizes: Vec::new(),
            planned: 0,
            io_size: 0,
            initial: Vec::new(),
            limit: config.max_planned_bytes,
        };
        for s in sizes.iter().skip(1) {
            if s < 0 {
                return Err(Error::bad("negative planned buffer size", s));
            }
            layout.planned = layout.planned.saturating_add(s as u64);
            layout.check_limit(layout.planned)?;
            layout.sizes.push(s as usize);
        }
        Ok(layout)
    }

    fn check_limit(&self, requested: u64) -> Result<()> {
        if requested > self.limit {
            return Err(Error::ResourceLimit {
                what: "bytes of planned memory",
                requested,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// The index of the I/O arena (the one after the planned buffers; arenas after it hold
    /// values that load-time planning gave memory of their own).
    pub fn io_arena(&self) -> u32 {
        self.sizes.len() as u32
    }

    /// A planned tensor's location from its `allocation_info`, checked against the arena.
    pub fn place(&self, a: &schema::AllocationDetails<'_>, nbytes: usize) -> Result<(u32, usize)> {
        let id = a.memory_id();
        let arena = id
            .checked_sub(1)
            .ok_or_else(|| Error::invalid("memory_id 0 is reserved"))?;
        let size = *self
            .sizes
            .get(arena as usize)
            .ok_or(Error::IndexOutOfRange {
                what: "memory_id",
                index: id.into(),
                len: self.sizes.len() + 1,
            })?;
        let offset = (a.memory_offset_low() as u64) | ((a.memory_offset_high() as u64) << 32);
        match offset.checked_add(nbytes as u64) {
            Some(end) if end <= size as u64 => Ok((arena, offset as usize)),
            _ => Err(Error::Overrun {
                offset,
                nbytes,
                buffer: id,
                size,
            }),
        }
    }

    /// A home in the I/O arena for a tensor supplied at run time.
    pub fn place_io(&mut self, nbytes: usize) -> Result<Storage<'p>> {
        let offset = self.io_size;
        let padded = nbytes
            .checked_add(ARENA_ALIGN - 1)
            .ok_or_else(|| Error::invalid("tensor too large"))?
            / ARENA_ALIGN
            * ARENA_ALIGN;
        self.io_size = self
            .io_size
            .checked_add(padded)
            .ok_or_else(|| Error::invalid("tensor too large"))?;
        self.check_limit(self.planned.saturating_add(self.io_size as u64))?;
        Ok(Storage::Planned {
            arena: self.io_arena(),
            offset,
        })
    }

    /// Copies `bytes` to `(arena, offset)` (a range [`ArenaLayout::place`] checked) once the
    /// arenas are allocated.
    pub fn set_initial(&mut self, (arena, offset): (u32, usize), bytes: &'p [u8]) {
        self.initial.push((arena, offset, bytes));
    }

    /// What the arenas need (see [`MemoryNeeds`]).
    pub fn needs(&self) -> MemoryNeeds {
        let arenas: Vec<usize> = self.sizes.iter().copied().chain([self.io_size]).collect();
        // Each arena starts 64-byte aligned (saturating: a size from a hostile plan on a 32-bit
        // target may be near usize::MAX; lending then fails cleanly).
        let padded = arenas
            .iter()
            .map(|&s| s.div_ceil(ARENA_ALIGN).saturating_mul(ARENA_ALIGN))
            .fold(0usize, usize::saturating_add);
        MemoryNeeds {
            arenas,
            region_bytes: padded.saturating_add(ARENA_ALIGN - 1),
        }
    }

    /// The arenas (the planned buffers, then the I/O arena), allocated or carved in order
    /// from `lent`, with the initial contents copied in.
    // A load stage, called once: not inlined, which keeps firmware smaller (size_test).
    #[inline(never)]
    pub fn allocate(self, lent: Option<&'p mut [u8]>) -> Result<Vec<Arena<'p>>> {
        let mut arenas = Vec::new();
        let sizes = self.sizes.iter().copied().chain([self.io_size]);
        match lent {
            None => {
                for s in sizes {
                    arenas.push(Arena::new(s).ok_or(Error::ResourceLimit {
                        what: "bytes of planned memory (allocation failed)",
                        requested: s as u64,
                        limit: self.limit,
                    })?);
                }
            }
            Some(mut rest) => {
                let given = rest.len() as u64;
                for s in sizes {
                    let Some((arena, after)) = Arena::lend(rest, s) else {
                        // Sized only on failure: the figure the caller needs to lend.
                        return Err(Error::ResourceLimit {
                            what: "bytes of lent memory",
                            requested: self.needs().region_bytes as u64,
                            limit: given,
                        });
                    };
                    arenas.push(arena);
                    rest = after;
                }
            }
        }
        for (arena, offset, bytes) in self.initial {
            // Ranges were checked against the arena size in `place`.
            arenas[arena as usize].bytes_mut()[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
        Ok(arenas)
    }
}
