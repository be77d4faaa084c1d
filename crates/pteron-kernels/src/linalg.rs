//! Matrix products: `mm`, `bmm`, `addmm`, `linear`.
//!
//! Floats accumulate in f32 (f16, bf16, f32) or f64; integers in i64 with wrapping, which
//! truncated back equals wrapping arithmetic in the type itself.

use pteron_core::DtypeSet;
use pteron_core::{
    ArgAccess, ArgView, Kernel, KernelContext, KernelError, KernelRegistry, ScalarType,
};

use crate::util::{
    broadcast_strides, require_contiguous, require_dtype, require_rank, Acc, AccNum, REALS,
};

/// Like `dispatch_dtype!` over the types with an [`Acc`] implementation (all reals; not bool).
macro_rules! dispatch_acc {
    ($dtype:expr, $T:ident => $body:expr, _ => $fallback:expr) => {{
        use pteron_core::ScalarType as __St;
        match $dtype {
            __St::Byte => {
                type $T = u8;
                $body
            }
            __St::Char => {
                type $T = i8;
                $body
            }
            __St::Short => {
                type $T = i16;
                $body
            }
            __St::Int => {
                type $T = i32;
                $body
            }
            __St::Long => {
                type $T = i64;
                $body
            }
            __St::Half => {
                type $T = pteron_core::half::f16;
                $body
            }
            __St::Float => {
                type $T = f32;
                $body
            }
            __St::Double => {
                type $T = f64;
                $body
            }
            __St::BFloat16 => {
                type $T = pteron_core::half::bf16;
                $body
            }
            _ => $fallback,
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use dispatch_acc;

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::mm.out",
        Kernel::with_check(mm_out, check_mm).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::bmm.out",
        Kernel::with_check(bmm_out, check_bmm).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::addmm.out",
        Kernel::with_check(addmm_out, check_addmm).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::linear.out",
        Kernel::with_check(linear_out, check_linear).dtypes(DtypeSet::REAL),
    );
}

/// Output columns accumulated at once when the element type is not its own accumulation type
/// (a stack buffer, so execution allocates nothing).
const CHUNK: usize = 256;

/// `out[n×m] = a[n×k] · b[k×m]` with the i-k-j loop order (inner loop over contiguous rows).
pub fn matmul<T: Acc>(a: &[T], b: &[T], out: &mut [T], n: usize, k: usize, m: usize) {
    if let Some(out) = T::as_acc_mut(out) {
        // The element type is its own accumulation type: accumulate in the output rows.
        for i in 0..n {
            let orow = &mut out[i * m..(i + 1) * m];
            orow.fill(T::A::ZERO);
            accumulate_row(&a[i * k..(i + 1) * k], b, m, 0, orow);
        }
        return;
    }
    let mut buf = [T::A::ZERO; CHUNK];
    for i in 0..n {
        let arow = &a[i * k..(i + 1) * k];
        for c0 in (0..m).step_by(CHUNK) {
            let c1 = (c0 + CHUNK).min(m);
            let acc = &mut buf[..c1 - c0];
            acc.fill(T::A::ZERO);
            accumulate_row(arow, b, m, c0, acc);
            for (o, &v) in out[i * m + c0..i * m + c1].iter_mut().zip(acc.iter()) {
                *o = T::from_acc(v);
            }
        }
    }
}

/// `acc[j] += Σ_p arow[p] · b[p][c0 + j]` for every `j < acc.len()`; `b` is row-major with
/// rows of `m` elements.
#[inline]
fn accumulate_row<T: Acc>(arow: &[T], b: &[T], m: usize, c0: usize, acc: &mut [T::A]) {
    for (p, &av) in arow.iter().enumerate() {
        let av = av.to_acc();
        let brow = &b[p * m + c0..][..acc.len()];
        for (o, &bv) in acc.iter_mut().zip(brow) {
            *o = o.add(av.mul(bv.to_acc()));
        }
    }
}

/// Dot product of two equal-length slices, accumulated in 8 lanes (so it vectorises).
#[inline]
pub fn dot<T: Acc>(a: &[T], b: &[T]) -> T::A {
    let mut lanes = [T::A::ZERO; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            lanes[l] = lanes[l].add(x[l].to_acc().mul(y[l].to_acc()));
        }
    }
    let mut s = T::A::ZERO;
    for (&x, &y) in ra.iter().zip(rb) {
        s = s.add(x.to_acc().mul(y.to_acc()));
    }
    let h = [
        lanes[0].add(lanes[4]),
        lanes[1].add(lanes[5]),
        lanes[2].add(lanes[6]),
        lanes[3].add(lanes[7]),
    ];
    h[0].add(h[2]).add(h[1].add(h[3])).add(s)
}

fn check_dtypes(op: &'static str, ts: &[ScalarType]) -> Result<(), KernelError> {
    require_dtype(op, ts[0], &REALS)?;
    for &t in &ts[1..] {
        if t != ts[0] {
            return Err(KernelError::dtype(t, op));
        }
    }
    Ok(())
}

fn check_mm(a: &ArgView) -> Result<(), KernelError> {
    let (x, y, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    check_dtypes("mm", &[x.dtype(), y.dtype(), o.dtype()])?;
    require_rank("mm", 2, &[("self", x), ("mat2", y), ("out", o)])?;
    require_contiguous("mm", &[x, y, o])
}

fn check_bmm(a: &ArgView) -> Result<(), KernelError> {
    let (x, y, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    check_dtypes("bmm", &[x.dtype(), y.dtype(), o.dtype()])?;
    require_rank("bmm", 3, &[("self", x), ("mat2", y), ("out", o)])?;
    require_contiguous("bmm", &[x, y, o])
}

fn check_addmm(a: &ArgView) -> Result<(), KernelError> {
    let (s, x, y, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.tensor(5)?);
    check_dtypes("addmm", &[x.dtype(), s.dtype(), y.dtype(), o.dtype()])?;
    require_rank("addmm", 2, &[("mat1", x), ("mat2", y), ("out", o)])?;
    if s.rank() > 2 {
        return Err(KernelError::shape("addmm: self has rank > 2"));
    }
    a.scalar(3)?;
    a.scalar(4)?;
    require_contiguous("addmm", &[s, x, y, o])
}

fn check_linear(a: &ArgView) -> Result<(), KernelError> {
    let (x, w, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(3)?);
    let mut dts = vec![x.dtype(), w.dtype(), o.dtype()];
    if let Some(b) = a.opt_tensor(2)? {
        dts.push(b.dtype());
        require_contiguous("linear", &[b])?;
        if b.rank() > 1 {
            return Err(KernelError::unsupported("linear: bias of rank > 1"));
        }
    }
    check_dtypes("linear", &dts)?;
    if x.rank() == 0 || w.rank() != 2 {
        return Err(KernelError::unsupported(
            "linear: input of rank 0 or weight of rank != 2",
        ));
    }
    require_contiguous("linear", &[x, w, o])
}

fn mm_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, y) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    require_contiguous("mm", &[&x, &y, ctx.tensor(2)?])?;
    if x.rank() != 2 || y.rank() != 2 || x.size(1) != y.size(0) {
        return Err(KernelError::shape(format!(
            "mm: cannot multiply {:?} by {:?}",
            x.sizes(),
            y.sizes()
        )));
    }
    let (n, k, m) = (x.size(0), x.size(1), y.size(1));
    ctx.resize(2, &[n, m])?;
    let ([a, b], [mut o]) = ctx.io([0, 1], [2])?;
    let dt = a.info.dtype();
    check_dtypes("mm", &[dt, b.info.dtype(), o.info.dtype()])?;
    dispatch_acc!(dt, T => matmul::<T>(a.as_slice()?, b.as_slice()?, o.as_mut_slice()?, n, k, m),
        _ => return Err(KernelError::dtype(dt, "mm")));
    Ok(())
}

fn bmm_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, y) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    require_contiguous("bmm", &[&x, &y, ctx.tensor(2)?])?;
    if x.rank() != 3 || y.rank() != 3 || x.size(0) != y.size(0) || x.size(2) != y.size(1) {
        return Err(KernelError::shape(format!(
            "bmm: cannot multiply {:?} by {:?}",
            x.sizes(),
            y.sizes()
        )));
    }
    let (bs, n, k, m) = (x.size(0), x.size(1), x.size(2), y.size(2));
    ctx.resize(2, &[bs, n, m])?;
    let ([a, b], [mut o]) = ctx.io([0, 1], [2])?;
    let dt = a.info.dtype();
    check_dtypes("bmm", &[dt, b.info.dtype(), o.info.dtype()])?;
    fn run<T: Acc>(a: &[T], b: &[T], o: &mut [T], bs: usize, n: usize, k: usize, m: usize) {
        for i in 0..bs {
            matmul(
                &a[i * n * k..(i + 1) * n * k],
                &b[i * k * m..(i + 1) * k * m],
                &mut o[i * n * m..(i + 1) * n * m],
                n,
                k,
                m,
            );
        }
    }
    dispatch_acc!(dt, T => run::<T>(a.as_slice()?, b.as_slice()?, o.as_mut_slice()?, bs, n, k, m),
        _ => return Err(KernelError::dtype(dt, "bmm")));
    Ok(())
}

fn addmm_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (s, x, y) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(2)?);
    require_contiguous("addmm", &[&s, &x, &y, ctx.tensor(5)?])?;
    if x.rank() != 2 || y.rank() != 2 || x.size(1) != y.size(0) {
        return Err(KernelError::shape(format!(
            "addmm: cannot multiply {:?} by {:?}",
            x.sizes(),
            y.sizes()
        )));
    }
    let (n, k, m) = (x.size(0), x.size(1), y.size(1));
    let bshape = crate::util::broadcast_shapes(s.sizes(), &[n, m])?;
    if bshape.as_slice() != [n, m] {
        return Err(KernelError::shape(format!(
            "addmm: self {:?} does not broadcast to [{n}, {m}]",
            s.sizes()
        )));
    }
    let (beta, alpha) = (ctx.scalar(3)?, ctx.scalar(4)?);
    ctx.resize(5, &[n, m])?;
    let ([sv, a, b], [mut o]) = ctx.io([0, 1, 2], [5])?;
    let dt = a.info.dtype();
    check_dtypes(
        "addmm",
        &[dt, sv.info.dtype(), b.info.dtype(), o.info.dtype()],
    )?;
    let st = broadcast_strides(s.sizes(), &[n, m])?;
    fn run<T: Acc>(
        s: &[T],
        st: &[usize],
        a: &[T],
        b: &[T],
        o: &mut [T],
        (n, k, m): (usize, usize, usize),
        beta: pteron_core::Scalar,
        alpha: pteron_core::Scalar,
    ) {
        matmul(a, b, o, n, k, m);
        let af = alpha.to_f64();
        let (beta_a, alpha_a) = (T::A::from_f64(beta.to_f64()), T::A::from_f64(af));
        for i in 0..n {
            for j in 0..m {
                let p = o[i * m + j].to_acc();
                let p = if af == 1.0 { p } else { alpha_a.mul(p) };
                // ExecuTorch's addmm always adds `beta * self`, also for beta == 0 (a NaN or
                // inf in `self` propagates; PyTorch ignores `self` when beta is 0).
                let v = beta_a.mul(s[i * st[0] + j * st[1]].to_acc()).add(p);
                o[i * m + j] = T::from_acc(v);
            }
        }
    }
    dispatch_acc!(dt, T => run::<T>(sv.as_slice()?, &st, a.as_slice()?, b.as_slice()?, o.as_mut_slice()?, (n, k, m), beta, alpha),
        _ => return Err(KernelError::dtype(dt, "addmm")));
    Ok(())
}

fn linear_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, w) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    let bias = ctx.opt_tensor(2)?.copied();
    require_contiguous("linear", &[&x, &w, ctx.tensor(3)?])?;
    if x.rank() == 0 || w.rank() != 2 || x.size(x.rank() - 1) != w.size(1) {
        return Err(KernelError::shape(format!(
            "linear: input {:?} and weight {:?} do not match",
            x.sizes(),
            w.sizes()
        )));
    }
    let k = w.size(1);
    let m = w.size(0);
    let n = x.numel() / k.max(1);
    let n = if k == 0 {
        x.sizes()[..x.rank() - 1].iter().product()
    } else {
        n
    };
    if let Some(b) = &bias {
        if b.numel() != m && b.numel() != 1 || b.rank() > 1 {
            return Err(KernelError::shape(format!(
                "linear: bias {:?} does not match {m} outputs",
                b.sizes()
            )));
        }
    }
    let mut osz = x.dims();
    osz.as_mut_slice()[x.rank() - 1] = m;
    ctx.resize(3, &osz)?;
    fn run<T: Acc>(x: &[T], w: &[T], b: Option<&[T]>, o: &mut [T], n: usize, k: usize, m: usize) {
        for i in 0..n {
            let xr = &x[i * k..(i + 1) * k];
            for j in 0..m {
                let mut v = dot(xr, &w[j * k..(j + 1) * k]);
                if let Some(b) = b {
                    v = v.add(b[if b.len() == 1 { 0 } else { j }].to_acc());
                }
                o[i * m + j] = T::from_acc(v);
            }
        }
    }
    let dt = x.dtype();
    if bias.is_some() {
        let ([x, w, b], [mut o]) = ctx.io([0, 1, 2], [3])?;
        check_dtypes(
            "linear",
            &[dt, w.info.dtype(), b.info.dtype(), o.info.dtype()],
        )?;
        dispatch_acc!(dt, T => run::<T>(x.as_slice()?, w.as_slice()?, Some(b.as_slice()?), o.as_mut_slice()?, n, k, m),
            _ => return Err(KernelError::dtype(dt, "linear")));
    } else {
        let ([x, w], [mut o]) = ctx.io([0, 1], [3])?;
        check_dtypes("linear", &[dt, w.info.dtype(), o.info.dtype()])?;
        dispatch_acc!(dt, T => run::<T>(x.as_slice()?, w.as_slice()?, None, o.as_mut_slice()?, n, k, m),
            _ => return Err(KernelError::dtype(dt, "linear")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::{Scalar, ScalarType as St};

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn mm_f32_and_i64() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1.0f32, 2., 3., 4., 5., 6.]);
        c.tensor(&[3, 2], &[7.0f32, 8., 9., 10., 11., 12.]);
        let o = c.out(St::Float, &[1, 1]);
        c.ret(o);
        c.run(mm_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[2, 2]);
        assert_eq!(c.output::<f32>(o), vec![58., 64., 139., 154.]);

        let mut c = TestCall::new();
        c.tensor(&[1, 2], &[i64::MAX, 2]);
        c.tensor(&[2, 1], &[2i64, 3]);
        let o = c.out(St::Long, &[1, 1]);
        c.ret(o);
        c.run(mm_out).unwrap();
        assert_eq!(
            c.output::<i64>(o),
            vec![i64::MAX.wrapping_mul(2).wrapping_add(6)]
        );
    }

    #[test]
    fn mm_empty_k_gives_zeros_and_bad_shapes_error() {
        let mut c = TestCall::new();
        c.tensor::<f32>(&[2, 0], &[]);
        c.tensor::<f32>(&[0, 3], &[]);
        let o = c.out(St::Float, &[2, 3]);
        c.ret(o);
        c.run(mm_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0.0; 6]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1.0f32; 4]);
        c.tensor(&[3, 2], &[1.0f32; 6]);
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        assert!(matches!(c.run(mm_out), Err(KernelError::Shape(_))));
        assert!(matches!(c.check(check_mm), Ok(())));
    }

    #[test]
    fn mm_bf16_and_check_rejects_bool() {
        use pteron_core::half::bf16;
        let mut c = TestCall::new();
        let v: Vec<bf16> = [1.5f32, -2., 0.25, 4.]
            .iter()
            .map(|&x| bf16::from_f32(x))
            .collect();
        c.tensor(&[2, 2], &v);
        c.tensor(&[2, 2], &v);
        let o = c.out(St::BFloat16, &[2, 2]);
        c.ret(o);
        c.run(mm_out).unwrap();
        let got: Vec<f32> = c.output::<bf16>(o).iter().map(|x| x.to_f32()).collect();
        // torch.tensor([[1.5,-2],[.25,4]],dtype=torch.bfloat16) @ itself
        assert_eq!(got, vec![1.75, -11.0, 1.375, 15.5]);

        let mut c = TestCall::new();
        c.tensor(&[1, 1], &[pteron_core::Bool(1)]);
        c.tensor(&[1, 1], &[pteron_core::Bool(1)]);
        let o = c.out(St::Bool, &[1, 1]);
        c.ret(o);
        assert!(matches!(
            c.check(check_mm),
            Err(KernelError::UnsupportedDType { .. })
        ));
    }

    #[test]
    fn bmm_f32() {
        let mut c = TestCall::new();
        let a: Vec<f32> = (0..12).map(|x| x as f32).collect();
        let b: Vec<f32> = (0..12).map(|x| (x as f32) * 0.5 - 2.0).collect();
        c.tensor(&[2, 2, 3], &a);
        c.tensor(&[2, 3, 2], &b);
        let o = c.out(St::Float, &[2, 2, 2]);
        c.ret(o);
        c.run(bmm_out).unwrap();
        // torch.bmm(torch.arange(12.).view(2,2,3), (torch.arange(12.)*.5-2).view(2,3,2))
        assert_eq!(
            c.output::<f32>(o),
            vec![-1.0, 0.5, -10.0, -4.0, 44.0, 54.5, 62.0, 77.0]
        );
    }

    #[test]
    fn addmm_broadcast_alpha_beta() {
        let cases: &[(&[usize], &[f32], f64, f64, &[f32])] = &[
            // torch.addmm(s, a, b, beta=.5, alpha=2) with a=[[1,2],[3,4]], b=[[1,0],[-1,2]]
            (&[2], &[10.0, 20.0], 0.5, 2.0, &[3.0, 18.0, 3.0, 26.0]),
            (&[2, 1], &[10.0, 20.0], 1.0, 1.0, &[9.0, 14.0, 19.0, 28.0]),
            (&[], &[5.0], 0.0, 1.0, &[-1.0, 4.0, -1.0, 8.0]),
        ];
        for &(ss, sv, beta, alpha, want) in cases {
            let mut c = TestCall::new();
            c.tensor(ss, sv);
            c.tensor(&[2, 2], &[1.0f32, 2., 3., 4.]);
            c.tensor(&[2, 2], &[1.0f32, 0., -1., 2.]);
            c.double(beta);
            c.double(alpha);
            let o = c.out(St::Float, &[2, 2]);
            c.ret(o);
            c.check(check_addmm).unwrap();
            c.run(addmm_out).unwrap();
            assert_eq!(c.output::<f32>(o), want, "self {ss:?}");
        }
        // beta = 0 still adds 0 * self, as ExecuTorch's kernel: a NaN in self propagates
        let mut c = TestCall::new();
        c.tensor(&[], &[f32::NAN]);
        c.tensor(&[2, 2], &[1.0f32, 2., 3., 4.]);
        c.tensor(&[2, 2], &[1.0f32, 0., -1., 2.]);
        c.double(0.0);
        c.double(1.0);
        let o = c.out(St::Float, &[2, 2]);
        c.ret(o);
        c.run(addmm_out).unwrap();
        assert!(c.output::<f32>(o).iter().all(|v| v.is_nan()));
        let _ = Scalar::Int(1);
    }

    #[test]
    fn linear_with_and_without_bias() {
        // x = arange(6).view(1,2,3)*.1, w = arange(12).view(4,3)-5, b = [1,2,3,4]
        let x: Vec<f32> = (0..6).map(|v| v as f32 * 0.1).collect();
        let w: Vec<f32> = (0..12).map(|v| v as f32 - 5.0).collect();
        for with_bias in [false, true] {
            let mut c = TestCall::new();
            c.tensor(&[1, 2, 3], &x);
            c.tensor(&[4, 3], &w);
            if with_bias {
                c.tensor(&[4], &[1.0f32, 2., 3., 4.]);
            } else {
                c.none();
            }
            let o = c.out(St::Float, &[1, 2, 4]);
            c.ret(o);
            c.check(check_linear).unwrap();
            c.run(linear_out).unwrap();
            let nb = [-1.0f32, -0.1, 0.8, 1.7, -4.6, -1.0, 2.6, 6.2];
            let want: Vec<f32> = nb
                .iter()
                .enumerate()
                .map(|(i, v)| v + if with_bias { (i % 4 + 1) as f32 } else { 0.0 })
                .collect();
            close(&c.output::<f32>(o), &want, 1e-6);
        }
    }

    #[test]
    fn dot_long_vectors() {
        let a: Vec<f32> = (0..37).map(|v| v as f32).collect();
        let b = vec![2.0f32; 37];
        assert_eq!(dot(&a, &b), 2.0 * (36.0 * 37.0 / 2.0));
    }
}
