//! The float32 kernels the engine runs (NHWC), built on `pteron-kernels-cpu`'s SIMD layer,
//! GEMM and activation functions. The int8 ones are in [`crate::quant`].

pub mod elementwise;
pub mod fused;
pub mod gemm;
pub mod layout;
pub mod spatial;
