#!/usr/bin/env python3
"""Export the fixtures of issue 28 part 3 (int8 XNNPACK nodes) into testdata/xnnpack:

- `patch_embed_dq8`: a ViT-like patch embedding (Conv2d kernel = stride = 4), a 3x3 padded
  convolution of two groups and a linear, with PT2E dynamic quantization (`XNNPACKQuantizer`,
  `get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)`) applied to the
  convolutions as well as the linear: XNNPACK's QD8 x QC8 -> F32 convolution nodes.
- `unet_deconv_int8`: a small U-Net-like net whose decoder uses ConvTranspose2d (stride 2,
  with and without padding / output padding), PT2E static per-channel int8: XNNPACK's int8
  deconvolution nodes.

Goldens are ExecuTorch's runtime outputs; meta.json also records |ExecuTorch - fp32 model|
(`et_vs_fp32_max_abs`), the error of the quantization itself.

    /opt/etvenv/bin/python tools/export/export_int8_nodes.py [--out DIR]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export_xnnpack as ex  # noqa: E402
import models  # noqa: E402
from export_fixtures import flatten_outputs, max_abs_diff, to_numpy  # noqa: E402


class PatchEmbed(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, 16, kernel_size=4, stride=4)
        self.conv = nn.Conv2d(16, 8, kernel_size=3, padding=1, groups=2)
        self.head = nn.Linear(8, 10)

    def forward(self, x):
        y = self.patch(x)  # no activation: a fused ReLU would keep it out of the dynamic pattern
        y = self.conv(y)  # [n, 8, 8, 8]
        y = y.flatten(2).transpose(1, 2)  # tokens [n, 64, 8]
        return self.head(y)


class UNetDeconv(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(3, 8, 3, padding=1)
        self.enc2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(16, 8, kernel_size=2, stride=2)
        self.dec = nn.Conv2d(8, 8, 3, padding=1)
        self.up2 = nn.ConvTranspose2d(8, 4, kernel_size=3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        s = torch.relu(self.enc1(x))  # [1, 8, 16, 16]
        y = torch.relu(self.enc2(s))  # [1, 16, 8, 8]
        y = self.up(y) + s  # [1, 8, 16, 16]
        y = torch.relu(self.dec(y))
        return self.up2(y)  # [1, 4, 32, 32]


def _g(seed: int, *shape):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _quantize(m: nn.Module, inputs, dynamic: bool) -> nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    q = XNNPACKQuantizer()
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    q.set_global(config)
    gm = torch.export.export(m, inputs, strict=False).module()
    gm = prepare_pt2e(gm, q)
    gm(*inputs)  # calibration
    return convert_pt2e(gm)


def build(name: str):
    torch.manual_seed(28)
    if name == "patch_embed_dq8":
        m, inputs, dynamic = PatchEmbed().eval(), (_g(281, 2, 3, 32, 32),), True
        desc = "ViT-like patch embedding (Conv2d k=s=4, Conv2d 3x3 p=1 groups=2, Linear), input 2x3x32x32"
    elif name == "unet_deconv_int8":
        m, inputs, dynamic = UNetDeconv().eval(), (_g(282, 1, 3, 16, 16),), False
        desc = "U-Net-like net with ConvTranspose2d (k=2 s=2; k=3 s=2 p=1 op=1), input 1x3x16x16"
    else:
        raise ValueError(name)
    fp32 = copy.deepcopy(m)
    qm = _quantize(m, inputs, dynamic)
    fx = models.Fixture(
        name=name, description=desc, module=qm, inputs=inputs, atol=1e-2, rtol=1e-2
    )
    return fx, fp32


def node_datatypes(pte: bytes):
    """`"XNNConv2d: qdint8, qcint8, fp32 -> fp32"` for every node of the first delegate (the
    payload's flatbuffer read back as JSON with the schema's flatc, as export_xnnpack.py)."""
    import re
    import struct
    import subprocess
    import tempfile

    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte)
    program = getattr(program, "program", program)
    d = program.execution_plan[0].delegates[0]
    blob = bytes(program.backend_delegate_data[d.processed.index].data)
    fb_off, fb_size = struct.unpack_from("<II", blob, 10)
    et_dir = Path(list(__import__("executorch").__path__)[0])
    schema = et_dir / "backends/xnnpack/serialization/runtime_schema.fbs"
    with tempfile.TemporaryDirectory() as td:
        f = Path(td) / "g.bin"
        f.write_bytes(blob[fb_off : fb_off + fb_size])
        flatc = et_dir / "data/bin/flatc"
        cmd = [str(flatc), "--json", "--strict-json", "--raw-binary", "-o", td, str(schema), "--", str(f)]
        subprocess.run(cmd, check=True, capture_output=True)
        g = json.loads(re.sub(r"\b(-?inf|nan)\b", "0", (Path(td) / "g.json").read_text()))
    dtypes = {}
    for v in g["xvalues"]:
        t = v["xvalue_union"]
        t = t.get("tensor_value", t)
        dtypes[t.get("id_out", 0)] = t["datatype"].replace("xnn_datatype_", "")
    out = []
    for n in g["xnodes"]:
        u = n["xnode_union"]
        ins = [dtypes[u[k]] for k in ("input_id", "input1_id", "input2_id", "filter_id", "bias_id") if k in u]
        out.append(f"{n['xnode_union_type']}: {', '.join(ins)} -> {dtypes[u['output_id']]}")
    return out


# The node each fixture exists for.
REQUIRED = {
    "patch_embed_dq8": "XNNConv2d: qdint8, qcint8, fp32 -> fp32",
    "unet_deconv_int8": "XNNConvTranspose2d: qint8, qcint8, qcint32 -> qint8",
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ex.REPO / "testdata" / "xnnpack"))
    ap.add_argument("--only", nargs="+", default=["patch_embed_dq8", "unet_deconv_int8"])
    args = ap.parse_args()
    out = Path(args.out)
    for name in args.only:
        fx, fp32 = build(name)
        meta = ex.run_fixture(fx, out, check_size=True)
        from executorch.runtime import Runtime

        program = Runtime.get().load_program((out / name / "model.pte").read_bytes())
        et = list(program.load_method("forward").execute(list(fx.inputs)))
        with torch.no_grad():
            ref = flatten_outputs(fp32(*fx.inputs))
        meta["et_vs_fp32_max_abs"] = {
            f"base/out{i}": max_abs_diff(to_numpy(a), to_numpy(b)) for i, (a, b) in enumerate(zip(et, ref))
        }
        print(f"   |ET - fp32| = {meta['et_vs_fp32_max_abs']}")
        nodes = node_datatypes((out / name / "model.pte").read_bytes())
        print("   " + "\n   ".join(nodes))
        if REQUIRED[name] not in nodes:
            raise SystemExit(f"{name}: no node {REQUIRED[name]!r}")
        meta["xnnpack_node_datatypes"] = nodes
        (out / name / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
