//! Methods: metadata, inputs, execution, outputs.

use std::ffi::{c_char, c_void};
use std::sync::Arc;

use pteron::{Method, MethodMeta, MethodOptions, Output, RunMethod, ScalarType, Value, ValueMeta};

use crate::error::{fail, from_pteron, guard};
use crate::program::LoadedProgram;
use crate::{c_str, free, handle, handle_mut, put, PteronProgram, PteronStatus};

/// Most dimensions a tensor may have.
pub const PTERON_MAX_RANK: usize = 16;

/// A tensor's dtype (ExecuTorch's ScalarType code: 0 uint8, 1 int8, 2 int16, 3 int32, 4 int64,
/// 5 float16, 6 float32, 7 float64, 11 bool, 15 bfloat16), its sizes and its bytes (row-major).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PteronTensorView {
    pub dtype: i32,
    pub rank: u32,
    pub sizes: [i64; PTERON_MAX_RANK],
    /// The elements (row-major); NULL in `pteron_method_input`'s description.
    pub data: *const c_void,
    pub nbytes: usize,
}

/// A loaded method and the program bytes it reads.
pub struct PteronMethod {
    // Declared before `_program`: the method borrows the program's bytes and drops first.
    method: Method<'static>,
    /// Per output: bytes this handle holds for `pteron_method_output` (scalars, and tensors the
    /// method computes in another dim order, converted to row-major).
    held: Vec<Vec<u8>>,
    /// The declared inputs and outputs (for `pteron_method_input`, `pteron_method_output_info`).
    meta: MethodMeta,
    _program: Arc<LoadedProgram>,
}

// The layout web/pteron.mjs reads and writes on wasm32.
#[cfg(target_pointer_width = "32")]
const _: () = {
    assert!(core::mem::offset_of!(PteronTensorView, sizes) == 8);
    assert!(core::mem::offset_of!(PteronTensorView, data) == 8 + 8 * PTERON_MAX_RANK);
    assert!(core::mem::offset_of!(PteronTensorView, nbytes) == 12 + 8 * PTERON_MAX_RANK);
};

fn view(dtype: ScalarType, sizes: &[usize], data: &[u8]) -> Result<PteronTensorView, PteronStatus> {
    if sizes.len() > PTERON_MAX_RANK {
        return Err(fail(
            PteronStatus::InvalidArgument,
            format!("rank {} > 16", sizes.len()),
        ));
    }
    let mut v = PteronTensorView {
        dtype: dtype as i32,
        rank: sizes.len() as u32,
        sizes: [0; PTERON_MAX_RANK],
        data: data.as_ptr().cast(),
        nbytes: data.len(),
    };
    for (d, &s) in v.sizes.iter_mut().zip(sizes) {
        *d = s as i64;
    }
    Ok(v)
}

/// Loads method `name` of `program`. `threads`: 0 for the runtime's threads, 1 for the calling
/// thread only, n for a pool of n of the method's own.
///
/// # Safety
/// `program` is a live program, `name` a NUL-terminated string, `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_load(
    program: *const PteronProgram,
    name: *const c_char,
    threads: u32,
    out: *mut *mut PteronMethod,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let (program, name) = unsafe { (handle(program, "program")?, c_str(name, "name")?) };
        let loaded = Arc::clone(&program.inner);
        let options = MethodOptions::new().threads(threads as usize);
        // Safety: the method borrows the program's bytes, which `loaded` keeps alive on the
        // heap; the handle stores `loaded` and drops the method first (field order).
        let prog: &'static pteron::Program<'static> =
            unsafe { &*(loaded.program() as *const pteron::Program<'static>) };
        let method = prog.load_method_with(name, options).map_err(from_pteron)?;
        let meta = prog.method_meta(name).map_err(from_pteron)?;
        let held = vec![Vec::new(); method.num_outputs()];
        let boxed = Box::into_raw(Box::new(PteronMethod {
            method,
            held,
            meta,
            _program: loaded,
        }));
        // Safety: the caller's contract.
        unsafe { put(out, boxed, "out") }.inspect_err(|_| unsafe { free(boxed) })
    })
}

/// Frees a method.
///
/// # Safety
/// `method` is NULL or a live method.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_free(method: *mut PteronMethod) {
    // Safety: the caller's contract.
    unsafe { free(method) }
}

/// How many inputs the method takes.
///
/// # Safety
/// `method` is a live method; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_num_inputs(
    method: *const PteronMethod,
    out: *mut usize,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle(method, "method")? };
        // Safety: the caller's contract.
        unsafe { put(out, m.method.num_inputs(), "out") }
    })
}

/// How many outputs the method returns.
///
/// # Safety
/// `method` is a live method; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_num_outputs(
    method: *const PteronMethod,
    out: *mut usize,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle(method, "method")? };
        // Safety: the caller's contract.
        unsafe { put(out, m.method.num_outputs(), "out") }
    })
}

/// Describes tensor input `index` as the program declares it (dtype, sizes; `data` NULL,
/// `nbytes` the declared size). Fails for an input that is not a tensor.
///
/// # Safety
/// `method` is a live method; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_input(
    method: *const PteronMethod,
    index: usize,
    out: *mut PteronTensorView,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle(method, "method")? };
        let v = declared(&m.meta.inputs, index, "input")?;
        // Safety: the caller's contract.
        unsafe { put(out, v, "out") }
    })
}

/// The view of a declared tensor (`data` NULL, `nbytes` its declared size).
fn declared(
    list: &[ValueMeta],
    index: usize,
    what: &str,
) -> Result<PteronTensorView, PteronStatus> {
    let t = match list.get(index) {
        Some(ValueMeta::Tensor(t)) => t,
        Some(other) => {
            return Err(fail(
                PteronStatus::InvalidArgument,
                format!("{what} {index} is not a tensor: {other:?}"),
            ))
        }
        None => {
            return Err(fail(
                PteronStatus::InvalidArgument,
                format!("{what} index {index} of {}", list.len()),
            ))
        }
    };
    let mut v = view(t.dtype, &t.sizes, &[])?;
    v.data = std::ptr::null();
    v.nbytes = t.nbytes().unwrap_or(usize::MAX);
    Ok(v)
}

/// Describes tensor output `index` as the program declares it (dtype, sizes: upper bounds for
/// a dynamic shape; `data` NULL, `nbytes` the declared size), before any execution. Fails for
/// an output that is not a tensor.
///
/// # Safety
/// `method` is a live method; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_output_info(
    method: *const PteronMethod,
    index: usize,
    out: *mut PteronTensorView,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle(method, "method")? };
        let v = declared(&m.meta.outputs, index, "output")?;
        // Safety: the caller's contract.
        unsafe { put(out, v, "out") }
    })
}

/// Sets tensor input `index` from `tensor` (row-major; the bytes are copied).
///
/// # Safety
/// `method` is a live method used by this thread only; `tensor` points to a view whose `data`
/// is valid for `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_set_input(
    method: *mut PteronMethod,
    index: usize,
    tensor: *const PteronTensorView,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let (m, t) = unsafe { (handle_mut(method, "method")?, handle(tensor, "tensor")?) };
        let dtype = i8::try_from(t.dtype)
            .ok()
            .and_then(ScalarType::from_i8)
            .ok_or_else(|| {
                fail(
                    PteronStatus::InvalidArgument,
                    format!("unknown dtype {}", t.dtype),
                )
            })?;
        let rank = t.rank as usize;
        if rank > PTERON_MAX_RANK {
            return Err(fail(
                PteronStatus::InvalidArgument,
                format!("rank {rank} > 16"),
            ));
        }
        let sizes = t.sizes[..rank]
            .iter()
            .map(|&s| usize::try_from(s))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| fail(PteronStatus::InvalidArgument, "negative size"))?;
        if t.data.is_null() && t.nbytes != 0 {
            return Err(fail(PteronStatus::InvalidArgument, "tensor data is NULL"));
        }
        let bytes: &[u8] = if t.nbytes == 0 {
            &[]
        } else {
            // Safety: non-null and valid for `nbytes` bytes by the caller's contract.
            unsafe { std::slice::from_raw_parts(t.data.cast::<u8>(), t.nbytes) }
        };
        m.method
            .set_input_bytes(index, dtype, &sizes, bytes)
            .map_err(from_pteron)
    })
}

/// Runs the method on its current inputs.
///
/// # Safety
/// `method` is a live method used by this thread only.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_execute(method: *mut PteronMethod) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle_mut(method, "method")? };
        m.method.execute().map_err(|e| from_pteron(e.into()))
    })
}

/// Output `index` of the last execution, row-major. Scalar outputs come as 0-d tensors (int64,
/// float64 or bool). The view is valid until the method next changes (set_input, execute,
/// free).
///
/// # Safety
/// `method` is a live method used by this thread only; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_method_output(
    method: *mut PteronMethod,
    index: usize,
    out: *mut PteronTensorView,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let m = unsafe { handle_mut(method, "method")? };
        let v = output_view(m, index)?;
        // Safety: the caller's contract.
        unsafe { put(out, v, "out") }
    })
}

fn output_view(m: &mut PteronMethod, index: usize) -> Result<PteronTensorView, PteronStatus> {
    if let Output::Tensor(t) = m.method.output(index).map_err(|e| from_pteron(e.into()))? {
        if t.info.is_contiguous() {
            return view(t.info.dtype(), t.info.sizes(), t.bytes);
        }
    }
    // Scalars, and tensors computed in another dim order: a row-major copy the handle holds.
    let (dtype, sizes, bytes) = match m.method.output_value(index).map_err(from_pteron)? {
        Value::Tensor(t) => (t.dtype, t.sizes, t.data),
        Value::Int(v) => (ScalarType::Long, Vec::new(), v.to_le_bytes().to_vec()),
        Value::Double(v) => (ScalarType::Double, Vec::new(), v.to_le_bytes().to_vec()),
        Value::Bool(v) => (ScalarType::Bool, Vec::new(), vec![v as u8]),
        Value::None => {
            return Err(fail(
                PteronStatus::InvalidArgument,
                format!("output {index} is None"),
            ))
        }
    };
    let held = &mut m.held[index];
    *held = bytes;
    view(dtype, &sizes, held)
}
