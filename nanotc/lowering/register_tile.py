"""Choosing the register tile of a GEMM nanokernel from the target description.

A tile is `mv` vectors (mr = mv * lanes rows) by `nr` columns: mv*nr accumulators, the
operands of one k step (mv vectors of A and one broadcast of B, or, for a tile with fewer
columns than vectors on a target whose FMAs take no broadcast from memory, nr broadcasts and
one vector of A: `holds_b_columns`), the broadcasts of a run-time alpha and beta (the
compiler hoists them out of the K loop, so they stay live in it), and what the target needs
on top (a lane mask without k registers, a product temporary without FMA) must fit the
vector register file with nothing spilled (section 3.1 of the nanokernel paper). Among the
tiles that fit, the model picks the one with the fewest estimated cycles for the whole C,
counting per k step of each tile

    max(FMAs / FMA ports, FMA latency, loads / load ports, bytes of A / L2 bandwidth)

(the latency term: a tile with few accumulators waits on its own dependency chains; the last
term only where A does not fit L1, as every column of tiles reads it again), and the smaller
kernels that cover the M and N remainders. Unknown (dynamic) sizes are assumed large.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

from nanotc.ir.types import ScalarType
from nanotc.targets import Target

FMA_PORTS = 2
LOAD_PORTS = 2
FMA_LATENCY = 4
ASSUMED_EXTENT = 256  # stands in for a dynamic M, N or K
MIN_COLUMNS_FOR_HEIGHT = 4
FULL_UNROLL_K = 2  # a static K up to this is unrolled completely (`nanokernel.k_unroll`)
SINGLE_TILE_UNROLL_K = 16  # ... and up to this when the tile is all of C
CROWDED_MAX_K = 24  # the K of a small gemm up to which crowded tiles are avoided (`crowded`)
NARROW_SPLIT_MAX_K = 16  # ... and up to which a narrow last vector gets a tile of its own
NARROW_SPLIT_MIN_VECTORS = 3  # full vectors a tile keeps after giving up its narrow one
SMALL_GEMM_L1_SHARE = 4  # a small gemm's A, B and C together fit L1 / this: a batch member


@dataclass(frozen=True)
class RegisterTile:
    mv: int
    nr: int
    lanes: int

    @property
    def mr(self) -> int:
        return self.mv * self.lanes

    def registers(self, b_columns_held: bool = False) -> int:
        """Accumulators and the operands of one k step: the A vectors and one B broadcast,
        or (`b_columns_held`) the tile's B broadcasts and one A vector."""
        held = self.nr if b_columns_held else self.mv
        return self.mv * self.nr + held + 1


def holds_b_columns(target: Target, mv: int, nr: int) -> bool:
    """Whether a k step of an FMA tile of mv vectors by nr columns holds its nr broadcasts
    of B in registers and loads A one vector at a time (each vector feeding its nr FMAs),
    rather than holding A's mv vectors and broadcasting B column by column: for a tile with
    fewer columns than vectors, on a target whose FMAs take no broadcast from memory (AVX2;
    on AVX-512 B's broadcasts take no register at all). It frees mv - nr registers: on AVX2
    the 4 x 3 tile of libxsmm's kernels (12 accumulators, 3 broadcasts, one vector of A)
    fits, where holding A's four vectors it needed 17 registers. W2's f32 56x9x9 batches in
    L2 took 4 x 3 instead of 1 x 9 and ran 1.21x faster on a Zen 3, in one process. And a
    tile of one column on any target, each of whose A vectors feeds one FMA: held, A took
    2 mv + 1 registers, which left columns of 16 vectors and more out (a batch member's
    whole columns, `choose_whole_columns`). The columns of up to 12 vectors ran alike
    either way (0.98-1.04x from memory, Zen 4)."""
    return nr == 1 or (not target.fma_reads_broadcasts and nr < mv)


def fits(tile: RegisterTile, target: Target, reserved: int = 0, m: int | None = None,
         whole_rows: bool = False) -> bool:  # fmt: skip
    """Whether the tile fits beside `reserved` live vector registers, for C's M (None: known
    only at run time) and A read in `whole_rows` or not (`target_overhead`)."""
    unmasked = whole_rows or whole_vectors(m, tile.lanes)
    overhead = target_overhead(target, tile, dynamic_rows=m is None, whole_rows=unmasked)
    held = holds_b_columns(target, tile.mv, tile.nr)
    return tile.registers(held) + reserved + overhead <= target.vector_registers


def target_overhead(
    target: Target, tile: RegisterTile, dynamic_rows: bool, whole_rows: bool = False
) -> int:
    """Vector registers a target needs beside the tile in its K loop: a temporary for the
    product where there is no fused multiply-add, and lane masks where masks are not in k
    registers (one for a static remainder, one per vector for a run-time one). None where
    the tiles read A in `whole_rows`: a packed panel or a row panel of exactly mr rows,
    whose loads take no mask, so the masks of C's last rows live in the epilogue only (the
    blocked path's tiles on AVX2 then hold 12 accumulators instead of 8: W1 f32 1024^3 ran
    1.12x and 2048^3 1.18x faster on a Zen 3, their K loops spilling nothing)."""
    masks = 0 if target.masked_memory or whole_rows else tile.mv if dynamic_rows else 1
    return int(not target.fma) + masks


def candidates(
    target: Target, element: ScalarType, m: int | None, reserved: int = 0, whole_rows: bool = False
) -> list[RegisterTile]:
    """Tiles that fit beside `reserved` other live vector registers (`whole_rows`: A read in
    whole rows, `target_overhead`)."""
    lanes = target.lanes(element)
    max_vectors = math.ceil((m or ASSUMED_EXTENT) / lanes)
    tiles = []
    for mv in range(1, min(max_vectors, 8) + 1):
        for nr in range(1, target.vector_registers):
            tile = RegisterTile(mv, nr, lanes)
            if fits(tile, target, reserved, m, whole_rows):
                tiles.append(tile)
    return tiles


def whole_vectors(m: int | None, lanes: int) -> bool:
    """A static M of whole vectors: every tile, the remainder's too, reads whole vectors of
    A, with no mask (`target_overhead`). On AVX2 the direct path's W3 49x2048x512 (48 rows
    in tiles, the last one a dot product) then takes 2 x 6 tiles, 1.35x faster than its 2 x 4
    on a Zen 3."""
    return m is not None and m % lanes == 0


def cycles_per_k(vectors: int, columns: int, k: int, a_vector_cycles: float = 0.0) -> float:
    """Cycles of one k step; the FMA latency bounds a chain only when there is one (k > 1).
    `a_vector_cycles`: what bringing one vector of A from L2 costs, when A is not in L1."""
    fmas = vectors * columns
    latency = FMA_LATENCY if k > 1 else 0
    loads = (vectors + columns) / LOAD_PORTS
    return max(fmas / FMA_PORTS, latency, loads, vectors * a_vector_cycles)


def estimate(
    tile: RegisterTile, m: int | None, n: int | None, k: int | None, a_vector_cycles: float = 0.0
) -> float:
    """Estimated cycles for C (m x n) with depth k, including the remainder kernels."""
    m, n, k = (m or ASSUMED_EXTENT), (n or ASSUMED_EXTENT), (k or ASSUMED_EXTENT)
    total = 0.0
    row_tiles = _tile_counts(m, tile.mr, tile.mv, lambda tail: -(-tail // tile.lanes))
    for vectors, row_count in row_tiles:
        for columns, col_count in _tile_counts(n, tile.nr, tile.nr, lambda tail: tail):
            epilogue = vectors * columns  # one load/store pass over the tile of C
            per_k = cycles_per_k(vectors, columns, k, a_vector_cycles)
            total += row_count * col_count * (k * per_k + epilogue)
    return total


def a_vector_cycles(target: Target, element: ScalarType, m: int | None, k: int | None) -> float:
    """Every column of tiles reads all of A again: from L2 when A does not fit half of L1
    (unknown extents: assumed not to), at the target's `l2_bytes_per_cycle`. Tiles with many
    vectors of A per FMA then wait on L2 (Zen 4: 80 x 5 ran 10-15% slower than 32 x 14 on
    W3's 784x512x128; Zen 3: 2 x 4 0.70-0.75x of 2 x 6 on 48x512x4608)."""
    if a_stays_in_l1(target, element, m, k):
        return 0.0
    return target.vector_bits / 8 / target.l2_bytes_per_cycle


def a_stays_in_l1(target: Target, element: ScalarType, m: int | None, k: int | None) -> bool:
    """Whether an m x k A (None: unknown extents) fits half of L1, beside B's and C's lines:
    read once, it stays there for every later column of tiles."""
    return m is not None and k is not None and m * k * element.size <= target.l1_bytes // 2


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
    max_columns: int | None = None,
    whole_rows: bool = False,
    small_gemm_rules: bool = True,
) -> RegisterTile:
    """The analytical choice (among the tiles at most `max_columns` wide, where given; A read
    in `whole_rows`, where true: `target_overhead`; `small_gemm_rules`: see `ranked` and
    `without_narrow_vector`)."""
    options = ranked(target, element, m, n, k, reserved, whole_rows, small_gemm_rules)
    tile = options[0]
    if max_columns is not None:
        tile = next((t for t in options if t.nr <= max_columns), tile)
    if small_gemm_rules and small_gemm(target, element, m, n, k):
        return without_narrow_vector(tile, target, element, m, k)
    return tile


def loops_over_rows(m: int, mr: int) -> bool:
    """Whether tiles of mr rows loop over a static M's row blocks: more than one full
    block (`gemm_tiles._Tiler` emits a loop for those, a single tile for one)."""
    return m // mr > 1


def choose_whole_columns(
    target: Target, element: ScalarType, m: int | None, n: int | None, k: int | None,
    reserved: int = 0, *, pairs_when_tall: bool = False, **rules: bool,
) -> RegisterTile:  # fmt: skip
    """`choose`'s tile (`rules`: its `whole_rows` and `small_gemm_rules`), or where it would
    loop over row blocks of a static M, the tile one column wide and as tall as C, if that
    fits: for a memory-bound batch member, whose reads of A and C then run in memory order
    (`gemm_tiles.member_tile_model`). Its many vectors keep enough FMA chains for the
    latency. Where the column does not fit, `pairs_when_tall`, and C is wide and K deep
    enough (`takes_column_pairs`), tiles of two columns and COLUMN_PAIR_VECTORS vectors."""
    tile = choose(target, element, m, n, k, reserved, **rules)
    if m is None or not loops_over_rows(m, tile.mr):
        return tile
    whole_rows = rules.get("whole_rows", False)
    column = RegisterTile(-(-m // tile.lanes), 1, tile.lanes)
    if fits(column, target, reserved, m, whole_rows):
        return column
    pairs = RegisterTile(COLUMN_PAIR_VECTORS, 2, tile.lanes)
    wanted = pairs_when_tall and takes_column_pairs(n, k)
    return pairs if wanted and fits(pairs, target, reserved, m, whole_rows) else tile


COLUMN_PAIR_VECTORS = 4
COLUMN_PAIR_MIN_COLUMNS = 5
COLUMN_PAIR_MIN_K = 4


def takes_column_pairs(n: int | None, k: int | None) -> bool:
    """Whether a memory-bound batch member too tall for one column (more than 30 vectors on
    AVX-512) takes tiles of two columns and COLUMN_PAIR_VECTORS vectors, rather than
    `choose`'s row loops over C's width (f64 256x6x6: 16 x 6 tiles, sixteen times down):
    where C has at least COLUMN_PAIR_MIN_COLUMNS columns and K is at least COLUMN_PAIR_MIN_K.
    Each tile then reads two of C's columns in runs of four lines, and A again from L1 for
    each pair. Zen 4, from memory, streamed either way, in one process against the row
    loops, numpy's placement / line-aligned, one thread: f64 256x6x6 1.21-1.23x /
    1.10-1.11x, 256x9x4 1.22-1.25x / 1.18-1.20x, 288x6x4 1.11-1.17x / 1.06-1.08x, 272x5x5
    1.20x / 1.15x, 256x6x4 1.18x / 1.08x, 256x7x5 1.10x / 1.27x; f32 512x6x6 1.20-1.23x /
    1.09-1.10x, 512x9x4 1.23-1.24x / 1.18-1.19x, 576x6x4 1.08-1.12x / 1.14-1.17x, 544x5x5
    1.10x / 1.10x, 512x6x4 1.18x / 1.14x, 512x5x6 0.99x / 1.23x; two threads 1.01-1.15x.
    Ten held out: f64 264x5x4 1.23x / 1.14x, 304x8x4 1.15x / 1.12x, 256x5x8 1.05x / 1.07x,
    400x6x5 1.11x / 1.08x, 256x12x4 1.34x / 1.21x; f32 528x9x5 1.19x / 1.19x, 608x5x4
    1.05x / 1.08x, 512x7x7 1.12x / 1.20x, 800x6x4 1.10x / 1.12x, 512x16x4 1.20x / 1.19x;
    two threads 0.99-1.08x. Taken for f64 gemm.n.n members only
    (`gemm_tiles.member_tile_model`): the K loops of f32 pairs ran out of general registers
    in 16 of 71 shapes (f32 512x6x4, 576x6x4, 512x5x6 among the winners above), reloading
    one or two values from the stack each k step, as none of 71 f64 shapes did. Those
    registers hold the lines of the next member each tile asks for (three a view:
    `codegen.llvm.nanokernel._LineShare`); a form with two a view spilled nothing, but ran
    other streamed kernels 1-5% slower (bf16 32^3). Not for narrower C (N = 4: f64 512x4x4
    0.99x / 0.93x, f32 512x4x8 1.02x / 0.95x, 1024x4x4 1.05x / 0.95-0.98x) nor K = 3 (f64
    248x7x3 0.96x / 1.04x, f32 496x7x3 0.96x / 1.05x, 640x7x3 0.98x / 1.12x). Nor one column
    in halves, which won on a first 18 members (0.99-1.14x / 0.94-1.40x) but not on 14 held
    out (0.83-1.20x / 0.92-1.20x)."""
    wide = n is not None and n >= COLUMN_PAIR_MIN_COLUMNS
    return wide and k is not None and k >= COLUMN_PAIR_MIN_K


def without_narrow_vector(tile: RegisterTile, target: Target, element: ScalarType,
                          m: int | None, k: int | None) -> RegisterTile:  # fmt: skip
    """The tile one vector shorter where a small gemm's K is at most NARROW_SPLIT_MAX_K, the
    tile is as tall as C, its last vector is narrow (`narrow_last_vector`) and it keeps at
    least NARROW_SPLIT_MIN_VECTORS: the narrow rows then take a tile of their own. On Zen 4
    (one thread, in one process, in L2 / from memory) f32 56x9x9 ran 1.16-1.19x / 1.08-1.11x
    faster in 48 x 6 and 16 x 6 tiles than in 64 x 6, 72x9x9 1.16x / 1.45x, 52x9x9 1.15x /
    1.08x, 68x9x6 1.16x / 1.01x, 56x9x16 1.05x / 0.99x; f64 44x7x8 1.14x / 1.13x, 34x12x11
    1.12x / 1.02x, 28x5x6 1.16x / 1.5x. Not at a longer K (f32 and f64 20x9x20 0.95x and
    0.97x in L2, f32 40x9x20 0.97x), nor where two full vectors or fewer would be left (f32
    36x9x9 and 40x9x9 1.08-1.10x in L2 but 0.96-0.99x from memory, f64 20x12x5 1.20x and
    0.98x; f32 18x16x14 0.88x in L2), nor for a last vector that computes at full width
    (f32 60x9x9 0.95x, 42x7x12 0.86x in L2). The estimate cannot see it: its FMA term counts
    the narrow vector as a full one, and the one-vector tile's chains at the FMA latency."""
    short = k is not None and k <= NARROW_SPLIT_MAX_K
    tall = m is not None and tile.mr >= m
    kept = tile.mv - 1 >= NARROW_SPLIT_MIN_VECTORS
    if short and tall and kept and narrow_last_vector(tile, target, element, m):
        return RegisterTile(tile.mv - 1, tile.nr, tile.lanes)
    return tile


class TileModel(Protocol):
    """A register tile choice: (target, element, m, n, k, reserved, whole_rows) -> tile."""

    def __call__(
        self,
        target: Target,
        element: ScalarType,
        m: int | None,
        n: int | None,
        k: int | None,
        reserved: int = 0,
        *,
        whole_rows: bool = False,
        small_gemm_rules: bool = True,
    ) -> RegisterTile: ...  # fmt: skip


def choose_narrow(max_columns: int) -> TileModel:
    """The analytical choice among the tiles at most `max_columns` wide."""
    return partial(choose, max_columns=max_columns)


TIE = 0.01  # estimates this close are the model's tie: it cannot tell such tiles apart


def choose_tall(
    target: Target,
    element: ScalarType,
    m: int | None,
    n: int | None,
    k: int | None,
    reserved: int = 0,
    whole_rows: bool = False,
    small_gemm_rules: bool = True,
) -> RegisterTile:
    """The tallest of the tiles whose estimate ties with the best (then the analytical order):
    for B read in place from L2, where each broadcast should feed as many FMAs as it can."""
    options = ranked(target, element, m, n, k, reserved, whole_rows, small_gemm_rules)
    from_l2 = a_vector_cycles(target, element, m, k)
    best = estimate(options[0], m, n, k, from_l2)
    tied = [t for t in options if estimate(t, m, n, k, from_l2) <= best * (1 + TIE)]
    return max(tied, key=lambda t: t.mv)


def ranked(
    target: Target,
    element: ScalarType,
    m: int | None,
    n: int | None,
    k: int | None,
    reserved: int = 0,
    whole_rows: bool = False,
    small_gemm_rules: bool = True,
) -> list[RegisterTile]:
    """The tiles that fit (`candidates`), fewest estimated cycles first. Ties go first to a
    tile as tall as a static M, then (for a small gemm, where `small_gemm_rules`:
    `choices.takes_small_gemm_rules`) to tiles whose column tiles, the remainder's too, are not
    crowded (`crowded`), then to tiles that split N into equal column tiles, then to the
    larger tile (fewer, longer kernels).

    A tile as tall as C reads each column of A whole and in order, which the memory-bound W2
    batches stream 1.1-1.35x faster (64x64x64: 64 x 6 rather than 32 x 14) and cache-resident
    ones no slower; where A comes from L2 and the gemm stays there, such a tile is charged
    the model's L2 time for A over the target's `tall_stream_speedup`. Not a tile narrower than
    MIN_COLUMNS_FOR_HEIGHT where a tall tile that wide fits the registers: its A vectors feed
    too few FMAs (f32 56x9x9 on Zen 4: 64 x 3 ran 0.95x of 64 x 6 from memory). Where none
    fits, one column fewer on a target of one FMA a cycle (f64 56x9x9: 56 x 3 ran 1.03-1.15x
    faster than 40 x 5 on Zen 4, from L2 and from memory; f64 64^3's 64 x 2 ran 0.98x of
    16 x 14), but not on two: there 56 x 3 ran 0.9x on the Intel machine of 2026-11-22 and
    0.92x of 40 x 5 or 32 x 6 in L2 on the AMX Xeon, 1.00x from memory. Equal column tiles leave
    no narrow remainder kernel, which on a small gemm's short K loop runs its few accumulators
    at the FMA latency bound: W2's cache-resident 32^3 (f32 32 x 8 against 32 x 14 + 32 x 4) and
    f64 16^3 (16 x 8 against 16 x 12 + 16 x 4) ran 1.05-1.1x faster. Not for a tile whose
    accumulators only just cover that bound (FMA_PORTS * FMA_LATENCY chains), which the estimate
    counts as busy but which leaves no slack: on AVX2, 16^3's 2 x 4 tiles ran slower than 2 x 6
    + 2 x 4 (Zen 3, paired in one process: f32 1.12x faster in L2, 1.02x from memory; f64 1.03x
    and 1.06x)."""
    from_l2 = a_vector_cycles(target, element, m, k)
    options = candidates(target, element, m, reserved, whole_rows)
    small = small_gemm(target, element, m, n, k)
    resident = l2_resident(target, element, m, n, k)
    tall_columns = _tall_tile_columns(options, m, target)

    def key(t: RegisterTile) -> tuple[float, bool, bool, bool, int]:
        as_tall = m is not None and t.mr >= m and t.nr >= tall_columns
        even = small and n is not None and _splits_evenly(n, t.nr) and _beyond_latency(t)
        a_cycles = from_l2 / target.tall_stream_speedup if as_tall and resident else from_l2
        busy = (
            small
            and small_gemm_rules
            and any(crowded(w, target, element, (m, n, k)) for w in _column_tiles(t, n))
        )
        return estimate(t, m, n, k, a_cycles), not as_tall, busy, not even, -t.mv * t.nr

    return sorted(options, key=key)


def crowded(tile: RegisterTile, target: Target, element: ScalarType,
            shape: tuple[int | None, int | None, int | None]) -> bool:  # fmt: skip
    """Whether a tile of several vectors holds more full-width FMAs in a k step (on an m x
    n x k C, at most n columns) than the target's `small_gemm_step_fmas`, or two columns or
    fewer. On Zen 4 such tiles of a small gemm's short K loop run 15-40 cycles a tile past
    their FMAs' time, the others 0-7 (K = 20, one tile a member, in L2: f64 16 x 8 31
    cycles, 16 x 4 2, 32 x 2 25; f32 48 x 5 16, 48 x 4 none), though the same tiles over
    K = 128 run equally fast. Only for K up to CROWDED_MAX_K: at
    f32 35x9x35, 48 x 6 and 48 x 3 ran 1.03x faster than 48 x 9 in L2 but 0.97x from
    memory. The FMAs of a last vector that computes narrower in a K loop do not count: f32
    20x9x20's 32 x 9 tile (9 zmm and 9 xmm FMAs a step) runs at its FMAs' time. Nor do
    tiles of one vector: f64 7x22x9's 8 x 22 ran 1.07-1.12x faster than 8 x 11 twice, f32
    9x20x16's 16 x 20 1.05-1.12x faster than 16 x 10 twice."""
    limit = target.small_gemm_step_fmas
    m, n, k = shape
    if limit <= 0 or k is None or k > CROWDED_MAX_K:
        return False
    columns = min(tile.nr, n or tile.nr)
    narrow_last = k_loop(tile, shape, target) and narrow_last_vector(tile, target, element, m)
    full = tile.mv - int(narrow_last)
    return tile.mv > 1 and (columns <= 2 or full * columns > limit)


def narrow_last_vector(tile: RegisterTile, target: Target, element: ScalarType,
                       m: int | None) -> bool:  # fmt: skip
    """Whether the last vector of a tile as tall as a static M holds rows that the target's
    narrower FMA units compute alone (`Target.narrow_fma_pays`)."""
    if m is None or m >= tile.mr or tile.mv < 2 or not target.narrow_fma_pays:
        return False
    return (m - (tile.mv - 1) * tile.lanes) * element.bits <= target.fma_unit_bits


def k_loop(tile: RegisterTile, shape: tuple[int | None, int | None, int | None],
           target: Target) -> bool:  # fmt: skip
    """Whether the tile runs a K loop rather than K unrolled completely."""
    m, n, k = shape
    if m is None or n is None or m > tile.mr or n > tile.nr:
        return not unrolls_k(k, False)
    return not unrolls_k(k, unrolled_steps_fit(replace(tile, nr=n), target))


def unrolls_k(k: int | None, lone: bool) -> bool:
    """Whether a tile's static K is unrolled completely: up to FULL_UNROLL_K, and up to
    SINGLE_TILE_UNROLL_K for a `lone` tile, all of C and `unrolled_steps_fit`
    (`nanokernel.k_unroll`)."""
    return k is not None and k <= (SINGLE_TILE_UNROLL_K if lone else FULL_UNROLL_K)


def unrolled_steps_fit(tile: RegisterTile, target: Target) -> bool:
    """Whether a tile's accumulators, two k steps' vectors of A and a broadcast of B fit the
    registers (`RegisterTile.registers` and one more step's A). In K unrolled completely,
    LLVM's scheduler loads later steps' A ahead, and tiles that leave no room for it spilled
    where a loop of the same steps did not: on the AMX Xeon, 48 x 9 154 spill moves, 80 x 5
    and 32 x 14 over 130 as batch members. W2's members in L2 there ran the loop faster
    (paired, one process: f32 48x9x16 1.32-1.37x, f64 24x9x16 1.27-1.31x, f32 80x5x16
    1.08-1.12x, 64x6x16 1.01-1.05x, 32x14x16 0.97-0.98x) and from memory about as fast
    (0.94-1.04x: 32x14x16 the least). Tiles that fit ran the same either way (f64 24x8x16
    0.98-1.04x). Zen 4's 112 x 3 spilled too. One-vector tiles spilled nothing (K unrolled,
    they may keep all of A's vectors: `nanokernel.resident_a`)."""
    return tile.mv == 1 or tile.registers() + tile.mv <= target.vector_registers


def _column_tiles(tile: RegisterTile, n: int | None) -> list[RegisterTile]:
    """The tile and, where its columns leave a remainder of a static N, the narrower tile
    that computes it."""
    rest = n % tile.nr if n is not None and n > tile.nr else 0
    return [tile] + ([RegisterTile(tile.mv, rest, tile.lanes)] if rest else [])


def _tall_tile_columns(options: list[RegisterTile], m: int | None, target: Target) -> int:
    """The fewest columns of a tile that counts as tall: MIN_COLUMNS_FOR_HEIGHT where a tile
    as tall as C that wide is among the options or the target starts two FMAs a cycle, else
    one fewer (`ranked`)."""
    widest = max((t.nr for t in options if m is not None and t.mr >= m), default=0)
    fewest = MIN_COLUMNS_FOR_HEIGHT
    return fewest if widest >= fewest or target.fma_per_cycle >= 2 else fewest - 1


def small_gemm(
    target: Target, element: ScalarType, m: int | None, n: int | None, k: int | None
) -> bool:
    """Static, and A, B and C together within a quarter of L1: a batch member whose operands
    stream in for one short K loop each (the size `lowering.prefetch` also prefetches)."""
    return _operands_within(element, (m, n, k), target.l1_bytes // SMALL_GEMM_L1_SHARE)


def l2_resident(
    target: Target, element: ScalarType, m: int | None, n: int | None, k: int | None
) -> bool:
    """Static, and A, B and C together within half of L2: A stays there for every column of
    tiles (a larger B or C streaming through would evict it)."""
    return _operands_within(element, (m, n, k), target.l2_bytes // 2)


def _operands_within(
    element: ScalarType, shape: tuple[int | None, int | None, int | None], budget: int
) -> bool:
    """A static m x n x k gemm's A, B and C together take at most `budget` bytes."""
    m, n, k = shape
    if m is None or n is None or k is None:
        return False
    return (m * k + k * n + m * n) * element.size <= budget


def _beyond_latency(tile: RegisterTile) -> bool:
    """More accumulators than the FMA units need chains to hide their latency."""
    return tile.mv * tile.nr > FMA_PORTS * FMA_LATENCY


def _splits_evenly(n: int, nr: int) -> bool:
    """Columns of width nr (at most n) cover n in equal tiles at least MIN_COLUMNS_FOR_HEIGHT
    wide."""
    width = min(nr, n)
    return width >= MIN_COLUMNS_FOR_HEIGHT and n % width == 0
