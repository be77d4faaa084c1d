//! Token samplers: greedy, temperature, top-k, top-p (nucleus), min-p, repetition penalty.
//!
//! Order (Hugging Face's): repetition penalty on the raw logits, temperature, top-k, softmax,
//! top-p, min-p, then one draw from the renormalized distribution with a seeded RNG
//! (xoshiro256**, seeded by SplitMix64), so a seed gives the same tokens on every run. A
//! temperature of 0 is greedy (argmax; the first index among equal maxima, like ExecuTorch's
//! runner and `torch.argmax`). Scratch buffers are sized once per vocabulary; sampling a token
//! allocates nothing.

/// Sampling parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    /// 0 = greedy.
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probabilities sum to ≥ p (1 = off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one's probability (0 = off).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of tokens already in the context (1 = off).
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        Self::default()
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature {} must be ≥ 0", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!(
                "repetition_penalty {} must be > 0",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// xoshiro256** with SplitMix64 seeding.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// A sampler with its RNG state and scratch buffers.
#[derive(Clone, Debug)]
pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
    /// Candidate token ids, then their probabilities (same order).
    idx: Vec<u32>,
    probs: Vec<f32>,
    /// One bit per vocabulary entry: tokens already penalized in this call.
    seen: Vec<u64>,
}

/// Index of the largest value (the first of equal maxima; NaN never wins; 0 when no value
/// exceeds −∞). The maximum first, over 16 running lanes (a loop the compiler vectorizes: a
/// vocabulary of 50 k took ~50 µs a token as one compare-and-branch loop), then the first
/// index holding it.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = logits.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    for (m, &v) in lanes.iter_mut().zip(rest) {
        *m = if v > *m { v } else { *m };
    }
    let best = lanes
        .iter()
        .fold(f32::NEG_INFINITY, |a, &b| if b > a { b } else { a });
    if best == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&v| v == best).unwrap_or(0) as u32
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Self {
        let rng = Rng::new(config.seed);
        Sampler {
            config,
            rng,
            idx: Vec::new(),
            probs: Vec::new(),
            seen: Vec::new(),
        }
    }

    /// Restarts the RNG from the configured seed.
    pub fn reseed(&mut self) {
        self.rng = Rng::new(self.config.seed);
    }

    /// Picks the next token from `logits` (modified in place by the penalty and temperature);
    /// `history` are the tokens the repetition penalty applies to.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        let v = logits.len();
        if v == 0 {
            return 0;
        }
        let c = &self.config;
        if c.repetition_penalty != 1.0 && !history.is_empty() {
            self.seen.clear();
            self.seen.resize(v.div_ceil(64), 0);
            for &t in history {
                let t = t as usize;
                if t >= v || self.seen[t / 64] & (1 << (t % 64)) != 0 {
                    continue;
                }
                self.seen[t / 64] |= 1 << (t % 64);
                let l = &mut logits[t];
                *l = if *l > 0.0 {
                    *l / c.repetition_penalty
                } else {
                    *l * c.repetition_penalty
                };
            }
        }
        if c.temperature == 0.0 {
            return argmax(logits);
        }
        let inv_t = 1.0 / c.temperature;
        self.idx.clear();
        self.idx.extend(0..v as u32);
        let mut n = v;
        // top-k: partition the k largest logits to the front.
        if c.top_k > 0 && c.top_k < v {
            let k = c.top_k;
            self.idx.select_nth_unstable_by(k - 1, |&a, &b| {
                desc(logits[a as usize], logits[b as usize])
            });
            n = k;
        }
        // Softmax over the candidates.
        let mut mx = f32::NEG_INFINITY;
        for &i in &self.idx[..n] {
            mx = mx.max(logits[i as usize] * inv_t);
        }
        self.probs.clear();
        let mut sum = 0f64;
        for &i in &self.idx[..n] {
            let p = ((logits[i as usize] * inv_t - mx) as f64).exp() as f32;
            sum += p as f64;
            self.probs.push(p);
        }
        if sum.is_nan() || sum <= 0.0 || !sum.is_finite() {
            return argmax(logits);
        }
        for p in &mut self.probs {
            *p = (*p as f64 / sum) as f32;
        }
        // top-p and min-p need the candidates in decreasing probability.
        if c.top_p < 1.0 || c.min_p > 0.0 {
            sort_by_prob(&mut self.idx[..n], &mut self.probs);
            if c.top_p < 1.0 {
                let mut acc = 0f64;
                let mut keep = n;
                for (j, &p) in self.probs.iter().enumerate() {
                    acc += p as f64;
                    if acc >= c.top_p as f64 {
                        keep = j + 1;
                        break;
                    }
                }
                n = keep;
            }
            if c.min_p > 0.0 {
                let floor = c.min_p * self.probs[0];
                n = self.probs[..n]
                    .iter()
                    .take_while(|&&p| p >= floor)
                    .count()
                    .max(1);
            }
        }
        let total: f64 = self.probs[..n].iter().map(|&p| p as f64).sum();
        let mut r = self.rng.next_f64() * total;
        for j in 0..n {
            r -= self.probs[j] as f64;
            if r < 0.0 {
                return self.idx[j];
            }
        }
        self.idx[n - 1]
    }

    /// The candidates and probabilities of the last non-greedy `sample` call, after filtering
    /// (for tests and diagnostics). Sorted by decreasing probability when top-p or min-p ran.
    pub fn last_candidates(&self) -> (&[u32], &[f32]) {
        let n = self.probs.len().min(self.idx.len());
        (&self.idx[..n], &self.probs[..n])
    }
}

fn desc(a: f32, b: f32) -> std::cmp::Ordering {
    b.partial_cmp(&a).unwrap_or(std::cmp::Ordering::Equal)
}

/// Sorts `idx` and `probs` together by decreasing probability (ties: lower id first), without
/// allocating: an in-place heap sort over the pair of slices.
fn sort_by_prob(idx: &mut [u32], probs: &mut [f32]) {
    let n = probs.len();
    // "less" = comes later in the final order.
    let later = |p: &[f32], i: &[u32], a: usize, b: usize| -> bool {
        p[a] < p[b] || (p[a] == p[b] && i[a] > i[b])
    };
    // Build a min-heap by final order (the element that comes last at the root), then pop.
    let sift = |p: &mut [f32], i: &mut [u32], mut root: usize, end: usize| loop {
        let mut child = 2 * root + 1;
        if child >= end {
            break;
        }
        if child + 1 < end && later(p, i, child + 1, child) {
            child += 1;
        }
        if later(p, i, child, root) {
            p.swap(root, child);
            i.swap(root, child);
            root = child;
        } else {
            break;
        }
    };
    for s in (0..n / 2).rev() {
        sift(probs, idx, s, n);
    }
    for end in (1..n).rev() {
        probs.swap(0, end);
        idx.swap(0, end);
        sift(probs, idx, 0, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.0, -1.0, 0.5, 3.0, 2.5, -4.0]
    }

    /// The definition: the first index whose value exceeds every earlier one.
    fn first_max(v: &[f32]) -> u32 {
        let (mut best, mut bv) = (0, f32::NEG_INFINITY);
        for (i, &x) in v.iter().enumerate() {
            if x > bv {
                (best, bv) = (i, x);
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_first_maximum() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for len in [0usize, 1, 2, 15, 16, 17, 31, 33, 100, 1000] {
            for case in 0..20 {
                let v: Vec<f32> = (0..len)
                    .map(|_| match next() % 16 {
                        // Ties, signed zeros, NaN and infinities among ordinary values.
                        0 => f32::NAN,
                        1 => f32::NEG_INFINITY,
                        2 if case % 5 == 0 => f32::INFINITY,
                        3 => 0.0,
                        4 => -0.0,
                        5 => 2.5,
                        r => (r as f32 - 8.0) * 0.37,
                    })
                    .collect();
                assert_eq!(argmax(&v), first_max(&v), "{v:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, 1.0]), 2);
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY, f32::NAN]), 0);
    }

    #[test]
    fn greedy_is_first_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&mut logits(), &[]), 1);
    }

    #[test]
    fn same_seed_same_tokens_other_seed_differs() {
        let cfg = SamplerConfig {
            temperature: 1.5,
            seed: 42,
            ..Default::default()
        };
        let draw = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..200)
                .map(|_| s.sample(&mut logits(), &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(&cfg), draw(&cfg));
        let other = SamplerConfig {
            seed: 43,
            ..cfg.clone()
        };
        assert_ne!(draw(&cfg), draw(&other));
        // Every token has some probability at temperature 1.5: over 200 draws most appear.
        let mut seen = [false; 8];
        for t in draw(&cfg) {
            seen[t as usize] = true;
        }
        assert!(seen.iter().filter(|&&x| x).count() >= 6);
    }

    #[test]
    fn top_k_keeps_only_the_k_largest() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 3,
            seed: 1,
            ..Default::default()
        });
        for _ in 0..300 {
            let t = s.sample(&mut logits(), &[]);
            assert!([1, 5, 6].contains(&t), "{t}");
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_nucleus() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_p: 0.6,
            seed: 3,
            ..Default::default()
        });
        s.sample(&mut logits(), &[]);
        let (ids, probs) = s.last_candidates();
        // Sorted by probability; the kept prefix sums to ≥ 0.6 and dropping its last element
        // would not.
        let l = logits();
        let z: f64 = l.iter().map(|&x| (x as f64).exp()).sum();
        let p = |i: u32| (l[i as usize] as f64).exp() / z;
        let mut order: Vec<u32> = (0..8).collect();
        order.sort_by(|&a, &b| p(b).partial_cmp(&p(a)).unwrap().then(a.cmp(&b)));
        let mut acc = 0.0;
        let mut keep = 0;
        for &i in &order {
            acc += p(i);
            keep += 1;
            if acc >= 0.6 {
                break;
            }
        }
        assert_eq!(&ids[..keep], &order[..keep]);
        assert!(probs.windows(2).all(|w| w[0] >= w[1]));
        for _ in 0..300 {
            let t = s.sample(&mut logits(), &[]);
            assert!(order[..keep].contains(&t), "{t}");
        }
    }

    #[test]
    fn min_p_drops_unlikely_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            min_p: 0.5,
            seed: 9,
            ..Default::default()
        });
        // p(x)/p(max) = exp(x - 3) ≥ 0.5  <=>  x ≥ 3 - ln 2 ≈ 2.31: tokens 1, 5, 6.
        for _ in 0..300 {
            let t = s.sample(&mut logits(), &[]);
            assert!([1, 5, 6].contains(&t), "{t}");
        }
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            repetition_penalty: 2.0,
            ..Default::default()
        });
        // 1 and 5 (3.0) are seen, and twice for 1: each penalized once -> 1.5; 6 (2.5) wins.
        let mut l = logits();
        assert_eq!(s.sample(&mut l, &[1, 5, 1]), 6);
        assert_eq!(l[1], 1.5);
        assert_eq!(l[5], 1.5);
        let mut l = vec![-1.0f32, -2.0];
        s.sample(&mut l, &[0]);
        assert_eq!(l[0], -2.0);
    }

    #[test]
    fn heap_sort_orders_pairs() {
        let mut p = vec![0.1f32, 0.4, 0.1, 0.3, 0.05, 0.05];
        let mut i: Vec<u32> = (0..6).collect();
        sort_by_prob(&mut i, &mut p);
        assert_eq!(i, vec![1, 3, 0, 2, 4, 5]);
        assert_eq!(p, vec![0.4, 0.3, 0.1, 0.1, 0.05, 0.05]);
    }
}
