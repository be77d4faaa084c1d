//! `cortex_m::quantized_avg_pool2d.out`: int8 average pooling as the backend's reference
//! computes it, in float32: each input dequantized with the scale `multiplier · 2^shift / 2^31`
//! (formed in double, used as float32), the window's valid elements summed in row order and
//! divided by their count (padding not counted), then quantized back with the same scale and
//! zero point (`round_half_even(avg / scale) + zp`, clamped to int8).
//!
//! `cortex_m::quantized_max_pool2d.out`: the largest int8 value of each window's positions
//! inside the input (padding never wins), clamped to the activation range; input and output
//! share their zero point. Dilation other than 1 and ceil mode are refused, as the
//! reference refuses them.

use pteron_core::{
    register_op, ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry,
    OpSelection, ScalarType,
};

use crate::args::{int32, pair, MAX_GEOMETRY};
use crate::quant::round_half_even;

const OP: &str = "cortex_m avg_pool2d";

const INPUT: usize = 0;
const KERNEL: usize = 1;
const STRIDE: usize = 2;
const PADDING: usize = 3;
const CEIL: usize = 4;
const ZERO_POINT: usize = 5;
const MULTIPLIER: usize = 6;
const SHIFT: usize = 7;
const OUT: usize = 9;

pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    register_op!(
        S,
        r,
        "cortex_m::quantized_avg_pool2d.out",
        Kernel::with_check(avg_pool2d_out, check_avg_pool)
            .dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
    register_op!(
        S,
        r,
        "cortex_m::quantized_max_pool2d.out",
        Kernel::with_check(max_pool2d_out, check_max_pool)
            .dtypes(DtypeSet::of(&[ScalarType::Char]))
    );
}

/// Pooling geometry over `[N, C, H, W]` tensors with their element strides.
#[derive(Clone, Copy, Debug)]
pub struct Pool {
    pub n: usize,
    pub c: usize,
    pub input: [usize; 2],
    pub output: [usize; 2],
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub x_strides: [usize; 4],
    pub out_strides: [usize; 4],
    pub zero_point: i32,
    /// The float32 scale of input and output.
    pub scale: f32,
}

/// PyTorch's pooling output size (`pooling_output_shape`, dilation 1).
fn out_size(input: usize, k: usize, pad: usize, stride: usize, ceil: bool) -> Option<usize> {
    let span = (input + 2 * pad).checked_sub(k)?;
    let mut o = (span + if ceil { stride - 1 } else { 0 }) / stride + 1;
    // The last window must start inside the input or its left padding.
    if ceil && (o - 1) * stride >= input + pad {
        o -= 1;
    }
    Some(o)
}

/// The window geometry both pooling operators share (their first four arguments are alike):
/// int8 4-d input and output (argument `out`), kernel, stride, padding at most half the kernel.
/// `zero_point` and `scale` are left for the caller.
fn window_geometry<'p>(
    a: &impl ArgAccess<'p>,
    out: usize,
    ceil: bool,
    op: &'static str,
) -> Result<Pool, KernelError> {
    let (x, o) = (a.tensor(INPUT)?, a.tensor(out)?);
    for t in [x, o] {
        if t.dtype() != ScalarType::Char || t.rank() != 4 {
            return Err(KernelError::unsupported(alloc::format!(
                "{op}: 4-d int8 tensors only"
            )));
        }
    }
    let kernel = pair(a, KERNEL, op, "kernel", 1)?;
    let stride = pair(a, STRIDE, op, "stride", 1)?;
    let padding = pair(a, PADDING, op, "padding", 0)?;
    let input = [x.size(2), x.size(3)];
    let mut output = [0usize; 2];
    for k in 0..2 {
        if input[k] as i64 > MAX_GEOMETRY || 2 * padding[k] > kernel[k] {
            return Err(KernelError::invalid(alloc::format!(
                "{op}: padding above half the kernel"
            )));
        }
        output[k] =
            out_size(input[k], kernel[k], padding[k], stride[k], ceil).ok_or_else(|| {
                KernelError::shape(alloc::format!("{op}: kernel larger than the padded input"))
            })?;
    }
    let (n, c) = (x.size(0), x.size(1));
    if o.sizes() != [n, c, output[0], output[1]] {
        return Err(KernelError::shape(alloc::format!("{op}: output shape")));
    }
    let s4 = |s: &[usize]| [s[0], s[1], s[2], s[3]];
    Ok(Pool {
        n,
        c,
        input,
        output,
        kernel,
        stride,
        padding,
        x_strides: s4(x.strides()),
        out_strides: s4(o.strides()),
        zero_point: 0,
        scale: 1.0,
    })
}

fn geometry<'p>(a: &impl ArgAccess<'p>) -> Result<Pool, KernelError> {
    let mut pool = window_geometry(a, OUT, a.bool(CEIL)?, OP)?;
    let zero_point = i32::try_from(a.int(ZERO_POINT)?)
        .map_err(|_| KernelError::invalid("cortex_m avg_pool2d: zero point"))?;
    let (m, shift) = (a.int(MULTIPLIER)?, a.int(SHIFT)?);
    if !(1..=i64::from(i32::MAX)).contains(&m) || !(-31..=31).contains(&shift) {
        return Err(KernelError::invalid(
            "cortex_m avg_pool2d: multiplier or shift out of range",
        ));
    }
    pool.zero_point = zero_point;
    // As the reference forms it: multiplier · 2^shift / 2^31 in double.
    pool.scale = (m as f64 * pow2(shift) / 2_147_483_648.0) as f32;
    Ok(pool)
}

/// 2^e for |e| ≤ 31, exactly.
fn pow2(e: i64) -> f64 {
    if e >= 0 {
        (1u64 << e) as f64
    } else {
        1.0 / (1u64 << -e) as f64
    }
}

fn check_avg_pool(a: &ArgView) -> Result<(), KernelError> {
    geometry(a).map(|_| ())
}

fn avg_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = geometry(ctx)?;
    let ([x], [mut o]) = ctx.io([INPUT], [OUT])?;
    avg_pool2d(&p, x.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

/// One output's window: the input positions it covers (padding left out).
struct Window<'a> {
    x: &'a [i8],
    base: usize,
    rows: core::ops::Range<usize>,
    cols: core::ops::Range<usize>,
    strides: [usize; 2],
}

impl Window<'_> {
    /// The window's input values, in row order.
    fn values(&self) -> impl Iterator<Item = i8> + '_ {
        let [sh, sw] = self.strides;
        self.rows.clone().flat_map(move |iy| {
            self.cols
                .clone()
                .map(move |ix| self.x[self.base + iy * sh + ix * sw])
        })
    }

    fn len(&self) -> usize {
        self.rows.len() * self.cols.len()
    }
}

/// Stores `reduce(window)` for every output.
fn each_window(p: &Pool, x: &[i8], out: &mut [i8], mut reduce: impl FnMut(&Window) -> i8) {
    let [xs_n, xs_c, xs_h, xs_w] = p.x_strides;
    let [os_n, os_c, os_h, os_w] = p.out_strides;
    let window = |o: usize, k: usize| -> core::ops::Range<usize> {
        let start = (o * p.stride[k]) as i64 - p.padding[k] as i64;
        let end = (start + p.kernel[k] as i64).min(p.input[k] as i64);
        start.max(0) as usize..end.max(0) as usize
    };
    for n in 0..p.n {
        for c in 0..p.c {
            for oy in 0..p.output[0] {
                for ox in 0..p.output[1] {
                    let w = Window {
                        x,
                        base: n * xs_n + c * xs_c,
                        rows: window(oy, 0),
                        cols: window(ox, 1),
                        strides: [xs_h, xs_w],
                    };
                    out[n * os_n + c * os_c + oy * os_h + ox * os_w] = reduce(&w);
                }
            }
        }
    }
}

pub fn avg_pool2d(p: &Pool, x: &[i8], out: &mut [i8]) {
    let zp = p.zero_point as f32;
    each_window(p, x, out, |w| {
        let sum = w
            .values()
            .fold(0f32, |s, q| s + (f32::from(q) - zp) * p.scale);
        let avg = sum / w.len() as f32;
        let q = round_half_even(avg / p.scale) + zp;
        // Empty windows (all padding) give NaN; it becomes the lowest value.
        let q = if q.is_nan() {
            -128.0
        } else {
            q.clamp(-128.0, 127.0)
        };
        q as i8
    });
}

// ---- quantized_max_pool2d: [input, kernel, stride, padding, dilation, ceil_mode,
//      input_zp, output_zp, act_min, act_max, out] ----

const MAX_OP: &str = "cortex_m max_pool2d";

/// Max pooling geometry and the activation range.
#[derive(Clone, Copy, Debug)]
pub struct MaxPool {
    pub pool: Pool,
    pub act_min: i32,
    pub act_max: i32,
}

fn max_geometry<'p>(a: &impl ArgAccess<'p>) -> Result<MaxPool, KernelError> {
    if pair(a, 4, MAX_OP, "dilation", 1)? != [1, 1] || a.bool(5)? {
        return Err(KernelError::unsupported(
            "cortex_m max_pool2d: dilation other than 1, or ceil mode",
        ));
    }
    let zero_point = int32(a, 6, MAX_OP)?;
    if zero_point != int32(a, 7, MAX_OP)? {
        return Err(KernelError::unsupported(
            "cortex_m max_pool2d: input and output zero points differ",
        ));
    }
    let mut pool = window_geometry(a, 10, false, MAX_OP)?;
    pool.zero_point = zero_point;
    Ok(MaxPool {
        pool,
        act_min: int32(a, 8, MAX_OP)?,
        act_max: int32(a, 9, MAX_OP)?,
    })
}

fn check_max_pool(a: &ArgView) -> Result<(), KernelError> {
    max_geometry(a).map(|_| ())
}

fn max_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let p = max_geometry(ctx)?;
    let ([x], [mut o]) = ctx.io([INPUT], [10])?;
    max_pool2d(&p, x.as_slice()?, o.as_mut_slice()?);
    Ok(())
}

pub fn max_pool2d(m: &MaxPool, x: &[i8], out: &mut [i8]) {
    // Padding is at most half the kernel, so every window holds an input.
    each_window(&m.pool, x, out, |w| {
        let best = w.values().map(i32::from).fold(i32::MIN, i32::max);
        best.max(m.act_min).min(m.act_max).clamp(-128, 127) as i8
    });
}
