//! The microcontroller fixtures (`testdata/mcu`, `testdata/mcu_ops`: ExecuTorch's MLPerf Tiny models, portable
//! fp32, int8 `quantized_decomposed`, and int8 by the Cortex-M backend) run through the crates
//! a firmware links — pteron-format, pteron-core, the portable kernels and these Cortex-M
//! kernels, nothing else. CI runs it with and without the `std` feature
//! (`--no-default-features`), the latter being the build the Cortex-M firmware
//! (`examples/cortex-m`) uses. Goldens: ExecuTorch's runtime, and for the Cortex-M programs
//! (which that runtime cannot run) the backend's reference operators.

use std::fs;
use std::path::{Path, PathBuf};

use pteron_core::{KernelRegistry, Method, MethodConfig, Output, Program, ScalarType};

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(dir);
    let mut dirs: Vec<PathBuf> = fs::read_dir(&root)
        .expect("testdata/mcu")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("model.pte").is_file())
        .collect();
    dirs.sort();
    dirs
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn input_shape(meta: &str) -> Vec<usize> {
    let at = meta.find("\"input_shape\"").expect("input_shape");
    let rest = &meta[at..];
    let (a, b) = (rest.find('[').unwrap(), rest.find(']').unwrap());
    rest[a + 1..b]
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect()
}

/// Runs every fixture of `testdata/<dir>`: fp32 within 1e-5 of the golden's largest
/// magnitude, int8 programs bit-exact. Returns how many ran.
fn run_all(dir: &str) -> usize {
    let mut registry = KernelRegistry::new();
    pteron_kernels::register_all(&mut registry);
    pteron_kernels_mcu::register_all(&mut registry);
    let dirs = fixtures(dir);
    for d in &dirs {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = fs::read(d.join("model.pte")).unwrap();
        let meta = fs::read_to_string(d.join("meta.json")).unwrap();
        let input = fs::read(d.join("input0.bin")).unwrap();
        let want = floats(&fs::read(d.join("expected0.bin")).unwrap());
        let program = Program::parse(&bytes).unwrap();
        let mut method = Method::load(&program, "forward", &registry, MethodConfig::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        method
            .set_input_tensor(0, ScalarType::Float, &input_shape(&meta), &input)
            .unwrap();
        method.execute().unwrap_or_else(|e| panic!("{name}: {e}"));
        let Output::Tensor(out) = method.output(0).unwrap() else {
            panic!("{name}: not a tensor")
        };
        let got = out.as_slice::<f32>().unwrap();
        assert_eq!(got.len(), want.len(), "{name}");
        let scale = want.iter().fold(0f32, |m, w| m.max(w.abs()));
        let diff = got
            .iter()
            .zip(&want)
            .fold(0f32, |m, (g, w)| m.max((g - w).abs()));
        let limit = if name.ends_with("_fp32") { 1e-5 } else { 0.0 };
        println!("{name}: max|diff| {diff:e}, relative {:e}", diff / scale);
        assert!(
            diff <= limit * scale,
            "{name}: max|diff| {diff} > {limit} × {scale}"
        );
    }
    dirs.len()
}

/// The MLPerf Tiny models: fp32, int8 `quantized_decomposed` (whose fp32 convolutions between
/// quantize/dequantize pairs round as ExecuTorch's do), and int8 by the Cortex-M backend
/// (integer arithmetic end to end).
#[test]
fn mlperf_tiny_programs_match_executorch() {
    assert_eq!(
        run_all("mcu"),
        14,
        "four models in three variants, two in a fourth"
    );
}

/// Single-operator programs lowered by the Cortex-M backend (strides, depth multipliers,
/// asymmetric padding, ceil-mode pooling, batched linear rows, residual adds, both targets).
#[test]
fn cortex_m_operator_cases_match_the_reference() {
    assert_eq!(run_all("mcu_ops"), 11);
}
