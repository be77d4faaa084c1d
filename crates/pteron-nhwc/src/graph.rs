//! The engine's graph: values (datatype, declared shape, where the data comes from) and nodes
//! (operation, parameters, value indices, channels-last). Front ends build it — the XNNPACK
//! payload reader (`pteron-xnnpack`) from a verified flatbuffer, [`crate::partition`] from a
//! portable program's calls — and [`crate::Executable::new`] checks, prepares and plans it.

use std::collections::btree_map::{BTreeMap, Entry};

use pteron_core::KernelError;

use crate::util::Shape;

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
    /// from a portable program's tensors; see [`crate::partition`]).
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

/// Calls `$f` on each input field of `$node` (a `&Node` or a `&mut Node`: the fields come as
/// references of the same kind), in order; absent optional inputs are skipped.
macro_rules! for_each_input {
    ($node:expr, $f:ident) => {
        match $node {
            Node::Binary { a, b, .. } | Node::Bmm { a, b, .. } => {
                $f(a);
                $f(b);
            }
            Node::FullyConnected { x, w, bias, .. } | Node::Conv { x, w, bias, .. } => {
                $f(x);
                $f(w);
                if let Some(b) = bias {
                    $f(b);
                }
            }
            Node::Concat { inputs, n, .. } => {
                for i in IntoIterator::into_iter(inputs).take(*n) {
                    $f(i);
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
            | Node::Resize { x, .. } => $f(x),
        }
    };
}

impl Node {
    /// The values this node reads, in order (`None` for absent optional inputs).
    pub fn inputs(&self) -> ([usize; 5], usize) {
        let mut v = [0usize; 5];
        let mut n = 0;
        let mut push = |x: &usize| {
            v[n] = *x;
            n += 1;
        };
        for_each_input!(self, push);
        (v, n)
    }

    /// Makes the node read `same[v]` wherever it reads a value `v` that has one
    /// (`usize::MAX`: none).
    fn redirect(&mut self, same: &[usize]) {
        let swap = |v: &mut usize| {
            if let Some(&o) = same.get(*v).filter(|&&o| o != usize::MAX) {
                *v = o;
            }
        };
        for_each_input!(self, swap);
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
        self.drop_nodes(&fold)
    }

    /// Runs each dynamic quantization once: a conversion of a float32 value to a dynamically
    /// quantized type (`qdint8` rows) that an earlier node already converted it to computes
    /// the same bytes (every value is written once), so its readers read the earlier result
    /// and the repeat is dropped. The exporter converts a layer's input once per linear layer
    /// that reads it (a decode step of an 8da4w LLM: query, key and value projections three
    /// times, gate and up twice). Repeats whose result is an external output stay. Returns
    /// how many conversions were dropped.
    pub fn share_dynamic_quantization(&mut self) -> usize {
        let nv = self.values.len();
        // The value each repeat's readers read instead.
        let mut same = vec![usize::MAX; nv];
        // The first conversion of each (float value, row layout): a map, so that a graph of
        // many conversions is not searched once per conversion.
        let mut first = BTreeMap::new();
        let mut drop = vec![false; self.nodes.len()];
        for (j, node) in self.nodes.iter_mut().enumerate() {
            node.redirect(&same);
            let Node::Unary {
                op: UnaryOp::Copy,
                x,
                out,
            } = *node
            else {
                continue;
            };
            let (Some(vx), Some(vo)) = (self.values.get(x), self.values.get(out)) else {
                continue;
            };
            let DType::QD8 { nonbatch } = vo.dtype else {
                continue;
            };
            if vx.dtype != DType::F32 || !matches!(vo.kind, Kind::Internal) {
                continue;
            }
            match first.entry((x, nonbatch)) {
                Entry::Occupied(o) => {
                    same[out] = *o.get();
                    drop[j] = true;
                }
                Entry::Vacant(e) => {
                    e.insert(out);
                }
            }
        }
        self.drop_nodes(&drop)
    }

    /// Removes the nodes marked in `drop`; returns how many.
    fn drop_nodes(&mut self, drop: &[bool]) -> usize {
        let n = drop.iter().filter(|&&f| f).count();
        if n > 0 {
            let mut keep = drop.iter().map(|&f| !f);
            self.nodes.retain(|_| keep.next().unwrap_or(true));
            let mut keep = drop.iter().map(|&f| !f);
            self.node_names.retain(|_| keep.next().unwrap_or(true));
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_dynamic_quantizations_run_once() {
        static W: [u8; 16] = [1; 16];
        let v = |dtype, kind| Value {
            dtype,
            shape: Shape::new(&[1, 4]).unwrap(),
            kind,
        };
        let qd = DType::QD8 { nonbatch: 1 };
        // x, three conversions of it, a weight, three products, a fourth conversion that is an
        // output of the graph.
        let mut values = vec![v(DType::F32, Kind::Input(0))];
        values.extend([
            v(qd, Kind::Internal),
            v(qd, Kind::Internal),
            v(qd, Kind::Internal),
        ]);
        values.push(v(DType::F32, Kind::Constant(&W)));
        values.extend([3, 4, 5].map(|e| v(DType::F32, Kind::Output(e))));
        values.push(v(qd, Kind::Output(6)));
        let convert = |out| Node::Unary {
            op: UnaryOp::Copy,
            x: 0,
            out,
        };
        let fc = |x, out| Node::FullyConnected {
            x,
            w: 4,
            bias: None,
            out,
            clamp: None,
            transpose_w: false,
        };
        let nodes = vec![
            convert(1),
            fc(1, 5),
            convert(2),
            convert(3),
            fc(2, 6),
            fc(3, 7),
            convert(8),
        ];
        let mut g = Graph {
            values,
            node_names: vec!["node"; nodes.len()],
            nodes,
            inputs: vec![(0, 0)],
            outputs: vec![(3, 5), (4, 6), (5, 7), (6, 8)],
            scales: vec![],
        };
        assert_eq!(g.share_dynamic_quantization(), 2);
        assert_eq!(g.nodes.len(), 5);
        assert_eq!(g.node_names.len(), 5);
        let reads: Vec<usize> = g
            .nodes
            .iter()
            .filter_map(|n| match *n {
                Node::FullyConnected { x, .. } => Some(x),
                _ => None,
            })
            .collect();
        assert_eq!(reads, [1, 1, 1]);
        // The conversion whose result leaves the graph still runs.
        assert!(matches!(g.nodes[4], Node::Unary { out: 8, .. }));
        // Nothing is left to share.
        assert_eq!(g.share_dynamic_quantization(), 0);
    }
}
