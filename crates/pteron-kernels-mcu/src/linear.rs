//! `cortex_m::quantized_linear.out`: int8 fully connected, per-tensor requantization, as the
//! backend's reference computes it (CMSIS-NN's `arm_fully_connected_s8` contract). Exactly one
//! of `bias` and `kernel_sum` is given, by the target the program was exported for:
//! - `kernel_sum` (the MVE path): `Σ x·w + filter_offset · Σ x + kernel_sum[n]`, raw int8
//!   products (the input offset is folded into `kernel_sum` ahead of time);
//! - `bias` (the DSP and scalar paths): `Σ (x + input_offset)(w + filter_offset) + bias[n]`.
//!
//! Then requantized with the first multiplier and shift, plus `output_offset`, clamped.
//! `input`: `[..., K]`, `weights`: `[N, K]`, out `[..., N]`; row-major (contiguous).

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

use crate::args::int32;
use crate::dot;
use crate::requant::{requantize, to_i8};

const INPUT: usize = 0;
const WEIGHTS: usize = 1;
const BIAS: usize = 2;
const KERNEL_SUM: usize = 3;
const INPUT_OFFSET: usize = 4;
const FILTER_OFFSET: usize = 5;
const OUTPUT_OFFSET: usize = 6;
const MULTIPLIERS: usize = 7;
const SHIFTS: usize = 8;
const ACT_MAX: usize = 9;
const ACT_MIN: usize = 10;
const OUT: usize = 11;

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    register_op!(
        S,
        r,
        "cortex_m::quantized_linear.out",
        Kernel::with_check(linear_out, check_linear).dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
}

/// The per-call parameters.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub rows: usize,
    pub k: usize,
    pub n: usize,
    pub input_offset: i32,
    pub filter_offset: i32,
    pub output_offset: i32,
    pub multiplier: i32,
    pub shift: i32,
    pub act_min: i32,
    pub act_max: i32,
}

/// What is added per output column.
#[derive(Clone, Copy, Debug)]
pub enum Addend<'a> {
    Bias(Option<&'a [i32]>),
    KernelSum(&'a [i32]),
}

fn params<'p>(a: &impl ArgAccess<'p>) -> Result<Params, KernelError> {
    let (x, w, o) = (a.tensor(INPUT)?, a.tensor(WEIGHTS)?, a.tensor(OUT)?);
    for t in [x, w, o] {
        if t.dtype() != ScalarType::Char {
            return Err(KernelError::dtype(t.dtype(), "cortex_m linear (int8 only)"));
        }
        if !t.is_contiguous() || t.rank() == 0 {
            return Err(KernelError::unsupported(
                "cortex_m linear: row-major tensors of rank >= 1 only",
            ));
        }
    }
    if w.rank() != 2 {
        return Err(KernelError::shape(
            "cortex_m linear: weights must be [N, K]",
        ));
    }
    let (n, k) = (w.size(0), w.size(1));
    let xs = x.sizes();
    if xs[xs.len() - 1] != k || k == 0 {
        return Err(KernelError::shape(
            "cortex_m linear: input's last dim is not the weights' K",
        ));
    }
    let rows = x.numel() / k;
    let os = o.sizes();
    if os.len() != xs.len() || os[..os.len() - 1] != xs[..xs.len() - 1] || os[os.len() - 1] != n {
        return Err(KernelError::shape(
            "cortex_m linear: output is not [..., N]",
        ));
    }
    for (i, what) in [(BIAS, "bias"), (KERNEL_SUM, "kernel_sum")] {
        if let Some(t) = a.opt_tensor(i)? {
            if t.dtype() != ScalarType::Int || t.numel() != n {
                return Err(KernelError::shape(alloc::format!(
                    "cortex_m linear: {what} must be int32 [N]"
                )));
            }
        }
    }
    let (m, s) = (a.int_list(MULTIPLIERS)?, a.int_list(SHIFTS)?);
    if m.is_empty() || s.is_empty() {
        return Err(KernelError::invalid(
            "cortex_m linear: no requantization multiplier",
        ));
    }
    let to_i32 = |v: i64| {
        i32::try_from(v)
            .map_err(|_| KernelError::invalid("cortex_m linear: multiplier or shift exceeds i32"))
    };
    Ok(Params {
        rows,
        k,
        n,
        input_offset: int32(a, INPUT_OFFSET, "cortex_m linear")?,
        filter_offset: int32(a, FILTER_OFFSET, "cortex_m linear")?,
        output_offset: int32(a, OUTPUT_OFFSET, "cortex_m linear")?,
        multiplier: to_i32(m.get(0)?)?,
        shift: to_i32(s.get(0)?)?,
        act_min: int32(a, ACT_MIN, "cortex_m linear")?,
        act_max: int32(a, ACT_MAX, "cortex_m linear")?,
    })
}

fn check_linear(a: &ArgView) -> Result<(), KernelError> {
    params(a).map(|_| ())
}

fn linear_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = params(ctx)?;
    if ctx.opt_tensor(KERNEL_SUM)?.is_some() {
        let ([x, w, ks], [mut o]) = ctx.io([INPUT, WEIGHTS, KERNEL_SUM], [OUT])?;
        linear(
            &p,
            x.as_slice()?,
            w.as_slice()?,
            Addend::KernelSum(ks.as_slice()?),
            o.as_mut_slice()?,
        );
    } else if ctx.opt_tensor(BIAS)?.is_some() {
        let ([x, w, b], [mut o]) = ctx.io([INPUT, WEIGHTS, BIAS], [OUT])?;
        linear(
            &p,
            x.as_slice()?,
            w.as_slice()?,
            Addend::Bias(Some(b.as_slice()?)),
            o.as_mut_slice()?,
        );
    } else {
        let ([x, w], [mut o]) = ctx.io([INPUT, WEIGHTS], [OUT])?;
        linear(
            &p,
            x.as_slice()?,
            w.as_slice()?,
            Addend::Bias(None),
            o.as_mut_slice()?,
        );
    }
    Ok(())
}

pub fn linear(p: &Params, x: &[i8], w: &[i8], add: Addend, out: &mut [i8]) {
    for r in 0..p.rows {
        let xr = &x[r * p.k..(r + 1) * p.k];
        // The kernel-sum form adds `filter_offset · Σ x` once per row.
        let row_term = match add {
            Addend::KernelSum(_) => xr
                .iter()
                .fold(0i32, |s, &v| s.wrapping_add(i32::from(v)))
                .wrapping_mul(p.filter_offset),
            Addend::Bias(_) => 0,
        };
        for j in 0..p.n {
            let wr = &w[j * p.k..(j + 1) * p.k];
            let acc = match add {
                Addend::KernelSum(ks) => dot(xr, wr, row_term, 0, 0).wrapping_add(ks[j]),
                Addend::Bias(bias) => dot(
                    xr,
                    wr,
                    bias.map_or(0, |b| b[j]),
                    p.input_offset,
                    p.filter_offset,
                ),
            };
            out[r * p.n + j] = to_i8(
                requantize(acc, p.multiplier, p.shift),
                p.output_offset,
                p.act_min,
                p.act_max,
            );
        }
    }
}
