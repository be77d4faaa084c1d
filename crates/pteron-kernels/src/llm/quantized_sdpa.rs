//! `llama::custom_quantized_sdpa.out`: attention over int8 KV caches, as ExecuTorch's LLM
//! exports call it with `quantize_kv_cache=True`.
//!
//! `custom_quantized_sdpa.out(q, k, v, start_pos, attn_mask?, dropout_p, is_causal, scale?,
//! q_zero_points?, q_scales?, k_zero_points?, k_scales?, v_zero_points?, v_scales?,
//! is_seq_at_dim_2, *, out)`. The exporter quantizes the query per token and head
//! (`choose_qparams_per_token_asymmetric`, `quantize_per_token`) and keeps the caches int8 with
//! a scale and zero point per cached token and kv head: `q [B, S, H, D]`, `k`/`v`
//! `[B, ctx, Hk, D]` int8; zero points int8 and scales float32 `[B, S, H, 1]` for the query,
//! `[B, ctx, Hk, 1]` for keys and values; `out [B, S, H, D]` float32.
//!
//! As ExecuTorch computes it (`op_sdpa_impl.h`): a score is the exact integer product
//! `Σ (q − z_q)(k − z_k)` times both scales, then the usual scaling, mask and online softmax
//! ([`super::online_softmax_row`]); values are dequantized `(v − z_v) · s_v` as they are
//! weighted. With a float query (no quantization parameters) the op is `custom_sdpa`.
//! `is_seq_at_dim_2` (a `[B, H, S, D]` layout) is refused as unsupported.

use super::{
    attend_f32, check_sdpa_common, online_softmax_row, plan_attention, run_attention, Attn,
    SdpaArgs, KV_BLOCK, MAX_HEAD_DIM,
};
use pteron_core::{ArgAccess, ArgView, KernelContext, KernelError, ScalarType, TensorInfo};

use crate::util::require_contiguous;

const OP: &str = "custom_quantized_sdpa";

const QUANTIZED: SdpaArgs = SdpaArgs {
    quantized: true,
    q: 0,
    k: 1,
    v: 2,
    start: 3,
    mask: 4,
    causal: 6,
    scale: 7,
    out: 15,
};
/// The same call with a float query: `custom_sdpa`'s arguments at these positions.
const FLOAT: SdpaArgs = SdpaArgs {
    quantized: false,
    ..QUANTIZED
};
/// Zero points and scales of the query, keys and values.
const QPARAMS: [usize; 6] = [8, 9, 10, 11, 12, 13];
const SEQ_AT_DIM_2: usize = 14;

fn is_quantized<'p>(a: &impl ArgAccess<'p>) -> Result<bool, KernelError> {
    Ok(a.tensor(0)?.dtype() == ScalarType::Char)
}

pub(super) fn check(a: &ArgView) -> Result<(), KernelError> {
    if a.bool(SEQ_AT_DIM_2)? {
        return Err(KernelError::unsupported(format!(
            "{OP}: is_seq_at_dim_2 (a [batch, heads, seq, dim] layout)"
        )));
    }
    if !is_quantized(a)? {
        for i in QPARAMS {
            if a.opt_tensor(i)?.is_some() {
                return Err(KernelError::invalid(format!(
                    "{OP}: quantization parameters with a float query"
                )));
            }
        }
        return check_sdpa_common(OP, a, &FLOAT);
    }
    check_sdpa_common(OP, a, &QUANTIZED)?;
    for (n, i) in QPARAMS.into_iter().enumerate() {
        let t = a.opt_tensor(i)?.ok_or_else(|| {
            KernelError::invalid(format!(
                "{OP}: an int8 query needs every zero point and scale"
            ))
        })?;
        let want = if n % 2 == 0 {
            ScalarType::Char
        } else {
            ScalarType::Float
        };
        if t.dtype() != want {
            return Err(KernelError::dtype(
                t.dtype(),
                "custom_quantized_sdpa parameters",
            ));
        }
        require_contiguous(OP, &[t])?;
    }
    Ok(())
}

/// Checks that a quantization-parameter tensor is `[batch, rows, heads, 1]`.
fn check_params(
    what: &str,
    t: &TensorInfo,
    (batch, rows, heads): (usize, usize, usize),
) -> Result<(), KernelError> {
    if t.sizes() != [batch, rows, heads, 1] {
        return Err(KernelError::shape(format!(
            "{OP}: {what} {:?} must be [{batch}, {rows}, {heads}, 1]",
            t.sizes()
        )));
    }
    Ok(())
}

pub(super) fn custom_quantized_sdpa_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    if ctx.bool(SEQ_AT_DIM_2)? {
        return Err(KernelError::unsupported(format!(
            "{OP}: is_seq_at_dim_2 (a [batch, heads, seq, dim] layout)"
        )));
    }
    if !is_quantized(ctx)? {
        let (at, has_mask) = plan_attention(OP, ctx, &FLOAT)?;
        let qs = ctx.tensor(FLOAT.q)?.dims();
        ctx.resize(FLOAT.out, &qs)?;
        let par = ctx.parallel();
        return if has_mask {
            let ([q, k, v, m], [mut o]) = ctx.io([0, 1, 2, 4], [FLOAT.out])?;
            run_attention(&at, par, attend_f32, q, k.bytes, v.bytes, Some(m), &mut o)
        } else {
            let ([q, k, v], [mut o]) = ctx.io([0, 1, 2], [FLOAT.out])?;
            run_attention(&at, par, attend_f32, q, k.bytes, v.bytes, None, &mut o)
        };
    }
    let (at, has_mask) = plan_attention(OP, ctx, &QUANTIZED)?;
    let q_rows = (at.batch, at.q_len, at.heads);
    let kv_rows = (at.batch, at.kv_rows, at.kv_heads);
    let names = [
        "q_zero_points",
        "q_scales",
        "k_zero_points",
        "k_scales",
        "v_zero_points",
        "v_scales",
    ];
    for ((n, i), what) in QPARAMS.into_iter().enumerate().zip(names) {
        let t = ctx
            .opt_tensor(i)?
            .ok_or_else(|| KernelError::invalid(format!("{OP}: missing {what}")))?;
        check_params(what, t, if n < 2 { q_rows } else { kv_rows })?;
    }
    let qs = ctx.tensor(QUANTIZED.q)?.dims();
    ctx.resize(QUANTIZED.out, &qs)?;
    let ins = |m| [0, 1, 2, 8, 9, 10, 11, 12, 13, m];
    // Without a mask, the query stands in for it (never read as one).
    let ([q, k, v, qz, qsc, kz, ksc, vz, vsc, m], [mut o]) =
        ctx.io(ins(if has_mask { 4 } else { 0 }), [QUANTIZED.out])?;
    let data = Q8 {
        q: q.as_slice()?,
        k: k.as_slice()?,
        v: v.as_slice()?,
        q_zp: qz.as_slice()?,
        q_scale: qsc.as_slice()?,
        k_zp: kz.as_slice()?,
        k_scale: ksc.as_slice()?,
        v_zp: vz.as_slice()?,
        v_scale: vsc.as_slice()?,
    };
    let mask = if has_mask {
        Some(m.as_slice::<f32>()?)
    } else {
        None
    };
    attend_q8(&at, &data, mask, o.as_mut_slice()?)
}

/// The int8 operands and their per-token quantization parameters.
struct Q8<'a> {
    q: &'a [i8],
    k: &'a [i8],
    v: &'a [i8],
    q_zp: &'a [i8],
    q_scale: &'a [f32],
    k_zp: &'a [i8],
    k_scale: &'a [f32],
    v_zp: &'a [i8],
    v_scale: &'a [f32],
}

fn attend_q8(
    at: &Attn,
    x: &Q8<'_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let d = at.dim;
    at.check_lens(
        x.q.len(),
        x.k.len(),
        x.v.len(),
        mask.map(|m| m.len()),
        out.len(),
    )?;
    let q_params = at.batch * at.q_len * at.heads;
    let kv_params = at.batch * at.kv_rows * at.kv_heads;
    if x.q_zp.len() < q_params
        || x.q_scale.len() < q_params
        || [x.k_zp.len(), x.v_zp.len()].iter().any(|&n| n < kv_params)
        || [x.k_scale.len(), x.v_scale.len()]
            .iter()
            .any(|&n| n < kv_params)
    {
        return Err(KernelError::invalid(format!(
            "{OP}: quantization parameters shorter than their shapes"
        )));
    }
    if d > MAX_HEAD_DIM {
        return Err(KernelError::unsupported(format!(
            "{OP}: head dimension {d} (at most {MAX_HEAD_DIM})"
        )));
    }
    let reps = at.heads / at.kv_heads;
    let mut scores = [0f32; KV_BLOCK];
    let mut acc = [0f32; MAX_HEAD_DIM];
    let acc = &mut acc[..d];
    for b in 0..at.batch {
        for m in 0..at.q_len {
            let limit = at.limit(m);
            let mask_row = mask.map(|mk| &mk[m * at.kv_rows..(m + 1) * at.kv_rows]);
            for h in 0..at.heads {
                let hk = h / reps;
                let qp = (b * at.q_len + m) * at.heads + h;
                let (zq, sq) = (i32::from(x.q_zp[qp]), x.q_scale[qp]);
                let q_row = &x.q[qp * d..(qp + 1) * d];
                // Row n of kv head hk: parameters at `kp(n)`, data at `kp(n) · d`.
                let kp = |n: usize| (b * at.kv_rows + n) * at.kv_heads + hk;
                let sum = online_softmax_row(
                    limit,
                    &mut scores,
                    acc,
                    |n| {
                        let p = kp(n);
                        let zk = i32::from(x.k_zp[p]);
                        let dot: i32 = q_row
                            .iter()
                            .zip(&x.k[p * d..(p + 1) * d])
                            .map(|(&a, &b)| (i32::from(a) - zq) * (i32::from(b) - zk))
                            .sum();
                        let sc = dot as f32 * sq * x.k_scale[p] * at.scale;
                        mask_row.map_or(sc, |mr| sc + mr[n])
                    },
                    |n, p, acc| {
                        let r = kp(n);
                        let (zv, sv) = (i32::from(x.v_zp[r]), x.v_scale[r]);
                        for (a, &y) in acc.iter_mut().zip(&x.v[r * d..(r + 1) * d]) {
                            *a += p * ((i32::from(y) - zv) as f32 * sv);
                        }
                    },
                );
                let r = 1.0 / sum;
                for (o, a) in out[qp * d..(qp + 1) * d].iter_mut().zip(acc.iter()) {
                    *o = a * r;
                }
            }
        }
    }
    Ok(())
}
