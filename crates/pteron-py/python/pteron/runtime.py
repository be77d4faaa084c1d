"""``executorch.runtime``'s names, from pteron: ``from pteron.runtime import Runtime``."""

from . import Method, MethodMeta, Program, Runtime, TensorInfo, Verification

__all__ = ["Method", "MethodMeta", "Program", "Runtime", "TensorInfo", "Verification"]
