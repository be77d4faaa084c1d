//! Quantized (int8) kernels other than the products: conversions (quantize, dequantize,
//! requantize, dynamic per-row quantization), binary operations, clamps, depthwise
//! convolution, max and global average pooling, and the preparation of the activation
//! operand of the products (`x + 128` as u8, im2col with the zero point as padding).
//!
//! The arithmetic follows XNNPACK's fp32 requantization: integer sums, then one float scale,
//! rounding to nearest even. Elementwise operations compute in float from the dequantized
//! operands (XNNPACK uses fixed-point multipliers there; results may differ by one step).
//! Loops are plain integer code, compiled a second time for AVX-512 / AVX2 where the CPU has
//! them so that the compiler vectorizes them.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::{BinaryOp, Window};
use crate::kernels::spatial::{taps, Geom};
use crate::quant::gemm::requant;
use crate::util::{Shape, MAX_DIMS};

/// Quantization of one int8 value: `real = scale · (q − zp)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Q {
    pub scale: f32,
    pub zp: i32,
}

/// XNNPACK's quantization of a float bound (`output_min`/`output_max`) to an int8 bound.
pub fn quantize_bound(v: f32, q: Q) -> i32 {
    let f = (v / q.scale + q.zp as f32).clamp(-128.0, 127.0);
    f.round_ties_even() as i32
}

/// Runs `f` compiled for the best instruction set this CPU has (so that its loops vectorize).
#[inline(always)]
fn multiversion<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        use pteron_kernels_cpu::simd::Level;
        match level() {
            // Safety: `level()` reports only instruction sets the CPU has.
            Level::Avx512 => return unsafe { avx512(f) },
            // Safety: as above.
            Level::Avx2 => return unsafe { avx2(f) },
            Level::Portable => {}
        }
    }
    f()
}

/// float → int8: `q = clamp(round(x / scale) + zp)` (multiplying by the reciprocal, as XNNPACK).
pub fn quantize(par: &dyn Parallel, x: &[f32], q: Q, out: &mut [i8]) {
    let inv = 1.0 / q.scale;
    let n = x.len().min(out.len());
    for_chunks_mut(par, &mut out[..n], 1 << 14, 2, &|k, o| {
        let xs = &x[k << 14..];
        multiversion(|| quantize_slice(o, xs, inv, q.zp))
    });
}

/// `out[i] = clamp(round(x[i] · inv) + zp)`, clamped before rounding (the bounds are integers,
/// so this equals rounding first; NaN → the upper bound, as XNNPACK's min_ps).
#[inline(always)]
fn quantize_slice(out: &mut [i8], x: &[f32], inv: f32, zp: i32) {
    let (lo, hi) = ((-128 - zp) as f32, (127 - zp) as f32);
    for (d, &v) in out.iter_mut().zip(x) {
        *d = round_small((v * inv).min(hi).max(lo)).wrapping_add(zp) as i8;
    }
}

/// int8 → float: `x = scale · (q − zp)`.
pub fn dequantize(par: &dyn Parallel, x: &[i8], q: Q, out: &mut [f32]) {
    let n = x.len().min(out.len());
    for_chunks_mut(par, &mut out[..n], 1 << 14, 2, &|k, o| {
        let xs = &x[k << 14..];
        multiversion(|| {
            for (d, &v) in o.iter_mut().zip(xs) {
                *d = (v as i32 - q.zp) as f32 * q.scale;
            }
        })
    });
}

/// int8 → int8 with other parameters (and an optional clamp `lo..=hi`, quantized).
pub fn requantize(x: &[i8], qi: Q, qo: Q, lo: i32, hi: i32, out: &mut [i8]) {
    if qi == qo {
        #[inline(always)]
        fn clamp(x: &[i8], lo: i32, hi: i32, out: &mut [i8]) {
            let (lo, hi) = (lo.clamp(-128, 127) as i8, hi.clamp(-128, 127) as i8);
            for (d, &v) in out.iter_mut().zip(x) {
                *d = v.max(lo).min(hi);
            }
        }
        multiversion(|| clamp(x, lo, hi, out));
        return;
    }
    #[inline(always)]
    fn each(x: &[i8], zi: i32, s: f32, zo: i32, lo: i32, hi: i32, out: &mut [i8]) {
        let (lo, hi) = ((lo - zo) as f32, (hi - zo) as f32);
        for (d, &v) in out.iter_mut().zip(x) {
            *d = requant_vec(v as i32 - zi, s, zo, lo, hi) as i8;
        }
    }
    let s = qi.scale / qo.scale;
    multiversion(|| each(x, qi.zp, s, qo.zp, lo, hi, out));
}

/// XNNPACK's per-row parameters of dynamic quantization over `[min, max]` (extended to 0):
/// the quantization multiplier and zero point (`xnn_qd8_asymmetric_quantization_params`).
pub fn qd8_params(min: f32, max: f32) -> (f32, i32) {
    let (qmin, qmax) = (-128.0f32, 127.0f32);
    let rmin = min.min(0.0);
    let rmax = max.max(0.0);
    let mult = if rmin == rmax {
        1.0
    } else {
        (qmax - qmin) / (rmax - rmin)
    };
    let dmin = rmin * mult;
    let dmax = rmax * mult;
    let zp = if (qmin + dmin) + (qmax + dmax) > 0.0 {
        qmin - dmin
    } else {
        qmax - dmax
    };
    let zp = zp.clamp(qmin, qmax).round_ties_even() as i32;
    (mult, zp)
}

/// Smallest and largest value (NaNs ignored), 16 lanes at a time so that it vectorizes.
#[inline(always)]
fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = ([f32::INFINITY; 16], [f32::NEG_INFINITY; 16]);
    let mut chunks = x.chunks_exact(16);
    for c in &mut chunks {
        let Ok(c) = <&[f32; 16]>::try_from(c) else {
            continue;
        };
        for i in 0..16 {
            lo[i] = lo[i].min(c[i]);
            hi[i] = hi[i].max(c[i]);
        }
    }
    for &v in chunks.remainder() {
        lo[0] = if v < lo[0] { v } else { lo[0] };
        hi[0] = if v > hi[0] { v } else { hi[0] };
    }
    (
        lo.iter().fold(f32::INFINITY, |a, &b| a.min(b)),
        hi.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
    )
}

/// Dynamic quantization of the rows of `x`: int8 values, and each row's scale and zero point.
pub fn quantize_rows(x: &[f32], row: usize, out: &mut [i8], scales: &mut [f32], zps: &mut [i32]) {
    if row == 0 {
        return;
    }
    let rows = x.chunks_exact(row).zip(out.chunks_exact_mut(row));
    #[cfg(target_arch = "x86_64")]
    if pteron_kernels_cpu::simd::level() == pteron_kernels_cpu::simd::Level::Avx512 {
        for ((xr, or), (s, z)) in rows.zip(scales.iter_mut().zip(zps.iter_mut())) {
            // Safety: the CPU has AVX-512 F/BW/VL (`level`).
            let (mult, zp) = unsafe { avx512::quantize_row(xr, or) };
            *s = 1.0 / mult;
            *z = zp;
        }
        return;
    }
    for ((xr, or), (s, z)) in rows.zip(scales.iter_mut().zip(zps.iter_mut())) {
        let (lo, hi) = multiversion(|| min_max(xr));
        let (mult, zp) = qd8_params(lo, hi);
        multiversion(|| quantize_slice(or, xr, mult, zp));
        *s = 1.0 / mult;
        *z = zp;
    }
}

/// `d[i] = s[i] + 128` as u8 (the sign bit flipped), compiled for the CPU's vector width.
struct FlipSigns<'a>(&'a [i8], &'a mut [u8]);

impl SimdOp for FlipSigns<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, _s: S) {
        for (d, &v) in self.1.iter_mut().zip(self.0) {
            *d = (v as u8) ^ 0x80;
        }
    }
}

/// Activations for the products: `a[r][k] = x[r][k] + 128` as u8, rows padded to `kp` with
/// `pad` (the zero point + 128, so that padding contributes nothing).
pub fn to_u8_rows(x: &[i8], rows: usize, k: usize, kp: usize, pad: u8, a: &mut [u8]) {
    if k == kp {
        let n = (rows * k).min(x.len()).min(a.len());
        run_op_at(level(), FlipSigns(&x[..n], &mut a[..n]));
        return;
    }
    for r in 0..rows {
        let (src, dst) = (&x[r * k..(r + 1) * k], &mut a[r * kp..(r + 1) * kp]);
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = (v as u8) ^ 0x80;
        }
        dst[k..].fill(pad);
    }
}

/// NHWC im2col of int8 rows `p0 .. p0 + np` into u8 (`x + 128`), padding with `pad`; each row
/// is `kh·kw·cin` values padded to `kp`. Rows are split over the threads.
#[allow(clippy::too_many_arguments)]
pub fn im2col_u8(
    par: &dyn Parallel,
    x: &[i8],
    ih: usize,
    iw: usize,
    cin: usize,
    w: &Window,
    ow: usize,
    p0: usize,
    np: usize,
    kp: usize,
    pad: u8,
    cols: &mut [u8],
) {
    let k = w.kh * w.kw * cin;
    if kp == 0 {
        return;
    }
    // A 1×1 convolution with stride 1, no padding and whole quads of channels: the rows are
    // the input pixels themselves, one contiguous run.
    let pointwise = (w.kh, w.kw, w.sh, w.sw, w.pad_top, w.pad_left) == (1, 1, 1, 1, 0, 0);
    if pointwise && kp == cin && ow == iw {
        let n = (np * kp).min(cols.len() / kp * kp);
        let src = p0
            .checked_mul(cin)
            .and_then(|s| x.get(s..s.checked_add(n)?));
        if let Some(src) = src {
            let l = level();
            for_chunks_mut(par, &mut cols[..n], 1 << 15, 1, &|t, d| {
                let at = t << 15;
                run_op_at(l, FlipSigns(&src[at..at + d.len()], d));
            });
            return;
        }
    }
    let n = (np * kp).min(cols.len() / kp * kp);
    let rows = &mut cols[..n];
    for_chunks_mut(par, rows, kp, 1024, &|pi, row| {
        let p = p0 + pi;
        let (oy, ox) = (p / ow, p % ow);
        let x0 = (ox * w.sw) as isize - w.pad_left as isize;
        // With dilation 1, a filter row inside the image is `kw·cin` contiguous inputs.
        let inside = w.dw == 1 && x0 >= 0 && x0 as usize + w.kw <= iw;
        for a in 0..w.kh {
            let y = (oy * w.sh + a * w.dh) as isize - w.pad_top as isize;
            let d = &mut row[a * w.kw * cin..(a + 1) * w.kw * cin];
            if y < 0 || y >= ih as isize {
                d.fill(pad);
                continue;
            }
            if inside {
                let s = (y as usize * iw + x0 as usize) * cin;
                for (o, &v) in d.iter_mut().zip(&x[s..s + w.kw * cin]) {
                    *o = (v as u8) ^ 0x80;
                }
                continue;
            }
            for (b, d) in d.chunks_exact_mut(cin.max(1)).enumerate() {
                let xx = x0 + (b * w.dw) as isize;
                if xx < 0 || xx >= iw as isize {
                    d.fill(pad);
                } else {
                    let s = (y as usize * iw + xx as usize) * cin;
                    for (o, &v) in d.iter_mut().zip(&x[s..s + cin]) {
                        *o = (v as u8) ^ 0x80;
                    }
                }
            }
        }
        row[k..].fill(pad);
    });
}

/// Same-shape int8 operands, elementwise: the result of `binary`'s `f` (clamped before
/// rounding; the bounds are integers) in a loop compiled for the CPU's vector width.
struct SameShape<'a> {
    out: &'a mut [i8],
    a: &'a [i8],
    b: &'a [i8],
    q: (Q, Q),
    inv: f32,
    zo: i32,
    bounds: (i32, i32),
}

impl<'a> SameShape<'a> {
    fn with<F: Fn(f32, f32) -> f32>(self, op: F) -> SameShapeOp<'a, F> {
        SameShapeOp { e: self, op }
    }
}

struct SameShapeOp<'a, F> {
    e: SameShape<'a>,
    op: F,
}

impl<F: Fn(f32, f32) -> f32> SimdOp for SameShapeOp<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, _s: S) {
        let SameShape {
            out,
            a,
            b,
            q: (qa, qb),
            inv,
            zo,
            bounds: (lo, hi),
        } = self.e;
        let (lo, hi) = ((lo - zo) as f32, (hi - zo) as f32);
        for ((d, &x), &y) in out.iter_mut().zip(a).zip(b) {
            let (xa, yb) = (
                (x as i32 - qa.zp) as f32 * qa.scale,
                (y as i32 - qb.zp) as f32 * qb.scale,
            );
            *d = round_small(((self.op)(xa, yb) * inv).min(hi).max(lo)).wrapping_add(zo) as i8;
        }
    }
}

/// Binary operation on int8 operands with NumPy broadcasting, computed on the dequantized
/// values and requantized (clamped to `lo..=hi`).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    par: &dyn Parallel,
    op: BinaryOp,
    a: &[i8],
    sa: &Shape,
    qa: Q,
    b: &[i8],
    sb: &Shape,
    qb: Q,
    out: &mut [i8],
    so: &Shape,
    qo: Q,
    lo: i32,
    hi: i32,
) -> Result<(), KernelError> {
    let n = so.count()?;
    if out.len() < n || a.len() < sa.count()? || b.len() < sb.count()? {
        return Err(KernelError::invalid("quantized operands too short"));
    }
    let inv = 1.0 / qo.scale;
    let f = |x: i32, y: i32| -> i8 {
        let (xa, yb) = ((x - qa.zp) as f32 * qa.scale, (y - qb.zp) as f32 * qb.scale);
        let r = match op {
            BinaryOp::Add => xa + yb,
            BinaryOp::Sub => xa - yb,
            BinaryOp::Mul => xa * yb,
            BinaryOp::Div => xa / yb,
            BinaryOp::Min => xa.min(yb),
            BinaryOp::Max => xa.max(yb),
            BinaryOp::Prelu => {
                if xa < 0.0 {
                    xa * yb
                } else {
                    xa
                }
            }
        };
        let q = (r * inv).round_ties_even() + qo.zp as f32;
        (q.clamp(lo as f32, hi as f32)) as i8
    };
    if sa == so && sb == so && !matches!(op, BinaryOp::Div | BinaryOp::Prelu) {
        let l = level();
        // Chunks of 16 KiB: the adds of MobileNetV2 are 15–75 K elements.
        for_chunks_mut(par, &mut out[..n], 1 << 14, 1, &|t, o| {
            let at = t << 14;
            let (a, b) = (&a[at..at + o.len()], &b[at..at + o.len()]);
            let e = SameShape {
                out: o,
                a,
                b,
                q: (qa, qb),
                inv,
                zo: qo.zp,
                bounds: (lo, hi),
            };
            match op {
                BinaryOp::Add => run_op_at(l, e.with(|x, y| x + y)),
                BinaryOp::Sub => run_op_at(l, e.with(|x, y| x - y)),
                BinaryOp::Mul => run_op_at(l, e.with(|x, y| x * y)),
                BinaryOp::Min => run_op_at(l, e.with(f32::min)),
                _ => run_op_at(l, e.with(f32::max)),
            }
        });
        return Ok(());
    }
    if sa == so && sb == so {
        multiversion(|| {
            for ((d, &x), &y) in out[..n].iter_mut().zip(a).zip(b) {
                *d = f(x as i32, y as i32);
            }
        });
        return Ok(());
    }
    // General broadcast: strides of each operand over the output's dims.
    let r = so.rank();
    let strides = |s: &Shape| -> Result<[usize; MAX_DIMS], KernelError> {
        let mut st = [0usize; MAX_DIMS];
        if s.rank() > r {
            return Err(KernelError::shape("operand rank above the output's"));
        }
        let off = r - s.rank();
        let mut acc = 1;
        for d in (off..r).rev() {
            let x = s.dims()[d - off];
            if x != 1 {
                if x != so.dims()[d] {
                    return Err(KernelError::shape("operand does not broadcast"));
                }
                st[d] = acc;
            }
            acc *= x;
        }
        Ok(st)
    };
    let (ta, tb) = (strides(sa)?, strides(sb)?);
    let mut idx = [0usize; MAX_DIMS];
    let (mut ia, mut ib) = (0usize, 0usize);
    for d in out[..n].iter_mut() {
        *d = f(a[ia] as i32, b[ib] as i32);
        for q in (0..r).rev() {
            idx[q] += 1;
            ia += ta[q];
            ib += tb[q];
            if idx[q] < so.dims()[q] {
                break;
            }
            ia -= ta[q] * idx[q];
            ib -= tb[q] * idx[q];
            idx[q] = 0;
        }
    }
    Ok(())
}

/// Depthwise convolution weights for int8: `w[tap][c]` widened to i16, i32 biases, and the
/// requantization scale per output channel.
pub struct QDwWeights {
    pub win: Window,
    pub channels: usize,
    pub w: Vec<i16>,
    /// The same filter widened to i32 (the AVX-512 kernel loads it without converting).
    pub w32: Vec<i32>,
    pub bias: Vec<i32>,
    pub scale: Vec<f32>,
    pub qi: Q,
    pub qo: Q,
    pub lo: i32,
    pub hi: i32,
}

/// XNNPACK's fp32 requantization of one sum, written so that loops of it vectorize: the
/// scaled sum is clamped to the output range (relative to the zero point; the bounds are
/// integers, so clamping before rounding gives what rounding first gives), rounded to nearest
/// even with the 1.5·2²³ trick (exact for |v| < 2²²), then shifted by the zero point.
/// Equal to [`requant`] for every input (`requant_matches_reference` below).
#[inline(always)]
fn requant_vec(acc: i32, scale: f32, zp: i32, lo: f32, hi: f32) -> i32 {
    // min first: a NaN becomes the upper bound, as in `requant` (and XNNPACK's min_ps).
    let f = (acc as f32 * scale).min(hi).max(lo);
    round_small(f).wrapping_add(zp)
}

/// Rounds to nearest even and converts, for |v| < 2²²: adding 1.5·2²³ rounds (in the
/// default rounding mode) and leaves the integer in the low mantissa bits. Integer-only after
/// the add, so loops of it vectorize (a float → int `as` cast does not, here).
#[inline(always)]
fn round_small(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0;
    ((v + MAGIC).to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32)
}

/// The output position range whose tap `t` (at `t·dil − pad` from `o·stride`) lies in
/// `0..len`, within `0..out_len`.
fn valid_outputs(
    t: usize,
    stride: usize,
    dil: usize,
    pad: usize,
    len: usize,
    out_len: usize,
) -> (usize, usize) {
    let off = t * dil;
    // o·stride + off ≥ pad  and  o·stride + off − pad < len
    let lo = pad.saturating_sub(off).div_ceil(stride);
    let hi = if off >= pad + len {
        0
    } else {
        (pad + len - off).div_ceil(stride)
    };
    (lo.min(out_len), hi.min(out_len).max(lo.min(out_len)))
}

/// Sums held on the stack by the portable row kernel (channels × output columns per block).
const ROW_ACC: usize = 1024;

/// One output row of the int8 depthwise convolution, in blocks of channels and output
/// columns whose sums fit [`ROW_ACC`]: taps applied row by row over every valid output
/// position of the block at once, then requantized.
#[inline(always)]
fn depthwise_row(wt: &QDwWeights, g: &Geom, x: &[i8], b: usize, oy: usize, orow: &mut [i8]) {
    let (c, win) = (g.c, &wt.win);
    let zp = wt.qi.zp as i16;
    let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
    let (lo, hi) = ((wt.lo - wt.qo.zp) as f32, (wt.hi - wt.qo.zp) as f32);
    let mut acc = [0i32; ROW_ACC];
    let mut c0 = 0;
    while c0 < c {
        let cn = (c - c0).min(ROW_ACC);
        let nb = ROW_ACC / cn;
        let mut ox0 = 0;
        while ox0 < g.ow {
            let ox1 = (ox0 + nb).min(g.ow);
            let acc = &mut acc[..(ox1 - ox0) * cn];
            for a in acc.chunks_exact_mut(cn) {
                a.copy_from_slice(&wt.bias[c0..c0 + cn]);
            }
            for ky in ky0..ky1 {
                let y = oy * win.sh + ky * win.dh - win.pad_top;
                let xrow = &x[(b * g.ih + y) * g.iw * c..][..g.iw * c];
                for kx in 0..win.kw {
                    let (o0, o1) = valid_outputs(kx, win.sw, win.dw, win.pad_left, g.iw, g.ow);
                    let w = &wt.w[(ky * win.kw + kx) * c + c0..][..cn];
                    for ox in o0.max(ox0)..o1.min(ox1) {
                        let xx = ox * win.sw + kx * win.dw - win.pad_left;
                        let xs = &xrow[xx * c + c0..][..cn];
                        let a = &mut acc[(ox - ox0) * cn..][..cn];
                        for ((a, &xv), &wv) in a.iter_mut().zip(xs).zip(w) {
                            // |x − zp| ≤ 255 and |w| ≤ 128: the product fits in i16 (zero
                            // points are checked to be int8 at preparation; wrapping keeps
                            // hostile ones panic-free).
                            *a += (xv as i16).wrapping_sub(zp).wrapping_mul(wv) as i32;
                        }
                    }
                }
            }
            for (ox, a) in (ox0..ox1).zip(acc.chunks_exact(cn)) {
                let o = &mut orow[ox * c + c0..][..cn];
                for ((d, &v), &sc) in o.iter_mut().zip(a).zip(&wt.scale[c0..c0 + cn]) {
                    *d = requant_vec(v, sc, wt.qo.zp, lo, hi) as i8;
                }
            }
            ox0 = ox1;
        }
        c0 += cn;
    }
}

/// int8 depthwise convolution (multiplier 1) over NHWC `x` into `out`.
pub fn depthwise(
    par: &dyn Parallel,
    wt: &QDwWeights,
    g: Geom,
    x: &[i8],
    out: &mut [i8],
) -> Result<(), KernelError> {
    let c = g.c;
    if c != wt.channels
        || x.len() < g.n * g.ih * g.iw * c
        || out.len() < g.n * g.oh * g.ow * c
        || wt.w.len() < wt.win.kh * wt.win.kw * c
        || wt.w32.len() < wt.win.kh * wt.win.kw * c
        || wt.bias.len() < c
        || wt.scale.len() < c
        || wt.win.sw == 0
        || wt.win.sh == 0
    {
        return Err(KernelError::invalid(
            "quantized depthwise operands too short",
        ));
    }
    let row_len = g.ow * c;
    let rows = g.n * g.oh;
    if row_len == 0 || rows == 0 {
        return Ok(());
    }
    let per = (8192 / row_len).max(1);
    let out = &mut out[..rows * row_len];
    #[cfg(target_arch = "x86_64")]
    // (The AVX-512 row kernel keeps up to 16 filter rows.)
    if pteron_kernels_cpu::simd::level() == pteron_kernels_cpu::simd::Level::Avx512
        && wt.win.kh <= 16
    {
        for_chunks_mut(par, out, per * row_len, 1, &|k, o| {
            for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                let row = k * per + r;
                let (b, oy) = (row / g.oh, row % g.oh);
                // Safety: the CPU has AVX-512 (checked above; VBMI and VNNI too for the
                // second); operand lengths were checked at the top of `depthwise`.
                unsafe {
                    if avx512::has_vbmi_vnni() {
                        avx512::depthwise_row_vnni(wt, &g, x, b, oy, orow)
                    } else {
                        avx512::depthwise_row(wt, &g, x, b, oy, orow)
                    }
                };
            }
        });
        return Ok(());
    }
    for_chunks_mut(par, out, per * row_len, 1, &|k, o| {
        multiversion(|| {
            for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                let row = k * per + r;
                depthwise_row(wt, &g, x, row / g.oh, row % g.oh, orow);
            }
        })
    });
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use core::arch::x86_64::*;

    use super::{taps, Geom, QDwWeights};

    /// One output row of the int8 depthwise convolution, 16 channels at a time with the sums
    /// of every tap in a register: widen x to i32, subtract the zero point, multiply by the
    /// widened filter, add; then XNNPACK's fp32 requantization (convert, scale, clamp, round
    /// to nearest even by the default rounding mode, add the zero point) and a narrowing
    /// store.
    ///
    /// # Safety
    /// The CPU must have AVX-512F/BW/VL; `x`, `wt` and `orow` must hold the sizes `g` and
    /// `wt.win` imply (checked by `depthwise`).
    /// `acc + (x - zp) · w` for 16 channels (the first of `m` when not `full`).
    ///
    /// # Safety
    /// As [`depthwise_row`]: `xp` and `wp` point at 16 (or `m`'s) channels inside x and w32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn tap(
        full: bool,
        m: __mmask16,
        zp: __m512i,
        acc: __m512i,
        xp: *const i8,
        wp: *const i32,
    ) -> __m512i {
        // Safety: the caller's pointers (see above).
        let (xv, wv) = unsafe {
            if full {
                (
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(xp as *const __m128i)),
                    _mm512_loadu_si512(wp as *const __m512i),
                )
            } else {
                (
                    _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, xp)),
                    _mm512_maskz_loadu_epi32(m, wp),
                )
            }
        };
        _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_sub_epi32(xv, zp), wv))
    }

    /// Dynamic quantization of one row (`quantize_rows`' arithmetic, the same results):
    /// min and max ignoring NaNs, XNNPACK's parameters, then clamp, round to nearest even and
    /// narrow 16 values at a time. Returns the multiplier and zero point.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F/BW/VL.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_row(x: &[f32], out: &mut [i8]) -> (f32, i32) {
        let n = x.len().min(out.len());
        let (mut lo, mut hi) = (
            _mm512_set1_ps(f32::INFINITY),
            _mm512_set1_ps(f32::NEG_INFINITY),
        );
        let mut i = 0;
        while i < n {
            let m: __mmask16 = if n - i >= 16 {
                !0
            } else {
                (1u16 << (n - i)) - 1
            };
            // Safety: lanes i .. i + popcount(m) < n of x.
            let v = unsafe { _mm512_maskz_loadu_ps(m, x.as_ptr().add(i)) };
            // min(v, lo) returns lo where v is NaN: NaNs are ignored, as in `min_max`.
            lo = _mm512_mask_min_ps(lo, m, v, lo);
            hi = _mm512_mask_max_ps(hi, m, v, hi);
            i += 16;
        }
        let (mult, zp) = super::qd8_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi));
        let inv = _mm512_set1_ps(mult);
        let (qlo, qhi) = (
            _mm512_set1_ps((-128 - zp) as f32),
            _mm512_set1_ps((127 - zp) as f32),
        );
        let zpv = _mm512_set1_epi32(zp);
        let mut i = 0;
        while i < n {
            let m: __mmask16 = if n - i >= 16 {
                !0
            } else {
                (1u16 << (n - i)) - 1
            };
            // Safety: as above, for x and out.
            unsafe {
                let v = _mm512_maskz_loadu_ps(m, x.as_ptr().add(i));
                // min first: NaN becomes the upper bound, as `quantize_slice`.
                let f = _mm512_max_ps(_mm512_min_ps(_mm512_mul_ps(v, inv), qhi), qlo);
                let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zpv);
                _mm512_mask_cvtepi32_storeu_epi8(out.as_mut_ptr().add(i), m, q);
            }
            i += 16;
        }
        (mult, zp)
    }

    /// Whether the CPU has AVX-512 VBMI and VNNI (the interior of 3-wide filters then takes
    /// taps in pairs: bytes of two taps interleaved by one `vpermb`, widened to 16 bits, and
    /// multiplied and added by one `vpdpwssd` instead of two `vpmulld` and two adds), and the
    /// process's SIMD level is not capped below AVX-512.
    pub fn has_vbmi_vnni() -> bool {
        pteron_kernels_cpu::cpu::int8_vbmi_vnni()
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn depthwise_row(
        wt: &QDwWeights,
        g: &Geom,
        x: &[i8],
        b: usize,
        oy: usize,
        orow: &mut [i8],
    ) {
        // Safety: the caller's contract.
        unsafe { row::<false>(wt, g, x, b, oy, orow) }
    }

    /// [`depthwise_row`] with the paired taps of [`has_vbmi_vnni`].
    ///
    /// # Safety
    /// As [`depthwise_row`], and the CPU must have AVX-512 VBMI and VNNI.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
    pub unsafe fn depthwise_row_vnni(
        wt: &QDwWeights,
        g: &Geom,
        x: &[i8],
        b: usize,
        oy: usize,
        orow: &mut [i8],
    ) {
        // Safety: the caller's contract.
        unsafe { row::<true>(wt, g, x, b, oy, orow) }
    }

    /// The 16 channels at `a` and at `b` (the first of `m` when not `full`), interleaved as
    /// 16-bit pairs `(a[c], b[c])`, one per 32-bit lane.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VBMI; 16 (or `m`'s) bytes at `a` and `b` readable.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi")]
    #[inline]
    unsafe fn pair(full: bool, m: __mmask16, idx: __m256i, a: *const i8, b: *const i8) -> __m512i {
        // Safety: the caller's pointers.
        let (va, vb) = unsafe {
            if full {
                (
                    _mm_loadu_si128(a as *const __m128i),
                    _mm_loadu_si128(b as *const __m128i),
                )
            } else {
                (_mm_maskz_loadu_epi8(m, a), _mm_maskz_loadu_epi8(m, b))
            }
        };
        let ab = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(va), vb);
        _mm512_cvtepi8_epi16(_mm256_permutexvar_epi8(idx, ab))
    }

    /// One output row (see [`depthwise_row`]); `V`: paired taps for interior 3×3 outputs.
    #[inline(always)]
    unsafe fn row<const V: bool>(
        wt: &QDwWeights,
        g: &Geom,
        x: &[i8],
        b: usize,
        oy: usize,
        orow: &mut [i8],
    ) {
        let (c, win) = (g.c, &wt.win);
        let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
        let zp = _mm512_set1_epi32(wt.qi.zp);
        let zo = _mm512_set1_epi32(wt.qo.zp);
        let lo = _mm512_set1_ps((wt.lo - wt.qo.zp) as f32);
        let hi = _mm512_set1_ps((wt.hi - wt.qo.zp) as f32);
        let ky1 = ky1.min(ky0 + 16); // kh ≤ 16 (checked by `depthwise`)
                                     // Rows of x for each valid kernel row, and the matching filter rows.
        let mut xrows = [core::ptr::null::<i8>(); 16];
        let mut wrows = [core::ptr::null::<i32>(); 16];
        for (j, ky) in (ky0..ky1).enumerate() {
            let y = oy * win.sh + ky * win.dh - win.pad_top;
            // Safety: y < ih (`taps`), so the row lies inside x; the filter row inside w32.
            unsafe {
                xrows[j] = x.as_ptr().add((b * g.ih + y) * g.iw * c);
                wrows[j] = wt.w32.as_ptr().add(ky * win.kw * c);
            }
        }
        let nrows = ky1 - ky0;
        // Output columns whose whole filter row lies inside the image (no border taps).
        let ix0 = win.pad_left.div_ceil(win.sw).min(g.ow);
        let reach = (win.kw - 1) * win.dw + 1;
        let ix1 = if g.iw + win.pad_left >= reach {
            ((g.iw + win.pad_left - reach) / win.sw + 1).min(g.ow)
        } else {
            0
        };
        // Interior outputs of 3-wide filters have every tap inside the image: their sum
        // Σ (x − zp)·w is Σ x·w − zp·Σ w, the second term folded into the bias per block.
        let three = win.kw == 3 && win.dw == 1 && nrows == win.kh;
        // Channel blocks outside, columns inside: the block's bias and scales stay in
        // registers, and interior columns of 3-wide filters run three unrolled taps.
        let mut c0 = 0;
        while c0 < c {
            let n = (c - c0).min(16);
            let full = n == 16;
            let m: __mmask16 = if full { 0xFFFF } else { (1u16 << n) - 1 };
            // Safety (this block): channels c0..c0 + n < c of rows inside x, w32, bias, scale
            // and orow; full vectors only when 16 channels remain, masked otherwise.
            unsafe {
                let bias = _mm512_maskz_loadu_epi32(m, wt.bias.as_ptr().add(c0) as *const i32);
                let sc = _mm512_maskz_loadu_ps(m, wt.scale.as_ptr().add(c0));
                let mut wsum = _mm512_setzero_si512();
                if three {
                    for wrow in &wrows[..nrows] {
                        for kx in 0..3 {
                            let wv = _mm512_maskz_loadu_epi32(m, wrow.add(c0 + kx * c));
                            wsum = _mm512_add_epi32(wsum, wv);
                        }
                    }
                }
                let folded = _mm512_sub_epi32(bias, _mm512_mullo_epi32(zp, wsum));
                let none = _mm512_setzero_si512();
                // Paired taps (t = 3·row + column; pair q = taps 2q, 2q + 1, the last with a
                // zero weight): filter values as 16-bit pairs per lane, and the byte order
                // that interleaves two loads.
                let mut wpair = [none; 5];
                let idx = _mm256_set_epi8(
                    31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                    5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0,
                );
                if V && three {
                    let wtap = |t: usize| {
                        let (j, kx) = (t / 3, t % 3);
                        _mm512_maskz_loadu_epi32(m, wrows[j].add(c0 + kx * c))
                    };
                    let lo16 = _mm512_set1_epi32(0xFFFF);
                    for (q, w) in wpair.iter_mut().enumerate() {
                        let w0 = _mm512_and_si512(wtap(2 * q), lo16);
                        let w1 = if 2 * q + 1 < 9 { wtap(2 * q + 1) } else { none };
                        *w = _mm512_or_si512(w0, _mm512_slli_epi32::<16>(w1));
                    }
                }
                for ox in 0..g.ow {
                    let mut acc = bias;
                    if V && three && (ix0..ix1).contains(&ox) {
                        acc = folded;
                        let x0 = ox * win.sw - win.pad_left;
                        let xp = |t: usize| xrows[t / 3].add(c0 + (x0 + t % 3) * c);
                        for (q, &w) in wpair.iter().enumerate() {
                            let (t0, t1) = (2 * q, (2 * q + 1).min(8));
                            let v = pair(full, m, idx, xp(t0), xp(t1));
                            acc = _mm512_dpwssd_epi32(acc, v, w);
                        }
                    } else if three && (ix0..ix1).contains(&ox) {
                        acc = folded;
                        let x0 = ox * win.sw - win.pad_left;
                        for j in 0..nrows {
                            let (xr, wr) = (xrows[j].add(c0 + x0 * c), wrows[j].add(c0));
                            acc = tap(full, m, none, acc, xr, wr);
                            acc = tap(full, m, none, acc, xr.add(c), wr.add(c));
                            acc = tap(full, m, none, acc, xr.add(2 * c), wr.add(2 * c));
                        }
                    } else {
                        let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                        for j in 0..nrows {
                            let (xr, wr) = (xrows[j].add(c0), wrows[j].add(c0));
                            for kx in kx0..kx1 {
                                let xx = ox * win.sw + kx * win.dw - win.pad_left;
                                acc = tap(full, m, zp, acc, xr.add(xx * c), wr.add(kx * c));
                            }
                        }
                    }
                    // min first: NaN → upper bound, as `requant`.
                    let f = _mm512_max_ps(
                        _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), sc), hi),
                        lo,
                    );
                    let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zo);
                    _mm512_mask_cvtepi32_storeu_epi8(
                        orow.as_mut_ptr().add(ox * c + c0) as *mut i8,
                        m,
                        q,
                    );
                }
            }
            c0 += n;
        }
    }
}

/// int8 max pooling (same parameters in and out), clamped to `lo..=hi`.
#[allow(clippy::too_many_arguments)]
pub fn max_pool(
    par: &dyn Parallel,
    win: &Window,
    g: Geom,
    x: &[i8],
    out: &mut [i8],
    lo: i32,
    hi: i32,
) -> Result<(), KernelError> {
    let c = g.c;
    if x.len() < g.n * g.ih * g.iw * c || out.len() < g.n * g.oh * g.ow * c {
        return Err(KernelError::invalid("quantized pooling operands too short"));
    }
    let row_len = g.ow * c;
    let rows = g.n * g.oh;
    if row_len == 0 || rows == 0 {
        return Ok(());
    }
    let per = (8192 / row_len).max(1);
    for_chunks_mut(
        par,
        &mut out[..rows * row_len],
        per * row_len,
        1,
        &|k, o| {
            multiversion(|| {
                for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                    let row = k * per + r;
                    let (b, oy) = (row / g.oh, row % g.oh);
                    let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
                    for ox in 0..g.ow {
                        let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                        let d = &mut orow[ox * c..(ox + 1) * c];
                        d.fill(i8::MIN);
                        for ky in ky0..ky1 {
                            let y = oy * win.sh + ky * win.dh - win.pad_top;
                            for kx in kx0..kx1 {
                                let xx = ox * win.sw + kx * win.dw - win.pad_left;
                                let xs = &x[((b * g.ih + y) * g.iw + xx) * c..][..c];
                                for (o, &v) in d.iter_mut().zip(xs) {
                                    *o = (*o).max(v);
                                }
                            }
                        }
                        for o in d.iter_mut() {
                            *o = (*o as i32).clamp(lo, hi) as i8;
                        }
                    }
                }
            })
        },
    );
    Ok(())
}

/// int8 mean over the `spatial` positions of `[outer, spatial, c]`, requantized.
#[allow(clippy::too_many_arguments)]
pub fn global_mean(
    x: &[i8],
    outer: usize,
    spatial: usize,
    c: usize,
    qi: Q,
    qo: Q,
    lo: i32,
    hi: i32,
    out: &mut [i8],
) -> Result<(), KernelError> {
    if x.len() < outer * spatial * c || out.len() < outer * c {
        return Err(KernelError::invalid("quantized pooling operands too short"));
    }
    let scale = qi.scale / (qo.scale * spatial.max(1) as f32);
    multiversion(|| {
        let mut acc = [0i32; 256];
        for b in 0..outer {
            let mut c0 = 0;
            while c0 < c {
                let cn = (c - c0).min(acc.len());
                let acc = &mut acc[..cn];
                acc.fill(-(qi.zp) * spatial as i32);
                for p in 0..spatial {
                    let xs = &x[(b * spatial + p) * c + c0..][..cn];
                    for (a, &v) in acc.iter_mut().zip(xs) {
                        *a += v as i32;
                    }
                }
                for (d, &a) in out[b * c + c0..b * c + c0 + cn].iter_mut().zip(acc.iter()) {
                    *d = requant(a, scale, qo.zp, lo, hi) as i8;
                }
                c0 += cn;
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::INLINE;
    use pteron_kernels_cpu::simd::{with_level, Level};

    /// Dynamic row quantization gives XNNPACK's qd8 parameters (`scale = 255 / (max − min)`
    /// over the range extended to 0; the zero point from the min when `(−128 + min·scale) +
    /// (127 + max·scale) > 0`, else from the max; clamped, rounded to nearest even) and rounds
    /// values to nearest even. Expected values worked out by hand from those formulas (rows D
    /// and the ties of B also checked against ExecuTorch's XNNPACK on a 4-bit linear layer).
    #[test]
    fn dynamic_rows_follow_xnnpack_qd8() {
        let (d_min, d_max) = (f32::from_bits(0xc072_e5bb), f32::from_bits(0x3fe8_562d));
        #[rustfmt::skip]
        let x = [
            // A: scale 63.75, zero point −128 + 63.75 = −64.25 → −64.
            -1.0, 0.5, 3.0,
            // B: scale 64 (exact), zero point −128; 0.0390625·64 = 2.5 ties to 2 (not 3).
            0.0, 3.984375, 0.0390625,
            // C: negative only, scale 127.5, zero point from the max: 127 − 0 = 127.
            -2.0, -0.5, 0.0,
            // D: −3.7952716, 1.8151299: scale 45.45129, min·scale = −172.49998, max·scale =
            // 82.49999; the sum test picks the max: 127 − 82.49999 = 44.500008 → 45 (the min
            // would give −128 + 172.49998 = 44.499985 → 44, as XNNPACK's unsigned qdu8 form).
            d_min, d_max, 0.0,
            // E: all zero: scale 1, zero point 127 (−128 + 127 is not > 0).
            0.0, 0.0, 0.0,
        ];
        let want_q: [i8; 15] = [
            -128, -32, 127, //
            -128, 127, -126, //
            -128, 63, 127, //
            -127, 127, 45, //
            127, 127, 127,
        ];
        let want_zp = [-64, -128, 127, 45, 127];
        let mult = [63.75f32, 64.0, 127.5, 255.0 / (d_max - d_min), 1.0];
        for lv in [Level::Portable, Level::Avx2, Level::Avx512] {
            with_level(lv, || {
                let (mut q, mut s, mut z) = ([0i8; 15], [0f32; 5], [0i32; 5]);
                quantize_rows(&x, 3, &mut q, &mut s, &mut z);
                assert_eq!(q, want_q, "{lv:?}");
                assert_eq!(z, want_zp, "{lv:?}");
                for (got, m) in s.iter().zip(mult) {
                    assert_eq!(*got, 1.0 / m, "{lv:?}");
                }
            });
        }
    }

    /// Rows of every length up to 70 (whole vectors and tails), with NaNs and infinities:
    /// the AVX-512 row quantizer gives the portable loop's values, scales and zero points.
    #[test]
    fn quantize_rows_levels_agree() {
        let mut state = 0x9e37_79b9u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        for row in 1..71 {
            let x: Vec<f32> = (0..row * 3)
                .map(|_| match next() % 40 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => -1e30,
                    _ => (next() % 2000) as f32 / 100.0 - 10.0,
                })
                .collect();
            let run = |lv| {
                let (mut q, mut s, mut z) = (vec![0i8; row * 3], [0f32; 3], [0i32; 3]);
                with_level(lv, || quantize_rows(&x, row, &mut q, &mut s, &mut z));
                (q, s.map(f32::to_bits), z)
            };
            assert_eq!(run(Level::Avx512), run(Level::Portable), "row {row}");
        }
    }

    #[test]
    fn requant_matches_reference() {
        let mut state = 0x1234_5678u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        for _ in 0..200_000 {
            let acc = (next() as i32) >> (next() % 24);
            let scale = f32::from_bits(0x3000_0000 + (next() % 0x0C00_0000));
            let zp = (next() % 256) as i32 - 128;
            let (qmin, qmax) = if next() % 2 == 0 {
                (-128, 127)
            } else {
                (zp, 100.max(zp))
            };
            let want = requant(acc, scale, zp, qmin, qmax);
            let got = requant_vec(acc, scale, zp, (qmin - zp) as f32, (qmax - zp) as f32);
            assert_eq!(
                got, want,
                "acc {acc} scale {scale:e} zp {zp} [{qmin}, {qmax}]"
            );
        }
        // Ties round to even.
        for acc in -20..20 {
            assert_eq!(
                requant_vec(acc, 0.5, 0, -128.0, 127.0),
                requant(acc, 0.5, 0, -128, 127)
            );
        }
    }

    /// The direct sum of every tap, as XNNPACK defines it.
    fn naive(wt: &QDwWeights, g: &Geom, x: &[i8]) -> Vec<i8> {
        let w = &wt.win;
        let mut out = vec![0i8; g.n * g.oh * g.ow * g.c];
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for ch in 0..g.c {
                        let mut acc = wt.bias[ch];
                        for ky in 0..w.kh {
                            for kx in 0..w.kw {
                                let y = (oy * w.sh + ky * w.dh) as isize - w.pad_top as isize;
                                let xx = (ox * w.sw + kx * w.dw) as isize - w.pad_left as isize;
                                if y < 0 || xx < 0 || y >= g.ih as isize || xx >= g.iw as isize {
                                    continue;
                                }
                                let xv =
                                    x[((b * g.ih + y as usize) * g.iw + xx as usize) * g.c + ch];
                                acc += (xv as i32 - wt.qi.zp)
                                    * wt.w[(ky * w.kw + kx) * g.c + ch] as i32;
                            }
                        }
                        out[((b * g.oh + oy) * g.ow + ox) * g.c + ch] =
                            requant(acc, wt.scale[ch], wt.qo.zp, wt.lo, wt.hi) as i8;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn depthwise_matches_naive() {
        let mut seed = 7u32;
        let mut next = move || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            seed >> 8
        };
        // (c, ih, iw, k, stride, dilation, pads t/l/b/r)
        let cases = [
            (16, 9, 9, 3, 1, 1, [1, 1, 1, 1]),
            (24, 10, 7, 3, 2, 1, [0, 1, 1, 0]),
            (5, 8, 8, 5, 1, 2, [4, 4, 4, 4]),
            (33, 6, 11, 3, 3, 1, [2, 0, 0, 2]),
            (64, 4, 4, 1, 1, 1, [0, 0, 0, 0]),
            (1030, 4, 5, 3, 1, 1, [1, 1, 1, 1]),
        ];
        for (c, ih, iw, k, s, d, p) in cases {
            let win = Window {
                pad_top: p[0],
                pad_left: p[1],
                pad_bottom: p[2],
                pad_right: p[3],
                kh: k,
                kw: k,
                sh: s,
                sw: s,
                dh: d,
                dw: d,
            };
            let oh = (ih + p[0] + p[2] - (k - 1) * d - 1) / s + 1;
            let ow = (iw + p[1] + p[3] - (k - 1) * d - 1) / s + 1;
            let g = Geom {
                n: 2,
                ih,
                iw,
                oh,
                ow,
                c,
            };
            let w: Vec<i16> = (0..k * k * c)
                .map(|_| (next() % 256) as i16 - 128)
                .collect();
            let wt = QDwWeights {
                win,
                channels: c,
                w32: w.iter().map(|&v| v as i32).collect(),
                w,
                bias: (0..c).map(|_| (next() % 20000) as i32 - 10000).collect(),
                scale: (0..c)
                    .map(|_| 1e-4 + (next() % 1000) as f32 * 1e-6)
                    .collect(),
                qi: Q {
                    scale: 0.1,
                    zp: (next() % 256) as i32 - 128,
                },
                qo: Q {
                    scale: 0.2,
                    zp: (next() % 256) as i32 - 128,
                },
                lo: -120,
                hi: 110,
            };
            let x: Vec<i8> = (0..2 * ih * iw * c)
                .map(|_| (next() % 256) as u8 as i8)
                .collect();
            let want = naive(&wt, &g, &x);
            // Every SIMD level this CPU has (the AVX-512 row kernel and the portable one).
            for level in [Level::Avx512, Level::Avx2, Level::Portable] {
                let mut out = vec![0i8; 2 * oh * ow * c];
                with_level(level, || depthwise(&INLINE, &wt, g, &x, &mut out)).unwrap();
                assert_eq!(
                    out, want,
                    "case c{c} {ih}x{iw} k{k} s{s} d{d} {p:?} {level:?}"
                );
            }
        }
    }
}
