"""Fixtures of the tool tests (AOT, cache, recipes, tuning, CLI, interop)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator seeded from the test's id, so every test draws its own stable data."""
    seed = sum(ord(c) * 31**i for i, c in enumerate(request.node.nodeid)) % 2**32
    return np.random.default_rng(seed)
