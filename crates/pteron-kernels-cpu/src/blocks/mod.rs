//! Blocks: runs of portable calls that together compute something known (the interleaved
//! rotary embedding of a Llama layer), found at load time and run as one kernel.
//!
//! An exported decoder layer spends most of its small calls on such blocks: the rotary
//! embedding of the queries and keys alone is 26 calls (slices, squeezes, eight products, a
//! difference and a sum, unsqueezes, concatenations) over a few hundred floats, each costing
//! far more to dispatch than to compute. [`BlockPartitioner`] reads a run of such calls
//! symbolically; when every call of the run is part of a block it recognises and nothing
//! after the run reads an intermediate value, the run becomes one region whose kernel
//! computes each block's result directly, with the same float operations in the same order
//! (so the same bits). Anything it does not recognise stays with the portable calls.

mod rope;

use pteron_core::{CallGraph, KernelError, Partitioner, Region};

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
            // The longest run of consecutive calls from k whose operators a block may use.
            let mut end = k;
            while end < g.len() && (end == k || g.follows(end - 1)) && rope::takes(g, end) {
                end += 1;
            }
            if end > k {
                if let Some(r) = rope::region(g, k..end) {
                    regions.push(r);
                }
                k = end;
            } else {
                k += 1;
            }
        }
        Ok(regions)
    }
}
