//! The 3×3 depthwise kernel over packed tiles: pixel by pixel with the channels inside,
//! interior pixels four at a time sharing input columns, border taps pointed at a zero row;
//! also run on a ring of input rows by the fused chains.

use pteron_core::KernelError;
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use super::{interior_cols, tap_offsets, taps, DwWeights, Geom, DWT, DW_TILE, G, ZEROS, ZEROS_LEN};

/// 3×3 depthwise rows over the packed weights, XNNPACK's way round: pixel by pixel, the
/// channels inside, so each tap's pixel is read front to back and the weights stream from one
/// aligned block. Interior pixels address their taps from three row pointers; border pixels
/// point the taps outside the input at [`ZEROS`].
pub(super) struct Dw3x3<'a> {
    pub(super) g: Geom,
    /// When non-zero, `x` holds only this many input rows of one image, row y in slot
    /// `y % ring` (a ring of rows another kernel fills as the output rows advance).
    pub(super) ring: usize,
    pub(super) wt: &'a DwWeights,
    pub(super) packed: &'a [f32],
    pub(super) x: &'a [f32],
    pub(super) row0: usize,
    pub(super) out: &'a mut [f32],
}

impl SimdOp for Dw3x3<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        let (g, win) = (self.g, &self.wt.win);
        let c = g.c;
        let clamp = self.wt.clamp.map(|(lo, hi)| (s.splat(lo), s.splat(hi)));
        let row_len = g.iw * c;
        let ring = self.ring;
        let img_len = if ring > 0 { ring } else { g.ih } * row_len;
        // Offset of input row y in an image.
        let row_at = |y: usize| if ring > 0 { y % ring } else { y } * row_len;
        let (x_first, x_end) = interior_cols(win, g.iw, g.ow);
        let cs = win.dw * c;
        let mut offs = [None; 9];
        for (r, orow) in self.out.chunks_exact_mut(g.ow * c).enumerate() {
            let row = self.row0 + r;
            let (b, oy) = (row / g.oh, row % g.oh);
            let img = &self.x[b * img_len..(b + 1) * img_len];
            let ky = taps(oy, win.sh, win.dh, win.pad_top, 3, g.ih);
            // Interior pixels of a row whose three window rows are inside: one run.
            let run = if ky == (0, 3) && x_first < x_end {
                x_first..x_end
            } else {
                0..0
            };
            for ox in (0..run.start).chain(run.end.max(run.start)..g.ow) {
                tap_offsets(win, g.ih, g.iw, c, oy, ox, &mut offs);
                let ptrs = offs.map(|o| match o {
                    Some(o) => {
                        let o = row_at(o / row_len) + o % row_len;
                        img[o..o + c].as_ptr()
                    }
                    None => ZEROS.as_ptr(),
                });
                dw3x3_px(s, &ptrs, self.packed, &mut orow[ox * c..][..c], clamp);
            }
            if !run.is_empty() {
                // Rows y0, y0 + dh, y0 + 2·dh from the run's first column; pixel i of the run
                // starts i·sw·c further on.
                let y0 = oy * win.sh - win.pad_top;
                let x0 = run.start * win.sw - win.pad_left;
                let step = win.sw * c;
                let need = (run.len() - 1) * step + 2 * cs + c;
                let at = |a: usize| &img[row_at(y0 + a * win.dh) + x0 * c..][..need];
                let out = &mut orow[run.start * c..run.end * c];
                dw3x3_run(
                    s,
                    [at(0), at(1), at(2)],
                    step,
                    cs,
                    self.packed,
                    out,
                    c,
                    clamp,
                );
            }
        }
    }
}

/// A run of interior output pixels (`out.len() / c` of them): pixel `i` reads tap `(a, b)` at
/// `rows[a][i·step + b·cs ..]`, `c` floats.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn dw3x3_run<S: Simd>(
    s: S,
    rows: [&[f32]; 3],
    step: usize,
    cs: usize,
    packed: &[f32],
    out: &mut [f32],
    c: usize,
    clamp: Option<(S::V, S::V)>,
) {
    let n = out.len() / c;
    let need = match n {
        0 => return,
        n => (n - 1) * step + 2 * cs + c,
    };
    let [r0, r1, r2] = rows.map(|r| r[..need].as_ptr());
    // With the stride equal to the dilation, pixel i + 1's taps are pixel i's shifted by one
    // tap: a group of G reads G + 2 columns of each row, not 3·G.
    let grouped = if step == cs { n / G * G } else { 0 };
    let (groups, rest) = out.split_at_mut(grouped * c);
    for (j, grp) in groups.chunks_exact_mut(G * c).enumerate() {
        // Safety: pixel G·j + G − 1 is in the run, so `G·j·step + (G + 1)·cs + c ≤ need`.
        let rows = unsafe { [r0, r1, r2].map(|r| r.add(G * j * step)) };
        dw3x3_group::<S, G>(s, rows, cs, packed, grp, clamp);
    }
    for (i, opx) in rest.chunks_exact_mut(c).enumerate() {
        let at = (grouped + i) * step;
        // Safety: each row holds `(n − 1)·step + 2·cs + c` floats (sliced above), so every
        // tap pointer starts `c` readable floats.
        let x = unsafe { taps9([r0, r1, r2], at, cs) };
        dw3x3_px(s, &x, packed, opx, clamp);
    }
}

/// `P` adjacent output pixels (`P ≤ 4`) whose taps step by `cs`: pixel p reads tap `(a, b)`
/// at `rows[a] + (p + b)·cs`; each row starts `(P + 1)·cs + c` readable floats
/// (`c = out.len() / P`).
#[inline(always)]
fn dw3x3_group<S: Simd, const P: usize>(
    s: S,
    rows: [*const f32; 3],
    cs: usize,
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
) {
    let c = out.len() / P;
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    let full = c / DWT;
    let mut o = 0;
    while o < full * DWT {
        // Safety: `o + l ≤ c`, so column P + 1 of each row reads below `(P + 1)·cs + c`; the
        // weights as in `dw3x3_px`; `op` holds P·c floats.
        unsafe {
            let w = w0.add(o / DWT * DW_TILE + o % DWT);
            let wv = |k: usize| s.load(w.add(k * DWT));
            let mut acc0 = [wv(0); P];
            let mut acc1 = [s.zero(); P];
            for (a, r) in rows.into_iter().enumerate() {
                let mut x = [s.zero(); 6];
                for (q, v) in x.iter_mut().enumerate().take(P + 2) {
                    *v = s.load(r.add(q * cs + o));
                }
                for b in 0..3 {
                    let k = wv(3 * a + b + 1);
                    for p in 0..P {
                        // Odd taps onto the bias, even taps apart: `dw9`'s two chains, so
                        // that every path rounds alike.
                        if (3 * a + b) % 2 == 1 {
                            acc0[p] = s.fma(x[p + b], k, acc0[p]);
                        } else {
                            acc1[p] = s.fma(x[p + b], k, acc1[p]);
                        }
                    }
                }
            }
            for p in 0..P {
                s.store(op.add(p * c + o), finish(s, s.add(acc0[p], acc1[p]), clamp));
            }
        }
        o += l;
    }
    if o < c {
        for (p, opx) in out.chunks_exact_mut(c).enumerate() {
            // Safety: pixel p's taps start at `rows[a] + (p + b)·cs ≤ rows[a] + (P + 1)·cs`,
            // each with `c` readable floats.
            let x = unsafe { taps9(rows, p * cs, cs) };
            dw3x3_tail(s, &x, packed, opx, clamp, o);
        }
    }
}

/// The 3×3 tap pointers of a pixel whose window rows start at `rows[a] + at`: tap `(a, b)` at
/// `rows[a] + at + b·cs`.
///
/// Safety: each of those addresses must lie within the allocation of `rows[a]`.
#[inline(always)]
unsafe fn taps9(rows: [*const f32; 3], at: usize, cs: usize) -> [*const f32; 9] {
    // Safety: the caller's contract.
    core::array::from_fn(|t| unsafe { rows[t / 3].add(at + t % 3 * cs) })
}

/// One output pixel from a pointer per tap, each starting `out.len()` readable floats (a
/// pixel, or [`ZEROS`] for a tap outside the input): full channel tiles take whole-vector
/// loads; a channel tail takes loads of the lanes left.
#[inline(always)]
fn dw3x3_px<S: Simd>(
    s: S,
    x: &[*const f32; 9],
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
) {
    let c = out.len();
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    let full = c / DWT;
    let mut o = 0;
    while o < full * DWT {
        // Safety: `o + l ≤ full·DWT ≤ c` floats from each tap pointer and from `op`; the
        // weights of lanes `o ..` sit in tile `o / DWT` at `(o % DWT) + k·DWT`, in `packed`.
        unsafe {
            let xv = x.map(|p| s.load(p.add(o)));
            let acc = dw9(s, &xv, w0.add(o / DWT * DW_TILE + o % DWT));
            s.store(op.add(o), finish(s, acc, clamp));
        }
        o += l;
    }
    dw3x3_tail(s, x, packed, out, clamp, o);
}

/// Channels `o ..` of one pixel as in [`dw3x3_px`], by loads of the lanes left.
#[inline(always)]
fn dw3x3_tail<S: Simd>(
    s: S,
    x: &[*const f32; 9],
    packed: &[f32],
    out: &mut [f32],
    clamp: Option<(S::V, S::V)>,
    mut o: usize,
) {
    let c = out.len();
    let l = S::LANES;
    let packed = &packed[..c.div_ceil(DWT) * DW_TILE];
    let (w0, op) = (packed.as_ptr(), out.as_mut_ptr());
    while o < c {
        let m = l.min(c - o);
        // Safety: `m ≤ c − o` lanes from each tap pointer and `op`; the tile of lanes `o ..`
        // is whole in `packed`.
        unsafe {
            let xv = x.map(|p| s.load_partial(p.add(o), m));
            let acc = dw9(s, &xv, w0.add(o / DWT * DW_TILE + o % DWT));
            s.store_partial(op.add(o), finish(s, acc, clamp), m);
        }
        o += l;
    }
}

/// The 3×3 sum: the bias at `w`, then tap `k`'s weights at `w + (k + 1)·DWT`, in two chains.
///
/// Safety: `w` starts a tile's lane group: `10·DWT − (w's lane)` readable floats.
#[inline(always)]
unsafe fn dw9<S: Simd>(s: S, x: &[S::V; 9], w: *const f32) -> S::V {
    let wv = |k: usize| s.load(w.add(k * DWT));
    let mut a0 = wv(0);
    let mut a1 = s.mul(x[0], wv(1));
    a0 = s.fma(x[1], wv(2), a0);
    a1 = s.fma(x[2], wv(3), a1);
    a0 = s.fma(x[3], wv(4), a0);
    a1 = s.fma(x[4], wv(5), a1);
    a0 = s.fma(x[5], wv(6), a0);
    a1 = s.fma(x[6], wv(7), a1);
    a0 = s.fma(x[7], wv(8), a0);
    a1 = s.fma(x[8], wv(9), a1);
    s.add(a0, a1)
}

/// The output clamp, when the node has one.
#[inline(always)]
fn finish<S: Simd>(s: S, acc: S::V, clamp: Option<(S::V, S::V)>) -> S::V {
    match clamp {
        Some((lo, hi)) => math::clamp(s, acc, lo, hi),
        None => acc,
    }
}

/// Output rows `row0 .. row0 + out.len() / (ow·c)` of the 3×3 depthwise convolution of one
/// image (`g.n` = 1) on this thread, from `x` holding input row y at `(y % ring)·iw·c` (the
/// rows those output rows read must be there): `Ok(false)`, with nothing written, when the
/// filter is not packed for the 3×3 kernel.
pub(crate) fn depthwise3x3_ring(
    wt: &DwWeights,
    g: Geom,
    ring: usize,
    row0: usize,
    x: &[f32],
    out: &mut [f32],
) -> Result<bool, KernelError> {
    let Some(p) = &wt.packed else {
        return Ok(false);
    };
    if g.c != wt.channels || g.c > ZEROS_LEN || wt.multiplier != 1 || g.n != 1 || ring == 0 {
        return Ok(false);
    }
    let row_out = g.ow * g.c;
    let rows = out.len().checked_div(row_out).unwrap_or(0);
    if x.len() < ring * g.iw * g.c || row0 + rows > g.oh {
        return Err(KernelError::invalid("depthwise operands too short"));
    }
    run_op_at(
        level(),
        Dw3x3 {
            g,
            ring,
            wt,
            packed: p.f32(),
            x,
            row0,
            out: &mut out[..rows * row_out],
        },
    );
    Ok(true)
}
