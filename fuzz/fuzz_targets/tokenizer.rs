//! Tokenizer files and chat templates (pteron-llm): `[mode][n: u16][n bytes][rest]`, see
//! `crates/pteron-llm/tests/support/tokenizer_harness.rs`. The custom mutator edits
//! `tokenizer.json` / `tokenizer_config.json` documents node by node (numbers, strings,
//! lists, keys, component types, grafted subtrees) and templates tag by tag.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/pteron-llm/tests/support/tokenizer_harness.rs"]
mod harness;

libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    if seed % 8 != 7 {
        if let Some(m) = harness::mutate(&data[..size], seed as u64, max_size) {
            data[..m.len()].copy_from_slice(&m);
            return m.len();
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
});

fuzz_target!(
    // libfuzzer-sys's panic hook aborts even inside catch_unwind; pteron-llm contains the
    // `tokenizers` crate's panics (turning them into errors), so restore the default hook.
    // A panic that escapes still aborts: the fuzz target catches it and calls abort().
    init: {
        let _ = std::panic::take_hook();
    },
    |data: &[u8]| {
        harness::run(data);
    }
);
