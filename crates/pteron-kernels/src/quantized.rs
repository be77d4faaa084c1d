//! ExecuTorch's quantized kernels (`kernels/quantized`, namespace `quantized_decomposed`) that
//! LLM exports use: weight-only quantized embeddings (8, 4 and 2 bits, per row or per group) and
//! the affine quantize / dequantize / choose-qparams ops (per tensor, per channel, per token).
//!
//! Arithmetic follows ExecuTorch's portable C++ exactly (it differs from PyTorch's reference in
//! places):
//! - quantize: `q = clamp(i64(f32(zp) + nearbyint(f32(x · (1f / f32(scale))))), qmin, qmax)`;
//! - dequantize: `out = T(f32(q − i32(zp)) · f32(scale))`;
//! - embeddings: `out = T((f32(q) − f32(zp)) · f32(scale))`; 4-bit: element `2k` in the high
//!   nibble, `2k + 1` in the low one, `q = nibble − 8`; 2-bit: element `4k + i` in bits
//!   `2i..2i+2`, `q = crumb − 2`.
//!
//! Every index read from data (embedding ids) is bounds-checked: ExecuTorch's 2/4-bit kernels do
//! not check them. Where ExecuTorch reads a tensor as another type than its dtype (the `.out`
//! embeddings read the scales as the output type, zero points are read as int64 whatever their
//! dtype), pteron refuses the mismatch at load instead.

use pteron_core::{DtypeSet, Kernel, KernelRegistry, ScalarType};

#[macro_use]
mod cast;
mod choose_qparams;
mod dequantize;
mod embedding;
mod quantize;

use choose_qparams::{check_choose_qparams_per_token, choose_qparams_per_token_out};
use dequantize::{
    check_dequantize_per_channel, check_dequantize_per_tensor, check_dequantize_per_tensor_t,
    check_dequantize_per_token, dequantize_per_channel_out, dequantize_per_tensor_out,
    dequantize_per_tensor_tensor_out, dequantize_per_token_out,
};
use embedding::{
    check_emb2, check_emb2_dtype, check_emb4, check_emb4_dtype, check_emb8, check_emb8_dtype,
    emb2_dtype_out, emb2_out, emb4_dtype_out, emb4_out, emb8_dtype_out, emb8_out,
};
use quantize::{
    check_quantize_per_channel, check_quantize_per_tensor, check_quantize_per_tensor_t,
    check_quantize_per_token, quantize_per_channel_out, quantize_per_tensor_out,
    quantize_per_tensor_tensor_out, quantize_per_token_out,
};

pub fn register<S: pteron_core::OpSelection>(r: &mut KernelRegistry) {
    let emb = DtypeSet::of(&[ScalarType::Float, ScalarType::Half, ScalarType::BFloat16]);
    macro_rules! embeddings {
        ($($name:literal => $run:ident, $check:ident;)*) => {$(
            pteron_core::register_op!(S, r, concat!("quantized_decomposed::", $name),
                Kernel::with_check($run, $check).dtypes(emb));
        )*};
    }
    embeddings! {
        "embedding_byte.out" => emb8_out, check_emb8;
        "embedding_byte.dtype_out" => emb8_dtype_out, check_emb8_dtype;
        "embedding_4bit.out" => emb4_out, check_emb4;
        "embedding_4bit.dtype_out" => emb4_dtype_out, check_emb4_dtype;
        "embedding_2bit.out" => emb2_out, check_emb2;
        "embedding_2bit.dtype_out" => emb2_dtype_out, check_emb2_dtype;
    }
    let qin = DtypeSet::of(&[ScalarType::Float, ScalarType::Double, ScalarType::Half]);
    let qint = DtypeSet::of(&[
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
    ]);
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::quantize_per_tensor.out",
        Kernel::with_check(quantize_per_tensor_out, check_quantize_per_tensor).dtypes(qin),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::quantize_per_tensor.Tensor_out",
        Kernel::with_check(quantize_per_tensor_tensor_out, check_quantize_per_tensor_t).dtypes(qin),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::quantize_per_channel.out",
        Kernel::with_check(quantize_per_channel_out, check_quantize_per_channel).dtypes(qin),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::quantize_per_token.out",
        Kernel::with_check(quantize_per_token_out, check_quantize_per_token).dtypes(qin),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::dequantize_per_tensor.out",
        Kernel::with_check(dequantize_per_tensor_out, check_dequantize_per_tensor).dtypes(qint),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::dequantize_per_tensor.Tensor_out",
        Kernel::with_check(
            dequantize_per_tensor_tensor_out,
            check_dequantize_per_tensor_t,
        )
        .dtypes(qint),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::dequantize_per_channel.out",
        Kernel::with_check(dequantize_per_channel_out, check_dequantize_per_channel).dtypes(qint),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::dequantize_per_token.out",
        Kernel::with_check(dequantize_per_token_out, check_dequantize_per_token).dtypes(qint),
    );
    pteron_core::register_op!(
        S,
        r,
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        Kernel::with_check(choose_qparams_per_token_out, check_choose_qparams_per_token)
            .dtypes(DtypeSet::of(&[ScalarType::Float])),
    );
}

#[cfg(test)]
mod tests;
