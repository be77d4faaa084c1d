//! Crashers turned into tests, and a short fuzz smoke, on stable and without libFuzzer.
//!
//! * `testdata/regressions/<target>/*`: inputs that once crashed, hung or overflowed in the
//!   cargo-fuzz target `<target>` (see fuzz/README.md). Each is replayed through the target's
//!   own body (`support/harness.rs`, which the fuzz targets include by path) and must finish
//!   without a panic within the watchdog's limit.
//! * A fuzz smoke: chains of structure-aware mutants (the fuzzers' custom mutators) of a few
//!   fixtures for `load_method_execute`, and of input bytes for every fixture for
//!   `execute_inputs`; `PTERON_FUZZ_SMOKE=n` sets the number of mutants per target.
//! * `testdata/regressions/differential/`: programs on which fuzz/differential.py found pteron
//!   disagreeing with ExecuTorch, pteron being wrong; one test each.

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "support/program_object_api.rs"]
mod objapi;

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "support/xnnpack_object_api.rs"]
mod xnnobj;

#[path = "support/mutate.rs"]
mod mutate;

#[path = "support/xnn_mutate.rs"]
mod xnn_mutate;

#[path = "support/harness.rs"]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pteron::{RunMethod, ScalarType, Tensor, Value};

type Target = fn(&[u8]) -> harness::Outcome;

const TARGETS: &[(&str, Target)] = &[
    ("load_program", harness::load_program),
    ("load_ptd", harness::load_ptd),
    ("load_method_execute", harness::load_method_execute),
    ("execute_inputs", harness::execute_inputs),
    ("xnnpack_payload", harness::xnnpack_payload),
];

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string().replace('\n', " ")));
            prev(info);
        }));
    });
}

/// Runs `f` on a worker thread; fails if the step it reports does not finish within `limit`.
fn with_watchdog<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce(Arc<Mutex<(Instant, String)>>) -> T + Send + 'static,
) -> T {
    let step = Arc::new(Mutex::new((Instant::now(), String::from("start"))));
    let s2 = step.clone();
    let h = std::thread::spawn(move || f(s2));
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
        let (t, what) = step.lock().unwrap().clone();
        if t.elapsed() > limit {
            panic!("{what} has run for more than {limit:?}: a hang?");
        }
    }
    h.join().expect("worker thread")
}

/// Runs each (name, input) through `target`; returns the panics, and how many inputs got how
/// far ([`harness::Outcome`]: rejected, parsed, loaded, ran).
fn replay(target: Target, inputs: Vec<(String, Vec<u8>)>) -> (Vec<String>, [usize; 4]) {
    record_panics();
    with_watchdog(Duration::from_secs(20), move |step| {
        let mut panics = Vec::new();
        let mut outcomes = [0usize; 4];
        for (name, data) in inputs {
            *step.lock().unwrap() = (Instant::now(), name.clone());
            match catch_unwind(AssertUnwindSafe(|| target(&data))) {
                Ok(o) => outcomes[o as usize] += 1,
                Err(_) => {
                    let msg = LAST_PANIC
                        .with(|p| p.borrow_mut().take())
                        .unwrap_or_default();
                    panics.push(format!("{name}: {msg}"));
                }
            }
        }
        (panics, outcomes)
    })
}

fn regressions_dir() -> PathBuf {
    harness::testdata().join("regressions")
}

#[test]
fn regression_corpus() {
    let mut total = 0;
    let mut panics = Vec::new();
    for (target, f) in TARGETS {
        let dir = regressions_dir().join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut inputs: Vec<(String, Vec<u8>)> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_none_or(|e| e != "md"))
            .map(|p| {
                let name = format!("{target}/{}", p.file_name().unwrap().to_string_lossy());
                (name, std::fs::read(&p).unwrap())
            })
            .collect();
        inputs.sort();
        total += inputs.len();
        panics.extend(replay(*f, inputs).0);
    }
    eprintln!("{total} regression inputs replayed");
    assert!(
        panics.is_empty(),
        "{} regression inputs panicked:\n{}",
        panics.len(),
        panics.join("\n")
    );
}

/// Every directory under testdata/regressions/ names a fuzz target (or a suite that checks it).
#[test]
fn regression_dirs_name_targets() {
    let Ok(entries) = std::fs::read_dir(regressions_dir()) else {
        return;
    };
    for e in entries.flatten().filter(|e| e.path().is_dir()) {
        let name = e.file_name().to_string_lossy().to_string();
        assert!(
            TARGETS.iter().any(|(t, _)| *t == name)
                || name == "differential"
                // Replayed by crates/pteron-llm/tests/tokenizer_fuzz.rs.
                || name == "tokenizer"
                // Checked by crates/pteron/tests/planning.rs.
                || name == "planning",
            "testdata/regressions/{name} is not a fuzz target"
        );
    }
}

fn smoke_count() -> usize {
    std::env::var("PTERON_FUZZ_SMOKE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4000)
}

/// Chains of structure-aware mutants, as the fuzzer's custom mutator makes them: each step
/// mutates the previous mutant, restarting from a fixture every third step.
#[test]
fn smoke_load_method_execute() {
    let seeds: Vec<Vec<u8>> = [
        "models/mlp/model.pte",
        "models/cnn/model.pte",
        "models/dynamic_mlp/model.pte",
        "models/dynamic_reshape/model.pte",
        "models/multi_output/model.pte",
        "models/mutable_buffer/model.pte",
        "ops/embedding/embedding_f32.pte",
        "ops/gather/gather_i64.pte",
        "ops/index/index_2_f32.pte",
        "ops/index_select/index_select_f32.pte",
    ]
    .iter()
    .filter_map(|n| harness::fixtures().get(*n))
    .map(|pte| harness::join_lme(&[], pte))
    .collect();
    assert!(seeds.len() >= 6, "smoke seeds missing from testdata/");
    let n = smoke_count();
    let mut inputs = Vec::with_capacity(n);
    let mut cur = seeds[0].clone();
    for k in 0..n {
        if k % 3 == 0 {
            cur = seeds[k / 3 % seeds.len()].clone();
        }
        let seed = 0x5eed_0000 + k as u64;
        if let Some(m) = harness::mutate_lme(&cur, seed, 1 << 20) {
            cur = m;
        }
        inputs.push((
            format!("load_method_execute mutant {k} (seed {seed:#x})"),
            cur.clone(),
        ));
    }
    let (panics, o) = replay(harness::load_method_execute, inputs);
    eprintln!(
        "{n} mutants: {} rejected, {} parsed, {} loaded, {} ran",
        o[0], o[1], o[2], o[3]
    );
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    assert!(o[3] > n / 20, "too few mutants ran: the smoke tests little");
}

/// Chains of XNNPACK payload mutants (the `xnnpack_payload` fuzzer's custom mutator) of the
/// small XNNPACK fixtures, loaded with the XNNPACK backend and run twice. A quarter of the
/// smoke count: each mutant packs weights and runs a delegate graph.
#[test]
fn smoke_xnnpack_payload() {
    let seeds: Vec<Vec<u8>> = harness::xnn_fixtures(60_000)
        .into_iter()
        .map(|(_, pte)| harness::join_lme(&[], pte))
        .collect();
    assert!(seeds.len() >= 8, "XNNPACK fixtures missing from testdata/");
    let n = smoke_count() / 4;
    let mut inputs = Vec::with_capacity(n);
    let mut cur = seeds[0].clone();
    for k in 0..n {
        if k % 3 == 0 {
            cur = seeds[k / 3 % seeds.len()].clone();
        }
        let seed = 0x0e1e_0000 + k as u64;
        if let Some(m) = xnn_mutate::mutate_input(&cur, seed, 1 << 20) {
            cur = m;
        }
        inputs.push((
            format!("xnnpack_payload mutant {k} (seed {seed:#x})"),
            cur.clone(),
        ));
    }
    let (panics, o) = replay(harness::xnnpack_payload, inputs);
    eprintln!(
        "{n} XNNPACK mutants: {} rejected, {} parsed, {} loaded, {} ran",
        o[0], o[1], o[2], o[3]
    );
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    assert!(o[3] > n / 20, "too few mutants ran: the smoke tests little");
}

/// Fuzzed inputs for every fixture under testdata/ops and testdata/models (small ones).
#[test]
fn smoke_execute_inputs() {
    let names: Vec<&String> = harness::fixtures()
        .iter()
        .filter(|(_, b)| b.len() < 100_000)
        .map(|(n, _)| n)
        .collect();
    let n = smoke_count();
    let mut inputs = Vec::with_capacity(n);
    for k in 0..n {
        let name = names[k % names.len()];
        let mut cur = harness::join_ei(name, &[]);
        // A few input mutations on top of each other.
        for j in 0..1 + k % 4 {
            let seed = ((k as u64) << 8) | j as u64;
            if let Some(m) = harness::mutate_ei(&cur, seed, 1 << 16) {
                // Keep the fixture: the smoke covers each one in turn.
                let (_, inp) = harness::split_ei(&m).unwrap();
                cur = harness::join_ei(name, inp);
            }
        }
        inputs.push((format!("execute_inputs {name} #{k}"), cur));
    }
    let (panics, o) = replay(harness::execute_inputs, inputs);
    eprintln!(
        "{n} inputs: {} rejected, {} parsed, {} loaded, {} ran",
        o[0], o[1], o[2], o[3]
    );
    assert!(panics.is_empty(), "{}", panics.join("\n"));
    assert!(o[3] > n / 4, "too few inputs ran: the smoke tests little");
}

// ------------------------------------------------------------------------------------------
// Differential findings

fn run_differential(file: &str, inputs: &[Tensor]) -> Tensor {
    let bytes = std::fs::read(regressions_dir().join("differential").join(file)).unwrap();
    let f = pteron::ProgramFile::from_bytes(&bytes);
    let program = pteron::Runtime::new().load_program(&f).unwrap();
    let mut m = program.load_method("forward").unwrap();
    match m.run(inputs).unwrap().remove(0) {
        Value::Tensor(t) => t,
        v => panic!("{file}: output {v:?}"),
    }
}

/// `RunMethod::run` / `outputs` hand out row-major tensors also where the method computes in
/// another dim order. They copied a channels-last output's bytes as they lay (and wrote them
/// so into `pteron run`'s .npy files), and took a channels-last input's row-major bytes as
/// channels-last: wrong values, where ExecuTorch's runtime returns the right ones.
#[test]
fn channels_last_inputs_and_outputs_are_row_major() {
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let input = Tensor::from_f32(&[1, 3, 2, 4], &x);
    // A contiguous input cloned to a channels-last output: the same values.
    let out = run_differential("to_channels_last_f32.pte", std::slice::from_ref(&input));
    assert_eq!(
        (out.dtype, &out.sizes[..]),
        (ScalarType::Float, &[1, 3, 2, 4][..])
    );
    assert_eq!(
        out.data, input.data,
        "channels-last output not returned row-major"
    );
    // A channels-last input cloned to a contiguous output.
    let out = run_differential(
        "to_contiguous_from_cl_f32.pte",
        std::slice::from_ref(&input),
    );
    assert_eq!(
        out.data, input.data,
        "row-major input not laid out channels-last"
    );
}

/// torch.cat of two channels-last tensors along the last dim. ExecuTorch's portable cat ignores
/// the dim order (its result differs from eager PyTorch; the op suite skips the case); pteron
/// must give eager PyTorch's values.
#[test]
fn channels_last_cat_matches_eager() {
    let a: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let b: Vec<f32> = (0..4).map(|v| 100.0 + v as f32).collect();
    let inputs = [
        Tensor::from_f32(&[1, 2, 2, 3], &a),
        Tensor::from_f32(&[1, 2, 2, 1], &b),
    ];
    let out = run_differential("cat_channels_last_dim3_f32.pte", &inputs);
    let want: Vec<f32> = vec![
        0.0, 1.0, 2.0, 100.0, 3.0, 4.0, 5.0, 101.0, 6.0, 7.0, 8.0, 102.0, 9.0, 10.0, 11.0, 103.0,
    ];
    assert_eq!(out.sizes, [1, 2, 2, 4]);
    assert_eq!(out.data, Tensor::from_f32(&[1, 2, 2, 4], &want).data);
}
