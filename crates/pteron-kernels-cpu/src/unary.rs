//! Elementwise activations on contiguous float32: gelu (erf and tanh forms), sigmoid, tanh,
//! silu, relu, hardtanh, clamp. Anything else runs the portable kernel.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, Parallel, ScalarType,
};

use crate::math;
use crate::par::{for_chunks_mut, MIN_PARALLEL_ELEMS};
use crate::simd::{level, run_op_at, Simd, SimdOp};
use crate::{fallback, register_over};

pub fn register(r: &mut KernelRegistry) {
    register_over(r, "aten::gelu.out", Kernel::new(gelu_out));
    register_over(r, "aten::sigmoid.out", Kernel::new(sigmoid_out));
    register_over(r, "aten::tanh.out", Kernel::new(tanh_out));
    register_over(r, "aten::silu.out", Kernel::new(silu_out));
    register_over(r, "aten::relu.out", Kernel::new(relu_out));
    register_over(r, "aten::hardtanh.out", Kernel::new(hardtanh_out));
    register_over(r, "aten::clamp.out", Kernel::new(clamp_out));
}

/// A lane-wise f32 function. `apply` must be `#[inline(always)]`.
pub trait UnaryFn: Copy + Send + Sync {
    fn apply<S: Simd>(self, s: S, x: S::V) -> S::V;
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unary {
    GeluErf,
    GeluTanh,
    Sigmoid,
    Tanh,
    Silu,
    Relu,
    /// `aten::clamp` semantics (max with lo, then min with hi; NaN stays).
    Clamp(f32, f32),
    /// `aten::hardtanh` semantics (`x <= lo` → lo, `x >= hi` → hi; NaN stays).
    Hardtanh(f32, f32),
}

impl UnaryFn for Unary {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::V) -> S::V {
        match self {
            Unary::GeluErf => math::gelu_erf(s, x),
            Unary::GeluTanh => math::gelu_tanh(s, x),
            Unary::Sigmoid => math::sigmoid(s, x),
            Unary::Tanh => math::tanh(s, x),
            Unary::Silu => s.mul(x, math::sigmoid(s, x)),
            // max(0, x) returns x when x is NaN.
            Unary::Relu => s.max(s.zero(), x),
            Unary::Clamp(lo, hi) => math::clamp(s, x, s.splat(lo), s.splat(hi)),
            Unary::Hardtanh(lo, hi) => {
                // x >= hi → hi, then x <= lo → lo (which wins); NaN keeps x.
                let r = s.select_le(s.splat(hi), x, s.splat(hi), x);
                s.select_le(x, s.splat(lo), s.splat(lo), r)
            }
        }
    }
}

/// `out[i] = f(x[i])`, split across threads when large.
pub fn map<F: UnaryFn>(par: &dyn Parallel, f: F, x: &[f32], out: &mut [f32]) {
    let n = x.len().min(out.len());
    let (x, out) = (&x[..n], &mut out[..n]);
    let l = level();
    if n < MIN_PARALLEL_ELEMS || par.num_threads() <= 1 {
        run_op_at(l, MapOp { f, x, out });
        return;
    }
    const CHUNK: usize = 1 << 13;
    for_chunks_mut(par, out, CHUNK, 2, &|k, o| {
        let xs = &x[k * CHUNK..k * CHUNK + o.len()];
        run_op_at(l, MapOp { f, x: xs, out: o });
    });
}

struct MapOp<'a, F> {
    f: F,
    x: &'a [f32],
    out: &'a mut [f32],
}

impl<F: UnaryFn> SimdOp for MapOp<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        let (x, out, f) = (self.x, self.out, self.f);
        let mut xc = x.chunks_exact(l);
        let mut oc = out.chunks_exact_mut(l);
        for (a, o) in (&mut xc).zip(&mut oc) {
            s.st(o, f.apply(s, s.ld(a)));
        }
        let (a, o) = (xc.remainder(), oc.into_remainder());
        if !a.is_empty() {
            s.st_tail(o, f.apply(s, s.ld_tail(a)));
        }
    }
}

/// Runs `f` from argument 0 into argument `out` when both are contiguous float32; `false`
/// when the call is not one this module handles.
fn apply<F: UnaryFn>(
    ctx: &mut KernelContext<'_, '_>,
    out: usize,
    f: F,
) -> Result<bool, KernelError> {
    let (x, o) = (*ctx.tensor(0)?, *ctx.tensor(out)?);
    let f32c = |t: &pteron_core::TensorInfo| t.dtype() == ScalarType::Float && t.is_contiguous();
    if !f32c(&x) || !f32c(&o) || o.rank() != x.rank() {
        return Ok(false);
    }
    ctx.resize(out, x.sizes())?;
    let par = ctx.parallel();
    let ([xr], [mut or]) = ctx.io([0], [out])?;
    map(par, f, xr.as_slice()?, or.as_mut_slice()?);
    Ok(true)
}

fn gelu_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let f = match ctx.string(1)? {
        "none" => Unary::GeluErf,
        "tanh" => Unary::GeluTanh,
        _ => return fallback("aten::gelu.out", ctx),
    };
    if apply(ctx, 2, f)? {
        return Ok(());
    }
    fallback("aten::gelu.out", ctx)
}

macro_rules! simple {
    ($fn:ident, $name:literal, $f:expr) => {
        fn $fn(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
            if apply(ctx, 1, $f)? {
                return Ok(());
            }
            fallback($name, ctx)
        }
    };
}

// `aten::sigmoid.out` gives ExecuTorch's bits: `1 / (1 + expf(-x))` with the C library's
// `expf` ([`math::sigmoid_libc`]), not the vectorized approximation, whose last-bit differences
// an 8da4w program turns into other int8 activations (the gate of every SiLU MLP that the
// exporter decomposes).
simple!(sigmoid_out, "aten::sigmoid.out", LibcSigmoid);

/// [`math::sigmoid_libc`] lane by lane (compiled for each SIMD level, so its fused
/// multiply-adds are instructions there, not calls).
#[derive(Clone, Copy)]
pub(crate) struct LibcSigmoid;

impl UnaryFn for LibcSigmoid {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::V) -> S::V {
        let mut lanes = [0f32; 16];
        s.st(&mut lanes, x);
        for v in &mut lanes[..S::LANES] {
            *v = math::sigmoid_libc(*v);
        }
        s.ld(&lanes)
    }
}

simple!(tanh_out, "aten::tanh.out", Unary::Tanh);
simple!(silu_out, "aten::silu.out", Unary::Silu);
simple!(relu_out, "aten::relu.out", Unary::Relu);

fn hardtanh_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (lo, hi) = (
        ctx.scalar(1)?.to_f64() as f32,
        ctx.scalar(2)?.to_f64() as f32,
    );
    if apply(ctx, 3, Unary::Hardtanh(lo, hi))? {
        return Ok(());
    }
    fallback("aten::hardtanh.out", ctx)
}

fn clamp_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let bound = |ctx: &KernelContext<'_, '_>, i: usize, inf: f32| -> Result<f32, KernelError> {
        Ok(match ctx.opt_scalar(i)? {
            Some(s) => s.to_f64() as f32,
            None => inf,
        })
    };
    let (lo, hi) = (
        bound(ctx, 1, f32::NEG_INFINITY)?,
        bound(ctx, 2, f32::INFINITY)?,
    );
    // Integer and bool bounds follow the portable kernel's promotion rules; only plain
    // float bounds on a float tensor are handled here.
    let plain = |i: usize| -> Result<bool, KernelError> {
        Ok(matches!(
            ctx.opt_scalar(i)?,
            None | Some(pteron_core::Scalar::Double(_)) | Some(pteron_core::Scalar::Int(_))
        ))
    };
    if plain(1)?
        && plain(2)?
        && !lo.is_nan()
        && !hi.is_nan()
        && apply(ctx, 3, Unary::Clamp(lo, hi))?
    {
        return Ok(());
    }
    fallback("aten::clamp.out", ctx)
}
