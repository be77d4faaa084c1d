//! XNNPACK delegate payloads: `[n: u16][n input-choice bytes][.pte]`, as `load_method_execute`,
//! seeded with the XNNPACK-lowered fixtures. The custom mutator (`xnn_mutate.rs`) changes one
//! delegate payload at a time: an "XH00" header field; a field of the XNNPACK graph, unpacked
//! with the flatbuffers object API (value datatypes, dims, constant indices, external ids,
//! flags, ids; quantization parameters: scales and their count, channel dims, 4-bit block
//! sizes; node ids, parameters, types and clamps; graph inputs/outputs, num_externs; constant
//! offsets, sizes and named keys; named constants moved into the payload's constant region);
//! bytes of the flatbuffer or of the constant region. The program is packed again around the
//! new payload; every method is loaded with the default kernels and backends and run twice.
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

libfuzzer_sys::fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    if seed % 16 != 15 {
        if let Some(m) = xnn_mutate::mutate_input(&data[..size], seed as u64, max_size) {
            data[..m.len()].copy_from_slice(&m);
            return m.len();
        }
    }
    libfuzzer_sys::fuzzer_mutate(data, size, max_size)
});

fuzz_target!(|data: &[u8]| {
    harness::xnnpack_payload(data);
});
