//! Runtime values (ExecuTorch's EValue). `Value` is `Copy`: lists live in the method's
//! [`ListPool`] and are referenced by range, so a MoveCall is a plain copy and never allocates.

use crate::tensor::TensorInfo;

/// Where a tensor's bytes live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage<'p> {
    /// In arena `arena` (an index into the method's memory) at byte `offset`.
    Planned { arena: u32, offset: usize },
    /// Read-only bytes inside the program file (constant weights).
    Constant(&'p [u8]),
    /// No data (e.g. an empty placeholder tensor, or a FreeCall'ed one).
    Empty,
}

/// Whether a tensor may change shape between runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dynamism {
    Static,
    /// Resizable up to the capacity it was planned with.
    Bounded,
}

#[derive(Clone, Copy, Debug)]
pub struct Tensor<'p> {
    pub info: TensorInfo,
    pub storage: Storage<'p>,
    /// Bytes available to this tensor (the planned size, or the constant's size).
    pub capacity: usize,
    pub dynamism: Dynamism,
}

/// A range of a [`ListPool`] vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListRef {
    pub start: u32,
    pub len: u32,
}

impl ListRef {
    pub fn range(self) -> core::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// Marks a `None` entry of an optional tensor list.
pub const NONE_INDEX: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub enum Value<'p> {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    String(&'p str),
    /// Value indices of `Int` values (read at use, so symbolic ints updated by earlier
    /// instructions are seen).
    IntList(ListRef),
    DoubleList(ListRef),
    BoolList(ListRef),
    /// Value indices of `Tensor` values.
    TensorList(ListRef),
    /// Value indices of `Tensor` values, or [`NONE_INDEX`].
    OptionalTensorList(ListRef),
    Tensor(Tensor<'p>),
}

impl Value<'_> {
    /// The tag name used in error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Int(_) => "Int",
            Value::Double(_) => "Double",
            Value::Bool(_) => "Bool",
            Value::String(_) => "String",
            Value::IntList(_) => "IntList",
            Value::DoubleList(_) => "DoubleList",
            Value::BoolList(_) => "BoolList",
            Value::TensorList(_) => "TensorList",
            Value::OptionalTensorList(_) => "OptionalTensorList",
            Value::Tensor(_) => "Tensor",
        }
    }
}

/// Backing storage for every list value of a method, filled once at load.
#[derive(Debug, Default, Clone)]
pub struct ListPool {
    pub indices: alloc::vec::Vec<u32>,
    pub doubles: alloc::vec::Vec<f64>,
    pub bools: alloc::vec::Vec<bool>,
}

/// A scalar argument (PyTorch `Scalar`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Int(i64),
    Double(f64),
    Bool(bool),
}

impl Scalar {
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::Double(v) => v,
            Scalar::Bool(v) => v as u8 as f64,
        }
    }
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Int(v) => v,
            Scalar::Double(v) => v as i64,
            Scalar::Bool(v) => v as i64,
        }
    }
    pub fn is_floating(self) -> bool {
        matches!(self, Scalar::Double(_))
    }
}
