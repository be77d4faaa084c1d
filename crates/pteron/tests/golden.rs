//! Every fixture under testdata/models runs through pteron and must match the outputs that
//! ExecuTorch's own runtime produced for the same `.pte` (written by tools/export).
//!
//! Tolerance: integer and bool outputs must be equal. Floating outputs pass when every element
//! satisfies |got − expected| ≤ atol + rtol·|expected| (atol, rtol from the fixture's meta.json),
//! or when the largest error is ≤ 1e-4 × the output's scale (max |expected|, at least 1) — the
//! fp32 bar: different summation orders legitimately move the last bits.

use std::path::{Path, PathBuf};

use pteron::{npy, RunMethod, Tensor, Value};

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

fn compare(name: &str, case: &str, k: usize, got: &Tensor, want: &Tensor, atol: f64, rtol: f64) {
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

fn run_fixture(name: &str) {
    let dir = models_dir().join(name);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let atol = meta["tolerance"]["atol"].as_f64().unwrap_or(1e-5);
    let rtol = meta["tolerance"]["rtol"].as_f64().unwrap_or(1e-5);
    let n_in = meta["inputs"].as_array().map_or(0, |a| a.len());

    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let data = meta["external_data"]
        .as_str()
        .map(|f| pteron::ProgramFile::open(dir.join(f)).unwrap());
    let mut program = pteron::Runtime::new().load_program(&file).unwrap();
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
}

macro_rules! fixtures {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { run_fixture(stringify!($name)); } )*
        const LISTED: &[&str] = &[$(stringify!($name)),*];
    };
}

fixtures!(
    mlp,
    cnn,
    mobilenet_v2_small,
    bert_tiny,
    llama_tiny,
    dynamic_mlp,
    dynamic_reshape,
    multi_output,
    mutable_buffer,
    external_weights,
    resnet_mini,
    vit_tiny,
    conformer_tiny,
    lstm,
    unet,
    conv_blocks,
);

#[test]
fn every_fixture_is_listed() {
    for entry in std::fs::read_dir(models_dir()).unwrap() {
        let entry = entry.unwrap();
        if entry.path().join("model.pte").exists() {
            let name = entry.file_name().into_string().unwrap();
            assert!(
                LISTED.contains(&name.as_str()),
                "fixture {name} has no golden test"
            );
        }
    }
}

#[test]
fn wrong_input_shape_names_expected_and_given() {
    let file = pteron::ProgramFile::open(models_dir().join("mlp/model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut method = program.load_method("forward").unwrap();
    let bad = Tensor::from_f32(&[1, 3], &[0.0; 3]);
    let err = method.run(&[bad]).unwrap_err().to_string();
    assert!(
        err.contains("expected shape") && err.contains("[1, 3]"),
        "{err}"
    );
    let wrong_dtype = Tensor::from_i64(&[1], &[0]);
    assert!(method
        .run(&[wrong_dtype])
        .unwrap_err()
        .to_string()
        .contains("dtype"));
}

#[test]
fn dynamic_input_above_bound_is_rejected() {
    let file = pteron::ProgramFile::open(models_dir().join("dynamic_mlp/model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut method = program.load_method("forward").unwrap();
    let x = Tensor::from_f32(&[9, 16], &[0.0; 9 * 16]);
    let y = Tensor::from_f32(&[1, 8], &[0.0; 8]);
    let err = method.run(&[x, y]).unwrap_err().to_string();
    assert!(err.contains("[8, 16]") && err.contains("[9, 16]"), "{err}");
}
