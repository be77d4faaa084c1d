//! Nodes over quantized values: which datatype combinations run, what they prepare at init
//! (packed int8 weights, zero-point-corrected biases, requantization scales), and how they run.
//!
//! Supported (XNNPACK's names): static int8 (`qint8` activations, `qcint8`/`qint8` weights,
//! `qcint32`/`qint32` biases) for convolution, depthwise convolution, transposed convolution
//! (any groups), fully connected, add / subtract / multiply / minimum / maximum, clamp, copy,
//! max pooling, global average pooling, and the data-movement nodes; conversions float32 ↔
//! qint8 and qint8 → qint8; dynamic int8 (`qdint8` per-row activations from a float32
//! convert) × `qcint8`, `qcint4` or blockwise `qbint4` weights → float32 in fully connected
//! nodes, and `qdint8` (one row per image) × `qcint8` → float32 in convolutions (any groups,
//! not depthwise). Any other combination is refused at init, naming the node and the
//! datatypes.

use pteron_core::{KernelError, Parallel};

use crate::graph::{
    BinaryOp, Clamp, Conv, ConvKind, DType, Graph, Kind, Node, PoolKind, UnaryOp, Window,
};
use crate::kernels::layout;
use crate::kernels::spatial::Geom;
use crate::quant::convs::{self, DConv, QDeconv};
use crate::quant::gemm::{qgemm, Epilogue, Out, QWeights};
use crate::quant::ops::{self, quantize_bound, QDwWeights, Q};
use crate::util::{f32s, f32s_mut, Shape};

/// Rows of a `qdint8` value of shape `s` (the last `nonbatch` dims form a row) and the row
/// length.
pub fn qd8_rows(s: &Shape, nonbatch: u8) -> (usize, usize) {
    let r = s.rank();
    let nb = (nonbatch as usize).min(r);
    let row: usize = s.dims()[r - nb..].iter().product();
    let rows: usize = s.dims()[..r - nb].iter().product();
    (rows, row)
}

/// Bytes a value takes in the arena: float types as f32, 8-bit types as bytes; `qdint8` adds
/// each row's scale (f32) and zero point (i32) after its data.
pub fn value_bytes(d: DType, s: &Shape) -> Result<usize, KernelError> {
    let n = s.count()?;
    let v = match d {
        DType::F32 | DType::F16 => n.checked_mul(4),
        DType::QS8 { .. } | DType::QU8 { .. } => Some(n),
        DType::QD8 { nonbatch } => {
            let (rows, _) = qd8_rows(s, nonbatch);
            n.div_ceil(4)
                .checked_mul(4)
                .and_then(|b| b.checked_add(rows.checked_mul(8)?))
        }
        other => n.checked_mul(other.size()),
    };
    v.ok_or(KernelError::SizeOverflow)
}

/// The data, scales and zero points of a `qdint8` value's bytes.
fn qd8_parts(b: &[u8], n: usize, rows: usize) -> Result<(&[u8], &[f32], &[i32]), KernelError> {
    let off = n.div_ceil(4) * 4;
    let bad = || KernelError::invalid("dynamic int8 value too short");
    let data = b.get(..n).ok_or_else(bad)?;
    let sc = b.get(off..off + rows * 4).ok_or_else(bad)?;
    let zp = b.get(off + rows * 4..off + rows * 8).ok_or_else(bad)?;
    Ok((
        data,
        bytemuck::try_cast_slice(sc).map_err(|_| bad())?,
        bytemuck::try_cast_slice(zp).map_err(|_| bad())?,
    ))
}

fn qd8_parts_mut(
    b: &mut [u8],
    n: usize,
    rows: usize,
) -> Result<(&mut [u8], &mut [f32], &mut [i32]), KernelError> {
    let off = n.div_ceil(4) * 4;
    let bad = || KernelError::invalid("dynamic int8 value too short");
    let b = b.get_mut(..off + rows * 8).ok_or_else(bad)?;
    let (data, rest) = b.split_at_mut(off);
    let (sc, zp) = rest.split_at_mut(rows * 4);
    Ok((
        &mut data[..n],
        bytemuck::try_cast_slice_mut(sc).map_err(|_| bad())?,
        bytemuck::try_cast_slice_mut(zp).map_err(|_| bad())?,
    ))
}

fn i8s(b: &[u8]) -> &[i8] {
    bytemuck::cast_slice(b)
}

fn i8s_mut(b: &mut [u8]) -> &mut [i8] {
    bytemuck::cast_slice_mut(b)
}

/// Static int8 products: packed weights and the requantization.
pub struct QProduct {
    pub w: QWeights,
    /// `bias − (zp_in + 128)·colsum` per output channel.
    pub bias: Vec<i32>,
    /// `s_in · s_w[c] / s_out`.
    pub scale: Vec<f32>,
    pub qi: Q,
    pub qo: Q,
    pub lo: i32,
    pub hi: i32,
}

/// Dynamic int8 products: packed weights and float scales.
pub struct DProduct {
    pub w: QWeights,
    /// Per output (or per output and block).
    pub scale: Vec<f32>,
    pub bias: Option<Vec<f32>>,
    pub lo: f32,
    pub hi: f32,
}

pub enum QPrep {
    Quantize(Q),
    Dequantize(Q),
    /// Requantize (or copy / clamp) int8 → int8.
    Requant {
        qi: Q,
        qo: Q,
        lo: i32,
        hi: i32,
    },
    /// float32 → qdint8 per row.
    DynQuant {
        nonbatch: u8,
    },
    Binary {
        qa: Q,
        qb: Q,
        qo: Q,
        lo: i32,
        hi: i32,
    },
    /// Data movement on bytes (same parameters in and out); constant padding value.
    Bytes {
        pad: i8,
    },
    MaxPool {
        lo: i32,
        hi: i32,
    },
    Mean {
        qi: Q,
        qo: Q,
        lo: i32,
        hi: i32,
    },
    Depthwise(QDwWeights),
    /// Convolution (groups 1) or fully connected, static int8.
    Product(QProduct),
    /// Fully connected on dynamic int8 rows.
    Dynamic(DProduct),
    /// Convolution on dynamic int8 images.
    DynConv(DConv),
    /// Transposed convolution, static int8.
    Deconv(QDeconv),
}

impl QPrep {
    /// The weights of a product whose one-row path streams 4-bit nibbles.
    pub fn streamed_weights(&self) -> Option<&QWeights> {
        match self {
            QPrep::Dynamic(p) if p.w.streams_nibbles() => Some(&p.w),
            _ => None,
        }
    }

    pub fn bytes(&self) -> usize {
        match self {
            QPrep::Product(p) => p.w.bytes() + p.bias.len() * 8,
            QPrep::Dynamic(p) => p.w.bytes() + p.scale.len() * 4,
            QPrep::DynConv(p) => p.bytes(),
            QPrep::Deconv(d) => (d.w.len() + d.bias.len() + d.scale.len()) * 4,
            QPrep::Depthwise(d) => d.w.len() * 2 + (d.w32.len() + d.bias.len() + d.scale.len()) * 4,
            _ => 0,
        }
    }
}

fn unsupported(msg: impl Into<String>) -> KernelError {
    KernelError::unsupported(msg)
}

fn invalid(msg: impl Into<String>) -> KernelError {
    KernelError::invalid(msg)
}

fn q_of(d: DType) -> Option<Q> {
    match d {
        DType::QS8 { scale, zp } => Some(Q { scale, zp }),
        _ => None,
    }
}

/// Quantized clamp bounds of an int8 output with float bounds `clamp`.
fn bounds(clamp: Option<(f32, f32)>, qo: Q) -> (i32, i32) {
    match clamp {
        Some((lo, hi)) => (quantize_bound(lo, qo), quantize_bound(hi, qo)),
        None => (-128, 127),
    }
}

/// Constant bytes of value `v`.
fn const_bytes<'a>(g: &Graph<'a>, v: usize) -> Result<&'a [u8], KernelError> {
    match g.values[v].kind {
        Kind::Constant(b) => Ok(b),
        _ => Err(unsupported(format!("value {v} is not a constant"))),
    }
}

/// The i32 values of a constant bias.
fn const_i32(g: &Graph<'_>, v: usize, n: usize) -> Result<Vec<i32>, KernelError> {
    let b = const_bytes(g, v)?;
    let b = b
        .get(..n * 4)
        .ok_or_else(|| invalid(format!("bias has {} bytes, needs {}", b.len(), n * 4)))?;
    Ok(b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn const_f32(g: &Graph<'_>, v: usize, n: usize) -> Result<Vec<f32>, KernelError> {
    match g.values[v].dtype {
        DType::F32 => crate::util::read_f32(const_bytes(g, v)?, n),
        DType::F16 => crate::util::read_f16(const_bytes(g, v)?, n),
        d => Err(unsupported(format!("bias of datatype {d:?}"))),
    }
}

/// Per-output weight scales of an int8 filter whose output channels are along `out_axis`.
fn weight_scales(
    g: &Graph<'_>,
    w: usize,
    oc: usize,
    out_axis: usize,
) -> Result<Vec<f32>, KernelError> {
    match g.values[w].dtype {
        DType::QC8 { axis, scales } | DType::QC4 { axis, scales } => {
            if axis as usize != out_axis {
                return Err(unsupported(format!(
                    "filter quantized along dim {axis}, outputs are dim {out_axis}"
                )));
            }
            let s = &g.scales[scales as usize];
            if s.len() != oc {
                return Err(invalid("filter scales do not match the outputs"));
            }
            Ok(s.clone())
        }
        DType::QS8 { scale, zp: 0 } => Ok(vec![scale; oc]),
        d => Err(unsupported(format!("filter of datatype {d:?}"))),
    }
}

/// Packs a constant filter `[oc][k]` (int8, or 4-bit nibbles with zero point 8).
fn pack_filter(
    g: &Graph<'_>,
    w: usize,
    oc: usize,
    k: usize,
    block: usize,
) -> Result<QWeights, KernelError> {
    let b = const_bytes(g, w)?;
    match g.values[w].dtype {
        DType::QC4 { .. } | DType::QB4 { .. } => {
            let row = k.div_ceil(2);
            if b.len() < oc * row {
                return Err(invalid("4-bit filter too short"));
            }
            QWeights::new_int4(oc, k, block, |j, kk| {
                let byte = b[j * row + kk / 2];
                let nib = if kk % 2 == 0 { byte & 0x0F } else { byte >> 4 };
                nib as i8 - 8
            })
        }
        _ => {
            if b.len() < oc * k {
                return Err(invalid("filter too short"));
            }
            QWeights::new(oc, k, block, |j, kk| b[j * k + kk] as i8)
        }
    }
}

/// Static int8 product parameters: weights `[oc][k]` with output scales along `out_axis`.
#[allow(clippy::too_many_arguments)]
fn product(
    g: &Graph<'_>,
    wq: QWeights,
    w: usize,
    bias: Option<usize>,
    qi: Q,
    qo: Q,
    clamp: Option<(f32, f32)>,
    out_axis: usize,
) -> Result<QProduct, KernelError> {
    let oc = wq.n;
    let ws = weight_scales(g, w, oc, out_axis)?;
    let b = match bias {
        None => vec![0; oc],
        Some(b) => match g.values[b].dtype {
            DType::QC32 { .. } | DType::QS32 { .. } => const_i32(g, b, oc)?,
            d => return Err(unsupported(format!("bias of datatype {d:?}"))),
        },
    };
    let bias = b
        .iter()
        .zip(&wq.colsum)
        .map(|(&b, &cs)| b.wrapping_sub((qi.zp + 128).wrapping_mul(cs)))
        .collect();
    let scale = ws.iter().map(|&s| qi.scale * s / qo.scale).collect();
    let (lo, hi) = bounds(clamp, qo);
    Ok(QProduct {
        w: wq,
        bias,
        scale,
        qi,
        qo,
        lo,
        hi,
    })
}

/// What node `i` prepares when it involves quantized values; `Ok(None)` for float nodes.
pub fn prepare(g: &Graph<'_>, node: &Node) -> Result<Option<QPrep>, KernelError> {
    let dt = |v: usize| g.values[v].dtype;
    let (ins, n) = node.inputs();
    let out = node.output();
    let all_float = ins[..n].iter().all(|&v| dt(v).is_float()) && dt(out).is_float();
    if all_float {
        return Ok(None);
    }
    let combo = || {
        let names: Vec<String> = ins[..n].iter().map(|&v| format!("{:?}", dt(v))).collect();
        unsupported(format!("datatypes {} → {:?}", names.join(", "), dt(out)))
    };
    let same_q = |a: usize, b: usize| q_of(dt(a)).is_some() && q_of(dt(a)) == q_of(dt(b));
    Ok(Some(match *node {
        Node::Unary {
            op: UnaryOp::Copy,
            x,
            ..
        } => match (dt(x), dt(out)) {
            (DType::F32, DType::QS8 { scale, zp }) => QPrep::Quantize(Q { scale, zp }),
            (DType::QS8 { scale, zp }, DType::F32) => QPrep::Dequantize(Q { scale, zp }),
            (DType::QS8 { scale, zp }, DType::QS8 { scale: s2, zp: z2 }) => QPrep::Requant {
                qi: Q { scale, zp },
                qo: Q { scale: s2, zp: z2 },
                lo: -128,
                hi: 127,
            },
            (DType::F32, DType::QD8 { nonbatch }) => QPrep::DynQuant { nonbatch },
            _ => return Err(combo()),
        },
        Node::Unary {
            op: UnaryOp::Clamp(lo, hi),
            x,
            ..
        } => match (q_of(dt(x)), q_of(dt(out))) {
            (Some(qi), Some(qo)) => {
                let (l, h) = bounds(Some((lo, hi)), qo);
                QPrep::Requant {
                    qi,
                    qo,
                    lo: l,
                    hi: h,
                }
            }
            _ => return Err(combo()),
        },
        Node::Binary {
            op: BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Min | BinaryOp::Max,
            a,
            b,
            clamp,
            ..
        } => match (q_of(dt(a)), q_of(dt(b)), q_of(dt(out))) {
            (Some(qa), Some(qb), Some(qo)) => {
                let (lo, hi) = bounds(clamp, qo);
                QPrep::Binary { qa, qb, qo, lo, hi }
            }
            _ => return Err(combo()),
        },
        Node::Transpose { x, .. } | Node::Reshape { x, .. } | Node::Slice { x, .. }
            if same_q(x, out) =>
        {
            QPrep::Bytes { pad: 0 }
        }
        Node::Pad { x, value, .. } if same_q(x, out) => {
            let q = q_of(dt(out)).ok_or_else(combo)?;
            QPrep::Bytes {
                pad: quantize_bound(value, q) as i8,
            }
        }
        Node::Concat { inputs, n, .. } if inputs[..n].iter().all(|&v| same_q(v, out)) => {
            QPrep::Bytes { pad: 0 }
        }
        Node::Pool {
            kind: PoolKind::Max,
            x,
            clamp,
            ..
        } if same_q(x, out) => {
            let (lo, hi) = bounds(clamp, q_of(dt(out)).ok_or_else(combo)?);
            QPrep::MaxPool { lo, hi }
        }
        Node::GlobalAvgPool { x, clamp, .. } => match (q_of(dt(x)), q_of(dt(out))) {
            (Some(qi), Some(qo)) => {
                let (lo, hi) = bounds(clamp, qo);
                QPrep::Mean { qi, qo, lo, hi }
            }
            _ => return Err(combo()),
        },
        Node::Conv {
            conv,
            x,
            w,
            bias,
            clamp,
            ..
        } => {
            if let (DType::QD8 { nonbatch }, DType::F32) = (dt(x), dt(out)) {
                return prepare_dynamic_conv(g, conv, w, bias, clamp, nonbatch).map(Some);
            }
            let (Some(qi), Some(qo)) = (q_of(dt(x)), q_of(dt(out))) else {
                return Err(combo());
            };
            if conv.kind == ConvKind::Deconv {
                return prepare_deconv(g, conv, w, bias, clamp, qi, qo).map(Some);
            }
            let ws = g.values[w].shape;
            match conv.kind {
                ConvKind::Depthwise => prepare_depthwise(g, conv, w, bias, clamp, qi, qo)?,
                ConvKind::Conv if conv.groups == 1 => {
                    let k = conv.win.kh * conv.win.kw * conv.group_in;
                    let oc = conv.out_channels();
                    if ws.dims() != [oc, conv.win.kh, conv.win.kw, conv.group_in] {
                        return Err(invalid(format!("filter shape {:?}", ws.dims())));
                    }
                    let wq = pack_filter(g, w, oc, k, 0)?;
                    QPrep::Product(product(g, wq, w, bias, qi, qo, clamp, 0)?)
                }
                _ => {
                    return Err(unsupported(format!(
                        "int8 {:?} convolution with {} groups",
                        conv.kind, conv.groups
                    )))
                }
            }
        }
        Node::FullyConnected {
            x,
            w,
            bias,
            clamp,
            transpose_w,
            ..
        } => {
            if transpose_w {
                return Err(unsupported(
                    "quantized fully connected with transposed weights",
                ));
            }
            if !matches!(g.values[w].kind, Kind::Constant(_)) {
                return Err(unsupported(
                    "quantized fully connected with a non-constant filter",
                ));
            }
            let ws = g.values[w].shape;
            if ws.rank() != 2 {
                return Err(unsupported(format!("filter of rank {}", ws.rank())));
            }
            let (oc, k) = (ws.dims()[0], ws.dims()[1]);
            match (dt(x), dt(out)) {
                (DType::QS8 { scale, zp }, DType::QS8 { scale: s2, zp: z2 }) => {
                    let wq = pack_filter(g, w, oc, k, 0)?;
                    let (qi, qo) = (Q { scale, zp }, Q { scale: s2, zp: z2 });
                    QPrep::Product(product(g, wq, w, bias, qi, qo, clamp, 0)?)
                }
                (DType::QD8 { .. }, DType::F32) => dynamic_product(g, w, bias, clamp, oc, k)?,
                _ => return Err(combo()),
            }
        }
        _ => return Err(combo()),
    }))
}

/// An int8 depthwise convolution (multiplier 1): filter widened to i16 (and i32), biases,
/// requantization scale per channel.
#[allow(clippy::too_many_arguments)]
fn prepare_depthwise(
    g: &Graph<'_>,
    conv: Conv,
    w: usize,
    bias: Option<usize>,
    clamp: Clamp,
    qi: Q,
    qo: Q,
) -> Result<QPrep, KernelError> {
    let dt = |v: usize| g.values[v].dtype;
    let ws = g.values[w].shape;
    let co = conv.out_channels();
    if conv.group_out != 1 {
        return Err(unsupported(
            "int8 depthwise convolution with a channel multiplier",
        ));
    }
    if !(-128..=127).contains(&qi.zp) {
        return Err(invalid(format!("int8 zero point {}", qi.zp)));
    }
    if ws.dims() != [1, conv.win.kh, conv.win.kw, co] {
        return Err(invalid(format!("filter shape {:?}", ws.dims())));
    }
    let sw = weight_scales(g, w, co, 3)?;
    let wb = const_bytes(g, w)?;
    let taps = conv.win.kh * conv.win.kw;
    if wb.len() < taps * co {
        return Err(invalid("filter too short"));
    }
    let b = match bias {
        None => vec![0; co],
        Some(b) => match dt(b) {
            DType::QC32 { .. } | DType::QS32 { .. } => const_i32(g, b, co)?,
            d => return Err(unsupported(format!("bias of datatype {d:?}"))),
        },
    };
    let (lo, hi) = bounds(clamp, qo);
    let w: Vec<i16> = wb[..taps * co].iter().map(|&v| v as i8 as i16).collect();
    Ok(QPrep::Depthwise(QDwWeights {
        win: conv.win,
        channels: co,
        w32: w.iter().map(|&v| v as i32).collect(),
        w,
        bias: b,
        scale: sw.iter().map(|&s| qi.scale * s / qo.scale).collect(),
        qi,
        qo,
        lo,
        hi,
    }))
}

/// A fully connected node over dynamically quantized rows: packed 8- or 4-bit weights with
/// their per-channel or blockwise scales, a float bias.
fn dynamic_product(
    g: &Graph<'_>,
    w: usize,
    bias: Option<usize>,
    clamp: Clamp,
    oc: usize,
    k: usize,
) -> Result<QPrep, KernelError> {
    let dt = |v: usize| g.values[v].dtype;
    let (block, scale) = match dt(w) {
        DType::QB4 { block, scales } => (block as usize, g.scales[scales as usize].clone()),
        DType::QC8 { .. } | DType::QC4 { .. } => (0, weight_scales(g, w, oc, 0)?),
        d => return Err(unsupported(format!("filter of datatype {d:?}"))),
    };
    let mut wq = pack_filter(g, w, oc, k, block)?;
    wq.set_block_scales(&scale)?;
    let bias = bias.map(|b| const_f32(g, b, oc)).transpose()?;
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    Ok(QPrep::Dynamic(DProduct {
        w: wq,
        scale,
        bias,
        lo,
        hi,
    }))
}

/// Bytes of u8 scratch the node needs for its activation operand at the given input shape.
pub fn scratch_len(prep: &QPrep, node: &Node, shapes: &[Shape]) -> usize {
    match (prep, node) {
        (QPrep::Product(p), Node::Conv { x, .. }) => conv_block(p, &shapes[*x]) * p.w.quads * 4,
        (QPrep::DynConv(p), Node::Conv { x, out, .. }) => {
            let (xs, os) = (shapes[*x].dims(), shapes[*out].dims());
            if xs.len() != 4 || os.len() != 4 {
                return 0;
            }
            p.scratch_len(xs[1], xs[2], xs[3], os[1] * os[2])
        }
        (
            QPrep::Product(QProduct { w, .. }) | QPrep::Dynamic(DProduct { w, .. }),
            Node::FullyConnected { x, .. },
        ) => shapes[*x].numel().unwrap_or(0) / w.k.max(1) * w.quads * 4,
        _ => 0,
    }
}

/// Output pixels per block of the im2col buffer (about 4 MiB of it).
fn conv_block(p: &QProduct, xs: &Shape) -> usize {
    if xs.rank() != 4 {
        return 0;
    }
    let kp = p.w.quads * 4;
    let pixels = xs.dims()[0] * xs.dims()[1] * xs.dims()[2];
    ((4 << 20) / kp.max(1)).max(64).min(pixels.max(1))
}

/// Runs node `node` with its quantized preparation.
#[allow(clippy::too_many_arguments)]
pub fn run(
    prep: &QPrep,
    node: &Node,
    par: &dyn Parallel,
    shapes: &[Shape],
    dtypes: &[DType],
    ins: [&[u8]; 5],
    out: &mut [u8],
    os: &Shape,
    scratch: &mut [u8],
) -> Result<(), KernelError> {
    let [a, b, c, d, e] = ins;
    let n = os.count()?;
    match (prep, node) {
        (QPrep::Quantize(q), _) => ops::quantize(par, f32s(a)?, *q, &mut i8s_mut(out)[..n]),
        (QPrep::Dequantize(q), _) => {
            ops::dequantize(par, &i8s(a)[..n], *q, &mut f32s_mut(out)?[..n])
        }
        (QPrep::Requant { qi, qo, lo, hi }, _) => {
            ops::requantize(&i8s(a)[..n], *qi, *qo, *lo, *hi, &mut i8s_mut(out)[..n])
        }
        (QPrep::DynQuant { nonbatch }, _) => {
            let (rows, row) = qd8_rows(os, *nonbatch);
            let (data, sc, zp) = qd8_parts_mut(out, n, rows)?;
            ops::quantize_rows(&f32s(a)?[..n], row, i8s_mut(data), sc, zp);
        }
        (
            QPrep::Binary { qa, qb, qo, lo, hi },
            &Node::Binary {
                op, a: va, b: vb, ..
            },
        ) => ops::binary(
            par,
            op,
            i8s(a),
            &shapes[va],
            *qa,
            i8s(b),
            &shapes[vb],
            *qb,
            i8s_mut(out),
            os,
            *qo,
            *lo,
            *hi,
        )?,
        (QPrep::Bytes { .. }, &Node::Transpose { perm, x, .. }) => {
            layout::transpose(par, i8s(a), &shapes[x], &perm, i8s_mut(out))?
        }
        (QPrep::Bytes { .. }, &Node::Reshape { .. }) => out[..n].copy_from_slice(
            a.get(..n)
                .ok_or_else(|| invalid("reshape input too short"))?,
        ),
        (QPrep::Bytes { .. }, &Node::Slice { offsets, x, .. }) => {
            let mut o = offsets;
            for (i, v) in o.dims_mut().iter_mut().enumerate() {
                *v = (*v).min(shapes[x].dims().get(i).copied().unwrap_or(0));
            }
            layout::slice(i8s(a), &shapes[x], o.dims(), os, i8s_mut(out))?
        }
        (
            QPrep::Bytes { .. },
            &Node::Concat {
                inputs, n: k, axis, ..
            },
        ) => {
            let all = [a, b, c, d, e];
            let mut parts: [(&[i8], Shape); 5] = [(&[], Shape::default()); 5];
            for j in 0..k {
                parts[j] = (i8s(all[j]), shapes[inputs[j]]);
            }
            layout::concat(&parts[..k], axis, i8s_mut(out), os)?
        }
        (QPrep::Bytes { pad }, &Node::Pad { pre, x, .. }) => {
            layout::pad(i8s(a), &shapes[x], pre.dims(), *pad, i8s_mut(out), os)?
        }
        (QPrep::MaxPool { lo, hi }, &Node::Pool { win, x, .. }) => {
            let xs = shapes[x].dims();
            let g = Geom {
                n: xs[0],
                ih: xs[1],
                iw: xs[2],
                oh: os.dims()[1],
                ow: os.dims()[2],
                c: xs[3],
            };
            ops::max_pool(par, &win, g, i8s(a), i8s_mut(out), *lo, *hi)?
        }
        (QPrep::Mean { qi, qo, lo, hi }, &Node::GlobalAvgPool { x, .. }) => {
            let xs = shapes[x].dims();
            let r = xs.len();
            let outer: usize = xs[..r - 3].iter().product();
            ops::global_mean(
                i8s(a),
                outer,
                xs[r - 3] * xs[r - 2],
                xs[r - 1],
                *qi,
                *qo,
                *lo,
                *hi,
                i8s_mut(out),
            )?
        }
        (QPrep::Depthwise(dw), &Node::Conv { x, .. }) => {
            let xs = shapes[x].dims();
            let g = Geom {
                n: xs[0],
                ih: xs[1],
                iw: xs[2],
                oh: os.dims()[1],
                ow: os.dims()[2],
                c: xs[3],
            };
            ops::depthwise(par, dw, g, i8s(a), i8s_mut(out))?
        }
        (QPrep::Product(p), &Node::Conv { conv, x, .. }) => {
            conv_product(par, p, &conv.win, &shapes[x], os, a, out, scratch)?
        }
        (QPrep::Product(p), &Node::FullyConnected { x, .. }) => {
            let k = p.w.k;
            let rows = if k == 0 { 0 } else { shapes[x].count()? / k };
            let kp = p.w.quads * 4;
            let au = scratch
                .get_mut(..rows * kp)
                .ok_or_else(|| invalid("quantized fully connected scratch too small"))?;
            ops::to_u8_rows(i8s(a), rows, k, kp, 128, au);
            let epi = Epilogue::Requant {
                bias: &p.bias,
                scale: &p.scale,
                zp: p.qo.zp,
                qmin: p.lo,
                qmax: p.hi,
            };
            qgemm(par, au, kp, rows, &p.w, &epi, Out::I8(i8s_mut(out)), p.w.n)?
        }
        (QPrep::Dynamic(p), &Node::FullyConnected { x, .. }) => {
            dynamic_fc(par, p, dtypes[x], &shapes[x], a, out, scratch)?
        }
        (QPrep::DynConv(p), &Node::Conv { conv, x, .. }) => dynamic_conv(
            par, p, &conv.win, dtypes[x], &shapes[x], os, a, out, scratch,
        )?,
        (QPrep::Deconv(p), &Node::Conv { x, .. }) => {
            let (xs, od) = (shapes[x].dims(), os.dims());
            if xs.len() != 4 || od.len() != 4 {
                return Err(KernelError::shape(
                    "transposed convolution of rank other than 4",
                ));
            }
            convs::deconv(
                par,
                p,
                i8s(a),
                xs[0],
                xs[1],
                xs[2],
                i8s_mut(out),
                od[1],
                od[2],
            )?
        }
        _ => return Err(invalid("quantized node without a matching kernel")),
    }
    Ok(())
}

/// An int8 convolution: products over im2col blocks of output pixels, requantized.
#[allow(clippy::too_many_arguments)]
fn conv_product(
    par: &dyn Parallel,
    p: &QProduct,
    win: &Window,
    x_shape: &Shape,
    os: &Shape,
    a: &[u8],
    out: &mut [u8],
    scratch: &mut [u8],
) -> Result<(), KernelError> {
    let bp = conv_block(p, x_shape).max(1);
    let xs = x_shape.dims();
    let (bn, ih, iw, cin) = (xs[0], xs[1], xs[2], xs[3]);
    let (oh, ow) = (os.dims()[1], os.dims()[2]);
    let kp = p.w.quads * 4;
    let pad = (p.qi.zp + 128) as u8;
    let oc = p.w.n;
    let epi = Epilogue::Requant {
        bias: &p.bias,
        scale: &p.scale,
        zp: p.qo.zp,
        qmin: p.lo,
        qmax: p.hi,
    };
    let x = i8s(a);
    let o = i8s_mut(out);
    let pixels = oh * ow;
    let (in_img, out_img) = (ih * iw * cin, pixels * oc);
    for bi in 0..bn {
        let xb = &x[bi * in_img..(bi + 1) * in_img];
        let ob = &mut o[bi * out_img..(bi + 1) * out_img];
        let mut p0 = 0;
        while p0 < pixels {
            let np = bp.min(pixels - p0);
            let cols = scratch
                .get_mut(..np * kp)
                .ok_or_else(|| invalid("quantized convolution scratch too small"))?;
            ops::im2col_u8(par, xb, ih, iw, cin, win, ow, p0, np, kp, pad, cols);
            qgemm(
                par,
                cols,
                kp,
                np,
                &p.w,
                &epi,
                Out::I8(&mut ob[p0 * oc..]),
                oc,
            )?;
            p0 += np;
        }
    }
    Ok(())
}

/// A fully connected node over dynamically quantized rows (`qdint8`), dequantized to float32.
fn dynamic_fc(
    par: &dyn Parallel,
    p: &DProduct,
    x_dtype: DType,
    x_shape: &Shape,
    a: &[u8],
    out: &mut [u8],
    scratch: &mut [u8],
) -> Result<(), KernelError> {
    let DType::QD8 { nonbatch } = x_dtype else {
        return Err(invalid("dynamic product without qdint8 input"));
    };
    let xs = *x_shape;
    let (rows, row) = qd8_rows(&xs, nonbatch);
    let k = p.w.k;
    if row != k {
        return Err(KernelError::shape(format!(
            "dynamic int8 rows of {row} values for {k} inputs"
        )));
    }
    let (data, rs, zps) = qd8_parts(a, xs.count()?, rows)?;
    let kp = p.w.quads * 4;
    let au = scratch
        .get_mut(..rows * kp)
        .ok_or_else(|| invalid("dynamic fully connected scratch too small"))?;
    ops::to_u8_rows(i8s(data), rows, k, kp, 128, au);
    let epi = Epilogue::Dequant {
        rows: rs,
        zps,
        scale: &p.scale,
        bias: p.bias.as_deref(),
        lo: p.lo,
        hi: p.hi,
    };
    qgemm(
        par,
        au,
        kp,
        rows,
        &p.w,
        &epi,
        Out::F32(f32s_mut(out)?),
        p.w.n,
    )?;
    Ok(())
}

/// A convolution over dynamically quantized images: the filter `[groups·go][kh][kw][gi]`
/// packed group by group as the dynamic fully connected product's, per-channel scales, float
/// bias.
fn prepare_dynamic_conv(
    g: &Graph<'_>,
    conv: Conv,
    w: usize,
    bias: Option<usize>,
    clamp: Clamp,
    nonbatch: u8,
) -> Result<QPrep, KernelError> {
    let dt = |v: usize| g.values[v].dtype;
    if conv.kind != ConvKind::Conv {
        return Err(unsupported(format!(
            "dynamic int8 {:?} convolution with {} groups",
            conv.kind, conv.groups
        )));
    }
    if nonbatch < 3 {
        return Err(unsupported(format!(
            "dynamic int8 convolution input quantized over {nonbatch} non-batch dims (needs \
             one scale per image)"
        )));
    }
    if !matches!(dt(w), DType::QC8 { .. }) {
        return Err(unsupported(format!(
            "dynamic int8 convolution with a filter of datatype {:?}",
            dt(w)
        )));
    }
    let (go, oc) = (conv.group_out, conv.out_channels());
    let ws = g.values[w].shape;
    if ws.dims() != [oc, conv.win.kh, conv.win.kw, conv.group_in] {
        return Err(invalid(format!("filter shape {:?}", ws.dims())));
    }
    let k = conv.win.kh * conv.win.kw * conv.group_in;
    let b = const_bytes(g, w)?;
    let b = b
        .get(..ws.count()?)
        .ok_or_else(|| invalid("filter too short"))?;
    let packed = (0..conv.groups)
        .map(|gr| QWeights::new(go, k, 0, |j, kk| b[(gr * go + j) * k + kk] as i8))
        .collect::<Result<Vec<_>, _>>()?;
    let (lo, hi) = clamp.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    Ok(QPrep::DynConv(DConv {
        w: packed,
        scale: weight_scales(g, w, oc, 0)?,
        bias: bias.map(|v| const_f32(g, v, oc)).transpose()?,
        lo,
        hi,
    }))
}

/// A static int8 transposed convolution: the filter `[groups·go][kh][kw][gi]` widened, int32
/// biases, requantization scales per output channel.
#[allow(clippy::too_many_arguments)]
fn prepare_deconv(
    g: &Graph<'_>,
    conv: Conv,
    w: usize,
    bias: Option<usize>,
    clamp: Clamp,
    qi: Q,
    qo: Q,
) -> Result<QPrep, KernelError> {
    let dt = |v: usize| g.values[v].dtype;
    if !(-128..=127).contains(&qi.zp) {
        return Err(invalid(format!("int8 zero point {}", qi.zp)));
    }
    let co = conv.out_channels();
    let ws = g.values[w].shape;
    if ws.dims() != [co, conv.win.kh, conv.win.kw, conv.group_in] {
        return Err(invalid(format!("filter shape {:?}", ws.dims())));
    }
    let sw = weight_scales(g, w, co, 0)?;
    let len = ws.count()?;
    let wb = const_bytes(g, w)?;
    let wb = wb.get(..len).ok_or_else(|| invalid("filter too short"))?;
    let b = match bias {
        None => vec![0; co],
        Some(b) => match dt(b) {
            DType::QC32 { .. } | DType::QS32 { .. } => const_i32(g, b, co)?,
            d => return Err(unsupported(format!("bias of datatype {d:?}"))),
        },
    };
    let (lo, hi) = bounds(clamp, qo);
    Ok(QPrep::Deconv(QDeconv {
        conv,
        w: wb.iter().map(|&v| v as i8 as i32).collect(),
        bias: b,
        scale: sw.iter().map(|&s| qi.scale * s / qo.scale).collect(),
        qi,
        qo,
        lo,
        hi,
    }))
}

/// A convolution over dynamically quantized images (`qdint8`), dequantized to float32.
#[allow(clippy::too_many_arguments)]
fn dynamic_conv(
    par: &dyn Parallel,
    p: &DConv,
    win: &Window,
    x_dtype: DType,
    x_shape: &Shape,
    os: &Shape,
    a: &[u8],
    out: &mut [u8],
    scratch: &mut [u8],
) -> Result<(), KernelError> {
    let DType::QD8 { nonbatch } = x_dtype else {
        return Err(invalid("dynamic convolution without qdint8 input"));
    };
    let (xs, od) = (x_shape.dims(), os.dims());
    if xs.len() != 4 || od.len() != 4 {
        return Err(KernelError::shape(
            "dynamic int8 convolution of rank other than 4",
        ));
    }
    let (rows, _) = qd8_rows(x_shape, nonbatch);
    let (data, rs, zps) = qd8_parts(a, x_shape.count()?, rows)?;
    convs::dynamic_conv(
        par,
        p,
        win,
        [xs[0], xs[1], xs[2], xs[3]],
        (od[1], od[2]),
        i8s(data),
        rs,
        zps,
        f32s_mut(out)?,
        scratch,
    )
}
