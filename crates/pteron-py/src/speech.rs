//! Speech: WAV reading, voice activity detection (the bundled Silero VAD) and Whisper
//! transcription, on numpy arrays or WAV files.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use numpy::{PyArray1, PyArrayMethods};
use pteron::{MethodOptions, ProgramFile, Runtime};
use pteron_audio::transcribe::{LongFormOptions, Piece, Transcriber};
use pteron_audio::vad::{segments_from_probs, SegmentParams, Vad, SILERO_VAD_PTE};
use pteron_audio::whisper::{DecodeOptions, Whisper, WhisperConfig};
use pteron_audio::{read_wav, resample, MODEL_RATE};
use pteron_llm::Tokenizer;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::{audio, closed, from_audio, from_llm, from_pteron};
use crate::loaded::LoadedProgram;

/// Mono float samples at 16 kHz from a WAV path, or from an array with its `sample_rate`.
fn samples_16k(
    py: Python<'_>,
    audio_in: &Bound<'_, PyAny>,
    sample_rate: Option<u32>,
) -> PyResult<Vec<f32>> {
    let (samples, rate) = if let Ok(path) = audio_in.extract::<PathBuf>() {
        let a = py
            .detach(|| read_wav(&path))
            .map_err(|e| from_audio(py, &e))?;
        (a.samples, a.sample_rate)
    } else {
        let rate =
            sample_rate.ok_or_else(|| audio(py, "an audio array needs its sample_rate".into()))?;
        let np = py.import("numpy")?;
        let arr = np
            .call_method1("ascontiguousarray", (audio_in, "float32"))?
            .call_method1("reshape", (-1,))?
            .cast_into::<PyArray1<f32>>()?;
        let v = arr.readonly().as_slice()?.to_vec();
        (v, rate)
    };
    py.detach(|| resample(&samples, rate, MODEL_RATE))
        .map_err(|e| from_audio(py, &e))
}

fn threads_or(threads: Option<usize>, default: usize) -> MethodOptions {
    MethodOptions::new().threads(threads.unwrap_or(default))
}

/// Per 32 ms frame speech probabilities of `samples` (16 kHz) with Silero VAD.
fn probabilities(
    model: Option<&PathBuf>,
    samples: &[f32],
    threads: Option<usize>,
) -> pteron_audio::Result<Vec<f32>> {
    let file = match model {
        Some(p) => ProgramFile::open(p)?,
        None => ProgramFile::from_bytes(SILERO_VAD_PTE),
    };
    let program = Runtime::new().load_program(&file)?;
    // One thread by default: the model is small, a frame's work too little to split.
    let mut vad = Vad::new(&program, threads_or(threads, 1))?;
    vad.probabilities(samples)
}

/// Reads a WAV file (PCM 8/16/24/32-bit or float, any channel count, mixed to mono):
/// `(samples as float32 in [-1, 1], sample_rate)`.
#[pyfunction]
pub fn read_wav_file<'py>(
    py: Python<'py>,
    path: PathBuf,
) -> PyResult<(Bound<'py, PyArray1<f32>>, u32)> {
    let a = py
        .detach(|| read_wav(&path))
        .map_err(|e| from_audio(py, &e))?;
    Ok((PyArray1::from_vec(py, a.samples), a.sample_rate))
}

/// Speech probability of every 32 ms frame of `audio` (a WAV path, or an array with its
/// `sample_rate`), from Silero VAD (the bundled program, or `model`).
#[pyfunction]
#[pyo3(signature = (audio, sample_rate = None, *, model = None, threads = None))]
pub fn vad_probabilities<'py>(
    py: Python<'py>,
    audio: &Bound<'py, PyAny>,
    sample_rate: Option<u32>,
    model: Option<PathBuf>,
    threads: Option<usize>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let samples = samples_16k(py, audio, sample_rate)?;
    let probs = py
        .detach(|| probabilities(model.as_ref(), &samples, threads))
        .map_err(|e| from_audio(py, &e))?;
    Ok(PyArray1::from_vec(py, probs))
}

/// Speech segments of `audio` as `(start_s, end_s)` pairs, with silero-vad's
/// `get_speech_timestamps` rules and defaults.
#[pyfunction]
#[pyo3(signature = (audio, sample_rate = None, *, threshold = 0.5, min_speech_ms = 250, min_silence_ms = 100, speech_pad_ms = 30, model = None, threads = None))]
pub fn vad(
    py: Python<'_>,
    audio: &Bound<'_, PyAny>,
    sample_rate: Option<u32>,
    threshold: f32,
    min_speech_ms: u32,
    min_silence_ms: u32,
    speech_pad_ms: u32,
    model: Option<PathBuf>,
    threads: Option<usize>,
) -> PyResult<Vec<(f64, f64)>> {
    let samples = samples_16k(py, audio, sample_rate)?;
    let params = SegmentParams {
        threshold,
        min_speech_ms,
        min_silence_ms,
        speech_pad_ms,
        ..SegmentParams::default()
    };
    let segments = py
        .detach(|| {
            let probs = probabilities(model.as_ref(), &samples, threads)?;
            Ok::<_, pteron_audio::Error>(segments_from_probs(&probs, samples.len(), &params))
        })
        .map_err(|e| from_audio(py, &e))?;
    let secs = |s: usize| s as f64 / f64::from(MODEL_RATE);
    Ok(segments
        .iter()
        .map(|s| (secs(s.start), secs(s.end)))
        .collect())
}

/// A Whisper program, its tokenizer and its configuration.
struct WhisperState {
    // Declared first: it borrows the program's bytes and the tokenizer.
    transcriber: Transcriber<'static>,
    tokenizer: Box<Tokenizer>,
    _program: Arc<LoadedProgram>,
}

/// Whisper transcription of audio of any length (an ExecuTorch Whisper export with
/// `encode`/`decode` methods; `whisper.json` and `tokenizer.json` beside it by default).
#[pyclass(module = "pteron._pteron", name = "Transcriber", frozen)]
pub struct PyTranscriber {
    state: Mutex<Option<WhisperState>>,
}

#[pymethods]
impl PyTranscriber {
    #[new]
    #[pyo3(signature = (model, *, tokenizer = None, config = None, threads = None))]
    fn new(
        py: Python<'_>,
        model: PathBuf,
        tokenizer: Option<PathBuf>,
        config: Option<PathBuf>,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let tokenizer_path = tokenizer.unwrap_or_else(|| model.with_file_name("tokenizer.json"));
        let config_path = config.unwrap_or_else(|| model.with_file_name("whisper.json"));
        let tokenizer = Box::new(
            py.detach(|| Tokenizer::from_file(&tokenizer_path))
                .map_err(|e| from_llm(py, &e))?,
        );
        let config = WhisperConfig::from_file(&config_path).map_err(|e| from_audio(py, &e))?;
        let loaded = Arc::new(
            py.detach(|| LoadedProgram::new(&Runtime::new(), ProgramFile::open(&model)?, None))
                .map_err(|e| from_pteron(py, &e))?,
        );
        let options = match threads {
            Some(n) => MethodOptions::new().threads(n),
            None => MethodOptions::new(),
        };
        let whisper = py
            .detach(|| {
                // Safety: the decoder borrows the program's bytes, which `loaded` keeps alive
                // on the heap; the state stores `loaded` and drops the transcriber first
                // (field order), so the borrow never outlives them.
                let prog: &'static pteron::Program<'static> =
                    unsafe { &*(loaded.program() as *const pteron::Program<'static>) };
                Whisper::new(prog, options, config)
            })
            .map_err(|e| from_audio(py, &e))?;
        // Safety: the transcriber's text function borrows the tokenizer, on the heap behind its
        // box; the state stores the box and drops the transcriber first (field order).
        let tok: &'static Tokenizer = unsafe { &*(&*tokenizer as *const Tokenizer) };
        let transcriber = Transcriber::new(whisper, DecodeOptions::default())
            .with_text(move |ids: &[u32]| tok.decode(ids, true).unwrap_or_default());
        Ok(PyTranscriber {
            state: Mutex::new(Some(WhisperState {
                transcriber,
                tokenizer,
                _program: loaded,
            })),
        })
    }

    /// Transcribes `audio` (a WAV path, or an array with its `sample_rate`) with Whisper's
    /// long-form algorithm (faster-whisper's defaults: timestamps decoded to seek, the previous
    /// text as prompt, temperature fallback). Returns `{"text": ..., "segments": [{"start": s,
    /// "end": s, "text": ..., "tokens": [...]}, ...]}`. `beam_size` > 1: beam search;
    /// `without_timestamps`: one segment per 30 s window, no seeking;
    /// `condition_on_previous_text`, `temperature_fallback`: as faster-whisper's options;
    /// `vad`: transcribe only the speech Silero VAD finds, each stretch on its own.
    #[pyo3(signature = (audio, sample_rate = None, *, beam_size = 1, max_tokens = 0, without_timestamps = false, condition_on_previous_text = true, temperature_fallback = true, vad = false))]
    fn transcribe<'py>(
        &self,
        py: Python<'py>,
        audio: &Bound<'py, PyAny>,
        sample_rate: Option<u32>,
        beam_size: usize,
        max_tokens: usize,
        without_timestamps: bool,
        condition_on_previous_text: bool,
        temperature_fallback: bool,
        vad: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let samples = samples_16k(py, audio, sample_rate)?;
        let result = py.detach(|| {
            let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let Some(s) = guard.as_mut() else {
                return Ok(None);
            };
            s.transcriber.options = DecodeOptions {
                // The VAD path decodes each stretch on its own, with Whisper's times.
                timestamps: vad,
                max_tokens,
                beam_size,
                ..DecodeOptions::default()
            };
            let lf = &mut s.transcriber.long_form;
            *lf = LongFormOptions::default();
            lf.without_timestamps = without_timestamps;
            lf.condition_on_previous_text = condition_on_previous_text;
            if !temperature_fallback {
                lf.temperatures = vec![0.0];
            }
            let pieces = if vad {
                let probs = probabilities(None, &samples, Some(1))?;
                let segs = segments_from_probs(&probs, samples.len(), &SegmentParams::default());
                s.transcriber
                    .transcribe_segments(&samples, &segs, |_, _| {})?
            } else {
                s.transcriber.transcribe(&samples, |_, _| {})?
            };
            let eot = s.transcriber.whisper.config.eot;
            let texts = pieces
                .iter()
                .map(|p: &Piece| {
                    let ids: Vec<u32> = p.tokens.iter().copied().filter(|&t| t < eot).collect();
                    s.tokenizer
                        .decode(&ids, true)
                        .map_err(|e| pteron_audio::Error::Invalid(e.to_string()))
                })
                .collect::<pteron_audio::Result<Vec<String>>>()?;
            Ok(Some((pieces, texts)))
        });
        let Some((pieces, texts)) = result.map_err(|e| from_audio(py, &e))? else {
            return Err(closed(py, "transcriber"));
        };
        let segments = PyList::empty(py);
        let mut all = String::new();
        for (p, t) in pieces.iter().zip(&texts) {
            let d = PyDict::new(py);
            d.set_item("start", p.start)?;
            d.set_item("end", p.end)?;
            d.set_item("text", t.trim())?;
            d.set_item("tokens", p.tokens.clone())?;
            segments.append(d)?;
            all.push_str(t);
        }
        let out = PyDict::new(py);
        out.set_item("text", all.trim())?;
        out.set_item("segments", segments)?;
        Ok(out)
    }

    /// Frees the model.
    fn close(&self, py: Python<'_>) {
        let state = py.detach(|| self.state.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(state);
    }
}
