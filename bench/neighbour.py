"""Threads under a busy neighbour: pteron (Python package) and ExecuTorch (executorch.runtime)
on the same XNNPACK files in one process, interleaved, at 1 and 2 threads, with the machine
otherwise idle and with a CPU-bound process pinned to one core. Each round runs both engines at
both thread counts, in alternating order. Reports per engine the median and p90 over rounds of
each round's median execute time.

    python bench/neighbour.py [--rounds 30] [--iters 20] [--core 1]

Needs the exporter venv with the pteron wheel installed, and the files below exported
(bench/bench.py exports MobileNetV2; tools/export/int8_repro.py the int8 one).
"""

import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np

from python_api import cpu_model, median_execute, pct  # bench/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "mobilenet_v2 fp32 xnnpack": ROOT / "tools/export/out/mobilenet_v2/model_xnnpack.pte",
    "mobilenet_v2 int8 xnnpack": ROOT / "tools/export/out/int8_static/mobilenet_v2/model.pte",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--core", type=int, default=1, help="the core the neighbour is pinned to")
    args = ap.parse_args()

    import torch
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime as EtRuntime

    import pteron

    print(f"# {cpu_model()}; {os.cpu_count()} logical CPUs; rounds {args.rounds} x {args.iters} calls")
    for name, pte in FILES.items():
        x = np.load(pte.parent / "input0.npy")
        xt = torch.from_numpy(x)
        res = {}
        for neighbour in (False, True):
            hog = None
            if neighbour:
                hog = subprocess.Popen(["taskset", "-c", str(args.core), "sh", "-c", "while :; do :; done"])
                time.sleep(0.5)
            try:
                # Both thread counts and both engines alternate within each round, so that a
                # change of the host's speed over the run (a VM's neighbours) hits all four alike.
                pms = {t: pteron.Runtime(threads=t).load_program(pte).load_method("forward") for t in (1, 2)}
                data = pte.read_bytes()  # ExecuTorch reads this buffer in place: keep it alive
                em, et_threads = None, None
                per = {(t, e): [] for t in (1, 2) for e in ("pteron", "executorch")}
                for r in range(args.rounds):
                    runs = [(t, e) for t in (1, 2) for e in ("pteron", "executorch")]
                    if r % 2:
                        runs.reverse()
                    for threads, e in runs:
                        if e == "pteron":
                            m, inp = pms[threads], x
                        else:
                            if et_threads != threads:
                                # An XNNPACK runtime keeps the pthreadpool it was created with,
                                # and a reset destroys that pool: drop the method, reset, reload.
                                em = None
                                portable_lib._unsafe_reset_threadpool(threads)
                                em = EtRuntime.get().load_program(data).load_method("forward")
                                et_threads = threads
                            m, inp = em, xt
                        per[(threads, e)].append(median_execute(m, inp, args.iters) * 1e3)
                        time.sleep(0.01)  # let the other engine's workers go idle
                for (threads, e), xs in per.items():
                    res[(neighbour, threads, e)] = (statistics.median(xs), pct(xs, 0.9))
            finally:
                if hog:
                    hog.kill()
                    hog.wait()
        print(f"\n{name}")
        print("  engine      neighbour  1 thread: median  p90    2 threads: median  p90   p90/median  2t/1t")
        for e in ("pteron", "executorch"):
            for nb in (False, True):
                m1, p1 = res[(nb, 1, e)]
                m2, p2 = res[(nb, 2, e)]
                print(
                    f"  {e:11s} {'busy' if nb else 'idle':9s}  {m1:8.3f} ms {p1:7.3f}      {m2:8.3f} ms {p2:7.3f}"
                    f"    {p2 / m2:5.2f}      {m2 / m1:5.2f}"
                )


if __name__ == "__main__":
    main()
