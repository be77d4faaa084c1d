//! The steps each kernel takes, with their parameter words: what the portable lowering
//! (`lower.rs`) and the Vulkan delegate (`vulkan.rs`) both emit.

use crate::kernels::{elementwise_grid, groups_2d, Kernel, MAX_GROUPS};
use crate::words::Slot;

/// Where steps go.
pub(crate) trait Steps {
    fn step(&mut self, kernel: Kernel, params: Vec<u32>, grid: [u32; 3]);
}

/// Most dims a strided step walks (the kernels read shape and strides from the parameters).
pub(crate) const MAX_RANK: usize = 8;

pub(crate) fn u32of(v: u64) -> Option<u32> {
    u32::try_from(v).ok()
}

pub(crate) fn f32bits(v: f64) -> u32 {
    (v as f32).to_bits()
}

/// Contiguous strides (in elements) of `sizes`.
pub(crate) fn strides(sizes: &[usize]) -> Vec<u64> {
    let mut s = vec![0u64; sizes.len()];
    let mut acc = 1u64;
    for d in (0..sizes.len()).rev() {
        s[d] = acc;
        acc = acc.saturating_mul(sizes[d] as u64);
    }
    s
}

/// Strides of `t` (sizes `sizes`) read as a tensor broadcast to `out` (right-aligned).
pub(crate) fn broadcast_strides(sizes: &[usize], out: &[usize]) -> Option<Vec<u64>> {
    if sizes.len() > out.len() {
        return None;
    }
    let own = strides(sizes);
    let lead = out.len() - sizes.len();
    (0..out.len())
        .map(|d| {
            if d < lead {
                return Some(0);
            }
            let s = sizes[d - lead];
            if s == out[d] {
                Some(if s == 1 { 0 } else { own[d - lead] })
            } else if s == 1 {
                Some(0)
            } else {
                None
            }
        })
        .collect()
}

pub(crate) fn push_all(params: &mut Vec<u32>, words: &[u64]) -> Option<()> {
    for &w in words {
        params.push(u32of(w)?);
    }
    Some(())
}

/// `out = op(a, b)` over the broadcast of `a` and `b`, which must be `out`'s shape.
pub(crate) fn binary(
    b: &mut impl Steps,
    code: u32,
    alpha: f64,
    (a, a_sizes): (Slot, &[usize]),
    (bb, b_sizes): (Slot, &[usize]),
    (o, out): (Slot, &[usize]),
) -> Option<()> {
    if out.len() > MAX_RANK {
        return None;
    }
    let sa = broadcast_strides(a_sizes, out)?;
    let sb = broadcast_strides(b_sizes, out)?;
    // The output's shape must be the broadcast of the two (no implicit resize).
    let rank = out.len();
    for d in 0..rank {
        let da = d.checked_sub(rank - a_sizes.len()).map(|j| a_sizes[j]);
        let db = d.checked_sub(rank - b_sizes.len()).map(|j| b_sizes[j]);
        let want = match (da, db) {
            (Some(x), Some(y)) if x == y || y == 1 => x,
            (Some(1), Some(y)) => y,
            (Some(x), None) => x,
            (None, Some(y)) => y,
            _ => return None,
        };
        if want != out[d] {
            return None;
        }
    }
    let n: u64 = out.iter().map(|&v| v as u64).product();
    let mut p = vec![
        u32of(n)?,
        code,
        f32bits(alpha),
        rank as u32,
        u32of(a.off)?,
        u32of(bb.off)?,
        u32of(o.off)?,
    ];
    push_all(&mut p, &out.iter().map(|&s| s as u64).collect::<Vec<_>>())?;
    push_all(&mut p, &sa)?;
    push_all(&mut p, &sb)?;
    b.step(Kernel::Binary, p, elementwise_grid(n)?);
    Some(())
}

/// One matmul step: `batch` products of [m, k] by [k, n] with the operands' strides
/// (batch, row, col), into a contiguous output, plus an optional bias [m, n] by strides.
pub(crate) struct Product {
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub a: (Slot, [u64; 3]),
    pub b: (Slot, [u64; 3]),
    pub out: Slot,
    pub bias: Option<(Slot, [u64; 2])>,
    pub alpha: f64,
    pub beta: f64,
}

/// `batch` products of contiguous `[m, k]` and `[k, n]` operands (plus `beta` · a bias with
/// the given strides) into a contiguous output.
pub(crate) fn contiguous_product(
    b: &mut impl Steps,
    [batch, m, n, k]: [u64; 4],
    (x, y, out): (Slot, Slot, Slot),
    bias: Option<(Slot, [u64; 2])>,
    (alpha, beta): (f64, f64),
) -> Option<()> {
    product(
        b,
        Product {
            batch,
            m,
            n,
            k,
            a: (x, [m * k, k, 1]),
            b: (y, [k * n, n, 1]),
            out,
            bias,
            alpha,
            beta,
        },
    )
}

pub(crate) fn product(b: &mut impl Steps, p: Product) -> Option<()> {
    // One row: a workgroup per output (the tiles would leave 15 of 16 rows idle).
    let gemv = p.m == 1 && p.n <= u64::from(MAX_GROUPS) * u64::from(MAX_GROUPS);
    let grid = if gemv {
        let [x, y, _] = groups_2d(p.n)?;
        [u64::from(x), u64::from(y), p.batch]
    } else {
        [p.n.div_ceil(16), p.m.div_ceil(16), p.batch]
    };
    if grid.iter().any(|&g| g > u64::from(MAX_GROUPS)) {
        return None;
    }
    let grid = if p.m * p.n * p.batch == 0 {
        [0, 0, 0]
    } else {
        [grid[0] as u32, grid[1] as u32, grid[2] as u32]
    };
    let (bias_off, bias_s, has_bias) = match p.bias {
        Some((s, st)) => (s.off, st, 1),
        None => (0, [0, 0], 0),
    };
    let mut w = vec![
        u32of(p.m)?,
        u32of(p.n)?,
        u32of(p.k)?,
        u32of(p.a.0.off)?,
        u32of(p.b.0.off)?,
        u32of(p.out.off)?,
        u32of(bias_off)?,
        has_bias,
        f32bits(p.alpha),
        f32bits(p.beta),
    ];
    push_all(&mut w, &p.a.1)?;
    push_all(&mut w, &p.b.1)?;
    push_all(&mut w, &bias_s)?;
    b.step(if gemv { Kernel::Gemv } else { Kernel::Matmul }, w, grid);
    Some(())
}

/// A 2-d average pooling step (`window`: kh, kw, sh, sw, ph, pw; adaptive ignores it).
pub(crate) fn pool_step(
    b: &mut impl Steps,
    x: Slot,
    o: Slot,
    (h, w, oh, ow): (u64, u64, u64, u64),
    window: [u64; 6],
    cip: bool,
    divisor: u64,
    adaptive: bool,
    n_out: u64,
) -> Option<()> {
    let mut p = Vec::new();
    push_all(&mut p, &[n_out, h, w, oh, ow])?;
    push_all(&mut p, &window)?;
    push_all(
        &mut p,
        &[u64::from(cip), divisor, u64::from(adaptive), x.off, o.off],
    )?;
    b.step(Kernel::Pool, p, elementwise_grid(n_out)?);
    Some(())
}

/// A copy step walking `shape` with source and destination strides.
pub(crate) fn copy_step(
    b: &mut impl Steps,
    shape: &[u64],
    src: (u64, &[u64]),
    dst: (u64, &[u64]),
) -> Option<()> {
    if shape.len() > MAX_RANK {
        return None;
    }
    let n: u64 = shape.iter().product();
    let mut p = vec![shape.len() as u32];
    p.insert(0, u32of(n)?);
    push_all(&mut p, &[src.0, dst.0])?;
    push_all(&mut p, shape)?;
    push_all(&mut p, src.1)?;
    push_all(&mut p, dst.1)?;
    b.step(Kernel::Copy, p, elementwise_grid(n)?);
    Some(())
}

/// `out[i] = f(x[i])` for `n` elements (`code`: the kernel's op; `f`: its parameters).
pub(crate) fn unary(
    b: &mut impl Steps,
    code: u32,
    f: [f64; 3],
    x_off: u64,
    o_off: u64,
    n: u64,
) -> Option<()> {
    b.step(
        Kernel::Unary,
        vec![
            u32of(n)?,
            code,
            u32of(x_off)?,
            u32of(o_off)?,
            f32bits(f[0]),
            f32bits(f[1]),
            f32bits(f[2]),
        ],
        elementwise_grid(n)?,
    );
    Some(())
}

/// A reduction of `x` (`sizes`) over the dims marked in `reduced` (`code`: 0 sum, 1 mean,
/// 2 amax, 3 amin) into `out`, whose shape must be the kept dims (size 1 for the reduced ones
/// with `keepdim`).
pub(crate) fn reduce(
    b: &mut impl Steps,
    code: u64,
    x: Slot,
    sizes: &[usize],
    reduced: &[bool],
    keepdim: bool,
    (o, out): (Slot, &[usize]),
) -> Option<()> {
    let rank = sizes.len();
    let st = strides(sizes);
    let (mut keep_s, mut keep_st, mut red_s, mut red_st) = (vec![], vec![], vec![], vec![]);
    let mut want = Vec::new();
    for d in 0..rank {
        let s = sizes[d] as u64;
        if reduced[d] {
            red_s.push(s);
            red_st.push(st[d]);
            if keepdim {
                want.push(1);
            }
        } else {
            keep_s.push(s);
            keep_st.push(st[d]);
            want.push(s);
        }
    }
    if out.iter().map(|&v| v as u64).ne(want.iter().copied())
        || keep_s.len() > MAX_RANK
        || red_s.len() > MAX_RANK
    {
        return None;
    }
    let count: u64 = red_s.iter().product();
    // amax / amin of nothing is an error in the portable kernel; the mean of nothing is NaN.
    if count == 0 && code >= 2 {
        return None;
    }
    let n_out: u64 = out.iter().map(|&v| v as u64).product();
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            n_out,
            code,
            x.off,
            o.off,
            keep_s.len() as u64,
            red_s.len() as u64,
            count,
        ],
    )?;
    push_all(&mut p, &keep_s)?;
    push_all(&mut p, &keep_st)?;
    push_all(&mut p, &red_s)?;
    push_all(&mut p, &red_st)?;
    b.step(Kernel::Reduce, p, elementwise_grid(n_out)?);
    Some(())
}

/// A direct 2-d convolution of `total` outputs; `geometry`: cin, h, w, cout, oh, ow, kh, kw,
/// sh, sw, ph, pw, dh, dw, groups (checked by the caller against the tensors).
pub(crate) fn conv2d(
    b: &mut impl Steps,
    geometry: [u64; 15],
    x: Slot,
    w: Slot,
    bias: Option<Slot>,
    o: Slot,
    total: u64,
) -> Option<()> {
    let (b_off, has_b) = bias.map_or((0, 0), |s| (s.off, 1));
    let mut p = Vec::new();
    push_all(&mut p, &[total])?;
    push_all(&mut p, &geometry)?;
    push_all(&mut p, &[x.off, w.off, b_off, has_b, o.off])?;
    b.step(Kernel::Conv2d, p, elementwise_grid(total)?);
    Some(())
}

/// Softmax (or log-softmax) along a dim of `dim` elements `inner` apart, `rows` of them.
pub(crate) fn softmax(
    b: &mut impl Steps,
    rows: u64,
    dim: u64,
    inner: u64,
    x: Slot,
    o: Slot,
    log: bool,
) -> Option<()> {
    let mut p = Vec::new();
    push_all(&mut p, &[rows, dim, inner, x.off, o.off, u64::from(log), 0])?;
    b.step(Kernel::Rows, p, groups_2d(rows)?);
    Some(())
}

/// Layer normalization of `rows` rows of `m` elements, with optional weight and bias; the
/// rows' means and reciprocal standard deviations go to `stats`.
pub(crate) fn layer_norm(
    b: &mut impl Steps,
    rows: u64,
    m: u64,
    eps: f64,
    x: Slot,
    o: Slot,
    w: Option<Slot>,
    bias: Option<Slot>,
    stats: (Slot, Slot),
) -> Option<()> {
    norm(b, 1, (rows, m), eps, (x, o), (w, bias), Some(stats))
}

/// RMS normalization of `rows` rows of `m` elements, times an optional weight: the layer
/// norm's step with the mean taken as 0.
pub(crate) fn rms_norm(
    b: &mut impl Steps,
    (rows, m): (u64, u64),
    eps: f64,
    x: Slot,
    o: Slot,
    w: Option<Slot>,
) -> Option<()> {
    norm(b, 2, (rows, m), eps, (x, o), (w, None), None)
}

/// A row-normalization step of `shaders/rows.wgsl` (`kind` 1: layer norm, 2: RMS norm).
fn norm(
    b: &mut impl Steps,
    kind: u64,
    (rows, m): (u64, u64),
    eps: f64,
    (x, o): (Slot, Slot),
    (w, bias): (Option<Slot>, Option<Slot>),
    stats: Option<(Slot, Slot)>,
) -> Option<()> {
    let (w_off, has_w) = w.map_or((0, 0), |s| (s.off, 1));
    let (b_off, has_b) = bias.map_or((0, 0), |s| (s.off, 1));
    let (mean, rstd) = stats.map_or((0, 0), |(m, r)| (m.off, r.off));
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            rows,
            m,
            0,
            x.off,
            o.off,
            u64::from(f32bits(eps)),
            kind,
            w_off,
            has_w,
            b_off,
            has_b,
            mean,
            rstd,
        ],
    )?;
    b.step(Kernel::Rows, p, groups_2d(rows)?);
    Some(())
}

/// Inference batch norm over `n` elements, `ch` channels `inner` apart.
pub(crate) fn batch_norm(
    b: &mut impl Steps,
    n: u64,
    ch: u64,
    inner: u64,
    eps: f64,
    x: Slot,
    o: Slot,
    (mean, var): (Slot, Slot),
    w: Option<Slot>,
    bias: Option<Slot>,
) -> Option<()> {
    let (w_off, has_w) = w.map_or((0, 0), |s| (s.off, 1));
    let (b_off, has_b) = bias.map_or((0, 0), |s| (s.off, 1));
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            n,
            ch,
            inner,
            x.off,
            o.off,
            mean.off,
            var.off,
            w_off,
            has_w,
            b_off,
            has_b,
            u64::from(f32bits(eps)),
        ],
    )?;
    b.step(Kernel::Channel, p, elementwise_grid(n)?);
    Some(())
}

/// The geometry of a 1-d or 2-d convolution of `x` (N, C, [H,] W) by `w` (Cout, C/groups,
/// [KH,] KW) with PyTorch's stride / padding / dilation lists (one item stands for both
/// dims), as [`conv2d`] takes it, and the output's dims; `None` for what the kernel cannot
/// run (a window larger than the padded input, zero strides, inconsistent groups).
pub(crate) fn conv_geometry(
    x: &[usize],
    w: &[usize],
    (stride, pad, dil): (&[i64], &[i64], &[i64]),
    groups: i64,
) -> Option<([u64; 15], Vec<u64>)> {
    let spatial = x.len().checked_sub(2)?;
    if !(1..=2).contains(&spatial) || w.len() != x.len() {
        return None;
    }
    let pair = |l: &[i64]| -> Option<(u64, u64)> {
        let v: Vec<u64> = l
            .iter()
            .map(|&x| u64::try_from(x).ok())
            .collect::<Option<_>>()?;
        match (spatial, v.as_slice()) {
            (1, &[a]) => Some((0, a)),
            (2, &[a]) => Some((a, a)),
            (2, &[a, b]) => Some((a, b)),
            _ => None,
        }
    };
    let dims = |t: &[usize]| -> (u64, u64, u64, u64) {
        let d = |i: usize| t[i] as u64;
        if spatial == 2 {
            (d(0), d(1), d(2), d(3))
        } else {
            (d(0), d(1), 1, d(2))
        }
    };
    let groups = u64::try_from(groups).ok()?;
    let (n, cin, h, wd) = dims(x);
    let (cout, gin, kh, kw) = dims(w);
    let (sh, sw) = pair(stride)?;
    let (ph, pw) = pair(pad)?;
    let (dh, dw) = pair(dil)?;
    // A 1-d convolution has a height of one: stride and dilation 1 there.
    let (sh, dh) = if spatial == 1 { (1, 1) } else { (sh, dh) };
    if groups == 0
        || gin.checked_mul(groups) != Some(cin)
        || cout % groups != 0
        || [sh, sw, dh, dw, kh, kw].contains(&0)
        || [sh, sw, ph, pw, dh, dw].iter().any(|&v| v > 1 << 20)
    {
        return None;
    }
    let oh = (h + 2 * ph).checked_sub(dh * (kh - 1) + 1)? / sh + 1;
    let ow = (wd + 2 * pw).checked_sub(dw * (kw - 1) + 1)? / sw + 1;
    let out = if spatial == 2 {
        vec![n, cout, oh, ow]
    } else {
        vec![n, cout, ow]
    };
    Some((
        [
            cin, h, wd, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups,
        ],
        out,
    ))
}

/// An int32 / bool step (`shaders/ints.wgsl`, op `code`, scalars `s0`, `s1`) over `out`'s
/// index space, reading up to three operands broadcast to it.
pub(crate) fn ints(
    b: &mut impl Steps,
    code: u32,
    (s0, s1): (i32, i32),
    operands: &[(Slot, &[usize])],
    (o, out): (Slot, &[usize]),
) -> Option<()> {
    if out.len() > MAX_RANK || operands.len() > 3 {
        return None;
    }
    let mut offs = [o.off; 3];
    let mut st = vec![vec![0u64; out.len()]; 3];
    for (k, &(s, sizes)) in operands.iter().enumerate() {
        offs[k] = s.off;
        st[k] = broadcast_strides(sizes, out)?;
    }
    let n: u64 = out.iter().map(|&v| v as u64).product();
    let mut p = vec![u32of(n)?, code, s0 as u32, s1 as u32, out.len() as u32];
    push_all(&mut p, &[offs[0], offs[1], offs[2], o.off])?;
    push_all(&mut p, &out.iter().map(|&v| v as u64).collect::<Vec<_>>())?;
    for s in &st {
        push_all(&mut p, s)?;
    }
    b.step(Kernel::Ints, p, elementwise_grid(n)?);
    Some(())
}

/// Embedding rows: `out[t, :] = w[idx[t], :]` for `tokens` indices into `rows` rows of `width`.
pub(crate) fn embedding(
    b: &mut impl Steps,
    w: Slot,
    (rows, width): (u64, u64),
    idx: Slot,
    tokens: u64,
    o: Slot,
) -> Option<()> {
    let n = tokens.checked_mul(width)?;
    let mut p = vec![u32of(n)?, 0];
    push_all(&mut p, &[w.off, idx.off, o.off, rows, width])?;
    b.step(Kernel::Gather, p, elementwise_grid(n)?);
    Some(())
}

/// `gather(src, dim, index)`: `out` has `index`'s shape (contiguous, as `index` is).
pub(crate) fn gather(
    b: &mut impl Steps,
    (src, src_sizes): (Slot, &[usize]),
    dim: usize,
    idx: Slot,
    (o, out): (Slot, &[usize]),
) -> Option<()> {
    let rank = out.len();
    if rank == 0 || rank > MAX_RANK || src_sizes.len() != rank || dim >= rank {
        return None;
    }
    let n: u64 = out.iter().map(|&v| v as u64).product();
    let mut p = vec![u32of(n)?, 1];
    push_all(&mut p, &[src.off, idx.off, o.off, rank as u64, dim as u64])?;
    push_all(&mut p, &out.iter().map(|&v| v as u64).collect::<Vec<_>>())?;
    push_all(&mut p, &strides(src_sizes))?;
    push_all(&mut p, &[src_sizes[dim] as u64])?;
    b.step(Kernel::Gather, p, elementwise_grid(n)?);
    Some(())
}

/// Each row's int8 scale and zero point (asymmetric, the row one block), into `scale` (float)
/// and `zp` (int words).
pub(crate) fn row_qparams(
    b: &mut impl Steps,
    (rows, m): (u64, u64),
    (qmin, qmax): (i32, i32),
    x: Slot,
    (scale, zp): (Slot, Slot),
) -> Option<()> {
    let mut p = Vec::new();
    push_all(&mut p, &[rows, m, 0, x.off, scale.off, zp.off, 3])?;
    p.push(qmin as u32);
    p.push(qmax as u32);
    b.step(Kernel::Rows, p, groups_2d(rows)?);
    Some(())
}

/// Rotary embedding of `tokens` rows of `heads` heads of `2 * half` values.
pub(crate) fn rope(
    b: &mut impl Steps,
    (tokens, heads, half): (u64, u64, u64),
    x: Slot,
    o: Slot,
    (cos, sin): (Slot, Slot),
) -> Option<()> {
    let pairs = tokens.checked_mul(heads)?.checked_mul(half)?;
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[pairs, heads, half, x.off, o.off, cos.off, sin.off, 0],
    )?;
    b.step(Kernel::Rope, p, elementwise_grid(pairs)?);
    Some(())
}

/// Hugging Face's rotary embedding (rotate-half) of the first `rotary` values of each of
/// `heads` heads of `dim` values, `tokens` rows at table rows `start..` (see
/// `shaders/rope.wgsl`).
pub(crate) fn rope_halves(
    b: &mut impl Steps,
    (tokens, heads, dim): (u64, u64, u64),
    (rotary, start): (u64, u64),
    x: Slot,
    o: Slot,
    (cos, sin): (Slot, Slot),
) -> Option<()> {
    let n = tokens.checked_mul(heads)?.checked_mul(dim)?;
    if rotary > dim || !rotary.is_multiple_of(2) {
        return None;
    }
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            n, heads, dim, x.off, o.off, cos.off, sin.off, 1, rotary, start,
        ],
    )?;
    b.step(Kernel::Rope, p, elementwise_grid(n)?);
    Some(())
}

/// Attention of `tokens` query rows at positions `start..` over the first `keys` rows of a
/// cache of `ctx` rows (see `shaders/attend.wgsl`).
pub(crate) struct Attention {
    pub tokens: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub dim: u64,
    pub start: u64,
    pub keys: u64,
    pub ctx: u64,
    pub scale: f64,
    pub causal: bool,
    pub q: Slot,
    pub k: Slot,
    pub v: Slot,
    pub out: Slot,
    pub scratch: Slot,
}

pub(crate) fn attend(b: &mut impl Steps, a: Attention) -> Option<()> {
    let rows = a.tokens.checked_mul(a.heads)?;
    if a.kv_heads == 0
        || !a.heads.is_multiple_of(a.kv_heads)
        || rows.checked_mul(a.ctx)? > a.scratch.words
    {
        return None;
    }
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            rows,
            a.heads,
            a.kv_heads,
            a.dim,
            a.start,
            a.keys,
            a.q.off,
            a.k.off,
            a.v.off,
            a.out.off,
            a.scratch.off,
            a.ctx,
            u64::from(f32bits(a.scale)),
            u64::from(a.causal),
        ],
    )?;
    b.step(Kernel::Attend, p, groups_2d(rows)?);
    Some(())
}

/// A linear layer over 4-bit grouped weights (see `shaders/linear4.wgsl`); `dq`: the input's
/// per-row int8 scale and zero point, when the activations are quantized.
pub(crate) struct Linear4 {
    pub rows: u64,
    pub n: u64,
    pub k: u64,
    pub x: Slot,
    pub w: Slot,
    pub row_bytes: u64,
    pub scales: Slot,
    pub group: u64,
    pub out: Slot,
    pub bias: Option<Slot>,
    pub dq: Option<(Slot, Slot)>,
}

pub(crate) fn linear4(b: &mut impl Steps, l: Linear4) -> Option<()> {
    let total = l.rows.checked_mul(l.n)?;
    let (b_off, has_b) = l.bias.map_or((0, 0), |s| (s.off, 1));
    let (dq, xs, xz) = l.dq.map_or((0, 0, 0), |(s, z)| (1, s.off, z.off));
    // the kernel's group loop steps by the group: no u32 wrap
    u32of(l.k.checked_add(l.group)?)?;
    // byte addresses of the weights are u32 in the kernel
    u32of(
        l.w.off
            .checked_mul(4)?
            .checked_add(l.n.checked_mul(l.row_bytes)?)?,
    )?;
    let mut p = Vec::new();
    push_all(
        &mut p,
        &[
            l.rows,
            l.n,
            l.k,
            l.x.off,
            l.w.off,
            l.row_bytes,
            l.scales.off,
            l.group,
            l.out.off,
            has_b,
            b_off,
            dq,
            xs,
            xz,
        ],
    )?;
    b.step(Kernel::Linear4, p, elementwise_grid(total)?);
    Some(())
}
