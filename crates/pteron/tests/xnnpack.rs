//! XNNPACK-delegated fixtures (testdata/xnnpack, written by tools/export/export_xnnpack.py) run
//! through pteron's XNNPACK backend and must match the outputs ExecuTorch's runtime (with its
//! own XNNPACK backend) produced for the same `.pte`: float32 within 1e-4 relative to the
//! output's scale (max |expected|, at least 1), float16 within 1e-2.

use std::path::{Path, PathBuf};

use pteron::{npy, MethodOptions, RunMethod, Tensor, Value};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/xnnpack")
}

/// Full-size models written by `tools/export/export_xnnpack.py --full --out DIR` (not
/// committed): `PTERON_XNNPACK_FULL=DIR`, default tools/export/out/xnnpack_full.
fn full_models_dir() -> PathBuf {
    std::env::var_os("PTERON_XNNPACK_FULL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/export/out/xnnpack_full")
        })
}

fn fixture_names() -> Vec<String> {
    names_in(&fixtures_dir())
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.pte").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Max |got − expected| and the output's scale.
fn max_error(got: &Tensor, want: &Tensor) -> (f64, f64) {
    assert_eq!(got.dtype, want.dtype);
    assert_eq!(got.sizes, want.sizes);
    let g = got.to_f64_vec().unwrap();
    let w = want.to_f64_vec().unwrap();
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let mut err = 0.0f64;
    for (a, e) in g.iter().zip(&w) {
        let d = (a - e).abs();
        err = if d.is_nan() {
            f64::INFINITY
        } else {
            err.max(d)
        };
    }
    (err, scale)
}

/// For deep models with dynamically quantized activations (`_8da8w`, `_8da4w`, `_dq8`; not
/// the small committed fixtures, which match exactly): each activation row is re-quantized
/// from float values computed outside the integer kernels (layer norm, softmax, …), so a
/// float difference of one ulp can move a quantized value by a step, and that propagates
/// through the layers. There the bound is the spread ExecuTorch itself shows against eager
/// PyTorch on the same quantized model (`et_vs_eager_max_abs` in meta.json).
fn dynamic_spread(dir: &Path, name: &str, output: usize) -> f64 {
    let dynamic = ["_8da8w", "_8da4w", "_dq8"]
        .iter()
        .any(|m| name.ends_with(m));
    if !dynamic || dir.starts_with(fixtures_dir()) {
        return 0.0;
    }
    let Ok(text) = std::fs::read_to_string(dir.join("meta.json")) else {
        return 0.0;
    };
    let meta: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    meta["et_vs_eager_max_abs"][format!("base/out{output}")]
        .as_f64()
        .unwrap_or(0.0)
}

/// Fixtures on which pteron is known to differ from ExecuTorch by more than the float
/// tolerance, with the bound the difference must stay within and why. None at present:
/// `mobilenet_v2_small_int8` differed by two output steps until the int8 mean added the
/// output zero point before rounding, as XNNPACK does (issue 28).
const KNOWN_DIFFERENCES: &[(&str, f64, &str)] = &[];

fn known_difference(name: &str) -> f64 {
    KNOWN_DIFFERENCES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or(0.0, |&(_, bound, _)| bound)
}

struct Case {
    inputs: Vec<Tensor>,
    expected: Vec<Tensor>,
}

fn load_case(dir: &Path) -> Case {
    let read_all = |prefix: &str| {
        let mut v = Vec::new();
        for i in 0.. {
            let p = dir.join(format!("{prefix}{i}.npy"));
            if !p.exists() {
                break;
            }
            v.push(npy::read(&p).unwrap());
        }
        v
    };
    Case {
        inputs: read_all("input"),
        expected: read_all("expected"),
    }
}

fn run(name: &str, options: MethodOptions) -> Vec<f64> {
    run_in(&fixtures_dir(), name, options)
}

fn run_in(root: &Path, name: &str, options: MethodOptions) -> Vec<f64> {
    let dir = root.join(name);
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut method = program
        .load_method_with("forward", options)
        .unwrap_or_else(|e| panic!("{name}: load: {e}"));
    let case = load_case(&dir);
    let mut errors = Vec::new();
    // Twice: the second run reuses the delegate's planned memory.
    for round in 0..2 {
        let outputs = method
            .run(&case.inputs)
            .unwrap_or_else(|e| panic!("{name}: run: {e}"));
        assert_eq!(outputs.len(), case.expected.len(), "{name}: outputs");
        for (k, (o, want)) in outputs.iter().zip(&case.expected).enumerate() {
            let Value::Tensor(got) = o else {
                panic!("{name}: output {k} is not a tensor")
            };
            let (err, scale) = max_error(got, want);
            if round == 0 {
                eprintln!("{name} output {k}: max abs error {err:.3e} (scale {scale:.3e})");
                errors.push(err / scale);
            }
            // float32: 1e-4 of the output's scale. float16 outputs: values are rounded to half
            // after every node, where ExecuTorch's kernels may keep more or less precision
            // inside a node: 1e-2 (about three half ulps at the scale).
            let tol = if got.dtype == pteron::ScalarType::Half {
                1e-2
            } else {
                1e-4
            };
            let bound = (tol * scale)
                .max(dynamic_spread(&dir, name, k))
                .max(known_difference(name));
            assert!(
                err <= bound,
                "{name} output {k}: max abs error {err:e} over {bound:e} (scale {scale:e})"
            );
        }
    }
    errors
}

#[test]
fn fixtures_match_executorch() {
    let names = fixture_names();
    assert!(names.len() >= 7, "fixtures: {names:?}");
    for name in &names {
        run(name, MethodOptions::new().threads(1));
    }
}

#[test]
#[ignore = "needs tools/export/export_xnnpack.py --full --only mobilenet_v2 mobilenet_v2_int8 \
            all_minilm_l6_v2 all_minilm_l6_v2_dq8 --out tools/export/out/xnnpack_full"]
fn full_models_match_executorch() {
    let root = full_models_dir();
    let names = names_in(&root);
    assert!(!names.is_empty(), "no models under {}", root.display());
    for name in &names {
        for threads in [1, 2] {
            run_in(&root, name, MethodOptions::new().threads(threads));
        }
    }
}

#[test]
#[cfg_attr(
    target_family = "wasm",
    ignore = "no threads on wasm32 without atomics"
)]
fn fixtures_match_with_threads() {
    for name in fixture_names() {
        run(&name, MethodOptions::new().threads(3));
    }
}

/// Folding the int8 clamps of MobileNetV2's ReLU6 into their convolutions changes no output
/// bit (the fixture has 35 XNNClamp nodes after int8 convolutions).
#[test]
fn int8_clamps_fold_without_changing_outputs() {
    let dir = fixtures_dir().join("mobilenet_v2_small_int8");
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let case = load_case(&dir);
    let mut unfused = pteron::BackendRegistry::new();
    unfused.register(std::sync::Arc::new(pteron_xnnpack::XnnpackBackend {
        unfused: true,
        ..Default::default()
    }));
    let unfused = pteron::Runtime::builder()
        .backends(unfused)
        .build()
        .unwrap();
    let mut outputs = Vec::new();
    for runtime in [pteron::Runtime::new(), unfused] {
        let program = runtime.load_program(&file).unwrap();
        let mut method = program
            .load_method_with("forward", MethodOptions::new().threads(2))
            .unwrap();
        let out = method.run(&case.inputs).unwrap();
        let Value::Tensor(t) = &out[0] else {
            panic!("output 0 is not a tensor")
        };
        outputs.push(t.to_f64_vec().unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn no_backend_registered_is_backend_missing() {
    let file = pteron::ProgramFile::open(fixtures_dir().join("mlp").join("model.pte")).unwrap();
    let runtime = pteron::Runtime::builder()
        .backends(pteron::BackendRegistry::new())
        .build()
        .unwrap();
    let program = runtime.load_program(&file).unwrap();
    let e = program.load_method("forward").err().expect("refused");
    assert!(
        matches!(&e, pteron::Error::Runtime(pteron::MethodError::BackendMissing { backend }) if backend == "XnnpackBackend"),
        "{e}"
    );
}

/// Every fixture's payload, cut short or with bytes flipped, fails to load or runs without a
/// panic (the payload is hostile input like the rest of the file).
#[test]
fn corrupt_payloads_fail_cleanly() {
    for name in ["mlp", "cnn", "unet"] {
        let bytes = std::fs::read(fixtures_dir().join(name).join("model.pte")).unwrap();
        let case = load_case(&fixtures_dir().join(name));
        let xh = bytes
            .windows(4)
            .position(|w| w == b"XH00")
            .expect("an XH00 header");
        let blob_start = xh - 4;
        let mut variants: Vec<Vec<u8>> = Vec::new();
        // Header fields: every byte of offsets and sizes set to 0xFF, then to 0.
        for at in 8..30 {
            for v in [0xFFu8, 0x00, 0x7F] {
                let mut b = bytes.clone();
                b[blob_start + at] = v;
                variants.push(b);
            }
        }
        // Flipped bytes across the flatbuffer.
        let mut state = 0x9E37_79B9u32;
        for _ in 0..300 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let off = blob_start + 32 + (state as usize % 2048);
            if off < bytes.len() {
                let mut b = bytes.clone();
                b[off] ^= (state >> 8) as u8 | 1;
                variants.push(b);
            }
        }
        for (i, b) in variants.iter().enumerate() {
            let r = std::panic::catch_unwind(|| {
                let file = pteron::ProgramFile::from_bytes(b);
                let Ok(program) = pteron::Runtime::new().load_program(&file) else {
                    return;
                };
                let Ok(mut m) =
                    program.load_method_with("forward", MethodOptions::new().threads(1))
                else {
                    return;
                };
                let _ = m.run(&case.inputs);
            });
            assert!(r.is_ok(), "{name} variant {i} panicked");
        }
    }
}

/// `EngineOptions::profile` collects every node's time (no printing): the small MobileNetV2
/// fixture's delegate reports its nodes with runs and output shapes, and profiling changes no
/// output.
#[test]
fn node_profile_collects_rows() {
    let dir = fixtures_dir().join("mobilenet_v2_small");
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let case = load_case(&dir);
    let profile = std::sync::Arc::new(pteron::NodeProfile::new());
    let mut outputs = Vec::new();
    for engine in [
        pteron::EngineOptions::new(),
        pteron::EngineOptions::new().profile(profile.clone()),
    ] {
        let runtime = pteron::Runtime::builder().engine(engine).build().unwrap();
        let program = runtime.load_program(&file).unwrap();
        let mut method = program
            .load_method_with("forward", MethodOptions::new().threads(1))
            .unwrap();
        for _ in 0..2 {
            let out = method.run(&case.inputs).unwrap();
            let Value::Tensor(t) = &out[0] else {
                panic!("output 0 is not a tensor")
            };
            outputs.push(t.data.clone());
        }
    }
    assert!(outputs.iter().all(|o| o == &outputs[0]));
    let graphs = profile.graphs();
    assert!(!graphs.is_empty());
    let ran: Vec<_> = graphs[0].nodes.iter().filter(|n| n.runs > 0).collect();
    assert!(ran.len() > 10, "{} nodes ran", ran.len());
    assert!(ran.iter().all(|n| n.runs == 2 && n.shape.rank() > 0));
    assert!(ran.iter().any(|n| n.op.starts_with("XNNConv2d")));
    let report = profile.report(true);
    assert!(report.starts_with("XNNPACK delegate profile (2 runs; time per run):"));
    assert!(report.contains("  nodes in order:"));
}

/// Issue 28, part 3: the dynamically quantized convolutions (QD8 × QC8 → F32, a ViT-like
/// patch embedding) and the static int8 transposed convolutions on 1–3 threads. Dynamic:
/// pteron's error against ExecuTorch no larger than ExecuTorch's own error against the fp32
/// model (`et_vs_fp32_max_abs`, written by tools/export/export_int8_nodes.py); static int8:
/// at most one output quantization step (the smallest gap between ExecuTorch's distinct
/// dequantized outputs). Both match exactly today.
#[test]
fn int8_conv_nodes_match_executorch() {
    for (name, node) in [
        ("patch_embed_dq8", "XNNConv2d: qdint8, qcint8, fp32 -> fp32"),
        (
            "unet_deconv_int8",
            "XNNConvTranspose2d: qint8, qcint8, qcint32 -> qint8",
        ),
    ] {
        let dir = fixtures_dir().join(name);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
        let quant_err = meta["et_vs_fp32_max_abs"]["base/out0"].as_f64().unwrap();
        let nodes = &meta["xnnpack_node_datatypes"];
        assert!(
            nodes.as_array().unwrap().iter().any(|n| n == node),
            "{name}: no {node} in {nodes}"
        );
        let case = load_case(&dir);
        let want = case.expected[0].to_f64_vec().unwrap();
        let bound = if name.ends_with("_dq8") {
            quant_err
        } else {
            let mut v = want.clone();
            v.sort_by(f64::total_cmp);
            v.dedup();
            v.windows(2)
                .map(|w| w[1] - w[0])
                .fold(f64::INFINITY, f64::min)
                * 1.001
        };
        assert!(bound.is_finite() && bound > 0.0, "{name}: bound {bound}");
        let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
        let program = pteron::Runtime::new().load_program(&file).unwrap();
        for threads in 1..=3 {
            let mut method = program
                .load_method_with("forward", MethodOptions::new().threads(threads))
                .unwrap_or_else(|e| panic!("{name}: load: {e}"));
            let outputs = method.run(&case.inputs).unwrap();
            let Value::Tensor(got) = &outputs[0] else {
                panic!("{name}: output is not a tensor")
            };
            let (err, _) = max_error(got, &case.expected[0]);
            eprintln!("{name} ({threads} threads): |pteron − ET| {err:.3e}, bound {bound:.3e}");
            assert!(err <= bound, "{name}: error {err:e} over {bound:e}");
        }
    }
}
