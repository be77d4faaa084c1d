#!/usr/bin/env python3
"""Differential testing: mutated programs in ExecuTorch's runtime and in pteron.

    /opt/etvenv/bin/python fuzz/differential.py --mutants 300 [--seed 1] [--work /tmp/diff]
    /opt/etvenv/bin/python fuzz/differential.py --dir DIR_OF_PTE_FILES

Mutants come from `cargo run --example tool -- mutants` (fuzz/examples/tool.rs): structure-aware
edits of the fixtures under testdata/models and testdata/ops, two thirds of them "mild" (an
Int/Double/Bool value, an IntList item, a tensor dtype, two tensor arguments swapped) so that
many stay valid, one third the fuzzers' field mutations.

For each mutant, a long-lived ExecuTorch worker subprocess (restarted whenever it dies: ExecuTorch
may abort or crash on malformed input) loads the program with the default verification
(`Verification.InternalConsistency`), makes deterministic inputs from the method's metadata
(floats ~ N(0,1), integers in [0, 4), bools), saves them as .npy, runs the method and saves
its outputs. Then `pteron run --threads 1 --input ... --output-dir ...` runs the same program on
the same inputs. Outcomes:

  both-reject, both-ok-same           agreement
  both-ok-differ                      outputs differ (dtype, shape or values beyond 1e-4)
  et-ok/pteron-reject                 pteron refuses what ExecuTorch runs
  pteron-ok/et-reject                 pteron runs what ExecuTorch refuses
  et-crash/…                          ExecuTorch died (signal, abort) or hung
  pteron-crash                        pteron panicked or was killed (a bug)

A JSON report (one record per mutant) and a summary go to --work; disagreements are listed with
both error messages so that each can be judged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FUZZ = REPO / "fuzz"

WORKER = r'''
import json, os, sys, traceback
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
import numpy as np
import torch
from executorch.runtime import Runtime, Verification
rt = Runtime.get()
NP = {0: np.uint8, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.int64, 5: np.float16,
      6: np.float32, 7: np.float64, 11: np.bool_}
def dtype_code(d):
    return int(d) if not hasattr(d, "value") else int(d.value)
print("ready", flush=True)
for line in sys.stdin:
    req = json.loads(line)
    out = {"status": "ok"}
    try:
        with open(req["pte"], "rb") as f:
            prog = rt.load_program(f.read())
        m = prog.load_method("forward")
        md = m.metadata
        rng = np.random.default_rng(1234)
        inputs = []
        for i in range(md.num_inputs()):
            t = md.input_tensor_meta(i)
            code = dtype_code(t.dtype())
            if code not in NP:
                raise RuntimeError(f"input dtype {code} not supported by this script")
            shape = tuple(t.sizes())
            dt = NP[code]
            if dt in (np.float16, np.float32, np.float64):
                a = rng.standard_normal(shape).astype(dt)
            elif dt == np.bool_:
                a = rng.integers(0, 2, shape).astype(np.bool_)
            else:
                a = rng.integers(0, 4, shape).astype(dt)
            np.save(os.path.join(req["dir"], f"input{i}.npy"), a)
            inputs.append(torch.from_numpy(a.copy()))
        out["inputs"] = len(inputs)
        res = list(m.execute(inputs))
        outs = []
        for k, r in enumerate(res):
            if isinstance(r, torch.Tensor):
                a = r.detach().numpy() if r.dtype != torch.bfloat16 else r.float().numpy()
                np.save(os.path.join(req["dir"], f"et_output{k}.npy"), a)
                outs.append("tensor")
            elif isinstance(r, (bool, int, float)):
                outs.append({"scalar": r})
            else:
                outs.append(repr(r))
        out["outputs"] = outs
    except BaseException as e:
        out = {"status": "reject", "error": f"{type(e).__name__}: {e}"[:500],
               "inputs": out.get("inputs")}
    print(json.dumps(out), flush=True)
'''


class Worker:
    """An ExecuTorch subprocess that runs one program per request."""

    def __init__(self, work: Path):
        self.work = work
        self.p = None
        self.log = open(work / "et_worker.log", "ab")

    def start(self):
        script = self.work / "et_worker.py"
        script.write_text(WORKER)
        self.p = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"ExecuTorch worker did not start: {line!r}")

    def run(self, pte: Path, d: Path, timeout: float):
        if self.p is None or self.p.poll() is not None:
            self.start()
        self.p.stdin.write(json.dumps({"pte": str(pte), "dir": str(d)}) + "\n")
        self.p.stdin.flush()
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.p.kill()
            self.p.wait()
            self.p = None
            return {"status": "crash", "error": f"timeout after {timeout}s"}
        line = self.p.stdout.readline()
        if not line:
            rc = self.p.wait()
            self.p = None
            return {"status": "crash", "error": f"worker died: exit status {rc}"}
        return json.loads(line)


_THREADS_FLAG = {}


def threads_flag(cli: Path):
    """`--threads 1` where the CLI has the option (kernels on the calling thread only)."""
    if cli not in _THREADS_FLAG:
        h = subprocess.run([str(cli), "run", "--help"], capture_output=True, text=True).stdout
        _THREADS_FLAG[cli] = ["--threads", "1"] if "--threads" in h else []
    return _THREADS_FLAG[cli]


def run_pteron(cli: Path, pte: Path, d: Path, n_inputs, timeout: float):
    out = d / "pteron"
    out.mkdir(exist_ok=True)
    cmd = [str(cli), "run", str(pte), *threads_flag(cli), "--output-dir", str(out)]
    if n_inputs:
        for i in range(n_inputs):
            cmd += ["--input", str(d / f"input{i}.npy")]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "crash", "error": f"timeout after {timeout}s"}
    err = (r.stderr.strip().splitlines() or [""])[-1][:500]
    if r.returncode == 0:
        return {"status": "ok"}
    if r.returncode == 101 or r.returncode < 0 or "panicked" in r.stderr:
        return {"status": "crash", "error": f"exit {r.returncode}: {r.stderr[-800:]}"}
    return {"status": "reject", "error": err}


def compare(d: Path, et_outputs):
    import numpy as np

    for k, kind in enumerate(et_outputs):
        p = d / "pteron" / f"output{k}.npy"
        if isinstance(kind, dict):
            # pteron writes Int / Double / Bool outputs as 0-d arrays.
            if not p.exists():
                return f"output {k}: pteron wrote none for the scalar {kind['scalar']!r}"
            b = np.load(p)
            if b.shape != () or not np.isclose(float(b), float(kind["scalar"]), equal_nan=True):
                return f"output {k}: scalar {kind['scalar']!r} vs pteron {b!r}"
            continue
        if kind != "tensor":
            return f"output {k}: ExecuTorch returned {kind}"
        if not p.exists():
            return f"output {k}: pteron wrote none"
        a = np.load(d / f"et_output{k}.npy")
        b = np.load(p)
        if b.dtype.kind == "V":  # bf16 saved as raw 2-byte void by pteron
            b = (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if a.shape != b.shape:
            return f"output {k}: shape {a.shape} vs pteron {b.shape}"
        if a.dtype != b.dtype and not (a.dtype == np.float32 and b.dtype.kind == "f"):
            return f"output {k}: dtype {a.dtype} vs pteron {b.dtype}"
        if a.dtype == np.bool_ or a.dtype.kind in "iu":
            if not np.array_equal(a, b):
                return f"output {k}: {int((a != b).sum())} of {a.size} elements differ"
        else:
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            tol = 1e-2 if a.dtype == np.float16 else 1e-4
            same = np.isclose(a64, b64, rtol=tol, atol=tol, equal_nan=True)
            if not same.all():
                i = np.argmax(~same.reshape(-1))
                return (f"output {k}: {int((~same).sum())} of {a.size} elements differ, "
                        f"e.g. [{i}] {a64.reshape(-1)[i]} vs pteron {b64.reshape(-1)[i]}")
    n_pteron = len(list((d / "pteron").glob("output*.npy")))
    n_et = len(et_outputs)
    if n_pteron != n_et:
        return f"{n_et} outputs vs pteron {n_pteron}"
    return None


def classify(et, pt):
    if et["status"] == "crash":
        return "et-crash/pteron-" + pt["status"]
    if pt["status"] == "crash":
        return "pteron-crash"
    if et["status"] == "reject" and pt["status"] == "reject":
        return "both-reject"
    if et["status"] == "ok" and pt["status"] == "reject":
        return "et-ok/pteron-reject"
    if et["status"] == "reject" and pt["status"] == "ok":
        return "pteron-ok/et-reject"
    return "both-ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mutants", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", type=Path, help="run these .pte files instead of generating mutants")
    ap.add_argument("--work", type=Path, default=Path("/tmp/pteron-differential"))
    ap.add_argument("--pteron", type=Path, help="pteron CLI binary (default: build it)")
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()

    work = args.work
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = dict(os.environ)
    if args.pteron:
        cli = args.pteron
    else:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "pteron-cli"], cwd=REPO, check=True)
        target = Path(env.get("CARGO_TARGET_DIR", REPO / "target"))
        cli = target / "release" / "pteron"
    if args.dir:
        files = sorted(args.dir.glob("*.pte"))
    else:
        mdir = work / "mutants"
        subprocess.run(
            ["cargo", "run", "--release", "-q", "--example", "tool", "--",
             "mutants", str(mdir), str(args.mutants), str(args.seed)],
            cwd=FUZZ, check=True,
        )
        files = sorted(mdir.glob("*"))

    worker = Worker(work)
    records = []
    t0 = time.time()
    for n, pte in enumerate(files):
        d = work / "runs" / pte.stem
        d.mkdir(parents=True)
        et = worker.run(pte, d, args.timeout)
        pt = run_pteron(cli, pte, d, et.get("inputs"), args.timeout)
        verdict = classify(et, pt)
        detail = None
        if verdict == "both-ok":
            detail = compare(d, et.get("outputs", []))
            verdict = "both-ok-differ" if detail else "both-ok-same"
        rec = {"file": str(pte), "verdict": verdict, "et": et, "pteron": pt, "detail": detail}
        records.append(rec)
        if verdict not in ("both-reject", "both-ok-same"):
            print(f"[{n}] {verdict}: {pte.name}\n    et: {et.get('error', '')}\n"
                  f"    pteron: {pt.get('error', '')}\n    {detail or ''}", flush=True)
    counts = Counter(r["verdict"] for r in records)
    summary = {"mutants": len(records), "seconds": round(time.time() - t0), "verdicts": dict(counts)}
    (work / "report.json").write_text(json.dumps({"summary": summary, "records": records}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
