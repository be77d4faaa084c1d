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

/// A compiled chat template, with the variables every rendering gets (see
/// [`ChatTemplate::set_var`]).
pub struct ChatTemplate {
    env: Environment<'static>,
    vars: serde_json::Map<String, serde_json::Value>,
}

fn raise_exception(msg: String) -> std::result::Result<String, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

/// Python's `json.dumps` as Hugging Face's `tojson` calls it (`ensure_ascii=False`, `", "` and
/// `": "` between items, keys in their order, `indent=N` for a pretty form): minijinja's own
/// `tojson` is compact and escapes `<`, `>` and `&`, which changes what a tool list renders to.
fn tojson(
    value: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort: Option<bool> = kwargs.get("sort_keys")?;
    let ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    if ascii == Some(true) {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "tojson: ensure_ascii=true is not supported",
        ));
    }
    let mut out = Vec::new();
    let indent_bytes = indent.map(|n| vec![b' '; n]);
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PyFormatter {
            indent: indent_bytes.as_deref(),
            depth: 0,
            filled: Vec::new(),
        },
    );
    // The value itself keeps its keys in order; sorted keys go through a sorted copy.
    let written = if sort == Some(true) {
        serde_json::to_value(&value)
            .and_then(|json| serde::Serialize::serialize(&sorted(json), &mut ser))
    } else {
        serde::Serialize::serialize(&value, &mut ser)
    };
    written.map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let text = String::from_utf8(out)
        .map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(minijinja::Value::from_safe_string(text))
}

/// `v` with every object's keys in sorted order (`json.dumps(..., sort_keys=True)`).
fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut items: Vec<_> = m.into_iter().collect();
            items.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(items.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        serde_json::Value::Array(a) => {
            serde_json::Value::Array(a.into_iter().map(sorted).collect())
        }
        other => other,
    }
}

/// `json.dumps` spacing: `", "` and `": "` on one line, or Python's indented form.
struct PyFormatter<'a> {
    indent: Option<&'a [u8]>,
    depth: usize,
    /// Per open array or object: whether it has an item yet (`[]` and `{}` stay empty).
    filled: Vec<bool>,
}

impl PyFormatter<'_> {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(ind) = self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(ind)?;
            }
        }
        Ok(())
    }
    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.filled.push(false);
        w.write_all(c)
    }
    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        if self.filled.pop() == Some(true) {
            self.newline(w)?;
        }
        w.write_all(c)
    }
    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if let Some(f) = self.filled.last_mut() {
            *f = true;
        }
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
}

impl serde_json::ser::Formatter for PyFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// `strftime_now(format)`: the current UTC time, formatted with the strftime directives chat
/// templates use (`%d %m %Y %y %b %B %a %A %H %M %S %j %%`; Llama 3's template dates its
/// system prompt with `strftime_now("%d %b %Y")`, as transformers renders it).
fn strftime_now(format: String) -> std::result::Result<String, JinjaError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(&format, secs)
}

/// `format` at `secs` seconds after 1970-01-01 00:00 UTC.
pub fn strftime(format: &str, secs: u64) -> std::result::Result<String, JinjaError> {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // The civil date of a day count (Howard Hinnant's days_from_civil, inverted).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let before: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = before[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let weekday = ((days as i64 + 3) % 7) as usize; // 1970-01-01 was a Thursday
    let (m, d) = ((month - 1) as usize, day);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year % 100)),
            Some('b') => out.push_str(&MONTHS[m][..3]),
            Some('B') => out.push_str(MONTHS[m]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem % 3600 / 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            other => {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: unsupported directive %{}",
                        other.unwrap_or(' ')
                    ),
                ))
            }
        }
    }
    Ok(out)
}

impl ChatTemplate {
    pub fn new(source: &str) -> Result<Self> {
        let mut env = Environment::new();
        // Hugging Face templates call Python string methods (.strip(), .startswith()...).
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            vars: serde_json::Map::new(),
        })
    }

    /// A template variable for every rendering, as transformers' `apply_chat_template(...,
    /// key=value)`: `enable_thinking` (false: Qwen 3's empty thinking block), `date_string`,
    /// `tools`, ... Variables passed to [`ChatTemplate::render_with_vars`] take precedence.
    pub fn set_var(&mut self, key: &str, value: serde_json::Value) {
        self.vars.insert(key.to_string(), value);
    }

    /// The prompt text for `messages`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<String> {
        // The template's own variables are merged in by render_with_vars.
        self.render_with_vars(
            messages,
            add_generation_prompt,
            bos_token,
            eos_token,
            &serde_json::Map::new(),
        )
    }

    /// [`ChatTemplate::render`] with more template variables, as transformers'
    /// `apply_chat_template(..., **kwargs)` passes them: `tools` (a list of JSON schemas),
    /// `enable_thinking`, `date_string`, ... Messages may be any JSON objects (`role`,
    /// `content`, `tool_calls`, `reasoning_content`, ...).
    pub fn render_with_vars<M: serde::Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
        vars: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<String> {
        let t = self
            .env
            .get_template("chat")
            .map_err(|e| Error::Template(e.to_string()))?;
        let mut out = Capped(Vec::new(), false);
        let base = context! {
            messages => minijinja::Value::from_serialize(messages),
            add_generation_prompt => add_generation_prompt,
            bos_token => bos_token.unwrap_or(""),
            eos_token => eos_token.unwrap_or(""),
        };
        t.render_captured_to(
            context! {
                ..base,
                ..minijinja::Value::from_serialize(vars),
                ..minijinja::Value::from_serialize(&self.vars)
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

    /// The template, to set variables on ([`ChatTemplate::set_var`]).
    pub fn template_mut(&mut self) -> &mut ChatTemplate {
        &mut self.template
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
