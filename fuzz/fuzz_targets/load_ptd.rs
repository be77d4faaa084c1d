//! A `.ptd` file: parse, read every key, and serve it as the external data of the
//! external_weights fixture, loading and running that program.
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

fuzz_target!(|data: &[u8]| {
    harness::load_ptd(data);
});
