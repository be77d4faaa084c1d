//! The quantized convolutions beyond the static int8 im2col product of [`super::exec`]:
//!
//! - dynamically quantized convolution: `qdint8` images (one scale and zero point per image,
//!   from a float32 → qdint8 convert with three or more non-batch dims) × `qcint8` filters →
//!   float32, `y = (acc − zp·Σw) · s_image · s_w[c] + bias[c]`, as im2col blocks over the
//!   dynamic int8 product of [`crate::quant::gemm`], group by group (padding taps hold the
//!   image's zero point, so they contribute nothing);
//! - static int8 transposed convolution: each output pixel gathers the input pixels whose taps
//!   land on it, `acc = bias[c] + Σ (x − zp_in)·w`, requantized as the static int8
//!   convolution (`requant`, XNNPACK's fp32 path). XNNPACK points taps outside the input at a
//!   buffer of the input zero point, which contributes nothing either, so the sums are the
//!   same integers.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;

use crate::graph::{Conv, Window};
use crate::quant::gemm::{qgemm, requant, Epilogue, Out, QWeights};
use crate::quant::ops::{im2col_u8, Q};

/// A static int8 transposed convolution, prepared.
pub struct QDeconv {
    pub conv: Conv,
    /// The filter `[groups·go][kh][kw][gi]` (the file's layout), widened.
    pub w: Vec<i32>,
    /// Per output channel (int32 bias, no zero-point correction).
    pub bias: Vec<i32>,
    /// `s_in · s_w[c] / s_out` per output channel.
    pub scale: Vec<f32>,
    pub qi: Q,
    pub qo: Q,
    pub lo: i32,
    pub hi: i32,
}

fn short(what: &str) -> KernelError {
    KernelError::invalid(format!("{what} too short"))
}

/// `n` images `[ih, iw, cin]` → `[oh, ow, cout]`, int8. Output rows are split over the threads.
#[allow(clippy::too_many_arguments)]
pub fn deconv(
    par: &dyn Parallel,
    p: &QDeconv,
    x: &[i8],
    n: usize,
    ih: usize,
    iw: usize,
    out: &mut [i8],
    oh: usize,
    ow: usize,
) -> Result<(), KernelError> {
    let c = &p.conv;
    let w = &c.win;
    let (g, gi, go) = (c.groups, c.group_in, c.group_out);
    let (cin, cout) = (g * gi, g * go);
    let taps = w.kh * w.kw;
    let in_len = [n, ih, iw, cin]
        .iter()
        .try_fold(1usize, |a, &v| a.checked_mul(v))
        .ok_or(KernelError::SizeOverflow)?;
    let out_len = [n, oh, ow, cout]
        .iter()
        .try_fold(1usize, |a, &v| a.checked_mul(v))
        .ok_or(KernelError::SizeOverflow)?;
    if x.len() < in_len {
        return Err(short("transposed convolution input"));
    }
    if out.len() < out_len {
        return Err(short("transposed convolution output"));
    }
    if p.w.len() < cout * taps * gi || p.bias.len() < cout || p.scale.len() < cout {
        return Err(short("transposed convolution parameters"));
    }
    if out_len == 0 {
        return Ok(());
    }
    let zp = p.qi.zp;
    // The input row and tap row (or column) that land on output coordinate `o`, if any.
    let src = |o: usize, a: usize, pad: usize, d: usize, s: usize, len: usize| {
        let t = (o + pad).checked_sub(a * d)?;
        (t % s == 0 && t / s < len).then_some(t / s)
    };
    for_chunks_mut(par, &mut out[..out_len], ow * cout, 1, &|r, row| {
        let (bi, oy) = (r / oh, r % oh);
        // One output channel at a time: its i32 sum over the taps that land on the pixel
        // (integer sums: the order of the terms does not change them), no buffer per row.
        for (ox, px) in row.chunks_exact_mut(cout).enumerate() {
            for (oc, o) in px.iter_mut().enumerate() {
                let gr = oc / go;
                let mut acc = p.bias[oc];
                for a in 0..w.kh {
                    let Some(iy) = src(oy, a, w.pad_top, w.dh, w.sh, ih) else {
                        continue;
                    };
                    for b in 0..w.kw {
                        let Some(ix) = src(ox, b, w.pad_left, w.dw, w.sw, iw) else {
                            continue;
                        };
                        let t = a * w.kw + b;
                        let xs = &x[((bi * ih + iy) * iw + ix) * cin + gr * gi..][..gi];
                        let wr = &p.w[(oc * taps + t) * gi..][..gi];
                        let sum = xs
                            .iter()
                            .zip(wr)
                            .fold(0i32, |s, (&u, &v)| s.wrapping_add((i32::from(u) - zp) * v));
                        acc = acc.wrapping_add(sum);
                    }
                }
                *o = requant(acc, p.scale[oc], p.qo.zp, p.lo, p.hi) as i8;
            }
        }
    });
    Ok(())
}

/// A convolution over dynamically quantized images, prepared: one packed filter per group.
pub struct DConv {
    /// Group `g`'s filter: `go` outputs over `kh·kw·gi` inputs.
    pub w: Vec<QWeights>,
    /// `s_w[c]` per output channel.
    pub scale: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub lo: f32,
    pub hi: f32,
}

impl DConv {
    pub fn bytes(&self) -> usize {
        self.w.iter().map(|w| w.bytes()).sum::<usize>() + self.scale.len() * 4
    }

    /// Output pixels per im2col block (about 4 MiB of u8 rows), for `pixels` output pixels
    /// per image.
    fn block(&self, pixels: usize) -> usize {
        let kp = self.w.first().map_or(0, |w| w.quads * 4);
        ((4 << 20) / kp.max(1)).max(64).min(pixels.max(1))
    }

    /// Scratch bytes for images `[ih, iw, cin]` and `oh·ow` output pixels: a block of im2col
    /// rows, and with several groups one group's channels of an image.
    pub fn scratch_len(&self, ih: usize, iw: usize, cin: usize, pixels: usize) -> usize {
        let kp = self.w.first().map_or(0, |w| w.quads * 4);
        let groups = self.w.len().max(1);
        let split = if groups > 1 {
            ih * iw * (cin / groups)
        } else {
            0
        };
        let bp = self.block(pixels);
        // im2col block, one group's channels, then a block's row scales and zero points (f32
        // and i32, 4-byte aligned after the bytes before them).
        (bp * kp + split).next_multiple_of(4) + 8 * bp
    }
}

/// A dynamically quantized convolution of `n` images `[ih, iw, cin]` (`data`, with `rows`
/// scales and zero points: one per image, or one for all) into float32 `[n, oh, ow, oc]`.
#[allow(clippy::too_many_arguments)]
pub fn dynamic_conv(
    par: &dyn Parallel,
    p: &DConv,
    win: &Window,
    [n, ih, iw, cin]: [usize; 4],
    (oh, ow): (usize, usize),
    data: &[i8],
    row_scales: &[f32],
    row_zps: &[i32],
    out: &mut [f32],
    scratch: &mut [u8],
) -> Result<(), KernelError> {
    let rows = row_scales.len().min(row_zps.len());
    if rows != n && rows != 1 {
        return Err(KernelError::shape(format!(
            "dynamic int8 convolution input with {rows} quantization rows for {n} images"
        )));
    }
    let groups = p.w.len();
    let Some(w0) = p.w.first() else {
        return Err(KernelError::invalid(
            "dynamic int8 convolution without a filter",
        ));
    };
    let (gi, go) = (cin / groups, w0.n);
    if gi * groups != cin || w0.k != win.kh * win.kw * gi {
        return Err(KernelError::shape(format!(
            "dynamic int8 convolution over {cin} channels for {groups} filters of {} inputs",
            w0.k
        )));
    }
    let oc = go * groups;
    if p.scale.len() < oc || p.bias.as_ref().is_some_and(|b| b.len() < oc) {
        return Err(short("dynamic int8 convolution parameters"));
    }
    let pixels = oh * ow;
    let (in_img, out_img) = (ih * iw * cin, pixels * oc);
    if data.len() < n * in_img {
        return Err(short("dynamic int8 convolution input"));
    }
    if out.len() < n * out_img {
        return Err(short("dynamic int8 convolution output"));
    }
    let kp = w0.quads * 4;
    let bp = p.block(pixels);
    let need = p.scratch_len(ih, iw, cin, pixels);
    let (bytes, rows_q) = scratch
        .get_mut(..need)
        .ok_or_else(|| short("dynamic int8 convolution scratch"))?
        .split_at_mut(need - 8 * bp);
    let (ss, zz) = rows_q.split_at_mut(4 * bp);
    let (ss, zz): (&mut [f32], &mut [i32]) = (
        bytemuck::try_cast_slice_mut(ss).map_err(|_| short("aligned dynamic int8 scratch"))?,
        bytemuck::try_cast_slice_mut(zz).map_err(|_| short("aligned dynamic int8 scratch"))?,
    );
    let (cols_all, split) = bytes.split_at_mut(bp * kp);
    let split: &mut [i8] = bytemuck::cast_slice_mut(split);
    for bi in 0..n {
        let r = if rows == 1 { 0 } else { bi };
        let (s, zp) = (row_scales[r], row_zps[r]);
        if !(-128..=127).contains(&zp) {
            return Err(KernelError::invalid(format!(
                "dynamic int8 zero point {zp}"
            )));
        }
        ss.fill(s);
        zz.fill(zp);
        let pad = (zp + 128) as u8;
        let xb = &data[bi * in_img..(bi + 1) * in_img];
        let ob = &mut out[bi * out_img..(bi + 1) * out_img];
        for (g, w) in p.w.iter().enumerate() {
            if w.n != go || w.k != w0.k {
                return Err(KernelError::invalid(
                    "dynamic int8 convolution group filters differ",
                ));
            }
            let xg: &[i8] = if groups == 1 {
                xb
            } else {
                for (d, px) in split.chunks_exact_mut(gi).zip(xb.chunks_exact(cin)) {
                    d.copy_from_slice(&px[g * gi..(g + 1) * gi]);
                }
                split
            };
            let epi = Epilogue::Dequant {
                rows: ss,
                zps: zz,
                scale: &p.scale[g * go..],
                bias: p.bias.as_deref().map(|b| &b[g * go..]),
                lo: p.lo,
                hi: p.hi,
            };
            let mut p0 = 0;
            while p0 < pixels {
                let np = bp.min(pixels - p0);
                let cols = &mut cols_all[..np * kp];
                im2col_u8(par, xg, ih, iw, gi, win, ow, p0, np, kp, pad, cols);
                let o = Out::F32(&mut ob[p0 * oc + g * go..]);
                qgemm(par, cols, kp, np, w, &epi, o, oc)?;
                p0 += np;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
