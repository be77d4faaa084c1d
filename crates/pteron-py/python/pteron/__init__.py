"""pteron: run ExecuTorch programs (``.pte``) from Python, with numpy and without torch.

The API has the shape of ``executorch.runtime``, so code written for it switches by changing
the import::

    from pteron.runtime import Runtime          # was: from executorch.runtime import Runtime

    program = Runtime.get().load_program("model.pte")
    method = program.load_method("forward")
    outputs = method.execute([x])               # numpy arrays in, numpy arrays out
"""

from enum import IntEnum

from . import errors
from ._pteron import (
    BackendRegistry,
    Generation,
    Generator,
    Method,
    MethodMeta,
    OperatorRegistry,
    Program,
    Runtime,
    TensorInfo,
    Transcriber,
    __version__,
    vad,
    vad_probabilities,
)
from ._pteron import read_wav_file as read_wav
from .errors import (
    AudioError,
    ClosedError,
    ExecutionError,
    GenerationError,
    InputError,
    MethodNotFoundError,
    OperatorNotFoundError,
    ProgramError,
    PteronError,
    TokenizerError,
    UnsupportedError,
)


class Verification(IntEnum):
    """ExecuTorch's program verification levels, accepted by ``load_program`` for
    compatibility: pteron verifies every program fully, whichever is given."""

    Minimal = 0
    InternalConsistency = 1


def transcribe(model, audio, sample_rate=None, *, tokenizer=None, config=None, threads=None, **options):
    """Transcribes ``audio`` (a WAV path, or an array with its ``sample_rate``) with the
    Whisper program ``model``: ``Transcriber(model, ...).transcribe(audio, ...)`` in one call.
    Load a ``Transcriber`` once to transcribe several recordings."""
    t = Transcriber(model, tokenizer=tokenizer, config=config, threads=threads)
    try:
        return t.transcribe(audio, sample_rate, **options)
    finally:
        t.close()


__all__ = [
    "AudioError",
    "BackendRegistry",
    "ClosedError",
    "ExecutionError",
    "Generation",
    "Generator",
    "GenerationError",
    "InputError",
    "Method",
    "MethodMeta",
    "MethodNotFoundError",
    "OperatorNotFoundError",
    "OperatorRegistry",
    "Program",
    "ProgramError",
    "PteronError",
    "Runtime",
    "TensorInfo",
    "TokenizerError",
    "Transcriber",
    "UnsupportedError",
    "Verification",
    "__version__",
    "errors",
    "read_wav",
    "transcribe",
    "vad",
    "vad_probabilities",
]
