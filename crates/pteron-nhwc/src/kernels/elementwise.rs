//! Elementwise float32 kernels: binary operations with NumPy broadcasting and a fused output
//! clamp, and unary operations.
//!
//! Binary: the output shape is collapsed into runs along which each input is either
//! contiguous or one repeated value (dims merge while both inputs keep the same pattern);
//! each run is a SIMD loop. Runs are split across threads when the work is large.

use pteron_core::{KernelError, Parallel};
use pteron_kernels_cpu::math;
use pteron_kernels_cpu::par::{for_chunks_mut, MIN_PARALLEL_ELEMS};
use pteron_kernels_cpu::simd::{level, run_op_at, Simd, SimdOp};
use pteron_kernels_cpu::unary::{map, UnaryFn};

use crate::graph::{BinaryOp, Clamp, UnaryOp};
use crate::util::{Shape, MAX_DIMS};

/// The broadcast shape of `a` and `b` (NumPy rules), or an error.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, KernelError> {
    let r = a.rank().max(b.rank());
    let mut d = [0usize; MAX_DIMS];
    for i in 0..r {
        let x = if i < r - a.rank() {
            1
        } else {
            a.dims()[i - (r - a.rank())]
        };
        let y = if i < r - b.rank() {
            1
        } else {
            b.dims()[i - (r - b.rank())]
        };
        d[i] = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return Err(KernelError::shape(format!(
                "shapes {:?} and {:?} do not broadcast",
                a.dims(),
                b.dims()
            )));
        };
    }
    Shape::new(&d[..r])
}

#[derive(Clone, Copy)]
enum Operand<'a> {
    Vec(&'a [f32]),
    Splat(f32),
}

#[derive(Clone, Copy)]
struct Op {
    op: BinaryOp,
    lo: f32,
    hi: f32,
    clamp: bool,
}

struct RunOp<'a> {
    op: Op,
    a: Operand<'a>,
    b: Operand<'a>,
    out: &'a mut [f32],
}

impl SimdOp for RunOp<'_> {
    type Output = ();
    #[inline(always)]
    fn run<S: Simd>(self, s: S) {
        // One loop per operation and clamp (matched here, not per vector).
        let Op { op, clamp, lo, hi } = self.op;
        let (lo, hi) = (s.splat(lo), s.splat(hi));
        macro_rules! with {
            ($f:expr) => {
                if clamp {
                    run_loop(s, self.a, self.b, self.out, |a, b| {
                        math::clamp(s, $f(a, b), lo, hi)
                    })
                } else {
                    run_loop(s, self.a, self.b, self.out, $f)
                }
            };
        }
        match op {
            BinaryOp::Add => with!(|a, b| s.add(a, b)),
            BinaryOp::Sub => with!(|a, b| s.sub(a, b)),
            BinaryOp::Mul => with!(|a, b| s.mul(a, b)),
            BinaryOp::Div => with!(|a, b| s.div(a, b)),
            BinaryOp::Min => with!(|a, b| s.min(a, b)),
            BinaryOp::Max => with!(|a, b| s.max(a, b)),
            BinaryOp::Prelu => with!(|a, b| s.select_lt(a, s.zero(), s.mul(a, b), a)),
        }
    }
}

/// `out[i] = f(a[i], b[i])` vector by vector, with the operand kinds matched once.
#[inline(always)]
fn run_loop<S: Simd>(
    s: S,
    a: Operand<'_>,
    b: Operand<'_>,
    out: &mut [f32],
    f: impl Fn(S::V, S::V) -> S::V,
) {
    let l = S::LANES;
    let n = out.len();
    let full = n - n % l;
    match (a, b) {
        (Operand::Vec(x), Operand::Vec(y)) => {
            let (x, y) = (&x[..n], &y[..n]);
            for ((o, x), y) in out[..full]
                .chunks_exact_mut(l)
                .zip(x.chunks_exact(l))
                .zip(y.chunks_exact(l))
            {
                s.st(o, f(s.ld(x), s.ld(y)));
            }
        }
        (Operand::Vec(x), Operand::Splat(y)) => {
            let y = s.splat(y);
            for (o, x) in out[..full].chunks_exact_mut(l).zip(x[..n].chunks_exact(l)) {
                s.st(o, f(s.ld(x), y));
            }
        }
        (Operand::Splat(x), Operand::Vec(y)) => {
            let x = s.splat(x);
            for (o, y) in out[..full].chunks_exact_mut(l).zip(y[..n].chunks_exact(l)) {
                s.st(o, f(x, s.ld(y)));
            }
        }
        (Operand::Splat(x), Operand::Splat(y)) => {
            let v = f(s.splat(x), s.splat(y));
            for o in out[..full].chunks_exact_mut(l) {
                s.st(o, v);
            }
        }
    }
    if full < n {
        let m = n - full;
        let v = f(get(s, a, full, m), get(s, b, full, m));
        s.st_tail(&mut out[full..], v);
    }
}

#[inline(always)]
fn get<S: Simd>(s: S, src: Operand<'_>, i: usize, m: usize) -> S::V {
    match src {
        Operand::Vec(v) => {
            if m == S::LANES {
                s.ld(&v[i..])
            } else {
                s.ld_tail(&v[i..i + m])
            }
        }
        Operand::Splat(x) => s.splat(x),
    }
}

/// Collapsed iteration space: `(size, stride of a, stride of b)` per dim, outermost first.
struct Dims {
    d: [(usize, usize, usize); MAX_DIMS],
    n: usize,
}

/// `out = clamp(op(a, b))` with `a` and `b` broadcast to `out_shape`.
#[allow(clippy::too_many_arguments)]
pub fn binary(
    par: &dyn Parallel,
    op: BinaryOp,
    clamp: Clamp,
    a: &[f32],
    a_shape: &Shape,
    b: &[f32],
    b_shape: &Shape,
    out: &mut [f32],
    out_shape: &Shape,
) -> Result<(), KernelError> {
    let rank = out_shape.rank();
    let od = out_shape.dims();
    let strides = |s: &Shape| -> Result<[usize; MAX_DIMS], KernelError> {
        let mut st = [0usize; MAX_DIMS];
        if s.rank() > rank {
            return Err(KernelError::shape("operand rank above the output's"));
        }
        let off = rank - s.rank();
        let mut acc = 1usize;
        for d in (off..rank).rev() {
            let x = s.dims()[d - off];
            if x == od[d] {
                st[d] = if x == 1 { 0 } else { acc };
            } else if x != 1 {
                return Err(KernelError::shape(
                    "operand does not broadcast to the output",
                ));
            }
            acc *= x;
        }
        Ok(st)
    };
    let (sa, sb) = (strides(a_shape)?, strides(b_shape)?);
    let numel = out_shape.count()?;
    if out.len() < numel || a.len() < a_shape.count()? || b.len() < b_shape.count()? {
        return Err(KernelError::invalid("elementwise operand too short"));
    }
    if numel == 0 {
        return Ok(());
    }
    let mut dims = Dims {
        d: [(1, 0, 0); MAX_DIMS],
        n: 0,
    };
    for d in 0..rank {
        if od[d] == 1 {
            continue;
        }
        if dims.n > 0 {
            let (ls, la, lb) = dims.d[dims.n - 1];
            if la == sa[d] * od[d] && lb == sb[d] * od[d] {
                dims.d[dims.n - 1] = (ls * od[d], sa[d], sb[d]);
                continue;
            }
        }
        dims.d[dims.n] = (od[d], sa[d], sb[d]);
        dims.n += 1;
    }
    if dims.n == 0 {
        dims.d[0] = (1, 0, 0);
        dims.n = 1;
    }
    let (inner, ia, ib) = dims.d[dims.n - 1];
    let outer_dims = &dims.d[..dims.n - 1];
    let l = level();
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let op = Op {
        op,
        lo,
        hi,
        clamp: clamp.is_some(),
    };
    let run = |k: usize, o: &mut [f32], start: usize| {
        let (mut oa, mut ob) = (0usize, 0usize);
        let mut rem = k;
        for &(size, sta, stb) in outer_dims.iter().rev() {
            let i = rem % size;
            rem /= size;
            oa += i * sta;
            ob += i * stb;
        }
        let len = o.len();
        fn src(buf: &[f32], off: usize, st: usize, start: usize, len: usize) -> Operand<'_> {
            if st == 1 {
                Operand::Vec(&buf[off + start..off + start + len])
            } else {
                Operand::Splat(buf[off])
            }
        }
        let (a, b) = (src(a, oa, ia, start, len), src(b, ob, ib, start, len));
        run_op_at(l, RunOp { op, a, b, out: o });
    };
    // After the merge the innermost stride of an operand is 1 (contiguous) or 0 (repeated).
    if ia > 1 || ib > 1 {
        return Err(KernelError::invalid("strided innermost run"));
    }
    let out = &mut out[..numel];
    if numel < MIN_PARALLEL_ELEMS || par.num_threads() <= 1 {
        for (k, o) in out.chunks_mut(inner).enumerate() {
            run(k, o, 0);
        }
    } else if numel / inner >= 2 * par.num_threads() {
        for_chunks_mut(par, out, inner, 1, &|k, o| run(k, o, 0));
    } else {
        // Few long runs: cut each into pieces.
        const CHUNK: usize = 1 << 13;
        for (k, o) in out.chunks_mut(inner).enumerate() {
            for_chunks_mut(par, o, CHUNK, 1, &|j, p| run(k, p, j * CHUNK));
        }
    }
    Ok(())
}

/// A unary operation as a SIMD lane function.
#[derive(Clone, Copy)]
struct Lanes(UnaryOp);

impl UnaryFn for Lanes {
    #[inline(always)]
    fn apply<S: Simd>(self, s: S, x: S::V) -> S::V {
        match self.0 {
            UnaryOp::Clamp(lo, hi) => math::clamp(s, x, s.splat(lo), s.splat(hi)),
            UnaryOp::Sigmoid => math::sigmoid(s, x),
            UnaryOp::Tanh => math::tanh(s, x),
            UnaryOp::Gelu => math::gelu_erf(s, x),
            UnaryOp::Hardswish => {
                let r = s.min(s.max(s.add(x, s.splat(3.0)), s.zero()), s.splat(6.0));
                s.mul(x, s.mul(r, s.splat(1.0 / 6.0)))
            }
            UnaryOp::LeakyRelu(slope) => s.select_lt(x, s.zero(), s.mul(x, s.splat(slope)), x),
            UnaryOp::Elu(alpha) => {
                let e = s.mul(s.splat(alpha), s.sub(math::exp(s, x), s.splat(1.0)));
                s.select_lt(s.zero(), x, x, e)
            }
            UnaryOp::Exp => math::exp(s, x),
            UnaryOp::Abs => s.abs(x),
            UnaryOp::Neg => s.sub(s.zero(), x),
            UnaryOp::Square => s.mul(x, x),
            // The rest run the scalar path (see `unary`).
            _ => x,
        }
    }
}

/// `out = op(x)` elementwise over `x.len()` elements.
pub fn unary(
    par: &dyn Parallel,
    op: UnaryOp,
    x: &[f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    if out.len() < x.len() {
        return Err(KernelError::invalid("unary output too short"));
    }
    let out = &mut out[..x.len()];
    let scalar: Option<fn(f32) -> f32> = match op {
        UnaryOp::Sqrt => Some(f32::sqrt),
        UnaryOp::Rsqrt => Some(|v| 1.0 / v.sqrt()),
        UnaryOp::Log => Some(f32::ln),
        UnaryOp::Floor => Some(f32::floor),
        UnaryOp::Ceil => Some(f32::ceil),
        UnaryOp::Sin => Some(f32::sin),
        UnaryOp::Cos => Some(f32::cos),
        UnaryOp::Copy => {
            out.copy_from_slice(x);
            return Ok(());
        }
        _ => None,
    };
    match scalar {
        Some(f) => {
            const CHUNK: usize = 1 << 13;
            for_chunks_mut(par, out, CHUNK, 2, &|k, o| {
                for (d, &v) in o.iter_mut().zip(&x[k * CHUNK..]) {
                    *d = f(v);
                }
            });
        }
        None => map(par, Lanes(op), x, out),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pteron_core::INLINE;

    /// Every binary operation, with and without a clamp, over operand pairs that are
    /// contiguous, broadcast (a repeated value along the inner or outer dim) or scalar, and
    /// lengths with vector tails: equal to the definition element by element.
    #[test]
    fn binary_matches_definition() {
        let ops = [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Min,
            BinaryOp::Max,
            BinaryOp::Prelu,
        ];
        let f = |op: BinaryOp, a: f32, b: f32| match op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Min => a.min(b),
            BinaryOp::Max => a.max(b),
            BinaryOp::Prelu => {
                if a < 0.0 {
                    a * b
                } else {
                    a
                }
            }
        };
        let shapes: [(&[usize], &[usize]); 5] = [
            (&[3, 37], &[3, 37]),
            (&[3, 37], &[1, 37]),
            (&[3, 37], &[3, 1]),
            (&[5, 16], &[1]),
            (&[1], &[2, 19]),
        ];
        for op in ops {
            for clamp in [None, Some((-0.5f32, 0.75f32))] {
                for (sa, sb) in shapes {
                    let (a_shape, b_shape) = (Shape::new(sa).unwrap(), Shape::new(sb).unwrap());
                    let o_shape = broadcast(&a_shape, &b_shape).unwrap();
                    let (na, nb, no) = (
                        a_shape.count().unwrap(),
                        b_shape.count().unwrap(),
                        o_shape.count().unwrap(),
                    );
                    let a: Vec<f32> = (0..na).map(|i| (i as f32 * 0.37).sin()).collect();
                    let b: Vec<f32> = (0..nb).map(|i| 0.5 + (i as f32 * 0.91).cos()).collect();
                    let mut out = vec![0f32; no];
                    binary(
                        &INLINE, op, clamp, &a, &a_shape, &b, &b_shape, &mut out, &o_shape,
                    )
                    .unwrap();
                    let od = o_shape.dims();
                    let cols = od[od.len() - 1];
                    for (i, &got) in out.iter().enumerate() {
                        let (r, c) = (i / cols, i % cols);
                        let at = |v: &[f32], s: &[usize]| match s {
                            [n] => v[if *n == 1 { 0 } else { c }],
                            [rows, n] => {
                                v[(if *rows == 1 { 0 } else { r }) * n
                                    + if *n == 1 { 0 } else { c }]
                            }
                            _ => unreachable!(),
                        };
                        let mut want = f(op, at(&a, sa), at(&b, sb));
                        if let Some((lo, hi)) = clamp {
                            want = want.max(lo).min(hi);
                        }
                        assert_eq!(got, want, "{sa:?} {sb:?} at {i}");
                    }
                }
            }
        }
    }
}
