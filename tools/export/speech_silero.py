"""Silero VAD (v5/v6, 16 kHz branch) as a plain PyTorch module.

Mirrors the TorchScript model shipped by the `silero-vad` package
(`silero_vad/data/silero_vad.jit`, `_model` submodule) so it can go through
torch.export: the per-call state is explicit instead of module attributes.

One call consumes 576 samples: the last 64 samples of the previous chunk
(the "context"; zeros on the first call) followed by a 512-sample chunk, and
the LSTM state [2, 1, 128] (h, c). It returns the speech probability [1, 1]
and the new state. The caller keeps the context, as the package's wrapper does.
"""

import torch
from torch import nn
import torch.nn.functional as F

CHUNK = 512
CONTEXT = 64
HIDDEN = 128


class SileroVad16k(nn.Module):
    def __init__(self):
        super().__init__()
        # STFT as a strided conv1d with a stored real/imaginary basis (129 + 129 rows).
        self.register_buffer("stft_basis", torch.zeros(258, 1, 256))
        chans = [(129, 128, 1), (128, 64, 2), (64, 64, 2), (64, 128, 1)]
        self.convs = nn.ModuleList(nn.Conv1d(i, o, 3, stride=s, padding=1) for i, o, s in chans)
        self.rnn = nn.LSTMCell(HIDDEN, HIDDEN)
        self.out = nn.Conv1d(HIDDEN, 1, 1)

    def forward(self, x: torch.Tensor, state: torch.Tensor):
        # x: [1, 576] (context + chunk); state: [2, 1, 128].
        x = F.pad(x, (0, 64), mode="reflect").unsqueeze(1)
        spec = F.conv1d(x, self.stft_basis, stride=128)
        real, imag = spec[:, :129, :], spec[:, 129:, :]
        feats = torch.sqrt(real * real + imag * imag)
        for conv in self.convs:
            feats = F.relu(conv(feats))
        h, c = self.rnn(feats.squeeze(-1), (state[0], state[1]))
        prob = torch.sigmoid(self.out(F.relu(h.unsqueeze(-1))))
        prob = prob.squeeze(1).mean(dim=1, keepdim=True)
        return prob, torch.stack([h, c])

    @staticmethod
    def from_jit(path):
        jit = torch.jit.load(str(path), map_location="cpu")
        sd = {k: v for k, v in jit.state_dict().items() if k.startswith("_model.")}
        m = SileroVad16k()
        mapping = {"stft_basis": "_model.stft.forward_basis_buffer",
                   "rnn.weight_ih": "_model.decoder.rnn.weight_ih",
                   "rnn.weight_hh": "_model.decoder.rnn.weight_hh",
                   "rnn.bias_ih": "_model.decoder.rnn.bias_ih",
                   "rnn.bias_hh": "_model.decoder.rnn.bias_hh",
                   "out.weight": "_model.decoder.decoder.2.weight",
                   "out.bias": "_model.decoder.decoder.2.bias"}
        for i in range(4):
            for p in ("weight", "bias"):
                mapping[f"convs.{i}.{p}"] = f"_model.encoder.{i}.reparam_conv.{p}"
        own = m.state_dict()
        assert set(own) == set(mapping), sorted(set(own) ^ set(mapping))
        m.load_state_dict({k: sd[v] for k, v in mapping.items()})
        return m.eval(), jit


def frames(audio):
    """Split 16 kHz audio into 512-sample chunks, zero-padding the last (as get_speech_timestamps)."""
    n = (len(audio) + CHUNK - 1) // CHUNK
    padded = torch.zeros(n * CHUNK)
    padded[: len(audio)] = audio
    return padded.view(n, CHUNK)


def run_module(fn, audio):
    """Per-frame probabilities of `fn(x[1,576], state) -> (prob, state)` over the audio."""
    state = torch.zeros(2, 1, HIDDEN)
    context = torch.zeros(1, CONTEXT)
    probs = []
    for chunk in frames(audio):
        x = torch.cat([context, chunk.view(1, CHUNK)], dim=1)
        prob, state = fn(x, state)
        context = x[:, -CONTEXT:]
        probs.append(float(prob.reshape(-1)[0]))
    return probs
