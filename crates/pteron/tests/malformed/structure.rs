//! Structure-aware cases: tensors, planned buffers, values and lists, instructions, the
//! instruction budget, mutable and external data, each one field edited in a real fixture.

use super::*;

#[test]
fn rebuilt_fixtures_still_run() {
    // The re-serialiser itself must be faithful, or the cases below would test nothing.
    let runtime = runtime();
    for name in all_fixture_names() {
        let f = fixture(&name);
        let b = edited(&f, |_| {});
        let cfg = MethodConfig::default();
        let r0 = exercise(&f.pte, f.ptd.as_deref(), &f.inputs, &runtime, cfg, true)
            .map_err(|e| e.to_string());
        let r1 = exercise(&b, f.ptd.as_deref(), &f.inputs, &runtime, cfg, true)
            .map_err(|e| e.to_string());
        assert_eq!(r0, r1, "{name}: the rebuilt program behaves differently");
    }
}

/// A planned rank-2 tensor (an activation).
pub(crate) fn planned_2d(t: &fbo::TensorT) -> bool {
    is_planned(t) && t.sizes.as_ref().is_some_and(|s| s.len() == 2)
}

#[test]
fn bad_tensors() {
    let f = fixture("mlp");
    let p = planned_2d;
    let cases = vec![
        tcase(
            "negative planned buffer size",
            &["negative tensor size"],
            p,
            |t| t.sizes.as_mut().unwrap()[0] = -1,
        ),
        tcase("i32::MIN size", &["negative tensor size"], p, |t| {
            t.sizes.as_mut().unwrap()[0] = i32::MIN
        }),
        tcase("huge size", &["overruns planned buffer"], p, |t| {
            t.sizes.as_mut().unwrap()[0] = i32::MAX
        }),
        tcase("numel overflows", &["overflow"], p, |t| {
            t.sizes = Some(vec![i32::MAX; 3]);
            t.dim_order = Some(vec![0, 1, 2]);
        }),
        tcase("rank 17", &["rank over 16: 17"], p, |t| {
            t.sizes = Some(vec![1; 17]);
            t.dim_order = Some((0..17).collect());
        }),
        tcase("no sizes", &["without sizes"], p, |t| t.sizes = None),
        tcase("no dim_order", &["without dim_order"], p, |t| {
            t.dim_order = None
        }),
        tcase("duplicate dim_order", &["permutation"], p, |t| {
            t.dim_order = Some(vec![0, 0])
        }),
        tcase("dim_order out of range", &["permutation"], p, |t| {
            t.dim_order = Some(vec![0, 2])
        }),
        tcase("dim_order 255", &["permutation"], p, |t| {
            t.dim_order = Some(vec![255, 0])
        }),
        tcase("dim_order too short", &["dim order of 1 entries"], p, |t| {
            t.dim_order = Some(vec![0])
        }),
        tcase("dim_order too long", &["dim order of 3 entries"], p, |t| {
            t.dim_order = Some(vec![0, 1, 2])
        }),
        tcase("unknown scalar type", &["scalar type 99"], p, |t| {
            t.scalar_type = fbo::ScalarType(99)
        }),
        tcase("negative scalar type", &["scalar type -1"], p, |t| {
            t.scalar_type = fbo::ScalarType(-1)
        }),
        tcase("storage_offset", &["storage_offset"], p, |t| {
            t.storage_offset = 4
        }),
        tcase("unknown shape dynamism", &["dynamism"], p, |t| {
            t.shape_dynamism = fbo::TensorShapeDynamism(7)
        }),
        tcase("memory_id 0", &["memory_id 0"], p, |t| {
            t.allocation_info.as_mut().unwrap().memory_id = 0
        }),
        tcase("memory_id 2", &["memory_id index 2"], p, |t| {
            t.allocation_info.as_mut().unwrap().memory_id = 2
        }),
        tcase("memory_id u32::MAX", &["memory_id"], p, |t| {
            t.allocation_info.as_mut().unwrap().memory_id = u32::MAX
        }),
        tcase(
            "offset past the arena",
            &["overruns planned buffer"],
            p,
            |t| t.allocation_info.as_mut().unwrap().memory_offset_low = 1 << 20,
        ),
        tcase(
            "offset + nbytes overflows",
            &["overruns planned buffer"],
            p,
            |t| {
                let a = t.allocation_info.as_mut().unwrap();
                a.memory_offset_low = u32::MAX;
                a.memory_offset_high = u32::MAX;
            },
        ),
        tcase(
            "mutable data without mutable_data_segments",
            &["mutable_data_segments"],
            p,
            |t| t.data_buffer_idx = 1,
        ),
        tcase("external tensor without a .ptd", &["external"], p, |t| {
            t.extra_tensor_info = Some(Box::new(fbo::ExtraTensorInfoT {
                fully_qualified_name: Some("w".into()),
                location: fbo::TensorDataLocation::EXTERNAL,
                ..Default::default()
            }))
        }),
        tcase(
            "external tensor without a name",
            &["without a name"],
            p,
            |t| {
                t.extra_tensor_info = Some(Box::new(fbo::ExtraTensorInfoT {
                    location: fbo::TensorDataLocation::EXTERNAL,
                    ..Default::default()
                }))
            },
        ),
        // An unplanned input (given memory at load): huge sizes must hit the memory limit,
        // not allocate.
        case(
            "unplanned input of 2^60 elements",
            &["planned memory"],
            |p| {
                let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
                tensor(p, i).allocation_info = None;
                tensor(p, i).sizes = Some(vec![1 << 30, 1 << 30]);
            },
        ),
    ];
    run_cases(&f, cases, small_config());
    let cases = vec![
        case("unplanned input of 2^61 bytes", &["planned memory"], |p| {
            let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
            tensor(p, i).allocation_info = None;
            tensor(p, i).sizes = Some(vec![1 << 29, 1 << 30]);
        }),
        case("unplanned input of 2^64 bytes", &["overflow"], |p| {
            let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
            tensor(p, i).allocation_info = None;
            tensor(p, i).sizes = Some(vec![1 << (31 - 1), 1 << (31 - 1), 4]);
            tensor(p, i).dim_order = Some(vec![0, 1, 2]);
        }),
        case(
            "unplanned input just under 2^64 bytes",
            &["planned memory", "too large"],
            |p| {
                let i = plan(p).inputs.as_ref().unwrap()[0] as usize;
                tensor(p, i).allocation_info = None;
                tensor(p, i).sizes = Some(vec![i32::MAX, i32::MAX]);
            },
        ),
    ];
    run_cases(&f, cases, MethodConfig::default());
}

#[test]
fn bad_planned_buffers() {
    let f = fixture("mlp");
    let limit: &[&str] = &["planned memory"];
    for (what, sizes, needles) in [
        ("absurd buffer", vec![0i64, i64::MAX], limit),
        ("17 GiB buffer", vec![0, 17 << 30], limit),
        (
            "buffers summing past the limit",
            vec![0, 1 << 33, 1 << 33, 1 << 33],
            limit,
        ),
        (
            "negative buffer",
            vec![0, -1],
            &["negative planned buffer size"][..],
        ),
        ("no buffers", vec![], &["memory_id"][..]),
        ("buffer too small", vec![0, 16], &["overruns"][..]),
    ] {
        let b = edited(&f, |p| plan(p).non_const_buffer_sizes = Some(sizes.clone()));
        let e = run_err(&f, &b, MethodConfig::default(), what, needles);
        if needles == limit {
            assert!(
                matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
                "{what}: {e:?}"
            );
        }
    }
    let b = edited(&f, |p| plan(p).non_const_buffer_sizes = None);
    run_err(
        &f,
        &b,
        small_config(),
        "no non_const_buffer_sizes",
        &["non_const_buffer_sizes"],
    );
    // The configured limit applies to the real size too.
    let cfg = MethodConfig {
        max_planned_bytes: 1024,
        ..small_config()
    };
    let e = run_err(&f, &f.pte, cfg, "limit below the plan", &["planned memory"]);
    assert!(
        matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
        "{e:?}"
    );
    let cfg = MethodConfig {
        max_values: 10,
        ..small_config()
    };
    let e = run_err(&f, &f.pte, cfg, "too many values", &["values"]);
    assert!(
        matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
        "{e:?}"
    );
}

pub(crate) fn is_int_list(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::IntList(_))
}

pub(crate) fn is_tensor_list(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::TensorList(_))
}

pub(crate) fn is_int(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::Int(_))
}

/// Applies `edit` to the items of every IntList.
pub(crate) fn each_int_list(p: &mut fbo::ProgramT, mut edit: impl FnMut(&mut Vec<i64>)) {
    for v in values(p).iter_mut() {
        if let fbo::KernelTypesT::IntList(l) = &mut v.val {
            edit(l.items.as_mut().unwrap());
        }
    }
}

pub(crate) fn tensor_list_items(p: &mut fbo::ProgramT) -> (usize, &mut Vec<i32>) {
    let vi = find_value(p, is_tensor_list);
    match &mut values(p)[vi].val {
        fbo::KernelTypesT::TensorList(l) => (vi, l.items.as_mut().unwrap()),
        _ => unreachable!(),
    }
}

pub(crate) fn opt_list(items: Vec<i32>) -> fbo::KernelTypesT {
    fbo::KernelTypesT::OptionalTensorList(Box::new(fbo::OptionalTensorListT { items: Some(items) }))
}

#[test]
fn bad_values_and_lists() {
    let f = fixture("cnn");
    let cases = vec![
        case("IntList item out of range", &["IntList item"], |p| {
            let n = values(p).len() as i64;
            each_int_list(p, |l| l[0] = n);
        }),
        case("IntList item negative", &["IntList item"], |p| {
            each_int_list(p, |l| l[0] = -1)
        }),
        case("IntList item i64::MIN", &["IntList item"], |p| {
            each_int_list(p, |l| l[0] = i64::MIN)
        }),
        case("IntList items not Ints", &["IntList", "Int"], |p| {
            let t = find_tensor(p, |_| true) as i64;
            each_int_list(p, |l| l.iter_mut().for_each(|x| *x = t));
        }),
        case("IntList without items", &["without items"], |p| {
            let vi = find_value(p, is_int_list);
            values(p)[vi].val = fbo::KernelTypesT::IntList(Box::default());
        }),
        case("TensorList forward reference", &["TensorList item"], |p| {
            let (vi, items) = tensor_list_items(p);
            items[0] = vi as i32 + 1;
        }),
        case("TensorList self reference", &["TensorList item"], |p| {
            let (vi, items) = tensor_list_items(p);
            items[0] = vi as i32;
        }),
        case("TensorList item -1", &["TensorList item"], |p| {
            tensor_list_items(p).1[0] = -1
        }),
        case("TensorList item not a tensor", &["not a tensor"], |p| {
            let int = find_value(p, is_int) as i32;
            tensor_list_items(p).1[0] = int;
        }),
        case("TensorList without items", &["without items"], |p| {
            let vi = find_value(p, is_tensor_list);
            values(p)[vi].val = fbo::KernelTypesT::TensorList(Box::default());
        }),
        case(
            "OptionalTensorList forward reference",
            &["OptionalTensorList item"],
            |p| {
                let n = values(p).len() as i32;
                push_value(p, opt_list(vec![-1, n + 5]));
            },
        ),
        case("OptionalTensorList item an Int", &["not a tensor"], |p| {
            let int = find_value(p, is_int) as i32;
            push_value(p, opt_list(vec![int]));
        }),
        case(
            "OptionalTensorList item -2",
            &["OptionalTensorList item"],
            |p| {
                push_value(p, opt_list(vec![-2]));
            },
        ),
        case("value of type NONE", &["unknown value type 0"], |p| {
            push_value(p, fbo::KernelTypesT::NONE);
        }),
        case("no values", &["no values"], |p| plan(p).values = None),
        case("no inputs", &["no inputs"], |p| plan(p).inputs = None),
        case("no outputs", &["no outputs"], |p| plan(p).outputs = None),
        case("input index out of range", &["plan input"], |p| {
            plan(p).inputs = Some(vec![100_000])
        }),
        case("output index negative", &["plan output"], |p| {
            plan(p).outputs = Some(vec![-1])
        }),
        case("output a TensorList", &["TensorList"], |p| {
            let vi = find_value(p, is_tensor_list) as i32;
            plan(p).outputs = Some(vec![vi]);
        }),
        case("input an Int", &[], |p| {
            let vi = find_value(p, is_int) as i32;
            plan(p).inputs = Some(vec![vi]);
        }),
        case("input a constant", &["constant", "expected shape"], |p| {
            let vi = find_tensor(p, is_constant) as i32;
            plan(p).inputs = Some(vec![vi]);
        }),
        case("String without a string", &[], |p| {
            push_value(p, fbo::KernelTypesT::String(Box::default()));
        }),
        case("method renamed", &[], |p| {
            plan(p).name = Some("other".into())
        }),
        case("two methods of the same name", &[], |p| {
            let plans = p.execution_plan.as_mut().unwrap();
            plans.push(plans[0].clone());
        }),
    ];
    run_cases(&f, cases, small_config());
    // Loading by a name that is not there.
    let file = ProgramFile::from_bytes(&f.pte);
    let e = runtime()
        .load_program(&file)
        .unwrap()
        .load_method_with("nope", small_config())
        .map(|_| ());
    expect_err(e, "unknown method", &["no method named"]);
}

#[test]
fn bad_instructions() {
    let f = fixture("mlp");
    let cases = vec![
        case("op_index out of range", &["operator index 1000"], |p| {
            kernel_call(p, 0).op_index = 1000
        }),
        case("op_index negative", &["operator index -1"], |p| {
            kernel_call(p, 0).op_index = -1
        }),
        case("kernel arg out of range", &["kernel argument"], |p| {
            kernel_call(p, 0).args.as_mut().unwrap()[0] = 1 << 20
        }),
        case("kernel arg negative", &["kernel argument"], |p| {
            kernel_call(p, 0).args.as_mut().unwrap()[0] = -1
        }),
        case("kernel call without args", &["without args"], |p| {
            kernel_call(p, 0).args = None
        }),
        case("kernel call with too few args", &[], |p| {
            kernel_call(p, 0).args.as_mut().unwrap().truncate(1)
        }),
        case("kernel call with no args", &[], |p| {
            kernel_call(p, 0).args = Some(vec![])
        }),
        case("kernel args all one IntList", &[], |p| {
            let l = find_value(p, is_int_list) as i32;
            kernel_call(p, 0)
                .args
                .as_mut()
                .unwrap()
                .iter_mut()
                .for_each(|x| *x = l);
        }),
        case("unknown operator", &["aten::nonexistent"], |p| {
            plan(p).operators.as_mut().unwrap()[0].name = Some("aten::nonexistent".into())
        }),
        case("operator without a name", &["no kernel"], |p| {
            plan(p).operators.as_mut().unwrap()[0] = fbo::OperatorT::default()
        }),
        case(
            "instruction of type NONE",
            &["unknown instruction type 0"],
            |p| instructions(p).insert(0, instr(fbo::InstructionArgumentsT::NONE)),
        ),
        case(
            "chain without instructions",
            &["without instructions"],
            |p| plan(p).chains.as_mut().unwrap()[0].instructions = None,
        ),
        case("jump past the chain", &["jump destination"], |p| {
            let c = push_value(p, bool_value(false));
            let n = instructions(p).len() as i32;
            instructions(p).insert(0, jump(c, n + 2));
        }),
        case(
            "jump to a negative instruction",
            &["jump destination -1"],
            |p| {
                let c = push_value(p, bool_value(false));
                instructions(p).insert(0, jump(c, -1));
            },
        ),
        case(
            "jump condition out of range",
            &["jump condition index"],
            |p| instructions(p).insert(0, jump(1 << 20, 0)),
        ),
        case(
            "jump on an Int",
            &["jump condition (value", "is a Int"],
            |p| {
                let c = push_value(p, int_value(0));
                instructions(p).insert(0, jump(c, 1));
            },
        ),
        case("jump on a float tensor", &["is a Tensor"], |p| {
            let c = find_tensor(p, is_constant) as i32;
            instructions(p).insert(0, jump(c, 1));
        }),
        case("jump on a freed bool tensor", &["no data"], |p| {
            let t = push_value(p, bool_tensor());
            instructions(p).insert(0, jump(t, 0));
            instructions(p).insert(0, free_call(t));
        }),
        case("jump on a bool tensor", &[], |p| {
            let t = push_value(p, bool_tensor());
            let n = instructions(p).len() as i32 + 1;
            instructions(p).insert(0, jump(t, n));
        }),
        case("FreeCall on an Int", &["FreeCall names value"], |p| {
            let c = find_value(p, is_int) as i32;
            instructions(p).insert(0, free_call(c));
        }),
        case("FreeCall out of range", &["free index -7"], |p| {
            instructions(p).insert(0, free_call(-7))
        }),
        case("FreeCall on the input, then use it", &["no data"], |p| {
            let i = plan(p).inputs.as_ref().unwrap()[0];
            instructions(p).insert(0, free_call(i));
        }),
        case("FreeCall on the output", &["no data"], |p| {
            let o = plan(p).outputs.as_ref().unwrap()[0];
            instructions(p).push(free_call(o));
        }),
        case("MoveCall source out of range", &["move source"], |p| {
            instructions(p).insert(0, move_call(1 << 20, 0))
        }),
        case("MoveCall target negative", &["move target"], |p| {
            instructions(p).insert(0, move_call(0, -1))
        }),
        case(
            "MoveCall turns IntList items into tensors",
            &["IntList of Int"],
            |p| {
                // Every Int an IntList names becomes a tensor before the kernels read it.
                let t = find_tensor(p, is_constant) as i32;
                let mut items = Vec::new();
                each_int_list(p, |l| items.extend(l.iter().map(|&i| i as i32)));
                for i in items {
                    instructions(p).insert(0, move_call(t, i));
                }
            },
        ),
        case(
            "MoveCall turns a kernel's arguments into an IntList",
            &["IntList"],
            |p| {
                let l = find_value(p, is_int_list) as i32;
                for x in kernel_call(p, 0).args.clone().unwrap() {
                    instructions(p).insert(0, move_call(l, x));
                }
            },
        ),
        case(
            "MoveCall makes an output a constant",
            &["constant", "cannot be written", "shape", "resize"],
            |p| {
                let c = find_tensor(p, is_constant) as i32;
                let (_, _, out) = unary_call(p);
                instructions(p).insert(0, move_call(c, out));
            },
        ),
        case(
            "MoveCall aliases an input and an output",
            &["overlaps"],
            |p| {
                let (_, input, out) = unary_call(p);
                instructions(p).insert(0, move_call(out, input));
            },
        ),
        case("MoveCall of an input onto itself", &[], |p| {
            let i = plan(p).inputs.as_ref().unwrap()[0];
            instructions(p).insert(0, move_call(i, i));
        }),
        case("delegate call", &["DelegateCall"], |p| {
            let d = fbo::DelegateCallT {
                delegate_index: 0,
                args: Some(vec![0]),
            };
            instructions(p).insert(
                0,
                instr(fbo::InstructionArgumentsT::DelegateCall(Box::new(d))),
            )
        }),
        case("delegate", &["XnnpackBackend"], |p| {
            plan(p).delegates = Some(vec![fbo::BackendDelegateT {
                id: Some("XnnpackBackend".into()),
                ..Default::default()
            }])
        }),
        case("second chain", &[], |p| {
            let c = plan(p).chains.as_ref().unwrap()[0].clone();
            plan(p).chains.as_mut().unwrap().push(c);
        }),
    ];
    run_cases(&f, cases, small_config());
}

#[test]
fn loops_stop_at_the_instruction_budget() {
    let f = fixture("mlp");
    let cfg = MethodConfig {
        instruction_budget: 1000,
        ..small_config()
    };
    // A self-loop at the start of the chain.
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        instructions(p).insert(0, jump(c, 0));
    });
    let e = run_err(&f, &b, cfg, "self-loop", &["instruction budget"]);
    assert!(
        matches!(
            e,
            pteron::Error::Runtime(CoreError::InstructionBudget(1000))
        ),
        "{e:?}"
    );
    // A backward jump over the real kernel calls.
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        instructions(p).push(jump(c, 0));
    });
    let e = run_err(
        &f,
        &b,
        cfg,
        "loop over the whole chain",
        &["instruction budget"],
    );
    assert!(
        matches!(
            e,
            pteron::Error::Runtime(CoreError::InstructionBudget(1000))
        ),
        "{e:?}"
    );
    // On a true condition a jump falls through; on false it may go to the end of the chain.
    let runtime = runtime();
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(true));
        instructions(p).insert(0, jump(c, 0));
    });
    let _ = exercise(&b, None, &f.inputs, &runtime, cfg, true);
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        let n = instructions(p).len() as i32 + 1;
        instructions(p).insert(0, jump(c, n));
    });
    let file = ProgramFile::from_bytes(&b);
    let program = runtime.load_program(&file).unwrap();
    let mut m = program.load_method_with("forward", cfg).unwrap();
    m.set_input_tensor(0, f.inputs[0].dtype, &f.inputs[0].sizes, &f.inputs[0].data)
        .unwrap();
    m.execute().unwrap();
    assert_eq!(m.instructions_run(), 1);
}

pub(crate) fn is_mutable(t: &fbo::TensorT) -> bool {
    t.allocation_info.is_some() && t.data_buffer_idx > 0
}

fn is_external(t: &fbo::TensorT) -> bool {
    t.extra_tensor_info
        .as_ref()
        .is_some_and(|e| e.location == fbo::TensorDataLocation::EXTERNAL)
}

#[test]
fn mutable_and_external_data() {
    let f = fixture("mutable_buffer");
    let mut p0 = unpack(&f.pte);
    let has_mutable = values(&mut p0)
        .iter()
        .any(|v| matches!(&v.val, fbo::KernelTypesT::Tensor(t) if is_mutable(t)));
    if has_mutable {
        let seg_len = segment_data(&f.pte).len() as u64;
        let cases = vec![
            case(
                "no mutable_data_segments",
                &["mutable_data_segments"],
                |p| p.mutable_data_segments = None,
            ),
            case(
                "empty mutable_data_segments",
                &["mutable_data_segments"],
                |p| p.mutable_data_segments = Some(vec![]),
            ),
            case(
                "mutable offset past the segment",
                &["mutable tensor data"],
                move |p| {
                    for o in p.mutable_data_segments.as_mut().unwrap()[0]
                        .offsets
                        .as_mut()
                        .unwrap()
                        .iter_mut()
                        .skip(1)
                    {
                        *o = seg_len;
                    }
                },
            ),
            case(
                "mutable segment index out of range",
                &["segment index 99"],
                |p| p.mutable_data_segments.as_mut().unwrap()[0].segment_index = 99,
            ),
            tcase(
                "mutable data index out of range",
                &["mutable data index 5000"],
                is_mutable,
                |t| t.data_buffer_idx = 5000,
            ),
        ];
        run_cases(&f, cases, small_config());
    } else {
        eprintln!("mutable_buffer has no initial mutable data: skipped those cases");
    }

    // External weights.
    let f = fixture("external_weights");
    assert!(f.ptd.is_some(), "external_weights has a .ptd");
    let runtime = runtime();
    let run = |pte: &[u8], ptd: Option<&[u8]>| {
        exercise(pte, ptd, &f.inputs, &runtime, small_config(), true)
    };
    expect_err(
        run(&f.pte, None),
        "external tensor without its .ptd",
        &["external"],
    );
    let cases = vec![
        tcase(
            "unknown external key",
            &["\"missing\" not found"],
            is_external,
            |t| t.extra_tensor_info.as_mut().unwrap().fully_qualified_name = Some("missing".into()),
        ),
        tcase(
            "external layout mismatch",
            &["does not match", "needs"],
            is_external,
            |t| t.sizes.as_mut().unwrap()[0] += 1,
        ),
        tcase(
            "external dtype mismatch",
            &["does not match", "needs"],
            is_external,
            |t| t.scalar_type = fbo::ScalarType::DOUBLE,
        ),
        tcase(
            "external mutable tensor past the arena",
            &["overruns"],
            is_external,
            |t| {
                t.allocation_info = Some(Box::new(fbo::AllocationDetailsT {
                    memory_id: 1,
                    memory_offset_low: 1 << 24,
                    memory_offset_high: 0,
                }))
            },
        ),
        tcase("external mutable tensor", &[], is_external, |t| {
            t.allocation_info = Some(Box::new(fbo::AllocationDetailsT::default()))
        }),
    ];
    run_cases(&f, cases, small_config());
}
