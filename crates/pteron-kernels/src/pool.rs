//! 2-d pooling and resampling: `max_pool2d_with_indices`, `avg_pool2d`, adaptive average
//! pooling, nearest and bilinear upsampling. Inputs are `[N, C, H, W]` or `[C, H, W]` (upsampling:
//! 4-d), in any dim order (read and written through their strides: channels-last works), in the
//! dtypes ExecuTorch's portable kernels take:
//!
//! - max_pool2d_with_indices, upsample_nearest2d, upsample_bilinear2d: every real dtype;
//! - avg_pool2d, _adaptive_avg_pool2d: floats and int64.
//!
//! Arithmetic follows ExecuTorch's portable kernels: max pooling compares in the element type
//! and keeps the first maximum (`v > best`: a NaN only wins as the first element of a window);
//! average pooling sums in the element type (f16/bf16 round after every addition, int64
//! divides with truncation); adaptive pooling sums in f32; bilinear interpolation computes in
//! f32 (f64 for f64) and converts back (truncating for integers).

use pteron_core::{
    dispatch_dtype, ArgAccess, ArgView, Dims, DtypeSet, Element, Kernel, KernelContext,
    KernelError, KernelRegistry, ScalarType, TensorInfo,
};

/// Dtypes of max pooling and upsampling (ExecuTorch: REALHBF16).
const REAL: DtypeSet = DtypeSet::REAL;
/// Dtypes of average pooling (ExecuTorch: FLOATHBF16 and Long).
const AVG: DtypeSet = DtypeSet::FLOAT.union(DtypeSet::of(&[ScalarType::Long]));

pub fn register(r: &mut KernelRegistry) {
    r.register(
        "aten::max_pool2d_with_indices.out",
        Kernel::with_check(max_pool2d_with_indices_out, check_max_pool).dtypes(REAL),
    );
    r.register(
        "aten::avg_pool2d.out",
        Kernel::with_check(avg_pool2d_out, check_avg_pool).dtypes(AVG),
    );
    r.register(
        "aten::_adaptive_avg_pool2d.out",
        Kernel::with_check(adaptive_avg_pool2d_out, check_adaptive).dtypes(AVG),
    );
    r.register(
        "aten::adaptive_avg_pool2d.out",
        Kernel::with_check(adaptive_avg_pool2d_out, check_adaptive).dtypes(AVG),
    );
    r.register(
        "aten::upsample_nearest2d.vec_out",
        Kernel::with_check(upsample_nearest2d_vec_out, check_nearest).dtypes(REAL),
    );
    r.register(
        "aten::upsample_bilinear2d.vec_out",
        Kernel::with_check(upsample_bilinear2d_vec_out, check_bilinear).dtypes(REAL),
    );
}

use crate::linalg::dispatch_acc as dispatch_real;
use core::cmp::Ordering;

fn check_io(
    a: &ArgView,
    op: &'static str,
    input: usize,
    out: usize,
    dtypes: DtypeSet,
    ranks: core::ops::RangeInclusive<usize>,
) -> Result<(), KernelError> {
    let (x, o) = (a.tensor(input)?, a.tensor(out)?);
    if !dtypes.contains(x.dtype()) {
        return Err(KernelError::dtype(x.dtype(), op));
    }
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    if !ranks.contains(&x.rank()) || o.rank() != x.rank() {
        return Err(KernelError::unsupported(format!(
            "{op}: input of rank {} (expects {ranks:?}, output of the same rank)",
            x.rank()
        )));
    }
    Ok(())
}
fn check_max_pool(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "max_pool2d_with_indices", 0, 6, REAL, 3..=4)?;
    let idx = a.tensor(7)?;
    if idx.dtype() != ScalarType::Long {
        return Err(KernelError::dtype(idx.dtype(), "max_pool2d indices"));
    }
    if idx.dim_order() != a.tensor(6)?.dim_order() {
        return Err(KernelError::unsupported(format!(
            "max_pool2d_with_indices: indices dim order {:?} differs from the output's {:?}",
            idx.dim_order(),
            a.tensor(6)?.dim_order()
        )));
    }
    a.bool(5)?;
    Ok(())
}
fn check_avg_pool(a: &ArgView) -> Result<(), KernelError> {
    a.bool(4)?;
    a.bool(5)?;
    a.opt_int(6)?;
    check_io(a, "avg_pool2d", 0, 7, AVG, 3..=4)
}
fn check_adaptive(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "adaptive_avg_pool2d", 0, 2, AVG, 3..=4)
}
fn check_nearest(a: &ArgView) -> Result<(), KernelError> {
    check_io(a, "upsample_nearest2d", 0, 3, REAL, 4..=4)
}
fn check_bilinear(a: &ArgView) -> Result<(), KernelError> {
    a.bool(2)?;
    check_io(a, "upsample_bilinear2d", 0, 4, REAL, 4..=4)
}

/// A `[N, C, H, W]` or `[C, H, W]` tensor seen as 4-d: sizes and element strides (through its
/// dim order; N = 1 with stride 0 for a 3-d tensor).
#[derive(Clone, Copy, Debug)]
struct Nchw {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    sn: usize,
    sc: usize,
    sh: usize,
    sw: usize,
}

impl Nchw {
    fn of(t: &TensorInfo) -> Result<Nchw, KernelError> {
        let (s, st) = (t.sizes(), t.strides());
        match t.rank() {
            4 => Ok(Nchw {
                n: s[0],
                c: s[1],
                h: s[2],
                w: s[3],
                sn: st[0],
                sc: st[1],
                sh: st[2],
                sw: st[3],
            }),
            3 => Ok(Nchw {
                n: 1,
                c: s[0],
                h: s[1],
                w: s[2],
                sn: 0,
                sc: st[0],
                sh: st[1],
                sw: st[2],
            }),
            r => Err(KernelError::shape(format!(
                "pool2d: input {:?} must have 3 or 4 dims (has {r})",
                s
            ))),
        }
    }
    #[inline(always)]
    fn at(&self, n: usize, c: usize, h: usize, w: usize) -> usize {
        n * self.sn + c * self.sc + h * self.sh + w * self.sw
    }
}

/// Output sizes: the input's leading dims and `(oh, ow)`.
fn out_sizes(x: &TensorInfo, oh: usize, ow: usize) -> Dims {
    let mut s = x.dims();
    let r = s.len();
    s.as_mut_slice()[r - 2] = oh;
    s.as_mut_slice()[r - 1] = ow;
    s
}

/// An `int[2]` argument given as 1 or 2 entries (or empty: `default`).
fn pair(
    ctx: &KernelContext,
    i: usize,
    default: Option<[usize; 2]>,
    what: &str,
) -> Result<[usize; 2], KernelError> {
    let l = ctx.int_list(i)?;
    let get = |k: usize| -> Result<usize, KernelError> {
        let v = l.get(k)?;
        usize::try_from(v).map_err(|_| KernelError::invalid(format!("pool2d: negative {what} {v}")))
    };
    match (l.len(), default) {
        (0, Some(d)) => Ok(d),
        (1, _) => Ok([get(0)?, get(0)?]),
        (2, _) => Ok([get(0)?, get(1)?]),
        (n, _) => Err(KernelError::invalid(format!(
            "pool2d: {what} must have 1 or 2 entries, got {n}"
        ))),
    }
}

/// PyTorch's `pooling_output_shape`.
pub fn pooling_output_size(
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    ceil: bool,
) -> Result<usize, KernelError> {
    // Checked: kernel sizes, paddings, strides and dilations come from the program (found by
    // fuzzing: an overflow panic).
    let size = || -> Option<i64> {
        let (i, k, p, s, d) = (
            i64::try_from(input).ok()?,
            i64::try_from(k).ok()?,
            i64::try_from(pad).ok()?,
            i64::try_from(stride).ok()?,
            i64::try_from(dil).ok()?,
        );
        if s <= 0 {
            return None;
        }
        let num = i
            .checked_add(p.checked_mul(2)?)?
            .checked_sub(d.checked_mul(k.checked_sub(1)?)?)?
            .checked_sub(1)?
            .checked_add(if ceil { s - 1 } else { 0 })?;
        let mut o = num.div_euclid(s).checked_add(1)?;
        if ceil && (o - 1).checked_mul(s)? >= i.checked_add(p)? {
            o -= 1;
        }
        Some(o)
    };
    let o = size().ok_or_else(|| {
        KernelError::invalid(format!(
            "pool2d: output size out of range (input {input}, kernel {k}, padding {pad}, stride {stride}, dilation {dil})"
        ))
    })?;
    if o <= 0 {
        return Err(KernelError::shape(format!(
            "pool2d: output size {o} is too small (input {input}, kernel {k}, padding {pad}, stride {stride}, dilation {dil})"
        )));
    }
    Ok(o as usize)
}

struct PoolGeom {
    oh: usize,
    ow: usize,
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
}

fn pool_geom(
    ctx: &KernelContext,
    x: &TensorInfo,
    dil: Option<usize>,
    ceil: bool,
) -> Result<PoolGeom, KernelError> {
    let g = Nchw::of(x)?;
    let k = pair(ctx, 1, None, "kernel_size")?;
    let s = pair(ctx, 2, Some(k), "stride")?;
    let p = pair(ctx, 3, None, "padding")?;
    let d = match dil {
        Some(i) => pair(ctx, i, None, "dilation")?,
        None => [1, 1],
    };
    for a in 0..2 {
        if k[a] == 0 || s[a] == 0 || d[a] == 0 {
            return Err(KernelError::invalid(
                "pool2d: kernel size, stride and dilation must be positive",
            ));
        }
        // Max pooling bounds padding by the effective kernel, average pooling by the kernel.
        let limit = if dil.is_some() {
            ((k[a] - 1) * d[a] + 1) / 2
        } else {
            k[a] / 2
        };
        if p[a] > limit {
            return Err(KernelError::invalid(
                "pool2d: padding should be at most half of the kernel size",
            ));
        }
    }
    let oh = pooling_output_size(g.h, k[0], p[0], s[0], d[0], ceil)?;
    let ow = pooling_output_size(g.w, k[1], p[1], s[1], d[1], ceil)?;
    Ok(PoolGeom { oh, ow, k, s, p, d })
}

/// The taps `t < k` of a window starting at `start` (dilation `d`) whose position
/// `start + t·d` lies in `0..len`, computed rather than searched: the kernel size is a
/// program's scalar and may be huge next to a tiny input. (Shared with the XNNPACK kernels,
/// which call it per output pixel: no division for dilation 1.)
pub fn inside_taps(start: i64, k: usize, d: usize, len: i64) -> core::ops::Range<usize> {
    let (start, d, k) = (start as i128, d.max(1) as i128, k as i128);
    let first = match start {
        s if s >= 0 => 0,
        s if d == 1 => -s,
        s => (d - 1 - s) / d,
    };
    let past_last = match len as i128 - 1 - start {
        r if r < 0 => 0,
        r if d == 1 => r + 1,
        r => r / d + 1,
    };
    let first = first.min(k);
    first as usize..past_last.clamp(first, k) as usize
}

/// ExecuTorch's `kernel_reduction_then_map_2d` for max pooling: the first in-bounds element
/// of the (dilated) window starts the running maximum, a later one replaces it when greater.
fn max_pool<T: Element + PartialOrd>(
    g: &PoolGeom,
    xg: &Nchw,
    og: &Nchw,
    x: &[T],
    out: &mut [T],
    idx: &mut [i64],
) {
    let (ih, iw) = (xg.h as i64, xg.w as i64);
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let h0 = (y * g.s[0]) as i64 - g.p[0] as i64;
                    let w0 = (xo * g.s[1]) as i64 - g.p[1] as i64;
                    let mut best: Option<(T, i64)> = None;
                    for ky in inside_taps(h0, g.k[0], g.d[0], ih) {
                        let h = h0 + (ky * g.d[0]) as i64;
                        for kx in inside_taps(w0, g.k[1], g.d[1], iw) {
                            let w = w0 + (kx * g.d[1]) as i64;
                            let v = x[xg.at(n, c, h as usize, w as usize)];
                            let replace = match best {
                                None => true,
                                Some((b, _)) => v.partial_cmp(&b) == Some(Ordering::Greater),
                            };
                            if replace {
                                best = Some((v, h * iw + w));
                            }
                        }
                    }
                    let o = og.at(n, c, y, xo);
                    if let Some((v, i)) = best {
                        out[o] = v;
                        idx[o] = i;
                    } else {
                        out[o] = T::from_i64(0);
                        idx[o] = 0;
                    }
                }
            }
        }
    }
}

fn max_pool2d_with_indices_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let ceil = ctx.bool(5)?;
    let g = pool_geom(ctx, &x, Some(4), ceil)?;
    let os = out_sizes(&x, g.oh, g.ow);
    ctx.resize(6, &os)?;
    ctx.resize(7, &os)?;
    let (o_info, i_info) = (*ctx.tensor(6)?, *ctx.tensor(7)?);
    if o_info.dim_order() != i_info.dim_order() {
        return Err(KernelError::unsupported(
            "max_pool2d_with_indices: output and indices of different dim orders",
        ));
    }
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(&o_info)?);
    let ([xr], [mut o, mut ir]) = ctx.io([0], [6, 7])?;
    let dt = x.dtype();
    let idx = ir.as_mut_slice::<i64>()?;
    dispatch_real!(dt, T => max_pool::<T>(&g, &xg, &og, xr.as_slice()?, o.as_mut_slice()?, idx),
        _ => return Err(KernelError::dtype(dt, "max_pool2d_with_indices")));
    Ok(())
}

/// Addition and division in the element type, as ExecuTorch's portable average pooling does
/// (`CTYPE` accumulators: f16/bf16 round after each step; int64 divides with truncation).
trait AvgElem: Element {
    fn add(self, o: Self) -> Self;
    fn div_count(self, n: i64) -> Self;
}
macro_rules! avg_float {
    ($t:ty) => {
        impl AvgElem for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn div_count(self, n: i64) -> Self {
                self / n as $t
            }
        }
    };
}
avg_float!(f32);
avg_float!(f64);
macro_rules! avg_half {
    ($t:ty) => {
        impl AvgElem for $t {
            #[inline]
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            #[inline]
            fn div_count(self, n: i64) -> Self {
                <$t>::from_f32(self.to_f32() / <$t>::from_f32(n as f32).to_f32())
            }
        }
    };
}
avg_half!(half::f16);
avg_half!(half::bf16);
impl AvgElem for i64 {
    #[inline]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline]
    fn div_count(self, n: i64) -> Self {
        if n == 0 {
            0
        } else {
            self.wrapping_div(n)
        }
    }
}

fn avg_pool<T: AvgElem>(
    g: &PoolGeom,
    xg: &Nchw,
    og: &Nchw,
    x: &[T],
    out: &mut [T],
    count_include_pad: bool,
    divisor: Option<i64>,
) {
    let (ih, iw) = (xg.h as i64, xg.w as i64);
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..g.oh {
                for xo in 0..g.ow {
                    let mut h0 = (y * g.s[0]) as i64 - g.p[0] as i64;
                    let mut w0 = (xo * g.s[1]) as i64 - g.p[1] as i64;
                    let mut h1 = (h0 + g.k[0] as i64).min(ih + g.p[0] as i64);
                    let mut w1 = (w0 + g.k[1] as i64).min(iw + g.p[1] as i64);
                    let pool_size = (h1 - h0) * (w1 - w0);
                    h0 = h0.max(0);
                    w0 = w0.max(0);
                    h1 = h1.min(ih);
                    w1 = w1.min(iw);
                    let o = og.at(n, c, y, xo);
                    if h0 >= h1 || w0 >= w1 {
                        out[o] = T::from_i64(0);
                        continue;
                    }
                    let mut s: Option<T> = None;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            let v = x[xg.at(n, c, h as usize, w as usize)];
                            s = Some(match s {
                                None => v,
                                Some(a) => v.add(a),
                            });
                        }
                    }
                    let div = match divisor {
                        Some(d) => d,
                        None if count_include_pad => pool_size,
                        None => (h1 - h0) * (w1 - w0),
                    };
                    out[o] = s.unwrap_or(T::from_i64(0)).div_count(div);
                }
            }
        }
    }
}

fn avg_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let (ceil, cip, divisor) = (ctx.bool(4)?, ctx.bool(5)?, ctx.opt_int(6)?);
    if divisor == Some(0) {
        return Err(KernelError::invalid("avg_pool2d: divisor must not be zero"));
    }
    let g = pool_geom(ctx, &x, None, ceil)?;
    ctx.resize(7, &out_sizes(&x, g.oh, g.ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(7)?)?);
    let ([xr], [mut o]) = ctx.io([0], [7])?;
    let dt = x.dtype();
    macro_rules! go {
        ($T:ty) => {
            avg_pool::<$T>(
                &g,
                &xg,
                &og,
                xr.as_slice()?,
                o.as_mut_slice()?,
                cip,
                divisor,
            )
        };
    }
    match dt {
        ScalarType::Float => go!(f32),
        ScalarType::Double => go!(f64),
        ScalarType::Half => go!(half::f16),
        ScalarType::BFloat16 => go!(half::bf16),
        ScalarType::Long => go!(i64),
        _ => return Err(KernelError::dtype(dt, "avg_pool2d")),
    }
    Ok(())
}

/// ExecuTorch's adaptive average pooling: windows `[floor(o·in/out), ceil((o+1)·in/out))`
/// (computed in f32), summed in f32, divided in f32, converted back.
fn adaptive_avg<T: Element>(x: &[T], out: &mut [T], xg: &Nchw, og: &Nchw) {
    let start = |o: usize, os: usize, is: usize| ((o * is) as f32 / os as f32).floor() as usize;
    let end = |o: usize, os: usize, is: usize| (((o + 1) * is) as f32 / os as f32).ceil() as usize;
    for n in 0..xg.n {
        for c in 0..xg.c {
            for y in 0..og.h {
                let (h0, h1) = (start(y, og.h, xg.h), end(y, og.h, xg.h).min(xg.h));
                for xo in 0..og.w {
                    let (w0, w1) = (start(xo, og.w, xg.w), end(xo, og.w, xg.w).min(xg.w));
                    let mut s = 0f32;
                    for h in h0..h1 {
                        for w in w0..w1 {
                            s += x[xg.at(n, c, h, w)].to_f64() as f32;
                        }
                    }
                    let cnt = (h1.saturating_sub(h0) * w1.saturating_sub(w0)) as f32;
                    out[og.at(n, c, y, xo)] = T::from_f64((s / cnt) as f64);
                }
            }
        }
    }
}

fn adaptive_avg_pool2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let xg = Nchw::of(&x)?;
    let [oh, ow] = pair(ctx, 1, None, "output_size")?;
    if oh == 0 || ow == 0 || xg.h == 0 || xg.w == 0 {
        return Err(KernelError::shape(
            "adaptive_avg_pool2d: empty input or output size",
        ));
    }
    ctx.resize(2, &out_sizes(&x, oh, ow))?;
    let og = Nchw::of(ctx.tensor(2)?)?;
    let ([xr], [mut o]) = ctx.io([0], [2])?;
    let dt = x.dtype();
    if !AVG.contains(dt) {
        return Err(KernelError::dtype(dt, "adaptive_avg_pool2d"));
    }
    dispatch_dtype!(dt, T => adaptive_avg::<T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og),
        _ => return Err(KernelError::dtype(dt, "adaptive_avg_pool2d")));
    Ok(())
}

// ---- upsampling ----

/// Output size and scale of the `.vec` upsampling overloads: exactly one of `output_size`
/// (argument `osz`) and `scale_factors` (argument `sf`) is given.
fn upsample_target(
    ctx: &KernelContext,
    x: &TensorInfo,
    osz: usize,
    sf: usize,
) -> Result<([usize; 2], [Option<f64>; 2]), KernelError> {
    let g = Nchw::of(x)?;
    let (ih, iw) = (g.h, g.w);
    if x.rank() != 4 {
        return Err(KernelError::shape("upsample2d: input must be 4-d"));
    }
    match (ctx.opt_int_list(osz)?, ctx.is_none(sf)?) {
        (Some(l), true) if l.len() == 2 => {
            let (h, w) = (l.get(0)?, l.get(1)?);
            if h <= 0 || w <= 0 {
                return Err(KernelError::invalid(
                    "upsample2d: output size must be positive",
                ));
            }
            Ok(([h as usize, w as usize], [None, None]))
        }
        (None, false) => {
            let s = ctx.double_list(sf)?;
            if s.len() != 2 {
                return Err(KernelError::invalid(
                    "upsample2d: scale_factors must have 2 entries",
                ));
            }
            let oh = (ih as f64 * s[0]).floor();
            let ow = (iw as f64 * s[1]).floor();
            if !(oh >= 1.0 && ow >= 1.0) || oh > u32::MAX as f64 || ow > u32::MAX as f64 {
                return Err(KernelError::invalid("upsample2d: bad scale factors"));
            }
            Ok(([oh as usize, ow as usize], [Some(s[0]), Some(s[1])]))
        }
        _ => Err(KernelError::invalid(
            "upsample2d: give exactly one of output_size and scale_factors",
        )),
    }
}

/// PyTorch's `compute_scales_value<float>`.
fn scales_value(scale: Option<f64>, input: usize, output: usize) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => input as f32 / output as f32,
    }
}

fn nearest_idx(o: usize, input: usize, output: usize, scale: Option<f64>) -> usize {
    if output == input {
        o
    } else if output == 2 * input {
        o >> 1
    } else {
        let s = scales_value(scale, input, output);
        ((o as f32 * s).floor() as usize).min(input - 1)
    }
}

fn upsample_nearest2d_vec_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let ([oh, ow], scales) = upsample_target(ctx, &x, 1, 2)?;
    ctx.resize(3, &out_sizes(&x, oh, ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(3)?)?);
    if x.numel() == 0 {
        return Ok(());
    }
    let ([xr], [mut o]) = ctx.io([0], [3])?;
    fn run<T: Copy>(x: &[T], o: &mut [T], xg: &Nchw, og: &Nchw, scales: [Option<f64>; 2]) {
        for n in 0..og.n {
            for c in 0..og.c {
                for y in 0..og.h {
                    let h = nearest_idx(y, xg.h, og.h, scales[0]);
                    for xo in 0..og.w {
                        let w = nearest_idx(xo, xg.w, og.w, scales[1]);
                        o[og.at(n, c, y, xo)] = x[xg.at(n, c, h, w)];
                    }
                }
            }
        }
    }
    let dt = x.dtype();
    dispatch_real!(dt, T => run::<T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og, scales),
        _ => return Err(KernelError::dtype(dt, "upsample_nearest2d")));
    Ok(())
}

/// Linear interpolation along one axis: maps an output index to its two source indices and
/// their weights.
#[derive(Clone, Copy)]
struct LinearAxis {
    input: usize,
    align_corners: bool,
    scale: f32,
}

impl LinearAxis {
    fn new(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> Self {
        let scale = if align_corners {
            if output > 1 {
                (input as f32 - 1.0) / (output as f32 - 1.0)
            } else {
                0.0
            }
        } else {
            scales_value(scale, input, output)
        };
        LinearAxis {
            input,
            align_corners,
            scale,
        }
    }

    /// `(i0, i1, w0, w1)` for output index `o`.
    #[inline]
    fn weights(&self, o: usize) -> (usize, usize, f32, f32) {
        let (s, input) = (self.scale, self.input);
        let real = if self.align_corners {
            s * o as f32
        } else {
            (s * (o as f32 + 0.5) - 0.5).max(0.0)
        };
        let i0 = (real as usize).min(input - 1);
        let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
        let l1 = (real - i0 as f32).clamp(0.0, 1.0);
        (i0, i1, 1.0 - l1, l1)
    }
}

/// Bilinear interpolation arithmetic: f32 weights; values in f32 (f64 for f64), converted back
/// to the element type (C++ conversion: truncation for integers).
trait Lerp: Element {
    fn lerp4(tl: Self, tr: Self, bl: Self, br: Self, ww: [f32; 2], wh: [f32; 2]) -> Self;
}
macro_rules! lerp_via {
    ($t:ty, $c:ty) => {
        impl Lerp for $t {
            #[inline]
            fn lerp4(tl: Self, tr: Self, bl: Self, br: Self, ww: [f32; 2], wh: [f32; 2]) -> Self {
                let f = |v: $t| <$t as Element>::to_f64(v) as $c;
                let (w0, w1) = (ww[0] as $c, ww[1] as $c);
                let top = f(tl) * w0 + f(tr) * w1;
                let bot = f(bl) * w0 + f(br) * w1;
                <$t as Element>::from_f64((top * wh[0] as $c + bot * wh[1] as $c) as f64)
            }
        }
    };
}
lerp_via!(f32, f32);
lerp_via!(f64, f64);
lerp_via!(half::f16, f32);
lerp_via!(half::bf16, f32);
lerp_via!(u8, f32);
lerp_via!(i8, f32);
lerp_via!(i16, f32);
lerp_via!(i32, f32);
lerp_via!(i64, f32);

fn upsample_bilinear2d_vec_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let x = *ctx.tensor(0)?;
    let align = ctx.bool(2)?;
    let ([oh, ow], scales) = upsample_target(ctx, &x, 1, 3)?;
    ctx.resize(4, &out_sizes(&x, oh, ow))?;
    let (xg, og) = (Nchw::of(&x)?, Nchw::of(ctx.tensor(4)?)?);
    if x.numel() == 0 {
        return Ok(());
    }
    let hw = LinearAxis::new(xg.h, oh, align, scales[0]);
    let ww = LinearAxis::new(xg.w, ow, align, scales[1]);
    let ([xr], [mut o]) = ctx.io([0], [4])?;
    fn run<T: Lerp>(
        x: &[T],
        o: &mut [T],
        xg: &Nchw,
        og: &Nchw,
        (hw, ww): (LinearAxis, LinearAxis),
    ) {
        for n in 0..og.n {
            for c in 0..og.c {
                for y in 0..og.h {
                    let (h0, h1, lh0, lh1) = hw.weights(y);
                    for xo in 0..og.w {
                        let (w0, w1, lw0, lw1) = ww.weights(xo);
                        o[og.at(n, c, y, xo)] = T::lerp4(
                            x[xg.at(n, c, h0, w0)],
                            x[xg.at(n, c, h0, w1)],
                            x[xg.at(n, c, h1, w0)],
                            x[xg.at(n, c, h1, w1)],
                            [lw0, lw1],
                            [lh0, lh1],
                        );
                    }
                }
            }
        }
    }
    let dt = x.dtype();
    macro_rules! go {
        ($T:ty) => {
            run::<$T>(xr.as_slice()?, o.as_mut_slice()?, &xg, &og, (hw, ww))
        };
    }
    match dt {
        ScalarType::Float => go!(f32),
        ScalarType::Double => go!(f64),
        ScalarType::Half => go!(half::f16),
        ScalarType::BFloat16 => go!(half::bf16),
        ScalarType::Byte => go!(u8),
        ScalarType::Char => go!(i8),
        ScalarType::Short => go!(i16),
        ScalarType::Int => go!(i32),
        ScalarType::Long => go!(i64),
        _ => return Err(KernelError::dtype(dt, "upsample_bilinear2d")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn data(n: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7) % 11) as f32 / 4.0 - 1.25).collect()
    }

    fn close(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{got:?}\nvs {want:?}"
            );
        }
    }

    #[test]
    fn output_size_formula() {
        // (in, k, pad, stride, dil, ceil) -> out, as torch's pooling_output_shape
        assert_eq!(pooling_output_size(5, 2, 0, 2, 1, false).unwrap(), 2);
        assert_eq!(pooling_output_size(5, 2, 0, 2, 1, true).unwrap(), 3);
        assert_eq!(pooling_output_size(6, 3, 1, 2, 1, true).unwrap(), 4);
        assert_eq!(pooling_output_size(4, 3, 1, 2, 1, true).unwrap(), 3);
        // The last window would start in the padding: dropped.
        assert_eq!(pooling_output_size(5, 3, 1, 3, 1, true).unwrap(), 2);
        assert!(pooling_output_size(1, 3, 0, 1, 1, false).is_err());
    }
    // Reference values from PyTorch 2.9 (torch.ops.aten.*) on the same inputs.

    #[test]
    fn max_pool_cases() {
        // (input, kernel, stride, padding, dilation, ceil_mode, out sizes, values, indices)
        #[allow(clippy::type_complexity)]
        let cases: &[(
            &[usize],
            &[i64],
            &[i64],
            &[i64],
            &[i64],
            bool,
            &[usize],
            &[f32],
            &[i64],
        )] = &[
            (
                &[1, 2, 5, 5],
                &[2],
                &[],
                &[0],
                &[1],
                false,
                &[1, 2, 2, 2],
                &[1.0, 1.25, 0.25, 1.0, 1.25, 1.0, 1.25, 0.75],
                &[6, 3, 15, 17, 0, 3, 11, 17],
            ),
            (
                &[1, 2, 5, 5],
                &[3, 3],
                &[2, 2],
                &[1, 1],
                &[1],
                true,
                &[1, 2, 3, 3],
                &[
                    1.0, 1.25, 1.25, 1.0, 1.0, 1.25, 0.75, 1.0, 0.5, 1.25, 1.0, 1.0, 1.25, 1.25,
                    1.0, 0.5, 1.25, 0.25,
                ],
                &[
                    6, 3, 3, 6, 6, 14, 20, 17, 23, 0, 3, 3, 11, 11, 14, 20, 22, 23,
                ],
            ),
            (
                &[1, 2, 5, 5],
                &[2, 2],
                &[1, 1],
                &[1],
                &[2, 2],
                false,
                &[1, 2, 5, 5],
                &[
                    1.0, 0.0, 1.0, 0.75, -1.0, 0.5, 0.5, 1.25, 1.25, 1.25, 1.0, 1.0, 1.0, 1.0, 0.0,
                    -0.25, 0.75, 0.5, 1.25, 0.5, -0.75, 1.0, 0.0, 1.0, 0.0, 0.75, -0.25, 0.75, 0.5,
                    -1.25, 1.25, 1.25, 1.25, 1.0, 1.0, 0.75, 0.75, 0.75, 0.75, -0.25, 1.25, 1.25,
                    1.25, 1.25, 0.25, -1.0, 0.75, -0.25, 0.75, -0.25,
                ],
                &[
                    6, 7, 6, 9, 8, 1, 12, 3, 14, 3, 6, 17, 6, 17, 18, 21, 20, 23, 14, 23, 16, 17,
                    18, 17, 18, 6, 7, 6, 9, 8, 11, 0, 11, 14, 3, 6, 17, 6, 17, 18, 11, 22, 11, 22,
                    23, 16, 17, 18, 17, 18,
                ],
            ),
            (
                &[2, 5, 5],
                &[2],
                &[2],
                &[0],
                &[1],
                true,
                &[2, 3, 3],
                &[
                    1.0, 1.25, 0.75, 0.25, 1.0, 1.25, 0.75, 0.5, -0.5, 1.25, 1.0, 0.5, 1.25, 0.75,
                    1.0, 0.5, 1.25, -0.75,
                ],
                &[
                    6, 3, 9, 15, 17, 14, 20, 23, 24, 0, 3, 9, 11, 17, 14, 20, 22, 24,
                ],
            ),
            (
                &[1, 1, 4, 6],
                &[3, 2],
                &[2, 3],
                &[1, 0],
                &[1, 1],
                true,
                &[1, 1, 3, 2],
                &[1.0, 1.25, 1.0, 0.75, 0.0, -0.25],
                &[6, 3, 6, 9, 18, 21],
            ),
        ];
        for &(x, k, s, p, d, ceil, osz, want, want_idx) in cases {
            let mut c = TestCall::new();
            c.tensor(x, &data(x.iter().product()));
            c.int_list(k);
            c.int_list(s);
            c.int_list(p);
            c.int_list(d);
            c.bool(ceil);
            let o = c.out(St::Float, &vec![1; x.len()]);
            let i = c.out(St::Long, &vec![1; x.len()]);
            c.none();
            c.check(check_max_pool).unwrap();
            c.run(max_pool2d_with_indices_out).unwrap();
            assert_eq!(c.info(o).sizes(), osz);
            close(&c.output::<f32>(o), want);
            assert_eq!(c.output::<i64>(i), want_idx);
        }
    }

    #[test]
    fn inside_taps_match_walking() {
        for len in 0..6i64 {
            for k in 1..7 {
                for d in 1..4 {
                    for start in -7..7i64 {
                        let want: Vec<usize> = (0..k)
                            .filter(|&t| (0..len).contains(&(start + (t * d) as i64)))
                            .collect();
                        let got: Vec<usize> = inside_taps(start, k, d, len).collect();
                        assert_eq!(got, want, "start {start} k {k} d {d} len {len}");
                    }
                }
            }
        }
    }

    /// A 2^31-wide window padded by 2^30 over a 2×3 image: the taps outside it are skipped
    /// in closed form (a fuzzed program made the tap-by-tap loop run for minutes).
    #[test]
    fn huge_max_pool_window_is_clipped_to_the_input() {
        let mut c = TestCall::new();
        c.tensor(&[1, 1, 2, 3], &[0.5f32, -1.0, 2.5, 0.0, 1.5, -3.0]);
        let k = (1i64 << 31) + 1;
        c.int_list(&[k, k]);
        c.int_list(&[]);
        c.int_list(&[1 << 30, 1 << 30]);
        c.int_list(&[1, 1]);
        c.bool(false);
        let o = c.out(St::Float, &[1, 1, 1, 1]);
        let i = c.out(St::Long, &[1, 1, 1, 1]);
        c.none();
        c.run(max_pool2d_with_indices_out).unwrap();
        assert_eq!(c.output::<f32>(o), vec![2.5]);
        assert_eq!(c.output::<i64>(i), vec![2]);
    }

    #[test]
    fn avg_pool_cases() {
        // (input, kernel, stride, padding, ceil_mode, count_include_pad, divisor, out sizes, values)
        #[allow(clippy::type_complexity)]
        let cases: &[(
            &[usize],
            &[i64],
            &[i64],
            &[i64],
            bool,
            bool,
            Option<i64>,
            &[usize],
            &[f32],
        )] = &[
            (
                &[1, 2, 5, 5],
                &[3],
                &[2],
                &[1],
                true,
                true,
                None,
                &[1, 2, 3, 3],
                &[
                    -0.055556, 0.138889, 0.138889, -0.194444, -0.111111, -0.055556, 0.0, -0.083333,
                    -0.111111, 0.138889, -0.027778, 0.027778, -0.055556, -0.055556, -0.222222,
                    -0.111111, 0.055556, -0.222222,
                ],
            ),
            (
                &[1, 2, 5, 5],
                &[3],
                &[2],
                &[1],
                true,
                false,
                None,
                &[1, 2, 3, 3],
                &[
                    -0.125, 0.208333, 0.3125, -0.291667, -0.111111, -0.083333, 0.0, -0.125, -0.25,
                    0.3125, -0.041667, 0.0625, -0.083333, -0.055556, -0.333333, -0.25, 0.083333,
                    -0.5,
                ],
            ),
            (
                &[1, 2, 5, 5],
                &[2],
                &[],
                &[0],
                false,
                true,
                Some(3),
                &[1, 2, 2, 2],
                &[
                    -0.166667, -0.083333, -0.666667, 0.333333, 0.416667, -0.416667, -0.083333, 0.0,
                ],
            ),
            (
                &[2, 5, 4],
                &[3, 2],
                &[2, 1],
                &[1, 1],
                false,
                false,
                None,
                &[2, 3, 5],
                &[
                    -0.5, -0.3125, 0.0625, 0.4375, 0.625, -0.083333, -0.125, 0.25, 0.166667,
                    -0.333333, -0.125, 0.0625, 0.4375, 0.125, -0.375, 0.125, 0.3125, 0.0, -0.3125,
                    -0.125, 0.083333, 0.041667, -0.041667, -0.125, -0.166667, 0.5, 0.0, -0.3125,
                    0.0625, 0.25,
                ],
            ),
            (
                &[1, 1, 6, 6],
                &[3, 3],
                &[2, 2],
                &[1, 1],
                true,
                true,
                None,
                &[1, 1, 4, 4],
                &[
                    0.027778, 0.111111, 0.0, -0.333333, 0.0, 0.027778, -0.138889, 0.041667,
                    -0.055556, -0.055556, -0.222222, 0.0, -0.041667, -0.125, -0.208333, -0.125,
                ],
            ),
        ];
        for &(x, k, s, p, ceil, cip, div, osz, want) in cases {
            let mut c = TestCall::new();
            c.tensor(x, &data(x.iter().product()));
            c.int_list(k);
            c.int_list(s);
            c.int_list(p);
            c.bool(ceil);
            c.bool(cip);
            match div {
                Some(d) => c.int(d),
                None => c.none(),
            };
            let o = c.out(St::Float, &vec![1; x.len()]);
            c.ret(o);
            c.check(check_avg_pool).unwrap();
            c.run(avg_pool2d_out).unwrap();
            assert_eq!(c.info(o).sizes(), osz);
            close(&c.output::<f32>(o), want);
        }
    }

    #[test]
    fn adaptive_avg_pool_cases() {
        let cases: &[(&[usize], &[i64], &[usize], &[f32])] = &[
            (
                &[1, 2, 5, 7],
                &[3, 2],
                &[1, 2, 3, 2],
                &[
                    -0.0625, 0.03125, -0.020833, -0.041667, -0.09375, 0.0, 0.0, 0.09375, 0.041667,
                    0.020833, -0.03125, 0.0625,
                ],
            ),
            (
                &[1, 2, 5, 7],
                &[1, 1],
                &[1, 2, 1, 1],
                &[-0.021429, 0.021429],
            ),
            (
                &[3, 4, 4],
                &[2, 2],
                &[3, 2, 2],
                &[
                    -0.3125, 0.4375, -0.0625, 0.0, 0.1875, -0.4375, 0.4375, -0.1875, 0.0, 0.0625,
                    -0.4375, 0.3125,
                ],
            ),
            (
                &[1, 1, 3, 3],
                &[5, 4],
                &[1, 1, 5, 4],
                &[
                    -1.25, -0.375, 0.0, -0.5, 0.0, 0.1875, -0.125, -0.625, 1.25, 0.75, -0.25,
                    -0.75, 1.125, 0.625, -0.375, -0.875, 1.0, 0.5, -0.5, -1.0,
                ],
            ),
        ];
        for &(x, os, osz, want) in cases {
            let mut c = TestCall::new();
            c.tensor(x, &data(x.iter().product()));
            c.int_list(os);
            let o = c.out(St::Float, &vec![1; x.len()]);
            c.ret(o);
            c.run(adaptive_avg_pool2d_out).unwrap();
            assert_eq!(c.info(o).sizes(), osz);
            close(&c.output::<f32>(o), want);
        }
    }

    #[test]
    fn upsample_cases() {
        // (bilinear, align_corners, output_size, scale_factors, out sizes, values) on data(12) as [1,1,3,4]
        #[allow(clippy::type_complexity)]
        let cases: &[(bool, bool, Option<&[i64]>, Option<&[f64]>, &[usize], &[f32])] = &[
            (
                false,
                false,
                Some(&[5, 7]),
                None,
                &[1, 1, 5, 7],
                &[
                    -1.25, -1.25, 0.5, 0.5, -0.5, -0.5, 1.25, -1.25, -1.25, 0.5, 0.5, -0.5, -0.5,
                    1.25, 0.25, 0.25, -0.75, -0.75, 1.0, 1.0, 0.0, 0.25, 0.25, -0.75, -0.75, 1.0,
                    1.0, 0.0, -1.0, -1.0, 0.75, 0.75, -0.25, -0.25, -1.25,
                ],
            ),
            (
                false,
                false,
                None,
                Some(&[2.0, 1.5]),
                &[1, 1, 6, 6],
                &[
                    -1.25, -1.25, 0.5, -0.5, -0.5, 1.25, -1.25, -1.25, 0.5, -0.5, -0.5, 1.25, 0.25,
                    0.25, -0.75, 1.0, 1.0, 0.0, 0.25, 0.25, -0.75, 1.0, 1.0, 0.0, -1.0, -1.0, 0.75,
                    -0.25, -0.25, -1.25, -1.0, -1.0, 0.75, -0.25, -0.25, -1.25,
                ],
            ),
            (
                false,
                false,
                Some(&[6, 8]),
                None,
                &[1, 1, 6, 8],
                &[
                    -1.25, -1.25, 0.5, 0.5, -0.5, -0.5, 1.25, 1.25, -1.25, -1.25, 0.5, 0.5, -0.5,
                    -0.5, 1.25, 1.25, 0.25, 0.25, -0.75, -0.75, 1.0, 1.0, 0.0, 0.0, 0.25, 0.25,
                    -0.75, -0.75, 1.0, 1.0, 0.0, 0.0, -1.0, -1.0, 0.75, 0.75, -0.25, -0.25, -1.25,
                    -1.25, -1.0, -1.0, 0.75, 0.75, -0.25, -0.25, -1.25, -1.25,
                ],
            ),
            (
                false,
                false,
                None,
                Some(&[0.6, 1.3]),
                &[1, 1, 1, 5],
                &[-1.25, -1.25, 0.5, -0.5, 1.25],
            ),
            (
                true,
                false,
                Some(&[5, 7]),
                None,
                &[1, 1, 5, 7],
                &[
                    -1.25, -0.625, 0.375, -0.0, -0.375, 0.625, 1.25, -0.65, -0.417857, -0.046429,
                    0.05, 0.146429, 0.517857, 0.75, 0.25, -0.107143, -0.678571, 0.125, 0.928571,
                    0.357143, 0.0, -0.5, -0.267857, 0.103572, 0.2, 0.178571, -0.392857, -0.75,
                    -1.0, -0.375, 0.625, 0.25, -0.321429, -0.892857, -1.25,
                ],
            ),
            (
                true,
                true,
                Some(&[5, 7]),
                None,
                &[1, 1, 5, 7],
                &[
                    -1.25, -0.375, 0.5, 0.0, -0.5, 0.375, 1.25, -0.5, -0.3125, -0.125, 0.0625,
                    0.25, 0.4375, 0.625, 0.25, -0.25, -0.75, 0.125, 1.0, 0.5, 0.0, -0.375, -0.1875,
                    0.0, 0.1875, 0.375, -0.125, -0.625, -1.0, -0.125, 0.75, 0.25, -0.25, -0.75,
                    -1.25,
                ],
            ),
            (
                true,
                false,
                None,
                Some(&[1.7, 2.0]),
                &[1, 1, 5, 8],
                &[
                    -1.25, -0.8125, 0.0625, 0.25, -0.25, -0.0625, 0.8125, 1.25, -0.676471,
                    -0.501838, -0.152574, 0.034926, 0.060662, 0.248162, 0.597426, 0.772059,
                    0.205882, -0.023897, -0.483456, -0.295956, 0.538603, 0.726103, 0.266544,
                    0.036765, -0.448529, -0.314338, -0.045956, 0.141544, 0.248162, 0.051471,
                    -0.448529, -0.698529, -1.0, -0.5625, 0.3125, 0.5, 0.0, -0.5, -1.0, -1.25,
                ],
            ),
            (
                true,
                true,
                None,
                Some(&[2.0, 0.5]),
                &[1, 1, 6, 2],
                &[
                    -1.25, 1.25, -0.65, 0.75, -0.05, 0.25, -0.0, -0.25, -0.5, -0.75, -1.0, -1.25,
                ],
            ),
        ];
        for &(bilinear, ac, size, sc, osz, want) in cases {
            let mut c = TestCall::new();
            c.tensor(&[1, 1, 3, 4], &data(12));
            match size {
                Some(s) => c.int_list(s),
                None => c.none(),
            };
            if bilinear {
                c.bool(ac);
            }
            match sc {
                Some(s) => c.double_list(s),
                None => c.none(),
            };
            let o = c.out(St::Float, &[1, 1, 1, 1]);
            c.ret(o);
            c.run(if bilinear {
                upsample_bilinear2d_vec_out
            } else {
                upsample_nearest2d_vec_out
            })
            .unwrap();
            assert_eq!(c.info(o).sizes(), osz);
            close(&c.output::<f32>(o), want);
        }
    }
}
