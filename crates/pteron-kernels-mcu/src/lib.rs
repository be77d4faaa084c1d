//! int8 kernels for microcontrollers: the operators of ExecuTorch's Cortex-M backend
//! (`executorch.backends.cortex_m`, modelled on Arm's CMSIS-NN), computed as the backend's
//! reference implementations compute them (its Python operators), bit for bit.
//!
//! Modules: [`requant`] (the fixed-point requantization every operator ends with), then one
//! module per operator family: [`quant`] (quantize / dequantize), [`conv`] (convolution and
//! depthwise convolution), [`linear`], [`pool`] (average and max pooling), [`add`],
//! [`elementwise`] (multiplication, table activations, minimum and maximum), [`matrix`]
//! (transpose, batched matrix product, softmax, division), [`pad`].
//!
//! Tensors may be in any dim order (the backend hands channels-last 4-d tensors); kernels
//! address them through their strides. Accumulation is in `i32`, as CMSIS-NN accumulates;
//! nothing allocates. `register::<S>` installs the operators an
//! [`OpSelection`](pteron_core::OpSelection) selects, on top of the portable kernels the
//! programs also call (`aten::view_copy`, …).

#![forbid(unsafe_code)]
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod add;
mod args;
pub mod conv;
pub mod elementwise;
pub mod linear;
pub mod matrix;
pub mod pad;
pub mod pool;
pub mod quant;
pub mod requant;

use pteron_core::{AllOps, KernelRegistry, OpSelection};

/// `acc + Σ (x + x_offset) · (w + w_offset)` over two runs of equal length, in `i32`, wrapping
/// (offsets come from the program: hostile ones must not overflow-panic).
#[inline]
pub(crate) fn dot(x: &[i8], w: &[i8], acc: i32, x_offset: i32, w_offset: i32) -> i32 {
    x.iter().zip(w).fold(acc, |a, (&xv, &wv)| {
        let (xv, wv) = (
            i32::from(xv).wrapping_add(x_offset),
            i32::from(wv).wrapping_add(w_offset),
        );
        a.wrapping_add(xv.wrapping_mul(wv))
    })
}

/// Registers the Cortex-M operators `S` selects.
pub fn register<S: OpSelection>(r: &mut KernelRegistry) {
    quant::register::<S>(r);
    conv::register::<S>(r);
    linear::register::<S>(r);
    pool::register::<S>(r);
    add::register::<S>(r);
    elementwise::register::<S>(r);
    matrix::register::<S>(r);
    pad::register::<S>(r);
}

/// Registers every Cortex-M operator.
pub fn register_all(r: &mut KernelRegistry) {
    register::<AllOps>(r);
}
