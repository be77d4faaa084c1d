//! Fixtures and running them: the stub kernels, synthetic inputs, the instruction budget
//! and watchdog, and assertions on the errors a case must stop with.

use super::*;

pub(crate) fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

#[derive(Clone)]
pub(crate) struct Fixture {
    pub(crate) pte: Vec<u8>,
    pub(crate) ptd: Option<Vec<u8>>,
    pub(crate) inputs: Vec<Tensor>,
}

pub(crate) fn fixture(name: &str) -> Fixture {
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

pub(crate) fn all_fixture_names() -> Vec<String> {
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
                for vi in items.into_iter().filter(|&v| v != pteron_core::NONE_INDEX) {
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

/// A runtime with the default kernels, plus [`stub_kernel`] for every operator the fixtures use
/// that has no kernel yet.
pub(crate) fn runtime() -> Runtime {
    let mut reg = pteron::default_kernels();
    for name in all_fixture_names() {
        let f = fixture(&name);
        let Ok(p) = pteron_format::Program::parse(&f.pte) else {
            continue;
        };
        for plan in p.plans() {
            for op in plan.operators().into_iter().flatten() {
                let full = pteron_core::method::operator_name(&op);
                if reg.get(&full).is_none() {
                    reg.register(&full, Kernel::new(stub_kernel));
                }
            }
        }
    }
    Runtime::builder().kernels(reg).build().expect("runtime")
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
pub(crate) fn run_method(m: &mut Method<'_>, given: &[Tensor]) -> Result<(), pteron::Error> {
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
        if let pteron::Output::Tensor(t) = m.output(i)? {
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
pub(crate) fn exercise(
    pte: &[u8],
    ptd: Option<&[u8]>,
    inputs: &[Tensor],
    runtime: &Runtime,
    config: MethodConfig,
    execute: bool,
) -> Result<(), pteron::Error> {
    exercise_with(pte, ptd, inputs, runtime, config.into(), execute)
}

/// [`exercise`] with explicit method options.
pub(crate) fn exercise_with(
    pte: &[u8],
    ptd: Option<&[u8]>,
    inputs: &[Tensor],
    runtime: &Runtime,
    options: pteron::MethodOptions,
    execute: bool,
) -> Result<(), pteron::Error> {
    let file = ProgramFile::from_bytes(pte);
    let data = ptd.map(ProgramFile::from_bytes);
    let mut program = runtime.load_program(&file)?;
    walk_format(program.format());
    if let Some(d) = &data {
        let df = d.data_file()?;
        walk_data_file(&df);
        program = program.with_external_data(df);
    }
    let mut first = None;
    for name in program.method_names() {
        let r = program
            .load_method_with(name, options.clone())
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
fn walk_format(p: &pteron_format::Program<'_>) {
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

pub(crate) fn walk_data_file(d: &DataFile<'_>) {
    for k in d.keys() {
        let _ = d.get(k);
        let _ = d.layout(k);
    }
    let _ = d.get("no such key");
}

pub(crate) fn small_config() -> MethodConfig {
    MethodConfig {
        instruction_budget: 100_000,
        max_planned_bytes: 64 << 20,
        max_values: 1 << 20,
    }
}

thread_local! {
    /// Where and why the last panic on this thread happened (see [`record_panics`]).
    pub(crate) static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs (once) a panic hook that also keeps the panic's location and message for the
/// thread's mutant report, then prints as usual.
pub(crate) fn record_panics() {
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
pub(crate) fn with_watchdog<T: Send + 'static>(
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

pub(crate) fn expect_err<T>(
    r: Result<T, pteron::Error>,
    what: &str,
    needles: &[&str],
) -> pteron::Error {
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

pub(crate) fn parse_err(bytes: &[u8], what: &str, needles: &[&str]) -> pteron::Error {
    let f = ProgramFile::from_bytes(bytes);
    let r = Runtime::new().load_program(&f).map(|_| ());
    expect_err(r, what, needles)
}

/// Loads and runs the (edited) program; must fail, naming the problem.
pub(crate) fn run_err(
    f: &Fixture,
    pte: &[u8],
    config: MethodConfig,
    what: &str,
    needles: &[&str],
) -> pteron::Error {
    let runtime = runtime();
    let r = catch_unwind(AssertUnwindSafe(|| {
        exercise(pte, f.ptd.as_deref(), &f.inputs, &runtime, config, true)
    }))
    .unwrap_or_else(|_| panic!("{what}: panicked"));
    expect_err(r, what, needles)
}
