//! Incremental detokenization and stop strings.
//!
//! Decoding tokens one by one is wrong for byte-level BPE (a character may span several tokens)
//! and for tokenizers whose decoders look at neighbours (SentencePiece's leading-space rule).
//! [`TextStream`] decodes a sliding window: the text of `ids[prefix..]` minus the text of
//! `ids[prefix..read]`; it emits the difference once it does not end in an incomplete UTF-8
//! sequence (the decoder's U+FFFD), then slides the window. Output is always valid UTF-8 and its
//! concatenation equals the decoding of all tokens.

use crate::{Result, Tokenizer};

/// Turns a token stream into text pieces.
#[derive(Debug, Default, Clone)]
pub struct TextStream {
    ids: Vec<u32>,
    prefix: usize,
    read: usize,
    skip_special: bool,
}

impl TextStream {
    pub fn new(skip_special: bool) -> Self {
        TextStream {
            skip_special,
            ..Default::default()
        }
    }

    /// Forgets everything (keeps the buffer's capacity).
    pub fn clear(&mut self) {
        self.ids.clear();
        self.prefix = 0;
        self.read = 0;
    }

    /// Adds a token; returns the new text it completes (possibly empty).
    pub fn push(&mut self, tok: &Tokenizer, id: u32) -> Result<String> {
        self.ids.push(id);
        let before = tok.decode(&self.ids[self.prefix..self.read], self.skip_special)?;
        let after = tok.decode(&self.ids[self.prefix..], self.skip_special)?;
        if after.len() > before.len() && !after.ends_with('\u{FFFD}') {
            if let Some(new) = after.get(before.len()..) {
                if after.starts_with(&before) {
                    let new = new.to_string();
                    self.prefix = self.read;
                    self.read = self.ids.len();
                    return Ok(new);
                }
            }
        }
        Ok(String::new())
    }

    /// Text still held back (an incomplete character at the end of the stream).
    pub fn flush(&mut self, tok: &Tokenizer) -> Result<String> {
        let before = tok.decode(&self.ids[self.prefix..self.read], self.skip_special)?;
        let after = tok.decode(&self.ids[self.prefix..], self.skip_special)?;
        self.prefix = self.ids.len();
        self.read = self.ids.len();
        Ok(after.get(before.len()..).unwrap_or("").to_string())
    }
}

/// Holds back text that could be the start of a stop string, and finds stop strings.
#[derive(Debug, Default, Clone)]
pub struct StopMatcher {
    stops: Vec<String>,
    pending: String,
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            pending: String::new(),
        }
    }

    /// Adds text; returns (text safe to emit now, whether a stop string was reached — the
    /// emitted text then ends right before it).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        if self.stops.is_empty() {
            return (text.to_string(), false);
        }
        self.pending.push_str(text);
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let mut keep = 0;
        for s in &self.stops {
            for (i, _) in s.char_indices().skip(1) {
                if i > keep && self.pending.ends_with(&s[..i]) {
                    keep = i;
                }
            }
        }
        let cut = self.pending.len() - keep;
        let out = self.pending[..cut].to_string();
        self.pending.drain(..cut);
        (out, false)
    }

    /// Text held back at the end of generation.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_strings_are_held_back_then_cut() {
        let mut m = StopMatcher::new(vec!["</s>".into(), "\nUser:".into()]);
        assert_eq!(m.push("Hello"), ("Hello".into(), false));
        assert_eq!(m.push(" wor<"), (" wor".into(), false));
        assert_eq!(m.push("/"), ("".into(), false));
        assert_eq!(m.push("x"), ("</x".into(), false));
        assert_eq!(m.push("ld\nUs"), ("ld".into(), false));
        assert_eq!(m.push("er: hi"), ("".into(), true));
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abcEN"), ("abc".into(), false));
        assert_eq!(m.finish(), "EN");
    }
}
