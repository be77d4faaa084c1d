//! The XNNPACK graph as pteron runs it: values (datatype, declared shape, where the data comes
//! from) and nodes (operation, parameters, value indices), built from the verified flatbuffer
//! with every id, index, rank, flag and constant size checked.
//!
//! Value ids in the payload (`id_out`, and the ids nodes name) are serialized ids, remapped here
//! to dense indices in definition order, as ExecuTorch's runtime remaps them to XNNPACK's.

use std::collections::HashMap;

use pteron_core::{KernelError, NamedDataMap};

use crate::blob::Blob;
use crate::schema;
use crate::util::{Shape, MAX_DIMS};

/// `XNN_INVALID_VALUE_ID`: no value (an absent bias, an unused concatenation input) or, as an
/// external id, an internal value.
pub const INVALID_ID: u32 = u32::MAX;
/// `num_externs` above this is refused, as in ExecuTorch.
pub const MAX_EXTERNS: u32 = 4096;
/// Most values and nodes a graph may declare.
pub const MAX_VALUES: usize = 1 << 20;

const FLAG_EXTERNAL_INPUT: u32 = 1;
const FLAG_EXTERNAL_OUTPUT: u32 = 2;
/// Node flags.
const XNN_FLAG_TRANSPOSE_WEIGHTS: u32 = 1;
const XNN_FLAG_TRANSPOSE_B: u32 = 1;
const XNN_FLAG_TENSORFLOW_LEGACY_MODE: u32 = 4;
const XNN_FLAG_ALIGN_CORNERS: u32 = 8;
const XNN_FLAG_KEEP_DIMS: u32 = 0x40;

/// Element types of values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum DType {
    F32,
    /// IEEE half. Computed in float32 and rounded to half wherever a node writes it (as
    /// XNNPACK's F16C kernels store it); the arena holds it as float32.
    F16,
    /// `qint8`: `real = scale · (q − zp)`, q an i8.
    QS8 {
        scale: f32,
        zp: i32,
    },
    /// `quint8`: as `QS8` with a u8.
    QU8 {
        scale: f32,
        zp: i32,
    },
    /// `qint32` (biases): `real = scale · q`.
    QS32 {
        scale: f32,
    },
    /// `qcint8` (weights): i8 with one scale per index of dim `axis`, zero point 0;
    /// `scales` indexes [`Graph::scales`].
    QC8 {
        axis: u8,
        scales: u32,
    },
    /// `qcint32` (biases): i32 with one scale per channel.
    QC32 {
        axis: u8,
        scales: u32,
    },
    /// `qcint4` (weights `[oc, ic]`): 4-bit, zero point 8, one scale per channel.
    QC4 {
        axis: u8,
        scales: u32,
    },
    /// `qbint4` (weights `[oc, ic]`): 4-bit, zero point 8, one scale per `block` inputs of
    /// each output (bf16 values, widened).
    QB4 {
        block: u32,
        scales: u32,
    },
    /// `qdint8`: i8 quantized at run time, one scale and zero point per row (the last
    /// `nonbatch` dims form a row).
    QD8 {
        nonbatch: u8,
    },
}

impl DType {
    /// Bytes per element in the payload and in delegate arguments (4-bit types: see
    /// [`DType::payload_bytes`]).
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::QS32 { .. } | DType::QC32 { .. } => 4,
            DType::F16 => 2,
            _ => 1,
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16)
    }
    /// 8-bit activations with static parameters.
    pub fn is_q8(self) -> bool {
        matches!(self, DType::QS8 { .. } | DType::QU8 { .. })
    }
    /// Bytes of data a value of this type and `shape` holds in the payload.
    pub fn payload_bytes(self, shape: &Shape) -> Option<usize> {
        match self {
            DType::QC4 { .. } | DType::QB4 { .. } => {
                // Rows of packed nibbles, the input-channel dim padded to even.
                let d = shape.dims();
                let (rows, cols) = match d.len() {
                    0 => (1, 1),
                    n => (
                        d[..n - 1]
                            .iter()
                            .try_fold(1usize, |a, &x| a.checked_mul(x))?,
                        d[n - 1],
                    ),
                };
                rows.checked_mul(cols.div_ceil(2))
            }
            _ => shape.numel()?.checked_mul(self.size()),
        }
    }
}

fn datatype_name(d: schema::XNNDatatype) -> String {
    d.variant_name()
        .map(|s| s.trim_start_matches("xnn_datatype_").to_string())
        .unwrap_or_else(|| format!("#{}", d.0))
}

/// Where a value's data comes from.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    /// Computed by a node.
    Internal,
    /// `args[ext]` of the delegate call, read before the graph runs.
    Input(u32),
    /// `args[ext]` of the delegate call, written after the graph ran.
    Output(u32),
    /// Constant bytes (at least `numel × element size`).
    Constant(&'a [u8]),
    /// A float constant computed when the graph is prepared (a filter reordered and folded
    /// from a portable program's tensors; see [`crate::nhwc`]).
    Computed(&'a dyn ConstSource),
}

impl Kind<'_> {
    /// Stored or computed constant data.
    pub fn is_constant(&self) -> bool {
        matches!(self, Kind::Constant(_) | Kind::Computed(_))
    }
}

/// Produces a computed constant's values (f32, in the value's declared shape and order) when
/// the graph is prepared; the values are dropped once packed.
pub trait ConstSource: Sync + std::fmt::Debug {
    fn values(&self) -> Result<Vec<f32>, KernelError>;
    /// The values as `[rows, cols]` rows already in the declared order, each row times
    /// `scale[row]` when given, for a packer that reads them in place (no copy).
    fn scaled_rows(&self) -> Option<(&[f32], Option<&[f32]>)> {
        None
    }
    /// The engine has packed the values and will not ask for them again.
    fn done(&self) {}
}

#[derive(Clone, Copy, Debug)]
pub struct Value<'a> {
    pub dtype: DType,
    /// The declared shape (for inputs: the shape exported with; for constants: their shape).
    pub shape: Shape,
    pub kind: Kind<'a>,
}

/// Elementwise operations of two inputs (NumPy broadcasting).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    /// `x < 0 ? x·slope : x` with the slope broadcast over `x`.
    Prelu,
}

/// Elementwise operations of one input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    Clamp(f32, f32),
    Sigmoid,
    Tanh,
    Gelu,
    Hardswish,
    LeakyRelu(f32),
    Elu(f32),
    Sqrt,
    Rsqrt,
    Exp,
    Log,
    Abs,
    Neg,
    Square,
    Floor,
    Ceil,
    Sin,
    Cos,
    Copy,
}

/// A fused output clamp (`output_min_max`), `None` when unbounded.
pub type Clamp = Option<(f32, f32)>;

/// Geometry of a 2-d convolution or pooling window (NHWC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub pad_top: usize,
    pub pad_right: usize,
    pub pad_bottom: usize,
    pub pad_left: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
}

impl Window {
    /// A `k × k` window of stride `stride`, dilation 1, `pad` on every side.
    pub fn square(k: usize, stride: usize, pad: usize) -> Window {
        Window {
            pad_top: pad,
            pad_right: pad,
            pad_bottom: pad,
            pad_left: pad,
            kh: k,
            kw: k,
            sh: stride,
            sw: stride,
            dh: 1,
            dw: 1,
        }
    }

    fn eff_h(&self) -> usize {
        (self.kh - 1) * self.dh + 1
    }
    fn eff_w(&self) -> usize {
        (self.kw - 1) * self.dw + 1
    }
    /// Output height and width of a convolution or pooling over `ih × iw` (XNNPACK's rule:
    /// `doz(padded, effective kernel) / stride + 1`).
    pub fn out_hw(&self, ih: usize, iw: usize) -> Result<(usize, usize), KernelError> {
        let ph = ih
            .checked_add(self.pad_top + self.pad_bottom)
            .ok_or(KernelError::SizeOverflow)?;
        let pw = iw
            .checked_add(self.pad_left + self.pad_right)
            .ok_or(KernelError::SizeOverflow)?;
        Ok((
            ph.saturating_sub(self.eff_h()) / self.sh + 1,
            pw.saturating_sub(self.eff_w()) / self.sw + 1,
        ))
    }
    /// Output height and width of a transposed convolution over `ih × iw` with `adjustment`.
    pub fn deconv_out_hw(
        &self,
        ih: usize,
        iw: usize,
        adj: (usize, usize),
    ) -> Result<(usize, usize), KernelError> {
        let f = |i: usize, s: usize, a: usize, eff: usize, pad: usize| -> Option<usize> {
            let full = s
                .checked_mul(i.checked_sub(1)?)?
                .checked_add(a)?
                .checked_add(eff)?;
            Some(full.saturating_sub(pad))
        };
        let oh = f(
            ih,
            self.sh,
            adj.0,
            self.eff_h(),
            self.pad_top + self.pad_bottom,
        );
        let ow = f(
            iw,
            self.sw,
            adj.1,
            self.eff_w(),
            self.pad_left + self.pad_right,
        );
        match (oh, ow) {
            (Some(h), Some(w)) => Ok((h, w)),
            _ => Err(KernelError::shape(
                "transposed convolution of an empty input or with overflowing size",
            )),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    Conv,
    Depthwise,
    Deconv,
}

#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub kind: ConvKind,
    pub win: Window,
    pub groups: usize,
    pub group_in: usize,
    pub group_out: usize,
    pub adjustment: (usize, usize),
}

impl Conv {
    /// A 1×1 convolution of stride 1, no padding, one group: `cin` to `cout` channels.
    pub fn pointwise(cin: usize, cout: usize) -> Conv {
        Conv {
            kind: ConvKind::Conv,
            win: Window::square(1, 1, 0),
            groups: 1,
            group_in: cin,
            group_out: cout,
            adjustment: (0, 0),
        }
    }

    pub fn in_channels(&self) -> usize {
        self.groups * self.group_in
    }
    pub fn out_channels(&self) -> usize {
        self.groups * self.group_out
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg,
}

/// One node; `usize` fields are value indices.
#[derive(Clone, Debug)]
pub enum Node {
    Binary {
        op: BinaryOp,
        a: usize,
        b: usize,
        out: usize,
        clamp: Clamp,
    },
    Unary {
        op: UnaryOp,
        x: usize,
        out: usize,
    },
    FullyConnected {
        x: usize,
        w: usize,
        bias: Option<usize>,
        out: usize,
        clamp: Clamp,
        /// The filter is `[in, out]` instead of `[out, in]`.
        transpose_w: bool,
    },
    Conv {
        conv: Conv,
        x: usize,
        w: usize,
        bias: Option<usize>,
        out: usize,
        clamp: Clamp,
    },
    Pool {
        kind: PoolKind,
        win: Window,
        x: usize,
        out: usize,
        clamp: Clamp,
    },
    GlobalAvgPool {
        x: usize,
        out: usize,
        keep_dims: bool,
        clamp: Clamp,
    },
    Softmax {
        x: usize,
        out: usize,
    },
    Transpose {
        perm: Shape,
        x: usize,
        out: usize,
    },
    Reshape {
        new_shape: Shape,
        x: usize,
        out: usize,
    },
    Slice {
        offsets: Shape,
        sizes: Shape,
        x: usize,
        out: usize,
    },
    Concat {
        axis: usize,
        inputs: [usize; 5],
        n: usize,
        out: usize,
    },
    Pad {
        pre: Shape,
        post: Shape,
        value: f32,
        x: usize,
        out: usize,
    },
    Resize {
        height: usize,
        width: usize,
        align_corners: bool,
        legacy: bool,
        x: usize,
        out: usize,
    },
    Bmm {
        a: usize,
        b: usize,
        out: usize,
        transpose_b: bool,
    },
}

impl Node {
    /// The values this node reads, in order (`None` for absent optional inputs).
    pub fn inputs(&self) -> ([usize; 5], usize) {
        let mut v = [0usize; 5];
        let mut n = 0;
        let mut push = |x: usize| {
            v[n] = x;
            n += 1;
        };
        match *self {
            Node::Binary { a, b, .. } | Node::Bmm { a, b, .. } => {
                push(a);
                push(b);
            }
            Node::FullyConnected { x, w, bias, .. } | Node::Conv { x, w, bias, .. } => {
                push(x);
                push(w);
                if let Some(b) = bias {
                    push(b);
                }
            }
            Node::Concat { inputs, n: k, .. } => {
                for &i in &inputs[..k] {
                    push(i);
                }
            }
            Node::Unary { x, .. }
            | Node::Pool { x, .. }
            | Node::GlobalAvgPool { x, .. }
            | Node::Softmax { x, .. }
            | Node::Transpose { x, .. }
            | Node::Reshape { x, .. }
            | Node::Slice { x, .. }
            | Node::Pad { x, .. }
            | Node::Resize { x, .. } => push(x),
        }
        (v, n)
    }

    pub fn output(&self) -> usize {
        match *self {
            Node::Binary { out, .. }
            | Node::Unary { out, .. }
            | Node::FullyConnected { out, .. }
            | Node::Conv { out, .. }
            | Node::Pool { out, .. }
            | Node::GlobalAvgPool { out, .. }
            | Node::Softmax { out, .. }
            | Node::Transpose { out, .. }
            | Node::Reshape { out, .. }
            | Node::Slice { out, .. }
            | Node::Concat { out, .. }
            | Node::Pad { out, .. }
            | Node::Resize { out, .. }
            | Node::Bmm { out, .. } => out,
        }
    }
}

/// A checked graph.
pub struct Graph<'a> {
    pub values: Vec<Value<'a>>,
    pub nodes: Vec<Node>,
    /// `(external id, value)` of the inputs and of the outputs, sorted by external id.
    pub inputs: Vec<(u32, usize)>,
    pub outputs: Vec<(u32, usize)>,
    /// The node types, by name, for messages.
    pub node_names: Vec<&'static str>,
    /// Per-channel and blockwise scales of quantized values (see [`DType`]).
    pub scales: Vec<Vec<f32>>,
}

impl Graph<'_> {
    /// Folds a quantized clamp into the int8 convolution or fully connected node that
    /// produces its input, as XNNPACK's subgraph fusion does, when that changes no output: the
    /// clamp's input and output have the same quantization (so it only narrows the range), its
    /// input is internal, written by that node alone and read by the clamp alone, and nothing
    /// reads the clamp's output before the clamp. Two clamps in a row are one clamp to the
    /// intersection (quantized bounds are monotonic), so the outputs are the same and the
    /// clamp's pass over the tensor is saved. Returns how many clamps were folded.
    pub fn fuse_int8_clamps(&mut self) -> usize {
        let nv = self.values.len();
        let mut reads = vec![0usize; nv];
        let mut first_read = vec![usize::MAX; nv];
        let mut writers = vec![0usize; nv];
        let mut producer = vec![usize::MAX; nv];
        for (i, n) in self.nodes.iter().enumerate() {
            let (ins, k) = n.inputs();
            for &v in &ins[..k] {
                if v < nv {
                    reads[v] += 1;
                    first_read[v] = first_read[v].min(i);
                }
            }
            let o = n.output();
            if o < nv {
                writers[o] += 1;
                producer[o] = producer[o].min(i);
            }
        }
        let mut fold = vec![false; self.nodes.len()];
        for c in 0..self.nodes.len() {
            let Node::Unary {
                op: UnaryOp::Clamp(lo, hi),
                x,
                out,
            } = self.nodes[c]
            else {
                continue;
            };
            if x >= nv || out >= nv {
                continue;
            }
            let same_q = matches!(
                (self.values[x].dtype, self.values[out].dtype),
                (DType::QS8 { scale: s1, zp: z1 }, DType::QS8 { scale: s2, zp: z2 })
                    if s1 == s2 && z1 == z2
            );
            let p = producer[x];
            if !same_q
                || !matches!(self.values[x].kind, Kind::Internal)
                || reads[x] != 1
                || writers[x] != 1
                || first_read[out] <= c
                || p >= c
                || fold[p]
            {
                continue;
            }
            let narrowed = |cl: Clamp| {
                let (a, b) = cl.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let (a, b) = (a.max(lo), b.min(hi));
                (a <= b).then_some((a, b))
            };
            match &mut self.nodes[p] {
                Node::Conv { out: o, clamp, .. } | Node::FullyConnected { out: o, clamp, .. }
                    if *o == x =>
                {
                    let Some(nc) = narrowed(*clamp) else {
                        continue;
                    };
                    *clamp = Some(nc);
                    *o = out;
                }
                _ => continue,
            }
            fold[c] = true;
        }
        let folded = fold.iter().filter(|&&f| f).count();
        if folded > 0 {
            let mut keep = fold.iter().map(|&f| !f);
            self.nodes.retain(|_| keep.next().unwrap_or(true));
            let mut keep = fold.iter().map(|&f| !f);
            self.node_names.retain(|_| keep.next().unwrap_or(true));
        }
        folded
    }
}

fn invalid(msg: impl Into<String>) -> KernelError {
    KernelError::invalid(msg)
}

fn unsupported(msg: impl Into<String>) -> KernelError {
    KernelError::unsupported(msg)
}

/// A `[u32]` vector as a shape (rank ≤ 6).
fn shape_of(v: Option<flatbuffers::Vector<'_, u32>>, what: &str) -> Result<Shape, KernelError> {
    let Some(v) = v else {
        return Shape::new(&[]);
    };
    if v.len() > MAX_DIMS {
        return Err(unsupported(format!(
            "{what} has {} dimensions, more than XNNPACK's {MAX_DIMS}",
            v.len()
        )));
    }
    let mut d = [0usize; MAX_DIMS];
    for (i, x) in v.iter().enumerate() {
        d[i] = x as usize;
    }
    Shape::new(&d[..v.len()])
}

/// Constant bytes of entry `idx` (`constant_buffer_idx` / `scale_buffer_idx`): the blob's
/// constant region, the named data by key, or the legacy inline buffer.
pub fn constant_bytes<'a>(
    blob: &Blob<'a>,
    named: &dyn NamedDataMap<'a>,
    idx: u32,
) -> Result<&'a [u8], KernelError> {
    let g = &blob.graph;
    let i = idx as usize;
    match blob.constants {
        None => {
            let cb = g
                .constant_buffer()
                .ok_or_else(|| invalid("constant without a constant_buffer"))?;
            if i >= cb.len() {
                return Err(invalid(format!(
                    "constant buffer index {idx} out of range ({} buffers)",
                    cb.len()
                )));
            }
            Ok(cb.get(i).storage().map_or(&[][..], |s| s.bytes()))
        }
        Some(region) => {
            let cd = g
                .constant_data()
                .ok_or_else(|| invalid("constant without constant_data"))?;
            if i >= cd.len() {
                return Err(invalid(format!(
                    "constant data index {idx} out of range ({} entries)",
                    cd.len()
                )));
            }
            let e = cd.get(i);
            match e.named_key() {
                Some(key) if !key.is_empty() => {
                    let bytes = named
                        .get(key)
                        .map_err(|err| invalid(format!("named data {key:?}: {err}")))?
                        .ok_or_else(|| {
                            invalid(format!(
                                "constant {idx}: named data {key:?} is in neither the program nor its data file"
                            ))
                        })?;
                    // The entry's size, when it states one, must fit the named blob.
                    let size = e.size_();
                    if size > bytes.len() as u64 {
                        return Err(invalid(format!(
                            "constant {idx}: named data {key:?} has {} bytes, the graph says {size}",
                            bytes.len()
                        )));
                    }
                    Ok(if size > 0 {
                        &bytes[..size as usize]
                    } else {
                        bytes
                    })
                }
                _ => {
                    let (off, size) = (e.offset(), e.size_());
                    let len = region.len() as u64;
                    match off.checked_add(size) {
                        Some(end) if end <= len => Ok(&region[off as usize..end as usize]),
                        _ => Err(invalid(format!(
                            "constant {idx} at offset {off} with {size} bytes lies outside the {len}-byte constant region"
                        ))),
                    }
                }
            }
        }
    }
}

fn node_name(t: schema::XNodeUnion) -> &'static str {
    t.variant_name().unwrap_or("unknown node type")
}

struct Builder {
    ids: HashMap<u32, usize>,
}

impl Builder {
    /// The value index of serialized id `id`.
    fn id(&self, id: u32, what: &str) -> Result<usize, KernelError> {
        self.ids
            .get(&id)
            .copied()
            .ok_or_else(|| invalid(format!("{what} names value id {id}, which is not defined")))
    }
    fn opt_id(&self, id: u32, what: &str) -> Result<Option<usize>, KernelError> {
        if id == INVALID_ID {
            Ok(None)
        } else {
            self.id(id, what).map(Some)
        }
    }
}

fn min_max(n: &schema::XNode<'_>) -> Result<Clamp, KernelError> {
    match n.output_min_max() {
        None => Ok(None),
        Some(m) => {
            let (lo, hi) = (m.output_min(), m.output_max());
            if lo.is_nan() || hi.is_nan() || lo > hi {
                return Err(invalid(format!("output clamp [{lo}, {hi}] is not a range")));
            }
            if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
                Ok(None)
            } else {
                Ok(Some((lo, hi)))
            }
        }
    }
}

fn check_flags(name: &str, flags: u32, allowed: u32) -> Result<(), KernelError> {
    if flags & !allowed != 0 {
        return Err(unsupported(format!(
            "{name} with flags {flags:#x} (supported: {allowed:#x})"
        )));
    }
    Ok(())
}

/// Parses the verified graph into values and nodes.
pub fn build<'a>(blob: &Blob<'a>, named: &dyn NamedDataMap<'a>) -> Result<Graph<'a>, KernelError> {
    let g = &blob.graph;
    let num_externs = g.num_externs();
    if num_externs > MAX_EXTERNS {
        return Err(invalid(format!(
            "num_externs {num_externs} exceeds {MAX_EXTERNS}"
        )));
    }
    let xvalues = g
        .xvalues()
        .ok_or_else(|| invalid("graph without xvalues"))?;
    let xnodes = g.xnodes().ok_or_else(|| invalid("graph without xnodes"))?;
    if xvalues.len() > MAX_VALUES || xnodes.len() > MAX_VALUES {
        return Err(invalid(format!(
            "graph with {} values and {} nodes exceeds {MAX_VALUES}",
            xvalues.len(),
            xnodes.len()
        )));
    }

    // Values.
    let mut values: Vec<Value<'a>> = Vec::with_capacity(xvalues.len());
    let mut ids = HashMap::with_capacity(xvalues.len());
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut ext_seen = vec![false; num_externs as usize];
    let mut scales: Vec<Vec<f32>> = Vec::new();
    for (vi, xv) in xvalues.iter().enumerate() {
        let (t, q) = match xv.xvalue_union_type() {
            schema::XValueUnion::XNNTensorValue => (
                xv.xvalue_union_as_xnntensor_value()
                    .ok_or_else(|| invalid(format!("value {vi}: bad tensor value")))?,
                None,
            ),
            schema::XValueUnion::XNNQuantizedTensorValue => {
                let q = xv
                    .xvalue_union_as_xnnquantized_tensor_value()
                    .ok_or_else(|| invalid(format!("value {vi}: bad quantized tensor")))?;
                let t = q.tensor_value().ok_or_else(|| {
                    invalid(format!("value {vi}: quantized tensor without tensor_value"))
                })?;
                (t, Some(q))
            }
            other => {
                return Err(unsupported(format!(
                    "value {vi}: value type {}",
                    other.variant_name().unwrap_or("unknown")
                )))
            }
        };
        let shape = shape_of(t.dims(), &format!("value {vi}"))?;
        let dtype = value_dtype(blob, named, vi, &t, q, &shape, &mut scales)?;
        if t.dq_datatype() != schema::XNNDatatype::xnn_datatype_invalid {
            return Err(unsupported(format!(
                "value {vi}: dynamic quantization to {} (legacy dq_datatype)",
                datatype_name(t.dq_datatype())
            )));
        }
        let numel = dtype
            .payload_bytes(&shape)
            .ok_or_else(|| invalid(format!("value {vi}: size overflows")))?;
        let flags = t.flags();
        if flags & !(FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT) != 0 {
            return Err(invalid(format!(
                "value {vi}: unsupported flag bits {flags:#x}"
            )));
        }
        let ext = t.external_id();
        let kind = if flags != 0 {
            if flags == FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT {
                return Err(unsupported(format!(
                    "value {vi}: both an external input and an external output"
                )));
            }
            if ext >= num_externs {
                return Err(invalid(format!(
                    "value {vi}: external id {ext} out of range (num_externs {num_externs})"
                )));
            }
            if std::mem::replace(&mut ext_seen[ext as usize], true) {
                return Err(invalid(format!("value {vi}: external id {ext} used twice")));
            }
            if t.constant_buffer_idx() != 0 {
                return Err(invalid(format!(
                    "value {vi}: external value with constant data"
                )));
            }
            if flags == FLAG_EXTERNAL_INPUT {
                inputs.push((ext, vi));
                Kind::Input(ext)
            } else {
                outputs.push((ext, vi));
                Kind::Output(ext)
            }
        } else if t.constant_buffer_idx() != 0 {
            let bytes = constant_bytes(blob, named, t.constant_buffer_idx())
                .map_err(|e| invalid(format!("value {vi}: {e}")))?;
            if bytes.len() < numel {
                return Err(invalid(format!(
                    "value {vi}: constant has {} bytes, its shape {:?} needs {numel}",
                    bytes.len(),
                    shape.dims()
                )));
            }
            Kind::Constant(&bytes[..numel])
        } else {
            Kind::Internal
        };
        if ids.insert(t.id_out(), vi).is_some() || t.id_out() == INVALID_ID {
            return Err(invalid(format!(
                "value {vi}: id {} defined twice or invalid",
                t.id_out()
            )));
        }
        values.push(Value { dtype, shape, kind });
    }
    inputs.sort_unstable();
    outputs.sort_unstable();

    // Nodes.
    let b = Builder { ids };
    let mut nodes = Vec::with_capacity(xnodes.len());
    let mut node_names = Vec::with_capacity(xnodes.len());
    for (ni, xn) in xnodes.iter().enumerate() {
        let ty = xn.xnode_union_type();
        let name = node_name(ty);
        let ctx = |e: KernelError| match e {
            KernelError::Unsupported(m) => unsupported(format!("node {ni} ({name}): {m}")),
            KernelError::Invalid(m) => invalid(format!("node {ni} ({name}): {m}")),
            e => invalid(format!("node {ni} ({name}): {e}")),
        };
        let node = parse_node(&b, &xn, ty, name).map_err(ctx)?;
        nodes.push(node);
        node_names.push(name);
    }
    Ok(Graph {
        values,
        nodes,
        inputs,
        outputs,
        node_names,
        scales,
    })
}

/// Reads `n` little-endian f32 scales (any alignment); each must be positive and finite.
fn f32_scales(b: &[u8], n: usize, what: &str) -> Result<Vec<f32>, KernelError> {
    let need = n.checked_mul(4).ok_or(KernelError::SizeOverflow)?;
    let b = b
        .get(..need)
        .ok_or_else(|| invalid(format!("{what}: {} bytes of scales, needs {need}", b.len())))?;
    let v: Vec<f32> = b
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    check_scales(&v, what)?;
    Ok(v)
}

fn check_scales(v: &[f32], what: &str) -> Result<(), KernelError> {
    if let Some(s) = v.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(invalid(format!(
            "{what}: scale {s} is not positive and finite"
        )));
    }
    Ok(())
}

/// ExecuTorch's conversion of legacy inline fp32 block scales to bf16 (`convertF32TensorToBF16`).
fn f32_to_bf16_et(v: f32) -> f32 {
    let adjusted = v * 1.003_891_05f32;
    f32::from_bits(adjusted.to_bits() & 0xFFFF_0000)
}

/// The datatype of value `vi` with its quantization parameters, checked.
#[allow(clippy::too_many_arguments)]
fn value_dtype<'a>(
    blob: &Blob<'a>,
    named: &dyn NamedDataMap<'a>,
    vi: usize,
    t: &schema::XNNTensorValue<'_>,
    q: Option<schema::XNNQuantizedTensorValue<'_>>,
    shape: &Shape,
    scales: &mut Vec<Vec<f32>>,
) -> Result<DType, KernelError> {
    use schema::XNNDatatype as X;
    let dt = t.datatype();
    let what = format!("value {vi} ({})", datatype_name(dt));
    let Some(q) = q else {
        return match dt {
            X::xnn_datatype_fp32 => Ok(DType::F32),
            X::xnn_datatype_fp16 => Ok(DType::F16),
            d => Err(unsupported(format!(
                "value {vi}: datatype {} without quantization parameters",
                datatype_name(d)
            ))),
        };
    };
    let mismatch = || {
        unsupported(format!(
            "{what} with {} quantization parameters",
            q.quant_params_type().variant_name().unwrap_or("unknown")
        ))
    };
    let per_channel = |scales: &mut Vec<Vec<f32>>| -> Result<(u8, u32), KernelError> {
        let p = q.quant_params_as_per_channel_quant().ok_or_else(mismatch)?;
        let axis = p.channel_dim();
        if axis < 0 || axis as usize >= shape.rank() {
            return Err(invalid(format!("{what}: channel dim {axis} out of range")));
        }
        let n = shape.dims()[axis as usize];
        let v = if p.scale_buffer_idx() != 0 {
            if p.num_scales() as usize != n {
                return Err(invalid(format!(
                    "{what}: {} scales for {n} channels",
                    p.num_scales()
                )));
            }
            let b = constant_bytes(blob, named, p.scale_buffer_idx())?;
            f32_scales(b, n, &what)?
        } else {
            let v: Vec<f32> = p.scale().map(|s| s.iter().collect()).unwrap_or_default();
            if v.len() != n {
                return Err(invalid(format!(
                    "{what}: {} scales for {n} channels",
                    v.len()
                )));
            }
            check_scales(&v, &what)?;
            v
        };
        scales.push(v);
        Ok((axis as u8, (scales.len() - 1) as u32))
    };
    let per_tensor = || -> Result<(f32, i32), KernelError> {
        let p = q.quant_params_as_per_tensor_quant().ok_or_else(mismatch)?;
        check_scales(&[p.scale()], &what)?;
        Ok((p.scale(), p.zero_point()))
    };
    Ok(match dt {
        X::xnn_datatype_qint8 => {
            let (scale, zp) = per_tensor()?;
            if !(-128..=127).contains(&zp) {
                return Err(invalid(format!("{what}: zero point {zp}")));
            }
            DType::QS8 { scale, zp }
        }
        X::xnn_datatype_quint8 => {
            let (scale, zp) = per_tensor()?;
            if !(0..=255).contains(&zp) {
                return Err(invalid(format!("{what}: zero point {zp}")));
            }
            DType::QU8 { scale, zp }
        }
        X::xnn_datatype_qint32 => DType::QS32 {
            scale: per_tensor()?.0,
        },
        X::xnn_datatype_qcint8 => {
            let (axis, scales) = per_channel(scales)?;
            DType::QC8 { axis, scales }
        }
        X::xnn_datatype_qcint32 => {
            let (axis, scales) = per_channel(scales)?;
            DType::QC32 { axis, scales }
        }
        X::xnn_datatype_qcint4 => {
            let (axis, scales) = per_channel(scales)?;
            if shape.rank() != 2 {
                return Err(unsupported(format!("{what} of rank {}", shape.rank())));
            }
            DType::QC4 { axis, scales }
        }
        X::xnn_datatype_qdint8 => {
            let p = q
                .quant_params_as_per_token_dynamic_quant()
                .ok_or_else(mismatch)?;
            let nb = p.num_nonbatch_dims();
            if nb < 0 || nb as usize > shape.rank() || t.constant_buffer_idx() != 0 {
                return Err(invalid(format!("{what}: {nb} non-batch dims")));
            }
            DType::QD8 { nonbatch: nb as u8 }
        }
        X::xnn_datatype_qbint4 => {
            let p = q
                .quant_params_as_per_channel_group_quant()
                .ok_or_else(mismatch)?;
            if shape.rank() != 2 || p.channel_dim() != 0 {
                return Err(unsupported(format!(
                    "{what} of rank {} with channel dim {}",
                    shape.rank(),
                    p.channel_dim()
                )));
            }
            let (oc, ic) = (shape.dims()[0], shape.dims()[1]);
            let bs = p.group_size();
            if bs <= 0 || ic % bs as usize != 0 {
                return Err(invalid(format!("{what}: block size {bs} for {ic} inputs")));
            }
            let n = oc
                .checked_mul(ic / bs as usize)
                .ok_or(KernelError::SizeOverflow)?;
            let v = if p.scale_buffer_idx() != 0 {
                if p.num_scales() as usize != n {
                    return Err(invalid(format!(
                        "{what}: {} scales, needs {n}",
                        p.num_scales()
                    )));
                }
                let b = constant_bytes(blob, named, p.scale_buffer_idx())?;
                let need = n * 2;
                let b = b.get(..need).ok_or_else(|| {
                    invalid(format!(
                        "{what}: {} bytes of bf16 scales, needs {need}",
                        b.len()
                    ))
                })?;
                b.chunks_exact(2)
                    .map(|c| f32::from_bits((u16::from_le_bytes([c[0], c[1]]) as u32) << 16))
                    .collect::<Vec<f32>>()
            } else {
                let v: Vec<f32> = p
                    .scale()
                    .map(|s| s.iter().map(f32_to_bf16_et).collect())
                    .unwrap_or_default();
                if v.len() != n {
                    return Err(invalid(format!("{what}: {} scales, needs {n}", v.len())));
                }
                v
            };
            check_scales(&v, &what)?;
            scales.push(v);
            DType::QB4 {
                block: bs as u32,
                scales: (scales.len() - 1) as u32,
            }
        }
        d => {
            return Err(unsupported(format!(
                "value {vi}: quantized datatype {}",
                datatype_name(d)
            )))
        }
    })
}

macro_rules! get {
    ($n:expr, $acc:ident) => {
        $n.$acc()
            .ok_or_else(|| invalid("node table of the wrong type"))?
    };
}

fn parse_node(
    b: &Builder,
    n: &schema::XNode<'_>,
    ty: schema::XNodeUnion,
    name: &str,
) -> Result<Node, KernelError> {
    use schema::XNodeUnion as T;
    let binary =
        |node: schema::_XNNNode2x1<'_>, op: BinaryOp, clamp: Clamp| -> Result<Node, KernelError> {
            check_flags(name, node.flags(), 0)?;
            Ok(Node::Binary {
                op,
                a: b.id(node.input1_id(), "input 1")?,
                b: b.id(node.input2_id(), "input 2")?,
                out: b.id(node.output_id(), "output")?,
                clamp,
            })
        };
    let unary = |node: schema::_XNNNode1x1<'_>, op: UnaryOp| -> Result<Node, KernelError> {
        check_flags(name, node.flags(), 0)?;
        Ok(Node::Unary {
            op,
            x: b.id(node.input_id(), "input")?,
            out: b.id(node.output_id(), "output")?,
        })
    };
    Ok(match ty {
        T::XNNAdd => binary(get!(n, xnode_union_as_xnnadd), BinaryOp::Add, min_max(n)?)?,
        T::XNNSubtract => binary(
            get!(n, xnode_union_as_xnnsubtract),
            BinaryOp::Sub,
            min_max(n)?,
        )?,
        T::XNNMultiply => binary(
            get!(n, xnode_union_as_xnnmultiply),
            BinaryOp::Mul,
            min_max(n)?,
        )?,
        T::XNNDiv => binary(get!(n, xnode_union_as_xnndiv), BinaryOp::Div, min_max(n)?)?,
        T::XNNMinimum => binary(get!(n, xnode_union_as_xnnminimum), BinaryOp::Min, None)?,
        T::XNNMaximum => binary(get!(n, xnode_union_as_xnnmaximum), BinaryOp::Max, None)?,
        T::XNNPReLU => binary(get!(n, xnode_union_as_xnnpre_lu), BinaryOp::Prelu, None)?,
        T::XNNClamp => {
            let (lo, hi) = min_max(n)?.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
            unary(get!(n, xnode_union_as_xnnclamp), UnaryOp::Clamp(lo, hi))?
        }
        T::XNNSigmoid => unary(get!(n, xnode_union_as_xnnsigmoid), UnaryOp::Sigmoid)?,
        T::XNNTanh => unary(get!(n, xnode_union_as_xnntanh), UnaryOp::Tanh)?,
        T::XNNGelu => unary(get!(n, xnode_union_as_xnngelu), UnaryOp::Gelu)?,
        T::XNNHardswish => unary(get!(n, xnode_union_as_xnnhardswish), UnaryOp::Hardswish)?,
        T::XNNSquareRoot => unary(get!(n, xnode_union_as_xnnsquare_root), UnaryOp::Sqrt)?,
        T::XNNReciprocalSquareRoot => unary(
            get!(n, xnode_union_as_xnnreciprocal_square_root),
            UnaryOp::Rsqrt,
        )?,
        T::XNNExp => unary(get!(n, xnode_union_as_xnnexp), UnaryOp::Exp)?,
        T::XNNLog => unary(get!(n, xnode_union_as_xnnlog), UnaryOp::Log)?,
        T::XNNAbs => unary(get!(n, xnode_union_as_xnnabs), UnaryOp::Abs)?,
        T::XNNNegate => unary(get!(n, xnode_union_as_xnnnegate), UnaryOp::Neg)?,
        T::XNNSquare => unary(get!(n, xnode_union_as_xnnsquare), UnaryOp::Square)?,
        T::XNNFloor => unary(get!(n, xnode_union_as_xnnfloor), UnaryOp::Floor)?,
        T::XNNCeiling => unary(get!(n, xnode_union_as_xnnceiling), UnaryOp::Ceil)?,
        T::XNNSin => unary(get!(n, xnode_union_as_xnnsin), UnaryOp::Sin)?,
        T::XNNCos => unary(get!(n, xnode_union_as_xnncos), UnaryOp::Cos)?,
        T::XNNCopy => unary(get!(n, xnode_union_as_xnncopy), UnaryOp::Copy)?,
        // Between float32 and half (the rounding happens where half values are written).
        T::XNNConvert => unary(get!(n, xnode_union_as_xnnconvert), UnaryOp::Copy)?,
        T::XNNLeakyReLU => {
            let node = get!(n, xnode_union_as_xnnleaky_re_lu);
            check_flags(name, node.flags(), 0)?;
            Node::Unary {
                op: UnaryOp::LeakyRelu(node.negative_slope()),
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNELU => {
            let node = get!(n, xnode_union_as_xnnelu);
            check_flags(name, node.flags(), 0)?;
            Node::Unary {
                op: UnaryOp::Elu(node.alpha()),
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNSoftmax => {
            let node = get!(n, xnode_union_as_xnnsoftmax);
            check_flags(name, node.flags(), 0)?;
            Node::Softmax {
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNFullyConnected => {
            let node = get!(n, xnode_union_as_xnnfully_connected);
            check_flags(name, node.flags(), XNN_FLAG_TRANSPOSE_WEIGHTS)?;
            Node::FullyConnected {
                x: b.id(node.input1_id(), "input")?,
                w: b.id(node.filter_id(), "filter")?,
                bias: b.opt_id(node.bias_id(), "bias")?,
                out: b.id(node.output_id(), "output")?,
                clamp: min_max(n)?,
                transpose_w: node.flags() & XNN_FLAG_TRANSPOSE_WEIGHTS != 0,
            }
        }
        T::XNNConv2d | T::XNNDepthwiseConv2d | T::XNNConvTranspose2d => {
            let node = match ty {
                T::XNNConv2d => get!(n, xnode_union_as_xnnconv_2d),
                T::XNNDepthwiseConv2d => get!(n, xnode_union_as_xnndepthwise_conv_2d),
                _ => get!(n, xnode_union_as_xnnconv_transpose_2d),
            };
            check_flags(name, node.flags(), 0)?;
            let kind = match ty {
                T::XNNConv2d => ConvKind::Conv,
                T::XNNDepthwiseConv2d => ConvKind::Depthwise,
                _ => ConvKind::Deconv,
            };
            let win = window(
                [
                    node.padding_top(),
                    node.padding_right(),
                    node.padding_bottom(),
                    node.padding_left(),
                ],
                [node.kernel_height(), node.kernel_width()],
                [node.subsampling_height(), node.subsampling_width()],
                [node.dilation_height(), node.dilation_width()],
            )?;
            let conv = Conv {
                kind,
                win,
                groups: node.groups() as usize,
                group_in: node.group_input_channels() as usize,
                group_out: node.group_output_channels() as usize,
                adjustment: (
                    node.adjustment_height() as usize,
                    node.adjustment_width() as usize,
                ),
            };
            let lim = |v: usize| v >= 1 && v < (1 << 20);
            if !lim(conv.groups) || !lim(conv.group_in) || !lim(conv.group_out) {
                return Err(unsupported(format!(
                    "{} groups of {} → {} channels",
                    conv.groups, conv.group_in, conv.group_out
                )));
            }
            if conv
                .groups
                .checked_mul(conv.group_in.max(conv.group_out))
                .is_none_or(|c| c >= 1 << 24)
            {
                return Err(unsupported("too many channels"));
            }
            if kind == ConvKind::Depthwise && conv.group_in != 1 {
                return Err(unsupported(format!(
                    "depthwise convolution with {} input channels per group",
                    conv.group_in
                )));
            }
            if kind != ConvKind::Deconv && conv.adjustment != (0, 0) {
                return Err(invalid("output adjustment on a convolution"));
            }
            if conv.adjustment.0 >= win.sh || conv.adjustment.1 >= win.sw {
                if kind == ConvKind::Deconv {
                    return Err(invalid("output adjustment not below the stride"));
                }
            }
            Node::Conv {
                conv,
                x: b.id(node.input1_id(), "input")?,
                w: b.id(node.filter_id(), "filter")?,
                bias: b.opt_id(node.bias_id(), "bias")?,
                out: b.id(node.output_id(), "output")?,
                clamp: min_max(n)?,
            }
        }
        T::XNNMaxPooling2d | T::XNNAvgPooling2d => {
            let node = match ty {
                T::XNNMaxPooling2d => get!(n, xnode_union_as_xnnmax_pooling_2d),
                _ => get!(n, xnode_union_as_xnnavg_pooling_2d),
            };
            check_flags(name, node.flags(), XNN_FLAG_KEEP_DIMS)?;
            let kind = if ty == T::XNNMaxPooling2d {
                PoolKind::Max
            } else {
                PoolKind::Avg
            };
            // Average pooling has no dilation (the exporter writes 0).
            let dil = if kind == PoolKind::Avg {
                [1, 1]
            } else {
                [node.dilation_height(), node.dilation_width()]
            };
            let win = window(
                [
                    node.padding_top(),
                    node.padding_right(),
                    node.padding_bottom(),
                    node.padding_left(),
                ],
                [node.pooling_height(), node.pooling_width()],
                [node.stride_height(), node.stride_width()],
                dil,
            )?;
            Node::Pool {
                kind,
                win,
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
                clamp: min_max(n)?,
            }
        }
        T::XNNGlobalAvgPooling2d => {
            let node = get!(n, xnode_union_as_xnnglobal_avg_pooling_2d);
            check_flags(name, node.flags(), XNN_FLAG_KEEP_DIMS)?;
            Node::GlobalAvgPool {
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
                keep_dims: node.flags() & XNN_FLAG_KEEP_DIMS != 0,
                clamp: min_max(n)?,
            }
        }
        T::XNNStaticTranspose => {
            let node = get!(n, xnode_union_as_xnnstatic_transpose);
            check_flags(name, node.flags(), 0)?;
            let perm = shape_of(node.perm(), "perm")?;
            let mut seen = [false; MAX_DIMS];
            for &p in perm.dims() {
                if p >= perm.rank() || std::mem::replace(&mut seen[p], true) {
                    return Err(invalid(format!(
                        "perm {:?} is not a permutation",
                        perm.dims()
                    )));
                }
            }
            Node::Transpose {
                perm,
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNStaticReshape => {
            let node = get!(n, xnode_union_as_xnnstatic_reshape);
            check_flags(name, node.flags(), 0)?;
            let new_shape = shape_of(node.new_shape(), "new_shape")?;
            if new_shape.dims().iter().filter(|&&d| d == 0).count() > 1 {
                return Err(invalid("reshape with more than one inferred dimension"));
            }
            Node::Reshape {
                new_shape,
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNStaticSlice => {
            let node = get!(n, xnode_union_as_xnnstatic_slice);
            check_flags(name, node.flags(), 0)?;
            let offsets = shape_of(node.offsets(), "offsets")?;
            let sizes = shape_of(node.sizes(), "sizes")?;
            if offsets.rank() != sizes.rank() {
                return Err(invalid("slice offsets and sizes differ in length"));
            }
            Node::Slice {
                offsets,
                sizes,
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNConcatenate2 | T::XNNConcatenate3 | T::XNNConcatenate4 | T::XNNConcatenate5 => {
            let (node, k) = match ty {
                T::XNNConcatenate2 => (get!(n, xnode_union_as_xnnconcatenate_2), 2),
                T::XNNConcatenate3 => (get!(n, xnode_union_as_xnnconcatenate_3), 3),
                T::XNNConcatenate4 => (get!(n, xnode_union_as_xnnconcatenate_4), 4),
                _ => (get!(n, xnode_union_as_xnnconcatenate_5), 5),
            };
            check_flags(name, node.flags(), 0)?;
            let ids = [
                node.input1_id(),
                node.input2_id(),
                node.input3_id(),
                node.input4_id(),
                node.input5_id(),
            ];
            let mut inputs = [0usize; 5];
            for i in 0..k {
                inputs[i] = b.id(ids[i], "input")?;
            }
            Node::Concat {
                axis: node.axis() as usize,
                inputs,
                n: k,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNStaticConstantPad => {
            let node = get!(n, xnode_union_as_xnnstatic_constant_pad);
            check_flags(name, node.flags(), 0)?;
            let pre = shape_of(node.pre_paddings(), "pre_paddings")?;
            let post = shape_of(node.post_paddings(), "post_paddings")?;
            if pre.rank() != post.rank() {
                return Err(invalid("pre and post paddings differ in length"));
            }
            if pre.dims().iter().chain(post.dims()).any(|&p| p >= 1 << 24) {
                return Err(unsupported("padding of 2^24 or more"));
            }
            Node::Pad {
                pre,
                post,
                value: node.padding_value(),
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNStaticResizeBilinear2D => {
            let node = get!(n, xnode_union_as_xnnstatic_resize_bilinear_2_d);
            check_flags(
                name,
                node.flags(),
                XNN_FLAG_ALIGN_CORNERS | XNN_FLAG_TENSORFLOW_LEGACY_MODE,
            )?;
            let (h, w) = (node.new_height() as usize, node.new_width() as usize);
            if !(1..1 << 24).contains(&h) || !(1..1 << 24).contains(&w) {
                return Err(unsupported(format!("output size {h}x{w}")));
            }
            Node::Resize {
                height: h,
                width: w,
                align_corners: node.flags() & XNN_FLAG_ALIGN_CORNERS != 0,
                legacy: node.flags() & XNN_FLAG_TENSORFLOW_LEGACY_MODE != 0,
                x: b.id(node.input_id(), "input")?,
                out: b.id(node.output_id(), "output")?,
            }
        }
        T::XNNBatchMatrixMultiply => {
            let node = get!(n, xnode_union_as_xnnbatch_matrix_multiply);
            check_flags(name, node.flags(), XNN_FLAG_TRANSPOSE_B)?;
            Node::Bmm {
                a: b.id(node.input1_id(), "input 1")?,
                b: b.id(node.input2_id(), "input 2")?,
                out: b.id(node.output_id(), "output")?,
                transpose_b: node.flags() & XNN_FLAG_TRANSPOSE_B != 0,
            }
        }
        other => {
            return Err(unsupported(format!(
                "node type {} is not supported",
                other.variant_name().unwrap_or("unknown")
            )))
        }
    })
}

fn window(
    pad: [u32; 4],
    kernel: [u32; 2],
    stride: [u32; 2],
    dilation: [u32; 2],
) -> Result<Window, KernelError> {
    let lim = |v: u32| (v as usize) < (1 << 20);
    if !pad
        .iter()
        .chain(&kernel)
        .chain(&stride)
        .chain(&dilation)
        .all(|&v| lim(v))
    {
        return Err(unsupported("window parameters of 2^20 or more"));
    }
    if kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
        return Err(invalid(format!(
            "window with kernel {kernel:?}, stride {stride:?}, dilation {dilation:?}"
        )));
    }
    Ok(Window {
        pad_top: pad[0] as usize,
        pad_right: pad[1] as usize,
        pad_bottom: pad[2] as usize,
        pad_left: pad[3] as usize,
        kh: kernel[0] as usize,
        kw: kernel[1] as usize,
        sh: stride[0] as usize,
        sw: stride[1] as usize,
        dh: dilation[0] as usize,
        dw: dilation[1] as usize,
    })
}
