//! The tap pointers of the 3×3 int8 depthwise kernels (`avx2.rs`, `avx512.rs`): for each
//! output pixel, where each of its nine taps reads.

use crate::graph::Window;
use crate::kernels::spatial::Geom;

/// Output pixels per table of tap pointers of the 3×3 kernels.
pub(super) const PIXELS: usize = 64;

/// The nine tap pointers of each output pixel `p0 ..` (flat over images, rows and columns)
/// of a 3×3 depthwise convolution with dilation 1: a pixel of x, or `zrow` for a tap outside
/// the image.
///
/// # Safety
/// `x` holds the `g.n` images of `g`; `p0 + table.len() <= n·oh·ow`.
#[inline(always)]
pub(super) unsafe fn taps3x3(
    g: &Geom,
    win: &Window,
    x: &[i8],
    zrow: &[i8],
    p0: usize,
    table: &mut [[*const i8; 9]],
) {
    let c = g.c;
    if g.oh == 0 || g.ow == 0 {
        return;
    }
    // Walk the pixels in order: one division for the first, then column by column.
    let (mut img, rem) = (p0 / (g.oh * g.ow), p0 % (g.oh * g.ow));
    let (mut oy, mut ox) = (rem / g.ow, rem % g.ow);
    // Offsets of the filter's three input rows in x (None: outside the image).
    let rows_at = |img: usize, oy: usize| -> [Option<usize>; 3] {
        core::array::from_fn(|ky| {
            (oy * win.sh + ky)
                .checked_sub(win.pad_top)
                .filter(|&y| y < g.ih)
                .map(|y| (img * g.ih + y) * g.iw * c)
        })
    };
    let mut rows = rows_at(img, oy);
    for taps in table.iter_mut() {
        for (t, tp) in taps.iter_mut().enumerate() {
            let xx = (ox * win.sw + t % 3)
                .checked_sub(win.pad_left)
                .filter(|&xx| xx < g.iw);
            *tp = match (rows[t / 3], xx) {
                // Safety: pixel xx < iw of an input row inside x.
                (Some(r), Some(xx)) => unsafe { x.as_ptr().add(r + xx * c) },
                _ => zrow.as_ptr(),
            };
        }
        ox += 1;
        if ox == g.ow {
            ox = 0;
            oy += 1;
            if oy == g.oh {
                oy = 0;
                img += 1;
            }
            rows = rows_at(img, oy);
        }
    }
}
