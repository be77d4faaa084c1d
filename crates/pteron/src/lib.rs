//! pteron: run PyTorch programs exported with ExecuTorch (`.pte`) in pure Rust.
//!
//! ```no_run
//! use pteron::RunMethod;
//!
//! let file = pteron::ProgramFile::open("model.pte")?;
//! let program = file.program()?;
//! let kernels = pteron::default_kernels();
//! let mut method = program.load_method("forward", &kernels)?;
//! let input = pteron::Tensor::from_f32(&[1, 4], &[1.0, 2.0, 3.0, 4.0]);
//! let outputs = method.run(&[input])?;
//! if let pteron::Value::Tensor(t) = &outputs[0] {
//!     println!("{} {:?}", t.dtype, t.sizes);
//! }
//! # Ok::<(), pteron::Error>(())
//! ```

mod file;
pub mod npy;
mod options;
mod profile;
mod tensor;
mod threads;

pub use file::{Program, ProgramFile};
pub use options::MethodOptions;
pub use profile::{OpTime, Profiler, SiteTime};
pub use pteron_core as core;
pub use pteron_core::{BackendRegistry, MethodConfig, ScalarType};
pub use pteron_format as format;
/// The CPU's features and the process-wide cap on the kernels' SIMD level.
pub use pteron_kernels_cpu::cpu;
pub use pteron_nhwc::{EngineOptions, FusePolicy, NodeProfile};
pub use tensor::{RunMethod, Tensor, Value};
pub use threads::{default_threads, ThreadPool};

/// Everything that can go wrong when loading or running a program.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] pteron_format::FormatError),
    #[error(transparent)]
    Runtime(#[from] pteron_core::Error),
    /// A `.npy` file that cannot be read or written.
    #[error("{0}")]
    Npy(String),
    /// Tensors or arguments that do not fit what was asked of them.
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A kernel registry holding every kernel pteron ships: the portable kernels, with the fast
/// CPU kernels (`pteron-kernels-cpu`: SIMD, packed weights, threads) registered over them.
pub fn default_kernels() -> pteron_core::KernelRegistry {
    pteron_kernels_cpu::registry()
}

/// Every delegate backend pteron ships, by id: `XnnpackBackend` (`pteron-xnnpack`, running
/// XNNPACK-lowered programs on pteron's channels-last engine, `pteron-nhwc`).
pub fn default_backends() -> pteron_core::BackendRegistry {
    backends_with(&EngineOptions::default())
}

/// [`default_backends`] with the engine run under `engine`.
pub(crate) fn backends_with(engine: &EngineOptions) -> pteron_core::BackendRegistry {
    let mut r = pteron_core::BackendRegistry::new();
    r.register(std::sync::Arc::new(pteron_xnnpack::XnnpackBackend {
        engine: engine.clone(),
        ..Default::default()
    }));
    r
}

/// [`default_backends`], built once and shared by the methods loaded with default options.
pub(crate) fn shared_default_backends() -> std::sync::Arc<pteron_core::BackendRegistry> {
    static B: std::sync::OnceLock<std::sync::Arc<pteron_core::BackendRegistry>> =
        std::sync::OnceLock::new();
    B.get_or_init(|| std::sync::Arc::new(default_backends()))
        .clone()
}

/// Only the portable reference kernels (simple loops; the oracle the fast kernels are checked
/// against).
pub fn portable_kernels() -> pteron_core::KernelRegistry {
    pteron_kernels::registry()
}
