//! `cortex_m::quantized_conv2d.out` and `cortex_m::quantized_depthwise_conv2d.out`: int8
//! convolution with per-output-channel requantization, as the backend's reference computes it:
//! the input plus `input_offset` (padding contributes 0, not the offset), times the raw int8
//! weight, summed in `i32` with the bias, then [`requantize`](crate::requant::requantize)d
//! with the channel's multiplier and shift, plus `output_offset`, clamped to the activation
//! range. Weights: `[C_out, kH, kW, C_in/groups]` (OHWI) for the convolution,
//! `[1, kH, kW, C_out]` (IHWO) for the depthwise one; tensors in any dim order.

use pteron_core::{
    register_op, ArgAccess, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType, TensorInfo,
};

use crate::args::{int32, pair, MAX_GEOMETRY};
use crate::dot;
use crate::requant::{requantize, to_i8};

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    let int8 = DtypeSet::of(&[ScalarType::Char]);
    register_op!(
        S,
        r,
        "cortex_m::quantized_conv2d.out",
        Kernel::with_check(conv2d_out, |a| check(a, Kind::Conv).map(|_| ())).dtypes(int8)
    );
    register_op!(
        S,
        r,
        "cortex_m::quantized_depthwise_conv2d.out",
        Kernel::with_check(depthwise_out, |a| check(a, Kind::Depthwise).map(|_| ())).dtypes(int8)
    );
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Conv,
    Depthwise,
}

/// Argument positions; the depthwise schema has `depth_multiplier` after `dilation`.
struct Args {
    input_offset: usize,
    output_offset: usize,
    mults: usize,
    shifts: usize,
    act_min: usize,
    out: usize,
}

impl Kind {
    fn args(self) -> Args {
        let d = usize::from(self == Kind::Depthwise);
        Args {
            input_offset: 6 + d,
            output_offset: 7 + d,
            mults: 8 + d,
            shifts: 9 + d,
            act_min: 10 + d,
            out: 13 + d,
        }
    }
}

/// The name in errors.
const OP: &str = "cortex_m conv";
const INPUT: usize = 0;
const WEIGHT: usize = 1;
const BIAS: usize = 2;

/// Convolution geometry over `[N, C, H, W]` tensors, with the element strides of each.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    pub n: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub groups: usize,
    pub input: [usize; 2],
    pub kernel: [usize; 2],
    pub output: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    /// Input strides for `[n, c, h, w]`.
    pub x_strides: [usize; 4],
    /// Weight strides for `[out channel, in channel within the group, kh, kw]`.
    pub w_strides: [usize; 4],
    /// Output strides for `[n, c, h, w]`.
    pub out_strides: [usize; 4],
}

/// Requantization and activation parameters.
#[derive(Clone, Copy, Debug)]
pub struct Requant<'a> {
    pub input_offset: i32,
    pub output_offset: i32,
    pub multipliers: &'a [i32],
    pub shifts: &'a [i32],
    pub act_min: i32,
    pub act_max: i32,
}

fn check<'p>(a: &impl ArgAccess<'p>, kind: Kind) -> Result<Geometry, KernelError> {
    let args = kind.args();
    let (x, w, o) = (a.tensor(INPUT)?, a.tensor(WEIGHT)?, a.tensor(args.out)?);
    for t in [x, w, o] {
        if t.dtype() != ScalarType::Char {
            return Err(KernelError::dtype(t.dtype(), "cortex_m conv (int8 only)"));
        }
        if t.rank() != 4 {
            return Err(KernelError::unsupported(
                "cortex_m conv: tensors must be 4-d",
            ));
        }
    }
    let (m, s) = (a.tensor(args.mults)?, a.tensor(args.shifts)?);
    for t in [m, s] {
        if t.dtype() != ScalarType::Int {
            return Err(KernelError::dtype(
                t.dtype(),
                "cortex_m conv requantization (int32)",
            ));
        }
    }
    let [n, c_in, h, wd] = [x.size(0), x.size(1), x.size(2), x.size(3)];
    let (c_out, kernel, groups, w_strides) = match kind {
        Kind::Conv => {
            let ws = w.strides();
            let cg_in = w.size(3);
            if cg_in == 0 || c_in % cg_in != 0 {
                return Err(KernelError::shape(
                    "cortex_m conv: weight channels do not divide the input's",
                ));
            }
            (
                w.size(0),
                [w.size(1), w.size(2)],
                c_in / cg_in,
                [ws[0], ws[3], ws[1], ws[2]],
            )
        }
        Kind::Depthwise => {
            let ws = w.strides();
            if w.size(0) != 1 {
                return Err(KernelError::shape(
                    "cortex_m depthwise conv: weight must be [1, kH, kW, C_out]",
                ));
            }
            let dm = a.int(6)?;
            let c_out = w.size(3);
            if c_in == 0 || dm <= 0 || (c_in as u64).checked_mul(dm as u64) != Some(c_out as u64) {
                return Err(KernelError::shape(
                    "cortex_m depthwise conv: C_out != C_in × depth_multiplier",
                ));
            }
            (
                c_out,
                [w.size(1), w.size(2)],
                c_in,
                [ws[3], 0, ws[1], ws[2]],
            )
        }
    };
    if groups == 0 || c_out % groups != 0 {
        return Err(KernelError::shape(
            "cortex_m conv: output channels do not divide into groups",
        ));
    }
    let stride = pair(a, 3, OP, "stride", 1)?;
    let padding = pair(a, 4, OP, "padding", 0)?;
    let dilation = pair(a, 5, OP, "dilation", 1)?;
    let input = [h, wd];
    let mut output = [0usize; 2];
    for k in 0..2 {
        if input[k] as i64 > MAX_GEOMETRY || kernel[k] == 0 || kernel[k] as i64 > MAX_GEOMETRY {
            return Err(KernelError::unsupported(
                "cortex_m conv: spatial size out of range",
            ));
        }
        // Checked: each factor is at most 2^20, and `usize` has 32 bits on Cortex-M.
        let span = dilation[k]
            .checked_mul(kernel[k] - 1)
            .and_then(|s| s.checked_add(1));
        let padded = input[k] + 2 * padding[k];
        let Some(span) = span.filter(|&s| s <= padded) else {
            return Err(KernelError::shape(
                "cortex_m conv: kernel larger than the padded input",
            ));
        };
        output[k] = (padded - span) / stride[k] + 1;
    }
    if o.sizes() != [n, c_out, output[0], output[1]] {
        return Err(KernelError::shape(alloc::format!(
            "cortex_m conv: output {:?}, expected {:?}",
            o.sizes(),
            [n, c_out, output[0], output[1]]
        )));
    }
    if m.numel() < c_out || s.numel() < c_out {
        return Err(KernelError::shape(
            "cortex_m conv: one multiplier and shift per output channel",
        ));
    }
    if let Some(b) = a.opt_tensor(BIAS)? {
        if b.dtype() != ScalarType::Int || b.numel() != c_out {
            return Err(KernelError::shape(
                "cortex_m conv: bias must be int32 [C_out]",
            ));
        }
    }
    for i in [
        args.input_offset,
        args.output_offset,
        args.act_min,
        args.act_min + 1,
    ] {
        int32(a, i, OP)?;
    }
    let strides4 = |t: &TensorInfo| {
        let s = t.strides();
        [s[0], s[1], s[2], s[3]]
    };
    Ok(Geometry {
        n,
        c_in,
        c_out,
        groups,
        input,
        kernel,
        output,
        stride,
        padding,
        dilation,
        x_strides: strides4(x),
        w_strides,
        out_strides: strides4(o),
    })
}

fn conv2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    run(ctx, Kind::Conv)
}

fn depthwise_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    run(ctx, Kind::Depthwise)
}

fn run(ctx: &mut KernelContext, kind: Kind) -> Result<(), KernelError> {
    let g = check(ctx, kind)?;
    let args = kind.args();
    let (input_offset, output_offset) = (
        int32(ctx, args.input_offset, OP)?,
        int32(ctx, args.output_offset, OP)?,
    );
    let (act_min, act_max) = (
        int32(ctx, args.act_min, OP)?,
        int32(ctx, args.act_min + 1, OP)?,
    );
    let has_bias = ctx.opt_tensor(BIAS)?.is_some();
    let rq = |multipliers, shifts| Requant {
        input_offset,
        output_offset,
        multipliers,
        shifts,
        act_min,
        act_max,
    };
    if has_bias {
        let ([x, w, b, m, s], [mut o]) =
            ctx.io([INPUT, WEIGHT, BIAS, args.mults, args.shifts], [args.out])?;
        conv(
            &g,
            x.as_slice()?,
            w.as_slice()?,
            Some(b.as_slice()?),
            &rq(m.as_slice()?, s.as_slice()?),
            o.as_mut_slice()?,
        );
    } else {
        let ([x, w, m, s], [mut o]) =
            ctx.io([INPUT, WEIGHT, args.mults, args.shifts], [args.out])?;
        conv(
            &g,
            x.as_slice()?,
            w.as_slice()?,
            None,
            &rq(m.as_slice()?, s.as_slice()?),
            o.as_mut_slice()?,
        );
    }
    Ok(())
}

/// The convolution itself (any groups, so the depthwise one too: one input channel per group,
/// `C_out / C_in` outputs per group). Out-of-range taps are skipped (padding adds 0).
pub fn conv(g: &Geometry, x: &[i8], w: &[i8], bias: Option<&[i32]>, rq: &Requant, out: &mut [i8]) {
    let cg_in = g.c_in / g.groups;
    let cg_out = g.c_out / g.groups;
    let [xs_n, xs_c, xs_h, xs_w] = g.x_strides;
    let [ws_o, ws_i, ws_h, ws_w] = g.w_strides;
    let [os_n, os_c, os_h, os_w] = g.out_strides;
    for n in 0..g.n {
        for oc in 0..g.c_out {
            let group = oc / cg_out;
            let ic0 = group * cg_in;
            let b = bias.map_or(0, |b| b[oc]);
            let (mult, shift) = (rq.multipliers[oc], rq.shifts[oc]);
            for oy in 0..g.output[0] {
                for ox in 0..g.output[1] {
                    let mut acc = b;
                    for ky in 0..g.kernel[0] {
                        let Some(iy) =
                            tap(oy, g.stride[0], ky, g.dilation[0], g.padding[0], g.input[0])
                        else {
                            continue;
                        };
                        for kx in 0..g.kernel[1] {
                            let Some(ix) =
                                tap(ox, g.stride[1], kx, g.dilation[1], g.padding[1], g.input[1])
                            else {
                                continue;
                            };
                            let xb = n * xs_n + iy * xs_h + ix * xs_w + ic0 * xs_c;
                            let wb = oc * ws_o + ky * ws_h + kx * ws_w;
                            if xs_c == 1 && ws_i == 1 {
                                // Channels-last input, OHWI weight: both channel runs are
                                // contiguous (the backend's layout).
                                acc = dot(
                                    &x[xb..xb + cg_in],
                                    &w[wb..wb + cg_in],
                                    acc,
                                    rq.input_offset,
                                    0,
                                );
                            } else {
                                for ic in 0..cg_in {
                                    let xv =
                                        i32::from(x[xb + ic * xs_c]).wrapping_add(rq.input_offset);
                                    let wv = i32::from(w[wb + ic * ws_i]);
                                    acc = acc.wrapping_add(xv.wrapping_mul(wv));
                                }
                            }
                        }
                    }
                    out[n * os_n + oc * os_c + oy * os_h + ox * os_w] = to_i8(
                        requantize(acc, mult, shift),
                        rq.output_offset,
                        rq.act_min,
                        rq.act_max,
                    );
                }
            }
        }
    }
}

/// Input index `o · s + k · dil − pad` if it lies in `0..n`.
#[inline]
fn tap(o: usize, s: usize, k: usize, dil: usize, pad: usize, n: usize) -> Option<usize> {
    (o * s + k * dil).checked_sub(pad).filter(|&i| i < n)
}
