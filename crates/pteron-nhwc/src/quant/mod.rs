//! All int8 arithmetic of the engine: which quantized nodes run and what they prepare
//! ([`exec`]), the int8 products ([`gemm`]) and the other int8 kernels ([`ops`]).

pub mod exec;
pub mod gemm;
pub mod ops;
