//! Normalisations: batch norm (inference and training forms), layer norm, group norm.
//!
//! Floats only; statistics are computed in the accumulation type (f32 for f16/bf16/f32, f64
//! for f64) with two passes (mean, then the mean of squared deviations).

use pteron_core::DtypeSet;
use pteron_core::{
    dispatch_float, ArgAccess, ArgView, Kernel, KernelContext, KernelError, KernelRegistry,
    TensorInfo, TensorRef,
};

use crate::util::{require_contiguous, require_dtype, Acc, AccFloat, AccNum, FLOATS};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::_native_batch_norm_legit_no_training.out",
        Kernel::with_check(batch_norm_no_training_out, check_batch_norm_no_training)
            .dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_native_batch_norm_legit.out",
        Kernel::with_check(batch_norm_legit_out, check_batch_norm_legit).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_native_batch_norm_legit.no_stats_out",
        Kernel::with_check(batch_norm_no_stats_out, check_batch_norm_no_stats)
            .dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::native_layer_norm.out",
        Kernel::with_check(layer_norm_out, check_layer_norm).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::native_group_norm.out",
        Kernel::with_check(group_norm_out, check_group_norm).dtypes(DtypeSet::FLOAT),
    );
}

/// Float dtype, every listed tensor of that dtype and contiguous (optional ones may be None).
fn check_tensors(a: &ArgView, op: &'static str, args: &[usize]) -> Result<(), KernelError> {
    let dt = a.tensor(args[0])?.dtype();
    require_dtype(op, dt, &FLOATS)?;
    for &i in args {
        if let Some(t) = a.opt_tensor(i)? {
            if t.dtype() != dt {
                return Err(KernelError::dtype(t.dtype(), op));
            }
            require_contiguous(op, &[t])?;
        }
    }
    Ok(())
}

fn check_batch_norm_no_training(a: &ArgView) -> Result<(), KernelError> {
    check_tensors(a, "batch_norm", &[0, 1, 2, 3, 4, 7, 8, 9])
}
fn check_batch_norm_legit(a: &ArgView) -> Result<(), KernelError> {
    a.bool(5)?;
    check_tensors(a, "batch_norm", &[0, 1, 2, 3, 4, 8, 9, 10])
}
fn check_batch_norm_no_stats(a: &ArgView) -> Result<(), KernelError> {
    if !a.bool(3)? {
        return Err(KernelError::invalid(
            "batch_norm without running stats needs training=True",
        ));
    }
    check_tensors(a, "batch_norm", &[0, 1, 2, 6, 7, 8])
}
fn check_layer_norm(a: &ArgView) -> Result<(), KernelError> {
    check_tensors(a, "layer_norm", &[0, 2, 3, 5, 6, 7])
}
fn check_group_norm(a: &ArgView) -> Result<(), KernelError> {
    check_tensors(a, "group_norm", &[0, 1, 2, 8, 9, 10])
}

/// An optional parameter tensor (`Tensor?`): the argument to borrow for it, and whether it
/// is present. An absent one borrows a stand-in argument instead (so `ctx.io` keeps a fixed
/// arity) whose data is never read.
#[derive(Clone, Copy)]
struct Param {
    arg: usize,
    present: bool,
}

impl Param {
    /// The parameter at argument `i`, checked to have `len` elements; `stand_in` is borrowed
    /// in its place when it is None.
    fn at(
        ctx: &KernelContext,
        i: usize,
        len: usize,
        what: &str,
        stand_in: usize,
    ) -> Result<Param, KernelError> {
        let Some(t) = ctx.opt_tensor(i)? else {
            return Ok(Param {
                arg: stand_in,
                present: false,
            });
        };
        if t.numel() != len {
            return Err(KernelError::shape(format!(
                "{what}: expected {len} elements, got {:?}",
                t.sizes()
            )));
        }
        Ok(Param {
            arg: i,
            present: true,
        })
    }

    /// The parameter's elements from its borrowed tensor, or None when absent.
    fn slice<'a, T: Acc>(&self, t: &TensorRef<'a>) -> Result<Option<&'a [T]>, KernelError> {
        if self.present {
            t.as_slice::<T>().map(Some)
        } else {
            Ok(None)
        }
    }
}

/// Checks, after the outputs are resized and the operands borrowed, that each slice still
/// holds what the arithmetic indexes: a hostile program can pass the same tensor as a
/// parameter and as an output that the kernel resizes (a bias that is also `save_mean`,
/// resized to `[0]`, was then indexed per channel).
fn long_enough(slices: &[Option<usize>], need: &[usize]) -> Result<(), KernelError> {
    for (len, &n) in slices.iter().zip(need) {
        if len.is_some_and(|l| l < n) {
            return Err(KernelError::invalid(
                "batch_norm: an operand is also an output the kernel resized",
            ));
        }
    }
    Ok(())
}

/// Element `k` of an optional parameter in the accumulation type, or `default` when absent.
#[inline]
fn param_or<T: Acc>(p: Option<&[T]>, k: usize, default: T::A) -> T::A {
    p.map_or(default, |p| p[k].to_acc())
}

fn contiguous_all(ctx: &KernelContext, args: &[usize]) -> Result<(), KernelError> {
    for &i in args {
        if let Some(t) = ctx.opt_tensor(i)? {
            require_contiguous("normalization", &[t])?;
        }
    }
    Ok(())
}

/// Mean and biased variance of a slice, in the accumulation type.
fn moments<T: Acc>(x: &[T]) -> (T::A, T::A)
where
    T::A: AccFloat,
{
    let n = T::A::from_f64(x.len() as f64);
    let mut s = T::A::ZERO;
    for &v in x {
        s = s.add(v.to_acc());
    }
    let mean = s / n;
    let mut q = T::A::ZERO;
    for &v in x {
        let d = v.to_acc().sub(mean);
        q = q.add(d.mul(d));
    }
    (mean, q / n)
}

// ---- batch norm ----

/// Per-channel affine coefficients `(alpha, beta)` of a batch norm: `out = x * alpha + beta`.
#[inline]
fn bn_coeffs<T: Acc>(
    ch: usize,
    invstd: T::A,
    mean: T::A,
    w: Option<&[T]>,
    b: Option<&[T]>,
) -> (T::A, T::A)
where
    T::A: AccFloat,
{
    let alpha = w.map_or(invstd, |w| invstd.mul(w[ch].to_acc()));
    let beta = param_or(b, ch, T::A::ZERO).sub(mean.mul(alpha));
    (alpha, beta)
}

/// `out = x * alpha + beta` over one contiguous block.
#[inline]
fn affine<T: Acc>(x: &[T], out: &mut [T], alpha: T::A, beta: T::A) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = T::from_acc(v.to_acc().mul(alpha).add(beta));
    }
}

/// (N, C, inner) of a batch-norm input `[N, C, *]`.
fn bn_dims(x: &TensorInfo) -> Result<(usize, usize, usize), KernelError> {
    if x.rank() < 2 {
        return Err(KernelError::shape(format!(
            "batch_norm: input {:?} has fewer than 2 dims",
            x.sizes()
        )));
    }
    Ok((x.size(0), x.size(1), x.sizes()[2..].iter().product()))
}

/// Inference batch norm with given statistics; `save_mean`/`save_invstd` (if rank 1) are
/// resized to `[0]` as PyTorch returns them.
fn bn_eval<T: Acc>(
    ctx: &mut KernelContext,
    io: [usize; 5],
    eps: f64,
    out: usize,
    saves: [usize; 2],
) -> Result<(), KernelError>
where
    T::A: AccFloat,
{
    let [xi, wi, bi, mi, vi] = io;
    let x = *ctx.tensor(xi)?;
    let (_, c, inner) = bn_dims(&x)?;
    let w = Param::at(ctx, wi, c, "batch_norm weight", xi)?;
    let b = Param::at(ctx, bi, c, "batch_norm bias", xi)?;
    let mean = Param::at(ctx, mi, c, "batch_norm running_mean", xi)?;
    if !mean.present {
        return Err(KernelError::invalid("missing running_mean"));
    }
    let var = Param::at(ctx, vi, c, "batch_norm running_var", xi)?;
    if !var.present {
        return Err(KernelError::invalid("missing running_var"));
    }
    let eps = T::A::from_f64(eps);
    ctx.resize(out, x.sizes())?;
    for s in saves {
        if ctx.tensor(s)?.rank() == 1 {
            ctx.resize(s, &[0])?;
        }
    }
    let ([xr, wr, br, mr, vr], [mut o]) = ctx.io([xi, w.arg, b.arg, mean.arg, var.arg], [out])?;
    let (w, b) = (w.slice::<T>(&wr)?, b.slice::<T>(&br)?);
    let (mean, var) = (mr.as_slice::<T>()?, vr.as_slice::<T>()?);
    let (xs, os) = (xr.as_slice::<T>()?, o.as_mut_slice::<T>()?);
    long_enough(
        &[
            w.map(<[T]>::len),
            b.map(<[T]>::len),
            Some(mean.len()),
            Some(var.len()),
        ],
        &[c; 4],
    )?;
    // Blocks of `inner` elements cycle through the channels.
    for (k, (xb, ob)) in xs
        .chunks(inner.max(1))
        .zip(os.chunks_mut(inner.max(1)))
        .enumerate()
    {
        let ch = k % c;
        let invstd = T::A::ONE / var[ch].to_acc().add(eps).sqrt();
        let (alpha, beta) = bn_coeffs(ch, invstd, mean[ch].to_acc(), w, b);
        affine(xb, ob, alpha, beta);
    }
    Ok(())
}

/// Running statistics updated by a training batch norm.
struct Running<'a, T: Acc> {
    mean: &'a mut [T],
    var: &'a mut [T],
    momentum: T::A,
    /// `count / (count - 1)`: turns the biased batch variance into the unbiased one.
    unbias: T::A,
}

/// The arithmetic of a training batch norm over `xs` (`[N, C, inner]`): per channel, the batch
/// statistics, the normalised output, the saved mean and invstd, and the running statistics.
#[allow(clippy::too_many_arguments)]
fn bn_train_apply<T: Acc>(
    xs: &[T],
    (n, c, inner): (usize, usize, usize),
    w: Option<&[T]>,
    b: Option<&[T]>,
    eps: T::A,
    os: &mut [T],
    (save_mean, save_invstd): (&mut [T], &mut [T]),
    mut running: Option<Running<'_, T>>,
) -> Result<(), KernelError>
where
    T::A: AccFloat,
{
    let all = n * c * inner;
    long_enough(
        &[
            Some(xs.len()),
            Some(os.len()),
            w.map(<[T]>::len),
            b.map(<[T]>::len),
            Some(save_mean.len()),
            Some(save_invstd.len()),
            running.as_ref().map(|r| r.mean.len().min(r.var.len())),
        ],
        &[all, all, c, c, c, c, c],
    )?;
    let cnt = T::A::from_f64((n * inner) as f64);
    for ch in 0..c {
        let block = |k: usize| (k * c + ch) * inner..(k * c + ch + 1) * inner;
        let mut s = T::A::ZERO;
        for k in 0..n {
            for &v in &xs[block(k)] {
                s = s.add(v.to_acc());
            }
        }
        let mean = s / cnt;
        let mut q = T::A::ZERO;
        for k in 0..n {
            for &v in &xs[block(k)] {
                let d = v.to_acc().sub(mean);
                q = q.add(d.mul(d));
            }
        }
        let var = q / cnt;
        let invstd = T::A::ONE / var.add(eps).sqrt();
        let (alpha, beta) = bn_coeffs(ch, invstd, mean, w, b);
        for k in 0..n {
            affine(&xs[block(k)], &mut os[block(k)], alpha, beta);
        }
        save_mean[ch] = T::from_acc(mean);
        save_invstd[ch] = T::from_acc(invstd);
        if let Some(r) = &mut running {
            let (m, keep) = (r.momentum, T::A::ONE.sub(r.momentum));
            let d = &mut r.mean[ch];
            *d = T::from_acc(keep.mul(d.to_acc()).add(m.mul(mean)));
            let d = &mut r.var[ch];
            *d = T::from_acc(keep.mul(d.to_acc()).add(m.mul(var.mul(r.unbias))));
        }
    }
    Ok(())
}

/// Training batch norm: batch statistics, optional running-stat update.
fn bn_train<T: Acc>(
    ctx: &mut KernelContext,
    [xi, wi, bi]: [usize; 3],
    running: Option<[usize; 2]>,
    momentum: f64,
    eps: f64,
    [out, save_mean, save_invstd]: [usize; 3],
) -> Result<(), KernelError>
where
    T::A: AccFloat,
{
    let x = *ctx.tensor(xi)?;
    let (n, c, inner) = bn_dims(&x)?;
    let count = n * inner;
    if count == 0 {
        return Err(KernelError::invalid(
            "batch_norm: training needs at least one value per channel",
        ));
    }
    let w = Param::at(ctx, wi, c, "batch_norm weight", xi)?;
    let b = Param::at(ctx, bi, c, "batch_norm bias", xi)?;
    if let Some(stats) = running {
        for t in stats {
            if ctx.tensor(t)?.numel() != c {
                return Err(KernelError::shape(
                    "batch_norm: running stats do not match the channels",
                ));
            }
        }
    }
    let eps = T::A::from_f64(eps);
    let momentum = T::A::from_f64(momentum);
    let unbias = if count == 1 {
        T::A::from_f64(f64::INFINITY)
    } else {
        T::A::from_f64(count as f64 / (count - 1) as f64)
    };
    ctx.resize(out, x.sizes())?;
    ctx.resize(save_mean, &[c])?;
    ctx.resize(save_invstd, &[c])?;
    let dims = (n, c, inner);
    match running {
        Some([rm, rv]) => {
            let ([xr, wr, br], [mut o, mut sm, mut si, mut rmo, mut rvo]) =
                ctx.io([xi, w.arg, b.arg], [out, save_mean, save_invstd, rm, rv])?;
            let running = Running {
                mean: rmo.as_mut_slice::<T>()?,
                var: rvo.as_mut_slice::<T>()?,
                momentum,
                unbias,
            };
            bn_train_apply(
                xr.as_slice::<T>()?,
                dims,
                w.slice::<T>(&wr)?,
                b.slice::<T>(&br)?,
                eps,
                o.as_mut_slice::<T>()?,
                (sm.as_mut_slice::<T>()?, si.as_mut_slice::<T>()?),
                Some(running),
            )?;
        }
        None => {
            let ([xr, wr, br], [mut o, mut sm, mut si]) =
                ctx.io([xi, w.arg, b.arg], [out, save_mean, save_invstd])?;
            bn_train_apply(
                xr.as_slice::<T>()?,
                dims,
                w.slice::<T>(&wr)?,
                b.slice::<T>(&br)?,
                eps,
                o.as_mut_slice::<T>()?,
                (sm.as_mut_slice::<T>()?, si.as_mut_slice::<T>()?),
                None,
            )?;
        }
    }
    Ok(())
}

fn batch_norm_no_training_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    contiguous_all(ctx, &[0, 1, 2, 3, 4, 7])?;
    let eps = ctx.double(6)?;
    let dt = ctx.tensor(0)?.dtype();
    dispatch_float!(dt, T => bn_eval::<T>(ctx, [0, 1, 2, 3, 4], eps, 7, [8, 9]),
        _ => Err(KernelError::dtype(dt, "batch_norm")))
}

fn batch_norm_legit_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    contiguous_all(ctx, &[0, 1, 2, 3, 4, 8])?;
    let training = ctx.bool(5)?;
    let (momentum, eps) = (ctx.double(6)?, ctx.double(7)?);
    let dt = ctx.tensor(0)?.dtype();
    if training {
        dispatch_float!(dt, T => bn_train::<T>(ctx, [0, 1, 2], Some([3, 4]), momentum, eps, [8, 9, 10]),
            _ => Err(KernelError::dtype(dt, "batch_norm")))
    } else {
        dispatch_float!(dt, T => bn_eval::<T>(ctx, [0, 1, 2, 3, 4], eps, 8, [9, 10]),
            _ => Err(KernelError::dtype(dt, "batch_norm")))
    }
}

fn batch_norm_no_stats_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    contiguous_all(ctx, &[0, 1, 2, 6])?;
    if !ctx.bool(3)? {
        return Err(KernelError::invalid(
            "batch_norm without running stats needs training=True",
        ));
    }
    let (momentum, eps) = (ctx.double(4)?, ctx.double(5)?);
    let dt = ctx.tensor(0)?.dtype();
    dispatch_float!(dt, T => bn_train::<T>(ctx, [0, 1, 2], None, momentum, eps, [6, 7, 8]),
        _ => Err(KernelError::dtype(dt, "batch_norm")))
}

// ---- layer norm ----

fn layer_norm<T: Acc>(ctx: &mut KernelContext) -> Result<(), KernelError>
where
    T::A: AccFloat,
{
    let x = *ctx.tensor(0)?;
    let ns = ctx.int_list(1)?;
    let k = ns.len();
    if k == 0 || k > x.rank() {
        return Err(KernelError::shape(format!(
            "layer_norm: normalized_shape of {k} dims for input {:?}",
            x.sizes()
        )));
    }
    let axis = x.rank() - k;
    for j in 0..k {
        if ns.get(j)? != x.size(axis + j) as i64 {
            return Err(KernelError::shape(format!(
                "layer_norm: normalized_shape does not match input {:?}",
                x.sizes()
            )));
        }
    }
    let inner: usize = x.sizes()[axis..].iter().product();
    let rows: usize = x.sizes()[..axis].iter().product();
    let eps = T::A::from_f64(ctx.double(4)?);
    let w = Param::at(ctx, 2, inner, "layer_norm weight", 0)?;
    let b = Param::at(ctx, 3, inner, "layer_norm bias", 0)?;
    let mut stat = x.dims();
    for s in &mut stat.as_mut_slice()[axis..] {
        *s = 1;
    }
    ctx.resize(5, x.sizes())?;
    ctx.resize(6, &stat)?;
    ctx.resize(7, &stat)?;
    let ([xr, wr, br], [mut o, mut mo, mut ro]) = ctx.io([0, w.arg, b.arg], [5, 6, 7])?;
    let (w, b) = (w.slice::<T>(&wr)?, b.slice::<T>(&br)?);
    let (xs, os) = (xr.as_slice::<T>()?, o.as_mut_slice::<T>()?);
    let (ms, rs) = (mo.as_mut_slice::<T>()?, ro.as_mut_slice::<T>()?);
    if inner == 0 {
        // Empty rows: PyTorch gives mean 0 and rstd NaN.
        ms.fill(T::from_acc(T::A::ZERO));
        rs.fill(T::from_acc(T::A::from_f64(f64::NAN)));
        return Ok(());
    }
    for r in 0..rows {
        let row = &xs[r * inner..(r + 1) * inner];
        let (mean, var) = moments(row);
        let rstd = T::A::ONE / var.add(eps).sqrt();
        ms[r] = T::from_acc(mean);
        rs[r] = T::from_acc(rstd);
        let orow = &mut os[r * inner..(r + 1) * inner];
        for j in 0..inner {
            let mut v = row[j].to_acc().sub(mean).mul(rstd);
            if let Some(w) = w {
                v = v.mul(w[j].to_acc());
            }
            if let Some(b) = b {
                v = v.add(b[j].to_acc());
            }
            orow[j] = T::from_acc(v);
        }
    }
    Ok(())
}

fn layer_norm_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    contiguous_all(ctx, &[0, 2, 3, 5, 6, 7])?;
    let dt = ctx.tensor(0)?.dtype();
    dispatch_float!(dt, T => layer_norm::<T>(ctx), _ => Err(KernelError::dtype(dt, "layer_norm")))
}

// ---- group norm ----

fn group_norm<T: Acc>(ctx: &mut KernelContext) -> Result<(), KernelError>
where
    T::A: AccFloat,
{
    let x = *ctx.tensor(0)?;
    let as_usize = |v: i64, what: &str| {
        usize::try_from(v).map_err(|_| KernelError::invalid(format!("group_norm: negative {what}")))
    };
    let n = as_usize(ctx.int(3)?, "N")?;
    let c = as_usize(ctx.int(4)?, "C")?;
    let hw = as_usize(ctx.int(5)?, "HxW")?;
    let groups = as_usize(ctx.int(6)?, "group")?;
    let eps = T::A::from_f64(ctx.double(7)?);
    if x.rank() < 2 || x.size(0) != n || x.size(1) != c || x.numel() != n * c * hw {
        return Err(KernelError::shape(format!(
            "group_norm: input {:?} does not match N={n}, C={c}, HxW={hw}",
            x.sizes()
        )));
    }
    if groups == 0 || c % groups != 0 {
        return Err(KernelError::shape(format!(
            "group_norm: {c} channels not divisible into {groups} groups"
        )));
    }
    let w = Param::at(ctx, 1, c, "group_norm weight", 0)?;
    let b = Param::at(ctx, 2, c, "group_norm bias", 0)?;
    ctx.resize(8, x.sizes())?;
    ctx.resize(9, &[n, groups])?;
    ctx.resize(10, &[n, groups])?;
    let ([xr, wr, br], [mut o, mut mo, mut ro]) = ctx.io([0, w.arg, b.arg], [8, 9, 10])?;
    let (w, b) = (w.slice::<T>(&wr)?, b.slice::<T>(&br)?);
    let (xs, os) = (xr.as_slice::<T>()?, o.as_mut_slice::<T>()?);
    let (ms, rs) = (mo.as_mut_slice::<T>()?, ro.as_mut_slice::<T>()?);
    let cg = c / groups;
    let blk = cg * hw;
    for i in 0..n * groups {
        let xb = &xs[i * blk..(i + 1) * blk];
        let (mean, var) = if blk == 0 {
            (T::A::ZERO, T::A::ZERO)
        } else {
            moments(xb)
        };
        let rstd = T::A::ONE / var.add(eps).sqrt();
        ms[i] = T::from_acc(mean);
        rs[i] = T::from_acc(rstd);
        let ob = &mut os[i * blk..(i + 1) * blk];
        for cc in 0..cg {
            let ch = (i % groups) * cg + cc;
            let a = w.map_or(rstd, |w| rstd.mul(w[ch].to_acc()));
            let bb = param_or(b, ch, T::A::ZERO).sub(mean.mul(a));
            for (o, &v) in ob[cc * hw..(cc + 1) * hw]
                .iter_mut()
                .zip(&xb[cc * hw..(cc + 1) * hw])
            {
                *o = T::from_acc(v.to_acc().mul(a).add(bb));
            }
        }
    }
    Ok(())
}

fn group_norm_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    contiguous_all(ctx, &[0, 1, 2, 8, 9, 10])?;
    let dt = ctx.tensor(0)?.dtype();
    dispatch_float!(dt, T => group_norm::<T>(ctx), _ => Err(KernelError::dtype(dt, "group_norm")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7) % 11) as f32 / 4.0 - 1.25).collect()
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{got:?}\nvs {want:?}"
            );
        }
    }

    // Reference values from PyTorch 2.9 (torch.ops.aten.*) on the same inputs.

    #[test]
    fn batch_norm_inference() {
        let cases: [(bool, f64, &[f32]); 2] = [
            (
                true,
                1e-5,
                &[
                    -0.849993, 0.899998, -0.099997, 1.649994, 1.272779, -1.555619, 3.394078,
                    0.56568, 0.419236, -0.818197, -0.111092, 0.596013, 0.899998, -0.099997,
                    1.649994, 0.649999, -1.555619, 3.394078, 0.56568, -2.262719, -0.818197,
                    -0.111092, 0.596013, -0.641421,
                ],
            ),
            (
                false,
                1e-3,
                &[
                    -1.349326, 0.3998, -0.5997, 1.149426, 0.635761, -0.777041, 1.695362, 0.28256,
                    -0.919009, 0.318119, -0.388812, -1.095742, 0.3998, -0.5997, 1.149426, 0.149925,
                    -0.777041, 1.695362, 0.28256, -1.130241, 0.318119, -0.388812, -1.095742,
                    0.141386,
                ],
            ),
        ];
        for (affine, eps, want) in cases {
            let mut c = TestCall::new();
            c.tensor(&[2, 3, 2, 2], &data(24));
            if affine {
                c.tensor(&[3], &[1.0f32, 2., -1.]);
                c.tensor(&[3], &[0.5f32, 0., -0.5]);
            } else {
                c.none();
                c.none();
            }
            c.tensor(&[3], &[0.1f32, -0.2, 0.3]);
            c.tensor(&[3], &[1.0f32, 0.5, 2.]);
            c.double(0.1);
            c.double(eps);
            let o = c.out(St::Float, &[2, 3, 2, 2]);
            let m = c.out(St::Float, &[3]);
            let s = c.out(St::Float, &[3]);
            c.none();
            c.check(check_batch_norm_no_training).unwrap();
            c.run(batch_norm_no_training_out).unwrap();
            close(&c.output::<f32>(o), want);
            assert_eq!(c.info(m).sizes(), &[0]);
            assert_eq!(c.info(s).sizes(), &[0]);
        }
    }

    #[test]
    fn batch_norm_training_updates_running_stats() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3, 4], &data(24));
        c.tensor(&[3], &[1.0f32, 2., -1.]);
        c.tensor(&[3], &[0.5f32, 0., -0.5]);
        let rm = c.tensor(&[3], &[0.1f32, -0.2, 0.3]);
        let rv = c.tensor(&[3], &[1.0f32, 0.5, 2.]);
        c.bool(true);
        c.double(0.1);
        c.double(1e-5);
        let o = c.out(St::Float, &[2, 3, 4]);
        let m = c.out(St::Float, &[0]);
        let s = c.out(St::Float, &[0]);
        c.none();
        c.check(check_batch_norm_legit).unwrap();
        c.run(batch_norm_legit_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -1.238624, 0.877962, -0.331516, 1.78507, 0.7782, -1.988734, 2.853402, 0.086467,
                0.437035, -1.74938, -0.5, 0.74938, 0.877962, -0.331516, 1.78507, 0.575592,
                -1.988734, 2.853402, 0.086467, -2.680468, -1.74938, -0.5, 0.74938, -1.437035,
            ],
        );
        close(&c.output::<f32>(m), &[0.1875, -0.03125, -0.25]);
        close(&c.output::<f32>(s), &[1.209477, 1.383467, 1.24938]);
        close(&c.output::<f32>(rm), &[0.10875, -0.183125, 0.245]);
        close(&c.output::<f32>(rv), &[0.978125, 0.50971, 1.873214]);

        let mut c = TestCall::new();
        c.tensor(&[2, 3, 4], &data(24));
        c.none();
        c.none();
        c.bool(true);
        c.double(0.1);
        c.double(1e-5);
        let o = c.out(St::Float, &[2, 3, 4]);
        let m = c.out(St::Float, &[3]);
        c.out(St::Float, &[3]);
        c.none();
        c.run(batch_norm_no_stats_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -1.738624, 0.377962, -0.831516, 1.28507, 0.3891, -0.994367, 1.426701, 0.043233,
                -0.937035, 1.24938, 0.0, -1.24938, 0.377962, -0.831516, 1.28507, 0.075592,
                -0.994367, 1.426701, 0.043233, -1.340234, 1.24938, 0.0, -1.24938, 0.937035,
            ],
        );
        close(&c.output::<f32>(m), &[0.1875, -0.03125, -0.25]);
    }

    #[test]
    fn layer_norm_cases() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3, 4], &data(24));
        c.int_list(&[4]);
        c.tensor(&[4], &[1.0f32, 0.5, -1., 2.]);
        c.tensor(&[4], &[0.0f32, 0.1, 0.2, 0.3]);
        c.double(1e-5);
        let o = c.out(St::Float, &[1, 1, 1]);
        let m = c.out(St::Float, &[1, 1, 1]);
        let r = c.out(St::Float, &[1, 1, 1]);
        c.none();
        c.check(check_layer_norm).unwrap();
        c.run(layer_norm_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -1.313057, 0.362611, 0.725223, 2.926114, 0.199997, -0.599991, -1.199982, -0.099995,
                -0.722891, 0.863052, -0.040964, -1.788353, 0.199997, -0.599991, -1.199982,
                -0.099995, -0.722891, 0.863052, -0.040964, -1.788353, 1.044176, -0.020482,
                1.726104, 1.745783,
            ],
        );
        assert_eq!(c.info(m).sizes(), &[2, 3, 1]);
        close(
            &c.output::<f32>(m),
            &[0.0, 0.125, -0.4375, 0.375, -0.1875, -0.0625],
        );
        close(
            &c.output::<f32>(r),
            &[1.050446, 1.599979, 1.28514, 1.599979, 1.28514, 1.28514],
        );

        let mut c = TestCall::new();
        c.tensor(&[2, 3, 4], &data(24));
        c.int_list(&[3, 4]);
        c.none();
        c.none();
        c.double(1e-5);
        let o = c.out(St::Float, &[1, 1, 1]);
        let m = c.out(St::Float, &[1, 1, 1]);
        let r = c.out(St::Float, &[1, 1, 1]);
        c.none();
        c.run(layer_norm_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -1.377144, 0.72613, -0.47574, 1.627533, 0.425663, -0.776208, 1.327065, 0.125195,
                -1.076676, 1.026598, -0.175273, -1.377144, 0.595678, -0.703984, 1.570425, 0.270763,
                -1.028899, 1.245509, -0.054153, -1.353814, 0.920594, -0.379068, -1.67873, 0.595678,
            ],
        );
        assert_eq!(c.info(r).sizes(), &[2, 1, 1]);
        close(&c.output::<f32>(m), &[-0.104167, 0.041667]);
        close(&c.output::<f32>(r), &[1.201871, 1.299662]);

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &data(6));
        c.int_list(&[2]);
        c.none();
        c.none();
        c.double(1e-5);
        c.out(St::Float, &[2, 3]);
        c.out(St::Float, &[2, 1]);
        c.out(St::Float, &[2, 1]);
        c.none();
        assert!(matches!(c.run(layer_norm_out), Err(KernelError::Shape(_))));
    }

    #[test]
    fn group_norm_case() {
        let mut c = TestCall::new();
        c.tensor(&[2, 4, 3], &data(24));
        c.tensor(&[4], &[1.0f32, 2., 3., 4.]);
        c.tensor(&[4], &[0.0f32, -1., 1., 0.5]);
        c.int(2);
        c.int(4);
        c.int(3);
        c.int(2);
        c.double(1e-5);
        let o = c.out(St::Float, &[2, 4, 3]);
        let m = c.out(St::Float, &[1, 1]);
        let r = c.out(St::Float, &[1, 1]);
        c.none();
        c.check(check_group_norm).unwrap();
        c.run(group_norm_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -1.393042, 0.696521, -0.497515, 2.184096, -0.203976, -2.592048, 5.08588, 1.453987,
                -2.177907, 4.737208, -0.105316, -4.94784, 0.286296, -1.087927, 1.316964, -1.114519,
                -3.862965, 0.946816, 1.858889, -2.26378, 4.950891, 0.270963, -5.225929, 4.393632,
            ],
        );
        assert_eq!(c.info(m).sizes(), &[2, 2]);
        close(
            &c.output::<f32>(m),
            &[-0.083333, -0.125, 0.291667, -0.208333],
        );
        close(
            &c.output::<f32>(r),
            &[1.194036, 1.210631, 1.374223, 1.374223],
        );
    }
}
