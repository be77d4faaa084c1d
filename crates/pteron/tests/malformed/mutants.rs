//! Random mutants of every fixture (and of `.npy` files), each parsed, loaded and run under
//! the budget and watchdog.

use super::*;

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
        let runtime = runtime();
        // Budgets from the original program: a little more than it needs.
        let file = ProgramFile::from_bytes(&f.pte);
        let data = f.ptd.as_deref().map(ProgramFile::from_bytes);
        let mut program = runtime.load_program(&file).expect("fixture parses");
        if let Some(d) = &data {
            program = program.with_external_data(d.data_file().unwrap());
        }
        let (instrs, planned) = match program.load_method_with("forward", MethodConfig::default()) {
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
                exercise(&pte, ptd.as_deref(), &inputs, &runtime, config, execute)
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
