//! Splitting kernel work across the method's threads ([`pteron_core::Parallel`]).

use core::ops::Range;

use pteron_core::Parallel;

/// Elements below which an elementwise pass is not worth waking other threads for.
pub const MIN_PARALLEL_ELEMS: usize = 1 << 15;

/// How many tasks to cut `work` units into: up to 16 per thread, each at least `min_per_task`
/// units (1 task when single-threaded or when the work is small). Many small tasks spread
/// evenly ([`part`]: 28 rows in 8 tasks of 3 or 4 rows are 14 rows per thread on 2
/// threads, the pool handing each thread a contiguous share of the tasks), and a thread
/// still works on one region of the output.
pub fn tasks_for(par: &dyn Parallel, work: usize, min_per_task: usize) -> usize {
    let t = par.num_threads();
    if t <= 1 || work < 2 * min_per_task.max(1) {
        return 1;
    }
    (work / min_per_task.max(1)).clamp(1, 16 * t)
}

/// The `k`-th of `tasks` near-equal parts of `0..n`. The longer parts are spread out, not
/// first: the pool gives each thread a contiguous run of tasks, and 49 units in 32 tasks
/// gave the first 16 tasks (one thread's share) 32 units and the other 16 only 17.
pub fn part(n: usize, tasks: usize, k: usize) -> Range<usize> {
    let at = |k: usize| (k as u128 * n as u128 / tasks.max(1) as u128) as usize;
    at(k)..at(k + 1)
}

/// A pointer to an output buffer that tasks on several threads write disjoint parts of.
#[derive(Clone, Copy)]
pub struct SharedMut<T> {
    ptr: *mut T,
    len: usize,
}

// Safety: `SharedMut` only hands out sub-slices through `slice`, whose callers guarantee that
// no two live sub-slices overlap; with that, sending it across threads is like sending
// disjoint `&mut [T]`s, which requires `T: Send`.
unsafe impl<T: Send> Send for SharedMut<T> {}
// Safety: as above.
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        SharedMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }
    /// The elements `r` of the buffer.
    ///
    /// # Safety
    /// The buffer must outlive the returned slice, and no other live slice (or access) from
    /// this `SharedMut` may overlap `r` while it is used.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, r: Range<usize>) -> &mut [T] {
        assert!(r.start <= r.end && r.end <= self.len, "range out of bounds");
        // Safety: in bounds (checked above); exclusivity is the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(r.start), r.end - r.start) }
    }
}

/// Runs `f(k, chunk)` over the `chunk`-sized pieces of `out` (the last may be shorter), in
/// parallel when there is enough work.
pub fn for_chunks_mut<T: Send>(
    par: &dyn Parallel,
    out: &mut [T],
    chunk: usize,
    min_chunks_per_task: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    let chunk = chunk.max(1);
    let n = out.len().div_ceil(chunk);
    let tasks = tasks_for(par, n, min_chunks_per_task);
    if tasks <= 1 {
        for (k, c) in out.chunks_mut(chunk).enumerate() {
            f(k, c);
        }
        return;
    }
    let len = out.len();
    let shared = SharedMut::new(out);
    par.parallel_for(tasks, &|tr: Range<usize>| {
        for t in tr {
            for k in part(n, tasks, t) {
                let r = k * chunk..((k + 1) * chunk).min(len);
                // Safety: chunk `k` belongs to task `t` only (parts are disjoint), and `out`
                // outlives `parallel_for`.
                f(k, unsafe { shared.slice(r) });
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_get_equal_shares() {
        // 49 units in 32 tasks, each half of the tasks (one thread's share) 24 or 25 units.
        let half: usize = (0..16).map(|k| part(49, 32, k).len()).sum();
        assert_eq!(half, 24);
        for k in 0..32 {
            assert!((1..=2).contains(&part(49, 32, k).len()));
        }
    }

    #[test]
    fn parts_cover_exactly() {
        for n in [0, 1, 5, 17, 100] {
            for t in 1..8 {
                let mut next = 0;
                for k in 0..t {
                    let r = part(n, t, k);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
