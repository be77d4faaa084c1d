//! Chat templates (testdata/llm/templates/: Qwen3's as its tokenizer_config.json ships it, and one
//! written here with what Llama 3's and others use beyond ChatML) render exactly as
//! transformers renders them (tools/export/chat_templates.py): system prompts, turns,
//! reasoning, tool schemas through `tojson` (Python's spacing, keys in order, non-ASCII kept,
//! `indent=4`, `sort_keys`), tool calls and results, and the variables transformers passes
//! (`enable_thinking`, `date_string`).

use std::path::PathBuf;

use pteron_llm::chat::{strftime, ChatTemplate, Message};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/templates")
}

#[test]
fn family_templates_render_as_transformers_does() {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap())
            .unwrap();
    let cases = g["cases"].as_array().unwrap();
    let mut failures = Vec::new();
    for c in cases {
        let name = c["template"].as_str().unwrap();
        let src = std::fs::read_to_string(dir().join(format!("{name}.jinja"))).unwrap();
        let t = ChatTemplate::new(&src).unwrap();
        let mut vars = c["variables"].as_object().unwrap().clone();
        if !c["tools"].is_null() {
            vars.insert("tools".into(), c["tools"].clone());
        }
        let got = t
            .render_with_vars(
                c["messages"].as_array().unwrap(),
                c["add_generation_prompt"].as_bool().unwrap(),
                c["bos_token"].as_str(),
                None,
                &vars,
            )
            .unwrap_or_else(|e| format!("error: {e}"));
        let want = c["rendered"].as_str().unwrap();
        if got != want {
            failures.push(format!(
                "{name}/{} (generation prompt {}):\n--- got\n{got}\n--- want\n{want}",
                c["conversation"], c["add_generation_prompt"]
            ));
        }
    }
    assert!(cases.len() >= 20);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn strftime_formats_dates() {
    // 2024-07-26 13:05:09 UTC (a Friday, day 208 of a leap year).
    let t = 1_722_085_509 - 86_400;
    assert_eq!(strftime("%d %b %Y", t).unwrap(), "26 Jul 2024");
    assert_eq!(
        strftime("%A %a %B %m/%d/%y %H:%M:%S %j %%", t).unwrap(),
        "Friday Fri July 07/26/24 13:05:09 208 %"
    );
    assert_eq!(strftime("%d %b %Y", 0).unwrap(), "01 Jan 1970");
    assert_eq!(strftime("%Y-%m-%d", 951_782_400).unwrap(), "2000-02-29");
    assert!(strftime("%Q", 0).is_err());
}

/// A variable set on the template applies to every rendering (`pteron chat --template-var
/// enable_thinking=false`), and a variable passed with the call takes precedence.
#[test]
fn template_variables_persist_and_yield_to_call_variables() {
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("goldens.json")).unwrap())
            .unwrap();
    let case = |thinking: bool| {
        g["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["template"] == "qwen3"
                    && c["conversation"] == "system_and_turns"
                    && c["tools"].is_null()
                    && c["add_generation_prompt"] == true
                    && c["variables"].get("enable_thinking").is_some() != thinking
            })
            .unwrap()
            .clone()
    };
    let (plain, no_think) = (case(true), case(false));
    let msgs: Vec<Message> = plain["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    let src = std::fs::read_to_string(dir().join("qwen3.jinja")).unwrap();
    let mut t = ChatTemplate::new(&src).unwrap();
    assert_eq!(
        t.render(&msgs, true, None, None).unwrap(),
        plain["rendered"]
    );
    t.set_var("enable_thinking", Value::Bool(false));
    assert_eq!(
        t.render(&msgs, true, None, None).unwrap(),
        no_think["rendered"]
    );
    let mut call = serde_json::Map::new();
    call.insert("enable_thinking".into(), Value::Bool(true));
    assert_eq!(
        t.render_with_vars(&msgs, true, None, None, &call).unwrap(),
        plain["rendered"]
    );
}
