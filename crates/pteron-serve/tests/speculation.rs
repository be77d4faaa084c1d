//! Speculative decoding in the server (`ServerConfig::speculation`, `ModelFiles::draft`) on the
//! fixtures of testdata/llm/spec (the tiny Llama exported with full logits, and its one-layer
//! draft): answers equal those of a server without speculation, drafts are accepted, and a
//! model that cannot check drafts is refused at start.

mod support;

use pteron_llm::Speculation;
use pteron_serve::{ModelFiles, ServerConfig};
use serde_json::json;
use support::*;

fn spec_files(draft: bool) -> ModelFiles {
    let dir = tiny().join("../spec");
    ModelFiles {
        model: dir.join("fp32.pte"),
        draft: draft.then(|| dir.join("draft.pte")),
        ..files()
    }
}

#[test]
fn answers_equal_those_without_speculation() {
    let (plain, _) = start_with(&spec_files(false), ServerConfig::default());
    let servers = [
        (Speculation::prompt_lookup(6), false),
        (Speculation::DraftModel { draft_len: 3 }, true),
    ];
    for (speculation, draft) in servers {
        let (server, engine) = start_with(
            &spec_files(draft),
            ServerConfig {
                speculation,
                ..ServerConfig::default()
            },
        );
        assert_eq!(engine.info().speculation, speculation);
        let requests = [
            (
                "/v1/completions",
                json!({"prompt": "json json json json", "max_tokens": 40, "temperature": 0}),
            ),
            (
                "/v1/completions",
                json!({"prompt": "rrrrrr", "max_tokens": 30, "temperature": 0, "stop": ["object"]}),
            ),
            (
                "/v1/completions",
                json!({"prompt": "json json", "max_tokens": 30, "temperature": 0.8, "seed": 5}),
            ),
            (
                "/v1/chat/completions",
                chat_body(
                    &[("user", "json json json")],
                    json!({"max_tokens": 20, "temperature": 0}),
                ),
            ),
            (
                "/v1/chat/completions",
                chat_body(
                    &[("user", "json json json")],
                    json!({"max_tokens": 20, "temperature": 0, "stream": true}),
                ),
            ),
        ];
        for (path, body) in &requests {
            let a = post(plain.local_addr(), path, body);
            let b = post(server.local_addr(), path, body);
            assert_eq!(a.status, 200, "{}", a.text());
            assert_eq!(b.status, 200, "{}", b.text());
            let content = |r: &Response| {
                if body["stream"] == true {
                    streamed(r, true).0
                } else {
                    let v = r.json();
                    let c = &v["choices"][0];
                    let text = c["text"].as_str().or(c["message"]["content"].as_str());
                    format!("{} / {}", text.unwrap(), c["finish_reason"])
                }
            };
            assert_eq!(content(&a), content(&b), "{speculation:?} {path} {body}");
        }
        let s = engine.status();
        assert_eq!(s.completed, requests.len() as u64);
        assert!(s.drafted_tokens > 0, "{s:?}");
        assert!(s.accepted_tokens > 0, "{s:?}");
        server.stop().unwrap();
    }
    plain.stop().unwrap();
}

#[test]
fn models_that_cannot_check_drafts_are_refused_at_start() {
    let lookup = ServerConfig {
        speculation: Speculation::prompt_lookup(4),
        ..ServerConfig::default()
    };
    // testdata/llm/tiny/fp32.pte returns the last position's logits only.
    let e = pteron_serve::Engine::start(&files(), &lookup)
        .err()
        .unwrap();
    assert!(matches!(e, pteron_serve::Error::Model { .. }), "{e}");
    assert!(e.to_string().contains("generate_full_logits=True"), "{e}");
    // A draft model asked for without its file, and a file without the setting.
    let draft = ServerConfig {
        speculation: Speculation::DraftModel { draft_len: 4 },
        ..ServerConfig::default()
    };
    for (files, config) in [(spec_files(false), &draft), (spec_files(true), &lookup)] {
        let e = pteron_serve::Engine::start(&files, config).err().unwrap();
        assert!(
            matches!(
                e,
                pteron_serve::Error::Config {
                    field: "speculation",
                    ..
                }
            ),
            "{e}"
        );
    }
    let bad = ServerConfig {
        speculation: Speculation::prompt_lookup(0),
        ..ServerConfig::default()
    };
    assert!(pteron_serve::Engine::start(&spec_files(false), &bad).is_err());
}
