//! The HTTP side: routes, authentication, responses (JSON and server-sent events), and the
//! server's life cycle.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use pteron_llm::FinishReason;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::api::{json_response, ApiError, ChatRequest, Checked, CompletionRequest, Limits};
use crate::config::ServerConfig;
use crate::engine::{Done, Engine, Event, Ticket};
use crate::error::Error;
use crate::ids::{new_id, unix_time};

/// What every handler reads.
struct AppState {
    engine: Engine,
    api_key: Option<String>,
    /// The model's id.
    model: String,
    /// When the server started (the model's `created`).
    created: u64,
    max_body_bytes: usize,
    limits: Limits,
}

type Shared = Arc<AppState>;

fn router(state: Shared) -> Router {
    let max_body = state.max_body_bytes;
    let v1 = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    Router::new()
        .merge(v1)
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(state)
}

/// Compares without stopping at the first difference (no timing hint of the key's bytes).
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authenticate(
    State(s): State<Shared>,
    req: axum::extract::Request,
    next: Next,
) -> Response {
    if let Some(key) = &s.api_key {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, k)| k.trim());
        let err = |m: &str| {
            ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", m)
                .with_code("invalid_api_key")
                .into_response()
        };
        match given {
            None => {
                return err(
                    "You didn't provide an API key: send it in the Authorization header \
                     (Authorization: Bearer KEY).",
                )
            }
            Some(k) if !same_key(k.as_bytes(), key.as_bytes()) => {
                return err("Incorrect API key provided.")
            }
            Some(_) => {}
        }
    }
    next.run(req).await
}

async fn health() -> Response {
    json_response(StatusCode::OK, &json!({"status": "ok"}))
}

fn model_object(s: &AppState) -> Value {
    json!({
        "id": s.model,
        "object": "model",
        "created": s.created,
        "owned_by": "pteron",
    })
}

async fn models(State(s): State<Shared>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"object": "list", "data": [model_object(&s)]}),
    )
}

async fn model(State(s): State<Shared>, id: Result<Path<String>, PathRejection>) -> Response {
    match id {
        Ok(Path(id)) => match served(&s, Some(&id)) {
            Ok(()) => json_response(StatusCode::OK, &model_object(&s)),
            Err(e) => e.into_response(),
        },
        Err(e) => ApiError::invalid(e.body_text()).into_response(),
    }
}

/// A request's model is this server's (or not named): else 404 `model_not_found`, as OpenAI
/// answers a model it does not have.
fn served(s: &AppState, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(id) if id != s.model => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!(
                "The model {id:?} does not exist; this server serves {:?}",
                s.model
            ),
        )
        .with_code("model_not_found")),
        _ => Ok(()),
    }
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!("Invalid URL ({method} {})", uri.path()),
    )
    .with_code("unknown_url")
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        format!("Method not allowed ({method} {})", uri.path()),
    )
    .with_code("method_not_allowed")
}

/// The body as `T`: 413 over the size limit, 400 when it is not that JSON.
fn parse<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!("the request body is over this server's limit of {limit} bytes"),
            )
            .with_code("request_too_large")
        } else {
            ApiError::new(r.status(), "invalid_request_error", r.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request: {e}"
        ))
    })
}

async fn chat_completions(
    State(s): State<Shared>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let checked = parse::<ChatRequest>(body, s.max_body_bytes).and_then(|r| {
        served(&s, r.common.model.as_deref())?;
        r.check(&s.limits)
    });
    match checked {
        Ok(c) => answer(&s, Kind::Chat, c).await,
        Err(e) => e.into_response(),
    }
}

async fn completions(State(s): State<Shared>, body: Result<Bytes, BytesRejection>) -> Response {
    let checked = parse::<CompletionRequest>(body, s.max_body_bytes).and_then(|r| {
        served(&s, r.common.model.as_deref())?;
        r.check(&s.limits)
    });
    match checked {
        Ok(c) => answer(&s, Kind::Text, c).await,
        Err(e) => e.into_response(),
    }
}

fn stopped() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the model thread stopped before answering",
    )
}

/// Queues the request and waits for its first event: an error (the prompt does not fit, the
/// prefill failed) is the response's status; otherwise the answer is one JSON object or a
/// stream of events.
async fn answer(s: &AppState, kind: Kind, checked: Checked) -> Response {
    let mut ticket = match s.engine.submit(checked.request) {
        Ok(t) => t,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let first = match ticket.events.recv().await {
        Some(Event::Failed(e)) => return ApiError::from_job(e, kind.is_chat()).into_response(),
        None => return stopped().into_response(),
        Some(event) => event,
    };
    let meta = Meta {
        id: new_id(kind.id_prefix()),
        created: unix_time(),
        model: s.model.clone(),
        kind,
    };
    if checked.stream {
        return stream(ticket, first, meta, checked.include_usage);
    }
    let mut text = String::new();
    let mut next = Some(first);
    loop {
        let event = match next.take() {
            Some(e) => Some(e),
            None => ticket.events.recv().await,
        };
        match event {
            Some(Event::Text(t)) => text.push_str(&t),
            Some(Event::Done(done)) => {
                return json_response(StatusCode::OK, &meta.response(text, &done));
            }
            Some(Event::Failed(e)) => return ApiError::from_job(e, kind.is_chat()).into_response(),
            None => return stopped().into_response(),
        }
    }
}

/// The endpoint a response belongs to.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Chat,
    Text,
}

impl Kind {
    fn is_chat(self) -> bool {
        matches!(self, Kind::Chat)
    }

    fn id_prefix(self) -> &'static str {
        match self {
            Kind::Chat => "chatcmpl",
            Kind::Text => "cmpl",
        }
    }
}

fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::MaxTokens | FinishReason::ContextFull => "length",
        FinishReason::Eos | FinishReason::StopString | FinishReason::Cancelled => "stop",
    }
}

fn usage(d: &Done) -> Value {
    json!({
        "prompt_tokens": d.prompt_tokens,
        "completion_tokens": d.completion_tokens,
        "total_tokens": d.prompt_tokens + d.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": d.cached_tokens},
    })
}

/// What every object of one response repeats.
struct Meta {
    id: String,
    created: u64,
    model: String,
    kind: Kind,
}

impl Meta {
    /// The non-streaming `chat.completion` or `text_completion`.
    fn response(&self, text: String, done: &Done) -> Value {
        let finish = finish_reason(done.finish);
        let (object, choice) = match self.kind {
            Kind::Chat => (
                "chat.completion",
                json!({
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": null,
                    "finish_reason": finish,
                }),
            ),
            Kind::Text => (
                "text_completion",
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
            ),
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage(done),
        })
    }

    /// One streamed chunk: `text` (with the assistant role first, for chat), or the end.
    fn chunk(&self, text: Option<&str>, role: bool, finish: Option<&str>, usage: bool) -> Value {
        let (object, choice) = match self.kind {
            Kind::Chat => {
                let delta = match (role, text) {
                    (true, t) => json!({"role": "assistant", "content": t.unwrap_or("")}),
                    (false, Some(t)) => json!({"content": t}),
                    (false, None) => json!({}),
                };
                (
                    "chat.completion.chunk",
                    json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}),
                )
            }
            Kind::Text => (
                "text_completion",
                json!({
                    "index": 0,
                    "text": text.unwrap_or(""),
                    "logprobs": null,
                    "finish_reason": finish,
                }),
            ),
        };
        let mut v = json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        });
        if usage {
            // With `stream_options.include_usage`, every chunk has `usage: null` and a last
            // one, with no choices, has the counts.
            v["usage"] = Value::Null;
        }
        v
    }

    fn usage_chunk(&self, done: &Done) -> Value {
        let object = match self.kind {
            Kind::Chat => "chat.completion.chunk",
            Kind::Text => "text_completion",
        };
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage(done),
        })
    }
}

fn sse(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// Server-sent events: the role (chat), a chunk per piece of text, the finish reason, the
/// usage if asked for, `data: [DONE]`. An error after the start is one `data: {"error": ...}`
/// event, and the stream ends. Dropping the body (the client left) drops the ticket, which
/// stops the generation.
fn stream(ticket: Ticket, first: Event, meta: Meta, include_usage: bool) -> Response {
    struct St {
        ticket: Ticket,
        first: Option<Event>,
        meta: Meta,
        include_usage: bool,
        pending: VecDeque<Bytes>,
        ended: bool,
    }
    let mut pending = VecDeque::new();
    if let Kind::Chat = meta.kind {
        pending.push_back(sse(&meta.chunk(None, true, None, include_usage)));
    }
    let st = St {
        ticket,
        first: Some(first),
        meta,
        include_usage,
        pending,
        ended: false,
    };
    let body = futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if let Some(b) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(b), st));
            }
            if st.ended {
                return None;
            }
            let usage = st.include_usage;
            let event = match st.first.take() {
                Some(e) => Some(e),
                None => st.ticket.events.recv().await,
            };
            match event {
                Some(Event::Text(t)) => {
                    let c = st.meta.chunk(Some(&t), false, None, usage);
                    st.pending.push_back(sse(&c));
                }
                Some(Event::Done(done)) => {
                    let c = st
                        .meta
                        .chunk(None, false, Some(finish_reason(done.finish)), usage);
                    st.pending.push_back(sse(&c));
                    if usage {
                        st.pending.push_back(sse(&st.meta.usage_chunk(&done)));
                    }
                    st.pending
                        .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                    st.ended = true;
                }
                Some(Event::Failed(e)) => {
                    let e = ApiError::from_job(e, st.meta.kind.is_chat());
                    st.pending.push_back(sse(&e.body()));
                    st.ended = true;
                }
                None => {
                    st.pending.push_back(sse(&stopped().body()));
                    st.ended = true;
                }
            }
        }
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// Asks a running [`Server`] to stop (cheap to clone).
#[derive(Clone, Debug)]
pub struct ShutdownHandle(Arc<watch::Sender<u8>>);

impl ShutdownHandle {
    /// Stops accepting connections; open ones get [`ServerConfig::shutdown_grace`] to finish.
    pub fn shutdown(&self) {
        self.0.send_if_modified(|v| {
            let was = *v;
            *v = (*v).max(1);
            *v != was
        });
    }

    /// Stops at once, closing open connections.
    pub fn shutdown_now(&self) {
        self.0.send_replace(2);
    }
}

/// An OpenAI-compatible server over one [`Engine`], bound and ready to [`Server::run`].
pub struct Server {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    app: Router,
    shutdown: ShutdownHandle,
    grace: Duration,
}

impl Server {
    /// Binds `config.host:config.port` (port 0: one the OS picks). Call from within a tokio
    /// runtime.
    pub async fn bind(config: ServerConfig, engine: Engine) -> Result<Server, Error> {
        config.validate()?;
        let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
            .await
            .map_err(|source| Error::Bind {
                addr: format!("{}:{}", config.host, config.port),
                source,
            })?;
        Self::with_listener(listener, config, engine)
    }

    /// Serves on a listener bound elsewhere (`config.host` and `config.port` are not used).
    /// Call from within a tokio runtime.
    pub fn from_std(
        listener: std::net::TcpListener,
        config: ServerConfig,
        engine: Engine,
    ) -> Result<Server, Error> {
        config.validate()?;
        let io = |source| Error::Io {
            what: "taking the listener",
            source,
        };
        listener.set_nonblocking(true).map_err(io)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(io)?;
        Self::with_listener(listener, config, engine)
    }

    fn with_listener(
        listener: tokio::net::TcpListener,
        config: ServerConfig,
        engine: Engine,
    ) -> Result<Server, Error> {
        let addr = listener.local_addr().map_err(|source| Error::Io {
            what: "reading the bound address",
            source,
        })?;
        let info = engine.info();
        let context = info.context_length;
        let state = AppState {
            model: config
                .model_name
                .clone()
                .unwrap_or_else(|| info.name.clone()),
            api_key: config.api_key.clone(),
            created: unix_time(),
            max_body_bytes: config.max_body_bytes,
            limits: Limits {
                max_tokens: config.max_tokens_limit.unwrap_or(context).min(context),
                sampling: config.sampling.clone(),
            },
            engine,
        };
        let (tx, _) = watch::channel(0u8);
        Ok(Server {
            listener,
            addr,
            app: router(Arc::new(state)),
            shutdown: ShutdownHandle(Arc::new(tx)),
            grace: config.shutdown_grace,
        })
    }

    /// The bound address (with the port the OS picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Serves until a [`ShutdownHandle`] asks it to stop.
    pub async fn run(self) -> Result<(), Error> {
        let handle = self.shutdown;
        let mut graceful = handle.0.subscribe();
        let mut forced = handle.0.subscribe();
        let grace = self.grace;
        let serve = axum::serve(self.listener, self.app).with_graceful_shutdown(async move {
            let _ = graceful.wait_for(|v| *v >= 1).await;
        });
        // `handle` lives until here, so the watch never closes while serving.
        let deadline = async move {
            if forced.wait_for(|v| *v >= 1).await.is_ok() {
                let _ = tokio::time::timeout(grace, forced.wait_for(|v| *v >= 2)).await;
            }
        };
        let result = tokio::select! {
            r = serve.into_future() => r.map_err(|source| Error::Io { what: "serving", source }),
            () = deadline => Ok(()),
        };
        drop(handle);
        result
    }

    /// Binds and serves on a thread of its own (with its own async runtime); for programs
    /// without one, and tests.
    pub fn spawn(config: ServerConfig, engine: Engine) -> Result<RunningServer, Error> {
        let rt = runtime()?;
        let server = rt.block_on(Server::bind(config, engine))?;
        let addr = server.local_addr();
        let handle = server.shutdown_handle();
        let thread = std::thread::Builder::new()
            .name("pteron-serve-http".into())
            .spawn(move || rt.block_on(server.run()))
            .map_err(|source| Error::Io {
                what: "starting the server thread",
                source,
            })?;
        Ok(RunningServer {
            addr,
            handle,
            thread: Some(thread),
        })
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pteron-serve-io")
        .build()
        .map_err(|source| Error::Io {
            what: "starting the async runtime",
            source,
        })
}

/// A server running on its own thread ([`Server::spawn`]); dropping it asks it to stop.
pub struct RunningServer {
    addr: SocketAddr,
    handle: ShutdownHandle,
    thread: Option<std::thread::JoinHandle<Result<(), Error>>>,
}

impl RunningServer {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Stops the server (gracefully) and waits for its thread.
    pub fn stop(mut self) -> Result<(), Error> {
        self.handle.shutdown();
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Thread {
                which: "server",
                message: "panicked".into(),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Binds, tells `on_listening` the address, and serves until Ctrl-C (a second Ctrl-C stops at
/// once instead of letting open connections finish).
pub fn serve_until_ctrl_c(
    config: ServerConfig,
    engine: Engine,
    on_listening: impl FnOnce(SocketAddr),
) -> Result<(), Error> {
    let rt = runtime()?;
    rt.block_on(async move {
        let server = Server::bind(config, engine).await?;
        on_listening(server.local_addr());
        let handle = server.shutdown_handle();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                handle.shutdown();
                if tokio::signal::ctrl_c().await.is_ok() {
                    handle.shutdown_now();
                }
            }
        });
        server.run().await
    })
}
