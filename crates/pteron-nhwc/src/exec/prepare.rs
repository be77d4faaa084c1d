//! Preparing a graph at init: who writes and reads each value (checked), the constants kept
//! (copied, aligned) for the kernels that read them in place, and each node's prepared kernel
//! (packed filters, copied biases; int8 nodes in [`crate::quant::exec`]).

use pteron_core::KernelError;

use crate::graph::{Clamp, Conv, ConvKind, DType, Graph, Kind, Node};
use crate::kernels::gemm::{ConvWeights, FcFilter};
use crate::kernels::spatial::DwWeights;
use crate::quant::exec as qexec;
use crate::util::{read_f16, read_f32, Buf};

use super::{invalid, Fuse, Home, Prep, Step};

/// Who writes and reads each value.
pub(super) struct Uses {
    /// Constants read by a kernel in place (everything but packed filters and biases).
    pub in_place: Vec<bool>,
    /// The node that writes each value (`usize::MAX`: none).
    pub producer: Vec<usize>,
    /// The last node that reads or writes each value.
    pub last_use: Vec<usize>,
}

/// Checks that every value is written once, by a node before those that read it, and that
/// external values have datatypes the engine takes.
pub(super) fn check_uses(g: &Graph<'_>) -> Result<Uses, KernelError> {
    let nv = g.values.len();
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
    Ok(Uses {
        in_place,
        producer,
        last_use,
    })
}

/// A float constant's values (f32 or widened half, or computed).
fn const_f32(g: &Graph<'_>, v: usize) -> Result<Vec<f32>, KernelError> {
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
}

/// Where each value lives: constants read in place are copied (aligned) into the returned
/// buffers; packed ones get no bytes (their nodes pack them).
pub(super) fn place_constants(
    g: &Graph<'_>,
    in_place: &[bool],
) -> Result<(Vec<Home>, Vec<Buf>), KernelError> {
    let nv = g.values.len();
    let mut homes = vec![Home::Arena; nv];
    let mut consts = Vec::new();
    for (v, val) in g.values.iter().enumerate() {
        if val.kind.is_constant() {
            homes[v] = if in_place[v] {
                consts.push(match (val.kind, val.dtype) {
                    (Kind::Constant(b), d) if d.is_q8() => {
                        Buf::from_bytes(b.get(..val.shape.count()?).unwrap_or(b))?
                    }
                    _ => Buf::from_f32(&const_f32(g, v)?)?,
                });
                Home::Const(consts.len() - 1)
            } else {
                Home::Packed
            };
        }
    }
    Ok((homes, consts))
}

/// Every node's step with what it prepared, and the bytes of packed weights.
pub(super) fn prepare_steps(g: &Graph<'_>) -> Result<(Vec<Step>, usize), KernelError> {
    let mut steps = Vec::with_capacity(g.nodes.len());
    let mut packed_bytes = 0;
    for (i, node) in g.nodes.iter().enumerate() {
        let ctx = |e: KernelError| match e {
            KernelError::Unsupported(m) => {
                KernelError::unsupported(format!("node {i} ({}): {m}", g.node_names[i]))
            }
            e => invalid(format!("node {i} ({}): {e}", g.node_names[i])),
        };
        let prep = match qexec::prepare(g, node).map_err(ctx)? {
            Some(q) => Prep::Q(q),
            None => match *node {
                Node::FullyConnected {
                    w,
                    bias,
                    transpose_w,
                    ..
                } => prepare_fc(g, w, bias, transpose_w).map_err(ctx)?,
                Node::Conv {
                    conv,
                    w,
                    bias,
                    clamp,
                    ..
                } => prepare_conv(g, conv, w, bias, clamp).map_err(ctx)?,
                _ => Prep::None,
            },
        };
        packed_bytes += match &prep {
            Prep::None => 0,
            Prep::Fc { filter, .. } => filter.bytes(),
            Prep::Conv(cw) => cw.bytes(),
            Prep::Dw(dw) => dw.bytes(),
            Prep::Q(q) => q.bytes(),
        };
        steps.push(Step {
            node: node.clone(),
            prep,
            fuse: Fuse::No,
        });
    }
    Ok((steps, packed_bytes))
}

/// A fully connected node's filter (packed when constant) and constant bias.
fn prepare_fc(
    g: &Graph<'_>,
    w: usize,
    bias: Option<usize>,
    transpose_w: bool,
) -> Result<Prep, KernelError> {
    let ws = &g.values[w].shape;
    if ws.rank() != 2 {
        return Err(KernelError::unsupported(format!(
            "filter of rank {}",
            ws.rank()
        )));
    }
    let (ic, oc) = if transpose_w {
        (ws.dims()[0], ws.dims()[1])
    } else {
        (ws.dims()[1], ws.dims()[0])
    };
    let filter = match g.values[w].kind {
        Kind::Constant(_) | Kind::Computed(_) => {
            FcFilter::pack(&const_f32(g, w)?, ic, oc, transpose_w)?
        }
        _ => FcFilter::Dynamic {
            transpose: transpose_w,
        },
    };
    let bias = match bias {
        Some(b) if g.values[b].kind.is_constant() => {
            let v = const_f32(g, b)?;
            if v.len() != oc {
                return Err(invalid(format!(
                    "bias of {} values for {oc} outputs",
                    v.len()
                )));
            }
            Some(v)
        }
        _ => None,
    };
    Ok(Prep::Fc { filter, bias })
}

/// A convolution's packed filter and bias (depthwise or not); a computed filter is told when
/// it has been packed.
fn prepare_conv(
    g: &Graph<'_>,
    conv: Conv,
    w: usize,
    bias: Option<usize>,
    clamp: Clamp,
) -> Result<Prep, KernelError> {
    if !g.values[w].kind.is_constant() || bias.is_some_and(|b| !g.values[b].kind.is_constant()) {
        return Err(KernelError::unsupported(
            "convolution with a non-constant filter or bias",
        ));
    }
    let ws = g.values[w].shape;
    let (kh, kw) = (conv.win.kh, conv.win.kw);
    let expect = match conv.kind {
        ConvKind::Depthwise => [1, kh, kw, conv.out_channels()],
        _ => [conv.out_channels(), kh, kw, conv.group_in],
    };
    if ws.dims() != expect {
        return Err(invalid(format!(
            "filter shape {:?}, expected {expect:?}",
            ws.dims()
        )));
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
        None => const_f32(g, w)?,
    };
    let bv = bias.map(|b| const_f32(g, b)).transpose()?;
    if let Some(b) = &bv {
        if b.len() != conv.out_channels() {
            return Err(invalid(format!(
                "bias of {} values for {} outputs",
                b.len(),
                conv.out_channels()
            )));
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
        )?;
        Prep::Dw(dw)
    } else {
        let cw = match rows {
            Some((wr, scale)) => ConvWeights::scaled(conv, wr, scale, bv.as_deref(), clamp),
            None => ConvWeights::new(conv, &wv, bv.as_deref(), clamp),
        }?;
        Prep::Conv(cw)
    };
    if let Some(c) = source {
        c.done();
    }
    Ok(prep)
}
