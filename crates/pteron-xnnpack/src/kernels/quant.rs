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

use crate::graph::{BinaryOp, Window};
use crate::kernels::qgemm::requant;
use crate::kernels::spatial::Geom;
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
        use pteron_kernels_cpu::simd::{level, Level};
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
        multiversion(|| {
            for (d, &v) in o.iter_mut().zip(xs) {
                let f = (v * inv).min((127 - q.zp) as f32);
                *d = (f.round_ties_even() as i32 + q.zp).clamp(-128, 127) as i8;
            }
        })
    });
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
        multiversion(|| {
            for (d, &v) in out.iter_mut().zip(x) {
                *d = (v as i32).clamp(lo, hi) as i8;
            }
        });
        return;
    }
    let s = qi.scale / qo.scale;
    multiversion(|| {
        for (d, &v) in out.iter_mut().zip(x) {
            *d = requant(v as i32 - qi.zp, s, qo.zp, lo, hi) as i8;
        }
    });
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

/// Dynamic quantization of the rows of `x`: int8 values, and each row's scale and zero point.
pub fn quantize_rows(x: &[f32], row: usize, out: &mut [i8], scales: &mut [f32], zps: &mut [i32]) {
    if row == 0 {
        return;
    }
    let rows = x.chunks_exact(row).zip(out.chunks_exact_mut(row));
    for ((xr, or), (s, z)) in rows.zip(scales.iter_mut().zip(zps.iter_mut())) {
        let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
        for &v in xr {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        let (mult, zp) = qd8_params(lo, hi);
        multiversion(|| {
            for (d, &v) in or.iter_mut().zip(xr) {
                let f = (v * mult).min((127 - zp) as f32);
                *d = (f.round_ties_even() as i32 + zp).clamp(-128, 127) as i8;
            }
        });
        *s = 1.0 / mult;
        *z = zp;
    }
}

/// Activations for the products: `a[r][k] = x[r][k] + 128` as u8, rows padded to `kp` with
/// `pad` (the zero point + 128, so that padding contributes nothing).
pub fn to_u8_rows(x: &[i8], rows: usize, k: usize, kp: usize, pad: u8, a: &mut [u8]) {
    for r in 0..rows {
        let (src, dst) = (&x[r * k..(r + 1) * k], &mut a[r * kp..(r + 1) * kp]);
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = (v as u8) ^ 0x80;
        }
        dst[k..].fill(pad);
    }
}

/// NHWC im2col of int8 rows `p0 .. p0 + np` into u8 (`x + 128`), padding with `pad`; each row
/// is `kh·kw·cin` values padded to `kp`.
#[allow(clippy::too_many_arguments)]
pub fn im2col_u8(
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
    for (pi, row) in cols.chunks_exact_mut(kp).take(np).enumerate() {
        let p = p0 + pi;
        let (oy, ox) = (p / ow, p % ow);
        for a in 0..w.kh {
            let y = (oy * w.sh + a * w.dh) as isize - w.pad_top as isize;
            for b in 0..w.kw {
                let xx = (ox * w.sw + b * w.dw) as isize - w.pad_left as isize;
                let d = &mut row[(a * w.kw + b) * cin..(a * w.kw + b + 1) * cin];
                if y < 0 || y >= ih as isize || xx < 0 || xx >= iw as isize {
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
    }
}

/// Binary operation on int8 operands with NumPy broadcasting, computed on the dequantized
/// values and requantized (clamped to `lo..=hi`).
#[allow(clippy::too_many_arguments)]
pub fn binary(
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

/// Depthwise convolution weights for int8: `w[tap][c]` widened to i32, i32 biases, and the
/// requantization scale per output channel.
pub struct QDwWeights {
    pub win: Window,
    pub channels: usize,
    pub w: Vec<i32>,
    pub bias: Vec<i32>,
    pub scale: Vec<f32>,
    pub qi: Q,
    pub qo: Q,
    pub lo: i32,
    pub hi: i32,
}

/// The taps of output position `o` inside `0..len`: `(first, last + 1)`.
fn taps(o: usize, stride: usize, dil: usize, pad: usize, k: usize, len: usize) -> (usize, usize) {
    let start = (o * stride) as isize - pad as isize;
    let mut lo = 0;
    while lo < k && start + ((lo * dil) as isize) < 0 {
        lo += 1;
    }
    let mut hi = k;
    while hi > lo && start + (((hi - 1) * dil) as isize) >= len as isize {
        hi -= 1;
    }
    (lo, hi)
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
    {
        return Err(KernelError::invalid(
            "quantized depthwise operands too short",
        ));
    }
    let win = &wt.win;
    let row_len = g.ow * c;
    let rows = g.n * g.oh;
    if row_len == 0 || rows == 0 {
        return Ok(());
    }
    let per = (8192 / row_len).max(1);
    let out = &mut out[..rows * row_len];
    for_chunks_mut(par, out, per * row_len, 1, &|k, o| {
        multiversion(|| {
            let mut acc = [0i32; 256];
            for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                let row = k * per + r;
                let (b, oy) = (row / g.oh, row % g.oh);
                let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
                for ox in 0..g.ow {
                    let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                    let mut c0 = 0;
                    while c0 < c {
                        let cn = (c - c0).min(acc.len());
                        let acc = &mut acc[..cn];
                        acc.copy_from_slice(&wt.bias[c0..c0 + cn]);
                        for ky in ky0..ky1 {
                            let y = oy * win.sh + ky * win.dh - win.pad_top;
                            for kx in kx0..kx1 {
                                let xx = ox * win.sw + kx * win.dw - win.pad_left;
                                let xs = &x[((b * g.ih + y) * g.iw + xx) * c + c0..][..cn];
                                let ws = &wt.w[(ky * win.kw + kx) * c + c0..][..cn];
                                for ((a, &xv), &wv) in acc.iter_mut().zip(xs).zip(ws) {
                                    *a += (xv as i32 - wt.qi.zp) * wv;
                                }
                            }
                        }
                        let dst = &mut orow[ox * c + c0..ox * c + c0 + cn];
                        let sc = &wt.scale[c0..c0 + cn];
                        for ((d, &a), &s) in dst.iter_mut().zip(acc.iter()).zip(sc) {
                            *d = requant(a, s, wt.qo.zp, wt.lo, wt.hi) as i8;
                        }
                        c0 += cn;
                    }
                }
            }
        })
    });
    Ok(())
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
