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
                                    little-endian bytes (C order, or the tensor's dim_order
                                    when it has one), each tensor starting at a multiple of 8

cases.json:

    {"op": "add", "versions": {...}, "data": "data.bin",
     "cases": [{"name": "add_f32", "pte": "add_f32.pte", "dtype": "float32",
                "operators": ["aten::add.out"],
                "inputs":   [{"dtype": "float32", "shape": [2, 3], "offset": 0, "nbytes": 24}],
                "outputs":  [{"dtype": "float32", "shape": [2, 3], "offset": 24, "nbytes": 24}],
                "tolerance": {"atol": 1e-5, "rtol": 1e-5},      # only when the case overrides
                "check": "stats" | "topk", "meta": {...},        # only when not "values"
                "eager_max_abs_diff": 0.0}],                     # ExecuTorch vs eager (info)
     "skipped": [{"name": "add_u8", "stage": "export" | "run" | "eager", "reason": "..."}]}

A tensor spec may carry "dim_order" (the program's, when not the default): its bytes are laid
out in that order. cases.json holds one case per line.

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
# every dtype ExecuTorch's portable kernels can take; a case lists EVERY and the dtypes
# ExecuTorch rejects end up under "skipped" with its reason
EVERY = [f32, f64, f16, bf16, i64, i32, i16, i8, u8, b8]

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
    kind: str = "normal"  # normal | pos | int | bool | unit | ge1 | special (see make_input)
    lo: int = 0
    hi: int = 0
    # "channels_last": a 4-d (channels_last) or 5-d (channels_last_3d) input, stored and fed
    # in that dim order
    layout: str = "contiguous"


def T(*shape, dtype=None, cl=False):
    return In(shape, dtype, layout="channels_last" if cl else "contiguous")


def P(*shape, dtype=None, cl=False):
    return In(shape, dtype, "pos", layout="channels_last" if cl else "contiguous")


def U(*shape, dtype=None):
    """Values in (-1, 1) (asin, atanh...); integers in {-1, 0, 1}."""
    return In(shape, dtype, "unit")


def G1(*shape, dtype=None):
    """Values >= 1 (acosh); integers in 1..5."""
    return In(shape, dtype, "ge1")


def S(*shape, dtype=None):
    """Normal values with some inf, -inf and NaN mixed in (floats only)."""
    return In(shape, dtype, "special")


def Idx(shape, hi, lo=0, dtype=i64):
    return In(shape, dtype, "int", lo, hi)


def Mask(*shape):
    return In(shape, b8, "bool")


def make_input(spec: In, case_dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    t = _make_values(spec, case_dtype, g)
    if spec.layout == "channels_last":
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}[t.dim()]
        t = t.to(memory_format=fmt)
    return t


def _make_values(spec: In, case_dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    dt = spec.dtype or case_dtype
    shape = tuple(spec.shape)
    if spec.kind == "unit":
        if dt.is_floating_point:
            return ((torch.rand(shape, generator=g) * 2 - 1) * 0.95).to(dt)
        lo = 0 if dt in (u8, b8) else -1
        return torch.randint(lo, 2, shape, generator=g).to(dt)
    if spec.kind == "ge1":
        if dt.is_floating_point:
            return (torch.rand(shape, generator=g) * 3 + 1).to(dt)
        return torch.randint(1, 6, shape, generator=g).to(dt)
    if spec.kind == "special" and dt.is_floating_point:
        t = torch.randn(shape, generator=g)
        flat = t.view(-1)
        for k, v in enumerate([float("inf"), float("-inf"), float("nan")]):
            if k < flat.numel():
                flat[(k * 5 + 1) % flat.numel()] = v
        return t.to(dt)
    if spec.kind == "perm":
        # distinct values along the last dim (no ties: sort orders are unambiguous)
        n = shape[-1]
        rows = [torch.randperm(n, generator=g) for _ in range(max(1, int(torch.tensor(shape[:-1]).prod())))]
        t = torch.stack(rows).reshape(shape)
        return (t if dt in (u8, b8) else t - n // 2).to(dt)
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
    # export without dim-order ops (`EdgeCompileConfig(_skip_dim_order=True)`): emits
    # `aten::_to_copy.out`, `aten::clone.out`, `aten::empty.out` instead of the dim_order_ops
    skip_dim_order: bool = False
    # edits the edge program's graph module before to_executorch (reaching an out variant
    # no export path emits, e.g. `_native_batch_norm_legit.out`); see `retarget`
    edit: Optional[Callable[[Any], None]] = None
    # edits the emitted program (`executorch_program`, before serialization) — a last resort
    # where ExecuTorch's kernel disagrees with the program it is given (see _default_out_dim_order)
    post: Optional[Callable[[Any], None]] = None
    # extra fields for the runner's check (e.g. {"dim": 1} for check="topk"; {"mean", "std"}
    # expected of a check="stats" case), recorded as the case's "meta"
    meta: Dict[str, Any] = field(default_factory=dict)


CASES: List[Case] = []


def case(op, name, f, inputs, dtypes=(f32,), module=False, tol=None, preserve=(), check="values",
         skip_dim_order=False, edit=None, meta=None, post=None):
    """`f` is a function of the inputs, or (module=True) a factory dtype -> nn.Module.

    `preserve`: op overloads (`torch.ops.aten.roll.default`) that to_edge must not decompose.
    `check`: "values", or "stats" for random ops.
    `skip_dim_order`: export with `_skip_dim_order=True` (aten::_to_copy/clone/empty).
    `edit`: a function of the edge program's graph module, run before to_executorch.
    `meta`: extra fields for the runner's check, recorded in cases.json as "meta"."""
    make = f if module else (lambda dt, f=f: Fn(f))
    CASES.append(Case(op, name, make, list(inputs), list(dtypes), tol or {}, list(preserve), check,
                      skip_dim_order, edit, post, dict(meta or {})))


def retarget(mapping, drop_kwargs=(), extra_args=None):
    """An `edit` that replaces every call of edge op `src` by `dst` (`mapping` {src: dst}, edge
    dialect ops from `executorch.exir.dialects._ops.ops`), dropping the keyword arguments named
    in `drop_kwargs` and appending `extra_args` (a tuple) to the positional ones."""

    def edit(gm):
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in mapping:
                node.target = mapping[node.target]
                node.kwargs = {k: v for k, v in node.kwargs.items() if k not in drop_kwargs}
                if extra_args is not None:
                    node.args = tuple(node.args) + tuple(extra_args)
        gm.recompile()

    return edit


def loose(atol, rtol, dts=(f16, bf16)):
    return {d: {"atol": atol, "rtol": rtol} for d in dts}


# ExecuTorch's portable kernels accumulate some float64 reductions (sum over a dim,
# layer_norm, group_norm) in float32: its goldens differ from eager f64 by ~1e-7.
F64_ET = loose(1e-6, 1e-6, [f64])


class _Inplace(nn.Module):
    """A mutable buffer overwritten by the input (`aten::copy_` write-back), returned cloned."""

    def __init__(self, dt, shape=(3, 4)):
        super().__init__()
        self.register_buffer("b", torch.zeros(shape, dtype=dt))

    def forward(self, x):
        self.b.copy_(x)
        return self.b.clone()


def _bn_legit_edit(gm):
    """_native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps) ->
    _native_batch_norm_legit(x, w, b, mean, var, training=False, momentum, eps)."""
    from executorch.exir.dialects._ops import ops as exir_ops

    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target == exir_ops.edge.aten._native_batch_norm_legit_no_training.default:
            a = list(node.args)
            node.target = exir_ops.edge.aten._native_batch_norm_legit.default
            node.args = tuple(a[:5] + [False] + a[5:])
    gm.recompile()


def _default_out_dim_order(program):
    """The exporter gives `nonzero`'s output the dim order [1, 0] (its meta strides), but
    ExecuTorch's nonzero kernel writes row-major whatever the dim order, so its result read
    through that dim order is scrambled: declare the outputs' default dim order, which is what
    the kernel writes."""
    plan = program.execution_plan[0]
    for vi in plan.outputs:
        v = plan.values[vi].val
        v.dim_order = list(range(len(v.sizes)))


def _lift_fresh_edit(gm):
    """The clone that lift_fresh_copy becomes -> aten::lift_fresh_copy."""
    from executorch.exir.dialects._ops import ops as exir_ops

    retarget({exir_ops.edge.dim_order_ops._clone_dim_order.default: exir_ops.edge.aten.lift_fresh_copy.default},
             drop_kwargs=("non_blocking", "dim_order"))(gm)


def build_table():
    A = torch.ops.aten
    cl = torch.channels_last
    # ---- binary arithmetic
    case("add", "add", lambda a, b: a + b, [T(2, 3), T(2, 3)], EVERY)
    case("add", "add_bcast", lambda a, b: a + b, [T(2, 1, 4), T(3, 1)], [f32, f16, i64])
    case("add", "add_alpha", lambda a, b: torch.add(a, b, alpha=2), [T(3, 4), T(4)], [f32, f64, i32])
    case("add", "add_scalar", lambda a: a + 2, [T(5)], [f32, i64, u8])
    case("add", "add_mixed_f32_i64", lambda a, b: a + b, [T(2, 3), T(2, 3, dtype=i64)], [f32])
    case("add", "add_mixed_i32_bool", lambda a, b: a + b, [T(4), T(4, dtype=b8)], [i32])
    case("add", "add_mixed_f16_f32", lambda a, b: a + b, [T(4), T(4, dtype=f32)], [f16, bf16])
    case("add", "add_0d", lambda a, b: a + b, [T(), T(2, 3)], [f32, i64])
    case("add", "add_0d_0d", lambda a, b: a + b, [T(), T()], [f32])
    case("add", "add_empty", lambda a, b: a + b, [T(0, 3), T(3)], [f32])
    case("add", "add_Scalar", lambda a: A.add.Scalar(a, 2), [T(2, 3)], EVERY)
    case("add", "add_Scalar_alpha", lambda a: A.add.Scalar(a, 3, alpha=2), [T(5)], [f32, i64])
    case("add", "add_Scalar_float_on_int", lambda a: A.add.Scalar(a, 1.5), [T(5)], [i64, i32, b8])
    case("add", "add_Scalar_bool", lambda a: A.add.Scalar(a, True), [T(5)], [f32, b8])
    case("sub", "sub", lambda a, b: a - b, [T(2, 3), T(2, 3)], EVERY)
    case("sub", "sub_bcast_alpha", lambda a, b: torch.sub(a, b, alpha=3), [T(2, 3, 4), T(1, 4)], [f32, i64])
    case("sub", "sub_scalar", lambda a: a - 1.5, [T(6)], [f32, bf16])
    case("sub", "sub_Scalar", lambda a: A.sub.Scalar(a, 2), [T(2, 3)], EVERY)
    case("sub", "sub_Scalar_alpha", lambda a: A.sub.Scalar(a, 1.5, alpha=2), [T(5)], [f32, i64])
    case("sub", "sub_0d", lambda a, b: a - b, [T(3), T()], [f32, i32])
    case("mul", "mul", lambda a, b: a * b, [T(2, 3), T(2, 3)], EVERY)
    case("mul", "mul_bcast", lambda a, b: a * b, [T(4, 1), T(1, 5)], [f32, i8])
    case("mul", "mul_scalar", lambda a: a * 3, [T(2, 5)], [f32, f16, i32])
    case("mul", "mul_mixed_bool_f32", lambda a, b: a * b, [T(2, 3), T(2, 3, dtype=f32)], [b8])
    case("mul", "mul_Scalar", lambda a: A.mul.Scalar(a, 3), [T(2, 3)], EVERY)
    case("mul", "mul_Scalar_float_on_int", lambda a: A.mul.Scalar(a, 0.5), [T(5)], [i64, u8, b8])
    case("mul", "mul_empty", lambda a, b: a * b, [T(2, 0), T(1, 0)], [f32])
    case("div", "div", lambda a, b: a / b, [T(3, 4), P(3, 4)], EVERY)
    case("div", "div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), [T(3, 4), P(3, 4)], EVERY)
    case("div", "div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), [T(3, 4), P(3, 4)], EVERY)
    case("div", "div_floor_neg", lambda a: torch.div(a, -3, rounding_mode="floor"), [T(8)], [f32, i64])
    case("div", "div_bcast_0d", lambda a, b: a / b, [T(2, 3), P()], [f32, i64])
    case("div", "div_scalar", lambda a: a / 4, [T(7)], [f32, f16])
    case("div", "div_Scalar", lambda a: A.div.Scalar(a, 4), [T(2, 3)], EVERY)
    case("div", "div_Scalar_float", lambda a: A.div.Scalar(a, -2.5), [T(5)], [f32, i32])
    case("div", "div_Scalar_mode_floor", lambda a: A.div.Scalar_mode(a, 3, rounding_mode="floor"), [T(2, 3)], EVERY, preserve=[A.div.Scalar_mode])
    case("div", "div_Scalar_mode_trunc", lambda a: A.div.Scalar_mode(a, -2, rounding_mode="trunc"), [T(2, 3)], [f32, f64, i64, i8], preserve=[A.div.Scalar_mode])
    case("div", "div_Scalar_mode_none", lambda a: A.div.Scalar_mode(a, 2, rounding_mode=None), [T(2, 3)], [f32, i64], preserve=[A.div.Scalar_mode])
    case("rsub", "rsub", lambda a: torch.rsub(a, 2), [T(2, 3)], [f32, f64, i64, i32])
    case("rsub", "rsub_alpha", lambda a: torch.rsub(a, 1.5, alpha=2), [T(5)], [f32])
    case("rsub", "rsub_Scalar", lambda a: A.rsub.Scalar(a, 2), [T(2, 3)], EVERY, preserve=[A.rsub.Scalar])
    case("rsub", "rsub_Scalar_alpha", lambda a: A.rsub.Scalar(a, 1.5, alpha=2), [T(5)], [f32, f16, i64], preserve=[A.rsub.Scalar])
    case("pow", "pow_tensor_scalar", lambda a: a**2, [T(2, 3)], EVERY)
    case("pow", "pow_tensor_scalar_frac", lambda a: a**0.5, [P(6)], [f32, f64, i64])
    case("pow", "pow_tensor_scalar_neg", lambda a: a**-1.5, [P(6)], [f32, f16])
    case("pow", "pow_tensor_scalar_3", lambda a: a**3, [T(6)], [f32, i32])
    case("pow", "pow_tensor_tensor", lambda a, b: torch.pow(a, b), [P(2, 3), Idx((2, 3), 3)], EVERY)
    case("pow", "pow_tensor_tensor_float", lambda a, b: torch.pow(a, b), [P(2, 3), T(2, 3)], [f32, f64, f16, bf16])
    case("pow", "pow_tensor_tensor_bcast", lambda a, b: torch.pow(a, b), [P(2, 1), T(3)], [f32])
    case("pow", "pow_scalar_tensor", lambda a: torch.pow(2.0, a), [T(6)], EVERY)
    case("pow", "pow_scalar_int_tensor", lambda a: torch.pow(3, a), [Idx((6,), 4)], [i64, i32, f32])
    case("maximum", "maximum", torch.maximum, [T(2, 3), T(2, 3)], EVERY)
    case("maximum", "maximum_bcast", torch.maximum, [T(3, 1), T(4)], [f32])
    case("maximum", "maximum_nan", torch.maximum, [S(3, 4), T(3, 4)], [f32, f16])
    case("maximum", "maximum_mixed", torch.maximum, [T(3, 4), T(3, 4, dtype=i64)], [f32, i32])
    case("minimum", "minimum", torch.minimum, [T(2, 3), T(2, 3)], EVERY)
    case("minimum", "minimum_nan", torch.minimum, [T(3, 4), S(3, 4)], [f32])
    case("minimum", "minimum_bcast_0d", torch.minimum, [T(), T(2, 3)], [f32, i64])
    case("fmod", "fmod", torch.fmod, [T(3, 4), P(3, 4)], EVERY)
    case("fmod", "fmod_neg_bcast", torch.fmod, [T(3, 4), T(4)], [f32, f64])
    case("fmod", "fmod_Scalar", lambda a: torch.fmod(a, 3), [T(3, 4)], EVERY)
    case("fmod", "fmod_Scalar_float", lambda a: torch.fmod(a, -1.5), [T(3, 4)], [f32, i64])
    case("remainder", "remainder", torch.remainder, [T(3, 4), P(3, 4)], EVERY)
    case("remainder", "remainder_neg_divisor", lambda a, b: torch.remainder(a, -b), [T(3, 4), P(3, 4)], [f32, i64, i32])
    case("remainder", "remainder_Scalar", lambda a: torch.remainder(a, 3), [T(3, 4)], EVERY)
    case("remainder", "remainder_Scalar_neg_float", lambda a: torch.remainder(a, -2.5), [T(3, 4)], [f32, f64, i64])
    case("floor_divide", "floor_divide", torch.floor_divide, [T(3, 4), P(3, 4)], EVERY, preserve=[A.floor_divide.default])
    case("floor_divide", "floor_divide_neg", lambda a, b: torch.floor_divide(a, -b), [T(3, 4), P(4)], [f32, i64, i32], preserve=[A.floor_divide.default])
    case("atan2", "atan2", torch.atan2, [T(3, 4), T(3, 4)], EVERY)
    case("atan2", "atan2_bcast_mixed", torch.atan2, [T(3, 1), T(4, dtype=f64)], [f32, i32])
    case("where", "where", lambda c, a, b: torch.where(c, a, b), [Mask(2, 3), T(2, 3), T(2, 3)], EVERY)
    case("where", "where_bcast", lambda c, a, b: torch.where(c, a, b), [Mask(3, 1), T(1, 4), T(3, 4)], [f32, i64])
    case("where", "where_scalar", lambda c, a: torch.where(c, a, 0.0), [Mask(5), T(5)], [f32])
    case("where", "where_mixed", lambda c, a, b: torch.where(c, a, b), [Mask(2, 3), T(2, 3), T(2, 3, dtype=i64)], [f32, i32])
    case("where", "where_0d", lambda c, a, b: torch.where(c, a, b), [Mask(), T(3), T()], [f32])
    # ---- bitwise / logical
    for opn in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        fn = getattr(torch, opn)
        case(opn, opn, fn, [T(3, 4), T(3, 4)], EVERY)
        case(opn, f"{opn}_bcast_mixed", fn, [T(3, 1), T(4, dtype=i32)], [i64, b8])
        case(opn, f"{opn}_Scalar", lambda a, fn=fn: fn(a, 6), [T(3, 4)], EVERY)
        case(opn, f"{opn}_Scalar_bool", lambda a, fn=fn: fn(a, True), [T(5)], [b8, i32])
    case("bitwise_not", "bitwise_not", torch.bitwise_not, [T(3, 4)], EVERY)
    for opn in ["logical_and", "logical_or", "logical_xor"]:
        fn = getattr(torch, opn)
        case(opn, opn, fn, [T(3, 4), T(3, 4)], EVERY)
        case(opn, f"{opn}_bcast_mixed", fn, [T(3, 1), Mask(4)], [f32, i64])
    case("logical_not", "logical_not", torch.logical_not, [T(3, 4)], EVERY)
    # ---- comparisons
    for cmp in ["eq", "ne", "lt", "le", "gt", "ge"]:
        fn = getattr(torch, cmp)
        case(cmp, cmp, fn, [T(3, 4), T(3, 4)], EVERY)
        case(cmp, f"{cmp}_scalar", lambda a, fn=fn: fn(a, 0), [T(6)], EVERY)
        case(cmp, f"{cmp}_scalar_float", lambda a, fn=fn: fn(a, 0.5), [T(6)], [f32, i64])
        case(cmp, f"{cmp}_bcast", fn, [T(2, 1), T(3)], [f32, i32])
        case(cmp, f"{cmp}_mixed", fn, [T(2, 3), T(2, 3, dtype=f32)], [i64, f16])
    case("eq", "eq_nan", torch.eq, [S(3, 4), S(3, 4)], [f32])
    case("ne", "ne_nan", torch.ne, [S(3, 4), S(3, 4)], [f32])
    case("lt", "lt_0d", torch.lt, [T(), T(2, 2)], [f32])
    # ---- activations / clamps
    case("clamp", "clamp", lambda a: torch.clamp(a, -0.5, 0.5), [T(3, 4)], FLOATS)
    case("clamp", "clamp_int", lambda a: torch.clamp(a, -2, 3), [T(3, 4)], EVERY)
    case("clamp", "clamp_min", lambda a: torch.clamp(a, min=0.1), [T(6)], [f32])
    case("clamp", "clamp_max", lambda a: torch.clamp(a, max=0), [T(6)], [f32, i64])
    case("clamp", "clamp_float_on_int", lambda a: torch.clamp(a, -1.5, 2.5), [T(6)], [i32, u8])
    case("clamp", "clamp_nan", lambda a: torch.clamp(a, -0.5, 0.5), [S(6)], [f32])
    case("clamp", "clamp_tensor", lambda a, lo, hi: torch.clamp(a, lo, hi), [T(2, 3), T(2, 3), P(3)], EVERY)
    case("clamp", "clamp_tensor_min_only", lambda a, lo: torch.clamp(a, min=lo), [T(2, 3), T(3)], [f32, i64])
    case("clamp", "clamp_tensor_mixed", lambda a, lo, hi: torch.clamp(a, lo, hi), [T(2, 3), T(2, 3, dtype=i64), P(3)], [f32])
    case("hardtanh", "hardtanh", F.hardtanh, [T(3, 4)], EVERY)
    case("hardtanh", "relu6", F.relu6, [T(3, 4)], [f32])
    case("hardtanh", "hardtanh_range", lambda a: F.hardtanh(a, -2.0, 3.0), [T(3, 4)], [f32, i64])
    case("relu", "relu", torch.relu, [T(3, 4)], EVERY)
    case("relu", "relu_special", torch.relu, [S(3, 4)], [f32])
    case("relu", "relu_0d", torch.relu, [T()], [f32])
    case("gelu", "gelu", F.gelu, [T(3, 4)], EVERY, tol=loose(1e-2, 1e-2))
    case("gelu", "gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [T(3, 4)], FLOATS, tol=loose(1e-2, 1e-2))
    case("sigmoid", "sigmoid", torch.sigmoid, [T(3, 4)], EVERY)
    case("sigmoid", "sigmoid_int", torch.sigmoid, [T(3, 4)], [i64, i32])
    case("tanh", "tanh", torch.tanh, [T(3, 4)], EVERY)
    case("silu", "silu", F.silu, [T(3, 4)], FLOATS, tol=loose(1e-2, 1e-2))
    case("leaky_relu", "leaky_relu", lambda a: F.leaky_relu(a, 0.1), [T(3, 4)], EVERY)
    case("leaky_relu", "leaky_relu_default", F.leaky_relu, [T(5)], [f32])
    case("elu", "elu", F.elu, [T(3, 4)], EVERY)
    case("elu", "elu_alpha_scale", lambda a: A.elu(a, 0.5, 2.0, 1.5), [T(3, 4)], [f32, f64])
    case("glu", "glu", F.glu, [T(3, 4)], EVERY, preserve=[A.glu.default])
    case("glu", "glu_dim0", lambda a: F.glu(a, 0), [T(4, 3)], [f32], preserve=[A.glu.default])
    case("logit", "logit", torch.logit, [U(3, 4)], EVERY, preserve=[A.logit.default])
    case("logit", "logit_eps", lambda a: torch.logit(a, 0.1), [T(3, 4)], [f32, f64, i64], preserve=[A.logit.default])
    # ---- unary math (ExecuTorch computes integer and bool inputs in float)
    unary = [
        ("abs", torch.abs, T), ("neg", torch.neg, T), ("sign", torch.sign, T),
        ("exp", torch.exp, T), ("expm1", torch.expm1, T),
        ("log", torch.log, P), ("log10", torch.log10, P), ("log1p", torch.log1p, P), ("log2", torch.log2, P),
        ("sqrt", torch.sqrt, P), ("rsqrt", torch.rsqrt, P), ("reciprocal", torch.reciprocal, P),
        ("erf", torch.erf, T),
        ("sin", torch.sin, T), ("cos", torch.cos, T), ("tan", torch.tan, T),
        ("asin", torch.asin, U), ("acos", torch.acos, U), ("atan", torch.atan, T),
        ("sinh", torch.sinh, T), ("cosh", torch.cosh, T),
        ("asinh", torch.asinh, T), ("acosh", torch.acosh, G1), ("atanh", torch.atanh, U),
        ("floor", torch.floor, T), ("ceil", torch.ceil, T), ("trunc", torch.trunc, T), ("round", torch.round, T),
    ]
    for opn, fn, spec in unary:
        case(opn, opn, fn, [spec(3, 4)], EVERY)
    for opn, fn, spec in unary:
        if opn in ("exp", "sign", "floor", "ceil", "trunc", "round", "abs", "tan", "log", "sqrt"):
            case(opn, f"{opn}_special", fn, [S(2, 3)], [f32])
    case("log", "log_neg", torch.log, [T(2, 3)], [f32])
    case("sqrt", "sqrt_neg", torch.sqrt, [T(2, 3)], [f32])
    case("asin", "asin_out_of_range", torch.asin, [T(2, 3)], [f32])
    case("round", "round_half", lambda a: torch.round(a * 2) / 2, [T(8)], [f32])
    case("round", "round_ties", torch.round, [In((8,), f32, "int", -8, 8)], [f32])
    case("round", "round_decimals", lambda a: torch.round(a, decimals=2), [T(6)], [f32])
    case("exp", "exp_0d", torch.exp, [T()], [f32, i64])
    case("neg", "neg_empty", torch.neg, [T(0, 2)], [f32])
    case("isinf", "isinf", torch.isinf, [S(3, 4)], EVERY)
    case("isnan", "isnan", torch.isnan, [S(3, 4)], EVERY)
    # ---- reductions
    case("sum", "sum_dim", lambda a: a.sum(1), [T(3, 4, 2)], EVERY, tol={**loose(2e-2, 2e-2), **F64_ET})
    case("sum", "sum_keepdim", lambda a: a.sum((0, 2), keepdim=True), [T(3, 4, 2)], [f32, i64])
    case("sum", "sum_all", lambda a: a.sum(), [T(3, 5)], [f32, f64, i32, b8])
    case("sum", "sum_dtype", lambda a: a.sum(-1, dtype=torch.float32), [T(2, 6)], [f16, i64, b8])
    case("sum", "sum_dtype_int", lambda a: a.sum(0, dtype=torch.int32), [T(3, 2)], [f32, i64, u8])
    case("sum", "sum_empty", lambda a: a.sum(0), [T(0, 3)], [f32, i64])
    case("sum", "sum_0d", lambda a: a.sum(), [T()], [f32])
    case("mean", "mean_dim", lambda a: a.mean(-1), [T(3, 4, 5)], FLOATS, tol=loose(1e-2, 1e-2))
    case("mean", "mean_keepdim", lambda a: a.mean((1, 2), keepdim=True), [T(2, 3, 4)], [f32])
    case("mean", "mean_all", lambda a: a.mean(), [T(4, 4)], [f32, f64, f16, bf16], tol=loose(1e-2, 1e-2))
    case("mean", "mean_dim_dtype", lambda a: a.mean(1, dtype=torch.float32), [T(3, 4)], EVERY)
    case("mean", "mean_all_dtype", lambda a: a.mean(dtype=torch.float64), [T(3, 4)], [f32, i64, f16])
    case("amax", "amax", lambda a: a.amax(1), [T(3, 5)], EVERY)
    case("amax", "amax_keepdim", lambda a: a.amax((0, 1), keepdim=True), [T(2, 3, 2)], [f32])
    case("amax", "amax_nan", lambda a: a.amax(1), [S(3, 5)], [f32])
    case("amax", "amax_all", lambda a: a.amax(()), [T(3, 4)], [f32, i64])
    case("amin", "amin", lambda a: a.amin(0), [T(3, 5)], EVERY)
    case("amin", "amin_nan", lambda a: a.amin(0), [S(3, 5)], [f32])
    case("argmax", "argmax", lambda a: a.argmax(1), [T(3, 5)], EVERY)
    case("argmax", "argmax_keepdim", lambda a: a.argmax(0, keepdim=True), [T(4, 3)], [f32])
    case("argmax", "argmax_all", lambda a: a.argmax(), [T(3, 4)], [f32, i64])
    case("argmax", "argmax_nan", lambda a: a.argmax(1), [S(3, 5)], [f32])
    case("argmin", "argmin", lambda a: a.argmin(-1), [T(3, 5)], EVERY)
    case("argmin", "argmin_all_keepdim", lambda a: a.argmin(keepdim=True), [T(3, 4)], [f32])
    case("max", "max_dim", lambda a: tuple(torch.max(a, 1)), [T(3, 5)], EVERY)
    case("max", "max_dim_keepdim", lambda a: tuple(torch.max(a, 0, keepdim=True)), [T(4, 3)], [f32, i32])
    case("max", "max_dim_nan", lambda a: tuple(torch.max(a, 1)), [S(3, 5)], [f32])
    case("max", "max_dim_0d", lambda a: tuple(torch.max(a, 0)), [T()], [f32])
    case("max", "max_all", lambda a: torch.max(a), [T(3, 5)], EVERY, preserve=[A.max.default])
    case("max", "max_all_nan", lambda a: torch.max(a), [S(3, 5)], [f32], preserve=[A.max.default])
    case("min", "min_dim", lambda a: tuple(torch.min(a, 1)), [T(3, 5)], EVERY)
    case("min", "min_dim_keepdim_neg", lambda a: tuple(torch.min(a, -1, keepdim=True)), [T(2, 3, 4)], [f32])
    case("min", "min_all", lambda a: torch.min(a), [T(3, 5)], EVERY, preserve=[A.min.default])
    case("var", "var_unbiased", lambda a: a.var(1), [T(3, 6)], EVERY)
    case("var", "var_biased_keepdim", lambda a: a.var(-1, unbiased=False, keepdim=True), [T(2, 3, 5)], [f32])
    case("var", "var_correction2_all", lambda a: torch.var(a, correction=2), [T(3, 6)], [f32, f64])
    case("var", "var_dim", lambda a: A.var.dim(a, [1], True), [T(3, 6)], EVERY, preserve=[A.var.dim])
    case("var", "var_dim_biased_keepdim", lambda a: A.var.dim(a, [0, 2], False, True), [T(2, 3, 4)], [f32], preserve=[A.var.dim])
    case("var_mean", "var_mean", lambda a: tuple(torch.var_mean(a, 1)), [T(3, 6)], EVERY, preserve=[A.var_mean.correction])
    case("var_mean", "var_mean_keepdim_corr0", lambda a: tuple(torch.var_mean(a, (0, 1), correction=0, keepdim=True)), [T(2, 3, 4)], [f32], preserve=[A.var_mean.correction])
    case("softmax", "softmax", lambda a: torch.softmax(a, -1), [T(3, 5)], EVERY, tol=loose(1e-2, 1e-2))
    case("softmax", "softmax_dim0", lambda a: torch.softmax(a, 0), [T(4, 3, 2)], [f32])
    case("softmax", "softmax_mid", lambda a: torch.softmax(a, 1), [T(2, 3, 4)], [f32, f64])
    case("softmax", "softmax_inf", lambda a: torch.softmax(a, -1), [S(3, 5)], [f32])
    case("log_softmax", "log_softmax", lambda a: torch.log_softmax(a, -1), [T(3, 5)], EVERY, tol=loose(2e-2, 1e-2))
    case("log_softmax", "log_softmax_dim1", lambda a: torch.log_softmax(a, 1), [T(2, 4, 3)], [f32])
    case("cumsum", "cumsum", lambda a: torch.cumsum(a, 1), [T(3, 5)], EVERY, tol=loose(1e-2, 1e-2))
    case("cumsum", "cumsum_dim0", lambda a: torch.cumsum(a, 0), [T(4, 3)], [f32, f16], tol=loose(1e-2, 1e-2))
    case("cumsum", "cumsum_dtype", lambda a: torch.cumsum(a, -1, dtype=torch.float64), [T(2, 4)], [f32, i32])
    case("cumsum", "cumsum_0d", lambda a: torch.cumsum(a, 0), [T()], [f32])
    case("prod", "prod", lambda a: torch.prod(a, 1), [T(3, 4)], EVERY, tol=loose(2e-2, 2e-2))
    case("prod", "prod_keepdim_dtype", lambda a: torch.prod(a, 0, keepdim=True, dtype=torch.float64), [T(3, 2)], [f32, i32])
    case("prod", "prod_all", lambda a: torch.prod(a), [T(2, 3)], EVERY, tol=loose(2e-2, 2e-2))
    case("prod", "prod_all_dtype", lambda a: torch.prod(a, dtype=torch.float32), [T(2, 3)], [i64, f64])
    case("any", "any", lambda a: torch.any(a, 1), [T(3, 4)], EVERY)
    case("any", "any_keepdim", lambda a: torch.any(a, 0, keepdim=True), [Mask(3, 4)], [b8])
    case("any", "any_all", lambda a: torch.any(a), [T(3, 4)], EVERY, preserve=[A.any.default])
    case("any", "any_all_false", lambda a: torch.any(a), [In((3, 4), b8, "int", 0, 1)], [b8], preserve=[A.any.default])
    case("any", "any_dims", lambda a: torch.any(a, (0, 2)), [T(2, 3, 2)], EVERY, preserve=[A.any.dims])
    case("any", "any_dims_keepdim", lambda a: torch.any(a, (1,), keepdim=True), [Mask(2, 3, 2)], [b8], preserve=[A.any.dims])
    # ---- linear algebra
    mmtol = loose(2e-2, 2e-2)
    case("mm", "mm", torch.mm, [T(3, 4), T(4, 5)], EVERY, tol=mmtol)
    case("mm", "mm_empty_k", torch.mm, [T(3, 0), T(0, 2)], [f32])
    case("bmm", "bmm", torch.bmm, [T(2, 3, 4), T(2, 4, 5)], EVERY, tol=mmtol)
    case("addmm", "addmm", torch.addmm, [T(5), T(3, 4), T(4, 5)], EVERY, tol=mmtol)
    case("addmm", "addmm_alpha_beta", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), [T(3, 5), T(3, 4), T(4, 5)], [f32, f64])
    case("addmm", "addmm_int_alpha_beta", lambda c, a, b: torch.addmm(c, a, b, beta=2, alpha=3), [T(3, 1), T(3, 4), T(4, 5)], [i64, i32])
    case("addmm", "addmm_beta0_nan", lambda c, a, b: torch.addmm(c, a, b, beta=0), [S(3, 5), T(3, 4), T(4, 5)], [f32])
    case("linear", "linear", lambda dt: nn.Linear(6, 4).to(dt), [T(3, 6)], [f32, f64, f16, bf16], module=True, tol=mmtol)
    case("linear", "linear_3d_nobias", lambda dt: nn.Linear(6, 4, bias=False).to(dt), [T(2, 3, 6)], [f32], module=True)
    case("matmul", "matmul_bcast", torch.matmul, [T(2, 3, 4), T(4, 2)], [f32])
    case("matmul", "matmul_vec", torch.matmul, [T(3, 4), T(4)], [f32, i64])
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
    # integer convolution (ExecuTorch's portable kernel takes every real dtype; weights as inputs)
    case("conv2d", "convolution_int", lambda x, w, b: A.convolution(x, w, b, [1, 2], [1, 0], [1, 1], False, [0, 0], 1),
         [T(1, 2, 5, 5), T(3, 2, 2, 3), T(3)], EVERY, tol=ctol)
    case("conv2d", "convolution_int_nobias_groups", lambda x, w: A.convolution(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 2),
         [T(1, 4, 4, 4), T(4, 2, 2, 2)], [f32, i32])
    case("conv1d", "convolution1d_int", lambda x, w, b: A.convolution(x, w, b, [2], [1], [1], False, [0], 1),
         [T(2, 2, 7), T(3, 2, 3), T(3)], EVERY, tol=ctol)
    conv("conv_transpose2d", "conv_transpose2d", lambda: nn.ConvTranspose2d(3, 2, 3), (1, 3, 4, 4), [f32, f64, f16, bf16])
    conv("conv_transpose2d", "conv_transpose2d_stride_pad", lambda: nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1, groups=2), (1, 4, 3, 3))
    case("conv_transpose2d", "convolution_transposed_int", lambda x, w, b: A.convolution(x, w, b, [2, 1], [0, 1], [1, 1], True, [1, 0], 1),
         [T(1, 2, 3, 3), T(2, 3, 2, 3), T(3)], EVERY, tol=ctol)
    conv("conv_transpose1d", "conv_transpose1d", lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), (1, 3, 5))

    def bn(dt):
        m = nn.BatchNorm2d(3).eval()
        with torch.no_grad():
            m.running_mean.copy_(torch.tensor([0.1, -0.2, 0.3]))
            m.running_var.copy_(torch.tensor([0.5, 1.5, 2.0]))
            m.weight.copy_(torch.tensor([1.0, 0.5, -1.0]))
            m.bias.copy_(torch.tensor([0.0, 0.2, -0.1]))
        return m.to(dt)

    case("batch_norm", "batch_norm2d_eval", bn, [T(2, 3, 4, 4)], EVERY, module=True, tol=ctol)
    case("batch_norm", "batch_norm1d_eval", lambda dt: nn.BatchNorm1d(4).eval().to(dt), [T(3, 4)], [f32], module=True)
    case("batch_norm", "batch_norm_eval_noaffine", lambda a, m, v: F.batch_norm(a, m, v, eps=1e-3), [T(2, 3, 5), T(3), P(3)], [f32, f64])
    # training mode without running stats: _native_batch_norm_legit.no_stats_out
    case("batch_norm", "batch_norm_train", lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True), [T(2, 3, 4, 4), T(3), T(3)], EVERY, tol={**ctol, **F64_ET})
    case("batch_norm", "batch_norm_train_stats_out", lambda a: tuple(A._native_batch_norm_legit.no_stats(a, None, None, True, 0.1, 1e-5)), [T(4, 2, 3)], [f32, f64], preserve=[A._native_batch_norm_legit.no_stats], tol=F64_ET)
    # _native_batch_norm_legit.out (training=False): no export path emits it, so the exported
    # _native_batch_norm_legit_no_training call is retargeted to it
    case("batch_norm", "batch_norm_legit_eval", lambda a, w, b, m, v: F.batch_norm(a, m, v, w, b), [T(2, 3, 4), T(3), T(3), T(3), P(3)], EVERY, tol=ctol, edit=_bn_legit_edit)
    case("layer_norm", "layer_norm", lambda dt: nn.LayerNorm(6).to(dt), [T(2, 3, 6)], EVERY, module=True, tol={**ctol, **F64_ET})
    case("layer_norm", "layer_norm_2d_noaffine", lambda dt: nn.LayerNorm((3, 4), elementwise_affine=False).to(dt), [T(2, 3, 4)], [f32], module=True)
    case("layer_norm", "layer_norm_outputs", lambda a, w, b: tuple(A.native_layer_norm(a, [4], w, b, 1e-3)), [T(3, 4), T(4), T(4)], [f32, f64], tol=F64_ET)
    case("group_norm", "group_norm", lambda dt: nn.GroupNorm(2, 4).to(dt), [T(2, 4, 3, 3)], EVERY, module=True, tol={**ctol, **F64_ET})
    case("group_norm", "group_norm_outputs", lambda a, w, b: tuple(A.native_group_norm(a, w, b, 2, 6, 5, 3, 1e-5)), [T(2, 6, 5), T(6), T(6)], [f32], tol=F64_ET)
    case("max_pool2d", "max_pool2d", lambda a: F.max_pool2d(a, 2), [T(1, 2, 6, 6)], EVERY)
    case("max_pool2d", "max_pool2d_stride_pad", lambda a: F.max_pool2d(a, 3, stride=2, padding=1), [T(2, 2, 7, 7)], [f32])
    case("max_pool2d", "max_pool2d_ceil_dil", lambda a: F.max_pool2d(a, 2, stride=2, dilation=2, ceil_mode=True), [T(1, 1, 7, 7)], [f32])
    case("max_pool2d", "max_pool2d_indices", lambda a: tuple(F.max_pool2d(a, 3, stride=2, padding=1, return_indices=True)), [T(1, 2, 5, 5)], [f32, i32])
    case("max_pool2d", "max_pool2d_3d_input", lambda a: F.max_pool2d(a, 2), [T(2, 4, 4)], [f32])
    case("max_pool2d", "max_pool2d_nan", lambda a: F.max_pool2d(a, 2), [S(1, 1, 4, 4)], [f32])
    case("avg_pool2d", "avg_pool2d", lambda a: F.avg_pool2d(a, 2), [T(1, 2, 6, 6)], EVERY, tol=ctol)
    case("avg_pool2d", "avg_pool2d_pad_nocount", lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, count_include_pad=False), [T(1, 2, 7, 7)], [f32])
    case("avg_pool2d", "avg_pool2d_pad_count_ceil", lambda a: F.avg_pool2d(a, 3, stride=2, padding=1, ceil_mode=True), [T(1, 2, 6, 6)], [f32])
    case("avg_pool2d", "avg_pool2d_divisor", lambda a: F.avg_pool2d(a, 2, divisor_override=3), [T(1, 1, 4, 4)], [f32, i64])
    case("avg_pool2d", "avg_pool2d_3d_input", lambda a: F.avg_pool2d(a, (2, 1)), [T(2, 4, 3)], [f32])
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_1", lambda a: F.adaptive_avg_pool2d(a, 1), [T(2, 3, 4, 4)], EVERY, tol=ctol)
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_uneven", lambda a: F.adaptive_avg_pool2d(a, (2, 3)), [T(1, 2, 5, 7)], [f32])
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_direct", lambda a: A._adaptive_avg_pool2d(a, [3, 2]), [T(2, 5, 4)], EVERY)
    case("upsample", "nearest_x2", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), [T(1, 2, 3, 3)], EVERY)
    case("upsample", "nearest_size", lambda a: F.interpolate(a, size=(5, 7), mode="nearest"), [T(1, 1, 3, 4)], [f32])
    case("upsample", "nearest_down", lambda a: F.interpolate(a, size=(2, 3), mode="nearest"), [T(1, 1, 5, 7)], [f32])
    case("upsample", "bilinear_x2", lambda a: F.interpolate(a, scale_factor=2, mode="bilinear"), [T(1, 2, 3, 3)], EVERY, tol=ctol)
    case("upsample", "bilinear_align", lambda a: F.interpolate(a, size=(5, 6), mode="bilinear", align_corners=True), [T(1, 1, 3, 4)], [f32, f64])
    case("upsample", "bilinear_down", lambda a: F.interpolate(a, size=(3, 2), mode="bilinear"), [T(1, 1, 5, 6)], [f32])
    case("upsample", "bilinear_scale_frac", lambda a: F.interpolate(a, scale_factor=1.7, mode="bilinear"), [T(1, 1, 3, 4)], [f32])
    case("pixel_shuffle", "pixel_shuffle", lambda a: F.pixel_shuffle(a, 2), [T(1, 8, 2, 3)], EVERY, preserve=[A.pixel_shuffle.default])
    case("pixel_shuffle", "pixel_shuffle_3d_input", lambda a: F.pixel_shuffle(a, 3), [T(9, 1, 2)], [f32], preserve=[A.pixel_shuffle.default])
    case("pixel_shuffle", "pixel_shuffle_decomposed", lambda a: F.pixel_shuffle(a, 2), [T(1, 8, 2, 3)], [f32])
    case("pixel_unshuffle", "pixel_unshuffle", lambda a: F.pixel_unshuffle(a, 2), [T(1, 2, 4, 6)], EVERY, preserve=[A.pixel_unshuffle.default])
    case("pixel_unshuffle", "pixel_unshuffle_5d", lambda a: F.pixel_unshuffle(a, 2), [T(2, 1, 1, 2, 4)], [f32], preserve=[A.pixel_unshuffle.default])
    # ---- embedding / indexing
    case("embedding", "embedding", lambda w, i: F.embedding(i, w), [T(10, 4), Idx((2, 3), 10)], EVERY)
    case("embedding", "embedding_i32_idx", lambda w, i: F.embedding(i, w), [T(10, 4), Idx((5,), 10, dtype=i32)], [f32, i64])
    case("embedding", "embedding_0d_idx", lambda w, i: F.embedding(i, w), [T(6, 3), Idx((), 6)], [f32])
    case("index_select", "index_select", lambda a, i: torch.index_select(a, 1, i), [T(3, 5), Idx((4,), 5)], EVERY)
    case("index_select", "index_select_dim0", lambda a, i: torch.index_select(a, 0, i), [T(4, 2, 3), Idx((3,), 4)], [f32])
    case("index_select", "index_select_i32_neg_dim", lambda a, i: torch.index_select(a, -1, i), [T(2, 4), Idx((3,), 4, dtype=i32)], [f32, i64])
    case("index_select", "index_select_0d", lambda a, i: torch.index_select(a, 0, i), [T(), Idx((1,), 1)], [f32])
    case("gather", "gather", lambda a, i: torch.gather(a, 1, i), [T(3, 5), Idx((3, 2), 5)], EVERY)
    case("gather", "gather_dim0", lambda a, i: torch.gather(a, 0, i), [T(3, 4), Idx((2, 4), 3)], [f32])
    case("gather", "gather_smaller_index", lambda a, i: torch.gather(a, -1, i), [T(3, 4, 5), Idx((2, 3, 2), 5)], [f32, i32])
    case("scatter", "scatter_src", lambda a, i, s: torch.scatter(a, 1, i, s), [T(3, 5), Idx((3, 2), 5), T(3, 2)], EVERY)
    case("scatter", "scatter_src_dim0_larger_src", lambda a, i, s: torch.scatter(a, 0, i, s), [T(4, 3), Idx((2, 2), 4), T(3, 3)], [f32])
    case("scatter", "scatter_value", lambda a, i: torch.scatter(a, 1, i, 2.0), [T(3, 5), Idx((3, 2), 5)], EVERY)
    case("scatter", "scatter_value_int", lambda a, i: torch.scatter(a, 0, i, -3), [T(4, 3), Idx((2, 3), 4)], [f32, i64])
    case("scatter", "scatter_add", lambda a, i, s: torch.scatter_add(a, 1, i, s), [T(3, 5), Idx((3, 4), 5), T(3, 4)], EVERY)
    case("scatter", "scatter_add_dim0", lambda a, i, s: torch.scatter_add(a, 0, i, s), [T(3, 2), Idx((5, 2), 3), T(5, 3)], [f32, i32])
    case("index", "index_1", lambda a, i: a[i], [T(5, 3), Idx((4,), 5)], EVERY)
    case("index", "index_2", lambda a, i, j: a[i, j], [T(4, 5), Idx((3,), 4), Idx((3,), 5)], [f32])
    case("index", "index_mid", lambda a, i: a[:, i], [T(2, 5, 3), Idx((2, 2), 5)], [f32])
    case("index", "index_bool_mask_free", lambda a, i, j: a[i, :, j], [T(3, 2, 4), Idx((2,), 3), Idx((2,), 4)], [f32])
    case("index", "index_bcast_neg_i32", lambda a, i, j: a[i, j], [T(4, 5), Idx((3, 1), 4, -4, dtype=i32), Idx((2,), 5, -5)], [f32, i64])
    case("index", "index_bool_mask", lambda a, m: a[m], [T(3, 4), Mask(3, 4)], [f32])
    case("index_put", "index_put", lambda a, i, v: torch.index_put(a, (i,), v), [T(5, 3), Idx((2,), 5), T(2, 3)], EVERY)
    case("index_put", "index_put_accumulate", lambda a, i, v: torch.index_put(a, (i,), v, accumulate=True), [T(4, 3), Idx((5,), 4), T(5, 3)], [f32, i64, i32])
    case("index_put", "index_put_2_bcast", lambda a, i, j, v: torch.index_put(a, (i, j), v), [T(4, 5), Idx((3,), 4), Idx((3,), 5), T(1)], [f32])
    case("index_put", "index_put_mid", lambda a, i, v: A.index_put(a, [None, i], v), [T(2, 4, 3), Idx((2,), 4), T(2, 2, 3)], [f32])
    case("masked_fill", "masked_fill", lambda a, m: a.masked_fill(m, -1.0), [T(3, 4), Mask(3, 4)], [f32, f64, f16, bf16])
    case("masked_fill", "masked_fill_bcast", lambda a, m: a.masked_fill(m, float("-inf")), [T(2, 3, 4), Mask(1, 4)], [f32])
    case("masked_fill", "masked_fill_int", lambda a, m: a.masked_fill(m, 7), [T(3, 4), Mask(3, 4)], [i64, i32, u8])
    case("masked_fill", "masked_fill_Scalar", lambda a, m: a.masked_fill(m, 3), [T(3, 4), Mask(3, 4)], EVERY, preserve=[A.masked_fill.Scalar])
    case("masked_fill", "masked_fill_Scalar_bcast", lambda a, m: a.masked_fill(m, -0.5), [T(2, 3, 4), Mask(3, 1)], [f32, f16], preserve=[A.masked_fill.Scalar])
    case("select_scatter", "select_scatter", lambda a, s: torch.select_scatter(a, s, 0, 1), [T(3, 5), T(5)], EVERY, preserve=[A.select_scatter.default])
    case("select_scatter", "select_scatter_neg", lambda a, s: torch.select_scatter(a, s, -1, -2), [T(2, 3, 4), T(2, 3)], [f32], preserve=[A.select_scatter.default])
    case("slice_scatter", "slice_scatter", lambda a, s: torch.slice_scatter(a, s, 1, 1, 3), [T(3, 5), T(3, 2)], EVERY)
    case("slice_scatter", "slice_scatter_step", lambda a, s: torch.slice_scatter(a, s, 0, 0, 6, 2), [T(6, 2), T(3, 2)], [f32, i64])
    case("slice_scatter", "slice_scatter_neg_end", lambda a, s: torch.slice_scatter(a, s, -1, -3, None), [T(2, 5), T(2, 3)], [f32])
    case("nonzero", "nonzero", torch.nonzero, [T(3, 4)], EVERY, post=_default_out_dim_order)
    case("nonzero", "nonzero_1d", torch.nonzero, [Mask(7)], [b8], post=_default_out_dim_order)
    case("nonzero", "nonzero_3d", torch.nonzero, [Mask(2, 3, 2)], [b8], post=_default_out_dim_order)
    case("nonzero", "nonzero_0d", torch.nonzero, [T()], [f32, i64], post=_default_out_dim_order)
    case("nonzero", "nonzero_none", torch.nonzero, [In((2, 3), b8, "int", 0, 1)], [b8], post=_default_out_dim_order)
    # ---- shape ops
    case("cat", "cat", lambda a, b: torch.cat([a, b], 1), [T(2, 3), T(2, 4)], EVERY)
    case("cat", "cat3_dim0", lambda a, b, c: torch.cat([a, b, c]), [T(1, 3), T(2, 3), T(3, 3)], [f32])
    case("cat", "cat_mixed", lambda a, b: torch.cat([a, b], -1), [T(2, 2), T(2, 3, dtype=i64)], [f32])
    case("cat", "cat_mixed_int_bool", lambda a, b: torch.cat([a, b], 0), [T(2, 2), Mask(1, 2)], [i32, u8])
    case("cat", "cat_empty", lambda a, b: torch.cat([a, b], 0), [T(0, 3), T(2, 3)], [f32])
    case("cat", "cat_single", lambda a: torch.cat([a], 0), [T(2, 3)], [f32])
    case("stack", "stack", lambda a, b: torch.stack([a, b], 1), [T(2, 3), T(2, 3)], EVERY, preserve=[A.stack.default])
    case("stack", "stack_last", lambda a, b, c: torch.stack([a, b, c], -1), [T(4), T(4), T(4)], [f32], preserve=[A.stack.default])
    case("stack", "stack_0d", lambda a, b: torch.stack([a, b]), [T(), T()], [f32], preserve=[A.stack.default])
    case("stack", "stack_decomposed", lambda a, b: torch.stack([a, b], 1), [T(2, 3), T(2, 3)], [f32])
    case("split", "split", lambda a: torch.split(a, 2, 1), [T(3, 5)], EVERY)
    case("split", "split_sizes", lambda a: torch.split(a, [1, 3], 0), [T(4, 2)], [f32])
    case("split", "chunk", lambda a: torch.chunk(a, 3, -1), [T(2, 6)], [f32])
    case("split", "split_copy", lambda a: A.split_copy.Tensor(a, 2, 1), [T(3, 5)], EVERY)
    case("split", "split_copy_dim0_even", lambda a: A.split_copy.Tensor(a, 2), [T(4, 2)], [f32])
    case("unbind", "unbind_copy", lambda a: A.unbind_copy.int(a, 0), [T(3, 4)], EVERY)
    case("unbind", "unbind_copy_last", lambda a: A.unbind_copy.int(a, -1), [T(2, 3, 2)], [f32])
    case("permute", "permute", lambda a: a.permute(2, 0, 1), [T(2, 3, 4)], EVERY)
    case("permute", "permute_4d", lambda a: a.permute(0, 2, 3, 1), [T(1, 2, 3, 4)], [f32])
    case("transpose", "transpose", lambda a: a.transpose(0, 1), [T(3, 4)], [f32, i64, f16])
    case("transpose", "transpose_3d", lambda a: a.transpose(-1, -3), [T(2, 3, 4)], [f32])
    case("transpose", "t", lambda a: a.t(), [T(3, 5)], [f32])
    case("transpose", "transpose_copy", lambda a: A.transpose_copy.int(a, 0, -1), [T(2, 3, 4)], EVERY, preserve=[A.transpose_copy.int])
    case("transpose", "t_copy", lambda a: A.t_copy(a), [T(3, 5)], EVERY, preserve=[A.t_copy.default])
    case("transpose", "t_copy_1d", lambda a: A.t_copy(a), [T(4)], [f32], preserve=[A.t_copy.default])
    case("slice", "slice", lambda a: a[:, 1:4], [T(3, 5)], EVERY)
    case("slice", "slice_step", lambda a: a[1::2, ::3], [T(5, 7)], [f32])
    case("slice", "slice_neg", lambda a: a[..., -3:-1], [T(2, 3, 5)], [f32])
    case("slice", "slice_empty", lambda a: a[:, 3:3], [T(2, 5)], [f32])
    case("slice", "narrow_copy", lambda a: A.narrow_copy(a, 1, 1, 3), [T(3, 5)], EVERY)
    case("slice", "narrow_copy_neg", lambda a: A.narrow_copy(a, -1, -3, 2), [T(2, 2, 4)], [f32])
    case("select", "select", lambda a: a[1], [T(3, 4)], EVERY)
    case("select", "select_neg", lambda a: a[:, -1], [T(2, 3, 4)], [f32])
    case("select", "select_to_0d", lambda a: a[2], [T(4)], [f32, i64])
    case("expand", "expand", lambda a: a.expand(3, 4), [T(1, 4)], EVERY)
    case("expand", "expand_new_dims", lambda a: a.expand(2, 3, 4), [T(3, 1)], [f32])
    case("expand", "expand_0d", lambda a: a.expand(2, 3), [T()], [f32])
    case("expand", "expand_copy_keep", lambda a: A.expand_copy(a, [2, -1, 3]), [T(4, 1)], [f32, i64])
    case("unsqueeze", "unsqueeze", lambda a: a.unsqueeze(1), [T(3, 4)], EVERY)
    case("unsqueeze", "unsqueeze_neg", lambda a: a.unsqueeze(-1), [T(3, 4)], [f32])
    case("unsqueeze", "unsqueeze_0d", lambda a: a.unsqueeze(0), [T()], [f32])
    case("squeeze", "squeeze_dim", lambda a: a.squeeze(1), [T(3, 1, 4)], EVERY)
    case("squeeze", "squeeze_all", lambda a: a.squeeze(), [T(1, 3, 1, 4)], [f32])
    case("squeeze", "squeeze_copy_dim", lambda a: A.squeeze_copy.dim(a, 1), [T(3, 1, 4)], EVERY, preserve=[A.squeeze_copy.dim])
    case("squeeze", "squeeze_copy_dim_not_1", lambda a: A.squeeze_copy.dim(a, -1), [T(3, 2)], [f32], preserve=[A.squeeze_copy.dim])
    case("squeeze", "squeeze_copy_dims", lambda a: A.squeeze_copy.dims(a, [0, 2, 3]), [T(1, 3, 1, 2)], [f32, i64])
    case("view", "view", lambda a: a.view(4, 3), [T(2, 6)], EVERY)
    case("view", "reshape_infer", lambda a: a.reshape(-1, 2), [T(2, 3, 2)], [f32])
    case("view", "flatten", lambda a: a.flatten(1), [T(2, 3, 4)], [f32])
    case("view", "view_to_0d", lambda a: a.view(()), [T(1, 1)], [f32])
    case("view", "view_copy", lambda a: A.view_copy(a, [3, -1]), [T(2, 6)], [f32, b8])
    case("flip", "flip", lambda a: a.flip(1), [T(3, 4)], EVERY)
    case("flip", "flip_2dims", lambda a: a.flip((0, 2)), [T(2, 3, 4)], [f32])
    case("roll", "roll", lambda a: torch.roll(a, 2, 1), [T(3, 5)], EVERY, preserve=[A.roll.default])
    case("roll", "roll_2dims", lambda a: torch.roll(a, (1, -2), (0, 1)), [T(3, 4)], [f32], preserve=[A.roll.default])
    case("roll", "roll_flat", lambda a: torch.roll(a, -7), [T(2, 3)], [f32, i64], preserve=[A.roll.default])
    case("roll", "roll_large_shift", lambda a: torch.roll(a, 13, -1), [T(2, 4)], [f32], preserve=[A.roll.default])
    case("roll", "roll_decomposed", lambda a: torch.roll(a, 2, 1), [T(3, 5)], [f32, i64])
    case("constant_pad", "pad", lambda a: F.pad(a, (1, 2)), [T(2, 3)], EVERY)
    case("constant_pad", "pad_value_2d", lambda a: F.pad(a, (1, 0, 2, 1), value=-1.5), [T(1, 2, 3, 3)], [f32])
    case("constant_pad", "pad_negative", lambda a: F.pad(a, (-1, 2, 0, -1)), [T(3, 4)], [f32])
    case("constant_pad", "pad_int_value", lambda a: F.pad(a, (0, 1, 1, 0), value=3), [T(2, 2)], [i64, u8])
    case("tril", "tril", torch.tril, [T(4, 4)], EVERY, preserve=[A.tril.default])
    case("tril", "tril_offset", lambda a: torch.tril(a, -1), [T(2, 3, 5)], [f32], preserve=[A.tril.default])
    case("tril", "tril_pos_offset_wide", lambda a: torch.tril(a, 2), [T(3, 6)], [f32, i64], preserve=[A.tril.default])
    case("tril", "tril_decomposed", torch.tril, [T(4, 4)], [f32, i64, b8])
    case("repeat", "repeat", lambda a: a.repeat(2, 3), [T(2, 2)], EVERY)
    case("repeat", "repeat_new_dims", lambda a: a.repeat(2, 1, 3), [T(3)], [f32])
    case("repeat", "repeat_zero", lambda a: a.repeat(0, 2), [T(2, 2)], [f32])
    case("unfold", "unfold_copy", lambda a: A.unfold_copy(a, 1, 2, 1), [T(3, 5)], EVERY, preserve=[A.unfold_copy.default])
    case("unfold", "unfold_copy_step", lambda a: A.unfold_copy(a, 0, 3, 2), [T(7, 2)], [f32], preserve=[A.unfold_copy.default])
    case("unfold", "unfold_copy_0d", lambda a: A.unfold_copy(a, 0, 1, 1), [T()], [f32], preserve=[A.unfold_copy.default])
    case("as_strided", "as_strided_copy", lambda a: A.as_strided_copy(a, [2, 2], [1, 2]), [T(3, 5)], EVERY)
    case("as_strided", "as_strided_copy_offset", lambda a: A.as_strided_copy(a, [3, 2], [4, 1], 1), [T(4, 4)], [f32])
    case("diagonal", "diagonal_copy", lambda a: torch.diagonal(a, 1), [T(3, 5)], EVERY)
    case("diagonal", "diagonal_copy_dims", lambda a: torch.diagonal(a, -1, 0, 2), [T(4, 2, 3)], [f32])
    # ---- copies
    case("alias_copy", "alias_copy", lambda a: A.alias_copy(a), [T(3, 4)], EVERY)
    case("alias_copy", "detach_copy", lambda a: A.detach_copy(a), [T(3, 4)], EVERY)
    case("alias_copy", "lift_fresh_copy", lambda a: A.lift_fresh_copy(a), [T(3, 4)], EVERY, edit=_lift_fresh_edit)
    case("clone", "clone", torch.clone, [T(3, 4)], EVERY)
    case("clone", "contiguous", lambda a: a.transpose(0, 1).contiguous(), [T(3, 4)], [f32])
    case("clone", "clone_aten", torch.clone, [T(3, 4)], EVERY, skip_dim_order=True)
    case("clone", "clone_aten_0d", torch.clone, [T()], [f32], skip_dim_order=True)
    case("copy", "copy", lambda a, b: A.copy(a, b), [T(3, 4), T(3, 4)], EVERY)
    case("copy", "copy_bcast_cast", lambda a, b: A.copy(a, b), [T(3, 4), T(4, dtype=i64)], [f32, f16, b8])
    case("copy", "copy_into_empty", lambda a: torch.empty(2, 3, dtype=a.dtype).copy_(a), [T(2, 3)], EVERY)
    case("copy", "copy_into_empty_aten", lambda a: torch.empty(2, 3, dtype=a.dtype).copy_(a), [T(2, 3)], EVERY, skip_dim_order=True)
    case("copy", "copy_inplace", lambda dt: _Inplace(dt), [T(3, 4)], EVERY, module=True)
    case("copy", "copy_inplace_bcast", lambda dt: _Inplace(dt, (2, 3, 4)), [T(4)], [f32, i64], module=True)
    case("fill", "fill_Scalar", lambda a: A.fill.Scalar(a, 3), [T(3, 4)], EVERY, preserve=[A.fill.Scalar])
    case("fill", "fill_Scalar_float", lambda a: A.fill.Scalar(a, -1.5), [T(3, 4)], [f32, f16, i32, b8], preserve=[A.fill.Scalar])
    case("fill", "fill_Tensor", lambda a, v: A.fill.Tensor(a, v), [T(3, 4), T()], EVERY, preserve=[A.fill.Tensor])
    case("fill", "fill_Tensor_mixed", lambda a, v: A.fill.Tensor(a, v), [T(3, 4), T(dtype=f64)], [f32, i64], preserve=[A.fill.Tensor])
    # ---- creation
    case("arange", "arange", lambda a: a + torch.arange(5, dtype=a.dtype), [T(5)], EVERY)
    case("arange", "arange_start_step", lambda a: a * torch.arange(1, 10, 2), [T(5, dtype=i64)], [i64])
    case("arange", "arange_float", lambda a: a + torch.arange(0.0, 1.0, 0.25), [T(4)], [f32])
    case("arange", "arange_end", lambda a: a + torch.arange(5, dtype=a.dtype), [T(5)], EVERY, preserve=[A.arange.default])
    case("arange", "arange_end_float", lambda a: torch.arange(2.5, dtype=a.dtype), [T(1)], [f32, f64], preserve=[A.arange.default])
    case("arange", "arange_neg_step", lambda a: torch.arange(3, -4, -2, dtype=a.dtype), [T(1)], [f32, i64, i8])
    case("full", "full", lambda a: a + torch.full((2, 3), 1.5), [T(2, 3)], [f32])
    case("full", "full_int", lambda a: a * torch.full((3,), 4, dtype=torch.int64), [T(3)], [i64])
    case("full", "full_dtype", lambda a: torch.full((2, 3), 3, dtype=a.dtype), [T(1)], EVERY)
    case("full", "full_0d", lambda a: torch.full((), -2.5, dtype=a.dtype), [T(1)], [f32, i32])
    case("full", "full_like", lambda a: torch.full_like(a, 7), [T(2, 3)], EVERY)
    case("full", "full_like_float_on_int", lambda a: torch.full_like(a, 2.0), [T(2, 3)], [i64, f16])
    case("full", "full_like_dtype", lambda a: torch.full_like(a, 1, dtype=torch.float64), [T(2, 3)], [f32, i32])
    case("full", "scalar_tensor", lambda a: a + torch.scalar_tensor(3, dtype=a.dtype), [T(2, 3)], EVERY)
    case("zeros_like", "zeros_like", lambda a: torch.zeros_like(a), [T(2, 3)], EVERY)
    case("zeros_like", "ones_like", lambda a: torch.ones_like(a), [T(2, 3)], [f32, i32])
    case("zeros_like", "zeros", lambda a: a + torch.zeros(2, 3), [T(2, 3)], [f32])
    case("zeros_like", "zeros_aten", lambda a: torch.zeros(2, 3, dtype=a.dtype), [T(1)], EVERY, preserve=[A.zeros.default])
    case("zeros_like", "ones_aten", lambda a: torch.ones(3, 2, dtype=a.dtype), [T(1)], EVERY, preserve=[A.ones.default])
    case("zeros_like", "ones_aten_0d", lambda a: torch.ones((), dtype=a.dtype), [T(1)], [f32], preserve=[A.ones.default])
    # ---- copies / casts
    dts8 = [f32, f64, f16, bf16, i64, i32, i16, i8, u8, b8]
    for src in dts8:
        for dst in dts8:
            if src == dst:
                continue
            if src not in (f32, i64) and dst not in (f32, i64):
                continue
            # float -> uint8 of a negative value is undefined in C++ (x86 wraps, ARM saturates):
            # only defined conversions are compared.
            spec = P(3, 4) if dst == u8 and src.is_floating_point else T(3, 4)
            case("to_copy", f"to_{SHORT[dst]}", lambda a, dst=dst: a.to(dst), [spec], [src])
    for src, dst in [(f32, f16), (f32, i32), (i64, f32), (f16, f64), (bf16, f32), (b8, f32), (f32, b8), (i8, i64), (u8, f32), (f64, bf16)]:
        spec = P(3, 4) if dst == u8 and src.is_floating_point else T(3, 4)
        case("to_copy", f"to_copy_aten_to_{SHORT[dst]}", lambda a, dst=dst: a.to(dst), [spec], [src], skip_dim_order=True)
    case("to_copy", "to_i32_trunc", lambda a: (a * 3).to(torch.int32), [T(8)], [f32, f16])
    case("to_copy", "to_f16_overflow", lambda a: (a * 1e5).to(torch.float16), [T(8)], [f32])
    # ---- channels-last (dim order 0, 2, 3, 1) inputs and modules; 5-d: channels_last_3d.
    # Where ExecuTorch's kernel takes only the default dim order the case is recorded as
    # skipped with its reason.
    def C4(*shape, dtype=None):
        return T(*shape, dtype=dtype, cl=True)

    def clmod(ctor):
        return lambda dt, ctor=ctor: ctor().to(dt).to(memory_format=cl)

    case("conv2d", "conv2d_cl", clmod(lambda: nn.Conv2d(3, 4, 3, padding=1)), [C4(1, 3, 5, 5)], FLOATS, module=True, tol=ctol)
    case("conv2d", "conv2d_cl_groups_stride", clmod(lambda: nn.Conv2d(4, 6, 3, stride=2, groups=2)), [C4(2, 4, 6, 5)], [f32], module=True)
    case("conv2d", "conv2d_cl_input_only", lambda dt: nn.Conv2d(3, 4, 2).to(dt), [C4(1, 3, 4, 4)], [f32], module=True)
    case("conv2d", "convolution_cl_int", lambda x, w: A.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
         [C4(1, 2, 4, 4), C4(3, 2, 3, 3)], [f32, i32, i64])
    case("conv_transpose2d", "conv_transpose2d_cl", clmod(lambda: nn.ConvTranspose2d(3, 2, 3, stride=2)), [C4(1, 3, 3, 3)], [f32], module=True)
    case("batch_norm", "batch_norm2d_eval_cl", lambda dt: bn(dt).to(memory_format=cl), [C4(2, 3, 4, 4)], [f32], module=True)
    case("max_pool2d", "max_pool2d_cl", lambda a: F.max_pool2d(a, 2), [C4(1, 3, 4, 6)], [f32, f16, i64])
    case("max_pool2d", "max_pool2d_indices_cl", lambda a: tuple(F.max_pool2d(a, 3, 2, 1, return_indices=True)), [C4(2, 3, 5, 5)], [f32])
    case("avg_pool2d", "avg_pool2d_cl", lambda a: F.avg_pool2d(a, 2), [C4(1, 3, 4, 6)], [f32])
    case("adaptive_avg_pool2d", "adaptive_avg_pool2d_cl", lambda a: F.adaptive_avg_pool2d(a, (2, 3)), [C4(1, 3, 4, 6)], [f32])
    case("upsample", "nearest_x2_cl", lambda a: F.interpolate(a, scale_factor=2, mode="nearest"), [C4(1, 3, 2, 3)], [f32, u8])
    case("upsample", "bilinear_cl", lambda a: F.interpolate(a, size=(4, 5), mode="bilinear"), [C4(1, 3, 3, 3)], [f32, i32])
    case("add", "add_cl", lambda a, b: a + b, [C4(1, 3, 2, 4), C4(1, 3, 2, 4)], [f32, i64])
    case("add", "add_cl_bcast", lambda a, b: a + b, [C4(2, 3, 2, 4), T(4)], [f32])
    case("add", "add_cl_mixed_layout", lambda a, b: a + b, [C4(1, 3, 2, 4), T(1, 3, 2, 4)], [f32])
    case("add", "add_cl3d", lambda a, b: a + b, [T(1, 2, 2, 2, 3, cl=True), T(1, 2, 2, 2, 3, cl=True)], [f32])
    case("mul", "mul_cl_scalar", lambda a: a * 1.5, [C4(2, 3, 2, 2)], [f32, f16])
    case("relu", "relu_cl", torch.relu, [C4(1, 3, 2, 4)], [f32, i8])
    case("sigmoid", "sigmoid_cl", torch.sigmoid, [C4(1, 3, 2, 4)], [f32])
    case("gelu", "gelu_cl", F.gelu, [C4(1, 3, 2, 4)], [f32])
    case("hardtanh", "hardtanh_cl", F.relu6, [C4(1, 3, 2, 4)], [f32])
    case("clamp", "clamp_cl", lambda a: torch.clamp(a, -0.5, 0.5), [C4(1, 3, 2, 4)], [f32])
    case("where", "where_cl", lambda c, a, b: torch.where(c, a, b),
         [In((1, 3, 2, 4), b8, "bool", layout="channels_last"), C4(1, 3, 2, 4), C4(1, 3, 2, 4)], [f32])
    case("exp", "exp_cl", torch.exp, [C4(1, 3, 2, 4)], [f32])
    case("cat", "cat_cl_dim1", lambda a, b: torch.cat([a, b], 1), [C4(1, 2, 2, 3), C4(1, 3, 2, 3)], [f32, i64])
    case("cat", "cat_cl_dim0", lambda a, b: torch.cat([a, b], 0), [C4(1, 2, 2, 3), C4(2, 2, 2, 3)], [f32])
    case("cat", "cat_cl_dim3", lambda a, b: torch.cat([a, b], 3), [C4(1, 2, 2, 3), C4(1, 2, 2, 1)], [f32])
    case("clone", "clone_cl", torch.clone, [C4(1, 3, 2, 4)], [f32, u8])
    case("clone", "clone_cl3d", torch.clone, [T(1, 2, 2, 2, 3, cl=True)], [f32])
    case("clone", "to_channels_last", lambda a: a.to(memory_format=cl), [T(1, 3, 2, 4)], [f32, i64])
    case("clone", "to_contiguous_from_cl", lambda a: a.contiguous(), [C4(1, 3, 2, 4)], [f32, b8])
    case("to_copy", "to_f16_cl", lambda a: a.to(f16), [C4(1, 3, 2, 4)], [f32])
    case("permute", "permute_cl", lambda a: a.permute(0, 2, 3, 1), [C4(1, 3, 2, 4)], [f32])
    case("transpose", "transpose_cl", lambda a: a.transpose(1, 2), [C4(1, 3, 2, 4)], [f32])
    case("softmax", "softmax_cl_dim1", lambda a: torch.softmax(a, 1), [C4(1, 3, 2, 4)], [f32])
    case("softmax", "softmax_cl_last", lambda a: torch.softmax(a, -1), [C4(2, 3, 2, 4)], [f32])
    case("log_softmax", "log_softmax_cl", lambda a: torch.log_softmax(a, 1), [C4(1, 3, 2, 4)], [f32])
    case("cumsum", "cumsum_cl", lambda a: torch.cumsum(a, 1), [C4(1, 3, 2, 4)], [f32])
    case("argmax", "argmax_cl", lambda a: a.argmax(1), [C4(1, 3, 2, 4)], [f32])
    case("sum", "sum_cl", lambda a: a.sum(1), [C4(1, 3, 2, 4)], [f32])
    case("mean", "mean_cl", lambda a: a.mean((2, 3)), [C4(1, 3, 2, 4)], [f32])
    case("amax", "amax_cl", lambda a: a.amax(1), [C4(1, 3, 2, 4)], [f32])
    case("constant_pad", "pad_cl", lambda a: F.pad(a, (1, 1, 0, 1)), [C4(1, 2, 2, 3)], [f32])
    case("flip", "flip_cl", lambda a: a.flip(1), [C4(1, 3, 2, 4)], [f32])
    case("roll", "roll_cl", lambda a: torch.roll(a, 1, 1), [C4(1, 3, 2, 4)], [f32], preserve=[A.roll.default])
    case("slice", "slice_cl", lambda a: a[:, 1:, :, ::2], [C4(1, 3, 2, 4)], [f32])
    case("select", "select_cl", lambda a: a[:, 1], [C4(1, 3, 2, 4)], [f32])
    case("split", "split_cl", lambda a: torch.split(a, 1, 1), [C4(1, 3, 2, 4)], [f32])
    case("layer_norm", "layer_norm_cl", lambda dt: nn.LayerNorm(4).to(dt), [C4(1, 3, 2, 4)], [f32], module=True)
    case("group_norm", "group_norm_cl", lambda dt: nn.GroupNorm(1, 3).to(dt).to(memory_format=cl), [C4(1, 3, 2, 4)], [f32], module=True)
    case("view", "flatten_cl", lambda a: a.flatten(1), [C4(1, 3, 2, 4)], [f32])
    case("pixel_shuffle", "pixel_shuffle_cl", lambda a: F.pixel_shuffle(a, 2), [C4(1, 8, 2, 3)], [f32], preserve=[A.pixel_shuffle.default])
    case("index_select", "index_select_cl", lambda a, i: torch.index_select(a, 1, i), [C4(1, 3, 2, 4), Idx((2,), 3)], [f32])
    case("unsqueeze", "unsqueeze_cl", lambda a: a.unsqueeze(1), [C4(1, 3, 2, 4)], [f32])
    case("expand", "expand_cl", lambda a: a.expand(2, 3, 2, 4), [C4(1, 3, 2, 4)], [f32])
    case("tril", "tril_cl", torch.tril, [C4(1, 2, 3, 3)], [f32], preserve=[A.tril.default])
    case("leaky_relu", "leaky_relu_cl", F.leaky_relu, [C4(1, 3, 2, 4)], [f32])
    case("glu", "glu_cl", lambda a: F.glu(a, 1), [C4(1, 4, 2, 3)], [f32], preserve=[A.glu.default])
    case("logical_not", "logical_not_cl", torch.logical_not, [C4(1, 3, 2, 4)], [f32])
    case("eq", "eq_cl", torch.eq, [C4(1, 3, 2, 4), C4(1, 3, 2, 4)], [i32])
    case("embedding", "embedding_cl_idx", lambda w, i: F.embedding(i, w), [T(5, 2), In((1, 2, 2, 3), i64, "int", 0, 5, layout="channels_last")], [f32])
    # topk: which of tied values' indices come first is up to std::nth_element / std::sort
    # (ExecuTorch's kernel): check="topk" compares values exactly and checks that each index
    # points at its value (meta "dim"); inputs without ties compare indices exactly too
    last = {"dim": -1}
    case("topk", "topk", lambda a: tuple(torch.topk(a, 2)), [T(3, 5)], EVERY, check="topk", meta=last)
    case("topk", "topk_smallest_dim0", lambda a: tuple(torch.topk(a, 3, dim=0, largest=False)), [T(4, 3)], [f32, i32], check="topk", meta={"dim": 0})
    case("topk", "topk_distinct", lambda a: tuple(torch.topk(a, 3)), [In((2, 6), None, "perm")], EVERY)
    case("topk", "topk_k0", lambda a: tuple(torch.topk(a, 0)), [T(3, 4)], [f32])
    case("topk", "topk_nan", lambda a: tuple(torch.topk(a, 3)), [S(2, 5)], [f32], check="topk", meta=last)
    case("topk", "topk_0d", lambda a: tuple(torch.topk(a, 1, dim=0)), [T()], [f32])


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


def tensor_bytes(t: torch.Tensor, dim_order: Optional[Sequence[int]] = None) -> bytes:
    """Raw bytes of `t` laid out in `dim_order` (C order when None)."""
    t = t.detach().cpu()
    if dim_order is not None and t.dim() > 0:
        t = t.permute(*dim_order)
    t = t.contiguous()
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


def run_isolated(buf: bytes, inputs) -> "tuple[bool, Any]":
    """Runs the program with ExecuTorch's runtime in a forked child, so that a kernel that
    aborts the process (ExecuTorch's ET_CHECK / assert on some invalid inputs) only loses its
    case. Returns (True, outputs) or (False, reason)."""
    import pickle
    import select
    import signal
    import tempfile

    from executorch.runtime import Runtime

    r, w = os.pipe()
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        os.dup2(err.fileno(), 2)
        try:
            method = Runtime.get().load_program(buf).load_method("forward")
            outs = list(method.execute(list(inputs)))
            data = pickle.dumps((True, outs))
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            data = pickle.dumps((False, short_reason(e)))
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    chunks = []
    with os.fdopen(r, "rb") as f:
        while True:
            ready, _, _ = select.select([f], [], [], 120)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                break
            b = f.read1(1 << 20) if hasattr(f, "read1") else f.read()
            if not b:
                break
            chunks.append(b)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if data:
        return pickle.loads(data)
    err.seek(0)
    lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    why = lines[-1] if lines else ""
    return False, f"ExecuTorch's runtime aborted (wait status {status}): {why}"[:300]


def run_case(c: Case, dt: torch.dtype, outdir: Path, blob: bytearray) -> Dict[str, Any]:
    from executorch.exir import EdgeCompileConfig, to_edge

    name = f"{c.name}_{SHORT[dt]}"
    seed = zlib.crc32(name.encode())
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    inputs = tuple(make_input(s, dt, g) for s in c.inputs)
    try:
        module = c.make(dt).eval()
        try:
            with torch.no_grad():
                eager = flatten(module(*[x.clone() for x in inputs]))
        except Exception:
            # eager PyTorch lacks some kernels ExecuTorch has (integer convolution...)
            eager = None
        ep = torch.export.export(module, inputs, strict=False)
        config = EdgeCompileConfig(
            _check_ir_validity=not (c.preserve or c.edit),
            preserve_ops=list(c.preserve),
            _skip_dim_order=c.skip_dim_order,
        )
        edge = to_edge(ep, compile_config=config)
        if c.edit is not None:
            c.edit(edge.exported_program().graph_module)
        et = edge.to_executorch()
        if c.post is not None:
            from executorch.exir import ExecutorchBackendConfig
            from executorch.exir._serialize._serialize import serialize_for_executorch

            c.post(et.executorch_program)
            et._pte_data, et._tensor_data = serialize_for_executorch(
                et._emitter_output, ExecutorchBackendConfig(), et._data_serializer, et._named_data
            )
            et._buffer = None
    except Exception as e:
        return {"name": name, "skipped": True, "stage": "export", "reason": short_reason(e)}
    plan = et.executorch_program.execution_plan[0]
    ops = sorted({op_name(o) for o in plan.operators})
    buf = et.buffer
    ok, res = run_isolated(buf, inputs)
    if not ok:
        return {"name": name, "skipped": True, "stage": "run", "reason": res, "operators": ops}
    outs = res
    if any(not isinstance(o, torch.Tensor) for o in outs):
        return {"name": name, "skipped": True, "stage": "run", "reason": "non-tensor output", "operators": ops}
    pte = outdir / f"{name}.pte"
    pte.write_bytes(buf)

    def dim_order(vi: int) -> Optional[List[int]]:
        v = plan.values[vi].val
        order = list(getattr(v, "dim_order", None) or [])
        return order if order and order != list(range(len(order))) else None

    def put(t: torch.Tensor, order: Optional[List[int]]) -> Dict[str, Any]:
        while len(blob) % 8:
            blob.append(0)
        b = tensor_bytes(t, order)
        d = {"dtype": DTYPE_NAME[t.dtype], "shape": list(t.shape), "offset": len(blob), "nbytes": len(b)}
        if order is not None:
            d["dim_order"] = order
        blob.extend(b)
        return d

    if eager is not None and len(outs) == len(eager):
        diff = max((max_abs_diff(o, e) for o, e in zip(outs, eager)), default=0.0)
    else:
        diff = None
    # Non-default dim orders: several of ExecuTorch's portable kernels accept a channels-last
    # tensor but index it as if it were contiguous (cat, flip, constant_pad_nd, unsqueeze_copy,
    # glu, log_softmax...). Such a result is not a golden: the case must agree with eager
    # PyTorch, else it is recorded as skipped.
    if any(s.layout != "contiguous" for s in c.inputs):
        limit = {f16: 1e-1, bf16: 1e-1}.get(dt, 1e-3) if dt.is_floating_point else 0.0
        if diff is None or diff == float("inf") or diff > limit:
            return {
                "name": name,
                "skipped": True,
                "stage": "eager",
                "reason": f"ExecuTorch's result differs from eager PyTorch by {diff} "
                "(its kernel ignores the dim order)",
                "operators": ops,
            }
    rec: Dict[str, Any] = {
        "name": name,
        "pte": pte.name,
        "dtype": DTYPE_NAME[dt],
        "operators": ops,
        "inputs": [put(x, dim_order(vi)) for x, vi in zip(inputs, plan.inputs)],
        "outputs": [put(o, dim_order(vi)) for o, vi in zip(outs, plan.outputs)],
        "eager_max_abs_diff": diff if diff is None or diff < float("inf") else "inf",
    }
    if dt in c.tol:
        rec["tolerance"] = c.tol[dt]
    if c.check != "values":
        rec["check"] = c.check
    if c.meta:
        rec["meta"] = c.meta
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
                d = r["eager_max_abs_diff"]
                if d is not None and (d == "inf" or d > 1e-3):
                    print(f"   note {r['name']}: ExecuTorch vs eager max abs diff {d}")
    (outdir / "data.bin").write_bytes(bytes(blob))
    doc = {
        "op": op,
        "versions": {"torch": torch.__version__, "executorch": _et_version()},
        "data": "data.bin",
        "cases": recs,
        "skipped": skipped,
    }
    (outdir / "cases.json").write_text(dump_cases_json(doc))
    ops = sorted({o for r in recs for o in r["operators"]})
    print(f"== {op}: {len(recs)} cases, {len(skipped)} skipped; {', '.join(ops)}")
    return {"cases": len(recs), "skipped": len(skipped)}


def dump_cases_json(doc: Dict[str, Any]) -> str:
    """cases.json text: the top level one key per line, each case and skipped case on one line."""
    parts = []
    for k, v in doc.items():
        if isinstance(v, list):
            items = ",\n".join("  " + json.dumps(e, separators=(",", ":")) for e in v)
            parts.append(f" {json.dumps(k)}: [\n{items}\n ]" if v else f" {json.dumps(k)}: []")
        else:
            parts.append(f" {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


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
    import warnings

    warnings.filterwarnings("ignore")
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
