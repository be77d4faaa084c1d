//! The server's errors: starting the model thread, binding, serving.

use std::path::PathBuf;

/// Errors of starting and running the server (request errors are HTTP responses, not these).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting is out of range.
    #[error("invalid configuration: {field} {reason}")]
    Config { field: &'static str, reason: String },
    /// The tokenizer (or its `tokenizer_config.json`) could not be loaded.
    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// The program could not be opened or loaded as an LLM.
    #[error("model {path}: {message}")]
    Model { path: PathBuf, message: String },
    /// The chat template of the tokenizer configuration does not compile.
    #[error("chat template: {message}")]
    Template { message: String },
    /// A thread of the server (`which`: "model", "server") could not be started, ended before
    /// it was ready, or panicked.
    #[error("the {which} thread {message}")]
    Thread {
        which: &'static str,
        message: String,
    },
    #[error("binding {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// Building the async runtime, or accepting connections, failed.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: std::io::Error,
    },
}
