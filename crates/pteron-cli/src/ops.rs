//! `pteron ops`: the registered kernels and the dtypes each declares.

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
