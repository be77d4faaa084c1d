//! `Program::method_meta`: declared inputs and outputs read without loading the method, as
//! the fixtures' meta.json (written by the exporter from ExecuTorch's MethodMeta) records them.

use std::path::PathBuf;

use pteron::{ScalarType, ValueMeta};

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn tensors(list: &[ValueMeta]) -> Vec<(ScalarType, Vec<usize>)> {
    list.iter()
        .map(|v| match v {
            ValueMeta::Tensor(t) => (t.dtype, t.sizes.clone()),
            other => panic!("not a tensor: {other:?}"),
        })
        .collect()
}

fn dtype(name: &str) -> ScalarType {
    match name {
        "float32" => ScalarType::Float,
        "float16" => ScalarType::Half,
        "int64" => ScalarType::Long,
        "bool" => ScalarType::Bool,
        other => panic!("dtype {other}"),
    }
}

#[test]
fn metadata_matches_what_the_exporter_recorded() {
    let mut checked = 0;
    for group in ["models", "xnnpack"] {
        for entry in std::fs::read_dir(testdata().join(group)).unwrap() {
            let dir = entry.unwrap().path();
            let Ok(text) = std::fs::read_to_string(dir.join("meta.json")) else {
                continue;
            };
            let meta: serde_json::Value = serde_json::from_str(&text).unwrap();
            if meta.get("dynamic").is_some() {
                continue; // declared sizes are the upper bounds, not the case's
            }
            let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
            let program = pteron::Runtime::new().load_program(&file).unwrap();
            let m = program.method_meta("forward").unwrap();
            assert_eq!(m.name, "forward");
            let want = |key: &str| -> Vec<(ScalarType, Vec<usize>)> {
                meta[key]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| {
                        let shape = v["shape"].as_array().unwrap();
                        (
                            dtype(v["dtype"].as_str().unwrap()),
                            shape.iter().map(|s| s.as_u64().unwrap() as usize).collect(),
                        )
                    })
                    .collect()
            };
            assert_eq!(tensors(&m.inputs), want("inputs"), "{}", dir.display());
            assert_eq!(tensors(&m.outputs), want("outputs"), "{}", dir.display());
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked}");
}

#[test]
fn unknown_method_is_method_not_found() {
    let file = pteron::ProgramFile::open(testdata().join("models/mlp/model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    match program.method_meta("backward") {
        Err(pteron::Error::Runtime(pteron::MethodError::MethodNotFound(n))) => {
            assert_eq!(n, "backward")
        }
        other => panic!("{other:?}"),
    }
    let m = program.method_meta("forward").unwrap();
    match &m.inputs[0] {
        ValueMeta::Tensor(t) => {
            assert!(t.memory_planned);
            assert_eq!(t.dim_order, vec![0, 1]);
            assert_eq!(t.nbytes(), Some(4 * 32 * 4));
        }
        other => panic!("{other:?}"),
    }
}
