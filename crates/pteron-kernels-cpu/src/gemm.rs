//! f32 matrix multiplication: `C = init + A · B`, then an optional clamp.
//!
//! Register-blocked micro-kernels (MR rows × NR columns of C held in vector registers;
//! AVX-512: 8×32, AVX2+FMA: 6×16, portable: 4×8) over operands in one of several layouts:
//!
//! - A: packed ([`PackedA`]: panels of MR rows, k-major, zero-padded; weights packed at load),
//!   or read in place, row-major (`A[i][k] = a[i*lda + k]`) or column-major
//!   (`A[i][k] = a[k*lda + i]`), with each A element broadcast.
//! - B: packed ([`PackedB`]: panels of NR columns, k-major, zero-padded), or row-major in place
//!   (copied panel by panel into a stack buffer when the panel is reused), or column-major
//!   (`B[k][j] = b[j*ldb + k]`, always copied panel by panel).
//!
//! Blocking: k in blocks of up to [`KC`] (C is accumulated across blocks); per task, for each
//! NR-column panel, every MR-row panel of the task's rows (the B panel stays in L1, the A block
//! in L2). Tasks are rectangles of C, split across the method's threads.

use core::ops::Range;

use pteron_core::Parallel;

use crate::aligned::AlignedVec;
use crate::par::{part, SharedMut};
use crate::simd::{level, run_op_at, Level, Portable, Simd, SimdOp};

/// Largest k block of a B panel copied into a stack buffer (at most KC × NR floats).
pub const KC: usize = 256;
/// Largest k block over packed weights. One block (no pass of C through memory between
/// blocks) as long as the task's A block stays within [`A_BLOCK`] floats: on a 110M Llama's
/// linears (128 rows, depth 768 and 2048) 256-deep blocks cost 3–8 % more time.
const KC_PACKED: usize = 1024;
/// Floats of A (a task's rows × the k block) kept in L2 across a B panel's row tiles.
const A_BLOCK: usize = 256 << 10;
/// Largest NR of any configuration.
const NR_MAX: usize = 32;
/// Rows of A per task block (the A block of one task stays in L2).
const MC: usize = 512;
/// Depth up to which B is read in place and C written row panel by row panel (each B row
/// is on its own page when B is a wide activation: more rows would thrash the TLB).
const SHALLOW_K: usize = 32;

/// Row stride (floats) up to which a row-major B is read in place by every row panel of a
/// task instead of being copied into a panel first. The copy cost as much as the product when
/// C has few rows (1×1 convolutions to 24–160 channels: 67–110 GFLOP/s with it, 106–150
/// without, on MobileNetV2's 56×56 to 7×7 shapes), and tasks that split the rows of C each
/// copied the same panel, so two threads were barely faster than one.
const IN_PLACE_LDB: usize = 4096;

/// Micro-kernel shape of the current SIMD level: (MR, NR).
pub fn tile() -> (usize, usize) {
    tile_for(level())
}

fn tile_for(l: Level) -> (usize, usize) {
    match l {
        Level::Avx512 => (8, 32),
        Level::Avx2 => (6, 16),
        Level::Portable => (4, 8),
    }
}

/// A, packed for the micro-kernels: panels of `mr` rows; within a panel, for each k, `mr`
/// consecutive values (rows past `m` are zero).
#[derive(Clone, Debug)]
pub struct PackedA {
    data: AlignedVec,
    m: usize,
    k: usize,
    mr: usize,
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
    fn get(&self, i: usize, k: usize) -> f32 {
        self.data[(i / self.mr) * self.k * self.mr + k * self.mr + i % self.mr]
    }
}

/// B, packed for the micro-kernels: panels of `nr` columns; within a panel, for each k, `nr`
/// consecutive values (columns past `n` are zero).
#[derive(Clone, Debug)]
pub struct PackedB {
    data: AlignedVec,
    k: usize,
    n: usize,
    nr: usize,
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
    fn get(&self, k: usize, j: usize) -> f32 {
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

/// The A operand (m × k).
#[derive(Clone, Copy, Debug)]
pub enum MatA<'a> {
    Packed(&'a PackedA),
    /// `A[i][k] = data[i * lda + k]`.
    Rows {
        data: &'a [f32],
        lda: usize,
    },
    /// `A[i][k] = data[k * lda + i]`.
    Cols {
        data: &'a [f32],
        lda: usize,
    },
}

/// The B operand (k × n).
#[derive(Clone, Copy, Debug)]
pub enum MatB<'a> {
    Packed(&'a PackedB),
    /// `B[k][j] = data[k * ldb + j]`.
    Rows {
        data: &'a [f32],
        ldb: usize,
    },
    /// `B[k][j] = data[j * ldb + k]`.
    Cols {
        data: &'a [f32],
        ldb: usize,
    },
}

/// What C starts from before `A · B` is added.
#[derive(Clone, Copy, Debug)]
pub enum Init<'a> {
    Zero,
    /// C's current contents.
    Accumulate,
    /// `bias[i]` on row i.
    RowBias(&'a [f32]),
    /// `bias[j]` on column j.
    ColBias(&'a [f32]),
}

/// What happens around the product.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    pub init: Init<'a>,
    /// `(scale, shift)`: row i's sums become `sum·scale[i] + shift[i]` (an inference batch
    /// norm applied to a convolution whose weights are read in place), before the clamp.
    pub affine: Option<(&'a [f32], &'a [f32])>,
    /// `(r, ldr)`: `r[i·ldr + j]` is added to C(i, j) after the affine step, before the clamp
    /// (a residual connection's add fused into the convolution before it; the same rounding
    /// as adding afterwards).
    pub residual: Option<(&'a [f32], usize)>,
    /// Clamp every result to `[lo, hi]`.
    pub clamp: Option<(f32, f32)>,
}

impl Default for Epilogue<'_> {
    fn default() -> Self {
        Epilogue {
            init: Init::Zero,
            affine: None,
            residual: None,
            clamp: None,
        }
    }
}

/// An error in the arguments of [`gemm`] (operand too short for its dims and strides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmError(pub &'static str);

fn fits(len: usize, outer: usize, ld: usize, inner: usize) -> bool {
    if outer == 0 || inner == 0 {
        return true;
    }
    ld >= inner
        && (outer - 1)
            .checked_mul(ld)
            .and_then(|x| x.checked_add(inner))
            .is_some_and(|need| need <= len)
}

/// `C[m × n] (row stride ldc) = init + A · B`, clamped if asked; work split over `par`.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    par: &dyn Parallel,
    m: usize,
    n: usize,
    k: usize,
    a: MatA<'_>,
    b: MatB<'_>,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue<'_>,
) -> Result<(), GemmError> {
    let ok_a = match a {
        MatA::Packed(p) => p.m == m && p.k == k,
        MatA::Rows { data, lda } => fits(data.len(), m, lda, k),
        MatA::Cols { data, lda } => fits(data.len(), k, lda, m),
    };
    let ok_b = match b {
        MatB::Packed(p) => p.k == k && p.n == n,
        MatB::Rows { data, ldb } => fits(data.len(), k, ldb, n),
        MatB::Cols { data, ldb } => fits(data.len(), n, ldb, k),
    };
    if !ok_a {
        return Err(GemmError("A does not match m, k and its stride"));
    }
    if !ok_b {
        return Err(GemmError("B does not match k, n and its stride"));
    }
    if !fits(c.len(), m, ldc, n) {
        return Err(GemmError("C does not match m, n and its stride"));
    }
    match epi.init {
        Init::RowBias(bias) if bias.len() < m => return Err(GemmError("row bias too short")),
        Init::ColBias(bias) if bias.len() < n => return Err(GemmError("column bias too short")),
        _ => {}
    }
    if epi
        .affine
        .is_some_and(|(sc, sh)| sc.len() < m || sh.len() < m)
    {
        return Err(GemmError("row scale or shift too short"));
    }
    if epi
        .residual
        .is_some_and(|(r, ldr)| !fits(r.len(), m, ldr, n))
    {
        return Err(GemmError("residual does not match m, n and its stride"));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    let l = level();
    let packed_tile = match (a, b) {
        (MatA::Packed(p), _) if p.mr != tile_for(l).0 => false,
        (_, MatB::Packed(p)) if p.nr != tile_for(l).1 => false,
        _ => true,
    };
    if !packed_tile || k == 0 {
        reference(m, n, k, a, b, c, ldc, epi);
        return Ok(());
    }
    let plain = epi.affine.is_none() && epi.residual.is_none();
    if let (1, MatA::Rows { data, .. }, MatB::Packed(p), true) = (m, a, b, plain) {
        gemv_packed(l, par, &data[..k], p, &mut c[..n], epi);
        return Ok(());
    }
    if let (1, MatA::Rows { data: av, .. }, MatB::Cols { data, ldb }, true) = (m, a, b, plain) {
        gemv_cols(l, par, &av[..k], data, ldb, &mut c[..n], epi);
        return Ok(());
    }
    let c = SharedMut::new(c);
    let job = Job {
        m,
        n,
        k,
        a,
        b,
        c,
        ldc,
        epi: *epi,
    };
    run_op_at(l, TilesOp { l, par, job: &job });
    Ok(())
}

/// One row of A times packed B (decode steps): each panel of B is streamed once with one
/// accumulator row, where the micro-kernels would compute MR rows; panels split over the
/// threads. The sums run in the same order as the micro-kernels' (same results).
fn gemv_packed(
    l: Level,
    par: &dyn Parallel,
    a: &[f32],
    b: &PackedB,
    c: &mut [f32],
    epi: &Epilogue<'_>,
) {
    let panels = b.n.div_ceil(b.nr);
    // Memory-bound: worth splitting from 128 KB of weights per task (a panel is 128·k
    // bytes), so that the small layers of a small model (e.g. 288 x 288, read from the last
    // level cache in ~15 us) also use every thread.
    let tasks = crate::par::tasks_for(par, panels, (1usize << 10).div_ceil(b.k.max(1)));
    let c = SharedMut::new(c);
    let run = |r: Range<usize>| {
        for t in r {
            let op = GemvOp {
                l,
                a,
                b,
                panels: crate::par::part(panels, tasks, t),
                c: &c,
                epi,
            };
            run_op_at(l, op);
        }
    };
    if tasks <= 1 {
        run(0..1);
    } else {
        par.parallel_for(tasks, &run);
    }
}

/// One row of A times B read in place as columns (`B[k][j] = data[j·ldb + k]`: a linear
/// layer's `[n, k]` weight, no packing): a dot product per column, four columns at a time,
/// columns split over the threads. Memory-bound like [`gemv_packed`], without its copy of B.
fn gemv_cols(
    l: Level,
    par: &dyn Parallel,
    a: &[f32],
    data: &[f32],
    ldb: usize,
    c: &mut [f32],
    epi: &Epilogue<'_>,
) {
    // Blocks of columns, each task at least 32 KiB of weights.
    const COLS: usize = 64;
    let min_blocks = (1usize << 13).div_ceil(COLS * a.len().max(1));
    crate::par::for_chunks_mut(par, c, COLS, min_blocks, &|b, out| {
        run_op_at(
            l,
            GemvColsOp {
                a,
                data,
                ldb,
                j0: b * COLS,
                out,
                epi,
            },
        )
    });
}

/// C columns `j0 .. j0 + out.len()` of [`gemv_cols`].
struct GemvColsOp<'a, 'b> {
    a: &'a [f32],
    data: &'a [f32],
    ldb: usize,
    j0: usize,
    out: &'a mut [f32],
    epi: &'a Epilogue<'b>,
}

impl SimdOp for GemvColsOp<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (a, k, l) = (self.a, self.a.len(), S::LANES);
        let body = k - k % l;
        for (q, out) in self.out.chunks_mut(4).enumerate() {
            let j0 = self.j0 + 4 * q;
            let rows: [&[f32]; 4] =
                core::array::from_fn(|r| &self.data[(j0 + r.min(out.len() - 1)) * self.ldb..][..k]);
            let mut acc = [s.zero(); 4];
            for kk in (0..body).step_by(l) {
                let av = s.ld(&a[kk..]);
                for (x, row) in acc.iter_mut().zip(&rows) {
                    *x = s.fma(av, s.ld(&row[kk..]), *x);
                }
            }
            for (r, o) in out.iter_mut().enumerate() {
                let mut lanes = [0.0f32; 16];
                s.st(&mut lanes[..l], acc[r]);
                let mut dot: f32 = lanes[..l].iter().sum();
                for kk in body..k {
                    dot += a[kk] * rows[r][kk];
                }
                let init = match self.epi.init {
                    Init::Zero => 0.0,
                    Init::Accumulate => *o,
                    Init::RowBias(bias) => bias[0],
                    Init::ColBias(bias) => bias[j0 + r],
                };
                let mut v = init + dot;
                if let Some((lo, hi)) = self.epi.clamp {
                    v = v.max(lo).min(hi);
                }
                *o = v;
            }
        }
    }
}

/// Floats ahead of the panel row being read that the one-row product prefetches.
const GEMV_PREFETCH: usize = 1024;

/// Hints the cache line at `p` into L1 (no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // Safety: a prefetch never faults and reads nothing architecturally; `p` may point past
    // the end of the weights (it is only a hint).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

struct GemvOp<'a, 'b> {
    l: Level,
    a: &'a [f32],
    b: &'a PackedB,
    panels: Range<usize>,
    c: &'a SharedMut<f32>,
    epi: &'a Epilogue<'b>,
}

impl SimdOp for GemvOp<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        match tile_for(self.l) {
            (_, 32) if S::LANES == 16 => gemv::<S, 2>(s, &self),
            (_, 16) if S::LANES == 8 => gemv::<S, 2>(s, &self),
            _ => gemv::<Portable, 1>(Portable, &self),
        }
    }
}

#[inline(always)]
fn gemv<S: Simd, const NV: usize>(s: S, op: &GemvOp<'_, '_>) {
    let (l, b, k) = (S::LANES, op.b, op.b.k);
    let nr = NV * l;
    if b.nr != nr {
        return;
    }
    for p in op.panels.clone() {
        let j0 = p * nr;
        let w = (b.n - j0).min(nr);
        let panel = &b.data[p * k * nr..(p + 1) * k * nr];
        // Safety: panels are disjoint column ranges of C, each handled by one task.
        let cs = unsafe { op.c.slice(j0..j0 + w) };
        let lanes = |v: usize| w.saturating_sub(v * l).min(l);
        let mut acc = [s.zero(); NV];
        for (v, x) in acc.iter_mut().enumerate() {
            let n = lanes(v);
            if n == 0 {
                continue;
            }
            *x = match op.epi.init {
                Init::Zero => s.zero(),
                Init::Accumulate => s.ld_tail(&cs[v * l..v * l + n]),
                Init::RowBias(bias) => s.splat(bias[0]),
                Init::ColBias(bias) => s.ld_tail(&bias[j0 + v * l..j0 + v * l + n]),
            };
        }
        for (kk, &x) in op.a.iter().enumerate() {
            prefetch(panel.as_ptr().wrapping_add(kk * nr + GEMV_PREFETCH));
            let av = s.splat(x);
            let row = &panel[kk * nr..kk * nr + nr];
            for (v, y) in acc.iter_mut().enumerate() {
                *y = s.fma(av, s.ld(&row[v * l..]), *y);
            }
        }
        if let Some((lo, hi)) = op.epi.clamp {
            let (lo, hi) = (s.splat(lo), s.splat(hi));
            for x in acc.iter_mut() {
                *x = crate::math::clamp(s, *x, lo, hi);
            }
        }
        for (v, x) in acc.iter().enumerate() {
            let n = lanes(v);
            if n > 0 {
                s.st_tail(&mut cs[v * l..v * l + n], *x);
            }
        }
    }
}

/// Plain loops over any operands (for k = 0 and for packed data made for another SIMD level).
#[allow(clippy::too_many_arguments)]
fn reference(
    m: usize,
    n: usize,
    k: usize,
    a: MatA<'_>,
    b: MatB<'_>,
    c: &mut [f32],
    ldc: usize,
    epi: &Epilogue<'_>,
) {
    let ga = |i: usize, kk: usize| match a {
        MatA::Packed(p) => p.get(i, kk),
        MatA::Rows { data, lda } => data[i * lda + kk],
        MatA::Cols { data, lda } => data[kk * lda + i],
    };
    let gb = |kk: usize, j: usize| match b {
        MatB::Packed(p) => p.get(kk, j),
        MatB::Rows { data, ldb } => data[kk * ldb + j],
        MatB::Cols { data, ldb } => data[j * ldb + kk],
    };
    for i in 0..m {
        for j in 0..n {
            let mut acc = match epi.init {
                Init::Zero => 0.0,
                Init::Accumulate => c[i * ldc + j],
                Init::RowBias(bias) => bias[i],
                Init::ColBias(bias) => bias[j],
            };
            for kk in 0..k {
                acc = ga(i, kk).mul_add(gb(kk, j), acc);
            }
            if let Some((sc, sh)) = epi.affine {
                acc = acc * sc[i] + sh[i];
            }
            if let Some((r, ldr)) = epi.residual {
                acc += r[i * ldr + j];
            }
            if let Some((lo, hi)) = epi.clamp {
                acc = acc.max(lo).min(hi);
            }
            c[i * ldc + j] = acc;
        }
    }
}

struct Job<'a> {
    m: usize,
    n: usize,
    k: usize,
    a: MatA<'a>,
    b: MatB<'a>,
    c: SharedMut<f32>,
    ldc: usize,
    epi: Epilogue<'a>,
}

struct TilesOp<'a, 'b> {
    l: Level,
    par: &'a dyn Parallel,
    job: &'a Job<'b>,
}

impl SimdOp for TilesOp<'_, '_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        match tile_for(self.l) {
            (8, 32) if S::LANES == 16 => tiles::<S, 8, 2>(s, self.par, self.job),
            (6, 16) if S::LANES == 8 => tiles::<S, 6, 2>(s, self.par, self.job),
            _ => tiles::<Portable, 4, 1>(Portable, self.par, self.job),
        }
    }
}

/// One task's block of C, entered through [`Simd::enter`] on the thread that runs it.
struct BlockOp<'a, 'b, const MR: usize, const NV: usize> {
    job: &'a Job<'b>,
    rows: Range<usize>,
    cols: Range<usize>,
}

impl<const MR: usize, const NV: usize> SimdOp for BlockOp<'_, '_, MR, NV> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        block::<S, MR, NV>(s, self.job, self.rows, self.cols)
    }
}

/// Whether a product is shallow enough to read B in place and walk C row tile by row tile
/// over every panel (see `block_vec`).
fn shallow(job: &Job<'_>) -> bool {
    job.k <= SHALLOW_K && matches!(job.b, MatB::Rows { .. } | MatB::Packed(_))
}

/// Rows up to which a multi-threaded product splits its columns only (see [`tiles`]).
const SMALL_M: usize = 64;

/// Splits C into task rectangles and runs them.
#[inline(always)]
fn tiles<S: Simd, const MR: usize, const NV: usize>(s: S, par: &dyn Parallel, job: &Job<'_>) {
    let nr = NV * S::LANES;
    let panels_n = job.n.div_ceil(nr);
    let panels_m = job.m.div_ceil(MR);
    let threads = par.num_threads().max(1);
    // Rows: blocks of at most MC rows; with threads, cut finer while there are too few tasks.
    let mut gm = (MC / MR).min(panels_m).max(1);
    let mut gn = panels_n;
    let mut cols_only = false;
    if threads > 1 && panels_m >= 8 * 8 * threads {
        // Tall C (a feature map's pixels, 1024 rows and more on 2 threads): split the rows
        // only, into about 8 tasks per thread of at least 8 row panels, so that equal tasks
        // spread evenly (9 tasks on 2 threads leave one thread 5 of them) while each task
        // still reuses its B panels over 64+ rows and writes whole rows of C.
        gm = gm.min(panels_m.div_ceil(8 * threads).max(8));
        gn = gn.min(8);
    } else if threads > 1 && shallow(job) && panels_m >= 4 * threads {
        // A shallow product walks C by whole row tiles (`block_vec`): split rows only, or
        // each task would write one column panel of its rows (28×28 maps to 192 channels:
        // 1.6× XNNPACK's time on 2 threads).
        gn = panels_n;
        gm = panels_m.div_ceil(4 * threads).max(1);
    } else if threads > 1 && shallow(job) {
        // Few row panels over many columns (a channels-first 1×1 convolution to 16–32
        // channels over 12 544 pixels): split the columns, so that each thread reads its own
        // part of B once (split by rows, every thread streamed all of B: no faster on two
        // threads than on one).
        gm = panels_m;
        gn = panels_n.div_ceil(4 * threads).max(1);
    } else if threads > 1 && job.m <= SMALL_M && panels_n >= 4 * threads {
        // Few rows over deep, wide weights (the 7×7 maps of a network: 49 rows, 960 × 320
        // weights): split the columns only, so that each thread streams its own part of B
        // once (split by rows too, both threads read all of B: 960 → 320 at 7×7 on 2 threads
        // 0.15 ms, 1.4× XNNPACK's).
        gm = panels_m;
        gn = panels_n.div_ceil(4 * threads).max(1);
        // Column tasks that the threads divide (10 panels in 5 tasks made the count even by
        // splitting the 49 rows instead, and both threads streamed all of B).
        while gn > 1 && panels_n.div_ceil(gn) % threads != 0 {
            gn -= 1;
        }
    } else if threads > 1 && job.m <= SMALL_M && panels_n >= 2 * threads {
        // As above with fewer panels (7×7 maps to 160 channels: 5 panels): a panel per task,
        // uneven shares and all (960 → 160 on 2 threads: 9 % faster than also splitting the
        // rows, where both threads stream all of B; with 3 panels the 2 : 1 share is 8 %
        // slower, so those split rows).
        gm = panels_m;
        gn = 1;
        cols_only = true;
    } else if threads > 1 {
        let want = 4 * threads;
        gn = panels_n.div_ceil(want).max(1);
        let tn = panels_n.div_ceil(gn);
        if tn * panels_m.div_ceil(gm) < want {
            let tm_want = want.div_ceil(tn);
            gm = panels_m.div_ceil(tm_want).max(1);
        }
    } else {
        // One thread: column groups of a few panels keep the C block warm.
        gn = gn.min(8);
    }
    let mut tm = panels_m.div_ceil(gm);
    let tn = panels_n.div_ceil(gn);
    // A task count that the threads divide: 9 near-equal tasks on 2 threads leave one thread
    // 5 of them (a 14×14 map to 96 channels: 1.2× XNNPACK's time on 2 threads).
    while threads > 1 && !cols_only && (tm * tn) % threads != 0 && tm < panels_m {
        tm += 1;
    }
    // Near-equal blocks (of at most gm and gn panels): 25 row panels in 4 blocks are 6, 6, 6
    // and 7, not 7, 7, 7 and 4, which on 2 threads left one thread 14 panels of 25. An A read
    // in place may start a tile on any row: its blocks are cut at the multiple of MR nearest
    // to an equal share of the rows (49 rows in 2 blocks are 24 and 25, not 32 and 17; 196 in
    // 4 are 48, 48, 48 and 52, not 56, 48, 48 and 44), so only the last block ends in a
    // partial tile.
    let in_place_a = !matches!(job.a, MatA::Packed(_));
    let row_cut = |it: usize| {
        if it >= tm {
            job.m
        } else {
            ((job.m * it / tm + MR / 2) / MR * MR).min(job.m)
        }
    };
    let run = |r: Range<usize>| {
        for t in r {
            let (it, jt) = (t / tn, t % tn);
            let pn = part(panels_n, tn, jt);
            let rows = if in_place_a {
                row_cut(it)..row_cut(it + 1)
            } else {
                let pm = part(panels_m, tm, it);
                pm.start * MR..(pm.end * MR).min(job.m)
            };
            let cols = pn.start * nr..(pn.end * nr).min(job.n);
            s.enter(BlockOp::<MR, NV> { job, rows, cols });
        }
    };
    par.parallel_for(tm * tn, &run);
}

/// One task: C[rows, cols].
#[inline(always)]
fn block<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    job: &Job<'_>,
    rows: Range<usize>,
    cols: Range<usize>,
) {
    let cols = column_tail::<S, MR>(job, &rows, cols);
    if !cols.is_empty() {
        block_vec::<S, MR, NV>(s, job, rows, cols)
    }
}

/// With A packed in panels of 8 rows (the AVX-512 configuration), the last few columns of C
/// (fewer than half a vector) are computed with 8-lane vectors along the rows instead of
/// mostly-masked vectors along the columns. Returns the columns left to the vector tiles.
#[inline(always)]
fn column_tail<S: Simd, const MR: usize>(
    job: &Job<'_>,
    rows: &Range<usize>,
    cols: Range<usize>,
) -> Range<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        let t = cols.len() % S::LANES;
        if let (Level::Avx512, 8, MatA::Packed(p), 1..=8) = (S::LEVEL, MR, job.a, t) {
            if let Some(s8) = crate::simd::Avx2::new() {
                let mut j0 = cols.end - t;
                let tail_start = j0;
                while j0 < cols.end {
                    let left = cols.end - j0;
                    let mut i0 = rows.start;
                    while i0 < rows.end {
                        let mv = 8.min(rows.end - i0);
                        match left {
                            8.. => col_tail::<_, 8>(s8, job, p, i0, mv, j0),
                            4..=7 => col_tail::<_, 4>(s8, job, p, i0, mv, j0),
                            2..=3 => col_tail::<_, 2>(s8, job, p, i0, mv, j0),
                            _ => col_tail::<_, 1>(s8, job, p, i0, mv, j0),
                        }
                        i0 += 8;
                    }
                    j0 += match left {
                        8.. => 8,
                        4..=7 => 4,
                        2..=3 => 2,
                        _ => 1,
                    };
                }
                return cols.start..tail_start;
            }
        }
    }
    let _ = (job, rows);
    cols
}

/// C[i0..i0+mv, j0..j0+T] over all of k, with 8-lane vectors holding 8 rows of one column.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn col_tail<S: Simd, const T: usize>(
    s: S,
    job: &Job<'_>,
    p: &PackedA,
    i0: usize,
    mv: usize,
    j0: usize,
) {
    debug_assert!(S::LANES == 8 && p.mr == 8);
    let k = job.k;
    let ap = &p.data[(i0 / 8) * k * 8..][..k * 8];
    let (c, ldc) = (job.c.as_ptr(), job.ldc);
    let mut acc = [s.zero(); T];
    let mut col = [0.0f32; 8];
    match job.epi.init {
        Init::Zero => {}
        Init::Accumulate => {
            for (j, a) in acc.iter_mut().enumerate() {
                for (r, v) in col.iter_mut().enumerate().take(mv) {
                    // Safety: (i0 + r, j0 + j) is inside C and in this task's rectangle.
                    *v = unsafe { *c.add((i0 + r) * ldc + j0 + j) };
                }
                *a = s.ld(&col);
            }
        }
        Init::RowBias(b) => {
            let v = s.ld_tail(&b[i0..i0 + mv]);
            acc = [v; T];
        }
        Init::ColBias(b) => {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = s.splat(b[j0 + j]);
            }
        }
    }
    #[inline(always)]
    fn run<S: Simd, const T: usize>(
        s: S,
        ap: &[f32],
        k: usize,
        acc: &mut [S::V; T],
        b: impl Fn(usize, usize) -> f32,
    ) {
        for kk in 0..k {
            let a = s.ld(&ap[kk * 8..]);
            for (j, x) in acc.iter_mut().enumerate() {
                *x = s.fma(a, s.splat(b(kk, j)), *x);
            }
        }
    }
    match job.b {
        MatB::Packed(pb) => run(s, ap, k, &mut acc, |kk, j| pb.get(kk, j0 + j)),
        MatB::Rows { data, ldb } => run(s, ap, k, &mut acc, |kk, j| data[kk * ldb + j0 + j]),
        MatB::Cols { data, ldb } => run(s, ap, k, &mut acc, |kk, j| data[(j0 + j) * ldb + kk]),
    }
    if let Some((sc, sh)) = job.epi.affine {
        // Lanes are the rows i0 .. i0 + mv.
        let (sc, sh) = (s.ld_tail(&sc[i0..i0 + mv]), s.ld_tail(&sh[i0..i0 + mv]));
        for x in acc.iter_mut() {
            *x = s.add(s.mul(*x, sc), sh);
        }
    }
    if let Some((r, ldr)) = job.epi.residual {
        for (j, x) in acc.iter_mut().enumerate() {
            for (q, v) in col.iter_mut().enumerate().take(mv) {
                *v = r[(i0 + q) * ldr + j0 + j];
            }
            *x = s.add(*x, s.ld(&col));
        }
    }
    if let Some((lo, hi)) = job.epi.clamp {
        let (lo, hi) = (s.splat(lo), s.splat(hi));
        for x in acc.iter_mut() {
            *x = crate::math::clamp(s, *x, lo, hi);
        }
    }
    for (j, x) in acc.iter().enumerate() {
        s.st(&mut col, *x);
        for (r, v) in col.iter().enumerate().take(mv) {
            // Safety: as for the loads above.
            unsafe { *c.add((i0 + r) * ldc + j0 + j) = *v };
        }
    }
}

/// C[rows, cols] with vector tiles (columns along the vectors).
#[inline(always)]
fn block_vec<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    job: &Job<'_>,
    rows: Range<usize>,
    cols: Range<usize>,
) {
    let nr = NV * S::LANES;
    let k = job.k;
    let kc_max = match job.b {
        MatB::Packed(_) => (A_BLOCK / rows.len().max(1)).clamp(KC, KC_PACKED),
        _ => KC,
    };
    let nkb = k.div_ceil(kc_max);
    if shallow(job) {
        // Shallow product: the task's B block is a few rows (pages, or a few KB of packed
        // panels) that stay in L1, so read it in place and walk C row panel by row panel,
        // writing it in long runs (panel by panel, a 12544 × 96 output of 16-deep rows
        // was written two cache lines per row at a time, 1.2× slower).
        let mut i0 = rows.start;
        while i0 < rows.end {
            let mv = MR.min(rows.end - i0);
            let mut j0 = cols.start;
            while j0 < cols.end {
                let nv = nr.min(cols.end - j0);
                let (bp, ldb, partial) = match job.b {
                    MatB::Packed(p) => (p.data[(j0 / nr) * p.k * nr..].as_ptr(), nr, false),
                    MatB::Rows { data, ldb } => (data[j0..].as_ptr(), ldb, nv < nr),
                    MatB::Cols { .. } => unreachable!("not shallow"),
                };
                let t = TileArgs {
                    i0,
                    j0,
                    mv,
                    nv,
                    k0: 0,
                    kc: k,
                    bp,
                    ldb,
                    partial,
                    pf: core::ptr::null(),
                    pf_every: 1,
                    first: true,
                    last: true,
                };
                tile_dispatch::<S, MR, NV>(s, job, t);
                j0 += nr;
            }
            i0 += MR;
        }
        return;
    }
    // B panels copied here; only the part written for the current panel is ever read.
    let mut bbuf = [core::mem::MaybeUninit::<f32>::uninit(); KC * NR_MAX];
    for kb in 0..nkb {
        let k0 = kb * k / nkb;
        let k1 = (kb + 1) * k / nkb;
        let kc = k1 - k0;
        let first = kb == 0;
        let last = kb + 1 == nkb;
        let mut j0 = cols.start;
        while j0 < cols.end {
            let nv = nr.min(cols.end - j0);
            // The B panel: rows k0..k1, columns j0..j0+nv, as (pointer, row stride, partial).
            let (bp, ldb, partial): (*const f32, usize, bool) = match job.b {
                MatB::Packed(p) => {
                    let base = (j0 / nr) * p.k * nr + k0 * nr;
                    (p.data[base..].as_ptr(), nr, false)
                }
                MatB::Rows { data, ldb } if rows.len() <= MR || ldb <= IN_PLACE_LDB => {
                    (data[k0 * ldb + j0..].as_ptr(), ldb, nv < nr)
                }
                MatB::Rows { data, ldb } => {
                    for kk in 0..kc {
                        let src = &data[(k0 + kk) * ldb + j0..][..nv];
                        let dst = &mut bbuf[kk * nr..][..nr];
                        for (j, d) in dst.iter_mut().enumerate() {
                            d.write(if j < nv { src[j] } else { 0.0 });
                        }
                    }
                    (bbuf.as_ptr() as *const f32, nr, false)
                }
                MatB::Cols { data, ldb } => {
                    for kk in 0..kc {
                        let dst = &mut bbuf[kk * nr..][..nr];
                        for (j, d) in dst.iter_mut().enumerate() {
                            d.write(if j < nv {
                                data[(j0 + j) * ldb + k0 + kk]
                            } else {
                                0.0
                            });
                        }
                    }
                    // The kernel reads rows 0..kc, columns 0..nr: all written above.
                    (bbuf.as_ptr() as *const f32, nr, false)
                }
            };
            // The next packed panel of this k block (the same rows of B), prefetched while
            // this one runs, spread over all its row tiles (see `next_panel_share`).
            let next = match job.b {
                MatB::Packed(p) if j0 + nr < cols.end => p
                    .data
                    .as_ptr()
                    .wrapping_add((j0 / nr + 1) * p.k * nr + k0 * nr),
                _ => core::ptr::null(),
            };
            let mut i0 = rows.start;
            let mut ti = 0;
            while i0 < rows.end {
                let mv = MR.min(rows.end - i0);
                let (pf, pf_every) = if next.is_null() {
                    (core::ptr::null(), 1)
                } else {
                    next_panel_share(rows.len().div_ceil(MR), kc * nr / 16, kc, ti)
                        .map_or((core::ptr::null(), 1), |(at, every)| {
                            (next.wrapping_add(at * 16), every)
                        })
                };
                tile_dispatch::<S, MR, NV>(
                    s,
                    job,
                    TileArgs {
                        i0,
                        j0,
                        mv,
                        nv,
                        k0,
                        kc,
                        bp,
                        ldb,
                        partial,
                        pf,
                        pf_every,
                        first,
                        last,
                    },
                );
                i0 += MR;
                ti += 1;
            }
            j0 += nr;
        }
    }
}

/// Which lines of the next B panel (`lines` cache lines in all) row tile `tile` of `tiles`
/// prefetches over its `kc` k steps: `(first line, k steps per line)`, or `None` when the
/// earlier tiles cover the panel. The lines are spread over every tile at the slowest even
/// pace that covers the panel (a power of two k steps per line, at most 64): on a 110M Llama's
/// linears, prefetching the whole next panel during the first two tiles (a line per k step)
/// asked memory for about 17 GB/s and left the GEMM at 110 GFLOP/s, spread it reaches 125–130
/// (a core's peak here is about 139).
fn next_panel_share(tiles: usize, lines: usize, kc: usize, tile: usize) -> Option<(usize, usize)> {
    let per_tile = lines.div_ceil(tiles.max(1));
    let mut every = 1;
    while every < 64 && kc.div_ceil(every * 2) >= per_tile {
        every *= 2;
    }
    let issued = kc.div_ceil(every);
    let first = tile.checked_mul(issued)?;
    (first < lines).then_some((first, every))
}

/// A tile whose columns fit in one vector runs the one-vector kernel (no all-masked vectors);
/// the last rows of an A read in place (fewer than MR) run a kernel of fewer rows: with 49
/// rows (a 7×7 feature map), the last of 7 eight-row tiles holds one row, and computing eight
/// would cost an eighth more than the whole product needs.
#[inline(always)]
fn tile_dispatch<S: Simd, const MR: usize, const NV: usize>(s: S, job: &Job<'_>, t: TileArgs) {
    if MR == 8 && t.mv < 8 && !matches!(job.a, MatA::Packed(_)) {
        match t.mv {
            1 => return tile_cols::<S, 1, NV>(s, job, t),
            2 => return tile_cols::<S, 2, NV>(s, job, t),
            3 | 4 => return tile_cols::<S, 4, NV>(s, job, t),
            _ => {}
        }
    }
    tile_cols::<S, MR, NV>(s, job, t)
}

#[inline(always)]
fn tile_cols<S: Simd, const MR: usize, const NV: usize>(s: S, job: &Job<'_>, t: TileArgs) {
    if NV > 1 && t.nv <= S::LANES {
        micro_tile::<S, MR, 1>(s, job, t)
    } else {
        micro_tile::<S, MR, NV>(s, job, t)
    }
}

#[derive(Clone, Copy)]
struct TileArgs {
    i0: usize,
    j0: usize,
    mv: usize,
    nv: usize,
    k0: usize,
    kc: usize,
    bp: *const f32,
    ldb: usize,
    /// B lanes past `nv` must not be read.
    partial: bool,
    /// Where this tile's kernel prefetches cache lines, one every `pf_every` k steps (null:
    /// nowhere): a part of the next packed B panel, so that the first tile of each panel does
    /// not wait on memory for weights a network's layer reads once.
    pf: *const f32,
    /// k steps per prefetched line.
    pf_every: usize,
    first: bool,
    last: bool,
}

/// One MR × NR tile of C over one k block.
#[inline(always)]
fn micro_tile<S: Simd, const MR: usize, const NV: usize>(s: S, job: &Job<'_>, t: TileArgs) {
    let l = S::LANES;
    let mut lanes = [0usize; NV];
    for (v, x) in lanes.iter_mut().enumerate() {
        *x = t.nv.saturating_sub(v * l).min(l);
    }
    let mut acc = [[s.zero(); NV]; MR];
    let c = job.c.as_ptr();
    let ldc = job.ldc;
    // Initial values.
    let init = if t.first {
        job.epi.init
    } else {
        Init::Accumulate
    };
    match init {
        Init::Zero => {}
        Init::Accumulate => {
            for (i, row) in acc.iter_mut().enumerate().take(t.mv) {
                for (v, x) in row.iter_mut().enumerate() {
                    if lanes[v] > 0 {
                        // Safety: row i0+i < m and columns j0+v*l .. +lanes[v] <= n lie inside
                        // C (checked in `gemm`); this task owns the tile.
                        *x = unsafe {
                            s.load_partial(c.add((t.i0 + i) * ldc + t.j0 + v * l), lanes[v])
                        };
                    }
                }
            }
        }
        Init::RowBias(bias) => {
            for (i, row) in acc.iter_mut().enumerate().take(t.mv) {
                let b = s.splat(bias[t.i0 + i]);
                for x in row.iter_mut() {
                    *x = b;
                }
            }
        }
        Init::ColBias(bias) => {
            for v in 0..NV {
                if lanes[v] > 0 {
                    let b = s.ld_tail(&bias[t.j0 + v * l..t.j0 + v * l + lanes[v]]);
                    for row in acc.iter_mut() {
                        row[v] = b;
                    }
                }
            }
        }
    }
    // Safety (the whole micro-kernel): A reads stay inside the operand checked in `gemm` (rows
    // past mv are redirected to the last valid row, packed panels are zero-padded); B reads
    // stay inside the panel (packed or copied panels are NR wide; in-place rows are read with
    // `lanes` masks when partial).
    unsafe {
        match job.a {
            MatA::Packed(p) => {
                let ap = p.data[(t.i0 / MR) * p.k * MR + t.k0 * MR..].as_ptr();
                kernel::<S, MR, NV, 0>(
                    s, t.kc, ap, MR, [0; MR], t.bp, t.ldb, t.partial, t.pf, t.pf_every, lanes,
                    &mut acc,
                );
            }
            MatA::Rows { data, lda } => {
                let mut off = [0usize; MR];
                for (i, o) in off.iter_mut().enumerate() {
                    *o = i.min(t.mv - 1) * lda;
                }
                let ap = data[t.i0 * lda + t.k0..].as_ptr();
                kernel::<S, MR, NV, 1>(
                    s, t.kc, ap, 1, off, t.bp, t.ldb, t.partial, t.pf, t.pf_every, lanes, &mut acc,
                );
            }
            MatA::Cols { data, lda } => {
                let mut off = [0usize; MR];
                for (i, o) in off.iter_mut().enumerate() {
                    *o = i.min(t.mv - 1);
                }
                let ap = data[t.k0 * lda + t.i0..].as_ptr();
                kernel::<S, MR, NV, 1>(
                    s, t.kc, ap, lda, off, t.bp, t.ldb, t.partial, t.pf, t.pf_every, lanes,
                    &mut acc,
                );
            }
        }
    }
    if t.last {
        if let Some((sc, sh)) = job.epi.affine {
            for (i, row) in acc.iter_mut().enumerate().take(t.mv) {
                let (a, b) = (s.splat(sc[t.i0 + i]), s.splat(sh[t.i0 + i]));
                for x in row.iter_mut() {
                    *x = s.add(s.mul(*x, a), b);
                }
            }
        }
        if let Some((r, ldr)) = job.epi.residual {
            for (i, row) in acc.iter_mut().enumerate().take(t.mv) {
                for (v, x) in row.iter_mut().enumerate() {
                    if lanes[v] > 0 {
                        let at = (t.i0 + i) * ldr + t.j0 + v * l;
                        *x = s.add(*x, s.ld_tail(&r[at..at + lanes[v]]));
                    }
                }
            }
        }
        if let Some((lo, hi)) = job.epi.clamp {
            let (lo, hi) = (s.splat(lo), s.splat(hi));
            for row in acc.iter_mut() {
                for x in row.iter_mut() {
                    *x = crate::math::clamp(s, *x, lo, hi);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(t.mv) {
        for (v, x) in row.iter().enumerate() {
            let p = (t.i0 + i) * ldc + t.j0 + v * l;
            // Safety: inside C (checked in `gemm`), in this task's tile.
            unsafe {
                if lanes[v] == l {
                    s.store(c.add(p), *x);
                } else if lanes[v] > 0 {
                    s.store_partial(c.add(p), *x, lanes[v]);
                }
            }
        }
    }
}

/// The micro-kernel: `acc[i][v] += Σ_k A(i, k) · B(k, v-th vector)` over `kc` values of k.
///
/// A(i, k) is `a[k * a_step + off[i]]` (MODE 0: packed, `off[i] = i`, `a_step = MR`) or
/// `a[off[i] + k * a_step]` (MODE 1: in place, per-row offsets). B's k-th row starts at
/// `b + k * ldb`.
///
/// # Safety
/// Every address read for `k < kc` must be inside its operand (see the caller).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn kernel<S: Simd, const MR: usize, const NV: usize, const MODE: u8>(
    s: S,
    kc: usize,
    a: *const f32,
    a_step: usize,
    off: [usize; MR],
    b: *const f32,
    ldb: usize,
    partial: bool,
    pf: *const f32,
    pf_every: usize,
    lanes: [usize; NV],
    acc: &mut [[S::V; NV]; MR],
) {
    let l = S::LANES;
    let mut a = a;
    let mut b = b;
    if partial {
        for _ in 0..kc {
            let mut bv = [s.zero(); NV];
            for v in 0..NV {
                if lanes[v] > 0 {
                    // Safety: `lanes[v]` valid columns of this B row.
                    bv[v] = unsafe { s.load_partial(b.add(v * l), lanes[v]) };
                }
            }
            // Safety: the caller's contract, forwarded.
            unsafe { k_step::<S, MR, NV, MODE>(s, &mut a, a_step, &off, &bv, &mut b, ldb, acc) };
        }
        return;
    }
    // Full rows: the loop with or without a prefetch per k step, chosen once (a test per step
    // cost the tiles that prefetch nothing; a closure shared by two loops is compiled without
    // the caller's target features, 80× slower).
    // Safety: the caller's contract, forwarded.
    unsafe {
        if pf.is_null() {
            full_rows::<S, MR, NV, MODE, false>(s, kc, a, a_step, off, b, ldb, pf, 1, acc)
        } else {
            full_rows::<S, MR, NV, MODE, true>(s, kc, a, a_step, off, b, ldb, pf, pf_every, acc)
        }
    }
}

/// One k step of the micro-kernel: `acc[i][v] += A(i, k) · bv[v]`, then A and B advance to
/// the next k.
///
/// # Safety
/// As [`kernel`], for this step.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn k_step<S: Simd, const MR: usize, const NV: usize, const MODE: u8>(
    s: S,
    a: &mut *const f32,
    a_step: usize,
    off: &[usize; MR],
    bv: &[S::V; NV],
    b: &mut *const f32,
    ldb: usize,
    acc: &mut [[S::V; NV]; MR],
) {
    for i in 0..MR {
        let o = if MODE == 0 { i } else { off[i] };
        // Safety: see the function contract.
        let av = s.splat(unsafe { *a.add(o) });
        for v in 0..NV {
            acc[i][v] = s.fma(av, bv[v], acc[i][v]);
        }
    }
    // Safety: pointers advance within (or one past) their operands.
    unsafe {
        *a = a.add(a_step);
        *b = b.add(ldb);
    }
}

/// [`kernel`] over full B rows; with `PF`, one cache line at `pf` (then the next) is
/// prefetched every `pf_every` k steps.
///
/// # Safety
/// As [`kernel`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn full_rows<S: Simd, const MR: usize, const NV: usize, const MODE: u8, const PF: bool>(
    s: S,
    kc: usize,
    mut a: *const f32,
    a_step: usize,
    off: [usize; MR],
    mut b: *const f32,
    ldb: usize,
    mut pf: *const f32,
    pf_every: usize,
    acc: &mut [[S::V; NV]; MR],
) {
    let l = S::LANES;
    // Runs of `step` k steps, each after one prefetch (with `PF`; else one run).
    let step = if PF { pf_every.max(1) } else { kc.max(1) };
    let mut k0 = 0;
    while k0 < kc {
        let k1 = (k0 + step).min(kc);
        if PF {
            prefetch(pf);
            pf = pf.wrapping_add(16);
        }
        for _ in k0..k1 {
            let mut bv = [s.zero(); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                // Safety: a full B row of NV vectors.
                *x = unsafe { s.load(b.add(v * l)) };
            }
            // Safety: the caller's contract, forwarded.
            unsafe { k_step::<S, MR, NV, MODE>(s, &mut a, a_step, &off, &bv, &mut b, ldb, acc) };
        }
        k0 = k1;
    }
}

#[cfg(test)]
mod tests {
    use super::{next_panel_share, PackedB};

    /// Packing a transposed (and scaled) weight gives the same panels as packing element by
    /// element, on sizes with partial 8 × 8 blocks and partial panels.
    #[test]
    fn packing_transposed_matches_packing_by_element() {
        for (k, n) in [
            (1, 1),
            (8, 8),
            (9, 33),
            (24, 96),
            (17, 70),
            (64, 1000),
            (3, 200),
        ] {
            let src: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.37).sin()).collect();
            let scale: Vec<f32> = (0..n).map(|j| 0.5 + j as f32 * 0.01).collect();
            for sc in [None, Some(&scale[..])] {
                let got = PackedB::from_transposed(&src, k, n, sc);
                let want = PackedB::new(k, n, |kk, j| src[j * k + kk] * sc.map_or(1.0, |s| s[j]));
                assert_eq!(got.data.len(), want.data.len());
                for (i, (g, w)) in got.data.iter().zip(want.data.iter()).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        w.to_bits(),
                        "k {k} n {n} scaled {} at {i}",
                        sc.is_some()
                    );
                }
            }
        }
    }

    /// The tiles' shares cover every line of the next panel once, in order, whenever the
    /// tiles issue enough prefetches (one per k step at most).
    #[test]
    fn prefetch_shares_cover_the_next_panel() {
        for tiles in [1, 2, 7, 16, 64] {
            for kc in [1, 5, 64, 256, 683, 1024] {
                for lines in [kc, 2 * kc] {
                    let mut next = 0;
                    for t in 0..tiles {
                        match next_panel_share(tiles, lines, kc, t) {
                            Some((first, every)) => {
                                assert_eq!(first, next, "tiles {tiles} kc {kc} lines {lines}");
                                assert!((1..=64).contains(&every));
                                next = first + kc.div_ceil(every);
                            }
                            None => assert!(next >= lines),
                        }
                    }
                    assert!(
                        next >= lines.min(tiles * kc),
                        "tiles {tiles} kc {kc} lines {lines}"
                    );
                }
            }
        }
    }
}
