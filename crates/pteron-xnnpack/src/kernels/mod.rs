//! The kernels the delegate runs (float32, NHWC), built on `pteron-kernels-cpu`'s SIMD layer,
//! GEMM and activation functions.

pub mod elementwise;
pub mod fused;
pub mod gemm;
pub mod layout;
pub mod qgemm;
pub mod quant;
pub mod spatial;
