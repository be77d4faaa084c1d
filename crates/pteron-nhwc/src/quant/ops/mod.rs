//! Quantized (int8) kernels other than the products: conversions (quantize, dequantize,
//! requantize, dynamic per-row quantization), binary operations, clamps, depthwise
//! convolution, max and global average pooling, and the preparation of the activation
//! operand of the products (`x + 128` as u8, im2col with the zero point as padding).
//!
//! The arithmetic follows XNNPACK's fp32 requantization: integer sums, then one float scale,
//! rounding to nearest even. Addition and subtraction use XNNPACK's fixed-point multipliers
//! and its rounding (halves up) exactly; the other elementwise operations compute in float
//! from the dequantized operands (results may differ from XNNPACK's by one step).
//! Loops are plain integer code, compiled a second time for AVX-512 / AVX2 where the CPU has
//! them so that the compiler vectorizes them.

use pteron_core::Parallel;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::Window;
use crate::quant::isa::{multiversion, round_small};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod binary;
mod depthwise;
mod pool;
#[cfg(target_arch = "x86_64")]
mod taps;
#[cfg(test)]
mod tests;

pub use binary::binary;
pub use depthwise::{depthwise, QDwWeights};
pub use pool::{global_mean, max_pool};

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

/// float → int8: `q = clamp(round(x / scale) + zp)` (multiplying by the reciprocal, as XNNPACK).
pub fn quantize(par: &dyn Parallel, x: &[f32], q: Q, out: &mut [i8]) {
    let inv = 1.0 / q.scale;
    let n = x.len().min(out.len());
    for_chunks_mut(par, &mut out[..n], 1 << 14, 2, &|k, o| {
        let xs = &x[k << 14..];
        multiversion(
            #[inline(always)]
            || quantize_slice(o, xs, inv, q.zp),
        )
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
        multiversion(
            #[inline(always)]
            || {
                for (d, &v) in o.iter_mut().zip(xs) {
                    *d = (v as i32 - q.zp) as f32 * q.scale;
                }
            },
        )
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
        multiversion(
            #[inline(always)]
            || clamp(x, lo, hi, out),
        );
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
    multiversion(
        #[inline(always)]
        || each(x, qi.zp, s, qo.zp, lo, hi, out),
    );
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
    // The row quantizer for this CPU: a kernel of its instruction set, else the portable
    // loops (the same values).
    let portable = |xr: &[f32], or: &mut [i8]| {
        let (lo, hi) = multiversion(
            #[inline(always)]
            || min_max(xr),
        );
        let (mult, zp) = qd8_params(lo, hi);
        multiversion(
            #[inline(always)]
            || quantize_slice(or, xr, mult, zp),
        );
        (mult, zp)
    };
    type RowKernel = unsafe fn(&[f32], &mut [i8]) -> (f32, i32);
    #[cfg(target_arch = "x86_64")]
    let kernel: Option<RowKernel> = match level() {
        pteron_kernels_cpu::simd::Level::Avx512 => Some(avx512::quantize_row),
        pteron_kernels_cpu::simd::Level::Avx2 => Some(avx2::quantize_row),
        _ => None,
    };
    #[cfg(not(target_arch = "x86_64"))]
    let kernel: Option<RowKernel> = None;
    let rows = x.chunks_exact(row).zip(out.chunks_exact_mut(row));
    for ((xr, or), (s, z)) in rows.zip(scales.iter_mut().zip(zps.iter_mut())) {
        let (mult, zp) = match kernel {
            // Safety: `level` chose a kernel of an instruction set the CPU has.
            Some(k) => unsafe { k(xr, or) },
            None => portable(xr, or),
        };
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

/// XNNPACK's fp32 requantization of one sum, written so that loops of it vectorize: the
/// scaled sum is clamped to the output range (relative to the zero point; the bounds are
/// integers, so clamping before rounding gives what rounding first gives), rounded to nearest
/// even with the 1.5·2²³ trick (exact for |v| < 2²²), then shifted by the zero point.
/// Equal to [`requant`] for every input (`requant_matches_reference` in the tests).
#[inline(always)]
fn requant_vec(acc: i32, scale: f32, zp: i32, lo: f32, hi: f32) -> i32 {
    // min first: a NaN becomes the upper bound, as in `requant` (and XNNPACK's min_ps).
    let f = (acc as f32 * scale).min(hi).max(lo);
    round_small(f).wrapping_add(zp)
}
