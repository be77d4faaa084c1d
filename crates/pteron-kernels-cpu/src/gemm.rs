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

use pteron_core::Parallel;

use crate::par::SharedMut;
use crate::simd::{level, run_op_at, Level};

mod blocked;
mod gemv;
mod micro;
mod pack;

#[cfg(test)]
mod tests;

use blocked::TilesOp;
pub(crate) use gemv::prefetch;
use gemv::{gemv_cols, gemv_packed};
pub use pack::{PackedA, PackedB};

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
        // NEON's 8 lanes as two registers: AVX2's tile in 24 of AArch64's 32 registers.
        Level::Avx2 | Level::Neon | Level::Simd128 => (6, 16),
        Level::Portable => (4, 8),
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

/// One product: its sizes, operands, C (with its row stride) and epilogue; what the blocked
/// driver and the micro-kernels share.
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
