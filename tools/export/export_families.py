#!/usr/bin/env python3
"""LLM families of ExecuTorch's `export_llm` recipe, reduced to fixture size, with greedy
goldens from ExecuTorch's runtime.

For each family, the shape of the model's own config (executorch/examples/models/<family>/
config/*.json in ExecuTorch's sources) is kept in every feature that changes the program — QKV
biases, QK-norm before RoPE, an explicit head_dim, partial rotary, llama 3 scaled RoPE, LFM2's
short-convolution layers, Qwen 3.5's gated-DeltaNet layers with a gated query and (1 + w)
RMSNorm — and shrunk in every size (dim 64, 2-4 layers, vocab 512: testdata/llm/tiny's
tokenizer). Weights are random (seeded), fan-in scaled so that logits are peaked. The recipe is
ExecuTorch's own (`export_llama_lib.export_llama` with the family's `model_class`), KV cache +
sdpa_with_kv_cache, dynamic shape (1..max_seq_len-1 tokens a call).

Writes testdata/llm/families/<family>/:

* `xnnpack_fp32.pte` for every family; `fp32.pte` (portable), `xnnpack_8da4w.pte` (dynamic
  int8 activations, 4-bit weights in groups of 32), `xnnpack_8da8w.pte` (int8 weights per
  channel) and `xnnpack_kv8.pte` (fp32 weights, int8 KV cache: `quantize_kv_cache=True`) for
  the families in PORTABLE / Q8DA4W / Q8DA8W / KV8;
* goldens.json: params, operators, metadata methods' values, and per program and prompt the
  greedy ids of ExecuTorch's runtime (prefill in chunks, then one token a call:
  export_llm.greedy_with_et_runtime) with every step's top-1 minus top-2 logit margin; for the
  8da4w programs also whether ExecuTorch gives the same ids with 1 and 2 threads.

`--full FAMILY [--layers N]` (not committed): the family's full-size layers with random weights
(vocab 32000, the "stories" tokenizer), to tools/export/out/families/<family>_<N>l/ — for the
speed comparison (bench/llm.py) and the memory check.

    /opt/etvenv/bin/python tools/export/export_families.py [--only qwen3_5 lfm2] [--goldens-only]
    /opt/etvenv/bin/python tools/export/export_families.py --full qwen3_5 --layers 8
    /opt/etvenv/bin/python tools/export/export_families.py --vulkan   # vulkan_fp32.pte (VULKAN)
"""

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402

import export_llm as L  # noqa: E402

OUT = L.ROOT / "testdata" / "llm" / "families"
WORK = L.OUT_DIR / "families_work"
MAX_SEQ, MAX_CTX = 32, 128
NEW_TOKENS = 40

COMMON = dict(dim=64, n_heads=4, n_kv_heads=2, vocab_size=512, hidden_dim=128)

# family: (model_class, reduced params). Comments name what the full config has.
FAMILIES = {
    # Qwen2.5-0.5B: biases on q/k/v, HF RoPE (halves), theta 1e6, eps 1e-6.
    "qwen2_5": ("qwen2_5_0_5b", dict(COMMON, n_layers=2, norm_eps=1e-6, rope_theta=1e6,
                                      use_hf_rope=True, attention_qkv_bias=True)),
    # Qwen3-0.6B: head_dim 128 != dim / n_heads, RMSNorm on q and k before RoPE.
    "qwen3": ("qwen3_0_6b", dict(COMMON, n_layers=2, head_dim=32, norm_eps=1e-6, rope_theta=1e6,
                                  use_hf_rope=True, use_qk_norm=True, qk_norm_before_rope=True)),
    # Phi-4-mini: RoPE on 3/4 of each head.
    "phi_4_mini": ("phi_4_mini", dict(COMMON, n_layers=2, norm_eps=1e-5, rope_theta=1e4,
                                       use_hf_rope=True, partial_rotary_factor=0.75)),
    # Llama 3.2 1B: llama 3.1 frequency scaling (factor 32), theta 5e5, hidden from multiplier.
    "llama3_2": ("llama3_2", dict({k: v for k, v in COMMON.items() if k != "hidden_dim"},
                                  n_layers=2, norm_eps=1e-5, rope_theta=5e5, use_scaled_rope=True,
                                  rope_scale_factor=32, ffn_dim_multiplier=1.5, multiple_of=32)),
    # LFM2-350M: short-convolution layers between attention layers, QK-norm.
    "lfm2": ("lfm2_350m", dict(COMMON, n_layers=3, norm_eps=1e-5, rope_theta=1e6,
                                use_hf_rope=True, use_qk_norm=True, qk_norm_before_rope=True,
                                layer_types=["conv", "full_attention", "conv"])),
    # Qwen3.5-0.8B: 3 gated-DeltaNet layers to 1 full-attention layer (gated query, QK-norm,
    # RoPE on 1/4 of each head), (1 + w) RMSNorm; more value heads than key heads.
    "qwen3_5": ("qwen3_5_0_8b", dict(COMMON, n_layers=4, head_dim=32, norm_eps=1e-6,
                                      rope_theta=1e7, use_hf_rope=True, partial_rotary_factor=0.25,
                                      use_qk_norm=True, qk_norm_before_rope=True, use_q_gate=True,
                                      rms_norm_add_unit_offset=True, linear_conv_kernel_dim=4,
                                      linear_key_head_dim=16, linear_value_head_dim=16,
                                      linear_num_key_heads=2, linear_num_value_heads=4,
                                      layer_types=["linear_attention"] * 3 + ["full_attention"])),
}
PORTABLE = {"lfm2"}
Q8DA4W = {"qwen3_5", "llama3_2", "qwen2_5"}
# int8 weights per channel with dynamic int8 activations; the int8 KV cache
# (`quantize_kv_cache=True`: llama::custom_quantized_sdpa over int8 caches).
Q8DA8W = {"qwen3"}
KV8 = {"qwen3"}
# The recipe's Vulkan backend (`vulkan_fp32.pte`, run by pteron's GPU engine): Qwen 3 (QK-norm,
# Hugging Face RoPE, head_dim != dim / n_heads) and Phi-4-mini (RoPE on 3/4 of each head). The
# pip runtime has no Vulkan backend: their goldens are the xnnpack_fp32 program's ids (same
# weights). LFM2's Vulkan export drops its convolution state (the graph outputs it, the
# program does not keep it), which pteron refuses by name.
VULKAN = {"qwen3", "phi_4_mini"}

# Full-size configs (ExecuTorch's config/*.json; Llama 3.2 1B from Meta's params.json).
FULL = {
    "qwen3_5": dict(dim=1024, hidden_dim=3584, n_heads=8, head_dim=256, n_kv_heads=2,
                    n_layers=24, norm_eps=1e-6, rope_theta=1e7, vocab_size=248320,
                    use_hf_rope=True, partial_rotary_factor=0.25, use_qk_norm=True,
                    qk_norm_before_rope=True, use_q_gate=True, rms_norm_add_unit_offset=True,
                    linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
                    linear_num_key_heads=16, linear_num_value_heads=16,
                    layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6),
    "lfm2": dict(dim=1024, ffn_dim_multiplier=1, hidden_dim=4608, n_heads=16, n_kv_heads=8,
                 n_layers=16, norm_eps=1e-5, rope_theta=1e6, vocab_size=65536, use_hf_rope=True,
                 use_qk_norm=True, qk_norm_before_rope=True,
                 layer_types=["conv", "conv", "full_attention", "conv", "conv", "full_attention",
                              "conv", "conv", "full_attention", "conv", "full_attention", "conv",
                              "full_attention", "conv", "full_attention", "conv"]),
    "qwen3": dict(dim=1024, ffn_dim_multiplier=1, hidden_dim=3072, n_heads=16, head_dim=128,
                  n_kv_heads=8, n_layers=28, norm_eps=1e-6, rope_theta=1e6, vocab_size=151936,
                  use_hf_rope=True, use_qk_norm=True, qk_norm_before_rope=True),
    "qwen2_5": dict(dim=896, ffn_dim_multiplier=1, hidden_dim=4864, n_heads=14, n_kv_heads=2,
                    n_layers=24, norm_eps=1e-6, rope_theta=1e6, vocab_size=151936,
                    use_hf_rope=True, attention_qkv_bias=True),
    "llama3_2": dict(dim=2048, ffn_dim_multiplier=1.5, multiple_of=256, n_heads=32,
                     n_kv_heads=8, n_layers=16, norm_eps=1e-5, rope_theta=5e5,
                     use_scaled_rope=True, rope_scale_factor=32, vocab_size=128256),
    "phi_4_mini": dict(dim=3072, ffn_dim_multiplier=1, hidden_dim=8192, n_heads=24, n_kv_heads=8,
                       n_layers=32, norm_eps=1e-5, rope_theta=1e4, use_hf_rope=True,
                       partial_rotary_factor=0.75, vocab_size=200064),
}


def checkpoint(params, seed):
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(seed)
    model = construct_transformer(ModelArgs(max_seq_len=16, max_context_len=64, **params))
    sd = {}
    for k, v in model.state_dict().items():
        if "mask" in k or "freqs" in k or "cache" in k or k.endswith("_state"):
            continue
        if k.endswith("A_log"):  # decay rates as the model initialises them (log U(0, 16))
            sd[k] = v.clone()
        elif v.dim() == 1:  # norm weights and biases: around 1 (around 0 with unit offset)
            base = 0.0 if params.get("rms_norm_add_unit_offset") and "norm" in k else 1.0
            sd[k] = base + 0.1 * torch.randn_like(v)
            if k.endswith(".bias"):
                sd[k] = 0.1 * torch.randn_like(v)
        else:  # fan-in scaled, so activations and logits stay O(1) and peaked
            fan_in = v[0].numel()
            sd[k] = torch.randn_like(v) * (1.5 / fan_in**0.5)
    return sd


def config(family, ckpt, params_path, out_dir, name, metadata, xnnpack, qmode, kv8=False):
    from executorch.extension.llm.export.config.llm_config import ModelType

    cfg = L.llm_config(ckpt, params_path, out_dir, name, MAX_SEQ, MAX_CTX, metadata)
    cfg.base.model_class = ModelType(FAMILIES[family][0])
    if xnnpack:
        cfg.backend.xnnpack.enabled = True
    if qmode:
        cfg.quantization.qmode = qmode
        # 8da8w: per output channel (the recipe's XNNPACK path groups 4-bit weights only).
        cfg.quantization.group_size = None if qmode == "8da8w" else 32
    if kv8:
        cfg.model.quantize_kv_cache = True
    return cfg


def goldens(pte, tok, xnnpack, qmode, kv8=False):
    """Greedy ids of ExecuTorch's runtime per prompt, with every step's top-1 minus top-2
    margin; for a quantized program also whether 1 and 2 threads give the same ids."""
    import executorch.extension.pybindings.portable_lib as portable

    ops, methods, bound = L.program_info(pte)
    print(f"  ops: {ops}")
    entry = {"pte": pte.name, "pte_bytes": pte.stat().st_size, "operators": ops,
             "methods": methods, "tokens_input_bound": bound, "xnnpack": xnnpack,
             "qmode": qmode, "kv8": kv8, "prompts": {}}
    for pname, prompt in L.TINY_PROMPTS.items():
        prompt_ids = tok.encode(prompt).ids
        portable._unsafe_reset_threadpool(1)
        gen, margins, meta = L.greedy_with_et_runtime(pte, prompt_ids, NEW_TOKENS)
        entry["metadata"] = meta
        rec = {"prompt_ids": prompt_ids, "generated_ids": gen,
               "min_top2_margin": min(margins), "top2_margins": margins}
        if qmode or kv8:
            portable._unsafe_reset_threadpool(2)
            gen2, _, _ = L.greedy_with_et_runtime(pte, prompt_ids, NEW_TOKENS)
            portable._unsafe_reset_threadpool(1)
            rec["et_2_threads_same_ids"] = gen2 == gen
        print(f"  [{pname}] {len(prompt_ids)} prompt ids, min margin {min(margins):.4f}: "
              f"{gen[:12]}...")
        entry["prompts"][pname] = rec
    return entry


def prepare(family, tok, seed):
    """The family's seeded checkpoint and params.json in its work folder, and the metadata
    methods' values: (work folder, checkpoint path, metadata)."""
    params = FAMILIES[family][1]
    work = WORK / family
    work.mkdir(parents=True, exist_ok=True)
    ckpt = work / "checkpoint.pth"
    torch.save(checkpoint(params, seed), ckpt)
    (work / "params.json").write_text(json.dumps(params))
    eos = tok.token_to_id("<|endoftext|>")
    return work, ckpt, {"get_bos_id": tok.token_to_id("<|im_start|>"), "get_eos_ids": [eos]}


def export_vulkan(family, tok, seed):
    """vulkan_fp32.pte for a family of VULKAN, merged into its committed goldens.json."""
    work, ckpt, metadata = prepare(family, tok, seed)
    out = OUT / family
    gold_path = out / "goldens.json"
    golden = json.loads(gold_path.read_text())
    if golden.get("seed") != seed:
        raise SystemExit(f"{family}: goldens.json has seed {golden.get('seed')}, not {seed}")
    cfg = config(family, ckpt, work / "params.json", work, "vulkan_fp32", metadata, False, None)
    cfg.backend.vulkan.enabled = True
    dst = out / "vulkan_fp32.pte"
    dst.write_bytes(Path(L.export(cfg)).read_bytes())
    ops, methods, bound = L.program_info(dst)
    golden["variants"]["vulkan_fp32"] = {
        "pte": dst.name, "pte_bytes": dst.stat().st_size, "operators": ops, "methods": methods,
        "tokens_input_bound": bound, "backend": "vulkan", "qmode": None,
        "golden_variant": "xnnpack_fp32",
    }
    gold_path.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {dst} and {gold_path}")


def export_family(family, tok, seed, goldens_only=False):
    params = FAMILIES[family][1]
    work, ckpt, metadata = prepare(family, tok, seed)
    out = OUT / family
    out.mkdir(parents=True, exist_ok=True)
    # name: (XNNPACK, qmode, int8 KV cache)
    variants = {"xnnpack_fp32": (True, None, False)}
    if family in PORTABLE:
        variants["fp32"] = (False, None, False)
    if family in Q8DA4W:
        variants["xnnpack_8da4w"] = (True, "8da4w", False)
    if family in Q8DA8W:
        variants["xnnpack_8da8w"] = (True, "8da8w", False)
    if family in KV8:
        variants["xnnpack_kv8"] = (True, None, True)
    golden = {"family": family, "model_class": FAMILIES[family][0], "params": params,
              "max_seq_len": MAX_SEQ, "max_context_len": MAX_CTX, "new_tokens": NEW_TOKENS,
              "seed": seed, "variants": {}}
    for name, (xnnpack, qmode, kv8) in variants.items():
        print(f"{family}/{name}")
        dst = out / f"{name}.pte"
        if not goldens_only:
            cfg = config(family, ckpt, work / "params.json", work, name, metadata, xnnpack,
                         qmode, kv8)
            path = Path(L.export(cfg))
            dst.write_bytes(path.read_bytes())
        golden["variants"][name] = goldens(dst, tok, xnnpack, qmode, kv8)
    golden["versions"] = L.versions()
    (out / "goldens.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {out / 'goldens.json'}")


def export_full(family, variants, layers, goldens_only=False):
    """The family's full-size layers with random weights, for speed and memory measurements:
    the first `layers` layers of its config, vocab 32000 with the random "stories" tokenizer
    of export_llm.py (`stories --size 42m` first: its tokenizer.json is copied)."""
    import shutil

    params = dict(FULL[family], vocab_size=L.STORIES_VOCAB)
    if layers:
        params["n_layers"] = layers
        if "layer_types" in params:
            params["layer_types"] = params["layer_types"][:layers]
    work = L.OUT_DIR / "families" / f"{family}_{params['n_layers']}l"
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(L.OUT_DIR / "stories42m" / "tokenizer.json", work / "tokenizer.json")
    ckpt = work / "checkpoint.pth"
    if not ckpt.exists():
        torch.save(checkpoint(params, 1), ckpt)
    (work / "params.json").write_text(json.dumps(params))
    metadata = {"get_bos_id": 1, "get_eos_ids": [2]}
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(work / "tokenizer.json"))
    golden = {"family": family, "model_class": FAMILIES[family][0], "params": params,
              "new_tokens": NEW_TOKENS, "variants": {}}
    for name in variants:
        xnnpack = name.startswith("xnnpack")
        qmode = "8da4w" if name.endswith("8da4w") else None
        if goldens_only:
            golden["variants"][name] = goldens(work / f"{name}.pte", tok, xnnpack, qmode)
            continue
        cfg = config(family, ckpt, work / "params.json", work, name, metadata, xnnpack, qmode)
        # ExecuTorch's runner prefills in chunks of get_max_seq_len, one more than the tokens
        # input takes: bench/llm.py's 147-token prompt must fit in one call.
        cfg.export.max_seq_length = 256
        cfg.export.max_context_length = 2304
        print(f"  {L.export(cfg)}")
        golden["variants"][name] = goldens(work / f"{name}.pte", tok, xnnpack, qmode)
    golden["versions"] = L.versions()
    (work / "goldens.json").write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {work / 'goldens.json'} (crates/pteron-llm/tests/families.rs, ignored test)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", choices=list(FAMILIES))
    ap.add_argument("--full", choices=list(FULL))
    ap.add_argument("--layers", type=int, help="--full: only the first N layers")
    ap.add_argument("--variants", nargs="*", default=["xnnpack_fp32", "xnnpack_8da4w"])
    ap.add_argument("--goldens-only", action="store_true",
                    help="recompute goldens.json from the committed programs")
    ap.add_argument("--vulkan", action="store_true",
                    help="only the Vulkan programs (VULKAN), added to the committed goldens")
    args = ap.parse_args()
    L.load_custom_ops()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(L.TINY_DIR / "tokenizer.json"))
    if args.full:
        export_full(args.full, args.variants, args.layers, args.goldens_only)
        return
    for family in args.only or FAMILIES:
        seed = 100 + list(FAMILIES).index(family)
        if args.vulkan:
            if family in VULKAN:
                export_vulkan(family, tok, seed)
            continue
        export_family(family, tok, seed, args.goldens_only)


if __name__ == "__main__":
    main()
