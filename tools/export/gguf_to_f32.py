#!/usr/bin/env python3
"""Rewrites a GGUF file with every tensor dequantized to F32 (metadata copied as is), so that
llama.cpp runs exactly the weights that `transformers` dequantizes from the same file, which
tools/export/export_llm.py exports to the fp32 .pte. Uses the `gguf` package's dequantizers.

    /opt/etvenv/bin/python tools/export/gguf_to_f32.py IN.gguf OUT.gguf
"""

import sys

import gguf
import numpy as np


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    reader = gguf.GGUFReader(src)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        # The writer adds the architecture and the GGUF.* header fields itself.
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:  # rewritten below
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    # The file type says which quantization most tensors have: now all F32.
    writer.add_key_value(gguf.Keys.General.FILE_TYPE, int(gguf.LlamaFileType.ALL_F32),
                         gguf.GGUFValueType.UINT32)
    tensors = []
    for t in reader.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        # GGUF lists dims fastest first; numpy shapes are the reverse.
        data = data.reshape([int(d) for d in reversed(t.shape)])
        tensors.append((t.name, data))
        writer.add_tensor(t.name, data, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {dst}: {len(tensors)} tensors, "
          f"{sum(d.nbytes for _, d in tensors) / 2**20:.1f} MiB of F32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
