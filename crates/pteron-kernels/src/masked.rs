//! Masked and data-dependent indexing: `masked_select.out` and `repeat_interleave.Tensor_out`
//! (output sizes depend on the data: the output is resized within its planned capacity),
//! `masked_scatter.out`, and the in-place `index_put_`.
//!
//! Element copies work on raw bytes, so every dtype is handled; masks are bool. Inputs are read
//! through their strides (any dim order) and broadcast as PyTorch does.

use pteron_core::{
    ArgAccess, ArgView, Dims, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    ScalarType, TensorInfo, NONE_INDEX,
};

use crate::elementwise::engine::{bcast_strides, broadcast_all, walk};
use crate::embedding::Indices;
use crate::util::require_contiguous;

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::masked_select.out",
        Kernel::with_check(masked_select_out, check_masked_select).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::masked_scatter.out",
        Kernel::with_check(masked_scatter_out, check_masked_scatter).dtypes(DtypeSet::ALL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::repeat_interleave.Tensor_out",
        Kernel::with_check(repeat_interleave_out, check_repeat_interleave)
            .dtypes(DtypeSet::of(&[ScalarType::Int, ScalarType::Long])),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::index_put_",
        Kernel::with_check(index_put_inplace, check_index_put_inplace).dtypes(DtypeSet::ALL),
    );
}

fn supported(op: &'static str, dt: ScalarType) -> Result<(), KernelError> {
    if ScalarType::REAL_AND_BOOL.contains(&dt) {
        Ok(())
    } else {
        Err(KernelError::dtype(dt, op))
    }
}

fn same_dtype(op: &'static str, a: &TensorInfo, b: &TensorInfo) -> Result<(), KernelError> {
    if a.dtype() != b.dtype() {
        return Err(KernelError::dtype(b.dtype(), op));
    }
    Ok(())
}

fn bool_mask(op: &'static str, m: &TensorInfo) -> Result<(), KernelError> {
    if m.dtype() != ScalarType::Bool {
        return Err(KernelError::dtype(m.dtype(), op));
    }
    Ok(())
}

/// The element offset of logical (row-major) index `lin` in a tensor with `sizes`/`strides`.
fn logical_offset(mut lin: usize, sizes: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for d in (0..sizes.len()).rev() {
        let s = sizes[d].max(1);
        off += (lin % s) * strides[d];
        lin /= s;
    }
    off
}

// ---- masked_select ----

/// masked_select.out: [self, mask, out].
fn check_masked_select(a: &ArgView) -> Result<(), KernelError> {
    let op = "masked_select";
    let (x, m, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?);
    supported(op, x.dtype())?;
    bool_mask(op, m)?;
    same_dtype(op, x, o)?;
    if o.rank() != 1 {
        return Err(KernelError::rank_mismatch(op, "out", 1, o.rank()));
    }
    Ok(())
}

fn masked_select_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "masked_select";
    let (x, m) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    bool_mask(op, &m)?;
    let shape = broadcast_all(&[x.sizes(), m.sizes()])?;
    if x.numel() == 0 || m.numel() == 0 {
        return ctx.resize(2, &[0]);
    }
    let xs = bcast_strides(&x, &shape)?;
    let ms = bcast_strides(&m, &shape)?;
    // Two passes: count the selected elements (to size the output), then copy them.
    let mut count = 0usize;
    {
        let ([mr], []) = ctx.io([1], [])?;
        walk(&shape, [&ms], |[mo]| count += (mr.bytes[mo] != 0) as usize);
    }
    ctx.resize(2, &[count])?;
    let ([xr, mr], [o]) = ctx.io([0, 1], [2])?;
    same_dtype(op, xr.info, o.info)?;
    let e = x.dtype().elem_size();
    let mut k = 0usize;
    walk(&shape, [&xs, &ms], |[xo, mo]| {
        if mr.bytes[mo] != 0 {
            o.bytes[k * e..(k + 1) * e].copy_from_slice(&xr.bytes[xo * e..(xo + 1) * e]);
            k += 1;
        }
    });
    Ok(())
}

// ---- masked_scatter ----

/// masked_scatter.out: [self, mask, source, out].
fn check_masked_scatter(a: &ArgView) -> Result<(), KernelError> {
    let op = "masked_scatter";
    let (x, m, s, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(2)?, a.tensor(3)?);
    supported(op, x.dtype())?;
    bool_mask(op, m)?;
    same_dtype(op, x, s)?;
    same_dtype(op, x, o)
}

fn masked_scatter_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "masked_scatter";
    let (x, m, s) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(2)?);
    bool_mask(op, &m)?;
    let shape = broadcast_all(&[x.sizes(), m.sizes()])?;
    let xs = bcast_strides(&x, &shape)?;
    let ms = bcast_strides(&m, &shape)?;
    ctx.resize(3, &shape)?;
    let ([xr, mr, sr], [o]) = ctx.io([0, 1, 2], [3])?;
    same_dtype(op, xr.info, o.info)?;
    same_dtype(op, xr.info, sr.info)?;
    let os = *o.info;
    let e = x.dtype().elem_size();
    let (src_n, src_contig) = (s.numel(), s.is_contiguous());
    let mut next = 0usize;
    let mut short = false;
    walk(&shape, [&xs, &ms, os.strides()], |[xo, mo, oo]| {
        let dst = &mut o.bytes[oo * e..(oo + 1) * e];
        if mr.bytes[mo] != 0 {
            if next >= src_n {
                short = true;
                dst.copy_from_slice(&xr.bytes[xo * e..(xo + 1) * e]);
                return;
            }
            let so = if src_contig {
                next
            } else {
                logical_offset(next, s.sizes(), s.strides())
            };
            dst.copy_from_slice(&sr.bytes[so * e..(so + 1) * e]);
            next += 1;
        } else {
            dst.copy_from_slice(&xr.bytes[xo * e..(xo + 1) * e]);
        }
    });
    if short {
        return Err(KernelError::invalid(format!(
            "{op}: source has {src_n} elements, fewer than the mask selects"
        )));
    }
    Ok(())
}

// ---- repeat_interleave ----

/// repeat_interleave.Tensor_out: [repeats, output_size, out].
fn check_repeat_interleave(a: &ArgView) -> Result<(), KernelError> {
    let op = "repeat_interleave";
    let (r, o) = (a.tensor(0)?, a.tensor(2)?);
    if !matches!(r.dtype(), ScalarType::Int | ScalarType::Long) {
        return Err(KernelError::dtype(r.dtype(), op));
    }
    same_dtype(op, r, o)?;
    a.opt_int(1)?;
    for (what, t) in [("repeats", r), ("out", o)] {
        if t.rank() != 1 {
            return Err(KernelError::rank_mismatch(op, what, 1, t.rank()));
        }
    }
    Ok(())
}

fn repeat_interleave_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "repeat_interleave";
    let r = *ctx.tensor(0)?;
    if r.rank() != 1 {
        return Err(KernelError::rank_mismatch(op, "repeats", 1, r.rank()));
    }
    let output_size = ctx.opt_int(1)?;
    let total = {
        let ([rr], []) = ctx.io([0], [])?;
        let reps = Indices::of(&rr)?;
        let mut total = 0usize;
        for k in 0..reps.len() {
            let v = reps.get(k);
            let v = usize::try_from(v).map_err(|_| {
                KernelError::invalid(format!(
                    "{op}: repeats cannot be negative (repeats[{k}] = {v})"
                ))
            })?;
            total = total.checked_add(v).ok_or(KernelError::SizeOverflow)?;
        }
        total
    };
    if let Some(n) = output_size {
        if n != total as i64 {
            return Err(KernelError::invalid(format!(
                "{op}: output_size {n} differs from the sum of repeats {total}"
            )));
        }
    }
    ctx.resize(2, &[total])?;
    let ([rr], [mut o]) = ctx.io([0], [2])?;
    same_dtype(op, rr.info, o.info)?;
    let reps = Indices::of(&rr)?;
    let mut k = 0usize;
    match r.dtype() {
        ScalarType::Long => {
            let out = o.as_mut_slice::<i64>()?;
            for i in 0..reps.len() {
                let n = reps.get(i) as usize;
                out[k..k + n].fill(i as i64);
                k += n;
            }
        }
        _ => {
            let out = o.as_mut_slice::<i32>()?;
            for i in 0..reps.len() {
                let n = reps.get(i) as usize;
                out[k..k + n].fill(i as i32);
                k += n;
            }
        }
    }
    Ok(())
}

// ---- index_put_ ----

/// The one non-null index tensor of an `index_put_` call: its position (the dim it indexes)
/// and value index.
fn single_index<'p>(
    a: &impl ArgAccess<'p>,
    self_rank: usize,
) -> Result<(usize, usize), KernelError> {
    let op = "index_put_";
    let list = a.opt_tensor_list(1)?;
    if list.len() > self_rank {
        return Err(KernelError::invalid(format!(
            "{op}: {} indices for a tensor of rank {self_rank}",
            list.len()
        )));
    }
    let mut found = None;
    for (d, &vi) in list.iter().enumerate() {
        if vi == NONE_INDEX {
            continue;
        }
        if found.is_some() {
            return Err(KernelError::unsupported(format!(
                "{op}: more than one index tensor (ExecuTorch's in-place index_put takes one)"
            )));
        }
        let t = a.tensor_at(vi as usize)?;
        if !matches!(t.dtype(), ScalarType::Long | ScalarType::Int) {
            return Err(KernelError::dtype(t.dtype(), op));
        }
        if t.rank() != 1 {
            return Err(KernelError::unsupported(format!(
                "{op}: index tensor of rank {} (ExecuTorch's in-place index_put takes 1-d indices)",
                t.rank()
            )));
        }
        found = Some((d, vi as usize));
    }
    found.ok_or_else(|| KernelError::unsupported(format!("{op}: no index tensor")))
}

/// index_put_: [self, indices, values, accumulate, (return)].
fn check_index_put_inplace(a: &ArgView) -> Result<(), KernelError> {
    let op = "index_put_";
    let (x, v) = (a.tensor(0)?, a.tensor(2)?);
    supported(op, x.dtype())?;
    same_dtype(op, x, v)?;
    if a.bool(3)? {
        return Err(KernelError::unsupported(format!(
            "{op}: accumulate=True (ExecuTorch's in-place index_put does not support it)"
        )));
    }
    require_contiguous(op, &[x, v])?;
    single_index(a, x.rank()).map(|_| ())
}

/// ExecuTorch's in-place `index_put_`: one 1-d integer index tensor `idx` on dim `d`, `values`
/// shaped like `self` with dim `d` of length `idx.len()`; `self[.., idx[j], ..] = values[.., j, ..]`.
/// Negative indices count from the end (as PyTorch; ExecuTorch rejects them).
fn index_put_inplace(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "index_put_";
    let (x, v) = (*ctx.tensor(0)?, *ctx.tensor(2)?);
    require_contiguous(op, &[&x, &v])?;
    if ctx.bool(3)? {
        return Err(KernelError::unsupported(format!(
            "{op}: accumulate=True is not supported"
        )));
    }
    let (dim, ivi) = single_index(ctx, x.rank())?;
    let idx = *ctx.tensor_at(ivi)?;
    let n = idx.numel();
    let mut want: Dims = x.dims();
    want.as_mut_slice()[dim] = n;
    if v.sizes() != want.as_slice() {
        return Err(KernelError::shape_mismatch(op, "values", &want, v.sizes()));
    }
    let size = x.size(dim);
    let lead: usize = x.sizes()[..dim].iter().product();
    let trail: usize = x.sizes()[dim + 1..].iter().product();
    let (xv, vv) = (ctx.value_index(0)?, ctx.value_index(2)?);
    {
        let ([vr, ir], [mut xr]) = ctx.io_values([vv, ivi], [xv])?;
        if vr.info.dtype() != xr.info.dtype() {
            return Err(KernelError::dtype(vr.info.dtype(), op));
        }
        let ids = Indices::of(&ir)?;
        // Check every index before writing anything.
        for k in 0..n {
            wrap(ids.get(k), size)?;
        }
        let row = trail * x.dtype().elem_size();
        if row > 0 {
            let dst = &mut xr.bytes;
            for i in 0..lead {
                for j in 0..n {
                    let t = wrap(ids.get(j), size)?;
                    let s = (i * n + j) * row;
                    let d = (i * size + t) * row;
                    dst[d..d + row].copy_from_slice(&vr.bytes[s..s + row]);
                }
            }
        }
    }
    // The returned tensor is `self`: alias the return slot to it when it is a separate value.
    let ret = ctx.num_args().saturating_sub(1);
    if ret > 3 && ctx.value_index(ret)? != xv && ctx.tensor(ret).is_ok() {
        ctx.set_view(ret, 0, x.sizes())?;
    }
    Ok(())
}

fn wrap(i: i64, size: usize) -> Result<usize, KernelError> {
    let n = size as i64;
    let j = if i < 0 { i + n } else { i };
    if j < 0 || j >= n {
        return Err(KernelError::IndexOutOfRange {
            op: "index_put_",
            index: i,
            size,
        });
    }
    Ok(j as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::{Bool, ScalarType as St};

    fn b(v: &[u8]) -> Vec<Bool> {
        v.iter().map(|&x| Bool(x)).collect()
    }

    #[test]
    fn masked_select_broadcast() {
        // torch.masked_select(torch.arange(6.).view(2, 3), torch.tensor([True, False, True]))
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0.0f32, 1., 2., 3., 4., 5.]);
        c.tensor(&[3], &b(&[1, 0, 1]));
        let o = c.out(St::Float, &[6]);
        c.ret(o);
        c.check(check_masked_select).unwrap();
        c.run(masked_select_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[4]);
        assert_eq!(c.output::<f32>(o), vec![0., 2., 3., 5.]);

        // The mask broadcasts the input: input [2, 1] x mask [2, 2].
        let mut c = TestCall::new();
        c.tensor(&[2, 1], &[7i64, 8]);
        c.tensor(&[2, 2], &b(&[1, 1, 0, 1]));
        let o = c.out(St::Long, &[4]);
        c.ret(o);
        c.run(masked_select_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![7, 7, 8]);

        // Empty input: empty output.
        let mut c = TestCall::new();
        c.tensor::<f32>(&[0, 3], &[]);
        c.tensor(&[3], &b(&[1, 0, 1]));
        let o = c.out(St::Float, &[6]);
        c.ret(o);
        c.run(masked_select_out).unwrap();
        assert_eq!(c.info(o).sizes(), &[0]);
    }

    #[test]
    fn masked_select_checks() {
        let mut c = TestCall::new();
        c.tensor(&[3], &[1.0f32, 2., 3.]);
        c.tensor(&[3], &[1u8, 0, 1]);
        let o = c.out(St::Float, &[3]);
        c.ret(o);
        assert!(c.check(check_masked_select).is_err());
        assert!(c.run(masked_select_out).is_err());
        // More elements than the output can hold: capacity error, not a panic.
        let mut c = TestCall::new();
        c.tensor(&[600], &[1.0f32; 600]);
        c.tensor(&[600], &vec![Bool(1); 600]);
        let o = c.out(St::Float, &[1]);
        c.ret(o);
        assert!(matches!(
            c.run(masked_select_out),
            Err(KernelError::OutputCapacity { .. })
        ));
    }

    #[test]
    fn masked_scatter_fills_in_order() {
        // torch.zeros(2, 3).masked_scatter(torch.tensor([[1, 0, 1], [0, 1, 1]]).bool(), arange(1., 7.))
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[0.0f32; 6]);
        c.tensor(&[2, 3], &b(&[1, 0, 1, 0, 1, 1]));
        c.tensor(&[6], &[1.0f32, 2., 3., 4., 5., 6.]);
        let o = c.out(St::Float, &[2, 3]);
        c.ret(o);
        c.check(check_masked_scatter).unwrap();
        c.run(masked_scatter_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![1., 0., 2., 0., 3., 4.]);

        // Broadcast mask [3] over self [2, 3]; source read in its logical order (transposed).
        let mut c = TestCall::new();
        c.tensor(&[2, 3], &[9i32; 6]);
        c.tensor(&[3], &b(&[0, 1, 1]));
        // Logical [[10, 20], [30, 40]] stored column-major.
        c.tensor_with_dim_order(&[2, 2], &[1, 0], &[10i32, 30, 20, 40]);
        let o = c.out(St::Int, &[2, 3]);
        c.ret(o);
        c.run(masked_scatter_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![9, 10, 20, 9, 30, 40]);

        // Too few source elements: an error.
        let mut c = TestCall::new();
        c.tensor(&[3], &[0.0f32; 3]);
        c.tensor(&[3], &b(&[1, 1, 1]));
        c.tensor(&[2], &[1.0f32, 2.]);
        let o = c.out(St::Float, &[3]);
        c.ret(o);
        assert!(c.run(masked_scatter_out).is_err());
    }

    #[test]
    fn repeat_interleave_counts() {
        let mut c = TestCall::new();
        c.tensor(&[4], &[1i64, 0, 3, 2]);
        c.none();
        let o = c.out(St::Long, &[1]);
        c.ret(o);
        c.check(check_repeat_interleave).unwrap();
        c.run(repeat_interleave_out).unwrap();
        assert_eq!(c.output::<i64>(o), vec![0, 2, 2, 2, 3, 3]);

        let mut c = TestCall::new();
        c.tensor(&[3], &[2i32, 1, 0]);
        c.int(3);
        let o = c.out(St::Int, &[1]);
        c.ret(o);
        c.run(repeat_interleave_out).unwrap();
        assert_eq!(c.output::<i32>(o), vec![0, 0, 1]);

        // Wrong output_size, negative repeats: errors.
        let mut c = TestCall::new();
        c.tensor(&[2], &[2i32, 1]);
        c.int(4);
        let o = c.out(St::Int, &[1]);
        c.ret(o);
        assert!(c.run(repeat_interleave_out).is_err());
        let mut c = TestCall::new();
        c.tensor(&[2], &[2i64, -1]);
        c.none();
        let o = c.out(St::Long, &[1]);
        c.ret(o);
        assert!(c.run(repeat_interleave_out).is_err());
        // A float repeats tensor fails at load.
        let mut c = TestCall::new();
        c.tensor(&[2], &[2.0f32, 1.]);
        c.none();
        let o = c.out(St::Float, &[1]);
        c.ret(o);
        assert!(c.check(check_repeat_interleave).is_err());
    }

    #[test]
    fn index_put_in_place() {
        // x = zeros(2, 3); x[:, [2, -3]] = [[1, 2], [3, 4]]
        let mut c = TestCall::new();
        let x = c.tensor(&[2, 3], &[0.0f32; 6]);
        let i = c.tensor_value(&[2], &[2i64, -3]);
        c.opt_tensor_list(&[None, Some(i)]);
        c.tensor(&[2, 2], &[1.0f32, 2., 3., 4.]);
        c.bool(false);
        c.ret(x);
        c.check(check_index_put_inplace).unwrap();
        c.run(index_put_inplace).unwrap();
        assert_eq!(c.output::<f32>(x), vec![2., 0., 1., 4., 0., 3.]);

        // Out-of-range index: an error, nothing written.
        let mut c = TestCall::new();
        let x = c.tensor(&[3], &[5i32, 6, 7]);
        let i = c.tensor_value(&[2], &[0i32, 3]);
        c.opt_tensor_list(&[Some(i)]);
        c.tensor(&[2], &[1i32, 2]);
        c.bool(false);
        c.ret(x);
        assert!(c.run(index_put_inplace).is_err());
        assert_eq!(c.output::<i32>(x), vec![5, 6, 7]);

        // accumulate=True and two index tensors are refused at load.
        let mut c = TestCall::new();
        let x = c.tensor(&[3], &[5i32, 6, 7]);
        let i = c.tensor_value(&[1], &[0i64]);
        c.opt_tensor_list(&[Some(i)]);
        c.tensor(&[1], &[1i32]);
        c.bool(true);
        c.ret(x);
        assert!(c.check(check_index_put_inplace).is_err());
        let mut c = TestCall::new();
        let x = c.tensor(&[2, 2], &[5i32, 6, 7, 8]);
        let i = c.tensor_value(&[1], &[0i64]);
        let j = c.tensor_value(&[1], &[1i64]);
        c.opt_tensor_list(&[Some(i), Some(j)]);
        c.tensor(&[1], &[1i32]);
        c.bool(false);
        c.ret(x);
        assert!(c.check(check_index_put_inplace).is_err());
    }
}
