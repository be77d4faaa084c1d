//! A plain HTTP/1.1 client over `std::net::TcpStream` (`Connection: close`, chunked bodies
//! decoded), the tiny fixture's paths, and expectations computed with `pteron_llm` directly.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use pteron_llm::chat::{chat_eos_ids, ChatTemplate, Message};
use pteron_llm::{GenerateOptions, Generation, Generator, Model, SamplerConfig, Tokenizer};
use pteron_serve::{Engine, ModelFiles, RunningServer, Server, ServerConfig};
use serde_json::Value;

pub fn tiny() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/tiny")
}

pub fn files() -> ModelFiles {
    ModelFiles {
        model: tiny().join("fp32.pte"),
        tokenizer: tiny().join("tokenizer.json"),
        tokenizer_config: None,
        draft: None,
    }
}

pub fn json_file(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(tiny().join(name)).unwrap()).unwrap()
}

/// A server on an OS-assigned loopback port, with its engine (for `status` and `pause`).
pub fn start(config: ServerConfig) -> (RunningServer, Engine) {
    start_with(&files(), config)
}

pub fn start_with(files: &ModelFiles, config: ServerConfig) -> (RunningServer, Engine) {
    let config = ServerConfig {
        port: 0,
        threads: 1,
        ..config
    };
    let engine = Engine::start(files, &config).unwrap();
    let server = Server::spawn(config, engine.clone()).unwrap();
    (server, engine)
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&self.body)))
    }

    /// The `data:` payloads of a server-sent-events body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                    .to_string()
            })
            .collect()
    }
}

/// Writes a request (`Connection: close`) and returns the stream, to read its response.
pub fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // The server may answer (413) and close before reading all of a large body.
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    s
}

/// Reads a whole response.
pub fn read_response(s: TcpStream) -> Response {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("status line {line:?}"))
        .parse()
        .unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line).unwrap();
            let n = usize::from_str_radix(line.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    read_response(send(addr, method, path, headers, body))
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    request(addr, "POST", path, &[], body.to_string().as_bytes())
}

pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], b"")
}

/// The assistant's text of a non-streaming chat completion.
pub fn chat_text(r: &Response) -> String {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The concatenated deltas of a streamed chat completion, and its events (parsed, without
/// the final `[DONE]`, which it checks is there).
pub fn streamed(r: &Response, chat: bool) -> (String, Vec<Value>) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let mut events = r.events();
    assert_eq!(events.pop().as_deref(), Some("[DONE]"));
    let events: Vec<Value> = events
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let text = events
        .iter()
        .filter_map(|e| {
            let c = e["choices"].get(0)?;
            if chat {
                c["delta"]["content"].as_str().map(String::from)
            } else {
                c["text"].as_str().map(String::from)
            }
        })
        .collect();
    (text, events)
}

/// `pteron_llm` on its own: the fixture loaded fresh, one generation.
pub struct Reference {
    pub tokenizer: Tokenizer,
    file: pteron::ProgramFile,
}

impl Reference {
    pub fn new() -> Self {
        Reference {
            tokenizer: Tokenizer::from_file(tiny().join("tokenizer.json")).unwrap(),
            file: pteron::ProgramFile::open(tiny().join("fp32.pte")).unwrap(),
        }
    }

    fn run(&self, ids: &[u32], chat: bool, opts: GenerateOptions) -> Generation {
        let program = pteron::Runtime::new().load_program(&self.file).unwrap();
        let model = Model::load(&program, pteron::MethodOptions::new().threads(1)).unwrap();
        let mut gen = Generator::new(model, &self.tokenizer);
        let eos = if chat {
            chat_eos_ids(&gen)
        } else {
            gen.default_eos_ids()
        };
        let opts = GenerateOptions {
            eos_ids: Some(eos),
            ..opts
        };
        gen.generate(ids, &opts, &mut |_| {}).unwrap()
    }

    /// The prompt ids of a conversation (the chat template, with the generation prompt).
    pub fn chat_ids(&self, messages: &[(&str, &str)]) -> Vec<u32> {
        let cfg = &self.tokenizer.config;
        let t = ChatTemplate::new(cfg.chat_template.as_deref().unwrap()).unwrap();
        let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
        let text = t
            .render(
                &msgs,
                true,
                cfg.bos_token.as_deref(),
                cfg.eos_token.as_deref(),
            )
            .unwrap();
        self.tokenizer.encode(&text, false).unwrap()
    }

    pub fn chat(
        &self,
        messages: &[(&str, &str)],
        max_tokens: usize,
        sampler: SamplerConfig,
    ) -> Generation {
        let ids = self.chat_ids(messages);
        self.run(
            &ids,
            true,
            GenerateOptions {
                max_new_tokens: max_tokens,
                sampler,
                ..Default::default()
            },
        )
    }

    pub fn completion(&self, prompt: &str, max_tokens: usize) -> Generation {
        let ids = self.tokenizer.encode(prompt, true).unwrap();
        self.run(
            &ids,
            false,
            GenerateOptions {
                max_new_tokens: max_tokens,
                ..Default::default()
            },
        )
    }
}

/// A chat request body (no `model`: the served one).
pub fn chat_body(messages: &[(&str, &str)], extra: Value) -> Value {
    let msgs: Vec<Value> = messages
        .iter()
        .map(|(r, c)| serde_json::json!({"role": r, "content": c}))
        .collect();
    let mut body = serde_json::json!({"messages": msgs});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}
