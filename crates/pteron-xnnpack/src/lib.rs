//! pteron's XNNPACK delegate backend: reads the `XnnpackBackend` payloads of `.pte` programs
//! (lowered with `to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])`) and
//! runs them on pteron's channels-last engine (`pteron-nhwc`), in pure Rust.
//!
//! At method load ([`XnnpackBackend`]'s `init`): the payload's "XH00" header is parsed with
//! overflow-checked bounds ([`blob`]), the XNNPACK flatbuffer graph (identifier XN00/XN01) is
//! verified, every value and node is checked and turned into the engine's graph ([`convert`]):
//! constants come from the payload's constant region, from the program's named data (or the
//! `.ptd`) by key, or from the legacy inline buffers, and must hold `numel × element size`
//! bytes. Filters are packed for the GEMM kernels, shapes are propagated from the inputs and
//! the values are planned into one arena (`pteron_nhwc::Executable`). Anything the backend
//! does not implement (a node type, a datatype, a flag) fails the load with an error naming it.
//!
//! At run time the delegate reads its inputs from the `DelegateCall` arguments (matched by
//! `external_id`), runs the nodes and writes its outputs, resized from the propagated shapes.

pub mod blob;
pub mod convert;

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn
)]
#[rustfmt::skip]
mod generated {
    include!("generated/xnnpack_generated.rs");
}

/// The verified flatbuffer tables of an XNNPACK payload (namespace `fb_xnnpack`).
pub use generated::fb_xnnpack as schema;

use std::sync::{Arc, Mutex};

use pteron_core::{Backend, BackendInit, BackendRegistry, DelegateHandle, KernelError};
use pteron_nhwc::quant::gemm::StreamLink;
use pteron_nhwc::{EngineOptions, Executable};

/// The id programs name the backend by.
pub const BACKEND_ID: &str = "XnnpackBackend";

/// The XNNPACK delegate backend.
#[derive(Clone, Debug, Default)]
pub struct XnnpackBackend {
    pub limits: blob::Limits,
    /// Run every node as the graph has it: no folding of int8 clamps into the nodes that
    /// produce their inputs ([`pteron_nhwc::graph::Graph::fuse_int8_clamps`]), no sharing of
    /// repeated dynamic quantizations ([`pteron_nhwc::graph::Graph::share_dynamic_quantization`]).
    /// For comparisons.
    pub unfused: bool,
    /// How the engine runs the graph (fusion of chains, per-node profile).
    pub engine: EngineOptions,
    /// The weight stream of the delegate loaded last, which the next one loaded continues
    /// (a program's delegates load in run order): see [`StreamLink`].
    pub stream_chain: Arc<Mutex<Option<StreamLink>>>,
}

impl Backend for XnnpackBackend {
    fn id(&self) -> &str {
        BACKEND_ID
    }

    fn init<'p>(
        &self,
        init: &BackendInit<'_, 'p>,
    ) -> Result<Box<dyn DelegateHandle + 'p>, KernelError> {
        let blob = blob::Blob::parse(init.processed, self.limits)?;
        let mut g = convert::build(&blob, init.named_data)?;
        if !self.unfused {
            g.fuse_int8_clamps();
            g.share_dynamic_quantization();
        }
        let d = Executable::new(
            g,
            init.config.max_planned_bytes,
            init.num_threads,
            &self.engine,
        )?;
        if let Some((first, last)) = d.weight_stream_ends() {
            // A poisoned lock only held a hint.
            let mut chain = self.stream_chain.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(prev) = chain.replace(last) {
                prev.point_to(first);
            }
        }
        Ok(Box::new(d))
    }
}

/// Registers the XNNPACK backend in `r`.
pub fn register(r: &mut BackendRegistry) {
    r.register(Arc::new(XnnpackBackend::default()));
}
