"""Tokenizer fixtures and goldens for pteron-llm's tiktoken and SentencePiece readers.

Writes testdata/llm/tokenizers/:
- sp_bpe.model      SentencePiece BPE (vocab 400, byte_fallback, identity normalization, extra
                    whitespace kept: Llama 2 style), with control symbols <|im_start|>, <|im_end|>;
- sp_bpe_nodummy.model  SentencePiece BPE as Gemma's: no dummy prefix, byte_fallback, identity
                    normalization, whitespace-only pieces, user-defined <sep>, <start_of_turn>,
                    <end_of_turn>;
- sp_unigram.model  SentencePiece Unigram (vocab 400, nmt_nfkc normalization: a precompiled
                    charsmap, extra whitespace removed), with a user-defined symbol <sep>;
- tiny.tiktoken     a tiktoken file (base64 token, rank) made from the tiny LLM's byte-level BPE
                    (testdata/llm/tiny/tokenizer.json): single bytes get ranks 0..255 by byte value,
                    then the merged tokens in their tokenizer.json id order;
  tiny.tiktoken.json  its sidecar: the pattern (Llama 3's) and special tokens;
- goldens.json      per tokenizer, the ids of varied strings from the reference library
                    (sentencepiece 0.2.x, tiktoken 0.14) and the decoded text (sentencepiece
                    decodes control pieces to nothing: compare with special tokens skipped;
                    tiktoken spells special tokens out).

Special tokens in text: tiktoken's encode(allowed_special="all"). For SentencePiece, control
pieces are matched in the text as Hugging Face transformers' (legacy) Llama tokenizer does
(sentencepiece itself would spell them out): the reference splits the text on them and encodes
each other segment with sentencepiece.

Run: /opt/etvenv/bin/python tools/export/export_tokenizers.py [--big]
(--big: the same tokenizers with ~thousands of strings into tools/export/out/tokenizers_big/, for
the ignored Rust test big_goldens.)
"""

import base64
import io
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "testdata/llm/tokenizers"
sys.path.insert(0, str(Path(__file__).resolve().parent))

LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TEXTS = [
    "",
    "Hello, world!",
    "Beautiful is better than ugly.",
    "  leading and   inner   spaces  ",
    "line one\nline two\n\n\nend\r\n",
    "tabs\tand\t\ttabs",
    "def f(x):\n    return x ** 2  # square\n",
    "3.14159 and 1234567890, 42%",
    "I'm sure they'll say it's done, we've seen 'em",
    "Unicode: naïve café, Ünïcödé, ﬁ ligature, ＦＵＬＬ width",
    "CJK: 你好，世界。日本語のテキスト",
    "emoji: 😀🎉👍🏽 and ❤️",
    "ends with spaces   ",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "a <sep> b<sep>c",
    "<start_of_turn>user\nhello  there<end_of_turn>\n",
    "x" * 40 + " " + "ab" * 20,
]


def tokenizer_corpus():
    from export_llm import tokenizer_corpus as corpus

    return corpus()


def train_spm(model_type: str, **kw) -> bytes:
    import sentencepiece as spm

    buf = io.BytesIO()
    lines = [line for doc in tokenizer_corpus() for line in doc.splitlines() if line.strip()]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        model_type=model_type,
        vocab_size=400,
        hard_vocab_limit=False,
        character_coverage=1.0,
        num_threads=1,
        minloglevel=2,
        **kw,
    )
    return buf.getvalue()


def big_texts():
    """Many more strings for --big: every docstring line of some stdlib modules (not the training
    corpus) and mixed-script/whitespace strings."""
    import importlib

    texts = []
    for name in ["os", "re", "email", "http.client", "unittest", "inspect", "typing", "decimal"]:
        mod = importlib.import_module(name)
        for obj in [mod, *vars(mod).values()]:
            doc = getattr(obj, "__doc__", None)
            if isinstance(doc, str):
                texts.extend(doc.splitlines())
                texts.append(doc[:400])
    extra = ["  \t\n x", "日本語 text ①②③ ｶﾀｶﾅ", "Ｈｅｌｌｏ　ｗｏｒｌｄ", "\u00e9\u0065\u0301",
             "🏳️‍🌈 family: 👨‍👩‍👧", "\r\n\r\n", "x" * 300, "1" * 50, "a  b   c    d"]
    texts.extend(extra)
    seen = set()
    return [t for t in texts if not (t in seen or seen.add(t))]


def spm_cases(model: bytes, specials: list):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    ids_of = {s: sp.piece_to_id(s) for s in specials}
    split = re.compile("(" + "|".join(re.escape(s) for s in specials) + ")") if specials else None
    cases = []
    for text in TEXTS:
        parts = split.split(text) if split else [text]
        ids = []
        for part in parts:
            if part in ids_of:
                ids.append(ids_of[part])
            elif part:
                ids.extend(sp.encode(part))
        cases.append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    # add_bos: the ids of one text with sentencepiece's BOS.
    bos = {"text": TEXTS[1], "ids": sp.encode(TEXTS[1], add_bos=True)}
    return cases, sp.get_piece_size(), bos


def add_spm(goldens: dict, name: str, model: bytes, specials: list) -> None:
    """Writes OUT/<name>.model and records its goldens (ids and text of every case)."""
    (OUT / f"{name}.model").write_bytes(model)
    cases, n, bos = spm_cases(model, specials)
    goldens["tokenizers"][name] = {
        "file": f"{name}.model",
        "vocab_size": n,
        "decode_skips_special": True,
        "with_bos": bos,
        "cases": cases,
    }


def tiny_ranks():
    """The tiny LLM's byte-level BPE vocabulary as tiktoken ranks (token bytes -> rank)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tj = json.loads((ROOT / "testdata/llm/tiny/tokenizer.json").read_text())
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    ranks = {bytes([b]): b for b in range(256)}
    specials = {t["content"] for t in tj["added_tokens"]}
    for tok, _ in sorted(tj["model"]["vocab"].items(), key=lambda kv: kv[1]):
        if tok in specials:
            continue
        raw = bytes(to_byte[c] for c in tok)
        if raw not in ranks:
            ranks[raw] = len(ranks)
    return ranks


def main():
    import sentencepiece
    import tiktoken

    global TEXTS, OUT
    big = "--big" in sys.argv
    if big:
        # Not committed: tools/export/out/tokenizers_big/ (the models are the same; the
        # ignored test big_goldens in crates/pteron-llm/tests/tokenizer_formats.rs reads it).
        TEXTS = TEXTS + big_texts()
        OUT = ROOT / "tools/export/out/tokenizers_big"

    OUT.mkdir(parents=True, exist_ok=True)
    goldens = {
        "sentencepiece_version": sentencepiece.__version__,
        "tiktoken_version": tiktoken.__version__,
        "tokenizers": {},
    }

    chat = ["<|im_start|>", "<|im_end|>"]
    bpe = train_spm(
        "bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        control_symbols=chat,
    )
    add_spm(goldens, "sp_bpe", bpe, chat)

    gemma = train_spm(
        "bpe",
        byte_fallback=True,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        user_defined_symbols=["<sep>", "<start_of_turn>", "<end_of_turn>"],
    )
    add_spm(goldens, "sp_bpe_nodummy", gemma, [])

    uni = train_spm("unigram", user_defined_symbols=["<sep>"])
    add_spm(goldens, "sp_unigram", uni, [])

    ranks = tiny_ranks()
    special = {"<|endoftext|>": len(ranks), "<|im_start|>": len(ranks) + 1, "<|im_end|>": len(ranks) + 2}
    with open(OUT / "tiny.tiktoken", "w") as f:
        for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(f"{base64.b64encode(tok).decode()} {rank}\n")
    (OUT / "tiny.tiktoken.json").write_text(
        json.dumps({"pattern": LLAMA3_PATTERN, "special_tokens": special, "bos_token": None}, indent=1) + "\n"
    )
    enc = tiktoken.Encoding("tiny", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special)
    cases = []
    for text in TEXTS:
        ids = enc.encode(text, allowed_special="all")
        cases.append({"text": text, "ids": ids, "decoded": enc.decode(ids)})
    goldens["tokenizers"]["tiny_tiktoken"] = {
        "file": "tiny.tiktoken",
        "vocab_size": enc.n_vocab,
        "decode_skips_special": False,
        "cases": cases,
    }

    (OUT / "goldens.json").write_text(json.dumps(goldens, indent=1, ensure_ascii=False) + "\n")
    for p in sorted(OUT.iterdir()):
        print(p.name, p.stat().st_size)


if __name__ == "__main__":
    main()
