//! Methods: `execute(inputs)` with numpy arrays in and out, the GIL released while it runs.

use std::sync::{Arc, Mutex};

use pteron::{Method, MethodMeta, MethodOptions, Output, RunMethod, ValueMeta, ValueSpec};
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::arrays::{input_bytes, Elements, InputBytes};
use crate::errors::{closed, from_pteron, input, unsupported};
use crate::loaded::LoadedProgram;
use crate::meta::PyMethodMeta;

/// A loaded method and the program bytes it reads.
struct MethodState {
    // Declared first: the method borrows the program's bytes and drops before them.
    method: Method<'static>,
    _program: Arc<LoadedProgram>,
}

/// A loaded method of a program (ExecuTorch's `Method`).
///
/// One execution at a time: a second thread calling `execute` on the same method waits for
/// the first (methods of their own run in parallel; the GIL is released while they run).
#[pyclass(module = "pteron._pteron", name = "Method", frozen)]
pub struct PyMethod {
    state: Mutex<Option<MethodState>>,
    meta: MethodMeta,
}

/// One input, converted while the GIL is held.
enum Input {
    Tensor(InputBytes),
    Scalar(ValueSpec<'static>),
}

/// One output, copied out of the method without the GIL.
enum Out {
    Array(Elements, Vec<usize>),
    Int(i64),
    Double(f64),
    Bool(bool),
    None,
}

/// What can go wrong while the GIL is released (turned into exceptions after).
enum RunError {
    Closed,
    Pteron(pteron::Error),
    Unsupported(String),
}

impl From<pteron::Error> for RunError {
    fn from(e: pteron::Error) -> Self {
        RunError::Pteron(e)
    }
}

impl PyMethod {
    pub(crate) fn load(
        py: Python<'_>,
        loaded: Arc<LoadedProgram>,
        name: &str,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let meta = loaded
            .program()
            .method_meta(name)
            .map_err(|e| from_pteron(py, &e))?;
        let options = match threads {
            Some(n) => MethodOptions::new().threads(n),
            None => MethodOptions::new(),
        };
        let state = py
            .detach(|| -> pteron::Result<MethodState> {
                // Safety: the method borrows the program's bytes, which `loaded` keeps alive
                // on the heap; the state stores `loaded` and drops the method first (field
                // order), so the borrow never outlives them.
                let prog: &'static pteron::Program<'static> =
                    unsafe { &*(loaded.program() as *const pteron::Program<'static>) };
                let method = prog.load_method_with(name, options)?;
                Ok(MethodState {
                    method,
                    _program: loaded,
                })
            })
            .map_err(|e| from_pteron(py, &e))?;
        Ok(PyMethod {
            state: Mutex::new(Some(state)),
            meta,
        })
    }

    /// Reads the Python inputs against the declared ones.
    fn read_inputs(&self, inputs: &Bound<'_, PyAny>) -> PyResult<Vec<Input>> {
        let py = inputs.py();
        let items: Vec<Bound<'_, PyAny>> = inputs
            .try_iter()
            .map_err(|_| input(py, None, "inputs must be a sequence".into()))?
            .collect::<PyResult<_>>()?;
        let declared = &self.meta.inputs;
        if items.len() != declared.len() {
            return Err(input(
                py,
                None,
                format!(
                    "method {:?} takes {} inputs, {} given",
                    self.meta.name,
                    declared.len(),
                    items.len()
                ),
            ));
        }
        items
            .iter()
            .zip(declared)
            .enumerate()
            .map(|(i, (item, spec))| {
                let scalar = |r: PyResult<ValueSpec<'static>>| {
                    r.map(Input::Scalar)
                        .map_err(|e| input(py, Some(i), format!("input {i}: {e}")))
                };
                match spec {
                    ValueMeta::Tensor(t) => input_bytes(item, t.dtype)
                        .map(Input::Tensor)
                        .map_err(|e| as_input_error(py, e, i)),
                    ValueMeta::Int(_) => scalar(item.extract().map(ValueSpec::Int)),
                    ValueMeta::Double(_) => scalar(item.extract().map(ValueSpec::Double)),
                    ValueMeta::Bool(_) => scalar(item.extract().map(ValueSpec::Bool)),
                    ValueMeta::None => Ok(Input::Scalar(ValueSpec::None)),
                    ValueMeta::Other(kind) => Err(unsupported(
                        py,
                        format!("input {i} is a {kind}, which pteron does not take"),
                    )),
                }
            })
            .collect()
    }
}

/// `e` (numpy's refusal to read an input as an array) as an `InputError` of input `i`; pteron's
/// own errors stay as they are.
fn as_input_error(py: Python<'_>, e: PyErr, i: usize) -> PyErr {
    let ours = py
        .import("pteron.errors")
        .and_then(|m| m.getattr("PteronError"))
        .is_ok_and(|cls| e.is_instance(py, &cls));
    if ours {
        e
    } else {
        input(py, Some(i), format!("input {i}: {e}"))
    }
}

/// Sets the inputs, runs, and copies the outputs out (no Python objects: runs without the
/// GIL).
fn run(state: &mut MethodState, inputs: &[Input]) -> Result<Vec<Out>, RunError> {
    let m = &mut state.method;
    for (i, input) in inputs.iter().enumerate() {
        match input {
            Input::Tensor(t) => m.set_input_bytes(i, t.dtype, &t.sizes, &t.bytes)?,
            Input::Scalar(v) => m.set_input_value(i, *v).map_err(pteron::Error::from)?,
        }
    }
    m.execute().map_err(pteron::Error::from)?;
    (0..m.num_outputs())
        .map(|i| {
            // Row-major outputs are read in place; others (channels-last) are reordered.
            if let Output::Tensor(t) = m.output(i).map_err(pteron::Error::from)? {
                if t.info.is_contiguous() {
                    let e = Elements::from_bytes(t.info.dtype(), t.bytes)
                        .map_err(RunError::Unsupported)?;
                    return Ok(Out::Array(e, t.info.sizes().to_vec()));
                }
            }
            Ok(match m.output_value(i)? {
                pteron::Value::Tensor(t) => Out::Array(
                    Elements::from_bytes(t.dtype, &t.data).map_err(RunError::Unsupported)?,
                    t.sizes,
                ),
                pteron::Value::Int(v) => Out::Int(v),
                pteron::Value::Double(v) => Out::Double(v),
                pteron::Value::Bool(v) => Out::Bool(v),
                pteron::Value::None => Out::None,
            })
        })
        .collect()
}

#[pymethods]
impl PyMethod {
    /// Runs the method on `inputs` (a sequence: numpy arrays, or anything `numpy.asarray`
    /// takes, such as torch tensors; Python numbers for scalar inputs) and returns its outputs
    /// as a list of numpy arrays (scalars as Python numbers). The arrays own their memory.
    fn execute<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let inputs = self.read_inputs(inputs)?;
        let result = py.detach(|| {
            let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match guard.as_mut() {
                Some(state) => run(state, &inputs),
                None => Err(RunError::Closed),
            }
        });
        let outs = result.map_err(|e| match e {
            RunError::Closed => closed(py, "method"),
            RunError::Pteron(e) => from_pteron(py, &e),
            RunError::Unsupported(m) => unsupported(py, m),
        })?;
        let list = PyList::empty(py);
        for o in outs {
            match o {
                Out::Array(e, sizes) => list.append(e.into_numpy(py, &sizes)?)?,
                Out::Int(v) => list.append(v)?,
                Out::Double(v) => list.append(v)?,
                Out::Bool(v) => list.append(v)?,
                Out::None => list.append(py.None())?,
            }
        }
        Ok(list)
    }

    /// `method(inputs)`: the same as `execute(inputs)`.
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.execute(py, inputs)
    }

    /// The method's name and declared inputs and outputs.
    #[getter]
    fn metadata(&self) -> PyMethodMeta {
        PyMethodMeta {
            meta: self.meta.clone(),
        }
    }

    /// Frees the method (after a running execution ends); using it afterwards raises
    /// `ClosedError`.
    fn close(&self, py: Python<'_>) {
        let state = py.detach(|| self.state.lock().unwrap_or_else(|p| p.into_inner()).take());
        drop(state);
    }

    fn __repr__(&self) -> String {
        format!(
            "Method(name={:?}, num_inputs={}, num_outputs={})",
            self.meta.name,
            self.meta.inputs.len(),
            self.meta.outputs.len()
        )
    }
}
