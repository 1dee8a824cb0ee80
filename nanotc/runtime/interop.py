"""Foreign arrays as numpy arrays without copies: torch tensors and any other producer of
DLPack (`__dlpack__`) or of the array interface (`__array_interface__`).

The result shares the producer's memory, so kernels read and write the tensor itself. DLPack
is preferred: it carries strides and keeps the producer alive for as long as the numpy array
lives. numpy's DLPack import has no bfloat16, so a torch bfloat16 tensor is viewed as int16
(same bits, no copy) and the numpy array is re-viewed as `ml_dtypes.bfloat16`. torch is never
imported here: a tensor's own module is used for that view.
"""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np


class InteropError(ValueError):
    """A foreign array that cannot be shared with native code (device memory, autograd, a
    lazy negation)."""


def is_ndarray(value: Any) -> bool:
    """Whether `value` is a numpy array, by its type: `isinstance` asks `__class__`, which
    an object can claim to be ndarray while holding no array memory."""
    return issubclass(type(value), np.ndarray)


def is_foreign_array(value: Any) -> bool:
    """Whether `value` is an array nanotc can view without copying (numpy's included)."""
    return (
        is_ndarray(value) or hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__")
    )


def as_ndarray(value: Any) -> np.ndarray | None:
    """A numpy view of `value`'s memory, or None if it is not an array of any known kind."""
    if is_ndarray(value):
        return value
    if isinstance(value, np.generic):  # immutable: its array is a copy, which no write may reach
        array = np.array(value)
        array.flags.writeable = False
        return array
    if hasattr(value, "__dlpack__"):
        return _from_dlpack(value)
    if hasattr(value, "__array_interface__"):
        return np.asarray(value)
    return None


def _from_dlpack(value: Any) -> np.ndarray:
    _check_torch_tensor(value)
    if _is_torch_bfloat16(value):
        torch = sys.modules["torch"]
        try:
            bits = value.view(torch.int16)
        except RuntimeError as e:
            raise InteropError(f"cannot share its memory ({e})") from None
        return _import(bits).view(ml_dtypes.bfloat16)
    return _import(value)


def _import(value: Any) -> np.ndarray:
    try:
        return np.from_dlpack(value)
    except (BufferError, TypeError, RuntimeError, ValueError) as e:
        raise InteropError(f"cannot share its memory ({e})") from None


def _check_torch_tensor(value: Any) -> None:
    """torch refuses to export these (or exports them wrongly); say what to do instead of
    repeating its message."""
    if not _is_torch_tensor(value):
        return
    if value.device.type != "cpu":
        raise InteropError(f"a tensor on device {value.device}: move it to the CPU first")
    if value.is_nested:
        raise InteropError("a nested tensor: only strided (dense) tensors share their memory")
    if value.layout != sys.modules["torch"].strided:
        raise InteropError(
            f"a tensor of layout {value.layout}: only strided (dense) tensors share their"
            " memory; pass tensor.to_dense()"
        )
    if value.requires_grad:
        raise InteropError("a tensor that requires grad: pass tensor.detach() (no copy)")
    # torch exports these bits as they are, but the tensor's values are their negation or
    # conjugate: a kernel would read and write the wrong values
    if value.is_neg():
        raise InteropError("a tensor with a lazy negation (is_neg): pass tensor.resolve_neg()")
    if value.is_conj():
        raise InteropError("a tensor with a lazy conjugation (is_conj): pass tensor.resolve_conj()")


def _is_torch_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _is_torch_bfloat16(value: Any) -> bool:
    return _is_torch_tensor(value) and value.dtype == sys.modules["torch"].bfloat16
