#!/usr/bin/env python3
"""How far ExecuTorch's greedy tokens agree with themselves when only the floating-point
summation order inside ExecuTorch changes, for the LLM goldens of export_llm.py.

ExecuTorch's pip runtime computes the products of `llama::custom_sdpa` with MKL's sgemm (its
custom-ops library takes `sgemm_` from libtorch_cpu), whose kernels and summation order depend
on the CPU: AVX-512 on one machine, AVX2 on another. The fp32 model barely notices (logits move
by ~5e-5), but in a model with dynamically quantized activations (8da4w) a last-bit difference
in a float that is quantized next moves an int8 value by one step, and the layers amplify that
to logit differences of ~2 (SmolLM2-135M: 30 layers); where the top-2 gap of a greedy step is
smaller, the token differs. So ExecuTorch's own greedy ids for such a model are reproducible
only up to some step, and that step is the most any other runtime can be asked to match.

For each variant of goldens.json this reruns ExecuTorch's greedy loop (export_llm.py's
`greedy_with_et_runtime`, same .pte and prompt) in subprocesses with MKL told to use other
code paths (`MKL_ENABLE_INSTRUCTIONS=AVX2|AVX|SSE4_2`, `MKL_CBWR=COMPATIBLE`: environment
variables only MKL reads, when it loads) or another number of threads of its own
(`MKL_NUM_THREADS=1`: ExecuTorch's thread pool does not set it; MKL's one-row product orders
its sums differently across its threads from ~119 keys, et_sdpa_order.py --trees), and
records beside the golden's `generated_ids`:

    "et_self_agreement": {"runs": {"<env>": {"agree": n, "generated_ids": [...]}, ...},
                          "prefix": min n}

where `agree` is the number of leading ids equal to the golden's `generated_ids`. Two layouts:
export_llm.py's (one prompt, `variants.<name>.generated_ids`: every variant) and
export_families.py's (`variants.<name>.prompts.<prompt>.generated_ids`: the dynamically
quantized variants, since the fp32 ones do not move).

    /opt/etvenv/bin/python tools/export/llm_et_spread.py [DIR ...]   (default out/smollm2)

families.rs (full-width exports) and tiny.rs (SmolLM2) check pteron's ids up to `prefix`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = [
    {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    {"MKL_ENABLE_INSTRUCTIONS": "AVX"},
    {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    {"MKL_CBWR": "COMPATIBLE"},
    {"MKL_NUM_THREADS": "1"},
]


def worker(pte: str, prompt_ids: str, n: str):
    sys.path.insert(0, str(HERE))
    import export_llm as L

    L.load_custom_ops()
    gen, _, _ = L.greedy_with_et_runtime(Path(pte), json.loads(prompt_ids), int(n))
    print("IDS " + json.dumps(gen))


def spread(pte: Path, prompt, want):
    """The entry `et_self_agreement` for one program, prompt and golden ids."""
    runs = {}
    for extra in RUNS:
        env = dict(os.environ, **extra)
        label = ",".join(f"{k}={x}" for k, x in extra.items())
        res = subprocess.run(
            [sys.executable, __file__, "--worker", str(pte), json.dumps(prompt), str(len(want))],
            env=env, capture_output=True, text=True, check=True,
        )
        line = next(l for l in res.stdout.splitlines() if l.startswith("IDS "))
        ids = json.loads(line[4:])
        agree = next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), len(want))
        runs[label] = {"agree": agree, "generated_ids": ids}
        print(f"  [{label}]: agrees with the golden on the first {agree} of {len(want)}")
    return {"runs": runs, "prefix": min(r["agree"] for r in runs.values())}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:5])
        return
    outs = [Path(a) for a in sys.argv[1:]] or [HERE / "out" / "smollm2"]
    for out in outs:
        gold_path = out / "goldens.json"
        golden = json.loads(gold_path.read_text())
        for name, v in golden["variants"].items():
            if "prompts" not in v and "generated_ids" not in v:
                continue  # a GPU program checked against another variant's ids
            if "prompts" not in v:
                print(f"{out.name}/{name}")
                v["et_self_agreement"] = spread(out / v["pte"], golden["prompt_ids"],
                                                v["generated_ids"])
            elif v.get("qmode") or v.get("kv8"):
                for pname, p in v["prompts"].items():
                    print(f"{out.name}/{name}/{pname}")
                    p["et_self_agreement"] = spread(out / v["pte"], p["prompt_ids"],
                                                    p["generated_ids"])
            gold_path.write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {gold_path}")


if __name__ == "__main__":
    main()
