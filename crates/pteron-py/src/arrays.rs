//! numpy arrays in and out: the bytes of an input array in the dtype a method declares, and
//! output bytes as an array that owns them.

use half::{bf16, f16};
use numpy::{PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pteron::ScalarType;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    NUMPY
        .get_or_try_init(py, || py.import("numpy").map(Bound::unbind))
        .map(|m| m.bind(py))
}

/// The numpy dtype name arrays of `t` have (`None`: no numpy equivalent). bfloat16 tensors
/// come and go as float32 arrays (numpy has no bfloat16; the widening is exact).
pub fn numpy_name(t: ScalarType) -> Option<&'static str> {
    use ScalarType as S;
    Some(match t {
        S::Byte => "uint8",
        S::Char => "int8",
        S::Short => "int16",
        S::Int => "int32",
        S::Long => "int64",
        S::Half => "float16",
        S::Float | S::BFloat16 => "float32",
        S::Double => "float64",
        S::Bool => "bool",
        S::UInt16 => "uint16",
        S::UInt32 => "uint32",
        S::UInt64 => "uint64",
        _ => return None,
    })
}

/// The pteron dtype of a numpy dtype (native byte order; `None` for others).
fn scalar_type_of(kind: u8, itemsize: usize, name: &str) -> Option<ScalarType> {
    use ScalarType as S;
    Some(match (kind, itemsize) {
        (b'b', 1) => S::Bool,
        (b'i', 1) => S::Char,
        (b'i', 2) => S::Short,
        (b'i', 4) => S::Int,
        (b'i', 8) => S::Long,
        (b'u', 1) => S::Byte,
        (b'u', 2) => S::UInt16,
        (b'u', 4) => S::UInt32,
        (b'u', 8) => S::UInt64,
        (b'f', 2) => S::Half,
        (b'f', 4) => S::Float,
        (b'f', 8) => S::Double,
        // ml_dtypes' bfloat16 (what JAX and others use in numpy).
        (b'V', 2) if name == "bfloat16" => S::BFloat16,
        _ => return None,
    })
}

/// An input array's elements as row-major bytes in the dtype `expected`, and its shape.
pub struct InputBytes {
    pub dtype: ScalarType,
    pub sizes: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// Reads `obj` (an ndarray, or anything `numpy.asarray` takes: a torch tensor, a list, a
/// number) as an input declared with dtype `expected`. Arrays keep their dtype (a mismatch is
/// the method's error, with both dtypes); lists and numbers are converted to `expected`;
/// float32 arrays are rounded to bfloat16 for bfloat16 inputs.
pub fn input_bytes(obj: &Bound<'_, PyAny>, expected: ScalarType) -> PyResult<InputBytes> {
    let py = obj.py();
    // The common case, without calling into Python: a C-contiguous native-order array.
    if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        if arr.is_c_contiguous() && arr.dtype().is_native_byteorder() != Some(false) {
            let d = arr.dtype();
            if let Some(given) = scalar_type_of(d.kind(), d.itemsize(), "") {
                if given == expected || expected != ScalarType::BFloat16 {
                    return Ok(InputBytes {
                        dtype: given,
                        sizes: arr.shape().to_vec(),
                        bytes: array_bytes(arr, d.itemsize()),
                    });
                }
            }
        }
    }
    let np = numpy(py)?;
    let typed = obj.is_instance_of::<PyUntypedArray>() || obj.hasattr("dtype")?;
    let arr = if typed {
        np.call_method1("asarray", (obj,))?
    } else {
        let name = numpy_name(expected).unwrap_or("float32");
        np.call_method1("asarray", (obj, name))?
    };
    let arr = arr.cast_into::<PyUntypedArray>()?;
    let descr = arr.dtype();
    let name: String = descr.getattr("name")?.extract()?;
    let native = descr.getattr("isnative")?.extract::<bool>()?;
    let arr = if native {
        arr
    } else {
        // Big-endian arrays: to native byte order first.
        let nd = descr.call_method1("newbyteorder", ("=",))?;
        arr.call_method1("astype", (nd,))?
            .cast_into::<PyUntypedArray>()?
    };
    let kind = arr.dtype().kind();
    let given = scalar_type_of(kind, arr.dtype().itemsize(), &name).ok_or_else(|| {
        crate::errors::input(py, None, format!("numpy dtype {name} has no pteron dtype"))
    })?;
    let sizes = arr.shape().to_vec();
    if expected == ScalarType::BFloat16 && given == ScalarType::Float {
        let f = contiguous_bytes(np, &arr)?;
        let v: Vec<f32> = bytemuck::pod_collect_to_vec(&f);
        let b: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        return Ok(InputBytes {
            dtype: ScalarType::BFloat16,
            sizes,
            bytes: bytemuck::cast_slice(&b).to_vec(),
        });
    }
    Ok(InputBytes {
        dtype: given,
        sizes,
        bytes: contiguous_bytes(np, &arr)?,
    })
}

/// The bytes of a C-contiguous array whose elements are `itemsize` bytes (one copy).
fn array_bytes(arr: &Bound<'_, PyUntypedArray>, itemsize: usize) -> Vec<u8> {
    let n = arr.len().saturating_mul(itemsize);
    if n == 0 {
        return Vec::new();
    }
    // Safety: the array is C-contiguous (checked by the caller), so its `len()` elements of
    // `itemsize` bytes lie back to back from its data pointer; the GIL is held and `arr`
    // referenced for the whole copy, so the buffer can be neither freed nor resized meanwhile.
    unsafe {
        let data = (*arr.as_array_ptr()).data as *const u8;
        std::slice::from_raw_parts(data, n).to_vec()
    }
}

/// The elements of `arr`, row-major, as bytes (one copy).
fn contiguous_bytes(
    np: &Bound<'_, PyModule>,
    arr: &Bound<'_, PyUntypedArray>,
) -> PyResult<Vec<u8>> {
    let flat = np
        .call_method1("ascontiguousarray", (arr,))?
        .call_method1("reshape", (-1,))?
        .call_method1("view", ("uint8",))?;
    let flat = flat.cast_into::<PyArray1<u8>>()?;
    let ro = flat.readonly();
    Ok(ro.as_slice()?.to_vec())
}

/// An output's elements, typed, so that numpy can take the vector without a copy. Made
/// without the GIL.
pub enum Elements {
    U8(Vec<u8>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    /// float32, and bfloat16 widened to float32.
    F32(Vec<f32>),
    F64(Vec<f64>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
}

impl Elements {
    /// The elements in `bytes` (row-major, dtype `dtype`); `Err` names a dtype numpy lacks.
    pub fn from_bytes(dtype: ScalarType, bytes: &[u8]) -> Result<Self, String> {
        use bytemuck::pod_collect_to_vec as v;
        use ScalarType as S;
        Ok(match dtype {
            S::Byte => Elements::U8(bytes.to_vec()),
            S::Char => Elements::I8(v(bytes)),
            S::Short => Elements::I16(v(bytes)),
            S::Int => Elements::I32(v(bytes)),
            S::Long => Elements::I64(v(bytes)),
            S::Half => Elements::F16(v(bytes)),
            S::Float => Elements::F32(v(bytes)),
            S::Double => Elements::F64(v(bytes)),
            S::UInt16 => Elements::U16(v(bytes)),
            S::UInt32 => Elements::U32(v(bytes)),
            S::UInt64 => Elements::U64(v(bytes)),
            S::Bool => Elements::Bool(bytes.iter().map(|&b| b != 0).collect()),
            S::BFloat16 => {
                let b: Vec<bf16> = v(bytes);
                Elements::F32(b.iter().map(|x| x.to_f32()).collect())
            }
            other => {
                return Err(format!(
                    "output dtype {} has no numpy equivalent",
                    other.name()
                ))
            }
        })
    }

    /// A numpy array of `sizes` that takes over the elements.
    pub fn into_numpy<'py>(self, py: Python<'py>, sizes: &[usize]) -> PyResult<Bound<'py, PyAny>> {
        fn a<'py, T: numpy::Element>(
            py: Python<'py>,
            v: Vec<T>,
            sizes: &[usize],
        ) -> PyResult<Bound<'py, PyAny>> {
            Ok(PyArray1::from_vec(py, v).reshape(sizes)?.into_any())
        }
        match self {
            Elements::U8(v) => a(py, v, sizes),
            Elements::I8(v) => a(py, v, sizes),
            Elements::I16(v) => a(py, v, sizes),
            Elements::I32(v) => a(py, v, sizes),
            Elements::I64(v) => a(py, v, sizes),
            Elements::F16(v) => a(py, v, sizes),
            Elements::F32(v) => a(py, v, sizes),
            Elements::F64(v) => a(py, v, sizes),
            Elements::U16(v) => a(py, v, sizes),
            Elements::U32(v) => a(py, v, sizes),
            Elements::U64(v) => a(py, v, sizes),
            Elements::Bool(v) => a(py, v, sizes),
        }
    }
}
