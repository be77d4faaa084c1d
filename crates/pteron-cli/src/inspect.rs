//! `pteron inspect`: what a program contains, read straight from the verified file.

use std::collections::BTreeMap;
use std::path::Path;

use pteron_format::schema;
use serde_json::{json, Value as Json};

fn value_desc(v: &schema::EValue<'_>) -> Json {
    match v.val_type() {
        schema::KernelTypes::Tensor => {
            let t = v.val_as_tensor();
            let dtype = t
                .and_then(|t| pteron::ScalarType::from_i8(t.scalar_type().0))
                .map_or("unknown".to_string(), |d| d.name().to_string());
            let sizes: Vec<i32> = t
                .and_then(|t| t.sizes())
                .map(|s| s.iter().collect())
                .unwrap_or_default();
            let dynamic =
                t.is_some_and(|t| t.shape_dynamism() != schema::TensorShapeDynamism::STATIC);
            json!({"kind": "tensor", "dtype": dtype, "shape": sizes, "dynamic": dynamic})
        }
        schema::KernelTypes::Int => {
            json!({"kind": "int", "value": v.val_as_int().map(|i| i.int_val())})
        }
        schema::KernelTypes::Double => {
            json!({"kind": "double", "value": v.val_as_double().map(|d| d.double_val())})
        }
        schema::KernelTypes::Bool => {
            json!({"kind": "bool", "value": v.val_as_bool().map(|b| b.bool_val())})
        }
        schema::KernelTypes::Null => json!({"kind": "none"}),
        other => json!({"kind": format!("{:?}", other)}),
    }
}

fn describe(path: &Path) -> pteron::Result<Json> {
    let file = pteron::ProgramFile::open(path)?;
    let program = pteron::Runtime::new().load_program(&file)?;
    let p = program.format();
    let fb = p.flatbuffer();
    let mut methods = Vec::new();
    for plan in p.plans() {
        let values = plan.values();
        let value_at = |i: i32| -> Json {
            match values {
                Some(vs) if i >= 0 && (i as usize) < vs.len() => value_desc(&vs.get(i as usize)),
                _ => json!({"kind": "invalid index", "index": i}),
            }
        };
        let inputs: Vec<Json> = plan.inputs().into_iter().flatten().map(value_at).collect();
        let outputs: Vec<Json> = plan.outputs().into_iter().flatten().map(value_at).collect();
        let op_names: Vec<String> = plan
            .operators()
            .into_iter()
            .flatten()
            .map(|o| pteron_core::method::operator_name(&o))
            .collect();
        let mut uses: BTreeMap<String, usize> = BTreeMap::new();
        let mut instructions = 0usize;
        for chain in plan.chains().into_iter().flatten() {
            for ins in chain.instructions().into_iter().flatten() {
                instructions += 1;
                if let Some(k) = ins.instr_args_as_kernel_call() {
                    let name = op_names
                        .get(k.op_index() as usize)
                        .cloned()
                        .unwrap_or_else(|| "<invalid>".into());
                    *uses.entry(name).or_default() += 1;
                }
            }
        }
        let delegates: Vec<Json> = plan
            .delegates()
            .into_iter()
            .flatten()
            .map(|d| {
                let size = d
                    .processed()
                    .and_then(|r| p.delegate_data(r).ok())
                    .map(|b| b.len());
                json!({"backend": d.id(), "blob_bytes": size})
            })
            .collect();
        let planned: Vec<i64> = plan
            .non_const_buffer_sizes()
            .map(|s| s.iter().skip(1).collect())
            .unwrap_or_default();
        // What `Method::load_in` needs lent (planned buffers and the I/O arena), known before
        // loading; None when the method cannot be sized (it would not load either).
        let lent = plan.name().and_then(|name| {
            let src = pteron_core::DataSources::program(*p);
            pteron_core::Method::memory_needs(src, name, &Default::default()).ok()
        });
        methods.push(json!({
            "name": plan.name(),
            "lent_memory": lent.map(|n| json!({"arenas": n.arenas, "region_bytes": n.region_bytes})),
            "inputs": inputs,
            "outputs": outputs,
            "instructions": instructions,
            "operators": uses,
            "delegates": delegates,
            "planned_buffers": planned,
        }));
    }
    let segments: Vec<Json> = fb
        .segments()
        .into_iter()
        .flatten()
        .map(|s| json!({"offset": s.offset(), "size": s.size_()}))
        .collect();
    let constant_bytes = if p.constant_segment_bytes().is_empty() {
        fb.constant_buffer()
            .into_iter()
            .flatten()
            .map(|b| b.storage().map_or(0, |s| s.len()))
            .sum()
    } else {
        p.constant_segment_bytes().len()
    };
    Ok(json!({
        "file": path.display().to_string(),
        "file_bytes": file.bytes().len(),
        "methods": methods,
        "segments": segments,
        "constant_bytes": constant_bytes,
        "named_data": p.named_data_keys().collect::<Vec<_>>(),
    }))
}

fn shape(v: &Json) -> String {
    match v["kind"].as_str() {
        Some("tensor") => {
            let dims: Vec<String> = v["shape"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| d.to_string())
                .collect();
            format!(
                "{}[{}]{}",
                v["dtype"].as_str().unwrap_or("?"),
                dims.join(", "),
                if v["dynamic"] == true {
                    " (dynamic, upper bound)"
                } else {
                    ""
                }
            )
        }
        Some(k) => match v.get("value") {
            Some(val) => format!("{k} = {val}"),
            None => k.to_string(),
        },
        None => "?".into(),
    }
}

pub fn inspect(path: &Path, as_json: bool) -> pteron::Result<()> {
    let d = describe(path)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
        return Ok(());
    }
    println!(
        "{} ({} bytes, {} constant bytes)",
        d["file"].as_str().unwrap_or(""),
        d["file_bytes"],
        d["constant_bytes"]
    );
    for m in d["methods"].as_array().into_iter().flatten() {
        println!(
            "\nmethod {} ({} instructions)",
            m["name"].as_str().unwrap_or("?"),
            m["instructions"]
        );
        for (k, v) in m["inputs"].as_array().into_iter().flatten().enumerate() {
            println!("  input {k}: {}", shape(v));
        }
        for (k, v) in m["outputs"].as_array().into_iter().flatten().enumerate() {
            println!("  output {k}: {}", shape(v));
        }
        let planned = m["planned_buffers"].as_array().cloned().unwrap_or_default();
        for (k, s) in planned.iter().enumerate() {
            println!("  planned buffer {}: {} bytes", k + 1, s);
        }
        if let Some(lent) = m["lent_memory"].as_object() {
            let arenas = lent["arenas"].as_array().cloned().unwrap_or_default();
            println!(
                "  planned memory: {} bytes in {} arenas (the planned buffers, then {} bytes for unplanned inputs and outputs); Method::load_in needs a region of {} bytes",
                arenas.iter().filter_map(|a| a.as_u64()).sum::<u64>(),
                arenas.len(),
                arenas.last().and_then(|a| a.as_u64()).unwrap_or(0),
                lent["region_bytes"]
            );
        }
        if let Some(ops) = m["operators"].as_object() {
            if !ops.is_empty() {
                println!("  operators ({}):", ops.len());
                for (name, count) in ops {
                    println!("    {count:>5}  {name}");
                }
            }
        }
        for del in m["delegates"].as_array().into_iter().flatten() {
            println!(
                "  delegate {} ({} bytes)",
                del["backend"].as_str().unwrap_or("?"),
                del["blob_bytes"]
            );
        }
    }
    let segs = d["segments"].as_array().cloned().unwrap_or_default();
    if !segs.is_empty() {
        println!("\nsegments:");
        for (k, s) in segs.iter().enumerate() {
            println!("  {k}: offset {} size {}", s["offset"], s["size"]);
        }
    }
    let named = d["named_data"].as_array().cloned().unwrap_or_default();
    if !named.is_empty() {
        println!("named data: {} keys", named.len());
    }
    Ok(())
}
