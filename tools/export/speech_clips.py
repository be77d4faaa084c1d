"""Generate the speech test clips in testdata/speech/ with espeak-ng and sox.

espeak-ng writes 22050 Hz mono 16-bit WAV; sox converts rates/encodings with
its very-high-quality resampler (`rate -v`). Deterministic for a given
espeak-ng/sox version (recorded in testdata/speech/clips.json).

    /opt/etvenv/bin/python tools/export/speech_clips.py

LONG_CLIPS are long-form recordings (more than one 30 s Whisper window): sentences in
several voices and speeds with pauses, some sentences crossing the 30 s and 60 s window
edges. They are listed apart in clips.json ("long_clips") so the short-clip benchmark keeps
its set.
"""

import json
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "testdata" / "speech"

# name -> (segments, output rate, sox encoding args). A segment is a sentence (or a
# (sentence, voice, words per minute) tuple; default en-us at 150) or a float number of
# seconds of silence.
CLIPS = {
    "hello_16k": (["Hello world. This is a test of the speech recognition system."], 16000, ["-b", "16", "-e", "signed-integer"]),
    "gaps_16k": (["Turn on the lights.", 1.2, "Please open the window.", 0.8, "Thank you."], 16000, ["-b", "16", "-e", "signed-integer"]),
    "numbers_22k": (["The meeting starts at nine thirty, in room four hundred and twelve."], 22050, ["-b", "16", "-e", "signed-integer"]),
    "weather_44k": (["The weather today is sunny with a light breeze."], 44100, ["-b", "24", "-e", "signed-integer"]),
}


PCM16 = ["-b", "16", "-e", "signed-integer"]
# Six sentences with pauses in the first ~45 s (the long-form bug report's shape), then four
# more to ~70 s.
LONG_CLIPS = {
    "longform_16k": ([
        ("The committee met on Tuesday morning to review the budget for the coming year.", "en-us", 135), 1.5,
        ("Several members raised concerns about the rising cost of maintaining the old library building.", "en", 130), 2.0,
        ("After a long discussion, they agreed to ask the city council for additional funding.", "en-us", 150), 1.0,
        ("The proposal will be presented at the next public meeting in early March.", "en-us+m3", 130), 2.0,
        ("Residents are encouraged to attend and share their opinions with the board.", "en", 135), 1.6,
        ("The meeting ended shortly before noon, and lunch was served in the main hall.", "en-us", 140), 2.0,
        ("In the afternoon, a small group visited the new community garden near the river.", "en-us+f3", 150), 1.2,
        ("Volunteers have planted tomatoes, beans and sunflowers along the southern fence.", "en", 145), 0.6,
        ("Next spring, they hope to add a greenhouse and a workshop for local schools.", "en-us", 160), 0.8,
        ("Everyone is welcome to help on weekends, and no experience is needed.", "en-us", 155),
    ], 16000, PCM16),
}


def sentence(seg):
    return seg if isinstance(seg, str) else seg[0]


def run(cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def tool_version(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    return (out.stdout + out.stderr).strip().splitlines()[0]


def make(name, segments, rate, enc, tmp, dither=True):
    parts = []
    for i, seg in enumerate(segments):
        p = tmp / f"{name}_{i}.wav"
        if isinstance(seg, (str, tuple)):
            text, voice, wpm = (seg, "en-us", 150) if isinstance(seg, str) else seg
            run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(p), text])
        else:
            run(["sox", *([] if dither else ["-D"]), "-n", "-r", "22050", "-c", "1", "-b", "16", str(p), "trim", "0", str(seg)])
        parts.append(str(p))
    dst = OUT / f"{name}.wav"
    # sox dithers (randomly) when it writes 16-bit samples; -D makes the file repeatable.
    run(["sox", *([] if dither else ["-D"]), *parts, "-r", str(rate), "-c", "1", *enc, str(dst), "rate", "-v"])
    return dst, parts


def duration(path):
    out = subprocess.run(["soxi", "-D", path], check=True, capture_output=True, text=True)
    return float(out.stdout)


def make_long(meta, tmp):
    meta["long_clips"] = {}
    for name, (segments, rate, enc) in LONG_CLIPS.items():
        dst, parts = make(name, segments, rate, enc, tmp, dither=False)
        # Where each sentence lies (before resampling; the rate change keeps times).
        at, spans = 0.0, []
        for seg, part in zip(segments, parts):
            d = duration(part)
            if not isinstance(seg, float):
                spans.append({"start": round(at, 3), "end": round(at + d, 3), "text": sentence(seg)})
            at += d
        text = " ".join(s["text"] for s in spans)
        meta["long_clips"][name] = {"file": dst.name, "rate": rate, "duration_s": round(at, 3),
                                    "text": text, "sentences": spans}
        print(f"{dst.name}: {dst.stat().st_size} bytes, {at:.2f} s")
        for s in spans:
            print(f"   {s['start']:6.2f} - {s['end']:6.2f}  {s['text']}")


def main():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--long-only", action="store_true",
                   help="only (re)make LONG_CLIPS; the short clips and their entries stay")
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    if args.long_only:
        meta = json.loads((OUT / "clips.json").read_text())
        with tempfile.TemporaryDirectory() as t:
            make_long(meta, pathlib.Path(t))
        (OUT / "clips.json").write_text(json.dumps(meta, indent=1) + "\n")
        return
    meta = {
        "espeak-ng": tool_version(["espeak-ng", "--version"]),
        "sox": tool_version(["sox", "--version"]),
        "clips": {},
    }
    with tempfile.TemporaryDirectory() as t:
        tmp = pathlib.Path(t)
        for name, (segments, rate, enc) in CLIPS.items():
            dst, _ = make(name, segments, rate, enc, tmp)
            text = " ".join(sentence(s) for s in segments if not isinstance(s, float))
            meta["clips"][name] = {"file": dst.name, "rate": rate, "text": text}
            print(f"{dst.name}: {dst.stat().st_size} bytes")
        make_long(meta, tmp)
        # Reference for the resampler test: sox's very-high-quality 22050 -> 16000.
        ref = OUT / "numbers_22k_sox16k.wav"
        run(["sox", str(OUT / "numbers_22k.wav"), "-r", "16000", "-e", "floating-point", "-b", "32", str(ref), "rate", "-v"])
        meta["resample_reference"] = {"input": "numbers_22k.wav", "output": ref.name, "sox": "rate -v"}
    (OUT / "clips.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
