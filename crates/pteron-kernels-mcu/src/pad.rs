//! `cortex_m::pad.out`: constant padding of an int8 tensor. `pre_pad` and `post_pad` have four
//! entries in the tensor's **memory** order (N, H, W, C for a channels-last tensor; the last
//! `rank` entries apply to a tensor of rank below 4), so the kernel pads the bytes as they lie.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

const INPUT: usize = 0;
const PRE: usize = 1;
const POST: usize = 2;
const VALUE: usize = 3;
const OUT: usize = 4;

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    register_op!(
        S,
        r,
        "cortex_m::pad.out",
        Kernel::with_check(pad_out, check_pad).dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
}

/// Input and output extents in memory order (padded to 4 with leading 1s), and the pre-pads.
#[derive(Clone, Copy, Debug)]
pub struct Padding {
    pub input: [usize; 4],
    pub output: [usize; 4],
    pub pre: [usize; 4],
    pub value: i8,
}

fn geometry<'p>(a: &impl ArgAccess<'p>) -> Result<Padding, KernelError> {
    let (x, o) = (a.tensor(INPUT)?, a.tensor(OUT)?);
    if x.dtype() != ScalarType::Char || o.dtype() != ScalarType::Char {
        return Err(KernelError::unsupported("cortex_m pad: int8 only"));
    }
    let rank = x.rank();
    if rank == 0 || rank > 4 || o.rank() != rank || x.dim_order() != o.dim_order() {
        return Err(KernelError::unsupported(
            "cortex_m pad: rank 1 to 4, one dim order",
        ));
    }
    let (pre_l, post_l) = (a.int_list(PRE)?, a.int_list(POST)?);
    if pre_l.len() != 4 || post_l.len() != 4 {
        return Err(KernelError::invalid(
            "cortex_m pad: pre_pad and post_pad take 4 entries",
        ));
    }
    let value = i8::try_from(a.int(VALUE)?)
        .map_err(|_| KernelError::invalid("cortex_m pad: value outside int8"))?;
    let (mut input, mut output, mut pre) = ([1usize; 4], [1usize; 4], [0usize; 4]);
    let order = x.dim_order();
    for k in 0..rank {
        let d = order[k] as usize;
        let slot = 4 - rank + k;
        let (p0, p1) = (pre_l.get(slot)?, post_l.get(slot)?);
        if !(0..=1 << 20).contains(&p0) || !(0..=1 << 20).contains(&p1) {
            return Err(KernelError::invalid("cortex_m pad: padding out of range"));
        }
        input[slot] = x.size(d);
        pre[slot] = p0 as usize;
        output[slot] = x.size(d) + p0 as usize + p1 as usize;
        if o.size(d) != output[slot] {
            return Err(KernelError::shape("cortex_m pad: output shape"));
        }
    }
    Ok(Padding {
        input,
        output,
        pre,
        value,
    })
}

fn check_pad(a: &ArgView) -> Result<(), KernelError> {
    geometry(a).map(|_| ())
}

fn pad_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let g = geometry(ctx)?;
    let ([x], [mut o]) = ctx.io([INPUT], [OUT])?;
    pad(&g, x.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn pad(g: &Padding, x: &[i8], out: &mut [i8]) {
    out.fill(g.value);
    let [_, i1, i2, i3] = g.input;
    let [_, o1, o2, o3] = g.output;
    for a in 0..g.input[0] {
        for b in 0..i1 {
            for c in 0..i2 {
                let src = ((a * i1 + b) * i2 + c) * i3;
                let dst =
                    (((a + g.pre[0]) * o1 + b + g.pre[1]) * o2 + c + g.pre[2]) * o3 + g.pre[3];
                out[dst..dst + i3].copy_from_slice(&x[src..src + i3]);
            }
        }
    }
}
