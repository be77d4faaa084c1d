//! Programs delegated to ExecuTorch's Vulkan backend (testdata/vulkan, exported by
//! tools/export/export_vulkan.py) run on the GPU engine through `VulkanBackend`: outputs
//! within 1e-3 relative of ExecuTorch's runtime on the same model's portable export (the pip
//! runtime has no Vulkan backend). A delegate with operators the engine does not run is a
//! load error that names them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pteron_gpu::VulkanBackend;

#[path = "../../pteron/tests/support/fixtures.rs"]
mod fixtures;
mod support {
    pub mod gpu;
}

fn vulkan_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vulkan")
}

fn runtime() -> Option<pteron::Runtime> {
    let gpu = support::gpu::gpu_or_skip()?;
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
    for name in ["mlp", "mobilenet_v2_small", "bert_tiny"] {
        fixtures::run_fixture_at(&vulkan_dir().join(name), &rt, (1e-4, 1e-3));
    }
}

#[test]
fn unsupported_vulkan_operators_are_named_at_load() {
    let Some(rt) = runtime() else { return };
    // The MLP with its ReLUs renamed to an operator nobody has (same length, so the
    // flatbuffer stays valid).
    let mut bytes = std::fs::read(vulkan_dir().join("mlp/model.pte")).unwrap();
    let (from, to) = (b"aten.relu.default", b"aten.relX.default");
    let mut renamed = 0;
    for at in 0..bytes.len() - from.len() {
        if &bytes[at..at + from.len()] == from {
            bytes[at..at + to.len()].copy_from_slice(to);
            renamed += 1;
        }
    }
    assert!(renamed > 0);
    let file = pteron::ProgramFile::from_bytes(&bytes);
    let program = rt.load_program(&file).unwrap();
    let err = match program.load_method("forward") {
        Ok(_) => panic!("an unknown Vulkan operator loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("operators the GPU engine does not run") && err.contains("aten.relX.default"),
        "{err}"
    );
}

/// BERT's token ids are int64 on the host and int32 on the device: an id that does not fit
/// int32 is refused before the run, one outside the embedding table by the run (the GPU's
/// error word), as the portable kernels refuse it.
#[test]
fn out_of_range_token_ids_are_errors() {
    let Some(rt) = runtime() else { return };
    let dir = vulkan_dir().join("bert_tiny");
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = rt.load_program(&file).unwrap();
    let Ok(mut method) = program.load_method("forward") else {
        panic!("bert_tiny did not load")
    };
    let ids = pteron::npy::read(dir.join("input0.npy")).unwrap();
    let mask = pteron::npy::read(dir.join("input1.npy")).unwrap();
    use pteron::RunMethod;
    for (bad, what) in [
        (1i64 << 40, "does not fit int32"),
        (5000, "outside its dim"),
    ] {
        let mut v: Vec<i64> = ids
            .data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        v[3] = bad;
        let t = pteron::Tensor::from_i64(&ids.sizes, &v);
        let err = method
            .run(&[t, mask.clone()])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(err.contains(what), "{bad}: {err}");
    }
    // And the method still runs after those errors.
    method.run(&[ids, mask]).unwrap();
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

/// Hostile payloads: seeded byte changes anywhere in a Vulkan program end in a load or run
/// error or in a run, never in a panic (every offset, size and id is checked).
#[test]
fn mutated_vulkan_programs_fail_cleanly() {
    let Some(rt) = runtime() else { return };
    let bytes = std::fs::read(vulkan_dir().join("mlp/model.pte")).unwrap();
    let input = pteron::npy::read(vulkan_dir().join("mlp/input0.npy")).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    // The delegate's header and flatbuffer (weights, the rest of the file, take few changes).
    let vh = bytes.windows(4).position(|w| w == b"VH00").unwrap() - 4;
    let fb_len = u32::from_le_bytes(bytes[vh + 14..vh + 18].try_into().unwrap()) as usize;
    let payload = vh..(vh + 32 + fb_len).min(bytes.len());
    let (mut loaded, mut ran) = (0, 0);
    for round in 0..600 {
        let mut m = bytes.clone();
        for _ in 0..1 + next() % 4 {
            let at = if round % 4 == 0 {
                (next() % m.len() as u64) as usize
            } else {
                payload.start + (next() % payload.len() as u64) as usize
            };
            m[at] = next() as u8;
        }
        let file = pteron::ProgramFile::from_bytes(&m);
        let Ok(program) = rt.load_program(&file) else {
            continue;
        };
        let Ok(mut method) = program.load_method("forward") else {
            continue;
        };
        loaded += 1;
        use pteron::RunMethod;
        if method.run(std::slice::from_ref(&input)).is_ok() {
            ran += 1;
        }
    }
    println!("{loaded} mutated programs loaded, {ran} ran");
}

/// ExecuTorch's Vulkan LLM export (tools/export/export_vulkan_llm.py: the tiny Llama with the
/// KV cache inside the delegate and a dynamic sequence length) needs what the engine does not
/// have yet — symbolic sizes, RMS norm, rotary embedding, attention with a resident cache —
/// and is refused at load with those operators named, not run wrongly.
#[test]
fn vulkan_llm_exports_are_refused_by_name() {
    let Some(rt) = runtime() else { return };
    for name in ["llm_tiny", "llm_tiny_8da4w"] {
        let file = pteron::ProgramFile::open(vulkan_dir().join(name).join("model.pte")).unwrap();
        let program = rt.load_program(&file).unwrap();
        let err = match program.load_method("forward") {
            Ok(_) => panic!("{name}: loaded"),
            Err(e) => e.to_string(),
        };
        for op in [
            "sdpa_with_kv_cache.default",
            "et_vk.apply_rotary_emb.default",
        ] {
            assert!(err.contains(op), "{name}: {err}");
        }
    }
}
