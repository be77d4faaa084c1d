//! Which calls of a program run on the GPU, and the region each run of them becomes.
//!
//! [`GpuPartitioner`] walks a method's calls in order and takes each run of consecutive calls
//! that the engine can lower (`lower.rs`: float32 tensors, contiguous, of fixed shape); the
//! run becomes one region, run as one submission by [`crate::region::GpuRegion`]. Anything
//! else (another dtype, a channels-last tensor, a dynamic shape, an op without a kernel here)
//! ends the run and stays on the CPU kernels, so a program is always complete.
//!
//! Within a region every tensor has a home in one device buffer (word offsets; values whose
//! lifetimes do not overlap share words, see `builder.rs`): constants are uploaded once at
//! load, the region's inputs before each run; values the rest of the program reads are copied
//! back after it.

use std::ops::Range;

use pteron_core::{CallGraph, KernelError, Partitioner, Region};

use crate::builder::Builder;
use crate::device::Gpu;
use crate::region::{GpuFailure, GpuRegion};
use crate::words::Dt;

/// Runs the float32 parts of portable programs on a GPU (see the module docs).
#[derive(Clone, Debug)]
pub struct GpuPartitioner {
    gpu: Gpu,
    /// Fewest calls worth a region (each region is one upload, one submission, one readback).
    pub min_calls: usize,
}

impl GpuPartitioner {
    pub fn new(gpu: Gpu) -> Self {
        GpuPartitioner { gpu, min_calls: 1 }
    }
}

impl Partitioner for GpuPartitioner {
    fn name(&self) -> &str {
        "gpu"
    }

    fn partition<'p>(&self, g: &CallGraph<'_, 'p>) -> Result<Vec<Region<'p>>, KernelError> {
        let mut regions = Vec::new();
        let mut k = 0;
        while k < g.len() {
            let mut b = Builder::new();
            let end = scan(&mut b, g, k);
            if end - k >= self.min_calls.max(1) {
                let b = replan(b, g, k..end);
                match finish(b, g, k..end, &self.gpu) {
                    Ok(r) => regions.push(r),
                    // A region the device cannot hold stays on the CPU; a device that fails
                    // is the caller's to know about.
                    Err(GpuFailure::Refused) => {}
                    Err(GpuFailure::Device(e)) => return Err(KernelError::unsupported(e)),
                }
            }
            k = end.max(k + 1);
        }
        Ok(regions)
    }
}

/// Takes calls from `start` while they lower; returns where the run ends.
/// Takes calls from `start` while they lower; returns where the run ends.
fn scan<'g>(b: &mut Builder<'g>, g: &CallGraph<'g, '_>, start: usize) -> usize {
    let mut k = start;
    b.start = start;
    while k < g.len() && (k == start || g.follows(k - 1)) {
        let Some(c) = g.call(k) else { break };
        b.current = k;
        let mark = b.mark();
        if crate::lower::lower(b, g, &c).is_none() {
            b.rollback(mark);
            break;
        }
        k += 1;
    }
    k
}

/// The region lowered again with values sharing words when their lifetimes do not overlap
/// (the first pass gave every value words of its own); the first pass when the second does
/// not lower the same calls.
fn replan<'g>(first: Builder<'g>, g: &CallGraph<'g, '_>, range: Range<usize>) -> Builder<'g> {
    let Ok(outputs) = g.needed_outputs(&range) else {
        return first;
    };
    let plan = first.plan(range.end, &outputs);
    if plan.words >= first.words {
        return first;
    }
    let words = plan.words;
    let mut second = Builder::with_plan(plan);
    if scan(&mut second, g, range.start) != range.end {
        return first;
    }
    second.words = words;
    second
}

/// The region's handle: the buffer made and constants uploaded.
fn finish<'g, 'p>(
    b: Builder<'g>,
    g: &CallGraph<'g, 'p>,
    range: Range<usize>,
    gpu: &Gpu,
) -> Result<Region<'p>, GpuFailure> {
    let needed = g.needed_outputs(&range).map_err(|_| GpuFailure::Refused)?;
    let mut outputs = Vec::with_capacity(needed.len());
    for &v in &needed {
        outputs.push((v, *b.produced.get(&v).ok_or(GpuFailure::Refused)?));
    }
    if outputs.is_empty() {
        return Err(GpuFailure::Refused);
    }
    let handle = GpuRegion::new(
        gpu,
        b.words,
        &b.steps,
        &b.consts,
        b.inputs.iter().map(|&(_, s)| (s, Dt::F32)).collect(),
        outputs.iter().map(|&(_, s)| (s, Dt::F32)).collect(),
    )?;
    Ok(Region {
        calls: range,
        inputs: b.inputs.iter().map(|&(v, _)| v).collect(),
        outputs: needed,
        handle: Box::new(handle),
    })
}
