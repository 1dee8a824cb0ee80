"""The tile dialect: microkernel instructions of nanotc's mid-level IR.

Lowering turns each gemm into loops (language `for`/`if`/`arith`) around these instructions;
each then becomes a nanokernel for the target (`nanotc.lowering.nanokernel`). They print
like language instructions (`nanotc compile --emit tiled`) but are internal: the language's
parser does not accept them.

`tile.gemm` computes one register tile of C:

    C[row : row+rows, col : col+nr] := alpha * op(A)[row : row+rows, :] * op(B)[:, col : col+nr]
                                       + beta * C[row : row+rows, col : col+nr]

with the accumulators of an `mr x nr` register tile (`mr` a multiple of the vector length,
`rows <= mr`, the rows beyond `rows` masked off) held in vector registers for the whole K loop.
With `tile mr x nr valid v` (a run-time count of at most nr), the columns from v on read and
write column v - 1 again: they compute its values and store them over it, so one nanokernel
covers a run-time number of columns (never for atomic tiles, which would add twice).
Its optional `next a/b/c` views are the next batch member's operands: the K loop prefetches
this tile's share of their cache lines into L1 (`nanotc.lowering.prefetch`). With `later d`,
the same K steps ask for the same lines of the member d groups after the next one into L2.

`tile.row_dots` computes the last few rows of C (`rows`, at most 4) as dot products along K:

    C[row + r, col + j] := alpha * sum over k of a[r * K + k] * op(B)[k, col + j]
                           + beta * C[row + r, col + j]      (r < rows, j < cols)

from `a`, those rows of op(A) packed whole (`tile.pack` with panels of one row), or read
where they lie when they run along K: A's columns (`a` K x rows, a[k, r] for a[r * K + k])
or one row of A as a vector; and from op(B)'s columns where they lie (K contiguous). Its
vectors run along K, so a remainder of one row costs a sixteenth of the masked register tile
it replaces. With `rows R valid v` (a run-time count of at most R), rows from v on read row
v - 1 again and are not stored, and likewise `cols N valid v` for columns: one nanokernel
covers a run-time M or N.

`tile.batch_gemm` is the batch-reduce form: the same tile accumulates
`sum over b in [start, stop) step s of op(A_b) * op(B_b)` before alpha and beta are applied
once; A_b and B_b are computed by its region (index b as parameter), which ends with
`tile.yield %A_b, %B_b`.

`tile.pack` copies the block X[row : row+rows, col : col+cols] of X = op(source) into
`target` as panels of `panel` rows: panel q holds rows q*panel ... q*panel+panel-1, column k
of it at target[q*panel*cols + k*panel : ... + panel]; rows past `rows` in the last panel are
zero. Packed A is op(A) in mr-row panels; packed B is op(B)^T in nr-row panels, so each
nanokernel reads both operands contiguously (the blocked GEMM of `nanotc.lowering.gemm_blocked`).
`.pairs` packs bf16 in the VNNI layout of `vdpbf16ps` instead: panel q starts at
target[q*panel*K2] (K2: cols rounded up to even), its K pair p at + p*2*panel, holding
(X[r, 2p], X[r, 2p+1]) at + 2r; the second value of an odd K's last pair is zero. A `tile.gemm`
whose `.pairs` flag is set reads such a panel as `a`: a 2*mr x K2/2 view whose column p is
pair p (its K extent is then op(B)'s). `.padded` says that op(B)'s row past an odd K (in
memory after the view's last row) is zero too, as in the blocked path's B pack: the tile
then runs its last pair whole instead of a half step.

`tile.min` is the smaller of two index values (block extents at the edges of C).

`tile.pack_amx` copies the block X[row : row+rows, col : col+cols] of X = op(source) into
AMX tile panels of `panel` rows (16, or a multiple of 16 for `.pairs`): K in chunks of 32, each
chunk 16 rows of 32 bf16 (`.rows`: an AMX row operand) or 16 K-pairs of `panel` rows
(`.pairs`: the VNNI operand, two K values per row adjacent). Panel q starts at
q * panel * K32 (K32: cols rounded up to 32); padding is zero, except that `.exact` leaves
the rows and K pairs past the block unwritten (for tiles of the block's exact shape; the
second value of an odd K's last pair is still zero).

`tile.amx_gemm alpha, A32, B16, C` adds alpha * op(A) op(B) to C (at most 32 x 32) from packed
panels: `a` the VNNI panels of op(A) (`.pairs`), `b` the row panels of op(B)^T (`.rows`),
starting at panels `a_panel` and `b_panel`, over `chunks` chunks of 32 K. Its 2 x 2 f32
accumulator tiles stay in AMX tile registers for the whole K loop. Where `accumulate` is 0,
C is written without being read (the first K block of a gemm with beta 0).

`tile.amx_small_gemm alpha, A, B, C k K` adds alpha * op(A) op(B) to a whole small gemm of
static shape (C at most 64 x 64) with tiles of its exact shape: `a` the VNNI panels of all of
op(A) (`.pairs`); `b` either op(B) itself, loaded straight into row tiles (its K values
contiguous, K even), or the row panels of op(B)^T (`.rows`); `.zero` writes C without reading
it (beta 0). C's columns are tile rows, loaded and stored in place where C is f32 with
contiguous columns and alpha is 1.

`tile.scale beta, C` is C := beta * C, with C not read when beta is 0 (the blocked GEMM
applies beta once, then accumulates its K blocks with beta 1).

`tile.amx_batch_gemm` is the batch-reduce form of `tile.amx_small_gemm` (beta 1, C at most
32 x 32, K even): C += alpha * sum over b of op(A_b) op(B_b), its region computing A_b and
B_b as `tile.batch_gemm`'s does. Every accumulator of C stays in a tile register across the
whole loop, and each A_b is interleaved into VNNI rows one iteration ahead.

`tile.line_lead X` is the number of elements of X before the first cache-line boundary at or
after its first element (0 when X starts on one): where every column of a view starts at the
same offset in its cache line, tiles of rows from there on load and store whole lines.

`tile.disjoint X, Y` is true when the memory spans of the views X and Y (first to last
element they address) do not overlap: a run-time guard for code that reorders reads of one
past writes of the other.

`tile.prefetch X` asks for the cache lines of the view X ahead of its use (`.write`: to be
written). It has no effect on values, never faults, and may address past an array's end.

`tile.transposed X` is the matrix X^T as a view of X's memory: its shape and strides are X's
reversed (the transposed problem of a gemm into a row-major C, `lowering.row_major`).

`tile.stride X[mode]` is the element stride of a mode of the view X, read at run time (as
`size` reads its extent).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nanotc.ir.core import (
    ConstKind,
    Flag,
    Instruction,
    IntAttr,
    Kind,
    Suffix,
    attribute,
    operand,
    operands,
    optional_operand,
    region,
)
from nanotc.ir.instructions import Transpose
from nanotc.ir.types import I1, INDEX, MemRefType, Type
from nanotc.ir.values import Value

_INDEX = dict(constants=ConstKind.INT, const_type=INDEX)
_TILE_TYPES = "type($alpha), type($a), type($b), type($beta), type($c)"


class _BatchBody:
    """A batch-reduce microkernel's region: the batch index as parameter, computing A_b and
    B_b and ending in `tile.yield %A_b, %B_b`."""

    body: Any

    @classmethod
    def region_param_types(cls, attrs: Mapping[str, Any], region_name: str) -> Sequence[Type]:
        return (INDEX,)

    def panels(self) -> tuple[Value, Value]:
        """The A_b and B_b yielded by the region."""
        last = self.body.instructions[-1]
        assert isinstance(last, TileYield)
        a, b = last.values
        return a, b


class TileGemm(Instruction):
    name = "tile.gemm"
    kind = Kind.COLLECTIVE
    trans_a = attribute(Suffix(Transpose))
    trans_b = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    pairs = attribute(Flag("pairs"), default=False)  # a: VNNI panel of `tile.pack.pairs`
    padded = attribute(Flag("padded"), default=False)  # b: zero row past an odd K
    fetched = attribute(Flag("fetched"), default=False)  # a: in L1, asked for by earlier tiles
    # a: every K pair in registers, C's columns a group at a time (`resident_pairs_tile`)
    resident = attribute(Flag("resident"), default=False)
    alpha = operand(ConstKind.NUMBER)
    a = operand()
    b = operand()
    beta = operand(ConstKind.NUMBER)
    c = operand()
    row = operand(**_INDEX)
    col = operand(**_INDEX)
    rows = operand(**_INDEX)
    mr = attribute(IntAttr())
    nr = attribute(IntAttr())
    valid_cols = optional_operand(**_INDEX)  # of the nr: the others repeat the last one
    next_a = optional_operand()
    next_b = optional_operand()
    next_c = optional_operand()
    later = attribute(IntAttr(), default=0)  # groups from the next member to the later one
    syntax = (
        "{trans_a}{trans_b}{atomic}{pairs}{padded}{fetched}{resident} "
        "$alpha , $a , $b , $beta , $c [ $row , $col ] "
        "rows $rows tile {mr} x {nr} ( valid $valid_cols )? ( next a $next_a )? "
        "( next b $next_b )? "
        "( next c $next_c )? ( later {later} )? : " + _TILE_TYPES
    )

    def next_views(self) -> list[tuple[Value, Value, bool]]:
        """The operands whose next member's view this tile prefetches a share of: each with
        that view and whether it is written (C)."""
        views = (
            (self.a, self.next_a, False),
            (self.b, self.next_b, False),
            (self.c, self.next_c, True),
        )
        return [(operand, v, write) for operand, v, write in views if v is not None]


class TileRowDots(Instruction):
    name = "tile.row_dots"
    kind = Kind.COLLECTIVE
    trans_b = attribute(Suffix(Transpose))
    alpha = operand(ConstKind.NUMBER)
    a = operand()
    b = operand()
    beta = operand(ConstKind.NUMBER)
    c = operand()
    row = operand(**_INDEX)
    col = operand(**_INDEX)
    rows = attribute(IntAttr())
    cols = attribute(IntAttr())
    valid_rows = optional_operand(**_INDEX)  # of the rows: the others repeat the last one
    valid_cols = optional_operand(**_INDEX)  # of the cols: likewise
    syntax = (
        "{trans_b} $alpha , $a , $b , $beta , $c [ $row , $col ] rows {rows} "
        "( valid $valid_rows )? cols {cols} ( valid $valid_cols )? : " + _TILE_TYPES
    )


class TileBatchGemm(_BatchBody, Instruction):
    name = "tile.batch_gemm"
    kind = Kind.COLLECTIVE
    trans_a = attribute(Suffix(Transpose))
    trans_b = attribute(Suffix(Transpose))
    atomic = attribute(Flag("atomic"), default=False)
    alpha = operand(ConstKind.NUMBER)
    beta = operand(ConstKind.NUMBER)
    c = operand()
    row = operand(**_INDEX)
    col = operand(**_INDEX)
    rows = operand(**_INDEX)
    start = operand(**_INDEX)
    stop = operand(**_INDEX)
    step = operand(**_INDEX)
    mr = attribute(IntAttr())
    nr = attribute(IntAttr())
    body = region()
    syntax = (
        "{trans_a}{trans_b}{atomic} $alpha , $beta , $c [ $row , $col ] rows $rows "
        "tile {mr} x {nr} for $body.param = $start , $stop , $step "
        ": type($alpha), type($beta), type($c) $body"
    )


class TileYield(Instruction):
    name = "tile.yield"
    terminates_region = True
    values = operands()
    syntax = "$values : types($values)"


class TilePack(Instruction):
    name = "tile.pack"
    kind = Kind.COLLECTIVE
    trans = attribute(Suffix(Transpose))
    pairs = attribute(Flag("pairs"), default=False)
    source = operand()
    row = operand(**_INDEX)
    col = operand(**_INDEX)
    rows = operand(**_INDEX)
    cols = operand(**_INDEX)
    target = operand()
    panel = attribute(IntAttr())
    syntax = (
        "{trans}{pairs} $source [ $row , $col ] rows $rows cols $cols panel {panel} "
        "into $target : type($source), type($target)"
    )


class TileScale(Instruction):
    name = "tile.scale"
    kind = Kind.COLLECTIVE
    beta = operand(ConstKind.NUMBER)
    c = operand()
    syntax = "$beta , $c : type($beta), type($c)"


class TilePrefetch(Instruction):
    name = "tile.prefetch"
    kind = Kind.COLLECTIVE
    write = attribute(Flag("write"), default=False)
    source = operand()
    syntax = "{write} $source : type($source)"


class TilePackAmx(Instruction):
    name = "tile.pack_amx"
    kind = Kind.COLLECTIVE
    trans = attribute(Suffix(Transpose))
    pairs = attribute(Flag("pairs"), default=False)
    exact = attribute(Flag("exact"), default=False)
    source = operand()
    row = operand(**_INDEX)
    col = operand(**_INDEX)
    rows = operand(**_INDEX)
    cols = operand(**_INDEX)
    target = operand()
    panel = attribute(IntAttr())
    syntax = (
        "{trans}{pairs}{exact} $source [ $row , $col ] rows $rows cols $cols panel {panel} "
        "into $target "
        ": type($source), type($target)"
    )


class TileAmxGemm(Instruction):
    name = "tile.amx_gemm"
    kind = Kind.COLLECTIVE
    alpha = operand(ConstKind.NUMBER)
    a = operand()
    b = operand()
    c = operand()
    a_panel = operand(**_INDEX)
    b_panel = operand(**_INDEX)
    chunks = operand(**_INDEX)
    rows = operand(**_INDEX)
    cols = operand(**_INDEX)
    accumulate = operand(**_INDEX)
    syntax = (
        "$alpha , $a [ $a_panel ] , $b [ $b_panel ] , $c rows $rows cols $cols chunks $chunks "
        "accumulate $accumulate : type($alpha), type($a), type($b), type($c)"
    )


class TileAmxSmallGemm(Instruction):
    name = "tile.amx_small_gemm"
    kind = Kind.COLLECTIVE
    trans_b = attribute(Suffix(Transpose))
    zero = attribute(Flag("zero"), default=False)
    alpha = operand(ConstKind.NUMBER)
    a = operand()
    b = operand()
    c = operand()
    k = operand(**_INDEX)
    syntax = (
        "{trans_b}{zero} $alpha , $a , $b , $c k $k : type($alpha), type($a), type($b), type($c)"
    )


class TileAmxBatchGemm(_BatchBody, Instruction):
    name = "tile.amx_batch_gemm"
    kind = Kind.COLLECTIVE
    trans_a = attribute(Suffix(Transpose))
    trans_b = attribute(Suffix(Transpose))
    alpha = operand(ConstKind.NUMBER)
    c = operand()
    start = operand(**_INDEX)
    stop = operand(**_INDEX)
    step = operand(**_INDEX)
    body = region()
    syntax = (
        "{trans_a}{trans_b} $alpha , $c for $body.param = $start , $stop , $step "
        ": type($alpha), type($c) $body"
    )


class TileDisjoint(Instruction):
    name = "tile.disjoint"
    lhs = operand()
    rhs = operand()
    syntax = "$lhs , $rhs : type($lhs), type($rhs)"

    def result_types(self) -> Sequence[Type]:
        return (I1,)


class TileLineLead(Instruction):
    name = "tile.line_lead"
    source = operand()
    syntax = "$source : type($source)"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)


class TileTransposed(Instruction):
    name = "tile.transposed"
    source = operand()
    syntax = "$source : type($source)"

    def result_types(self) -> Sequence[Type]:
        t = self.source.type
        assert isinstance(t, MemRefType) and t.order == 2
        return (t.transposed(),)


class TileStride(Instruction):
    name = "tile.stride"
    source = operand()
    mode = attribute(IntAttr())
    syntax = "$source [ {mode} ] : type($source)"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)


class TileMin(Instruction):
    name = "tile.min"
    lhs = operand(**_INDEX)
    rhs = operand(**_INDEX)
    syntax = "$lhs , $rhs : type($lhs, $rhs)"

    def result_types(self) -> Sequence[Type]:
        return (INDEX,)
