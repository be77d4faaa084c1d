//! Weight-only quantized embeddings: 8, 4 and 2 bits, per row or per group, with or without
//! an output dtype argument.

use half::{bf16, f16};
use pteron_core::{ArgAccess, ArgView, KernelContext, KernelError, ScalarType, TensorInfo};

use super::cast::F32Cast;
use crate::util::require_contiguous;

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
        return Err(KernelError::rank_mismatch(op, "weight", 2, w.rank()));
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
            return Err(KernelError::shape_mismatch(
                op,
                "zero points",
                s.sizes(),
                z.sizes(),
            ));
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
                return Err(KernelError::dtype_mismatch(op, "out", dt, o.dtype()));
            }
        }
    }
    if o.rank() != idx.rank() + 1 {
        return Err(KernelError::rank_mismatch(
            op,
            "out",
            idx.rank() + 1,
            o.rank(),
        ));
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

pub(super) fn check_emb8(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(8, false))
}
pub(super) fn check_emb8_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(8, true))
}
pub(super) fn check_emb4(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(4, false))
}
pub(super) fn check_emb4_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(4, true))
}
pub(super) fn check_emb2(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(2, false))
}
pub(super) fn check_emb2_dtype(a: &ArgView) -> Result<(), KernelError> {
    check_emb(a, emb(2, true))
}
pub(super) fn emb8_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(8, false))
}
pub(super) fn emb8_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(8, true))
}
pub(super) fn emb4_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(4, false))
}
pub(super) fn emb4_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(4, true))
}
pub(super) fn emb2_out(c: &mut KernelContext) -> Result<(), KernelError> {
    run_emb(c, emb(2, false))
}
pub(super) fn emb2_dtype_out(c: &mut KernelContext) -> Result<(), KernelError> {
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
                            KernelError::IndexOutOfRange {
                                op: "quantized embedding",
                                index: id,
                                size: rows,
                            }
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
