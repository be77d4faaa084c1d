//! Load-time partitioning, the stage between instruction decoding and planning: a
//! [`Partitioner`] takes runs of consecutive kernel calls of a method and runs each as one
//! unit, as if the exporter had delegated it.
//!
//! A partitioner sees the method's calls through a [`CallGraph`] (each call as a
//! [`PrepareContext`]: operator name, arguments, constant bytes) and returns [`Region`]s: a
//! range of calls, the tensors the region reads from outside and those it must write for
//! instructions after it, and a [`DelegateHandle`] that computes them. The method checks every
//! region against its own use analysis (every tensor the calls read from outside is an input,
//! every value they write that anything else reads is an output, scalars are static) and then
//! replaces the calls by one delegate call over `inputs ++ outputs`. Values private to the
//! region are never written: their planned memory stays untouched.
//!
//! The layout of the data inside a region is the partitioner's business; this is how pteron
//! runs the convolution part of a portable program in channels-last order (see
//! `pteron-xnnpack`'s `nhwc` module) without the exporter's help.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::ops::Range;

use crate::analysis::{Analysis, Pass};
use crate::backend::DelegateHandle;
use crate::error::{Error, KernelError, Result};
use crate::graph::{Call, Graph};
use crate::instr::{Code, Delegates, Instr};
use crate::kernel::ArgView;
use crate::prepare::PrepareContext;
use crate::source::PageRelease;
use crate::value::Value;

/// Finds regions of a method's calls that it runs itself.
pub trait Partitioner: Send + Sync {
    /// Short name; the method names each region's delegate `"<name> region <i>"`.
    fn name(&self) -> &str;
    /// The regions to take, in call order and not overlapping. Errors fail the method load
    /// (a partitioner that cannot handle something leaves it out instead).
    fn partition<'p>(&self, calls: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError>;
}

/// Calls `calls` (indices into the [`CallGraph`]) run by `handle`, which is called with the
/// argument values `inputs ++ outputs`.
pub struct Region<'p> {
    pub calls: Range<usize>,
    pub inputs: Vec<usize>,
    pub outputs: Vec<usize>,
    pub handle: Box<dyn DelegateHandle + 'p>,
}

/// The method's kernel calls in execution order, for a [`Partitioner`].
pub struct CallGraph<'g, 'p> {
    pub(crate) graph: &'g Graph<'g, 'p>,
}

impl<'g, 'p> CallGraph<'g, 'p> {
    pub fn len(&self) -> usize {
        self.graph.calls.len()
    }
    pub fn is_empty(&self) -> bool {
        self.graph.calls.is_empty()
    }
    /// Call `k`: its operator, arguments and constants (`constant(i)` marks a constant the
    /// partitioner copied, so its file pages may be released once the region is taken).
    pub fn call(&self, k: usize) -> Option<PrepareContext<'g, 'p>> {
        (k < self.len()).then_some(PrepareContext {
            graph: self.graph,
            call: k,
            root: k,
        })
    }
    /// Call `k + 1` is the instruction right after call `k`, in a chain without jumps.
    pub fn follows(&self, k: usize) -> bool {
        let calls = self.graph.calls;
        match (calls.get(k), calls.get(k + 1)) {
            (Some(a), Some(b)) => {
                a.chain == b.chain
                    && b.pc == a.pc + 1
                    && !self
                        .graph
                        .chain_jumps
                        .get(a.chain as usize)
                        .copied()
                        .unwrap_or(true)
            }
            _ => false,
        }
    }
    /// Value `v` is read or written outside the calls `range` (by another call, or as a method
    /// input or output, a Move, a list item, mutable state or a delegate argument).
    pub fn used_outside(&self, v: usize, range: &Range<usize>) -> bool {
        let Some(u) = self.graph.uses.get(v) else {
            return true;
        };
        u.pinned
            || u.written
            || (u.calls > 0 && ((u.first as usize) < range.start || u.last as usize >= range.end))
    }
    /// The values calls `range` write that instructions after them may read, in the order
    /// written: those named outside the range (or observable: method outputs, state…), and
    /// those whose planned memory a value read after the range shares without any call
    /// writing it (the exporter plans some views as aliases of their base, with no
    /// instruction): for each such alias, the last value the range writes over it. Errors
    /// when an alias is only partly covered by what the range writes, or the range is too big
    /// to check.
    pub fn needed_outputs(&self, range: &Range<usize>) -> Result<Vec<usize>, KernelError> {
        needed_outputs(self.graph, range).map_err(KernelError::unsupported)
    }
    /// The value that calls `calls` wrote last over value `v`'s planned bytes, when `v` is a
    /// view that no call writes (the exporter plans some views as aliases of their base, with
    /// no instruction) and that value covers exactly the same bytes: inside a region, `v` is
    /// that value. `None` for anything else (a partial overlap included).
    pub fn alias_base(&self, v: usize, calls: Range<usize>) -> Option<usize> {
        alias_base(self.graph, v, calls)
    }
    /// The value call `k` returns: its last argument when that is a tensor, or the first item
    /// of a tuple return.
    pub fn output(&self, k: usize) -> Option<usize> {
        (k < self.len())
            .then(|| self.graph.primary_output(k))
            .flatten()
    }
    /// A tensor stored in the file that no instruction replaces.
    pub fn is_constant(&self, v: usize) -> bool {
        self.graph.is_immutable_constant(v)
    }
    pub fn value(&self, v: usize) -> Option<&'g Value<'p>> {
        self.graph.values.get(v)
    }
    /// Where to give back memory of constants the partitioner has copied and will not read
    /// again (e.g. the pages of the memory-mapped file), if the program has such memory.
    pub fn page_release(&self) -> Option<&'g dyn PageRelease> {
        self.graph.release
    }
    /// Threads the method's runs will have.
    pub fn num_threads(&self) -> usize {
        self.graph.num_threads
    }
    /// The checks the method makes on every region a partitioner returns (but the overlap
    /// with earlier regions): a partitioner that finds a region by pattern may leave out one
    /// that fails them, where returning it would fail the load.
    pub fn check(&self, region: &Region<'_>) -> Result<(), String> {
        check_region(self.graph, region, 0)
    }
}

/// The planned bytes of tensor `v`: (arena, start, end).
fn tensor_bytes(graph: &Graph<'_, '_>, v: usize) -> Option<(u32, usize, usize)> {
    let (a, off, _) = graph.planned(v)?;
    match graph.values.get(v)? {
        Value::Tensor(t) => Some((a, off, off.checked_add(t.info.nbytes())?)),
        _ => None,
    }
}

fn alias_base(graph: &Graph<'_, '_>, v: usize, calls: Range<usize>) -> Option<usize> {
    let u = graph.uses.get(v)?;
    if u.returned_by > 0 || u.written {
        return None;
    }
    let (a, lo, hi) = tensor_bytes(graph, v)?;
    if lo == hi {
        return None;
    }
    for k in calls.rev() {
        let Some(x) = graph.primary_output(k) else {
            continue;
        };
        let Some((xa, xlo, xhi)) = tensor_bytes(graph, x) else {
            continue;
        };
        if xa == a && xlo < hi && lo < xhi {
            return (xlo == lo && xhi == hi).then_some(x);
        }
    }
    None
}

/// Checks `region` against the method's use analysis; returns what is wrong.
pub(crate) fn check_region(
    graph: &Graph<'_, '_>,
    region: &Region<'_>,
    after: usize,
) -> Result<(), String> {
    let r = &region.calls;
    if r.start >= r.end || r.end > graph.calls.len() {
        return Err(format!(
            "call range {}..{} of {} calls",
            r.start,
            r.end,
            graph.calls.len()
        ));
    }
    if r.start < after {
        return Err(format!(
            "call range {}..{} overlaps an earlier region",
            r.start, r.end
        ));
    }
    let view = CallGraph { graph };
    if let Some(k) = (r.start..r.end - 1).find(|&k| !view.follows(k)) {
        return Err(format!("call {} does not follow call {k}", k + 1));
    }
    let n = graph.values.len();
    let mut role = vec![0u8; n]; // 1: input, 2: output
    for (list, tag) in [(&region.inputs, 1u8), (&region.outputs, 2u8)] {
        for &v in list {
            match graph.values.get(v) {
                Some(Value::Tensor(_)) if !graph.is_immutable_constant(v) => {}
                _ => return Err(format!("argument value {v} is not a non-constant tensor")),
            }
            if role[v] != 0 {
                return Err(format!("value {v} is named twice"));
            }
            role[v] = tag;
        }
    }
    let written_here = |v: usize| {
        let u = &graph.uses[v];
        u.returned_by > 0 && r.contains(&(u.producer as usize))
    };
    let mut written = vec![false; region.outputs.len()];
    for k in r.clone() {
        let mut check = |v: usize| -> Result<(), String> {
            match graph.values.get(v) {
                Some(Value::Tensor(_)) => {}
                Some(Value::TensorList(_) | Value::OptionalTensorList(_)) => {
                    return Err(format!("call {k} names tensor list {v}"));
                }
                Some(_) => {
                    let u = &graph.uses[v];
                    return if u.returned_by == 0 && !u.written {
                        Ok(())
                    } else {
                        Err(format!(
                            "call {k} reads value {v}, which changes at run time"
                        ))
                    };
                }
                None => return Err(format!("value {v} out of range")),
            }
            if graph.is_immutable_constant(v) {
                return Ok(());
            }
            let u = &graph.uses[v];
            if written_here(v) {
                if u.returned_by != 1 || role[v] == 1 {
                    return Err(format!("value {v} is written more than once"));
                }
                if view.used_outside(v, r) && role[v] != 2 {
                    return Err(format!(
                        "value {v} is read after the region but not an output"
                    ));
                }
                if let Some(i) = region.outputs.iter().position(|&o| o == v) {
                    written[i] = true;
                }
                Ok(())
            } else if role[v] == 1 {
                Ok(())
            } else if alias_base(graph, v, r.start..k).is_some_and(written_here) {
                // A view of a value the region wrote earlier: the region reads that value.
                Ok(())
            } else {
                Err(format!(
                    "call {k} reads value {v} from outside but it is not an input"
                ))
            }
        };
        let args = &graph.args[graph.calls[k].args.range()];
        for &a in args.iter() {
            let a = a as usize;
            if let Some(Value::TensorList(l)) = graph.values.get(a) {
                let u = &graph.uses[a];
                // A list named by this call alone: a tuple return (the last argument) or a
                // list of inputs (`cat`'s tensors); its items are checked as any argument.
                if u.calls != 1 || u.pinned {
                    return Err(format!("call {k} names tensor list {a}"));
                }
                for &item in graph.pool.indices.get(l.range()).unwrap_or(&[]) {
                    check(item as usize)?;
                }
            } else {
                check(a)?;
            }
        }
    }
    for v in needed_outputs(graph, r)? {
        if role[v] != 2 {
            return Err(format!(
                "value {v} is read after the region but not an output"
            ));
        }
    }
    if let Some(i) = written.iter().position(|w| !w) {
        return Err(format!(
            "output value {} is not written by the region",
            region.outputs[i]
        ));
    }
    Ok(())
}

/// Most values a region may write, and most aliases read after it, for the alias check.
const MAX_ALIAS_CHECK: usize = 1 << 12;

/// See [`CallGraph::needed_outputs`].
pub(crate) fn needed_outputs(
    graph: &Graph<'_, '_>,
    r: &Range<usize>,
) -> Result<Vec<usize>, String> {
    if r.start > r.end || r.end > graph.calls.len() {
        return Err(format!(
            "call range {}..{} of {} calls",
            r.start,
            r.end,
            graph.calls.len()
        ));
    }
    let view = CallGraph { graph };
    // Values the range writes, in call order: each call's return and its tuple items.
    let mut written: Vec<usize> = Vec::new();
    for k in r.clone() {
        let args = &graph.args[graph.calls[k].args.range()];
        let Some(&last) = args.last() else { continue };
        let mut push = |v: usize| {
            let u = &graph.uses[v];
            if u.returned_by > 0 && u.producer as usize == k && !written.contains(&v) {
                written.push(v);
            }
        };
        match graph.values.get(last as usize) {
            Some(Value::Tensor(_)) => push(last as usize),
            Some(Value::TensorList(l)) => {
                for &i in graph.pool.indices.get(l.range()).unwrap_or(&[]) {
                    if matches!(graph.values.get(i as usize), Some(Value::Tensor(_))) {
                        push(i as usize);
                    }
                }
            }
            _ => {}
        }
        if written.len() > MAX_ALIAS_CHECK {
            return Err(format!("more than {MAX_ALIAS_CHECK} values written"));
        }
    }
    let mut needed: Vec<bool> = written.iter().map(|&v| view.used_outside(v, r)).collect();
    // Aliases: tensors read after the range that no call writes.
    let bytes = |v: usize| tensor_bytes(graph, v);
    let mut aliases = 0;
    for (w, u) in graph.uses.iter().enumerate() {
        let read_after = u.observed
            || u.delegate_after as usize > r.end
            || (u.calls > 0 && u.last as usize >= r.end);
        // Written by a call or a delegate: not a view planned without an instruction.
        if u.returned_by > 0 || u.delegate_writes || !read_after {
            continue;
        }
        let Some((a, lo, hi)) = bytes(w) else {
            continue;
        };
        if lo == hi {
            continue;
        }
        aliases += 1;
        if aliases > MAX_ALIAS_CHECK {
            return Err(format!(
                "more than {MAX_ALIAS_CHECK} aliases read after the range"
            ));
        }
        // The last value written over any of `w`'s bytes must cover all of them.
        let last =
            written.iter().enumerate().rev().find(|(_, &x)| {
                bytes(x).is_some_and(|(xa, xlo, xhi)| xa == a && xlo < hi && lo < xhi)
            });
        if let Some((i, &x)) = last {
            match bytes(x) {
                Some((_, xlo, xhi)) if xlo <= lo && hi <= xhi => needed[i] = true,
                _ => return Err(format!("value {w} is only partly written by value {x}")),
            }
        }
    }
    Ok(written
        .into_iter()
        .zip(needed)
        .filter_map(|(v, n)| n.then_some(v))
        .collect())
}

/// The partitioning stage: offers the method's calls to each partitioner in turn and
/// replaces the regions it takes by delegate calls (appended to `delegates`). Returns
/// (regions, calls replaced).
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn partition_calls<'p>(
    pass: &Pass<'_, 'p>,
    code: &mut Code,
    partitioners: &[Arc<dyn Partitioner>],
    delegates: &mut Delegates<'p>,
) -> Result<(usize, usize)> {
    let (mut regions, mut replaced) = (0, 0);
    let op_names = pass.op_names();
    for p in partitioners {
        let Analysis {
            calls,
            uses,
            chain_jumps,
        } = pass.analyze(code, &delegates.handles);
        let hidden = vec![false; pass.values.len()];
        let constants_read = RefCell::new(Vec::new());
        let graph = Graph {
            values: pass.values,
            pool: pass.pool,
            args: &code.args,
            calls: &calls,
            op_names: &op_names,
            uses: &uses,
            chain_jumps: &chain_jumps,
            hidden: &hidden,
            num_threads: pass.num_threads,
            constants_read: Some(&constants_read),
            release: pass.release,
        };
        let taken = p
            .partition(&CallGraph { graph: &graph })
            .map_err(|source| Error::Delegate {
                delegate: format!("{} partitioner", p.name()),
                source,
            })?;
        let edits = checked_regions(&graph, p.name(), delegates.len(), taken)?;
        for (name, region) in edits {
            replaced += region.calls.len();
            regions += 1;
            take_region(pass, code, &calls, delegates, name, region)?;
        }
        // The partitioner copied these constants into its own layout.
        pass.release_constants(constants_read.into_inner());
    }
    Ok((regions, replaced))
}

/// Checks every region a partitioner returned and names each (`"<partitioner> region <i>"`,
/// `i` counting on from the `first` delegate index).
fn checked_regions<'p>(
    graph: &Graph<'_, '_>,
    partitioner: &str,
    first: usize,
    taken: Vec<Region<'p>>,
) -> Result<Vec<(String, Region<'p>)>> {
    let mut after = 0;
    let mut edits = Vec::with_capacity(taken.len());
    for (i, region) in taken.into_iter().enumerate() {
        let name = format!("{partitioner} region {}", first + i);
        check_region(graph, &region, after).map_err(|m| Error::Delegate {
            delegate: name.clone(),
            source: KernelError::invalid(m),
        })?;
        after = region.calls.end;
        edits.push((name, region));
    }
    Ok(edits)
}

/// Replaces the region's calls by one delegate call over `inputs ++ outputs` (the first call)
/// and no-ops (the others), once its handle accepts that argument span.
fn take_region<'p>(
    pass: &Pass<'_, 'p>,
    code: &mut Code,
    calls: &[Call],
    delegates: &mut Delegates<'p>,
    name: String,
    region: Region<'p>,
) -> Result<()> {
    let r = code.push_args(
        region
            .inputs
            .iter()
            .chain(&region.outputs)
            .map(|&v| v as u32),
    );
    let view = ArgView {
        values: pass.values,
        pool: pass.pool,
        args: &code.args[r.range()],
    };
    region
        .handle
        .check(&view)
        .map_err(|source| Error::Delegate {
            delegate: name.clone(),
            source,
        })?;
    for k in region.calls.clone() {
        let c = calls[k];
        code.chains[c.chain as usize][c.pc as usize] = if k == region.calls.start {
            Instr::Delegate {
                index: delegates.len() as u32,
                args: r,
            }
        } else {
            Instr::Nop
        };
    }
    delegates.push(name, region.handle);
    Ok(())
}
