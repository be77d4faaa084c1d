//! Server settings.

use std::time::Duration;

use pteron_llm::{SamplerConfig, Speculation};

use crate::error::Error;

/// How the server listens, what it accepts, and how requests are sampled by default
/// (`threads` and `max_queue` are the model thread's: [`crate::Engine::start`] reads them).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to bind (loopback by default; `0.0.0.0` exposes the server to the network).
    pub host: String,
    /// 0: a port the OS picks ([`crate::Server::local_addr`] tells which).
    pub port: u16,
    /// When set, every `/v1/` request must carry `Authorization: Bearer <api_key>`.
    pub api_key: Option<String>,
    /// The model's id in responses and `/v1/models` (default: the program's file stem).
    pub model_name: Option<String>,
    /// Largest request body; larger ones are refused with 413.
    pub max_body_bytes: usize,
    /// Requests that may wait for the model thread; more are refused with 429.
    pub max_queue: usize,
    /// Largest `max_tokens` a request may ask for (`None`: the model's context length); a
    /// request without `max_tokens` generates at most this many tokens.
    pub max_tokens_limit: Option<usize>,
    /// Sampling for the parameters a request leaves out (OpenAI's defaults: temperature 1,
    /// top_p 1). `seed` is not used: a request without a seed gets a random one.
    pub sampling: SamplerConfig,
    /// Kernel threads of the model (0: the runtime's default, one per physical core).
    pub threads: usize,
    /// Speculative decoding for every generation (prompt lookup, or `DraftModel` with
    /// [`crate::ModelFiles::draft`]); answers are those of plain decoding. The model must be
    /// exported with full logits: [`crate::Engine::start`] refuses it otherwise.
    pub speculation: Speculation,
    /// After a shutdown request, how long open connections may take to finish.
    pub shutdown_grace: Duration,
    /// The runtime the model is loaded with (its backends and partitioners: e.g. the GPU
    /// engine); `None`: `pteron::Runtime::new()`.
    pub runtime: Option<pteron::Runtime>,
}

/// The default `max_body_bytes`: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;
/// The default `max_queue`.
pub const DEFAULT_MAX_QUEUE: usize = 16;
/// Most stop strings a request may give (OpenAI's limit).
pub const MAX_STOP_STRINGS: usize = 4;
/// Longest stop string, in bytes (each generated token is checked against every prefix of each
/// stop string).
pub const MAX_STOP_BYTES: usize = 256;

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            api_key: None,
            model_name: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_queue: DEFAULT_MAX_QUEUE,
            max_tokens_limit: None,
            sampling: SamplerConfig {
                temperature: 1.0,
                ..SamplerConfig::default()
            },
            threads: 0,
            speculation: Speculation::Off,
            shutdown_grace: Duration::from_secs(10),
            runtime: None,
        }
    }
}

impl ServerConfig {
    /// Checks the settings that have a range.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field, reason: &str| {
            Err(Error::Config {
                field,
                reason: reason.into(),
            })
        };
        if self.max_queue == 0 {
            return bad("max_queue", "must be at least 1");
        }
        if self.max_body_bytes == 0 {
            return bad("max_body_bytes", "must be at least 1");
        }
        if self.max_tokens_limit == Some(0) {
            return bad("max_tokens_limit", "must be at least 1");
        }
        if self.api_key.as_deref().is_some_and(str::is_empty) {
            return bad("api_key", "must not be empty");
        }
        if let Err(e) = self.sampling.validate() {
            return bad("sampling", &e);
        }
        if let Err(e) = self.speculation.validate() {
            return bad("speculation", &e);
        }
        Ok(())
    }
}
