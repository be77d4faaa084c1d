//! The SiLU gate of a Llama MLP as ExecuTorch's exports decompose it: `(g · sigmoid(g)) · u`
//! in three calls (`sigmoid`, `mul`, `mul`), the sigmoid as the `sigmoid.out` kernel computes
//! it ([`math::sigmoid_libc`]), each product rounded: the calls' bits.

use std::boxed::Box;
use std::vec;

use pteron_core::{ArgAccess, CallGraph, DelegateHandle, KernelContext, KernelError, Region};

use super::{calls, checked, either, f32_arg, f32_tensor, Inputs};
use crate::math;
use crate::simd::{level, run_op_at, Simd, SimdOp};

const OPS: [&str; 3] = ["aten::sigmoid.out", "aten::mul.out", "aten::mul.out"];

/// The gate computed by calls `k .. k + 3`, if they compute one.
pub(super) fn find<'p>(g: &CallGraph<'_, 'p>, k: usize) -> Option<Region<'p>> {
    let c = calls(g, k, &OPS)?;
    let arg = |i: usize, j: usize| c[i].value_index(j).ok();
    let out = |i: usize| g.output(k + i);
    let x = arg(0, 0)?;
    let (s, h) = (out(0)?, out(1)?);
    if either(arg(1, 0)?, arg(1, 1)?, |&v| v == s)?.1 != x {
        return None;
    }
    let (_, u) = either(arg(2, 0)?, arg(2, 1)?, |&v| v == h)?;
    let o = out(2)?;
    let shape = f32_tensor(g, x)?.sizes();
    if f32_tensor(g, u)?.sizes() != shape || f32_tensor(g, o)?.sizes() != shape || u == x {
        return None;
    }
    let handle = Box::new(GateRegion {
        copies: Inputs::default(),
    });
    checked(g, k..k + 3, vec![x, u], vec![o], handle)
}

/// Arguments `[g, u, out]`.
struct GateRegion {
    copies: Inputs,
}

impl DelegateHandle for GateRegion {
    fn writes_arg(&self, arg: usize) -> Option<bool> {
        Some(arg >= 2)
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        let (gi, ui) = (f32_arg(ctx, 0)?, f32_arg(ctx, 1)?);
        if gi.sizes() != ui.sizes() {
            return Err(KernelError::shape(format!(
                "SiLU gate of {:?} by {:?}",
                gi.sizes(),
                ui.sizes()
            )));
        }
        self.copies.load(ctx, 2)?;
        ctx.resize(2, gi.sizes())?;
        let ([], [mut out]) = ctx.io([], [2])?;
        let out = out.as_mut_slice::<f32>()?;
        let (g, u) = (self.copies.get(0), self.copies.get(1));
        if out.len() < g.len() || u.len() != g.len() {
            return Err(KernelError::invalid(
                "SiLU gate buffers shorter than their shape",
            ));
        }
        run_op_at(level(), Gate { g, u, out });
        Ok(())
    }
}

/// `out = (g · sigmoid(g)) · u`, compiled for each SIMD level so that the C library `expf`'s
/// fused multiply-adds are instructions.
struct Gate<'a> {
    g: &'a [f32],
    u: &'a [f32],
    out: &'a mut [f32],
}

impl SimdOp for Gate<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        let n = self.g.len().min(self.u.len()).min(self.out.len());
        let mut i = 0;
        // The sigmoid lane by lane over a fixed count (which the compiler vectorizes), the
        // products as vectors (each rounded, as the calls round them).
        while i + l <= n && l <= 16 {
            let mut lanes = [0f32; 16];
            lanes[..l].copy_from_slice(&self.g[i..i + l]);
            for v in &mut lanes[..l] {
                *v = math::sigmoid_libc(*v);
            }
            let gs = s.mul(s.ld(&self.g[i..]), s.ld(&lanes));
            s.st(&mut self.out[i..], s.mul(gs, s.ld(&self.u[i..])));
            i += l;
        }
        for j in i..n {
            let g = self.g[j];
            self.out[j] = (g * math::sigmoid_libc(g)) * self.u[j];
        }
    }
}
