//! Running a fixture of testdata/models and comparing its outputs with ExecuTorch's (shared
//! by tests/golden.rs and the GPU engine's tests, which include this file by path).
//!
//! Tolerance: integer and bool outputs must be equal. Floating outputs pass when every element
//! satisfies |got − expected| ≤ atol + rtol·|expected| (atol, rtol from the fixture's meta.json,
//! raised to the caller's floor), or when the largest error is ≤ 1e-4 × the output's scale
//! (max |expected|, at least 1) — the fp32 bar: different summation orders legitimately move
//! the last bits.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use pteron::{npy, PlanStats, RunMethod, Tensor, Value};

pub fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}
pub fn compare(
    name: &str,
    case: &str,
    k: usize,
    got: &Tensor,
    want: &Tensor,
    atol: f64,
    rtol: f64,
) {
    assert_eq!(got.dtype, want.dtype, "{name} {case} output {k}: dtype");
    assert_eq!(got.sizes, want.sizes, "{name} {case} output {k}: shape");
    let g = got.to_f64_vec().expect("computable dtype");
    let w = want.to_f64_vec().expect("computable dtype");
    if !got.dtype.is_floating() {
        assert_eq!(g, w, "{name} {case} output {k}: values");
        return;
    }
    let scale = w.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    let mut max_err = 0.0f64;
    let mut elementwise_ok = true;
    for (a, e) in g.iter().zip(&w) {
        let err = (a - e).abs();
        if err.is_nan() || err > atol + rtol * e.abs() {
            elementwise_ok = false;
        }
        if err.is_nan() || e.is_nan() != a.is_nan() {
            max_err = f64::INFINITY;
        } else {
            max_err = max_err.max(err);
        }
    }
    eprintln!("{name} {case} output {k}: max abs error {max_err:.3e} (scale {scale:.3e})");
    assert!(
        elementwise_ok || max_err <= 1e-4 * scale,
        "{name} {case} output {k}: max abs error {max_err:e} exceeds tolerance (atol {atol}, rtol {rtol}, scale {scale})"
    );
}

/// Runs fixture `name` on a default runtime.
pub fn run_fixture(name: &str) {
    run_fixture_on(name, &pteron::Runtime::new(), (0.0, 0.0));
}

/// Runs fixture `name` on `runtime` with tolerances at least `floor` (atol, rtol); returns
/// what the method's load planned (regions taken by partitioners).
pub fn run_fixture_on(name: &str, runtime: &pteron::Runtime, floor: (f64, f64)) -> PlanStats {
    run_fixture_at(&models_dir().join(name), runtime, floor)
}

/// As [`run_fixture_on`] for a fixture directory anywhere (meta.json, model.pte, inputs and
/// expected outputs as .npy).
pub fn run_fixture_at(dir: &Path, runtime: &pteron::Runtime, floor: (f64, f64)) -> PlanStats {
    let name = &dir.file_name().unwrap().to_string_lossy().into_owned();
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let atol = meta["tolerance"]["atol"]
        .as_f64()
        .unwrap_or(1e-5)
        .max(floor.0);
    let rtol = meta["tolerance"]["rtol"]
        .as_f64()
        .unwrap_or(1e-5)
        .max(floor.1);
    let n_in = meta["inputs"].as_array().map_or(0, |a| a.len());

    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let data = meta["external_data"]
        .as_str()
        .map(|f| pteron::ProgramFile::open(dir.join(f)).unwrap());
    let mut program = runtime.load_program(&file).unwrap();
    if let Some(d) = &data {
        program = program.with_external_data(d.data_file().unwrap());
    }
    let mut method = program
        .load_method("forward")
        .unwrap_or_else(|e| panic!("{name}: load: {e}"));

    let cases: Vec<String> = match meta["cases"].as_array() {
        Some(c) => c
            .iter()
            .map(|c| c["dir"].as_str().unwrap_or("").to_string())
            .collect(),
        None => vec![String::new()],
    };
    for case in &cases {
        let cdir = dir.join(case);
        let inputs: Vec<Tensor> = (0..n_in)
            .map(|i| {
                let p = cdir.join(format!("input{i}.npy"));
                npy::read(if p.exists() {
                    p
                } else {
                    dir.join(format!("input{i}.npy"))
                })
                .unwrap()
            })
            .collect();
        let outputs = method
            .run(&inputs)
            .unwrap_or_else(|e| panic!("{name} {case}: run: {e}"));
        let mut k = 0;
        while cdir.join(format!("expected{k}.npy")).exists() {
            let want = npy::read(cdir.join(format!("expected{k}.npy"))).unwrap();
            match outputs.get(k) {
                Some(Value::Tensor(got)) => compare(name, case, k, got, &want, atol, rtol),
                // A scalar output is stored as a 0-d array.
                Some(Value::Int(v)) => {
                    assert_eq!(Tensor::from_i64(&[], &[*v]).to_f64_vec(), want.to_f64_vec())
                }
                other => panic!("{name} {case} output {k}: unexpected {other:?}"),
            }
            k += 1;
        }
        assert!(k > 0, "{name} {case}: no expected outputs");
        assert_eq!(k, outputs.len(), "{name} {case}: output count");
    }
    method.plan_stats()
}
