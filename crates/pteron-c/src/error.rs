//! Status codes, the per-thread last error, and the guard every entry point runs in.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use pteron::MethodError;

/// What a call reports. `PTERON_STATUS_OK` is 0; every other value is a failure whose text
/// `pteron_last_error()` returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PteronStatus {
    Ok = 0,
    /// A NULL pointer, a string that is not UTF-8, an index out of range, a bad option.
    InvalidArgument = 1,
    /// A file could not be read.
    Io = 2,
    /// The bytes are not a valid program (or data file).
    InvalidProgram = 3,
    /// No method of that name.
    MethodNotFound = 4,
    /// The program uses operators with no kernel, or a delegate with no backend.
    Unsupported = 5,
    /// A kernel or backend refused the program's arguments at load.
    Rejected = 6,
    /// An input of the wrong dtype, shape or size.
    Input = 7,
    /// A kernel failed while executing.
    Execution = 8,
    /// The program asks for more than the runtime's limits allow.
    ResourceLimit = 9,
    /// A tokenizer, template or generation error.
    Generation = 10,
    /// A panic inside the library (a bug): caught, not unwound into C.
    Panic = 11,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Records `message` as this thread's last error and returns `status`.
pub(crate) fn fail(status: PteronStatus, message: impl Into<String>) -> PteronStatus {
    // An interior NUL would end the C string early: show it instead.
    let text = message.into().replace('\0', "\\0");
    let text = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
    status
}

/// The text of the last failure on the calling thread ("" if none yet). Valid until the next
/// pteron call on this thread.
#[no_mangle]
pub extern "C" fn pteron_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs an entry point's body: its error becomes the status, a panic becomes
/// `PteronStatus::Panic` with the panic's message.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), PteronStatus>) -> PteronStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => PteronStatus::Ok,
        Ok(Err(status)) => status,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            fail(
                PteronStatus::Panic,
                format!("internal error (panic): {msg}"),
            )
        }
    }
}

/// The status for a library error, with its message recorded.
pub(crate) fn from_pteron(e: pteron::Error) -> PteronStatus {
    let status = match &e {
        pteron::Error::Io { .. } => PteronStatus::Io,
        pteron::Error::Format(_) => PteronStatus::InvalidProgram,
        pteron::Error::Runtime(m) => method_status(m),
        pteron::Error::Npy(_) | pteron::Error::Invalid(_) => PteronStatus::InvalidArgument,
    };
    fail(status, e.to_string())
}

fn method_status(e: &MethodError) -> PteronStatus {
    match e {
        MethodError::Format(_) | MethodError::InvalidProgram(_) => PteronStatus::InvalidProgram,
        MethodError::IndexOutOfRange { .. } | MethodError::JumpOutOfRange { .. } => {
            PteronStatus::InvalidProgram
        }
        MethodError::MethodNotFound(_) => PteronStatus::MethodNotFound,
        MethodError::OperatorMissing { .. } | MethodError::BackendMissing { .. } => {
            PteronStatus::Unsupported
        }
        MethodError::KernelRejected { .. }
        | MethodError::PrepareFailed { .. }
        | MethodError::Delegate { .. } => PteronStatus::Rejected,
        MethodError::Input { .. }
        | MethodError::InputShape { .. }
        | MethodError::InputIndex { .. }
        | MethodError::InputDType { .. }
        | MethodError::InputBytes { .. } => PteronStatus::Input,
        MethodError::OutputIndex { .. } => PteronStatus::InvalidArgument,
        MethodError::ResourceLimit { .. } => PteronStatus::ResourceLimit,
        _ => PteronStatus::Execution,
    }
}

/// The status for an LLM runner error.
#[cfg(feature = "llm")]
pub(crate) fn from_llm(e: pteron_llm::Error) -> PteronStatus {
    match e {
        pteron_llm::Error::Pteron(e) => from_pteron(e),
        pteron_llm::Error::Io { .. } => fail(PteronStatus::Io, e.to_string()),
        e => fail(PteronStatus::Generation, e.to_string()),
    }
}
