//! Whisper's log-mel front end.
//!
//! The same computation as `transformers`' `WhisperFeatureExtractor` (and OpenAI Whisper's
//! `log_mel_spectrogram`): the 16 kHz signal padded with zeros (or cut) to 30 s; a centred
//! STFT (reflect padding of `N_FFT / 2`, periodic Hann window of 400, hop 160), power
//! spectrum; 80 Slaney-normalised mel filters on the Slaney mel scale over 0–8 kHz;
//! `log10(max(mel, 1e-10))`; values floored at the maximum minus 8; `(x + 4) / 4`. The
//! last STFT frame is dropped, giving 3000 frames for 30 s. Computed in f64 (as the numpy
//! reference), returned as f32, laid out `[mels, frames]` (the encoder's input).

use std::f64::consts::PI;

pub const N_FFT: usize = 400;
pub const HOP: usize = 160;
pub const SAMPLE_RATE: usize = 16_000;
/// Samples in one 30 s window.
pub const WINDOW_SAMPLES: usize = 30 * SAMPLE_RATE;
/// Frames in one 30 s window.
pub const WINDOW_FRAMES: usize = WINDOW_SAMPLES / HOP;
const BINS: usize = N_FFT / 2 + 1;

/// A complex number (re, im) in f64.
#[derive(Clone, Copy, Debug, Default)]
struct C(f64, f64);

impl C {
    fn mul(self, o: C) -> C {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
}

/// A mixed-radix decimation-in-time FFT for one size (small prime factors recurse, anything
/// else falls back to a direct DFT at that level).
struct Fft {
    n: usize,
    factors: Vec<usize>,
    /// exp(-2 pi i k / n), k = 0..n.
    twiddles: Vec<C>,
}

impl Fft {
    fn new(n: usize) -> Self {
        let mut factors = Vec::new();
        let mut m = n;
        for p in [4, 2, 3, 5] {
            #[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87; MSRV 1.80
            while m % p == 0 && m > 1 {
                factors.push(p);
                m /= p;
            }
        }
        if m > 1 {
            factors.push(m);
        }
        let twiddles = (0..n)
            .map(|k| {
                let a = -2.0 * PI * k as f64 / n as f64;
                C(a.cos(), a.sin())
            })
            .collect();
        Fft {
            n,
            factors,
            twiddles,
        }
    }

    /// `out` = DFT of `input` (length n).
    fn run(&self, input: &[C], out: &mut [C], scratch: &mut [C]) {
        self.rec(input, 1, 0, out, scratch, 0);
    }

    /// DFT of input[offset + stride * j], j = 0..len, into out (len = n / stride).
    fn rec(
        &self,
        input: &[C],
        stride: usize,
        offset: usize,
        out: &mut [C],
        scratch: &mut [C],
        level: usize,
    ) {
        let len = out.len();
        if len == 1 {
            out[0] = input[offset];
            return;
        }
        let p = self.factors[level];
        let m = len / p;
        // Sub-DFTs of the p decimated sequences, into scratch[r * m..].
        for r in 0..p {
            let (sub, rest) = scratch[r * m..].split_at_mut(m);
            self.rec(input, stride * p, offset + r * stride, sub, rest, level + 1);
        }
        // Combine: X[k] = sum_r W_len^(r k) Y_r[k mod m]; W_len^j = twiddles[j * stride mod n].
        // The twiddle indices advance by additions (no division in the loop).
        let n = self.n;
        let mut step = 0; // k * stride mod n
        for (k, o) in out.iter_mut().enumerate() {
            let km = k % m;
            let mut acc = scratch[km];
            let mut idx = step;
            for r in 1..p {
                let t = scratch[r * m + km].mul(self.twiddles[idx]);
                acc.0 += t.0;
                acc.1 += t.1;
                idx += step;
                if idx >= n {
                    idx -= n;
                }
            }
            *o = acc;
            step += stride;
            if step >= n {
                step -= n;
            }
        }
    }
}

fn hz_to_mel(f: f64) -> f64 {
    // Slaney: linear below 1 kHz, logarithmic above.
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if f >= min_log_hz {
        min_log_mel + (f / min_log_hz).ln() / logstep
    } else {
        f / f_sp
    }
}

fn mel_to_hz(m: f64) -> f64 {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    let min_log_mel = min_log_hz / f_sp;
    let logstep = 6.4f64.ln() / 27.0;
    if m >= min_log_mel {
        min_log_hz * (logstep * (m - min_log_mel)).exp()
    } else {
        f_sp * m
    }
}

/// Slaney-normalised triangular mel filters, `[n_mels][BINS]`.
fn mel_filters(n_mels: usize, fmin: f64, fmax: f64) -> Vec<Vec<f64>> {
    let fft_freqs: Vec<f64> = (0..BINS)
        .map(|i| i as f64 * (SAMPLE_RATE as f64 / 2.0) / (BINS - 1) as f64)
        .collect();
    let (lo, hi) = (hz_to_mel(fmin), hz_to_mel(fmax));
    let pts: Vec<f64> = (0..n_mels + 2)
        .map(|i| mel_to_hz(lo + (hi - lo) * i as f64 / (n_mels + 1) as f64))
        .collect();
    (0..n_mels)
        .map(|m| {
            let (left, centre, right) = (pts[m], pts[m + 1], pts[m + 2]);
            let norm = 2.0 / (right - left);
            fft_freqs
                .iter()
                .map(|&f| {
                    let down = (f - left) / (centre - left);
                    let up = (right - f) / (right - centre);
                    down.min(up).max(0.0) * norm
                })
                .collect()
        })
        .collect()
}

/// Whisper's log-mel spectrogram for one 30 s window.
pub struct LogMel {
    n_mels: usize,
    fft: Fft,
    window: Vec<f64>,
    /// Non-zero span and weights of each filter (most of each row is zero).
    filters: Vec<(usize, Vec<f64>)>,
}

impl LogMel {
    /// `n_mels` is 80 for Whisper up to large-v2, 128 for large-v3.
    pub fn new(n_mels: usize) -> Self {
        let window = (0..N_FFT)
            .map(|i| 0.5 - 0.5 * (2.0 * PI * i as f64 / N_FFT as f64).cos())
            .collect();
        let filters = mel_filters(n_mels, 0.0, 8000.0)
            .into_iter()
            .map(|row| {
                let first = row.iter().position(|&w| w != 0.0).unwrap_or(0);
                let last = row.iter().rposition(|&w| w != 0.0).map_or(first, |l| l + 1);
                (first, row[first..last].to_vec())
            })
            .collect();
        LogMel {
            n_mels,
            fft: Fft::new(N_FFT),
            window,
            filters,
        }
    }

    pub fn n_mels(&self) -> usize {
        self.n_mels
    }

    /// Features of `samples` (16 kHz) padded with zeros or cut to 30 s: `[n_mels, 3000]`.
    pub fn window_features(&self, samples: &[f32]) -> Vec<f32> {
        self.features(samples, WINDOW_SAMPLES)
    }

    /// Features of `samples` padded with zeros or cut to `len` samples:
    /// `[n_mels, len / HOP]`, row-major.
    pub fn features(&self, samples: &[f32], len: usize) -> Vec<f32> {
        let frames = len / HOP;
        let half = N_FFT / 2;
        let at = |i: usize| -> f64 { samples.get(i).map_or(0.0, |&v| v as f64) };
        // Reflect padding of the padded signal (length `len`), index in [-half, len + half).
        let sample = |j: isize| -> f64 {
            let n = len as isize;
            let k = if j < 0 {
                -j
            } else if j >= n {
                2 * (n - 1) - j
            } else {
                j
            };
            if k < 0 || k >= n {
                0.0
            } else {
                at(k as usize)
            }
        };
        let mut mel = vec![0.0f64; self.n_mels * frames];
        let mut buf = vec![C::default(); N_FFT];
        let mut spec = vec![C::default(); N_FFT];
        let mut scratch = vec![C::default(); 2 * N_FFT];
        let mut power = [vec![0.0f64; BINS], vec![0.0f64; BINS]];
        // Two real frames per complex FFT: z = x1 + i x2, then X1[k] = (Z[k] + conj Z[-k]) / 2
        // and X2[k] = (Z[k] - conj Z[-k]) / 2i.
        for t in (0..frames).step_by(2) {
            let pair = (frames - t).min(2);
            for (i, b) in buf.iter_mut().enumerate() {
                let x = |f: usize| -> f64 {
                    if f >= pair {
                        return 0.0;
                    }
                    let start = ((t + f) * HOP) as isize - half as isize;
                    sample(start + i as isize) * self.window[i]
                };
                *b = C(x(0), x(1));
            }
            self.fft.run(&buf, &mut spec, &mut scratch);
            for k in 0..BINS {
                let (z, w) = (spec[k], spec[(N_FFT - k) % N_FFT]);
                let (re1, im1) = (0.5 * (z.0 + w.0), 0.5 * (z.1 - w.1));
                let (re2, im2) = (0.5 * (z.1 + w.1), -0.5 * (z.0 - w.0));
                power[0][k] = re1 * re1 + im1 * im1;
                power[1][k] = re2 * re2 + im2 * im2;
            }
            for (f, pw) in power.iter().enumerate().take(pair) {
                for (m, (first, w)) in self.filters.iter().enumerate() {
                    let e: f64 = w.iter().zip(&pw[*first..]).map(|(a, b)| a * b).sum();
                    mel[m * frames + t + f] = e;
                }
            }
        }
        let mut max = f64::NEG_INFINITY;
        for v in mel.iter_mut() {
            *v = v.max(1e-10).log10();
            max = max.max(*v);
        }
        mel.iter()
            .map(|&v| ((v.max(max - 8.0) + 4.0) / 4.0) as f32)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fft_matches_direct_dft() {
        for n in [1usize, 2, 8, 12, 400, 7, 30] {
            let fft = Fft::new(n);
            let x: Vec<C> = (0..n)
                .map(|i| C((i as f64 * 0.37).sin(), (i as f64 * 0.11).cos()))
                .collect();
            let mut out = vec![C::default(); n];
            let mut scratch = vec![C::default(); 2 * n];
            fft.run(&x, &mut out, &mut scratch);
            for (k, o) in out.iter().enumerate() {
                let mut acc = C::default();
                for (j, v) in x.iter().enumerate() {
                    let a = -2.0 * PI * (j * k) as f64 / n as f64;
                    let t = v.mul(C(a.cos(), a.sin()));
                    acc.0 += t.0;
                    acc.1 += t.1;
                }
                assert!(
                    (acc.0 - o.0).abs() < 1e-9 && (acc.1 - o.1).abs() < 1e-9,
                    "n {n} k {k}"
                );
            }
        }
    }

    #[test]
    fn mel_scale_round_trips() {
        for f in [0.0, 500.0, 1000.0, 4000.0, 8000.0] {
            assert!((mel_to_hz(hz_to_mel(f)) - f).abs() < 1e-9);
        }
    }
}
