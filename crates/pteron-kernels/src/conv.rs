//! `aten::convolution.out`: 1-d, 2-d and 3-d convolution, plain and transposed, with stride,
//! padding, dilation, groups (depthwise included), output padding and an optional bias.
//!
//! Direct loops over a 3-d form (1-d and 2-d convolutions get leading spatial dims of size 1),
//! indexing every tensor through its strides, so any dim order works (channels-last included).
//! Every real dtype, as ExecuTorch's portable kernel: floats accumulate in f32 (f16, bf16, f32)
//! or f64; integers in i64 with wrapping (truncated back, that equals ExecuTorch's arithmetic
//! in the element type).

use core::ops::Range;

use pteron_core::{
    ArgAccess, ArgView, DtypeSet, Kernel, KernelContext, KernelError, KernelRegistry, TensorInfo,
};

use crate::util::{Acc, AccNum};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::convolution.out",
        Kernel::with_check(convolution_out, check_convolution).dtypes(DtypeSet::REAL),
    );
}

const INPUT: usize = 0;
const WEIGHT: usize = 1;
const BIAS: usize = 2;
const STRIDE: usize = 3;
const PADDING: usize = 4;
const DILATION: usize = 5;
const TRANSPOSED: usize = 6;
const OUTPUT_PADDING: usize = 7;
const GROUPS: usize = 8;
const OUT: usize = 9;

/// Convolution geometry in the 3-d form: every spatial quantity is `[d, h, w]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvGeom {
    pub n: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub groups: usize,
    pub input: [usize; 3],
    pub kernel: [usize; 3],
    pub output: [usize; 3],
    pub stride: [usize; 3],
    pub padding: [usize; 3],
    pub dilation: [usize; 3],
    pub transposed: bool,
}

fn check_convolution(a: &ArgView) -> Result<(), KernelError> {
    let (x, w, o) = (a.tensor(INPUT)?, a.tensor(WEIGHT)?, a.tensor(OUT)?);
    if !DtypeSet::REAL.contains(x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), "convolution"));
    }
    let b = a.opt_tensor(BIAS)?;
    for t in [Some(w), Some(o), b].into_iter().flatten() {
        if t.dtype() != x.dtype() {
            return Err(KernelError::dtype(t.dtype(), "convolution (mixed dtypes)"));
        }
    }
    if x.rank() != o.rank() {
        return Err(KernelError::rank_mismatch(
            "convolution",
            "out",
            x.rank(),
            o.rank(),
        ));
    }
    if !(3..=5).contains(&w.rank()) {
        return Err(KernelError::unsupported(format!(
            "convolution: weight of rank {}",
            w.rank()
        )));
    }
    a.bool(TRANSPOSED)?;
    if a.int(GROUPS)? <= 0 {
        return Err(KernelError::invalid("convolution: groups must be positive"));
    }
    Ok(())
}

/// Largest stride, padding, dilation or output padding accepted (and largest spatial size).
const MAX_PARAM: i64 = 1 << 24;

/// Reads an `int[]` of one entry (broadcast) or `spatial` entries into the 3-d form, filling
/// the leading unused spatial dims with `fill`.
fn spatial_arg<'p>(
    ctx: &impl ArgAccess<'p>,
    i: usize,
    spatial: usize,
    fill: usize,
    what: &str,
) -> Result<[usize; 3], KernelError> {
    let l = ctx.int_list(i)?;
    let mut out = [fill; 3];
    if l.len() != 1 && l.len() != spatial {
        return Err(KernelError::invalid(format!(
            "convolution: {what} has {} entries for {spatial} spatial dims",
            l.len()
        )));
    }
    for k in 0..spatial {
        let v = l.get(if l.len() == 1 { 0 } else { k })?;
        // Bounded so that the geometry arithmetic below cannot overflow.
        if !(0..=MAX_PARAM).contains(&v) {
            return Err(KernelError::invalid(format!(
                "convolution: {what} {v} out of range"
            )));
        }
        out[3 - spatial + k] = v as usize;
    }
    Ok(out)
}

fn geometry(
    ctx: &KernelContext,
    x: &TensorInfo,
    w: &TensorInfo,
) -> Result<(ConvGeom, bool), KernelError> {
    let spatial = w
        .rank()
        .checked_sub(2)
        .filter(|s| (1..=3).contains(s))
        .ok_or_else(|| {
            KernelError::unsupported(format!("convolution: weight of rank {}", w.rank()))
        })?;
    // aten::convolution wants a batched input (unbatched ones are unsqueezed before it).
    let batched = x.rank() == w.rank();
    if !batched {
        return Err(KernelError::shape(format!(
            "convolution: input {:?} does not match weight {:?}",
            x.sizes(),
            w.sizes()
        )));
    }
    let xs = x.sizes();
    let (n, xs) = if batched { (xs[0], &xs[1..]) } else { (1, xs) };
    let c_in = xs[0];
    let mut input = [1usize; 3];
    let mut kernel = [1usize; 3];
    input[3 - spatial..].copy_from_slice(&xs[1..]);
    kernel[3 - spatial..].copy_from_slice(&w.sizes()[2..]);
    if input
        .iter()
        .chain(&kernel)
        .any(|&v| v as u64 > MAX_PARAM as u64)
    {
        return Err(KernelError::unsupported(
            "convolution: spatial size above 2^24",
        ));
    }
    let stride = spatial_arg(ctx, STRIDE, spatial, 1, "stride")?;
    let padding = spatial_arg(ctx, PADDING, spatial, 0, "padding")?;
    let dilation = spatial_arg(ctx, DILATION, spatial, 1, "dilation")?;
    let transposed = ctx.bool(TRANSPOSED)?;
    let groups = usize::try_from(ctx.int(GROUPS)?)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| KernelError::invalid("convolution: groups must be positive"))?;
    if stride.contains(&0) || dilation.contains(&0) {
        return Err(KernelError::invalid(
            "convolution: stride and dilation must be positive",
        ));
    }
    if c_in % groups != 0 {
        return Err(KernelError::shape(format!(
            "convolution: {c_in} input channels not divisible by {groups} groups"
        )));
    }
    let mut output = [1usize; 3];
    let c_out;
    if transposed {
        let out_pad = spatial_arg(ctx, OUTPUT_PADDING, spatial, 0, "output_padding")?;
        if w.size(0) != c_in {
            return Err(KernelError::shape(format!(
                "convolution: transposed weight {:?} for {c_in} input channels",
                w.sizes()
            )));
        }
        c_out = w.size(1) * groups;
        for k in 0..3 {
            if out_pad[k] >= stride[k] && out_pad[k] >= dilation[k] {
                return Err(KernelError::invalid(
                    "convolution: output padding must be smaller than stride or dilation",
                ));
            }
            let full = (input[k] as i64 - 1) * stride[k] as i64
                + (dilation[k] * (kernel[k] - 1)) as i64
                + out_pad[k] as i64
                + 1;
            let o = full - 2 * padding[k] as i64;
            if input[k] == 0 || o <= 0 {
                return Err(KernelError::shape("convolution: output size is too small"));
            }
            output[k] = o as usize;
        }
    } else {
        c_out = w.size(0);
        if w.size(1) * groups != c_in || c_out % groups != 0 {
            return Err(KernelError::shape(format!(
                "convolution: weight {:?} does not fit {c_in} input channels in {groups} groups",
                w.sizes()
            )));
        }
        for k in 0..3 {
            let span = dilation[k] * (kernel[k].max(1) - 1) + 1;
            let padded = input[k] + 2 * padding[k];
            if kernel[k] == 0 || padded < span {
                return Err(KernelError::shape(format!(
                    "convolution: kernel {:?} larger than padded input {:?}",
                    &w.sizes()[2..],
                    &xs[1..]
                )));
            }
            output[k] = (padded - span) / stride[k] + 1;
        }
    }
    if transposed && c_out % groups != 0 {
        return Err(KernelError::shape(
            "convolution: output channels not divisible by groups",
        ));
    }
    Ok((
        ConvGeom {
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
            transposed,
        },
        batched,
    ))
}

/// Element strides of a `[N, C, D, H, W]`-form tensor (1-d and 2-d convolution tensors get
/// unit leading spatial dims with stride 0): `[n, c, d, h, w]`, through its dim order.
fn strides5(t: &TensorInfo) -> [usize; 5] {
    let st = t.strides();
    let r = t.rank();
    let mut out = [0usize; 5];
    out[0] = st[0];
    out[1] = st[1];
    for k in 2..r {
        out[5 - r + k] = st[k];
    }
    out
}

/// The strides of the input, weight and output in the 3-d form (see [`strides5`]).
#[derive(Clone, Copy, Debug)]
pub struct ConvStrides {
    pub x: [usize; 5],
    pub w: [usize; 5],
    pub out: [usize; 5],
}

impl ConvStrides {
    /// Contiguous tensors of geometry `g`.
    pub fn contiguous(g: &ConvGeom) -> ConvStrides {
        let c = |dims: [usize; 5]| {
            let mut st = [0usize; 5];
            let mut s = 1;
            for k in (0..5).rev() {
                st[k] = s;
                s *= dims[k];
            }
            st
        };
        let [id, ih, iw] = g.input;
        let [kd, kh, kw] = g.kernel;
        let [od, oh, ow] = g.output;
        let w_c = if g.transposed {
            [g.c_in, g.c_out / g.groups, kd, kh, kw]
        } else {
            [g.c_out, g.c_in / g.groups, kd, kh, kw]
        };
        ConvStrides {
            x: c([g.n, g.c_in, id, ih, iw]),
            w: c(w_c),
            out: c([g.n, g.c_out, od, oh, ow]),
        }
    }
}

#[inline(always)]
fn at(st: &[usize; 5], i: [usize; 5]) -> usize {
    i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3] + i[4] * st[4]
}

/// The taps `k` in `0..kn` whose input index `o * s + k * dil - pad` lies in `0..n`: a
/// range, since the index grows with `k`.
#[inline]
fn taps(o: usize, s: usize, kn: usize, dil: usize, pad: usize, n: usize) -> Range<usize> {
    let (base, dil) = ((o * s) as i64 - pad as i64, dil as i64);
    // First k with base + k·dil ≥ 0, first k with base + k·dil ≥ n.
    let first = |limit: i64| -> usize {
        let need = limit - base;
        if need <= 0 {
            0
        } else {
            ((need + dil - 1) / dil).min(kn as i64) as usize
        }
    };
    first(0)..first(n as i64)
}

/// Forward convolution in the 3-d form over tensors of any dim order. `x`: [N, C_in, D, H, W],
/// `w`: [C_out, C_in/g, kD, kH, kW]; each output is the sum over its taps (in the accumulation
/// type), then plus the bias, as ExecuTorch's kernel orders it. Taps that fall in the padding
/// are skipped: each output's valid taps are found once, outside the channel loop, and every
/// index is built incrementally (the order of the sum is unchanged).
pub fn conv_forward<T: Acc>(
    g: &ConvGeom,
    st: &ConvStrides,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    let ([s0, s1, s2], [d0, d1, d2], [p0, p1, p2]) = (g.stride, g.dilation, g.padding);
    let cg_in = g.c_in / g.groups;
    let cg_out = g.c_out / g.groups;
    // Input position of tap k for output o (only called for valid taps).
    let pos = |o: usize, s: usize, k: usize, d: usize, p: usize| o * s + k * d - p;
    for n in 0..g.n {
        for oc in 0..g.c_out {
            let grp = oc / cg_out;
            for o_d in 0..od {
                let ra = taps(o_d, s0, kd, d0, p0, id);
                for o_h in 0..oh {
                    let rb = taps(o_h, s1, kh, d1, p1, ih);
                    for o_w in 0..ow {
                        let rc = taps(o_w, s2, kw, d2, p2, iw);
                        let mut acc = T::A::ZERO;
                        for icg in 0..cg_in {
                            let xc = n * st.x[0] + (grp * cg_in + icg) * st.x[1];
                            let wc = oc * st.w[0] + icg * st.w[1];
                            for a in ra.clone() {
                                let xa = xc + pos(o_d, s0, a, d0, p0) * st.x[2];
                                let wa = wc + a * st.w[2];
                                for b in rb.clone() {
                                    let xb = xa + pos(o_h, s1, b, d1, p1) * st.x[3];
                                    let wb = wa + b * st.w[3];
                                    for c in rc.clone() {
                                        let v = x[xb + pos(o_w, s2, c, d2, p2) * st.x[4]].to_acc();
                                        acc = acc.add(v.mul(w[wb + c * st.w[4]].to_acc()));
                                    }
                                }
                            }
                        }
                        if let Some(b) = bias {
                            acc = acc.add(b[oc].to_acc());
                        }
                        out[at(&st.out, [n, oc, o_d, o_h, o_w])] = T::from_acc(acc);
                    }
                }
            }
        }
    }
}

/// Input index `i` with `i * s + k * dil - pad == o`, if one exists in `0..n`.
#[inline]
fn tap_transposed(o: usize, s: usize, k: usize, dil: usize, pad: usize, n: usize) -> Option<usize> {
    let t = o as i64 + pad as i64 - (k * dil) as i64;
    if t < 0 || t % s as i64 != 0 {
        return None;
    }
    let i = (t / s as i64) as usize;
    (i < n).then_some(i)
}

/// Transposed convolution in the 3-d form over tensors of any dim order. `x`: [N, C_in, D, H, W],
/// `w`: [C_in, C_out/g, kD, kH, kW]. Written as a gather over the output (each output element
/// starts at its bias and sums the taps that reach it).
pub fn conv_transposed<T: Acc>(
    g: &ConvGeom,
    st: &ConvStrides,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    out: &mut [T],
) {
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let [od, oh, ow] = g.output;
    let cg_in = g.c_in / g.groups;
    let cg_out = g.c_out / g.groups;
    for n in 0..g.n {
        for oc in 0..g.c_out {
            let grp = oc / cg_out;
            let ocg = oc % cg_out;
            let b0 = bias.map_or(T::A::ZERO, |b| b[oc].to_acc());
            for o_d in 0..od {
                for o_h in 0..oh {
                    for o_w in 0..ow {
                        let mut acc = b0;
                        for icg in 0..cg_in {
                            let ic = grp * cg_in + icg;
                            for a in 0..kd {
                                let Some(i_d) = tap_transposed(
                                    o_d,
                                    g.stride[0],
                                    a,
                                    g.dilation[0],
                                    g.padding[0],
                                    id,
                                ) else {
                                    continue;
                                };
                                for b in 0..kh {
                                    let Some(i_h) = tap_transposed(
                                        o_h,
                                        g.stride[1],
                                        b,
                                        g.dilation[1],
                                        g.padding[1],
                                        ih,
                                    ) else {
                                        continue;
                                    };
                                    for c in 0..kw {
                                        let Some(i_w) = tap_transposed(
                                            o_w,
                                            g.stride[2],
                                            c,
                                            g.dilation[2],
                                            g.padding[2],
                                            iw,
                                        ) else {
                                            continue;
                                        };
                                        let v = x[at(&st.x, [n, ic, i_d, i_h, i_w])].to_acc();
                                        let wv = w[at(&st.w, [ic, ocg, a, b, c])].to_acc();
                                        acc = acc.add(wv.mul(v));
                                    }
                                }
                            }
                        }
                        out[at(&st.out, [n, oc, o_d, o_h, o_w])] = T::from_acc(acc);
                    }
                }
            }
        }
    }
}

use crate::linalg::dispatch_acc as dispatch_real;

fn convolution_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let (x, w) = (*ctx.tensor(INPUT)?, *ctx.tensor(WEIGHT)?);
    let bias = ctx.opt_tensor(BIAS)?.copied();
    let (g, batched) = geometry(ctx, &x, &w)?;
    if let Some(b) = &bias {
        if b.numel() != g.c_out {
            return Err(KernelError::shape(format!(
                "convolution: bias {:?} for {} output channels",
                b.sizes(),
                g.c_out
            )));
        }
    }
    let spatial = w.rank() - 2;
    let mut osz = pteron_core::Dims::new();
    if batched {
        osz.push(g.n)?;
    }
    osz.push(g.c_out)?;
    for &s in &g.output[3 - spatial..] {
        osz.push(s)?;
    }
    ctx.resize(OUT, &osz)?;
    let st = ConvStrides {
        x: strides5(&x),
        w: strides5(&w),
        out: strides5(ctx.tensor(OUT)?),
    };
    let dt = x.dtype();
    fn run<T: Acc>(g: &ConvGeom, st: &ConvStrides, x: &[T], w: &[T], b: Option<&[T]>, o: &mut [T]) {
        if g.transposed {
            conv_transposed(g, st, x, w, b, o)
        } else {
            conv_forward(g, st, x, w, b, o)
        }
    }
    // Without a bias the input is borrowed in its place and never read as one.
    let b_arg = if bias.is_some() { BIAS } else { INPUT };
    let ([xr, wr, br], [mut o]) = ctx.io([INPUT, WEIGHT, b_arg], [OUT])?;
    dispatch_real!(dt, T => {
        let b = if bias.is_some() { Some(br.as_slice::<T>()?) } else { None };
        run::<T>(&g, &st, xr.as_slice()?, wr.as_slice()?, b, o.as_mut_slice()?)
    }, _ => return Err(KernelError::dtype(dt, "convolution")));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    /// Deterministic test data: ((i * 7) % 11 - 5) / 4.
    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7) % 11) as f32 / 4.0 - 1.25).collect()
    }

    struct Case {
        x: &'static [usize],
        w: &'static [usize],
        bias: bool,
        stride: &'static [i64],
        padding: &'static [i64],
        dilation: &'static [i64],
        transposed: bool,
        out_pad: &'static [i64],
        groups: i64,
        out: &'static [usize],
        want: &'static [f32],
    }

    fn run_case(c: &Case) {
        let mut t = TestCall::new();
        let nx: usize = c.x.iter().product();
        let nw: usize = c.w.iter().product();
        t.tensor(c.x, &data(nx));
        let wv: Vec<f32> = data(nw + 3)[3..].to_vec();
        t.tensor(c.w, &wv);
        let cout = c.out[1];
        if c.bias {
            let b: Vec<f32> = (0..cout).map(|i| i as f32 * 0.5 - 0.25).collect();
            t.tensor(&[cout], &b);
        } else {
            t.none();
        }
        t.int_list(c.stride);
        t.int_list(c.padding);
        t.int_list(c.dilation);
        t.bool(c.transposed);
        t.int_list(c.out_pad);
        t.int(c.groups);
        let o = t.out(St::Float, c.out);
        t.ret(o);
        t.check(check_convolution).unwrap();
        t.run(convolution_out).unwrap();
        assert_eq!(t.info(o).sizes(), c.out);
        let got = t.output::<f32>(o);
        assert_eq!(got.len(), c.want.len());
        for (g, w) in got.iter().zip(c.want) {
            assert!((g - w).abs() < 1e-4, "got {got:?}\nwant {:?}", c.want);
        }
    }

    // Reference values from torch.ops.aten.convolution (PyTorch 2.9) on the same data:
    // x = data(numel), w = data(numel + 3)[3..], bias[i] = i * 0.5 - 0.25.
    const CASES: &[Case] = &[
        Case {
            x: &[1, 2, 5, 5],
            w: &[3, 2, 3, 3],
            bias: true,
            stride: &[1, 1],
            padding: &[1, 1],
            dilation: &[1, 1],
            transposed: false,
            out_pad: &[0, 0],
            groups: 1,
            out: &[1, 3, 5, 5],
            want: &[
                -0.9375, -3.375, 1.9375, -1.0, -0.1875, 2.3125, -5.125, 0.9375, -0.5625, -1.5,
                3.25, -3.0, -2.4375, 2.25, -2.125, 1.4375, 2.5625, -5.125, 0.9375, 0.6875, -1.5,
                4.3125, -3.6875, -0.6875, 1.125, -2.25, 1.0, -0.4375, 1.5625, -1.25, 0.0625, 0.625,
                2.75, -2.6875, 2.8125, 0.25, -1.125, -0.375, 0.375, 2.8125, 1.125, 0.5625, 0.625,
                2.75, -2.0, 1.1875, -1.8125, 0.625, -1.0625, -0.75, 2.625, -2.1875, -0.0625,
                2.0625, 0.4375, -0.125, -2.5625, 0.4375, 3.4375, -1.125, 2.75, 0.75, -1.0625,
                0.5625, -0.5, 2.1875, -0.0625, -2.5625, 0.4375, 2.1875, -0.25, 5.125, -2.625,
                0.625, 2.875,
            ],
        },
        Case {
            x: &[2, 2, 6, 5],
            w: &[2, 2, 3, 2],
            bias: false,
            stride: &[2, 1],
            padding: &[0, 1],
            dilation: &[1, 1],
            transposed: false,
            out_pad: &[0, 0],
            groups: 1,
            out: &[2, 2, 2, 6],
            want: &[
                -0.8125, 0.4375, -0.125, -2.0625, 0.8125, -0.5, 0.9375, -2.4375, 0.4375, -0.125,
                -2.0625, 2.4375, 2.25, -3.9375, 2.6875, 1.0625, -1.25, -1.625, 0.75, 3.1875,
                -3.9375, 2.6875, 1.0625, -0.5625, 0.0625, -3.0625, 6.0, -2.125, -0.625, 2.6875,
                -1.625, -0.4375, -3.0625, 6.0, -2.125, -1.25, 1.5, -2.4375, -1.3125, 3.25, -2.5,
                0.625, -0.6875, -0.125, -2.4375, -1.3125, 3.25, -0.375,
            ],
        },
        Case {
            x: &[1, 4, 5, 5],
            w: &[4, 1, 3, 3],
            bias: true,
            stride: &[2, 2],
            padding: &[1, 1],
            dilation: &[1, 1],
            transposed: false,
            out_pad: &[0, 0],
            groups: 4,
            out: &[1, 4, 3, 3],
            want: &[
                -1.8125, 1.0, 0.0625, 0.9375, 0.1875, -1.5625, 0.625, -1.6875, 0.0, 1.125, 1.1875,
                0.0, 2.5625, -2.375, -0.3125, -1.875, -1.75, 1.375, 0.75, -1.1875, -0.625, 1.625,
                2.5625, 3.1875, 0.5625, 1.8125, -1.9375, 1.875, 0.0625, 1.625, 0.1875, 1.9375,
                1.375, 1.0625, 2.125, 2.4375,
            ],
        },
        Case {
            x: &[1, 4, 7, 7],
            w: &[6, 2, 3, 3],
            bias: true,
            stride: &[1, 1],
            padding: &[2, 2],
            dilation: &[2, 2],
            transposed: false,
            out_pad: &[0, 0],
            groups: 2,
            out: &[1, 6, 7, 7],
            want: &[
                2.25, -6.25, 0.5625, 3.8125, -4.625, 2.4375, -0.3125, -0.1875, 2.3125, -4.1875,
                -1.625, 3.6875, -2.375, -0.3125, 3.3125, -6.125, 2.125, 3.375, -5.0, 3.4375,
                -0.8125, 1.1875, 2.75, -7.0, -0.25, 5.8125, -2.9375, 0.375, 1.8125, -2.8125,
                5.1875, -2.5, -1.9375, 3.0625, -2.5625, 0.9375, 1.4375, -6.3125, 0.125, 3.8125,
                -2.375, 1.8125, 0.3125, 0.8125, 3.0, -3.625, -2.0, 2.875, -1.875, -0.625, 3.5625,
                -2.5, 1.5625, 1.5, -3.625, 1.5, -0.875, -2.875, 3.25, -0.25, -1.6875, 2.0, -1.8125,
                3.0625, 2.0, -2.4375, -1.6875, 1.125, 0.8125, -0.5625, -0.9375, 0.0625, 2.8125,
                -1.25, 0.875, 1.5, -1.9375, -0.125, 0.1875, 0.5, -0.125, 0.625, 0.125, 1.5,
                -0.1875, 2.0, 2.875, 1.1875, -3.9375, 1.5625, 1.25, -0.6875, 0.125, -2.0625,
                1.0625, 2.125, -0.625, 1.125, 2.0, -3.125, 2.0, 2.0625, -2.0, 4.0625, -0.125,
                1.1875, 2.9375, -0.3125, 0.4375, 2.5625, -1.875, 1.5, 2.8125, -4.3125, 3.3125,
                0.8125, -3.0625, 5.0625, -1.0, 1.75, 2.875, -3.875, 1.1875, 4.1875, -2.3125, 2.625,
                0.0, -1.625, 5.4375, 1.5625, -0.25, 4.0625, -2.6875, 1.4375, 3.25, -5.8125, 1.5625,
                4.8125, -1.375, 3.4375, 1.75, 0.8125, 4.5625, -3.1875, -0.625, 3.4375, -1.375,
                -0.875, 1.1875, 4.9375, -3.125, 5.3125, 2.5625, -4.75, 3.9375, -0.875, -2.6875,
                5.0625, -0.25, 2.25, 3.1875, -1.4375, 1.875, 3.8125, -4.6875, 4.6875, 2.875,
                -3.0625, 4.5625, -1.0625, 2.0625, 5.9375, -2.5625, 0.5, 3.5, -1.8125, 4.9375,
                1.6875, -3.375, 4.625, 2.25, 1.8125, 4.375, -0.375, -0.6875, 4.75, -1.5, 2.25,
                2.5625, -1.375, 3.5, 0.9375, 0.1875, 4.25, 1.6875, -0.75, 3.5, -0.3125, 2.4375,
                3.4375, -2.4375, 1.0, 4.3125, 0.875, 3.9375, 2.5625, -0.5625, 3.1875, 0.8125,
                0.6875, 3.0, -0.4375, -0.9375, 3.8125, 2.375, 0.125, 4.625, 1.625, 3.0, 1.375, 2.0,
                2.625, 1.375, -0.3125, 3.0, 2.3125, 0.25, 4.3125, 1.5, 0.5625, 2.3125, 0.875,
                2.625, 3.5625, -2.5625, 3.0, 3.8125, -0.375, 3.5, -0.25, 1.25, 4.75, 0.6875, 0.625,
                4.0, -0.375, 3.0, 5.4375, -1.6875, 6.3125, 3.5625, -3.125, 5.375, -0.875, -1.125,
                5.5, 1.125, 2.8125, 3.6875, -0.8125, 4.125, 4.625, -4.875, 8.3125, 4.25, -4.1875,
                5.5625, -1.1875, 0.0, 7.6875, -2.5, 4.3125, 4.8125, -0.4375, 6.5625, 2.25, -4.5,
                7.3125, 3.6875, -0.625, 4.9375, 0.125, 3.6875, 5.9375, -2.125, 5.375, 3.5625,
                0.125, 4.9375, 0.875, -1.6875, 6.0625, 2.3125, 3.25,
            ],
        },
        Case {
            x: &[1, 3, 4, 4],
            w: &[2, 3, 1, 1],
            bias: true,
            stride: &[1],
            padding: &[0],
            dilation: &[1],
            transposed: false,
            out_pad: &[0],
            groups: 1,
            out: &[1, 2, 4, 4],
            want: &[
                -1.8125, 1.5625, -1.25, 1.4375, -0.6875, -1.4375, 1.25, -0.875, -1.625, 1.75,
                -1.0625, -1.8125, 1.5625, -1.25, 1.4375, -0.6875, -0.75, 2.0, -0.75, 2.0, -0.75,
                -0.75, 2.0, -0.75, -0.75, 2.0, -0.75, -0.75, 2.0, -0.75, 2.0, -0.75,
            ],
        },
        Case {
            x: &[2, 2, 9],
            w: &[3, 2, 3],
            bias: true,
            stride: &[2],
            padding: &[1],
            dilation: &[2],
            transposed: false,
            out_pad: &[0],
            groups: 1,
            out: &[2, 3, 4],
            want: &[
                -1.5625, -0.25, 2.375, 0.0625, -0.6875, 2.4375, 0.0625, 0.6875, 2.25, -0.375,
                -0.1875, 1.3125, 0.6875, -0.6875, -2.875, 0.4375, -0.9375, -0.375, -1.375, -0.0625,
                -0.5, 2.0, 2.1875, -0.5625,
            ],
        },
        Case {
            x: &[1, 2, 3, 4, 4],
            w: &[2, 2, 2, 3, 3],
            bias: true,
            stride: &[1, 2, 1],
            padding: &[0, 1, 1],
            dilation: &[1, 1, 1],
            transposed: false,
            out_pad: &[0, 0, 0],
            groups: 1,
            out: &[1, 2, 2, 2, 4],
            want: &[
                -0.6875, -3.75, 1.5, 0.625, 2.125, -5.5, -0.0625, 2.25, -1.625, 0.5, -2.5, 0.8125,
                1.1875, 0.375, 1.0, -1.125, -2.25, 1.8125, 1.375, -1.875, -1.9375, 2.625, 0.5625,
                -2.875, -2.4375, 1.0, 0.5625, -0.25, 0.3125, -1.5, 5.375, -4.4375,
            ],
        },
        Case {
            x: &[1, 2, 3, 3],
            w: &[2, 3, 3, 3],
            bias: true,
            stride: &[2, 2],
            padding: &[1, 1],
            dilation: &[1, 1],
            transposed: true,
            out_pad: &[1, 1],
            groups: 1,
            out: &[1, 3, 6, 6],
            want: &[
                0.125, 1.4375, -0.375, 0.4375, -0.875, 0.875, 0.9375, 0.5625, -0.75, -4.875,
                0.3125, 1.5625, 0.0, -0.875, -0.5, -2.5625, 0.375, -0.125, 0.0, -2.6875, -1.0,
                -1.25, 0.75, 0.25, -0.125, -0.4375, -0.625, -2.125, 0.25, 0.25, -0.4375, -2.625,
                -0.4375, 0.8125, 0.25, 0.25, 1.0, -2.0, -0.0625, 0.0, 0.9375, 1.3125, 0.5, 0.8125,
                -0.25, 1.375, 1.75, -3.875, -0.8125, 0.5625, 0.1875, 1.875, 0.5, -2.0625, -1.75,
                1.8125, 0.25, 1.6875, 0.875, -1.0, -0.5625, 0.375, 0.4375, 1.6875, 0.75, -2.0,
                -0.875, 0.9375, 0.625, -0.1875, 0.75, 0.75, -1.5625, 0.75, 1.625, 0.9375, 1.375,
                -0.3125, -3.375, 1.75, 1.625, 1.4375, 1.8125, 1.0, 1.8125, 1.3125, 1.5625, 0.8125,
                -1.4375, 1.5, -0.0625, 1.5, 2.1875, 0.5, -1.0625, 1.875, 1.75, 1.1875, 1.5, 0.6875,
                -1.5, 1.25, 1.4375, 1.0625, 1.6875, 0.875, -1.5, 1.25,
            ],
        },
        Case {
            x: &[1, 4, 3, 4],
            w: &[4, 1, 2, 2],
            bias: false,
            stride: &[2, 1],
            padding: &[0, 1],
            dilation: &[1, 2],
            transposed: true,
            out_pad: &[1, 0],
            groups: 2,
            out: &[1, 2, 7, 4],
            want: &[
                0.625, -1.4375, 2.1875, -1.375, -0.75, -0.0625, -0.125, -0.8125, -0.9375, 2.0625,
                -1.1875, 0.25, 1.3125, -0.3125, -1.75, 1.0, 0.9375, -1.3125, -1.125, 1.1875, -0.75,
                -1.9375, 2.125, 0.0625, 0.0, 0.0, 0.0, 0.0, -1.5, -1.6875, 1.625, 0.6875, -0.375,
                -1.5, 2.9375, 0.3125, -0.25, 1.9375, -0.25, -1.0625, -1.0, 2.5, -0.625, -1.25,
                1.6875, 0.0625, -0.0625, 0.625, 1.125, -1.0625, -0.0625, 0.625, 0.0, 0.0, 0.0, 0.0,
            ],
        },
        Case {
            x: &[1, 2, 5],
            w: &[2, 2, 3],
            bias: true,
            stride: &[3],
            padding: &[1],
            dilation: &[1],
            transposed: true,
            out_pad: &[2],
            groups: 1,
            out: &[1, 2, 15],
            want: &[
                -0.375, 1.625, 1.125, -0.375, -1.875, -0.875, -0.375, 0.125, 0.5625, 0.3125,
                0.0625, 0.625, -0.375, -1.375, -0.25, 0.625, 0.5625, 1.25, -0.25, 1.0, -0.25, 0.25,
                0.75, 1.0, 0.75, -2.25, 0.875, -0.125, 0.9375, 0.25,
            ],
        },
    ];

    #[test]
    fn reference_cases() {
        for c in CASES {
            run_case(c);
        }
    }

    #[test]
    fn rejects_bad_arguments() {
        let mut t = TestCall::new();
        t.tensor(&[1, 3, 4, 4], &data(48));
        t.tensor(&[2, 3, 5, 5], &data(150));
        t.none();
        t.int_list(&[1, 1]);
        t.int_list(&[0, 0]);
        t.int_list(&[1, 1]);
        t.bool(false);
        t.int_list(&[0, 0]);
        t.int(1);
        let o = t.out(St::Float, &[1, 2, 1, 1]);
        t.ret(o);
        assert!(
            matches!(t.run(convolution_out), Err(KernelError::Shape(_))),
            "kernel larger than input"
        );

        let mut t = TestCall::new();
        t.tensor(
            &[1, 1, 2, 2],
            &[true, false, true, true].map(pteron_core::Bool::from),
        );
        t.tensor(&[1, 1, 1, 1], &[pteron_core::Bool::from(true)]);
        t.none();
        t.int_list(&[1]);
        t.int_list(&[0]);
        t.int_list(&[1]);
        t.bool(false);
        t.int_list(&[0]);
        t.int(1);
        let o = t.out(St::Bool, &[1, 1, 2, 2]);
        t.ret(o);
        assert!(matches!(
            t.check(check_convolution),
            Err(KernelError::UnsupportedDType { .. })
        ));
    }

    #[test]
    fn f16_accumulates_in_f32() {
        use pteron_core::half::f16;
        // 1x1 conv summing 3000 channels of 1.0 * 1.0 with bias -2998: f16 accumulation would
        // saturate long before.
        let c = 3000;
        let mut t = TestCall::new();
        t.tensor(&[1, c, 1, 1], &vec![f16::ONE; c]);
        t.tensor(&[1, c, 1, 1], &vec![f16::ONE; c]);
        t.tensor(&[1], &[f16::from_f32(-2998.0)]);
        t.int_list(&[1, 1]);
        t.int_list(&[0, 0]);
        t.int_list(&[1, 1]);
        t.bool(false);
        t.int_list(&[0, 0]);
        t.int(1);
        let o = t.out(St::Half, &[1, 1, 1, 1]);
        t.ret(o);
        t.run(convolution_out).unwrap();
        assert_eq!(t.output::<f16>(o), vec![f16::from_f32(2.0)]);
    }
}
