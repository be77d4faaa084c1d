"""Shared helpers for the speech export scripts: WAV reading, paths."""

import pathlib
import wave

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEECH = ROOT / "testdata" / "speech"
OUT = ROOT / "tools" / "export" / "out" / "speech"
CLIPS_16K = ["hello_16k", "gaps_16k"]


def read_wav(path):
    """PCM 16/24-bit integer WAV -> (float32 mono samples in [-1, 1), rate). Int n-bit / 2^(n-1)."""
    with wave.open(str(path), "rb") as w:
        n, ch, width, rate = w.getnframes(), w.getnchannels(), w.getsampwidth(), w.getframerate()
        raw = w.readframes(n)
    if width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    else:
        raise ValueError(f"{path}: unsupported sample width {width}")
    return x.reshape(-1, ch).mean(axis=1).astype(np.float32), rate
