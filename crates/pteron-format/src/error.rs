use alloc::string::String;

/// Why a file was rejected. Every variant says what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("file is too short ({len} bytes) to be a {kind} file")]
    TooShort { kind: &'static str, len: usize },
    #[error("not a .pte program: identifier is {found:?}, expected \"ET12\"")]
    NotAProgram { found: String },
    #[error("unsupported .pte version: identifier {found:?} (pteron reads \"ET12\")")]
    IncompatibleVersion { found: String },
    #[error("not a .ptd data file: identifier is {found:?}, expected \"FT01\"")]
    NotADataFile { found: String },
    #[error(
        "file is truncated: its header says the program takes {expected} bytes, the file has {len}"
    )]
    Truncated { expected: u64, len: usize },
    /// A container header field with a value it may not have (`value`: the field's value).
    #[error("bad {header} header: {reason} ({value})")]
    BadHeader {
        header: &'static str,
        reason: &'static str,
        value: u64,
    },
    /// A `.pte` whose segments start inside its flatbuffer.
    #[error("bad eh00 header: segments start at {segments} inside the program ({program} bytes)")]
    SegmentsInProgram { segments: usize, program: usize },
    /// A number in the file outside what the format allows: `what` says which.
    #[error("{what} {found}")]
    BadNumber { what: &'static str, found: i64 },
    #[error("{what} at offset {offset} with size {size} lies outside its {limit}-byte region")]
    OutOfBounds {
        what: &'static str,
        offset: u64,
        size: u64,
        limit: u64,
    },
    #[error("{what} index {index} is out of range (there are {len})")]
    IndexOutOfRange {
        what: &'static str,
        index: u64,
        len: usize,
    },
    #[error("invalid flatbuffer: {0}")]
    Flatbuffer(FlatbufferError),
    #[error("flatbuffer root table offset {offset} points into the file identifier")]
    RootInIdentifier { offset: u32 },
    #[error("flatbuffer of {size} bytes expands to more than {limit} bytes when shared tables are counted at each use")]
    Expands { size: usize, limit: usize },
    #[error("required field {0} is missing")]
    Missing(&'static str),
    #[error("named data key {0:?} not found")]
    KeyNotFound(String),
    #[error("{0}")]
    Invalid(String),
}

/// `offset + size <= limit`, without overflow; returns the range as `usize`.
pub(crate) fn checked_range(
    what: &'static str,
    offset: u64,
    size: u64,
    limit: usize,
) -> Result<core::ops::Range<usize>, FormatError> {
    let end = offset.checked_add(size);
    match end {
        Some(end) if end <= limit as u64 => Ok(offset as usize..end as usize),
        _ => Err(FormatError::OutOfBounds {
            what,
            offset,
            size,
            limit: limit as u64,
        }),
    }
}

/// Why a flatbuffer was refused, and at which byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlatbufferError {
    pub fault: Fault,
    pub position: usize,
}

/// What was wrong with a flatbuffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// A read that ends past the buffer.
    OutOfBounds,
    /// A scalar not aligned to its size, or a vtable of odd length.
    Unaligned,
    /// A table's offset to its vtable leads outside the buffer.
    VtableOutOfBounds,
    /// A string that is not UTF-8.
    NotUtf8,
    /// A string not followed by a NUL byte.
    MissingNullTerminator,
    /// A required field is absent.
    MissingRequiredField,
    /// A union with its type and no value, or the reverse.
    InconsistentUnion,
    /// More tables than the limit.
    TooManyTables,
    /// Tables nested deeper than the limit.
    TooDeep,
    /// More bytes visited than the limit (shared tables count at each use).
    TooLarge,
}

impl core::fmt::Display for FlatbufferError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let what = match self.fault {
            Fault::OutOfBounds => "read past the end of the buffer",
            Fault::Unaligned => "misaligned value",
            Fault::VtableOutOfBounds => "vtable offset leads outside the buffer",
            Fault::NotUtf8 => "string is not UTF-8",
            Fault::MissingNullTerminator => "string without its NUL terminator",
            Fault::MissingRequiredField => "required field missing",
            Fault::InconsistentUnion => "union type without value, or value without type",
            Fault::TooManyTables => "too many tables",
            Fault::TooDeep => "tables nested too deep",
            Fault::TooLarge => "too many bytes visited",
        };
        write!(f, "{what} at byte {}", self.position)
    }
}
