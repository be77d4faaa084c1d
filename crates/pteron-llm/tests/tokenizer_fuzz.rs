//! Hostile tokenizer files and chat templates: the `tokenizer` fuzz target's crashers
//! (`testdata/regressions/tokenizer/`), a smoke of its structure-aware mutants, and the limits
//! pteron puts on what the `tokenizers` crate and minijinja do not bound.

#[path = "support/tokenizer_harness.rs"]
mod harness;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pteron_llm::chat::{ChatTemplate, Message};

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Seed inputs: every tokenizer.json fixture with a text, the tiny model's
/// tokenizer_config.json, and its chat template with messages.
fn seeds() -> Vec<Vec<u8>> {
    let text = "Hello wörld 😀 <|im_start|>user\n 12345 e\u{301}".as_bytes();
    let mut jsons = vec![testdata().join("llm/tiny/tokenizer.json")];
    for f in ["sp_bpe.model", "sp_unigram.model", "tiny.tiktoken"] {
        jsons.push(testdata().join("llm/tokenizers").join(f));
    }
    let mut more: Vec<PathBuf> = std::fs::read_dir(testdata().join("security/tokenizers"))
        .expect("testdata/security/tokenizers")
        .flatten()
        .map(|e| e.path())
        .collect();
    more.sort();
    jsons.extend(more);
    let mut v: Vec<Vec<u8>> = jsons
        .iter()
        .map(|p| harness::join(0, text, &std::fs::read(p).unwrap()))
        .collect();
    let cfg = std::fs::read(testdata().join("llm/tiny/tokenizer_config.json")).unwrap();
    let cfg_json: serde_json::Value = serde_json::from_slice(&cfg).unwrap();
    let template = cfg_json["chat_template"]
        .as_str()
        .unwrap()
        .as_bytes()
        .to_vec();
    v.push(harness::join(2, b"hi there", &cfg));
    v.push(harness::join(
        1,
        &template,
        b"be brief\0hello\0hi!\0how are you?",
    ));
    v
}

/// Runs every input under catch_unwind; fails on a panic or on one input running > 20 s.
/// Returns the inputs on which the `tokenizers` crate panicked (contained by pteron-llm).
fn replay(inputs: &[(String, Vec<u8>)]) -> Vec<usize> {
    let mut panics = Vec::new();
    let mut contained = Vec::new();
    for (k, (name, data)) in inputs.iter().enumerate() {
        let t = Instant::now();
        match catch_unwind(AssertUnwindSafe(|| harness::run(data))) {
            Err(_) => panics.push(name.clone()),
            Ok(true) => contained.push(k),
            Ok(false) => {}
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{name} ran for {:?}: a hang?",
            t.elapsed()
        );
    }
    assert!(panics.is_empty(), "inputs panicked: {panics:?}");
    contained
}

/// `testdata/regressions/tokenizer/`, or the directory `PTERON_REPLAY_DIR` names (a fuzz
/// corpus: the panics the `tokenizers` crate raised and pteron contained are then printed).
#[test]
fn regression_corpus() {
    let dir = std::env::var("PTERON_REPLAY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| testdata().join("regressions/tokenizer"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut inputs: Vec<(String, Vec<u8>)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    inputs.sort();
    replay(&inputs);
}

/// Chains of the fuzzer's custom mutants of every seed (`PTERON_FUZZ_SMOKE=n` for more).
#[test]
fn smoke() {
    let n: usize = std::env::var("PTERON_FUZZ_SMOKE")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(1500, |n: usize| n * 3 / 8);
    let seeds = seeds();
    assert!(seeds.len() >= 7);
    let mut inputs = Vec::with_capacity(n + seeds.len());
    for (i, s) in seeds.iter().enumerate() {
        inputs.push((format!("seed {i}"), s.clone()));
    }
    let mut cur = seeds[0].clone();
    for k in 0..n {
        if k % 4 == 0 {
            cur = seeds[k / 4 % seeds.len()].clone();
        }
        let seed = 0x70c0_0000 + k as u64;
        if let Some(m) = harness::mutate(&cur, seed, 1 << 20) {
            cur = m;
        }
        inputs.push((format!("mutant {k} (seed {seed:#x})"), cur.clone()));
    }
    let contained = replay(&inputs);
    eprintln!(
        "{} inputs, {} on which the tokenizers crate panicked (contained)",
        inputs.len(),
        contained.len()
    );
    // PTERON_SAVE_CONTAINED=dir: keep those inputs (for testdata/regressions/tokenizer).
    if let Ok(dir) = std::env::var("PTERON_SAVE_CONTAINED") {
        std::fs::create_dir_all(&dir).unwrap();
        for k in contained {
            std::fs::write(Path::new(&dir).join(format!("contained-{k}")), &inputs[k].1).unwrap();
        }
    }
}

/// A template is a program: one that loops for long runs out of fuel, one that renders a
/// huge prompt stops at the output limit, unbounded recursion stops at the depth limit —
/// each an error, quickly.
#[test]
fn templates_are_bounded() {
    let msgs = [Message::new("user", "hi")];
    for (what, src, needle) in [
        (
            "nested loops",
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
            "fuel",
        ),
        (
            "huge output",
            "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}",
            "exceeds",
        ),
        (
            "recursion",
            "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
            "recursion",
        ),
    ] {
        let t = ChatTemplate::new(src).unwrap();
        let start = Instant::now();
        let e = t.render(&msgs, true, None, None).err().unwrap_or_else(|| {
            panic!("{what}: rendered without an error")
        });
        assert!(
            e.to_string().to_lowercase().contains(needle),
            "{what}: {e}"
        );
        // A bound on the work, not a speed check: unbounded, these templates run for hours
        // (10^10 loop turns, 10^10 bytes). Generous, since CI runs it under QEMU on busy cores.
        assert!(start.elapsed() < Duration::from_secs(120), "{what}: {:?}", start.elapsed());
    }
}

/// Ids outside the vocabulary decode to an error or nothing, never a panic; malformed
/// tokenizer.json files are refused with the parser's message.
#[test]
fn hostile_ids_and_files() {
    let bytes = std::fs::read(testdata().join("llm/tiny/tokenizer.json")).unwrap();
    let tok = pteron_llm::Tokenizer::from_json_bytes(&bytes, Default::default()).unwrap();
    let n = tok.vocab_size() as u32;
    for ids in [vec![n], vec![u32::MAX], vec![0, n + 7, 1]] {
        let _ = tok.decode(&ids, false);
        let mut s = pteron_llm::TextStream::new(false);
        for id in ids {
            let _ = s.push(&tok, id);
        }
        let _ = s.flush(&tok);
    }
    for (what, b) in [
        ("empty", &b""[..]),
        ("not JSON", b"\xff\xfe{"),
        ("truncated", &bytes[..bytes.len() / 2]),
        ("no model", br#"{"version":"1.0","added_tokens":[]}"#),
    ] {
        let e = pteron_llm::Tokenizer::from_json_bytes(b, Default::default());
        assert!(e.is_err(), "{what} accepted");
    }
}
