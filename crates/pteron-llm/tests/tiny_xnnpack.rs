//! The tiny Llama lowered to XNNPACK by ExecuTorch's LLM recipe (testdata/llm/tiny_xnnpack,
//! tools/export/export_xnnpack_llm.py), fp32 and 8da4w (dynamic int8 activations, 4-bit
//! blockwise weights): greedy token ids equal those of ExecuTorch's runtime on the same `.pte`.

use std::path::PathBuf;
use std::sync::Arc;

use pteron_llm::{Generator, Model, Tokenizer};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/tiny_xnnpack")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn goldens() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap()).unwrap()
}

#[test]
fn greedy_tokens_match_executorch_xnnpack() {
    let g = goldens();
    let n = g["new_tokens"].as_u64().unwrap() as usize;
    let tok = Tokenizer::from_file(dir().join(g["tokenizer"].as_str().unwrap())).unwrap();
    let mut checked = 0;
    for threads in [1, 2] {
        for (name, v) in g["variants"].as_object().unwrap() {
            let file = pteron::ProgramFile::open(dir().join(v["pte"].as_str().unwrap())).unwrap();
            let runtime = pteron::Runtime::builder()
                .backends(pteron::default_backends())
                .build()
                .unwrap();
            let program = runtime.load_program(&file).unwrap();
            let options = pteron::MethodOptions::new().threads(threads);
            let model = Model::load(&program, options).unwrap();
            assert_eq!(
                model.meta.max_context_len as u64,
                v["metadata"]["get_max_context_len"].as_u64().unwrap()
            );
            let mut gen = Generator::new(model, &tok);
            for (pname, p) in v["prompts"].as_object().unwrap() {
                let prompt = ids(&p["prompt_ids"]);
                assert_eq!(
                    tok.encode(p["prompt"].as_str().unwrap(), true).unwrap(),
                    prompt
                );
                let got = gen.greedy_ids(&prompt, n).unwrap();
                assert_eq!(
                    got,
                    ids(&p["generated_ids"]),
                    "{name}/{pname} ({threads} threads)"
                );
                assert_eq!(
                    tok.decode(&got, false).unwrap(),
                    p["generated_text"].as_str().unwrap()
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8);
}

/// The programs really are delegated: without the XNNPACK backend they do not load.
#[test]
fn without_the_backend_the_programs_do_not_load() {
    let g = goldens();
    for v in g["variants"].as_object().unwrap().values() {
        let file = pteron::ProgramFile::open(dir().join(v["pte"].as_str().unwrap())).unwrap();
        let runtime = pteron::Runtime::builder()
            .backends(Arc::new(pteron::BackendRegistry::new()))
            .build()
            .unwrap();
        let program = runtime.load_program(&file).unwrap();
        let options = pteron::MethodOptions::new().threads(1);
        assert!(Model::load(&program, options).is_err());
    }
}
