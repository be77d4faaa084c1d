//! A vision-language model (testdata/llm/vlm/: LLaVA 1.5's architecture reduced to fixture
//! size, random weights, exported by ExecuTorch's own LLaVA recipe; goldens from a step-by-step
//! loop over ExecuTorch's runtime, whose text equals ExecuTorch's `MultimodalRunner`'s:
//! tools/export/export_vlm.py). Greedy ids of text + image + text prompts on two pictures, at
//! 1 and 2 threads; the picture given as ExecuTorch's runner got it (resized by torchvision)
//! and as the PNG that pteron resizes itself.

use std::path::PathBuf;

use pteron_llm::{Generator, Image, Model, Part, Tokenizer, NOT_A_TOKEN};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/vlm")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// A top-1 minus top-2 margin that int8 rounding differences may reverse (the encoder is int8
/// static, the decoder 8da4w; pteron's int8 products are not bit-identical with XNNPACK's).
const QUANT_TIE: f64 = 0.01;

fn goldens(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(file)).unwrap()).unwrap()
}

/// The recipe's program: int8 static XNNPACK encoder, 8da4w text decoder, `token_embedding`
/// bounded at 49 tokens (the long question goes in two calls).
#[test]
fn recipe_program_gives_executorchs_ids() {
    check("goldens.json", true);
}

/// The same model exported without quantization or delegate (portable kernels only).
#[test]
fn portable_program_gives_executorchs_ids() {
    check("goldens_portable.json", false);
}

fn check(goldens_file: &str, quantized: bool) {
    let g = goldens(goldens_file);
    let n = g["new_tokens"].as_u64().unwrap() as usize;
    let file = pteron::ProgramFile::open(dir().join(g["pte"].as_str().unwrap())).unwrap();
    let runtime = pteron::Runtime::new();
    let program = runtime.load_program(&file).unwrap();
    let tokenizer = Tokenizer::from_file(dir().join("tokenizer.json")).unwrap();
    let mut failures = Vec::new();
    let mut checked = 0;
    for threads in [1, 2] {
        let options = pteron::MethodOptions::new().threads(threads);
        let model = Model::load(&program, options).unwrap();
        let input = model.vision_input().expect("a vision encoder");
        assert_eq!(
            (input.max_width, input.max_height, input.dynamic),
            (112, 112, true)
        );
        assert_eq!(
            model.meta.max_context_len as u64,
            g["max_seq_len"].as_u64().unwrap()
        );
        let mut gen = Generator::new(model, &tokenizer);
        for (name, v) in g["images"].as_object().unwrap() {
            let shape: Vec<usize> = v["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            let planar = std::fs::read(dir().join(v["u8"].as_str().unwrap())).unwrap();
            let resized = Image::from_planar(shape[2], shape[1], planar).unwrap();
            let png = pteron_image::Image::open(dir().join(v["png"].as_str().unwrap())).unwrap();
            let (before, after) = (ids(&v["ids_before"]), ids(&v["ids_after"]));
            assert_eq!(
                tokenizer
                    .encode(v["text_before"].as_str().unwrap(), false)
                    .unwrap(),
                before
            );
            let mut want = ids(&v["greedy_ids"]);
            let margins = v["margins"].as_array().unwrap();
            let upto = margins
                .iter()
                .position(|m| quantized && m.as_f64().unwrap() < QUANT_TIE)
                .unwrap_or(n);
            want.truncate(upto);
            assert_eq!(v["same_ids_at_2_threads"], true, "{name}");
            for (how, image) in [("resized by torchvision", &resized), ("png", &png)] {
                let parts = [
                    Part::Tokens(&before),
                    Part::Image(image),
                    Part::Tokens(&after),
                ];
                let mut got = gen.greedy_ids_parts(&parts, n).unwrap();
                // The context: text, the image's positions, text, then the generated tokens.
                let image_positions = gen.context().iter().filter(|&&t| t == NOT_A_TOKEN).count();
                assert_eq!(image_positions as u64, v["image_tokens"].as_u64().unwrap());
                assert_eq!(
                    gen.context().len() + 1,
                    v["positions"].as_u64().unwrap() as usize,
                    "{name}"
                );
                got.truncate(upto);
                if got != want {
                    let at = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
                    failures.push(format!(
                        "{name} ({how}, {threads} threads): first differs at step {at}\n  got  \
                         {got:?}\n  want {want:?}"
                    ));
                }
                checked += 1;
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 12);
}
