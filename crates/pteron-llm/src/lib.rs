//! Text generation with ExecuTorch LLM programs on pteron.
//!
//! An LLM `.pte` exported by ExecuTorch's recipe (`export_llm`, `use_kv_cache=True`) has a
//! `forward(tokens: int64[1, n], input_pos: int64[1]) -> logits` method that appends `n` tokens
//! to its KV cache (a mutable buffer kept across calls) and returns the logits of the last
//! token, plus metadata methods (`get_max_seq_len`, `get_max_context_len`, `get_eos_ids`,
//! `enable_dynamic_shape`, ...). This crate drives it:
//!
//! - [`Model`]: reads the metadata, prefills prompts in chunks (as many tokens per call as the
//!   program's `tokens` input can take: one for a static-shape program), then decodes one token
//!   per call. Nothing is allocated per token; the KV cache lives in the method's planned memory
//!   and is read in place by the attention kernel.
//! - [`Tokenizer`]: Hugging Face `tokenizer.json` (the `tokenizers` crate, built without its C
//!   dependencies), SentencePiece `.model` and tiktoken files, and `tokenizer_config.json`
//!   (chat template, special tokens).
//! - [`Sampler`]: greedy, temperature, top-k, top-p, min-p, repetition penalty; seeded.
//! - [`Generator`]: prompt → streamed text (incremental, UTF-8 safe detokenization), stop on EOS
//!   ids or stop strings, statistics (time to first token, prefill and decode tok/s, peak RSS).
//! - [`chat::Chat`]: multi-turn chat with the model's chat template (minijinja), keeping the KV
//!   cache across turns (only the new tokens of each turn are prefilled).
//! - [`Speculation`]: speculative decoding (prompt lookup, or a draft model attached with
//!   [`Generator::set_draft_model`]): drafted tokens are checked by one call of the target
//!   program, which must return every position's logits ([`Model::check_verify`]); the
//!   tokens are those of plain decoding (see the `speculate` module's notes).
//!
//! Context overflow: a prompt that does not fit in `max_context_len` is an error
//! ([`Error::ContextOverflow`]); generation stops when the context is full (finish reason
//! [`FinishReason::ContextFull`]); a chat turn that no longer fits is an error that asks for a
//! reset. There is no sliding window.

mod base64;
pub mod chat;
mod detok;
mod generate;
mod model;
mod sampler;
mod sentencepiece;
mod speculate;
pub mod tiktoken;
mod tokenizer;
mod vision;

pub use detok::{StopMatcher, TextStream};
pub use generate::{FinishReason, GenerateOptions, Generation, Generator, Part, Stats};
pub use model::{LogitRows, Metadata, Model, NOT_A_TOKEN};
pub use pteron_image::Image;
pub use sampler::{Rng, Sampler, SamplerConfig};
pub use speculate::Speculation;
pub use tiktoken::TiktokenOptions;
pub use tokenizer::{Tokenizer, TokenizerConfig};
pub use vision::VisionInput;

/// Errors of text generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Pteron(#[from] pteron::Error),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("{0}")]
    Model(String),
    /// The tokens would not fit in the model's context (`get_max_context_len`).
    #[error(
        "context overflow: {needed} tokens do not fit in the model's context of {context} \
         tokens ({used} already in the KV cache)"
    )]
    ContextOverflow {
        needed: usize,
        used: usize,
        context: usize,
    },
    /// Speculative decoding was asked of a program that cannot check drafted tokens.
    #[error(
        "speculative decoding needs a program that scores several tokens in one call, and this \
         one {reason}; export it with ExecuTorch's LLM recipe options model.use_kv_cache=True, \
         model.enable_dynamic_shape=True and debug.generate_full_logits=True \
         (tools/export/export_spec_llm.py)"
    )]
    CannotVerify { reason: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl From<pteron::MethodError> for Error {
    fn from(e: pteron::MethodError) -> Self {
        Error::Pteron(e.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Peak resident memory of this process in bytes (`VmHWM`; `None` where unknown).
pub fn peak_rss_bytes() -> Option<u64> {
    proc_status_kib("VmHWM:").map(|k| k * 1024)
}

/// Current resident memory of this process in bytes (`VmRSS`; `None` where unknown).
pub fn rss_bytes() -> Option<u64> {
    proc_status_kib("VmRSS:").map(|k| k * 1024)
}

fn proc_status_kib(key: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
