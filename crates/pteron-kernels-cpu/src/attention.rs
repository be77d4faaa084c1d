//! `llama::custom_sdpa` and `llama::sdpa_with_kv_cache` in float32 as blocked ("flash")
//! attention: the scores of a block of query rows never leave the cache.
//!
//! A task takes up to [`Q_BLOCK`] query rows that read the same kv head (the rows of one head,
//! or for grouped-query attention the heads sharing a kv head). Keys go in blocks of
//! [`KV_BLOCK`] (ExecuTorch's `kv_split_size`): the block's scores by dot products that read
//! each key row of the cache once for all the task's rows; scale, mask and causal limit, then
//! the online softmax with SIMD `exp` (running max and sum per row, the running output
//! rescaled when the max grows); `O += P·V` reading each value row once. The output is `O`
//! times the reciprocal of the sum, as ExecuTorch computes it. Tasks split over the method's
//! threads; the buffers of a task live on its stack (nothing is allocated). Head dims over
//! [`MAX_DIM`] and the other dtypes run the portable kernel.
//!
//! Every row gets the same arithmetic whatever the number of rows in the call, so a prompt
//! prefilled in one call gives the bits of one token per call, as ExecuTorch's attention
//! does. A GEMM over blocks of 64 rows was faster on long prompts (up to ~15% of prefill),
//! but its sums were ordered differently: last-bit differences that a dynamically quantized
//! program (8da4w) amplifies at its next int8 rounding into other greedy tokens than
//! ExecuTorch's.

use core::ops::Range;

use pteron_core::{Kernel, KernelContext, KernelError, KernelRegistry, Parallel};
use pteron_kernels::llm::{attend_f32, custom_sdpa_with, sdpa_with_kv_cache_with, Attn};

use crate::math;
use crate::par::SharedMut;
use crate::register_over;
use crate::simd::{level, run_op_at, Level, Simd, SimdOp};

/// Query rows per task block (the keys and values read once serve this many rows).
pub const Q_BLOCK: usize = 4;
/// Keys per online-softmax block.
pub const KV_BLOCK: usize = 512;
/// The largest head dimension of the blocked path.
pub const MAX_DIM: usize = 256;

pub fn register(r: &mut KernelRegistry) {
    register_over(r, "llama::custom_sdpa.out", Kernel::new(custom_sdpa_out));
    register_over(
        r,
        "llama::sdpa_with_kv_cache.out",
        Kernel::new(sdpa_with_kv_cache_out),
    );
}

fn custom_sdpa_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    custom_sdpa_with(ctx, attend_blocked)
}

fn sdpa_with_kv_cache_out(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    sdpa_with_kv_cache_with(ctx, attend_blocked)
}

/// Blocked attention; same contract and layouts as [`attend_f32`]
/// (`q`/`out` `[batch, q_len, heads, dim]`, `k`/`v` `[batch, kv_rows, kv_heads, dim]`,
/// `mask` `[q_len, kv_rows]`).
pub fn attend_blocked(
    at: &Attn,
    par: &dyn Parallel,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: Option<&[f32]>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    at.check_lens(q.len(), k.len(), v.len(), mask.map(|m| m.len()), out.len())?;
    if at.dim == 0 || at.dim > MAX_DIM || at.kv_heads == 0 || !at.heads.is_multiple_of(at.kv_heads)
    {
        return attend_f32(at, par, q, k, v, mask, out);
    }
    let reps = at.heads / at.kv_heads;
    // Rows of one kv head: (query position, head of the group), position-major.
    let rows = at.q_len * reps;
    let blocks = rows.div_ceil(Q_BLOCK);
    let items = at.batch * at.kv_heads * blocks;
    if items == 0 {
        return Ok(());
    }
    let job = Job {
        at,
        l: level(),
        q,
        k,
        v,
        mask,
        out: SharedMut::new(out),
        reps,
        rows,
        blocks,
    };
    let work = items as u64 * at.num_keys as u64 * Q_BLOCK.min(rows) as u64 * at.dim as u64;
    let run = |r: Range<usize>| {
        with_buffers::<Q_BLOCK, { Q_BLOCK * MAX_DIM }, { Q_BLOCK * KV_BLOCK }>(|b| {
            for item in r {
                job.item(item, b);
            }
        });
    };
    // Small calls are not worth waking the other threads. Decode is memory-bound (keys and
    // values come from memory after the weights have streamed through the caches), so it is
    // split from a few dozen keys on.
    if par.num_threads() <= 1 || items == 1 || work < (1 << 15) {
        run(0..items);
    } else {
        par.parallel_for(items, &run);
    }
    Ok(())
}

/// Runs `f` with a working set on this thread's stack (nothing is allocated while executing)
/// for blocks of up to `R` rows: `QD = R · MAX_DIM`, `SK = R · KV_BLOCK` floats (~16 KB
/// for `Q_BLOCK` rows).
fn with_buffers<const R: usize, const QD: usize, const SK: usize>(
    f: impl FnOnce(&mut Buffers<'_>),
) {
    let (mut q, mut s, mut acc) = ([0.0; QD], [0.0; SK], [0.0; QD]);
    let (mut max, mut sum) = ([0.0; R], [0.0; R]);
    f(&mut Buffers {
        q: &mut q,
        s: &mut s,
        acc: &mut acc,
        max: &mut max,
        sum: &mut sum,
    });
}

/// One task's working set, for up to [`Q_BLOCK`] rows.
struct Buffers<'a> {
    /// Packed query rows, `[rows, dim]`.
    q: &'a mut [f32],
    /// Scores, then probabilities, `[rows, KV_BLOCK]`.
    s: &'a mut [f32],
    /// Running output, `[rows, dim]`.
    acc: &'a mut [f32],
    /// Running max and sum of each row.
    max: &'a mut [f32],
    sum: &'a mut [f32],
}

struct Job<'a> {
    at: &'a Attn,
    l: Level,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [f32]>,
    out: SharedMut<f32>,
    /// Query heads per kv head.
    reps: usize,
    /// Query rows per (batch, kv head): `q_len * reps`.
    rows: usize,
    /// Row blocks per (batch, kv head).
    blocks: usize,
}

impl Job<'_> {
    /// Offset in `q`/`out` of row `i` of (batch `b`, kv head `hk`).
    fn row_offset(&self, b: usize, hk: usize, i: usize) -> usize {
        let at = self.at;
        let (m, g) = (i / self.reps, i % self.reps);
        ((b * at.q_len + m) * at.heads + hk * self.reps + g) * at.dim
    }

    /// Attention of one block of rows.
    fn item(&self, item: usize, buf: &mut Buffers<'_>) {
        let at = self.at;
        let d = at.dim;
        let (bh, blk) = (item / self.blocks, item % self.blocks);
        let (b, hk) = (bh / at.kv_heads, bh % at.kv_heads);
        let r0 = blk * Q_BLOCK;
        let nr = (self.rows - r0).min(Q_BLOCK);
        for i in 0..nr {
            let qo = self.row_offset(b, hk, r0 + i);
            buf.q[i * d..(i + 1) * d].copy_from_slice(&self.q[qo..qo + d]);
        }
        buf.max[..nr].fill(f32::NEG_INFINITY);
        buf.sum[..nr].fill(0.0);
        buf.acc[..nr * d].fill(0.0);
        // The last row sees the most keys (the causal limit grows with the position).
        let keys = at.limit((r0 + nr - 1) / self.reps);
        let kv_stride = at.kv_heads * d;
        let kv_base = b * at.kv_rows * kv_stride + hk * d;
        // The first kv head's task prefetches whole cache rows (every head's keys and
        // values): a decode step's caches come from memory (the weights streamed through
        // the caches since the last step), and rows of one head, `kv_stride` apart, left
        // each task waiting on them; the other heads' tasks then find them cached.
        let ahead = if hk == 0 && blk == 0 { kv_stride } else { d };
        let mut j0 = 0;
        while j0 < keys {
            let n = (keys - j0).min(KV_BLOCK);
            let kv = kv_base + j0 * kv_stride;
            // Each key row read once for the block's rows, nothing packed.
            run_op_at(
                self.l,
                Scores {
                    q: &buf.q[..nr * d],
                    d,
                    k: &self.k[kv..],
                    stride: kv_stride,
                    n,
                    s: buf.s,
                    ahead,
                },
            );
            for i in 0..nr {
                let m = (r0 + i) / self.reps;
                let valid = at.limit(m).saturating_sub(j0).min(n);
                let mask = self
                    .mask
                    .map(|mk| &mk[m * at.kv_rows + j0..m * at.kv_rows + j0 + n]);
                let run_max = buf.max[i];
                let (new_max, bsum) = run_op_at(
                    self.l,
                    RowSoftmax {
                        row: &mut buf.s[i * KV_BLOCK..i * KV_BLOCK + n],
                        valid,
                        scale: at.scale,
                        mask,
                        run_max,
                    },
                );
                if new_max == f32::NEG_INFINITY {
                    // Every key so far masked out: nothing added (the row was zeroed).
                    continue;
                }
                let corr = (run_max - new_max).exp();
                buf.sum[i] = bsum + corr * buf.sum[i];
                buf.max[i] = new_max;
                if corr != 1.0 {
                    for a in &mut buf.acc[i * d..(i + 1) * d] {
                        *a *= corr;
                    }
                }
            }
            run_op_at(
                self.l,
                WeightedValues {
                    p: buf.s,
                    d,
                    v: &self.v[kv..],
                    stride: kv_stride,
                    n,
                    acc: &mut buf.acc[..nr * d],
                    ahead,
                },
            );
            j0 += n;
        }
        for i in 0..nr {
            let qo = self.row_offset(b, hk, r0 + i);
            // ExecuTorch multiplies by the reciprocal (no key: 0 · inf = NaN, as there).
            let r = 1.0 / buf.sum[i];
            // Safety: `check_lens` made `out` hold every row; each (batch, position, head)
            // row belongs to exactly one row of one item, so no two tasks write it.
            let o = unsafe { self.out.slice(qo..qo + d) };
            for (x, a) in o.iter_mut().zip(&buf.acc[i * d..(i + 1) * d]) {
                *x = a * r;
            }
        }
    }
}

/// One row of a key block: scale (plus mask) the first `valid` scores, zero the rest, and
/// replace the scores by `exp(score - new max)`, where the new max also covers `run_max`.
/// Returns (new max, sum of the block's exps); a new max of -inf leaves the row all zero.
struct RowSoftmax<'a> {
    row: &'a mut [f32],
    valid: usize,
    scale: f32,
    mask: Option<&'a [f32]>,
    run_max: f32,
}

impl SimdOp for RowSoftmax<'_> {
    type Output = (f32, f32);
    #[inline(always)]
    fn run<S: Simd>(self, s: S) -> (f32, f32) {
        let l = S::LANES;
        let (x, rest) = self.row.split_at_mut(self.valid.min(self.row.len()));
        rest.fill(0.0);
        let sc = s.splat(self.scale);
        let mut mx = s.splat(f32::NEG_INFINITY);
        let full = x.len() - x.len() % l;
        for i in (0..full).step_by(l) {
            let mut v = s.mul(s.ld(&x[i..]), sc);
            if let Some(m) = self.mask {
                v = s.add(v, s.ld(&m[i..]));
            }
            s.st(&mut x[i..], v);
            mx = s.max(mx, v);
        }
        let mut bmax = s.reduce_max(mx);
        for i in full..x.len() {
            let mut t = x[i] * self.scale;
            if let Some(m) = self.mask {
                t += m[i];
            }
            x[i] = t;
            bmax = if t > bmax { t } else { bmax };
        }
        let new_max = if self.run_max > bmax {
            self.run_max
        } else {
            bmax
        };
        if new_max == f32::NEG_INFINITY {
            x.fill(0.0);
            return (new_max, 0.0);
        }
        let nm = s.splat(new_max);
        let mut acc = s.zero();
        for i in (0..full).step_by(l) {
            let e = math::exp(s, s.sub(s.ld(&x[i..]), nm));
            s.st(&mut x[i..], e);
            acc = s.add(acc, e);
        }
        let mut sum = s.reduce_add(acc);
        for v in &mut x[full..] {
            *v = (*v - new_max).exp();
            sum += *v;
        }
        (new_max, sum)
    }
}

/// Key (value) rows ahead of the one being read that the decode loops prefetch: the rows of
/// one head are `kv_heads · dim` floats apart, a stride the hardware prefetchers follow late.
const PREFETCH_ROWS: usize = 8;

/// Hints the `d` floats at `at` in `x` into the cache (nothing past the end of `x`).
#[inline(always)]
fn prefetch_row(x: &[f32], at: usize, d: usize) {
    if at + d <= x.len() {
        for c in (0..d).step_by(16) {
            crate::gemm::prefetch(x[at + c..].as_ptr());
        }
    }
}

/// `s[i][j] = q_i · k_j` for the `q.len() / d` rows of `q` and the first `n` keys (row `j` of
/// `k` at `j * stride`); rows of `s` are `KV_BLOCK` apart.
struct Scores<'a> {
    q: &'a [f32],
    d: usize,
    k: &'a [f32],
    stride: usize,
    n: usize,
    s: &'a mut [f32],
    /// Floats of each key row ahead to prefetch from its start (see `Job::item`).
    ahead: usize,
}

impl SimdOp for Scores<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(mut self, s: S) {
        // Key groups are held in 16 vectors (`dots`); no instruction set has wider ones.
        const { assert!(S::LANES <= 16) };
        let l = S::LANES;
        // Each score is one vector of fused multiply-adds over the head dimension, then its
        // horizontal sum. Keys go LANES at a time (the last few together too): their chains
        // advance together, one column vector of every key per step (independent chains,
        // not one latency-bound chain after another), and their sums are taken together
        // (`reduce_add_each`: the same additions as one `reduce_add` per key).
        let mut j = 0;
        while j + l <= self.n {
            self.group(s, j, l);
            j += l;
        }
        if j < self.n {
            self.group(s, j, self.n - j);
        }
    }
}

impl Scores<'_> {
    /// The scores of keys `j .. j + r` (r ≤ LANES), every row.
    #[inline(always)]
    fn group<S: Simd>(&mut self, s: S, j: usize, r: usize) {
        let (l, d) = (S::LANES, self.d);
        for k in j..j + r {
            prefetch_row(self.k, (k + PREFETCH_ROWS) * self.stride, self.ahead);
        }
        let keys = &self.k[j * self.stride..(j + r - 1) * self.stride + d];
        for (i, qr) in self.q.chunks_exact(d).enumerate() {
            let sums = dots::<S>(s, qr, keys, self.stride, r);
            let row = &mut self.s[i * KV_BLOCK + j..];
            let v = s.reduce_add_each(&sums[..l]);
            if r == l {
                s.st(row, v);
            } else {
                s.st_tail(&mut row[..r], v);
            }
        }
    }
}

/// `q · k` for `r` ≤ `LANES` ≤ 16 keys at once (key `k` at `k * stride` in `keys`), before
/// their horizontal sums: each key's one vector of fused multiply-adds over the `d` elements,
/// in column order; the sums past `r` are zero.
#[inline(always)]
fn dots<S: Simd>(s: S, q: &[f32], keys: &[f32], stride: usize, r: usize) -> [S::V; 16] {
    let (l, d) = (S::LANES, q.len());
    let full = d - d % l;
    let mut sums = [s.zero(); 16];
    // Every key row lies inside `keys`: one check for the group instead of two per load
    // (the checks were most of the instructions of a decode step's scores).
    assert!(r <= 16 && (r == 0 || (r - 1) * stride + d <= keys.len()));
    let kp = keys.as_ptr();
    let mut c = 0;
    while c < full {
        let qv = s.ld(&q[c..c + l]);
        for (k, x) in sums[..r].iter_mut().enumerate() {
            // Safety: k < r and c + l ≤ d, so the vector lies inside key k's row, inside
            // `keys` (checked above).
            *x = s.fma(qv, unsafe { s.load(kp.add(k * stride + c)) }, *x);
        }
        c += l;
    }
    if full < d {
        let qv = s.ld_tail(&q[full..]);
        for (k, x) in sums[..r].iter_mut().enumerate() {
            *x = s.fma(qv, s.ld_tail(&keys[k * stride + full..k * stride + d]), *x);
        }
    }
    sums
}

/// `acc_i += Σ_j p[i][j] · v_j` over the first `n` value rows (row `j` at `j * stride`); rows
/// of `p` are `KV_BLOCK` apart, rows of `acc` `d`.
struct WeightedValues<'a> {
    p: &'a [f32],
    d: usize,
    v: &'a [f32],
    stride: usize,
    n: usize,
    acc: &'a mut [f32],
    /// Floats of each value row ahead to prefetch from its start (see `Job::item`).
    ahead: usize,
}

impl SimdOp for WeightedValues<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(mut self, s: S) {
        let (l, d) = (S::LANES, self.d);
        let rows = self.acc.len() / d;
        // Columns in chunks of a few vectors whose running sums, for every row, stay in
        // registers over the keys (each value row loaded once per chunk for all rows). Each
        // sum is the same chain of fused multiply-adds over the keys as one row at a time.
        let vc = if l >= 16 { 4 } else { 2 };
        let mut c0 = 0;
        while c0 + vc * l <= d && rows <= Q_BLOCK {
            match (vc, rows) {
                (4, 1) => self.chunk::<S, 1, 4>(s, c0),
                (4, 2) => self.chunk::<S, 2, 4>(s, c0),
                (4, 3) => self.chunk::<S, 3, 4>(s, c0),
                (4, _) => self.chunk::<S, 4, 4>(s, c0),
                (_, 1) => self.chunk::<S, 1, 2>(s, c0),
                (_, 2) => self.chunk::<S, 2, 2>(s, c0),
                (_, 3) => self.chunk::<S, 3, 2>(s, c0),
                _ => self.chunk::<S, 4, 2>(s, c0),
            }
            c0 += vc * l;
        }
        if c0 < d {
            self.rest(s, c0);
        }
    }
}

impl WeightedValues<'_> {
    /// Columns `c0 .. c0 + V·LANES` of `R` rows (`R` = the rows of `acc`).
    #[inline(always)]
    fn chunk<S: Simd, const R: usize, const V: usize>(&mut self, s: S, c0: usize) {
        let (l, d) = (S::LANES, self.d);
        let mut acc = [[s.zero(); V]; R];
        for (i, a) in acc.iter_mut().enumerate() {
            for (v, x) in a.iter_mut().enumerate() {
                *x = s.ld(&self.acc[i * d + c0 + v * l..]);
            }
        }
        // Value rows 0 .. n (columns c0 .. c0 + V·LANES) and R rows of weights lie inside
        // `v` and `p`: checked once here instead of at every key's loads.
        let n = self.n;
        assert!(
            n == 0
                || ((n - 1) * self.stride + c0 + V * l <= self.v.len()
                    && (R - 1) * KV_BLOCK + n <= self.p.len())
        );
        let (vp, pp) = (self.v.as_ptr(), self.p.as_ptr());
        for j in 0..n {
            if c0 == 0 {
                prefetch_row(self.v, (j + PREFETCH_ROWS) * self.stride, self.ahead);
            }
            // Safety: j < n and v < V: inside `v` (checked above).
            let vv: [S::V; V] =
                core::array::from_fn(|v| unsafe { s.load(vp.add(j * self.stride + c0 + v * l)) });
            for (i, a) in acc.iter_mut().enumerate() {
                // A zero weight (a masked key) adds zero: the sum is unchanged.
                // Safety: i < R and j < n: inside `p` (checked above).
                let pv = s.splat(unsafe { *pp.add(i * KV_BLOCK + j) });
                for (x, v) in a.iter_mut().zip(&vv) {
                    *x = s.fma(pv, *v, *x);
                }
            }
        }
        for (i, a) in acc.iter().enumerate() {
            for (v, x) in a.iter().enumerate() {
                s.st(&mut self.acc[i * d + c0 + v * l..], *x);
            }
        }
    }

    /// Columns `c0 ..` (fewer than a chunk), row by row.
    #[inline(always)]
    fn rest<S: Simd>(&mut self, s: S, c0: usize) {
        let (l, d) = (S::LANES, self.d);
        for j in 0..self.n {
            if c0 == 0 {
                prefetch_row(self.v, (j + PREFETCH_ROWS) * self.stride, self.ahead);
            }
            let vr = &self.v[j * self.stride..j * self.stride + d];
            for (i, a) in self.acc.chunks_exact_mut(d).enumerate() {
                let pv = s.splat(self.p[i * KV_BLOCK + j]);
                let mut c = c0;
                while c + l <= d {
                    let x = s.fma(pv, s.ld(&vr[c..]), s.ld(&a[c..]));
                    s.st(&mut a[c..], x);
                    c += l;
                }
                if c < d {
                    let x = s.fma(pv, s.ld_tail(&vr[c..]), s.ld_tail(&a[c..]));
                    s.st_tail(&mut a[c..], x);
                }
            }
        }
    }
}
