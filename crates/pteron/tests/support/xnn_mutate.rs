//! Mutations of the XNNPACK delegate payloads inside `.pte` programs, for the `xnnpack_payload`
//! fuzz target and the tests: the payload is found through the program's delegates, split into
//! its "XH00" header, XNNPACK flatbuffer and constant region, and changed at one of those
//! levels: a header field, a field of the graph (unpacked with the flatbuffers object API,
//! `xnnpack_object_api.rs`, declared as `crate::xnnobj` by every user), bytes of the
//! flatbuffer, or the constant region. The program is then packed again around the new payload.
//!
//! Like `mutate.rs`, everything here must be panic-free on any input.

#![allow(dead_code)]

use crate::mutate::{self, Rng, INTERESTING_U32};
use crate::objapi::executorch_flatbuffer as fbo;
use crate::xnnobj::fb_xnnpack as xo;

pub const BACKEND_ID: &str = "XnnpackBackend";
/// XNNPACK's "no value" id (optional bias, mask).
pub const INVALID_ID: u32 = u32::MAX;

// ------------------------------------------------------------------------------------------
// Payload containers

/// A payload's parts. `header` is false for a bare flatbuffer (legacy inline constants).
#[derive(Clone, Debug, Default)]
pub struct Parts {
    pub header: bool,
    pub fb: Vec<u8>,
    pub constants: Vec<u8>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn range(b: &[u8], off: u64, size: u64) -> Option<&[u8]> {
    let start = usize::try_from(off).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    b.get(start..end)
}

/// Splits a payload whose header ranges are sound.
pub fn split(payload: &[u8]) -> Option<Parts> {
    if payload.get(4..8) != Some(b"XH00") {
        return Some(Parts {
            header: false,
            fb: payload.to_vec(),
            constants: Vec::new(),
        });
    }
    let fb = range(
        payload,
        u32_at(payload, 10)? as u64,
        u32_at(payload, 14)? as u64,
    )?;
    let constants = range(payload, u32_at(payload, 18)? as u64, u64_at(payload, 22)?)?;
    Some(Parts {
        header: true,
        fb: fb.to_vec(),
        constants: constants.to_vec(),
    })
}

/// Lays parts out as ExecuTorch's serializer does: a 30-byte header padded to 32, the
/// flatbuffer, the constant region at the next 16-byte boundary.
pub fn join(parts: &Parts) -> Vec<u8> {
    if !parts.header {
        return parts.fb.clone();
    }
    let fb_off = 32usize;
    let c_off = (fb_off + parts.fb.len()).div_ceil(16) * 16;
    let mut b = vec![0u8; c_off];
    b[4..8].copy_from_slice(b"XH00");
    b[8..10].copy_from_slice(&30u16.to_le_bytes());
    b[10..14].copy_from_slice(&(fb_off as u32).to_le_bytes());
    b[14..18].copy_from_slice(&(parts.fb.len() as u32).to_le_bytes());
    b[18..22].copy_from_slice(&(c_off as u32).to_le_bytes());
    b[22..30].copy_from_slice(&(parts.constants.len() as u64).to_le_bytes());
    b[fb_off..fb_off + parts.fb.len()].copy_from_slice(&parts.fb);
    b.extend_from_slice(&parts.constants);
    b
}

/// The verified graph of a flatbuffer, unpacked.
pub fn unpack_graph(fb: &[u8]) -> Option<xo::XNNGraphT> {
    let opts = flatbuffers::VerifierOptions {
        max_tables: 200_000,
        max_apparent_size: 1 << 28,
        ..Default::default()
    };
    // The identifier is checked by the backend, not here: mutants may change it.
    let g = flatbuffers::root_with_opts::<xo::XNNGraph>(&opts, fb).ok()?;
    Some(g.unpack())
}

/// `g` as a flatbuffer with identifier `ident` ("XN01" as the exporter writes).
pub fn pack_graph(g: &xo::XNNGraphT, ident: &str) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let root = g.pack(&mut b);
    b.finish(root, Some(ident));
    b.finished_data().to_vec()
}

// ------------------------------------------------------------------------------------------
// Payloads inside programs

/// Where each XNNPACK delegate's payload is: (plan, delegate) indices.
pub fn delegates(p: &fbo::ProgramT) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    for (pi, plan) in p.execution_plan.iter().flatten().enumerate() {
        for (di, d) in plan.delegates.iter().flatten().enumerate() {
            if d.id.as_deref() == Some(BACKEND_ID) && d.processed.is_some() {
                v.push((pi, di));
            }
        }
    }
    v
}

fn reference(p: &fbo::ProgramT, (pi, di): (usize, usize)) -> Option<(fbo::DataLocation, usize)> {
    let r = p
        .execution_plan
        .as_ref()?
        .get(pi)?
        .delegates
        .as_ref()?
        .get(di)?
        .processed
        .as_ref()?;
    Some((r.location, r.index as usize))
}

/// Bytes of segment `i` of a program whose segment data is `segments`.
pub fn segment<'a>(p: &fbo::ProgramT, segments: &'a [u8], i: usize) -> Option<&'a [u8]> {
    let s = p.segments.as_ref()?.get(i)?;
    range(segments, s.offset, s.size_)
}

/// The payload of delegate `at`.
pub fn payload(p: &fbo::ProgramT, segments: &[u8], at: (usize, usize)) -> Option<Vec<u8>> {
    match reference(p, at)? {
        (fbo::DataLocation::SEGMENT, i) => segment(p, segments, i).map(<[u8]>::to_vec),
        (_, i) => p.backend_delegate_data.as_ref()?.get(i)?.data.clone(),
    }
}

/// Replaces delegate `at`'s payload; returns the program's new segment data (segments laid
/// out again, each at a 128-byte boundary).
pub fn set_payload(
    p: &mut fbo::ProgramT,
    segments: &[u8],
    at: (usize, usize),
    new: Vec<u8>,
) -> Option<Vec<u8>> {
    let (loc, idx) = reference(p, at)?;
    if loc != fbo::DataLocation::SEGMENT {
        let d = p.backend_delegate_data.as_mut()?.get_mut(idx)?;
        d.data = Some(new);
        return Some(segments.to_vec());
    }
    let segs = p.segments.as_mut()?;
    let mut out = Vec::with_capacity(segments.len() + new.len());
    for (i, s) in segs.iter_mut().enumerate() {
        let bytes = if i == idx {
            &new[..]
        } else {
            range(segments, s.offset, s.size_).unwrap_or(&[])
        };
        out.resize(out.len().div_ceil(128) * 128, 0);
        s.offset = out.len() as u64;
        s.size_ = bytes.len() as u64;
        out.extend_from_slice(bytes);
    }
    Some(out)
}

/// The program's named data (key → bytes), which XNNPACK constants reference by key.
pub fn named_data(p: &fbo::ProgramT, segments: &[u8]) -> Vec<(String, Vec<u8>)> {
    p.named_data
        .iter()
        .flatten()
        .filter_map(|n| {
            let bytes = segment(p, segments, n.segment_index as usize)?;
            Some((n.key.clone()?, bytes.to_vec()))
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// Picking values

fn pick_u32(rng: &mut Rng, v: u32) -> u32 {
    match rng.below(4) {
        0 => v.wrapping_add([1, 2, 4, 8][rng.below(4)]),
        1 => v.wrapping_sub([1, 2, 4, 8][rng.below(4)]),
        _ => INTERESTING_U32[rng.below(INTERESTING_U32.len())],
    }
}

/// A value id: mostly one that exists (type confusion between values), sometimes not.
fn pick_id(rng: &mut Rng, ids: &[u32], v: u32) -> u32 {
    match rng.below(8) {
        0 => INVALID_ID,
        1 => pick_u32(rng, v),
        2 => ids.len() as u32,
        _ if !ids.is_empty() => ids[rng.below(ids.len())],
        _ => 0,
    }
}

fn pick_f32(rng: &mut Rng, v: f32) -> f32 {
    let c = [
        0.0,
        -0.0,
        -1.0,
        1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE / 2.0,
        f32::MAX,
        -v,
        v * 2.0,
        1e-30,
    ];
    c[rng.below(c.len())]
}

fn pick_datatype(rng: &mut Rng) -> xo::XNNDatatype {
    xo::XNNDatatype(match rng.below(8) {
        0 => [-1, 15, 100, i16::MAX][rng.below(4)],
        _ => rng.below(15) as i16,
    })
}

fn mutate_u32_vec(v: &mut Option<Vec<u32>>, rng: &mut Rng, ids: &[u32]) {
    match rng.below(8) {
        0 => *v = None,
        1 => *v = Some(Vec::new()),
        2 => {
            let n = [7, 8, 16, 64, 1000][rng.below(5)];
            *v = Some((0..n).map(|_| pick_u32(rng, 1)).collect());
        }
        _ => {
            let items = v.get_or_insert_with(Vec::new);
            mutate::mutate_list(items, rng, |r| {
                if r.below(3) == 0 {
                    pick_id(r, ids, 0)
                } else {
                    pick_u32(r, 1)
                }
            });
        }
    }
}

fn tensor_value(v: &mut xo::XValueT) -> Option<&mut xo::XNNTensorValueT> {
    match &mut v.xvalue_union {
        xo::XValueUnionT::XNNTensorValue(t) => Some(t),
        xo::XValueUnionT::XNNQuantizedTensorValue(q) => q.tensor_value.as_deref_mut(),
        _ => None,
    }
}

fn value_ids(g: &xo::XNNGraphT) -> Vec<u32> {
    let mut ids = Vec::new();
    for v in g.xvalues.iter().flatten() {
        match &v.xvalue_union {
            xo::XValueUnionT::XNNTensorValue(t) => ids.push(t.id_out),
            xo::XValueUnionT::XNNQuantizedTensorValue(q) => {
                if let Some(t) = &q.tensor_value {
                    ids.push(t.id_out)
                }
            }
            _ => {}
        }
    }
    ids
}

// ------------------------------------------------------------------------------------------
// Graph mutations

/// One field of a tensor value: datatype, dims, constant index, external id, flags, id.
fn mutate_tensor_value(t: &mut xo::XNNTensorValueT, rng: &mut Rng, ids: &[u32], n_const: usize) {
    match rng.below(10) {
        0 => t.datatype = pick_datatype(rng),
        1 => t.num_dims = pick_u32(rng, t.num_dims),
        2 | 3 => mutate_u32_vec(&mut t.dims, rng, &[]),
        4 => {
            t.constant_buffer_idx = match rng.below(4) {
                0 => n_const as u32,
                1 => pick_u32(rng, t.constant_buffer_idx),
                _ => rng.below(n_const.max(1)) as u32,
            }
        }
        5 => t.external_id = pick_u32(rng, t.external_id),
        6 | 7 => {
            t.flags = match rng.below(4) {
                0 => pick_u32(rng, t.flags),
                _ => rng.below(4) as u32,
            }
        }
        8 => t.id_out = pick_id(rng, ids, t.id_out),
        _ => t.dq_datatype = pick_datatype(rng),
    }
}

fn mutate_scales(s: &mut Option<Vec<f32>>, rng: &mut Rng) {
    match rng.below(5) {
        0 => *s = None,
        1 => {
            let v = s.get_or_insert_with(Vec::new);
            if !v.is_empty() {
                let k = rng.below(v.len());
                v[k] = pick_f32(rng, v[k]);
            }
        }
        _ => {
            let v = s.get_or_insert_with(Vec::new);
            mutate::mutate_list(v, rng, |r| pick_f32(r, 1.0));
        }
    }
}

/// Quantization parameters: variant, scales (count and values), channel dim, 4-bit block size,
/// scale buffer index and count, zero point.
fn mutate_quant(q: &mut xo::XNNQuantizedTensorValueT, rng: &mut Rng, n_const: usize) {
    use xo::XNNQuantParamsT as Q;
    if rng.below(8) == 0 {
        // Another kind of parameters, with some defaults.
        q.quant_params = match rng.below(5) {
            0 => Q::NONE,
            1 => Q::PerTensorQuant(Box::new(xo::PerTensorQuantT {
                scale: 0.5,
                zero_point: 0,
            })),
            2 => Q::PerTokenDynamicQuant(Box::new(xo::PerTokenDynamicQuantT {
                num_nonbatch_dims: 1,
            })),
            3 => Q::PerChannelQuant(Box::new(xo::PerChannelQuantT {
                scale: Some(vec![1.0; 1 + rng.below(8)]),
                ..Default::default()
            })),
            _ => Q::PerChannelGroupQuant(Box::new(xo::PerChannelGroupQuantT {
                scale: Some(vec![1.0; 1 + rng.below(8)]),
                group_size: 32,
                ..Default::default()
            })),
        };
        return;
    }
    let pick_idx = |rng: &mut Rng, v: u32| match rng.below(3) {
        0 => pick_u32(rng, v),
        _ => rng.below(n_const + 1) as u32,
    };
    match &mut q.quant_params {
        Q::PerTensorQuant(p) => {
            if rng.below(2) == 0 {
                p.scale = pick_f32(rng, p.scale)
            } else {
                p.zero_point = mutate::pick_i32(rng, p.zero_point)
            }
        }
        Q::PerTokenDynamicQuant(p) => {
            p.num_nonbatch_dims = mutate::pick_i32(rng, p.num_nonbatch_dims)
        }
        Q::PerChannelQuant(p) => match rng.below(4) {
            0 => p.channel_dim = mutate::pick_i32(rng, p.channel_dim),
            1 => p.scale_buffer_idx = pick_idx(rng, p.scale_buffer_idx),
            2 => p.num_scales = pick_u32(rng, p.num_scales),
            _ => mutate_scales(&mut p.scale, rng),
        },
        Q::PerChannelGroupQuant(p) => match rng.below(5) {
            0 => p.channel_dim = mutate::pick_i32(rng, p.channel_dim),
            1 => {
                p.group_size = match rng.below(2) {
                    0 => [0, 1, 2, 16, 31, 33, 64, -32][rng.below(8)],
                    _ => mutate::pick_i32(rng, p.group_size),
                }
            }
            2 => p.scale_buffer_idx = pick_idx(rng, p.scale_buffer_idx),
            3 => p.num_scales = pick_u32(rng, p.num_scales),
            _ => mutate_scales(&mut p.scale, rng),
        },
        Q::NONE => {}
    }
}

/// Mutable references to a node's u32 fields, and its `[u32]` vectors and f32 fields.
type NodeFields<'a> = (
    Vec<&'a mut u32>,
    Vec<&'a mut Option<Vec<u32>>>,
    Vec<&'a mut f32>,
);

macro_rules! fields {
    ($n:expr; [$($u:ident),*]; [$($v:ident),*]; [$($f:ident),*]) => {{
        let n = &mut **$n;
        (vec![$(&mut n.$u),*], vec![$(&mut n.$v),*], vec![$(&mut n.$f),*])
    }};
}

fn node_fields(u: &mut xo::XNodeUnionT) -> NodeFields<'_> {
    use xo::XNodeUnionT as N;
    match u {
        N::XNNAdd(n)
        | N::XNNDiv(n)
        | N::XNNMinimum(n)
        | N::XNNMaximum(n)
        | N::XNNMultiply(n)
        | N::XNNSubtract(n)
        | N::XNNPReLU(n)
        | N::XNNBatchMatrixMultiply(n) => {
            fields!(n; [input1_id, input2_id, output_id, flags]; []; [])
        }
        N::XNNSoftmax(n)
        | N::XNNSigmoid(n)
        | N::XNNClamp(n)
        | N::XNNFloor(n)
        | N::XNNConvert(n)
        | N::XNNGlobalAvgPooling2d(n)
        | N::XNNSquareRoot(n)
        | N::XNNCeiling(n)
        | N::XNNHardswish(n)
        | N::XNNNegate(n)
        | N::XNNSquare(n)
        | N::XNNAbs(n)
        | N::XNNReciprocalSquareRoot(n)
        | N::XNNLog(n)
        | N::XNNGelu(n)
        | N::XNNTanh(n)
        | N::XNNExp(n)
        | N::XNNSin(n)
        | N::XNNCopy(n)
        | N::XNNCos(n) => fields!(n; [input_id, output_id, flags]; []; []),
        N::XNNFullyConnected(n) => {
            fields!(n; [input1_id, filter_id, bias_id, output_id, flags]; []; [])
        }
        N::XNNStaticTranspose(n) => {
            fields!(n; [num_dims, input_id, output_id, flags]; [perm]; [])
        }
        N::XNNConv2d(n) | N::XNNDepthwiseConv2d(n) | N::XNNConvTranspose2d(n) => fields!(n;
            [padding_top, padding_right, padding_bottom, padding_left, kernel_height,
             kernel_width, subsampling_height, subsampling_width, dilation_height,
             dilation_width, group_input_channels, group_output_channels, groups,
             adjustment_height, adjustment_width, input1_id, filter_id, bias_id, output_id,
             flags]; []; []),
        N::XNNStaticResizeBilinear2D(n) => {
            fields!(n; [new_height, new_width, input_id, output_id, flags]; []; [])
        }
        N::XNNStaticConstantPad(n) => fields!(n;
            [input_id, output_id, flags]; [pre_paddings, post_paddings]; [padding_value]),
        N::XNNAvgPooling2d(n) | N::XNNMaxPooling2d(n) => fields!(n;
            [padding_top, padding_right, padding_bottom, padding_left, pooling_height,
             pooling_width, stride_height, stride_width, dilation_height, dilation_width,
             input_id, output_id, flags]; []; []),
        N::XNNStaticReshape(n) => {
            fields!(n; [num_dims, input_id, output_id, flags]; [new_shape]; [])
        }
        N::XNNArgMaxPooling2d(n) => fields!(n;
            [padding_top, padding_right, padding_bottom, padding_left, pooling_height,
             pooling_width, input_id, output_value_id, output_index_id, flags]; []; []),
        N::XNNLeakyReLU(n) => fields!(n; [input_id, output_id, flags]; []; [negative_slope]),
        N::XNNELU(n) => fields!(n; [input_id, output_id, flags]; []; [alpha]),
        N::XNNConcatenate2(n)
        | N::XNNConcatenate3(n)
        | N::XNNConcatenate4(n)
        | N::XNNConcatenate5(n) => fields!(n;
            [axis, input1_id, input2_id, input3_id, input4_id, input5_id, output_id, flags];
            []; []),
        N::XNNStaticSlice(n) => {
            fields!(n; [num_dims, input_id, output_id, flags]; [offsets, sizes]; [])
        }
        N::XNNScaledDotProductAttention(n) => fields!(n;
            [query_id, key_id, value_id, scale_id, mask_id, output_id, flags]; []; []),
        N::NONE => (Vec::new(), Vec::new(), Vec::new()),
    }
}

/// The node as another node type with the same table (Add as Multiply, Conv2d as
/// ConvTranspose2d, ...): the backend must check each type's own constraints.
fn retype(u: xo::XNodeUnionT, rng: &mut Rng) -> xo::XNodeUnionT {
    use xo::XNodeUnionT as N;
    macro_rules! one_of {
        ($n:expr; $($v:ident),*) => {{
            let all: Vec<fn(_) -> N> = vec![$(N::$v),*];
            all[rng.below(all.len())]($n)
        }};
    }
    match u {
        N::XNNAdd(n)
        | N::XNNDiv(n)
        | N::XNNMinimum(n)
        | N::XNNMaximum(n)
        | N::XNNMultiply(n)
        | N::XNNSubtract(n)
        | N::XNNPReLU(n)
        | N::XNNBatchMatrixMultiply(n) => one_of!(n; XNNAdd, XNNDiv, XNNMinimum, XNNMaximum,
            XNNMultiply, XNNSubtract, XNNPReLU, XNNBatchMatrixMultiply),
        N::XNNSoftmax(n)
        | N::XNNSigmoid(n)
        | N::XNNClamp(n)
        | N::XNNFloor(n)
        | N::XNNConvert(n)
        | N::XNNGlobalAvgPooling2d(n)
        | N::XNNSquareRoot(n)
        | N::XNNCeiling(n)
        | N::XNNHardswish(n)
        | N::XNNNegate(n)
        | N::XNNSquare(n)
        | N::XNNAbs(n)
        | N::XNNReciprocalSquareRoot(n)
        | N::XNNLog(n)
        | N::XNNGelu(n)
        | N::XNNTanh(n)
        | N::XNNExp(n)
        | N::XNNSin(n)
        | N::XNNCopy(n)
        | N::XNNCos(n) => one_of!(n; XNNSoftmax, XNNSigmoid, XNNClamp, XNNFloor, XNNConvert,
            XNNGlobalAvgPooling2d, XNNSquareRoot, XNNCeiling, XNNHardswish, XNNNegate,
            XNNSquare, XNNAbs, XNNReciprocalSquareRoot, XNNLog, XNNGelu, XNNTanh, XNNExp,
            XNNSin, XNNCopy, XNNCos),
        N::XNNConv2d(n) | N::XNNDepthwiseConv2d(n) | N::XNNConvTranspose2d(n) => {
            one_of!(n; XNNConv2d, XNNDepthwiseConv2d, XNNConvTranspose2d)
        }
        N::XNNAvgPooling2d(n) | N::XNNMaxPooling2d(n) => {
            one_of!(n; XNNAvgPooling2d, XNNMaxPooling2d)
        }
        N::XNNConcatenate2(n)
        | N::XNNConcatenate3(n)
        | N::XNNConcatenate4(n)
        | N::XNNConcatenate5(n) => {
            one_of!(n; XNNConcatenate2, XNNConcatenate3, XNNConcatenate4, XNNConcatenate5)
        }
        other => other,
    }
}

fn mutate_node(n: &mut xo::XNodeT, rng: &mut Rng, ids: &[u32]) {
    match rng.below(12) {
        0 => {
            let u = std::mem::take(&mut n.xnode_union);
            n.xnode_union = retype(u, rng);
        }
        1 => match &mut n.output_min_max {
            Some(m) if rng.below(3) > 0 => {
                if rng.below(2) == 0 {
                    m.output_min = pick_f32(rng, m.output_min)
                } else {
                    m.output_max = pick_f32(rng, m.output_max)
                }
            }
            Some(_) => n.output_min_max = None,
            None => {
                n.output_min_max = Some(Box::new(xo::OutputMinMaxT {
                    output_min: pick_f32(rng, -1.0),
                    output_max: pick_f32(rng, 1.0),
                }))
            }
        },
        _ => {
            let (us, vs, fs) = node_fields(&mut n.xnode_union);
            let total = us.len() + vs.len() + fs.len();
            if total == 0 {
                return;
            }
            let k = rng.below(total);
            if k < us.len() {
                let mut us = us;
                let f = &mut *us[k];
                // Ids are the last fields but flags; anything may be an id.
                *f = if rng.below(2) == 0 {
                    pick_id(rng, ids, *f)
                } else {
                    pick_u32(rng, *f)
                };
            } else if k < us.len() + vs.len() {
                let mut vs = vs;
                mutate_u32_vec(vs[k - us.len()], rng, ids);
            } else {
                let mut fs = fs;
                let f = &mut *fs[k - us.len() - vs.len()];
                *f = pick_f32(rng, *f);
            }
        }
    }
}

/// One structure-aware change of a graph. `named` is the program's named data, which a
/// mutation may move into the payload's constant region (so that constant offsets and sizes
/// get exercised); `constants` is that region.
pub fn mutate_graph(
    g: &mut xo::XNNGraphT,
    constants: &mut Vec<u8>,
    named: &[(String, Vec<u8>)],
    rng: &mut Rng,
) {
    let ids = value_ids(g);
    let n_const = g
        .constant_data
        .as_ref()
        .map_or(0, Vec::len)
        .max(g.constant_buffer.as_ref().map_or(0, Vec::len));
    match rng.below(16) {
        // A tensor value's field.
        0..=4 => {
            let Some(vals) = g.xvalues.as_mut().filter(|v| !v.is_empty()) else {
                return;
            };
            let k = rng.below(vals.len());
            if let Some(t) = tensor_value(&mut vals[k]) {
                mutate_tensor_value(t, rng, &ids, n_const);
            }
        }
        // Quantization parameters.
        5 | 6 => {
            let Some(vals) = g.xvalues.as_mut() else {
                return;
            };
            let qs: Vec<usize> = (0..vals.len())
                .filter(|&i| {
                    matches!(
                        vals[i].xvalue_union,
                        xo::XValueUnionT::XNNQuantizedTensorValue(_)
                    )
                })
                .collect();
            let k = if qs.is_empty() {
                if vals.is_empty() {
                    return;
                }
                rng.below(vals.len())
            } else {
                qs[rng.below(qs.len())]
            };
            let v = &mut vals[k].xvalue_union;
            match v {
                xo::XValueUnionT::XNNQuantizedTensorValue(q) => mutate_quant(q, rng, n_const),
                xo::XValueUnionT::XNNTensorValue(t) => {
                    // Quantize a plain value.
                    let t = t.clone();
                    let mut q = xo::XNNQuantizedTensorValueT {
                        tensor_value: Some(t),
                        quant_params: xo::XNNQuantParamsT::NONE,
                    };
                    mutate_quant(&mut q, rng, n_const);
                    *v = xo::XValueUnionT::XNNQuantizedTensorValue(Box::new(q));
                }
                xo::XValueUnionT::NONE => {}
            }
        }
        // The value list itself.
        7 => {
            let vals = g.xvalues.get_or_insert_with(Vec::new);
            mutate::mutate_list(vals, rng, |_| xo::XValueT::default());
        }
        // A node's field, type or clamp.
        8..=11 => {
            let Some(nodes) = g.xnodes.as_mut().filter(|n| !n.is_empty()) else {
                return;
            };
            let k = rng.below(nodes.len());
            mutate_node(&mut nodes[k], rng, &ids);
        }
        // The node list.
        12 => {
            let nodes = g.xnodes.get_or_insert_with(Vec::new);
            mutate::mutate_list(nodes, rng, |_| xo::XNodeT::default());
        }
        // Graph-level fields.
        13 => match rng.below(6) {
            0 => g.num_externs = pick_u32(rng, g.num_externs),
            1 => mutate_u32_vec(&mut g.input_ids, rng, &ids),
            2 => mutate_u32_vec(&mut g.output_ids, rng, &ids),
            3 => mutate_u32_vec(&mut g.mem_buffer_sizes, rng, &ids),
            4 => {
                g.version = [None, Some(String::new()), Some("\u{0}x".into())][rng.below(3)].clone()
            }
            _ => {
                let b = g.constant_buffer.get_or_insert_with(Vec::new);
                mutate::mutate_list(b, rng, |r| xo::BufferT {
                    storage: Some(vec![0x41; r.below(64)]),
                });
            }
        },
        // Constant entries: offsets, sizes, keys.
        14 => {
            let cd = g.constant_data.get_or_insert_with(Vec::new);
            if cd.is_empty() || rng.below(6) == 0 {
                mutate::mutate_list(cd, rng, |r| xo::ConstantDataOffsetT {
                    offset: [0, 16, u64::MAX][r.below(3)],
                    size_: [0, 16, u64::MAX][r.below(3)],
                    named_key: None,
                });
                return;
            }
            let k = rng.below(cd.len());
            let e = &mut cd[k];
            let len = constants.len() as u64;
            let pick = |rng: &mut Rng, v: u64| {
                [
                    0,
                    1,
                    len,
                    len + 1,
                    len.saturating_sub(1),
                    v.wrapping_add(1),
                    v.wrapping_sub(1),
                    v.wrapping_mul(2),
                    1 << 32,
                    1 << 63,
                    u64::MAX,
                    u64::MAX - 15,
                ][rng.below(12)]
            };
            match rng.below(4) {
                0 => e.offset = pick(rng, e.offset),
                1 => e.size_ = pick(rng, e.size_),
                2 => {
                    e.named_key = match rng.below(4) {
                        0 => None,
                        1 => Some(String::new()),
                        2 => Some("no such key".into()),
                        _ if !named.is_empty() => Some(named[rng.below(named.len())].0.clone()),
                        _ => None,
                    }
                }
                _ => {
                    // Shorten or lengthen the region under the entries.
                    let n = constants.len();
                    constants.resize(rng.below(n + 64), 0);
                }
            }
        }
        // Named constants moved into the payload's constant region.
        _ => {
            let Some(cd) = g.constant_data.as_mut() else {
                return;
            };
            for e in cd.iter_mut() {
                let Some(key) = e.named_key.as_deref().filter(|k| !k.is_empty()) else {
                    continue;
                };
                let Some((_, bytes)) = named.iter().find(|(k, _)| k == key) else {
                    continue;
                };
                constants.resize(constants.len().div_ceil(16) * 16, 0);
                e.offset = constants.len() as u64;
                e.size_ = bytes.len() as u64;
                e.named_key = None;
                constants.extend_from_slice(bytes);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Payload mutations

/// Overwrites one field of an "XH00" header with a boundary value or a nudge.
fn mutate_header(b: &mut Vec<u8>, rng: &mut Rng) {
    if b.len() < 30 {
        b.resize(30, 0);
    }
    let len = b.len() as u64;
    match rng.below(7) {
        0 => b[4 + rng.below(4)] ^= 1 << rng.below(8),
        1 => {
            let v = [0u16, 1, 29, 30, 32, u16::MAX][rng.below(6)];
            b[8..10].copy_from_slice(&v.to_le_bytes());
        }
        2..=4 => {
            let at = [10, 14, 18][rng.below(3)];
            let old = u32_at(b, at).unwrap_or(0);
            let v = match rng.below(3) {
                0 => [len as u32, len as u32 - 1, len as u32 + 1, 0, 4, 8, 30, 31][rng.below(8)],
                _ => pick_u32(rng, old),
            };
            b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        }
        5 => {
            let old = u64_at(b, 22).unwrap_or(0);
            let v = [
                0,
                len,
                len + 1,
                old.wrapping_add(1),
                old.wrapping_sub(1),
                1 << 32,
                u64::MAX,
                u64::MAX - 31,
            ][rng.below(8)];
            b[22..30].copy_from_slice(&v.to_le_bytes());
        }
        _ => b.truncate(rng.below(40)),
    }
}

/// One mutation of an XNNPACK payload (`named`: the program's named data).
pub fn mutate_payload(payload: &[u8], named: &[(String, Vec<u8>)], rng: &mut Rng) -> Vec<u8> {
    let parts = split(payload);
    match (rng.below(20), parts) {
        // Header fields (or the magic).
        (0..=2, _) => {
            let mut b = payload.to_vec();
            mutate_header(&mut b, rng);
            b
        }
        // The graph, field by field.
        (3..=15, Some(mut parts)) => {
            let Some(mut g) = unpack_graph(&parts.fb) else {
                return mutate::mutate(payload, payload.len(), rng);
            };
            for _ in 0..1 + rng.below(2) {
                mutate_graph(&mut g, &mut parts.constants, named, rng);
            }
            let ident = match rng.below(32) {
                0 => "XN00",
                1 => "XN02",
                _ => "XN01",
            };
            parts.fb = pack_graph(&g, ident);
            if rng.below(32) == 0 {
                // Legacy layout: no header (constants must then be inline buffers).
                parts.header = !parts.header;
            }
            join(&parts)
        }
        // Bytes of the flatbuffer.
        (16 | 17, Some(mut parts)) => {
            parts.fb = mutate::mutate(&parts.fb, parts.fb.len(), rng);
            join(&parts)
        }
        // Bytes of the constant region.
        (18, Some(mut parts)) if !parts.constants.is_empty() => {
            parts.constants = mutate::mutate(&parts.constants, parts.constants.len(), rng);
            join(&parts)
        }
        _ => mutate::mutate(payload, payload.len(), rng),
    }
}

/// A mutant of a program with XNNPACK delegates: one payload changed (sometimes two), the
/// program packed again. `None` if the program has no such delegate or does not unpack.
pub fn mutate_program(pte: &[u8], rng: &mut Rng) -> Option<Vec<u8>> {
    let (mut p, segments) = mutate::try_unpack(pte)?;
    let ds = delegates(&p);
    if ds.is_empty() {
        return None;
    }
    let named = named_data(&p, segments);
    let mut segs = segments.to_vec();
    for _ in 0..1 + (rng.below(8) == 0) as usize {
        let at = ds[rng.below(ds.len())];
        let old = payload(&p, &segs, at)?;
        let new = mutate_payload(&old, &named, rng);
        segs = set_payload(&mut p, &segs, at, new)?;
    }
    Some(mutate::pack(&p, &segs))
}

/// The `xnnpack_payload` fuzz target's custom mutator: input `[n: u16][n input-choice
/// bytes][.pte]` (as `load_method_execute`); mostly a payload mutation, sometimes new input
/// bytes, sometimes (when the program no longer unpacks) byte-level changes of the program.
pub fn mutate_input(data: &[u8], seed: u64, max_size: usize) -> Option<Vec<u8>> {
    use crate::harness::{join_lme, split_lme};
    let mut rng = Rng::new(seed);
    let (inputs, pte) = split_lme(data);
    let out = match rng.below(10) {
        0 => {
            let mut inputs = inputs.to_vec();
            if inputs.len() < 4096 && rng.below(2) == 0 {
                inputs.push(rng.next() as u8);
            } else {
                inputs = mutate::mutate(&inputs, inputs.len(), &mut rng);
            }
            join_lme(&inputs, pte)
        }
        _ => match mutate_program(pte, &mut rng) {
            Some(p) => join_lme(inputs, &p),
            None => {
                let hot = mutate::checked_program_size(pte).unwrap_or(pte.len());
                join_lme(inputs, &mutate::mutate(pte, hot, &mut rng))
            }
        },
    };
    (out.len() <= max_size).then_some(out)
}
