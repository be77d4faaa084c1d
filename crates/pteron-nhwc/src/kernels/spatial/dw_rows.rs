//! Depthwise convolution rows of any window (and multiplier), vectorized across channels.

use pteron_kernels_cpu::simd::{Simd, SimdOp};

use super::{interior_cols, ldm, stm, taps, DwWeights, Geom};

/// Rows of a depthwise convolution of any window and multiplier.
pub(super) struct DwRow<'a> {
    pub(super) g: Geom,
    pub(super) wt: &'a DwWeights,
    pub(super) x: &'a [f32],
    /// Output rows `row0 ..` (row = (n, oy)), as many as `out` holds.
    pub(super) row0: usize,
    pub(super) out: &'a mut [f32],
}

/// Most taps whose weight vectors are kept in registers (larger windows take the plain path).
const DW_TAPS: usize = 25;

/// One channel tile of one output pixel with checked taps.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn dw_pixel<S: Simd>(
    s: S,
    g: &Geom,
    wt: &DwWeights,
    img: &[f32],
    wv: &[S::V; DW_TAPS],
    bias: S::V,
    oy: usize,
    ox: usize,
    ky: (usize, usize),
    c0: usize,
    m: usize,
) -> S::V {
    let win = &wt.win;
    let c = g.c;
    let taps_n = win.kh * win.kw;
    let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
    let mut acc = bias;
    for k in ky.0..ky.1 {
        let y = oy * win.sh + k * win.dh - win.pad_top;
        for kx in kx0..kx1 {
            let xx = ox * win.sw + kx * win.dw - win.pad_left;
            let t = k * win.kw + kx;
            let w = if taps_n <= DW_TAPS {
                wv[t]
            } else {
                ldm(s, &wt.w[t * c + c0..], m)
            };
            acc = s.fma(ldm(s, &img[(y * g.iw + xx) * c + c0..], m), w, acc);
        }
    }
    acc
}

impl SimdOp for DwRow<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (g, wt) = (self.g, self.wt);
        let win = &wt.win;
        let c = g.c;
        let l = S::LANES;
        let clamp = wt.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        let row_len = g.ow * c;
        let taps_n = win.kh * win.kw;
        // Output columns whose every horizontal tap is inside the input.
        let (x_first, x_end) = interior_cols(win, g.iw, g.ow);
        let img_len = g.ih * g.iw * c;
        for (r, orow) in self.out.chunks_exact_mut(row_len).enumerate() {
            let row = self.row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let ky = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
            let img = &self.x[b * img_len..(b + 1) * img_len];
            let mut c0 = 0;
            while c0 < c {
                let m = l.min(c - c0);
                let bias = ldm(s, &wt.bias[c0..], m);
                let mut wv = [s.zero(); DW_TAPS];
                if taps_n <= DW_TAPS {
                    for (t, w) in wv.iter_mut().enumerate().take(taps_n) {
                        *w = ldm(s, &wt.w[t * c + c0..], m);
                    }
                }
                // (A row whose taps all fall in the padding has no interior: its pixels are
                // the bias, by the checked path.)
                let (inner0, inner1) = if taps_n > DW_TAPS || m != l || ky.0 == ky.1 {
                    (g.ow, g.ow)
                } else {
                    (x_first, x_end)
                };
                // Border columns (all columns for a window too large for registers or a
                // channel tail): checked taps.
                for ox in (0..inner0).chain(inner1.max(inner0)..g.ow) {
                    let acc = dw_pixel(s, &g, wt, img, &wv, bias, oy, ox, ky, c0, m);
                    stm(s, acc, clamp, &mut orow[ox * c + c0..], m);
                }
                // Interior: every tap in range, full vectors.
                if taps_n <= DW_TAPS && m == l && inner0 < inner1 {
                    interior(
                        s,
                        &g,
                        wt,
                        img,
                        &wv,
                        bias,
                        clamp,
                        oy,
                        ky,
                        c0,
                        (inner0, inner1),
                        orow,
                    );
                }
                c0 += l;
            }
        }
    }
}

/// Output pixels computed together in the interior (independent FMA chains).
const PX: usize = 4;

/// The interior columns `cols` of one output row, channel tile `c0` (full vectors): every tap
/// is inside the input, so loads are unchecked after one bounds check per row.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn interior<S: Simd>(
    s: S,
    g: &Geom,
    wt: &DwWeights,
    img: &[f32],
    wv: &[S::V; DW_TAPS],
    bias: S::V,
    clamp: Option<(S::V, S::V)>,
    oy: usize,
    ky: (usize, usize),
    c0: usize,
    cols: (usize, usize),
    orow: &mut [f32],
) {
    let win = &wt.win;
    let c = g.c;
    let l = S::LANES;
    let (kw, sw, dw) = (win.kw, win.sw, win.dw);
    // Offsets of the first tap of column `cols.0` per valid kernel row, and the weights of
    // those rows (rows outside the input are skipped).
    let nky = ky.1 - ky.0;
    let y0 = oy * win.sh + ky.0 * win.dh - win.pad_top;
    let x0 = cols.0 * sw - win.pad_left;
    // The last load: row y0 + (nky−1)·dh, column of the last pixel's last tap, plus l lanes.
    let last_x = (cols.1 - 1) * sw - win.pad_left + (kw - 1) * dw;
    let last = ((y0 + (nky - 1) * win.dh) * g.iw + last_x) * c + c0 + l;
    assert!(nky >= 1 && last <= img.len());
    let p = img.as_ptr();
    let col_step = sw * c;
    let tap_step = dw * c;
    let row_step = win.dh * g.iw * c;
    let base0 = (y0 * g.iw + x0) * c + c0;
    let mut ox = cols.0;
    while ox + PX <= cols.1 {
        let base = base0 + (ox - cols.0) * col_step;
        let mut acc = [bias; PX];
        for r in 0..nky {
            let rb = base + r * row_step;
            let wr = (ky.0 + r) * kw;
            for kx in 0..kw {
                let w = wv[wr + kx];
                for (q, a) in acc.iter_mut().enumerate() {
                    // Safety: at most `last − l` (checked above): rows below y0 + nky·dh,
                    // columns up to the last pixel's last tap, lanes c0 .. c0 + l ≤ c.
                    let v = unsafe { s.load(p.add(rb + q * col_step + kx * tap_step)) };
                    *a = s.fma(v, w, *a);
                }
            }
        }
        for (q, a) in acc.iter().enumerate() {
            stm(s, *a, clamp, &mut orow[(ox + q) * c + c0..], l);
        }
        ox += PX;
    }
    while ox < cols.1 {
        let base = base0 + (ox - cols.0) * col_step;
        let mut a = bias;
        for r in 0..nky {
            let rb = base + r * row_step;
            let wr = (ky.0 + r) * kw;
            for kx in 0..kw {
                // Safety: as above.
                let v = unsafe { s.load(p.add(rb + kx * tap_step)) };
                a = s.fma(v, wv[wr + kx], a);
            }
        }
        stm(s, a, clamp, &mut orow[ox * c + c0..], l);
        ox += 1;
    }
}
