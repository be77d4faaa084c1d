//! The XNNPACK payload's graph converted to the engine's ([`pteron_nhwc::graph`]): values
//! (datatype, declared shape, where the data comes from) and nodes (operation, parameters,
//! value indices), built from the verified flatbuffer with every id, index, rank, flag and
//! constant size checked.
//!
//! Value ids in the payload (`id_out`, and the ids nodes name) are serialized ids, remapped here
//! to dense indices in definition order, as ExecuTorch's runtime remaps them to XNNPACK's.

use std::collections::HashMap;

use pteron_core::{KernelError, NamedDataMap};
use pteron_nhwc::graph::{
    BinaryOp, Clamp, Conv, ConvKind, DType, Graph, Kind, Node, PoolKind, UnaryOp, Value, Window,
};
use pteron_nhwc::util::{Shape, MAX_DIMS};

use crate::blob::Blob;
use crate::schema;

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

fn datatype_name(d: schema::XNNDatatype) -> String {
    d.variant_name()
        .map(|s| s.trim_start_matches("xnn_datatype_").to_string())
        .unwrap_or_else(|| format!("#{}", d.0))
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
            let (block, v) = blockwise_scales(blob, named, &what, shape, &p)?;
            scales.push(v);
            DType::QB4 {
                block,
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

/// The bf16 scales of a blockwise 4-bit filter `[oc, ic]` (one per block of `ic`), widened:
/// from a constant buffer or from the table; returns the block size and the scales.
fn blockwise_scales<'a>(
    blob: &Blob<'a>,
    named: &dyn NamedDataMap<'a>,
    what: &str,
    shape: &Shape,
    p: &schema::PerChannelGroupQuant<'_>,
) -> Result<(u32, Vec<f32>), KernelError> {
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
    check_scales(&v, what)?;
    Ok((bs as u32, v))
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
        T::XNNConv2d
        | T::XNNDepthwiseConv2d
        | T::XNNConvTranspose2d
        | T::XNNMaxPooling2d
        | T::XNNAvgPooling2d
        | T::XNNGlobalAvgPooling2d => parse_window_node(b, n, ty, name)?,
        T::XNNStaticTranspose
        | T::XNNStaticReshape
        | T::XNNStaticSlice
        | T::XNNConcatenate2
        | T::XNNConcatenate3
        | T::XNNConcatenate4
        | T::XNNConcatenate5
        | T::XNNStaticConstantPad
        | T::XNNStaticResizeBilinear2D => parse_layout_node(b, n, ty, name)?,
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

/// Convolutions and pooling: nodes over a window of NHWC pixels.
fn parse_window_node(
    b: &Builder,
    n: &schema::XNode<'_>,
    ty: schema::XNodeUnion,
    name: &str,
) -> Result<Node, KernelError> {
    use schema::XNodeUnion as T;
    Ok(match ty {
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
            let lim = |v: usize| (1..(1 << 20)).contains(&v);
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
            if (conv.adjustment.0 >= win.sh || conv.adjustment.1 >= win.sw)
                && kind == ConvKind::Deconv
            {
                return Err(invalid("output adjustment not below the stride"));
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
        other => {
            return Err(invalid(format!(
                "{} is not a {} node",
                other.variant_name().unwrap_or("unknown"),
                "window"
            )))
        }
    })
}

/// Nodes that move data: transpose, reshape, slice, concatenation, padding, resizing.
fn parse_layout_node(
    b: &Builder,
    n: &schema::XNode<'_>,
    ty: schema::XNodeUnion,
    name: &str,
) -> Result<Node, KernelError> {
    use schema::XNodeUnion as T;
    Ok(match ty {
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
        other => {
            return Err(invalid(format!(
                "{} is not a {} node",
                other.variant_name().unwrap_or("unknown"),
                "data-movement"
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
