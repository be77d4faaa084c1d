//! GEMM-based float32 kernels over NHWC data, on `pteron_kernels_cpu::gemm`: fully connected,
//! convolution (1×1 as one GEMM, otherwise im2col in blocks of output pixels), transposed
//! convolution (GEMM then scatter-add), batch matrix multiply. Constant filters are packed
//! once, at init.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, GemmError, Init, MatA, MatB, PackedB};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::{Clamp, Conv, ConvKind, Window};
use crate::kernels::spatial::{inside_outputs, tap_offsets, ZEROS};

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
        affine: None,
        residual: None,
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

/// A residual connection's add run as a convolution's epilogue: `out = clamp(conv(x) + r)`,
/// with `r` laid out as the output and a convolution that has no clamp of its own. The sum is
/// rounded once, as when the add runs afterwards: the results are bit-identical.
#[derive(Clone, Copy)]
pub struct AddInto<'a> {
    pub r: &'a [f32],
    pub clamp: Clamp,
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

    /// Whether [`SmallCin`] runs this convolution (few input channels, one group).
    fn small_cin(&self) -> bool {
        let c = &self.conv;
        c.kind == ConvKind::Conv
            && c.groups == 1
            && (1..=4).contains(&c.group_in)
            && c.win
                .kh
                .checked_mul(c.win.kw)
                .is_some_and(|t| t <= SMALL_TAPS)
    }

    /// Runs a [`small_cin`](Self::small_cin) convolution.
    #[allow(clippy::too_many_arguments)]
    fn run_small_cin(
        &self,
        par: &dyn Parallel,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
    ) {
        let c = &self.conv;
        let (gi, cout) = (c.group_in, c.group_out);
        let l = level();
        let w = &self.packed[0];
        if !run_op_at(l, FitsPanels(w.panel_width())) {
            // Packed at another SIMD level than this thread's (a test's override).
            return self.small_cin_scalar(x, n, ih, iw, out, oh, ow);
        }
        let (in_img, out_img) = (ih * iw * gi, oh * ow * cout);
        // Pixels per task (64 cost a few % more in per-task setup on one and two threads).
        const PER: usize = 256;
        for b in 0..n {
            let xb = &x[b * in_img..(b + 1) * in_img];
            let ob = &mut out[b * out_img..(b + 1) * out_img];
            for_chunks_mut(par, ob, PER * cout, 1, &|k, o| {
                let op = || SmallCinArgs {
                    x: xb,
                    ih,
                    iw,
                    ow,
                    win: &c.win,
                    w,
                    bias: &self.bias,
                    clamp: self.clamp,
                    p0: k * PER,
                    cout,
                };
                match gi {
                    1 => run_op_at(l, SmallCin::<1>(op(), o)),
                    2 => run_op_at(l, SmallCin::<2>(op(), o)),
                    3 => run_op_at(l, SmallCin::<3>(op(), o)),
                    _ => run_op_at(l, SmallCin::<4>(op(), o)),
                }
            });
        }
    }

    /// [`run_small_cin`](Self::run_small_cin) one product at a time.
    #[allow(clippy::too_many_arguments)]
    fn small_cin_scalar(
        &self,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
    ) {
        let c = &self.conv;
        let (gi, cout) = (c.group_in, c.group_out);
        let w = &self.packed[0];
        let nr = w.panel_width();
        let taps = c.win.kh * c.win.kw;
        let mut offs = [None; SMALL_TAPS];
        for b in 0..n {
            let xb = &x[b * ih * iw * gi..(b + 1) * ih * iw * gi];
            for p in 0..oh * ow {
                tap_offsets(&c.win, ih, iw, gi, p / ow, p % ow, &mut offs[..taps]);
                for co in 0..cout {
                    let panel = w.panel(co / nr);
                    let mut acc = self.bias[co];
                    for (t, o) in offs[..taps].iter().enumerate() {
                        if let Some(o) = *o {
                            for ci in 0..gi {
                                acc += xb[o + ci] * panel[(t * gi + ci) * nr + co % nr];
                            }
                        }
                    }
                    if let Some((lo, hi)) = self.clamp {
                        acc = acc.max(lo).min(hi);
                    }
                    out[(b * oh * ow + p) * cout + co] = acc;
                }
            }
        }
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

/// Most taps of a convolution run by [`SmallCin`] (7×7).
const SMALL_TAPS: usize = 49;

/// Whether packed panels `nr` wide suit the micro-kernel of [`SmallCin`] at a SIMD level.
struct FitsPanels(usize);

impl SimdOp for FitsPanels {
    type Output = bool;
    #[inline(always)]
    fn run<S: Simd>(self, _: S) -> bool {
        self.0 == S::LANES || self.0 == 2 * S::LANES
    }
}

struct SmallCinArgs<'a> {
    /// One image, `[ih, iw, gi]`.
    x: &'a [f32],
    ih: usize,
    iw: usize,
    ow: usize,
    win: &'a Window,
    w: &'a PackedB,
    bias: &'a [f32],
    clamp: Clamp,
    /// The first output pixel of `out`.
    p0: usize,
    cout: usize,
}

/// A convolution with `GI` (≤ 4) input channels, an image network's first layer: a GEMM
/// whose A rows are read through per-pixel tap pointers into the input instead of an im2col
/// copy (the copy of 3-channel pixels into 27-wide rows cost as much as the product, and the
/// product's 27-deep rows are too shallow to hide it). Taps outside the input read zeros.
/// Writes output pixels `p0 ..` as many as the slice holds, every channel.
struct SmallCin<'a, const GI: usize>(SmallCinArgs<'a>, &'a mut [f32]);

impl<const GI: usize> SimdOp for SmallCin<'_, GI> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        // 8 pixels × 2 vectors (AVX-512: 32 channels) fill 16 accumulators; 4 × 2 with 8 lanes.
        match (self.0.w.panel_width() / S::LANES, S::LANES >= 16) {
            (2, true) => small_cin::<S, GI, 2, 8>(s, self.0, self.1),
            (2, false) => small_cin::<S, GI, 2, 4>(s, self.0, self.1),
            (_, true) => small_cin::<S, GI, 1, 8>(s, self.0, self.1),
            (_, false) => small_cin::<S, GI, 1, 4>(s, self.0, self.1),
        }
    }
}

#[inline(always)]
fn small_cin<S: Simd, const GI: usize, const NV: usize, const P: usize>(
    s: S,
    op: SmallCinArgs<'_>,
    out: &mut [f32],
) {
    let l = S::LANES;
    let nr = NV * l;
    debug_assert!(op.w.panel_width() == nr);
    let taps = op.win.kh * op.win.kw;
    let cout = op.cout;
    let clamp = op.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
    let np = out.len() / cout.max(1);
    let win = op.win;
    // Tap t of a pixel whose window lies inside the input sits `delta[t]` floats past its
    // first tap.
    let mut delta = [0usize; SMALL_TAPS];
    for a in 0..win.kh {
        for b in 0..win.kw {
            delta[a * win.kw + b] = (a * win.dh * op.iw + b * win.dw) * GI;
        }
    }
    let span = delta[taps - 1] + GI;
    let mut offs = [None; SMALL_TAPS];
    let mut ptrs = [[ZEROS.as_ptr(); SMALL_TAPS]; P];
    let mut base = [ZEROS.as_ptr(); P];
    // Output rows and columns whose windows lie inside the input: a tile of pixels in one
    // such row, all such columns, takes its pointers from its first pixel's by steps of
    // `sw·GI`, with no per-pixel test (at 3 input channels those tests cost a third of the
    // product).
    let rows_in = inside_outputs(op.ih, usize::MAX, win.pad_top, win.kh, win.sh, win.dh);
    let cols_in = inside_outputs(op.iw, op.ow, win.pad_left, win.kw, win.sw, win.dw);
    // The first tap of a pixel whose window lies inside the input (in `rows_in × cols_in`,
    // so the subtractions cannot underflow and the products stay within the input).
    let inside = |oy: usize, ox: usize| {
        (rows_in.contains(&oy) && cols_in.contains(&ox))
            .then(|| ((oy * win.sh - win.pad_top) * op.iw + ox * win.sw - win.pad_left) * GI)
    };
    let step = win.sw * GI;
    if np == 0 || op.ow == 0 {
        return;
    }
    let (mut ty, mut tx) = (op.p0 / op.ow, op.p0 % op.ow);
    let mut q0 = 0;
    while q0 < np {
        let pn = P.min(np - q0);
        // The tile's first pixel, tracked from tile to tile (two divisions per tile cost a
        // tenth of a tile's time).
        let (oy, ox) = (ty, tx);
        // A tile in one interior row, every pixel in interior columns: its first pixel's
        // first tap, checked to the floats its last pixel reads up to.
        let run = inside(oy, ox)
            .filter(|_| ox + pn <= cols_in.end)
            .and_then(|first| op.x.get(first..first + (pn - 1) * step + span))
            .map(|r| r.as_ptr());
        let mut all_inside = true;
        if let Some(b0) = run {
            for (q, bq) in base.iter_mut().enumerate() {
                // Pixels past `pn` repeat the last one (computed, not stored).
                *bq = b0.wrapping_add(q.min(pn - 1) * step);
            }
        } else {
            // The tile's pixels (no division per pixel: at 3 input channels the divisions cost
            // as much as the products); pixels past the last one repeat it (computed, not
            // stored).
            let mut px = [(0usize, 0usize); P];
            let (mut oy, mut ox) = (oy, ox);
            for (q, c) in px.iter_mut().enumerate() {
                *c = (oy, ox);
                if q + 1 < pn {
                    ox += 1;
                    if ox == op.ow {
                        (oy, ox) = (oy + 1, 0);
                    }
                }
            }
            for (bq, &(oy, ox)) in base.iter_mut().zip(&px) {
                match inside(oy, ox) {
                    Some(o) => *bq = op.x[o..o + span].as_ptr(),
                    None => all_inside = false,
                }
            }
            if !all_inside {
                for (pq, &(oy, ox)) in ptrs.iter_mut().zip(&px) {
                    tap_offsets(win, op.ih, op.iw, GI, oy, ox, &mut offs[..taps]);
                    for (d, o) in pq.iter_mut().zip(&offs[..taps]) {
                        *d = match *o {
                            Some(o) => op.x[o..o + GI].as_ptr(),
                            None => ZEROS.as_ptr(),
                        };
                    }
                }
            }
        }
        for j in 0..cout.div_ceil(nr) {
            let wp = op.w.panel(j);
            let j0 = j * nr;
            let mut acc = [[s.zero(); NV]; P];
            for v in 0..NV {
                let c = j0 + v * l;
                if c < cout {
                    let b = s.ld_tail(&op.bias[c..c + l.min(cout - c)]);
                    for a in acc.iter_mut() {
                        a[v] = b;
                    }
                }
            }
            // Safety: a base pointer starts `span` readable floats and delta[t] + GI ≤ span; a
            // tap pointer starts GI readable floats (a pixel of the image, or ZEROS).
            let acc = if all_inside {
                let base = base;
                product::<S, GI, NV, P>(s, wp, taps, acc, |q, t| unsafe { base[q].add(delta[t]) })
            } else {
                product::<S, GI, NV, P>(s, wp, taps, acc, |q, t| ptrs[q][t])
            };
            if pn == P && j0 + nr <= cout {
                // A whole tile: fixed loops keep the accumulators in registers.
                let o = &mut out[q0 * cout + j0..(q0 + P - 1) * cout + j0 + nr];
                for (q, a) in acc.iter().enumerate() {
                    for (v, &r) in a.iter().enumerate() {
                        let r = match clamp {
                            Some((lo, hi)) => math::clamp(s, r, lo, hi),
                            None => r,
                        };
                        s.st(&mut o[q * cout + v * l..], r);
                    }
                }
                continue;
            }
            for (q, a) in acc.iter().enumerate().take(pn) {
                for (v, &r) in a.iter().enumerate() {
                    let c = j0 + v * l;
                    if c >= cout {
                        continue;
                    }
                    let m = l.min(cout - c);
                    let r = match clamp {
                        Some((lo, hi)) => math::clamp(s, r, lo, hi),
                        None => r,
                    };
                    let o = &mut out[(q0 + q) * cout + c..];
                    if m == l {
                        s.st(o, r);
                    } else {
                        s.st_tail(&mut o[..m], r);
                    }
                }
            }
        }
        q0 += P;
        tx += P;
        while tx >= op.ow {
            tx -= op.ow;
            ty += 1;
        }
    }
}

/// `acc[q] += Σ_t Σ_ci x(q, t)[ci] · w[t·GI + ci]` for the `P` pixels of a [`SmallCin`] tile
/// over one packed panel `wp` (`NV` vectors wide): taps outside, the `GI` channels of a tap
/// inside, so the `P` pixel pointers of a tap stay in registers for its channels (`x(q, t)`
/// points at GI readable floats). The accumulators go in and out by value (by reference
/// they stayed in memory).
#[inline(always)]
fn product<S: Simd, const GI: usize, const NV: usize, const P: usize>(
    s: S,
    wp: &[f32],
    taps: usize,
    mut acc: [[S::V; NV]; P],
    x: impl Fn(usize, usize) -> *const f32,
) -> [[S::V; NV]; P] {
    let l = S::LANES;
    let nr = NV * l;
    for (t, wt) in wp.chunks_exact(GI * nr).take(taps).enumerate() {
        let xp: [*const f32; P] = core::array::from_fn(|q| x(q, t));
        for ci in 0..GI {
            let mut b = [s.zero(); NV];
            for (v, bv) in b.iter_mut().enumerate() {
                *bv = s.ld(&wt[ci * nr + v * l..]);
            }
            for (a, p) in acc.iter_mut().zip(&xp) {
                // Safety: the caller's pointers start GI readable floats; ci < GI.
                let xv = s.splat(unsafe { *p.add(ci) });
                for v in 0..NV {
                    a[v] = s.fma(xv, b[v], a[v]);
                }
            }
        }
    }
    acc
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

#[cfg(test)]
mod tests {
    use super::ConvWeights;
    use crate::graph::{Conv, ConvKind, Window};
    use pteron_core::INLINE;
    use pteron_kernels_cpu::simd::{with_level, Level};

    /// Convolution by the definition: NHWC `x`, filter `[cout, kh, kw, cin]`, one group.
    #[allow(clippy::too_many_arguments)]
    fn conv_reference(
        win: &Window,
        x: &[f32],
        (n, ih, iw, cin): (usize, usize, usize, usize),
        w: &[f32],
        bias: &[f32],
        cout: usize,
        (oh, ow): (usize, usize),
        clamp: (f32, f32),
    ) -> Vec<f32> {
        let mut out = vec![0.0; n * oh * ow * cout];
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for co in 0..cout {
                        let mut acc = bias[co];
                        for a in 0..win.kh {
                            for t in 0..win.kw {
                                let y = (oy * win.sh + a * win.dh) as isize - win.pad_top as isize;
                                let xx =
                                    (ox * win.sw + t * win.dw) as isize - win.pad_left as isize;
                                if y < 0 || xx < 0 || y >= ih as isize || xx >= iw as isize {
                                    continue;
                                }
                                for ci in 0..cin {
                                    let xi = ((b * ih + y as usize) * iw + xx as usize) * cin + ci;
                                    acc += x[xi] * w[((co * win.kh + a) * win.kw + t) * cin + ci];
                                }
                            }
                        }
                        out[((b * oh + oy) * ow + ox) * cout + co] = acc.max(clamp.0).min(clamp.1);
                    }
                }
            }
        }
        out
    }

    /// Few input channels (the tap-pointer kernel: window inside the input, or partly in the
    /// padding) and more (im2col), against the definition.
    #[test]
    fn convolution_matches_definition() {
        let mut seed = 11u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &cin in &[1, 2, 3, 4, 6] {
            for &cout in &[5, 16, 32, 40] {
                for &(k, s, d, pad) in &[
                    (3, 2, 1, 1),
                    (3, 1, 1, 1),
                    (1, 1, 1, 0),
                    (3, 1, 2, 2),
                    (5, 2, 1, 3),
                ] {
                    // (23, 29): more output pixels than one task's share of the first-layer
                    // kernel, so tasks start inside rows.
                    for &(ih, iw) in &[(1, 1), (5, 4), (9, 13), (23, 29)] {
                        let win = Window {
                            pad_top: pad,
                            pad_right: pad.min(1),
                            pad_bottom: pad.min(1),
                            pad_left: pad,
                            kh: k,
                            kw: k,
                            sh: s,
                            sw: s,
                            dh: d,
                            dw: d,
                        };
                        let conv = Conv {
                            kind: ConvKind::Conv,
                            win,
                            groups: 1,
                            group_in: cin,
                            group_out: cout,
                            adjustment: (0, 0),
                        };
                        let (oh, ow) = win.out_hw(ih, iw).unwrap();
                        let n = 2;
                        let x: Vec<f32> = (0..n * ih * iw * cin).map(|_| rnd()).collect();
                        let w: Vec<f32> = (0..cout * k * k * cin).map(|_| rnd()).collect();
                        let bias: Vec<f32> = (0..cout).map(|_| rnd()).collect();
                        let clamp = (-0.7, 0.9);
                        // Packed and run at each SIMD level, and packed for one run at another.
                        let mut outs = Vec::new();
                        for (pack, run) in [
                            (Level::Portable, Level::Portable),
                            (Level::Avx2, Level::Avx2),
                            (Level::Avx512, Level::Avx512),
                            (Level::Avx512, Level::Avx2),
                        ] {
                            let cw = with_level(pack, || {
                                ConvWeights::new(conv, &w, Some(&bias), Some(clamp)).unwrap()
                            });
                            let mut scratch = vec![0.0; cw.scratch_len(ih, iw).unwrap()];
                            let mut out = vec![f32::NAN; n * oh * ow * cout];
                            with_level(run, || {
                                cw.run(&INLINE, &x, n, ih, iw, &mut out, oh, ow, &mut scratch, None)
                            })
                            .unwrap();
                            outs.push(out);
                        }
                        let want = conv_reference(
                            &win,
                            &x,
                            (n, ih, iw, cin),
                            &w,
                            &bias,
                            cout,
                            (oh, ow),
                            clamp,
                        );
                        for out in &outs {
                            for (i, (a, b)) in out.iter().zip(&want).enumerate() {
                                assert!(
                                    (a - b).abs() <= 1e-5,
                                    "cin {cin} cout {cout} k {k} s {s} d {d} pad {pad} {ih}x{iw}: [{i}] {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
