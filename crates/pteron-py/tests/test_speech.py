"""Speech from Python: WAV reading, Silero VAD against ExecuTorch's probabilities and the
segments of silero-vad, and Whisper transcription on the random-weight fixture."""

import json
import wave

import numpy as np
import pytest

import pteron


def test_vad_matches_executorch(testdata):
    g = json.loads((testdata / "speech" / "vad_goldens.json").read_text())
    for clip, want in g["clips"].items():
        path = testdata / "speech" / f"{clip}.wav"
        probs = pteron.vad_probabilities(path)
        ref = np.asarray(want["executorch"], np.float32)
        assert probs.shape == ref.shape
        np.testing.assert_allclose(probs, ref, atol=1e-4)
        segs = pteron.vad(path)
        assert [(round(a * 16000), round(b * 16000)) for a, b in segs] == [tuple(s) for s in want["segments"]]


def test_vad_on_arrays_of_any_rate(testdata):
    path = testdata / "speech" / "gaps_16k.wav"
    samples, rate = pteron.read_wav(path)
    assert rate == 16000 and samples.dtype == np.float32
    from_file = pteron.vad(path)
    assert pteron.vad(samples, 16000) == from_file
    # Upsampled to 44.1 kHz, the same speech is found (within a frame).
    t = np.arange(int(len(samples) * 44100 / 16000)) / 44100
    up = np.interp(t, np.arange(len(samples)) / 16000, samples).astype(np.float32)
    segs = pteron.vad(up, 44100)
    assert len(segs) == len(from_file)
    for (a, b), (c, d) in zip(segs, from_file):
        assert abs(a - c) < 0.1 and abs(b - d) < 0.1
    with pytest.raises(pteron.AudioError):
        pteron.vad(samples)  # an array needs its rate


def test_bad_wav_raises_audio_error(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt ")
    with pytest.raises(pteron.AudioError):
        pteron.read_wav(bad)
    with pytest.raises(pteron.AudioError):
        pteron.vad(tmp_path / "missing.wav")


def test_transcriber_gives_executorchs_tokens_on_the_whisper_fixture(testdata):
    # Random weights (tokens < 128) and a tiny vocabulary: any tokenizer with 128 tokens or
    # more turns them into text; the tokens are what is compared.
    d = testdata / "speech" / "whisper_tiny_random"
    g = json.loads((d / "goldens.json").read_text())
    tok = testdata / "llm" / "tiny" / "tokenizer.json"
    t = pteron.Transcriber(d / "model.pte", tokenizer=tok, threads=1)
    samples, rate = pteron.read_wav(testdata / "speech" / f"{g['clip']}.wav")
    window = int(g["window_s"] * 16000)
    # One window decoded as the goldens were: no timestamps, no prompt, no fallback.
    plain = dict(without_timestamps=True, condition_on_previous_text=False, temperature_fallback=False)
    out = t.transcribe(samples[:window], rate, max_tokens=len(g["tokens"]), **plain)
    assert set(out) == {"text", "segments"}
    assert out["segments"][0]["tokens"] == g["tokens"]
    # Beam search, as the Rust test checks it.
    out = t.transcribe(
        samples[:window], rate, max_tokens=g["beam"]["max_tokens"], beam_size=g["beam"]["beam_size"], **plain
    )
    assert out["segments"][0]["tokens"] == g["beam"]["tokens"]
    # 9 s of audio: several windows, in order, covering the whole signal.
    long = np.tile(samples, int(np.ceil(9 * 16000 / len(samples))))[: 9 * 16000]
    out = t.transcribe(long, 16000, max_tokens=4, without_timestamps=True)
    starts = [s["start"] for s in out["segments"]]
    assert starts == sorted(starts) and starts[0] == 0.0 and len(starts) >= 4
    assert out["segments"][-1]["end"] == pytest.approx(9.0, abs=0.05)
    # The long-form loop (timestamps, prompt, fallback) on random weights: it ends, in order.
    out = t.transcribe(long, 16000, max_tokens=8)
    starts = [s["start"] for s in out["segments"]]
    assert starts == sorted(starts) and all(0 <= s["start"] <= s["end"] <= 9.05 for s in out["segments"])
    t.close()
    with pytest.raises(pteron.ClosedError):
        t.transcribe(samples, rate)
