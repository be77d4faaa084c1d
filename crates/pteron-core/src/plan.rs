//! Load-time planning, the stage after partitioning: runs every kernel's `prepare` over its
//! call site (see [`crate::prepare`]), removes constant producers that their readers absorbed
//! and consumers that their producer fused, rewrites the fused calls to write their last
//! consumer's output, and gives such outputs planned over their producer's inputs memory of
//! their own.

use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

use crate::analysis::{Analysis, Pass};
use crate::config::MethodConfig;
use crate::error::{Error, KernelError, Result};
use crate::graph::{Call, Graph, Uses};
use crate::instr::{Code, Instr};
use crate::memory::{Arena, ARENA_ALIGN};
use crate::prepare::{self, PrepareContext, Prepared};
use crate::value::{ListPool, Storage, Value};

/// What load-time planning did to a method (see [`crate::prepare`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Calls that have prepared state.
    pub prepared_calls: usize,
    /// Bytes held by prepared states (packed weights and the like).
    pub prepared_bytes: usize,
    /// Bytes of the scratch buffer shared by all calls.
    pub scratch_bytes: usize,
    /// Calls removed because their consumers absorbed them (constant producers).
    pub absorbed_calls: usize,
    /// Calls removed because their producer fused them.
    pub fused_calls: usize,
    /// Bytes of memory given to fused outputs whose planned memory overlapped their new
    /// producer's inputs.
    pub rehomed_bytes: usize,
    /// Regions a partitioner took (see [`crate::partition`]), and the calls they replaced.
    pub regions: usize,
    pub partitioned_calls: usize,
}

/// The result of [`plan_calls`]: the states (indexed by the `state` of each kernel
/// instruction), what was done, and the values given memory of their own.
#[derive(Default)]
pub(crate) struct Planned {
    pub states: Vec<Prepared>,
    pub stats: PlanStats,
    /// (value, offset in the extra arena) for values given memory of their own.
    pub homes: Vec<(usize, usize)>,
    pub arena_bytes: usize,
}

impl Planned {
    /// Allocates the extra arena of the rehomed values (appended to `arenas`) and moves them
    /// there; then the scratch buffer every call shares.
    // A load stage, called once: not inlined, which keeps firmware smaller (size_test).
    #[inline(never)]
    pub fn place<'m>(
        &self,
        values: &mut [Value<'_>],
        arenas: &mut Vec<Arena<'m>>,
        config: &MethodConfig,
    ) -> Result<Arena<'m>> {
        if !self.homes.is_empty() {
            let id = arenas.len() as u32;
            arenas.push(Arena::new(self.arena_bytes).ok_or(Error::ResourceLimit {
                what: "bytes of planned memory (allocation failed)",
                requested: self.arena_bytes as u64,
                limit: config.max_planned_bytes,
            })?);
            for &(v, offset) in &self.homes {
                if let Value::Tensor(t) = &mut values[v] {
                    t.storage = Storage::Planned { arena: id, offset };
                }
            }
        }
        let scratch = self.stats.scratch_bytes;
        if scratch as u64 > config.max_planned_bytes {
            return Err(Error::ResourceLimit {
                what: "bytes of scratch memory",
                requested: scratch as u64,
                limit: config.max_planned_bytes,
            });
        }
        Arena::new(scratch).ok_or(Error::ResourceLimit {
            what: "bytes of scratch memory (allocation failed)",
            requested: scratch as u64,
            limit: config.max_planned_bytes,
        })
    }
}

/// The planning stage over the method's code (see the module documentation).
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn plan_calls(pass: &Pass<'_, '_>, code: &mut Code) -> Result<Planned> {
    if !pass.ops.iter().any(|o| o.kernel.prepare.is_some()) {
        return Ok(Planned::default());
    }
    let analysis = pass.analyze(code, &[]);
    let Rounds {
        states,
        fused_into,
        absorbed,
    } = prepare_until_stable(pass, &code.args, &analysis)?;
    let rehome = rewrite_fused(pass, &mut code.args, &analysis, &states, &fused_into);
    let (kept, mut stats) = remove_calls(&analysis.calls, states, &fused_into, &absorbed, code);
    let (homes, arena_bytes) = rehome_values(pass.values, code, &analysis, &rehome);
    stats.rehomed_bytes = arena_bytes;
    Ok(Planned {
        states: kept,
        stats,
        homes,
        arena_bytes,
    })
}

/// The outcome of preparing every call: each call's state, the call each fused call was
/// fused into, and the constant producers every reader absorbed.
struct Rounds {
    states: Vec<Option<Prepared>>,
    fused_into: Vec<Option<usize>>,
    absorbed: Vec<bool>,
}

/// Prepares every call; repeats with constant producers hidden where not every reader
/// absorbed them (hiding only grows, so this ends).
fn prepare_until_stable(pass: &Pass<'_, '_>, args: &[u32], a: &Analysis) -> Result<Rounds> {
    let op_names = pass.op_names();
    let mut hidden = vec![false; pass.values.len()];
    let constants_read = RefCell::new(Vec::new());
    loop {
        let graph = Graph {
            values: pass.values,
            pool: pass.pool,
            args,
            calls: &a.calls,
            op_names: &op_names,
            uses: &a.uses,
            chain_jumps: &a.chain_jumps,
            hidden: &hidden,
            num_threads: pass.num_threads,
            constants_read: Some(&constants_read),
            release: None,
        };
        let (states, fused_into) = prepare_round(pass, &graph, &constants_read)?;
        let (absorbed, newly_hidden) = absorbed_producers(&graph, &states, &fused_into);
        if newly_hidden.is_empty() {
            return Ok(Rounds {
                states,
                fused_into,
                absorbed,
            });
        }
        for v in newly_hidden {
            hidden[v] = true;
        }
    }
}

/// Runs `prepare` once over every call not fused into an earlier one. Returns the states and,
/// for each call fused into an earlier one, that call.
#[allow(clippy::type_complexity)]
fn prepare_round(
    pass: &Pass<'_, '_>,
    graph: &Graph<'_, '_>,
    constants_read: &RefCell<Vec<usize>>,
) -> Result<(Vec<Option<Prepared>>, Vec<Option<usize>>)> {
    let calls = graph.calls;
    let mut states: Vec<Option<Prepared>> = (0..calls.len()).map(|_| None).collect();
    let mut fused_into: Vec<Option<usize>> = vec![None; calls.len()];
    for k in 0..calls.len() {
        if fused_into[k].is_some() {
            continue;
        }
        let op = &pass.ops[calls[k].op as usize];
        let Some(prep) = op.kernel.prepare else {
            continue;
        };
        let ctx = PrepareContext {
            graph,
            call: k,
            root: k,
        };
        let failed = |source: KernelError| Error::PrepareFailed {
            op: op.name.clone(),
            instruction: calls[k].pc as usize,
            source,
        };
        let state = prep(&ctx).map_err(failed)?;
        let read = constants_read
            .try_borrow_mut()
            .map(|mut log| core::mem::take(&mut *log))
            .unwrap_or_default();
        let Some(state) = state else { continue };
        // The constants this kernel packed: their file pages are not needed any more.
        pass.release_constants(read);
        let mut cur = k;
        for _ in 0..state.fuses {
            cur = graph.sole_consumer(cur, k).ok_or_else(|| {
                failed(KernelError::invalid(
                    "it fused a consumer that cannot be fused",
                ))
            })?;
            fused_into[cur] = Some(k);
        }
        states[k] = Some(state);
    }
    Ok((states, fused_into))
}

/// Constant producers whose every reader absorbed them (removed), and the values of those
/// that only some readers absorbed (to hide from the producer view in the next round).
fn absorbed_producers(
    graph: &Graph<'_, '_>,
    states: &[Option<Prepared>],
    fused_into: &[Option<usize>],
) -> (Vec<bool>, Vec<usize>) {
    let calls = graph.calls;
    let mut absorbed = vec![false; calls.len()];
    let mut newly_hidden = Vec::new();
    for p in 0..calls.len() {
        if fused_into[p].is_some()
            || states[p].as_ref().is_some_and(|s| s.fuses > 0)
            || !graph.is_constant_call(p)
        {
            continue;
        }
        let Some(v) = graph.last_value(p) else {
            continue;
        };
        if graph.hidden[v] {
            continue;
        }
        let mut all = true;
        let mut any = false;
        for (k, call) in calls.iter().enumerate() {
            if k == p {
                continue;
            }
            let a = &graph.args[call.args.range()];
            if !a.contains(&(v as u32)) {
                continue;
            }
            let ok = fused_into[k].is_none()
                && states[k].as_ref().is_some_and(|s| {
                    a.iter()
                        .enumerate()
                        .filter(|(_, &x)| x as usize == v)
                        .all(|(i, _)| s.absorbs_arg(i))
                });
            if ok {
                any = true;
            } else {
                all = false;
            }
        }
        // At least one reader must have absorbed it: a call whose output no instruction
        // reads by value may still write memory that another value aliases (the memory
        // plan can give several values one buffer), so it stays.
        if all && any {
            absorbed[p] = true;
        } else if any {
            newly_hidden.push(v);
        }
    }
    (absorbed, newly_hidden)
}

/// Fused calls write their last consumer's output. Returns the outputs planned over memory
/// their new producer reads (they get memory of their own).
fn rewrite_fused(
    pass: &Pass<'_, '_>,
    args: &mut [u32],
    a: &Analysis,
    states: &[Option<Prepared>],
    fused_into: &[Option<usize>],
) -> Vec<usize> {
    let calls = &a.calls;
    let mut rehome: Vec<usize> = Vec::new();
    for k in 0..calls.len() {
        let Some(s) = &states[k] else { continue };
        if s.fuses == 0 {
            continue;
        }
        let range = calls[k].args.range();
        let graph = bare_graph(pass.values, pass.pool, args, calls, &a.uses);
        let Some(old) = graph.primary_output(k) else {
            continue;
        };
        let last = (k + 1..calls.len())
            .rev()
            .find(|&j| fused_into[j] == Some(k))
            .unwrap_or(k);
        let Some(new) = graph.primary_output(last) else {
            continue;
        };
        if graph.overlaps_args(new, k, old) {
            rehome.push(new);
        }
        for a in &mut args[range] {
            if *a as usize == old {
                *a = new as u32;
            }
        }
    }
    rehome
}

/// A [`Graph`] for questions outside a preparation round (no names, hiding or logging).
fn bare_graph<'g, 'p>(
    values: &'g [Value<'p>],
    pool: &'g ListPool,
    args: &'g [u32],
    calls: &'g [Call],
    uses: &'g [Uses],
) -> Graph<'g, 'p> {
    Graph {
        values,
        pool,
        args,
        calls,
        op_names: &[],
        uses,
        chain_jumps: &[],
        hidden: &[],
        num_threads: 1,
        constants_read: None,
        release: None,
    }
}

/// Turns fused and absorbed calls into no-ops and gives every other prepared call its state's
/// index. Returns the states kept and the statistics so far.
fn remove_calls(
    calls: &[Call],
    states: Vec<Option<Prepared>>,
    fused_into: &[Option<usize>],
    absorbed: &[bool],
    code: &mut Code,
) -> (Vec<Prepared>, PlanStats) {
    let mut stats = PlanStats::default();
    let mut kept = Vec::new();
    for (k, (call, state)) in calls.iter().zip(states).enumerate() {
        let ins = &mut code.chains[call.chain as usize][call.pc as usize];
        if fused_into[k].is_some() {
            *ins = Instr::Nop;
            stats.fused_calls += 1;
        } else if absorbed[k] {
            *ins = Instr::Nop;
            stats.absorbed_calls += 1;
        } else if let (Some(state), Instr::Kernel { state: slot, .. }) = (state, ins) {
            *slot = kept.len() as u32;
            kept.push(state);
        }
    }
    stats.prepared_calls = kept.len();
    stats.prepared_bytes = prepare::total_bytes(&kept);
    stats.scratch_bytes = prepare::max_scratch(&kept);
    (kept, stats)
}

/// Places the `rehome` values in one extra arena, sharing bytes between values whose
/// lifetimes (first to last instruction naming them, in execution order) do not overlap.
fn rehome_values(
    values: &[Value<'_>],
    code: &Code,
    a: &Analysis,
    rehome: &[usize],
) -> (Vec<(usize, usize)>, usize) {
    if rehome.is_empty() {
        return (Vec::new(), 0);
    }
    // Global position of each call.
    let mut base = Vec::with_capacity(code.chains.len());
    let mut total = 0usize;
    for c in &code.chains {
        base.push(total);
        total += c.len();
    }
    let pos = |c: &Call| base[c.chain as usize] + c.pc as usize;
    let mut items: Vec<(usize, usize, usize, usize)> = Vec::new(); // (start, end, value, size)
    for &v in rehome {
        let Value::Tensor(t) = &values[v] else {
            continue;
        };
        let mut start = usize::MAX;
        let mut end = 0;
        for c in &a.calls {
            if code.args[c.args.range()].contains(&(v as u32)) {
                start = start.min(pos(c));
                end = end.max(pos(c));
            }
        }
        if a.uses[v].pinned || start == usize::MAX {
            // Observable outside the calls (or never named): live throughout.
            start = 0;
            end = usize::MAX;
        }
        let size = t.capacity.div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        items.push((start, end, v, size));
    }
    heap_sort(&mut items);
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::new(); // (offset, size, start, end)
    let mut homes = Vec::new();
    let mut arena = 0usize;
    for &(start, end, v, size) in &items {
        // Lowest offset not overlapping a placed value whose lifetime overlaps this one.
        let mut live: Vec<(usize, usize)> = placed
            .iter()
            .filter(|p| p.2 <= end && start <= p.3)
            .map(|p| (p.0, p.1))
            .collect();
        heap_sort(&mut live);
        let mut off = 0;
        for (o, s) in live {
            if off + size <= o {
                break;
            }
            off = off.max(o + s);
        }
        placed.push((off, size, start, end));
        homes.push((v, off));
        arena = arena.max(off + size);
    }
    (homes, arena)
}

/// Sorts in place (heap sort): a few hundred bytes of code where the standard library's sorts
/// cost kilobytes for each element type. It runs once per load, and on a microcontroller the
/// runtime's flash is the budget.
fn heap_sort<T: Ord + Copy>(v: &mut [T]) {
    let n = v.len();
    for root in (0..n / 2).rev() {
        sift_down(v, root, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end);
    }
}

/// Moves `v[root]` down the max-heap held in `v[..end]` until both its children are smaller.
fn sift_down<T: Ord + Copy>(v: &mut [T], mut root: usize, end: usize) {
    loop {
        // root < end <= isize::MAX (a slice length), so 2 * root + 1 fits in a usize.
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && v[child] < v[child + 1] {
            child += 1;
        }
        if v[root] >= v[child] {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

#[cfg(test)]
mod tests {
    use super::heap_sort;
    use alloc::vec::Vec;

    #[test]
    fn heap_sort_orders_like_the_standard_sort() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for len in 0..70 {
            let mut v: Vec<(usize, usize)> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    ((state % 7) as usize, (state >> 32) as usize % 5)
                })
                .collect();
            let mut expected = v.clone();
            expected.sort();
            heap_sort(&mut v);
            assert_eq!(v, expected, "length {len}");
        }
    }
}
