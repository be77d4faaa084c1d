//! The LLM families' real tokenizers (Qwen 2/2.5/3, Llama 3, Phi-3 / Llama 2), made from the
//! vocab-only GGUF files of llama.cpp's sources by tools/export/export_real_tokenizers.py:
//! pteron's ids and text equal transformers' on llama.cpp's tokenizer test strings and on
//! chat-formatted text. Ignored: the tokenizer files (3-17 MB) are not committed; the goldens
//! (testdata/llm/tokenizers/real_goldens.json) are.
//!
//!     /opt/etvenv/bin/python tools/export/export_real_tokenizers.py
//!     cargo test -p pteron-llm --test real_tokenizers -- --ignored

use std::path::PathBuf;

use pteron_llm::Tokenizer;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn goldens() -> Value {
    let p = root().join("testdata/llm/tokenizers/real_goldens.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn open(file: &str) -> Tokenizer {
    let p = root().join("tools/export/out/real_tokenizers").join(file);
    Tokenizer::from_file(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run tools/export/export_real_tokenizers.py)",
            p.display()
        )
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Checks `tok` on every case of the goldens of `name`; with `decode`, the text of the ids too.
/// With `original`, the ids llama.cpp recorded from the original tokenizer where it has them.
fn check(name: &str, how: &str, tok: &Tokenizer, decode: bool, original: bool) -> usize {
    let g = goldens();
    let cases = g["tokenizers"][name]["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want = match &c["llama_cpp_ids"] {
            v @ Value::Array(_) if original => ids(v),
            _ => ids(&c["ids"]),
        };
        let got = tok.encode(text, false).unwrap();
        if got != want {
            failures.push(format!(
                "{name} ({how}) {text:?}:\n  got  {got:?}\n  want {want:?}"
            ));
            continue;
        }
        if decode {
            let back = tok.decode(&want, false).unwrap();
            if back != c["decoded"].as_str().unwrap() {
                failures.push(format!("{name} ({how}) decode {text:?}: {back:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    cases.len()
}

#[test]
#[ignore = "needs tools/export/export_real_tokenizers.py's files"]
fn qwen2_tokenizer_json() {
    assert_eq!(
        check(
            "qwen2",
            "tokenizer.json",
            &open("qwen2/tokenizer.json"),
            true,
            false
        ),
        53
    );
}

#[test]
#[ignore = "needs tools/export/export_real_tokenizers.py's files"]
fn llama3_tokenizer_json() {
    let tok = open("llama-bpe/tokenizer.json");
    assert_eq!(check("llama-bpe", "tokenizer.json", &tok, true, false), 53);
}

/// The same vocabulary as Meta ships it for Llama 3 (`tokenizer.model`, tiktoken format):
/// pteron's tiktoken path with Llama 3's pattern and special tokens gives the original
/// tokenizer's ids (llama.cpp's record) where it has them, transformers' elsewhere.
#[test]
#[ignore = "needs tools/export/export_real_tokenizers.py's files"]
fn llama3_tiktoken() {
    assert_eq!(
        check(
            "llama-bpe",
            "tiktoken",
            &open("llama3.tiktoken"),
            false,
            true
        ),
        53
    );
}

#[test]
#[ignore = "needs tools/export/export_real_tokenizers.py's files"]
fn phi3_tokenizer_json() {
    assert_eq!(
        check(
            "phi-3",
            "tokenizer.json",
            &open("phi-3/tokenizer.json"),
            true,
            false
        ),
        53
    );
}
