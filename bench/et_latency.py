#!/usr/bin/env python3
"""ExecuTorch's own latency on the full models, next to pteron's, measured on this machine.

For each model (the `--full` fixtures of tools/export/export_fixtures.py) this script

  1. exports an XNNPACK-lowered program to tools/export/out/<name>_xnnpack.pte if it is missing
     (`to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])`, fp32);
  2. times, with `executorch.runtime`, the portable program (tools/export/out/<name>/model.pte)
     and the XNNPACK program, at each thread count (XNNPACK's threadpool is resized with
     `_unsafe_reset_threadpool`; the portable kernels are single-threaded);
  3. optionally (`--pteron target/release/pteron`) times `pteron run` on the portable program
     at the same thread counts, interleaved with the ExecuTorch runs.

It prints median latencies (ms) per engine and thread count and the ratio pteron / XNNPACK,
both as wall time and as CPU time of the calling thread (on a machine shared with other work,
the single-threaded CPU time is the steadier measure; with threads only wall time means
latency).

Usage (from the repository root):

    /opt/etvenv/bin/python bench/et_latency.py --pteron $CARGO_TARGET_DIR/release/pteron
    /opt/etvenv/bin/python bench/et_latency.py --models mobilenet_v2 --threads 1 2 --repeat 30
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tools" / "export" / "out"
sys.path.insert(0, str(REPO / "tools" / "export"))

MODELS = ["mobilenet_v2", "all_minilm_l6_v2"]


def export_xnnpack(name: str, path: Path) -> None:
    import models
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    fx = models.FULL[name]()
    ep = torch.export.export(fx.module, fx.inputs, strict=False)
    et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    path.write_bytes(et.buffer)
    print(f"exported {path} ({path.stat().st_size} bytes)", flush=True)


def inputs_of(name: str):
    d = OUT / name
    n = len(list(d.glob("input*.npy")))
    return [torch.from_numpy(np.load(d / f"input{i}.npy")) for i in range(n)]


def time_et(pte: Path, inputs, repeat: int, warmup: int):
    """Median wall time and median CPU time of the calling thread, in ms."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    for _ in range(warmup):
        method.execute(inputs)
    times, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.thread_time()
        method.execute(inputs)
        times.append(time.perf_counter() - t)
        cpu.append(time.thread_time() - c)
    return statistics.median(times) * 1e3, statistics.median(cpu) * 1e3


def time_pteron(binary: str, name: str, threads: int, repeat: int, root: Path = OUT) -> float:
    d = root / name
    args = [binary, "run", str(d / "model.pte"), "--threads", str(threads), "--repeat", str(repeat)]
    for i in range(len(list(d.glob("input*.npy")))):
        args += ["-i", str(d / f"input{i}.npy")]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    m = re.search(r"execute ([0-9.]+) ms", out)
    c = re.search(r"CPU time ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError(f"no execute time in pteron's output:\n{out}")
    return float(m.group(1)), float(c.group(1)) if c else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=MODELS, choices=MODELS)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per engine and setting")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; the median over rounds is reported")
    ap.add_argument("--portable-repeat", type=int, default=3, help="timed runs of ExecuTorch's portable kernels (slow)")
    ap.add_argument("--no-portable", action="store_true", help="skip ExecuTorch's portable program")
    ap.add_argument("--pteron", help="path of the pteron binary to time alongside")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument(
        "--same-file",
        metavar="DIR",
        help="instead: for every model directory in DIR (model.pte lowered to XNNPACK, input*.npy; "
        "e.g. tools/export/out/xnnpack_full from export_xnnpack.py --full), time ExecuTorch's XNNPACK "
        "and pteron's XNNPACK backend on that same file",
    )
    ap.add_argument(
        "--pin",
        type=int,
        metavar="CPU",
        help="run the one-thread measurements of both engines on this CPU (on a VM whose "
        "vCPUs are unequally loaded by the host, unpinned one-thread runs land on either and "
        "their ratio measures the vCPUs, not the engines)",
    )
    args = ap.parse_args()

    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    if args.pin is not None:
        all_cpus = os.sched_getaffinity(0)
        reset = _unsafe_reset_threadpool

        def _unsafe_reset_threadpool(n: int) -> None:
            # Children (pteron) inherit the affinity when they are started.
            os.sched_setaffinity(0, {args.pin} if n == 1 else all_cpus)
            reset(n)

    if args.same_file:
        same_file(args, Path(args.same_file), _unsafe_reset_threadpool)
        return

    results = {}
    for name in args.models:
        xnn = OUT / f"{name}_xnnpack.pte"
        if not xnn.exists():
            export_xnnpack(name, xnn)
        inputs = inputs_of(name)
        rows = {}
        if not args.no_portable:
            _unsafe_reset_threadpool(1)
            rows["executorch-portable/1"] = [time_et(OUT / name / "model.pte", inputs, args.portable_repeat, 1)]
        for _ in range(args.rounds):
            for n in args.threads:
                _unsafe_reset_threadpool(n)
                rows.setdefault(f"executorch-xnnpack/{n}", []).append(time_et(xnn, inputs, args.repeat, 3))
                if args.pteron:
                    rows.setdefault(f"pteron/{n}", []).append(time_pteron(args.pteron, name, n, args.repeat))
        med = {k: [statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)] for k, v in rows.items()}
        results[name] = med
        print(f"== {name} (medians over {args.rounds} rounds x {args.repeat} runs; ms)")
        print(f"   {'engine/threads':<24} {'wall':>10} {'thread CPU':>12}")
        for k, (w, c) in med.items():
            print(f"   {k:<24} {w:10.2f} {c:12.2f}")
        if args.pteron:
            for n in args.threads:
                p, x = med[f"pteron/{n}"], med[f"executorch-xnnpack/{n}"]
                line = f"   pteron / xnnpack, {n} thread(s): wall {p[0] / x[0]:.2f}x"
                if n == 1:
                    line += f", thread CPU {p[1] / x[1]:.2f}x"
                print(line)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def same_file(args, root: Path, reset_threadpool) -> None:
    """ExecuTorch's XNNPACK and pteron's XNNPACK backend on the same XNNPACK-lowered files."""
    results = {}
    for d in sorted(p for p in root.iterdir() if (p / "model.pte").exists()):
        n_in = len(list(d.glob("input*.npy")))
        inputs = [torch.from_numpy(np.load(d / f"input{i}.npy")) for i in range(n_in)]
        rows = {}
        for _ in range(args.rounds):
            for n in args.threads:
                reset_threadpool(n)
                rows.setdefault(f"executorch-xnnpack/{n}", []).append(time_et(d / "model.pte", inputs, args.repeat, 3))
                if args.pteron:
                    rows.setdefault(f"pteron-xnnpack/{n}", []).append(
                        time_pteron(args.pteron, d.name, n, args.repeat, root)
                    )
        med = {k: [statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)] for k, v in rows.items()}
        results[d.name] = med
        print(f"== {d.name} (same XNNPACK .pte; medians over {args.rounds} rounds x {args.repeat} runs; ms)")
        print(f"   {'engine/threads':<26} {'wall':>10} {'thread CPU':>12}")
        for k, (w, c) in med.items():
            print(f"   {k:<26} {w:10.2f} {c:12.2f}")
        if args.pteron:
            for n in args.threads:
                p, x = med[f"pteron-xnnpack/{n}"], med[f"executorch-xnnpack/{n}"]
                line = f"   pteron / executorch, {n} thread(s): wall {p[0] / x[0]:.2f}x"
                if n == 1:
                    line += f", thread CPU {p[1] / x[1]:.2f}x"
                print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
