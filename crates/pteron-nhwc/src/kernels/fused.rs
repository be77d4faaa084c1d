//! A 3×3 depthwise convolution fused with the pointwise (1×1) convolution before it, the
//! one after it, or both (a MobileNet inverted-residual block), run band by band. MobileNet
//! widens 16–32 channels to 96–192 on 112×112 and 56×56 maps, and the widened and depthwise
//! outputs (1.2–4.8 MB) go past the L2 cache between nodes. Here each thread takes a band of
//! the depthwise output rows and, stripe by stripe, computes the widened rows the stripe needs
//! into a ring of rows, the stripe's depthwise rows into a small buffer, and from those the
//! stripe's output rows: the intermediate maps never leave L2.
//!
//! Every value is computed by the same kernels with the same arithmetic as the nodes run one
//! after the other (the GEMM sums each output over k in one order whatever rows it is given;
//! the depthwise kernel classes a pixel as interior or border by the image, not by the
//! stripe), so the results are bit-identical.

use pteron_core::{KernelError, Parallel, INLINE};
use pteron_kernels_cpu::par::{part, SharedMut};

use super::gemm::{AddInto, ConvWeights};
use super::spatial::{depthwise3x3_ring, DwWeights, Geom};

/// Floats of intermediate rows a stripe aims at (about 192 KiB: a tenth of an L2, with room
/// for the input rows, the filters and the output).
pub const STRIPE_FLOATS: usize = 48 * 1024;

/// The nodes run as one: `expand` (when set) widens the input for `dw`, `project` (when
/// set) reads `dw`'s output.
#[derive(Clone, Copy)]
pub struct Chain<'a> {
    pub expand: Option<&'a ConvWeights>,
    pub dw: &'a DwWeights,
    pub project: Option<&'a ConvWeights>,
    /// A residual added to `project`'s output (laid out as the chain's output).
    pub add: Option<AddInto<'a>>,
}

/// Whether a depthwise convolution can be fused at all: 3×3, multiplier 1, dilation 1, with
/// the 3×3 kernel's packed filter.
pub fn fusable_dw(dw: &DwWeights) -> bool {
    let w = &dw.win;
    dw.multiplier == 1
        && (w.kh, w.kw, w.dh, w.dw) == (3, 3, 1, 1)
        && w.sh >= 1
        && dw.is_packed_3x3()
}

/// Whether `pw` can widen the input of `dw` in a chain.
pub fn fusable_expand(pw: &ConvWeights, dw: &DwWeights) -> bool {
    pw.is_pointwise() && pw.conv.out_channels() == dw.channels && fusable_dw(dw)
}

/// Whether `pw` can read the output of `dw` in a chain.
pub fn fusable_project(dw: &DwWeights, pw: &ConvWeights) -> bool {
    pw.is_pointwise() && pw.conv.in_channels() == dw.channels && fusable_dw(dw)
}

impl Chain<'_> {
    fn valid(&self) -> bool {
        fusable_dw(self.dw)
            && self.expand.is_none_or(|e| fusable_expand(e, self.dw))
            && self.project.is_none_or(|p| fusable_project(self.dw, p))
            && self
                .add
                .is_none_or(|_| self.project.is_some_and(|p| p.takes_residual()))
    }

    /// `(output rows per stripe, ring rows, floats per band)` for maps `iw` and `ow` wide:
    /// as many rows as the budget holds, at least one.
    fn stripe(&self, iw: usize, ow: usize, budget: usize) -> Option<(usize, usize, usize)> {
        let c = self.dw.channels;
        let sh = self.dw.win.sh;
        let ring_row = if self.expand.is_some() {
            iw.checked_mul(c)?
        } else {
            0
        };
        let out_row = if self.project.is_some() {
            ow.checked_mul(c)?
        } else {
            0
        };
        let floats = |r: usize| -> Option<usize> {
            let ring = ((r - 1).checked_mul(sh)?.checked_add(3)?).checked_mul(ring_row)?;
            ring.checked_add(r.checked_mul(out_row)?)
        };
        let mut r = 1;
        while r < 256 && floats(r + 1).is_some_and(|f| f <= budget) {
            r += 1;
        }
        let ring = if ring_row > 0 { (r - 1) * sh + 3 } else { 0 };
        // Each part starts on a cache line (the kernels' loads then never split one when the
        // channels are a multiple of 16).
        let pad = |v: usize| v.checked_add(15).map(|v| v / 16 * 16);
        let band = pad(ring.checked_mul(ring_row)?)?.checked_add(pad(r.checked_mul(out_row)?)?)?;
        Some((r, ring, band))
    }
}

/// Floats of `scratch` that [`run`] needs for `bands` bands over maps `iw` (input) and `ow`
/// (output) wide (`None` on overflow).
pub fn scratch_floats(
    chain: &Chain<'_>,
    iw: usize,
    ow: usize,
    budget: usize,
    bands: usize,
) -> Option<usize> {
    let (_, _, band) = chain.stripe(iw, ow, budget)?;
    band.checked_mul(bands)?.checked_add(16)
}

/// Runs `chain` over `x` (`[n, ih, iw, cin]`) into `out` (`[n, oh, ow, cout]`). Each band (one
/// per thread, as many as `scratch` holds: see [`scratch_floats`]) keeps its rows in a part of
/// `scratch` (`budget` floats of them, about).
#[allow(clippy::too_many_arguments)]
pub fn run(
    par: &dyn Parallel,
    chain: Chain<'_>,
    x: &[f32],
    [n, ih, iw]: [usize; 3],
    out: &mut [f32],
    [oh, ow]: [usize; 2],
    scratch: &mut [f32],
    budget: usize,
) -> Result<(), KernelError> {
    if !chain.valid() {
        return Err(KernelError::invalid("these convolutions do not fuse"));
    }
    let c = chain.dw.channels;
    let cin = chain.expand.map_or(c, |e| e.conv.in_channels());
    let cout = chain.project.map_or(c, |p| p.conv.out_channels());
    let size = |d: &[usize]| {
        d.iter()
            .try_fold(1usize, |a, &v| a.checked_mul(v))
            .ok_or(KernelError::SizeOverflow)
    };
    let need_x = size(&[n, ih, iw, cin])?;
    let need_out = size(&[n, oh, ow, cout])?;
    size(&[ih, iw, c])?;
    if x.len() < need_x || out.len() < need_out || chain.add.is_some_and(|a| a.r.len() < need_out) {
        return Err(KernelError::invalid("convolution operands too short"));
    }
    let all_rows = n * oh;
    if all_rows == 0 || iw == 0 || ow == 0 || c == 0 {
        return Ok(());
    }
    let (r_max, ring, band) = chain
        .stripe(iw, ow, budget)
        .ok_or(KernelError::SizeOverflow)?;
    let fit = scratch.len().saturating_sub(16) / band.max(1);
    let bands = par.num_threads().min(all_rows).min(fit);
    if bands == 0 {
        return Err(KernelError::invalid("fused convolution scratch too small"));
    }
    let skip = (scratch.as_ptr() as usize).wrapping_neg() % 64 / 4;
    let bufs = SharedMut::new(&mut scratch[skip..skip + bands * band]);
    let out_row = ow * cout;
    let outs = SharedMut::new(&mut out[..need_out]);
    let failed = core::sync::atomic::AtomicBool::new(false);
    par.parallel_for(bands, &|tasks| {
        for b in tasks {
            // Safety: band b alone uses part b of the scratch and output rows
            // `part(all_rows, bands, b)` (disjoint parts); both buffers outlive
            // `parallel_for`.
            let buf = unsafe { bufs.slice(b * band..(b + 1) * band) };
            let rows = part(all_rows, bands, b);
            let o = unsafe { outs.slice(rows.start * out_row..rows.end * out_row) };
            let band = Band {
                chain,
                x,
                geom: [ih, iw, cin, c, oh, ow, cout],
                r_max,
                ring,
            };
            if band.run(rows, buf, o).is_err() {
                failed.store(true, core::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    if failed.into_inner() {
        return Err(KernelError::invalid("fused convolution band failed"));
    }
    Ok(())
}

/// `c = x·w + bias` (clamped) over `m` rows with a pointwise convolution's packed filter;
/// with `add`, `c = clamp(x·w + bias + r)` (`r` the rows of the residual that `c` covers):
/// the convolution's own run over the rows as a 1 × m image, on this thread.
fn pointwise_rows(
    pw: &ConvWeights,
    m: usize,
    x: &[f32],
    c: &mut [f32],
    add: Option<AddInto<'_>>,
) -> Result<(), KernelError> {
    pw.run(&INLINE, x, 1, 1, m, c, 1, m, &mut [], add)
}

/// What one band needs.
struct Band<'a> {
    chain: Chain<'a>,
    x: &'a [f32],
    /// `[ih, iw, cin, c, oh, ow, cout]`.
    geom: [usize; 7],
    r_max: usize,
    /// Rows of the ring of widened rows (with an expand step).
    ring: usize,
}

impl Band<'_> {
    /// Output rows `rows` (numbered across the batch) into `out`, stripe by stripe. The start
    /// of `buf` is a ring of widened rows (row y in slot `y % ring`): each stripe computes
    /// only the rows the previous one did not, over rows no longer read. After it, the
    /// stripe's depthwise rows when a project step follows.
    fn run(
        &self,
        rows: core::ops::Range<usize>,
        buf: &mut [f32],
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        let [ih, iw, cin, c, oh, ow, cout] = self.geom;
        let win = self.chain.dw.win;
        let (sh, pt) = (win.sh, win.pad_top);
        let row = iw * c;
        let ring = self.ring;
        let ring_len = (ring * row).div_ceil(16) * 16;
        let (ring_buf, dw_buf) = buf.split_at_mut(ring_len);
        let out_row = ow * cout;
        let g = Geom {
            n: 1,
            ih,
            iw,
            oh,
            ow,
            c,
        };
        // The image and the end of the widened rows computed for it.
        let mut done = (usize::MAX, 0usize);
        let mut r = rows.start;
        while r < rows.end {
            let (img, oy0) = (r / oh, r % oh);
            let oy1 = (oy0 + self.r_max).min(oh).min(rows.end - img * oh);
            // The depthwise input: widened rows in the ring, or the image itself.
            let (src, slots) = match self.chain.expand {
                Some(e) => {
                    // Widened rows the window of output rows oy0..oy1 reads (≤ `ring`).
                    let lo = (oy0 * sh).saturating_sub(pt).min(ih);
                    let hi = ((oy1 - 1) * sh + 3).saturating_sub(pt).min(ih).max(lo);
                    let mut y = if done.0 == img { done.1.max(lo) } else { lo };
                    while y < hi {
                        // Up to the end of the ring: one run of slots.
                        let end = hi.min(y + ring - y % ring);
                        let xs = &self.x[(img * ih + y) * iw * cin..(img * ih + end) * iw * cin];
                        let slot = y % ring;
                        let dst = &mut ring_buf[slot * row..(slot + end - y) * row];
                        pointwise_rows(e, (end - y) * iw, xs, dst, None)?;
                        y = end;
                    }
                    done = (img, hi);
                    (&ring_buf[..ring * row], ring)
                }
                None => (&self.x[img * ih * row..(img + 1) * ih * row], ih),
            };
            let at = (r - rows.start) * out_row;
            let o = &mut out[at..at + (oy1 - oy0) * out_row];
            let ok = match self.chain.project {
                Some(p) => {
                    let d = &mut dw_buf[..(oy1 - oy0) * ow * c];
                    let ok = depthwise3x3_ring(self.chain.dw, g, slots, oy0, src, d)?;
                    // The residual's rows beside these output rows (numbered across the
                    // batch, as `r`).
                    let add = match self.chain.add {
                        Some(a) => Some(AddInto {
                            r: a.r
                                .get(r * out_row..(r + oy1 - oy0) * out_row)
                                .ok_or_else(|| KernelError::invalid("residual too short"))?,
                            clamp: a.clamp,
                        }),
                        None => None,
                    };
                    pointwise_rows(p, (oy1 - oy0) * ow, d, o, add)?;
                    ok
                }
                None => depthwise3x3_ring(self.chain.dw, g, slots, oy0, src, o)?,
            };
            if !ok {
                return Err(KernelError::invalid("depthwise filter not packed"));
            }
            r = img * oh + oy1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Conv, Window};
    use crate::kernels::spatial::depthwise;

    /// Tasks one after the other, with a thread count that makes several bands.
    struct Bands(usize);
    impl Parallel for Bands {
        fn num_threads(&self) -> usize {
            self.0
        }
        fn parallel_for(&self, n: usize, f: &(dyn Fn(core::ops::Range<usize>) + Sync)) {
            for t in 0..n {
                f(t..t + 1);
            }
        }
    }

    fn pointwise(cin: usize, cout: usize, rnd: &mut impl FnMut() -> f32) -> ConvWeights {
        let w: Vec<f32> = (0..cin * cout).map(|_| rnd()).collect();
        let b: Vec<f32> = (0..cout).map(|_| rnd()).collect();
        ConvWeights::new(Conv::pointwise(cin, cout), &w, Some(&b), Some((-0.3, 0.4))).unwrap()
    }

    /// Fused and unfused runs agree bit for bit: expand, project or both, over strides,
    /// paddings, odd sizes, batches, stripe budgets (one row per stripe up to the whole map)
    /// and band counts.
    #[test]
    fn fused_equals_separate_nodes() {
        let mut seed = 11u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &(n, ih, iw, cin, c, cout) in &[
            (1, 9, 7, 5, 24, 6),
            (2, 6, 11, 16, 17, 16),
            (1, 1, 4, 3, 16, 33),
        ] {
            for &(s, pt, pb) in &[(1, 1, 1), (2, 1, 1), (2, 0, 1), (1, 0, 0), (2, 2, 2)] {
                let win = Window {
                    pad_top: pt,
                    pad_bottom: pb,
                    ..Window::square(3, s, 1)
                };
                let Ok((oh, ow)) = win.out_hw(ih, iw) else {
                    continue;
                };
                let expand = pointwise(cin, c, &mut rnd);
                let project = pointwise(c, cout, &mut rnd);
                // Without a clamp, to take a residual.
                let project_nc = {
                    let w: Vec<f32> = (0..c * cout).map(|_| rnd()).collect();
                    let b: Vec<f32> = (0..cout).map(|_| rnd()).collect();
                    ConvWeights::new(Conv::pointwise(c, cout), &w, Some(&b), None).unwrap()
                };
                let res: Vec<f32> = (0..n * oh * ow * cout).map(|_| rnd()).collect();
                let (lo, hi) = (-0.45f32, 0.6f32);
                let add_clamp = Some((lo, hi));
                let w2: Vec<f32> = (0..9 * c).map(|_| rnd()).collect();
                let b2: Vec<f32> = (0..c).map(|_| rnd()).collect();
                let dw = DwWeights::new(win, c, 1, w2, b2, Some((-0.2, 0.5))).unwrap();
                let g = Geom {
                    n,
                    ih,
                    iw,
                    oh,
                    ow,
                    c,
                };
                for (e, p, a) in [
                    (true, false, false),
                    (false, true, false),
                    (true, true, false),
                    (false, true, true),
                    (true, true, true),
                ] {
                    let project = if a { &project_nc } else { &project };
                    let chain = Chain {
                        expand: e.then_some(&expand),
                        dw: &dw,
                        project: p.then_some(project),
                        add: a.then_some(AddInto {
                            r: &res,
                            clamp: add_clamp,
                        }),
                    };
                    let k = if e { cin } else { c };
                    let x: Vec<f32> = (0..n * ih * iw * k).map(|_| rnd()).collect();
                    // Separate nodes.
                    let mid = if e {
                        let mut mid = vec![0.0; n * ih * iw * c];
                        expand
                            .run(&INLINE, &x, n, ih, iw, &mut mid, ih, iw, &mut [], None)
                            .unwrap();
                        mid
                    } else {
                        x.clone()
                    };
                    let mut d = vec![0.0; n * oh * ow * c];
                    depthwise(&INLINE, &dw, g, &mid, &mut d).unwrap();
                    let want = if p {
                        let mut o = vec![0.0; n * oh * ow * cout];
                        project
                            .run(&INLINE, &d, n, oh, ow, &mut o, oh, ow, &mut [], None)
                            .unwrap();
                        if a {
                            // The add node after the convolution.
                            for (v, r) in o.iter_mut().zip(&res) {
                                *v = (*v + r).max(lo).min(hi);
                            }
                        }
                        o
                    } else {
                        d
                    };
                    for budget in [1, 2 * iw * c, 5 * iw * c, STRIPE_FLOATS] {
                        for threads in [1, 2, 3] {
                            let mut got = vec![f32::NAN; want.len()];
                            let len = scratch_floats(&chain, iw, ow, budget, threads).unwrap();
                            let mut scratch = vec![0.0; len];
                            run(
                                &Bands(threads),
                                chain,
                                &x,
                                [n, ih, iw],
                                &mut got,
                                [oh, ow],
                                &mut scratch,
                                budget,
                            )
                            .unwrap();
                            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                                assert_eq!(
                                    a.to_bits(),
                                    b.to_bits(),
                                    "expand {e} project {p} add {a}: n{n} {ih}x{iw} cin {cin} c {c} \
                                     s{s} pad {pt},{pb} budget {budget} threads {threads}: \
                                     [{i}] {a} vs {b}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
