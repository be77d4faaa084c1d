//! The model: an LLM program's `forward` method, its metadata, and the KV-cache position.

use std::collections::BTreeMap;

use pteron::{Dynamism, Method, Output, ScalarType, ValueSpec as Value};
use pteron::{MethodOptions, Program};

use crate::vision::{Vision, VisionInput};
use crate::{Error, Result};

/// What the program's metadata methods say (ExecuTorch's `llm_runner_helper` names), with
/// ExecuTorch's runner defaults where a method is missing.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    pub bos_id: Option<u32>,
    pub eos_ids: Vec<u32>,
    /// Most tokens one `forward` call may take (`get_max_seq_len`).
    pub max_seq_len: usize,
    /// KV-cache positions (`get_max_context_len`; `max_seq_len` when absent).
    pub max_context_len: usize,
    pub vocab_size: Option<usize>,
    pub use_kv_cache: bool,
    pub enable_dynamic_shape: bool,
    pub n_layers: Option<usize>,
    /// Every metadata method's values, by name.
    pub all: BTreeMap<String, Vec<i64>>,
}

impl Metadata {
    /// Runs every method that takes no input and returns scalars.
    pub fn read(program: &Program<'_>) -> Result<Self> {
        let mut all = BTreeMap::new();
        for name in program.method_names() {
            // Only methods without inputs are metadata; the others are not loaded here.
            if program
                .method_meta(name)
                .map_or(true, |m| !m.inputs.is_empty())
            {
                continue;
            }
            let mut m = program.load_method_with(name, MethodOptions::new().threads(1))?;
            m.execute()?;
            let mut vals = Vec::new();
            for i in 0..m.num_outputs() {
                match m.output(i)? {
                    Output::Int(v) => vals.push(v),
                    Output::Bool(b) => vals.push(b as i64),
                    _ => {}
                }
            }
            all.insert(name.to_string(), vals);
        }
        let one = |k: &str| all.get(k).and_then(|v| v.first().copied());
        let max_seq_len = one("get_max_seq_len").ok_or_else(|| {
            Error::Model("the program has no get_max_seq_len metadata method".into())
        })?;
        let max_seq_len = usize::try_from(max_seq_len)
            .ok()
            .filter(|&v| v > 0)
            .ok_or_else(|| Error::Model(format!("get_max_seq_len is {max_seq_len}")))?;
        let max_context_len = match one("get_max_context_len") {
            Some(v) => usize::try_from(v)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::Model(format!("get_max_context_len is {v}")))?,
            None => max_seq_len,
        };
        let id = |what: &str, v: i64| {
            u32::try_from(v).map_err(|_| Error::Model(format!("{what} is {v}, not a token id")))
        };
        let bos_id = one("get_bos_id").map(|v| id("get_bos_id", v)).transpose()?;
        let eos_ids = all
            .get("get_eos_ids")
            .map(|v| {
                v.iter()
                    .map(|&x| id("get_eos_ids", x))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?
            .unwrap_or_default();
        let meta = Metadata {
            bos_id,
            eos_ids,
            max_seq_len,
            max_context_len,
            vocab_size: one("get_vocab_size").and_then(|v| usize::try_from(v).ok()),
            use_kv_cache: one("use_kv_cache").is_none_or(|v| v != 0),
            enable_dynamic_shape: one("enable_dynamic_shape").is_some_and(|v| v != 0),
            n_layers: one("get_n_layers").and_then(|v| usize::try_from(v).ok()),
            all,
        };
        meta.check()?;
        Ok(meta)
    }

    /// Refuses metadata that contradicts itself: a call that may take more tokens than the
    /// cache holds, BOS or EOS ids outside the vocabulary, a negative vocabulary size.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Model(format!("inconsistent metadata: {m}")));
        if self.max_seq_len > self.max_context_len {
            return bad(format!(
                "get_max_seq_len {} exceeds get_max_context_len {}",
                self.max_seq_len, self.max_context_len
            ));
        }
        if let Some(v) = self.all.get("get_vocab_size").and_then(|v| v.first()) {
            if *v <= 0 {
                return bad(format!("get_vocab_size is {v}"));
            }
        }
        if let Some(vocab) = self.vocab_size {
            let ids = self.bos_id.iter().chain(&self.eos_ids);
            if let Some(id) = ids.copied().find(|&id| id as usize >= vocab) {
                return bad(format!(
                    "token id {id} (get_bos_id / get_eos_ids) outside the {vocab}-token vocabulary"
                ));
            }
        }
        Ok(())
    }
}

/// Marks a context position filled by something other than a token (an image's embeddings).
pub const NOT_A_TOKEN: u32 = u32::MAX;

/// How the program takes its tokens.
enum Layout<'a> {
    /// `forward(tokens, input_pos)`: ExecuTorch's text LLM recipe.
    Tokens,
    /// `token_embedding(tokens) -> [1, n, dim]`, then `text_decoder(embeddings, input_pos)`:
    /// ExecuTorch's multimodal recipes (LLaVA), whose `vision_encoder` (when there is one)
    /// writes embeddings of the same width.
    Embeddings {
        embed: Method<'a>,
        dim: usize,
        dtype: ScalarType,
        vision: Option<Vision<'a>>,
    },
}

/// An LLM program's decoder method (`forward`, or `text_decoder` with its `token_embedding`
/// and `vision_encoder` methods) with its KV-cache position.
pub struct Model<'a> {
    /// `forward`, or `text_decoder`.
    method: Method<'a>,
    layout: Layout<'a>,
    pub meta: Metadata,
    /// Tokens one call takes at most (1 for a static-shape program).
    chunk: usize,
    /// Image embeddings one call of the text decoder takes at most.
    image_chunk: usize,
    /// Positions filled in the KV cache.
    pos: usize,
    /// Whether `forward` returns every position's logits (`[1, n, vocab]`, exported with
    /// `generate_full_logits=True`) or the last one's only; `None` until the output shows it.
    full_logits: Option<bool>,
    tokens: Vec<i64>,
    logits: Vec<f32>,
    /// Rows of the last `forward_all` (`rows × vocab`).
    rows: Vec<f32>,
    vocab: usize,
    /// For a program with recurrent state (a hybrid model's convolution or linear-attention
    /// layers write their state back with `copy_`), the tensors it keeps across calls besides
    /// its KV caches: the state cannot be rewound to an earlier position, only cleared. Empty
    /// for attention-only programs, whose KV cache a rewind simply stops reading past the
    /// position.
    state: Vec<usize>,
}

/// The logits of every token of a [`Model::forward_all`] call, one row per token.
#[derive(Clone, Copy, Debug)]
pub struct LogitRows<'m> {
    data: &'m [f32],
    vocab: usize,
}

impl<'m> LogitRows<'m> {
    /// Number of rows (tokens).
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.vocab).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The logits after token `i` (the distribution of the token at position `i + 1`).
    pub fn row(&self, i: usize) -> &'m [f32] {
        &self.data[i * self.vocab..(i + 1) * self.vocab]
    }
    pub fn vocab(&self) -> usize {
        self.vocab
    }
}

impl<'a> Model<'a> {
    /// Loads the decoder and reads the metadata: `forward(tokens, input_pos)`, or, for a
    /// multimodal program, `text_decoder(embeddings, input_pos)` with `token_embedding` and
    /// (when present) `vision_encoder`.
    pub fn load(program: &Program<'a>, options: MethodOptions) -> Result<Self> {
        let meta = Metadata::read(program)?;
        if !meta.use_kv_cache {
            return Err(Error::Model(
                "programs exported without a KV cache (use_kv_cache=False) are not supported"
                    .into(),
            ));
        }
        let names = program.method_names();
        let multimodal = names.contains(&"text_decoder") && names.contains(&"token_embedding");
        let name = if multimodal {
            "text_decoder"
        } else {
            "forward"
        };
        let method = program.load_method_with(name, options.clone())?;
        if method.num_inputs() != 2 {
            return Err(Error::Model(format!(
                "{name} takes {} inputs; expected ({}, input_pos)",
                method.num_inputs(),
                if multimodal { "embeddings" } else { "tokens" }
            )));
        }
        let spec = |i: usize| match method.input_spec(i) {
            Some(Value::Tensor(t)) => Ok(*t),
            _ => Err(Error::Model(format!("{name} input {i} is not a tensor"))),
        };
        let (tok, pos) = (spec(0)?, spec(1)?);
        if pos.info.dtype() != ScalarType::Long || pos.info.sizes() != [1] {
            return Err(Error::Model(format!(
                "{name} takes input_pos {} {:?}; expected int64 [1]",
                pos.info.dtype(),
                pos.info.sizes()
            )));
        }
        let layout = if multimodal {
            let (dtype, sizes) = (tok.info.dtype(), tok.info.sizes());
            let dim = match sizes {
                [1, _, d] if *d > 0 && matches!(dtype, ScalarType::Float) => *d,
                _ => {
                    let what = format!("{dtype} {sizes:?}");
                    return Err(Error::Model(format!(
                        "text_decoder takes embeddings {what}; expected float [1, n, dim]"
                    )));
                }
            };
            let embed = program.load_method_with("token_embedding", options.clone())?;
            let vision = if names.contains(&"vision_encoder") {
                let m = program.load_method_with("vision_encoder", options)?;
                Some(Vision::new(m, dim)?)
            } else {
                None
            };
            Layout::Embeddings {
                embed,
                dim,
                dtype,
                vision,
            }
        } else {
            if tok.info.dtype() != ScalarType::Long || tok.info.rank() != 2 || tok.info.size(0) != 1
            {
                return Err(Error::Model(format!(
                    "forward takes tokens {} {:?}; expected int64 [1, n]",
                    tok.info.dtype(),
                    tok.info.sizes()
                )));
            }
            Layout::Tokens
        };
        // The exporter bounds the tokens input at max_seq_len - 1 for dynamic shapes
        // (ExecuTorch's runner chunks by max_seq_len and would be refused): take the bound.
        // ExecuTorch's multimodal runner prefills each input in one call whatever
        // `enable_dynamic_shape` says (LLaVA's export has no such method): a bounded input
        // takes up to its bound there.
        let bound = tok.info.size(1);
        let chunk = match tok.dynamism {
            Dynamism::Bounded if meta.enable_dynamic_shape || multimodal => {
                bound.min(meta.max_seq_len)
            }
            _ if bound == 1 => 1,
            _ => {
                return Err(Error::Model(format!(
                    "a static-shape forward must take one token per call, this one takes {bound}"
                )))
            }
        }
        .max(1);
        // Text goes through token_embedding, whose tokens input has its own bound (LLaVA's
        // recipe bounds it at the example prompt's length): text calls take the smaller.
        let image_chunk = chunk;
        let chunk = match &layout {
            Layout::Embeddings { embed, .. } => match embed.input_spec(0) {
                Some(Value::Tensor(t))
                    if t.info.dtype() == ScalarType::Long && t.info.rank() == 2 =>
                {
                    chunk.min(t.info.size(1)).max(1)
                }
                _ => {
                    return Err(Error::Model(
                        "token_embedding does not take int64 tokens [1, n]".into(),
                    ))
                }
            },
            Layout::Tokens => chunk,
        };
        let vocab = meta.vocab_size.unwrap_or(0);
        if let (Ok(Output::Tensor(t)), Some(v)) = (method.output(0), meta.vocab_size) {
            let width = t.info.sizes().last().copied();
            if width.is_some_and(|w| w != v) {
                return Err(Error::Model(format!(
                    "inconsistent metadata: get_vocab_size is {v}, forward's logits {:?}",
                    t.info.sizes()
                )));
            }
        }
        // The declared logits: `[1, n, vocab]` (n bounded like the tokens input) when every
        // position's come back, `[1, vocab]` for the last one's. Where the planned output
        // cannot be read before a call, the first call's output tells.
        let full_logits = match method.output(0) {
            Ok(Output::Tensor(t)) => match t.info.sizes() {
                [1, n, _] if *n == bound && bound > 1 => Some(true),
                [1, _] => Some(false),
                _ => None,
            },
            _ => None,
        };
        // The recurrent state: what the method keeps from call to call besides its KV caches
        // (a rewind needs no clearing of those: rows past the position are never read).
        // ExecuTorch's LLM exports carry no initial values for their buffers (zeros at load):
        // clearing the state returns it to what a fresh load holds.
        let caches = method.cache_tensors();
        let state: Vec<usize> = method
            .persistent_tensors()
            .into_iter()
            .filter(|v| !caches.contains(v))
            .collect();
        Ok(Model {
            state,
            method,
            layout,
            chunk,
            image_chunk,
            pos: 0,
            full_logits,
            tokens: Vec::with_capacity(chunk),
            logits: Vec::with_capacity(vocab),
            rows: Vec::new(),
            vocab,
            meta,
        })
    }

    /// Whether `forward` returns every position's logits (`Some(true)`), the last one's only
    /// (`Some(false)`), or not known before the first call with several tokens (`None`).
    pub fn full_logits(&self) -> Option<bool> {
        self.full_logits
    }

    /// Whether this program can check several drafted tokens in one call (speculative
    /// decoding): a tokens input of dynamic length and logits for every position. The error
    /// says which export settings are missing. A program whose logits are not known yet
    /// ([`Model::full_logits`] is `None`) passes; its first [`Model::forward_all`] tells.
    pub fn check_verify(&self) -> Result<()> {
        if self.is_recurrent() {
            return Err(Error::CannotVerify {
                reason: "keeps a recurrent state (convolution or linear-attention layers) that \
                         a rejected draft cannot be taken back from",
            });
        }
        if self.chunk < 2 {
            return Err(Error::CannotVerify {
                reason: "takes one token per call (a static-shape tokens input)",
            });
        }
        if self.full_logits == Some(false) {
            return Err(Error::CannotVerify {
                reason: "returns the last position's logits only",
            });
        }
        Ok(())
    }

    /// Positions filled in the KV cache.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Tokens one `forward` call takes at most.
    pub fn chunk_len(&self) -> usize {
        self.chunk
    }

    /// Context positions left.
    pub fn remaining(&self) -> usize {
        self.meta.max_context_len - self.pos
    }

    /// Whether the program keeps a recurrent state (a hybrid model: LFM2's convolutions, Qwen
    /// 3.5's gated DeltaNet) besides its KV cache; such a model rewinds only to the start.
    pub fn is_recurrent(&self) -> bool {
        !self.state.is_empty()
    }

    /// Moves the cache position back to `pos` (≤ the current one) and returns the position
    /// kept. With a KV cache only, later tokens overwrite the cache rows from there; attention
    /// never reads rows past the position, so this forgets everything after `pos` (used to
    /// reset, and by chat when a turn re-tokenizes history). A recurrent state has no earlier
    /// positions to return to: rewinding a recurrent model anywhere before its position clears
    /// the state and returns 0, and the caller feeds the context again from the start.
    pub fn rewind(&mut self, pos: usize) -> usize {
        if pos >= self.pos {
            return self.pos;
        }
        if self.is_recurrent() {
            for &v in &self.state {
                if let Ok(bytes) = self.method.state_mut(v) {
                    bytes.fill(0);
                }
            }
            self.pos = 0;
        } else {
            self.pos = pos;
        }
        self.pos
    }

    /// Appends `tokens` to the context (in chunks) and returns the logits after the last one.
    pub fn forward(&mut self, tokens: &[u32]) -> Result<&[f32]> {
        self.check_room(tokens)?;
        let mut fed = 0;
        for part in tokens.chunks(self.chunk) {
            self.run(part)?;
            fed = part.len();
        }
        self.read_logits(fed, false)?;
        Ok(&self.logits)
    }

    /// Appends `tokens` to the context (in chunks of [`Model::chunk_len`]) and returns the
    /// logits after each of them, one row per token: what checking drafted tokens needs. The
    /// program must return every position's logits ([`Model::check_verify`]).
    pub fn forward_all(&mut self, tokens: &[u32]) -> Result<LogitRows<'_>> {
        self.check_verify()?;
        self.check_room(tokens)?;
        self.rows.clear();
        for part in tokens.chunks(self.chunk) {
            self.run(part)?;
            self.read_logits(part.len(), true)?;
        }
        Ok(self.last_rows())
    }

    /// The rows of the last [`Model::forward_all`].
    pub fn last_rows(&self) -> LogitRows<'_> {
        LogitRows {
            data: &self.rows,
            vocab: self.vocab.max(1),
        }
    }

    fn check_room(&self, tokens: &[u32]) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::Model("forward: no tokens".into()));
        }
        if tokens.len() > self.remaining() {
            return Err(Error::ContextOverflow {
                needed: tokens.len(),
                used: self.pos,
                context: self.meta.max_context_len,
            });
        }
        Ok(())
    }

    /// One call of the decoder: `part` (at most `chunk` tokens) at the current position.
    fn run(&mut self, part: &[u32]) -> Result<()> {
        self.tokens.clear();
        self.tokens.extend(part.iter().map(|&t| t as i64));
        let n = part.len();
        let tokens: &[u8] = bytemuck::cast_slice(&self.tokens);
        match &mut self.layout {
            Layout::Tokens => {
                self.method
                    .set_input_tensor(0, ScalarType::Long, &[1, n], tokens)?;
            }
            Layout::Embeddings {
                embed, dim, dtype, ..
            } => {
                embed.set_input_tensor(0, ScalarType::Long, &[1, n], tokens)?;
                embed.execute()?;
                let rows = embedding_rows(embed, "token_embedding", 0, n, *dim, *dtype)?;
                self.method
                    .set_input_tensor(0, *dtype, &[1, n, *dim], rows)?;
            }
        }
        call(&mut self.method, &mut self.pos, n)
    }

    /// The image input of the program's vision encoder (`None` without one).
    pub fn vision_input(&self) -> Option<VisionInput> {
        match &self.layout {
            Layout::Embeddings {
                vision: Some(v), ..
            } => Some(v.input),
            _ => None,
        }
    }

    /// Encodes `image` with the program's `vision_encoder` (resized as its input asks:
    /// [`VisionInput::size_for`]) and appends its embeddings to the context, in calls of at
    /// most the decoder's bound of positions (one call when they fit, as ExecuTorch's
    /// `MultimodalRunner` does). Returns the number of positions the image takes; the logits
    /// after it are [`Model::logits`].
    pub fn forward_image(&mut self, image: &pteron_image::Image) -> Result<usize> {
        let Layout::Embeddings {
            vision: Some(vision),
            dim,
            dtype,
            ..
        } = &mut self.layout
        else {
            return Err(Error::Model(
                "the program has no vision_encoder method: it takes no images".into(),
            ));
        };
        vision.encode(image)?;
        let rows = match vision.method.output(0)? {
            Output::Tensor(t) => match t.info.sizes() {
                [1, m, d] if *d == *dim => *m,
                s => {
                    return Err(Error::Model(format!(
                        "vision_encoder returned {s:?}; expected [1, m, {dim}]"
                    )))
                }
            },
            _ => {
                return Err(Error::Model(
                    "vision_encoder's output is not a tensor".into(),
                ))
            }
        };
        if rows == 0 {
            return Err(Error::Model("vision_encoder returned no embeddings".into()));
        }
        if rows > self.meta.max_context_len - self.pos {
            return Err(Error::ContextOverflow {
                needed: rows,
                used: self.pos,
                context: self.meta.max_context_len,
            });
        }
        let mut fed = 0;
        let mut last = 0;
        while fed < rows {
            let n = (rows - fed).min(self.image_chunk);
            let part = embedding_rows(&vision.method, "vision_encoder", fed, n, *dim, *dtype)?;
            self.method
                .set_input_tensor(0, *dtype, &[1, n, *dim], part)?;
            call(&mut self.method, &mut self.pos, n)?;
            fed += n;
            last = n;
        }
        self.read_logits(last, false)?;
        Ok(rows)
    }

    /// Reads the output of a call of `fed` tokens: the last row into `logits`, and with
    /// `all` every row appended to `rows`. Learns from the number of rows whether the program
    /// returns every position's logits.
    fn read_logits(&mut self, fed: usize, all: bool) -> Result<()> {
        let Output::Tensor(t) = self.method.output(0)? else {
            return Err(Error::Model(
                "forward's first output is not a tensor".into(),
            ));
        };
        let vocab = *t
            .info
            .sizes()
            .last()
            .ok_or_else(|| Error::Model("0-d logits".into()))?;
        let n = t.info.numel();
        if vocab == 0 || n < vocab || n % vocab != 0 {
            return Err(Error::Model(format!(
                "logits of shape {:?}",
                t.info.sizes()
            )));
        }
        if self.meta.vocab_size.is_some_and(|v| v != vocab) {
            return Err(Error::Model(format!(
                "inconsistent metadata: get_vocab_size is {:?}, the logits {:?}",
                self.meta.vocab_size,
                t.info.sizes()
            )));
        }
        let rows = n / vocab;
        let dtype = t.info.dtype();
        let es = dtype.elem_size();
        let bytes = n
            .checked_mul(es)
            .and_then(|len| t.bytes.get(..len))
            .ok_or_else(|| {
                Error::Model(format!("logits of {n} values in {} bytes", t.bytes.len()))
            })?;
        self.vocab = vocab;
        if fed > 1 {
            self.full_logits = Some(rows == fed);
        }
        if all {
            if rows != fed {
                return Err(Error::CannotVerify {
                    reason: "returns the last position's logits only",
                });
            }
            convert(dtype, bytes, &mut self.rows)?;
        }
        // The last row (a program exported with full logits returns every position's).
        self.logits.clear();
        convert(dtype, &bytes[(n - vocab) * es..], &mut self.logits)
    }

    /// The logits of the last `forward`.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// The method (for statistics such as planned bytes).
    pub fn method(&self) -> &Method<'a> {
        &self.method
    }
}

/// Runs the decoder on its input 0 (`n` positions, already set) at position `pos`.
fn call(method: &mut Method<'_>, pos: &mut usize, n: usize) -> Result<()> {
    let at = [*pos as i64];
    method.set_input_tensor(1, ScalarType::Long, &[1], bytemuck::cast_slice(&at))?;
    method.execute()?;
    *pos += n;
    Ok(())
}

/// Rows `from..from + n` of `method`'s output 0, embeddings `[1, rows, dim]` of `dtype`, as
/// bytes.
fn embedding_rows<'m>(
    method: &'m Method<'_>,
    what: &str,
    from: usize,
    n: usize,
    dim: usize,
    dtype: ScalarType,
) -> Result<&'m [u8]> {
    let Output::Tensor(t) = method.output(0)? else {
        return Err(Error::Model(format!("{what}'s output is not a tensor")));
    };
    let bad = || {
        Error::Model(format!(
            "{what} returned {} {:?}; expected {dtype} [1, {}, {dim}]",
            t.info.dtype(),
            t.info.sizes(),
            from + n
        ))
    };
    match t.info.sizes() {
        [1, rows, d] if *d == dim && *rows >= from + n && t.info.dtype() == dtype => {}
        _ => return Err(bad()),
    }
    let row = dim.checked_mul(dtype.elem_size()).ok_or_else(bad)?;
    let (a, b) = (from.checked_mul(row), (from + n).checked_mul(row));
    a.zip(b)
        .and_then(|(a, b)| t.bytes.get(a..b))
        .ok_or_else(bad)
}

/// Appends logits of `dtype` (little-endian bytes) to `out` as f32.
fn convert(dtype: ScalarType, bytes: &[u8], out: &mut Vec<f32>) -> Result<()> {
    match dtype {
        ScalarType::Float => out.extend(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        ),
        ScalarType::Half => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        ScalarType::BFloat16 => out.extend(
            bytes
                .chunks_exact(2)
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()),
        ),
        dt => return Err(Error::Model(format!("logits of dtype {dt}"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Metadata {
        Metadata {
            bos_id: Some(1),
            eos_ids: vec![2, 7],
            max_seq_len: 32,
            max_context_len: 128,
            vocab_size: Some(512),
            use_kv_cache: true,
            enable_dynamic_shape: true,
            n_layers: Some(2),
            all: BTreeMap::from([("get_vocab_size".to_string(), vec![512])]),
        }
    }

    #[test]
    fn consistent_metadata_passes() {
        meta().check().unwrap();
        // Without a vocabulary size the ids cannot be checked.
        let m = Metadata {
            vocab_size: None,
            all: BTreeMap::new(),
            eos_ids: vec![100_000],
            ..meta()
        };
        m.check().unwrap();
    }

    #[test]
    fn contradictions_are_refused() {
        let cases = [
            (
                Metadata {
                    max_seq_len: 256,
                    ..meta()
                },
                "exceeds get_max_context_len",
            ),
            (
                Metadata {
                    eos_ids: vec![2, 512],
                    ..meta()
                },
                "token id 512",
            ),
            (
                Metadata {
                    bos_id: Some(9999),
                    ..meta()
                },
                "token id 9999",
            ),
            (
                Metadata {
                    vocab_size: None,
                    all: BTreeMap::from([("get_vocab_size".to_string(), vec![-3])]),
                    ..meta()
                },
                "get_vocab_size is -3",
            ),
        ];
        for (m, want) in cases {
            let err = m.check().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
