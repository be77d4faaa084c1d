//! The GPU the engine's tests run on (CI: Mesa's lavapipe), shared by the test binaries.

#![allow(dead_code)]

use pteron_gpu::{Gpu, GpuOptions};

/// The best adapter, or `None` (the test returns) where `PTERON_GPU_TESTS=skip` says to skip
/// GPU tests on a machine without one; otherwise a missing GPU fails the test.
pub fn gpu_or_skip() -> Option<Gpu> {
    gpu_or_skip_with(&GpuOptions::default())
}

/// As [`gpu_or_skip`] with `options`.
pub fn gpu_or_skip_with(options: &GpuOptions) -> Option<Gpu> {
    match Gpu::open(options) {
        Ok(g) => Some(g),
        Err(e) if std::env::var("PTERON_GPU_TESTS").as_deref() == Ok("skip") => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!(
            "{e} (install a Vulkan driver, e.g. mesa-vulkan-drivers, or set PTERON_GPU_TESTS=skip)"
        ),
    }
}
