//! `llama::gated_delta_rule.out`: the recurrence of a gated DeltaNet layer (Qwen 3.5's linear
//! attention), as ExecuTorch's LLM exports call it.
//!
//! `gated_delta_rule.out(query, key, value, decay, beta, initial_state, *, out, final_state_out)`,
//! float32, contiguous:
//! - `key [B, H, T, K]`, `value [B, H, T, V]`, `beta [B, H, T]`, `initial_state [B, H, K, V]`;
//! - `decay [B, H, T]` (one factor per head and step) or `[B, H, T, K]` (one per state row);
//! - `query [B, H·R, T, K]`: query head `j` reads the state of head `j / R`;
//! - `out [B, H·R, T, V]`, `final_state_out [B, H, K, V]`.
//!
//! Per head, with the state `S [K, V]` starting at `initial_state`, for each step `t`:
//! `S ← decay_t ⊙ S` (rows scaled), `m = Sᵀ k_t`, `S ← S + k_t ⊗ (β_t (v_t − m))`, and
//! `out_t = Sᵀ q_t` for each query head of the group. The final `S` is `final_state_out`.
//! (The model passes l2-normalised, scaled `q`/`k` and `decay = exp(g)`; the op does not.)

use pteron_core::{ArgAccess, ArgView, KernelContext, KernelError, ScalarType, TensorInfo};

use crate::util::require_contiguous;

const OP: &str = "gated_delta_rule";

pub(super) fn check(a: &ArgView) -> Result<(), KernelError> {
    // query, key, value, decay, beta, initial_state, out, final_state_out
    const RANKS: [&[usize]; 8] = [&[4], &[4], &[4], &[3, 4], &[3], &[4], &[4], &[4]];
    let mut all: [&TensorInfo; 8] = [a.tensor(0)?; 8];
    for (i, ranks) in RANKS.iter().enumerate() {
        let t = a.tensor(i)?;
        if !ranks.contains(&t.rank()) {
            return Err(KernelError::shape(format!(
                "{OP}: argument {i} must have rank {ranks:?}, got {:?}",
                t.sizes()
            )));
        }
        if t.dtype() != ScalarType::Float {
            return Err(KernelError::dtype(
                t.dtype(),
                "gated_delta_rule (float32 only)",
            ));
        }
        all[i] = t;
    }
    require_contiguous(OP, &all)
}

/// The problem's sizes, checked against every argument.
#[derive(Clone, Copy, Debug)]
struct Dims {
    b: usize,
    h: usize,
    r: usize,
    t: usize,
    k: usize,
    v: usize,
    channelwise: bool,
}

fn dims(ctx: &KernelContext) -> Result<Dims, KernelError> {
    let (q, k, v, decay, beta, s0) = (
        ctx.tensor(0)?,
        ctx.tensor(1)?,
        ctx.tensor(2)?,
        ctx.tensor(3)?,
        ctx.tensor(4)?,
        ctx.tensor(5)?,
    );
    let (b, h, t, kd) = (k.size(0), k.size(1), k.size(2), k.size(3));
    let vd = v.size(3);
    let mismatch = |what: &str| {
        KernelError::shape(format!(
            "{OP}: {what} (query {:?}, key {:?}, value {:?}, decay {:?}, beta {:?}, state {:?})",
            q.sizes(),
            k.sizes(),
            v.sizes(),
            decay.sizes(),
            beta.sizes(),
            s0.sizes()
        ))
    };
    if h == 0 || q.size(0) != b || q.size(1) % h != 0 || q.size(2) != t || q.size(3) != kd {
        return Err(mismatch(
            "query must be [B, H·R, T, K] over key [B, H, T, K]",
        ));
    }
    if v.size(0) != b || v.size(1) != h || v.size(2) != t {
        return Err(mismatch("value must be [B, H, T, V]"));
    }
    if beta.sizes() != &k.sizes()[..3] {
        return Err(mismatch("beta must be [B, H, T]"));
    }
    let channelwise = decay.rank() == 4;
    let decay_ok = if channelwise {
        decay.sizes() == k.sizes()
    } else {
        decay.sizes() == &k.sizes()[..3]
    };
    if !decay_ok {
        return Err(mismatch("decay must be [B, H, T] or [B, H, T, K]"));
    }
    if s0.sizes() != [b, h, kd, vd] {
        return Err(mismatch("initial_state must be [B, H, K, V]"));
    }
    if vd > MAX_V {
        return Err(KernelError::unsupported(format!(
            "{OP}: value head dimension {vd} (at most {MAX_V})"
        )));
    }
    Ok(Dims {
        b,
        h,
        r: q.size(1) / h,
        t,
        k: kd,
        v: vd,
        channelwise,
    })
}

pub(super) fn gated_delta_rule_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let d = dims(ctx)?;
    ctx.resize(6, &[d.b, d.h * d.r, d.t, d.v])?;
    ctx.resize(7, &[d.b, d.h, d.k, d.v])?;
    let ([q, k, v, decay, beta, s0], [mut out, mut state]) = ctx.io([0, 1, 2, 3, 4, 5], [6, 7])?;
    let (q, k, v) = (
        q.as_slice::<f32>()?,
        k.as_slice::<f32>()?,
        v.as_slice::<f32>()?,
    );
    let (decay, beta) = (decay.as_slice::<f32>()?, beta.as_slice::<f32>()?);
    let s0 = s0.as_slice::<f32>()?;
    let (out, state) = (out.as_mut_slice::<f32>()?, state.as_mut_slice::<f32>()?);
    state.copy_from_slice(s0);
    if d.v == 0 {
        // Empty value heads: both outputs are empty (and rows of 0 values cannot be chunked).
        return Ok(());
    }
    let (kv, tv, tk) = (d.k * d.v, d.t * d.v, d.t * d.k);
    let decay_stride = if d.channelwise { d.k } else { 1 };
    for bh in 0..d.b * d.h {
        let s = &mut state[bh * kv..(bh + 1) * kv];
        let keys = &k[bh * tk..(bh + 1) * tk];
        let vals = &v[bh * tv..(bh + 1) * tv];
        let dec = &decay[bh * d.t * decay_stride..(bh + 1) * d.t * decay_stride];
        let bet = &beta[bh * d.t..(bh + 1) * d.t];
        // The R query heads of this state head: rows bh·R .. bh·R + R of [B·H·R, T, ·].
        let qs = &q[bh * d.r * tk..(bh + 1) * d.r * tk];
        let os = &mut out[bh * d.r * tv..(bh + 1) * d.r * tv];
        for t in 0..d.t {
            let kt = &keys[t * d.k..(t + 1) * d.k];
            let vt = &vals[t * d.v..(t + 1) * d.v];
            let dt = &dec[t * decay_stride..(t + 1) * decay_stride];
            let mut delta = [0f32; MAX_V];
            let delta = &mut delta[..d.v];
            decay_and_project(s, kt, dt, delta);
            for (dj, &vj) in delta.iter_mut().zip(vt) {
                *dj = (vj - *dj) * bet[t];
            }
            // The first query head reads the state in the same pass that writes it.
            let q0 = &qs[t * d.k..(t + 1) * d.k];
            let (o0, rest) = os.split_at_mut(d.t * d.v);
            write_and_read(s, kt, delta, q0, &mut o0[t * d.v..(t + 1) * d.v]);
            for r in 1..d.r {
                let qt = &qs[(r * d.t + t) * d.k..(r * d.t + t + 1) * d.k];
                let at = ((r - 1) * d.t + t) * d.v;
                read(s, qt, &mut rest[at..at + d.v]);
            }
        }
    }
    Ok(())
}

/// Scales each state row by its decay and accumulates `m = Sᵀ k` from the scaled rows (one
/// pass over the state).
fn decay_and_project(s: &mut [f32], k: &[f32], decay: &[f32], m: &mut [f32]) {
    let vd = m.len();
    for (i, (row, &ki)) in s.chunks_exact_mut(vd).zip(k).enumerate() {
        let f = if decay.len() == 1 { decay[0] } else { decay[i] };
        for (x, mj) in row.iter_mut().zip(m.iter_mut()) {
            *x *= f;
            *mj += *x * ki;
        }
    }
}

/// Adds `k ⊗ delta` to the state and accumulates `out = Sᵀ q` from the updated rows (one pass).
fn write_and_read(s: &mut [f32], k: &[f32], delta: &[f32], q: &[f32], out: &mut [f32]) {
    let vd = delta.len();
    out.fill(0.0);
    for ((row, &ki), &qi) in s.chunks_exact_mut(vd).zip(k).zip(q) {
        for ((x, &dj), o) in row.iter_mut().zip(delta).zip(out.iter_mut()) {
            *x += ki * dj;
            *o += *x * qi;
        }
    }
}

/// `out = Sᵀ q`.
fn read(s: &[f32], q: &[f32], out: &mut [f32]) {
    let vd = out.len();
    out.fill(0.0);
    for (row, &qi) in s.chunks_exact(vd).zip(q) {
        for (o, &x) in out.iter_mut().zip(row) {
            *o += x * qi;
        }
    }
}

/// The largest value head dimension (the delta row lives on the stack).
pub const MAX_V: usize = 1024;
