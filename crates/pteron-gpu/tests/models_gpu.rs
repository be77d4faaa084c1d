//! Every fixture of testdata/models (goldens from ExecuTorch's runtime) with the GPU engine
//! taking every run of calls it can, the rest on the CPU kernels: outputs within 1e-3
//! relative of ExecuTorch's (the GPU's own sums and functions; Vulkan allows a few ulp on
//! `exp`). MobileNetV2 and the BERT fixture (MiniLM's architecture) must run almost wholly on
//! the device.

use std::sync::Arc;

use pteron_gpu::GpuPartitioner;

#[path = "../../pteron/tests/support/fixtures.rs"]
mod fixtures;
mod support {
    pub mod gpu;
}

fn gpu_runtime() -> Option<pteron::Runtime> {
    let gpu = support::gpu::gpu_or_skip()?;
    Some(
        pteron::Runtime::builder()
            .channels_last(false)
            .partitioner(Arc::new(GpuPartitioner::new(gpu)))
            .build()
            .unwrap(),
    )
}

#[test]
fn fixtures_match_on_the_gpu() {
    let Some(runtime) = gpu_runtime() else { return };
    let mut names: Vec<String> = std::fs::read_dir(fixtures::models_dir())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("model.pte").exists())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in &names {
        let stats = fixtures::run_fixture_on(name, &runtime, (1e-4, 1e-3));
        println!(
            "{name}: {} GPU regions, {} calls on the GPU",
            stats.regions, stats.partitioned_calls
        );
        if name == "mobilenet_v2_small" || name == "bert_tiny" {
            assert!(
                stats.partitioned_calls > 0 && stats.regions <= 3,
                "{name}: {stats:?}"
            );
        }
    }
}
