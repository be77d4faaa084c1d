//! pteron's channels-last (NHWC) graph engine. Its one job: run a [`graph::Graph`] — checked,
//! its weights packed, its shapes inferred, its values planned into one arena, chains of
//! convolutions fused — on float32 and int8 kernels, as a `pteron_core::DelegateHandle`
//! ([`Executable`]).
//!
//! Front ends turn their programs into the graph: `pteron-xnnpack` converts an XNNPACK
//! delegate payload, and [`partition::NhwcPartitioner`] turns runs of a portable program's
//! convolution calls into engine regions.
//!
//! Depends on `pteron-core` (the delegate and partitioner interfaces), `pteron-kernels-cpu`
//! (SIMD layer, GEMM micro-kernels, CPU features) and `pteron-kernels` (shared index helpers);
//! nothing depends on a front end.

pub mod exec;
pub mod graph;
pub mod kernels;
mod options;
pub mod partition;
pub mod profile;
pub mod quant;
pub mod util;

pub use exec::Executable;
pub use options::{EngineOptions, FusePolicy};
pub use partition::NhwcPartitioner;
pub use profile::NodeProfile;
