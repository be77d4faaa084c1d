//! Malformed and hostile inputs: no `.pte`, `.ptd` or `.npy` file may make pteron panic, hang,
//! allocate without bound or read outside its buffers. Every case either loads and runs, or
//! stops with an error that says what was wrong.
//!
//! * Hand-made container cases (identifier, "eh00" header, truncation, root offset).
//! * Structure-aware cases: a real fixture is unpacked with the flatbuffers object API
//!   (`support/program_object_api.rs`), one field is changed, and it is packed again.
//! * Random mutants of every fixture (deterministic xorshift PRNG; bit flips, byte and word
//!   overwrites, truncations, duplicated chunks), each parsed, loaded and (if it loads) run
//!   under an instruction budget inside `catch_unwind`; a watchdog fails the test on a hang.
//!   `PTERON_MUTANTS=n` changes the number of mutants per fixture and kind (default 300),
//!   `PTERON_MUTANT_RUNS=n` how many of them are executed (default: all but for big fixtures).
//! * `.npy` parsing under the same mutations.
//!
//! Operators without a kernel yet are given a stub kernel that reads every argument through
//! the kernel interface and writes its output, so that the loader's and executor's checks are
//! exercised even where the real kernel is still missing.

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "support/program_object_api.rs"]
mod objapi;

#[allow(
    clippy::all,
    unused_imports,
    dead_code,
    non_camel_case_types,
    non_snake_case,
    deprecated,
    mismatched_lifetime_syntaxes,
    unsafe_op_in_unsafe_fn,
    unused_mut
)]
#[rustfmt::skip]
#[path = "support/xnnpack_object_api.rs"]
mod xnnobj;

#[path = "support/mutate.rs"]
mod mutate;

#[path = "support/harness.rs"]
mod harness;

#[path = "support/xnn_mutate.rs"]
mod xnn_mutate;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mutate::*;
use objapi::executorch_flatbuffer as fbo;
use pteron::core::{
    ArgAccess, Error as CoreError, Kernel, KernelContext, KernelError, KernelRegistry, Method,
    Value as CValue,
};
use pteron::format::{DataFile, FormatError};
use pteron::{npy, MethodConfig, ProgramFile, RunMethod, ScalarType, Tensor};

// ------------------------------------------------------------------------------------------
// Fixtures and running

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

#[derive(Clone)]
struct Fixture {
    pte: Vec<u8>,
    ptd: Option<Vec<u8>>,
    inputs: Vec<Tensor>,
}

fn fixture(name: &str) -> Fixture {
    let dir = models_dir().join(name);
    let pte = std::fs::read(dir.join("model.pte")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let ptd = std::fs::read_to_string(dir.join("meta.json"))
        .ok()
        .and_then(|m| serde_json::from_str::<serde_json::Value>(&m).ok())
        .and_then(|m| {
            m["external_data"]
                .as_str()
                .map(|f| std::fs::read(dir.join(f)).unwrap())
        });
    let mut inputs = Vec::new();
    while let Ok(t) = npy::read(dir.join(format!("input{}.npy", inputs.len()))) {
        inputs.push(t);
    }
    Fixture { pte, ptd, inputs }
}

fn all_fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(models_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("model.pte").exists())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// A kernel for operators that have no real kernel yet: reads every argument through the
/// kernel interface (as a real kernel would), then zero-fills the returned tensor.
fn stub_kernel(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let n = ctx.num_args();
    for i in 0..n {
        let v = *ctx.value(i)?;
        match v {
            CValue::Tensor(_) => {
                let vi = ctx.value_index(i)?;
                let ([t], []) = ctx.io_values([vi], [])?;
                let _ = t.bytes.iter().fold(0u8, |a, &b| a ^ b);
            }
            CValue::IntList(_) => {
                for x in ctx.int_list(i)?.iter() {
                    x?;
                }
            }
            CValue::TensorList(_) => {
                let items = ctx.tensor_list(i)?.to_vec();
                for vi in items {
                    ctx.tensor_at(vi as usize)?;
                    let _ = ctx.io_values([vi as usize], [])?;
                }
            }
            CValue::OptionalTensorList(_) => {
                let items = ctx.opt_tensor_list(i)?.to_vec();
                for vi in items.into_iter().filter(|&v| v != pteron::core::NONE_INDEX) {
                    ctx.tensor_at(vi as usize)?;
                }
            }
            CValue::DoubleList(_) => {
                ctx.double_list(i)?;
            }
            CValue::BoolList(_) => {
                ctx.bool_list(i)?;
            }
            _ => {}
        }
    }
    if n > 0 && matches!(ctx.value(n - 1)?, CValue::Tensor(_)) {
        // Like a unary kernel: argument 0 in, the return slot out, borrowed together.
        if n > 1
            && matches!(ctx.value(0)?, CValue::Tensor(_))
            && ctx.value_index(0)? != ctx.value_index(n - 1)?
        {
            let (_, [o]) = ctx.io([0], [n - 1])?;
            o.bytes.fill(0);
        } else {
            let ([], [o]) = ctx.io([], [n - 1])?;
            o.bytes.fill(0);
        }
    }
    Ok(())
}

/// The default kernels, plus [`stub_kernel`] for every operator the fixtures use that has no
/// kernel yet.
fn kernels() -> KernelRegistry {
    let mut reg = pteron::default_kernels();
    for name in all_fixture_names() {
        let f = fixture(&name);
        let Ok(p) = pteron::format::Program::parse(&f.pte) else {
            continue;
        };
        for plan in p.plans() {
            for op in plan.operators().into_iter().flatten() {
                let full = pteron::core::method::operator_name(&op);
                if reg.get(&full).is_none() {
                    reg.register(&full, Kernel::new(stub_kernel));
                }
            }
        }
    }
    reg
}

fn synthetic_input(spec: &CValue<'_>) -> Option<Tensor> {
    let CValue::Tensor(t) = spec else { return None };
    let dtype = t.info.dtype();
    let numel = t.info.numel();
    let data = match dtype {
        ScalarType::Float => (0..numel)
            .flat_map(|i| ((i % 7) as f32 * 0.25 - 0.5).to_le_bytes())
            .collect(),
        _ => vec![0u8; numel * dtype.elem_size()],
    };
    Some(Tensor {
        dtype,
        sizes: t.info.sizes().to_vec(),
        data,
    })
}

/// Sets the inputs (the given ones where they fit the method, synthetic ones otherwise),
/// executes, and reads every output.
fn run_method(m: &mut Method<'_>, given: &[Tensor]) -> Result<(), pteron::Error> {
    for i in 0..m.num_inputs() {
        let spec = *m.input_spec(i).expect("input spec");
        match spec {
            CValue::Tensor(s) => {
                let t = given
                    .get(i)
                    .filter(|t| t.dtype == s.info.dtype() && t.sizes.len() == s.info.rank())
                    .cloned()
                    .or_else(|| synthetic_input(&spec))
                    .expect("tensor spec");
                m.set_input_tensor(i, t.dtype, &t.sizes, &t.data)?;
            }
            v => m.set_input_value(i, v)?,
        }
    }
    m.execute()?;
    for i in 0..m.num_outputs() {
        if let pteron::core::Output::Tensor(t) = m.output(i)? {
            // Output bytes must cover the sizes the output claims.
            assert_eq!(
                t.bytes.len(),
                t.info.nbytes(),
                "output {i} bytes do not match its sizes"
            );
        }
    }
    m.outputs()?;
    Ok(())
}

/// Parses `pte` (with `ptd` attached), walks the format-level accessors, loads every method and
/// (when `execute`) runs it. Returns the first error.
fn exercise(
    pte: &[u8],
    ptd: Option<&[u8]>,
    inputs: &[Tensor],
    kernels: &KernelRegistry,
    config: MethodConfig,
    execute: bool,
) -> Result<(), pteron::Error> {
    exercise_with(pte, ptd, inputs, kernels, config.into(), execute)
}

/// [`exercise`] with explicit method options (backends).
fn exercise_with(
    pte: &[u8],
    ptd: Option<&[u8]>,
    inputs: &[Tensor],
    kernels: &KernelRegistry,
    options: pteron::MethodOptions,
    execute: bool,
) -> Result<(), pteron::Error> {
    let file = ProgramFile::from_bytes(pte);
    let data = ptd.map(ProgramFile::from_bytes);
    let mut program = file.program()?;
    walk_format(program.format());
    if let Some(d) = &data {
        let df = d.data_file()?;
        walk_data_file(&df);
        program = program.with_external_data(df);
    }
    let mut first = None;
    for name in program.method_names() {
        let r = program
            .load_method_with(name, kernels, options.clone())
            .and_then(|mut m| {
                if execute {
                    run_method(&mut m, inputs)?;
                    // A second run starts from the state the first one left.
                    run_method(&mut m, inputs)?;
                }
                Ok(())
            });
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Touches every checked accessor of a verified program.
fn walk_format(p: &pteron::format::Program<'_>) {
    let _ = p.constant_segment_bytes();
    for i in 0..p.num_segments() + 2 {
        let _ = p.segment(i);
    }
    for k in p.named_data_keys() {
        let _ = p.named_data(k);
    }
    for idx in [0u32, 1, 2, 1000, u32::MAX] {
        for n in [0usize, 1, 64, usize::MAX] {
            let _ = p.constant(idx, n);
            let _ = p.mutable_data(idx, n);
        }
    }
    for plan in p.plans() {
        for d in plan.delegates().into_iter().flatten() {
            if let Some(r) = d.processed() {
                let _ = p.delegate_data(r);
            }
        }
    }
}

fn walk_data_file(d: &DataFile<'_>) {
    for k in d.keys() {
        let _ = d.get(k);
        let _ = d.layout(k);
    }
    let _ = d.get("no such key");
}

fn small_config() -> MethodConfig {
    MethodConfig {
        instruction_budget: 100_000,
        max_planned_bytes: 64 << 20,
        max_values: 1 << 20,
    }
}

thread_local! {
    /// Where and why the last panic on this thread happened (see [`record_panics`]).
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs (once) a panic hook that also keeps the panic's location and message for the
/// thread's mutant report, then prints as usual.
fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string().replace('\n', " ")));
            prev(info);
        }));
    });
}

/// Runs `f` on a worker thread; fails if the step it reports does not finish within `limit`.
fn with_watchdog<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce(Arc<Mutex<(Instant, String)>>) -> T + Send + 'static,
) -> T {
    let step = Arc::new(Mutex::new((Instant::now(), String::from("start"))));
    let s2 = step.clone();
    let h = std::thread::spawn(move || f(s2));
    while !h.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        let (t, what) = step.lock().unwrap().clone();
        if t.elapsed() > limit {
            panic!("{what} has run for more than {limit:?}: a hang?");
        }
    }
    h.join().expect("worker thread")
}

// ------------------------------------------------------------------------------------------
// Error assertions

fn expect_err<T>(r: Result<T, pteron::Error>, what: &str, needles: &[&str]) -> pteron::Error {
    let e = match r {
        Ok(_) => panic!("{what}: expected an error, but it was accepted"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(
        needles.is_empty()
            || needles
                .iter()
                .any(|n| msg.to_lowercase().contains(&n.to_lowercase())),
        "{what}: error {msg:?} does not mention any of {needles:?}"
    );
    e
}

fn parse_err(bytes: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
    let f = ProgramFile::from_bytes(bytes);
    let r = f.program().map(|_| ());
    expect_err(r, what, needles)
}

/// Loads and runs the (edited) program; must fail, naming the problem.
fn run_err(
    f: &Fixture,
    pte: &[u8],
    config: MethodConfig,
    what: &str,
    needles: &[&str],
) -> pteron::Error {
    let kernels = kernels();
    let r = catch_unwind(AssertUnwindSafe(|| {
        exercise(pte, f.ptd.as_deref(), &f.inputs, &kernels, config, true)
    }))
    .unwrap_or_else(|_| panic!("{what}: panicked"));
    expect_err(r, what, needles)
}

// ------------------------------------------------------------------------------------------
// Rebuilding programs with one field changed

fn program_size(orig: &[u8]) -> usize {
    checked_program_size(orig).expect("well-formed fixture")
}

/// The segment data of a well-formed file.
fn segment_data(orig: &[u8]) -> &[u8] {
    checked_segment_data(orig).expect("well-formed fixture")
}

fn unpack(orig: &[u8]) -> fbo::ProgramT {
    try_unpack(orig).expect("fixture verifies").0
}

/// `f`'s program with `edit` applied.
fn edited(f: &Fixture, edit: impl FnOnce(&mut fbo::ProgramT)) -> Vec<u8> {
    let mut p = unpack(&f.pte);
    edit(&mut p);
    pack(&p, segment_data(&f.pte))
}

fn plan(p: &mut fbo::ProgramT) -> &mut fbo::ExecutionPlanT {
    &mut p.execution_plan.as_mut().unwrap()[0]
}

fn values(p: &mut fbo::ProgramT) -> &mut Vec<fbo::EValueT> {
    plan(p).values.as_mut().unwrap()
}

fn instructions(p: &mut fbo::ProgramT) -> &mut Vec<fbo::InstructionT> {
    plan(p).chains.as_mut().unwrap()[0]
        .instructions
        .as_mut()
        .unwrap()
}

fn push_value(p: &mut fbo::ProgramT, v: fbo::KernelTypesT) -> i32 {
    let vals = values(p);
    vals.push(fbo::EValueT { val: v });
    vals.len() as i32 - 1
}

fn find_value(p: &mut fbo::ProgramT, pred: impl Fn(&fbo::KernelTypesT) -> bool) -> usize {
    values(p)
        .iter()
        .position(|v| pred(&v.val))
        .expect("fixture has such a value")
}

fn tensor(p: &mut fbo::ProgramT, vi: usize) -> &mut fbo::TensorT {
    match &mut values(p)[vi].val {
        fbo::KernelTypesT::Tensor(t) => t,
        _ => panic!("value {vi} is not a tensor"),
    }
}

/// Index of the first tensor value matching `pred`.
fn find_tensor(p: &mut fbo::ProgramT, pred: impl Fn(&fbo::TensorT) -> bool) -> usize {
    find_value(p, |v| matches!(v, fbo::KernelTypesT::Tensor(t) if pred(t)))
}

fn is_planned(t: &fbo::TensorT) -> bool {
    t.allocation_info.is_some()
}

fn is_constant(t: &fbo::TensorT) -> bool {
    t.allocation_info.is_none() && t.data_buffer_idx > 0
}

fn kernel_call(p: &mut fbo::ProgramT, k: usize) -> &mut fbo::KernelCallT {
    match &mut instructions(p)[k].instr_args {
        fbo::InstructionArgumentsT::KernelCall(c) => c,
        _ => panic!("instruction {k} is not a kernel call"),
    }
}

type Edit = Box<dyn Fn(&mut fbo::ProgramT)>;

/// One structure-aware case: an edit of the program and words the error must contain (any of
/// them; none: the case only must not panic).
struct Case {
    what: &'static str,
    needles: &'static [&'static str],
    edit: Edit,
}

fn case(
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
fn tcase(
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

fn run_cases(f: &Fixture, cases: Vec<Case>, config: MethodConfig) {
    let kernels = kernels();
    for c in cases {
        let b = edited(f, |p| (c.edit)(p));
        if c.needles.is_empty() {
            // Accepted or rejected, but without a panic.
            let r = catch_unwind(AssertUnwindSafe(|| {
                exercise(&b, f.ptd.as_deref(), &f.inputs, &kernels, config, true)
            }));
            assert!(r.is_ok(), "{}: panicked", c.what);
            continue;
        }
        run_err(f, &b, config, c.what, c.needles);
    }
}

/// A kernel call (instruction index) whose argument 0 is a planned tensor of the same shape as
/// its returned tensor (a unary op such as relu): (instruction, input, output).
fn unary_call(p: &mut fbo::ProgramT) -> (usize, i32, i32) {
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

// ------------------------------------------------------------------------------------------
// Container cases

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
            let r = catch_unwind(|| ProgramFile::from_bytes(&f.pte[..cut]).program().map(|_| ()));
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
            let r = ProgramFile::from_bytes(&f.pte[..cut]).program().map(|_| ());
            expect_err(r, &format!("{name} truncated to {cut} bytes"), &[]);
        }
    }
}

fn with_header(orig: &[u8], at: usize, v: &[u8]) -> Vec<u8> {
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
    assert!(ProgramFile::from_bytes(&old).program().is_ok());
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
    use pteron::format::schema as s;
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
    let kernels = kernels();
    // A few shared tables are fine.
    let small = shared_values_program(1000);
    exercise(&small, None, &[], &kernels, small_config(), true).expect("1000 shared values load");
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
        exercise(&small, None, &[], &kernels, cfg, true),
        "1000 values over a limit of 999",
        &["values"],
    );
    assert!(
        matches!(e, pteron::Error::Runtime(CoreError::ResourceLimit { .. })),
        "{e:?}"
    );
}

// ------------------------------------------------------------------------------------------
// Structure-aware cases

#[test]
fn rebuilt_fixtures_still_run() {
    // The re-serialiser itself must be faithful, or the cases below would test nothing.
    let kernels = kernels();
    for name in all_fixture_names() {
        let f = fixture(&name);
        let b = edited(&f, |_| {});
        let cfg = MethodConfig::default();
        let r0 = exercise(&f.pte, f.ptd.as_deref(), &f.inputs, &kernels, cfg, true)
            .map_err(|e| e.to_string());
        let r1 = exercise(&b, f.ptd.as_deref(), &f.inputs, &kernels, cfg, true)
            .map_err(|e| e.to_string());
        assert_eq!(r0, r1, "{name}: the rebuilt program behaves differently");
    }
}

/// A planned rank-2 tensor (an activation).
fn planned_2d(t: &fbo::TensorT) -> bool {
    is_planned(t) && t.sizes.as_ref().is_some_and(|s| s.len() == 2)
}

#[test]
fn bad_tensors() {
    let f = fixture("mlp");
    let p = planned_2d;
    let cases = vec![
        tcase("negative size", &["negative tensor size"], p, |t| {
            t.sizes.as_mut().unwrap()[0] = -1
        }),
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
        tcase("rank 17", &["rank 17"], p, |t| {
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
        tcase("dim_order too short", &["dim order has 1"], p, |t| {
            t.dim_order = Some(vec![0])
        }),
        tcase("dim_order too long", &["dim order has 3"], p, |t| {
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
        tcase("memory_id 2", &["memory_id 2"], p, |t| {
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
            tensor(p, i).sizes = Some(vec![1 << 31 - 1, 1 << 31 - 1, 4]);
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
        ("negative buffer", vec![0, -1], &["negative size"][..]),
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

fn is_int_list(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::IntList(_))
}

fn is_tensor_list(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::TensorList(_))
}

fn is_int(v: &fbo::KernelTypesT) -> bool {
    matches!(v, fbo::KernelTypesT::Int(_))
}

/// Applies `edit` to the items of every IntList.
fn each_int_list(p: &mut fbo::ProgramT, mut edit: impl FnMut(&mut Vec<i64>)) {
    for v in values(p).iter_mut() {
        if let fbo::KernelTypesT::IntList(l) = &mut v.val {
            edit(l.items.as_mut().unwrap());
        }
    }
}

fn tensor_list_items(p: &mut fbo::ProgramT) -> (usize, &mut Vec<i32>) {
    let vi = find_value(p, is_tensor_list);
    match &mut values(p)[vi].val {
        fbo::KernelTypesT::TensorList(l) => (vi, l.items.as_mut().unwrap()),
        _ => unreachable!(),
    }
}

fn opt_list(items: Vec<i32>) -> fbo::KernelTypesT {
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
        case("value of type NONE", &["unknown type 0"], |p| {
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
    let e = file
        .program()
        .unwrap()
        .load_method_with("nope", &kernels(), small_config())
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
        case("jump on an Int", &["jump condition is a Int"], |p| {
            let c = push_value(p, int_value(0));
            instructions(p).insert(0, jump(c, 1));
        }),
        case(
            "jump on a float tensor",
            &["jump condition is a Tensor"],
            |p| {
                let c = find_tensor(p, is_constant) as i32;
                instructions(p).insert(0, jump(c, 1));
            },
        ),
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
        case("FreeCall on an Int", &["FreeCall on value"], |p| {
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
    let kernels = kernels();
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(true));
        instructions(p).insert(0, jump(c, 0));
    });
    let _ = exercise(&b, None, &f.inputs, &kernels, cfg, true);
    let b = edited(&f, |p| {
        let c = push_value(p, bool_value(false));
        let n = instructions(p).len() as i32 + 1;
        instructions(p).insert(0, jump(c, n));
    });
    let file = ProgramFile::from_bytes(&b);
    let program = file.program().unwrap();
    let mut m = program.load_method_with("forward", &kernels, cfg).unwrap();
    m.set_input_tensor(0, f.inputs[0].dtype, &f.inputs[0].sizes, &f.inputs[0].data)
        .unwrap();
    m.execute().unwrap();
    assert_eq!(m.instructions_run(), 1);
}

fn is_mutable(t: &fbo::TensorT) -> bool {
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
    let kernels = kernels();
    let run = |pte: &[u8], ptd: Option<&[u8]>| {
        exercise(pte, ptd, &f.inputs, &kernels, small_config(), true)
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

// ------------------------------------------------------------------------------------------
// .ptd container cases

#[test]
fn bad_data_files() {
    let f = fixture("external_weights");
    let ptd = f.ptd.clone().expect("external_weights has a .ptd");
    let parse = |b: &[u8]| {
        catch_unwind(|| {
            ProgramFile::from_bytes(b)
                .data_file()
                .map(|d| walk_data_file(&d))
        })
        .unwrap_or_else(|_| panic!("panicked"))
    };
    assert!(parse(&ptd).is_ok());
    expect_err(parse(&[]), "empty .ptd", &["too short"]);
    expect_err(parse(&ptd[..47]), "47-byte .ptd", &["too short"]);
    let step = (ptd.len() / 200).max(3);
    for cut in (48..ptd.len()).step_by(step) {
        expect_err(parse(&ptd[..cut]), &format!(".ptd truncated to {cut}"), &[]);
    }
    let len = ptd.len() as u64;
    let cases: [(&str, usize, Vec<u8>, &[&str]); 9] = [
        ("FH01 magic", 8, b"FH02".to_vec(), &["FH01"]),
        (
            "header_length 39",
            12,
            39u32.to_le_bytes().to_vec(),
            &["FH01"],
        ),
        (
            "flatbuffer past the end",
            24,
            len.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "flatbuffer offset u64::MAX",
            16,
            u64::MAX.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "segment base past the end",
            32,
            (len + 1).to_le_bytes().to_vec(),
            &["segment"],
        ),
        (
            "segment size u64::MAX",
            40,
            u64::MAX.to_le_bytes().to_vec(),
            &["segment"],
        ),
        (
            "root offset past the end",
            0,
            (len as u32).to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "root offset u32::MAX",
            0,
            u32::MAX.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        ("identifier", 4, b"FT02".to_vec(), &["FT01"]),
    ];
    for (what, at, v, needles) in cases {
        expect_err(parse(&with_header(&ptd, at, &v)), what, needles);
    }
    // No segment data: the key's segment no longer fits.
    let b = with_header(&ptd, 40, &0u64.to_le_bytes());
    let d = ProgramFile::from_bytes(&b);
    let df = d.data_file().unwrap();
    let key = df.keys().next().expect("a key");
    expect_err(
        df.get(key).map(|_| ()).map_err(pteron::Error::from),
        "segment cut short",
        &["segment"],
    );
}

fn mutants_per_fixture() -> usize {
    std::env::var("PTERON_MUTANTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300)
}

/// How many mutants of a fixture are executed: big ones only a few times (the rest are parsed
/// and loaded), to keep the test fast. `PTERON_MUTANT_RUNS=n` overrides it.
fn max_runs(file_len: usize) -> usize {
    if let Some(n) = std::env::var("PTERON_MUTANT_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return n;
    }
    match file_len {
        0..=0x3FFFF => usize::MAX,
        0x40000..=0xFFFFF => 40,
        _ => 4,
    }
}

fn fuzz_fixture(name: &'static str) {
    let f = fixture(name);
    let n = mutants_per_fixture();
    record_panics();
    let report = with_watchdog(Duration::from_secs(30), move |step| {
        let kernels = kernels();
        // Budgets from the original program: a little more than it needs.
        let file = ProgramFile::from_bytes(&f.pte);
        let data = f.ptd.as_deref().map(ProgramFile::from_bytes);
        let mut program = file.program().expect("fixture parses");
        if let Some(d) = &data {
            program = program.with_external_data(d.data_file().unwrap());
        }
        let (instrs, planned) =
            match program.load_method_with("forward", &kernels, MethodConfig::default()) {
                Ok(mut m) => {
                    let planned = m.planned_bytes() as u64;
                    let _ = run_method(&mut m, &f.inputs);
                    (m.instructions_run(), planned)
                }
                Err(_) => (1000, 64 << 20),
            };
        let config = MethodConfig {
            instruction_budget: 2 * instrs + 16,
            max_planned_bytes: 2 * planned + (1 << 20),
            max_values: 1 << 20,
        };
        let hot = program_size(&f.pte);
        let max_runs = max_runs(f.pte.len());
        let mut panics = Vec::new();
        let (mut loaded, mut runs, mut errors) = (0usize, 0usize, 0usize);
        let fixture_seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
            (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
        });
        let base = unpack(&f.pte);
        let segments = segment_data(&f.pte);
        for k in 0..2 * n {
            let seed = fixture_seed ^ (k as u64 + 1);
            let mut rng = Rng::new(seed);
            // First byte mutants (for fixtures with a .ptd, every fourth one mutates the .ptd),
            // then structure-aware ones (fields of the unpacked program changed, then packed).
            let (pte, ptd) = match &f.ptd {
                _ if k >= n => {
                    let mut p = base.clone();
                    semantic_mutate(&mut p, &mut rng);
                    if std::env::var("PTERON_DUMP_MUTANT").is_ok_and(|v| v == k.to_string()) {
                        dump_diff(&base, &p);
                    }
                    (pack(&p, segments), f.ptd.clone())
                }
                Some(d) if k % 4 == 3 => {
                    (f.pte.clone(), Some(mutate(d, d.len().min(4096), &mut rng)))
                }
                d => (mutate(&f.pte, hot, &mut rng), d.clone()),
            };
            // Every fourth structure mutant also gets hostile input data (indices out of
            // range, NaN, extremes): inputs are untrusted too.
            let inputs = if k >= n && k % 4 == 0 {
                hostile_inputs(&f.inputs, &mut rng)
            } else {
                f.inputs.clone()
            };
            let kind = if k >= n { "structure" } else { "byte" };
            let execute = runs < max_runs;
            *step.lock().unwrap() = (
                Instant::now(),
                format!("{name} {kind} mutant seed {seed:#x} (#{k})"),
            );
            let r = catch_unwind(AssertUnwindSafe(|| {
                exercise(&pte, ptd.as_deref(), &inputs, &kernels, config, execute)
            }));
            match r {
                Err(_) => {
                    let msg = LAST_PANIC
                        .with(|p| p.borrow_mut().take())
                        .unwrap_or_default();
                    panics.push(format!("{name} {kind} mutant seed {seed:#x} (#{k}): {msg}"));
                }
                Ok(Ok(())) => {
                    loaded += 1;
                    runs += execute as usize;
                }
                Ok(Err(e)) => {
                    errors += 1;
                    if std::env::var("PTERON_MUTANT_ERRORS").is_ok() {
                        eprintln!("{name} #{k}: {e}");
                    }
                    if matches!(
                        e,
                        pteron::Error::Runtime(
                            CoreError::Kernel { .. } | CoreError::InstructionBudget(_)
                        )
                    ) {
                        runs += execute as usize;
                    }
                }
            }
        }
        eprintln!(
            "{name}: {} mutants: {loaded} ran cleanly, {errors} rejected, {runs} executed, {} panicked",
            2 * n,
            panics.len()
        );
        panics
    });
    assert!(
        report.is_empty(),
        "{} mutants panicked:\n{}\n(see what a structure mutant changed: PTERON_DUMP_MUTANT=<#k> \
         cargo test -p pteron --test malformed mutants::{name} -- --nocapture)",
        report.len(),
        report.join("\n")
    );
}

macro_rules! fuzz_fixtures {
    ($($name:ident),* $(,)?) => {
        mod mutants {
            $( #[test] fn $name() { super::fuzz_fixture(stringify!($name)); } )*
        }
        const FUZZED: &[&str] = &[$(stringify!($name)),*];
    };
}

fuzz_fixtures!(
    bert_tiny,
    cnn,
    conformer_tiny,
    conv_blocks,
    dynamic_mlp,
    dynamic_reshape,
    external_weights,
    llama_tiny,
    lstm,
    mlp,
    mobilenet_v2_small,
    multi_output,
    mutable_buffer,
    resnet_mini,
    unet,
    vit_tiny,
);

#[test]
fn every_fixture_is_fuzzed() {
    for name in all_fixture_names() {
        assert!(
            FUZZED.contains(&name.as_str()),
            "fixture {name} has no mutant test"
        );
    }
}

#[test]
fn npy_mutants() {
    let mut files = Vec::new();
    for name in all_fixture_names() {
        for entry in std::fs::read_dir(models_dir().join(&name)).unwrap() {
            let p = entry.unwrap().path();
            if p.extension().is_some_and(|e| e == "npy") {
                files.push(std::fs::read(&p).unwrap());
            }
        }
    }
    files.sort_by_key(|f| f.len());
    files.truncate(12);
    let mut hand = vec![
        b"\x93NUMPY".to_vec(),
        b"\x93NUMPY\x01\x00\xff\xff".to_vec(),
        b"\x93NUMPY\x02\x00\xff\xff\xff\xff".to_vec(),
        b"\x93NUMPY\x03\x00".to_vec(),
        b"\x93NUMPY\x01\x00\x05\x00{'de".to_vec(),
    ];
    let header = |h: &str| {
        let mut v = b"\x93NUMPY\x01\x00".to_vec();
        v.extend_from_slice(&(h.len() as u16).to_le_bytes());
        v.extend_from_slice(h.as_bytes());
        v
    };
    for h in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (, }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }",
        "{'descr': 'é', 'fortran_order': False, 'shape': (), }",
        "{'descr':",
        "{'shape': (1,), 'descr': '<f4', 'fortran_order': False}",
    ] {
        hand.push(header(h));
    }
    for b in &hand {
        let r = catch_unwind(|| npy::parse(b).map(|_| ()));
        assert!(
            r.expect("npy parse panicked").is_err(),
            "{:?} was accepted",
            String::from_utf8_lossy(b)
        );
    }
    for (i, f) in files.iter().enumerate() {
        npy::parse(f).expect("fixture npy parses");
        for k in 0..400u64 {
            let seed = ((i as u64) << 32) | k;
            let m = mutate(f, f.len().min(128), &mut Rng::new(seed));
            let r = catch_unwind(|| npy::parse(&m).map(|_| ()));
            assert!(r.is_ok(), "npy mutant seed {seed:#x} panicked");
        }
    }
}

// ------------------------------------------------------------------------------------------
// ExecuTorch's advisories and robustness fixes (`pte-format.md` §8), one test per item; the
// table in docs/security.md maps each to its test. Many repeat a case above in the exact form
// of the report.

mod advisories {
    use super::*;

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
        let kernels = kernels();
        let r = catch_unwind(AssertUnwindSafe(|| {
            exercise(pte, None, &[], &kernels, small_config(), true)
        }))
        .unwrap_or_else(|_| panic!("{what}: panicked"));
        expect_err(r, what, needles)
    }

    /// [`load_err`] with no delegate backend registered.
    fn load_err_no_backends(pte: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
        let kernels = kernels();
        let options =
            pteron::MethodOptions::from(small_config()).backends(pteron::BackendRegistry::new());
        let r = catch_unwind(AssertUnwindSafe(|| {
            exercise_with(pte, None, &[], &kernels, options, true)
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
        let kernels = kernels();
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
                    exercise(&b, None, &f.inputs, &kernels, small_config(), true)
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
                tcase("planned tensor of rank 17", &["rank 17"], planned_2d, |t| {
                    t.sizes = Some(vec![1; 17]);
                    t.dim_order = Some((0..17).collect());
                }),
                tcase("constant of rank 255", &["rank 255"], is_constant, |t| {
                    t.sizes = Some(vec![1; 255]);
                    t.dim_order = Some((0..255).collect());
                }),
                case("input of rank 64", &["rank 64"], |p| {
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
        let r = file
            .program()
            .unwrap()
            .load_method_with("forward", &kernels(), small_config());
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
                "negative size",
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
                case("FreeCall on an Int", &["FreeCall on value"], |p| {
                    let c = push_value(p, int_value(3));
                    instructions(p).insert(0, free_call(c));
                }),
                case("FreeCall on a None", &["FreeCall on value"], |p| {
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
        let kernels = kernels();
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
                exercise(&b, None, &f.inputs, &kernels, small_config(), true)
            }));
            assert!(r.is_ok(), "panicked");
        }
        exercise(
            &edited(&f, |p| plan(p).container_meta_type = None),
            None,
            &f.inputs,
            &kernels,
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
                tcase("dim_order shorter", &["dim order has 1"], planned_2d, |t| {
                    t.dim_order = Some(vec![0])
                }),
                tcase("dim_order longer", &["dim order has 4"], planned_2d, |t| {
                    t.dim_order = Some(vec![0, 1, 2, 3])
                }),
                tcase("empty dim_order", &["dim order has 0"], planned_2d, |t| {
                    t.dim_order = Some(vec![])
                }),
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

    // --- XNNPACK payloads (pteron-xnnpack) --------------------------------------------------
    //
    // Each test edits the payload of a real XNNPACK-lowered fixture (testdata/xnnpack): a
    // header field, or one field of the graph unpacked with the flatbuffers object API
    // (`support/xnnpack_object_api.rs`) and packed again (`support/xnn_mutate.rs`). The
    // backend must refuse the edit at method load, naming it.

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
        let program = f.program().expect("parses");
        let mut m = program
            .load_method("forward", &pteron::default_kernels())
            .expect("loads");
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
                    g.xnodes.as_mut().unwrap()[0].output_min_max =
                        Some(Box::new(xo::OutputMinMaxT {
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
        let kernels = kernels();
        for name in ["mlp", "dynamic_mlp"] {
            let f = fixture(name);
            let file = ProgramFile::from_bytes(&f.pte);
            let program = file.program().unwrap();
            let mut m = program.load_method("forward", &kernels).unwrap();
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
        let kernels = kernels();
        for file in [
            "embedding_4bit/embedding_4bit_default_g1_f32.pte",
            "embedding_4bit/embedding_4bit_dtype_g2_zp_f32.pte",
            "embedding_2bit/embedding_2bit_default_g1_f32.pte",
        ] {
            let Ok(pte) = std::fs::read(models_dir().join("../ops").join(file)) else {
                panic!("{file} missing");
            };
            let f = ProgramFile::from_bytes(&pte);
            let program = f.program().unwrap();
            let mut m = program.load_method("forward", &kernels).unwrap();
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
                    e.to_string().contains(&format!("index {bad} out of range")),
                    "{file}: {e}"
                );
            }
        }
    }
}
