//! `mm`, `bmm`, `addmm`, `linear` on float32 with the packed GEMM.
//!
//! At load, a constant right-hand matrix is packed once ([`PackedB`]); so is the transpose of a
//! constant (`permute_copy(w, [1, 0])`, `t_copy`, `transpose_copy` feeding `mm`/`addmm`, as
//! `nn.Linear` exports), whose producer call is then removed from the method. Other dtypes and
//! layouts run the portable kernels.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, Parallel, PrepareContext,
    Prepared, ScalarType, TensorInfo, MAX_RANK,
};

use pteron_kernels::shape::infer_view_sizes;

use crate::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedB};
use crate::{fallback, register_over};

pub fn register(r: &mut KernelRegistry) {
    register_over(r, MM, Kernel::new(mm_out).with_prepare(prepare_mm));
    register_over(r, ADDMM, Kernel::new(addmm_out).with_prepare(prepare_addmm));
    register_over(
        r,
        LINEAR,
        Kernel::new(linear_out).with_prepare(prepare_linear),
    );
    register_over(r, BMM, Kernel::new(bmm_out));
}

const MM: &str = "aten::mm.out";
const BMM: &str = "aten::bmm.out";
const ADDMM: &str = "aten::addmm.out";
const LINEAR: &str = "aten::linear.out";

/// The right-hand matrix, packed at load.
pub struct PackedRhs {
    pub b: PackedB,
    /// The sizes of a fused `view_copy` of the product (`mm` then a reshape, as a language
    /// model's logits are returned): the call writes the view's output directly.
    pub view: Option<Vec<i64>>,
}

fn is_f32_contig(t: &TensorInfo) -> bool {
    t.dtype() == ScalarType::Float && t.is_contiguous()
}

/// `[k × n]` from a constant `[k, n]` (`transposed == false`) or `[n, k]` (`true`).
fn pack_constant(c: &[f32], k: usize, n: usize, transposed: bool) -> PackedB {
    if transposed {
        PackedB::from_transposed(c, k, n, None)
    } else {
        PackedB::new(k, n, |kk, j| c[kk * n + j])
    }
}

/// Packs argument `i` (a `[k, n]` matrix) if it is a constant, or the transpose of one made by
/// its producer call. Returns the packing and whether the producer was absorbed.
fn pack_rhs_arg(ctx: &PrepareContext<'_, '_>, i: usize) -> Option<(PackedB, bool)> {
    let info = ctx.tensor(i).ok()?;
    if !is_f32_contig(info) || info.rank() != 2 {
        return None;
    }
    let (k, n) = (info.size(0), info.size(1));
    if let Some(c) = ctx.constant(i) {
        return Some((pack_constant(c.as_slice::<f32>().ok()?, k, n, false), false));
    }
    let p = transposing_producer(ctx, i)?;
    let c = p.constant(0)?;
    if !is_f32_contig(c.info) || c.info.sizes() != [n, k] {
        return None;
    }
    Some((pack_constant(c.as_slice::<f32>().ok()?, k, n, true), true))
}

/// The call computing argument `i` as the transpose of a 2-d constant (`permute_copy`,
/// `t_copy`, `transpose_copy` of a file tensor), if that is what computes it.
fn transposing_producer<'a, 'p>(
    ctx: &PrepareContext<'a, 'p>,
    i: usize,
) -> Option<PrepareContext<'a, 'p>> {
    let p = ctx.producer(i)?;
    let transposes = match p.op_name() {
        "aten::permute_copy.out" => {
            let d = p.int_list(1).ok()?;
            d.len() == 2 && {
                let (a, b) = (d.get(0).ok()?, d.get(1).ok()?);
                matches!((a, b), (1, 0) | (-1, -2) | (1, -2) | (-1, 0))
            }
        }
        "aten::t_copy.out" => true,
        "aten::transpose_copy.int_out" => {
            let (a, b) = (p.int(1).ok()?, p.int(2).ok()?);
            let norm = |d: i64| if d < 0 { d + 2 } else { d };
            let (a, b) = (norm(a), norm(b));
            (a, b) == (0, 1) || (a, b) == (1, 0)
        }
        _ => false,
    };
    transposes.then_some(p)
}

/// `addmm` of one row by a transposed constant: the constant's value, read in place as B's
/// columns at every run (no packed copy: a one-row product reads each weight once anyway).
pub struct TransposedRhs {
    value: usize,
}

fn prepared(b: PackedB, view: Option<Vec<i64>>, arg: usize, absorbed: bool) -> Prepared {
    let bytes = b.bytes();
    let p = Prepared::new(PackedRhs { b, view }, bytes);
    if absorbed {
        p.absorbing(arg)
    } else {
        p
    }
}

fn prepare_mm(ctx: &PrepareContext<'_, '_>) -> Result<Option<Prepared>, KernelError> {
    if !is_f32_contig(ctx.tensor(0)?) || !is_f32_contig(ctx.tensor(2)?) {
        return Ok(None);
    }
    let Some((b, absorbed)) = pack_rhs_arg(ctx, 1) else {
        return Ok(None);
    };
    // A reshape of the product (its only reader, right after it): write the reshaped output
    // directly instead of copying the product (a 110M Llama's [128, 32000] logits: 16 MB,
    // 2.6–3.2 ms per run).
    let view = ctx.consumer().and_then(|c| {
        if c.op_name() != "aten::view_copy.out" || !is_f32_contig(c.tensor(2).ok()?) {
            return None;
        }
        let sizes = c.int_list(1).ok()?;
        if sizes.len() > MAX_RANK {
            return None;
        }
        sizes.iter().collect::<Result<Vec<i64>, _>>().ok()
    });
    let fuses = view.is_some();
    let p = prepared(b, view, 1, absorbed);
    Ok(Some(if fuses { p.fusing(1) } else { p }))
}

fn prepare_addmm(ctx: &PrepareContext<'_, '_>) -> Result<Option<Prepared>, KernelError> {
    for i in [0, 1, 5] {
        if !is_f32_contig(ctx.tensor(i)?) {
            return Ok(None);
        }
    }
    let (x, y, bias) = (ctx.tensor(1)?, ctx.tensor(2)?, ctx.tensor(0)?);
    let unit = |i: usize| ctx.scalar(i).is_ok_and(|v| v.to_f64() == 1.0);
    let row_bias = y.rank() == 2 && (bias.sizes() == [y.size(1)] || bias.sizes() == [1, y.size(1)]);
    if x.rank() == 2 && x.size(0) == 1 && row_bias && unit(3) && unit(4) {
        if let Some(p) = transposing_producer(ctx, 2) {
            let in_place = p
                .constant_in_place(0)
                .is_some_and(|c| is_f32_contig(c.info) && c.info.sizes() == [y.size(1), y.size(0)]);
            if in_place {
                let value = p.value_index(0)?;
                return Ok(Some(Prepared::new(TransposedRhs { value }, 0).absorbing(2)));
            }
        }
    }
    Ok(pack_rhs_arg(ctx, 2).map(|(b, abs)| prepared(b, None, 2, abs)))
}

fn prepare_linear(ctx: &PrepareContext<'_, '_>) -> Result<Option<Prepared>, KernelError> {
    let (x, w, o) = (ctx.tensor(0)?, ctx.tensor(1)?, ctx.tensor(3)?);
    if !is_f32_contig(x) || !is_f32_contig(o) || !is_f32_contig(w) || w.rank() != 2 {
        return Ok(None);
    }
    if let Some(b) = ctx.opt_tensor(2)? {
        if !is_f32_contig(b) {
            return Ok(None);
        }
    }
    let Some(c) = ctx.constant(1) else {
        return Ok(None);
    };
    let Ok(data) = c.as_slice::<f32>() else {
        return Ok(None);
    };
    let (n, k) = (w.size(0), w.size(1));
    Ok(Some(prepared(
        pack_constant(data, k, n, true),
        None,
        1,
        false,
    )))
}

fn shape_err(op: &str, a: &TensorInfo, b: &TensorInfo) -> KernelError {
    KernelError::shape(format!(
        "{op}: cannot multiply {:?} by {:?}",
        a.sizes(),
        b.sizes()
    ))
}

fn gemm_err(e: crate::gemm::GemmError) -> KernelError {
    KernelError::invalid(e.0)
}

fn mm_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let state = ctx.prepared::<PackedRhs>();
    let (x, y, o) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(2)?);
    let fast = [&x, &y, &o].iter().all(|t| is_f32_contig(t)) && x.rank() == 2 && y.rank() == 2;
    if !fast && state.is_none() {
        return fallback(MM, ctx);
    }
    if x.rank() != 2 || y.rank() != 2 || x.size(1) != y.size(0) {
        return Err(shape_err("mm", &x, &y));
    }
    let (m, k, n) = (x.size(0), x.size(1), y.size(1));
    match state.and_then(|s| s.view.as_deref()) {
        Some(view) => {
            let numel = m.checked_mul(n).ok_or(KernelError::SizeOverflow)?;
            ctx.resize(2, infer_view_sizes(numel, view)?.as_slice())?
        }
        None => ctx.resize(2, &[m, n])?,
    }
    let par = ctx.parallel();
    match state {
        Some(st) => {
            let ([a], [mut out]) = ctx.io([0], [2])?;
            let b = MatB::Packed(&st.b);
            gemm(
                par,
                m,
                n,
                k,
                MatA::Rows {
                    data: a.as_slice()?,
                    lda: k,
                },
                b,
                out.as_mut_slice()?,
                n,
                &Epilogue::default(),
            )
        }
        None => {
            let ([a, b], [mut out]) = ctx.io([0, 1], [2])?;
            let b = MatB::Rows {
                data: b.as_slice()?,
                ldb: n,
            };
            gemm(
                par,
                m,
                n,
                k,
                MatA::Rows {
                    data: a.as_slice()?,
                    lda: k,
                },
                b,
                out.as_mut_slice()?,
                n,
                &Epilogue::default(),
            )
        }
    }
    .map_err(gemm_err)
}

fn bmm_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let (x, y, o) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(2)?);
    let fast = [&x, &y, &o].iter().all(|t| is_f32_contig(t))
        && x.rank() == 3
        && y.rank() == 3
        && x.size(0) == y.size(0)
        && x.size(2) == y.size(1);
    if !fast {
        return fallback(BMM, ctx);
    }
    let (bs, m, k, n) = (x.size(0), x.size(1), x.size(2), y.size(2));
    ctx.resize(2, &[bs, m, n])?;
    let par = ctx.parallel();
    let ([a, b], [mut out]) = ctx.io([0, 1], [2])?;
    let (a, b) = (a.as_slice::<f32>()?, b.as_slice::<f32>()?);
    let out = out.as_mut_slice::<f32>()?;
    batched(par, bs, m, n, k, a, b, out)
}

/// `out[i] = a[i] · b[i]` for each of `bs` matrices; batches split across threads.
#[allow(clippy::too_many_arguments)]
fn batched(
    par: &dyn Parallel,
    bs: usize,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let one = |i: usize, o: &mut [f32], p: &dyn Parallel| {
        gemm(
            p,
            m,
            n,
            k,
            MatA::Rows {
                data: &a[i * m * k..(i + 1) * m * k],
                lda: k,
            },
            MatB::Rows {
                data: &b[i * k * n..(i + 1) * k * n],
                ldb: n,
            },
            o,
            n,
            &Epilogue::default(),
        )
    };
    if m * n == 0 {
        return Ok(());
    }
    if par.num_threads() > 1 && bs >= par.num_threads() {
        let err = std::sync::atomic::AtomicBool::new(false);
        crate::par::for_chunks_mut(par, out, m * n, 1, &|i, o| {
            if one(i, o, &pteron_core::INLINE).is_err() {
                err.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        if err.into_inner() {
            return Err(KernelError::invalid("bmm: operand sizes"));
        }
        return Ok(());
    }
    for (i, o) in out.chunks_mut(m * n).enumerate() {
        one(i, o, par).map_err(gemm_err)?;
    }
    Ok(())
}

/// `addmm(self, mat1, mat2)` with `mat2` the transpose of constant value `wv` (`[n, k]`),
/// whose producer the method removed: `self` a row of `n` (or one value), alpha = beta = 1,
/// else the portable kernel's semantics are out of reach and it is an error.
fn addmm_transposed(ctx: &mut KernelContext<'_, '_>, wv: usize) -> Result<(), KernelError> {
    let (s, x, o) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(5)?);
    let w = *ctx.tensor_at(wv)?;
    let (beta, alpha) = (ctx.scalar(3)?.to_f64(), ctx.scalar(4)?.to_f64());
    if ![&s, &x, &o, &w].iter().all(|t| is_f32_contig(t)) || x.rank() != 2 || w.rank() != 2 {
        return Err(KernelError::unsupported(
            "addmm: prepared for float32 contiguous matrices",
        ));
    }
    let (m, k, n) = (x.size(0), x.size(1), w.size(0));
    if w.size(1) != k {
        return Err(shape_err("addmm", &x, &w));
    }
    if alpha != 1.0 || beta != 1.0 || !(s.sizes() == [n] || s.sizes() == [1, n]) {
        return Err(KernelError::unsupported(
            "addmm with a transposed constant: only alpha = beta = 1 and a bias row",
        ));
    }
    ctx.resize(5, &[m, n])?;
    let par = ctx.parallel();
    let (sv, xv, ov) = (
        ctx.value_index(0)?,
        ctx.value_index(1)?,
        ctx.value_index(5)?,
    );
    let ([sv, a, wt], [mut out]) = ctx.io_values([sv, xv, wv], [ov])?;
    let epi = Epilogue {
        init: Init::ColBias(sv.as_slice::<f32>()?),
        affine: None,
        residual: None,
        clamp: None,
    };
    let a = MatA::Rows {
        data: a.as_slice::<f32>()?,
        lda: k,
    };
    let b = MatB::Cols {
        data: wt.as_slice::<f32>()?,
        ldb: k,
    };
    gemm(par, m, n, k, a, b, out.as_mut_slice::<f32>()?, n, &epi).map_err(gemm_err)
}

fn addmm_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    if let Some(t) = ctx.prepared::<TransposedRhs>() {
        return addmm_transposed(ctx, t.value);
    }
    let state = ctx.prepared::<PackedRhs>();
    let (s, x, y, o) = (
        *ctx.tensor(0)?,
        *ctx.tensor(1)?,
        *ctx.tensor(2)?,
        *ctx.tensor(5)?,
    );
    let fast = [&s, &x, &y, &o].iter().all(|t| is_f32_contig(t)) && x.rank() == 2 && y.rank() == 2;
    if !fast && state.is_none() {
        return fallback(ADDMM, ctx);
    }
    if x.rank() != 2 || y.rank() != 2 || x.size(1) != y.size(0) {
        return Err(shape_err("addmm", &x, &y));
    }
    let (m, k, n) = (x.size(0), x.size(1), y.size(1));
    // `self` broadcasts to [m, n]: strides 0 where it stretches.
    let ss = s.sizes();
    let (rs, cs) = match ss {
        [] => (0, 0),
        [c] if *c == n || *c == 1 => (0, usize::from(*c == n)),
        [r, c] if (*r == m || *r == 1) && (*c == n || *c == 1) => {
            (if *r == m && m > 1 { *c } else { 0 }, usize::from(*c == n))
        }
        _ => {
            return Err(KernelError::shape(format!(
                "addmm: self {ss:?} does not broadcast to [{m}, {n}]"
            )))
        }
    };
    let (beta, alpha) = (ctx.scalar(3)?.to_f64(), ctx.scalar(4)?.to_f64());
    ctx.resize(5, &[m, n])?;
    let par = ctx.parallel();
    let ([sv, a, bv], [mut out]) = if state.is_some() {
        // The packed matrix stands in for `mat2` (whose producer may have been removed).
        let ([sv, a], [out]) = ctx.io([0, 1], [5])?;
        ([sv, a, a], [out])
    } else {
        ctx.io([0, 1, 2], [5])?
    };
    let (sv, a) = (sv.as_slice::<f32>()?, a.as_slice::<f32>()?);
    let out = out.as_mut_slice::<f32>()?;
    let b = match state {
        Some(st) => MatB::Packed(&st.b),
        None => MatB::Rows {
            data: bv.as_slice()?,
            ldb: n,
        },
    };
    let a = MatA::Rows { data: a, lda: k };
    if alpha == 1.0 && beta == 1.0 && rs == 0 && cs == 1 {
        let epi = Epilogue {
            init: Init::ColBias(sv),
            affine: None,
            residual: None,
            clamp: None,
        };
        return gemm(par, m, n, k, a, b, out, n, &epi).map_err(gemm_err);
    }
    gemm(par, m, n, k, a, b, out, n, &Epilogue::default()).map_err(gemm_err)?;
    let (alpha, beta) = (alpha as f32, beta as f32);
    for i in 0..m {
        for j in 0..n {
            let p = &mut out[i * n + j];
            let prod = if alpha == 1.0 { *p } else { alpha * *p };
            // As ExecuTorch: `beta * self` is added also for beta == 0 (NaN and inf in `self`
            // propagate; PyTorch would ignore `self`).
            *p = beta * sv[i * rs + j * cs] + prod;
        }
    }
    Ok(())
}

fn linear_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let state = ctx.prepared::<PackedRhs>();
    let (x, w, o) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(3)?);
    let bias = ctx.opt_tensor(2)?.copied();
    let fast = [&x, &w, &o].iter().all(|t| is_f32_contig(t))
        && bias.as_ref().is_none_or(is_f32_contig)
        && x.rank() >= 1
        && w.rank() == 2
        && x.size(x.rank() - 1) == w.size(1)
        && bias
            .as_ref()
            .is_none_or(|b| b.rank() <= 1 && b.numel() == w.size(0));
    if !fast {
        return fallback(LINEAR, ctx);
    }
    let (n, k) = (w.size(0), w.size(1));
    let m: usize = x.sizes()[..x.rank() - 1].iter().product();
    let mut osz = pteron_core::Dims::from_slice(x.sizes())?;
    osz.as_mut_slice()[x.rank() - 1] = n;
    ctx.resize(3, &osz)?;
    let par = ctx.parallel();
    let b_arg = if bias.is_some() { 2 } else { 0 };
    let ([a, wv, bv], [mut out]) = ctx.io([0, 1, b_arg], [3])?;
    let b = match state {
        Some(st) => MatB::Packed(&st.b),
        None => MatB::Cols {
            data: wv.as_slice()?,
            ldb: k,
        },
    };
    let init = match bias {
        Some(_) => Init::ColBias(bv.as_slice()?),
        None => Init::Zero,
    };
    let epi = Epilogue {
        init,
        affine: None,
        residual: None,
        clamp: None,
    };
    gemm(
        par,
        m,
        n,
        k,
        MatA::Rows {
            data: a.as_slice()?,
            lda: k,
        },
        b,
        out.as_mut_slice()?,
        n,
        &epi,
    )
    .map_err(gemm_err)
}
