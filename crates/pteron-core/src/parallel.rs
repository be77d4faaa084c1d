//! Work splitting: the interface kernels use to spread one call across threads, and the
//! inline implementation used when a method has no thread pool.

use core::ops::Range;

/// Splits work across threads. Kernels get one from [`crate::KernelContext::parallel`].
pub trait Parallel: Sync {
    /// Threads that may run work at once (1: everything runs inline on the caller).
    fn num_threads(&self) -> usize;
    /// Calls `f` on disjoint ranges that together cover `0..n`, possibly several at once on
    /// different threads, and returns when every call has returned. The split is the
    /// implementation's choice: callers make `n` the number of independent tasks.
    fn parallel_for(&self, n: usize, f: &(dyn Fn(Range<usize>) + Sync));
}

/// Runs everything on the calling thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inline;

impl Parallel for Inline {
    fn num_threads(&self) -> usize {
        1
    }
    fn parallel_for(&self, n: usize, f: &(dyn Fn(Range<usize>) + Sync)) {
        if n > 0 {
            f(0..n);
        }
    }
}

/// The inline [`Parallel`], for contexts built without a thread pool.
pub static INLINE: Inline = Inline;
