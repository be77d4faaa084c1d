//! A `Program` shared across threads, each thread loading and running its own `Method`.
//!
//! Data-race freedom comes from the types: the program, the file bytes and the kernel registry
//! are immutable and `Send + Sync`; a `Method` owns its values and arenas and is `Send` (it can
//! be loaded on one thread and run on another) and `Sync` (shared references only read). The
//! static assertions below fail to compile if a change breaks that. The stress tests then run
//! several threads × many executions and compare every output, bit for bit, with the
//! single-threaded result.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pteron::{
    npy, DataFile, KernelRegistry, Method, Program, ProgramFile, RunMethod, Runtime, Tensor, Value,
};

#[allow(dead_code)]
fn static_assertions() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<ProgramFile>();
    send_sync::<Program<'static>>();
    send_sync::<pteron_format::Program<'static>>();
    send_sync::<DataFile<'static>>();
    send_sync::<KernelRegistry>();
    send_sync::<Runtime>();
    send_sync::<pteron::ThreadPool>();
    send_sync::<pteron::MethodOptions>();
    send_sync::<Method<'static>>();
    send_sync::<Tensor>();
    send_sync::<Value>();
    send_sync::<pteron::Error>();
}

fn models_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models")
}

struct Fixture {
    name: &'static str,
    pte: ProgramFile,
    ptd: Option<ProgramFile>,
    inputs: Vec<Tensor>,
}

fn fixture(name: &'static str) -> Fixture {
    let dir = models_dir().join(name);
    let pte = ProgramFile::read(dir.join("model.pte")).unwrap();
    let ptd = dir
        .join("model.ptd")
        .exists()
        .then(|| ProgramFile::read(dir.join("model.ptd")).unwrap());
    let mut inputs = Vec::new();
    while let Ok(t) = npy::read(dir.join(format!("input{}.npy", inputs.len()))) {
        inputs.push(t);
    }
    Fixture {
        name,
        pte,
        ptd,
        inputs,
    }
}

fn program<'a>(
    runtime: &Runtime,
    pte: &'a ProgramFile,
    ptd: Option<&'a ProgramFile>,
) -> Program<'a> {
    let p = runtime.load_program(pte).unwrap();
    match ptd {
        Some(d) => p.with_external_data(d.data_file().unwrap()),
        None => p,
    }
}

/// Inputs for execution `k`: the fixture's inputs with float elements scaled by a per-run
/// factor, so that every execution computes something different.
fn inputs_for(f: &Fixture, k: usize) -> Vec<Tensor> {
    f.inputs
        .iter()
        .map(|t| {
            let mut t = t.clone();
            if t.dtype == pteron::ScalarType::Float {
                let scale = 1.0 + k as f32 / 8.0;
                for c in t.data.chunks_exact_mut(4) {
                    let v = f32::from_le_bytes(c.try_into().unwrap()) * scale;
                    c.copy_from_slice(&v.to_le_bytes());
                }
            }
            t
        })
        .collect()
}

/// `runs` executions of a fresh method (state such as mutable buffers carries over from one
/// to the next, as it would for each thread).
fn run_sequence(program: &Program<'_>, f: &Fixture, runs: usize) -> Vec<Vec<Value>> {
    let mut m = program.load_method("forward").unwrap();
    (0..runs)
        .map(|k| {
            m.run(&inputs_for(f, k))
                .unwrap_or_else(|e| panic!("{}: run {k}: {e}", f.name))
        })
        .collect()
}

const FIXTURES: &[&str] = &[
    "mlp",
    "cnn",
    "dynamic_mlp",
    "multi_output",
    "mutable_buffer",
    "external_weights",
    "lstm",
];
const THREADS: usize = 6;
const RUNS: usize = 24;

/// One `Program` and one runtime, borrowed by scoped threads.
#[test]
fn shared_program_scoped_threads() {
    let runtime = Runtime::new();
    for &name in FIXTURES {
        let f = fixture(name);
        let program = program(&runtime, &f.pte, f.ptd.as_ref());
        let expected = run_sequence(&program, &f, RUNS);
        // Different runs really differ (the comparison below would catch mixed-up outputs).
        if f.inputs
            .iter()
            .any(|t| t.dtype == pteron::ScalarType::Float)
        {
            assert_ne!(
                expected[0],
                expected[RUNS - 1],
                "{name}: outputs do not depend on inputs"
            );
        }
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (program, f, expected) = (&program, &f, &expected);
                s.spawn(move || {
                    let got = run_sequence(program, f, RUNS);
                    for (k, (g, e)) in got.iter().zip(expected).enumerate() {
                        assert!(g == e, "{name}: thread {t}, run {k}: outputs differ");
                    }
                });
            }
        });
    }
}

/// `'static` threads holding `Arc`s of the file and clones of the runtime; methods loaded on
/// one thread and moved to another, interleaved with methods of other programs.
#[test]
fn arc_threads_and_moved_methods() {
    let runtime = Runtime::new();
    let fixtures: Vec<Arc<Fixture>> = FIXTURES.iter().map(|n| Arc::new(fixture(n))).collect();
    let expected: Vec<Vec<Vec<Value>>> = fixtures
        .iter()
        .map(|f| run_sequence(&program(&runtime, &f.pte, f.ptd.as_ref()), f, RUNS))
        .collect();
    let expected = Arc::new(expected);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (runtime, fixtures, expected) =
                (runtime.clone(), fixtures.clone(), expected.clone());
            std::thread::spawn(move || {
                // Each thread walks the fixtures in its own order.
                for j in 0..fixtures.len() {
                    let i = (j + t) % fixtures.len();
                    let f = &fixtures[i];
                    let program = program(&runtime, &f.pte, f.ptd.as_ref());
                    let mut m = program.load_method("forward").unwrap();
                    // Half the runs here, the other half on a thread the method is moved to.
                    for k in 0..RUNS / 2 {
                        assert!(m.run(&inputs_for(f, k)).unwrap() == expected[i][k]);
                    }
                    let f2 = f.clone();
                    let exp = expected.clone();
                    std::thread::scope(|s| {
                        s.spawn(move || {
                            for k in RUNS / 2..RUNS {
                                let got = m.run(&inputs_for(&f2, k)).unwrap();
                                assert!(got == exp[i][k], "{}: run {k} after a move", f2.name);
                            }
                        });
                    });
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("worker panicked");
    }
}

/// Methods on several threads sharing one explicit kernel thread pool (each `execute` hands
/// work to the pool while other threads do the same).
#[test]
fn shared_thread_pool() {
    let runtime = Runtime::new();
    let pool = Arc::new(pteron::ThreadPool::new(3).unwrap());
    for name in ["cnn", "mlp", "lstm"] {
        let f = fixture(name);
        let program = program(&runtime, &f.pte, f.ptd.as_ref());
        let expected = run_sequence(&program, &f, RUNS);
        std::thread::scope(|s| {
            for t in 0..4 {
                let (program, f, expected, pool) = (&program, &f, &expected, pool.clone());
                s.spawn(move || {
                    let options = pteron::MethodOptions::new().pool(pool);
                    let mut m = program.load_method_with("forward", options).unwrap();
                    for (k, e) in expected.iter().enumerate() {
                        let got = m.run(&inputs_for(f, k)).unwrap();
                        assert!(&got == e, "{name}: thread {t}, run {k}: outputs differ");
                    }
                });
            }
        });
    }
}

/// Many methods of one program alive at once on one thread: no shared mutable state between
/// them (each has its own arenas).
#[test]
fn interleaved_methods_do_not_share_state() {
    let f = fixture("mutable_buffer");
    let program = program(&Runtime::new(), &f.pte, f.ptd.as_ref());
    let expected = run_sequence(&program, &f, RUNS);
    let mut methods: Vec<Method<'_>> = (0..4)
        .map(|_| program.load_method("forward").unwrap())
        .collect();
    for k in 0..RUNS {
        for m in methods.iter_mut() {
            assert!(m.run(&inputs_for(&f, k)).unwrap() == expected[k], "run {k}");
        }
    }
}
