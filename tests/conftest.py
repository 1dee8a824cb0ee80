"""Session-wide test settings: the kernel cache and the tuning database live in a temporary
directory, so tests neither read a developer's tuned choices nor fill ~/.cache/nanotc, and
child processes (CLI tests) inherit the same directory.

Property tests (hypothesis) draw the same examples on every run, so a test run (and CI)
passes or fails reproducibly; `HYPOTHESIS_PROFILE=explore python -m pytest` draws fresh
examples each run, to look for new failures.

Ctrl-C is Python's KeyboardInterrupt in the tests and in their child processes, also where the
suite was started with SIGINT ignored (a shell's background job without job control), which
the Ctrl-C tests of the pool, the compiler and `nanotc tune` need."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def _private_kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    saved = os.environ.get("NANOTC_CACHE_DIR")
    os.environ["NANOTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("nanotc-cache"))
    yield
    if saved is None:
        os.environ.pop("NANOTC_CACHE_DIR", None)
    else:
        os.environ["NANOTC_CACHE_DIR"] = saved


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_raises() -> Iterator[None]:
    saved = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, saved)
