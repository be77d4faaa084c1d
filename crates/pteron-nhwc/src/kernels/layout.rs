//! Data movement (any 4-byte element): transpose, slice, concatenation, constant padding; and
//! bilinear resizing (float32, XNNPACK's coordinate rules).

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;

use crate::util::{Shape, MAX_DIMS};

fn short() -> KernelError {
    KernelError::invalid("operand too short")
}

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> [usize; MAX_DIMS] {
    let mut s = [0usize; MAX_DIMS];
    let mut acc = 1;
    for d in (0..dims.len()).rev() {
        s[d] = acc;
        acc *= dims[d];
    }
    s
}

/// `out = x.permute(perm)`: `out.dims[i] = x.dims[perm[i]]`.
pub fn transpose<T: Copy + Send + Sync>(
    par: &dyn Parallel,
    x: &[T],
    shape: &Shape,
    perm: &Shape,
    out: &mut [T],
) -> Result<(), KernelError> {
    let r = shape.rank();
    if perm.rank() != r {
        return Err(KernelError::shape(
            "permutation rank differs from the input's",
        ));
    }
    let n = shape.count()?;
    if x.len() < n || out.len() < n {
        return Err(short());
    }
    if n == 0 {
        return Ok(());
    }
    let is = strides(shape.dims());
    // Output dims and, for each, the input stride it walks.
    let mut od = [1usize; MAX_DIMS];
    let mut st = [0usize; MAX_DIMS];
    for i in 0..r {
        od[i] = shape.dims()[perm.dims()[i]];
        st[i] = is[perm.dims()[i]];
    }
    // Drop size-1 dims; the innermost remaining dim is the run.
    let mut d = [(1usize, 0usize); MAX_DIMS];
    let mut k = 0;
    for i in 0..r {
        if od[i] != 1 {
            d[k] = (od[i], st[i]);
            k += 1;
        }
    }
    if k == 0 {
        out[0] = x[0];
        return Ok(());
    }
    let (inner, istride) = d[k - 1];
    // A short run whose next dim out walks the input contiguously (NCHW -> NHWC with few
    // channels): copy [rows × inner] tiles, reading each input row in order.
    // Tiles are independent: split over the threads (a network's input transpose is its
    // first node, with nothing else to overlap).
    if k >= 2 && istride != 1 && inner <= 16 && d[k - 2].1 == 1 {
        let rows = d[k - 2].0;
        let outer = &d[..k - 2];
        let tile_len = rows * inner;
        // Every tile's input span lies in `x`: checked once, for the last input offset.
        let mut last = 0usize;
        for &(size, stride) in outer {
            last += (size - 1) * stride;
        }
        if x.len() < last + (inner - 1) * istride + rows {
            return Err(short());
        }
        let min_tiles = (1usize << 14).div_ceil(tile_len);
        for_chunks_mut(par, &mut out[..n], tile_len, min_tiles, &|t, tile| {
            // The tile's input offset: `t` in mixed radix over the outer dims.
            let (mut rest, mut base) = (t, 0usize);
            for &(size, stride) in outer.iter().rev() {
                base += (rest % size) * stride;
                rest /= size;
            }
            let src = &x[base..base + (inner - 1) * istride + rows];
            match inner {
                3 => interleave::<T, 3>(src, istride, tile),
                4 => interleave::<T, 4>(src, istride, tile),
                _ => {
                    for j in 0..inner {
                        let row = &src[j * istride..j * istride + rows];
                        for (i, &v) in row.iter().enumerate() {
                            tile[i * inner + j] = v;
                        }
                    }
                }
            }
        });
        return Ok(());
    }
    let outer = &d[..k - 1];
    let mut idx = [0usize; MAX_DIMS];
    let mut base = 0usize;
    for run in out[..n].chunks_exact_mut(inner) {
        if istride == 1 {
            run.copy_from_slice(&x[base..base + inner]);
        } else {
            for (j, o) in run.iter_mut().enumerate() {
                *o = x[base + j * istride];
            }
        }
        advance(&mut idx, &mut base, outer);
    }
    Ok(())
}

/// `tile[i·N + j] = src[j·istride + i]`: `N` input rows interleaved, written in order (the
/// compiler turns the fixed `N` into shuffles; a row at a time wrote every `N`-th element).
#[inline(always)]
fn interleave<T: Copy, const N: usize>(src: &[T], istride: usize, tile: &mut [T]) {
    let rows = tile.len() / N;
    let srcs: [&[T]; N] = core::array::from_fn(|j| &src[j * istride..][..rows]);
    for (i, o) in tile.chunks_exact_mut(N).enumerate() {
        for j in 0..N {
            o[j] = srcs[j][i];
        }
    }
}

/// Steps the odometer `idx` over `dims` ((size, input stride) per dim, last fastest),
/// keeping `base` at the input offset of the current index.
fn advance(idx: &mut [usize; MAX_DIMS], base: &mut usize, dims: &[(usize, usize)]) {
    for q in (0..dims.len()).rev() {
        idx[q] += 1;
        *base += dims[q].1;
        if idx[q] < dims[q].0 {
            return;
        }
        *base -= dims[q].1 * dims[q].0;
        idx[q] = 0;
    }
}

/// Copies the box `offsets .. offsets + out_shape` of `x` into `out`.
pub fn slice<T: Copy>(
    x: &[T],
    shape: &Shape,
    offsets: &[usize],
    out_shape: &Shape,
    out: &mut [T],
) -> Result<(), KernelError> {
    let r = shape.rank();
    let n = out_shape.count()?;
    if x.len() < shape.count()? || out.len() < n || offsets.len() != r || out_shape.rank() != r {
        return Err(short());
    }
    if n == 0 {
        return Ok(());
    }
    for i in 0..r {
        if offsets[i] + out_shape.dims()[i] > shape.dims()[i] {
            return Err(KernelError::shape("slice outside its input"));
        }
    }
    if r == 0 {
        out[0] = x[0];
        return Ok(());
    }
    let is = strides(shape.dims());
    let inner = out_shape.dims()[r - 1];
    let od = out_shape.dims();
    let mut idx = [0usize; MAX_DIMS];
    for run in out[..n].chunks_exact_mut(inner) {
        let mut base = offsets[r - 1];
        for q in 0..r - 1 {
            base += (offsets[q] + idx[q]) * is[q];
        }
        run.copy_from_slice(&x[base..base + inner]);
        for q in (0..r - 1).rev() {
            idx[q] += 1;
            if idx[q] < od[q] {
                break;
            }
            idx[q] = 0;
        }
    }
    Ok(())
}

/// Concatenates `inputs` (each with its shape) along `axis` into `out`.
pub fn concat<T: Copy>(
    inputs: &[(&[T], Shape)],
    axis: usize,
    out: &mut [T],
    out_shape: &Shape,
) -> Result<(), KernelError> {
    let od = out_shape.dims();
    if axis >= od.len() {
        return Err(KernelError::shape("concatenation axis out of range"));
    }
    let outer: usize = od[..axis].iter().product();
    let inner_out: usize = od[axis..].iter().product();
    if out.len() < outer * inner_out {
        return Err(short());
    }
    let mut off = 0;
    for (x, s) in inputs {
        let inner: usize = s.dims()[axis..].iter().product();
        if x.len() < outer * inner {
            return Err(short());
        }
        for o in 0..outer {
            out[o * inner_out + off..o * inner_out + off + inner]
                .copy_from_slice(&x[o * inner..(o + 1) * inner]);
        }
        off += inner;
    }
    Ok(())
}

/// Pads `x` with `pre`/`post` elements of `value` per dim.
pub fn pad<T: Copy>(
    x: &[T],
    shape: &Shape,
    pre: &[usize],
    value: T,
    out: &mut [T],
    out_shape: &Shape,
) -> Result<(), KernelError> {
    let r = shape.rank();
    let n = out_shape.count()?;
    if x.len() < shape.count()? || out.len() < n || pre.len() != r || out_shape.rank() != r {
        return Err(short());
    }
    let out = &mut out[..n];
    out.fill(value);
    let m = shape.count()?;
    if m == 0 {
        return Ok(());
    }
    if r == 0 {
        out[0] = x[0];
        return Ok(());
    }
    let os = strides(out_shape.dims());
    let inner = shape.dims()[r - 1];
    let id = shape.dims();
    let mut idx = [0usize; MAX_DIMS];
    for run in x[..m].chunks_exact(inner) {
        let mut base = pre[r - 1];
        for q in 0..r - 1 {
            base += (pre[q] + idx[q]) * os[q];
        }
        out[base..base + inner].copy_from_slice(run);
        for q in (0..r - 1).rev() {
            idx[q] += 1;
            if idx[q] < id[q] {
                break;
            }
            idx[q] = 0;
        }
    }
    Ok(())
}

/// One output coordinate's source: (first index, second index, weight of the second).
fn coord(o: usize, scale: f32, offset: f32, max: usize, centers: bool) -> (usize, usize, f32) {
    let mut v = o as f32 * scale + offset;
    if centers {
        v = v.max(0.0);
    }
    v = v.min(max as f32);
    let i0 = v as usize;
    let i1 = (i0 + 1).min(max);
    (i0, i1, v - i0 as f32)
}

/// Bilinear resize of NHWC `x: [n, ih, iw, c]` to `[n, oh, ow, c]` with XNNPACK's coordinate
/// mapping (half-pixel centers unless aligning corners or in TensorFlow legacy mode).
#[allow(clippy::too_many_arguments)]
pub fn resize_bilinear(
    x: &[f32],
    n: usize,
    ih: usize,
    iw: usize,
    c: usize,
    oh: usize,
    ow: usize,
    align_corners: bool,
    legacy: bool,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if x.len() < n * ih * iw * c || out.len() < n * oh * ow * c {
        return Err(short());
    }
    if ih == 0 || iw == 0 || n == 0 || c == 0 {
        out[..n * oh * ow * c].fill(0.0);
        return Ok(());
    }
    let adj = |o: usize| usize::from(align_corners && o != 1);
    let hs = (ih - adj(oh)) as f32 / (oh - adj(oh)) as f32;
    let ws = (iw - adj(ow)) as f32 / (ow - adj(ow)) as f32;
    let centers = !(align_corners || legacy);
    let (ho, wo) = if centers {
        (0.5 * hs - 0.5, 0.5 * ws - 0.5)
    } else {
        (0.0, 0.0)
    };
    for b in 0..n {
        let img = &x[b * ih * iw * c..(b + 1) * ih * iw * c];
        for oy in 0..oh {
            let (y0, y1, ay) = coord(oy, hs, ho, ih - 1, centers);
            for ox in 0..ow {
                let (x0, x1, ax) = coord(ox, ws, wo, iw - 1, centers);
                let tl = &img[(y0 * iw + x0) * c..][..c];
                let tr = &img[(y0 * iw + x1) * c..][..c];
                let bl = &img[(y1 * iw + x0) * c..][..c];
                let br = &img[(y1 * iw + x1) * c..][..c];
                let o = &mut out[((b * oh + oy) * ow + ox) * c..][..c];
                for k in 0..c {
                    let top = tl[k] + (tr[k] - tl[k]) * ax;
                    let bot = bl[k] + (br[k] - bl[k]) * ax;
                    o[k] = top + (bot - top) * ay;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::INLINE;

    /// Three "threads" that run their tasks one after another (exercises the task split).
    struct Split;
    impl Parallel for Split {
        fn num_threads(&self) -> usize {
            3
        }
        fn parallel_for(&self, n: usize, f: &(dyn Fn(core::ops::Range<usize>) + Sync)) {
            for t in 0..n {
                f(t..t + 1);
            }
        }
    }

    /// The tiled NCHW -> NHWC path split over threads equals the element-by-element permute.
    #[test]
    fn split_transpose_matches_definition() {
        for dims in [
            [4usize, 3, 128, 20],
            [1, 3, 224, 224],
            [2, 5, 7, 9],
            [2, 4, 6, 5],
        ] {
            let s = Shape::new(&dims).unwrap();
            let n: usize = dims.iter().product();
            let x: Vec<f32> = (0..n).map(|v| v as f32).collect();
            let mut o = vec![0f32; n];
            transpose(&Split, &x, &s, &Shape::new(&[0, 2, 3, 1]).unwrap(), &mut o).unwrap();
            let [b, c, h, w] = dims;
            for bi in 0..b {
                for hi in 0..h {
                    for wi in 0..w {
                        for ci in 0..c {
                            let got = o[((bi * h + hi) * w + wi) * c + ci];
                            assert_eq!(got, x[((bi * c + ci) * h + hi) * w + wi], "{dims:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transpose_nchw_to_nhwc() {
        let s = Shape::new(&[1, 2, 2, 3]).unwrap();
        let x: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let mut o = vec![0.0; 12];
        transpose(&INLINE, &x, &s, &Shape::new(&[0, 2, 3, 1]).unwrap(), &mut o).unwrap();
        // out[0][h][w][c] = x[0][c][h][w]
        for c in 0..2 {
            for h in 0..2 {
                for w in 0..3 {
                    assert_eq!(o[(h * 3 + w) * 2 + c], x[(c * 2 + h) * 3 + w]);
                }
            }
        }
    }

    /// Every permutation of some 4-d shapes (short runs, size-1 dims) against index math.
    #[test]
    fn transpose_matches_indexing() {
        let perms: Vec<[usize; 4]> = (0..256)
            .map(|i| [i & 3, (i >> 2) & 3, (i >> 4) & 3, i >> 6])
            .filter(|p| (0..4).all(|d| p.contains(&d)))
            .collect();
        for dims in [[2, 3, 4, 5], [1, 3, 5, 7], [2, 1, 6, 3], [3, 4, 1, 2]] {
            let s = Shape::new(&dims).unwrap();
            let n: usize = dims.iter().product();
            let x: Vec<u32> = (0..n as u32).collect();
            let st = [dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1];
            for p in &perms {
                let mut o = vec![0u32; n];
                transpose(&INLINE, &x, &s, &Shape::new(p).unwrap(), &mut o).unwrap();
                let od = p.map(|d| dims[d]);
                let mut at = 0;
                for a in 0..od[0] {
                    for b in 0..od[1] {
                        for c in 0..od[2] {
                            for d in 0..od[3] {
                                let i = [a, b, c, d];
                                let src: usize = (0..4).map(|q| i[q] * st[p[q]]).sum();
                                assert_eq!(o[at], x[src], "dims {dims:?} perm {p:?}");
                                at += 1;
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn slice_pad_concat() {
        let s = Shape::new(&[2, 3]).unwrap();
        let x = [1, 2, 3, 4, 5, 6];
        let mut o = [0; 2];
        slice(&x, &s, &[1, 1], &Shape::new(&[1, 2]).unwrap(), &mut o).unwrap();
        assert_eq!(o, [5, 6]);
        let mut p = [0; 12];
        pad(&x, &s, &[1, 0], 9, &mut p, &Shape::new(&[3, 4]).unwrap()).unwrap();
        assert_eq!(p, [9, 9, 9, 9, 1, 2, 3, 9, 4, 5, 6, 9]);
        let mut c = [0; 10];
        concat(
            &[(&x[..], s), (&[7, 8][..], Shape::new(&[2, 1]).unwrap())],
            1,
            &mut c[..8],
            &Shape::new(&[2, 4]).unwrap(),
        )
        .unwrap();
        assert_eq!(&c[..8], &[1, 2, 3, 7, 4, 5, 6, 8]);
    }
}
