#!/usr/bin/env python3
"""Export the op conformance suite: tiny single-op programs, run with ExecuTorch's runtime.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_ops.py              # every op -> testdata/ops
    /opt/etvenv/bin/python tools/export/export_ops.py --only add mm  # only these op directories
    /opt/etvenv/bin/python tools/export/export_ops.py --list         # print the case table

Every case is a small `nn.Module` around one op, exported portable-only
(`torch.export.export` -> `to_edge` -> `to_executorch`, no delegate), and run with
`executorch.runtime` on seeded inputs. The runtime's outputs are the goldens.
A case that fails to export or to run in ExecuTorch (e.g. a dtype its portable kernels
do not take) is recorded under "skipped" with the reason.

Layout (one directory per op, see docs/adding-an-op.md):

    testdata/ops/<op>/cases.json    the cases (format below)
    testdata/ops/<op>/<case>.pte    one program per case
    testdata/ops/<op>/data.bin      every input and expected output of the op's cases, raw
                                    little-endian C-order bytes, each tensor starting at a
                                    multiple of 8 bytes

cases.json:

    {"op": "add", "versions": {...},
     "cases": [{"name": "add_f32", "pte": "add_f32.pte", "dtype": "float32",
                "operators": ["aten::add.out"],
                "inputs":   [{"dtype": "float32", "shape": [2, 3], "offset": 0, "nbytes": 24}],
                "outputs":  [{"dtype": "float32", "shape": [2, 3], "offset": 24, "nbytes": 24}],
                "tolerance": {"atol": 1e-5, "rtol": 1e-5},      # only when the case overrides
                "eager_max_abs_diff": 0.0}],                     # ExecuTorch vs eager (info)
     "skipped": [{"name": "add_u8", "stage": "export" | "run", "reason": "..."}]}

Dtype names are torch's: float32 float64 float16 bfloat16 int64 int32 int16 int8 uint8 bool.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

f32, f64, f16, bf16 = torch.float32, torch.float64, torch.float16, torch.bfloat16
i64, i32, i16, i8, u8, b8 = torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool

FLOATS = [f32, f64, f16, bf16]
INTS = [i64, i32, i8, u8]
REALS = FLOATS + INTS
ALL = REALS + [b8]

SHORT = {f32: "f32", f64: "f64", f16: "f16", bf16: "bf16", i64: "i64", i32: "i32", i16: "i16", i8: "i8", u8: "u8", b8: "bool"}
DTYPE_NAME = {f32: "float32", f64: "float64", f16: "float16", bf16: "bfloat16", i64: "int64", i32: "int32", i16: "int16", i8: "int8", u8: "uint8", b8: "bool"}


# --------------------------------------------------------------------------
# input specs
# --------------------------------------------------------------------------


@dataclass
class In:
    """An input tensor: shape, dtype (None = the case dtype), value kind."""

    shape: Sequence[int]
    dtype: Optional[torch.dtype] = None
    kind: str = "normal"  # normal | pos (positive floats) | int:lo:hi | bool | perm:n
    lo: int = 0
    hi: int = 0


def T(*shape, dtype=None):
    return In(shape, dtype)


def P(*shape, dtype=None):
    return In(shape, dtype, "pos")


def Idx(shape, hi, lo=0, dtype=i64):
    return In(shape, dtype, "int", lo, hi)


def Mask(*shape):
    return In(shape, b8, "bool")


def make_input(spec: In, case_dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    dt = spec.dtype or case_dtype
    shape = tuple(spec.shape)
    if spec.kind == "int":
        return torch.randint(spec.lo, spec.hi, shape, generator=g).to(dt)
    if spec.kind == "bool" or dt == b8:
        return torch.randint(0, 2, shape, generator=g).to(b8)
    if dt.is_floating_point:
        if spec.kind == "pos":
            return (torch.rand(shape, generator=g) * 2 + 0.1).to(dt)
        return torch.randn(shape, generator=g).to(dt)
    if dt == u8:
        lo = 1 if spec.kind == "pos" else 0
        return torch.randint(lo, 10, shape, generator=g).to(dt)
    if spec.kind == "pos":
        return torch.randint(1, 6, shape, generator=g).to(dt)
    return torch.randint(-5, 6, shape, generator=g).to(dt)


# --------------------------------------------------------------------------
# the case table
# --------------------------------------------------------------------------


class Fn(nn.Module):
    def __init__(self, f: Callable):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


@dataclass
class Case:
    op: str  # directory
    name: str  # without the dtype suffix
    make: Callable[[torch.dtype], nn.Module]
    inputs: List[In]
    dtypes: List[torch.dtype]
    tol: Dict[torch.dtype, Dict[str, float]] = field(default_factory=dict)
    # ops kept whole instead of decomposed by to_edge (to reach e.g. `aten::roll.out`)
    preserve: List[Any] = field(default_factory=list)
    # "values" (default): outputs compared elementwise; "stats": random ops, compared by
    # shape, dtype and summary statistics (see docs/adding-an-op.md)
    check: str = "values"


CASES: List[Case] = []


def case(op, name, f, inputs, dtypes=(f32,), module=False, tol=None, preserve=(), check="values"):
    """`f` is a function of the inputs, or (module=True) a factory dtype -> nn.Module.

    `preserve`: op overloads (`torch.ops.aten.roll.default`) that to_edge must not decompose.
    `check`: "values", or "stats" for random ops."""
    make = f if module else (lambda dt, f=f: Fn(f))
    CASES.append(Case(op, name, make, list(inputs), list(dtypes), tol or {}, list(preserve), check))


def loose(atol, rtol, dts=(f16, bf16)):
    return {d: {"atol": atol, "rtol": rtol} for d in dts}


# ExecuTorch's portable kernels accumulate some float64 reductions (sum over a dim,
# layer_norm, group_norm) in float32: its goldens differ from eager f64 by ~1e-7.
F64_ET = loose(1e-6, 1e-6, [f64])


def build_table():
    # ---- binary arithmetic
    case("add", "add", lambda a, b: a + b, [T(2, 3), T(2, 3)], ALL)
    case("add", "add_bcast", lambda a, b: a + b, [T(2, 1, 4), T(3, 1)], [f32, f16, i64])
    case("add", "add_alpha", lambda a, b: torch.add(a, b, alpha=2), [T(3, 4), T(4)], [f32, f64, i32])
    case("add", "add_scalar", lambda a: a + 2, [T(5)], [f32, i64, u8])
    case("add", "add_mixed_f32_i64", lambda a, b: a + b, [T(2, 3), T(2, 3, dtype=i64)], [f32])
    case("add", "add_mixed_i32_bool", lambda a, b: a + b, [T(4), T(4, dtype=b8)], [i32])
    case("sub", "sub", lambda a, b: a - b, [T(2, 3), T(2, 3)], REALS)
    case("sub", "sub_bcast_alpha", lambda a, b: torch.sub(a, b, alpha=3), [T(2, 3, 4), T(1, 4)], [f32, i64])
    case("sub", "sub_scalar", lambda a: a - 1.5, [T(6)], [f32, bf16])
    case("mul", "mul", lambda a, b: a * b, [T(2, 3), T(2, 3)], ALL)
    case("mul", "mul_bcast", lambda a, b: a * b, [T(4, 1), T(1, 5)], [f32, i8])
    case("mul", "mul_scalar", lambda a: a * 3, [T(2, 5)], [f32, f16, i32])
    case("div", "div", lambda a, b: a / b, [T(3, 4), P(3, 4)], FLOATS)
    case("div", "div_int", lambda a, b: a / b, [T(3, 4), P(3, 4)], [i64, i32])
    case("div", "div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), [T(3, 4), P(3, 4)], [f32, f64, i64, i32])
    case("div", "div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), [T(3, 4), P(3, 4)], [f32, i64])
    case("div", "div_floor_neg", lambda a: torch.div(a, -3, rounding_mode="floor"), [T(8)], [f32, i64])
    case("div", "div_scalar", lambda a: a / 4, [T(7)], [f32, f16])
    case("rsub", "rsub", lambda a: torch.rsub(a, 2), [T(2, 3)], [f32, f64, i64, i32])
    case("rsub", "rsub_alpha", lambda a: torch.rsub(a, 1.5, alpha=2), [T(5)], [f32])
    case("pow", "pow_tensor_scalar", lambda a: a**2, [T(2, 3)], [f32, f64, f16, i64, i32])
    case("pow", "pow_tensor_scalar_frac", lambda a: a**0.5, [P(6)], [f32, f64])
    case("pow", "pow_tensor_tensor", lambda a, b: torch.pow(a, b), [P(2, 3), T(2, 3)], [f32, f64])
    case("pow", "pow_scalar_tensor", lambda a: torch.pow(2.0, a), [T(6)], [f32])
    case("maximum", "maximum", torch.maximum, [T(2, 3), T(2, 3)], REALS)
    case("maximum", "maximum_bcast", torch.maximum, [T(3, 1), T(4)], [f32])
    case("minimum", "minimum", torch.minimum, [T(2, 3), T(2, 3)], REALS)
    case("where", "where", lambda c, a, b: torch.where(c, a, b), [Mask(2, 3), T(2, 3), T(2, 3)], ALL)
    case("where", "where_bcast", lambda c, a, b: torch.where(c, a, b), [Mask(3, 1), T(1, 4), T(3, 4)], [f32, i64])
    case("where", "where_scalar", lambda c, a: torch.where(c, a, 0.0), [Mask(5), T(5)], [f32])
    # ---- comparisons
    for cmp in ["eq", "ne", "lt", "le", "gt", "ge"]:
        fn = getattr(torch, cmp)
        dts = ALL if cmp in ("eq", "ne") else REALS
        case(cmp, cmp, fn, [T(3, 4), T(3, 4)], dts)
        case(cmp, f"{cmp}_scalar", lambda a, fn=fn: fn(a, 0), [T(6)], [f32, i64])
        case(cmp, f"{cmp}_bcast", fn, [T(2, 1), T(3)], [f32, i32])
    # ---- activations / clamps
    case("clamp", "clamp", lambda a: torch.clamp(a, -0.5, 0.5), [T(3, 4)], FLOATS)
    case("clamp", "clamp_int", lambda a: torch.clamp(a, -2, 3), [T(3, 4)], [i64, i32, i8])
    case("clamp", "clamp_min", lambda a: torch.clamp(a, min=0.1), [T(6)], [f32])
    case("clamp", "clamp_max", lambda a: torch.clamp(a, max=0), [T(6)], [f32, i64])
    case("clamp", "clamp_tensor", lambda a, lo, hi: torch.clamp(a, lo, hi), [T(2, 3), T(2, 3), P(3)], [f32])
    case("hardtanh", "hardtanh", F.hardtanh, [T(3, 4)], FLOATS)
    case("hardtanh", "relu6", F.relu6, [T(3, 4)], [f32])
    case("relu", "relu", torch.relu, [T(3, 4)], REALS)
    case("gelu", "gelu", F.gelu, [T(3, 4)], FLOATS, tol=loose(1e-2, 1e-2))
    case("gelu", "gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [T(3, 4)], FLOATS, tol=loose(1e-2, 1e-2))
    case("sigmoid", "sigmoid", torch.sigmoid, [T(3, 4)], FLOATS)
    case("sigmoid", "sigmoid_int", torch.sigmoid, [T(3, 4)], [i64, i32])
    case("tanh", "tanh", torch.tanh, [T(3, 4)], FLOATS)
    case("silu", "silu", F.silu, [T(3, 4)], FLOATS, tol=loose(1e-2, 1e-2))
    case("leaky_relu", "leaky_relu", lambda a: F.leaky_relu(a, 0.1), [T(3, 4)], [f32, f16])
    case("elu", "elu", F.elu, [T(3, 4)], [f32])
    # ---- unary math
    case("exp", "exp", torch.exp, [T(3, 4)], FLOATS + [i64])
    case("log", "log", torch.log, [P(3, 4)], FLOATS + [i32])
    case("sqrt", "sqrt", torch.sqrt, [P(3, 4)], FLOATS + [i64])
    case("rsqrt", "rsqrt", torch.rsqrt, [P(3, 4)], FLOATS)
    case("neg", "neg", torch.neg, [T(3, 4)], REALS)
    case("abs", "abs", torch.abs, [T(3, 4)], REALS)
    case("erf", "erf", torch.erf, [T(3, 4)], FLOATS)
    case("reciprocal", "reciprocal", torch.reciprocal, [P(3, 4)], FLOATS + [i32])
    case("floor", "floor", torch.floor, [T(3, 4)], [f32, f64])
    case("round", "round", torch.round, [T(3, 4)], [f32])
    case("sin", "sin", torch.sin, [T(3, 4)], [f32, f16])
    case("cos", "cos", torch.cos, [T(3, 4)], [f32])
    # ---- reductions
    case("sum", "sum_dim", lambda a: a.sum(1), [T(3, 4, 2)], REALS + [b8], tol={**loose(2e-2, 2e-2), **F64_ET})
    case("sum", "sum_keepdim", lambda a: a.sum((0, 2), keepdim=True), [T(3, 4, 2)], [f32, i64])
    case("sum", "sum_all", lambda a: a.sum(), [T(3, 5)], [f32, f64, i32])
    case("sum", "sum_dtype", lambda a: a.sum(-1, dtype=torch.float32), [T(2, 6)], [f16, i64])
    case("mean", "mean_dim", lambda a: a.mean(-1), [T(3, 4, 5)], FLOATS, tol=loose(1e-2, 1e-2))
    case("mean", "mean_keepdim", lambda a: a.mean((1, 2), keepdim=True), [T(2, 3, 4)], [f32])
    case("mean", "mean_all", lambda a: a.mean(), [T(4, 4)], [f32, f64])
    case("amax", "amax", lambda a: a.amax(1), [T(3, 5)], REALS)
    case("amax", "amax_keepdim", lambda a: a.amax((0, 1), keepdim=True), [T(2, 3, 2)], [f32])
    case("amin", "amin", lambda a: a.amin(0), [T(3, 5)], [f32, i64])
    case("argmax", "argmax", lambda a: a.argmax(1), [T(3, 5)], [f32, f64, i64, i32, u8])
    case("argmax", "argmax_keepdim", lambda a: a.argmax(0, keepdim=True), [T(4, 3)], [f32])
    case("argmax", "argmax_all", lambda a: a.argmax(), [T(3, 4)], [f32])
    case("argmin", "argmin", lambda a: a.argmin(-1), [T(3, 5)], [f32, i32])
    case("var", "var_unbiased", lambda a: a.var(1), [T(3, 6)], [f32, f64])
    case("var", "var_biased_keepdim", lambda a: a.var(-1, unbiased=False, keepdim=True), [T(2, 3, 5)], [f32])
    case("softmax", "softmax", lambda a: torch.softmax(a, -1), [T(3, 5)], [f32, f64, f16, bf16], tol=loose(1e-2, 1e-2))
    case("softmax", "softmax_dim0", lambda a: torch.softmax(a, 0), [T(4, 3, 2)], [f32])
    case("log_softmax", "log_softmax", lambda a: torch.log_softmax(a, -1), [T(3, 5)], [f32, f64, f16, bf16], tol=loose(2e-2, 1e-2))
    case("log_softmax", "log_softmax_dim1", lambda a: torch.log_softmax(a, 1), [T(2, 4, 3)], [f32])
    case("cumsum", "cumsum", lambda a: torch.cumsum(a, 1), [T(3, 5)], [f32, f64, i64, i32], tol=loose(1e-2, 1e-2))
    case("cumsum", "cumsum_dim0", lambda a: torch.cumsum(a, 0), [T(4, 3)], [f32, f16], tol=loose(1e-2, 1e-2))
    case("prod", "prod", lambda a: torch.prod(a, 1), [T(3, 4)], [f32, i64])
    case("any", "any", lambda a: torch.any(a, 1), [T(3, 4)], [b8, f32])
    # ---- linear algebra
    mmtol = loose(2e-2, 2e-2)
    case("mm", "mm", torch.mm, [T(3, 4), T(4, 5)], [f32, f64, f16, bf16, i64], tol=mmtol)
    case("bmm", "bmm", torch.bmm, [T(2, 3, 4), T(2, 4, 5)], [f32, f64, f16, bf16, i32], tol=mmtol)
    case("addmm", "addmm", torch.addmm, [T(5), T(3, 4), T(4, 5)], [f32, f64, f16], tol=mmtol)
    case("addmm", "addmm_alpha_beta", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), [T(3, 5), T(3, 4), T(4, 5)], [f32])
    case("linear", "linear", lambda dt: nn.Linear(6, 4).to(dt), [T(3, 6)], [f32, f64, f16, bf16], module=True, tol=mmtol)
    case("linear", "linear_3d_nobias", lambda dt: nn.Linear(6, 4, bias=False).to(dt), [T(2, 3, 6)], [f32], module=True)
    case("matmul", "matmul_bcast", torch.matmul, [T(2, 3, 4), T(4, 2)], [f32])
    # ---- convolution / pooling / norms
    ctol = loose(3e-2, 3e-2)
    def conv(op, name, ctor, shape, dts=(f32,)):
        case(op, name, lambda dt, ctor=ctor: ctor().to(dt), [T(*shape)], list(dts), module=True, tol=ctol)
    conv("conv1d", "conv1d", lambda: nn.Conv1d(3, 4, 3), (2, 3, 10), [f32, f64, f16, bf16])
    conv("conv1d", "conv1d_stride_pad_dil", lambda: nn.Conv1d(4, 4, 3, stride=2, padding=2, dilation=2, groups=2), (1, 4, 11))
    conv("conv2d", "conv2d", lambda: nn.Conv2d(3, 4, 3), (1, 3, 6, 6), [f32, f64, f16, bf16])
    conv("conv2d", "conv2d_stride_pad", lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1), (2, 3, 7, 7))
    conv("conv2d", "conv2d_depthwise", lambda: nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), (1, 4, 5, 5))
    conv("conv2d", "conv2d_groups_dilation", lambda: nn.Conv2d(4, 6, (3, 2), dilation=(2, 1), groups=2), (1, 4, 8, 6))
    conv("conv2d", "conv2d_1x1", lambda: nn.Conv2d(8, 3, 1), (1, 8, 3, 3))
    conv("conv_transpose2d", "conv_transpose2d", lambda: nn.ConvTranspose2d(3, 2, 3), (1, 3, 4, 4), [f32, f64])
    conv("conv_transpose2d", "conv_transpose2d_stride_pad", lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2), (1, 4, 3, 3))
    conv("conv_transpose1d", "conv_transpose1d", lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), (1, 3, 5))

    def bn(dt):
        m = nn.BatchNorm2d(3).eval()
        with torch.no_grad():
            m.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
            m.running_var.copy_(torch.tensor([0.5, 1.5, 2.0]))
            m.weight.copy_(torch.tensor([1.0, 0.5, -1.0]))
            m.bias.copy_(torch.tensor([0.0, 0.2, -0.1]))
        return m.to(dt)

    case("batch_norm", "batch_norm2d_eval", bn, [T(2, 3, 4, 4)], [f32, f64, f16], module=True, tol=ctol)
    case("batch_norm", "batch_norm1d_eval", lambda dt: nn.BatchNorm1d(4).eval().to(dt), [T(3, 4)], [f32], module=True)
    case("layer_norm", "layer_norm", lambda dt: nn.LayerNorm(6).to(dt), [T(2, 3, 6)], [f32, f64, f16, bf16], module=True, tol={**ctol, **F64_ET})
    case("layer_norm", "layer_norm_2d_noaffine", lambda dt: nn.LayerNorm((3, 4), elementwise_affine=False).to(dt), [T(2, 3, 4)], [f32], module=True)
    case("group_norm", "group_norm", lambda dt: nn.GroupNorm(2, 4).to(dt), [T(2, 4, 3, 3)], [f32, f64], module=True, tol=F64_ET)
    case("max_pool2d", "max_pool2d", lambda a: F.max_pool2d(a, 2), [T(1, 2, 6, 6)], [f32, f64, f16, bf16, i64])
    case("max_pool2d", "max_pool2d_stride_pad", lambda a: F.max_pool2d(a, 3, stride=2, padding=1), [T(2, 2, 7, 7)], [f32])
    case("max_pool2d", "max_pool2d_ceil_dil", lambda a: F.max_pool2d(a, 2, stride=2, dilation=2, ceil_mode=True), [T(1, 1, 7, 7)], [f32])
    case("avg_pool2d", "avg_pool2d", lambda a: F.avg_pool2d(a, 2), [T(1, 2, 6, 6)], [f32, f64, f16], tol=ctol)
    case("avg_pool2d", "avg_pool2d_pad_nocount", lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, count_include_pad=False), [T(1, 2, 7, 7)], [f32])
    case("avg_pool2d", "avg_pool2d_pad_count_ceil", lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, ceil_mode=True), [T(1, 2, 6, 6)], [f32])
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_1", lambda a: F.adaptive_avg_pool2d(a, 1), [T(2, 3, 4, 4)], [f32, f64, f16], tol=ctol)
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_uneven", lambda a: F.adaptive_avg_pool2d(a, (2, 3)), [T(1, 2, 5, 7)], [f32])
    case("upsample", "nearest_x2", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), [T(1, 2, 3, 3)], [f32, f64, f16, i64, u8])
    case("upsample", "nearest_size", lambda a: F.interpolate(a, size=(5, 7), mode="nearest"), [T(1, 1, 3, 4)], [f32])
    case("upsample", "bilinear_x2", lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), [T(1, 2, 3, 3)], [f32, f64, f16], tol=ctol)
    case("upsample", "bilinear_align", lambda a: F.interpolate(a, size=(5, 6), mode="bilinear", align_corners=True), [T(1, 1, 3, 4)], [f32])
    case("pixel_shuffle", "pixel_shuffle", lambda a: F.pixel_shuffle(a, 2), [T(1, 8, 2, 3)], [f32, i64])
    # ---- embedding / indexing
    case("embedding", "embedding", lambda w, i: F.embedding(i, w), [T(10, 4), Idx((2, 3), 10)], [f32, f64, f16, bf16, i64])
    case("embedding", "embedding_i32_idx", lambda w, i: F.embedding(i, w), [T(10, 4), Idx((5,), 10, dtype=i32)], [f32])
    case("index_select", "index_select", lambda a, i: torch.index_select(a, 1, i), [T(3, 5), Idx((4,), 5)], [f32, i64, b8, f16])
    case("index_select", "index_select_dim0", lambda a, i: torch.index_select(a, 0, i), [T(4, 2, 3), Idx((3,), 4)], [f32])
    case("gather", "gather", lambda a, i: torch.gather(a, 1, i), [T(3, 5), Idx((3, 2), 5)], [f32, i64, u8])
    case("gather", "gather_dim0", lambda a, i: torch.gather(a, 0, i), [T(3, 4), Idx((2, 4), 3)], [f32])
    case("index", "index_1", lambda a, i: a[i], [T(5, 3), Idx((4,), 5)], [f32, i32, b8])
    case("index", "index_2", lambda a, i, j: a[i, j], [T(4, 5), Idx((3,), 4), Idx((3,), 5)], [f32])
    case("index", "index_mid", lambda a, i: a[:, i], [T(2, 5, 3), Idx((2, 2), 5)], [f32])
    case("index", "index_bool_mask_free", lambda a, i, j: a[i, :, j], [T(3, 2, 4), Idx((2,), 3), Idx((2,), 4)], [f32])
    case("masked_fill", "masked_fill", lambda a, m: a.masked_fill(m, -1.0), [T(3, 4), Mask(3, 4)], [f32, f64, f16, bf16])
    case("masked_fill", "masked_fill_bcast", lambda a, m: a.masked_fill(m, float("-inf")), [T(2, 3, 4), Mask(1, 4)], [f32])
    case("masked_fill", "masked_fill_int", lambda a, m: a.masked_fill(m, 7), [T(3, 4), Mask(3, 4)], [i64, i32, u8])
    # ---- shape ops
    case("cat", "cat", lambda a, b: torch.cat([a, b], 1), [T(2, 3), T(2, 4)], ALL)
    case("cat", "cat3_dim0", lambda a, b, c: torch.cat([a, b, c]), [T(1, 3), T(2, 3), T(3, 3)], [f32])
    case("cat", "cat_mixed", lambda a, b: torch.cat([a, b], -1), [T(2, 2), T(2, 3, dtype=i64)], [f32])
    case("stack", "stack", lambda a, b: torch.stack([a, b], 1), [T(2, 3), T(2, 3)], [f32, i64, b8, f16])
    case("stack", "stack_last", lambda a, b, c: torch.stack([a, b, c], -1), [T(4), T(4), T(4)], [f32])
    case("split", "split", lambda a: torch.split(a, 2, 1), [T(3, 5)], [f32, i64, bf16])
    case("split", "split_sizes", lambda a: torch.split(a, [1, 3], 0), [T(4, 2)], [f32])
    case("split", "chunk", lambda a: torch.chunk(a, 3, -1), [T(2, 6)], [f32])
    case("permute", "permute", lambda a: a.permute(2, 0, 1), [T(2, 3, 4)], ALL)
    case("permute", "permute_4d", lambda a: a.permute(0, 2, 3, 1), [T(1, 2, 3, 4)], [f32])
    case("transpose", "transpose", lambda a: a.transpose(0, 1), [T(3, 4)], [f32, i64, f16])
    case("transpose", "transpose_3d", lambda a: a.transpose(-1, -3), [T(2, 3, 4)], [f32])
    case("transpose", "t", lambda a: a.t(), [T(3, 5)], [f32])
    case("slice", "slice", lambda a: a[:, 1:4], [T(3, 5)], [f32, i64, b8, bf16])
    case("slice", "slice_step", lambda a: a[1::2, ::3], [T(5, 7)], [f32])
    case("slice", "slice_neg", lambda a: a[..., -3:-1], [T(2, 3, 5)], [f32])
    case("select", "select", lambda a: a[1], [T(3, 4)], [f32, i64, f16, b8])
    case("select", "select_neg", lambda a: a[:, -1], [T(2, 3, 4)], [f32])
    case("expand", "expand", lambda a: a.expand(3, 4), [T(1, 4)], [f32, i64, b8])
    case("expand", "expand_new_dims", lambda a: a.expand(2, 3, 4), [T(3, 1)], [f32])
    case("unsqueeze", "unsqueeze", lambda a: a.unsqueeze(1), [T(3, 4)], [f32, i64])
    case("unsqueeze", "unsqueeze_neg", lambda a: a.unsqueeze(-1), [T(3, 4)], [f32])
    case("squeeze", "squeeze_dim", lambda a: a.squeeze(1), [T(3, 1, 4)], [f32, i64])
    case("squeeze", "squeeze_all", lambda a: a.squeeze(), [T(1, 3, 1, 4)], [f32])
    case("view", "view", lambda a: a.view(4, 3), [T(2, 6)], [f32, i64, b8])
    case("view", "reshape_infer", lambda a: a.reshape(-1, 2), [T(2, 3, 2)], [f32])
    case("view", "flatten", lambda a: a.flatten(1), [T(2, 3, 4)], [f32])
    case("flip", "flip", lambda a: a.flip(1), [T(3, 4)], [f32, i64, b8])
    case("flip", "flip_2dims", lambda a: a.flip((0, 2)), [T(2, 3, 4)], [f32])
    case("roll", "roll", lambda a: torch.roll(a, 2, 1), [T(3, 5)], [f32, i64])
    case("roll", "roll_2dims", lambda a: torch.roll(a, (1, -2), (0, 1)), [T(3, 4)], [f32])
    case("constant_pad", "pad", lambda a: F.pad(a, (1, 2)), [T(2, 3)], [f32, i64, f16])
    case("constant_pad", "pad_value_2d", lambda a: F.pad(a, (1, 0, 2, 1), value=-1.5), [T(1, 2, 3, 3)], [f32])
    case("tril", "tril", torch.tril, [T(4, 4)], [f32, i64, b8])
    case("tril", "tril_offset", lambda a: torch.tril(a, -1), [T(2, 3, 5)], [f32])
    case("repeat", "repeat", lambda a: a.repeat(2, 3), [T(2, 2)], [f32, i64])
    # ---- creation
    case("arange", "arange", lambda a: a + torch.arange(5, dtype=a.dtype), [T(5)], [f32, i64, i32])
    case("arange", "arange_start_step", lambda a: a * torch.arange(1, 10, 2), [T(5, dtype=i64)], [i64])
    case("arange", "arange_float", lambda a: a + torch.arange(0.0, 1.0, 0.25), [T(4)], [f32])
    case("full", "full", lambda a: a + torch.full((2, 3), 1.5), [T(2, 3)], [f32])
    case("full", "full_int", lambda a: a * torch.full((3,), 4, dtype=torch.int64), [T(3)], [i64])
    case("full", "full_like", lambda a: torch.full_like(a, 7), [T(2, 3)], [f32, i32])
    case("zeros_like", "zeros_like", lambda a: torch.zeros_like(a), [T(2, 3)], [f32, i64, b8])
    case("zeros_like", "ones_like", lambda a: torch.ones_like(a), [T(2, 3)], [f32, i32])
    case("zeros_like", "zeros", lambda a: a + torch.zeros(2, 3), [T(2, 3)], [f32])
    # ---- copies / casts
    for src in [f32, f64, f16, bf16, i64, i32, u8, b8]:
        for dst in [f32, f64, f16, bf16, i64, i32, u8, b8]:
            if src == dst:
                continue
            if src not in (f32, i64) and dst not in (f32, i64):
                continue
            # float -> uint8 of a negative value is undefined in C++ (x86 wraps, ARM saturates):
            # only defined conversions are compared.
            spec = P(3, 4) if dst == u8 and src.is_floating_point else T(3, 4)
            case("to_copy", f"to_{SHORT[dst]}", lambda a, dst=dst: a.to(dst), [spec], [src])
    case("clone", "clone", torch.clone, [T(3, 4)], [f32, i64, b8])
    case("clone", "contiguous", lambda a: a.transpose(0, 1).contiguous(), [T(3, 4)], [f32])
    case("topk", "topk", lambda a: tuple(torch.topk(a, 2)), [T(3, 5)], [f32, f64, i64])
    case("topk", "topk_smallest_dim0", lambda a: tuple(torch.topk(a, 3, dim=0, largest=False)), [T(4, 3)], [f32])


def build_more_tables():
    """Case tables kept in their own modules (tools/export/ops_cases_*.py), each with a
    `build(ns)` taking this module's namespace (case, T, P, Idx, Mask, the dtype names...)."""
    import importlib

    sys.path.insert(0, str(HERE))
    ns = globals()
    for path in sorted(HERE.glob("ops_cases_*.py")):
        importlib.import_module(path.stem).build(ns)


# --------------------------------------------------------------------------
# export and run
# --------------------------------------------------------------------------


def op_name(op) -> str:
    return f"{op.name}.{op.overload}" if op.overload else op.name


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    if t.dtype == bf16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def flatten(o) -> List[Any]:
    if isinstance(o, (tuple, list)):
        r = []
        for e in o:
            r.extend(flatten(e))
        return r
    return [o]


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    d = (a.to(torch.float64) - b.to(torch.float64)).abs()
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    d = torch.where(same, torch.zeros_like(d), d)
    m = float(d.max())
    return m if m == m else float("inf")


def short_reason(e: BaseException) -> str:
    s = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
    return s[:300]


def run_case(c: Case, dt: torch.dtype, outdir: Path, blob: bytearray) -> Dict[str, Any]:
    from executorch.exir import EdgeCompileConfig, to_edge
    from executorch.runtime import Runtime

    name = f"{c.name}_{SHORT[dt]}"
    seed = zlib.crc32(name.encode())
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    inputs = tuple(make_input(s, dt, g) for s in c.inputs)
    try:
        module = c.make(dt).eval()
        with torch.no_grad():
            eager = flatten(module(*[x.clone() for x in inputs]))
        ep = torch.export.export(module, inputs, strict=False)
        config = EdgeCompileConfig(_check_ir_validity=not c.preserve, preserve_ops=list(c.preserve))
        et = to_edge(ep, compile_config=config).to_executorch()
    except Exception as e:
        return {"name": name, "skipped": True, "stage": "export", "reason": short_reason(e)}
    plan = et.executorch_program.execution_plan[0]
    ops = sorted({op_name(o) for o in plan.operators})
    pte = outdir / f"{name}.pte"
    buf = et.buffer
    try:
        method = Runtime.get().load_program(buf).load_method("forward")
        outs = list(method.execute(list(inputs)))
    except Exception as e:
        return {"name": name, "skipped": True, "stage": "run", "reason": short_reason(e), "operators": ops}
    if any(not isinstance(o, torch.Tensor) for o in outs):
        return {"name": name, "skipped": True, "stage": "run", "reason": "non-tensor output", "operators": ops}
    pte.write_bytes(buf)

    def put(t: torch.Tensor) -> Dict[str, Any]:
        while len(blob) % 8:
            blob.append(0)
        b = tensor_bytes(t)
        d = {"dtype": DTYPE_NAME[t.dtype], "shape": list(t.shape), "offset": len(blob), "nbytes": len(b)}
        blob.extend(b)
        return d

    diff = max((max_abs_diff(o, e) for o, e in zip(outs, eager)), default=0.0) if len(outs) == len(eager) else None
    rec: Dict[str, Any] = {
        "name": name,
        "pte": pte.name,
        "dtype": DTYPE_NAME[dt],
        "operators": ops,
        "inputs": [put(x) for x in inputs],
        "outputs": [put(o) for o in outs],
        "eager_max_abs_diff": diff if diff is None or diff < float("inf") else "inf",
    }
    if dt in c.tol:
        rec["tolerance"] = c.tol[dt]
    if c.check != "values":
        rec["check"] = c.check
    return rec


def export_op(op: str, cases: List[Case], root: Path) -> Dict[str, int]:
    outdir = root / op
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    blob = bytearray()
    recs, skipped = [], []
    for c in cases:
        for dt in c.dtypes:
            r = run_case(c, dt, outdir, blob)
            if r.get("skipped"):
                r.pop("skipped")
                skipped.append(r)
                print(f"   skip {r['name']}: {r['stage']}: {r['reason'][:120]}")
            else:
                recs.append(r)
    (outdir / "data.bin").write_bytes(bytes(blob))
    doc = {
        "op": op,
        "versions": {"torch": torch.__version__, "executorch": _et_version()},
        "data": "data.bin",
        "cases": recs,
        "skipped": skipped,
    }
    (outdir / "cases.json").write_text(json.dumps(doc, indent=1) + "\n")
    ops = sorted({o for r in recs for o in r["operators"]})
    print(f"== {op}: {len(recs)} cases, {len(skipped)} skipped; {', '.join(ops)}")
    return {"cases": len(recs), "skipped": len(skipped)}


def _et_version() -> str:
    try:
        from importlib.metadata import version

        return version("executorch")
    except Exception:
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "testdata" / "ops"))
    ap.add_argument("--only", nargs="+", metavar="OP")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--skip-existing", action="store_true", help="skip ops whose directory exists (parallel runs)")
    ap.add_argument("--reverse", action="store_true", help="go through the ops in reverse order")
    args = ap.parse_args()
    build_table()
    build_more_tables()
    by_op: Dict[str, List[Case]] = {}
    for c in CASES:
        by_op.setdefault(c.op, []).append(c)
    if args.list:
        for op, cs in by_op.items():
            for c in cs:
                print(f"{op:20} {c.name:32} {' '.join(SHORT[d] for d in c.dtypes)}")
        return 0
    unknown = set(args.only or []) - set(by_op)
    if unknown:
        ap.error(f"unknown op(s) {sorted(unknown)}")
    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    total = {"cases": 0, "skipped": 0}
    for op, cs in reversed(by_op.items()) if args.reverse else by_op.items():
        if args.only and op not in args.only:
            continue
        if args.skip_existing and (root / op).exists():
            continue
        r = export_op(op, cs, root)
        for k in total:
            total[k] += r[k]
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(f"total: {total['cases']} cases, {total['skipped']} skipped; testdata/ops is {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
