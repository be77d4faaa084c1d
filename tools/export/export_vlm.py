#!/usr/bin/env python3
"""A vision-language model (LLaVA 1.5's architecture) reduced to fixture size, exported with
ExecuTorch's own LLaVA recipe (executorch/examples/models/llava/export_llava.py: `export_all`),
with goldens from ExecuTorch's runtime.

The model is `transformers.LlavaForConditionalGeneration` built from a config with every size
shrunk and the architecture kept: a CLIP vision tower (patch 14, pre-LayerNorm, quick-GELU,
features from the second-to-last layer without the class token), LLaVA's two-layer GELU
projector, and a Llama text model (HF RoPE). Random weights (seeded), fan-in scaled so that the
logits are peaked. The text model's vocabulary is testdata/llm/tiny's tokenizer (512 ids).

ExecuTorch's recipe writes one program with three methods and `get_max_seq_len`:

* `vision_encoder(image: uint8[3, H, W]) -> float[1, 64, dim]`: H and W even and at most the
  crop size (112); the graph pads to 112×112 (zeros), rescales by 1/255, normalizes with
  CLIP's mean and std, and runs the tower and projector. XNNPACK, int8 static (PT2E) weights and
  activations.
* `token_embedding(tokens: int64[1, n]) -> float[1, n, dim]`: int8 per-group embedding.
* `text_decoder(embeddings: float[1, n, dim], input_pos: int64[1]) -> logits`: KV cache and
  sdpa_with_kv_cache, XNNPACK 8da4w (groups of 128).

The host resizes the image first (the example's `prepare_image`: torchvision's antialiased
bilinear resize of the uint8 image so that it fits in the 112×112 canvas), each side rounded
down to even (see `fit_size`).

Writes testdata/llm/vlm/:

* `llava.pte`, `tokenizer.json` (a copy of testdata/llm/tiny's); with `--portable` also
  `llava_portable.pte` (the same model, fp32, no quantization or delegate: `export_portable`)
  and its `goldens_portable.json`;
* `image_a.png`, `image_b.png`: two synthetic pictures of different aspect ratios;
* `image_a.u8`, `image_b.u8`: their resized uint8 [3, H, W] tensors as torchvision makes them
  (raw bytes; the shapes are in goldens.json), so that the model check does not depend on the
  resize;
* `resize_goldens.json` and `image_*_WxH.u8`: torchvision's resize of both pictures to a few
  more sizes (uint8 [3, H, W]), for the resize's own test;
* `goldens.json`: per image the prompt pieces' ids, the resized shape, the greedy ids of a
  step-by-step loop over `executorch.runtime` (text before the image, the image, the text
  after, then one token a call: what ExecuTorch's MultimodalPrefiller and TextTokenGenerator
  do), with each step's top-1 minus top-2 margin, at 1 and 2 threads, and the text that
  ExecuTorch's C++ `MultimodalRunner` streams for the same inputs.

    /opt/etvenv/bin/python tools/export/export_vlm.py [--portable] [--goldens-only]

Note: the recipe exports `token_embedding` with hint-based bounds, so its tokens input is
bounded by the example prompt's length (49 tokens here): ExecuTorch's runner fails on a longer
text piece, pteron feeds it in chunks.
"""

import json
import os
import shutil
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import export_llm as L  # noqa: E402

OUT = L.ROOT / "testdata" / "llm" / "vlm"
WORK = L.OUT_DIR / "vlm_work"
CROP = 112
MAX_SEQ, MAX_CTX = 192, 256
NEW_TOKENS = 40
SYSTEM = "A chat between a curious human and an artificial intelligence assistant. "
PROMPTS = {
    "image_a": ("USER: ", "\nWhat is in this picture? ASSISTANT:"),
    "image_b": ("USER: ", "\nDescribe the colours. ASSISTANT:"),
    # A question longer than token_embedding's bound: fed in chunks.
    # (No system prompt here: the whole context must fit in get_max_seq_len = 192 positions.)
    "image_a_long": ("USER: ", "\nLook at the picture closely and tell me what each region "
                     "holds and which colours meet at the edges. ASSISTANT:"),
}
# (width, height) of the synthetic pictures: landscape and portrait, neither a multiple of 14.
PICTURES = {"image_a": (200, 150), "image_b": (97, 160)}
# Extra resize cases (width, height) beside the fit-in-the-canvas one: a strong downscale, an
# aspect change, and an upscale.
RESIZE_CASES = {"image_a": [(31, 17), (112, 112)], "image_b": [(31, 17), (112, 112), (128, 183)]}


def tiny_llava(never, seed=11):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig
    from transformers import LlavaForConditionalGeneration

    vision = CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        image_size=CROP, patch_size=14, projection_dim=64, hidden_act="quick_gelu",
    )
    text = LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=512, rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=MAX_CTX, tie_word_embeddings=False,
    )
    cfg = LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=511,
        projector_hidden_act="gelu", vision_feature_select_strategy="default",
        vision_feature_layer=-2, image_seq_length=(CROP // 14) ** 2,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(cfg).eval()
    # Fan-in scaled weights: peaked logits, so that greedy steps are not near-ties.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn_like(p) * (2.5 / p.shape[1] ** 0.5))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.02 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * 0.5)
        # Pieces that are not UTF-8 on their own (ExecuTorch's Python runner bindings cannot
        # hand them to a `str` callback) and the special tokens get logit 0, below the best.
        model.lm_head.weight[never] = 0.0
    return model


def image_processor():
    from transformers import CLIPImageProcessor

    return CLIPImageProcessor(
        crop_size={"height": CROP, "width": CROP}, size={"shortest_edge": CROP},
        do_center_crop=True, rescale_factor=1 / 255,
    )


class TinyLlavaModel:
    """What ExecuTorch's `export_all` asks of `LlavaModel`, for the reduced config."""

    def __init__(self, hf, proc, prompt_before, example_image, prompt_after):
        from executorch.examples.models.llama.llama_transformer import construct_transformer
        from executorch.examples.models.llama.model_args import ModelArgs
        from executorch.examples.models.llama.source_transformation.custom_kv_cache import (
            replace_kv_cache_with_custom_kv_cache,
        )
        from executorch.examples.models.llama.source_transformation.sdpa import (
            replace_sdpa_with_custom_op,
        )
        from executorch.examples.models.llava.model import Llava

        self.max_seq_len, self.max_context_len = MAX_SEQ, MAX_CTX
        self.image_processor = proc
        self._inputs = (prompt_before, example_image, prompt_after)

        class TinyLlava(Llava):
            # Llava.__init__ hard-codes the 7B text model's sizes; the rest is ExecuTorch's.
            def __init__(self):
                torch.nn.Module.__init__(self)
                self.use_sdpa_with_kv_cache_op = True
                self.model_ = hf
                self.image_processor = proc
                self.vision_feature_layer = hf.config.vision_feature_layer
                self.vision_feature_select_strategy = hf.config.vision_feature_select_strategy
                tc = hf.config.text_config
                self.text_model_args = ModelArgs(
                    use_kv_cache=True, n_layers=tc.num_hidden_layers, dim=tc.hidden_size,
                    n_heads=tc.num_attention_heads, n_kv_heads=tc.num_key_value_heads,
                    vocab_size=tc.vocab_size, hidden_dim=tc.intermediate_size,
                    norm_eps=tc.rms_norm_eps, max_batch_size=1, ffn_dim_multiplier=1,
                    enable_dynamic_shape=True, use_sdpa_with_kv_cache_op=True,
                    use_hf_rope=True, max_context_len=MAX_CTX, max_seq_len=MAX_SEQ,
                )
                self.text_model = construct_transformer(self.text_model_args)
                self.text_model = replace_kv_cache_with_custom_kv_cache(self.text_model)
                self.text_model = replace_sdpa_with_custom_op(self.text_model)
                missing = self.text_model.load_state_dict(
                    self._translate_state_dict_for_text_model(), strict=False, assign=True
                )
                assert not [k for k in missing.missing_keys if "tok_embeddings" not in k
                            and "k_cache" not in k and "v_cache" not in k
                            and "freqs" not in k and "mask" not in k], missing

            # transformers 5 keeps the tower, projector and language model under `.model`
            # (the example reaches for them on the top module, as transformers 4 allowed).
            def embed_tokens(self, tokens):
                return self.model_.model.language_model.embed_tokens(tokens)

            def encode_images(self, images):
                inner = self.model_.model
                out = inner.vision_tower(images.to(dtype=self.model_.dtype),
                                         output_hidden_states=True)
                return inner.multi_modal_projector(self._feature_select(out).to(images.dtype))

        self.eager = TinyLlava().to(torch.float32).eval()

    def get_eager_model(self):
        return self.eager

    def get_inputs_for_prefill(self):
        return self._inputs

    def _get_image_dynamic_shapes(self):
        from torch.export import Dim

        h = 2 * Dim("_height", min=1, max=CROP // 2)
        w = 2 * Dim("_width", min=1, max=CROP // 2)
        return [{1: h, 2: w}]

    def _get_prompt_dynamic_shapes(self):
        from torch.export import Dim

        dim = Dim("token_dim", min=2, max=MAX_SEQ)
        return ({1: dim}, {0: 1})


def export_portable(model):
    """The same three methods without quantization or delegation (fp32, every op on the
    portable kernels), `token_embedding` bounded by get_max_seq_len: how a user who skips the
    recipe's quantizers would export it."""
    from torch.export import Dim, export
    from torch.nn.attention import SDPBackend

    from executorch.exir import (
        EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower,
    )
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass

    llava = model.get_eager_model()
    before, image, after = model.get_inputs_for_prefill()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.llava = llava

        def forward(self, images):
            return self.llava.image_embedding(images)

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.text_model = llava.text_model

        def forward(self, embeddings, input_pos):
            return self.text_model(None, {"input_pos": input_pos}, embeddings)

    class Embed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = llava.model_.model.language_model.embed_tokens

        def forward(self, tokens):
            return self.embed(tokens)

    with torch.nn.attention.sdpa_kernel([SDPBackend.MATH]), torch.no_grad():
        enc = export(Encoder(), (image,), dynamic_shapes=model._get_image_dynamic_shapes(),
                     strict=False)
        embeds = llava.prefill_embedding(before, image, after)
        dec = export(Decoder(), (embeds, torch.tensor([0], dtype=torch.long)),
                     dynamic_shapes=({1: Dim("token_dim", min=1, max=MAX_SEQ)}, None),
                     strict=True)
        tok = export(Embed(), (before,),
                     dynamic_shapes=[{1: Dim("token_dim_1", min=1, max=MAX_SEQ)}], strict=True)
    edge = to_edge_transform_and_lower(
        {"vision_encoder": enc, "token_embedding": tok, "text_decoder": dec},
        constant_methods={"get_max_seq_len": MAX_SEQ},
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    return edge.to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
        sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass(),
    ))


def picture(name, w, h):
    """A deterministic picture: gradients, a disc and stripes, with hard edges (what a resize
    with an antialiasing filter handles differently from a plain one)."""
    from PIL import Image

    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = (255 * x / max(w - 1, 1)).astype(np.float32)
    g = (255 * y / max(h - 1, 1)).astype(np.float32)
    b = 128 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)
    disc = (x - w * 0.4) ** 2 + (y - h * 0.55) ** 2 < (min(w, h) * 0.3) ** 2
    r[disc], g[disc], b[disc] = 250, 30, 40
    stripes = (x.astype(int) // 6) % 2 == 0
    band = (y > h * 0.8)
    g[band & stripes] = 255
    rgb = np.stack([r, g, b], axis=-1).clip(0, 255).astype(np.uint8)
    if name == "image_b":
        rgb = rgb[:, ::-1].copy()
    return Image.fromarray(rgb, "RGB")


def fit_size(w, h):
    """The example's `prepare_image` size (the largest that fits in the canvas with the
    picture's aspect), each side then rounded down to even: the recipe's dynamic image shape is
    `2 * Dim(...)`, and ExecuTorch's runtime fails on an odd side (the graph computes the pads
    from the halved size)."""
    ratio = max(h / CROP, w / CROP)
    oh, ow = int(h / ratio), int(w / ratio)
    return max(2, ow - ow % 2), max(2, oh - oh % 2)


def fit_resize(pic):
    import torchvision
    from torchvision.transforms.functional import pil_to_tensor

    w, h = fit_size(*pic.size)
    return torchvision.transforms.Resize(size=(h, w))(pil_to_tensor(pic))


def tokenize(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


def step_by_step(pte: Path, pieces, image_u8, threads):
    """ExecuTorch's multimodal runner loop on executorch.runtime: each input prefilled by its
    own text_decoder call (text through token_embedding, the image through vision_encoder),
    then one token a call through token_embedding and text_decoder; greedy."""
    from executorch.runtime import Runtime

    torch.set_num_threads(threads)
    L.load_custom_ops()
    if hasattr(torch.ops, "executorch") or True:
        try:
            from executorch.extension.pybindings import portable_lib

            portable_lib._unsafe_reset_threadpool(threads)
        except Exception:
            pass
    rt = Runtime.get()
    program = rt.load_program(str(pte))
    enc = program.load_method("vision_encoder")
    emb = program.load_method("token_embedding")
    dec = program.load_method("text_decoder")
    # token_embedding's tokens input is bounded (hint-based: the example prompt's length); a
    # longer text piece goes in chunks of that many tokens (ExecuTorch's runner would fail).
    bound = program.metadata("token_embedding").input_tensor_meta(0).sizes()[1]
    pos = 0
    logits = None
    embedding_head = None
    for kind, value in pieces:
        if kind == "image":
            e = enc.execute([torch.from_numpy(image_u8)])[0]
            embedding_head = [float(v) for v in e.reshape(-1)[:8]]
            parts = [e]
        else:
            parts = [emb.execute([torch.tensor([value[i:i + bound]], dtype=torch.long)])[0]
                     for i in range(0, len(value), bound)]
        for e in parts:
            logits = dec.execute([e, torch.tensor([pos], dtype=torch.long)])[0]
            pos += e.shape[1]
    gen, margins = [], []
    for _ in range(NEW_TOKENS):
        last = logits.reshape(-1, logits.shape[-1])[-1].float()
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        gen.append(nxt)
        e = emb.execute([torch.tensor([[nxt]], dtype=torch.long)])[0]
        logits = dec.execute([e, torch.tensor([pos], dtype=torch.long)])[0]
        pos += 1
    return gen, margins, pos, embedding_head


def et_multimodal_text(pte: Path, tokenizer: Path, before, image_u8, after):
    """Text streamed by ExecuTorch's C++ MultimodalRunner (greedy) for the same inputs."""
    try:
        from executorch.extension.llm.runner import (
            GenerationConfig, Image, MultimodalInput, MultimodalRunner,
        )
    except Exception as e:  # pragma: no cover
        return None, f"runner unavailable: {e}"
    c, h, w = image_u8.shape
    # The runner's Image holds planar [3, H, W] bytes (its prefiller wraps them as such).
    img = Image(image_u8.reshape(-1).tolist(), w, h, c)
    inputs = [MultimodalInput(before), MultimodalInput(img), MultimodalInput(after)]
    runner = MultimodalRunner(str(pte), str(tokenizer))
    cfg = GenerationConfig(echo=False, max_new_tokens=NEW_TOKENS, temperature=0.0,
                           num_bos=0, num_eos=0)
    pieces = []
    try:
        runner.generate(inputs, cfg, token_callback=pieces.append)
    except Exception as e:  # pragma: no cover
        return None, f"runner failed: {e}"
    return "".join(pieces), None


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--goldens-only", action="store_true",
                    help="keep llava.pte and the pictures; recompute goldens.json")
    ap.add_argument("--portable", action="store_true",
                    help="also llava_portable.pte (fp32, no delegate) and goldens_portable.json")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from torchvision.transforms.functional import pil_to_tensor
    import torchvision

    from executorch.examples.models.llava import export_llava as EL

    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    tok_path = OUT / "tokenizer.json"
    shutil.copy(L.TINY_DIR / "tokenizer.json", tok_path)
    tok = Tokenizer.from_file(str(tok_path))

    if args.goldens_only:
        resized = {
            name: np.fromfile(OUT / f"{name}.u8", dtype=np.uint8).reshape(3, *fit_size(*wh)[::-1])
            for name, wh in PICTURES.items()
        }
        write_goldens(OUT / "llava.pte", tok, tok_path, resized)
        if args.portable:
            write_goldens(OUT / "llava_portable.pte", tok, tok_path, resized,
                          "goldens_portable.json")
        return

    # Pictures, their resized tensors, and resize goldens.
    resized = {}
    resize_goldens = {}
    for name, (w, h) in PICTURES.items():
        pic = picture(name, w, h)
        pic.save(OUT / f"{name}.png")
        arr = fit_resize(pic).numpy().astype(np.uint8)
        arr.tofile(OUT / f"{name}.u8")
        resized[name] = arr
        full = pil_to_tensor(pic)
        cases = [{"width": int(arr.shape[2]), "height": int(arr.shape[1]), "file": f"{name}.u8"}]
        for (rw, rh) in RESIZE_CASES[name]:
            out = torchvision.transforms.Resize(size=(rh, rw))(full).numpy().astype(np.uint8)
            f = f"{name}_{rw}x{rh}.u8"
            out.tofile(OUT / f)
            cases.append({"width": rw, "height": rh, "file": f})
        resize_goldens[name] = {"png": f"{name}.png", "width": w, "height": h, "cases": cases}
    (OUT / "resize_goldens.json").write_text(json.dumps(resize_goldens, indent=1))

    # The model and its export through ExecuTorch's recipe.
    never = [i for i in range(tok.get_vocab_size()) if not L.valid_piece(tok, i)]
    never += [tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    hf = tiny_llava(never)
    proc = image_processor()
    before0, after0 = PROMPTS["image_a"]
    ids_before = torch.tensor([tokenize(tok, SYSTEM + before0)], dtype=torch.long)
    ids_after = torch.tensor([tokenize(tok, after0)], dtype=torch.long)
    example = torch.from_numpy(resized["image_a"])
    wrapper = TinyLlavaModel(hf, proc, ids_before, example, ids_after)
    pte = OUT / "llava.pte"
    cwd = os.getcwd()
    os.chdir(WORK)
    try:
        L.load_custom_ops()
        prog = EL.export_all(wrapper)
    finally:
        os.chdir(cwd)
    with open(pte, "wb") as f:
        prog.write_to_file(f)
    print(f"wrote {pte} ({pte.stat().st_size} bytes)")
    write_goldens(pte, tok, tok_path, resized)
    if args.portable:
        # export_all quantized the eager model in place: a fresh one (same seed, same weights).
        fresh = TinyLlavaModel(tiny_llava(never), proc, ids_before, example, ids_after)
        pte = OUT / "llava_portable.pte"
        with open(pte, "wb") as f:
            export_portable(fresh).write_to_file(f)
        print(f"wrote {pte} ({pte.stat().st_size} bytes)")
        write_goldens(pte, tok, tok_path, resized, "goldens_portable.json")


def embedding_bound(pte: Path) -> int:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    return program.metadata("token_embedding").input_tensor_meta(0).sizes()[1]


def write_goldens(pte, tok, tok_path, resized, out_name="goldens.json"):
    # Eager reference of the image embedding (the runtime's should be close: int8 encoder).
    goldens = {
        "crop": CROP, "max_seq_len": MAX_SEQ, "max_context_len": MAX_CTX,
        "new_tokens": NEW_TOKENS, "system": SYSTEM, "versions": L.versions(), "images": {},
    }
    for name, (before, after) in PROMPTS.items():
        arr = resized[name.removesuffix("_long")]
        system = "" if name.endswith("_long") else SYSTEM
        ids_b = tokenize(tok, system + before)
        ids_a = tokenize(tok, after)
        pieces = [("text", ids_b), ("image", None), ("text", ids_a)]
        runs = {}
        for threads in (1, 2):
            runs[threads] = step_by_step(pte, pieces, arr, threads)
        gen, margins, pos, head = runs[1]
        if max(len(ids_b), len(ids_a)) <= embedding_bound(pte):
            text, why = et_multimodal_text(pte, tok_path, system + before, arr, after)
        else:
            text, why = None, "a text piece longer than token_embedding's bound"
        decoded = tok.decode(gen, skip_special_tokens=False)
        goldens["images"][name] = {
            "png": f"{name.removesuffix('_long')}.png", "u8": f"{name.removesuffix('_long')}.u8",
            "shape": list(arr.shape),
            "text_before": system + before, "text_after": after,
            "ids_before": ids_b, "ids_after": ids_a, "image_tokens": (CROP // 14) ** 2,
            "greedy_ids": gen, "margins": margins, "positions": pos,
            "image_embedding_head": head,
            "same_ids_at_2_threads": runs[2][0] == gen,
            "ids_at_2_threads": runs[2][0],
            "et_multimodal_runner_text": text, "et_multimodal_runner_note": why,
            "decoded": decoded,
            "runner_matches_loop": text is not None and text == decoded,
        }
        if why:
            print("  runner:", why)
        print(name, arr.shape, "ids", gen[:12], "... min margin", min(margins),
              "2t same", runs[2][0] == gen, "runner==loop", text == decoded)
        if text != decoded:
            print("  runner:", repr(text)[:200])
            print("  loop:  ", repr(decoded)[:200])
    goldens["pte"] = pte.name
    (OUT / out_name).write_text(json.dumps(goldens, indent=1))


if __name__ == "__main__":
    main()
