//! Transcribing audio of any length: Whisper's long-form algorithm over 30 s windows, speech
//! segments from the VAD grouped into windows, and a streaming transcriber that emits text as
//! speech segments end.
//!
//! Long form ([`Transcriber::transcribe`]) follows OpenAI Whisper's `transcribe()` (and
//! faster-whisper's, which shares its defaults): the log-mel features of the whole input are
//! computed once and read in windows starting at `seek`. Each window is decoded with timestamp
//! tokens, whatever the caller shows: they say where the window's last complete segment
//! ended, and the next window starts there, so a sentence cut by the window's edge is decoded
//! again, whole, in the next one ([`split_window`]). The text so far conditions the next
//! window (`<|startofprev|>` prompt). A window the model finds too repetitive (compression
//! ratio) or too unlikely (mean log-probability) is decoded again at rising temperatures; a
//! window it finds silent (no-speech probability, unless its text is likely anyway) is
//! skipped whole.

use crate::mel::{LogMel, HOP};
use crate::vad::{segments_from_probs, Segment, SegmentParams, Vad, FRAME};
use crate::whisper::{DecodeOptions, Whisper, WindowResult, TIME_PRECISION};
use crate::Result;

const RATE: f64 = 16_000.0;
/// Mel frames per timestamp step (0.02 s / 10 ms): Whisper's `input_stride`.
const FRAMES_PER_TIMESTAMP: usize = 2;

/// Tokens with absolute times in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub start: f64,
    pub end: f64,
    /// Text tokens (no special or timestamp tokens).
    pub tokens: Vec<u32>,
}

/// One segment of a window's tokens, times relative to the window's start.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowSegment {
    pub start: f64,
    pub end: f64,
    /// The segment's tokens with its timestamp tokens (what later windows are prompted with).
    pub tokens: Vec<u32>,
}

/// A decoded window split as Whisper's long-form loop splits it.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowSplit {
    pub segments: Vec<WindowSegment>,
    /// Mel frames from this window's start to the next window's.
    pub advance: usize,
}

/// Splits a window's generated tokens (anything from end-of-text on is ignored) into
/// segments and says where the next window starts; `frames` is the number of mel frames of
/// input in the window (less than a window only at the end of the input).
///
/// - Two timestamps in a row close one segment and open the next: the segments are the
///   stretches up to each such pair. If the tokens end with a single timestamp, nothing was
///   said after it: the last stretch is a segment too and the next window starts after this
///   one. Otherwise the text after the last pair is unfinished (cut by the window's edge):
///   it is dropped and the next window starts at the last pair's time, to decode it whole.
/// - Without two timestamps in a row the whole window is one segment, ending at its last
///   timestamp (when it has one beyond 0), and the next window starts after this one.
pub fn split_window(tokens: &[u32], timestamp_begin: u32, eot: u32, frames: usize) -> WindowSplit {
    let end = tokens
        .iter()
        .position(|&t| t == eot)
        .unwrap_or(tokens.len());
    let tokens = &tokens[..end];
    let is_ts = |t: u32| t >= timestamp_begin;
    let time = |t: u32| (t - timestamp_begin) as f64 * TIME_PRECISION;
    let whole = frames as f64 * HOP as f64 / RATE;
    let single_ending =
        tokens.len() >= 2 && !is_ts(tokens[tokens.len() - 2]) && is_ts(tokens[tokens.len() - 1]);
    let mut cuts: Vec<usize> = (1..tokens.len())
        .filter(|&i| is_ts(tokens[i]) && is_ts(tokens[i - 1]))
        .collect();
    if cuts.is_empty() {
        let end = match tokens.iter().rev().find(|&&t| is_ts(t)) {
            Some(&t) if t != timestamp_begin => time(t),
            _ => whole,
        };
        return WindowSplit {
            segments: vec![WindowSegment {
                start: 0.0,
                end,
                tokens: tokens.to_vec(),
            }],
            advance: frames,
        };
    }
    if single_ending {
        cuts.push(tokens.len());
    }
    let mut segments = Vec::with_capacity(cuts.len());
    let mut from = 0;
    for &cut in &cuts {
        let seg = &tokens[from..cut];
        // A stretch starts and ends with a timestamp (the split keeps pairs together).
        segments.push(WindowSegment {
            start: time(seg[0]),
            end: time(seg[seg.len() - 1]),
            tokens: seg.to_vec(),
        });
        from = cut;
    }
    let advance = if single_ending {
        frames
    } else {
        let last = tokens[from - 1];
        // The rules make the last pair's time positive; a degenerate `<|0.00|>` would stall
        // the loop, so it counts as the whole window.
        match (last - timestamp_begin) as usize * FRAMES_PER_TIMESTAMP {
            0 => frames,
            n => n,
        }
    };
    WindowSplit { segments, advance }
}

/// The long-form loop's settings; the defaults are Whisper's (and faster-whisper's).
#[derive(Clone, Debug)]
pub struct LongFormOptions {
    /// Decode with `<|notimestamps|>`: each window is one segment and the next window starts
    /// after it (faster-whisper's `without_timestamps`). Off: timestamps steer the windows
    /// (shown or not).
    pub without_timestamps: bool,
    /// Prompt each window with the text so far (`<|startofprev|>`).
    pub condition_on_previous_text: bool,
    /// Temperatures tried in turn while a window's text is rejected (0: greedy or beam
    /// search). Empty: `[0]`.
    pub temperatures: Vec<f32>,
    /// Rejects text whose zlib compression ratio is above this (repetition loops). Needs
    /// [`Transcriber::with_text`].
    pub compression_ratio_threshold: Option<f64>,
    /// Rejects text whose mean log-probability per token is below this.
    pub logprob_threshold: Option<f64>,
    /// Skips a window whose no-speech probability is above this, unless its mean
    /// log-probability is above `logprob_threshold`.
    pub no_speech_threshold: Option<f64>,
    /// Text decoded at a temperature above this does not prompt later windows.
    pub prompt_reset_on_temperature: f32,
    /// Samples drawn at each temperature above 0.
    pub best_of: usize,
}

impl Default for LongFormOptions {
    fn default() -> Self {
        LongFormOptions {
            without_timestamps: false,
            condition_on_previous_text: true,
            temperatures: vec![0.0, 0.2, 0.4, 0.6, 0.8, 1.0],
            compression_ratio_threshold: Some(2.4),
            logprob_threshold: Some(-1.0),
            no_speech_threshold: Some(0.6),
            prompt_reset_on_temperature: 0.5,
            best_of: 5,
        }
    }
}

/// Turns text tokens into text (a tokenizer's decode), for the compression-ratio check and
/// to drop segments that are only blanks.
pub type TextFn<'t> = Box<dyn Fn(&[u32]) -> String + Send + Sync + 't>;

/// Runs Whisper over long audio.
pub struct Transcriber<'a> {
    pub whisper: Whisper<'a>,
    /// How each window is decoded: `max_tokens`, `beam_size` and `seed` apply to
    /// [`Transcriber::transcribe`], whose timestamp mode and temperatures come from
    /// `long_form`; all of them apply to [`Transcriber::window`].
    pub options: DecodeOptions,
    pub long_form: LongFormOptions,
    text: Option<TextFn<'a>>,
}

impl<'a> Transcriber<'a> {
    pub fn new(whisper: Whisper<'a>, options: DecodeOptions) -> Self {
        Transcriber {
            whisper,
            options,
            long_form: LongFormOptions::default(),
            text: None,
        }
    }

    /// Gives the transcriber the text of tokens. Without it the compression-ratio check is
    /// off and a segment counts as blank only when it has no text tokens.
    pub fn with_text(mut self, text: impl Fn(&[u32]) -> String + Send + Sync + 'a) -> Self {
        self.text = Some(Box::new(text));
        self
    }

    /// Transcribes one stretch of at most a window, `offset` samples into the stream, on its
    /// own (no seeking, prompt or fallback).
    pub fn window(&mut self, samples: &[f32], offset: usize) -> Result<(Vec<Piece>, Option<f64>)> {
        self.whisper.encode_window(samples)?;
        let r = self.whisper.decode(&self.options)?;
        let t0 = offset as f64 / RATE;
        let len = samples.len().min(self.whisper.config.window_samples()) as f64 / RATE;
        let eot = self.whisper.config.eot;
        let pieces = if self.options.timestamps && !r.segments.is_empty() {
            r.segments
                .iter()
                .map(|s| Piece {
                    start: t0 + s.start,
                    end: t0 + s.end.min(len),
                    tokens: s.tokens.clone(),
                })
                .collect()
        } else {
            let tokens: Vec<u32> = r.tokens.iter().copied().filter(|&t| t < eot).collect();
            vec![Piece {
                start: t0,
                end: t0 + len,
                tokens,
            }]
        };
        Ok((pieces, r.last_timestamp))
    }

    /// The whole signal (16 kHz) with Whisper's long-form algorithm (see the module docs);
    /// `progress(seconds done, new pieces)` after each window.
    pub fn transcribe(
        &mut self,
        samples: &[f32],
        mut progress: impl FnMut(f64, &[Piece]),
    ) -> Result<Vec<Piece>> {
        let cfg = self.whisper.config.clone();
        let (n_mels, n_frames, eot) = (cfg.n_mels, cfg.n_frames, cfg.eot);
        let timestamps = !self.long_form.without_timestamps && cfg.timestamp_begin.is_some();
        let ts_begin = cfg.timestamp_begin.unwrap_or(u32::MAX);
        // Features of the whole input at once, as the reference computes them: one
        // normalisation floor for all, each window's edge frames see their real neighbours.
        // The input is padded by one hop; its last frame is left out (`content`).
        let t = std::time::Instant::now();
        let mel = LogMel::new(n_mels).features(samples, samples.len() + HOP);
        self.whisper.stats.features_s += t.elapsed().as_secs_f64();
        let total = mel.len() / n_mels;
        let content = total.saturating_sub(1);
        let frame_s = HOP as f64 / RATE;

        let mut window = vec![0f32; n_mels * n_frames];
        let mut all = Vec::new();
        // Tokens of the kept segments (timestamps included); the prompt uses those from
        // `prompt_from` on.
        let mut history: Vec<u32> = Vec::new();
        let mut prompt_from = 0;
        let mut seek = 0usize;
        while seek < content {
            let frames = n_frames.min(content - seek);
            // Past the input the window's features are zeros, as the reference pads them.
            for m in 0..n_mels {
                let row = &mut window[m * n_frames..(m + 1) * n_frames];
                row[..frames].copy_from_slice(&mel[m * total + seek..m * total + seek + frames]);
                row[frames..].fill(0.0);
            }
            self.whisper.encode_features(&window)?;
            let previous = if self.long_form.condition_on_previous_text {
                &history[prompt_from..]
            } else {
                &[]
            };
            let (r, temperature) = self.decode_with_fallback(previous, timestamps, seek)?;
            let offset = seek as f64 * frame_s;
            if self.is_silent(&r) {
                seek += frames;
                progress(seek.min(content) as f64 * frame_s, &[]);
                continue;
            }
            let split = split_window(&r.tokens, ts_begin, eot, frames);
            let mut pieces = Vec::new();
            for s in split.segments {
                let text: Vec<u32> = s.tokens.iter().copied().filter(|&t| t < eot).collect();
                if s.start == s.end || self.is_blank(&text) {
                    continue;
                }
                history.extend_from_slice(&s.tokens);
                pieces.push(Piece {
                    start: offset + s.start,
                    end: offset + s.end,
                    tokens: text,
                });
            }
            if !self.long_form.condition_on_previous_text
                || temperature > self.long_form.prompt_reset_on_temperature
            {
                prompt_from = history.len();
            }
            seek += split.advance;
            progress(seek.min(content) as f64 * frame_s, &pieces);
            all.extend(pieces);
        }
        Ok(all)
    }

    /// Decodes the encoded window at each temperature in turn until the text passes the
    /// compression-ratio and log-probability checks (or the window looks silent); when none
    /// passes, the most likely of those not too repetitive (else of all). Returns the result
    /// and the last temperature tried.
    fn decode_with_fallback(
        &mut self,
        previous: &[u32],
        timestamps: bool,
        seek: usize,
    ) -> Result<(WindowResult, f32)> {
        let lf = self.long_form.clone();
        let eot = self.whisper.config.eot;
        let temperatures = if lf.temperatures.is_empty() {
            vec![0.0]
        } else {
            lf.temperatures
        };
        let below = |v: f64, th: Option<f64>| th.is_some_and(|th| v < th);
        let mut tried: Vec<(WindowResult, f64, bool)> = Vec::new();
        let mut last_t = 0.0;
        for &t in &temperatures {
            last_t = t;
            let opts = DecodeOptions {
                timestamps,
                temperature: t,
                best_of: lf.best_of,
                // A different stream of samples for every window.
                seed: self.options.seed.wrapping_add(seek as u64),
                ..self.options.clone()
            };
            let r = self.whisper.decode_after(&opts, previous)?;
            let avg = r.avg_logprob(eot);
            let ratio = self.compression_ratio(&r.tokens);
            let repetitive =
                matches!((ratio, lf.compression_ratio_threshold), (Some(c), Some(th)) if c > th);
            let not_repetitive =
                matches!((ratio, lf.compression_ratio_threshold), (Some(c), Some(th)) if c <= th);
            let unlikely = below(avg, lf.logprob_threshold);
            // Silence is not worth another try: the window will be skipped.
            let silent = lf
                .no_speech_threshold
                .is_some_and(|th| r.no_speech_prob > th)
                && unlikely;
            if silent || !(repetitive || unlikely) {
                return Ok((r, t));
            }
            tried.push((r, avg, not_repetitive));
        }
        let pool: Vec<_> = if tried.iter().any(|x| x.2) {
            tried.into_iter().filter(|x| x.2).collect()
        } else {
            tried
        };
        let mut best: Option<(WindowResult, f64)> = None;
        for (r, avg, _) in pool {
            if best.as_ref().is_none_or(|(_, b)| avg > *b) {
                best = Some((r, avg));
            }
        }
        Ok((best.map(|(r, _)| r).unwrap_or_default(), last_t))
    }

    /// The no-speech check: likely silence and text not likely enough to keep anyway.
    fn is_silent(&self, r: &WindowResult) -> bool {
        let lf = &self.long_form;
        let Some(th) = lf.no_speech_threshold else {
            return false;
        };
        let likely = lf
            .logprob_threshold
            .is_some_and(|lp| r.avg_logprob(self.whisper.config.eot) > lp);
        r.no_speech_prob > th && !likely
    }

    fn is_blank(&self, text: &[u32]) -> bool {
        match &self.text {
            Some(f) => f(text).trim().is_empty(),
            None => text.is_empty(),
        }
    }

    /// zlib compression ratio of the text of `tokens`' text tokens (None without text).
    fn compression_ratio(&self, tokens: &[u32]) -> Option<f64> {
        let f = self.text.as_ref()?;
        let eot = self.whisper.config.eot;
        let ids: Vec<u32> = tokens.iter().copied().filter(|&t| t < eot).collect();
        Some(compression_ratio(f(&ids).trim()))
    }

    /// Only the given speech segments: neighbours are merged into chunks of at most one
    /// window (a longer segment is cut into windows), each chunk transcribed on its own.
    pub fn transcribe_segments(
        &mut self,
        samples: &[f32],
        segments: &[Segment],
        mut progress: impl FnMut(f64, &[Piece]),
    ) -> Result<Vec<Piece>> {
        let mut all = Vec::new();
        for (start, end) in chunk_segments(
            segments,
            self.whisper.config.window_samples(),
            samples.len(),
        ) {
            let (pieces, _) = self.window(&samples[start..end], start)?;
            progress(end as f64 / RATE, &pieces);
            all.extend(pieces);
        }
        Ok(all)
    }
}

/// Bytes of `text` over bytes of its zlib stream (level 6, Python's `zlib.compress`
/// default; this deflate may differ from zlib's by a few bytes): high for repetitive text.
pub fn compression_ratio(text: &str) -> f64 {
    let bytes = text.as_bytes();
    let packed = miniz_oxide::deflate::compress_to_vec_zlib(bytes, 6);
    bytes.len() as f64 / packed.len().max(1) as f64
}

/// Groups speech segments into chunks no longer than `win` samples.
pub fn chunk_segments(segments: &[Segment], win: usize, len: usize) -> Vec<(usize, usize)> {
    let mut chunks: Vec<(usize, usize)> = Vec::new();
    for s in segments {
        let (mut start, end) = (s.start.min(len), s.end.min(len));
        while end - start > win {
            chunks.push((start, start + win));
            start += win;
        }
        if start >= end {
            continue;
        }
        match chunks.last_mut() {
            Some(last) if end - last.0 <= win => last.1 = end,
            _ => chunks.push((start, end)),
        }
    }
    chunks
}

/// Streaming: feed audio as it arrives; text comes out when a speech segment ends (or a
/// window's worth of speech has accumulated).
pub struct StreamingTranscriber<'a, 'b> {
    pub transcriber: Transcriber<'a>,
    vad: Vad<'b>,
    params: SegmentParams,
    /// Samples not yet transcribed, starting at `base` in the stream (a frame multiple).
    buffer: Vec<f32>,
    probs: Vec<f32>,
    base: usize,
}

impl<'a, 'b> StreamingTranscriber<'a, 'b> {
    pub fn new(transcriber: Transcriber<'a>, mut vad: Vad<'b>, params: SegmentParams) -> Self {
        vad.reset();
        StreamingTranscriber {
            transcriber,
            vad,
            params,
            buffer: Vec::new(),
            probs: Vec::new(),
            base: 0,
        }
    }

    /// Feeds 16 kHz samples; returns the text pieces completed by them.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<Piece>> {
        self.buffer.extend_from_slice(samples);
        self.probs.extend(self.vad.push(samples)?);
        self.drain(false)
    }

    /// Ends the stream: transcribes what is left.
    pub fn finish(&mut self) -> Result<Vec<Piece>> {
        self.probs.extend(self.vad.finish()?);
        self.drain(true)
    }

    fn drain(&mut self, last: bool) -> Result<Vec<Piece>> {
        let mut out = Vec::new();
        let win = self.transcriber.whisper.config.window_samples();
        let framed = self.probs.len() * FRAME;
        let len = if last {
            self.buffer.len()
        } else {
            framed.min(self.buffer.len())
        };
        let segments = segments_from_probs(&self.probs, len, &self.params);
        // A segment is closed once the stream is past its end (padding included) by the
        // minimum silence; an open one is cut when it reaches a window.
        let settle =
            (self.params.min_silence_ms as usize + self.params.speech_pad_ms as usize) * 16;
        let mut done_to = 0usize;
        let mut closed: Vec<Segment> = Vec::new();
        for s in &segments {
            if last || s.end + settle < len {
                closed.push(*s);
                done_to = s.end;
            } else if s.end - s.start >= win {
                closed.push(Segment {
                    start: s.start,
                    end: s.start + win,
                });
                done_to = s.start + win;
            }
        }
        if closed.is_empty() {
            // Nothing to say: drop silence older than the settle time (keep whole frames).
            if !last && segments.is_empty() && len > settle + FRAME {
                self.discard((len - settle) / FRAME * FRAME);
            }
            return Ok(out);
        }
        for (start, end) in chunk_segments(&closed, win, self.buffer.len()) {
            let (pieces, _) = self
                .transcriber
                .window(&self.buffer[start..end], self.base + start)?;
            out.extend(pieces);
        }
        if last {
            self.discard(self.buffer.len());
        } else {
            self.discard(done_to / FRAME * FRAME);
        }
        Ok(out)
    }

    fn discard(&mut self, n: usize) {
        let n = n.min(self.buffer.len());
        self.buffer.drain(..n);
        self.probs.drain(..(n / FRAME).min(self.probs.len()));
        self.base += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Text tokens are below EOT, timestamps from TS on (TS + n is n * 0.02 s).
    const EOT: u32 = 50;
    const TS: u32 = 100;
    const FRAMES: usize = 3000;

    fn seg(start: f64, end: f64, tokens: &[u32]) -> WindowSegment {
        WindowSegment {
            start,
            end,
            tokens: tokens.to_vec(),
        }
    }

    fn split(tokens: &[u32]) -> WindowSplit {
        split_window(tokens, TS, EOT, FRAMES)
    }

    #[test]
    fn single_timestamp_ending_keeps_every_segment_and_moves_a_window() {
        // [0.0 a b 1.0][1.0 c d 2.0] EOT: nothing said after 2.0 s.
        let s = split(&[TS, 1, 2, TS + 50, TS + 50, 3, 4, TS + 100, EOT]);
        assert_eq!(
            s.segments,
            [
                seg(0.0, 1.0, &[TS, 1, 2, TS + 50]),
                seg(1.0, 2.0, &[TS + 50, 3, 4, TS + 100])
            ]
        );
        assert_eq!(s.advance, FRAMES);
    }

    #[test]
    fn two_timestamp_ending_seeks_to_the_last_pair() {
        // [0.0 a 1.0][1.0 b 2.0][2.0 ... a segment opened and never closed.
        let s = split(&[TS, 1, TS + 50, TS + 50, 2, TS + 100, TS + 100, EOT]);
        assert_eq!(
            s.segments,
            [
                seg(0.0, 1.0, &[TS, 1, TS + 50]),
                seg(1.0, 2.0, &[TS + 50, 2, TS + 100])
            ]
        );
        // 2.0 s = 100 timestamp steps = 200 mel frames.
        assert_eq!(s.advance, 200);
    }

    #[test]
    fn segment_cut_mid_window_is_dropped_and_decoded_again() {
        // The window's edge (or the token limit) cuts "c d": the next window starts at 1.0 s.
        let s = split(&[TS, 1, 2, TS + 50, TS + 50, 3, 4]);
        assert_eq!(s.segments, [seg(0.0, 1.0, &[TS, 1, 2, TS + 50])]);
        assert_eq!(s.advance, 100);
    }

    #[test]
    fn no_timestamps_make_one_segment_of_the_window() {
        let s = split(&[1, 2, 3, EOT]);
        assert_eq!(s.segments, [seg(0.0, 30.0, &[1, 2, 3])]);
        assert_eq!(s.advance, FRAMES);
        // The last window of an input: only its frames count.
        let s = split_window(&[1, 2, EOT], TS, EOT, 1234);
        assert_eq!(s.segments, [seg(0.0, 12.34, &[1, 2])]);
        assert_eq!(s.advance, 1234);
    }

    #[test]
    fn one_pair_without_a_follower_ends_at_its_timestamp() {
        let s = split(&[TS + 10, 1, 2, TS + 150, EOT]);
        assert_eq!(s.segments, [seg(0.0, 3.0, &[TS + 10, 1, 2, TS + 150])]);
        assert_eq!(s.advance, FRAMES);
    }

    #[test]
    fn a_window_without_speech_moves_a_window() {
        for tokens in [&[EOT][..], &[], &[TS, EOT]] {
            let s = split(tokens);
            assert_eq!(s.advance, FRAMES, "{tokens:?}");
            assert_eq!(s.segments.len(), 1);
            assert!(s.segments[0].tokens.iter().all(|&t| t >= TS));
        }
    }

    #[test]
    fn tokens_after_end_of_text_are_ignored() {
        assert_eq!(split(&[1, EOT, TS + 5, TS + 5, 2]), split(&[1, EOT]));
    }

    #[test]
    fn a_pair_at_zero_cannot_stall_the_loop() {
        let s = split(&[TS, TS, 1]);
        assert_eq!(s.advance, FRAMES);
    }

    #[test]
    fn compression_ratio_flags_repetition() {
        let plain = "The committee met on Tuesday morning to review the budget.";
        assert!(
            compression_ratio(plain) < 2.4,
            "{}",
            compression_ratio(plain)
        );
        let looped = "Thank you. ".repeat(20);
        assert!(
            compression_ratio(&looped) > 2.4,
            "{}",
            compression_ratio(&looped)
        );
        assert_eq!(compression_ratio(""), 0.0);
    }
}
