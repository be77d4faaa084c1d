//! OpenAI's request bodies (the fields this server reads; others are ignored), their checks,
//! and the error object.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use pteron_llm::chat::Message;
use pteron_llm::SamplerConfig;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::config::{MAX_STOP_BYTES, MAX_STOP_STRINGS};
use crate::engine::{JobError, Prompt, Request, SubmitError};

/// A JSON body with its status.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

/// An error response: `{"error": {"message", "type", "param", "code"}}` with its status.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 for one parameter.
    pub fn param(param: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param),
            ..Self::invalid(message)
        }
    }

    pub fn with_code(self, code: &'static str) -> Self {
        ApiError {
            code: Some(code),
            ..self
        }
    }

    /// The JSON error object.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = json_response(self.status, &self.body());
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        res
    }
}

impl ApiError {
    /// The error of a request that reached the model thread; `chat`: from
    /// `/v1/chat/completions` (the prompt is `messages`, else `prompt`).
    pub fn from_job(e: JobError, chat: bool) -> Self {
        let message = e.to_string();
        let prompt = if chat { "messages" } else { "prompt" };
        match e {
            JobError::ContextLength { .. } => {
                ApiError::param(prompt, message).with_code("context_length_exceeded")
            }
            JobError::EmptyPrompt => ApiError::param(prompt, message),
            JobError::NoChatTemplate | JobError::Template(_) => {
                ApiError::param("messages", message)
            }
            JobError::Generate(_) | JobError::Panicked(_) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
            }
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        let message = e.to_string();
        match e {
            SubmitError::QueueFull { .. } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
                    .with_code("queue_full")
            }
            SubmitError::Stopped => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
            }
        }
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A message's `content`: a string, or parts (`{"type": "text", "text": ...}`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub(crate) struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatMessage {
    pub role: String,
    /// `null` (an assistant message that only called tools) reads as empty.
    #[serde(default)]
    pub content: Option<Content>,
}

/// The sampling and length fields both endpoints take.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Common {
    /// The model asked for: absent, or this server's model name (else 404).
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Extensions other servers (vLLM, llama-server) take as well.
    #[serde(default)]
    pub top_k: Option<u64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// Leave special tokens out of the text (vLLM's extension; default true).
    #[serde(default)]
    pub skip_special_tokens: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<u64>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub(crate) struct CompletionRequest {
    pub prompt: Value,
    #[serde(default)]
    pub logprobs: Option<u64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub best_of: Option<u64>,
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub common: Common,
}

/// What the server checks requests against.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// Largest `max_tokens`.
    pub max_tokens: usize,
    pub sampling: SamplerConfig,
}

/// A checked request: what the model thread runs, and how to answer.
#[derive(Debug)]
pub(crate) struct Checked {
    pub request: Request,
    pub stream: bool,
    pub include_usage: bool,
}

impl ChatRequest {
    pub fn check(self, limits: &Limits) -> Result<Checked, ApiError> {
        if self.logprobs == Some(true) || self.top_logprobs.is_some_and(|n| n > 0) {
            return Err(ApiError::param("logprobs", "logprobs are not supported"));
        }
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::param(
                "tools",
                "tools (function calling) are not supported",
            ));
        }
        if self.messages.is_empty() {
            return Err(ApiError::param("messages", "messages must not be empty"));
        }
        let mut messages = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.into_iter().enumerate() {
            let role = match m.role.as_str() {
                "system" | "developer" => "system",
                "user" => "user",
                "assistant" => "assistant",
                other => {
                    return Err(ApiError::param(
                        "messages",
                        format!(
                            "messages[{i}].role {other:?} is not supported (system, user, \
                             assistant)"
                        ),
                    ))
                }
            };
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => {
                    let mut texts = Vec::with_capacity(parts.len());
                    for p in parts {
                        match (p.kind.as_str(), p.text) {
                            ("text", Some(t)) => texts.push(t),
                            ("text", None) => {
                                return Err(ApiError::param(
                                    "messages",
                                    format!("messages[{i}]: a text part without text"),
                                ))
                            }
                            (kind, _) => {
                                return Err(ApiError::param(
                                    "messages",
                                    format!(
                                        "messages[{i}]: content parts of type {kind:?} are not \
                                         supported (only text)"
                                    ),
                                ))
                            }
                        }
                    }
                    texts.join("\n")
                }
            };
            messages.push(Message::new(role, &content));
        }
        self.common.check(Prompt::Chat(messages), limits)
    }
}

impl CompletionRequest {
    pub fn check(self, limits: &Limits) -> Result<Checked, ApiError> {
        if self.logprobs.is_some() {
            return Err(ApiError::param("logprobs", "logprobs are not supported"));
        }
        if self.echo == Some(true) {
            return Err(ApiError::param("echo", "echo is not supported"));
        }
        if self.best_of.is_some_and(|n| n > 1) {
            return Err(ApiError::param("best_of", "best_of > 1 is not supported"));
        }
        if self.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::param("suffix", "suffix is not supported"));
        }
        let prompt = match self.prompt {
            Value::String(s) => s,
            Value::Array(mut a) if a.len() == 1 && a[0].is_string() => match a.pop() {
                Some(Value::String(s)) => s,
                _ => unreachable!("checked: one string"),
            },
            _ => {
                return Err(ApiError::param(
                    "prompt",
                    "prompt must be a string or an array of one string",
                ))
            }
        };
        self.common.check(Prompt::Text(prompt), limits)
    }
}

impl Common {
    fn check(self, prompt: Prompt, limits: &Limits) -> Result<Checked, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::param("n", "only n = 1 is supported"));
        }
        let max_tokens = match self.max_completion_tokens.or(self.max_tokens) {
            None => None,
            Some(0) => {
                return Err(ApiError::param(
                    "max_tokens",
                    "max_tokens must be at least 1",
                ))
            }
            Some(m) if m > limits.max_tokens as u64 => {
                return Err(ApiError::param(
                    "max_tokens",
                    format!(
                        "max_tokens is {m}, over this server's limit of {}",
                        limits.max_tokens
                    ),
                ))
            }
            // ≤ limits.max_tokens, a usize.
            Some(m) => Some(m as usize),
        };
        let mut sampler = limits.sampling.clone();
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(ApiError::param(
                    "temperature",
                    format!("temperature is {t}; it must be in [0, 2]"),
                ));
            }
            sampler.temperature = t as f32;
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(ApiError::param(
                    "top_p",
                    format!("top_p is {p}; it must be in (0, 1]"),
                ));
            }
            sampler.top_p = p as f32;
        }
        if let Some(k) = self.top_k {
            sampler.top_k = usize::try_from(k).unwrap_or(usize::MAX);
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(ApiError::param(
                    "min_p",
                    format!("min_p is {p}; it must be in [0, 1]"),
                ));
            }
            sampler.min_p = p as f32;
        }
        if let Some(r) = self.repetition_penalty {
            if !(r > 0.0 && r <= 100.0) {
                return Err(ApiError::param(
                    "repetition_penalty",
                    format!("repetition_penalty is {r}; it must be in (0, 100]"),
                ));
            }
            sampler.repetition_penalty = r as f32;
        }
        // Two's complement: a negative seed is as good a seed as any.
        sampler.seed = match self.seed {
            Some(s) => s as u64,
            None => crate::ids::random_u64(),
        };
        let stop = match self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s],
            Some(Stop::Many(v)) => v,
        };
        if stop.len() > MAX_STOP_STRINGS {
            return Err(ApiError::param(
                "stop",
                format!("at most {MAX_STOP_STRINGS} stop strings"),
            ));
        }
        if stop.iter().any(|s| s.len() > MAX_STOP_BYTES) {
            return Err(ApiError::param(
                "stop",
                format!("a stop string is longer than {MAX_STOP_BYTES} bytes"),
            ));
        }
        let stream = self.stream.unwrap_or(false);
        let include_usage = self
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        Ok(Checked {
            request: Request {
                prompt,
                max_tokens,
                max_tokens_cap: limits.max_tokens,
                sampler,
                stop,
                skip_special: self.skip_special_tokens.unwrap_or(true),
            },
            stream,
            include_usage,
        })
    }
}
