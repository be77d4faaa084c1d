//! Speculative decoding: tokens are drafted cheaply, then one call of the target program checks
//! them all.
//!
//! After a token `t` is sampled, up to `draft_len` tokens `d1..dk` that might follow it are
//! drafted — by prompt lookup (the continuation of the most recent earlier occurrence of the
//! context's last n-gram) or by a smaller draft model (greedy, one token per call) — and the
//! target runs once on `[t, d1..dk]`, returning k + 1 rows of logits (a program exported with
//! `generate_full_logits=True`). Row i is the target's distribution after `d_i`: the generator
//! samples from it exactly as plain decoding would from the logits of a one-token call (same
//! sampler, same repetition-penalty history, same RNG draws). While the sampled token equals
//! the next draft, the next row is already computed and no call is needed; at the first
//! difference (or after the last row) the sampled token starts the next call and the KV cache
//! is rewound to the accepted length (attention masks by position, so the stale rows after it
//! are never read and are overwritten by the next call). Stop conditions are checked token by
//! token as in plain decoding, so an EOS or a stop string inside an accepted run ends the
//! generation at the same token.
//!
//! Greedy output equals plain decoding's: the accepted tokens are the target's argmax at every
//! position. The only source of difference is arithmetic: the checking call computes k + 1 rows
//! through the batched (prefill) kernels where plain decoding computes one row per call, so the
//! logits agree to rounding and a near-tie could in principle flip (on float32 this was not
//! seen on the fixtures; on 8da4w programs pteron's int8 path for five or more rows is not
//! bit-identical to its one-row path, so there the tokens may drift from plain decoding's).
//!
//! With a temperature, the rule is the speculative-sampling rule for a deterministic draft (the
//! draft distribution q is a point mass on d — prompt lookup, and the draft model's greedy
//! token): d is accepted with probability min(1, p(d)/q(d)) = p(d), otherwise the token is drawn
//! from max(0, p − q) renormalised, which is p with d removed. Drawing x from p and accepting d
//! when x = d does exactly that, with one draw per token as plain decoding makes, so a seed
//! gives plain decoding's tokens (again up to rounding of the logits). The draft model's own
//! distribution is not used (sampling drafts from it and the min(1, p/q) rule would accept
//! more often at high temperatures, at the price of a second RNG stream).

use crate::model::Model;
use crate::sampler::argmax;
use crate::Result;

/// Whether and how generation drafts tokens ([`crate::GenerateOptions::speculation`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Speculation {
    /// Plain decoding: one target call per token.
    #[default]
    Off,
    /// Prompt lookup (n-gram drafting): the last `n` tokens of the context, for `n` from
    /// `max_ngram` down to `min_ngram`, are looked up earlier in the context (prompt and
    /// generated text); the `draft_len` tokens that followed their most recent occurrence are
    /// the draft. No draft when nothing matches (then the call checks nothing).
    PromptLookup {
        min_ngram: usize,
        max_ngram: usize,
        draft_len: usize,
    },
    /// A draft model (attached with [`crate::Generator::set_draft_model`]; it must share the
    /// tokenizer) proposes `draft_len` tokens greedily, one call each.
    DraftModel { draft_len: usize },
}

/// The defaults of [`Speculation::prompt_lookup`].
pub const DEFAULT_MIN_NGRAM: usize = 1;
pub const DEFAULT_MAX_NGRAM: usize = 3;

impl Speculation {
    /// Prompt lookup with n-grams of 3 down to 1 tokens.
    pub fn prompt_lookup(draft_len: usize) -> Self {
        Speculation::PromptLookup {
            min_ngram: DEFAULT_MIN_NGRAM,
            max_ngram: DEFAULT_MAX_NGRAM,
            draft_len,
        }
    }

    pub fn is_off(&self) -> bool {
        matches!(self, Speculation::Off)
    }

    /// Most tokens drafted per target call (0 when off).
    pub fn draft_len(&self) -> usize {
        match *self {
            Speculation::Off => 0,
            Speculation::PromptLookup { draft_len, .. } | Speculation::DraftModel { draft_len } => {
                draft_len
            }
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Speculation::Off => Ok(()),
            Speculation::PromptLookup {
                min_ngram,
                max_ngram,
                draft_len,
            } => {
                if min_ngram == 0 || max_ngram < min_ngram {
                    return Err(format!(
                        "prompt lookup n-grams {min_ngram}..={max_ngram}: need 1 ≤ min ≤ max"
                    ));
                }
                if draft_len == 0 {
                    return Err("prompt lookup: draft_len must be at least 1".into());
                }
                Ok(())
            }
            Speculation::DraftModel { draft_len: 0 } => {
                Err("draft model: draft_len must be at least 1".into())
            }
            Speculation::DraftModel { .. } => Ok(()),
        }
    }
}

/// Prompt lookup: clears `out`, then, for the longest suffix n-gram of `seq` (`max_n` down to
/// `min_n` tokens) that occurs earlier in `seq`, puts the `k` tokens that followed its most
/// recent earlier occurrence into `out`. The copy may run past the end of `seq` into the
/// tokens it has just drafted (a repeating pattern continues); nothing when no n-gram matches.
pub(crate) fn lookup_draft(seq: &[u32], min_n: usize, max_n: usize, k: usize, out: &mut Vec<u32>) {
    out.clear();
    let len = seq.len();
    if k == 0 {
        return;
    }
    for n in (min_n.max(1)..=max_n).rev() {
        if len <= n {
            continue;
        }
        let suffix = &seq[len - n..];
        if let Some(j) = (0..len - n).rev().find(|&j| &seq[j..j + n] == suffix) {
            for i in 0..k {
                let p = j + n + i;
                let t = if p < len { seq[p] } else { out[p - len] };
                out.push(t);
            }
            return;
        }
    }
}

/// A draft model and the tokens its KV cache holds (a prefix of the generator's context plus
/// drafted tokens; brought up to date before each draft, so it follows rewinds, chat turns and
/// generations without speculation).
pub(crate) struct Draft<'a> {
    pub model: Model<'a>,
    cached: Vec<u32>,
}

impl<'a> Draft<'a> {
    pub fn new(model: Model<'a>) -> Self {
        let cap = model.meta.max_context_len;
        Draft {
            model,
            cached: Vec::with_capacity(cap),
        }
    }

    /// Makes the cache hold `seq` (at least its last token is run, for its logits); returns
    /// the calls made, or `None` when `seq` does not fit in the draft's context.
    fn sync(&mut self, seq: &[u32]) -> Result<Option<usize>> {
        if seq.is_empty() || seq.len() > self.model.meta.max_context_len {
            return Ok(None);
        }
        let common = self
            .cached
            .iter()
            .zip(seq)
            .take_while(|(a, b)| a == b)
            .count()
            .min(seq.len() - 1);
        // A recurrent draft keeps nothing of a shorter prefix: it runs `seq` again from 0.
        let common = self.model.rewind(common);
        self.cached.truncate(common);
        let rest = &seq[common..];
        let r = self.model.forward(rest);
        if let Err(e) = r {
            self.forget();
            return Err(e);
        }
        self.cached.extend_from_slice(rest);
        Ok(Some(rest.len().div_ceil(self.model.chunk_len())))
    }

    /// Brings the cache up to `seq` ahead of drafting (the prefill of the draft model).
    pub fn prefill(&mut self, seq: &[u32]) -> Result<usize> {
        Ok(self.sync(seq)?.unwrap_or(0))
    }

    /// Drafts up to `k` tokens that follow `seq` into `out` (greedy); returns the calls made.
    pub fn propose(&mut self, seq: &[u32], k: usize, out: &mut Vec<u32>) -> Result<usize> {
        out.clear();
        if k == 0 {
            return Ok(0);
        }
        let Some(mut calls) = self.sync(seq)? else {
            return Ok(0);
        };
        // Feeding d1..d(k-1) needs k - 1 more positions.
        let k = k.min(self.model.remaining() + 1);
        for i in 0..k {
            let d = argmax(self.model.logits());
            out.push(d);
            if i + 1 < k {
                if let Err(e) = self.model.forward(&[d]) {
                    self.forget();
                    return Err(e);
                }
                self.cached.push(d);
                calls += 1;
            }
        }
        Ok(calls)
    }

    /// Empties the cache (after an error its contents are not known).
    pub fn forget(&mut self) {
        self.model.rewind(0);
        self.cached.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(seq: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
        let mut out = vec![99];
        lookup_draft(seq, min_n, max_n, k, &mut out);
        out
    }

    #[test]
    fn lookup_takes_the_longest_ngram_and_its_latest_occurrence() {
        // "1 2 3" occurred once, followed by 4 5; "3" alone most recently by 7.
        let seq = [1, 2, 3, 4, 5, 9, 3, 7, 1, 2, 3];
        assert_eq!(draft(&seq, 1, 3, 2), vec![4, 5]);
        assert_eq!(draft(&seq, 1, 1, 2), vec![7, 1]);
        // Two occurrences of "5 6": the later one's continuation.
        let seq = [5, 6, 1, 5, 6, 2, 8, 5, 6];
        assert_eq!(draft(&seq, 2, 2, 1), vec![2]);
    }

    #[test]
    fn lookup_continues_a_repeating_pattern_past_the_end() {
        // Period 2: the copy runs into what it has just drafted.
        let seq = [7, 1, 2, 1, 2];
        assert_eq!(draft(&seq, 2, 2, 5), vec![1, 2, 1, 2, 1]);
        let seq = [4, 4, 4];
        assert_eq!(draft(&seq, 1, 3, 4), vec![4, 4, 4, 4]);
    }

    #[test]
    fn lookup_without_a_match_drafts_nothing() {
        assert!(draft(&[1, 2, 3, 4], 1, 3, 4).is_empty());
        assert!(draft(&[1], 1, 3, 4).is_empty());
        assert!(draft(&[], 1, 3, 4).is_empty());
        assert!(draft(&[1, 2, 1], 1, 3, 0).is_empty());
        // min_ngram 2: the single-token match does not count.
        assert!(draft(&[1, 2, 3, 1], 2, 3, 2).is_empty());
    }

    #[test]
    fn validate_rejects_empty_ranges() {
        assert!(Speculation::prompt_lookup(4).validate().is_ok());
        assert!(Speculation::prompt_lookup(0).validate().is_err());
        let bad = Speculation::PromptLookup {
            min_ngram: 3,
            max_ngram: 2,
            draft_len: 4,
        };
        assert!(bad.validate().is_err());
        assert!(Speculation::DraftModel { draft_len: 0 }.validate().is_err());
        assert_eq!(Speculation::DraftModel { draft_len: 5 }.draft_len(), 5);
        assert_eq!(Speculation::Off.draft_len(), 0);
    }
}
