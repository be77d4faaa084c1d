//! Container cases: identifier, "eh00" extended header, truncation, root offset, segments and
//! constants, shared tables.

use super::*;

#[test]
fn empty_and_tiny_files() {
    parse_err(&[], "empty file", &["too short"]);
    for n in 1..8 {
        parse_err(&vec![0u8; n], "short file", &["too short"]);
    }
    let f = fixture("mlp");
    parse_err(&f.pte[..7], "7 bytes of a real file", &["too short"]);
    // Exactly the 8 bytes of root offset and identifier.
    parse_err(&f.pte[..8], "8 bytes", &[]);
}

#[test]
fn wrong_identifier() {
    let f = fixture("mlp");
    let mut b = f.pte.clone();
    b[4..8].copy_from_slice(b"XXXX");
    parse_err(&b, "XXXX identifier", &["identifier", "XXXX"]);
    b[4..8].copy_from_slice(b"ET99");
    let e = parse_err(&b, "ET99 identifier", &["version", "ET99"]);
    assert!(
        matches!(
            e,
            pteron::Error::Format(FormatError::IncompatibleVersion { .. })
        ),
        "{e:?}"
    );
    // A .ptd given as a program and a program given as a .ptd.
    if let Some(ptd) = fixture("external_weights").ptd {
        parse_err(&ptd, "a .ptd as .pte", &["identifier"]);
    }
    let e = ProgramFile::from_bytes(&f.pte).data_file().map(|_| ());
    expect_err(e, "a .pte as .ptd", &["FT01"]);
}

#[test]
fn truncated_files() {
    for name in all_fixture_names() {
        let f = fixture(&name);
        let step = (f.pte.len() / 300).max(7);
        let mut cut = 0;
        while cut < f.pte.len() {
            let what = format!("{name} truncated to {cut} bytes");
            let r = catch_unwind(|| {
                Runtime::new()
                    .load_program(&ProgramFile::from_bytes(&f.pte[..cut]))
                    .map(|_| ())
            });
            let r = r.unwrap_or_else(|_| panic!("{what}: panicked"));
            expect_err(r, &what, &[]);
            cut += step;
        }
        // Every cut within the flatbuffer and the first bytes of the header.
        for cut in
            (0..program_size(&f.pte).min(600)).chain(program_size(&f.pte)..program_size(&f.pte) + 4)
        {
            if cut >= f.pte.len() {
                break;
            }
            let r = Runtime::new()
                .load_program(&ProgramFile::from_bytes(&f.pte[..cut]))
                .map(|_| ());
            expect_err(r, &format!("{name} truncated to {cut} bytes"), &[]);
        }
    }
}

pub(crate) fn with_header(orig: &[u8], at: usize, v: &[u8]) -> Vec<u8> {
    let mut b = orig.to_vec();
    b[at..at + v.len()].copy_from_slice(v);
    b
}

#[test]
fn bad_extended_header() {
    let f = fixture("mlp");
    let b = &f.pte;
    assert_eq!(&b[8..12], b"eh00");
    let len = b.len() as u64;
    parse_err(
        &with_header(b, 12, &8u32.to_le_bytes()),
        "header_length 8",
        &["eh00", "length"],
    );
    parse_err(
        &with_header(b, 12, &23u32.to_le_bytes()),
        "header_length 23",
        &["eh00", "length"],
    );
    parse_err(
        &with_header(b, 16, &(len + 1).to_le_bytes()),
        "program_size past the end",
        &["program"],
    );
    parse_err(
        &with_header(b, 16, &u64::MAX.to_le_bytes()),
        "program_size u64::MAX",
        &["program"],
    );
    parse_err(
        &with_header(b, 16, &4u64.to_le_bytes()),
        "program_size 4",
        &["program_size"],
    );
    let base = u64::from_le_bytes(b[24..32].try_into().unwrap());
    let size = u64::from_le_bytes(b[32..40].try_into().unwrap());
    assert!(base > 0 && size > 0, "mlp has a constant segment");
    parse_err(
        &with_header(b, 32, &(u64::MAX - base + 1).to_le_bytes()),
        "base + size overflows",
        &["segment"],
    );
    parse_err(
        &with_header(b, 24, &u64::MAX.to_le_bytes()),
        "segment base u64::MAX",
        &["segment"],
    );
    parse_err(
        &with_header(b, 32, &(len - base + 1).to_le_bytes()),
        "segment data past the end",
        &["segment"],
    );
    parse_err(
        &with_header(b, 24, &(len + 1).to_le_bytes()),
        "segment base past the end",
        &["segment"],
    );
    parse_err(
        &with_header(b, 24, &16u64.to_le_bytes()),
        "segments inside the program",
        &["segment"],
    );
    // Segment data shorter than the constant segment needs.
    parse_err(
        &with_header(b, 32, &1u64.to_le_bytes()),
        "segment data too short",
        &["segment"],
    );
    // A pre-1.0 header (24 bytes: no segment size) still reads; with no segment base the
    // constants cannot be found.
    let mut old = with_header(b, 12, &24u32.to_le_bytes());
    assert!(Runtime::new()
        .load_program(&ProgramFile::from_bytes(&old))
        .is_ok());
    old[24..32].copy_from_slice(&0u64.to_le_bytes());
    parse_err(&old, "no segment base", &["segment"]);
    // Not "eh00": the whole file is then taken as the flatbuffer, which has no segments.
    parse_err(
        &with_header(b, 8, b"eh01"),
        "unknown header magic",
        &["segment"],
    );
}

#[test]
fn bad_root_offset() {
    let f = fixture("mlp");
    let len = f.pte.len() as u32;
    for root in [0u32, 4, 7] {
        parse_err(
            &with_header(&f.pte, 0, &root.to_le_bytes()),
            &format!("root offset {root}"),
            &["root table offset"],
        );
    }
    for root in [
        8,
        12,
        len,
        len - 4,
        program_size(&f.pte) as u32,
        u32::MAX,
        0x7FFF_FFFF,
    ] {
        parse_err(
            &with_header(&f.pte, 0, &root.to_le_bytes()),
            &format!("root offset {root}"),
            &["flatbuffer"],
        );
    }
}

#[test]
fn bad_segments_and_constants() {
    let f = fixture("mlp");
    let seg_len = segment_data(&f.pte).len() as u64;
    let cases = vec![
        case("segment offset u64::MAX", &["segment"], |p| {
            p.segments.as_mut().unwrap()[0].offset = u64::MAX
        }),
        case("segment size u64::MAX", &["segment"], |p| {
            p.segments.as_mut().unwrap()[0].size_ = u64::MAX
        }),
        case("segment offset + size overflows", &["segment"], |p| {
            let s = &mut p.segments.as_mut().unwrap()[0];
            s.offset = 16;
            s.size_ = u64::MAX - 8;
        }),
        case("segment past the segment data", &["segment"], move |p| {
            p.segments.as_mut().unwrap()[0].offset = seg_len
        }),
        case("no segments", &["segment"], |p| p.segments = None),
        case(
            "constant segment index out of range",
            &["segment index 7"],
            |p| p.constant_segment.as_mut().unwrap().segment_index = 7,
        ),
        case(
            "constant offset past the segment",
            &["constant tensor"],
            move |p| {
                p.constant_segment
                    .as_mut()
                    .unwrap()
                    .offsets
                    .as_mut()
                    .unwrap()[1] = seg_len
            },
        ),
        case("constant offset u64::MAX", &["constant tensor"], |p| {
            for o in p
                .constant_segment
                .as_mut()
                .unwrap()
                .offsets
                .as_mut()
                .unwrap()
                .iter_mut()
                .skip(1)
            {
                *o = u64::MAX;
            }
        }),
        case(
            "constant_segment and constant_buffer both",
            &["both"],
            |p| {
                p.constant_buffer = Some(vec![
                    fbo::BufferT::default(),
                    fbo::BufferT {
                        storage: Some(vec![0; 16]),
                    },
                ])
            },
        ),
        tcase(
            "data_buffer_idx past the constant offsets",
            &["constant index 1000"],
            is_constant,
            |t| t.data_buffer_idx = 1000,
        ),
        tcase(
            "data_buffer_idx u32::MAX",
            &["constant index"],
            is_constant,
            |t| t.data_buffer_idx = u32::MAX,
        ),
        tcase(
            "constant larger than its data",
            &["constant tensor"],
            is_constant,
            |t| t.sizes.as_mut().unwrap()[0] = 1 << 24,
        ),
        case("constants inline, buffer too short", &["constant"], |p| {
            p.constant_segment = None;
            p.constant_buffer = Some(vec![
                fbo::BufferT::default(),
                fbo::BufferT {
                    storage: Some(vec![0; 3]),
                },
            ]);
        }),
    ];
    run_cases(&f, cases, small_config());
}

/// A program whose `n` values are all the same shared EValue table (a 64×64 float tensor):
/// legal flatbuffer structure, but each offset is verified and loaded as its own value.
fn shared_values_program(n: usize) -> Vec<u8> {
    use pteron_format::schema as s;
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let sizes = b.create_vector(&[64i32, 64]);
    let dim_order = b.create_vector(&[0u8, 1]);
    let t = s::Tensor::create(
        &mut b,
        &s::TensorArgs {
            scalar_type: s::ScalarType::FLOAT,
            sizes: Some(sizes),
            dim_order: Some(dim_order),
            ..Default::default()
        },
    );
    let ev = s::EValue::create(
        &mut b,
        &s::EValueArgs {
            val_type: s::KernelTypes::Tensor,
            val: Some(t.as_union_value()),
        },
    );
    let vals = b.create_vector(&vec![ev; n]);
    let name = b.create_string("forward");
    let empty = b.create_vector::<i32>(&[]);
    let bufs = b.create_vector(&[0i64]);
    let plan = s::ExecutionPlan::create(
        &mut b,
        &s::ExecutionPlanArgs {
            name: Some(name),
            values: Some(vals),
            inputs: Some(empty),
            outputs: Some(empty),
            non_const_buffer_sizes: Some(bufs),
            ..Default::default()
        },
    );
    let plans = b.create_vector(&[plan]);
    let p = s::Program::create(
        &mut b,
        &s::ProgramArgs {
            execution_plan: Some(plans),
            ..Default::default()
        },
    );
    b.finish(p, Some("ET12"));
    b.finished_data().to_vec()
}

#[test]
fn shared_tables_do_not_amplify() {
    let runtime = runtime();
    // A few shared tables are fine.
    let small = shared_values_program(1000);
    exercise(&small, None, &[], &runtime, small_config(), true).expect("1000 shared values load");
    // A 4 MB file that would verify and load as a million tensors (≈ 350 MB of metadata,
    // 16 GB of unplanned tensor memory) is stopped by the verifier's expansion limit.
    let big = shared_values_program(1 << 20);
    assert!(big.len() < 5 << 20);
    parse_err(&big, "a million shared values", &["expands to more than"]);
    // And the per-method value limit holds on its own.
    let cfg = MethodConfig {
        max_values: 999,
        ..small_config()
    };
    let e = expect_err(
        exercise(&small, None, &[], &runtime, cfg, true),
        "1000 values over a limit of 999",
        &["values"],
    );
    assert!(
        matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
        "{e:?}"
    );
}
