//! The microcontroller fixtures (`testdata/mcu`, `testdata/mcu_ops`: ExecuTorch's MLPerf Tiny models, portable
//! fp32, int8 `quantized_decomposed`, and int8 by the Cortex-M backend) run through the crates
//! a firmware links — pteron-format, pteron-core, the portable kernels and these Cortex-M
//! kernels, nothing else. CI runs it with and without the `std` feature
//! (`--no-default-features`), the latter being the build the Cortex-M firmware
//! (`examples/cortex-m`) uses. Goldens: ExecuTorch's runtime, and for the Cortex-M programs
//! (which that runtime cannot run) the backend's reference operators.

use std::fs;
use std::path::{Path, PathBuf};

use pteron_core::{
    DataSources, Error, KernelRegistry, LoadOptions, Method, MethodConfig, Output, Program,
    ScalarType,
};

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

/// How a fixture's planned memory is given.
#[derive(Clone, Copy, PartialEq)]
enum Arenas {
    Allocated,
    /// Carved from a region of exactly `Method::memory_needs` bytes, filled with garbage first.
    Lent,
}

/// Runs every fixture of `testdata/<dir>`: fp32 within 1e-5 of the golden's largest
/// magnitude, int8 programs bit-exact. Returns how many ran.
fn run_all(dir: &str, arenas: Arenas) -> usize {
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
        let config = MethodConfig::default();
        let src = DataSources::program(program);
        let needs = Method::memory_needs(src, "forward", &config).unwrap();
        let mut region = vec![0xa5u8; needs.region_bytes];
        let mut method = match arenas {
            Arenas::Allocated => Method::load(&program, "forward", &registry, config),
            Arenas::Lent => {
                let options = LoadOptions::from(config);
                Method::load_in(src, "forward", &registry, options, &mut region)
            }
        }
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            method.planned_bytes(),
            needs.arenas.iter().sum::<usize>(),
            "{name}"
        );
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
        run_all("mcu", Arenas::Allocated),
        14,
        "four models in three variants, two in a fourth"
    );
}

/// The same with the planned memory lent by the caller (`Method::load_in`, as firmware
/// without a heap for activations does), sized by `Method::memory_needs`.
#[test]
fn lent_memory_gives_the_same_outputs() {
    assert_eq!(run_all("mcu", Arenas::Lent), 14);
}

/// A region short of what `memory_needs` reports is refused, naming the bytes needed.
#[test]
fn lent_memory_too_small_is_refused() {
    let path = fixtures("mcu")[0].join("model.pte");
    let config = MethodConfig::default();
    let needs = {
        let bytes = fs::read(&path).unwrap();
        let src = DataSources::program(Program::parse(&bytes).unwrap());
        Method::memory_needs(src, "forward", &config).unwrap()
    };
    assert!(needs.arenas.iter().sum::<usize>() > 0);
    // A 64-byte aligned region needs each arena at the next aligned offset, nothing more.
    let exact = needs.arenas.iter().fold(0usize, |end, &s| match s {
        0 => end,
        s => end.next_multiple_of(64) + s,
    });
    assert!(exact <= needs.region_bytes);
    // Regions first: they outlive the program bytes the methods borrow.
    let mut buffer = vec![0u8; needs.region_bytes + 64];
    let mut short = vec![0u8; exact - 1];
    let bytes = fs::read(&path).unwrap();
    let src = DataSources::program(Program::parse(&bytes).unwrap());
    let start = (buffer.as_ptr() as usize).wrapping_neg() % 64;
    let (fits, _) = buffer[start..].split_at_mut(exact);
    let mut registry = KernelRegistry::new();
    pteron_kernels::register_all(&mut registry);
    pteron_kernels_mcu::register_all(&mut registry);
    assert!(Method::load_in(src, "forward", &registry, config.into(), fits).is_ok());
    // Whatever its alignment, a region a byte short of the aligned need cannot fit.
    match Method::load_in(src, "forward", &registry, config.into(), &mut short) {
        Err(Error::ResourceLimit {
            what,
            requested,
            limit,
        }) => {
            assert_eq!(what, "bytes of lent memory");
            assert_eq!(requested, needs.region_bytes as u64);
            assert_eq!(limit, (exact - 1) as u64);
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("loaded in {} bytes, needs {exact}", exact - 1),
    };
}

/// Single-operator programs lowered by the Cortex-M backend (strides, depth multipliers,
/// asymmetric padding, ceil-mode pooling, batched linear rows, residual adds, both targets).
#[test]
fn cortex_m_operator_cases_match_the_reference() {
    assert_eq!(run_all("mcu_ops", Arenas::Allocated), 21);
}
