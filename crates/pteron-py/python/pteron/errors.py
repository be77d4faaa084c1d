"""The exceptions pteron raises. Every one is a ``PteronError``, itself a ``RuntimeError``
(what ExecuTorch's Python runtime raises), so code written for ExecuTorch keeps catching them."""

from typing import List, Optional, Sequence


class PteronError(RuntimeError):
    """Base class of every pteron error."""


class ProgramError(PteronError):
    """The file cannot be read, or is not a valid ``.pte`` program (truncated, corrupt, hostile,
    or of an unsupported format version)."""


class MethodNotFoundError(PteronError, KeyError):
    """The program has no method of that name (also a ``KeyError``, as in ExecuTorch)."""

    def __init__(self, message: str, name: str = "") -> None:
        super().__init__(message)
        self.name = name

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OperatorNotFoundError(PteronError):
    """The program calls operators no kernel is registered for; ``ops`` names them all."""

    def __init__(self, message: str, ops: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.ops: List[str] = list(ops)


class UnsupportedError(PteronError):
    """A kernel or delegate backend refuses what the program asks of it at load (a dtype, a
    shape, a node type it does not implement). ``op`` names the operator or delegate."""

    def __init__(self, message: str, op: str = "") -> None:
        super().__init__(message)
        self.op = op


class InputError(PteronError, ValueError):
    """An input that does not fit the method: wrong count, dtype or shape. ``index`` is the
    input's position; ``expected`` and ``given`` the dtypes or shapes, where that was the
    problem. Also a ``ValueError``."""

    def __init__(
        self,
        message: str,
        index: Optional[int] = None,
        expected: object = None,
        given: object = None,
    ) -> None:
        super().__init__(message)
        self.index = index
        self.expected = expected
        self.given = given


class ExecutionError(PteronError):
    """A kernel or delegate failed while the method ran."""


class ClosedError(PteronError, ValueError):
    """The program, method or generator was closed."""


class TokenizerError(PteronError):
    """A tokenizer file or chat template that cannot be read or used."""


class GenerationError(PteronError):
    """The LLM runner could not go on: a program that is not an LLM export, a prompt that
    does not fit the context, ..."""


class AudioError(PteronError):
    """A WAV file or audio array that cannot be used, or a speech program of the wrong shape."""
