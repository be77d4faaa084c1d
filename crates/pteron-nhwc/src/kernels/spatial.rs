//! NHWC windowed float32 kernels: depthwise convolution, max and average pooling, global
//! average pooling. Vectorized across channels (the innermost NHWC dim); work is split
//! across threads by output rows.

use core::ops::Range;

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Level, Simd, SimdOp};

use crate::graph::{Clamp, PoolKind, Window};
use crate::util::Buf;

/// Depthwise filter and bias, `[kh·kw][channels·multiplier]` as XNNPACK stores it, and for
/// 3×3 windows (multiplier 1) the same packed for the pixel kernels.
pub struct DwWeights {
    pub win: Window,
    pub channels: usize,
    pub multiplier: usize,
    pub w: Vec<f32>,
    pub bias: Vec<f32>,
    pub clamp: Clamp,
    /// Tiles of [`DWT`] channels, 64-byte aligned: the tile's biases, then its weights tap by
    /// tap (`[tile][1 + 9][DWT]`, zero past the last channel).
    packed: Option<Buf>,
}

/// Interior pixels computed together by the 3×3 depthwise kernel.
const G: usize = 4;

/// Channels per tile of the packed 3×3 depthwise weights.
const DWT: usize = 16;
/// Floats per packed tile: biases, then 9 taps.
const DW_TILE: usize = 10 * DWT;

impl DwWeights {
    /// `w`: `[kh·kw][channels·multiplier]`; `bias`: `[channels·multiplier]`.
    pub fn new(
        win: Window,
        channels: usize,
        multiplier: usize,
        w: Vec<f32>,
        bias: Vec<f32>,
        clamp: Clamp,
    ) -> Result<Self, KernelError> {
        let co = channels
            .checked_mul(multiplier)
            .ok_or(KernelError::SizeOverflow)?;
        let taps = win
            .kh
            .checked_mul(win.kw)
            .ok_or(KernelError::SizeOverflow)?;
        if w.len() < taps.checked_mul(co).ok_or(KernelError::SizeOverflow)? || bias.len() < co {
            return Err(KernelError::invalid("depthwise filter or bias too short"));
        }
        let packed = if multiplier == 1 && (win.kh, win.kw) == (3, 3) && co <= ZEROS_LEN {
            let tiles = co.div_ceil(DWT);
            let mut p = vec![0.0f32; tiles * DW_TILE];
            for (t, tile) in p.chunks_exact_mut(DW_TILE).enumerate() {
                for j in 0..DWT.min(co - t * DWT) {
                    let ch = t * DWT + j;
                    tile[j] = bias[ch];
                    for k in 0..9 {
                        tile[(k + 1) * DWT + j] = w[k * co + ch];
                    }
                }
            }
            Some(Buf::from_f32(&p)?)
        } else {
            None
        };
        Ok(DwWeights {
            win,
            channels,
            multiplier,
            w,
            bias,
            clamp,
            packed,
        })
    }

    /// Whether the filter is packed for the 3×3 pixel kernels (3×3, multiplier 1, at most
    /// [`ZEROS_LEN`] channels).
    pub fn is_packed_3x3(&self) -> bool {
        self.packed.is_some()
    }

    /// Bytes held (filter, bias and the packed copy).
    pub fn bytes(&self) -> usize {
        (self.w.len() + self.bias.len()) * 4 + self.packed.as_ref().map_or(0, |p| p.len())
    }
}

/// The taps of output position `o` that fall inside `0..len`: `(first, last + 1)`, in closed
/// form (the kernel size and padding come from the file and may be huge; a loop over the taps
/// outside the input would make a tiny model hang).
#[inline]
pub(crate) fn taps(
    o: usize,
    stride: usize,
    dil: usize,
    pad: usize,
    k: usize,
    len: usize,
) -> (usize, usize) {
    // Saturating: a start past i64::MAX lies past the input either way. Dims fit in i64.
    let start = (o as i64).saturating_mul(stride as i64) - pad as i64;
    let r = pteron_kernels::pool::inside_taps(start, k, dil, len as i64);
    (r.start, r.end)
}

/// Geometry of one windowed pass over `[n, ih, iw, c]` into `[n, oh, ow, c·mult]`.
#[derive(Clone, Copy)]
pub struct Geom {
    pub n: usize,
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub c: usize,
}

struct DwRow<'a> {
    g: Geom,
    wt: &'a DwWeights,
    x: &'a [f32],
    /// Output rows `row0 ..` (row = (n, oy)), as many as `out` holds.
    row0: usize,
    out: &'a mut [f32],
}

/// Most taps whose weight vectors are kept in registers (larger windows take the plain path).
const DW_TAPS: usize = 25;

/// Loads `m` lanes (a full vector when `m` is the width).
#[inline(always)]
fn ldm<S: Simd>(s: S, v: &[f32], m: usize) -> S::V {
    if m == S::LANES {
        s.ld(v)
    } else {
        s.ld_tail(&v[..m])
    }
}

/// Clamps (when asked) and stores `m` lanes.
#[inline(always)]
fn stm<S: Simd>(s: S, acc: S::V, clamp: Option<(S::V, S::V)>, o: &mut [f32], m: usize) {
    let acc = match clamp {
        Some((lo, hi)) => math::clamp(s, acc, lo, hi),
        None => acc,
    };
    if m == S::LANES {
        s.st(o, acc);
    } else {
        s.st_tail(&mut o[..m], acc);
    }
}

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

fn rows_parallel(
    par: &dyn Parallel,
    out: &mut [f32],
    row_len: usize,
    rows: usize,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    if row_len == 0 || rows == 0 {
        return;
    }
    // Chunks of whole rows, about 32 KiB of output each.
    let per = (8192 / row_len).max(1);
    let out = &mut out[..rows * row_len];
    for_chunks_mut(par, out, per * row_len, 1, &|k, o| f(k * per, o));
}

/// Zeros that a tap outside the input reads (the indirect kernels point such taps here).
pub(crate) static ZEROS: [f32; ZEROS_LEN] = [0.0; ZEROS_LEN];
/// Channels up to which the indirect kernels run (a tap reads at most this many zeros).
pub(crate) const ZEROS_LEN: usize = 4096;

/// For output pixel `(oy, ox)`, the offset in `img` (`[ih, iw, c]`) of each tap's pixel
/// (`px[a·kw + b]`), or `None` for a tap outside the input (read as zeros).
///
/// The arithmetic wraps: the window comes from the file, and a position that wraps around is
/// outside the input or a valid pixel all the same, never an address outside `img`.
#[inline(always)]
pub(crate) fn tap_offsets(
    win: &Window,
    ih: usize,
    iw: usize,
    c: usize,
    oy: usize,
    ox: usize,
    px: &mut [Option<usize>],
) {
    for a in 0..win.kh {
        let y = oy
            .wrapping_mul(win.sh)
            .wrapping_add(a.wrapping_mul(win.dh))
            .wrapping_sub(win.pad_top);
        for b in 0..win.kw {
            let x = ox
                .wrapping_mul(win.sw)
                .wrapping_add(b.wrapping_mul(win.dw))
                .wrapping_sub(win.pad_left);
            px[a * win.kw + b] = (y < ih && x < iw).then(|| (y * iw + x) * c);
        }
    }
}

/// 3×3 depthwise rows over the packed weights, XNNPACK's way round: pixel by pixel, the
/// channels inside, so each tap's pixel is read front to back and the weights stream from one
/// aligned block. Interior pixels address their taps from three row pointers; border pixels
/// point the taps outside the input at [`ZEROS`].
struct Dw3x3<'a> {
    g: Geom,
    /// When non-zero, `x` holds only this many input rows of one image, row y in slot
    /// `y % ring` (a ring of rows another kernel fills as the output rows advance).
    ring: usize,
    wt: &'a DwWeights,
    packed: &'a [f32],
    x: &'a [f32],
    row0: usize,
    out: &'a mut [f32],
}

impl SimdOp for Dw3x3<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (g, win) = (self.g, &self.wt.win);
        let c = g.c;
        let clamp = self.wt.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        let row_len = g.iw * c;
        let ring = self.ring;
        let img_len = if ring > 0 { ring } else { g.ih } * row_len;
        // Offset of input row y in an image.
        let row_at = |y: usize| if ring > 0 { y % ring } else { y } * row_len;
        let (x_first, x_end) = interior_cols(win, g.iw, g.ow);
        let cs = win.dw * c;
        let mut offs = [None; 9];
        for (r, orow) in self.out.chunks_exact_mut(g.ow * c).enumerate() {
            let row = self.row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let img = &self.x[b * img_len..(b + 1) * img_len];
            let ky = taps(oy, win.sh, win.dh, win.pad_top, 3, g.ih);
            // Interior pixels of a row whose three window rows are inside: one run.
            let run = if ky == (0, 3) && x_first < x_end {
                x_first..x_end
            } else {
                0..0
            };
            for ox in (0..run.start).chain(run.end.max(run.start)..g.ow) {
                tap_offsets(win, g.ih, g.iw, c, oy, ox, &mut offs);
                let ptrs = offs.map(|o| match o {
                    Some(o) => {
                        let o = row_at(o / row_len) + o % row_len;
                        img[o..o + c].as_ptr()
                    }
                    None => ZEROS.as_ptr(),
                });
                dw3x3_px(s, &ptrs, self.packed, &mut orow[ox * c..][..c], clamp);
            }
            if !run.is_empty() {
                // Rows y0, y0 + dh, y0 + 2·dh from the run's first column; pixel i of the run
                // starts i·sw·c further on.
                let y0 = oy * win.sh - win.pad_top;
                let x0 = run.start * win.sw - win.pad_left;
                let step = win.sw * c;
                let need = (run.len() - 1) * step + 2 * cs + c;
                let at = |a: usize| &img[row_at(y0 + a * win.dh) + x0 * c..][..need];
                let out = &mut orow[run.start * c..run.end * c];
                dw3x3_run(
                    s,
                    [at(0), at(1), at(2)],
                    step,
                    cs,
                    self.packed,
                    out,
                    c,
                    clamp,
                );
            }
        }
    }
}

/// A run of interior output pixels (`out.len() / c` of them): pixel `i` reads tap `(a, b)` at
/// `rows[a][i·step + b·cs ..]`, `c` floats.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn dw3x3_run<S: Simd>(
    s: S,
    rows: [&[f32]; 3],
    step: usize,
    cs: usize,
    packed: &[f32],
    out: &mut [f32],
    c: usize,
    clamp: Option<(S::V, S::V)>,
) {
    let n = out.len() / c;
    let need = match n {
        0 => return,
        n => (n - 1) * step + 2 * cs + c,
    };
    let [r0, r1, r2] = rows.map(|r| r[..need].as_ptr());
    // With the stride equal to the dilation, pixel i + 1's taps are pixel i's shifted by one
    // tap: a group of G reads G + 2 columns of each row, not 3·G.
    let grouped = if step == cs { n / G * G } else { 0 };
    let (groups, rest) = out.split_at_mut(grouped * c);
    for (j, grp) in groups.chunks_exact_mut(G * c).enumerate() {
        // Safety: pixel G·j + G − 1 is in the run, so `G·j·step + (G + 1)·cs + c ≤ need`.
        let rows = unsafe { [r0, r1, r2].map(|r| r.add(G * j * step)) };
        dw3x3_group::<S, G>(s, rows, cs, packed, grp, clamp);
    }
    for (i, opx) in rest.chunks_exact_mut(c).enumerate() {
        let at = (grouped + i) * step;
        // Safety: each row holds `(n − 1)·step + 2·cs + c` floats (sliced above), so every
        // tap pointer starts `c` readable floats.
        let x = unsafe { taps9([r0, r1, r2], at, cs) };
        dw3x3_px(s, &x, packed, opx, clamp);
    }
}

/// The output positions (below `n_out`) along one axis whose window lies inside an input of
/// `n_in`: `o·s − pad ≥ 0` and `o·s − pad + (k − 1)·d < n_in` (empty on any overflow).
pub(crate) fn inside_outputs(
    n_in: usize,
    n_out: usize,
    pad: usize,
    k: usize,
    s: usize,
    d: usize,
) -> Range<usize> {
    let span = k.checked_sub(1).and_then(|k| k.checked_mul(d));
    let lim = span.and_then(|sp| n_in.checked_add(pad)?.checked_sub(sp));
    match (lim, s) {
        (Some(lim), 1..) if lim > 0 => {
            let lo = pad.div_ceil(s);
            let hi = ((lim - 1) / s + 1).min(n_out);
            lo.min(hi)..hi
        }
        _ => 0..0,
    }
}

/// Output columns whose every horizontal tap is inside a row of `iw` pixels.
fn interior_cols(win: &Window, iw: usize, ow: usize) -> (usize, usize) {
    let r = inside_outputs(iw, ow, win.pad_left, win.kw, win.sw, win.dw);
    (r.start, r.end)
}

/// `P` adjacent output pixels (`P ≤ 4`) whose taps step by `cs`: pixel p reads tap `(a, b)`
/// at `rows[a] + (p + b)·cs`; each row starts `(P + 1)·cs + c` readable floats
/// (`c = out.len() / P`).
#[inline(always)]
fn dw3x3_group<S: Simd, const P: usize>(
    s: S,
    rows: [*const f32; 3],
    cs: usize,
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
) {
    let c = out.len() / P;
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    let full = c / DWT;
    let mut o = 0;
    while o < full * DWT {
        // Safety: `o + l ≤ c`, so column P + 1 of each row reads below `(P + 1)·cs + c`; the
        // weights as in `dw3x3_px`; `op` holds P·c floats.
        unsafe {
            let w = w0.add(o / DWT * DW_TILE + o % DWT);
            let wv = |k: usize| s.load(w.add(k * DWT));
            let mut acc0 = [wv(0); P];
            let mut acc1 = [s.zero(); P];
            for (a, r) in rows.into_iter().enumerate() {
                let mut x = [s.zero(); 6];
                for (q, v) in x.iter_mut().enumerate().take(P + 2) {
                    *v = s.load(r.add(q * cs + o));
                }
                for b in 0..3 {
                    let k = wv(3 * a + b + 1);
                    for p in 0..P {
                        // Odd taps onto the bias, even taps apart: `dw9`'s two chains, so
                        // that every path rounds alike.
                        if (3 * a + b) % 2 == 1 {
                            acc0[p] = s.fma(x[p + b], k, acc0[p]);
                        } else {
                            acc1[p] = s.fma(x[p + b], k, acc1[p]);
                        }
                    }
                }
            }
            for p in 0..P {
                s.store(op.add(p * c + o), finish(s, s.add(acc0[p], acc1[p]), clamp));
            }
        }
        o += l;
    }
    if o < c {
        for (p, opx) in out.chunks_exact_mut(c).enumerate() {
            // Safety: pixel p's taps start at `rows[a] + (p + b)·cs ≤ rows[a] + (P + 1)·cs`,
            // each with `c` readable floats.
            let x = unsafe { taps9(rows, p * cs, cs) };
            dw3x3_tail(s, &x, packed, opx, clamp, o);
        }
    }
}

/// The 3×3 tap pointers of a pixel whose window rows start at `rows[a] + at`: tap `(a, b)` at
/// `rows[a] + at + b·cs`.
///
/// Safety: each of those addresses must lie within the allocation of `rows[a]`.
#[inline(always)]
unsafe fn taps9(rows: [*const f32; 3], at: usize, cs: usize) -> [*const f32; 9] {
    // Safety: the caller's contract.
    core::array::from_fn(|t| unsafe { rows[t / 3].add(at + t % 3 * cs) })
}

/// One output pixel from a pointer per tap, each starting `out.len()` readable floats (a
/// pixel, or [`ZEROS`] for a tap outside the input): full channel tiles take whole-vector
/// loads; a channel tail takes loads of the lanes left.
#[inline(always)]
fn dw3x3_px<S: Simd>(
    s: S,
    x: &[*const f32; 9],
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
) {
    let c = out.len();
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    let full = c / DWT;
    let mut o = 0;
    while o < full * DWT {
        // Safety: `o + l ≤ full·DWT ≤ c` floats from each tap pointer and from `op`; the
        // weights of lanes `o ..` sit in tile `o / DWT` at `(o % DWT) + k·DWT`, in `packed`.
        unsafe {
            let xv = x.map(|p| s.load(p.add(o)));
            let acc = dw9(s, &xv, w0.add(o / DWT * DW_TILE + o % DWT));
            s.store(op.add(o), finish(s, acc, clamp));
        }
        o += l;
    }
    dw3x3_tail(s, x, packed, out, clamp, o);
}

/// Channels `o ..` of one pixel as in [`dw3x3_px`], by loads of the lanes left.
#[inline(always)]
fn dw3x3_tail<S: Simd>(
    s: S,
    x: &[*const f32; 9],
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
    mut o: usize,
) {
    let c = out.len();
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    while o < c {
        let m = l.min(c - o);
        // Safety: `m ≤ c − o` lanes from each tap pointer and `op`; the tile of lanes `o ..`
        // is whole in `packed`.
        unsafe {
            let xv = x.map(|p| s.load_partial(p.add(o), m));
            let acc = dw9(s, &xv, w0.add(o / DWT * DW_TILE + o % DWT));
            s.store_partial(op.add(o), finish(s, acc, clamp), m);
        }
        o += l;
    }
}

/// The 3×3 sum: the bias at `w`, then tap `k`'s weights at `w + (k + 1)·DWT`, in two chains.
///
/// Safety: `w` starts a tile's lane group: `10·DWT − (w's lane)` readable floats.
#[inline(always)]
unsafe fn dw9<S: Simd>(s: S, x: &[S::V; 9], w: *const f32) -> S::V {
    let wv = |k: usize| s.load(w.add(k * DWT));
    let mut a0 = wv(0);
    let mut a1 = s.mul(x[0], wv(1));
    a0 = s.fma(x[1], wv(2), a0);
    a1 = s.fma(x[2], wv(3), a1);
    a0 = s.fma(x[3], wv(4), a0);
    a1 = s.fma(x[4], wv(5), a1);
    a0 = s.fma(x[5], wv(6), a0);
    a1 = s.fma(x[6], wv(7), a1);
    a0 = s.fma(x[7], wv(8), a0);
    a1 = s.fma(x[8], wv(9), a1);
    s.add(a0, a1)
}

/// The output clamp, when the node has one.
#[inline(always)]
fn finish<S: Simd>(s: S, acc: S::V, clamp: Option<(S::V, S::V)>) -> S::V {
    match clamp {
        Some((lo, hi)) => math::clamp(s, acc, lo, hi),
        None => acc,
    }
}

/// Depthwise convolution over NHWC `x` into `out` (multiplier 1 vectorized; other
/// multipliers by a plain loop).
pub fn depthwise(
    par: &dyn Parallel,
    wt: &DwWeights,
    g: Geom,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let co = g.c * wt.multiplier;
    let need_in = g.n * g.ih * g.iw * g.c;
    let need_out = g.n * g.oh * g.ow * co;
    if x.len() < need_in || out.len() < need_out || wt.bias.len() < co {
        return Err(KernelError::invalid("depthwise operands too short"));
    }
    if g.c != wt.channels {
        return Err(KernelError::shape(format!(
            "depthwise convolution over {} channels, filter has {}",
            g.c, wt.channels
        )));
    }
    let rows = g.n * g.oh;
    if let (Some(p), true) = (&wt.packed, g.c <= ZEROS_LEN) {
        let l = level();
        let packed = p.f32();
        rows_parallel(par, out, g.ow * co, rows, &|row0, o| {
            run_op_at(
                l,
                Dw3x3 {
                    g,
                    ring: 0,
                    wt,
                    packed,
                    x,
                    row0,
                    out: o,
                },
            )
        });
        return Ok(());
    }
    if wt.multiplier == 1 {
        let l = level();
        rows_parallel(par, out, g.ow * co, rows, &|row0, o| {
            run_op_at(
                l,
                DwRow {
                    g,
                    wt,
                    x,
                    row0,
                    out: o,
                },
            )
        });
        return Ok(());
    }
    let win = &wt.win;
    let mm = wt.multiplier;
    rows_parallel(par, out, g.ow * co, rows, &|row0, o| {
        for (r, orow) in o.chunks_exact_mut(g.ow * co).enumerate() {
            let row = row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
            for ox in 0..g.ow {
                let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                let opx = &mut orow[ox * co..(ox + 1) * co];
                opx.copy_from_slice(&wt.bias[..co]);
                for ky in ky0..ky1 {
                    let y = oy * win.sh + ky * win.dh - win.pad_top;
                    for kx in kx0..kx1 {
                        let xx = ox * win.sw + kx * win.dw - win.pad_left;
                        let xp = &x[((b * g.ih + y) * g.iw + xx) * g.c..][..g.c];
                        let wp = &wt.w[(ky * win.kw + kx) * co..][..co];
                        for (ci, &xv) in xp.iter().enumerate() {
                            for m in 0..mm {
                                opx[ci * mm + m] += xv * wp[ci * mm + m];
                            }
                        }
                    }
                }
                if let Some((lo, hi)) = wt.clamp {
                    for v in opx.iter_mut() {
                        *v = v.max(lo).min(hi);
                    }
                }
            }
        }
    });
    Ok(())
}

/// Output rows `row0 .. row0 + out.len() / (ow·c)` of the 3×3 depthwise convolution of one
/// image (`g.n` = 1) on this thread, from `x` holding input row y at `(y % ring)·iw·c` (the
/// rows those output rows read must be there): `Ok(false)`, with nothing written, when the
/// filter is not packed for the 3×3 kernel.
pub(crate) fn depthwise3x3_ring(
    wt: &DwWeights,
    g: Geom,
    ring: usize,
    row0: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<bool, KernelError> {
    let Some(p) = &wt.packed else {
        return Ok(false);
    };
    if g.c != wt.channels || g.c > ZEROS_LEN || wt.multiplier != 1 || g.n != 1 || ring == 0 {
        return Ok(false);
    }
    let row_out = g.ow * g.c;
    let rows = out.len().checked_div(row_out).unwrap_or(0);
    if x.len() < ring * g.iw * g.c || row0 + rows > g.oh {
        return Err(KernelError::invalid("depthwise operands too short"));
    }
    run_op_at(
        level(),
        Dw3x3 {
            g,
            ring,
            wt,
            packed: p.f32(),
            x,
            row0,
            out: &mut out[..rows * row_out],
        },
    );
    Ok(true)
}

struct PoolRow<'a> {
    g: Geom,
    kind: PoolKind,
    win: Window,
    clamp: Clamp,
    x: &'a [f32],
    row0: usize,
    out: &'a mut [f32],
}

impl SimdOp for PoolRow<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (g, win) = (self.g, &self.win);
        let c = g.c;
        let l = S::LANES;
        let clamp = self.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        for (r, orow) in self.out.chunks_exact_mut(g.ow * c).enumerate() {
            let row = self.row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
            let img = &self.x[b * g.ih * g.iw * c..(b + 1) * g.ih * g.iw * c];
            for ox in 0..g.ow {
                let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                let count = (ky1 - ky0) * (kx1 - kx0);
                let scale = s.splat(if count > 0 { 1.0 / count as f32 } else { 0.0 });
                let opx = &mut orow[ox * c..(ox + 1) * c];
                let mut c0 = 0;
                while c0 < c {
                    let m = l.min(c - c0);
                    let mut acc = match self.kind {
                        PoolKind::Max => s.splat(f32::NEG_INFINITY),
                        PoolKind::Avg => s.zero(),
                    };
                    for ky in ky0..ky1 {
                        let y = oy * win.sh + ky * win.dh - win.pad_top;
                        let xrow = &img[y * g.iw * c..];
                        for kx in kx0..kx1 {
                            let xx = ox * win.sw + kx * win.dw - win.pad_left;
                            let v = ldm(s, &xrow[xx * c + c0..], m);
                            acc = match self.kind {
                                PoolKind::Max => s.max(acc, v),
                                PoolKind::Avg => s.add(acc, v),
                            };
                        }
                    }
                    if self.kind == PoolKind::Avg {
                        acc = s.mul(acc, scale);
                    }
                    stm(s, acc, clamp, &mut opx[c0..], m);
                    c0 += l;
                }
            }
        }
    }
}

/// Max or average pooling (average over the taps inside the input: padding is not counted,
/// as in XNNPACK).
#[allow(clippy::too_many_arguments)]
pub fn pool(
    par: &dyn Parallel,
    kind: PoolKind,
    win: &Window,
    clamp: Clamp,
    g: Geom,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    if x.len() < g.n * g.ih * g.iw * g.c || out.len() < g.n * g.oh * g.ow * g.c {
        return Err(KernelError::invalid("pooling operands too short"));
    }
    let l = level();
    rows_parallel(par, out, g.ow * g.c, g.n * g.oh, &|row0, o| {
        run_op_at(
            l,
            PoolRow {
                g,
                kind,
                win: *win,
                clamp,
                x,
                row0,
                out: o,
            },
        )
    });
    Ok(())
}

struct MeanOp<'a> {
    x: &'a [f32],
    spatial: usize,
    c: usize,
    clamp: Clamp,
    out: &'a mut [f32],
}

impl SimdOp for MeanOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let l = S::LANES;
        let c = self.c;
        let scale = s.splat(1.0 / self.spatial.max(1) as f32);
        let clamp = self.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        for (b, o) in self.out.chunks_exact_mut(c).enumerate() {
            let img = &self.x[b * self.spatial * c..(b + 1) * self.spatial * c];
            let mut c0 = 0;
            while c0 < c {
                let m = l.min(c - c0);
                let mut acc = s.zero();
                for p in 0..self.spatial {
                    acc = s.add(acc, ldm(s, &img[p * c + c0..], m));
                }
                acc = s.mul(acc, scale);
                stm(s, acc, clamp, &mut o[c0..], m);
                c0 += l;
            }
        }
    }
}

/// Mean over the `spatial` middle positions of `[outer, spatial, c]`.
pub fn global_mean(
    l: Level,
    x: &[f32],
    outer: usize,
    spatial: usize,
    c: usize,
    clamp: Clamp,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if x.len() < outer * spatial * c || out.len() < outer * c {
        return Err(KernelError::invalid("global pooling operands too short"));
    }
    run_op_at(
        l,
        MeanOp {
            x,
            spatial,
            c,
            clamp,
            out: &mut out[..outer * c],
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{depthwise, taps, DwWeights, Geom};
    use crate::graph::Window;
    use pteron_kernels_cpu::simd::{with_level, Level};

    /// Depthwise convolution by the definition (multiplier 1).
    #[allow(clippy::too_many_arguments)]
    fn dw_reference(
        win: &Window,
        g: &Geom,
        x: &[f32],
        w: &[f32],
        bias: &[f32],
        clamp: (f32, f32),
    ) -> Vec<f32> {
        let c = g.c;
        let mut out = vec![0.0; g.n * g.oh * g.ow * c];
        for b in 0..g.n {
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    for ch in 0..c {
                        let mut acc = bias[ch];
                        for a in 0..win.kh {
                            for t in 0..win.kw {
                                let y = (oy * win.sh + a * win.dh) as isize - win.pad_top as isize;
                                let xx =
                                    (ox * win.sw + t * win.dw) as isize - win.pad_left as isize;
                                if y < 0 || xx < 0 || y >= g.ih as isize || xx >= g.iw as isize {
                                    continue;
                                }
                                let xi = ((b * g.ih + y as usize) * g.iw + xx as usize) * c + ch;
                                acc += x[xi] * w[(a * win.kw + t) * c + ch];
                            }
                        }
                        out[((b * g.oh + oy) * g.ow + ox) * c + ch] = acc.max(clamp.0).min(clamp.1);
                    }
                }
            }
        }
        out
    }

    /// The 3×3 pixel kernels (interior rows, border pixels through zeros) and the generic
    /// kernel (other windows) against the definition, over strides, dilations, paddings,
    /// channel tails and batches.
    #[test]
    fn depthwise_matches_definition() {
        let mut seed = 7u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &(kh, kw) in &[(3, 3), (3, 3), (5, 5), (2, 3)] {
            for &c in &[1, 5, 16, 17, 40, 48] {
                for &(s, d, pad) in &[(1, 1, 1), (2, 1, 1), (1, 2, 2), (2, 1, 0), (1, 1, 3)] {
                    for &(ih, iw) in &[(1, 1), (3, 4), (7, 6), (5, 12)] {
                        let win = Window {
                            pad_top: pad,
                            pad_right: pad.min(1),
                            pad_bottom: pad.min(1),
                            pad_left: pad,
                            kh,
                            kw,
                            sh: s,
                            sw: s,
                            dh: d,
                            dw: d,
                        };
                        let (oh, ow) = win.out_hw(ih, iw).unwrap();
                        let g = Geom {
                            n: 2,
                            ih,
                            iw,
                            oh,
                            ow,
                            c,
                        };
                        let x: Vec<f32> = (0..2 * ih * iw * c).map(|_| rnd()).collect();
                        let w: Vec<f32> = (0..kh * kw * c).map(|_| rnd()).collect();
                        let bias: Vec<f32> = (0..c).map(|_| rnd()).collect();
                        let clamp = (-0.4, 0.6);
                        let wt = DwWeights::new(win, c, 1, w.clone(), bias.clone(), Some(clamp))
                            .unwrap();
                        let want = dw_reference(&win, &g, &x, &w, &bias, clamp);
                        for lv in [Level::Portable, Level::Avx2, Level::Avx512] {
                            let mut out = vec![f32::NAN; 2 * oh * ow * c];
                            with_level(lv, || {
                                depthwise(&pteron_core::INLINE, &wt, g, &x, &mut out)
                            })
                            .unwrap();
                            for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                                assert!(
                                    (a - b).abs() <= 1e-5,
                                    "{lv:?} {kh}x{kw} c {c} s {s} d {d} pad {pad} {ih}x{iw}: [{i}] {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// The taps by walking every one of them.
    fn taps_by_walking(
        o: usize,
        s: usize,
        d: usize,
        p: usize,
        k: usize,
        len: usize,
    ) -> (usize, usize) {
        let inside: Vec<usize> = (0..k)
            .filter(|&t| {
                let i = (o * s + t * d) as isize - p as isize;
                i >= 0 && i < len as isize
            })
            .collect();
        match (inside.first(), inside.last()) {
            (Some(&a), Some(&b)) => (a, b + 1),
            _ => {
                let (lo, _) = taps(o, s, d, p, k, len);
                (lo, lo)
            }
        }
    }

    #[test]
    fn closed_form_taps_match_walking() {
        for len in 0..6 {
            for k in 1..7 {
                for d in 1..4 {
                    for s in 1..3 {
                        for p in 0..6 {
                            for o in 0..8 {
                                let (lo, hi) = taps(o, s, d, p, k, len);
                                assert!(lo <= hi && hi <= k);
                                let want = taps_by_walking(o, s, d, p, k, len);
                                if want.0 < want.1 {
                                    assert_eq!(
                                        (lo, hi),
                                        want,
                                        "o {o} s {s} d {d} p {p} k {k} len {len}"
                                    );
                                } else {
                                    assert_eq!(lo, hi, "o {o} s {s} d {d} p {p} k {k} len {len}");
                                }
                            }
                        }
                    }
                }
            }
        }
        // A kernel of 2^40 taps over 3 positions costs nothing to clip.
        assert_eq!(
            taps(0, 1, 1, 1 << 39, 1 << 40, 3),
            ((1 << 39), (1 << 39) + 3)
        );
    }
}
