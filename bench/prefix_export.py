#!/usr/bin/env python3
"""Per-block latency of a model against ExecuTorch: export its prefixes, time them both ways.

ExecuTorch's Python wheel has no per-operator profile of the XNNPACK delegate, so to see where
pteron and ExecuTorch differ inside a network this script exports the prefixes
`features[:k]` of the full MobileNetV2 (the fixture of tools/export/models.py, k = 1 ... 19)
as XNNPACK-lowered programs, each into OUT/kNN/ (model.pte, input0.npy: the image). Time them
with

    /opt/etvenv/bin/python bench/et_latency.py --same-file OUT --pteron target/release/pteron

and the differences between consecutive prefixes are the blocks' times in each runtime.

Usage: /opt/etvenv/bin/python bench/prefix_export.py [--out tools/export/out/mnv2_prefix]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools" / "export"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "tools" / "export" / "out" / "mnv2_prefix"))
    ap.add_argument("--blocks", nargs="+", type=int, help="prefix lengths (default: all)")
    args = ap.parse_args()

    import models
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    fx = models.FULL["mobilenet_v2"]()
    features = fx.module.features
    out = Path(args.out)
    for k in args.blocks or range(1, len(features) + 1):
        d = out / f"k{k:02}"
        d.mkdir(parents=True, exist_ok=True)
        m = torch.nn.Sequential(*features[:k]).eval()
        ep = torch.export.export(m, fx.inputs, strict=False)
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        (d / "model.pte").write_bytes(et.buffer)
        np.save(d / "input0.npy", fx.inputs[0].numpy())
        with torch.no_grad():
            shape = tuple(m(*fx.inputs).shape)
        print(f"{d}: features[:{k}] -> {shape}", flush=True)


if __name__ == "__main__":
    main()
