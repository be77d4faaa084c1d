//! pteron's C API: a runtime, programs, methods and the LLM generator behind opaque handles,
//! every call returning a [`PteronStatus`] with the reason in [`pteron_last_error`].
//!
//! The header `include/pteron.h` is generated from this crate by cbindgen; its preamble states
//! the ownership rules. Handles that borrow (a method borrows its program's bytes) hold an
//! `Arc` of what they borrow, so C code may free objects in any order. Every entry point runs
//! inside [`guard`]: null pointers and bad UTF-8 are errors, and a panic is caught and reported
//! as [`PteronStatus::Panic`] instead of unwinding into C.

#[cfg(feature = "audio")]
mod audio;
mod buffer;
mod error;
#[cfg(feature = "llm")]
mod generate;
mod method;
mod program;

#[cfg(feature = "audio")]
pub use audio::{pteron_vad_segments, pteron_wav_to_16k};
pub use buffer::{pteron_buffer_free, pteron_buffer_new};
pub use error::{pteron_last_error, PteronStatus};
#[cfg(feature = "llm")]
pub use generate::{
    pteron_generate_options_default, pteron_generator_free, pteron_generator_generate,
    pteron_generator_new, PteronGenerateOptions, PteronGenerateStats, PteronGenerator,
    PteronTextCallback,
};
pub use method::{
    pteron_method_execute, pteron_method_free, pteron_method_input, pteron_method_load,
    pteron_method_num_inputs, pteron_method_num_outputs, pteron_method_output,
    pteron_method_output_info, pteron_method_set_input, PteronMethod, PteronTensorView,
    PTERON_MAX_RANK,
};
pub use program::{
    pteron_program_free, pteron_program_load_buffer, pteron_program_load_buffer_borrowed,
    pteron_program_load_file, pteron_program_method_count, pteron_program_method_name,
    pteron_runtime_free, pteron_runtime_new, pteron_version, PteronProgram, PteronRuntime,
};

use std::ffi::{c_char, CStr};

use error::{fail, guard};

/// Reads a NUL-terminated UTF-8 string argument.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid for `'a`.
unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str, PteronStatus> {
    if p.is_null() {
        return Err(fail(
            PteronStatus::InvalidArgument,
            format!("{what} is NULL"),
        ));
    }
    // Safety: non-null, and the caller promises a NUL-terminated string (see the header).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| {
        fail(
            PteronStatus::InvalidArgument,
            format!("{what} is not UTF-8"),
        )
    })
}

/// Stores `value` through an out-pointer.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T, what: &str) -> Result<(), PteronStatus> {
    if out.is_null() {
        return Err(fail(
            PteronStatus::InvalidArgument,
            format!("{what} is NULL"),
        ));
    }
    // Safety: non-null and, by the caller's contract, valid for writes.
    unsafe { out.write(value) };
    Ok(())
}

/// A shared reference to the object behind a handle.
///
/// # Safety
/// `p` is null or a handle this library returned and that has not been freed.
unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, PteronStatus> {
    // Safety: the caller's contract above.
    unsafe { p.as_ref() }
        .ok_or_else(|| fail(PteronStatus::InvalidArgument, format!("{what} is NULL")))
}

/// An exclusive reference to the object behind a handle.
///
/// # Safety
/// `p` is null or a live handle this library returned, used by one thread at a time.
unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, PteronStatus> {
    // Safety: the caller's contract above.
    unsafe { p.as_mut() }
        .ok_or_else(|| fail(PteronStatus::InvalidArgument, format!("{what} is NULL")))
}

/// Frees a handle made by `Box::into_raw` (NULL is a no-op).
///
/// # Safety
/// `p` is null or a handle of type `T` this library returned and that was not freed yet.
unsafe fn free<T>(p: *mut T) {
    let _ = guard(|| {
        if !p.is_null() {
            // Safety: the caller's contract above: the box is ours and still alive.
            drop(unsafe { Box::from_raw(p) });
        }
        Ok(())
    });
}
