//! Load-time planning (kernels' `prepare`: packed weights, absorbed producers, fused
//! consumers) and threads must not change results: every fixture runs with the default
//! kernels planned on 1 and 3 threads, unplanned, and on the portable kernels alone, and the
//! outputs must agree (within fp32 reordering noise).

use std::path::{Path, PathBuf};

use pteron::{npy, MethodOptions, RunMethod, Runtime, Tensor, Value};

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(models_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("model.pte").exists())
        .collect();
    v.sort();
    v
}

/// Outputs of `dir`'s fixture (default case) with the given runtime (kernels, preparation,
/// engines) and options, and the method's planning statistics.
fn run(dir: &Path, runtime: &Runtime, options: MethodOptions) -> (Vec<Value>, pteron::PlanStats) {
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let data = dir.join("model.ptd");
    let data = data
        .exists()
        .then(|| pteron::ProgramFile::open(&data).unwrap());
    let mut program = runtime.load_program(&file).unwrap();
    if let Some(d) = &data {
        program = program.with_external_data(d.data_file().unwrap());
    }
    let mut method = program
        .load_method_with("forward", options)
        .unwrap_or_else(|e| panic!("{}: load: {e}", dir.display()));
    let inputs: Vec<Tensor> = (0..method.num_inputs())
        .map(|i| npy::read(dir.join(format!("input{i}.npy"))).unwrap())
        .collect();
    let stats = method.plan_stats();
    (method.run(&inputs).unwrap(), stats)
}

/// The portable kernels, with the default options otherwise (preparation, channels-last
/// regions, backends), as `load_method_with(name, &pteron::portable_kernels(), options)` loaded.
fn portable_runtime() -> Runtime {
    Runtime::builder()
        .kernels(pteron::portable_kernels())
        .build()
        .unwrap()
}

fn assert_same(name: &str, what: &str, a: &[Value], b: &[Value]) {
    assert_eq!(a.len(), b.len(), "{name} {what}: output count");
    for (k, (x, y)) in a.iter().zip(b).enumerate() {
        match (x, y) {
            (Value::Tensor(x), Value::Tensor(y)) => {
                assert_eq!(
                    (x.dtype, &x.sizes),
                    (y.dtype, &y.sizes),
                    "{name} {what} {k}"
                );
                let (u, v) = (x.to_f64_vec().unwrap(), y.to_f64_vec().unwrap());
                let scale = v.iter().fold(1.0f64, |m, e| m.max(e.abs()));
                for (i, (p, q)) in u.iter().zip(&v).enumerate() {
                    let same = (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-4 * scale;
                    assert!(same, "{name} {what} output {k} element {i}: {p} vs {q}");
                }
            }
            _ => assert_eq!(x, y, "{name} {what} output {k}"),
        }
    }
}

#[test]
fn planning_and_threads_keep_results() {
    let default = Runtime::new();
    // The portable kernels with the default options otherwise (channels-last regions on).
    let portable = portable_runtime();
    let channels_first = Runtime::builder().channels_last(false).build().unwrap();
    let unprepared = Runtime::builder().prepare(false).build().unwrap();
    for dir in fixtures() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let (reference, _) = run(&dir, &portable, MethodOptions::new().threads(1));
        let (one, stats) = run(&dir, &default, MethodOptions::new().threads(1));
        assert_same(&name, "planned, 1 thread", &reference, &one);
        let (three, stats3) = run(&dir, &default, MethodOptions::new().threads(3));
        assert_same(&name, "planned, 3 threads", &reference, &three);
        assert_eq!(
            (stats.fused_calls, stats.absorbed_calls),
            (stats3.fused_calls, stats3.absorbed_calls),
            "{name}: planning depends on the thread count"
        );
        assert_eq!(
            (stats.regions, stats.partitioned_calls),
            (stats3.regions, stats3.partitioned_calls),
            "{name}: partitioning depends on the thread count"
        );
        let (first, no_regions) = run(&dir, &channels_first, MethodOptions::new().threads(1));
        assert_same(&name, "planned channels-first", &reference, &first);
        assert_eq!(
            no_regions.regions, 0,
            "{name}: channels_last(false) partitioned"
        );
        let (unplanned, none) = run(&dir, &unprepared, MethodOptions::new());
        assert_same(&name, "unplanned", &reference, &unplanned);
        assert_eq!(none, Default::default(), "{name}: prepare(false) planned");
    }
}

#[test]
fn mobilenet_folds_batch_norm_and_clamp_and_packs_weights() {
    let dir = models_dir().join("mobilenet_v2_small");
    let channels_first = Runtime::builder().channels_last(false).build().unwrap();
    let (_, stats) = run(&dir, &channels_first, MethodOptions::new());
    // Every convolution is followed by a batch norm, most by a hardtanh: all fused.
    assert!(stats.fused_calls >= 2 * 35, "{stats:?}");
    // The classifier's weight transpose is packed by addmm and removed.
    assert_eq!(stats.absorbed_calls, 1, "{stats:?}");
    assert!(
        stats.prepared_bytes > 0 && stats.prepared_calls >= 52,
        "{stats:?}"
    );
}

/// By default the whole convolution part of MobileNetV2 (every call before the classifier)
/// becomes one channels-last region; its results match the portable kernels (checked for
/// every fixture by `planning_and_threads_keep_results`) and the golden outputs.
#[test]
fn mobilenet_runs_as_one_channels_last_region() {
    let dir = models_dir().join("mobilenet_v2_small");
    let (_, stats) = run(&dir, &Runtime::new(), MethodOptions::new().threads(2));
    assert_eq!(stats.regions, 1, "{stats:?}");
    // 52 convolutions with their batch norms, the clamps, the residual adds and the mean.
    assert!(stats.partitioned_calls >= 52 * 2 + 10, "{stats:?}");
    // The classifier stays a kernel call; its transposed weight is read in place.
    assert_eq!(stats.absorbed_calls, 1, "{stats:?}");
}

/// The convolution-pattern fixture (grouped, dilated, depthwise ×2, squeeze multiply, two
/// outputs, batch 2) runs as one region up to the classifier.
#[test]
fn conv_blocks_run_as_one_channels_last_region() {
    let dir = models_dir().join("conv_blocks");
    let (_, stats) = run(&dir, &Runtime::new(), MethodOptions::new().threads(2));
    assert_eq!(
        (stats.regions, stats.partitioned_calls),
        (1, 22),
        "{stats:?}"
    );
}

/// The small CNN's second stage (convolution, batch norm, ReLU, 2×2 average pool, strided
/// convolution, ReLU, mean) is one region; its max pool is left to the portable kernel.
#[test]
fn cnn_average_pool_joins_the_region() {
    let dir = models_dir().join("cnn");
    let (_, stats) = run(&dir, &Runtime::new(), MethodOptions::new().threads(1));
    assert_eq!(
        (stats.regions, stats.partitioned_calls),
        (1, 7),
        "{stats:?}"
    );
}

/// Regression: a constant call (here `arange` from static scalars) whose output no
/// instruction reads by value index was "absorbed" (removed) although no reader had taken it
/// over; the memory plan gives that output's buffer to another value, read later, so the
/// Whisper decoder's logits came out wrong by up to 2.2 (9.4 on Whisper tiny.en). Three
/// decode steps of a random-weight Whisper decoder (the fixture's first export: static KV
/// cache in mutable buffers updated by `index_copy_`, a causal mask `arange(T) <= pos`) must
/// give the same logits planned and on the portable kernels.
#[test]
fn unread_constant_calls_are_kept() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/regressions/planning");
    let file = pteron::ProgramFile::open(dir.join("whisper_where_mask.pte")).unwrap();
    let cross = npy::read(dir.join("whisper_where_mask_cross_kv.npy")).unwrap();
    let steps = |runtime: &Runtime| -> Vec<Vec<Value>> {
        let program = runtime.load_program(&file).unwrap();
        let mut m = program
            .load_method_with("decode", MethodOptions::new().threads(1))
            .unwrap();
        [121i64, 122, 51]
            .iter()
            .enumerate()
            .map(|(pos, &tok)| {
                let inputs = [
                    Tensor::from_i64(&[1, 1], &[tok]),
                    Tensor::from_i64(&[1], &[pos as i64]),
                    cross.clone(),
                ];
                m.run(&inputs).unwrap()
            })
            .collect()
    };
    let planned = steps(&Runtime::new());
    let portable = steps(&portable_runtime());
    for (k, (a, b)) in planned.iter().zip(&portable).enumerate() {
        assert_same("whisper_tiny_random decode", &format!("step {k}"), b, a);
    }
}

/// Inputs the exporter leaves to the caller (`alloc_graph_input=False`) get memory of their
/// own and keep their contents across runs; planned inputs may be overwritten after their
/// last use, so a runner must set them again.
#[test]
fn unplanned_inputs_are_preserved() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let file =
        pteron::ProgramFile::open(root.join("speech/whisper_tiny_random/model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let m = program
        .load_method_with("decode", MethodOptions::new())
        .unwrap();
    assert!(m.num_inputs() > 2);
    assert!((0..m.num_inputs()).all(|i| m.input_is_preserved(i)));
    // The caches written by llama::update_cache are the method's state, not inputs.
    assert_eq!(m.cache_tensors().len(), 4);
    let old = pteron::ProgramFile::open(root.join("regressions/planning/whisper_where_mask.pte"))
        .unwrap();
    let program = pteron::Runtime::new().load_program(&old).unwrap();
    let m = program
        .load_method_with("decode", MethodOptions::new())
        .unwrap();
    assert!(!m.input_is_preserved(2));
    assert!(m.cache_tensors().is_empty());
}
