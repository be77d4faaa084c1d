//! tiktoken files (OpenAI's `.tiktoken`, Llama 3's `tokenizer.model`): one `base64(token bytes)
//! rank` per line; the rank is the token id and the merge priority. Encoding follows tiktoken:
//! special tokens are cut out of the text first (all of them allowed), the rest is split by the
//! pattern, and each piece that is not a token itself is merged from single bytes, always
//! joining the adjacent pair whose concatenation has the lowest rank (leftmost on ties).
//!
//! The file has neither the pattern nor the special tokens: [`TiktokenOptions`] gives them,
//! Llama 3's by default.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use fancy_regex::Regex;

type Res<T> = std::result::Result<T, String>;

/// Llama 3's (and cl100k's) split pattern.
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// What a tiktoken file does not say.
#[derive(Clone, Debug, PartialEq)]
pub struct TiktokenOptions {
    /// The regex that splits text before merging.
    pub pattern: String,
    /// Special tokens and their ids (outside the file's ranks).
    pub special_tokens: Vec<(String, u32)>,
    /// The special token `encode(text, add_special = true)` puts first.
    pub bos_token: Option<String>,
}

impl TiktokenOptions {
    /// Llama 3 / 3.1 / 3.2: [`LLAMA3_PATTERN`] and 256 special tokens numbered from `n_ranks`
    /// (128000 for Llama 3's file): `<|begin_of_text|>`, `<|end_of_text|>`,
    /// `<|reserved_special_token_0|>`, `<|reserved_special_token_1|>`,
    /// `<|finetune_right_pad_id|>`, `<|step_id|>`, `<|start_header_id|>`, `<|end_header_id|>`,
    /// `<|eom_id|>`, `<|eot_id|>`, `<|python_tag|>`, then `<|reserved_special_token_2|>` ...
    /// `<|reserved_special_token_246|>`; BOS `<|begin_of_text|>`.
    pub fn llama3(n_ranks: u32) -> Self {
        let mut names: Vec<String> = [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|reserved_special_token_0|>",
            "<|reserved_special_token_1|>",
            "<|finetune_right_pad_id|>",
            "<|step_id|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eom_id|>",
            "<|eot_id|>",
            "<|python_tag|>",
        ]
        .map(String::from)
        .to_vec();
        let named = names.len();
        names.extend((0..256 - named).map(|i| format!("<|reserved_special_token_{}|>", 2 + i)));
        TiktokenOptions {
            pattern: LLAMA3_PATTERN.to_string(),
            special_tokens: names.into_iter().zip(n_ranks..).collect(),
            bos_token: Some("<|begin_of_text|>".into()),
        }
    }

    /// Options from a sidecar JSON `{"pattern": "...", "special_tokens": {"<|x|>": id, ...},
    /// "bos_token": "<|x|>" or null}`; a missing key takes Llama 3's value.
    pub fn from_json(text: &str, n_ranks: u32) -> Res<Self> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("tiktoken sidecar JSON: {e}"))?;
        let mut o = Self::llama3(n_ranks);
        if let Some(p) = v.get("pattern") {
            o.pattern = p.as_str().ok_or("sidecar: pattern is not a string")?.into();
        }
        if let Some(s) = v.get("special_tokens") {
            let map = s
                .as_object()
                .ok_or("sidecar: special_tokens is not an object")?;
            o.special_tokens = map
                .iter()
                .map(|(k, id)| {
                    let id = id
                        .as_u64()
                        .and_then(|i| u32::try_from(i).ok())
                        .ok_or_else(|| format!("sidecar: special token {k:?}: bad id"))?;
                    Ok((k.clone(), id))
                })
                .collect::<Res<_>>()?;
        }
        if let Some(b) = v.get("bos_token") {
            o.bos_token = match b {
                serde_json::Value::Null => None,
                b => Some(
                    b.as_str()
                        .ok_or("sidecar: bos_token is not a string")?
                        .into(),
                ),
            };
        }
        Ok(o)
    }
}

/// Number of ranks in a tiktoken file (its non-empty lines), for the default options.
pub fn count_ranks(bytes: &[u8]) -> u32 {
    let n = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whether `bytes` starts like a tiktoken file (`base64 digits` on its first line).
pub fn looks_like(bytes: &[u8]) -> bool {
    let line = bytes.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(t), Some(r), None) if !t.is_empty() && !r.is_empty()
            && t.iter().all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(c))
            && r.iter().all(u8::is_ascii_digit)
    )
}

/// A tiktoken tokenizer.
pub struct Tiktoken {
    encoder: HashMap<Vec<u8>, u32>,
    decoder: HashMap<u32, Vec<u8>>,
    special: HashMap<String, u32>,
    special_ids: HashMap<u32, String>,
    split: Regex,
    /// Alternation of the special tokens, longest first (`None` without any).
    special_re: Option<Regex>,
    vocab_size: usize,
    /// Put first by `encode(.., true)`: the BOS token's id, if it is a special token.
    bos: Option<u32>,
    /// Longest token in bytes: longer pairs need no lookup.
    max_token_len: usize,
}

impl Tiktoken {
    pub fn parse(bytes: &[u8], opts: &TiktokenOptions) -> Res<Self> {
        let mut encoder = HashMap::new();
        let mut decoder = HashMap::new();
        for (n, line) in bytes.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let bad = |what: &str| format!("tiktoken line {}: {what}", n + 1);
            let mut parts = line.split(|&b| b == b' ').filter(|p| !p.is_empty());
            let (Some(tok), Some(rank), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(bad("expected `base64 rank`"));
            };
            let tok = crate::base64::decode(tok).ok_or_else(|| bad("bad base64"))?;
            if tok.is_empty() {
                return Err(bad("empty token"));
            }
            let rank: u32 = std::str::from_utf8(rank)
                .ok()
                .and_then(|r| r.parse().ok())
                .filter(|&r| r < i32::MAX as u32)
                .ok_or_else(|| bad("bad rank"))?;
            if decoder.insert(rank, tok.clone()).is_some() {
                return Err(bad(&format!("rank {rank} appears twice")));
            }
            if encoder.insert(tok, rank).is_some() {
                return Err(bad("token appears twice"));
            }
        }
        if encoder.is_empty() {
            return Err("tiktoken: no tokens".into());
        }
        let mut special = HashMap::new();
        let mut special_ids = HashMap::new();
        for (s, id) in &opts.special_tokens {
            if s.is_empty() {
                return Err("tiktoken: an empty special token".into());
            }
            if decoder.contains_key(id) || special_ids.insert(*id, s.clone()).is_some() {
                return Err(format!("tiktoken: special token {s:?}: id {id} is taken"));
            }
            if special.insert(s.clone(), *id).is_some() {
                return Err(format!("tiktoken: special token {s:?} given twice"));
            }
        }
        let split = Regex::new(&opts.pattern).map_err(|e| format!("tiktoken pattern: {e}"))?;
        let mut names: Vec<&String> = special.keys().collect();
        names.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        let special_re = if names.is_empty() {
            None
        } else {
            let alt: Vec<String> = names
                .iter()
                .map(|s| fancy_regex::escape(s).into())
                .collect();
            Some(Regex::new(&alt.join("|")).map_err(|e| format!("special tokens: {e}"))?)
        };
        let max_id = decoder
            .keys()
            .chain(special_ids.keys())
            .max()
            .copied()
            .unwrap_or(0);
        let max_token_len = encoder.keys().map(Vec::len).max().unwrap_or(0);
        let bos = match &opts.bos_token {
            Some(b) => Some(
                *special
                    .get(b)
                    .ok_or_else(|| format!("tiktoken: BOS {b:?} is not a special token"))?,
            ),
            None => None,
        };
        Ok(Tiktoken {
            bos,
            max_token_len,
            encoder,
            decoder,
            special,
            special_ids,
            split,
            special_re,
            vocab_size: max_id as usize + 1,
        })
    }

    /// Token ids of `text`, special tokens in it included; `add_bos` puts the BOS first.
    pub fn encode(&self, text: &str, add_bos: bool) -> Res<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos.filter(|_| add_bos).into_iter().collect();
        let mut at = 0;
        while at < text.len() {
            let found = match &self.special_re {
                Some(re) => re.find_from_pos(text, at).map_err(|e| e.to_string())?,
                None => None,
            };
            let end = found.as_ref().map_or(text.len(), |m| m.start());
            self.encode_ordinary(&text[at..end], &mut ids)?;
            let Some(m) = found else { break };
            ids.push(self.special[m.as_str()]);
            at = m.end();
        }
        Ok(ids)
    }

    fn encode_ordinary(&self, text: &str, ids: &mut Vec<u32>) -> Res<()> {
        for m in self.split.find_iter(text) {
            let piece = m
                .map_err(|e| format!("tiktoken pattern: {e}"))?
                .as_str()
                .as_bytes();
            match self.encoder.get(piece) {
                Some(&id) => ids.push(id),
                None => self.merge(piece, ids)?,
            }
        }
        Ok(())
    }

    /// tiktoken's byte-pair merge of one piece: the same choices as its scan (lowest rank,
    /// leftmost on ties), found with a heap of candidate pairs so that a long piece (a run of
    /// one character) costs O(n log n), not O(n²).
    fn merge(&self, piece: &[u8], ids: &mut Vec<u32>) -> Res<()> {
        let n = piece.len();
        // Parts are linked by their start offsets: next[i] is the start of the part after the
        // one starting at i (n past the last); removed parts are marked dead.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<Option<usize>> = (0..n).map(|i| i.checked_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let pair = |next: &[usize], start: usize| -> Option<Reverse<(u32, usize, usize)>> {
            let mid = next[start];
            let end = *next.get(mid)?;
            if end - start > self.max_token_len {
                return None;
            }
            let rank = *self.encoder.get(&piece[start..end])?;
            Some(Reverse((rank, start, end)))
        };
        for i in 0..n {
            heap.extend(pair(&next, i));
        }
        while let Some(Reverse((_, start, end))) = heap.pop() {
            // Stale: the part is gone, or its right neighbour changed.
            let mid = next[start];
            if !alive[start] || next.get(mid) != Some(&end) {
                continue;
            }
            alive[mid] = false;
            next[start] = end;
            if end < n {
                prev[end] = Some(start);
            }
            if let Some(p) = prev[start] {
                heap.extend(pair(&next, p));
            }
            heap.extend(pair(&next, start));
        }
        let mut at = 0;
        while at < n {
            let part = &piece[at..next[at]];
            let id = self
                .encoder
                .get(part)
                .ok_or_else(|| format!("tiktoken: byte {:#04x} has no token", part[0]))?;
            ids.push(*id);
            at = next[at];
        }
        Ok(())
    }

    /// Text of `ids` (invalid UTF-8 as U+FFFD); unknown ids are left out, as the `tokenizers`
    /// crate does.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for id in ids {
            if let Some(t) = self.decoder.get(id) {
                bytes.extend_from_slice(t);
            } else if let Some(s) = self.special_ids.get(id) {
                if !skip_special {
                    bytes.extend_from_slice(s.as_bytes());
                }
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.special
            .get(token)
            .or_else(|| self.encoder.get(token.as_bytes()))
            .copied()
    }

    /// The token's text (a token that is not valid UTF-8 with U+FFFD).
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.special_ids.get(&id).cloned().or_else(|| {
            self.decoder
                .get(&id)
                .map(|b| String::from_utf8_lossy(b).into_owned())
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tokens: &[&[u8]]) -> Vec<u8> {
        let mut s = String::new();
        for (r, t) in tokens.iter().enumerate() {
            s += &format!("{} {r}\n", crate::base64::encode(t));
        }
        s.into_bytes()
    }

    #[test]
    fn merges_by_lowest_rank_leftmost_first() {
        // Bytes a, b; then "ab" (rank 2), "bab" (3), "abab" (4).
        let f = file(&[b"a", b"b", b"ab", b"bab", b"abab"]);
        let opts = TiktokenOptions {
            pattern: r"\S+|\s+".into(),
            special_tokens: vec![("<x>".into(), 10)],
            bos_token: Some("<x>".into()),
        };
        let t = Tiktoken::parse(&f, &opts).unwrap();
        // "ababa": ab|ab|a (rank 2 twice, leftmost first), then abab (4).
        assert_eq!(t.encode("ababa", false).unwrap(), vec![4, 0]);
        // "babb": b|ab|b -> bab|b.
        assert_eq!(t.encode("babb", false).unwrap(), vec![3, 1]);
        assert_eq!(t.encode("a<x>b", false).unwrap(), vec![0, 10, 1]);
        assert_eq!(t.encode("a", true).unwrap(), vec![10, 0]);
        assert_eq!(t.decode(&[4, 10, 0], false), "abab<x>a");
        assert_eq!(t.decode(&[4, 10, 0], true), "ababa");
        assert_eq!(t.vocab_size(), 11);
        // "c" has no byte token.
        assert!(t.encode("c", false).is_err());
    }

    /// tiktoken's own scan: merge the lowest-ranked adjacent pair, leftmost first.
    fn scan_merge(t: &Tiktoken, piece: &[u8]) -> Vec<u32> {
        let mut b: Vec<usize> = (0..=piece.len()).collect();
        loop {
            let mut best: Option<(u32, usize)> = None;
            for i in 0..b.len().saturating_sub(2) {
                if let Some(&r) = t.encoder.get(&piece[b[i]..b[i + 2]]) {
                    if best.is_none_or(|(br, _)| r < br) {
                        best = Some((r, i));
                    }
                }
            }
            let Some((_, i)) = best else { break };
            b.remove(i + 1);
        }
        b.windows(2)
            .map(|w| t.encoder[&piece[w[0]..w[1]]])
            .collect()
    }

    #[test]
    fn heap_merge_equals_tiktokens_scan() {
        // Tokens over a 3-letter alphabet with ranks in a scrambled order.
        let mut toks: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
        let mut x = 12345u32;
        while toks.len() < 60 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            let l = toks[(x >> 8) as usize % toks.len()].clone();
            let r = toks[(x >> 20) as usize % toks.len()].clone();
            let t = [l, r].concat();
            if t.len() <= 6 && !toks.contains(&t) {
                toks.push(t);
            }
        }
        let refs: Vec<&[u8]> = toks.iter().map(Vec::as_slice).collect();
        let opts = TiktokenOptions {
            pattern: r"\S+".into(),
            special_tokens: vec![],
            bos_token: None,
        };
        let t = Tiktoken::parse(&file(&refs), &opts).unwrap();
        for _ in 0..500 {
            x = x.wrapping_mul(1103515245).wrapping_add(12345);
            let len = 1 + (x >> 16) as usize % 24;
            let piece: Vec<u8> = (0..len)
                .map(|k| b"abc"[((x >> (k % 24)) as usize + k * 7) % 3])
                .collect();
            let mut ids = Vec::new();
            t.merge(&piece, &mut ids).unwrap();
            assert_eq!(
                ids,
                scan_merge(&t, &piece),
                "{:?}",
                String::from_utf8_lossy(&piece)
            );
        }
    }

    #[test]
    fn malformed_files_are_errors() {
        let opts = TiktokenOptions::llama3(3);
        for bad in [
            &b"YQ== 0\nYQ== 1\n"[..],
            b"YQ== 0\nYg== 0\n",
            b"YQ= 0\n",
            b"YQ== x\n",
            b"YQ== 99999999999\n",
            b"YQ== 0 1\n",
            b"\n\n",
            b" 0\n",
        ] {
            assert!(
                Tiktoken::parse(bad, &opts).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A special id equal to a rank.
        let o = TiktokenOptions {
            pattern: ".".into(),
            special_tokens: vec![("<s>".into(), 0)],
            bos_token: None,
        };
        assert!(Tiktoken::parse(b"YQ== 0\n", &o).is_err());
    }
}
