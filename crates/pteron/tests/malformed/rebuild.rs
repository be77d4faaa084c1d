//! Rebuilding programs with one field changed: a fixture unpacked with the flatbuffers object
//! API, edited, packed again; and tables of such cases run against one fixture.

use super::*;

pub(crate) fn program_size(orig: &[u8]) -> usize {
    checked_program_size(orig).expect("well-formed fixture")
}

/// The segment data of a well-formed file.
pub(crate) fn segment_data(orig: &[u8]) -> &[u8] {
    checked_segment_data(orig).expect("well-formed fixture")
}

pub(crate) fn unpack(orig: &[u8]) -> fbo::ProgramT {
    try_unpack(orig).expect("fixture verifies").0
}

/// `f`'s program with `edit` applied.
pub(crate) fn edited(f: &Fixture, edit: impl FnOnce(&mut fbo::ProgramT)) -> Vec<u8> {
    let mut p = unpack(&f.pte);
    edit(&mut p);
    pack(&p, segment_data(&f.pte))
}

pub(crate) fn plan(p: &mut fbo::ProgramT) -> &mut fbo::ExecutionPlanT {
    &mut p.execution_plan.as_mut().unwrap()[0]
}

pub(crate) fn values(p: &mut fbo::ProgramT) -> &mut Vec<fbo::EValueT> {
    plan(p).values.as_mut().unwrap()
}

pub(crate) fn instructions(p: &mut fbo::ProgramT) -> &mut Vec<fbo::InstructionT> {
    plan(p).chains.as_mut().unwrap()[0]
        .instructions
        .as_mut()
        .unwrap()
}

pub(crate) fn push_value(p: &mut fbo::ProgramT, v: fbo::KernelTypesT) -> i32 {
    let vals = values(p);
    vals.push(fbo::EValueT { val: v });
    vals.len() as i32 - 1
}

pub(crate) fn find_value(
    p: &mut fbo::ProgramT,
    pred: impl Fn(&fbo::KernelTypesT) -> bool,
) -> usize {
    values(p)
        .iter()
        .position(|v| pred(&v.val))
        .expect("fixture has such a value")
}

pub(crate) fn tensor(p: &mut fbo::ProgramT, vi: usize) -> &mut fbo::TensorT {
    match &mut values(p)[vi].val {
        fbo::KernelTypesT::Tensor(t) => t,
        _ => panic!("value {vi} is not a tensor"),
    }
}

/// Index of the first tensor value matching `pred`.
pub(crate) fn find_tensor(p: &mut fbo::ProgramT, pred: impl Fn(&fbo::TensorT) -> bool) -> usize {
    find_value(p, |v| matches!(v, fbo::KernelTypesT::Tensor(t) if pred(t)))
}

pub(crate) fn is_planned(t: &fbo::TensorT) -> bool {
    t.allocation_info.is_some()
}

pub(crate) fn is_constant(t: &fbo::TensorT) -> bool {
    t.allocation_info.is_none() && t.data_buffer_idx > 0
}

pub(crate) fn kernel_call(p: &mut fbo::ProgramT, k: usize) -> &mut fbo::KernelCallT {
    match &mut instructions(p)[k].instr_args {
        fbo::InstructionArgumentsT::KernelCall(c) => c,
        _ => panic!("instruction {k} is not a kernel call"),
    }
}

type Edit = Box<dyn Fn(&mut fbo::ProgramT)>;

/// One structure-aware case: an edit of the program and words the error must contain (any of
/// them; none: the case only must not panic).
pub(crate) struct Case {
    what: &'static str,
    needles: &'static [&'static str],
    edit: Edit,
}

pub(crate) fn case(
    what: &'static str,
    needles: &'static [&'static str],
    edit: impl Fn(&mut fbo::ProgramT) + 'static,
) -> Case {
    Case {
        what,
        needles,
        edit: Box::new(edit),
    }
}

/// A case that edits the first tensor matching `pick`.
pub(crate) fn tcase(
    what: &'static str,
    needles: &'static [&'static str],
    pick: fn(&fbo::TensorT) -> bool,
    edit: impl Fn(&mut fbo::TensorT) + 'static,
) -> Case {
    case(what, needles, move |p| {
        let vi = find_tensor(p, pick);
        edit(tensor(p, vi));
    })
}

pub(crate) fn run_cases(f: &Fixture, cases: Vec<Case>, config: MethodConfig) {
    let runtime = runtime();
    for c in cases {
        let b = edited(f, |p| (c.edit)(p));
        if c.needles.is_empty() {
            // Accepted or rejected, but without a panic.
            let r = catch_unwind(AssertUnwindSafe(|| {
                exercise(&b, f.ptd.as_deref(), &f.inputs, &runtime, config, true)
            }));
            assert!(r.is_ok(), "{}: panicked", c.what);
            continue;
        }
        run_err(f, &b, config, c.what, c.needles);
    }
}

/// A kernel call (instruction index) whose argument 0 is a planned tensor of the same shape as
/// its returned tensor (a unary op such as relu): (instruction, input, output).
pub(crate) fn unary_call(p: &mut fbo::ProgramT) -> (usize, i32, i32) {
    for k in 0..instructions(p).len() {
        let fbo::InstructionArgumentsT::KernelCall(c) = &instructions(p)[k].instr_args else {
            continue;
        };
        let args = c.args.clone().unwrap();
        let (input, out) = (args[0], *args.last().unwrap());
        let vals = values(p);
        if let (fbo::KernelTypesT::Tensor(a), fbo::KernelTypesT::Tensor(b)) =
            (&vals[input as usize].val, &vals[out as usize].val)
        {
            if input != out
                && !is_constant(a)
                && a.sizes == b.sizes
                && a.scalar_type == b.scalar_type
            {
                return (k, input, out);
            }
        }
    }
    panic!("no unary kernel call");
}
