//! The server end to end on the tiny random-weight Llama (testdata/llm/tiny/fp32.pte): each
//! test binds a port the OS picks and talks HTTP/1.1 over a plain TCP stream.

mod support;

use std::time::{Duration, Instant};

use pteron_llm::SamplerConfig;
use pteron_serve::ServerConfig;
use serde_json::{json, Value};
use support::*;

const HELLO: &[(&str, &str)] = &[("user", "Simple is better than complex.")];

fn greedy() -> Value {
    json!({"temperature": 0})
}

fn with(extra: Value, more: Value) -> Value {
    let mut v = extra;
    for (k, x) in more.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "timed out waiting: {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn chat_completion_equals_pteron_llm() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let reference = Reference::new();
    for max_tokens in [1usize, 17, 200] {
        let r = post(
            addr,
            "/v1/chat/completions",
            &chat_body(HELLO, with(greedy(), json!({"max_tokens": max_tokens}))),
        );
        let want = reference.chat(HELLO, max_tokens, SamplerConfig::greedy());
        assert_eq!(chat_text(&r), want.text);
        let v = r.json();
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "fp32");
        assert!(v["created"].as_u64().unwrap() > 1_600_000_000);
        assert_eq!(v["choices"][0]["index"], 0);
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        let finish = match want.finish {
            pteron_llm::FinishReason::MaxTokens | pteron_llm::FinishReason::ContextFull => "length",
            _ => "stop",
        };
        assert_eq!(v["choices"][0]["finish_reason"], finish);
        let prompt_tokens = reference.chat_ids(HELLO).len();
        let u = &v["usage"];
        assert_eq!(u["prompt_tokens"], prompt_tokens);
        assert_eq!(u["completion_tokens"], want.tokens.len());
        assert_eq!(u["total_tokens"], prompt_tokens + want.tokens.len());
    }
    // max_completion_tokens is max_tokens' newer name; content may be text parts.
    let body = json!({
        "messages": [{"role": "user", "content": [{"type": "text", "text": HELLO[0].1}]}],
        "max_completion_tokens": 9,
        "temperature": 0,
        // Fields this server does not use are ignored.
        "user": "someone", "frequency_penalty": 0, "presence_penalty": 0,
        "response_format": {"type": "text"}, "logprobs": false, "tools": [],
        "metadata": {"a": "b"}, "stream": false,
    });
    let r = post(addr, "/v1/chat/completions", &body);
    assert_eq!(
        chat_text(&r),
        reference.chat(HELLO, 9, SamplerConfig::greedy()).text
    );
    assert_eq!(r.json()["usage"]["completion_tokens"], 9);
    server.stop().unwrap();
}

#[test]
fn completion_of_a_golden_prompt_gives_the_golden_text() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let reference = Reference::new();
    let g = json_file("goldens.json");
    let prompts = g["variants"]["fp32"]["prompts"].as_object().unwrap();
    assert!(prompts.len() >= 2);
    for (name, p) in prompts {
        let ids: Vec<u32> = p["generated_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let prompt = p["prompt"].as_str().unwrap();
        for form in [json!(prompt), json!([prompt])] {
            let r = post(
                addr,
                "/v1/completions",
                &json!({"prompt": form, "max_tokens": ids.len(), "temperature": 0}),
            );
            assert_eq!(r.status, 200, "{}", r.text());
            let v = r.json();
            // Special tokens are left out of the text, as `pteron generate` does.
            let want = reference.tokenizer.decode(&ids, true).unwrap();
            assert_eq!(v["choices"][0]["text"], want, "{name}");
            assert_eq!(v["object"], "text_completion");
            assert!(v["id"].as_str().unwrap().starts_with("cmpl-"));
            assert_eq!(v["choices"][0]["finish_reason"], "length");
            assert_eq!(v["usage"]["completion_tokens"], ids.len());
            assert_eq!(
                v["usage"]["prompt_tokens"],
                p["prompt_ids"].as_array().unwrap().len()
            );
        }
        // With them (vLLM's `skip_special_tokens`), the text is ExecuTorch's, token for token.
        let r = post(
            addr,
            "/v1/completions",
            &json!({
                "prompt": prompt, "max_tokens": ids.len(), "temperature": 0,
                "skip_special_tokens": false,
            }),
        );
        assert_eq!(
            r.json()["choices"][0]["text"],
            p["generated_text"],
            "{name}"
        );
    }
    server.stop().unwrap();
}

#[test]
fn streaming_gives_the_same_text_and_usage() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    for max_tokens in [json!(1), json!(40), json!(null)] {
        let body = chat_body(HELLO, with(greedy(), json!({"max_tokens": max_tokens})));
        let full = post(addr, "/v1/chat/completions", &body);
        let text = chat_text(&full);
        let full = full.json();
        let body = with(
            body,
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        );
        let r = post(addr, "/v1/chat/completions", &body);
        let (streamed_text, events) = streamed(&r, true);
        assert_eq!(streamed_text, text);
        // The role first, then content, the finish reason, the usage (no choices).
        let first = &events[0]["choices"][0];
        assert_eq!(first["delta"]["role"], "assistant");
        let n = events.len();
        let last = &events[n - 2];
        assert_eq!(
            last["choices"][0]["finish_reason"],
            full["choices"][0]["finish_reason"]
        );
        assert_eq!(last["choices"][0]["delta"], json!({}));
        assert_eq!(events[n - 1]["choices"], json!([]));
        let (u, want) = (&events[n - 1]["usage"], &full["usage"]);
        for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
            assert_eq!(u[k], want[k], "{k}");
        }
        let id = events[0]["id"].as_str().unwrap();
        assert!(id.starts_with("chatcmpl-"));
        for e in &events {
            assert_eq!(e["object"], "chat.completion.chunk");
            assert_eq!(e["id"], id);
            assert_eq!(e["model"], "fp32");
        }
        for e in &events[..n - 1] {
            assert!(e["usage"].is_null());
            assert_eq!(e["choices"].as_array().unwrap().len(), 1);
        }
        for e in &events[1..n - 2] {
            assert!(e["choices"][0]["finish_reason"].is_null());
        }
        // Without include_usage: no usage chunk, no usage field.
        let body = chat_body(
            HELLO,
            with(greedy(), json!({"max_tokens": max_tokens, "stream": true})),
        );
        let r = post(addr, "/v1/chat/completions", &body);
        let (streamed_text, events) = streamed(&r, true);
        assert_eq!(streamed_text, text);
        assert!(events.iter().all(|e| e.get("usage").is_none()));
        assert!(!events.last().unwrap()["choices"][0]["finish_reason"].is_null());
    }
    // Text completions stream too.
    let body = json!({"prompt": "Flat is better than nested.", "max_tokens": 30, "temperature": 0});
    let full = post(addr, "/v1/completions", &body);
    assert_eq!(full.status, 200);
    let full = full.json();
    let r = post(
        addr,
        "/v1/completions",
        &with(
            body,
            json!({"stream": true, "stream_options": {"include_usage": true}}),
        ),
    );
    let (text, events) = streamed(&r, false);
    assert_eq!(text, full["choices"][0]["text"].as_str().unwrap());
    let n = events.len();
    assert_eq!(events[n - 2]["choices"][0]["finish_reason"], "length");
    assert_eq!(events[n - 1]["usage"]["completion_tokens"], 30);
    assert!(events.iter().all(|e| e["object"] == "text_completion"));
    server.stop().unwrap();
}

#[test]
fn stop_strings_end_the_answer_before_them() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let body = chat_body(HELLO, with(greedy(), json!({"max_tokens": 60})));
    let text = chat_text(&post(addr, "/v1/chat/completions", &body));
    let stop: String = text.chars().skip(10).take(3).collect();
    let at = text.find(&stop).unwrap();
    for s in [json!(stop), json!(["never-there", stop])] {
        let r = post(
            addr,
            "/v1/chat/completions",
            &with(body.clone(), json!({"stop": s})),
        );
        assert_eq!(chat_text(&r), text[..at]);
        assert_eq!(r.json()["choices"][0]["finish_reason"], "stop");
        let r = post(
            addr,
            "/v1/chat/completions",
            &with(body.clone(), json!({"stop": s, "stream": true})),
        );
        assert_eq!(streamed(&r, true).0, text[..at]);
    }
    server.stop().unwrap();
}

fn assert_error(r: &Response, status: u16, param: Option<&str>, code: Option<&str>) -> String {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let e = &v["error"];
    assert_eq!(e.as_object().unwrap().len(), 4, "{v}");
    assert!(e["type"].is_string(), "{v}");
    assert_eq!(e["param"].as_str(), param, "{v}");
    assert_eq!(e["code"].as_str(), code, "{v}");
    e["message"].as_str().unwrap().to_string()
}

#[test]
fn invalid_requests_get_openai_errors() {
    let (server, _engine) = start(ServerConfig {
        max_tokens_limit: Some(100),
        max_body_bytes: 4096,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let chat = |extra: Value| post(addr, "/v1/chat/completions", &chat_body(HELLO, extra));
    let raw = |path: &str, body: &[u8]| request(addr, "POST", path, &[], body);

    for path in ["/v1/chat/completions", "/v1/completions"] {
        let m = assert_error(&raw(path, b"{not json"), 400, None, None);
        assert!(m.contains("JSON"), "{m}");
        assert_error(&raw(path, b""), 400, None, None);
        assert_error(&raw(path, b"[1, 2]"), 400, None, None);
    }
    assert_error(&raw("/v1/chat/completions", b"{}"), 400, None, None);
    assert_error(&chat(json!({"n": 2})), 400, Some("n"), None);
    assert_error(
        &chat(json!({"temperature": -0.5})),
        400,
        Some("temperature"),
        None,
    );
    assert_error(
        &chat(json!({"temperature": 2.5})),
        400,
        Some("temperature"),
        None,
    );
    assert_error(&chat(json!({"temperature": "hot"})), 400, None, None);
    for p in [0.0, -1.0, 1.5] {
        assert_error(&chat(json!({"top_p": p})), 400, Some("top_p"), None);
    }
    assert_error(
        &chat(json!({"max_tokens": 0})),
        400,
        Some("max_tokens"),
        None,
    );
    assert_error(&chat(json!({"max_tokens": -3})), 400, None, None);
    assert_error(&chat(json!({"max_tokens": 1e30})), 400, None, None);
    let m = assert_error(
        &chat(json!({"max_tokens": 101})),
        400,
        Some("max_tokens"),
        None,
    );
    assert!(m.contains("100"), "{m}");
    assert_error(
        &chat(json!({"max_tokens": u64::MAX})),
        400,
        Some("max_tokens"),
        None,
    );
    assert_error(
        &chat(json!({"max_completion_tokens": 0})),
        400,
        Some("max_tokens"),
        None,
    );
    assert_error(
        &chat(json!({"stop": ["a", "b", "c", "d", "e"]})),
        400,
        Some("stop"),
        None,
    );
    assert_error(
        &chat(json!({"stop": "x".repeat(300)})),
        400,
        Some("stop"),
        None,
    );
    assert_error(&chat(json!({"stop": 5})), 400, None, None);
    assert_error(
        &chat(json!({"logprobs": true})),
        400,
        Some("logprobs"),
        None,
    );
    assert_error(
        &chat(json!({"tools": [{"type": "function"}]})),
        400,
        Some("tools"),
        None,
    );
    assert_error(&chat(json!({"min_p": 2})), 400, Some("min_p"), None);
    assert_error(
        &chat(json!({"repetition_penalty": 0})),
        400,
        Some("repetition_penalty"),
        None,
    );
    let bad_messages = [
        json!([]),
        json!([{"role": "tool", "content": "x"}]),
        json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
        json!([{"role": "user", "content": [{"type": "text"}]}]),
    ];
    for m in bad_messages {
        let r = post(addr, "/v1/chat/completions", &json!({"messages": m}));
        assert_error(&r, 400, Some("messages"), None);
    }
    let r = post(
        addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": 5}]}),
    );
    assert_error(&r, 400, None, None);
    let completion = |body: Value| post(addr, "/v1/completions", &body);
    for prompt in [json!(["a", "b"]), json!([1, 2]), json!(null), json!({})] {
        assert_error(
            &completion(json!({"prompt": prompt})),
            400,
            Some("prompt"),
            None,
        );
    }
    assert_error(
        &completion(json!({"prompt": ""})),
        400,
        Some("prompt"),
        None,
    );
    assert_error(
        &completion(json!({"prompt": "a", "logprobs": 2})),
        400,
        Some("logprobs"),
        None,
    );
    assert_error(
        &completion(json!({"prompt": "a", "echo": true})),
        400,
        Some("echo"),
        None,
    );
    assert_error(
        &completion(json!({"prompt": "a", "best_of": 3})),
        400,
        Some("best_of"),
        None,
    );

    // The context (256 tokens): a prompt that does not fit, or does not leave max_tokens.
    let long = "Explicit is better than implicit. ".repeat(40);
    let r = completion(json!({"prompt": long}));
    let m = assert_error(&r, 400, Some("prompt"), Some("context_length_exceeded"));
    assert!(m.contains("256"), "{m}");
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(&[("user", &long)], json!({})),
    );
    assert_error(&r, 400, Some("messages"), Some("context_length_exceeded"));
    let r = completion(
        json!({"prompt": "Explicit is better than implicit. ".repeat(5), "max_tokens": 100}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = completion(
        json!({"prompt": "Explicit is better than implicit. ".repeat(15), "max_tokens": 100}),
    );
    let m = assert_error(&r, 400, Some("prompt"), Some("context_length_exceeded"));
    assert!(m.contains("max_tokens asks for 100"), "{m}");
    // Streaming requests get the same errors as a status, before any event.
    let r = completion(json!({"prompt": long, "stream": true}));
    assert_error(&r, 400, Some("prompt"), Some("context_length_exceeded"));

    // Routes and methods.
    let m = assert_error(&get(addr, "/v1/nothing"), 404, None, Some("unknown_url"));
    assert!(m.contains("/v1/nothing"), "{m}");
    assert_error(&get(addr, "/"), 404, None, Some("unknown_url"));
    assert_error(
        &get(addr, "/v1/chat/completions"),
        405,
        None,
        Some("method_not_allowed"),
    );
    assert_error(
        &get(addr, "/v1/models/gpt-4"),
        404,
        None,
        Some("model_not_found"),
    );
    // A request naming another model than the served one (naming none is fine).
    assert_error(
        &chat(json!({"model": "gpt-4"})),
        404,
        None,
        Some("model_not_found"),
    );
    assert_error(
        &post(
            addr,
            "/v1/completions",
            &json!({"model": "gpt-4", "prompt": "x"}),
        ),
        404,
        None,
        Some("model_not_found"),
    );
    assert_eq!(chat(json!({"model": "fp32", "max_tokens": 2})).status, 200);
    let m = get(addr, "/v1/models/fp32");
    assert_eq!(m.status, 200);
    assert_eq!(m.json()["id"], "fp32");

    // The body limit (4096 bytes here), with and without a Content-Length.
    let big = chat_body(&[("user", &"x".repeat(5000))], json!({}));
    assert_error(
        &post(addr, "/v1/chat/completions", &big),
        413,
        None,
        Some("request_too_large"),
    );
    let body = big.to_string();
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let s = std::net::TcpStream::connect(addr).unwrap();
    {
        use std::io::Write;
        let mut w = &s;
        let head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
                    Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n";
        let _ = w
            .write_all(head.as_bytes())
            .and_then(|()| w.write_all(chunked.as_bytes()));
    }
    assert_error(&read_response(s), 413, None, Some("request_too_large"));
    // The server still answers.
    assert!(!chat_text(&chat(json!({"max_tokens": 3}))).is_empty());
    server.stop().unwrap();
}

#[test]
fn a_full_queue_is_refused_with_429() {
    let (server, engine) = start(ServerConfig {
        max_queue: 1,
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let body = chat_body(HELLO, with(greedy(), json!({"max_tokens": 8})));
    let paused = engine.pause();
    // The model thread takes the first request and holds it; the second waits in the queue.
    let first = {
        let b = body.clone();
        std::thread::spawn(move || post(addr, "/v1/chat/completions", &b))
    };
    wait_until("the first request is taken", || engine.status().busy);
    let second = {
        let b = body.clone();
        std::thread::spawn(move || post(addr, "/v1/chat/completions", &b))
    };
    wait_until("the second request is queued", || {
        engine.status().queued == 1
    });
    let r = post(addr, "/v1/chat/completions", &body);
    let m = assert_error(&r, 429, None, Some("queue_full"));
    assert!(m.contains("busy"), "{m}");
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "x", "stream": true}),
    );
    assert_error(&r, 429, None, Some("queue_full"));
    // /health and /v1/models do not queue.
    assert_eq!(get(addr, "/health").json(), json!({"status": "ok"}));
    assert_eq!(get(addr, "/v1/models").status, 200);
    drop(paused);
    let a = chat_text(&first.join().unwrap());
    let b = chat_text(&second.join().unwrap());
    assert_eq!(a, b);
    assert_eq!(chat_text(&post(addr, "/v1/chat/completions", &body)), a);
    let s = engine.status();
    assert_eq!((s.completed, s.queued, s.failed), (3, 0, 0));
    server.stop().unwrap();
}

#[test]
fn engine_failures_are_500_with_the_error() {
    // A tokenizer with a token the model's embedding table does not have (id 600 of 512).
    let dir = std::env::temp_dir().join(format!("pteron-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut tok: Value =
        serde_json::from_str(&std::fs::read_to_string(tiny().join("tokenizer.json")).unwrap())
            .unwrap();
    tok["added_tokens"].as_array_mut().unwrap().push(json!({
        "id": 600, "content": "<|outside|>", "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true,
    }));
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
    let files = pteron_serve::ModelFiles {
        tokenizer: dir.join("tokenizer.json"),
        // The chat template from the fixture's configuration.
        tokenizer_config: Some(tiny().join("tokenizer_config.json")),
        ..files()
    };
    let (server, engine) = start_with(&files, ServerConfig::default());
    let addr = server.local_addr();
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Simple <|outside|> is", "max_tokens": 4}),
    );
    let m = assert_error(&r, 500, None, None);
    assert_eq!(r.json()["error"]["type"], "server_error");
    assert!(
        m.contains("generation failed") && m.contains("out of range"),
        "{m}"
    );
    // Streamed, the failing prefill is the status too (nothing was sent yet).
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(
            &[("user", "Simple <|outside|> is")],
            json!({"stream": true}),
        ),
    );
    assert_error(&r, 500, None, None);
    // The model thread goes on: the next request is answered, from a clean cache.
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(HELLO, with(greedy(), json!({"max_tokens": 12}))),
    );
    let want = Reference::new()
        .chat(HELLO, 12, SamplerConfig::greedy())
        .text;
    assert_eq!(chat_text(&r), want);
    assert_eq!(engine.status().failed, 2);
    server.stop().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_clients_all_get_their_answers() {
    let (server, engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let reference = Reference::new();
    let convs: Vec<Vec<(&str, &str)>> = vec![
        vec![("user", "Beautiful is better than ugly.")],
        vec![
            ("system", "Be brief."),
            ("user", "Explicit is better than implicit."),
        ],
        vec![
            ("user", "Sparse is better than dense."),
            ("assistant", "Yes."),
            ("user", "Why?"),
        ],
        vec![("user", "Readability counts.")],
    ];
    let want: Vec<String> = convs
        .iter()
        .map(|c| reference.chat(c, 48, SamplerConfig::greedy()).text)
        .collect();
    let threads: Vec<_> = convs
        .iter()
        .zip(&want)
        .enumerate()
        .map(|(i, (c, w))| {
            let body = chat_body(
                c,
                with(greedy(), json!({"max_tokens": 48, "stream": i % 2 == 1})),
            );
            let w = w.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let r = post(addr, "/v1/chat/completions", &body);
                    let got = if i % 2 == 1 {
                        streamed(&r, true).0
                    } else {
                        chat_text(&r)
                    };
                    assert_eq!(got, w, "client {i}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(engine.status().completed, 12);
    server.stop().unwrap();
}

#[test]
fn a_client_that_leaves_frees_the_model_thread() {
    let (server, engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    // Mid-stream: read the first events, then close the connection.
    let body = json!({"prompt": "Now is better than never.", "temperature": 0, "stream": true});
    let s = send(
        addr,
        "POST",
        "/v1/completions",
        &[],
        body.to_string().as_bytes(),
    );
    {
        use std::io::Read;
        let mut buf = [0u8; 512];
        let mut seen = Vec::new();
        while !String::from_utf8_lossy(&seen).contains("data: ") {
            let n = (&s).read(&mut buf).unwrap();
            assert!(n > 0);
            seen.extend_from_slice(&buf[..n]);
        }
    }
    drop(s);
    wait_until("the generation is cancelled", || {
        engine.status().cancelled == 1
    });
    let t = Instant::now();
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Flat is better", "max_tokens": 20, "temperature": 0}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["choices"][0]["text"].as_str().unwrap(),
        Reference::new().completion("Flat is better", 20).text
    );
    assert!(t.elapsed() < Duration::from_secs(10));

    // While queued: the request is skipped, never run. Non-streaming, then streaming.
    for stream in [false, true] {
        let before = engine.status();
        let paused = engine.pause();
        let blocker = {
            let b = json!({"prompt": "Errors should never pass silently.", "max_tokens": 4});
            std::thread::spawn(move || post(addr, "/v1/completions", &b))
        };
        wait_until("the blocker is taken", || engine.status().busy);
        let body =
            json!({"prompt": "In the face of ambiguity", "max_tokens": 50, "stream": stream});
        let s = send(
            addr,
            "POST",
            "/v1/completions",
            &[],
            body.to_string().as_bytes(),
        );
        wait_until("the request is queued", || engine.status().queued == 1);
        drop(s);
        // The server notices the closed connection while the request waits.
        std::thread::sleep(Duration::from_millis(500));
        drop(paused);
        assert_eq!(blocker.join().unwrap().status, 200);
        wait_until("the queue is empty", || {
            let s = engine.status();
            s.queued == 0 && !s.busy
        });
        let after = engine.status();
        assert_eq!(after.completed, before.completed + 1);
        assert_eq!(
            after.skipped + after.cancelled,
            before.skipped + before.cancelled + 1
        );
        // Skipped, not started and then cancelled: the server saw the closed connection within
        // the 500 ms. Under emulation (the aarch64 suite runs in QEMU) that can take longer;
        // freeing the slot either way is what the sum above checks.
        if cfg!(target_arch = "x86_64") {
            assert_eq!(after.skipped, before.skipped + 1, "{after:?}");
        }
    }
    server.stop().unwrap();
}

#[test]
fn the_kv_cache_is_reused_with_fresh_results() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let reference = Reference::new();
    let first: Vec<(&str, &str)> = vec![("user", "Special cases aren't special enough.")];
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(&first, with(greedy(), json!({"max_tokens": 30}))),
    );
    let answer = chat_text(&r);
    assert_eq!(
        r.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
    // The next turn starts with the whole first exchange: only its new tokens are prefilled.
    let second = vec![
        first[0],
        ("assistant", answer.as_str()),
        ("user", "Although practicality beats purity."),
    ];
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(&second, with(greedy(), json!({"max_tokens": 40}))),
    );
    let cached = r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached > 20, "{cached}");
    let want = reference.chat(&second, 40, SamplerConfig::greedy());
    assert_eq!(chat_text(&r), want.text);
    // A fresh server gives the same.
    let (fresh, _) = start(ServerConfig::default());
    let r2 = post(
        fresh.local_addr(),
        "/v1/chat/completions",
        &chat_body(&second, with(greedy(), json!({"max_tokens": 40}))),
    );
    assert_eq!(
        r2.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
    assert_eq!(chat_text(&r2), want.text);
    fresh.stop().unwrap();
    // The same prompt again (all but its last token cached), a shorter one sharing a prefix
    // (the cache is cut back), and a completion sharing nothing.
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(&second, with(greedy(), json!({"max_tokens": 40}))),
    );
    let n = r.json()["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        r.json()["usage"]["prompt_tokens_details"]["cached_tokens"],
        n - 1
    );
    assert_eq!(chat_text(&r), want.text);
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(&first, with(greedy(), json!({"max_tokens": 30}))),
    );
    assert_eq!(chat_text(&r), answer);
    assert!(
        r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Beautiful is better than ugly.", "max_tokens": 64, "temperature": 0}),
    );
    assert_eq!(
        r.json()["choices"][0]["text"].as_str().unwrap(),
        reference
            .completion("Beautiful is better than ugly.", 64)
            .text
    );
    server.stop().unwrap();
}

#[test]
fn seeded_sampling_is_reproducible() {
    let (server, _engine) = start(ServerConfig::default());
    let addr = server.local_addr();
    let body = |seed: u64| {
        chat_body(
            HELLO,
            json!({"temperature": 0.8, "seed": seed, "max_tokens": 60}),
        )
    };
    let a = chat_text(&post(addr, "/v1/chat/completions", &body(42)));
    // Another request in between changes the cache, not the answer.
    let other = chat_text(&post(addr, "/v1/chat/completions", &body(7)));
    let b = chat_text(&post(addr, "/v1/chat/completions", &body(42)));
    assert_eq!(a, b);
    assert_ne!(a, other);
    let streamed_b = streamed(
        &post(
            addr,
            "/v1/chat/completions",
            &with(body(42), json!({"stream": true})),
        ),
        true,
    )
    .0;
    assert_eq!(streamed_b, a);
    let sampler = SamplerConfig {
        temperature: 0.8,
        seed: 42,
        ..SamplerConfig::default()
    };
    assert_eq!(a, Reference::new().chat(HELLO, 60, sampler).text);
    // Without a seed, each request draws its own.
    let unseeded = chat_body(HELLO, json!({"temperature": 1.0, "max_tokens": 60}));
    let texts: std::collections::HashSet<String> = (0..3)
        .map(|_| chat_text(&post(addr, "/v1/chat/completions", &unseeded)))
        .collect();
    assert!(texts.len() > 1);
    server.stop().unwrap();
}

#[test]
fn an_api_key_guards_the_v1_routes() {
    let (server, _engine) = start(ServerConfig {
        api_key: Some("sk-test-123".into()),
        model_name: Some("tiny-llama".into()),
        ..ServerConfig::default()
    });
    let addr = server.local_addr();
    let body = chat_body(HELLO, with(greedy(), json!({"max_tokens": 5}))).to_string();
    let chat = |headers: &[(&str, &str)]| {
        request(
            addr,
            "POST",
            "/v1/chat/completions",
            headers,
            body.as_bytes(),
        )
    };
    let r = chat(&[]);
    assert_error(&r, 401, None, Some("invalid_api_key"));
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    for wrong in [
        "Bearer sk-test-12",
        "Bearer sk-test-1234",
        "sk-test-123",
        "Basic sk-test-123",
        "Bearer",
    ] {
        assert_error(
            &chat(&[("Authorization", wrong)]),
            401,
            None,
            Some("invalid_api_key"),
        );
    }
    let r = chat(&[("Authorization", "Bearer sk-test-123")]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "tiny-llama");
    assert_eq!(
        chat(&[("authorization", "bearer  sk-test-123 ")]).status,
        200
    );
    let models = |h: &[(&str, &str)]| request(addr, "GET", "/v1/models", h, b"");
    assert_eq!(models(&[]).status, 401);
    let r = models(&[("Authorization", "Bearer sk-test-123")]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"object": "list", "data": [{
            "id": "tiny-llama", "object": "model", "owned_by": "pteron",
            "created": r.json()["data"][0]["created"],
        }]})
    );
    // /health needs no key.
    let r = get(addr, "/health");
    assert_eq!((r.status, r.json()), (200, json!({"status": "ok"})));
    server.stop().unwrap();
}

#[test]
fn a_model_without_a_chat_template_still_completes() {
    // The tokenizer alone, copied where no tokenizer_config.json is beside it.
    let dir = std::env::temp_dir().join(format!("pteron-serve-notemplate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(tiny().join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    let files = pteron_serve::ModelFiles {
        tokenizer: dir.join("tokenizer.json"),
        ..files()
    };
    let (server, engine) = start_with(&files, ServerConfig::default());
    assert!(!engine.info().has_chat_template);
    let addr = server.local_addr();
    let r = post(addr, "/v1/chat/completions", &chat_body(HELLO, json!({})));
    let m = assert_error(&r, 400, Some("messages"), None);
    assert!(m.contains("chat template"), "{m}");
    let r = post(
        addr,
        "/v1/completions",
        &json!({"prompt": "Simple is", "max_tokens": 5}),
    );
    assert_eq!(r.status, 200);
    server.stop().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_configurations_and_files_are_typed_errors() {
    let bad = ServerConfig {
        max_queue: 0,
        ..ServerConfig::default()
    };
    assert!(matches!(
        pteron_serve::Engine::start(&files(), &bad),
        Err(pteron_serve::Error::Config {
            field: "max_queue",
            ..
        })
    ));
    let missing = pteron_serve::ModelFiles {
        model: tiny().join("missing.pte"),
        ..files()
    };
    let e = pteron_serve::Engine::start(&missing, &ServerConfig::default())
        .err()
        .unwrap();
    assert!(matches!(e, pteron_serve::Error::Model { .. }), "{e}");
    assert!(e.to_string().contains("missing.pte"), "{e}");
    let e = pteron_serve::Engine::start(
        &pteron_serve::ModelFiles {
            tokenizer: tiny().join("nothing.json"),
            ..files()
        },
        &ServerConfig::default(),
    )
    .err()
    .unwrap();
    assert!(matches!(e, pteron_serve::Error::Tokenizer { .. }), "{e}");
    // A port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let engine = pteron_serve::Engine::start(&files(), &ServerConfig::default()).unwrap();
    let config = ServerConfig {
        port: taken.local_addr().unwrap().port(),
        ..ServerConfig::default()
    };
    let e = pteron_serve::Server::spawn(config, engine).err().unwrap();
    assert!(matches!(e, pteron_serve::Error::Bind { .. }), "{e}");
}
