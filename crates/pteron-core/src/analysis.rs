//! Use analysis: the method's kernel calls in chain order and how each value is referenced
//! (inputs, outputs, state, moves, jumps, delegate arguments, lists), recomputed before each
//! planning or partitioning pass.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::backend::DelegateHandle;
use crate::graph::{Call, Uses};
use crate::instr::{Code, Instr, Op};
use crate::source::PageRelease;
use crate::value::{ListPool, Storage, Tensor, Value};

/// The values a method exposes beyond its calls: inputs, outputs and stateful values (planned
/// tensors with initial contents that persist across runs).
#[derive(Clone, Copy)]
pub(crate) struct Boundary<'a> {
    pub inputs: &'a [u32],
    pub outputs: &'a [u32],
    pub stateful: &'a [usize],
}

/// The method's kernel calls in chain order and how each value is referenced (for load-time
/// planning and partitioning).
pub(crate) struct Analysis {
    pub calls: Vec<Call>,
    pub uses: Vec<Uses>,
    /// Chains that contain a JumpFalse.
    pub chain_jumps: Vec<bool>,
}

/// Analyses the calls of `chains` (arguments in `args`).
pub(crate) fn analyze_calls(
    values: &[Value<'_>],
    pool: &ListPool,
    args: &[u32],
    chains: &[Vec<Instr>],
    boundary: Boundary<'_>,
    delegates: &[Box<dyn DelegateHandle + '_>],
) -> Analysis {
    let (calls, chain_jumps) = kernel_calls(chains);
    let mut uses = call_references(values.len(), args, &calls);
    pin_boundary(&mut uses, boundary);
    pin_instruction_operands(&mut uses, args, chains, delegates);
    let return_list = tuple_returns(values, pool, args, &calls, &mut uses);
    pin_list_items(values, pool, &return_list, &mut uses);
    Analysis {
        calls,
        uses,
        chain_jumps,
    }
}

/// Every kernel call, in chain order, and where it sits; which chains contain a jump.
fn kernel_calls(chains: &[Vec<Instr>]) -> (Vec<Call>, Vec<bool>) {
    let mut calls: Vec<Call> = Vec::new();
    let mut chain_jumps = vec![false; chains.len()];
    for (c, chain) in chains.iter().enumerate() {
        for (pc, ins) in chain.iter().enumerate() {
            match *ins {
                Instr::Kernel { op, args: a, .. } => calls.push(Call {
                    chain: c as u32,
                    pc: pc as u32,
                    op,
                    args: a,
                }),
                Instr::JumpFalse { .. } => chain_jumps[c] = true,
                _ => {}
            }
        }
    }
    (calls, chain_jumps)
}

/// How each of `n` values is referenced by the calls.
fn call_references(n: usize, args: &[u32], calls: &[Call]) -> Vec<Uses> {
    let mut uses = vec![Uses::default(); n];
    let mut seen = vec![u32::MAX; n];
    for (k, call) in calls.iter().enumerate() {
        let a = &args[call.args.range()];
        for &v in a {
            if seen[v as usize] != k as u32 {
                seen[v as usize] = k as u32;
                let u = &mut uses[v as usize];
                if u.calls == 0 {
                    u.first = k as u32;
                }
                u.calls += 1;
                u.last = k as u32;
            }
        }
        if let Some(&last) = a.last() {
            uses[last as usize].returned_by += 1;
            uses[last as usize].producer = k as u32;
        }
    }
    uses
}

fn pin_boundary(uses: &mut [Uses], b: Boundary<'_>) {
    for &v in b.inputs {
        uses[v as usize].pinned = true;
    }
    for &v in b.outputs {
        uses[v as usize].pinned = true;
        uses[v as usize].observed = true;
    }
    for &v in b.stateful {
        uses[v].pinned = true;
        uses[v].observed = true;
    }
}

/// Values that moves, jumps and delegate calls read or write outside the kernel calls.
fn pin_instruction_operands(
    uses: &mut [Uses],
    args: &[u32],
    chains: &[Vec<Instr>],
    delegates: &[Box<dyn DelegateHandle + '_>],
) {
    // Kernel calls before the instruction, in `kernel_calls`' order.
    let mut calls_before: u32 = 0;
    for chain in chains.iter() {
        for ins in chain {
            match *ins {
                Instr::Kernel { .. } => calls_before = calls_before.saturating_add(1),
                Instr::Move { from, to } => {
                    uses[from as usize].pinned = true;
                    uses[to as usize].pinned = true;
                    uses[from as usize].observed = true;
                    uses[to as usize].observed = true;
                    uses[to as usize].written = true;
                }
                Instr::JumpFalse { cond, .. } => {
                    uses[cond as usize].pinned = true;
                    uses[cond as usize].observed = true;
                }
                // A delegate reads and writes its arguments outside the kernel calls.
                Instr::Delegate { index, args: a } => {
                    let handle = delegates.get(index as usize);
                    for (i, &v) in args[a.range()].iter().enumerate() {
                        let u = &mut uses[v as usize];
                        u.pinned = true;
                        u.written = true;
                        u.delegate_after = calls_before.saturating_add(1);
                        u.delegate_writes |= handle.and_then(|h| h.writes_arg(i)) == Some(true);
                    }
                }
                _ => {}
            }
        }
    }
}

/// Tuple returns: a tensor list that is only the return slot of one call makes its items
/// returned (and referenced) by that call. Returns which values are such lists.
fn tuple_returns(
    values: &[Value<'_>],
    pool: &ListPool,
    args: &[u32],
    calls: &[Call],
    uses: &mut [Uses],
) -> Vec<bool> {
    let n = values.len();
    let mut return_list = vec![false; n];
    for (k, call) in calls.iter().enumerate() {
        let a = &args[call.args.range()];
        let Some(&l) = a.last() else { continue };
        let (l, u) = (l as usize, uses[l as usize]);
        let Value::TensorList(r) = values[l] else {
            continue;
        };
        if u.calls != 1 || u.returned_by != 1 || u.pinned {
            continue;
        }
        return_list[l] = true;
        for &i in pool.indices.get(r.range()).unwrap_or(&[]) {
            let i = i as usize;
            if i >= n {
                continue;
            }
            if !a.contains(&(i as u32)) {
                uses[i].first = if uses[i].calls == 0 {
                    k as u32
                } else {
                    uses[i].first.min(k as u32)
                };
                uses[i].calls += 1;
                uses[i].last = uses[i].last.max(k as u32);
            }
            uses[i].returned_by += 1;
            uses[i].producer = k as u32;
        }
    }
    return_list
}

/// Items of a list that one call alone names (`cat`'s tensors) are referenced by that call;
/// items of any other list but a tuple return are pinned.
fn pin_list_items(values: &[Value<'_>], pool: &ListPool, return_list: &[bool], uses: &mut [Uses]) {
    for (l, v) in values.iter().enumerate() {
        if let Value::TensorList(r) | Value::OptionalTensorList(r) = v {
            if return_list[l] {
                continue;
            }
            let list = uses[l];
            let one_call = list.calls == 1 && !list.pinned && list.returned_by == 0;
            for &i in pool.indices.get(r.range()).unwrap_or(&[]) {
                let Some(u) = uses.get_mut(i as usize) else {
                    continue;
                };
                if one_call {
                    let k = list.first;
                    if u.calls == 0 {
                        (u.first, u.last) = (k, k);
                        u.calls = 1;
                    } else if u.last != k && u.first != k {
                        u.calls += 1;
                        (u.first, u.last) = (u.first.min(k), u.last.max(k));
                    }
                } else {
                    u.pinned = true;
                    u.observed = true;
                }
            }
        }
    }
}

/// What the partitioning and planning passes read of the method being loaded.
pub(crate) struct Pass<'a, 'p> {
    pub values: &'a [Value<'p>],
    pub pool: &'a ListPool,
    pub ops: &'a [Op],
    pub boundary: Boundary<'a>,
    pub num_threads: usize,
    /// Where the file pages of constants a kernel or partitioner copied are given back.
    pub release: Option<&'a dyn PageRelease>,
}

impl<'a, 'p> Pass<'a, 'p> {
    /// The use analysis of the method's code as it stands; `delegates` (the handles its
    /// delegate calls name, when they exist) tell which of their arguments they write.
    pub fn analyze(&self, code: &Code, delegates: &[Box<dyn DelegateHandle + '_>]) -> Analysis {
        analyze_calls(
            self.values,
            self.pool,
            &code.args,
            &code.chains,
            self.boundary,
            delegates,
        )
    }

    pub fn op_names(&self) -> Vec<&'a str> {
        self.ops.iter().map(|o| o.name.as_str()).collect()
    }

    /// Gives back the file pages of the constants among `read` (values a kernel or
    /// partitioner copied into a layout of its own; a later read pages them back in).
    pub fn release_constants(&self, read: impl IntoIterator<Item = usize>) {
        let Some(release) = self.release else { return };
        for vi in read {
            if let Some(Value::Tensor(Tensor {
                storage: Storage::Constant(b),
                ..
            })) = self.values.get(vi)
            {
                release.release(b);
            }
        }
    }
}
