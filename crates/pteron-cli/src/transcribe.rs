//! `pteron transcribe`: speech to text with a Whisper program.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pteron_audio::transcribe::{Piece, StreamingTranscriber, Transcriber};
use pteron_audio::vad::{SegmentParams, Vad, SILERO_VAD_PTE};
use pteron_audio::whisper::{DecodeOptions, Whisper, WhisperConfig};
use pteron_audio::{read_wav, resample, MODEL_RATE};
use pteron_llm::Tokenizer;

#[derive(Args, Debug)]
pub struct TranscribeArgs {
    /// A Whisper program with `encode` and `decode` methods (tools/export/export_speech.py).
    pub model: PathBuf,
    /// A WAV file (any rate, channels and sample format the reader supports).
    pub file: PathBuf,
    /// Transcribe only the speech Silero VAD finds (streamed: text appears as segments end).
    #[arg(long)]
    pub vad: bool,
    /// Show segments with start/end times. (Long audio is always decoded with Whisper's
    /// timestamp tokens, which steer its 30 s windows; this only shows them.)
    #[arg(long)]
    pub timestamps: bool,
    /// Decode with <|notimestamps|>: whole 30 s windows one after the other, no seeking by
    /// timestamps (faster-whisper's `without_timestamps`).
    #[arg(long)]
    pub without_timestamps: bool,
    /// Decode each window on its own, without the text so far as its prompt.
    #[arg(long)]
    pub no_condition: bool,
    /// Temperature 0 only: no re-decoding at higher temperatures of a window whose text is
    /// too repetitive or too unlikely.
    #[arg(long)]
    pub no_fallback: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// whisper.json (special tokens, shapes); default: beside the model.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// tokenizer.json; default: beside the model.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Kernel threads (0 = physical cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Most tokens per window (0 = half the decoder's context).
    #[arg(long, default_value_t = 0)]
    pub max_tokens: usize,
    /// Beam search with this many beams (1 = greedy decoding).
    #[arg(long, default_value_t = 1)]
    pub beam_size: usize,
}

fn err(e: impl std::fmt::Display) -> pteron::Error {
    pteron::Error::Invalid(e.to_string())
}

pub fn transcribe(args: &TranscribeArgs) -> pteron::Result<()> {
    let beside = |name: &str| args.model.with_file_name(name);
    let config = WhisperConfig::from_file(
        args.config
            .clone()
            .unwrap_or_else(|| beside("whisper.json")),
    )
    .map_err(err)?;
    let tokenizer = Tokenizer::from_file(
        args.tokenizer
            .clone()
            .unwrap_or_else(|| beside("tokenizer.json")),
    )
    .map_err(err)?;
    let audio = read_wav(&args.file).map_err(err)?;
    let samples = resample(&audio.samples, audio.sample_rate, MODEL_RATE).map_err(err)?;

    let file = pteron::ProgramFile::open(&args.model)?;
    let runtime = pteron::Runtime::new();
    let program = runtime.load_program(&file)?;
    let options = crate::vad::options(args.threads);
    let t_load = Instant::now();
    let whisper = Whisper::new(&program, options.clone(), config).map_err(err)?;
    let load_s = t_load.elapsed().as_secs_f64();
    let decode = DecodeOptions {
        timestamps: args.timestamps,
        max_tokens: args.max_tokens,
        beam_size: args.beam_size,
        ..Default::default()
    };
    let eot = whisper.config.eot;
    let window_s = whisper.config.window_samples() as f64 / MODEL_RATE as f64;
    if !args.vad && samples.len() as f64 / MODEL_RATE as f64 > window_s {
        // Exports before the long-form decoder named neither token in whisper.json.
        for (name, id) in [
            ("sot_prev", whisper.config.sot_prev),
            ("no_speech", whisper.config.no_speech),
        ] {
            if id.is_none() {
                eprintln!(
                    "note: whisper.json names no {name} token: long-form decoding goes without \
                     it (re-export with tools/export/export_speech.py whisper)"
                );
            }
        }
    }
    let mut transcriber = Transcriber::new(whisper, decode)
        .with_text(|ids: &[u32]| tokenizer.decode(ids, true).unwrap_or_default());
    transcriber.long_form.without_timestamps = args.without_timestamps;
    transcriber.long_form.condition_on_previous_text = !args.no_condition;
    if args.no_fallback {
        transcriber.long_form.temperatures = vec![0.0];
    }
    let text_of = |p: &Piece| -> pteron::Result<String> {
        let ids: Vec<u32> = p.tokens.iter().copied().filter(|&t| t < eot).collect();
        tokenizer.decode(&ids, true).map_err(err)
    };
    let duration = samples.len() as f64 / MODEL_RATE as f64;
    let show = |p: &Piece| -> pteron::Result<()> {
        if !args.json {
            let text = text_of(p)?;
            if args.timestamps || args.vad {
                println!("[{:7.2} -> {:7.2}] {}", p.start, p.end, text.trim());
            } else {
                println!("{}", text.trim());
            }
        }
        Ok(())
    };

    let t0 = Instant::now();
    let mut pieces = Vec::new();
    let st;
    if args.vad {
        let vad_file = pteron::ProgramFile::from_bytes(SILERO_VAD_PTE);
        let vad_program = runtime.load_program(&vad_file)?;
        let vad = Vad::new(&vad_program, options).map_err(err)?;
        let mut stream = StreamingTranscriber::new(transcriber, vad, SegmentParams::default());
        // One second at a time, as audio would arrive.
        for (i, chunk) in samples.chunks(MODEL_RATE as usize).enumerate() {
            for p in stream.push(chunk).map_err(err)? {
                show(&p)?;
                pieces.push(p);
            }
            if !args.json && duration > 60.0 && i % 30 == 29 {
                eprintln!("... {:.0}/{:.0} s", (i + 1) as f64, duration);
            }
        }
        for p in stream.finish().map_err(err)? {
            show(&p)?;
            pieces.push(p);
        }
        st = stream.transcriber.whisper.stats;
    } else {
        let mut shown_err = None;
        pieces = transcriber
            .transcribe(&samples, |done, new| {
                for p in new {
                    if let Err(e) = show(p) {
                        shown_err = Some(e);
                    }
                }
                if !args.json && duration > 30.0 {
                    eprintln!("... {done:.0}/{duration:.0} s");
                }
            })
            .map_err(err)?;
        if let Some(e) = shown_err {
            return Err(e);
        }
        st = transcriber.whisper.stats;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let rtf = elapsed / duration.max(1e-9);
    let text: String = pieces
        .iter()
        .map(text_of)
        .collect::<pteron::Result<Vec<_>>>()?
        .concat();
    if args.json {
        let segs = pieces
            .iter()
            .map(|p| {
                Ok(serde_json::json!({
                    "start": p.start, "end": p.end, "text": text_of(p)?.trim(), "tokens": p.tokens,
                }))
            })
            .collect::<pteron::Result<Vec<_>>>()?;
        let out = serde_json::json!({
            "file": args.file.display().to_string(),
            "duration_s": duration,
            "text": text.trim(),
            "segments": segs,
            "load_s": load_s,
            "transcribe_s": elapsed,
            "real_time_factor": rtf,
            "features_s": st.features_s,
            "encode_s": st.encode_s,
            "windows": st.windows,
            "decode_s": st.decode_s,
            "decoder_steps": st.steps,
        });
        println!("{}", serde_json::to_string_pretty(&out).map_err(err)?);
    } else {
        eprintln!(
            "{duration:.2} s of audio in {elapsed:.3} s: real-time factor {rtf:.4} (load {load_s:.3} s; \
             features {:.3} s, encoder {:.3} s for {} window(s), decoder {:.3} s for {} steps)",
            st.features_s, st.encode_s, st.windows, st.decode_s, st.steps
        );
    }
    Ok(())
}
