//! `pteron ops`: the registered kernels and the dtypes each declares; `pteron ops --for`:
//! the operators programs call, and the selection (Rust source) that links only their kernels.

use std::collections::BTreeSet;
use std::path::PathBuf;

use pteron::Result;

pub fn ops(json: bool, filter: Option<&str>) -> Result<()> {
    let registry = pteron::default_kernels();
    let rows: Vec<(&str, Vec<&'static str>)> = registry
        .iter()
        .filter(|(name, _)| filter.is_none_or(|f| name.contains(f)))
        .map(|(name, k)| (name, k.dtypes.iter().map(|t| t.name()).collect()))
        .collect();
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, dtypes)| serde_json::json!({ "name": name, "dtypes": dtypes }))
            .collect();
        let doc = serde_json::json!({ "count": rows.len(), "kernels": list });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of strings")
        );
        return Ok(());
    }
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, dtypes) in &rows {
        let dtypes = if dtypes.is_empty() {
            "-".to_string()
        } else {
            dtypes.join(" ")
        };
        println!("{name:width$}  {dtypes}");
    }
    println!("{} kernels", rows.len());
    Ok(())
}

/// The operators the kernel calls of `programs` name (every method; delegates' own operators
/// are inside their payloads and are not listed).
fn operators_of(programs: &[PathBuf]) -> Result<BTreeSet<String>> {
    let runtime = pteron::Runtime::new();
    let mut names = BTreeSet::new();
    for path in programs {
        let file = pteron::ProgramFile::open(path)?;
        let program = runtime.load_program(&file)?;
        for plan in program.format().plans() {
            for op in plan.operators().into_iter().flatten() {
                names.insert(pteron_core::method::operator_name(&op));
            }
        }
    }
    Ok(names)
}

pub fn program_ops(programs: &[PathBuf], json: bool, emit_rust: bool) -> Result<()> {
    let names = operators_of(programs)?;
    let files: Vec<String> = programs.iter().map(|p| p.display().to_string()).collect();
    if emit_rust {
        print!("{}", selection_source(&names, &files));
        return Ok(());
    }
    let portable = pteron::portable_kernels();
    let all = pteron::default_kernels();
    let rows: Vec<(&str, &str)> = names
        .iter()
        .map(|n| {
            let lib = if portable.get(n).is_some() {
                "portable"
            } else if all.get(n).is_some() {
                "cpu"
            } else {
                "missing"
            };
            (n.as_str(), lib)
        })
        .collect();
    if json {
        let list: Vec<serde_json::Value> = rows
            .iter()
            .map(|(name, lib)| serde_json::json!({ "name": name, "kernels": lib }))
            .collect();
        let doc = serde_json::json!({ "programs": files, "count": rows.len(), "operators": list });
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON of strings")
        );
        return Ok(());
    }
    let width = rows.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, lib) in &rows {
        println!("{name:width$}  {lib}");
    }
    println!("{} operators", rows.len());
    Ok(())
}

/// An `OpSelection` named `ProgramOps` holding `names`.
fn selection_source(names: &BTreeSet<String>, files: &[String]) -> String {
    let mut s = format!(
        "// The operators of {} (`pteron ops --for … --emit-rust`).\n\
         pub struct ProgramOps;\n\n\
         impl pteron_core::OpSelection for ProgramOps {{\n    \
         const OPS: Option<&'static [&'static str]> = Some(&[\n",
        files.join(", ")
    );
    for n in names {
        s.push_str(&format!("        {n:?},\n"));
    }
    s.push_str("    ]);\n}\n");
    s
}
