//! More reductions: max/min (with indices and full), prod, var_mean, any, cumsum, topk.
//! Inputs are read in logical order through their strides, so any dim order works; each output
//! element folds its group straight from the input, so running allocates nothing.

use pteron_core::{
    ArgAccess, ArgView, Dims, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    ScalarType, TensorInfo, MAX_RANK,
};

use crate::elementwise::engine::*;
use crate::with_num;

/// Which dims a reduction folds: output elements walk the kept dims in logical order, and each
/// folds its group (the reduced dims) in row-major order.
pub(crate) struct RPlan {
    /// The output shape (keepdim or not).
    pub out_shape: Dims,
    pub out_numel: usize,
    /// Elements folded into each output element.
    pub group: usize,
    /// Kept dims: sizes, input strides, and the output dim each one is.
    kept: Dims,
    kept_in: Dims,
    kept_out_dim: [usize; MAX_RANK],
    /// Reduced dims: sizes and input strides.
    red: Dims,
    red_in: Dims,
}

pub(crate) fn rplan(
    x: &TensorInfo,
    dims: Option<&[i64]>,
    keepdim: bool,
) -> Result<RPlan, KernelError> {
    let rank = x.rank();
    let mut reduced = [false; MAX_RANK];
    match dims {
        Some(ds) if !ds.is_empty() => {
            for &d in ds {
                let d = x.dim_index(d)?;
                if rank > 0 {
                    if reduced[d] {
                        return Err(KernelError::invalid(format!(
                            "dim {d} appears multiple times in the list of dims"
                        )));
                    }
                    reduced[d] = true;
                }
            }
        }
        _ => reduced[..rank].iter_mut().for_each(|r| *r = true),
    }
    let mut p = RPlan {
        out_shape: Dims::new(),
        out_numel: 1,
        group: 1,
        kept: Dims::new(),
        kept_in: Dims::new(),
        kept_out_dim: [0; MAX_RANK],
        red: Dims::new(),
        red_in: Dims::new(),
    };
    for d in 0..rank {
        let (size, stride) = (x.size(d), x.strides()[d]);
        if reduced[d] {
            p.red.push(size)?;
            p.red_in.push(stride)?;
            p.group *= size;
            if keepdim {
                p.out_shape.push(1)?;
            }
        } else {
            p.kept_out_dim[p.kept.len()] = p.out_shape.len();
            p.kept.push(size)?;
            p.kept_in.push(stride)?;
            p.out_numel *= size;
            p.out_shape.push(size)?;
        }
    }
    Ok(p)
}

impl RPlan {
    /// Calls `f(base, a, b)` for every output element in logical order: `base` is the input
    /// offset its group starts at, `a` and `b` its offsets in outputs `oa` and `ob` (tensors of
    /// shape `out_shape`, any dim order; pass one twice for a single output).
    pub(crate) fn for_each_out(
        &self,
        oa: &TensorInfo,
        ob: &TensorInfo,
        mut f: impl FnMut(usize, usize, usize),
    ) {
        let (mut sa, mut sb) = (self.kept, self.kept);
        for (i, &d) in self.kept_out_dim[..self.kept.len()].iter().enumerate() {
            sa.as_mut_slice()[i] = oa.strides()[d];
            sb.as_mut_slice()[i] = ob.strides()[d];
        }
        walk(&self.kept, [&self.kept_in, &sa, &sb], |[i, a, b]| {
            f(i, a, b)
        });
    }

    /// Calls `f(offset)` for every input element of the group starting at `base`, in row-major
    /// order of the reduced dims.
    pub(crate) fn for_each_in_group(&self, base: usize, mut f: impl FnMut(usize)) {
        walk(&self.red, [&self.red_in], |[o]| f(base + o));
    }
}

fn nonempty(p: &RPlan, op: &str) -> Result<(), KernelError> {
    if p.group == 0 && p.out_numel > 0 {
        return Err(KernelError::invalid(format!(
            "{op}: expected reduction dim to have non-zero size"
        )));
    }
    if p.group == 0 {
        return Err(KernelError::invalid(format!(
            "{op}: cannot reduce an empty tensor"
        )));
    }
    Ok(())
}

#[inline]
fn better<C: Num>(new: C, cur: C, max: bool) -> bool {
    if cur.is_nan() {
        return false;
    }
    if new.is_nan() {
        return true;
    }
    if max {
        new > cur
    } else {
        new < cur
    }
}

// ---- max.dim_max / min.dim_min ----

fn check_dim_max(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let x = v.tensor(0)?.dtype();
    require_supported("max/min", x)?;
    let values = v.tensor(3)?.dtype();
    if values != x {
        return Err(KernelError::dtype_mismatch("max/min", "values", x, values));
    }
    if v.tensor(4)?.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(
            v.tensor(4)?.dtype(),
            "max/min indices must be int64",
        ));
    }
    Ok(())
}

/// max.dim_max / min.dim_min: [self, dim, keepdim, values, indices].
fn dim_extreme(ctx: &mut KernelContext<'_, '_>, max: bool) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dim = ctx.int(1)?;
    let keepdim = ctx.bool(2)?;
    let p = rplan(&x, Some(&[dim]), keepdim)?;
    nonempty(&p, "max/min")?;
    ctx.resize(3, &p.out_shape)?;
    ctx.resize(4, &p.out_shape)?;
    let ([xt], [mut vo, mut io]) = ctx.io([0], [3, 4])?;
    let (vi, ii) = (vo.info, io.info);
    let xs = Elems::of(&xt)?;
    let (mut vs, mut is) = (ElemsMut::of(&mut vo)?, ElemsMut::of(&mut io)?);
    with_num!(comp_kind(x.dtype())?, C => {
        p.for_each_out(vi, ii, |base, ov, oi| {
            let (mut best, mut at, mut pos) = (C::ZERO, -1i64, 0);
            p.for_each_in_group(base, |o| {
                let v = xs.get::<C>(o);
                if at < 0 || better(v, best, max) {
                    (best, at) = (v, pos);
                }
                pos += 1;
            });
            vs.set(ov, best);
            is.set(oi, at);
        });
    });
    Ok(())
}

fn max_dim_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    dim_extreme(ctx, true)
}

fn min_dim_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    dim_extreme(ctx, false)
}

fn check_same<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let x = v.tensor(0)?.dtype();
    require_supported("reduction", x)?;
    let od = out_dtype(v, OUT)?;
    if od != x {
        return Err(KernelError::dtype_mismatch("reduction", "out", x, od));
    }
    Ok(())
}

/// max.unary_out / min.unary_out: [self, out] (0-d out).
fn full_extreme(ctx: &mut KernelContext<'_, '_>, max: bool) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let p = rplan(&x, None, false)?;
    nonempty(&p, "max/min")?;
    ctx.resize(1, &p.out_shape)?;
    let ([xt], [mut o]) = ctx.io([0], [1])?;
    let oi = o.info;
    let xs = Elems::of(&xt)?;
    let mut os = ElemsMut::of(&mut o)?;
    with_num!(comp_kind(x.dtype())?, C => {
        p.for_each_out(oi, oi, |base, out, _| {
            let mut best: Option<C> = None;
            p.for_each_in_group(base, |i| {
                let v = xs.get::<C>(i);
                let take = match best {
                    None => true,
                    Some(c) => better(v, c, max),
                };
                if take {
                    best = Some(v);
                }
            });
            os.set(out, best.unwrap_or(C::ZERO));
        });
    });
    Ok(())
}

fn max_unary_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    full_extreme(ctx, true)
}

fn min_unary_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    full_extreme(ctx, false)
}

// ---- prod ----

fn check_prod<const DT: usize, const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("prod", v.tensor(0)?.dtype())?;
    let o = out_dtype(v, OUT)?;
    require_supported("prod", o)?;
    if let Some(d) = v.opt_dtype(DT)? {
        if d != o {
            return Err(KernelError::invalid(format!(
                "prod: dtype={d} but out is {o}"
            )));
        }
    }
    Ok(())
}

/// Element `i` of `xs` as `C`, cast through `dtype` (the `dtype=` argument) if given.
#[inline]
fn load_as<C: Comp>(xs: &Elems<'_>, i: usize, dtype: Option<ScalarType>) -> C {
    let v = xs.get::<C>(i);
    match dtype {
        Some(d) => round1(v, d),
        None => v,
    }
}

fn prod_impl(
    ctx: &mut KernelContext<'_, '_>,
    dims: Option<i64>,
    keepdim: bool,
    dt: usize,
    out: usize,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dtype = ctx.opt_dtype(dt)?;
    let d = dims.map(|d| [d]);
    let p = rplan(&x, d.as_ref().map(|d| &d[..]), keepdim)?;
    ctx.resize(out, &p.out_shape)?;
    let ([xt], [mut o]) = ctx.io([0], [out])?;
    let oi = o.info;
    let xs = Elems::of(&xt)?;
    let mut os = ElemsMut::of(&mut o)?;
    fn go<C: Num>(
        p: &RPlan,
        xs: &Elems<'_>,
        dtype: Option<ScalarType>,
        oi: &TensorInfo,
        os: &mut ElemsMut<'_>,
    ) {
        p.for_each_out(oi, oi, |base, out, _| {
            let mut acc = C::ONE;
            p.for_each_in_group(base, |i| acc = acc.mul(load_as::<C>(xs, i, dtype)));
            os.set(out, acc);
        });
    }
    if oi.dtype().is_floating() {
        go::<f64>(&p, &xs, dtype, oi, &mut os);
    } else {
        go::<i64>(&p, &xs, dtype, oi, &mut os);
    }
    Ok(())
}

/// prod.out: [self, dtype, out].
fn prod_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    prod_impl(ctx, None, false, 1, 2)
}

/// prod.int_out: [self, dim, keepdim, dtype, out].
fn prod_int_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (d, k) = (ctx.int(1)?, ctx.bool(2)?);
    prod_impl(ctx, Some(d), k, 3, 4)
}

// ---- var_mean ----

fn check_var_mean(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let x = v.tensor(0)?.dtype();
    if !x.is_floating() {
        return Err(KernelError::dtype(
            x,
            "var_mean supports floating inputs only",
        ));
    }
    for i in [4, 5] {
        require_can_cast("var_mean", x, out_dtype(v, i)?)?;
    }
    Ok(())
}

/// var_mean.correction_out: [self, dim?, correction?, keepdim, out0 (var), out1 (mean)].
fn var_mean_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    if !x.dtype().is_floating() {
        return Err(KernelError::dtype(
            x.dtype(),
            "var_mean supports floating inputs only",
        ));
    }
    let mut buf = [0i64; MAX_RANK];
    let dims = match ctx.opt_int_list(1)? {
        Some(l) => Some(l.read_into(&mut buf)?.len()),
        None => None,
    };
    let correction = ctx.opt_scalar(2)?.map_or(1.0, |s| s.to_f64());
    let keepdim = ctx.bool(3)?;
    let p = rplan(&x, dims.map(|n| &buf[..n]), keepdim)?;
    ctx.resize(4, &p.out_shape)?;
    ctx.resize(5, &p.out_shape)?;
    let ([xt], [mut vo, mut mo]) = ctx.io([0], [4, 5])?;
    let (vi, mi) = (vo.info, mo.info);
    let xs = Elems::of(&xt)?;
    let (mut vs, mut ms) = (ElemsMut::of(&mut vo)?, ElemsMut::of(&mut mo)?);
    let n = p.group as f64;
    let div = (n - correction).max(0.0);
    p.for_each_out(vi, mi, |base, ov, om| {
        let mut sum = 0.0f64;
        p.for_each_in_group(base, |i| sum += xs.get::<f64>(i));
        let mean = sum / n;
        let mut m2 = 0.0f64;
        p.for_each_in_group(base, |i| {
            let d = xs.get::<f64>(i) - mean;
            m2 += d * d;
        });
        vs.set(ov, m2 / div);
        ms.set(om, mean);
    });
    Ok(())
}

// ---- any ----

fn check_any<const OUT: usize>(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    require_supported("any", v.tensor(0)?.dtype())?;
    let o = out_dtype(v, OUT)?;
    if o != ScalarType::Bool && o != ScalarType::Byte {
        return Err(KernelError::dtype(o, "any: out must be bool or uint8"));
    }
    Ok(())
}

fn any_impl(
    ctx: &mut KernelContext<'_, '_>,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: usize,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let p = rplan(&x, dims, keepdim)?;
    ctx.resize(out, &p.out_shape)?;
    let ([xt], [mut o]) = ctx.io([0], [out])?;
    let oi = o.info;
    let xs = Elems::of(&xt)?;
    let mut os = ElemsMut::of(&mut o)?;
    p.for_each_out(oi, oi, |base, out, _| {
        let mut any = false;
        p.for_each_in_group(base, |i| any |= xs.get::<bool>(i));
        os.set(out, any);
    });
    Ok(())
}

/// any.all_out: [self, out].
fn any_all_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    any_impl(ctx, None, false, 1)
}

/// any.out: [self, dim, keepdim, out].
fn any_dim_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (d, k) = (ctx.int(1)?, ctx.bool(2)?);
    any_impl(ctx, Some(&[d]), k, 3)
}

/// any.dims_out: [self, dim?, keepdim, out]; an empty list reduces nothing... as PyTorch: all.
fn any_dims_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let mut buf = [0i64; MAX_RANK];
    let n = match ctx.opt_int_list(1)? {
        Some(l) => Some(l.read_into(&mut buf)?.len()),
        None => None,
    };
    let k = ctx.bool(2)?;
    any_impl(ctx, n.map(|n| &buf[..n]), k, 3)
}

// ---- cumsum ----

fn check_cumsum(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    check_prod::<2, 3>(v)
}

/// The lines of `x` along `dim`: their number of elements, the shape whose walk visits each
/// line's first element (`dim` set to 1), and the stride along `dim` of `x` and each of `outs`
/// (all 0 for a 0-d `x`, one line of one element).
fn lines<const K: usize>(
    x: &TensorInfo,
    dim: usize,
    outs: [&TensorInfo; K],
) -> (usize, Dims, usize, [usize; K]) {
    if x.rank() == 0 {
        return (1, Dims::new(), 0, [0; K]);
    }
    let mut starts = x.dims();
    starts.as_mut_slice()[dim] = 1;
    (
        x.size(dim),
        starts,
        x.strides()[dim],
        outs.map(|o| o.strides()[dim]),
    )
}

/// cumsum.out: [self, dim, dtype, out].
fn cumsum_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let dim = x.dim_index(ctx.int(1)?)?;
    let dtype = ctx.opt_dtype(2)?;
    ctx.resize(3, x.sizes())?;
    let ([xt], [mut o]) = ctx.io([0], [3])?;
    let oi = o.info;
    let xs = Elems::of(&xt)?;
    let mut os = ElemsMut::of(&mut o)?;
    fn scan<C: Num>(
        x: &TensorInfo,
        dim: usize,
        xs: &Elems<'_>,
        dtype: Option<ScalarType>,
        oi: &TensorInfo,
        os: &mut ElemsMut<'_>,
    ) {
        let (n, starts, xd, [od]) = lines(x, dim, [oi]);
        walk(&starts, [x.strides(), oi.strides()], |[xb, ob]| {
            let mut acc = C::ZERO;
            for k in 0..n {
                acc = acc.add(load_as::<C>(xs, xb + k * xd, dtype));
                os.set(ob + k * od, acc);
            }
        });
    }
    match oi.dtype() {
        ScalarType::Half | ScalarType::BFloat16 => scan::<f32>(&x, dim, &xs, dtype, oi, &mut os),
        d if d.is_floating() => scan::<f64>(&x, dim, &xs, dtype, oi, &mut os),
        _ => scan::<i64>(&x, dim, &xs, dtype, oi, &mut os),
    }
    Ok(())
}

// ---- topk ----

fn check_topk(v: &ArgView<'_, '_>) -> Result<(), KernelError> {
    let x = v.tensor(0)?.dtype();
    require_supported("topk", x)?;
    if x == ScalarType::Bool {
        return Err(KernelError::dtype(x, "topk"));
    }
    let values = v.tensor(5)?.dtype();
    if values != x {
        return Err(KernelError::dtype_mismatch("topk", "values", x, values));
    }
    if v.tensor(6)?.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(
            v.tensor(6)?.dtype(),
            "topk indices must be int64",
        ));
    }
    Ok(())
}

/// topk.values: [self, k, dim, largest, sorted, values, indices]. Results are always sorted;
/// NaN counts as larger than every number; ties keep the lower index first.
///
/// Each line's indices are kept sorted in the indices output itself (binary-search insertion,
/// dropping what falls past `k`), then the values are read through them.
fn topk_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let k = ctx.int(1)?;
    let dim = x.dim_index(ctx.int(2)?)?;
    let largest = ctx.bool(3)?;
    let n = if x.rank() == 0 { 1 } else { x.size(dim) };
    if k < 0 || k as usize > n {
        return Err(KernelError::invalid(format!(
            "topk: k ({k}) out of range for dimension of size {n}"
        )));
    }
    let k = k as usize;
    let mut shape = x.dims();
    if x.rank() > 0 {
        shape.as_mut_slice()[dim] = k;
    }
    ctx.resize(5, &shape)?;
    ctx.resize(6, &shape)?;
    let ([xt], [mut vo, mut io]) = ctx.io([0], [5, 6])?;
    let (vi, ii) = (vo.info, io.info);
    let xs = Elems::of(&xt)?;
    let mut vs = ElemsMut::of(&mut vo)?;
    let ids = io.as_mut_slice::<i64>()?;
    let (n, starts, xd, [vd, id]) = lines(&x, dim, [vi, ii]);
    if k == 0 {
        return Ok(());
    }
    with_num!(comp_kind(x.dtype())?, C => {
        // Whether `u` sorts strictly before `w`.
        let before = |u: C, w: C| {
            let ord = match (u.is_nan(), w.is_nan()) {
                (true, true) => core::cmp::Ordering::Equal,
                (true, false) => core::cmp::Ordering::Greater,
                (false, true) => core::cmp::Ordering::Less,
                _ => u.partial_cmp(&w).unwrap_or(core::cmp::Ordering::Equal),
            };
            let ord = if largest { ord.reverse() } else { ord };
            ord == core::cmp::Ordering::Less
        };
        walk(&starts, [x.strides(), vi.strides(), ii.strides()], |[xb, vb, ib]| {
            let at = |j: usize| xs.get::<C>(xb + j * xd);
            let slot = |p: usize| ib + p * id;
            let mut len = 0;
            for j in 0..n {
                let v = at(j);
                // After every kept element that v does not sort before: stable, like a sort.
                let (mut lo, mut hi) = (0, len);
                while lo < hi {
                    let mid = (lo + hi) / 2;
                    if before(v, at(ids[slot(mid)] as usize)) {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                if lo >= k {
                    continue;
                }
                for p in (lo..len.min(k - 1)).rev() {
                    ids[slot(p + 1)] = ids[slot(p)];
                }
                ids[slot(lo)] = j as i64;
                len = (len + 1).min(k);
            }
            for p in 0..k {
                vs.set(vb + p * vd, at(ids[slot(p)] as usize));
            }
        });
    });
    Ok(())
}

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::max.dim_max",
        Kernel::with_check(max_dim_out, check_dim_max).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::min.dim_min",
        Kernel::with_check(min_dim_out, check_dim_max).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::max.unary_out",
        Kernel::with_check(max_unary_out, check_same::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::min.unary_out",
        Kernel::with_check(min_unary_out, check_same::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::prod.out",
        Kernel::with_check(prod_out, check_prod::<1, 2>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::prod.int_out",
        Kernel::with_check(prod_int_out, check_prod::<3, 4>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::var_mean.correction_out",
        Kernel::with_check(var_mean_out, check_var_mean).dtypes(DtypeSet::FLOAT),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::any.all_out",
        Kernel::with_check(any_all_out, check_any::<1>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::any.out",
        Kernel::with_check(any_dim_out, check_any::<3>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::any.dims_out",
        Kernel::with_check(any_dims_out, check_any::<3>).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::cumsum.out",
        Kernel::with_check(cumsum_out, check_cumsum).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::topk.values",
        Kernel::with_check(topk_out, check_topk).dtypes(DtypeSet::REAL),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::tests_util::{b, close};
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, Value};

    #[test]
    fn max_min_with_indices() {
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1.0f32, 5.0, 5.0, f32::NAN, 2.0, 7.0]);
        c.int(1);
        c.bool(false);
        let v = c.out(ScalarType::Float, &[2]);
        let i = c.out(ScalarType::Long, &[2]);
        let (vv, iv) = (c.args[v], c.args[i]);
        c.tensor_list(&[vv, iv]);
        c.check(check_dim_max).unwrap();
        c.run(max_dim_out).unwrap();
        let got = c.output::<f32>(v);
        assert_eq!(got[0], 5.0);
        assert!(got[1].is_nan());
        assert_eq!(c.output::<i64>(i), vec![1, 0]);
        c.run(min_dim_out).unwrap();
        let got = c.output::<f32>(v);
        assert_eq!(got[0], 1.0);
        assert!(got[1].is_nan());
        assert_eq!(c.output::<i64>(i), vec![0, 0]);

        // keepdim along dim 0, ints
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[3i32, -1, 2, 4]);
        c.int(0);
        c.bool(true);
        let v = c.out(ScalarType::Int, &[1, 2]);
        let i = c.out(ScalarType::Long, &[1, 2]);
        c.run(max_dim_out).unwrap();
        assert_eq!(c.info(v).sizes(), &[1, 2]);
        assert_eq!(c.output::<i32>(v), vec![3, 4]);
        assert_eq!(c.output::<i64>(i), vec![0, 1]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[3i32, -1, 2, 4]);
        let o = c.out(ScalarType::Int, &[]);
        c.ret(o);
        c.check(check_same::<1>).unwrap();
        c.run(max_unary_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![4]);
        c.run(min_unary_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![-1]);

        let mut c = TestCall::new();
        c.tensor::<f32>(&[0], &[]);
        let o = c.out(ScalarType::Float, &[]);
        c.ret(o);
        assert!(c.run(max_unary_out).is_err());
    }

    #[test]
    fn prod_any_cumsum() {
        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1i32, 2, 3, 4]);
        c.none();
        let o = c.out(ScalarType::Long, &[]);
        c.ret(o);
        c.check(check_prod::<1, 2>).unwrap();
        c.run(prod_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![24]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[1.5f32, 2.0, 3.0, 4.0]);
        c.int(0);
        c.bool(false);
        c.none();
        let o = c.out(ScalarType::Float, &[2]);
        c.ret(o);
        c.run(prod_int_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![4.5, 8.0]);

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0.0f32, 0.0, 1.0, 0.0, 0.0, 0.0]);
        c.int(1);
        c.bool(true);
        let o = c.out(ScalarType::Bool, &[2, 1]);
        c.ret(o);
        c.check(check_any::<3>).unwrap();
        c.run(any_dim_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[true, false]));

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0i64, 0, 0, 0, 0, 7]);
        let o = c.out(ScalarType::Bool, &[]);
        c.ret(o);
        c.run(any_all_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[true]));

        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[1i32, 2, 3, 4, 5, 6]);
        c.int(-1);
        c.none();
        let o = c.out(ScalarType::Long, &[2, 3]);
        c.ret(o);
        c.check(check_cumsum).unwrap();
        c.run(cumsum_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![1, 3, 6, 4, 9, 15]);

        let mut c = TestCall::new();
        c.tensor(&[2, 2], &[0.5f32, 1.0, 2.0, 4.0]);
        c.int(0);
        c.none();
        let o = c.out(ScalarType::Float, &[2, 2]);
        c.ret(o);
        c.run(cumsum_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![0.5, 1.0, 2.5, 5.0]);
    }

    #[test]
    fn var_mean_correction() {
        // torch.var_mean(x, dim=1, correction=1) for x = [[1,2,3,4],[2,2,2,2]]
        let mut c = TestCall::new();
        c.tensor(&[2, 4], &[1.0f32, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0]);
        c.int_list(&[1]);
        c.none();
        c.bool(false);
        let v = c.out(ScalarType::Float, &[2]);
        let m = c.out(ScalarType::Float, &[2]);
        c.check(check_var_mean).unwrap();
        c.run(var_mean_out).unwrap();
        close(&c.output::<f32>(v), &[1.6666666, 0.0], 1e-6);
        assert_eq!(c.output::<f32>(m), vec![2.5, 2.0]);
        let _ = Value::None;
    }

    #[test]
    fn topk_values() {
        let mut c = TestCall::new();
        c.tensor(&[2, 4], &[1.0f32, 4.0, 3.0, 4.0, f32::NAN, 0.0, -1.0, 2.0]);
        c.int(2);
        c.int(-1);
        c.bool(true);
        c.bool(true);
        let v = c.out(ScalarType::Float, &[2, 2]);
        let i = c.out(ScalarType::Long, &[2, 2]);
        c.check(check_topk).unwrap();
        c.run(topk_out).unwrap();
        let got = c.output::<f32>(v);
        assert_eq!(got[0], 4.0);
        assert_eq!(got[1], 4.0);
        assert!(got[2].is_nan());
        assert_eq!(got[3], 2.0);
        assert_eq!(c.output::<i64>(i), vec![1, 3, 0, 3]);

        let mut c = TestCall::new();
        c.tensor(&[4], &[3i64, 1, 2, 0]);
        c.int(3);
        c.int(0);
        c.bool(false);
        c.bool(true);
        let v = c.out(ScalarType::Long, &[3]);
        let i = c.out(ScalarType::Long, &[3]);
        c.run(topk_out).unwrap();
        assert_eq!(c.output::<i64>(v), vec![0, 1, 2]);
        assert_eq!(c.output::<i64>(i), vec![3, 1, 2]);
    }

    #[test]
    fn reductions_read_any_dim_order() {
        // logical [1,2,1,2] = [[a,b],[c,d]] along channels: channels-last memory (a, c, b, d)
        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[1, 2, 1, 2], &[0, 2, 3, 1], &[1.0f32, 3.0, 2.0, 4.0]);
        c.int(1);
        c.bool(false);
        let v = c.out(ScalarType::Float, &[1, 1, 2]);
        let i = c.out(ScalarType::Long, &[1, 1, 2]);
        c.run(max_dim_out).unwrap();
        assert_eq!(c.output::<f32>(v), vec![3.0, 4.0]);
        assert_eq!(c.output::<i64>(i), vec![1, 1]);
    }

    #[test]
    fn topk_matches_a_stable_sort() {
        // [50, 7] with ties and NaNs, top-k along dim 0 (strided lines).
        let (n, m) = (50usize, 7usize);
        let x: Vec<f32> = (0..n * m)
            .map(|i| {
                if i % 11 == 0 {
                    f32::NAN
                } else {
                    ((i * 37) % 13) as f32
                }
            })
            .collect();
        for largest in [true, false] {
            for k in [0usize, 1, 5, 50] {
                let mut c = TestCall::new();
                c.tensor(&[n, m], &x);
                c.int(k as i64);
                c.int(0);
                c.bool(largest);
                c.bool(true);
                let v = c.out(ScalarType::Float, &[k, m]);
                let i = c.out(ScalarType::Long, &[k, m]);
                c.run(topk_out).unwrap();
                let (gv, gi) = (c.output::<f32>(v), c.output::<i64>(i));
                for col in 0..m {
                    let at = |j: usize| x[j * m + col];
                    let mut idx: Vec<usize> = (0..n).collect();
                    idx.sort_by(|&p, &q| {
                        let (u, w) = (at(p), at(q));
                        let ord = match (u.is_nan(), w.is_nan()) {
                            (true, true) => core::cmp::Ordering::Equal,
                            (true, false) => core::cmp::Ordering::Greater,
                            (false, true) => core::cmp::Ordering::Less,
                            _ => u.partial_cmp(&w).unwrap(),
                        };
                        if largest {
                            ord.reverse()
                        } else {
                            ord
                        }
                    });
                    for j in 0..k {
                        assert_eq!(gi[j * m + col], idx[j] as i64, "k {k} largest {largest}");
                        let (g, w) = (gv[j * m + col], at(idx[j]));
                        assert!(g == w || (g.is_nan() && w.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn cumsum_prod_any_read_any_dim_order() {
        // logical [2, 3] = [[1, 2, 3], [4, 5, 6]] stored column-major (dim order 1, 0).
        let mem = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[2, 3], &[1, 0], &mem);
        c.int(1);
        c.none();
        let o = c.out(ScalarType::Float, &[2, 3]);
        c.ret(o);
        c.run(cumsum_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1.0, 3.0, 6.0, 4.0, 9.0, 15.0]);

        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[2, 3], &[1, 0], &mem);
        c.int(0);
        c.bool(true);
        c.none();
        let o = c.out(ScalarType::Float, &[1, 3]);
        c.ret(o);
        c.run(prod_int_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![4.0, 10.0, 18.0]);

        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[2, 3], &[1, 0], &[0i32, 0, 0, 1, 0, 0]);
        c.int(0);
        c.bool(false);
        let o = c.out(ScalarType::Bool, &[3]);
        c.ret(o);
        c.run(any_dim_out).unwrap();
        assert_eq!(c.output::<Bool>(o), b(&[false, true, false]));
    }
}
