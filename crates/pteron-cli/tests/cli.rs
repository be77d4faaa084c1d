//! The `pteron` binary end to end on committed fixtures: `vad` gives the Silero package's
//! segments, `transcribe` gives ExecuTorch's tokens (greedy and beam search) and its JSON
//! carries the timing fields; errors exit non-zero with a message.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pteron(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pteron"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_file(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join(path)).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn vad_segments_match_the_package() {
    let (ok, out, err) = pteron(&["vad", "testdata/speech/gaps_16k.wav", "--json"]);
    assert!(ok, "{err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    let want = &json_file("testdata/speech/vad_goldens.json")["clips"]["gaps_16k"]["segments"];
    let want: Vec<(f64, f64)> = want
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[0].as_f64().unwrap() / 16000.0,
                s[1].as_f64().unwrap() / 16000.0,
            )
        })
        .collect();
    let got: Vec<(f64, f64)> = got["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["start"].as_f64().unwrap(), s["end"].as_f64().unwrap()))
        .collect();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            (g.0 - w.0).abs() < 1e-3 && (g.1 - w.1).abs() < 1e-3,
            "{got:?} vs {want:?}"
        );
    }
}

/// The random-weight Whisper fixture (2 s window) with the tiny LLM's tokenizer (any
/// tokenizer turns its 128 token ids into text).
fn transcribe(extra: &[&str]) -> Value {
    let mut args = vec![
        "transcribe",
        "testdata/speech/whisper_tiny_random/model.pte",
        "testdata/speech/hello_16k.wav",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
        "--json",
    ];
    args.extend_from_slice(extra);
    let (ok, out, err) = pteron(&args);
    assert!(ok, "{err}");
    serde_json::from_str(&out).unwrap()
}

fn first_window_tokens(r: &Value) -> Vec<u64> {
    ids(&r["segments"][0]["tokens"])
}

#[test]
fn transcribe_greedy_and_beam_give_executorch_tokens() {
    let golden = json_file("testdata/speech/whisper_tiny_random/goldens.json");
    let eot = json_file("testdata/speech/whisper_tiny_random/whisper.json")["eot"]
        .as_u64()
        .unwrap();
    let strip = |mut t: Vec<u64>| {
        if t.last() == Some(&eot) {
            t.pop();
        }
        t
    };
    for threads in ["1", "2"] {
        let r = transcribe(&["--max-tokens", "20", "--threads", threads]);
        assert_eq!(first_window_tokens(&r), strip(ids(&golden["tokens"])));
        for key in [
            "transcribe_s",
            "encode_s",
            "decode_s",
            "features_s",
            "real_time_factor",
        ] {
            assert!(r[key].as_f64().unwrap() >= 0.0, "{key}");
        }
        assert!(r["decoder_steps"].as_u64().unwrap() >= 20);
        let b = &golden["beam"];
        let r = transcribe(&[
            "--max-tokens",
            &b["max_tokens"].to_string(),
            "--beam-size",
            &b["beam_size"].to_string(),
            "--threads",
            threads,
        ]);
        assert_eq!(first_window_tokens(&r), strip(ids(&b["tokens"])));
    }
}

#[test]
fn transcribe_errors_are_reported() {
    let (ok, _, err) = pteron(&[
        "transcribe",
        "testdata/speech/whisper_tiny_random/model.pte",
        "testdata/speech/no_such.wav",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
    ]);
    assert!(!ok);
    assert!(err.contains("no_such.wav"), "{err}");
    // A program without encode/decode methods.
    let (ok, _, err) = pteron(&[
        "transcribe",
        "testdata/speech/silero_vad.pte",
        "testdata/speech/hello_16k.wav",
        "--config",
        "testdata/speech/whisper_tiny_random/whisper.json",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
    ]);
    assert!(!ok);
    assert!(err.contains("encode"), "{err}");
}

/// Output cut short by the reader (`pteron ops | head -1`) ends the process quietly.
#[test]
fn closed_stdout_is_not_a_panic() {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pteron"))
        .arg("ops")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Hang up before the listing is written.
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(status.code() == Some(141) || status.success(), "{status:?}");
}
