//! Resampling: `grid_sampler_2d.out` (bilinear, nearest and bicubic interpolation with zeros,
//! border and reflection padding, `align_corners`) and `_upsample_bilinear2d_aa.out`
//! (antialiased bilinear resize).
//!
//! Both follow ExecuTorch's portable kernels step by step, including the type each step computes
//! in, so that results match to the last bit where it is practical:
//!
//! - grid_sampler_2d: bilinear weights and sums in f32 for f16/bf16 (f64 for f64); nearest and
//!   bicubic compute in the element type itself, i.e. for f16/bf16 every operation is rounded to
//!   it, as `c10::Half` arithmetic does. Integer dtypes (which ExecuTorch's kernel accepts, while
//!   PyTorch's does not) compute their coordinates in integer arithmetic as its C++ does, which
//!   makes every mode read the single pixel at the truncated coordinate.
//! - _upsample_bilinear2d_aa: triangle-filter weights in f32 over the support of each output
//!   pixel; the sum is accumulated in the element type (each step rounded for f16/bf16,
//!   truncated for integers).
//!
//! Tensors may have any dim order (addressed through their strides).

use pteron_core::{
    dispatch_dtype, ArgAccess, ArgView, DtypeSet, Element, Kernel, KernelContext, KernelError,
    KernelRegistry, ScalarType, TensorInfo,
};

use crate::util::{Acc, AccFloat, AccNum};

pub fn register(r: &mut KernelRegistry) {
    r.register(
        "aten::grid_sampler_2d.out",
        Kernel::with_check(grid_sampler_2d_out, check_grid_sampler).dtypes(DtypeSet::REAL),
    );
    r.register(
        "aten::_upsample_bilinear2d_aa.out",
        Kernel::with_check(upsample_bilinear2d_aa_out, check_upsample_aa).dtypes(DtypeSet::REAL),
    );
}

fn real(op: &'static str, dt: ScalarType) -> Result<(), KernelError> {
    if ScalarType::REAL_AND_BOOL.contains(&dt) && dt != ScalarType::Bool {
        Ok(())
    } else {
        Err(KernelError::dtype(dt, op))
    }
}

// ---- C++ scalar arithmetic of the element type ----

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
                <$t>::floor(self)
            }
            #[inline]
            fn nearbyint(self) -> Self {
                <$t>::round_ties_even(self)
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

const BILINEAR: i64 = 0;
const NEAREST: i64 = 1;
const BICUBIC: i64 = 2;
const ZEROS: i64 = 0;
const BORDER: i64 = 1;
const REFLECTION: i64 = 2;

/// grid_sampler_2d.out: [input, grid, interpolation_mode, padding_mode, align_corners, out].
fn check_grid_sampler(a: &ArgView) -> Result<(), KernelError> {
    let op = "grid_sampler_2d";
    let (x, g, o) = (a.tensor(0)?, a.tensor(1)?, a.tensor(5)?);
    real(op, x.dtype())?;
    for t in [g, o] {
        if t.dtype() != x.dtype() {
            return Err(KernelError::dtype(t.dtype(), op));
        }
    }
    if x.rank() != 4 || g.rank() != 4 || o.rank() != 4 {
        return Err(KernelError::shape(format!(
            "{op}: input, grid and out must be 4-d (ranks {}, {}, {})",
            x.rank(),
            g.rank(),
            o.rank()
        )));
    }
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

fn strides4(t: &TensorInfo) -> [usize; 4] {
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

fn grid_sampler_2d_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "grid_sampler_2d";
    let (x, g) = (*ctx.tensor(0)?, *ctx.tensor(1)?);
    if x.rank() != 4 || g.rank() != 4 {
        return Err(KernelError::shape(format!(
            "{op}: input and grid must be 4-d"
        )));
    }
    if g.size(3) != 2 || g.size(0) != x.size(0) {
        return Err(KernelError::shape(format!(
            "{op}: grid {:?} must be [N, H, W, 2] with the input's N ({:?})",
            g.sizes(),
            x.sizes()
        )));
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

// ---- _upsample_bilinear2d_aa ----

/// _upsample_bilinear2d_aa.out: [input, output_size, align_corners, scales_h, scales_w, out].
fn check_upsample_aa(a: &ArgView) -> Result<(), KernelError> {
    let op = "_upsample_bilinear2d_aa";
    let (x, o) = (a.tensor(0)?, a.tensor(5)?);
    real(op, x.dtype())?;
    if o.dtype() != x.dtype() {
        return Err(KernelError::dtype(o.dtype(), op));
    }
    if x.rank() != 4 || o.rank() != 4 {
        return Err(KernelError::shape(format!(
            "{op}: input and out must be 4-d (ranks {} and {})",
            x.rank(),
            o.rank()
        )));
    }
    if a.int_list(1)?.len() != 2 {
        return Err(KernelError::invalid(format!(
            "{op}: output_size must have 2 entries"
        )));
    }
    a.bool(2)?;
    a.opt_double(3)?;
    a.opt_double(4)?;
    Ok(())
}

/// The input range and normalisation of one output pixel along one axis (f32, as ExecuTorch's
/// `compute_aa_kernel_params<float>`).
#[derive(Clone, Copy, Debug)]
struct AaParams {
    lo: usize,
    hi: usize,
    /// `Some(i)`: no input pixel has weight; `i` alone gets weight 1.
    fallback: Option<usize>,
    center: f32,
    invscale: f32,
    total: f32,
}

#[inline]
fn aa_filter(x: f32) -> f32 {
    let x = x.abs();
    if x < 1.0 {
        1.0 - x
    } else {
        0.0
    }
}

/// `static_cast<int64_t>(float)` (truncation; out-of-range saturates where C++ is undefined).
#[inline]
fn trunc_i64(v: f32) -> i64 {
    v as i64
}

impl AaParams {
    fn new(o: usize, scale: f32, input: usize) -> AaParams {
        let center = scale * (o as f32 + 0.5);
        let support = if scale >= 1.0 { scale } else { 1.0 };
        let lo = trunc_i64(center - support + 0.5).max(0);
        let hi = trunc_i64(center + support + 0.5).min(input as i64);
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
        let fallback = |center: f32| {
            let i = trunc_i64(center).min(input as i64 - 1).max(0) as usize;
            AaParams {
                lo: i,
                hi: i + 1,
                fallback: Some(i),
                center,
                invscale,
                total: 1.0,
            }
        };
        if hi <= lo {
            return fallback(center);
        }
        let mut total = 0.0f32;
        for x in lo..hi {
            total += aa_filter((x as f32 - center + 0.5) * invscale);
        }
        if total <= 0.0 {
            return fallback(center);
        }
        AaParams {
            lo: lo as usize,
            hi: hi as usize,
            fallback: None,
            center,
            invscale,
            total,
        }
    }

    #[inline]
    fn weight(&self, i: usize) -> f32 {
        match self.fallback {
            Some(f) => (i == f) as u8 as f32,
            None => aa_filter((i as f32 - self.center + 0.5) * self.invscale) / self.total,
        }
    }
}

/// `value += in * h_weight * w_weight` in the element type, as C++ computes it.
pub trait AaElem: Element {
    fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self;
}

macro_rules! aa_float {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                value + input * hw as $t * ww as $t
            }
        }
    };
}
aa_float!(f32);
aa_float!(f64);

macro_rules! aa_half {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                // Half * float is float; `Half += float` converts the float to Half first.
                let x = <$t>::from_f32(input.to_f32() * hw * ww);
                <$t>::from_f32(value.to_f32() + x.to_f32())
            }
        }
    };
}
aa_half!(half::f16);
aa_half!(half::bf16);

macro_rules! aa_int {
    ($t:ty) => {
        impl AaElem for $t {
            #[inline]
            fn step(value: Self, input: Self, hw: f32, ww: f32) -> Self {
                // int * float is float; `int += float` truncates the float sum.
                (value as f32 + input as f32 * hw * ww) as $t
            }
        }
    };
}
aa_int!(u8);
aa_int!(i8);
aa_int!(i16);
aa_int!(i32);
aa_int!(i64);

fn upsample_aa<T: AaElem>(
    x: &[T],
    out: &mut [T],
    (xi, oi): (&TensorInfo, &TensorInfo),
    (scale_h, scale_w): (f32, f32),
) {
    let (xs, os) = (strides4(xi), strides4(oi));
    let (ih, iw) = (xi.size(2), xi.size(3));
    for n in 0..oi.size(0) {
        for oh in 0..oi.size(2) {
            let hp = AaParams::new(oh, scale_h, ih);
            for ow in 0..oi.size(3) {
                let wp = AaParams::new(ow, scale_w, iw);
                for c in 0..oi.size(1) {
                    let base = n * xs[0] + c * xs[1];
                    let mut value = T::from_i64(0);
                    for h in hp.lo..hp.hi {
                        let hw = hp.weight(h);
                        for w in wp.lo..wp.hi {
                            let ww = wp.weight(w);
                            value = T::step(value, x[base + h * xs[2] + w * xs[3]], hw, ww);
                        }
                    }
                    out[n * os[0] + c * os[1] + oh * os[2] + ow * os[3]] = value;
                }
            }
        }
    }
}

/// ExecuTorch's `area_pixel_compute_scale<double>` with the scale it derives first.
fn aa_scale(input: usize, output: usize, align: bool, scale: Option<f64>) -> f64 {
    if align {
        if output > 1 {
            (input as f64 - 1.0) / (output as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) => 1.0 / s,
            None => input as f64 / output as f64,
        }
    }
}

fn upsample_bilinear2d_aa_out(ctx: &mut KernelContext) -> Result<(), KernelError> {
    let op = "_upsample_bilinear2d_aa";
    let x = *ctx.tensor(0)?;
    if x.rank() != 4 {
        return Err(KernelError::shape(format!("{op}: input must be 4-d")));
    }
    let l = ctx.int_list(1)?;
    if l.len() != 2 {
        return Err(KernelError::invalid(format!(
            "{op}: output_size must have 2 entries"
        )));
    }
    let (oh, ow) = (l.get(0)?, l.get(1)?);
    if oh <= 0 || ow <= 0 {
        return Err(KernelError::invalid(format!(
            "{op}: output size ({oh}, {ow}) must be positive"
        )));
    }
    let (oh, ow) = (oh as usize, ow as usize);
    let align = ctx.bool(2)?;
    let (sh, sw) = (ctx.opt_double(3)?, ctx.opt_double(4)?);
    let (ih, iw) = (x.size(2), x.size(3));
    // Both scales given: used; otherwise derived from the sizes (output / input).
    let (fh, fw) = match (sh, sw) {
        (Some(h), Some(w)) => (h, w),
        _ => (oh as f64 / ih as f64, ow as f64 / iw as f64),
    };
    let kh = aa_scale(ih, oh, align, Some(fh)) as f32;
    let kw = aa_scale(iw, ow, align, Some(fw)) as f32;
    if !kh.is_finite() || !kw.is_finite() {
        return Err(KernelError::invalid(format!(
            "{op}: scales ({fh}, {fw}) give a non-finite sampling step"
        )));
    }
    ctx.resize(5, &[x.size(0), x.size(1), oh, ow])?;
    let ([xr], [mut o]) = ctx.io([0], [5])?;
    let dt = x.dtype();
    if o.info.dtype() != dt {
        return Err(KernelError::dtype(o.info.dtype(), op));
    }
    if o.info.numel() == 0 {
        return Ok(());
    }
    if ih == 0 || iw == 0 {
        return Err(KernelError::shape(format!("{op}: empty input image")));
    }
    let oi = *o.info;
    macro_rules! go {
        ($T:ty) => {
            upsample_aa::<$T>(xr.as_slice()?, o.as_mut_slice()?, (&x, &oi), (kh, kw))
        };
    }
    match dt {
        ScalarType::Float => go!(f32),
        ScalarType::Double => go!(f64),
        ScalarType::Half => go!(half::f16),
        ScalarType::BFloat16 => go!(half::bf16),
        ScalarType::Byte => go!(u8),
        ScalarType::Char => go!(i8),
        ScalarType::Short => go!(i16),
        ScalarType::Int => go!(i32),
        ScalarType::Long => go!(i64),
        _ => return Err(KernelError::dtype(dt, op)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::testing::TestCall;
    use pteron_core::ScalarType as St;

    fn close(got: &[f32], want: &[f32], tol: f32) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{got:?}\nvs {want:?}"
            );
        }
    }

    fn grid_run<T: Element>(
        x: (&[usize], &[T]),
        g: (&[usize], &[T]),
        interp: i64,
        pad: i64,
        align: bool,
    ) -> Result<Vec<T>, KernelError> {
        let mut c = TestCall::new();
        c.tensor(x.0, x.1);
        c.tensor(g.0, g.1);
        c.int(interp);
        c.int(pad);
        c.bool(align);
        let o = c.out(T::DTYPE, &[1, 1, 1, 1]);
        c.ret(o);
        c.check(check_grid_sampler)?;
        c.run(grid_sampler_2d_out)?;
        Ok(c.output::<T>(o))
    }

    // A 2x3 image [[0, 1, 2], [3, 4, 5]].
    const IMG: [f32; 6] = [0., 1., 2., 3., 4., 5.];

    #[test]
    fn grid_identity_corners() {
        // align_corners: grid corners (-1,-1), (1,-1), (-1,1), (1,1) hit the corner pixels.
        let g = [-1.0f32, -1., 1., -1., -1., 1., 1., 1.];
        for interp in [BILINEAR, NEAREST, BICUBIC] {
            let v = grid_run(
                (&[1, 1, 2, 3], &IMG),
                (&[1, 2, 2, 2], &g),
                interp,
                ZEROS,
                true,
            )
            .unwrap();
            close(&v, &[0., 2., 3., 5.], 1e-6);
        }
    }

    #[test]
    fn grid_bilinear_padding_modes() {
        // Not aligned: x = 0 maps to pixel 1 (of 3), y = 0 to 0.5 (between the rows): 2.5.
        // x = 1.5 maps to 3.25: zeros padding reads nothing (columns 3 and 4), border clamps
        // to column 2.
        let g = [0.0f32, 0., 1.5, 0.];
        let v = grid_run(
            (&[1, 1, 2, 3], &IMG),
            (&[1, 1, 2, 2], &g),
            BILINEAR,
            ZEROS,
            false,
        )
        .unwrap();
        close(&v, &[2.5, 0.0], 1e-6);
        let v = grid_run(
            (&[1, 1, 2, 3], &IMG),
            (&[1, 1, 2, 2], &g),
            BILINEAR,
            BORDER,
            false,
        )
        .unwrap();
        close(&v, &[2.5, 3.5], 1e-6);
        // Reflection: 3.25 reflects about 2.5 (the unaligned edge) to 1.75: columns 1 and 2
        // weighted 0.25 and 0.75, rows averaged: 0.25 * 2.5 + 0.75 * 3.5.
        let v = grid_run(
            (&[1, 1, 2, 3], &IMG),
            (&[1, 1, 2, 2], &g),
            BILINEAR,
            REFLECTION,
            false,
        )
        .unwrap();
        close(&v, &[2.5, 3.25], 1e-6);
        // Reflection of x = -1.5 (pixel -1.25) about -0.5: 0.25 → columns 0 and 1 weighted 0.75
        // and 0.25, rows averaged: 0.75 * 1.5 + 0.25 * 2.5.
        let v = grid_run(
            (&[1, 1, 2, 3], &IMG),
            (&[1, 1, 1, 2], &[-1.5f32, 0.]),
            BILINEAR,
            REFLECTION,
            false,
        )
        .unwrap();
        close(&v, &[1.75], 1e-6);
    }

    #[test]
    fn grid_nearest_rounds_half_to_even() {
        // Aligned x = 0 over width 2 is pixel 0.5: nearbyint gives 0.
        let img = [10.0f32, 20.];
        let v = grid_run(
            (&[1, 1, 1, 2], &img),
            (&[1, 1, 1, 2], &[0.0f32, 0.]),
            NEAREST,
            ZEROS,
            true,
        )
        .unwrap();
        assert_eq!(v, vec![10.]);
        // Out of range with zeros padding: 0.
        let v = grid_run(
            (&[1, 1, 1, 2], &img),
            (&[1, 1, 1, 2], &[3.0f32, 0.]),
            NEAREST,
            ZEROS,
            true,
        )
        .unwrap();
        assert_eq!(v, vec![0.]);
        let v = grid_run(
            (&[1, 1, 1, 2], &img),
            (&[1, 1, 1, 2], &[3.0f32, 0.]),
            NEAREST,
            BORDER,
            true,
        )
        .unwrap();
        assert_eq!(v, vec![20.]);
    }

    #[test]
    fn grid_bicubic_between_pixels() {
        // Rows [0, 1, 2, 3]; aligned x = 0.1 is pixel 1.65. The cubic kernel (A = -0.75) does
        // not reproduce the ramp exactly: torch.nn.functional.grid_sample gives 1.615875.
        let img: Vec<f64> = (0..16).map(|i| (i % 4) as f64).collect();
        let v = grid_run(
            (&[1, 1, 4, 4], &img),
            (&[1, 1, 1, 2], &[0.1f64, 0.]),
            BICUBIC,
            BORDER,
            true,
        )
        .unwrap();
        assert!((v[0] - 1.615875).abs() < 1e-12, "{v:?}");
    }

    #[test]
    fn grid_integer_dtype() {
        let img: Vec<i32> = (0..6).collect();
        // Integer grid: align_corners, (1, 1) → ((1+1)/2)*(size-1) = bottom-right pixel.
        let v = grid_run(
            (&[1, 1, 2, 3], &img),
            (&[1, 1, 2, 2], &[1i32, 1, -1, 0]),
            BILINEAR,
            ZEROS,
            true,
        )
        .unwrap();
        // (-1, 0): x = 0, y = ((0+1)/2)*1 = 0 → pixel (0, 0).
        assert_eq!(v, vec![5, 0]);
        let v = grid_run(
            (&[1, 1, 2, 3], &img),
            (&[1, 1, 1, 2], &[3i32, 0]),
            NEAREST,
            BORDER,
            true,
        )
        .unwrap();
        // x = 2*2 = 4 → clipped to 2; y = 0.
        assert_eq!(v, vec![2]);
        let v = grid_run(
            (&[1, 1, 2, 3], &img),
            (&[1, 1, 1, 2], &[3i32, 0]),
            BICUBIC,
            ZEROS,
            true,
        )
        .unwrap();
        assert_eq!(v, vec![0]);
    }

    #[test]
    fn grid_hostile_coordinates() {
        // Extreme integer and non-finite float grid values: errors or zeros, never a panic.
        let img: Vec<i64> = (0..6).collect();
        for pad in [ZEROS, BORDER, REFLECTION] {
            for interp in [BILINEAR, NEAREST, BICUBIC] {
                for align in [false, true] {
                    let g = [i64::MAX, i64::MIN, -1, i64::MAX];
                    let _ = grid_run(
                        (&[1, 1, 2, 3], &img),
                        (&[1, 1, 2, 2], &g),
                        interp,
                        pad,
                        align,
                    );
                    let g = [f32::NAN, f32::INFINITY, -1e30, f32::NEG_INFINITY];
                    let _ = grid_run(
                        (&[1, 1, 2, 3], &IMG),
                        (&[1, 1, 2, 2], &g),
                        interp,
                        pad,
                        align,
                    );
                }
            }
        }
    }

    #[test]
    fn grid_checks() {
        // Bool input, bad mode, wrong grid shape.
        assert!(grid_run(
            (&[1, 1, 1, 2], &[Bool(1), Bool(0)]),
            (&[1, 1, 1, 2], &[Bool(0), Bool(0)]),
            0,
            0,
            true
        )
        .is_err());
        assert!(grid_run(
            (&[1, 1, 1, 2], &[1.0f32, 2.]),
            (&[1, 1, 1, 2], &[0.0f32, 0.]),
            3,
            0,
            true
        )
        .is_err());
        assert!(grid_run(
            (&[1, 1, 1, 2], &[1.0f32, 2.]),
            (&[1, 1, 2, 1], &[0.0f32, 0.]),
            0,
            0,
            true
        )
        .is_err());
        assert!(grid_run(
            (&[1, 1, 1, 2], &[1.0f32, 2.]),
            (&[2, 1, 1, 2], &[0.0f32; 4]),
            0,
            0,
            true
        )
        .is_err());
    }
    use pteron_core::Bool;

    fn aa_run<T: Element>(
        x: (&[usize], &[T]),
        size: [i64; 2],
        align: bool,
    ) -> (Vec<usize>, Vec<T>) {
        let mut c = TestCall::new();
        c.tensor(x.0, x.1);
        c.int_list(&size);
        c.bool(align);
        c.none();
        c.none();
        let o = c.out(T::DTYPE, &[1, 1, 1, 1]);
        c.ret(o);
        c.check(check_upsample_aa).unwrap();
        c.run(upsample_bilinear2d_aa_out).unwrap();
        (c.info(o).sizes().to_vec(), c.output::<T>(o))
    }

    #[test]
    fn aa_downscale_by_two_averages() {
        // Width 4 → 2: scale 2, support 2; output 0 covers inputs 0..3 with triangle weights
        // centred at 1: |x + 0.5 - 1| / 2 → weights 0.75, 0.75, 0.25 (x = 0, 1, 2) / 1.75.
        let x = [1.0f32, 2., 3., 4.];
        let (s, v) = aa_run((&[1, 1, 1, 4], &x), [1, 2], false);
        assert_eq!(s, vec![1, 1, 1, 2]);
        let w0 = (0.75 * 1. + 0.75 * 2. + 0.25 * 3.) / 1.75;
        let w1 = (0.25 * 2. + 0.75 * 3. + 0.75 * 4.) / 1.75;
        close(&v, &[w0, w1], 1e-6);
        // Same size: identity.
        let (_, v) = aa_run((&[1, 1, 1, 4], &x), [1, 4], false);
        close(&v, &x, 1e-6);
    }

    #[test]
    fn aa_upscale_interpolates() {
        // Width 2 → 4 (scale 0.5): plain bilinear with support 1.
        let x = [0.0f64, 4.];
        let (_, v) = aa_run((&[1, 1, 1, 2], &x), [1, 4], false);
        // centres 0.25, 0.75, 1.25, 1.75 → sample positions -0.25.. clamp-normalised weights.
        let want = [0.0, 1.0, 3.0, 4.0];
        for (g, w) in v.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{v:?}");
        }
    }

    #[test]
    fn aa_channels_last_matches_contiguous() {
        let data: Vec<f32> = (0..2 * 3 * 5).map(|i| ((i * 7) % 11) as f32).collect();
        let (_, want) = aa_run((&[1, 2, 3, 5], &data), [2, 2], false);
        // The same tensor stored NHWC.
        let mut nhwc = vec![0.0f32; data.len()];
        for c in 0..2 {
            for h in 0..3 {
                for w in 0..5 {
                    nhwc[(h * 5 + w) * 2 + c] = data[(c * 3 + h) * 5 + w];
                }
            }
        }
        let mut c = TestCall::new();
        c.tensor_with_dim_order(&[1, 2, 3, 5], &[0, 2, 3, 1], &nhwc);
        c.int_list(&[2, 2]);
        c.bool(false);
        c.none();
        c.none();
        let o = c.out(St::Float, &[1, 2, 2, 2]);
        c.ret(o);
        c.run(upsample_bilinear2d_aa_out).unwrap();
        assert_eq!(c.output::<f32>(o), want);
    }
}
