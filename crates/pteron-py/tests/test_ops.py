"""The op conformance suite (testdata/ops: 2,600+ single-op programs in every dtype, goldens
from ExecuTorch's runtime) through the Python package: every dtype crosses the numpy
boundary both ways (bfloat16 as float32 arrays), channels-last tensors included."""

import json

import numpy as np
import pytest

import pteron

NP = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}
TOL = {"float32": (1e-5, 1e-5), "float64": (1e-10, 1e-10), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}


def stored(spec, data):
    """The tensor a spec describes, as a numpy array in logical (C) order."""
    raw = data[spec["offset"] : spec["offset"] + spec["nbytes"]]
    shape = spec["shape"]
    order = spec.get("dim_order", list(range(len(shape))))
    if spec["dtype"] == "bfloat16":
        a = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(raw, NP[spec["dtype"]])
    a = a.reshape([shape[d] for d in order])
    return a.transpose(np.argsort(order)).copy(order="C")  # (ascontiguousarray makes 0-d 1-d)


def op_dirs(testdata):
    return sorted(p.parent for p in (testdata / "ops").glob("*/cases.json"))


def test_every_op_case_matches_executorch(testdata):
    rt = pteron.Runtime(threads=1)
    ran = 0
    failures = []
    for d in op_dirs(testdata):
        meta = json.loads((d / "cases.json").read_text())
        data = (d / meta["data"]).read_bytes()
        for case in meta["cases"]:
            name = case["name"]
            try:
                m = rt.load_program(d / case["pte"]).load_method("forward")
                outs = m.execute([stored(s, data) for s in case["inputs"]])
            except pteron.PteronError as e:
                failures.append(f"{name}: {type(e).__name__}: {e}")
                continue
            ran += 1
            if len(outs) != len(case["outputs"]):
                failures.append(f"{name}: {len(outs)} outputs, {len(case['outputs'])} expected")
                continue
            for k, (got, spec) in enumerate(zip(outs, case["outputs"])):
                want = stored(spec, data)
                got = np.asarray(got)
                if got.shape != want.shape or got.dtype != want.dtype:
                    failures.append(f"{name} out {k}: {got.dtype}{got.shape} != {want.dtype}{want.shape}")
                    continue
                if case.get("check") == "stats":
                    continue  # random ops: dtype and shape (the Rust suite checks statistics)
                if case.get("check") == "topk" and k == 1 and want.ndim > 0:
                    # Which of tied values comes first is the sort's choice: each index must
                    # point at the expected value, and the indices along the dim be distinct.
                    dim = case.get("meta", {}).get("dim", -1)
                    x = stored(case["inputs"][0], data)
                    values = stored(case["outputs"][0], data)
                    picked = np.take_along_axis(x, got, axis=dim)
                    distinct = all(len(set(r)) == len(r) for r in np.moveaxis(got, dim, -1).reshape(-1, got.shape[dim]).tolist())
                    if not (np.array_equal(picked, values, equal_nan=True) and distinct):
                        failures.append(f"{name} out {k}: indices do not pick the values")
                    continue
                if spec["dtype"] in TOL:
                    atol, rtol = case.get("tolerance", {}).get("atol"), case.get("tolerance", {}).get("rtol")
                    da, dr = TOL[spec["dtype"]]
                    atol = da if atol is None else atol
                    rtol = dr if rtol is None else rtol
                    g, w = got.astype(np.float64), want.astype(np.float64)
                    same = (g == w) | (np.isnan(g) & np.isnan(w))
                    with np.errstate(invalid="ignore"):
                        close = np.abs(g - w) <= atol + rtol * np.abs(w)
                    if not (same | close).all():
                        failures.append(f"{name} out {k}: max abs err {np.nanmax(np.abs(g - w)):.3g}")
                elif not np.array_equal(got, want):
                    failures.append(f"{name} out {k}: values differ")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:30])
    assert ran > 2500, ran
