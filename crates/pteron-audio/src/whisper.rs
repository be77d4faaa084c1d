//! Whisper transcription on an ExecuTorch program with two methods
//! (`tools/export/export_speech.py whisper`):
//!
//! - `encode`: mel [1, n_mels, n_frames] -> the cross-attention keys and values of every
//!   decoder layer (any number of float tensors: k0, v0, k1, v1, ...) — once per 30 s window;
//! - `decode`: (token [1, 1] int64, pos [1] int64, then the encoder's outputs in order) ->
//!   logits [1, vocab], one token per call; the self-attention KV cache lives in the program's
//!   mutable buffers, written at `pos`, so a new window simply starts again at position 0.
//!
//! [`WhisperConfig`] (the exporter's `whisper.json`) names the special tokens and the
//! suppression lists. Decoding is greedy with OpenAI Whisper's logit rules: suppressed tokens,
//! blank/end suppressed at the first step, and with timestamps the timestamp rules (pairs,
//! monotonic, the first one at most 1 s, forced when timestamps are jointly more likely than
//! any text token).

use std::path::Path;

use pteron::{Method, ScalarType, ValueSpec as Value};
use pteron::{MethodOptions, Program};

use crate::mel::{LogMel, HOP};
use crate::{output_f32, Error, Result};

/// Seconds per timestamp token step.
pub const TIME_PRECISION: f64 = 0.02;
/// Latest first timestamp OpenAI Whisper allows (1 s).
const MAX_INITIAL_TIMESTAMP_STEPS: u32 = 50;

/// Special tokens and shapes of an exported Whisper model (`whisper.json`).
#[derive(Clone, Debug)]
pub struct WhisperConfig {
    pub n_mels: usize,
    /// Mel frames per window (3000 for 30 s).
    pub n_frames: usize,
    pub max_target_positions: usize,
    pub vocab_size: usize,
    pub sot: u32,
    pub eot: u32,
    pub no_timestamps: Option<u32>,
    pub timestamp_begin: Option<u32>,
    /// `<|startofprev|>`: opens the previous window's text in the prompt.
    pub sot_prev: Option<u32>,
    /// `<|nospeech|>` (`<|nocaptions|>` in English-only models): its probability after the
    /// start-of-transcript token says whether the window holds speech.
    pub no_speech: Option<u32>,
    pub suppress: Vec<u32>,
    pub suppress_begin: Vec<u32>,
}

impl WhisperConfig {
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Error::Model(format!("whisper.json: {e}")))?;
        let num = |k: &str| -> Result<u64> {
            v.get(k)
                .and_then(|x| x.as_u64())
                .ok_or_else(|| Error::Model(format!("whisper.json: no integer {k:?}")))
        };
        let id = |k: &str| -> Result<u32> {
            u32::try_from(num(k)?)
                .map_err(|_| Error::Model(format!("whisper.json: {k} out of range")))
        };
        let opt = |k: &str| {
            v.get(k)
                .and_then(|x| x.as_u64())
                .and_then(|x| u32::try_from(x).ok())
        };
        let list = |k: &str| -> Vec<u32> {
            v.get(k)
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_u64())
                        .filter_map(|x| u32::try_from(x).ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let size = |k: &str| -> Result<usize> {
            usize::try_from(num(k)?)
                .map_err(|_| Error::Model(format!("whisper.json: {k} out of range")))
        };
        let cfg = WhisperConfig {
            n_mels: size("n_mels")?,
            n_frames: size("n_frames")?,
            max_target_positions: size("max_target_positions")?,
            vocab_size: size("vocab_size")?,
            sot: id("sot")?,
            eot: id("eot")?,
            no_timestamps: opt("no_timestamps"),
            timestamp_begin: opt("timestamp_begin"),
            sot_prev: opt("sot_prev"),
            no_speech: opt("no_speech"),
            suppress: list("suppress"),
            suppress_begin: list("suppress_begin"),
        };
        let vocab = cfg.vocab_size;
        let ids = [cfg.sot, cfg.eot]
            .into_iter()
            .chain(cfg.no_timestamps)
            .chain(cfg.timestamp_begin)
            .chain(cfg.sot_prev)
            .chain(cfg.no_speech);
        if ids.into_iter().any(|t| t as usize >= vocab) || cfg.n_frames == 0 || cfg.n_mels == 0 {
            return Err(Error::Model(
                "whisper.json: token ids beyond the vocabulary or empty shapes".into(),
            ));
        }
        Ok(cfg)
    }

    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// Samples (16 kHz) in one window.
    pub fn window_samples(&self) -> usize {
        self.n_frames * HOP
    }
}

/// How to decode one window.
#[derive(Clone, Debug, Default)]
pub struct DecodeOptions {
    /// Predict timestamp tokens (segments with times) instead of `<|notimestamps|>`.
    pub timestamps: bool,
    /// Most tokens to generate per window (0 = up to the context).
    pub max_tokens: usize,
    /// Beams of beam search (0 or 1: greedy). Needs a decoder whose self-attention caches
    /// are written by `llama::update_cache` (the exporter's), which are saved per beam.
    pub beam_size: usize,
    /// Sampling temperature: above 0 the window is sampled (`best_of` times, no beams), as
    /// Whisper's fallback when a greedy or beam result is rejected.
    pub temperature: f32,
    /// Samples drawn at a temperature above 0; the one most likely per token is kept
    /// (0 or 1: one sample).
    pub best_of: usize,
    /// The sampler's seed: the same seed, window and prompt give the same samples.
    pub seed: u64,
}

/// A piece of text with its times in seconds (relative to the window's start).
#[derive(Clone, Debug, PartialEq)]
pub struct TimedTokens {
    pub start: f64,
    pub end: f64,
    pub tokens: Vec<u32>,
}

/// The result of decoding one window.
#[derive(Clone, Debug, Default)]
pub struct WindowResult {
    /// Generated tokens (without the prompt; ends with end-of-text unless cut short).
    pub tokens: Vec<u32>,
    /// With timestamps: text between timestamp pairs.
    pub segments: Vec<TimedTokens>,
    /// With timestamps: where the window's last complete segment ended (seconds), to continue
    /// the next window from there.
    pub last_timestamp: Option<f64>,
    /// Summed log-probability of the generated tokens (end-of-text included) under the
    /// filtered logits, as Whisper scores a decoding.
    pub sum_logprob: f64,
    /// Probability of `<|nospeech|>` right after the start-of-transcript token (0 when the
    /// model names no such token).
    pub no_speech_prob: f64,
}

impl WindowResult {
    /// `sum_logprob` per generated token, end-of-text counted once whether or not it was
    /// reached (Whisper's `avg_logprob`, which its fallback compares with a threshold).
    pub fn avg_logprob(&self, eot: u32) -> f64 {
        let n = self.tokens.iter().filter(|&&t| t != eot).count();
        self.sum_logprob / (n + 1) as f64
    }
}

/// Where transcription time went, accumulated over calls.
#[derive(Clone, Copy, Debug, Default)]
pub struct WhisperStats {
    /// Log-mel features.
    pub features_s: f64,
    /// Encoder runs (one per window).
    pub encode_s: f64,
    pub windows: usize,
    /// Decoder steps (prompt and generated tokens, every beam).
    pub decode_s: f64,
    pub steps: usize,
}

/// A loaded Whisper program.
pub struct Whisper<'a> {
    /// Time spent so far.
    pub stats: WhisperStats,
    encode: Method<'a>,
    decode: Method<'a>,
    pub config: WhisperConfig,
    mel: LogMel,
    /// The encoder's outputs, concatenated; `cross_shapes[i]` is the shape of part `i`.
    cross: Vec<f32>,
    cross_shapes: Vec<Vec<usize>>,
    /// The decoder's cross K/V inputs are not yet this window's.
    cross_stale: bool,
    /// Which cross K/V inputs the decoder keeps across steps ([`Method::input_is_preserved`]).
    cross_kept: Vec<bool>,
    /// Scratch for one output.
    part: Vec<f32>,
    logits: Vec<f32>,
}

impl<'a> Whisper<'a> {
    pub fn new(
        program: &Program<'a>,
        options: MethodOptions,
        config: WhisperConfig,
    ) -> Result<Self> {
        let encode = program.load_method_with("encode", options.clone())?;
        let decode = program.load_method_with("decode", options)?;
        let mel_shape = [1, config.n_mels, config.n_frames];
        match encode.input_spec(0) {
            Some(Value::Tensor(t)) if t.info.sizes() == mel_shape && t.info.dtype() == ScalarType::Float => {}
            _ => {
                return Err(Error::Model(format!(
                    "encode must take one float mel tensor {mel_shape:?} (whisper.json's n_mels/n_frames)"
                )))
            }
        }
        let parts = encode.num_outputs();
        if encode.num_inputs() != 1
            || parts == 0
            || decode.num_inputs() != 2 + parts
            || decode.num_outputs() != 1
        {
            return Err(Error::Model(format!(
                "decode must take (token, pos) and the encoder's {parts} outputs, and return logits"
            )));
        }
        let mut cross_shapes = Vec::with_capacity(parts);
        for i in 0..parts {
            match decode.input_spec(2 + i) {
                Some(Value::Tensor(t)) if t.info.dtype() == ScalarType::Float => {
                    cross_shapes.push(t.info.sizes().to_vec())
                }
                _ => {
                    return Err(Error::Model(format!(
                        "decode's input {} is not a float tensor",
                        2 + i
                    )))
                }
            }
        }
        let cross_kept = (0..parts)
            .map(|i| decode.input_is_preserved(2 + i))
            .collect();
        Ok(Whisper {
            stats: WhisperStats::default(),
            mel: LogMel::new(config.n_mels),
            encode,
            decode,
            config,
            cross: Vec::new(),
            cross_shapes,
            cross_stale: true,
            cross_kept,
            part: Vec::new(),
            logits: Vec::new(),
        })
    }

    /// Computes the features of one window (padded/cut to the window) and runs the encoder.
    pub fn encode_window(&mut self, samples: &[f32]) -> Result<()> {
        let t = std::time::Instant::now();
        let feats = self.mel.features(samples, self.config.window_samples());
        self.stats.features_s += t.elapsed().as_secs_f64();
        self.encode_features(&feats)
    }

    /// Runs the encoder on features [n_mels, n_frames].
    pub fn encode_features(&mut self, feats: &[f32]) -> Result<()> {
        let shape = [1, self.config.n_mels, self.config.n_frames];
        let t = std::time::Instant::now();
        self.encode
            .set_input_tensor(0, ScalarType::Float, &shape, bytemuck::cast_slice(feats))?;
        self.encode.execute()?;
        self.cross.clear();
        for i in 0..self.cross_shapes.len() {
            let shape = output_f32(&self.encode, i, "encode", &mut self.part)?;
            if shape != self.cross_shapes[i] {
                return Err(Error::Model(format!(
                    "encode output {i} is {shape:?}, decode takes {:?}",
                    self.cross_shapes[i]
                )));
            }
            self.cross.extend_from_slice(&self.part);
        }
        self.cross_stale = true;
        self.stats.encode_s += t.elapsed().as_secs_f64();
        self.stats.windows += 1;
        Ok(())
    }

    /// The encoder's outputs for the current window (cross-attention K/V), concatenated.
    pub fn cross_kv(&self) -> &[f32] {
        &self.cross
    }

    /// Feeds `token` at `pos`; returns the next token's logits.
    pub fn step(&mut self, token: u32, pos: usize) -> Result<&[f32]> {
        if pos >= self.config.max_target_positions {
            return Err(Error::Invalid(format!(
                "position {pos} beyond the decoder's {} positions",
                self.config.max_target_positions
            )));
        }
        let t = std::time::Instant::now();
        let tok = [token as i64];
        let p = [pos as i64];
        self.decode
            .set_input_tensor(0, ScalarType::Long, &[1, 1], bytemuck::cast_slice(&tok))?;
        self.decode
            .set_input_tensor(1, ScalarType::Long, &[1], bytemuck::cast_slice(&p))?;
        // The cross K/V are the same for the whole window: set once per window when the
        // method keeps inputs (the exporter leaves them unplanned), else at every step
        // (planned memory may reuse an input's bytes after its last use within a run).
        let mut at = 0;
        for (i, shape) in self.cross_shapes.iter().enumerate() {
            if !self.cross_stale && self.cross_kept[i] {
                at += shape.iter().product::<usize>();
                continue;
            }
            let n: usize = shape.iter().product();
            let part = self
                .cross
                .get(at..at + n)
                .ok_or_else(|| Error::Invalid("step before the window was encoded".into()))?;
            self.decode.set_input_tensor(
                2 + i,
                ScalarType::Float,
                shape,
                bytemuck::cast_slice(part),
            )?;
            at += n;
        }
        self.cross_stale = false;
        self.decode.execute()?;
        let mut logits = std::mem::take(&mut self.logits);
        output_f32(&self.decode, 0, "decode", &mut logits)?;
        if logits.len() != self.config.vocab_size {
            return Err(Error::Model(format!(
                "decode returns {} logits for a vocabulary of {}",
                logits.len(),
                self.config.vocab_size
            )));
        }
        self.logits = logits;
        self.stats.decode_s += t.elapsed().as_secs_f64();
        self.stats.steps += 1;
        Ok(&self.logits)
    }

    /// The decoder prompt: start-of-transcript, then `<|notimestamps|>` unless timestamps.
    pub fn prompt(&self, timestamps: bool) -> Vec<u32> {
        self.prompt_after(&[], timestamps)
    }

    /// The prompt of a window that continues `previous` (earlier windows' tokens, timestamps
    /// included): `<|startofprev|>` and the last of them (at most half the context less one),
    /// then [`Whisper::prompt`]. Without previous tokens, or a model without
    /// `<|startofprev|>`, just [`Whisper::prompt`].
    pub fn prompt_after(&self, previous: &[u32], timestamps: bool) -> Vec<u32> {
        let mut p = Vec::new();
        if let (Some(prev), false) = (self.config.sot_prev, previous.is_empty()) {
            let keep = (self.config.max_target_positions / 2).saturating_sub(1);
            p.push(prev);
            p.extend_from_slice(&previous[previous.len().saturating_sub(keep)..]);
        }
        p.push(self.config.sot);
        if !timestamps {
            p.extend(self.config.no_timestamps);
        }
        p
    }

    /// Feeds the prompt of a window: its timestamp mode, the prompt, the token limit, the
    /// no-speech probability and the logits for the first generated token.
    fn start(&mut self, opts: &DecodeOptions, previous: &[u32]) -> Result<Start> {
        let timestamps = opts.timestamps && self.config.timestamp_begin.is_some();
        let prompt = self.prompt_after(previous, timestamps);
        // Leave room to generate: a prompt filling the context is a caller's mistake.
        if prompt.len() >= self.config.max_target_positions {
            return Err(Error::Invalid(format!(
                "a prompt of {} tokens leaves nothing of the decoder's {} positions",
                prompt.len(),
                self.config.max_target_positions
            )));
        }
        let limit = if opts.max_tokens == 0 {
            self.config.max_target_positions / 2
        } else {
            opts.max_tokens
        };
        let mut logits = Vec::new();
        let mut no_speech_prob = 0.0;
        for (i, &t) in prompt.iter().enumerate() {
            logits.clear();
            logits.extend_from_slice(self.step(t, i)?);
            if t == self.config.sot {
                if let Some(ns) = self.config.no_speech {
                    no_speech_prob = log_softmax_at(&logits, ns).exp();
                }
            }
        }
        Ok(Start {
            timestamps,
            prompt,
            limit,
            no_speech_prob,
            logits,
        })
    }

    /// Greedy decoding of the encoded window.
    pub fn decode_greedy(&mut self, opts: &DecodeOptions) -> Result<WindowResult> {
        self.decode_one(opts, &[], None)
    }

    /// One decoding from the prompt: the most likely token at each step, or with a sampler a
    /// token drawn from the softmax of the filtered logits divided by the temperature.
    fn decode_one(
        &mut self,
        opts: &DecodeOptions,
        previous: &[u32],
        mut sampler: Option<(f64, &mut SplitMix64)>,
    ) -> Result<WindowResult> {
        let Start {
            timestamps,
            prompt,
            limit,
            no_speech_prob,
            mut logits,
        } = self.start(opts, previous)?;
        let max_pos = self.config.max_target_positions;
        let mut out: Vec<u32> = Vec::new();
        let mut sum_logprob = 0.0;
        loop {
            self.apply_rules(&mut logits, &out, timestamps);
            let next = match sampler.as_mut() {
                Some((t, rng)) => sample(&logits, *t, rng.next_f64()),
                None => argmax(&logits),
            };
            sum_logprob += log_softmax_at(&logits, next);
            out.push(next);
            if next == self.config.eot || out.len() >= limit || prompt.len() + out.len() >= max_pos
            {
                break;
            }
            logits.clear();
            logits.extend_from_slice(self.step(next, prompt.len() + out.len() - 1)?);
        }
        let mut r = self.split_segments(out, timestamps);
        r.sum_logprob = sum_logprob;
        r.no_speech_prob = no_speech_prob;
        Ok(r)
    }

    /// Decodes the encoded window: greedy, or beam search when `opts.beam_size > 1`, or
    /// sampling when `opts.temperature > 0`.
    pub fn decode(&mut self, opts: &DecodeOptions) -> Result<WindowResult> {
        self.decode_after(opts, &[])
    }

    /// [`Whisper::decode`] with the prompt continuing `previous` ([`Whisper::prompt_after`]).
    pub fn decode_after(&mut self, opts: &DecodeOptions, previous: &[u32]) -> Result<WindowResult> {
        if opts.temperature > 0.0 {
            self.decode_sampled(opts, previous)
        } else if opts.beam_size > 1 {
            self.decode_beam_after(opts, previous)
        } else {
            self.decode_one(opts, previous, None)
        }
    }

    /// `best_of` samples at `opts.temperature`; the one with the best log-probability per
    /// token wins (Whisper's ranking without a length penalty; the first of equals).
    fn decode_sampled(&mut self, opts: &DecodeOptions, previous: &[u32]) -> Result<WindowResult> {
        let mut rng = SplitMix64(opts.seed);
        let eot = self.config.eot;
        let mut best: Option<(f64, WindowResult)> = None;
        for _ in 0..opts.best_of.max(1) {
            let r = self.decode_one(opts, previous, Some((opts.temperature as f64, &mut rng)))?;
            let n = r.tokens.iter().filter(|&&t| t != eot).count().max(1);
            let score = r.sum_logprob / n as f64;
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, r));
            }
        }
        Ok(best.map(|(_, r)| r).unwrap_or_default())
    }

    /// Beam search as OpenAI Whisper's `BeamSearchDecoder` (patience 1, no length penalty):
    /// each step extends every beam by its `beam_size + 1` most likely tokens (log-softmax of
    /// the filtered logits, summed along the beam); the best `beam_size` unfinished
    /// extensions go on, end-of-text ones ranked above them are kept as finished, until
    /// `beam_size` are finished or the length limit; the result is the finished (else
    /// unfinished) sequence with the best sum of log-probabilities per token.
    ///
    /// The decoder runs one beam at a time: before each step the beam's rows of the
    /// self-attention caches are written back into the method, after it the new row is saved.
    pub fn decode_beam(&mut self, opts: &DecodeOptions) -> Result<WindowResult> {
        self.decode_beam_after(opts, &[])
    }

    fn decode_beam_after(
        &mut self,
        opts: &DecodeOptions,
        previous: &[u32],
    ) -> Result<WindowResult> {
        let size = opts.beam_size.max(1);
        let caches = self.cache_layout()?;
        let Start {
            timestamps,
            prompt,
            limit,
            no_speech_prob,
            logits,
        } = self.start(opts, previous)?;
        let max_pos = self.config.max_target_positions;
        let n0 = prompt.len();
        let mut beams = vec![Beam {
            tokens: Vec::new(),
            logprob: 0.0,
            rows: self.save_rows(&caches, n0)?,
            logits,
        }];
        let mut finished: Vec<(Vec<u32>, f64)> = Vec::new();
        let eot = self.config.eot;
        loop {
            // (score, beam, token) of every beam's best size + 1 tokens.
            let mut cands: Vec<(f64, usize, u32)> = Vec::new();
            for (bi, b) in beams.iter_mut().enumerate() {
                self.apply_rules(&mut b.logits, &b.tokens, timestamps);
                for (tok, lp) in top_logprobs(&b.logits, size + 1) {
                    cands.push((b.logprob + lp, bi, tok));
                }
            }
            cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let mut next: Vec<(usize, u32, f64)> = Vec::new();
            let mut new_finished = Vec::new();
            for &(score, bi, tok) in &cands {
                if tok == eot {
                    new_finished.push((bi, score));
                } else {
                    next.push((bi, tok, score));
                    if next.len() == size {
                        break;
                    }
                }
            }
            for (bi, score) in new_finished {
                if finished.len() >= size {
                    break;
                }
                let mut t = beams[bi].tokens.clone();
                t.push(eot);
                finished.push((t, score));
            }
            let len = beams[0].tokens.len() + 1;
            if finished.len() >= size || next.is_empty() || len >= limit || n0 + len >= max_pos {
                // Unfinished beams count when too few finished (OpenAI's finalize).
                if finished.len() < size {
                    for &(bi, tok, score) in &next {
                        if finished.len() >= size {
                            break;
                        }
                        let mut t = beams[bi].tokens.clone();
                        t.push(tok);
                        finished.push((t, score));
                    }
                }
                break;
            }
            let mut grown = Vec::with_capacity(next.len());
            for (bi, tok, score) in next {
                // The parent fed every token of its own: `tok` goes at the next position.
                let parent = &beams[bi];
                let pos = n0 + parent.tokens.len();
                self.restore_rows(&caches, &parent.rows)?;
                let lg = self.step(tok, pos)?.to_vec();
                let mut tokens = parent.tokens.clone();
                tokens.push(tok);
                grown.push(Beam {
                    tokens,
                    logprob: score,
                    rows: self.save_rows(&caches, pos + 1)?,
                    logits: lg,
                });
            }
            beams = grown;
        }
        // Length-normalised (tokens without the end-of-text), OpenAI's default ranker.
        // The first of equal scores wins.
        let mut best: Option<(f64, Vec<u32>, f64)> = None;
        for (t, lp) in finished {
            let n = t.iter().filter(|&&x| x != eot).count().max(1);
            let score = lp / n as f64;
            if best.as_ref().is_none_or(|(b, _, _)| score > *b) {
                best = Some((score, t, lp));
            }
        }
        let (best, sum_logprob) = best.map(|(_, t, lp)| (t, lp)).unwrap_or_default();
        let mut r = self.split_segments(best, timestamps);
        r.sum_logprob = sum_logprob;
        r.no_speech_prob = no_speech_prob;
        Ok(r)
    }

    /// Each self-attention cache of the decoder: (value, bytes per position).
    fn cache_layout(&self) -> Result<Vec<(usize, usize)>> {
        let vals = self.decode.cache_tensors();
        if vals.is_empty() {
            return Err(Error::Model(
                "beam search needs a decoder whose caches are written by llama::update_cache \
                 (re-export with tools/export/export_speech.py)"
                    .into(),
            ));
        }
        let mut out = Vec::with_capacity(vals.len());
        for v in vals {
            let t = self.decode.state(v)?;
            let sizes = t.info.sizes();
            if sizes.len() < 2 || sizes[0] != 1 || sizes[1] < self.config.max_target_positions {
                return Err(Error::Model(format!(
                    "cache {sizes:?} is not [1, positions >= {}, ...]",
                    self.config.max_target_positions
                )));
            }
            out.push((v, t.bytes.len() / sizes[1]));
        }
        Ok(out)
    }

    /// The first `n` positions of every cache.
    fn save_rows(&self, caches: &[(usize, usize)], n: usize) -> Result<Vec<Vec<u8>>> {
        caches
            .iter()
            .map(|&(v, row)| {
                let t = self.decode.state(v)?;
                Ok(t.bytes[..(n * row).min(t.bytes.len())].to_vec())
            })
            .collect()
    }

    fn restore_rows(&mut self, caches: &[(usize, usize)], rows: &[Vec<u8>]) -> Result<()> {
        for (&(v, _), r) in caches.iter().zip(rows) {
            let dst = self.decode.state_mut(v)?;
            let n = r.len().min(dst.len());
            dst[..n].copy_from_slice(&r[..n]);
        }
        Ok(())
    }

    /// OpenAI Whisper's logit filters: SuppressBlank, SuppressTokens, ApplyTimestampRules.
    fn apply_rules(&self, logits: &mut [f32], seq: &[u32], timestamps: bool) {
        let cfg = &self.config;
        let ninf = f32::NEG_INFINITY;
        let n = logits.len();
        let mut kill = |t: u32| {
            if let Some(l) = logits.get_mut(t as usize) {
                *l = ninf;
            }
        };
        if seq.is_empty() {
            cfg.suppress_begin.iter().for_each(|&t| kill(t));
        }
        cfg.suppress.iter().for_each(|&t| kill(t));
        if let Some(t) = cfg.no_timestamps {
            kill(t);
        }
        let Some(ts) = cfg.timestamp_begin.map(|t| t as usize) else {
            return;
        };
        if !timestamps {
            logits[ts.min(n)..].fill(ninf);
            return;
        }
        let is_ts = |t: u32| t as usize >= ts;
        let last_ts = seq.last().is_some_and(|&t| is_ts(t));
        let penult_ts = seq.len() < 2 || is_ts(seq[seq.len() - 2]);
        if last_ts {
            if penult_ts {
                logits[ts..].fill(ninf);
            } else {
                logits[..cfg.eot as usize].fill(ninf);
            }
        }
        if let Some(&last) = seq.iter().rev().find(|&&t| is_ts(t)) {
            let from = if last_ts && !penult_ts {
                last
            } else {
                last + 1
            } as usize;
            logits[ts..from.min(n)].fill(ninf);
        }
        if seq.is_empty() {
            logits[..ts].fill(ninf);
            let last_allowed = ts + MAX_INITIAL_TIMESTAMP_STEPS as usize;
            logits[(last_allowed + 1).min(n)..].fill(ninf);
        }
        // Timestamps jointly more likely than every text token: force a timestamp.
        let max = logits.iter().copied().fold(ninf, f32::max);
        let lse = |s: &[f32]| -> f64 {
            let sum: f64 = s.iter().map(|&l| ((l - max) as f64).exp()).sum();
            sum.ln() + max as f64
        };
        let total = lse(logits);
        let ts_logprob = lse(&logits[ts..]) - total;
        let max_text = logits[..ts].iter().copied().fold(ninf, f32::max) as f64 - total;
        if ts_logprob > max_text {
            logits[..ts].fill(ninf);
        }
    }

    fn split_segments(&self, tokens: Vec<u32>, timestamps: bool) -> WindowResult {
        let Some(ts) = self.config.timestamp_begin.filter(|_| timestamps) else {
            return WindowResult {
                tokens,
                ..Default::default()
            };
        };
        let time = |t: u32| (t - ts) as f64 * TIME_PRECISION;
        let mut segments = Vec::new();
        let mut start: Option<f64> = None;
        let mut text = Vec::new();
        let mut last_timestamp = None;
        for &t in &tokens {
            if t >= ts {
                match start {
                    None => start = Some(time(t)),
                    Some(s) => {
                        segments.push(TimedTokens {
                            start: s,
                            end: time(t),
                            tokens: std::mem::take(&mut text),
                        });
                        last_timestamp = Some(time(t));
                        start = None;
                    }
                }
            } else if t != self.config.eot {
                text.push(t);
            }
        }
        // Text after an opening timestamp without a closing one: runs to the window's end.
        if !text.is_empty() {
            let end = self.config.window_samples() as f64 / 16_000.0;
            segments.push(TimedTokens {
                start: start.unwrap_or(0.0),
                end,
                tokens: text,
            });
            last_timestamp = None;
        }
        WindowResult {
            tokens,
            segments,
            last_timestamp,
            ..Default::default()
        }
    }
}

/// A window after its prompt (see [`Whisper::start`]).
struct Start {
    timestamps: bool,
    prompt: Vec<u32>,
    limit: usize,
    no_speech_prob: f64,
    logits: Vec<f32>,
}

/// One beam: generated tokens, their summed log-probability, the caches' rows so far, and
/// the logits for its next token.
struct Beam {
    tokens: Vec<u32>,
    logprob: f64,
    rows: Vec<Vec<u8>>,
    logits: Vec<f32>,
}

/// The `k` most likely tokens with their log-probabilities (log-softmax in f64), best first.
fn top_logprobs(logits: &[f32], k: usize) -> Vec<(u32, f64)> {
    let lse = log_sum_exp(logits);
    if lse == f64::NEG_INFINITY {
        return Vec::new();
    }
    let mut idx: Vec<u32> = (0..logits.len() as u32)
        .filter(|&i| logits[i as usize] > f32::NEG_INFINITY)
        .collect();
    idx.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(k);
    idx.into_iter()
        .map(|i| (i, logits[i as usize] as f64 - lse))
        .collect()
}

/// log Σ exp(logits), in f64 (shifted by the maximum; -inf when every logit is).
fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if max == f64::NEG_INFINITY {
        return max;
    }
    logits
        .iter()
        .map(|&l| (l as f64 - max).exp())
        .sum::<f64>()
        .ln()
        + max
}

/// log-softmax of `logits` (in f64) at `tok`.
fn log_softmax_at(logits: &[f32], tok: u32) -> f64 {
    let lse = log_sum_exp(logits);
    logits
        .get(tok as usize)
        .map_or(f64::NEG_INFINITY, |&l| l as f64 - lse)
}

/// The token where `u` (uniform in [0, 1)) falls in the cumulative softmax of
/// `logits / temperature`; suppressed (-inf) tokens have no weight.
fn sample(logits: &[f32], temperature: f64, u: f64) -> u32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let weight = |l: f32| ((l as f64 - max) / temperature).exp();
    let total: f64 = logits.iter().map(|&l| weight(l)).sum();
    let mut left = u * total;
    let mut last = 0;
    for (i, &l) in logits.iter().enumerate() {
        let w = weight(l);
        if w > 0.0 {
            last = i;
            if left < w {
                return i as u32;
            }
            left -= w;
        }
    }
    // Rounding left a sliver past the last weight: the last allowed token.
    last as u32
}

/// SplitMix64: a small, seedable generator, plenty for choosing tokens.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as u32
}
