//! p-norm distances: `_cdist_forward.out` (between the rows of two batched matrices, batch dims
//! broadcast) and `_pdist_forward.out` (between the rows of one matrix, upper triangle).
//!
//! As ExecuTorch's portable kernels (`distance_util.h`): float dtypes only; `p` ≥ 0 with the
//! special norms 0 (count of differing coordinates), 1, 2, ∞, and `(Σ|d|^p)^(1/p)` otherwise;
//! the sums run in the element type, so for f16/bf16 every intermediate is rounded to it
//! (c10::Half arithmetic), and `compute_mode` is only range-checked (the direct loop always
//! runs, as ExecuTorch's).

use pteron_core::{
    dispatch_float, ArgAccess, ArgView, Dims, DtypeSet, Kernel, KernelContext, KernelError,
    KernelRegistry, TensorInfo,
};

use crate::elementwise::engine::broadcast_all;
use crate::util::{
    contiguous_strides, require_contiguous, require_dtype, require_rank, Acc, AccFloat, AccNum,
    FLOATS,
};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::_cdist_forward.out",
        Kernel::with_check(cdist_forward_out, check_cdist).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_pdist_forward.out",
        Kernel::with_check(pdist_forward_out, check_pdist).dtypes(DtypeSet::FLOAT),
    );
}

/// _cdist_forward.out: [x1, x2, p, compute_mode, out].
fn check_cdist(a: &ArgView) -> Result<(), KernelError> {
    let op = "_cdist_forward";
    let (x1, x2, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(4)?);
    require_dtype(op, x1.dtype(), &FLOATS)?;
    for t in [x2, o] {
        if t.dtype() != x1.dtype() {
            return Err(KernelError::dtype(t.dtype(), op));
        }
    }
    if x1.rank() < 2 || x2.rank() < 2 {
        return Err(KernelError::shape(format!(
            "{op}: inputs must have at least 2 dims (ranks {} and {})",
            x1.rank(),
            x2.rank()
        )));
    }
    a.double(2)?;
    a.opt_int(3)?;
    require_contiguous(op, &[x1, x2, o])
}

/// _pdist_forward.out: [self, p, out].
fn check_pdist(a: &ArgView) -> Result<(), KernelError> {
    let op = "_pdist_forward";
    let (x, o) = (a.tensor(0)?, a.tensor(2)?);
    require_dtype(op, x.dtype(), &FLOATS)?;
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    require_rank(op, 2, &[("input", x)])?;
    require_rank(op, 1, &[("out", o)])?;
    a.double(1)?;
    require_contiguous(op, &[x, o])
}

fn check_p(op: &str, p: f64) -> Result<(), KernelError> {
    if p >= 0.0 {
        Ok(())
    } else {
        Err(KernelError::invalid(format!(
            "{op}: p must be non-negative, got {p}"
        )))
    }
}

/// Which norm a `p` selects.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Norm {
    L0,
    L1,
    L2,
    Inf,
    P,
}

impl Norm {
    fn of(p: f64) -> Norm {
        if p == 0.0 {
            Norm::L0
        } else if p == 1.0 {
            Norm::L1
        } else if p == 2.0 {
            Norm::L2
        } else if p == f64::INFINITY {
            Norm::Inf
        } else {
            Norm::P
        }
    }
}

/// Rounds an accumulation value through the element type (identity for f32/f64).
#[inline(always)]
fn rd<T: Acc>(v: T::A) -> T::A {
    T::from_acc(v).to_acc()
}

/// The distance between rows `a` and `b` with ExecuTorch's per-step arithmetic in `T`.
#[inline]
fn row_dist<T: Acc>(a: &[T], b: &[T], norm: Norm, p: T::A) -> T
where
    T::A: AccFloat + Pow,
{
    let mut agg = T::A::ZERO;
    for (&x, &y) in a.iter().zip(b) {
        let d = rd::<T>(x.to_acc().sub(y.to_acc()));
        let diff = if d < T::A::ZERO { -d } else { d };
        agg = match norm {
            Norm::L0 => rd::<T>(agg.add(if diff == T::A::ZERO {
                T::A::ZERO
            } else {
                T::A::ONE
            })),
            Norm::L1 => rd::<T>(agg.add(diff)),
            Norm::L2 => rd::<T>(agg.add(rd::<T>(diff.mul(diff)))),
            // std::max(agg, up): `agg < up ? up : agg`.
            Norm::Inf => {
                if agg < diff {
                    diff
                } else {
                    agg
                }
            }
            Norm::P => rd::<T>(agg.add(rd::<T>(diff.powf(p)))),
        };
    }
    let r = match norm {
        Norm::L2 => agg.sqrt(),
        // std::pow(agg, 1.0 / p): computed in double.
        Norm::P => T::A::from_f64(agg.to_f64().powf(1.0 / p.to_f64())),
        _ => agg,
    };
    T::from_acc(r)
}

/// `powf` of the accumulation type (C++ `std::pow(float, float)` / `pow(double, double)`).
pub trait Pow {
    fn powf(self, e: Self) -> Self;
}
impl Pow for f32 {
    fn powf(self, e: f32) -> f32 {
        crate::math::Libm::powf(self, e)
    }
}
impl Pow for f64 {
    fn powf(self, e: f64) -> f64 {
        crate::math::Libm::powf(self, e)
    }
}

struct CdistGeom {
    /// Output batch shape (broadcast of the two inputs' batch dims).
    batch: Dims,
    /// Element strides of one [P, M] / [R, M] matrix in x1 / x2 along the output batch dims.
    s1: Dims,
    s2: Dims,
    p_rows: usize,
    r_rows: usize,
    m: usize,
}

fn batch_strides(x: &TensorInfo, batch: &[usize]) -> Result<Dims, KernelError> {
    // Strides of x's batch dims (in units of whole matrices), broadcast to `batch`.
    let r = x.rank();
    let xb = &x.sizes()[..r - 2];
    let mat = x.size(r - 2) * x.size(r - 1);
    let cs = contiguous_strides(xb);
    let mut st = Dims::from_slice(batch)?;
    let off = batch.len() - xb.len();
    for i in 0..batch.len() {
        st.as_mut_slice()[i] = if i < off || xb[i - off] == 1 {
            0
        } else {
            cs[i - off] * mat
        };
    }
    Ok(st)
}

fn cdist_geom(x1: &TensorInfo, x2: &TensorInfo) -> Result<CdistGeom, KernelError> {
    let op = "_cdist_forward";
    let (r1, r2) = (x1.rank(), x2.rank());
    if r1 < 2 || r2 < 2 {
        return Err(KernelError::shape(format!(
            "{op}: inputs must have at least 2 dims"
        )));
    }
    let m = x1.size(r1 - 1);
    if x2.size(r2 - 1) != m {
        return Err(KernelError::shape(format!(
            "{op}: x1 {:?} and x2 {:?} differ in the last dim",
            x1.sizes(),
            x2.sizes()
        )));
    }
    let batch = broadcast_all(&[&x1.sizes()[..r1 - 2], &x2.sizes()[..r2 - 2]])?;
    Ok(CdistGeom {
        s1: batch_strides(x1, &batch)?,
        s2: batch_strides(x2, &batch)?,
        batch,
        p_rows: x1.size(r1 - 2),
        r_rows: x2.size(r2 - 2),
        m,
    })
}

fn cdist<T: Acc>(g: &CdistGeom, x1: &[T], x2: &[T], out: &mut [T], p: f64)
where
    T::A: AccFloat + Pow,
{
    let norm = Norm::of(p);
    // The exponent as ExecuTorch passes it to its norms: converted to the element type.
    let pt = T::from_acc(T::A::from_f64(p)).to_acc();
    let (pr, rr, m) = (g.p_rows, g.r_rows, g.m);
    if m == 0 {
        out.fill(T::from_acc(T::A::ZERO));
        return;
    }
    let mut k = 0usize;
    crate::elementwise::engine::walk(&g.batch, [&g.s1, &g.s2], |[b1, b2]| {
        for i in 0..pr {
            let a = &x1[b1 + i * m..][..m];
            for j in 0..rr {
                let b = &x2[b2 + j * m..][..m];
                out[k] = row_dist(a, b, norm, pt);
                k += 1;
            }
        }
    });
}

fn cdist_forward_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "_cdist_forward";
    let (x1, x2) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    require_contiguous(op, &[&x1, &x2, ctx.tensor(4)?])?;
    let p = ctx.double(2)?;
    check_p(op, p)?;
    if let Some(mode) = ctx.opt_int(3)? {
        if !(0..=2).contains(&mode) {
            return Err(KernelError::invalid(format!(
                "{op}: compute_mode must be 0, 1 or 2, got {mode}"
            )));
        }
    }
    let g = cdist_geom(&x1, &x2)?;
    let mut os = g.batch;
    os.push(g.p_rows)?;
    os.push(g.r_rows)?;
    ctx.resize(4, &os)?;
    let ([a, b], [mut o]) = ctx.io([0, 1], [4])?;
    let dt = x1.dtype();
    if b.info.dtype() != dt || o.info.dtype() != dt {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    if o.info.numel() == 0 {
        return Ok(());
    }
    dispatch_float!(dt, T => cdist::<T>(&g, a.as_slice()?, b.as_slice()?, o.as_mut_slice()?, p),
        _ => return Err(KernelError::dtype(dt, op)));
    Ok(())
}

fn pdist<T: Acc>(x: &[T], out: &mut [T], n: usize, m: usize, p: f64)
where
    T::A: AccFloat + Pow,
{
    let norm = Norm::of(p);
    let pt = T::from_acc(T::A::from_f64(p)).to_acc();
    let mut k = 0;
    for i in 0..n {
        for j in i + 1..n {
            out[k] = row_dist(&x[i * m..][..m], &x[j * m..][..m], norm, pt);
            k += 1;
        }
    }
}

fn pdist_forward_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "_pdist_forward";
    let x = *ctx.tensor(0)?;
    require_contiguous(op, &[&x, ctx.tensor(2)?])?;
    if x.rank() != 2 {
        return Err(KernelError::rank_mismatch(op, "input", 2, x.rank()));
    }
    let p = ctx.double(1)?;
    check_p(op, p)?;
    let (n, m) = (x.size(0), x.size(1));
    let pairs = n
        .checked_mul(n.saturating_sub(1))
        .ok_or(KernelError::SizeOverflow)?
        / 2;
    ctx.resize(2, &[pairs])?;
    let ([xr], [mut o]) = ctx.io([0], [2])?;
    let dt = x.dtype();
    if o.info.dtype() != dt {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    dispatch_float!(dt, T => pdist::<T>(xr.as_slice()?, o.as_mut_slice()?, n, m, p),
        _ => return Err(KernelError::dtype(dt, op)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{got:?} vs {want:?}"
            );
        }
    }

    fn cdist_run(a: (&[usize], &[f32]), b: (&[usize], &[f32]), p: f64) -> (Vec<usize>, Vec<f32>) {
        let mut c = TestCall::new();
        c.tensor(a.0, a.1);
        c.tensor(b.0, b.1);
        c.double(p);
        c.none();
        let o = c.out(St::Float, &vec![1; a.0.len().max(b.0.len())]);
        c.ret(o);
        c.check(check_cdist).unwrap();
        c.run(cdist_forward_out).unwrap();
        (c.info(o).sizes().to_vec(), c.output::<f32>(o))
    }

    #[test]
    fn cdist_norms() {
        // x1 = [[0, 0], [1, 2]], x2 = [[3, 4], [1, 0], [1, 2]]
        let x1 = [0.0f32, 0., 1., 2.];
        let x2 = [3.0f32, 4., 1., 0., 1., 2.];
        let (s, v) = cdist_run((&[2, 2], &x1), (&[3, 2], &x2), 2.0);
        assert_eq!(s, vec![2, 3]);
        close(&v, &[5., 1., 5f32.sqrt(), 8f32.sqrt(), 2., 0.]);
        let (_, v) = cdist_run((&[2, 2], &x1), (&[3, 2], &x2), 1.0);
        close(&v, &[7., 1., 3., 4., 2., 0.]);
        let (_, v) = cdist_run((&[2, 2], &x1), (&[3, 2], &x2), 0.0);
        close(&v, &[2., 1., 2., 2., 1., 0.]);
        let (_, v) = cdist_run((&[2, 2], &x1), (&[3, 2], &x2), f64::INFINITY);
        close(&v, &[4., 1., 2., 2., 2., 0.]);
        let (_, v) = cdist_run((&[2, 2], &x1), (&[3, 2], &x2), 3.0);
        close(&v, &[91f32.cbrt(), 1., 9f32.cbrt(), 16f32.cbrt(), 2., 0.]);
    }

    #[test]
    fn cdist_broadcasts_batches() {
        // x1 [2, 1, 2] against x2 [1, 2] (no batch dims): out [2, 1, 2].
        let x1 = [0.0f32, 0., 1., 1.];
        let x2 = [3.0f32, 4., 1., 1.];
        let (s, v) = cdist_run((&[2, 1, 2], &x1), (&[2, 2], &x2), 2.0);
        assert_eq!(s, vec![2, 1, 2]);
        close(&v, &[5., 2f32.sqrt(), 13f32.sqrt(), 0.]);
        // Empty last dim: zeros.
        let (s, v) = cdist_run((&[2, 0], &[]), (&[1, 0], &[]), 2.0);
        assert_eq!(s, vec![2, 1]);
        assert_eq!(v, vec![0., 0.]);
    }

    #[test]
    fn cdist_errors() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[0.0f32; 4]);
        c.tensor(&[2, 3], &[0.0f32; 6]);
        c.double(-1.0);
        c.none();
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        assert!(c.run(cdist_forward_out).is_err());
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[0i64; 4]);
        c.tensor(&[2, 2], &[0i64; 4]);
        c.double(2.0);
        c.none();
        let o = c.out(St::Long, &[2, 2]);
        c.ret(o);
        assert!(c.check(check_cdist).is_err());
    }

    #[test]
    fn pdist_pairs() {
        // rows [0, 0], [3, 4], [1, 1]: pairs (0,1), (0,2), (1,2)
        let mut c = TestCall::new();
        c.tensor(&[3, 2], &[0.0f64, 0., 3., 4., 1., 1.]);
        c.double(2.0);
        let o = c.out(St::Double, &[1]);
        c.ret(o);
        c.check(check_pdist).unwrap();
        c.run(pdist_forward_out).unwrap();
        assert_eq!(c.output::<f64>(o), vec![5.0, 2f64.sqrt(), 13f64.sqrt()]);

        // One row: no pairs.
        let mut c = TestCall::new();
        c.tensor(&[1, 2], &[1.0f32, 2.]);
        c.double(1.0);
        let o = c.out(St::Float, &[1]);
        c.ret(o);
        c.run(pdist_forward_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[0]);
    }

    #[test]
    fn half_rounds_every_step() {
        // In f16, 2048 + 1 rounds back to 2048: the L1 sum of [1; 3] over 2048 stays 2048
        // only when each partial sum is rounded (as c10::Half arithmetic does).
        use half::f16;
        let a: Vec<f16> = [2048.0f32, 1., 1.]
            .iter()
            .map(|&v| f16::from_f32(v))
            .collect();
        let z = vec![f16::ZERO; 3];
        let mut c = TestCall::new();
        c.tensor(&[1, 3], &a);
        c.tensor(&[1, 3], &z);
        c.double(1.0);
        c.none();
        let o = c.out(St::Half, &[1, 1]);
        c.ret(o);
        c.run(cdist_forward_out).unwrap();
        assert_eq!(c.output::<f16>(o)[0].to_f32(), 2048.0);
    }
}
