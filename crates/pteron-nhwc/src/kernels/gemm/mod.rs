//! GEMM-based float32 kernels over NHWC data, on `pteron_kernels_cpu::gemm`: fully connected,
//! convolution (1×1 as one GEMM, otherwise im2col in blocks of output pixels), transposed
//! convolution (GEMM then scatter-add), batch matrix multiply. Constant filters are packed
//! once, at init.

use pteron_core::KernelError;
use pteron_kernels_cpu::gemm::{GemmError, PackedB};

use crate::graph::{Clamp, Conv};

mod bmm;
mod conv;
mod fully_connected;
mod small_cin;
#[cfg(test)]
mod tests;

pub use bmm::bmm;
pub use fully_connected::{fully_connected, FcFilter};

fn gerr(e: GemmError) -> KernelError {
    KernelError::invalid(format!("gemm: {}", e.0))
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
