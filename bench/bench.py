#!/usr/bin/env python3
"""Side-by-side latency benchmark: pteron vs ExecuTorch (portable and XNNPACK) vs ONNX Runtime
vs PyTorch eager, on the same models and inputs, on this machine, in one run.

Usage (from the repository root, with the export venv, see docs/benchmarks.md):

    /opt/etvenv/bin/python bench/bench.py                        # default models, 1 and 2 threads
    /opt/etvenv/bin/python bench/bench.py --models mobilenet_v2 --threads 1 --rounds 3
    /opt/etvenv/bin/python bench/bench.py --json bench/out/results.json

What it does:

1. Exports what is missing into tools/export/out/<model>/: the portable `.pte` with its inputs
   (tools/export/export_fixtures.py --only <model>), an XNNPACK-lowered `.pte`
   (`to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])`) and an ONNX file.
2. For each round, for each (model, threads), runs every engine once, in a fresh process each,
   in an order that rotates between rounds (interleaved, so drift hits every engine alike).
   A process loads the model (timed: "load"), runs `--warmup` untimed iterations, then
   `--iters` timed ones and reports their median. The parent reads the child's peak RSS from
   wait4(2).
3. Reports, per (model, threads, engine): the median over rounds of the per-process medians,
   min, load time, peak RSS, and the ratio engine/pteron (> 1: pteron is faster), as a table
   and optionally as JSON.

Engines: pteron (the `pteron run` CLI on the portable .pte; release build), pteron-xnnpack
(the CLI on the XNNPACK .pte, through pteron's own XNNPACK backend), et-portable, et-xnnpack
(ExecuTorch's Python runtime, `executorch.runtime`, threads set with
`_unsafe_reset_threadpool`), et-cpp (ExecuTorch's C++ runtime on the XNNPACK .pte:
bench/et_runner.cpp built with g++ against the wheel's own headers and libraries; the fair
peak-RSS and load-time reference, since the Python engines carry the interpreter), ort
(ONNX Runtime, intra-op threads), torch (PyTorch eager, `torch.set_num_threads`).
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
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXPORT = REPO / "tools" / "export"
OUT = EXPORT / "out"

DEFAULT_MODELS = ["mobilenet_v2", "all_minilm_l6_v2"]
ENGINES = ["pteron", "pteron-xnnpack", "et-portable", "et-xnnpack", "et-cpp", "ort", "torch", "base", "base-xnnpack"]


# --------------------------------------------------------------------------
# exports
# --------------------------------------------------------------------------


def build_fixture(name: str):
    sys.path.insert(0, str(EXPORT))
    import models  # tools/export/models.py

    builders = {**models.COMMITTED, **models.FULL}
    if name not in builders:
        raise SystemExit(f"unknown model {name!r}; known: {', '.join(sorted(builders))}")
    return builders[name]()


def model_dir(name: str) -> Path:
    return OUT / name


def input_files(name: str) -> List[Path]:
    d = model_dir(name)
    files = sorted(d.glob("input*.npy"), key=lambda p: int(re.sub(r"\D", "", p.stem) or 0))
    return files


def ensure_exports(name: str, want_xnnpack: bool, want_onnx: bool) -> None:
    """Runs the exports in a child process, so that this driver never imports torch (its peak
    RSS would otherwise leak into the children's ru_maxrss)."""
    cmd = [sys.executable, __file__, "--export", name, str(int(want_xnnpack)), str(int(want_onnx))]
    subprocess.run(cmd, check=True)


def export_missing(name: str, want_xnnpack: bool, want_onnx: bool) -> None:
    d = model_dir(name)
    if not (d / "model.pte").exists() or not input_files(name):
        print(f"[export] {name}: portable .pte", flush=True)
        subprocess.run(
            [sys.executable, str(EXPORT / "export_fixtures.py"), "--only", name, "--full-out", str(OUT)],
            check=True,
        )
    need_x = want_xnnpack and not (d / "model_xnnpack.pte").exists()
    need_o = want_onnx and not (d / "model.onnx").exists()
    if not (need_x or need_o):
        return
    import torch

    fx = build_fixture(name)
    module = fx.module.eval()
    if need_x:
        print(f"[export] {name}: XNNPACK .pte", flush=True)
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

        ep = torch.export.export(module, fx.inputs, strict=False)
        et = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
        (d / "model_xnnpack.pte").write_bytes(et.buffer)
    if need_o:
        print(f"[export] {name}: ONNX", flush=True)
        with torch.no_grad():
            torch.onnx.export(
                module,
                fx.inputs,
                str(d / "model.onnx"),
                input_names=fx.input_names or None,
                output_names=fx.output_names or None,
                opset_version=18,
                dynamo=False,
            )


# --------------------------------------------------------------------------
# workers (one process per measurement)
# --------------------------------------------------------------------------


def load_inputs(name: str):
    import numpy as np

    return [np.load(p) for p in input_files(name)]


def timed_loop(run, warmup: int, iters: int) -> List[float]:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def worker(engine: str, name: str, threads: int, warmup: int, iters: int) -> Dict[str, Any]:
    d = model_dir(name)
    arrays = load_inputs(name)
    base = None  # resident bytes before the model is loaded (the interpreter, torch, ...)
    if engine in ("et-portable", "et-xnnpack"):
        import torch
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
        from executorch.runtime import Runtime

        _unsafe_reset_threadpool(threads)
        base = proc_status("VmRSS")
        pte = d / ("model.pte" if engine == "et-portable" else "model_xnnpack.pte")
        inputs = [torch.from_numpy(a) for a in arrays]
        t0 = time.perf_counter()
        data = pte.read_bytes()  # the runtime reads this buffer in place: keep it alive
        program = Runtime.get().load_program(data)
        method = program.load_method("forward")
        load = (time.perf_counter() - t0) * 1e3
        times = timed_loop(lambda: method.execute(inputs), warmup, iters)
    elif engine == "ort":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        base = proc_status("VmRSS")
        t0 = time.perf_counter()
        sess = ort.InferenceSession(str(d / "model.onnx"), so, providers=["CPUExecutionProvider"])
        load = (time.perf_counter() - t0) * 1e3
        feed = {i.name: a for i, a in zip(sess.get_inputs(), arrays)}
        times = timed_loop(lambda: sess.run(None, feed), warmup, iters)
    elif engine == "torch":
        import torch

        torch.set_num_threads(threads)
        base = proc_status("VmRSS")
        t0 = time.perf_counter()
        module = build_fixture(name).module.eval()
        load = (time.perf_counter() - t0) * 1e3
        inputs = [torch.from_numpy(a) for a in arrays]

        def run():
            with torch.inference_mode():
                module(*inputs)

        times = timed_loop(run, warmup, iters)
    else:
        raise SystemExit(f"worker: unknown engine {engine}")
    return {
        "load_ms": load,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "peak_rss_bytes": vm_hwm(),
        "base_rss_bytes": base,
    }


def proc_status(field: str) -> Optional[int]:
    """A byte count from /proc/self/status (Linux): VmHWM is the peak resident set (reset by
    exec, unlike ru_maxrss), VmRSS the current one."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def vm_hwm() -> Optional[int]:
    return proc_status("VmHWM")


def pteron_cmd(binary: Path, name: str, pte: str, threads: int, warmup: int, iters: int, has_threads: bool):
    cmd = [str(binary), "run", str(model_dir(name) / pte), "--repeat", str(warmup + iters)]
    for f in input_files(name):
        cmd += ["-i", str(f)]
    if has_threads:
        cmd += ["--threads", str(threads)]
    return cmd


def parse_pteron(out: str) -> Dict[str, Any]:
    m = re.search(r"load ([\d.]+) ms, execute ([\d.]+) ms", out)
    if not m:
        raise RuntimeError(f"cannot parse pteron output: {out[-500:]}")
    rep: Dict[str, Any] = {"load_ms": float(m.group(1)), "median_ms": float(m.group(2)), "min_ms": None}
    peak = re.search(r"peak (?:memory|RSS)[^\d]*([\d.]+) ?(bytes|KiB|MiB|MB|kB)", out)
    if peak:
        scale = {"bytes": 1, "KiB": 1024, "kB": 1024, "MiB": 2**20, "MB": 2**20}[peak.group(2)]
        rep["peak_rss_bytes"] = int(float(peak.group(1)) * scale)
    return rep


def build_et_runner() -> Path:
    """bench/et_runner.cpp compiled against the executorch wheel's own headers and libraries
    (ExecuTorch's C++ runtime with its XNNPACK backend, no Python in the process)."""
    import executorch

    et = Path(list(executorch.__path__)[0]).resolve()  # a namespace package: no __file__
    out = OUT / "et_runner"
    src = HERE / "et_runner.cpp"
    if out.exists() and out.stat().st_mtime > src.stat().st_mtime:
        return out
    print("[build] bench/et_runner.cpp (g++)", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    cmd = ["g++", "-O2", "-std=c++17", "-DC10_USING_CUSTOM_GENERATED_MACROS", "-DET_EVENT_TRACER_ENABLED"]
    cmd += [f"-I{et / 'include'}", f"-I{et / 'include/executorch/runtime/core/portable_type/c10'}"]
    cmd += [str(src), f"-L{et / 'lib'}", "-lexecutorch", "-Wl,--no-as-needed", "-lexecutorch_backend_xnnpack"]
    cmd += ["-lexecutorch_kernels_optimized", "-lexecutorch_threadpool", f"-Wl,-rpath,{et / 'lib'}", "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def measure(args, engine: str, name: str, threads: int, binary: Path, has_threads: bool) -> Dict[str, Any]:
    """Runs one engine in a fresh process; returns its report plus peak RSS (bytes)."""
    if engine.startswith("pteron") or engine.startswith("base"):
        pte = "model.pte" if engine in ("pteron", "base") else "model_xnnpack.pte"
        exe = Path(args.baseline) if engine.startswith("base") else binary
        cmd = pteron_cmd(exe, name, pte, threads, args.warmup, args.iters, has_threads)
    elif engine == "et-cpp":
        cmd = [str(args.et_runner), str(model_dir(name) / "model_xnnpack.pte"), str(args.warmup + args.iters), str(threads)]
        cmd += [str(f) for f in input_files(name)]
    else:
        cmd = [sys.executable, __file__, "--worker", engine, name, str(threads), str(args.warmup), str(args.iters)]
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
        env[var] = str(threads)
    if threads == 1 and args.pin is not None:
        cmd = ["taskset", "-c", str(args.pin)] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        return {"error": out.strip().splitlines()[-1][:300] if out.strip() else f"exit {p.returncode}"}
    if engine.startswith("pteron") or engine.startswith("base") or engine == "et-cpp":
        rep = parse_pteron(out)
    else:
        rep = json.loads(out.strip().splitlines()[-1])
    if not rep.get("peak_rss_bytes"):
        # ru_maxrss survives exec (it starts at the parent's peak): right only because this
        # parent stays small (exports run in a subprocess).
        rep["peak_rss_bytes"] = usage.ru_maxrss * 1024  # Linux reports KiB
    return rep


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------


def build_pteron(binary: Optional[str]) -> Path:
    if binary:
        return Path(binary)
    print("[build] cargo build --release -p pteron-cli", flush=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "pteron-cli"], cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / "pteron"


def summarize(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    rows: Dict[tuple, Dict[str, Any]] = {}
    for r in results:
        key = (r["model"], r["threads"], r["engine"])
        row = rows.setdefault(key, {"model": r["model"], "threads": r["threads"], "engine": r["engine"], "runs": []})
        row["runs"].append(r)
    out = []
    for (model, threads, engine), row in rows.items():
        ok = [r for r in row["runs"] if "error" not in r]
        s: Dict[str, Any] = {"model": model, "threads": threads, "engine": engine, "rounds": len(ok)}
        if ok:
            s["median_ms"] = statistics.median(r["median_ms"] for r in ok)
            s["best_ms"] = min(r["median_ms"] for r in ok)
            s["load_ms"] = statistics.median(r["load_ms"] for r in ok)
            s["peak_rss_mb"] = max(r["peak_rss_bytes"] for r in ok) / 2**20
            bases = [r["base_rss_bytes"] for r in ok if r.get("base_rss_bytes")]
            s["model_rss_mb"] = s["peak_rss_mb"] - (min(bases) / 2**20 if bases else 0.0)
        else:
            s["error"] = row["runs"][0].get("error", "no runs")
        out.append(s)
    for s in out:
        base = next(
            (b for b in out if b["model"] == s["model"] and b["threads"] == s["threads"] and b["engine"] == "pteron"),
            None,
        )
        if base and "median_ms" in base and "median_ms" in s:
            s["ratio_to_pteron"] = s["median_ms"] / base["median_ms"]
    return out


def print_table(summary: List[Dict[str, Any]]) -> None:
    print()
    print(
        f"{'model':18} {'thr':>3} {'engine':15} {'median ms':>10} {'best ms':>9} {'load ms':>9} "
        f"{'peak RSS MB':>11} {'model MB':>9} {'x pteron':>9}"
    )
    for s in summary:
        if "error" in s:
            print(f"{s['model']:18} {s['threads']:>3} {s['engine']:15} error: {s['error'][:70]}")
            continue
        ratio = f"{s['ratio_to_pteron']:.2f}" if "ratio_to_pteron" in s else "-"
        print(
            f"{s['model']:18} {s['threads']:>3} {s['engine']:15} {s['median_ms']:10.2f} {s['best_ms']:9.2f} "
            f"{s['load_ms']:9.1f} {s['peak_rss_mb']:11.1f} {s['model_rss_mb']:9.1f} {ratio:>9}"
        )
    print("(x pteron = engine median / pteron median: above 1 means pteron is faster;")
    print(" model MB = peak RSS minus the process's resident size before loading the model,")
    print(" i.e. without the Python interpreter and torch for the Python-hosted engines)")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--export":
        export_missing(sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1")
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        engine, name, threads, warmup, iters = sys.argv[2:7]
        print(json.dumps(worker(engine, name, int(threads), int(warmup), int(iters))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--engines", nargs="+", default=[e for e in ENGINES if e != "pteron-xnnpack"], choices=ENGINES)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--pteron", help="path to a built `pteron` binary (default: cargo build --release)")
    ap.add_argument(
        "--baseline",
        help="another `pteron` binary (an older commit) run as the engines base / base-xnnpack, "
        "interleaved with the others: a refactor's before-and-after",
    )
    ap.add_argument("--json", help="write the summary and every run here")
    ap.add_argument(
        "--pin",
        type=int,
        metavar="CPU",
        help="run every engine's one-thread process on this CPU (taskset): on a VM whose vCPUs "
        "the host loads unequally, unpinned one-thread runs measure which vCPU they got",
    )
    args = ap.parse_args()

    for name in args.models:
        ensure_exports(
            name,
            want_xnnpack=any(e in args.engines for e in ("et-xnnpack", "pteron-xnnpack", "et-cpp", "base-xnnpack")),
            want_onnx="ort" in args.engines,
        )
    args.et_runner = build_et_runner() if "et-cpp" in args.engines else None
    binary = build_pteron(args.pteron) if any(e.startswith("pteron") for e in args.engines) else Path("pteron")
    has_threads = False
    if any(e.startswith("pteron") for e in args.engines):
        help_text = subprocess.run([str(binary), "run", "--help"], capture_output=True, text=True).stdout
        has_threads = "--threads" in help_text
        if not has_threads:
            print("[note] this pteron has no --threads flag: it runs single-threaded", flush=True)

    results: List[Dict[str, Any]] = []
    engines = list(args.engines)
    for rnd in range(args.rounds):
        order = engines[rnd % len(engines):] + engines[: rnd % len(engines)]
        for name in args.models:
            for threads in args.threads:
                for engine in order:
                    rep = measure(args, engine, name, threads, binary, has_threads)
                    rep.update({"model": name, "threads": threads, "engine": engine, "round": rnd})
                    results.append(rep)
                    shown = f"{rep['median_ms']:.2f} ms" if "median_ms" in rep else f"error: {rep['error'][:80]}"
                    print(f"[round {rnd + 1}/{args.rounds}] {name} t={threads} {engine:15} {shown}", flush=True)

    summary = summarize(results)
    print_table(summary)
    if args.json:
        info = {
            "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
            "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "json"},
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({**info, "summary": summary, "runs": results}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
