#!/usr/bin/env python3
"""Chat-template goldens: the family templates of testdata/llm/templates/ rendered by
transformers' own renderer (`render_jinja_template`, the code behind `apply_chat_template`:
Jinja2 sandbox, trim_blocks/lstrip_blocks, its `tojson`, `strftime_now`, `raise_exception`)
for conversations with a system prompt, several turns, reasoning (`<think>`), tool schemas,
tool calls and tool results, non-ASCII text, and the template variables transformers passes
(`enable_thinking`, `date_string`, `bos_token`).

Templates: `qwen3.jinja`, the `chat_template` of Qwen3-0.6B's tokenizer_config.json (see
THIRD-PARTY-NOTICES; Qwen 3.5's adds vision tokens around the same ChatML); `features.jinja`,
written here, with what Llama 3's template and others use beyond it (`tojson(indent=4)`,
`tojson(sort_keys=true)`, a default `date_string`, slicing, `is mapping`, namespaces).

Writes testdata/llm/templates/goldens.json; checked by crates/pteron-llm/tests/templates.rs.

    /opt/etvenv/bin/python tools/export/chat_templates.py
"""

import json
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

DIR = Path(__file__).resolve().parents[2] / "testdata" / "llm" / "templates"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather at a place, now. Units: <°C> & km/h.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Zürich"},
                "days": {"type": "integer", "enum": [1, 3, 7]},
                "detailed": {"type": "boolean"},
            },
            "required": ["city"],
        },
    },
}
CALC = {
    "type": "function",
    "function": {"name": "add", "description": "a + b", "parameters": {"type": "object",
                 "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                 "required": []}},
}

CONVERSATIONS = {
    "one_user": [{"role": "user", "content": "Hello!"}],
    "system_and_turns": [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3? Answer in 日本語, with emoji 🦀."},
    ],
    "reasoning": [
        {"role": "user", "content": "Think first."},
        {"role": "assistant", "content": "<think>\nThe user wants thought.\n</think>\n\nDone."},
        {"role": "user", "content": "Again."},
    ],
    "tool_round_trip": [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Zürich", "days": 3}}}]},
        {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    ],
    "structured_tool_result": [
        {"role": "system", "content": "Tools answer in JSON."},
        {"role": "user", "content": "Sum?"},
        {"role": "tool", "content": {"sum": 3.5, "terms": [1, 2.5], "note": "ünïcode <ok>"}},
    ],
}

# (template, conversation, tools, variables)
CASES = [
    ("qwen3", "one_user", None, {}),
    ("qwen3", "system_and_turns", None, {}),
    ("qwen3", "system_and_turns", None, {"enable_thinking": False}),
    ("qwen3", "reasoning", None, {}),
    ("qwen3", "one_user", [WEATHER, CALC], {}),
    ("qwen3", "system_and_turns", [WEATHER], {}),
    ("qwen3", "tool_round_trip", [WEATHER], {}),
    ("features", "one_user", None, {}),
    ("features", "system_and_turns", None, {"date_string": "02 Dec 2026"}),
    ("features", "one_user", [WEATHER, CALC], {"date_string": "02 Dec 2026"}),
    ("features", "tool_round_trip", [WEATHER], {}),
    ("features", "structured_tool_result", None, {}),
]
BOS = {"qwen3": None, "features": "<|begin|>"}


def main():
    out = []
    for template, conv, tools, variables in CASES:
        src = (DIR / f"{template}.jinja").read_text()
        for gen in (True, False):
            kwargs = dict(variables)
            if BOS[template]:
                kwargs["bos_token"] = BOS[template]
            rendered, _ = render_jinja_template(
                conversations=[CONVERSATIONS[conv]], tools=tools, chat_template=src,
                add_generation_prompt=gen, **kwargs)
            out.append({"template": template, "conversation": conv,
                        "messages": CONVERSATIONS[conv], "tools": tools, "variables": variables,
                        "bos_token": BOS[template], "add_generation_prompt": gen,
                        "rendered": rendered[0]})
    import transformers

    doc = {"transformers": transformers.__version__, "cases": out}
    (DIR / "goldens.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(out)} cases to {DIR / 'goldens.json'}")


if __name__ == "__main__":
    main()
