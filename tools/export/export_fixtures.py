#!/usr/bin/env python3
"""Export pteron test fixtures: portable-only ExecuTorch `.pte` programs plus
inputs and golden outputs produced by ExecuTorch's own runtime.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_fixtures.py            # committed fixtures -> testdata/models
    /opt/etvenv/bin/python tools/export/export_fixtures.py --only mlp cnn
    /opt/etvenv/bin/python tools/export/export_fixtures.py --full     # also full-size models -> tools/export/out
    /opt/etvenv/bin/python tools/export/export_fixtures.py --ops-only # just regenerate OPS.txt / OPS_SCHEMAS.txt

Layout of one fixture directory:

    model.pte
    model.ptd                          only for external-weights fixtures: FlatTensor file with the constants
    input0.npy, input1.npy, ...        plan inputs, in order, exact dtypes
    expected0.npy, expected1.npy, ...  ExecuTorch runtime outputs
    <case>/input*.npy, <case>/expected*.npy   extra cases (dynamic shapes: case1, state: call2)
    meta.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402

MAX_COMMITTED_PTE = 2 * 1024 * 1024
FULL_OPS_FILE = HERE / "full_models_ops.json"


# --------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------


def export_program(fx: models.Fixture, external_constants: bool | None = None):
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge

    if external_constants is None:
        external_constants = fx.external_constants

    ep = torch.export.export(fx.module, fx.inputs, dynamic_shapes=fx.dynamic_shapes, strict=False)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=True))
    passes = []
    if fx.init_mutable_buffers:
        from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

        passes.append(InitializedMutableBufferPass(fx.init_mutable_buffers))
    et = edge.to_executorch(ExecutorchBackendConfig(passes=passes, external_constants=external_constants))
    return et


def op_name(op) -> str:
    return f"{op.name}.{op.overload}" if op.overload else op.name


def program_ops(et) -> List[str]:
    prog = et.executorch_program
    ops = set()
    for plan in prog.execution_plan:
        if plan.delegates:
            raise RuntimeError(f"program unexpectedly contains delegates: {plan.delegates}")
        for op in plan.operators:
            ops.add(op_name(op))
    return sorted(ops)


# --------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------


def to_numpy(v: Any) -> np.ndarray:
    if isinstance(v, torch.Tensor):
        return np.ascontiguousarray(v.detach().cpu().numpy())
    return np.asarray(v)


def describe(v: Any) -> Dict[str, Any]:
    if isinstance(v, torch.Tensor):
        return {"kind": "tensor", "dtype": str(to_numpy(v).dtype), "shape": list(v.shape)}
    a = np.asarray(v)
    return {"kind": "scalar", "python_type": type(v).__name__, "dtype": str(a.dtype), "shape": []}


def flatten_outputs(o: Any) -> List[Any]:
    if isinstance(o, (tuple, list)):
        out: List[Any] = []
        for e in o:
            out.extend(flatten_outputs(e))
        return out
    return [o]


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    if a.dtype == np.bool_:
        return float(np.sum(a != b))
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def save_case(d: Path, inputs: Sequence[torch.Tensor], outputs: Sequence[Any]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for p in list(d.glob("input*.npy")) + list(d.glob("expected*.npy")):
        p.unlink()
    for i, t in enumerate(inputs):
        np.save(d / f"input{i}.npy", to_numpy(t), allow_pickle=False)
    for i, o in enumerate(outputs):
        np.save(d / f"expected{i}.npy", to_numpy(o), allow_pickle=False)


def run_fixture(fx: models.Fixture, outdir: Path) -> Dict[str, Any]:
    from executorch.runtime import Runtime

    print(f"== {fx.name}")
    # Keep a pristine copy for eager reference (buffers may be mutated).
    eager_mod = copy.deepcopy(fx.module)

    t0 = time.perf_counter()
    et = export_program(fx)
    t_export = time.perf_counter() - t0
    ops = program_ops(et)
    fdir = outdir / fx.name
    fdir.mkdir(parents=True, exist_ok=True)
    pte = fdir / "model.pte"
    with open(pte, "wb") as f:
        et.write_to_file(f) if hasattr(et, "write_to_file") else f.write(et.buffer)
    size = pte.stat().st_size
    print(f"   exported in {t_export:.1f}s, {size} bytes, {len(ops)} ops: {', '.join(ops)}")
    if fx.committed and size > MAX_COMMITTED_PTE:
        raise RuntimeError(f"{fx.name}: .pte is {size} bytes > {MAX_COMMITTED_PTE}")

    external_info = None
    ptd = None
    if fx.external_constants:
        ptd = fdir / "model.ptd"
        external_info = write_external_data(fx, et, pte, ptd)

    rt = Runtime.get()
    if ptd is not None:
        prog = rt.load_program(pte, data_path=ptd)
    else:
        prog = rt.load_program(pte)
    method = prog.load_method("forward")

    # Case list: (subdir, inputs).
    cases = [("", fx.inputs)] + list(fx.extra_cases.items())
    case_meta = []
    diffs: Dict[str, float] = {}
    ok = True
    run_times = []
    base_outputs = None
    for ci, (sub, inputs) in enumerate(cases):
        calls = fx.num_calls if ci == 0 else 1
        for call in range(calls):
            t1 = time.perf_counter()
            et_out = list(method.execute(list(inputs)))
            run_times.append(time.perf_counter() - t1)
            with torch.no_grad():
                eager_out = flatten_outputs(eager_mod(*[t.clone() for t in inputs]))
            if len(eager_out) != len(et_out):
                raise RuntimeError(f"{fx.name}: eager gives {len(eager_out)} outputs, ExecuTorch {len(et_out)}")
            csub = sub if call == 0 else f"call{call + 1}"
            label = csub or "base"
            for i, (a, b) in enumerate(zip(et_out, eager_out)):
                na, nb = to_numpy(a), to_numpy(b)
                if na.dtype != nb.dtype:
                    print(f"   WARNING {label} out{i}: dtype ExecuTorch {na.dtype} vs eager {nb.dtype}")
                d = max_abs_diff(na, nb)
                diffs[f"{label}/out{i}"] = d
                close = (
                    na.shape == nb.shape
                    and np.allclose(na.astype(np.float64), nb.astype(np.float64), atol=fx.atol, rtol=fx.rtol)
                )
                ok &= close
                print(
                    f"   {label} out{i} {na.dtype}{list(na.shape)}: max|ET-eager| = {d:.3e}"
                    + ("" if close else f"  ** exceeds atol={fx.atol} rtol={fx.rtol} **")
                )
            save_case(fdir / csub if csub else fdir, inputs, et_out)
            if ci == 0 and call == 0:
                base_outputs = et_out
            case_meta.append(
                {
                    "dir": csub,
                    "note": ("call %d on the same loaded method" % (call + 1)) if calls > 1 else "",
                    "inputs": [describe(t) for t in inputs],
                    "outputs": [describe(o) for o in et_out],
                }
            )
    print(f"   ExecuTorch execute time: " + ", ".join(f"{t * 1000:.1f} ms" for t in run_times))

    meta: Dict[str, Any] = {
        "name": fx.name,
        "description": fx.description,
        "inputs": [
            dict(describe(t), **({"name": fx.input_names[i]} if fx.input_names else {}))
            for i, t in enumerate(fx.inputs)
        ],
        "outputs": [
            dict(describe(o), **({"name": fx.output_names[i]} if fx.output_names and i < len(fx.output_names) else {}))
            for i, o in enumerate(base_outputs)
        ],
        "operators": ops,
        "tolerance": {"atol": fx.atol, "rtol": fx.rtol},
        "cases": case_meta,
        "num_calls": fx.num_calls,
        "pte_bytes": size,
        "versions": {
            "torch": torch.__version__,
            "executorch": _et_version(),
        },
    }
    if fx.dynamic_info:
        meta["dynamic"] = fx.dynamic_info
    if external_info is not None:
        meta["external_data"] = ptd.name
        meta["external_data_info"] = external_info
    if any(o["kind"] != "tensor" for o in meta["outputs"]):
        meta["non_tensor_outputs"] = True
    with open(fdir / "meta.json", "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    return {"name": fx.name, "ops": ops, "size": size, "diffs": diffs, "ok": ok, "run_times": run_times}


# --------------------------------------------------------------------------
# external constants (.ptd)
# --------------------------------------------------------------------------


def _plan_constant_tensors(program) -> List[Dict[str, Any]]:
    """Constant tensors of every plan of a (deserialized) Program: tensors without
    allocation_info that either point at a constant buffer or are EXTERNAL."""
    from executorch.exir.schema import Tensor, TensorDataLocation

    out = []
    for plan in program.execution_plan:
        for vi, v in enumerate(plan.values):
            t = v.val
            if not isinstance(t, Tensor) or t.allocation_info is not None:
                continue
            info = t.extra_tensor_info
            external = info is not None and info.location == TensorDataLocation.EXTERNAL
            if not external and t.data_buffer_idx == 0:
                continue  # not a constant (e.g. an unplanned input/output placeholder)
            out.append(
                {
                    "plan": plan.name,
                    "value_index": vi,
                    "sizes": list(t.sizes),
                    "scalar_type": t.scalar_type.name,
                    "data_buffer_idx": t.data_buffer_idx,
                    "external": external,
                    "key": info.fully_qualified_name if info is not None else None,
                }
            )
    return out


def write_external_data(fx: models.Fixture, et, pte: Path, ptd: Path) -> Dict[str, Any]:
    """Write the exporter's `.ptd` next to the `.pte` as `ptd`, check that the .pte holds no
    weight bytes and that every constant is EXTERNAL with a key present in the .ptd, and
    return the facts recorded in meta.json["external_data_info"]."""
    import tempfile

    from executorch.exir._serialize._program import deserialize_pte_binary
    from executorch.extension.flat_tensor.serialize.serialize import (
        FlatTensorConfig,
        _deserialize_to_flat_tensor,
        _get_extended_header,
    )
    from executorch.runtime import Runtime

    # 1. The exporter names the file after the constant tag ("_default_external_constant"
    #    for external_constants=True); write it to a scratch dir and move it to model.ptd.
    tags = sorted(et._tensor_data.keys()) if getattr(et, "_tensor_data", None) else []
    if len(tags) != 1:
        raise RuntimeError(f"{fx.name}: expected exactly one external data file, exporter has {tags}")
    with tempfile.TemporaryDirectory() as td:
        et.write_tensor_data_to_file(td)
        produced = sorted(os.listdir(td))
        if len(produced) != 1:
            raise RuntimeError(f"{fx.name}: exporter wrote {produced}, expected one .ptd")
        original_name = produced[0]
        ptd.write_bytes((Path(td) / original_name).read_bytes())
    ptd_data = ptd.read_bytes()
    pte_data = pte.read_bytes()

    # 2. Parse both files back.
    header = _get_extended_header(ptd_data)
    if header is None:
        raise RuntimeError(f"{fx.name}: {original_name} has no FlatTensor extended header")
    ft = _deserialize_to_flat_tensor(ptd_data)
    program = deserialize_pte_binary(pte_data)
    program = getattr(program, "program", program)
    consts = _plan_constant_tensors(program)
    if not consts:
        raise RuntimeError(f"{fx.name}: program has no constant tensors")
    internal = [c for c in consts if not c["external"]]
    if internal:
        raise RuntimeError(f"{fx.name}: constants still stored in the .pte: {internal}")
    if any(len(b.storage) for b in program.constant_buffer):
        raise RuntimeError(f"{fx.name}: .pte constant_buffer is not empty")
    if any(s.size for s in program.segments):
        raise RuntimeError(f"{fx.name}: .pte has non-empty segments {program.segments}")

    ptd_keys = [nd.key for nd in ft.named_data]
    pte_keys = sorted({c["key"] for c in consts})
    if sorted(ptd_keys) != pte_keys:
        raise RuntimeError(f"{fx.name}: .pte keys {pte_keys} != .ptd keys {sorted(ptd_keys)}")

    # 3. The weight bytes are in the .ptd segments and nowhere in the .pte.
    state = {k: v.detach().contiguous().numpy() for k, v in fx.module.state_dict().items()}
    named = []
    for nd in ft.named_data:
        seg = ft.segments[nd.segment_index]
        start = header.segment_base_offset + seg.offset
        blob = ptd_data[start : start + seg.size]
        if nd.key not in state:
            raise RuntimeError(f"{fx.name}: .ptd key {nd.key!r} is not a state_dict entry")
        want = state[nd.key].tobytes()
        if blob != want:
            raise RuntimeError(f"{fx.name}: .ptd bytes of {nd.key!r} differ from the module's tensor")
        if len(want) >= 16 and want in pte_data:
            raise RuntimeError(f"{fx.name}: bytes of {nd.key!r} found inside the .pte")
        layout = nd.tensor_layout
        named.append(
            {
                "key": nd.key,
                "segment_index": nd.segment_index,
                "offset": seg.offset,
                "size": seg.size,
                "tensor_layout": None
                if layout is None
                else {
                    "scalar_type": layout.scalar_type.name,
                    "sizes": list(layout.sizes),
                    "dim_order": list(layout.dim_order),
                },
            }
        )

    # 4. ExecuTorch's runtime cannot load the method without the .ptd.
    try:
        Runtime.get().load_program(pte).load_method("forward")
        loads_without_ptd = True
    except Exception:
        loads_without_ptd = False
    if loads_without_ptd:
        raise RuntimeError(f"{fx.name}: method loaded without the .ptd; weights not external?")

    # Size of the same program with the weights inside, for comparison.
    internal_size = len(export_program(fx, external_constants=False).buffer)

    print(
        f"   external data: {original_name} -> {ptd.name}, {len(ptd_data)} bytes, keys {ptd_keys}; "
        f".pte {len(pte_data)} bytes (with internal weights: {internal_size})"
    )
    return {
        "format": "FlatTensor (flatbuffer file_identifier FT01, extended header magic FH01 at byte 8)",
        "original_name": original_name,
        "constant_tag": tags[0],
        "note": (
            "the exporter names the file after the constant tag; it is renamed to model.ptd. The .pte does "
            "not store the file name: each constant tensor of the plan has no allocation_info, "
            "extra_tensor_info.location == EXTERNAL and extra_tensor_info.fully_qualified_name == the "
            "NamedData key in the .ptd (its data_buffer_idx is not an index into the .pte's constants and "
            "must be ignored). The .ptd is given to the runtime separately: "
            "executorch.runtime.Runtime.get().load_program(pte, data_path=ptd); without it, "
            "load_method fails (external_data_map is null)."
        ),
        "ptd_bytes": len(ptd_data),
        "pte_bytes_with_internal_weights": internal_size,
        "header": {
            "flatbuffer_offset": header.flatbuffer_offset,
            "flatbuffer_size": header.flatbuffer_size,
            "segment_base_offset": header.segment_base_offset,
            "segment_data_size": header.segment_data_size,
        },
        "segment_alignment": FlatTensorConfig().segment_alignment,
        "flat_tensor_version": ft.version,
        "keys": ptd_keys,
        "named_data": named,
        "pte_constants": [
            {k: c[k] for k in ("value_index", "key", "sizes", "scalar_type", "data_buffer_idx")} for c in consts
        ],
        "loads_without_ptd": loads_without_ptd,
    }


def _et_version() -> str:
    try:
        from importlib.metadata import version

        return version("executorch")
    except Exception:
        return "unknown"


# --------------------------------------------------------------------------
# OPS.txt
# --------------------------------------------------------------------------


def op_schema(name: str) -> str | None:
    ns, rest = name.split("::", 1)
    base, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), base)
        ov = getattr(packet, overload or "default")
        return str(ov._schema)
    except Exception:
        return None


def write_ops(testdata_models: Path) -> None:
    usage: Dict[str, List[str]] = {}
    for meta_path in sorted(testdata_models.glob("*/meta.json")):
        meta = json.loads(meta_path.read_text())
        for op in meta["operators"]:
            usage.setdefault(op, []).append(meta["name"])
    if FULL_OPS_FILE.exists():
        full = json.loads(FULL_OPS_FILE.read_text())
        for name, ops in sorted(full.items()):
            for op in ops:
                usage.setdefault(op, []).append(f"{name}(full)")
    # Make sure executorch ops libs are registered with torch.ops for schemas.
    try:
        import executorch.exir.passes.dim_order_ops_registry  # noqa: F401
    except Exception:
        pass
    try:
        import executorch.exir.passes.executorch_prim_ops_registry  # noqa: F401
    except Exception:
        pass
    lines = [
        "# Sorted union of operators used by the committed fixtures in testdata/models and by the",
        "# --full models (" + ", ".join(f"{n}" for n in sorted(models.FULL)) + ", listed in tools/export/full_models_ops.json).",
        "# Format: <namespace::op.overload>  <fixtures using it>. Generated by tools/export/export_fixtures.py.",
    ]
    width = max((len(k) for k in usage), default=0)
    for op in sorted(usage):
        lines.append(f"{op.ljust(width)}  {', '.join(sorted(usage[op]))}")
    (testdata_models / "OPS.txt").write_text("\n".join(lines) + "\n")
    schema_lines = [
        "# TorchScript schema strings for every operator in OPS.txt (ops without a torch schema are listed as comments).",
    ]
    for op in sorted(usage):
        s = op_schema(op)
        if s is None:
            schema_lines.append(f"# {op}: no torch schema (runtime primitive)")
        else:
            schema_lines.append(s)
    (testdata_models / "OPS_SCHEMAS.txt").write_text("\n".join(schema_lines) + "\n")
    print("\n".join(lines))


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "testdata"), help="testdata directory (fixtures go to OUT/models)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only export these fixtures (committed or full names)")
    ap.add_argument("--full", action="store_true", help="also export full-size models to tools/export/out")
    ap.add_argument("--full-out", default=str(HERE / "out"), help="directory for --full exports")
    ap.add_argument("--ops-only", action="store_true", help="only regenerate OPS.txt and OPS_SCHEMAS.txt")
    args = ap.parse_args()

    models_dir = Path(args.out) / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    if args.ops_only:
        write_ops(models_dir)
        return 0

    selected_committed = [n for n in models.COMMITTED if not args.only or n in args.only]
    selected_full = [n for n in models.FULL if (args.full and not args.only) or (args.only and n in args.only)]
    unknown = set(args.only or []) - set(models.COMMITTED) - set(models.FULL)
    if unknown:
        ap.error(f"unknown fixture(s): {sorted(unknown)}; known: {list(models.COMMITTED) + list(models.FULL)}")

    results = []
    failed = []
    for name in selected_committed:
        try:
            results.append(run_fixture(models.COMMITTED[name](), models_dir))
        except Exception as e:
            import traceback

            traceback.print_exc()
            failed.append((name, repr(e)))

    full_ops = json.loads(FULL_OPS_FILE.read_text()) if FULL_OPS_FILE.exists() else {}
    for name in selected_full:
        try:
            r = run_fixture(models.FULL[name](), Path(args.full_out))
            results.append(r)
            full_ops[name] = r["ops"]
            link = Path(args.full_out) / f"{name}.pte"
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(Path(name) / "model.pte")
        except Exception as e:
            import traceback

            traceback.print_exc()
            failed.append((name, repr(e)))
    if selected_full:
        FULL_OPS_FILE.write_text(json.dumps(full_ops, indent=2, sort_keys=True) + "\n")

    print("\n== summary")
    for r in results:
        worst = max(r["diffs"].values()) if r["diffs"] else 0.0
        print(
            f"   {r['name']:<20} {r['size']:>10} bytes  max|ET-eager| {worst:.3e}  "
            f"{'ok' if r['ok'] else 'TOLERANCE EXCEEDED'}  run {sum(r['run_times']) * 1000:.1f} ms"
        )
    for name, err in failed:
        print(f"   {name:<20} FAILED: {err}")
    total = sum(p.stat().st_size for p in models_dir.rglob("*") if p.is_file())
    print(f"   testdata/models total: {total} bytes")
    print()
    write_ops(models_dir)
    return 1 if failed or not all(r["ok"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
