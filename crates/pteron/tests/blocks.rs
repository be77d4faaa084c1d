//! Fused blocks (`pteron_kernels_cpu::blocks`): the rotary embeddings, RMSNorms and SiLU
//! gates of exported Llama layers run as one kernel each, and the logits stay bit for bit
//! those of the portable calls, over a prompt and the decode steps after it (the KV cache
//! filled by each in turn).

use std::path::{Path, PathBuf};

use pteron::{RunMethod, Runtime, Tensor, Value};

fn llm_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm")
}

/// Logits of a 5-token prompt and of 4 decode steps after it, and the method's region count.
fn generate(path: &Path, runtime: &Runtime) -> (Vec<Vec<u32>>, usize) {
    let file = pteron::ProgramFile::open(path).unwrap();
    let program = runtime.load_program(&file).unwrap();
    let mut method = program.load_method("forward").unwrap();
    let regions = method.plan_stats().regions;
    let mut logits = Vec::new();
    let mut step = |tokens: &[i64], pos: i64| {
        let inputs = [
            Tensor::from_i64(&[1, tokens.len()], tokens),
            Tensor::from_i64(&[1], &[pos]),
        ];
        let out = method.run(&inputs).unwrap();
        let Value::Tensor(t) = &out[0] else {
            panic!("logits are not a tensor")
        };
        let bits: Vec<u32> = t
            .to_f64_vec()
            .unwrap()
            .iter()
            .map(|&v| (v as f32).to_bits())
            .collect();
        logits.push(bits);
    };
    step(&[1, 17, 42, 5, 99], 0);
    for (i, t) in [7i64, 300, 12, 64].iter().enumerate() {
        step(&[*t], 5 + i as i64);
    }
    (logits, regions)
}

#[test]
fn rotary_blocks_keep_the_bits() {
    let fused = Runtime::new();
    let plain = Runtime::builder().blocks(false).build().unwrap();
    for (rel, layers) in [
        ("tiny_xnnpack/8da4w.pte", 2),
        ("tiny_xnnpack/fp32.pte", 2),
        ("families/llama3_2/xnnpack_8da4w.pte", 2),
    ] {
        let path = llm_dir().join(rel);
        let (a, ra) = generate(&path, &fused);
        let (b, rb) = generate(&path, &plain);
        // Per layer: the queries' and the keys' rotations together, the MLP's gate and the
        // RMSNorm before it, the attention's RMSNorm but for the first layer's (the exporter
        // moved its calls apart) and with the final one.
        assert_eq!(ra, rb + 4 * layers, "{rel}: fused blocks");
        assert_eq!(a.len(), b.len());
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x.iter().any(|&v| v != 0), "{rel}: step {k} has zero logits");
            assert!(
                x == y,
                "{rel}: step {k}: the fused logits differ from the calls'"
            );
        }
    }
}

#[test]
fn other_families_keep_the_bits() {
    // Qwen's exports rotate halves (`rotate_half`), not interleaved pairs, and normalize the
    // queries and keys too; Phi's and LFM2's differ in other ways: whatever is taken, the
    // logits stay the calls'.
    for rel in [
        "families/qwen3/xnnpack_fp32.pte",
        "families/qwen2_5/xnnpack_8da4w.pte",
        "families/phi_4_mini/xnnpack_fp32.pte",
        "families/lfm2/xnnpack_fp32.pte",
        "families/qwen3_5/xnnpack_8da4w.pte",
        "tiny/fp32.pte",
    ] {
        let path = llm_dir().join(rel);
        let (a, _) = generate(&path, &Runtime::new());
        let (b, _) = generate(&path, &Runtime::builder().blocks(false).build().unwrap());
        for (k, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(
                x == y,
                "{rel}: step {k}: the fused logits differ from the calls'"
            );
        }
    }
}
