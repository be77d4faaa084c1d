//! Fully connected nodes: a GEMM over a packed filter, matrix-vector products over panels for
//! a few rows, or the filter read in place when it is not constant.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedB};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::Clamp;

use super::gerr;

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
