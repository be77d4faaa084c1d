//! int8 binary operations. Addition and subtraction follow XNNPACK's fixed-point arithmetic
//! exactly (`AddParams`): rounding them in float instead differs by one step on values within
//! ~10⁻⁴ of a half step, a few hundred per residual add of ResNet-18, and a deep network
//! amplifies those (issue 28). The others are computed in float from the dequantized operands,
//! clamped, rounded.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::par::for_chunks_mut;
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};

use crate::graph::BinaryOp;
use crate::util::{Shape, MAX_DIMS};

use super::{multiversion, round_small, Q};

/// Same-shape int8 operands, elementwise: the result of `binary`'s `f` (clamped before
/// rounding; the bounds are integers) in a loop compiled for the CPU's vector width.
struct SameShape<'a> {
    out: &'a mut [i8],
    a: &'a [i8],
    b: &'a [i8],
    q: (Q, Q),
    inv: f32,
    zo: i32,
    bounds: (i32, i32),
}

impl<'a> SameShape<'a> {
    fn with<F: Fn(f32, f32) -> f32>(self, op: F) -> SameShapeOp<'a, F> {
        SameShapeOp { e: self, op }
    }
}

struct SameShapeOp<'a, F> {
    e: SameShape<'a>,
    op: F,
}

impl<F: Fn(f32, f32) -> f32> SimdOp for SameShapeOp<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, _s: S) {
        let SameShape {
            out,
            a,
            b,
            q: (qa, qb),
            inv,
            zo,
            bounds: (lo, hi),
        } = self.e;
        let (lo, hi) = ((lo - zo) as f32, (hi - zo) as f32);
        for ((d, &x), &y) in out.iter_mut().zip(a).zip(b) {
            let (xa, yb) = (
                (x as i32 - qa.zp) as f32 * qa.scale,
                (y as i32 - qb.zp) as f32 * qb.scale,
            );
            *d = round_small(((self.op)(xa, yb) * inv).min(hi).max(lo)).wrapping_add(zo) as i8;
        }
    }
}

/// XNNPACK's int8 addition `out = a·sa/so + b·sb/so` in fixed point: each operand's scale
/// relative to the output's, `sa/so` and `sb/so` (f32), becomes an integer multiplier with
/// `shift` fractional bits, where `shift = 20 − exponent(max(|sa/so|, |sb/so|))` (so the larger
/// multiplier has 21 bits) and each multiplier is rounded to nearest even; then
/// `acc = bias + a·ma + b·mb` with `bias = 2^(shift−1) − ma·za − mb·zb`, and the result is
/// `(acc >> shift) + zo` (arithmetic shift: ties round up), clamped. Subtraction negates `mb`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AddParams {
    pub ma: i32,
    pub mb: i32,
    pub bias: i32,
    pub shift: u32,
    pub zo: i32,
}

impl AddParams {
    /// The parameters of `a + b` (`sub`: `a − b`); `None` where the scale ratios are outside
    /// the range XNNPACK accepts ([2⁻¹⁰, 2⁸), as XNNPACK asserts).
    pub fn new(qa: Q, qb: Q, qo: Q, sub: bool) -> Option<AddParams> {
        let (ra, rb) = (qa.scale / qo.scale, qb.scale / qo.scale);
        let (aa, ab) = (ra.abs(), rb.abs());
        let lo = 2f32.powi(-10);
        if !(aa >= lo && ab >= lo && aa < 256.0 && ab < 256.0) {
            return None;
        }
        let exp = (aa.max(ab).to_bits() >> 23) as i32 - 127;
        let shift = (20 - exp) as u32;
        let mult = |r: f32| (r.abs() * (1u64 << shift) as f32).round_ties_even() as i32;
        let ma = if ra.is_sign_negative() {
            -mult(ra)
        } else {
            mult(ra)
        };
        let mb = if rb.is_sign_negative() != sub {
            -mult(rb)
        } else {
            mult(rb)
        };
        let bias = (1i32 << (shift - 1))
            .wrapping_sub(ma.wrapping_mul(qa.zp))
            .wrapping_sub(mb.wrapping_mul(qb.zp));
        Some(AddParams {
            ma,
            mb,
            bias,
            shift,
            zo: qo.zp,
        })
    }

    /// One output before the clamp.
    #[inline(always)]
    pub fn apply(&self, a: i32, b: i32) -> i32 {
        let acc = self
            .bias
            .wrapping_add(a.wrapping_mul(self.ma))
            .wrapping_add(b.wrapping_mul(self.mb));
        (acc >> self.shift) + self.zo
    }
}

/// `out = clamp(p.apply(a, b))` over same-shape operands, in a loop compiled for the CPU's
/// widest vectors (a closure handed to `multiversion` is compiled on its own, without them, and
/// stayed scalar: 5–10 % of an int8 MobileNetV2).
fn add_fixed(out: &mut [i8], a: &[i8], b: &[i8], p: &AddParams, lo: i32, hi: i32) {
    #[inline(always)]
    fn body(out: &mut [i8], a: &[i8], b: &[i8], p: &AddParams, lo: i32, hi: i32) {
        for ((d, &x), &y) in out.iter_mut().zip(a).zip(b) {
            *d = p.apply(i32::from(x), i32::from(y)).clamp(lo, hi) as i8;
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
        unsafe fn avx512(out: &mut [i8], a: &[i8], b: &[i8], p: &AddParams, lo: i32, hi: i32) {
            body(out, a, b, p, lo, hi)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2(out: &mut [i8], a: &[i8], b: &[i8], p: &AddParams, lo: i32, hi: i32) {
            body(out, a, b, p, lo, hi)
        }
        use pteron_kernels_cpu::simd::Level;
        match level() {
            // Safety: `level()` reports only instruction sets the CPU has.
            Level::Avx512 => return unsafe { avx512(out, a, b, p, lo, hi) },
            // Safety: as above.
            Level::Avx2 => return unsafe { avx2(out, a, b, p, lo, hi) },
            Level::Portable | Level::Neon | Level::Simd128 => {}
        }
    }
    body(out, a, b, p, lo, hi)
}

/// Binary operation on int8 operands with NumPy broadcasting, computed on the dequantized
/// values and requantized (clamped to `lo..=hi`).
#[allow(clippy::too_many_arguments)]
pub fn binary(
    par: &dyn Parallel,
    op: BinaryOp,
    a: &[i8],
    sa: &Shape,
    qa: Q,
    b: &[i8],
    sb: &Shape,
    qb: Q,
    out: &mut [i8],
    so: &Shape,
    qo: Q,
    lo: i32,
    hi: i32,
) -> Result<(), KernelError> {
    let n = so.count()?;
    if out.len() < n || a.len() < sa.count()? || b.len() < sb.count()? {
        return Err(KernelError::invalid("quantized operands too short"));
    }
    let inv = 1.0 / qo.scale;
    let fixed = match op {
        BinaryOp::Add | BinaryOp::Sub => AddParams::new(qa, qb, qo, op == BinaryOp::Sub),
        _ => None,
    };
    if let Some(p) = fixed {
        let (l, h) = (lo.max(-128), hi.min(127));
        let g = |x: i32, y: i32| p.apply(x, y).clamp(l, h) as i8;
        if sa == so && sb == so {
            for_chunks_mut(par, &mut out[..n], 1 << 14, 1, &|t, o| {
                let at = t << 14;
                let (a, b) = (&a[at..at + o.len()], &b[at..at + o.len()]);
                add_fixed(o, a, b, &p, l, h);
            });
        } else {
            broadcast(a, sa, b, sb, &mut out[..n], so, |x, y| {
                g(x as i32, y as i32)
            })?;
        }
        return Ok(());
    }
    let f = |x: i32, y: i32| -> i8 {
        let (xa, yb) = ((x - qa.zp) as f32 * qa.scale, (y - qb.zp) as f32 * qb.scale);
        let r = match op {
            BinaryOp::Add => xa + yb,
            BinaryOp::Sub => xa - yb,
            BinaryOp::Mul => xa * yb,
            BinaryOp::Div => xa / yb,
            BinaryOp::Min => xa.min(yb),
            BinaryOp::Max => xa.max(yb),
            BinaryOp::Prelu => {
                if xa < 0.0 {
                    xa * yb
                } else {
                    xa
                }
            }
        };
        let q = (r * inv).round_ties_even() + qo.zp as f32;
        (q.clamp(lo as f32, hi as f32)) as i8
    };
    if sa == so && sb == so && !matches!(op, BinaryOp::Div | BinaryOp::Prelu) {
        let l = level();
        // Chunks of 16 KiB: the adds of MobileNetV2 are 15–75 K elements.
        for_chunks_mut(par, &mut out[..n], 1 << 14, 1, &|t, o| {
            let at = t << 14;
            let (a, b) = (&a[at..at + o.len()], &b[at..at + o.len()]);
            let e = SameShape {
                out: o,
                a,
                b,
                q: (qa, qb),
                inv,
                zo: qo.zp,
                bounds: (lo, hi),
            };
            match op {
                BinaryOp::Add => run_op_at(l, e.with(|x, y| x + y)),
                BinaryOp::Sub => run_op_at(l, e.with(|x, y| x - y)),
                BinaryOp::Mul => run_op_at(l, e.with(|x, y| x * y)),
                BinaryOp::Min => run_op_at(l, e.with(f32::min)),
                _ => run_op_at(l, e.with(f32::max)),
            }
        });
        return Ok(());
    }
    if sa == so && sb == so {
        multiversion(
            #[inline(always)]
            || {
                for ((d, &x), &y) in out[..n].iter_mut().zip(a).zip(b) {
                    *d = f(x as i32, y as i32);
                }
            },
        );
        return Ok(());
    }
    broadcast(a, sa, b, sb, &mut out[..n], so, |x, y| {
        f(x as i32, y as i32)
    })
}

/// `out[i] = f(a[ia], b[ib])` with NumPy broadcasting of `a` and `b` to `so`.
fn broadcast(
    a: &[i8],
    sa: &Shape,
    b: &[i8],
    sb: &Shape,
    out: &mut [i8],
    so: &Shape,
    f: impl Fn(i8, i8) -> i8,
) -> Result<(), KernelError> {
    // General broadcast: strides of each operand over the output's dims.
    let r = so.rank();
    let strides = |s: &Shape| -> Result<[usize; MAX_DIMS], KernelError> {
        let mut st = [0usize; MAX_DIMS];
        if s.rank() > r {
            return Err(KernelError::shape("operand rank above the output's"));
        }
        let off = r - s.rank();
        let mut acc = 1;
        for d in (off..r).rev() {
            let x = s.dims()[d - off];
            if x != 1 {
                if x != so.dims()[d] {
                    return Err(KernelError::shape("operand does not broadcast"));
                }
                st[d] = acc;
            }
            acc *= x;
        }
        Ok(st)
    };
    let (ta, tb) = (strides(sa)?, strides(sb)?);
    let mut idx = [0usize; MAX_DIMS];
    let (mut ia, mut ib) = (0usize, 0usize);
    for d in out.iter_mut() {
        *d = f(a[ia], b[ib]);
        for q in (0..r).rev() {
            idx[q] += 1;
            ia += ta[q];
            ib += tb[q];
            if idx[q] < so.dims()[q] {
                break;
            }
            ia -= ta[q] * idx[q];
            ib -= tb[q] * idx[q];
            idx[q] = 0;
        }
    }
    Ok(())
}
