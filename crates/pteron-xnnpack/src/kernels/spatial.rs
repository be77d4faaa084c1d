//! NHWC windowed float32 kernels: depthwise convolution, max and average pooling, global
//! average pooling. Vectorized across channels (the innermost NHWC dim); work is split
//! across threads by output rows.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Level, Simd, SimdOp};

use crate::graph::{Clamp, PoolKind, Window};

/// Depthwise filter and bias, `[kh·kw][channels·multiplier]` as XNNPACK stores it.
pub struct DwWeights {
    pub win: Window,
    pub channels: usize,
    pub multiplier: usize,
    pub w: Vec<f32>,
    pub bias: Vec<f32>,
    pub clamp: Clamp,
}

/// The taps of output position `o` that fall inside `0..len`: `(first, last + 1)`.
#[inline]
fn taps(o: usize, stride: usize, dil: usize, pad: usize, k: usize, len: usize) -> (usize, usize) {
    let start = (o * stride) as isize - pad as isize;
    let mut lo = 0;
    while lo < k && start + ((lo * dil) as isize) < 0 {
        lo += 1;
    }
    let mut hi = k;
    while hi > lo && start + ((hi - 1) * dil) as isize >= len as isize {
        hi -= 1;
    }
    (lo, hi)
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

impl SimdOp for DwRow<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (g, wt) = (self.g, self.wt);
        let win = &wt.win;
        let c = g.c;
        let l = S::LANES;
        let (lo, hi) = wt.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let (vlo, vhi) = (s.splat(lo), s.splat(hi));
        let row_len = g.ow * c;
        for (r, orow) in self.out.chunks_exact_mut(row_len).enumerate() {
            let row = self.row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
            let img = &self.x[b * g.ih * g.iw * c..(b + 1) * g.ih * g.iw * c];
            for ox in 0..g.ow {
                let (kx0, kx1) = taps(ox, win.sw, win.dw, win.pad_left, win.kw, g.iw);
                let opx = &mut orow[ox * c..(ox + 1) * c];
                let mut c0 = 0;
                while c0 < c {
                    let m = l.min(c - c0);
                    let ld = |v: &[f32]| if m == l { s.ld(v) } else { s.ld_tail(&v[..m]) };
                    let mut acc = ld(&wt.bias[c0..]);
                    for ky in ky0..ky1 {
                        let y = oy * win.sh + ky * win.dh - win.pad_top;
                        let xrow = &img[y * g.iw * c..];
                        let wrow = &wt.w[ky * win.kw * c..];
                        for kx in kx0..kx1 {
                            let xx = ox * win.sw + kx * win.dw - win.pad_left;
                            acc = s.fma(ld(&xrow[xx * c + c0..]), ld(&wrow[kx * c + c0..]), acc);
                        }
                    }
                    if wt.clamp.is_some() {
                        acc = math::clamp(s, acc, vlo, vhi);
                    }
                    if m == l {
                        s.st(&mut opx[c0..], acc);
                    } else {
                        s.st_tail(&mut opx[c0..c0 + m], acc);
                    }
                    c0 += l;
                }
            }
        }
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
        let (lo, hi) = self.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        let (vlo, vhi) = (s.splat(lo), s.splat(hi));
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
                    let ld = |v: &[f32]| if m == l { s.ld(v) } else { s.ld_tail(&v[..m]) };
                    let mut acc = match self.kind {
                        PoolKind::Max => s.splat(f32::NEG_INFINITY),
                        PoolKind::Avg => s.zero(),
                    };
                    for ky in ky0..ky1 {
                        let y = oy * win.sh + ky * win.dh - win.pad_top;
                        let xrow = &img[y * g.iw * c..];
                        for kx in kx0..kx1 {
                            let xx = ox * win.sw + kx * win.dw - win.pad_left;
                            let v = ld(&xrow[xx * c + c0..]);
                            acc = match self.kind {
                                PoolKind::Max => s.max(acc, v),
                                PoolKind::Avg => s.add(acc, v),
                            };
                        }
                    }
                    if self.kind == PoolKind::Avg {
                        acc = s.mul(acc, scale);
                    }
                    if self.clamp.is_some() {
                        acc = math::clamp(s, acc, vlo, vhi);
                    }
                    if m == l {
                        s.st(&mut opx[c0..], acc);
                    } else {
                        s.st_tail(&mut opx[c0..c0 + m], acc);
                    }
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
        let (lo, hi) = self.clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        for (b, o) in self.out.chunks_exact_mut(c).enumerate() {
            let img = &self.x[b * self.spatial * c..(b + 1) * self.spatial * c];
            let mut c0 = 0;
            while c0 < c {
                let m = l.min(c - c0);
                let ld = |v: &[f32]| if m == l { s.ld(v) } else { s.ld_tail(&v[..m]) };
                let mut acc = s.zero();
                for p in 0..self.spatial {
                    acc = s.add(acc, ld(&img[p * c + c0..]));
                }
                acc = s.mul(acc, scale);
                if self.clamp.is_some() {
                    acc = math::clamp(s, acc, s.splat(lo), s.splat(hi));
                }
                if m == l {
                    s.st(&mut o[c0..], acc);
                } else {
                    s.st_tail(&mut o[c0..c0 + m], acc);
                }
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
