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
    Method,
    MethodMeta,
    OperatorRegistry,
    Program,
    Runtime,
    TensorInfo,
    __version__,
)
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


__all__ = [
    "AudioError",
    "BackendRegistry",
    "ClosedError",
    "ExecutionError",
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
    "UnsupportedError",
    "Verification",
    "__version__",
    "errors",
]
