//! ExecuTorch's advisories and robustness fixes (`pte-format.md` §8), one test per item; the
//! table in docs/security.md maps each to its test. Many repeat a case of the other modules in
//! the exact form of the report.

use super::*;
use crate::container::with_header;
use crate::structure::{
    each_int_list, is_int, is_int_list, is_mutable, is_tensor_list, opt_list, planned_2d,
    tensor_list_items,
};

mod xnnpack;

fn security_file(name: &str) -> Vec<u8> {
    std::fs::read(models_dir().join("../security").join(name)).unwrap()
}

fn bare(pte: Vec<u8>) -> Fixture {
    Fixture {
        pte,
        ptd: None,
        inputs: Vec::new(),
    }
}

/// Loads every method of `pte` (and runs it), expecting an error matching `is`.
fn load_err(pte: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
    let runtime = runtime();
    let r = catch_unwind(AssertUnwindSafe(|| {
        exercise(pte, None, &[], &runtime, small_config(), true)
    }))
    .unwrap_or_else(|_| panic!("{what}: panicked"));
    expect_err(r, what, needles)
}

/// [`load_err`] with no delegate backend registered.
fn load_err_no_backends(pte: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
    let runtime = Runtime::builder()
        .kernels(runtime().kernels().clone())
        .backends(pteron::BackendRegistry::new())
        .build()
        .expect("runtime");
    let options = pteron::MethodOptions::from(small_config());
    let r = catch_unwind(AssertUnwindSafe(|| {
        exercise_with(pte, None, &[], &runtime, options, true)
    }))
    .unwrap_or_else(|_| panic!("{what}: panicked"));
    expect_err(r, what, needles)
}

fn is_backend_missing(e: &pteron::Error, backend: &str) -> bool {
    matches!(e, pteron::Error::Runtime(CoreError::BackendMissing { backend: b }) if b == backend)
}

/// The position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("marker present")
}

// --- Flatbuffer structure -------------------------------------------------------------

/// #18597, #17129: Minimal verification did not bound the root offset.
#[test]
fn et18597_root_offset_out_of_bounds() {
    let f = fixture("mlp");
    for root in [0u32, 7, f.pte.len() as u32, u32::MAX] {
        parse_err(
            &with_header(&f.pte, 0, &root.to_le_bytes()),
            "root offset",
            &["root table offset", "flatbuffer"],
        );
    }
}

/// #18824 (full verification not the default): nested data that only a full verifier
/// checks — an operator name with invalid UTF-8, a string length past the end, a vector
/// offset pointing outside the buffer.
#[test]
fn et18824_nested_tables_fully_verified() {
    let f = fixture("mlp");
    let marker = b"QQQQQQQQQQQQ";
    let b = edited(&f, |p| {
        plan(p).operators.as_mut().unwrap()[0].overload =
            Some(String::from_utf8(marker.to_vec()).unwrap())
    });
    let at = find(&b, marker);
    let mut bad = b.clone();
    bad[at + 3] = 0xFF;
    parse_err(
        &bad,
        "operator overload with invalid UTF-8",
        &["flatbuffer", "utf"],
    );
    let mut bad = b.clone();
    bad[at - 4..at].copy_from_slice(&0x7FFF_FFF0u32.to_le_bytes());
    parse_err(&bad, "string length past the end", &["flatbuffer"]);
    let mut bad = b.clone();
    bad[at + marker.len()] = b'Q'; // no terminating NUL
    parse_err(&bad, "string without its NUL", &["flatbuffer"]);
}

/// #22118: FlatTensor (.ptd) root offset out of bounds; no verifier for .ptd at all.
#[test]
fn et22118_ptd_root_offset_and_verifier() {
    let ptd = fixture("external_weights").ptd.unwrap();
    let parse = |b: &[u8]| {
        catch_unwind(|| {
            ProgramFile::from_bytes(b)
                .data_file()
                .map(|d| walk_data_file(&d))
        })
        .expect("panicked")
    };
    for root in [0u32, ptd.len() as u32, u32::MAX] {
        expect_err(
            parse(&with_header(&ptd, 0, &root.to_le_bytes())),
            ".ptd root offset",
            &["flatbuffer", "root"],
        );
    }
    // A key string with invalid UTF-8: only a full verifier notices.
    let df = ProgramFile::from_bytes(&ptd);
    let key = df.data_file().unwrap().keys().next().unwrap().to_string();
    let at = find(&ptd, key.as_bytes());
    let mut bad = ptd.clone();
    bad[at] = 0xFF;
    expect_err(
        parse(&bad),
        ".ptd key with invalid UTF-8",
        &["flatbuffer", "utf"],
    );
}

// --- GitHub security advisories (ExecuTorch < 0.7.0) --------------------------------------

/// GHSA-9m39-3mf3-xwch (CVE-2025-54949): heap overflow in `executorch_prim::et_copy_index`
/// (index × size unchecked). pteron has no such kernel: a program calling it does not load.
#[test]
fn ghsa_9m39_et_copy_index() {
    let f = fixture("dynamic_reshape");
    let b = edited(&f, |p| {
        let o = &mut plan(p).operators.as_mut().unwrap()[0];
        o.name = Some("executorch_prim::et_copy_index".into());
        o.overload = Some("tensor".into());
    });
    load_err(&b, "et_copy_index", &["et_copy_index"]);
}

/// GHSA-f9hx-c6jf-3qxm (CVE-2025-54950): out-of-bounds access in the prim kernels
/// (`et_view`, `sym_size`, the `executorch_prim` scalar ops read arguments past the
/// stack and without checking their kinds). Every prim call of dynamic_reshape gets too
/// few arguments, arguments of the wrong kinds, and out-of-range dims.
#[test]
fn ghsa_f9hx_prim_kernel_arguments() {
    let f = fixture("dynamic_reshape");
    let prim_calls = |p: &mut fbo::ProgramT| -> Vec<usize> {
        let ops = plan(p).operators.clone().unwrap();
        (0..instructions(p).len())
            .filter(|&k| match &instructions(p)[k].instr_args {
                fbo::InstructionArgumentsT::KernelCall(c) => {
                    let n = ops[c.op_index as usize].name.clone().unwrap_or_default();
                    n.starts_with("executorch_prim::") || n.starts_with("aten::sym_")
                }
                _ => false,
            })
            .collect()
    };
    let mut p0 = unpack(&f.pte);
    let calls = prim_calls(&mut p0);
    assert!(calls.len() >= 4, "dynamic_reshape has prim calls");
    let runtime = runtime();
    let mut errors = 0;
    for &k in &calls {
        let edits: Vec<Box<dyn Fn(&mut fbo::ProgramT)>> = vec![
            Box::new(move |p| kernel_call(p, k).args.as_mut().unwrap().truncate(1)),
            Box::new(move |p| kernel_call(p, k).args = Some(vec![])),
            Box::new(move |p| {
                let t = find_tensor(p, is_constant) as i32;
                kernel_call(p, k)
                    .args
                    .as_mut()
                    .unwrap()
                    .iter_mut()
                    .for_each(|a| *a = t);
            }),
            Box::new(move |p| {
                let l = find_value(p, is_int_list) as i32;
                kernel_call(p, k).args.as_mut().unwrap()[0] = l;
            }),
            Box::new(move |p| {
                // Every Int argument of the call set to an out-of-range dim / size.
                for a in kernel_call(p, k).args.clone().unwrap() {
                    if let fbo::KernelTypesT::Int(v) = &mut values(p)[a as usize].val {
                        v.int_val = i64::MIN;
                    }
                }
            }),
        ];
        for (j, e) in edits.iter().enumerate() {
            let b = edited(&f, |p| e(p));
            let r = catch_unwind(AssertUnwindSafe(|| {
                exercise(&b, None, &f.inputs, &runtime, small_config(), true)
            }))
            .unwrap_or_else(|_| panic!("prim call {k}, edit {j}: panicked"));
            errors += r.is_err() as usize;
        }
    }
    assert!(
        errors >= 3 * calls.len(),
        "only {errors} of the edits were refused"
    );
}

/// GHSA-xc7w-r669-48pf (CVE-2025-54951): tensors of rank above kTensorDimensionLimit (16)
/// overflowed fixed-size arrays in the tensor parser.
#[test]
fn ghsa_xc7w_rank_limit() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            tcase(
                "planned tensor of rank 17",
                &["rank over 16: 17"],
                planned_2d,
                |t| {
                    t.sizes = Some(vec![1; 17]);
                    t.dim_order = Some((0..17).collect());
                },
            ),
            tcase(
                "constant of rank 255",
                &["rank over 16: 255"],
                is_constant,
                |t| {
                    t.sizes = Some(vec![1; 255]);
                    t.dim_order = Some((0..255).collect());
                },
            ),
            case("input of rank 64", &["rank over 16: 64"], |p| {
                let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
                tensor(p, i).sizes = Some(vec![1; 64]);
                tensor(p, i).dim_order = Some((0..64).collect());
            }),
        ],
        small_config(),
    );
}

/// GHSA-hj95-mhgf-jxc4 (CVE-2025-30404): `MemoryAllocator::allocate` size + alignment
/// overflowed into overlapping allocations; CVE-2025-54952: allocation size overflow.
/// pteron sums the buffer sizes with checked arithmetic against a limit before allocating.
#[test]
fn ghsa_hj95_allocation_size_overflow() {
    let f = fixture("mlp");
    for sizes in [
        vec![0, i64::MAX - 3],
        vec![0, i64::MAX, 64],
        vec![
            0,
            (1 << 62) + 1,
            (1 << 62) + 1,
            (1 << 62) + 1,
            (1 << 62) + 1,
        ],
    ] {
        let b = edited(&f, |p| plan(p).non_const_buffer_sizes = Some(sizes.clone()));
        let e = run_err(
            &f,
            &b,
            MethodConfig::default(),
            "buffer sizes",
            &["planned memory"],
        );
        assert!(
            matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
            "{e:?}"
        );
    }
}

/// GHSA-h952-963h-rv99: heap buffer overflow in method loading. Everything a method load
/// indexes with file data is checked: value, operator, argument, chain and instruction
/// indices (see also et7637, et7581, et18176 and `bad_instructions`).
#[test]
fn ghsa_h952_method_load_indices() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            case(
                "operator index past the operators",
                &["operator index"],
                |p| kernel_call(p, 0).op_index = i32::MAX,
            ),
            case("argument past the values", &["kernel argument"], |p| {
                kernel_call(p, 0).args.as_mut().unwrap().push(i32::MAX)
            }),
            case("MoveCall past the values", &["move"], |p| {
                instructions(p).insert(0, move_call(0, i32::MAX))
            }),
            case("no chains", &[], |p| plan(p).chains = None),
            case("no operators", &["operator"], |p| plan(p).operators = None),
            case("empty values", &[], |p| plan(p).values = Some(vec![])),
        ],
        small_config(),
    );
}

// --- Index validation -------------------------------------------------------------------

/// #7637: value indices in IntList / TensorList / OptionalTensorList.
#[test]
fn et7637_list_item_indices() {
    let f = fixture("cnn");
    run_cases(
        &f,
        vec![
            case("IntList item past the values", &["IntList item"], |p| {
                let n = values(p).len() as i64;
                each_int_list(p, |l| l[0] = n + 1000);
            }),
            case(
                "TensorList item past the values",
                &["TensorList item"],
                |p| tensor_list_items(p).1[0] = i32::MAX,
            ),
            case(
                "OptionalTensorList item past the values",
                &["OptionalTensorList item"],
                |p| {
                    push_value(p, opt_list(vec![1 << 30]));
                },
            ),
        ],
        small_config(),
    );
}

/// #7581: plan input and output indices (MethodMeta).
#[test]
fn et7581_plan_input_output_indices() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            case("input index past the values", &["plan input"], |p| {
                plan(p).inputs = Some(vec![1 << 20])
            }),
            case("output index -5", &["plan output"], |p| {
                plan(p).outputs = Some(vec![-5])
            }),
        ],
        small_config(),
    );
    // MethodMeta's equivalents read nothing out of range either.
    let b = edited(&f, |p| plan(p).inputs = Some(vec![1 << 20]));
    let file = ProgramFile::from_bytes(&b);
    let r = runtime()
        .load_program(&file)
        .unwrap()
        .load_method_with("forward", small_config());
    expect_err(r.map(|_| ()), "input index at load", &["plan input"]);
}

/// #7663: negative tensor sizes.
#[test]
fn et7663_negative_sizes() {
    let f = fixture("mlp");
    for s in [-1, i32::MIN] {
        let b = edited(&f, |p| {
            let vi = find_tensor(p, is_planned);
            tensor(p, vi).sizes.as_mut().unwrap()[0] = s;
        });
        run_err(
            &f,
            &b,
            small_config(),
            "negative planned buffer size",
            &["negative tensor size"],
        );
    }
}

/// #18176, #18803: FreeCall index out of range, FreeCall on a non-tensor.
#[test]
fn et18176_et18803_free_call() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            case("FreeCall past the values", &["free index"], |p| {
                instructions(p).insert(0, free_call(1 << 20))
            }),
            case("FreeCall on an Int", &["FreeCall names value"], |p| {
                let c = push_value(p, int_value(3));
                instructions(p).insert(0, free_call(c));
            }),
            case("FreeCall on a None", &["FreeCall names value"], |p| {
                let c = push_value(p, fbo::KernelTypesT::Null(Box::default()));
                instructions(p).insert(0, free_call(c));
            }),
        ],
        small_config(),
    );
}

/// #19040 (`tryTo*`) and the TensorList element-kind check: every value is read as the
/// kind the reader expects, or it is an error.
#[test]
fn et19040_value_kinds_checked() {
    let f = fixture("cnn");
    run_cases(
        &f,
        vec![
            case("TensorList item an Int", &["not a tensor"], |p| {
                let int = find_value(p, is_int) as i32;
                tensor_list_items(p).1[0] = int;
            }),
            case("IntList items tensors", &["IntList", "Int"], |p| {
                let t = find_tensor(p, |_| true) as i64;
                each_int_list(p, |l| l.iter_mut().for_each(|x| *x = t));
            }),
            case("a kernel's tensor argument an Int", &[], |p| {
                let int = find_value(p, is_int) as i32;
                kernel_call(p, 0).args.as_mut().unwrap()[0] = int;
            }),
        ],
        small_config(),
    );
}

/// #17314: dim_order must be a permutation (duplicates read uninitialised memory).
#[test]
fn et17314_dim_order_permutation() {
    let f = fixture("mlp");
    for d in [vec![0u8, 0], vec![1, 1], vec![0, 2], vec![255, 0]] {
        let b = edited(&f, |p| {
            let vi = find_tensor(p, planned_2d);
            tensor(p, vi).dim_order = Some(d.clone());
        });
        run_err(&f, &b, small_config(), "dim order", &["permutation"]);
    }
}

// --- Null dereferences ------------------------------------------------------------------

/// #12294 (found by a .pte fuzzer): a jump condition that is a tensor without data.
#[test]
fn et12294_condition_tensor_without_data() {
    let f = fixture("mlp");
    let b = edited(&f, |p| {
        let t = push_value(p, bool_tensor());
        instructions(p).insert(0, jump(t, 0));
        instructions(p).insert(0, free_call(t));
    });
    run_err(&f, &b, small_config(), "freed condition", &["no data"]);
}

/// #16704: missing optional fields (`get_output_flattening_encoding` read a missing
/// container_meta_type). pteron does not need them: the program still runs.
#[test]
fn et16704_missing_optional_fields() {
    let f = fixture("mlp");
    let runtime = runtime();
    for b in [
        edited(&f, |p| plan(p).container_meta_type = None),
        edited(&f, |p| {
            plan(p).container_meta_type = Some(Box::default());
        }),
        edited(&f, |p| {
            for op in plan(p).operators.as_mut().unwrap() {
                op.overload = None;
            }
        }),
    ] {
        let r = catch_unwind(AssertUnwindSafe(|| {
            exercise(&b, None, &f.inputs, &runtime, small_config(), true)
        }));
        assert!(r.is_ok(), "panicked");
    }
    exercise(
        &edited(&f, |p| plan(p).container_meta_type = None),
        None,
        &f.inputs,
        &runtime,
        small_config(),
        true,
    )
    .expect("runs without container_meta_type");
}

/// #19878: tensors without sizes or dim_order.
#[test]
fn et19878_tensor_without_sizes_or_dim_order() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            tcase("no sizes", &["without sizes"], is_planned, |t| {
                t.sizes = None
            }),
            tcase("no dim_order", &["without dim_order"], is_planned, |t| {
                t.dim_order = None
            }),
            tcase(
                "constant without sizes",
                &["without sizes"],
                is_constant,
                |t| t.sizes = None,
            ),
        ],
        small_config(),
    );
}

/// #17131: sizes and dim_order of different lengths.
#[test]
fn et17131_sizes_and_dim_order_lengths() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            tcase(
                "dim_order shorter",
                &["dim order of 1 entries"],
                planned_2d,
                |t| t.dim_order = Some(vec![0]),
            ),
            tcase(
                "dim_order longer",
                &["dim order of 4 entries"],
                planned_2d,
                |t| t.dim_order = Some(vec![0, 1, 2, 3]),
            ),
            tcase(
                "empty dim_order",
                &["dim order of 0 entries"],
                planned_2d,
                |t| t.dim_order = Some(vec![]),
            ),
        ],
        small_config(),
    );
}

// --- Integer overflow and bounds -------------------------------------------------------

/// TOB (#16887): constant data bounds; #18662: offset + nbytes overflow; also
/// segment_base_offset + segment_data_size.
#[test]
fn et16887_et18662_constant_bounds() {
    let f = fixture("mlp");
    let seg_len = segment_data(&f.pte).len() as u64;
    run_cases(
        &f,
        vec![
            case(
                "constant offset at the end",
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
            case(
                "constant offset + nbytes overflows",
                &["constant tensor"],
                |p| {
                    p.constant_segment
                        .as_mut()
                        .unwrap()
                        .offsets
                        .as_mut()
                        .unwrap()[1] = u64::MAX - 3
                },
            ),
            tcase(
                "constant larger than its data",
                &["constant tensor"],
                is_constant,
                |t| t.sizes.as_mut().unwrap()[0] = 1 << 20,
            ),
        ],
        small_config(),
    );
    let base = u64::from_le_bytes(f.pte[24..32].try_into().unwrap());
    parse_err(
        &with_header(&f.pte, 32, &(u64::MAX - base + 1).to_le_bytes()),
        "segment_base_offset + segment_data_size overflows",
        &["segment"],
    );
}

/// #19268: segment and mutable-subsegment offset additions.
#[test]
fn et19268_segment_and_mutable_offsets() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![case("segment offset + size overflows", &["segment"], |p| {
            let s = &mut p.segments.as_mut().unwrap()[0];
            s.offset = u64::MAX - 7;
            s.size_ = 16;
        })],
        small_config(),
    );
    let f = fixture("mutable_buffer");
    assert!(
        values(&mut unpack(&f.pte))
            .iter()
            .any(|v| matches!(&v.val, fbo::KernelTypesT::Tensor(t) if is_mutable(t))),
        "mutable_buffer has initial mutable data"
    );
    run_cases(
        &f,
        vec![case(
            "mutable offset + nbytes overflows",
            &["mutable tensor data"],
            |p| {
                for o in p.mutable_data_segments.as_mut().unwrap()[0]
                    .offsets
                    .as_mut()
                    .unwrap()
                    .iter_mut()
                    .skip(1)
                {
                    *o = u64::MAX - 1;
                }
            },
        )],
        small_config(),
    );
}

/// #18676, #16707: data loader bounds (reads past the end of the file).
#[test]
fn et18676_et16707_reads_past_the_file() {
    let f = fixture("mlp");
    let len = f.pte.len() as u64;
    parse_err(
        &with_header(&f.pte, 16, &(len + 1).to_le_bytes()),
        "program_size past the end",
        &["program"],
    );
    // The constant segment cut off: segment data shorter than the header says.
    parse_err(
        &f.pte[..f.pte.len() - 1],
        "file one byte short",
        &["segment"],
    );
}

/// #19121, #19055, #16706, #11217: numel / nbytes overflow at load.
#[test]
fn et19121_numel_nbytes_overflow() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            tcase("numel overflows usize", &["overflow"], planned_2d, |t| {
                t.sizes = Some(vec![i32::MAX; 3]);
                t.dim_order = Some(vec![0, 1, 2]);
            }),
            tcase("nbytes overflows usize", &["overflow"], planned_2d, |t| {
                // 2^62 elements of 8 bytes.
                t.scalar_type = fbo::ScalarType::DOUBLE;
                t.sizes = Some(vec![1 << 30, 1 << 30, 4]);
                t.dim_order = Some(vec![0, 1, 2]);
            }),
        ],
        small_config(),
    );
}

/// GHSA-84m3-f99p-cqx5, #12679, #12683, #15581, #18680: allocator arithmetic
/// (`HierarchicalAllocator::get_offset_address`).
#[test]
fn ghsa_84m3_allocator_offsets() {
    let f = fixture("mlp");
    run_cases(
        &f,
        vec![
            tcase(
                "offset high word",
                &["overruns planned buffer"],
                is_planned,
                |t| t.allocation_info.as_mut().unwrap().memory_offset_high = 1,
            ),
            tcase(
                "offset + nbytes wraps",
                &["overruns planned buffer"],
                is_planned,
                |t| {
                    let a = t.allocation_info.as_mut().unwrap();
                    a.memory_offset_low = u32::MAX;
                    a.memory_offset_high = u32::MAX;
                },
            ),
            case("buffer sizes sum overflows", &["planned memory"], |p| {
                plan(p).non_const_buffer_sizes = Some(vec![0, i64::MAX, i64::MAX, 16]);
            }),
        ],
        MethodConfig::default(),
    );
}

/// #19270: `getLeadingDims` / `getTrailingDims` wrapped at 32 bits. 65536 × 65537 floats
/// would wrap to 65536 elements in 32 bits; pteron counts all 17 180 131 328 bytes.
#[test]
fn et19270_no_32_bit_wrap() {
    let f = fixture("mlp");
    let b = edited(&f, |p| {
        let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
        tensor(p, i).allocation_info = None;
        tensor(p, i).sizes = Some(vec![65536, 65537]);
    });
    let e = run_err(
        &f,
        &b,
        MethodConfig::default(),
        "2^32 + 2^16 elements",
        &["planned memory"],
    );
    // The total counts the whole input (plus the planned arena), not a wrapped size.
    let msg = e.to_string();
    let needs: u64 = msg
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {msg:?}"));
    assert!(needs >= 65536 * 65537 * 4, "{msg}");
}

// --- Control flow -----------------------------------------------------------------------

/// #18679: a self-referencing JumpFalseCall hung the runtime; the destination was not
/// checked at load.
#[test]
fn et18679_jump_loops_and_destinations() {
    let f = fixture("mlp");
    let cfg = MethodConfig {
        instruction_budget: 500,
        ..small_config()
    };
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        instructions(p).insert(0, jump(c, 0));
    });
    let e = run_err(&f, &b, cfg, "self-loop", &["instruction budget"]);
    assert!(matches!(
        e,
        pteron::Error::Runtime(CoreError::InstructionBudget(500))
    ));
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        instructions(p).insert(0, jump(c, 1 << 20));
    });
    run_err(&f, &b, cfg, "jump past the chain", &["jump destination"]);
}

/// TOB-EXECUTORCH-31, #18962: MoveCall type confusion (boxed lists moved over other
/// kinds crashed at destruction).
#[test]
fn tob31_et18962_move_call_type_confusion() {
    let f = fixture("cnn");
    run_cases(
        &f,
        vec![
            case(
                "IntList moved over a kernel's tensors",
                &["IntList", "Tensor"],
                |p| {
                    let l = find_value(p, is_int_list) as i32;
                    for x in kernel_call(p, 0).args.clone().unwrap() {
                        instructions(p).insert(0, move_call(l, x));
                    }
                },
            ),
            case("TensorList moved over an IntList", &[], |p| {
                let tl = find_value(p, is_tensor_list) as i32;
                let l = find_value(p, is_int_list) as i32;
                instructions(p).insert(0, move_call(tl, l));
            }),
            case("Int moved over a TensorList", &[], |p| {
                let tl = find_value(p, is_tensor_list) as i32;
                let i = find_value(p, is_int) as i32;
                instructions(p).insert(0, move_call(i, tl));
            }),
        ],
        small_config(),
    );
}

// --- Delegates --------------------------------------------------------------------------

/// Without a backend registered, a delegated program fails to load with BackendMissing
/// before any of the payload is read, also when the payload is corrupt or its reference
/// out of range. With pteron's XNNPACK backend (the default) the same variants fail to load
/// with an error, without a panic. The XNNPACK advisories proper are the `xnnpack_*`
/// tests below.
#[test]
fn no_backend_payload_never_parsed() {
    let pte = security_file("xnnpack_linear.pte");
    let e = load_err_no_backends(&pte, "XNNPACK program", &["XnnpackBackend"]);
    assert!(is_backend_missing(&e, "XnnpackBackend"), "{e:?}");
    let f = bare(pte.clone());
    let xh = find(&pte, b"XH00");
    let mut variants = vec![with_header(&pte, xh, b"XXXX")];
    let mut garbage = pte.clone();
    garbage[xh - 4..(xh + 200).min(pte.len())].fill(0xFF);
    variants.push(garbage);
    variants.push(edited(&f, |p| {
        plan(p).delegates.as_mut().unwrap()[0].processed =
            Some(Box::new(fbo::BackendDelegateDataReferenceT {
                location: fbo::DataLocation::SEGMENT,
                index: u32::MAX,
            }))
    }));
    variants.push(edited(&f, |p| {
        plan(p).delegates.as_mut().unwrap()[0].processed = None
    }));
    for (i, b) in variants.iter().enumerate() {
        let e = load_err_no_backends(b, &format!("XNNPACK variant {i}"), &[]);
        assert!(
            is_backend_missing(&e, "XnnpackBackend") || matches!(e, pteron::Error::Format(_)),
            "variant {i}: {e:?}"
        );
        load_err(b, &format!("XNNPACK variant {i} with the backend"), &[]);
    }
}

/// DelegateCall's delegate_index was not validated at load: pteron checks it at load.
#[test]
fn delegate_call_index() {
    let f = bare(security_file("xnnpack_linear.pte"));
    let b = edited(&f, |p| {
        for i in instructions(p).iter_mut() {
            if let fbo::InstructionArgumentsT::DelegateCall(d) = &mut i.instr_args {
                d.delegate_index = 1 << 20;
            }
        }
        plan(p).delegates = Some(vec![]);
    });
    load_err(
        &b,
        "DelegateCall index out of range",
        &["DelegateCall", "delegate"],
    );
}

/// Qualcomm delegate argument walk (#22237): any other backend is missing too.
#[test]
fn et22237_other_backends_missing() {
    let f = bare(security_file("xnnpack_linear.pte"));
    let b = edited(&f, |p| {
        plan(p).delegates.as_mut().unwrap()[0].id = Some("QnnBackend".into())
    });
    let e = load_err(&b, "QNN program", &["QnnBackend"]);
    assert!(is_backend_missing(&e, "QnnBackend"), "{e:?}");
}

// --- Other formats and entry points -----------------------------------------------------

/// TOB-EXECUTORCH-9 (#17163): BundledProgram tensor data shorter than its sizes. pteron
/// reads no BundledProgram: the file is refused by its identifier.
#[test]
fn tob9_bundled_program_refused() {
    let b = security_file("bundled_mlp.bpte");
    let e = parse_err(&b, "BundledProgram", &["identifier", "BP08"]);
    assert!(matches!(e, pteron::Error::Format(_)), "{e:?}");
}

/// #16797: runner input memcpy size. `set_input_tensor` checks dtype, shape and byte count.
#[test]
fn et16797_input_size_checked() {
    let runtime = runtime();
    for name in ["mlp", "dynamic_mlp"] {
        let f = fixture(name);
        let file = ProgramFile::from_bytes(&f.pte);
        let program = runtime.load_program(&file).unwrap();
        let mut m = program.load_method("forward").unwrap();
        let t = &f.inputs[0];
        let mut long = t.data.clone();
        long.extend_from_slice(&[0; 64]);
        let mut big = t.sizes.clone();
        big[0] += 1000;
        for (what, sizes, data) in [
            ("short data", t.sizes.clone(), &t.data[..t.data.len() - 1]),
            ("long data", t.sizes.clone(), &long[..]),
            ("bigger shape", big, &long[..]),
            ("rank + 1", [t.sizes.clone(), vec![1]].concat(), &t.data[..]),
        ] {
            let r = m.set_input_tensor(0, t.dtype, &sizes, data);
            assert!(r.is_err(), "{name}: {what} accepted");
        }
        assert!(m
            .set_input_tensor(0, ScalarType::Double, &t.sizes, &t.data)
            .is_err());
        m.set_input_tensor(0, t.dtype, &t.sizes, &t.data).unwrap();
    }
}

/// `embedding_2bit/4bit` did not bound-check indices. pteron's quantized embeddings
/// (8/4/2-bit, fixtures exported by ExecuTorch) check every index at run time: out of
/// range, negative and huge ones are refused, naming the index.
#[test]
fn embedding_4bit_2bit_indices_checked() {
    let runtime = runtime();
    for file in [
        "embedding_4bit/embedding_4bit_default_g1_f32.pte",
        "embedding_4bit/embedding_4bit_dtype_g2_zp_f32.pte",
        "embedding_2bit/embedding_2bit_default_g1_f32.pte",
    ] {
        let Ok(pte) = std::fs::read(models_dir().join("../ops").join(file)) else {
            panic!("{file} missing");
        };
        let f = ProgramFile::from_bytes(&pte);
        let program = runtime.load_program(&f).unwrap();
        let mut m = program.load_method("forward").unwrap();
        let CValue::Tensor(spec) = *m.input_spec(0).unwrap() else {
            panic!("{file}: indices input");
        };
        let sizes = spec.info.sizes().to_vec();
        let n: usize = sizes.iter().product();
        for bad in [1i64 << 40, -1, i64::MIN, i64::MAX] {
            let mut ids = vec![0i64; n];
            ids[n - 1] = bad;
            let bytes: Vec<u8> = ids.iter().flat_map(|v| v.to_le_bytes()).collect();
            m.set_input_tensor(0, ScalarType::Long, &sizes, &bytes)
                .unwrap();
            let e = m
                .execute()
                .err()
                .unwrap_or_else(|| panic!("{file}: {bad} accepted"));
            assert!(
                e.to_string()
                    .contains(&format!("index {bad} is out of range")),
                "{file}: {e}"
            );
        }
    }
}
