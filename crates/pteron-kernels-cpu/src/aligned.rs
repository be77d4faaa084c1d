//! Buffers for packed weights.
//!
//! - [`AlignedVec`]: floats that start on a cache line. Packed operands are read in whole
//!   64-byte vectors, and a vector that straddles two lines costs two loads (a `Vec<f32>`
//!   is only 16-byte aligned, so three of four AVX-512 loads of it would straddle).
//! - [`StreamBuf`]: weights that a product streams from memory at every call (a decode
//!   step's 4-bit weights), carved side by side from shared anonymous maps that ask the OS
//!   for 2 MiB pages.

use core::fmt;
use core::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};

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

/// Elements of `T` that a product reads from memory at every call, on 2 MiB pages where
/// the OS gives them (Linux's transparent huge pages), else from the allocator.
///
/// A decode step streams every weight once: on 4 KiB pages that is a page walk every
/// 4 KiB (SmolLM2-135M 8da4w: 18 000 a token, most missing the TLB), and the hardware
/// prefetchers stop at each page's end. On an AVX2-only Zen 4 the 8da4w products of
/// `malloc`'d weights took 11 % less time on huge pages; these buffers (side by side, on
/// 64-byte boundaries) gained as much there with huge pages switched off, so the layout
/// and the pages each pay on their own. The weights of a model's many small products (most
/// under 0.5 MB) share maps of [`CHUNK`] bytes, so that they lie on huge pages too; a map
/// is unmapped when the last buffer carved from it drops.
pub struct StreamBuf<T: bytemuck::Pod> {
    /// The first element (read through without a branch on where the bytes live: the
    /// kernels index these buffers in their inner loops).
    ptr: core::ptr::NonNull<T>,
    len: usize,
    _owner: Owner<T>,
}

/// What holds a [`StreamBuf`]'s elements: its own `Vec`, or a chunk of which they are a
/// range no other buffer overlaps (then the `Vec` is empty).
struct Owner<T> {
    _heap: Vec<T>,
    _chunk: Option<Arc<Chunk>>,
}

// Safety: a `StreamBuf` owns its elements (its own `Vec`, or a range of a chunk no other
// buffer reaches) like a `Vec<T>`: sending or sharing it sends or shares `T`s.
unsafe impl<T: bytemuck::Pod + Send> Send for StreamBuf<T> {}
// Safety: as for `Send`; `&StreamBuf` gives only shared access to the elements.
unsafe impl<T: bytemuck::Pod + Sync> Sync for StreamBuf<T> {}

/// The bytes of one shared map (from a 2 MiB boundary).
struct Chunk {
    _map: memmap2::MmapMut,
    base: *mut u8,
    len: usize,
}

// Safety: `base` points into `_map`, which the chunk owns and which lives as long as it;
// each `StreamBuf` reaches only its own disjoint bytes of it (`&self` reads, `&mut self`
// writes), so sharing the chunk between threads shares no bytes mutably.
unsafe impl Send for Chunk {}
// Safety: as for `Send`.
unsafe impl Sync for Chunk {}

/// Bytes of one shared map.
const CHUNK: usize = 32 << 20;
/// A huge page.
const HUGE: usize = 2 << 20;

impl Chunk {
    /// `len` zero bytes from a 2 MiB boundary, advised for huge pages (nothing when the
    /// platform has no anonymous maps).
    fn map(len: usize) -> Option<Chunk> {
        let mut map = memmap2::MmapOptions::new()
            .len(len.checked_add(HUGE)?)
            .map_anon()
            .ok()?;
        let addr = map.as_ptr() as usize;
        let pad = addr.next_multiple_of(HUGE) - addr;
        // Only a hint: without huge pages the buffer still works, on small ones.
        #[cfg(target_os = "linux")]
        let _ = map.advise_range(memmap2::Advice::HugePage, pad, len);
        // Safety: `pad < HUGE`, so `pad + len` bytes lie inside the map.
        let base = unsafe { map.as_mut_ptr().add(pad) };
        Some(Chunk {
            _map: map,
            base,
            len,
        })
    }
}

/// The map being filled (dropped with its last buffer) and its first free byte.
struct Pool {
    chunk: Weak<Chunk>,
    next: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    chunk: Weak::new(),
    next: 0,
});

/// `bytes` fresh zero bytes from a 64-byte boundary of a shared map (a map of their own
/// past a quarter of [`CHUNK`]).
fn carve(bytes: usize) -> Option<(Arc<Chunk>, usize)> {
    let bytes = bytes.checked_next_multiple_of(64)?;
    if bytes > CHUNK / 4 {
        return Some((
            Arc::new(Chunk::map(bytes.checked_next_multiple_of(HUGE)?)?),
            0,
        ));
    }
    let mut pool = POOL.lock().ok()?;
    if let Some(chunk) = pool.chunk.upgrade() {
        if chunk.len - pool.next >= bytes {
            let at = pool.next;
            pool.next += bytes;
            return Some((chunk, at));
        }
    }
    let chunk = Arc::new(Chunk::map(CHUNK)?);
    pool.chunk = Arc::downgrade(&chunk);
    pool.next = bytes;
    Some((chunk, 0))
}

impl<T: bytemuck::Pod> StreamBuf<T> {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let size = core::mem::size_of::<T>();
        if len > 0 && size > 0 && core::mem::align_of::<T>() <= 64 {
            if let Some((chunk, at)) = len.checked_mul(size).and_then(carve) {
                // Safety: `carve` gave `len · size` bytes at `at` inside the chunk.
                let first = unsafe { chunk.base.add(at) } as *mut T;
                if let Some(ptr) = core::ptr::NonNull::new(first) {
                    return StreamBuf {
                        ptr,
                        len,
                        _owner: Owner {
                            _heap: Vec::new(),
                            _chunk: Some(chunk),
                        },
                    };
                }
            }
        }
        let mut v = vec![T::zeroed(); len];
        StreamBuf {
            // A `Vec`'s pointer is never null (dangling when empty, fine for no elements);
            // moving the `Vec` into the buffer does not move its elements.
            ptr: core::ptr::NonNull::new(v.as_mut_ptr()).unwrap_or(core::ptr::NonNull::dangling()),
            len,
            _owner: Owner {
                _heap: v,
                _chunk: None,
            },
        }
    }

    /// A copy of `v`.
    pub fn from_slice(v: &[T]) -> Self {
        let mut b = Self::zeroed(v.len());
        b.copy_from_slice(v);
        b
    }
}

impl<T: bytemuck::Pod> Default for StreamBuf<T> {
    fn default() -> Self {
        Self::zeroed(0)
    }
}

impl<T: bytemuck::Pod> Clone for StreamBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: bytemuck::Pod> Deref for StreamBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // Safety: `ptr` starts `len` initialized elements that this buffer owns (its `Vec`,
        // or a range of a chunk that `carve` handed out to it alone, zeroed when mapped, on
        // a 64-byte boundary, at least T's alignment), alive while `_owner` is.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: bytemuck::Pod> DerefMut for StreamBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // Safety: as in `deref`; `&mut self` makes this the only borrow of the elements.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: bytemuck::Pod> fmt::Debug for StreamBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StreamBuf({} elements)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::{AlignedVec, StreamBuf};

    #[test]
    fn stream_buffers_are_zeroed_disjoint_and_outlive_their_neighbours() {
        let mut bufs: Vec<StreamBuf<u16>> = [0, 1, 7, 100, 5000, 300_000]
            .into_iter()
            .map(StreamBuf::zeroed)
            .collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert!(b.iter().all(|&v| v == 0));
            assert_eq!(b.as_ptr() as usize % 2, 0);
            b.iter_mut().for_each(|v| *v = i as u16);
        }
        // A buffer of its own map (past a quarter of a chunk), and a copy.
        let big = StreamBuf::<u8>::from_slice(&vec![3u8; 9 << 20]);
        assert!(big.iter().all(|&v| v == 3));
        let copy = bufs[4].clone();
        drop(bufs.remove(0));
        drop(bufs.remove(2));
        for b in &bufs {
            let first = b.first().copied();
            assert!(b.iter().all(|&v| Some(v) == first));
        }
        assert_eq!(copy.len(), 5000);
        assert!(copy.iter().all(|&v| v == 4));
    }

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
