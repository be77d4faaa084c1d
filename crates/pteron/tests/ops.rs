//! Op conformance suite: every case under testdata/ops (tiny single-op programs exported by
//! tools/export/export_ops.py, goldens from ExecuTorch's own runtime) runs through pteron's
//! default kernels and must match.
//!
//! Tolerance: integer and bool outputs must be equal. Floating outputs pass when every element
//! satisfies |got − expected| ≤ atol + rtol·|expected| (NaN matches NaN, infinities must be
//! equal), with per-dtype defaults (see [`default_tolerance`]) or the looser tolerance a case
//! records in its cases.json.
//!
//! Also checked: `execute` allocates nothing (a counting global allocator, as in no_alloc.rs).
//!
//! The test fails on any wrong number, any load or run error, and any case that pteron does not
//! support at load ("missing kernel", "unsupported dtype") unless it is listed in [`IGNORE`].
//! An ignored case that now passes also fails the test, so the list stays accurate.
//!
//! Run with `cargo test -p pteron --test ops -- --nocapture` to see the report table.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use pteron::{RunMethod, ScalarType, Tensor, Value};

/// Cases allowed not to pass, by case name (as in cases.json), each with the reason.
const IGNORE: &[(&str, &str)] = &[
    (
        "cat_mixed_f32",
        "unsupported: cat.out with inputs of different dtypes (ExecuTorch promotes int64 into a float32 out)",
    ),
    (
        "max_pool2d_i64",
        "unsupported: max_pool2d_with_indices.out on int64 (ExecuTorch's portable kernel takes real dtypes)",
    ),
    (
        "topk_i64",
        "wrong result: indices of tied int64 values come out in a different order than ExecuTorch's \
         (values match; its topk's tie order comes from its partial sort)",
    ),
    (
        "nearest_x2_u8",
        "unsupported: upsample_nearest2d.vec_out on uint8 (ExecuTorch's portable kernel takes it)",
    ),
];

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

// Safety: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if WATCHING.with(|w| w.get()) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // Safety: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn ops_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ops")
}

fn dtype_of(name: &str) -> ScalarType {
    use ScalarType::*;
    match name {
        "float32" => Float,
        "float64" => Double,
        "float16" => Half,
        "bfloat16" => BFloat16,
        "int64" => Long,
        "int32" => Int,
        "int16" => Short,
        "int8" => Char,
        "uint8" => Byte,
        "bool" => Bool,
        other => panic!("unknown dtype {other:?} in cases.json"),
    }
}

/// (atol, rtol) for a floating dtype.
fn default_tolerance(dtype: ScalarType) -> (f64, f64) {
    match dtype {
        ScalarType::Float => (1e-5, 1e-5),
        ScalarType::Double => (1e-10, 1e-10),
        ScalarType::Half => (1e-3, 1e-3),
        ScalarType::BFloat16 => (1e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

fn tensor_at(spec: &serde_json::Value, data: &[u8]) -> Tensor {
    let dtype = dtype_of(spec["dtype"].as_str().unwrap());
    let shape: Vec<usize> = spec["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let off = spec["offset"].as_u64().unwrap() as usize;
    let n = spec["nbytes"].as_u64().unwrap() as usize;
    Tensor::new(dtype, &shape, data[off..off + n].to_vec()).unwrap()
}

/// Checks one output; returns a description of the first mismatch.
fn compare(got: &Tensor, want: &Tensor, tol: Option<(f64, f64)>) -> Result<(), String> {
    if got.dtype != want.dtype {
        return Err(format!("dtype {} (expected {})", got.dtype, want.dtype));
    }
    if got.sizes != want.sizes {
        return Err(format!("shape {:?} (expected {:?})", got.sizes, want.sizes));
    }
    let g = got.to_f64_vec().ok_or("dtype not computable")?;
    let w = want.to_f64_vec().ok_or("dtype not computable")?;
    if !got.dtype.is_floating() {
        return match g.iter().zip(&w).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!("element {i}: {} (expected {})", g[i], w[i])),
        };
    }
    let (mut atol, mut rtol) = default_tolerance(got.dtype);
    if let Some((a, r)) = tol {
        atol = atol.max(a);
        rtol = rtol.max(r);
    }
    for (i, (a, e)) in g.iter().zip(&w).enumerate() {
        let ok = if e.is_nan() || a.is_nan() {
            e.is_nan() && a.is_nan()
        } else if e.is_infinite() || a.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= atol + rtol * e.abs()
        };
        if !ok {
            return Err(format!(
                "element {i}: {a} (expected {e}, atol {atol}, rtol {rtol})"
            ));
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

fn run_case(dir: &Path, case: &serde_json::Value, data: &[u8]) -> Outcome {
    let kernels = pteron::default_kernels();
    let file = match pteron::ProgramFile::open(dir.join(case["pte"].as_str().unwrap())) {
        Ok(f) => f,
        Err(e) => return Outcome::Fail(format!("open: {e}")),
    };
    let program = match file.program() {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("parse: {e}")),
    };
    let mut method = match program.load_method("forward", &kernels) {
        Ok(m) => m,
        Err(e) => {
            use pteron::core::{Error as E, KernelError as K};
            return match &e {
                pteron::Error::Runtime(E::OperatorMissing { .. })
                | pteron::Error::Runtime(E::Kernel {
                    source: K::UnsupportedDType { .. } | K::Unsupported(_),
                    ..
                }) => Outcome::Unsupported(e.to_string()),
                _ => Outcome::Fail(format!("load: {e}")),
            };
        }
    };
    let inputs: Vec<Tensor> = case["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| tensor_at(s, data))
        .collect();
    for (i, t) in inputs.iter().enumerate() {
        if let Err(e) = method.set_input_tensor(i, t.dtype, &t.sizes, &t.data) {
            return Outcome::Fail(format!("input {i}: {e}"));
        }
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    WATCHING.with(|w| w.set(true));
    let result = method.execute();
    WATCHING.with(|w| w.set(false));
    if let Err(e) = result {
        return Outcome::Fail(format!("run: {e}"));
    }
    let allocs = ALLOCATIONS.load(Ordering::Relaxed) - before;
    if allocs != 0 {
        return Outcome::Fail(format!("execute made {allocs} allocations"));
    }
    let outputs = match method.outputs() {
        Ok(o) => o,
        Err(e) => return Outcome::Fail(format!("outputs: {e}")),
    };
    let want = case["outputs"].as_array().unwrap();
    if outputs.len() != want.len() {
        return Outcome::Fail(format!(
            "{} outputs (expected {})",
            outputs.len(),
            want.len()
        ));
    }
    let tol = case
        .get("tolerance")
        .map(|t| (t["atol"].as_f64().unwrap(), t["rtol"].as_f64().unwrap()));
    for (k, (got, spec)) in outputs.iter().zip(want).enumerate() {
        let Value::Tensor(got) = got else {
            return Outcome::Fail(format!("output {k}: not a tensor: {got:?}"));
        };
        if let Err(msg) = compare(got, &tensor_at(spec, data), tol) {
            return Outcome::Fail(format!("output {k}: {msg}"));
        }
    }
    Outcome::Pass
}

#[derive(Default)]
struct Counts {
    pass: usize,
    fail: usize,
    unsupported: usize,
    ignored: usize,
}

#[test]
fn op_conformance() {
    let root = ops_dir();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("cases.json").exists())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no cases under {}", root.display());

    let mut table: BTreeMap<(String, String), Counts> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut seen_ignored = Vec::new();
    let mut total = 0;
    for dir in &dirs {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap())
                .unwrap();
        let op = doc["op"].as_str().unwrap().to_string();
        let data = std::fs::read(dir.join(doc["data"].as_str().unwrap_or("data.bin"))).unwrap();
        for case in doc["cases"].as_array().unwrap() {
            let name = case["name"].as_str().unwrap();
            let dtype = case["dtype"].as_str().unwrap().to_string();
            let counts = table.entry((op.clone(), dtype)).or_default();
            let outcome = run_case(dir, case, &data);
            total += 1;
            let ignored = IGNORE.iter().find(|(n, _)| *n == name);
            if let Some((n, _)) = ignored {
                seen_ignored.push(*n);
                if outcome == Outcome::Pass {
                    problems.push(format!("{op}/{name}: passes now; remove it from IGNORE"));
                    counts.pass += 1;
                } else {
                    counts.ignored += 1;
                }
                continue;
            }
            match outcome {
                Outcome::Pass => counts.pass += 1,
                Outcome::Fail(m) => {
                    counts.fail += 1;
                    problems.push(format!("FAIL {op}/{name}: {m}"));
                }
                Outcome::Unsupported(m) => {
                    counts.unsupported += 1;
                    problems.push(format!("UNSUPPORTED {op}/{name}: {m}"));
                }
            }
        }
    }
    for (n, _) in IGNORE {
        if !seen_ignored.contains(n) {
            problems.push(format!("IGNORE entry {n} names no case"));
        }
    }

    println!(
        "{:<22} {:<9} {:>5} {:>5} {:>6} {:>7}",
        "op", "dtype", "pass", "FAIL", "unsup", "ignored"
    );
    let mut sum = Counts::default();
    for ((op, dtype), c) in &table {
        println!(
            "{op:<22} {dtype:<9} {:>5} {:>5} {:>6} {:>7}",
            c.pass, c.fail, c.unsupported, c.ignored
        );
        sum.pass += c.pass;
        sum.fail += c.fail;
        sum.unsupported += c.unsupported;
        sum.ignored += c.ignored;
    }
    println!(
        "{:<32} {:>5} {:>5} {:>6} {:>7}   ({total} cases, {} ops)",
        "total",
        sum.pass,
        sum.fail,
        sum.unsupported,
        sum.ignored,
        dirs.len()
    );
    for p in &problems {
        println!("{p}");
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}
