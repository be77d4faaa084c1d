"""Type stubs of pteron's extension module (the classes ``pteron`` re-exports)."""

import os
from typing import (
    Any,
    BinaryIO,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    TypedDict,
    Union,
)

from typing_extensions import Unpack

import numpy as np
import numpy.typing as npt

__version__: str

PathLike = Union[str, "os.PathLike[str]"]
ArrayLike = Any  # a numpy array, or anything numpy.asarray takes (torch tensors, lists, numbers)
Audio = Union[PathLike, npt.ArrayLike]

class OperatorRegistry:
    @property
    def operator_names(self) -> Set[str]: ...

class BackendRegistry:
    @property
    def registered_backend_names(self) -> List[str]: ...
    def is_available(self, backend_name: str) -> bool: ...

class Runtime:
    """Kernels, backends and threads: what programs are loaded with."""

    def __init__(self, *, threads: Optional[int] = None, portable: bool = False) -> None:
        """A runtime of its own. ``threads``: 0 or None for a thread per physical core (a pool
        shared by the process), 1 for the calling thread only, n for a pool of n.
        ``portable``: only the portable reference kernels (the oracle)."""
    @staticmethod
    def get() -> "Runtime":
        """The process's default runtime (every kernel and backend)."""
    def load_program(
        self,
        data: Union[PathLike, bytes, bytearray, memoryview, BinaryIO],
        *,
        verification: Any = None,
        data_path: Optional[PathLike] = None,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
    ) -> "Program":
        """Loads and verifies a ``.pte`` program (a path is memory-mapped; bytes are copied).
        ``data_path``: a ``.ptd`` file with tensors kept outside the program. Raises
        ``ProgramError`` for a file that is not a valid program."""
    @property
    def threads(self) -> int: ...
    @property
    def operator_registry(self) -> OperatorRegistry: ...
    @property
    def backend_registry(self) -> BackendRegistry: ...

class TensorInfo:
    """A declared tensor (ExecuTorch's ``TensorInfo``)."""

    def sizes(self) -> List[int]: ...
    def dtype(self) -> int:
        """ExecuTorch's ScalarType code (6: float32, 4: int64, 5: float16, 15: bfloat16, ...)."""
    def dim_order(self) -> List[int]: ...
    def is_memory_planned(self) -> bool: ...
    def nbytes(self) -> int: ...
    @property
    def numpy_dtype(self) -> Optional[str]:
        """The numpy dtype of the arrays this tensor takes and gives (bfloat16: float32)."""

class MethodMeta:
    """A method's name and declared inputs and outputs (ExecuTorch's ``MethodMeta``)."""

    def name(self) -> str: ...
    def num_inputs(self) -> int: ...
    def num_outputs(self) -> int: ...
    def input_tensor_meta(self, index: int) -> TensorInfo: ...
    def output_tensor_meta(self, index: int) -> TensorInfo: ...

class Method:
    """A loaded method. One execution at a time per method; methods run in parallel from
    several Python threads (the GIL is released while they run)."""

    def execute(self, inputs: Sequence[ArrayLike]) -> List[Any]:
        """Runs the method. Inputs: numpy arrays (any layout or byte order), or anything
        ``numpy.asarray`` takes; Python numbers for scalar inputs. Outputs: numpy arrays that
        own their memory (scalars as Python numbers). Raises ``InputError`` for a wrong count,
        dtype or shape."""
    def __call__(self, inputs: Sequence[ArrayLike]) -> List[Any]: ...
    @property
    def metadata(self) -> MethodMeta: ...
    def close(self) -> None: ...

class Program:
    """A verified program."""

    @property
    def method_names(self) -> Set[str]: ...
    def metadata(self, method_name: str) -> MethodMeta: ...
    def load_method(self, name: str, *, threads: Optional[int] = None) -> Method:
        """Loads a method (once; later calls return the same one unless ``threads`` is
        given). Raises ``MethodNotFoundError``, ``OperatorNotFoundError`` or
        ``UnsupportedError``."""
    def close(self) -> None: ...
    def __enter__(self) -> "Program": ...
    def __exit__(self, *args: object) -> None: ...

class Generation(Iterator[str]):
    """A running generation: iterate for the text pieces."""

    def __iter__(self) -> "Generation": ...
    def __next__(self) -> str: ...
    def close(self) -> None:
        """Stops after the current token."""
    @property
    def text(self) -> str: ...
    @property
    def tokens(self) -> List[int]: ...
    @property
    def stats(self) -> Optional[Dict[str, Any]]:
        """prompt_tokens, generated_tokens, time_to_first_token_s, prefill_tokens_per_s,
        decode_tokens_per_s, finish_reason."""

class GenerateOptions(TypedDict, total=False):
    """Keywords of ``Generator.generate`` and ``Generator.chat`` (defaults in brackets)."""

    max_new_tokens: int  # [128]
    temperature: float  # [0.0: greedy]
    top_k: int  # [0: off]
    top_p: float  # [1.0: off]
    min_p: float  # [0.0: off]
    repetition_penalty: float  # [1.0: off]
    seed: int  # [0]
    stop: Optional[Sequence[str]]  # strings that end the text (left out of it)
    skip_special: bool  # [True]

class Generator:
    """An ExecuTorch LLM program (``export_llm``, KV cache) and its tokenizer."""

    def __init__(
        self,
        program: Union[PathLike, Program],
        tokenizer: PathLike,
        *,
        threads: Optional[int] = None,
    ) -> None: ...
    def generate(self, prompt: str, **options: Unpack[GenerateOptions]) -> Generation:
        """A new context with ``prompt``; an iterator of the generated text pieces."""
    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        template: Optional[str] = None,
        **options: Unpack[GenerateOptions],
    ) -> Generation:
        """The assistant's answer to ``messages`` (the tokenizer's chat template, or
        ``template``), reusing the KV cache for the turns it already holds."""
    def encode(self, text: str, *, add_special: bool = True) -> List[int]: ...
    def decode(self, tokens: Sequence[int], *, skip_special: bool = True) -> str: ...
    @property
    def metadata(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...

class Transcriber:
    """Whisper transcription (an ExecuTorch Whisper export with encode/decode methods)."""

    def __init__(
        self,
        model: PathLike,
        *,
        tokenizer: Optional[PathLike] = None,
        config: Optional[PathLike] = None,
        threads: Optional[int] = None,
    ) -> None: ...
    def transcribe(
        self,
        audio: Audio,
        sample_rate: Optional[int] = None,
        *,
        beam_size: int = 1,
        max_tokens: int = 0,
        without_timestamps: bool = False,
        condition_on_previous_text: bool = True,
        temperature_fallback: bool = True,
        vad: bool = False,
    ) -> Dict[str, Any]:
        """``{"text": str, "segments": [{"start", "end", "text", "tokens"}, ...]}``."""
    def close(self) -> None: ...

def read_wav_file(path: PathLike) -> Tuple[npt.NDArray[np.float32], int]: ...
def vad(
    audio: Audio,
    sample_rate: Optional[int] = None,
    *,
    threshold: float = 0.5,
    min_speech_ms: int = 250,
    min_silence_ms: int = 100,
    speech_pad_ms: int = 30,
    model: Optional[PathLike] = None,
    threads: Optional[int] = None,
) -> List[Tuple[float, float]]: ...
def vad_probabilities(
    audio: Audio,
    sample_rate: Optional[int] = None,
    *,
    model: Optional[PathLike] = None,
    threads: Optional[int] = None,
) -> npt.NDArray[np.float32]: ...
