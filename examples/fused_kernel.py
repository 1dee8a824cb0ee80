"""The main job: compile the language reference's sample kernel for this machine, run it on
random data over many work-groups, check the result against numpy and print its speed.

    python examples/fused_kernel.py [--groups N] [--threads T]

Each work-group computes D[:,:,g] += alpha * (A[g] @ B^T) @ C: two small gemms fused in one
kernel, the intermediate in a stack buffer.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import nanotc

SOURCE = Path(__file__).with_name("fused_kernel.ir")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=100_000, help="number of work-groups")
    parser.add_argument("--threads", type=int, default=None, help="worker threads (all cores)")
    parser.add_argument("--repeat", type=int, default=20, help="timed launches")
    args = parser.parse_args()

    start = time.perf_counter()
    kernel = nanotc.compile(SOURCE.read_text(), name=str(SOURCE))["fused_kernel"]
    compile_ms = (time.perf_counter() - start) * 1e3

    rng = np.random.default_rng(0)
    groups = args.groups
    alpha = np.float32(0.5)
    A = np.asfortranarray(rng.standard_normal((16, 8, groups), dtype=np.float32))  # A[:,:,g]
    B = np.asfortranarray(rng.standard_normal((8, 8), dtype=np.float32))
    C = np.asfortranarray(rng.standard_normal((8, 16), dtype=np.float32))
    D = np.asfortranarray(rng.standard_normal((16, 16, groups), dtype=np.float32))

    expected = D + alpha * np.einsum("ikg,jk,jl->ilg", A, B, C, optimize=True)
    kernel(alpha, A, B, C, D, group_size=groups, num_threads=args.threads)
    error = np.max(np.abs(D - expected)) / np.max(np.abs(expected))
    ok = error < 1e-5
    print(f"check against numpy: max relative error {error:.1e} {'ok' if ok else 'FAILED'}")

    launch = kernel.prepare(alpha, A, B, C, D, group_size=groups, num_threads=args.threads)
    times = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        launch()
        times.append(time.perf_counter() - t)
    seconds = float(np.median(times))
    flops = groups * 2 * (16 * 8 * 8 + 16 * 16 * 8)
    bytes_moved = groups * 4 * (16 * 8 + 2 * 16 * 16)  # A read, D read and written
    print(
        f"fused_kernel: {groups} work-groups, compiled in {compile_ms:.0f} ms, "
        f"median {seconds * 1e3:.2f} ms: {flops / seconds / 1e9:.1f} GFLOP/s, "
        f"{bytes_moved / seconds / 1e9:.1f} GB/s of A and D traffic"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
