//! Silero VAD, streaming, on an ExecuTorch program.
//!
//! The program (`tools/export/export_speech.py vad`) takes `x` [1, 576] — the last 64
//! samples of the previous chunk (zeros at first) followed by a 512-sample chunk at 16 kHz —
//! and the LSTM state [2, 1, 128]; it returns the speech probability [1, 1] and the new state.
//! [`Vad`] keeps the context and the state between calls, as the package's wrapper does, so
//! feeding audio in any pieces gives the same probabilities as feeding it whole.

use pteron::core::{KernelRegistry, Method, ScalarType, Value};
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
    pub fn new(
        program: &Program<'a>,
        kernels: &KernelRegistry,
        options: MethodOptions,
    ) -> Result<Self> {
        let method = program.load_method_with("forward", kernels, options)?;
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
/// and defaults).
#[derive(Clone, Debug)]
pub struct SegmentParams {
    pub sample_rate: u32,
    /// Speech starts at a frame with probability >= this.
    pub threshold: f32,
    /// Speech ends after frames below this (default `threshold - 0.15`, at least 0.01).
    pub neg_threshold: Option<f32>,
    pub min_speech_ms: u32,
    pub max_speech_s: f64,
    pub min_silence_ms: u32,
    pub speech_pad_ms: u32,
    /// Silences at least this long are remembered as cut points for over-long speech.
    pub min_silence_at_max_speech_ms: u32,
    /// At the maximum length cut at the longest remembered silence (else at the last one).
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

/// Speech segments from per-frame probabilities (frames of [`FRAME`] samples), the same
/// hysteresis, minimum durations, maximum-length cuts and padding as silero-vad's
/// `get_speech_timestamps_from_probs`. `audio_len` is the signal's length in samples.
pub fn segments_from_probs(probs: &[f32], audio_len: usize, p: &SegmentParams) -> Vec<Segment> {
    let sr = p.sample_rate as f64;
    let window = FRAME as f64;
    let min_speech = sr * p.min_speech_ms as f64 / 1000.0;
    let pad = sr * p.speech_pad_ms as f64 / 1000.0;
    let max_speech = sr * p.max_speech_s - window - 2.0 * pad;
    let min_silence = sr * p.min_silence_ms as f64 / 1000.0;
    let min_silence_at_max = sr * p.min_silence_at_max_speech_ms as f64 / 1000.0;
    let neg = p.neg_threshold.unwrap_or((p.threshold - 0.15).max(0.01));

    let mut triggered = false;
    let mut speeches: Vec<Segment> = Vec::new();
    // The open segment's start (Python's `current_speech` dict: empty or with a start).
    let mut current: Option<usize> = None;
    let (mut temp_end, mut prev_end, mut next_start) = (0usize, 0usize, 0usize);
    let mut possible_ends: Vec<(usize, usize)> = Vec::new();

    for (i, &prob) in probs.iter().enumerate() {
        let cur = FRAME * i;
        if prob >= p.threshold && temp_end != 0 {
            let sil = cur - temp_end;
            if sil as f64 > min_silence_at_max {
                possible_ends.push((temp_end, sil));
            }
            temp_end = 0;
            if next_start < prev_end {
                next_start = cur;
            }
        }
        if prob >= p.threshold && !triggered {
            triggered = true;
            current = Some(cur);
            continue;
        }
        let start = current.unwrap_or(0);
        if triggered && (cur as f64 - start as f64) > max_speech {
            if p.use_max_possible_silence && !possible_ends.is_empty() {
                // The longest silence (the first of equals, as Python's max).
                let (end, dur) = possible_ends
                    .iter()
                    .copied()
                    .fold(None::<(usize, usize)>, |best, e| match best {
                        Some(b) if b.1 >= e.1 => Some(b),
                        _ => Some(e),
                    })
                    .unwrap_or((0, 0));
                speeches.push(Segment { start, end });
                next_start = end + dur;
                if next_start < end + cur {
                    current = Some(next_start);
                } else {
                    current = None;
                    triggered = false;
                }
                (prev_end, next_start, temp_end) = (0, 0, 0);
                possible_ends.clear();
            } else if prev_end != 0 {
                speeches.push(Segment {
                    start,
                    end: prev_end,
                });
                if next_start < prev_end {
                    current = None;
                    triggered = false;
                } else {
                    current = Some(next_start);
                }
                (prev_end, next_start, temp_end) = (0, 0, 0);
                possible_ends.clear();
            } else {
                speeches.push(Segment { start, end: cur });
                current = None;
                (prev_end, next_start, temp_end) = (0, 0, 0);
                triggered = false;
                possible_ends.clear();
                continue;
            }
        }
        if prob < neg && triggered {
            if temp_end == 0 {
                temp_end = cur;
            }
            let sil_now = cur - temp_end;
            if !p.use_max_possible_silence && sil_now as f64 > min_silence_at_max {
                prev_end = temp_end;
            }
            if (sil_now as f64) < min_silence {
                continue;
            }
            let start = current.unwrap_or(0);
            if (temp_end as f64 - start as f64) > min_speech {
                speeches.push(Segment {
                    start,
                    end: temp_end,
                });
            }
            current = None;
            (prev_end, next_start, temp_end) = (0, 0, 0);
            triggered = false;
            possible_ends.clear();
        }
    }
    if let Some(start) = current {
        if (audio_len as f64 - start as f64) > min_speech {
            speeches.push(Segment {
                start,
                end: audio_len,
            });
        }
    }
    pad_segments(&mut speeches, audio_len, pad);
    speeches
}

/// silero's padding: pad each side by `pad`, or split a shorter gap between neighbours.
fn pad_segments(s: &mut [Segment], audio_len: usize, pad: f64) {
    let n = s.len();
    let pad_i = pad as i64;
    for i in 0..n {
        if i == 0 {
            s[0].start = (s[0].start as i64 - pad_i).max(0) as usize;
        }
        if i + 1 != n {
            let gap = s[i + 1].start as i64 - s[i].end as i64;
            if (gap as f64) < 2.0 * pad {
                s[i].end = (s[i].end as i64 + gap.div_euclid(2)) as usize;
                s[i + 1].start = (s[i + 1].start as i64 - gap.div_euclid(2)).max(0) as usize;
            } else {
                s[i].end = ((s[i].end as i64 + pad_i) as usize).min(audio_len);
                s[i + 1].start = (s[i + 1].start as i64 - pad_i).max(0) as usize;
            }
        } else {
            s[i].end = ((s[i].end as i64 + pad_i) as usize).min(audio_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(probs: &[f32], len: usize) -> Vec<(usize, usize)> {
        segments_from_probs(probs, len, &SegmentParams::default())
            .iter()
            .map(|s| (s.start, s.end))
            .collect()
    }

    #[test]
    fn hysteresis_min_durations_and_padding() {
        // 10 frames speech, 5 silence (160 ms > 100 ms), 10 speech, then silence.
        let mut p = vec![0.9f32; 10];
        p.extend([0.1; 5]);
        p.extend([0.9; 10]);
        p.extend([0.0; 10]);
        let len = p.len() * FRAME;
        // Ends at the first silent frame (temp_end), padded by 480 samples.
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
}
