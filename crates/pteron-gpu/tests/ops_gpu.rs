//! The op conformance suite (pteron's tests/ops.rs, goldens from ExecuTorch's runtime) with
//! the GPU engine taking every call it can: each case whose operator the engine claims and
//! whose tensors it takes runs as a GPU region; the rest runs on the CPU kernels, and every
//! case must still match. Every operator in `pteron_gpu::CLAIMS` must have run on the GPU in
//! at least one passing case.
//!
//! Needs a GPU adapter (CI: Mesa's lavapipe, a Vulkan driver on the CPU). Without one the test
//! fails, unless `PTERON_GPU_TESTS=skip`.

use std::sync::Arc;

use pteron_gpu::{GpuPartitioner, CLAIMS};

#[path = "../../pteron/tests/ops.rs"]
mod ops;
mod support {
    pub mod gpu;
}
use support::gpu::gpu_or_skip;

/// Cases allowed to fail on the GPU, with the reason.
const GPU_IGNORE: &[(&str, &str)] = &[];

#[test]
fn op_conformance_gpu() {
    let Some(gpu) = gpu_or_skip() else { return };
    println!("adapter: {:?}", gpu.adapter());
    let runtime = pteron::Runtime::builder()
        .channels_last(false)
        .partitioner(Arc::new(GpuPartitioner::new(gpu)))
        .build()
        .unwrap();
    ops::run_suite(&ops::Suite {
        runtime,
        allocations_allowed: true,
        tolerance: None,
        ignore: GPU_IGNORE,
        claimed: CLAIMS,
    });
}
