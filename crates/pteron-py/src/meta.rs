//! Methods' declared inputs and outputs: ExecuTorch's `MethodMeta` and `TensorInfo`.

use pteron::{MethodMeta, TensorMeta, ValueMeta};
use pyo3::prelude::*;

/// A method's name and declared inputs and outputs (ExecuTorch's `MethodMeta`).
#[pyclass(module = "pteron._pteron", name = "MethodMeta", frozen)]
pub struct PyMethodMeta {
    pub(crate) meta: MethodMeta,
}

impl PyMethodMeta {
    fn tensor(list: &[ValueMeta], index: usize, what: &str) -> PyResult<PyTensorInfo> {
        match list.get(index) {
            Some(ValueMeta::Tensor(t)) => Ok(PyTensorInfo { meta: t.clone() }),
            Some(other) => Err(pyo3::exceptions::PyValueError::new_err(format!(
                "{what} {index} is not a tensor: {other:?}"
            ))),
            None => Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "{what} {index} of {}",
                list.len()
            ))),
        }
    }
}

fn repr_list(list: &[ValueMeta]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|v| match v {
            ValueMeta::Tensor(t) => format!("'{}'", tensor_repr(t)),
            other => format!("'{other:?}'"),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

#[pymethods]
impl PyMethodMeta {
    fn name(&self) -> &str {
        &self.meta.name
    }
    fn num_inputs(&self) -> usize {
        self.meta.inputs.len()
    }
    fn num_outputs(&self) -> usize {
        self.meta.outputs.len()
    }
    fn input_tensor_meta(&self, index: usize) -> PyResult<PyTensorInfo> {
        Self::tensor(&self.meta.inputs, index, "input")
    }
    fn output_tensor_meta(&self, index: usize) -> PyResult<PyTensorInfo> {
        Self::tensor(&self.meta.outputs, index, "output")
    }
    fn __repr__(&self) -> String {
        format!(
            "MethodMeta(name='{}', num_inputs={}, input_tensor_meta={}, num_outputs={}, output_tensor_meta={})",
            self.meta.name,
            self.meta.inputs.len(),
            repr_list(&self.meta.inputs),
            self.meta.outputs.len(),
            repr_list(&self.meta.outputs)
        )
    }
}

/// A declared tensor (ExecuTorch's `TensorInfo`).
#[pyclass(module = "pteron._pteron", name = "TensorInfo", frozen)]
pub struct PyTensorInfo {
    meta: TensorMeta,
}

/// ExecuTorch's name of a dtype in `TensorInfo`'s repr (c10's ScalarType names).
fn c10_name(t: pteron::ScalarType) -> String {
    use pteron::ScalarType as S;
    match t {
        S::Byte => "Byte".into(),
        S::Char => "Char".into(),
        S::Short => "Short".into(),
        S::Int => "Int".into(),
        S::Long => "Long".into(),
        S::Half => "Half".into(),
        S::Float => "Float".into(),
        S::Double => "Double".into(),
        S::Bool => "Bool".into(),
        S::BFloat16 => "BFloat16".into(),
        other => format!("{other:?}"),
    }
}

fn tensor_repr(t: &TensorMeta) -> String {
    format!(
        "TensorInfo(sizes={:?}, dtype={}, is_memory_planned={}, nbytes={})",
        t.sizes,
        c10_name(t.dtype),
        if t.memory_planned { "True" } else { "False" },
        t.nbytes().unwrap_or(usize::MAX)
    )
}

#[pymethods]
impl PyTensorInfo {
    fn sizes(&self) -> Vec<usize> {
        self.meta.sizes.clone()
    }
    /// The dtype as ExecuTorch's ScalarType code (6: float32, ...).
    fn dtype(&self) -> i32 {
        self.meta.dtype as i32
    }
    /// The order the dims are laid out in, outermost first (0, 2, 3, 1: channels-last).
    fn dim_order(&self) -> Vec<u8> {
        self.meta.dim_order.clone()
    }
    fn is_memory_planned(&self) -> bool {
        self.meta.memory_planned
    }
    /// Bytes of the declared sizes.
    fn nbytes(&self) -> usize {
        self.meta.nbytes().unwrap_or(usize::MAX)
    }
    /// The numpy dtype name of the arrays this tensor is given and returned as
    /// ("bfloat16" tensors are float32 arrays).
    #[getter]
    fn numpy_dtype(&self) -> Option<&'static str> {
        crate::arrays::numpy_name(self.meta.dtype)
    }
    fn __repr__(&self) -> String {
        tensor_repr(&self.meta)
    }
}
