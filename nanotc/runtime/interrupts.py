"""Ctrl-C held back from code that a KeyboardInterrupt between two statements would break.

CPython raises KeyboardInterrupt in the main thread at the next bytecode after SIGINT
arrives, which may be in the middle of llvmlite's bindings: `OutputString.close` disposes
its string and only then forgets the pointer, so an interrupt between the two frees it twice
and the process aborts (`free(): double free detected`). The thread pool's start and stop
likewise leave workers running, or a pool that no longer matches its threads, when the
interrupt lands after the native call but before Python records what it did. Inside
`uninterrupted`, a SIGINT is noted and raised as KeyboardInterrupt once the block is done.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Runs the block with SIGINT noted rather than raised; raises KeyboardInterrupt after it
    when one arrived (and the block raised nothing else). Only the main thread receives
    KeyboardInterrupt, so elsewhere, or under a SIGINT handler of the program's own, or
    inside another such block, this changes nothing."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    arrived: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: arrived.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if arrived:
        raise KeyboardInterrupt


def uninterrupted(function: Callable[P, R]) -> Callable[P, R]:
    """`function` run inside `interrupts_held`."""

    @functools.wraps(function)
    def held(*args: P.args, **kwargs: P.kwargs) -> R:
        with interrupts_held():
            return function(*args, **kwargs)

    return held
