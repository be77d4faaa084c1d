//! Prompt → tokens → streamed text, with statistics.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::detok::{StopMatcher, TextStream};
use crate::model::{Model, NOT_A_TOKEN};
use crate::sampler::{Sampler, SamplerConfig};
use crate::speculate::{lookup_draft, Draft, Speculation};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampler: SamplerConfig,
    /// Generation stops when the text contains one of these (not included in the output).
    pub stop_strings: Vec<String>,
    /// Token ids that end generation; `None`: the program's `get_eos_ids` (and the tokenizer's
    /// EOS token when the program has none).
    pub eos_ids: Option<Vec<u32>>,
    /// Leave special tokens out of the streamed text.
    pub skip_special: bool,
    /// Set (from the text callback or another thread) to end generation after the current
    /// token: `FinishReason::Cancelled`.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Speculative decoding (prompt lookup or a draft model); the tokens are plain decoding's.
    pub speculation: Speculation,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 128,
            sampler: SamplerConfig::default(),
            stop_strings: Vec::new(),
            eos_ids: None,
            skip_special: true,
            cancel: None,
            speculation: Speculation::Off,
        }
    }
}

/// One piece of a prompt: tokens, or a picture for the program's vision encoder (a
/// multimodal program: [`Model::forward_image`]). Pieces are prefilled in order, each by its
/// own calls, as ExecuTorch's `MultimodalRunner` prefills its inputs.
#[derive(Clone, Copy, Debug)]
pub enum Part<'x> {
    Tokens(&'x [u32]),
    Image(&'x pteron_image::Image),
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token was sampled.
    Eos,
    /// A stop string appeared.
    StopString,
    /// `max_new_tokens` were generated.
    MaxTokens,
    /// The KV cache is full (`get_max_context_len` positions).
    ContextFull,
    /// `GenerateOptions::cancel` was set.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Eos => "eos",
            FinishReason::StopString => "stop_string",
            FinishReason::MaxTokens => "max_new_tokens",
            FinishReason::ContextFull => "context_full",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Timings and counts of one generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    /// From the start of prefill to the first sampled token.
    pub time_to_first_token: Duration,
    pub prefill: Duration,
    /// Decode steps (one forward and one sample per token after the first; with speculation
    /// also drafting).
    pub decode: Duration,
    pub peak_rss_bytes: Option<u64>,
    /// Calls of the target's `forward` after prefill (one per generated token but the first
    /// without speculation; fewer when drafts are accepted).
    pub decode_calls: usize,
    /// Tokens drafted and sent to the target for checking.
    pub drafted_tokens: usize,
    /// Drafted tokens that became output (the target sampled the same token).
    pub accepted_tokens: usize,
    /// Calls of the draft model's `forward` (its prefill included).
    pub draft_calls: usize,
}

impl Stats {
    pub fn prefill_tokens_per_s(&self) -> f64 {
        per_s(self.prompt_tokens, self.prefill)
    }
    /// Tokens produced by decode steps (all but the first, which prefill produces).
    pub fn decode_tokens_per_s(&self) -> f64 {
        per_s(self.generated_tokens.saturating_sub(1), self.decode)
    }
    /// Accepted / drafted tokens (`None` when nothing was drafted).
    pub fn acceptance_rate(&self) -> Option<f64> {
        (self.drafted_tokens > 0).then(|| self.accepted_tokens as f64 / self.drafted_tokens as f64)
    }
}

fn per_s(n: usize, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// The result of one generation.
#[derive(Clone, Debug)]
pub struct Generation {
    pub text: String,
    /// Sampled tokens, including a final EOS token.
    pub tokens: Vec<u32>,
    pub finish: FinishReason,
    pub stats: Stats,
}

/// A model, its tokenizer and a sampler; keeps the tokens of its context (what the KV cache
/// holds) so that generations can continue it.
pub struct Generator<'a, 't> {
    pub model: Model<'a>,
    pub tokenizer: &'t Tokenizer,
    context: Vec<u32>,
    logits: Vec<f32>,
    stream: TextStream,
    draft: Option<Draft<'a>>,
    /// The drafted tokens of the last checking call, then `[token, drafts...]` to feed.
    drafts: Vec<u32>,
    feed: Vec<u32>,
}

impl<'a, 't> Generator<'a, 't> {
    pub fn new(model: Model<'a>, tokenizer: &'t Tokenizer) -> Self {
        let cap = model.meta.max_context_len;
        Generator {
            model,
            tokenizer,
            context: Vec::with_capacity(cap),
            logits: Vec::new(),
            stream: TextStream::new(true),
            draft: None,
            drafts: Vec::new(),
            feed: Vec::new(),
        }
    }

    /// Attaches a draft model for [`Speculation::DraftModel`] (it must use the same tokenizer;
    /// a vocabulary of another size is refused), replacing any earlier one, which is returned.
    pub fn set_draft_model(&mut self, draft: Model<'a>) -> Result<Option<Model<'a>>> {
        if let (Some(a), Some(b)) = (self.model.meta.vocab_size, draft.meta.vocab_size) {
            if a != b {
                return Err(Error::Model(format!(
                    "the draft model's vocabulary has {b} tokens, the model's {a}: a draft must \
                     share the model's tokenizer"
                )));
            }
        }
        let mut draft = Draft::new(draft);
        draft.forget();
        Ok(self.draft.replace(draft).map(|d| d.model))
    }

    /// Detaches the draft model.
    pub fn take_draft_model(&mut self) -> Option<Model<'a>> {
        self.draft.take().map(|d| d.model)
    }

    /// The attached draft model.
    pub fn draft_model(&self) -> Option<&Model<'a>> {
        self.draft.as_ref().map(|d| &d.model)
    }

    /// Whether `speculation` can run here: the model checks several tokens per call
    /// ([`Model::check_verify`]) and a draft model is attached when one is asked for.
    pub fn check_speculation(&self, speculation: &Speculation) -> Result<()> {
        speculation.validate().map_err(Error::Model)?;
        if speculation.is_off() {
            return Ok(());
        }
        self.model.check_verify()?;
        if matches!(speculation, Speculation::DraftModel { .. }) && self.draft.is_none() {
            return Err(Error::Model(
                "speculation with a draft model, but no draft model is attached \
                 (Generator::set_draft_model)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Tokens in the KV cache.
    pub fn context(&self) -> &[u32] {
        &self.context
    }

    /// Forgets the context after `pos` tokens (0: everything) and returns the tokens kept:
    /// `pos`, or 0 for a recurrent model (see [`Model::rewind`]).
    pub fn rewind(&mut self, pos: usize) -> usize {
        let kept = self.model.rewind(pos);
        self.context.truncate(kept);
        kept
    }

    /// EOS ids: the program's, else the tokenizer's EOS token.
    pub fn default_eos_ids(&self) -> Vec<u32> {
        if !self.model.meta.eos_ids.is_empty() {
            return self.model.meta.eos_ids.clone();
        }
        self.tokenizer
            .config
            .eos_token
            .as_deref()
            .and_then(|t| self.tokenizer.token_to_id(t))
            .into_iter()
            .collect()
    }

    /// Starts a new context with `prompt` (encoded with the tokenizer's special tokens) and
    /// generates.
    pub fn generate_text(
        &mut self,
        prompt: &str,
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        let ids = self.tokenizer.encode(prompt, true)?;
        self.rewind(0);
        self.generate(&ids, opts, on_text)
    }

    /// Appends `prompt` to the context, then samples up to `max_new_tokens`, streaming text.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        self.generate_parts(&[Part::Tokens(prompt)], opts, on_text)
    }

    /// Appends the pieces of a prompt (tokens and pictures) to the context, then samples up to
    /// `max_new_tokens`, streaming text. A picture's positions are [`NOT_A_TOKEN`] in
    /// [`Generator::context`]; speculative decoding is refused once the context holds one.
    pub fn generate_parts(
        &mut self,
        parts: &[Part<'_>],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        opts.sampler.validate().map_err(Error::Model)?;
        self.check_speculation(&opts.speculation)?;
        let images = parts.iter().any(|p| matches!(p, Part::Image(_)));
        if !opts.speculation.is_off() && (images || self.context.contains(&NOT_A_TOKEN)) {
            return Err(Error::Model(
                "speculative decoding with an image in the context is not supported".into(),
            ));
        }
        let tokens: usize = parts
            .iter()
            .map(|p| match p {
                Part::Tokens(t) => t.len(),
                Part::Image(_) => 0,
            })
            .sum();
        if parts
            .iter()
            .any(|p| matches!(p, Part::Tokens(t) if t.is_empty()))
            || parts.is_empty()
        {
            return Err(Error::Model("empty prompt".into()));
        }
        if tokens > self.model.remaining() {
            return Err(Error::ContextOverflow {
                needed: tokens,
                used: self.model.pos(),
                context: self.model.meta.max_context_len,
            });
        }
        let r = self.run(parts, opts, on_text);
        // The cache holds the context and nothing after it (drafts checked but not taken).
        self.model.rewind(self.context.len());
        r
    }

    /// Prefills the pieces in order; returns the positions they took.
    fn prefill(&mut self, parts: &[Part<'_>]) -> Result<usize> {
        let start = self.context.len();
        for part in parts {
            match part {
                Part::Tokens(ids) => {
                    self.model.forward(ids)?;
                    self.context.extend_from_slice(ids);
                }
                Part::Image(image) => {
                    let m = self.model.forward_image(image)?;
                    self.context.extend(std::iter::repeat_n(NOT_A_TOKEN, m));
                }
            }
        }
        Ok(self.context.len() - start)
    }

    fn run(
        &mut self,
        parts: &[Part<'_>],
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        let eos = opts
            .eos_ids
            .clone()
            .unwrap_or_else(|| self.default_eos_ids());
        let spec = opts.speculation;
        let mut sampler = Sampler::new(opts.sampler.clone());
        let mut stop = StopMatcher::new(opts.stop_strings.clone());
        self.stream = TextStream::new(opts.skip_special);
        let mut stats = Stats::default();
        let mut text = String::new();
        let mut tokens = Vec::with_capacity(opts.max_new_tokens.min(4096));
        let max_context = self.model.meta.max_context_len;

        let t0 = Instant::now();
        stats.prompt_tokens = self.prefill(parts)?;
        if !spec.is_off() {
            // A program whose logits were not known at load has shown them now.
            self.model.check_verify()?;
        }
        if let (Speculation::DraftModel { .. }, Some(d)) = (spec, self.draft.as_mut()) {
            stats.draft_calls += d.prefill(&self.context)?;
        }
        stats.prefill = t0.elapsed();
        let mut decode_start = None;
        let mut finish = FinishReason::MaxTokens;
        let mut emit = |s: &str, text: &mut String| {
            if !s.is_empty() {
                text.push_str(s);
                on_text(s);
            }
        };
        // Where the next logits are: `None`, the model's last logits; `Some(j)`, row j of the
        // last checking call, whose drafts are `self.drafts` (row j is the target's
        // distribution after drafts[j - 1], and drafts[j] is what it is compared with).
        let mut row: Option<usize> = None;
        for i in 0..opts.max_new_tokens {
            self.logits.clear();
            match row {
                None => self.logits.extend_from_slice(self.model.logits()),
                Some(j) => self.logits.extend_from_slice(self.model.last_rows().row(j)),
            }
            let tok = sampler.sample(&mut self.logits, &self.context);
            if i == 0 {
                stats.time_to_first_token = t0.elapsed();
                decode_start = Some(Instant::now());
            }
            tokens.push(tok);
            if eos.contains(&tok) {
                finish = FinishReason::Eos;
                break;
            }
            let piece = self.stream.push(self.tokenizer, tok)?;
            let (out, hit) = stop.push(&piece);
            emit(&out, &mut text);
            if hit {
                finish = FinishReason::StopString;
                break;
            }
            if opts
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                finish = FinishReason::Cancelled;
                break;
            }
            if i + 1 == opts.max_new_tokens {
                break;
            }
            if self.context.len() >= max_context {
                finish = FinishReason::ContextFull;
                break;
            }
            // The token is the next draft: the checking call has its row already.
            if let Some(j) = row {
                if self.drafts.get(j) == Some(&tok) {
                    self.context.push(tok);
                    stats.accepted_tokens += 1;
                    row = Some(j + 1);
                    continue;
                }
            }
            self.model.rewind(self.context.len());
            if spec.is_off() {
                self.model.forward(&[tok])?;
                self.context.push(tok);
                stats.decode_calls += 1;
                continue;
            }
            // Draft what may follow `tok`: as many tokens as could still be output after the
            // one this call's first row gives, and as fit in one call and in the context.
            let room = spec
                .draft_len()
                .min(opts.max_new_tokens - i - 2)
                .min(self.model.chunk_len() - 1)
                .min(max_context - self.context.len() - 1);
            self.context.push(tok);
            match (spec, self.draft.as_mut()) {
                (
                    Speculation::PromptLookup {
                        min_ngram,
                        max_ngram,
                        ..
                    },
                    _,
                ) => lookup_draft(&self.context, min_ngram, max_ngram, room, &mut self.drafts),
                (Speculation::DraftModel { .. }, Some(draft)) => {
                    stats.draft_calls += draft.propose(&self.context, room, &mut self.drafts)?;
                }
                // `check_speculation` refuses a draft-model speculation without a draft (and
                // `Off` continued above).
                _ => {
                    return Err(Error::Model(
                        "speculation with a draft model, but no draft model is attached".into(),
                    ))
                }
            }
            self.feed.clear();
            self.feed.push(tok);
            self.feed.extend_from_slice(&self.drafts);
            self.model.forward_all(&self.feed)?;
            stats.decode_calls += 1;
            stats.drafted_tokens += self.drafts.len();
            row = Some(0);
        }
        if finish != FinishReason::StopString {
            let rest = self.stream.flush(self.tokenizer)?;
            let (out, hit) = stop.push(&rest);
            emit(&out, &mut text);
            if hit {
                finish = FinishReason::StopString;
            } else {
                let tail = stop.finish();
                emit(&tail, &mut text);
            }
        }
        if let Some(d) = decode_start {
            stats.decode = d.elapsed();
        }
        stats.generated_tokens = tokens.len();
        stats.peak_rss_bytes = crate::peak_rss_bytes();
        Ok(Generation {
            text,
            tokens,
            finish,
            stats,
        })
    }

    /// Greedy token ids without text (the golden tests' path): `n` tokens, never stopping.
    pub fn greedy_ids(&mut self, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
        self.greedy_ids_parts(&[Part::Tokens(prompt)], n)
    }

    /// [`Generator::greedy_ids`] for a prompt of pieces (tokens and pictures).
    pub fn greedy_ids_parts(&mut self, parts: &[Part<'_>], n: usize) -> Result<Vec<u32>> {
        self.rewind(0);
        self.prefill(parts)?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let tok = crate::sampler::argmax(self.model.logits());
            out.push(tok);
            if i + 1 < n {
                self.model.forward(&[tok])?;
                self.context.push(tok);
            }
        }
        Ok(out)
    }
}
