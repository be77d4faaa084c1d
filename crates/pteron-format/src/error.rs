use alloc::string::String;

use crate::verify::FlatbufferError;

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
