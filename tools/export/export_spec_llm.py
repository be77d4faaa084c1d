#!/usr/bin/env python3
"""Programs for speculative decoding: the tiny Llama of export_llm.py (same checkpoint, same
tokenizer) exported so that one call can verify several drafted tokens, and a smaller draft
model, with greedy goldens from ExecuTorch's runtime.

Verifying k drafted tokens in one call needs every position's logits: the recipe's
`debug.generate_full_logits=True` makes `forward(tokens[1, n], input_pos[1])` return
`[1, n, vocab]` instead of the last row `[1, vocab]`; with `model.enable_dynamic_shape=True` a
call may take 1..31 tokens, and with `model.use_kv_cache=True` the cache keeps the context
(rewinding `input_pos` after a rejection is enough: attention masks by position, later writes
overwrite the stale rows).

Writes testdata/llm/spec/:

* `fp32.pte`: the tiny checkpoint (dim 64, 2 layers), portable, KV cache + sdpa_with_kv_cache,
  dynamic shape, full logits.
* `xnnpack_fp32.pte`: the same lowered to XNNPACK (fp32), full logits.
* `draft.pte`: the draft: the target's first layer only (its embedding, layer 0, final norm and
  output), portable, full logits. A random draft of its own would agree with the random target
  on ~1/vocab of the tokens; the early exit agrees on about one in six.
* `goldens.json`: per program and prompt, the greedy ids of ExecuTorch's runtime (prefill in
  chunks, then one token per call: `export_llm.greedy_with_et_runtime`) and the smallest top-1
  minus top-2 logit margin; a cross-check that ExecuTorch itself gives the same ids when it
  verifies drafted tokens k at a time (prompt lookup, greedy, rewinding `input_pos` after a
  rejection; `et_lookup_*`); and that the target's ids equal testdata/llm/tiny's fp32 goldens
  (same weights). The `repeat` prompt is a repeated word that the model keeps repeating, so
  prompt lookup accepts most drafts; `loop` makes the model loop on a word of its own.

The checkpoint is rebuilt with export_llm.py's functions (seeded; same torch version) from the
committed tokenizer: testdata/llm/tiny is not touched.

`--stories 15m|42m|110m` (not committed, for speed measurements): the random "stories" Llama
of `export_llm.py stories --size ...` (run that first; its checkpoint is reused) exported the
same way to tools/export/out/spec_stories<size>/: `fp32.pte` (portable), `xnnpack_fp32.pte`,
and `draft.pte`, its first `--draft-layers` layers (default 2).

    /opt/etvenv/bin/python tools/export/export_spec_llm.py
    /opt/etvenv/bin/python tools/export/export_spec_llm.py --stories 42m [--draft-layers 2]
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import export_llm as L  # noqa: E402

OUT = L.ROOT / "testdata" / "llm" / "spec"
WORK = L.OUT_DIR / "spec_work"
MAX_SEQ, MAX_CTX = 32, 256
NEW_TOKENS = 64
PROMPTS = dict(
    L.TINY_PROMPTS,
    repeat="json json json json",
    loop="rrrrrr",
)
# Prompt lookup as pteron-llm does it (crates/pteron-llm/src/speculate.rs): the longest suffix
# n-gram (max..min) that occurred before, its most recent earlier occurrence, the tokens after.
LOOKUP = {"min_ngram": 1, "max_ngram": 3, "draft_lens": [1, 4, 8]}


def lookup_draft(seq, k, min_n, max_n):
    for n in range(max_n, min_n - 1, -1):
        if len(seq) <= n:
            continue
        suffix = seq[-n:]
        for j in range(len(seq) - n - 1, -1, -1):
            if seq[j : j + n] == suffix:
                ext = list(seq)
                draft = []
                for i in range(k):
                    ext.append(ext[j + n + i])
                    draft.append(ext[-1])
                return draft
    return []


def et_lookup_greedy(pte: Path, prompt_ids, new_tokens, k):
    """Greedy prompt-lookup speculative decoding over ExecuTorch's runtime: each call feeds the
    last token and up to k drafts, the longest prefix whose argmax rows agree is kept, and
    input_pos moves back to the accepted length. Returns (ids, drafted, accepted, calls)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    fwd = program.load_method("forward")
    _, _, bound = L.program_info(pte)
    pos = 0
    for s in range(0, len(prompt_ids), bound):
        part = prompt_ids[s : s + bound]
        out = fwd.execute([torch.tensor([part]), torch.tensor([pos])])
        pos += len(part)
    row = out[0][0, -1]
    context = list(prompt_ids)
    gen, drafted, accepted, calls = [], 0, 0, 0
    while True:
        tok = int(torch.argmax(row))
        gen.append(tok)
        if len(gen) == new_tokens:
            return gen, drafted, accepted, calls
        room = min(k, new_tokens - len(gen) - 1, bound - 1)
        draft = lookup_draft(context + [tok], room, LOOKUP["min_ngram"], LOOKUP["max_ngram"])
        feed = [tok] + draft
        out = fwd.execute([torch.tensor([feed]), torch.tensor([pos])])
        calls += 1
        rows = out[0][0]
        assert rows.shape[0] == len(feed), rows.shape
        context.append(tok)
        drafted += len(draft)
        i = 0
        while i < len(draft) and int(torch.argmax(rows[i])) == draft[i]:
            gen.append(draft[i])
            context.append(draft[i])
            i += 1
            if len(gen) == new_tokens:
                return gen, drafted, accepted + i, calls
        accepted += i
        pos = len(context)  # rewind: rows past the accepted tokens are stale
        row = rows[i]


def export_stories(size: str, draft_layers: int) -> int:
    src = L.OUT_DIR / f"stories{size}"
    if not (src / "checkpoint.pth").exists():
        print(f"run tools/export/export_llm.py stories --size {size} first", file=sys.stderr)
        return 2
    out = L.OUT_DIR / f"spec_stories{size}"
    out.mkdir(parents=True, exist_ok=True)
    params = json.loads((src / "params.json").read_text())
    sd = torch.load(src / "checkpoint.pth")
    keep = [f"layers.{i}." for i in range(draft_layers)]
    draft_sd = {k: v for k, v in sd.items() if not k.startswith("layers.") or k.startswith(tuple(keep))}
    torch.save(draft_sd, out / "draft.pth")
    (out / "draft_params.json").write_text(json.dumps(dict(params, n_layers=draft_layers)))
    (out / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    max_ctx = L.STORIES[size][1]
    from tokenizers import Tokenizer

    eos = Tokenizer.from_file(str(src / "tokenizer.json")).token_to_id("<|endoftext|>")
    metadata = {"get_bos_id": eos, "get_eos_ids": [eos]}
    for name, ckpt, par, xnnpack in [
        ("fp32", src / "checkpoint.pth", src / "params.json", False),
        ("xnnpack_fp32", src / "checkpoint.pth", src / "params.json", True),
        ("draft", out / "draft.pth", out / "draft_params.json", False),
    ]:
        cfg = L.llm_config(ckpt, par, out, name, 256, max_ctx, metadata)
        cfg.debug.generate_full_logits = True
        cfg.backend.xnnpack.enabled = xnnpack
        L.export(cfg)
    print(f"wrote {out}")
    return 0


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--stories", choices=list(L.STORIES), help="a random stories model instead")
    ap.add_argument("--draft-layers", type=int, default=2, help="--stories: the draft's layers")
    args = ap.parse_args()
    L.load_custom_ops()
    if args.stories:
        return export_stories(args.stories, args.draft_layers)
    from tokenizers import Tokenizer

    tok_path = L.TINY_DIR / "tokenizer.json"
    tok = Tokenizer.from_file(str(tok_path))
    params = L.tiny_params()
    never = [i for i in range(tok.get_vocab_size()) if not L.valid_piece(tok, i)]
    never.append(tok.token_to_id("<|endoftext|>"))
    WORK.mkdir(parents=True, exist_ok=True)
    OUT.mkdir(parents=True, exist_ok=True)
    sd = L.tiny_checkpoint(params, never)
    torch.save(sd, WORK / "tiny.pth")
    (WORK / "params.json").write_text(json.dumps(params))
    draft_params = dict(params, n_layers=1)
    draft_sd = {k: v for k, v in sd.items() if not k.startswith("layers.1.")}
    torch.save(draft_sd, WORK / "draft.pth")
    (WORK / "draft_params.json").write_text(json.dumps(draft_params))

    eos = tok.token_to_id("<|endoftext|>")
    metadata = {"get_bos_id": tok.token_to_id("<|im_start|>"), "get_eos_ids": [eos]}
    tiny_goldens = json.loads((L.TINY_DIR / "goldens.json").read_text())
    variants = {
        # name: (checkpoint, params, XNNPACK)
        "fp32": ("tiny.pth", "params.json", False),
        "xnnpack_fp32": ("tiny.pth", "params.json", True),
        "draft": ("draft.pth", "draft_params.json", False),
    }
    goldens = {
        "tokenizer": "../tiny/tokenizer.json",
        "new_tokens": NEW_TOKENS,
        "max_seq_len": MAX_SEQ,
        "max_context_len": MAX_CTX,
        "export": {
            "model.use_kv_cache": True,
            "model.use_sdpa_with_kv_cache": True,
            "model.enable_dynamic_shape": True,
            "debug.generate_full_logits": True,
        },
        "lookup": {k: v for k, v in LOOKUP.items()},
        "versions": L.versions(),
        "variants": {},
    }
    for name, (ckpt, par, xnnpack) in variants.items():
        print(f"spec/{name}")
        cfg = L.llm_config(WORK / ckpt, WORK / par, WORK, f"spec_{name}", MAX_SEQ, MAX_CTX,
                           metadata)
        cfg.debug.generate_full_logits = True
        if xnnpack:
            cfg.backend.xnnpack.enabled = True
        dst = OUT / f"{name}.pte"
        dst.write_bytes(Path(L.export(cfg)).read_bytes())
        ops, methods, bound = L.program_info(dst)
        print(f"  ops: {ops}")
        entry = {
            "pte": dst.name,
            "pte_bytes": dst.stat().st_size,
            "n_layers": (draft_params if name == "draft" else params)["n_layers"],
            "xnnpack": xnnpack,
            "operators": ops,
            "methods": methods,
            "tokens_input_bound": bound,
            "prompts": {},
        }
        for pname, prompt in PROMPTS.items():
            ids = tok.encode(prompt).ids
            gen, margins, meta = L.greedy_with_et_runtime(dst, ids, NEW_TOKENS)
            entry["metadata"] = meta
            rec = {
                "prompt": prompt,
                "prompt_ids": ids,
                "generated_ids": gen,
                "generated_text": tok.decode(gen, skip_special_tokens=False),
                "min_top2_margin": min(margins),
            }
            print(f"  [{pname}] min top-2 margin {min(margins):.4f}: {rec['generated_text']!r}")
            tiny = tiny_goldens["variants"]["fp32"]["prompts"].get(pname)
            if tiny is not None and name != "draft":
                rec["equals_tiny_fp32_golden"] = tiny["generated_ids"] == gen
                print(f"  [{pname}] same ids as testdata/llm/tiny fp32: "
                      f"{rec['equals_tiny_fp32_golden']}")
            if name != "draft":
                for k in LOOKUP["draft_lens"]:
                    spec, drafted, accepted, calls = et_lookup_greedy(dst, ids, NEW_TOKENS, k)
                    rec[f"et_lookup_{k}"] = {
                        "same_ids": spec == gen,
                        "drafted": drafted,
                        "accepted": accepted,
                        "calls": calls,
                    }
                    print(f"  [{pname}] ExecuTorch prompt lookup k={k}: same ids {spec == gen}, "
                          f"accepted {accepted}/{drafted}, {calls} calls")
            entry["prompts"][pname] = rec
        goldens["variants"][name] = entry
    (OUT / "goldens.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT} ({total} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
