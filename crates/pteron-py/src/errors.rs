//! pteron's errors as the Python exceptions of `pteron.errors`, with their data as attributes.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::BoundObject;

/// An exception of class `class` (in `pteron.errors`) with `message` and keyword arguments.
fn raise(py: Python<'_>, class: &str, message: String, kwargs: &[(&str, Py<PyAny>)]) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("pteron.errors")?.getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in kwargs {
            kw.set_item(k, v)?;
        }
        let e = cls.call((message.clone(),), Some(&kw))?;
        Ok(PyErr::from_value(e))
    })();
    // Without the package's Python half (a bare extension module): a plain RuntimeError.
    made.unwrap_or_else(|_| pyo3::exceptions::PyRuntimeError::new_err(message))
}

pub fn closed(py: Python<'_>, what: &str) -> PyErr {
    raise(py, "ClosedError", format!("the {what} is closed"), &[])
}

pub fn input(py: Python<'_>, index: Option<usize>, message: String) -> PyErr {
    let index = index.map(|i| i.into_pyobject(py).map(|v| v.into_any().unbind()));
    match index {
        Some(Ok(i)) => raise(py, "InputError", message, &[("index", i)]),
        _ => raise(py, "InputError", message, &[]),
    }
}

pub fn generation(py: Python<'_>, message: String) -> PyErr {
    raise(py, "GenerationError", message, &[])
}

pub fn audio(py: Python<'_>, message: String) -> PyErr {
    raise(py, "AudioError", message, &[])
}

fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> Py<PyAny> {
    v.into_pyobject(py)
        .map(|o| o.into_bound().into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

/// The exception for an error of the core (loading or running a method).
pub fn from_method(py: Python<'_>, e: &pteron::MethodError) -> PyErr {
    use pteron::MethodError as E;
    let msg = e.to_string();
    match e {
        E::Format(_) | E::InvalidProgram(_) | E::IndexOutOfRange { .. } => {
            raise(py, "ProgramError", msg, &[])
        }
        E::JumpOutOfRange { .. } | E::ResourceLimit { .. } => raise(py, "ProgramError", msg, &[]),
        E::MethodNotFound(name) => raise(
            py,
            "MethodNotFoundError",
            msg,
            &[("name", obj(py, name.as_str()))],
        ),
        E::OperatorMissing { ops } => raise(
            py,
            "OperatorNotFoundError",
            msg,
            &[("ops", obj(py, ops.clone()))],
        ),
        E::KernelRejected { op, .. } | E::PrepareFailed { op, .. } => {
            raise(py, "UnsupportedError", msg, &[("op", obj(py, op.as_str()))])
        }
        E::BackendMissing { backend } => raise(
            py,
            "UnsupportedError",
            msg,
            &[("op", obj(py, backend.as_str()))],
        ),
        E::Delegate { delegate, .. } => raise(
            py,
            "UnsupportedError",
            msg,
            &[("op", obj(py, delegate.as_str()))],
        ),
        E::Input { index, .. } | E::InputIndex { index, .. } | E::InputBytes { index, .. } => {
            raise(py, "InputError", msg, &[("index", obj(py, *index))])
        }
        E::InputShape {
            index,
            expected,
            given,
        } => mismatch(
            py,
            msg,
            *index,
            obj(py, expected.clone()),
            obj(py, given.clone()),
        ),
        E::InputDType {
            index,
            expected,
            given,
        } => mismatch(
            py,
            msg,
            *index,
            obj(py, expected.name()),
            obj(py, given.name()),
        ),
        _ => raise(py, "ExecutionError", msg, &[]),
    }
}

/// An `InputError` for input `index`, with what was expected and what was given.
fn mismatch(
    py: Python<'_>,
    msg: String,
    index: usize,
    expected: Py<PyAny>,
    given: Py<PyAny>,
) -> PyErr {
    let kw = [
        ("index", obj(py, index)),
        ("expected", expected),
        ("given", given),
    ];
    raise(py, "InputError", msg, &kw)
}

/// The exception for an error of the facade.
pub fn from_pteron(py: Python<'_>, e: &pteron::Error) -> PyErr {
    match e {
        pteron::Error::Runtime(m) => from_method(py, m),
        pteron::Error::Format(_) | pteron::Error::Io { .. } => {
            raise(py, "ProgramError", e.to_string(), &[])
        }
        pteron::Error::Invalid(_) | pteron::Error::Npy(_) => {
            raise(py, "PteronError", e.to_string(), &[])
        }
    }
}

/// The exception for an error of the LLM runner.
pub fn from_llm(py: Python<'_>, e: &pteron_llm::Error) -> PyErr {
    use pteron_llm::Error as E;
    match e {
        E::Pteron(p) => from_pteron(py, p),
        E::Tokenizer(_) | E::Template(_) => raise(py, "TokenizerError", e.to_string(), &[]),
        E::Io { .. } => raise(py, "TokenizerError", e.to_string(), &[]),
        _ => generation(py, e.to_string()),
    }
}

/// The exception for an error of the speech runners.
pub fn from_audio(py: Python<'_>, e: &pteron_audio::Error) -> PyErr {
    match e {
        pteron_audio::Error::Pteron(p) => from_pteron(py, p),
        _ => audio(py, e.to_string()),
    }
}

pub fn unsupported(py: Python<'_>, message: String) -> PyErr {
    raise(py, "UnsupportedError", message, &[])
}
