"""Whisper for export: CTranslate2 -> transformers conversion, and export wrappers.

- `read_ct2` parses CTranslate2's model.bin (binary version 6: spec name, revision, named
  variables with shape/dtype/bytes, aliases).
- `hf_from_ct2` builds a transformers `WhisperForConditionalGeneration` with those weights
  (CTranslate2 fuses q/k/v; Whisper's k projections have no bias, so CTranslate2's fused bias
  is zero there).
- `WhisperEncoderExport`: mel [1, n_mels, frames] -> the cross-attention keys and values of
  every decoder layer, 2 x layers tensors [1, frames/2, heads, head_dim] (k0, v0, k1, v1, ...;
  computed once per 30 s window).
- `WhisperDecoderExport`: one token per call, (token [1, 1] int64, pos [1] int64, k0, v0, ...)
  -> logits [1, vocab]; the self-attention K/V of each layer in a static cache
  [1, max_target_positions, heads, head_dim] held in mutable buffers.

Attention is ExecuTorch's LLM custom ops (`executorch.extension.llm.custom_ops`), as its LLM
recipe exports it: `llama::update_cache` writes a position's K/V into the cache in place, and
`llama::custom_sdpa` attends over the [batch, seq, heads, head_dim] layout the projections
produce (no transposes, no [T, T] score matrix in the graph): causal over the cache up to
`pos` in the decoder, over every frame in the encoder and in cross attention.
"""

import struct

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


def read_ct2(path):
    data = open(path, "rb").read()
    pos = 0

    def unpack(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = unpack("H")
        s = data[pos : pos + n - 1].decode()
        pos += n
        return s

    version = unpack("I")
    if version != 6:
        raise ValueError(f"CTranslate2 binary version {version}, expected 6")
    spec, revision, count = string(), unpack("I"), unpack("I")
    dtypes = [np.float32, np.int8, np.int16, np.int32, np.float16]
    variables = {}
    for _ in range(count):
        name = string()
        shape = [unpack("I") for _ in range(unpack("B"))]
        dt = dtypes[unpack("B")]
        nbytes = unpack("I")
        variables[name] = np.frombuffer(data, dt, nbytes // np.dtype(dt).itemsize, pos).reshape(shape).copy()
        pos += nbytes
    for _ in range(unpack("I")):
        alias, target = string(), string()
        variables[alias] = variables[target]
    return spec, revision, variables


def hf_from_ct2(model_dir):
    """A transformers Whisper model (fp32) with the CTranslate2 model's weights."""
    import json

    from transformers import WhisperConfig, WhisperForConditionalGeneration

    spec, _, v = read_ct2(f"{model_dir}/model.bin")
    assert spec == "WhisperSpec", spec
    cfg_ct2 = json.load(open(f"{model_dir}/config.json"))
    t = lambda name: torch.from_numpy(v[name].astype(np.float32))  # noqa: E731
    vocab, d = v["decoder/embeddings/weight"].shape
    enc_layers = sum(1 for k in v if k.startswith("encoder/layer_") and k.endswith("ffn/linear_0/weight"))
    dec_layers = sum(1 for k in v if k.startswith("decoder/layer_") and k.endswith("ffn/linear_0/weight"))
    config = WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=v["encoder/conv1/weight"].shape[1],
        d_model=d,
        encoder_layers=enc_layers,
        decoder_layers=dec_layers,
        encoder_attention_heads=int(v["encoder/num_heads"]),
        decoder_attention_heads=int(v["decoder/num_heads"]),
        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=v["decoder/position_encodings/encodings"].shape[0],
        pad_token_id=50256,
        bos_token_id=50256,
        eos_token_id=50256,
        decoder_start_token_id=50257,
        suppress_tokens=cfg_ct2["suppress_ids"],
        begin_suppress_tokens=cfg_ct2["suppress_ids_begin"],
    )
    model = WhisperForConditionalGeneration(config).eval()
    sd = {}
    e, dd = "model.encoder", "model.decoder"
    for i in (1, 2):
        sd[f"{e}.conv{i}.weight"] = t(f"encoder/conv{i}/weight")
        sd[f"{e}.conv{i}.bias"] = t(f"encoder/conv{i}/bias")
    sd[f"{e}.embed_positions.weight"] = t("encoder/position_encodings/encodings")
    sd[f"{e}.layer_norm.weight"] = t("encoder/layer_norm/gamma")
    sd[f"{e}.layer_norm.bias"] = t("encoder/layer_norm/beta")
    sd[f"{dd}.embed_tokens.weight"] = t("decoder/embeddings/weight")
    sd[f"{dd}.embed_positions.weight"] = t("decoder/position_encodings/encodings")
    sd[f"{dd}.layer_norm.weight"] = t("decoder/layer_norm/gamma")
    sd[f"{dd}.layer_norm.bias"] = t("decoder/layer_norm/beta")
    sd["proj_out.weight"] = t("decoder/embeddings/weight")

    def ln(dst, src):
        sd[f"{dst}.weight"] = t(f"{src}/gamma")
        sd[f"{dst}.bias"] = t(f"{src}/beta")

    def lin(dst, src):
        sd[f"{dst}.weight"] = t(f"{src}/weight")
        sd[f"{dst}.bias"] = t(f"{src}/bias")

    def split(dst_names, src, has_bias):
        w, b = t(f"{src}/weight"), t(f"{src}/bias")
        n = len(dst_names)
        for name, wi, bi, hb in zip(dst_names, w.chunk(n), b.chunk(n), has_bias):
            sd[f"{name}.weight"] = wi
            if hb:
                sd[f"{name}.bias"] = bi
            else:
                assert float(bi.abs().max()) == 0.0, f"{name}: non-zero bias where Whisper has none"

    for side, n_layers in (("encoder", enc_layers), ("decoder", dec_layers)):
        for i in range(n_layers):
            dst, src = f"model.{side}.layers.{i}", f"{side}/layer_{i}"
            sa = f"{src}/self_attention"
            ln(f"{dst}.self_attn_layer_norm", f"{sa}/layer_norm")
            split([f"{dst}.self_attn.q_proj", f"{dst}.self_attn.k_proj", f"{dst}.self_attn.v_proj"], f"{sa}/linear_0", [True, False, True])
            lin(f"{dst}.self_attn.out_proj", f"{sa}/linear_1")
            if side == "decoder":
                ca = f"{src}/attention"
                ln(f"{dst}.encoder_attn_layer_norm", f"{ca}/layer_norm")
                lin(f"{dst}.encoder_attn.q_proj", f"{ca}/linear_0")
                split([f"{dst}.encoder_attn.k_proj", f"{dst}.encoder_attn.v_proj"], f"{ca}/linear_1", [False, True])
                lin(f"{dst}.encoder_attn.out_proj", f"{ca}/linear_2")
            ln(f"{dst}.final_layer_norm", f"{src}/ffn/layer_norm")
            lin(f"{dst}.fc1", f"{src}/ffn/linear_0")
            lin(f"{dst}.fc2", f"{src}/ffn/linear_1")
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert not missing, missing
    return model


def _conv_as_matmul(x, weight, bias, stride):
    """conv1d (kernel 3, padding 1) of time-major x [1, T, C_in] as one matmul -> [1, T/stride, C_out].

    The three taps are strided time slices of the padded input side by side, times the kernel
    laid out as [C_out, 3 * C_in] (tap-major): the same sums as the convolution, as a GEMM.
    """
    t = x.shape[1]
    xp = F.pad(x, (0, 0, 1, 1))
    n = (t - 1) // stride + 1
    cols = torch.cat([xp[:, k : k + stride * (n - 1) + 1 : stride, :] for k in range(3)], dim=2)
    return F.linear(cols, weight, bias)


def _custom_ops():
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (registers llama::*)


def _heads(x, heads):
    """[1, n, d] -> [1, n, heads, d / heads] (a view)."""
    return x.view(x.shape[0], x.shape[1], heads, x.shape[2] // heads)


def _sdpa(q, k, v, start_pos, causal):
    """Attention of q [1, n, H, hd] over the first start_pos + n rows of k/v -> [1, n, H * hd]."""
    o = torch.ops.llama.custom_sdpa(q, k, v, start_pos, None, 0, causal)
    return o.reshape(o.shape[0], o.shape[1], -1)


class WhisperEncoderExport(nn.Module):
    """mel [1, n_mels, frames] -> (k0, v0, k1, v1, ...), each [1, frames/2, heads, head_dim]."""

    def __init__(self, hf):
        super().__init__()
        _custom_ops()
        self.encoder = hf.model.encoder
        self.layers = hf.model.decoder.layers
        self.heads = hf.config.decoder_attention_heads
        # Convolution kernels [C_out, C_in, 3] as [C_out, 3 * C_in], tap-major (see _conv_as_matmul).
        for i in (1, 2):
            w = getattr(self.encoder, f"conv{i}").weight.detach()
            self.register_buffer(f"conv{i}_w", w.permute(0, 2, 1).reshape(w.shape[0], -1).contiguous())

    def forward(self, mel):
        x = mel.transpose(1, 2)  # [1, frames, n_mels]: time-major from here on
        x = F.gelu(_conv_as_matmul(x, self.conv1_w, self.encoder.conv1.bias, 1))
        x = F.gelu(_conv_as_matmul(x, self.conv2_w, self.encoder.conv2.bias, 2))
        x = x + self.encoder.embed_positions.weight[: x.shape[1]]
        heads = self.encoder.config.encoder_attention_heads
        for layer in self.encoder.layers:
            h = layer.self_attn_layer_norm(x)
            a = layer.self_attn
            q = _heads(a.q_proj(h), heads)
            k = _heads(a.k_proj(h), heads)
            v = _heads(a.v_proj(h), heads)
            x = x + a.out_proj(_sdpa(q, k, v, 0, False))
            x = x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))
        x = self.encoder.layer_norm(x)
        kv = []
        for layer in self.layers:
            a = layer.encoder_attn
            kv += [_heads(a.k_proj(x), self.heads), _heads(a.v_proj(x), self.heads)]
        return tuple(kv)


class WhisperDecoderExport(nn.Module):
    """(token [1, 1], pos [1], k0, v0, k1, v1, ...) -> logits [1, vocab]; self K/V cached in buffers."""

    def __init__(self, hf):
        super().__init__()
        _custom_ops()
        self.decoder = hf.model.decoder
        self.proj = hf.proj_out
        c = hf.config
        self.heads = c.decoder_attention_heads
        hd = c.d_model // self.heads
        self.max_len = c.max_target_positions
        shape = (1, self.max_len, self.heads, hd)
        for i in range(c.decoder_layers):
            self.register_buffer(f"k_cache_{i}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"v_cache_{i}", torch.zeros(shape), persistent=False)

    def forward(self, token, pos, *cross):
        d = self.decoder
        x = d.embed_tokens(token) + d.embed_positions.weight.index_select(0, pos)  # [1, 1, D]
        start = pos[0].item()
        torch._check_is_size(start)
        torch._check(start < self.max_len)
        heads = self.heads
        for i, layer in enumerate(d.layers):
            h = layer.self_attn_layer_norm(x)
            a = layer.self_attn
            k_cache, v_cache = getattr(self, f"k_cache_{i}"), getattr(self, f"v_cache_{i}")
            torch.ops.llama.update_cache(_heads(a.k_proj(h), heads), k_cache, start)
            torch.ops.llama.update_cache(_heads(a.v_proj(h), heads), v_cache, start)
            x = x + a.out_proj(_sdpa(_heads(a.q_proj(h), heads), k_cache, v_cache, start, True))

            h = layer.encoder_attn_layer_norm(x)
            c = layer.encoder_attn
            ck, cv = cross[2 * i], cross[2 * i + 1]
            # Not causal; start_pos + 1 query row = every encoder frame.
            o = _sdpa(_heads(c.q_proj(h), heads), ck, cv, ck.shape[1] - 1, False)
            x = x + c.out_proj(o)
            x = x + layer.fc2(F.gelu(layer.fc1(layer.final_layer_norm(x))))
        x = d.layer_norm(x)
        return self.proj(x).view(1, -1)
