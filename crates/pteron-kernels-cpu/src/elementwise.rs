//! Binary arithmetic on float32 (`add`, `sub`, `mul`, `div`; tensor and scalar forms; `pow`
//! to the scalar 2, as `x·x`) with
//! broadcasting: the shapes are collapsed into an outer loop over runs that are, for each
//! input, either contiguous or a single repeated value; runs are vectorized. Other dtypes and
//! layouts run the portable kernels.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, Parallel, ScalarType,
    TensorInfo, MAX_RANK,
};

use crate::par::{for_chunks_mut, MIN_PARALLEL_ELEMS};
use crate::simd::{level, run_op_at, Simd, SimdOp};
use crate::{fallback, register_over};

pub fn register(r: &mut KernelRegistry) {
    register_over(r, "aten::add.out", Kernel::new(add_out));
    register_over(r, "aten::sub.out", Kernel::new(sub_out));
    register_over(r, "aten::mul.out", Kernel::new(mul_out));
    register_over(r, "aten::div.out", Kernel::new(div_out));
    register_over(r, "aten::add.Scalar_out", Kernel::new(add_scalar_out));
    register_over(r, "aten::mul.Scalar_out", Kernel::new(mul_scalar_out));
    register_over(
        r,
        "aten::pow.Tensor_Scalar_out",
        Kernel::new(pow_scalar_out),
    );
}

/// The arithmetic: `a + alpha·b` (`alpha` applied only when it is not 1), `a · b`, `a / b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinOp {
    Add(f32),
    Mul,
    Div,
}

impl BinOp {
    #[inline(always)]
    #[allow(clippy::redundant_guards)]
    fn apply<S: Simd>(self, s: S, a: S::V, b: S::V) -> S::V {
        match self {
            BinOp::Add(alpha) if alpha == 1.0 => s.add(a, b),
            BinOp::Add(alpha) => s.add(a, s.mul(s.splat(alpha), b)),
            BinOp::Mul => s.mul(a, b),
            BinOp::Div => s.div(a, b),
        }
    }
}

/// One input of a run: contiguous from an offset, or one value repeated.
#[derive(Clone, Copy)]
enum Src<'a> {
    Vec(&'a [f32]),
    Splat(f32),
}

struct RunOp<'a> {
    op: BinOp,
    a: Src<'a>,
    b: Src<'a>,
    out: &'a mut [f32],
}

impl SimdOp for RunOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        let n = self.out.len();
        let op = self.op;
        #[inline(always)]
        fn get<S: Simd>(s: S, src: Src<'_>, i: usize, m: usize) -> S::V {
            match src {
                Src::Vec(v) if m == S::LANES => s.ld(&v[i..]),
                Src::Vec(v) => s.ld_tail(&v[i..i + m]),
                Src::Splat(x) => s.splat(x),
            }
        }
        let mut i = 0;
        while i + l <= n {
            let v = op.apply(s, get(s, self.a, i, l), get(s, self.b, i, l));
            s.st(&mut self.out[i..], v);
            i += l;
        }
        if i < n {
            let m = n - i;
            let v = op.apply(s, get(s, self.a, i, m), get(s, self.b, i, m));
            s.st_tail(&mut self.out[i..], v);
        }
    }
}

/// `out = op(a, b)` with `a`, `b` broadcast to `out_sizes` (contiguous f32 buffers).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    par: &dyn Parallel,
    op: BinOp,
    a: &[f32],
    a_sizes: &[usize],
    b: &[f32],
    b_sizes: &[usize],
    out: &mut [f32],
    out_sizes: &[usize],
) -> Result<(), &'static str> {
    let rank = out_sizes.len();
    if a_sizes.len() > rank || b_sizes.len() > rank || rank > MAX_RANK {
        return Err("bad ranks");
    }
    // Per-dim strides in out space (0 where broadcast), then merge dims that stay contiguous
    // for both inputs.
    let strides = |sz: &[usize]| -> Result<[usize; MAX_RANK], &'static str> {
        let mut st = [0usize; MAX_RANK];
        let off = rank - sz.len();
        let mut acc = 1usize;
        for d in (0..rank).rev() {
            if d < off {
                continue;
            }
            let s = sz[d - off];
            if s == out_sizes[d] {
                st[d] = if s == 1 { 0 } else { acc };
            } else if s != 1 {
                return Err("shapes do not broadcast");
            }
            acc *= s;
        }
        Ok(st)
    };
    let (sa, sb) = (strides(a_sizes)?, strides(b_sizes)?);
    let numel: usize = out_sizes.iter().product();
    let na: usize = a_sizes.iter().product();
    let nb: usize = b_sizes.iter().product();
    if out.len() < numel || a.len() < na || b.len() < nb {
        return Err("buffers too short");
    }
    if numel == 0 {
        return Ok(());
    }
    // Collapse (skipping size-1 dims).
    let mut dims: Vec3 = Vec3::default();
    for d in 0..rank {
        if out_sizes[d] == 1 {
            continue;
        }
        if let Some(last) = dims.last_mut() {
            let (ls, la, lb) = *last;
            if la == sa[d] * out_sizes[d] && lb == sb[d] * out_sizes[d] {
                *last = (ls * out_sizes[d], sa[d], sb[d]);
                continue;
            }
        }
        dims.push((out_sizes[d], sa[d], sb[d]));
    }
    if dims.is_empty() {
        dims.push((1, 0, 0));
    }
    let (inner, ia, ib) = *dims.last_mut().expect("non-empty");
    // The inner run must be contiguous or repeated for each input.
    if (ia > 1) || (ib > 1) {
        return Err("inner run is strided");
    }
    let outer_dims = &dims.d[..dims.n - 1];
    let outer: usize = outer_dims.iter().map(|d| d.0).product();
    let l = level();
    let run = |k: usize, o: &mut [f32], start_in_run: usize| {
        // Offsets of outer index k.
        let (mut oa, mut ob) = (0usize, 0usize);
        let mut rem = k;
        for &(size, sta, stb) in outer_dims.iter().rev() {
            let i = rem % size;
            rem /= size;
            oa += i * sta;
            ob += i * stb;
        }
        let len = o.len();
        fn src(buf: &[f32], off: usize, st: usize, start: usize, len: usize) -> Src<'_> {
            if st == 1 {
                Src::Vec(&buf[off + start..off + start + len])
            } else {
                Src::Splat(buf[off])
            }
        }
        run_op_at(
            l,
            RunOp {
                op,
                a: src(a, oa, ia, start_in_run, len),
                b: src(b, ob, ib, start_in_run, len),
                out: o,
            },
        );
    };
    let out = &mut out[..numel];
    if numel < MIN_PARALLEL_ELEMS || par.num_threads() <= 1 {
        for (k, o) in out.chunks_mut(inner).enumerate() {
            run(k, o, 0);
        }
    } else if outer >= 2 * par.num_threads() {
        for_chunks_mut(par, out, inner, 1, &|k, o| run(k, o, 0));
    } else {
        // Few long runs: split each run into pieces.
        const CHUNK: usize = 1 << 13;
        let per_run = inner.div_ceil(CHUNK);
        let shared = crate::par::SharedMut::new(out);
        par.parallel_for(outer * per_run, &|r| {
            for c in r {
                let (k, j) = (c / per_run, (c % per_run) * CHUNK);
                let len = CHUNK.min(inner - j);
                // Safety: piece c covers out[k*inner + j ..][..len], disjoint from every other
                // piece, and `out` outlives `parallel_for`.
                let o = unsafe { shared.slice(k * inner + j..k * inner + j + len) };
                run(k, o, j);
            }
        });
    }
    Ok(())
}

/// A fixed-capacity list of collapsed dims (no allocation).
#[derive(Default)]
struct Vec3 {
    d: [(usize, usize, usize); MAX_RANK],
    n: usize,
}

impl Vec3 {
    fn push(&mut self, v: (usize, usize, usize)) {
        self.d[self.n] = v;
        self.n += 1;
    }
    fn last_mut(&mut self) -> Option<&mut (usize, usize, usize)> {
        self.n.checked_sub(1).map(|i| &mut self.d[i])
    }
    fn is_empty(&self) -> bool {
        self.n == 0
    }
}

fn f32c(t: &TensorInfo) -> bool {
    t.dtype() == ScalarType::Float && t.is_contiguous()
}

/// Tensor-tensor form: [a, b, (alpha,) out]. `Ok(false)` when not handled here.
fn tensor_form(
    ctx: &mut KernelContext<'_, '_>,
    out: usize,
    op: BinOp,
) -> Result<bool, KernelError> {
    let (a, b, o) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(out)?);
    if !f32c(&a) || !f32c(&b) || !f32c(&o) {
        return Ok(false);
    }
    let Ok(shape) = pteron_kernels::util::broadcast_shapes(a.sizes(), b.sizes()) else {
        return Ok(false);
    };
    if shape.len() != o.rank() {
        return Ok(false);
    }
    ctx.resize(out, &shape)?;
    let par = ctx.parallel();
    let ([ar, br], [mut or]) = ctx.io([0, 1], [out])?;
    binary(
        par,
        op,
        ar.as_slice()?,
        a.sizes(),
        br.as_slice()?,
        b.sizes(),
        or.as_mut_slice()?,
        &shape,
    )
    .map_err(KernelError::invalid)?;
    Ok(true)
}

/// Tensor-scalar form: [a, scalar, (alpha,) out].
fn scalar_form(
    ctx: &mut KernelContext<'_, '_>,
    out: usize,
    op: BinOp,
    scalar: f32,
) -> Result<bool, KernelError> {
    let (a, o) = (*ctx.tensor(0)?, *ctx.tensor(out)?);
    if !f32c(&a) || !f32c(&o) || o.rank() != a.rank() {
        return Ok(false);
    }
    ctx.resize(out, a.sizes())?;
    let par = ctx.parallel();
    let ([ar], [mut or]) = ctx.io([0], [out])?;
    let b = [scalar];
    binary(
        par,
        op,
        ar.as_slice()?,
        a.sizes(),
        &b,
        &[],
        or.as_mut_slice()?,
        a.sizes(),
    )
    .map_err(KernelError::invalid)?;
    Ok(true)
}

/// A float alpha for a float32 computation (`None`: leave it to the portable kernel).
fn alpha(ctx: &KernelContext<'_, '_>, i: usize) -> Result<Option<f32>, KernelError> {
    Ok(match ctx.scalar(i)? {
        pteron_core::Scalar::Int(v) => Some(v as f32),
        pteron_core::Scalar::Double(v) => Some(v as f32),
        pteron_core::Scalar::Bool(_) => None,
    })
}

/// A float scalar operand (Int or Double) for a float32 tensor.
fn scalar_operand(ctx: &KernelContext<'_, '_>, i: usize) -> Result<Option<f32>, KernelError> {
    alpha(ctx, i)
}

fn add_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if let Some(al) = alpha(ctx, 2)? {
        if tensor_form(ctx, 3, BinOp::Add(al))? {
            return Ok(());
        }
    }
    fallback("aten::add.out", ctx)
}

fn sub_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if let Some(al) = alpha(ctx, 2)? {
        if tensor_form(ctx, 3, BinOp::Add(-al))? {
            return Ok(());
        }
    }
    fallback("aten::sub.out", ctx)
}

fn mul_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if tensor_form(ctx, 2, BinOp::Mul)? {
        return Ok(());
    }
    fallback("aten::mul.out", ctx)
}

fn div_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if tensor_form(ctx, 2, BinOp::Div)? {
        return Ok(());
    }
    fallback("aten::div.out", ctx)
}

fn add_scalar_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if let (Some(v), Some(al)) = (scalar_operand(ctx, 1)?, alpha(ctx, 2)?) {
        // a + alpha·v, with alpha·v rounded to f32 first as the portable kernel does.
        if scalar_form(ctx, 3, BinOp::Add(1.0), al * v)? {
            return Ok(());
        }
    }
    fallback("aten::add.Scalar_out", ctx)
}

fn mul_scalar_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if let Some(v) = scalar_operand(ctx, 1)? {
        if scalar_form(ctx, 2, BinOp::Mul, v)? {
            return Ok(());
        }
    }
    fallback("aten::mul.Scalar_out", ctx)
}

/// pow.Tensor_Scalar_out: [self, exponent, out]. The exponent 2 (an RMS norm's square) is
/// `x·x`, as PyTorch and the portable kernel compute it; other exponents run the portable
/// kernel.
fn pow_scalar_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let two = ctx.scalar(1)?.to_f64() == 2.0;
    let (a, o) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    if two && f32c(&a) && f32c(&o) && o.rank() == a.rank() {
        ctx.resize(2, a.sizes())?;
        let par = ctx.parallel();
        let ([ar], [mut or]) = ctx.io([0], [2])?;
        let x = ar.as_slice()?;
        binary(
            par,
            BinOp::Mul,
            x,
            a.sizes(),
            x,
            a.sizes(),
            or.as_mut_slice()?,
            a.sizes(),
        )
        .map_err(KernelError::invalid)?;
        return Ok(());
    }
    fallback("aten::pow.Tensor_Scalar_out", ctx)
}
