"""Peers nanotc is measured against, discovered at run time; only numpy is required.

    numpy    always (its BLAS, usually OpenBLAS; threads set in-process, see `threads`)
    torch    if importable (torch_peer)
    libxsmm  if its C driver builds against an installed libxsmm (libxsmm)
    blis     if libblis is found (blis); large GEMMs only

`discover(names)` loads the requested peers (all by default, or those in $NANOTC_BENCH_PEERS /
--peers, comma-separated) and records a note for each one that is missing or was left out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # submodules load lazily, so `python -m bench.peers.libxsmm` runs cleanly
    from bench.peers.blis import Blis
    from bench.peers.libxsmm import Libxsmm

NAMES = ("numpy", "torch", "libxsmm", "blis")


@dataclass
class Peers:
    """The peers available in this process, and a note per peer explaining its state."""

    torch: ModuleType | None = None
    libxsmm: Libxsmm | None = None
    blis: Blis | None = None
    notes: list[str] = field(default_factory=list)


def requested(names: Sequence[str] | None = None) -> tuple[str, ...]:
    if names is None:
        env = os.environ.get("NANOTC_BENCH_PEERS", "")
        names = [n.strip() for n in env.split(",") if n.strip()] or NAMES
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise ValueError(f"unknown peers {unknown} (known: {', '.join(NAMES)})")
    return tuple(n for n in NAMES if n in names)


def discover(names: Sequence[str] | None = None) -> Peers:
    from bench.peers import blis as blis_peer
    from bench.peers import libxsmm as libxsmm_peer
    from bench.peers import torch_peer

    wanted = requested(names)
    peers = Peers()
    peers.notes.append(f"numpy {np.__version__}: {_numpy_blas()}")
    if "torch" in wanted:
        found = torch_peer.load()
        if isinstance(found, str):
            peers.notes.append(f"torch: skipped, {found}")
        else:
            peers.torch = found
            peers.notes.append(f"torch {torch_peer.describe(found)}")
    if "libxsmm" in wanted:
        driver = libxsmm_peer.load()
        if isinstance(driver, str):
            peers.notes.append(f"libxsmm: skipped, {driver}")
        else:
            peers.libxsmm = driver
            peers.notes.append(f"libxsmm {driver.describe()}")
    if "blis" in wanted:
        blis = blis_peer.load()
        if isinstance(blis, str):
            peers.notes.append(f"blis: skipped, {blis}")
        else:
            peers.blis = blis
            peers.notes.append(f"blis {blis.describe()}")
    left_out = [n for n in NAMES if n not in wanted and n != "numpy"]
    if left_out:
        peers.notes.append(f"left out on request: {', '.join(left_out)}")
    return peers


def _numpy_blas() -> str:
    try:
        config = np.show_config(mode="dicts")  # type: ignore[call-arg]
        blas = config["Build Dependencies"]["blas"]
        return f"BLAS {blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        return "BLAS unknown"
