//! Silero VAD, streaming, on an ExecuTorch program, and the segmenter that turns its
//! probabilities into speech segments.
//!
//! The program (`tools/export/export_speech.py vad`) takes `x` [1, 576] — the last 64
//! samples of the previous chunk (zeros at first) followed by a 512-sample chunk at 16 kHz —
//! and the LSTM state [2, 1, 128]; it returns the speech probability [1, 1] and the new state.
//! [`Vad`] keeps the context and the state between calls, as the package's wrapper does, so
//! feeding audio in any pieces gives the same probabilities as feeding it whole.
//!
//! # Segments
//!
//! [`segments_from_probs`] gives the segments silero-vad's `get_speech_timestamps` gives for
//! the same probabilities (the goldens in `testdata/speech/vad_goldens.json` come from that
//! package). The rules, everything in samples:
//!
//! - **Frames and rates.** Frame `i` covers `[i * FRAME, (i + 1) * FRAME)` and happens "at"
//!   its start; the frames cover `audio_len` samples, the last one zero-padded
//!   ([`Vad::finish`]). A frame is always [`FRAME`] (512) samples: the program is 16 kHz
//!   only, and callers resample to it (silero-vad's 256-sample windows at 8 kHz and its
//!   decimation of input at multiples of 16 kHz have no counterpart here). [`SegmentParams::sample_rate`] only converts
//!   the millisecond and second parameters, to `rate * ms / 1000` samples, kept fractional
//!   for the comparisons below.
//! - **Hysteresis.** A frame is *loud* if its probability is >= `threshold`, *quiet* if it is
//!   < the negative threshold (default `max(threshold - 0.15, 0.01)`); with the defaults a
//!   frame in between is neither and changes nothing. Outside speech a loud frame opens a
//!   segment at its start. Inside, a quiet frame starts a silence (unless one is running)
//!   and a loud frame ends the running silence. A frame that is both (a negative threshold
//!   above the threshold) first ends the old silence, then starts a new one.
//! - **Minimum silence.** The segment closes at the first quiet frame starting at least
//!   `min_silence_ms` after the running silence's start (0 ms: at its first frame); it ends
//!   where the silence started.
//! - **Minimum speech.** A segment closed by silence, or still open at the end of the audio,
//!   is kept only if strictly longer than `min_speech_ms`. Pieces split off by the maximum
//!   below are always kept.
//! - **Maximum speech.** `max_speech_s` bounds a segment with its padding: at each frame
//!   (except the one that opened the segment) starting more than
//!   `rate * max_speech_s - FRAME - 2 * pad` after the segment's start, the segment is split,
//!   after the frame's loud effect and before its quiet one. Where:
//!   - with `use_max_possible_silence` (the default): among the silences of the segment that
//!     speech resumed after and that lasted, up to the resuming frame, more than
//!     `min_silence_at_max_speech_ms`, the longest (the earliest of equals). The piece ends
//!     where it started; the rest becomes a new segment from the frame where speech resumed.
//!   - without it: the latest silence seen, at one of its quiet frames, to have run more than
//!     `min_silence_at_max_speech_ms`. The piece ends where it started; the new segment
//!     starts where speech first resumed after it, or if it has not (the silence is still
//!     running) speech is over until the next loud frame after this one. A silence that
//!     starts on the loud-and-quiet frame where speech resumed after the previous such
//!     silence counts as resumed on that frame.
//!   - with no such silence, a hard cut: the piece ends at this frame's start, and speech is
//!     over until the next loud frame after this one (this frame cannot reopen it).
//!
//!   A new segment after a split remembers no silence, and none is running: a quiet split
//!   frame starts one.
//! - **End of audio.** A segment still open at the end ends at `audio_len` (a trailing
//!   silence shorter than the minimum is part of it), subject to the minimum speech.
//! - **Padding.** Last, each segment grows by `pad = rate * speech_pad_ms / 1000` samples at
//!   both ends, staying within `[0, audio_len]`. Two neighbours whose gap is smaller than
//!   `2 * pad` share it instead, each taking half (rounded down). Growth is in whole samples
//!   (the pad rounded down), while the `2 * pad` test uses the exact value. At 8 and 16 kHz
//!   the pad is whole; at rates where it is not, silero-vad rounds the padded start instead
//!   of the pad, so its padded starts (away from 0) are one sample earlier.

use pteron::{Method, ScalarType, ValueSpec as Value};
use pteron::{MethodOptions, Program};

use crate::{output_f32, Error, Result};

/// Samples per VAD frame at 16 kHz (32 ms).
pub const FRAME: usize = 512;
/// Samples of the previous frame each call sees.
pub const CONTEXT: usize = 64;
const STATE: [usize; 3] = [2, 1, 128];

/// The real Silero VAD program (16 kHz), exported from the `silero-vad` package's
/// TorchScript model (MIT licence), so `pteron vad` works without a model path.
pub static SILERO_VAD_PTE: &[u8] = include_bytes!("../../../testdata/speech/silero_vad.pte");

/// A streaming voice-activity detector.
pub struct Vad<'a> {
    method: Method<'a>,
    /// The 576 samples of the next call: context, then the frame being filled.
    window: Vec<f32>,
    /// Samples of the current frame received so far.
    filled: usize,
    state: Vec<f32>,
    frames: usize,
}

fn tensor_spec(method: &Method<'_>, i: usize, want: &[usize]) -> Result<()> {
    match method.input_spec(i) {
        Some(Value::Tensor(t)) if t.info.dtype() == ScalarType::Float && t.info.sizes() == want => {
            Ok(())
        }
        Some(Value::Tensor(t)) => Err(Error::Model(format!(
            "VAD input {i} is {} {:?}; expected float {want:?}",
            t.info.dtype(),
            t.info.sizes()
        ))),
        _ => Err(Error::Model(format!("VAD input {i} is not a tensor"))),
    }
}

impl<'a> Vad<'a> {
    /// Loads `forward` and checks its signature.
    pub fn new(program: &Program<'a>, options: MethodOptions) -> Result<Self> {
        let method = program.load_method_with("forward", options)?;
        if method.num_inputs() != 2 || method.num_outputs() != 2 {
            return Err(Error::Model(format!(
                "VAD forward takes {} inputs and returns {} outputs; expected (x, state) -> (prob, state)",
                method.num_inputs(),
                method.num_outputs()
            )));
        }
        tensor_spec(&method, 0, &[1, CONTEXT + FRAME])?;
        tensor_spec(&method, 1, &STATE)?;
        Ok(Vad {
            method,
            window: vec![0.0; CONTEXT + FRAME],
            filled: 0,
            state: vec![0.0; STATE.iter().product()],
            frames: 0,
        })
    }

    /// Forgets the stream: zero state and context, no partial frame.
    pub fn reset(&mut self) {
        self.window.fill(0.0);
        self.state.fill(0.0);
        self.filled = 0;
        self.frames = 0;
    }

    /// Frames computed since the last reset.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Feeds 16 kHz samples; returns the speech probability of every frame they complete.
    pub fn push(&mut self, mut samples: &[f32]) -> Result<Vec<f32>> {
        let mut probs = Vec::new();
        while !samples.is_empty() {
            let take = (FRAME - self.filled).min(samples.len());
            let at = CONTEXT + self.filled;
            self.window[at..at + take].copy_from_slice(&samples[..take]);
            self.filled += take;
            samples = &samples[take..];
            if self.filled == FRAME {
                probs.push(self.run_frame()?);
            }
        }
        Ok(probs)
    }

    /// Ends the stream: a partial frame is zero-padded and computed (as
    /// `get_speech_timestamps` does with the last chunk). Returns its probability, if any.
    pub fn finish(&mut self) -> Result<Option<f32>> {
        if self.filled == 0 {
            return Ok(None);
        }
        self.window[CONTEXT + self.filled..].fill(0.0);
        self.filled = FRAME;
        Ok(Some(self.run_frame()?))
    }

    /// Probabilities of a whole signal (16 kHz), from a fresh state.
    pub fn probabilities(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        self.reset();
        let mut probs = self.push(samples)?;
        probs.extend(self.finish()?);
        Ok(probs)
    }

    fn run_frame(&mut self) -> Result<f32> {
        self.method.set_input_tensor(
            0,
            ScalarType::Float,
            &[1, CONTEXT + FRAME],
            bytemuck::cast_slice(&self.window),
        )?;
        self.method.set_input_tensor(
            1,
            ScalarType::Float,
            &STATE,
            bytemuck::cast_slice(&self.state),
        )?;
        self.method.execute()?;
        let mut prob = Vec::with_capacity(1);
        output_f32(&self.method, 0, "VAD", &mut prob)?;
        let mut state = std::mem::take(&mut self.state);
        output_f32(&self.method, 1, "VAD", &mut state)?;
        if prob.len() != 1 || state.len() != STATE.iter().product::<usize>() {
            return Err(Error::Model(format!(
                "VAD returned {} probabilities and a state of {} values",
                prob.len(),
                state.len()
            )));
        }
        self.state = state;
        // The frame's last 64 samples are the next call's context.
        self.window.copy_within(FRAME.., 0);
        self.filled = 0;
        self.frames += 1;
        Ok(prob[0])
    }
}

/// A stretch of speech, in samples at the VAD's rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: usize,
    pub end: usize,
}

/// Thresholds of [`segments_from_probs`] (silero-vad's `get_speech_timestamps` parameters
/// and defaults; the module documentation has the rules).
#[derive(Clone, Debug)]
pub struct SegmentParams {
    /// Converts the durations below to samples (frames are [`FRAME`] samples regardless).
    pub sample_rate: u32,
    /// Speech starts at a frame with probability >= this.
    pub threshold: f32,
    /// Speech ends after frames below this (default `threshold - 0.15`, at least 0.01).
    pub neg_threshold: Option<f32>,
    pub min_speech_ms: u32,
    pub max_speech_s: f64,
    pub min_silence_ms: u32,
    pub speech_pad_ms: u32,
    /// Silences longer than this are places to split over-long speech.
    pub min_silence_at_max_speech_ms: u32,
    /// Split over-long speech at the longest such silence (else at the latest one).
    pub use_max_possible_silence: bool,
}

impl Default for SegmentParams {
    fn default() -> Self {
        SegmentParams {
            sample_rate: 16_000,
            threshold: 0.5,
            neg_threshold: None,
            min_speech_ms: 250,
            max_speech_s: f64::INFINITY,
            min_silence_ms: 100,
            speech_pad_ms: 30,
            min_silence_at_max_speech_ms: 98,
            use_max_possible_silence: true,
        }
    }
}

/// Speech segments, in samples, from per-frame probabilities (frames of [`FRAME`] samples)
/// and the signal's length `audio_len`, by the rules in the module documentation.
pub fn segments_from_probs(probs: &[f32], audio_len: usize, p: &SegmentParams) -> Vec<Segment> {
    let rules = Rules::new(p);
    let mut segments = Vec::new();
    // The segment being built; `None` outside speech.
    let mut open: Option<Open> = None;
    for (i, &prob) in probs.iter().enumerate() {
        let at = i * FRAME;
        let loud = prob >= rules.threshold;
        let quiet = prob < rules.neg_threshold;
        let Some(seg) = open.as_mut() else {
            if loud {
                open = Some(Open::new(at));
            }
            continue;
        };
        if loud {
            seg.loud(at, &rules);
        }
        if span(seg.start, at) > rules.max_speech {
            let (end, next) = seg.split_point(at);
            segments.push(Segment {
                start: seg.start,
                end,
            });
            match next {
                Some(start) => *seg = Open::new(start),
                None => {
                    // This frame cannot open the next segment, even if loud.
                    open = None;
                    continue;
                }
            }
        }
        if quiet {
            if let Some(end) = seg.quiet(at, &rules) {
                if span(seg.start, end) > rules.min_speech {
                    segments.push(Segment {
                        start: seg.start,
                        end,
                    });
                }
                open = None;
            }
        }
    }
    if let Some(seg) = open {
        if span(seg.start, audio_len) > rules.min_speech {
            segments.push(Segment {
                start: seg.start,
                end: audio_len,
            });
        }
    }
    pad(&mut segments, audio_len, rules.pad);
    segments
}

/// [`SegmentParams`] in samples. Durations stay fractional: the comparisons are against
/// `rate * ms / 1000` exactly, as silero-vad makes them.
struct Rules {
    threshold: f32,
    neg_threshold: f32,
    min_speech: f64,
    min_silence: f64,
    /// A segment is split at a frame starting more than this after it.
    max_speech: f64,
    /// Silences longer than this are places to split an over-long segment.
    split_silence: f64,
    /// Split at the longest such silence (else at the latest one).
    longest: bool,
    pad: f64,
}

impl Rules {
    fn new(p: &SegmentParams) -> Self {
        let rate = p.sample_rate as f64;
        let samples = |ms: u32| rate * ms as f64 / 1000.0;
        let pad = samples(p.speech_pad_ms);
        Rules {
            threshold: p.threshold,
            neg_threshold: p.neg_threshold.unwrap_or((p.threshold - 0.15).max(0.01)),
            min_speech: samples(p.min_speech_ms),
            min_silence: samples(p.min_silence_ms),
            // Leaves room for the frame in progress and both paddings.
            max_speech: rate * p.max_speech_s - FRAME as f64 - 2.0 * pad,
            split_silence: samples(p.min_silence_at_max_speech_ms),
            longest: p.use_max_possible_silence,
            pad,
        }
    }
}

/// Samples from `from` to `to`, signed.
fn span(from: usize, to: usize) -> f64 {
    to as f64 - from as f64
}

/// A silence inside a segment, from its first quiet frame to the loud frame that ended it.
#[derive(Clone, Copy)]
struct Gap {
    start: usize,
    resumed: usize,
}

/// The latest silence that ran long enough to split at (latest-silence mode), and the loud
/// frame where speech first resumed after it, once there is one.
#[derive(Clone, Copy)]
struct LongSilence {
    start: usize,
    resumed: Option<usize>,
}

/// A segment in progress.
struct Open {
    start: usize,
    /// First quiet frame of the silence running now.
    silence: Option<usize>,
    /// Ended silences longer than the split minimum (longest-silence mode).
    gaps: Vec<Gap>,
    last_long: Option<LongSilence>,
}

impl Open {
    fn new(start: usize) -> Self {
        Open {
            start,
            silence: None,
            gaps: Vec::new(),
            last_long: None,
        }
    }

    /// A loud frame at `at` ends the running silence.
    fn loud(&mut self, at: usize, rules: &Rules) {
        let Some(start) = self.silence.take() else {
            return;
        };
        if rules.longest && span(start, at) > rules.split_silence {
            self.gaps.push(Gap { start, resumed: at });
        }
        if let Some(long) = &mut self.last_long {
            long.resumed.get_or_insert(at);
        }
    }

    /// A quiet frame at `at` starts or extends the silence; returns the segment's end once
    /// the silence has lasted the minimum.
    fn quiet(&mut self, at: usize, rules: &Rules) -> Option<usize> {
        let start = *self.silence.get_or_insert(at);
        let run = span(start, at);
        if !rules.longest && run > rules.split_silence {
            // Not resumed yet, unless speech resumed after the previous long silence on this
            // silence's first frame (a frame both loud and quiet).
            let resumed = self
                .last_long
                .and_then(|long| long.resumed)
                .filter(|&resumed| resumed == start);
            self.last_long = Some(LongSilence { start, resumed });
        }
        (run >= rules.min_silence).then_some(start)
    }

    /// Where an over-long segment ends when split at frame `at`, and where the next one
    /// starts (`None`: speech is over until the next loud frame after `at`).
    fn split_point(&self, at: usize) -> (usize, Option<usize>) {
        // The longest gap, the first of equals.
        let longest = self.gaps.iter().copied().reduce(|best, g| {
            if g.resumed - g.start > best.resumed - best.start {
                g
            } else {
                best
            }
        });
        if let Some(g) = longest {
            (g.start, Some(g.resumed))
        } else if let Some(long) = self.last_long {
            (long.start, long.resumed)
        } else {
            (at, None)
        }
    }
}

/// Grows every segment by `pad` samples (rounded down) at both ends within `[0, audio_len]`;
/// neighbours closer than `2 * pad` share their gap, half each (rounded down).
fn pad(segments: &mut [Segment], audio_len: usize, pad: f64) {
    let whole = pad as usize;
    if let Some(first) = segments.first_mut() {
        first.start = first.start.saturating_sub(whole);
    }
    if let Some(last) = segments.last_mut() {
        last.end = (last.end + whole).min(audio_len);
    }
    // Segments come ordered and disjoint. Each gap is measured before either side moves:
    // step `i` only moves the end of `i - 1` and the start of `i`.
    for i in 1..segments.len() {
        let gap = segments[i].start - segments[i - 1].end;
        let grow = if (gap as f64) < 2.0 * pad {
            gap / 2
        } else {
            whole
        };
        segments[i - 1].end = (segments[i - 1].end + grow).min(audio_len);
        segments[i].start = segments[i].start.saturating_sub(grow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: usize = FRAME;

    fn seg(probs: &[f32], len: usize) -> Vec<(usize, usize)> {
        run(probs, len, &SegmentParams::default())
    }

    fn run(probs: &[f32], len: usize, p: &SegmentParams) -> Vec<(usize, usize)> {
        segments_from_probs(probs, len, p)
            .iter()
            .map(|s| (s.start, s.end))
            .collect()
    }

    /// Probabilities from (value, frames) runs.
    fn frames(runs: &[(f32, usize)]) -> Vec<f32> {
        runs.iter().flat_map(|&(v, n)| vec![v; n]).collect()
    }

    /// No minimum durations and no padding, so one rule at a time shows.
    fn bare() -> SegmentParams {
        SegmentParams {
            min_speech_ms: 0,
            min_silence_ms: 0,
            speech_pad_ms: 0,
            ..Default::default()
        }
    }

    const LOUD: f32 = 0.9;
    const QUIET: f32 = 0.1;
    /// Between the default thresholds (0.35 and 0.5).
    const MID: f32 = 0.42;

    #[test]
    fn threshold_opens_and_negative_threshold_closes() {
        let p = SegmentParams {
            neg_threshold: Some(0.3),
            ..bare()
        };
        // 0.5 is loud, 0.3 is not quiet, 0.29 is; frames in between change nothing.
        let probs = [0.49, 0.5, 0.4, 0.3, 0.29, 0.45, 0.6, 0.2];
        assert_eq!(
            run(&probs, probs.len() * F, &p),
            vec![(F, 4 * F), (6 * F, 7 * F)]
        );
    }

    #[test]
    fn default_negative_threshold() {
        // threshold - 0.15 ...
        let probs = [LOUD, 0.36, 0.34];
        assert_eq!(run(&probs, 3 * F, &bare()), vec![(0, 2 * F)]);
        // ... but at least 0.01.
        let p = SegmentParams {
            threshold: 0.1,
            ..bare()
        };
        let probs = [0.2, 0.02, 0.005];
        assert_eq!(run(&probs, 3 * F, &p), vec![(0, 2 * F)]);
    }

    #[test]
    fn a_frame_above_both_thresholds_ends_a_silence_then_starts_one() {
        // Negative threshold above the threshold: 0.6 is loud and quiet.
        let p = SegmentParams {
            threshold: 0.5,
            neg_threshold: Some(0.7),
            min_silence_ms: 64,
            ..bare()
        };
        // Quiet frames that are not loud close the segment after 2 frames ...
        let probs = [LOUD, QUIET, QUIET, QUIET, LOUD];
        assert_eq!(run(&probs, 5 * F, &p), vec![(0, F), (4 * F, 5 * F)]);
        // ... but each loud-and-quiet frame restarts the silence, which never lasts.
        let probs = [LOUD, 0.6, 0.6, 0.6, LOUD];
        assert_eq!(run(&probs, 5 * F, &p), vec![(0, 5 * F)]);
    }

    #[test]
    fn minimum_silence() {
        let p = SegmentParams {
            min_silence_ms: 96, // 3 frames
            ..bare()
        };
        // The silence runs through frames that are not quiet; it closes 3 frames after it
        // started, at its start.
        let probs = frames(&[(LOUD, 4), (QUIET, 1), (MID, 2), (QUIET, 1), (LOUD, 2)]);
        assert_eq!(
            run(&probs, probs.len() * F, &p),
            vec![(0, 4 * F), (8 * F, 10 * F)]
        );
        // A loud frame 2 frames in ends the silence: one segment to the end.
        let probs = frames(&[(LOUD, 4), (QUIET, 2), (LOUD, 1), (QUIET, 2), (LOUD, 1)]);
        assert_eq!(run(&probs, probs.len() * F, &p), vec![(0, 10 * F)]);
        // One sample more than 3 frames needs a fourth.
        let p = SegmentParams {
            min_silence_ms: 97,
            ..p
        };
        let probs = frames(&[(LOUD, 4), (QUIET, 4), (LOUD, 1)]);
        assert_eq!(run(&probs, probs.len() * F, &p), vec![(0, 9 * F)]);
        let probs = frames(&[(LOUD, 4), (QUIET, 5), (LOUD, 1)]);
        assert_eq!(
            run(&probs, probs.len() * F, &p),
            vec![(0, 4 * F), (9 * F, 10 * F)]
        );
    }

    #[test]
    fn minimum_speech_is_strict() {
        let p = SegmentParams {
            min_speech_ms: 64, // 2 frames
            ..bare()
        };
        let probs = frames(&[(LOUD, 2), (QUIET, 2), (LOUD, 3), (QUIET, 1)]);
        assert_eq!(run(&probs, probs.len() * F, &p), vec![(4 * F, 7 * F)]);
    }

    #[test]
    fn end_of_audio() {
        // An open segment ends at the audio's end, a trailing short silence included.
        let p = SegmentParams {
            min_silence_ms: 100,
            ..bare()
        };
        let probs = frames(&[(QUIET, 1), (LOUD, 6), (QUIET, 2)]);
        let len = 9 * F - 100;
        assert_eq!(run(&probs, len, &p), vec![(F, len)]);
        // The minimum speech applies there too.
        let p = SegmentParams {
            min_speech_ms: 250, // 4000 samples
            ..p
        };
        assert!(run(&probs, F + 4000, &p).is_empty());
        assert_eq!(run(&probs, F + 4001, &p), vec![(F, F + 4001)]);
    }

    #[test]
    fn padding_and_shared_gaps() {
        let p = SegmentParams {
            speech_pad_ms: 20, // 320 samples; neighbours closer than 640 share
            ..bare()
        };
        // Segments [F, 3F), [4F, 6F) (gap 512: 256 each), [8F, 9F) (gap 1024: padded).
        let probs = frames(&[
            (QUIET, 1),
            (LOUD, 2),
            (QUIET, 1),
            (LOUD, 2),
            (QUIET, 2),
            (LOUD, 1),
        ]);
        let len = probs.len() * F;
        assert_eq!(
            run(&probs, len, &p),
            vec![
                (F - 320, 3 * F + 256),
                (4 * F - 256, 6 * F + 320),
                (8 * F - 320, len)
            ]
        );
        // Padding stops at 0 and at the end; a fractional pad grows by whole samples.
        let p = SegmentParams {
            sample_rate: 22_050,
            speech_pad_ms: 30, // 661.5
            ..bare()
        };
        let probs = frames(&[(LOUD, 2), (QUIET, 3), (LOUD, 2), (QUIET, 2)]);
        assert_eq!(
            run(&probs, probs.len() * F, &p),
            vec![(0, 2 * F + 661), (5 * F - 661, 7 * F + 661)]
        );
    }

    /// Segments over 0.5 s split at frame 15 (15 * 512 > 8000 - 512 >= 14 * 512) with no
    /// padding; silences over 98 ms (1568 samples) are places to split.
    fn max_half_second() -> SegmentParams {
        SegmentParams {
            max_speech_s: 0.5,
            min_silence_ms: 1000,
            ..bare()
        }
    }

    #[test]
    fn max_speech_splits_at_the_longest_silence() {
        // Ended silences [F, 7F) and [8F, 13F); the first is longer.
        let probs = frames(&[(LOUD, 1), (QUIET, 6), (LOUD, 1), (QUIET, 5), (LOUD, 7)]);
        assert_eq!(
            run(&probs, 20 * F, &max_half_second()),
            vec![(0, F), (7 * F, 20 * F)]
        );
        // Of equals, the first.
        let probs = frames(&[
            (LOUD, 1),
            (QUIET, 4),
            (LOUD, 1),
            (QUIET, 4),
            (LOUD, 1),
            (QUIET, 3),
            (LOUD, 6),
        ]);
        assert_eq!(
            run(&probs, 20 * F, &max_half_second()),
            vec![(0, F), (5 * F, 20 * F)]
        );
        // A silence must be strictly longer than min_silence_at_max_speech_ms: at 96 ms
        // (3 frames) a 3-frame silence gives a hard cut, a 4-frame one a split.
        let p = SegmentParams {
            min_silence_at_max_speech_ms: 96,
            ..max_half_second()
        };
        let probs = frames(&[(LOUD, 1), (QUIET, 3), (LOUD, 16)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, 15 * F), (16 * F, 20 * F)]);
        let probs = frames(&[(LOUD, 1), (QUIET, 4), (LOUD, 15)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, F), (5 * F, 20 * F)]);
    }

    #[test]
    fn a_split_forgets_the_silences_before_it() {
        // Silences [F, 7F) and [8F, 13F); the split at frame 15 takes the first, and the rest
        // (from 7F) is too long at frame 22: a hard cut, not a split at the second.
        let probs = frames(&[(LOUD, 1), (QUIET, 6), (LOUD, 1), (QUIET, 5), (LOUD, 22)]);
        assert_eq!(
            run(&probs, 35 * F, &max_half_second()),
            vec![(0, F), (7 * F, 22 * F), (23 * F, 35 * F)]
        );
    }

    #[test]
    fn max_speech_splits_at_the_latest_silence() {
        let p = SegmentParams {
            use_max_possible_silence: false,
            ..max_half_second()
        };
        let probs = frames(&[(LOUD, 1), (QUIET, 6), (LOUD, 1), (QUIET, 5), (LOUD, 7)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, 8 * F), (13 * F, 20 * F)]);
        // The next segment starts where speech first resumed after the silence, though
        // shorter silences followed.
        let probs = frames(&[(LOUD, 1), (QUIET, 6), (LOUD, 2), (QUIET, 2), (LOUD, 9)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, F), (7 * F, 20 * F)]);
        // Here a silence counts once it has run, at a quiet frame, strictly more than
        // min_silence_at_max_speech_ms (96 ms, 3 frames): 4 quiet frames only reach 3 frames.
        let p = SegmentParams {
            min_silence_at_max_speech_ms: 96,
            ..p
        };
        let probs = frames(&[(LOUD, 1), (QUIET, 4), (LOUD, 15)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, 15 * F), (16 * F, 20 * F)]);
        let probs = frames(&[(LOUD, 1), (QUIET, 5), (LOUD, 14)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, F), (6 * F, 20 * F)]);
    }

    #[test]
    fn a_long_silence_from_a_loud_and_quiet_frame_counts_as_resumed() {
        // Frame 6 (0.6, loud and quiet) ends the long silence from frame 1 and starts the one
        // split at: speech resumed on its first frame, so the rest starts there.
        let p = SegmentParams {
            neg_threshold: Some(0.7),
            use_max_possible_silence: false,
            ..max_half_second()
        };
        let probs = frames(&[(LOUD, 1), (QUIET, 5), (0.6, 1), (QUIET, 9), (LOUD, 4)]);
        assert_eq!(run(&probs, 20 * F, &p), vec![(0, 6 * F), (6 * F, 20 * F)]);
    }

    #[test]
    fn max_speech_in_a_running_silence() {
        // At frame 15 the silence from frame 10 is still running.
        let probs = frames(&[(LOUD, 10), (QUIET, 10), (LOUD, 5)]);
        let len = probs.len() * F;
        // Latest-silence mode cuts at its start and waits for speech.
        let p = SegmentParams {
            use_max_possible_silence: false,
            ..max_half_second()
        };
        assert_eq!(run(&probs, len, &p), vec![(0, 10 * F), (20 * F, len)]);
        // Longest mode only knows ended silences: a hard cut.
        assert_eq!(
            run(&probs, len, &max_half_second()),
            vec![(0, 15 * F), (20 * F, len)]
        );
    }

    #[test]
    fn max_speech_hard_cut() {
        // The cut frame cannot reopen: the next segment starts a frame later.
        let probs = vec![LOUD; 30];
        assert_eq!(
            run(&probs, 30 * F, &max_half_second()),
            vec![(0, 15 * F), (16 * F, 30 * F)]
        );
        // A limit of exactly 14 frames (0.48 s - 1 frame) splits at frame 15, not 14.
        let p = SegmentParams {
            max_speech_s: 0.48,
            ..max_half_second()
        };
        assert_eq!(run(&probs, 30 * F, &p), vec![(0, 15 * F), (16 * F, 30 * F)]);
        // The maximum makes room for both paddings: 30 ms each side moves the cut to frame
        // 13 (13 * 512 > 8000 - 512 - 960).
        let p = SegmentParams {
            speech_pad_ms: 30,
            ..max_half_second()
        };
        assert_eq!(
            run(&probs, 30 * F, &p),
            vec![
                (0, 13 * F + 256),
                (14 * F - 256, 27 * F + 256),
                (28 * F - 256, 30 * F)
            ]
        );
    }

    #[test]
    fn hysteresis_min_durations_and_padding() {
        // 10 frames speech, 5 silence (160 ms > 100 ms), 10 speech, then silence.
        let mut p = vec![0.9f32; 10];
        p.extend([0.1; 5]);
        p.extend([0.9; 10]);
        p.extend([0.0; 10]);
        let len = p.len() * FRAME;
        // Ends where the silence started, padded by 480 samples.
        assert_eq!(
            seg(&p, len),
            vec![(0, 10 * 512 + 480), (15 * 512 - 480, 25 * 512 + 480)]
        );
        // A short dip (64 ms < 100 ms) does not split; values between the thresholds neither.
        let mut q = vec![0.9f32; 10];
        q.extend([0.1; 2]);
        q.extend([0.4; 3]);
        q.extend([0.9; 10]);
        assert_eq!(seg(&q, q.len() * FRAME), vec![(0, q.len() * FRAME)]);
        // Speech shorter than 250 ms is dropped.
        let mut r = vec![0.0f32; 5];
        r.extend([0.9; 3]);
        r.extend([0.0; 10]);
        assert!(seg(&r, r.len() * FRAME).is_empty());
    }

    #[test]
    fn close_segments_split_the_gap() {
        // Gap of exactly 4 silent frames: 2048 samples >= 2*480, so each side padded by 480.
        // With min_silence 0 ms the gap can be one frame: 512 < 960, split in halves.
        let params = SegmentParams {
            min_silence_ms: 0,
            ..Default::default()
        };
        let mut p = vec![0.9f32; 10];
        p.push(0.0);
        p.extend([0.9; 10]);
        p.push(0.0);
        let s = segments_from_probs(&p, p.len() * FRAME, &params);
        assert_eq!(
            s,
            vec![
                Segment {
                    start: 0,
                    end: 10 * 512 + 256
                },
                Segment {
                    start: 11 * 512 - 256,
                    end: 21 * 512 + 480
                }
            ]
        );
    }

    #[test]
    fn max_speech_cuts_at_the_longest_silence() {
        let params = SegmentParams {
            max_speech_s: 1.0,
            ..Default::default()
        };
        // 15 frames speech, 4 frames silence (128 ms: remembered, not a split), 20 speech.
        let mut p = vec![0.9f32; 15];
        p.extend([0.2; 4]);
        p.extend([0.9; 20]);
        let s = segments_from_probs(&p, p.len() * FRAME, &params);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[0].start, 0);
        // Cut at the silence start, then padded.
        assert_eq!(s[0].end, 15 * 512 + 480);
    }

    /// xorshift64*: reproducible without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn unit(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 24) as f32
        }
        fn ms(&mut self, default: u32) -> u32 {
            match self.below(4) {
                0 => 32 * self.below(12) as u32,
                1 => self.below(400) as u32,
                2 => self.below(40) as u32,
                _ => default,
            }
        }
    }

    #[test]
    fn random_sequences_give_ordered_segments_inside_the_audio() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for case in 0..5_000 {
            let d = SegmentParams::default();
            let threshold = match rng.below(4) {
                0 => 0.5,
                1 => 0.05 * rng.below(21) as f32,
                _ => rng.unit(),
            };
            let neg_threshold = match rng.below(4) {
                0 => Some(rng.unit()),
                1 => Some(threshold - 0.3 * rng.unit()),
                _ => None,
            };
            let sample_rate =
                [16_000, 16_000, 8_000, 22_050, 44_100, 11_025][rng.below(6) as usize];
            let speech_pad_ms = rng.ms(d.speech_pad_ms);
            let max_speech_s = match rng.below(4) {
                0 => f64::INFINITY,
                1 => 0.02 + 3.0 * rng.unit() as f64,
                // On a frame boundary of the limit, padding included.
                2 => {
                    let pad = sample_rate as f64 * speech_pad_ms as f64 / 1000.0;
                    ((rng.below(40) + 1) as f64 * FRAME as f64 + 2.0 * pad) / sample_rate as f64
                }
                _ => 0.5 * rng.unit() as f64,
            };
            let p = SegmentParams {
                sample_rate,
                threshold,
                neg_threshold,
                min_speech_ms: rng.ms(d.min_speech_ms),
                max_speech_s,
                min_silence_ms: rng.ms(d.min_silence_ms),
                speech_pad_ms,
                min_silence_at_max_speech_ms: rng.ms(d.min_silence_at_max_speech_ms),
                use_max_possible_silence: rng.below(2) == 0,
            };
            let neg = neg_threshold.unwrap_or((threshold - 0.15).max(0.01));
            let mut probs = Vec::new();
            for _ in 0..rng.below(16) {
                let v = match rng.below(12) {
                    0..=2 => threshold + (1.0 - threshold) * rng.unit(),
                    3..=5 => neg * rng.unit(),
                    6 => neg + (threshold - neg) * rng.unit(),
                    7 => threshold,
                    8 => neg,
                    9 => f32::NAN,
                    _ => rng.unit(),
                };
                let longest_run = if rng.below(3) == 0 { 60 } else { 8 };
                let n = 1 + rng.below(longest_run);
                for _ in 0..n {
                    probs.push(if rng.below(10) == 0 { rng.unit() } else { v });
                }
            }
            let audio_len = match probs.len() {
                0 => rng.below(2 * FRAME as u64) as usize,
                n if rng.below(3) == 0 => n * FRAME,
                n => n * FRAME - rng.below(FRAME as u64) as usize,
            };
            let segs = segments_from_probs(&probs, audio_len, &p);
            let ok = segs.iter().all(|s| s.start <= s.end && s.end <= audio_len)
                && segs.windows(2).all(|w| w[0].end <= w[1].start);
            assert!(
                ok,
                "case {case}: {p:?}, audio_len {audio_len}, probs {probs:?}: {segs:?}"
            );
        }
    }
}
