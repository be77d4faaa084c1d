//! The LLM runner: `Generator(pte, tokenizer).generate(prompt)` as an iterator of text pieces.
//!
//! Generation runs on a thread of its own and hands the pieces over a channel, so the GIL is
//! free while tokens are computed and Python can stop reading at any time (the iterator's
//! `close()`, or dropping it, ends the generation after the current token).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pteron::{MethodOptions, ProgramFile, Runtime};
use pteron_llm::chat::{generate_messages, ChatTemplate, Message};
use pteron_llm::{GenerateOptions, Generation, Generator, Model, Tokenizer};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{closed, from_llm, from_pteron};
use crate::loaded::LoadedProgram;
use crate::program::PyProgram;

/// A model, its tokenizer and its KV cache.
struct GenState {
    // Declared first: it borrows the tokenizer and the program's bytes.
    generator: Generator<'static, 'static>,
    _tokenizer: Box<Tokenizer>,
    _program: Arc<LoadedProgram>,
}

/// What a generation thread sends.
enum Msg {
    Text(String),
    Done(Result<Generation, pteron_llm::Error>),
}

/// An ExecuTorch LLM program (`export_llm`, with a KV cache) and its tokenizer.
#[pyclass(module = "pteron._pteron", name = "Generator", frozen)]
pub struct PyGenerator {
    state: Arc<Mutex<Option<GenState>>>,
    template: Option<String>,
}

/// Generation options from `generate`'s and `chat`'s keyword arguments, over pteron-llm's
/// defaults (the C API's too): 128 new tokens, greedy, special tokens left out of the text.
fn options(kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<GenerateOptions> {
    let mut o = GenerateOptions::default();
    for (k, v) in kwargs.into_iter().flat_map(|kw| kw.iter()) {
        let key: String = k.extract()?;
        let s = &mut o.sampler;
        match key.as_str() {
            "max_new_tokens" => o.max_new_tokens = v.extract()?,
            "temperature" => s.temperature = v.extract()?,
            "top_k" => s.top_k = v.extract()?,
            "top_p" => s.top_p = v.extract()?,
            "min_p" => s.min_p = v.extract()?,
            "repetition_penalty" => s.repetition_penalty = v.extract()?,
            "seed" => s.seed = v.extract()?,
            "stop" => o.stop_strings = v.extract::<Option<Vec<String>>>()?.unwrap_or_default(),
            "skip_special" => o.skip_special = v.extract()?,
            other => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "unexpected keyword argument {other:?}"
                )))
            }
        }
    }
    Ok(o)
}

/// What a generation starts from.
enum Prompt {
    Text(String),
    Chat(String, Vec<Message>),
}

#[pymethods]
impl PyGenerator {
    /// `program`: a `.pte` path or a loaded `Program`; `tokenizer`: `tokenizer.json` (or its
    /// directory, with `tokenizer_config.json` beside it), a SentencePiece `.model` or a
    /// tiktoken file. `threads` as for `Program.load_method`.
    #[new]
    #[pyo3(signature = (program, tokenizer, *, threads = None))]
    fn new(
        py: Python<'_>,
        program: &Bound<'_, PyAny>,
        tokenizer: PathBuf,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let loaded = match program.cast::<PyProgram>() {
            Ok(p) => p.get().loaded(py)?,
            Err(_) => {
                let path: PathBuf = program.extract()?;
                py.detach(|| -> pteron::Result<LoadedProgram> {
                    LoadedProgram::new(&Runtime::new(), ProgramFile::open(path)?, None)
                })
                .map(Arc::new)
                .map_err(|e| from_pteron(py, &e))?
            }
        };
        let options = match threads {
            Some(n) => MethodOptions::new().threads(n),
            None => MethodOptions::new(),
        };
        let state = py
            .detach(|| -> Result<GenState, pteron_llm::Error> {
                let tokenizer = Box::new(Tokenizer::from_file(&tokenizer)?);
                // Safety: the model borrows the program's bytes (kept alive on the heap by
                // `loaded`) and the generator the tokenizer (on the heap behind its box); the
                // state stores both and drops the generator first (field order), so neither
                // borrow outlives its owner.
                let (prog, tok): (&'static pteron::Program<'static>, &'static Tokenizer) = unsafe {
                    (
                        &*(loaded.program() as *const pteron::Program<'static>),
                        &*(&*tokenizer as *const Tokenizer),
                    )
                };
                let model = Model::load(prog, options)?;
                Ok(GenState {
                    generator: Generator::new(model, tok),
                    _tokenizer: tokenizer,
                    _program: loaded,
                })
            })
            .map_err(|e| from_llm(py, &e))?;
        let template = state.generator.tokenizer.config.chat_template.clone();
        Ok(PyGenerator {
            state: Arc::new(Mutex::new(Some(state))),
            template,
        })
    }

    /// Starts a new context with `prompt` (encoded with the tokenizer's special tokens, e.g.
    /// BOS) and returns an iterator over the generated text, piece by piece; its `stats`
    /// describe the generation once it has ended. Keywords: `max_new_tokens` (128),
    /// `temperature` (0: greedy), `top_k` (0: off), `top_p` (1: off), `min_p` (0: off),
    /// `repetition_penalty` (1: off), `seed` (0), `stop` (strings that end the text, left out),
    /// `skip_special` (True).
    #[pyo3(signature = (prompt, **options))]
    fn generate(
        &self,
        py: Python<'_>,
        prompt: String,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyGeneration> {
        let opts = self::options(options)?;
        self.start(py, Prompt::Text(prompt), opts)
    }

    /// Answers a conversation: `messages` is a list of `{"role": ..., "content": ...}`,
    /// rendered with the tokenizer's chat template (`tokenizer_config.json`) or `template`.
    /// The KV cache is reused for the turns it already holds. Same options as `generate`.
    #[pyo3(signature = (messages, *, template = None, **options))]
    fn chat(
        &self,
        py: Python<'_>,
        messages: Vec<Bound<'_, PyDict>>,
        template: Option<String>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyGeneration> {
        let opts = self::options(options)?;
        let msgs = messages
            .iter()
            .map(|m| -> PyResult<Message> {
                let get = |k: &str| -> PyResult<String> {
                    m.get_item(k)?
                        .ok_or_else(|| {
                            pyo3::exceptions::PyKeyError::new_err(format!("message without {k:?}"))
                        })?
                        .extract()
                };
                Ok(Message::new(&get("role")?, &get("content")?))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let source = template.or_else(|| self.template.clone()).ok_or_else(|| {
            from_llm(
                py,
                &pteron_llm::Error::Template(
                    "the tokenizer has no chat template (tokenizer_config.json chat_template)"
                        .into(),
                ),
            )
        })?;
        self.start(py, Prompt::Chat(source, msgs), opts)
    }

    /// Tokens of the tokenizer's encoding of `text` (`add_special`: BOS and the like).
    #[pyo3(signature = (text, *, add_special = true))]
    fn encode(&self, py: Python<'_>, text: &str, add_special: bool) -> PyResult<Vec<u32>> {
        self.with(py, |g| g.tokenizer.encode(text, add_special))
    }

    /// Text of `tokens`.
    #[pyo3(signature = (tokens, *, skip_special = true))]
    fn decode(&self, py: Python<'_>, tokens: Vec<u32>, skip_special: bool) -> PyResult<String> {
        self.with(py, |g| g.tokenizer.decode(&tokens, skip_special))
    }

    /// What the program says about itself: max_seq_len, max_context_len, bos_id, eos_ids,
    /// vocab_size, ...
    #[getter]
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = self.with(py, |g| Ok(g.model.meta.clone()))?;
        let d = PyDict::new(py);
        d.set_item("max_seq_len", m.max_seq_len)?;
        d.set_item("max_context_len", m.max_context_len)?;
        d.set_item("bos_id", m.bos_id)?;
        d.set_item("eos_ids", m.eos_ids)?;
        d.set_item("vocab_size", m.vocab_size)?;
        d.set_item("use_kv_cache", m.use_kv_cache)?;
        Ok(d)
    }

    /// Frees the model (after a running generation ends).
    fn close(&self, py: Python<'_>) {
        let state = py.detach(|| self.state.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(state);
    }
}

impl PyGenerator {
    /// Runs `f` on the generator (waiting for a running generation to end), or `ClosedError`.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Generator<'static, 'static>) -> Result<T, pteron_llm::Error> + Send,
    ) -> PyResult<T> {
        let r = py.detach(|| {
            let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
            guard.as_ref().map(|s| f(&s.generator))
        });
        match r {
            Some(r) => r.map_err(|e| from_llm(py, &e)),
            None => Err(closed(py, "generator")),
        }
    }

    fn start(
        &self,
        py: Python<'_>,
        prompt: Prompt,
        mut opts: GenerateOptions,
    ) -> PyResult<PyGeneration> {
        if self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            return Err(closed(py, "generator"));
        }
        let cancel = Arc::new(AtomicBool::new(false));
        opts.cancel = Some(Arc::clone(&cancel));
        let (tx, rx) = channel();
        let state = Arc::clone(&self.state);
        std::thread::Builder::new()
            .name("pteron-generate".into())
            .spawn(move || {
                let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
                let Some(s) = guard.as_mut() else {
                    let _ = tx.send(Msg::Done(Err(pteron_llm::Error::Model(
                        "the generator is closed".into(),
                    ))));
                    return;
                };
                let text_tx = tx.clone();
                let mut on_text = |piece: &str| {
                    let _ = text_tx.send(Msg::Text(piece.to_string()));
                };
                let result = match &prompt {
                    Prompt::Text(p) => s.generator.generate_text(p, &opts, &mut on_text),
                    Prompt::Chat(src, msgs) => ChatTemplate::new(src).and_then(|t| {
                        generate_messages(&mut s.generator, &t, msgs, &opts, &mut on_text)
                    }),
                };
                let _ = tx.send(Msg::Done(result));
            })
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        Ok(PyGeneration {
            rx: Mutex::new(Some(rx)),
            cancel,
            done: Mutex::new(None),
        })
    }
}

/// A running generation: iterate for the text pieces; `stats` once it has ended.
#[pyclass(module = "pteron._pteron", name = "Generation", frozen)]
pub struct PyGeneration {
    rx: Mutex<Option<Receiver<Msg>>>,
    cancel: Arc<AtomicBool>,
    done: Mutex<Option<Generation>>,
}

impl Drop for PyGeneration {
    fn drop(&mut self) {
        // Nobody reads on: the thread ends after the current token.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

#[pymethods]
impl PyGeneration {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<String> {
        let mut guard = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        let Some(rx) = guard.as_mut() else {
            return Err(PyStopIteration::new_err(()));
        };
        loop {
            // Wait without the GIL, waking now and then for Ctrl-C.
            let r = &mut *rx;
            match py.detach(move || r.recv_timeout(Duration::from_millis(100))) {
                Ok(Msg::Text(t)) => return Ok(t),
                Ok(Msg::Done(r)) => {
                    *guard = None;
                    let g = r.map_err(|e| from_llm(py, &e))?;
                    *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
                    return Err(PyStopIteration::new_err(()));
                }
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        self.cancel.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    *guard = None;
                    return Err(PyStopIteration::new_err(()));
                }
            }
        }
    }

    /// Stops the generation after the current token (the iterator then ends).
    fn close(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// All the text, when the generation has ended (reads the rest first).
    #[getter]
    fn text(slf: &Bound<'_, Self>) -> PyResult<String> {
        Self::finish(slf)?;
        let done = slf.get().done.lock().unwrap_or_else(|p| p.into_inner());
        Ok(done.as_ref().map(|g| g.text.clone()).unwrap_or_default())
    }

    /// The generated token ids (read after the end).
    #[getter]
    fn tokens(slf: &Bound<'_, Self>) -> PyResult<Vec<u32>> {
        Self::finish(slf)?;
        let done = slf.get().done.lock().unwrap_or_else(|p| p.into_inner());
        Ok(done.as_ref().map(|g| g.tokens.clone()).unwrap_or_default())
    }

    /// Counts, timings and why it ended (reads the rest of the text first): prompt_tokens,
    /// generated_tokens, time_to_first_token_s, prefill_tokens_per_s, decode_tokens_per_s,
    /// finish_reason ("eos", "stop_string", "max_new_tokens", "context_full", "cancelled").
    #[getter]
    fn stats<'py>(slf: &Bound<'py, Self>) -> PyResult<Option<Bound<'py, PyDict>>> {
        Self::finish(slf)?;
        let py = slf.py();
        let done = slf.get().done.lock().unwrap_or_else(|p| p.into_inner());
        let Some(g) = done.as_ref() else {
            return Ok(None);
        };
        let s = &g.stats;
        let d = PyDict::new(py);
        d.set_item("prompt_tokens", s.prompt_tokens)?;
        d.set_item("generated_tokens", s.generated_tokens)?;
        d.set_item("time_to_first_token_s", s.time_to_first_token.as_secs_f64())?;
        d.set_item("prefill_tokens_per_s", s.prefill_tokens_per_s())?;
        d.set_item("decode_tokens_per_s", s.decode_tokens_per_s())?;
        d.set_item("finish_reason", g.finish.as_str())?;
        Ok(Some(d))
    }
}

impl PyGeneration {
    /// Reads the iterator to its end.
    fn finish(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        loop {
            match slf.get().__next__(py) {
                Ok(_) => {}
                Err(e) if e.is_instance_of::<PyStopIteration>(py) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}
