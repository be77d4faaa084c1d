//! Helpers around the fuzz targets (runs on stable: `cargo run --release --example tool -- ...` in
//! fuzz/):
//!
//! * `seeds <corpus-dir> [max-bytes]`: seed corpora for every target from testdata/
//!   (`<corpus-dir>/<target>/…`), fixtures up to max-bytes (default 400 000);
//! * `mutants <out-dir> <n> [seed]`: n structure-aware mutants of the fixtures under
//!   testdata/models and testdata/ops as `.pte` files, for `differential.py`;
//! * `replay <target> <file-or-dir>...`: runs inputs through a target's body (no libFuzzer).

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
#[path = "../../crates/pteron/tests/support/program_object_api.rs"]
mod objapi;
#[path = "../../crates/pteron/tests/support/harness.rs"]
mod harness;
#[path = "../../crates/pteron/tests/support/mutate.rs"]
mod mutate;

use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name.replace('/', "__")), bytes).unwrap();
}

fn seeds(out: &Path, max: usize) {
    let mut n = 0;
    for (name, pte) in harness::fixtures() {
        if pte.len() > max {
            continue;
        }
        write(&out.join("load_program"), name, pte);
        write(
            &out.join("load_method_execute"),
            name,
            &harness::join_lme(&[], pte),
        );
        write(
            &out.join("execute_inputs"),
            name,
            &harness::join_ei(name, &[]),
        );
        n += 1;
    }
    let ptd = harness::testdata().join("models/external_weights/model.ptd");
    write(
        &out.join("load_ptd"),
        "external_weights.ptd",
        &std::fs::read(ptd).unwrap(),
    );
    eprintln!("{n} fixtures written to each of {}/<target>", out.display());
}

fn mutants(out: &Path, n: usize, seed: u64) {
    let fixtures: Vec<(&String, &Vec<u8>)> = harness::fixtures()
        .iter()
        .filter(|(_, b)| b.len() < 400_000)
        .collect();
    std::fs::create_dir_all(out).unwrap();
    let mut rng = mutate::Rng::new(seed);
    let mut written = 0;
    while written < n {
        let (name, pte) = fixtures[rng.below(fixtures.len())];
        let Some((mut p, segments)) = mutate::try_unpack(pte) else {
            continue;
        };
        mutate::semantic_mutate_with(&mut p, &mut rng, &[]);
        let b = mutate::pack(&p, segments);
        let file = format!("{written:05}__{}", name.replace('/', "__"));
        std::fs::write(out.join(file), b).unwrap();
        written += 1;
    }
    eprintln!("{n} mutants written to {}", out.display());
}

fn replay(target: &str, paths: &[String]) {
    let f: fn(&[u8]) -> harness::Outcome = match target {
        "load_program" => harness::load_program,
        "load_ptd" => harness::load_ptd,
        "load_method_execute" => harness::load_method_execute,
        "execute_inputs" => harness::execute_inputs,
        _ => panic!("unknown target {target}"),
    };
    let mut files: Vec<PathBuf> = Vec::new();
    for p in paths {
        let p = PathBuf::from(p);
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().flatten().map(|e| e.path()));
        } else {
            files.push(p);
        }
    }
    files.sort();
    for (i, p) in files.iter().enumerate() {
        eprintln!("[{i}] {}", p.display());
        f(&std::fs::read(p).unwrap());
    }
    eprintln!("{} inputs replayed", files.len());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("seeds") if args.len() >= 2 => seeds(
            Path::new(&args[1]),
            args.get(2).map_or(400_000, |s| s.parse().unwrap()),
        ),
        Some("mutants") if args.len() >= 3 => mutants(
            Path::new(&args[1]),
            args[2].parse().unwrap(),
            args.get(3).map_or(1, |s| s.parse().unwrap()),
        ),
        Some("replay") if args.len() >= 3 => replay(&args[1], &args[2..]),
        _ => {
            eprintln!("usage: tool seeds DIR [MAX] | mutants DIR N [SEED] | replay TARGET PATH...");
            std::process::exit(2);
        }
    }
}
