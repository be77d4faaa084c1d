//! Load-time planning: a kernel's optional `prepare` step, run once per call site when a method
//! is loaded, and the work-splitting interface kernels use at run time.
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
use core::ops::Range;

use crate::error::KernelError;
use crate::kernel::{ArgAccess, TensorRef};
use crate::value::{ListPool, ListRef, Storage, Value};

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

/// One kernel call of the method, as the planner sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub chain: u32,
    pub pc: u32,
    pub op: u32,
    pub args: ListRef,
}

/// How a value is referenced by the method, beyond kernel arguments.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Uses {
    /// Kernel calls referencing it (a call naming it twice counts once).
    pub calls: u32,
    /// Kernel calls whose last argument (the return slot) it is.
    pub returned_by: u32,
    /// The last such call.
    pub producer: u32,
    /// Method input or output, Move source/target, jump condition, list item, or mutable state:
    /// its contents are observable or set outside the calls that name it.
    pub pinned: bool,
    /// Pinned for a reason other than being a method input: its contents are read outside
    /// the calls that name it (method output, Move, jump condition, list item, state,
    /// delegate argument).
    pub observed: bool,
    /// Target of a Move (a scalar or tensor that can change at run time).
    pub written: bool,
    /// The first and last calls referencing it (meaningful when `calls > 0`).
    pub first: u32,
    pub last: u32,
}

/// The method's calls and value references, for [`PrepareContext`].
pub(crate) struct Graph<'g, 'p> {
    pub values: &'g [Value<'p>],
    pub pool: &'g ListPool,
    pub args: &'g [u32],
    pub calls: &'g [Call],
    pub op_names: &'g [&'g str],
    pub uses: &'g [Uses],
    /// Chains that contain a JumpFalse (no fusion across their instructions).
    pub chain_jumps: &'g [bool],
    /// Values whose producer is hidden from [`PrepareContext::producer`].
    pub hidden: &'g [bool],
    pub num_threads: usize,
    /// Where [`PrepareContext::constant`] logs the values it hands out (for releasing the
    /// file pages of constants a kernel packed).
    pub constants_read: Option<&'g core::cell::RefCell<Vec<usize>>>,
    /// Where memory a partitioner no longer needs is given back (see [`crate::partition`]).
    pub release: Option<&'g dyn crate::method::PageRelease>,
}

impl<'p> Graph<'_, 'p> {
    fn call_args(&self, c: usize) -> &[u32] {
        &self.args[self.calls[c].args.range()]
    }

    pub(crate) fn last_value(&self, c: usize) -> Option<usize> {
        self.call_args(c).last().map(|&v| v as usize)
    }

    /// The value call `c` returns: its last argument when that is a tensor, or the first item
    /// of a tuple return (a tensor list that only this call names).
    pub(crate) fn primary_output(&self, c: usize) -> Option<usize> {
        let last = self.last_value(c)?;
        match self.values.get(last)? {
            Value::Tensor(_) => Some(last),
            Value::TensorList(r) if self.uses[last].calls == 1 && !self.uses[last].pinned => self
                .pool
                .indices
                .get(r.range())?
                .first()
                .map(|&i| i as usize)
                .filter(|&i| matches!(self.values.get(i), Some(Value::Tensor(_)))),
            _ => None,
        }
    }

    /// A tensor in a file constant that no instruction replaces.
    pub fn is_immutable_constant(&self, v: usize) -> bool {
        matches!(self.values.get(v), Some(Value::Tensor(t)) if matches!(t.storage, Storage::Constant(_)))
            && self.uses[v].returned_by == 0
            && !self.uses[v].written
    }

    /// A scalar (or list of scalars) that no instruction changes.
    fn is_static_scalar(&self, v: usize) -> bool {
        let u = &self.uses[v];
        if u.returned_by != 0 || u.written {
            return false;
        }
        match self.values.get(v) {
            Some(Value::None | Value::Int(_) | Value::Double(_) | Value::Bool(_))
            | Some(Value::String(_) | Value::DoubleList(_) | Value::BoolList(_)) => true,
            Some(Value::IntList(r)) => self.pool.indices.get(r.range()).is_some_and(|items| {
                items.iter().all(|&i| {
                    let u = &self.uses[i as usize];
                    u.returned_by == 0 && !u.written
                })
            }),
            _ => false,
        }
    }

    pub(crate) fn planned(&self, v: usize) -> Option<(u32, usize, usize)> {
        match self.values.get(v) {
            Some(Value::Tensor(t)) => match t.storage {
                Storage::Planned { arena, offset } => Some((arena, offset, t.capacity)),
                _ => None,
            },
            _ => None,
        }
    }

    /// Call `c` computes its return value from immutable constants and static scalars only.
    pub fn is_constant_call(&self, c: usize) -> bool {
        let Some(out) = self.last_value(c) else {
            return false;
        };
        let u = &self.uses[out];
        if self.planned(out).is_none() || u.pinned || u.returned_by != 1 {
            return false;
        }
        self.call_args(c).iter().all(|&a| {
            let a = a as usize;
            a == out
                || match self.values.get(a) {
                    Some(Value::Tensor(_)) => self.is_immutable_constant(a),
                    _ => self.is_static_scalar(a),
                }
        })
    }

    /// The call computing value `v` from constants, if there is exactly one and it comes before
    /// call `reader` (same chain, earlier, or an earlier chain).
    fn constant_producer(&self, v: usize, reader: usize) -> Option<usize> {
        if self.hidden.get(v).copied().unwrap_or(true) {
            return None;
        }
        let u = self.uses.get(v)?;
        if u.returned_by != 1 {
            return None;
        }
        let p = u.producer as usize;
        let (pc, rc) = (self.calls[p], self.calls[reader]);
        let before = pc.chain < rc.chain || (pc.chain == rc.chain && pc.pc < rc.pc);
        (p != reader && before && self.is_constant_call(p)).then_some(p)
    }

    /// The next call after `c`, when it is the only other reader of `c`'s return value and
    /// fusing it into `root` is safe (see [`PrepareContext::consumer`]).
    pub(crate) fn sole_consumer(&self, c: usize, root: usize) -> Option<usize> {
        let v = self.primary_output(c)?;
        let n = c + 1;
        let (cc, nc) = (self.calls[c], *self.calls.get(n)?);
        if self.chain_jumps[cc.chain as usize] || nc.chain != cc.chain || nc.pc != cc.pc + 1 {
            return None;
        }
        let uv = &self.uses[v];
        if self.planned(v).is_none() || uv.pinned || uv.calls != 2 || uv.returned_by != 1 {
            return None;
        }
        let nargs = self.call_args(n);
        if !nargs.contains(&(v as u32)) {
            return None;
        }
        let u = self.primary_output(n)?;
        let ret = *nargs.last()? as usize;
        let uu = &self.uses[u];
        if u == v || self.planned(u).is_none() || uu.returned_by != 1 || uu.written {
            return None;
        }
        // The consumer's other non-constant tensors must be private to it (extra outputs that
        // nobody reads, such as batch norm's saved statistics).
        let private = |a: usize| -> bool {
            if a == v || a == u {
                return true;
            }
            match self.values.get(a) {
                Some(Value::Tensor(_)) => {
                    self.is_immutable_constant(a) || {
                        let ua = &self.uses[a];
                        ua.calls == 1 && !ua.pinned
                    }
                }
                _ => false,
            }
        };
        for &a in nargs {
            let a = a as usize;
            if a == v || a == u {
                continue;
            }
            if a == ret && a != u {
                // A tuple return: every item but the first must be private.
                let Some(Value::TensorList(r)) = self.values.get(a) else {
                    return None;
                };
                if !self
                    .pool
                    .indices
                    .get(r.range())?
                    .iter()
                    .all(|&i| private(i as usize))
                {
                    return None;
                }
                continue;
            }
            if let Some(Value::Tensor(_)) = self.values.get(a) {
                if !self.is_immutable_constant(a) {
                    let ua = &self.uses[a];
                    if ua.calls != 1 || ua.pinned {
                        return None;
                    }
                }
            } else if !self.is_static_scalar(a) {
                return None;
            }
        }
        // The root call will write `u`; if `u`'s planned memory overlaps the root's inputs, the
        // method gives `u` memory of its own (see `plan_calls`).
        self.primary_output(root)?;
        Some(n)
    }

    /// Whether value `u`'s planned bytes overlap those of any tensor argument of call `c`
    /// other than `except`.
    pub(crate) fn overlaps_args(&self, u: usize, c: usize, except: usize) -> bool {
        let Some((ua, uo, ucap)) = self.planned(u) else {
            return false;
        };
        self.call_args(c).iter().any(|&a| {
            let a = a as usize;
            a != except
                && a != u
                && self
                    .planned(a)
                    .is_some_and(|(aa, ao, acap)| aa == ua && ao < uo + ucap && uo < ao + acap)
        })
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
