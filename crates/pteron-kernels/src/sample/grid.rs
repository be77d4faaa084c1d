//! `grid_sampler_2d.out`: bilinear, nearest and bicubic sampling with zeros, border and
//! reflection padding, computed step by step in the types ExecuTorch's C++ uses (the element
//! type's own scalar arithmetic for f16/bf16; integer arithmetic for integer dtypes).

use pteron_core::{
    dispatch_dtype, ArgAccess, ArgView, Element, KernelContext, KernelError, ScalarType, TensorInfo,
};

use super::real;
use crate::util::{require_rank, Acc, AccFloat, AccNum};

/// The float operations the kernels need beyond [`AccFloat`].
pub trait Fl: AccFloat + core::ops::Rem<Output = Self> {
    fn floor(self) -> Self;
    /// `std::nearbyint` in the default rounding mode: ties to even.
    fn nearbyint(self) -> Self;
    fn abs(self) -> Self;
    /// `static_cast<int64_t>` as x86 computes it: NaN and out-of-range values give `i64::MIN`.
    fn to_i64(self) -> i64;
}

macro_rules! fl {
    ($t:ty) => {
        impl Fl for $t {
            #[inline]
            fn floor(self) -> Self {
                crate::math::Libm::floor(self)
            }
            #[inline]
            fn nearbyint(self) -> Self {
                crate::math::Libm::round_ties_even(self)
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                let v = self as f64;
                let lim = -(i64::MIN as f64); // 2^63
                if v.is_nan() || !(-lim..lim).contains(&v) {
                    i64::MIN
                } else {
                    self as i64
                }
            }
        }
    };
}
fl!(f32);
fl!(f64);

/// Rounds `v` through the element type `T` when `R` (c10::Half arithmetic: every operation on
/// f16/bf16 computes in f32 and rounds back); the identity otherwise.
#[inline(always)]
fn r<T: Acc, const R: bool>(v: T::A) -> T::A {
    if R {
        T::from_acc(v).to_acc()
    } else {
        v
    }
}

/// `static_cast<scalar_t>(integer)` (rounded to `T` when `R`).
#[inline(always)]
fn fi<T: Acc, const R: bool>(v: i64) -> T::A
where
    T::A: Fl,
{
    r::<T, R>(T::A::from_f64(v as f64))
}

// ---- grid_sampler_2d ----

pub(super) const BILINEAR: i64 = 0;
pub(super) const NEAREST: i64 = 1;
pub(super) const BICUBIC: i64 = 2;
pub(super) const ZEROS: i64 = 0;
pub(super) const BORDER: i64 = 1;
pub(super) const REFLECTION: i64 = 2;

/// grid_sampler_2d.out: [input, grid, interpolation_mode, padding_mode, align_corners, out].
pub(super) fn check_grid_sampler(a: &ArgView) -> Result<(), KernelError> {
    let op = "grid_sampler_2d";
    let (x, g, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(5)?);
    real(op, x.dtype())?;
    for t in [g, o] {
        if t.dtype() != x.dtype() {
            return Err(KernelError::dtype(t.dtype(), op));
        }
    }
    require_rank(op, 4, &[("input", x), ("grid", g), ("out", o)])?;
    modes(a.int(2)?, a.int(3)?)?;
    a.bool(4)?;
    Ok(())
}

fn modes(interp: i64, pad: i64) -> Result<(), KernelError> {
    if !(BILINEAR..=BICUBIC).contains(&interp) {
        return Err(KernelError::invalid(format!(
            "grid_sampler_2d: unknown interpolation mode {interp}"
        )));
    }
    if !(ZEROS..=REFLECTION).contains(&pad) {
        return Err(KernelError::invalid(format!(
            "grid_sampler_2d: unknown padding mode {pad}"
        )));
    }
    Ok(())
}

/// Shape and strides of one grid_sampler_2d call.
struct Grid {
    n: usize,
    c: usize,
    ih: i64,
    iw: i64,
    oh: usize,
    ow: usize,
    /// Strides (elements) of input, grid and out.
    xs: [usize; 4],
    gs: [usize; 4],
    os: [usize; 4],
    pad: i64,
    align: bool,
}

pub(super) fn strides4(t: &TensorInfo) -> [usize; 4] {
    let s = t.strides();
    [s[0], s[1], s[2], s[3]]
}

/// ExecuTorch's `grid_sampler_unnormalize`.
#[inline]
fn unnormalize<T: Acc, const R: bool>(coord: T::A, size: i64, align: bool) -> T::A
where
    T::A: Fl,
{
    let one = fi::<T, R>(1);
    let two = fi::<T, R>(2);
    if align {
        let t = r::<T, R>(r::<T, R>(coord.add(one)) / two);
        r::<T, R>(t.mul(fi::<T, R>(size - 1)))
    } else {
        let t = r::<T, R>(r::<T, R>(coord.add(one)).mul(fi::<T, R>(size)));
        r::<T, R>(r::<T, R>(t.sub(one)) / two)
    }
}

/// ExecuTorch's `clip_coordinates` on a float: `min(limit - 1, max(v, 0))` with C++'s
/// std::min/max (a NaN input gives `limit - 1`).
#[inline]
fn clip<T: Acc, const R: bool>(v: T::A, limit: i64) -> T::A
where
    T::A: Fl,
{
    let zero = T::A::ZERO;
    let m = if v < zero { zero } else { v };
    let hi = fi::<T, R>(limit - 1);
    if m < hi {
        m
    } else {
        hi
    }
}

/// ExecuTorch's `clip_coordinates` on an integer coordinate.
#[inline]
fn clip_i(v: i64, limit: i64) -> i64 {
    let m = if v < 0 { 0 } else { v };
    if m < limit - 1 {
        m
    } else {
        limit - 1
    }
}

/// ExecuTorch's `reflect_coordinates`.
#[inline]
fn reflect<T: Acc, const R: bool>(v: T::A, twice_low: i64, twice_high: i64) -> T::A
where
    T::A: Fl,
{
    if twice_low == twice_high {
        return T::A::ZERO;
    }
    let two = fi::<T, R>(2);
    let min = r::<T, R>(fi::<T, R>(twice_low) / two);
    let span = r::<T, R>(fi::<T, R>(twice_high - twice_low) / two);
    let v = r::<T, R>(r::<T, R>(v.sub(min)).abs());
    let extra = r::<T, R>(v % span);
    let flips = (r::<T, R>(v / span).floor().to_f64()) as i32;
    if flips % 2 == 0 {
        r::<T, R>(extra.add(min))
    } else {
        r::<T, R>(r::<T, R>(span.sub(extra)).add(min))
    }
}

/// ExecuTorch's `grid_sampler_compute_source_index`.
#[inline]
fn source_index<T: Acc, const R: bool>(coord: T::A, size: i64, pad: i64, align: bool) -> T::A
where
    T::A: Fl,
{
    let c = unnormalize::<T, R>(coord, size, align);
    match pad {
        BORDER => clip::<T, R>(c, size),
        REFLECTION => {
            let c = if align {
                reflect::<T, R>(c, 0, 2 * (size - 1))
            } else {
                reflect::<T, R>(c, -1, 2 * size - 1)
            };
            clip::<T, R>(c, size)
        }
        _ => c,
    }
}

#[inline]
fn within(h: i64, w: i64, ih: i64, iw: i64) -> bool {
    h >= 0 && h < ih && w >= 0 && w < iw
}

impl Grid {
    #[inline]
    fn at(&self, base: usize, h: i64, w: i64) -> usize {
        base + h as usize * self.xs[2] + w as usize * self.xs[3]
    }

    /// Calls `f(input_plane_base, out_index, gx, gy)` for every output element.
    fn for_each<T: Copy>(&self, g: &[T], mut f: impl FnMut(usize, usize, T, T)) {
        for n in 0..self.n {
            for c in 0..self.c {
                let base = n * self.xs[0] + c * self.xs[1];
                for h in 0..self.oh {
                    for w in 0..self.ow {
                        let gi = n * self.gs[0] + h * self.gs[1] + w * self.gs[2];
                        let oi = n * self.os[0] + c * self.os[1] + h * self.os[2] + w * self.os[3];
                        f(base, oi, g[gi], g[gi + self.gs[3]]);
                    }
                }
            }
        }
    }
}

fn bilinear<T: Acc>(p: &Grid, x: &[T], g: &[T], out: &mut [T])
where
    T::A: Fl,
{
    let (ih, iw) = (p.ih, p.iw);
    let f = |v: i64| T::A::from_f64(v as f64);
    p.for_each(g, |base, oi, gx, gy| {
        let ix = source_index::<T, false>(gx.to_acc(), iw, p.pad, p.align);
        let iy = source_index::<T, false>(gy.to_acc(), ih, p.pad, p.align);
        let (ix_nw, iy_nw) = (ix.floor().to_i64(), iy.floor().to_i64());
        let (ix_ne, iy_ne) = (ix_nw.wrapping_add(1), iy_nw);
        let (ix_sw, iy_sw) = (ix_nw, iy_nw.wrapping_add(1));
        let (ix_se, iy_se) = (ix_nw.wrapping_add(1), iy_nw.wrapping_add(1));
        let nw = f(ix_se).sub(ix).mul(f(iy_se).sub(iy));
        let ne = ix.sub(f(ix_sw)).mul(f(iy_sw).sub(iy));
        let sw = f(ix_ne).sub(ix).mul(iy.sub(f(iy_ne)));
        let se = ix.sub(f(ix_nw)).mul(iy.sub(f(iy_nw)));
        let corners = [
            (iy_nw, ix_nw, nw),
            (iy_ne, ix_ne, ne),
            (iy_sw, ix_sw, sw),
            (iy_se, ix_se, se),
        ];
        let mut acc = T::A::ZERO;
        if p.pad == ZEROS {
            for (h, w, wt) in corners {
                if within(h, w, ih, iw) {
                    acc = acc.add(x[p.at(base, h, w)].to_acc().mul(wt));
                }
            }
        } else {
            for (k, (h, w, wt)) in corners.into_iter().enumerate() {
                let v = x[p.at(base, clip_i(h, ih), clip_i(w, iw))].to_acc().mul(wt);
                acc = if k == 0 { v } else { acc.add(v) };
            }
        }
        out[oi] = T::from_acc(acc);
    });
}

fn nearest<T: Acc>(p: &Grid, x: &[T], g: &[T], out: &mut [T])
where
    T::A: Fl,
{
    let (ih, iw) = (p.ih, p.iw);
    p.for_each(g, |base, oi, gx, gy| {
        let ix = source_index::<T, true>(gx.to_acc(), iw, p.pad, p.align);
        let iy = source_index::<T, true>(gy.to_acc(), ih, p.pad, p.align);
        let xn = r::<T, true>(ix.nearbyint()).to_i64();
        let yn = r::<T, true>(iy.nearbyint()).to_i64();
        out[oi] = if p.pad == ZEROS {
            if within(yn, xn, ih, iw) {
                x[p.at(base, yn, xn)]
            } else {
                T::from_acc(T::A::ZERO)
            }
        } else {
            x[p.at(base, clip_i(yn, ih), clip_i(xn, iw))]
        };
    });
}

/// `cubic_convolution1(x, A) = ((A + 2) x - (A + 3)) x x + 1`, rounded per operation.
#[inline]
fn conv1<T: Acc>(x: T::A, a: T::A) -> T::A
where
    T::A: Fl,
{
    let rr = r::<T, true>;
    let t = rr(rr(rr(a.add(fi::<T, true>(2))).mul(x)).sub(rr(a.add(fi::<T, true>(3)))));
    rr(rr(rr(t.mul(x)).mul(x)).add(fi::<T, true>(1)))
}

/// `cubic_convolution2(x, A) = ((A x - 5 A) x + 8 A) x - 4 A`, rounded per operation.
#[inline]
fn conv2<T: Acc>(x: T::A, a: T::A) -> T::A
where
    T::A: Fl,
{
    let rr = r::<T, true>;
    let t = rr(rr(a.mul(x)).sub(rr(fi::<T, true>(5).mul(a))));
    let t = rr(rr(t.mul(x)).add(rr(fi::<T, true>(8).mul(a))));
    rr(rr(t.mul(x)).sub(rr(fi::<T, true>(4).mul(a))))
}

/// `cubic_interp1d(x0, x1, x2, x3, t)`.
#[inline]
fn interp1d<T: Acc>(v: [T::A; 4], t: T::A) -> T::A
where
    T::A: Fl,
{
    let rr = r::<T, true>;
    let a = rr(T::A::from_f64(-0.75));
    let one = fi::<T, true>(1);
    let x2 = rr(one.sub(t));
    let c = [
        conv2::<T>(rr(t.add(one)), a),
        conv1::<T>(t, a),
        conv1::<T>(x2, a),
        conv2::<T>(rr(x2.add(one)), a),
    ];
    let s = rr(rr(v[0].mul(c[0])).add(rr(v[1].mul(c[1]))));
    let s = rr(s.add(rr(v[2].mul(c[2]))));
    rr(s.add(rr(v[3].mul(c[3]))))
}

fn bicubic<T: Acc>(p: &Grid, x: &[T], g: &[T], out: &mut [T])
where
    T::A: Fl,
{
    let (ih, iw) = (p.ih, p.iw);
    let fetch = |base: usize, h: i64, w: i64| -> T::A {
        match p.pad {
            ZEROS => {
                if within(h, w, ih, iw) {
                    x[p.at(base, h, w)].to_acc()
                } else {
                    T::A::ZERO
                }
            }
            BORDER => x[p.at(base, h.clamp(0, ih - 1), w.clamp(0, iw - 1))].to_acc(),
            _ => {
                let (hr, wr) = (fi::<T, true>(h), fi::<T, true>(w));
                let (hr, wr) = if p.align {
                    (
                        reflect::<T, true>(hr, 0, 2 * (ih - 1)),
                        reflect::<T, true>(wr, 0, 2 * (iw - 1)),
                    )
                } else {
                    (
                        reflect::<T, true>(hr, -1, 2 * ih - 1),
                        reflect::<T, true>(wr, -1, 2 * iw - 1),
                    )
                };
                // clip_coordinates keeps the coordinate in [0, size - 1] (NaN → size - 1).
                let hs = clip::<T, true>(hr, ih).to_i64().clamp(0, ih - 1);
                let ws = clip::<T, true>(wr, iw).to_i64().clamp(0, iw - 1);
                x[p.at(base, hs, ws)].to_acc()
            }
        }
    };
    p.for_each(g, |base, oi, gx, gy| {
        let ix = unnormalize::<T, true>(gx.to_acc(), iw, p.align);
        let iy = unnormalize::<T, true>(gy.to_acc(), ih, p.align);
        let (x0, y0) = (ix.floor().to_i64(), iy.floor().to_i64());
        let tx = r::<T, true>(ix.sub(fi::<T, true>(x0)));
        let ty = r::<T, true>(iy.sub(fi::<T, true>(y0)));
        let mut rows = [T::A::ZERO; 4];
        for (k, row) in rows.iter_mut().enumerate() {
            let h = y0.wrapping_add(k as i64 - 1);
            let v = [
                fetch(base, h, x0.wrapping_sub(1)),
                fetch(base, h, x0),
                fetch(base, h, x0.wrapping_add(1)),
                fetch(base, h, x0.wrapping_add(2)),
            ];
            *row = interp1d::<T>(v, tx);
        }
        out[oi] = T::from_acc(interp1d::<T>(rows, ty));
    });
}

// Integer dtypes: C++ integer arithmetic in the element type.

/// `static_cast<T>(v)`: wraps into the element type.
#[inline]
fn wrap_to<T: Element>(v: i64) -> i64 {
    T::from_i64(v).to_i64()
}

fn unnormalize_int<T: Element>(c: i64, size: i64, align: bool) -> i64 {
    if align {
        wrap_to::<T>((c.wrapping_add(1) / 2).wrapping_mul(size - 1))
    } else {
        wrap_to::<T>(c.wrapping_add(1).wrapping_mul(size).wrapping_sub(1) / 2)
    }
}

fn clip_int<T: Element>(v: i64, limit: i64) -> i64 {
    let m = if v < 0 { 0 } else { v };
    let hi = wrap_to::<T>(limit - 1);
    if m < hi {
        m
    } else {
        hi
    }
}

fn reflect_int<T: Element>(v: i64, lo2: i64, hi2: i64) -> Result<i64, KernelError> {
    if lo2 == hi2 {
        return Ok(0);
    }
    let min = wrap_to::<T>(wrap_to::<T>(lo2) / 2);
    let span = wrap_to::<T>(wrap_to::<T>(hi2 - lo2) / 2);
    if span <= 0 {
        return Err(KernelError::invalid(
            "grid_sampler_2d: image too large for reflection in this integer dtype",
        ));
    }
    let v = wrap_to::<T>(v.wrapping_sub(min).wrapping_abs());
    let extra = wrap_to::<T>(v % span);
    let flips = v / span;
    Ok(if flips % 2 == 0 {
        wrap_to::<T>(extra + min)
    } else {
        wrap_to::<T>(span - extra + min)
    })
}

fn sample_int<T: Element>(
    p: &Grid,
    interp: i64,
    x: &[T],
    g: &[T],
    out: &mut [T],
) -> Result<(), KernelError> {
    let (ih, iw) = (p.ih, p.iw);
    let mut err = None;
    let source = |c: i64, size: i64| -> Result<i64, KernelError> {
        let c = unnormalize_int::<T>(c, size, p.align);
        Ok(match p.pad {
            BORDER => clip_int::<T>(c, size),
            REFLECTION => {
                let c = if p.align {
                    reflect_int::<T>(c, 0, 2 * (size - 1))?
                } else {
                    reflect_int::<T>(c, -1, 2 * size - 1)?
                };
                clip_int::<T>(c, size)
            }
            _ => c,
        })
    };
    p.for_each(g, |base, oi, gx, gy| {
        if err.is_some() {
            return;
        }
        let v = if interp == BICUBIC {
            // Coefficients with A = static_cast<T>(-0.75) = 0 and t = 0 keep the centre pixel.
            let (xc, yc) = (
                unnormalize_int::<T>(gx.to_i64(), iw, p.align),
                unnormalize_int::<T>(gy.to_i64(), ih, p.align),
            );
            match p.pad {
                ZEROS => within(yc, xc, ih, iw).then(|| x[p.at(base, yc, xc)]),
                BORDER => Some(x[p.at(base, yc.clamp(0, ih - 1), xc.clamp(0, iw - 1))]),
                _ => {
                    let refl = |c: i64, size: i64| -> Result<i64, KernelError> {
                        let c = wrap_to::<T>(c);
                        let c = if p.align {
                            reflect_int::<T>(c, 0, 2 * (size - 1))?
                        } else {
                            reflect_int::<T>(c, -1, 2 * size - 1)?
                        };
                        Ok(clip_int::<T>(c, size).clamp(0, size - 1))
                    };
                    match (refl(yc, ih), refl(xc, iw)) {
                        (Ok(h), Ok(w)) => Some(x[p.at(base, h, w)]),
                        (Err(e), _) | (_, Err(e)) => {
                            err = Some(e);
                            return;
                        }
                    }
                }
            }
        } else {
            // Bilinear weights are 1 for the north-west corner and 0 for the others; nearest
            // rounds an integer: both read the pixel at the source coordinate.
            let (xc, yc) = match (source(gx.to_i64(), iw), source(gy.to_i64(), ih)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => {
                    err = Some(e);
                    return;
                }
            };
            if p.pad == ZEROS {
                within(yc, xc, ih, iw).then(|| x[p.at(base, yc, xc)])
            } else {
                Some(x[p.at(base, clip_i(yc, ih), clip_i(xc, iw))])
            }
        };
        out[oi] = v.unwrap_or(T::from_i64(0));
    });
    err.map_or(Ok(()), Err)
}

pub(super) fn grid_sampler_2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "grid_sampler_2d";
    let (x, g) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    require_rank(op, 4, &[("input", &x), ("grid", &g)])?;
    if g.size(3) != 2 || g.size(0) != x.size(0) {
        // [N, H, W, 2], with the input's N
        let want = [x.size(0), g.size(1), g.size(2), 2];
        return Err(KernelError::shape_mismatch(op, "grid", &want, g.sizes()));
    }
    let (interp, pad, align) = (ctx.int(2)?, ctx.int(3)?, ctx.bool(4)?);
    modes(interp, pad)?;
    let osz = [x.size(0), x.size(1), g.size(1), g.size(2)];
    ctx.resize(5, &osz)?;
    let ([xr, gr], [mut o]) = ctx.io([0, 1], [5])?;
    let dt = x.dtype();
    if gr.info.dtype() != dt || o.info.dtype() != dt {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    if o.info.numel() == 0 {
        return Ok(());
    }
    if x.size(2) == 0 || x.size(3) == 0 {
        return Err(KernelError::shape(format!("{op}: empty input image")));
    }
    let p = Grid {
        n: x.size(0),
        c: x.size(1),
        ih: x.size(2) as i64,
        iw: x.size(3) as i64,
        oh: g.size(1),
        ow: g.size(2),
        xs: strides4(&x),
        gs: strides4(&g),
        os: strides4(o.info),
        pad,
        align,
    };
    macro_rules! float {
        ($T:ty) => {{
            let (xs, gs, os) = (
                xr.as_slice::<$T>()?,
                gr.as_slice::<$T>()?,
                o.as_mut_slice::<$T>()?,
            );
            match interp {
                BILINEAR => bilinear::<$T>(&p, xs, gs, os),
                NEAREST => nearest::<$T>(&p, xs, gs, os),
                _ => bicubic::<$T>(&p, xs, gs, os),
            }
            Ok(())
        }};
    }
    match dt {
        ScalarType::Float => float!(f32),
        ScalarType::Double => float!(f64),
        ScalarType::Half => float!(half::f16),
        ScalarType::BFloat16 => float!(half::bf16),
        ScalarType::Bool => Err(KernelError::dtype(dt, op)),
        _ => {
            dispatch_dtype!(dt, T => sample_int::<T>(&p, interp, xr.as_slice()?, gr.as_slice()?, o.as_mut_slice()?),
            _ => Err(KernelError::dtype(dt, op)))
        }
    }
}
