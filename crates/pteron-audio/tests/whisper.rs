//! Whisper through pteron against ExecuTorch's runtime.
//!
//! The random-weight fixture (`export_speech.py whisper-tiny`) runs in CI; the real tiny.en
//! (`export_speech.py whisper`, into tools/export/out/speech/whisper_tiny_en/) is ignored.

use std::path::{Path, PathBuf};

use pteron_audio::mel::{LogMel, HOP};
use pteron_audio::read_wav;
use pteron_audio::whisper::{DecodeOptions, Whisper, WhisperConfig};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn max_err(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y).abs())
        .fold(0.0, f64::max)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn random_fixture_matches_executorch() {
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let golden = json(&dir.join("goldens.json"));
    for threads in [1, 2] {
        let options = pteron::MethodOptions::new().threads(threads);
        let mut w = Whisper::new(&program, options, config.clone()).unwrap();

        // Front end on the 2 s window vs transformers, then the encoder vs ExecuTorch.
        let audio = read_wav(root().join("testdata/speech/hello_16k.wav")).unwrap();
        let feats = LogMel::new(80).features(&audio.samples, config.n_frames * HOP);
        let mel = pteron::npy::read(dir.join("mel.npy"))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let mel_err = max_err(&feats, &mel);
        assert!(mel_err < 1e-6, "mel {mel_err}");
        w.encode_window(&audio.samples).unwrap();
        let kv = pteron::npy::read(dir.join("cross_kv.npy"))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let kv_err = max_err(w.cross_kv(), &kv);
        assert!(kv_err < 1e-4, "cross K/V {kv_err}");
        let prompt = w.prompt(false);
        assert_eq!(prompt, ids(&golden["prompt"]));
        let mut logits = Vec::new();
        for (i, &t) in prompt.iter().enumerate() {
            logits = w.step(t, i).unwrap().to_vec();
        }
        let want = pteron::npy::read(dir.join("logits0.npy"))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let logit_err = max_err(&logits, &want);
        println!("{threads} thread(s): mel err {mel_err:.2e}, cross K/V err {kv_err:.2e}, first logits err {logit_err:.2e}");
        assert!(logit_err < 1e-4, "{logit_err}");

        // Greedy tokens equal ExecuTorch's.
        w.encode_window(&audio.samples).unwrap();
        let r = w
            .decode_greedy(&DecodeOptions {
                timestamps: false,
                max_tokens: 20,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(r.tokens, ids(&golden["tokens"]));
    }
}

/// Beam search (3 beams, 12 tokens) gives ExecuTorch's: the reference runs OpenAI's beam
/// search in Python with every beam's logits from ExecuTorch's runtime (feeding the beam from
/// position 0), pteron saves and restores each beam's cache rows instead.
#[test]
fn random_fixture_beam_search_matches_executorch() {
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let golden = &json(&dir.join("goldens.json"))["beam"];
    let audio = read_wav(root().join("testdata/speech/hello_16k.wav")).unwrap();
    for threads in [1, 2] {
        let options = pteron::MethodOptions::new().threads(threads);
        let mut w = Whisper::new(&program, options, config.clone()).unwrap();
        w.encode_window(&audio.samples).unwrap();
        let opts = DecodeOptions {
            timestamps: false,
            max_tokens: golden["max_tokens"].as_u64().unwrap() as usize,
            beam_size: golden["beam_size"].as_u64().unwrap() as usize,
            ..Default::default()
        };
        let r = w.decode(&opts).unwrap();
        assert_eq!(r.tokens, ids(&golden["tokens"]), "{threads} thread(s)");
        // Greedy after beam search starts from a clean state (each step rewrites its row).
        let g = w
            .decode(&DecodeOptions {
                max_tokens: 20,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(g.tokens, ids(&json(&dir.join("goldens.json"))["tokens"]));
    }
}

#[test]
fn random_fixture_timestamp_rules_hold() {
    // Whatever random weights say, the timestamp rules shape the output: it starts with a
    // timestamp at most 1 s, timestamps never decrease, and segments come out paired.
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let ts = config.timestamp_begin.unwrap();
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut w = Whisper::new(&program, pteron::MethodOptions::new().threads(1), config).unwrap();
    let audio = read_wav(root().join("testdata/speech/gaps_16k.wav")).unwrap();
    w.encode_window(&audio.samples).unwrap();
    let r = w
        .decode_greedy(&DecodeOptions {
            timestamps: true,
            max_tokens: 20,
            ..Default::default()
        })
        .unwrap();
    assert!(
        r.tokens[0] >= ts && r.tokens[0] <= ts + 50,
        "{:?}",
        r.tokens
    );
    let times: Vec<u32> = r.tokens.iter().copied().filter(|&t| t >= ts).collect();
    assert!(times.windows(2).all(|p| p[0] <= p[1]), "{:?}", r.tokens);
    for s in &r.segments {
        assert!(s.start <= s.end);
    }
}

/// Needs `export_speech.py whisper` (tools/export/out/speech/whisper_tiny_en/, ~150 MB).
#[test]
#[ignore = "needs tools/export/export_speech.py whisper (Whisper tiny.en, 150 MB, not committed)"]
fn tiny_en_greedy_tokens_match_pytorch() {
    let dir = root().join("tools/export/out/speech/whisper_tiny_en");
    let config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut w = Whisper::new(&program, pteron::MethodOptions::new().threads(2), config).unwrap();
    let golden = json(&root().join("testdata/speech/whisper_tiny_en_tokens.json"));
    for clip in ["hello_16k", "gaps_16k"] {
        let audio = read_wav(root().join(format!("testdata/speech/{clip}.wav"))).unwrap();
        w.encode_window(&audio.samples).unwrap();
        let r = w.decode_greedy(&DecodeOptions::default()).unwrap();
        let want = ids(&golden["clips"][clip]["torch_tokens"]);
        println!("{clip}: {:?}", r.tokens);
        assert_eq!(r.tokens, want, "{clip}");
        assert_eq!(want, ids(&golden["clips"][clip]["executorch_tokens"]));
    }
}

#[test]
fn prompt_after_previous_text_keeps_the_last_half_context() {
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let mut config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let (sot, nots) = (config.sot, config.no_timestamps.unwrap());
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let previous: Vec<u32> = (0..30).collect();
    // No <|startofprev|> in the vocabulary: previous text cannot be given.
    let w = Whisper::new(&program, pteron::MethodOptions::new(), config.clone()).unwrap();
    assert_eq!(w.prompt_after(&previous, true), [sot]);
    config.sot_prev = Some(119);
    let mut w = Whisper::new(&program, pteron::MethodOptions::new(), config).unwrap();
    // 24 positions: <|startofprev|>, the last 11 tokens, then the usual prompt.
    let want: Vec<u32> = [119].into_iter().chain(19..30).chain([sot, nots]).collect();
    assert_eq!(w.prompt_after(&previous, false), want);
    assert_eq!(w.prompt_after(&[], false), [sot, nots]);
    // A prompt changes what is decoded; the result reports its log-probability.
    let audio = read_wav(root().join("testdata/speech/hello_16k.wav")).unwrap();
    w.encode_window(&audio.samples).unwrap();
    let opts = DecodeOptions::default();
    let plain = w.decode(&opts).unwrap();
    let prompted = w.decode_after(&opts, &previous).unwrap();
    assert_ne!(plain.tokens, prompted.tokens);
    assert!(plain.sum_logprob < 0.0 && plain.avg_logprob(120) < 0.0);
    // The same seed samples the same tokens.
    let hot = DecodeOptions {
        temperature: 1.0,
        best_of: 2,
        seed: 7,
        ..Default::default()
    };
    let a = w.decode(&hot).unwrap();
    assert_eq!(a.tokens, w.decode(&hot).unwrap().tokens);
}
