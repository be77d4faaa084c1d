//! The machinery behind the elementwise, unary, reduction and copy kernels: PyTorch type
//! promotion, compute types, and strided (dim-order aware, broadcasting) loads and stores.
//!
//! Kernels stream: the output's logical (row-major) index space is walked in blocks of
//! [`BLOCK`] elements ([`Blocks`]); each input's block is gathered through its broadcast strides
//! into a stack buffer in the compute type `C` (f32 for f16/bf16/f32, f64, i64 for integers,
//! bool), computed elementwise, rounded through the op's dtype and scattered into the output
//! through its strides, which handles any dim order. Running a kernel allocates nothing.

use pteron_core::{
    dispatch_dtype, half, Bool, Dims, Element, KernelError, Scalar, ScalarType, TensorInfo,
    TensorMut, TensorRef,
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
    let ts = tensors.iter().map(|&&t| Opnd::Tensor(t));
    result_type_iter(ts.chain(scalars.iter().map(|&s| Opnd::Scalar(s))))
}

fn result_type_iter(ops: impl Iterator<Item = Opnd>) -> Result<ScalarType, KernelError> {
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
    for o in ops {
        match o {
            Opnd::Tensor(t) => {
                require_supported("type promotion", t.dtype())?;
                if t.rank() == 0 {
                    upd(&mut zero, t.dtype())?;
                } else {
                    upd(&mut dim, t.dtype())?;
                }
            }
            Opnd::Scalar(s) => upd(&mut wrapped, scalar_dtype(s))?,
        }
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

// ---- Typed element access, without allocating ----

/// The elements of a tensor as a slice of its own element type, matched once per tensor so that
/// kernels can read any dtype: [`Elems::get`] converts one element, [`Elems::gather`] a block.
#[derive(Clone, Copy)]
pub enum Elems<'a> {
    U8(&'a [u8]),
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    F16(&'a [half::f16]),
    BF16(&'a [half::bf16]),
    F32(&'a [f32]),
    F64(&'a [f64]),
    Bool(&'a [Bool]),
}

/// The writable counterpart of [`Elems`].
pub enum ElemsMut<'a> {
    U8(&'a mut [u8]),
    I8(&'a mut [i8]),
    I16(&'a mut [i16]),
    I32(&'a mut [i32]),
    I64(&'a mut [i64]),
    F16(&'a mut [half::f16]),
    BF16(&'a mut [half::bf16]),
    F32(&'a mut [f32]),
    F64(&'a mut [f64]),
    Bool(&'a mut [Bool]),
}

/// Evaluates `$body` with `$s` bound to the slice inside an [`Elems`] or [`ElemsMut`].
macro_rules! match_elems {
    ($ty:ident, $e:expr, $s:ident => $body:expr) => {
        match $e {
            $ty::U8($s) => $body,
            $ty::I8($s) => $body,
            $ty::I16($s) => $body,
            $ty::I32($s) => $body,
            $ty::I64($s) => $body,
            $ty::F16($s) => $body,
            $ty::BF16($s) => $body,
            $ty::F32($s) => $body,
            $ty::F64($s) => $body,
            $ty::Bool($s) => $body,
        }
    };
}

/// Builds an [`Elems`] or [`ElemsMut`] from a tensor with the slice method `$as`.
macro_rules! elems_of {
    ($ty:ident, $t:expr, $as:ident, $what:expr) => {
        match $t.info.dtype() {
            ScalarType::Byte => Ok($ty::U8($t.$as()?)),
            ScalarType::Char => Ok($ty::I8($t.$as()?)),
            ScalarType::Short => Ok($ty::I16($t.$as()?)),
            ScalarType::Int => Ok($ty::I32($t.$as()?)),
            ScalarType::Long => Ok($ty::I64($t.$as()?)),
            ScalarType::Half => Ok($ty::F16($t.$as()?)),
            ScalarType::BFloat16 => Ok($ty::BF16($t.$as()?)),
            ScalarType::Float => Ok($ty::F32($t.$as()?)),
            ScalarType::Double => Ok($ty::F64($t.$as()?)),
            ScalarType::Bool => Ok($ty::Bool($t.$as()?)),
            other => Err(KernelError::dtype(other, $what)),
        }
    };
}

/// Rebuilds the same variant of an [`Elems`] around `$body` (a slice made from `$s`).
macro_rules! map_elems {
    ($e:expr, $s:ident => $body:expr) => {
        match $e {
            Elems::U8($s) => Elems::U8($body),
            Elems::I8($s) => Elems::I8($body),
            Elems::I16($s) => Elems::I16($body),
            Elems::I32($s) => Elems::I32($body),
            Elems::I64($s) => Elems::I64($body),
            Elems::F16($s) => Elems::F16($body),
            Elems::BF16($s) => Elems::BF16($body),
            Elems::F32($s) => Elems::F32($body),
            Elems::F64($s) => Elems::F64($body),
            Elems::Bool($s) => Elems::Bool($body),
        }
    };
}

/// Element offsets of one block of an operand: a run of consecutive elements, or a list.
#[derive(Clone, Copy, Debug)]
pub enum Offsets<'a> {
    Run(usize),
    List(&'a [usize]),
}

impl<'a> Elems<'a> {
    pub fn of(t: &TensorRef<'a>) -> Result<Self, KernelError> {
        elems_of!(Elems, t, as_slice, "load")
    }

    /// Element `i`, converted to `C`.
    #[inline]
    pub fn get<C: Comp>(&self, i: usize) -> C {
        match_elems!(Elems, *self, s => C::load(s[i]))
    }

    /// The elements from `n` on (offsets then count from element `n`).
    pub fn skip(self, n: usize) -> Self {
        map_elems!(self, s => &s[n.min(s.len())..])
    }

    /// Converts the elements at `offs` into `buf`, one per entry of `buf`.
    pub fn gather<C: Comp>(&self, offs: Offsets<'_>, buf: &mut [C]) {
        fn go<E: Element, C: Comp>(s: &[E], offs: Offsets<'_>, buf: &mut [C]) {
            match offs {
                Offsets::Run(start) => {
                    let n = buf.len();
                    for (b, &e) in buf.iter_mut().zip(&s[start..start + n]) {
                        *b = C::load(e);
                    }
                }
                Offsets::List(l) => {
                    for (b, &o) in buf.iter_mut().zip(l) {
                        *b = C::load(s[o]);
                    }
                }
            }
        }
        match_elems!(Elems, *self, s => go(s, offs, buf))
    }
}

impl<'a> ElemsMut<'a> {
    pub fn of(t: &'a mut TensorMut<'_>) -> Result<Self, KernelError> {
        elems_of!(ElemsMut, t, as_mut_slice, "store")
    }

    /// Element `i`, converted to `C`.
    #[inline]
    pub fn get<C: Comp>(&self, i: usize) -> C {
        match_elems!(ElemsMut, self, s => C::load(s[i]))
    }

    /// Stores `v` (converted to the element type) at `i`.
    #[inline]
    pub fn set<R: Comp>(&mut self, i: usize, v: R) {
        match_elems!(ElemsMut, self, s => s[i] = v.store())
    }

    /// Stores `vals` (converted) at `offs`, one per value.
    pub fn scatter<R: Comp>(&mut self, offs: Offsets<'_>, vals: &[R]) {
        fn go<E: Element, R: Comp>(s: &mut [E], offs: Offsets<'_>, vals: &[R]) {
            match offs {
                Offsets::Run(start) => {
                    for (d, &v) in s[start..start + vals.len()].iter_mut().zip(vals) {
                        *d = v.store();
                    }
                }
                Offsets::List(l) => {
                    for (&o, &v) in l.iter().zip(vals) {
                        s[o] = v.store();
                    }
                }
            }
        }
        match_elems!(ElemsMut, self, s => go(s, offs, vals))
    }
}

/// Elements per block of a streamed op (its stack buffers hold this many values).
pub const BLOCK: usize = 256;
/// The most tensors (inputs and output) one [`Blocks`] walk tracks.
pub const MAX_OPERANDS: usize = 4;

/// Whether reading with `strides` visits the elements of `shape` at consecutive offsets.
fn is_linear(strides: &[usize], shape: &[usize]) -> bool {
    let mut expected = 1;
    for (&st, &n) in strides.iter().zip(shape).rev() {
        if n != 1 && st != expected {
            return false;
        }
        expected *= n;
    }
    true
}

/// Walks the logical (row-major) index space of a shape in blocks of at most [`BLOCK`]
/// elements, giving for each operand (read or written with its own strides) the element offsets
/// of the block. An operand whose strides are those of a
/// contiguous tensor of the shape gets a plain run, so when every operand is contiguous a
/// block is a zip over slices and no offsets are computed at all.
pub struct Blocks {
    n: usize,
    shape: Dims,
    strides: [Dims; MAX_OPERANDS],
    linear: [bool; MAX_OPERANDS],
    all_linear: bool,
    /// Multi-index and offsets of the next element to list.
    idx: [usize; pteron_core::MAX_RANK],
    off: [usize; MAX_OPERANDS],
    numel: usize,
    start: usize,
    len: usize,
    offs: [[usize; BLOCK]; MAX_OPERANDS],
}

impl Blocks {
    /// A walk over `shape` for operands read with `strides` (one per operand, each of rank
    /// `shape.len()`).
    pub fn new(shape: &[usize], strides: &[&[usize]]) -> Result<Self, KernelError> {
        let n = strides.len();
        if n > MAX_OPERANDS {
            return Err(KernelError::invalid("elementwise walk: too many operands"));
        }
        let mut b = Blocks {
            n,
            shape: Dims::from_slice(shape)?,
            strides: [Dims::new(); MAX_OPERANDS],
            linear: [true; MAX_OPERANDS],
            all_linear: true,
            idx: [0; pteron_core::MAX_RANK],
            off: [0; MAX_OPERANDS],
            numel: shape.iter().product(),
            start: 0,
            len: 0,
            offs: [[0; BLOCK]; MAX_OPERANDS],
        };
        for (k, &st) in strides.iter().enumerate() {
            if st.len() != shape.len() {
                return Err(KernelError::invalid(format!(
                    "elementwise walk: strides {st:?} for shape {shape:?}"
                )));
            }
            b.strides[k] = Dims::from_slice(st)?;
            b.linear[k] = is_linear(st, shape);
            b.all_linear &= b.linear[k];
        }
        Ok(b)
    }

    /// Moves to the next block; false once every element has been visited.
    pub fn advance(&mut self) -> bool {
        self.start += self.len;
        if self.start >= self.numel {
            self.len = 0;
            return false;
        }
        self.len = BLOCK.min(self.numel - self.start);
        if !self.all_linear {
            self.list_offsets();
        }
        true
    }

    /// Logical index of the block's first element.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Number of elements in the block.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offsets of the block's elements for operand `k`.
    pub fn offsets(&self, k: usize) -> Offsets<'_> {
        if self.linear[k] {
            Offsets::Run(self.start)
        } else {
            Offsets::List(&self.offs[k][..self.len])
        }
    }

    /// Fills `offs` for the strided operands, a run of the innermost dim at a time.
    fn list_offsets(&mut self) {
        let rank = self.shape.len();
        let mut t = 0;
        while t < self.len {
            let Some(last) = rank.checked_sub(1) else {
                // 0-d: the one element is at offset 0.
                for k in 0..self.n {
                    self.offs[k][0] = self.off[k];
                }
                return;
            };
            let run = (self.shape[last] - self.idx[last]).min(self.len - t);
            for k in 0..self.n {
                if !self.linear[k] {
                    let (o, s) = (self.off[k], self.strides[k][last]);
                    for (j, slot) in self.offs[k][t..t + run].iter_mut().enumerate() {
                        *slot = o + j * s;
                    }
                }
                self.off[k] += run * self.strides[k][last];
            }
            t += run;
            self.idx[last] += run;
            // Carry into the outer dims.
            let mut d = last;
            while self.idx[d] == self.shape[d] {
                for k in 0..self.n {
                    self.off[k] -= self.strides[k][d] * self.shape[d];
                }
                self.idx[d] = 0;
                if d == 0 {
                    break;
                }
                d -= 1;
                self.idx[d] += 1;
                for k in 0..self.n {
                    self.off[k] += self.strides[k][d];
                }
            }
        }
    }
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

// ---- Running kernels: resize, borrow, then stream block by block ----

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
    pub fn strides(&self, rank: usize) -> Dims {
        match self {
            Input::Const(_) => {
                Dims::from_slice(&[0; pteron_core::MAX_RANK][..rank]).expect("rank checked")
            }
            Input::Tensor { strides, .. } => *strides,
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
        &[ia.strides(shape.len())],
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
        &[ia.strides(rank), ib.strides(rank)],
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
    let strides = [i0.strides(rank), i1.strides(rank), i2.strides(rank)];
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
