"""Generate the speech test clips in testdata/speech/ with espeak-ng and sox.

espeak-ng writes 22050 Hz mono 16-bit WAV; sox converts rates/encodings with
its very-high-quality resampler (`rate -v`). Deterministic for a given
espeak-ng/sox version (recorded in testdata/speech/clips.json).

    /opt/etvenv/bin/python tools/export/speech_clips.py
"""

import json
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "testdata" / "speech"

# name -> (segments, output rate, sox encoding args). A segment is a sentence
# or a float number of seconds of silence.
CLIPS = {
    "hello_16k": (["Hello world. This is a test of the speech recognition system."], 16000, ["-b", "16", "-e", "signed-integer"]),
    "gaps_16k": (["Turn on the lights.", 1.2, "Please open the window.", 0.8, "Thank you."], 16000, ["-b", "16", "-e", "signed-integer"]),
    "numbers_22k": (["The meeting starts at nine thirty, in room four hundred and twelve."], 22050, ["-b", "16", "-e", "signed-integer"]),
    "weather_44k": (["The weather today is sunny with a light breeze."], 44100, ["-b", "24", "-e", "signed-integer"]),
}


def run(cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def tool_version(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout + out.stderr).strip().splitlines()[0]


def make(name, segments, rate, enc, tmp):
    parts = []
    for i, seg in enumerate(segments):
        p = tmp / f"{name}_{i}.wav"
        if isinstance(seg, str):
            run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(p), seg])
        else:
            run(["sox", "-n", "-r", "22050", "-c", "1", "-b", "16", str(p), "trim", "0", str(seg)])
        parts.append(str(p))
    dst = OUT / f"{name}.wav"
    run(["sox", *parts, "-r", str(rate), "-c", "1", *enc, str(dst), "rate", "-v"])
    return dst


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {
        "espeak-ng": tool_version(["espeak-ng", "--version"]),
        "sox": tool_version(["sox", "--version"]),
        "clips": {},
    }
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        for name, (segments, rate, enc) in CLIPS.items():
            dst = make(name, segments, rate, enc, tmp)
            text = " ".join(s for s in segments if isinstance(s, str))
            meta["clips"][name] = {"file": dst.name, "rate": rate, "text": text}
            print(f"{dst.name}: {dst.stat().st_size} bytes")
        # Reference for the resampler test: sox's very-high-quality 22050 -> 16000.
        ref = OUT / "numbers_22k_sox16k.wav"
        run(["sox", str(OUT / "numbers_22k.wav"), "-r", "16000", "-e", "floating-point", "-b", "32", str(ref), "rate", "-v"])
        meta["resample_reference"] = {"input": "numbers_22k.wav", "output": ref.name, "sox": "rate -v"}
    (OUT / "clips.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
