//! The `pteron` binary end to end on committed fixtures: `vad` gives the Silero package's
//! segments, `transcribe` gives the library's long-form tokens (greedy and beam search, with
//! and without timestamp tokens) and its JSON carries the timing fields; errors exit non-zero with a message.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `pteron` binary, started through `PTERON_TEST_RUNNER` when that is set (an emulator
/// such as `qemu-aarch64` for a cross-built binary: tools/dev/aarch64_tests.sh).
fn command() -> Command {
    let exe = env!("CARGO_BIN_EXE_pteron");
    let runner = std::env::var("PTERON_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        Some(first) => {
            let mut c = Command::new(first);
            c.args(words).arg(exe);
            c
        }
        None => Command::new(exe),
    }
}

fn pteron(args: &[&str]) -> (bool, String, String) {
    let out = command().args(args).current_dir(root()).output().unwrap();
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

/// Every piece's tokens, in order.
fn all_tokens(r: &Value) -> Vec<Vec<u64>> {
    r["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| ids(&s["tokens"]))
        .collect()
}

/// The library's `Transcriber` on the same clip: what the CLI must print. (That the decoder
/// gives ExecuTorch's tokens for given features is pteron-audio's tests/whisper.rs.)
fn library_tokens(
    max_tokens: usize,
    beam_size: usize,
    without_timestamps: bool,
    threads: usize,
) -> Vec<Vec<u64>> {
    use pteron_audio::transcribe::Transcriber;
    use pteron_audio::whisper::{DecodeOptions, Whisper, WhisperConfig};
    let dir = root().join("testdata/speech/whisper_tiny_random");
    let config = WhisperConfig::from_file(dir.join("whisper.json")).unwrap();
    let file = pteron::ProgramFile::open(dir.join("model.pte")).unwrap();
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let options = pteron::MethodOptions::new().threads(threads);
    let w = Whisper::new(&program, options, config).unwrap();
    let decode = DecodeOptions {
        max_tokens,
        beam_size,
        ..Default::default()
    };
    let mut t = Transcriber::new(w, decode);
    t.long_form.without_timestamps = without_timestamps;
    t.long_form.temperatures = vec![0.0];
    let audio = pteron_audio::read_wav(root().join("testdata/speech/hello_16k.wav")).unwrap();
    t.transcribe(&audio.samples, |_, _| {})
        .unwrap()
        .iter()
        .map(|p| p.tokens.iter().map(|&x| x as u64).collect())
        .collect()
}

#[test]
fn transcribe_greedy_and_beam_give_the_library_tokens() {
    let golden = json_file("testdata/speech/whisper_tiny_random/goldens.json");
    let b = &golden["beam"];
    let (beam_tokens, beam_size) = (b["max_tokens"].to_string(), b["beam_size"].to_string());
    for threads in ["1", "2"] {
        let n: usize = threads.parse().unwrap();
        for without in [true, false] {
            let mut args = vec!["--max-tokens", "20", "--threads", threads, "--no-fallback"];
            if without {
                args.push("--without-timestamps");
            }
            let r = transcribe(&args);
            assert_eq!(all_tokens(&r), library_tokens(20, 1, without, n));
            for key in [
                "transcribe_s",
                "encode_s",
                "decode_s",
                "features_s",
                "real_time_factor",
            ] {
                assert!(r[key].as_f64().unwrap() >= 0.0, "{key}");
            }
            assert!(
                r["windows"].as_u64().unwrap() >= 3,
                "a 4.4 s clip in 2 s windows"
            );
            assert!(r["decoder_steps"].as_u64().unwrap() >= 20);
            args[1] = &beam_tokens;
            args.extend(["--beam-size", &beam_size]);
            let r = transcribe(&args);
            let want = library_tokens(
                beam_tokens.parse().unwrap(),
                beam_size.parse().unwrap(),
                without,
                n,
            );
            assert_eq!(all_tokens(&r), want);
        }
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
    let mut child = command()
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

/// Lowercased words without punctuation (how the goldens' WER is computed).
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Long-form transcription of the 66 s clip (ten sentences with pauses, some across the 30 s
/// and 60 s window edges) gives faster-whisper's words: greedy with and without shown
/// timestamps, and 5 beams. Run with
/// `cargo test --release -p pteron-cli --test cli -- --ignored long_form` after
/// `tools/export/export_speech.py whisper`; the goldens come from
/// `tools/export/longform_goldens.py`.
#[test]
#[ignore = "needs tools/export/export_speech.py whisper (Whisper tiny.en, 150 MB, not committed)"]
fn long_form_tiny_en_matches_faster_whisper() {
    let model = "tools/export/out/speech/whisper_tiny_en/model.pte";
    let golden = &json_file("testdata/speech/longform_goldens.json")["cases"]["longform_16k"];
    for (mode, flags) in [
        ("greedy", &[][..]),
        ("greedy", &["--timestamps"][..]),
        ("beam5", &["--beam-size", "5"][..]),
    ] {
        let mut args = vec![
            "transcribe",
            model,
            "testdata/speech/longform_16k.wav",
            "--json",
            "--threads",
            "2",
        ];
        args.extend_from_slice(flags);
        let (ok, out, err) = pteron(&args);
        assert!(ok, "{err}");
        let r: Value = serde_json::from_str(&out).unwrap();
        let got = r["text"].as_str().unwrap();
        let want = golden["modes"][mode]["faster_whisper_text"]
            .as_str()
            .unwrap();
        println!("{mode} {flags:?}: {got}");
        assert_eq!(words(got), words(want), "{mode} {flags:?}");
        // Every sentence is there: the last words of the clip are the last ones out.
        let segs = r["segments"].as_array().unwrap();
        assert!(segs.len() >= 10, "{} segments", segs.len());
        assert!(segs.last().unwrap()["end"].as_f64().unwrap() > 60.0);
    }
}

/// `pteron serve --port 0` prints the address it listens on, answers OpenAI requests, and
/// stops on Ctrl-C (SIGINT).
#[cfg(unix)]
#[test]
fn serve_answers_and_stops_on_ctrl_c() {
    serve_session("testdata/llm/tiny/fp32.pte", &[]);
}

/// The same on the GPU: the tiny Llama's Vulkan export with `--device gpu`.
#[cfg(all(unix, feature = "gpu"))]
#[test]
fn serve_on_the_gpu() {
    if std::env::var("PTERON_GPU_TESTS").as_deref() == Ok("skip") {
        return;
    }
    serve_session("testdata/vulkan/llm_tiny/model.pte", &["--device", "gpu"]);
}

#[cfg(unix)]
fn serve_session(model: &str, extra: &[&str]) {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::process::Stdio;
    let mut child = command()
        .args([
            "serve",
            model,
            "--tokenizer",
            "testdata/llm/tiny/tokenizer.json",
            "--port",
            "0",
            "--threads",
            "1",
            "--model-name",
            "tiny",
        ])
        .args(extra)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_string();
    let ask = |path: &str, body: &str| {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(head.as_bytes()).unwrap();
        let mut res = String::new();
        s.read_to_string(&mut res).unwrap();
        res
    };
    let res = ask(
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0}"#,
    );
    assert!(res.starts_with("HTTP/1.1 200"), "{res}");
    let body: Value = serde_json::from_str(res.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["model"], "tiny");
    assert_eq!(body["usage"]["completion_tokens"], 5);
    let res = ask("/v1/completions", r#"{"prompt": "x", "n": 3}"#);
    assert!(res.starts_with("HTTP/1.1 400"), "{res}");
    // SAFETY: kill(2) on the child's pid, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.contains("256-token context"), "{err}");
    assert!(err.contains("stopped"), "{err}");
}

/// `pteron generate --speculate lookup:K` and `--draft DRAFT.pte` give ExecuTorch's greedy
/// tokens on the speculative-decoding fixtures, with the speculation numbers in the JSON; a
/// program without full logits is refused with the export settings that allow it; warm-up
/// generations (`--warmup`) leave the answer and the stats as they are.
#[test]
fn generate_with_speculation() {
    let g = json_file("testdata/llm/spec/goldens.json");
    let p = &g["variants"]["fp32"]["prompts"]["repeat"];
    let generate = |extra: &[&str]| {
        let mut args = vec![
            "generate",
            "testdata/llm/spec/fp32.pte",
            "--tokenizer",
            "testdata/llm/tiny/tokenizer.json",
            "--prompt",
            p["prompt"].as_str().unwrap(),
            "--max-new-tokens",
            "64",
            "--threads",
            "1",
            "--json",
        ];
        args.extend_from_slice(extra);
        let (ok, out, err) = pteron(&args);
        assert!(ok, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()
    };
    let plain = generate(&[]);
    assert_eq!(ids(&plain["tokens"]), ids(&p["generated_ids"]));
    assert_eq!(plain["stats"]["speculation"], Value::Null);
    assert_eq!(plain["stats"]["drafted_tokens"], 0);
    assert_eq!(plain["stats"]["decode_calls"], 63);
    // Warm-up generations first (benchmarks): the same answer, and the stats of the last one.
    let warm = generate(&["--warmup", "2"]);
    assert_eq!(ids(&warm["tokens"]), ids(&p["generated_ids"]));
    assert_eq!(warm["stats"]["decode_calls"], 63);
    assert_eq!(
        warm["stats"]["generated_tokens"],
        plain["stats"]["generated_tokens"]
    );
    for (extra, name) in [
        (&["--speculate", "lookup:8"][..], "lookup:8"),
        (&["--speculate", "lookup"][..], "lookup:4"),
        (
            &[
                "--draft",
                "testdata/llm/spec/draft.pte",
                "--draft-tokens",
                "3",
            ][..],
            "draft:3",
        ),
    ] {
        let v = generate(extra);
        assert_eq!(ids(&v["tokens"]), ids(&p["generated_ids"]), "{name}");
        assert_eq!(v["text"], plain["text"]);
        let s = &v["stats"];
        assert_eq!(s["speculation"], name);
        assert!(s["accepted_tokens"].as_u64().unwrap() > 0, "{name}: {s}");
        assert!(s["decode_calls"].as_u64().unwrap() < 63, "{name}: {s}");
        assert!(s["acceptance_rate"].as_f64().unwrap() > 0.0);
        assert_eq!(
            s["draft_calls"].as_u64().unwrap() > 0,
            name.starts_with("draft")
        );
    }
    let (ok, _, err) = pteron(&[
        "generate",
        "testdata/llm/tiny/fp32.pte",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
        "--prompt",
        "x",
        "--speculate",
        "lookup",
    ]);
    assert!(!ok);
    assert!(err.contains("generate_full_logits=True"), "{err}");
    let (ok, _, err) = pteron(&[
        "generate",
        "testdata/llm/spec/fp32.pte",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
        "--prompt",
        "x",
        "--speculate",
        "lookup:0",
    ]);
    assert!(!ok);
    assert!(err.contains("K ≥ 1"), "{err}");
}

/// `pteron generate --image` on the vision-language fixture: the picture goes where the prompt
/// says `<image>`, is resized as the encoder asks, and the tokens are ExecuTorch's; a text-only
/// program refuses a picture; a file that is not a picture is a clear error.
#[test]
fn generate_with_an_image() {
    let g = json_file("testdata/llm/vlm/goldens.json");
    let v = &g["images"]["image_b"];
    let prompt = format!(
        "{}<image>{}",
        v["text_before"].as_str().unwrap(),
        v["text_after"].as_str().unwrap()
    );
    let (ok, out, err) = pteron(&[
        "generate",
        "testdata/llm/vlm/llava.pte",
        "--tokenizer",
        "testdata/llm/vlm/tokenizer.json",
        "--image",
        "testdata/llm/vlm/image_b.png",
        "--prompt",
        &prompt,
        "--max-new-tokens",
        "40",
        "--ignore-eos",
        "--json",
    ]);
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(ids(&doc["tokens"]), ids(&v["greedy_ids"]));
    assert_eq!(doc["image"]["resized_to"], serde_json::json!([66, 112]));
    assert_eq!(
        doc["stats"]["prompt_tokens"].as_u64().unwrap() + 40,
        v["positions"].as_u64().unwrap()
    );
    let (ok, _, err) = pteron(&[
        "generate",
        "testdata/llm/tiny/fp32.pte",
        "--tokenizer",
        "testdata/llm/tiny/tokenizer.json",
        "--image",
        "testdata/llm/vlm/image_b.png",
        "--prompt",
        "x",
    ]);
    assert!(!ok);
    assert!(err.contains("no vision_encoder"), "{err}");
    let (ok, _, err) = pteron(&[
        "generate",
        "testdata/llm/vlm/llava.pte",
        "--tokenizer",
        "testdata/llm/vlm/tokenizer.json",
        "--image",
        "testdata/llm/vlm/tokenizer.json",
        "--prompt",
        "x",
    ]);
    assert!(!ok);
    assert!(err.contains("cannot decode"), "{err}");
}

/// `--device gpu` runs MobileNetV2 as one GPU region with ExecuTorch's outputs; `devices`
/// and `ops --device gpu` list what the GPU engine has. Needs a GPU adapter (CI: lavapipe),
/// unless `PTERON_GPU_TESTS=skip` (then only the listing commands run).
#[cfg(feature = "gpu")]
#[test]
fn gpu_device_runs_mobilenet() {
    let (ok, out, err) = pteron(&["devices", "--json"]);
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let adapters = doc["adapters"].as_array().unwrap().len();
    let (ok, out, err) = pteron(&["ops", "--device", "gpu", "--json"]);
    assert!(ok, "{err}");
    let ops: Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = ops["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(names.contains(&"aten::convolution.out") && names.contains(&"aten::addmm.out"));
    if adapters == 0 && std::env::var("PTERON_GPU_TESTS").as_deref() == Ok("skip") {
        return;
    }
    assert!(adapters > 0, "no GPU adapter: {out}");
    let dir = "testdata/models/mobilenet_v2_small";
    let (ok, out, err) = pteron(&[
        "run",
        &format!("{dir}/model.pte"),
        "-i",
        &format!("{dir}/input0.npy"),
        "--expect",
        &format!("{dir}/expected0.npy"),
        "--device",
        "gpu",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("1 GPU region(s) on"), "{out}");
    let err_line = out
        .lines()
        .find(|l| l.contains("max abs error"))
        .unwrap_or_else(|| panic!("{out}"));
    let value: f64 = err_line
        .split("max abs error ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(value < 1e-5, "{err_line}");
    // An adapter that does not exist is an error, `auto` falls back to the CPU.
    let model = format!("{dir}/model.pte");
    let (ok, _, err) = pteron(&["run", &model, "--device", "gpu", "--adapter", "no such GPU"]);
    assert!(!ok && err.contains("no GPU adapter"), "{err}");
    let (ok, out, err) = pteron(&[
        "run",
        &model,
        "--device",
        "auto",
        "--adapter",
        "no such GPU",
    ]);
    assert!(ok && !out.contains("GPU region"), "{out}{err}");
}

/// `generate --device gpu` on ExecuTorch's Vulkan LLM export (the tiny Llama, the KV cache
/// resident on the device): ExecuTorch's greedy ids; without a GPU the program names the
/// flag it needs.
#[cfg(feature = "gpu")]
#[test]
fn gpu_generate_runs_the_vulkan_llm_export() {
    let dir = "testdata/vulkan/llm_tiny";
    let goldens: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join(dir).join("goldens.json")).unwrap(),
    )
    .unwrap();
    let args = |device: &'static str| {
        vec![
            "generate".to_string(),
            format!("{dir}/model.pte"),
            "--tokenizer".into(),
            "testdata/llm/tiny/tokenizer.json".into(),
            "--prompt".into(),
            goldens["prompt"].as_str().unwrap().into(),
            "--max-new-tokens".into(),
            "17".into(),
            "--ignore-eos".into(),
            "--json".into(),
            "--device".into(),
            device.into(),
        ]
    };
    let run = |device| {
        let a = args(device);
        pteron(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (ok, _, err) = run("cpu");
    assert!(!ok && err.contains("--device gpu"), "{err}");
    if std::env::var("PTERON_GPU_TESTS").as_deref() == Ok("skip") {
        return;
    }
    let (ok, out, err) = run("gpu");
    assert!(ok, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["prompt_ids"], goldens["prompt_ids"]);
    assert_eq!(doc["tokens"], goldens["generated_ids"]);
}
