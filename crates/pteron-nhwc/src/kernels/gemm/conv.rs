//! Convolutions as GEMMs: 1×1 as one product over the pixels, others over im2col blocks of
//! output pixels, transposed ones as a product then a scatter-add.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedB};
use pteron_kernels_cpu::par::for_chunks_mut;

use crate::graph::{Clamp, Conv, ConvKind};

use super::{gerr, AddInto, ConvWeights};

impl ConvWeights {
    /// Packs an NHWC filter `[groups·goc, kh, kw, gic]` and bias.
    pub fn new(
        conv: Conv,
        w: &[f32],
        bias: Option<&[f32]>,
        clamp: Clamp,
    ) -> Result<Self, KernelError> {
        Self::scaled(conv, w, None, bias, clamp)
    }

    /// As [`ConvWeights::new`], each output channel's filter times `scale[channel]` (a
    /// folded batch norm) as it is packed; only for a (not transposed) convolution.
    pub fn scaled(
        conv: Conv,
        w: &[f32],
        scale: Option<&[f32]>,
        bias: Option<&[f32]>,
        clamp: Clamp,
    ) -> Result<Self, KernelError> {
        let (g, gi, go) = (conv.groups, conv.group_in, conv.group_out);
        let (kh, kw) = (conv.win.kh, conv.win.kw);
        let taps = kh.checked_mul(kw).ok_or(KernelError::SizeOverflow)?;
        let k = taps.checked_mul(gi).ok_or(KernelError::SizeOverflow)?;
        let need = k
            .checked_mul(go)
            .and_then(|v| v.checked_mul(g))
            .ok_or(KernelError::SizeOverflow)?;
        if w.len() < need {
            return Err(KernelError::invalid(format!(
                "filter has {} values, needs {need}",
                w.len()
            )));
        }
        let cout = g * go;
        if scale.is_some_and(|s| s.len() < cout || conv.kind != ConvKind::Conv) {
            return Err(KernelError::invalid(
                "filter scale too short, or not a convolution",
            ));
        }
        let mut packed = Vec::with_capacity(g);
        for gr in 0..g {
            let base = gr * go * k;
            packed.push(match conv.kind {
                // B[k][j] = W[g·goc + j][tap][ci] with k = tap·gic + ci.
                ConvKind::Conv => {
                    PackedB::from_transposed(&w[base..], k, go, scale.map(|s| &s[gr * go..]))
                }
                // B[ci][tap·goc + o] = W[g·goc + o][tap][ci].
                _ => PackedB::new(gi, taps * go, |ci, j| {
                    let (t, o) = (j / go, j % go);
                    w[base + o * k + t * gi + ci]
                }),
            });
        }
        let bias = match bias {
            Some(b) if b.len() >= cout => b[..cout].to_vec(),
            Some(_) => return Err(KernelError::invalid("bias too short")),
            None => vec![0.0; cout],
        };
        Ok(ConvWeights {
            conv,
            packed,
            bias,
            clamp,
        })
    }

    pub fn bytes(&self) -> usize {
        self.packed.iter().map(|p| p.bytes()).sum::<usize>() + self.bias.len() * 4
    }

    /// Whether this is a 1×1 convolution of stride 1, no padding, one group (a plain GEMM
    /// over the pixels).
    pub fn is_pointwise(&self) -> bool {
        self.pointwise()
    }

    fn pointwise(&self) -> bool {
        let w = &self.conv.win;
        self.conv.groups == 1
            && (w.kh, w.kw, w.sh, w.sw) == (1, 1, 1, 1)
            && (w.pad_top, w.pad_right, w.pad_bottom, w.pad_left) == (0, 0, 0, 0)
    }

    /// Whether [`run`](Self::run) can add a residual to this convolution's output:
    /// a convolution (not transposed) without a clamp, run as products (not by
    /// [`SmallCin`]).
    pub fn takes_residual(&self) -> bool {
        self.conv.kind == ConvKind::Conv && self.clamp.is_none() && !self.small_cin()
    }

    /// Output pixels per im2col block for an input of `oh·ow` output pixels.
    fn block_pixels(&self, pixels: usize) -> usize {
        let k = self.conv.win.kh * self.conv.win.kw * self.conv.group_in;
        ((4 << 20) / (4 * k.max(1))).max(64).min(pixels.max(1))
    }

    /// Scratch floats a run over `[n, ih, iw, c]` needs.
    pub fn scratch_len(&self, ih: usize, iw: usize) -> Result<usize, KernelError> {
        let w = &self.conv.win;
        match self.conv.kind {
            ConvKind::Conv if self.pointwise() || self.small_cin() => Ok(0),
            ConvKind::Conv => {
                let (oh, ow) = w.out_hw(ih, iw)?;
                let k = w.kh * w.kw * self.conv.group_in;
                self.block_pixels(oh * ow)
                    .checked_mul(k)
                    .ok_or(KernelError::SizeOverflow)
            }
            _ => {
                let rows = self.deconv_block_rows(ih, iw);
                rows.checked_mul(iw)
                    .and_then(|v| v.checked_mul(w.kh * w.kw * self.conv.group_out))
                    .ok_or(KernelError::SizeOverflow)
            }
        }
    }

    fn deconv_block_rows(&self, ih: usize, iw: usize) -> usize {
        let per_row = iw * self.conv.win.kh * self.conv.win.kw * self.conv.group_out * 4;
        ((8 << 20) / per_row.max(1)).clamp(1, ih.max(1))
    }

    /// Runs over `x: [n, ih, iw, groups·gic]` into `out: [n, oh, ow, groups·goc]`, with `add`
    /// (when given) added to the output in the epilogue.
    #[allow(clippy::too_many_arguments)]
    pub fn run(
        &self,
        par: &dyn Parallel,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
        scratch: &mut [f32],
        add: Option<AddInto<'_>>,
    ) -> Result<(), KernelError> {
        let c = &self.conv;
        let (cin, cout) = (c.in_channels(), c.out_channels());
        let in_img = ih * iw * cin;
        let out_img = oh * ow * cout;
        if x.len() < n * in_img || out.len() < n * out_img {
            return Err(KernelError::invalid("convolution operands too short"));
        }
        if let Some(a) = add {
            if !self.takes_residual() || a.r.len() < n * out_img {
                return Err(KernelError::invalid(
                    "residual add: convolution kind or operand size",
                ));
            }
        }
        if c.kind == ConvKind::Deconv {
            return self.run_deconv(par, x, n, ih, iw, out, oh, ow, scratch);
        }
        // `at`: where the output block starts (the residual's block starts there too).
        let epi = |g: usize, at: usize| Epilogue {
            init: Init::ColBias(&self.bias[g * c.group_out..]),
            affine: None,
            residual: add.map(|a| (&a.r[at + g * c.group_out..], cout)),
            clamp: add.map_or(self.clamp, |a| a.clamp),
        };
        if self.pointwise() {
            return gemm(
                par,
                n * ih * iw,
                cout,
                cin,
                MatA::Rows { data: x, lda: cin },
                MatB::Packed(&self.packed[0]),
                out,
                cout,
                &epi(0, 0),
            )
            .map_err(gerr);
        }
        if self.small_cin() {
            self.run_small_cin(par, x, n, ih, iw, out, oh, ow);
            return Ok(());
        }
        let w = &c.win;
        let gi = c.group_in;
        let k = w.kh * w.kw * gi;
        let pixels = oh * ow;
        let bp = self.block_pixels(pixels);
        let cols = scratch
            .get_mut(..bp * k)
            .ok_or_else(|| KernelError::invalid("convolution scratch too small"))?;
        for b in 0..n {
            let xb = &x[b * in_img..(b + 1) * in_img];
            let ob = &mut out[b * out_img..(b + 1) * out_img];
            let mut p0 = 0;
            while p0 < pixels {
                let np = bp.min(pixels - p0);
                for g in 0..c.groups {
                    // Split over the threads (the first layer's im2col, 3 channels gathered
                    // into 27-wide rows, costs as much as its product).
                    let per = 256;
                    for_chunks_mut(par, &mut cols[..np * k], per * k, 1, &|t, part| {
                        let rows = part.len() / k.max(1);
                        im2col(xb, ih, iw, cin, g * gi, gi, w, ow, p0 + t * per, rows, part);
                    });
                    gemm(
                        par,
                        np,
                        c.group_out,
                        k,
                        MatA::Rows {
                            data: &cols[..np * k],
                            lda: k,
                        },
                        MatB::Packed(&self.packed[g]),
                        &mut ob[p0 * cout + g * c.group_out..],
                        cout,
                        &epi(g, b * out_img + p0 * cout),
                    )
                    .map_err(gerr)?;
                }
                p0 += np;
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn run_deconv(
        &self,
        par: &dyn Parallel,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
        scratch: &mut [f32],
    ) -> Result<(), KernelError> {
        let c = &self.conv;
        let w = &c.win;
        let (cin, cout) = (c.in_channels(), c.out_channels());
        let (gi, go) = (c.group_in, c.group_out);
        let taps = w.kh * w.kw;
        let nc = taps * go;
        let rows = self.deconv_block_rows(ih, iw);
        let cols = scratch
            .get_mut(..rows * iw * nc)
            .ok_or_else(|| KernelError::invalid("transposed convolution scratch too small"))?;
        let (in_img, out_img) = (ih * iw * cin, oh * ow * cout);
        for b in 0..n {
            let xb = &x[b * in_img..(b + 1) * in_img];
            let ob = &mut out[b * out_img..(b + 1) * out_img];
            for px in ob.chunks_exact_mut(cout) {
                px.copy_from_slice(&self.bias[..cout]);
            }
            for g in 0..c.groups {
                let mut r0 = 0;
                while r0 < ih {
                    let nr = rows.min(ih - r0);
                    let m = nr * iw;
                    let a = &xb[r0 * iw * cin + g * gi..];
                    gemm(
                        par,
                        m,
                        nc,
                        gi,
                        MatA::Rows { data: a, lda: cin },
                        MatB::Packed(&self.packed[g]),
                        &mut cols[..m * nc],
                        nc,
                        &Epilogue::default(),
                    )
                    .map_err(gerr)?;
                    // Scatter-add every input pixel's taps into the output.
                    for r in 0..nr {
                        let y = r0 + r;
                        for xq in 0..iw {
                            let src = &cols[(r * iw + xq) * nc..(r * iw + xq + 1) * nc];
                            for a_ in 0..w.kh {
                                let oy = (y * w.sh + a_ * w.dh) as isize - w.pad_top as isize;
                                if oy < 0 || oy >= oh as isize {
                                    continue;
                                }
                                for b_ in 0..w.kw {
                                    let ox = (xq * w.sw + b_ * w.dw) as isize - w.pad_left as isize;
                                    if ox < 0 || ox >= ow as isize {
                                        continue;
                                    }
                                    let t = a_ * w.kw + b_;
                                    let d = &mut ob
                                        [(oy as usize * ow + ox as usize) * cout + g * go..][..go];
                                    for (o, s) in d.iter_mut().zip(&src[t * go..(t + 1) * go]) {
                                        *o += *s;
                                    }
                                }
                            }
                        }
                    }
                    r0 += nr;
                }
            }
            if let Some((lo, hi)) = self.clamp {
                for v in ob.iter_mut() {
                    *v = v.max(lo).min(hi);
                }
            }
        }
        let _ = par;
        Ok(())
    }
}

/// Copies `src` into `dst` (same length): a plain loop for a few values, `memcpy` otherwise.
#[inline(always)]
fn copy_small(dst: &mut [f32], src: &[f32]) {
    if src.len() < 16 {
        for (o, v) in dst.iter_mut().zip(src) {
            *o = *v;
        }
    } else {
        dst.copy_from_slice(src);
    }
}

/// Rows `p0 .. p0 + np` of the NHWC im2col matrix of one image, channels `c0 .. c0 + gi`:
/// `cols[p][(a·kw + b)·gi + ci] = x[oy·sh + a·dh − pt][ox·sw + b·dw − pl][c0 + ci]` (0 outside).
#[allow(clippy::too_many_arguments)]
fn im2col(
    x: &[f32],
    ih: usize,
    iw: usize,
    cin: usize,
    c0: usize,
    gi: usize,
    w: &crate::graph::Window,
    ow: usize,
    p0: usize,
    np: usize,
    cols: &mut [f32],
) {
    let k = w.kh * w.kw * gi;
    let seg = w.kw * gi;
    // Columns whose taps are all inside the input, and whether a tap row is then one
    // contiguous run of the input (dilation 1, all channels).
    let x_first = w.pad_left.div_ceil(w.sw).min(ow);
    let x_end = {
        let span = (w.kw - 1) * w.dw;
        let lim = (iw + w.pad_left).saturating_sub(span);
        if lim == 0 {
            0
        } else {
            ((lim - 1) / w.sw + 1).min(ow)
        }
    }
    .max(x_first);
    let contiguous = w.dw == 1 && gi == cin;
    for (pi, row) in cols.chunks_exact_mut(k).take(np).enumerate() {
        let p = p0 + pi;
        let (oy, ox) = (p / ow, p % ow);
        let inside = ox >= x_first && ox < x_end;
        for a in 0..w.kh {
            let y = (oy * w.sh + a * w.dh) as isize - w.pad_top as isize;
            let dst = &mut row[a * seg..(a + 1) * seg];
            if y < 0 || y >= ih as isize {
                dst.fill(0.0);
                continue;
            }
            let xrow = &x[y as usize * iw * cin..(y as usize + 1) * iw * cin];
            if inside && contiguous {
                let s = (ox * w.sw - w.pad_left) * cin;
                copy_small(dst, &xrow[s..s + seg]);
                continue;
            }
            for b in 0..w.kw {
                let xx = (ox * w.sw + b * w.dw) as isize - w.pad_left as isize;
                let d = &mut dst[b * gi..(b + 1) * gi];
                if xx < 0 || xx >= iw as isize {
                    d.fill(0.0);
                } else {
                    let s = xx as usize * cin + c0;
                    copy_small(d, &xrow[s..s + gi]);
                }
            }
        }
    }
}
