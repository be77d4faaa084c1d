//! The method's kernel calls and how each value is referenced, as load-time planning and
//! partitioning see them: the questions [`crate::PrepareContext`] and [`crate::CallGraph`]
//! answer (constant producers, sole consumers, planned memory overlaps).

use core::cell::RefCell;

use alloc::vec::Vec;

use crate::source::PageRelease;
use crate::value::{ListPool, ListRef, Storage, Value};

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
    /// Pinned for a reason other than being a method input or a delegate argument: its
    /// contents are read outside the calls that name it (method output, Move, jump
    /// condition, list item, state).
    pub observed: bool,
    /// Delegate calls name it: 1 + the number of kernel calls before the last of them (0:
    /// none), so that a region of calls before that delegate knows the value is read later.
    pub delegate_after: u32,
    /// A delegate call writes it (as its handle reports).
    pub delegate_writes: bool,
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
    pub constants_read: Option<&'g RefCell<Vec<usize>>>,
    /// Where memory a partitioner no longer needs is given back (see [`crate::partition`]).
    pub release: Option<&'g dyn PageRelease>,
}

impl<'p> Graph<'_, 'p> {
    pub(crate) fn call_args(&self, c: usize) -> &[u32] {
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
    pub(crate) fn is_static_scalar(&self, v: usize) -> bool {
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
    pub(crate) fn constant_producer(&self, v: usize, reader: usize) -> Option<usize> {
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
