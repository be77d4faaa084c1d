//! Max and average pooling, and global average pooling.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::simd::{level, run_op_at, Level, Simd, SimdOp};

use crate::graph::{Clamp, PoolKind, Window};

use super::{ldm, rows_parallel, stm, taps, Geom};

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
