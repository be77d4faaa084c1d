//! The memory plan: every arena value placed first-fit in execution order while its node's
//! inputs are still live, and the scratch buffers sized for the current shapes.

use pteron_core::KernelError;

use super::fuse::chain_at;
use super::{Executable, Fuse, Home, Prep};
use crate::graph::Node;
use crate::kernels;
use crate::quant::exec as qexec;
use crate::util::Buf;

impl Executable {
    /// Places every arena value (first fit in execution order) and sizes the scratch buffer.
    pub(super) fn plan(&mut self) -> Result<(), KernelError> {
        const ALIGN: usize = 64;
        let nn = self.steps.len();
        let nv = self.homes.len();
        // Events: values born at each node (inputs at -1 → before node 0), released after
        // their last use.
        let mut born: Vec<Vec<usize>> = vec![Vec::new(); nn + 1];
        let mut dies: Vec<Vec<usize>> = vec![Vec::new(); nn + 1];
        let mut is_input = vec![false; nv];
        for &(_, v) in &self.inputs {
            is_input[v] = true;
        }
        for v in 0..nv {
            if self.homes[v] != Home::Arena {
                continue;
            }
            let (s, e) = self.lifetimes[v];
            let b = if is_input[v] { 0 } else { s + 1 };
            // The outputs of steps fused into later ones are never written: no bytes.
            let produced = is_input[v]
                || self
                    .steps
                    .get(s)
                    .is_some_and(|st| st.node.output() == v && st.fuse != Fuse::IntoNext);
            if !produced {
                continue;
            }
            born[b.min(nn)].push(v);
            dies[(e + 1).min(nn)].push(v);
        }
        // A reshape whose input dies at it takes over the input's bytes: no copy.
        let mut alias_of = vec![usize::MAX; nv];
        for (s, st) in self.steps.iter().enumerate() {
            if let Node::Reshape { x, out, .. } = st.node {
                let arena = self.homes[x] == Home::Arena && self.homes[out] == Home::Arena;
                if arena && x != out && self.lifetimes[x].1 == s && !is_input[out] {
                    alias_of[out] = x;
                }
            }
        }
        let mut handed_over = vec![false; nv];
        let mut free: Vec<(usize, usize)> = Vec::new(); // sorted (offset, size)
        let mut top = 0usize;
        let alloc = |size: usize, free: &mut Vec<(usize, usize)>, top: &mut usize| -> usize {
            for k in 0..free.len() {
                let (o, s) = free[k];
                if s >= size {
                    if s == size {
                        free.remove(k);
                    } else {
                        free[k] = (o + size, s - size);
                    }
                    return o;
                }
            }
            // Grow the last free block if it ends at the top.
            if let Some(&(o, s)) = free.last() {
                if o + s == *top {
                    free.pop();
                    *top = o + size;
                    return o;
                }
            }
            let o = *top;
            *top += size;
            o
        };
        let release = |o: usize, size: usize, free: &mut Vec<(usize, usize)>| {
            let k = free.partition_point(|&(fo, _)| fo < o);
            free.insert(k, (o, size));
            // Coalesce with the next and the previous block.
            if k + 1 < free.len() && free[k].0 + free[k].1 == free[k + 1].0 {
                free[k].1 += free[k + 1].1;
                free.remove(k + 1);
            }
            if k > 0 && free[k - 1].0 + free[k - 1].1 == free[k].0 {
                free[k - 1].1 += free[k].1;
                free.remove(k);
            }
        };
        for t in 0..=nn {
            // Node t−1's output (and, at t = 0, the inputs) is placed before its inputs die.
            for &v in &born[t] {
                let x = alias_of[v];
                if x != usize::MAX && self.sizes[v] <= self.capacity[x] {
                    // x dies at this same t (its last use is the reshape producing v).
                    self.offsets[v] = self.offsets[x];
                    self.capacity[v] = self.capacity[x];
                    handed_over[x] = true;
                    continue;
                }
                let size = self.sizes[v].max(1).div_ceil(ALIGN) * ALIGN;
                let o = alloc(size, &mut free, &mut top);
                self.offsets[v] = o;
                self.capacity[v] = size;
            }
            for &v in &dies[t] {
                if !handed_over[v] {
                    release(self.offsets[v], self.capacity[v], &mut free);
                }
            }
        }
        if top as u64 > self.max_bytes {
            return Err(KernelError::unsupported(format!(
                "the delegate needs {top} bytes of memory, over the limit of {}",
                self.max_bytes
            )));
        }
        if self.arena.len() < top {
            self.arena = Buf::zeroed(top)?;
        }
        self.plan_scratch()
    }

    pub(super) fn plan_scratch(&mut self) -> Result<(), KernelError> {
        let mut scratch = 0usize;
        for st in &self.steps {
            if let (Prep::Conv(cw), Node::Conv { x, .. }) = (&st.prep, &st.node) {
                let s = &self.shapes[*x];
                if s.rank() == 4 {
                    scratch = scratch.max(cw.scratch_len(s.dims()[1], s.dims()[2])?);
                }
            }
        }
        // Fused pointwise-depthwise steps: a band of widened rows per thread of the method's
        // pool (a pool of more than 16 threads runs as many bands as fit).
        let bands = self.fused_bands;
        let mut fused = 0usize;
        for i in 0..self.steps.len() {
            if let Some((chain, x)) = chain_at(&self.steps, i) {
                let (xs, os) = (self.shapes[x], self.shapes[self.steps[i].node.output()]);
                if xs.rank() == 4 && os.rank() == 4 {
                    let (iw, ow) = (xs.dims()[2], os.dims()[2]);
                    let f = kernels::fused::scratch_floats(
                        &chain,
                        iw,
                        ow,
                        kernels::fused::STRIPE_FLOATS,
                        bands,
                    )
                    .ok_or(KernelError::SizeOverflow)?;
                    fused = fused.max(f);
                }
            }
        }
        let mut qscratch = 0usize;
        for st in &self.steps {
            if let Prep::Q(q) = &st.prep {
                qscratch = qscratch.max(qexec::scratch_len(q, &st.node, &self.shapes));
            }
        }
        if (scratch as u64)
            .saturating_add(fused as u64)
            .saturating_mul(4)
            .saturating_add(qscratch as u64)
            > self.max_bytes
        {
            return Err(KernelError::unsupported("scratch memory over the limit"));
        }
        if self.qscratch.len() < qscratch {
            self.qscratch
                .try_reserve_exact(qscratch - self.qscratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.qscratch.resize(qscratch, 0);
        }
        if self.fused_scratch.len() < fused {
            self.fused_scratch
                .try_reserve_exact(fused - self.fused_scratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.fused_scratch.resize(fused, 0.0);
        }
        if self.scratch.len() < scratch {
            self.scratch
                .try_reserve_exact(scratch - self.scratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.scratch.resize(scratch, 0.0);
        }
        Ok(())
    }
}
