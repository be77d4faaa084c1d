#!/usr/bin/env python3
"""Export the files under testdata/security/: programs of kinds pteron does not run, for tests
that show it rejects them cleanly (crates/pteron/tests/malformed.rs, `advisories`).

    /opt/etvenv/bin/python fuzz/export_security_fixtures.py

* xnnpack_linear.pte: a Linear+ReLU lowered to the XNNPACK delegate (XnnpackBackend payload
  "XH00" + fb_xnnpack flatbuffer in a segment). pteron has no XNNPACK backend: BackendMissing.
* bundled_mlp.bpte: a BundledProgram (identifier "BP08") wrapping a portable program plus test
  cases; not a .pte: rejected by the identifier check.
"""

import os
import sys
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parent.parent / "testdata" / "security"


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x))


def main():
    from executorch.exir import to_edge, to_edge_transform_and_lower
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    m = Lin().eval()
    x = (torch.randn(2, 4),)
    ep = torch.export.export(m, x)
    xnn = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    (OUT / "xnnpack_linear.pte").write_bytes(xnn.buffer)

    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer,
    )

    et = to_edge(torch.export.export(m, x)).to_executorch()
    suite = MethodTestSuite(
        method_name="forward",
        test_cases=[MethodTestCase(inputs=list(x), expected_outputs=[m(*x)])],
    )
    bp = BundledProgram(et, [suite])
    (OUT / "bundled_mlp.bpte").write_bytes(serialize_from_bundled_program_to_flatbuffer(bp))
    for f in sorted(OUT.iterdir()):
        print(f, f.stat().st_size)


if __name__ == "__main__":
    main()
