//! `pteron generate` and `pteron chat`: text generation with ExecuTorch LLM programs.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use clap::Args;
use pteron_llm::chat::Chat;
use pteron_llm::{
    GenerateOptions, Generation, Generator, Model, Part, SamplerConfig, Speculation, Tokenizer,
};

/// Sampling and runtime options shared by `generate` and `chat`.
#[derive(Args, Clone, Debug)]
pub struct SampleArgs {
    /// Tokenizer: a Hugging Face tokenizer.json (its tokenizer_config.json, if beside it,
    /// supplies the chat template and special tokens), a SentencePiece .model, or a tiktoken
    /// file (Llama 3's pattern and special tokens unless a FILE.json beside it says otherwise).
    #[arg(long)]
    pub tokenizer: PathBuf,
    /// Most tokens to generate (per answer in chat).
    #[arg(long, default_value_t = 256)]
    pub max_new_tokens: usize,
    /// A chat-template variable, KEY=VALUE (VALUE as JSON, else a string; repeatable), as
    /// transformers' apply_chat_template(..., KEY=VALUE): e.g. enable_thinking=false.
    #[arg(long = "template-var", value_name = "KEY=VALUE")]
    pub template_vars: Vec<String>,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Nucleus sampling: keep the most likely tokens up to this total probability (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Drop tokens less likely than this fraction of the most likely one (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub min_p: f32,
    /// Penalize tokens already in the context (1 = off; 1.1 is common).
    #[arg(long, default_value_t = 1.0)]
    pub repetition_penalty: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop when the text contains this string (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
    /// Kernel threads (0 = physical cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[command(flatten)]
    pub speculate: SpeculateArgs,
    #[command(flatten)]
    pub device: crate::device::DeviceArgs,
}

/// Speculative decoding: same tokens, fewer calls of the model when drafts are accepted. The
/// model must be exported with full logits (ExecuTorch's export_llm with
/// debug.generate_full_logits=True, model.enable_dynamic_shape=True).
#[derive(Args, Clone, Debug)]
pub struct SpeculateArgs {
    /// Draft tokens by prompt lookup: `lookup` or `lookup:K` (K tokens per call, default 4;
    /// n-grams of 3 down to 1 tokens).
    #[arg(long, value_name = "lookup[:K]", value_parser = parse_lookup, conflicts_with = "draft")]
    pub speculate: Option<usize>,
    /// Draft tokens with this smaller model (same tokenizer; any LLM export).
    #[arg(long, value_name = "DRAFT.pte")]
    pub draft: Option<PathBuf>,
    /// Tokens the draft model proposes per call of the model.
    #[arg(long, default_value_t = DEFAULT_DRAFT_TOKENS, requires = "draft")]
    pub draft_tokens: usize,
}

/// Drafted tokens per call by default (`--speculate lookup`, `--draft-tokens`).
pub const DEFAULT_DRAFT_TOKENS: usize = 4;

/// `lookup` or `lookup:K`.
pub fn parse_lookup(s: &str) -> Result<usize, String> {
    let k = match s.split_once(':') {
        None if s == "lookup" => DEFAULT_DRAFT_TOKENS,
        Some(("lookup", k)) => k
            .parse()
            .map_err(|_| format!("{k:?} is not a number of tokens"))?,
        _ => return Err(format!("{s:?}: expected lookup or lookup:K")),
    };
    if k == 0 {
        return Err("lookup:K needs K ≥ 1".into());
    }
    Ok(k)
}

impl SpeculateArgs {
    pub fn speculation(&self) -> Speculation {
        match (self.speculate, &self.draft) {
            (Some(k), _) => Speculation::prompt_lookup(k),
            (None, Some(_)) => Speculation::DraftModel {
                draft_len: self.draft_tokens,
            },
            (None, None) => Speculation::Off,
        }
    }

    /// For the JSON output: `lookup:K`, `draft:K` or null.
    fn describe(&self) -> Option<String> {
        match self.speculation() {
            Speculation::Off => None,
            Speculation::PromptLookup { draft_len, .. } => Some(format!("lookup:{draft_len}")),
            Speculation::DraftModel { draft_len } => Some(format!("draft:{draft_len}")),
        }
    }
}

impl SampleArgs {
    fn options(&self) -> GenerateOptions {
        GenerateOptions {
            max_new_tokens: self.max_new_tokens,
            sampler: SamplerConfig {
                temperature: self.temperature,
                top_k: self.top_k,
                top_p: self.top_p,
                min_p: self.min_p,
                repetition_penalty: self.repetition_penalty,
                seed: self.seed,
            },
            stop_strings: self.stop.clone(),
            eos_ids: None,
            skip_special: true,
            cancel: None,
            speculation: self.speculate.speculation(),
        }
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// An LLM program exported by ExecuTorch's LLM recipe (KV cache, metadata methods).
    pub model: PathBuf,
    #[arg(long)]
    pub prompt: String,
    /// A picture (PNG or JPEG) for a vision-language program (`vision_encoder`,
    /// `token_embedding` and `text_decoder` methods, as ExecuTorch's LLaVA recipe exports).
    /// It goes where the prompt says `<image>` (first when it does not), resized as the
    /// program's encoder asks; the text around it is encoded without an added BOS, as
    /// ExecuTorch's MultimodalRunner encodes its text inputs.
    #[arg(long, value_name = "FILE")]
    pub image: Option<PathBuf>,
    /// Wrap the prompt in the model's chat template as one user message.
    #[arg(long)]
    pub chat_template: bool,
    /// Print one JSON object (text, token ids, finish reason, stats) instead of streaming.
    #[arg(long)]
    pub json: bool,
    /// Do not stop at end-of-sequence tokens (generate exactly --max-new-tokens).
    #[arg(long)]
    pub ignore_eos: bool,
    /// Generate this many times first, discarding the results (benchmarks: the measured
    /// generation then finds its memory planned and touched, as after a warm-up request).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warmup: usize,
    #[command(flatten)]
    pub sample: SampleArgs,
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    pub model: PathBuf,
    /// A system message.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sample: SampleArgs,
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Where `--image`'s picture goes in the prompt.
const IMAGE_MARK: &str = "<image>";

/// Applies `--template-var KEY=VALUE` options to the chat's template.
fn set_template_vars(chat: &mut Chat<'_, '_, '_>, vars: &[String]) -> Res<()> {
    for kv in vars {
        let (key, value) = kv
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--template-var {kv:?}: expected KEY=VALUE"))?;
        let value = serde_json::from_str(value)
            .unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        chat.template_mut().set_var(key, value);
    }
    Ok(())
}

fn load<'a>(
    program: &pteron::Program<'a>,
    threads: usize,
) -> Res<(Model<'a>, std::time::Duration)> {
    let t = std::time::Instant::now();
    let options = pteron::MethodOptions::new().threads(threads);
    let model = Model::load(program, options)?;
    Ok((model, t.elapsed()))
}

/// Opens the draft model's file, if any (kept alive by the caller beside the program).
fn open_draft(args: &SpeculateArgs) -> Res<Option<pteron::ProgramFile>> {
    Ok(match &args.draft {
        Some(p) => Some(pteron::ProgramFile::open(p)?),
        None => None,
    })
}

/// Loads the draft model and attaches it; checks that the model can verify drafts.
fn attach_draft<'a>(
    gen: &mut Generator<'a, '_>,
    draft: Option<&pteron::Program<'a>>,
    threads: usize,
    speculation: &Speculation,
) -> Res<()> {
    if let Some(program) = draft {
        let (model, _) = load(program, threads)?;
        gen.set_draft_model(model)?;
    }
    gen.check_speculation(speculation)?;
    Ok(())
}

fn stats_line(g: &Generation) -> String {
    let s = &g.stats;
    let mut line = format!(
        "{} prompt tokens, {} generated ({}); time to first token {:.0} ms; prefill {:.1} tok/s; \
         decode {:.1} tok/s",
        s.prompt_tokens,
        s.generated_tokens,
        g.finish.as_str(),
        s.time_to_first_token.as_secs_f64() * 1e3,
        s.prefill_tokens_per_s(),
        s.decode_tokens_per_s(),
    );
    if let Some(rate) = s.acceptance_rate() {
        line.push_str(&format!(
            "; speculation: {} of {} drafted tokens accepted ({:.0}%), {} model calls",
            s.accepted_tokens,
            s.drafted_tokens,
            rate * 100.0,
            s.decode_calls
        ));
    }
    if let Some(p) = s.peak_rss_bytes {
        line.push_str(&format!(
            "; peak RSS {:.0} MiB",
            p as f64 / (1 << 20) as f64
        ));
    }
    line
}

pub fn generate(args: &GenerateArgs) -> pteron::Result<()> {
    generate_inner(args).map_err(|e| pteron::Error::Invalid(e.to_string()))
}

pub fn chat(args: &ChatArgs) -> pteron::Result<()> {
    chat_inner(args).map_err(|e| pteron::Error::Invalid(e.to_string()))
}

fn generate_inner(args: &GenerateArgs) -> Res<()> {
    let tokenizer = Tokenizer::from_file(&args.sample.tokenizer)?;
    let file = pteron::ProgramFile::open(&args.model)?;
    let draft_file = open_draft(&args.sample.speculate)?;
    let (runtime, adapter) = crate::device::runtime(&args.sample.device)?;
    let program = runtime.load_program(&file)?;
    let draft_program = draft_file
        .as_ref()
        .map(|f| runtime.load_program(f))
        .transpose()?;
    let (model, load_time) = load(&program, args.sample.threads)
        .map_err(|e| crate::device::vulkan_hint(e, adapter.as_deref()))?;
    let threads = model.method().num_threads();
    let mut gen = Generator::new(model, &tokenizer);
    let opts = args.sample.options();
    attach_draft(
        &mut gen,
        draft_program.as_ref(),
        args.sample.threads,
        &opts.speculation,
    )?;
    let prompt_text = if args.chat_template {
        let mut chat = Chat::new(&mut gen, None, None)?;
        set_template_vars(&mut chat, &args.sample.template_vars)?;
        Some(chat.render_with(&args.prompt)?)
    } else {
        None
    };
    let image = args
        .image
        .as_ref()
        .map(pteron_image::Image::open)
        .transpose()?;
    // Text pieces and where the picture goes between them.
    let (prompt_ids, after_ids) = match (&image, &prompt_text) {
        (None, Some(text)) => (tokenizer.encode(text, false)?, Vec::new()),
        (None, None) => (tokenizer.encode(&args.prompt, true)?, Vec::new()),
        (Some(_), text) => {
            let text = text.as_deref().unwrap_or(&args.prompt);
            let (before, after) = text.split_once(IMAGE_MARK).unwrap_or(("", text));
            (
                tokenizer.encode(before, false)?,
                tokenizer.encode(after, false)?,
            )
        }
    };
    let mut parts = Vec::with_capacity(3);
    if !prompt_ids.is_empty() {
        parts.push(Part::Tokens(&prompt_ids));
    }
    if let Some(img) = &image {
        parts.push(Part::Image(img));
    }
    if !after_ids.is_empty() {
        parts.push(Part::Tokens(&after_ids));
    }
    let mut opts = opts;
    if args.chat_template && opts.eos_ids.is_none() {
        let mut ids = gen.default_eos_ids();
        if let Some(id) = tokenizer
            .config
            .eos_token
            .as_deref()
            .and_then(|t| tokenizer.token_to_id(t))
        {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        opts.eos_ids = Some(ids);
    }
    if args.ignore_eos {
        opts.eos_ids = Some(Vec::new());
    }
    for _ in 0..args.warmup {
        gen.rewind(0);
        gen.generate_parts(&parts, &opts, &mut |_| {})?;
    }
    gen.rewind(0);
    if args.json {
        let g = gen.generate_parts(&parts, &opts, &mut |_| {})?;
        let s = &g.stats;
        let image_doc = image.as_ref().map(|img| {
            let resized = gen
                .model
                .vision_input()
                .map(|v| v.size_for(img.width(), img.height()));
            serde_json::json!({
                "file": args.image.as_ref().map(|p| p.display().to_string()),
                "width": img.width(),
                "height": img.height(),
                "resized_to": resized,
            })
        });
        let doc = serde_json::json!({
            "model": args.model.display().to_string(),
            "prompt": args.prompt,
            "prompt_ids": prompt_ids,
            "image": image_doc,
            "prompt_ids_after_image": if image.is_some() { Some(&after_ids) } else { None },
            "text": g.text,
            "tokens": g.tokens,
            "finish_reason": g.finish.as_str(),
            "stats": {
                "load_ms": load_time.as_secs_f64() * 1e3,
                "threads": threads,
                "prompt_tokens": s.prompt_tokens,
                "generated_tokens": s.generated_tokens,
                "time_to_first_token_ms": s.time_to_first_token.as_secs_f64() * 1e3,
                "prefill_ms": s.prefill.as_secs_f64() * 1e3,
                "decode_ms": s.decode.as_secs_f64() * 1e3,
                "prefill_tokens_per_s": s.prefill_tokens_per_s(),
                "decode_tokens_per_s": s.decode_tokens_per_s(),
                "peak_rss_bytes": s.peak_rss_bytes,
                "speculation": args.sample.speculate.describe(),
                "decode_calls": s.decode_calls,
                "drafted_tokens": s.drafted_tokens,
                "accepted_tokens": s.accepted_tokens,
                "acceptance_rate": s.acceptance_rate(),
                "draft_calls": s.draft_calls,
            },
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let g = gen.generate_parts(&parts, &opts, &mut |s| {
        let _ = out.write_all(s.as_bytes());
        let _ = out.flush();
    })?;
    writeln!(out)?;
    eprintln!(
        "[loaded in {:.0} ms, {threads} thread(s)] {}",
        load_time.as_secs_f64() * 1e3,
        stats_line(&g)
    );
    Ok(())
}

fn chat_inner(args: &ChatArgs) -> Res<()> {
    let tokenizer = Tokenizer::from_file(&args.sample.tokenizer)?;
    let file = pteron::ProgramFile::open(&args.model)?;
    let draft_file = open_draft(&args.sample.speculate)?;
    let (runtime, adapter) = crate::device::runtime(&args.sample.device)?;
    let program = runtime.load_program(&file)?;
    let draft_program = draft_file
        .as_ref()
        .map(|f| runtime.load_program(f))
        .transpose()?;
    let (model, load_time) = load(&program, args.sample.threads)
        .map_err(|e| crate::device::vulkan_hint(e, adapter.as_deref()))?;
    let context = model.meta.max_context_len;
    let mut gen = Generator::new(model, &tokenizer);
    let opts = args.sample.options();
    attach_draft(
        &mut gen,
        draft_program.as_ref(),
        args.sample.threads,
        &opts.speculation,
    )?;
    let mut chat = Chat::new(&mut gen, None, args.system.clone())?;
    set_template_vars(&mut chat, &args.sample.template_vars)?;
    eprintln!(
        "pteron chat: {} ({context}-token context, loaded in {:.0} ms). /reset clears the \
         conversation, /quit or Ctrl-D exits.",
        args.model.display(),
        load_time.as_secs_f64() * 1e3
    );
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        let Some(line) = lines.next() else {
            eprintln!();
            break;
        };
        let line = line?;
        let msg = line.trim();
        match msg {
            "" => continue,
            "/quit" | "/exit" => break,
            "/reset" => {
                chat.reset();
                eprintln!("(conversation cleared)");
                continue;
            }
            _ => {}
        }
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        match chat.send(msg, &opts, &mut |s| {
            let _ = out.write_all(s.as_bytes());
            let _ = out.flush();
        }) {
            Ok(g) => {
                writeln!(out)?;
                eprintln!(
                    "[{}; context {}/{context}]",
                    stats_line(&g),
                    chat.generator.model.pos()
                );
            }
            Err(e @ pteron_llm::Error::ContextOverflow { .. }) => {
                eprintln!("error: {e}; type /reset to start a new conversation");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
