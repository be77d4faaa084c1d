//! GEMM-based float32 kernels over NHWC data, on `pteron_kernels_cpu::gemm`: fully connected,
//! convolution (1×1 as one GEMM, otherwise im2col in blocks of output pixels), transposed
//! convolution (GEMM then scatter-add), batch matrix multiply. Constant filters are packed
//! once, at init.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, GemmError, Init, MatA, MatB, PackedB};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::{Clamp, Conv, ConvKind};

fn gerr(e: GemmError) -> KernelError {
    KernelError::invalid(format!("gemm: {}", e.0))
}

/// Outputs per GEMV panel.
const GP: usize = 16;
/// Rows below which a constant filter is laid out for matrix-vector products.
const GEMV_ROWS: usize = 4;

/// The filter of a fully connected node: packed at init when constant, else read in place.
pub enum FcFilter {
    Packed(PackedB),
    /// For few rows: panels of [`GP`] outputs, `data[p][k][j] = W[p·GP + j][k]` (zero past `oc`).
    Gemv(Vec<f32>),
    /// Read from the value at run time.
    Dynamic {
        transpose: bool,
    },
}

impl FcFilter {
    /// Packs `[oc, ic]` (or `[ic, oc]` when `transpose`) filter data for inputs of about
    /// `rows` rows.
    pub fn pack(
        w: &[f32],
        ic: usize,
        oc: usize,
        transpose: bool,
        rows: usize,
    ) -> Result<Self, KernelError> {
        let need = ic.checked_mul(oc).ok_or(KernelError::SizeOverflow)?;
        if w.len() < need {
            return Err(KernelError::invalid("filter too short"));
        }
        let at = |k: usize, j: usize| {
            if transpose {
                w[k * oc + j]
            } else {
                w[j * ic + k]
            }
        };
        if rows < GEMV_ROWS {
            let panels = oc.div_ceil(GP);
            let mut data = vec![0.0f32; panels * ic * GP];
            for p in 0..panels {
                for k in 0..ic {
                    for j in 0..GP.min(oc - p * GP) {
                        data[(p * ic + k) * GP + j] = at(k, p * GP + j);
                    }
                }
            }
            return Ok(FcFilter::Gemv(data));
        }
        Ok(FcFilter::Packed(PackedB::new(ic, oc, at)))
    }
    pub fn bytes(&self) -> usize {
        match self {
            FcFilter::Packed(p) => p.bytes(),
            FcFilter::Gemv(d) => d.len() * 4,
            FcFilter::Dynamic { .. } => 0,
        }
    }
}

/// Panels `p0 ..` (as many as `out` covers) of `out = clamp(W·x + bias)`.
struct GemvOp<'a> {
    x: &'a [f32],
    w: &'a [f32],
    ic: usize,
    oc: usize,
    p0: usize,
    bias: Option<&'a [f32]>,
    clamp: Clamp,
    out: &'a mut [f32],
}

impl SimdOp for GemvOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        const G: usize = 4;
        let l = S::LANES;
        let nv = GP / l; // 1 (AVX-512) or 2 (8 lanes)
        let ic = self.ic;
        let clamp = self.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        let panels = self.out.len().div_ceil(GP);
        let mut q0 = 0;
        while q0 < panels {
            let g = G.min(panels - q0);
            let mut acc = [[s.zero(); 2]; G];
            for k in 0..ic {
                let xv = s.splat(self.x[k]);
                for (q, a) in acc.iter_mut().enumerate().take(g) {
                    let base = ((self.p0 + q0 + q) * ic + k) * GP;
                    for (v, av) in a.iter_mut().enumerate().take(nv) {
                        *av = s.fma(xv, s.ld(&self.w[base + v * l..]), *av);
                    }
                }
            }
            for (q, a) in acc.iter().enumerate().take(g) {
                let j0 = (self.p0 + q0 + q) * GP;
                for (v, av) in a.iter().enumerate().take(nv) {
                    let j = j0 + v * l;
                    if j >= self.oc {
                        continue;
                    }
                    let m = l.min(self.oc - j);
                    let mut r = *av;
                    if let Some(b) = self.bias {
                        r = s.add(r, s.ld_tail(&b[j..j + m]));
                    }
                    if let Some((lo, hi)) = clamp {
                        r = math::clamp(s, r, lo, hi);
                    }
                    let o = &mut self.out[j - self.p0 * GP..];
                    if m == l {
                        s.st(o, r);
                    } else {
                        s.st_tail(&mut o[..m], r);
                    }
                }
            }
            q0 += g;
        }
    }
}

/// `out[oc] = clamp(W·x + bias)` with a [`FcFilter::Gemv`] filter.
#[allow(clippy::too_many_arguments)]
fn gemv(
    par: &dyn Parallel,
    x: &[f32],
    w: &[f32],
    ic: usize,
    oc: usize,
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if x.len() < ic
        || out.len() < oc
        || w.len() < oc.div_ceil(GP) * ic * GP
        || bias.is_some_and(|b| b.len() < oc)
    {
        return Err(KernelError::invalid("fully connected operands too short"));
    }
    let l = level();
    // Chunks of 4 panels; one task when the product is small.
    const CHUNK: usize = 4 * GP;
    let min_chunks = if ic * oc < 1 << 16 { usize::MAX / 2 } else { 1 };
    for_chunks_mut(par, &mut out[..oc], CHUNK, min_chunks, &|k, o| {
        run_op_at(
            l,
            GemvOp {
                x,
                w,
                ic,
                oc,
                p0: k * 4,
                bias,
                clamp,
                out: o,
            },
        )
    });
    Ok(())
}

/// `out[m × oc] = clamp(x[m × ic] · Wᵀ + bias)`.
#[allow(clippy::too_many_arguments)]
pub fn fully_connected(
    par: &dyn Parallel,
    x: &[f32],
    m: usize,
    ic: usize,
    oc: usize,
    filter: &FcFilter,
    dynamic_w: &[f32],
    bias: Option<&[f32]>,
    clamp: Clamp,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let b = match filter {
        FcFilter::Gemv(w) => {
            for r in 0..m {
                let xr = x
                    .get(r * ic..(r + 1) * ic)
                    .ok_or_else(|| KernelError::invalid("fully connected input too short"))?;
                let or = out
                    .get_mut(r * oc..(r + 1) * oc)
                    .ok_or_else(|| KernelError::invalid("fully connected output too short"))?;
                gemv(par, xr, w, ic, oc, bias, clamp, or)?;
            }
            return Ok(());
        }
        FcFilter::Packed(p) => MatB::Packed(p),
        FcFilter::Dynamic { transpose: false } => MatB::Cols {
            data: dynamic_w,
            ldb: ic,
        },
        FcFilter::Dynamic { transpose: true } => MatB::Rows {
            data: dynamic_w,
            ldb: oc,
        },
    };
    let epi = Epilogue {
        init: bias.map_or(Init::Zero, Init::ColBias),
        clamp,
    };
    gemm(
        par,
        m,
        oc,
        ic,
        MatA::Rows { data: x, lda: ic },
        b,
        out,
        oc,
        &epi,
    )
    .map_err(gerr)
}

/// A convolution or transposed convolution with its filter packed per group.
pub struct ConvWeights {
    pub conv: Conv,
    /// Per group: `[kh·kw·gic] × [goc]` (convolution) or `[gic] × [kh·kw·goc]` (transposed).
    pub packed: Vec<PackedB>,
    pub bias: Vec<f32>,
    pub clamp: Clamp,
}

impl ConvWeights {
    /// Packs an NHWC filter `[groups·goc, kh, kw, gic]` and bias.
    pub fn new(
        conv: Conv,
        w: &[f32],
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
        let mut packed = Vec::with_capacity(g);
        for gr in 0..g {
            let base = gr * go * k;
            packed.push(match conv.kind {
                // B[k][j] = W[g·goc + j][tap][ci] with k = tap·gic + ci.
                ConvKind::Conv => PackedB::new(k, go, |kk, j| w[base + j * k + kk]),
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

    fn pointwise(&self) -> bool {
        let w = &self.conv.win;
        self.conv.groups == 1
            && (w.kh, w.kw, w.sh, w.sw) == (1, 1, 1, 1)
            && (w.pad_top, w.pad_right, w.pad_bottom, w.pad_left) == (0, 0, 0, 0)
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
            ConvKind::Conv if self.pointwise() => Ok(0),
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

    /// Runs over `x: [n, ih, iw, groups·gic]` into `out: [n, oh, ow, groups·goc]`.
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
    ) -> Result<(), KernelError> {
        let c = &self.conv;
        let (cin, cout) = (c.in_channels(), c.out_channels());
        let in_img = ih * iw * cin;
        let out_img = oh * ow * cout;
        if x.len() < n * in_img || out.len() < n * out_img {
            return Err(KernelError::invalid("convolution operands too short"));
        }
        if c.kind == ConvKind::Deconv {
            return self.run_deconv(par, x, n, ih, iw, out, oh, ow, scratch);
        }
        let epi = |g: usize| Epilogue {
            init: Init::ColBias(&self.bias[g * c.group_out..]),
            clamp: self.clamp,
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
                &epi(0),
            )
            .map_err(gerr);
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
                        &epi(g),
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

/// `out[batch] = a[batch] · b[batch]` with broadcast batch dims: `a: [.., m, k]`,
/// `b: [.., k, n]` (or `[.., n, k]` when `transpose_b`). `a_batch`/`b_batch` map an output
/// batch index to the operands' batch indices.
#[allow(clippy::too_many_arguments)]
pub fn bmm(
    par: &dyn Parallel,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    batches: usize,
    batch_index: &(dyn Fn(usize) -> (usize, usize) + Sync),
    m: usize,
    k: usize,
    n: usize,
    transpose_b: bool,
) -> Result<(), KernelError> {
    let product = |i: usize, od: &mut [f32], par: &dyn Parallel| -> Result<(), KernelError> {
        let (ia, ib) = batch_index(i);
        let ad = a
            .get(ia * m * k..(ia + 1) * m * k)
            .ok_or_else(|| KernelError::invalid("bmm: a too short"))?;
        let bd = b
            .get(ib * k * n..(ib + 1) * k * n)
            .ok_or_else(|| KernelError::invalid("bmm: b too short"))?;
        let mb = if transpose_b {
            MatB::Cols { data: bd, ldb: k }
        } else {
            MatB::Rows { data: bd, ldb: n }
        };
        gemm(
            par,
            m,
            n,
            k,
            MatA::Rows { data: ad, lda: k },
            mb,
            od,
            n,
            &Epilogue::default(),
        )
        .map_err(gerr)
    };
    let per = m * n;
    let out = out
        .get_mut(..batches * per)
        .ok_or_else(|| KernelError::invalid("bmm: output too short"))?;
    if per == 0 {
        return Ok(());
    }
    // Many small products (attention heads: 12 of 128×32·32×128): one per task, each on one
    // thread, rather than each split over the threads.
    if batches >= 2 * par.num_threads() && per * k < 1 << 21 {
        let failed = std::sync::Mutex::new(None);
        for_chunks_mut(par, out, per, 1, &|i, od| {
            if let Err(e) = product(i, od, &pteron_core::INLINE) {
                if let Ok(mut f) = failed.lock() {
                    f.get_or_insert(e);
                }
            }
        });
        return match failed.into_inner() {
            Ok(Some(e)) => Err(e),
            _ => Ok(()),
        };
    }
    for (i, od) in out.chunks_exact_mut(per).enumerate() {
        product(i, od, par)?;
    }
    Ok(())
}
