//! The model thread.
//!
//! One OS thread owns the program file, the loaded program, the [`Generator`] and the tokenizer
//! (they borrow each other and stay on that thread). Requests reach it through a bounded queue;
//! a full queue refuses the request at once. Each request carries the sending half of its own
//! event channel (text pieces, then done or failed) and a cancel flag that the receiving
//! half ([`Ticket`]) sets when it is dropped, that is when the HTTP side lets go of the request
//! (its client disconnected): the worker skips a request whose client left while it was
//! queued, and the generator checks the flag after every token.
//!
//! Between requests the KV cache is kept: a new prompt that starts with tokens the cache
//! already holds (the earlier turns of a conversation, a shared system prompt) is prefilled
//! from the end of that common prefix only. The cache rows before it hold what a fresh prefill
//! of those tokens computes, up to floating-point summation order (a row written while
//! decoding, one token per call, may take another kernel path than a chunked prefill), so the
//! answer is a fresh start's (the tests check it token for token on the tiny fixture), as with
//! `pteron_llm::chat`.
//!
//! With [`ServerConfig::speculation`] every generation drafts tokens (prompt lookup, or a draft
//! model that this thread loads from [`ModelFiles::draft`] and owns beside the model; its cache
//! follows the generator's context on its own) and checks them with one call of the model; the
//! answers are plain decoding's. [`EngineStatus`] counts the drafted and accepted tokens.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use pteron_llm::chat::{chat_eos_ids, ChatTemplate, Message};
use pteron_llm::{
    FinishReason, GenerateOptions, Generator, Model, SamplerConfig, Speculation, Tokenizer,
    TokenizerConfig,
};
use tokio::sync::mpsc;

use crate::config::ServerConfig;
use crate::error::Error;

/// The files of a served model.
#[derive(Clone, Debug)]
pub struct ModelFiles {
    /// An LLM program exported by ExecuTorch's LLM recipe (KV cache, metadata methods).
    pub model: PathBuf,
    /// `tokenizer.json`, a SentencePiece `.model` or a tiktoken file (as `pteron generate`).
    pub tokenizer: PathBuf,
    /// A `tokenizer_config.json` (chat template, special tokens) in place of the one beside
    /// the tokenizer.
    pub tokenizer_config: Option<PathBuf>,
    /// A draft model for [`ServerConfig::speculation`] `DraftModel` (same tokenizer).
    pub draft: Option<PathBuf>,
}

/// What the model thread found when it loaded the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// The program's file stem.
    pub name: String,
    /// KV-cache positions: prompt and answer together fit in this many tokens.
    pub context_length: usize,
    pub vocab_size: Option<usize>,
    /// Whether the tokenizer configuration has a chat template (`/v1/chat/completions` needs
    /// one).
    pub has_chat_template: bool,
    /// Kernel threads of the loaded method.
    pub threads: usize,
    /// How generations draft tokens (checked against the model at load).
    pub speculation: Speculation,
}

/// A snapshot of the model thread's queue and counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStatus {
    /// Requests waiting in the queue.
    pub queued: usize,
    /// Whether the model thread holds a request (running it, or waiting to while paused).
    pub busy: bool,
    /// Requests that ran to their end (a finish reason).
    pub completed: u64,
    /// Requests whose client left during generation (stopped after the current token).
    pub cancelled: u64,
    /// Requests whose client left while they were queued (never run).
    pub skipped: u64,
    /// Requests that ended with an error.
    pub failed: u64,
    /// Tokens drafted for speculative decoding, over all requests.
    pub drafted_tokens: u64,
    /// Drafted tokens that the model accepted, over all requests.
    pub accepted_tokens: u64,
}

/// The text a request starts from.
#[derive(Clone, Debug)]
pub(crate) enum Prompt {
    /// Rendered with the chat template (with the generation prompt), tokenized without
    /// special tokens added (the template writes them).
    Chat(Vec<Message>),
    /// Tokenized with the tokenizer's special tokens (BOS), as `pteron generate`.
    Text(String),
}

/// One generation to run.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub prompt: Prompt,
    /// `None`: up to `max_tokens_cap`, or as much as the context holds.
    pub max_tokens: Option<usize>,
    pub max_tokens_cap: usize,
    pub sampler: SamplerConfig,
    pub stop: Vec<String>,
    /// Leave special tokens out of the text.
    pub skip_special: bool,
}

/// How the model thread reports on a request: text pieces, then `Done` or `Failed` (a
/// request refused before generation, for its prompt or a failing prefill, gets `Failed`
/// first).
#[derive(Debug)]
pub(crate) enum Event {
    /// Text the answer continues with (valid UTF-8, never inside a stop string).
    Text(String),
    Done(Done),
    Failed(JobError),
}

/// The end of a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    pub finish: FinishReason,
    pub prompt_tokens: usize,
    /// Sampled tokens, including a final end-of-sequence token.
    pub completion_tokens: usize,
    /// Prompt tokens the KV cache already held (not prefilled again).
    pub cached_tokens: usize,
}

/// Why a request could not be (fully) answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobError {
    #[error(
        "this model's maximum context length is {context} tokens; the prompt has \
         {prompt_tokens} tokens{}",
        match max_tokens {
            Some(m) => format!(" and max_tokens asks for {m} more"),
            None if prompt_tokens == context => ", which leaves no room for an answer".into(),
            None => String::new(),
        }
    )]
    ContextLength {
        prompt_tokens: usize,
        max_tokens: Option<usize>,
        context: usize,
    },
    #[error("the prompt is empty (no tokens)")]
    EmptyPrompt,
    #[error("this model has no chat template (tokenizer_config.json chat_template); use /v1/completions")]
    NoChatTemplate,
    /// Rendering failed (a template may refuse a conversation: `raise_exception`).
    #[error("chat template: {0}")]
    Template(String),
    #[error("generation failed: {0}")]
    Generate(String),
    #[error("the model thread panicked: {0}")]
    Panicked(String),
}

/// A queued request: what to run, where to report, and whether its client is gone.
struct Job {
    request: Request,
    events: mpsc::UnboundedSender<Event>,
    cancel: Arc<AtomicBool>,
}

impl Job {
    fn abandoned(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.events.is_closed()
    }
}

/// The receiving end of a submitted request; dropping it cancels the request.
pub(crate) struct Ticket {
    pub events: mpsc::UnboundedReceiver<Event>,
    cancel: Arc<AtomicBool>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// Why a request was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SubmitError {
    #[error("the server is busy: {max_queue} requests are already waiting; retry later")]
    QueueFull { max_queue: usize },
    #[error("the model thread has stopped")]
    Stopped,
}

/// State shared by the handles and the model thread.
#[derive(Default)]
struct Shared {
    paused: Mutex<bool>,
    resumed: Condvar,
    busy: AtomicBool,
    completed: AtomicU64,
    cancelled: AtomicU64,
    skipped: AtomicU64,
    failed: AtomicU64,
    drafted: AtomicU64,
    accepted: AtomicU64,
}

impl Shared {
    fn paused(&self) -> MutexGuard<'_, bool> {
        // The flag is a plain bool: a panic while it was held leaves it valid.
        self.paused.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle to the model thread (cheap to clone). The thread ends when every handle is gone
/// and its current request is done.
#[derive(Clone)]
pub struct Engine {
    jobs: mpsc::Sender<Job>,
    max_queue: usize,
    info: Arc<ModelInfo>,
    shared: Arc<Shared>,
}

/// Holds the model thread before its next request until dropped ([`Engine::pause`]).
pub struct Paused {
    shared: Arc<Shared>,
}

impl Drop for Paused {
    fn drop(&mut self) {
        *self.shared.paused() = false;
        self.shared.resumed.notify_all();
    }
}

impl Engine {
    /// Starts the model thread, loads the model on it, and returns once it is ready (or with
    /// the error that stopped it). Uses `config.threads`, `config.max_queue` and
    /// `config.speculation`.
    pub fn start(files: &ModelFiles, config: &ServerConfig) -> Result<Engine, Error> {
        config.validate()?;
        let is_draft = matches!(config.speculation, Speculation::DraftModel { .. });
        if is_draft != files.draft.is_some() {
            return Err(Error::Config {
                field: "speculation",
                reason: if is_draft {
                    "a draft model is asked for but ModelFiles::draft is not set".into()
                } else {
                    "ModelFiles::draft is set but speculation is not DraftModel".into()
                },
            });
        }
        let (jobs, queue) = mpsc::channel(config.max_queue);
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let shared = Arc::new(Shared::default());
        let worker_shared = shared.clone();
        let files_owned = files.clone();
        let setup = Setup {
            threads: config.threads,
            speculation: config.speculation,
            runtime: config.runtime.clone(),
        };
        std::thread::Builder::new()
            .name("pteron-serve-model".into())
            .spawn(move || model_thread(&files_owned, setup, queue, ready_tx, &worker_shared))
            .map_err(|e| Error::Thread {
                which: "model",
                message: format!("could not be started: {e}"),
            })?;
        let info = ready_rx.recv().map_err(|_| Error::Thread {
            which: "model",
            message: "ended while loading the model".into(),
        })??;
        Ok(Engine {
            jobs,
            max_queue: config.max_queue,
            info: Arc::new(info),
            shared,
        })
    }

    /// What the model thread loaded.
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The queue and the counters, now.
    pub fn status(&self) -> EngineStatus {
        let s = &self.shared;
        EngineStatus {
            queued: self.max_queue.saturating_sub(self.jobs.capacity()),
            busy: s.busy.load(Ordering::SeqCst),
            completed: s.completed.load(Ordering::SeqCst),
            cancelled: s.cancelled.load(Ordering::SeqCst),
            skipped: s.skipped.load(Ordering::SeqCst),
            failed: s.failed.load(Ordering::SeqCst),
            drafted_tokens: s.drafted.load(Ordering::SeqCst),
            accepted_tokens: s.accepted.load(Ordering::SeqCst),
        }
    }

    /// Holds the model thread before it runs its next request until the guard is dropped;
    /// requests queue up meanwhile (and are refused once the queue is full). The thread may
    /// take one request off the queue and hold it (`EngineStatus::busy`). For maintenance and
    /// for tests of the queue.
    pub fn pause(&self) -> Paused {
        *self.shared.paused() = true;
        Paused {
            shared: self.shared.clone(),
        }
    }

    /// Queues a request, or refuses it at once when the queue is full.
    pub(crate) fn submit(&self, request: Request) -> Result<Ticket, SubmitError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let job = Job {
            request,
            events: tx,
            cancel: cancel.clone(),
        };
        match self.jobs.try_send(job) {
            Ok(()) => Ok(Ticket { events: rx, cancel }),
            Err(mpsc::error::TrySendError::Full(_)) => Err(SubmitError::QueueFull {
                max_queue: self.max_queue,
            }),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SubmitError::Stopped),
        }
    }
}

/// What the model thread takes from the server's settings.
#[derive(Clone)]
struct Setup {
    threads: usize,
    speculation: Speculation,
    runtime: Option<pteron::Runtime>,
}

/// The model thread: loads, reports ready, then serves the queue until every sender is gone.
fn model_thread(
    files: &ModelFiles,
    setup: Setup,
    mut queue: mpsc::Receiver<Job>,
    ready: std::sync::mpsc::SyncSender<Result<ModelInfo, Error>>,
    shared: &Shared,
) {
    let tokenizer = match load_tokenizer(files) {
        Ok(t) => t,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let model_err = |message: String| Error::Model {
        path: files.model.clone(),
        message,
    };
    let file = match pteron::ProgramFile::open(&files.model) {
        Ok(f) => f,
        Err(e) => {
            let _ = ready.send(Err(model_err(e.to_string())));
            return;
        }
    };
    let draft_err = |message: String| Error::Model {
        path: files.draft.clone().unwrap_or_default(),
        message,
    };
    let draft_file = match files
        .draft
        .as_ref()
        .map(pteron::ProgramFile::open)
        .transpose()
    {
        Ok(f) => f,
        Err(e) => {
            let _ = ready.send(Err(draft_err(e.to_string())));
            return;
        }
    };
    let runtime = setup.runtime.clone().unwrap_or_default();
    let program = match runtime.load_program(&file) {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(model_err(e.to_string())));
            return;
        }
    };
    let options = || pteron::MethodOptions::new().threads(setup.threads);
    let draft = match draft_file.as_ref().map(|f| {
        let program = runtime.load_program(f)?;
        Model::load(&program, options())
    }) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => {
            let _ = ready.send(Err(draft_err(e.to_string())));
            return;
        }
    };
    let model = match Model::load(&program, options()) {
        Ok(m) => m,
        Err(e) => {
            let _ = ready.send(Err(model_err(e.to_string())));
            return;
        }
    };
    let template = match tokenizer
        .config
        .chat_template
        .as_deref()
        .map(ChatTemplate::new)
    {
        None => None,
        Some(Ok(t)) => Some(t),
        Some(Err(e)) => {
            let _ = ready.send(Err(Error::Template {
                message: e.to_string(),
            }));
            return;
        }
    };
    let info = ModelInfo {
        name: files
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
        context_length: model.meta.max_context_len,
        vocab_size: model.meta.vocab_size,
        has_chat_template: template.is_some(),
        threads: model.method().num_threads(),
        speculation: setup.speculation,
    };
    let mut generator = Generator::new(model, &tokenizer);
    if let Some(draft) = draft {
        if let Err(e) = generator.set_draft_model(draft) {
            let _ = ready.send(Err(draft_err(e.to_string())));
            return;
        }
    }
    if let Err(e) = generator.check_speculation(&setup.speculation) {
        let _ = ready.send(Err(model_err(e.to_string())));
        return;
    }
    let mut worker = Worker {
        chat_eos: chat_eos_ids(&generator),
        text_eos: generator.default_eos_ids(),
        generator,
        template,
        speculation: setup.speculation,
        shared,
    };
    if ready.send(Ok(info)).is_err() {
        return;
    }
    drop(ready);
    while let Some(job) = queue.blocking_recv() {
        shared.busy.store(true, Ordering::SeqCst);
        {
            let mut paused = shared.paused();
            while *paused {
                paused = shared
                    .resumed
                    .wait(paused)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        worker.run(job);
        shared.busy.store(false, Ordering::SeqCst);
    }
}

fn load_tokenizer(files: &ModelFiles) -> Result<Tokenizer, Error> {
    let err = |path: &Path, message: String| Error::Tokenizer {
        path: path.to_path_buf(),
        message,
    };
    let mut tokenizer =
        Tokenizer::from_file(&files.tokenizer).map_err(|e| err(&files.tokenizer, e.to_string()))?;
    if let Some(path) = &files.tokenizer_config {
        let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
        tokenizer.config =
            TokenizerConfig::from_json(&text).map_err(|e| err(path, e.to_string()))?;
    }
    Ok(tokenizer)
}

/// The generator and what every request needs, on the model thread.
struct Worker<'a, 't, 's> {
    generator: Generator<'a, 't>,
    template: Option<ChatTemplate>,
    /// End-of-turn tokens for chat: the program's EOS ids and the tokenizer's `eos_token`.
    chat_eos: Vec<u32>,
    /// EOS ids for plain completions: the program's, else the tokenizer's.
    text_eos: Vec<u32>,
    speculation: Speculation,
    shared: &'s Shared,
}

impl Worker<'_, '_, '_> {
    fn run(&mut self, job: Job) {
        let count = |c: &AtomicU64| {
            c.fetch_add(1, Ordering::SeqCst);
        };
        if job.abandoned() {
            count(&self.shared.skipped);
            return;
        }
        let result = catch_unwind(AssertUnwindSafe(|| self.generate(&job)));
        let event = match result {
            Ok(Ok(done)) if done.finish == FinishReason::Cancelled => {
                count(&self.shared.cancelled);
                return;
            }
            Ok(Ok(done)) => {
                count(&self.shared.completed);
                Event::Done(done)
            }
            Ok(Err(e)) => {
                count(&self.shared.failed);
                Event::Failed(e)
            }
            Err(panic) => {
                // Whatever the cache holds now is not to be trusted.
                self.generator.rewind(0);
                count(&self.shared.failed);
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Event::Failed(JobError::Panicked(msg))
            }
        };
        let _ = job.events.send(event);
    }

    fn generate(&mut self, job: &Job) -> Result<Done, JobError> {
        let req = &job.request;
        let tokenizer = self.generator.tokenizer;
        let (ids, eos) = match &req.prompt {
            Prompt::Chat(messages) => {
                let template = self.template.as_ref().ok_or(JobError::NoChatTemplate)?;
                let cfg = &tokenizer.config;
                let text = template
                    .render(
                        messages,
                        true,
                        cfg.bos_token.as_deref(),
                        cfg.eos_token.as_deref(),
                    )
                    .map_err(|e| match e {
                        pteron_llm::Error::Template(m) => JobError::Template(m),
                        e => JobError::Template(e.to_string()),
                    })?;
                let ids = tokenizer
                    .encode(&text, false)
                    .map_err(|e| JobError::Generate(e.to_string()))?;
                (ids, self.chat_eos.clone())
            }
            Prompt::Text(text) => {
                let ids = tokenizer
                    .encode(text, true)
                    .map_err(|e| JobError::Generate(e.to_string()))?;
                (ids, self.text_eos.clone())
            }
        };
        let n = ids.len();
        if n == 0 {
            return Err(JobError::EmptyPrompt);
        }
        let context = self.generator.model.meta.max_context_len;
        let too_long = JobError::ContextLength {
            prompt_tokens: n,
            max_tokens: req.max_tokens,
            context,
        };
        let max_new_tokens = match req.max_tokens {
            Some(m) if n.checked_add(m).is_none_or(|t| t > context) => return Err(too_long),
            Some(m) => m,
            None if n >= context => return Err(too_long),
            None => (context - n).min(req.max_tokens_cap),
        };
        // Keep the cached tokens this prompt starts with; at least one token is prefilled (its
        // logits start the answer).
        let cached = self.generator.context();
        let common = cached
            .iter()
            .zip(&ids)
            .take_while(|(a, b)| a == b)
            .count()
            .min(n - 1);
        // A recurrent model keeps nothing of a shorter prefix: it starts again from 0.
        let common = self.generator.rewind(common);
        let opts = GenerateOptions {
            max_new_tokens,
            sampler: req.sampler.clone(),
            stop_strings: req.stop.clone(),
            eos_ids: Some(eos),
            skip_special: req.skip_special,
            cancel: Some(job.cancel.clone()),
            speculation: self.speculation,
        };
        let events = &job.events;
        let cancel = &job.cancel;
        let generation = self
            .generator
            .generate(&ids[common..], &opts, &mut |piece| {
                if events.send(Event::Text(piece.to_string())).is_err() {
                    cancel.store(true, Ordering::Relaxed);
                }
            });
        let generation = match generation {
            Ok(g) => g,
            Err(e) => {
                self.generator.rewind(0);
                return Err(JobError::Generate(e.to_string()));
            }
        };
        let s = &generation.stats;
        let add = |c: &AtomicU64, n: usize| c.fetch_add(n as u64, Ordering::SeqCst);
        add(&self.shared.drafted, s.drafted_tokens);
        add(&self.shared.accepted, s.accepted_tokens);
        Ok(Done {
            finish: generation.finish,
            prompt_tokens: n,
            completion_tokens: generation.tokens.len(),
            cached_tokens: common,
        })
    }
}
