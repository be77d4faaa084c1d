//! Row-wise float32 kernels: softmax over the last dim, layer norm over trailing dims, mean
//! over trailing dims. Rows are split across threads. Other cases run the portable kernels.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType, TensorInfo,
};

use crate::math;
use crate::par::{for_chunks_mut, MIN_PARALLEL_ELEMS};
use crate::simd::{level, run_op_at, Level, Simd, SimdOp};
use crate::{fallback, register_over};

pub fn register(r: &mut KernelRegistry) {
    register_over(r, "aten::_softmax.out", Kernel::new(softmax_out));
    register_over(
        r,
        "aten::native_layer_norm.out",
        Kernel::new(layer_norm_out),
    );
    register_over(r, "aten::mean.out", Kernel::new(mean_out));
}

fn f32c(t: &TensorInfo) -> bool {
    t.dtype() == ScalarType::Float && t.is_contiguous()
}

/// Rows per task so that a task has at least `MIN_PARALLEL_ELEMS / 4` elements.
fn rows_per_task(row: usize) -> usize {
    (MIN_PARALLEL_ELEMS / 4 / row.max(1)).max(1)
}

/// Sum of a row (vector partial sums).
#[inline(always)]
fn sum<S: Simd>(s: S, x: &[f32]) -> f32 {
    let l = S::LANES;
    let mut acc = [s.zero(); 4];
    let mut c = x.chunks_exact(4 * l);
    for ch in &mut c {
        for (k, a) in acc.iter_mut().enumerate() {
            *a = s.add(*a, s.ld(&ch[k * l..]));
        }
    }
    let mut tail = s.zero();
    let mut r = c.remainder().chunks_exact(l);
    for ch in &mut r {
        tail = s.add(tail, s.ld(ch));
    }
    if !r.remainder().is_empty() {
        tail = s.add(tail, s.ld_tail(r.remainder()));
    }
    let v = s.add(s.add(acc[0], acc[1]), s.add(acc[2], acc[3]));
    s.reduce_add(s.add(v, tail))
}

// ---- softmax ----

/// Softmax of each `row`-long row of `x` into `out`.
pub fn softmax_rows(l: Level, x: &[f32], out: &mut [f32], row: usize) {
    run_op_at(l, SoftmaxOp { x, out, row });
}

struct SoftmaxOp<'a> {
    x: &'a [f32],
    out: &'a mut [f32],
    row: usize,
}

impl SimdOp for SoftmaxOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        for (x, o) in self.x.chunks(self.row).zip(self.out.chunks_mut(self.row)) {
            // The max may skip NaNs; a NaN input still makes its exp, the sum and so every
            // output NaN, as in the portable kernel.
            let mut m = s.splat(f32::NEG_INFINITY);
            let mut c = x.chunks_exact(l);
            for ch in &mut c {
                m = s.max(m, s.ld(ch));
            }
            let mut max = s.reduce_max(m);
            for &v in c.remainder() {
                max = if v > max { v } else { max };
            }
            let mv = s.splat(max);
            // exp and sum
            let mut acc = s.zero();
            let mut xc = x.chunks_exact(l);
            let mut oc = o.chunks_exact_mut(l);
            for (a, b) in (&mut xc).zip(&mut oc) {
                let e = math::exp(s, s.sub(s.ld(a), mv));
                s.st(b, e);
                acc = s.add(acc, e);
            }
            let mut total = s.reduce_add(acc);
            let (a, b) = (xc.remainder(), oc.into_remainder());
            if !a.is_empty() {
                let e = math::exp(s, s.sub(s.ld_tail(a), mv));
                s.st_tail(b, e);
                // zero lanes of the tail load give exp(-max) ≠ 0: sum the stored ones
                total += b.iter().sum::<f32>();
            }
            let inv = s.splat(total);
            let mut oc = o.chunks_exact_mut(l);
            for b in &mut oc {
                s.st(b, s.div(s.ld(b), inv));
            }
            for v in oc.into_remainder() {
                *v /= total;
            }
        }
    }
}

fn softmax_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (x, o) = (*ctx.tensor(0)?, *ctx.tensor(3)?);
    let last = x.rank().checked_sub(1);
    let dim = ctx.int(1)?;
    let is_last = last.is_some_and(|d| dim == d as i64 || dim == -1);
    if !f32c(&x) || !f32c(&o) || !is_last || o.rank() != x.rank() || x.numel() == 0 {
        return fallback("aten::_softmax.out", ctx);
    }
    let row = x.size(x.rank() - 1);
    ctx.resize(3, x.sizes())?;
    let par = ctx.parallel();
    let ([xr], [mut or]) = ctx.io([0], [3])?;
    let (xs, os) = (xr.as_slice::<f32>()?, or.as_mut_slice::<f32>()?);
    let l = level();
    if xs.len() < MIN_PARALLEL_ELEMS || par.num_threads() <= 1 {
        softmax_rows(l, xs, os, row);
    } else {
        let per = rows_per_task(row);
        for_chunks_mut(par, os, per * row, 1, &|k, o| {
            softmax_rows(l, &xs[k * per * row..k * per * row + o.len()], o, row)
        });
    }
    Ok(())
}

// ---- layer norm ----

struct LayerNormOp<'a> {
    x: &'a [f32],
    out: &'a mut [f32],
    mean: &'a mut [f32],
    rstd: &'a mut [f32],
    w: Option<&'a [f32]>,
    b: Option<&'a [f32]>,
    inner: usize,
    eps: f32,
}

impl SimdOp for LayerNormOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        let n = self.inner;
        for (r, (x, o)) in self.x.chunks(n).zip(self.out.chunks_mut(n)).enumerate() {
            let mean = sum(s, x) / n as f32;
            let mv = s.splat(mean);
            // Σ (x − mean)²
            let mut acc = s.zero();
            let mut c = x.chunks_exact(l);
            for ch in &mut c {
                let d = s.sub(s.ld(ch), mv);
                acc = s.fma(d, d, acc);
            }
            let mut q = s.reduce_add(acc);
            for &v in c.remainder() {
                let d = v - mean;
                q += d * d;
            }
            let rstd = 1.0 / (q / n as f32 + self.eps).sqrt();
            self.mean[r] = mean;
            self.rstd[r] = rstd;
            let rv = s.splat(rstd);
            let mut j = 0;
            while j < n {
                let m = l.min(n - j);
                let xv = s.ld_tail(&x[j..j + m]);
                let mut v = s.mul(s.sub(xv, mv), rv);
                if let Some(w) = self.w {
                    v = s.mul(v, s.ld_tail(&w[j..j + m]));
                }
                if let Some(b) = self.b {
                    v = s.add(v, s.ld_tail(&b[j..j + m]));
                }
                s.st_tail(&mut o[j..j + m], v);
                j += l;
            }
        }
    }
}

fn layer_norm_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (o, mo, ro) = (*ctx.tensor(5)?, *ctx.tensor(6)?, *ctx.tensor(7)?);
    let ns = ctx.int_list(1)?;
    let k = ns.len();
    let mut ok = [&x, &o, &mo, &ro].iter().all(|t| f32c(t)) && k >= 1 && k <= x.rank();
    let axis = x.rank().saturating_sub(k);
    if ok {
        for j in 0..k {
            ok &= ns.get(j)? == x.size(axis + j) as i64;
        }
    }
    let inner: usize = x.sizes()[axis..].iter().product();
    for i in [2, 3] {
        if let Some(t) = ctx.opt_tensor(i)? {
            ok &= f32c(t) && t.numel() == inner;
        }
    }
    if !ok || inner == 0 || o.rank() != x.rank() || mo.rank() != x.rank() {
        return fallback("aten::native_layer_norm.out", ctx);
    }
    let eps = ctx.double(4)? as f32;
    let mut stat = x.dims();
    for s in &mut stat.as_mut_slice()[axis..] {
        *s = 1;
    }
    ctx.resize(5, x.sizes())?;
    ctx.resize(6, &stat)?;
    ctx.resize(7, &stat)?;
    let (has_w, has_b) = (!ctx.is_none(2)?, !ctx.is_none(3)?);
    let (wi, bi) = (if has_w { 2 } else { 0 }, if has_b { 3 } else { 0 });
    let par = ctx.parallel();
    let ([xr, wr, br], [mut or, mut mr, mut rr]) = ctx.io([0, wi, bi], [5, 6, 7])?;
    let xs = xr.as_slice::<f32>()?;
    let w = if has_w {
        Some(wr.as_slice::<f32>()?)
    } else {
        None
    };
    let b = if has_b {
        Some(br.as_slice::<f32>()?)
    } else {
        None
    };
    let (os, ms, rs) = (
        or.as_mut_slice::<f32>()?,
        mr.as_mut_slice::<f32>()?,
        rr.as_mut_slice::<f32>()?,
    );
    let l = level();
    let rows = xs.len() / inner;
    if xs.len() < MIN_PARALLEL_ELEMS || par.num_threads() <= 1 || rows < 2 {
        run_op_at(
            l,
            LayerNormOp {
                x: xs,
                out: os,
                mean: ms,
                rstd: rs,
                w,
                b,
                inner,
                eps,
            },
        );
        return Ok(());
    }
    // Tasks own row ranges of all three outputs; mean/rstd are split alongside.
    let per = rows_per_task(inner);
    let ms = crate::par::SharedMut::new(ms);
    let rs = crate::par::SharedMut::new(rs);
    for_chunks_mut(par, os, per * inner, 1, &|k, o| {
        let r0 = k * per;
        let nr = o.len() / inner;
        // Safety: rows r0..r0+nr belong to this chunk only (chunks are disjoint).
        let (m, r) = unsafe { (ms.slice(r0..r0 + nr), rs.slice(r0..r0 + nr)) };
        run_op_at(
            l,
            LayerNormOp {
                x: &xs[r0 * inner..(r0 + nr) * inner],
                out: o,
                mean: m,
                rstd: r,
                w,
                b,
                inner,
                eps,
            },
        );
    });
    Ok(())
}

// ---- mean over trailing dims ----

/// Means of rows of `inner` floats, summed in float32 element by element in index order and
/// divided by the count in float32: ExecuTorch's portable `mean.out`, bit for bit. A SIMD sum
/// orders the additions differently, and an RMSNorm whose output is quantized dynamically next
/// (8da4w programs) turns those last bits into other int8 values, other logits (~1% of their
/// spread) and other greedy tokens than ExecuTorch's. Rows go four at a time, each still in
/// order, so that their additions overlap.
fn mean_rows(x: &[f32], out: &mut [f32], inner: usize) {
    mean_rows_of(x, out, inner, |v| v);
}

/// [`mean_rows`] of `f(x)` (each value rounded to float32 before it is added): the fused
/// RMSNorm's mean of squares (`crate::blocks`) is `mean.out` over the `mul` call's squares.
#[inline(always)]
pub(crate) fn mean_rows_of(x: &[f32], out: &mut [f32], inner: usize, f: impl Fn(f32) -> f32) {
    let n = inner as f32;
    let mut rows = x.chunks_exact(inner).zip(out.iter_mut());
    loop {
        let batch: [_; 4] = core::array::from_fn(|_| rows.next());
        let live = batch.iter().filter(|r| r.is_some()).count();
        if live == 0 {
            return;
        }
        let mut acc = [0f32; 4];
        for i in 0..inner {
            for (a, r) in acc.iter_mut().zip(&batch) {
                if let Some((x, _)) = r {
                    *a += f(x[i]);
                }
            }
        }
        for (a, r) in acc.iter().zip(batch) {
            if let Some((_, o)) = r {
                *o = a / n;
            }
        }
        if live < 4 {
            return;
        }
    }
}

fn mean_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (x, o) = (*ctx.tensor(0)?, *ctx.tensor(4)?);
    let rank = x.rank();
    let dtype_ok = match ctx.opt_dtype(3)? {
        None => true,
        Some(d) => d == ScalarType::Float,
    };
    // The reduced dims must be exactly the trailing `k` dims.
    let mut mask = 0u32;
    let mut k = 0;
    if let Some(dims) = ctx.opt_int_list(1)? {
        for j in 0..dims.len() {
            let d = dims.get(j)?;
            let Ok(d) = x.dim_index(d) else {
                return fallback("aten::mean.out", ctx);
            };
            mask |= 1 << d;
            k += 1;
        }
    }
    let trailing =
        k >= 1 && k <= rank && mask == ((1u32 << rank) - 1) & !((1u32 << (rank - k)) - 1);
    if !f32c(&x) || !f32c(&o) || !dtype_ok || !trailing || x.numel() == 0 {
        return fallback("aten::mean.out", ctx);
    }
    let keepdim = ctx.bool(2)?;
    let mut osz = pteron_core::Dims::new();
    for d in 0..rank {
        if d < rank - k {
            osz.push(x.size(d))?;
        } else if keepdim {
            osz.push(1)?;
        }
    }
    if osz.len() != o.rank() {
        return fallback("aten::mean.out", ctx);
    }
    let inner: usize = x.sizes()[rank - k..].iter().product();
    ctx.resize(4, &osz)?;
    let ([xr], [mut or]) = ctx.io([0], [4])?;
    mean_rows(xr.as_slice()?, or.as_mut_slice()?, inner);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::mean_rows;

    /// Each row's mean is the float32 sum in index order divided by the count in float32
    /// (ExecuTorch's portable `mean.out`), bit for bit, whatever the number of rows.
    #[test]
    fn means_are_sequential_float32_sums() {
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1 << 24) as f32 * 2.0 - 1.0
        };
        for (rows, inner) in [(1, 2048), (3, 17), (4, 64), (9, 1000)] {
            let x: Vec<f32> = (0..rows * inner).map(|_| next() * 10.0).collect();
            let mut out = vec![0f32; rows];
            mean_rows(&x, &mut out, inner);
            for (r, o) in out.iter().enumerate() {
                let mut acc = 0f32;
                for v in &x[r * inner..(r + 1) * inner] {
                    acc += v;
                }
                assert_eq!(
                    o.to_bits(),
                    (acc / inner as f32).to_bits(),
                    "{rows}x{inner} row {r}"
                );
            }
        }
    }
}
