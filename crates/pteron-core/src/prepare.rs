//! A kernel's optional `prepare` step, run once per call site when a method is loaded (the
//! planning stage that runs it is [`crate::plan`]).
//!
//! `prepare` sees the call's load-time arguments through a [`PrepareContext`]: argument kinds,
//! tensor metadata (planned sizes), scalars, and the bytes of *immutable constants* (file
//! tensors that no instruction can replace). It may return a [`Prepared`] state (packed
//! weights, a chosen variant) that the method owns and hands back to every run of that call
//! through [`crate::KernelContext::prepared`]. Two graph-level rewrites go through the same
//! step, always decided by the kernel and validated by the method:
//!
//! - **Absorbing a constant producer.** [`PrepareContext::producer`] shows the call that
//!   computes an argument from constants only (say `permute_copy(weight)` feeding `addmm`).
//!   A kernel that computes what it needs from the producer's constants itself (it packs the
//!   transposed weight) marks the argument [`Prepared::absorbing`]. When every reader of that
//!   value absorbs it, the producer call is removed from the method; otherwise each absorbing
//!   reader is prepared again with the producer hidden.
//! - **Fusing consumers.** [`PrepareContext::consumer`] shows the next instruction when it is
//!   the only reader of this call's output (say `batch_norm` after `convolution`, then
//!   `hardtanh`). A kernel that applies the consumers' work itself returns
//!   [`Prepared::fusing`]`(n)`: the method then makes the call write the last fused
//!   consumer's output and removes the `n` consumer calls.
//!
//! Execution stays allocation-free: states are built at load; each state may ask for scratch
//! bytes, and the method allocates one scratch buffer, the largest any call asked for, which
//! a run borrows with [`crate::KernelContext::take_scratch`].

use alloc::boxed::Box;
use core::any::Any;

use crate::error::KernelError;
use crate::graph::Graph;
use crate::kernel::{ArgAccess, TensorRef};
use crate::value::{ListPool, Storage, Value};

// The work-splitting interface used to live here.
pub use crate::parallel::{Inline, Parallel, INLINE};

/// A kernel's load-time step: `Ok(None)` when it has nothing to prepare for this call (the run
/// then gets no state and must handle the call on its own).
pub type PrepareFn =
    for<'a, 'p> fn(&PrepareContext<'a, 'p>) -> Result<Option<Prepared>, KernelError>;

/// Most argument positions [`Prepared::absorbing`] can name.
pub const MAX_ABSORBED_ARG: usize = 64;

/// Per-call-site state made by a kernel's `prepare`, owned by the method.
pub struct Prepared {
    pub(crate) state: Box<dyn Any + Send + Sync>,
    pub(crate) bytes: usize,
    pub(crate) scratch: usize,
    pub(crate) absorbs: u64,
    pub(crate) fuses: usize,
}

impl Prepared {
    /// A state holding `bytes` bytes of memory (packed weights; reported by the method).
    pub fn new<T: Any + Send + Sync>(state: T, bytes: usize) -> Self {
        Prepared {
            state: Box::new(state),
            bytes,
            scratch: 0,
            absorbs: 0,
            fuses: 0,
        }
    }
    /// The run needs `bytes` bytes of scratch memory (64-byte aligned) at most.
    pub fn with_scratch(mut self, bytes: usize) -> Self {
        self.scratch = bytes;
        self
    }
    /// This state covers argument `arg`'s producer (see [`PrepareContext::producer`]): the
    /// run will not read that argument's bytes.
    pub fn absorbing(mut self, arg: usize) -> Self {
        if arg < MAX_ABSORBED_ARG {
            self.absorbs |= 1 << arg;
        }
        self
    }
    /// The run computes the next `n` consumers' work too (see [`PrepareContext::consumer`]):
    /// the call will write the `n`-th consumer's output, and those calls are removed.
    pub fn fusing(mut self, n: usize) -> Self {
        self.fuses = n;
        self
    }
    /// Bytes of memory this state holds, as declared.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    pub fn scratch(&self) -> usize {
        self.scratch
    }
    pub fn fuses(&self) -> usize {
        self.fuses
    }
    pub(crate) fn absorbs_arg(&self, arg: usize) -> bool {
        arg < MAX_ABSORBED_ARG && self.absorbs & (1 << arg) != 0
    }
    /// The state as `T`, if that is its type.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.state.downcast_ref()
    }
}

/// Load-time view of one kernel call, for a kernel's `prepare`. Implements [`ArgAccess`]
/// (tensor metadata is the planned, upper-bound metadata).
#[derive(Clone, Copy)]
pub struct PrepareContext<'a, 'p> {
    pub(crate) graph: &'a Graph<'a, 'p>,
    pub(crate) call: usize,
    /// The call being prepared (differs from `call` on producer / consumer views).
    pub(crate) root: usize,
}

impl<'p> ArgAccess<'p> for PrepareContext<'_, 'p> {
    fn parts(&self) -> (&[Value<'p>], &ListPool, &[u32]) {
        (
            self.graph.values,
            self.graph.pool,
            self.graph.call_args(self.call),
        )
    }
}

impl<'a, 'p> PrepareContext<'a, 'p> {
    /// The operator this call runs (`aten::convolution.out`).
    pub fn op_name(&self) -> &'a str {
        self.graph.op_names[self.graph.calls[self.call].op as usize]
    }

    /// Threads the method's runs will have (for sizing per-thread scratch).
    pub fn num_threads(&self) -> usize {
        self.graph.num_threads
    }

    /// The bytes of argument `i` when it is an immutable constant tensor (stored in the file,
    /// never replaced by any instruction); `None` otherwise. The kernel is taken to copy what
    /// it needs (packing): once it is prepared, the constant's file pages may be released.
    pub fn constant(&self, i: usize) -> Option<TensorRef<'a>> {
        self.constant_with(i, true)
    }

    /// As [`constant`](Self::constant), for a kernel that will read the constant in place at
    /// every run (its file pages are kept).
    pub fn constant_in_place(&self, i: usize) -> Option<TensorRef<'a>> {
        self.constant_with(i, false)
    }

    fn constant_with(&self, i: usize, copied: bool) -> Option<TensorRef<'a>> {
        let vi = self.value_index(i).ok()?;
        if !self.graph.is_immutable_constant(vi) {
            return None;
        }
        if let (true, Some(log)) = (copied, self.graph.constants_read) {
            if let Ok(mut log) = log.try_borrow_mut() {
                log.push(vi);
            }
        }
        match &self.graph.values[vi] {
            Value::Tensor(t) => match t.storage {
                Storage::Constant(b) => Some(TensorRef {
                    info: &t.info,
                    bytes: b.get(..t.info.nbytes())?,
                }),
                _ => None,
            },
            _ => None,
        }
    }

    /// The call that computes argument `i` from immutable constants and static scalars only
    /// (its single producer, run before this call), as a view of that call's arguments. A
    /// kernel that takes what it needs from there marks `i` [`Prepared::absorbing`].
    pub fn producer(&self, i: usize) -> Option<PrepareContext<'a, 'p>> {
        let vi = self.value_index(i).ok()?;
        let p = self.graph.constant_producer(vi, self.call)?;
        Some(PrepareContext {
            graph: self.graph,
            call: p,
            root: p,
        })
    }

    /// The instruction right after this call, when it is the only other reader of this call's
    /// return value (the last argument), that value is not a method output, and the consumer's
    /// other tensors are constants or private to it. A kernel that computes the consumer's
    /// result itself returns [`Prepared::fusing`]; `consumer()` of the returned view looks one
    /// call further. (If the last fused consumer's output was planned over memory the prepared
    /// call reads, the method moves that output to memory of its own.)
    pub fn consumer(&self) -> Option<PrepareContext<'a, 'p>> {
        let n = self.graph.sole_consumer(self.call, self.root)?;
        Some(PrepareContext {
            graph: self.graph,
            call: n,
            root: self.root,
        })
    }
}

pub(crate) fn total_bytes(states: &[Prepared]) -> usize {
    states.iter().map(|s| s.bytes).sum()
}

pub(crate) fn max_scratch(states: &[Prepared]) -> usize {
    states.iter().map(|s| s.scratch).max().unwrap_or(0)
}
