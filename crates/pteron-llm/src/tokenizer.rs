//! Tokenizers: Hugging Face `tokenizer.json` through the `tokenizers` crate (built without
//! Oniguruma and without the C++ suffix-array code: pure Rust), plus the `tokenizer_config.json`
//! beside it (chat template, BOS/EOS token strings; a `chat_template.jinja` beside it supplies the
//! template when the config has none, as transformers 5 saves it).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::{Error, Result};

/// The parts of `tokenizer_config.json` generation uses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenizerConfig {
    pub chat_template: Option<String>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
}

impl TokenizerConfig {
    pub fn from_json(text: &str) -> Result<Self> {
        let v: Json = serde_json::from_str(text)
            .map_err(|e| Error::Tokenizer(format!("tokenizer_config.json: {e}")))?;
        // Special tokens are a string or an AddedToken object {"content": ...}.
        let token = |k: &str| match v.get(k) {
            Some(Json::String(s)) => Some(s.clone()),
            Some(Json::Object(o)) => o.get("content").and_then(|c| c.as_str()).map(String::from),
            _ => None,
        };
        // The template is a string, or a list of {name, template} (take "default").
        let chat_template = match v.get("chat_template") {
            Some(Json::String(s)) => Some(s.clone()),
            Some(Json::Array(list)) => list
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .or_else(|| list.first())
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .map(String::from),
            _ => None,
        };
        Ok(TokenizerConfig {
            chat_template,
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
        })
    }
}

/// Largest `tokenizer.json` read (real ones are up to ~35 MB): checked before reading, as the
/// file is parsed in memory. The `tokenizers` crate itself bounds nothing (vocabulary, merges
/// and added tokens grow with the file).
pub const MAX_TOKENIZER_BYTES: u64 = 512 << 20;

/// Runs `f`, turning a panic into an error. The `tokenizers` crate panics on some malformed
/// `tokenizer.json` files (an `unwrap` of a failed deserialization, an added token missing
/// from a post-processor's map: found by the `tokenizer` fuzz target) instead of returning an
/// error; the file is untrusted input. With `panic = "abort"` such a file aborts the process.
fn guard<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        format!("the tokenizers crate panicked on this tokenizer: {msg}")
    })
}

/// A tokenizer with its configuration.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    pub config: TokenizerConfig,
    pub path: PathBuf,
}

impl Tokenizer {
    /// Loads `tokenizer.json` (or the one in a directory), and the `tokenizer_config.json` next
    /// to it when there is one.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let mut path = path.as_ref().to_path_buf();
        if path.is_dir() {
            path.push("tokenizer.json");
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".model") {
            return Err(Error::Tokenizer(format!(
                "{}: SentencePiece .model files are not supported yet; use the model's \
                 tokenizer.json",
                path.display()
            )));
        }
        let io = |source| Error::Io {
            path: path.display().to_string(),
            source,
        };
        let len = std::fs::metadata(&path).map_err(io)?.len();
        if len > MAX_TOKENIZER_BYTES {
            return Err(Error::Tokenizer(format!(
                "{}: {len} bytes, over the limit of {MAX_TOKENIZER_BYTES}",
                path.display()
            )));
        }
        let bytes = std::fs::read(&path).map_err(io)?;
        let inner = Self::parse_json(&bytes)
            .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?;
        let cfg_path = path.with_file_name("tokenizer_config.json");
        let mut config = match std::fs::read_to_string(&cfg_path) {
            Ok(t) => TokenizerConfig::from_json(&t)?,
            Err(_) => TokenizerConfig::default(),
        };
        // transformers ≥ 4.43 may save the template on its own, as chat_template.jinja.
        if config.chat_template.is_none() {
            if let Ok(t) = std::fs::read_to_string(path.with_file_name("chat_template.jinja")) {
                config.chat_template = Some(t);
            }
        }
        Ok(Tokenizer {
            inner,
            config,
            path,
        })
    }

    /// A tokenizer from the bytes of a `tokenizer.json` (untrusted input, as from a file).
    pub fn from_json_bytes(bytes: &[u8], config: TokenizerConfig) -> Result<Self> {
        Ok(Tokenizer {
            inner: Self::parse_json(bytes).map_err(Error::Tokenizer)?,
            config,
            path: PathBuf::new(),
        })
    }

    fn parse_json(bytes: &[u8]) -> std::result::Result<tokenizers::Tokenizer, String> {
        if bytes.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(format!(
                "{} bytes, over the limit of {MAX_TOKENIZER_BYTES}",
                bytes.len()
            ));
        }
        if !bytes.starts_with(b"{") {
            return Err(
                "not a tokenizer.json (tiktoken and SentencePiece files are not supported yet)"
                    .into(),
            );
        }
        guard(|| tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| e.to_string()))
            .and_then(|r| r)
    }

    /// Token ids of `text`; `add_special` applies the tokenizer's post-processor (e.g. a BOS).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        guard(|| self.inner.encode(text, add_special))
            .map_err(Error::Tokenizer)?
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Text of `ids`; `skip_special` leaves out special tokens (`<|im_end|>`...).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        guard(|| self.inner.decode(ids, skip_special))
            .map_err(Error::Tokenizer)?
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        guard(|| self.inner.token_to_id(token)).ok().flatten()
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        guard(|| self.inner.id_to_token(id)).ok().flatten()
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}
