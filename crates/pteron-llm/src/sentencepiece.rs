//! SentencePiece `.model` files (a protobuf `ModelProto`), turned into a `tokenizers` pipeline:
//! Unigram or BPE model, normalizer, added tokens and decoder built as a tokenizer.json in
//! memory (the crate's own serialized form), so encode/decode behave as for any tokenizer.json.
//!
//! What is read (field numbers of sentencepiece_model.proto):
//! - `ModelProto`: 1 pieces, 2 trainer_spec, 3 normalizer_spec (others skipped);
//! - `SentencePiece`: 1 piece, 2 score, 3 type (1 normal, 2 unknown, 3 control, 4 user defined,
//!   5 unused, 6 byte);
//! - `TrainerSpec`: 3 model_type (1 unigram, 2 BPE; word/char are unsupported), 24
//!   treat_whitespace_as_suffix (unsupported when set), 35 byte_fallback, 41 bos_id (added by
//!   `encode(text, add_special = true)`, as sentencepiece's `add_bos`);
//! - `NormalizerSpec`: 1 name, 2 precompiled_charsmap (applied with the `tokenizers` crate's
//!   `Precompiled` normalizer: nmt_nfkc and the other built-in rules), 3 add_dummy_prefix,
//!   4 remove_extra_whitespaces, 5 escape_whitespaces (must be on).
//!
//! Semantics: text normalized by the charsmap; with remove_extra_whitespaces, runs of spaces
//! become one and a leading/trailing space goes; spaces become `▁`; with add_dummy_prefix a `▁`
//! is prepended to non-empty text. Control pieces (`<s>`, `<|im_start|>`...) are special tokens
//! matched in the text, as transformers' Llama tokenizer does (sentencepiece itself would spell
//! them out; text around them is encoded segment by segment, each with its dummy prefix);
//! user-defined pieces win in a Unigram lattice as in sentencepiece, and are matched in the
//! normalized text of a BPE model without dummy prefix (Gemma's kind), but cut out of the raw
//! text of one with a dummy prefix (text after one then gets a dummy prefix, unlike
//! sentencepiece). Decoding: `▁`
//! → space, `<0xNN>` pieces → bytes, the unknown piece → ` ⁇ `, the first dummy space removed.
//! Not covered: the denormalizer spec (decode-time rules; none in the common models), unused
//! pieces are not excluded from the model (sentencepiece never emits them), BPE merges of two
//! splits of one piece competing at once resolve by merge-list order, not leftmost.

use serde_json::{json, Value as Json};

/// A malformed or unsupported file, in words.
type Res<T> = std::result::Result<T, String>;

/// Bounds-checked protobuf wire reader over one message.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// One field: its number and value.
enum Field<'a> {
    Varint(u64),
    Fixed32(u32),
    Fixed64,
    Bytes(&'a [u8]),
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Res<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = *self.buf.get(self.pos).ok_or("protobuf: truncated varint")?;
            self.pos += 1;
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("protobuf: varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| format!("protobuf: field of {n} bytes runs past the end"))?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// The next field, or `None` at the end of the message.
    fn next(&mut self) -> Res<Option<(u32, Field<'a>)>> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).map_err(|_| "protobuf: field number too large")?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Field::Fixed64
            }
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| "protobuf: huge length")?;
                Field::Bytes(self.take(n)?)
            }
            5 => Field::Fixed32(u32::from_le_bytes(
                self.take(4)?.try_into().map_err(|_| "protobuf")?,
            )),
            w => return Err(format!("protobuf: unsupported wire type {w} (field {num})")),
        };
        Ok(Some((num, field)))
    }
}

fn as_bool(f: &Field, what: &str) -> Res<bool> {
    match f {
        Field::Varint(v) => Ok(*v != 0),
        _ => Err(format!("{what}: expected a varint")),
    }
}

fn as_bytes<'a>(f: &Field<'a>, what: &str) -> Res<&'a [u8]> {
    match f {
        Field::Bytes(b) => Ok(b),
        _ => Err(format!("{what}: expected a length-delimited field")),
    }
}

fn as_str<'a>(f: &Field<'a>, what: &str) -> Res<&'a str> {
    std::str::from_utf8(as_bytes(f, what)?).map_err(|_| format!("{what}: not UTF-8"))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

struct Piece {
    text: String,
    score: f32,
    kind: PieceType,
}

/// The parts of a `ModelProto` the tokenizer needs.
struct Model {
    pieces: Vec<Piece>,
    bpe: bool,
    byte_fallback: bool,
    charsmap: Vec<u8>,
    /// The BOS piece (TrainerSpec bos_id, 1 unless set; -1: none).
    bos_id: i64,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
}

fn parse_piece(buf: &[u8]) -> Res<Piece> {
    let mut p = Piece {
        text: String::new(),
        score: 0.0,
        kind: PieceType::Normal,
    };
    let mut r = Reader::new(buf);
    while let Some((num, f)) = r.next()? {
        match num {
            1 => p.text = as_str(&f, "piece")?.to_string(),
            2 => match f {
                Field::Fixed32(bits) => p.score = f32::from_bits(bits),
                _ => return Err("piece score: expected a float".into()),
            },
            3 => {
                p.kind = match f {
                    Field::Varint(1) => PieceType::Normal,
                    Field::Varint(2) => PieceType::Unknown,
                    Field::Varint(3) => PieceType::Control,
                    Field::Varint(4) => PieceType::UserDefined,
                    Field::Varint(5) => PieceType::Unused,
                    Field::Varint(6) => PieceType::Byte,
                    _ => return Err("piece type: not one of 1..=6".into()),
                }
            }
            _ => {}
        }
    }
    if p.text.is_empty() {
        return Err("a piece with empty text".into());
    }
    if !p.score.is_finite() {
        return Err(format!("piece {:?}: score is not finite", p.text));
    }
    Ok(p)
}

fn parse(bytes: &[u8]) -> Res<Model> {
    let mut m = Model {
        pieces: Vec::new(),
        bpe: false,
        byte_fallback: false,
        charsmap: Vec::new(),
        bos_id: 1,
        add_dummy_prefix: true,
        remove_extra_whitespaces: true,
    };
    let mut escape_whitespaces = true;
    let mut norm_name = String::new();
    let mut r = Reader::new(bytes);
    while let Some((num, f)) = r.next()? {
        match num {
            1 => m.pieces.push(parse_piece(as_bytes(&f, "pieces")?)?),
            2 => {
                let mut t = Reader::new(as_bytes(&f, "trainer_spec")?);
                while let Some((num, f)) = t.next()? {
                    match (num, &f) {
                        (3, Field::Varint(1)) => m.bpe = false,
                        (3, Field::Varint(2)) => m.bpe = true,
                        (3, Field::Varint(t)) => {
                            return Err(format!(
                                "model_type {t} (word or char) is not supported; only unigram \
                                 and BPE"
                            ))
                        }
                        (24, _) if as_bool(&f, "treat_whitespace_as_suffix")? => {
                            return Err("treat_whitespace_as_suffix is not supported".into())
                        }
                        (35, _) => m.byte_fallback = as_bool(&f, "byte_fallback")?,
                        // int32: a negative value is a 10-byte varint.
                        (41, Field::Varint(v)) => m.bos_id = *v as i64,
                        _ => {}
                    }
                }
            }
            3 => {
                let mut n = Reader::new(as_bytes(&f, "normalizer_spec")?);
                while let Some((num, f)) = n.next()? {
                    match num {
                        1 => norm_name = as_str(&f, "normalizer name")?.to_string(),
                        2 => m.charsmap = as_bytes(&f, "precompiled_charsmap")?.to_vec(),
                        3 => m.add_dummy_prefix = as_bool(&f, "add_dummy_prefix")?,
                        4 => m.remove_extra_whitespaces = as_bool(&f, "remove_extra_whitespaces")?,
                        5 => escape_whitespaces = as_bool(&f, "escape_whitespaces")?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    if m.pieces.is_empty() {
        return Err("no pieces (not a SentencePiece model?)".into());
    }
    if u32::try_from(m.pieces.len()).is_err() {
        return Err("too many pieces".into());
    }
    if !escape_whitespaces {
        return Err("escape_whitespaces off is not supported".into());
    }
    if m.charsmap.is_empty() && !norm_name.is_empty() && norm_name != "identity" {
        return Err(format!(
            "normalization {norm_name:?} without a precompiled charsmap is not supported"
        ));
    }
    Ok(m)
}

/// Merges of a SentencePiece BPE model: every split of a mergeable piece into two pieces,
/// highest-scoring merged piece first (sentencepiece merges the adjacent pair whose
/// concatenation scores highest).
fn bpe_merges(m: &Model, vocab: &std::collections::HashMap<&str, usize>) -> Vec<(String, String)> {
    let mut merges: Vec<(f32, usize, usize, &str, &str)> = Vec::new();
    for (id, p) in m.pieces.iter().enumerate() {
        if !matches!(
            p.kind,
            PieceType::Normal | PieceType::UserDefined | PieceType::Unused
        ) {
            continue;
        }
        for (at, _) in p.text.char_indices().skip(1) {
            let (a, b) = p.text.split_at(at);
            if vocab.contains_key(a) && vocab.contains_key(b) {
                merges.push((p.score, id, at, a, b));
            }
        }
    }
    merges.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    merges
        .into_iter()
        .map(|(_, _, _, a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The tokenizer.json of a SentencePiece model.
pub fn to_tokenizer_json(bytes: &[u8]) -> Res<Json> {
    let m = parse(bytes)?;
    let mut vocab = std::collections::HashMap::new();
    for (id, p) in m.pieces.iter().enumerate() {
        if vocab.insert(p.text.as_str(), id).is_some() {
            return Err(format!("piece {:?} appears twice", p.text));
        }
    }
    let unk = m
        .pieces
        .iter()
        .position(|p| p.kind == PieceType::Unknown)
        .ok_or("no unknown piece")?;
    let unk_text = m.pieces[unk].text.clone();

    // Control pieces are special tokens cut out of the raw text. User-defined pieces: in a
    // Unigram model, sentencepiece scores them `chars × max normal score − 0.1` in its lattice
    // (so they always win); in a BPE model sentencepiece matches them first in the normalized
    // text: so here without a dummy prefix; with one they are cut out of the raw text (the text
    // after one then gets a dummy prefix, which sentencepiece does not add).
    let max_score = m
        .pieces
        .iter()
        .filter(|p| p.kind == PieceType::Normal)
        .map(|p| p.score)
        .fold(f32::NEG_INFINITY, f32::max);
    let max_score = if max_score.is_finite() {
        max_score
    } else {
        0.0
    };
    let added: Vec<Json> = m
        .pieces
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.kind == PieceType::Control || (m.bpe && p.kind == PieceType::UserDefined)
        })
        .map(|(id, p)| {
            // Matched in the normalized text, as sentencepiece does, unless the dummy prefix
            // would be added to the token's own text when the crate normalizes it.
            let normalized = p.kind == PieceType::UserDefined && !m.add_dummy_prefix;
            json!({"id": id, "content": p.text, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": normalized,
                   "special": p.kind == PieceType::Control})
        })
        .collect();
    let unigram_score = |p: &Piece| match p.kind {
        PieceType::UserDefined => p.text.chars().count() as f32 * max_score - 0.1,
        _ => p.score,
    };

    let model = if m.bpe {
        let v: serde_json::Map<String, Json> = m
            .pieces
            .iter()
            .enumerate()
            .map(|(id, p)| (p.text.clone(), json!(id)))
            .collect();
        json!({"type": "BPE", "dropout": null, "unk_token": unk_text,
               "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
               "byte_fallback": m.byte_fallback, "ignore_merges": false, "vocab": v,
               "merges": bpe_merges(&m, &vocab)})
    } else {
        let v: Vec<Json> = m
            .pieces
            .iter()
            .map(|p| json!([p.text, unigram_score(p)]))
            .collect();
        json!({"type": "Unigram", "unk_id": unk, "vocab": v, "byte_fallback": m.byte_fallback})
    };

    let mut norm = Vec::new();
    if !m.charsmap.is_empty() {
        norm.push(json!({"type": "Precompiled",
                         "precompiled_charsmap": crate::base64::encode(&m.charsmap)}));
    }
    if m.remove_extra_whitespaces {
        norm.push(json!({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}));
        norm.push(json!({"type": "Replace", "pattern": {"Regex": "^ | $"}, "content": ""}));
    }
    norm.push(json!({"type": "Replace", "pattern": {"String": " "}, "content": "\u{2581}"}));
    if m.add_dummy_prefix {
        norm.push(json!({"type": "Prepend", "prepend": "\u{2581}"}));
    }

    let mut dec = vec![
        json!({"type": "Replace", "pattern": {"String": unk_text}, "content": " \u{2047} "}),
        json!({"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if m.add_dummy_prefix {
        dec.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }

    // BOS for add_special, when the model has one (a control piece).
    let bos = usize::try_from(m.bos_id)
        .ok()
        .and_then(|id| m.pieces.get(id).map(|p| (id, p)))
        .filter(|(_, p)| p.kind == PieceType::Control);
    let post = match bos {
        Some((id, p)) => json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": p.text, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": p.text, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {p.text.as_str(): {"id": p.text, "ids": [id], "tokens": [p.text]}},
        }),
        None => Json::Null,
    };

    Ok(json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": norm},
        "pre_tokenizer": null,
        "post_processor": post,
        "decoder": {"type": "Sequence", "decoders": dec},
        "model": model,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_rejects_truncation_and_huge_lengths() {
        // Field 1, length 5, only 2 bytes.
        assert!(parse(&[0x0a, 0x05, 0x0a, 0x01]).is_err());
        // Length 2^63.
        let mut huge = vec![0x0a];
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
        assert!(parse(&huge).is_err());
        // An 11-byte varint.
        assert!(
            parse(&[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01])
                .is_err()
        );
        // Wire type 3 (group).
        assert!(parse(&[0x0b]).is_err());
        assert!(parse(&[]).is_err());
    }
}
