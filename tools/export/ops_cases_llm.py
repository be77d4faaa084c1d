"""Conformance cases for the LLM ops (issue 7): ExecuTorch's custom LLM ops (`llama::update_cache`,
`llama::custom_sdpa`, `llama::sdpa_with_kv_cache`, extension/llm/custom_ops) and the quantized
ops LLM exports use (`quantized_decomposed::embedding_{byte,4bit,2bit}` (+ `.dtype`),
`choose_qparams_per_token_asymmetric`, `quantize_per_token`, `dequantize_per_token`, and the
per-tensor / per-channel quantize / dequantize, kernels/quantized).

Loaded by export_ops.py (`build(ns)`). Export with

    /opt/etvenv/bin/python tools/export/export_ops.py --only custom_sdpa update_cache \
        sdpa_with_kv_cache embedding_byte embedding_4bit embedding_2bit quantize_per_token \
        quantize_per_tensor quantize_per_channel

The ops are registered in this process for export (torch) and for the goldens (ExecuTorch's
runtime: importing `executorch.extension.llm.custom_ops.custom_ops` and
`executorch.kernels.quantized` loads their ExecuTorch kernels into the runtime the goldens come
from, so the goldens are ExecuTorch's own kernels' outputs).

KV caches are registered buffers, as in ExecuTorch's llama model: the ops update them in place
(mutable buffers in the program); the cases return the cache (times one, so that the output is a
fresh tensor) or the attention over it. start_pos is a constant of the graph.
"""

import torch
import torch.nn as nn


def _register():
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401


def _rand(shape, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


class UpdateCache(nn.Module):
    def __init__(self, dt, cache_shape, start):
        super().__init__()
        self.register_buffer("cache", _rand(cache_shape, 11, dt))
        self.start = start

    def forward(self, value):
        torch.ops.llama.update_cache(value, self.cache, self.start)
        return self.cache * 1


class SdpaWithKvCache(nn.Module):
    def __init__(self, dt, cache_shape, start, causal, scale=None):
        super().__init__()
        self.register_buffer("k_cache", _rand(cache_shape, 12, dt))
        self.register_buffer("v_cache", _rand(cache_shape, 13, dt))
        self.start, self.causal, self.scale = start, causal, scale

    def forward(self, q, k, v):
        out = torch.ops.llama.sdpa_with_kv_cache(
            q, k, v, self.k_cache, self.v_cache, self.start, q.shape[1], None, 0.0, self.causal, self.scale
        )
        return out, self.k_cache * 1


class CustomSdpaOverCache(nn.Module):
    """update_cache on both caches, then custom_sdpa over them: what the llama export emits."""

    def __init__(self, dt, cache_shape, start):
        super().__init__()
        self.register_buffer("k_cache", _rand(cache_shape, 14, dt))
        self.register_buffer("v_cache", _rand(cache_shape, 15, dt))
        self.start = start

    def forward(self, q, k, v):
        torch.ops.llama.update_cache(k, self.k_cache, self.start)
        torch.ops.llama.update_cache(v, self.v_cache, self.start)
        return torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, self.start, None, 0.0, True, None)


class QEmbedding(nn.Module):
    """A quantized embedding table (weights, scales, zero points are constants)."""

    def __init__(self, dt, bits, rows, dim, groups, zp, overload, seed=21):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        per_byte = 8 // bits
        if bits == 8:
            w = torch.randint(-128, 128, (rows, dim), generator=g).to(torch.int8)
        else:
            w = torch.randint(0, 256, (rows, dim // per_byte), generator=g).to(torch.uint8)
        sshape = (rows,) if groups == 1 else (rows, groups)
        self.register_buffer("w", w)
        self.register_buffer("s", (torch.rand(sshape, generator=g) * 0.1 + 0.01).to(dt))
        self.register_buffer(
            "zp", torch.randint(-3, 4, sshape, generator=g).to(dt) if zp else None
        )
        self.bits, self.overload = bits, overload
        self.range = {8: (-128, 127), 4: (-8, 7), 2: (-2, 1)}[bits]

    def forward(self, idx):
        name = {8: "embedding_byte", 4: "embedding_4bit", 2: "embedding_2bit"}[self.bits]
        op = getattr(torch.ops.quantized_decomposed, name)
        lo, hi = self.range
        if self.overload == "dtype":
            return op.dtype(self.w, self.s, self.zp, lo, hi, idx, dtype=self.s.dtype)
        return op.default(self.w, self.s, self.zp, lo, hi, idx)


def per_token_chain(x):
    q = torch.ops.quantized_decomposed
    s, zp = q.choose_qparams_per_token_asymmetric(x, torch.int8)
    xq = q.quantize_per_token(x, s, zp, -128, 127, torch.int8)
    xd = q.dequantize_per_token(xq, s, zp, -128, 127, torch.int8, torch.float32)
    return s, zp, xq, xd


def per_tensor_chain(x):
    q = torch.ops.quantized_decomposed
    xq = q.quantize_per_tensor(x, 0.05, 3, -128, 127, torch.int8)
    return xq, q.dequantize_per_tensor(xq, 0.05, 3, -128, 127, torch.int8)


def per_tensor_u8(x):
    q = torch.ops.quantized_decomposed
    xq = q.quantize_per_tensor(x, 0.02, 128, 0, 255, torch.uint8)
    return xq, q.dequantize_per_tensor(xq, 0.02, 128, 0, 255, torch.uint8)


class PerChannel(nn.Module):
    def __init__(self, dt, axis):
        super().__init__()
        self.register_buffer("s", torch.tensor([0.05, 0.1, 0.02], dtype=torch.float64))
        self.register_buffer("zp", torch.tensor([0, -4, 7], dtype=torch.int64))
        self.axis = axis

    def forward(self, x):
        q = torch.ops.quantized_decomposed
        xq = q.quantize_per_channel(x, self.s, self.zp, self.axis, -128, 127, torch.int8)
        return xq, q.dequantize_per_channel(xq, self.s, self.zp, self.axis, -128, 127, torch.int8)


def build(ns):
    _register()
    case, T, Idx = ns["case"], ns["T"], ns["Idx"]
    f32, f16, bf16, i32 = ns["f32"], ns["f16"], ns["bf16"], ns["i32"]
    loose = ns["loose"]
    half_tol = loose(2e-2, 2e-2)

    # custom_sdpa on explicit q/k/v: q [1, S, 4, 8], k/v [1, 16, 2, 8] (GQA 4/2).
    sd = torch.ops.llama.custom_sdpa
    for name, S, start, causal, scale in [
        ("custom_sdpa_decode", 1, 9, True, None),
        ("custom_sdpa_prefill", 5, 0, True, None),
        ("custom_sdpa_chunk", 4, 7, True, None),
        ("custom_sdpa_noncausal", 3, 5, False, None),
        ("custom_sdpa_scale", 3, 2, True, 0.7),
    ]:
        f = lambda q, k, v, start=start, causal=causal, scale=scale: sd(q, k, v, start, None, 0.0, causal, scale)
        case("custom_sdpa", name, f, [T(1, S, 4, 8), T(1, 16, 2, 8), T(1, 16, 2, 8)], [f32, f16, bf16], tol=half_tol)
    # Additive float mask over every cache row (no causal flag).
    f = lambda q, k, v, m: sd(q, k, v, 0, m, 0.0, False, None)
    case("custom_sdpa", "custom_sdpa_mask", f, [T(1, 3, 2, 8), T(1, 12, 1, 8), T(1, 12, 1, 8), T(3, 12, dtype=f32)], [f32])
    # Batch 2, MHA.
    f = lambda q, k, v: sd(q, k, v, 2, None, 0.0, True, None)
    case("custom_sdpa", "custom_sdpa_batch2", f, [T(2, 3, 3, 4), T(2, 8, 3, 4), T(2, 8, 3, 4)], [f32])
    # The export's pattern: update_cache on both caches, then custom_sdpa over them.
    for name, S, start in [("custom_sdpa_cache_prefill", 6, 0), ("custom_sdpa_cache_decode", 1, 13)]:
        case(
            "custom_sdpa", name,
            lambda dt, start=start: CustomSdpaOverCache(dt, (1, 16, 2, 8), start),
            [T(1, S, 4, 8), T(1, S, 2, 8), T(1, S, 2, 8)], [f32, bf16], module=True, tol=half_tol,
        )

    for name, shape, start in [
        ("update_cache_prefill", (1, 5, 2, 4), 0),
        ("update_cache_decode", (1, 1, 2, 4), 9),
        ("update_cache_tail", (1, 3, 2, 4), 13),
        ("update_cache_batch2", (2, 2, 3, 2), 4),
    ]:
        cache = (shape[0], 16, shape[2], shape[3])
        case("update_cache", name, lambda dt, cache=cache, start=start: UpdateCache(dt, cache, start),
             [T(*shape)], [f32, f16, bf16], module=True)

    for name, S, start, causal in [
        ("sdpa_with_kv_cache_prefill", 4, 0, True),
        ("sdpa_with_kv_cache_decode", 1, 10, True),
        ("sdpa_with_kv_cache_noncausal", 3, 6, False),
    ]:
        case(
            "sdpa_with_kv_cache", name,
            lambda dt, start=start, causal=causal: SdpaWithKvCache(dt, (1, 16, 2, 8), start, causal),
            [T(1, S, 4, 8), T(1, S, 2, 8), T(1, S, 2, 8)], [f32, f16, bf16], module=True, tol=half_tol,
        )

    for bits, op in [(8, "embedding_byte"), (4, "embedding_4bit"), (2, "embedding_2bit")]:
        for groups, zp in [(1, False), (2, True)]:
            for ov in ["default", "dtype"]:
                name = f"{op}_{ov}_g{groups}{'_zp' if zp else ''}"
                # The 2/4-bit `.out` kernels read the scales as the output type (float32 for
                # this overload): half-precision scales would be read past their end, a result
                # that is no function of the inputs. pteron refuses them at load.
                dts = [f32] if bits != 8 and ov == "default" else [f32, f16, bf16]
                case(
                    op, name,
                    lambda dt, bits=bits, groups=groups, zp=zp, ov=ov: QEmbedding(dt, bits, 10, 16, groups, zp, ov),
                    [Idx((2, 3), 10)], dts, module=True,
                )
        case(op, f"{op}_int32_ids",
             lambda dt, bits=bits: QEmbedding(dt, bits, 10, 16, 1, False, "dtype"),
             [Idx((4,), 10, dtype=i32)], [f32], module=True)

    case("quantize_per_token", "per_token_chain", per_token_chain, [T(2, 3, 16)], [f32])
    case("quantize_per_token", "per_token_chain_1d", per_token_chain, [T(7)], [f32])
    case("quantize_per_tensor", "per_tensor_i8", per_tensor_chain, [T(3, 5)], [f32])
    case("quantize_per_tensor", "per_tensor_u8", per_tensor_u8, [T(4, 4)], [f32])
    case("quantize_per_channel", "per_channel_axis0", lambda dt: PerChannel(dt, 0), [T(3, 4)], [f32], module=True)
    case("quantize_per_channel", "per_channel_axis1", lambda dt: PerChannel(dt, 1), [T(2, 3, 5)], [f32], module=True)
