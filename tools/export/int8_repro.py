#!/usr/bin/env python3
"""Issue 28 (part 2) repro: full torchvision MobileNetV2 / ResNet-18 (random weights, batch-norm
statistics from random train-mode batches), PT2E static int8 (XNNPACKQuantizer, symmetric
per-channel), calibrated on random inputs, lowered to XNNPACK, run with ExecuTorch's runtime.

    /opt/etvenv/bin/python tools/export/int8_repro.py mobilenet_v2 resnet18
    /opt/etvenv/bin/python tools/export/int8_repro.py mnv2:4      # features[:4] (bisection)
    /opt/etvenv/bin/python tools/export/int8_repro.py r18:5       # children[:5] of ResNet-18

Writes tools/export/out/int8_static/<name>/{model.pte,input0.npy,expected0.npy} (not committed);
compare with `pteron run` using tools/export/int8_compare.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
OUT = HERE / "out" / "int8_static"


def build(spec: str, size: int):
    import torchvision

    torch.manual_seed(0)
    name, _, k = spec.partition(":")
    if name in ("mobilenet_v2", "mnv2"):
        m = torchvision.models.mobilenet_v2()
    elif name in ("resnet18", "r18"):
        m = torchvision.models.resnet18()
    else:
        raise ValueError(spec)
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(4, 3, size, size))
    m.eval()
    if k:
        # "r18:4+1": the stem (children[:4]) and the first block of layer1.
        k, _, blocks = k.partition("+")
        k, blocks = int(k), int(blocks or 0)
        if name in ("mobilenet_v2", "mnv2"):
            m = m.features[:k]
        else:
            m = torch.nn.Sequential(*list(m.children())[:k], *(list(m.layer1)[:blocks] if blocks else []))
    return m


def quantize(m, example, calib):
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    q = XNNPACKQuantizer()
    q.set_global(get_symmetric_quantization_config(is_per_channel=True))
    gm = torch.export.export(m, (example,), strict=False).module()
    gm = prepare_pt2e(gm, q)
    for x in calib:
        gm(x)
    return convert_pt2e(gm)


def lower(m, example, legacy: bool = False):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    ep = torch.export.export(m, (example,), strict=False)
    if legacy:
        # The older flow: to_edge (core ATen decompositions first), then to_backend.
        return to_edge(ep).to_backend(XnnpackPartitioner()).to_executorch()
    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()


def run(spec: str, size: int = 224, outdir: Path = OUT, name: str | None = None):
    from executorch.runtime import Runtime

    spec, _, dist = spec.partition("@")
    m = build(spec, size)
    g = torch.Generator().manual_seed(1)
    # "@e": the legacy lowering flow (to_edge, then to_backend).
    # "@u": image-like inputs, uniform in [0, 1) (the input's zero point is then -128).
    rand = (lambda: torch.rand(1, 3, size, size, generator=g)) if dist == "u" else (
        lambda: torch.randn(1, 3, size, size, generator=g))
    calib = [rand() for _ in range(4)]
    x = rand()
    if dist == "x":
        # "@x": a test input 4x wider than the calibration inputs (saturating quantizations).
        x = 4 * x
    qm = quantize(m, x, calib)
    et = lower(qm, x, legacy=dist == "e")
    d = outdir / (name or (spec.replace(":", "_") + (f"_{dist}" if dist else "")))
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.pte").write_bytes(et.buffer)
    prog = Runtime.get().load_program(d / "model.pte")
    out = prog.load_method("forward").execute([x])
    np.save(d / "input0.npy", x.numpy())
    for i, o in enumerate(out):
        np.save(d / f"expected{i}.npy", o.numpy())
    print(spec, "->", d, [tuple(o.shape) for o in out])
    return d


if __name__ == "__main__":
    for s in sys.argv[1:]:
        run(s)
