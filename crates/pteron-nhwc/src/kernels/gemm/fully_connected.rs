//! Fully connected nodes: a GEMM over a packed filter (one row, a decode step, streams each
//! panel once), or the filter read in place when it is not constant.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB, PackedB};

use crate::graph::Clamp;

use super::gerr;

/// The filter of a fully connected node: packed at init when constant (one row, a decode
/// step, streams the panels once: `gemm`'s one-row product), else read in place.
pub enum FcFilter {
    Packed(PackedB),
    /// Read from the value at run time.
    Dynamic {
        transpose: bool,
    },
}

impl FcFilter {
    /// Packs `[oc, ic]` (or `[ic, oc]` when `transpose`) filter data.
    pub fn pack(w: &[f32], ic: usize, oc: usize, transpose: bool) -> Result<Self, KernelError> {
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
        Ok(FcFilter::Packed(PackedB::new(ic, oc, at)))
    }
    pub fn bytes(&self) -> usize {
        match self {
            FcFilter::Packed(p) => p.bytes(),
            FcFilter::Dynamic { .. } => 0,
        }
    }
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
