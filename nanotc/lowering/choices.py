"""Overrides of gemm lowering's analytical choices: register tiles and cache blocking.

Lowering names each gemm it tiles by a *signature* — the path it takes (direct register
tiles, batch-reduce tiles, packed blocks, or operands read in place in K blocks or row
panels), the element types, transposes, static shape and the vector registers its epilogue
reserves — and asks `CompileOptions` for a `GemmChoice` under that signature. Without one
(the default) the analytical models decide (`register_tile.choose`, `gemm_blocked.blocking`).
`nanotc tune` measures candidates and stores the winners in the tuning database
(`nanotc.tuning.database`), from which `nanotc.compile` builds the options of later compiles.

An override that does not fit the target (a tile whose registers spill, a blocking that is not
a whole number of tiles) is ignored, so a stale or hand-edited entry can cost speed but never
correctness.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nanotc.ir.instructions import Gemm
from nanotc.ir.types import ScalarType
from nanotc.lowering.register_tile import RegisterTile, TileModel, choose, fits
from nanotc.targets import Target

DIRECT = "direct"  # register tiles straight on the operands (gemm_tiles)
BATCH = "batch"  # batch-reduce tiles (batch_reduce)
BLOCKED = "blocked"  # packed cache blocks around register tiles (gemm_blocked)
K_BLOCKS = "kblocks"  # the direct path's tiles one K block at a time (gemm_in_place)
PANELS = "panels"  # row panels of A in place, in K blocks (gemm_in_place)


@dataclass(frozen=True)
class GemmSignature:
    """What a tuned choice applies to. Dynamic sizes are `None` (printed `?`): a choice for a
    dynamic shape applies to every size the kernel is launched with."""

    path: str
    types: tuple[str, str, str]  # element types of A, B, C
    trans: tuple[str, str]  # "n" or "t" for A and B
    shape: tuple[int | None, int | None, int | None]  # M, N, K
    reserved: int  # vector registers the epilogue keeps live (run-time alpha, beta)

    def key(self) -> str:
        """Stable text form, e.g. `direct f32,f32,f32 n.t 64x?x64 r1` (the database key)."""
        shape = "x".join("?" if s is None else str(s) for s in self.shape)
        return f"{self.path} {','.join(self.types)} {'.'.join(self.trans)} {shape} r{self.reserved}"


def signature(g: Gemm, path: str, shape: tuple[int | None, ...], reserved: int) -> GemmSignature:
    a, b, c = g.a.type.element, g.b.type.element, g.c.type.element
    m, n, k = shape
    return GemmSignature(
        path,
        (str(a), str(b), str(c)),
        (g.trans_a.value, g.trans_b.value),
        (m, n, k),
        reserved,
    )


@dataclass(frozen=True)
class GemmChoice:
    """A register tile (`mv` vectors by `nr` columns) and, for the blocked path, block sizes.
    ValueError unless the tile is two and the blocking three positive integers of usable sizes
    (numpy integers count; a tile or blocking that does not fit the target is ignored later)."""

    tile: tuple[int, int] | None = None
    blocking: tuple[int, int, int] | None = None  # mc, kc, nc

    def __post_init__(self) -> None:
        tile = _positive_ints(self.tile, 2, "tile")
        blocking = _positive_ints(self.blocking, 3, "blocking")
        if tile is not None and max(tile) > MAX_TILE_EXTENT:
            raise ValueError(f"tile {list(tile)}: no register file holds it")
        if blocking is not None:
            mc, kc, nc = blocking
            if (mc + nc) * kc > MAX_BLOCK_ELEMENTS:
                raise ValueError(f"blocking {list(blocking)}: its packed blocks are too large")
        object.__setattr__(self, "tile", tile)
        object.__setattr__(self, "blocking", blocking)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tile is not None:
            out["tile"] = list(self.tile)
        if self.blocking is not None:
            out["blocking"] = list(self.blocking)
        return out

    @staticmethod
    def from_json(data: Any) -> GemmChoice:
        """The choice a database record holds (the file may be edited by hand): ValueError
        where the constructor's checks fail, and for values JSON gives as other than lists."""
        if not isinstance(data, Mapping):
            raise ValueError(f"a record is a JSON object, not {type(data).__name__}")
        tile, blocking = data.get("tile"), data.get("blocking")
        for what, value in (("tile", tile), ("blocking", blocking)):
            if value is not None and not isinstance(value, list):
                raise ValueError(f"{what} is a list of positive integers, not {value!r}")
        return GemmChoice(tile, blocking)  # type: ignore[arg-type]

    def describe(self) -> str:
        parts = []
        if self.tile is not None:
            parts.append(f"tile {self.tile[0]}v x {self.tile[1]}")
        if self.blocking is not None:
            parts.append("blocks mc={} kc={} nc={}".format(*self.blocking))
        return ", ".join(parts) or "analytical"


MAX_TILE_EXTENT = 64  # vectors or columns of a register tile: more than any register file
MAX_BLOCK_ELEMENTS = 1 << 24  # packed A and B blocks (128 MiB of f64): far past every cache


def _positive_ints(value: Any, count: int, what: str) -> tuple[int, ...] | None:
    """`value` as a tuple of `count` Python ints, each positive (None for None or empty)."""
    if value is None or (isinstance(value, list | tuple) and len(value) == 0):
        return None
    try:
        items = list(value)
        numbers = tuple(operator.index(x) for x in items if not isinstance(x, bool))
    except TypeError:  # not a sequence, or an element that is no integer
        items, numbers = [], ()
    if len(numbers) != count or len(items) != count or min(numbers) <= 0:
        raise ValueError(f"{what} is {count} positive integers, not {value!r}")
    return numbers


@dataclass(frozen=True)
class CompileOptions:
    """Choices that override the analytical ones, by signature key (immutable, hashable)."""

    gemms: tuple[tuple[str, GemmChoice], ...] = ()

    @staticmethod
    def of(choices: Mapping[str, GemmChoice]) -> CompileOptions:
        return CompileOptions(tuple(sorted(choices.items())))

    def choice(self, sig: GemmSignature) -> GemmChoice | None:
        return self.get(sig.key())

    def get(self, key: str) -> GemmChoice | None:
        return next((c for k, c in self.gemms if k == key), None)

    def with_choice(self, key: str, choice: GemmChoice) -> CompileOptions:
        return CompileOptions.of({**dict(self.gemms), key: choice})

    def fingerprint(self) -> str:
        """Canonical text of every choice: part of the kernel cache's key."""
        return json.dumps({k: c.to_json() for k, c in self.gemms}, sort_keys=True)


DEFAULT_OPTIONS = CompileOptions()


def register_tile_for(
    options: CompileOptions,
    sig: GemmSignature,
    target: Target,
    element: ScalarType,
    extents: tuple[int | None, int | None, int | None],
    reserved: int,
    model: TileModel = choose,
) -> RegisterTile:
    """The override of `sig` when it fits the register file, else `model`'s tile for
    `extents` (what the model assumes of M, N, K: the blocked path tiles blocks of any size)."""
    m, n, k = extents
    whole = reads_whole_rows(sig.path)
    choice = options.choice(sig)
    if choice is not None and choice.tile is not None:
        mv, nr = choice.tile
        tile = RegisterTile(mv, nr, target.lanes(element))
        if fits(tile, target, reserved, m, whole):
            return tile
    rules = takes_small_gemm_rules(sig)
    return model(target, element, m, n, k, reserved, whole_rows=whole, small_gemm_rules=rules)


def takes_small_gemm_rules(sig: GemmSignature) -> bool:
    """Whether the tile model's rules for a small gemm's short K apply (`register_tile`'s
    `crowded` ties and `without_narrow_vector`): FMA tiles, whose A, B and C are of one type
    (bf16 tiles of `vdpbf16ps` steps ran 0.95-0.99x with the crowding rule on Zen 4: batches
    of 41x16x20, 44x7x18, 40x21x15), that store C after each gemm's K loop. Not batch-reduce
    tiles, which keep C in registers over the whole batch (f64 16^3 and 20x9x20 at the peak
    either way: 0.99x)."""
    return sig.path != BATCH and len(set(sig.types)) == 1


def reads_whole_rows(path: str) -> bool:
    """Whether the tiles of `path` read A in whole rows of mr, with no mask: packed panels
    (blocked) and row panels of A (panels; their first and last rows take tiles of their
    own). The masks of a run-time number of C's rows then live only in the epilogue
    (`register_tile.target_overhead`)."""
    return path in (BLOCKED, PANELS)


def blocking_override(
    options: CompileOptions, sig: GemmSignature, tile: RegisterTile
) -> tuple[int, int, int] | None:
    """The (mc, kc, nc) override of `sig` when it is whole tiles (mc by mr, nc by nr)."""
    choice = options.choice(sig)
    if choice is None or choice.blocking is None:
        return None
    mc, kc, nc = choice.blocking
    whole = mc % tile.mr == 0 and nc % tile.nr == 0
    return (mc, kc, nc) if whole else None
