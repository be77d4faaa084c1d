//! pteron's execution core: dtypes, tensor metadata, runtime values, planned memory, the
//! kernel interface and registry, and loading and running a method.
//!
//! Modules, leaves first (each depends only on modules above it):
//!
//! - data: [`dtype`], [`tensor`], [`value`], [`memory`], [`error`], [`parallel`], [`config`],
//!   [`source`];
//! - the kernel interface: [`kernel`] (arguments, run-time context), `graph` (calls and
//!   value uses as planning sees them), [`prepare`] (a kernel's load-time step),
//!   [`registry`] (kernels and what they declare), [`backend`] (delegates), `instr`
//!   (decoded instructions, operators, delegates), `analysis` (use analysis);
//! - loading, stage by stage: `load` (memory plan, values, instructions, delegates),
//!   [`partition`], [`plan`]; [`options`]; [`method`] (the [`Method`] and its load
//!   pipeline); [`execute`] (running it);
//! - [`testing`]: single kernel calls built by hand.
//!
//! Memory: [`Method::load`] allocates each arena; [`Method::load_in`] carves them from a
//! region the caller lends, whose size [`Method::memory_needs`] reports before loading
//! (firmware placing activations in a chosen RAM bank). Executing allocates nothing either way.
//!
//! Features: `std` (default; off for microcontrollers: `core` and `alloc` only) and `plan`
//! (default; the load-time planning stages: kernels' `prepare` steps, fusion, partitioners;
//! without it a method loads as with `LoadOptions::prepare` off, and partitioners are refused).

#![forbid(unsafe_code)]
// Without `std`, `core` and `alloc` only (microcontrollers).
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub(crate) mod analysis;
pub mod backend;
pub mod config;
pub mod dtype;
pub mod error;
pub mod execute;
pub(crate) mod graph;
pub(crate) mod instr;
pub mod kernel;
pub(crate) mod load;
pub mod memory;
pub mod method;
pub mod options;
pub mod parallel;
pub mod partition;
pub mod plan;
pub mod prepare;
pub mod registry;
pub mod source;
pub mod tensor;
pub mod testing;
pub mod value;

pub use backend::{
    Backend, BackendInit, BackendRegistry, CompileSpec, DelegateHandle, NamedDataMap, NoNamedData,
    ProgramNamedData,
};
pub use config::MethodConfig;
pub use dtype::{Bool, DtypeSet, Element, ScalarType};
pub use error::{Error, ExternalProblem, KernelError, Result};
pub use execute::{ExecutionObserver, KernelEvent};
pub use half;
pub use kernel::{ArgAccess, ArgView, IntList, KernelContext, KernelFn, TensorMut, TensorRef};
pub use load::arenas::MemoryNeeds;
pub use method::{Method, Output};
pub use options::LoadOptions;
pub use parallel::{Inline, Parallel, INLINE};
pub use partition::{CallGraph, Partitioner, Region};
pub use plan::PlanStats;
pub use prepare::{PrepareContext, PrepareFn, Prepared};
/// The program a method is loaded from (re-exported so firmware needs only this crate).
pub use pteron_format::Program;
pub use registry::{AllOps, ArgSet, Kernel, KernelRegistry, OpSelection};
pub use source::{DataSources, PageRelease};
pub use tensor::{normalize_dim, Dims, TensorInfo, MAX_RANK};
pub use value::{Dynamism, ListPool, ListRef, Scalar, Storage, Tensor, Value, NONE_INDEX};
