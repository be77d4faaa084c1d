//! The op conformance suite (tests/ops.rs) on the default kernels: the portable ones with the
//! fast CPU kernels (`pteron-kernels-cpu`) registered over them.
//!
//! tests/ops.rs runs the portable kernels unless `PTERON_OPS_KERNELS=default`. This binary
//! includes that runner as a module and runs it on the default kernels in-process (no child
//! process: the suite also runs under an emulator that cannot start one), so that `cargo test`
//! checks both kernel libraries against ExecuTorch.

#[path = "ops.rs"]
mod ops;

#[test]
fn op_conformance_default_kernels() {
    ops::run_conformance(pteron::default_kernels());
}
