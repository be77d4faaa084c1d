//! Fast CPU kernels for pteron, registered over the portable ones.
//!
//! `register(r)` replaces, in a registry that already holds the portable kernels
//! (`pteron_kernels::register_all`), the kernels this crate speeds up. Each replacement keeps
//! the portable kernel's load-time check and dtypes, adds a `prepare` step where packing or
//! fusion pays, and handles the common cases (float32, contiguous) with SIMD code; every other
//! call falls back to the portable kernel, so results and accepted programs stay the same.
//!
//! SIMD: AVX-512 and AVX2+FMA paths chosen at run time, and a portable path that compiles
//! everywhere (see [`simd`]); the CPU's features are detected once, in [`cpu`], which also
//! holds the process-wide cap on the level ([`cpu::set_max_level`]). Work is split over the method's threads through
//! [`pteron_core::Parallel`].

pub mod aligned;
pub mod attention;
pub mod blocks;
pub mod conv;
pub mod copy;
pub mod cpu;
pub mod dwconv;
pub mod elementwise;
pub mod gemm;
pub mod linear;
pub mod math;
pub mod norm;
pub mod par;
pub mod simd;
pub mod unary;

use std::sync::OnceLock;

use pteron_core::{Kernel, KernelContext, KernelError, KernelRegistry};

/// The portable kernels, for falling back on calls this crate does not speed up.
pub fn portable() -> &'static KernelRegistry {
    static P: OnceLock<KernelRegistry> = OnceLock::new();
    P.get_or_init(pteron_kernels::registry)
}

/// Runs the portable kernel registered as `name`.
pub fn fallback(name: &str, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    match portable().get(name) {
        Some(k) => (k.run)(ctx),
        None => Err(KernelError::unsupported(format!(
            "no portable kernel {name} to fall back on"
        ))),
    }
}

/// Registers `kernel` as `name` over the kernel already there, keeping that one's check,
/// dtypes and the arguments it writes in place (see [`Kernel::over`]); does nothing when no
/// kernel is registered under `name`.
pub(crate) fn register_over(r: &mut KernelRegistry, name: &str, kernel: Kernel) {
    if let Some(base) = r.get(name).copied() {
        r.register(name, kernel.over(&base));
    }
}

/// Registers this crate's kernels over those in `r` (which should hold the portable ones).
pub fn register(r: &mut KernelRegistry) {
    // Built now, so that falling back never allocates at run time.
    let _ = portable();
    attention::register(r);
    conv::register(r);
    copy::register(r);
    elementwise::register(r);
    linear::register(r);
    norm::register(r);
    unary::register(r);
}

/// The portable kernels with this crate's kernels registered over them.
pub fn registry() -> KernelRegistry {
    let mut r = pteron_kernels::registry();
    register(&mut r);
    r
}
