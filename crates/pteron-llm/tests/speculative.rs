//! Speculative decoding on the fixtures of testdata/llm/spec (tools/export/export_spec_llm.py:
//! the tiny Llama exported with full logits, portable and XNNPACK, and a one-layer draft): the
//! tokens equal plain decoding's and ExecuTorch's for prompt lookup and a draft model at every
//! draft length, stop conditions end at the same token, and programs that cannot check drafts
//! are refused with a clear error.

use std::path::PathBuf;

use pteron_llm::chat::Chat;
use pteron_llm::{
    FinishReason, GenerateOptions, Generation, Generator, Model, SamplerConfig, Speculation,
    Tokenizer,
};
use serde_json::Value;

fn llm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm")
}

fn dir() -> PathBuf {
    llm_dir().join("spec")
}

fn goldens() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap()).unwrap()
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_file(llm_dir().join("tiny/tokenizer.json")).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn open(path: PathBuf) -> pteron::ProgramFile {
    pteron::ProgramFile::open(path).unwrap()
}

fn load<'a>(program: &pteron::Program<'a>, threads: usize) -> Model<'a> {
    Model::load(program, pteron::MethodOptions::new().threads(threads)).unwrap()
}

fn runtimes() -> Vec<(&'static str, pteron::Runtime)> {
    let portable = pteron::Runtime::builder()
        .kernels(pteron::portable_kernels())
        .build()
        .unwrap();
    vec![("default", pteron::Runtime::new()), ("portable", portable)]
}

/// `n` tokens, never stopping (no EOS ids), greedy unless `sampler` says otherwise.
fn opts(n: usize, speculation: Speculation) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        eos_ids: Some(Vec::new()),
        skip_special: false,
        speculation,
        ..Default::default()
    }
}

fn lookup(k: usize) -> Speculation {
    Speculation::prompt_lookup(k)
}

fn run(gen: &mut Generator, prompt: &[u32], o: &GenerateOptions) -> Generation {
    gen.rewind(0);
    let g = gen.generate(prompt, o, &mut |_| {}).unwrap();
    // The cache holds the context only (drafts past it were rewound).
    assert_eq!(gen.model.pos(), gen.context().len());
    g
}

/// Where two token lists first differ, with the top-2 margin of plain decoding's logits there
/// (recomputed one token per call), for the failure message.
fn divergence(gen: &mut Generator, prompt: &[u32], plain: &[u32], got: &[u32]) -> String {
    let at = plain.iter().zip(got).take_while(|(a, b)| a == b).count();
    gen.rewind(0);
    let mut logits = gen.model.forward(prompt).unwrap().to_vec();
    for &t in &plain[..at] {
        logits = gen.model.forward(&[t]).unwrap().to_vec();
    }
    let mut sorted = logits.clone();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    format!(
        "first difference at token {at}: plain {:?}, speculative {:?}; plain top-2 margin {}",
        plain.get(at),
        got.get(at),
        sorted[0] - sorted[1]
    )
}

#[test]
fn programs_with_full_logits_can_check_drafts() {
    let g = goldens();
    for name in ["fp32", "xnnpack_fp32", "draft"] {
        let v = &g["variants"][name];
        let file = open(dir().join(v["pte"].as_str().unwrap()));
        let program = pteron::Runtime::new().load_program(&file).unwrap();
        let mut model = load(&program, 1);
        assert_eq!(model.full_logits(), Some(true), "{name}");
        model.check_verify().unwrap();
        assert_eq!(model.chunk_len(), 31);
        // One row per token, the last equal to what `forward` returns.
        let p = &v["prompts"]["short"];
        let prompt = ids(&p["prompt_ids"]);
        let rows = model.forward_all(&prompt).unwrap();
        assert_eq!(rows.len(), prompt.len());
        assert_eq!(rows.vocab(), 512);
        let last = rows.row(prompt.len() - 1).to_vec();
        model.rewind(0);
        assert_eq!(model.forward(&prompt).unwrap(), &last[..]);
        // More tokens than one call takes: the rows of every chunk.
        model.rewind(0);
        let long = ids(&v["prompts"]["long"]["prompt_ids"]);
        assert!(long.len() > model.chunk_len());
        assert_eq!(model.forward_all(&long).unwrap().len(), long.len());
    }
}

#[test]
fn programs_that_cannot_check_drafts_are_refused() {
    let tok = tokenizer();
    let prompt = tok.encode("Flat is better than nested.", true).unwrap();
    for (file, says) in [
        ("fp32.pte", "returns the last position's logits only"),
        ("static.pte", "takes one token per call"),
    ] {
        let f = open(llm_dir().join("tiny").join(file));
        let program = pteron::Runtime::new().load_program(&f).unwrap();
        let mut model = load(&program, 1);
        let err = model.check_verify().unwrap_err();
        assert!(
            matches!(err, pteron_llm::Error::CannotVerify { .. }),
            "{file}: {err}"
        );
        let msg = err.to_string();
        for want in [
            says,
            "enable_dynamic_shape=True",
            "use_kv_cache=True",
            "generate_full_logits=True",
        ] {
            assert!(msg.contains(want), "{file}: {msg}");
        }
        assert!(model.forward_all(&prompt).is_err(), "{file}");
        let mut gen = Generator::new(model, &tok);
        for spec in [lookup(4), Speculation::DraftModel { draft_len: 4 }] {
            let err = gen
                .generate(&prompt, &opts(8, spec), &mut |_| {})
                .unwrap_err();
            assert!(
                matches!(err, pteron_llm::Error::CannotVerify { .. }),
                "{file}: {err}"
            );
            // Nothing was run.
            assert_eq!(gen.model.pos(), 0);
        }
        // Plain decoding still works.
        gen.generate(&prompt, &opts(4, Speculation::Off), &mut |_| {})
            .unwrap();
    }
    // A draft model is asked for but none is attached; invalid settings.
    let f = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&f).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    let err = gen
        .generate(
            &prompt,
            &opts(4, Speculation::DraftModel { draft_len: 4 }),
            &mut |_| {},
        )
        .unwrap_err();
    assert!(err.to_string().contains("no draft model"), "{err}");
    assert!(gen
        .generate(&prompt, &opts(4, lookup(0)), &mut |_| {})
        .is_err());
}

/// The matrix of the exactness check: both programs, both kernel sets, one and two threads,
/// every prompt, draft lengths 1..=8 for prompt lookup and the draft model: the ids equal
/// plain decoding's and ExecuTorch's (one token per call).
#[test]
fn greedy_tokens_equal_plain_decoding_and_executorch() {
    let g = goldens();
    let n = g["new_tokens"].as_u64().unwrap() as usize;
    let tok = tokenizer();
    let draft_file = open(dir().join("draft.pte"));
    let mut checked = 0;
    for (rname, runtime) in runtimes() {
        let draft_program = runtime.load_program(&draft_file).unwrap();
        for name in ["fp32", "xnnpack_fp32"] {
            let v = &g["variants"][name];
            let file = open(dir().join(v["pte"].as_str().unwrap()));
            let program = runtime.load_program(&file).unwrap();
            for threads in [1, 2] {
                let mut gen = Generator::new(load(&program, threads), &tok);
                gen.set_draft_model(load(&draft_program, threads)).unwrap();
                for (pname, p) in v["prompts"].as_object().unwrap() {
                    let prompt = ids(&p["prompt_ids"]);
                    let want = ids(&p["generated_ids"]);
                    let plain = run(&mut gen, &prompt, &opts(n, Speculation::Off));
                    assert_eq!(
                        plain.tokens, want,
                        "{rname}/{name}/{pname}/{threads}: plain"
                    );
                    for k in 1..=8 {
                        for spec in [lookup(k), Speculation::DraftModel { draft_len: k }] {
                            let got = run(&mut gen, &prompt, &opts(n, spec));
                            if got.tokens != want {
                                let why = divergence(&mut gen, &prompt, &want, &got.tokens);
                                panic!("{rname}/{name}/{pname}/{threads} threads/{spec:?}: {why}");
                            }
                            assert_eq!(got.text, plain.text);
                            let s = &got.stats;
                            assert!(s.accepted_tokens <= s.drafted_tokens);
                            // Every token but the first comes from a call or an accepted draft.
                            assert_eq!(s.decode_calls + s.accepted_tokens, n - 1, "{spec:?}");
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2 * 4 * 16);
}

/// Prompt lookup drafts, accepts and calls exactly as the Python loop over ExecuTorch's
/// runtime in export_spec_llm.py (same lookup rule), and accepts most drafts on the prompts
/// whose continuation repeats.
#[test]
fn prompt_lookup_acceptance_equals_executorch_loop() {
    let g = goldens();
    let n = g["new_tokens"].as_u64().unwrap() as usize;
    let tok = tokenizer();
    let v = &g["variants"]["fp32"];
    let file = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    for (pname, p) in v["prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        for k in g["lookup"]["draft_lens"].as_array().unwrap() {
            let k = k.as_u64().unwrap() as usize;
            let et = &p[format!("et_lookup_{k}")];
            assert!(et["same_ids"].as_bool().unwrap());
            let got = run(&mut gen, &prompt, &opts(n, lookup(k)));
            let s = &got.stats;
            let what = format!("{pname} k={k}");
            assert_eq!(
                s.drafted_tokens as u64,
                et["drafted"].as_u64().unwrap(),
                "{what}"
            );
            assert_eq!(
                s.accepted_tokens as u64,
                et["accepted"].as_u64().unwrap(),
                "{what}"
            );
            assert_eq!(
                s.decode_calls as u64,
                et["calls"].as_u64().unwrap(),
                "{what}"
            );
            if pname == "repeat" || pname == "loop" {
                assert!(s.acceptance_rate().unwrap() > 0.4, "{what}: {s:?}");
                assert!(s.decode_calls < n / 2 + 8, "{what}: {s:?}");
            }
        }
    }
}

/// The target as its own draft: every drafted token is accepted (greedy).
#[test]
fn the_target_as_its_own_draft_accepts_everything() {
    let g = goldens();
    let n = g["new_tokens"].as_u64().unwrap() as usize;
    let tok = tokenizer();
    let file = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    gen.set_draft_model(load(&program, 1)).unwrap();
    for (pname, p) in g["variants"]["fp32"]["prompts"].as_object().unwrap() {
        let prompt = ids(&p["prompt_ids"]);
        for k in [1, 3, 8] {
            let got = run(
                &mut gen,
                &prompt,
                &opts(n, Speculation::DraftModel { draft_len: k }),
            );
            assert_eq!(got.tokens, ids(&p["generated_ids"]), "{pname} k={k}");
            let s = &got.stats;
            assert_eq!(s.accepted_tokens, s.drafted_tokens, "{pname} k={k}: {s:?}");
            assert_eq!(s.acceptance_rate(), Some(1.0));
            // k + 1 tokens per call.
            assert_eq!(s.decode_calls, (n - 1).div_ceil(k + 1), "{pname} k={k}");
        }
    }
    assert!(gen.take_draft_model().is_some());
    assert!(gen.draft_model().is_none());
}

/// EOS ids, stop strings and max_new_tokens that fall inside runs of accepted drafts end the
/// generation at the same token, with the same text and finish reason, as plain decoding. On
/// the `repeat` prompt 3 of 4 tokens are accepted drafts (lookup, 8 per call), so most of these
/// stops come in the middle of a run.
#[test]
fn stops_inside_accepted_runs_end_where_plain_decoding_does() {
    let g = goldens();
    let tok = tokenizer();
    let file = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let draft_file = open(dir().join("draft.pte"));
    let draft_program = pteron::Runtime::new().load_program(&draft_file).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    gen.set_draft_model(load(&draft_program, 1)).unwrap();
    let mut inside = 0;
    for pname in ["repeat", "loop", "long"] {
        let p = &g["variants"]["fp32"]["prompts"][pname];
        let prompt = ids(&p["prompt_ids"]);
        let full = ids(&p["generated_ids"]);
        for spec in [lookup(8), Speculation::DraftModel { draft_len: 8 }] {
            let check = |gen: &mut Generator, o: GenerateOptions, what: &str| {
                let plain = run(
                    gen,
                    &prompt,
                    &GenerateOptions {
                        speculation: Speculation::Off,
                        ..o.clone()
                    },
                );
                let got = run(gen, &prompt, &o);
                assert_eq!(got.tokens, plain.tokens, "{pname} {spec:?} {what}");
                assert_eq!(got.text, plain.text, "{pname} {spec:?} {what}");
                assert_eq!(got.finish, plain.finish, "{pname} {spec:?} {what}");
                assert_eq!(gen.context().len(), prompt.len() + got.tokens.len() - 1);
                got
            };
            // EOS: each token id at its first occurrence.
            for (at, &t) in full.iter().enumerate() {
                if full[..at].contains(&t) {
                    continue;
                }
                let o = GenerateOptions {
                    eos_ids: Some(vec![t]),
                    ..opts(64, spec)
                };
                let got = check(&mut gen, o, &format!("eos {t}"));
                assert_eq!(got.finish, FinishReason::Eos);
                assert_eq!(got.tokens.len(), at + 1);
                if got.stats.decode_calls + 1 < at {
                    inside += 1;
                }
            }
            // Stop strings: pieces of the text at several places.
            let text = tok.decode(&full, false).unwrap();
            let chars: Vec<char> = text.chars().collect();
            for start in (3..chars.len().saturating_sub(4)).step_by(7) {
                let stop: String = chars[start..start + 3].iter().collect();
                let o = GenerateOptions {
                    stop_strings: vec![stop.clone()],
                    ..opts(64, spec)
                };
                let got = check(&mut gen, o, &format!("stop {stop:?}"));
                assert_eq!(got.finish, FinishReason::StopString);
                assert!(!got.text.contains(&stop));
            }
            // max_new_tokens.
            for m in 1..=20 {
                let got = check(&mut gen, opts(m, spec), &format!("max {m}"));
                assert_eq!(got.tokens, full[..m]);
                assert_eq!(got.finish, FinishReason::MaxTokens);
            }
        }
    }
    assert!(inside > 10, "{inside}");
}

#[test]
fn seeded_sampling_is_reproducible_and_equals_plain_sampling() {
    let tok = tokenizer();
    let file = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let draft_file = open(dir().join("draft.pte"));
    let draft_program = pteron::Runtime::new().load_program(&draft_file).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    gen.set_draft_model(load(&draft_program, 1)).unwrap();
    let sampler = SamplerConfig {
        temperature: 0.7,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.02,
        repetition_penalty: 1.1,
        seed: 7,
    };
    let prompt = tok.encode("json json json json", true).unwrap();
    let with = |spec: Speculation, seed: u64| GenerateOptions {
        sampler: SamplerConfig {
            seed,
            ..sampler.clone()
        },
        ..opts(48, spec)
    };
    let plain = run(&mut gen, &prompt, &with(Speculation::Off, 7));
    let other_seed = run(&mut gen, &prompt, &with(Speculation::Off, 8));
    assert_ne!(plain.tokens, other_seed.tokens);
    let mut accepted = 0;
    for spec in [
        lookup(4),
        lookup(8),
        Speculation::DraftModel { draft_len: 3 },
    ] {
        let a = run(&mut gen, &prompt, &with(spec, 7));
        let b = run(&mut gen, &prompt, &with(spec, 7));
        assert_eq!(a.tokens, b.tokens, "{spec:?}");
        // One draw per token from the target's distribution, as plain decoding makes.
        assert_eq!(a.tokens, plain.tokens, "{spec:?}");
        let c = run(&mut gen, &prompt, &with(spec, 8));
        assert_eq!(c.tokens, other_seed.tokens, "{spec:?}");
        accepted += a.stats.accepted_tokens;
    }
    assert!(accepted > 0);
}

#[test]
fn context_full_and_chat_turns_with_speculation() {
    let tok = tokenizer();
    let file = open(dir().join("fp32.pte"));
    let program = pteron::Runtime::new().load_program(&file).unwrap();
    let draft_file = open(dir().join("draft.pte"));
    let draft_program = pteron::Runtime::new().load_program(&draft_file).unwrap();
    let mut gen = Generator::new(load(&program, 1), &tok);
    gen.set_draft_model(load(&draft_program, 1)).unwrap();
    let ctx = gen.model.meta.max_context_len;
    // The end of the context: the same 11 tokens, then ContextFull.
    let fill: Vec<u32> = (0..ctx - 10).map(|i| 100 + (i % 7) as u32).collect();
    let plain = run(&mut gen, &fill, &opts(100, Speculation::Off));
    assert_eq!(plain.finish, FinishReason::ContextFull);
    assert_eq!(plain.tokens.len(), 11);
    for spec in [lookup(8), Speculation::DraftModel { draft_len: 8 }] {
        let got = run(&mut gen, &fill, &opts(100, spec));
        assert_eq!(got.finish, FinishReason::ContextFull, "{spec:?}");
        assert_eq!(got.tokens, plain.tokens, "{spec:?}");
        assert_eq!(gen.model.pos(), ctx);
    }

    // Chat: the cache (the draft's too) follows the turns; answers equal plain chat's.
    let turns = ["json json json", "Simple is better", "rrrrrr"];
    let answers = |gen: &mut Generator, spec: Speculation| {
        gen.rewind(0);
        let o = GenerateOptions {
            max_new_tokens: 24,
            speculation: spec,
            ..Default::default()
        };
        let mut chat = Chat::new(gen, None, None).unwrap();
        turns
            .iter()
            .map(|t| chat.send(t, &o, &mut |_| {}).unwrap().tokens)
            .collect::<Vec<_>>()
    };
    let plain = answers(&mut gen, Speculation::Off);
    for spec in [lookup(5), Speculation::DraftModel { draft_len: 5 }] {
        assert_eq!(answers(&mut gen, spec), plain, "{spec:?}");
    }
}

/// Why greedy tokens agree: the rows of a checking call (k tokens through the batched kernels)
/// equal those of k one-token calls up to rounding. Measured on these fixtures (x86-64): with
/// the portable kernels bit for bit; with the default kernels about half the logits differ in
/// the last bits, by at most ~1e-5, against top-2 margins of at least ~5e-3 on the golden
/// steps. The bound asserted here is loose on purpose (kernels may change summation order).
#[test]
fn checking_rows_equal_one_token_calls_up_to_rounding() {
    let g = goldens();
    for (rname, runtime) in runtimes() {
        for name in ["fp32", "xnnpack_fp32", "draft"] {
            let file = open(dir().join(format!("{name}.pte")));
            let program = runtime.load_program(&file).unwrap();
            let mut m = load(&program, 2);
            let mut max_diff = 0f32;
            for p in g["variants"][name]["prompts"].as_object().unwrap().values() {
                let prompt = ids(&p["prompt_ids"]);
                let gen = ids(&p["generated_ids"]);
                for k in [2, 5, 9] {
                    m.rewind(0);
                    m.forward(&prompt).unwrap();
                    for part in gen.chunks_exact(k) {
                        let base = m.pos();
                        let one: Vec<Vec<f32>> = part
                            .iter()
                            .map(|&t| m.forward(&[t]).unwrap().to_vec())
                            .collect();
                        m.rewind(base);
                        let rows = m.forward_all(part).unwrap();
                        for (j, o) in one.iter().enumerate() {
                            for (a, b) in rows.row(j).iter().zip(o) {
                                max_diff = max_diff.max((a - b).abs());
                            }
                        }
                    }
                }
            }
            assert!(max_diff < 1e-4, "{rname}/{name}: {max_diff}");
        }
    }
}
