"""pteron's Python package vs ExecuTorch's Python runtime (executorch.runtime) on the same
files, interleaved round by round: load (load_program + load_method) plus the first run, and
steady-state execute. Run in a venv with both installed (the exporter's venv plus the pteron
wheel: `pip install target/wheels/pteron-*.whl`).

    python bench/python_api.py [--rounds 15] [--runs 30] [--threads 1 2]
"""

import argparse
import gc
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FILES = {
    "mobilenet_v2 portable": ROOT / "testdata/models/mobilenet_v2_small",
    "mobilenet_v2 xnnpack": ROOT / "testdata/xnnpack/mobilenet_v2_small",
}


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def median_execute(m, inp, runs, warmup=3):
    """Median seconds of `runs` calls of `m.execute([inp])`, after `warmup` untimed ones."""
    for _ in range(warmup):
        m.execute([inp])
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        m.execute([inp])
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()

    import torch
    from executorch.extension.pybindings import portable_lib
    from executorch.runtime import Runtime as EtRuntime

    import pteron

    flags = [f for f in open("/proc/cpuinfo").read().split() if f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512bw")]
    print(f"# {cpu_model()}; {sorted(set(flags))}; torch {torch.__version__}, pteron {pteron.__version__}")
    results = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        portable_lib._unsafe_reset_threadpool(threads)
        pt_rt = pteron.Runtime(threads=threads)
        et_rt = EtRuntime.get()
        for name, d in FILES.items():
            x = np.load(d / "input0.npy")
            xt = torch.from_numpy(x)
            engines = {
                "pteron": (pt_rt, x),
                "executorch": (et_rt, xt),
            }
            times = {e: {"load+first": [], "execute": []} for e in engines}
            outs = {}
            for _ in range(args.rounds):
                for e, (rt, inp) in engines.items():
                    gc.collect()
                    t0 = time.perf_counter()
                    m = rt.load_program(d / "model.pte").load_method("forward")
                    out = m.execute([inp])
                    times[e]["load+first"].append(time.perf_counter() - t0)
                    outs[e] = np.asarray(out[0])
                    times[e]["execute"].append(median_execute(m, inp, args.runs))
                    del m
            diff = float(np.abs(outs["pteron"] - outs["executorch"]).max())
            print(f"\n{name}, {threads} thread(s); max |pteron - executorch| = {diff:.3g}")
            for what in ["load+first", "execute"]:
                row = {}
                for e in engines:
                    xs = [v * 1e3 for v in times[e][what]]
                    row[e] = (statistics.median(xs), pct(xs, 0.1), pct(xs, 0.9))
                ratio = row["pteron"][0] / row["executorch"][0]
                print(
                    f"  {what:11s} pteron {row['pteron'][0]:7.3f} ms [p10 {row['pteron'][1]:.3f}, p90 {row['pteron'][2]:.3f}]"
                    f"  executorch {row['executorch'][0]:7.3f} ms [p10 {row['executorch'][1]:.3f}, p90 {row['executorch'][2]:.3f}]"
                    f"  ratio {ratio:.2f}"
                )
                results[f"{name}/{threads}/{what}"] = {"pteron": row["pteron"], "executorch": row["executorch"], "ratio": ratio}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
