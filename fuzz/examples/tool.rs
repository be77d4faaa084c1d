//! Helpers around the fuzz targets (runs on stable: `cargo run --release --example tool -- ...` in
//! fuzz/):
//!
//! * `seeds <corpus-dir> [max-bytes]`: seed corpora for every target from testdata/
//!   (`<corpus-dir>/<target>/…`), fixtures up to max-bytes (default 400 000);
//! * `mutants <out-dir> <n> [seed]`: n structure-aware mutants of the fixtures under
//!   testdata/models and testdata/ops as `.pte` files, for `differential.py`;
//! * `replay <target> <file-or-dir>...`: runs inputs through a target's body (no libFuzzer);
//! * `diff <a.pte> <b.pte>`: what a mutant changed (values, instructions, plan inputs/outputs).

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
#[path = "../../crates/pteron/tests/support/xnnpack_object_api.rs"]
mod xnnobj;
#[path = "../../crates/pteron/tests/support/harness.rs"]
mod harness;
#[path = "../../crates/pteron/tests/support/mutate.rs"]
mod mutate;
#[path = "../../crates/pteron/tests/support/xnn_mutate.rs"]
mod xnn_mutate;

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
        if name.starts_with("xnnpack/") || name.starts_with("security/xnnpack") {
            write(
                &out.join("xnnpack_payload"),
                name,
                &harness::join_lme(&[], pte),
            );
        }
        n += 1;
    }
    let ptd = harness::testdata().join("models/external_weights/model.ptd");
    write(
        &out.join("load_ptd"),
        "external_weights.ptd",
        &std::fs::read(ptd).unwrap(),
    );
    tokenizer_seeds(&out.join("tokenizer"));
    eprintln!("{n} fixtures written to each of {}/<target>", out.display());
}

/// `tokenizer` seeds: `[mode][n: u16][A][B]` (see tokenizer_harness.rs).
fn tokenizer_seeds(dir: &Path) {
    let join = |mode: u8, a: &[u8], b: &[u8]| {
        let mut v = vec![mode];
        v.extend_from_slice(&(a.len() as u16).to_le_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        v
    };
    let td = harness::testdata();
    let text = "Hello wörld 😀 <|im_start|>user\n 12345 e\u{301}".as_bytes();
    let mut jsons = vec![td.join("llm/tiny/tokenizer.json")];
    if let Ok(rd) = std::fs::read_dir(td.join("security/tokenizers")) {
        jsons.extend(rd.flatten().map(|e| e.path()));
    }
    for (i, p) in jsons.iter().enumerate() {
        write(
            dir,
            &format!("tok{i}"),
            &join(0, text, &std::fs::read(p).unwrap()),
        );
    }
    let cfg = std::fs::read(td.join("llm/tiny/tokenizer_config.json")).unwrap();
    write(dir, "config", &join(2, b"hi there", &cfg));
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
        if rng.below(3) == 0 {
            mutate::semantic_mutate_with(&mut p, &mut rng, &[]);
        } else {
            mild_mutate(&mut p, &mut rng);
        }
        let b = mutate::pack(&p, segments);
        let file = format!("{written:05}__{}", name.replace('/', "__"));
        std::fs::write(out.join(file), b).unwrap();
        written += 1;
    }
    eprintln!("{n} mutants written to {}", out.display());
}

/// Edits that keep a program well-formed more often than `semantic_mutate` (for differential
/// testing, where both runtimes should accept many mutants): an Int, Double or Bool value, which
/// Int an IntList item names, the dtype of a non-constant tensor, two tensor arguments of a
/// call swapped.
fn mild_mutate(p: &mut objapi::executorch_flatbuffer::ProgramT, rng: &mut mutate::Rng) {
    use objapi::executorch_flatbuffer as fbo;
    let Some(plan) = p.execution_plan.as_mut().and_then(|e| e.first_mut()) else {
        return;
    };
    let Some(vals) = plan.values.as_mut() else {
        return;
    };
    let n = vals.len();
    let of_kind = |vals: &Vec<fbo::EValueT>, f: &dyn Fn(&fbo::KernelTypesT) -> bool| {
        (0..vals.len())
            .filter(|&i| f(&vals[i].val))
            .collect::<Vec<_>>()
    };
    for _ in 0..1 + rng.below(2) {
        match rng.below(6) {
            0 => {
                let ints = of_kind(vals, &|v| matches!(v, fbo::KernelTypesT::Int(_)));
                if let Some(&i) = ints.get(rng.below(ints.len().max(1))) {
                    if let fbo::KernelTypesT::Int(v) = &mut vals[i].val {
                        let x = v.int_val;
                        v.int_val =
                            [-3, -2, -1, 0, 1, 2, 3, x + 1, x - 1, 2 * x, -x][rng.below(11)];
                    }
                }
            }
            1 => {
                let ds = of_kind(vals, &|v| matches!(v, fbo::KernelTypesT::Double(_)));
                if let Some(&i) = ds.get(rng.below(ds.len().max(1))) {
                    if let fbo::KernelTypesT::Double(v) = &mut vals[i].val {
                        let x = v.double_val;
                        v.double_val = [0.0, -1.0, 0.5, 1e-3, 2.0, -x, 2.0 * x][rng.below(7)];
                    }
                }
            }
            2 => {
                let bs = of_kind(vals, &|v| matches!(v, fbo::KernelTypesT::Bool(_)));
                if let Some(&i) = bs.get(rng.below(bs.len().max(1))) {
                    if let fbo::KernelTypesT::Bool(v) = &mut vals[i].val {
                        v.bool_val = !v.bool_val;
                    }
                }
            }
            3 => {
                let ints = of_kind(vals, &|v| matches!(v, fbo::KernelTypesT::Int(_)));
                let lists = of_kind(vals, &|v| matches!(v, fbo::KernelTypesT::IntList(_)));
                if let (Some(&l), false) =
                    (lists.get(rng.below(lists.len().max(1))), ints.is_empty())
                {
                    if let fbo::KernelTypesT::IntList(l) = &mut vals[l].val {
                        if let Some(items) = l.items.as_mut().filter(|i| !i.is_empty()) {
                            let k = rng.below(items.len());
                            items[k] = ints[rng.below(ints.len())] as i64;
                        }
                    }
                }
            }
            4 => {
                let ts = of_kind(
                    vals,
                    &|v| matches!(v, fbo::KernelTypesT::Tensor(t) if t.data_buffer_idx == 0),
                );
                if let Some(&i) = ts.get(rng.below(ts.len().max(1))) {
                    if let fbo::KernelTypesT::Tensor(t) = &mut vals[i].val {
                        t.scalar_type = fbo::ScalarType([3, 4, 5, 6, 7, 11][rng.below(6)]);
                    }
                }
            }
            _ => {
                let Some(ins) = plan
                    .chains
                    .as_mut()
                    .and_then(|c| c.first_mut())
                    .and_then(|c| c.instructions.as_mut())
                else {
                    return;
                };
                if ins.is_empty() {
                    return;
                }
                let k = rng.below(ins.len());
                if let fbo::InstructionArgumentsT::KernelCall(c) = &mut ins[k].instr_args {
                    if let Some(a) = c.args.as_mut().filter(|a| a.len() > 2) {
                        let (x, y) = (rng.below(a.len() - 1), rng.below(a.len() - 1));
                        let is_t = |i: i32| {
                            (i as usize) < n
                                && matches!(vals[i as usize].val, fbo::KernelTypesT::Tensor(_))
                        };
                        if is_t(a[x]) && is_t(a[y]) {
                            a.swap(x, y);
                        }
                    }
                }
            }
        }
    }
}

fn replay(target: &str, paths: &[String]) {
    let f: fn(&[u8]) -> harness::Outcome = match target {
        "load_program" => harness::load_program,
        "load_ptd" => harness::load_ptd,
        "load_method_execute" => harness::load_method_execute,
        "execute_inputs" => harness::execute_inputs,
        "xnnpack_payload" => harness::xnnpack_payload,
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
        Some("diff") if args.len() == 3 => {
            let a = std::fs::read(&args[1]).unwrap();
            let b = std::fs::read(&args[2]).unwrap();
            let (pa, _) = mutate::try_unpack(&a).expect("first file unpacks");
            let (pb, _) = mutate::try_unpack(&b).expect("second file unpacks");
            mutate::dump_diff(&pa, &pb);
        }
        _ => {
            eprintln!("usage: tool seeds DIR [MAX] | mutants DIR N [SEED] | replay TARGET PATH... | diff A B");
            std::process::exit(2);
        }
    }
}
