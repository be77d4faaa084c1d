//! Integer matrix multiplication for quantized fully connected layers and convolutions:
//! `acc[m][n] = Σ_k a[m][k] · w[n][k]` with unsigned 8-bit activations (`x + 128`) and signed
//! 8-bit weights, accumulated in i32, then an epilogue: requantization to int8 (static
//! quantization), or scaling to float32 (dynamically quantized activations, per-channel or
//! blockwise weights).
//!
//! Weights are packed at init in panels of 16 output channels by groups of 4 inputs, the
//! layout of AVX-512 VNNI's `vpdpbusd` (16 lanes × 4 byte products per instruction). On CPUs
//! without it the same layout runs through plain integer loops (same results: the sums are
//! exact and the float epilogue does the same operations).

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;

/// Output channels per panel.
pub const NR: usize = 16;
/// Longest block whose zero-point correction `acc − zp·blocksum` the vector paths compute in
/// float (`fnmadd(zp, blocksum, float(acc))`): every term stays below 2^24 in magnitude
/// (|acc| ≤ 255·128·block), so the float result is the exact integer and the outputs equal
/// the integer formula's bit for bit, ExecuTorch's among them.
const EXACT_BLOCK: usize = 512;
/// Rows per tile.
const MR: usize = 8;

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
    /// Blockwise scales panel by panel, `[(p·blocks + b)·16 + jj]`, for the one-row path
    /// (set by `set_block_scales`; empty until): as bf16 bits in `pscale16` when every scale
    /// is a bf16 value (the 8da4w recipe's), else as f32 here. Half the bytes streamed per
    /// block; the block sums of the weights are computed on the fly, not read.
    pscale: Vec<f32>,
    pscale16: Vec<u16>,
    /// Block sums panel by panel like the scales, `[(p·blocks + b)·16 + jj]` (set with them,
    /// when every sum fits and blocks are short enough for exact float corrections; see
    /// `exact_blocks`): one 32-byte load per block and panel instead of 16 scattered reads
    /// (multi-row tiles) or a second `vpdpbusd` per quad that summed the weights (one row).
    pbsum: Vec<i16>,
    /// 4-bit weights (`new_int4`), two quads per 64 bytes: quads `2t`, `2t + 1` of panel `p`
    /// at `(p·pairs + t)·64`, byte `i` holding `w + 8` of byte `i` of quad `2t` (low nibble)
    /// and of quad `2t + 1` (high nibble; 8, a zero weight, past the last quad), where
    /// `pairs = ⌈quads / 2⌉`. The one-row path streams these: half the bytes per token, and
    /// one 64-byte load, two masks and a shift unpack two quads.
    nib: Vec<u8>,
}

impl QWeights {
    /// Packs the `n × k` matrix whose element (j, kk) is `at(j, kk)` (values in i8 range).
    pub fn new(
        n: usize,
        k: usize,
        block: usize,
        at: impl Fn(usize, usize) -> i8,
    ) -> Result<Self, KernelError> {
        if block != 0 && (block % 4 != 0 || k % block != 0) {
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
            data,
            colsum,
            blocksum,
            block,
            pscale: Vec::new(),
            pscale16: Vec::new(),
            pbsum: Vec::new(),
            nib: Vec::new(),
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
        let (panels, quads) = (w.n.div_ceil(NR), w.quads);
        let pairs = quads.div_ceil(2);
        let mut nib = vec![0u8; panels * pairs * 64];
        for p in 0..panels {
            for q in 0..quads {
                let src = &w.data[(p * quads + q) * 64..][..64];
                let dst = &mut nib[(p * pairs + q / 2) * 64..][..64];
                for (d, &v) in dst.iter_mut().zip(src) {
                    *d |= ((v + 8) as u8) << (4 * (q % 2));
                }
            }
            if quads % 2 == 1 {
                let dst = &mut nib[(p * pairs + quads / 2) * 64..][..64];
                for d in dst.iter_mut() {
                    *d |= 8 << 4;
                }
            }
        }
        w.nib = nib;
        Ok(w)
    }

    /// Keeps blockwise scales (`[j·blocks + b]`, as the epilogue takes them) panel by panel
    /// for the one-row path.
    pub fn set_block_scales(&mut self, scale: &[f32]) -> Result<(), KernelError> {
        if self.block == 0 {
            return Ok(());
        }
        let blocks = self.k / self.block;
        if scale.len() < self.n * blocks {
            return Err(KernelError::invalid("block scales too short"));
        }
        let mut ps = vec![0f32; self.n.div_ceil(NR) * blocks * NR];
        let mut bs = vec![0i16; ps.len()];
        let mut fits = self.block <= EXACT_BLOCK;
        for j in 0..self.n {
            for b in 0..blocks {
                let at = ((j / NR) * blocks + b) * NR + j % NR;
                ps[at] = scale[j * blocks + b];
                let v = self.blocksum[j * blocks + b];
                fits &= i16::try_from(v).is_ok();
                bs[at] = v as i16;
            }
        }
        self.pbsum = if fits { bs } else { Vec::new() };
        if ps.iter().all(|v| v.to_bits() & 0xFFFF == 0) {
            self.pscale16 = ps.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
            self.pscale = Vec::new();
        } else {
            self.pscale = ps;
            self.pscale16 = Vec::new();
        }
        Ok(())
    }

    /// Whether the one-row path has what it needs (blockwise weights: their scales and block
    /// sums panel by panel).
    fn one_row_ready(&self) -> bool {
        if self.block == 0 {
            return true;
        }
        let len = self.n.div_ceil(NR) * (self.k / self.block) * NR;
        len > 0
            && (self.pscale.len() == len || self.pscale16.len() == len)
            && self.pbsum.len() == len
    }

    pub fn bytes(&self) -> usize {
        self.data.len()
            + self.nib.len()
            + (self.colsum.len() + self.blocksum.len() + self.pscale.len()) * 4
            + (self.pscale16.len() + self.pbsum.len()) * 2
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
    /// (blockwise: per block, `Σ_b (acc_b − (zp_row + 128)·blocksum[j][b]) · scale[j][b]`,
    /// then `· s_row + bias[j]`), clamped. `rows[m]`/`zps[m]`: each row's scale and zero
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

fn round_ne(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// Requantization of one sum (XNNPACK's fp32 path: scale, clamp above, round to nearest
/// even, add the zero point, clamp below).
#[inline(always)]
pub fn requant(acc: i32, scale: f32, zp: i32, qmin: i32, qmax: i32) -> i32 {
    let f = (acc as f32 * scale).min((qmax - zp) as f32);
    (round_ne(f) + zp).max(qmin).min(qmax)
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
    // One row (decoding): a product over the output panels, in parallel, streaming each
    // weight once (4-bit weights as nibbles).
    let one_row = vnni && m == 1 && matches!(epi, Epilogue::Dequant { .. }) && w.one_row_ready();
    let out = match out {
        Out::F32(o) if one_row => {
            gemv(par, a, w, epi, &mut o[..w.n]);
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
            scalar_rows(a, lda, r0, rows, w, epi, o, ldc)
        }
    };
    // Chunks of one tile each (`for_chunks_mut` groups them into tasks): every tile streams
    // all the weights anyway, and 85 prompt rows in 32-row chunks were 3 chunks, 64 rows on
    // one thread and 21 on the other.
    let rows_per_task = MR;
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
/// the caller checked the operands (`qgemm`) and that the CPU has VNNI.
fn gemv(par: &dyn Parallel, a: &[u8], w: &QWeights, epi: &Epilogue<'_>, out: &mut [f32]) {
    for_chunks_mut(par, out, GEMV_PANELS * NR, 1, &|t, c| {
        #[cfg(target_arch = "x86_64")]
        // Safety: `qgemm` checked AVX-512 F/BW/VL/VNNI (`has_vnni`), that `a` holds one row of
        // 4·quads bytes and the epilogue's lengths; `c` is columns t·GEMV_PANELS·NR.. of the
        // output.
        unsafe {
            x86::gemv(a, w, epi, t * GEMV_PANELS, c)
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (a, w, epi, t, c);
    });
}

/// The AVX-512 VNNI products may run: the CPU has them and the process's SIMD level is not
/// capped below AVX-512 (`pteron_kernels_cpu::cpu::set_max_level`).
fn has_vnni() -> bool {
    pteron_kernels_cpu::cpu::int8_vnni()
}

/// Output rows `r0 .. r0 + rows` (`o` starts at row `r0`) with plain integer loops.
#[allow(clippy::too_many_arguments)]
fn scalar_rows(
    a: &[u8],
    lda: usize,
    r0: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    mut o: Out<'_>,
    ldc: usize,
) {
    let blocks = if w.block == 0 { 1 } else { w.k / w.block };
    let bq = if w.block == 0 { w.quads } else { w.block / 4 };
    for r in 0..rows {
        let ar = &a[(r0 + r) * lda..];
        for j in 0..w.n {
            let (p, jj) = (j / NR, j % NR);
            let mut fsum = 0.0f32;
            let mut isum = 0i32;
            for b in 0..blocks {
                let mut acc = 0i32;
                for q in b * bq..(b + 1) * bq {
                    let wp = &w.data[((p * w.quads + q) * NR + jj) * 4..][..4];
                    for i in 0..4 {
                        acc += ar[q * 4 + i] as i32 * wp[i] as i32;
                    }
                }
                match epi {
                    Epilogue::Dequant { zps, scale, .. } if w.block != 0 => {
                        let zp = zps[r0 + r] + 128;
                        let corr = acc - zp * w.blocksum[j * blocks + b];
                        fsum = (corr as f32).mul_add(scale[j * blocks + b], fsum);
                    }
                    _ => isum += acc,
                }
            }
            let idx = r * ldc + j;
            match (epi, &mut o) {
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
                    o[idx] = requant(isum + bias[j], scale[j], *zp, *qmin, *qmax) as i8;
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
                    let (s_row, zp) = (rp[r0 + r], zps[r0 + r]);
                    let y = if w.block == 0 {
                        let corr = isum - (zp + 128) * w.colsum[j];
                        (corr as f32 * s_row).mul_add(scale[j], bias.map_or(0.0, |b| b[j]))
                    } else {
                        fsum.mul_add(s_row, bias.map_or(0.0, |b| b[j]))
                    };
                    o[idx] = y.max(*lo).min(*hi);
                }
                _ => {}
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Epilogue, Out, QWeights, MR, NR};
    use core::arch::x86_64::*;

    /// The 64 weight bytes of panel `p`, quad `q` (int8 weights).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn wquad(w: &QWeights, p: usize, q: usize) -> __m512i {
        let i = p * w.quads + q;
        // Safety (caller): quad q < quads of panel p lies inside `data` (64 bytes).
        unsafe { _mm512_loadu_si512(w.data.as_ptr().add(i * NR * 4) as *const _) }
    }

    /// The broadcast activation bytes `a[4q .. 4q + 4]`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn aquad(a: *const u8, q: usize) -> __m512i {
        // Safety (caller): 4·q + 4 ≤ the bytes of `a`.
        unsafe { _mm512_set1_epi32(core::ptr::read_unaligned(a.add(q * 4) as *const i32)) }
    }

    /// Bytes ahead of the weight being read that the one-row path prefetches: the hardware
    /// prefetcher alone leaves the weight stream latency-bound (SmolLM2 8da4w decode on one
    /// thread ~70 -> ~130 tok/s).
    const PREFETCH: usize = 4096;

    /// Hints the cache line at `p` into L1.
    #[inline(always)]
    fn prefetch<T>(p: *const T) {
        // Safety: a prefetch never faults and reads nothing architecturally; `p` may point
        // past the end of the weights (it is only a hint).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
    }

    /// The 16 panel-major block scales and block sums (as floats) at `at`.
    ///
    /// # Safety
    /// AVX-512 F/BW; `at + 16` ≤ the length of the scales and sums kept (`one_row_ready`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn block_params(w: &QWeights, at: usize) -> (__m512, __m512) {
        // Safety (loads): the caller's.
        let scale = if w.pscale16.is_empty() {
            unsafe { _mm512_loadu_ps(w.pscale.as_ptr().add(at)) }
        } else {
            let h = unsafe { _mm256_loadu_si256(w.pscale16.as_ptr().add(at) as *const _) };
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        };
        let bs = unsafe { _mm256_loadu_si256(w.pbsum.as_ptr().add(at) as *const _) };
        (scale, _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(bs)))
    }

    /// Sum of `a[4q ..]` · panel `p` over quads `q0 .. q1` (two independent chains).
    /// 4-bit weights come a pair of quads per 64-byte load (see `QWeights::nib`).
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; 4·q1 ≤ the bytes of `a`; q1 ≤ quads; panel p exists.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn dot(a: *const u8, w: &QWeights, p: usize, q0: usize, q1: usize) -> __m512i {
        let (mut x, mut y) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        // Adds quad q's products into one chain.
        let step = |acc: &mut __m512i, q: usize, v: __m512i| {
            // Safety (activation loads): 4·q + 4 ≤ 4·q1 bytes of `a`.
            *acc = _mm512_dpbusd_epi32(*acc, unsafe { aquad(a, q) }, v);
        };
        let mut q = q0;
        if w.nib.is_empty() {
            // Safety (weight loads): quads < quads of panel p lie inside `data`.
            while q + 2 <= q1 {
                prefetch(
                    w.data
                        .as_ptr()
                        .wrapping_add((p * w.quads + q) * NR * 4 + PREFETCH),
                );
                step(&mut x, q, unsafe { wquad(w, p, q) });
                step(&mut y, q + 1, unsafe { wquad(w, p, q + 1) });
                q += 2;
            }
            if q < q1 {
                step(&mut x, q, unsafe { wquad(w, p, q) });
            }
        } else {
            let pairs = w.quads.div_ceil(2);
            let base = w.nib[p * pairs * 64..].as_ptr();
            let (m, eight) = (_mm512_set1_epi8(0x0F), _mm512_set1_epi8(8));
            // Safety (all loads): pair q/2 < pairs of panel p lies inside `nib` (64 bytes).
            let pair = |q: usize| unsafe { _mm512_loadu_si512(base.add(q / 2 * 64) as *const _) };
            let lo = |v: __m512i| _mm512_sub_epi8(_mm512_and_si512(v, m), eight);
            let hi =
                |v: __m512i| _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(v), m), eight);
            if q % 2 == 1 && q < q1 {
                step(&mut x, q, hi(pair(q)));
                q += 1;
            }
            while q + 2 <= q1 {
                prefetch(base.wrapping_add(q / 2 * 64 + PREFETCH));
                let v = pair(q);
                step(&mut x, q, lo(v));
                step(&mut y, q + 1, hi(v));
                q += 2;
            }
            if q < q1 {
                step(&mut x, q, lo(pair(q)));
            }
        }
        _mm512_add_epi32(x, y)
    }

    /// Columns of panels `p0 ..` into `o` (whole panels; the last may be partial) for one
    /// row with a `Dequant` epilogue, the same arithmetic as `rows`.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI; `a` holds 4·quads bytes; the epilogue's slices are as `qgemm`
    /// checks them; blockwise weights have `pscale`; `o` lies inside columns `p0·16 .. n`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub unsafe fn gemv(a: &[u8], w: &QWeights, epi: &Epilogue<'_>, p0: usize, o: &mut [f32]) {
        let Epilogue::Dequant {
            rows,
            zps,
            scale,
            bias,
            lo,
            hi,
        } = epi
        else {
            return;
        };
        let (s_row, zp) = (_mm512_set1_ps(rows[0]), zps[0] + 128);
        let zpv = _mm512_set1_epi32(zp);
        let (lov, hiv) = (_mm512_set1_ps(*lo), _mm512_set1_ps(*hi));
        let blocks = if w.block == 0 { 1 } else { w.k / w.block };
        let bq = if w.block == 0 { w.quads } else { w.block / 4 };
        let ap = a.as_ptr();
        for (i, oc) in o.chunks_mut(NR).enumerate() {
            let p = p0 + i;
            let c0 = p * NR;
            let nv = oc.len();
            let mask: __mmask16 = if nv == NR { !0 } else { (1u16 << nv) - 1 };
            let bv = match bias {
                Some(b) => _mm512_maskz_loadu_ps(mask, b[c0..].as_ptr()),
                None => _mm512_setzero_ps(),
            };
            let y = if w.block == 0 {
                // Safety: quads 0 .. quads of panel p (p < panels since `o` lies before n).
                let acc = unsafe { dot(ap, w, p, 0, w.quads) };
                let cs = _mm512_maskz_loadu_epi32(mask, w.colsum[c0..].as_ptr());
                let corr = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zpv, cs));
                let sv = _mm512_maskz_loadu_ps(mask, scale[c0..].as_ptr());
                _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(corr), s_row), sv, bv)
            } else {
                let mut facc = _mm512_setzero_ps();
                let zf = _mm512_set1_ps(zp as f32);
                for b in 0..blocks {
                    // Safety: block b's quads lie in panel p; the scales and sums hold
                    // panels·blocks·16 values (`one_row_ready`).
                    unsafe {
                        let acc = dot(ap, w, p, b * bq, (b + 1) * bq);
                        let (scv, bsv) = block_params(w, (p * blocks + b) * NR);
                        // acc − zp·blocksum, exact in float (`EXACT_BLOCK`).
                        let corr = _mm512_fnmadd_ps(zf, bsv, _mm512_cvtepi32_ps(acc));
                        facc = _mm512_fmadd_ps(corr, scv, facc);
                    }
                }
                _mm512_fmadd_ps(facc, s_row, bv)
            };
            let y = _mm512_min_ps(_mm512_max_ps(y, lov), hiv);
            // Safety: `nv` floats of `oc`.
            unsafe { _mm512_mask_storeu_ps(oc.as_mut_ptr(), mask, y) };
        }
    }

    /// Output rows `r0 .. r0 + rows` with `vpdpbusd`: tiles of MR rows by three panels (each
    /// broadcast activation feeds three products; one panel at a time the loads outnumbered
    /// them), two or one for the last panels, one for blockwise weights.
    ///
    /// # Safety
    /// AVX-512 F/BW/VL/VNNI must be available; `a` holds rows `r0 .. r0 + rows` of `lda`
    /// bytes (at least `4·w.quads` each) and `o` holds `rows` rows of `ldc` (at least `w.n`).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn rows(
        a: &[u8],
        lda: usize,
        r0: usize,
        rows: usize,
        w: &QWeights,
        epi: &Epilogue<'_>,
        mut o: Out<'_>,
        ldc: usize,
    ) {
        let panels = w.n.div_ceil(NR);
        let mut t = 0;
        while t < rows {
            let mr = MR.min(rows - t);
            // Row pointers (rows past `mr` repeat the last one; their results are dropped).
            let mut ap = [a.as_ptr(); MR];
            for (i, p) in ap.iter_mut().enumerate() {
                // Safety: row r0 + t + min(i, mr − 1) < r0 + rows lies in `a`.
                *p = unsafe { a.as_ptr().add((r0 + t + i.min(mr - 1)) * lda) };
            }
            let mut p = 0;
            while p < panels {
                let tile = Tile {
                    ap: &ap,
                    r: r0 + t,
                    t,
                    mr,
                    p,
                };
                // Safety: panels p (and p + 1) exist; the caller's operands.
                unsafe {
                    if w.block == 0 && p + 2 < panels {
                        group::<3>(&tile, w, epi, &mut o, ldc);
                        p += 3;
                    } else if w.block == 0 && p + 1 < panels {
                        group::<2>(&tile, w, epi, &mut o, ldc);
                        p += 2;
                    } else {
                        group::<1>(&tile, w, epi, &mut o, ldc);
                        p += 1;
                    }
                }
            }
            t += MR;
        }
    }

    /// Where a tile is: its row pointers, first row (`r` in the operands, `t` in `o`), rows,
    /// and first panel.
    struct Tile<'a> {
        ap: &'a [*const u8; MR],
        r: usize,
        t: usize,
        mr: usize,
        p: usize,
    }

    /// MR rows by panels `p .. p + NP` (NP > 1 only without blocks).
    ///
    /// # Safety
    /// As [`rows`]; panels `tile.p .. tile.p + NP` exist.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    #[inline]
    unsafe fn group<const NP: usize>(
        tile: &Tile<'_>,
        w: &QWeights,
        epi: &Epilogue<'_>,
        o: &mut Out<'_>,
        ldc: usize,
    ) {
        let Tile { ap, r, t, mr, p } = *tile;
        let blocks = if w.block == 0 { 1 } else { w.k / w.block };
        let bq = if w.block == 0 { w.quads } else { w.block / 4 };
        let wp = w.data.as_ptr();
        // Blockwise scales and sums kept panel by panel (`set_block_scales`).
        let panel_major = w.block != 0 && w.one_row_ready();
        // Each row's zero point + 128 as a float (rows past `mr` repeat the last).
        let mut zf_rows = [0f32; MR];
        if let Epilogue::Dequant { zps, .. } = epi {
            if panel_major {
                for (i, z) in zf_rows.iter_mut().enumerate() {
                    *z = (zps[r + i.min(mr - 1)] + 128) as f32;
                }
            }
        }
        let mut facc = [[_mm512_setzero_ps(); NP]; MR];
        let mut iacc = [[_mm512_setzero_si512(); NP]; MR];
        for b in 0..blocks {
            let mut acc = [[_mm512_setzero_si512(); NP]; MR];
            for q in b * bq..(b + 1) * bq {
                let mut wv = [_mm512_setzero_si512(); NP];
                for (j, v) in wv.iter_mut().enumerate() {
                    // Safety: quad q < quads of panel p + j lies inside `data`.
                    *v = unsafe {
                        _mm512_loadu_si512(wp.add(((p + j) * w.quads + q) * NR * 4) as *const _)
                    };
                }
                for i in 0..MR {
                    // Safety: 4 bytes at 4q < 4·quads ≤ lda of a row of `a`.
                    let av = unsafe {
                        _mm512_set1_epi32(core::ptr::read_unaligned(ap[i].add(q * 4) as *const i32))
                    };
                    for j in 0..NP {
                        acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, wv[j]);
                    }
                }
            }
            match epi {
                Epilogue::Dequant { .. } if panel_major => {
                    // Per block: (acc − (zp + 128)·blocksum) · scale[j][b] (NP is 1 here),
                    // scales and sums one vector load each; the correction in float is exact
                    // (`EXACT_BLOCK`).
                    // Safety: `one_row_ready`: panels·blocks·16 scales and sums.
                    let (scv, bsv) = unsafe { block_params(w, (p * blocks + b) * NR) };
                    for i in 0..MR {
                        let zf = _mm512_set1_ps(zf_rows[i]);
                        let corr = _mm512_fnmadd_ps(zf, bsv, _mm512_cvtepi32_ps(acc[i][0]));
                        facc[i][0] = _mm512_fmadd_ps(corr, scv, facc[i][0]);
                    }
                }
                Epilogue::Dequant { zps, scale, .. } if w.block != 0 => {
                    // Per block: (acc − (zp + 128)·blocksum) · scale[j][b] (NP is 1 here).
                    let nv = NR.min(w.n - p * NR);
                    let mut bs = [0i32; NR];
                    let mut sc = [0f32; NR];
                    for jj in 0..nv {
                        let c = p * NR + jj;
                        bs[jj] = w.blocksum[c * blocks + b];
                        sc[jj] = scale[c * blocks + b];
                    }
                    let bsv = _mm512_loadu_si512(bs.as_ptr() as *const _);
                    let scv = _mm512_loadu_ps(sc.as_ptr());
                    for i in 0..mr {
                        let zp = _mm512_set1_epi32(zps[r + i] + 128);
                        let corr = _mm512_sub_epi32(acc[i][0], _mm512_mullo_epi32(zp, bsv));
                        facc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(corr), scv, facc[i][0]);
                    }
                }
                _ => {
                    for i in 0..MR {
                        for j in 0..NP {
                            iacc[i][j] = _mm512_add_epi32(iacc[i][j], acc[i][j]);
                        }
                    }
                }
            }
        }
        for j in 0..NP {
            let c0 = (p + j) * NR;
            let nv = NR.min(w.n - c0);
            let mask: __mmask16 = if nv == NR { !0 } else { (1u16 << nv) - 1 };
            match (epi, &mut *o) {
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
                    let bv = _mm512_maskz_loadu_epi32(mask, bias[c0..].as_ptr());
                    let sv = _mm512_maskz_loadu_ps(mask, scale[c0..].as_ptr());
                    let maxlz = _mm512_set1_ps((*qmax - *zp) as f32);
                    let zpv = _mm512_set1_epi32(*zp);
                    let minv = _mm512_set1_epi32(*qmin);
                    for i in 0..mr {
                        let acc = _mm512_add_epi32(iacc[i][j], bv);
                        let f = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), sv), maxlz);
                        // Round to nearest even (the default MXCSR mode).
                        let q =
                            _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(f), zpv), minv);
                        let bytes = _mm512_cvtsepi32_epi8(q);
                        let dst = o[(t + i) * ldc + c0..].as_mut_ptr();
                        // Safety: `nv` bytes of row t + i from column c0 lie inside `o`.
                        unsafe { _mm_mask_storeu_epi8(dst, mask, bytes) };
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
                    let bv = match bias {
                        Some(b) => _mm512_maskz_loadu_ps(mask, b[c0..].as_ptr()),
                        None => _mm512_setzero_ps(),
                    };
                    let (lov, hiv) = (_mm512_set1_ps(*lo), _mm512_set1_ps(*hi));
                    for i in 0..mr {
                        let (s_row, zp) = (rp[r + i], zps[r + i]);
                        let y = if w.block == 0 {
                            let cs = _mm512_maskz_loadu_epi32(mask, w.colsum[c0..].as_ptr());
                            let corr = _mm512_sub_epi32(
                                iacc[i][j],
                                _mm512_mullo_epi32(_mm512_set1_epi32(zp + 128), cs),
                            );
                            let sv = _mm512_maskz_loadu_ps(mask, scale[c0..].as_ptr());
                            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(corr), _mm512_set1_ps(s_row));
                            _mm512_fmadd_ps(f, sv, bv)
                        } else {
                            _mm512_fmadd_ps(facc[i][j], _mm512_set1_ps(s_row), bv)
                        };
                        let y = _mm512_min_ps(_mm512_max_ps(y, lov), hiv);
                        let dst = o[(t + i) * ldc + c0..].as_mut_ptr();
                        // Safety: `nv` floats of row t + i from column c0 lie inside `o`.
                        unsafe { _mm512_mask_storeu_ps(dst, mask, y) };
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator.
    fn rng(seed: &mut u64) -> u32 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        (*seed >> 16) as u32
    }

    /// The VNNI rows match the plain integer rows bit for bit, for every epilogue, odd sizes.
    #[test]
    fn vnni_matches_scalar() {
        if !has_vnni() {
            return;
        }
        let mut seed = 0x1234_5678_9abc_def0u64;
        for &(m, n, k, block) in &[
            (1, 1, 1, 0),
            (3, 17, 13, 0),
            (9, 33, 64, 32),
            (17, 40, 96, 0),
            (5, 16, 128, 64),
        ] {
            let w = QWeights::new(n, k, block, |j, kk| ((j * 31 + kk * 7) % 255) as i8).unwrap();
            let kp = w.quads * 4;
            let a: Vec<u8> = (0..m * kp).map(|_| rng(&mut seed) as u8).collect();
            let blocks = if block == 0 { 1 } else { k / block };
            let bias: Vec<i32> = (0..n).map(|j| j as i32 * 37 - 500).collect();
            let scale: Vec<f32> = (0..n * blocks).map(|j| 1e-3 * (1 + j % 7) as f32).collect();
            let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
            let rows: Vec<f32> = (0..m).map(|r| 0.01 * (r + 1) as f32).collect();
            let zps: Vec<i32> = (0..m).map(|r| r as i32 * 9 - 20).collect();
            let epis = [
                Epilogue::Requant {
                    bias: &bias,
                    scale: &scale,
                    zp: -3,
                    qmin: -100,
                    qmax: 120,
                },
                Epilogue::Dequant {
                    rows: &rows,
                    zps: &zps,
                    scale: &scale,
                    bias: Some(&fb),
                    lo: -50.0,
                    hi: 50.0,
                },
            ];
            for (e, epi) in epis.iter().enumerate() {
                if e == 0 && block != 0 {
                    continue;
                }
                if e == 0 {
                    let (mut x1, mut x2) = (vec![0i8; m * n], vec![0i8; m * n]);
                    scalar_rows(&a, kp, 0, m, &w, epi, Out::I8(&mut x1), n);
                    // Safety: has_vnni() above; operand sizes as `qgemm` checks them.
                    unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::I8(&mut x2), n) };
                    assert_eq!(x1, x2, "m {m} n {n} k {k} block {block}");
                } else {
                    let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
                    scalar_rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f1), n);
                    // Safety: as above.
                    unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f2), n) };
                    assert_eq!(f1, f2, "m {m} n {n} k {k} block {block}");
                }
            }
            if block != 0 {
                // With the scales and block sums kept panel by panel (vector loads, the
                // zero-point correction in float): still the integer formula bit for bit.
                let mut w = w;
                w.set_block_scales(&scale).unwrap();
                assert!(w.one_row_ready());
                let epi = &epis[1];
                let (mut f1, mut f2) = (vec![0f32; m * n], vec![0f32; m * n]);
                scalar_rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f1), n);
                // Safety: as above.
                unsafe { x86::rows(&a, kp, 0, m, &w, epi, Out::F32(&mut f2), n) };
                assert_eq!(f1, f2, "panel-major: m {m} n {n} k {k} block {block}");
            }
        }
    }

    /// Blocks too long for an exact float correction keep the integer one (no panel-major
    /// sums, so no one-row path) and still give the scalar results.
    #[test]
    fn long_blocks_keep_integer_corrections() {
        let (n, k, block) = (20, 2 * (EXACT_BLOCK + 4), EXACT_BLOCK + 4);
        let mut w = QWeights::new(n, k, block, |j, kk| ((j * 13 + kk * 5) % 255) as i8).unwrap();
        let scale: Vec<f32> = (0..n * 2).map(|j| 1e-3 * (1 + j % 5) as f32).collect();
        w.set_block_scales(&scale).unwrap();
        assert!(!w.one_row_ready());
        let a: Vec<u8> = (0..k).map(|i| (i * 29 % 256) as u8).collect();
        let epi = Epilogue::Dequant {
            rows: &[0.03],
            zps: &[5],
            scale: &scale,
            bias: None,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
        };
        let (mut f1, mut f2) = (vec![0f32; n], vec![0f32; n]);
        scalar_rows(&a, k, 0, 1, &w, &epi, Out::F32(&mut f1), n);
        qgemm(&Split, &a, k, 1, &w, &epi, Out::F32(&mut f2), n).unwrap();
        assert_eq!(f1, f2);
    }

    /// Three "threads" run one after another: exercises the task split.
    struct Split;
    impl Parallel for Split {
        fn num_threads(&self) -> usize {
            3
        }
        fn parallel_for(&self, n: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
            for t in 0..n {
                f(t..t + 1);
            }
        }
    }

    /// The one-row path (panels in parallel, 4-bit weights from nibbles) gives the plain
    /// integer rows' results bit for bit.
    #[test]
    fn one_row_matches_scalar() {
        if !has_vnni() {
            return;
        }
        let mut seed = 0x0bad_cafe_f00d_1234u64;
        for &(n, k, block, int4) in &[
            (1, 4, 0, false),
            (17, 13, 0, false),
            (200, 64, 32, true),
            (100, 96, 0, true),
            (576, 576, 32, true),
            (33, 128, 64, false),
            // Odd quads per block and in all: pairs of 4-bit quads cut at either end.
            (40, 36, 12, true),
            (20, 20, 0, true),
        ] {
            let at = |j: usize, kk: usize| {
                if int4 {
                    ((j * 5 + kk * 3) % 16) as i8 - 8
                } else {
                    ((j * 31 + kk * 7) % 255) as i8
                }
            };
            let mut w = if int4 {
                QWeights::new_int4(n, k, block, at).unwrap()
            } else {
                QWeights::new(n, k, block, at).unwrap()
            };
            let kp = w.quads * 4;
            let a: Vec<u8> = (0..kp).map(|_| rng(&mut seed) as u8).collect();
            let blocks = if block == 0 { 1 } else { k / block };
            // f32 scales, and bf16 values (kept as bf16 by `set_block_scales`).
            for bf16 in [false, true] {
                let scale: Vec<f32> = (0..n * blocks)
                    .map(|j| 1e-3 * (1 + j % 7) as f32)
                    .map(|v| {
                        if bf16 {
                            f32::from_bits(v.to_bits() & 0xFFFF_0000)
                        } else {
                            v
                        }
                    })
                    .collect();
                w.set_block_scales(&scale).unwrap();
                assert_eq!(w.pscale16.is_empty(), !bf16 || block == 0);
                let fb: Vec<f32> = (0..n).map(|j| j as f32 * 0.25).collect();
                for bias in [Some(&fb[..]), None] {
                    let epi = Epilogue::Dequant {
                        rows: &[0.02],
                        zps: &[-7],
                        scale: &scale,
                        bias,
                        lo: -50.0,
                        hi: 50.0,
                    };
                    let (mut f1, mut f2) = (vec![0f32; n], vec![0f32; n]);
                    scalar_rows(&a, kp, 0, 1, &w, &epi, Out::F32(&mut f1), n);
                    qgemm(&Split, &a, kp, 1, &w, &epi, Out::F32(&mut f2), n).unwrap();
                    assert_eq!(f1, f2, "n {n} k {k} block {block} int4 {int4} bf16 {bf16}");
                }
            }
        }
    }
}
