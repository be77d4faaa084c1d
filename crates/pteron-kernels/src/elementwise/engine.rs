//! The machinery behind the elementwise, unary, reduction and copy kernels: PyTorch type
//! promotion, compute types, and strided (dim-order aware, broadcasting) loads and stores.
//!
//! Kernels stream: the output's logical (row-major) index space is walked in blocks of
//! [`BLOCK`] elements ([`Blocks`]); each input's block is gathered through its broadcast strides
//! into a stack buffer in the compute type `C` (f32 for f16/bf16/f32, f64, i64 for integers,
//! bool), computed elementwise, rounded through the op's dtype and scattered into the output
//! through its strides, which handles any dim order. Running a kernel allocates nothing.

use pteron_core::{
    dispatch_dtype, Bool, Dims, Element, KernelError, Scalar, ScalarType, TensorInfo, TensorMut,
    TensorRef,
};

use crate::util::broadcast_shapes;

mod blocks;
pub(crate) mod comp;
mod elems;
mod fmath;
mod num;
mod promote;
mod run;

pub use blocks::{Blocks, BLOCK, MAX_OPERANDS};
pub use comp::{cast, Comp};
pub use elems::{Elems, ElemsMut, Offsets};
pub use fmath::{erf, int_div_floor, int_pow, int_py_rem, FMath};
pub use num::{nan_max, nan_min, Num};
pub use promote::{
    can_cast, comp_kind, is_supported, promote_types, require_can_cast, require_supported,
    result_type, scalar_dtype, CompKind, Opnd,
};
pub use run::{
    broadcast_opnds, check_tensor_dtypes, out_dtype, result_type_of, run1, run2, run2x, run3,
    scalar_in, stream, Input,
};

/// Broadcast shape of several shapes.
pub fn broadcast_all(shapes: &[&[usize]]) -> Result<Dims, KernelError> {
    let mut out = Dims::new();
    for s in shapes {
        out = broadcast_shapes(out.as_slice(), s)?;
    }
    Ok(out)
}

/// Element strides to read tensor `t` (any dim order) as if it had the broadcast shape `out`.
pub fn bcast_strides(t: &TensorInfo, out: &[usize]) -> Result<Dims, KernelError> {
    let src = t.sizes();
    if src.len() > out.len() {
        return Err(KernelError::shape(format!(
            "cannot broadcast {src:?} to {out:?}"
        )));
    }
    let mut st = Dims::from_slice(out)?;
    let off = out.len() - src.len();
    for i in 0..out.len() {
        st.as_mut_slice()[i] = if i < off {
            0
        } else {
            let s = src[i - off];
            if s == out[i] {
                if s == 1 {
                    0
                } else {
                    t.strides()[i - off]
                }
            } else if s == 1 {
                0
            } else {
                return Err(KernelError::shape(format!(
                    "cannot broadcast {src:?} to {out:?}"
                )));
            }
        };
    }
    Ok(st)
}

/// Calls `f(offsets)` for every element of `shape` in logical (row-major) order, where
/// `offsets[k]` is the element offset of that logical index under `strides[k]`.
pub fn walk<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
    mut f: impl FnMut([usize; K]),
) {
    let rank = shape.len();
    if shape.contains(&0) {
        return;
    }
    let mut idx = [0usize; pteron_core::MAX_RANK];
    let mut off = [0usize; K];
    loop {
        f(off);
        let mut d = rank;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                off[k] += strides[k][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..K {
                off[k] -= strides[k][d] * shape[d];
            }
            idx[d] = 0;
        }
    }
}

/// Rounds every value through `dtype` (the op's common dtype) so that results narrower than the
/// compute type (int8 wrapping, f16 rounding) match PyTorch even when the output is wider.
pub fn round_through<C: Comp>(vals: &mut [C], dtype: ScalarType) -> Result<(), KernelError> {
    fn go<E: Element, C: Comp>(vals: &mut [C]) {
        for v in vals {
            *v = C::load(v.store::<E>());
        }
    }
    match dtype {
        ScalarType::Long | ScalarType::Float | ScalarType::Double => Ok(()),
        _ => dispatch_dtype!(dtype, E => { go::<E, C>(vals); Ok(()) },
            _ => Err(KernelError::dtype(dtype, "compute"))),
    }
}

/// One value rounded through `dtype`, as [`round_through`]; a dtype pteron does not compute
/// with (rejected by the load-time checks) leaves it unchanged.
#[inline]
pub fn round1<C: Comp>(v: C, dtype: ScalarType) -> C {
    let mut a = [v];
    match round_through(&mut a, dtype) {
        Ok(()) => a[0],
        Err(_) => v,
    }
}

/// Fills every element of `out` with `v` converted to its dtype.
pub fn fill_scalar(out: &mut TensorMut<'_>, v: Scalar) -> Result<(), KernelError> {
    fn go<E: Element>(out: &mut TensorMut<'_>, v: Scalar) -> Result<(), KernelError> {
        let e: E = match v {
            Scalar::Bool(b) => E::from_bool(b),
            Scalar::Int(i) => E::from_i64(i),
            Scalar::Double(d) => <f64 as Comp>::store::<E>(d),
        };
        out.as_mut_slice::<E>()?.fill(e);
        Ok(())
    }
    dispatch_dtype!(out.info.dtype(), E => go::<E>(out, v), _ => Err(KernelError::dtype(out.info.dtype(), "fill")))
}

/// Copies `src` into `dst` elementwise in logical order, broadcasting `src` to `dst`'s shape and
/// converting dtypes (C++ `static_cast`); any dim orders.
pub fn copy_cast(src: &TensorRef<'_>, dst: &mut TensorMut<'_>) -> Result<(), KernelError> {
    fn go<S: Element, D: Element>(
        src: &TensorRef<'_>,
        dst: &mut TensorMut<'_>,
    ) -> Result<(), KernelError> {
        let info = *dst.info;
        let s = src.as_slice::<S>()?;
        let st = bcast_strides(src.info, info.sizes())?;
        let d = dst.as_mut_slice::<D>()?;
        if src.info.sizes() == info.sizes() && src.info.dim_order() == info.dim_order() {
            for (o, &i) in d.iter_mut().zip(s) {
                *o = cast::<S, D>(i);
            }
            return Ok(());
        }
        walk(info.sizes(), [&st, info.strides()], |[i, o]| {
            d[o] = cast::<S, D>(s[i])
        });
        Ok(())
    }
    let (sd, dd) = (src.info.dtype(), dst.info.dtype());
    dispatch_dtype!(sd, S => dispatch_dtype!(dd, D => go::<S, D>(src, dst),
        _ => Err(KernelError::dtype(dd, "copy"))),
        _ => Err(KernelError::dtype(sd, "copy")))
}

/// Result of `Bool` used as element.
pub type BoolElem = Bool;
