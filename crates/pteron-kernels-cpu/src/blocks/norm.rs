//! RMSNorm as ExecuTorch's Llama exports decompose it: `x · rsqrt(mean(x·x, −1, keepdim) +
//! eps) · w` in six calls (`mul`, `mean`, `add`, `rsqrt`, `mul`, `mul`). Each row's squares
//! are summed in index order and divided in float32 (the `mean.out` kernel's arithmetic),
//! `rsqrt` is `1 / sqrt` in float32, the products are rounded one at a time: the calls' bits.

use std::boxed::Box;
use std::vec;
use std::vec::Vec;

use pteron_core::{ArgAccess, CallGraph, DelegateHandle, KernelContext, KernelError, Region};

use super::{
    calls, checked, constant_f32, dim, f32_arg, f32_tensor, in_place_or_copies, other_operand,
};
use crate::norm::mean_rows_of;

const OPS: [&str; 6] = [
    "aten::mul.out",
    "aten::mean.out",
    "aten::add.out",
    "aten::rsqrt.out",
    "aten::mul.out",
    "aten::mul.out",
];

/// The RMSNorm computed by calls `k .. k + 6`, if they compute one.
pub(super) fn find<'p>(g: &CallGraph<'_, 'p>, k: usize) -> Option<Region<'p>> {
    let c = calls(g, k, &OPS)?;
    let arg = |i: usize, j: usize| c[i].value_index(j).ok();
    let out = |i: usize| g.output(k + i);
    // x · x
    let x = arg(0, 0)?;
    let xt = f32_tensor(g, x)?;
    let r = xt.rank();
    if arg(0, 1)? != x || r == 0 {
        return None;
    }
    let d = xt.sizes()[r - 1];
    // Its mean over the last dim, kept, in float32.
    let dims = c[1].int_list(1).ok()?;
    let float = c[1].opt_dtype(3).ok()?.is_none();
    if arg(1, 0)? != out(0)? || dims.len() != 1 || !float || !c[1].bool(2).ok()? {
        return None;
    }
    if dim(dims.get(0).ok()?, r)? != r - 1 {
        return None;
    }
    // + eps (a constant of one element), alpha 1.
    let (e, _) = other_operand(&c[2], out(1)?)?;
    let eps = match constant_f32(&c[2], e)?[..] {
        [eps] => eps,
        _ => return None,
    };
    if c[2].scalar(2).ok()?.to_f64() != 1.0 {
        return None;
    }
    // rsqrt, x times it, times the weight.
    if arg(3, 0)? != out(2)? || other_operand(&c[4], out(3)?)?.1 != x {
        return None;
    }
    let (wi, w) = other_operand(&c[5], out(4)?)?;
    let wt = f32_tensor(g, w)?;
    let o = out(5)?;
    if wt.numel() != d || wt.sizes().last() != Some(&d) || f32_tensor(g, o)?.sizes() != xt.sizes() {
        return None;
    }
    let (weight, inputs) = match constant_f32(&c[5], wi) {
        Some(w) => (Weight::Const(w), vec![x]),
        None => (Weight::Arg, vec![x, w]),
    };
    let handle = Box::new(NormRegion {
        eps,
        weight,
        inputs: inputs.len(),
        means: Vec::new(),
    });
    checked(g, k..k + 6, inputs, vec![o], handle)
}

/// The weight: copied at load, or argument 1.
enum Weight {
    Const(Vec<f32>),
    Arg,
}

struct NormRegion {
    eps: f32,
    weight: Weight,
    /// Arguments before the output (x, and the weight when it is not a constant).
    inputs: usize,
    means: Vec<f32>,
}

impl DelegateHandle for NormRegion {
    fn writes_arg(&self, arg: usize) -> Option<bool> {
        Some(arg >= self.inputs)
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        let xi = f32_arg(ctx, 0)?;
        let o = self.inputs;
        ctx.resize(o, xi.sizes())?;
        let (eps, means) = (self.eps, &mut self.means);
        match (&self.weight, o) {
            (Weight::Const(w), 1) => {
                in_place_or_copies(ctx, |[x], out| norm(x, w, eps, means, out))
            }
            (Weight::Arg, 2) => in_place_or_copies(ctx, |[x, w], out| norm(x, w, eps, means, out)),
            _ => Err(KernelError::invalid("RMSNorm region's arguments")),
        }
    }
}

/// `out = x · rsqrt(mean(x·x) + eps) · w` row by row (rows of `w.len()`).
fn norm(
    x: &[f32],
    w: &[f32],
    eps: f32,
    means: &mut Vec<f32>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let d = w.len();
    if d == 0 || !x.len().is_multiple_of(d) || out.len() < x.len() {
        return Err(KernelError::shape(format!(
            "RMSNorm of {} values with {d} weights",
            x.len()
        )));
    }
    means.clear();
    means.resize(x.len() / d, 0.0);
    mean_rows_of(x, means, d, |v| v * v);
    for ((orow, row), &m) in out
        .chunks_exact_mut(d)
        .zip(x.chunks_exact(d))
        .zip(means.iter())
    {
        let r = 1.0 / (m + eps).sqrt();
        for ((y, &v), &wv) in orow.iter_mut().zip(row).zip(w) {
            *y = (v * r) * wv;
        }
    }
    Ok(())
}
