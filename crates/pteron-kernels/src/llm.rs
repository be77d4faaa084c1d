//! LLM custom ops of ExecuTorch's `extension/llm/custom_ops` (namespace `llama`): the KV-cache
//! update and scaled dot-product attention over the cache, as ExecuTorch's LLM exports call them
//! (`use_kv_cache=True`, `use_sdpa_with_kv_cache=True`).
//!
//! Layout (ExecuTorch's `SeqDim::ONE`): every tensor is 4-d and contiguous, `[batch, seq, heads,
//! head_dim]`; a cache is `[batch, max_context, kv_heads, head_dim]`.
//!
//! - `update_cache.out(value, cache!, start_pos, *, out)`: copies `value[b]` into
//!   `cache[b, start_pos..start_pos + seq]` in place (`out` is a placeholder nobody reads).
//! - `custom_sdpa.out(q, k, v, start_pos, attn_mask?, dropout_p, is_causal, scale?, *, out)`:
//!   attention of the `seq` query rows over the first `start_pos + seq` rows of `k`/`v` (the
//!   caches, read in place). Causal: query row `i` sees keys `0..=start_pos + i`. With an
//!   additive float mask `[seq, max_context]` every cache row is scored (mask and is_causal are
//!   exclusive). GQA: query head `h` reads kv head `h / (heads / kv_heads)`. Scale defaults to
//!   `1/sqrt(head_dim)`.
//! - `sdpa_with_kv_cache.out(q, k, v, k_cache!, v_cache!, start_pos, seq_len, attn_mask?,
//!   dropout_p, is_causal, scale?, *, out)`: both cache updates, then `custom_sdpa` over them.
//! - `custom_quantized_sdpa.out(...)`: attention over int8 caches (`quantize_kv_cache=True`),
//!   in `llm/quantized_sdpa.rs`.
//! - `gated_delta_rule.out(q, k, v, decay, beta, initial_state, *, out, final_state_out)`: the
//!   recurrence of a gated DeltaNet layer (Qwen 3.5), in `llm/gated_delta.rs`.
//!
//! The softmax is ExecuTorch's (`op_sdpa_impl.h`, `cpu_flash_attention`): online over blocks of
//! 512 keys, scores and sums in f32, the running output rescaled per block, output multiplied by
//! the reciprocal of the sum; for f16/bf16 the probabilities are rounded to the input type before
//! they weight the values, as ExecuTorch's reduced-precision GEMM does. Nothing is allocated: the
//! scores of one block and the running output of one row live on the stack (head_dim ≤ 1024).

#[cfg(not(feature = "std"))]
#[allow(unused_imports)] // std's own methods win when another crate of the build links std
use crate::math::Libm as _;
use half::{bf16, f16};
use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Element, Kernel, KernelContext, KernelError, KernelRegistry,
    Parallel, ScalarType, TensorInfo,
};

use crate::util::require_contiguous;

mod gated_delta;
mod quantized_sdpa;

/// Keys per online-softmax block (ExecuTorch's `kv_split_size`).
const KV_BLOCK: usize = 512;
/// The largest head dimension the stack buffers hold.
pub const MAX_HEAD_DIM: usize = 1024;

const SDPA_DTYPES: DtypeSet =
    DtypeSet::of(&[ScalarType::Float, ScalarType::Half, ScalarType::BFloat16]);

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "llama::update_cache.out",
        // Writes `value` into `cache` (argument 1) in place.
        Kernel::with_check(update_cache_out, check_update_cache)
            .dtypes(DtypeSet::ALL)
            .caches(&[1]),
    );
    pteron_core::register_op!(
        S,
        r,
        "llama::custom_sdpa.out",
        Kernel::with_check(custom_sdpa_out, check_custom_sdpa).dtypes(SDPA_DTYPES),
    );
    pteron_core::register_op!(
        S,
        r,
        "llama::sdpa_with_kv_cache.out",
        // Updates `k_cache` and `v_cache` (arguments 3 and 4) in place before attending.
        Kernel::with_check(sdpa_with_kv_cache_out, check_sdpa_with_kv_cache)
            .dtypes(SDPA_DTYPES)
            .caches(&[3, 4]),
    );
    pteron_core::register_op!(
        S,
        r,
        "llama::custom_quantized_sdpa.out",
        Kernel::with_check(
            quantized_sdpa::custom_quantized_sdpa_out,
            quantized_sdpa::check,
        )
        .dtypes(DtypeSet::of(&[
            ScalarType::Char,
            ScalarType::Float,
            ScalarType::Half,
            ScalarType::BFloat16,
        ])),
    );
    pteron_core::register_op!(
        S,
        r,
        "llama::gated_delta_rule.out",
        Kernel::with_check(gated_delta::gated_delta_rule_out, gated_delta::check)
            .dtypes(DtypeSet::of(&[ScalarType::Float])),
    );
}

fn require_rank4(op: &'static str, what: &str, t: &TensorInfo) -> Result<(), KernelError> {
    if t.rank() != 4 {
        return Err(KernelError::shape(format!(
            "{op}: {what} must be 4-d [batch, seq, heads, head_dim], got rank {}",
            t.rank()
        )));
    }
    Ok(())
}

fn start_pos(op: &'static str, v: i64) -> Result<usize, KernelError> {
    usize::try_from(v).map_err(|_| KernelError::invalid(format!("{op}: negative start_pos {v}")))
}

// ---------------------------------------------------------------------------------------------
// update_cache

fn check_update_cache(a: &ArgView) -> Result<(), KernelError> {
    let (value, cache) = (a.tensor(0)?, a.tensor(1)?);
    check_cache_pair("update_cache", value, cache)?;
    a.int(2)?;
    a.tensor(3)?;
    Ok(())
}

/// Load-time checks shared by the cache updates: ranks, element sizes, contiguity.
fn check_cache_pair(
    op: &'static str,
    value: &TensorInfo,
    cache: &TensorInfo,
) -> Result<(), KernelError> {
    require_rank4(op, "value", value)?;
    require_rank4(op, "cache", cache)?;
    if value.dtype().elem_size() != cache.dtype().elem_size() {
        return Err(KernelError::invalid(format!(
            "{op}: value ({}) and cache ({}) element sizes differ",
            value.dtype(),
            cache.dtype()
        )));
    }
    require_contiguous(op, &[value, cache])
}

/// Run-time checks of one cache update; returns the byte ranges (per batch: source offset,
/// destination offset, length) through `copy`.
fn cache_update_plan(
    op: &'static str,
    value: &TensorInfo,
    cache: &TensorInfo,
    start: usize,
) -> Result<(usize, usize, usize), KernelError> {
    check_cache_pair(op, value, cache)?;
    let (seq, max) = (value.size(1), cache.size(1));
    if value.size(0) != cache.size(0)
        || value.size(2) != cache.size(2)
        || value.size(3) != cache.size(3)
    {
        return Err(KernelError::shape(format!(
            "{op}: value {:?} does not fit cache {:?} (batch, heads and head_dim must match)",
            value.sizes(),
            cache.sizes()
        )));
    }
    if start >= max || seq > max - start {
        return Err(KernelError::invalid(format!(
            "{op}: start_pos {start} + {seq} tokens exceed the cache's {max} positions"
        )));
    }
    let es = value.dtype().elem_size();
    let row = value.size(2) * value.size(3) * es;
    // Per batch: value bytes, cache bytes.
    Ok((seq * row, max * row, start * row))
}

fn copy_into_cache(
    value: &[u8],
    cache: &mut [u8],
    batch: usize,
    (vlen, clen, off): (usize, usize, usize),
) -> Result<(), KernelError> {
    for b in 0..batch {
        let src = value
            .get(b * vlen..(b + 1) * vlen)
            .ok_or_else(|| KernelError::invalid("cache update: value bytes out of range"))?;
        let dst = cache
            .get_mut(b * clen + off..b * clen + off + vlen)
            .ok_or_else(|| KernelError::invalid("cache update: cache bytes out of range"))?;
        dst.copy_from_slice(src);
    }
    Ok(())
}

fn update_cache_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    const OP: &str = "update_cache";
    let (value, cache) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    let start = start_pos(OP, ctx.int(2)?)?;
    let plan = cache_update_plan(OP, &value, &cache, start)?;
    // The out tensor is a placeholder (ExecuTorch never writes it); the cache is written in
    // place, so it is borrowed as the writable argument.
    let ([v], [c]) = ctx.io([0], [1])?;
    copy_into_cache(v.bytes, c.bytes, value.size(0), plan)
}

// ---------------------------------------------------------------------------------------------
// SDPA

/// Element types SDPA computes in (f32 accumulation).
trait Real: Element + Copy {
    fn f(self) -> f32;
    fn of(v: f32) -> Self;
    /// Rounds a probability to this type (identity for f32), as ExecuTorch's reduced-type GEMM.
    #[inline(always)]
    fn round(v: f32) -> f32 {
        Self::of(v).f()
    }
}

impl Real for f32 {
    #[inline(always)]
    fn f(self) -> f32 {
        self
    }
    #[inline(always)]
    fn of(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn round(v: f32) -> f32 {
        v
    }
}

impl Real for f16 {
    #[inline(always)]
    fn f(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn of(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Real for bf16 {
    #[inline(always)]
    fn f(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn of(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

/// Argument positions of one SDPA call.
struct SdpaArgs {
    /// int8 query, keys and values with per-token quantization parameters, float32 out
    /// (`custom_quantized_sdpa`).
    quantized: bool,
    q: usize,
    k: usize,
    v: usize,
    start: usize,
    mask: usize,
    causal: usize,
    scale: usize,
    out: usize,
}

const CUSTOM_SDPA: SdpaArgs = SdpaArgs {
    quantized: false,
    q: 0,
    k: 1,
    v: 2,
    start: 3,
    mask: 4,
    causal: 6,
    scale: 7,
    out: 8,
};

/// For `sdpa_with_kv_cache`, `k`/`v` are the caches (read after the update).
const SDPA_WITH_KV_CACHE: SdpaArgs = SdpaArgs {
    quantized: false,
    q: 0,
    k: 3,
    v: 4,
    start: 5,
    mask: 7,
    causal: 9,
    scale: 10,
    out: 11,
};

fn check_sdpa_common<'p>(
    op: &'static str,
    a: &impl ArgAccess<'p>,
    p: &SdpaArgs,
) -> Result<(), KernelError> {
    let (q, k, v, o) = (
        a.tensor(p.q)?,
        a.tensor(p.k)?,
        a.tensor(p.v)?,
        a.tensor(p.out)?,
    );
    require_rank4(op, "query", q)?;
    require_rank4(op, "key", k)?;
    require_rank4(op, "value", v)?;
    require_rank4(op, "out", o)?;
    let dt = q.dtype();
    if p.quantized {
        if dt != ScalarType::Char || o.dtype() != ScalarType::Float {
            return Err(KernelError::invalid(format!(
                "{op}: expected an int8 query and a float32 out, got {dt} and {}",
                o.dtype()
            )));
        }
    } else if !SDPA_DTYPES.contains(dt) {
        // int8 q/k/v belong to custom_quantized_sdpa.
        return Err(KernelError::dtype(dt, "sdpa query"));
    }
    for (what, t) in [("key", k), ("value", v), ("out", o)] {
        if t.dtype() != dt && !(p.quantized && what == "out") {
            return Err(KernelError::invalid(format!(
                "{op}: {what} is {}, query is {dt}",
                t.dtype()
            )));
        }
    }
    require_contiguous(op, &[q, k, v, o])?;
    if let Some(m) = a.opt_tensor(p.mask)? {
        if m.dtype() != ScalarType::Float {
            return Err(KernelError::dtype(
                m.dtype(),
                "sdpa attn_mask (must be float32)",
            ));
        }
        if m.rank() != 2 {
            return Err(KernelError::rank_mismatch(op, "attn_mask", 2, m.rank()));
        }
        require_contiguous(op, &[m])?;
    }
    a.int(p.start)?;
    a.bool(p.causal)?;
    a.opt_double(p.scale)?;
    Ok(())
}

fn check_custom_sdpa(a: &ArgView) -> Result<(), KernelError> {
    check_sdpa_common("custom_sdpa", a, &CUSTOM_SDPA)
}

fn check_sdpa_with_kv_cache(a: &ArgView) -> Result<(), KernelError> {
    const OP: &str = "sdpa_with_kv_cache";
    check_sdpa_common(OP, a, &SDPA_WITH_KV_CACHE)?;
    check_cache_pair(OP, a.tensor(1)?, a.tensor(3)?)?;
    check_cache_pair(OP, a.tensor(2)?, a.tensor(4)?)?;
    a.int(6)?;
    Ok(())
}

/// Shapes and options of one attention call, validated against the tensors.
#[derive(Clone, Copy, Debug)]
pub struct Attn {
    pub batch: usize,
    pub q_len: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub dim: usize,
    /// Rows of the caches (the row stride of a batch).
    pub kv_rows: usize,
    /// Keys scored: `start + q_len` without a mask, every cache row with one.
    pub num_keys: usize,
    pub start: usize,
    pub causal: bool,
    pub scale: f32,
}

impl Attn {
    /// Keys query row `m` attends to: `0..limit(m)`.
    pub fn limit(&self, m: usize) -> usize {
        if self.causal {
            (self.start + m + 1).min(self.num_keys)
        } else {
            self.num_keys
        }
    }

    /// Checks that the data slices (element counts) hold the shapes.
    pub fn check_lens(
        &self,
        q: usize,
        k: usize,
        v: usize,
        mask: Option<usize>,
        out: usize,
    ) -> Result<(), KernelError> {
        let d = self.dim;
        let q_need = self.batch * self.q_len * self.heads * d;
        let kv_need = self.batch * self.kv_rows * self.kv_heads * d;
        if q < q_need || out < q_need || k < kv_need || v < kv_need {
            return Err(KernelError::invalid(
                "sdpa: tensor data shorter than its shape",
            ));
        }
        if mask.is_some_and(|m| m < self.q_len * self.kv_rows) {
            return Err(KernelError::invalid(
                "sdpa: mask data shorter than its shape",
            ));
        }
        Ok(())
    }
}

/// An f32 attention implementation, for faster kernel libraries to plug into the ops with
/// [`custom_sdpa_with`] / [`sdpa_with_kv_cache_with`]: `(plan, threads, q, k, v, mask, out)`,
/// layouts as in [`attend_f32`].
pub type AttendF32 = fn(
    &Attn,
    &dyn Parallel,
    &[f32],
    &[f32],
    &[f32],
    Option<&[f32]>,
    &mut [f32],
) -> Result<(), KernelError>;

/// The reference f32 attention (single-threaded): `k`/`v` `[batch, kv_rows, kv_heads, dim]`,
/// `mask` `[q_len, kv_rows]` (additive), `q`/`out` `[batch, q_len, heads, dim]`.
pub fn attend_f32(
    at: &Attn,
    _par: &dyn Parallel,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    attend(at, q, k, v, mask, out)
}

fn plan_attention<'p>(
    op: &'static str,
    a: &impl ArgAccess<'p>,
    p: &SdpaArgs,
) -> Result<(Attn, bool), KernelError> {
    check_sdpa_common(op, a, p)?;
    let (q, k, v) = (a.tensor(p.q)?, a.tensor(p.k)?, a.tensor(p.v)?);
    let start = start_pos(op, a.int(p.start)?)?;
    let causal = a.bool(p.causal)?;
    let mask = a.opt_tensor(p.mask)?.copied();
    if mask.is_some() && causal {
        return Err(KernelError::invalid(format!(
            "{op}: attn_mask and is_causal cannot be set at the same time"
        )));
    }
    let (batch, q_len, heads, dim) = (q.size(0), q.size(1), q.size(2), q.size(3));
    if k.sizes() != v.sizes() {
        return Err(KernelError::shape(format!(
            "{op}: key {:?} and value {:?} shapes differ",
            k.sizes(),
            v.sizes()
        )));
    }
    let (kv_rows, kv_heads) = (k.size(1), k.size(2));
    if k.size(0) != batch || k.size(3) != dim {
        return Err(KernelError::shape(format!(
            "{op}: query {:?} and key {:?} differ in batch or head_dim",
            q.sizes(),
            k.sizes()
        )));
    }
    if kv_heads == 0 || kv_heads > heads || heads % kv_heads != 0 {
        return Err(KernelError::shape(format!(
            "{op}: {heads} query heads are not a multiple of {kv_heads} kv heads"
        )));
    }
    if dim > MAX_HEAD_DIM {
        return Err(KernelError::unsupported(format!(
            "{op}: head_dim {dim} exceeds {MAX_HEAD_DIM}"
        )));
    }
    let num_keys = match &mask {
        Some(m) => {
            if m.size(0) != q_len || m.size(1) != kv_rows {
                return Err(KernelError::shape(format!(
                    "{op}: attn_mask {:?} must be [{q_len}, {kv_rows}]",
                    m.sizes()
                )));
            }
            kv_rows
        }
        None => {
            let n = start.checked_add(q_len).ok_or(KernelError::SizeOverflow)?;
            if n > kv_rows {
                return Err(KernelError::invalid(format!(
                    "{op}: start_pos {start} + {q_len} tokens exceed the {kv_rows} cache rows"
                )));
            }
            // ExecuTorch: 0 keys (an empty query at position 0) means "all rows".
            if n == 0 {
                kv_rows
            } else {
                n
            }
        }
    };
    let scale = match a.opt_double(p.scale)? {
        Some(s) => s as f32,
        None => (1.0 / (dim as f64).sqrt()) as f32,
    };
    Ok((
        Attn {
            batch,
            q_len,
            heads,
            kv_heads,
            dim,
            kv_rows,
            num_keys,
            start,
            causal,
            scale,
        },
        mask.is_some(),
    ))
}

/// Attention for every (batch, query row, head). `k`/`v`: `[batch, kv_rows, kv_heads, dim]`;
/// `mask`: `[q_len, kv_rows]` (additive); `q`/`out`: `[batch, q_len, heads, dim]`.
/// One query row's attention over keys `0..limit`, ExecuTorch's online softmax: blocks of
/// [`KV_BLOCK`] scores (`score(n)`: scaled, masked), the running maximum and sum in f32, the
/// output `acc` rescaled per block and `add_value(n, p, acc)` adding `p · v_n`. Returns the sum
/// of the exponentials (the caller multiplies `acc` by its reciprocal).
fn online_softmax_row(
    limit: usize,
    scores: &mut [f32; KV_BLOCK],
    acc: &mut [f32],
    mut score: impl FnMut(usize) -> f32,
    mut add_value: impl FnMut(usize, f32, &mut [f32]),
) -> f32 {
    let mut run_max = f32::NEG_INFINITY;
    let mut sum = 0f32;
    acc.fill(0.0);
    let mut blk = 0;
    while blk < limit {
        let end = (blk + KV_BLOCK).min(limit);
        let s = &mut scores[..end - blk];
        for (t, sc) in s.iter_mut().enumerate() {
            *sc = score(blk + t);
        }
        let bmax = s
            .iter()
            .fold(f32::NEG_INFINITY, |a, &x| if x > a { x } else { a });
        let new_max = if run_max > bmax { run_max } else { bmax };
        if new_max == f32::NEG_INFINITY {
            // Every key so far masked out: nothing to add (ExecuTorch zero-fills).
            blk = end;
            continue;
        }
        let mut bsum = 0f32;
        for sc in s.iter_mut() {
            *sc = (*sc - new_max).exp();
            bsum += *sc;
        }
        let corr = (run_max - new_max).exp();
        sum = bsum + corr * sum;
        if blk > 0 {
            for a in acc.iter_mut() {
                *a *= corr;
            }
        }
        run_max = new_max;
        for (t, &p) in s.iter().enumerate() {
            add_value(blk + t, p, acc);
        }
        blk = end;
    }
    sum
}

fn attend<T: Real>(
    at: &Attn,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[f32]>,
    out: &mut [T],
) -> Result<(), KernelError> {
    let d = at.dim;
    let reps = at.heads / at.kv_heads;
    at.check_lens(q.len(), k.len(), v.len(), mask.map(|m| m.len()), out.len())?;
    let mut scores = [0f32; KV_BLOCK];
    let mut acc = [0f32; MAX_HEAD_DIM];
    let acc = &mut acc[..d];
    for b in 0..at.batch {
        for m in 0..at.q_len {
            let limit = at.limit(m);
            let mask_row = mask.map(|mk| &mk[m * at.kv_rows..(m + 1) * at.kv_rows]);
            for h in 0..at.heads {
                let hk = h / reps;
                let qo = ((b * at.q_len + m) * at.heads + h) * d;
                let q_row = &q[qo..qo + d];
                let kv_base = b * at.kv_rows * at.kv_heads * d + hk * d;
                let kv_stride = at.kv_heads * d;
                let sum = online_softmax_row(
                    limit,
                    &mut scores,
                    acc,
                    |n| {
                        let ko = kv_base + n * kv_stride;
                        let mut dot = 0f32;
                        for (x, y) in q_row.iter().zip(&k[ko..ko + d]) {
                            dot += x.f() * y.f();
                        }
                        let sc = dot * at.scale;
                        mask_row.map_or(sc, |mr| sc + mr[n])
                    },
                    |n, p, acc| {
                        let p = T::round(p);
                        let vo = kv_base + n * kv_stride;
                        for (a, x) in acc.iter_mut().zip(&v[vo..vo + d]) {
                            *a += p * x.f();
                        }
                    },
                );
                // ExecuTorch multiplies by the reciprocal (0 keys: 0 · inf = NaN, as there).
                let r = 1.0 / sum;
                for (o, a) in out[qo..qo + d].iter_mut().zip(acc.iter()) {
                    *o = T::of(a * r);
                }
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_attention(
    at: &Attn,
    par: &dyn Parallel,
    f32_attend: AttendF32,
    q: pteron_core::TensorRef<'_>,
    k: &[u8],
    v: &[u8],
    mask: Option<pteron_core::TensorRef<'_>>,
    out: &mut pteron_core::TensorMut<'_>,
) -> Result<(), KernelError> {
    let mask = match mask {
        Some(m) => Some(m.as_slice::<f32>()?),
        None => None,
    };
    fn cast<T: Element>(b: &[u8]) -> Result<&[T], KernelError> {
        bytemuck::try_cast_slice(b).map_err(|_| KernelError::Misaligned { dtype: T::DTYPE })
    }
    match q.info.dtype() {
        ScalarType::Float => f32_attend(
            at,
            par,
            q.as_slice()?,
            cast(k)?,
            cast(v)?,
            mask,
            out.as_mut_slice()?,
        ),
        ScalarType::Half => attend::<f16>(
            at,
            q.as_slice()?,
            cast(k)?,
            cast(v)?,
            mask,
            out.as_mut_slice()?,
        ),
        ScalarType::BFloat16 => attend::<bf16>(
            at,
            q.as_slice()?,
            cast(k)?,
            cast(v)?,
            mask,
            out.as_mut_slice()?,
        ),
        dt => Err(KernelError::dtype(dt, "sdpa query")),
    }
}

fn custom_sdpa_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    custom_sdpa_with(ctx, attend_f32)
}

/// `llama::custom_sdpa.out` with `f32_attend` computing float32 calls (others: the reference).
pub fn custom_sdpa_with(ctx: &mut KernelContext, f32_attend: AttendF32) -> Result<(), KernelError> {
    let p = &CUSTOM_SDPA;
    let (at, has_mask) = plan_attention("custom_sdpa", ctx, p)?;
    let qs = ctx.tensor(p.q)?.dims();
    ctx.resize(p.out, &qs)?;
    let par = ctx.parallel();
    if has_mask {
        let ([q, k, v, m], [mut o]) = ctx.io([p.q, p.k, p.v, p.mask], [p.out])?;
        run_attention(&at, par, f32_attend, q, k.bytes, v.bytes, Some(m), &mut o)
    } else {
        let ([q, k, v], [mut o]) = ctx.io([p.q, p.k, p.v], [p.out])?;
        run_attention(&at, par, f32_attend, q, k.bytes, v.bytes, None, &mut o)
    }
}

fn sdpa_with_kv_cache_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    sdpa_with_kv_cache_with(ctx, attend_f32)
}

/// `llama::sdpa_with_kv_cache.out` with `f32_attend` computing float32 calls.
pub fn sdpa_with_kv_cache_with(
    ctx: &mut KernelContext,
    f32_attend: AttendF32,
) -> Result<(), KernelError> {
    const OP: &str = "sdpa_with_kv_cache";
    let p = &SDPA_WITH_KV_CACHE;
    let start = start_pos(OP, ctx.int(5)?)?;
    let (kp, vp, kc, vc) = (
        *ctx.tensor(1)?,
        *ctx.tensor(2)?,
        *ctx.tensor(3)?,
        *ctx.tensor(4)?,
    );
    let kplan = cache_update_plan(OP, &kp, &kc, start)?;
    let vplan = cache_update_plan(OP, &vp, &vc, start)?;
    let (at, has_mask) = plan_attention(OP, ctx, p)?;
    let qs = ctx.tensor(p.q)?.dims();
    ctx.resize(p.out, &qs)?;
    let par = ctx.parallel();
    // The caches are borrowed writable: updated in place, then read in place by the attention.
    if has_mask {
        let ([q, k, v, m], [kc_b, vc_b, mut o]) = ctx.io([p.q, 1, 2, p.mask], [3, 4, p.out])?;
        copy_into_cache(k.bytes, kc_b.bytes, kp.size(0), kplan)?;
        copy_into_cache(v.bytes, vc_b.bytes, vp.size(0), vplan)?;
        run_attention(
            &at,
            par,
            f32_attend,
            q,
            kc_b.bytes,
            vc_b.bytes,
            Some(m),
            &mut o,
        )
    } else {
        let ([q, k, v], [kc_b, vc_b, mut o]) = ctx.io([p.q, 1, 2], [3, 4, p.out])?;
        copy_into_cache(k.bytes, kc_b.bytes, kp.size(0), kplan)?;
        copy_into_cache(v.bytes, vc_b.bytes, vp.size(0), vplan)?;
        run_attention(
            &at, par, f32_attend, q, kc_b.bytes, vc_b.bytes, None, &mut o,
        )
    }
}

#[cfg(test)]
mod tests;
