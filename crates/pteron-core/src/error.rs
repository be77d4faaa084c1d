//! Errors: what a kernel reports, and what loading or running a method reports (with context).

use crate::dtype::ScalarType;
use alloc::string::String;
use alloc::vec::Vec;

/// What a kernel (or the argument accessors it uses) reports. The method wraps it with the op
/// name and instruction index: [`Error::KernelRejected`] from a load-time check,
/// [`Error::PrepareFailed`] from a `prepare` step, [`Error::Kernel`] from a run.
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
    /// A dim order that is not a permutation of the tensor's dims.
    #[error("dim order of {entries} entries is not a permutation of 0..{rank}")]
    DimOrder { entries: usize, rank: usize },
    #[error("tensor of rank {rank} exceeds the rank limit of 16")]
    RankTooLarge { rank: usize },
    #[error("size arithmetic overflows")]
    SizeOverflow,
    /// An empty tensor whose non-zero dims multiply past `limit` (its strides would be
    /// meaningless: no element is ever addressed).
    #[error(
        "an empty tensor's non-zero dims multiply to {extent}, more than the limit of {limit}"
    )]
    EmptyExtent { extent: usize, limit: usize },
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
    /// The program breaks a rule of the format not covered by a variant of its own.
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    /// An index read from the program (a value, operator, delegate or list item) outside the
    /// table it indexes: `what` names the index, `len` the table's length.
    #[error("invalid program: {what} index {index} out of range (0..{len})")]
    IndexOutOfRange {
        what: &'static str,
        index: i64,
        len: usize,
    },
    /// A JumpFalse destination outside its chain of `len` instructions.
    #[error(
        "invalid program: jump destination {destination} outside the chain of {len} instructions"
    )]
    JumpOutOfRange { destination: i64, len: usize },
    /// A tensor's sizes and dim order in the program do not form valid metadata (kept as data:
    /// formatting it at load would link the formatting code into every firmware).
    #[error("invalid program: tensor metadata: {0}")]
    TensorMeta(KernelError),
    #[error("no method named {0:?} in this program")]
    MethodNotFound(String),
    /// No kernel is registered for these operators (every missing one, in table order).
    #[error("cannot run {}: no kernel registered", ops.join(", "))]
    OperatorMissing { ops: Vec<String> },
    /// The kernel registered for `op` rejects the arguments of the call at `instruction`
    /// (its load-time check failed: an unsupported dtype, a shape it cannot handle).
    #[error("cannot run {op}: instruction {instruction}: {source}")]
    KernelRejected {
        op: String,
        instruction: usize,
        source: KernelError,
    },
    /// The load-time `prepare` step of `op`'s kernel failed for the call at `instruction`.
    #[error("cannot run {op}: instruction {instruction}: prepare: {source}")]
    PrepareFailed {
        op: String,
        instruction: usize,
        source: KernelError,
    },
    #[error("delegate backend {backend:?} is not available (no backend registered under this id)")]
    BackendMissing { backend: String },
    /// A delegate's backend (or a partitioner) refused its payload or its arguments at load.
    #[error("{delegate}: {source}")]
    Delegate {
        delegate: String,
        source: KernelError,
    },
    /// A kernel (or delegate) failed at run time.
    #[error("{op} (instruction {instruction}): {source}")]
    Kernel {
        op: String,
        instruction: usize,
        source: KernelError,
    },
    #[error("input {index}: {message}")]
    Input { index: usize, message: String },
    /// An input index past the method's `count` inputs.
    #[error("input {index}: the method has {count} inputs")]
    InputIndex { index: usize, count: usize },
    #[error("input {index}: expected shape {expected:?}, got {given:?}")]
    InputShape {
        index: usize,
        expected: Vec<usize>,
        given: Vec<usize>,
    },
    #[error("input {index}: expected dtype {expected}, got {given}")]
    InputDType {
        index: usize,
        expected: ScalarType,
        given: ScalarType,
    },
    /// Tensor data of the wrong length for the input's dtype and sizes.
    #[error("input {index}: expected {expected} bytes of data, got {given}")]
    InputBytes {
        index: usize,
        expected: usize,
        given: usize,
    },
    /// An output index past the method's `count` outputs.
    #[error("no output {index}: the method has {count} outputs")]
    OutputIndex { index: usize, count: usize },
    /// A value asked for as state ([`crate::Method::state`]) that is not a planned tensor.
    #[error("value {value} is not a planned tensor")]
    NotPlanned { value: usize },
    #[error("execution exceeded the instruction budget of {0}")]
    InstructionBudget(u64),
    #[error("the program needs {requested} {what}, over the limit of {limit}")]
    ResourceLimit {
        what: &'static str,
        requested: u64,
        limit: u64,
    },
    /// A number in the program outside what the format allows: `what` says which (an unknown
    /// tag, a negative size), `found` is the number in the file. (Errors met while loading
    /// are kept as data: formatting them there would link `core::fmt` into every firmware.)
    #[error("invalid program: {what} {found}")]
    BadNumber { what: &'static str, found: i64 },
    /// A tensor's planned location overruns its buffer.
    #[error("invalid program: tensor at offset {offset} with {nbytes} bytes overruns planned buffer {buffer} of {size} bytes")]
    Overrun {
        offset: u64,
        nbytes: usize,
        buffer: u32,
        size: usize,
    },
    /// An argument that must be a tensor names another kind of value.
    #[error("invalid program: {what} names value {value}, which is not a tensor")]
    NotATensor { what: &'static str, value: u32 },
    /// A JumpFalse condition that is neither a Bool nor a bool tensor.
    #[error("invalid program: jump condition (value {value}) is a {kind}")]
    Condition { value: usize, kind: &'static str },
    /// An external tensor (stored in a `.ptd` file) that cannot be read.
    #[error("external tensor {key:?}: {problem}")]
    External {
        key: String,
        problem: ExternalProblem,
    },
    /// Partitioners were given to a pteron-core built without its `plan` feature.
    #[error("partitioners need pteron-core's `plan` feature")]
    PlanningDisabled,
}

/// What is wrong with an external tensor ([`Error::External`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalProblem {
    #[error("it lives in an external .ptd file, and none was given")]
    NoDataFile,
    #[error("its layout in the .ptd does not match the program")]
    LayoutMismatch,
    #[error("the .ptd holds {has} bytes, the program needs {needs}")]
    TooShort { has: usize, needs: usize },
}

impl Error {
    /// An [`Error::BadNumber`].
    pub(crate) fn bad(what: &'static str, found: impl Into<i64>) -> Self {
        Error::BadNumber {
            what,
            found: found.into(),
        }
    }

    /// An [`Error::InvalidProgram`] with `msg`.
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidProgram(msg.into())
    }
}

/// Index `i` read from the program, checked against a table of `len` entries.
pub(crate) fn index(what: &'static str, i: i64, len: usize) -> Result<u32> {
    if i < 0 || i as u64 >= len as u64 {
        return Err(Error::IndexOutOfRange {
            what,
            index: i,
            len,
        });
    }
    Ok(i as u32)
}

pub type Result<T, E = Error> = core::result::Result<T, E>;
