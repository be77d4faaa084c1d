//! Multi-turn chat with the model's chat template (Jinja, rendered by minijinja), keeping the KV
//! cache across turns.
//!
//! Each turn renders the whole conversation with `add_generation_prompt=true`, tokenizes it,
//! and prefills only what the KV cache does not already hold: the longest common prefix of the
//! new token ids and the cached context is kept, the cache is rewound to it (attention never
//! reads past the position, so rewinding is free), and the rest is prefilled. Usually that is
//! just the end of the last answer and the new user message.

use minijinja::{context, Environment, Error as JinjaError, ErrorKind};

use crate::generate::{GenerateOptions, Generation, Generator};
use crate::{Error, Result};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// Most template instructions one rendering may run (minijinja's fuel): templates come with
/// the tokenizer files, untrusted; real ones need a few thousand per message.
pub const TEMPLATE_FUEL: u64 = 20_000_000;
/// Longest prompt a template may render.
pub const MAX_RENDERED_BYTES: usize = 64 << 20;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
}

fn raise_exception(msg: String) -> std::result::Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        // Hugging Face templates call Python string methods (.strip(), .startswith()...).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(ChatTemplate { env })
    }

    /// The prompt text for `messages`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<String> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        let mut out = Capped(Vec::new(), false);
        t.render_captured_to(
            context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => bos_token.unwrap_or(""),
                eos_token => eos_token.unwrap_or(""),
            },
            &mut out,
        )
        .map_err(|e| {
            Error::Template(if out.1 {
                format!("the rendered prompt exceeds {MAX_RENDERED_BYTES} bytes")
            } else {
                e.to_string()
            })
        })?;
        // minijinja writes only valid UTF-8.
        String::from_utf8(out.0).map_err(|e| Error::Template(e.to_string()))
    }
}

/// A writer that refuses to grow past [`MAX_RENDERED_BYTES`] (and says so in `.1`).
struct Capped(Vec<u8>, bool);

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDERED_BYTES {
            self.1 = true;
            return Err(std::io::Error::other("rendered prompt too long"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A conversation over a [`Generator`].
pub struct Chat<'g, 'a, 't> {
    pub generator: &'g mut Generator<'a, 't>,
    template: ChatTemplate,
    pub messages: Vec<Message>,
    system: Option<String>,
}

impl<'g, 'a, 't> Chat<'g, 'a, 't> {
    /// A chat with the template of the tokenizer's `tokenizer_config.json` (or `template`).
    pub fn new(
        generator: &'g mut Generator<'a, 't>,
        template: Option<&str>,
        system: Option<String>,
    ) -> Result<Self> {
        let src = match template {
            Some(t) => t.to_string(),
            None => generator
                .tokenizer
                .config
                .chat_template
                .clone()
                .ok_or_else(|| {
                    Error::Template(
                        "the tokenizer has no chat template (tokenizer_config.json chat_template)"
                            .into(),
                    )
                })?,
        };
        let template = ChatTemplate::new(&src)?;
        let mut chat = Chat {
            generator,
            template,
            messages: Vec::new(),
            system,
        };
        chat.reset();
        Ok(chat)
    }

    /// Forgets the conversation (and the KV cache).
    pub fn reset(&mut self) {
        self.messages.clear();
        if let Some(s) = &self.system {
            self.messages.push(Message::new("system", s));
        }
        self.generator.rewind(0);
    }

    /// EOS ids for chat: the program's and the tokenizer's EOS token (the end-of-turn token).
    pub fn eos_ids(&self) -> Vec<u32> {
        chat_eos_ids(self.generator)
    }

    /// The prompt text the next turn would prefill for `user` (for inspection and tests).
    pub fn render_with(&self, user: &str) -> Result<String> {
        let mut msgs = self.messages.clone();
        msgs.push(Message::new("user", user));
        let cfg = &self.generator.tokenizer.config;
        self.template.render(
            &msgs,
            true,
            cfg.bos_token.as_deref(),
            cfg.eos_token.as_deref(),
        )
    }

    /// Sends a user message and streams the answer.
    pub fn send(
        &mut self,
        user: &str,
        opts: &GenerateOptions,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        let mut msgs = self.messages.clone();
        msgs.push(Message::new("user", user));
        let g = generate_messages(self.generator, &self.template, &msgs, opts, on_text)?;
        self.messages.push(Message::new("user", user));
        self.messages.push(Message::new("assistant", g.text.trim()));
        Ok(g)
    }
}

/// The tokens that end an assistant's turn: the program's EOS ids and the tokenizer's
/// `eos_token` (chat models end turns with a token the base model's EOS may not name).
pub fn chat_eos_ids(generator: &Generator<'_, '_>) -> Vec<u32> {
    let mut ids = generator.model.meta.eos_ids.clone();
    let tok = generator.tokenizer;
    if let Some(id) = tok
        .config
        .eos_token
        .as_deref()
        .and_then(|t| tok.token_to_id(t))
    {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// Renders `messages` with `template` (with the generation prompt) and generates the
/// assistant's answer, reusing the part of the KV cache that already holds the rendered
/// prompt's first tokens (the earlier turns of the same conversation).
pub fn generate_messages(
    generator: &mut Generator<'_, '_>,
    template: &ChatTemplate,
    messages: &[Message],
    opts: &GenerateOptions,
    on_text: &mut dyn FnMut(&str),
) -> Result<Generation> {
    let cfg = &generator.tokenizer.config;
    let prompt = template.render(
        messages,
        true,
        cfg.bos_token.as_deref(),
        cfg.eos_token.as_deref(),
    )?;
    let ids = generator.tokenizer.encode(&prompt, false)?;
    let cached = generator.context();
    let mut common = cached.iter().zip(&ids).take_while(|(a, b)| a == b).count();
    if common == ids.len() {
        // Nothing new (cannot happen with a generation prompt); re-run the last token.
        common = common.saturating_sub(1);
    }
    let context = generator.model.meta.max_context_len;
    if ids.len() >= context {
        return Err(Error::ContextOverflow {
            needed: ids.len() - common,
            used: common,
            context,
        });
    }
    // A recurrent model keeps nothing of a shorter prefix: it starts again from 0.
    let common = generator.rewind(common);
    let mut opts = opts.clone();
    if opts.eos_ids.is_none() {
        opts.eos_ids = Some(chat_eos_ids(generator));
    }
    // Leave the answer room: at most what the context still holds.
    let room = context - ids.len();
    opts.max_new_tokens = opts.max_new_tokens.min(room);
    generator.generate(&ids[common..], &opts, on_text)
}
