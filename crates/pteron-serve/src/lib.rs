//! A local LLM server speaking OpenAI's HTTP API, over an ExecuTorch LLM program run by
//! [`pteron_llm`] (`pteron serve`).
//!
//! - `POST /v1/chat/completions`: messages rendered with the model's chat template
//!   (`tokenizer_config.json`), streamed (server-sent events) or not.
//! - `POST /v1/completions`: a plain prompt.
//! - `GET /v1/models`, `GET /v1/models/{id}`, `GET /health`.
//!
//! One OS thread runs the model ([`Engine`]); requests wait in a bounded queue (a full queue
//! answers 429), a request whose client disconnects is stopped after the current token (or
//! skipped, if still queued), and the KV cache is reused for the prompt tokens a request
//! shares with the previous one (a conversation's earlier turns are not prefilled again).
//! Speculative decoding (`ServerConfig::speculation`: prompt lookup, or a draft model in
//! `ModelFiles::draft`) speeds generations up without changing them.
//! Errors are OpenAI's error objects (`{"error": {"message", "type", "param", "code"}}`) with
//! their HTTP status. Not supported: tools (function calling), logprobs, `n` > 1, images.
//!
//! ```no_run
//! use pteron_serve::{Engine, ModelFiles, Server, ServerConfig};
//!
//! let config = ServerConfig { port: 0, ..ServerConfig::default() };
//! let files = ModelFiles {
//!     model: "model.pte".into(),
//!     tokenizer: "tokenizer.json".into(),
//!     tokenizer_config: None,
//!     draft: None,
//! };
//! let engine = Engine::start(&files, &config)?;
//! let server = Server::spawn(config, engine)?;
//! let url = format!("http://{}/v1/chat/completions", server.local_addr());
//! # let _ = url;
//! server.stop()?;
//! # Ok::<(), pteron_serve::Error>(())
//! ```
//!
//! Like the other library crates this one prints nothing and reads no environment variable:
//! the `pteron` command does both.

mod api;
mod config;
mod engine;
mod error;
mod http;
mod ids;

pub use config::{
    ServerConfig, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE, MAX_STOP_BYTES, MAX_STOP_STRINGS,
};
pub use engine::{Engine, EngineStatus, ModelFiles, ModelInfo, Paused};
pub use error::Error;
pub use http::{serve_until_ctrl_c, RunningServer, Server, ShutdownHandle};
