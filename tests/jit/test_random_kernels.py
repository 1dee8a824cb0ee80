"""Random well-defined kernels (subviews, collective instructions, allocas, loops, ifs,
elementwise foreach loops; see `kernel_gen`) run natively on a random target and with the
reference evaluator: every array argument must come out the same."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import TARGETS, check
from .kernel_gen import Kernel, kernels


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kernel=kernels(), target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_random_kernel_native_matches_reference(kernel: Kernel, target: str, seed: int) -> None:
    args = kernel.make_args(np.random.default_rng(seed))
    check(kernel.text, args, group_size=kernel.group_size, target=target, depth=64)
