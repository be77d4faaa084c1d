//! torchvision's resize of uint8 images (`Resize` of a uint8 tensor with the default
//! antialiased bilinear filter). torchvision turns the image into float32, runs PyTorch's
//! `_upsample_bilinear2d_aa` on it and rounds to bytes (half to even); this module follows
//! that float32 arithmetic step by step, so that its bytes equal torchvision's.
//!
//! Per axis and output index `i`, with `scale = in / out` (float32):
//! - the filter is a triangle of half-width `support = max(scale, 1)` centred at
//!   `scale · (i + ½)`; input pixels `lo..hi` (`lo = trunc(centre − support + ½)` clamped at 0,
//!   `hi = trunc(centre + support + ½)` clamped at `in`) weigh
//!   `tri((j − centre + ½) / max(scale, 1))`, each divided by their float32 sum;
//! - an output value is `Σ value · weight` summed in input order in float32.
//!
//! The horizontal pass runs first over every input row into float32, the vertical pass reads
//! those; the result is rounded once. An axis whose size does not change is not filtered.

/// One axis's filter taps.
struct Taps {
    /// First input index of each output.
    start: Vec<usize>,
    /// Number of input indices of each output.
    len: Vec<usize>,
    /// `stride` weights per output.
    weights: Vec<f32>,
    stride: usize,
}

/// The triangle filter, on a float32 argument as PyTorch's `aa_filter<float>` takes it.
fn triangle(x: f32) -> f32 {
    let x = x.abs() as f64;
    if x < 1.0 {
        (1.0 - x) as f32
    } else {
        0.0
    }
}

impl Taps {
    fn new(input: usize, output: usize) -> Taps {
        // The C++ mixes float32 values with double literals: each step below keeps the type the
        // C++ expression has.
        let scale = input as f32 / output as f32;
        let support: f32 = if scale >= 1.0 { scale } else { 1.0 };
        let inv: f32 = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let stride = (support as f64).ceil() as usize * 2 + 1;
        let mut weights = vec![0f32; output * stride];
        let mut start = Vec::with_capacity(output);
        let mut len = Vec::with_capacity(output);
        for i in 0..output {
            let centre = (scale as f64 * (i as f64 + 0.5)) as f32;
            // `as i64` truncates toward zero, as the C++ cast does.
            let lo = (((centre - support) as f64 + 0.5) as i64).max(0) as usize;
            let hi = (((centre + support) as f64 + 0.5) as i64).clamp(0, input as i64) as usize;
            let n = hi.saturating_sub(lo).min(stride);
            let row = &mut weights[i * stride..(i + 1) * stride];
            let mut total = 0f32;
            for j in 0..n {
                let x = ((j + lo) as i64 as f32 - centre) as f64 + 0.5;
                let v = triangle((x * inv as f64) as f32);
                row[j] = v;
                total += v;
            }
            if total != 0.0 {
                for v in &mut row[..n] {
                    *v /= total;
                }
            }
            start.push(lo);
            len.push(n);
        }
        Taps {
            start,
            len,
            weights,
            stride,
        }
    }

    /// Output `i` of a line read through `at(j)` for input index `j`.
    #[inline]
    fn apply(&self, i: usize, at: impl Fn(usize) -> f32) -> f32 {
        let k = &self.weights[i * self.stride..][..self.len[i]];
        let lo = self.start[i];
        let mut sum = 0f32;
        for (j, &w) in k.iter().enumerate() {
            sum = if j == 0 {
                at(lo) * w
            } else {
                at(lo + j).mul_add(w, sum)
            };
        }
        sum
    }
}

/// Resizes `channels` planes of `in_h × in_w` bytes to `out_h × out_w` (torchvision's
/// antialiased bilinear `Resize` of a uint8 tensor). Sizes must be non-zero and
/// `src.len() == channels · in_h · in_w`.
pub(crate) fn resize_planar(
    src: &[u8],
    channels: usize,
    in_h: usize,
    in_w: usize,
    out_h: usize,
    out_w: usize,
) -> Vec<u8> {
    assert_eq!(src.len(), channels * in_h * in_w, "planar input size");
    assert!(
        in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0,
        "empty image"
    );
    if in_h == out_h && in_w == out_w {
        return src.to_vec();
    }
    let horizontal: Vec<f32> = if out_w != in_w {
        let taps = Taps::new(in_w, out_w);
        let mut out = vec![0f32; channels * in_h * out_w];
        for (row_in, row_out) in src.chunks_exact(in_w).zip(out.chunks_exact_mut(out_w)) {
            for (i, o) in row_out.iter_mut().enumerate() {
                *o = taps.apply(i, |j| row_in[j] as f32);
            }
        }
        out
    } else {
        src.iter().map(|&v| v as f32).collect()
    };
    let to_byte = |v: f32| v.round_ties_even().clamp(0.0, 255.0) as u8;
    if out_h == in_h {
        return horizontal.into_iter().map(to_byte).collect();
    }
    let taps = Taps::new(in_h, out_h);
    let mut out = vec![0u8; channels * out_h * out_w];
    let plane_in = in_h * out_w;
    for c in 0..channels {
        let plane = &horizontal[c * plane_in..(c + 1) * plane_in];
        let dst = &mut out[c * out_h * out_w..(c + 1) * out_h * out_w];
        for y in 0..out_h {
            for x in 0..out_w {
                dst[y * out_w + x] = to_byte(taps.apply(y, |j| plane[j * out_w + x]));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_a_copy() {
        let src: Vec<u8> = (0..24).collect();
        assert_eq!(resize_planar(&src, 2, 3, 4, 3, 4), src);
    }

    #[test]
    fn a_flat_image_stays_flat() {
        let src = vec![200u8; 3 * 17 * 23];
        for (h, w) in [(5, 7), (40, 50), (17, 9), (1, 1)] {
            let out = resize_planar(&src, 3, 17, 23, h, w);
            assert!(out.iter().all(|&v| v == 200), "{h}x{w}");
        }
    }

    #[test]
    fn halving_averages_pairs() {
        // Scale 2: support 2, each output weighs input pixels 2i-1..2i+2 as 1:3:3:1 (clipped
        // at the border and renormalized).
        let src = [0u8, 100, 200, 40];
        let out = resize_planar(&src, 1, 1, 4, 1, 2);
        // Output 0: pixels 0..3 with weights 3,3,1 (/7): (0*3 + 100*3 + 200) / 7 = 71.4.
        // Output 1: pixels 1..4 with weights 1,3,3 (/7): (100 + 600 + 120) / 7 = 117.1.
        assert_eq!(out, vec![71, 117]);
    }

    #[test]
    fn weights_of_an_axis_sum_to_one() {
        for (i, o) in [(200, 112), (97, 67), (50, 112), (3, 1000)] {
            let t = Taps::new(i, o);
            for k in 0..o {
                let s: f32 = t.weights[k * t.stride..][..t.len[k]].iter().sum();
                assert!((s - 1.0).abs() < 1e-5, "{i}->{o} output {k}: {s}");
            }
        }
    }
}
