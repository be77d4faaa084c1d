#!/usr/bin/env python3
"""Small programs for the Cortex-M operators' geometry: each a float module quantized and
lowered the Cortex-M backend's way (as `export_mlperf_tiny.py --variants cm` does), with the
golden from the backend's reference operators. They cover what the MLPerf Tiny models do not:
strides, dilation, depth multipliers, asymmetric padding, ceil-mode pooling, batched linear
rows, residual adds, and both targets' linear forms (M55: kernel sum, M4: bias); and the
operators the MLPerf Tiny models do not call: multiplication (`quantized_mul`), table
activations (`quantized_activation`: sigmoid, tanh), max pooling (`quantized_max_pool2d`),
minimum and maximum.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_cortex_m_ops.py            # -> testdata/mcu_ops
    /opt/etvenv/bin/python tools/export/export_cortex_m_ops.py mul_gate   # only these cases

Each directory: `model.pte`, `input0.bin`, `expected0.bin` (float32, memory order), and
`meta.json` (as the MLPerf Tiny fixtures').
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from export_mlperf_tiny import channels_last, export_cortex_m, physical  # noqa: E402


class Seq(nn.Module):
    def __init__(self, *layers, residual: bool = False, pad=None):
        super().__init__()
        self.body = nn.Sequential(*layers)
        self.residual = residual
        self.pad = pad

    def forward(self, x):
        if self.pad is not None:
            x = F.pad(x, self.pad)
        y = self.body(x)
        return x + y if self.residual else y


class Gate(nn.Module):
    """`conv(x) · x`: two int8 operands of one shape (`quantized_mul`)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        return self.conv(x) * x


class Then(nn.Module):
    """A layer, then a function (an activation the backend turns into a table)."""

    def __init__(self, layer, fn):
        super().__init__()
        self.layer = layer
        self.fn = fn

    def forward(self, x):
        return self.fn(self.layer(x))


class Bounded(nn.Module):
    """`min(max(linear(x), x[:, :8]), x[:, 8:])`: `minimum` and `maximum` of int8 tensors."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)

    def forward(self, x):
        return torch.minimum(torch.maximum(self.linear(x), x[:, :8]), x[:, 8:])


class Ratio(nn.Module):
    """`x / (|linear(x)| + 1)`: `quantized_div` of two int8 tensors of one shape."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return x / (self.linear(x).abs() + 1.0)


class Scores(nn.Module):
    """`a(x) · b(x)ᵀ` per batch (`quantized_batch_matmul`, with `transpose` of its operand)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return torch.bmm(self.a(x), self.b(x).transpose(1, 2))


class ToLast(nn.Module):
    """A convolution, then its channels moved last as a logical permute (`transpose`)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 1)

    def forward(self, x):
        return self.conv(x).permute(0, 2, 3, 1)


def cases():
    yield "conv_stride2_pad1", Seq(nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.ReLU()), (1, 4, 9, 11), "M55"
    # Dilation: the reference (F.conv2d over int32) cannot run it ("slow_conv_dilated" has no Int).
    yield "conv_nobias", Seq(nn.Conv2d(3, 6, 3, padding=2, bias=False)), (1, 3, 12, 10), "M55"
    yield "conv_rect_kernel", Seq(nn.Conv2d(2, 5, (5, 2), stride=(2, 1), padding=(2, 0))), (2, 2, 11, 6), "M4"
    yield "depthwise_multiplier2", Seq(nn.Conv2d(3, 6, 3, groups=3, stride=(1, 2), padding=1)), (1, 3, 8, 9), "M55"
    yield "depthwise_stride2_relu6", Seq(nn.Conv2d(8, 8, 3, groups=8, stride=2, padding=1), nn.ReLU6()), (1, 8, 10, 10), "M4"
    yield "avgpool_ceil_padding", Seq(nn.Conv2d(5, 5, 1), nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)), (1, 5, 9, 8), "M55"
    yield "avgpool_global", Seq(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1)), (1, 3, 7, 6), "M55"
    yield "linear_rows_m55", Seq(nn.Linear(20, 7), nn.ReLU()), (3, 20), "M55"
    yield "linear_rows_m4", Seq(nn.Linear(20, 7)), (3, 20), "M4"
    yield "residual_add", Seq(nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), residual=True), (1, 4, 6, 7), "M55"
    yield "explicit_pad", Seq(nn.Conv2d(3, 4, 3), pad=(1, 2, 3, 0)), (1, 3, 6, 5), "M55"
    yield "mul_gate", Gate(), (1, 4, 5, 6), "M55"
    yield "sigmoid_table", Then(nn.Conv2d(4, 6, 3, padding=1), torch.sigmoid), (1, 4, 5, 7), "M55"
    yield "tanh_table", Then(nn.Linear(16, 8), torch.tanh), (3, 16), "M4"
    yield "maxpool_stride2_pad1", Seq(nn.Conv2d(4, 5, 1), nn.MaxPool2d(3, stride=2, padding=1)), (1, 4, 9, 8), "M55"
    yield "maxpool_relu", Seq(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.MaxPool2d(2)), (1, 3, 8, 9), "M4"
    yield "min_max", Bounded(), (3, 16), "M55"
    yield "div_same_shape", Ratio(), (3, 8), "M55"
    yield "batch_matmul", Scores(), (2, 3, 8), "M55"
    yield "transpose_nhwc", ToLast(), (1, 4, 3, 5), "M55"
    yield "softmax_rows", Then(nn.Linear(10, 12), lambda y: torch.softmax(y, dim=-1)), (4, 10), "M55"


def main() -> None:
    out_root = REPO / "testdata" / "mcu_ops"
    only = set(sys.argv[1:])
    for i, (name, module, shape, cpu) in enumerate(cases()):
        if only and name not in only:
            continue
        torch.manual_seed(2000 + i)
        module = module.eval()
        with torch.no_grad():
            for p in module.parameters():
                p.uniform_(-0.5, 0.5)
        g = torch.Generator().manual_seed(3000 + i)
        calibration = [(channels_last(torch.rand(shape, generator=g) * 2 - 1),) for _ in range(8)]
        inputs = (channels_last(torch.rand(shape, generator=g) * 2 - 1),)
        et, out = export_cortex_m(module, inputs, calibration, cpu)
        d = out_root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "model.pte").write_bytes(et.buffer)
        (d / "input0.bin").write_bytes(physical(inputs[0]).astype("<f4").tobytes())
        (d / "expected0.bin").write_bytes(physical(out).astype("<f4").tobytes())
        ops = sorted(
            {f"{o.name}.{o.overload}" if o.overload else o.name for p in et.executorch_program.execution_plan for o in p.operators}
        )
        meta = {
            "case": name,
            "target": cpu,
            "input_shape": list(shape),
            "input_channels_last": len(shape) == 4,
            "output_shape": list(out.shape),
            "operators": ops,
            "generated_by": "tools/export/export_cortex_m_ops.py (the Cortex-M backend's Python reference operators goldens)",
        }
        (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(f"{name}: {len(et.buffer)} B, {ops}")


if __name__ == "__main__":
    main()
