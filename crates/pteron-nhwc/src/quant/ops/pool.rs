//! int8 max pooling and global average pooling.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;

use crate::graph::Window;
use crate::kernels::spatial::{taps, Geom};

use super::{multiversion, Q};

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
            multiversion(
                #[inline(always)]
                || {
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
                },
            )
        },
    );
    Ok(())
}

/// int8 mean over the `spatial` positions of `[outer, spatial, c]`, requantized as XNNPACK's
/// mean does: `round((Σx − n·zi) · si/(so·n) + zo)`, the output zero point added *before*
/// rounding to nearest even (the convolutions round first, then add it). The two differ on
/// exact ties with an odd zero point, frequent for small windows (a 2×2 mean of MobileNetV2 at
/// 64×64 input: a quarter of the channels), never seen for 7×7 (issue 28).
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
    multiversion(
        #[inline(always)]
        || {
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
                        let v = (a as f32 * scale + qo.zp as f32).round_ties_even();
                        *d = (v.clamp(lo as f32, hi as f32)) as i8;
                    }
                    c0 += cn;
                }
            }
        },
    );
    Ok(())
}
