//! Valid programs (every fixture under testdata/models and testdata/ops), fuzzed inputs:
//! `[n: u8][n bytes: fixture path][input-choice bytes]`. Kernels must not panic on any input
//! values or on any shape the method accepts (indices out of range, NaN, extremes).
#![no_main]

use libfuzzer_sys::fuzz_target;

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

libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    if seed % 4 != 3 {
        if let Some(m) = harness::mutate_ei(&data[..size], seed as u64, max_size) {
            data[..m.len()].copy_from_slice(&m);
            return m.len();
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
});

fuzz_target!(|data: &[u8]| {
    harness::execute_inputs(data);
});
