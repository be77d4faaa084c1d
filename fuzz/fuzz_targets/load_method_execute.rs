//! Structure-aware: `[n: u16][n input-choice bytes][.pte]`. The custom mutator unpacks the
//! program with the flatbuffers object API, changes fields (value kinds, tensor sizes, dim
//! orders, dtypes, memory plan, Int/Double values, list items, instruction arguments, inserted
//! Move/Jump/Free calls, operator swaps and renames, plan inputs and outputs, buffer sizes,
//! constant offsets) and packs it again, or changes the input-choice bytes, or mutates bytes.
//! Every method is loaded and run twice on inputs the choice bytes pick (shapes within bounds,
//! NaN, infinities, extremes, out-of-range indices).
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
    if seed % 8 != 7 {
        if let Some(m) = harness::mutate_lme(&data[..size], seed as u64, max_size) {
            data[..m.len()].copy_from_slice(&m);
            return m.len();
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
});

fuzz_target!(|data: &[u8]| {
    harness::load_method_execute(data);
});
