"""LLVM emission of GEMM nanokernels (`tile.gemm`, `tile.batch_gemm`), following the plan of
`nanotc.lowering.nanokernel`: accumulators are SSA values carried through the K loop (and the
batch loop) by phi nodes, so they live in vector registers from the first FMA to the single
store of the tile."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

from llvmlite import ir

from nanotc.codegen.llvm import vector as vec
from nanotc.codegen.llvm.emitter import FunctionEmitter, emits
from nanotc.codegen.llvm.helpers import (
    CACHE_LINE_BYTES,
    add,
    as_value,
    carried_loop,
    convert,
    element_ptr,
    for_range,
    load_scalar,
    loop_runs,
    minimum,
    mul,
    opaque_value,
    prefetch,
    prefetch_into_l2,
    sub,
)
from nanotc.codegen.llvm.output import OutputUpdate, write_output
from nanotc.codegen.llvm.types import (
    I8,
    I16,
    I32,
    PTR,
    Dim,
    MemrefValue,
    const,
    memory_type,
    register_type,
)
from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileBatchGemm, TileGemm
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import Constant
from nanotc.lowering.nanokernel import (
    QUAD_ELEMENTS,
    QUAD_PAIRS,
    TAIL_QUAD_PAIRS,
    Access,
    Beta,
    GemmNanokernel,
    RowBlock,
    plan,
)
from nanotc.lowering.prefetch import QUIET_LOOP_STEPS, later_bytes, lines_asked, lines_per_step

Accumulators = list[ir.Value]  # index j * vectors + v
Masks = list[ir.Value | None]
_TileStore = Callable[[Accumulators, "_TileOfC", Beta, Masks], None]  # values, at, beta, masks
KStep = Callable[[ir.Value, Accumulators], Accumulators]  # a K loop's body: k, accumulators
OWN_COLUMN_REGISTERS = 8  # of the 16 general registers, beside A's, C's and the loop's
GROUP_COLUMNS = 4  # a group's columns: its pointer plus 0, 1, 2 or 3 column strides


@dataclasses.dataclass(frozen=True)
class _ColumnWalk:
    """Where each k step finds the tile's columns of op(B). Each column has a base of its own
    (`NanokernelEmitter._b_columns`), and a k step reads base + k * K's stride; except for
    tiles wider than OWN_COLUMN_REGISTERS whose columns are a run-time stride apart. Those
    have one pointer per GROUP_COLUMNS columns, carried through the K loop and moved down K
    at every step, and a group's columns are its pointer plus one to three strides, which
    x86 addresses from registers holding the stride and its multiples. Each step moves a
    pointer through an opaque value, or loop strength reduction would fold the pointers into
    one and rebuild the columns from it in a chain of adds at every k step, eleven adds for a
    13-column tile (dynamic gemms' small branch on Zen 3: 1.10-1.13x, f32 and f64)."""

    bases: list[ir.Value]  # of each column, or where grouped of each group's first
    element: ScalarType
    k_stride: Dim
    column_stride: Dim | None  # run-time stride of the grouped columns (None: not grouped)

    @property
    def start(self) -> list[ir.Value]:
        """The pointers carried through the K loop (none where not grouped)."""
        return [] if self.column_stride is None else self.bases

    def column(self, b: ir.IRBuilder, j: int, k: Dim, groups: list[ir.Value]) -> ir.Value:
        """Column j's element at step k, given the carried pointers of that step."""
        if self.column_stride is None:
            return element_ptr(b, self.bases[j], self.element, mul(b, k, self.k_stride))
        offset = mul(b, j % GROUP_COLUMNS, self.column_stride)
        return element_ptr(b, groups[j // GROUP_COLUMNS], self.element, offset)

    def advance(self, b: ir.IRBuilder, groups: list[ir.Value]) -> list[ir.Value]:
        """The carried pointers of the next k step."""
        moved = (element_ptr(b, g, self.element, self.k_stride) for g in groups)
        return [opaque_value(b, g, "r") for g in moved]


@dataclasses.dataclass(frozen=True)
class _TileOfC:
    """The tile's view of C and where each of its vectors lies (index j * vectors + v)."""

    c: MemrefValue
    pointers: list[ir.Value]


@dataclasses.dataclass(frozen=True)
class _LineShare:
    """Lines of one view a tile prefetches: `per_step` lines per K step from line `first`,
    none past line `end` (the last of its share, or of the view), all of them in the first
    `steps` K steps. The same lines `later` bytes on, those of the later member, are asked
    for into L2 alongside (none where `later` is 0)."""

    base: ir.Value
    later: int
    first: Dim
    per_step: int
    steps: int
    end: Dim
    write: bool

    def prefetch(self, b: ir.IRBuilder, k: Dim) -> None:
        for i in range(self.per_step):
            line = minimum(b, add(b, self.first, add(b, mul(b, k, self.per_step), i)), self.end)
            offset = as_value(b, mul(b, line, CACHE_LINE_BYTES))
            prefetch(b, b.gep(self.base, [offset], source_etype=I8), self.write)
            if self.later:
                later = as_value(b, add(b, mul(b, line, CACHE_LINE_BYTES), self.later))
                prefetch_into_l2(b, b.gep(self.base, [later], source_etype=I8))


def _span_bytes(t: MemRefType) -> int:
    """Bytes from a static view's first element to the end of its last column."""
    rows, cols = (*t.shape, 1)[:2]
    column_stride = t.stride[1] if len(t.stride) > 1 else rows
    return ((cols - 1) * column_stride + rows) * t.element.size


def _udiv(b: ir.IRBuilder, x: Dim, y: int) -> Dim:
    return x // y if isinstance(x, int) else b.udiv(x, const(y))


def _fetching_first(fetch: Callable[[Dim], None], body: Callable[..., Accumulators]) -> KStep:
    """A K loop's `body` after asking for its iteration's lines of the next member."""

    def fetched(k: ir.Value, acc: Accumulators) -> Accumulators:
        fetch(k)
        return body(k, acc)

    return fetched


class _BQuads:
    """B's elements of a tile's even columns four k steps at a time (`GemmNanokernel.b_quads`
    of an FMA tile, K unrolled): at a quad's first step each column's four elements are
    loaded into every 128-bit lane, and each step picks its own by an in-lane shuffle."""

    def __init__(self, b: ir.IRBuilder, p: GemmNanokernel):
        self.b, self.p = b, p
        self.lane: int | None = None  # the step's place in its quad (None: broadcasts)
        self.loaded: dict[int, ir.Value] = {}

    def at(self, lane: int | None) -> None:
        """The next k step's place in its quad; a new quad starts at 0."""
        self.lane = lane
        if lane == 0:
            self.loaded = {}

    def covers(self, j: int) -> bool:
        """Whether column j's element of the step comes from a quad."""
        return self.lane is not None and j % 2 == 0

    def splat(self, j: int, element: Callable[[], ir.Value]) -> ir.Value:
        """Column j's element of the step in every lane; `element()` points at it."""
        b, lane = self.b, self.lane
        assert lane is not None
        repeated = self.loaded.get(j)
        if repeated is None:  # the quad's first step, which every column takes part in
            assert lane == 0
            quad_t = vec.vector_type(register_type(self.p.compute), QUAD_ELEMENTS)
            quad = b.load(element(), typ=quad_t, align=4)
            # opaque, or LLVM folds each shuffle back into a broadcast load
            repeated = opaque_value(b, vec.repeat(b, quad, self.p.lanes), "v")
            self.loaded[j] = repeated
        return vec.in_lane_splat(b, repeated, lane, QUAD_ELEMENTS)


class NanokernelEmitter:
    def __init__(self, e: FunctionEmitter, p: GemmNanokernel, inst: TileGemm | TileBatchGemm,
                 first_column: int = 0):  # fmt: skip
        """`first_column`: where the columns of `p` start in the tile (a group of them)."""
        self.e = e
        self.b = e.b
        self.p = p
        self.inst = inst
        self.type = vec.vector_type(register_type(p.compute), p.lanes)
        # what each vector of a tile column loads and stores: a narrowed last vector only its
        # own rows (it computes in `GemmNanokernel.compute_lanes`)
        self.narrow = [
            vec.vector_type(register_type(p.compute), p.vector_lanes(v)) for v in range(p.vectors)
        ]
        self.row = e.dim(inst.row)
        self.col = add(e.b, e.dim(inst.col), first_column)
        self.first_column = first_column
        self.column_count = self._column_count(inst)
        # the last column the count keeps, from `first_column`
        self.last_column = (
            None
            if self.column_count is None
            else sub(e.b, sub(e.b, self.column_count, 1), first_column)
        )
        self._c_origins: dict[tuple[int, int, int], ir.Value] = {}
        self.masks = [self._mask(v) for v in range(p.vectors)]
        # A packed into whole panels (or any A holding every row of the tile) is read
        # without masks: only C's rows end at `rows`
        self.a_masks = (
            [None] * p.vectors
            if _a_covers_tile(inst, p)
            else [self._a_mask(v, mask) for v, mask in enumerate(self.masks)]
        )

    def _column_count(self, inst: TileGemm | TileBatchGemm) -> Dim | None:
        """The run-time count of the tile's columns that are C's (`tile.gemm ... valid`), or
        None where every column is."""
        if not self.p.counted:
            return None
        assert isinstance(inst, TileGemm) and inst.valid_cols is not None
        # grouped columns (`_ColumnWalk`, `_groups_c`) address from their group's origin
        assert self.p.columns <= OWN_COLUMN_REGISTERS, "a counted tile too wide to clamp"
        return self.e.dim(inst.valid_cols)

    def _column(self, j: int) -> Dim:
        """Where the tile's column j reads op(B) and reads and writes C: itself, or past a
        run-time count of columns the last counted one, whose values it then computes and
        stores again."""
        if self.last_column is None or (j == 0 and self.first_column == 0):
            return j
        return minimum(self.b, j, self.last_column)

    def _a_mask(self, v: int, mask: ir.Value | None) -> ir.Value | None:
        """The mask of A's vector v in the K loop: on AVX targets a run-time one as sign bits
        (`vec.sign_mask`), one register each, where A's vectors are contiguous loads."""
        a = self.inst.panels()[0] if isinstance(self.inst, TileBatchGemm) else self.inst.a
        element = a.type.element
        if (
            mask is None
            or isinstance(mask, ir.Constant)
            or self.p.dot
            or self.p.a_access is not Access.CONTIGUOUS
            or not self.e.state.target.sign_masked_memory
            or not vec.sign_masks(element, self.p.lanes)
        ):
            return mask
        rows = self.e.index_value(self.inst.rows)
        return vec.sign_mask(self.b, self.p.lanes, v * self.p.lanes, rows, element.bits)

    def _mask(self, v: int) -> ir.Value | None:
        lanes = self.p.active_lanes(v)
        if lanes is not None:
            return vec.static_mask(self.p.vector_lanes(v), lanes)
        return vec.dynamic_mask(
            self.b, self.p.lanes, v * self.p.lanes, self.e.index_value(self.inst.rows)
        )

    def initial(self, c: MemrefValue) -> Accumulators:
        """Zeros, or the tile of C itself when the kernel accumulates onto C."""
        p = self.p
        if not p.accumulates_on_c:
            element = register_type(p.compute)
            column = [
                vec.zeros(vec.vector_type(element, p.compute_lanes(v))) for v in range(p.vectors)
            ]
            return self._tail_quad_lanes(column * p.columns, to_kernel=True)
        tile = [
            self._load_c(v, self._c_pointer(c, j, v), None, c.type.element.size, self.masks[v])
            for j in range(p.columns)
            for v in range(p.vectors)
        ]
        return self._tail_quad_lanes(self._reordered(tile, to_kernel=True), to_kernel=True)

    def _reordered(self, acc: Accumulators, to_kernel: bool) -> Accumulators:
        """The tile's rows from memory order into the kernel's (`GemmNanokernel.kernel_row`)
        or back: one two-source permute per vector of an unpacked pair, once per tile."""
        p, b = self.p, self.b
        lanes, out = p.lanes, list(acc)
        for q in range(p.reordered_pairs):
            first = 2 * q
            rows = [p.kernel_row(first + x // lanes, x % lanes) - first * lanes
                    for x in range(2 * lanes)]  # fmt: skip
            order = rows if to_kernel else [rows.index(row) for row in range(2 * lanes)]
            for j in range(p.columns):
                at = j * p.vectors + first
                for r in range(2):
                    picks = ir.Constant(vec.vector_type(I32, lanes), order[r * lanes :][:lanes])
                    out[at + r] = b.shuffle_vector(acc[at], acc[at + 1], picks)
        return out

    def _c_pointer(self, c: MemrefValue, j: int, v: int) -> ir.Value:
        """The tile's origin plus an offset that is a constant for static strides: every
        column then addresses from one register instead of keeping its own index live. Columns
        a run-time stride apart, in tiles wider than OWN_COLUMN_REGISTERS, address from their
        group's origin plus zero to three strides, as op(B)'s columns do (`_ColumnWalk`)."""
        b, element = self.b, c.type.element
        group, column = (j // GROUP_COLUMNS, j % GROUP_COLUMNS) if self._groups_c(c) else (0, j)
        column_offset = mul(b, self._column(column), c.stride[1])
        offset = add(b, mul(b, v * self.p.lanes, c.stride[0]), column_offset)
        return element_ptr(b, self._c_origin(c, group), element, offset)

    def _groups_c(self, c: MemrefValue) -> bool:
        """Whether C's columns address from their group's origin: a tile of a run-time column
        stride that is too wide for a register per column. From one origin, LLVM kept every
        column's multiple of the stride live through the work-group loop, and spilled them
        (a row-major f32 16^3 batch member: 114 stack references, reloaded for every store
        and prefetch of C)."""
        return not isinstance(c.stride[1], int) and self.p.columns > OWN_COLUMN_REGISTERS

    def _c_origin(self, c: MemrefValue, group: int = 0) -> ir.Value:
        """The first element of the tile's C (of its column group `group`), computed once per
        basic block (where the block's stores and prefetches of C use it): the tiles' LLVM IR
        was a third address arithmetic repeated per column, which LLVM spent compile time
        folding back. A group's origin is opaque to LLVM, which would fold it back into the
        tile's origin plus a multiple of the stride per column."""
        key = (id(self.b.block), id(c), group)
        origin = self._c_origins.get(key)
        if origin is None:
            b = self.b
            offset = add(b, mul(b, self.row, c.stride[0]), mul(b, self.col, c.stride[1]))
            origin = element_ptr(b, c.ptr, c.type.element, offset)
            if group:
                columns = mul(b, group * GROUP_COLUMNS, c.stride[1])
                origin = opaque_value(b, element_ptr(b, origin, c.type.element, columns), "r")
            self._c_origins[key] = origin
        return origin

    # -- the K loop ----------------------------------------------------------------------------
    def _a_rows(self, a: MemrefValue) -> tuple[ir.Value, Dim, Dim, Dim]:
        """The tile's first row of op(A), op(A)'s row and K strides, and K."""
        a_rows, a_k = (1, 0) if self.inst.trans_a is Transpose.T else (0, 1)
        base = element_ptr(self.b, a.ptr, a.type.element, mul(self.b, self.row, a.stride[a_rows]))
        return base, a.stride[a_rows], a.stride[a_k], a.shape[a_k]

    def _b_columns(self, bm: MemrefValue, step: int = 1, copy: bool = False
                   ) -> tuple[list[ir.Value], Dim, Dim]:  # fmt: skip
        """The start of every `step`-th of the tile's columns of op(B) (from the first),
        op(B)'s K stride, and K. Columns a run-time stride apart each get a register of their
        own (up to OWN_COLUMN_REGISTERS): LLVM would otherwise rebuild them at every k step
        from one base and the stride, with four integer instructions beside a 2 x 6 tile's 20
        vector ones (W1's run-time sizes on Zen 3: two threads 1.08-1.10x, f64 one thread
        1.06x). `copy`: from a copy of the tile's origin in B that LLVM cannot see is the
        same, so that loads from it stay apart from the original's (`b_per_vector`)."""
        b = self.b
        b_k, b_cols = self._b_modes()
        origin = element_ptr(b, bm.ptr, bm.type.element, mul(b, self.col, bm.stride[b_cols]))
        if copy:
            origin = opaque_value(b, origin, "r")
        bases = [
            element_ptr(b, origin, bm.type.element, mul(b, self._column(j), bm.stride[b_cols]))
            for j in range(0, self.p.columns, step)
        ]
        if not isinstance(bm.stride[b_cols], int) and self.p.columns <= OWN_COLUMN_REGISTERS:
            bases = [opaque_value(b, base, "r") for base in bases]
        return bases, bm.stride[b_k], bm.shape[b_k]

    def _b_modes(self) -> tuple[int, int]:
        """op(B)'s K mode and column mode."""
        return (1, 0) if self.inst.trans_b is Transpose.T else (0, 1)

    def _column_walk(self, bm: MemrefValue, copy: bool = False) -> _ColumnWalk:
        stride = bm.stride[self._b_modes()[1]]
        grouped = not isinstance(stride, int) and self.p.columns > OWN_COLUMN_REGISTERS
        bases, k_stride, _ = self._b_columns(bm, GROUP_COLUMNS if grouped else 1, copy)
        return _ColumnWalk(bases, bm.type.element, k_stride, stride if grouped else None)

    def resident_a(self, a: MemrefValue) -> list[list[ir.Value]]:
        """A's vectors of every k (`GemmNanokernel.column_group`), loaded once for the
        tile's column groups. Where K's stride is a run-time one and K longer than
        OWN_COLUMN_REGISTERS, the k steps address from their group's base plus zero to three
        strides, as op(B)'s columns do (`_ColumnWalk`), the groups' bases opaque to LLVM,
        which would otherwise keep every step's multiple of the stride live, and spill them."""
        b, vectors = self.b, range(self.p.vectors)
        base, _, k_stride, depth = self._a_rows(a)
        assert isinstance(depth, int)  # K unrolled
        step = GROUP_COLUMNS if self._groups_a(k_stride, depth) else max(depth, 1)
        later = (
            element_ptr(b, base, a.type.element, mul(b, k, k_stride))
            for k in range(step, depth, step)
        )
        bases = [base, *(opaque_value(b, x, "r") for x in later)]
        return [
            [self._load_a(a, bases[k // step], None, k_stride, k % step, v) for v in vectors]
            for k in range(depth)
        ]

    @staticmethod
    def _groups_a(k_stride: Dim, depth: int) -> bool:
        """Whether a resident A's k steps address from their group's base (`resident_a`)."""
        return not isinstance(k_stride, int) and depth > OWN_COLUMN_REGISTERS

    def accumulate(self, acc: Accumulators, a: MemrefValue, bm: MemrefValue,
                   resident: list[list[ir.Value]] | None = None) -> Accumulators:  # fmt: skip
        """acc + the tile's A B, over K; A's vectors from `resident` where given. The K loop
        carries the accumulators and then the column walk's pointers."""
        if self.p.dot:
            return self._accumulate_pairs(acc, a, bm, resident)
        steps = _FmaSteps(self, len(acc), a, bm, resident)
        carried = acc + steps.walk.start
        if self.p.k_unroll is None:
            assert isinstance(steps.depth, int)
            whole = steps.depth - steps.depth % QUAD_ELEMENTS if self.p.b_quads else 0
            for k in range(steps.depth):
                steps.quads.at(k % QUAD_ELEMENTS if k < whole else None)
                carried = steps.step(k, carried)
        else:
            fetching = max((share.steps for share in steps.shares), default=0)
            carried = self._k_loops(steps.depth, carried, steps.step, fetching)
        return carried[: len(acc)]

    def _bf16_high_halves(self, a: MemrefValue, bm: MemrefValue) -> ir.Value | None:
        """Where A or B is bf16 widened to f32 FMAs: the mask that widens B's broadcasts and
        the odd rows of A's split pairs, in a register for the whole K loop. LLVM would
        otherwise turn each and into a blend with zero (vpblendw), up to 4% slower than the
        and in an inline-asm loop of 2 x 6 k steps on Zen 3."""
        bf16 = ScalarType.BF16 in (a.type.element, bm.type.element)
        if not bf16 or self.p.compute is not ScalarType.F32:
            return None
        return opaque_value(self.b, vec.bf16_high_halves(self.p.lanes), "v")

    def _converts_f16_broadcasts(self) -> bool:
        """Whether B's f16 elements widen as broadcasts (`vec.splat_f16`): into f32 lanes of
        at least 128 bits (vcvtph2ps's), in a K loop. In straight-line code (K unrolled)
        LLVM's scheduler converts many broadcasts ahead of their FMAs and spills (f16 8^3
        on Zen 3: 22 stack accesses), so those keep the scalar conversion."""
        p = self.p
        wide = p.lanes * 16 >= 128
        return p.compute is ScalarType.F32 and wide and p.k_unroll is not None

    def _fmas(self, acc: Accumulators, a_vector: Callable[[int], ir.Value],
              broadcast: Callable[[int, int], ir.Value]) -> Accumulators:  # fmt: skip
        """One k step's FMAs, its operands made in the order the tile holds them in registers
        (LLVM keeps that order): A's vectors, then B's broadcasts one at a time (one per
        vector where `b_per_vector`: `broadcast(j, v)`), or where the tile holds B's columns
        (`b_columns_held`), the broadcasts, then A's vectors one at a time."""
        b, p, out = self.b, self.p, list(acc)

        def fma(v: int, j: int, av: ir.Value, bj: ir.Value) -> None:
            index = j * p.vectors + v
            out[index] = vec.fma(b, av, self._lanes_of(bj, v), out[index], p.fused)

        if p.b_columns_held:
            columns = [broadcast(j, 0) for j in range(p.columns)]
            for v in range(p.vectors):
                av = a_vector(v)
                for j, bj in enumerate(columns):
                    fma(v, j, av, bj)
            return out
        a_vectors = [a_vector(v) for v in range(p.vectors)]
        for j in range(p.columns):
            if p.b_per_vector:
                columns = [broadcast(j, v) for v in range(p.vectors)]
            else:
                columns = [broadcast(j, 0)] * p.vectors
            for v, bj in enumerate(columns):
                fma(v, j, a_vectors[v], bj)
        return out

    def _pair_loads(self, a: MemrefValue, b_k_stride: Dim) -> _PairLoads:
        """The loads of the tile's bf16 pairs, B's K stride given."""
        a_base, _, a_k_stride, _ = self._a_rows(a)
        packed = isinstance(self.inst, TileGemm) and bool(self.inst.pairs)
        masks = (self.a_masks, [self._pair_mask(q) for q in range(self.p.unpacked_pairs)])
        return _PairLoads(self.b, self.p, masks, (a_base, packed), a_k_stride, b_k_stride)

    def resident_pairs(self, a: MemrefValue, bm: MemrefValue) -> list[list[ir.Value]]:
        """A's vectors of every K pair (`GemmNanokernel.column_group` of a dot tile),
        interleaved once for the tile's column groups."""
        _, b_k_stride, depth = self._b_columns(bm)  # K from B: A may hold pairs
        pairs = self._pair_loads(a, b_k_stride)
        assert isinstance(depth, int)  # a resident tile's K is static
        return [pairs.a_pairs(const(k), k + 1 < depth) for k in range(0, depth, 2)]

    def _accumulate_pairs(self, acc: Accumulators, a: MemrefValue, bm: MemrefValue,
                          resident: list[list[ir.Value]] | None = None,
                          ) -> Accumulators:  # fmt: skip
        """K in pairs through vdpbf16ps: lane r of a[v] holds (A[r, k], A[r, k+1]) (two columns
        of A interleaved: the flat-to-VNNI shuffle, or loaded as they are from a `.pairs`
        panel), b holds (B[k, j], B[k+1, j]) in every lane. An odd K ends with one more step
        whose second column and pair half are zero, or where both packs hold zeros past K
        (`.padded`), with its last pair read whole. With A's pairs `resident`, K unrolled."""
        b, steps = self.b, _PairSteps(self, a, bm)
        depth = steps.depth
        if resident is not None:
            return self._resident_pair_steps(acc, steps, resident)
        if isinstance(self.inst, TileGemm) and self.inst.padded:  # the pair past K is zero
            body = _fetching_first(self._fetching(_udiv(b, add(b, depth, 1), 2), 2), steps.step)
            return carried_loop(b, 0, depth, 2, acc, body, name="k", unroll=False, aligned=True)
        start, acc, pair_step = self._quad_loop(acc, steps)
        main = _round_down(b, depth, 2)
        acc = carried_loop(b, start, main, 2, acc, pair_step, name="k", unroll=False, aligned=True)
        if isinstance(depth, int) and depth % 2 == 0:
            return acc
        return carried_loop(b, main, depth, 2, acc, steps.last, name="k.odd", unroll=False)

    def _resident_pair_steps(self, acc: Accumulators, steps: _PairSteps,
                             resident: list[list[ir.Value]]) -> Accumulators:  # fmt: skip
        """K unrolled over A's pairs loaded once (`resident_pairs`)."""
        depth = steps.depth
        assert isinstance(depth, int)  # a resident tile's K is static
        fetch = self._fetching(-(-depth // 2), 2)
        for q, a_vectors in enumerate(resident):
            fetch(const(2 * q))
            acc = steps.step(const(2 * q), acc, 2 * q + 1 < depth, a_vectors)
        return acc

    def _quad_loop(self, acc: Accumulators, steps: _PairSteps,
                   ) -> tuple[Dim, Accumulators, KStep]:  # fmt: skip
        """The loop of four k an iteration that comes first where the tile has one (the
        tail's K quads, or B's quads): where it stops, its accumulators, and the step of the
        loop of pairs that goes on from there."""
        b, p, depth = self.b, self.p, steps.depth
        if p.tail_quads:
            # never on group members (`tail_k_quads`), so none of its steps fetch
            start = _round_down(b, depth, 2 * TAIL_QUAD_PAIRS)
            acc = carried_loop(b, 0, start, 2 * TAIL_QUAD_PAIRS, acc, steps.quads_of_k, name="k",
                               unroll=False, aligned=True)  # fmt: skip
            return start, acc, steps.step
        if p.b_quads:
            start = _round_down(b, depth, 2 * QUAD_PAIRS)
            fetch = self._fetching(_udiv(b, depth, 2 * QUAD_PAIRS), 2 * QUAD_PAIRS)
            body = _fetching_first(fetch, steps.quad_step)
            acc = carried_loop(
                b, 0, start, 2 * QUAD_PAIRS, acc, body, name="k", unroll=False, aligned=True
            )
            return start, acc, steps.step
        return 0, acc, _fetching_first(self._fetching(_udiv(b, depth, 2), 2), steps.step)

    def _fetching(self, iterations: Dim, k_step: int) -> Callable[[Dim], None]:
        """For the `iterations` of a K loop of pairs, `k_step` k each: fetch(k) asks for the
        iteration's part of the tile's share of the next member's lines, spread over the
        loop (`_next_member_shares`). Its later iterations ask for the share's last line
        again (these loops are not split as `_k_loops` splits f32's). One loop of a tile
        asks: those of B quads (a loop of pairs after them has at most 3), of pairs else.
        Asking per pair in B quads' iterations spilled (avx512's 12x16x16)."""
        streamed = isinstance(iterations, int) and iterations > 0
        shares = self._next_member_shares(iterations) if streamed else []

        def fetch(k: Dim) -> None:
            for share in shares:
                share.prefetch(self.b, _udiv(self.b, k, k_step))

        return fetch

    def _tail_pair_dot(self, acc: ir.Value, pairs: ir.Value, other: ir.Value) -> ir.Value:
        """One K pair into a tail of K quads (`GemmNanokernel.tail_quads`): the pairs in the
        even lanes, the odd ones left as they are (masked: a zero there would meet B's
        elements of the pair, and 0 x inf is NaN)."""
        b = self.b
        lanes = 2 * pairs.type.count
        spread = vec.interleave(b, pairs, vec.zeros(pairs.type))
        other = vec.splat(b, b.extract_element(other, const(0, I32)), lanes)  # B's pair, wider
        even_lanes = [i % 2 == 0 for i in range(lanes)]
        even = ir.Constant(vec.vector_type(ir.IntType(1), lanes), even_lanes)
        return b.select(even, vec.bf16_dot(b, acc, spread, other), acc)

    def _tail_quad_lanes(self, acc: Accumulators, to_kernel: bool) -> Accumulators:
        """The tail's accumulators from C's lanes into K quads' (row r in lanes 2r and
        2r + 1, the second zero) or back (the two added)."""
        p, b = self.p, self.b
        if not p.tail_quads:
            return acc
        out = list(acc)
        for j in range(p.columns):
            index = j * p.vectors + p.vectors - 1
            x = acc[index]
            if to_kernel:
                out[index] = vec.interleave(b, x, vec.zeros(x.type))
            else:
                out[index] = b.fadd(*vec.deinterleave(b, x))
        return out

    def _lanes_of(self, x: ir.Value, v: int) -> ir.Value:
        """A full-width operand (B's broadcast, alpha, beta) as vector v computes it."""
        return vec.low_lanes(self.b, x, self.p.compute_lanes(v))

    def _broadcast(self, scalar: ir.Value) -> ir.Value:
        """B's element (or pair) in every lane. Where a narrow vector computes too, the
        broadcast is opaque to LLVM, or it broadcasts to the narrow register from memory and
        from there to the full one, a shuffle on an FMA port per column."""
        return self._opaque_where_narrow(vec.splat(self.b, scalar, self.p.lanes))

    def _opaque_where_narrow(self, full: ir.Value) -> ir.Value:
        return opaque_value(self.b, full, "v") if self.p.narrow_compute else full

    def prefetch_c(self, c: MemrefValue) -> None:
        """Every line of the tile's columns of C, for writing (`GemmNanokernel.prefetches_c`)."""
        p, b = self.p, self.b
        if not p.prefetches_c:
            return
        size = c.type.element.size
        rows = p.vectors * p.lanes
        # a column's lines from its first element's, and its last element's line
        offsets = [*range(0, rows * size, CACHE_LINE_BYTES), (rows - 1) * size]
        for j in range(p.columns):
            column = self._c_pointer(c, j, 0)
            for offset in offsets:
                prefetch(b, b.gep(column, [const(offset)], source_etype=I8), write=True)

    def _pair_mask(self, q: int) -> ir.Value | None:
        """A's mask over the 2 * lanes rows of unpacked pair q (None: all rows load)."""
        p, first = self.p, 2 * q
        if self.a_masks[first] is None and self.a_masks[first + 1] is None:
            return None
        if p.rows is not None:
            active = [p.active_lanes(v) for v in (first, first + 1)]
            return vec.static_mask(2 * p.lanes, sum(x or 0 for x in active))
        rows = self.e.index_value(self.inst.rows)
        return vec.dynamic_mask(self.b, 2 * p.lanes, first * p.lanes, rows)

    def _k_loops(self, depth: Dim, acc: Accumulators, step: Callable[..., Accumulators],
                 fetching: int) -> Accumulators:  # fmt: skip
        """The K loop, whose first `fetching` steps ask for the tile's share of the next
        member's lines. Where many steps follow them (`lowering.prefetch.QUIET_LOOP_STEPS`),
        those steps, rounded up to whole iterations, run as a loop of their own, and the
        others ask for nothing."""
        unroll = self.p.k_unroll
        assert unroll is not None
        lead = -(-fetching // unroll) * unroll
        if not fetching or not isinstance(depth, int) or depth - lead < QUIET_LOOP_STEPS:
            return self._unrolled_loop(depth, acc, step)
        acc = carried_loop(self.b, 0, lead, unroll, acc, self._unrolled(step), name="k.fetch",
                           unroll=False, aligned=True)  # fmt: skip
        return self._unrolled_loop(depth, acc, functools.partial(step, fetching=False), lead)

    def _unrolled(
        self, step: Callable[[Dim, Accumulators], Accumulators]
    ) -> Callable[[ir.Value, Accumulators], Accumulators]:
        """One iteration of a K loop: `k_unroll` steps from k."""
        b, unroll = self.b, self.p.k_unroll
        assert unroll is not None

        def unrolled(k: ir.Value, acc: Accumulators) -> Accumulators:
            for u in range(unroll):
                acc = step(add(b, k, u), acc)
            return acc

        return unrolled

    def _unrolled_loop(
        self,
        depth: Dim,
        acc: Accumulators,
        step: Callable[[Dim, Accumulators], Accumulators],
        start: int = 0,
    ) -> Accumulators:
        """K steps from `start` (a multiple of `k_unroll`) to `depth`, `k_unroll` an
        iteration, then a loop over the remainder."""
        b, unroll = self.b, self.p.k_unroll
        assert unroll is not None
        whole = unroll == 1 or (isinstance(depth, int) and depth % unroll == 0)
        if whole:
            main = depth
        elif isinstance(depth, int):
            main = depth // unroll * unroll
        else:
            main = sub(b, depth, b.srem(depth, const(unroll)))
        unrolled = self._unrolled(step)
        acc = carried_loop(b, start, main, unroll, acc, unrolled, name="k", unroll=False,
                           aligned=True)  # fmt: skip
        if whole:  # no remainder loop for LLVM to prove empty
            return acc
        return carried_loop(b, main, depth, 1, acc, step, name="k.rest", unroll=False)

    def _next_member_shares(self, depth: Dim) -> list[_LineShare]:
        """This tile's share of the lines of each next-member view (`tile.gemm ... next`),
        spread over its K loop (`lowering.prefetch`: the tiles of a gemm cover every line)."""
        inst = self.inst
        if not isinstance(inst, TileGemm) or not inst.next_views():
            return []
        assert isinstance(depth, int)  # streamed operands are static (lowering.prefetch)
        m, n = inst.c.type.shape
        b = self.b
        elements_before = add(b, mul(b, self.col, m), mul(b, self.row, inst.nr))
        shares = []
        for operand, view, write in inst.next_views():
            lines = -(-_span_bytes(view.type) // CACHE_LINE_BYTES)
            first = _udiv(b, mul(b, elements_before, lines), m * n)  # lowering.prefetch.first_line
            tile_elements = inst.mr * self.p.columns
            per_step = lines_per_step(lines, tile_elements, m * n, depth)
            asked = lines_asked(lines, tile_elements, m * n, depth)
            end = minimum(b, add(b, first, asked - 1), lines - 1)
            base = self.e.value(view).ptr
            steps = asked // per_step
            later = later_bytes(inst, operand)
            shares.append(_LineShare(base, later, first, per_step, steps, end, write))
        return shares

    def _prefetch_a(self, a: MemrefValue, base: ir.Value, k_stride: Dim, k: Dim) -> None:
        """Prefetch (for reading, into L1) the cache lines of the tile's rows of A at column
        k + `a_prefetch_steps`. Near the end that is past A: a prefetch never faults, and the
        address is computed without `inbounds`, so it stays a plain address."""
        b, element = self.b, a.type.element
        ahead = mul(b, add(b, k, self.p.a_prefetch_steps), k_stride)
        for row in range(0, self.p.vectors * self.p.lanes, CACHE_LINE_BYTES // element.size):
            offset = as_value(b, add(b, ahead, row))
            prefetch(b, b.gep(base, [offset], source_etype=memory_type(element)))

    def _a_lane_pointers(
        self, base: ir.Value, a: MemrefValue, lane_stride: Dim
    ) -> list[ir.Value] | None:
        if self.p.a_access is Access.CONTIGUOUS:
            return None
        element = memory_type(a.type.element)
        return [
            vec.lane_pointers(
                self.b,
                element_ptr(
                    self.b, base, a.type.element, mul(self.b, v * self.p.lanes, lane_stride)
                ),
                element,
                lane_stride,
                self.p.lanes,
            )
            for v in range(self.p.vectors)
        ]

    def _load_a_split(self, a: MemrefValue, bases: tuple[ir.Value, ir.Value], k_stride: Dim,
                      k: Dim, v: int, high: ir.Value | None) -> ir.Value:  # fmt: skip
        """Vector v of a split pair (`GemmNanokernel.split_pairs`): the pair's 2 * lanes bf16
        rows of column k widened, the even rows (v even) by a shift into the high halves,
        the odd ones by clearing the low halves (an and that takes the load as its operand).
        `bases`: A's base for the even rows and an opaque copy of it for the odd ones."""
        b, lanes = self.b, self.p.lanes
        assert high is not None
        offset = add(b, mul(b, k, k_stride), (v - v % 2) * lanes)
        ptr = element_ptr(b, bases[v % 2], a.type.element, offset)
        rows = b.bitcast(b.load(ptr, typ=vec.vector_type(I16, 2 * lanes), align=2), high.type)
        if v % 2:
            return b.bitcast(b.and_(rows, high), self.type)
        sixteen = ir.Constant(high.type, [ir.Constant(I32, 16)] * lanes)
        return b.bitcast(b.shl(rows, sixteen), self.type)

    def _load_a(self, a: MemrefValue, base: ir.Value, pointers: list[ir.Value] | None,
                k_stride: Dim, k: Dim, v: int) -> ir.Value:  # fmt: skip
        b, p = self.b, self.p
        element = a.type.element
        t = vec.memory_vector(element, p.vector_lanes(v))
        offset = mul(b, k, k_stride)
        if pointers is None:
            ptr = element_ptr(b, base, element, add(b, offset, v * p.lanes))
            loaded = vec.load(b, t, ptr, self.a_masks[v], element.size)
        else:
            moved = b.gep(pointers[v], [as_value(b, offset)], source_etype=memory_type(element))
            loaded = vec.gather(b, t, moved, self.a_masks[v], element.size)
        return vec.widen(b, vec.to_register(b, loaded, element, self.narrow[v]), p.compute_lanes(v))

    # -- the epilogue --------------------------------------------------------------------------
    def epilogue(self, acc: Accumulators, c: MemrefValue) -> None:
        p, b = self.p, self.b
        acc = self._reordered(self._tail_quad_lanes(acc, to_kernel=False), to_kernel=False)
        if p.atomic:
            self._atomic_epilogue(acc, c)
            return
        alpha = None if p.alpha_is_one else vec.splat(b, self._alpha(), p.lanes)
        scaled = acc
        if alpha is not None:
            scaled = [b.fmul(x, self._lanes_of(alpha, i % p.vectors)) for i, x in enumerate(acc)]
        # before the branches below, which all store through them
        vectors = [(j, v) for j in range(p.columns) for v in range(p.vectors)]
        at = _TileOfC(c, [self._c_pointer(c, j, v) for j, v in vectors])
        if p.accumulates_on_c:
            self._store_tile(scaled, at, Beta.ZERO)  # the sum already holds C
        elif p.beta is Beta.RUNTIME:
            beta = self._beta()
            with b.if_else(b.fcmp_ordered("==", beta, ir.Constant(beta.type, 0))) as (zero, other):
                with zero:
                    self._store_tile(scaled, at, Beta.ZERO)
                with other:
                    self._store_tile(scaled, at, Beta.GENERAL)
        else:
            self._store_tile(scaled, at, p.beta)

    def _store_tile(self, values: Accumulators, at: _TileOfC, beta: Beta) -> None:
        """C := values (+ beta C): as a row-major block where C is one (`RowBlock`, a run-time
        test of its row stride where that is unknown or the tile counted), else by
        columns."""
        block = self.p.c_row_block
        if block is not RowBlock.TESTED:
            store = self._store_row_block if block is RowBlock.YES else self._store_masked
            self._store_filled_or_not(values, at, beta, store)
            return
        b = self.b
        stride = as_value(b, at.c.stride[0])
        adjacent = b.icmp_signed("==", stride, ir.Constant(stride.type, self.p.columns))
        if self.column_count is not None:  # and the count fills the tile
            count = as_value(b, self.column_count)
            filled = b.icmp_signed("==", count, ir.Constant(count.type, self.p.columns))
            adjacent = b.and_(adjacent, filled)
        with b.if_else(adjacent) as (rows_adjacent, rows_apart):
            with rows_adjacent:
                self._store_filled_or_not(values, at, beta, self._store_row_block)
            with rows_apart:
                self._store_filled_or_not(values, at, beta, self._store_masked)

    def _store_filled_or_not(self, values: Accumulators, at: _TileOfC, beta: Beta,
                             store: _TileStore) -> None:  # fmt: skip
        """`store` without masks where a run-time number of rows fills the tile and the
        target's masked stores are not k-register ones: Zen 3 takes about 20 cycles per
        `vmaskmovps` store, and a generic target stores lane by lane."""
        whole = self._whole_tile()
        if whole is None:
            store(values, at, beta, self.masks)
            return
        unmasked = [None if _runtime(mask) else mask for mask in self.masks]
        with self.b.if_else(whole) as (filled, partial):
            with filled:
                store(values, at, beta, unmasked)
            with partial:
                store(values, at, beta, self.masks)

    def _store_row_block(self, values: Accumulators, at: _TileOfC, beta: Beta,
                         masks: Masks) -> None:  # fmt: skip
        """C := values (+ beta C) where the tile is one row-major block of C (`RowBlock`):
        each vector of rows interleaves its columns' vectors (`vec.interleave_columns`)
        into as many whole vectors of the block, stored where a scatter would write each
        element. Row masks become masks of the block's first rows x columns elements."""
        p, b = self.p, self.b
        c, element = at.c, at.c.type.element
        origin = self._c_origin(c)
        beta_vector = vec.splat(b, self._beta(), p.lanes) if beta is Beta.GENERAL else None
        block_mask = self._row_block_masks(masks)
        stores = []
        for v in range(p.vectors):
            columns = [values[j * p.vectors + v] for j in range(p.columns)]
            for u, value in enumerate(vec.interleave_columns(b, columns)):
                first = (v * p.columns + u) * p.lanes
                mask = block_mask(v, first)
                if mask is False:
                    continue  # past the tile's static rows
                ptr = element_ptr(b, origin, element, first)
                if beta is not Beta.ZERO:
                    old = vec.load(b, self.type, ptr, mask, element.size)
                    value = (
                        b.fadd(value, old)
                        if beta_vector is None
                        else vec.fma(b, beta_vector, old, value, p.fused)
                    )
                stores.append((value, ptr, mask))
        for value, ptr, mask in stores:
            vec.store(b, value, ptr, mask, element.size)

    def _row_block_masks(self, masks: Masks) -> Callable[[int, int], ir.Value | bool | None]:
        """(vector of rows v, first element) -> the mask of the block's elements from that
        one on, given the rows' `masks` (None: all lanes; False: none, statically). A
        run-time count of rows splats rows x columns once; each mask is one compare of it
        with the lanes' element numbers."""
        p, b = self.p, self.b
        lanes, columns = p.lanes, p.columns
        count = None
        if p.rows is None and any(mask is not None for mask in masks):
            rows = self.e.index_value(self.inst.rows)
            elements = b.trunc(b.mul(rows, ir.Constant(rows.type, columns)), I32)
            count = vec.splat(b, elements, lanes)

        def mask(v: int, first: int) -> ir.Value | bool | None:
            if masks[v] is None:
                return None
            if p.rows is not None:
                active = p.rows * columns - first
                return False if active <= 0 else vec.static_mask(lanes, active)
            numbers = ir.Constant(vec.vector_type(I32, lanes), list(range(first, first + lanes)))
            return b.icmp_signed("<", numbers, count)

        return mask

    def _whole_tile(self) -> ir.Value | None:
        """Whether the run-time number of rows fills the tile (None: no run-time mask, or
        masks in k registers, whose stores cost what plain ones do)."""
        if self.e.state.target.masked_memory or not any(_runtime(m) for m in self.masks):
            return None
        rows = self.e.index_value(self.inst.rows)
        filled = ir.Constant(rows.type, sum(map(self.p.vector_lanes, range(self.p.vectors))))
        return self.b.icmp_signed(">=", rows, filled)

    def _store_masked(self, values: Accumulators, at: _TileOfC, beta: Beta, masks: Masks) -> None:
        """C := values (+ beta C) under `masks`. Every load of C comes before the first
        store: a masked store covers a whole vector's bytes, so a later load of the next
        column overlapping them (a column shorter than the vector) could not be forwarded and
        would wait for the store to reach the cache, once per column."""
        p, b = self.p, self.b
        element = at.c.type.element
        beta_vector = vec.splat(b, self._beta(), p.lanes) if beta is Beta.GENERAL else None
        stores = []
        for j in range(p.columns):
            for v in range(p.vectors):
                ptr = at.pointers[j * p.vectors + v]
                value = values[j * p.vectors + v]
                pointers = None
                if p.c_access is Access.STRIDED:
                    row_stride = at.c.stride[0]
                    pointers = vec.lane_pointers(b, ptr, memory_type(element), row_stride, p.lanes)
                if beta is not Beta.ZERO:
                    old = self._load_c(v, ptr, pointers, element.size, masks[v])
                    value = (
                        b.fadd(value, old)
                        if beta_vector is None
                        else vec.fma(b, self._lanes_of(beta_vector, v), old, value, p.fused)
                    )
                value = vec.low_lanes(b, value, p.vector_lanes(v))
                stores.append((value, ptr, pointers, masks[v]))
        for value, ptr, pointers, mask in stores:
            if pointers is None:
                vec.store(b, value, ptr, mask, element.size)
            else:
                vec.scatter(b, value, pointers, mask, element.size)

    def _alpha(self) -> ir.Value:
        alpha = self.inst.alpha
        return convert(self.b, self.e.value(alpha), alpha.type, self.p.compute)

    def _beta(self) -> ir.Value:
        beta = self.inst.beta
        return convert(self.b, self.e.value(beta), beta.type, self.p.compute)

    def _load_c(self, v: int, ptr: ir.Value, pointers: ir.Value | None, align: int,
                mask: ir.Value | None) -> ir.Value:  # fmt: skip
        """Vector v of a column of C, zero-extended to the width it computes in."""
        t = self.narrow[v]
        if pointers is None:
            loaded = vec.load(self.b, t, ptr, mask, align)
        else:
            loaded = vec.gather(self.b, t, pointers, mask, align)
        return vec.widen(self.b, loaded, self.p.compute_lanes(v))

    def _atomic_epilogue(self, acc: Accumulators, c: MemrefValue) -> None:
        """Each element of the tile is one atomic read-modify-write of C: the tile goes to a
        stack buffer once, then a loop updates the valid elements."""
        b, p, e = self.b, self.p, self.e
        buffer = e.state.entry.alloca(ir.ArrayType(self.type, len(acc)))
        buffer.type = PTR
        for i, value in enumerate(acc):
            b.store(value, b.gep(buffer, [const(i)], source_etype=self.type))
        update = OutputUpdate(
            element=c.type.element,
            compute=p.compute,
            alpha=self._alpha(),
            beta=None if p.beta is Beta.ZERO else self._beta(),
            beta_is_one=p.beta is Beta.ONE,
            atomic=True,
        )
        mr = p.vectors * p.lanes
        with (
            for_range(b, 0, p.columns, name="j") as j,
            for_range(b, 0, self.e.dim(self.inst.rows)) as i,
        ):
            x = load_scalar(
                b,
                b.gep(
                    buffer, [b.add(b.mul(j, const(mr)), i)], source_etype=register_type(p.compute)
                ),
                p.compute,
            )
            row = mul(b, add(b, self.row, i), c.stride[0])
            column = mul(b, add(b, self.col, j), c.stride[1])
            write_output(b, update, element_ptr(b, c.ptr, c.type.element, add(b, row, column)), x)


class _FmaSteps:
    """The k steps of an FMA tile (`NanokernelEmitter.accumulate`): each takes k and the
    carried values (the accumulators, then the column walk's pointers) and returns the new
    ones."""

    def __init__(self, kernel: NanokernelEmitter, count: int, a: MemrefValue, bm: MemrefValue,
                 resident: list[list[ir.Value]] | None) -> None:  # fmt: skip
        b, p = kernel.b, kernel.p
        self.kernel, self.b, self.p, self.count = kernel, b, p, count
        self.a, self.bm, self.resident = a, bm, resident
        self.a_base, a_row_stride, self.a_k_stride, self.depth = kernel._a_rows(a)
        self.walk = kernel._column_walk(bm)
        copies = range(1, p.vectors) if p.b_per_vector else ()
        self.walks = [self.walk] + [kernel._column_walk(bm, copy=True) for _ in copies]
        self.a_pointers = kernel._a_lane_pointers(self.a_base, a, a_row_stride)
        self.shares = kernel._next_member_shares(self.depth)
        self.high = kernel._bf16_high_halves(a, bm)
        # the odd rows of split pairs load from a copy of A's base that LLVM cannot see is
        # the same, or it loads each pair once and keeps the load live beside its two halves
        # (a 2 x 6 tile then spilled its accumulators)
        self.a_again = opaque_value(b, self.a_base, "r") if p.split_pairs else self.a_base
        self.quads = _BQuads(b, p)

    def step(self, k: Dim, carried: list[ir.Value], fetching: bool = True) -> list[ir.Value]:
        """One k step: its prefetches, its FMAs, and the column walk's next pointers."""
        b, p, kernel = self.b, self.p, self.kernel
        acc, groups = carried[: self.count], carried[self.count :]
        if p.prefetches_a:
            kernel._prefetch_a(self.a, self.a_base, self.a_k_stride, k)
        for share in self.shares if fetching else ():
            share.prefetch(b, k)

        def broadcast(j: int, v: int = 0) -> ir.Value:
            return self._broadcast(k, groups, j, v)

        fmas = kernel._fmas(acc, lambda v: self._a_vector(k, v), broadcast)
        return fmas + self.walk.advance(b, groups)

    def _a_vector(self, k: Dim, v: int) -> ir.Value:
        """A's vector v of step k."""
        if self.resident is not None:  # resident only with K unrolled
            return self.resident[k][v]  # type: ignore[index]
        a, kernel = self.a, self.kernel
        if v < 2 * self.p.split_pairs:
            bases = (self.a_base, self.a_again)
            return kernel._load_a_split(a, bases, self.a_k_stride, k, v, self.high)
        return kernel._load_a(a, self.a_base, self.a_pointers, self.a_k_stride, k, v)

    def _broadcast(self, k: Dim, groups: list[ir.Value], j: int, v: int) -> ir.Value:
        """B[k, j] in every lane, or where each vector reads its own (`b_per_vector`), in
        vector v's lanes from v's copy of B's base."""
        b, p, kernel, element_type = self.b, self.p, self.kernel, self.bm.type.element
        if self.quads.covers(j):
            return self.quads.splat(j, lambda: self.walks[v].column(b, j, k, groups))
        element = self.walks[v].column(b, j, k, groups)
        if p.b_per_vector:
            scalar = load_scalar(b, element, element_type)
            return vec.splat(b, scalar, p.compute_lanes(v))
        if self.high is not None and element_type is ScalarType.BF16:
            bits = b.load(element, typ=I16)
            return kernel._opaque_where_narrow(vec.splat_bf16(b, bits, self.high))
        if element_type is ScalarType.F16 and kernel._converts_f16_broadcasts():
            bits = b.load(element, typ=I16)
            return kernel._opaque_where_narrow(vec.splat_f16(b, bits, p.lanes))
        scalar = load_scalar(b, element, element_type)
        return kernel._broadcast(convert(b, scalar, element_type, p.compute))


class _PairSteps:
    """The k steps of a bf16 dot tile (`NanokernelEmitter._accumulate_pairs`): each takes k
    and the accumulators and returns the new ones."""

    def __init__(self, kernel: NanokernelEmitter, a: MemrefValue, bm: MemrefValue):
        self.kernel, self.b, self.p = kernel, kernel.b, kernel.p
        # K from B: A may hold pairs
        self.b_bases, self.b_k_stride, self.depth = kernel._b_columns(bm)
        self.pairs = kernel._pair_loads(a, self.b_k_stride)
        self.tail = self.p.vectors - 1 if self.p.tail_quads else None
        copies = range(1, self.p.vectors) if self.p.b_per_vector else ()
        self.bases = [self.b_bases] + [kernel._b_columns(bm, copy=True)[0] for _ in copies]

    def step(self, k: ir.Value, acc: Accumulators, second: bool = True,
             a_vectors: list[ir.Value] | None = None,
             count: int | None = None) -> Accumulators:  # fmt: skip
        """One K pair of the tile's first `count` vectors (all by default)."""
        count = self.p.vectors if count is None else count
        a_vectors = a_vectors or self.pairs.a_pairs(k, second, count)
        out = list(acc)
        for j in range(self.p.columns):
            for v, bj in enumerate(self._b_pairs(j, k, second, count)):
                index = j * self.p.vectors + v
                if v == self.tail:
                    out[index] = self.kernel._tail_pair_dot(out[index], a_vectors[v], bj)
                else:
                    out[index] = vec.bf16_dot(self.b, out[index], a_vectors[v], bj)
        return out

    def last(self, k: ir.Value, acc: Accumulators) -> Accumulators:
        """An odd K's last step: the pair's second half is zero."""
        return self.step(k, acc, second=False)

    def quads_of_k(self, k: ir.Value, acc: Accumulators) -> Accumulators:
        """Four k: two pair steps of the other vectors, one step of the tail's quads."""
        b, p, tail = self.b, self.p, self.tail
        assert tail is not None
        out = self.step(b.add(k, const(2)), self.step(k, acc, count=tail), count=tail)
        a_quads = self.pairs.tail_quads(k, tail)
        for j in range(p.columns):
            index = j * p.vectors + tail
            b_quad = self.pairs.b_quad_splat(self.bases[tail if p.b_per_vector else 0][j], k)
            out[index] = vec.bf16_dot(b, out[index], a_quads, b_quad)
        return out

    def quad_step(self, k: ir.Value, acc: Accumulators) -> Accumulators:
        """QUAD_PAIRS steps, the even columns' pairs from one load each."""
        b, p, pairs = self.b, self.p, self.pairs
        a_steps = [pairs.a_pairs(b.add(k, const(2 * t)), True) for t in range(QUAD_PAIRS)]
        out = list(acc)
        for j, base in enumerate(self.b_bases):
            for t, bj in enumerate(pairs.b_quad(base, k, shuffled=j % 2 == 0)):
                for v, av in enumerate(a_steps[t]):
                    index = j * p.vectors + v
                    out[index] = vec.bf16_dot(b, out[index], av, self.kernel._lanes_of(bj, v))
        return out

    def _b_pairs(self, j: int, k: ir.Value, second: bool, count: int) -> list[ir.Value]:
        """Column j's pair of step k as each of the first `count` vectors computes with it:
        one broadcast, or where the pair is one load, from each vector's copy of B
        (`b_per_vector`)."""
        p, pairs = self.p, self.pairs
        if p.b_per_vector and second and self.b_k_stride == 1:
            return [
                vec.splat(self.b, pairs.b_pair(self.bases[v][j], k, second), p.compute_lanes(v))
                for v in range(count)
            ]
        bj = self.kernel._broadcast(pairs.b_pair(self.b_bases[j], k, second))
        return [self.kernel._lanes_of(bj, v) for v in range(count)]


def _runtime(mask: ir.Value | None) -> bool:
    """Whether `mask` is decided at run time (a run-time number of rows)."""
    return mask is not None and not isinstance(mask, ir.Constant)


def _a_covers_tile(inst: TileGemm | TileBatchGemm, p: GemmNanokernel) -> bool:
    """A's static shape holds all mr rows of the tile from a static first row."""
    if isinstance(inst, TileBatchGemm) or not isinstance(inst.row, Constant):
        return False
    rows = inst.a.type.shape[1 if inst.trans_a is Transpose.T else 0]
    return rows != DYNAMIC and int(inst.row.value) + p.vectors * p.lanes <= rows


def _round_down(b: ir.IRBuilder, x: Dim, multiple: int) -> Dim:
    """x rounded down to a multiple of `multiple` (a power of two)."""
    return x - x % multiple if isinstance(x, int) else b.and_(x, const(-multiple))


def schedule_barrier(b: ir.IRBuilder) -> None:
    """Keep LLVM from interleaving neighbouring tiles: their straight-line code (K unrolled)
    would otherwise share one block and the scheduler would overlap their live ranges until
    registers spill. An empty asm statement that clobbers memory is a scheduling fence."""
    fence = ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", side_effect=True)
    b.call(fence, [])


def own_base_register(b: ir.IRBuilder, m: MemrefValue) -> MemrefValue:
    """m with its data pointer passed through an empty asm statement, which LLVM cannot see
    through: the tile then addresses m from a register of its own plus constant
    displacements. Otherwise loop strength reduction lets the operands of a loop's members
    (A_i, B_i, C_i at base + i * stride) share one index register, and every FMA with a
    memory operand and every store of C takes an indexed address, which Intel cores issue as
    two micro-ops (un-lamination). Batches of f32 16^3 ran 1.1-1.3x faster with it."""
    return dataclasses.replace(m, ptr=opaque_value(b, m.ptr, "r"))


class _PairLoads:
    """Loads of bf16 pairs along K for the dot-product nanokernel."""

    def __init__(self, b: ir.IRBuilder, p: GemmNanokernel, masks: tuple[Masks, Masks],
                 a: tuple[ir.Value, bool], a_k_stride: Dim, b_k_stride: Dim):  # fmt: skip
        """`masks`: A's per vector and per unpacked pair of vectors. `a`: A's base and
        whether it is a VNNI panel (its column k / 2 holds the pairs)."""
        self.b, self.p = b, p
        self.masks, self.pair_masks = masks
        self.a_base, self.packed = a
        self.a_k_stride, self.b_k_stride = a_k_stride, b_k_stride
        self.pairs = vec.vector_type(I32, p.lanes)

    def a_pairs(self, k: ir.Value, second: bool, count: int | None = None) -> list[ir.Value]:
        """The pairs (A[r, k], A[r, k+1]) of the rows (`kernel_row`) of every vector, or of
        the first `count` (not within an unpacked pair)."""
        p = self.p
        count = p.vectors if count is None else count
        if self.packed:
            return [self._panel_pairs(k, v) for v in range(count)]
        unpacked = [x for q in range(p.unpacked_pairs) for x in self._unpacked(k, q, second)]
        rest = range(2 * p.unpacked_pairs, count)
        return unpacked + [self._interleaved(k, v, second) for v in rest]

    def _panel_pairs(self, k: ir.Value, v: int) -> ir.Value:
        """From a VNNI panel, as they are (an odd K's last pair is zero-padded there), in
        the lanes the vector computes in (a narrowed last one's own: the panel holds whole
        vectors)."""
        b = self.b
        offset = add(b, mul(b, b.udiv(k, const(2)), self.a_k_stride), 2 * v * self.p.lanes)
        ptr = element_ptr(b, self.a_base, ScalarType.BF16, offset)
        lanes = vec.vector_type(I32, self.p.compute_lanes(v))
        return b.load(ptr, typ=lanes, align=4)

    def _unpacked(self, k: ir.Value, q: int, second: bool) -> list[ir.Value]:
        """Vectors 2q and 2q + 1: their 2 * lanes rows of columns k and k+1, loaded whole
        and interleaved within 128-bit lanes (vpunpcklwd, vpunpckhwd: one single-cycle
        shuffle per vector; the cross-lane vpermt2w that interleaves 16 rows in order made
        a 64^3 batch-reduce 1.12-1.17x slower)."""
        b, p, first = self.b, self.p, 2 * q
        wide = vec.vector_type(I16, 2 * p.lanes)
        mask = self.pair_masks[q]
        low = self._column(k, first, wide, mask)
        high = self._column(b.add(k, const(1)), first, wide, mask) if second else vec.zeros(wide)
        out = []
        for vector in (first, first + 1):
            rows = [p.kernel_row(vector, lane) - first * p.lanes for lane in range(p.lanes)]
            picks = [row + half * 2 * p.lanes for row in rows for half in (0, 1)]
            pairs = b.shuffle_vector(
                low, high, ir.Constant(vec.vector_type(I32, 2 * p.lanes), picks)
            )
            out.append(b.bitcast(pairs, self.pairs))
        return out

    def _interleaved(self, k: ir.Value, v: int, second: bool) -> ir.Value:
        """Vector v alone: its rows of columns k and k+1, interleaved in order (a narrowed
        last vector's in the low lanes)."""
        b, lanes = self.b, self.p.vector_lanes(v)
        half = vec.vector_type(I16, lanes)
        if second and self._adjacent_columns(v):
            # one load of both columns (a second load and a two-source vpermt2w cost a
            # load slot in tiles whose loads set the pace: bf16 8^3 1.12-1.17x)
            both = self._column(k, v, vec.vector_type(I16, 2 * lanes), None)
            pairs = b.bitcast(vec.interleave_halves(b, both), vec.vector_type(I32, lanes))
            return vec.widen(b, pairs, self.p.compute_lanes(v))
        low = self._column(k, v, half, self.masks[v])
        if second:
            high = self._column(b.add(k, const(1)), v, half, self.masks[v])
            # each column a plain load into the low half of a register: left to itself, LLVM
            # loads them by broadcasts (vbroadcasti64x4), which on Zen 5 take a shuffle slot
            # as well (24 vdpbf16ps with 4 vpermt2w after broadcasts: 1.10x their time,
            # after plain loads 1.01x; bench/instruction_mix.py)
            low, high = (opaque_value(b, vec.widen(b, x, 2 * lanes), "v") for x in (low, high))
            interleaved = vec.interleave(b, low, high, lanes)
        else:
            interleaved = vec.interleave(b, low, vec.zeros(half))
        pairs = b.bitcast(interleaved, vec.vector_type(I32, lanes))
        return vec.widen(b, pairs, self.p.compute_lanes(v))

    def _adjacent_columns(self, v: int) -> bool:
        """Whether vector v's rows of column k + 1 follow its rows of column k in memory: A
        not a panel, the tile one whole vector, and A's columns that vector's rows apart."""
        p = self.p
        whole = p.vectors == 1 and self.masks[v] is None
        return not self.packed and whole and self.a_k_stride == p.vector_lanes(v)

    def _column(self, k: ir.Value, v: int, t: ir.VectorType, mask: ir.Value | None) -> ir.Value:
        """`t` of column k from vector v's first row."""
        b = self.b
        offset = add(b, mul(b, k, self.a_k_stride), v * self.p.lanes)
        ptr = element_ptr(b, self.a_base, ScalarType.BF16, offset)
        return vec.load(b, t, ptr, mask, 2)

    def b_quad(self, base: ir.Value, k: ir.Value, shuffled: bool) -> list[ir.Value]:
        """(B[k + 2t, j], B[k + 2t + 1, j]) in every lane, for t < QUAD_PAIRS: B's column
        (adjacent along K) loaded 128 bits at a time into every 128-bit lane and each pair
        picked by an in-lane shuffle (vpshufd), or (not `shuffled`) a broadcast load each."""
        b, lanes = self.b, self.p.lanes
        if not shuffled:
            steps = [b.add(k, const(2 * t)) for t in range(QUAD_PAIRS)]
            return [vec.splat(b, self.b_pair(base, kt, True), lanes) for kt in steps]
        quad_t = vec.vector_type(I32, QUAD_PAIRS)
        quad = b.load(element_ptr(b, base, ScalarType.BF16, k), typ=quad_t, align=2)
        repeated = vec.repeat(b, quad, lanes)
        # opaque (an AVX-512 register), or LLVM folds each shuffle back into a broadcast load
        repeated = opaque_value(b, repeated, "v")
        return [vec.in_lane_splat(b, repeated, t, QUAD_PAIRS) for t in range(QUAD_PAIRS)]

    def tail_quads(self, k: ir.Value, v: int) -> ir.Value:
        """The tail vector v's K quads (`GemmNanokernel.tail_quads`): lane 2r holds
        (A[r, k], A[r, k+1]), lane 2r + 1 (A[r, k+2], A[r, k+3]), for its rows r: the four
        columns' rows transposed by two interleaves of columns and one of pairs."""
        b, lanes = self.b, self.p.vector_lanes(v)
        rows = vec.vector_type(I16, lanes)
        columns = [self._column(b.add(k, const(i)), v, rows, self.masks[v]) for i in range(4)]
        halves = [
            b.bitcast(vec.interleave(b, columns[i], columns[i + 1]), vec.vector_type(I32, lanes))
            for i in (0, 2)
        ]
        return vec.interleave(b, *halves)

    def b_quad_splat(self, base: ir.Value, k: ir.Value) -> ir.Value:
        """B[k:k+4, j] (adjacent along K) in every 64-bit lane of the tail's quads."""
        b = self.b
        lanes = 2 * self.p.vector_lanes(self.p.vectors - 1)
        quad = b.load(element_ptr(b, base, ScalarType.BF16, k), typ=ir.IntType(64), align=2)
        return b.bitcast(vec.splat(b, quad, lanes // 2), vec.vector_type(I32, lanes))

    def b_pair(self, base: ir.Value, k: ir.Value, second: bool) -> ir.Value:
        """(B[k, j], B[k+1, j]) as one i32: a single load where the two are adjacent."""
        b = self.b
        first = element_ptr(b, base, ScalarType.BF16, mul(b, k, self.b_k_stride))
        if second and self.b_k_stride == 1:
            return b.load(first, typ=I32, align=2)
        low = b.zext(b.load(first, typ=I16), I32)
        if not second:
            return low
        following = element_ptr(
            b, base, ScalarType.BF16, mul(b, b.add(k, const(1)), self.b_k_stride)
        )
        high = b.zext(b.load(following, typ=I16), I32)
        return b.or_(low, b.shl(high, const(16, I32)))


@emits(TileGemm)
def _tile_gemm(e: FunctionEmitter, inst: TileGemm) -> None:
    kernel = NanokernelEmitter(e, plan(inst, e.state.target), inst)
    schedule_barrier(e.b)
    a, bm, c = (own_base_register(e.b, e.value(x)) for x in (inst.a, inst.b, inst.c))
    kernel.prefetch_c(c)
    if kernel.p.column_group:
        _column_groups(e, inst, kernel, (a, bm, c))
    else:
        kernel.epilogue(kernel.accumulate(kernel.initial(c), a, bm), c)
    schedule_barrier(e.b)


def _column_groups(e: FunctionEmitter, inst: TileGemm, kernel: NanokernelEmitter,
                   operands: tuple[MemrefValue, MemrefValue, MemrefValue]) -> None:  # fmt: skip
    """The tile with A resident: its columns `column_group` at a time, each group a kernel
    of its own on A's vectors (or pairs) loaded once; a dot tile's full groups in a loop
    (unrolled, bf16 64x64x8 took 0.45 s to compile, 16x1024x4 3.7 s; looped 48 and 67 ms,
    and in L2 batches 0.92-1.03x as fast), the rest after them. Where the last
    vector is masked, its store covers bytes of the next column, whose load would wait for
    the store to reach the cache (not forwarded from it): the groups then go every other
    one, and the next group's first column lies a group away (bf16 70x40x2 in L2 ran 1.78x
    faster, 35x9x9 1.04x, both resident pairs on Zen 4)."""
    a, bm, c = operands
    p = kernel.p
    resident = kernel.resident_pairs(a, bm) if p.dot else kernel.resident_a(a)
    width = p.column_group
    full, rest = divmod(p.columns, width)
    last = p.vectors - 1
    starts = [0, 1] if p.active_lanes(last) != p.vector_lanes(last) and full > 1 else [0]
    stride = len(starts) * width

    def group(first: Dim, columns: int) -> None:
        plan = dataclasses.replace(p, columns=columns, column_group=0)
        sub = NanokernelEmitter(e, plan, inst, first_column=first)
        sub.epilogue(sub.accumulate(sub.initial(c), a, bm, resident), c)

    for start in starts:
        if p.dot:
            with for_range(
                e.b, start * width, full * width, stride, "group", unroll=False
            ) as first:
                group(first, width)
        else:
            for first in range(start * width, full * width, stride):
                group(first, width)
    if rest:
        group(full * width, rest)


@emits(TileBatchGemm)
def _tile_batch_gemm(e: FunctionEmitter, inst: TileBatchGemm) -> None:
    kernel = NanokernelEmitter(e, plan(inst, e.state.target), inst)

    def element(index: ir.Value, acc: Accumulators) -> Accumulators:
        a, bm = e.region(inst.body, [index])
        return kernel.accumulate(acc, a, bm)

    b = e.b
    start, stop, step = (e.dim(v) for v in (inst.start, inst.stop, inst.step))
    initial = kernel.initial(e.value(inst.c))
    if step == 1:
        acc = carried_loop(b, start, stop, 1, initial, element, name="batch")
    else:
        trips = trip_count(b, as_value(b, start), as_value(b, stop), as_value(b, step))

        def counted(t: ir.Value, acc: Accumulators) -> Accumulators:
            return element(b.add(as_value(b, start), b.mul(t, as_value(b, step))), acc)

        acc = carried_loop(b, 0, trips, 1, initial, counted, name="batch")
    # C := C + alpha * (empty sum) is not the loop that runs no iteration: alpha = inf or NaN
    # would write NaN, and -0.0 would come back +0.0. (Folded away for a static trip count.)
    with b.if_then(loop_runs(b, *(as_value(b, d) for d in (start, stop, step)))):
        kernel.epilogue(acc, e.value(inst.c))


def trip_count(b: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: ir.Value) -> ir.Value:
    """Iterations of `for (v = start; v < stop; v += step)`: none for step <= 0 (as `for`
    runs), and computed without overflow: (stop - start - 1) / step + 1, unsigned."""
    runs = loop_runs(b, start, stop, step)
    safe_step = b.select(runs, step, const(1))
    count = b.add(b.udiv(b.sub(b.sub(stop, start), const(1)), safe_step), const(1))
    return b.select(runs, count, const(0))
