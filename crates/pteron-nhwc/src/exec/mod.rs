//! A graph ready to run ([`Executable`], a `DelegateHandle`): per-node prepared kernels
//! (packed weights; `prepare`), shape propagation (`shapes`), fused steps (`fuse`), the
//! memory plan of the graph's values in one arena (`plan`), and execution over a
//! `DelegateCall`'s arguments (`run`; the float32 node kernels in `nodes`).
//!
//! Shapes are propagated from the external inputs through every node, as XNNPACK's
//! `xnn_reshape_runtime` does; this runs at init (with the exported input shapes) and again
//! whenever an input arrives with a new shape. The arena is planned in execution order (each
//! output placed first-fit while its node's inputs are still live, inputs released after
//! their last use) and only re-planned, and grown, when a shape grows past what was planned:
//! runs with known shapes allocate nothing.

use pteron_core::{ArgAccess, ArgView, DelegateHandle, KernelContext, KernelError};
use std::sync::Arc;
use std::time::Duration;

use crate::profile::NodeProfile;
use crate::{EngineOptions, FusePolicy};

use crate::graph::{DType, Graph, Node};
use crate::kernels::gemm::{ConvWeights, FcFilter};
use crate::kernels::spatial::DwWeights;
use crate::quant::exec::QPrep;
use crate::quant::gemm::{QWeights, StreamLink};
use crate::util::{Buf, Shape, MAX_DIMS};

mod fuse;
mod nodes;
mod plan;
mod prepare;
mod run;
mod shapes;

use fuse::FUSE_MIN_BYTES;
use prepare::{check_uses, place_constants, prepare_steps, Uses};
use run::scalar_type;

/// What a node prepared at init.
enum Prep {
    None,
    Fc {
        filter: FcFilter,
        /// A constant bias, copied.
        bias: Option<Vec<f32>>,
    },
    Conv(ConvWeights),
    Dw(DwWeights),
    /// A node over quantized values.
    Q(QPrep),
}

struct Step {
    node: Node,
    prep: Prep,
    fuse: Fuse,
}

/// How a step runs with its neighbours.
#[derive(Clone, Copy, PartialEq)]
enum Fuse {
    /// On its own.
    No,
    /// Inside a later step's chain.
    IntoNext,
    /// Runs the chain that ends here (`kernels::fused`): a 3×3 depthwise convolution with the
    /// pointwise convolution before it (`expand`), the one after it (`project`, this step),
    /// or both; reads the chain's first input. With `add`, this step is the add of a
    /// residual connection after the chain (which then ends with `project` at the step
    /// before), run as the project step's epilogue.
    Chain {
        expand: bool,
        project: bool,
        add: bool,
    },
    /// An add of a residual connection that runs the convolution before it (a plain
    /// convolution step, then `IntoNext`) with the add as the convolution's epilogue: the
    /// convolution's output is never stored.
    ConvAdd,
}

/// Where a value lives.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Home {
    /// A constant no kernel reads in place (packed at init): has no bytes here.
    Packed,
    /// Constant number `k` of `consts`.
    Const(usize),
    /// In the arena.
    Arena,
}

/// A graph ready to run: the handle of an XNNPACK delegate or of a channels-last region.
pub struct Executable {
    steps: Vec<Step>,
    names: Vec<&'static str>,
    homes: Vec<Home>,
    dtypes: Vec<DType>,
    consts: Vec<Buf>,
    /// Current shape of every value.
    shapes: Vec<Shape>,
    /// Bytes of every value at its current shape.
    sizes: Vec<usize>,
    /// Arena offset and planned capacity of every arena value.
    offsets: Vec<usize>,
    capacity: Vec<usize>,
    /// (node index of the producer or 0 for inputs, node index of the last reader).
    lifetimes: Vec<(usize, usize)>,
    arena: Buf,
    scratch: Vec<f32>,
    /// Stripe buffers of the fused pointwise-depthwise steps (sized at planning) for this
    /// many bands: the threads of the method's pool (at most 16).
    fused_scratch: Vec<f32>,
    fused_bands: usize,
    /// Activation operands of the quantized products.
    qscratch: Vec<u8>,
    inputs: Vec<(u32, usize)>,
    outputs: Vec<(u32, usize)>,
    /// External values that may be used in place of an arena copy: an input that is not also
    /// an output, an output listed once that no node reads after its producer.
    may_use_in_place: Vec<bool>,
    /// This run's in-place external values: the method argument each one is.
    ext_in: Vec<Option<u32>>,
    ext_out: Vec<Option<u32>>,
    /// Budget for the arena and scratch memory.
    max_bytes: u64,
    packed_bytes: usize,
    /// Per-node times of this run (time, ran) and where they are added, when profiling.
    profile: Option<Profiling>,
}

/// A graph's rows in a [`NodeProfile`] and this run's times.
struct Profiling {
    sink: Arc<NodeProfile>,
    graph: usize,
    times: Vec<(Duration, bool)>,
}

fn invalid(msg: impl Into<String>) -> KernelError {
    KernelError::invalid(msg)
}

impl Executable {
    /// Checks and prepares `g` to run within `max_bytes` of arena and scratch memory, on a
    /// pool of `num_threads` threads.
    pub fn new(
        g: Graph<'_>,
        max_bytes: u64,
        num_threads: usize,
        options: &EngineOptions,
    ) -> Result<Self, KernelError> {
        let nv = g.values.len();
        let nn = g.nodes.len();
        let Uses {
            in_place,
            producer,
            last_use,
        } = check_uses(&g)?;
        let (homes, consts) = place_constants(&g, &in_place)?;
        let (steps, packed_bytes) = prepare_steps(&g)?;

        let mut lifetimes = vec![(0usize, 0usize); nv];
        for v in 0..nv {
            let start = if producer[v] == usize::MAX {
                0
            } else {
                producer[v]
            };
            lifetimes[v] = (start, last_use[v].max(start));
        }
        for &(_, v) in &g.outputs {
            lifetimes[v].1 = nn;
        }
        let mut may_use_in_place = vec![false; nv];
        for &(_, v) in &g.inputs {
            may_use_in_place[v] = !g.outputs.iter().any(|&(_, o)| o == v);
        }
        for &(_, v) in &g.outputs {
            let once = g.outputs.iter().filter(|&&(_, o)| o == v).count() == 1;
            may_use_in_place[v] = once && producer[v] != usize::MAX && last_use[v] == producer[v];
        }
        let shapes: Vec<Shape> = g.values.iter().map(|v| v.shape).collect();
        let dtypes: Vec<DType> = g.values.iter().map(|v| v.dtype).collect();
        let mut d = Executable {
            steps,
            names: g.node_names,
            homes,
            dtypes,
            consts,
            shapes,
            sizes: vec![0; nv],
            offsets: vec![0; nv],
            capacity: vec![0; nv],
            lifetimes,
            arena: Buf::default(),
            scratch: Vec::new(),
            fused_scratch: Vec::new(),
            fused_bands: num_threads.clamp(1, 16),
            qscratch: Vec::new(),
            inputs: g.inputs,
            outputs: g.outputs,
            may_use_in_place,
            ext_in: vec![None; nv],
            ext_out: vec![None; nv],
            max_bytes,
            packed_bytes,
            profile: None,
        };
        d.propagate()?;
        let min_bytes = match options.fuse {
            FusePolicy::Off => None,
            FusePolicy::All => Some(0),
            FusePolicy::Default => Some(FUSE_MIN_BYTES),
        };
        if let Some(min_bytes) = min_bytes {
            d.fuse(min_bytes);
            d.fuse_residuals();
        }
        d.plan()?;
        d.link_weight_streams();
        if let Some(sink) = &options.profile {
            d.profile = Some(Profiling {
                graph: sink.add_graph(&d.names),
                sink: Arc::clone(sink),
                times: vec![(Duration::ZERO, false); nn],
            });
        }
        Ok(d)
    }

    /// The products that stream 4-bit weights, in run order.
    fn streamed_weights(&self) -> impl Iterator<Item = &QWeights> {
        self.steps.iter().filter_map(|s| match &s.prep {
            Prep::Q(q) => q.streamed_weights(),
            _ => None,
        })
    }

    /// Points each streamed product's weight stream at the next one's weights
    /// ([`StreamLink`]).
    fn link_weight_streams(&self) {
        let mut prev: Option<&QWeights> = None;
        for w in self.streamed_weights() {
            if let Some(p) = prev {
                p.link_stream().point_to(w);
            }
            prev = Some(w);
        }
    }

    /// The weights its first streamed product reads and the link of its last one's stream,
    /// for chaining the streams of executables that run one after another (a program's
    /// delegates); `None` without such products.
    pub fn weight_stream_ends(&self) -> Option<(&QWeights, StreamLink)> {
        let first = self.streamed_weights().next()?;
        let last = self.streamed_weights().last()?;
        Some((first, last.link_stream()))
    }

    /// Bytes held: packed weights, copied constants, the arena and scratch.
    pub fn bytes(&self) -> usize {
        self.packed_bytes
            + self.consts.iter().map(|c| c.len()).sum::<usize>()
            + self.arena.len()
            + (self.scratch.len() + self.fused_scratch.len()) * 4
    }

    /// XNNPACK's view of a tensor argument: its sizes in dim order.
    fn arg_shape(info: &pteron_core::TensorInfo) -> Result<Shape, KernelError> {
        let mut d = [0usize; MAX_DIMS];
        if info.rank() > MAX_DIMS {
            return Err(KernelError::unsupported(format!(
                "tensor of rank {} (XNNPACK takes at most {MAX_DIMS})",
                info.rank()
            )));
        }
        for (j, &o) in info.dim_order().iter().enumerate() {
            d[j] = info.sizes()[o as usize];
        }
        Shape::new(&d[..info.rank()])
    }
}

impl DelegateHandle for Executable {
    fn check(&self, args: &ArgView<'_, '_>) -> Result<(), KernelError> {
        for &(ext, v) in self.inputs.iter().chain(&self.outputs) {
            let t = args
                .tensor(ext as usize)
                .map_err(|e| invalid(format!("external value {ext}: {e}")))?;
            if t.dtype() != scalar_type(self.dtypes[v]) {
                return Err(KernelError::unsupported(format!(
                    "external value {ext} is {}, the graph's is {:?}",
                    t.dtype(),
                    self.dtypes[v]
                )));
            }
            let s = Self::arg_shape(t)?;
            // The exporter declares scalars as [1]; XNNPACK takes the tensor's rank.
            if s.rank() != self.shapes[v].rank() && s.numel() != self.shapes[v].numel() {
                return Err(KernelError::shape(format!(
                    "external value {ext} has shape {:?}, the graph's is {:?}",
                    s.dims(),
                    self.shapes[v].dims()
                )));
            }
        }
        Ok(())
    }

    fn execute(&mut self, ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
        self.run(ctx)
    }

    fn writes_arg(&self, arg: usize) -> Option<bool> {
        Some(self.outputs.iter().any(|&(ext, _)| ext as usize == arg))
    }

    fn memory_bytes(&self) -> usize {
        self.bytes()
    }
}
