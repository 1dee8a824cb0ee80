"""Choosing the register tile of a GEMM nanokernel from the target description.

A tile is `mv` vectors (mr = mv * lanes rows) by `nr` columns: mv*nr accumulators, mv vectors
of A, one broadcast of B, the broadcasts of a run-time alpha and beta (the compiler hoists
them out of the K loop, so they stay live in it), and what the target needs on top (a lane
mask without k registers, a product temporary without FMA) must fit the vector register file
with nothing spilled (section 3.1 of the nanokernel paper). Among the tiles that fit, the
model picks the one with the fewest estimated cycles for the whole C, counting per k step of
each tile

    max(FMAs / FMA ports, FMA latency, loads / load ports)

(the latency term: a tile with few accumulators waits on its own dependency chains), and the
smaller kernels that cover the M and N remainders. Unknown (dynamic) sizes are assumed large.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from nanotc.ir.types import ScalarType
from nanotc.targets import Target

FMA_PORTS = 2
LOAD_PORTS = 2
FMA_LATENCY = 4
ASSUMED_EXTENT = 256  # stands in for a dynamic M, N or K


@dataclass(frozen=True)
class RegisterTile:
    mv: int
    nr: int
    lanes: int

    @property
    def mr(self) -> int:
        return self.mv * self.lanes

    def registers(self) -> int:
        """Accumulators, the A vectors and one B broadcast."""
        return self.mv * self.nr + self.mv + 1


def fits(tile: RegisterTile, target: Target, reserved: int = 0, dynamic_rows: bool = False) -> bool:
    overhead = target_overhead(target, tile, dynamic_rows)
    return tile.registers() + reserved + overhead <= target.vector_registers


def target_overhead(target: Target, tile: RegisterTile, dynamic_rows: bool) -> int:
    """Vector registers a target needs beside the tile: a temporary for the product where
    there is no fused multiply-add, and lane masks where masks are not in k registers (one
    for a static remainder, one per vector for a run-time one)."""
    masks = 0 if target.masked_memory else tile.mv if dynamic_rows else 1
    return int(not target.fma) + masks


def candidates(
    target: Target, element: ScalarType, m: int | None, reserved: int = 0
) -> list[RegisterTile]:
    """Tiles that fit beside `reserved` other live vector registers."""
    lanes = target.lanes(element)
    max_vectors = math.ceil((m or ASSUMED_EXTENT) / lanes)
    tiles = []
    for mv in range(1, min(max_vectors, 8) + 1):
        for nr in range(1, target.vector_registers):
            tile = RegisterTile(mv, nr, lanes)
            if fits(tile, target, reserved, dynamic_rows=m is None):
                tiles.append(tile)
    return tiles


def cycles_per_k(vectors: int, columns: int, k: int) -> float:
    """Cycles of one k step; the FMA latency bounds a chain only when there is one (k > 1)."""
    fmas = vectors * columns
    latency = FMA_LATENCY if k > 1 else 0
    return max(fmas / FMA_PORTS, latency, (vectors + columns) / LOAD_PORTS)


def estimate(tile: RegisterTile, m: int | None, n: int | None, k: int | None) -> float:
    """Estimated cycles for C (m x n) with depth k, including the remainder kernels."""
    m, n, k = (m or ASSUMED_EXTENT), (n or ASSUMED_EXTENT), (k or ASSUMED_EXTENT)
    total = 0.0
    for vectors, row_count in _tile_counts(
        m, tile.mr, tile.mv, lambda tail: -(-tail // tile.lanes)
    ):
        for columns, col_count in _tile_counts(n, tile.nr, tile.nr, lambda tail: tail):
            epilogue = vectors * columns  # one load/store pass over the tile of C
            total += row_count * col_count * (k * cycles_per_k(vectors, columns, k) + epilogue)
    return total


def _tile_counts(
    extent: int, step: int, full: int, tail_size: Callable[[int], int]
) -> list[tuple[int, int]]:
    """(tile size, how many) for the full tiles and the remainder tile along one dimension."""
    count, tail = divmod(extent, step)
    return [(full, count)] + ([(tail_size(tail), 1)] if tail else [])


def choose(
    target: Target,
    element: ScalarType,
    m: int | None,
    n: int | None,
    k: int | None,
    reserved: int = 0,
) -> RegisterTile:
    """The analytical choice; ties go to the larger tile (fewer, longer kernels)."""
    options = candidates(target, element, m, reserved)
    return min(options, key=lambda t: (estimate(t, m, n, k), -t.mv * t.nr))
