//! `cortex_m::quantized_add.out`: int8 addition with CMSIS-NN's fixed-point rescaling, as the
//! backend's reference computes it: each operand `(q − zp) << 20`, requantized with its own
//! multiplier and shift, the two summed in `i32`, requantized with the output's, plus the
//! output zero point, clamped to the activation range. Operands of the output's shape and dim
//! order, or (channels-last) one of them holding one value per channel.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

use crate::args::int32;
use crate::requant::{requantize, to_i8};

/// `quantized_add`'s left shift of both operands (the backend's `SHIFT_INT8`).
pub const LEFT_SHIFT: u32 = 20;

const SELF: usize = 0;
const OTHER: usize = 4;
const OUT: usize = 13;

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    register_op!(
        S,
        r,
        "cortex_m::quantized_add.out",
        Kernel::with_check(add_out, check_add).dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
}

/// One operand's zero point, multiplier and shift (or the output's).
#[derive(Clone, Copy, Debug)]
pub struct Rescale {
    pub zero_point: i32,
    pub multiplier: i32,
    pub shift: i32,
}

/// How an operand is read: elementwise, or one value per channel (`index % channels` in a
/// channels-last tensor).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Reads {
    Same,
    PerChannel(usize),
}

#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub a: Rescale,
    pub b: Rescale,
    pub out: Rescale,
    pub act_min: i32,
    pub act_max: i32,
    pub a_reads: Reads,
    pub b_reads: Reads,
}

fn rescale<'p>(a: &impl ArgAccess<'p>, i: usize) -> Result<Rescale, KernelError> {
    Ok(Rescale {
        zero_point: int32(a, i, "cortex_m add")?,
        multiplier: int32(a, i + 1, "cortex_m add")?,
        shift: int32(a, i + 2, "cortex_m add")?,
    })
}

fn params<'p>(a: &impl ArgAccess<'p>) -> Result<Params, KernelError> {
    let (x, y, o) = (a.tensor(SELF)?, a.tensor(OTHER)?, a.tensor(OUT)?);
    for t in [x, y, o] {
        if t.dtype() != ScalarType::Char {
            return Err(KernelError::dtype(t.dtype(), "cortex_m add (int8 only)"));
        }
    }
    Ok(Params {
        a: rescale(a, 1)?,
        b: rescale(a, 5)?,
        out: Rescale {
            zero_point: int32(a, 8, "cortex_m add")?,
            multiplier: int32(a, 9, "cortex_m add")?,
            shift: int32(a, 10, "cortex_m add")?,
        },
        act_min: int32(a, 11, "cortex_m add")?,
        act_max: int32(a, 12, "cortex_m add")?,
        a_reads: reads(x, o, "cortex_m add")?,
        b_reads: reads(y, o, "cortex_m add")?,
    })
}

/// How operand `t` is read to fill `o`: elementwise (same sizes and dim order), or, in a
/// channels-last 4-d output, one value per channel. Other broadcasts are refused, as the
/// backend refuses them.
pub(crate) fn reads(
    t: &pteron_core::TensorInfo,
    o: &pteron_core::TensorInfo,
    op: &'static str,
) -> Result<Reads, KernelError> {
    if t.sizes() == o.sizes() && t.dim_order() == o.dim_order() {
        return Ok(Reads::Same);
    }
    let c = if o.rank() >= 2 { o.size(1) } else { 0 };
    if o.rank() == 4 && o.is_channels_last() && t.rank() == 4 && t.size(1) == c && t.numel() == c {
        return Ok(Reads::PerChannel(c));
    }
    Err(KernelError::unsupported(alloc::format!(
        "{op}: operand {:?} does not match the output {:?} (only a per-channel operand broadcasts)",
        t.sizes(),
        o.sizes()
    )))
}

/// Element `i` of an operand read as `reads` says.
#[inline]
pub(crate) fn at(v: &[i8], reads: Reads, i: usize) -> i8 {
    match reads {
        Reads::Same => v[i],
        Reads::PerChannel(c) => v[i % c],
    }
}

fn check_add(a: &ArgView) -> Result<(), KernelError> {
    params(a).map(|_| ())
}

fn add_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = params(ctx)?;
    let ([x, y], [mut o]) = ctx.io([SELF, OTHER], [OUT])?;
    add(&p, x.as_slice()?, y.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

#[inline]
fn operand(q: i8, r: &Rescale) -> i32 {
    requantize(
        i32::from(q)
            .wrapping_sub(r.zero_point)
            .wrapping_shl(LEFT_SHIFT),
        r.multiplier,
        r.shift,
    )
}

pub fn add(p: &Params, x: &[i8], y: &[i8], out: &mut [i8]) {
    for (i, o) in out.iter_mut().enumerate() {
        let sum =
            operand(at(x, p.a_reads, i), &p.a).wrapping_add(operand(at(y, p.b_reads, i), &p.b));
        *o = to_i8(
            requantize(sum, p.out.multiplier, p.out.shift),
            p.out.zero_point,
            p.act_min,
            p.act_max,
        );
    }
}
