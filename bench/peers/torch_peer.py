"""torch as a peer (oneDNN/MKL GEMMs): imported only if installed; threads set per measurement.

torch tensors are row-major, nanotc's memrefs column-major. The workloads never copy: a
column-major matrix X seen through `torch.from_numpy(X).T` is the row-major X^T, so C = A B is
computed as C^T = B^T A^T on contiguous row-major views of the very same memory (same FLOPs,
same bytes, in place).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType


def load() -> ModuleType | str:
    """The torch module, or why it is not available."""
    try:
        import torch
    except ImportError as error:
        return f"not installed ({error})"
    except Exception as error:  # a broken install must not stop the benchmarks
        return f"import failed ({type(error).__name__}: {error})"
    return torch


def describe(torch: ModuleType) -> str:
    return f"{torch.__version__} ({torch.get_num_threads()} threads by default)"


@contextmanager
def threads(torch: ModuleType, count: int) -> Iterator[None]:
    """Run the body with torch's intra-op pool at `count` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
