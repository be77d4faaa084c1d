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
- `cm`: int8 the Cortex-M backend's way (`CortexMQuantizer`, `to_edge` with its compile config,
  `CortexMPassManager` for a Cortex-M55; `cm4`: the same for a Cortex-M4, whose linear layers
  carry a bias where the M55's carry a precomputed kernel sum): the program calls `cortex_m::quantized_conv2d` and
  the backend's other operators, with channels-last 4-d inputs. ExecuTorch's pip runtime has no
  kernels for them, so the golden is the backend's own reference: the operators' Python
  implementations (`backends/cortex_m/ops/operators.py`) run over the transformed program.
  Needs `tosa-tools` (the Arm backend's Python side imports it).

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
VARIANTS = ["fp32", "q8", "cm", "cm4"]


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


def export_cortex_m(module, inputs, calibration, cpu_name: str):
    """The Cortex-M backend's flow; returns the program and the reference output."""
    from executorch.backends.cortex_m.edge_compile_config import cortex_m_edge_compile_config
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.backends.cortex_m.quantizer.quantizer import CortexMQuantizer
    from executorch.backends.cortex_m.target_config import CortexM, CortexMTargetConfig
    from executorch.exir import ExecutorchBackendConfig, to_edge
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    ep = torch.export.export(module, inputs, strict=True)
    prepared = prepare_pt2e(ep.module(check_guards=False), CortexMQuantizer())
    for c in calibration:
        prepared(*c)
    converted = convert_pt2e(prepared)
    edge = to_edge(torch.export.export(converted, inputs, strict=True), compile_config=cortex_m_edge_compile_config())
    transformed = CortexMPassManager(edge.exported_program(), target_config=CortexMTargetConfig(cpu=CortexM[cpu_name])).transform()
    edge._edge_programs["forward"] = transformed
    with torch.no_grad():
        reference = transformed.module()(*inputs)
    return edge.to_executorch(ExecutorchBackendConfig()), reference


def channels_last(t: torch.Tensor) -> torch.Tensor:
    return t.to(memory_format=torch.channels_last) if t.dim() == 4 else t


def physical(t: torch.Tensor) -> np.ndarray:
    """The tensor's elements in memory order (NHWC for a channels-last 4-d tensor)."""
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
        t = t.permute(0, 2, 3, 1)
    return t.contiguous().numpy()


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
            d = Path(args.out) / f"{name}_{variant}"
            d.mkdir(parents=True, exist_ok=True)
            pte = d / "model.pte"
            eager = None
            if variant in ("cm", "cm4"):
                calibration = [tuple(channels_last(t) for t in c) for c in calibration]
                inputs = tuple(channels_last(t) for t in inputs)
                et, out = export_cortex_m(module, inputs, calibration, "M55" if variant == "cm" else "M4")
                pte.write_bytes(et.buffer)
            else:
                et = export(module, inputs, variant, calibration)
                pte.write_bytes(et.buffer)
                method = rt.load_program(str(pte)).load_method("forward")
                (out,) = method.execute(list(inputs))
                with torch.no_grad():
                    eager = module(*inputs) if variant == "fp32" else None
            x = physical(inputs[0]).astype("<f4")
            y = physical(out).astype("<f4")
            (d / "input0.bin").write_bytes(x.tobytes())
            (d / "expected0.bin").write_bytes(y.tobytes())
            ops = sorted(
                {f"{o.name}.{o.overload}" if o.overload else o.name for p in et.executorch_program.execution_plan for o in p.operators}
            )
            meta = {
                "model": name,
                "variant": variant,
                "input_shape": list(inputs[0].shape),
                "input_channels_last": bool(inputs[0].dim() == 4 and variant.startswith("cm")),
                "output_shape": list(out.shape),
                "pte_bytes": pte.stat().st_size,
                "operators": ops,
                "generated_by": "tools/export/export_mlperf_tiny.py ("
                + ("the Cortex-M backend's Python reference operators" if variant.startswith("cm") else "executorch.runtime")
                + " goldens)",
            }
            if eager is not None:
                meta["eager_max_abs_diff"] = float(np.max(np.abs(eager.numpy() - y)))
            (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
            print(f"{d.name}: {meta['pte_bytes']} B, ops {ops}, out {y.ravel()[:4]}")


if __name__ == "__main__":
    main()
