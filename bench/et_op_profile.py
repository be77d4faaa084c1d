#!/usr/bin/env python3
"""ExecuTorch's XNNPACK per-operator times beside pteron's per-node times, for one XNNPACK file.

The executorch wheel records XNNPACK's operator events in its ETDump: this loads the program
with `enable_etdump=True`, runs it, and reads the per-operator times with the devtools
Inspector. pteron's side comes from `PTERON_XNNPACK_PROFILE=all pteron run`, which lists every
delegate node in execution order. Both lists are printed in order (ExecuTorch names its
operators after XNNPACK's, e.g. a 1×1 convolution is a "Fully Connected ... GEMM"), with the
medians over the runs, so a layer that is slower in pteron stands out.

Usage: /opt/etvenv/bin/python bench/et_op_profile.py DIR --pteron target/release/pteron \
           [--threads 1] [--runs 30]
  DIR holds model.pte and input*.npy (e.g. tools/export/out/xnnpack_full/mobilenet_v2)
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch


def et_ops(d: Path, threads: int, runs: int):
    from executorch.devtools import Inspector
    from executorch.extension.pybindings import portable_lib as pl

    pl._unsafe_reset_threadpool(threads)
    m = pl._load_for_executorch(str(d / "model.pte"), enable_etdump=True, debug_buffer_size=0)
    n_in = len(list(d.glob("input*.npy")))
    xs = [torch.from_numpy(np.load(d / f"input{i}.npy")) for i in range(n_in)]
    for _ in range(runs + 3):
        m.forward(xs)
    with tempfile.TemporaryDirectory() as t:
        p = Path(t) / "run.etdp"
        m.write_etdump_result_to_file(str(p))
        df = Inspector(etdump_path=str(p)).to_dataframe()
    rows = []
    for name, raw in zip(df["event_name"], df["raw"]):
        if name in ("DELEGATE_CALL", "Method::execute", "Method::init", "Program::load_method") or name.startswith("OPERATOR_CALL"):
            continue
        rows.append((name, statistics.median(list(raw)[3:] or list(raw))))
    return rows


def pteron_nodes(d: Path, binary: str, threads: int, runs: int):
    args = [binary, "run", str(d / "model.pte"), "--threads", str(threads), "--repeat", str(runs)]
    for i in range(len(list(d.glob("input*.npy")))):
        args += ["-i", str(d / f"input{i}.npy")]
    env = {"PTERON_XNNPACK_PROFILE": "all", "PATH": "/usr/bin:/bin"}
    err = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stderr
    rows = []
    for line in err.split("\n"):
        m = re.match(r"\s+([0-9.]+) ms\s+node (\d+) (\w+) -> (\[.*\])", line)
        if m:
            rows.append((f"{m.group(3)} {m.group(4)}", float(m.group(1))))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--pteron", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    d = Path(args.dir)
    et = [r for r in et_ops(d, args.threads, args.runs) if r[1] > 0.0005 or "Reshape" not in r[0]]
    pt = [r for r in pteron_nodes(d, args.pteron, args.threads, args.runs) if "Reshape" not in r[0]]
    print(f"{'ExecuTorch (XNNPACK)':<44} {'ms':>7}   {'pteron':<44} {'ms':>7}  ratio")
    for i in range(max(len(et), len(pt))):
        e = et[i] if i < len(et) else ("", float("nan"))
        p = pt[i] if i < len(pt) else ("", float("nan"))
        ratio = p[1] / e[1] if e[1] and e[1] == e[1] and p[1] == p[1] else float("nan")
        print(f"{e[0][:44]:<44} {e[1]:7.3f}   {p[0][:44]:<44} {p[1]:7.3f}  {ratio:5.2f}")
    se, sp = sum(r[1] for r in et), sum(r[1] for r in pt)
    print(f"{'sum':<44} {se:7.3f}   {'':<44} {sp:7.3f}  {sp / se:5.2f}")


if __name__ == "__main__":
    main()
