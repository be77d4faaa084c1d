//! One-row products (decode steps): a row of A times packed B or column-major B, streaming each
//! panel once with one accumulator row.

use core::ops::Range;

use pteron_core::Parallel;

use super::pack::PackedB;
use super::{tile_for, Epilogue, Init};
use crate::par::SharedMut;
use crate::simd::{run_op_at, Level, Portable, Simd, SimdOp};

/// One row of A times packed B (decode steps): each panel of B is streamed once with one
/// accumulator row, where the micro-kernels would compute MR rows; panels split over the
/// threads. The sums run in the same order as the micro-kernels' (same results).
pub(super) fn gemv_packed(
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
pub(super) fn gemv_cols(
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

/// Panels streamed side by side: each has its own accumulators, so a k step issues `G · NV`
/// independent FMAs over `G` weight streams (one panel at a time was bound by one FMA chain
/// per vector and one stream's loads in flight: ~25 % below the bandwidth that several
/// streams reach on a decode step).
const GEMV_GROUP: usize = 4;

#[inline(always)]
fn gemv<S: Simd, const NV: usize>(s: S, op: &GemvOp<'_, '_>) {
    let (l, b) = (S::LANES, op.b);
    let nr = NV * l;
    if b.nr != nr {
        return;
    }
    let mut p = op.panels.start;
    while p < op.panels.end {
        if op.panels.end - p >= GEMV_GROUP {
            gemv_group::<S, NV, GEMV_GROUP>(s, op, p);
            p += GEMV_GROUP;
        } else {
            gemv_group::<S, NV, 1>(s, op, p);
            p += 1;
        }
    }
}

/// Panels `p0 .. p0 + G` of the one-row product.
#[inline(always)]
fn gemv_group<S: Simd, const NV: usize, const G: usize>(s: S, op: &GemvOp<'_, '_>, p0: usize) {
    let (l, b, k) = (S::LANES, op.b, op.b.k);
    let nr = NV * l;
    let j0 = p0 * nr;
    let w = (b.n - j0).min(G * nr);
    let panels = &b.data[p0 * k * nr..(p0 + G) * k * nr];
    // Safety: panels are disjoint column ranges of C, each handled by one task.
    let cs = unsafe { op.c.slice(j0..j0 + w) };
    // Valid lanes of vector `v` (panel `v / NV`) of the group.
    let lanes = |v: usize| w.saturating_sub(v * l).min(l);
    let mut acc = [[s.zero(); NV]; G];
    for (v, x) in acc.iter_mut().flatten().enumerate() {
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
    for (kk, &x) in op.a[..k].iter().enumerate() {
        let av = s.splat(x);
        for (q, a) in acc.iter_mut().enumerate() {
            let row = &panels[(q * k + kk) * nr..(q * k + kk) * nr + nr];
            prefetch(row.as_ptr().wrapping_add(GEMV_PREFETCH));
            for (v, y) in a.iter_mut().enumerate() {
                *y = s.fma(av, s.ld(&row[v * l..]), *y);
            }
        }
    }
    if let Some((lo, hi)) = op.epi.clamp {
        let (lo, hi) = (s.splat(lo), s.splat(hi));
        for x in acc.iter_mut().flatten() {
            *x = crate::math::clamp(s, *x, lo, hi);
        }
    }
    for (v, x) in acc.iter().flatten().enumerate() {
        let n = lanes(v);
        if n > 0 {
            s.st_tail(&mut cs[v * l..v * l + n], *x);
        }
    }
}
