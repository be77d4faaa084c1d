//! int8 depthwise convolution: integer sums per tap, XNNPACK's fp32 requantization.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;

use crate::graph::Window;
use crate::kernels::spatial::{taps, Geom};

#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use super::{multiversion, requant_vec, Q};

/// Depthwise convolution weights for int8: `w[tap][c]` widened to i16, i32 biases, and the
/// requantization scale per output channel.
pub struct QDwWeights {
    pub win: Window,
    pub channels: usize,
    pub w: Vec<i16>,
    /// The same filter widened to i32 (the AVX-512 kernel loads it without converting).
    pub w32: Vec<i32>,
    pub bias: Vec<i32>,
    pub scale: Vec<f32>,
    pub qi: Q,
    pub qo: Q,
    pub lo: i32,
    pub hi: i32,
}

/// The output position range whose tap `t` (at `t·dil − pad` from `o·stride`) lies in
/// `0..len`, within `0..out_len`.
fn valid_outputs(
    t: usize,
    stride: usize,
    dil: usize,
    pad: usize,
    len: usize,
    out_len: usize,
) -> (usize, usize) {
    let off = t * dil;
    // o·stride + off ≥ pad  and  o·stride + off − pad < len
    let lo = pad.saturating_sub(off).div_ceil(stride);
    let hi = if off >= pad + len {
        0
    } else {
        (pad + len - off).div_ceil(stride)
    };
    (lo.min(out_len), hi.min(out_len).max(lo.min(out_len)))
}

/// Channels up to which the 3×3 kernels run (their zero-point row lives on the stack); wider
/// layers take the row kernels.
#[cfg(target_arch = "x86_64")]
const ZROW: usize = 4096;

/// Sums held on the stack by the portable row kernel (channels × output columns per block).
const ROW_ACC: usize = 1024;

/// One output row of the int8 depthwise convolution, in blocks of channels and output
/// columns whose sums fit [`ROW_ACC`]: taps applied row by row over every valid output
/// position of the block at once, then requantized.
#[inline(always)]
fn depthwise_row(wt: &QDwWeights, g: &Geom, x: &[i8], b: usize, oy: usize, orow: &mut [i8]) {
    let (c, win) = (g.c, &wt.win);
    let zp = wt.qi.zp as i16;
    let (ky0, ky1) = taps(oy, win.sh, win.dh, win.pad_top, win.kh, g.ih);
    let (lo, hi) = ((wt.lo - wt.qo.zp) as f32, (wt.hi - wt.qo.zp) as f32);
    let mut acc = [0i32; ROW_ACC];
    let mut c0 = 0;
    while c0 < c {
        let cn = (c - c0).min(ROW_ACC);
        let nb = ROW_ACC / cn;
        let mut ox0 = 0;
        while ox0 < g.ow {
            let ox1 = (ox0 + nb).min(g.ow);
            let acc = &mut acc[..(ox1 - ox0) * cn];
            for a in acc.chunks_exact_mut(cn) {
                a.copy_from_slice(&wt.bias[c0..c0 + cn]);
            }
            for ky in ky0..ky1 {
                let y = oy * win.sh + ky * win.dh - win.pad_top;
                let xrow = &x[(b * g.ih + y) * g.iw * c..][..g.iw * c];
                for kx in 0..win.kw {
                    let (o0, o1) = valid_outputs(kx, win.sw, win.dw, win.pad_left, g.iw, g.ow);
                    let w = &wt.w[(ky * win.kw + kx) * c + c0..][..cn];
                    for ox in o0.max(ox0)..o1.min(ox1) {
                        let xx = ox * win.sw + kx * win.dw - win.pad_left;
                        let xs = &xrow[xx * c + c0..][..cn];
                        let a = &mut acc[(ox - ox0) * cn..][..cn];
                        for ((a, &xv), &wv) in a.iter_mut().zip(xs).zip(w) {
                            // |x − zp| ≤ 255 and |w| ≤ 128: the product fits in i16 (zero
                            // points are checked to be int8 at preparation; wrapping keeps
                            // hostile ones panic-free).
                            *a += (xv as i16).wrapping_sub(zp).wrapping_mul(wv) as i32;
                        }
                    }
                }
            }
            for (ox, a) in (ox0..ox1).zip(acc.chunks_exact(cn)) {
                let o = &mut orow[ox * c + c0..][..cn];
                for ((d, &v), &sc) in o.iter_mut().zip(a).zip(&wt.scale[c0..c0 + cn]) {
                    *d = requant_vec(v, sc, wt.qo.zp, lo, hi) as i8;
                }
            }
            ox0 = ox1;
        }
        c0 += cn;
    }
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
        || wt.w32.len() < wt.win.kh * wt.win.kw * c
        || wt.bias.len() < c
        || wt.scale.len() < c
        || wt.win.sw == 0
        || wt.win.sh == 0
    {
        return Err(KernelError::invalid(
            "quantized depthwise operands too short",
        ));
    }
    let row_len = g.ow * c;
    let rows = g.n * g.oh;
    if row_len == 0 || rows == 0 {
        return Ok(());
    }
    let per = (8192 / row_len).max(1);
    let out = &mut out[..rows * row_len];
    #[cfg(target_arch = "x86_64")]
    {
        use pteron_kernels_cpu::simd::{level, Level};
        let l = level();
        let three = (wt.win.kh, wt.win.kw, wt.win.dh, wt.win.dw) == (3, 3, 1, 1);
        if three && matches!(l, Level::Avx512 | Level::Avx2) && c <= ZROW {
            // What a tap outside the image reads: the input zero point (on the stack: no
            // allocation while executing).
            let zbuf = [wt.qi.zp as i8; ZROW];
            let zrow = &zbuf[..c];
            // Chunks of pixels (any boundary): about 32 KiB of output each, at least one per
            // thread.
            let pixels = rows * g.ow;
            let threads = par.num_threads().max(1);
            let chunk = (32768 / c).max(1).min(pixels.div_ceil(threads)).max(1);
            for_chunks_mut(par, out, chunk * c, 1, &|k, o| {
                let p0 = k * chunk;
                // Safety: the level's CPU features (AVX-512 F/BW/VL, with VBMI and VNNI for
                // the paired taps; AVX2 and FMA); a 3×3 window with dilation 1; operand
                // lengths checked at the top; zrow holds c bytes; `o` is pixels p0.. of out.
                unsafe {
                    match l {
                        Level::Avx512 if avx512::has_vbmi_vnni() => {
                            avx512::depthwise_px3x3_vnni(wt, &g, x, zrow, p0, o)
                        }
                        Level::Avx512 => avx512::depthwise_px3x3(wt, &g, x, zrow, p0, o),
                        _ => avx2::depthwise_px3x3(wt, &g, x, zrow, p0, o),
                    }
                }
            });
            return Ok(());
        }
        // (The AVX-512 row kernel keeps up to 16 filter rows.)
        if l == Level::Avx512 && wt.win.kh <= 16 {
            for_chunks_mut(par, out, per * row_len, 1, &|k, o| {
                for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                    let row = k * per + r;
                    let (b, oy) = (row / g.oh, row % g.oh);
                    // Safety: the CPU has AVX-512 (checked above; VBMI and VNNI too for the
                    // second); operand lengths were checked at the top of `depthwise`.
                    unsafe {
                        if avx512::has_vbmi_vnni() {
                            avx512::depthwise_row_vnni(wt, &g, x, b, oy, orow)
                        } else {
                            avx512::depthwise_row(wt, &g, x, b, oy, orow)
                        }
                    };
                }
            });
            return Ok(());
        }
    }
    for_chunks_mut(par, out, per * row_len, 1, &|k, o| {
        multiversion(
            #[inline(always)]
            || {
                for (r, orow) in o.chunks_exact_mut(row_len).enumerate() {
                    let row = k * per + r;
                    depthwise_row(wt, &g, x, row / g.oh, row % g.oh, orow);
                }
            },
        )
    });
    Ok(())
}
