//! Runtimes and programs: `executorch.runtime`'s `Runtime` and `Program`.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use pteron::{ProgramFile, Runtime};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};

use crate::errors::{closed, from_pteron};
use crate::loaded::LoadedProgram;
use crate::meta::PyMethodMeta;
use crate::method::PyMethod;

/// Kernels, backends and threads: what programs are loaded with.
#[pyclass(module = "pteron._pteron", name = "Runtime", frozen)]
pub struct PyRuntime {
    runtime: Runtime,
}

static DEFAULT_RUNTIME: PyOnceLock<Py<PyRuntime>> = PyOnceLock::new();

/// A path from a `str` or an `os.PathLike`; `None` for anything else.
fn as_path(data: &Bound<'_, PyAny>) -> Option<PathBuf> {
    if data.is_instance_of::<pyo3::types::PyString>() || data.hasattr("__fspath__").unwrap_or(false)
    {
        data.extract::<PathBuf>().ok()
    } else {
        None
    }
}

#[pymethods]
impl PyRuntime {
    /// A runtime of its own. `threads`: the kernels' thread pool (0 or None: one thread per
    /// physical core, shared by the process; 1: the calling thread only). `portable`: only the
    /// portable reference kernels (plain loops: no SIMD, no packed weights, no channels-last
    /// regions), the oracle the fast ones are checked against.
    #[new]
    #[pyo3(signature = (*, threads = None, portable = false))]
    fn new(py: Python<'_>, threads: Option<usize>, portable: bool) -> PyResult<Self> {
        let mut b = Runtime::builder();
        if let Some(n) = threads {
            b = b.threads(n);
        }
        if portable {
            b = b.portable();
        }
        let runtime = b.build().map_err(|e| from_pteron(py, &e))?;
        Ok(PyRuntime { runtime })
    }

    /// The process's default runtime (every kernel and backend, a thread per physical core).
    #[staticmethod]
    fn get(py: Python<'_>) -> PyResult<Py<PyRuntime>> {
        DEFAULT_RUNTIME
            .get_or_try_init(py, || {
                Py::new(
                    py,
                    PyRuntime {
                        runtime: Runtime::new(),
                    },
                )
            })
            .map(|r| r.clone_ref(py))
    }

    /// Loads and verifies a program from a path (`str`, `os.PathLike`; memory-mapped), from
    /// `bytes`/`bytearray`/`memoryview` (copied into aligned memory), or from a file-like
    /// object with `read()`. `data_path`: a `.ptd` file with the tensors the program keeps
    /// outside itself. `verification` is accepted for ExecuTorch compatibility: pteron always
    /// verifies the whole file.
    #[pyo3(signature = (data, *, verification = None, data_path = None, enable_etdump = false, debug_buffer_size = 0))]
    fn load_program(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        verification: Option<&Bound<'_, PyAny>>,
        data_path: Option<PathBuf>,
        enable_etdump: bool,
        debug_buffer_size: usize,
    ) -> PyResult<PyProgram> {
        let _ = (verification, enable_etdump, debug_buffer_size);
        let source = match as_path(data) {
            Some(path) => Source::Path(path),
            None => Source::File(bytes_like(data)?),
        };
        let runtime = self.runtime.clone();
        let loaded = py
            .detach(move || -> pteron::Result<LoadedProgram> {
                let file = match source {
                    Source::Path(p) => ProgramFile::open(p)?,
                    Source::File(f) => f,
                };
                let data = data_path.map(ProgramFile::open).transpose()?;
                LoadedProgram::new(&runtime, file, data)
            })
            .map_err(|e| from_pteron(py, &e))?;
        let names = loaded
            .program()
            .method_names()
            .into_iter()
            .map(str::to_string)
            .collect();
        Ok(PyProgram {
            inner: Mutex::new(Some(Arc::new(loaded))),
            names,
            methods: Mutex::new(HashMap::new()),
        })
    }

    /// Threads the kernels of this runtime's methods use.
    #[getter]
    fn threads(&self) -> usize {
        self.runtime.threads()
    }

    /// The operators this runtime has kernels for.
    #[getter]
    fn operator_registry(&self) -> OperatorRegistry {
        OperatorRegistry {
            names: self.runtime.kernels().names().map(str::to_string).collect(),
        }
    }

    /// The delegate backends this runtime runs.
    #[getter]
    fn backend_registry(&self) -> BackendRegistry {
        BackendRegistry {
            names: self.runtime.backends().ids().map(str::to_string).collect(),
        }
    }

    fn __repr__(&self) -> String {
        format!("Runtime(threads={})", self.runtime.threads())
    }
}

enum Source {
    Path(PathBuf),
    /// Bytes copied (once) into the aligned buffer the program is read from.
    File(ProgramFile),
}

/// The program bytes of `bytes`, `bytearray`, `memoryview` or a file-like object's `read()`.
fn bytes_like(data: &Bound<'_, PyAny>) -> PyResult<ProgramFile> {
    let read = if data.hasattr("read")? {
        data.call_method0("read")?
    } else {
        data.clone()
    };
    if let Ok(b) = read.cast::<PyBytes>() {
        Ok(ProgramFile::from_bytes(b.as_bytes()))
    } else if let Ok(b) = read.cast::<PyByteArray>() {
        // A bytearray may change under us while borrowed: copy it out first.
        Ok(ProgramFile::from_bytes(&b.to_vec()))
    } else if read.is_instance_of::<PyMemoryView>() {
        let b = read.py().get_type::<PyBytes>().call1((&read,))?;
        Ok(ProgramFile::from_bytes(b.cast::<PyBytes>()?.as_bytes()))
    } else {
        Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "expected a path, bytes, bytearray, memoryview or a file-like object, got {}",
            data.get_type().name()?
        )))
    }
}

/// The operators a runtime has kernels for.
#[pyclass(module = "pteron._pteron", frozen)]
pub struct OperatorRegistry {
    names: Vec<String>,
}

#[pymethods]
impl OperatorRegistry {
    #[getter]
    fn operator_names(&self) -> HashSet<String> {
        self.names.iter().cloned().collect()
    }
}

/// The delegate backends a runtime runs.
#[pyclass(module = "pteron._pteron", frozen)]
pub struct BackendRegistry {
    names: Vec<String>,
}

#[pymethods]
impl BackendRegistry {
    #[getter]
    fn registered_backend_names(&self) -> Vec<String> {
        self.names.clone()
    }

    fn is_available(&self, backend_name: &str) -> bool {
        self.names.iter().any(|n| n == backend_name)
    }
}

/// A verified program: its methods' names and metadata, and its methods.
#[pyclass(module = "pteron._pteron", name = "Program", frozen)]
pub struct PyProgram {
    inner: Mutex<Option<Arc<LoadedProgram>>>,
    names: Vec<String>,
    /// Methods loaded with the runtime's threads, loaded once each (as ExecuTorch does).
    methods: Mutex<HashMap<String, Py<PyMethod>>>,
}

impl PyProgram {
    /// The loaded program, or `ClosedError`.
    pub(crate) fn loaded(&self, py: Python<'_>) -> PyResult<Arc<LoadedProgram>> {
        match &*self.inner.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(p) => Ok(Arc::clone(p)),
            None => Err(closed(py, "program")),
        }
    }
}

#[pymethods]
impl PyProgram {
    /// The names of the program's methods.
    #[getter]
    fn method_names(&self) -> HashSet<String> {
        self.names.iter().cloned().collect()
    }

    /// The declared inputs and outputs of method `method_name`, without loading it.
    fn metadata(&self, py: Python<'_>, method_name: &str) -> PyResult<PyMethodMeta> {
        let loaded = self.loaded(py)?;
        let meta = loaded
            .program()
            .method_meta(method_name)
            .map_err(|e| from_pteron(py, &e))?;
        Ok(PyMethodMeta { meta })
    }

    /// Loads method `name` (once: later calls return the same method). `threads` gives this
    /// method a pool of its own (1: the calling thread only) and a method of its own each call.
    #[pyo3(signature = (name, *, threads = None))]
    fn load_method(
        &self,
        py: Python<'_>,
        name: &str,
        threads: Option<usize>,
    ) -> PyResult<Py<PyMethod>> {
        let loaded = self.loaded(py)?;
        if threads.is_none() {
            if let Some(m) = self
                .methods
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
            {
                return Ok(m.clone_ref(py));
            }
        }
        let method = Py::new(py, PyMethod::load(py, loaded, name, threads)?)?;
        if threads.is_none() {
            self.methods
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_string(), method.clone_ref(py));
        }
        Ok(method)
    }

    /// Lets go of the program. Methods already loaded keep working (they hold what they need);
    /// loading another raises `ClosedError`.
    fn close(&self) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.methods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) {
        self.close();
    }

    fn __repr__(&self) -> String {
        let mut names = self.names.clone();
        names.sort();
        format!("Program(methods={names:?})")
    }
}
