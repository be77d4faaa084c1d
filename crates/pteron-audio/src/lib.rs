//! Speech on pteron: read audio, find speech, (transcribe).
//!
//! - [`wav`]: RIFF/WAVE reading (8/16/24/32-bit PCM, 32/64-bit float, any channel count mixed
//!   down to mono), typed errors on malformed files.
//! - [`resample`]: band-limited (Kaiser-windowed sinc) resampling to any rate, 16 kHz for the
//!   models here.
//! - [`mel`]: Whisper's log-mel features (STFT, Slaney mel filters, log10, normalisation).
//! - [`vad`]: Silero VAD run as an ExecuTorch program, streaming (samples in, per-frame speech
//!   probabilities out), and the segmenter that turns probabilities into speech segments like
//!   `silero_vad.get_speech_timestamps`.
//! - [`whisper`]: a Whisper program's encoder and decoder (greedy, beam search, sampling,
//!   prompts continuing earlier text).
//! - [`transcribe`]: audio of any length with Whisper's long-form algorithm
//!   ([`transcribe::Transcriber`]), or VAD segments, or streamed.

pub mod mel;
pub mod resample;
pub mod transcribe;
pub mod vad;
pub mod wav;
pub mod whisper;

pub use resample::{resample, Resampler};
pub use vad::{segments_from_probs, Segment, SegmentParams, Vad};
pub use wav::{parse_wav, read_wav, Audio, WavError};

/// The sample rate the speech models take.
pub const MODEL_RATE: u32 = 16_000;

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Wav { path: String, source: WavError },
    #[error(transparent)]
    Pteron(#[from] pteron::Error),
    /// A program whose inputs/outputs are not what the runner expects.
    #[error("model: {0}")]
    Model(String),
    /// Arguments that make no sense (a zero sample rate, ...).
    #[error("{0}")]
    Invalid(String),
}

impl From<pteron::MethodError> for Error {
    fn from(e: pteron::MethodError) -> Self {
        Error::Pteron(e.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Float output `i` of `method` copied into `out`; returns its shape. `what` names the method
/// in errors.
pub(crate) fn output_f32<'m>(
    method: &'m pteron::Method<'_>,
    i: usize,
    what: &str,
    out: &mut Vec<f32>,
) -> Result<&'m [usize]> {
    let pteron::Output::Tensor(t) = method.output(i)? else {
        return Err(Error::Model(format!("{what}: output {i} is not a tensor")));
    };
    if t.info.dtype() != pteron::ScalarType::Float {
        return Err(Error::Model(format!(
            "{what}: output {i} is {}, not float",
            t.info.dtype()
        )));
    }
    out.clear();
    out.extend(
        t.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    Ok(t.info.sizes())
}
