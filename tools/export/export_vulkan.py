#!/usr/bin/env python3
"""Export Vulkan-delegated fixtures: `.pte` programs lowered with
`to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()])` (fp32, default compile
options), with golden outputs from ExecuTorch's own runtime running the SAME model (same
weights, same inputs) exported WITHOUT any delegate (portable kernels): the pip runtime has no
Vulkan backend, so it cannot run the delegated file itself.

Usage (from the repository root):

    /opt/etvenv/bin/python tools/export/export_vulkan.py                 # all -> testdata/vulkan
    /opt/etvenv/bin/python tools/export/export_vulkan.py --only mlp
    /opt/etvenv/bin/python tools/export/export_vulkan.py --out /tmp/vk
    /opt/etvenv/bin/python tools/export/export_vulkan.py --full          # full-size models -> tools/export/out/vulkan_full

--full takes the models from models.FULL instead (default: all_minilm_l6_v2 and mobilenet_v2; --only
picks among models.FULL), skips the committed-size check, writes to tools/export/out/vulkan_full
(gitignored) unless --out is given, and also keeps the undelegated program as portable.pte.

Layout of one fixture directory:

    model.pte              the Vulkan-delegated program (method "forward")
    input0.npy, ...        plan inputs, in order, exact dtypes
    expected0.npy, ...     outputs of the PORTABLE program of the same model, run by executorch.runtime
    graph.txt              human-readable dump of every Vulkan delegate payload (VkGraph)
    meta.json              description, shapes, delegates, Vulkan operators, instruction counts,
                           |portable golden - eager| per output, versions

The models are the builders of tools/export/models.py (same seeds, weights and inputs as the
portable fixtures in testdata/models).

Vulkan delegate payload (executorch/backends/vulkan/serialization/vulkan_graph_serialize.py):

    bytes  0..4   zero padding
    bytes  4..8   magic b"VH00"
    bytes  8..10  u16 LE header length (30)
    bytes 10..14  u32 LE flatbuffer_offset (32: header padded to 16-byte multiple)
    bytes 14..18  u32 LE flatbuffer_size
    bytes 18..22  u32 LE bytes_offset   (flatbuffer_offset + flatbuffer_size rounded up to 16)
    bytes 22..30  u64 LE bytes_size     (raw constant bytes inside the payload; 0 when every
                                          constant lives in the .pte's named data)
    [flatbuffer_offset, +flatbuffer_size): flatbuffer, schema vulkan/serialization/schema.fbs,
                                          file identifier "VK00", root table VkGraph.

A VkBytes constant with offset == 2**64-1 refers to the .pte's named data by `named_key`
(Program.named_data[key].segment_index -> Program.segments[i] -> bytes at the extended header's
segment_base_offset + segment.offset); otherwise the bytes are at payload[bytes_offset + offset,
+length).
"""

from __future__ import annotations

import argparse
import collections
import copy
import hashlib
import importlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import models  # noqa: E402
from export_fixtures import (  # noqa: E402
    _et_version,
    describe,
    export_program,
    flatten_outputs,
    max_abs_diff,
    program_ops,
    save_case,
    to_numpy,
)

FIXTURES = ["mlp", "mobilenet_v2_small", "bert_tiny"]
FULL_FIXTURES = ["all_minilm_l6_v2", "mobilenet_v2"]
MAX_PTE = 1536 * 1024

ET_DIR = Path(list(importlib.import_module("executorch").__path__)[0])
FLATC = ET_DIR / "data/bin/flatc"
PROGRAM_FBS = ET_DIR / "exir/_serialize/program.fbs"
VK_FBS = ET_DIR / "backends/vulkan/serialization/schema.fbs"
NAMED_DATA_OFFSET = 0xFFFF_FFFF_FFFF_FFFF

FORMAT_NOTES = {
    "delegate_reference": (
        "ExecutionPlan.delegates[i] = BackendDelegate{id: 'VulkanBackend', processed: "
        "BackendDelegateDataReference{location: SEGMENT, index: k}, compile_specs: [] (default options)}; "
        "the payload is Program.segments[k] at extended-header segment_base_offset + offset. "
        "Instruction DelegateCall{delegate_index, args} passes the plan EValues of the VkGraph input_ids, "
        "then of its output_ids, in order."
    ),
    "payload_header": (
        "bytes 0..4 zero; 4..8 'VH00'; 8..10 u16 LE header length (30); 10..14 u32 LE flatbuffer_offset (32); "
        "14..18 u32 LE flatbuffer_size; 18..22 u32 LE bytes_offset; 22..30 u64 LE bytes_size; 30..32 zero padding. "
        "The flatbuffer (file identifier 'VK00' at its bytes 4..8, root VkGraph) is at "
        "[flatbuffer_offset, +flatbuffer_size); raw constant bytes at [bytes_offset, +bytes_size)."
    ),
    "constants": (
        "VkGraph.constants[constant_id] = VkBytes{offset, length, named_key}. offset == 2**64-1: the bytes are the "
        ".pte named data entry named_key (Program.named_data[key].segment_index -> Program.segments[i]); the key is "
        "the sha256 hex digest of the bytes. Otherwise payload[bytes_offset + offset, +length). Constant tensors are "
        "contiguous, in the VkTensor's datatype and dims; BatchNorm is already folded into convolution weights/bias."
    ),
    "operator_args": (
        "OperatorCall.args are VkValue ids: every argument of the op's torch schema in schema order (defaults and "
        "kwarg-only ones included; None/device/dtype/layout/memory_format as Null), then the output value (a "
        "ValueList of tensors for multi-output ops such as native_layer_norm)."
    ),
    "dtypes": (
        "downcast_64_bit (default on): int64/float64 tensors of the graph are INT32/FLOAT32 in the VkGraph, "
        "including inputs/outputs whose plan EValues are LONG; the conversion happens when copying to/from the "
        "ExecuTorch tensors."
    ),
}

# --------------------------------------------------------------------------
# lowering
# --------------------------------------------------------------------------


def lower_vulkan(fx: models.Fixture):
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.export(fx.module, fx.inputs, dynamic_shapes=fx.dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()])
    return edge.to_executorch()


# --------------------------------------------------------------------------
# reading the .pte (raw flatbuffer, via flatc JSON: exact delegate locations, segments, named data)
# --------------------------------------------------------------------------


def _flatc_json(schema: Path, data: bytes, raw: bool) -> Dict[str, Any]:
    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "x.bin"
        p.write_bytes(data)
        cmd = [str(FLATC), "--json", "--strict-json", "--defaults-json", "-o", td, str(schema)]
        if raw:
            cmd.append("--raw-binary")
        subprocess.run(cmd + ["--", str(p)], check=True, capture_output=True)
        txt = (Path(td) / "x.json").read_text()
    # flatc writes non-finite doubles as bare inf/nan tokens.
    txt = re.sub(r"(?<=[:\[,\s])(-?)inf(?=[\s,\]}])", r"\1Infinity", txt)
    txt = re.sub(r"(?<=[:\[,\s])-?nan(?=[\s,\]}])", "NaN", txt)
    return json.loads(txt)


def read_pte(pte: bytes) -> Dict[str, Any]:
    prog = _flatc_json(PROGRAM_FBS, pte, raw=False)
    seg_base = None
    if pte[8:12] == b"eh00":
        seg_base = struct.unpack_from("<Q", pte, 24)[0]
    prog["_segment_base_offset"] = seg_base
    return prog


def delegate_blob(pte: bytes, prog: Dict[str, Any], ref: Dict[str, Any]) -> bytes:
    if ref["location"] == "INLINE":
        return bytes(prog["backend_delegate_data"][ref["index"]]["data"])
    seg = prog["segments"][ref["index"]]
    base = prog["_segment_base_offset"]
    return pte[base + seg["offset"] : base + seg["offset"] + seg["size"]]


def named_data_bytes(pte: bytes, prog: Dict[str, Any], key: str) -> Tuple[int, Dict[str, Any], bytes]:
    for nd in prog.get("named_data") or []:
        if nd["key"] == key:
            seg = prog["segments"][nd["segment_index"]]
            base = prog["_segment_base_offset"]
            return nd["segment_index"], seg, pte[base + seg["offset"] : base + seg["offset"] + seg["size"]]
    raise KeyError(key)


# --------------------------------------------------------------------------
# reading the Vulkan payload
# --------------------------------------------------------------------------


def parse_vh_header(blob: bytes) -> Dict[str, int]:
    if blob[4:8] != b"VH00":
        raise RuntimeError(f"Vulkan payload does not start with a VH00 header: {blob[:32]!r}")
    (hlen,) = struct.unpack_from("<H", blob, 8)
    fb_off, fb_size, bytes_off = struct.unpack_from("<III", blob, 10)
    (bytes_size,) = struct.unpack_from("<Q", blob, 22)
    # Cross-check with ExecuTorch's own parser.
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import VulkanDelegateHeader

    h = VulkanDelegateHeader.from_bytes(blob[: VulkanDelegateHeader.EXPECTED_LENGTH])
    assert (h.flatbuffer_offset, h.flatbuffer_size, h.bytes_offset, h.bytes_size) == (
        fb_off,
        fb_size,
        bytes_off,
        bytes_size,
    )
    return {
        "padding0_4": blob[0:4].hex(),
        "magic": blob[4:8].decode(),
        "header_length": hlen,
        "flatbuffer_offset": fb_off,
        "flatbuffer_size": fb_size,
        "bytes_offset": bytes_off,
        "bytes_size": bytes_size,
        "payload_bytes": len(blob),
    }


def read_vkgraph(blob: bytes, hdr: Dict[str, int]) -> Dict[str, Any]:
    fb = blob[hdr["flatbuffer_offset"] : hdr["flatbuffer_offset"] + hdr["flatbuffer_size"]]
    if fb[4:8] != b"VK00":
        raise RuntimeError(f"VkGraph flatbuffer identifier is {fb[4:8]!r}, expected VK00")
    g = _flatc_json(VK_FBS, fb, raw=True)
    # Cross-check with ExecuTorch's own deserializer (flatc -> dataclasses).
    from executorch.backends.vulkan.serialization.vulkan_graph_serialize import flatbuffer_to_vk_graph

    try:
        vg = flatbuffer_to_vk_graph(fb)
        assert [c.name for c in vg.chain] == [c["name"] for c in g["chain"]]
        assert [list(c.args) for c in vg.chain] == [c["args"] for c in g["chain"]]
        assert len(vg.values) == len(g["values"])
    except (json.JSONDecodeError, ValueError):
        pass  # its json.load cannot read non-finite doubles; our reader handles them
    return g


_DT = {"BOOL": "bool", "UINT8": "u8", "INT8": "i8", "INT32": "i32", "FLOAT16": "f16", "FLOAT32": "f32",
       "FLOAT64": "f64", "INT64": "i64", "UNSET": "unset"}


def fmt_double(x: float) -> str:
    return repr(float(x))


def fmt_value(g: Dict[str, Any], vid: int, depth: int = 0) -> str:
    v = g["values"][vid]
    kind = v.get("value_type", "NONE")
    val = v.get("value") or {}
    if kind == "VkTensor":
        cid = val["constant_id"]
        s = f"Tensor<{_DT.get(val['datatype'], val['datatype'])}>[{','.join(str(d) for d in val['dims'])}]"
        s += f" const#{cid}" if cid >= 0 else " nonconst"
        s += f" mem_obj={val['mem_obj_id']}"
        s += f" {val['storage_type']}/{val['memory_layout']}"
        if val.get("staging_datatype", "UNSET") != val["datatype"]:
            s += f" staging={_DT.get(val['staging_datatype'], val['staging_datatype'])}"
        return s
    if kind == "Null":
        return "Null"
    if kind == "Int":
        return f"Int({val['int_val']})"
    if kind == "Double":
        return f"Double({fmt_double(val['double_val'])})"
    if kind == "Bool":
        return f"Bool({str(val['bool_val']).lower()})"
    if kind == "IntList":
        return f"IntList[{', '.join(str(i) for i in val.get('items', []))}]"
    if kind == "DoubleList":
        return f"DoubleList[{', '.join(fmt_double(i) for i in val.get('items', []))}]"
    if kind == "BoolList":
        return f"BoolList[{', '.join(str(b).lower() for b in val.get('items', []))}]"
    if kind == "ValueList":
        items = val.get("items", [])
        if depth > 0:
            return f"ValueList[{', '.join('%' + str(i) for i in items)}]"
        return f"ValueList[{', '.join('%' + str(i) + ' ' + fmt_value(g, i, depth + 1) for i in items)}]"
    if kind == "String":
        return f"String({json.dumps(val.get('string_val', ''))})"
    if kind == "SymInt":
        return f"SymInt({val.get('value', 0)})"
    return f"{kind}({val})"


def _load_custom_ops() -> None:
    try:
        import executorch.backends.vulkan.custom_ops_lib  # noqa: F401
    except Exception:
        pass


def schema_arg_names(op: str) -> Optional[List[str]]:
    """Argument names of the op's torch schema (the VkGraph builder serializes every schema
    argument, defaults included, in schema order, then appends the output value)."""
    parts = op.split(".")
    if len(parts) < 2:
        return None
    ns, base = parts[0], parts[1]
    overload = parts[2] if len(parts) > 2 else "default"
    try:
        ov = getattr(getattr(getattr(torch.ops, ns), base), overload)
        return [a.name for a in ov._schema.arguments]
    except Exception:
        return None


def graph_dump(title: str, g: Dict[str, Any], hdr: Dict[str, int], const_rows: List[str]) -> List[str]:
    L = [f"== {title}"]
    L.append(
        "header: magic={magic} header_length={header_length} flatbuffer_offset={flatbuffer_offset} "
        "flatbuffer_size={flatbuffer_size} bytes_offset={bytes_offset} bytes_size={bytes_size} "
        "payload_bytes={payload_bytes}".format(**hdr)
    )
    L.append(
        f"version={json.dumps(g.get('version'))} storage_type_override={g.get('storage_type_override')} "
        f"memory_layout_override={g.get('memory_layout_override')} values={len(g['values'])} "
        f"chain={len(g['chain'])} constants={len(g.get('constants', []))} shaders={len(g.get('shaders', []))}"
    )
    L.append("input_ids: " + ", ".join(f"%{i} {fmt_value(g, i)}" for i in g.get("input_ids", [])))
    L.append("output_ids: " + ", ".join(f"%{i} {fmt_value(g, i)}" for i in g.get("output_ids", [])))
    L.append("")
    L.append(f"-- chain ({len(g['chain'])} OperatorCalls; args in serialized order; the LAST arg is the output value)")
    for ci, call in enumerate(g["chain"]):
        args = call.get("args", [])
        names = schema_arg_names(call["name"])
        if names is not None and len(names) != len(args) - 1:
            names = None
        parts = []
        for ai, a in enumerate(args):
            label = names[ai] if names is not None and ai < len(names) else ("out" if ai == len(args) - 1 else f"arg{ai}")
            if names is not None and ai == len(args) - 1:
                label = "out"
            parts.append(f"{label}=%{a} {fmt_value(g, a)}")
        L.append(f"[{ci}] node_id={call.get('node_id', 0)} {call['name']}({'; '.join(parts)})")
    L.append("")
    L.append(f"-- constants ({len(g.get('constants', []))}; offset 18446744073709551615 = in the .pte's named data under named_key)")
    L.extend(const_rows)
    L.append("")
    L.append(f"-- values ({len(g['values'])})")
    for vi in range(len(g["values"])):
        L.append(f"%{vi} {fmt_value(g, vi)}")
    L.append("")
    return L


def constant_rows(pte: bytes, prog: Dict[str, Any], g: Dict[str, Any], blob: bytes, hdr: Dict[str, int]) -> Tuple[List[str], List[Dict[str, Any]]]:
    rows, info = [], []
    users: Dict[int, List[int]] = collections.defaultdict(list)
    for vi, v in enumerate(g["values"]):
        if v.get("value_type") == "VkTensor" and v["value"]["constant_id"] >= 0:
            users[v["value"]["constant_id"]].append(vi)
    for i, c in enumerate(g.get("constants", [])):
        off, length, key = int(c["offset"]), int(c["length"]), c.get("named_key") or ""
        rec: Dict[str, Any] = {"index": i, "offset": off, "length": length, "named_key": key, "values": users.get(i, [])}
        where = ""
        if off == NAMED_DATA_OFFSET:
            si, seg, data = named_data_bytes(pte, prog, key)
            if len(data) != length:
                raise RuntimeError(f"constant {i}: named data {key} has {len(data)} bytes, VkBytes says {length}")
            rec.update({"segment_index": si, "segment_offset": seg["offset"], "segment_size": seg["size"]})
            where = f" -> .pte segment {si} (offset {seg['offset']} from segment_base_offset, size {seg['size']})"
        else:
            data = blob[hdr["bytes_offset"] + off : hdr["bytes_offset"] + off + length]
            where = " -> payload raw bytes"
        rec["sha256"] = hashlib.sha256(data).hexdigest()
        if key and rec["sha256"] != key:
            raise RuntimeError(f"constant {i}: named_key {key} is not the sha256 of its bytes")
        rows.append(
            f"#{i} offset={off} length={length} named_key={key or '-'}{where} used_by={','.join('%' + str(u) for u in users.get(i, []))}"
        )
        info.append(rec)
    return rows, info


# --------------------------------------------------------------------------
# run
# --------------------------------------------------------------------------


def plan_value_desc(plan: Dict[str, Any], vi: int) -> Dict[str, Any]:
    v = plan["values"][vi]
    if v["val_type"] == "Tensor":
        return {"value": vi, "kind": "Tensor", "scalar_type": v["val"]["scalar_type"], "sizes": v["val"]["sizes"]}
    return {"value": vi, "kind": v["val_type"], "val": v["val"]}


def check_boundary(g: Dict[str, Any], plan: Dict[str, Any], dargs: List[int]) -> List[str]:
    """Pair the DelegateCall's plan values with the VkGraph's input_ids + output_ids and check
    the shapes; return one line per pair for graph.txt."""
    ids = list(g.get("input_ids", [])) + list(g.get("output_ids", []))
    if len(ids) != len(dargs):
        raise RuntimeError(f"DelegateCall has {len(dargs)} args, VkGraph {len(ids)} inputs+outputs")
    lines = []
    n_in = len(g.get("input_ids", []))
    for k, (vid, pv) in enumerate(zip(ids, dargs)):
        d = plan_value_desc(plan, pv)
        gv = g["values"][vid]
        if d["kind"] == "Tensor" and gv.get("value_type") == "VkTensor":
            if list(gv["value"]["dims"]) != list(d["sizes"]):
                raise RuntimeError(f"shape mismatch: plan value {pv} {d['sizes']} vs VkGraph %{vid} {gv['value']['dims']}")
        role = "in " if k < n_in else "out"
        lines.append(
            f"  {role} plan value {pv} {d['kind']}<{d.get('scalar_type', '')}>{d.get('sizes', '')} <-> %{vid} {fmt_value(g, vid)}"
        )
    return lines


def run_fixture(name: str, outdir: Path, full: bool = False) -> Dict[str, Any]:
    from executorch.runtime import Runtime

    print(f"== {name}")
    fx = (models.FULL if full else models.COMMITTED)[name]()
    eager_mod = copy.deepcopy(fx.module)
    vk_fx = copy.copy(fx)
    vk_fx.module = copy.deepcopy(fx.module)
    pt_fx = copy.copy(fx)
    pt_fx.module = copy.deepcopy(fx.module)

    # 1. Vulkan-delegated program.
    t0 = time.perf_counter()
    et_vk = lower_vulkan(vk_fx)
    pte_bytes = et_vk.buffer
    fdir = outdir / name
    fdir.mkdir(parents=True, exist_ok=True)
    (fdir / "model.pte").write_bytes(pte_bytes)
    if not full and len(pte_bytes) > MAX_PTE:
        raise RuntimeError(f"{name}: Vulkan .pte is {len(pte_bytes)} bytes > {MAX_PTE}")

    prog = read_pte(pte_bytes)
    plan = prog["execution_plan"][0]
    op_names = [f"{o['name']}.{o['overload']}" if o.get("overload") else o["name"] for o in plan.get("operators", [])]
    instr = collections.Counter()
    kernel_calls = collections.Counter()
    for ch in plan["chains"]:
        for ins in ch["instructions"]:
            t = ins["instr_args_type"]
            instr[t] += 1
            if t == "KernelCall":
                kernel_calls[op_names[ins["instr_args"]["op_index"]]] += 1
    delegate_call_args = [
        ins["instr_args"]["args"] for ch in plan["chains"] for ins in ch["instructions"] if ins["instr_args_type"] == "DelegateCall"
    ]

    delegates = []
    pte_label = f"testdata/vulkan/{name}/model.pte"
    if full:
        pte_label = str(fdir / "model.pte")
        try:
            pte_label = str((fdir / "model.pte").resolve().relative_to(REPO))
        except ValueError:
            pass
    graph_lines = [
        f"# Vulkan delegate payloads of {pte_label} (generated by tools/export/export_vulkan.py).",
        "# Value notation: %id Kind(content). Tensor<dtype>[dims] const#constant_id|nonconst mem_obj=mem_obj_id STORAGE/LAYOUT",
        "# (staging=dtype only when it differs from dtype). Arg labels are the torch schema argument names when the",
        "# op has a schema whose length matches (args = every schema argument incl. defaults, in order, then the output);",
        "# otherwise arg0.. and out. Null stands for None and for device/dtype/layout/memory_format arguments.",
        "# Flatbuffer enum codes: GraphTypes union tag NONE=0 Null=1 Int=2 Double=3 Bool=4 VkTensor=5 IntList=6",
        "#   DoubleList=7 BoolList=8 ValueList=9 String=10 SymInt=11; VkDataType (i8) BOOL=0 UINT8=1 INT8=2 INT32=3",
        "#   FLOAT16=4 FLOAT32=5 FLOAT64=6 INT64=7 UNSET=127; VkStorageType (u8) BUFFER=0 TEXTURE_3D=1 TEXTURE_2D=2",
        "#   DEFAULT_STORAGE=255; VkMemoryLayout (u8) TENSOR_WIDTH_PACKED=0 TENSOR_HEIGHT_PACKED=1",
        "#   TENSOR_CHANNELS_PACKED=2 ... DEFAULT_LAYOUT=255.",
        "# DelegateCall args (plan value ids) = the plan EValues for VkGraph input_ids in order, then output_ids in order.",
        "",
    ]
    all_ops: collections.Counter = collections.Counter()
    for di, d in enumerate(plan["delegates"]):
        blob = delegate_blob(pte_bytes, prog, d["processed"])
        hdr = parse_vh_header(blob)
        g = read_vkgraph(blob, hdr)
        rows, cinfo = constant_rows(pte_bytes, prog, g, blob, hdr)
        ops = collections.Counter(c["name"] for c in g["chain"])
        all_ops.update(ops)
        dargs = delegate_call_args[di] if di < len(delegate_call_args) else None
        boundary = check_boundary(g, plan, dargs)
        dump = graph_dump(
            f"delegate {di}: id={d['id']} processed={d['processed']['location']}[{d['processed']['index']}] "
            f"compile_specs={d.get('compile_specs', [])} DelegateCall args (plan value ids)={dargs}",
            g,
            hdr,
            rows,
        )
        graph_lines += dump[:5] + ["DelegateCall boundary (plan EValue <-> VkGraph value):"] + boundary + dump[5:]
        delegates.append(
            {
                "index": di,
                "id": d["id"],
                "location": d["processed"]["location"],
                "data_index": d["processed"]["index"],
                "compile_specs": d.get("compile_specs", []),
                "delegate_call_args": dargs,
                "delegate_call_arg_values": [plan_value_desc(plan, a) for a in dargs],
                "header": hdr,
                "vkgraph": {
                    "version": g.get("version"),
                    "num_values": len(g["values"]),
                    "chain_length": len(g["chain"]),
                    "input_ids": g.get("input_ids", []),
                    "output_ids": g.get("output_ids", []),
                    "storage_type_override": g.get("storage_type_override"),
                    "memory_layout_override": g.get("memory_layout_override"),
                    "num_shaders": len(g.get("shaders", [])),
                },
                "operators": dict(sorted(ops.items())),
                "constants": cinfo,
            }
        )
    (fdir / "graph.txt").write_text("\n".join(graph_lines))
    print(
        f"   lowered in {time.perf_counter() - t0:.1f}s, {len(pte_bytes)} bytes, {len(delegates)} delegates, "
        f"vulkan ops {dict(sorted(all_ops.items()))}, non-delegated kernels {dict(kernel_calls)}"
    )

    # 2. Golden: the same model exported portable-only, run by ExecuTorch's runtime.
    et_pt = export_program(pt_fx, external_constants=False)
    with tempfile.TemporaryDirectory() as td:
        p = (fdir if full else Path(td)) / "portable.pte"
        p.write_bytes(et_pt.buffer)
        method = Runtime.get().load_program(p).load_method("forward")
        et_out = list(method.execute(list(fx.inputs)))
    with torch.no_grad():
        eager = flatten_outputs(eager_mod(*[t.clone() for t in fx.inputs]))
    diffs = {}
    for i, (a, b) in enumerate(zip(et_out, eager)):
        d = max_abs_diff(to_numpy(a), to_numpy(b))
        diffs[f"out{i}"] = d
        print(f"   out{i} {list(to_numpy(a).shape)}: max|portable ET - eager| = {d:.3e}")
    save_case(fdir, fx.inputs, et_out)
    ref_dir = REPO / "testdata" / "models" / name
    same_as_models = None
    if ref_dir.is_dir():
        same_as_models = all(
            (ref_dir / f"expected{i}.npy").exists()
            and np.array_equal(np.load(ref_dir / f"expected{i}.npy"), to_numpy(o))
            for i, o in enumerate(et_out)
        ) and all(
            (ref_dir / f"input{i}.npy").exists() and np.array_equal(np.load(ref_dir / f"input{i}.npy"), to_numpy(t))
            for i, t in enumerate(fx.inputs)
        )
        print(f"   inputs/goldens identical to testdata/models/{name}: {same_as_models}")

    meta = {
        "name": name,
        "description": fx.description + " (fp32, lowered to ExecuTorch's Vulkan backend with default options)",
        "inputs": [
            dict(describe(t), **({"name": fx.input_names[i]} if fx.input_names else {})) for i, t in enumerate(fx.inputs)
        ],
        "outputs": [
            dict(describe(o), **({"name": fx.output_names[i]} if fx.output_names and i < len(fx.output_names) else {}))
            for i, o in enumerate(et_out)
        ],
        "golden": (
            "expected*.npy are the outputs of the same model (same weights, same inputs) exported WITHOUT "
            "delegates (portable kernels) and run by executorch.runtime; the pip runtime has no Vulkan backend"
        ),
        "portable_vs_eager_max_abs": diffs,
        "identical_to_testdata_models": same_as_models,
        "tolerance": {"atol": fx.atol, "rtol": fx.rtol},
        "vulkan_operators": sorted(all_ops),
        "vulkan_operator_counts": dict(sorted(all_ops.items())),
        "delegate_calls": instr.get("DelegateCall", 0),
        "non_delegated_kernel_calls": sum(kernel_calls.values()),
        "non_delegated_kernels": dict(sorted(kernel_calls.items())),
        "instructions": dict(sorted(instr.items())),
        "operators": sorted(set(op_names)),
        "delegates": delegates,
        "format_notes": FORMAT_NOTES,
        "pte_bytes": len(pte_bytes),
        "segment_base_offset": prog["_segment_base_offset"],
        "versions": {"torch": torch.__version__, "executorch": _et_version()},
    }
    if full:
        meta["portable_pte"] = "portable.pte"
        meta["portable_pte_bytes"] = len(et_pt.buffer)
        meta["portable_operators"] = program_ops(et_pt)
    (fdir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", help=f"fixture names (default: {' '.join(FIXTURES)})")
    ap.add_argument("--out", default=None, help="output directory (default: testdata/vulkan; with --full: tools/export/out/vulkan_full)")
    ap.add_argument(
        "--full",
        action="store_true",
        help=f"export full-size models from models.FULL (default: {' '.join(FULL_FIXTURES)}); keeps portable.pte too",
    )
    args = ap.parse_args()
    registry = models.FULL if args.full else models.COMMITTED
    unknown = sorted(set(args.only or []) - set(registry))
    if unknown:
        ap.error(f"unknown fixture(s) {unknown}; known{' (--full)' if args.full else ''}: {sorted(registry)}")
    _load_custom_ops()
    if args.out is not None:
        outdir = Path(args.out)
    elif args.full:
        outdir = HERE / "out" / "vulkan_full"
    else:
        outdir = REPO / "testdata" / "vulkan"
    failed = []
    results = []
    for name in args.only or (FULL_FIXTURES if args.full else FIXTURES):
        try:
            results.append(run_fixture(name, outdir, full=args.full))
        except Exception as e:
            import traceback

            traceback.print_exc()
            failed.append((name, repr(e)))
    print("\n== summary")
    for m in results:
        print(
            f"   {m['name']:<20} {m['pte_bytes']:>9} bytes  {m['delegate_calls']} delegate calls, "
            f"{m['non_delegated_kernel_calls']} kernel calls  max|portable-eager| "
            f"{max(m['portable_vs_eager_max_abs'].values()):.3e}"
        )
    for name, err in failed:
        print(f"   {name:<20} FAILED: {err}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
