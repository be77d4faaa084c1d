//! Packed operands: [`PackedA`] (panels of MR rows) and [`PackedB`] (panels of NR columns),
//! k-major and zero-padded, built once (weights at load) for the micro-kernels.
use super::tile;
use crate::aligned::AlignedVec;
#[cfg(target_arch = "x86_64")]
use crate::simd::{level, Level};

/// A, packed for the micro-kernels: panels of `mr` rows; within a panel, for each k, `mr`
/// consecutive values (rows past `m` are zero).
#[derive(Clone, Debug)]
pub struct PackedA {
    pub(super) data: AlignedVec,
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) mr: usize,
}

impl PackedA {
    /// Packs the `m × k` matrix whose element (i, k) is `at(i, k)`.
    pub fn new(m: usize, k: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let mr = tile().0;
        Self::with_mr(m, k, mr, at)
    }
    fn with_mr(m: usize, k: usize, mr: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let panels = m.div_ceil(mr);
        let mut data = AlignedVec::zeroed(panels * k * mr);
        for p in 0..panels {
            let dst = &mut data[p * k * mr..][..k * mr];
            for i in 0..mr.min(m - p * mr) {
                for kk in 0..k {
                    dst[kk * mr + i] = at(p * mr + i, kk);
                }
            }
        }
        PackedA { data, m, k, mr }
    }
    /// Packs the row-major `m × k` matrix `w` (at least `m·k` values), row `i` times
    /// `row_scale[i]` when given (a folded batch norm): [`new`](Self::new) row slice by row
    /// slice, a few times faster at method load.
    pub fn from_rows(m: usize, k: usize, w: &[f32], row_scale: Option<&[f32]>) -> Self {
        let mr = tile().0;
        let panels = m.div_ceil(mr);
        let mut data = AlignedVec::zeroed(panels * k * mr);
        if k == 0 {
            return PackedA { data, m, k, mr };
        }
        for (i, row) in w.chunks_exact(k).take(m).enumerate() {
            let dst = &mut data[(i / mr) * k * mr + i % mr..];
            let sc = row_scale.map_or(1.0, |s| s[i]);
            for (d, &v) in dst.iter_mut().step_by(mr).zip(row) {
                *d = if row_scale.is_some() { v * sc } else { v };
            }
        }
        PackedA { data, m, k, mr }
    }
    pub fn rows(&self) -> usize {
        self.m
    }
    pub fn depth(&self) -> usize {
        self.k
    }
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
    pub(super) fn get(&self, i: usize, k: usize) -> f32 {
        self.data[(i / self.mr) * self.k * self.mr + k * self.mr + i % self.mr]
    }
}

/// B, packed for the micro-kernels: panels of `nr` columns; within a panel, for each k, `nr`
/// consecutive values (columns past `n` are zero).
#[derive(Clone, Debug)]
pub struct PackedB {
    pub(super) data: AlignedVec,
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) nr: usize,
}

impl PackedB {
    /// Packs the `k × n` matrix whose element (k, j) is `at(k, j)`.
    pub fn new(k: usize, n: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let nr = tile().1;
        Self::with_nr(k, n, nr, at)
    }
    /// Packs the `k × n` matrix given transposed: element (k, j) is `src[j·k + k]` (a
    /// `[n, k]` weight read as its transpose), times `scale[j]` when given. Panics if `src`
    /// is shorter than `n·k` or `scale` than `n`.
    pub fn from_transposed(src: &[f32], k: usize, n: usize, scale: Option<&[f32]>) -> Self {
        let nr = tile().1;
        let panels = n.div_ceil(nr);
        let mut data = AlignedVec::zeroed(panels * k * nr);
        let src = &src[..n * k];
        // Every SIMD level above the portable one has AVX.
        #[cfg(target_arch = "x86_64")]
        let avx = level() != Level::Portable;
        // 8 × 8 blocks: with AVX transposed in registers (MobileNetV2's weights packed 4–5×
        // faster than element by element, a tenth of its load time), else through a local
        // tile (rows read whole, columns written whole).
        const B: usize = 8;
        let mut tile = [[0.0f32; B]; B];
        for p in 0..panels {
            let dst = &mut data[p * k * nr..][..k * nr];
            let cols = nr.min(n - p * nr);
            for c0 in (0..cols).step_by(B) {
                let cb = B.min(cols - c0);
                let j0 = p * nr + c0;
                let mut sc = [1.0f32; B];
                if let Some(s) = scale {
                    sc[..cb].copy_from_slice(&s[j0..j0 + cb]);
                }
                for k0 in (0..k).step_by(B) {
                    let kb = B.min(k - k0);
                    #[cfg(target_arch = "x86_64")]
                    if avx && cb == B && kb == B {
                        let from = &src[j0 * k + k0..][..(B - 1) * k + B];
                        let to = &mut dst[k0 * nr + c0..][..(B - 1) * nr + B];
                        // Safety: AVX is present; `from` holds 8 rows of 8 floats `k` apart
                        // and `to` 8 rows of 8 floats `nr` apart (the slices above).
                        unsafe { transpose8_avx(from, k, &sc, to, nr) };
                        continue;
                    }
                    for (c, t) in tile.iter_mut().enumerate().take(cb) {
                        for (d, &v) in t.iter_mut().zip(&src[(j0 + c) * k + k0..][..kb]) {
                            *d = v * sc[c];
                        }
                    }
                    for i in 0..kb {
                        let out = &mut dst[(k0 + i) * nr + c0..][..cb];
                        for (c, d) in out.iter_mut().enumerate() {
                            *d = tile[c][i];
                        }
                    }
                }
            }
        }
        PackedB { data, k, n, nr }
    }
    fn with_nr(k: usize, n: usize, nr: usize, at: impl Fn(usize, usize) -> f32) -> Self {
        let panels = n.div_ceil(nr);
        let mut data = AlignedVec::zeroed(panels * k * nr);
        for p in 0..panels {
            let dst = &mut data[p * k * nr..][..k * nr];
            for kk in 0..k {
                for j in 0..nr.min(n - p * nr) {
                    dst[kk * nr + j] = at(kk, p * nr + j);
                }
            }
        }
        PackedB { data, k, n, nr }
    }
    pub fn cols(&self) -> usize {
        self.n
    }
    pub fn depth(&self) -> usize {
        self.k
    }
    pub fn bytes(&self) -> usize {
        self.data.len() * 4
    }
    /// Columns per panel.
    pub fn panel_width(&self) -> usize {
        self.nr
    }
    /// Panel `p` (columns `p·nr ..`): `depth() × panel_width()` floats, k-major, zero past
    /// the last column; 64-byte aligned.
    pub fn panel(&self, p: usize) -> &[f32] {
        &self.data[p * self.k * self.nr..(p + 1) * self.k * self.nr]
    }
    pub(super) fn get(&self, k: usize, j: usize) -> f32 {
        self.data[(j / self.nr) * self.k * self.nr + k * self.nr + j % self.nr]
    }
}

/// `to[i·ldt + r] = from[r·ldf + i] · scale[r]` for an 8 × 8 block, in AVX registers.
///
/// # Safety
/// AVX must be available. (`from` and `to` are bounds-checked.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8_avx(from: &[f32], ldf: usize, scale: &[f32; 8], to: &mut [f32], ldt: usize) {
    use core::arch::x86_64::*;
    assert!(from.len() >= 7 * ldf + 8 && to.len() >= 7 * ldt + 8);
    let (f, t) = (from.as_ptr(), to.as_mut_ptr());
    // Safety: the eight 8-float rows read and written lie inside `from` and `to` (asserted).
    unsafe {
        let r: [__m256; 8] = core::array::from_fn(|i| {
            _mm256_mul_ps(_mm256_loadu_ps(f.add(i * ldf)), _mm256_set1_ps(scale[i]))
        });
        // Pairs of rows interleaved, then quads, then the 128-bit halves exchanged.
        let a0 = _mm256_unpacklo_ps(r[0], r[1]);
        let a1 = _mm256_unpackhi_ps(r[0], r[1]);
        let a2 = _mm256_unpacklo_ps(r[2], r[3]);
        let a3 = _mm256_unpackhi_ps(r[2], r[3]);
        let a4 = _mm256_unpacklo_ps(r[4], r[5]);
        let a5 = _mm256_unpackhi_ps(r[4], r[5]);
        let a6 = _mm256_unpacklo_ps(r[6], r[7]);
        let a7 = _mm256_unpackhi_ps(r[6], r[7]);
        let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
        let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
        let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
        let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
        let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
        let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
        let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
        let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
        let out = [
            _mm256_permute2f128_ps::<0x20>(b0, b4),
            _mm256_permute2f128_ps::<0x20>(b1, b5),
            _mm256_permute2f128_ps::<0x20>(b2, b6),
            _mm256_permute2f128_ps::<0x20>(b3, b7),
            _mm256_permute2f128_ps::<0x31>(b0, b4),
            _mm256_permute2f128_ps::<0x31>(b1, b5),
            _mm256_permute2f128_ps::<0x31>(b2, b6),
            _mm256_permute2f128_ps::<0x31>(b3, b7),
        ];
        for (i, v) in out.iter().enumerate() {
            _mm256_storeu_ps(t.add(i * ldt), *v);
        }
    }
}
