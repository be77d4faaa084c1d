//! `aten::convolution.out` for float32 NCHW 2-d convolutions, with weights prepared at load.
//!
//! Variants, chosen at load from the geometry:
//! - pointwise (1×1, stride 1, no padding, groups 1): `out = W · X` as one GEMM per image, W
//!   and X both read in place (W from the program's constant: loading copies none of a
//!   network's largest weights, the file's pages are the weights);
//! - general (groups 1): im2col into scratch memory, then the GEMM with W packed;
//! - depthwise (groups = in = out channels): direct SIMD ([`crate::dwconv`]).
//!
//! Fusion: when the convolution's output feeds only a following inference batch norm
//! (`_native_batch_norm_legit_no_training`) and/or a clamp (`hardtanh`, `relu`, `clamp`), the
//! batch norm is folded into the weights and bias (`W' = W·γ/σ`, `b' = (b − μ)·γ/σ + β`; for a
//! pointwise convolution, whose weights stay in place, applied to each sum instead, in
//! ExecuTorch's order: `(W·x + b)·γ/σ + (β − μ·γ/σ)`) and the clamp applied as the results are
//! stored; those calls are removed from the method.
//! Everything else (other dtypes, 1-d/3-d, transposed, grouped, dilated depthwise) runs the
//! portable kernel.

use pteron_core::{
    ArgAccess, Kernel, KernelContext, KernelError, KernelRegistry, PrepareContext, Prepared,
    ScalarType,
};

use crate::dwconv::{depthwise, DwGeom};
use crate::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedA};
use crate::{fallback, register_over};

const NAME: &str = "aten::convolution.out";
const BATCH_NORM: &str = "aten::_native_batch_norm_legit_no_training.out";

const INPUT: usize = 0;
const WEIGHT: usize = 1;
const BIAS: usize = 2;
const STRIDE: usize = 3;
const PADDING: usize = 4;
const DILATION: usize = 5;
const TRANSPOSED: usize = 6;
const GROUPS: usize = 8;
const OUT: usize = 9;

pub fn register(r: &mut KernelRegistry) {
    register_over(r, NAME, Kernel::new(convolution_out).with_prepare(prepare));
}

/// 2-d geometry of one image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geom {
    cin: usize,
    cout: usize,
    groups: usize,
    ih: usize,
    iw: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    ph: usize,
    pw: usize,
    dh: usize,
    dw: usize,
}

impl Geom {
    fn oh(&self) -> usize {
        (self.ih + 2 * self.ph - self.dh * (self.kh - 1) - 1) / self.sh + 1
    }
    fn ow(&self) -> usize {
        (self.iw + 2 * self.pw - self.dw * (self.kw - 1) - 1) / self.sw + 1
    }
    fn dw_geom(&self) -> DwGeom {
        DwGeom {
            channels: self.cout,
            ih: self.ih,
            iw: self.iw,
            kh: self.kh,
            kw: self.kw,
            sh: self.sh,
            sw: self.sw,
            ph: self.ph,
            pw: self.pw,
        }
    }
    fn pointwise(&self) -> bool {
        self.groups == 1
            && (self.kh, self.kw, self.sh, self.sw, self.ph, self.pw) == (1, 1, 1, 1, 0, 0)
    }
    fn depthwise(&self) -> bool {
        self.groups == self.cin && self.cout == self.cin && (self.dh, self.dw) == (1, 1)
    }
}

/// An `int[]` argument of one or two entries (a stride, padding or dilation) as a pair.
pub fn pair<'p>(a: &impl ArgAccess<'p>, i: usize) -> Option<(usize, usize)> {
    let l = a.int_list(i).ok()?;
    let get = |k: usize| l.get(k).ok().and_then(|v| usize::try_from(v).ok());
    match l.len() {
        1 => get(0).map(|v| (v, v)),
        2 => Some((get(0)?, get(1)?)),
        _ => None,
    }
}

/// The geometry of a call this module handles, from its (current or planned) metadata.
fn geometry<'p>(a: &impl ArgAccess<'p>) -> Option<(Geom, usize)> {
    let (x, w, o) = (
        a.tensor(INPUT).ok()?,
        a.tensor(WEIGHT).ok()?,
        a.tensor(OUT).ok()?,
    );
    for t in [x, w, o] {
        if t.dtype() != ScalarType::Float || !t.is_contiguous() {
            return None;
        }
    }
    if let Some(b) = a.opt_tensor(BIAS).ok()? {
        if b.dtype() != ScalarType::Float || !b.is_contiguous() || b.numel() != w.size(0) {
            return None;
        }
    }
    if x.rank() != 4 || w.rank() != 4 || a.bool(TRANSPOSED).ok()? {
        return None;
    }
    let groups = usize::try_from(a.int(GROUPS).ok()?).ok()?;
    let (sh, sw) = pair(a, STRIDE)?;
    let (ph, pw) = pair(a, PADDING)?;
    let (dh, dw) = pair(a, DILATION)?;
    let g = Geom {
        cin: x.size(1),
        cout: w.size(0),
        groups,
        ih: x.size(2),
        iw: x.size(3),
        kh: w.size(2),
        kw: w.size(3),
        sh,
        sw,
        ph,
        pw,
        dh,
        dw,
    };
    // Bounded first, so that the geometry arithmetic cannot overflow.
    const LIM: usize = 1 << 24;
    let small = [g.cin, g.cout, g.ih, g.iw, g.kh, g.kw, groups]
        .iter()
        .all(|&v| v < LIM)
        && [sh, sw, ph, pw, dh, dw].iter().all(|&v| v < 1 << 20);
    let sane = small
        && groups >= 1
        && g.cin.is_multiple_of(groups)
        && g.cout.is_multiple_of(groups)
        && w.size(1).checked_mul(groups) == Some(g.cin)
        && sh >= 1
        && sw >= 1
        && dh >= 1
        && dw >= 1
        && g.kh >= 1
        && g.kw >= 1
        && g.ih + 2 * ph > dh * (g.kh - 1)
        && g.iw + 2 * pw > dw * (g.kw - 1);
    (sane && (groups == 1 || g.depthwise())).then_some((g, x.size(0)))
}

enum Variant {
    /// W read in place from the call's weight argument; a fused batch norm's per-channel
    /// `(scale, shift)` applied to each sum (after the bias).
    Pointwise(Option<(Vec<f32>, Vec<f32>)>),
    Im2col(PackedA),
    Depthwise(Vec<f32>),
}

/// What a call prepared: folded weights and bias, the clamp of fused consumers.
pub struct ConvState {
    geom: Geom,
    variant: Variant,
    bias: Vec<f32>,
    clamp: Option<(f32, f32)>,
}

/// The clamp a consumer applies, if it is an elementwise clamp this kernel can fuse.
pub fn clamp_of(c: &PrepareContext<'_, '_>) -> Option<(f32, f32)> {
    let scalar = |i: usize| -> Option<f64> { c.opt_scalar(i).ok()?.map(|s| s.to_f64()) };
    let (lo, hi) = match c.op_name() {
        "aten::relu.out" => (0.0, f64::INFINITY),
        "aten::hardtanh.out" => (c.double(1).ok()?, c.double(2).ok()?),
        "aten::clamp.out" => {
            let lo = if c.is_none(1).ok()? {
                f64::NEG_INFINITY
            } else {
                scalar(1)?
            };
            let hi = if c.is_none(2).ok()? {
                f64::INFINITY
            } else {
                scalar(2)?
            };
            (lo, hi)
        }
        _ => return None,
    };
    let out = c.tensor(c.num_args().checked_sub(2)?).ok()?;
    if out.dtype() != ScalarType::Float || lo.is_nan() || hi.is_nan() || lo > hi {
        return None;
    }
    Some((lo as f32, hi as f32))
}

/// Per-channel `(scale, shift)` of an inference batch norm over `c` channels, if every
/// parameter is a float32 constant.
pub fn batch_norm_of(b: &PrepareContext<'_, '_>, c: usize) -> Option<(Vec<f32>, Vec<f32>)> {
    if b.op_name() != BATCH_NORM {
        return None;
    }
    let param = |i: usize| -> Option<Option<&[f32]>> {
        if b.is_none(i).ok()? {
            return Some(None);
        }
        let t = b.constant(i)?;
        if t.info.dtype() != ScalarType::Float || t.info.numel() != c {
            return None;
        }
        t.as_slice::<f32>().ok().map(Some)
    };
    let (gamma, beta) = (param(1)?, param(2)?);
    let (mean, var) = (param(3)??, param(4)??);
    let eps = b.double(6).ok()? as f32;
    let out = b.tensor(7).ok()?;
    if out.dtype() != ScalarType::Float || !out.is_contiguous() {
        return None;
    }
    let mut scale = vec![0.0f32; c];
    let mut shift = vec![0.0f32; c];
    for ch in 0..c {
        // As the portable batch norm: invstd in f32, then alpha = w·invstd, beta = b − mean·alpha.
        let invstd = 1.0 / (var[ch] + eps).sqrt();
        let a = gamma.map_or(1.0, |g| g[ch]) * invstd;
        scale[ch] = a;
        shift[ch] = beta.map_or(0.0, |b| b[ch]) - mean[ch] * a;
    }
    Some((scale, shift))
}

fn prepare(ctx: &PrepareContext<'_, '_>) -> Result<Option<Prepared>, KernelError> {
    let Some((g, _)) = geometry(ctx) else {
        return Ok(None);
    };
    // Read in place (pointwise) or copied below (the other variants say so then).
    let Some(wt) = ctx.constant_in_place(WEIGHT) else {
        return Ok(None);
    };
    let Ok(w) = wt.as_slice::<f32>() else {
        return Ok(None);
    };
    let mut bias = vec![0.0f32; g.cout];
    if !ctx.is_none(BIAS)? {
        let Some(b) = ctx.constant(BIAS).and_then(|b| b.as_slice::<f32>().ok()) else {
            return Ok(None);
        };
        bias.copy_from_slice(&b[..g.cout]);
    }
    let per_out = w.len() / g.cout.max(1);
    // Fuse the consumers: a batch norm, then a clamp (or just a clamp). The batch norm's scale
    // is applied while packing (no transient copy of the weights: freed copies stay in the
    // allocator's heap and raise the process's resident memory).
    let mut fused = 0;
    let mut clamp = None;
    let mut next = ctx.consumer();
    let mut scale: Option<Vec<f32>> = None;
    let mut norm: Option<(Vec<f32>, Vec<f32>)> = None;
    let depthwise = g.depthwise() && g.dw_geom().supported();
    let in_place = !depthwise && g.pointwise() && g.groups == 1 && wt.info.is_contiguous();
    if let Some(bn) = &next {
        if let Some((sc, shift)) = batch_norm_of(bn, g.cout) {
            if in_place {
                norm = Some((sc, shift));
            } else {
                for co in 0..g.cout {
                    bias[co] = bias[co] * sc[co] + shift[co];
                }
                scale = Some(sc);
            }
            fused = 1;
            next = bn.consumer();
        }
    }
    let w_at = |i: usize, kk: usize| -> f32 {
        let v = w[i * per_out + kk];
        match &scale {
            Some(sc) => v * sc[i],
            None => v,
        }
    };
    if let Some(c) = &next {
        if let Some(cl) = clamp_of(c) {
            clamp = Some(cl);
            fused += 1;
        }
    }
    let (oh, ow) = (g.oh(), g.ow());
    let k = per_out;
    if !in_place {
        // Packed or copied: the file's pages of the weights are not needed after this.
        ctx.constant(WEIGHT);
    }
    let (variant, scratch) = if depthwise {
        let dg = g.dw_geom();
        let tasks = ctx.num_threads().max(1);
        let Some(bytes) = dg.buffer_len().checked_mul(tasks * 4) else {
            return Ok(None);
        };
        let w = (0..g.cout * per_out)
            .map(|j| w_at(j / per_out, j % per_out))
            .collect();
        (Variant::Depthwise(w), bytes)
    } else if g.groups == 1 {
        if in_place {
            (Variant::Pointwise(norm), 0)
        } else {
            let phases = if (g.dh, g.dw) == (1, 1) && g.dw_geom().supported() {
                g.dw_geom().buffer_len() * 4
            } else {
                0
            };
            let Some(bytes) = k
                .checked_mul(oh)
                .and_then(|v| v.checked_mul(ow * 4))
                .and_then(|v| v.checked_add(phases))
            else {
                return Ok(None);
            };
            (
                Variant::Im2col(PackedA::from_rows(g.cout, k, w, scale.as_deref())),
                bytes,
            )
        }
    } else {
        return Ok(None);
    };
    let bytes = match &variant {
        Variant::Pointwise(norm) => norm.as_ref().map_or(0, |(a, b)| (a.len() + b.len()) * 4),
        Variant::Im2col(a) => a.bytes(),
        Variant::Depthwise(w) => w.len() * 4,
    } + bias.len() * 4;
    let state = ConvState {
        geom: g,
        variant,
        bias,
        clamp,
    };
    Ok(Some(
        Prepared::new(state, bytes)
            .with_scratch(scratch)
            .fusing(fused),
    ))
}

fn convolution_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let Some(st) = ctx.prepared::<ConvState>() else {
        return fallback(NAME, ctx);
    };
    // The state was made for this call; only the spatial size may differ (dynamic shapes).
    let (g, batch) = geometry(ctx).ok_or_else(|| {
        KernelError::invalid("convolution: arguments changed since the method was loaded")
    })?;
    let p = st.geom;
    if (
        g.cin, g.cout, g.groups, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
    ) != (
        p.cin, p.cout, p.groups, p.kh, p.kw, p.sh, p.sw, p.ph, p.pw, p.dh, p.dw,
    ) {
        return Err(KernelError::invalid(
            "convolution: arguments changed since the method was loaded",
        ));
    }
    let (oh, ow) = (g.oh(), g.ow());
    ctx.resize(OUT, &[batch, g.cout, oh, ow])?;
    let par = ctx.parallel();
    let scratch = ctx.take_scratch();
    let ([x, wt], [mut out]) = ctx.io([INPUT, WEIGHT], [OUT])?;
    let x = x.as_slice::<f32>()?;
    let out = out.as_mut_slice::<f32>()?;
    let (in_img, out_img) = (g.cin * g.ih * g.iw, g.cout * oh * ow);
    let n = oh * ow;
    let epi = Epilogue {
        init: Init::RowBias(&st.bias),
        affine: match &st.variant {
            Variant::Pointwise(Some((sc, sh))) => Some((sc.as_slice(), sh.as_slice())),
            _ => None,
        },
        residual: None,
        clamp: st.clamp,
    };
    let err = |e: crate::gemm::GemmError| KernelError::invalid(e.0);
    match &st.variant {
        Variant::Pointwise(_) => {
            let w = wt.as_slice::<f32>()?;
            for b in 0..batch {
                let xb = &x[b * in_img..(b + 1) * in_img];
                let ob = &mut out[b * out_img..(b + 1) * out_img];
                gemm(
                    par,
                    g.cout,
                    n,
                    g.cin,
                    MatA::Rows {
                        data: w,
                        lda: g.cin,
                    },
                    MatB::Rows { data: xb, ldb: n },
                    ob,
                    n,
                    &epi,
                )
                .map_err(err)?;
            }
        }
        Variant::Im2col(a) => {
            let k = g.cin * g.kh * g.kw;
            let scratch: &mut [f32] = bytemuck::try_cast_slice_mut(scratch)
                .map_err(|_| KernelError::invalid("convolution: scratch misaligned"))?;
            if scratch.len() < k * n {
                return Err(KernelError::invalid("convolution: scratch too small"));
            }
            let (cols, phases) = scratch.split_at_mut(k * n);
            let dg = g.dw_geom();
            let fast = (g.dh, g.dw) == (1, 1) && dg.supported() && phases.len() >= dg.buffer_len();
            for b in 0..batch {
                let xb = &x[b * in_img..(b + 1) * in_img];
                if fast {
                    // On this thread: the copies read the phase planes this thread just
                    // filled (split over two threads, the other thread's reads of them made
                    // the first layer of MobileNetV2 slower than on one, 0.18 vs 0.15 ms).
                    crate::dwconv::im2col(&pteron_core::INLINE, &dg, g.cin, xb, phases, cols);
                } else {
                    im2col(&g, xb, cols);
                }
                let ob = &mut out[b * out_img..(b + 1) * out_img];
                gemm(
                    par,
                    g.cout,
                    n,
                    k,
                    MatA::Packed(a),
                    MatB::Rows { data: cols, ldb: n },
                    ob,
                    n,
                    &epi,
                )
                .map_err(err)?;
            }
        }
        Variant::Depthwise(w) => {
            let scratch: &mut [f32] = bytemuck::try_cast_slice_mut(scratch)
                .map_err(|_| KernelError::invalid("convolution: scratch misaligned"))?;
            depthwise(
                par,
                &g.dw_geom(),
                batch,
                x,
                w,
                &st.bias,
                st.clamp,
                out,
                scratch,
            )
            .map_err(KernelError::invalid)?;
        }
    }
    Ok(())
}

/// `cols[(ci, kh, kw)][oh * OW + ow] = x[ci][oh·s + kh·d − p][ow·s + kw·d − p]` (0 outside).
fn im2col(g: &Geom, x: &[f32], cols: &mut [f32]) {
    let (oh, ow) = (g.oh(), g.ow());
    let n = oh * ow;
    let mut row = 0;
    for ci in 0..g.cin {
        let plane = &x[ci * g.ih * g.iw..(ci + 1) * g.ih * g.iw];
        for a in 0..g.kh {
            for b in 0..g.kw {
                let dst = &mut cols[row * n..(row + 1) * n];
                row += 1;
                for o_h in 0..oh {
                    let ih = (o_h * g.sh + a * g.dh) as isize - g.ph as isize;
                    let drow = &mut dst[o_h * ow..(o_h + 1) * ow];
                    if ih < 0 || ih >= g.ih as isize {
                        drow.fill(0.0);
                        continue;
                    }
                    let src = &plane[ih as usize * g.iw..(ih as usize + 1) * g.iw];
                    let off = (b * g.dw) as isize - g.pw as isize;
                    for (o_w, d) in drow.iter_mut().enumerate() {
                        let iw = (o_w * g.sw) as isize + off;
                        *d = if iw >= 0 && (iw as usize) < g.iw {
                            src[iw as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
}
