#!/usr/bin/env python3
"""Export the four MLPerf Tiny models of ExecuTorch's example zoo for the microcontroller
fixtures, with goldens from ExecuTorch's own runtime.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_mlperf_tiny.py            # -> testdata/mcu
    /opt/etvenv/bin/python tools/export/export_mlperf_tiny.py --only ds_cnn --variants fp32

Models (`executorch.examples.models.mlperf_tiny`): DS-CNN keyword spotting, ResNet-8,
MobileNetV1-0.25 (visual wake words), the deep autoencoder (anomaly detection). Weights are
seeded random ones (the zoo ships none), with BatchNorm statistics made non-trivial.

Variants:
- `fp32`: portable fp32 (`to_edge` + `to_executorch`, no delegate).
- `q8`: int8 with the XNNPACK quantizer (symmetric per-channel weights, per-tensor
  activations), calibrated on seeded inputs, not delegated: the program runs the portable
  `quantized_decomposed` ops around fp32 conv/linear kernels.

Layout of one fixture directory, `testdata/mcu/<model>_<variant>/`: `model.pte`,
`input0.bin` and `expected0.bin` (little-endian float32, row-major), `meta.json` (shapes,
operators, sizes). Raw `.bin` files so firmware can embed them with `include_bytes!`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402  (seed_all, randomize_bn)

MODELS = ["ds_cnn", "resnet8", "mobilenet_v1_025", "deep_autoencoder"]
VARIANTS = ["fp32", "q8"]


def build(name: str):
    from executorch.examples.models import mlperf_tiny as mt

    cls = {
        "ds_cnn": mt.DSCNNKWSModel,
        "resnet8": mt.ResNet8Model,
        "mobilenet_v1_025": mt.MobileNetV1025Model,
        "deep_autoencoder": mt.DeepAutoEncoderModel,
    }[name]
    seed = 1000 + MODELS.index(name)
    models.seed_all(seed)
    wrapper = cls()
    module = wrapper.get_eager_model().eval()
    models.randomize_bn(module, seed)
    g = torch.Generator().manual_seed(seed + 1)
    (example,) = wrapper.get_example_inputs()
    shape = tuple(example.shape)

    def sample():
        return (torch.rand(shape, generator=g) * 2 - 1,)

    return module, sample


def export(module, inputs, variant: str, calibration):
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge

    ep = torch.export.export(module, inputs, strict=False)
    if variant == "q8":
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(ep.module(), quantizer)
        for c in calibration:
            prepared(*c)
        converted = convert_pt2e(prepared)
        ep = torch.export.export(converted, inputs, strict=False)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(ExecutorchBackendConfig())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*", default=MODELS)
    ap.add_argument("--variants", nargs="*", default=VARIANTS)
    ap.add_argument("--out", default=str(REPO / "testdata" / "mcu"))
    args = ap.parse_args()
    # The quantized_decomposed out variants (to_executorch) and their kernels (the runtime).
    import executorch.kernels.quantized  # noqa: F401
    from executorch.runtime import Runtime

    rt = Runtime.get()
    for name in args.only:
        for variant in args.variants:
            module, sample = build(name)
            calibration = [sample() for _ in range(8)]
            inputs = sample()
            et = export(module, inputs, variant, calibration)
            d = Path(args.out) / f"{name}_{variant}"
            d.mkdir(parents=True, exist_ok=True)
            pte = d / "model.pte"
            pte.write_bytes(et.buffer)
            method = rt.load_program(str(pte)).load_method("forward")
            (out,) = method.execute(list(inputs))
            with torch.no_grad():
                eager = module(*inputs) if variant == "fp32" else None
            x = inputs[0].numpy().astype("<f4")
            y = out.numpy().astype("<f4")
            (d / "input0.bin").write_bytes(x.tobytes())
            (d / "expected0.bin").write_bytes(y.tobytes())
            ops = sorted(
                {f"{o.name}.{o.overload}" if o.overload else o.name for p in et.executorch_program.execution_plan for o in p.operators}
            )
            meta = {
                "model": name,
                "variant": variant,
                "input_shape": list(x.shape),
                "output_shape": list(y.shape),
                "pte_bytes": pte.stat().st_size,
                "operators": ops,
                "generated_by": "tools/export/export_mlperf_tiny.py (executorch.runtime goldens)",
            }
            if eager is not None:
                meta["eager_max_abs_diff"] = float(np.max(np.abs(eager.numpy() - y)))
            (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
            print(f"{d.name}: {meta['pte_bytes']} B, ops {ops}, out {y.ravel()[:4]}")


if __name__ == "__main__":
    main()
