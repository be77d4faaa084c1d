"""The LLM runner from Python: greedy tokens equal ExecuTorch's (the goldens of the Rust
tests), text streams as an iterator, chat, stats, cancellation and typed errors."""

import json
import threading

import pytest

import pteron


def goldens(testdata, name):
    d = testdata / "llm" / name
    return d, json.loads((d / "goldens.json").read_text())


def expected_tokens(ids, eos_ids):
    for i, t in enumerate(ids):
        if t in eos_ids:
            return ids[: i + 1]
    return ids


@pytest.mark.parametrize("fixture", ["tiny", "tiny_xnnpack"])
def test_greedy_tokens_match_executorch(testdata, fixture):
    d, g = goldens(testdata, fixture)
    tokenizer = d / g.get("tokenizer", "tokenizer.json")
    n = g["new_tokens"]
    checked = 0
    for name, v in g["variants"].items():
        gen = pteron.Generator(str(d / v["pte"]), tokenizer, threads=1)
        for pname, p in v["prompts"].items():
            assert gen.encode(p["prompt"]) == p["prompt_ids"]
            it = gen.generate(p["prompt"], max_new_tokens=n, skip_special=False)
            text = "".join(it)
            want = expected_tokens(p["generated_ids"], gen.metadata["eos_ids"])
            assert it.tokens == want, f"{name}/{pname}"
            if "generated_text" in p and len(want) == len(p["generated_ids"]):
                assert text == p["generated_text"], f"{name}/{pname}"
            assert text == it.text
            st = it.stats
            assert st["prompt_tokens"] == len(p["prompt_ids"])
            assert st["generated_tokens"] == len(want)
            checked += 1
        gen.close()
    assert checked >= 4


def test_stream_stop_and_stats(testdata):
    d, g = goldens(testdata, "tiny")
    p = g["variants"]["fp32"]["prompts"]["long"]
    program = pteron.Runtime.get().load_program(d / "fp32.pte")
    gen = pteron.Generator(program, d / "tokenizer.json")
    assert gen.metadata["max_context_len"] == g["max_context_len"]
    it = gen.generate(p["prompt"], max_new_tokens=64, skip_special=False)
    pieces = list(it)
    assert len(pieces) > 1 and "".join(pieces) == p["generated_text"]
    st = it.stats
    assert st["finish_reason"] == "max_new_tokens" and st["generated_tokens"] == 64
    assert st["decode_tokens_per_s"] > 0 and st["time_to_first_token_s"] > 0
    # A stop string ends the text right before it.
    stop = p["generated_text"][20:23]
    it = gen.generate(p["prompt"], max_new_tokens=64, stop=[stop], skip_special=False)
    assert it.text == p["generated_text"][: p["generated_text"].find(stop)]
    assert it.stats["finish_reason"] == "stop_string"


def test_sampling_is_seeded(testdata):
    d, _ = goldens(testdata, "tiny")
    gen = pteron.Generator(d / "fp32.pte", d / "tokenizer.json")
    a = gen.generate("Hello", max_new_tokens=20, temperature=0.8, top_p=0.9, seed=7).tokens
    b = gen.generate("Hello", max_new_tokens=20, temperature=0.8, top_p=0.9, seed=7).tokens
    c = gen.generate("Hello", max_new_tokens=20, temperature=0.8, top_p=0.9, seed=8).tokens
    assert a == b and a != c


def test_closing_an_iterator_cancels_and_the_generator_goes_on(testdata):
    d, g = goldens(testdata, "tiny")
    p = g["variants"]["fp32"]["prompts"]["short"]
    gen = pteron.Generator(d / "fp32.pte", d / "tokenizer.json")
    it = gen.generate(p["prompt"], max_new_tokens=200)
    next(it)
    it.close()
    rest = list(it)
    assert it.stats["finish_reason"] == "cancelled"
    assert len(rest) < 200
    del it
    # An abandoned iterator does not hold the model.
    abandoned = gen.generate(p["prompt"], max_new_tokens=200)
    next(abandoned)
    del abandoned
    it = gen.generate(p["prompt"], max_new_tokens=64, skip_special=False)
    assert it.tokens == expected_tokens(p["generated_ids"], gen.metadata["eos_ids"])


def test_chat_renders_the_template(testdata):
    d, _ = goldens(testdata, "tiny")
    gen = pteron.Generator(d / "fp32.pte", d / "tokenizer.json")
    msgs = [{"role": "user", "content": "Hi there"}]
    a = gen.chat(msgs, max_new_tokens=8)
    text = "".join(a)
    assert a.stats["prompt_tokens"] > 3 and text == a.text
    msgs += [{"role": "assistant", "content": text.strip()}, {"role": "user", "content": "More"}]
    b = gen.chat(msgs, max_new_tokens=8)
    assert b.stats["generated_tokens"] >= 1
    with pytest.raises(KeyError):
        gen.chat([{"content": "no role"}])


def test_generators_in_threads(testdata):
    d, g = goldens(testdata, "tiny")
    p = g["variants"]["fp32"]["prompts"]["short"]
    program = pteron.Runtime.get().load_program(d / "fp32.pte")
    want = expected_tokens(p["generated_ids"], [0])
    errors = []

    def work():
        try:
            gen = pteron.Generator(program, d / "tokenizer.json", threads=1)
            for _ in range(3):
                assert gen.generate(p["prompt"], max_new_tokens=64, skip_special=False).tokens == want
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


def test_typed_errors(testdata, tmp_path):
    d, _ = goldens(testdata, "tiny")
    with pytest.raises(pteron.TokenizerError):
        pteron.Generator(d / "fp32.pte", tmp_path / "missing.json")
    # Not an LLM export: no KV-cache metadata methods.
    with pytest.raises(pteron.GenerationError):
        pteron.Generator(testdata / "models" / "mlp" / "model.pte", d / "tokenizer.json")
    with pytest.raises(pteron.ProgramError):
        pteron.Generator(tmp_path / "missing.pte", d / "tokenizer.json")
    gen = pteron.Generator(d / "fp32.pte", d / "tokenizer.json")
    with pytest.raises(pteron.GenerationError):  # the prompt does not fit the context
        list(gen.generate("word " * 400, max_new_tokens=4))
    with pytest.raises(TypeError):
        gen.generate("Hello", max_tokens=4)  # the keyword is max_new_tokens
    gen.close()
    with pytest.raises(pteron.ClosedError):
        gen.generate("Hello")
