//! The verifier against flatc's own (`flatbuffers::root_with_opts`): the same verdict on real
//! programs and data files, and on thousands of mutations of them.

use std::path::PathBuf;
use std::vec::Vec;

use super::{verify, Schema, WalkLimits};
use crate::generated::flat_tensor_layout::SCHEMA as FLAT_TENSOR;
use crate::generated::program_layout::SCHEMA as PROGRAM;
use crate::{ptd_schema, schema};

fn testdata(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn flatc_accepts(buf: &[u8], ptd: bool, limits: WalkLimits) -> bool {
    let opts = flatbuffers::VerifierOptions {
        max_depth: limits.max_depth,
        max_tables: limits.max_tables,
        max_apparent_size: limits.max_apparent,
        ignore_missing_null_terminator: false,
    };
    if ptd {
        ptd_schema::root_as_flat_tensor_with_opts(&opts, buf).is_ok()
    } else {
        schema::root_as_program_with_opts(&opts, buf).is_ok()
    }
}

/// xorshift64*: deterministic mutations without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `buf`: a byte, a 32-bit offset, a 16-bit vtable entry, or a truncation.
fn mutate(rng: &mut Rng, buf: &mut Vec<u8>) {
    let len = buf.len();
    if len == 0 {
        return;
    }
    match rng.below(5) {
        0 => {
            let at = rng.below(len);
            buf[at] = rng.next() as u8;
        }
        1 | 2 => {
            let at = rng.below(len / 4) * 4;
            let v: u32 = match rng.below(7) {
                0 => 0,
                1 => rng.below(16) as u32,
                2 => rng.below(len) as u32,
                3 => (len - rng.below(16).min(len)) as u32,
                4 => u32::MAX - rng.below(8) as u32,
                5 => 0x8000_0000,
                _ => rng.next() as u32,
            };
            if at + 4 <= len {
                buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        3 => {
            let at = rng.below(len / 2) * 2;
            let v: u16 = match rng.below(5) {
                0 => 0,
                1 => rng.below(64) as u16,
                2 => rng.below(64) as u16 | 1,
                3 => u16::MAX,
                _ => rng.next() as u16,
            };
            if at + 2 <= len {
                buf[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        _ => buf.truncate(rng.below(len)),
    }
}

fn limits_for(rng: &mut Rng, len: usize) -> WalkLimits {
    match rng.below(4) {
        // Tight limits, so that the counting itself is compared.
        0 => WalkLimits {
            max_tables: rng.below(64),
            max_depth: rng.below(6),
            max_apparent: rng.below(len * 2),
        },
        _ => WalkLimits {
            max_tables: 1_000_000,
            max_depth: 64,
            max_apparent: 1 << 31,
        },
    }
}

fn compare(rel: &str, schema: &Schema, ptd: bool, mutations: usize) {
    let original = testdata(rel);
    let defaults = WalkLimits {
        max_tables: 1_000_000,
        max_depth: 64,
        max_apparent: 1 << 31,
    };
    let v = verify(&original, schema, defaults);
    assert!(v.is_ok(), "{rel}: rejected: {v:?}");
    assert!(
        flatc_accepts(&original, ptd, defaults),
        "{rel}: flatc rejects"
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ original.len() as u64);
    let (mut accepted, mut rejected) = (0, 0);
    for i in 0..mutations {
        let mut buf = original.clone();
        for _ in 0..1 + rng.below(3) {
            mutate(&mut rng, &mut buf);
        }
        let limits = limits_for(&mut rng, buf.len());
        let ours = verify(&buf, schema, limits);
        let theirs = flatc_accepts(&buf, ptd, limits);
        assert_eq!(
            ours.is_ok(),
            theirs,
            "{rel}: mutation {i}: ours {ours:?}, flatc accepts: {theirs}"
        );
        if theirs {
            accepted += 1;
        } else {
            rejected += 1;
        }
    }
    // Both verdicts occur often enough for the comparison to mean something.
    assert!(
        accepted > mutations / 20 && rejected > mutations / 20,
        "{rel}: {accepted} accepted, {rejected} rejected"
    );
}

#[test]
fn same_verdict_as_flatc_on_mutated_programs() {
    for rel in [
        "models/mlp/model.pte",
        "models/multi_output/model.pte",
        "models/dynamic_reshape/model.pte",
        "models/mutable_buffer/model.pte",
        "models/external_weights/model.pte",
        "models/lstm/model.pte",
        "xnnpack/mlp_8da4w/model.pte",
        "ops/permute/permute_bool.pte",
    ] {
        compare(rel, &PROGRAM, false, 4000);
    }
}

/// A longer run over more programs (ignored: minutes): `cargo test --release -p pteron-format
/// --lib -- --ignored many_mutations`.
#[test]
#[ignore]
fn many_mutations() {
    for rel in [
        "models/mlp/model.pte",
        "models/bert_tiny/model.pte",
        "models/conformer_tiny/model.pte",
        "models/dynamic_mlp/model.pte",
        "models/llama_tiny/model.pte",
        "models/mutable_buffer/model.pte",
        "models/external_weights/model.pte",
        "xnnpack/mlp_8da4w/model.pte",
        "xnnpack/cnn_int8/model.pte",
        "mcu/ds_cnn_cm/model.pte",
        "mcu_ops/min_max/model.pte",
        "ops/permute/permute_bool.pte",
    ] {
        compare(rel, &PROGRAM, false, 40_000);
    }
    compare(
        "models/external_weights/model.ptd",
        &FLAT_TENSOR,
        true,
        40_000,
    );
}

#[test]
fn same_verdict_as_flatc_on_mutated_data_files() {
    compare(
        "models/external_weights/model.ptd",
        &FLAT_TENSOR,
        true,
        4000,
    );
}

/// Every committed program and data file is accepted by both.
#[test]
fn every_fixture_accepted() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata");
    let mut stack = std::vec![root];
    let mut seen = 0;
    let limits = WalkLimits {
        max_tables: 10_000_000,
        max_depth: 64,
        max_apparent: 1 << 31,
    };
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let ext = path.extension().and_then(|e| e.to_str());
            if path.is_dir() {
                stack.push(path);
            } else if matches!(ext, Some("pte" | "ptd")) && !path.starts_with(root_security()) {
                let buf = std::fs::read(&path).unwrap();
                let (schema, ptd) = if ext == Some("ptd") {
                    (&FLAT_TENSOR, true)
                } else {
                    (&PROGRAM, false)
                };
                let ours = verify(&buf, schema, limits);
                assert_eq!(
                    ours.is_ok(),
                    flatc_accepts(&buf, ptd, limits),
                    "{}: {ours:?}",
                    path.display()
                );
                seen += 1;
            }
        }
    }
    assert!(seen > 1000, "only {seen} files");
}

fn root_security() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/security")
}
