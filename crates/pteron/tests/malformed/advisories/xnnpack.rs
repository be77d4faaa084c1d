//! XNNPACK payloads (pteron-xnnpack).
//!
//! Each test edits the payload of a real XNNPACK-lowered fixture (testdata/xnnpack): a
//! header field, or one field of the graph unpacked with the flatbuffers object API
//! (`support/xnnpack_object_api.rs`) and packed again (`support/xnn_mutate.rs`). The
//! backend must refuse the edit at method load, naming it.

use super::*;
use xnn_mutate as xm;
use xnnobj::fb_xnnpack as xo;

fn xnn_file(name: &str) -> Vec<u8> {
    std::fs::read(models_dir().join("../xnnpack").join(name).join("model.pte")).unwrap()
}

/// `pte` with its first XNNPACK payload edited.
fn with_payload(pte: &[u8], edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let (mut p, segs) = try_unpack(pte).expect("fixture unpacks");
    let at = xm::delegates(&p)[0];
    let mut payload = xm::payload(&p, segs, at).expect("payload");
    edit(&mut payload);
    let segs = xm::set_payload(&mut p, segs, at, payload).expect("payload replaced");
    pack(&p, &segs)
}

/// `pte` with the graph of its first XNNPACK payload edited; the edit also gets the
/// payload's constant region and the program's named data.
fn with_graph(
    pte: &[u8],
    edit: impl FnOnce(&mut xo::XNNGraphT, &mut Vec<u8>, &[(String, Vec<u8>)]),
) -> Vec<u8> {
    let (p, segs) = try_unpack(pte).expect("fixture unpacks");
    let named = xm::named_data(&p, segs);
    with_payload(pte, |payload| {
        let mut parts = xm::split(payload).expect("sound header");
        let mut g = xm::unpack_graph(&parts.fb).expect("graph verifies");
        edit(&mut g, &mut parts.constants, &named);
        parts.fb = xm::pack_graph(&g, "XN01");
        *payload = xm::join(&parts);
    })
}

/// The tensor values of a graph (quantized ones' inner tensor), in value order.
fn tvals(g: &mut xo::XNNGraphT) -> Vec<&mut xo::XNNTensorValueT> {
    g.xvalues
        .iter_mut()
        .flatten()
        .filter_map(|v| match &mut v.xvalue_union {
            xo::XValueUnionT::XNNTensorValue(t) => Some(&mut **t),
            xo::XValueUnionT::XNNQuantizedTensorValue(q) => q.tensor_value.as_deref_mut(),
            _ => None,
        })
        .collect()
}

/// The first tensor value matching `pred`.
fn tval(
    g: &mut xo::XNNGraphT,
    pred: impl Fn(&xo::XNNTensorValueT) -> bool,
) -> &mut xo::XNNTensorValueT {
    tvals(g)
        .into_iter()
        .find(|t| pred(t))
        .expect("a value matching the edit")
}

fn is_const(t: &xo::XNNTensorValueT) -> bool {
    t.constant_buffer_idx != 0
}

fn is_input(t: &xo::XNNTensorValueT) -> bool {
    t.flags == 1
}

fn is_output(t: &xo::XNNTensorValueT) -> bool {
    t.flags == 2
}

/// Named constants moved into the payload's constant region (offset + size entries), as
/// exporters without a named data map lay them out.
fn inline_constants(g: &mut xo::XNNGraphT, c: &mut Vec<u8>, named: &[(String, Vec<u8>)]) {
    for e in g.constant_data.iter_mut().flatten() {
        let Some(key) = e.named_key.take().filter(|k| !k.is_empty()) else {
            continue;
        };
        let (_, bytes) = named.iter().find(|(k, _)| *k == key).expect("named data");
        c.resize(c.len().div_ceil(16) * 16, 0);
        e.offset = c.len() as u64;
        e.size_ = bytes.len() as u64;
        c.extend_from_slice(bytes);
    }
}

/// Outputs of `pte`'s forward on the fixture's input0.npy.
fn xnn_outputs(name: &str, pte: &[u8]) -> Vec<pteron::Value> {
    let input = npy::read(
        models_dir()
            .join("../xnnpack")
            .join(name)
            .join("input0.npy"),
    )
    .expect("input0.npy");
    let f = ProgramFile::from_bytes(pte);
    let program = Runtime::new().load_program(&f).expect("parses");
    let mut m = program.load_method("forward").expect("loads");
    m.run(&[input]).expect("runs")
}

/// Loads `pte` with the default backends: the XNNPACK backend must refuse it at load
/// (a `Delegate` error) with a message naming the problem.
fn xnn_err(pte: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
    let e = load_err(pte, what, needles);
    assert!(
        matches!(e, pteron::Error::Runtime(CoreError::Delegate { .. })),
        "{what}: not refused by the backend at load: {e:?}"
    );
    e
}

/// The edit helpers change nothing by themselves: a fixture packed again, also with
/// its named constants moved into the payload, computes the same outputs.
#[test]
fn xnnpack_repacked_payloads_still_run() {
    for name in ["mlp", "cnn_int8", "mlp_8da4w"] {
        let pte = xnn_file(name);
        let want = xnn_outputs(name, &pte);
        let same = with_graph(&pte, |_, _, _| {});
        assert_eq!(xnn_outputs(name, &same), want, "{name} repacked");
        let inlined = with_graph(&pte, inline_constants);
        assert_eq!(xnn_outputs(name, &inlined), want, "{name} inlined");
    }
}

/// #18784: the XNNPACK header's offsets and sizes were not checked and the flatbuffer was
/// not verified. pteron checks every header range without overflow, the identifier, the
/// root offset, and runs the full verifier over the graph.
#[test]
fn xnnpack_et18784_header_and_verification() {
    let pte = xnn_file("mlp");
    let set = |at: usize, v: &[u8]| {
        let v = v.to_vec();
        with_payload(&pte, move |b| b[at..at + v.len()].copy_from_slice(&v))
    };
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "header cut short",
            with_payload(&pte, |b| b.truncate(20)),
            &["XH00 header needs 30 bytes"],
        ),
        (
            "flatbuffer offset past the payload",
            set(10, &u32::MAX.to_le_bytes()),
            &["flatbuffer at 4294967295", "lies outside"],
        ),
        (
            "flatbuffer size past the payload",
            set(14, &u32::MAX.to_le_bytes()),
            &["lies outside"],
        ),
        (
            "flatbuffer size too small",
            set(14, &4u32.to_le_bytes()),
            &["flatbuffer size 4 is too small"],
        ),
        (
            "constant offset + size overflows",
            set(22, &u64::MAX.to_le_bytes()),
            &["constant data at", "lies outside"],
        ),
        (
            "constants overlap the flatbuffer",
            set(18, &32u32.to_le_bytes()),
            &["overlaps the flatbuffer"],
        ),
        (
            "wrong flatbuffer identifier",
            set(32 + 4, b"XN99"),
            &["identifier \"XN99\""],
        ),
        (
            "root offset into the identifier",
            set(32, &4u32.to_le_bytes()),
            &["root table offset 4"],
        ),
        (
            "root table's vtable out of range",
            with_payload(&pte, |b| {
                let root = u32::from_le_bytes(b[32..36].try_into().unwrap()) as usize;
                b[32 + root..32 + root + 4].copy_from_slice(&i32::MIN.to_le_bytes());
            }),
            &["flatbuffer:"],
        ),
        (
            "a dims vector's length past the buffer",
            with_payload(
                &with_graph(&pte, |g, _, _| {
                    tval(g, is_input).dims = Some(vec![0x5eed_5eed; 3])
                }),
                |b| {
                    let m = find(b, &0x5eed_5eedu32.to_le_bytes());
                    b[m - 4..m].copy_from_slice(&0x4000_0000u32.to_le_bytes());
                },
            ),
            &["flatbuffer:"],
        ),
    ];
    for (what, b, needles) in cases {
        xnn_err(&b, what, needles);
    }
}
/// #18820: constant buffer indices were not bounds-checked. pteron checks the index
/// against the entries, each entry's range (overflow-safe) against the payload's constant
/// region, named keys against the program's named data (and the `.ptd`), the stated size
/// against the named blob, and that the bytes cover the value's shape.
#[test]
fn xnnpack_et18820_constant_bounds() {
    let pte = xnn_file("mlp");
    let n_entries = |g: &xo::XNNGraphT| g.constant_data.as_ref().map_or(0, Vec::len) as u32;
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "constant index = number of entries",
            with_graph(&pte, |g, _, _| {
                let n = n_entries(g);
                tval(g, is_const).constant_buffer_idx = n;
            }),
            &["constant data index", "out of range"],
        ),
        (
            "constant index u32::MAX",
            with_graph(&pte, |g, _, _| {
                tval(g, is_const).constant_buffer_idx = u32::MAX;
            }),
            &["constant data index 4294967295 out of range"],
        ),
        (
            "constant offset past the region",
            with_graph(&pte, |g, c, named| {
                inline_constants(g, c, named);
                let len = c.len() as u64;
                g.constant_data.as_mut().unwrap()[1].offset = len;
            }),
            &["lies outside the", "constant region"],
        ),
        (
            "constant offset + size overflows",
            with_graph(&pte, |g, c, named| {
                inline_constants(g, c, named);
                let e = &mut g.constant_data.as_mut().unwrap()[1];
                e.offset = u64::MAX - 15;
                e.size_ = 32;
            }),
            &["lies outside the", "constant region"],
        ),
        (
            "named key not in the program",
            with_graph(&pte, |g, _, _| {
                g.constant_data.as_mut().unwrap()[1].named_key = Some("no such key".into());
            }),
            &["\"no such key\" is in neither the program nor its data file"],
        ),
        (
            "stated size above the named blob",
            with_graph(&pte, |g, _, _| {
                g.constant_data.as_mut().unwrap()[1].size_ = u64::MAX;
            }),
            &["the graph says 18446744073709551615"],
        ),
        (
            "constant shorter than its shape",
            with_graph(&pte, |g, _, _| {
                g.constant_data.as_mut().unwrap()[1].size_ = 4;
            }),
            &["constant has 4 bytes"],
        ),
        (
            "constant entry list missing",
            with_graph(&pte, |g, _, _| g.constant_data = None),
            &["constant without constant_data"],
        ),
    ];
    for (what, b, needles) in cases {
        xnn_err(&b, what, needles);
    }
}

/// #18896 (num_dims vs dims), #19013 (dims products): dims were trusted. pteron takes the
/// rank from the dims vector itself (num_dims is ignored: a wrong one changes nothing),
/// bounds it by XNNPACK's 6, computes sizes with checked arithmetic, and checks every
/// node's shapes when it propagates them.
#[test]
fn xnnpack_et18896_et19013_dims() {
    let pte = xnn_file("mlp");
    let want = xnn_outputs("mlp", &pte);
    let wrong_num_dims = with_graph(&pte, |g, _, _| {
        for t in tvals(g) {
            t.num_dims = u32::MAX;
        }
    });
    assert_eq!(
        xnn_outputs("mlp", &wrong_num_dims),
        want,
        "num_dims is not used"
    );
    // Dims of computed values are propagated from the inputs through the nodes (as XNNPACK
    // reshapes them); the serialized ones are not trusted.
    let output_dims = with_graph(&pte, |g, _, _| {
        tval(g, is_output).dims = Some(vec![2, 2, 2])
    });
    assert_eq!(
        xnn_outputs("mlp", &output_dims),
        want,
        "output dims are propagated"
    );
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "rank 7",
            with_graph(&pte, |g, _, _| tval(g, is_const).dims = Some(vec![1; 7])),
            &["7 dimensions, more than XNNPACK's 6"],
        ),
        (
            "dims whose product overflows",
            with_graph(&pte, |g, _, _| {
                tval(g, is_const).dims = Some(vec![u32::MAX; 6]);
            }),
            &["size overflows"],
        ),
        (
            "constant dims larger than its data",
            with_graph(&pte, |g, _, _| {
                let t = tval(g, is_const);
                t.dims.as_mut().unwrap()[0] += 1;
            }),
            &["constant has", "needs"],
        ),
        (
            "input dims that do not fit the weights",
            with_graph(&pte, |g, _, _| {
                let t = tval(g, is_input);
                *t.dims.as_mut().unwrap().last_mut().unwrap() += 1;
            }),
            &["shape"],
        ),
    ];
    for (what, b, needles) in cases {
        load_err(&b, what, needles);
    }
}

/// TOB-EXECUTORCH-44 / #19102: value flags were trusted (a value both input and output,
/// unknown bits), and `external_id` was not checked against num_externs or for
/// duplicates. pteron refuses each.
#[test]
fn xnnpack_tob44_et19102_value_flags_and_external_ids() {
    let pte = xnn_file("mlp");
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "unknown flag bit",
            with_graph(&pte, |g, _, _| tval(g, is_const).flags = 4),
            &["unsupported flag bits 0x4"],
        ),
        (
            "both external input and output",
            with_graph(&pte, |g, _, _| tval(g, is_input).flags = 3),
            &["both an external input and an external output"],
        ),
        (
            "external id = num_externs",
            with_graph(&pte, |g, _, _| {
                let n = g.num_externs;
                tval(g, is_input).external_id = n;
            }),
            &["external id", "out of range (num_externs"],
        ),
        (
            "external id u32::MAX",
            with_graph(&pte, |g, _, _| tval(g, is_output).external_id = u32::MAX),
            &["external id 4294967295 out of range"],
        ),
        (
            "external id used twice",
            with_graph(&pte, |g, _, _| {
                let e = tval(g, is_input).external_id;
                tval(g, is_output).external_id = e;
            }),
            &["used twice"],
        ),
        (
            "external value with constant data",
            with_graph(&pte, |g, _, _| {
                let n = g.num_externs;
                g.num_externs += 1;
                let t = tval(g, is_const);
                t.flags = 1;
                t.external_id = n;
            }),
            &["external value with constant data"],
        ),
        (
            "constant flagged as an output",
            with_graph(&pte, |g, _, _| {
                tval(g, is_output).flags = 0;
                let n = g.num_externs - 1;
                let t = tval(g, is_const);
                t.flags = 2;
                t.external_id = n;
            }),
            &["external value with constant data"],
        ),
        (
            "input no longer flagged: read before written",
            with_graph(&pte, |g, _, _| tval(g, is_input).flags = 0),
            &["before any node writes it"],
        ),
        (
            "num_externs above the limit",
            with_graph(&pte, |g, _, _| g.num_externs = u32::MAX),
            &["num_externs 4294967295 exceeds"],
        ),
        (
            "external id beyond the DelegateCall's arguments",
            with_graph(&pte, |g, _, _| {
                g.num_externs += 8;
                tval(g, is_input).external_id += 8;
            }),
            &["external value"],
        ),
    ];
    for (what, b, needles) in cases {
        xnn_err(&b, what, needles);
    }
}

/// #16241: hostile graphs crashed XNNPACK's compileModel (nodes naming undefined or
/// mistyped values, duplicate ids, writing inputs or constants). pteron checks every node
/// against the values it names before planning.
#[test]
fn xnnpack_et16241_graph_checks() {
    let pte = xnn_file("mlp");
    fn fc(g: &mut xo::XNNGraphT) -> &mut xo::XNNFullyConnectedT {
        g.xnodes
            .iter_mut()
            .flatten()
            .find_map(|n| match &mut n.xnode_union {
                xo::XNodeUnionT::XNNFullyConnected(f) => Some(&mut **f),
                _ => None,
            })
            .expect("a fully connected node")
    }
    let input_id = |g: &mut xo::XNNGraphT| tval(g, is_input).id_out;
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "undefined input id",
            with_graph(&pte, |g, _, _| fc(g).input1_id = 9999),
            &["names value id 9999, which is not defined"],
        ),
        (
            "filter id naming the graph input",
            with_graph(&pte, |g, _, _| {
                let i = input_id(g);
                fc(g).filter_id = i;
            }),
            &["XNNFullyConnected"],
        ),
        (
            "output id naming the graph input",
            with_graph(&pte, |g, _, _| {
                let i = input_id(g);
                fc(g).output_id = i;
            }),
            &["a constant or an external input", "reads its own output"],
        ),
        (
            "duplicate value id",
            with_graph(&pte, |g, _, _| {
                let i = input_id(g);
                tval(g, is_output).id_out = i;
            }),
            &["defined twice"],
        ),
        (
            "node of no type",
            with_graph(&pte, |g, _, _| {
                g.xnodes.as_mut().unwrap()[0].xnode_union = xo::XNodeUnionT::NONE
            }),
            &["node 0"],
        ),
        (
            "output clamp that is not a range",
            with_graph(&pte, |g, _, _| {
                g.xnodes.as_mut().unwrap()[0].output_min_max = Some(Box::new(xo::OutputMinMaxT {
                    output_min: 1.0,
                    output_max: f32::NAN,
                }))
            }),
            &["is not a range"],
        ),
        (
            "unknown node flags",
            with_graph(&pte, |g, _, _| fc(g).flags = 0x8000_0000),
            &["flags 0x80000000"],
        ),
        (
            "no nodes: output written by none",
            with_graph(&pte, |g, _, _| g.xnodes = Some(Vec::new())),
            &["written by no node"],
        ),
    ];
    for (what, b, needles) in cases {
        xnn_err(&b, what, needles);
    }
}

/// 4-bit weights (qbint4, blockwise; 8da4w): block size, scale count and values, packed
/// byte length. pteron checks each before reading the nibbles.
#[test]
fn xnnpack_4bit_blocks_and_scales() {
    let pte = xnn_file("mlp_8da4w");
    fn group(g: &mut xo::XNNGraphT) -> &mut xo::PerChannelGroupQuantT {
        g.xvalues
            .iter_mut()
            .flatten()
            .find_map(|v| match &mut v.xvalue_union {
                xo::XValueUnionT::XNNQuantizedTensorValue(q) => match &mut q.quant_params {
                    xo::XNNQuantParamsT::PerChannelGroupQuant(p) => Some(&mut **p),
                    _ => None,
                },
                _ => None,
            })
            .expect("a blockwise 4-bit value")
    }
    let cases: Vec<(&str, Vec<u8>, &[&str])> = vec![
        (
            "block size 0",
            with_graph(&pte, |g, _, _| group(g).group_size = 0),
            &["block size 0"],
        ),
        (
            "block size not dividing the inputs",
            with_graph(&pte, |g, _, _| group(g).group_size = 31),
            &["block size 31"],
        ),
        (
            "negative block size",
            with_graph(&pte, |g, _, _| group(g).group_size = i32::MIN),
            &["block size -2147483648"],
        ),
        (
            "channel dim 1",
            with_graph(&pte, |g, _, _| group(g).channel_dim = 1),
            &["channel dim 1"],
        ),
        (
            "scale count off by one",
            with_graph(&pte, |g, _, _| {
                let p = group(g);
                if p.scale_buffer_idx != 0 {
                    p.num_scales += 1;
                } else {
                    p.scale.as_mut().unwrap().pop();
                }
            }),
            &["scales, needs"],
        ),
        (
            "scale buffer index out of range",
            with_graph(&pte, |g, _, _| {
                let p = group(g);
                p.scale_buffer_idx = u32::MAX;
            }),
            &["out of range", "scales, needs"],
        ),
        (
            "4-bit weights shorter than their packed size",
            with_graph(&pte, |g, _, _| {
                let idx = tvals(g)
                    .into_iter()
                    .find(|t| t.datatype == xo::XNNDatatype::xnn_datatype_qbint4)
                    .unwrap()
                    .constant_buffer_idx as usize;
                let e = &mut g.constant_data.as_mut().unwrap()[idx];
                e.size_ = 1;
            }),
            &["constant has 1 bytes"],
        ),
    ];
    for (what, b, needles) in cases {
        xnn_err(&b, what, needles);
    }
}
