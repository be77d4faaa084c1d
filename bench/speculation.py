#!/usr/bin/env python3
"""Speculative decoding on SmolLM2-135M-Instruct with input-grounded tasks (rewriting a given
paragraph; correcting its spelling): `pteron generate` plain, with prompt lookup (`--speculate lookup:K`) and with a
draft model (`--draft DRAFT.pte --draft-tokens K`), interleaved, each a fresh process with one
warm-up generation first (`--warmup 1`). Greedy: every mode must give the plain run's tokens
(checked). Prints decode tok/s (generated tokens after the first / decode time), the speed-up
over plain decoding, draft acceptance, and calls of the target per generated token.

Files (tools/export/out/smollm2/, see README "Generating text"):
  * targets exported with full logits (speculation verifies k drafts in one call):
    `tools/export/export_llm.py smollm2 --skip-convert --full-logits --variants xnnpack_8da4w
    xnnpack_fp32` -> smollm2_xnnpack_{8da4w,fp32}_full_logits.pte;
  * the draft for the fp32 target: the 8da4w export of the same weights
    (smollm2_xnnpack_8da4w.pte; it shares the tokenizer; 4.5 bits per weight against 32).

Usage: python3 bench/speculation.py [--pteron BIN] [--rounds 3] [--threads 1 2] [--k 4 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tools" / "export" / "out" / "smollm2"

PARAGRAPH = (
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden "
    "press adapted from those used to make wine. Within a few decades printing shops had spread "
    "across Europe, books became cheaper, and ideas travelled faster than ever before."
)
# Two input-grounded tasks: a paraphrase (the model rewords: few drafts match) and a correction
# (the answer copies most of the input: prompt lookup's case).
TASKS = {
    "rewrite": f"Rewrite the following paragraph in plain English, keeping every fact:\n\n{PARAGRAPH}",
    "fix spelling": "Fix the spelling mistakes in the following paragraph and write it out "
    "again:\n\n" + PARAGRAPH.replace("history", "histroy").replace("century", "centruy")
    .replace("spread", "spraed"),
}


def run(binary: str, pte: Path, prompt: str, threads: int, new_tokens: int,
        extra: list[str]) -> dict:
    cmd = [binary, "generate", str(pte), "--tokenizer", str(OUT / "tokenizer.json"),
           "--prompt", prompt, "--chat-template", "--max-new-tokens", str(new_tokens),
           "--threads", str(threads), "--json", "--warmup", "1", *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    d = json.loads(p.stdout)
    return {"tokens": d["tokens"], "text": d["text"], **d["stats"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pteron", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")), "release", "pteron"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8], help="draft lengths")
    ap.add_argument("--new-tokens", type=int, default=160)
    args = ap.parse_args()
    targets = {
        "8da4w": OUT / "smollm2_xnnpack_8da4w_full_logits.pte",
        "fp32": OUT / "smollm2_xnnpack_fp32_full_logits.pte",
    }
    draft = OUT / "smollm2_xnnpack_8da4w.pte"
    modes = [("plain", [])]
    for k in args.k:
        modes.append((f"lookup:{k}", ["--speculate", f"lookup:{k}"]))
    for k in args.k:
        modes.append((f"draft 8da4w, k={k}", ["--draft", str(draft), "--draft-tokens", str(k)]))
    rows: dict[tuple, list[dict]] = {}
    for r in range(args.rounds):
        for task, prompt in TASKS.items():
            for t in args.threads:
                for tname, pte in targets.items():
                    for mname, extra in modes:
                        if mname.startswith("draft") and tname == "8da4w":
                            continue  # the draft is the 8da4w model itself
                        m = run(args.pteron, pte, prompt, t, args.new_tokens, extra)
                        rows.setdefault((task, t, tname, mname), []).append(m)
                        print(f"round {r} {task:12} threads {t} {tname:5} {mname:18} decode "
                              f"{m['decode_tokens_per_s']:7.1f} tok/s, "
                              f"{m['generated_tokens']} tokens, {m['decode_calls']} calls, "
                              f"acceptance {m['acceptance_rate']}")
    print()
    print(f"{'task':12} {'threads':>7} {'target':6} {'mode':18} {'decode tok/s':>12} "
          f"{'speed-up':>8} {'accepted':>8} {'calls/token':>11} {'ms/call':>8}  same tokens")
    for task in TASKS:
        for t in args.threads:
            for tname in targets:
                base = rows.get((task, t, tname, "plain"))
                if not base:
                    continue
                b = statistics.median(m["decode_tokens_per_s"] for m in base)
                for mname, _ in modes:
                    ms = rows.get((task, t, tname, mname))
                    if not ms:
                        continue
                    v = statistics.median(m["decode_tokens_per_s"] for m in ms)
                    acc = ms[0]["acceptance_rate"]
                    calls = ms[0]["decode_calls"] / max(ms[0]["generated_tokens"] - 1, 1)
                    per_call = statistics.median(m["decode_ms"] / m["decode_calls"] for m in ms)
                    same = all(m["tokens"] == base[0]["tokens"] for m in ms)
                    print(f"{task:12} {t:>7} {tname:6} {mname:18} {v:12.1f} {v / b:7.2f}x "
                          f"{'' if acc is None else f'{acc:.0%}':>8} {calls:11.2f} "
                          f"{per_call:8.2f}  {same}")
                    if not same:
                        raise SystemExit(f"{task} {tname} {mname}: tokens differ from plain")
        first = rows[(task, args.threads[0], "8da4w", "plain")][0]
        print(f"{task}: 8da4w answer ({first['generated_tokens']} tokens): "
              f"{first['text'][:240]!r}...")


if __name__ == "__main__":
    main()
