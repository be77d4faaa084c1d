//! The register-blocked micro-kernels: one MR × NR tile of C accumulated in vector registers
//! over a k block.

use super::gemv::prefetch;
use super::{Init, Job, MatA};
use crate::simd::Simd;

/// A tile whose columns fit in one vector runs the one-vector kernel (no all-masked vectors);
/// the last rows of an A read in place (fewer than MR) run a kernel of fewer rows: with 49
/// rows (a 7×7 feature map), the last of 7 eight-row tiles holds one row, and computing eight
/// would cost an eighth more than the whole product needs.
#[inline(always)]
pub(super) fn tile_dispatch<S: Simd, const MR: usize, const NV: usize>(
    s: S,
    job: &Job<'_>,
    t: TileArgs,
) {
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
pub(super) struct TileArgs {
    pub(super) i0: usize,
    pub(super) j0: usize,
    pub(super) mv: usize,
    pub(super) nv: usize,
    pub(super) k0: usize,
    pub(super) kc: usize,
    pub(super) bp: *const f32,
    pub(super) ldb: usize,
    /// B lanes past `nv` must not be read.
    pub(super) partial: bool,
    /// Where this tile's kernel prefetches cache lines, one every `pf_every` k steps (null:
    /// nowhere): a part of the next packed B panel, so that the first tile of each panel does
    /// not wait on memory for weights a network's layer reads once.
    pub(super) pf: *const f32,
    /// k steps per prefetched line.
    pub(super) pf_every: usize,
    pub(super) first: bool,
    pub(super) last: bool,
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
