//! The AVX-512 VNNI int8 products: tiles of 8 rows × 3 panels of 16 channels, one row as
//! a matrix-vector product over 4-bit or 8-bit weights.

use super::{pair_off, scale_at, Epilogue, Out, QWeights, MR, NR};
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

/// Bytes ahead of the weight being read that the one-row paths (here and AVX2's) prefetch:
/// the hardware prefetcher alone leaves the weight stream latency-bound (SmolLM2 8da4w
/// decode on one thread ~70 -> ~130 tok/s).
pub(super) const PREFETCH: usize = 8192;
/// Block scales ahead of the one being read that the one-row paths prefetch (1 KiB of bf16
/// scales: the scale stream runs at an eighth of the nibbles' rate).
pub(super) const SCALE_AHEAD: usize = 512;
/// Packed zero-point terms ahead (outputs) that the one-row paths prefetch: four groups of
/// panels.
pub(super) const STARTS_AHEAD: usize = 256;

/// Hints the cache line at `p` into L1.
#[inline(always)]
pub(super) fn prefetch<T>(p: *const T) {
    // Safety: a prefetch never faults and reads nothing architecturally; `p` may point
    // past the end of the weights (it is only a hint).
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p as *const i8) }
}

/// Hints the cache line at `p` into L2.
#[inline(always)]
fn l2_prefetch<T>(p: *const T) {
    // Safety: as `prefetch`'s.
    unsafe { _mm_prefetch::<_MM_HINT_T1>(p as *const i8) }
}

/// The lanes of a panel of `len` ≤ 16 outputs.
#[inline(always)]
fn lanes(len: usize) -> __mmask16 {
    if len >= NR {
        !0
    } else {
        (1u16 << len) - 1
    }
}

/// The 16 panel-major block scales at `at`.
///
/// # Safety
/// AVX-512 F/BW; `at + 16` ≤ the length of the scales kept (`one_row_ready`).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn block_scales(w: &QWeights, at: usize) -> __m512 {
    // Safety (loads): the caller's.
    if w.pscale16.is_empty() {
        unsafe { _mm512_loadu_ps(w.pscale.as_ptr().add(at)) }
    } else {
        let h = unsafe { _mm256_loadu_si256(w.pscale16.as_ptr().add(at) as *const _) };
        _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
    }
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
        let base = w.nib[w.nib_at(p, 0)..].as_ptr();
        // A nibble in a byte's high half is 16·w as a signed byte: the high quad needs a
        // mask, the low one a shift into place first (bits shifted across bytes are masked).
        let m = _mm512_set1_epi8(0xF0u8 as i8);
        // Safety (all loads): pair q/2 < pairs of panel p lies inside `nib` (64 bytes).
        let pair = |q: usize| unsafe { _mm512_loadu_si512(base.add(pair_off(q / 2)) as *const _) };
        let lo = |v: __m512i| _mm512_and_si512(_mm512_slli_epi16::<4>(v), m);
        let hi = |v: __m512i| _mm512_and_si512(v, m);
        if q % 2 == 1 && q < q1 {
            step(&mut x, q, hi(pair(q)));
            q += 1;
        }
        while q + 2 <= q1 {
            prefetch(base.wrapping_add(pair_off(q / 2) + PREFETCH));
            let v = pair(q);
            step(&mut x, q, lo(v));
            step(&mut y, q + 1, hi(v));
            q += 2;
        }
        if q < q1 {
            step(&mut x, q, lo(pair(q)));
        }
        // Sums of 16·w: exact, and a multiple of 16.
        return _mm512_srai_epi32::<4>(_mm512_add_epi32(x, y));
    }
    _mm512_add_epi32(x, y)
}

/// Panels the one-row blockwise product computes together: their activation broadcasts are
/// shared, and their weights (each panel its own run of pages) are read as this many
/// streams side by side.
const STREAMS: usize = 4;

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
    let ap = a.as_ptr();
    // The bias of a panel's lanes.
    let bias_at = |c0: usize, mask: __mmask16| match bias {
        Some(b) => _mm512_maskz_loadu_ps(mask, b[c0..].as_ptr()),
        None => _mm512_setzero_ps(),
    };
    // Clamps `y` into the `oc.len()` outputs of `oc`.
    let clamp_store = |oc: &mut [f32], mask: __mmask16, y: __m512| {
        let y = _mm512_min_ps(_mm512_max_ps(y, lov), hiv);
        // Safety: `mask` covers the `oc.len()` floats of `oc`.
        unsafe { _mm512_mask_storeu_ps(oc.as_mut_ptr(), mask, y) };
    };
    // Panel p0 + i's results `y` (row scale applied), biased, clamped, stored.
    let store = |i: usize, oc: &mut [f32], y: __m512| {
        let mask = lanes(oc.len());
        clamp_store(oc, mask, _mm512_add_ps(y, bias_at((p0 + i) * NR, mask)));
    };
    if w.block == 0 {
        for (i, oc) in o.chunks_mut(NR).enumerate() {
            let p = p0 + i;
            let c0 = p * NR;
            let mask = lanes(oc.len());
            // Safety: quads 0 .. quads of panel p (p < panels since `o` lies before n).
            let acc = unsafe { dot(ap, w, p, 0, w.quads) };
            let cs = _mm512_maskz_loadu_epi32(mask, w.colsum[c0..].as_ptr());
            let corr = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zpv, cs));
            let sv = _mm512_maskz_loadu_ps(mask, scale[c0..].as_ptr());
            // The bias inside the fused multiply-add (one rounding).
            let f = _mm512_mul_ps(_mm512_cvtepi32_ps(corr), s_row);
            clamp_store(oc, mask, _mm512_fmadd_ps(f, sv, bias_at(c0, mask)));
        }
        return;
    }
    let zf = _mm512_set1_ps(zp as f32);
    let mut i = 0;
    for g in o.chunks_mut(NR * STREAMS) {
        if g.len() == NR * STREAMS {
            // Safety: panels p0 + i .. + STREAMS exist (`o` lies before n).
            let f = unsafe { panel_sums::<STREAMS>(ap, w, p0 + i, zf) };
            for (s, oc) in g.chunks_mut(NR).enumerate() {
                store(i + s, oc, _mm512_mul_ps(f[s], s_row));
            }
            i += STREAMS;
        } else {
            for oc in g.chunks_mut(NR) {
                // Safety: panel p0 + i exists.
                let f = unsafe { panel_sums::<1>(ap, w, p0 + i, zf) };
                store(i, oc, _mm512_mul_ps(f[0], s_row));
                i += 1;
            }
        }
    }
}

/// Panels `p .. p + S` of one row's blockwise product before the row scale: from the
/// nibbles in whole groups of 32 inputs where the weights allow, else quad by quad.
///
/// # Safety
/// As `blockwise`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn panel_sums<const S: usize>(
    ap: *const u8,
    w: &QWeights,
    p: usize,
    zf: __m512,
) -> [__m512; S] {
    // Safety: the caller's.
    unsafe {
        if w.block.is_multiple_of(32) && !w.nib.is_empty() {
            nibble_blocks::<S>(ap, w, p, zf)
        } else {
            blockwise::<S>(ap, w, p, zf)
        }
    }
}

/// The start of panels `p .. p + S` in XNNPACK's order: the packed zero-point terms times
/// the row's zero point `zf`.
///
/// # Safety
/// AVX-512 F; the weights are `one_row_ready` and panels `p .. p + S` exist.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn starts<const S: usize>(w: &QWeights, p: usize, zf: __m512) -> [__m512; S] {
    core::array::from_fn(|s| {
        // Safety: panels·16 packed terms (the caller's).
        let ks = unsafe { _mm512_loadu_ps(w.pkscaled().as_ptr().add((p + s) * NR)) };
        _mm512_mul_ps(ks, zf)
    })
}

/// Panels `p .. p + S` of one row's blockwise product before the row scale, in XNNPACK's
/// order: the packed zero-point term times the row's zero point `zf`, then float(acc) ·
/// scale block by block (`QWeights::ksum_scaled`); the panels' blocks interleaved so their
/// weight streams are read together.
///
/// # Safety
/// AVX-512 F/BW/VL/VNNI; `a` holds 4·quads bytes; panels `p .. p + S` exist and the weights
/// are `one_row_ready` (panels·16 packed terms, panels·blocks·16 scales).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn blockwise<const S: usize>(
    ap: *const u8,
    w: &QWeights,
    p: usize,
    zf: __m512,
) -> [__m512; S] {
    let blocks = w.k / w.block;
    let bq = w.block / 4;
    // Safety: the caller's.
    let mut facc = unsafe { starts::<S>(w, p, zf) };
    for b in 0..blocks {
        for (s, f) in facc.iter_mut().enumerate() {
            // Safety: block b's quads lie in panel p + s; its scales as the caller's.
            unsafe {
                let acc = dot(ap, w, p + s, b * bq, (b + 1) * bq);
                let scv = block_scales(w, scale_at(p + s, b, blocks));
                *f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), scv, *f);
            }
        }
    }
    facc
}

/// `blockwise` for 4-bit weights in blocks of a multiple of 32 inputs: eight quads of
/// activations broadcast once and used by all S panels, each panel's 256 bytes of nibbles in
/// four loads feeding two chains (low and high quads). The general loop spent ~90
/// instructions per block and panel, most of them scalar (one thread decoded at the speed
/// of those, not of memory).
///
/// # Safety
/// As `blockwise`; `w.block` a multiple of 32 and the weights kept as nibbles.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[inline]
unsafe fn nibble_blocks<const S: usize>(
    ap: *const u8,
    w: &QWeights,
    p: usize,
    zf: __m512,
) -> [__m512; S] {
    let blocks = w.k / w.block;
    let eights = w.block / 32;
    let m = _mm512_set1_epi8(0xF0u8 as i8);
    // Safety: the caller's.
    let mut facc = unsafe { starts::<S>(w, p, zf) };
    let start: [usize; S] = core::array::from_fn(|s| w.nib_at(p + s, 0));
    // Safety: panel p + s's nibbles start inside `nib` (the caller's).
    let base: [*const u8; S] = core::array::from_fn(|s| unsafe { w.nib.as_ptr().add(start[s]) });
    let next = w.next_streams();
    for s in 0..S {
        prefetch(w.starts_ahead((p + s) * NR + STARTS_AHEAD, &next));
    }
    for b in 0..blocks {
        let mut acc = [[_mm512_setzero_si512(); 2]; S];
        for e in 0..eights {
            let q0 = (b * eights + e) * 8;
            // Safety: quads q0 .. q0 + 8 ≤ quads: 4·(q0 + 8) ≤ the bytes of `a`.
            let av: [__m512i; 8] = core::array::from_fn(|i| unsafe { aquad(ap, q0 + i) });
            for s in 0..S {
                // Safety: pairs q0/2 .. q0/2 + 4 of panel p + s lie inside `nib`.
                let wb = unsafe { base[s].add(pair_off(q0 / 2)) };
                for t in 0..4 {
                    let ahead = start[s] + pair_off(q0 / 2 + t) + PREFETCH;
                    prefetch(w.nib_ahead(ahead, &next));
                    // Safety: as above.
                    let v = unsafe { _mm512_loadu_si512(wb.add(pair_off(t)) as *const _) };
                    let lo = _mm512_and_si512(_mm512_slli_epi16::<4>(v), m);
                    let hi = _mm512_and_si512(v, m);
                    acc[s][0] = _mm512_dpbusd_epi32(acc[s][0], av[2 * t], lo);
                    acc[s][1] = _mm512_dpbusd_epi32(acc[s][1], av[2 * t + 1], hi);
                }
            }
        }
        for s in 0..S {
            prefetch(w.scales_ahead(scale_at(p + s, b, blocks) + SCALE_AHEAD, &next));
            // Sums of 16·w: exact, and a multiple of 16.
            let sum = _mm512_srai_epi32::<4>(_mm512_add_epi32(acc[s][0], acc[s][1]));
            // Safety: the scales hold panels·blocks·16 values (`one_row_ready`).
            let scv = unsafe { block_scales(w, scale_at(p + s, b, blocks)) };
            facc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scv, facc[s]);
        }
    }
    facc
}

/// Output rows `r0 .. r0 + rows` with `vpdpbusd`: tiles of MR rows by three panels (each
/// broadcast activation feeds three products; one panel at a time the loads outnumbered
/// them), two or one for the last panels, one for blockwise weights; blockwise weights with
/// their scales kept panel by panel (8da4w prefill) in `blockwise_rows`' tiles.
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
    // Blockwise weights with their scales panel by panel (8da4w prefill).
    let panel_major = w.block != 0
        && w.one_row_ready()
        && matches!((epi, &o), (Epilogue::Dequant { .. }, Out::F32(_)));
    if panel_major {
        // A call of one tile's rows (verifying drafts, a short chunk) is bound by the weight
        // stream: it reads the nibbles (half the bytes) where there are.
        let nib = rows <= BR && !w.nib.is_empty() && w.block.is_multiple_of(32);
        // Such a call's tile has exactly its rows (a tile of 8 computes 8 whatever it keeps).
        // Safety: the caller's operands; `panel_major` checked the scales' layout, `nib` that
        // the nibbles are there in blocks of whole pairs.
        unsafe {
            match (nib, rows) {
                (true, 2) => blockwise_rows::<2, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, 3) => blockwise_rows::<3, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, 4) => blockwise_rows::<4, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, 5) => blockwise_rows::<5, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, 6) => blockwise_rows::<6, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, 7) => blockwise_rows::<7, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                (true, _) => blockwise_rows::<BR, BP, true>(a, lda, r0, rows, w, epi, o, ldc),
                _ => blockwise_rows::<BR, BP, false>(a, lda, r0, rows, w, epi, o, ldc),
            }
        };
        return;
    }
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
    let mut facc = [[_mm512_setzero_ps(); NP]; MR];
    if let Epilogue::Dequant { zps, scale, .. } = epi {
        if w.block != 0 {
            // XNNPACK's start: the packed zero-point term times the row's zero point
            // (`QWeights::ksum_scaled`).
            for j in 0..NP {
                let mut ks = [0f32; NR];
                for (jj, k) in ks.iter_mut().enumerate() {
                    let c = (p + j) * NR + jj;
                    if c < w.n {
                        *k = w.ksum_scaled(scale, c);
                    }
                }
                let ksv = _mm512_loadu_ps(ks.as_ptr());
                for (i, f) in facc.iter_mut().enumerate() {
                    let zf = (zps[r + i.min(mr - 1)] + 128) as f32;
                    f[j] = _mm512_mul_ps(ksv, _mm512_set1_ps(zf));
                }
            }
        }
    }
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
            Epilogue::Dequant { scale, .. } if w.block != 0 => {
                // Per block: float(acc) · scale[j][b] added (NP is 1 here).
                let nv = NR.min(w.n - p * NR);
                let mut sc = [0f32; NR];
                for (jj, s) in sc.iter_mut().enumerate().take(nv) {
                    *s = scale[(p * NR + jj) * blocks + b];
                }
                let scv = _mm512_loadu_ps(sc.as_ptr());
                for i in 0..mr {
                    facc[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][0]), scv, facc[i][0]);
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
        let mask = lanes(nv);
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
                    let q = _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(f), zpv), minv);
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
                        _mm512_add_ps(_mm512_mul_ps(facc[i][j], _mm512_set1_ps(s_row)), bv)
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

/// Rows and panels per tile of the blockwise (8da4w prefill) product: each broadcast
/// activation feeds two products. 8 × 2 was the fastest of 3–16 rows × 1–4 panels on
/// SmolLM2's shapes (`q4prefill`), though its 32 float accumulators spill.
const BR: usize = MR;
const BP: usize = 2;

/// Rows `r0 .. r0 + rows` of a blockwise product with a `Dequant` epilogue and the scales
/// kept panel by panel (`one_row_ready`), in tiles of `R` rows × `P` panels. Arithmetic as
/// `group`'s: the packed zero-point term times the row's zero point, then block by block
/// `float(acc_b) · scale_b` fused in, then the row's scale, the bias and the clamps. With
/// `NIB` the weights come from the nibbles (two quads per 64-byte load, as `16·w`; the block
/// sums shifted back exactly), else from the int8 copy.
///
/// # Safety
/// As [`rows`]; `w.one_row_ready()` and `w.block != 0`; with `NIB`, nibbles kept and blocks
/// of a multiple of 32 inputs.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn blockwise_rows<const R: usize, const P: usize, const NIB: bool>(
    a: &[u8],
    lda: usize,
    r0: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    o: Out<'_>,
    ldc: usize,
) {
    let (
        Epilogue::Dequant {
            rows: rp,
            zps,
            bias,
            lo,
            hi,
            ..
        },
        Out::F32(o),
    ) = (epi, o)
    else {
        return;
    };
    let panels = w.n.div_ceil(NR);
    let blocks = w.k / w.block;
    let bq = w.block / 4;
    let wp = w.data.as_ptr();
    let (lov, hiv) = (_mm512_set1_ps(*lo), _mm512_set1_ps(*hi));
    // Panels outer, row tiles inner: a panel group's weights stay in L1 for every tile of
    // the task's rows.
    let mut p = 0;
    while p < panels {
        let np = P.min(panels - p);
        let mut t = 0;
        while t < rows {
            let mr = R.min(rows - t);
            // Row pointers (rows past `mr` repeat the last one; their results are dropped).
            let mut ap = [a.as_ptr(); R];
            let mut zf = [0f32; R];
            for i in 0..R {
                let r = r0 + t + i.min(mr - 1);
                // Safety: row r < r0 + rows lies in `a`.
                ap[i] = unsafe { a.as_ptr().add(r * lda) };
                zf[i] = (zps[r] + 128) as f32;
            }
            let mut facc = [[_mm512_setzero_ps(); P]; R];
            for j in 0..P {
                // Panels past the last repeat it (their results are dropped).
                let pj = p + j.min(np - 1);
                let ksv = _mm512_loadu_ps(w.pkscaled()[pj * NR..].as_ptr());
                for i in 0..R {
                    facc[i][j] = _mm512_mul_ps(ksv, _mm512_set1_ps(zf[i]));
                }
            }
            let mut pw = [wp; P];
            for (j, x) in pw.iter_mut().enumerate() {
                // Safety: panel p + min(j, np − 1) exists.
                *x = unsafe { wp.add((p + j.min(np - 1)) * w.quads * NR * 4) };
            }
            // Where panel p + min(j, np − 1)'s nibbles start (read only with NIB, when
            // they are there).
            let nibs: [*const u8; P] = core::array::from_fn(|j| {
                w.nib.as_ptr().wrapping_add(w.nib_at(p + j.min(np - 1), 0))
            });
            let m4 = _mm512_set1_epi8(0xF0u8 as i8);
            for b in 0..blocks {
                let mut acc = [[_mm512_setzero_si512(); P]; R];
                if NIB {
                    // Pairs of quads from the nibbles (half the bytes: calls of a few
                    // rows are bound by the weight stream), as 16·w: sums 16 times the
                    // int8 path's, exact, shifted back below.
                    for u in b * bq / 2..(b + 1) * bq / 2 {
                        let mut lo = [_mm512_setzero_si512(); P];
                        let mut hi = [_mm512_setzero_si512(); P];
                        for j in 0..P {
                            let src = nibs[j].wrapping_add(pair_off(u));
                            prefetch(src.wrapping_add(PREFETCH));
                            // Safety: pair u < pairs of the panel lies inside `nib`.
                            let v = unsafe { _mm512_loadu_si512(src as *const _) };
                            lo[j] = _mm512_and_si512(_mm512_slli_epi16::<4>(v), m4);
                            hi[j] = _mm512_and_si512(v, m4);
                        }
                        for i in 0..R {
                            // Safety: quads 2u, 2u + 1 < quads: 8 bytes at 8u in the row.
                            let (a0, a1) = unsafe {
                                (
                                    _mm512_set1_epi32(core::ptr::read_unaligned(
                                        ap[i].add(8 * u) as *const i32
                                    )),
                                    _mm512_set1_epi32(core::ptr::read_unaligned(
                                        ap[i].add(8 * u + 4) as *const i32,
                                    )),
                                )
                            };
                            for j in 0..P {
                                acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a0, lo[j]);
                                acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a1, hi[j]);
                            }
                        }
                    }
                    for a in acc.iter_mut().flatten() {
                        *a = _mm512_srai_epi32::<4>(*a);
                    }
                } else {
                    for q in b * bq..(b + 1) * bq {
                        if t == 0 {
                            // The next panels' weights into L2 while this tile reads these
                            // (the first tile of a panel group otherwise waits on L3).
                            for x in &pw {
                                l2_prefetch(x.wrapping_add((P * w.quads + q) * NR * 4));
                            }
                        }
                        let mut wv = [_mm512_setzero_si512(); P];
                        for j in 0..P {
                            // Safety: quad q < quads of the panel lies inside `data`.
                            wv[j] =
                                unsafe { _mm512_loadu_si512(pw[j].add(q * NR * 4) as *const _) };
                        }
                        for i in 0..R {
                            // Safety: 4 bytes at 4q < 4·quads ≤ lda of a row of `a`.
                            let av = unsafe {
                                _mm512_set1_epi32(core::ptr::read_unaligned(
                                    ap[i].add(q * 4) as *const i32
                                ))
                            };
                            for j in 0..P {
                                acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], av, wv[j]);
                            }
                        }
                    }
                }
                for j in 0..P {
                    let pj = p + j.min(np - 1);
                    // Safety: `one_row_ready`: panels·blocks·16 scales.
                    let scv = unsafe { block_scales(w, scale_at(pj, b, blocks)) };
                    for i in 0..R {
                        facc[i][j] =
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][j]), scv, facc[i][j]);
                    }
                }
            }
            for j in 0..np {
                let c0 = (p + j) * NR;
                let nv = NR.min(w.n - c0);
                let mask = lanes(nv);
                let bv = match bias {
                    Some(b) => _mm512_maskz_loadu_ps(mask, b[c0..].as_ptr()),
                    None => _mm512_setzero_ps(),
                };
                for i in 0..mr {
                    let s_row = rp[r0 + t + i];
                    let y = _mm512_add_ps(_mm512_mul_ps(facc[i][j], _mm512_set1_ps(s_row)), bv);
                    let y = _mm512_min_ps(_mm512_max_ps(y, lov), hiv);
                    let dst = o[(t + i) * ldc + c0..].as_mut_ptr();
                    // Safety: `nv` floats of row t + i from column c0 lie inside `o`.
                    unsafe { _mm512_mask_storeu_ps(dst, mask, y) };
                }
            }
            t += R;
        }
        p += P;
    }
}
