//! Lowering one portable call to GPU steps. Every tensor must be float32, contiguous and of
//! fixed shape (see [`crate::builder::float_tensor`]); a call whose arguments the kernels
//! cannot take exactly as the portable kernel defines them returns `None` and stays on the
//! CPU. The ops taken are listed by [`CLAIMS`].

use pteron_core::{normalize_dim, ArgAccess, CallGraph, PrepareContext, ScalarType, TensorInfo};

use crate::builder::Builder;
use crate::emit::{self, broadcast_strides, copy_step, pool_step, strides};

/// The operators the engine runs (float32 only), as `pteron ops --device gpu` lists them.
pub const CLAIMS: &[&str] = &[
    "aten::_adaptive_avg_pool2d.out",
    "aten::_log_softmax.out",
    "aten::_native_batch_norm_legit_no_training.out",
    "aten::_softmax.out",
    "aten::abs.out",
    "aten::add.Scalar_out",
    "aten::add.out",
    "aten::addmm.out",
    "aten::alias_copy.out",
    "aten::amax.out",
    "aten::amin.out",
    "aten::avg_pool2d.out",
    "aten::bmm.out",
    "aten::cat.out",
    "aten::clamp.out",
    "aten::clone.out",
    "aten::detach_copy.out",
    "dim_order_ops::_clone_dim_order.out",
    "dim_order_ops::_to_dim_order_copy.out",
    "aten::convolution.out",
    "aten::div.Scalar_out",
    "aten::div.out",
    "aten::elu.out",
    "aten::erf.out",
    "aten::exp.out",
    "aten::expand_copy.out",
    "aten::fill.Scalar_out",
    "aten::full.out",
    "aten::gelu.out",
    "aten::hardtanh.out",
    "aten::leaky_relu.out",
    "aten::lift_fresh_copy.out",
    "aten::log.out",
    "aten::maximum.out",
    "aten::mean.out",
    "aten::minimum.out",
    "aten::mm.out",
    "aten::mul.Scalar_out",
    "aten::mul.out",
    "aten::native_layer_norm.out",
    "aten::neg.out",
    "aten::permute_copy.out",
    "aten::pow.Tensor_Scalar_out",
    "aten::reciprocal.out",
    "aten::relu.out",
    "aten::rsqrt.out",
    "aten::rsub.Scalar_out",
    "aten::select_copy.int_out",
    "aten::sigmoid.out",
    "aten::slice_copy.Tensor_out",
    "aten::sqrt.out",
    "aten::squeeze_copy.dim_out",
    "aten::squeeze_copy.dims_out",
    "aten::sub.Scalar_out",
    "aten::sub.out",
    "aten::sum.IntList_out",
    "aten::t_copy.out",
    "aten::tanh.out",
    "aten::transpose_copy.int_out",
    "aten::unsqueeze_copy.out",
    "aten::view_copy.out",
];

fn dim_of(d: i64, rank: usize) -> Option<usize> {
    normalize_dim(d, rank.max(1)).ok()
}

/// Lowers call `c`; `None` leaves it (and what follows) to the CPU.
pub(crate) fn lower<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
) -> Option<()> {
    let op = c.op_name();
    // Only what the conformance suite checks on the device.
    if !CLAIMS.contains(&op) {
        return None;
    }
    match op {
        "aten::add.out" => binary(b, g, c, 0, Some(2), 3),
        "aten::sub.out" => binary(b, g, c, 1, Some(2), 3),
        "aten::mul.out" => binary(b, g, c, 2, None, 2),
        "aten::div.out" => binary(b, g, c, 3, None, 2),
        "aten::maximum.out" => binary(b, g, c, 4, None, 2),
        "aten::minimum.out" => binary(b, g, c, 5, None, 2),
        "aten::mm.out" | "aten::bmm.out" => matmul(b, g, c, false),
        "aten::addmm.out" => matmul(b, g, c, true),
        "aten::convolution.out" => conv(b, g, c),
        "aten::_softmax.out" | "aten::_log_softmax.out" => softmax(b, g, c, op.contains("log")),
        "aten::native_layer_norm.out" => layer_norm(b, g, c),
        "aten::_native_batch_norm_legit_no_training.out" => batch_norm(b, g, c),
        "aten::sum.IntList_out" => reduce(b, g, c, 0, true),
        "aten::mean.out" => reduce(b, g, c, 1, true),
        "aten::amax.out" => reduce(b, g, c, 2, false),
        "aten::amin.out" => reduce(b, g, c, 3, false),
        "aten::avg_pool2d.out" => avg_pool(b, g, c),
        "aten::cat.out" => cat(b, g, c),
        "aten::_adaptive_avg_pool2d.out" => adaptive_pool(b, g, c),
        "aten::permute_copy.out"
        | "aten::t_copy.out"
        | "aten::transpose_copy.int_out"
        | "aten::expand_copy.out"
        | "aten::slice_copy.Tensor_out"
        | "aten::select_copy.int_out" => strided_copy(b, g, c, op),
        "aten::view_copy.out"
        | "aten::clone.out"
        | "aten::alias_copy.out"
        | "aten::detach_copy.out"
        | "aten::lift_fresh_copy.out"
        | "dim_order_ops::_clone_dim_order.out"
        | "dim_order_ops::_to_dim_order_copy.out"
        | "aten::squeeze_copy.dim_out"
        | "aten::squeeze_copy.dims_out"
        | "aten::unsqueeze_copy.out" => plain_copy(b, g, c, op),
        _ => unary(b, g, c, op),
    }
}

/// The output argument of a `.out` op with one output: its last argument.
fn last(c: &PrepareContext<'_, '_>) -> usize {
    c.num_args() - 1
}

fn unary<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    op: &str,
) -> Option<()> {
    let scalar = |i: usize| c.scalar(i).ok().map(|s| s.to_f64());
    let inf = f64::INFINITY;
    // (code, f0, f1, f2, whether the op reads its input)
    let (code, f, reads): (u32, [f64; 3], bool) = match op {
        "aten::relu.out" => (0, [0.0; 3], true),
        "aten::sigmoid.out" => (1, [0.0; 3], true),
        "aten::tanh.out" => (2, [0.0; 3], true),
        "aten::exp.out" => (3, [0.0; 3], true),
        "aten::neg.out" => (4, [0.0; 3], true),
        "aten::abs.out" => (5, [0.0; 3], true),
        "aten::sqrt.out" => (6, [0.0; 3], true),
        "aten::rsqrt.out" => (7, [0.0; 3], true),
        "aten::gelu.out" => match c.string(1).ok()? {
            "none" => (8, [0.0; 3], true),
            "tanh" => (9, [0.0; 3], true),
            _ => return None,
        },
        "aten::hardtanh.out" => (11, [scalar(1)?, scalar(2)?, 0.0], true),
        "aten::clamp.out" => {
            let lo = c.opt_scalar(1).ok()?.map_or(-inf, |s| s.to_f64());
            let hi = c.opt_scalar(2).ok()?.map_or(inf, |s| s.to_f64());
            (11, [lo, hi, 0.0], true)
        }
        "aten::log.out" => (14, [0.0; 3], true),
        "aten::leaky_relu.out" => (15, [scalar(1)?, 0.0, 0.0], true),
        "aten::elu.out" => (16, [scalar(1)?, scalar(2)?, scalar(3)?], true),
        "aten::mul.Scalar_out" => (17, [scalar(1)?, 0.0, 0.0], true),
        "aten::add.Scalar_out" => (18, [scalar(2)? * scalar(1)?, 0.0, 0.0], true),
        "aten::sub.Scalar_out" => (18, [-(scalar(2)? * scalar(1)?), 0.0, 0.0], true),
        "aten::reciprocal.out" => (19, [0.0; 3], true),
        "aten::erf.out" => (20, [0.0; 3], true),
        "aten::fill.Scalar_out" => (21, [scalar(1)?, 0.0, 0.0], true),
        "aten::full.out" => (21, [scalar(1)?, 0.0, 0.0], false),
        "aten::pow.Tensor_Scalar_out" => match scalar(1)? {
            2.0 => (22, [0.0; 3], true),
            0.5 => (6, [0.0; 3], true),
            _ => return None,
        },
        "aten::div.Scalar_out" => (23, [scalar(1)?, 0.0, 0.0], true),
        "aten::rsub.Scalar_out" => (24, [scalar(1)?, scalar(2)?, 0.0], true),
        _ => return None,
    };
    let out_arg = last(c);
    let x = if reads {
        let (x, xi) = b.read(g, c, 0)?;
        Some((x, xi.sizes().to_vec()))
    } else {
        None
    };
    let (o, oi) = b.write(g, c, out_arg)?;
    if let Some((_, xs)) = &x {
        if xs.as_slice() != oi.sizes() {
            return None;
        }
    } else {
        // full(size), the one op that reads no input: the size list must be the output's
        let size = c.int_list(0).ok()?;
        if size.len() != oi.rank()
            || (0..size.len()).any(|k| size.get(k).ok() != Some(oi.size(k) as i64))
        {
            return None;
        }
    }
    let x_off = x.map_or(o.off, |(s, _)| s.off);
    emit::unary(b, code, f, x_off, o.off, oi.numel() as u64)
}

fn binary<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    code: u32,
    alpha_arg: Option<usize>,
    out_arg: usize,
) -> Option<()> {
    if c.num_args() <= out_arg {
        return None;
    }
    let alpha = match alpha_arg {
        Some(i) => c.scalar(i).ok()?.to_f64(),
        None => 1.0,
    };
    let (a, ai) = b.read(g, c, 0)?;
    let (bb, bi) = b.read(g, c, 1)?;
    let (o, oi) = b.write(g, c, out_arg)?;
    emit::binary(
        b,
        code,
        alpha,
        (a, ai.sizes()),
        (bb, bi.sizes()),
        (o, oi.sizes()),
    )
}

fn matmul<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    addmm: bool,
) -> Option<()> {
    let (i1, i2, out_arg) = if addmm { (1, 2, 5) } else { (0, 1, 2) };
    if c.num_args() <= out_arg {
        return None;
    }
    let (x, xi) = b.read(g, c, i1)?;
    let (y, yi) = b.read(g, c, i2)?;
    let bias = if addmm { Some(b.read(g, c, 0)?) } else { None };
    let (o, oi) = b.write(g, c, out_arg)?;
    let (batch, m, k) = match xi.sizes() {
        [m, k] => (1, *m, *k),
        [bt, m, k] if !addmm => (*bt, *m, *k),
        _ => return None,
    };
    let (bt2, k2, n) = match yi.sizes() {
        [k2, n] => (1, *k2, *n),
        [bt, k2, n] if !addmm => (*bt, *k2, *n),
        _ => return None,
    };
    if bt2 != batch || k2 != k || xi.rank() != yi.rank() {
        return None;
    }
    let want: Vec<usize> = if xi.rank() == 3 {
        vec![batch, m, n]
    } else {
        vec![m, n]
    };
    if oi.sizes() != want.as_slice() {
        return None;
    }
    let (m, n, k, batch) = (m as u64, n as u64, k as u64, batch as u64);
    let bias = match bias {
        Some((s, bi)) => {
            let st = broadcast_strides(bi.sizes(), &[m as usize, n as usize])?;
            Some((s, [st[0], st[1]]))
        }
        None => None,
    };
    let (alpha, beta) = if addmm {
        (c.scalar(4).ok()?.to_f64(), c.scalar(3).ok()?.to_f64())
    } else {
        (1.0, 0.0)
    };
    emit::contiguous_product(b, [batch, m, n, k], (x, y, o), bias, (alpha, beta))
}

/// An int list argument of 1 or 2 items as a pair (one item stands for both dims).
fn pair_of(c: &PrepareContext<'_, '_>, i: usize, dims: usize) -> Option<(u64, u64)> {
    let l = c.int_list(i).ok()?;
    let v: Vec<i64> = l.iter().collect::<Result<_, _>>().ok()?;
    let v: Vec<u64> = v
        .iter()
        .map(|&x| u64::try_from(x).ok())
        .collect::<Option<_>>()?;
    match (dims, v.as_slice()) {
        (1, &[a]) => Some((1, a)),
        (2, &[a]) => Some((a, a)),
        (2, &[a, b]) => Some((a, b)),
        _ => None,
    }
}

fn conv<'g>(b: &mut Builder<'g>, g: &CallGraph<'g, '_>, c: &PrepareContext<'g, '_>) -> Option<()> {
    if c.num_args() <= 10 || c.bool(6).ok()? {
        return None;
    }
    let groups = c.int(8).ok()?;
    let (x, xi) = b.read(g, c, 0)?;
    let (w, wi) = b.read(g, c, 1)?;
    let bias = if c.is_none(2).ok()? {
        None
    } else {
        Some(b.read(g, c, 2)?)
    };
    let (o, oi) = b.write(g, c, 9)?;
    let list = |i: usize| -> Option<Vec<i64>> {
        c.int_list(i).ok()?.iter().collect::<Result<_, _>>().ok()
    };
    let (geometry, want) = emit::conv_geometry(
        xi.sizes(),
        wi.sizes(),
        (&list(3)?, &list(4)?, &list(5)?),
        groups,
    )?;
    if bias.is_some_and(|(_, bi)| bi.numel() as u64 != geometry[3])
        || oi
            .sizes()
            .iter()
            .map(|&v| v as u64)
            .ne(want.iter().copied())
    {
        return None;
    }
    emit::conv2d(
        b,
        geometry,
        x,
        w,
        bias.map(|(s, _)| s),
        o,
        oi.numel() as u64,
    )
}

fn softmax<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    log: bool,
) -> Option<()> {
    if c.num_args() <= 4 || c.bool(2).ok()? {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    let (o, oi) = b.write(g, c, 3)?;
    if xi.sizes() != oi.sizes() {
        return None;
    }
    let sizes = xi.sizes();
    let (dim, inner) = if sizes.is_empty() {
        (1u64, 1u64)
    } else {
        let d = dim_of(c.int(1).ok()?, sizes.len())?;
        (
            sizes[d] as u64,
            sizes[d + 1..].iter().map(|&v| v as u64).product(),
        )
    };
    let numel = xi.numel() as u64;
    let rows = if dim == 0 { 0 } else { numel / dim };
    emit::softmax(b, rows, dim, inner, x, o, log)
}

fn layer_norm<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
) -> Option<()> {
    if c.num_args() <= 8 {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    let norm = c.int_list(1).ok()?;
    let nd = norm.len();
    if nd == 0 || nd > xi.rank() {
        return None;
    }
    for k in 0..nd {
        if norm.get(k).ok()? != xi.size(xi.rank() - nd + k) as i64 {
            return None;
        }
    }
    let m: u64 = xi.sizes()[xi.rank() - nd..]
        .iter()
        .map(|&v| v as u64)
        .product();
    let w = if c.is_none(2).ok()? {
        None
    } else {
        Some(b.read(g, c, 2)?)
    };
    let bias = if c.is_none(3).ok()? {
        None
    } else {
        Some(b.read(g, c, 3)?)
    };
    for (_, t) in w.iter().chain(bias.iter()) {
        if t.numel() as u64 != m {
            return None;
        }
    }
    let eps = c.double(4).ok()?;
    let (o, oi) = b.write(g, c, 5)?;
    let (mean, mi) = b.write(g, c, 6)?;
    let (rstd, ri) = b.write(g, c, 7)?;
    let rows = if m == 0 { 0 } else { xi.numel() as u64 / m };
    if oi.sizes() != xi.sizes() || mi.numel() as u64 != rows || ri.numel() as u64 != rows || m == 0
    {
        return None;
    }
    let (w, bias) = (w.map(|(s, _)| s), bias.map(|(s, _)| s));
    emit::layer_norm(b, rows, m, eps, x, o, w, bias, (mean, rstd))
}

fn batch_norm<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
) -> Option<()> {
    if c.num_args() <= 10 {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    if xi.rank() < 2 {
        return None;
    }
    let ch = xi.size(1) as u64;
    let inner: u64 = xi.sizes()[2..].iter().map(|&v| v as u64).product();
    let w = if c.is_none(1).ok()? {
        None
    } else {
        Some(b.read(g, c, 1)?)
    };
    let bias = if c.is_none(2).ok()? {
        None
    } else {
        Some(b.read(g, c, 2)?)
    };
    let (mean, mi) = b.read(g, c, 3)?;
    let (var, vi) = b.read(g, c, 4)?;
    for (_, t) in w.iter().chain(bias.iter()).chain([&(mean, mi), &(var, vi)]) {
        if t.numel() as u64 != ch {
            return None;
        }
    }
    let eps = c.double(6).ok()?;
    let (o, oi) = b.write(g, c, 7)?;
    // The saved statistics of the no-training variant are empty.
    let (_, s1) = b.write(g, c, 8)?;
    let (_, s2) = b.write(g, c, 9)?;
    if oi.sizes() != xi.sizes() || s1.numel() != 0 || s2.numel() != 0 {
        return None;
    }
    let (w, bias) = (w.map(|(s, _)| s), bias.map(|(s, _)| s));
    let n = xi.numel() as u64;
    emit::batch_norm(b, n, ch, inner.max(1), eps, x, o, (mean, var), w, bias)
}

/// sum / mean (dims optional, an empty list reduces all, an optional dtype that must be
/// float32) and amax / amin (dims list).
fn reduce<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    code: u64,
    with_dtype: bool,
) -> Option<()> {
    let out_arg = if with_dtype { 4 } else { 3 };
    if c.num_args() <= out_arg {
        return None;
    }
    if with_dtype && !matches!(c.opt_dtype(3).ok()?, None | Some(ScalarType::Float)) {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    let rank = xi.rank();
    let mut reduced = vec![false; rank];
    match c.opt_int_list(1).ok()? {
        Some(l) if !l.is_empty() => {
            for d in l.iter() {
                let d = dim_of(d.ok()?, rank)?;
                if rank == 0 {
                    continue;
                }
                reduced[d] = true;
            }
        }
        _ => reduced.iter_mut().for_each(|r| *r = true),
    }
    let keepdim = c.bool(2).ok()?;
    let (o, oi) = b.write(g, c, out_arg)?;
    emit::reduce(b, code, x, xi.sizes(), &reduced, keepdim, (o, oi.sizes()))
}

/// The planes, height and width of an NCHW or CHW tensor.
fn planes(t: &TensorInfo) -> Option<(u64, u64, u64)> {
    let r = t.rank();
    if !(3..=4).contains(&r) {
        return None;
    }
    let h = t.size(r - 2) as u64;
    let w = t.size(r - 1) as u64;
    let planes: u64 = t.sizes()[..r - 2].iter().map(|&v| v as u64).product();
    Some((planes, h, w))
}

fn avg_pool<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
) -> Option<()> {
    if c.num_args() <= 8 {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    let (np, h, w) = planes(xi)?;
    let (kh, kw) = pair_of(c, 1, 2)?;
    let (sh, sw) = if c.int_list(2).ok()?.is_empty() {
        (kh, kw)
    } else {
        pair_of(c, 2, 2)?
    };
    let (ph, pw) = pair_of(c, 3, 2)?;
    let ceil = c.bool(4).ok()?;
    let cip = c.bool(5).ok()?;
    let divisor = match c.opt_int(6).ok()? {
        None => 0,
        Some(d) if d > 0 => d as u64,
        Some(_) => return None,
    };
    if [kh, kw, sh, sw].contains(&0) || 2 * ph > kh || 2 * pw > kw || ph > h + kh {
        return None;
    }
    let out_len = |size: u64, k: u64, s: u64, p: u64| -> Option<u64> {
        let span = (size + 2 * p).checked_sub(k)?;
        let mut o = if ceil { span.div_ceil(s) } else { span / s } + 1;
        if ceil && (o - 1) * s >= size + p {
            o -= 1;
        }
        Some(o)
    };
    let (oh, ow) = (out_len(h, kh, sh, ph)?, out_len(w, kw, sw, pw)?);
    let (o, oi) = b.write(g, c, 7)?;
    let (onp, ooh, oow) = planes(oi)?;
    if (onp, ooh, oow) != (np, oh, ow) || oi.rank() != xi.rank() {
        return None;
    }
    pool_step(
        b,
        x,
        o,
        (h, w, oh, ow),
        [kh, kw, sh, sw, ph, pw],
        cip,
        divisor,
        false,
        oi.numel() as u64,
    )
}

fn adaptive_pool<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
) -> Option<()> {
    if c.num_args() <= 3 {
        return None;
    }
    let (x, xi) = b.read(g, c, 0)?;
    let (np, h, w) = planes(xi)?;
    let (oh, ow) = pair_of(c, 1, 2)?;
    let (o, oi) = b.write(g, c, 2)?;
    if planes(oi)? != (np, oh, ow)
        || oi.rank() != xi.rank()
        || oh == 0
        || ow == 0
        || h == 0
        || w == 0
    {
        return None;
    }
    pool_step(
        b,
        x,
        o,
        (h, w, oh, ow),
        [0; 6],
        false,
        0,
        true,
        oi.numel() as u64,
    )
}

/// Copies whose bytes are the input's in order (views, clones, same-dtype conversions).
fn plain_copy<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    op: &str,
) -> Option<()> {
    if op.starts_with("dim_order_ops::") {
        // (self, non_blocking, dim_order?, out): the output is contiguous (checked by
        // `write`), so a dim order, if given, must be the identity
        if let Some(order) = c.opt_int_list(2).ok()? {
            if (0..order.len()).any(|k| order.get(k).ok() != Some(k as i64)) {
                return None;
            }
        }
    }
    let (x, xi) = b.read(g, c, 0)?;
    let (o, oi) = b.write(g, c, last(c))?;
    if xi.numel() != oi.numel() {
        return None;
    }
    let n = oi.numel() as u64;
    copy_step(b, &[n], (x.off, &[1]), (o.off, &[1]))
}

fn strided_copy<'g>(
    b: &mut Builder<'g>,
    g: &CallGraph<'g, '_>,
    c: &PrepareContext<'g, '_>,
    op: &str,
) -> Option<()> {
    let (x, xi) = b.read(g, c, 0)?;
    let (o, oi) = b.write(g, c, last(c))?;
    let ins = xi.sizes();
    let ist = strides(ins);
    let rank = ins.len();
    let out: Vec<u64> = oi.sizes().iter().map(|&v| v as u64).collect();
    let (mut off, src): (u64, Vec<u64>) = (
        0,
        match op {
            "aten::permute_copy.out" => {
                let dims = c.int_list(1).ok()?;
                if dims.len() != rank {
                    return None;
                }
                let mut seen = vec![false; rank];
                let mut s = Vec::with_capacity(rank);
                for k in 0..rank {
                    let d = dim_of(dims.get(k).ok()?, rank)?;
                    if std::mem::replace(&mut seen[d], true) || out[k] != ins[d] as u64 {
                        return None;
                    }
                    s.push(ist[d]);
                }
                s
            }
            "aten::transpose_copy.int_out" | "aten::t_copy.out" => {
                if rank == 0 {
                    return None;
                }
                let (d0, d1) = if op == "aten::t_copy.out" {
                    (0, rank - 1)
                } else {
                    (dim_of(c.int(1).ok()?, rank)?, dim_of(c.int(2).ok()?, rank)?)
                };
                let mut s = ist.clone();
                s.swap(d0, d1);
                let mut want: Vec<u64> = ins.iter().map(|&v| v as u64).collect();
                want.swap(d0, d1);
                if want != out {
                    return None;
                }
                s
            }
            "aten::expand_copy.out" => broadcast_strides(ins, oi.sizes())?,
            "aten::slice_copy.Tensor_out" => {
                if rank == 0 {
                    return None;
                }
                let d = dim_of(c.int(1).ok()?, rank)?;
                let size = ins[d] as i64;
                let step = c.int(4).ok()?;
                if step <= 0 {
                    return None;
                }
                let clampi = |v: i64| {
                    if v < 0 {
                        (v + size).max(0)
                    } else {
                        v.min(size)
                    }
                };
                let start = clampi(c.opt_int(2).ok()?.unwrap_or(0));
                let end = clampi(c.opt_int(3).ok()?.unwrap_or(size)).max(start);
                let len = (end - start + step - 1) / step;
                let mut want: Vec<u64> = ins.iter().map(|&v| v as u64).collect();
                want[d] = len as u64;
                if want != out {
                    return None;
                }
                let mut s = ist.clone();
                s[d] = ist[d].checked_mul(step as u64)?;
                return copy_step(
                    b,
                    &out,
                    (x.off + start as u64 * ist[d], &s),
                    (o.off, &strides(oi.sizes())),
                );
            }
            "aten::select_copy.int_out" => {
                if rank == 0 {
                    return None;
                }
                let d = dim_of(c.int(1).ok()?, rank)?;
                let size = ins[d] as i64;
                let mut i = c.int(2).ok()?;
                if i < 0 {
                    i += size;
                }
                if i < 0 || i >= size {
                    return None;
                }
                let mut want: Vec<u64> = ins.iter().map(|&v| v as u64).collect();
                want.remove(d);
                if want != out {
                    return None;
                }
                let mut s = ist.clone();
                s.remove(d);
                return copy_step(
                    b,
                    &out,
                    (x.off + i as u64 * ist[d], &s),
                    (o.off, &strides(oi.sizes())),
                );
            }
            _ => return None,
        },
    );
    if src.len() != out.len() {
        return None;
    }
    off += x.off;
    copy_step(b, &out, (off, &src), (o.off, &strides(oi.sizes())))
}

fn cat<'g>(b: &mut Builder<'g>, g: &CallGraph<'g, '_>, c: &PrepareContext<'g, '_>) -> Option<()> {
    if c.num_args() <= 2 {
        return None;
    }
    let items: Vec<usize> = c.tensor_list(0).ok()?.iter().map(|&v| v as usize).collect();
    let mut parts = Vec::with_capacity(items.len());
    for &v in &items {
        parts.push(b.read_value(g, v)?);
    }
    let (o, oi) = b.write(g, c, 2)?;
    let rank = oi.rank();
    if rank == 0 {
        return None;
    }
    let d = dim_of(c.int(1).ok()?, rank)?;
    let ost = strides(oi.sizes());
    let mut at = 0u64;
    for (s, t) in parts {
        // The portable kernel skips legacy empty 1-d tensors.
        if t.rank() == 1 && t.numel() == 0 {
            continue;
        }
        if t.rank() != rank || (0..rank).any(|k| k != d && t.size(k) != oi.size(k)) {
            return None;
        }
        let shape: Vec<u64> = t.sizes().iter().map(|&v| v as u64).collect();
        copy_step(
            b,
            &shape,
            (s.off, &strides(t.sizes())),
            (o.off + at * ost[d], &ost),
        )?;
        at += t.size(d) as u64;
    }
    (at == oi.size(d) as u64).then_some(())
}
