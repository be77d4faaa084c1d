//! Runtimes and programs.

use std::ffi::{c_char, CString};
use std::sync::Arc;

use pteron::{Program, ProgramFile, Runtime};

use crate::error::{fail, from_pteron, guard};
use crate::{c_str, free, handle, put, PteronStatus};

/// Kernels, backends, threads and limits (a `pteron::Runtime`).
pub struct PteronRuntime {
    runtime: Runtime,
}

/// A verified program and the bytes it was read from.
pub struct PteronProgram {
    pub(crate) inner: Arc<LoadedProgram>,
    names: Vec<CString>,
}

/// A program that owns its bytes. Methods and generators hold an `Arc` of it, since they
/// borrow those bytes.
pub(crate) struct LoadedProgram {
    // Declared before `file`: fields drop in order, and the program borrows the file.
    program: Program<'static>,
    _file: Box<ProgramFile>,
}

impl LoadedProgram {
    fn new(runtime: &Runtime, file: ProgramFile) -> pteron::Result<Self> {
        let file = Box::new(file);
        // Safety: the program borrows the file's bytes, which live on the heap behind `file`;
        // the box is never moved out of or dropped before `program` (field order above), so the
        // extended borrow never outlives them.
        let bytes: &'static ProgramFile = unsafe { &*(&*file as *const ProgramFile) };
        let program = runtime.load_program(bytes)?;
        Ok(LoadedProgram {
            program,
            _file: file,
        })
    }

    /// The program, for as long as this value (and so its bytes) lives.
    pub(crate) fn program(&self) -> &Program<'static> {
        &self.program
    }
}

/// The library's version ("0.1.0"); a static string.
#[no_mangle]
pub extern "C" fn pteron_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// A runtime with every kernel and backend pteron ships. `threads`: 0 for one per physical
/// core (a process-wide pool), 1 to run on the calling thread only, n for a pool of n.
///
/// # Safety
/// `out` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn pteron_runtime_new(
    threads: u32,
    out: *mut *mut PteronRuntime,
) -> PteronStatus {
    guard(|| {
        let runtime = Runtime::builder()
            .threads(threads as usize)
            .build()
            .map_err(from_pteron)?;
        let boxed = Box::into_raw(Box::new(PteronRuntime { runtime }));
        // Safety: the caller's contract.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| {
            // Safety: `boxed` was made just above and not handed out.
            drop(unsafe { Box::from_raw(boxed) })
        })
    })
}

/// Frees a runtime (programs loaded from it keep what they need).
///
/// # Safety
/// `runtime` is NULL or a live runtime from `pteron_runtime_new`.
#[no_mangle]
pub unsafe extern "C" fn pteron_runtime_free(runtime: *mut PteronRuntime) {
    // Safety: the caller's contract.
    unsafe { free(runtime) }
}

fn new_program(
    runtime: &PteronRuntime,
    file: ProgramFile,
) -> Result<*mut PteronProgram, PteronStatus> {
    let inner = LoadedProgram::new(&runtime.runtime, file).map_err(from_pteron)?;
    let names = inner
        .program()
        .method_names()
        .into_iter()
        .map(|n| CString::new(n).unwrap_or_default())
        .collect();
    Ok(Box::into_raw(Box::new(PteronProgram {
        inner: Arc::new(inner),
        names,
    })))
}

/// Memory-maps and verifies the `.pte` file at `path`.
///
/// # Safety
/// `runtime` is a live runtime, `path` a NUL-terminated string, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_load_file(
    runtime: *const PteronRuntime,
    path: *const c_char,
    out: *mut *mut PteronProgram,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let (runtime, path) = unsafe { (handle(runtime, "runtime")?, c_str(path, "path")?) };
        let file = ProgramFile::open(path).map_err(from_pteron)?;
        let program = new_program(runtime, file)?;
        // Safety: the caller's contract.
        unsafe { put(out, program, "out") }.inspect_err(|_| unsafe { free(program) })
    })
}

/// Verifies a program held in memory. The bytes are copied (into aligned memory), so the
/// caller's buffer may be freed as soon as this returns.
///
/// # Safety
/// `runtime` is a live runtime, `data` valid for `len` bytes, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_load_buffer(
    runtime: *const PteronRuntime,
    data: *const u8,
    len: usize,
    out: *mut *mut PteronProgram,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let runtime = unsafe { handle(runtime, "runtime")? };
        if data.is_null() && len != 0 {
            return Err(fail(PteronStatus::InvalidArgument, "data is NULL"));
        }
        let bytes: &[u8] = if len == 0 {
            &[]
        } else {
            // Safety: non-null and valid for `len` bytes by the caller's contract.
            unsafe { std::slice::from_raw_parts(data, len) }
        };
        let program = new_program(runtime, ProgramFile::from_bytes(bytes))?;
        // Safety: the caller's contract.
        unsafe { put(out, program, "out") }.inspect_err(|_| unsafe { free(program) })
    })
}

/// The caller's bytes, used in place.
struct CallerBytes {
    data: *const u8,
    len: usize,
}

// Safety: the bytes are only read, and `pteron_program_load_buffer_borrowed`'s caller keeps
// them alive and unchanged until every object made from the program is freed.
unsafe impl Send for CallerBytes {}
// Safety: as above: shared reads of memory nobody writes.
unsafe impl Sync for CallerBytes {}

impl AsRef<[u8]> for CallerBytes {
    fn as_ref(&self) -> &[u8] {
        // Safety: non-null and valid for `len` bytes for this value's life (the caller's
        // contract, checked for null at construction).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// Verifies a program held in memory without copying it, when `data` is 64-byte aligned
/// (e.g. from `aligned_alloc(64, ...)` or a file mapping); a misaligned buffer is copied, as
/// by `pteron_program_load_buffer`. `*borrowed` (may be NULL) tells which happened: 1 when the
/// bytes are used in place.
///
/// # Safety
/// `runtime` is a live runtime, `data` valid for `len` bytes, `out` valid for a write,
/// `borrowed` NULL or valid for a write. When the bytes are used in place they must stay
/// alive and unchanged until the program and every method and generator loaded from it are
/// freed.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_load_buffer_borrowed(
    runtime: *const PteronRuntime,
    data: *const u8,
    len: usize,
    out: *mut *mut PteronProgram,
    borrowed: *mut i32,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let runtime = unsafe { handle(runtime, "runtime")? };
        if data.is_null() {
            return Err(fail(PteronStatus::InvalidArgument, "data is NULL"));
        }
        let file = ProgramFile::from_owner(Box::new(CallerBytes { data, len }));
        let in_place = file.is_borrowed();
        let program = new_program(runtime, file)?;
        if !borrowed.is_null() {
            // Safety: non-null, valid for a write by the caller's contract.
            unsafe { *borrowed = i32::from(in_place) };
        }
        // Safety: the caller's contract.
        unsafe { put(out, program, "out") }.inspect_err(|_| unsafe { free(program) })
    })
}

/// Frees a program (methods loaded from it stay usable).
///
/// # Safety
/// `program` is NULL or a live program.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_free(program: *mut PteronProgram) {
    // Safety: the caller's contract.
    unsafe { free(program) }
}

/// How many methods the program has.
///
/// # Safety
/// `program` is a live program; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_method_count(
    program: *const PteronProgram,
    out: *mut usize,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let program = unsafe { handle(program, "program")? };
        // Safety: the caller's contract.
        unsafe { put(out, program.names.len(), "out") }
    })
}

/// The name of method `index` (a string owned by the program).
///
/// # Safety
/// `program` is a live program; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_program_method_name(
    program: *const PteronProgram,
    index: usize,
    out: *mut *const c_char,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let program = unsafe { handle(program, "program")? };
        let name = program.names.get(index).ok_or_else(|| {
            fail(
                PteronStatus::InvalidArgument,
                format!("method index {index} of {}", program.names.len()),
            )
        })?;
        // Safety: the caller's contract.
        unsafe { put(out, name.as_ptr(), "out") }
    })
}
