//! `pteron vad`: speech segments of a WAV file with Silero VAD.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use pteron_audio::vad::{segments_from_probs, SegmentParams, Vad, FRAME, SILERO_VAD_PTE};
use pteron_audio::{read_wav, resample, MODEL_RATE};

#[derive(Args, Debug)]
pub struct VadArgs {
    /// A WAV file (PCM 8/16/24/32-bit or float; any rate and channel count).
    pub file: PathBuf,
    /// A Silero VAD program (tools/export/export_speech.py vad); the bundled one by default.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Print JSON (segments, and per-frame probabilities with --probs).
    #[arg(long)]
    pub json: bool,
    /// Also print every 32 ms frame's speech probability.
    #[arg(long)]
    pub probs: bool,
    /// Speech starts at probability >= this.
    #[arg(long, default_value_t = 0.5)]
    pub threshold: f32,
    #[arg(long, default_value_t = 250)]
    pub min_speech_ms: u32,
    #[arg(long, default_value_t = 100)]
    pub min_silence_ms: u32,
    #[arg(long, default_value_t = 30)]
    pub speech_pad_ms: u32,
    /// Kernel threads (0 = physical cores).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
}

fn err(e: impl std::fmt::Display) -> pteron::Error {
    pteron::Error::Invalid(e.to_string())
}

pub fn options(threads: usize) -> pteron::MethodOptions {
    let options = pteron::MethodOptions::new();
    if threads == 0 {
        options
    } else {
        options.threads(threads)
    }
}

pub fn vad(args: &VadArgs) -> pteron::Result<()> {
    let audio = read_wav(&args.file).map_err(err)?;
    let samples = resample(&audio.samples, audio.sample_rate, MODEL_RATE).map_err(err)?;
    let file = match &args.model {
        Some(p) => pteron::ProgramFile::open(p)?,
        None => pteron::ProgramFile::from_bytes(SILERO_VAD_PTE),
    };
    let program = pteron::Runtime::new().load_program(&file)?;
    let mut vad = Vad::new(&program, options(args.threads)).map_err(err)?;

    let t0 = Instant::now();
    let mut probs = Vec::new();
    // Feed one second at a time, as a stream would arrive.
    for (i, piece) in samples.chunks(MODEL_RATE as usize).enumerate() {
        probs.extend(vad.push(piece).map_err(err)?);
        if !args.json && samples.len() > 60 * MODEL_RATE as usize && i % 60 == 59 {
            eprint!(
                "\r{:.0}%",
                100.0 * ((i + 1) * MODEL_RATE as usize) as f64 / samples.len() as f64
            );
        }
    }
    probs.extend(vad.finish().map_err(err)?);
    let elapsed = t0.elapsed().as_secs_f64();

    let params = SegmentParams {
        threshold: args.threshold,
        min_speech_ms: args.min_speech_ms,
        min_silence_ms: args.min_silence_ms,
        speech_pad_ms: args.speech_pad_ms,
        ..Default::default()
    };
    let segments = segments_from_probs(&probs, samples.len(), &params);
    let secs = |s: usize| s as f64 / MODEL_RATE as f64;
    let duration = audio.duration();
    let rtf = elapsed / duration.max(1e-9);
    if args.json {
        let segs: Vec<_> = segments
            .iter()
            .map(|s| serde_json::json!({"start": secs(s.start), "end": secs(s.end)}))
            .collect();
        let mut out = serde_json::json!({
            "file": args.file.display().to_string(),
            "duration_s": duration,
            "sample_rate": audio.sample_rate,
            "segments": segs,
            "frames": probs.len(),
            "vad_s": elapsed,
            "real_time_factor": rtf,
        });
        if args.probs {
            out["frame_s"] = serde_json::json!(FRAME as f64 / MODEL_RATE as f64);
            out["probs"] = serde_json::json!(probs);
        }
        println!("{}", serde_json::to_string_pretty(&out).map_err(err)?);
    } else {
        if args.probs {
            for (i, p) in probs.iter().enumerate() {
                println!("{:8.3}s  {p:.4}", secs(i * FRAME));
            }
        }
        for s in &segments {
            println!("{:8.3} - {:8.3}  speech", secs(s.start), secs(s.end));
        }
        eprintln!(
            "{} segment(s), {:.2} s of audio in {:.3} s (real-time factor {:.4}, {} frames)",
            segments.len(),
            duration,
            elapsed,
            rtf,
            probs.len()
        );
    }
    Ok(())
}
