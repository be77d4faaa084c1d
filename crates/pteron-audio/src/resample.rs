//! Band-limited resampling with a Kaiser-windowed sinc.
//!
//! Output sample `n` sits at input time `n * from / to` (first samples aligned), and is the
//! input convolved with a low-pass sinc cut at `ROLLOFF` of the lower Nyquist frequency,
//! windowed by a Kaiser window (beta 9.0, `ZEROS` zero crossings each side). The kernel is
//! tabulated at `OVERSAMPLE` points per zero crossing and linearly interpolated, so any rate
//! ratio works with one table. Samples outside the input count as zero.
//!
//! Accuracy: against sox's very-high-quality resampler (`rate -v`) on the 22.05 kHz speech
//! clip resampled to 16 kHz, the difference is 48 dB below the signal overall and more than
//! 80 dB below it in every 250 Hz band up to 7.25 kHz; all of the rest is in the last
//! 750 Hz, where sox keeps a flat passband to 7.6 kHz with a steeper transition (test
//! `resampler_matches_sox_on_speech`).

use crate::{Error, Result};

const ZEROS: usize = 48;
const OVERSAMPLE: usize = 512;
const BETA: f64 = 9.0;
const ROLLOFF: f64 = 0.96;

/// A resampler between two fixed rates (the kernel table is built once).
#[derive(Clone, Debug)]
pub struct Resampler {
    from: u32,
    to: u32,
    /// Cutoff relative to the input Nyquist frequency.
    cutoff: f64,
    /// kernel(t) for t = i / OVERSAMPLE zero crossings, i = 0..=ZEROS*OVERSAMPLE (+1 guard).
    table: Vec<f32>,
}

/// Modified Bessel function of the first kind, order 0 (power series).
fn bessel_i0(x: f64) -> f64 {
    let mut sum = 1.0;
    let mut term = 1.0;
    let q = x * x / 4.0;
    for k in 1..64 {
        term *= q / (k * k) as f64;
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    sum
}

impl Resampler {
    pub fn new(from: u32, to: u32) -> Result<Self> {
        if from == 0 || to == 0 {
            return Err(Error::Invalid(format!(
                "cannot resample {from} Hz -> {to} Hz"
            )));
        }
        let cutoff = ROLLOFF * (to as f64 / from as f64).min(1.0);
        let n = ZEROS * OVERSAMPLE;
        let norm = bessel_i0(BETA);
        let mut table: Vec<f32> = (0..=n)
            .map(|i| {
                let t = i as f64 / OVERSAMPLE as f64; // in zero crossings
                let sinc = if i == 0 {
                    1.0
                } else {
                    (std::f64::consts::PI * t).sin() / (std::f64::consts::PI * t)
                };
                let r = t / ZEROS as f64;
                let window = bessel_i0(BETA * (1.0 - r * r).max(0.0).sqrt()) / norm;
                (sinc * window) as f32
            })
            .collect();
        table.push(0.0);
        Ok(Resampler {
            from,
            to,
            cutoff,
            table,
        })
    }

    /// Output samples for `len` input samples (`len * to / from`, rounded to nearest, as sox).
    pub fn output_len(&self, len: usize) -> usize {
        ((len as u128 * self.to as u128 + self.from as u128 / 2) / self.from as u128) as usize
    }

    /// Resamples a whole signal.
    pub fn process(&self, input: &[f32]) -> Vec<f32> {
        if self.from == self.to {
            return input.to_vec();
        }
        let out_len = self.output_len(input.len());
        // Half-width of the kernel in input samples.
        let half = ZEROS as f64 / self.cutoff;
        let scale = self.cutoff as f32;
        let mut out = Vec::with_capacity(out_len);
        for n in 0..out_len {
            // Exact position: n * from / to, split into integer and fraction without drift.
            let num = n as u128 * self.from as u128;
            let base = (num / self.to as u128) as i64;
            let frac = (num % self.to as u128) as f64 / self.to as f64;
            let t = base as f64 + frac;
            let lo = ((t - half).ceil() as i64).max(0);
            let hi = ((t + half).floor() as i64).min(input.len() as i64 - 1);
            let mut acc = 0.0f32;
            for k in lo..=hi {
                acc += input[k as usize] * self.kernel((t - k as f64).abs() * self.cutoff);
            }
            out.push(acc * scale);
        }
        out
    }

    /// The windowed sinc at `x` zero crossings from the centre (x >= 0).
    fn kernel(&self, x: f64) -> f32 {
        let pos = x * OVERSAMPLE as f64;
        let i = pos as usize;
        if i >= ZEROS * OVERSAMPLE {
            return 0.0;
        }
        let f = (pos - i as f64) as f32;
        self.table[i] + (self.table[i + 1] - self.table[i]) * f
    }
}

/// Resamples `input` from `from` Hz to `to` Hz.
pub fn resample(input: &[f32], from: u32, to: u32) -> Result<Vec<f32>> {
    Ok(Resampler::new(from, to)?.process(input))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f64, rate: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / rate as f64).sin() as f32)
            .collect()
    }

    /// Max error in the middle (away from the zero-padded edges).
    fn mid_err(a: &[f32], b: &[f32]) -> f32 {
        let (s, e) = (a.len() / 4, a.len() * 3 / 4);
        a[s..e]
            .iter()
            .zip(&b[s..e])
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max)
    }

    #[test]
    fn passband_sines_survive_rate_changes() {
        for &(from, to) in &[
            (22050, 16000),
            (44100, 16000),
            (48000, 16000),
            (8000, 16000),
            (16000, 16000),
            (11025, 16000),
        ] {
            for &f in &[100.0, 1000.0, 3000.0] {
                let x = sine(f, from, from as usize);
                let y = resample(&x, from, to).unwrap();
                assert_eq!(y.len(), to as usize, "{from}->{to}");
                let want = sine(f, to, to as usize);
                let err = mid_err(&y, &want);
                assert!(err < 2e-3, "{from}->{to} {f} Hz: err {err}");
            }
        }
    }

    #[test]
    fn stopband_is_attenuated() {
        // 10 kHz at 44.1 kHz is above the 8 kHz Nyquist of 16 kHz: must vanish (< -60 dB).
        let x = sine(10_000.0, 44100, 44100);
        let y = resample(&x, 44100, 16000).unwrap();
        let peak = y[4000..12000].iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(peak < 1e-3, "alias peak {peak}");
    }

    #[test]
    fn zero_rates_are_errors() {
        assert!(Resampler::new(0, 16000).is_err());
        assert!(Resampler::new(16000, 0).is_err());
        assert_eq!(resample(&[], 22050, 16000).unwrap(), Vec::<f32>::new());
    }
}
