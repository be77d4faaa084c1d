//! Silero VAD through pteron against the goldens of `tools/export/export_speech.py vad`
//! (ExecuTorch's runtime and the silero-vad package on the same clips).

use std::path::PathBuf;

use pteron_audio::vad::{segments_from_probs, SegmentParams, Vad, FRAME, SILERO_VAD_PTE};
use pteron_audio::{read_wav, resample};

fn speech_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/speech")
}

fn goldens() -> serde_json::Value {
    let text = std::fs::read_to_string(speech_dir().join("vad_goldens.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn max_abs(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn probabilities_match_executorch_and_the_package() {
    let file = pteron::ProgramFile::from_bytes(SILERO_VAD_PTE);
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    for threads in [1, 2] {
        let options = pteron::MethodOptions::new().threads(threads);
        let mut vad = Vad::new(&program, options).unwrap();
        let g = goldens();
        for (clip, want) in g["clips"].as_object().unwrap() {
            let audio = read_wav(speech_dir().join(format!("{clip}.wav"))).unwrap();
            assert_eq!(audio.sample_rate, 16_000);
            let probs = vad.probabilities(&audio.samples).unwrap();
            let vs_et = max_abs(&probs, &floats(&want["executorch"]));
            let vs_pkg = max_abs(&probs, &floats(&want["package"]));
            println!("{clip} ({threads} threads): {} frames, max abs err vs executorch {vs_et:.3e}, vs package {vs_pkg:.3e}", probs.len());
            assert!(vs_et <= 1e-5, "{clip}: {vs_et}");
            assert!(vs_pkg <= 1e-4, "{clip}: {vs_pkg}");

            let segs = segments_from_probs(&probs, audio.samples.len(), &SegmentParams::default());
            let got: Vec<[u64; 2]> = segs
                .iter()
                .map(|s| [s.start as u64, s.end as u64])
                .collect();
            let want_segs: Vec<[u64; 2]> = want["segments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| [p[0].as_u64().unwrap(), p[1].as_u64().unwrap()])
                .collect();
            assert_eq!(got, want_segs, "{clip} segments");
        }
    }
}

#[test]
fn streaming_in_odd_pieces_equals_whole() {
    let file = pteron::ProgramFile::from_bytes(SILERO_VAD_PTE);
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut vad = Vad::new(&program, pteron::MethodOptions::new().threads(1)).unwrap();
    let audio = read_wav(speech_dir().join("gaps_16k.wav")).unwrap();
    let whole = vad.probabilities(&audio.samples).unwrap();
    vad.reset();
    let mut streamed = Vec::new();
    for piece in audio.samples.chunks(777) {
        streamed.extend(vad.push(piece).unwrap());
    }
    streamed.extend(vad.finish().unwrap());
    assert_eq!(whole, streamed);
    assert_eq!(vad.frames(), audio.samples.len().div_ceil(FRAME));
}

#[test]
fn resampled_clips_find_the_same_speech() {
    // The 22.05 kHz clip against sox's 16 kHz resampling of it: same segments, close probs.
    let file = pteron::ProgramFile::from_bytes(SILERO_VAD_PTE);
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut vad = Vad::new(&program, pteron::MethodOptions::new().threads(1)).unwrap();
    let src = read_wav(speech_dir().join("numbers_22k.wav")).unwrap();
    let ours = resample(&src.samples, src.sample_rate, 16_000).unwrap();
    let sox = read_wav(speech_dir().join("numbers_22k_sox16k.wav")).unwrap();
    assert_eq!(ours.len(), sox.samples.len());
    let a = vad.probabilities(&ours).unwrap();
    let b = vad.probabilities(&sox.samples).unwrap();
    let diff = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    println!("VAD on our vs sox's resampling: max prob diff {diff:.3e}");
    assert!(diff < 0.1, "{diff}");
    let p = SegmentParams::default();
    assert_eq!(
        segments_from_probs(&a, ours.len(), &p),
        segments_from_probs(&b, ours.len(), &p)
    );
}

#[test]
fn resampler_matches_sox_on_speech() {
    let src = read_wav(speech_dir().join("numbers_22k.wav")).unwrap();
    let ours = resample(&src.samples, src.sample_rate, 16_000).unwrap();
    let sox = read_wav(speech_dir().join("numbers_22k_sox16k.wav")).unwrap();
    let (mut sig, mut err) = (0.0f64, 0.0f64);
    for (a, b) in ours.iter().zip(&sox.samples) {
        sig += (*b as f64).powi(2);
        err += (*a as f64 - *b as f64).powi(2);
    }
    let snr_db = 10.0 * (sig / err).log10();
    println!("resampler vs sox rate -v: {snr_db:.1} dB");
    assert!(snr_db > 45.0, "{snr_db}");
}

#[test]
fn wrong_program_is_a_model_error() {
    // A fixture with other inputs is refused at load with a clear message.
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models/mlp/model.pte");
    let file = pteron::ProgramFile::open(path).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let err = Vad::new(&program, pteron::MethodOptions::new().threads(1))
        .err()
        .unwrap();
    assert!(matches!(err, pteron_audio::Error::Model(_)), "{err}");
}
