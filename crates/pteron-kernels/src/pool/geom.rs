//! Pooling geometry: the 4-d [`Nchw`] view of an input, the `int[2]` arguments, output
//! sizes and the in-bounds taps of a window.

use pteron_core::{ArgAccess, Dims, KernelContext, KernelError, TensorInfo};

/// A `[N, C, H, W]` or `[C, H, W]` tensor seen as 4-d: sizes and element strides (through its
/// dim order; N = 1 with stride 0 for a 3-d tensor).
#[derive(Clone, Copy, Debug)]
pub(super) struct Nchw {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) sn: usize,
    pub(super) sc: usize,
    pub(super) sh: usize,
    pub(super) sw: usize,
}

impl Nchw {
    pub(super) fn of(t: &TensorInfo) -> Result<Nchw, KernelError> {
        let (s, st) = (t.sizes(), t.strides());
        match t.rank() {
            4 => Ok(Nchw {
                n: s[0],
                c: s[1],
                h: s[2],
                w: s[3],
                sn: st[0],
                sc: st[1],
                sh: st[2],
                sw: st[3],
            }),
            3 => Ok(Nchw {
                n: 1,
                c: s[0],
                h: s[1],
                w: s[2],
                sn: 0,
                sc: st[0],
                sh: st[1],
                sw: st[2],
            }),
            r => Err(KernelError::shape(format!(
                "pool2d: input {:?} must have 3 or 4 dims (has {r})",
                s
            ))),
        }
    }
    #[inline(always)]
    pub(super) fn at(&self, n: usize, c: usize, h: usize, w: usize) -> usize {
        n * self.sn + c * self.sc + h * self.sh + w * self.sw
    }
}

/// Output sizes: the input's leading dims and `(oh, ow)`.
pub(super) fn out_sizes(x: &TensorInfo, oh: usize, ow: usize) -> Dims {
    let mut s = x.dims();
    let r = s.len();
    s.as_mut_slice()[r - 2] = oh;
    s.as_mut_slice()[r - 1] = ow;
    s
}

/// An `int[2]` argument given as 1 or 2 entries (or empty: `default`).
pub(super) fn pair(
    ctx: &KernelContext,
    i: usize,
    default: Option<[usize; 2]>,
    what: &str,
) -> Result<[usize; 2], KernelError> {
    let l = ctx.int_list(i)?;
    let get = |k: usize| -> Result<usize, KernelError> {
        let v = l.get(k)?;
        usize::try_from(v).map_err(|_| KernelError::invalid(format!("pool2d: negative {what} {v}")))
    };
    match (l.len(), default) {
        (0, Some(d)) => Ok(d),
        (1, _) => Ok([get(0)?, get(0)?]),
        (2, _) => Ok([get(0)?, get(1)?]),
        (n, _) => Err(KernelError::invalid(format!(
            "pool2d: {what} must have 1 or 2 entries, got {n}"
        ))),
    }
}

/// PyTorch's `pooling_output_shape`.
pub fn pooling_output_size(
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    ceil: bool,
) -> Result<usize, KernelError> {
    // Checked: kernel sizes, paddings, strides and dilations come from the program (found by
    // fuzzing: an overflow panic).
    let size = || -> Option<i64> {
        let (i, k, p, s, d) = (
            i64::try_from(input).ok()?,
            i64::try_from(k).ok()?,
            i64::try_from(pad).ok()?,
            i64::try_from(stride).ok()?,
            i64::try_from(dil).ok()?,
        );
        if s <= 0 {
            return None;
        }
        let num = i
            .checked_add(p.checked_mul(2)?)?
            .checked_sub(d.checked_mul(k.checked_sub(1)?)?)?
            .checked_sub(1)?
            .checked_add(if ceil { s - 1 } else { 0 })?;
        let mut o = num.div_euclid(s).checked_add(1)?;
        if ceil && (o - 1).checked_mul(s)? >= i.checked_add(p)? {
            o -= 1;
        }
        Some(o)
    };
    let o = size().ok_or_else(|| {
        KernelError::invalid(format!(
            "pool2d: output size out of range (input {input}, kernel {k}, padding {pad}, stride {stride}, dilation {dil})"
        ))
    })?;
    if o <= 0 {
        return Err(KernelError::shape(format!(
            "pool2d: output size {o} is too small (input {input}, kernel {k}, padding {pad}, stride {stride}, dilation {dil})"
        )));
    }
    Ok(o as usize)
}

pub(super) struct PoolGeom {
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) k: [usize; 2],
    pub(super) s: [usize; 2],
    pub(super) p: [usize; 2],
    pub(super) d: [usize; 2],
}

pub(super) fn pool_geom(
    ctx: &KernelContext,
    x: &TensorInfo,
    dil: Option<usize>,
    ceil: bool,
) -> Result<PoolGeom, KernelError> {
    let g = Nchw::of(x)?;
    let k = pair(ctx, 1, None, "kernel_size")?;
    let s = pair(ctx, 2, Some(k), "stride")?;
    let p = pair(ctx, 3, None, "padding")?;
    let d = match dil {
        Some(i) => pair(ctx, i, None, "dilation")?,
        None => [1, 1],
    };
    for a in 0..2 {
        if k[a] == 0 || s[a] == 0 || d[a] == 0 {
            return Err(KernelError::invalid(
                "pool2d: kernel size, stride and dilation must be positive",
            ));
        }
        // Max pooling bounds padding by the effective kernel, average pooling by the kernel.
        let limit = if dil.is_some() {
            ((k[a] - 1) * d[a]).div_ceil(2)
        } else {
            k[a] / 2
        };
        if p[a] > limit {
            return Err(KernelError::invalid(
                "pool2d: padding should be at most half of the kernel size",
            ));
        }
    }
    let oh = pooling_output_size(g.h, k[0], p[0], s[0], d[0], ceil)?;
    let ow = pooling_output_size(g.w, k[1], p[1], s[1], d[1], ceil)?;
    Ok(PoolGeom { oh, ow, k, s, p, d })
}

/// The taps `t < k` of a window starting at `start` (dilation `d`) whose position
/// `start + t·d` lies in `0..len`, computed rather than searched: the kernel size is a
/// program's scalar and may be huge next to a tiny input. (Shared with the XNNPACK kernels,
/// which call it per output pixel: no division for dilation 1.)
pub fn inside_taps(start: i64, k: usize, d: usize, len: i64) -> core::ops::Range<usize> {
    let (start, d, k) = (start as i128, d.max(1) as i128, k as i128);
    let first = match start {
        s if s >= 0 => 0,
        s if d == 1 => -s,
        s => (d - 1 - s) / d,
    };
    let past_last = match len as i128 - 1 - start {
        r if r < 0 => 0,
        r if d == 1 => r + 1,
        r => r / d + 1,
    };
    let first = first.min(k);
    first as usize..past_last.clamp(first, k) as usize
}
