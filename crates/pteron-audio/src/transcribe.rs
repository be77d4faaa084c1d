//! Transcribing audio of any length: 30 s windows (continued from the last timestamp when
//! timestamps are on), speech segments from the VAD grouped into windows, and a streaming
//! transcriber that emits text as speech segments end.

use crate::vad::{segments_from_probs, Segment, SegmentParams, Vad, FRAME};
use crate::whisper::{DecodeOptions, Whisper};
use crate::Result;

const RATE: f64 = 16_000.0;

/// Tokens with absolute times in seconds.
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub start: f64,
    pub end: f64,
    /// Text tokens (no special or timestamp tokens).
    pub tokens: Vec<u32>,
}

/// Runs Whisper over long audio.
pub struct Transcriber<'a> {
    pub whisper: Whisper<'a>,
    pub options: DecodeOptions,
}

impl<'a> Transcriber<'a> {
    pub fn new(whisper: Whisper<'a>, options: DecodeOptions) -> Self {
        Transcriber { whisper, options }
    }

    /// Transcribes one stretch of at most a window, `offset` samples into the stream.
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

    /// The whole signal (16 kHz) in windows; `progress(seconds done, new pieces)` after each.
    pub fn transcribe(
        &mut self,
        samples: &[f32],
        mut progress: impl FnMut(f64, &[Piece]),
    ) -> Result<Vec<Piece>> {
        let win = self.whisper.config.window_samples();
        let mut seek = 0usize;
        let mut all = Vec::new();
        while seek < samples.len() {
            let end = (seek + win).min(samples.len());
            let (pieces, last_ts) = self.window(&samples[seek..end], seek)?;
            // A full window whose text ended at a timestamp continues from there (OpenAI
            // Whisper's seek); otherwise the next window starts after this one.
            let advance = match last_ts {
                Some(t) if end - seek == win && t > 0.0 => ((t * RATE) as usize).min(win),
                _ => end - seek,
            };
            let pieces: Vec<Piece> = if advance < end - seek {
                let cut = (seek + advance) as f64 / RATE;
                pieces.into_iter().filter(|p| p.start < cut).collect()
            } else {
                pieces
            };
            seek += advance.max(1);
            progress(seek.min(samples.len()) as f64 / RATE, &pieces);
            all.extend(pieces);
        }
        Ok(all)
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
