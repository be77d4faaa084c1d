//! Tokenizers: Hugging Face `tokenizer.json` through the `tokenizers` crate (built without
//! Oniguruma and without the C++ suffix-array code: pure Rust), SentencePiece `.model` files
//! (turned into a `tokenizers` pipeline, [`crate::sentencepiece`]) and tiktoken files (their own
//! byte-pair merge, [`crate::tiktoken`]); the format is told by the content. Plus the
//! `tokenizer_config.json`
//! beside it (chat template, BOS/EOS token strings; a `chat_template.jinja` beside it supplies the
//! template when the config has none, as transformers 5 saves it).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::tiktoken::{self, Tiktoken, TiktokenOptions};
use crate::{sentencepiece, Error, Result};

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

/// The tokenizer proper.
enum Inner {
    Hf(Box<tokenizers::Tokenizer>),
    Tiktoken(Box<Tiktoken>),
}

/// A tokenizer with its configuration.
pub struct Tokenizer {
    inner: Inner,
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
        // A tiktoken file may have a sidecar `<file>.json` with its pattern and special tokens.
        let mut sidecar = path.clone().into_os_string();
        sidecar.push(".json");
        let sidecar = std::fs::read_to_string(&sidecar).ok();
        let inner = Self::parse_any(&bytes, sidecar.as_deref())
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
        Self::with(
            Inner::Hf(Box::new(Self::parse_json(bytes).map_err(Error::Tokenizer)?)),
            config,
        )
    }

    /// A tokenizer from the bytes of a SentencePiece `.model` file.
    pub fn from_sentencepiece_bytes(bytes: &[u8], config: TokenizerConfig) -> Result<Self> {
        Self::with(
            Self::parse_sentencepiece(bytes).map_err(Error::Tokenizer)?,
            config,
        )
    }

    /// A tokenizer from the bytes of a tiktoken file, with its pattern and special tokens.
    pub fn from_tiktoken_bytes(
        bytes: &[u8],
        opts: &TiktokenOptions,
        config: TokenizerConfig,
    ) -> Result<Self> {
        let t = Tiktoken::parse(bytes, opts).map_err(Error::Tokenizer)?;
        Self::with(Inner::Tiktoken(Box::new(t)), config)
    }

    /// A tokenizer from the bytes of any supported file, told apart by content: JSON
    /// (tokenizer.json), a tiktoken file (with Llama 3's pattern and special tokens), or a
    /// SentencePiece protobuf.
    pub fn from_bytes(bytes: &[u8], config: TokenizerConfig) -> Result<Self> {
        Self::with(
            Self::parse_any(bytes, None).map_err(Error::Tokenizer)?,
            config,
        )
    }

    fn with(inner: Inner, config: TokenizerConfig) -> Result<Self> {
        Ok(Tokenizer {
            inner,
            config,
            path: PathBuf::new(),
        })
    }

    fn parse_any(bytes: &[u8], sidecar: Option<&str>) -> std::result::Result<Inner, String> {
        if bytes.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(format!(
                "{} bytes, over the limit of {MAX_TOKENIZER_BYTES}",
                bytes.len()
            ));
        }
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            return Ok(Inner::Hf(Box::new(Self::parse_json(bytes)?)));
        }
        if tiktoken::looks_like(bytes) {
            let n = tiktoken::count_ranks(bytes);
            let opts = match sidecar {
                Some(text) => TiktokenOptions::from_json(text, n)?,
                None => TiktokenOptions::llama3(n),
            };
            return Ok(Inner::Tiktoken(Box::new(Tiktoken::parse(bytes, &opts)?)));
        }
        // A SentencePiece ModelProto starts with its first piece: field 1, length-delimited.
        if bytes.first() == Some(&0x0a) {
            return Self::parse_sentencepiece(bytes);
        }
        Err("not a tokenizer.json, a tiktoken file or a SentencePiece .model".into())
    }

    fn parse_sentencepiece(bytes: &[u8]) -> std::result::Result<Inner, String> {
        let json = sentencepiece::to_tokenizer_json(bytes)
            .map_err(|e| format!("SentencePiece model: {e}"))?;
        let text = serde_json::to_vec(&json).map_err(|e| e.to_string())?;
        let t = Self::parse_json(&text).map_err(|e| format!("SentencePiece model: {e}"))?;
        Ok(Inner::Hf(Box::new(t)))
    }

    fn parse_json(bytes: &[u8]) -> std::result::Result<tokenizers::Tokenizer, String> {
        if bytes.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(format!(
                "{} bytes, over the limit of {MAX_TOKENIZER_BYTES}",
                bytes.len()
            ));
        }
        if !bytes.starts_with(b"{") {
            return Err("not a tokenizer.json".into());
        }
        guard(|| tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| e.to_string()))
            .and_then(|r| r)
    }

    /// Token ids of `text`; `add_special` applies the tokenizer's post-processor (e.g. a BOS;
    /// for SentencePiece its bos_id, for tiktoken the options' BOS).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        match &self.inner {
            Inner::Hf(t) => guard(|| t.encode(text, add_special))
                .map_err(Error::Tokenizer)?
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| Error::Tokenizer(e.to_string())),
            Inner::Tiktoken(t) => t.encode(text, add_special).map_err(Error::Tokenizer),
        }
    }

    /// Text of `ids`; `skip_special` leaves out special tokens (`<|im_end|>`...).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        match &self.inner {
            Inner::Hf(t) => guard(|| t.decode(ids, skip_special))
                .map_err(Error::Tokenizer)?
                .map_err(|e| Error::Tokenizer(e.to_string())),
            Inner::Tiktoken(t) => Ok(t.decode(ids, skip_special)),
        }
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        match &self.inner {
            Inner::Hf(t) => guard(|| t.token_to_id(token)).ok().flatten(),
            Inner::Tiktoken(t) => t.token_to_id(token),
        }
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        match &self.inner {
            Inner::Hf(t) => guard(|| t.id_to_token(id)).ok().flatten(),
            Inner::Tiktoken(t) => t.id_to_token(id),
        }
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        match &self.inner {
            Inner::Hf(t) => t.get_vocab_size(true),
            Inner::Tiktoken(t) => t.vocab_size(),
        }
    }
}
