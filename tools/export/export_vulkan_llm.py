#!/usr/bin/env python3
"""The tiny Llama of tools/export/export_llm.py (`tiny` target: dim 64, 2 layers, GQA 4/2 heads,
hidden 96, vocab 512, same seeded random weights, same tokenizer) exported with ExecuTorch's LLM
recipe (`export_llama_lib.export_llama`, the code behind
`python -m executorch.extension.llm.export.export_llm`) with `backend.vulkan.enabled=True`:
KV cache, `use_sdpa_with_kv_cache`, dynamic shape, fp32, max_seq_len 32, max_context_len 256
(the options of testdata/llm/tiny/fp32.pte), and the same plus `quantization.qmode=8da4w`
(group 32).

Writes, for each variant, testdata/vulkan/<fixture>/:

    model.pte      the Vulkan-delegated program (methods forward + the metadata methods)
    graph.txt      the program's plans (values, instructions, delegate calls) and every Vulkan
                   delegate payload (VkGraph: OperatorCalls with their args, input/output ids,
                   constants, values), plus where the KV cache, the position input and the
                   dynamic sequence length live (dump code of tools/export/export_vulkan.py)
    goldens.json   greedy token ids from ExecuTorch's runtime (`executorch.runtime`) running the
                   SAME model exported WITHOUT the Vulkan delegate (portable kernels; same
                   weights and export options otherwise): the prompt in one prefill call, then
                   16 decode calls of one token; the method names, their input/output specs and
                   the metadata methods' values. The pip runtime has no Vulkan backend, so the
                   delegated program itself cannot be run here.
    logits.npy     float32 [17, 512]: the logits each greedy choice was taken from (row 0: the
                   prefill call's, row k: decode call k's), from the same non-delegated program
    reference.pte  only when the non-delegated program is not already committed elsewhere
    eager_logits.npy  (8da4w only) float32 [17, 512]: the same calls on the recipe's eager model
                   after its quantization source transform (torchao's dynamic int8 activations
                   and 4-bit weights, which the Vulkan operators specify): the golden of the
                   quantized arithmetic itself. logits.npy there comes from the XNNPACK export
                   (the portable 8da4w export does not run), whose own dynamic quantization
                   differs from torchao's by a few percent of the logits on this model.

Fixtures: `llm_tiny` (fp32) and `llm_tiny_8da4w` (dynamic int8 activations, 4-bit weights in
groups of 32). The tokenizer is testdata/llm/tiny/tokenizer.json (referenced, not copied).

    /opt/etvenv/bin/python tools/export/export_vulkan_llm.py [--variants fp32 8da4w]
    /opt/etvenv/bin/python tools/export/export_vulkan_llm.py --eager-only   # eager_logits.npy alone

The checkpoint is regenerated here (export_llm.tiny_checkpoint, seed 7, the same `never` ids
from the committed tokenizer) into tools/export/out/vulkan_llm_work/, so export_llm.py need not
have been run; the fp32 check below confirms the weights equal those of testdata/llm/tiny.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import operator
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export_llm as L  # noqa: E402
import export_vulkan as V  # noqa: E402

ROOT = L.ROOT
OUT_ROOT = ROOT / "testdata" / "vulkan"
WORK = L.OUT_DIR / "vulkan_llm_work"
MAX_SEQ, MAX_CTX = 32, 256
GROUP_SIZE = 32
DECODE_STEPS = 16
PROMPT = L.TINY_PROMPTS["short"]
MAX_PTE = 2 * 1024 * 1024

# What ExecuTorch's runtime logs when the portable (no backend) 8da4w export runs: the recipe's
# 8da4w source transform leaves int8 weights feeding aten::linear, which no portable kernel takes.
PORTABLE_FAILURE_NOTES = {
    "8da4w": "[tensor_util.h:608] Check failed (a.scalar_type() == b.scalar_type() && b.scalar_type() == "
             "c.scalar_type()): Tensors do not match: dtype={Float, Char, Float} / [op_linear.cpp:78] Check failed "
             "(check_linear_args(in, mat2, out)) / [method.cpp:1483] KernelCall failed at instruction 0:13 in "
             "operator aten::linear.out: 0x12 (observed with executorch 1.5.1)",
}

# name: (fixture directory, quantization.qmode)
VARIANTS = {
    "fp32": ("llm_tiny", None),
    "8da4w": ("llm_tiny_8da4w", "8da4w"),
}


# ---------------------------------------------------------------------------------------------
# Capture of the Vulkan preprocess: the ExportedProgram the VkGraph was built from (after the
# Vulkan passes) and its node -> VkGraph value id map, for the symbolic shapes in graph.txt.

CAPTURED: List[Dict[str, Any]] = []


def install_capture() -> None:
    from executorch.backends.vulkan.serialization.vulkan_graph_builder import VkGraphBuilder

    if getattr(VkGraphBuilder, "_pteron_capture", False):
        return
    orig = VkGraphBuilder.build_graph

    def build_graph(self):
        g = orig(self)
        CAPTURED.append({"program": self.program, "node_to_value_ids": dict(self.node_to_value_ids),
                         "chain_nodes": [n for n in self.program.graph_module.graph.nodes
                                         if n.op == "call_function" and n.target is not operator.getitem]})
        return g

    VkGraphBuilder.build_graph = build_graph
    VkGraphBuilder._pteron_capture = True


def sym_str(x) -> str:
    return str(x)


def node_val_str(val) -> Optional[str]:
    if isinstance(val, torch.Tensor):
        return f"{str(val.dtype).replace('torch.', '')}[{', '.join(sym_str(d) for d in val.shape)}]"
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return f"SymInt({val})"
    if isinstance(val, (list, tuple)):
        parts = [node_val_str(v) for v in val]
        return "(" + ", ".join(p or "?" for p in parts) + ")"
    if isinstance(val, (int, float, bool)):
        return repr(val)
    return None


def capture_rows(cap: Dict[str, Any], g: Dict[str, Any]) -> List[str]:
    """Per VkGraph value: the node it came from and its symbolic value (FakeTensor shape with
    the export's symbols; the VkGraph dims are the upper bounds)."""
    prog = cap["program"]
    sig = prog.graph_signature
    rows = []
    by_vid: Dict[int, List[str]] = collections.defaultdict(list)
    for node, ids in cap["node_to_value_ids"].items():
        ids_l = ids if isinstance(ids, list) else [ids]
        for k, vid in enumerate(ids_l):
            val = node.meta.get("val")
            if isinstance(ids, list) and isinstance(val, (list, tuple)) and k < len(val):
                val = val[k]
            kind = node.op
            if node.op == "placeholder":
                if node.name in sig.inputs_to_parameters:
                    kind = f"parameter {sig.inputs_to_parameters[node.name]}"
                elif node.name in sig.inputs_to_buffers:
                    tgt = sig.inputs_to_buffers[node.name]
                    mutated = tgt in sig.buffers_to_mutate.values()
                    kind = f"buffer {tgt}{' (MUTATED in place)' if mutated else ''}"
                elif node.name in sig.inputs_to_lifted_tensor_constants:
                    kind = f"lifted constant {sig.inputs_to_lifted_tensor_constants[node.name]}"
                else:
                    kind = "user input"
            elif node.op == "call_function":
                kind = f"{getattr(node.target, '__name__', node.target)}"
            by_vid[vid].append(f"{node.name} <{kind}> {node_val_str(val) or '-'}")
    for vid in sorted(by_vid):
        rows.append(f"%{vid} {V.fmt_value(g, vid)}  <=  {' | '.join(by_vid[vid])}")
    return rows


def chain_schema_names(cap: Optional[Dict[str, Any]]) -> Dict[str, List[str]]:
    names: Dict[str, List[str]] = {"add": ["a", "b"]}
    if cap is None:
        return names
    for n in cap["chain_nodes"]:
        nm = getattr(n.target, "__name__", str(n.target))
        if hasattr(n.target, "_schema"):
            names[nm] = [a.name for a in n.target._schema.arguments]
    return names


# ---------------------------------------------------------------------------------------------
# Export


def config(variant: str, vulkan: bool, metadata: Dict[str, Any], xnnpack: bool = False):
    _, qmode = VARIANTS[variant]
    tag = ("vk_" if vulkan else "xnn_" if xnnpack else "ref_") + variant
    cfg = L.llm_config(WORK / "tiny.pth", WORK / "params.json", WORK, tag, MAX_SEQ, MAX_CTX, metadata)
    cfg.backend.vulkan.enabled = vulkan
    cfg.backend.xnnpack.enabled = xnnpack
    if qmode:
        cfg.quantization.qmode = qmode
        cfg.quantization.group_size = GROUP_SIZE
    return cfg


def make_checkpoint(tok) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    params = L.tiny_params()
    never = [i for i in range(tok.get_vocab_size()) if not L.valid_piece(tok, i)]
    never.append(tok.token_to_id("<|endoftext|>"))
    torch.save(L.tiny_checkpoint(params, never), WORK / "tiny.pth")
    (WORK / "params.json").write_text(json.dumps(params))


# ---------------------------------------------------------------------------------------------
# Goldens


def method_specs(prog: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for plan in prog["execution_plan"]:
        def spec(vi):
            v = plan["values"][vi]
            if v["val_type"] == "Tensor":
                t = v["val"]
                return {"value": vi, "kind": "Tensor", "dtype": t["scalar_type"], "sizes": t["sizes"],
                        "shape_dynamism": t.get("shape_dynamism", "STATIC")}
            return {"value": vi, "kind": v["val_type"], "val": v["val"]}

        out[plan["name"]] = {"inputs": [spec(i) for i in plan["inputs"]],
                             "outputs": [spec(i) for i in plan["outputs"]]}
    return out


def greedy(pte: Path, prompt_ids: List[int], decode_steps: int):
    """One prefill call with the whole prompt at input_pos 0, then `decode_steps` calls of one
    token each; greedy. Returns generated ids (1 + decode_steps), per-step logits, top-2 margins,
    the calls made and the metadata methods' values."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    names = sorted(program.method_names)
    meta = L.run_metadata([n for n in names], program)
    fwd = program.load_method("forward")
    calls, gen, margins, rows = [], [], [], []
    pos = 0
    tokens = list(prompt_ids)
    for step in range(decode_steps + 1):
        out = fwd.execute([torch.tensor([tokens], dtype=torch.long), torch.tensor([pos], dtype=torch.long)])
        calls.append({"tokens": tokens, "input_pos": [pos], "output_shape": list(out[0].shape)})
        logits = out[0].reshape(-1, out[0].shape[-1])[-1].float()
        rows.append(logits.numpy().copy())
        top2 = torch.topk(logits, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(logits))
        gen.append(nxt)
        pos += len(tokens)
        tokens = [nxt]
    return gen, np.stack(rows).astype(np.float32), margins, calls, meta


def metadata_of_delegated(pte: Path) -> Dict[str, Any]:
    """The metadata methods hold no delegate: the pip runtime runs them from the Vulkan .pte."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    return L.run_metadata(sorted(program.method_names), program)


# ---------------------------------------------------------------------------------------------
# graph.txt


def fmt_plan_value(v: Dict[str, Any]) -> str:
    t, val = v["val_type"], v.get("val") or {}
    if t == "Tensor":
        s = f"Tensor<{val['scalar_type']}>[{', '.join(str(d) for d in val['sizes'])}] {val.get('shape_dynamism', 'STATIC')}"
        if val.get("data_buffer_idx", 0) > 0:
            s += f" constant(data_buffer_idx={val['data_buffer_idx']})"
        if val.get("allocation_info"):
            a = val["allocation_info"]
            s += f" planned(mem_id={a['memory_id']}, offset={a['memory_offset_low'] + (a.get('memory_offset_high', 0) << 32)})"
        if val.get("extra_tensor_info"):
            s += f" extra={json.dumps(val['extra_tensor_info'])}"
        return s
    if t in ("Int", "Bool", "Double"):
        return f"{t}({val.get(t.lower() + '_val', val)})"
    if t == "String":
        return f"String({json.dumps(val.get('string_val', ''))})"
    if t in ("IntList", "BoolList", "DoubleList", "TensorList", "OptionalTensorList"):
        return f"{t}{json.dumps(val.get('items', []))}"
    if t == "Null":
        return "Null"
    return f"{t}({json.dumps(val)})"


def program_section(name: str, pte: bytes, prog: Dict[str, Any]) -> List[str]:
    L_ = [f"== program testdata/vulkan/{name}/model.pte: {len(pte)} bytes, version {prog.get('version')}, "
          f"segment_base_offset={prog['_segment_base_offset']}, segments={len(prog.get('segments') or [])}, "
          f"named_data={len(prog.get('named_data') or [])}, constant_buffer={len(prog.get('constant_buffer') or [])}, "
          f"backend_delegate_data(inline)={len(prog.get('backend_delegate_data') or [])}, "
          f"mutable_data_segments={len(prog.get('mutable_data_segments') or [])}"]
    L_.append(f"methods: {', '.join(p['name'] for p in prog['execution_plan'])}")
    for plan in prog["execution_plan"]:
        ops = [f"{o['name']}.{o['overload']}" if o.get("overload") else o["name"] for o in plan.get("operators") or []]
        L_.append("")
        L_.append(f"-- plan {plan['name']}: inputs={plan['inputs']} outputs={plan['outputs']} values={len(plan['values'])} "
                  f"operators={ops} delegates={len(plan.get('delegates') or [])} "
                  f"non_const_buffer_sizes={plan.get('non_const_buffer_sizes')}")
        for vi, v in enumerate(plan["values"]):
            role = []
            if vi in plan["inputs"]:
                role.append(f"input{plan['inputs'].index(vi)}")
            if vi in plan["outputs"]:
                role.append(f"output{plan['outputs'].index(vi)}")
            L_.append(f"  value {vi}: {fmt_plan_value(v)}{' [' + ', '.join(role) + ']' if role else ''}")
        for ci, ch in enumerate(plan["chains"]):
            L_.append(f"  chain {ci}: inputs={ch.get('inputs')} outputs={ch.get('outputs')} "
                      f"instructions={len(ch['instructions'])}")
            for ii, ins in enumerate(ch["instructions"]):
                t, a = ins["instr_args_type"], ins["instr_args"]
                if t == "KernelCall":
                    L_.append(f"    [{ii}] KernelCall {ops[a['op_index']]} args={a['args']}")
                elif t == "DelegateCall":
                    d = plan["delegates"][a["delegate_index"]]
                    L_.append(f"    [{ii}] DelegateCall delegate_index={a['delegate_index']} ({d['id']}) args={a['args']}")
                else:
                    L_.append(f"    [{ii}] {t} {json.dumps(a)}")
        for di, d in enumerate(plan.get("delegates") or []):
            L_.append(f"  delegate {di}: id={d['id']} processed={d['processed']['location']}[{d['processed']['index']}] "
                      f"compile_specs={d.get('compile_specs', [])}")
        mutable = [vi for vi, v in enumerate(plan["values"]) if v["val_type"] == "Tensor"
                   and vi not in plan["inputs"] and vi not in plan["outputs"]
                   and v["val"].get("allocation_info") and v["val"].get("data_buffer_idx", 0) == 0]
        if plan.get("delegates"):
            L_.append(f"  planned non-input/non-output tensors of this plan (where KV-cache buffers would be if they "
                      f"lived outside the delegate): {mutable or 'none'}")
    return L_


def analysis_section(g: Dict[str, Any], cap: Optional[Dict[str, Any]], dargs: List[int], plan: Dict[str, Any]) -> List[str]:
    vals = g["values"]
    A = ["-- analysis (derived from the VkGraph above and, where noted, from the ExportedProgram the Vulkan "
         "preprocess built it from)"]
    # State: const tensors that also got a mem_obj_id are the delegated subgraph's buffers.
    state = [vi for vi, v in enumerate(vals) if v.get("value_type") == "VkTensor"
             and v["value"]["constant_id"] >= 0 and v["value"]["mem_obj_id"] >= 0]
    users = collections.defaultdict(list)
    for ci, call in enumerate(g["chain"]):
        for ai, a in enumerate(call["args"]):
            users[a].append((ci, call["name"], ai))
    A.append("KV cache / mutable state: the plan passes NO cache tensors to the delegate (DelegateCall args = "
             f"{dargs}: the tokens, the position, the logits). The caches are VkGraph tensors with constant_id >= 0 "
             "(initial value = the constant's bytes, zeros) AND a mem_obj_id (the exporter's buffer placeholders; "
             "the Vulkan runtime ignores mem_obj_id for constants and makes them TensorRefs). "
             "sdpa_with_kv_cache's implementation prepacks k_cache/v_cache TensorRefs into GPU tensors once at init "
             "(prepack_standard, TEXTURE_3D width-packed) and updates them in place at [start_pos, start_pos+seq_len) "
             "on every execute, so the cache persists across calls inside the delegate; no cache update is written "
             "back to the plan.")
    for vi in state:
        v = vals[vi]["value"]
        c = g["constants"][v["constant_id"]]
        A.append(f"  %{vi} {V.fmt_value(g, vi)} named_key={c.get('named_key')} length={c['length']} used by "
                 + ", ".join(f"chain[{ci}] {nm} arg{ai}" for ci, nm, ai in users[vi]))
    # SymInts
    syms = [vi for vi, v in enumerate(vals) if v.get("value_type") == "SymInt"]
    prod = {call["args"][-1]: (ci, call["name"]) for ci, call in enumerate(g["chain"])}
    A.append("SymInt values (the serialized value is a placeholder 0; each is (re)computed at execute by the "
             "op that outputs it):")
    for vi in syms:
        p = prod.get(vi)
        src = f"produced by chain[{p[0]}] {p[1]}" if p else "not produced by any op"
        uses = [(ci, nm, ai) for ci, nm, ai in users[vi] if not (p and ci == p[0] and ai == len(g["chain"][ci]["args"]) - 1)]
        A.append(f"  %{vi} {src}; used by " + ", ".join(f"chain[{ci}] {nm} arg{ai}" for ci, nm, ai in uses))
    # Inputs
    A.append("Graph inputs (plan value -> VkGraph value; int64 plan tensors are int32 in the VkGraph, converted on copy):")
    for k, gi in enumerate(g["input_ids"]):
        A.append(f"  plan value {dargs[k]} {fmt_plan_value(plan['values'][dargs[k]])} -> %{gi} {V.fmt_value(g, gi)}; used by "
                 + ", ".join(f"chain[{ci}] {nm} arg{ai}" for ci, nm, ai in users[gi]))
    if cap is not None:
        rc = cap["program"].range_constraints
        used = set()
        for node in cap["node_to_value_ids"]:
            val = node.meta.get("val")
            for v in (val if isinstance(val, (list, tuple)) else [val]):
                if isinstance(v, torch.Tensor):
                    for d in v.shape:
                        if isinstance(d, torch.SymInt):
                            used |= {str(x) for x in d.node.expr.free_symbols}
                elif isinstance(v, torch.SymInt):
                    used |= {str(x) for x in v.node.expr.free_symbols}
        A.append("Symbols in the delegated ExportedProgram's values and their range_constraints (s*: tokens length, "
                 "a backed dynamic dim; u*: unbacked values read from the position tensor): "
                 + ", ".join(f"{k}: [{r.lower}, {r.upper}]" for k, r in rc.items() if str(k) in used)
                 + (" ; without a range entry: " + ", ".join(sorted(used - {str(k) for k in rc})) if used - {str(k) for k in rc} else "")
                 + ". The tokens length's lower bound 2 is torch.export's 0/1 specialization: the plan input is "
                 "DYNAMIC_BOUND [1, 31] and one-token decode calls run (the reference program takes them).")
    A.append("Dynamic sequence length at run time: the tokens input (%s) is resized to [1, T]; sym_size.int reads T "
             "into a SymInt; view_copy sizes are ValueLists mixing Int and that SymInt; every other activation "
             "dim that depends on T is stored at its upper bound (31) and resized by the ops. The position input "
             "(int32 [1]) becomes SymInts via et_vk.select_as_symint (index -1 and index 0: the same element); "
             "`add` makes start_pos + T, the end of the aten.slice_copy of the prepacked rope tables "
             "(freqs_cos/freqs_sin [256, 8], non-mutated buffers serialized as constants) and sdpa_with_kv_cache "
             "takes start_pos (its seq_len argument is a constant Int(1) that the Vulkan implementation ignores; "
             "the length comes from the query's dim -3). aten.select_copy.int(dim 1, index -1) keeps the last "
             "position only, so the output is [1, vocab]." % ", ".join("%" + str(i) for i in g["input_ids"][:1]))
    if any(c["name"] == "et_vk.linear_dq8ca_q4gsw.default" for c in g["chain"]):
        A.append("8da4w linears (et_vk.linear_dq8ca_q4gsw): activations quantized per token at run time by the "
                 "preceding torchao.choose_qparams_affine (ASYMMETRIC, int8 [-128, 127], block [1, 1, K]: one f32 "
                 "scale + one i8 zero point per row); weights = symmetric int4 in groups of group_size along K, "
                 "packed by backends/vulkan/patterns/weight_packing_utils.py pack_4bit_weight_tensor: u8[N, K/2], "
                 "byte = ((w[2j+1] + 8) << 4) | (w[2j] + 8); weight_scales f32[K/group_size, N] (transposed); "
                 "weight_sums i32[K/group_size, N] = per-group sums of the int4 values (for the activation "
                 "zero-point correction with integer accumulation). Padding (none at these sizes): K to a multiple "
                 "of 8 before packing, N of weight_sums to a multiple of 8, weight_scales' last dim to a multiple "
                 "of 4. The token embedding and the rest stay fp32.")
    return A


# ---------------------------------------------------------------------------------------------


def write_fixture(variant: str, tok, metadata: Dict[str, Any]) -> Dict[str, Any]:
    fixture, qmode = VARIANTS[variant]
    fdir = OUT_ROOT / fixture
    fdir.mkdir(parents=True, exist_ok=True)
    print(f"== {fixture} (qmode={qmode})")

    # 1. Vulkan-delegated program.
    CAPTURED.clear()
    t0 = time.time()
    vk_path = Path(L.export(config(variant, True, metadata)))
    pte = vk_path.read_bytes()
    if len(pte) > MAX_PTE:
        raise RuntimeError(f"{fixture}: {len(pte)} bytes > {MAX_PTE}")
    (fdir / "model.pte").write_bytes(pte)
    print(f"   vulkan export {time.time() - t0:.1f} s, {len(pte)} bytes, {len(CAPTURED)} VkGraph(s) built")

    prog = V.read_pte(pte)
    fwd = next(p for p in prog["execution_plan"] if p["name"] == "forward")
    op_names = [f"{o['name']}.{o['overload']}" if o.get("overload") else o["name"] for o in fwd.get("operators") or []]
    instr, kernels = collections.Counter(), collections.Counter()
    dcalls = []
    for ch in fwd["chains"]:
        for ins in ch["instructions"]:
            instr[ins["instr_args_type"]] += 1
            if ins["instr_args_type"] == "KernelCall":
                kernels[op_names[ins["instr_args"]["op_index"]]] += 1
            elif ins["instr_args_type"] == "DelegateCall":
                dcalls.append(ins["instr_args"]["args"])

    lines = [
        f"# testdata/vulkan/{fixture}/model.pte (generated by tools/export/export_vulkan_llm.py): the .pte's",
        "# execution plans, then every Vulkan delegate payload (VkGraph), then an analysis of state and dynamic shapes.",
        "# Plan value notation: Tensor<ScalarType>[sizes] shape_dynamism [constant|planned(mem_id, offset)].",
        "# VkGraph value notation: %id Kind(content). Tensor<dtype>[dims] const#constant_id|nonconst mem_obj=mem_obj_id",
        "# STORAGE/LAYOUT (staging=dtype only when it differs from dtype). VkTensor dims are UPPER BOUNDS for dynamic",
        "# dims (the export's max: tokens 31 = max_seq_len - 1); the runtime resizes them from the inputs' actual sizes.",
        "# Arg labels are the torch schema argument names (args = every schema argument incl. defaults, in order, then",
        "# the output; `add` is Python's operator.add on SymInts: a, b); Null stands for None and for",
        "# device/dtype/layout/memory_format arguments.",
        "# Flatbuffer enum codes: GraphTypes union tag NONE=0 Null=1 Int=2 Double=3 Bool=4 VkTensor=5 IntList=6",
        "#   DoubleList=7 BoolList=8 ValueList=9 String=10 SymInt=11; VkDataType (i8) BOOL=0 UINT8=1 INT8=2 INT32=3",
        "#   FLOAT16=4 FLOAT32=5 FLOAT64=6 INT64=7 UNSET=127; VkStorageType (u8) BUFFER=0 TEXTURE_3D=1 TEXTURE_2D=2",
        "#   DEFAULT_STORAGE=255; VkMemoryLayout (u8) TENSOR_WIDTH_PACKED=0 TENSOR_HEIGHT_PACKED=1",
        "#   TENSOR_CHANNELS_PACKED=2 ... DEFAULT_LAYOUT=255.",
        "# DelegateCall args (plan value ids) = the plan EValues for VkGraph input_ids in order, then output_ids in order.",
        "# The 'symbolic' section maps VkGraph values to the nodes of the ExportedProgram that the Vulkan preprocess",
        "# serialized (after its passes), with FakeTensor shapes in the export's symbols (s*: the tokens' length,",
        "# u*: values read from the position tensor).",
        "",
    ]
    lines += program_section(fixture, pte, prog)
    lines.append("")

    all_ops: collections.Counter = collections.Counter()
    delegates = []
    orig_schema = V.schema_arg_names
    for di, d in enumerate(fwd.get("delegates") or []):
        blob = V.delegate_blob(pte, prog, d["processed"])
        hdr = V.parse_vh_header(blob)
        g = V.read_vkgraph(blob, hdr)
        rows, cinfo = V.constant_rows(pte, prog, g, blob, hdr)
        cap = CAPTURED[di] if di < len(CAPTURED) else None
        if cap is not None:
            chain_names = [getattr(n.target, "__name__", str(n.target)) for n in cap["chain_nodes"]]
            if chain_names != [c["name"] for c in g["chain"]]:
                print(f"   NOTE: captured graph {di} does not match the serialized chain; no symbolic section")
                cap = None
        names = chain_schema_names(cap)
        V.schema_arg_names = lambda op, _n=names: _n.get(op) if op in _n else orig_schema(op)  # noqa: E731
        try:
            dump = V.graph_dump(
                f"delegate {di}: id={d['id']} processed={d['processed']['location']}[{d['processed']['index']}] "
                f"compile_specs={d.get('compile_specs', [])} DelegateCall args (plan value ids)={dcalls[di]}",
                g, hdr, rows)
        finally:
            V.schema_arg_names = orig_schema
        boundary = V.check_boundary(g, fwd, dcalls[di])
        lines += dump[:5] + ["DelegateCall boundary (plan EValue <-> VkGraph value):"] + boundary + dump[5:]
        lines += analysis_section(g, cap, dcalls[di], fwd)
        lines.append("")
        if cap is not None:
            lines.append(f"-- symbolic (VkGraph value <= ExportedProgram node <kind> FakeTensor/SymInt value)")
            lines += capture_rows(cap, g)
            lines.append("")
        ops = collections.Counter(c["name"] for c in g["chain"])
        all_ops.update(ops)
        arg_kinds = {}
        for c in g["chain"]:
            kinds = []
            for a in c["args"]:
                v = g["values"][a]
                kinds.append(v.get("value_type", "NONE"))
            arg_kinds.setdefault(c["name"], kinds)
        delegates.append({
            "index": di, "id": d["id"], "delegate_call_args": dcalls[di],
            "header": hdr, "num_values": len(g["values"]), "chain_length": len(g["chain"]),
            "input_ids": g["input_ids"], "output_ids": g["output_ids"],
            "operators": dict(sorted(ops.items())), "operator_arg_kinds": arg_kinds,
            "constants": len(cinfo),
            "constant_bytes": sum(c["length"] for c in cinfo),
        })
    (fdir / "graph.txt").write_text("\n".join(lines) + "\n")
    print(f"   {len(delegates)} delegate(s), vulkan ops {dict(sorted(all_ops.items()))}, "
          f"non-delegated kernels {dict(kernels)}")

    # 2. Goldens from the same model exported without the delegate: portable kernels, or, where
    # the pip runtime cannot run the portable program, the same export lowered to XNNPACK.
    prompt_ids = tok.encode(PROMPT).ids
    ref_kind, portable_failure = "portable", None
    ref_path = Path(L.export(config(variant, False, metadata)))
    ref_ops, _, _ = L.program_info(ref_path)
    try:
        gen, logits, margins, calls, meta = greedy(ref_path, prompt_ids, DECODE_STEPS)
    except RuntimeError as e:
        portable_failure = {
            "program_bytes": ref_path.stat().st_size,
            "operators": ref_ops,
            "error": str(e),
            "runtime_log": PORTABLE_FAILURE_NOTES.get(variant, ""),
        }
        print(f"   portable reference failed to run ({e}); using the XNNPACK-lowered export instead")
        ref_kind = "xnnpack"
        ref_path = Path(L.export(config(variant, False, metadata, xnnpack=True)))
        ref_ops, _, _ = L.program_info(ref_path)
        gen, logits, margins, calls, meta = greedy(ref_path, prompt_ids, DECODE_STEPS)
    ref = ref_path.read_bytes()
    np.save(fdir / "logits.npy", logits)
    vk_meta = metadata_of_delegated(fdir / "model.pte")
    print(f"   reference: {len(ref)} bytes, generated {gen}, min top-2 margin {min(margins):.4f}")
    print(f"   metadata methods of the Vulkan .pte equal the reference's: {vk_meta == meta}")

    # Is the reference program already committed?
    ref_sha = hashlib.sha256(ref).hexdigest()
    same_file = None
    for cand in [ROOT / "testdata/llm" / ("tiny" if ref_kind == "portable" else "tiny_xnnpack") / f"{variant}.pte"]:
        if cand.exists() and hashlib.sha256(cand.read_bytes()).hexdigest() == ref_sha:
            same_file = str(cand.relative_to(ROOT))
    if same_file is None:
        (fdir / "reference.pte").write_bytes(ref)
        ref_file = f"testdata/vulkan/{fixture}/reference.pte"
    else:
        ref_file = same_file
        if (fdir / "reference.pte").exists():
            (fdir / "reference.pte").unlink()
    gold_dir = "tiny" if ref_kind == "portable" else "tiny_xnnpack"
    committed = json.loads((ROOT / "testdata/llm" / gold_dir / "goldens.json").read_text())["variants"].get(variant)
    prefix_match = None
    if committed:
        c_ids = committed["prompts"]["short"]["generated_ids"]
        prefix_match = c_ids[: len(gen)] == gen
        print(f"   same ids as testdata/llm/{gold_dir}/goldens.json {variant}/short (first {len(gen)}): {prefix_match}")

    goldens = {
        "description": (
            f"tiny Llama (params below; random weights of export_llm.py's tiny target) exported by ExecuTorch's "
            f"LLM recipe with backend.vulkan.enabled=True, use_kv_cache, use_sdpa_with_kv_cache, "
            f"enable_dynamic_shape, dtype fp32{', quantization.qmode=8da4w group_size=32' if qmode else ''}. "
            "Goldens: greedy ids from executorch.runtime running the same export WITHOUT the Vulkan delegate."),
        "pte": "model.pte",
        "pte_bytes": len(pte),
        "tokenizer": "../../llm/tiny/tokenizer.json",
        "params": L.tiny_params(),
        "export_options": {
            "model_class": "llama3", "use_kv_cache": True, "use_sdpa_with_kv_cache": True,
            "enable_dynamic_shape": True, "dtype_override": "fp32", "max_seq_length": MAX_SEQ,
            "max_context_length": MAX_CTX, "backend.vulkan.enabled": True, "backend.vulkan.force_fp16": False,
            "quantization.qmode": qmode, "quantization.group_size": GROUP_SIZE if qmode else None,
            "vulkan_partitioner_options": {"require_dynamic_shapes": True, "force_fp16": False},
        },
        "methods": [p["name"] for p in prog["execution_plan"]],
        "method_specs": method_specs(prog),
        "metadata": meta,
        "metadata_of_vulkan_pte": vk_meta,
        "delegates": delegates,
        "vulkan_operators": dict(sorted(all_ops.items())),
        "non_delegated_kernel_calls": dict(sorted(kernels.items())),
        "instructions": dict(sorted(instr.items())),
        "golden_source": {
            "kind": ref_kind,
            "portable_failure": portable_failure,
            "program": ref_file,
            "program_sha256": ref_sha,
            "program_bytes": len(ref),
            "operators": ref_ops,
            "runtime": "executorch.runtime (pip): portable/optimized kernels, llama custom ops, quantized kernels"
                       + (", XNNPACK backend" if ref_kind == "xnnpack" else ""),
        },
        "prompt": PROMPT,
        "prompt_ids": prompt_ids,
        "decode_steps": DECODE_STEPS,
        "generated_ids": gen,
        "generated_ids_note": (
            "generated_ids[0] is the argmax of the prefill call's logits; generated_ids[k] (k >= 1) the argmax "
            "after decode call k, which fed generated_ids[k-1] at input_pos len(prompt_ids) + k - 1"),
        "generated_text": tok.decode(gen, skip_special_tokens=False),
        "top2_margins": margins,
        "min_top2_margin": min(margins),
        "calls": calls,
        "logits": "logits.npy",
        "same_ids_as_committed_llm_goldens": {"file": f"testdata/llm/{gold_dir}/goldens.json",
                                             "variant": variant, "prompt": "short",
                                             "first_n_equal": prefix_match},
        "versions": L.versions(),
    }
    (fdir / "goldens.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    print(f"   wrote {fdir}")
    return goldens


def write_eager_logits(variant: str, metadata: Dict[str, Any]) -> None:
    """eager_logits.npy: the committed goldens' calls (prompt, then one token a call, ExecuTorch's
    tokens fed back) on the recipe's eager model after its source transforms (quantization
    included), the model the exporter traced."""
    from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

    fdir = OUT_ROOT / VARIANTS[variant][0]
    goldens = json.loads((fdir / "goldens.json").read_text())
    model = _prepare_for_llama_export(config(variant, True, metadata)).model.eval()
    rows = []
    with torch.no_grad():
        for call in goldens["calls"]:
            out = model(torch.tensor([call["tokens"]], dtype=torch.long),
                        {"input_pos": torch.tensor(call["input_pos"], dtype=torch.long)})
            out = out[0] if isinstance(out, tuple) else out
            rows.append(out.reshape(-1, out.shape[-1])[-1].float().numpy())
    np.save(fdir / "eager_logits.npy", np.stack(rows).astype(np.float32))
    print(f"   wrote {fdir / 'eager_logits.npy'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--eager-only", action="store_true", help="write eager_logits.npy for the committed 8da4w fixture")
    args = ap.parse_args()
    L.load_custom_ops()
    V._load_custom_ops()
    install_capture()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(L.TINY_DIR / "tokenizer.json"))
    make_checkpoint(tok)
    metadata = {"get_bos_id": tok.token_to_id("<|im_start|>"), "get_eos_ids": [tok.token_to_id("<|endoftext|>")]}
    if args.eager_only:
        write_eager_logits("8da4w", metadata)
        return 0
    failed = []
    for v in args.variants:
        try:
            write_fixture(v, tok, metadata)
            if VARIANTS[v][1]:
                write_eager_logits(v, metadata)
        except Exception as e:  # keep going: report which variant failed
            import traceback

            traceback.print_exc()
            failed.append((v, repr(e)))
    for v, e in failed:
        print(f"FAILED {v}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
