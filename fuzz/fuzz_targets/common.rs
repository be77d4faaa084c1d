//! Shared by the fuzz targets: limits small enough that every input finishes quickly, and a
//! run of one method on synthetic inputs (mirrors crates/pteron/tests/malformed.rs).

use std::sync::OnceLock;

use pteron::core::{KernelRegistry, Method, Output, Value};
use pteron::MethodConfig;

pub fn kernels() -> &'static KernelRegistry {
    static K: OnceLock<KernelRegistry> = OnceLock::new();
    K.get_or_init(pteron::default_kernels)
}

pub fn config() -> MethodConfig {
    MethodConfig {
        instruction_budget: 10_000,
        max_planned_bytes: 64 << 20,
        max_values: 100_000,
    }
}

/// Sets every input (zeros of the declared dtype and upper-bound shape; scalars as declared),
/// executes twice, and reads every output. Errors are fine; panics are what the fuzzer finds.
pub fn run(m: &mut Method<'_>) {
    for _ in 0..2 {
        for i in 0..m.num_inputs() {
            match m.input_spec(i).copied() {
                Some(Value::Tensor(t)) => {
                    let data = vec![0u8; t.info.nbytes()];
                    let _ = m.set_input_tensor(i, t.info.dtype(), t.info.sizes(), &data);
                }
                Some(v) => {
                    let _ = m.set_input_value(i, v);
                }
                None => {}
            }
        }
        if m.execute().is_err() {
            return;
        }
        for i in 0..m.num_outputs() {
            if let Ok(Output::Tensor(t)) = m.output(i) {
                assert_eq!(
                    t.bytes.len(),
                    t.info.nbytes(),
                    "output bytes must match output sizes"
                );
            }
        }
    }
}
