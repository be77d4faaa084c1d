//! A pointwise (1×1) convolution and the 3×3 depthwise convolution that reads its output, run
//! band by band: MobileNet's inverted-residual blocks widen 16–32 channels to 96–192 on
//! 112×112 and 56×56 maps, a 1.8–4.8 MB tensor that one layer writes past the L2 cache and the
//! next reads back. Here each thread takes a band of the depthwise output rows and computes
//! the few widened rows a stripe of it needs into a buffer that stays in L2, then the stripe.
//!
//! Every value is computed by the same kernels with the same arithmetic as the two nodes run
//! one after the other (the GEMM sums each output over k in one order whatever rows it is
//! given; the depthwise kernel classes a pixel as interior or border by the image, not by the
//! stripe), so the results are bit-identical.

use pteron_core::{KernelError, Parallel, INLINE};
use pteron_kernels_cpu::gemm::{gemm, Epilogue, Init, MatA, MatB};
use pteron_kernels_cpu::par::{part, SharedMut};

use super::gemm::ConvWeights;
use super::spatial::{depthwise3x3_ring, DwWeights, Geom};

/// Floats of widened rows a stripe aims at (about 192 KiB: a tenth of an L2, with room for
/// the input rows, the filter and the output).
pub const STRIPE_FLOATS: usize = 48 * 1024;

/// Whether `pw` then `dw` can run fused: a pointwise convolution into a 3×3 depthwise one of
/// multiplier 1 and dilation 1 over the same channels, with the 3×3 kernel's packed filter.
pub fn fusable(pw: &ConvWeights, dw: &DwWeights) -> bool {
    let w = &dw.win;
    pw.is_pointwise()
        && pw.conv.out_channels() == dw.channels
        && dw.multiplier == 1
        && (w.kh, w.kw, w.dh, w.dw) == (3, 3, 1, 1)
        && w.sh >= 1
        && dw.is_packed_3x3()
}

/// Rows of widened values one stripe holds: `(output rows per stripe, buffer rows)`.
fn stripe_rows(sh: usize, row_floats: usize, budget: usize) -> (usize, usize) {
    let fit = (budget / row_floats.max(1)).max(3);
    let r = ((fit - 3) / sh + 1).max(1);
    (r, (r - 1) * sh + 3)
}

/// Floats of scratch per band for a widened map `iw` wide with `c` channels.
pub fn band_floats(dw: &DwWeights, iw: usize, c: usize, budget: usize) -> Option<usize> {
    let row = iw.checked_mul(c)?;
    let (_, rows) = stripe_rows(dw.win.sh, row, budget);
    rows.checked_mul(row)
}

/// Floats of `scratch` that [`pointwise_depthwise`] needs for `bands` bands over a widened map
/// `iw` wide with `c` channels (`None` on overflow).
pub fn scratch_floats(
    dw: &DwWeights,
    iw: usize,
    c: usize,
    budget: usize,
    bands: usize,
) -> Option<usize> {
    let one = band_floats(dw, iw, c, budget)?.checked_add(15)? / 16 * 16;
    one.checked_mul(bands)?.checked_add(16)
}

/// `out = dw(pw(x))`: `x` is `[n, ih, iw, cin]`, the widened map `[n, ih, iw, c]` is never
/// stored whole, `out` is `[n, oh, ow, c]`. Each band (one per thread, as many as `scratch`
/// holds: see [`scratch_floats`]) keeps its widened rows in a part of `scratch` (`budget`
/// floats of them, about).
#[allow(clippy::too_many_arguments)]
pub fn pointwise_depthwise(
    par: &dyn Parallel,
    pw: &ConvWeights,
    dw: &DwWeights,
    x: &[f32],
    [n, ih, iw]: [usize; 3],
    out: &mut [f32],
    [oh, ow]: [usize; 2],
    scratch: &mut [f32],
    budget: usize,
) -> Result<(), KernelError> {
    if !fusable(pw, dw) {
        return Err(KernelError::invalid("these two convolutions do not fuse"));
    }
    let (cin, c) = (pw.conv.in_channels(), dw.channels);
    let win = dw.win;
    let sh = win.sh;
    let row = iw.checked_mul(c).ok_or(KernelError::SizeOverflow)?;
    let in_img = ih
        .checked_mul(iw)
        .and_then(|v| v.checked_mul(cin))
        .ok_or(KernelError::SizeOverflow)?;
    let out_row = ow.checked_mul(c).ok_or(KernelError::SizeOverflow)?;
    let out_img = oh.checked_mul(out_row).ok_or(KernelError::SizeOverflow)?;
    let need_x = n.checked_mul(in_img).ok_or(KernelError::SizeOverflow)?;
    let need_out = n.checked_mul(out_img).ok_or(KernelError::SizeOverflow)?;
    if x.len() < need_x || out.len() < need_out {
        return Err(KernelError::invalid("convolution operands too short"));
    }
    let all_rows = n * oh;
    if all_rows == 0 || row == 0 {
        return Ok(());
    }
    let (r_max, buf_rows) = stripe_rows(sh, row, budget);
    // Each band's buffer starts on a cache line, as the arena's values do (the depthwise
    // kernel's loads then never split a line when the channels are a multiple of 16).
    let ring_len = buf_rows * row;
    let buf_len = ring_len.div_ceil(16) * 16;
    let fit = scratch.len().saturating_sub(16) / buf_len;
    let bands = par.num_threads().min(all_rows).min(fit);
    if bands == 0 {
        return Err(KernelError::invalid("fused convolution scratch too small"));
    }
    let need = bands * buf_len + 16;
    let skip = (scratch.as_ptr() as usize).wrapping_neg() % 64 / 4;
    let bufs = SharedMut::new(&mut scratch[skip..skip + need - 16]);
    let outs = SharedMut::new(&mut out[..need_out]);
    let epi = Epilogue {
        init: Init::ColBias(&pw.bias),
        clamp: pw.clamp,
    };
    let failed = core::sync::atomic::AtomicBool::new(false);
    par.parallel_for(bands, &|tasks| {
        for b in tasks {
            // Safety: band b alone uses stripe buffer b and output rows `part(all_rows, bands,
            // b)` (disjoint parts); both buffers outlive `parallel_for`.
            let buf = unsafe { bufs.slice(b * buf_len..b * buf_len + ring_len) };
            let rows = part(all_rows, bands, b);
            let o = unsafe { outs.slice(rows.start * out_row..rows.end * out_row) };
            let band = Band {
                pw,
                dw,
                epi: &epi,
                x,
                geom: [ih, iw, cin, c, oh, ow],
                r_max,
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

/// What one band needs.
struct Band<'a> {
    pw: &'a ConvWeights,
    dw: &'a DwWeights,
    epi: &'a Epilogue<'a>,
    x: &'a [f32],
    /// `[ih, iw, cin, c, oh, ow]`.
    geom: [usize; 6],
    r_max: usize,
}

impl Band<'_> {
    /// Output rows `rows` (numbered across the batch) into `out`, stripe by stripe. `buf` is
    /// a ring of widened rows (row y in slot `y % ring`): each stripe computes only the rows
    /// the previous one did not, over rows no longer read.
    fn run(
        &self,
        rows: core::ops::Range<usize>,
        buf: &mut [f32],
        out: &mut [f32],
    ) -> Result<(), KernelError> {
        let [ih, iw, cin, c, oh, ow] = self.geom;
        let win = self.dw.win;
        let (sh, pt) = (win.sh, win.pad_top);
        let row = iw * c;
        let ring = buf.len() / row;
        let out_row = ow * c;
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
            // Widened rows the window of output rows oy0..oy1 reads (at most `ring`).
            let lo = (oy0 * sh).saturating_sub(pt).min(ih);
            let hi = ((oy1 - 1) * sh + 3).saturating_sub(pt).min(ih).max(lo);
            let mut y = if done.0 == img { done.1.max(lo) } else { lo };
            while y < hi {
                // Up to the end of the ring: one run of slots.
                let end = hi.min(y + ring - y % ring);
                let xs = &self.x[(img * ih + y) * iw * cin..(img * ih + end) * iw * cin];
                let slot = y % ring;
                let dst = &mut buf[slot * row..(slot + end - y) * row];
                gemm(
                    &INLINE,
                    (end - y) * iw,
                    c,
                    cin,
                    MatA::Rows { data: xs, lda: cin },
                    MatB::Packed(&self.pw.packed[0]),
                    dst,
                    c,
                    self.epi,
                )
                .map_err(|e| KernelError::invalid(format!("gemm: {}", e.0)))?;
                y = end;
            }
            done = (img, hi);
            let at = (r - rows.start) * out_row;
            let o = &mut out[at..at + (oy1 - oy0) * out_row];
            if !depthwise3x3_ring(self.dw, g, ring, oy0, buf, o)? {
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
    use crate::graph::{Conv, ConvKind, Window};
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

    /// Fused and unfused runs agree bit for bit over strides, paddings, odd sizes, batches,
    /// stripe budgets (one widened row per stripe up to the whole map) and band counts.
    #[test]
    fn fused_equals_two_nodes() {
        let mut seed = 11u32;
        let mut rnd = move || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for &(n, ih, iw, cin, c) in &[(1, 9, 7, 5, 24), (2, 6, 11, 16, 17), (1, 1, 4, 3, 16)] {
            for &(s, pt, pb) in &[(1, 1, 1), (2, 1, 1), (2, 0, 1), (1, 0, 0), (2, 2, 2)] {
                let pw_conv = Conv {
                    kind: ConvKind::Conv,
                    win: Window {
                        kh: 1,
                        kw: 1,
                        sh: 1,
                        sw: 1,
                        dh: 1,
                        dw: 1,
                        ..Default::default()
                    },
                    groups: 1,
                    group_in: cin,
                    group_out: c,
                    adjustment: (0, 0),
                };
                let w1: Vec<f32> = (0..cin * c).map(|_| rnd()).collect();
                let b1: Vec<f32> = (0..c).map(|_| rnd()).collect();
                let pw = ConvWeights::new(pw_conv, &w1, Some(&b1), Some((-0.3, 0.4))).unwrap();
                let win = Window {
                    pad_top: pt,
                    pad_right: 1,
                    pad_bottom: pb,
                    pad_left: 1,
                    kh: 3,
                    kw: 3,
                    sh: s,
                    sw: s,
                    dh: 1,
                    dw: 1,
                };
                let Ok((oh, ow)) = win.out_hw(ih, iw) else {
                    continue;
                };
                let w2: Vec<f32> = (0..9 * c).map(|_| rnd()).collect();
                let b2: Vec<f32> = (0..c).map(|_| rnd()).collect();
                let dw = DwWeights::new(win, c, 1, w2, b2, Some((-0.2, 0.5))).unwrap();
                assert!(fusable(&pw, &dw));
                let x: Vec<f32> = (0..n * ih * iw * cin).map(|_| rnd()).collect();
                // Two nodes.
                let mut mid = vec![0.0; n * ih * iw * c];
                pw.run(&INLINE, &x, n, ih, iw, &mut mid, ih, iw, &mut [])
                    .unwrap();
                let g = Geom {
                    n,
                    ih,
                    iw,
                    oh,
                    ow,
                    c,
                };
                let mut want = vec![0.0; n * oh * ow * c];
                depthwise(&INLINE, &dw, g, &mid, &mut want).unwrap();
                for budget in [1, 2 * iw * c, 5 * iw * c, STRIPE_FLOATS] {
                    for threads in [1, 2, 3] {
                        let mut got = vec![f32::NAN; n * oh * ow * c];
                        let len = scratch_floats(&dw, iw, c, budget, threads).unwrap();
                        let mut scratch = vec![0.0; len];
                        pointwise_depthwise(
                            &Bands(threads),
                            &pw,
                            &dw,
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
                                "n{n} {ih}x{iw} cin {cin} c {c} s{s} pad {pt},{pb} budget \
                                 {budget} threads {threads}: [{i}] {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }
}
