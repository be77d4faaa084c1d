//! Integer matrix multiplication for quantized fully connected layers and convolutions:
//! `acc[m][n] = Σ_k a[m][k] · w[n][k]` with unsigned 8-bit activations (`x + 128`) and signed
//! 8-bit weights, accumulated in i32, then an epilogue: requantization to int8 (static
//! quantization), or scaling to float32 (dynamically quantized activations, per-channel or
//! blockwise weights).
//!
//! Weights are packed at init in panels of 16 output channels by groups of 4 inputs, the
//! layout of AVX-512 VNNI's `vpdpbusd` (16 lanes × 4 byte products per instruction) and of
//! aarch64's lane-indexed `sdot`/`sudot` (4 lanes × 4 bytes, four registers per quad). Without
//! VNNI, tiles of `TR` rows × one panel get their integer sums from the best kernel this CPU
//! has (`TileSums`: `sudot`, `sdot` or widening NEON multiplies on aarch64, `vpmaddwd` with
//! AVX2, plain integer loops elsewhere) and share one epilogue: the sums are exact, so every
//! path gives the same results bit for bit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::aligned::StreamBuf;
use pteron_kernels_cpu::par::for_chunks_mut;

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
mod arm;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Output channels per panel.
pub const NR: usize = 16;
/// Rows per tile.
const MR: usize = 8;
/// Rows per tile of the `TileSums` paths (4 rows × 16 channels: 16 of AArch64's 32 vector
/// registers accumulate).
const TR: usize = 4;

/// What a tile-sum kernel reads: rows `a` (at most `TR`, each at least `4·q1` bytes,
/// activations as stored: unsigned), quads `q0 .. q1 ≤ quads` of panel `p` of `w`, and
/// `wsum[jj] = Σ w[16·p + jj][kk]` over the same quads (for kernels that multiply signed
/// activations and correct by `128·wsum`).
#[derive(Clone, Copy)]
struct SumsIn<'a> {
    a: &'a [&'a [u8]],
    w: &'a QWeights,
    p: usize,
    q0: usize,
    q1: usize,
    // Read by the aarch64 kernels only.
    #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
    wsum: &'a [i32; NR],
}

impl SumsIn<'_> {
    /// Checks what a kernel reads — at most `TR` rows of `4·q1` bytes, quads
    /// `q0 ≤ q1 ≤ quads` of an existing panel — and returns the panel's first weight, below
    /// which the vector kernels then read without further checks.
    #[cfg_attr(
        not(any(target_arch = "x86_64", target_arch = "aarch64")),
        allow(dead_code)
    )]
    fn panel(&self) -> *const i8 {
        let (w, q1) = (self.w, self.q1);
        assert!(self.a.len() <= TR && self.q0 <= q1 && q1 <= w.quads);
        assert!(self.a.iter().all(|r| r.len() >= 4 * q1));
        let end = (self.p + 1)
            .checked_mul(w.quads)
            .and_then(|v| v.checked_mul(NR * 4));
        assert!(end.is_some_and(|e| e <= w.data.len()));
        w.data[self.p * w.quads * NR * 4..].as_ptr()
    }
}

/// Integer sums of a tile: `acc[i][jj] += Σ_{4·q0 ≤ kk < 4·q1} a[i][kk] · w[16·p + jj][kk]`;
/// rows of `acc` past `a.len()` are left as they are.
type TileSums = fn(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]);

/// The best tile-sum kernel this CPU may run (`pteron_kernels_cpu::cpu` caps included).
fn tile_sums() -> TileSums {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(k) = arm::best() {
        return k;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(k) = avx2::best() {
        return k;
    }
    scalar_sums
}

/// Every tile-sum kernel this CPU may run, by name (the tests compare each to the loops).
#[cfg(test)]
fn tile_sum_kernels() -> Vec<(&'static str, TileSums)> {
    // Mutated only where the architecture has vector kernels.
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, TileSums)> = vec![("scalar", scalar_sums)];
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    v.extend(arm::available());
    #[cfg(target_arch = "x86_64")]
    v.extend(avx2::available());
    v
}

/// `TileSums` with plain integer loops.
fn scalar_sums(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    let SumsIn {
        a, w, p, q0, q1, ..
    } = *t;
    let panel = &w.data[p * w.quads * NR * 4..][..w.quads * NR * 4];
    for (ar, acc) in a.iter().zip(acc.iter_mut()) {
        for q in q0..q1 {
            let aq = &ar[q * 4..][..4];
            let wq = &panel[q * NR * 4..][..NR * 4];
            for (jj, s) in acc.iter_mut().enumerate() {
                let wp = &wq[jj * 4..][..4];
                for i in 0..4 {
                    *s += aq[i] as i32 * wp[i] as i32;
                }
            }
        }
    }
}

/// Most quads a sum over nibble weights takes (a product of 16·w with an unsigned byte is
/// at most 4·255·128 per quad in magnitude: 2^14 quads stay within i32).
const NIB_MAX_QUADS: usize = 1 << 14;

/// Panels whose nibbles interleave two pairs at a time (`QWeights::nib`).
const NIB_GROUP: usize = 4;
/// Bytes of two pairs of every panel of a group: the unit the nibbles interleave in.
const NIB_BLOCK: usize = NIB_GROUP * 128;

/// Bytes from pair 0 of a panel's nibbles to its pair `t` (`QWeights::nib_at`).
#[inline(always)]
const fn pair_off(t: usize) -> usize {
    (t / 2) * NIB_BLOCK + (t % 2) * 64
}

/// Where the block scales of panel `p`'s block `b` (of `blocks` a panel) start in
/// `QWeights::pscale`/`pscale16` (its 16 outputs' side by side). Panels go in groups as the
/// nibbles do, the group's panels side by side block by block: the one-row products read a
/// group's scales in one ascending stream (on a Zen 4, a stream per panel a block's scales
/// apart cost a third of the products' time). The kernels pass the `blocks` they hold (no
/// division per block).
#[inline(always)]
const fn scale_at(p: usize, b: usize, blocks: usize) -> usize {
    ((p / NIB_GROUP * blocks + b) * NIB_GROUP + p % NIB_GROUP) * NR
}

/// Packed int8 weights of `n` outputs over `k` inputs.
pub struct QWeights {
    pub n: usize,
    pub k: usize,
    /// `k` padded to a multiple of 4, divided by 4.
    pub quads: usize,
    /// `data[((p·quads + q)·16 + j)·4 + i] = w[p·16 + j][4q + i]` (zero past `n` and `k`).
    data: Vec<i8>,
    /// `Σ_k w[j][k]`, per output.
    pub colsum: Vec<i32>,
    /// For blockwise weights: `Σ_{k in block b} w[j][k]` at `[j·blocks + b]`.
    pub blocksum: Vec<i32>,
    /// Inputs per block (a multiple of 4), 0 when not blockwise.
    pub block: usize,
    /// No weight is −128: two int8 products fit an i16 sum (NEON's `smlal` path).
    pub no_i8_min: bool,
    /// Blockwise scales panel by panel, `[(p·blocks + b)·16 + jj]`, for the one-row path
    /// (set by `set_block_scales`; empty until): as bf16 bits in `pscale16` when every scale
    /// is a bf16 value (the 8da4w recipe's), else as f32 here. Half the bytes streamed per
    /// block.
    pscale: StreamBuf<f32>,
    pscale16: StreamBuf<u16>,
    /// XNNPACK's packed zero-point term per output (`ksum_scaled`), padded to whole panels,
    /// set with the block scales.
    pkscaled: StreamBuf<f32>,
    /// 4-bit weights (`new_int4`), two quads per 64 bytes: quads `2t`, `2t + 1` of panel `p`
    /// at `nib_at(p, t)`, byte `i` holding byte `i` of quad `2t` (low nibble) and of quad
    /// `2t + 1` (high nibble; zero past the last quad) as 4-bit two's complement. Panels go
    /// in groups of [`NIB_GROUP`] whose pairs interleave two at a time (pairs 2v, 2v + 1 of
    /// the first panel, of the second…, then pairs 2v + 2, 2v + 3): the one-row products
    /// compute a group's panels together and so read one stream in ascending order (on a
    /// Zen 4 the hardware prefetchers kept up with that, not with reads alternating between
    /// two pairs a group apart: twice the rate). They stream these: half the bytes per token, and one
    /// 64-byte load, two masks and a shift give both quads as `16·w` in signed bytes (a
    /// nibble in the high half of a byte), whose sums are 16 times the weights' (exact).
    nib: StreamBuf<u8>,
    /// Where the weight stream continues: see [`StreamLink`].
    next: StreamLink,
}

/// Where a one-row product's streams go on after its own: the addresses of the nibbles,
/// block scales and packed zero-point terms of the product that runs next (0: unknown), set
/// at load by whoever knows the run order ([`QWeights::link_stream`]). The prefetches that
/// run ahead of each stream go there once they pass the end of this product's bytes, instead
/// of past the allocation: the next product then starts on bytes already on their way rather
/// than waiting for its first lines (SmolLM2-135M 8da4w decode: ~210 products a token, most
/// under 0.5 MB). Only a hint: a prefetch never faults, so a stale address is harmless.
#[derive(Clone, Debug, Default)]
pub struct StreamLink(Arc<[AtomicUsize; 3]>);

/// The linked product's streams ([`StreamLink`]), read once per call (by the x86-64
/// one-row kernels, the ones that prefetch).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Default)]
pub(super) struct NextStreams {
    nib: usize,
    scales: usize,
    starts: usize,
}

impl StreamLink {
    /// Makes the streams continue at `w`'s (nothing where `w` keeps none).
    pub fn point_to(&self, w: &QWeights) {
        let spans = [Span::of(&w.nib), w.scale_span().0, Span::of(&w.pkscaled)];
        for (slot, at) in self.0.iter().zip(spans.map(|s| s.0)) {
            slot.store(at, Ordering::Relaxed);
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn get(&self) -> NextStreams {
        let [nib, scales, starts] = &*self.0;
        NextStreams {
            nib: nib.load(Ordering::Relaxed),
            scales: scales.load(Ordering::Relaxed),
            starts: starts.load(Ordering::Relaxed),
        }
    }
}

/// A stream's bytes: its address and length (0, 0 when empty).
#[derive(Clone, Copy)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Span(usize, usize);

impl Span {
    fn of<T>(v: &[T]) -> Span {
        if v.is_empty() {
            Span(0, 0)
        } else {
            Span(v.as_ptr() as usize, core::mem::size_of_val(v))
        }
    }

    /// Where the stream reads at byte `off`: inside it, or past its end in the stream at
    /// `next` (or past the allocation when `next` is 0). Never dereferenced.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn ahead(self, off: usize, next: usize) -> *const u8 {
        match off.checked_sub(self.1) {
            Some(past) if next != 0 => next.wrapping_add(past) as *const u8,
            _ => self.0.wrapping_add(off) as *const u8,
        }
    }
}

impl QWeights {
    /// Packs the `n × k` matrix whose element (j, kk) is `at(j, kk)` (values in i8 range).
    pub fn new(
        n: usize,
        k: usize,
        block: usize,
        at: impl Fn(usize, usize) -> i8,
    ) -> Result<Self, KernelError> {
        if block != 0 && (!block.is_multiple_of(4) || !k.is_multiple_of(block)) {
            return Err(KernelError::unsupported(format!(
                "block size {block} for {k} inputs (needs a multiple of 4 dividing the inputs)"
            )));
        }
        let quads = k.div_ceil(4);
        let panels = n.div_ceil(NR);
        let len = panels
            .checked_mul(quads)
            .and_then(|v| v.checked_mul(NR * 4))
            .ok_or(KernelError::SizeOverflow)?;
        let mut data = vec![0i8; len];
        let mut colsum = vec![0i32; n];
        let blocks = if block == 0 { 0 } else { k / block };
        let mut blocksum = vec![0i32; n * blocks];
        for j in 0..n {
            let (p, jj) = (j / NR, j % NR);
            for kk in 0..k {
                let v = at(j, kk);
                data[((p * quads + kk / 4) * NR + jj) * 4 + kk % 4] = v;
                colsum[j] += v as i32;
                if block != 0 {
                    blocksum[j * blocks + kk / block] += v as i32;
                }
            }
        }
        Ok(QWeights {
            n,
            k,
            quads,
            no_i8_min: !data.contains(&i8::MIN),
            data,
            colsum,
            blocksum,
            block,
            pscale: StreamBuf::default(),
            pscale16: StreamBuf::default(),
            pkscaled: StreamBuf::default(),
            nib: StreamBuf::default(),
            next: StreamLink::default(),
        })
    }

    /// As `new`, for values in -8..=7, also kept as packed nibbles for the one-row path.
    pub fn new_int4(
        n: usize,
        k: usize,
        block: usize,
        at: impl Fn(usize, usize) -> i8,
    ) -> Result<Self, KernelError> {
        let mut w = Self::new(n, k, block, &at)?;
        if w.data.iter().any(|&v| !(-8..=7).contains(&v)) {
            return Err(KernelError::invalid("4-bit weight out of range"));
        }
        if w.quads > NIB_MAX_QUADS {
            // Sums of 16·w over this many quads could overflow i32: the int8 copy serves.
            return Ok(w);
        }
        let (panels, quads) = (w.n.div_ceil(NR), w.quads);
        let pairs = quads.div_ceil(2);
        let mut nib = StreamBuf::zeroed(panels.div_ceil(NIB_GROUP) * pairs.div_ceil(2) * NIB_BLOCK);
        for p in 0..panels {
            for q in 0..quads {
                let src = &w.data[(p * quads + q) * 64..][..64];
                let dst = &mut nib[w.nib_at(p, q / 2)..][..64];
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d |= ((v as u8) & 0x0F) << (4 * (q % 2));
                }
            }
        }
        w.nib = nib;
        Ok(w)
    }

    /// Whether the one-row product streams this matrix's nibbles (4-bit weights).
    pub fn streams_nibbles(&self) -> bool {
        !self.nib.is_empty()
    }

    /// The link that says where the weight stream goes after this matrix: hand it to
    /// whoever learns the next product (`StreamLink::point_to`).
    pub fn link_stream(&self) -> StreamLink {
        self.next.clone()
    }

    /// The linked product's streams (`StreamLink`), read once per call.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn next_streams(&self) -> NextStreams {
        self.next.get()
    }

    /// Where the nibble stream reads at byte `off` (past the end: the linked product's).
    /// For prefetch hints only.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn nib_ahead(&self, off: usize, next: &NextStreams) -> *const u8 {
        Span::of(&self.nib).ahead(off, next.nib)
    }

    /// Where the block scale stream (panel-major, `set_block_scales`; bf16 or f32) reads at
    /// scale `at` (past the end: the linked product's). For prefetch hints only.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn scales_ahead(&self, at: usize, next: &NextStreams) -> *const u8 {
        let (span, size) = self.scale_span();
        span.ahead(at * size, next.scales)
    }

    /// Where the packed zero-point terms read at output `at` (past the end: the linked
    /// product's). For prefetch hints only.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(super) fn starts_ahead(&self, at: usize, next: &NextStreams) -> *const u8 {
        Span::of(&self.pkscaled).ahead(at * 4, next.starts)
    }

    /// The block scales the one-row path reads, and the bytes of one.
    fn scale_span(&self) -> (Span, usize) {
        if self.pscale16.is_empty() {
            (Span::of(&self.pscale), 4)
        } else {
            (Span::of(&self.pscale16), 2)
        }
    }

    /// Where pair `t` of panel `p`'s nibbles starts in `nib` (pair `t` of a panel lies
    /// [`pair_off`]`(t)` bytes past its pair 0).
    fn nib_at(&self, p: usize, t: usize) -> usize {
        (p / NIB_GROUP) * self.quads.div_ceil(4) * NIB_BLOCK + (p % NIB_GROUP) * 128 + pair_off(t)
    }

    /// Scales `pscale`/`pscale16` hold: every block of whole groups of panels.
    fn scales_len(&self) -> usize {
        self.n.div_ceil(NR * NIB_GROUP) * NIB_GROUP * (self.k / self.block) * NR
    }

    /// Keeps blockwise scales (`[j·blocks + b]`, as the epilogue takes them) panel by panel
    /// ([`scale_at`]) for the one-row path, and each output's packed zero-point term (`ksum_scaled`).
    pub fn set_block_scales(&mut self, scale: &[f32]) -> Result<(), KernelError> {
        if self.block == 0 {
            return Ok(());
        }
        let blocks = self.k / self.block;
        if scale.len() < self.n * blocks {
            return Err(KernelError::invalid("block scales too short"));
        }
        let mut ps = vec![0f32; self.scales_len()];
        for j in 0..self.n {
            for b in 0..blocks {
                ps[scale_at(j / NR, b, blocks) + j % NR] = scale[j * blocks + b];
            }
        }
        // Padded to whole panels with zeros.
        let mut ks = StreamBuf::zeroed(self.n.div_ceil(NR) * NR);
        for (c, k) in ks.iter_mut().enumerate().take(self.n) {
            *k = self.ksum_scaled(scale, c);
        }
        self.pkscaled = ks;
        if ps.iter().all(|v| v.to_bits() & 0xFFFF == 0) {
            let mut ps16 = StreamBuf::zeroed(ps.len());
            for (h, v) in ps16.iter_mut().zip(&ps) {
                *h = (v.to_bits() >> 16) as u16;
            }
            self.pscale16 = ps16;
            self.pscale = StreamBuf::default();
        } else {
            self.pscale = StreamBuf::from_slice(&ps);
            self.pscale16 = StreamBuf::default();
        }
        Ok(())
    }

    /// XNNPACK's packed zero-point term of output `j` for blockwise weights (its qb4w
    /// packing): `−Σ_b blocksum[j][b] · scale[j][b]` summed in float block by block, each
    /// product rounded. The kernels start each output at this times the row's zero point
    /// (+128) and add `float(acc_b) · scale[j][b]` block by block with fused multiply-adds:
    /// XNNPACK's order, whose roundings differ from correcting each block's integer sum
    /// once the sums pass 24 bits (long rows).
    pub fn ksum_scaled(&self, scale: &[f32], j: usize) -> f32 {
        let blocks = self.k / self.block;
        let mut t = 0.0f32;
        for b in 0..blocks {
            let prod = self.blocksum[j * blocks + b] as f32 * scale[j * blocks + b];
            t -= prod;
        }
        t
    }

    /// The packed zero-point terms kept by `set_block_scales` (empty until).
    pub fn pkscaled(&self) -> &[f32] {
        &self.pkscaled
    }

    /// Whether the one-row path has what it needs (blockwise weights: their scales panel by
    /// panel and the packed zero-point terms).
    fn one_row_ready(&self) -> bool {
        if self.block == 0 {
            return true;
        }
        let len = self.scales_len();
        len > 0
            && (self.pscale.len() == len || self.pscale16.len() == len)
            && self.pkscaled.len() == self.n.div_ceil(NR) * NR
    }

    pub fn bytes(&self) -> usize {
        self.data.len()
            + self.nib.len()
            + (self.colsum.len() + self.blocksum.len() + self.pscale.len() + self.pkscaled.len())
                * 4
            + self.pscale16.len() * 2
    }
}

/// What happens to the i32 sums.
#[derive(Clone, Copy)]
pub enum Epilogue<'a> {
    /// Static int8: `q = clamp(round((acc + bias[j]) · scale[j]) + zp)`, where `bias` already
    /// holds the zero-point corrections (`bias − (zp_in + 128)·colsum`).
    Requant {
        bias: &'a [i32],
        scale: &'a [f32],
        zp: i32,
        qmin: i32,
        qmax: i32,
    },
    /// Dynamic int8 rows: `y = (acc − (zp_row + 128)·colsum[j]) · s_row · scale[j] + bias[j]`
    /// (blockwise, in XNNPACK's qb4w order: `ksum_scaled[j] · (zp_row + 128)`, then
    /// `+ float(acc_b) · scale[j][b]` block by block with fused multiply-adds, then `· s_row`,
    /// rounded, `+ bias[j]`), clamped. `rows[m]`/`zps[m]`: each row's scale and zero
    /// point.
    Dequant {
        rows: &'a [f32],
        zps: &'a [i32],
        scale: &'a [f32],
        bias: Option<&'a [f32]>,
        lo: f32,
        hi: f32,
    },
}

/// The output of a product.
pub enum Out<'a> {
    I8(&'a mut [i8]),
    F32(&'a mut [f32]),
}

/// Requantization of one sum (XNNPACK's fp32 path: scale, clamp above, round to nearest
/// even, add the zero point, clamp below).
///
/// Written so that it vectorizes: clamping below before rounding gives the same result (the
/// bound is an integer), and a value within ±2^22 rounds to nearest even when 1.5·2^23 is
/// added, the integer then sitting in the low mantissa bits: no float-to-int conversion, whose
/// saturating semantics (NaN, range) compilers scalarize. Zero points are int8 and bounds
/// within int8 (checked at prepare), so the clamped value is far inside that range.
#[inline(always)]
pub fn requant(acc: i32, scale: f32, zp: i32, qmin: i32, qmax: i32) -> i32 {
    const LIMIT: f32 = 4_194_304.0;
    let f = (acc as f32 * scale)
        .min((qmax - zp) as f32)
        .max((qmin - zp) as f32)
        .clamp(-LIMIT, LIMIT);
    (crate::quant::isa::round_small(f) + zp).max(qmin).min(qmax)
}

/// `requant(s[jj] + bias[jj], scale[jj], …)` for a panel's 16 channels (NEON registers on
/// aarch64, where the loop did not vectorize).
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use arm::requant16;

/// `requant(s[jj] + bias[jj], scale[jj], …)` for a panel's 16 channels.
#[cfg(not(all(target_arch = "aarch64", target_feature = "neon")))]
#[inline(always)]
fn requant16(
    s: &[i32; NR],
    bias: &[i32; NR],
    scale: &[f32; NR],
    zp: i32,
    qmin: i32,
    qmax: i32,
) -> [i8; NR] {
    let mut q = [0i8; NR];
    for jj in 0..NR {
        q[jj] = requant(s[jj] + bias[jj], scale[jj], zp, qmin, qmax) as i8;
    }
    q
}

/// `out[m × n] (row stride ldc) = epilogue(a[m × 4·quads] (row stride lda) · Wᵀ)`.
#[allow(clippy::too_many_arguments)]
pub fn qgemm(
    par: &dyn Parallel,
    a: &[u8],
    lda: usize,
    m: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    out: Out<'_>,
    ldc: usize,
) -> Result<(), KernelError> {
    let kp = w.quads * 4;
    if m == 0 || w.n == 0 {
        return Ok(());
    }
    let fits = |len: usize, ld: usize, inner: usize| {
        ld >= inner
            && (m - 1)
                .checked_mul(ld)
                .and_then(|v| v.checked_add(inner))
                .is_some_and(|need| need <= len)
    };
    let out_len = match &out {
        Out::I8(o) => o.len(),
        Out::F32(o) => o.len(),
    };
    if !fits(a.len(), lda, kp) || !fits(out_len, ldc, w.n) {
        return Err(KernelError::invalid("quantized product operands too short"));
    }
    match epi {
        Epilogue::Requant { bias, scale, .. } if bias.len() < w.n || scale.len() < w.n => {
            return Err(KernelError::invalid("requantization parameters too short"))
        }
        Epilogue::Dequant {
            rows,
            zps,
            scale,
            bias,
            ..
        } => {
            let blocks = if w.block == 0 { 1 } else { w.k / w.block };
            if rows.len() < m
                || zps.len() < m
                || scale.len() < w.n * blocks
                || bias.is_some_and(|b| b.len() < w.n)
            {
                return Err(KernelError::invalid("dequantization parameters too short"));
            }
        }
        _ => {}
    }
    let vnni = has_vnni();
    let sums = tile_sums();
    #[cfg(target_arch = "x86_64")]
    let avx2_rows = !vnni && avx2::rows_apply(w);
    #[cfg(target_arch = "x86_64")]
    let avx2_nibbles = !vnni && matches!(epi, Epilogue::Dequant { .. }) && avx2::nibbles_apply(w);
    // One row (decoding): a product over the output panels, in parallel, streaming each
    // weight once (with VNNI, 4-bit weights as nibbles).
    let one_row = m == 1 && matches!(epi, Epilogue::Dequant { .. }) && (!vnni || w.one_row_ready());
    let out = match out {
        Out::F32(o) if one_row => {
            gemv(par, a, w, epi, vnni, sums, &mut o[..w.n]);
            return Ok(());
        }
        other => other,
    };
    // Tasks: blocks of MR-row tiles (whole output rows, so that tasks own disjoint rows).
    let run_rows = |r0: usize, o: Out<'_>| {
        let rows = match &o {
            Out::I8(s) => s.len().div_ceil(ldc),
            Out::F32(s) => s.len().div_ceil(ldc),
        };
        let rows = rows.min(m - r0);
        if vnni {
            #[cfg(target_arch = "x86_64")]
            // Safety: the CPU has AVX-512 F/BW/VL/VNNI (checked by `has_vnni`); operands were
            // checked above to hold `m` rows of `lda`/`ldc` elements.
            unsafe {
                x86::rows(a, lda, r0, rows, w, epi, o, ldc)
            }
        } else {
            let panels = 0..w.n.div_ceil(NR);
            #[cfg(target_arch = "x86_64")]
            let o = match o {
                Out::F32(o) if avx2_nibbles => {
                    // Safety: AVX2 and FMA (`nibbles_apply`); operands checked above (`o`
                    // holds `rows` rows of `ldc` from row r0).
                    unsafe { avx2::rows_nibbles(a, lda, r0, rows, w, epi, o, ldc) };
                    return;
                }
                other => other,
            };
            #[cfg(target_arch = "x86_64")]
            if avx2_rows {
                // Safety: AVX2 and FMA (`rows_apply`); operands checked above.
                unsafe { avx2::rows(a, lda, r0, rows, w, epi, o, ldc, panels) };
                return;
            }
            tiled_rows(sums, a, lda, r0, rows, w, epi, o, ldc, panels)
        }
    };
    // Chunks of one tile each (`for_chunks_mut` groups them into tasks): every tile streams
    // all the weights anyway, and 85 prompt rows in 32-row chunks were 3 chunks, 64 rows on
    // one thread and 21 on the other. The AVX-512 blockwise tiles (8da4w prefill) take one
    // chunk per thread instead: they go panels outer, tiles inner, so that a panel pair's
    // weights serve all the chunk's tiles from L1.
    let blockwise_vnni = vnni
        && w.block != 0
        && w.one_row_ready()
        && matches!((epi, &out), (Epilogue::Dequant { .. }, Out::F32(_)));
    let rows_per_task = if blockwise_vnni {
        m.div_ceil(MR).div_ceil(par.num_threads().max(1)) * MR
    } else {
        MR
    };
    match out {
        Out::I8(o) => {
            let o = &mut o[..(m - 1) * ldc + w.n];
            // Chunk by rows: each chunk holds `rows_per_task` rows (the last row is short).
            for_chunks_mut(par, o, rows_per_task * ldc, 1, &|t, c| {
                run_rows(t * rows_per_task, Out::I8(c))
            });
        }
        Out::F32(o) => {
            let o = &mut o[..(m - 1) * ldc + w.n];
            for_chunks_mut(par, o, rows_per_task * ldc, 1, &|t, c| {
                run_rows(t * rows_per_task, Out::F32(c))
            });
        }
    }
    Ok(())
}

/// Panels per task of the one-row product (about 64 KiB of int8 weights per task at k 1024).
const GEMV_PANELS: usize = 4;

/// `out[0 .. n] = epilogue(a[0 .. 4·quads] · Wᵀ)` for one row with a `Dequant` epilogue;
/// the caller checked the operands (`qgemm`), and with `vnni` that the CPU has VNNI and
/// that the weights are `one_row_ready`.
fn gemv(
    par: &dyn Parallel,
    a: &[u8],
    w: &QWeights,
    epi: &Epilogue<'_>,
    vnni: bool,
    sums: TileSums,
    out: &mut [f32],
) {
    let panels = w.n.div_ceil(NR);
    // AVX2 over nibbles: the row's block offsets once, for every task.
    #[cfg(target_arch = "x86_64")]
    let nibbles = !vnni && avx2::nibbles_apply(w);
    // The buffers only where they are used: not zeroed on each of the ~210 VNNI calls of an
    // 8da4w decode step.
    #[cfg(target_arch = "x86_64")]
    let (mut stack, mut heap);
    #[cfg(target_arch = "x86_64")]
    let offs: &[i32] = if nibbles {
        (stack, heap) = ([0i32; avx2::OFFS_ON_STACK], Vec::new());
        let offs = avx2::offsets_buffer(&mut stack, &mut heap, w.k / w.block);
        // Safety: AVX2 (`nibbles_apply`); `offs` holds the blocks; `qgemm` checked that `a`
        // holds 4·quads bytes.
        unsafe { avx2::block_offsets(a, w, offs) };
        offs
    } else {
        &[]
    };
    for_chunks_mut(par, out, GEMV_PANELS * NR, 1, &|t, c| {
        let p0 = t * GEMV_PANELS;
        if vnni {
            #[cfg(target_arch = "x86_64")]
            // Safety: `qgemm` checked AVX-512 F/BW/VL/VNNI (`has_vnni`), that `a` holds one
            // row of 4·quads bytes and the epilogue's lengths; `c` is columns
            // t·GEMV_PANELS·NR.. of the output.
            unsafe {
                x86::gemv(a, w, epi, p0, c)
            }
        } else {
            let panels = p0..(p0 + GEMV_PANELS).min(panels);
            #[cfg(target_arch = "x86_64")]
            if nibbles {
                // Safety: AVX2 and FMA (`nibbles_apply`); `qgemm` checked the operands; `offs`
                // holds the row's blocks; `c` is the columns of `panels`.
                unsafe { avx2::gemv_nibbles(a, w, epi, offs, panels, c) };
                return;
            }
            #[cfg(target_arch = "x86_64")]
            if avx2::rows_apply(w) {
                // Safety: AVX2 and FMA (`rows_apply`); `qgemm` checked the operands; `c` is
                // the columns of `panels`.
                unsafe { avx2::rows(a, a.len(), 0, 1, w, epi, Out::F32(c), 0, panels) };
                return;
            }
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            if w.block != 0 && w.one_row_ready() {
                for p in panels.clone() {
                    dequant_row_panel(sums, a, w, epi, c, p, p0 * NR);
                }
                return;
            }
            tiled_rows(sums, a, a.len(), 0, 1, w, epi, Out::F32(c), 0, panels);
        }
    });
}

/// Panel `p` of one row's blockwise product, dequantized (`Epilogue::Dequant`), on aarch64:
/// `tile`'s arithmetic in its order (the packed zero-point term times the row's zero point,
/// then each block's `float(sums) · scale` fused in, then the row's scale, the bias and the
/// clamps), with the block scales read where `set_block_scales` put them panel by panel. Out
/// of line and without `tile`'s general loops, which on aarch64 spilled to the stack: ~640
/// instructions per block of 32 inputs × 16 channels there.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[inline(never)]
fn dequant_row_panel(
    sums: TileSums,
    a: &[u8],
    w: &QWeights,
    epi: &Epilogue<'_>,
    o: &mut [f32],
    p: usize,
    col0: usize,
) {
    let Epilogue::Dequant {
        rows,
        zps,
        bias,
        lo,
        hi,
        ..
    } = epi
    else {
        return;
    };
    let blocks = w.k / w.block;
    let bq = w.block / 4;
    let j0 = p * NR;
    let nv = NR.min(w.n - j0);
    let row = &a[..w.quads * 4];
    let zf = (zps[0] + 128) as f32;
    let mut fsum = [0f32; NR];
    for (f, k) in fsum.iter_mut().zip(&w.pkscaled[j0..j0 + NR]) {
        *f = k * zf;
    }
    for b in 0..blocks {
        let mut wsum = [0i32; NR];
        for (jj, s) in wsum.iter_mut().enumerate().take(nv) {
            *s = w.blocksum[(j0 + jj) * blocks + b];
        }
        let mut acc = [[0i32; NR]; TR];
        let input = SumsIn {
            a: core::slice::from_ref(&row),
            w,
            p,
            q0: b * bq,
            q1: (b + 1) * bq,
            wsum: &wsum,
        };
        sums(&input, &mut acc);
        let at = scale_at(p, b, blocks);
        let mut sc = [0f32; NR];
        if w.pscale16.is_empty() {
            sc.copy_from_slice(&w.pscale[at..at + NR]);
        } else {
            for (s, &h) in sc.iter_mut().zip(&w.pscale16[at..at + NR]) {
                *s = f32::from_bits((h as u32) << 16);
            }
        }
        for ((f, &x), &s) in fsum.iter_mut().zip(&acc[0]).zip(&sc) {
            *f = (x as f32).mul_add(s, *f);
        }
    }
    let mut y = [0f32; NR];
    for (jj, v) in y.iter_mut().enumerate().take(nv) {
        let bv = bias.map_or(0.0, |b| b[j0 + jj]);
        *v = (fsum[jj] * rows[0] + bv).max(*lo).min(*hi);
    }
    o[j0 - col0..][..nv].copy_from_slice(&y[..nv]);
}

/// The AVX-512 VNNI products may run: the CPU has them and the process's SIMD level is not
/// capped below AVX-512 (`pteron_kernels_cpu::cpu::set_max_level`).
fn has_vnni() -> bool {
    pteron_kernels_cpu::cpu::int8_vnni()
}

/// Output rows `r0 .. r0 + rows` (`o` starts at row `r0`) with plain integer loops: the
/// reference the vector paths are tested against.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
fn scalar_rows(
    a: &[u8],
    lda: usize,
    r0: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    o: Out<'_>,
    ldc: usize,
) {
    let panels = 0..w.n.div_ceil(NR);
    tiled_rows(scalar_sums, a, lda, r0, rows, w, epi, o, ldc, panels)
}

/// Output rows `r0 .. r0 + rows` (`o` starts at row `r0`, column `16·panels.start`), columns
/// of `panels`, in tiles of `TR` rows × one panel whose sums come from `sums`. The caller
/// checked the operands (`qgemm`). The epilogue works on whole 16-channel arrays (parameters
/// padded past `n`), compiled for the CPU's vector width, so that it vectorizes: with short
/// sums (a 1×1 convolution over 16 channels) it is most of the work.
#[allow(clippy::too_many_arguments)]
fn tiled_rows(
    sums: TileSums,
    a: &[u8],
    lda: usize,
    r0: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    mut o: Out<'_>,
    ldc: usize,
    panels: core::ops::Range<usize>,
) {
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let (
        Epilogue::Requant {
            bias,
            scale,
            zp,
            qmin,
            qmax,
        },
        Out::I8(o),
        0,
    ) = (epi, &mut o, w.block)
    {
        let q = Requant16 {
            bias,
            scale,
            zp: *zp,
            qmin: *qmin,
            qmax: *qmax,
        };
        for t in (0..rows).step_by(TR) {
            for p in panels.clone() {
                requant_tile(
                    sums,
                    a,
                    lda,
                    r0,
                    t,
                    rows,
                    w,
                    &q,
                    o,
                    ldc,
                    p,
                    panels.start * NR,
                );
            }
        }
        return;
    }
    // The closure inlines into the ISA's function, or its loops keep the baseline's (a libm
    // call per rounding).
    crate::quant::isa::multiversion(
        #[inline(always)]
        || {
            for t in (0..rows).step_by(TR) {
                for p in panels.clone() {
                    tile(
                        sums,
                        a,
                        lda,
                        r0,
                        t,
                        rows,
                        w,
                        epi,
                        &mut o,
                        ldc,
                        p,
                        panels.start * NR,
                    );
                }
            }
        },
    )
}

/// The 16 values `at(jj)` of panel `p`'s channels, `pad` past `n`. (Loops, not
/// `array::from_fn`, whose helper need not inline into the vector-width function.)
#[inline(always)]
fn gather<T: Copy>(n: usize, p: usize, pad: T, at: impl Fn(usize) -> T) -> [T; NR] {
    let mut v = [pad; NR];
    for (jj, x) in v.iter_mut().enumerate().take(n.saturating_sub(p * NR)) {
        *x = at(p * NR + jj);
    }
    v
}

/// The parameters of `Epilogue::Requant`, taken apart once per product (aarch64's
/// `requant_tile`).
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
struct Requant16<'a> {
    bias: &'a [i32],
    scale: &'a [f32],
    zp: i32,
    qmin: i32,
    qmax: i32,
}

/// The `TR` activation rows (`kp` bytes each) of a tile starting at row `r`: `tr` of them,
/// then the last repeated (the kernels are given only the first `tr`).
#[inline(always)]
fn tile_rows(a: &[u8], lda: usize, r: usize, tr: usize, kp: usize) -> [&[u8]; TR] {
    let mut ar: [&[u8]; TR] = [&[]; TR];
    for (i, row) in ar.iter_mut().enumerate() {
        *row = &a[(r + i.min(tr - 1)) * lda..][..kp];
    }
    ar
}

/// `tile` for requantized int8 outputs of weights that are not blockwise, on aarch64: the
/// sums, then `requant16` per row. (The general `tile`, inlined into the row and panel loops,
/// spilled its 16-lane arrays and index arithmetic to the stack there: ~1,700 instructions a
/// tile for a 1×1 convolution over 16 channels, several times this path's.)
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn requant_tile(
    sums: TileSums,
    a: &[u8],
    lda: usize,
    r0: usize,
    t: usize,
    rows: usize,
    w: &QWeights,
    q: &Requant16<'_>,
    o: &mut [i8],
    ldc: usize,
    p: usize,
    col0: usize,
) {
    let kp = w.quads * 4;
    let tr = TR.min(rows - t);
    let j0 = p * NR;
    let nv = NR.min(w.n - j0);
    let ar = tile_rows(a, lda, r0 + t, tr, kp);
    // The panel's channels, zero past `n` (those outputs are not stored). Copies of the
    // constant length 16 where the panel is whole: inline, not calls to `memcpy`.
    #[inline(always)]
    fn panel16<T: Copy + Default>(v: &[T], j0: usize, nv: usize) -> [T; NR] {
        let mut out = [T::default(); NR];
        if nv == NR {
            out.copy_from_slice(&v[j0..j0 + NR]);
        } else {
            out[..nv].copy_from_slice(&v[j0..j0 + nv]);
        }
        out
    }
    let wsum = panel16(&w.colsum, j0, nv);
    let bv = panel16(q.bias, j0, nv);
    let sv = panel16(q.scale, j0, nv);
    let mut acc = [[0i32; NR]; TR];
    let input = SumsIn {
        a: &ar[..tr],
        w,
        p,
        q0: 0,
        q1: w.quads,
        wsum: &wsum,
    };
    sums(&input, &mut acc);
    for (i, s) in acc.iter().enumerate().take(tr) {
        let y = requant16(s, &bv, &sv, q.zp, q.qmin, q.qmax);
        let row = &mut o[(t + i) * ldc + j0 - col0..];
        if nv == NR {
            row[..NR].copy_from_slice(&y);
        } else {
            row[..nv].copy_from_slice(&y[..nv]);
        }
    }
}

/// One tile: rows `t .. t + TR` (of `r0 ..`), panel `p`; output columns start at `col0`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile(
    sums: TileSums,
    a: &[u8],
    lda: usize,
    r0: usize,
    t: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    o: &mut Out<'_>,
    ldc: usize,
    p: usize,
    col0: usize,
) {
    let blocks = if w.block == 0 { 1 } else { w.k / w.block };
    let bq = if w.block == 0 { w.quads } else { w.block / 4 };
    let kp = w.quads * 4;
    let tr = TR.min(rows - t);
    let nv = NR.min(w.n - p * NR);
    let ar = tile_rows(a, lda, r0 + t, tr, kp);
    let blockwise = matches!(epi, Epilogue::Dequant { .. }) && w.block != 0;
    let mut fsum = [[0f32; NR]; TR];
    if let Epilogue::Dequant { zps, scale, .. } = epi {
        if blockwise {
            // XNNPACK's start: the packed zero-point term times the row's zero point.
            let ks = if w.pkscaled().is_empty() {
                gather(w.n, p, 0.0, |j| w.ksum_scaled(scale, j))
            } else {
                gather(w.n, p, 0.0, |j| w.pkscaled()[j])
            };
            for i in 0..tr {
                let zf = (zps[r0 + t + i] + 128) as f32;
                for jj in 0..NR {
                    fsum[i][jj] = ks[jj] * zf;
                }
            }
        }
    }
    let mut isum = [[0i32; NR]; TR];
    for b in 0..blocks {
        let wsum = if w.block == 0 {
            gather(w.n, p, 0, |j| w.colsum[j])
        } else {
            gather(w.n, p, 0, |j| w.blocksum[j * blocks + b])
        };
        let mut acc = [[0i32; NR]; TR];
        let input = SumsIn {
            a: &ar[..tr],
            w,
            p,
            q0: b * bq,
            q1: (b + 1) * bq,
            wsum: &wsum,
        };
        sums(&input, &mut acc);
        match epi {
            Epilogue::Dequant { scale, .. } if blockwise => {
                // Per block: float(acc) · scale[j][b] added (the zero point is in the start).
                let sc = gather(w.n, p, 0.0, |j| scale[j * blocks + b]);
                for i in 0..tr {
                    for jj in 0..NR {
                        fsum[i][jj] = (acc[i][jj] as f32).mul_add(sc[jj], fsum[i][jj]);
                    }
                }
            }
            _ => {
                for (s, a) in isum.iter_mut().zip(&acc) {
                    for (s, a) in s.iter_mut().zip(a) {
                        *s += a;
                    }
                }
            }
        }
    }
    let at = |i: usize| (t + i) * ldc + p * NR - col0;
    match (epi, o) {
        (
            Epilogue::Requant {
                bias,
                scale,
                zp,
                qmin,
                qmax,
            },
            Out::I8(o),
        ) => {
            let bv = gather(w.n, p, 0, |j| bias[j]);
            let sv = gather(w.n, p, 0.0, |j| scale[j]);
            for (i, s) in isum.iter().enumerate().take(tr) {
                let q = requant16(s, &bv, &sv, *zp, *qmin, *qmax);
                o[at(i)..][..nv].copy_from_slice(&q[..nv]);
            }
        }
        (
            Epilogue::Dequant {
                rows: rp,
                zps,
                scale,
                bias,
                lo,
                hi,
            },
            Out::F32(o),
        ) => {
            let bv = gather(w.n, p, 0.0, |j| bias.map_or(0.0, |b| b[j]));
            let cs = gather(w.n, p, 0, |j| w.colsum[j]);
            let sv = gather(w.n, p, 0.0, |j| if blockwise { 0.0 } else { scale[j] });
            for i in 0..tr {
                let (s_row, zp) = (rp[r0 + t + i], zps[r0 + t + i]);
                let mut y = [0f32; NR];
                for jj in 0..NR {
                    let v = if blockwise {
                        // Scaled, then the bias added: two roundings, as XNNPACK's qb4w
                        // kernels (not one fused multiply-add).
                        fsum[i][jj] * s_row + bv[jj]
                    } else {
                        let corr = isum[i][jj] - (zp + 128) * cs[jj];
                        (corr as f32 * s_row).mul_add(sv[jj], bv[jj])
                    };
                    y[jj] = v.max(*lo).min(*hi);
                }
                o[at(i)..][..nv].copy_from_slice(&y[..nv]);
            }
        }
        _ => {}
    }
}
