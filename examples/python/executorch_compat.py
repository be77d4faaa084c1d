"""A script written for ExecuTorch's Python runtime. To run it on pteron, change the one
import line below to ``from pteron.runtime import Runtime`` (tools/dev/python_tests.sh does
exactly that and runs it without torch installed).

    python examples/python/executorch_compat.py testdata/xnnpack/mobilenet_v2_small

Prints the method's metadata and the outputs' first values and max abs difference from the
fixture's expected outputs.
"""

import sys
from pathlib import Path

import numpy as np

from executorch.runtime import Runtime

d = Path(sys.argv[1])
runtime = Runtime.get()
program = runtime.load_program(d / "model.pte")
print(sorted(program.method_names))
method = program.load_method("forward")
meta = method.metadata
print(meta)

inputs = [np.load(d / f"input{i}.npy") for i in range(meta.num_inputs())]
try:
    # ExecuTorch's runtime takes torch tensors only; pteron takes numpy arrays (or tensors).
    import torch

    inputs = [torch.from_numpy(x) for x in inputs]
except ImportError:
    pass

outputs = method.execute(inputs)
for k, out in enumerate(outputs):
    out = np.asarray(out)
    want = np.load(d / f"expected{k}.npy")
    diff = float(np.abs(out.astype(np.float64) - want.astype(np.float64)).max())
    print(f"output {k}: {out.dtype} {list(out.shape)} {np.round(out.reshape(-1)[:4], 5).tolist()} max|diff| {diff:.3g}")
