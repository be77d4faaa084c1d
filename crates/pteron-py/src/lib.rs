//! pteron's Python package (`import pteron`): ExecuTorch programs from Python with numpy, no
//! torch. This is the extension module `pteron._pteron`; `python/pteron` is the package around
//! it (exceptions, type stubs, the `pteron.runtime` alias of `executorch.runtime`).

mod arrays;
mod errors;
mod llm;
mod loaded;
mod meta;
mod method;
mod program;
mod speech;

use pyo3::prelude::*;

#[pymodule]
fn _pteron(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<program::PyRuntime>()?;
    m.add_class::<program::PyProgram>()?;
    m.add_class::<meta::PyMethodMeta>()?;
    m.add_class::<meta::PyTensorInfo>()?;
    m.add_class::<program::OperatorRegistry>()?;
    m.add_class::<program::BackendRegistry>()?;
    m.add_class::<method::PyMethod>()?;
    m.add_class::<llm::PyGenerator>()?;
    m.add_class::<llm::PyGeneration>()?;
    m.add_class::<speech::PyTranscriber>()?;
    m.add_function(wrap_pyfunction!(speech::read_wav_file, m)?)?;
    m.add_function(wrap_pyfunction!(speech::vad, m)?)?;
    m.add_function(wrap_pyfunction!(speech::vad_probabilities, m)?)?;
    Ok(())
}
