//! AVX-512 int8 kernels: rows of the depthwise convolution (with VBMI + VNNI taps in pairs)
//! and the dynamic quantization of a row.

use core::arch::x86_64::*;

use super::taps::{taps3x3, PIXELS};
use super::QDwWeights;
use crate::kernels::spatial::{taps, Geom};

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
            let bias = _mm512_maskz_loadu_epi32(m, wt.bias.as_ptr().add(c0));
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
                31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                20, 4, 19, 3, 18, 2, 17, 1, 16, 0,
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
                _mm512_mask_cvtepi32_storeu_epi8(orow.as_mut_ptr().add(ox * c + c0), m, q);
            }
        }
        c0 += n;
    }
}

/// Output pixels `p0 .. p0 + out.len() / c` (flat over images and rows) of a 3×3 depthwise
/// convolution with dilation 1 (any stride and padding), 16 channels at a time: every
/// output, border ones included, takes nine taps, those outside the image reading `zrow`
/// (the input zero point, whose product with any weight the folded bias cancels), so that
/// borders run the interior's code (on a 7×7 map half of the outputs touch a border; their
/// per-tap path was most of the time). Pixels, not rows, are the unit so that the block's
/// filter setup is shared by up to 64 outputs also on small maps.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL; `x` and `wt` hold the sizes `g` and `wt.win` imply
/// (checked by `depthwise`); `zrow.len() >= g.c`; the pixels lie inside the output.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn depthwise_px3x3(
    wt: &QDwWeights,
    g: &Geom,
    x: &[i8],
    zrow: &[i8],
    p0: usize,
    out: &mut [i8],
) {
    // Safety: the caller's contract.
    unsafe { px3x3::<false>(wt, g, x, zrow, p0, out) }
}

/// [`depthwise_px3x3`] with taps in pairs ([`has_vbmi_vnni`]).
///
/// # Safety
/// As [`depthwise_px3x3`], and the CPU must have AVX-512 VBMI and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vnni")]
pub unsafe fn depthwise_px3x3_vnni(
    wt: &QDwWeights,
    g: &Geom,
    x: &[i8],
    zrow: &[i8],
    p0: usize,
    out: &mut [i8],
) {
    // Safety: the caller's contract.
    unsafe { px3x3::<true>(wt, g, x, zrow, p0, out) }
}

#[inline(always)]
unsafe fn px3x3<const V: bool>(
    wt: &QDwWeights,
    g: &Geom,
    x: &[i8],
    zrow: &[i8],
    p0: usize,
    out: &mut [i8],
) {
    let c = g.c;
    let zo = _mm512_set1_epi32(wt.qo.zp);
    let zp = _mm512_set1_epi32(wt.qi.zp);
    let lo = _mm512_set1_ps((wt.lo - wt.qo.zp) as f32);
    let hi = _mm512_set1_ps((wt.hi - wt.qo.zp) as f32);
    let none = _mm512_setzero_si512();
    let idx = _mm256_set_epi8(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
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
            let n = (c - c0).min(16);
            let full = n == 16;
            let m: __mmask16 = if full { 0xFFFF } else { (1u16 << n) - 1 };
            // Safety (this block): channels c0..c0 + n < c of the filter (9·c values), bias,
            // scale, the tap pointers (pixels of x, or zrow's c bytes) and out; full vectors
            // only when 16 channels remain, masked otherwise.
            unsafe {
                let w = |t: usize| _mm512_maskz_loadu_epi32(m, wt.w32.as_ptr().add(t * c + c0));
                let bias = _mm512_maskz_loadu_epi32(m, wt.bias.as_ptr().add(c0));
                let sc = _mm512_maskz_loadu_ps(m, wt.scale.as_ptr().add(c0));
                let mut wsum = none;
                for t in 0..9 {
                    wsum = _mm512_add_epi32(wsum, w(t));
                }
                // Σ (x − zp)·w = Σ x·w − zp·Σ w.
                let folded = _mm512_sub_epi32(bias, _mm512_mullo_epi32(zp, wsum));
                let base = out.as_mut_ptr();
                let dst = |i: usize| base.add((q0 + i) * c + c0);
                if V {
                    // Taps in pairs (2q, 2q + 1) as 16-bit pairs per lane; the ninth with a
                    // zero partner.
                    let lo16 = _mm512_set1_epi32(0xFFFF);
                    let wpair: [__m512i; 5] = core::array::from_fn(|q| {
                        let w1 = if 2 * q + 1 < 9 { w(2 * q + 1) } else { none };
                        _mm512_or_si512(
                            _mm512_and_si512(w(2 * q), lo16),
                            _mm512_slli_epi32::<16>(w1),
                        )
                    });
                    for (i, taps) in table.iter().enumerate() {
                        let mut acc = folded;
                        for (q, &wq) in wpair.iter().enumerate() {
                            let (t0, t1) = (2 * q, (2 * q + 1).min(8));
                            let v = pair(full, m, idx, taps[t0].add(c0), taps[t1].add(c0));
                            acc = _mm512_dpwssd_epi32(acc, v, wq);
                        }
                        store(acc, sc, lo, hi, zo, m, dst(i));
                    }
                } else {
                    let ws: [__m512i; 9] = core::array::from_fn(w);
                    for (i, taps) in table.iter().enumerate() {
                        let mut acc = folded;
                        for t in 0..9 {
                            let xp = taps[t].add(c0);
                            let xv = if full {
                                _mm512_cvtepi8_epi32(_mm_loadu_si128(xp as *const __m128i))
                            } else {
                                _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, xp))
                            };
                            acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(xv, ws[t]));
                        }
                        store(acc, sc, lo, hi, zo, m, dst(i));
                    }
                }
            }
            c0 += n;
        }
        q0 = q1;
    }
}

/// XNNPACK's fp32 requantization of 16 sums and a narrowing store of the lanes of `m`.
///
/// # Safety
/// AVX-512 F/BW/VL; the lanes of `m` at `out` writable.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
#[inline]
unsafe fn store(
    acc: __m512i,
    sc: __m512,
    lo: __m512,
    hi: __m512,
    zo: __m512i,
    m: __mmask16,
    out: *mut i8,
) {
    // min first: NaN → upper bound, as `requant`.
    let f = _mm512_max_ps(
        _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), sc), hi),
        lo,
    );
    let q = _mm512_add_epi32(_mm512_cvtps_epi32(f), zo);
    // Safety: the caller's pointer.
    unsafe { _mm512_mask_cvtepi32_storeu_epi8(out, m, q) };
}
