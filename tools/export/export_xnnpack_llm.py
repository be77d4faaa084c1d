#!/usr/bin/env python3
"""The tiny Llama of tools/export/export_llm.py exported with ExecuTorch's LLM recipe lowered to
XNNPACK (`backend.xnnpack.enabled=True`): fp32, and `quantization.qmode=8da4w` (dynamic int8
activations, 4-bit blockwise weights, group 32), with greedy goldens from ExecuTorch's runtime.

Writes testdata/llm/tiny_xnnpack/{fp32,8da4w}.pte and goldens.json: 64 greedy ids for each
prompt of export_llm.py, from ExecuTorch's runtime (Python loop over `executorch.runtime`,
the runner's chunked prefill + decode), cross-checked against the text ExecuTorch's C++ LLM
runner (`TextLLMRunner`) streams where the prompt fits one call. The checkpoint, params and
tokenizer are those of export_llm.py's `tiny` target (run that first: it writes
tools/export/out/tiny_work and testdata/llm/tiny).

    /opt/etvenv/bin/python tools/export/export_xnnpack_llm.py
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export_llm as L  # noqa: E402

OUT = L.ROOT / "testdata" / "llm" / "tiny_xnnpack"
GROUP_SIZE = 32


def main() -> int:
    L.load_custom_ops()
    work = L.OUT_DIR / "tiny_work"
    if not (work / "tiny.pth").exists():
        print("run tools/export/export_llm.py tiny first", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    from tokenizers import Tokenizer

    tok_path = L.TINY_DIR / "tokenizer.json"
    tok = Tokenizer.from_file(str(tok_path))
    eos = tok.token_to_id("<|endoftext|>")
    metadata = {"get_bos_id": tok.token_to_id("<|im_start|>"), "get_eos_ids": [eos]}
    max_seq, max_ctx = 32, 256
    goldens = {
        "tokenizer": "../tiny/tokenizer.json",
        "new_tokens": L.TINY_NEW_TOKENS,
        "max_seq_len": max_seq,
        "max_context_len": max_ctx,
        "group_size": GROUP_SIZE,
        "versions": L.versions(),
        "variants": {},
    }
    for name, qmode in [("fp32", None), ("8da4w", "8da4w")]:
        print(f"tiny_xnnpack/{name}")
        cfg = L.llm_config(work / "tiny.pth", work / "params.json", work, f"xnn_{name}",
                           max_seq, max_ctx, metadata)
        cfg.backend.xnnpack.enabled = True
        if qmode:
            cfg.quantization.qmode = qmode
            cfg.quantization.group_size = GROUP_SIZE
        dst = OUT / f"{name}.pte"
        dst.write_bytes(Path(L.export(cfg)).read_bytes())
        ops, methods, bound = L.program_info(dst)
        print(f"  ops outside the delegates: {ops}")
        entry = {
            "pte": dst.name,
            "pte_bytes": dst.stat().st_size,
            "qmode": qmode,
            "operators": ops,
            "methods": methods,
            "tokens_input_bound": bound,
            "prompts": {},
        }
        for pname, prompt in L.TINY_PROMPTS.items():
            ids = tok.encode(prompt).ids
            gen, margins, meta = L.greedy_with_et_runtime(dst, ids, L.TINY_NEW_TOKENS)
            entry["metadata"] = meta
            text = tok.decode(gen, skip_special_tokens=False)
            rec = {
                "prompt": prompt,
                "prompt_ids": ids,
                "generated_ids": gen,
                "generated_text": text,
                "min_top2_margin": min(margins),
            }
            print(f"  [{pname}] min top-2 margin {min(margins):.4f}: {text!r}")
            if len(ids) <= bound:
                runner_text, err = L.et_runner_text(dst, tok_path, prompt, L.TINY_NEW_TOKENS)
                rec["et_runner_text_matches"] = runner_text == text if err is None else None
                print(f"  [{pname}] ET runner (TextLLMRunner) same text: "
                      f"{rec['et_runner_text_matches']} {err or ''}")
            entry["prompts"][pname] = rec
        goldens["variants"][name] = entry
    (OUT / "goldens.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT / 'goldens.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
