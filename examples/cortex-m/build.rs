//! Writes the board's `memory.x` (from the target: thumbv7em → mps2-an386, thumbv8m.main →
//! mps3-an547) and `cases.rs`, the table of embedded programs: every fixture directory under
//! `PTERON_MCU_FIXTURES` (default `../../testdata/mcu`) named in `PTERON_MCU_ONLY` (a
//! comma-separated list of directory names; all when unset), and `ops.rs`, the `OpSelection` of
//! the operators those programs call (selective build: only their kernels are linked).

use std::collections::BTreeSet;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let target = env::var("TARGET").unwrap();
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());

    // Code in the board's flash; the embedded programs in a large memory QEMU loads the ELF
    // into (read in place, never copied: the stand-in for external flash); the heap (arenas,
    // runtime metadata) in `HEAP`, stack and statics in `RAM`.
    let memory = if target.starts_with("thumbv8m") {
        // mps3-an547 (Cortex-M55), secure aliases: ITCM 512K, DTCM 512K, SRAM 2M, DDR.
        "MEMORY {\n  FLASH : ORIGIN = 0x10000000, LENGTH = 512K\n  RAM : ORIGIN = 0x30000000, LENGTH = 512K\n  HEAP : ORIGIN = 0x11000000, LENGTH = 2M\n  MODELS : ORIGIN = 0x70000000, LENGTH = 16M\n}\n"
    } else {
        // mps2-an386 (Cortex-M4): SSRAM1 4M as flash, SSRAM2/3 4M, PSRAM 16M.
        "MEMORY {\n  FLASH : ORIGIN = 0x00000000, LENGTH = 4M\n  RAM : ORIGIN = 0x20000000, LENGTH = 1M\n  HEAP : ORIGIN = 0x20100000, LENGTH = 3M\n  MODELS : ORIGIN = 0x21000000, LENGTH = 16M\n}\n"
    };
    let sections = "SECTIONS {\n  .models : ALIGN(64) { KEEP(*(.models .models.*)) } > MODELS\n  .heap (NOLOAD) : ALIGN(8) { *(.heap .heap.*) } > HEAP\n} INSERT AFTER .rodata;\n";
    fs::write(out.join("memory.x"), format!("{memory}{sections}")).unwrap();
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo::rustc-check-cfg=cfg(board, values(\"an386\", \"an547\"))");
    let board = if target.starts_with("thumbv8m") {
        "an547"
    } else {
        "an386"
    };
    println!("cargo:rustc-cfg=board=\"{board}\"");
    println!("cargo:rerun-if-changed=build.rs");

    let fixtures = env::var("PTERON_MCU_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|_| manifest.join("../../testdata/mcu"));
    println!("cargo:rerun-if-env-changed=PTERON_MCU_FIXTURES");
    println!("cargo:rerun-if-env-changed=PTERON_MCU_ONLY");
    println!("cargo:rerun-if-changed={}", fixtures.display());
    let only: Vec<String> = env::var("PTERON_MCU_ONLY")
        .map(|s| {
            s.split(',')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let mut dirs: Vec<PathBuf> = fs::read_dir(&fixtures)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("model.pte").is_file())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    let mut ops = BTreeSet::new();
    let mut cases = String::new();
    let mut table = String::from("static CASES: &[Case] = &[\n");
    for (i, d) in dirs.iter().enumerate() {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        if !only.is_empty() && !only.iter().any(|o| *o == name) {
            continue;
        }
        let meta = fs::read_to_string(d.join("meta.json")).unwrap();
        let shape = |key: &str| -> String {
            let at = meta
                .find(key)
                .unwrap_or_else(|| panic!("{key} missing in {name}"));
            let rest = &meta[at..];
            let (a, b) = (rest.find('[').unwrap(), rest.find(']').unwrap());
            rest[a + 1..b]
                .split(',')
                .map(|s| s.trim())
                .collect::<Vec<_>>()
                .join(", ")
        };
        for f in ["model.pte", "input0.bin", "expected0.bin"] {
            println!("cargo:rerun-if-changed={}", d.join(f).display());
        }
        let bytes = fs::read(d.join("model.pte")).unwrap();
        let program =
            pteron_format::Program::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        for plan in program.plans() {
            ops.extend(
                plan.operators()
                    .into_iter()
                    .flatten()
                    .map(|o| pteron_format::operator_name(&o)),
            );
        }
        let p = |f: &str| d.join(f).display().to_string();
        writeln!(
            cases,
            "#[link_section = \".models\"] static PROGRAM_{i}: Aligned<[u8; {n}]> = Aligned(*include_bytes!({pte:?}));\n\
             #[link_section = \".models\"] static INPUT_{i}: Aligned<[u8; {ni}]> = Aligned(*include_bytes!({inp:?}));\n\
             #[link_section = \".models\"] static EXPECTED_{i}: Aligned<[u8; {ne}]> = Aligned(*include_bytes!({exp:?}));",
            n = fs::metadata(d.join("model.pte")).unwrap().len(),
            ni = fs::metadata(d.join("input0.bin")).unwrap().len(),
            ne = fs::metadata(d.join("expected0.bin")).unwrap().len(),
            pte = p("model.pte"),
            inp = p("input0.bin"),
            exp = p("expected0.bin"),
        )
        .unwrap();
        writeln!(
            table,
            "    Case {{ name: {name:?}, program: &PROGRAM_{i}.0, input: &INPUT_{i}.0, expected: &EXPECTED_{i}.0, input_shape: &[{}], quantized: {} }},",
            shape("\"input_shape\""),
            !name.ends_with("_fp32"),
        )
        .unwrap();
    }
    table.push_str("];\n");
    fs::write(out.join("cases.rs"), format!("{cases}\n{table}")).unwrap();
    let mut selection = String::from(
        "/// The operators the embedded programs call.\npub struct ProgramOps;\n\
         impl pteron_core::OpSelection for ProgramOps {\n    \
         const OPS: Option<&'static [&'static str]> = Some(&[\n",
    );
    for op in &ops {
        writeln!(selection, "        {op:?},").unwrap();
    }
    selection.push_str("    ]);\n}\n");
    fs::write(out.join("ops.rs"), selection).unwrap();
}
