//! The op conformance suite (tests/ops.rs) on the default kernels: the portable ones with the
//! fast CPU kernels (`pteron-kernels-cpu`) registered over them.
//!
//! tests/ops.rs runs the portable kernels unless `PTERON_OPS_KERNELS=default`. This binary
//! includes that runner as a module and runs its test again in a child process of itself with
//! the variable set, so that `cargo test` checks both kernel libraries against ExecuTorch.

#[path = "ops.rs"]
mod ops;

#[test]
fn op_conformance_default_kernels() {
    if std::env::var_os("PTERON_OPS_KERNELS").is_some() {
        // Already the child (or a run that chose its kernels): the included test does the work.
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "ops::op_conformance",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PTERON_OPS_KERNELS", "default")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "conformance on the default kernels failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
