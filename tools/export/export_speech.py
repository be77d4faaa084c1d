"""Speech models and goldens for pteron-audio.

    /opt/etvenv/bin/python tools/export/export_speech.py vad       # Silero VAD .pte + goldens (committed)
    /opt/etvenv/bin/python tools/export/export_speech.py features  # Whisper log-mel goldens (committed)

Subcommands write into testdata/speech/ (small, committed) or
tools/export/out/speech/ (big, on demand). Every golden is produced by
ExecuTorch's own runtime (executorch.runtime) and, where it exists, by the
reference package itself; the script fails if they disagree beyond tolerance.
"""

import argparse
import json
import pathlib
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from speech_common import CLIPS_16K, OUT, SPEECH, read_wav  # noqa: E402


def to_pte(module, inputs, methods=None):
    """torch.export + to_edge + to_executorch (portable kernels, no delegates) -> bytes."""
    from executorch.exir import EdgeCompileConfig, to_edge

    if methods is None:
        eps = torch.export.export(module, inputs, strict=False)
    else:
        eps = {name: torch.export.export(m, i, strict=False) for name, (m, i) in methods.items()}
    edge = to_edge(eps, compile_config=EdgeCompileConfig(_check_ir_validity=True))
    return edge.to_executorch().buffer


def cmd_vad(args):
    import silero_vad
    from executorch.runtime import Runtime
    from speech_silero import CONTEXT, HIDDEN, SileroVad16k, frames, run_module

    jit_path = pathlib.Path(silero_vad.__file__).parent / "data" / "silero_vad.jit"
    module, jit = SileroVad16k.from_jit(jit_path)
    example = (torch.zeros(1, 576), torch.zeros(2, 1, HIDDEN))
    pte = to_pte(module, example)
    dst = SPEECH / "silero_vad.pte"
    dst.write_bytes(pte)
    print(f"{dst}: {len(pte)} bytes")

    program = Runtime.get().load_program(pte)  # keeps reading `pte` in place: keep it alive
    method = program.load_method("forward")

    def et_call(x, state):
        prob, new_state = method.execute([x.contiguous(), state.contiguous()])
        return prob, new_state

    from importlib.metadata import version

    goldens = {"model": f"silero-vad {version('silero-vad')} silero_vad.jit, 16 kHz branch",
               "chunk": 512, "context": CONTEXT, "clips": {}}
    worst = 0.0
    for clip in CLIPS_16K:
        audio = torch.from_numpy(read_wav(SPEECH / f"{clip}.wav")[0])
        jit.reset_states()
        with torch.no_grad():
            pkg = [jit(c, 16000).item() for c in frames(audio)]
            eager = run_module(module, audio)
        et = run_module(et_call, audio)
        d_eager = float(np.abs(np.array(eager) - np.array(pkg)).max())
        d_et = float(np.abs(np.array(et) - np.array(pkg)).max())
        worst = max(worst, d_et)
        segments = silero_vad.get_speech_timestamps(audio, jit, sampling_rate=16000)
        print(f"{clip}: {len(pkg)} frames, |eager-package| {d_eager:.3g}, |executorch-package| {d_et:.3g}, segments {segments}")
        goldens["clips"][clip] = {
            "executorch": et,
            "package": pkg,
            "max_abs_executorch_vs_package": d_et,
            "segments": [[s["start"], s["end"]] for s in segments],
        }
    if worst > 1e-4:  # the acceptance bound for pteron too
        raise SystemExit(f"ExecuTorch and the package disagree by {worst}")
    (SPEECH / "vad_goldens.json").write_text(json.dumps(goldens) + "\n")


MEL_FRAMES_KEPT = 700  # the clips are < 7 s; frames after that are the constant floor


def whisper_features(audio):
    """transformers' WhisperFeatureExtractor (numpy, float64) on audio padded to 30 s -> [80, 3000]."""
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor()
    padded = np.zeros(fe.n_samples, np.float32)
    padded[: min(len(audio), fe.n_samples)] = audio[: fe.n_samples]
    return fe._np_extract_fbank_features(padded[None], "cpu")[0].astype(np.float32)


def cmd_features(args):
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor()
    meta = {"reference": "transformers WhisperFeatureExtractor (numpy path), 80 mels, 30 s window",
            "frames_kept": MEL_FRAMES_KEPT, "clips": {}}
    for clip in CLIPS_16K:
        audio = read_wav(SPEECH / f"{clip}.wav")[0]
        feats = whisper_features(audio)
        # The public __call__ (torch path when torch is installed) for comparison.
        call = fe(audio, sampling_rate=16000, return_tensors="np").input_features[0]
        floor = float(feats[:, MEL_FRAMES_KEPT:].min())
        assert float(feats[:, MEL_FRAMES_KEPT:].max()) == floor, "padded frames are not constant"
        np.save(SPEECH / f"mel_{clip}.npy", np.ascontiguousarray(feats[:, :MEL_FRAMES_KEPT]))
        meta["clips"][clip] = {"floor": floor, "max": float(feats.max()), "shape": list(feats.shape)}
        print(f"{clip}: {feats.shape}, max {feats.max():.4f}, floor {floor:.4f}, |numpy - __call__| {np.abs(call - feats).max():.2e}")
    (SPEECH / "mel_goldens.json").write_text(json.dumps(meta, indent=1) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("vad", help="Silero VAD .pte and per-frame goldens").set_defaults(fn=cmd_vad)
    sub.add_parser("features", help="Whisper log-mel goldens").set_defaults(fn=cmd_features)
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    args.fn(args)


if __name__ == "__main__":
    main()
