//! pteron: run PyTorch programs exported with ExecuTorch (`.pte`) in pure Rust.
//!
//! ```no_run
//! use pteron::RunMethod;
//!
//! let runtime = pteron::Runtime::new();
//! let file = pteron::ProgramFile::open("model.pte")?;
//! let program = runtime.load_program(&file)?;
//! let mut method = program.load_method("forward")?;
//! let input = pteron::Tensor::from_f32(&[1, 4], &[1.0, 2.0, 3.0, 4.0]);
//! let outputs = method.run(&[input])?;
//! if let pteron::Value::Tensor(t) = &outputs[0] {
//!     println!("{} {:?}", t.dtype, t.sizes);
//! }
//! # Ok::<(), pteron::Error>(())
//! ```

mod file;
mod meta;
pub mod npy;
mod options;
mod profile;
mod runtime;
mod tensor;
mod threads;

pub use file::{Program, ProgramFile};
pub use meta::{MethodMeta, TensorMeta, ValueMeta};
pub use options::MethodOptions;
pub use profile::{OpTime, Profiler, SiteTime};
/// The CPU's features and the process-wide cap on the kernels' SIMD level.
pub use pteron_kernels_cpu::cpu;
pub use pteron_nhwc::{EngineOptions, FusePolicy, NodeProfile};
pub use runtime::{default_backends, Runtime, RuntimeBuilder};
pub use tensor::{RunMethod, Tensor, Value};
pub use threads::{default_threads, thread_cpu_time, ThreadPool};

// The loaded method and what it reports, from the execution core.
pub use pteron_core::{
    BackendRegistry, Dynamism, ExecutionObserver, KernelEvent, KernelRegistry, Method,
    MethodConfig, Output, Partitioner, PlanStats, ScalarType,
};
pub use pteron_format::{DataFile, Limits};

// The execution core's descriptions of a method's values, for code that works on its inputs
// and outputs in place (a runner's KV cache, a profiler), each under one name here.
pub use pteron_core::{
    Error as MethodError, KernelError, Storage, Tensor as TensorSpec, TensorInfo, TensorRef,
    Value as ValueSpec, NONE_INDEX,
};

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
/// The default runtime's; start from it to register kernels of your own over it.
pub fn default_kernels() -> KernelRegistry {
    pteron_kernels_cpu::registry()
}

/// Only the portable reference kernels (simple loops; the oracle the fast kernels are checked
/// against).
pub fn portable_kernels() -> KernelRegistry {
    pteron_kernels::registry()
}
