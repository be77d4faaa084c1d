"""Small tokenizer.json files of every model type, with assorted normalizers, pre-tokenizers,
post-processors and decoders, as seeds for the `tokenizer` fuzz target and its cargo test smoke
(testdata/security/tokenizers/). Trained on a few lines of text with the `tokenizers` package:

    /opt/etvenv/bin/python fuzz/make_tokenizer_seeds.py testdata/security/tokenizers
"""
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve coöperate — résumé, 東京 and Ünïcödé with emoji 😀!",
    "def f(x):\n    return x * 2  # tabs\tand spaces",
    "Numbers 12345 and 3.14159, URLs https://example.com/a?b=c.",
]


def save(tok, out, name):
    tok.save(str(out / f"{name}.json"))


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    special = ["<unk>", "<s>", "</s>", "[CLS]", "[SEP]", "[PAD]"]

    wp = Tokenizer(models.WordPiece(unk_token="<unk>"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(TEXT, trainers.WordPieceTrainer(vocab_size=120, special_tokens=special))
    wp.post_processor = processors.BertProcessing(("[SEP]", wp.token_to_id("[SEP]")), ("[CLS]", wp.token_to_id("[CLS]")))
    wp.decoder = decoders.WordPiece()
    save(wp, out, "wordpiece_bert")

    uni = Tokenizer(models.Unigram())
    uni.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "▁")])
    uni.pre_tokenizer = pre_tokenizers.Metaspace()
    uni.train_from_iterator(TEXT, trainers.UnigramTrainer(vocab_size=100, special_tokens=special, unk_token="<unk>"))
    uni.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                                       special_tokens=[("<s>", 1), ("</s>", 2)])
    uni.decoder = decoders.Metaspace()
    save(uni, out, "unigram_metaspace")

    wl = Tokenizer(models.WordLevel(unk_token="<unk>"))
    wl.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(), normalizers.Strip()])
    wl.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(), pre_tokenizers.Digits(individual_digits=True)])
    wl.train_from_iterator(TEXT, trainers.WordLevelTrainer(vocab_size=80, special_tokens=special))
    save(wl, out, "wordlevel_punct")

    bpe = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    bpe.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    bpe.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous")
    bpe.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=150, special_tokens=special,
                                                      initial_alphabet=[f"<0x{i:02X}>" for i in range(256)][:40]))
    bpe.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    save(bpe, out, "bpe_bytefallback")

    print("wrote", sorted(p.name for p in out.iterdir()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "testdata/security/tokenizers")
