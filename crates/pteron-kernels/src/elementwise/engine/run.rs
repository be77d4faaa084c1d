//! Running kernels: resize, borrow, then stream block by block. Operand helpers (over
//! [`Opnd`], which type promotion defines) and inputs ([`Input`]), [`stream`] and the
//! unary/binary/ternary drivers built on it.

use pteron_core::{Dims, KernelError, Scalar, ScalarType, TensorMut, TensorRef};

use super::blocks::{Blocks, BLOCK, MAX_OPERANDS};
use super::elems::{Elems, ElemsMut};
use super::promote::{require_supported, result_type_iter, Opnd};
use super::{bcast_strides, round_through, Comp};
use crate::util::broadcast_shapes;

use pteron_core::{ArgAccess, ArgView, KernelContext, Value};

/// `torch.result_type` over operands.
pub fn result_type_of(ops: &[Opnd]) -> Result<ScalarType, KernelError> {
    result_type_iter(ops.iter().copied())
}

/// Broadcast shape of the operands (scalars broadcast as 0-d).
pub fn broadcast_opnds(ops: &[Opnd]) -> Result<Dims, KernelError> {
    let mut out = Dims::new();
    for o in ops {
        out = broadcast_shapes(out.as_slice(), o.sizes())?;
    }
    Ok(out)
}

/// A scalar converted to the compute type through the common dtype.
pub fn scalar_in<C: Comp>(s: Scalar, common: ScalarType) -> Result<C, KernelError> {
    let mut v = [C::from_scalar(s)];
    round_through(&mut v, common)?;
    Ok(v[0])
}

/// Output argument positions must be tensors: returns the out's dtype.
pub fn out_dtype<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<ScalarType, KernelError> {
    Ok(v.tensor(i)?.dtype())
}

/// An input of a streamed op, read in the compute type `C`: a tensor broadcast to the op's
/// shape, or a constant (a scalar argument).
pub enum Input<'a, C> {
    Const(C),
    Tensor {
        elems: Elems<'a>,
        strides: Dims,
        /// The common dtype to cast through first, when the tensor's dtype differs from it.
        round: Option<ScalarType>,
    },
}

impl<'a, C: Comp> Input<'a, C> {
    /// Tensor `t` read broadcast to `shape`. As PyTorch does, it is cast to the op's `common`
    /// dtype (if any) before computing when its own dtype differs.
    pub fn tensor(
        t: &TensorRef<'a>,
        shape: &[usize],
        common: Option<ScalarType>,
    ) -> Result<Self, KernelError> {
        Ok(Input::Tensor {
            elems: Elems::of(t)?,
            strides: bcast_strides(t.info, shape)?,
            round: common.filter(|&d| d != t.info.dtype()),
        })
    }

    /// A Python scalar, cast to the op's `common` dtype (if any).
    pub fn scalar(s: Scalar, common: Option<ScalarType>) -> Result<Self, KernelError> {
        Ok(Input::Const(match common {
            Some(d) => scalar_in(s, d)?,
            None => C::from_scalar(s),
        }))
    }

    /// Argument `i`'s operand `o` (a scalar, or the tensor `t`) as an input.
    fn of(
        o: &Opnd,
        t: Option<&TensorRef<'a>>,
        shape: &[usize],
        common: Option<ScalarType>,
    ) -> Result<Self, KernelError> {
        match (o, t) {
            (Opnd::Scalar(s), _) => Self::scalar(*s, common),
            (Opnd::Tensor(_), Some(t)) => Self::tensor(t, shape, common),
            _ => Err(KernelError::invalid("operand has no tensor")),
        }
    }

    /// Strides to walk this input over a shape of rank `rank` (all 0 for a constant).
    pub fn strides(&self, rank: usize) -> Result<Dims, KernelError> {
        match self {
            Input::Const(_) => {
                let zeros = [0; pteron_core::MAX_RANK];
                Dims::from_slice(
                    zeros
                        .get(..rank)
                        .ok_or(KernelError::RankTooLarge { rank })?,
                )
            }
            Input::Tensor { strides, .. } => Ok(*strides),
        }
    }

    /// Reads the current block of `blocks` for operand `k` into `buf`.
    pub fn read(&self, blocks: &Blocks, k: usize, buf: &mut [C]) -> Result<(), KernelError> {
        match self {
            Input::Const(c) => buf.fill(*c),
            Input::Tensor { elems, round, .. } => {
                elems.gather(blocks.offsets(k), buf);
                if let Some(d) = round {
                    round_through(buf, *d)?;
                }
            }
        }
        Ok(())
    }
}

/// Streams the elements of `out` (already of shape `shape`) block by block: `compute(blocks,
/// results)` fills one block of results, reading input `k` (walked with `in_strides[k]`) at
/// `blocks.offsets(k)`; the results are rounded through `round` and stored into `out` in its
/// dtype and dim order. Nothing is allocated: every buffer lives on the stack.
pub fn stream<R: Comp>(
    out: &mut TensorMut<'_>,
    shape: &[usize],
    in_strides: &[Dims],
    round: Option<ScalarType>,
    mut compute: impl FnMut(&Blocks, &mut [R]) -> Result<(), KernelError>,
) -> Result<(), KernelError> {
    let info = out.info;
    if info.sizes() != shape {
        return Err(KernelError::invalid(format!(
            "store: out has shape {:?}, the op computes {shape:?}",
            info.sizes()
        )));
    }
    let n = in_strides.len();
    if n + 1 > MAX_OPERANDS {
        return Err(KernelError::invalid("elementwise op: too many inputs"));
    }
    let mut strides: [&[usize]; MAX_OPERANDS] = [&[]; MAX_OPERANDS];
    for (s, d) in strides.iter_mut().zip(in_strides) {
        *s = d.as_slice();
    }
    strides[n] = info.strides();
    let mut blocks = Blocks::new(shape, &strides[..n + 1])?;
    let mut dst = ElemsMut::of(out)?;
    let mut results = [R::default(); BLOCK];
    while blocks.advance() {
        let r = &mut results[..blocks.len()];
        compute(&blocks, r)?;
        if let Some(d) = round {
            round_through(r, d)?;
        }
        dst.scatter(blocks.offsets(n), r);
    }
    Ok(())
}

/// Runs a unary map: argument `a` (tensor or scalar) → output `out` resized to `shape`.
/// `round` is the dtype results are rounded through (None for results of another kind).
pub fn run1<C: Comp, R: Comp>(
    ctx: &mut KernelContext<'_, '_>,
    a: usize,
    out: usize,
    shape: &[usize],
    round: Option<ScalarType>,
    mut f: impl FnMut(C) -> R,
) -> Result<(), KernelError> {
    let oa = Opnd::read(ctx, a)?;
    ctx.resize(out, shape)?;
    let (ta, mut o) = match oa {
        Opnd::Scalar(_) => {
            let ([], [o]) = ctx.io([], [out])?;
            (None, o)
        }
        Opnd::Tensor(_) => {
            let ([ta], [o]) = ctx.io([a], [out])?;
            (Some(ta), o)
        }
    };
    let ia = Input::<C>::of(&oa, ta.as_ref(), shape, round)?;
    let mut xa = [C::default(); BLOCK];
    stream(
        &mut o,
        shape,
        &[ia.strides(shape.len())?],
        round,
        |blk, r| {
            let xa = &mut xa[..r.len()];
            ia.read(blk, 0, xa)?;
            for (r, &x) in r.iter_mut().zip(xa.iter()) {
                *r = f(x);
            }
            Ok(())
        },
    )
}

/// Runs a binary map over arguments `a`, `b` (each a tensor or a scalar), broadcast to `shape`.
/// Operands are cast to `round` (the common dtype) first, and results rounded through it.
pub fn run2<C: Comp, R: Comp>(
    ctx: &mut KernelContext<'_, '_>,
    a: usize,
    b: usize,
    out: usize,
    shape: &[usize],
    round: Option<ScalarType>,
    f: impl FnMut(C, C) -> R,
) -> Result<(), KernelError> {
    run2x(ctx, a, b, out, shape, round, round, f)
}

/// [`run2`] with separate dtypes for casting operands (`in_common`) and rounding results.
#[allow(clippy::too_many_arguments)]
pub fn run2x<C: Comp, R: Comp>(
    ctx: &mut KernelContext<'_, '_>,
    a: usize,
    b: usize,
    out: usize,
    shape: &[usize],
    in_common: Option<ScalarType>,
    round: Option<ScalarType>,
    mut f: impl FnMut(C, C) -> R,
) -> Result<(), KernelError> {
    let oa = Opnd::read(ctx, a)?;
    let ob = Opnd::read(ctx, b)?;
    ctx.resize(out, shape)?;
    let (ta, tb, mut o) = match (&oa, &ob) {
        (Opnd::Tensor(_), Opnd::Tensor(_)) => {
            let ([ta, tb], [o]) = ctx.io([a, b], [out])?;
            (Some(ta), Some(tb), o)
        }
        (Opnd::Tensor(_), Opnd::Scalar(_)) => {
            let ([ta], [o]) = ctx.io([a], [out])?;
            (Some(ta), None, o)
        }
        (Opnd::Scalar(_), Opnd::Tensor(_)) => {
            let ([tb], [o]) = ctx.io([b], [out])?;
            (None, Some(tb), o)
        }
        (Opnd::Scalar(_), Opnd::Scalar(_)) => {
            let ([], [o]) = ctx.io([], [out])?;
            (None, None, o)
        }
    };
    let ia = Input::<C>::of(&oa, ta.as_ref(), shape, in_common)?;
    let ib = Input::<C>::of(&ob, tb.as_ref(), shape, in_common)?;
    let rank = shape.len();
    let (mut xa, mut xb) = ([C::default(); BLOCK], [C::default(); BLOCK]);
    stream(
        &mut o,
        shape,
        &[ia.strides(rank)?, ib.strides(rank)?],
        round,
        |blk, r| {
            let (xa, xb) = (&mut xa[..r.len()], &mut xb[..r.len()]);
            ia.read(blk, 0, xa)?;
            ib.read(blk, 1, xb)?;
            for ((r, &x), &y) in r.iter_mut().zip(xa.iter()).zip(xb.iter()) {
                *r = f(x, y);
            }
            Ok(())
        },
    )
}

/// Runs a ternary map over three tensor arguments broadcast to `shape`; `Cc` is the compute type
/// of the first (e.g. a bool condition), which is read without casting.
pub fn run3<Cc: Comp, C: Comp, R: Comp>(
    ctx: &mut KernelContext<'_, '_>,
    args: [usize; 3],
    out: usize,
    shape: &[usize],
    round: Option<ScalarType>,
    mut f: impl FnMut(Cc, C, C) -> R,
) -> Result<(), KernelError> {
    ctx.resize(out, shape)?;
    let ([t0, t1, t2], [mut o]) = ctx.io(args, [out])?;
    let i0 = Input::<Cc>::tensor(&t0, shape, None)?;
    let i1 = Input::<C>::tensor(&t1, shape, round)?;
    let i2 = Input::<C>::tensor(&t2, shape, round)?;
    let rank = shape.len();
    let strides = [i0.strides(rank)?, i1.strides(rank)?, i2.strides(rank)?];
    let mut x0 = [Cc::default(); BLOCK];
    let (mut x1, mut x2) = ([C::default(); BLOCK], [C::default(); BLOCK]);
    stream(&mut o, shape, &strides, round, |blk, r| {
        let n = r.len();
        let (x0, x1, x2) = (&mut x0[..n], &mut x1[..n], &mut x2[..n]);
        i0.read(blk, 0, x0)?;
        i1.read(blk, 1, x1)?;
        i2.read(blk, 2, x2)?;
        for (((r, &c), &x), &y) in r.iter_mut().zip(x0.iter()).zip(x1.iter()).zip(x2.iter()) {
            *r = f(c, x, y);
        }
        Ok(())
    })
}

/// Load-time check helper: every tensor among `args` has a dtype pteron computes with.
pub fn check_tensor_dtypes(
    op: &'static str,
    v: &ArgView<'_, '_>,
    args: &[usize],
) -> Result<(), KernelError> {
    for &i in args {
        if let Value::Tensor(t) = v.value(i)? {
            require_supported(op, t.info.dtype())?;
        }
    }
    Ok(())
}
