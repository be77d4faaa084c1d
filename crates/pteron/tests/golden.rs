//! Every fixture under testdata/models runs through pteron and must match the outputs that
//! ExecuTorch's own runtime produced for the same `.pte` (written by tools/export).
//! Tolerances: see `support/fixtures.rs`.

use pteron::{RunMethod, Tensor};

#[path = "support/fixtures.rs"]
mod fixtures;
use fixtures::{models_dir, run_fixture};

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
