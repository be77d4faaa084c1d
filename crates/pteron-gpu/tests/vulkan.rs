//! Programs delegated to ExecuTorch's Vulkan backend (testdata/vulkan, exported by
//! tools/export/export_vulkan.py) run on the GPU engine through `VulkanBackend`: outputs
//! within 1e-3 relative of ExecuTorch's runtime on the same model's portable export (the pip
//! runtime has no Vulkan backend). A delegate with operators the engine does not run is a
//! load error that names them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pteron_gpu::{Gpu, GpuOptions, VulkanBackend};

#[path = "../../pteron/tests/support/fixtures.rs"]
mod fixtures;

fn vulkan_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vulkan")
}

fn runtime() -> Option<pteron::Runtime> {
    let gpu = match Gpu::open(&GpuOptions::default()) {
        Ok(g) => g,
        Err(e) if std::env::var("PTERON_GPU_TESTS").as_deref() == Ok("skip") => {
            eprintln!("skipping: {e}");
            return None;
        }
        Err(e) => panic!("{e} (install a Vulkan driver, or set PTERON_GPU_TESTS=skip)"),
    };
    let mut backends = pteron::default_backends();
    backends.register(Arc::new(VulkanBackend::new(gpu)));
    Some(
        pteron::Runtime::builder()
            .backends(backends)
            .build()
            .unwrap(),
    )
}

#[test]
fn vulkan_delegates_match_executorch() {
    let Some(rt) = runtime() else { return };
    for name in ["mlp", "mobilenet_v2_small"] {
        fixtures::run_fixture_at(&vulkan_dir().join(name), &rt, (1e-4, 1e-3));
    }
}

#[test]
fn unsupported_vulkan_operators_are_named_at_load() {
    let Some(rt) = runtime() else { return };
    let file = pteron::ProgramFile::open(vulkan_dir().join("bert_tiny/model.pte")).unwrap();
    let program = rt.load_program(&file).unwrap();
    let err = match program.load_method("forward") {
        Ok(_) => panic!("bert_tiny's Vulkan delegates loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("operators the GPU engine does not run")
            && err.contains("aten.arange.start_step"),
        "{err}"
    );
}

#[test]
fn without_the_backend_a_vulkan_program_is_refused() {
    let file = pteron::ProgramFile::open(vulkan_dir().join("mlp/model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let err = match program.load_method("forward") {
        Ok(_) => panic!("a Vulkan program loaded without the backend"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("VulkanBackend"), "{err}");
}
