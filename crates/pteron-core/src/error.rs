//! Errors: what a kernel reports, and what loading or running a method reports (with context).

use crate::dtype::ScalarType;
use alloc::string::String;
use alloc::vec::Vec;

/// What a kernel (or the argument accessors it uses) reports. The executor wraps it in
/// [`Error::Kernel`] with the op name and instruction index.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KernelError {
    #[error("argument {arg}: expected {expected}, found {found}")]
    ArgType {
        arg: usize,
        expected: &'static str,
        found: &'static str,
    },
    #[error("expected {expected} arguments, got {got}")]
    ArgCount { expected: usize, got: usize },
    #[error("dtype {dtype} is not supported by this kernel ({what})")]
    UnsupportedDType {
        dtype: ScalarType,
        what: &'static str,
    },
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("shape mismatch: {0}")]
    Shape(String),
    #[error("tensor of rank {rank} exceeds the rank limit of 16")]
    RankTooLarge { rank: usize },
    #[error("size arithmetic overflows")]
    SizeOverflow,
    #[error(
        "an empty tensor's non-zero dims multiply to {extent}, more than the limit of {}",
        crate::tensor::MAX_EMPTY_EXTENT
    )]
    EmptyExtent { extent: usize },
    #[error("cannot resize output to {requested} bytes: its planned capacity is {capacity} bytes")]
    OutputCapacity { requested: usize, capacity: usize },
    #[error("tensor data overlaps another argument's data (value {value})")]
    Aliasing { value: usize },
    #[error("value {value} is a constant and cannot be written")]
    ReadOnly { value: usize },
    #[error("tensor value {value} has no data")]
    NoData { value: usize },
    #[error("tensor data is misaligned for {dtype}")]
    Misaligned { dtype: ScalarType },
    /// Shapes that must agree do not (`what` names the operand, e.g. "out" or "weight").
    #[error("{op}: {what} has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        op: &'static str,
        what: &'static str,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    /// A tensor's rank is not the one the op needs.
    #[error("{op}: {what} has rank {found}, expected {expected}")]
    RankMismatch {
        op: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// Dtypes that must agree do not.
    #[error("{op}: {what} has dtype {found}, expected {expected}")]
    DTypeMismatch {
        op: &'static str,
        what: &'static str,
        expected: ScalarType,
        found: ScalarType,
    },
    /// A dimension argument outside `[-rank, rank)`.
    #[error("{op}: dim {dim} is out of range for rank {rank}")]
    DimOutOfRange {
        op: &'static str,
        dim: i64,
        rank: usize,
    },
    /// An index (an argument or an element of an index tensor) outside `[-size, size)`.
    #[error("{op}: index {index} is out of range for a dimension of size {size}")]
    IndexOutOfRange {
        op: &'static str,
        index: i64,
        size: usize,
    },
}

impl KernelError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        KernelError::Invalid(msg.into())
    }
    pub fn shape(msg: impl Into<String>) -> Self {
        KernelError::Shape(msg.into())
    }
    pub fn unsupported(msg: impl Into<String>) -> Self {
        KernelError::Unsupported(msg.into())
    }
    pub fn dtype(dtype: ScalarType, what: &'static str) -> Self {
        KernelError::UnsupportedDType { dtype, what }
    }
    pub fn shape_mismatch(
        op: &'static str,
        what: &'static str,
        expected: &[usize],
        found: &[usize],
    ) -> Self {
        KernelError::ShapeMismatch {
            op,
            what,
            expected: expected.to_vec(),
            found: found.to_vec(),
        }
    }
    pub fn rank_mismatch(
        op: &'static str,
        what: &'static str,
        expected: usize,
        found: usize,
    ) -> Self {
        KernelError::RankMismatch {
            op,
            what,
            expected,
            found,
        }
    }
    pub fn dtype_mismatch(
        op: &'static str,
        what: &'static str,
        expected: ScalarType,
        found: ScalarType,
    ) -> Self {
        KernelError::DTypeMismatch {
            op,
            what,
            expected,
            found,
        }
    }
}

/// Errors from loading a program or method, or from running one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Format(#[from] pteron_format::FormatError),
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    #[error("no method named {0:?} in this program")]
    MethodNotFound(String),
    #[error("cannot run {op}: {reason}")]
    OperatorMissing { op: String, reason: String },
    #[error("delegate backend {backend:?} is not available (no backend registered under this id)")]
    BackendMissing { backend: String },
    /// A delegate's backend refused its payload or its arguments at load.
    #[error("{delegate}: {source}")]
    Delegate {
        delegate: String,
        source: KernelError,
    },
    #[error("{op} (instruction {instruction}): {source}")]
    Kernel {
        op: String,
        instruction: usize,
        source: KernelError,
    },
    #[error("input {index}: {message}")]
    Input { index: usize, message: String },
    #[error("input {index}: expected shape {expected:?}, got {given:?}")]
    InputShape {
        index: usize,
        expected: alloc::vec::Vec<usize>,
        given: alloc::vec::Vec<usize>,
    },
    #[error("execution exceeded the instruction budget of {0}")]
    InstructionBudget(u64),
    #[error("the program needs {requested} {what}, over the limit of {limit}")]
    ResourceLimit {
        what: &'static str,
        requested: u64,
        limit: u64,
    },
}

pub type Result<T, E = Error> = core::result::Result<T, E>;
