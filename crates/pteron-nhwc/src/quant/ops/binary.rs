//! int8 binary operations: computed in float from the dequantized operands, clamped, rounded.

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
        multiversion(|| {
            for ((d, &x), &y) in out[..n].iter_mut().zip(a).zip(b) {
                *d = f(x as i32, y as i32);
            }
        });
        return Ok(());
    }
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
    for d in out[..n].iter_mut() {
        *d = f(a[ia] as i32, b[ib] as i32);
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
