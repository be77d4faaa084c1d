//! The body and custom mutator of the `tokenizer` fuzz target (fuzz/fuzz_targets/tokenizer.rs
//! includes this file by path; `tests/tokenizer_fuzz.rs` replays crashers and runs a smoke).
//!
//! Input: `[mode: u8][n: u16 LE][n bytes: A][B]`. By `mode % 3`:
//!
//! * 0: B is a `tokenizer.json` (or a SentencePiece `.model` or a tiktoken file), A a text: the tokenizer is built, A encoded (with and
//!   without special tokens), the ids decoded at once and token by token (`TextStream`), and
//!   ids taken from A's bytes (in and out of the vocabulary) decoded and looked up;
//! * 1: A is a chat template, B messages separated by NUL bytes: the template is compiled and
//!   rendered (with and without a generation prompt);
//! * 2: B is a `tokenizer_config.json`: parsed, and its chat template rendered on A as the
//!   user message.
//!
//! Errors are the expected outcome; a panic, a hang or running out of memory is a bug.

#![allow(dead_code)]

use pteron_llm::chat::{ChatTemplate, Message};
use pteron_llm::{TextStream, Tokenizer, TokenizerConfig};
use serde_json::Value as Json;

/// Splits an input into (mode, A, B).
pub fn split(data: &[u8]) -> (u8, &[u8], &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return (0, &[], &[]);
    };
    if rest.len() < 2 {
        return (mode, &[], rest);
    }
    let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
    (mode, &rest[2..2 + n], &rest[2 + n..])
}

pub fn join(mode: u8, a: &[u8], b: &[u8]) -> Vec<u8> {
    let n = a.len().min(u16::MAX as usize);
    let mut v = Vec::with_capacity(3 + n + b.len());
    v.push(mode);
    v.extend_from_slice(&(n as u16).to_le_bytes());
    v.extend_from_slice(&a[..n]);
    v.extend_from_slice(b);
    v
}

/// The fuzz target's body. Returns whether the `tokenizers` crate panicked (a panic pteron
/// contained and turned into an error).
pub fn run(data: &[u8]) -> bool {
    let (mode, a, b) = split(data);
    match mode % 3 {
        0 => tokenizer(a, b),
        1 => {
            template(a, b);
            false
        }
        _ => {
            config(a, b);
            false
        }
    }
}

fn contained<T>(r: &pteron_llm::Result<T>) -> bool {
    matches!(r, Err(e) if e.to_string().contains("tokenizers crate panicked"))
}

fn tokenizer(text: &[u8], json: &[u8]) -> bool {
    let tok = match Tokenizer::from_bytes(json, TokenizerConfig::default()) {
        Ok(t) => t,
        Err(e) => return e.to_string().contains("tokenizers crate panicked"),
    };
    let mut panicked = false;
    let text = String::from_utf8_lossy(text);
    let vocab = tok.vocab_size() as u32;
    for add_special in [false, true] {
        let r = tok.encode(&text, add_special);
        panicked |= contained(&r);
        let Ok(ids) = r else {
            continue;
        };
        panicked |= decode_all(&tok, &ids);
    }
    // Ids from the text's bytes: mostly in the vocabulary, some just past it, some anything.
    let ids: Vec<u32> = text
        .as_bytes()
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            let x = u32::from_le_bytes(w);
            match c[0] % 4 {
                0 => x,
                _ => x % vocab.saturating_add(3).max(1),
            }
        })
        .collect();
    panicked |= decode_all(&tok, &ids);
    for piece in text.split(' ').take(64) {
        if let Some(id) = tok.token_to_id(piece) {
            let _ = tok.id_to_token(id);
        }
    }
    panicked
}

fn decode_all(tok: &Tokenizer, ids: &[u32]) -> bool {
    let mut panicked = false;
    for skip in [false, true] {
        panicked |= contained(&tok.decode(ids, skip));
        let mut s = TextStream::new(skip);
        for &id in ids.iter().take(256) {
            let r = s.push(tok, id);
            panicked |= contained(&r);
            if r.is_err() {
                break;
            }
        }
        panicked |= contained(&s.flush(tok));
    }
    for &id in ids.iter().take(256) {
        let _ = tok.id_to_token(id);
    }
    panicked
}

fn messages(b: &[u8]) -> Vec<Message> {
    let roles = ["system", "user", "assistant", "user", "tool"];
    String::from_utf8_lossy(b)
        .split('\0')
        .take(32)
        .enumerate()
        .map(|(i, c)| Message::new(roles[i % roles.len()], c))
        .collect()
}

fn template(src: &[u8], msgs: &[u8]) {
    let Ok(t) = ChatTemplate::new(&String::from_utf8_lossy(src)) else {
        return;
    };
    let msgs = messages(msgs);
    for add in [false, true] {
        let _ = t.render(&msgs, add, Some("<s>"), None);
    }
}

fn config(user: &[u8], json: &[u8]) {
    let Ok(cfg) = TokenizerConfig::from_json(&String::from_utf8_lossy(json)) else {
        return;
    };
    let Some(src) = cfg.chat_template.as_deref() else {
        return;
    };
    let Ok(t) = ChatTemplate::new(src) else {
        return;
    };
    let user = String::from_utf8_lossy(user);
    let msgs = [Message::new("user", &user)];
    let _ = t.render(
        &msgs,
        true,
        cfg.bos_token.as_deref(),
        cfg.eos_token.as_deref(),
    );
}

// ------------------------------------------------------------------------------------------
// Custom mutator

/// xorshift64*, as the other fuzz targets' mutators.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Component type names of `tokenizer.json` (models, normalizers, pre-tokenizers,
/// post-processors, decoders): a node's "type" may become any of them.
const TYPES: &[&str] = &[
    "BPE",
    "WordPiece",
    "WordLevel",
    "Unigram",
    "ByteLevel",
    "Metaspace",
    "Sequence",
    "NFC",
    "NFD",
    "NFKC",
    "NFKD",
    "Lowercase",
    "Strip",
    "StripAccents",
    "Replace",
    "Prepend",
    "Precompiled",
    "BertNormalizer",
    "BertPreTokenizer",
    "Whitespace",
    "WhitespaceSplit",
    "Split",
    "Punctuation",
    "Digits",
    "CharDelimiterSplit",
    "UnicodeScripts",
    "FixedLength",
    "TemplateProcessing",
    "RobertaProcessing",
    "BertProcessing",
    "ByteFallback",
    "Fuse",
    "CTC",
    "Strip",
];

/// Strings a mutant may put anywhere (tokens, patterns, contents).
const STRINGS: &[&str] = &[
    "",
    " ",
    "\u{0}",
    "Ġ",
    "▁",
    "<0xFF>",
    "<0x0A>",
    "<unk>",
    "<s>",
    "</s>",
    "[CLS]",
    "$A",
    "$B",
    "$A:1",
    "$0",
    "\u{FFFD}",
    "e\u{301}",
    "\\p{L}+",
    "(a+)+$",
    "(?=x)",
    "((((((((((x))))))))))*",
    "[",
    "\\",
    "##",
    "a b",
    "isolated",
    "removed",
    "merged_with_previous",
    "contiguous",
    "always",
    "first",
    "never",
];

const TEMPLATE_SNIPPETS: &[&str] = &[
    "{% for message in messages %}",
    "{% endfor %}",
    "{{ message['content'] }}",
    "{{ message.role }}",
    "{% if add_generation_prompt %}",
    "{% endif %}",
    "{% else %}",
    "{{ bos_token }}",
    "{{ eos_token }}",
    "{{ loop.index0 }}",
    "{% set ns = namespace(x=0) %}",
    "{% set ns.x = ns.x + 1 %}",
    "{{ raise_exception('no') }}",
    "{{ messages[0]['content'] | trim }}",
    "{{ message.content.strip() }}",
    "{{ message.content.split(' ') }}",
    "{{ messages | tojson }}",
    "{{ 'x' * 1000 }}",
    "{% for i in range(1000) %}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ messages[-1] }}",
    "{{ message.content[1:-1] }}",
    "{%- if message.role == 'system' -%}",
    "{% generation %}",
    "{% endgeneration %}",
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
];

fn pick_number(rng: &mut Rng, v: f64) -> Json {
    match rng.below(12) {
        0 => Json::from(0),
        1 => Json::from(-1),
        2 => Json::from(u32::MAX),
        3 => Json::from(u64::MAX),
        4 => Json::from(i64::MIN),
        5 => Json::from(1u64 << 32),
        6 => Json::from(1e308),
        7 => Json::from(-0.5),
        8 => Json::from(v as i64 + 1),
        9 => Json::from(v as i64 - 1),
        10 => Json::from(100_000),
        _ => Json::from(rng.below(600) as u64),
    }
}

fn pick_string(rng: &mut Rng, s: &str) -> String {
    match rng.below(6) {
        0 => STRINGS[rng.below(STRINGS.len())].to_string(),
        1 => s.repeat(1 + rng.below(4)),
        2 => {
            let mut c: Vec<char> = s.chars().collect();
            if !c.is_empty() {
                let k = rng.below(c.len());
                c.remove(k);
            }
            c.into_iter().collect()
        }
        3 => format!("{s}{}", STRINGS[rng.below(STRINGS.len())]),
        4 => TYPES[rng.below(TYPES.len())].to_string(),
        _ => {
            let mut b = s.as_bytes().to_vec();
            if !b.is_empty() {
                let k = rng.below(b.len());
                b[k] ^= 1 << rng.below(8);
            }
            String::from_utf8_lossy(&b).into_owned()
        }
    }
}

/// Number of nodes under `v` (itself included).
fn count(v: &Json) -> usize {
    1 + match v {
        Json::Array(a) => a.iter().map(count).sum(),
        Json::Object(o) => o.values().map(count).sum(),
        _ => 0,
    }
}

/// The `k`-th node in pre-order.
fn nth<'a>(v: &'a mut Json, k: &mut usize) -> Option<&'a mut Json> {
    if *k == 0 {
        return Some(v);
    }
    *k -= 1;
    match v {
        Json::Array(a) => a.iter_mut().find_map(|c| nth(c, k)),
        Json::Object(o) => o.values_mut().find_map(|c| nth(c, k)),
        _ => None,
    }
}

fn node_at(v: &mut Json, mut k: usize) -> Option<&mut Json> {
    nth(v, &mut k)
}

/// One structure-aware change of a JSON document: a node's value, a list's items, an object's
/// keys, a component's "type", or a subtree copied elsewhere.
pub fn mutate_json(doc: &mut Json, rng: &mut Rng) {
    let n = count(doc);
    let donor = node_at(doc, rng.below(n)).cloned();
    let Some(node) = node_at(doc, rng.below(n)) else {
        return;
    };
    match node {
        Json::Number(x) => {
            let v = x.as_f64().unwrap_or(0.0);
            *node = pick_number(rng, v);
        }
        Json::String(s) => *s = pick_string(rng, s),
        Json::Bool(b) => *b = !*b,
        Json::Null => {
            *node = [
                Json::from(0),
                Json::from(""),
                serde_json::json!({}),
                serde_json::json!([]),
            ][rng.below(4)]
            .clone()
        }
        Json::Array(a) => match rng.below(6) {
            0 if !a.is_empty() => {
                let k = rng.below(a.len());
                a.remove(k);
            }
            1 if !a.is_empty() => {
                let k = rng.below(a.len());
                let c = a[k].clone();
                a.insert(k, c);
            }
            2 if a.len() > 1 => {
                let (x, y) = (rng.below(a.len()), rng.below(a.len()));
                a.swap(x, y);
            }
            3 => a.clear(),
            _ => {
                if let Some(d) = donor {
                    let k = rng.below(a.len() + 1);
                    a.insert(k, d);
                }
            }
        },
        Json::Object(o) => {
            let keys: Vec<String> = o.keys().cloned().collect();
            match rng.below(5) {
                0 if !keys.is_empty() => {
                    o.remove(&keys[rng.below(keys.len())]);
                }
                1 if o.contains_key("type") => {
                    o.insert("type".into(), Json::from(TYPES[rng.below(TYPES.len())]));
                }
                2 if !keys.is_empty() => {
                    if let Some(d) = donor {
                        o.insert(keys[rng.below(keys.len())].clone(), d);
                    }
                }
                _ => {
                    let k = STRINGS[rng.below(STRINGS.len())].to_string();
                    o.insert(k, pick_number(rng, 1.0));
                }
            }
        }
    }
}

/// Byte-level changes (as a fallback, and for texts).
fn mutate_bytes(b: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !b.is_empty() => {
                let k = rng.below(b.len());
                b[k] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let k = rng.below(b.len());
                b.remove(k);
            }
            2 => {
                let s = STRINGS[rng.below(STRINGS.len())].as_bytes();
                let k = rng.below(b.len() + 1);
                b.splice(k..k, s.iter().copied());
            }
            3 if !b.is_empty() => {
                let k = rng.below(b.len());
                b.truncate(k);
            }
            4 if b.len() < 4096 => {
                let k = rng.below(b.len() + 1);
                b.insert(k, rng.next() as u8);
            }
            _ => {
                let k = rng.below(b.len() + 1);
                let c = [0xF0u8, 0x9F, 0x98, 0x80, 0xC3, 0xA9, 0xE2, 0x96, 0x81];
                let (x, y) = (rng.below(c.len()), rng.below(c.len()));
                b.splice(k..k, c[x.min(y)..x.max(y)].iter().copied());
            }
        }
    }
}

fn mutate_template(src: &mut Vec<u8>, rng: &mut Rng) {
    match rng.below(3) {
        0 => mutate_bytes(src, rng),
        _ => {
            let s = TEMPLATE_SNIPPETS[rng.below(TEMPLATE_SNIPPETS.len())].as_bytes();
            // Insert at a tag boundary when there is one, else anywhere.
            let bounds: Vec<usize> = (0..src.len())
                .filter(|&i| src[i] == b'{' || (i > 0 && src[i - 1] == b'}'))
                .collect();
            let k = if bounds.is_empty() || rng.below(4) == 0 {
                rng.below(src.len() + 1)
            } else {
                bounds[rng.below(bounds.len())]
            };
            src.splice(k..k, s.iter().copied());
        }
    }
}

/// The custom mutator: a JSON document changed node by node (re-serialised), a template
/// changed tag by tag, or texts and messages changed byte by byte.
pub fn mutate(data: &[u8], seed: u64, max_size: usize) -> Option<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let (mode, a, b) = split(data);
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    let json_b = mode % 3 != 1;
    match rng.below(8) {
        0 | 1 => {
            if mode % 3 == 1 {
                mutate_template(&mut a, &mut rng)
            } else {
                mutate_bytes(&mut a, &mut rng)
            }
        }
        2 if !json_b => mutate_bytes(&mut b, &mut rng),
        _ if json_b => {
            let mut doc: Json = serde_json::from_slice(&b).ok()?;
            for _ in 0..1 + rng.below(3) {
                mutate_json(&mut doc, &mut rng);
            }
            b = serde_json::to_vec(&doc).ok()?;
        }
        _ => mutate_template(&mut a, &mut rng),
    }
    let out = join(mode, &a, &b);
    (out.len() <= max_size).then_some(out)
}
