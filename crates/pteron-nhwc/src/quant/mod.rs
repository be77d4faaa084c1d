//! All int8 arithmetic of the engine: which quantized nodes run and what they prepare
//! ([`exec`]), the int8 products ([`gemm`]), the dynamic and transposed int8 convolutions
//! ([`convs`]) and the other int8 kernels ([`ops`]).

pub mod convs;
pub mod exec;
pub mod gemm;
mod isa;
pub mod ops;
