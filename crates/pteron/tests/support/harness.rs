//! The bodies of the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs` include this file by path)
//! and of their custom mutators, so that `tests/regressions.rs` replays a crashing input
//! through exactly the code the fuzzer ran, on stable and without libFuzzer.
//!
//! Users declare `mod objapi` (`program_object_api.rs`) and `mod mutate` (`mutate.rs`) at their
//! crate root, as this file refers to them as `crate::objapi` and `crate::mutate`.
//!
//! Input formats (the first bytes of each fuzz input say which parts are which):
//!
//! | target | input |
//! |---|---|
//! | `load_program` | a `.pte` file |
//! | `load_ptd` | a `.ptd` file, served as the external data of `models/external_weights` |
//! | `load_method_execute` | `[n: u16 LE][n bytes that choose input shapes and values][.pte file]` |
//! | `execute_inputs` | `[n: u8][n bytes: a fixture's path under testdata/][bytes that choose input shapes and values]` |
//! | `xnnpack_payload` | as `load_method_execute`; the program has XNNPACK delegates, whose payloads the custom mutator (`xnn_mutate.rs`) changes |

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::mutate::{self, Rng};
use pteron::{
    EngineOptions, FusePolicy, MethodConfig, MethodOptions, Runtime, ScalarType, ThreadPool,
};
use pteron_core::{
    ArgAccess, Dynamism, Element, Kernel, KernelContext, KernelError, KernelRegistry, Method,
    Output, Value,
};

// ------------------------------------------------------------------------------------------
// Fixtures, kernels and limits

/// The repository's `testdata/` directory.
pub fn testdata() -> PathBuf {
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    loop {
        let t = dir.join("testdata");
        if t.join("models").is_dir() {
            return t;
        }
        if !dir.pop() {
            panic!("no testdata/ above {}", env!("CARGO_MANIFEST_DIR"));
        }
    }
}

/// Every fixture program: `models/<name>/model.pte`, `ops/<op>/<case>.pte`,
/// `xnnpack/<name>/model.pte` (XNNPACK-delegated) and `security/<name>.pte` (hostile or
/// unusual programs), by path under testdata/.
pub fn fixtures() -> &'static BTreeMap<String, Vec<u8>> {
    static F: OnceLock<BTreeMap<String, Vec<u8>>> = OnceLock::new();
    F.get_or_init(|| {
        let root = testdata();
        let mut out = BTreeMap::new();
        for sub in ["models", "ops", "xnnpack", "security"] {
            let Ok(dirs) = std::fs::read_dir(root.join(sub)) else {
                continue;
            };
            let mut dirs: Vec<PathBuf> = dirs.flatten().map(|d| d.path()).collect();
            if sub == "security" {
                dirs = vec![root.join(sub)];
            }
            for d in dirs {
                let Ok(files) = std::fs::read_dir(&d) else {
                    continue;
                };
                for f in files.flatten() {
                    let p = f.path();
                    if p.extension().is_some_and(|e| e == "pte") {
                        if let Ok(bytes) = std::fs::read(&p) {
                            let rel = p.strip_prefix(&root).unwrap().to_string_lossy();
                            out.insert(rel.replace('\\', "/"), bytes);
                        }
                    }
                }
            }
        }
        out
    })
}

/// A kernel for operators that have no real kernel: reads every argument through the kernel
/// interface (as a real kernel would), then zero-fills the returned tensor.
pub fn stub_kernel(ctx: &mut KernelContext<'_, '_>) -> Result<(), KernelError> {
    let n = ctx.num_args();
    for i in 0..n {
        let v = *ctx.value(i)?;
        match v {
            Value::Tensor(_) => {
                let vi = ctx.value_index(i)?;
                let ([t], []) = ctx.io_values([vi], [])?;
                let _ = t.bytes.iter().fold(0u8, |a, &b| a ^ b);
            }
            Value::IntList(_) => {
                for x in ctx.int_list(i)?.iter() {
                    x?;
                }
            }
            Value::TensorList(_) => {
                let items = ctx.tensor_list(i)?.to_vec();
                for vi in items {
                    ctx.tensor_at(vi as usize)?;
                    let _ = ctx.io_values([vi as usize], [])?;
                }
            }
            Value::OptionalTensorList(_) => {
                let items = ctx.opt_tensor_list(i)?.to_vec();
                for vi in items.into_iter().filter(|&v| v != pteron_core::NONE_INDEX) {
                    ctx.tensor_at(vi as usize)?;
                }
            }
            Value::DoubleList(_) => {
                ctx.double_list(i)?;
            }
            Value::BoolList(_) => {
                ctx.bool_list(i)?;
            }
            _ => {}
        }
    }
    if n > 0 && matches!(ctx.value(n - 1)?, Value::Tensor(_)) {
        if n > 1
            && matches!(ctx.value(0)?, Value::Tensor(_))
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

/// `pteron::default_kernels()`, plus [`stub_kernel`] for every operator a fixture uses that
/// has no kernel.
pub fn kernels() -> &'static KernelRegistry {
    static K: OnceLock<KernelRegistry> = OnceLock::new();
    K.get_or_init(|| {
        let mut reg = pteron::default_kernels();
        for bytes in fixtures().values() {
            let Ok(p) = pteron_format::Program::parse(bytes) else {
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
        reg
    })
}

/// Names of all registered kernels (operator renames in structure-aware mutants pick these).
pub fn op_names() -> &'static [String] {
    static N: OnceLock<Vec<String>> = OnceLock::new();
    N.get_or_init(|| {
        let mut v: Vec<String> = kernels().names().map(str::to_string).collect();
        v.sort();
        v
    })
}

/// Small limits, so that every input finishes quickly.
pub fn config() -> MethodConfig {
    MethodConfig {
        instruction_budget: 10_000,
        max_planned_bytes: 64 << 20,
        max_values: 100_000,
    }
}

/// The runtime programs are loaded with, picked by `selector` (a byte of the input): [`kernels`]
/// with load-time preparation (packed weights, fusion), or, 1 in 8 ([`options`]), without it
/// (the portable kernels' plain paths). Default backends, limits and engines otherwise.
pub fn runtime(selector: u8) -> &'static Runtime {
    static PREPARED: OnceLock<Runtime> = OnceLock::new();
    static UNPREPARED: OnceLock<Runtime> = OnceLock::new();
    let (cell, prepare) = match selector % 8 {
        1 => (&UNPREPARED, false),
        _ => (&PREPARED, true),
    };
    cell.get_or_init(|| {
        Runtime::builder()
            .kernels(kernels().clone())
            .config(config())
            .threads(1)
            .prepare(prepare)
            .engine(EngineOptions::new().fuse(fuse_policy()))
            .build()
            .expect("runtime")
    })
}

/// The engine's fusion policy for a fuzzing session: `PTERON_XNNPACK_FUSE=all` fuses chains
/// at any map size (so that small hostile graphs reach them), `0` fuses none.
fn fuse_policy() -> FusePolicy {
    match std::env::var("PTERON_XNNPACK_FUSE").as_deref() {
        Ok("all") => FusePolicy::All,
        Ok("0") => FusePolicy::Off,
        _ => FusePolicy::Default,
    }
}

/// Verifies `file` as a program loaded with [`runtime`]`(selector)`.
pub fn load<'a>(
    file: &'a pteron::ProgramFile,
    selector: u8,
) -> pteron::Result<pteron::Program<'a>> {
    runtime(selector).load_program(file)
}

/// How methods are loaded, picked by `selector` (a byte of the input): mostly on the calling
/// thread with load-time preparation (packed weights, fusion); 1 in 8 without preparation (the
/// portable kernels' plain paths: [`runtime`]); 1 in 8 with a pool of 2 threads shared by all
/// inputs.
pub fn options(selector: u8) -> MethodOptions {
    static POOL: OnceLock<Arc<ThreadPool>> = OnceLock::new();
    let o = MethodOptions::from(config()).threads(1);
    match selector % 8 {
        0 => o.pool(
            POOL.get_or_init(|| Arc::new(ThreadPool::new(2).expect("thread pool")))
                .clone(),
        ),
        _ => o,
    }
}

// ------------------------------------------------------------------------------------------
// Targets

/// How far an input got (for the smoke test's statistics; the fuzzers ignore it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The file was rejected.
    Rejected,
    /// The file parsed, but no method loaded.
    Parsed,
    /// A method loaded, but no execution succeeded.
    Loaded,
    /// An execution succeeded.
    Ran,
}

fn run_all(program: &pteron::Program<'_>, selector: u8, choices: &[u8]) -> Outcome {
    let mut best = Outcome::Parsed;
    for name in program.method_names() {
        if let Ok(mut m) = program.load_method_with(name, options(selector)) {
            best = best.max(run(&mut m, choices));
        }
    }
    best
}

/// `load_program`: parse, walk the checked accessors, load every method, run it on zeros.
pub fn load_program(data: &[u8]) -> Outcome {
    let file = pteron::ProgramFile::from_bytes(data);
    let selector = data.last().copied().unwrap_or(2);
    let Ok(program) = load(&file, selector) else {
        return Outcome::Rejected;
    };
    walk_format(program.format());
    run_all(&program, selector, &[])
}

/// `load_ptd`: parse a `.ptd`, read every key, serve it as external_weights' external data.
pub fn load_ptd(data: &[u8]) -> Outcome {
    static PROGRAM: OnceLock<Vec<u8>> = OnceLock::new();
    let file = pteron::ProgramFile::from_bytes(data);
    let Ok(ptd) = file.data_file() else {
        return Outcome::Rejected;
    };
    for k in ptd.keys() {
        let _ = ptd.get(k);
        let _ = ptd.layout(k);
    }
    let _ = ptd.get("no such key");
    let pte_bytes = PROGRAM.get_or_init(|| {
        std::fs::read(testdata().join("models/external_weights/model.pte"))
            .expect("external_weights fixture")
    });
    let pte = pteron::ProgramFile::from_bytes(pte_bytes);
    let selector = data.last().copied().unwrap_or(2);
    let program = load(&pte, selector)
        .expect("fixture parses")
        .with_external_data(ptd);
    run_all(&program, selector, &[])
}

/// `load_method_execute`: a program and input bytes ([`split_lme`]); loads every method and
/// runs it twice on inputs those bytes choose.
pub fn load_method_execute(data: &[u8]) -> Outcome {
    let (inputs, pte) = split_lme(data);
    let file = pteron::ProgramFile::from_bytes(pte);
    let selector = inputs.last().copied().unwrap_or(2);
    let Ok(program) = load(&file, selector) else {
        return Outcome::Rejected;
    };
    run_all(&program, selector, inputs)
}

/// `xnnpack_payload`: the same body as [`load_method_execute`] (every method loaded with the
/// default backends, XNNPACK included, and run twice); the inputs differ, made by
/// `xnn_mutate::mutate_input` from the XNNPACK fixtures ([`xnn_fixtures`]).
pub fn xnnpack_payload(data: &[u8]) -> Outcome {
    load_method_execute(data)
}

/// The fixtures with XNNPACK delegates, up to `max` bytes.
pub fn xnn_fixtures(max: usize) -> Vec<(&'static String, &'static Vec<u8>)> {
    fixtures()
        .iter()
        .filter(|(n, b)| {
            (n.starts_with("xnnpack/") || n.starts_with("security/xnnpack")) && b.len() <= max
        })
        .collect()
}

/// `execute_inputs`: a fixture named by path ([`split_ei`]), run on inputs the rest chooses.
pub fn execute_inputs(data: &[u8]) -> Outcome {
    let Some((name, inputs)) = split_ei(data) else {
        return Outcome::Rejected;
    };
    let Some(pte) = fixtures().get(name) else {
        return Outcome::Rejected;
    };
    let file = pteron::ProgramFile::from_bytes(pte);
    let selector = inputs.last().copied().unwrap_or(2);
    let program = load(&file, selector).expect("fixture parses");
    run_all(&program, selector, inputs)
}

/// Touches every checked accessor of a verified program.
pub fn walk_format(p: &pteron_format::Program<'_>) {
    // pteron's verifier accepted the flatbuffer: flatc's own must too (the generated accessors
    // rely on its checks).
    let bytes = p.bytes();
    let size = p.header().map_or(bytes.len(), |h| h.program_size as usize);
    let opts = flatbuffers::VerifierOptions {
        max_tables: 10_000_000,
        ..Default::default()
    };
    assert!(
        pteron_format::schema::root_as_program_with_opts(&opts, &bytes[..size]).is_ok(),
        "pteron accepted a flatbuffer that flatc's verifier refuses"
    );
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

// ------------------------------------------------------------------------------------------
// Input formats

/// `load_method_execute`'s input: (input bytes, program).
pub fn split_lme(data: &[u8]) -> (&[u8], &[u8]) {
    if data.len() < 2 {
        return (&[], data);
    }
    let n = (u16::from_le_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
    (&data[2..2 + n], &data[2 + n..])
}

pub fn join_lme(inputs: &[u8], pte: &[u8]) -> Vec<u8> {
    let n = inputs.len().min(u16::MAX as usize);
    let mut v = Vec::with_capacity(2 + n + pte.len());
    v.extend_from_slice(&(n as u16).to_le_bytes());
    v.extend_from_slice(&inputs[..n]);
    v.extend_from_slice(pte);
    v
}

/// `execute_inputs`' input: (fixture path, input bytes).
pub fn split_ei(data: &[u8]) -> Option<(&str, &[u8])> {
    let n = *data.first()? as usize;
    let name = std::str::from_utf8(data.get(1..1 + n)?).ok()?;
    Some((name, &data[1 + n..]))
}

pub fn join_ei(name: &str, inputs: &[u8]) -> Vec<u8> {
    assert!(name.len() < 256, "fixture path too long: {name}");
    let mut v = vec![name.len() as u8];
    v.extend_from_slice(name.as_bytes());
    v.extend_from_slice(inputs);
    v
}

// ------------------------------------------------------------------------------------------
// Running a method on chosen inputs

/// Reads bytes that choose inputs: in order, then cycling; zeros if there are none.
struct Choices<'a> {
    b: &'a [u8],
    i: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        if self.b.is_empty() {
            return 0;
        }
        let v = self.b[self.i % self.b.len()];
        self.i = self.i.wrapping_add(1);
        v
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
}

/// One element value: mostly ordinary numbers, with the boundary cases kernels must survive
/// (indices out of range and negative, NaN, infinities, extremes, subnormals).
fn element(c: &mut Choices<'_>, mode: u8) -> (Option<i64>, f64) {
    let b = c.byte();
    match mode {
        // Small integers around zero: valid and invalid indices, dims, counts.
        0 => (Some(b as i8 as i64 / 4), (b as i8) as f64 / 8.0),
        // Ordinary floats and ints.
        1 => {
            let v = c.u16() as i16;
            (Some(v as i64), v as f64 / 256.0)
        }
        // Extremes.
        _ => match b % 16 {
            0 => (Some(0), 0.0),
            1 => (Some(-1), -0.0),
            2 => (Some(i64::MAX), f64::NAN),
            3 => (Some(i64::MIN), f64::INFINITY),
            4 => (Some(i32::MAX as i64), f64::NEG_INFINITY),
            5 => (Some(i32::MIN as i64), f64::MAX),
            6 => (Some(1 << 31), f64::MIN),
            7 => (Some(-(1 << 31) - 1), f64::MIN_POSITIVE / 2.0),
            8 => (Some(255), 1e-45),
            9 => (Some(65_536), 65_504.0),
            10 => (Some(1 << 40), 1e39),
            11 => (Some(-(1 << 40)), -1e39),
            12 => (Some(1000), 1.0),
            13 => (Some(-1000), -1.0),
            14 => (Some(2), 0.5),
            _ => (Some(1), 3.0e38),
        },
    }
}

fn encode<T: Element>(c: &mut Choices<'_>, mode: u8, numel: usize, out: &mut Vec<u8>) {
    for _ in 0..numel {
        let (i, f) = element(c, mode);
        let is_float = matches!(
            T::DTYPE,
            ScalarType::Half | ScalarType::Float | ScalarType::Double | ScalarType::BFloat16
        );
        let v = match i {
            Some(i) if !is_float || c.byte() & 1 == 0 => T::from_i64(i),
            _ => T::from_f64(f),
        };
        out.extend_from_slice(bytemuck::bytes_of(&v));
    }
}

/// Input `i`'s tensor bytes and sizes, chosen by `c`.
fn tensor_input(c: &mut Choices<'_>, spec: &pteron_core::Tensor<'_>) -> (Vec<usize>, Vec<u8>) {
    let h = c.byte();
    let bound = spec.info.sizes();
    let mut sizes: Vec<usize> = bound.to_vec();
    if spec.dynamism == Dynamism::Bounded {
        for s in sizes.iter_mut() {
            let d = c.byte();
            if d >= 128 {
                *s = d as usize % (*s + 1);
            }
        }
    }
    if h >= 0xF8 && !sizes.is_empty() {
        // A shape the method must refuse.
        let k = h as usize % sizes.len();
        sizes[k] += 1;
    }
    let dtype = spec.info.dtype();
    let numel = sizes
        .iter()
        .try_fold(1usize, |a, &s| a.checked_mul(s))
        .unwrap_or(0);
    let nbytes = numel.saturating_mul(dtype.elem_size());
    if nbytes > 64 << 20 {
        return (sizes, Vec::new());
    }
    let mut data = Vec::with_capacity(nbytes);
    match h % 4 {
        // Raw bytes: any bit pattern (bool bytes other than 0/1, NaN payloads).
        3 => data.extend((0..nbytes).map(|_| c.byte())),
        mode => {
            pteron_core::dispatch_dtype!(dtype, T => encode::<T>(c, mode, numel, &mut data),
                _ => data.extend((0..nbytes).map(|_| c.byte())))
        }
    }
    (sizes, data)
}

/// Sets every input from `choices`, executes twice, and reads every output. Errors are
/// expected; a panic is what the fuzzer looks for.
pub fn run(m: &mut Method<'_>, choices: &[u8]) -> Outcome {
    let mut c = Choices { b: choices, i: 0 };
    let mut outcome = Outcome::Loaded;
    for _ in 0..2 {
        for i in 0..m.num_inputs() {
            match m.input_spec(i).copied() {
                Some(Value::Tensor(t)) => {
                    let (sizes, data) = tensor_input(&mut c, &t);
                    let _ = m.set_input_tensor(i, t.info.dtype(), &sizes, &data);
                }
                Some(v) => {
                    let v = match (v, c.byte() % 4) {
                        (v, 0) => v,
                        (Value::Int(_), k) => {
                            Value::Int(element(&mut c, k - 1).0.unwrap_or_default())
                        }
                        (Value::Double(_), k) => Value::Double(element(&mut c, k - 1).1),
                        (Value::Bool(b), _) => Value::Bool(!b),
                        (v, _) => v,
                    };
                    let _ = m.set_input_value(i, v);
                }
                None => {}
            }
        }
        if m.execute().is_err() {
            return outcome;
        }
        outcome = Outcome::Ran;
        for i in 0..m.num_outputs() {
            if let Ok(Output::Tensor(t)) = m.output(i) {
                assert_eq!(
                    t.bytes.len(),
                    t.info.nbytes(),
                    "output {i}'s bytes must match its sizes"
                );
            }
        }
    }
    outcome
}

// ------------------------------------------------------------------------------------------
// Structure-aware mutators

/// A mutant of a `load_method_execute` input: the input bytes or the program changed. The
/// program is changed field by field when it unpacks (most of the time), byte by byte
/// otherwise; `None` when nothing useful was done (the caller then falls back to libFuzzer's
/// own byte mutations).
pub fn mutate_lme(data: &[u8], seed: u64, max_size: usize) -> Option<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let (inputs, pte) = split_lme(data);
    let out = match rng.below(8) {
        0 => {
            let mut inputs = inputs.to_vec();
            match rng.below(3) {
                0 if inputs.len() < 4096 => inputs.push(rng.next() as u8),
                1 if !inputs.is_empty() => {
                    let k = rng.below(inputs.len());
                    inputs[k] = rng.next() as u8;
                }
                _ => inputs = mutate::mutate(&inputs, inputs.len(), &mut rng),
            }
            join_lme(&inputs, pte)
        }
        1 => {
            let hot = mutate::checked_program_size(pte).unwrap_or(pte.len());
            join_lme(inputs, &mutate::mutate(pte, hot, &mut rng))
        }
        _ => {
            let (mut p, segments) = mutate::try_unpack(pte)?;
            mutate::semantic_mutate_with(&mut p, &mut rng, op_names());
            join_lme(inputs, &mutate::pack(&p, segments))
        }
    };
    (out.len() <= max_size).then_some(out)
}

/// A mutant of an `execute_inputs` input: another fixture, or changed input bytes.
pub fn mutate_ei(data: &[u8], seed: u64, max_size: usize) -> Option<Vec<u8>> {
    let mut rng = Rng::new(seed);
    let names: Vec<&String> = fixtures().keys().collect();
    let (name, inputs) = match split_ei(data) {
        Some((n, i)) if fixtures().contains_key(n) => (n.to_string(), i.to_vec()),
        _ => (names[rng.below(names.len())].clone(), Vec::new()),
    };
    let (name, mut inputs) = if rng.below(16) == 0 {
        (names[rng.below(names.len())].clone(), inputs)
    } else {
        (name, inputs)
    };
    match rng.below(4) {
        0 if inputs.len() < 4096 => {
            let k = rng.below(inputs.len() + 1);
            inputs.insert(k, rng.next() as u8);
        }
        1 if !inputs.is_empty() => {
            let k = rng.below(inputs.len());
            inputs[k] = rng.next() as u8;
        }
        _ => inputs = mutate::mutate(&inputs, inputs.len(), &mut rng),
    }
    let out = join_ei(&name, &inputs);
    (out.len() <= max_size).then_some(out)
}
