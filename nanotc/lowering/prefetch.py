"""Prefetching a later work-group's operands of batched gemms on group-indexed views.

The language's main use is a batch of small gemms, one per work-group, on views such as
`subview %A[:, :, %g]` with `%g = group_id`. Each gemm's operands then arrive from memory
with no reuse, and the nanokernel waits on them. A thread runs its work-groups in order, so
the operands of work-group g + d (the same views at a later group id, at most the last group)
can be asked for while work-group g computes. The distance d is 1, or more for members so
small that one ahead would ask too late to cover the latency: as many members as fill an
eighth of L1 (f32 8^3: 8 ahead, 1.12-1.21x against 1 ahead; f64 8^3: 4, 1.01-1.07x; f32 16^3
and 20x9x20: 2, 0.95-1.08x).

Two ways, for operands (A, B and C of one member together) of at most a quarter of L2 that
the target's hardware prefetchers are not left to stream (`left_to_hardware`):

- Streamed by the tiles (`stream_next_group`, after tiling): f32, f64, f16 and bf16
  operands of static shapes and strides (`streamed_types`). Each `tile.gemm` on such views gets the
  next member's views (`next a/b/c`), and its K loop prefetches its share of their cache
  lines, a few lines per step (`codegen/llvm/nanokernel.py`; per K pair in dot-product
  tiles): the share of the tile's part of C, so the tiles of one gemm together cover every
  line once. Where every operand's batch stride is static, the tile is also told of a
  later member (`later`, as far again ahead), and each K step asks for the same lines of it
  into L2 (prefetcht1, one batch stride on as a constant displacement: no register; past
  the batch for the last groups, where a prefetch does not fault, as
  `test_results_with_prefetching` runs). The L1 asks then find their lines in L2, as when
  the batch is cache-resident, instead of holding a miss buffer for a trip to memory each.
  W2's batches from memory on Zen 4, one thread, against the L1 asks alone: f32 64^3
  1.06x, 96^3 1.14x, f64 32^3 to 64^3 1.09-1.13x, f32 32^3 and 64x64x40 1.00x; from L2,
  1.00x. Its distance hardly matters (three or four times as far: within 1%).
- All at once before the gemm (`prefetch_next_group`, before tiling: `tile.prefetch`): the
  other gemms (bf16 operands on AMX targets, run-time strides), small ones only, at most
  a quarter of L1, as the next group's lines then do not evict the current group's.
  Larger ones evicted them (f32 64^3: 0.78-0.85x). bf16 gemms on AMX pack their
  operands, reading them in order themselves (memory-bound batches of 128^3 and
  128x128x192 ran 0.92-1.18x with the prefetch: no trend).

A burst of prefetches up front was slower than none at f32 32^3 and 64^3 (0.83x, 0.79x):
presumably the nanokernel waited for fill buffers, and the next lines evicted ones it still
read (no hardware counters here to tell). Spread over the K loops, against every line asked
for up front (the f32 and f64 rule before), in in-process A/B runs on W2's memory-bound
batches (one thread; docs/benchmarks.md): f64 64^3 1.37x, f32 32^3 1.38x, f64 32^3 1.23x,
f64 56x9x9 1.19x, f64 20x9x20 1.16x, f64 16^3 and 35x9x35 1.1x, f32 64^3 1.08x, f32 56x9x9,
35x9x35 and 20x9x20 1.05-1.07x; 8^3 and f32 16^3 0.97-0.99x.
"""

from __future__ import annotations

import math

from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Instruction, Region, rewrite_bottom_up, walk
from nanotc.ir.instructions import BinaryOp, Gemm, Subview, Transpose, is_group_id
from nanotc.ir.tile import TileGemm, TileMin, TilePrefetch
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import OpResult, Value
from nanotc.lowering.register_tile import SMALL_GEMM_L1_SHARE, loops_over_rows
from nanotc.targets import Target

L2_SHARE = 4  # prefetched operands are at most a quarter of L2
# K steps after a tile's share of the next member's lines from which they run as a loop of
# their own, asking for nothing: a second K loop costs a tile about what 26 steps' asks (of
# the share's last line, again) cost (W2's f32 32^3 from memory on a Zen 3, against one
# loop: 0.92-0.98x), and less than 58 steps' (64^3: f32 1.05-1.14x, f64 1.03-1.08x)
QUIET_LOOP_STEPS = 48
LEAD_L1_SHARE = 8  # the prefetched members ahead fill this share of L1
LATER_DISTANCE = 2  # the member whose lines go to L2 is this many times as far ahead
# from a quarter of L1, members read in whole columns are left to the hardware prefetchers
# from this `memory_ratio` (`left_to_hardware`)
HARDWARE_MEMORY_RATIO = 4.5


def prefetch_next_group(func: Function, target: Target) -> None:
    """Before tiling: `tile.prefetch` of the next group's operands ahead of each small gemm
    whose tiles will not stream them."""

    def prefetched(inst: Instruction) -> list[Instruction]:
        wanted = isinstance(inst, Gemm) and _prefetched_up_front(inst, target)
        return [*_prefetches(inst, target), inst] if wanted else [inst]  # type: ignore[arg-type]

    rewrite_bottom_up(func.body, prefetched)


def stream_next_group(func: Function, target: Target) -> None:
    """After tiling: each `tile.gemm` on group-indexed views of streamed operands gets the
    next group's views, defined right after the views they follow."""
    tiles = [t for t in walk(func.body) if isinstance(t, TileGemm)]
    tile_rows: dict[int, int] = {}  # a gemm's tiles share its C: their largest mr is its tile's
    for t in tiles:
        tile_rows[id(t.c)] = max(tile_rows.get(id(t.c), 0), t.mr)
    tiles = [t for t in tiles if _streamed(t, target, tile_rows[id(t.c)])]
    distances = {id(v): _distance(t, target) for t in tiles for v in _group_views(t)}
    following: dict[int, Value] = {}
    _add_next_views(func.body, distances, following, {})
    for t in tiles:
        for field in ("a", "b", "c"):
            view = _group_view(getattr(t, field))
            if view is not None:
                setattr(t, f"next_{field}", following[id(view)])
        if all(_group_stride_bytes(operand) is not None for operand, _, _ in t.next_views()):
            t.later = (LATER_DISTANCE - 1) * _distance(t, target)


def _add_next_views(
    region: Region, distances: dict[int, int], following: dict[int, Value],
    groups_ahead: dict[tuple[int, int], Value],
) -> None:  # fmt: skip
    """After each view in `distances`, its next-group view (into `following`). A group
    index min(g + d, G - 1) is computed once per region and reused by the views after it
    and in the regions nested below (`groups_ahead`, by group id and distance)."""
    out: list[Instruction] = []
    for inst in region.instructions:
        for nested in inst.regions():
            _add_next_views(nested, distances, following, dict(groups_ahead))
        out.append(inst)
        if id(inst) not in distances:
            continue
        assert isinstance(inst, Subview)
        b = Builder(Region())
        group_id = next(o for o in inst.offsets if is_group_id(o))
        key = (id(group_id), distances[id(inst)])
        if key not in groups_ahead:
            groups_ahead[key] = _group_ahead(b, inst, distances[id(inst)])
        following[id(inst)] = _next_group_view(b, inst, groups_ahead[key])
        out.extend(b.region.instructions)
    region.instructions = out


def lines_per_step(lines: int, tile_elements: int, c_elements: int, depth: int) -> int:
    """Lines of a next-member view that one K step of a tile prefetches: the tile's share of
    them (as its part of C's elements), spread over its `depth` K steps, at least one."""
    return max(1, -(-_share(lines, tile_elements, c_elements) // depth))


def lines_asked(lines: int, tile_elements: int, c_elements: int, depth: int) -> int:
    """Lines of a next-member view a tile asks for, from its first: its share rounded up to
    whole K steps. Its later K steps ask for the last of them again, not for the next tile's
    lines: a tile of f32 64^3 (a share of 6 lines) that asked for one new line every one of
    its 64 K steps ran W2's batch from memory on a Zen 3 0.91-0.94x (32^3 0.89-0.90x)."""
    per_step = lines_per_step(lines, tile_elements, c_elements, depth)
    steps = -(-_share(lines, tile_elements, c_elements) // per_step)
    return min(depth, steps) * per_step


def _share(lines: int, tile_elements: int, c_elements: int) -> int:
    """A tile's share of a view's lines: as its part of C's elements, rounded up."""
    return -(-tile_elements * lines // c_elements)


def first_line(elements_before: int, lines: int, c_elements: int) -> int:
    """The first line of a tile's share: C's tiles are taken column block by column block,
    `elements_before` of C's elements before this tile's (the emitter computes the same at
    run time)."""
    return elements_before * lines // c_elements


def _prefetched_up_front(g: Gemm, target: Target) -> bool:
    """Small gemms, not empty, on views of static size and unit row stride that `_streamed`
    leaves."""
    types = _operand_types(g)
    if any(DYNAMIC in t.shape or t.stride[0] != 1 for t in types) or _streamed(g, target):
        return False
    small = 0 < member_bytes(g) <= target.l1_bytes // SMALL_GEMM_L1_SHARE
    return small and not left_to_hardware(g, target)


def left_to_hardware(g: Gemm | TileGemm, target: Target, tile_rows: int | None = None) -> bool:
    """A small member (static shapes, under a quarter of L1) that needs more bytes per cycle
    of its compute at the peak than the target's `hardware_prefetch_bytes_per_cycle`: the
    hardware prefetchers stream the batch's sequential A, B and C, and prefetch
    instructions only get in their way. But for a member picked by the group id whose
    register tile (of `tile_rows` rows, where known: after the tile is chosen) loops over
    row blocks: its tiles read each column of A and C in pieces, which the hardware
    prefetchers follow badly.

    On Zen 4 the rate is one core's memory bandwidth (6.7 bytes a cycle): W2's batches from
    memory, one thread, ran 1.03-1.45x faster without prefetch instructions on every member
    that loads longer than it computes (f32 8^3 to 35x9x35, f64 8^3 to 35x9x35; f64 56x9x9
    0.97-1.01x), and 0.47-0.89x on the members that compute longer (f32 and f64 32^3,
    64^3), which keep them. The same held for the K loop's prefetch of A's later columns
    (`GemmNanokernel.prefetches_a`): f64 16^3, 20x9x20 and 35x9x35 1.04-1.25x without it.
    Zen 3's prefetchers keep up only with the smallest members: 22 bytes a cycle, between
    f32 16x8x8 and f64 8x8x16 (20 bytes, 0.90-0.94x without) and 8^3 (24, 1.03-1.16x).

    Larger members stream, since their tiles ask for the later member's lines into L2 as
    well (`later`). On Zen 4 from memory, one thread, streaming against the hardware
    prefetchers alone: members that loop over row tiles, reading each column of A and C in
    pieces, 1.6-3.6x (f32 128x9x9, 160x9x9, 192x8x8, 256x4x4, 128x16x16; f64 48x9x48,
    64x9x9, 72x9x9, 96x6x6); 16 other members from a quarter of L1 up 0.82-1.53x,
    geometric mean 1.06 (W2's f64 35x9x35 and 56x9x9 1.14x; f32 40x9x40 0.82x, two threads
    1.26x; f64 26x9x26 0.86x). Below a quarter of L1 streaming lost on 11 of the 15 members
    measured (0.75-0.99x, W2's f32 16^3 to 56x9x9 and f64 8^3 to 20x9x20 among them); it
    won on f64 40x9x9 (1.45x), f32 96x9x9 and 128x4x8 (1.65x, looping over rows) and
    80x9x9 (1.11x). No rule of size or bytes per cycle told those apart.

    Looping over row blocks did: of 20 members under a quarter of L1 whose tiles loop over
    rows, streaming won on 18 and tied on 2 (Zen 4, one thread, from memory, line-aligned,
    against the hardware prefetchers alone; W2's memory variant, with numpy's placement,
    read f32 128x6x9 2.48x and f64 80x6x4 2.11x): f32 128x6x9 2.06x, 96x9x9 1.66x,
    128x4x8 1.65x, 160x4x4 1.59x, 144x4x4 1.53x, 192x2x4 1.53x, 160x3x9 1.38x, 128x8x4
    1.37x, 128x4x4 1.29x, 96x9x4 1.16x, 128x2x8 1.00x; f64 80x6x4 1.85x, 48x9x8 1.56x,
    80x4x4 1.56x, 96x3x4 1.55x, 128x2x4 1.54x, 64x8x4 1.35x, 64x4x4 1.14x, 48x5x5 1.11x,
    64x2x9 0.99x. Two
    threads: f32 128x6x9 1.58x, 96x9x9 1.25x, 128x2x8 1.09x; f64 80x6x4 1.39x. Members
    whose tiles do not loop over rows (f32 56x9x9, 72x9x9: a tile and a tail) are
    unchanged; bf16 and f16 inputs streamed 1.9-3.3x faster (bf16 128x6x8, 192x4x8; f16
    128x6x8, 96x9x9). Most such members now take a tile of whole columns instead, which
    the hardware prefetchers stream faster still (`gemm_tiles.member_tile_model`); the
    rule keeps the row loops of those too tall for one (f64 128x2x4) or whose column would
    load A too often (f32 96x9x9, f16 128x6x8).

    From a quarter of L1 up, members picked by the group id whose tile reads C's columns
    whole (`tile_rows` at least their rows) are left to the hardware where their bytes take
    HARDWARE_MEMORY_RATIO times their compute or more (`memory_ratio`), and streamed below
    that. Against streaming, numpy's placement / line-aligned: f64 200x2x4 (7.2) 1.38x /
    1.29x, 224x2x3 (8.0) 1.34x / 1.18x, 192x2x4 (7.2) 1.30x (three processes) / 1.07x,
    128x2x8 (6.0) 1.35x / 1.33x, 160x3x4 (5.6) 1.24x / 1.14x; f32 448x2x3 (8.0) 1.38x /
    1.14x, 320x4x4 (4.8) 1.15x / 1.03x, 256x4x4 (4.8) 0.96-1.17x / 1.14x. Below it: f64
    128x3x9 (4.3) 0.94x / 1.15x, 128x4x8 (3.7) 0.82-0.89x / 1.09x, 96x6x6 (3.3) 0.90x /
    0.90x; f32 256x6x6 (3.2) 0.84x / 0.98x."""
    if not memory_bound(g, target):
        return False
    looped = tile_rows is not None and loops_over_rows(g.c.type.shape[0], tile_rows)
    if member_bytes(g) < target.l1_bytes // SMALL_GEMM_L1_SHARE:
        return not (looped and _group_views(g))
    # the group's member in whole columns: a batch from memory read in order
    read_in_order = tile_rows is not None and not looped and bool(_group_views(g))
    return read_in_order and memory_ratio(g, target) >= HARDWARE_MEMORY_RATIO


def memory_bound(g: Gemm | TileGemm, target: Target) -> bool:
    """Static shapes that need more bytes per cycle of the gemm's compute at the peak than
    the target's `hardware_prefetch_bytes_per_cycle` (none where that is not measured)."""
    return memory_ratio(g, target) > 1


def memory_ratio(g: Gemm | TileGemm, target: Target) -> float:
    """The cycles a member's bytes take at the target's `hardware_prefetch_bytes_per_cycle`
    over those of its compute at the peak (infinite with no compute, K = 0); 0 for
    run-time shapes or an unmeasured rate."""
    rate = target.hardware_prefetch_bytes_per_cycle
    if rate <= 0 or any(DYNAMIC in t.shape for t in _operand_types(g)):
        return 0.0
    m, n = g.c.type.shape[0], g.c.type.shape[1]
    k = g.a.type.shape[0 if g.trans_a is Transpose.T else 1]
    compute = g.c.type.element
    dot = g.a.type.element is ScalarType.BF16 and target.bf16_gemm_by_dot
    flops_per_cycle = 2 * target.lanes(compute) * target.fma_per_cycle
    flops_per_cycle *= target.bf16_dot_rate if dot else 1
    flops, moved = 2 * m * n * k, member_bytes(g)
    if not flops:
        return math.inf if moved else 0.0
    return moved / rate * flops_per_cycle / flops


def streamed_types(target: Target) -> tuple[ScalarType, ...]:
    """Operand types whose batch members the tiles stream: f32, f64, f16 and bf16, but for
    bf16 on AMX targets, whose bf16 gemms pack their operands.

    f16 A runs the K loops of f32 (its B is converted into a scratch first, which the
    tiles do not stream). Zen 4, from memory, against the prefetch up front (32^3) or the
    hardware prefetchers alone (the others), one / two threads: 32^3 1.48x / 1.50x, 64^3
    1.12x / 1.13x, 96^3 1.18x, 48^3 1.02x; in L2 1.00x.

    bf16 widened to f32 FMAs runs the K loops of f32 (W2's shapes from memory on a Zen 3,
    one thread, against the prefetch up front: 56x9x9 2.06-2.12x, 16^3 1.3-1.4x, 32^3
    0.94-1.13x, 35x9x35 1.11x, 20x9x20 1.06x, 64^3 1.01x, 8^3 0.97-1.01x). bf16 dot-product
    tiles ask per K pair or quad of pairs (Zen 4, from memory, against the hardware
    prefetchers alone, one thread: 96^3 1.61x, 128^3 1.47x, 64x64x128 1.19x, 64x48x64
    1.08x, 64^3 1.05x, 56^3 1.04x, 48^3 1.03x; two threads 128^3 1.48x, 64^3 1.15-1.91x;
    from L2 1.00-1.01x. Against the prefetch up front, the hardware prefetchers left out:
    16^3 1.58x, 20x9x20 1.52x, 32^3 2.13x, 8^3 0.98x)."""
    bf16 = () if target.amx else (ScalarType.BF16,)
    return (ScalarType.F32, ScalarType.F64, ScalarType.F16, *bf16)


def _streamed(g: Gemm | TileGemm, target: Target, tile_rows: int | None = None) -> bool:
    """Operands of `streamed_types` and static shapes and strides, none empty (their lines
    are spread over K steps and C's elements), unit row stride, at most a quarter of L2
    together, and at least one of them a group-indexed view; `tile_rows` as in
    `left_to_hardware`."""
    types = _operand_types(g)
    static = all(
        DYNAMIC not in (*t.shape, *t.stride) and 0 not in t.shape and t.stride[0] == 1
        for t in types
    )
    streamed = streamed_types(target)
    if not _group_views(g) or not static or any(t.element not in streamed for t in types):
        return False
    fits = member_bytes(g) <= target.l2_bytes // L2_SHARE
    return fits and not left_to_hardware(g, target, tile_rows)


def _prefetches(g: Gemm, target: Target) -> list[Instruction]:
    operands = ((g.a, False), (g.b, False), (g.c, True))
    views = [(view, write) for v, write in operands if (view := _group_view(v)) is not None]
    if not views:
        return []
    b = Builder(Region())
    following = _group_ahead(b, views[0][0], _distance(g, target))  # all pick one group
    for view, write in views:
        b.add(TilePrefetch, write=write, source=_next_group_view(b, view, following))
    return b.region.instructions


def _group_ahead(b: Builder, view: Subview, distance: int) -> Value:
    """min(g + distance, group_size - 1), g the group id `view` picks its member by."""
    last = b.index(BinaryOp.SUB, b.group_size(), 1)
    group_id = next(o for o in view.offsets if is_group_id(o))
    ahead = b.index(BinaryOp.ADD, group_id, distance)
    return b.add(TileMin, lhs=ahead, rhs=last)


def _distance(g: Gemm | TileGemm, target: Target) -> int:
    """How many groups ahead to prefetch: enough members to fill L1 / LEAD_L1_SHARE, so the
    tiniest ones ask early enough to cover the memory latency."""
    return max(1, target.l1_bytes // LEAD_L1_SHARE // member_bytes(g))


def _operand_types(g: Gemm | TileGemm) -> list[MemRefType]:
    return [g.a.type, g.b.type, g.c.type]


def member_bytes(g: Gemm | TileGemm) -> int:
    """Bytes of A, B and C together: one batch member's."""
    return sum(t.shape[0] * t.shape[1] * t.element.size for t in _operand_types(g))


def on_group_views(g: Gemm | TileGemm) -> bool:
    """Whether some operand of g is a batch member picked by the group id: one that arrives
    from memory with no reuse, as this module assumes."""
    return bool(_group_views(g))


def _group_views(g: Gemm | TileGemm) -> list[Subview]:
    return [view for v in (g.a, g.b, g.c) if (view := _group_view(v)) is not None]


def _group_view(value: Value) -> Subview | None:
    """The subview defining `value` when it picks one member of a batch mode by the group
    id (the mode is dropped: `%A[:, :, %g]`)."""
    if not isinstance(value, OpResult) or not isinstance(value.owner, Subview):
        return None
    view = value.owner
    picks = any(is_group_id(o) and s is None for o, s in zip(view.offsets, view.sizes))
    return view if picks else None


def later_bytes(tile: TileGemm, operand: Value) -> int:
    """Bytes from the lines of the next member's view of `operand` to the same lines of the
    later member: `tile.later` batch members (0 where `later` is 0)."""
    return tile.later * (_group_stride_bytes(operand) or 0)


def _group_stride_bytes(view: Value) -> int | None:
    """Bytes from a group-indexed view's member to the next group's, where static: the
    strides of every mode whose offset is the group id (`_next_group_view` moves them all)."""
    subview = _group_view(view)
    if subview is None:
        return None
    source = subview.source.type
    assert isinstance(source, MemRefType)
    strides = [s for o, s in zip(subview.offsets, source.stride) if is_group_id(o)]
    return None if DYNAMIC in strides else sum(strides) * source.element.size


def _next_group_view(b: Builder, view: Subview, following: Value) -> Value:
    offsets = [following if is_group_id(o) else o for o in view.offsets]
    return b.add(Subview, source=view.source, offsets=offsets, sizes=list(view.sizes))
