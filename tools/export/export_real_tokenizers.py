#!/usr/bin/env python3
"""The LLM families' real tokenizers, and goldens for pteron's tokenizer on them.

No model hub here: the vocabularies come from the vocab-only GGUF files that llama.cpp keeps in
its sources for its tokenizer tests, which the `llama-cpp-python` sdist on PyPI vendors
(vendor/llama.cpp/models/ggml-vocab-*.gguf, each with a `.inp` of test strings and a `.out` of
the ids the original Hugging Face tokenizer gives them):

* `qwen2`: Qwen's byte-level BPE (151,643 pieces + special tokens), the tokenizer of Qwen 2,
  Qwen 2.5 and Qwen 3 (Qwen 3.5 adds vision tokens to the same vocabulary);
* `llama-bpe`: Llama 3's byte-level BPE (128,000 pieces + 256 special tokens; Llama 3.x);
* `phi-3`: Phi-3's SentencePiece BPE (Llama 2's 32,000 pieces + Phi's chat tokens; LLaVA 1.5's
  text model uses Llama 2's).

transformers turns each GGUF vocabulary into a fast tokenizer (its GGUF loading path), saved as
tokenizer.json; for Llama 3 the script also writes the tiktoken file (`llama3.tiktoken`: base64
piece and rank per line, the format of Meta's `tokenizer.model`) from the same vocabulary.

Writes (not committed: 3-17 MB each) tools/export/out/real_tokenizers/<name>/tokenizer.json
(+ tokenizer_config.json) and tools/export/out/real_tokenizers/llama3.tiktoken; and (committed)
testdata/llm/tokenizers/real_goldens.json: per tokenizer and test string, transformers' ids
with that tokenizer.json (without added special tokens), its decoding of them, and for
llama.cpp's strings the ids it recorded from the original tokenizer (they differ once: Llama
3's "Cửa Việt", where the original's ranks merge "Việt" and the merges transformers
rebuilds from them do not). Checked by
crates/pteron-llm/tests/real_tokenizers.rs (ignored: needs the files above).

    /opt/etvenv/bin/python tools/export/export_real_tokenizers.py [--sdist llama_cpp_python-0.3.36.tar.gz]

Without --sdist the script downloads the pinned sdist from PyPI (the version in
requirements.txt).
"""

import argparse
import base64
import json
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tools" / "export" / "out" / "real_tokenizers"
GOLDENS = ROOT / "testdata" / "llm" / "tokenizers" / "real_goldens.json"
SDIST = ("https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521"
         "aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz")
NAMES = ["qwen2", "llama-bpe", "phi-3"]
SEP = "\n__ggml_vocab_test__\n"

# Beyond llama.cpp's test strings: chat-formatted text with each family's special tokens,
# code, numbers and scripts the test strings have little of.
EXTRA = [
    "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nHi! 你好<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat's 2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|user|>\nDescribe a cat.<|end|>\n<|assistant|>\n",
    "def f(x):\n    return x ** 2  # 1234567890\n\n\tprint(f(3.14159))",
    "Zürich, Ελληνικά, русский, עברית, العربية, हिन्दी, 日本語のテキスト, 한국어 🙂🚀 e\u0301",
    "   leading and trailing spaces   \n\n\n   ",
    "1,000,000.00 and 12345678901234567890 and 3.5e-10",
]


def extract(sdist: Path, work: Path):
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            name = Path(m.name).name
            if any(name.startswith(f"ggml-vocab-{n}.gguf") for n in NAMES):
                m.name = name
                tar.extract(m, work)


def llama3_tiktoken(tok, path: Path):
    """Meta's tiktoken format: one `base64(piece bytes) rank` line per BPE piece (ids below
    128000; the special tokens are not in the file)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    inv = {c: b for b, c in bytes_to_unicode().items()}
    vocab = tok.get_vocab()
    lines = []
    for piece, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        if i >= 128000:
            continue
        raw = bytes(inv[ch] for ch in piece)
        lines.append(f"{base64.b64encode(raw).decode()} {i}")
    path.write_text("\n".join(lines) + "\n")


def main():
    from transformers import AutoTokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--sdist", type=Path)
    args = ap.parse_args()
    work = OUT / "gguf"
    work.mkdir(parents=True, exist_ok=True)
    sdist = args.sdist
    if sdist is None:
        sdist = OUT / "llama_cpp_python-0.3.36.tar.gz"
        if not sdist.exists():
            urllib.request.urlretrieve(SDIST, sdist)
    extract(sdist, work)
    goldens = {"source": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/models", "tokenizers": {}}
    for name in NAMES:
        tok = AutoTokenizer.from_pretrained(str(work), gguf_file=f"ggml-vocab-{name}.gguf")
        tok.save_pretrained(str(OUT / name))
        inp = (work / f"ggml-vocab-{name}.gguf.inp").read_text().split(SEP)
        out = (work / f"ggml-vocab-{name}.gguf.out").read_text().rstrip("\n").split("\n")
        # The .inp ends with a separator: its last piece is empty and has no .out line.
        inp = inp[: len(out)]
        cases = []
        for text, want in zip(inp + EXTRA, out + [None] * len(EXTRA)):
            ids = tok.encode(text, add_special_tokens=False)
            cases.append({
                "text": text,
                "ids": ids,
                "decoded": tok.decode(ids, skip_special_tokens=False),
                "llama_cpp_ids": None if want is None else [int(x) for x in want.split()],
            })
        same = sum(1 for c in cases if c["llama_cpp_ids"] == c["ids"])
        print(f"{name}: {len(tok)} ids, {len(cases)} strings; transformers equals llama.cpp's "
              f"recorded ids on {same} of {len(out)}")
        goldens["tokenizers"][name] = {"vocab": len(tok), "cases": cases}
        if name == "llama-bpe":
            llama3_tiktoken(tok, OUT / "llama3.tiktoken")
    GOLDENS.write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {GOLDENS}")


if __name__ == "__main__":
    main()
