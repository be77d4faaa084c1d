//! `pteron serve`: an OpenAI-compatible HTTP server for an LLM program (crate `pteron-serve`).

use std::path::PathBuf;

use clap::Args;
use pteron_llm::{SamplerConfig, Speculation};
use pteron_serve::{Engine, ModelFiles, ServerConfig, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE};

use crate::generate::SpeculateArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// An LLM program exported by ExecuTorch's LLM recipe (KV cache, metadata methods).
    pub model: PathBuf,
    /// Tokenizer: a Hugging Face tokenizer.json (its tokenizer_config.json, if beside it,
    /// supplies the chat template and special tokens), a SentencePiece .model, or a tiktoken
    /// file.
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// A tokenizer_config.json (chat template, special tokens) instead of the one beside the
    /// tokenizer.
    #[arg(long)]
    pub tokenizer_config: Option<PathBuf>,
    /// Address to listen on (0.0.0.0 or :: exposes the server to the network).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port (0: one the OS picks; the printed address tells which).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every /v1/ request.
    #[arg(long)]
    pub api_key: Option<String>,
    /// The model's id in responses and /v1/models (default: the program's file stem).
    #[arg(long)]
    pub model_name: Option<String>,
    /// Kernel threads (0 = physical cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Requests that may wait while one is generated; more are refused (HTTP 429).
    #[arg(long, default_value_t = DEFAULT_MAX_QUEUE)]
    pub max_queue: usize,
    /// Largest request body in bytes; larger ones are refused (HTTP 413).
    #[arg(long, default_value_t = DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Largest max_tokens a request may ask for, and the most tokens a request without
    /// max_tokens generates (default: the model's context length).
    #[arg(long)]
    pub max_tokens_limit: Option<usize>,
    /// Default temperature for requests that give none (0 = greedy).
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Default nucleus sampling threshold (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Keep the k most likely tokens (0 = off; a request's top_k overrides it).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Drop tokens less likely than this fraction of the most likely one (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Penalize tokens already in the context (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
    #[command(flatten)]
    pub device: crate::device::DeviceArgs,
}

pub fn serve(args: &ServeArgs) -> pteron::Result<()> {
    let err = |e: pteron_serve::Error| pteron::Error::Invalid(e.to_string());
    let config = ServerConfig {
        host: args.host.clone(),
        port: args.port,
        api_key: args.api_key.clone(),
        model_name: args.model_name.clone(),
        max_body_bytes: args.max_body_bytes,
        max_queue: args.max_queue,
        max_tokens_limit: args.max_tokens_limit,
        sampling: SamplerConfig {
            temperature: args.temperature,
            top_k: args.top_k,
            top_p: args.top_p,
            min_p: args.min_p,
            repetition_penalty: args.repetition_penalty,
            seed: 0,
        },
        threads: args.threads,
        speculation: args.speculate.speculation(),
        runtime: Some(crate::device::runtime(&args.device)?.0),
        ..ServerConfig::default()
    };
    let files = ModelFiles {
        model: args.model.clone(),
        tokenizer: args.tokenizer.clone(),
        tokenizer_config: args.tokenizer_config.clone(),
        draft: args.speculate.draft.clone(),
    };
    let t = std::time::Instant::now();
    let engine = Engine::start(&files, &config).map_err(err)?;
    let info = engine.info().clone();
    let name = config
        .model_name
        .clone()
        .unwrap_or_else(|| info.name.clone());
    let speculation = match info.speculation {
        Speculation::Off => String::new(),
        Speculation::PromptLookup { draft_len, .. } => {
            format!(", prompt lookup drafting {draft_len} tokens")
        }
        Speculation::DraftModel { draft_len } => format!(
            ", draft model {} drafting {draft_len} tokens",
            args.speculate.draft.clone().unwrap_or_default().display()
        ),
    };
    eprintln!(
        "pteron serve: {} as {name:?} ({}-token context, {} thread(s){speculation}, loaded in \
         {:.0} ms{})",
        args.model.display(),
        info.context_length,
        info.threads,
        t.elapsed().as_secs_f64() * 1e3,
        if info.has_chat_template {
            ""
        } else {
            "; no chat template: /v1/chat/completions will refuse requests"
        },
    );
    pteron_serve::serve_until_ctrl_c(config, engine, |addr| {
        println!("listening on http://{addr}");
    })
    .map_err(err)?;
    eprintln!("pteron serve: stopped");
    Ok(())
}
