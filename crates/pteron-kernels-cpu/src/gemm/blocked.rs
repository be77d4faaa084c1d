//! The blocked driver: splits C into task rectangles over the threads, blocks k, copies B
//! panels into stack buffers and walks MR × NR tiles.

use core::ops::Range;

use pteron_core::Parallel;

use super::micro::{tile_dispatch, TileArgs};
#[cfg(target_arch = "x86_64")]
use super::{pack::PackedA, Init};
use super::{
    tile_for, Job, MatA, MatB, A_BLOCK, IN_PLACE_LDB, KC, KC_PACKED, MC, NR_MAX, SHALLOW_K,
};
use crate::par::part;
use crate::simd::{Level, Portable, Simd, SimdOp};

pub(super) struct TilesOp<'a, 'b> {
    pub(super) l: Level,
    pub(super) par: &'a dyn Parallel,
    pub(super) job: &'a Job<'b>,
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
        while gn > 1 && !panels_n.div_ceil(gn).is_multiple_of(threads) {
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
    while threads > 1 && !cols_only && !(tm * tn).is_multiple_of(threads) && tm < panels_m {
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
pub(super) fn next_panel_share(
    tiles: usize,
    lines: usize,
    kc: usize,
    tile: usize,
) -> Option<(usize, usize)> {
    let per_tile = lines.div_ceil(tiles.max(1));
    let mut every = 1;
    while every < 64 && kc.div_ceil(every * 2) >= per_tile {
        every *= 2;
    }
    let issued = kc.div_ceil(every);
    let first = tile.checked_mul(issued)?;
    (first < lines).then_some((first, every))
}
