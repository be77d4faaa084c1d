//! The XNNPACK delegate's fused steps give bit for bit what the nodes give apart
//! (`FusePolicy::Off`), on one to three threads, twice per method (the second run reuses
//! the planned bands):
//! - `FusePolicy::All`: every 3×3 depthwise convolution with the pointwise
//!   convolutions that only feed it or only read it, whatever the map sizes; the small
//!   MobileNetV2 fixture has 16 expand-depthwise-project chains and one depthwise-project
//!   chain, 11 of them ending in a residual add run as the project step's epilogue;
//! - `FusePolicy::Default`: chains on large maps only, so the residual adds there follow plain
//!   convolutions (`XNNConv2d+XNNAdd`: 11 in the small MobileNetV2, one in the U-Net and in
//!   the portable conv blocks).
//!
//! The XNNPACK files and, through the channels-last partitioner, portable ones; the policy is
//! `MethodOptions::engine`'s.

use std::path::Path;

use pteron::{npy, EngineOptions, FusePolicy, MethodOptions, RunMethod, Tensor, Value};

fn outputs(dir: &Path, threads: usize, fuse: FusePolicy) -> Vec<Vec<Tensor>> {
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let runtime = pteron::Runtime::builder()
        .engine(EngineOptions::new().fuse(fuse))
        .build()
        .unwrap();
    let program = runtime.load_program(&file).unwrap();
    let mut method = program
        .load_method_with("forward", MethodOptions::new().threads(threads))
        .unwrap();
    let mut inputs = Vec::new();
    for i in 0.. {
        let p = dir.join(format!("input{i}.npy"));
        if !p.exists() {
            break;
        }
        inputs.push(npy::read(&p).unwrap());
    }
    (0..2)
        .map(|_| {
            method
                .run(&inputs)
                .unwrap()
                .into_iter()
                .map(|v| match v {
                    Value::Tensor(t) => t,
                    other => panic!("output {other:?} is not a tensor"),
                })
                .collect()
        })
        .collect()
}

#[test]
fn fused_steps_equal_the_two_nodes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    for name in [
        "xnnpack/mobilenet_v2_small",
        "xnnpack/cnn",
        "xnnpack/unet",
        "models/mobilenet_v2_small",
        "models/conv_blocks",
    ] {
        let dir = root.join(name);
        let apart = outputs(&dir, 1, FusePolicy::Off);
        for (mode, threads) in [
            (FusePolicy::All, 1),
            (FusePolicy::All, 2),
            (FusePolicy::All, 3),
            (FusePolicy::Default, 1),
            (FusePolicy::Default, 2),
        ] {
            let fused = outputs(&dir, threads, mode);
            for (round, (f, a)) in fused.iter().zip(&apart).enumerate() {
                assert_eq!(f.len(), a.len());
                for (k, (f, a)) in f.iter().zip(a).enumerate() {
                    assert_eq!(f.sizes, a.sizes, "{name} output {k}");
                    assert_eq!(
                        f.data, a.data,
                        "{name} output {k}, fusion {mode:?}, {threads} thread(s), run {round}: \
                         fused differs"
                    );
                }
            }
        }
    }
}
