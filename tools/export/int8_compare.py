#!/usr/bin/env python3
"""Compare `pteron run` with ExecuTorch's output for tools/export/int8_repro.py directories:
max |diff| in output quantization steps (the step is estimated from ExecuTorch's output, the
smallest gap between distinct values) and how many elements differ.

    python3 tools/export/int8_compare.py tools/export/out/int8_static/mobilenet_v2 [...]
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PTERON = Path(__import__("os").environ.get("PTERON", Path(__file__).resolve().parents[2] / "target/release/pteron"))

for d in map(Path, sys.argv[1:]):
    with tempfile.TemporaryDirectory() as td:
        subprocess.run([str(PTERON), "run", str(d / "model.pte"), "-i", str(d / "input0.npy"),
                        "--output-dir", td], check=True, capture_output=True)
        outs = sorted(Path(td).glob("*.npy"))
        for i, p in enumerate(outs):
            a = np.load(p).astype(np.float64)
            e = np.load(d / f"expected{i}.npy").astype(np.float64)
            u = np.unique(e)
            step = np.min(np.diff(u)) if len(u) > 1 else 1.0
            diff = np.abs(a - e)
            print(f"{d.name} out{i} {e.shape}: max|diff| {diff.max():.5f} = {diff.max() / step:.2f} steps "
                  f"(step {step:.5f}); {int((diff > step / 2).sum())} of {e.size} differ; "
                  f">1 step: {int((diff > 1.5 * step).sum())}")
