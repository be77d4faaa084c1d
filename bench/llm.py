#!/usr/bin/env python3
"""LLM generation speed: pteron vs ExecuTorch's own LLM runner on the same `.pte`.

For each round and thread count, runs in fresh processes, interleaved:

  * `pteron generate MODEL --json` (prefill tok/s, decode tok/s from its stats);
  * ExecuTorch's C++ runner through its Python bindings
    (`executorch.extension.llm.runner.TextLLMRunner`, temperature 0, the wheel's threadpool
    resized with `_unsafe_reset_threadpool`), rates from the runner's own `Stats`
    (prefill: prompt tokens / (prompt_eval_end - inference_start); decode: (generated - 1) /
    (inference_end - prompt_eval_end); millisecond timestamps). One warm-up generation first.

Both are greedy from the same raw text prompt (no chat template, so generation runs long) and
stop at EOS or `--new-tokens`. Prints per (threads, engine) the median over rounds and the
ratio pteron / ExecuTorch, and writes JSON with every measurement.

Usage (from the repository root, after `tools/export/export_llm.py smollm2`):

    /opt/etvenv/bin/python bench/llm.py --pteron $CARGO_TARGET_DIR/release/pteron
    /opt/etvenv/bin/python bench/llm.py --threads 1 2 --rounds 5 --new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tools" / "export" / "out" / "smollm2"

PROMPT = (
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden "
    "press adapted from those used to make wine. Within a few decades printing shops had spread "
    "across Europe, books became cheaper, and ideas travelled faster than ever before. In this "
    "essay we look at how the press changed science, religion and politics, starting with"
)


def et_worker(pte: str, tok: str, threads: int, new_tokens: int) -> dict:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama kernels)
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    _unsafe_reset_threadpool(threads)
    runner = TextLLMRunner(pte, tok)
    got = {}

    def on_stats(s):
        got.update(
            prompt=s.num_prompt_tokens,
            generated=s.num_generated_tokens,
            start=s.inference_start_ms,
            prompt_end=s.prompt_eval_end_ms,
            first=s.first_token_ms,
            end=s.inference_end_ms,
        )

    pieces = []
    for _ in range(2):  # warm-up, then the measured run
        pieces.clear()
        cfg = GenerationConfig(echo=False, max_new_tokens=new_tokens, temperature=0.0)
        runner.generate(PROMPT, cfg, token_callback=pieces.append, stats_callback=on_stats)
        runner.reset()
    prefill_s = max(got["prompt_end"] - got["start"], 1) / 1e3
    decode_s = max(got["end"] - got["prompt_end"], 1) / 1e3
    return {
        "prompt_tokens": got["prompt"],
        "generated_tokens": got["generated"],
        "prefill_tok_s": got["prompt"] / prefill_s,
        "decode_tok_s": (got["generated"] - 1) / decode_s,
        "ttft_ms": got["first"] - got["start"],
        "text": "".join(pieces),
    }


def run_et(pte, tok, threads, new_tokens) -> dict:
    cmd = [sys.executable, __file__, "--worker", pte, tok, str(threads), str(new_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_pteron(binary, pte, tok, threads, new_tokens) -> dict:
    base = [str(binary), "generate", pte, "--tokenizer", tok, "--prompt", PROMPT,
            "--threads", str(threads), "--json"]
    # Warm-up (page cache), then the measured run.
    subprocess.run(base + ["--max-new-tokens", "4"], capture_output=True, check=True)
    p = subprocess.run(base + ["--max-new-tokens", str(new_tokens)], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    d = json.loads(p.stdout)
    s = d["stats"]
    return {
        "prompt_tokens": s["prompt_tokens"],
        "generated_tokens": s["generated_tokens"],
        "prefill_tok_s": s["prefill_tokens_per_s"],
        "decode_tok_s": s["decode_tokens_per_s"],
        "ttft_ms": s["time_to_first_token_ms"],
        "peak_rss_mib": (s["peak_rss_bytes"] or 0) / 2**20,
        "text": d["text"],
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, pte, tok, threads, n = sys.argv
        print(json.dumps(et_worker(pte, tok, int(threads), int(n))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pte", default=str(OUT / "smollm2_fp32.pte"))
    ap.add_argument("--tokenizer", default=str(OUT / "tokenizer.json"))
    ap.add_argument("--pteron", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")), "release", "pteron"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--json-out", default=str(ROOT / "tools" / "export" / "out" / "bench_llm.json"))
    args = ap.parse_args()

    rows = []
    for r in range(args.rounds):
        for t in args.threads:
            for engine in ("pteron", "executorch"):
                if engine == "pteron":
                    m = run_pteron(args.pteron, args.pte, args.tokenizer, t, args.new_tokens)
                else:
                    m = run_et(args.pte, args.tokenizer, t, args.new_tokens)
                m.update(engine=engine, threads=t, round=r)
                rows.append(m)
                print(
                    f"round {r} threads {t} {engine:10} prompt {m['prompt_tokens']} gen {m['generated_tokens']} "
                    f"prefill {m['prefill_tok_s']:.1f} tok/s decode {m['decode_tok_s']:.1f} tok/s",
                    flush=True,
                )
    print()
    print(f"{'threads':>7} {'engine':10} {'prefill tok/s':>14} {'decode tok/s':>13}")
    summary = {}
    for t in args.threads:
        for engine in ("pteron", "executorch"):
            ms = [m for m in rows if m["threads"] == t and m["engine"] == engine]
            pre = statistics.median(m["prefill_tok_s"] for m in ms)
            dec = statistics.median(m["decode_tok_s"] for m in ms)
            summary[(t, engine)] = (pre, dec)
            print(f"{t:>7} {engine:10} {pre:>14.1f} {dec:>13.1f}")
        p, e = summary[(t, "pteron")], summary[(t, "executorch")]
        print(f"{t:>7} {'ratio':10} {p[0] / e[0]:>14.2f} {p[1] / e[1]:>13.2f}   (pteron / ExecuTorch)")
    same = {m["engine"]: m["text"] for m in rows if m["round"] == 0 and m["threads"] == args.threads[0]}
    print(f"\nsame text from both engines: {same.get('pteron') == same.get('executorch')}")
    Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json_out).write_text(json.dumps({"prompt": PROMPT, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
