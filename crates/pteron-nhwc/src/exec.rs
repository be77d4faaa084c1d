//! The initialised delegate: per-node prepared kernels (packed weights), shape propagation,
//! the memory plan of the graph's values in one arena, and execution over a `DelegateCall`'s
//! arguments.
//!
//! Shapes are propagated from the external inputs through every node, as XNNPACK's
//! `xnn_reshape_runtime` does; this runs at init (with the exported input shapes) and again
//! whenever an input arrives with a new shape. The arena is planned in execution order (each
//! output placed first-fit while its node's inputs are still live, inputs released after
//! their last use) and only re-planned, and grown, when a shape grows past what was planned:
//! runs with known shapes allocate nothing.

use pteron_core::{
    ArgAccess, ArgView, DelegateHandle, KernelContext, KernelError, Parallel, ScalarType, TensorRef,
};
use pteron_kernels_cpu::simd::level;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::profile::NodeProfile;
use crate::{EngineOptions, FusePolicy};

use crate::graph::{BinaryOp, ConvKind, DType, Graph, Kind, Node};
use crate::kernels;
use crate::kernels::elementwise::{binary, broadcast, unary};
use crate::kernels::gemm::{bmm, fully_connected, AddInto, ConvWeights, FcFilter};
use crate::kernels::layout;
use crate::kernels::spatial::{depthwise, global_mean, pool, DwWeights, Geom};
use crate::quant::exec::{self as qexec, QPrep};
use crate::util::{
    f32s, f32s_mut, io, read_f16, read_f32, round_to_f16, Buf, Dst, Shape, Src, MAX_DIMS,
};

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

/// The chain step `i` runs: the kernels' view, and the value it reads.
fn chain_at(steps: &[Step], i: usize) -> Option<(kernels::fused::Chain<'_>, usize)> {
    let Fuse::Chain {
        expand,
        project,
        add,
    } = steps[i].fuse
    else {
        return None;
    };
    let end = if add { i.checked_sub(1)? } else { i };
    let d = if project { end.checked_sub(1)? } else { end };
    let Prep::Dw(dw) = &steps[d].prep else {
        return None;
    };
    let conv = |k: usize| match (&steps[k].prep, &steps[k].node) {
        (Prep::Conv(cw), Node::Conv { x, .. }) => Some((cw, *x)),
        _ => None,
    };
    let (e, input) = if expand {
        let (cw, x) = conv(d.checked_sub(1)?)?;
        (Some(cw), x)
    } else {
        let Node::Conv { x, .. } = steps[d].node else {
            return None;
        };
        (None, x)
    };
    let p = if project { Some(conv(end)?.0) } else { None };
    Some((
        kernels::fused::Chain {
            expand: e,
            dw,
            project: p,
            add: None,
        },
        input,
    ))
}

/// Widened maps from which a pointwise and a depthwise convolution are fused: smaller ones
/// stay in the L2 cache between the two nodes anyway, and bands would recompute more rows.
const FUSE_MIN_BYTES: usize = 1 << 20;

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

/// An XNNPACK delegate ready to run.
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
    /// many bands: the machine's threads, read once at init (reading them allocates).
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
        // Which constants are read by a kernel in place (everything but packed filters).
        let mut in_place = vec![false; nv];
        let mut producer = vec![usize::MAX; nv];
        let mut last_use = vec![0usize; nv];
        for (i, node) in g.nodes.iter().enumerate() {
            let (ins, n) = node.inputs();
            let packed: &[usize] = match *node {
                Node::Conv { w, .. } => &[w],
                _ => &[],
            };
            for (k, &v) in ins[..n].iter().enumerate() {
                let is_conv_bias =
                    matches!(node, Node::Conv { bias: Some(b), .. } if *b == v && k == 2);
                let is_fc_const = matches!(node, Node::FullyConnected { .. })
                    && k >= 1
                    && g.values[v].kind.is_constant();
                if !packed.contains(&v) && !is_conv_bias && !is_fc_const {
                    in_place[v] = true;
                }
                match g.values[v].kind {
                    Kind::Internal | Kind::Output(_) if producer[v] == usize::MAX => {
                        return Err(invalid(format!(
                            "node {i} ({}) reads value {v} before any node writes it",
                            g.node_names[i]
                        )))
                    }
                    _ => {}
                }
                last_use[v] = i;
            }
            let out = node.output();
            match g.values[out].kind {
                Kind::Constant(_) | Kind::Computed(_) | Kind::Input(_) => {
                    return Err(invalid(format!(
                        "node {i} ({}) writes value {out}, a constant or an external input",
                        g.node_names[i]
                    )))
                }
                _ if producer[out] != usize::MAX => {
                    return Err(invalid(format!(
                        "node {i} ({}) writes value {out}, already written by node {}",
                        g.node_names[i], producer[out]
                    )))
                }
                _ => {}
            }
            if ins[..n].contains(&out) {
                return Err(invalid(format!(
                    "node {i} ({}) reads its own output",
                    g.node_names[i]
                )));
            }
            producer[out] = i;
            last_use[out] = last_use[out].max(i);
        }
        for &(ext, v) in g.inputs.iter().chain(&g.outputs) {
            let d = g.values[v].dtype;
            if !d.is_float() && !d.is_q8() {
                return Err(KernelError::unsupported(format!(
                    "external value {ext} of datatype {:?}",
                    g.values[v].dtype
                )));
            }
        }
        for &(ext, v) in &g.outputs {
            if producer[v] == usize::MAX {
                return Err(invalid(format!(
                    "external output {ext} (value {v}) is written by no node"
                )));
            }
        }

        // Constants read in place are copied (aligned); packed ones are packed below.
        let const_f32 = |v: usize| -> Result<Vec<f32>, KernelError> {
            match (g.values[v].kind, g.values[v].dtype) {
                (Kind::Constant(b), DType::F32) => read_f32(b, g.values[v].shape.count()?),
                (Kind::Constant(b), DType::F16) => read_f16(b, g.values[v].shape.count()?),
                (Kind::Computed(c), DType::F32) => {
                    let vals = c.values()?;
                    if vals.len() != g.values[v].shape.count()? {
                        return Err(invalid(format!(
                            "computed constant {v} has {} values for shape {:?}",
                            vals.len(),
                            g.values[v].shape.dims()
                        )));
                    }
                    Ok(vals)
                }
                _ => Err(invalid(format!("value {v} is not a float constant"))),
            }
        };
        let mut homes = vec![Home::Arena; nv];
        let mut consts = Vec::new();
        for (v, val) in g.values.iter().enumerate() {
            if val.kind.is_constant() {
                homes[v] = if in_place[v] {
                    consts.push(match (val.kind, val.dtype) {
                        (Kind::Constant(b), d) if d.is_q8() => {
                            Buf::from_bytes(b.get(..val.shape.count()?).unwrap_or(b))?
                        }
                        _ => Buf::from_f32(&const_f32(v)?)?,
                    });
                    Home::Const(consts.len() - 1)
                } else {
                    Home::Packed
                };
            }
        }

        // Prepare every node.
        let mut steps = Vec::with_capacity(nn);
        let mut packed_bytes = 0;
        for (i, node) in g.nodes.iter().enumerate() {
            let ctx = |e: KernelError| match e {
                KernelError::Unsupported(m) => {
                    KernelError::unsupported(format!("node {i} ({}): {m}", g.node_names[i]))
                }
                e => invalid(format!("node {i} ({}): {e}", g.node_names[i])),
            };
            if let Some(q) = qexec::prepare(&g, node).map_err(ctx)? {
                packed_bytes += q.bytes();
                steps.push(Step {
                    node: node.clone(),
                    fuse: Fuse::No,
                    prep: Prep::Q(q),
                });
                continue;
            }
            let prep = match *node {
                Node::FullyConnected {
                    w,
                    bias,
                    transpose_w,
                    ..
                } => {
                    let ws = &g.values[w].shape;
                    if ws.rank() != 2 {
                        return Err(ctx(KernelError::unsupported(format!(
                            "filter of rank {}",
                            ws.rank()
                        ))));
                    }
                    let (ic, oc) = if transpose_w {
                        (ws.dims()[0], ws.dims()[1])
                    } else {
                        (ws.dims()[1], ws.dims()[0])
                    };
                    let filter = match g.values[w].kind {
                        Kind::Constant(_) | Kind::Computed(_) => {
                            // Rows of the input at its declared shape.
                            let xs = &g.values[node.inputs().0[0]].shape;
                            let rows = match xs.rank() {
                                0 => 1,
                                r => xs
                                    .count()
                                    .map_or(usize::MAX, |n| n / xs.dims()[r - 1].max(1)),
                            };
                            FcFilter::pack(&const_f32(w).map_err(ctx)?, ic, oc, transpose_w, rows)
                                .map_err(ctx)?
                        }
                        _ => FcFilter::Dynamic {
                            transpose: transpose_w,
                        },
                    };
                    let bias = match bias {
                        Some(b) if g.values[b].kind.is_constant() => {
                            let v = const_f32(b).map_err(ctx)?;
                            if v.len() != oc {
                                return Err(ctx(invalid(format!(
                                    "bias of {} values for {oc} outputs",
                                    v.len()
                                ))));
                            }
                            Some(v)
                        }
                        _ => None,
                    };
                    packed_bytes += filter.bytes();
                    Prep::Fc { filter, bias }
                }
                Node::Conv {
                    conv,
                    w,
                    bias,
                    clamp,
                    ..
                } => {
                    if !g.values[w].kind.is_constant()
                        || bias.is_some_and(|b| !g.values[b].kind.is_constant())
                    {
                        return Err(ctx(KernelError::unsupported(
                            "convolution with a non-constant filter or bias",
                        )));
                    }
                    let ws = g.values[w].shape;
                    let (kh, kw) = (conv.win.kh, conv.win.kw);
                    let expect = match conv.kind {
                        ConvKind::Depthwise => [1, kh, kw, conv.out_channels()],
                        _ => [conv.out_channels(), kh, kw, conv.group_in],
                    };
                    if ws.dims() != expect {
                        return Err(ctx(invalid(format!(
                            "filter shape {:?}, expected {expect:?}",
                            ws.dims()
                        ))));
                    }
                    let source = match g.values[w].kind {
                        Kind::Computed(c) => Some(c),
                        _ => None,
                    };
                    let rows = source
                        .filter(|_| conv.kind == ConvKind::Conv)
                        .and_then(|c| c.scaled_rows());
                    let wv = match rows {
                        Some(_) => Vec::new(),
                        None => const_f32(w).map_err(ctx)?,
                    };
                    let bv = bias.map(const_f32).transpose().map_err(ctx)?;
                    if let Some(b) = &bv {
                        if b.len() != conv.out_channels() {
                            return Err(ctx(invalid(format!(
                                "bias of {} values for {} outputs",
                                b.len(),
                                conv.out_channels()
                            ))));
                        }
                    }
                    let prep = if conv.kind == ConvKind::Depthwise {
                        let co = conv.out_channels();
                        let dw = DwWeights::new(
                            conv.win,
                            conv.groups,
                            conv.group_out,
                            wv,
                            bv.unwrap_or_else(|| vec![0.0; co]),
                            clamp,
                        )
                        .map_err(ctx)?;
                        packed_bytes += dw.bytes();
                        Prep::Dw(dw)
                    } else {
                        let cw = match rows {
                            Some((wr, scale)) => {
                                ConvWeights::scaled(conv, wr, scale, bv.as_deref(), clamp)
                            }
                            None => ConvWeights::new(conv, &wv, bv.as_deref(), clamp),
                        }
                        .map_err(ctx)?;
                        packed_bytes += cw.bytes();
                        Prep::Conv(cw)
                    };
                    if let Some(c) = source {
                        c.done();
                    }
                    prep
                }
                _ => Prep::None,
            };
            steps.push(Step {
                node: node.clone(),
                prep,
                fuse: Fuse::No,
            });
        }

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
        if let Some(sink) = &options.profile {
            d.profile = Some(Profiling {
                graph: sink.add_graph(&d.names),
                sink: Arc::clone(sink),
                times: vec![(Duration::ZERO, false); nn],
            });
        }
        Ok(d)
    }

    /// Fuses each 3×3 depthwise convolution with the pointwise convolution that only feeds
    /// it and the one that only reads it, where the map between them is at least `min_bytes`
    /// (`kernels::fused`). The chain's last step runs it; its input lives until then.
    fn fuse(&mut self, min_bytes: usize) {
        let nn = self.steps.len();
        // A value only step `reader` reads, worth not storing.
        let between = |d: &Self, v: usize, reader: usize| {
            d.homes[v] == Home::Arena
                && d.lifetimes[v].1 == reader
                && !d.outputs.iter().any(|&(_, o)| o == v)
                && d.dtypes[v] == DType::F32
                && d.shapes[v].rank() == 4
                && d.sizes[v] >= min_bytes
        };
        fn pointwise(st: &Step) -> Option<(&ConvWeights, usize)> {
            match (&st.prep, &st.node) {
                (Prep::Conv(cw), Node::Conv { x, .. }) if cw.is_pointwise() => Some((cw, *x)),
                _ => None,
            }
        }
        for j in 0..nn {
            let (Prep::Dw(dw), Node::Conv { x: dx, .. }) =
                (&self.steps[j].prep, &self.steps[j].node)
            else {
                continue;
            };
            if self.steps[j].fuse != Fuse::No || !kernels::fused::fusable_dw(dw) {
                continue;
            }
            let dx = *dx;
            let d_out = self.steps[j].node.output();
            let expand = j > 0
                && self.steps[j - 1].fuse == Fuse::No
                && pointwise(&self.steps[j - 1]).is_some_and(|(cw, _)| {
                    kernels::fused::fusable_expand(cw, dw)
                        && self.steps[j - 1].node.output() == dx
                        && between(self, dx, j)
                });
            let project = j + 1 < nn
                && pointwise(&self.steps[j + 1]).is_some_and(|(cw, x)| {
                    kernels::fused::fusable_project(dw, cw)
                        && x == d_out
                        && between(self, d_out, j + 1)
                });
            if !expand && !project {
                continue;
            }
            let first = if expand { j - 1 } else { j };
            let last = if project { j + 1 } else { j };
            let input = match &self.steps[first].node {
                Node::Conv { x, .. } => *x,
                _ => continue,
            };
            let made_here = self.made_before(input, first);
            let out = self.steps[last].node.output();
            let ok = made_here
                && self.homes[input] == Home::Arena
                && self.dtypes[input] == DType::F32
                && self.dtypes[out] == DType::F32
                && self.shapes[input].rank() == 4
                && self.shapes[out].rank() == 4;
            if !ok {
                continue;
            }
            for k in first..last {
                self.steps[k].fuse = Fuse::IntoNext;
            }
            self.steps[last].fuse = Fuse::Chain {
                expand,
                project,
                add: false,
            };
            self.names[last] = match (expand, project) {
                (true, true) => "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d",
                (true, false) => "XNNConv2d+XNNDepthwiseConv2d",
                _ => "XNNDepthwiseConv2d+XNNConv2d",
            };
            self.lifetimes[input].1 = self.lifetimes[input].1.max(last);
        }
    }

    /// Whether `v` is an arena value some step before `step` produced, other than a reshape
    /// (never a method tensor read in place: a fused step reads it where the node's own
    /// operands do not say).
    fn made_before(&self, v: usize, step: usize) -> bool {
        (0..step).any(|p| {
            self.steps[p].node.output() == v && !matches!(self.steps[p].node, Node::Reshape { .. })
        })
    }

    /// Runs each residual connection's add (`clamp(conv + r)`, same shapes) as the epilogue
    /// of the convolution or fused chain just before it, when only the add reads the
    /// convolution's output: MobileNetV2's ten adds stop being passes over memory (and, on
    /// several threads, waits for every thread). Bit-identical: the sum is rounded once
    /// either way.
    fn fuse_residuals(&mut self) {
        for i in 1..self.steps.len() {
            let Node::Binary {
                op: BinaryOp::Add,
                a,
                b,
                out,
                ..
            } = self.steps[i].node
            else {
                continue;
            };
            if self.steps[i].fuse != Fuse::No {
                continue;
            }
            let prev = &self.steps[i - 1];
            let c = prev.node.output();
            let r = if a == c && b != c {
                b
            } else if b == c && a != c {
                a
            } else {
                continue;
            };
            let f32_4d = |v: usize| {
                self.homes[v] == Home::Arena
                    && self.dtypes[v] == DType::F32
                    && self.shapes[v].rank() == 4
            };
            let ok = f32_4d(c)
                && f32_4d(r)
                && f32_4d(out)
                && self.shapes[r] == self.shapes[c]
                && self.shapes[out] == self.shapes[c]
                && self.lifetimes[c].1 == i
                && !self.outputs.iter().any(|&(_, o)| o == c);
            if !ok {
                continue;
            }
            let (fuse, input) = match (prev.fuse, &prev.prep, &prev.node) {
                (Fuse::No, Prep::Conv(cw), &Node::Conv { x, .. }) if cw.takes_residual() => {
                    (Fuse::ConvAdd, x)
                }
                (
                    Fuse::Chain {
                        expand,
                        project: true,
                        add: false,
                    },
                    Prep::Conv(cw),
                    _,
                ) if cw.takes_residual() => match chain_at(&self.steps, i - 1) {
                    Some((_, x)) => (
                        Fuse::Chain {
                            expand,
                            project: true,
                            add: true,
                        },
                        x,
                    ),
                    None => continue,
                },
                _ => continue,
            };
            if !(f32_4d(input) && self.made_before(input, i - 1)) {
                continue;
            }
            self.steps[i - 1].fuse = Fuse::IntoNext;
            self.steps[i].fuse = fuse;
            self.names[i] = match (fuse, self.names[i - 1]) {
                (Fuse::ConvAdd, _) => "XNNConv2d+XNNAdd",
                (_, "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d") => {
                    "XNNConv2d+XNNDepthwiseConv2d+XNNConv2d+XNNAdd"
                }
                _ => "XNNDepthwiseConv2d+XNNConv2d+XNNAdd",
            };
            self.lifetimes[input].1 = self.lifetimes[input].1.max(i);
        }
    }

    /// Propagates shapes from the inputs through every node and sizes every value.
    fn propagate(&mut self) -> Result<(), KernelError> {
        for i in 0..self.steps.len() {
            let s = infer(&self.steps[i], &self.shapes).map_err(|e| match e {
                KernelError::Shape(m) => {
                    KernelError::shape(format!("node {i} ({}): {m}", self.names[i]))
                }
                e => invalid(format!("node {i} ({}): {e}", self.names[i])),
            })?;
            let out = self.steps[i].node.output();
            self.shapes[out] = s;
        }
        for (v, s) in self.shapes.iter().enumerate() {
            self.sizes[v] = qexec::value_bytes(self.dtypes[v], s)?;
        }
        Ok(())
    }

    /// Places every arena value (first fit in execution order) and sizes the scratch buffer.
    fn plan(&mut self) -> Result<(), KernelError> {
        const ALIGN: usize = 64;
        let nn = self.steps.len();
        let nv = self.homes.len();
        // Events: values born at each node (inputs at -1 → before node 0), released after
        // their last use.
        let mut born: Vec<Vec<usize>> = vec![Vec::new(); nn + 1];
        let mut dies: Vec<Vec<usize>> = vec![Vec::new(); nn + 1];
        let mut is_input = vec![false; nv];
        for &(_, v) in &self.inputs {
            is_input[v] = true;
        }
        for v in 0..nv {
            if self.homes[v] != Home::Arena {
                continue;
            }
            let (s, e) = self.lifetimes[v];
            let b = if is_input[v] { 0 } else { s + 1 };
            // The outputs of steps fused into later ones are never written: no bytes.
            let produced = is_input[v]
                || self
                    .steps
                    .get(s)
                    .is_some_and(|st| st.node.output() == v && st.fuse != Fuse::IntoNext);
            if !produced {
                continue;
            }
            born[b.min(nn)].push(v);
            dies[(e + 1).min(nn)].push(v);
        }
        // A reshape whose input dies at it takes over the input's bytes: no copy.
        let mut alias_of = vec![usize::MAX; nv];
        for (s, st) in self.steps.iter().enumerate() {
            if let Node::Reshape { x, out, .. } = st.node {
                let arena = self.homes[x] == Home::Arena && self.homes[out] == Home::Arena;
                if arena && x != out && self.lifetimes[x].1 == s && !is_input[out] {
                    alias_of[out] = x;
                }
            }
        }
        let mut handed_over = vec![false; nv];
        let mut free: Vec<(usize, usize)> = Vec::new(); // sorted (offset, size)
        let mut top = 0usize;
        let alloc = |size: usize, free: &mut Vec<(usize, usize)>, top: &mut usize| -> usize {
            for k in 0..free.len() {
                let (o, s) = free[k];
                if s >= size {
                    if s == size {
                        free.remove(k);
                    } else {
                        free[k] = (o + size, s - size);
                    }
                    return o;
                }
            }
            // Grow the last free block if it ends at the top.
            if let Some(&(o, s)) = free.last() {
                if o + s == *top {
                    free.pop();
                    *top = o + size;
                    return o;
                }
            }
            let o = *top;
            *top += size;
            o
        };
        let release = |o: usize, size: usize, free: &mut Vec<(usize, usize)>| {
            let k = free.partition_point(|&(fo, _)| fo < o);
            free.insert(k, (o, size));
            // Coalesce with the next and the previous block.
            if k + 1 < free.len() && free[k].0 + free[k].1 == free[k + 1].0 {
                free[k].1 += free[k + 1].1;
                free.remove(k + 1);
            }
            if k > 0 && free[k - 1].0 + free[k - 1].1 == free[k].0 {
                free[k - 1].1 += free[k].1;
                free.remove(k);
            }
        };
        for t in 0..=nn {
            // Node t−1's output (and, at t = 0, the inputs) is placed before its inputs die.
            for &v in &born[t] {
                let x = alias_of[v];
                if x != usize::MAX && self.sizes[v] <= self.capacity[x] {
                    // x dies at this same t (its last use is the reshape producing v).
                    self.offsets[v] = self.offsets[x];
                    self.capacity[v] = self.capacity[x];
                    handed_over[x] = true;
                    continue;
                }
                let size = self.sizes[v].max(1).div_ceil(ALIGN) * ALIGN;
                let o = alloc(size, &mut free, &mut top);
                self.offsets[v] = o;
                self.capacity[v] = size;
            }
            for &v in &dies[t] {
                if !handed_over[v] {
                    release(self.offsets[v], self.capacity[v], &mut free);
                }
            }
        }
        if top as u64 > self.max_bytes {
            return Err(KernelError::unsupported(format!(
                "the delegate needs {top} bytes of memory, over the limit of {}",
                self.max_bytes
            )));
        }
        if self.arena.len() < top {
            self.arena = Buf::zeroed(top)?;
        }
        self.plan_scratch()
    }

    fn src(&self, v: usize) -> Src {
        match self.homes[v] {
            Home::Const(k) => Src::Const(k),
            Home::Packed => Src::Arena(0, 0),
            Home::Arena => Src::Arena(self.offsets[v], self.offsets[v] + self.sizes[v]),
        }
    }

    fn dst(&self, v: usize) -> core::ops::Range<usize> {
        self.offsets[v]..self.offsets[v] + self.sizes[v]
    }

    /// Runs node `i`.
    /// Runs node `i`; `ext[k]`, when set, is input k read in place from a method tensor, and
    /// `ext_out` the method tensor the output is written to in place.
    fn run_step(
        &mut self,
        i: usize,
        par: &dyn Parallel,
        ext: [Option<&[u8]>; 5],
        ext_out: Option<&mut [u8]>,
    ) -> Result<(), KernelError> {
        let st = &self.steps[i];
        let out = st.node.output();
        if let Node::Reshape { x, .. } = st.node {
            let in_arena = ext[0].is_none() && ext_out.is_none();
            if in_arena && self.homes[x] == Home::Arena && self.offsets[x] == self.offsets[out] {
                // The planner handed x's bytes to the reshape's output: nothing to move.
                return Ok(());
            }
        }
        let os = self.shapes[out];
        let dst = self.dst(out);
        let chain = match st.fuse {
            Fuse::Chain { .. } => Some(
                chain_at(&self.steps, i)
                    .ok_or_else(|| invalid("fused step without its convolutions"))?,
            ),
            _ => None,
        };
        // A step that runs the convolution before it and its add: the convolution, its input,
        // and the slot of the add's operand that the convolution wrote (the other is the
        // residual).
        let conv_add = match st.fuse {
            Fuse::ConvAdd => match (&self.steps[i - 1].prep, &self.steps[i - 1].node) {
                (Prep::Conv(cw), &Node::Conv { x, out: c, .. }) => Some((Some(cw), x, c)),
                _ => return Err(invalid("fused add without its convolution")),
            },
            Fuse::Chain { add: true, .. } => {
                let (_, x) = chain.ok_or_else(|| invalid("fused add without its chain"))?;
                Some((None, x, self.steps[i - 1].node.output()))
            }
            _ => None,
        };
        let (ins, n) = st.node.inputs();
        let conv_slot = match conv_add {
            Some((_, _, c)) => usize::from(ins[0] != c),
            None => 0,
        };
        let srcs = {
            let mut s = [Src::Arena(0, 0); 5];
            for k in 0..n {
                s[k] = self.src(ins[k]);
            }
            // A fused step reads its first convolution's input in the convolution's slot.
            if let Some(x) = chain.map(|(_, x)| x).or(conv_add.map(|(_, x, _)| x)) {
                s[conv_slot] = self.src(x);
            }
            s
        };
        let shapes = &self.shapes;
        let dst = match ext_out {
            Some(o) => Dst::Ext(o),
            None => Dst::Arena(dst),
        };
        let ([a, b, c, d, e], o) = io(self.arena.bytes_mut(), &self.consts, srcs, ext, dst)?;
        if let Prep::Q(q) = &st.prep {
            return qexec::run(
                q,
                &st.node,
                par,
                shapes,
                &self.dtypes,
                [a, b, c, d, e],
                o,
                &os,
                &mut self.qscratch,
            );
        }
        let o = f32s_mut(o)?;
        // With an add: the convolution's input, and the residual with the add's clamp.
        let (a, add) = match (conv_add, &st.node) {
            (Some(_), &Node::Binary { clamp, .. }) => {
                let (x, r) = if conv_slot == 0 { (a, b) } else { (b, a) };
                // Both operands as the output (new input shapes could make one broadcast,
                // and the convolution would then run at the output's size).
                if shapes[ins[0]] != os || shapes[ins[1]] != os {
                    return Err(KernelError::unsupported(
                        "a residual add fused into its convolution changed shape",
                    ));
                }
                let r = f32s(r)?;
                (x, Some(AddInto { r, clamp }))
            }
            (Some(_), _) => return Err(invalid("fused add without its add")),
            _ => (a, None),
        };
        // A convolution on its own, or with the add after it.
        let conv = match (conv_add, &st.node, &st.prep) {
            (Some((Some(cw), x, _)), _, _) => Some((cw, x)),
            (None, &Node::Conv { x, .. }, Prep::Conv(cw)) if chain.is_none() => Some((cw, x)),
            _ => None,
        };
        if let Some((cw, x)) = conv {
            let xs = shapes[x].dims();
            return cw.run(
                par,
                f32s(a)?,
                xs[0],
                xs[1],
                xs[2],
                o,
                os.dims()[1],
                os.dims()[2],
                &mut self.scratch,
                add,
            );
        }
        if let Some((mut chain, x)) = chain {
            let xs = shapes[x].dims();
            chain.add = add;
            return kernels::fused::run(
                par,
                chain,
                f32s(a)?,
                [xs[0], xs[1], xs[2]],
                o,
                [os.dims()[1], os.dims()[2]],
                &mut self.fused_scratch,
                kernels::fused::STRIPE_FLOATS,
            );
        }
        match (&st.node, &st.prep) {
            (
                &Node::Binary {
                    op,
                    a: va,
                    b: vb,
                    clamp,
                    ..
                },
                _,
            ) => binary(
                par,
                op,
                clamp,
                f32s(a)?,
                &shapes[va],
                f32s(b)?,
                &shapes[vb],
                o,
                &os,
            )?,
            (&Node::Unary { op, .. }, _) => unary(par, op, f32s(a)?, o)?,
            (&Node::Softmax { .. }, _) => {
                let row = os.dims().last().copied().unwrap_or(1);
                if row > 0 {
                    let l = level();
                    let x = f32s(a)?;
                    let x = x
                        .get(..o.len())
                        .ok_or_else(|| invalid("softmax input too short"))?;
                    pteron_kernels_cpu::par::for_chunks_mut(par, o, row * 64, 1, &|k, oc| {
                        let xs = &x[k * row * 64..k * row * 64 + oc.len()];
                        pteron_kernels_cpu::norm::softmax_rows(l, xs, oc, row)
                    });
                }
            }
            (&Node::FullyConnected { x, bias, clamp, .. }, Prep::Fc { filter, bias: cb }) => {
                let xs = &shapes[x];
                let ic = xs.back(1);
                let oc = os.back(1);
                let m = if ic == 0 { 0 } else { xs.count()? / ic };
                // Inputs: x, w (when dynamic), bias (when dynamic).
                let dyn_bias = if bias.is_some() && cb.is_none() {
                    Some(f32s(c)?)
                } else {
                    None
                };
                let bias = cb.as_deref().or(dyn_bias);
                fully_connected(par, f32s(a)?, m, ic, oc, filter, f32s(b)?, bias, clamp, o)?;
            }
            (&Node::Conv { x, .. }, Prep::Dw(dw)) => {
                let xs = shapes[x].dims();
                let g = Geom {
                    n: xs[0],
                    ih: xs[1],
                    iw: xs[2],
                    oh: os.dims()[1],
                    ow: os.dims()[2],
                    c: xs[3],
                };
                depthwise(par, dw, g, f32s(a)?, o)?;
            }
            (
                &Node::Pool {
                    kind,
                    win,
                    clamp,
                    x,
                    ..
                },
                _,
            ) => {
                let xs = shapes[x].dims();
                let g = Geom {
                    n: xs[0],
                    ih: xs[1],
                    iw: xs[2],
                    oh: os.dims()[1],
                    ow: os.dims()[2],
                    c: xs[3],
                };
                pool(par, kind, &win, clamp, g, f32s(a)?, o)?;
            }
            (&Node::GlobalAvgPool { x, clamp, .. }, _) => {
                let xs = shapes[x].dims();
                let r = xs.len();
                let outer: usize = xs[..r - 3].iter().product();
                global_mean(
                    level(),
                    f32s(a)?,
                    outer,
                    xs[r - 3] * xs[r - 2],
                    xs[r - 1],
                    clamp,
                    o,
                )?;
            }
            (&Node::Transpose { perm, x, .. }, _) => {
                layout::transpose(par, f32s(a)?, &shapes[x], &perm, o)?
            }
            (&Node::Reshape { .. }, _) => {
                let x = f32s(a)?;
                let n = o.len();
                o.copy_from_slice(
                    x.get(..n)
                        .ok_or_else(|| invalid("reshape input too short"))?,
                );
            }
            (&Node::Slice { x, .. }, _) => {
                let offs = slice_offsets(&st.node, &shapes[x]);
                layout::slice(
                    f32s(a)?,
                    &shapes[x],
                    &offs.dims()[..shapes[x].rank()],
                    &os,
                    o,
                )?
            }
            (
                &Node::Concat {
                    inputs, n, axis, ..
                },
                _,
            ) => {
                let all = [a, b, c, d, e];
                let mut parts: [(&[f32], Shape); 5] = [(&[], Shape::default()); 5];
                for k in 0..n {
                    parts[k] = (f32s(all[k])?, shapes[inputs[k]]);
                }
                layout::concat(&parts[..n], axis, o, &os)?
            }
            (&Node::Pad { pre, value, x, .. }, _) => {
                layout::pad(f32s(a)?, &shapes[x], pre.dims(), value, o, &os)?
            }
            (
                &Node::Resize {
                    align_corners,
                    legacy,
                    x,
                    ..
                },
                _,
            ) => {
                let xs = shapes[x].dims();
                layout::resize_bilinear(
                    f32s(a)?,
                    xs[0],
                    xs[1],
                    xs[2],
                    xs[3],
                    os.dims()[1],
                    os.dims()[2],
                    align_corners,
                    legacy,
                    o,
                )?
            }
            (
                &Node::Bmm {
                    a: va,
                    b: vb,
                    transpose_b,
                    ..
                },
                _,
            ) => {
                let (sa, sb) = (shapes[va], shapes[vb]);
                let (m, k) = (sa.back(2), sa.back(1));
                let n = os.back(1);
                let r = os.rank();
                let batch_dims = &os.dims()[..r - 2];
                let batches: usize = batch_dims.iter().product();
                // Strides of each operand's batch dims over the output's (0 where broadcast).
                let bstrides = |s: &Shape| {
                    let mut st = [0usize; MAX_DIMS];
                    let br = s.rank() - 2;
                    let off = (r - 2) - br;
                    let mut acc = 1;
                    for q in (0..br).rev() {
                        st[q + off] = if s.dims()[q] == 1 { 0 } else { acc };
                        acc *= s.dims()[q];
                    }
                    st
                };
                let (stra, strb) = (bstrides(&sa), bstrides(&sb));
                let index = |i: usize| {
                    let (mut ia, mut ib, mut rem) = (0, 0, i);
                    for q in (0..r - 2).rev() {
                        let x = rem % batch_dims[q];
                        rem /= batch_dims[q];
                        ia += x * stra[q];
                        ib += x * strb[q];
                    }
                    (ia, ib)
                };
                bmm(
                    par,
                    f32s(a)?,
                    f32s(b)?,
                    o,
                    batches,
                    &index,
                    m,
                    k,
                    n,
                    transpose_b,
                )?
            }
            (node, _) => {
                return Err(invalid(format!("node {node:?} has no prepared kernel")));
            }
        }
        Ok(())
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

/// The tensor dtype of a delegate argument of graph datatype `d`.
fn scalar_type(d: DType) -> ScalarType {
    match d {
        DType::F16 => ScalarType::Half,
        // Quantized constants the exporter leaves outside the delegate arrive as int8 / uint8.
        DType::QS8 { .. } => ScalarType::Char,
        DType::QU8 { .. } => ScalarType::Byte,
        // Other external values are float32 (checked at init).
        _ => ScalarType::Float,
    }
}

/// Whether a method tensor's bytes can stand in for a value's arena slot: a dtype the
/// delegate keeps as is (half is widened), the value's exact size, element-aligned.
fn in_place_form(d: DType, bytes: &[u8], size: usize) -> bool {
    let align = match d {
        DType::F32 => 4,
        DType::QS8 { .. } | DType::QU8 { .. } => 1,
        _ => return false,
    };
    bytes.len() == size && (bytes.as_ptr() as usize) % align == 0
}

/// Copies an input tensor's bytes into its arena slot (half widened to f32).
fn copy_in(d: DType, src: &[u8], dst: &mut [u8]) -> Result<(), KernelError> {
    match d {
        DType::F32 | DType::QS8 { .. } | DType::QU8 { .. } => {
            let src = src
                .get(..dst.len())
                .ok_or_else(|| invalid("input tensor too short"))?;
            dst.copy_from_slice(src);
        }
        DType::F16 => {
            let dst = f32s_mut(dst)?;
            let src = src
                .get(..dst.len() * 2)
                .ok_or_else(|| invalid("input tensor too short"))?;
            for (o, c) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        d => return Err(invalid(format!("external value of datatype {d:?}"))),
    }
    Ok(())
}

/// Copies an arena slot into an output tensor's bytes (f32 narrowed to half).
fn copy_out(d: DType, src: &[u8], dst: &mut [u8]) -> Result<(), KernelError> {
    match d {
        DType::F32 | DType::QS8 { .. } | DType::QU8 { .. } => dst
            .get_mut(..src.len())
            .ok_or_else(|| invalid("output tensor too short"))?
            .copy_from_slice(src),
        DType::F16 => {
            let src = f32s(src)?;
            let dst = dst
                .get_mut(..src.len() * 2)
                .ok_or_else(|| invalid("output tensor too short"))?;
            for (c, &v) in dst.chunks_exact_mut(2).zip(src) {
                c.copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
            }
        }
        d => return Err(invalid(format!("external value of datatype {d:?}"))),
    }
    Ok(())
}

/// The effective slice offsets (XNNPACK's rules for a given input shape).
fn slice_offsets(node: &Node, xs: &Shape) -> Shape {
    let mut o = Shape::default();
    if let Node::Slice { offsets, .. } = node {
        o = *offsets;
        for (i, v) in o.dims_mut().iter_mut().enumerate() {
            *v = (*v).min(xs.dims().get(i).copied().unwrap_or(0));
        }
    }
    o
}

fn shape_err(msg: impl Into<String>) -> KernelError {
    KernelError::shape(msg)
}

/// The output shape of a step given the current shapes.
fn infer(st: &Step, shapes: &[Shape]) -> Result<Shape, KernelError> {
    let need_rank = |s: &Shape, r: usize, what: &str| {
        if s.rank() != r {
            Err(shape_err(format!(
                "{what} of rank {}, expected {r}",
                s.rank()
            )))
        } else {
            Ok(())
        }
    };
    Ok(match (&st.node, &st.prep) {
        (&Node::Binary { a, b, .. }, _) => broadcast(&shapes[a], &shapes[b])?,
        (&Node::Unary { x, .. }, _) => shapes[x],
        (&Node::Softmax { x, .. }, _) => {
            if shapes[x].rank() == 0 {
                return Err(shape_err("softmax of a scalar"));
            }
            shapes[x]
        }
        (
            &Node::FullyConnected {
                x,
                w,
                bias,
                transpose_w,
                ..
            },
            _,
        ) => {
            let xs = shapes[x];
            if xs.rank() == 0 {
                return Err(shape_err("fully connected input of rank 0"));
            }
            let ws = shapes[w];
            need_rank(&ws, 2, "filter")?;
            let (ic, oc) = if transpose_w {
                (ws.dims()[0], ws.dims()[1])
            } else {
                (ws.dims()[1], ws.dims()[0])
            };
            if xs.back(1) != ic {
                return Err(shape_err(format!(
                    "input has {} channels, filter {ic}",
                    xs.back(1)
                )));
            }
            if let Some(b) = bias {
                if shapes[b].count()? != oc {
                    return Err(shape_err("bias size differs from the output channels"));
                }
            }
            let mut o = xs;
            let r = o.rank();
            o.dims_mut()[r - 1] = oc;
            o
        }
        (&Node::Conv { conv, x, .. }, _) => {
            let xs = shapes[x];
            need_rank(&xs, 4, "convolution input")?;
            let d = xs.dims();
            if d[3] != conv.in_channels() {
                return Err(shape_err(format!(
                    "input has {} channels, the convolution takes {}",
                    d[3],
                    conv.in_channels()
                )));
            }
            let (oh, ow) = if conv.kind == ConvKind::Deconv {
                conv.win.deconv_out_hw(d[1], d[2], conv.adjustment)?
            } else {
                conv.win.out_hw(d[1], d[2])?
            };
            Shape::new(&[d[0], oh, ow, conv.out_channels()])?
        }
        (&Node::Pool { win, x, .. }, _) => {
            let xs = shapes[x];
            need_rank(&xs, 4, "pooling input")?;
            let d = xs.dims();
            let (oh, ow) = win.out_hw(d[1], d[2])?;
            Shape::new(&[d[0], oh, ow, d[3]])?
        }
        (&Node::GlobalAvgPool { x, keep_dims, .. }, _) => {
            let xs = shapes[x];
            let r = xs.rank();
            if r < 3 {
                return Err(shape_err("global pooling input of rank below 3"));
            }
            let mut d = [0usize; MAX_DIMS];
            d[..r].copy_from_slice(xs.dims());
            if keep_dims {
                d[r - 3] = 1;
                d[r - 2] = 1;
                Shape::new(&d[..r])?
            } else {
                d[r - 3] = d[r - 1];
                Shape::new(&d[..r - 2])?
            }
        }
        (&Node::Transpose { perm, x, .. }, _) => {
            let xs = shapes[x];
            need_rank(&xs, perm.rank(), "transpose input")?;
            let mut d = [0usize; MAX_DIMS];
            for i in 0..perm.rank() {
                d[i] = xs.dims()[perm.dims()[i]];
            }
            Shape::new(&d[..perm.rank()])?
        }
        (&Node::Reshape { new_shape, x, .. }, _) => {
            let n = shapes[x].count()?;
            let mut o = new_shape;
            let dynamic = o.dims().iter().position(|&d| d == 0);
            match dynamic {
                Some(k) => {
                    let rest: usize = o
                        .dims()
                        .iter()
                        .filter(|&&d| d != 0)
                        .try_fold(1usize, |a, &d| a.checked_mul(d))
                        .ok_or(KernelError::SizeOverflow)?;
                    if rest == 0 || n % rest != 0 {
                        return Err(shape_err(format!(
                            "cannot reshape {} elements to {:?}",
                            n,
                            new_shape.dims()
                        )));
                    }
                    o.dims_mut()[k] = n / rest;
                }
                None => {
                    if o.count()? != n {
                        return Err(shape_err(format!(
                            "cannot reshape {} elements to {:?}",
                            n,
                            new_shape.dims()
                        )));
                    }
                }
            }
            o
        }
        (
            &Node::Slice {
                offsets, sizes, x, ..
            },
            _,
        ) => {
            let xs = shapes[x];
            need_rank(&xs, offsets.rank(), "slice input")?;
            let mut d = [0usize; MAX_DIMS];
            for i in 0..xs.rank() {
                let dim = xs.dims()[i];
                let off = offsets.dims()[i];
                let end = off
                    .checked_add(sizes.dims()[i])
                    .ok_or(KernelError::SizeOverflow)?;
                let size = if end == 0 {
                    dim.saturating_sub(off)
                } else {
                    end - off
                };
                let off = off.min(dim);
                d[i] = size.min(dim - off);
            }
            Shape::new(&d[..xs.rank()])?
        }
        (
            &Node::Concat {
                axis, inputs, n, ..
            },
            _,
        ) => {
            let first = shapes[inputs[0]];
            if axis >= first.rank() {
                return Err(shape_err(format!(
                    "concatenation axis {axis} of rank-{} inputs",
                    first.rank()
                )));
            }
            let mut o = first;
            let mut total = 0usize;
            for &v in &inputs[..n] {
                let s = shapes[v];
                if s.rank() != first.rank()
                    || s.dims()
                        .iter()
                        .zip(first.dims())
                        .enumerate()
                        .any(|(i, (a, b))| i != axis && a != b)
                {
                    return Err(shape_err("concatenated shapes differ off the axis"));
                }
                total = total
                    .checked_add(s.dims()[axis])
                    .ok_or(KernelError::SizeOverflow)?;
            }
            o.dims_mut()[axis] = total;
            o
        }
        (&Node::Pad { pre, post, x, .. }, _) => {
            let xs = shapes[x];
            if pre.rank() < xs.rank() {
                return Err(shape_err("fewer paddings than dimensions"));
            }
            let mut d = [0usize; MAX_DIMS];
            for i in 0..xs.rank() {
                d[i] = xs.dims()[i] + pre.dims()[i] + post.dims()[i];
            }
            Shape::new(&d[..xs.rank()])?
        }
        (
            &Node::Resize {
                height, width, x, ..
            },
            _,
        ) => {
            let xs = shapes[x];
            need_rank(&xs, 4, "resize input")?;
            Shape::new(&[xs.dims()[0], height, width, xs.dims()[3]])?
        }
        (
            &Node::Bmm {
                a, b, transpose_b, ..
            },
            _,
        ) => {
            let (sa, sb) = (shapes[a], shapes[b]);
            if sa.rank() < 2 || sb.rank() < 2 {
                return Err(shape_err("batch matrix multiply of rank below 2"));
            }
            let (m, k) = (sa.back(2), sa.back(1));
            let (kb, n) = if transpose_b {
                (sb.back(1), sb.back(2))
            } else {
                (sb.back(2), sb.back(1))
            };
            if k != kb {
                return Err(shape_err(format!("inner dims {k} and {kb} differ")));
            }
            let ba = Shape::new(&sa.dims()[..sa.rank() - 2])?;
            let bb = Shape::new(&sb.dims()[..sb.rank() - 2])?;
            let bo = broadcast(&ba, &bb)?;
            let mut d = [0usize; MAX_DIMS];
            let r = bo.rank();
            if r + 2 > MAX_DIMS {
                return Err(shape_err("batch matrix multiply of rank above 6"));
            }
            d[..r].copy_from_slice(bo.dims());
            d[r] = m;
            d[r + 1] = n;
            Shape::new(&d[..r + 2])?
        }
    })
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
        // New input shapes: propagate and, when they grow, re-plan.
        let mut changed = false;
        for k in 0..self.inputs.len() {
            let (ext, v) = self.inputs[k];
            let t = ctx.tensor(ext as usize)?;
            if t.dtype() != scalar_type(self.dtypes[v]) {
                return Err(KernelError::dtype(t.dtype(), "XNNPACK delegate input"));
            }
            let s = Self::arg_shape(t)?;
            if s != self.shapes[v] {
                self.shapes[v] = s;
                changed = true;
            }
        }
        if changed {
            self.propagate()?;
            if (0..self.homes.len())
                .any(|v| self.homes[v] == Home::Arena && self.sizes[v] > self.capacity[v])
            {
                self.plan()?;
            }
            // Scratch for the new spatial sizes.
            self.plan_scratch()?;
        }
        // Outputs take their shapes now: those written in place are borrowed at that size.
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            let info = *ctx.tensor(ext as usize)?;
            let s = self.shapes[v];
            if s.rank() == info.rank() {
                let mut sizes = [0usize; MAX_DIMS];
                for (j, &o) in info.dim_order().iter().enumerate() {
                    sizes[o as usize] = s.dims()[j];
                }
                ctx.resize(ext as usize, &sizes[..s.rank()])?;
            } else if s.numel() != Some(info.numel()) {
                // A scalar declared as [1] keeps the tensor's rank; anything else is an error.
                return Err(KernelError::shape(format!(
                    "output {ext} of shape {:?} does not fit the tensor's {:?}",
                    s.dims(),
                    info.sizes()
                )));
            }
        }
        // External values used in place (no copy): same bytes as the arena copy would hold,
        // element-aligned; the rest are copied in here and out at the end.
        self.ext_in.fill(None);
        for k in 0..self.inputs.len() {
            let (ext, v) = self.inputs[k];
            let ([t], []) = ctx.io([ext as usize], [])?;
            let d = self.dtypes[v];
            if self.may_use_in_place[v] && in_place_form(d, t.bytes, self.sizes[v]) {
                self.ext_in[v] = Some(ext);
                continue;
            }
            self.ext_in[v] = None;
            let r = self.dst(v);
            let dst = self
                .arena
                .bytes_mut()
                .get_mut(r)
                .ok_or_else(|| invalid("input outside the arena"))?;
            copy_in(d, t.bytes, dst)?;
        }
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            let ([], [t]) = ctx.io([], [ext as usize])?;
            let ok =
                self.may_use_in_place[v] && in_place_form(self.dtypes[v], t.bytes, self.sizes[v]);
            self.ext_out[v] = ok.then_some(ext);
        }
        // A reshape of an input read in place is that input too (not when the reshape's
        // output is an external output: those are written or copied out).
        for i in 0..self.steps.len() {
            if let Node::Reshape { x, out, .. } = self.steps[i].node {
                let internal = !self.outputs.iter().any(|&(_, o)| o == out);
                if internal && self.ext_in[x].is_some() {
                    self.ext_in[out] = self.ext_in[x];
                }
            }
        }
        let par = ctx.parallel();
        if let Some(p) = &mut self.profile {
            p.times.fill((Duration::ZERO, false));
        }
        for i in 0..self.steps.len() {
            if self.steps[i].fuse == Fuse::IntoNext {
                continue;
            }
            let t0 = self.profile.as_ref().map(|_| Instant::now());
            self.run_step_with(ctx, i, par).map_err(|e| match e {
                KernelError::Invalid(m) => invalid(format!("node {i} ({}): {m}", self.names[i])),
                e => e,
            })?;
            let out = self.steps[i].node.output();
            if self.dtypes[out] == DType::F16 {
                let r = self.dst(out);
                round_to_f16(f32s_mut(&mut self.arena.bytes_mut()[r])?);
            }
            if let (Some(p), Some(t0)) = (&mut self.profile, t0) {
                p.times[i] = (t0.elapsed(), true);
            }
        }
        if let Some(p) = &mut self.profile {
            let (steps, shapes) = (&self.steps, &self.shapes);
            p.sink
                .add_run(p.graph, &p.times, |i| shapes[steps[i].node.output()]);
        }
        for k in 0..self.outputs.len() {
            let (ext, v) = self.outputs[k];
            if self.ext_out[v].is_some() {
                continue;
            }
            let ([], [t]) = ctx.io([], [ext as usize])?;
            let r = self.dst(v);
            let src = self
                .arena
                .bytes()
                .get(r)
                .ok_or_else(|| invalid("output outside the arena"))?;
            copy_out(self.dtypes[v], src, t.bytes)?;
        }
        Ok(())
    }

    fn memory_bytes(&self) -> usize {
        self.bytes()
    }
}

impl Executable {
    /// Runs node `i`, borrowing from the method the operands and output used in place.
    fn run_step_with(
        &mut self,
        ctx: &mut KernelContext<'_, '_>,
        i: usize,
        par: &dyn Parallel,
    ) -> Result<(), KernelError> {
        if let Node::Reshape { out, .. } = self.steps[i].node {
            if self.ext_in[out].is_some() {
                // Its output is the method tensor its input is: nothing to move.
                return Ok(());
            }
        }
        let (ins, n) = self.steps[i].node.inputs();
        // Method arguments per operand (unused slots repeat the first one: inputs may be
        // borrowed more than once).
        let mut args = [usize::MAX; 5];
        let mut first = usize::MAX;
        for k in 0..n {
            if let Some(e) = self.ext_in[ins[k]] {
                args[k] = e as usize;
                if first == usize::MAX {
                    first = e as usize;
                }
            }
        }
        let out = self.ext_out[self.steps[i].node.output()].map(|e| e as usize);
        if first == usize::MAX {
            return match out {
                None => self.run_step(i, par, [None; 5], None),
                Some(o) => {
                    let ([], [t]) = ctx.io([], [o])?;
                    self.run_step(i, par, [None; 5], Some(t.bytes))
                }
            };
        }
        let used = args.map(|a| a != usize::MAX);
        let borrow = args.map(|a| if a == usize::MAX { first } else { a });
        fn pick<'t>(ts: &[TensorRef<'t>; 5], used: [bool; 5]) -> [Option<&'t [u8]>; 5] {
            core::array::from_fn(|k| used[k].then_some(ts[k].bytes))
        }
        match out {
            None => {
                let (ts, []) = ctx.io(borrow, [])?;
                self.run_step(i, par, pick(&ts, used), None)
            }
            Some(o) => {
                let (ts, [t]) = ctx.io(borrow, [o])?;
                self.run_step(i, par, pick(&ts, used), Some(t.bytes))
            }
        }
    }

    fn plan_scratch(&mut self) -> Result<(), KernelError> {
        let mut scratch = 0usize;
        for st in &self.steps {
            if let (Prep::Conv(cw), Node::Conv { x, .. }) = (&st.prep, &st.node) {
                let s = &self.shapes[*x];
                if s.rank() == 4 {
                    scratch = scratch.max(cw.scratch_len(s.dims()[1], s.dims()[2])?);
                }
            }
        }
        // Fused pointwise-depthwise steps: a band of widened rows per thread of the machine
        // (a pool of more threads runs as many bands as fit).
        let bands = self.fused_bands;
        let mut fused = 0usize;
        for i in 0..self.steps.len() {
            if let Some((chain, x)) = chain_at(&self.steps, i) {
                let (xs, os) = (self.shapes[x], self.shapes[self.steps[i].node.output()]);
                if xs.rank() == 4 && os.rank() == 4 {
                    let (iw, ow) = (xs.dims()[2], os.dims()[2]);
                    let f = kernels::fused::scratch_floats(
                        &chain,
                        iw,
                        ow,
                        kernels::fused::STRIPE_FLOATS,
                        bands,
                    )
                    .ok_or(KernelError::SizeOverflow)?;
                    fused = fused.max(f);
                }
            }
        }
        let mut qscratch = 0usize;
        for st in &self.steps {
            if let Prep::Q(q) = &st.prep {
                qscratch = qscratch.max(qexec::scratch_len(q, &st.node, &self.shapes));
            }
        }
        if (scratch as u64)
            .saturating_add(fused as u64)
            .saturating_mul(4)
            .saturating_add(qscratch as u64)
            > self.max_bytes
        {
            return Err(KernelError::unsupported("scratch memory over the limit"));
        }
        if self.qscratch.len() < qscratch {
            self.qscratch
                .try_reserve_exact(qscratch - self.qscratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.qscratch.resize(qscratch, 0);
        }
        if self.fused_scratch.len() < fused {
            self.fused_scratch
                .try_reserve_exact(fused - self.fused_scratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.fused_scratch.resize(fused, 0.0);
        }
        if self.scratch.len() < scratch {
            self.scratch
                .try_reserve_exact(scratch - self.scratch.len())
                .map_err(|_| KernelError::unsupported("cannot allocate scratch memory"))?;
            self.scratch.resize(scratch, 0.0);
        }
        Ok(())
    }
}
