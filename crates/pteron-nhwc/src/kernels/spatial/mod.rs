//! NHWC windowed float32 kernels: depthwise convolution, max and average pooling, global
//! average pooling. Vectorized across channels (the innermost NHWC dim); work is split
//! across threads by output rows.

use core::ops::Range;

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd};

use crate::graph::{Clamp, Window};
use crate::util::Buf;

mod dw3x3;
mod dw_rows;
mod pool;
#[cfg(test)]
mod tests;

pub(crate) use dw3x3::depthwise3x3_ring;
pub use pool::{global_mean, pool};

use dw3x3::Dw3x3;
use dw_rows::DwRow;

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

/// Output columns whose every horizontal tap is inside a row of `iw` pixels.
fn interior_cols(win: &Window, iw: usize, ow: usize) -> (usize, usize) {
    let r = inside_outputs(iw, ow, win.pad_left, win.kw, win.sw, win.dw);
    (r.start, r.end)
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

/// Runs `f(first row, rows)` over chunks of whole rows of `out` (about 32 KiB each), in
/// parallel.
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
