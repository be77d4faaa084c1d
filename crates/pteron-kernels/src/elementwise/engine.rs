//! The machinery behind the elementwise, unary, reduction and copy kernels: PyTorch type
//! promotion, compute types, and strided (dim-order aware, broadcasting) loads and stores.
//!
//! Kernels work in three simple stages: load every input into a `Vec<C>` in *logical* (row-major)
//! order of the output shape, broadcasting as needed (`load_bcast`); compute elementwise in the
//! compute type `C` (f32 for f16/bf16/f32, f64, i64 for integers, bool); store into the output
//! through its strides (`store_logical`), which handles any dim order.

use pteron_core::{
    dispatch_dtype, Bool, Dims, Element, KernelError, Scalar, ScalarType, TensorInfo, TensorMut,
    TensorRef,
};

use crate::util::broadcast_shapes;

/// A compute type: the type elementwise math is done in.
pub trait Comp: Copy + Default + PartialOrd + core::fmt::Debug + 'static {
    fn load<E: Element>(e: E) -> Self;
    fn store<E: Element>(self) -> E;
    fn from_scalar(s: Scalar) -> Self;
}

impl Comp for f32 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_f64() as f32
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_f64(self as f64)
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_f64() as f32
    }
}

impl Comp for f64 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_f64()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        if matches!(E::DTYPE, ScalarType::Half | ScalarType::BFloat16) {
            // c10::Half / BFloat16 convert from double through float.
            E::from_f64(self as f32 as f64)
        } else {
            E::from_f64(self)
        }
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_f64()
    }
}

impl Comp for i64 {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_i64()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_i64(self)
    }
    fn from_scalar(s: Scalar) -> Self {
        s.to_i64()
    }
}

impl Comp for bool {
    #[inline]
    fn load<E: Element>(e: E) -> Self {
        e.to_bool()
    }
    #[inline]
    fn store<E: Element>(self) -> E {
        E::from_bool(self)
    }
    fn from_scalar(s: Scalar) -> Self {
        match s {
            Scalar::Bool(b) => b,
            Scalar::Int(v) => v != 0,
            Scalar::Double(v) => v != 0.0,
        }
    }
}

/// Converts one element as C++ `static_cast` does (ints through i64, floats through f64).
#[inline]
pub fn cast<S: Element, D: Element>(s: S) -> D {
    if S::DTYPE.is_floating() {
        <f64 as Comp>::store::<D>(s.to_f64())
    } else {
        D::from_i64(s.to_i64())
    }
}

/// Which compute type a dtype computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompKind {
    Bool,
    Int,
    F32,
    F64,
}

pub fn comp_kind(dtype: ScalarType) -> Result<CompKind, KernelError> {
    use ScalarType::*;
    Ok(match dtype {
        Bool => CompKind::Bool,
        Byte | Char | Short | Int | Long => CompKind::Int,
        Half | BFloat16 | Float => CompKind::F32,
        Double => CompKind::F64,
        other => return Err(KernelError::dtype(other, "elementwise compute")),
    })
}

/// Whether `dtype` is one of the dtypes pteron computes with.
pub fn is_supported(dtype: ScalarType) -> bool {
    ScalarType::REAL_AND_BOOL.contains(&dtype)
}

/// Errors unless `dtype` is one of the dtypes pteron computes with.
pub fn require_supported(op: &'static str, dtype: ScalarType) -> Result<(), KernelError> {
    if is_supported(dtype) {
        Ok(())
    } else {
        Err(KernelError::dtype(dtype, op))
    }
}

fn int_rank(t: ScalarType) -> Option<u8> {
    use ScalarType::*;
    Some(match t {
        Bool => 0,
        Byte => 1,
        Char => 1,
        Short => 2,
        Int => 3,
        Long => 4,
        _ => return None,
    })
}

/// `torch.promote_types` over the dtypes pteron computes with.
pub fn promote_types(a: ScalarType, b: ScalarType) -> Result<ScalarType, KernelError> {
    use ScalarType::*;
    if a == b {
        return Ok(a);
    }
    for t in [a, b] {
        require_supported("type promotion", t)?;
    }
    if a.is_floating() || b.is_floating() {
        return Ok(match (a.is_floating(), b.is_floating()) {
            (true, false) => a,
            (false, true) => b,
            _ => {
                if a == Double || b == Double {
                    Double
                } else {
                    // f16+bf16, f16+f32, bf16+f32
                    Float
                }
            }
        });
    }
    // Both bool or integer.
    if a == Bool {
        return Ok(b);
    }
    if b == Bool {
        return Ok(a);
    }
    if (a == Byte && b == Char) || (a == Char && b == Byte) {
        return Ok(Short);
    }
    let (ra, rb) = (int_rank(a).unwrap_or(4), int_rank(b).unwrap_or(4));
    Ok(if ra >= rb { a } else { b })
}

fn combine_categories(
    higher: Option<ScalarType>,
    lower: Option<ScalarType>,
) -> Result<Option<ScalarType>, KernelError> {
    let Some(h) = higher else { return Ok(lower) };
    let Some(l) = lower else { return Ok(Some(h)) };
    if h.is_floating() {
        return Ok(Some(h));
    }
    if h == ScalarType::Bool || l.is_floating() {
        return promote_types(h, l).map(Some);
    }
    Ok(Some(h))
}

/// The dtype a Python scalar takes in type promotion (float → the default float32).
pub fn scalar_dtype(s: Scalar) -> ScalarType {
    match s {
        Scalar::Bool(_) => ScalarType::Bool,
        Scalar::Int(_) => ScalarType::Long,
        Scalar::Double(_) => ScalarType::Float,
    }
}

/// `torch.result_type` over tensors (0-d tensors rank below tensors with dims) and Python scalars.
pub fn result_type(tensors: &[&TensorInfo], scalars: &[Scalar]) -> Result<ScalarType, KernelError> {
    let mut dim: Option<ScalarType> = None;
    let mut zero: Option<ScalarType> = None;
    let mut wrapped: Option<ScalarType> = None;
    fn upd(slot: &mut Option<ScalarType>, t: ScalarType) -> Result<(), KernelError> {
        *slot = Some(match *slot {
            None => t,
            Some(s) => promote_types(s, t)?,
        });
        Ok(())
    }
    for t in tensors {
        require_supported("type promotion", t.dtype())?;
        if t.rank() == 0 {
            upd(&mut zero, t.dtype())?;
        } else {
            upd(&mut dim, t.dtype())?;
        }
    }
    for &s in scalars {
        upd(&mut wrapped, scalar_dtype(s))?;
    }
    let r = combine_categories(dim, zero)?;
    let r = combine_categories(r, wrapped)?;
    r.ok_or_else(|| KernelError::invalid("result_type of nothing"))
}

/// PyTorch's `canCast(from, to)`: no float → integral, no non-bool → bool.
pub fn can_cast(from: ScalarType, to: ScalarType) -> bool {
    if from.is_floating() && to.is_integral(true) {
        return false;
    }
    if from != ScalarType::Bool && to == ScalarType::Bool {
        return false;
    }
    true
}

pub fn require_can_cast(
    op: &'static str,
    from: ScalarType,
    to: ScalarType,
) -> Result<(), KernelError> {
    if can_cast(from, to) {
        Ok(())
    } else {
        Err(KernelError::invalid(format!(
            "{op}: result type {from} can't be cast to the desired output type {to}"
        )))
    }
}

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
    if shape.iter().any(|&d| d == 0) {
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

fn load_typed<E: Element, C: Comp>(
    t: &TensorRef<'_>,
    shape: &[usize],
) -> Result<Vec<C>, KernelError> {
    let data = t.as_slice::<E>()?;
    let st = bcast_strides(t.info, shape)?;
    let n: usize = shape.iter().product();
    let mut v = Vec::with_capacity(n);
    if t.info.is_contiguous() && t.info.sizes() == shape {
        v.extend(data.iter().map(|&e| C::load(e)));
        return Ok(v);
    }
    walk(shape, [&st], |[o]| v.push(C::load(data[o])));
    Ok(v)
}

/// The elements of `t`, converted to `C`, broadcast to `shape`, in logical row-major order.
pub fn load_bcast<C: Comp>(t: &TensorRef<'_>, shape: &[usize]) -> Result<Vec<C>, KernelError> {
    dispatch_dtype!(t.info.dtype(), E => load_typed::<E, C>(t, shape),
        _ => Err(KernelError::dtype(t.info.dtype(), "load")))
}

/// The elements of `t` converted to `C`, in logical row-major order of its own shape.
pub fn load<C: Comp>(t: &TensorRef<'_>) -> Result<Vec<C>, KernelError> {
    let sizes = t.info.dims();
    load_bcast(t, sizes.as_slice())
}

fn store_typed<E: Element, R: Comp>(
    vals: &[R],
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let info = *out.info;
    let data = out.as_mut_slice::<E>()?;
    if vals.len() != data.len() {
        return Err(KernelError::invalid(format!(
            "store: {} values for {} elements",
            vals.len(),
            data.len()
        )));
    }
    if info.is_contiguous() {
        for (d, &v) in data.iter_mut().zip(vals) {
            *d = v.store();
        }
        return Ok(());
    }
    let mut k = 0;
    walk(info.sizes(), [info.strides()], |[o]| {
        data[o] = vals[k].store();
        k += 1;
    });
    Ok(())
}

/// Stores `vals` (logical row-major order of `out`'s shape) into `out`, converting to its dtype.
pub fn store_logical<R: Comp>(vals: &[R], out: &mut TensorMut<'_>) -> Result<(), KernelError> {
    dispatch_dtype!(out.info.dtype(), E => store_typed::<E, R>(vals, out),
        _ => Err(KernelError::dtype(out.info.dtype(), "store")))
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

/// Rounds then stores: the usual tail of an elementwise kernel.
pub fn finish<C: Comp>(
    mut vals: Vec<C>,
    common: ScalarType,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    round_through(&mut vals, common)?;
    store_logical(&vals, out)
}

/// Calls `$body` with `$C` bound to the compute type of `$common` (bool, i64, f32 or f64).
#[macro_export]
#[doc(hidden)]
macro_rules! with_comp {
    ($kind:expr, $C:ident => $body:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::Bool => {
                type $C = bool;
                $body
            }
            __K::Int => {
                type $C = i64;
                $body
            }
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
        }
    }};
}

/// Like [`with_comp!`] but bool computes as i64 (for arithmetic).
#[macro_export]
#[doc(hidden)]
macro_rules! with_num {
    ($kind:expr, $C:ident => $body:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::Bool | __K::Int => {
                type $C = i64;
                $body
            }
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
        }
    }};
}

/// Like [`with_comp!`] for floating kinds only; `$other` for bool/int.
#[macro_export]
#[doc(hidden)]
macro_rules! with_float {
    ($kind:expr, $C:ident => $body:expr, _ => $other:expr) => {{
        use $crate::elementwise::engine::CompKind as __K;
        match $kind {
            __K::F32 => {
                type $C = f32;
                $body
            }
            __K::F64 => {
                type $C = f64;
                $body
            }
            _ => $other,
        }
    }};
}

/// Arithmetic with wrapping integers, for the numeric compute types.
pub trait Num: Comp {
    const ZERO: Self;
    const ONE: Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn neg(self) -> Self;
    fn is_nan(self) -> bool;
}

macro_rules! num_float {
    ($t:ty) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn is_nan(self) -> bool {
                self != self
            }
        }
    };
}
num_float!(f32);
num_float!(f64);

impl Num for i64 {
    const ZERO: Self = 0;
    const ONE: Self = 1;
    #[inline]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline]
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    #[inline]
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    #[inline]
    fn neg(self) -> Self {
        self.wrapping_neg()
    }
    #[inline]
    fn is_nan(self) -> bool {
        false
    }
}

/// Maximum / minimum that propagate NaN (as `torch.maximum`, `amax`).
#[inline]
pub fn nan_max<C: Num>(a: C, b: C) -> C {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a >= b {
        a
    } else {
        b
    }
}

#[inline]
pub fn nan_min<C: Num>(a: C, b: C) -> C {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a <= b {
        a
    } else {
        b
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

// ---- Running kernels: resize, borrow, load, map, store ----

use pteron_core::{ArgAccess, ArgView, KernelContext, Value};

/// An operand of an elementwise op: a tensor argument or a scalar.
#[derive(Clone, Copy, Debug)]
pub enum Opnd {
    Tensor(TensorInfo),
    Scalar(Scalar),
}

impl Opnd {
    /// Reads argument `i` as a tensor or a scalar.
    pub fn read<'p>(v: &impl ArgAccess<'p>, i: usize) -> Result<Opnd, KernelError> {
        match v.value(i)? {
            Value::Tensor(t) => Ok(Opnd::Tensor(t.info)),
            _ => Ok(Opnd::Scalar(v.scalar(i)?)),
        }
    }
    pub fn dtype(&self) -> ScalarType {
        match self {
            Opnd::Tensor(t) => t.dtype(),
            Opnd::Scalar(s) => scalar_dtype(*s),
        }
    }
    pub fn sizes(&self) -> &[usize] {
        match self {
            Opnd::Tensor(t) => t.sizes(),
            Opnd::Scalar(_) => &[],
        }
    }
}

/// `torch.result_type` over operands.
pub fn result_type_of(ops: &[Opnd]) -> Result<ScalarType, KernelError> {
    let mut ts: [Option<&TensorInfo>; 4] = [None; 4];
    let mut ss: [Option<Scalar>; 4] = [None; 4];
    let (mut nt, mut ns) = (0, 0);
    for o in ops {
        match o {
            Opnd::Tensor(t) => {
                ts[nt] = Some(t);
                nt += 1;
            }
            Opnd::Scalar(s) => {
                ss[ns] = Some(*s);
                ns += 1;
            }
        }
    }
    let tv: Vec<&TensorInfo> = ts[..nt].iter().map(|t| t.unwrap()).collect();
    let sv: Vec<Scalar> = ss[..ns].iter().map(|s| s.unwrap()).collect();
    result_type(&tv, &sv)
}

/// Broadcast shape of the operands (scalars broadcast as 0-d).
pub fn broadcast_opnds(ops: &[Opnd]) -> Result<Dims, KernelError> {
    let mut out = Dims::new();
    for o in ops {
        out = broadcast_shapes(out.as_slice(), o.sizes())?;
    }
    Ok(out)
}

fn load_opnd<C: Comp>(
    o: &Opnd,
    t: Option<&TensorRef<'_>>,
    shape: &[usize],
) -> Result<Vec<C>, KernelError> {
    match (o, t) {
        (Opnd::Scalar(s), _) => Ok(vec![C::from_scalar(*s); shape.iter().product()]),
        (Opnd::Tensor(_), Some(t)) => load_bcast(t, shape),
        _ => Err(KernelError::invalid("operand has no tensor")),
    }
}

/// Loads an operand and, as PyTorch does, casts it to the op's common dtype first (a Python
/// scalar or a wider 0-d tensor is converted to the common dtype before computing).
fn load_common<C: Comp>(
    o: &Opnd,
    t: Option<&TensorRef<'_>>,
    shape: &[usize],
    common: Option<ScalarType>,
) -> Result<Vec<C>, KernelError> {
    let mut v = load_opnd::<C>(o, t, shape)?;
    if let Some(d) = common {
        if o.dtype() != d || matches!(o, Opnd::Scalar(_)) {
            round_through(&mut v, d)?;
        }
    }
    Ok(v)
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
    let (va, mut o) = match oa {
        Opnd::Scalar(_) => {
            let ([], [o]) = ctx.io([], [out])?;
            (load_common::<C>(&oa, None, shape, round)?, o)
        }
        Opnd::Tensor(_) => {
            let ([ta], [o]) = ctx.io([a], [out])?;
            (load_common::<C>(&oa, Some(&ta), shape, round)?, o)
        }
    };
    let mut v: Vec<R> = va.into_iter().map(&mut f).collect();
    if let Some(r) = round {
        round_through(&mut v, r)?;
    }
    store_logical(&v, &mut o)
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
    let (va, vb, mut o) = match (&oa, &ob) {
        (Opnd::Tensor(_), Opnd::Tensor(_)) => {
            let ([ta, tb], [o]) = ctx.io([a, b], [out])?;
            (
                load_common::<C>(&oa, Some(&ta), shape, in_common)?,
                load_common::<C>(&ob, Some(&tb), shape, in_common)?,
                o,
            )
        }
        (Opnd::Tensor(_), Opnd::Scalar(_)) => {
            let ([ta], [o]) = ctx.io([a], [out])?;
            (
                load_common::<C>(&oa, Some(&ta), shape, in_common)?,
                load_common::<C>(&ob, None, shape, in_common)?,
                o,
            )
        }
        (Opnd::Scalar(_), Opnd::Tensor(_)) => {
            let ([tb], [o]) = ctx.io([b], [out])?;
            (
                load_common::<C>(&oa, None, shape, in_common)?,
                load_common::<C>(&ob, Some(&tb), shape, in_common)?,
                o,
            )
        }
        (Opnd::Scalar(_), Opnd::Scalar(_)) => {
            let ([], [o]) = ctx.io([], [out])?;
            (
                load_common::<C>(&oa, None, shape, in_common)?,
                load_common::<C>(&ob, None, shape, in_common)?,
                o,
            )
        }
    };
    let mut v: Vec<R> = va.into_iter().zip(vb).map(|(x, y)| f(x, y)).collect();
    if let Some(r) = round {
        round_through(&mut v, r)?;
    }
    store_logical(&v, &mut o)
}

/// Runs a ternary map over three tensor arguments broadcast to `shape`; `Cc` is the compute type
/// of the first (e.g. a bool condition).
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
    let v0 = load_bcast::<Cc>(&t0, shape)?;
    let v1 = load_common::<C>(&Opnd::Tensor(*t1.info), Some(&t1), shape, round)?;
    let v2 = load_common::<C>(&Opnd::Tensor(*t2.info), Some(&t2), shape, round)?;
    let mut v: Vec<R> = v0
        .into_iter()
        .zip(v1)
        .zip(v2)
        .map(|((x, y), z)| f(x, y, z))
        .collect();
    if let Some(r) = round {
        round_through(&mut v, r)?;
    }
    store_logical(&v, &mut o)
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

/// Float helpers that PyTorch defines beyond libm.
pub trait FMath: Num {
    /// Python-style floor division (`div_floor_floating`).
    fn div_floor(self, b: Self) -> Self;
    /// Python-style remainder (sign of the divisor).
    fn py_rem(self, b: Self) -> Self;
}

macro_rules! fmath {
    ($t:ty) => {
        impl FMath for $t {
            fn div_floor(self, b: Self) -> Self {
                let a = self;
                if b == 0.0 {
                    return a / b;
                }
                let m = a % b;
                let mut div = (a - m) / b;
                if m != 0.0 && (b < 0.0) != (m < 0.0) {
                    div -= 1.0;
                }
                if div != 0.0 {
                    let mut fd = div.floor();
                    if div - fd > 0.5 {
                        fd += 1.0;
                    }
                    fd
                } else {
                    (0.0 as $t).copysign(a / b)
                }
            }
            fn py_rem(self, b: Self) -> Self {
                let mut m = self % b;
                if m != 0.0 && (b < 0.0) != (m < 0.0) {
                    m += b;
                }
                m
            }
        }
    };
}
fmath!(f32);
fmath!(f64);

/// Integer floor division / Python remainder; `None` on division by zero.
pub fn int_div_floor(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.wrapping_div(b);
    let r = a.wrapping_rem(b);
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

pub fn int_py_rem(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let r = a.wrapping_rem(b);
    Some(if r != 0 && ((r < 0) != (b < 0)) {
        r + b
    } else {
        r
    })
}

/// Integer power as PyTorch's `powi` (negative exponents give 0 except for bases ±1).
pub fn int_pow(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut result, mut b, mut e) = (1i64, base, exp as u64);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

/// The error function (for f64; f32 callers round the result). Max error ~1e-15 relative.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax < 2.5 {
        // Maclaurin series: 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)).
        let x2 = x * x;
        let mut term = x; // (-1)^n x^(2n+1) / n!
        let mut sum = x;
        let mut n = 0.0f64;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * core::f64::consts::FRAC_2_SQRT_PI
    } else {
        let r = 1.0 - erfc_cf(ax);
        if x < 0.0 {
            -r
        } else {
            r
        }
    }
}

/// erfc(x) for x >= 2.5 by its continued fraction (modified Lentz).
fn erfc_cf(x: f64) -> f64 {
    if x > 27.0 {
        return 0.0;
    }
    // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    let tiny = 1e-300;
    let mut f = x;
    let mut c = x;
    let mut d = 0.0;
    for k in 1..300 {
        let a = k as f64 * 0.5;
        d = x + a * d;
        if d.abs() < tiny {
            d = tiny;
        }
        c = x + a / c;
        if c.abs() < tiny {
            c = tiny;
        }
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (-x * x).exp() / (f * core::f64::consts::PI.sqrt())
}
