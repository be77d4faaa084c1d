//! pteron's execution core: dtypes, tensor metadata, runtime values, planned memory, the
//! kernel interface and registry, and (in [`method`]) loading and running a method.

extern crate alloc;

pub mod backend;
pub mod dtype;
pub mod error;
pub mod kernel;
pub mod memory;
pub mod method;
pub mod partition;
pub mod prepare;
pub mod tensor;
pub mod testing;
pub mod value;

pub use backend::{
    Backend, BackendInit, BackendRegistry, CompileSpec, DelegateHandle, NamedDataMap, NoNamedData,
    ProgramNamedData,
};
pub use dtype::{Bool, DtypeSet, Element, ScalarType};
pub use error::{Error, KernelError, Result};
pub use half;
pub use kernel::{
    ArgAccess, ArgView, IntList, Kernel, KernelContext, KernelFn, KernelRegistry, TensorMut,
    TensorRef,
};
pub use method::{
    DataSources, ExecutionObserver, KernelEvent, LoadOptions, Method, MethodConfig, Output,
    PageRelease, PlanStats,
};
pub use partition::{CallGraph, Partitioner, Region};
pub use prepare::{Inline, Parallel, PrepareContext, PrepareFn, Prepared, INLINE};
pub use tensor::{normalize_dim, Dims, TensorInfo, MAX_RANK};
pub use value::{Dynamism, ListPool, ListRef, Scalar, Storage, Tensor, Value, NONE_INDEX};
