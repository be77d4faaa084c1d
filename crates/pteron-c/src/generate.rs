//! The LLM generator: text streamed to a callback, statistics back.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pteron::MethodOptions;
use pteron_llm::{GenerateOptions, Generator, Model, SamplerConfig, Tokenizer};

use crate::error::{from_llm, guard};
use crate::program::LoadedProgram;
use crate::{c_str, free, handle, handle_mut, put, PteronProgram, PteronStatus};

/// Called with each piece of generated text (UTF-8, not NUL-terminated, `len` bytes) and the
/// caller's `user` pointer; returning non-zero stops generation after this piece.
pub type PteronTextCallback =
    Option<unsafe extern "C" fn(text: *const c_char, len: usize, user: *mut c_void) -> c_int>;

/// How to sample (see `pteron_generate_options_default`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PteronGenerateOptions {
    pub max_new_tokens: u32,
    /// 0: greedy.
    pub temperature: f32,
    /// 0: off.
    pub top_k: u32,
    /// 1: off.
    pub top_p: f32,
    /// 0: off.
    pub min_p: f32,
    /// 1: off.
    pub repetition_penalty: f32,
    pub seed: u64,
    /// Non-zero: leave special tokens out of the text.
    pub skip_special: c_int,
}

/// What a generation did.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PteronGenerateStats {
    pub prompt_tokens: usize,
    pub generated_tokens: usize,
    pub time_to_first_token_s: f64,
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    /// 0 end-of-sequence token, 1 stop string, 2 max_new_tokens, 3 context full, 4 stopped by
    /// the callback.
    pub finish_reason: c_int,
}

/// A language model (an ExecuTorch LLM export), its tokenizer and its context.
pub struct PteronGenerator {
    // Declared first: it borrows the tokenizer and the program's bytes.
    generator: Generator<'static, 'static>,
    _tokenizer: Box<Tokenizer>,
    _program: Arc<LoadedProgram>,
}

/// Fills `options` with the defaults: 128 new tokens, greedy, special tokens skipped.
///
/// # Safety
/// `options` is valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_generate_options_default(
    options: *mut PteronGenerateOptions,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        unsafe { put(options, default_options(), "options") }
    })
}

/// pteron-llm's defaults in the C struct.
fn default_options() -> PteronGenerateOptions {
    let d = GenerateOptions::default();
    let s = d.sampler;
    PteronGenerateOptions {
        max_new_tokens: d.max_new_tokens as u32,
        temperature: s.temperature,
        top_k: s.top_k as u32,
        top_p: s.top_p,
        min_p: s.min_p,
        repetition_penalty: s.repetition_penalty,
        seed: s.seed,
        skip_special: c_int::from(d.skip_special),
    }
}

/// A generator over `program`'s `forward` method (an export_llm program with a KV cache) and
/// the tokenizer file at `tokenizer_path` (`tokenizer.json`, SentencePiece or tiktoken).
/// `threads` as for `pteron_method_load`.
///
/// # Safety
/// `program` is a live program, `tokenizer_path` a NUL-terminated string, `out` valid for a
/// write.
#[no_mangle]
pub unsafe extern "C" fn pteron_generator_new(
    program: *const PteronProgram,
    tokenizer_path: *const c_char,
    threads: u32,
    out: *mut *mut PteronGenerator,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let (program, path) = unsafe {
            (
                handle(program, "program")?,
                c_str(tokenizer_path, "tokenizer_path")?,
            )
        };
        let loaded = Arc::clone(&program.inner);
        let tokenizer = Box::new(Tokenizer::from_file(path).map_err(from_llm)?);
        // Safety: the model borrows the program's bytes (kept alive on the heap by `loaded`) and
        // the generator the tokenizer (on the heap behind its box); the handle stores both and
        // drops the generator first (field order), so neither borrow outlives its owner.
        let (prog, tok): (&'static pteron::Program<'static>, &'static Tokenizer) = unsafe {
            (
                &*(loaded.program() as *const pteron::Program<'static>),
                &*(&*tokenizer as *const Tokenizer),
            )
        };
        let model =
            Model::load(prog, MethodOptions::new().threads(threads as usize)).map_err(from_llm)?;
        let boxed = Box::into_raw(Box::new(PteronGenerator {
            generator: Generator::new(model, tok),
            _tokenizer: tokenizer,
            _program: loaded,
        }));
        // Safety: the caller's contract.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| unsafe { free(boxed) })
    })
}

/// Frees a generator.
///
/// # Safety
/// `generator` is NULL or a live generator.
#[no_mangle]
pub unsafe extern "C" fn pteron_generator_free(generator: *mut PteronGenerator) {
    // Safety: the caller's contract.
    unsafe { free(generator) }
}

/// Starts a new context with `prompt` (encoded with the tokenizer's special tokens, e.g. BOS)
/// and generates, calling `callback` with each piece of text as it is produced. `options` may
/// be NULL (the defaults), `callback` NULL (no streaming), `stats` NULL.
///
/// # Safety
/// `generator` is a live generator used by this thread only; `prompt` a NUL-terminated string;
/// `options` and `stats` NULL or valid; `callback`, if set, safe to call with `user`.
#[no_mangle]
pub unsafe extern "C" fn pteron_generator_generate(
    generator: *mut PteronGenerator,
    prompt: *const c_char,
    options: *const PteronGenerateOptions,
    callback: PteronTextCallback,
    user: *mut c_void,
    stats: *mut PteronGenerateStats,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let (g, prompt) = unsafe {
            (
                handle_mut(generator, "generator")?,
                c_str(prompt, "prompt")?,
            )
        };
        let defaults = default_options();
        // Safety: NULL means the defaults; otherwise the caller's contract.
        let o = if options.is_null() {
            &defaults
        } else {
            unsafe { &*options }
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let opts = GenerateOptions {
            max_new_tokens: o.max_new_tokens as usize,
            sampler: SamplerConfig {
                temperature: o.temperature,
                top_k: o.top_k as usize,
                top_p: o.top_p,
                min_p: o.min_p,
                repetition_penalty: o.repetition_penalty,
                seed: o.seed,
            },
            skip_special: o.skip_special != 0,
            cancel: Some(Arc::clone(&cancel)),
            ..Default::default()
        };
        let mut on_text = |piece: &str| {
            if let Some(f) = callback {
                // Safety: the caller promises `callback` may be called with `user`; the text
                // pointer is valid for `len` bytes during the call.
                if unsafe { f(piece.as_ptr().cast(), piece.len(), user) } != 0 {
                    cancel.store(true, Ordering::Relaxed);
                }
            }
        };
        let out = g
            .generator
            .generate_text(prompt, &opts, &mut on_text)
            .map_err(from_llm)?;
        if stats.is_null() {
            return Ok(());
        }
        let s = &out.stats;
        let finish = match out.finish {
            pteron_llm::FinishReason::Eos => 0,
            pteron_llm::FinishReason::StopString => 1,
            pteron_llm::FinishReason::MaxTokens => 2,
            pteron_llm::FinishReason::ContextFull => 3,
            pteron_llm::FinishReason::Cancelled => 4,
        };
        let st = PteronGenerateStats {
            prompt_tokens: s.prompt_tokens,
            generated_tokens: s.generated_tokens,
            time_to_first_token_s: s.time_to_first_token.as_secs_f64(),
            prefill_tokens_per_s: s.prefill_tokens_per_s(),
            decode_tokens_per_s: s.decode_tokens_per_s(),
            finish_reason: finish,
        };
        // Safety: the caller's contract.
        unsafe { put(stats, st, "stats") }
    })
}
