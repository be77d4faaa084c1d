//! AVX2 int8 kernels: rows of the 3×3 depthwise convolution with taps in pairs
//! (`vpmaddwd` on two taps' bytes interleaved and widened to 16 bits), and the dynamic
//! quantization of a row.

use core::arch::x86_64::*;

use super::taps::{taps3x3, PIXELS};
use super::QDwWeights;
use crate::kernels::spatial::Geom;

/// Output pixels `p0 .. p0 + out.len() / c` (flat over images and rows) of a 3×3 depthwise
/// convolution (dilation 1, any stride and padding), 8 channels at a time: for each output,
/// nine tap pointers (a pixel of x, or `zrow`, the input zero point, for taps outside the
/// image, which the folded bias `bias − zp·Σw` cancels), taps multiplied and added in pairs
/// by `vpmaddwd`, then XNNPACK's fp32 requantization (scale, clamp, round to nearest even,
/// add the zero point).
///
/// # Safety
/// The CPU must have AVX2 and FMA; `x` and `wt` hold the sizes `g` and `wt.win` imply
/// (checked by `depthwise`), `wt.win` is 3×3 with dilation 1, `zrow.len() >= g.c`, and the
/// pixels lie inside the output.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn depthwise_px3x3(
    wt: &QDwWeights,
    g: &Geom,
    x: &[i8],
    zrow: &[i8],
    p0: usize,
    out: &mut [i8],
) {
    let c = g.c;
    let zo = _mm256_set1_epi32(wt.qo.zp);
    let zp = _mm256_set1_epi32(wt.qi.zp);
    let lo = _mm256_set1_ps((wt.lo - wt.qo.zp) as f32);
    let hi = _mm256_set1_ps((wt.hi - wt.qo.zp) as f32);
    let npx = out.len() / c.max(1);
    let mut table = [[core::ptr::null::<i8>(); 9]; PIXELS];
    let mut q0 = 0;
    while q0 < npx {
        let q1 = (q0 + PIXELS).min(npx);
        let table = &mut table[..q1 - q0];
        // Safety: pixels p0 + q0 .. p0 + q1 lie inside the output (the caller's contract).
        unsafe { taps3x3(g, &wt.win, x, zrow, p0 + q0, table) };
        let mut c0 = 0;
        while c0 < c {
            let n = (c - c0).min(8);
            // Filter values of the block's channels per tap (zero past the last channel).
            let mut wv = [[0i16; 8]; 10];
            for (t, w) in wv.iter_mut().take(9).enumerate() {
                w[..n].copy_from_slice(&wt.w[t * c + c0..][..n]);
            }
            let mut bias = [0i32; 8];
            bias[..n].copy_from_slice(&wt.bias[c0..c0 + n]);
            let mut scale = [0f32; 8];
            scale[..n].copy_from_slice(&wt.scale[c0..c0 + n]);
            // Safety (this block): the loads read the stack arrays above, 8 bytes at each tap
            // pointer plus c0 when 8 channels remain (a pixel of x or zrow holds c bytes), a
            // copy of the n bytes otherwise; the stores write n bytes of an output pixel.
            unsafe {
                let ld16 = |w: &[i16; 8]| _mm_loadu_si128(w.as_ptr() as *const __m128i);
                // Taps 2q and 2q + 1 (the tenth: zeros) as 16-bit pairs, channel by lane.
                let wpair: [__m256i; 5] = core::array::from_fn(|q| {
                    let (a, b) = (ld16(&wv[2 * q]), ld16(&wv[2 * q + 1]));
                    _mm256_set_m128i(_mm_unpackhi_epi16(a, b), _mm_unpacklo_epi16(a, b))
                });
                let mut wsum = _mm256_setzero_si256();
                for w in &wv[..9] {
                    wsum = _mm256_add_epi32(wsum, _mm256_cvtepi16_epi32(ld16(w)));
                }
                let bias = _mm256_loadu_si256(bias.as_ptr() as *const __m256i);
                let folded = _mm256_sub_epi32(bias, _mm256_mullo_epi32(zp, wsum));
                let sc = _mm256_loadu_ps(scale.as_ptr());
                let load8 = |p: *const i8| -> __m128i {
                    if n == 8 {
                        _mm_loadl_epi64(p.add(c0) as *const __m128i)
                    } else {
                        let mut t = [0i8; 8];
                        core::ptr::copy_nonoverlapping(p.add(c0), t.as_mut_ptr(), n);
                        _mm_loadl_epi64(t.as_ptr() as *const __m128i)
                    }
                };
                for (i, taps) in table.iter().enumerate() {
                    let mut acc = folded;
                    for (q, &w) in wpair.iter().enumerate() {
                        let a = load8(taps[2 * q]);
                        let b = if q < 4 {
                            load8(taps[2 * q + 1])
                        } else {
                            _mm_setzero_si128()
                        };
                        let v = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
                        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(v, w));
                    }
                    // min first: NaN → upper bound, as `requant`.
                    let f = _mm256_max_ps(
                        _mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), sc), hi),
                        lo,
                    );
                    let qv = _mm256_add_epi32(_mm256_cvtps_epi32(f), zo);
                    let p16 = _mm_packs_epi32(
                        _mm256_castsi256_si128(qv),
                        _mm256_extracti128_si256::<1>(qv),
                    );
                    let p8 = _mm_packs_epi16(p16, p16);
                    let out = out.as_mut_ptr().add((q0 + i) * c + c0);
                    if n == 8 {
                        _mm_storel_epi64(out as *mut __m128i, p8);
                    } else {
                        let mut t = [0i8; 16];
                        _mm_storeu_si128(t.as_mut_ptr() as *mut __m128i, p8);
                        core::ptr::copy_nonoverlapping(t.as_ptr(), out, n);
                    }
                }
            }
            c0 += n;
        }
        q0 = q1;
    }
}

/// Dynamic quantization of one row (`quantize_rows`' arithmetic, the same results): min
/// and max ignoring NaNs, XNNPACK's parameters, then clamp, round to nearest even and narrow
/// eight values at a time (the portable loop's tail). Returns the multiplier and zero point.
/// In an 8da4w decode step the portable loops' four passes per product (min, max, quantize,
/// narrow) had cost a few percent of the step.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn quantize_row(x: &[f32], out: &mut [i8]) -> (f32, i32) {
    let n = x.len().min(out.len());
    let (x, out) = (&x[..n], &mut out[..n]);
    // Four pairs of accumulators: min and max have a latency of several cycles.
    let mut lo = [_mm256_set1_ps(f32::INFINITY); 4];
    let mut hi = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
    let mut chunks = x.chunks_exact(32);
    for c in &mut chunks {
        for (j, (l, h)) in lo.iter_mut().zip(&mut hi).enumerate() {
            // Safety: eight floats of the chunk at 8j.
            let v = unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * j)) };
            // min(v, lo) returns lo where v is NaN: NaNs are ignored, as in `min_max`.
            *l = _mm256_min_ps(v, *l);
            *h = _mm256_max_ps(v, *h);
        }
    }
    let (mut l, mut h) = (
        _mm256_min_ps(_mm256_min_ps(lo[0], lo[1]), _mm256_min_ps(lo[2], lo[3])),
        _mm256_max_ps(_mm256_max_ps(hi[0], hi[1]), _mm256_max_ps(hi[2], hi[3])),
    );
    let mut eights = chunks.remainder().chunks_exact(8);
    for c in &mut eights {
        // Safety: eight floats of `c`.
        let v = unsafe { _mm256_loadu_ps(c.as_ptr()) };
        l = _mm256_min_ps(v, l);
        h = _mm256_max_ps(v, h);
    }
    let (mut ls, mut hs) = ([0f32; 8], [0f32; 8]);
    // Safety: eight floats each.
    unsafe {
        _mm256_storeu_ps(ls.as_mut_ptr(), l);
        _mm256_storeu_ps(hs.as_mut_ptr(), h);
    }
    // NaNs of the tail are ignored too (a comparison with NaN is false).
    let rest = eights.remainder();
    let min = ls
        .iter()
        .chain(rest)
        .fold(f32::INFINITY, |m, &v| if v < m { v } else { m });
    let max = hs
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    let (mult, zp) = super::qd8_params(min, max);
    let inv = _mm256_set1_ps(mult);
    let (qlo, qhi) = (
        _mm256_set1_ps((-128 - zp) as f32),
        _mm256_set1_ps((127 - zp) as f32),
    );
    let zpv = _mm256_set1_epi32(zp);
    let mut i = 0;
    while i + 8 <= n {
        // Safety: floats i .. i + 8 of x, bytes i .. i + 8 of out.
        unsafe {
            let v = _mm256_loadu_ps(x.as_ptr().add(i));
            // min first: NaN becomes the upper bound, as `quantize_slice`.
            let f = _mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(v, inv), qhi), qlo);
            // In range after the clamp: the saturating packs keep every value.
            let q = _mm256_add_epi32(_mm256_cvtps_epi32(f), zpv);
            let w = _mm256_packs_epi32(q, q);
            let b = _mm256_packs_epi16(w, w);
            let bytes =
                _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
            _mm_storel_epi64(out.as_mut_ptr().add(i) as *mut __m128i, bytes);
        }
        i += 8;
    }
    super::quantize_slice(&mut out[i..], &x[i..], mult, zp);
    (mult, zp)
}
