//! Convolutions with 1–4 input channels (a first layer): a GEMM that reads A through each
//! pixel's tap pointers, with no im2col.

use pteron_core::Parallel;
use pteron_kernels_cpu::gemm::PackedB;
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::{Clamp, ConvKind, Window};
use crate::kernels::spatial::{inside_outputs, tap_offsets, ZEROS};

use super::ConvWeights;

impl ConvWeights {
    /// Whether [`SmallCin`] runs this convolution (few input channels, one group).
    pub(super) fn small_cin(&self) -> bool {
        let c = &self.conv;
        c.kind == ConvKind::Conv
            && c.groups == 1
            && (1..=4).contains(&c.group_in)
            && c.win
                .kh
                .checked_mul(c.win.kw)
                .is_some_and(|t| t <= SMALL_TAPS)
    }

    /// Runs a [`small_cin`](Self::small_cin) convolution.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_small_cin(
        &self,
        par: &dyn Parallel,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
    ) {
        let c = &self.conv;
        let (gi, cout) = (c.group_in, c.group_out);
        let l = level();
        let w = &self.packed[0];
        if !run_op_at(l, FitsPanels(w.panel_width())) {
            // Packed at another SIMD level than this thread's (a test's override).
            return self.small_cin_scalar(x, n, ih, iw, out, oh, ow);
        }
        let (in_img, out_img) = (ih * iw * gi, oh * ow * cout);
        // Pixels per task (64 cost a few % more in per-task setup on one and two threads).
        const PER: usize = 256;
        for b in 0..n {
            let xb = &x[b * in_img..(b + 1) * in_img];
            let ob = &mut out[b * out_img..(b + 1) * out_img];
            for_chunks_mut(par, ob, PER * cout, 1, &|k, o| {
                let op = || SmallCinArgs {
                    x: xb,
                    ih,
                    iw,
                    ow,
                    win: &c.win,
                    w,
                    bias: &self.bias,
                    clamp: self.clamp,
                    p0: k * PER,
                    cout,
                };
                match gi {
                    1 => run_op_at(l, SmallCin::<1>(op(), o)),
                    2 => run_op_at(l, SmallCin::<2>(op(), o)),
                    3 => run_op_at(l, SmallCin::<3>(op(), o)),
                    _ => run_op_at(l, SmallCin::<4>(op(), o)),
                }
            });
        }
    }

    /// [`run_small_cin`](Self::run_small_cin) one product at a time.
    #[allow(clippy::too_many_arguments)]
    fn small_cin_scalar(
        &self,
        x: &[f32],
        n: usize,
        ih: usize,
        iw: usize,
        out: &mut [f32],
        oh: usize,
        ow: usize,
    ) {
        let c = &self.conv;
        let (gi, cout) = (c.group_in, c.group_out);
        let w = &self.packed[0];
        let nr = w.panel_width();
        let taps = c.win.kh * c.win.kw;
        let mut offs = [None; SMALL_TAPS];
        for b in 0..n {
            let xb = &x[b * ih * iw * gi..(b + 1) * ih * iw * gi];
            for p in 0..oh * ow {
                tap_offsets(&c.win, ih, iw, gi, p / ow, p % ow, &mut offs[..taps]);
                for co in 0..cout {
                    let panel = w.panel(co / nr);
                    let mut acc = self.bias[co];
                    for (t, o) in offs[..taps].iter().enumerate() {
                        if let Some(o) = *o {
                            for ci in 0..gi {
                                acc += xb[o + ci] * panel[(t * gi + ci) * nr + co % nr];
                            }
                        }
                    }
                    if let Some((lo, hi)) = self.clamp {
                        acc = acc.max(lo).min(hi);
                    }
                    out[(b * oh * ow + p) * cout + co] = acc;
                }
            }
        }
    }
}
/// Most taps of a convolution run by [`SmallCin`] (7×7).
const SMALL_TAPS: usize = 49;

/// Whether packed panels `nr` wide suit the micro-kernel of [`SmallCin`] at a SIMD level.
struct FitsPanels(usize);

impl SimdOp for FitsPanels {
    type Output = bool;
    #[inline(always)]
    fn run<S: Simd>(self, _: S) -> bool {
        self.0 == S::LANES || self.0 == 2 * S::LANES
    }
}

struct SmallCinArgs<'a> {
    /// One image, `[ih, iw, gi]`.
    x: &'a [f32],
    ih: usize,
    iw: usize,
    ow: usize,
    win: &'a Window,
    w: &'a PackedB,
    bias: &'a [f32],
    clamp: Clamp,
    /// The first output pixel of `out`.
    p0: usize,
    cout: usize,
}

/// A convolution with `GI` (≤ 4) input channels, an image network's first layer: a GEMM
/// whose A rows are read through per-pixel tap pointers into the input instead of an im2col
/// copy (the copy of 3-channel pixels into 27-wide rows cost as much as the product, and the
/// product's 27-deep rows are too shallow to hide it). Taps outside the input read zeros.
/// Writes output pixels `p0 ..` as many as the slice holds, every channel.
struct SmallCin<'a, const GI: usize>(SmallCinArgs<'a>, &'a mut [f32]);

impl<const GI: usize> SimdOp for SmallCin<'_, GI> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        // 8 pixels × 2 vectors (AVX-512: 32 channels) fill 16 accumulators; 4 × 2 with 8 lanes.
        match (self.0.w.panel_width() / S::LANES, S::LANES >= 16) {
            (2, true) => small_cin::<S, GI, 2, 8>(s, self.0, self.1),
            (2, false) => small_cin::<S, GI, 2, 4>(s, self.0, self.1),
            (_, true) => small_cin::<S, GI, 1, 8>(s, self.0, self.1),
            (_, false) => small_cin::<S, GI, 1, 4>(s, self.0, self.1),
        }
    }
}

#[inline(always)]
fn small_cin<S: Simd, const GI: usize, const NV: usize, const P: usize>(
    s: S,
    op: SmallCinArgs<'_>,
    out: &mut [f32],
) {
    let l = S::LANES;
    let nr = NV * l;
    debug_assert!(op.w.panel_width() == nr);
    let taps = op.win.kh * op.win.kw;
    let cout = op.cout;
    let clamp = op.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
    let np = out.len() / cout.max(1);
    let win = op.win;
    // Tap t of a pixel whose window lies inside the input sits `delta[t]` floats past its
    // first tap.
    let mut delta = [0usize; SMALL_TAPS];
    for a in 0..win.kh {
        for b in 0..win.kw {
            delta[a * win.kw + b] = (a * win.dh * op.iw + b * win.dw) * GI;
        }
    }
    let span = delta[taps - 1] + GI;
    let mut offs = [None; SMALL_TAPS];
    let mut ptrs = [[ZEROS.as_ptr(); SMALL_TAPS]; P];
    let mut base = [ZEROS.as_ptr(); P];
    // Output rows and columns whose windows lie inside the input: a tile of pixels in one
    // such row, all such columns, takes its pointers from its first pixel's by steps of
    // `sw·GI`, with no per-pixel test (at 3 input channels those tests cost a third of the
    // product).
    let rows_in = inside_outputs(op.ih, usize::MAX, win.pad_top, win.kh, win.sh, win.dh);
    let cols_in = inside_outputs(op.iw, op.ow, win.pad_left, win.kw, win.sw, win.dw);
    // The first tap of a pixel whose window lies inside the input (in `rows_in × cols_in`,
    // so the subtractions cannot underflow and the products stay within the input).
    let inside = |oy: usize, ox: usize| {
        (rows_in.contains(&oy) && cols_in.contains(&ox))
            .then(|| ((oy * win.sh - win.pad_top) * op.iw + ox * win.sw - win.pad_left) * GI)
    };
    let step = win.sw * GI;
    if np == 0 || op.ow == 0 {
        return;
    }
    let (mut ty, mut tx) = (op.p0 / op.ow, op.p0 % op.ow);
    let mut q0 = 0;
    while q0 < np {
        let pn = P.min(np - q0);
        // The tile's first pixel, tracked from tile to tile (two divisions per tile cost a
        // tenth of a tile's time).
        let (oy, ox) = (ty, tx);
        // A tile in one interior row, every pixel in interior columns: its first pixel's
        // first tap, checked to the floats its last pixel reads up to.
        let run = inside(oy, ox)
            .filter(|_| ox + pn <= cols_in.end)
            .and_then(|first| op.x.get(first..first + (pn - 1) * step + span))
            .map(|r| r.as_ptr());
        let mut all_inside = true;
        if let Some(b0) = run {
            for (q, bq) in base.iter_mut().enumerate() {
                // Pixels past `pn` repeat the last one (computed, not stored).
                *bq = b0.wrapping_add(q.min(pn - 1) * step);
            }
        } else {
            // The tile's pixels (no division per pixel: at 3 input channels the divisions cost
            // as much as the products); pixels past the last one repeat it (computed, not
            // stored).
            let mut px = [(0usize, 0usize); P];
            let (mut oy, mut ox) = (oy, ox);
            for (q, c) in px.iter_mut().enumerate() {
                *c = (oy, ox);
                if q + 1 < pn {
                    ox += 1;
                    if ox == op.ow {
                        (oy, ox) = (oy + 1, 0);
                    }
                }
            }
            for (bq, &(oy, ox)) in base.iter_mut().zip(&px) {
                match inside(oy, ox) {
                    Some(o) => *bq = op.x[o..o + span].as_ptr(),
                    None => all_inside = false,
                }
            }
            if !all_inside {
                for (pq, &(oy, ox)) in ptrs.iter_mut().zip(&px) {
                    tap_offsets(win, op.ih, op.iw, GI, oy, ox, &mut offs[..taps]);
                    for (d, o) in pq.iter_mut().zip(&offs[..taps]) {
                        *d = match *o {
                            Some(o) => op.x[o..o + GI].as_ptr(),
                            None => ZEROS.as_ptr(),
                        };
                    }
                }
            }
        }
        for j in 0..cout.div_ceil(nr) {
            let wp = op.w.panel(j);
            let j0 = j * nr;
            let mut acc = [[s.zero(); NV]; P];
            for v in 0..NV {
                let c = j0 + v * l;
                if c < cout {
                    let b = s.ld_tail(&op.bias[c..c + l.min(cout - c)]);
                    for a in acc.iter_mut() {
                        a[v] = b;
                    }
                }
            }
            // Safety: a base pointer starts `span` readable floats and delta[t] + GI ≤ span; a
            // tap pointer starts GI readable floats (a pixel of the image, or ZEROS).
            let acc = if all_inside {
                let base = base;
                product::<S, GI, NV, P>(s, wp, taps, acc, |q, t| unsafe { base[q].add(delta[t]) })
            } else {
                product::<S, GI, NV, P>(s, wp, taps, acc, |q, t| ptrs[q][t])
            };
            if pn == P && j0 + nr <= cout {
                // A whole tile: fixed loops keep the accumulators in registers.
                let o = &mut out[q0 * cout + j0..(q0 + P - 1) * cout + j0 + nr];
                for (q, a) in acc.iter().enumerate() {
                    for (v, &r) in a.iter().enumerate() {
                        let r = match clamp {
                            Some((lo, hi)) => math::clamp(s, r, lo, hi),
                            None => r,
                        };
                        s.st(&mut o[q * cout + v * l..], r);
                    }
                }
                continue;
            }
            for (q, a) in acc.iter().enumerate().take(pn) {
                for (v, &r) in a.iter().enumerate() {
                    let c = j0 + v * l;
                    if c >= cout {
                        continue;
                    }
                    let m = l.min(cout - c);
                    let r = match clamp {
                        Some((lo, hi)) => math::clamp(s, r, lo, hi),
                        None => r,
                    };
                    let o = &mut out[(q0 + q) * cout + c..];
                    if m == l {
                        s.st(o, r);
                    } else {
                        s.st_tail(&mut o[..m], r);
                    }
                }
            }
        }
        q0 += P;
        tx += P;
        while tx >= op.ow {
            tx -= op.ow;
            ty += 1;
        }
    }
}

/// `acc[q] += Σ_t Σ_ci x(q, t)[ci] · w[t·GI + ci]` for the `P` pixels of a [`SmallCin`] tile
/// over one packed panel `wp` (`NV` vectors wide): taps outside, the `GI` channels of a tap
/// inside, so the `P` pixel pointers of a tap stay in registers for its channels (`x(q, t)`
/// points at GI readable floats). The accumulators go in and out by value (by reference
/// they stayed in memory).
#[inline(always)]
fn product<S: Simd, const GI: usize, const NV: usize, const P: usize>(
    s: S,
    wp: &[f32],
    taps: usize,
    mut acc: [[S::V; NV]; P],
    x: impl Fn(usize, usize) -> *const f32,
) -> [[S::V; NV]; P] {
    let l = S::LANES;
    let nr = NV * l;
    for (t, wt) in wp.chunks_exact(GI * nr).take(taps).enumerate() {
        let xp: [*const f32; P] = core::array::from_fn(|q| x(q, t));
        for ci in 0..GI {
            let mut b = [s.zero(); NV];
            for (v, bv) in b.iter_mut().enumerate() {
                *bv = s.ld(&wt[ci * nr + v * l..]);
            }
            for (a, p) in acc.iter_mut().zip(&xp) {
                // Safety: the caller's pointers start GI readable floats; ci < GI.
                let xv = s.splat(unsafe { *p.add(ci) });
                for v in 0..NV {
                    a[v] = s.fma(xv, b[v], a[v]);
                }
            }
        }
    }
    acc
}
