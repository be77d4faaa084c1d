//! Portable reference kernels: simple, obviously right implementations of the ExecuTorch
//! `aten::*.out` ops (and `executorch_prim` scalar ops), generic over dtype. They are the oracle
//! that faster kernel libraries are checked against.
//!
//! Each module exposes `register(&mut KernelRegistry)`; [`register_all`] installs every kernel.
//!
//! A kernel is a plain function over a [`KernelContext`](pteron_core::KernelContext): it reads
//! its arguments by position (schema order, out tensors included), resizes its outputs, then
//! borrows tensor bytes with `ctx.io([inputs], [outputs])` and calls a generic math function:
//!
//! ```ignore
//! fn relu_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
//!     let x = *ctx.tensor(0)?;
//!     ctx.resize(1, x.sizes())?;
//!     let ([x], [mut out]) = ctx.io([0], [1])?;
//!     dispatch_dtype!(x.info.dtype(), T => relu::<T>(x.as_slice()?, out.as_mut_slice()?),
//!                     _ => return Err(KernelError::dtype(x.info.dtype(), "relu")))
//! }
//! ```

#![forbid(unsafe_code)]
// Without `std`, `core` and `alloc` only (microcontrollers); float functions then come from
// `libm` (see `math`).
#![cfg_attr(not(feature = "std"), no_std)]

#[macro_use]
extern crate alloc;

pub mod math;
pub mod util;

pub mod copy;
pub mod creation;
pub mod elementwise;
pub mod reduce;
pub mod unary;

pub mod conv;
pub mod embedding;
pub mod index;
pub mod linalg;
pub mod norm;
pub mod pool;
pub mod shape;

pub mod prim;

pub mod llm;
pub mod quantized;

pub mod complex;
pub mod distance;
pub mod masked;
pub mod pad;
pub mod random;
pub mod sample;
pub mod shift;

use pteron_core::{AllOps, KernelRegistry, OpSelection};

/// Registers every portable kernel.
pub fn register_all(r: &mut KernelRegistry) {
    register_selected::<AllOps>(r);
}

/// Registers the portable kernels of the operators `S` selects; the others are not linked
/// (selective build: see [`OpSelection`]).
pub fn register_selected<S: OpSelection>(r: &mut KernelRegistry) {
    copy::register::<S>(r);
    creation::register::<S>(r);
    elementwise::register::<S>(r);
    reduce::register::<S>(r);
    unary::register::<S>(r);
    conv::register::<S>(r);
    embedding::register::<S>(r);
    index::register::<S>(r);
    linalg::register::<S>(r);
    norm::register::<S>(r);
    pool::register::<S>(r);
    shape::register::<S>(r);
    prim::register::<S>(r);
    complex::register::<S>(r);
    distance::register::<S>(r);
    masked::register::<S>(r);
    pad::register::<S>(r);
    random::register::<S>(r);
    sample::register::<S>(r);
    shift::register::<S>(r);
    llm::register::<S>(r);
    quantized::register::<S>(r);
}

/// A registry holding every portable kernel.
pub fn registry() -> KernelRegistry {
    let mut r = KernelRegistry::new();
    register_all(&mut r);
    r
}
