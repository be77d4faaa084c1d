//! Long-form transcription on the random-weight Whisper fixture (2 s windows, a 24-token
//! context, timestamps up to 0.08 s): whatever the weights say, the window loop moves forward,
//! covers the whole input and ends; its pieces lie inside the input in order.

use std::path::PathBuf;

use pteron_audio::read_wav;
use pteron_audio::transcribe::{Piece, Transcriber};
use pteron_audio::whisper::{DecodeOptions, Whisper, WhisperConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// 32 s: the speech clips again and again, with silences between them.
fn long_input() -> Vec<f32> {
    let clips: Vec<Vec<f32>> = ["hello_16k", "gaps_16k"]
        .iter()
        .map(|c| {
            read_wav(root().join(format!("testdata/speech/{c}.wav")))
                .unwrap()
                .samples
        })
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while out.len() < 32 * 16_000 {
        out.extend_from_slice(&clips[i % 2]);
        out.resize(out.len() + 4_000 * (1 + i % 3), 0.0);
        i += 1;
    }
    out.truncate(32 * 16_000);
    out
}

struct Run {
    /// Seconds done after each window.
    done: Vec<f64>,
    pieces: Vec<Piece>,
    windows: usize,
}

fn run(configure: impl FnOnce(&mut Transcriber), samples: &[f32]) -> Run {
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let mut config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    // The fixture's vocabulary has no <|startofprev|>: lend it a text token so the
    // previous-text prompt (and the context limit it runs into) is exercised.
    config.sot_prev = Some(119);
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let w = Whisper::new(&program, pteron::MethodOptions::new().threads(1), config).unwrap();
    let mut t = Transcriber::new(w, DecodeOptions::default());
    configure(&mut t);
    let mut done = Vec::new();
    let mut shown = Vec::new();
    let pieces = t
        .transcribe(samples, |d, new| {
            done.push(d);
            shown.extend_from_slice(new);
        })
        .unwrap();
    assert_eq!(pieces, shown, "progress reports every piece once");
    Run {
        done,
        pieces,
        windows: t.whisper.stats.windows,
    }
}

fn check_invariants(r: &Run, duration: f64) {
    assert!(!r.done.is_empty());
    assert!(
        r.done.windows(2).all(|p| p[0] < p[1]),
        "every window moves on: {:?}",
        r.done
    );
    // Covered to the end: the last 10 ms frame is the feature front end's padding.
    let last = *r.done.last().unwrap();
    assert!((last - duration).abs() <= 0.01, "{last} vs {duration}");
    assert_eq!(r.windows, r.done.len());
    for p in &r.pieces {
        assert!(0.0 <= p.start && p.start < p.end, "{p:?}");
        assert!(p.start < duration + 2.0, "{p:?}");
        assert!(p.tokens.iter().all(|&t| t < 120), "text tokens only: {p:?}");
    }
    assert!(
        r.pieces.windows(2).all(|p| p[0].start <= p[1].start),
        "pieces in order"
    );
}

#[test]
fn random_fixture_long_form_moves_forward_and_covers_the_input() {
    let samples = long_input();
    let duration = samples.len() as f64 / 16_000.0;
    // Greedy with timestamps and the previous-text prompt, no fallback (random weights are
    // never sure of anything).
    let r = run(|t| t.long_form.temperatures = vec![0.0], &samples);
    check_invariants(&r, duration);
    // At least the 16 back-to-back 2 s windows. (These random weights open a segment with a
    // timestamp and never close it, so every window moves on whole; seeking inside a window
    // is split_window's unit tests' and the real model's test's business.)
    assert!(r.windows >= 16, "{} windows", r.windows);

    // The full fallback ladder (every temperature, 5 samples each) still ends.
    let short = &samples[..8 * 16_000];
    let r = run(|t| t.long_form.best_of = 2, short);
    check_invariants(&r, 8.0);

    // Without timestamps the windows are back to back: 16 of them, one piece each at most.
    let r = run(
        |t| {
            t.long_form.without_timestamps = true;
            t.long_form.temperatures = vec![0.0];
        },
        &samples,
    );
    check_invariants(&r, duration);
    assert_eq!(r.windows, 16);
    for (i, d) in r.done.iter().enumerate() {
        assert!((d - 2.0 * (i + 1) as f64).abs() < 0.011, "{:?}", r.done);
    }
    for p in &r.pieces {
        let k = (p.start / 2.0).round();
        assert!((p.start - 2.0 * k).abs() < 1e-9, "{p:?}");
    }
}

#[test]
fn short_and_empty_inputs() {
    // Nothing at all, and less than a window: no window / one window.
    let r = run(|t| t.long_form.temperatures = vec![0.0], &[]);
    assert!(r.done.is_empty() && r.pieces.is_empty() && r.windows == 0);
    let samples = &long_input()[..16_000];
    let r = run(|t| t.long_form.temperatures = vec![0.0], samples);
    check_invariants(&r, 1.0);
}
