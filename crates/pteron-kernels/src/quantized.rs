//! ExecuTorch's quantized kernels (`kernels/quantized`, namespace `quantized_decomposed`) that
//! LLM exports use: weight-only quantized embeddings (8, 4 and 2 bits, per row or per group) and
//! the affine quantize / dequantize / choose-qparams ops (per tensor, per channel, per token).
//!
//! Arithmetic follows ExecuTorch's portable C++ exactly (it differs from PyTorch's reference in
//! places):
//! - quantize: `q = clamp(i64(f32(zp) + nearbyint(f32(x · (1f / f32(scale))))), qmin, qmax)`;
//! - dequantize: `out = T(f32(q − i32(zp)) · f32(scale))`;
//! - embeddings: `out = T((f32(q) − f32(zp)) · f32(scale))`; 4-bit: element `2k` in the high
//!   nibble, `2k + 1` in the low one, `q = nibble − 8`; 2-bit: element `4k + i` in bits
//!   `2i..2i+2`, `q = crumb − 2`.
//!
//! Every index read from data (embedding ids) is bounds-checked: ExecuTorch's 2/4-bit kernels do
//! not check them. Where ExecuTorch reads a tensor as another type than its dtype (the `.out`
//! embeddings read the scales as the output type, zero points are read as int64 whatever their
//! dtype), pteron refuses the mismatch at load instead.

use half::{bf16, f16};
use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Element, Kernel, KernelContext, KernelError, KernelRegistry,
    ScalarType, TensorInfo,
};

use crate::util::require_contiguous;

pub fn register(r: &mut KernelRegistry) {
    let emb = DtypeSet::of(&[ScalarType::Float, ScalarType::Half, ScalarType::BFloat16]);
    for (name, run, check) in [
        (
            "embedding_byte.out",
            emb8_out as KernelFnT,
            check_emb8 as CheckFnT,
        ),
        ("embedding_byte.dtype_out", emb8_dtype_out, check_emb8_dtype),
        ("embedding_4bit.out", emb4_out, check_emb4),
        ("embedding_4bit.dtype_out", emb4_dtype_out, check_emb4_dtype),
        ("embedding_2bit.out", emb2_out, check_emb2),
        ("embedding_2bit.dtype_out", emb2_dtype_out, check_emb2_dtype),
    ] {
        r.register(
            &format!("quantized_decomposed::{name}"),
            Kernel::with_check(run, check).dtypes(emb),
        );
    }
    let qin = DtypeSet::of(&[ScalarType::Float, ScalarType::Double, ScalarType::Half]);
    let qint = DtypeSet::of(&[
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
    ]);
    r.register(
        "quantized_decomposed::quantize_per_tensor.out",
        Kernel::with_check(quantize_per_tensor_out, check_quantize_per_tensor).dtypes(qin),
    );
    r.register(
        "quantized_decomposed::quantize_per_tensor.Tensor_out",
        Kernel::with_check(quantize_per_tensor_tensor_out, check_quantize_per_tensor_t).dtypes(qin),
    );
    r.register(
        "quantized_decomposed::quantize_per_channel.out",
        Kernel::with_check(quantize_per_channel_out, check_quantize_per_channel).dtypes(qin),
    );
    r.register(
        "quantized_decomposed::quantize_per_token.out",
        Kernel::with_check(quantize_per_token_out, check_quantize_per_token).dtypes(qin),
    );
    r.register(
        "quantized_decomposed::dequantize_per_tensor.out",
        Kernel::with_check(dequantize_per_tensor_out, check_dequantize_per_tensor).dtypes(qint),
    );
    r.register(
        "quantized_decomposed::dequantize_per_tensor.Tensor_out",
        Kernel::with_check(
            dequantize_per_tensor_tensor_out,
            check_dequantize_per_tensor_t,
        )
        .dtypes(qint),
    );
    r.register(
        "quantized_decomposed::dequantize_per_channel.out",
        Kernel::with_check(dequantize_per_channel_out, check_dequantize_per_channel).dtypes(qint),
    );
    r.register(
        "quantized_decomposed::dequantize_per_token.out",
        Kernel::with_check(dequantize_per_token_out, check_dequantize_per_token).dtypes(qint),
    );
    r.register(
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        Kernel::with_check(choose_qparams_per_token_out, check_choose_qparams_per_token)
            .dtypes(DtypeSet::of(&[ScalarType::Float])),
    );
}

type KernelFnT = pteron_core::kernel::KernelFn;
type CheckFnT = pteron_core::kernel::CheckFn;

/// Float types converted like C++ `static_cast` from/to `float`.
trait F32Cast: Element + Copy {
    fn from_f32(v: f32) -> Self;
    fn to_f32(self) -> f32;
}
impl F32Cast for f32 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
}
impl F32Cast for f64 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
}
impl F32Cast for f16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
}
impl F32Cast for bf16 {
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
}

macro_rules! with_f32cast {
    ($dt:expr, $T:ident => $body:expr, $what:expr) => {
        match $dt {
            ScalarType::Float => {
                type $T = f32;
                $body
            }
            ScalarType::Double => {
                type $T = f64;
                $body
            }
            ScalarType::Half => {
                type $T = f16;
                $body
            }
            ScalarType::BFloat16 => {
                type $T = bf16;
                $body
            }
            dt => return Err(KernelError::dtype(dt, $what)),
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Embeddings

/// Argument positions: weight 0, scales 1, zero points 2, quant_min 3, quant_max 4, indices 5,
/// then (dtype_out) dtype 6, out 7; (out) out 6.
#[derive(Clone, Copy)]
struct EmbArgs {
    bits: u32,
    dtype_arg: Option<usize>,
    out: usize,
}

const fn emb(bits: u32, dtype_out: bool) -> EmbArgs {
    EmbArgs {
        bits,
        dtype_arg: if dtype_out { Some(6) } else { None },
        out: if dtype_out { 7 } else { 6 },
    }
}

fn check_emb<'p>(a: &impl ArgAccess<'p>, e: EmbArgs) -> Result<(), KernelError> {
    let op = "quantized embedding";
    let (w, s, idx, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(5)?, a.tensor(e.out)?);
    let zp = a.opt_tensor(2)?;
    let (qmin, qmax) = (a.int(3)?, a.int(4)?);
    if qmin > qmax {
        return Err(KernelError::invalid(format!(
            "{op}: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    if w.rank() != 2 {
        return Err(KernelError::shape(format!("{op}: weight must be 2-d")));
    }
    let wdt_ok = match e.bits {
        8 => matches!(w.dtype(), ScalarType::Byte | ScalarType::Char),
        _ => w.dtype() == ScalarType::Byte,
    };
    if !wdt_ok {
        return Err(KernelError::dtype(w.dtype(), "quantized embedding weight"));
    }
    let floats = [ScalarType::Float, ScalarType::Half, ScalarType::BFloat16];
    if !floats.contains(&o.dtype()) {
        return Err(KernelError::dtype(o.dtype(), "quantized embedding output"));
    }
    if !floats.contains(&s.dtype()) {
        return Err(KernelError::dtype(s.dtype(), "quantized embedding scales"));
    }
    // `.out` reads the scales as the output type; `.dtype_out` reads scales and zero points as
    // the scales' type (and requires zero points of the output type).
    if e.dtype_arg.is_none() && s.dtype() != o.dtype() {
        return Err(KernelError::unsupported(format!(
            "{op}: scales ({}) must have the output's dtype ({})",
            s.dtype(),
            o.dtype()
        )));
    }
    if let Some(z) = zp {
        if z.dtype() != o.dtype() || z.dtype() != s.dtype() {
            return Err(KernelError::unsupported(format!(
                "{op}: zero points ({}) must have the dtype of the output ({}) and scales ({})",
                z.dtype(),
                o.dtype(),
                s.dtype()
            )));
        }
        if z.sizes() != s.sizes() {
            return Err(KernelError::shape(format!(
                "{op}: zero points {:?} and scales {:?} differ",
                z.sizes(),
                s.sizes()
            )));
        }
    }
    let idx_ok = match e.bits {
        8 => idx.dtype() == ScalarType::Long,
        _ => matches!(idx.dtype(), ScalarType::Long | ScalarType::Int),
    };
    if !idx_ok {
        return Err(KernelError::dtype(
            idx.dtype(),
            "quantized embedding indices",
        ));
    }
    if let Some(i) = e.dtype_arg {
        if let Some(dt) = a.opt_dtype(i)? {
            if dt != o.dtype() {
                return Err(KernelError::invalid(format!(
                    "{op}: dtype {dt} differs from the out tensor's {}",
                    o.dtype()
                )));
            }
        }
    }
    if o.rank() != idx.rank() + 1 {
        return Err(KernelError::shape(format!(
            "{op}: out of rank {} for indices of rank {}",
            o.rank(),
            idx.rank()
        )));
    }
    require_contiguous("quantized embedding", &[w, s, idx, o])?;
    if let Some(z) = zp {
        require_contiguous("quantized embedding", &[z])?;
    }
    emb_geometry(w, s, e.bits).map(|_| ())
}

/// (rows, embedding dim, groups per row) after checking weight against scales.
fn emb_geometry(
    w: &TensorInfo,
    s: &TensorInfo,
    bits: u32,
) -> Result<(usize, usize, usize), KernelError> {
    let per_byte = (8 / bits) as usize;
    let rows = w.size(0);
    let dim = w
        .size(1)
        .checked_mul(per_byte)
        .ok_or(KernelError::SizeOverflow)?;
    if !(s.rank() == 1 || s.rank() == 2) || s.size(0) != rows {
        return Err(KernelError::shape(format!(
            "quantized embedding: scales {:?} for a weight of {rows} rows",
            s.sizes()
        )));
    }
    let groups = if s.rank() == 2 { s.size(1) } else { 1 };
    if groups == 0 || dim % groups != 0 {
        return Err(KernelError::shape(format!(
            "quantized embedding: {groups} groups do not divide the embedding dim {dim}"
        )));
    }
    Ok((rows, dim, groups))
}

fn check_emb8(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(8, false))
}
fn check_emb8_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(8, true))
}
fn check_emb4(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(4, false))
}
fn check_emb4_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(4, true))
}
fn check_emb2(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(2, false))
}
fn check_emb2_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(2, true))
}
fn emb8_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(8, false))
}
fn emb8_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(8, true))
}
fn emb4_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(4, false))
}
fn emb4_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(4, true))
}
fn emb2_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(2, false))
}
fn emb2_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(2, true))
}

/// The quantized value of element `j` of a packed row.
#[inline(always)]
fn packed_value(row: &[u8], j: usize, bits: u32, signed8: bool) -> f32 {
    match bits {
        8 => {
            if signed8 {
                row[j] as i8 as f32
            } else {
                row[j] as f32
            }
        }
        4 => {
            let b = row[j >> 1];
            let nib = if j & 1 == 1 { b & 0x0F } else { b >> 4 };
            nib as f32 - 8.0
        }
        _ => {
            let b = row[j >> 2];
            ((b >> (2 * (j & 3))) & 3) as f32 - 2.0
        }
    }
}

fn run_emb(ctx: &mut KernelContext, e: EmbArgs) -> Result<(), KernelError> {
    check_emb(ctx, e)?;
    let (w, s, idx) = (*ctx.tensor(0)?, *ctx.tensor(1)?, *ctx.tensor(5)?);
    let (rows, dim, groups) = emb_geometry(&w, &s, e.bits)?;
    let mut osz = idx.dims();
    osz.push(dim)?;
    ctx.resize(e.out, &osz)?;
    let has_zp = !ctx.is_none(2)?;
    let packed = w.size(1);
    let signed8 = w.dtype() == ScalarType::Char;
    let group = dim / groups;
    let odt = ctx.tensor(e.out)?.dtype();
    let pdt = s.dtype();
    macro_rules! go {
        ($zp:expr, $o:ident, $wr:ident, $sr:ident, $ir:ident) => {{
            let ids = crate::embedding::Indices::of(&$ir)?;
            with_f32cast!(pdt, P => {
                let scales = $sr.as_slice::<P>()?;
                let zps: Option<&[P]> = match $zp { Some(z) => Some(z.as_slice::<P>()?), None => None };
                with_f32cast!(odt, O => {
                    let out = $o.as_mut_slice::<O>()?;
                    for k in 0..ids.len() {
                        let id = ids.get(k);
                        let r = usize::try_from(id).ok().filter(|&r| r < rows).ok_or_else(|| {
                            KernelError::invalid(format!(
                                "quantized embedding: index {id} out of range for {rows} rows"
                            ))
                        })?;
                        let row = &$wr.bytes[r * packed..(r + 1) * packed];
                        let sc = &scales[r * groups..(r + 1) * groups];
                        let orow = &mut out[k * dim..(k + 1) * dim];
                        for (j, o) in orow.iter_mut().enumerate() {
                            let g = j / group;
                            let zp = zps.map_or(0.0, |z| z[r * groups + g].to_f32());
                            let q = packed_value(row, j, e.bits, signed8);
                            *o = O::from_f32((q - zp) * sc[g].to_f32());
                        }
                    }
                }, "quantized embedding output")
            }, "quantized embedding scales")
        }};
    }
    if has_zp {
        let ([wr, sr, zr, ir], [mut o]) = ctx.io([0, 1, 2, 5], [e.out])?;
        go!(Some(zr), o, wr, sr, ir);
    } else {
        let ([wr, sr, ir], [mut o]) = ctx.io([0, 1, 5], [e.out])?;
        go!(None::<pteron_core::TensorRef<'_>>, o, wr, sr, ir);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Quantize

/// Range of the quantized dtype (ExecuTorch's `check_quantize_per_tensor_args`).
fn quant_bounds(dt: ScalarType) -> Option<(i64, i64)> {
    Some(match dt {
        ScalarType::Byte => (0, 255),
        ScalarType::Char => (-128, 127),
        ScalarType::Short => (i16::MIN as i64, i16::MAX as i64),
        ScalarType::Int => (i32::MIN as i64, i32::MAX as i64),
        _ => return None,
    })
}

fn check_quantize_common<'p>(
    a: &impl ArgAccess<'p>,
    input: usize,
    qmin: usize,
    dtype: usize,
    out: usize,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if !matches!(
        x.dtype(),
        ScalarType::Float | ScalarType::Double | ScalarType::Half
    ) {
        return Err(KernelError::dtype(x.dtype(), "quantize input"));
    }
    let dt = a
        .opt_dtype(dtype)?
        .ok_or_else(|| KernelError::invalid("quantize: dtype is None"))?;
    if o.dtype() != dt {
        return Err(KernelError::invalid(format!(
            "quantize: out is {}, dtype argument {dt}",
            o.dtype()
        )));
    }
    let (lo, hi) = quant_bounds(dt).ok_or_else(|| KernelError::dtype(dt, "quantize output"))?;
    let (qmin, qmax) = (a.int(qmin)?, a.int(qmin + 1)?);
    if qmin < lo || qmax > hi || qmin > qmax {
        return Err(KernelError::invalid(format!(
            "quantize: [{qmin}, {qmax}] is not a range within that of {dt}"
        )));
    }
    require_contiguous("quantize", &[x, o])
}

/// `f32(x · inv_scale)` as ExecuTorch's `quantize_val` forms it for each input type.
trait QIn: Element + Copy {
    fn scaled(self, inv: f32) -> f32;
}
impl QIn for f32 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        inv * self
    }
}
impl QIn for f64 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        (inv as f64 * self) as f32
    }
}
impl QIn for f16 {
    #[inline(always)]
    fn scaled(self, inv: f32) -> f32 {
        inv * self.to_f32()
    }
}

/// Quantized outputs.
trait QOut: Element + Copy {
    fn from_q(q: i64) -> Self;
}
macro_rules! qout {
    ($($t:ty),*) => {$(impl QOut for $t {
        #[inline(always)]
        fn from_q(q: i64) -> Self { q as $t }
    })*};
}
qout!(u8, i8, i16, i32);

#[inline(always)]
fn quantize_val<I: QIn>(x: I, inv: f32, zp: i32, qmin: i64, qmax: i64) -> i64 {
    // int32 + float is a float addition in C++; the sum then truncates to int64.
    let q = (zp as f32 + x.scaled(inv).round_ties_even()) as i64;
    q.clamp(qmin, qmax)
}

/// Quantizes `x` in blocks of `block` elements; block `i` uses channel `(i % channels)`'s
/// parameters from `param(ch) -> (scale, zero_point)`.
fn quantize_blocks<I: QIn, O: QOut>(
    x: &[I],
    out: &mut [O],
    block: usize,
    channels: usize,
    qmin: i64,
    qmax: i64,
    param: &dyn Fn(usize) -> (f64, i64),
) {
    if block == 0 {
        return;
    }
    for (bi, (xs, os)) in x.chunks(block).zip(out.chunks_mut(block)).enumerate() {
        let (scale, zp) = param(bi % channels);
        let inv = 1.0f32 / scale as f32;
        for (o, &v) in os.iter_mut().zip(xs) {
            *o = O::from_q(quantize_val(v, inv, zp as i32, qmin, qmax));
        }
    }
}

fn dispatch_quantize(
    ctx: &mut KernelContext,
    input: usize,
    out: usize,
    block: usize,
    channels: usize,
    qmin: i64,
    qmax: i64,
    params: Params,
) -> Result<(), KernelError> {
    // Checked at load too; here again because an Int value can be written at run time
    // (`i64::clamp` panics on an inverted range).
    if qmin > qmax {
        return Err(KernelError::invalid(format!(
            "quantize: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    let x = *ctx.tensor(input)?;
    ctx.resize(out, x.sizes())?;
    macro_rules! run {
        ($x:ident, $o:ident, $param:expr) => {{
            macro_rules! outs {
                ($I:ty) => {{
                    let xs = $x.as_slice::<$I>()?;
                    match $o.info.dtype() {
                        ScalarType::Byte => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<u8>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Char => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i8>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Short => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i16>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        ScalarType::Int => quantize_blocks(
                            xs,
                            $o.as_mut_slice::<i32>()?,
                            block,
                            channels,
                            qmin,
                            qmax,
                            $param,
                        ),
                        dt => return Err(KernelError::dtype(dt, "quantize output")),
                    }
                }};
            }
            match $x.info.dtype() {
                ScalarType::Float => outs!(f32),
                ScalarType::Double => outs!(f64),
                ScalarType::Half => outs!(f16),
                dt => return Err(KernelError::dtype(dt, "quantize input")),
            }
        }};
    }
    match params {
        Params::Scalar(scale, zp) => {
            let ([x], [mut o]) = ctx.io([input], [out])?;
            run!(x, o, &|_| (scale, zp));
        }
        Params::Tensors(s, z) => {
            let ([x, s, z], [mut o]) = ctx.io([input, s, z], [out])?;
            let (sd, zd) = (s.as_slice::<f64>()?, z.as_slice::<i64>()?);
            if sd.len() < channels || zd.len() < channels {
                return Err(KernelError::shape(
                    "quantize: fewer parameters than channels",
                ));
            }
            run!(x, o, &|c| (sd[c], zd[c]));
        }
    }
    Ok(())
}

enum Params {
    Scalar(f64, i64),
    /// Argument positions of Double scales and Long zero points.
    Tensors(usize, usize),
}

fn check_quantize_per_tensor(a: &ArgView) -> Result<(), KernelError> {
    a.double(1)?;
    a.int(2)?;
    check_quantize_common(a, 0, 3, 5, 6)
}

fn quantize_per_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    let (scale, zp, qmin, qmax) = (ctx.double(1)?, ctx.int(2)?, ctx.int(3)?, ctx.int(4)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_quantize(ctx, 0, 6, n, 1, qmin, qmax, Params::Scalar(scale, zp))
}

/// Per-tensor parameters given as one-element tensors (Double scale, Long zero point).
fn check_scalar_param_tensors<'p>(
    a: &impl ArgAccess<'p>,
    s: usize,
    z: usize,
    scale_dtypes: &[ScalarType],
) -> Result<(), KernelError> {
    let (st, zt) = (a.tensor(s)?, a.tensor(z)?);
    if !scale_dtypes.contains(&st.dtype()) {
        return Err(KernelError::dtype(st.dtype(), "quantization scale"));
    }
    if zt.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(zt.dtype(), "quantization zero point"));
    }
    Ok(())
}

fn check_quantize_per_tensor_t(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    check_quantize_common(a, 0, 3, 5, 6)
}

fn quantize_per_tensor_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    if ctx.tensor(1)?.numel() != 1 || ctx.tensor(2)?.numel() != 1 {
        return Err(KernelError::shape(
            "quantize_per_tensor: scale and zero point must have one element",
        ));
    }
    let (qmin, qmax) = (ctx.int(3)?, ctx.int(4)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_quantize(ctx, 0, 6, n, 1, qmin, qmax, Params::Tensors(1, 2))
}

fn check_quantize_per_channel(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    a.int(3)?;
    check_quantize_common(a, 0, 4, 6, 7)
}

fn quantize_per_channel_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 4, 6, 7)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    let x = *ctx.tensor(0)?;
    let axis = x.dim_index(ctx.int(3)?)?;
    let channels = if x.rank() == 0 { 1 } else { x.size(axis) };
    if ctx.tensor(1)?.numel() != channels || ctx.tensor(2)?.numel() != channels {
        return Err(KernelError::shape(format!(
            "quantize_per_channel: {channels} channels need as many scales and zero points"
        )));
    }
    let block: usize = x.sizes().get(axis + 1..).map_or(1, |s| s.iter().product());
    let (qmin, qmax) = (ctx.int(4)?, ctx.int(5)?);
    dispatch_quantize(
        ctx,
        0,
        7,
        block,
        channels,
        qmin,
        qmax,
        Params::Tensors(1, 2),
    )
}

/// Tokens (every dim but the last) and the last dim of a per-token tensor.
fn tokens_of(x: &TensorInfo) -> (usize, usize) {
    match x.sizes().split_last() {
        Some((&last, rest)) => (rest.iter().product(), last),
        None => (1, 1),
    }
}

fn check_quantize_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double])?;
    check_quantize_common(a, 0, 3, 5, 6)
}

fn quantize_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_quantize_common(ctx, 0, 3, 5, 6)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double])?;
    let (tokens, dim) = tokens_of(ctx.tensor(0)?);
    if ctx.tensor(1)?.numel() != tokens || ctx.tensor(2)?.numel() != tokens {
        return Err(KernelError::shape(format!(
            "quantize_per_token: {tokens} tokens need as many scales and zero points"
        )));
    }
    let (qmin, qmax) = (ctx.int(3)?, ctx.int(4)?);
    dispatch_quantize(
        ctx,
        0,
        6,
        dim,
        tokens.max(1),
        qmin,
        qmax,
        Params::Tensors(1, 2),
    )
}

// ---------------------------------------------------------------------------------------------
// Dequantize

fn check_dequantize_common<'p>(
    a: &impl ArgAccess<'p>,
    input: usize,
    qmin: usize,
    dtype: usize,
    out_dtype: Option<usize>,
    out: usize,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if quant_bounds(x.dtype()).is_none() {
        return Err(KernelError::dtype(x.dtype(), "dequantize input"));
    }
    let dt = a.opt_dtype(dtype)?;
    if dt != Some(x.dtype()) {
        return Err(KernelError::invalid(format!(
            "dequantize: input is {}, dtype argument {dt:?}",
            x.dtype()
        )));
    }
    if let Some(i) = out_dtype {
        if let Some(od) = a.opt_dtype(i)? {
            if od != o.dtype() {
                return Err(KernelError::invalid(format!(
                    "dequantize: out is {}, out_dtype {od}",
                    o.dtype()
                )));
            }
        }
    }
    if !matches!(
        o.dtype(),
        ScalarType::Float | ScalarType::Double | ScalarType::Half
    ) {
        return Err(KernelError::dtype(o.dtype(), "dequantize output"));
    }
    let (qmin, qmax) = (a.int(qmin)?, a.int(qmin + 1)?);
    if qmin > qmax {
        return Err(KernelError::invalid(format!(
            "dequantize: quant_min {qmin} > quant_max {qmax}"
        )));
    }
    require_contiguous("dequantize", &[x, o])
}

/// Dequantizes in blocks like [`quantize_blocks`]; `param(ch) -> (f32 scale, zero point)`.
fn dequantize_blocks<I: Element + Copy + Into<i64>, O: F32Cast>(
    x: &[I],
    out: &mut [O],
    block: usize,
    channels: usize,
    param: &dyn Fn(usize) -> (f32, i64),
) {
    if block == 0 {
        return;
    }
    for (bi, (xs, os)) in x.chunks(block).zip(out.chunks_mut(block)).enumerate() {
        let (scale, zp) = param(bi % channels);
        let zp = zp as i32 as i64;
        for (o, &v) in os.iter_mut().zip(xs) {
            // (q - i32(zp)) is an int; the product with the float scale is a float.
            *o = O::from_f32((v.into() - zp) as i32 as f32 * scale);
        }
    }
}

fn dispatch_dequantize(
    ctx: &mut KernelContext,
    input: usize,
    out: usize,
    block: usize,
    channels: usize,
    params: DqParams,
) -> Result<(), KernelError> {
    let x = *ctx.tensor(input)?;
    ctx.resize(out, x.sizes())?;
    macro_rules! run {
        ($x:ident, $o:ident, $param:expr) => {{
            macro_rules! ins {
                ($O:ty) => {{
                    let os = $o.as_mut_slice::<$O>()?;
                    match $x.info.dtype() {
                        ScalarType::Byte => {
                            dequantize_blocks($x.as_slice::<u8>()?, os, block, channels, $param)
                        }
                        ScalarType::Char => {
                            dequantize_blocks($x.as_slice::<i8>()?, os, block, channels, $param)
                        }
                        ScalarType::Short => {
                            dequantize_blocks($x.as_slice::<i16>()?, os, block, channels, $param)
                        }
                        ScalarType::Int => {
                            dequantize_blocks($x.as_slice::<i32>()?, os, block, channels, $param)
                        }
                        dt => return Err(KernelError::dtype(dt, "dequantize input")),
                    }
                }};
            }
            match $o.info.dtype() {
                ScalarType::Float => ins!(f32),
                ScalarType::Double => ins!(f64),
                ScalarType::Half => ins!(f16),
                dt => return Err(KernelError::dtype(dt, "dequantize output")),
            }
        }};
    }
    match params {
        DqParams::Scalar(scale, zp) => {
            let ([x], [mut o]) = ctx.io([input], [out])?;
            run!(x, o, &|_| (scale as f32, zp));
        }
        DqParams::Tensors(s, z) => {
            let scale_f64 = ctx.tensor(s)?.dtype() == ScalarType::Double;
            match z {
                Some(z) => {
                    let ([x, s, z], [mut o]) = ctx.io([input, s, z], [out])?;
                    let zd = z.as_slice::<i64>()?;
                    if zd.len() < channels {
                        return Err(KernelError::shape(
                            "dequantize: fewer zero points than channels",
                        ));
                    }
                    if scale_f64 {
                        let sd = s.as_slice::<f64>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c] as f32, zd[c]));
                    } else {
                        let sd = s.as_slice::<f32>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c], zd[c]));
                    }
                }
                None => {
                    let ([x, s], [mut o]) = ctx.io([input, s], [out])?;
                    if scale_f64 {
                        let sd = s.as_slice::<f64>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c] as f32, 0));
                    } else {
                        let sd = s.as_slice::<f32>()?;
                        if sd.len() < channels {
                            return Err(KernelError::shape(
                                "dequantize: fewer scales than channels",
                            ));
                        }
                        run!(x, o, &|c| (sd[c], 0));
                    }
                }
            }
        }
    }
    Ok(())
}

enum DqParams {
    Scalar(f64, i64),
    /// Scales (Double or Float) and optional Long zero points.
    Tensors(usize, Option<usize>),
}

fn check_dequantize_per_tensor(a: &ArgView) -> Result<(), KernelError> {
    a.double(1)?;
    a.int(2)?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

fn dequantize_per_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    let (scale, zp) = (ctx.double(1)?, ctx.int(2)?);
    let n = ctx.tensor(0)?.numel();
    dispatch_dequantize(ctx, 0, 7, n, 1, DqParams::Scalar(scale, zp))
}

fn check_dequantize_per_tensor_t(a: &ArgView) -> Result<(), KernelError> {
    check_scalar_param_tensors(a, 1, 2, &[ScalarType::Double, ScalarType::Float])?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

fn dequantize_per_tensor_tensor_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    check_scalar_param_tensors(ctx, 1, 2, &[ScalarType::Double, ScalarType::Float])?;
    if ctx.tensor(1)?.numel() != 1 || ctx.tensor(2)?.numel() != 1 {
        return Err(KernelError::shape(
            "dequantize_per_tensor: scale and zero point must have one element",
        ));
    }
    let n = ctx.tensor(0)?.numel();
    dispatch_dequantize(ctx, 0, 7, n, 1, DqParams::Tensors(1, Some(2)))
}

fn check_channel_params<'p>(a: &impl ArgAccess<'p>, s: usize, z: usize) -> Result<(), KernelError> {
    let st = a.tensor(s)?;
    if !matches!(st.dtype(), ScalarType::Double | ScalarType::Float) {
        return Err(KernelError::dtype(st.dtype(), "dequantize scales"));
    }
    if let Some(zt) = a.opt_tensor(z)? {
        // ExecuTorch accepts Int zero points but reads them as int64: refused here.
        if zt.dtype() != ScalarType::Long {
            return Err(KernelError::dtype(zt.dtype(), "dequantize zero points"));
        }
    }
    Ok(())
}

fn check_dequantize_per_channel(a: &ArgView) -> Result<(), KernelError> {
    check_channel_params(a, 1, 2)?;
    a.int(3)?;
    check_dequantize_common(a, 0, 4, 6, Some(7), 8)
}

fn dequantize_per_channel_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 4, 6, Some(7), 8)?;
    check_channel_params(ctx, 1, 2)?;
    let x = *ctx.tensor(0)?;
    let axis = x.dim_index(ctx.int(3)?)?;
    let channels = if x.rank() == 0 { 1 } else { x.size(axis) };
    let zp = if ctx.is_none(2)? { None } else { Some(2) };
    if ctx.tensor(1)?.numel() != channels
        || zp.map_or(Ok(false), |z| ctx.tensor(z).map(|t| t.numel() != channels))?
    {
        return Err(KernelError::shape(format!(
            "dequantize_per_channel: {channels} channels need as many scales and zero points"
        )));
    }
    let block: usize = x.sizes().get(axis + 1..).map_or(1, |s| s.iter().product());
    dispatch_dequantize(ctx, 0, 8, block, channels, DqParams::Tensors(1, zp))
}

fn check_dequantize_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_channel_params(a, 1, 2)?;
    check_dequantize_common(a, 0, 3, 5, Some(6), 7)
}

fn dequantize_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_dequantize_common(ctx, 0, 3, 5, Some(6), 7)?;
    check_channel_params(ctx, 1, 2)?;
    let (tokens, dim) = tokens_of(ctx.tensor(0)?);
    if ctx.tensor(1)?.numel() != tokens || ctx.tensor(2)?.numel() != tokens {
        return Err(KernelError::shape(format!(
            "dequantize_per_token: {tokens} tokens need as many scales and zero points"
        )));
    }
    dispatch_dequantize(ctx, 0, 7, dim, tokens.max(1), DqParams::Tensors(1, Some(2)))
}

// ---------------------------------------------------------------------------------------------
// choose_qparams_per_token_asymmetric

const SMALL_SCALE_THRESHOLD: f32 = 6.1e-5;

/// ExecuTorch's `calculate_scale_and_zero_point` (op_choose_qparams.cpp), step for step.
fn scale_and_zero_point(mut min: f32, mut max: f32, qmin: i32, qmax: i32) -> (f64, i64) {
    min = min.min(0.0);
    max = max.max(0.0);
    let mut scale = (max as f64 - min as f64) / (qmax - qmin) as f64;
    if scale as f32 == 0.0 || (1.0f32 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale < SMALL_SCALE_THRESHOLD as f64 {
        let org = scale as f32;
        scale = SMALL_SCALE_THRESHOLD as f64;
        if min == 0.0 {
            max = SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
        } else if max == 0.0 {
            min = -SMALL_SCALE_THRESHOLD * (qmax - qmin) as f32;
        } else {
            let amp = SMALL_SCALE_THRESHOLD / org;
            min *= amp;
            max *= amp;
        }
    }
    let zp_min = qmin as f64 - min as f64 / scale;
    let zp_max = qmax as f64 - max as f64 / scale;
    let err_min = (qmin.abs() as f64) - (min as f64 / scale).abs();
    let err_max = (qmax.abs() as f64) - (max as f64 / scale).abs();
    let initial = if err_min < err_max { zp_min } else { zp_max };
    let zp = if initial < qmin as f64 {
        qmin as i64
    } else if initial > qmax as f64 {
        qmax as i64
    } else {
        (initial as f32).round_ties_even() as i64
    };
    (scale, zp)
}

fn check_choose_qparams_per_token(a: &ArgView) -> Result<(), KernelError> {
    check_choose_qparams(a)
}

fn check_choose_qparams<'p>(a: &impl ArgAccess<'p>) -> Result<(), KernelError> {
    let (x, s, z) = (a.tensor(0)?, a.tensor(2)?, a.tensor(3)?);
    if x.dtype() != ScalarType::Float {
        return Err(KernelError::dtype(x.dtype(), "choose_qparams input"));
    }
    if s.dtype() != ScalarType::Double {
        return Err(KernelError::dtype(s.dtype(), "choose_qparams scale_out"));
    }
    if z.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(
            z.dtype(),
            "choose_qparams zero_point_out",
        ));
    }
    if x.rank() == 0 || s.rank() != x.rank() || z.rank() != x.rank() {
        return Err(KernelError::shape(
            "choose_qparams_per_token_asymmetric: outputs must have the input's rank",
        ));
    }
    require_contiguous("choose_qparams", &[x, s, z])
}

fn choose_qparams_per_token_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    check_choose_qparams(ctx)?;
    let x = *ctx.tensor(0)?;
    let mut sz = x.dims();
    if let Some(l) = sz.as_mut_slice().last_mut() {
        *l = 1;
    }
    ctx.resize(2, &sz)?;
    ctx.resize(3, &sz)?;
    let (tokens, dim) = tokens_of(&x);
    let ([x], [mut s, mut z]) = ctx.io([0], [2, 3])?;
    let xs = x.as_slice::<f32>()?;
    let ss = s.as_mut_slice::<f64>()?;
    let zs = z.as_mut_slice::<i64>()?;
    for t in 0..tokens {
        let row = &xs[t * dim..(t + 1) * dim];
        // std::min_element / std::max_element: the first extreme by `<`.
        let (mut mn, mut mx) = match row.first() {
            Some(&v) => (v, v),
            None => (0.0, 0.0),
        };
        for &v in row {
            if v < mn {
                mn = v;
            }
            if mx < v {
                mx = v;
            }
        }
        let (scale, zp) = scale_and_zero_point(mn, mx, -128, 127);
        ss[t] = scale;
        zs[t] = zp;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
