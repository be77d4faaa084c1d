//! The SiLU gate of a Llama MLP as ExecuTorch's exports decompose it: `(g · sigmoid(g)) · u`
//! in three calls (`sigmoid`, `mul`, `mul`), the sigmoid as the `sigmoid.out` kernel computes
//! it (`crate::math::sigmoid_libc`), each product rounded: the calls' bits.

use std::boxed::Box;
use std::vec;

use pteron_core::{
    ArgAccess, CallGraph, DelegateHandle, KernelContext, KernelError, Parallel, Region,
};

use super::{calls, checked, f32_arg, f32_tensor, in_place_or_copies, other_operand};
use crate::simd::{level, run_op_at, Simd, SimdOp};
use crate::unary::{self, LibcSigmoid};

const OPS: [&str; 3] = ["aten::sigmoid.out", "aten::mul.out", "aten::mul.out"];

/// The gate computed by calls `k .. k + 3`, if they compute one.
pub(super) fn find<'p>(g: &CallGraph<'_, 'p>, k: usize) -> Option<Region<'p>> {
    let c = calls(g, k, &OPS)?;
    let x = c[0].value_index(0).ok()?;
    let [s, h, o] = [0, 1, 2].map(|i| g.output(k + i));
    if other_operand(&c[1], s?)?.1 != x {
        return None;
    }
    let (_, u) = other_operand(&c[2], h?)?;
    let o = o?;
    let shape = f32_tensor(g, x)?.sizes();
    if f32_tensor(g, u)?.sizes() != shape || f32_tensor(g, o)?.sizes() != shape || u == x {
        return None;
    }
    let handle = Box::new(GateRegion);
    checked(g, k..k + 3, vec![x, u], vec![o], handle)
}

/// Arguments `[g, u, out]`.
struct GateRegion;

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
        ctx.resize(2, gi.sizes())?;
        let par = ctx.parallel();
        in_place_or_copies(ctx, |[g, u], out| gate(par, g, u, out))
    }
}

/// `out = (g · sigmoid(g)) · u`: the sigmoid by the `sigmoid.out` kernel's own loop (threads
/// on long prompts), then the two products.
fn gate(par: &dyn Parallel, g: &[f32], u: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    if out.len() < g.len() || u.len() != g.len() {
        return Err(KernelError::invalid(
            "SiLU gate buffers shorter than their shape",
        ));
    }
    let out = &mut out[..g.len()];
    unary::map(par, LibcSigmoid, g, out);
    run_op_at(level(), Gate { g, u, out });
    Ok(())
}

/// `out = (g · out) · u`, `out` holding `sigmoid(g)`: each product rounded.
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
        let n = self.out.len().min(self.g.len()).min(self.u.len());
        let mut i = 0;
        while i + l <= n {
            let gs = s.mul(s.ld(&self.g[i..]), s.ld(&self.out[i..]));
            s.st(&mut self.out[i..], s.mul(gs, s.ld(&self.u[i..])));
            i += l;
        }
        for j in i..n {
            self.out[j] = (self.g[j] * self.out[j]) * self.u[j];
        }
    }
}
