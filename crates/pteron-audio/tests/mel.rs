//! Whisper log-mel features against transformers' WhisperFeatureExtractor
//! (`tools/export/export_speech.py features`).

use std::path::PathBuf;

use pteron_audio::mel::{LogMel, WINDOW_FRAMES};
use pteron_audio::read_wav;

fn speech_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/speech")
}

#[test]
fn features_match_transformers() {
    let meta: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(speech_dir().join("mel_goldens.json")).unwrap(),
    )
    .unwrap();
    let kept = meta["frames_kept"].as_u64().unwrap() as usize;
    let mel = LogMel::new(80);
    for (clip, m) in meta["clips"].as_object().unwrap() {
        let audio = read_wav(speech_dir().join(format!("{clip}.wav"))).unwrap();
        let feats = mel.window_features(&audio.samples);
        assert_eq!(feats.len(), 80 * WINDOW_FRAMES);
        let golden = pteron::npy::read(speech_dir().join(format!("mel_{clip}.npy"))).unwrap();
        assert_eq!(golden.sizes, vec![80, kept]);
        let want = golden.to_f64_vec().unwrap();
        let floor = m["floor"].as_f64().unwrap();
        let mut err = 0.0f64;
        for row in 0..80 {
            for t in 0..WINDOW_FRAMES {
                let got = feats[row * WINDOW_FRAMES + t] as f64;
                let w = if t < kept {
                    want[row * kept + t]
                } else {
                    floor
                };
                err = err.max((got - w).abs());
            }
        }
        println!("{clip}: max abs err {err:.3e}");
        assert!(err < 1e-6, "{clip}: {err}");
    }
}
