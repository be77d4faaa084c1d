//! Blocks: runs of portable calls that together compute something known, found at load
//! time and run as one kernel: the interleaved rotary embedding ([`rope`]), RMSNorm
//! ([`norm`]) and the SiLU gate of a Llama MLP ([`gate`]).
//!
//! An exported decoder layer spends most of its small calls on such blocks: the rotary
//! embedding of the queries and keys alone is 26 calls (slices, squeezes, eight products, a
//! difference and a sum, unsqueezes, concatenations) over a few hundred floats, each costing
//! far more to dispatch than to compute. [`BlockPartitioner`] matches the calls against each
//! block's pattern; when every call of a run is part of a block and nothing after the run
//! reads an intermediate value, the run becomes one region whose kernel computes each
//! block's result directly, with the same float operations in the same order as the calls'
//! kernels (so the same bits). Anything it does not recognise stays with the portable calls.
//!
//! A region's kernel first copies its inputs: the exporter may have planned a result over the
//! bytes of any input the calls had finished reading.

mod gate;
mod norm;
mod rope;

use std::cell::RefCell;
use std::ops::Range;
use std::vec::Vec;

use pteron_core::{
    ArgAccess, CallGraph, KernelContext, KernelError, Partitioner, PrepareContext, Region,
    ScalarType, TensorInfo, Value,
};

/// Finds the blocks of this module in a method's calls (see the module's description).
#[derive(Debug, Default, Clone, Copy)]
pub struct BlockPartitioner;

impl Partitioner for BlockPartitioner {
    fn name(&self) -> &str {
        "blocks"
    }

    fn partition<'p>(&self, g: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError> {
        let mut regions = Vec::new();
        let mut k = 0;

        while k < g.len() {
            let found = rope::find(g, k)
                .or_else(|| norm::find(g, k))
                .or_else(|| gate::find(g, k));
            match found {
                Some(r) => {
                    k = r.calls.end;
                    regions.push(r);
                }
                None => k += 1,
            }
        }
        Ok(regions)
    }
}

/// Calls `k .. k + n` when they follow each other in one chain, run `ops` in that order and
/// each return float32 (no rounding to another type on the way).
fn calls<'g, 'p>(
    g: &CallGraph<'g, 'p>,
    k: usize,
    ops: &[&str],
) -> Option<Vec<PrepareContext<'g, 'p>>> {
    let mut v = Vec::with_capacity(ops.len());
    for (i, op) in ops.iter().enumerate() {
        if i > 0 && !g.follows(k + i - 1) {
            return None;
        }
        let c = g.call(k + i)?;
        if c.op_name() != *op {
            return None;
        }
        f32_tensor(g, g.output(k + i)?)?;
        v.push(c);
    }
    Some(v)
}

/// The float32 tensor that value `v` is at load time (planned, upper-bound sizes).
fn f32_tensor<'g>(g: &CallGraph<'g, '_>, v: usize) -> Option<&'g TensorInfo> {
    match g.value(v)? {
        Value::Tensor(t) if t.info.dtype() == ScalarType::Float => Some(&t.info),
        _ => None,
    }
}

/// A rank-`rank` dim `d` (negative from the end) as an index.
fn dim(d: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let d = if d < 0 { d.checked_add(r)? } else { d };
    (0..r).contains(&d).then_some(d as usize)
}

/// The float32 elements of argument `i` of call `c` when it is an immutable constant: a copy
/// (the file's pages stay, as the calls read them in place should the region be refused).
fn constant_f32(c: &PrepareContext<'_, '_>, i: usize) -> Option<Vec<f32>> {
    let t = c.constant_in_place(i)?;
    (t.info.dtype() == ScalarType::Float && t.info.is_contiguous()).then_some(())?;
    Some(
        t.bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

/// The other operand of a commutative binary call `c` one of whose first two arguments is
/// value `v`: (its argument position, its value index).
fn other_operand(c: &PrepareContext<'_, '_>, v: usize) -> Option<(usize, usize)> {
    let (a, b) = (c.value_index(0).ok()?, c.value_index(1).ok()?);
    if a == v {
        Some((1, b))
    } else if b == v {
        Some((0, a))
    } else {
        None
    }
}

/// The region's calls `range` with `inputs`, when `outputs` are exactly the values the calls
/// write that anything after them reads, and the method would take the region.
fn checked<'p>(
    g: &CallGraph<'_, 'p>,
    range: Range<usize>,
    inputs: Vec<usize>,
    outputs: Vec<usize>,
    handle: Box<dyn pteron_core::DelegateHandle + 'p>,
) -> Option<Region<'p>> {
    if g.needed_outputs(&range).ok()? != outputs {
        return None;
    }
    let region = Region {
        calls: range,
        inputs,
        outputs,
        handle,
    };
    // Constant inputs, run-time scalars and the like: left to the portable calls.
    g.check(&region).ok()?;
    Some(region)
}

/// The most inputs a region copies.
const MAX_INPUTS: usize = 16;

std::thread_local! {
    /// Copies of a region's inputs: one buffer for every region run on this thread, so that
    /// it stays in the cache (per region, a prompt's copies were megabytes of cold memory).
    static COPIES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with copies of the region's float32 inputs (arguments `0 .. n`, at most
/// [`MAX_INPUTS`]): for a region whose results may be planned over its inputs' bytes.
fn with_copies<R>(
    ctx: &mut KernelContext<'_, '_>,
    n: usize,
    f: impl FnOnce(&mut KernelContext<'_, '_>, [&[f32]; MAX_INPUTS]) -> Result<R, KernelError>,
) -> Result<R, KernelError> {
    if n > MAX_INPUTS {
        return Err(KernelError::unsupported(format!(
            "fused block with {n} inputs"
        )));
    }
    COPIES.with(|cell| {
        let mut buf = cell
            .try_borrow_mut()
            .map_err(|_| KernelError::invalid("fused blocks run inside each other"))?;
        buf.clear();
        let mut spans = [(0usize, 0usize); MAX_INPUTS];
        for (i, span) in spans.iter_mut().enumerate().take(n) {
            let ([t], []) = ctx.io([i], [])?;
            let start = buf.len();
            buf.extend_from_slice(t.as_slice::<f32>()?);
            *span = (start, buf.len());
        }
        let buf = &*buf;
        f(ctx, spans.map(|(a, b)| &buf[a..b]))
    })
}

/// Runs `f` over the region's float32 inputs (arguments `0 .. N`) and its output (argument
/// `N`): in place when the output's bytes are apart from the inputs' (the usual plan), else
/// from copies of the inputs.
fn in_place_or_copies<const N: usize, R>(
    ctx: &mut KernelContext<'_, '_>,
    f: impl FnOnce([&[f32]; N], &mut [f32]) -> Result<R, KernelError>,
) -> Result<R, KernelError> {
    let ins: [usize; N] = core::array::from_fn(|i| i);
    match ctx.io(ins, [N]) {
        Ok((ins, [mut out])) => {
            let mut xs: [&[f32]; N] = [&[]; N];
            for (x, t) in xs.iter_mut().zip(&ins) {
                *x = t.as_slice()?;
            }
            f(xs, out.as_mut_slice()?)
        }
        Err(KernelError::Aliasing { .. }) => with_copies(ctx, N, |ctx, copies| {
            let ([], [mut out]) = ctx.io([], [N])?;
            f(core::array::from_fn(|i| copies[i]), out.as_mut_slice()?)
        }),
        Err(e) => Err(e),
    }
}

/// Argument `i`'s metadata, which must be a float32 contiguous tensor's.
fn f32_arg(ctx: &KernelContext<'_, '_>, i: usize) -> Result<TensorInfo, KernelError> {
    let t = *ctx.tensor(i)?;
    if t.dtype() != ScalarType::Float || !t.is_contiguous() {
        return Err(KernelError::unsupported(
            "fused block over a non-float32 or strided tensor",
        ));
    }
    Ok(t)
}
