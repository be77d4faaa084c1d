//! AVX2 tile sums (`TileSums`) for x86-64 CPUs without AVX-512 VNNI: per quad, each 16-byte
//! group of 4 channels × 4 inputs is sign-extended to 16 i16 and multiplied with the row's
//! quad (zero-extended, broadcast) by `vpmaddwd`, which adds the products in pairs into i32:
//! exact for every byte value (unlike `vpmaddubsw`, whose i16 sums saturate), and no
//! zero-point correction since the activations stay unsigned.

use super::x86::{prefetch, PREFETCH, SCALE_AHEAD, STARTS_AHEAD};
use super::{
    pair_off, scale_at, Epilogue, Out, QWeights, SumsIn, TileSums, NIB_BLOCK, NIB_GROUP, NR, TR,
};
use core::arch::x86_64::*;

/// The kernel, when the CPU has AVX2 and the process's SIMD level allows it.
pub fn best() -> Option<TileSums> {
    let l = pteron_kernels_cpu::cpu::max_level();
    (l.tier() >= 1 && pteron_kernels_cpu::cpu::features().avx2_fma).then_some(avx2_sums as TileSums)
}

/// `TileSums` with AVX2, two rows at a time (8 accumulators).
fn avx2_sums(t: &SumsIn<'_>, acc: &mut [[i32; NR]; TR]) {
    assert!(pteron_kernels_cpu::cpu::features().avx2_fma);
    let wp = t.panel();
    // Safety: the CPU has AVX2 (asserted); `panel` checked the rows and the weights.
    unsafe { sums(t, wp, acc) }
}

/// # Safety
/// AVX2; `wp` from `t.panel()`.
#[target_feature(enable = "avx2")]
unsafe fn sums(t: &SumsIn<'_>, wp: *const i8, acc: &mut [[i32; NR]; TR]) {
    let SumsIn { a, q0, q1, .. } = *t;
    for (pair, accs) in a.chunks(2).zip(acc.chunks_mut(2)) {
        let mut c = [[_mm256_setzero_si256(); 4]; 2];
        for q in q0..q1 {
            // Safety (loads): quad q < quads of panel p; 4 activation bytes at 4q < 4·q1.
            let wv: [__m256i; 4] = core::array::from_fn(|g| unsafe {
                _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.add((q * NR + 4 * g) * 4) as *const _))
            });
            for (row, ci) in pair.iter().zip(c.iter_mut()) {
                let quad = unsafe { (row.as_ptr().add(4 * q) as *const u32).read_unaligned() };
                let a16 = _mm256_set1_epi64x(_mm_cvtsi128_si64(_mm_cvtepu8_epi16(
                    _mm_cvtsi32_si128(quad as i32),
                )));
                for (cg, wg) in ci.iter_mut().zip(&wv) {
                    *cg = _mm256_add_epi32(*cg, _mm256_madd_epi16(*wg, a16));
                }
            }
        }
        for (ci, acc) in c.iter().zip(accs.iter_mut()).take(pair.len()) {
            for (g, v) in ci.iter().enumerate() {
                let mut lanes = [0i32; 8];
                // Safety: `lanes` holds 8 i32.
                unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut _, *v) };
                // Lanes 2e, 2e + 1: the two pair sums of channel 4g + e.
                for e in 0..4 {
                    acc[4 * g + e] += lanes[2 * e] + lanes[2 * e + 1];
                }
            }
        }
    }
}

/// Every kernel the CPU has, by name (for tests).
#[cfg(test)]
pub fn available() -> Vec<(&'static str, TileSums)> {
    if pteron_kernels_cpu::cpu::features().avx2_fma {
        vec![("avx2", avx2_sums)]
    } else {
        Vec::new()
    }
}

/// Whether [`rows`] may run: the CPU has AVX2 and FMA, the SIMD level allows it, and the
/// weights are not blockwise (those take the tile path).
pub fn rows_apply(w: &QWeights) -> bool {
    w.block == 0 && best().is_some()
}

/// Output rows `r0 .. r0 + rows` (`o` starts at row `r0`, column `16·panels.start`), columns
/// of `panels`, for weights without blocks: two rows × one panel at a time, sums and epilogue
/// in registers (the tile path's per-tile overhead was most of the time on 1×1 convolutions
/// over few channels). Same arithmetic as `tiled_rows`, bit for bit.
///
/// # Safety
/// AVX2 and FMA ([`rows_apply`]); the operands as `qgemm` checks them.
#[target_feature(enable = "avx2,fma")]
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
    panels: core::ops::Range<usize>,
) {
    let kp = w.quads * 4;
    let col0 = panels.start * NR;
    for p in panels {
        let nv = NR.min(w.n - p * NR);
        let params = Params::new(w, epi, p, nv);
        for t in (0..rows).step_by(2) {
            let mr = 2.min(rows - t);
            let ra = &a[(r0 + t) * lda..][..kp];
            let rb = &a[(r0 + t + mr - 1) * lda..][..kp];
            // Safety: rows of 4·quads bytes, panel p of the weights (`qgemm`'s checks).
            let acc = unsafe { sums2(ra, rb, w, p) };
            for (i, acc) in acc.iter().enumerate().take(mr) {
                let at = (t + i) * ldc + p * NR - col0;
                // Safety: the row's `nv` outputs from `at` lie inside `o`.
                unsafe { params.store(acc, r0 + t + i, &mut o, at, nv) };
            }
        }
    }
}

/// The epilogue's parameters for one panel, padded past `n`.
struct Params<'e> {
    epi: &'e Epilogue<'e>,
    /// Requant: bias (i32); Dequant: bias (f32 bits).
    bias: [__m256i; 2],
    scale: [__m256; 2],
    colsum: [__m256i; 2],
}

impl<'e> Params<'e> {
    #[target_feature(enable = "avx2,fma")]
    fn new(w: &QWeights, epi: &'e Epilogue<'e>, p: usize, nv: usize) -> Self {
        let mut bias = [0i32; NR];
        let mut scale = [0f32; NR];
        let mut colsum = [0i32; NR];
        for jj in 0..nv {
            let j = p * NR + jj;
            colsum[jj] = w.colsum[j];
            match epi {
                Epilogue::Requant {
                    bias: b, scale: s, ..
                } => {
                    bias[jj] = b[j];
                    scale[jj] = s[j];
                }
                Epilogue::Dequant {
                    bias: b, scale: s, ..
                } => {
                    bias[jj] = b.map_or(0.0f32, |b| b[j]).to_bits() as i32;
                    scale[jj] = s[j];
                }
            }
        }
        // Safety: loads of 8 lanes from 16-element arrays.
        unsafe {
            let li = |v: &[i32; NR], h: usize| _mm256_loadu_si256(v[8 * h..].as_ptr() as *const _);
            let lf = |v: &[f32; NR], h: usize| _mm256_loadu_ps(v[8 * h..].as_ptr());
            Params {
                epi,
                bias: [li(&bias, 0), li(&bias, 1)],
                scale: [lf(&scale, 0), lf(&scale, 1)],
                colsum: [li(&colsum, 0), li(&colsum, 1)],
            }
        }
    }

    /// Applies the epilogue to one row's 16 sums (`acc`, channels in order) and stores the
    /// first `nv` results at `o[at ..]`.
    ///
    /// # Safety
    /// AVX2 and FMA; `at + nv ≤` the length of `o`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(&self, acc: &[__m256i; 2], row: usize, o: &mut Out<'_>, at: usize, nv: usize) {
        match (self.epi, o) {
            (Epilogue::Requant { zp, qmin, qmax, .. }, Out::I8(o)) => {
                let hi = _mm256_set1_ps((qmax - zp) as f32);
                let lo = _mm256_set1_ps((qmin - zp) as f32);
                let zpv = _mm256_set1_epi32(*zp);
                let q: [__m256i; 2] = core::array::from_fn(|h| {
                    let f = _mm256_mul_ps(
                        _mm256_cvtepi32_ps(_mm256_add_epi32(acc[h], self.bias[h])),
                        self.scale[h],
                    );
                    // Clamped first, so that the conversion (to nearest even, the default
                    // rounding mode) is exact and in range, as `requant`.
                    let f = _mm256_max_ps(_mm256_min_ps(f, hi), lo);
                    let i = _mm256_add_epi32(_mm256_cvtps_epi32(f), zpv);
                    _mm256_min_epi32(
                        _mm256_max_epi32(i, _mm256_set1_epi32(*qmin)),
                        _mm256_set1_epi32(*qmax),
                    )
                });
                // 16 i32 → 16 i8 in order (the packs work per 128-bit lane).
                let x = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(q[0], q[1]));
                let y = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packs_epi16(x, x));
                let y = _mm256_castsi256_si128(y);
                if nv == NR {
                    let dst = &mut o[at..at + NR];
                    // Safety: 16 bytes of `dst`.
                    unsafe { _mm_storeu_si128(dst.as_mut_ptr() as *mut _, y) };
                } else {
                    let mut bytes = [0i8; NR];
                    // Safety: 16 bytes into `bytes`.
                    unsafe { _mm_storeu_si128(bytes.as_mut_ptr() as *mut _, y) };
                    o[at..at + nv].copy_from_slice(&bytes[..nv]);
                }
            }
            (
                Epilogue::Dequant {
                    rows, zps, lo, hi, ..
                },
                Out::F32(o),
            ) => {
                let s_row = _mm256_set1_ps(rows[row]);
                let zpv = _mm256_set1_epi32(zps[row] + 128);
                let mut y = [0f32; NR];
                for h in 0..2 {
                    let corr = _mm256_sub_epi32(acc[h], _mm256_mullo_epi32(zpv, self.colsum[h]));
                    let f = _mm256_mul_ps(_mm256_cvtepi32_ps(corr), s_row);
                    let v = _mm256_fmadd_ps(f, self.scale[h], _mm256_castsi256_ps(self.bias[h]));
                    let v =
                        _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(*lo)), _mm256_set1_ps(*hi));
                    if nv == NR {
                        let dst = &mut o[at + 8 * h..at + 8 * h + 8];
                        // Safety: 8 floats of `dst`.
                        unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), v) };
                    } else {
                        // Safety: 8 floats into `y`.
                        unsafe { _mm256_storeu_ps(y[8 * h..].as_mut_ptr(), v) };
                    }
                }
                if nv < NR {
                    o[at..at + nv].copy_from_slice(&y[..nv]);
                }
            }
            _ => {}
        }
    }
}

/// The sums of rows `ra` and `rb` with panel `p`, each as two vectors of 8 channels in order.
///
/// Quad `l` of both rows' four (the 64-bit lane `IMM` selects) broadcast over a register.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn bcast<const IMM: i32>(av: &[__m256i; 2]) -> [__m256i; 2] {
    [
        _mm256_permute4x64_epi64::<IMM>(av[0]),
        _mm256_permute4x64_epi64::<IMM>(av[1]),
    ]
}

/// `c[r][g] += madd(w[g], b[r])`: one quad of 16 channels (64 weight bytes at `wq`, four
/// groups of four channels widened to i16) against both rows' broadcast quad.
///
/// # Safety
/// AVX2; 64 bytes readable at `wq`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn quad(c: &mut [[__m256i; 4]; 2], b: [__m256i; 2], wq: *const i8) {
    // Safety: 16 bytes at wq + 16·g, g < 4.
    let wv: [__m256i; 4] = core::array::from_fn(|g| unsafe {
        _mm256_cvtepi8_epi16(_mm_loadu_si128(wq.add(16 * g) as *const _))
    });
    for (cr, b) in c.iter_mut().zip(&b) {
        for (cg, wg) in cr.iter_mut().zip(&wv) {
            *cg = _mm256_add_epi32(*cg, _mm256_madd_epi16(*wg, *b));
        }
    }
}

/// # Safety
/// AVX2; rows of at least 4·quads bytes; panel `p` exists.
#[target_feature(enable = "avx2,fma")]
unsafe fn sums2(ra: &[u8], rb: &[u8], w: &QWeights, p: usize) -> [[__m256i; 2]; 2] {
    let wp = w.data[p * w.quads * NR * 4..][..w.quads * NR * 4].as_ptr();
    let mut c = [[_mm256_setzero_si256(); 4]; 2];
    let rows = [ra, rb];
    let mut q = 0;
    while q < w.quads {
        let n = (w.quads - q).min(4);
        // Four quads of each row as 16 i16 (zero-filled past the last quad).
        let av: [__m256i; 2] = core::array::from_fn(|r| {
            let v = if n == 4 {
                let src = &rows[r][4 * q..4 * q + 16];
                // Safety: 16 bytes of `src`.
                unsafe { _mm_loadu_si128(src.as_ptr() as *const _) }
            } else {
                let mut t = [0u8; 16];
                t[..4 * n].copy_from_slice(&rows[r][4 * q..4 * (q + n)]);
                // Safety: 16 bytes of `t`.
                unsafe { _mm_loadu_si128(t.as_ptr() as *const _) }
            };
            _mm256_cvtepu8_epi16(v)
        });
        // Safety: quads q .. q + n < quads of panel p.
        unsafe {
            let wq = |l: usize| wp.add((q + l) * NR * 4);
            if n == 4 {
                // Written out with constant lanes: a loop over `l` with a `match` on it is
                // unrolled or not at the compiler's whim, and was 40 % slower when not.
                quad(&mut c, bcast::<0x00>(&av), wq(0));
                quad(&mut c, bcast::<0x55>(&av), wq(1));
                quad(&mut c, bcast::<0xAA>(&av), wq(2));
                quad(&mut c, bcast::<0xFF>(&av), wq(3));
            } else {
                for l in 0..n {
                    let b = match l {
                        0 => bcast::<0x00>(&av),
                        1 => bcast::<0x55>(&av),
                        _ => bcast::<0xAA>(&av),
                    };
                    quad(&mut c, b, wq(l));
                }
            }
        }
        q += 4;
    }
    // [c0 c0 c1 c1 | c2 c2 c3 c3] pairs → channels in order.
    let fold =
        |x: __m256i, y: __m256i| _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(x, y));
    c.map(|cr| [fold(cr[0], cr[1]), fold(cr[2], cr[3])])
}

/// Whether [`gemv_nibbles`] and [`rows_nibbles`] may run: AVX2 and FMA allowed, blockwise
/// 4-bit weights kept as nibbles in blocks of a multiple of 32 inputs, with their one-row
/// scales.
pub fn nibbles_apply(w: &QWeights) -> bool {
    w.block != 0
        && w.block.is_multiple_of(32)
        && !w.nib.is_empty()
        && w.one_row_ready()
        && best().is_some()
}

/// Block offsets kept on the stack (more go to the heap).
pub(super) const OFFS_ON_STACK: usize = 1024;

/// `n` zeroed values in `stack` when they fit, else in `heap`.
pub(super) fn offsets_buffer<'b>(
    stack: &'b mut [i32; OFFS_ON_STACK],
    heap: &'b mut Vec<i32>,
    n: usize,
) -> &'b mut [i32] {
    if n <= OFFS_ON_STACK {
        &mut stack[..n]
    } else {
        *heap = vec![0; n];
        heap
    }
}

/// `out[b]` = the `w + 8` offset's share of block `b` of `row` (8·Σa), for every block of
/// `w`'s inputs (`out` holds them).
///
/// # Safety
/// AVX2 ([`nibbles_apply`]).
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn block_offsets(row: &[u8], w: &QWeights, out: &mut [i32]) {
    for (b, o) in out[..w.k / w.block].iter_mut().enumerate() {
        *o = offset(&row[b * w.block..][..w.block]);
    }
}

/// Panels one row reads side by side (each panel's nibbles are their own run of pages).
const STREAMS: usize = 4;
/// Rows that share each unpacked group of weights in [`rows_nibbles`].
const ROWS: usize = 4;

/// One row's blockwise 4-bit product with a `Dequant` epilogue over `panels` into `o`
/// (columns from `16·panels.start`), streaming the nibbles: the AVX-512 one-row path's
/// arithmetic for CPUs without it (the tile path read the int8 copy, twice the bytes).
/// `offs` holds the row's [`block_offsets`], computed once for every task.
///
/// # Safety
/// AVX2 and FMA ([`nibbles_apply`]); `a` holds 4·quads bytes; the epilogue's slices as
/// `qgemm` checks them; `offs` holds the row's blocks; `o` holds the columns of `panels`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemv_nibbles(
    a: &[u8],
    w: &QWeights,
    epi: &Epilogue<'_>,
    offs: &[i32],
    panels: core::ops::Range<usize>,
    o: &mut [f32],
) {
    let Some(out) = Store::new(w, epi) else {
        return;
    };
    let col0 = panels.start * NR;
    let (row, zf) = ([a], [out.zero_point(0)]);
    let mut p = panels.start;
    while p < panels.end {
        if p.is_multiple_of(NIB_GROUP) && p + NIB_GROUP <= panels.end {
            // Safety: the group's panels exist; the caller's operands (`offs` included).
            let f = unsafe { group_row(a, zf[0], offs, w, p) };
            for (s, halves) in f.iter().enumerate() {
                out.put(0, p + s, halves, &mut o[(p + s) * NR - col0..]);
            }
            p += NIB_GROUP;
        } else if p + STREAMS <= panels.end {
            // Safety: panels p .. p + STREAMS exist; the caller's operands (`offs` included).
            let f = unsafe { nibble_rows::<1, STREAMS>(&row, &zf, offs, w, p) };
            for (s, halves) in f[0].iter().enumerate() {
                out.put(0, p + s, halves, &mut o[(p + s) * NR - col0..]);
            }
            p += STREAMS;
        } else {
            // Safety: as above, one panel.
            let f = unsafe { nibble_rows::<1, 1>(&row, &zf, offs, w, p) };
            out.put(0, p, &f[0][0], &mut o[p * NR - col0..]);
            p += 1;
        }
    }
}

/// Rows `r0 .. r0 + rows` of a blockwise 4-bit product with a `Dequant` epilogue from the
/// nibbles ([`nibbles_apply`]), `o` starting at row `r0` (stride `ldc`, every panel): four
/// rows share each unpacked group of weights, in `gemv_nibbles`' arithmetic (the tile path
/// reduced each block's sums through memory, ~5× slower on 8da4w prefill).
///
/// # Safety
/// AVX2 and FMA ([`nibbles_apply`]); `a` holds rows `r0 .. r0 + rows` of `lda` bytes (at
/// least 4·quads each); `o` holds `rows` rows of `ldc` (at least n); the epilogue's slices
/// as `qgemm` checks them.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn rows_nibbles(
    a: &[u8],
    lda: usize,
    r0: usize,
    rows: usize,
    w: &QWeights,
    epi: &Epilogue<'_>,
    o: &mut [f32],
    ldc: usize,
) {
    let Some(out) = Store::new(w, epi) else {
        return;
    };
    let kp = w.quads * 4;
    let blocks = w.k / w.block;
    let row = |i: usize| &a[(r0 + i) * lda..][..kp];
    // 8·Σa of each row's blocks (the `w + 8` offset's share), once per row for all panels.
    let (mut stack, mut heap) = ([0i32; OFFS_ON_STACK], Vec::new());
    let offs = offsets_buffer(&mut stack, &mut heap, ROWS * blocks);
    let mut i = 0;
    while i < rows {
        if i + ROWS <= rows {
            let ra: [&[u8]; ROWS] = core::array::from_fn(|j| row(i + j));
            for (b, o) in offs.chunks_exact_mut(ROWS).enumerate() {
                for (o, r) in o.iter_mut().zip(&ra) {
                    *o = offset(&r[b * w.block..][..w.block]);
                }
            }
            let zs: [__m256; ROWS] = core::array::from_fn(|j| out.zero_point(r0 + i + j));
            for p in 0..w.n.div_ceil(NR) {
                // Safety: panel p exists; the caller's operands; `offs` holds ROWS · blocks.
                let f = unsafe { nibble_rows::<ROWS, 1>(&ra, &zs, offs, w, p) };
                for (j, f) in f.iter().enumerate() {
                    out.put(r0 + i + j, p, &f[0], &mut o[(i + j) * ldc + p * NR..]);
                }
            }
            i += ROWS;
        } else {
            let ra = [row(i)];
            // Safety: AVX2 (`nibbles_apply`); `offs` holds at least `blocks` values.
            unsafe { block_offsets(ra[0], w, offs) };
            let zs = [out.zero_point(r0 + i)];
            for p in 0..w.n.div_ceil(NR) {
                // Safety: as above, one row (`offs` starts with its `blocks` values).
                let f = unsafe { nibble_rows::<1, 1>(&ra, &zs, offs, w, p) };
                out.put(r0 + i, p, &f[0][0], &mut o[i * ldc + p * NR..]);
            }
            i += 1;
        }
    }
}

/// Panels `p .. p + S` of `R` rows' blockwise product before the row scales, two halves of
/// eight channels each: the packed zero-point term times the row's zero point `zf`, then
/// float(acc) · scale block by block (`QWeights::ksum_scaled`'s order). Four quads at a time
/// (two 32-byte loads of nibbles per half panel, unpacked once for the R rows).
/// `vpmaddubsw` multiplies unsigned activations by signed bytes into saturating i16 pairs,
/// so the weights go in as `w + 8` (0..15, a nibble XOR 8): a pair of products is at most
/// 2·255·15, and the four quads' pair sums added in i16 stay below 2¹⁵ before one
/// `vpmaddwd`; each block's sum then loses its `8·Σa`, `offs[b·R + r]`. The rows'
/// accumulators stay in registers.
///
/// # Safety
/// AVX2 and FMA ([`nibbles_apply`]: blocks of a multiple of 32 inputs); each row holds
/// 4·quads bytes; panel `p` exists; `offs` holds R · blocks values.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn nibble_rows<const R: usize, const S: usize>(
    rows: &[&[u8]; R],
    zf: &[__m256; R],
    offs: &[i32],
    w: &QWeights,
    p: usize,
) -> [[[__m256; 2]; S]; R] {
    let blocks = w.k / w.block;
    let (low, flip, ones) = (
        _mm256_set1_epi8(0x0F),
        _mm256_set1_epi8(0x88u8 as i8),
        _mm256_set1_epi16(1),
    );
    let mut facc = [[[_mm256_setzero_ps(); 2]; S]; R];
    for (f, z) in facc.iter_mut().zip(zf) {
        for (s, fs) in f.iter_mut().enumerate() {
            for (h, fh) in fs.iter_mut().enumerate() {
                let ks = &w.pkscaled()[(p + s) * NR + 8 * h..][..8];
                *fh = _mm256_mul_ps(_mm256_loadu_ps(ks.as_ptr()), *z);
            }
        }
    }
    let start: [usize; S] = core::array::from_fn(|s| w.nib_at(p + s, 0));
    let nib: [&[u8]; S] = core::array::from_fn(|s| &w.nib[start[s]..]);
    let next = w.next_streams();
    for s in 0..S {
        prefetch(w.starts_ahead((p + s) * NR + STARTS_AHEAD, &next));
    }
    let ptrs: [*const u8; R] = core::array::from_fn(|r| rows[r].as_ptr());
    for b in 0..blocks {
        let mut acc = [[[_mm256_setzero_si256(); 2]; S]; R];
        // Four quads (two pairs of nibbles) per step; a block has a multiple of eight.
        for u in b * w.block / 16..(b + 1) * w.block / 16 {
            for (s, nib) in nib.iter().enumerate() {
                // Pairs 2u and 2u + 1 of the panel.
                let (p0, p1) = (
                    &nib[pair_off(2 * u)..][..64],
                    &nib[pair_off(2 * u + 1)..][..64],
                );
                let ahead = start[s] + pair_off(2 * u) + PREFETCH;
                prefetch(w.nib_ahead(ahead, &next));
                prefetch(w.nib_ahead(ahead + 64, &next));
                for h in 0..2 {
                    // Safety: 32 bytes at 32h of `p0` and of `p1`.
                    let (v0, v1) = unsafe {
                        (
                            _mm256_loadu_si256(p0[32 * h..].as_ptr() as *const _),
                            _mm256_loadu_si256(p1[32 * h..].as_ptr() as *const _),
                        )
                    };
                    let (v0, v1) = (_mm256_xor_si256(v0, flip), _mm256_xor_si256(v1, flip));
                    let w0 = _mm256_and_si256(v0, low);
                    let w1 = _mm256_and_si256(_mm256_srli_epi16::<4>(v0), low);
                    let w2 = _mm256_and_si256(v1, low);
                    let w3 = _mm256_and_si256(_mm256_srli_epi16::<4>(v1), low);
                    for r in 0..R {
                        // Quads 4u .. 4u + 4 of row r, each broadcast.
                        let quad = |l: usize| {
                            // Safety: 4·(4u + l) + 4 ≤ 4·quads bytes of the row.
                            _mm256_set1_epi32(unsafe {
                                core::ptr::read_unaligned(ptrs[r].add(16 * u + 4 * l) as *const i32)
                            })
                        };
                        let s01 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(quad(0), w0),
                            _mm256_maddubs_epi16(quad(1), w1),
                        );
                        let s23 = _mm256_add_epi16(
                            _mm256_maddubs_epi16(quad(2), w2),
                            _mm256_maddubs_epi16(quad(3), w3),
                        );
                        let pr = _mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones);
                        acc[r][s][h] = _mm256_add_epi32(acc[r][s][h], pr);
                    }
                }
            }
        }
        for s in 0..S {
            let at = scale_at(p + s, b, blocks);
            prefetch(w.scales_ahead(at + SCALE_AHEAD, &next));
            for h in 0..2 {
                let scv = block_scales8(w, at + 8 * h);
                for r in 0..R {
                    let sum = _mm256_sub_epi32(acc[r][s][h], _mm256_set1_epi32(offs[b * R + r]));
                    facc[r][s][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scv, facc[r][s][h]);
                }
            }
        }
    }
    facc
}

/// Bytes ahead that [`group_row`] prefetches its nibbles into L2 (`prefetcht1`), and
/// again into L1 as non-temporal hints (`prefetchnta`: read once per token): multiples of
/// [`NIB_BLOCK`], so a block's lines never straddle a stream's end. On an AVX2-only Zen 4
/// the two levels made the decode step's products ~10 % faster than the best single
/// distance (4 KiB, `prefetchnta`); far distances alone or near ones alone were slower,
/// no prefetch slower still.
const FAR: usize = 8192;
const NEAR: usize = 2048;

/// One row against the four panels of a nibble group from panel `p` (a multiple of
/// [`NIB_GROUP`]), whose nibbles are one ascending stream (`QWeights::nib`): `nibble_rows::<1,
/// 4>`'s arithmetic, bit for bit, written out for the decode step's products. There the
/// generic loop over streams kept its sums on the stack, broadcast each quad once per
/// panel and checked every load's bounds: on an AVX2-only Zen 4, 18 GB/s from L2 and
/// 11 GB/s from memory, well under the memory's rate. Here the bounds are checked once,
/// the four quads of each step are broadcast once for the group, and the group's eight
/// sums stay in registers.
///
/// # Safety
/// AVX2 and FMA ([`nibbles_apply`]: blocks of a multiple of 32 inputs); `row` holds
/// 4·quads bytes; panels `p .. p + NIB_GROUP` exist; `offs` holds the row's blocks.
#[target_feature(enable = "avx2,fma")]
unsafe fn group_row(
    row: &[u8],
    zf: __m256,
    offs: &[i32],
    w: &QWeights,
    p: usize,
) -> [[__m256; 2]; NIB_GROUP] {
    let blocks = w.k / w.block;
    let base = w.nib_at(p, 0);
    // The group's stream: two pairs of each of its four panels in turn (64 bytes a pair).
    let stream = &w.nib[base..][..w.quads.div_ceil(4) * NIB_BLOCK];
    let (row, offs) = (&row[..4 * w.quads], &offs[..blocks]);
    let (low, flip, ones) = (
        _mm256_set1_epi8(0x0F),
        _mm256_set1_epi8(0x88u8 as i8),
        _mm256_set1_epi16(1),
    );
    let mut facc = [[_mm256_setzero_ps(); 2]; NIB_GROUP];
    for (s, fs) in facc.iter_mut().enumerate() {
        for (h, fh) in fs.iter_mut().enumerate() {
            let ks = &w.pkscaled()[(p + s) * NR + 8 * h..][..8];
            // Safety: eight floats of `ks`.
            *fh = _mm256_mul_ps(unsafe { _mm256_loadu_ps(ks.as_ptr()) }, zf);
        }
    }
    let next = w.next_streams();
    for s in 0..NIB_GROUP {
        prefetch(w.starts_ahead((p + s) * NR + STARTS_AHEAD, &next));
    }
    let (sp, ap) = (stream.as_ptr(), row.as_ptr());
    // Steps of four quads (two pairs of each panel); a block has a whole number of them.
    let steps = w.block / 16;
    // Bytes of a group's block scales for one block (two lines of bf16, four of f32).
    let scale_bytes = NIB_GROUP * NR * w.scale_span().1;
    for (b, &off_b) in offs.iter().enumerate() {
        let mut acc = [[_mm256_setzero_si256(); 2]; NIB_GROUP];
        for u in b * steps..(b + 1) * steps {
            let at = u * NIB_BLOCK;
            // The step's lines, FAR and NEAR bytes ahead (past the end: the next product's).
            let (far, near) = (
                w.nib_ahead(base + at + FAR, &next),
                w.nib_ahead(base + at + NEAR, &next),
            );
            for line in 0..NIB_BLOCK / 64 {
                _mm_prefetch::<_MM_HINT_T1>(far.wrapping_add(64 * line) as *const i8);
                _mm_prefetch::<_MM_HINT_NTA>(near.wrapping_add(64 * line) as *const i8);
            }
            // Safety: quads 4u .. 4u + 4 lie in the row (a block's steps end at k ≤ 4·quads);
            // pairs 2u, 2u + 1 of the group lie in `stream` (2u + 1 < pairs: k is a multiple
            // of the block, so of 32 inputs, and 16(u + 1) ≤ k).
            unsafe {
                let q: [__m256i; 4] = core::array::from_fn(|l| {
                    _mm256_set1_epi32(core::ptr::read_unaligned(
                        ap.add(16 * u + 4 * l) as *const i32
                    ))
                });
                // Pairs 2u, 2u + 1 of panel s at 128s: the step's 512 bytes in order.
                let l = sp.add(at);
                group_step(&mut acc[0], l, l.add(64), &q, low, flip, ones);
                group_step(&mut acc[1], l.add(128), l.add(192), &q, low, flip, ones);
                group_step(&mut acc[2], l.add(256), l.add(320), &q, low, flip, ones);
                group_step(&mut acc[3], l.add(384), l.add(448), &q, low, flip, ones);
            }
        }
        // The next group's block scales, a block's worth (`scale_at`: the group's panels'
        // side by side).
        let ahead = w.scales_ahead(scale_at(p + NIB_GROUP, b, blocks), &next);
        for line in (0..scale_bytes).step_by(64) {
            prefetch(ahead.wrapping_add(line));
        }
        for (s, (fs, acc)) in facc.iter_mut().zip(&acc).enumerate() {
            let at = scale_at(p + s, b, blocks);
            for (h, (fh, acc)) in fs.iter_mut().zip(acc).enumerate() {
                let scv = block_scales8(w, at + 8 * h);
                let sum = _mm256_sub_epi32(*acc, _mm256_set1_epi32(off_b));
                *fh = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), scv, *fh);
            }
        }
    }
    facc
}

/// One panel's share of a [`group_row`] step: its lines of two pairs (`l0`, `l1`: quads
/// 4u, 4u + 1 and 4u + 2, 4u + 3 as low and high nibbles) against the row's four broadcast
/// quads, added to the panel's two halves of eight channels.
///
/// # Safety
/// AVX2; 64 bytes readable at `l0` and at `l1`.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn group_step(
    acc: &mut [__m256i; 2],
    l0: *const u8,
    l1: *const u8,
    q: &[__m256i; 4],
    low: __m256i,
    flip: __m256i,
    ones: __m256i,
) {
    for (h, acc) in acc.iter_mut().enumerate() {
        // Safety: 32 bytes at 32h of each line (the caller's).
        let (v0, v1) = unsafe {
            (
                _mm256_loadu_si256(l0.add(32 * h) as *const _),
                _mm256_loadu_si256(l1.add(32 * h) as *const _),
            )
        };
        let (v0, v1) = (_mm256_xor_si256(v0, flip), _mm256_xor_si256(v1, flip));
        let w0 = _mm256_and_si256(v0, low);
        let w1 = _mm256_and_si256(_mm256_srli_epi16::<4>(v0), low);
        let w2 = _mm256_and_si256(v1, low);
        let w3 = _mm256_and_si256(_mm256_srli_epi16::<4>(v1), low);
        let s01 = _mm256_add_epi16(
            _mm256_maddubs_epi16(q[0], w0),
            _mm256_maddubs_epi16(q[1], w1),
        );
        let s23 = _mm256_add_epi16(
            _mm256_maddubs_epi16(q[2], w2),
            _mm256_maddubs_epi16(q[3], w3),
        );
        *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones));
    }
}

/// A `Dequant` epilogue's per-row and per-output parameters for the nibble kernels.
struct Store<'e> {
    n: usize,
    rows: &'e [f32],
    zps: &'e [i32],
    bias: Option<&'e [f32]>,
    lo: __m256,
    hi: __m256,
}

impl<'e> Store<'e> {
    #[target_feature(enable = "avx2,fma")]
    fn new(w: &QWeights, epi: &'e Epilogue<'e>) -> Option<Self> {
        let Epilogue::Dequant {
            rows,
            zps,
            bias,
            lo,
            hi,
            ..
        } = epi
        else {
            return None;
        };
        Some(Store {
            n: w.n,
            rows,
            zps,
            bias: *bias,
            lo: _mm256_set1_ps(*lo),
            hi: _mm256_set1_ps(*hi),
        })
    }

    /// Row `r`'s zero point as the activations' unsigned offset (+128), broadcast.
    #[target_feature(enable = "avx2,fma")]
    fn zero_point(&self, r: usize) -> __m256 {
        _mm256_set1_ps((self.zps[r] + 128) as f32)
    }

    /// Row `r`'s sums of panel `p` (two halves) scaled by the row, biased, clamped, into the
    /// panel's columns at the start of `dst` (two roundings, as XNNPACK's qb4w kernels and
    /// the AVX-512 path).
    #[target_feature(enable = "avx2,fma")]
    fn put(&self, r: usize, p: usize, halves: &[__m256; 2], dst: &mut [f32]) {
        let c0 = p * NR;
        let nv = NR.min(self.n - c0);
        let s_row = _mm256_set1_ps(self.rows[r]);
        let mut y = [0f32; NR];
        for (h, v) in halves.iter().enumerate() {
            let mut b = [0f32; 8];
            if let Some(bias) = self.bias {
                for (e, bv) in b.iter_mut().enumerate() {
                    *bv = bias.get(c0 + 8 * h + e).copied().unwrap_or(0.0);
                }
            }
            // Safety: eight floats of `b`.
            let bv = unsafe { _mm256_loadu_ps(b.as_ptr()) };
            let t = _mm256_add_ps(_mm256_mul_ps(*v, s_row), bv);
            let t = _mm256_min_ps(_mm256_max_ps(t, self.lo), self.hi);
            // Safety: eight floats of `y` from 8h.
            unsafe { _mm256_storeu_ps(y[8 * h..].as_mut_ptr(), t) };
        }
        dst[..nv].copy_from_slice(&y[..nv]);
    }
}

/// 8·Σa over a block of activations (a multiple of 32 bytes): the `w + 8` offset's share of
/// every channel's sum.
#[target_feature(enable = "avx2,fma")]
#[inline]
fn offset(ab: &[u8]) -> i32 {
    let mut sad = _mm256_setzero_si256();
    for c in ab.chunks_exact(32) {
        // Safety: 32 bytes of `c`.
        let v = unsafe { _mm256_loadu_si256(c.as_ptr() as *const _) };
        sad = _mm256_add_epi64(sad, _mm256_sad_epu8(v, _mm256_setzero_si256()));
    }
    let mut parts = [0i64; 4];
    // Safety: `parts` holds four i64.
    unsafe { _mm256_storeu_si256(parts.as_mut_ptr() as *mut _, sad) };
    8 * parts.iter().sum::<i64>() as i32
}

/// Eight panel-major block scales from `at` (`set_block_scales`: bf16 bits or f32).
#[target_feature(enable = "avx2,fma")]
#[inline]
fn block_scales8(w: &QWeights, at: usize) -> __m256 {
    if w.pscale16.is_empty() {
        let s = &w.pscale[at..][..8];
        // Safety: eight floats of `s`.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    } else {
        let s = &w.pscale16[at..][..8];
        // Safety: eight u16 of `s`.
        let h = unsafe { _mm_loadu_si128(s.as_ptr() as *const _) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }
}
