//! The kernel interface: how a kernel reads its arguments, resizes its outputs and borrows
//! tensor bytes. (What a kernel declares besides its run function, and the registry, are in
//! [`crate::registry`].)
//!
//! A kernel is a plain function `fn(&mut KernelContext) -> Result<(), KernelError>`. Its
//! arguments are the op's schema arguments in order (out tensors included), followed by one
//! slot for the return value, exactly as the `.pte` KernelCall lists them.

use alloc::format;

use crate::dtype::{Element, ScalarType};
use crate::error::KernelError;
use crate::memory::{borrow_disjoint, Arena, Region};
use crate::parallel::{Parallel, INLINE};
use crate::tensor::TensorInfo;
use crate::value::{ListPool, Scalar, Storage, Value};
use core::any::Any;

/// Read access to a kernel call's arguments; shared by [`KernelContext`] (at run time) and
/// [`ArgView`] (at load time, for checks).
pub trait ArgAccess<'p> {
    #[doc(hidden)]
    fn parts(&self) -> (&[Value<'p>], &ListPool, &[u32]);

    /// Number of argument slots (including the trailing return slot).
    fn num_args(&self) -> usize {
        self.parts().2.len()
    }

    /// The value index behind argument `i`.
    fn value_index(&self, i: usize) -> Result<usize, KernelError> {
        let (_, _, args) = self.parts();
        args.get(i)
            .map(|&v| v as usize)
            .ok_or(KernelError::ArgCount {
                expected: i + 1,
                got: args.len(),
            })
    }

    fn value(&self, i: usize) -> Result<&Value<'p>, KernelError> {
        let vi = self.value_index(i)?;
        self.parts()
            .0
            .get(vi)
            .ok_or_else(|| KernelError::invalid(format!("value index {vi} out of range")))
    }

    fn is_none(&self, i: usize) -> Result<bool, KernelError> {
        Ok(matches!(self.value(i)?, Value::None))
    }

    fn int(&self, i: usize) -> Result<i64, KernelError> {
        match self.value(i)? {
            Value::Int(v) => Ok(*v),
            v => Err(type_error(i, "Int", v)),
        }
    }

    fn opt_int(&self, i: usize) -> Result<Option<i64>, KernelError> {
        match self.value(i)? {
            Value::None => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            v => Err(type_error(i, "Int or None", v)),
        }
    }

    /// A `float` argument; Int values are accepted, as Python would.
    fn double(&self, i: usize) -> Result<f64, KernelError> {
        match self.value(i)? {
            Value::Double(v) => Ok(*v),
            Value::Int(v) => Ok(*v as f64),
            v => Err(type_error(i, "Double", v)),
        }
    }

    fn opt_double(&self, i: usize) -> Result<Option<f64>, KernelError> {
        match self.value(i)? {
            Value::None => Ok(None),
            _ => self.double(i).map(Some),
        }
    }

    fn bool(&self, i: usize) -> Result<bool, KernelError> {
        match self.value(i)? {
            Value::Bool(v) => Ok(*v),
            v => Err(type_error(i, "Bool", v)),
        }
    }

    fn scalar(&self, i: usize) -> Result<Scalar, KernelError> {
        match self.value(i)? {
            Value::Int(v) => Ok(Scalar::Int(*v)),
            Value::Double(v) => Ok(Scalar::Double(*v)),
            Value::Bool(v) => Ok(Scalar::Bool(*v)),
            v => Err(type_error(i, "Scalar", v)),
        }
    }

    fn opt_scalar(&self, i: usize) -> Result<Option<Scalar>, KernelError> {
        match self.value(i)? {
            Value::None => Ok(None),
            _ => self.scalar(i).map(Some),
        }
    }

    fn string(&self, i: usize) -> Result<&'p str, KernelError> {
        match self.value(i)? {
            Value::String(s) => Ok(s),
            v => Err(type_error(i, "String", v)),
        }
    }

    /// A `ScalarType` argument (`dtype=`), or `None`.
    fn opt_dtype(&self, i: usize) -> Result<Option<ScalarType>, KernelError> {
        match self.value(i)? {
            Value::None => Ok(None),
            Value::Int(v) => ScalarType::from_i64(*v)
                .map(Some)
                .ok_or_else(|| KernelError::invalid(format!("argument {i}: unknown dtype {v}"))),
            v => Err(type_error(i, "ScalarType", v)),
        }
    }

    /// An `int[]` argument.
    fn int_list(&self, i: usize) -> Result<IntList<'_, 'p>, KernelError> {
        let (values, pool, _) = self.parts();
        match self.value(i)? {
            Value::IntList(r) => Ok(IntList {
                values,
                items: pool.indices.get(r.range()).unwrap_or(&[]),
                arg: i,
            }),
            v => Err(type_error(i, "IntList", v)),
        }
    }

    /// An `int[]?` argument.
    fn opt_int_list(&self, i: usize) -> Result<Option<IntList<'_, 'p>>, KernelError> {
        match self.value(i)? {
            Value::None => Ok(None),
            _ => self.int_list(i).map(Some),
        }
    }

    fn double_list<'s>(&'s self, i: usize) -> Result<&'s [f64], KernelError>
    where
        'p: 's,
    {
        let (_, pool, _) = self.parts();
        match self.value(i)? {
            Value::DoubleList(r) => Ok(pool.doubles.get(r.range()).unwrap_or(&[])),
            v => Err(type_error(i, "DoubleList", v)),
        }
    }

    fn bool_list<'s>(&'s self, i: usize) -> Result<&'s [bool], KernelError>
    where
        'p: 's,
    {
        let (_, pool, _) = self.parts();
        match self.value(i)? {
            Value::BoolList(r) => Ok(pool.bools.get(r.range()).unwrap_or(&[])),
            v => Err(type_error(i, "BoolList", v)),
        }
    }

    /// Metadata of the tensor at argument `i`.
    fn tensor<'s>(&'s self, i: usize) -> Result<&'s TensorInfo, KernelError>
    where
        'p: 's,
    {
        match self.value(i)? {
            Value::Tensor(t) => Ok(&t.info),
            v => Err(type_error(i, "Tensor", v)),
        }
    }

    /// A `Tensor?` argument.
    fn opt_tensor<'s>(&'s self, i: usize) -> Result<Option<&'s TensorInfo>, KernelError>
    where
        'p: 's,
    {
        match self.value(i)? {
            Value::None => Ok(None),
            Value::Tensor(t) => Ok(Some(&t.info)),
            v => Err(type_error(i, "Tensor or None", v)),
        }
    }

    /// Metadata of the tensor with value index `vi` (for list items).
    fn tensor_at<'s>(&'s self, vi: usize) -> Result<&'s TensorInfo, KernelError>
    where
        'p: 's,
    {
        match self.parts().0.get(vi) {
            Some(Value::Tensor(t)) => Ok(&t.info),
            Some(v) => Err(KernelError::invalid(format!(
                "list item {vi} is a {}, not a Tensor",
                v.kind()
            ))),
            None => Err(KernelError::invalid(format!("list item {vi} out of range"))),
        }
    }

    /// A `Tensor[]` argument, as value indices (use [`ArgAccess::tensor_at`] on each).
    fn tensor_list<'s>(&'s self, i: usize) -> Result<&'s [u32], KernelError>
    where
        'p: 's,
    {
        let (_, pool, _) = self.parts();
        match self.value(i)? {
            Value::TensorList(r) => Ok(pool.indices.get(r.range()).unwrap_or(&[])),
            v => Err(type_error(i, "TensorList", v)),
        }
    }

    /// A `Tensor?[]` argument, as value indices with [`NONE_INDEX`] for `None`.
    fn opt_tensor_list<'s>(&'s self, i: usize) -> Result<&'s [u32], KernelError>
    where
        'p: 's,
    {
        let (_, pool, _) = self.parts();
        match self.value(i)? {
            Value::OptionalTensorList(r) => Ok(pool.indices.get(r.range()).unwrap_or(&[])),
            v => Err(type_error(i, "OptionalTensorList", v)),
        }
    }
}

fn type_error(arg: usize, expected: &'static str, found: &Value<'_>) -> KernelError {
    KernelError::ArgType {
        arg,
        expected,
        found: found.kind(),
    }
}

/// An `int[]` argument: items are read through the Int values they name.
#[derive(Clone, Copy)]
pub struct IntList<'a, 'p> {
    values: &'a [Value<'p>],
    items: &'a [u32],
    arg: usize,
}

impl IntList<'_, '_> {
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn get(&self, k: usize) -> Result<i64, KernelError> {
        let vi = *self
            .items
            .get(k)
            .ok_or_else(|| KernelError::invalid(format!("list index {k} out of range")))?;
        match self.values.get(vi as usize) {
            Some(Value::Int(v)) => Ok(*v),
            Some(v) => Err(KernelError::ArgType {
                arg: self.arg,
                expected: "IntList of Int",
                found: v.kind(),
            }),
            None => Err(KernelError::invalid(format!("list item {vi} out of range"))),
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = Result<i64, KernelError>> + '_ {
        (0..self.len()).map(move |k| self.get(k))
    }
    /// Copies the items into `buf` (which must be long enough) and returns the filled part.
    pub fn read_into<'b>(&self, buf: &'b mut [i64]) -> Result<&'b [i64], KernelError> {
        if buf.len() < self.len() {
            return Err(KernelError::unsupported(format!(
                "int list of {} items is too long",
                self.len()
            )));
        }
        for k in 0..self.len() {
            buf[k] = self.get(k)?;
        }
        Ok(&buf[..self.len()])
    }
}

/// Load-time, read-only view of one kernel call's arguments.
pub struct ArgView<'a, 'p> {
    pub(crate) values: &'a [Value<'p>],
    pub(crate) pool: &'a ListPool,
    pub(crate) args: &'a [u32],
}

impl<'p> ArgAccess<'p> for ArgView<'_, 'p> {
    fn parts(&self) -> (&[Value<'p>], &ListPool, &[u32]) {
        (self.values, self.pool, self.args)
    }
}

/// Run-time access to one kernel call: arguments, output resizing, tensor bytes, and what the
/// method prepared for this call (state, scratch memory, threads).
pub struct KernelContext<'a, 'p> {
    pub(crate) values: &'a mut [Value<'p>],
    pub(crate) pool: &'a ListPool,
    pub(crate) arenas: &'a mut [Arena<'p>],
    pub(crate) args: &'a [u32],
    pub(crate) prepared: Option<&'a (dyn Any + Send + Sync)>,
    pub(crate) scratch: &'a mut [u8],
    pub(crate) parallel: &'a dyn Parallel,
}

impl<'p> ArgAccess<'p> for KernelContext<'_, 'p> {
    fn parts(&self) -> (&[Value<'p>], &ListPool, &[u32]) {
        (self.values, self.pool, self.args)
    }
}

impl<'a, 'p> KernelContext<'a, 'p> {
    /// Builds a context over explicit values and memory (used by the executor and by tests).
    pub fn new(
        values: &'a mut [Value<'p>],
        pool: &'a ListPool,
        arenas: &'a mut [Arena<'p>],
        args: &'a [u32],
    ) -> Self {
        KernelContext {
            values,
            pool,
            arenas,
            args,
            prepared: None,
            scratch: &mut [],
            parallel: &INLINE,
        }
    }

    /// Gives the call the state its kernel's `prepare` made (see [`crate::prepare`]).
    pub fn with_prepared(mut self, state: Option<&'a (dyn Any + Send + Sync)>) -> Self {
        self.prepared = state;
        self
    }

    /// Gives the call scratch memory.
    pub fn with_scratch(mut self, scratch: &'a mut [u8]) -> Self {
        self.scratch = scratch;
        self
    }

    /// Lets the call split its work with `parallel` (the default runs everything inline).
    pub fn with_parallel(mut self, parallel: &'a dyn Parallel) -> Self {
        self.parallel = parallel;
        self
    }

    /// The state this call's kernel prepared at load, if it made one of type `T`.
    pub fn prepared<T: Any>(&self) -> Option<&'a T> {
        self.prepared.and_then(|s| s.downcast_ref::<T>())
    }

    /// The scratch memory for this call (64-byte aligned; at least what the prepared state
    /// asked for, or empty). Taking it leaves the context without scratch.
    pub fn take_scratch(&mut self) -> &'a mut [u8] {
        core::mem::take(&mut self.scratch)
    }

    /// How to split this call's work across threads.
    pub fn parallel(&self) -> &'a dyn Parallel {
        self.parallel
    }

    fn tensor_mut_at(&mut self, vi: usize) -> Result<&mut crate::value::Tensor<'p>, KernelError> {
        match self.values.get_mut(vi) {
            Some(Value::Tensor(t)) => Ok(t),
            Some(v) => Err(KernelError::invalid(format!(
                "value {vi} is a {}, not a Tensor",
                v.kind()
            ))),
            None => Err(KernelError::invalid(format!("value {vi} out of range"))),
        }
    }

    /// Resizes the output tensor at argument `i` (same rank; within its planned capacity).
    pub fn resize(&mut self, i: usize, sizes: &[usize]) -> Result<(), KernelError> {
        let vi = self.value_index(i)?;
        self.resize_value(vi, sizes)
    }

    /// Resizes the tensor with value index `vi` (for list items).
    pub fn resize_value(&mut self, vi: usize, sizes: &[usize]) -> Result<(), KernelError> {
        let t = self.tensor_mut_at(vi)?;
        if t.info.sizes() == sizes {
            return Ok(());
        }
        let mut info = t.info;
        info.set_sizes(sizes)?;
        if info.nbytes() > t.capacity {
            return Err(KernelError::OutputCapacity {
                requested: info.nbytes(),
                capacity: t.capacity,
            });
        }
        if matches!(t.storage, Storage::Constant(_)) {
            return Err(KernelError::ReadOnly { value: vi });
        }
        t.info = info;
        Ok(())
    }

    /// Overwrites the scalar value at argument `i` (prim ops and `sym_size` write their result
    /// into the return slot this way).
    pub fn set_value(&mut self, i: usize, v: Value<'p>) -> Result<(), KernelError> {
        let vi = self.value_index(i)?;
        let slot = self
            .values
            .get_mut(vi)
            .ok_or_else(|| KernelError::invalid(format!("value {vi} out of range")))?;
        if !matches!(
            slot,
            Value::Int(_) | Value::Double(_) | Value::Bool(_) | Value::None
        ) || !matches!(v, Value::Int(_) | Value::Double(_) | Value::Bool(_))
        {
            return Err(KernelError::invalid(format!(
                "cannot store a {} into a {} value",
                v.kind(),
                slot.kind()
            )));
        }
        *slot = v;
        Ok(())
    }

    /// Makes the tensor at argument `out` a view of the tensor at argument `src` with new
    /// `sizes` (same number of elements): ExecuTorch's aliasing `et_view`.
    pub fn set_view(&mut self, out: usize, src: usize, sizes: &[usize]) -> Result<(), KernelError> {
        let (vo, vs) = (self.value_index(out)?, self.value_index(src)?);
        let s = *tensor_of(self.values, vs)?;
        let t = self.tensor_mut_at(vo)?;
        let info = TensorInfo::contiguous(t.info.dtype(), sizes)?;
        if info.dtype() != s.info.dtype()
            || info.numel() != s.info.numel()
            || !s.info.is_contiguous()
        {
            return Err(KernelError::shape(format!(
                "cannot view {:?} as {:?}",
                s.info, info
            )));
        }
        t.info = info;
        t.storage = s.storage;
        t.capacity = s.capacity;
        Ok(())
    }

    /// Borrows tensor bytes: arguments `ins` read-only, `outs` writable. Errors if an output
    /// overlaps any other argument (an in-place kernel reads through its output instead).
    pub fn io<const N: usize, const M: usize>(
        &mut self,
        ins: [usize; N],
        outs: [usize; M],
    ) -> Result<([TensorRef<'_>; N], [TensorMut<'_>; M]), KernelError> {
        let mut vi = [0usize; N];
        for k in 0..N {
            vi[k] = self.value_index(ins[k])?;
        }
        let mut vo = [0usize; M];
        for k in 0..M {
            vo[k] = self.value_index(outs[k])?;
        }
        self.io_values(vi, vo)
    }

    /// Like [`KernelContext::io`] but with value indices (for tensor list items).
    pub fn io_values<const N: usize, const M: usize>(
        &mut self,
        ins: [usize; N],
        outs: [usize; M],
    ) -> Result<([TensorRef<'_>; N], [TensorMut<'_>; M]), KernelError> {
        // An output may not be the same value as another argument of the borrow, also when it
        // has no bytes (the range check below cannot see that): a kernel that resized such an
        // output would read the input with its old sizes (found by fuzzing: masked_select).
        for k in 0..M {
            if ins.contains(&outs[k]) || outs[..k].contains(&outs[k]) {
                return Err(KernelError::Aliasing { value: outs[k] });
            }
        }
        let values: &[Value<'p>] = self.values;
        let mut in_regions: [Region<'_>; N] = [Region::Bytes(&[]); N];
        let mut in_infos: [Option<&TensorInfo>; N] = [None; N];
        for k in 0..N {
            let t = tensor_of(values, ins[k])?;
            in_infos[k] = Some(&t.info);
            in_regions[k] = region_of(ins[k], t)?;
        }
        let mut out_ranges = [(0usize, 0usize, 0usize); M];
        let mut out_infos: [Option<&TensorInfo>; M] = [None; M];
        for k in 0..M {
            let t = tensor_of(values, outs[k])?;
            out_infos[k] = Some(&t.info);
            match region_of(outs[k], t)? {
                Region::Arena { arena, start, end } => out_ranges[k] = (arena, start, end),
                // An output with no bytes borrows an empty range.
                Region::Bytes([]) => out_ranges[k] = (0, 0, 0),
                Region::Bytes(_) => return Err(KernelError::ReadOnly { value: outs[k] }),
            }
        }
        let (ins_b, mut outs_b) =
            borrow_disjoint(self.arenas, in_regions, out_ranges).map_err(|k| {
                let value = if k < N { ins[k] } else { outs[k - N] };
                KernelError::Aliasing { value }
            })?;
        let ins_out: [TensorRef<'_>; N] = core::array::from_fn(|k| TensorRef {
            info: in_infos[k].expect("set for every input above"),
            bytes: ins_b[k],
        });
        let outs_out: [TensorMut<'_>; M] = core::array::from_fn(|k| TensorMut {
            info: out_infos[k].expect("set for every output above"),
            bytes: core::mem::take(&mut outs_b[k]),
        });
        Ok((ins_out, outs_out))
    }
}

fn tensor_of<'v, 'p>(
    values: &'v [Value<'p>],
    vi: usize,
) -> Result<&'v crate::value::Tensor<'p>, KernelError> {
    match values.get(vi) {
        Some(Value::Tensor(t)) => Ok(t),
        Some(v) => Err(KernelError::invalid(format!(
            "value {vi} is a {}, not a Tensor",
            v.kind()
        ))),
        None => Err(KernelError::invalid(format!("value {vi} out of range"))),
    }
}

fn region_of<'v>(vi: usize, t: &crate::value::Tensor<'v>) -> Result<Region<'v>, KernelError> {
    let n = t.info.nbytes();
    if n > t.capacity {
        return Err(KernelError::OutputCapacity {
            requested: n,
            capacity: t.capacity,
        });
    }
    match t.storage {
        Storage::Planned { arena, offset } => {
            let end = offset.checked_add(n).ok_or(KernelError::SizeOverflow)?;
            Ok(Region::Arena {
                arena: arena as usize,
                start: offset,
                end,
            })
        }
        Storage::Constant(b) => b
            .get(..n)
            .map(Region::Bytes)
            .ok_or(KernelError::NoData { value: vi }),
        Storage::Empty if n == 0 => Ok(Region::Bytes(&[])),
        Storage::Empty => Err(KernelError::NoData { value: vi }),
    }
}

/// A read-only tensor: metadata and bytes (current sizes only).
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    pub info: &'a TensorInfo,
    pub bytes: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// The elements as `T`; errors when `T` is not the tensor's dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T], KernelError> {
        if T::DTYPE != self.info.dtype() {
            return Err(KernelError::invalid(format!(
                "tensor is {}, kernel read it as {}",
                self.info.dtype(),
                T::DTYPE
            )));
        }
        bytemuck::try_cast_slice(self.bytes)
            .map_err(|_| KernelError::Misaligned { dtype: T::DTYPE })
    }
}

/// A writable tensor: metadata and bytes (current sizes only).
pub struct TensorMut<'a> {
    pub info: &'a TensorInfo,
    pub bytes: &'a mut [u8],
}

impl TensorMut<'_> {
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], KernelError> {
        if T::DTYPE != self.info.dtype() {
            return Err(KernelError::invalid(format!(
                "tensor is {}, kernel wrote it as {}",
                self.info.dtype(),
                T::DTYPE
            )));
        }
        bytemuck::try_cast_slice_mut(self.bytes)
            .map_err(|_| KernelError::Misaligned { dtype: T::DTYPE })
    }
    pub fn as_ref(&self) -> TensorRef<'_> {
        TensorRef {
            info: self.info,
            bytes: self.bytes,
        }
    }
}

pub type KernelFn = for<'a, 'p> fn(&mut KernelContext<'a, 'p>) -> Result<(), KernelError>;
pub type CheckFn = for<'a, 'p> fn(&ArgView<'a, 'p>) -> Result<(), KernelError>;
