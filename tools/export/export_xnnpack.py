#!/usr/bin/env python3
"""Export XNNPACK-delegated fixtures: `.pte` programs lowered with
`to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])`, with inputs and golden
outputs produced by ExecuTorch's own runtime (its XNNPACK backend).

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_xnnpack.py             # all -> testdata/xnnpack
    /opt/etvenv/bin/python tools/export/export_xnnpack.py --only mlp cnn
    /opt/etvenv/bin/python tools/export/export_xnnpack.py --out /tmp/x --only mobilenet_v2 --full

Layout of one fixture directory (as testdata/models):

    model.pte
    input0.npy, ...        plan inputs, in order
    expected0.npy, ...     ExecuTorch runtime outputs (XNNPACK backend)
    meta.json              description, delegates, the operators left outside the delegates,
                           the node types inside them, |ExecuTorch - eager| per output

The models are the builders of tools/export/models.py (same seeds, weights and inputs as the
portable fixtures).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402
from export_fixtures import (  # noqa: E402
    _et_version,
    describe,
    flatten_outputs,
    max_abs_diff,
    save_case,
    to_numpy,
)

# fp32 fixtures (issue 5, step 3): the model builders of models.py, and small models here that
# cover the node types those do not produce.
FIXTURES = [
    "mlp",
    "cnn",
    "mobilenet_v2_small",
    "bert_tiny",
    "vit_tiny",
    "unet",
    "xnn_unary",
    "xnn_binary",
    "xnn_spatial",
    "xnn_layout",
    # fp16: the same builders in half precision (model and inputs .half()).
    "mlp_fp16",
    "cnn_fp16",
    "xnn_unary_fp16",
    "xnn_layout_fp16",
    # Quantized: PT2E static int8 (XNNPACKQuantizer, per-channel symmetric weights), dynamic
    # int8 activations with per-channel int8 weights, and the 8da4w recipe (dynamic int8
    # activations, 4-bit blockwise weights with bf16 scales; torchao).
    "cnn_int8",
    "resnet_mini_int8",
    "xnn_binary_int8",
    # ReLU6 after int8 convolutions stays an XNNClamp node (pteron folds it into the conv).
    "mobilenet_v2_small_int8",
    # Issue 28: residual adds whose operands have different scales, on image-like inputs (zero
    # point -128): int8 add must round as XNNPACK's fixed point does.
    "xnn_residual_int8",
    "mlp_dq8",
    "mlp_8da4w",
]


class _Unary(torch.nn.Module):
    """Every unary node type: activations, math functions, clamps (as XNNClamp)."""

    def forward(self, x):
        F = torch.nn.functional
        a = torch.abs(x) + 0.5
        outs = [
            torch.sigmoid(x),
            torch.tanh(x),
            F.hardswish(x),
            F.leaky_relu(x, 0.07),
            F.elu(x, alpha=0.8),
            F.gelu(x),
            torch.exp(x * 0.5),
            torch.log(a),
            torch.sqrt(a),
            torch.rsqrt(a),
            torch.abs(x),
            -x,
            x * x,
            torch.floor(x * 3.0),
            torch.ceil(x * 3.0),
            torch.sin(x),
            torch.cos(x),
            F.hardtanh(x, -0.5, 0.75),
            torch.clamp(x, min=-0.25),
            F.relu6(x * 4.0),
        ]
        return torch.cat(outs, dim=-1)


class _Binary(torch.nn.Module):
    """Binary node types with broadcasting (NumPy rules) and fused output clamps."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.c = torch.nn.Parameter(torch.randn(1, 1, 6, generator=g), requires_grad=False)
        self.prelu = torch.nn.PReLU(6, init=0.2)
        with torch.no_grad():
            self.prelu.weight.copy_(torch.linspace(0.05, 0.5, 6))

    def forward(self, x, y, z):
        # x: [2, 5, 6], y: [5, 1], z: [1, 6, 3, 4]
        a = x + y
        b = x - self.c
        c = x * y
        d = x / (torch.abs(y) + 1.0)
        e = torch.minimum(x, self.c)
        f = torch.maximum(x, y)
        g = torch.relu(x + self.c)
        h = torch.clamp(x * y, -0.3, 0.3)
        return torch.cat([a, b, c, d, e, f, g, h], dim=-1), self.prelu(z)


class _Spatial(torch.nn.Module):
    """Convolutions and pooling beyond the model fixtures: grouped, depthwise with a channel
    multiplier, dilated, transposed with stride/padding/output padding, pooling with padding,
    dilation and ceil mode, average pooling with padding (count_include_pad=False), mean."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        torch.manual_seed(11)
        self.grouped = nn.Conv2d(6, 12, 3, padding=1, groups=3)
        self.dw_mult = nn.Conv2d(12, 24, 3, padding=2, dilation=2, groups=12)
        self.dilated = nn.Conv2d(24, 8, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
        self.deconv = nn.ConvTranspose2d(8, 5, 3, stride=2, padding=1, output_padding=1)
        self.mono = nn.Conv2d(1, 4, 3, padding=1)

    def forward(self, x, m):
        F = torch.nn.functional
        a = F.hardtanh(self.grouped(x), -1.0, 1.0)
        b = self.dw_mult(a)
        c = F.relu(self.dilated(b))
        d = self.deconv(c)
        p1 = F.max_pool2d(x, 3, stride=2, padding=1, dilation=1, ceil_mode=True)
        p2 = F.max_pool2d(x, 2, stride=1, padding=1, dilation=2)
        p3 = F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)
        g = x.mean(dim=(2, 3), keepdim=True)
        e = self.mono(m)
        return d, p1, p2, p3, g, e


class _Layout(torch.nn.Module):
    """Transpose, reshape, slice, concatenation of 3/4/5 inputs, constant padding, bilinear
    resize (half-pixel and align_corners), batch matrix multiply with broadcast batches."""

    def forward(self, x, w):
        F = torch.nn.functional
        # x: [1, 4, 6, 8], w: [8, 3]
        t = x.permute(0, 2, 3, 1)  # [1, 6, 8, 4]
        s1 = t[:, 1:5, :, :]
        s2 = t[:, :, 2:7, :]
        c3 = torch.cat([x, x * 2.0, x + 1.0], dim=1)
        c4 = torch.cat([x, x, x - 1.0, x * 0.5], dim=3)
        c5 = torch.cat([x, -x, x, x * 3.0, x], dim=2)
        p = F.pad(x, (1, 2, 0, 3), value=0.25)
        r1 = F.interpolate(x, size=(9, 13), mode="bilinear", align_corners=False)
        r2 = F.interpolate(x, size=(11, 5), mode="bilinear", align_corners=True)
        mm = torch.matmul(x, w)  # [1, 4, 6, 3]
        bm = torch.bmm(x.reshape(4, 6, 8), x.reshape(4, 6, 8).transpose(1, 2))
        v = x.reshape(1, 4, 48).transpose(1, 2).reshape(2, 96)
        return s1, s2, c3, c4, c5, p, r1, r2, mm, bm, v


def _extra_builders():
    def g(seed: int, *shape):
        return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))

    def fixture(name, desc, module, inputs):
        return models.Fixture(
            name=name, description=desc, module=module.eval(), inputs=inputs, atol=1e-5, rtol=1e-4
        )

    def residual():
        # ResNet-18's stem and three BasicBlocks (16 channels) at 96x96 (the output is the
        # last residual add's, where a difference in rounding shows directly); BN statistics from random train-mode batches;
        # the input is uniform in [0, 1) like an image.
        from torchvision.models.resnet import BasicBlock

        torch.manual_seed(28)
        m = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            *[BasicBlock(16, 16) for _ in range(3)],
        )
        m.train()
        with torch.no_grad():
            for _ in range(3):
                m(torch.rand(4, 3, 96, 96))
        x = torch.from_numpy(np.random.default_rng(28).random((1, 3, 96, 96)).astype(np.float32))
        return fixture(
            "xnn_residual",
            "stem conv7x7/2 + three torchvision BasicBlocks (16 channels, residual adds), "
            "BN statistics from random batches; image-like input 1x3x96x96 in [0, 1)",
            m,
            (x,),
        )

    class DecodeLayer(torch.nn.Module):
        """The linear layers of one SmolLM2-135M decoder layer at one token (hidden 576, 9
        query and 3 key/value heads of 64, MLP 1536): what a decode step's time goes to."""

        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(576, 576, bias=False)
            self.kv = torch.nn.Linear(576, 384, bias=False)
            self.o = torch.nn.Linear(576, 576, bias=False)
            self.gate_up = torch.nn.Linear(576, 3072, bias=False)
            self.down = torch.nn.Linear(1536, 576, bias=False)

        def forward(self, x):
            h = x + self.o(self.q(x))
            g, u = self.gate_up(h).split(1536, dim=-1)
            return h + self.down(torch.nn.functional.silu(g) * u), self.kv(x)

    def decode_layer():
        torch.manual_seed(29)
        return fixture(
            "decode_layer",
            "the linear layers of one SmolLM2-135M decoder layer at one token (not committed: "
            "instruction counts, tools/dev/aarch64_insn_counts.sh)",
            DecodeLayer(),
            (g(29, 1, 576),),
        )

    return {
        "decode_layer": decode_layer,
        "xnn_residual": residual,
        "xnn_unary": lambda: fixture(
            "xnn_unary", "unary node types over a [3, 7, 9] input", _Unary(), (g(1, 3, 7, 9),)
        ),
        "xnn_binary": lambda: fixture(
            "xnn_binary",
            "binary node types with broadcasting, fused clamps, PReLU",
            _Binary(),
            (g(2, 2, 5, 6), g(3, 5, 1), g(8, 1, 6, 3, 4)),
        ),
        "xnn_spatial": lambda: fixture(
            "xnn_spatial",
            "grouped / depthwise-multiplier / dilated / transposed convolutions, pooling variants",
            _Spatial(),
            (g(4, 1, 6, 11, 13), g(5, 1, 1, 7, 9)),
        ),
        "xnn_layout": lambda: fixture(
            "xnn_layout",
            "transpose, reshape, slice, concatenate 3-5, pad, bilinear resize, matmul",
            _Layout(),
            (g(6, 1, 4, 6, 8), g(7, 8, 3)),
        ),
    }
MAX_TOTAL_BYTES = 3 * 1024 * 1024  # resnet_mini is covered in int8 only, to stay below it


def half(fx: models.Fixture) -> models.Fixture:
    """The fixture in half precision: module and floating inputs converted."""
    import dataclasses

    return dataclasses.replace(
        fx,
        name=fx.name + "_fp16",
        description=fx.description + ", in float16",
        module=fx.module.half(),
        inputs=tuple(t.half() if t.is_floating_point() else t for t in fx.inputs),
        atol=1e-2,
        rtol=1e-2,
    )


def quantized(fx: models.Fixture, mode: str) -> models.Fixture:
    """The fixture with its module quantized for XNNPACK (`int8`: PT2E static, `dq8`: PT2E
    dynamic linear, `8da8w`: torchao int8 dynamic activations + int8 per-channel weights,
    `8da4w`: torchao int8 dynamic activations + int4 blockwise weights)."""
    import dataclasses

    m = fx.module.eval()
    if mode in ("int8", "dq8"):
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        q = XNNPACKQuantizer()
        config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=(mode == "dq8"))
        if mode == "dq8":
            # Dynamic quantization applies to linear layers only (a global config would also
            # annotate embedding lookups and break their integer indices).
            q.set_module_type(torch.nn.Linear, config)
        else:
            q.set_global(config)
        gm = torch.export.export(m, fx.inputs, strict=False).module()
        gm = prepare_pt2e(gm, q)
        gm(*fx.inputs)  # calibration
        m = convert_pt2e(gm)
    elif mode in ("8da8w", "8da4w"):
        from torchao.quantization import quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

        weight_dtype, granularity = (torch.int8, PerAxis(0)) if mode == "8da8w" else (torch.int4, PerGroup(32))
        quantize_(m, Int8DynamicActivationIntxWeightConfig(weight_dtype=weight_dtype, weight_granularity=granularity))
    else:
        raise ValueError(mode)
    return dataclasses.replace(
        fx,
        name=f"{fx.name}_{mode}",
        description=f"{fx.description}, quantized ({mode})",
        module=m,
        atol=1e-2,
        rtol=1e-2,
    )


def lower(fx: models.Fixture):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(fx.module, fx.inputs, dynamic_shapes=fx.dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return edge.to_executorch()


def node_types(pte: bytes) -> Dict[str, Any]:
    """Delegates of the program and the XNNPACK node types inside them (read back with the
    executorch deserializer and the flatbuffer schema's Python classes)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    program = getattr(program, "program", program)
    plan = program.execution_plan[0]
    ops = sorted({f"{o.name}.{o.overload}" if o.overload else o.name for o in plan.operators})
    delegates = []
    types: collections.Counter = collections.Counter()
    for d in plan.delegates:
        ref = d.processed
        if ref.location.name == "INLINE":
            blob = bytes(program.backend_delegate_data[ref.index].data)
        else:
            seg = program.segments[ref.index]
            base = struct.unpack_from("<Q", pte, 8 + 16)[0]  # eh00 segment_base_offset
            blob = pte[base + seg.offset : base + seg.offset + seg.size]
        delegates.append({"id": d.id, "location": ref.location.name, "bytes": len(blob)})
        if blob[4:8] == b"XH00":
            fb_off, fb_size = struct.unpack_from("<II", blob, 10)
            fb = blob[fb_off : fb_off + fb_size]
        else:
            fb = blob
        types.update(_xnode_types(fb))
    return {"operators": ops, "delegates": delegates, "node_types": dict(sorted(types.items()))}


def _xnode_types(fb: bytes) -> List[str]:
    import re
    import subprocess
    import tempfile

    et_dir = Path(list(__import__("executorch").__path__)[0])
    schema = et_dir / "backends/xnnpack/serialization/runtime_schema.fbs"
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "g.bin"
        p.write_bytes(fb)
        flatc = et_dir / "data/bin/flatc"
        subprocess.run(
            [str(flatc), "--json", "--strict-json", "--raw-binary", "-o", td, str(schema), "--", str(p)],
            check=True,
            capture_output=True,
        )
        txt = (Path(td) / "g.json").read_text()
    # Only the node type names are needed (no parsing of inf/nan literals).
    return re.findall(r'"xnode_union_type":\s*"(\w+)"', txt)


def run_fixture(fx: models.Fixture, outdir: Path, check_size: bool) -> Dict[str, Any]:
    from executorch.runtime import Runtime

    print(f"== {fx.name}")
    t0 = time.perf_counter()
    et = lower(fx)
    pte_bytes = et.buffer
    fdir = outdir / fx.name
    fdir.mkdir(parents=True, exist_ok=True)
    pte = fdir / "model.pte"
    pte.write_bytes(pte_bytes)
    info = node_types(pte_bytes)
    print(
        f"   lowered in {time.perf_counter() - t0:.1f}s, {len(pte_bytes)} bytes, "
        f"{len(info['delegates'])} delegates, nodes {info['node_types']}, other ops {info['operators']}"
    )

    # The runtime reads the file itself (its bytes stay alive with the program).
    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    cases = [("", fx.inputs)] + list(fx.extra_cases.items())
    case_meta = []
    diffs: Dict[str, float] = {}
    base_outputs = None
    for sub, inputs in cases:
        et_out = list(method.execute(list(inputs)))
        with torch.no_grad():
            eager = flatten_outputs(fx.module(*[t.clone() for t in inputs]))
        for i, (a, b) in enumerate(zip(et_out, eager)):
            d = max_abs_diff(to_numpy(a), to_numpy(b))
            diffs[f"{sub or 'base'}/out{i}"] = d
            print(f"   {sub or 'base'} out{i} {list(to_numpy(a).shape)}: max|ET-eager| = {d:.3e}")
        save_case(fdir / sub if sub else fdir, inputs, et_out)
        if base_outputs is None:
            base_outputs = et_out
        case_meta.append(
            {
                "dir": sub,
                "note": "",
                "inputs": [describe(t) for t in inputs],
                "outputs": [describe(o) for o in et_out],
            }
        )
    meta = {
        "name": fx.name,
        "description": fx.description + " (lowered to XNNPACK)",
        "inputs": [describe(t) for t in fx.inputs],
        "outputs": [describe(o) for o in base_outputs],
        "operators": info["operators"],
        "delegates": info["delegates"],
        "xnnpack_node_types": info["node_types"],
        "tolerance": {"atol": fx.atol, "rtol": fx.rtol},
        "cases": case_meta,
        "et_vs_eager_max_abs": diffs,
        "pte_bytes": len(pte_bytes),
        "versions": {"torch": torch.__version__, "executorch": _et_version()},
    }
    if fx.dynamic_info:
        meta["dynamic"] = fx.dynamic_info
    (fdir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", help="fixture names (default: all of FIXTURES)")
    ap.add_argument("--out", default=str(REPO / "testdata" / "xnnpack"))
    ap.add_argument("--full", action="store_true", help="allow the full-size builders (not committed)")
    args = ap.parse_args()
    names = args.only or FIXTURES
    builders = dict(models.COMMITTED)
    builders.update(_extra_builders())
    if args.full:
        builders.update(models.FULL)
    outdir = Path(args.out)
    total = 0
    for name in names:
        if name.endswith("_fp16") and name[: -len("_fp16")] in builders:
            base = builders[name[: -len("_fp16")]]
            builders[name] = lambda base=base: half(base())
        for mode in ("int8", "dq8", "8da8w", "8da4w"):
            suffix = "_" + mode
            if name.endswith(suffix) and name[: -len(suffix)] in builders:
                base = builders[name[: -len(suffix)]]
                builders[name] = lambda base=base, mode=mode: quantized(base(), mode)
        if name not in builders:
            print(f"unknown fixture {name}; known: {sorted(builders)}", file=sys.stderr)
            return 2
        fx = builders[name]()
        meta = run_fixture(fx, outdir, check_size=not args.full)
        total += meta["pte_bytes"]
    if not args.full and outdir == REPO / "testdata" / "xnnpack":
        size = sum(p.stat().st_size for p in outdir.rglob("*") if p.is_file())
        print(f"testdata/xnnpack: {size} bytes")
        if size > MAX_TOTAL_BYTES:
            print(f"WARNING: fixtures exceed {MAX_TOTAL_BYTES} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
