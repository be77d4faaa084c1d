//! Resampling: `grid_sampler_2d.out` (bilinear, nearest and bicubic interpolation with zeros,
//! border and reflection padding, `align_corners`) and `_upsample_bilinear2d_aa.out`
//! (antialiased bilinear resize).
//!
//! Both follow ExecuTorch's portable kernels step by step, including the type each step computes
//! in, so that results match to the last bit where it is practical:
//!
//! - grid_sampler_2d: bilinear weights and sums in f32 for f16/bf16 (f64 for f64); nearest and
//!   bicubic compute in the element type itself, i.e. for f16/bf16 every operation is rounded to
//!   it, as `c10::Half` arithmetic does. Integer dtypes (which ExecuTorch's kernel accepts, while
//!   PyTorch's does not) compute their coordinates in integer arithmetic as its C++ does, which
//!   makes every mode read the single pixel at the truncated coordinate.
//! - _upsample_bilinear2d_aa: triangle-filter weights in f32 over the support of each output
//!   pixel; the sum is accumulated in the element type (each step rounded for f16/bf16,
//!   truncated for integers).
//!
//! Tensors may have any dim order (addressed through their strides).

use pteron_core::{DtypeSet, Kernel, KernelError, KernelRegistry, ScalarType};

mod grid;
mod upsample;

#[cfg(test)]
mod tests;

pub use grid::Fl;
use grid::{check_grid_sampler, grid_sampler_2d_out};
pub use upsample::AaElem;
use upsample::{check_upsample_aa, upsample_bilinear2d_aa_out};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    pteron_core::register_op!(
        S,
        r,
        "aten::grid_sampler_2d.out",
        Kernel::with_check(grid_sampler_2d_out, check_grid_sampler).dtypes(DtypeSet::REAL),
    );
    pteron_core::register_op!(
        S,
        r,
        "aten::_upsample_bilinear2d_aa.out",
        Kernel::with_check(upsample_bilinear2d_aa_out, check_upsample_aa).dtypes(DtypeSet::REAL),
    );
}

fn real(op: &'static str, dt: ScalarType) -> Result<(), KernelError> {
    if ScalarType::REAL_AND_BOOL.contains(&dt) && dt != ScalarType::Bool {
        Ok(())
    } else {
        Err(KernelError::dtype(dt, op))
    }
}
