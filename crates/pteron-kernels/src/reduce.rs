//! Reductions over dims (sum, mean, amax/amin, argmax/argmin, var), softmax and log-softmax.
//!
//! Floating reductions accumulate in f64 and round once when storing (at least as accurate as
//! PyTorch's float accumulation), except the mean of float32/half/bfloat16 outputs, which sums
//! in float32 in index order as ExecuTorch's portable kernel does; integer sums accumulate in
//! i64 with wrapping, as C++ does.

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use pteron_core::DtypeSet;
use pteron_core::{
    dispatch_dtype, dispatch_float, ArgAccess, ArgView, Element, Kernel, KernelContext,
    KernelError, KernelRegistry, ScalarType, TensorInfo, MAX_RANK,
};

use crate::util::{for_each_strided, require_dtype, FLOATS, REALS, REALS_AND_BOOL};

pub mod more;

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    more::register::<S>(r);
    pteron_core::register_op!(
        S,
        r,
        "aten::sum.IntList_out",
        Kernel::with_check(sum_out, check_sum).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::mean.out",
        Kernel::with_check(mean_out, check_mean).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::mean.dtype_out",
        Kernel::with_check(mean_dtype_out, check_mean_dtype).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::amax.out",
        Kernel::with_check(amax_out, check_minmax).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::amin.out",
        Kernel::with_check(amin_out, check_minmax).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::argmax.out",
        Kernel::with_check(argmax_out, check_arg).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::argmin.out",
        Kernel::with_check(argmin_out, check_arg).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::var.correction_out",
        Kernel::with_check(var_correction_out, check_var).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::var.out",
        Kernel::with_check(var_out, check_var).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_softmax.out",
        Kernel::with_check(softmax_out, check_softmax).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_log_softmax.out",
        Kernel::with_check(log_softmax_out, check_softmax).dtypes(DtypeSet::FLOAT),
    );
}

/// Which dims are reduced, and the output sizes (with or without the reduced dims).
struct Plan {
    reduced: [bool; MAX_RANK],
    out: [usize; MAX_RANK],
    out_rank: usize,
}

/// `dims`: `None` or empty = all dims (PyTorch's meaning for `dim=None` / `dim=[]`).
fn plan(x: &TensorInfo, dims: Option<&[i64]>, keepdim: bool) -> Result<Plan, KernelError> {
    let rank = x.rank();
    let mut reduced = [false; MAX_RANK];
    match dims {
        Some(ds) if !ds.is_empty() => {
            for &d in ds {
                let d = x.dim_index(d)?;
                if rank == 0 {
                    continue;
                }
                if reduced[d] {
                    return Err(KernelError::invalid(format!(
                        "dim {d} appears twice in the reduction"
                    )));
                }
                reduced[d] = true;
            }
        }
        _ => reduced[..rank].iter_mut().for_each(|r| *r = true),
    }
    let mut out = [0usize; MAX_RANK];
    let mut n = 0;
    for d in 0..rank {
        if !reduced[d] {
            out[n] = x.size(d);
            n += 1;
        } else if keepdim {
            out[n] = 1;
            n += 1;
        }
    }
    Ok(Plan {
        reduced,
        out,
        out_rank: n,
    })
}

/// Calls `f(out_offset, input_offsets)` for each output element with an iterator over the input
/// offsets reduced into it. Input and output (`out`, of the plan's shape) are addressed through
/// their strides: any dim orders.
fn for_each_group(
    x: &TensorInfo,
    p: &Plan,
    out: &TensorInfo,
    mut f: impl FnMut(usize, &mut dyn FnMut(&mut dyn FnMut(usize))),
) {
    let strides = x.strides();
    let (mut kept_sizes, mut kept_strides, mut out_strides, mut red_sizes, mut red_strides) = (
        [0usize; MAX_RANK],
        [0usize; MAX_RANK],
        [0usize; MAX_RANK],
        [0usize; MAX_RANK],
        [0usize; MAX_RANK],
    );
    let (mut nk, mut nr) = (0, 0);
    // with keepdim (or nothing reduced) kept dim d is output dim d, else the nk-th
    let same_rank = p.out_rank == x.rank() && out.rank() == x.rank();
    for d in 0..x.rank() {
        if p.reduced[d] {
            red_sizes[nr] = x.size(d);
            red_strides[nr] = strides[d];
            nr += 1;
        } else {
            kept_sizes[nk] = x.size(d);
            kept_strides[nk] = strides[d];
            let od = if same_rank { d } else { nk };
            out_strides[nk] = out.strides().get(od).copied().unwrap_or(0);
            nk += 1;
        }
    }
    let (ks, kst, ost, rs, rst) = (
        &kept_sizes[..nk],
        &kept_strides[..nk],
        &out_strides[..nk],
        &red_sizes[..nr],
        &red_strides[..nr],
    );
    for_each_strided(ks, [kst, ost], |_, [base, o]| {
        f(o, &mut |g: &mut dyn FnMut(usize)| {
            for_each_strided(rs, [rst], |_, [off]| g(base + off));
        });
    });
}

fn reduce_dims(
    ctx: &KernelContext<'_, '_>,
    i: usize,
) -> Result<([i64; MAX_RANK], Option<usize>), KernelError> {
    let mut buf = [0i64; MAX_RANK];
    let n = match ctx.opt_int_list(i)? {
        None => None,
        Some(l) => Some(l.read_into(&mut buf)?.len()),
    };
    Ok((buf, n))
}

// ---------------------------------------------------------------------------------------------
// sum / mean

fn check_sum(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // sum.IntList_out(self, dim?, keepdim, *, dtype?, out)
    let x = v.tensor(0)?;
    let out = v.tensor(4)?;
    require_dtype("sum", x.dtype(), &REALS_AND_BOOL)?;
    require_dtype("sum", out.dtype(), &REALS_AND_BOOL)?;
    if let Some(d) = v.opt_dtype(3)? {
        if d != out.dtype() {
            return Err(KernelError::dtype_mismatch("sum", "out", d, out.dtype()));
        }
    }
    v.opt_int_list(1)?;
    Ok(())
}

fn check_mean(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // mean.out(self, dim?, keepdim, *, dtype?, out)
    let x = v.tensor(0)?;
    let out = v.tensor(4)?;
    require_dtype("mean", x.dtype(), &REALS_AND_BOOL)?;
    require_dtype("mean", out.dtype(), &FLOATS)
}

fn check_mean_dtype(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // mean.dtype_out(self, *, dtype?, out)
    require_dtype("mean", v.tensor(0)?.dtype(), &REALS_AND_BOOL)?;
    require_dtype("mean", v.tensor(2)?.dtype(), &FLOATS)
}

fn sum_into<X: Element, O: Element>(
    x: &[X],
    xi: &TensorInfo,
    p: &Plan,
    out: &mut [O],
    oi: &TensorInfo,
    mean: bool,
) {
    let count = xi.numel() / out.len().max(1);
    let float = O::DTYPE.is_floating() || mean;
    // ExecuTorch's mean.out sums float32 (and half/bfloat16) outputs in float32, element by
    // element in index order, and divides by the count in float32: the same operations give
    // the same bits (an RMSNorm whose output is quantized dynamically next is sensitive to its
    // last bit).
    let f32_mean = mean && O::DTYPE.is_floating() && O::DTYPE != ScalarType::Double;
    let x_float = X::DTYPE.is_floating();
    for_each_group(xi, p, oi, |o, each| {
        if f32_mean {
            let mut acc = 0f32;
            each(&mut |i| {
                acc += if x_float {
                    x[i].to_f64() as f32
                } else {
                    x[i].to_i64() as f32
                }
            });
            out[o] = O::from_f64((acc / count as f32) as f64);
        } else if float {
            let mut acc = 0f64;
            each(&mut |i| acc += x[i].to_f64());
            if mean {
                acc /= count as f64;
            }
            out[o] = O::from_f64(acc);
        } else {
            // Integer sums: each element is first converted to the output dtype (`dtype=`
            // casts the input before reducing), then summed with wrapping.
            let mut acc = 0i64;
            let x_float = X::DTYPE.is_floating();
            each(&mut |i| {
                let v = if x_float {
                    O::from_f64(x[i].to_f64())
                } else {
                    O::from_i64(x[i].to_i64())
                };
                acc = acc.wrapping_add(v.to_i64())
            });
            out[o] = O::from_i64(acc);
        }
    });
}

fn sum_like(
    ctx: &mut KernelContext<'_, '_>,
    dims_at: Option<usize>,
    keepdim_at: Option<usize>,
    out_at: usize,
    mean: bool,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (buf, n) = match dims_at {
        Some(i) => reduce_dims(ctx, i)?,
        None => ([0; MAX_RANK], None),
    };
    let keepdim = match keepdim_at {
        Some(i) => ctx.bool(i)?,
        None => false,
    };
    let p = plan(&x, n.map(|n| &buf[..n]), keepdim)?;
    ctx.resize(out_at, &p.out[..p.out_rank])?;
    let oi = *ctx.tensor(out_at)?;
    let ([xt], [mut ot]) = ctx.io([0], [out_at])?;
    let od = ot.info.dtype();
    dispatch_dtype!(x.dtype(), X => {
        let xs = xt.as_slice::<X>()?;
        dispatch_dtype!(od, O => sum_into::<X, O>(xs, &x, &p, ot.as_mut_slice::<O>()?, &oi, mean),
            _ => return Err(KernelError::dtype(od, "sum/mean output")))
    }, _ => return Err(KernelError::dtype(x.dtype(), "sum/mean")));
    Ok(())
}

fn sum_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sum_like(ctx, Some(1), Some(2), 4, false)
}

fn mean_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sum_like(ctx, Some(1), Some(2), 4, true)
}

fn mean_dtype_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sum_like(ctx, None, None, 2, true)
}

// ---------------------------------------------------------------------------------------------
// amax / amin

fn check_minmax(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // amax.out(self, dim[], keepdim, *, out)
    let (x, out) = (v.tensor(0)?, v.tensor(3)?);
    require_dtype("amax/amin", x.dtype(), &REALS_AND_BOOL)?;
    if x.dtype() != out.dtype() {
        return Err(KernelError::dtype_mismatch(
            "amax/amin",
            "out",
            x.dtype(),
            out.dtype(),
        ));
    }
    Ok(())
}

fn extreme<T: Element>(
    x: &[T],
    xi: &TensorInfo,
    p: &Plan,
    out: &mut [T],
    oi: &TensorInfo,
    max: bool,
) {
    for_each_group(xi, p, oi, |o, each| {
        let mut best: Option<T> = None;
        each(&mut |i| {
            let v = x[i];
            best = Some(match best {
                None => v,
                // NaN propagates: a NaN compares unordered and wins.
                Some(b) if b.partial_cmp(&b).is_none() => b,
                Some(_) if v.partial_cmp(&v).is_none() => v,
                Some(b) => {
                    if (max && v > b) || (!max && v < b) {
                        v
                    } else {
                        b
                    }
                }
            });
        });
        out[o] = best.unwrap_or_default();
    });
}

fn minmax(ctx: &mut KernelContext<'_, '_>, max: bool) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (buf, n) = reduce_dims(ctx, 1)?;
    let keepdim = ctx.bool(2)?;
    let p = plan(&x, n.map(|n| &buf[..n]), keepdim)?;
    if x.numel() == 0 {
        return Err(KernelError::invalid("amax/amin of an empty tensor"));
    }
    ctx.resize(3, &p.out[..p.out_rank])?;
    let oi = *ctx.tensor(3)?;
    let ([xt], [mut ot]) = ctx.io([0], [3])?;
    dispatch_dtype!(x.dtype(), T => extreme::<T>(xt.as_slice()?, &x, &p, ot.as_mut_slice()?, &oi, max),
        _ => return Err(KernelError::dtype(x.dtype(), "amax/amin")));
    Ok(())
}

fn amax_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    minmax(ctx, true)
}
fn amin_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    minmax(ctx, false)
}

// ---------------------------------------------------------------------------------------------
// argmax / argmin

fn check_arg(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // argmax.out(self, dim?, keepdim, *, out)
    require_dtype("argmax/argmin", v.tensor(0)?.dtype(), &REALS)?;
    require_dtype("argmax/argmin", v.tensor(3)?.dtype(), &[ScalarType::Long])
}

fn arg_extreme<T: Element>(
    x: &[T],
    xi: &TensorInfo,
    p: &Plan,
    out: &mut [i64],
    oi: &TensorInfo,
    max: bool,
) {
    for_each_group(xi, p, oi, |o, each| {
        let mut best: Option<(T, i64)> = None;
        let mut k = 0i64;
        each(&mut |i| {
            let v = x[i];
            best = match best {
                None => Some((v, k)),
                Some((b, bi)) if b.partial_cmp(&b).is_none() => Some((b, bi)),
                Some(_) if v.partial_cmp(&v).is_none() => Some((v, k)),
                Some((b, bi)) => {
                    if (max && v > b) || (!max && v < b) {
                        Some((v, k))
                    } else {
                        Some((b, bi))
                    }
                }
            };
            k += 1;
        });
        out[o] = best.map_or(0, |b| b.1);
    });
}

fn arg(ctx: &mut KernelContext<'_, '_>, max: bool) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dim = ctx.opt_int(1)?;
    let keepdim = ctx.bool(2)?;
    if x.numel() == 0 {
        return Err(KernelError::invalid("argmax/argmin of an empty tensor"));
    }
    let d = [dim.unwrap_or(0)];
    let mut p = plan(&x, dim.map(|_| &d[..]), keepdim)?;
    if dim.is_none() && keepdim {
        // Flattened reduction with keepdim keeps every dim as 1.
        p.out[..x.rank()].iter_mut().for_each(|s| *s = 1);
    } else if dim.is_none() {
        p.out_rank = 0;
    }
    ctx.resize(3, &p.out[..p.out_rank])?;
    let oi = *ctx.tensor(3)?;
    let ([xt], [mut ot]) = ctx.io([0], [3])?;
    dispatch_dtype!(x.dtype(), T => arg_extreme::<T>(xt.as_slice()?, &x, &p, ot.as_mut_slice()?, &oi, max),
        _ => return Err(KernelError::dtype(x.dtype(), "argmax/argmin")));
    Ok(())
}

fn argmax_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    arg(ctx, true)
}
fn argmin_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    arg(ctx, false)
}

// ---------------------------------------------------------------------------------------------
// var

fn check_var(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // var.correction_out(self, dim?, *, correction?, keepdim, out); var.out(self, dim?, unbiased, keepdim, *, out)
    require_dtype("var", v.tensor(0)?.dtype(), &FLOATS)?;
    require_dtype("var", v.tensor(4)?.dtype(), &FLOATS)
}

fn var_into<X: Element, O: Element>(
    x: &[X],
    xi: &TensorInfo,
    p: &Plan,
    out: &mut [O],
    oi: &TensorInfo,
    correction: f64,
) {
    let count = (xi.numel() / out.len().max(1)) as f64;
    for_each_group(xi, p, oi, |o, each| {
        let mut sum = 0f64;
        each(&mut |i| sum += x[i].to_f64());
        let mean = sum / count;
        let mut sq = 0f64;
        each(&mut |i| {
            let d = x[i].to_f64() - mean;
            sq += d * d;
        });
        let denom = count - correction;
        out[o] = O::from_f64(if denom <= 0.0 { f64::NAN } else { sq / denom });
    });
}

fn var_common(
    ctx: &mut KernelContext<'_, '_>,
    correction: f64,
    keepdim: bool,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (buf, n) = reduce_dims(ctx, 1)?;
    let p = plan(&x, n.map(|n| &buf[..n]), keepdim)?;
    ctx.resize(4, &p.out[..p.out_rank])?;
    let oi = *ctx.tensor(4)?;
    let ([xt], [mut ot]) = ctx.io([0], [4])?;
    let od = ot.info.dtype();
    dispatch_float!(x.dtype(), X => {
        let xs = xt.as_slice::<X>()?;
        dispatch_float!(od, O => var_into::<X, O>(xs, &x, &p, ot.as_mut_slice::<O>()?, &oi, correction),
            _ => return Err(KernelError::dtype(od, "var output")))
    }, _ => return Err(KernelError::dtype(x.dtype(), "var")));
    Ok(())
}

fn var_correction_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let correction = ctx.opt_scalar(2)?.map_or(1.0, |s| s.to_f64());
    let keepdim = ctx.bool(3)?;
    var_common(ctx, correction, keepdim)
}

fn var_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let correction = if ctx.bool(2)? { 1.0 } else { 0.0 };
    let keepdim = ctx.bool(3)?;
    var_common(ctx, correction, keepdim)
}

// ---------------------------------------------------------------------------------------------
// softmax / log_softmax

fn check_softmax(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    // _softmax.out(self, dim, half_to_float, *, out)
    let (x, out) = (v.tensor(0)?, v.tensor(3)?);
    require_dtype("softmax", x.dtype(), &FLOATS)?;
    if v.bool(2)? {
        return Err(KernelError::unsupported("softmax with half_to_float=True"));
    }
    if x.dtype() != out.dtype() {
        return Err(KernelError::dtype_mismatch(
            "softmax",
            "out",
            x.dtype(),
            out.dtype(),
        ));
    }
    Ok(())
}

/// Softmax along `dim` of `x` into `out`, both read and written through their strides (any
/// dim orders).
fn softmax_into<T: Element>(
    x: &[T],
    xi: &TensorInfo,
    out: &mut [T],
    oi: &TensorInfo,
    dim: usize,
    log: bool,
) {
    let rank = xi.rank();
    let (n, sx, so) = if rank == 0 {
        (1, 0, 0)
    } else {
        (xi.size(dim), xi.strides()[dim], oi.strides()[dim])
    };
    // the other dims: sizes and the strides of both tensors
    let (mut sizes, mut xs, mut os) = ([0usize; MAX_RANK], [0usize; MAX_RANK], [0usize; MAX_RANK]);
    let mut k = 0;
    for d in (0..rank).filter(|&d| d != dim) {
        sizes[k] = xi.size(d);
        xs[k] = xi.strides()[d];
        os[k] = oi.strides()[d];
        k += 1;
    }
    for_each_strided(&sizes[..k], [&xs[..k], &os[..k]], |_, [xb, ob]| {
        let mut max = f64::NEG_INFINITY;
        for j in 0..n {
            let v = x[xb + j * sx].to_f64();
            if v > max || v.is_nan() {
                max = v;
            }
        }
        let mut sum = 0f64;
        for j in 0..n {
            sum += (x[xb + j * sx].to_f64() - max).exp();
        }
        for j in 0..n {
            let z = x[xb + j * sx].to_f64() - max;
            out[ob + j * so] = T::from_f64(if log { z - sum.ln() } else { z.exp() / sum });
        }
    });
}

fn softmax_common(ctx: &mut KernelContext<'_, '_>, log: bool) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dim = if x.rank() == 0 {
        x.dim_index(ctx.int(1)?)?;
        0
    } else {
        x.dim_index(ctx.int(1)?)?
    };
    ctx.resize(3, x.sizes())?;
    let oi = *ctx.tensor(3)?;
    let ([xt], [mut ot]) = ctx.io([0], [3])?;
    dispatch_float!(x.dtype(), T => softmax_into::<T>(xt.as_slice()?, &x, ot.as_mut_slice()?, &oi, dim, log),
        _ => return Err(KernelError::dtype(x.dtype(), "softmax")));
    Ok(())
}

fn softmax_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    softmax_common(ctx, false)
}
fn log_softmax_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    softmax_common(ctx, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() <= 1e-5 * y.abs().max(1.0), "{a:?} vs {b:?}");
        }
    }

    const X: [f32; 6] = [1., 2., 3., 4., 5., 6.];

    #[test]
    fn sum_and_mean_over_dims() {
        // (dims, keepdim, expected sizes, expected sum) for x = arange(1, 7).reshape(2, 3)
        let cases: &[(Option<&[i64]>, bool, &[usize], &[f32])] = &[
            (Some(&[1]), false, &[2], &[6., 15.]),
            (Some(&[0]), true, &[1, 3], &[5., 7., 9.]),
            (Some(&[-1, 0]), false, &[], &[21.]),
            (None, false, &[], &[21.]),
            (Some(&[]), true, &[1, 1], &[21.]),
        ];
        for &(dims, keepdim, sizes, want) in cases {
            for mean in [false, true] {
                let mut c = TestCall::new();
                c.tensor(&[2, 3], &X);
                match dims {
                    Some(d) => c.int_list(d),
                    None => c.none(),
                };
                c.bool(keepdim);
                c.none();
                let o = c.out(ScalarType::Float, sizes);
                c.ret(o);
                c.run(if mean { mean_out } else { sum_out }).unwrap();
                assert_eq!(c.info(o).sizes(), sizes);
                let n = 6.0 / want.len() as f32;
                let w: Vec<f32> = want.iter().map(|v| if mean { v / n } else { *v }).collect();
                close(&c.output::<f32>(o), &w);
            }
        }
    }

    /// A float32 mean sums in float32, in index order, and divides in float32, as ExecuTorch's
    /// portable mean.out: near 1e8 float32 values are multiples of 8, so 1e8 + 1 and 1e8 + 3
    /// round back to 1e8 (a float64 sum keeps them: 0.5 and 1.25 instead of 0.25 and 0.625).
    #[test]
    fn float32_mean_sums_in_float32_in_order() {
        let x = [1e8f32, 3., 1., 1., -1e8, 2., 1., 2.];
        type Case<'a> = (Option<&'a [i64]>, &'a [usize], &'a [f32]);
        let cases: [Case; 2] = [
            // Columns of the 4 x 2 tensor: (1e8 + 1 - 1e8 + 1) / 4, (3 + 1 + 2 + 2) / 4.
            (Some(&[0]), &[2], &[0.25, 2.0]),
            // Everything, in memory order: ((((1e8 + 3) + 1) + 1) - 1e8 + 2 + 1 + 2) / 8.
            (None, &[], &[0.625]),
        ];
        for (dims, sizes, want) in cases {
            let mut c = TestCall::new();
            c.tensor(&[4, 2], &x);
            match dims {
                Some(d) => c.int_list(d),
                None => c.none(),
            };
            c.bool(false);
            c.none();
            let o = c.out(ScalarType::Float, sizes);
            c.ret(o);
            c.run(mean_out).unwrap();
            assert_eq!(c.output::<f32>(o), want);
        }
    }

    #[test]
    fn integer_sum_keeps_integers() {
        let mut c = TestCall::new();
        c.tensor(&[3], &[i64::MAX, 1, 5]);
        c.int_list(&[0]);
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Long, &[]);
        c.ret(o);
        c.run(sum_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![i64::MIN + 5]);
    }

    #[test]
    fn sum_with_integer_dtype_casts_first() {
        // torch.sum(torch.tensor([1.7, 2.6, -0.5]), dtype=torch.int64) == 3
        let mut c = TestCall::new();
        c.tensor(&[3], &[1.7f32, 2.6, -0.5]);
        c.none();
        c.bool(false);
        c.int(ScalarType::Long as i64);
        let o = c.out(ScalarType::Long, &[]);
        c.ret(o);
        c.run(sum_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![3]);
    }

    #[test]
    fn mean_rejects_integer_output_at_load() {
        let mut c = TestCall::new();
        c.tensor(&[2], &[1i64, 2]);
        c.none();
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Long, &[]);
        c.ret(o);
        assert!(matches!(
            c.check(check_mean),
            Err(KernelError::UnsupportedDType { .. })
        ));
    }

    #[test]
    fn argmax_first_occurrence_and_nan() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1f32, 7., 7., f32::NAN, 2., 9.]);
        c.int(1);
        c.bool(false);
        let o = c.out(ScalarType::Long, &[2]);
        c.ret(o);
        c.run(argmax_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![1, 0]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[3f32, 1., 4., 0.]);
        c.none();
        c.bool(false);
        let o = c.out(ScalarType::Long, &[]);
        c.ret(o);
        c.run(argmin_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![3]);
        assert_eq!(c.info(o).sizes(), &[] as &[usize]);
    }

    #[test]
    fn amax_amin() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1i32, 9, 3, -4, 5, 6]);
        c.int_list(&[0]);
        c.bool(true);
        let o = c.out(ScalarType::Int, &[1, 3]);
        c.ret(o);
        c.run(amax_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![1, 9, 6]);
        c.run(amin_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-4, 5, 3]);
    }

    #[test]
    fn softmax_matches_pytorch() {
        // torch.softmax(torch.arange(1., 7.).reshape(2, 3), dim=0) and log_softmax over dim=1
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &X);
        c.int(0);
        c.bool(false);
        let o = c.out(ScalarType::Float, &[2, 3]);
        c.ret(o);
        c.run(softmax_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                0.047425874,
                0.047425874,
                0.047425874,
                0.95257413,
                0.95257413,
                0.95257413,
            ],
        );

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &X);
        c.int(-1);
        c.bool(false);
        let o = c.out(ScalarType::Float, &[2, 3]);
        c.ret(o);
        c.run(log_softmax_out).unwrap();
        close(
            &c.output::<f32>(o),
            &[
                -2.4076059,
                -1.4076059,
                -0.40760595,
                -2.4076059,
                -1.4076059,
                -0.40760595,
            ],
        );
    }

    #[test]
    fn softmax_is_stable_for_large_inputs() {
        let mut c = TestCall::new();
        c.tensor(&[2], &[1000f32, 1000.]);
        c.int(0);
        c.bool(false);
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        c.run(softmax_out).unwrap();
        close(&c.output::<f32>(o), &[0.5, 0.5]);
    }

    #[test]
    fn var_with_correction() {
        // torch.var(x, dim=1, correction=1) = [1, 1]; correction=0 → [2/3, 2/3]
        for (corr, want) in [(1.0, [1.0f32, 1.0]), (0.0, [2.0 / 3.0, 2.0 / 3.0])] {
            let mut c = TestCall::new();
            c.tensor(&[2, 3], &X);
            c.int_list(&[1]);
            c.double(corr);
            c.bool(false);
            let o = c.out(ScalarType::Float, &[2]);
            c.ret(o);
            c.run(var_correction_out).unwrap();
            close(&c.output::<f32>(o), &want);
        }
    }
}
