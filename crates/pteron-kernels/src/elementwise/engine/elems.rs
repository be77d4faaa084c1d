//! Typed element access, without allocating: [`Elems`] / [`ElemsMut`] match a tensor's dtype once
//! and convert single elements or whole blocks.

use pteron_core::{half, Bool, Element, KernelError, ScalarType, TensorMut, TensorRef};

use super::Comp;

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
