"""Nanokernels: a register-tile microkernel mapped onto one target's vector instructions.

A `GemmNanokernel` is the plan for one `tile.gemm` / `tile.batch_gemm` on one target: the
vector type, how many vectors make a tile column, which lanes of the last one are masked, how
A and C are reached (contiguous vector loads, or per-lane gathers for strided layouts), how
far the K loop is unrolled, and which alpha/beta epilogue applies. Its `listing()` is the
nanokernel's instruction sequence (`nanotc compile --emit nano`); the LLVM emitter
(`nanotc.codegen.llvm.nanokernel`) follows it instruction for instruction:

    zero        acc[v][j] := 0                               (prologue)
    vload       a[v] := A[row + v*L : row + (v+1)*L, k]      (masked on the last vector)
    vbroadcast  b := B[k, col + j] in every lane
    vfma        acc[v][j] := a[v] * b + acc[v][j]
    epilogue    C[tile] := alpha * acc + beta * C[tile]      (C not read when beta = 0)

A one-vector f32 tile whose FMAs start faster than the load ports take broadcasts may take
B's elements of its even columns four at a time instead, from one 128-bit load and in-lane
shuffles (`fma_b_quads`). A bf16 dot tile of two vectors may run a last vector of 4 rows or
fewer in one twice as wide whose lane pairs hold two K pairs of a row (`tail_k_quads`).

A one-vector tile that is all of C, with K unrolled, may instead keep A resident
(`column_group`): A's K vectors are loaded once, then the columns go through the steps above
a group at a time, each group's C loaded, updated and stored before the next group's. A bf16
dot tile that is all of C may do the same with A's K pairs (`resident_pairs_fit`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from nanotc.ir.instructions import Transpose
from nanotc.ir.tile import TileBatchGemm, TileGemm
from nanotc.ir.types import DYNAMIC, MemRefType, ScalarType
from nanotc.ir.values import Constant, Value, literal_in
from nanotc.lowering.prefetch import left_to_hardware, on_group_views
from nanotc.lowering.register_tile import (
    FMA_LATENCY,
    FMA_PORTS,
    RegisterTile,
    a_stays_in_l1,
    holds_b_columns,
    target_overhead,
    unrolled_steps_fit,
    unrolls_k,
)
from nanotc.targets import Target

# k steps ahead: about L2's latency over one step of a full tile (W3 1.02x, W1 f64 1.05x;
# 2 and 8 measured the same on Zen 4)
A_PREFETCH_STEPS = 4
# k steps ahead in a K loop longer than DEEP_A_PREFETCH_K (or unknown): enough for A's lines
# to come from L3, where a Zen 3's 512 KiB L2 sends W3's row panels of A. 4 left the first
# tile of each panel waiting: 16 ran 1.13-1.22x faster on 3136x64x256, 3136x64x576 and
# 12544x64x147 (W1 1024^3 0.98x; 32 no better than 16). Batch members, whose K loops are
# short, keep 4.
DEEP_A_PREFETCH_STEPS = 16
DEEP_A_PREFETCH_K = 64
# a static K from which a K loop over an A that stays in L1 asks for none of it
# (`GemmNanokernel.a_resident`)
RESIDENT_A_MIN_K = 32
LONG_K = 256  # a static K from which a tile's K loop is long (`short_dot_chains`)
# a static K from which a tile's K loop outlasts the fetch of C's lines (`prefetches_c`)
PREFETCH_C_K = 16
SHORT_CHAIN_ACCUMULATORS = 12  # dot tiles of a short K this large start from zero
MIN_VECTOR_BYTES = 16  # xmm: the narrowest vectors a tile may use
SPLIT_K_PER_COLUMN = 5  # k steps per column from which a bf16 tile splits A (`split_pays`)
RESIDENT_PAIR_CHAINS = 8  # accumulators a group of a resident-pairs tile keeps in flight


class Access(enum.Enum):
    CONTIGUOUS = "vector"
    STRIDED = "gather"


class RowBlock(enum.Enum):
    """Whether a strided C's tile is one block of memory in row-major order: its columns
    adjacent and its rows as many elements apart as the tile has columns (the C^T of a C of
    that many rows, `gemm_few_rows`). Such a tile interleaves its columns' vectors in
    registers and stores whole vectors where it would scatter."""

    NO = "no"
    YES = "yes"
    TESTED = "when C's row stride is the tile's columns (and a count of them fills it)"


# K pairs of a B column in one 128-bit load (four 32-bit bf16 pairs)
QUAD_PAIRS = 4
QUAD_ELEMENTS = 4  # f32 elements of a B column in one 128-bit load (`fma_b_quads`)
# registers beside an FMA tile's accumulators and its quads (measured: a K loop of 1 x 18
# spilled; K loops are left out, `fma_b_quads`)
QUAD_SPARE_REGISTERS = 8
TAIL_QUAD_PAIRS = 2  # K pairs a lane pair of a dot tile's tail holds (`tail_k_quads`)
TAIL_QUAD_MIN_K = 16  # ... from this static K
QUAD_STEP_REGISTERS = 14  # live beside a one-vector tile in a quad step (measured: 1 x 19 spilled)


class Beta(enum.Enum):
    ZERO = "0"  # C is only written
    ONE = "1"
    GENERAL = "beta"
    RUNTIME = "beta (zero tested at run time)"


@dataclass(frozen=True)
class GemmNanokernel:
    target: str
    compute: ScalarType
    lanes: int
    vectors: int  # mv
    columns: int  # nr
    rows: int | None  # valid rows of the tile when static
    a_access: Access
    c_access: Access
    k_unroll: int | None  # None: K fully unrolled
    fused: bool
    beta: Beta
    alpha_is_one: bool
    atomic: bool
    batched: bool
    dot: bool = False  # bf16 pairs along K through vdpbf16ps (VNNI) instead of FMAs
    tail_lanes: int | None = None  # lanes of the last vector when narrower than `lanes`
    unpacked_pairs: int = 0  # dot: leading vector pairs whose A pairs come from in-lane unpacks
    split_pairs: int = 0  # widened bf16: leading vector pairs holding even and odd rows
    long_k: bool = False  # K unknown or at least LONG_K
    c_ahead: bool = False  # C's lines fetched before the K loop (`fetches_c_ahead`)
    a_prefetch_steps: int = A_PREFETCH_STEPS  # how far ahead `prefetches_a` asks for A
    # B's elements (dot: K pairs) of even columns by 128-bit loads and in-lane shuffles
    b_quads: bool = False
    memory_bound: bool = False  # a gemm left to the hardware prefetchers (lowering.prefetch)
    a_fetched: bool = False  # A in L1, asked for by the tiles before (`tile.gemm.fetched`)
    c_row_block: RowBlock = RowBlock.NO  # a strided C stored as a row-major block
    a_resident: bool = False  # A stays in L1 and K is long (`resident_a`)
    narrow_compute: bool = False  # a narrowed last vector computes at its own width too
    column_group: int = 0  # A resident: the columns go this many at a time (0: all at once)
    b_columns_held: bool = False  # a k step holds B's broadcasts, A one vector at a time
    b_per_vector: bool = False  # each vector's FMA reads B's broadcast from memory ({1toN})
    tail_quads: bool = False  # dot: the narrow last vector's rows hold two K pairs each
    counted: bool = False  # columns past a run-time count repeat the last (`tile.gemm ... valid`)

    def compute_lanes(self, vector: int) -> int:
        """Lanes one vector of a tile column computes in: a narrowed last vector computes at
        full width (one broadcast of B serves all vectors), except where the target's FMA
        units are narrower than its vectors (`narrow_compute`)."""
        return self.vector_lanes(vector) if self.narrow_compute else self.lanes

    @property
    def reordered_pairs(self) -> int:
        """Leading vector pairs whose rows the kernel holds out of C's order."""
        return self.unpacked_pairs or self.split_pairs

    def kernel_row(self, vector: int, lane: int) -> int:
        """The tile row that lane `lane` of accumulator `vector` holds. An unpacked pair of
        vectors (2q, 2q+1) covers rows R = 2q*lanes onwards as the in-lane unpack of two
        columns of A leaves them: 128-bit lane L of the low vector holds rows R+8L..R+8L+3,
        of the high one R+8L+4..R+8L+7. A split pair holds the even rows from R in the low
        vector, the odd ones in the high. Every other vector holds its rows in order."""
        if vector >= 2 * self.reordered_pairs:
            return vector * self.lanes + lane
        first = (vector - vector % 2) * self.lanes
        if self.split_pairs:
            return first + 2 * lane + vector % 2
        return first + 8 * (lane // 4) + 4 * (vector % 2) + lane % 4

    def vector_lanes(self, vector: int) -> int:
        """Lanes of one vector of a tile column: all but a narrowed last one have `lanes`."""
        last = vector == self.vectors - 1
        return self.tail_lanes if last and self.tail_lanes is not None else self.lanes

    @property
    def accumulates_on_c(self) -> bool:
        """C := C + A B with f32/f64 C in whole vectors: the accumulators start as the tile
        of C, so the epilogue only stores (no zeroing, no second pass over C). Not with masked
        vectors: a masked store covers a whole vector's bytes, and the next tile's first load
        of C overlapping them, issued right after it, could not be forwarded from it. Not for
        dot tiles of a short K either (`short_dot_chains`)."""
        whole = (self.vectors - 1) * self.lanes + self.vector_lanes(self.vectors - 1)
        return (
            self.rows == whole
            and self.beta is Beta.ONE
            and self.alpha_is_one
            and not self.atomic
            and self.c_access is Access.CONTIGUOUS
            and self.compute in (ScalarType.F32, ScalarType.F64)
            and not self.short_dot_chains
        )

    @property
    def short_dot_chains(self) -> bool:
        """A dot tile of a short static K (below LONG_K) with at least
        SHORT_CHAIN_ACCUMULATORS accumulators: each accumulator's chain is only K/2 dot
        products long, so chains started from C's loads (from L2 when the tile is a batch
        member) wait for them; started from zero, only the epilogue's adds do, and those run
        beside the dot products. In-process, W4's bf16 batches in L2 (256 KB): 56x9x9
        1.02-1.035x, 16^3 1.00-1.09x, 32^3 1.02-1.05x, 64^3 1.00-1.03x, 20x9x20 0.99-1.03x;
        in L1 (16 KB) 56x9x9 1.06-1.07x. 8^3 (tiles of 8 accumulators, whose adds weigh
        more) lost 3% in two runs of three, so smaller tiles keep C's loads."""
        return (
            self.dot and not self.long_k and self.vectors * self.columns >= SHORT_CHAIN_ACCUMULATORS
        )

    @property
    def prefetches_a(self) -> bool:
        """A K loop over a contiguous A prefetches A's rows `a_prefetch_steps` steps ahead:
        A comes from L2 in every K loop but the first tile's, in steps the hardware
        prefetchers follow late (column strides cross pages). Not in a gemm left to the
        hardware prefetchers (`memory_bound`), nor where the tiles before asked for A's lines
        (`a_fetched`: W3's row panels on a Zen 3 ran 1.01-1.05x faster without), nor over an
        A that stays in L1 (`a_resident`)."""
        contiguous = self.a_access is Access.CONTIGUOUS
        asked = self.memory_bound or self.a_fetched or self.a_resident
        return self.k_unroll is not None and contiguous and not asked

    @property
    def prefetches_c(self) -> bool:
        """A tile that reads or writes C only after its K loop (`c_ahead`) asks for C's lines
        for writing before the loop: C of a blocked gemm lies past L2, and the epilogue's
        loads (or the stores' fetches) otherwise waited for memory. W1 f32 1024^3 and 2048^3
        ran 1.05-1.07x faster, f64 1.06-1.09x, the bf16 512x2048x2048 MLP layer (two K
        blocks) 1.04x. From K = 16 (it was 256): even 16 steps of a tile outlast most of the
        fetch, and W3's short-K row panels stored C into lines still on their way from L3 or
        memory. On a Zen 3, in one process against K from 256: 12544x64x147 1.22-1.27x,
        3136x64x64 1.29-1.34x, 3136x256x64 1.16-1.32x, 784x512x128 1.07-1.15x, and off W3
        3136x64x16 1.22x, 800x800x24 1.01-1.04x."""
        return (
            self.c_ahead
            and not self.accumulates_on_c
            and not self.atomic
            and self.c_access is Access.CONTIGUOUS
        )

    def active_lanes(self, vector: int) -> int | None:
        """Active lanes of one vector of a tile column (None: decided by a run-time mask,
        on every vector, since a run-time remainder may be shorter than one vector)."""
        if self.rows is None:
            return None
        return max(0, min(self.vector_lanes(vector), self.rows - vector * self.lanes))

    def listing(self, resident: bool = False) -> str:
        """`resident`: the listing of one column group, A's vectors already loaded."""
        if self.column_group:
            return self._resident_listing()
        L, mv, nr = self.lanes, self.vectors, self.columns
        rows = f"{mv}x{L}" if self.tail_lanes is None else f"{mv - 1}x{L}+{self.tail_lanes}"
        narrow = f" (the last in {self.tail_lanes})" if self.narrow_compute else ""
        lines = [
            f"nanokernel {self.compute} on {self.target}: {rows} rows x {nr} columns, "
            f"{mv * nr} accumulators{narrow}, fma={'fused' if self.fused else 'mul+add'}",
            f"  acc[0..{mv - 1}][0..{nr - 1}] := " + ("C[tile]" if self.accumulates_on_c else "0"),
        ]
        if self.counted:
            lines.append("  columns from the run-time count on read B and C at the last counted")
        if self.reordered_pairs:
            pairs = ", ".join(f"acc{2 * q},{2 * q + 1}" for q in range(self.reordered_pairs))
            order = "unpack" if self.unpacked_pairs else "even/odd"
            lines.append(f"  rows of {pairs} in {order} order (permuted from and back to C's)")
        if self.prefetches_c:
            lines.append("  prefetchw every line of C[tile] (read or written after the K loop)")
        if self.batched:
            lines.append("  for each batch element: A, B := region(b)")
        unroll = "full" if self.k_unroll is None else f"unroll {self.k_unroll}"
        if self.dot:
            lines.extend(self._dot_listing(resident))
        else:
            lines.extend(self._fma_listing(unroll, resident))
        alpha = "acc" if self.alpha_is_one else "alpha*acc"
        beta = {Beta.ZERO: "", Beta.ONE: " + C", Beta.GENERAL: " + beta*C"}.get(
            self.beta, " + beta*C (if beta != 0)"
        )
        if self.accumulates_on_c:
            beta = ""
        store = {
            RowBlock.NO: "vstore" if self.c_access is Access.CONTIGUOUS else "vscatter",
            RowBlock.YES: "vstore of the columns interleaved",
            RowBlock.TESTED: f"vstore of the columns interleaved if C's row stride is {nr}"
            + (f" and the count {nr}" if self.counted else "")
            + ", else vscatter",
        }[self.c_row_block]
        atomic = " atomically per element" if self.atomic else ""
        lines.append(f"  epilogue: {store} C[tile] := {alpha}{beta}{atomic}")
        return "\n".join(lines)

    def _resident_listing(self) -> str:
        """A's vectors once, then the listing of each column group on them."""
        group = replace(self, columns=self.column_group, column_group=0)
        header, *steps = group.listing(resident=True).split("\n")
        lanes = self.vector_lanes(0)
        loads = f"  a0[k] = vload A[row:row+{lanes}, k] for every k (A resident)"
        if self.dot:
            last = self.vectors - 1
            loads = (f"  a0..a{last}[k] = vinterleave16 A[rows, k], A[rows, k+1] for every K pair"
                     " (A's pairs resident)")  # fmt: skip
        return "\n".join([
            header.replace(f" {group.columns} columns,", f" {self.columns} columns,"),
            loads,
            f"  for each group of {group.columns} columns (col: its first, the last group"
            " the rest):",
            *("  " + line.replace("C[tile]", "C[group]") for line in steps),
        ])  # fmt: skip

    def _fma_listing(self, unroll: str, resident: bool) -> list[str]:
        L, mv, nr = self.lanes, self.vectors, self.columns
        lines = [f"  for k ({unroll}):"]
        if self.prefetches_a:
            lines.append(f"    prefetch A[row:row+{mv * L}, k+{self.a_prefetch_steps}]")
        if self.b_columns_held:
            lines.extend(f"    b{j} = vbroadcast B[k, col+{j}]" for j in range(nr))
            for v in range(mv):
                lines.append(self._a_load_line(v))
                lines.extend(f"    acc{v}_{j} = vfma a{v}, b{j}, acc{v}_{j}" for j in range(nr))
            return lines
        if not resident:
            lines.extend(self._split_load_line(q) for q in range(self.split_pairs))
            lines.extend(self._a_load_line(v) for v in range(2 * self.split_pairs, mv))
        if self.b_quads:
            q = QUAD_ELEMENTS
            lines.append(f"    q{{j}} = vbroadcast128 B[k:k+{q}, col+{{j}}] for even j, where"
                         f" k % {q} = 0 and a whole quad of K is left")  # fmt: skip
        a = "[k]" if resident else ""
        for j in range(nr):
            if self.b_quads and j % 2 == 0:
                lines.append(f"    b = vpermilps q{j} (lane k % {QUAD_ELEMENTS}; past the"
                             f" quads vbroadcast B[k, col+{j}])")  # fmt: skip
                lines.extend(f"    acc{v}_{j} = vfma a{v}{a}, b, acc{v}_{j}" for v in range(mv))
                continue
            if self.b_per_vector:
                b = f"B[k, col+{j}]{{1toN}}"
                lines.extend(f"    acc{v}_{j} = vfma a{v}{a}, {b}, acc{v}_{j}" for v in range(mv))
                continue
            lines.append(f"    b = vbroadcast B[k, col+{j}]")
            lines.extend(f"    acc{v}_{j} = vfma a{v}{a}, b, acc{v}_{j}" for v in range(mv))
        return lines

    def _split_load_line(self, q: int) -> str:
        first, rows = 2 * q * self.lanes, 2 * self.lanes
        return (
            f"    a{2 * q}, a{2 * q + 1} = vsplit16 A[row+{first}:row+{first + rows}, k]"
            " (even rows << 16, odd rows & 0xffff0000)"
        )

    def _a_load_line(self, v: int) -> str:
        lanes, width = self.active_lanes(v), self.vector_lanes(v)
        mask = "" if lanes == width else f".mask({'rows' if lanes is None else lanes})"
        op = "vload" if self.a_access is Access.CONTIGUOUS else "vgather"
        first = v * self.lanes
        return f"    a{v} = {op}{mask} A[row+{first}:row+{first + width}, k]"

    def _dot_listing(self, resident: bool = False) -> list[str]:
        """Pairs along K: A's columns k and k+1 interleaved (VNNI), B's pair broadcast
        (`resident`: A's pairs interleaved already)."""
        L, mv, nr = self.lanes, self.vectors, self.columns
        lines = []
        if self.b_quads:
            lines += [
                f"  for k in steps of {2 * QUAD_PAIRS} (the K pairs below):",
                f"    b{{j}} = vbroadcast128 B[k:k+{2 * QUAD_PAIRS}, col+{{j}}] for even j",
                f"    the steps below for k, k+2, .., k+{2 * QUAD_PAIRS - 2}, with"
                " b = vpshufd b{j} (the pair's lane) for even j",
            ]
        if self.tail_quads:
            last = mv - 1
            lines += [
                f"  for k in steps of 4 (whole quads of K): the steps below for k and k+2 on"
                f" the other vectors, and for a{last}, whose lane pairs hold two K pairs of a row:",
                f"    a{last} = vtranspose16 A[rows of a{last}, k:k+4]",
                f"    acc{last}_{{j}} = vdpbf16ps acc{last}_{{j}}, a{last},"
                " vbroadcast64 B[k:k+4, col+{j}] for each j",
                f"  then the rest (a{last}'s pairs into its even lanes, masked);"
                f" a{last}'s lane pairs added before the epilogue",
            ]
        lines.append("  for k in steps of 2 (an odd last k pairs with zeros):")
        a = "[k]" if resident else ""
        for v in range(0, 2 * self.unpacked_pairs, 2):
            rows = f"row+{v * L}:row+{(v + 2) * L}"
            lines.append(f"    a{v}, a{v + 1} = vunpck(l,h)wd A[{rows}, k], A[{rows}, k+1]")
        for v in range(2 * self.unpacked_pairs, mv) if not resident else ():
            rows = f"row+{v * L}:row+{v * L + self.vector_lanes(v)}"
            lines.append(f"    a{v} = vinterleave16 A[{rows}, k], A[{rows}, k+1]")
        for j in range(nr):
            pair = f"(B[k, col+{j}], B[k+1, col+{j}])"
            b = f"{pair}{{1toN}}" if self.b_per_vector else "b"
            if not self.b_per_vector:
                lines.append(f"    b = vbroadcast32 {pair}")
            lines.extend(f"    acc{v}_{j} = vdpbf16ps acc{v}_{j}, a{v}{a}, {b}" for v in range(mv))
        return lines


def _left_to_hardware(tile: TileGemm, target: Target) -> bool:
    """A tile of a member left to the hardware prefetchers (`left_to_hardware`: a small one,
    or from a quarter of L1 up one read in whole columns) and not streamed after all
    (`lowering.prefetch` streams small members whose tiles loop over rows)."""
    hardware = left_to_hardware(tile, target) or left_to_hardware(tile, target, tile.mr)
    return hardware and not tile.next_views()


def _constant(value: Value) -> float | int | None:
    return value.value if isinstance(value, Constant) else None


def beta_kind(beta: Value, compute: ScalarType) -> Beta:
    """What the epilogue does with C: a literal beta is judged once converted to the compute
    type (one that underflows to 0 never reads C, as the reference evaluator's)."""
    value = literal_in(beta, compute)
    if value is None:
        return Beta.RUNTIME
    return Beta.ZERO if value == 0 else Beta.ONE if value == 1 else Beta.GENERAL


def row_stride_is_unit(a: MemRefType, trans: Transpose) -> bool:
    """Whether consecutive rows of op(A) are adjacent in memory."""
    return a.stride[1 if trans is Transpose.T else 0] == 1


def k_unroll(
    inst: TileGemm | TileBatchGemm,
    a_type: MemRefType,
    k: int | None,
    static_rows: bool,
    target: Target,
    tile: RegisterTile,
    dot: bool,
) -> int | None:
    """None (unroll completely) for a small static K, and for K up to SINGLE_TILE_UNROLL_K
    when this tile is all of C (no neighbouring tile whose straight-line code LLVM could
    interleave with it) and its unrolled steps fit the registers (`unrolled_steps_fit`); 1
    for the tiles of `takes_one_step`; the target's `k_unroll` when
    all addressing is static, and for f32 tiles on packed panels of A
    (`unrolls_on_a_packed_panel`); else 1: with run-time strides or masks, an unrolled body
    makes LLVM's scheduler load ahead and spill (seen on AVX-512: over 100 zmm spills per
    iteration at unroll 4)."""
    batched = isinstance(inst, TileBatchGemm)
    lone = not batched and covers_c(inst) and unrolled_steps_fit(tile, target)
    if not batched and unrolls_k(k, lone):
        return None
    if takes_one_step(inst, tile, dot, target):
        return 1
    b_type = (inst.panels()[1] if batched else inst.b).type
    static = DYNAMIC not in a_type.stride and DYNAMIC not in b_type.stride and static_rows
    if static or (not batched and unrolls_on_a_packed_panel(inst, a_type)):
        return target.k_unroll
    return 1


def takes_one_step(inst: TileGemm | TileBatchGemm, tile: RegisterTile, dot: bool,
                   target: Target) -> bool:  # fmt: skip
    """Whether a K loop takes one k step an iteration whatever the target's `k_unroll`:

    - A one-vector FMA tile: each broadcast of B feeds a single FMA, and over several steps
      LLVM writes each sum into the broadcast's register (vfmadd213ps), moving every
      accumulator to another register at every step, and spills: f32 and bf16 56x9x9 in
      1 x 9 tiles on a Zen 3 spilled 6 and 8 vectors an iteration at two steps and ran 1.15x
      faster at one.
    - A K loop that streams the next batch member's lines (`TileGemm.next_views`): it waits
      on memory, not on its loop's overhead; on the AMX Xeon two steps ran W2's batches from
      memory 0.965-0.975x (f32 and f64 35x9x35, f64 20x9x20; paired, one process), one step
      1.00-1.02x.
    - On 32 registers, an FMA tile with more columns than vectors that leaves at most one
      register free beside one broadcast: LLVM's scheduler loads the next step's vectors of A
      while the step's broadcasts still run, and spills (2 x 14: one zmm an iteration, 3 x 9:
      up to 28), where 5 x 5 and 6 x 4 do not. Zen 3's 2 x 6 on 16 registers spills nothing
      at two steps."""
    if isinstance(inst, TileGemm) and inst.next_views():
        return True
    if dot:
        return False
    if tile.mv == 1:
        return True
    registers = target.vector_registers
    return registers >= 32 and tile.registers() >= registers - 1 and tile.nr > tile.mv


def unrolls_on_a_packed_panel(inst: TileGemm, a_type: MemRefType) -> bool:
    """Whether an f32 tile unrolls its K loop though its rows or B's strides are known only
    at run time: on a panel of A of whole rows at static strides (the blocked path's packs),
    its loads of A take no mask, and B read in place takes one pointer per column, set
    before the loop; nothing spills unrolled. W1's kernel (run-time sizes) on a Zen 3,
    paired against one step an iteration: f32 2048^3 1.03-1.06x on one thread, 1024^3
    1.00x; f64 2048^3 ran 0.96-0.99x and keeps one step."""
    whole_rows = inst.trans_a is Transpose.N and a_type.shape[0] == inst.mr
    static_a = DYNAMIC not in a_type.stride
    return whole_rows and static_a and inst.c.type.element is ScalarType.F32


def covers_c(inst: TileGemm) -> bool:
    """Whether the tile is all of C."""
    c_rows, c_cols = inst.c.type.shape
    return c_rows != DYNAMIC and c_rows <= inst.mr and c_cols == inst.nr


def resident_a_group(inst: TileGemm | TileBatchGemm, target: Target, k: int | None,
                     one_vector_fmas: bool) -> int:  # fmt: skip
    """Columns per group of a tile that keeps A resident (0: not one): a one-vector tile
    of FMAs that is all of C, with K unrolled, whose K vectors of A fit the registers beside
    a group of FMA_PORTS * FMA_LATENCY accumulators (the chains that keep the FMA units
    busy), and more columns than that. Each group's chains then wait only for their own
    columns of B and C, and the tile's loads, FMAs and stores run in order group by group,
    instead of every accumulator waiting for every line. In-process A/B against the tile at
    once, one thread (docs/benchmarks.md): batches from memory f32 16^3 1.12x, 16x24x16
    1.13x, 16x12x16 and 16x16x8 1.03x, f64 8x16x8 1.08x, 5x16x16 1.13x; in L1 1.00-1.10x.
    Tiles of two vectors (groups of four columns) lost from memory (f32 20x9x8 0.83-0.93x)
    and are left as they are. So are targets whose FMAs take no broadcast from memory (AVX2:
    a register per column's broadcast, of which LLVM keeps several live, spilled A from K =
    4 on; f32 8x16x6 ran 1.00x), and a run-time beta (each group would test it, and the
    branches spilled general registers)."""
    if not one_vector_fmas or not isinstance(inst, TileGemm) or k is None or not covers_c(inst):
        return 0
    group = FMA_PORTS * FMA_LATENCY
    if inst.nr <= group or not target.fma_reads_broadcasts or _constant(inst.beta) is None:
        return 0
    alpha = int(_constant(inst.alpha) is None)  # its broadcast
    overhead = target_overhead(target, RegisterTile(1, group, inst.mr), dynamic_rows=False)
    return group if k + group + 1 + alpha + overhead <= target.vector_registers else 0


def resident_pairs_columns(vectors: int) -> int:
    """Columns per group of a resident-pairs tile of `vectors` vectors: enough accumulators
    (RESIDENT_PAIR_CHAINS) for the dot products' chains to keep the unit busy."""
    return -(-RESIDENT_PAIR_CHAINS // vectors)


def resident_pairs_fit(target: Target, shape: tuple[int, int, int], reserved: int) -> bool:
    """Whether a bf16 dot tile that is all of an m x n x k C can hold every K pair of A in
    registers, interleaved once: A's pairs, a group's accumulators and B's pair beside
    `reserved` registers, and C wider than a group. Its columns then go a group at a time,
    each group's C added and stored before the next group's dot products, instead of tiles
    of a few columns each interleaving all of A again and storing their columns of C in one
    burst at the end (`gemm_tiles.resident_pairs_tile`)."""
    m, n, k = shape
    vectors = -(-m // target.lanes(ScalarType.F32))
    group = resident_pairs_columns(vectors)
    needed = -(-k // 2) * vectors + group * vectors + 1 + reserved
    return n > group and needed <= target.vector_registers


def resident_a(a_type: MemRefType, trans: Transpose, k: int | None, target: Target) -> bool:
    """Whether a K loop over op(A) finds it in L1 and so asks for none of its lines: a
    static A that stays in L1 (`register_tile.a_stays_in_l1`) with K from RESIDENT_A_MIN_K.
    Only the first column of tiles reads it from further away, and the hardware prefetchers
    follow that, while the prefetches of every other column take a load slot per line for
    nothing. In-process A/B on a Zen 3, one thread, against the prefetch: W2's batches in
    L2 f32 32^3 1.07x, 35x9x35 1.09x, 64^3 1.03x, f64 35x9x35 1.04x, f64 32^3 1.00x; from
    memory f32 32^3 1.08x, 35x9x35 1.06x, f64 35x9x35 1.08x, f64 32^3 1.02-1.03x. Shorter
    K loops keep it: their prefetches near the end run past A into the next batch member's,
    which the memory-bound batches used (f64 16^3 0.90-0.96x without, f32 20x9x20
    0.95-0.97x)."""
    rows, depth = a_type.shape[0], a_type.shape[1]
    if trans is Transpose.T:
        rows, depth = depth, rows
    if DYNAMIC in (rows, depth) or k is None or k < RESIDENT_A_MIN_K:
        return False
    return a_stays_in_l1(target, a_type.element, rows, depth)


def plan(inst: TileGemm | TileBatchGemm, target: Target) -> GemmNanokernel:
    c_type: MemRefType = inst.c.type
    a_type: MemRefType = (inst.panels()[0] if isinstance(inst, TileBatchGemm) else inst.a).type
    compute = c_type.element
    k = _depth(inst, a_type)
    rows = _constant(inst.rows)
    dot = uses_bf16_dot(inst, target, a_type, compute)
    counted = isinstance(inst, TileGemm) and inst.valid_cols is not None
    assert not (counted and (inst.atomic or dot)), "a counted tile adds its last column twice"
    full = target.lanes(compute)
    lanes = full if rows is None else narrowest_lanes(int(rows), compute, full)
    vectors = 1 if lanes < full else inst.mr // lanes
    a_access = Access.CONTIGUOUS if row_stride_is_unit(a_type, inst.trans_a) else Access.STRIDED
    c_access = Access.CONTIGUOUS if c_type.stride[0] == 1 else Access.STRIDED
    tile = RegisterTile(vectors, inst.nr, lanes)
    unroll = k_unroll(inst, a_type, k, rows is not None, target, tile, dot)
    plain = not inst.atomic and a_access is c_access is Access.CONTIGUOUS
    # the dot path always loops over K pairs
    narrow_compute = target.narrow_fma_pays
    tail = (
        _tail_lanes(rows, vectors, lanes, compute, narrow_compute)
        if plain and (unroll or dot)
        else None
    )
    whole = vectors - (tail is not None)  # vectors of full width
    narrow = narrow_compute and tail is not None
    resident = isinstance(inst, TileGemm) and inst.resident and dot
    quads = vectors == 1 and _b_pairs_by_quads(inst, k) and _quads_fit(inst, target)
    one_vector_fmas = plain and not dot and vectors == 1 and unroll is None
    group = (
        resident_pairs_columns(vectors)
        if resident
        else resident_a_group(inst, target, k, one_vector_fmas)
    )
    tail_quads = dot and tail_k_quads(inst, k, vectors, tail, narrow)
    b_quads = (dot and not resident and quads) or fma_b_quads(
        inst, target, k, lanes, one_vector_fmas, group or inst.nr
    )
    return GemmNanokernel(
        target=target.name,
        compute=compute,
        lanes=lanes,
        vectors=vectors,
        columns=inst.nr,
        rows=int(rows) if rows is not None else None,
        a_access=a_access,
        c_access=c_access,
        k_unroll=unroll,
        fused=target.fma,
        beta=beta_kind(inst.beta, compute),
        alpha_is_one=_constant(inst.alpha) == 1,
        atomic=bool(inst.atomic),
        batched=isinstance(inst, TileBatchGemm),
        dot=dot,
        tail_lanes=tail,
        unpacked_pairs=whole // 2 if dot and not resident and _unpacks_a(inst, k) else 0,
        split_pairs=split_pairs(inst, a_type, compute, k, rows, lanes, vectors) if not dot else 0,
        long_k=not isinstance(inst, TileBatchGemm) and (k is None or k >= LONG_K),
        c_ahead=fetches_c_ahead(inst, a_type, k, target),
        c_row_block=c_row_block(c_type, inst.nr, dot or inst.atomic, counted),
        a_prefetch_steps=a_prefetch_steps(k),
        b_quads=b_quads,
        tail_quads=tail_quads,
        counted=counted,
        memory_bound=isinstance(inst, TileGemm) and _left_to_hardware(inst, target),
        a_fetched=isinstance(inst, TileGemm) and bool(inst.fetched),
        a_resident=isinstance(inst, TileGemm) and resident_a(a_type, inst.trans_a, k, target),
        narrow_compute=narrow,
        column_group=group,
        b_columns_held=not dot and holds_b_columns(target, vectors, inst.nr),
        b_per_vector=reads_b_per_vector(inst, target, vectors, compute, dot=dot, narrow=narrow),
    )


def reads_b_per_vector(inst: TileGemm | TileBatchGemm, target: Target, vectors: int,
                       compute: ScalarType, *, dot: bool, narrow: bool) -> bool:  # fmt: skip
    """Whether each of a k step's FMAs (or vdpbf16ps) takes its broadcast of B as a memory
    operand ({1toN}), one load per vector, instead of the vectors sharing one broadcast
    register: in dot tiles, and tiles whose last vector computes `narrow` (their shared
    broadcast is kept from LLVM), of the target's `broadcast_operand_vectors` vectors,
    where B's element is what they compute in (or a bf16 pair, adjacent along K) and B's
    columns are a static stride apart (each vector addresses B from a copy of its base).
    Zen 4, in one process, batches in L2: bf16 20x9x20 1.18-1.21x, f32 20x9x20 1.10-1.16x,
    a batch-reduce of bf16 32^3 tiles 1.03x, bf16 32^3 1.01-1.07x; f32 FMA tiles of two
    whole vectors ran slower (32^3 0.98-0.99x: W2's row in L2 at 0.94-0.96x libxsmm), f64
    ones within the noise (16^3 0.99-1.10x, 64^3 1.01-1.03x). With three or four vectors
    the loads cost more than the broadcasts (bf16 35x9x35 0.92x, f64 56x9x9 0.92x). Not for
    a batch member picked by the group id, which `lowering.prefetch` takes to arrive from
    memory: there the extra loads wait with the misses (W2 from memory, f32 32^3 0.93x, f64
    16^3 0.95x). Measured on Zen 4 only: its FMAs keep an indexed memory operand whole,
    where Intel cores issue two micro-ops."""
    b_type: MemRefType = (inst.panels()[1] if isinstance(inst, TileBatchGemm) else inst.b).type
    k_mode, column_mode = (1, 0) if inst.trans_b is Transpose.T else (0, 1)
    element = b_type.stride[k_mode] == 1 if dot else b_type.element is compute
    return (
        (dot or narrow)
        and target.fma_reads_broadcasts
        and vectors == target.broadcast_operand_vectors
        and not (isinstance(inst, TileGemm) and on_group_views(inst))
        and element
        and b_type.stride[column_mode] is not DYNAMIC
    )


def fma_b_quads(inst: TileGemm | TileBatchGemm, target: Target, k: int | None, lanes: int,
                one_vector_fmas: bool, columns: int) -> bool:  # fmt: skip
    """Whether a one-vector f32 FMA tile with K unrolled takes B's elements of its even
    columns four k steps at a time, from one 128-bit load into every 128-bit lane, each
    picked by an in-lane shuffle (vpermilps), instead of a broadcast load per element: where
    its FMAs start faster than the target's load ports take broadcasts
    (`broadcast_loads_per_cycle`), a broadcast load per FMA sets the tile's pace. Zen 4's
    ymm FMAs (two a cycle on its 256-bit units): f32 8^3 in a C microbenchmark from L2 ran
    42 cycles a member against 32 of FMAs; with a quarter, half, three quarters and all
    columns shuffled 35.8, 33.8, 34.7 and 37.6 cycles (the shuffles share the FMA units).
    nanotc's members in L2, in-process against broadcasts: 8^3 1.24x (two threads 1.27x),
    8x8x4 1.31x, 8x4x8 1.23x, 4x8x8 1.18x, 8x16x8 1.16x, 8x8x16 1.14x, 3x7x10 1.11x, 8x5x13
    1.10x, 6x9x9 1.08x, 8x9x9 and 8x12x12 1.01x; members of a loop over 100 MB: 8^3 1.02x,
    8x16x8 0.99x, 8x4x8 0.98x, 8x5x13 0.95x (a kernel cannot tell where its batch lies).
    Only for B's elements in f32 and adjacent along K (the steps past K's last whole quad
    broadcast; a K unrolled from 4 steps on means the tile is all of C), where the
    accumulators of a step (`columns`), their quads and QUAD_SPARE_REGISTERS fit the
    registers. Not for a batch member picked by the group id (taken to arrive from memory:
    the quads wait for B's lines with the FMAs; 8x16x8, 8x8x16, 8x5x13 ran 0.94-0.97x).
    Measured and left out: K loops of quads (in L2 8x8x32, 8x12x32 1.05-1.09x, but from
    memory 0.89-0.92x), f64 pairs (in L2 1.07-1.18x, loop members from memory 0.79-0.93x),
    and a narrow tile beside taller ones, where the gemm's FMAs set the pace and the
    shuffles take their units' time (56x9x9, 56x9x12, 56x9x16, whose last 8 rows take tiles
    of their own, 0.96-0.99x)."""
    if not isinstance(inst, TileGemm) or not one_vector_fmas or on_group_views(inst):
        return False
    b_k = 1 if inst.trans_b is Transpose.T else 0
    rate = target.fmas_per_cycle(lanes * ScalarType.F32.bits)
    return (
        k is not None
        and k >= QUAD_ELEMENTS
        and columns + -(-columns // 2) + QUAD_SPARE_REGISTERS <= target.vector_registers
        and inst.b.type.element is ScalarType.F32
        and inst.c.type.element is ScalarType.F32
        and inst.b.type.stride[b_k] == 1
        and 0 < target.broadcast_loads_per_cycle <= rate
    )


def tail_k_quads(inst: TileGemm | TileBatchGemm, k: int | None, vectors: int,
                 tail: int | None, narrow: bool) -> bool:  # fmt: skip
    """Whether a dot tile's narrow last vector of 4 or fewer rows (an xmm computing on its
    own) runs in a vector twice as wide whose lane pairs hold two K pairs of each row: row r
    in lanes 2r ((A[r, k], A[r, k+1])) and 2r + 1 ((A[r, k+2], A[r, k+3])), A's four columns
    of those rows transposed once per four k, B's four elements of the column one 64-bit
    broadcast, the two lanes added once in the epilogue. An xmm `vdpbf16ps` takes a 256-bit
    unit's slot for 4 lanes; a ymm one does 8 in it. Zen 4, in one process, batches in L2
    (members of a loop), against the xmm tail: 20x9x20 1.05-1.07x (two threads 1.05x),
    17x6x24 1.10x, 20x12x32 and 20x4x40 1.05x, 18x9x16 and 20x9x16 1.04-1.05x, 19x9x20
    1.03x, 20x16x20 1.01x; members of a loop over 100 MB 1.02-1.03x. Only for tiles of two
    vectors, whose tail reads B on its own anyway (`reads_b_per_vector`): tiles of three or
    more share each broadcast of B among their vectors, and the tail's 64-bit broadcasts
    are then loads of their own (35x9x35, 36x9x36, 52x6x12 ran 0.93-0.94x); a static K of at
    least TAIL_QUAD_MIN_K (20x9x8 0.98x, 19x5x13 0.98x, though 17x9x8 1.09x), B's column
    along K, in a gemm's tile (not a batch-reduce loop's, nor on A's VNNI panels), not a
    batch member picked by the group id (from memory 0.93-0.96x)."""
    if not isinstance(inst, TileGemm) or inst.pairs or inst.resident or inst.padded:
        return False
    b_k = 1 if inst.trans_b is Transpose.T else 0
    xmm = tail is not None and tail * ScalarType.F32.bits == 128
    return (
        narrow
        and xmm
        and vectors == 2
        and k is not None
        and k >= TAIL_QUAD_MIN_K
        and inst.b.type.stride[b_k] == 1
        and not inst.atomic
        and not on_group_views(inst)
    )


def fetches_c_ahead(inst: TileGemm | TileBatchGemm, a_type: MemRefType, k: int | None,
                    target: Target) -> bool:  # fmt: skip
    """Whether a tile asks for C's lines before its K loop (`prefetches_c`): where the loop
    is long enough to outlast the fetch (K from PREFETCH_C_K, or unknown), except in a small
    gemm, one whose A, B and C views are static and span L1 at most together, such as a
    batch member's: its C comes from L2, or streams in with A and B (by the hardware
    prefetchers or the previous member's prefetches), and asking for it again only costs.
    In-process A/B on a Zen 4 without the asks: bf16 batches into f32 from memory 16^3
    1.03-1.08x, 32^3 1.02x, 64^3 1.04-1.05x, 35x9x35 1.00-1.01x, f32 35x9x35 1.03-1.05x; in
    L2 0.99-1.03x. The tiles of blocked gemms (A a packed panel of run-time K) and of row
    panels keep them: spans are measured with the views' strides, as a row panel's few rows
    of a tall A span all of it (`register_tile.small_gemm` counts elements of m, n and k).
    Not in a batch-reduce loop, whose C stays in registers across it."""
    if isinstance(inst, TileBatchGemm) or (k is not None and k < PREFETCH_C_K):
        return False
    views = (a_type, inst.b.type, inst.c.type)
    static = all(t.is_static for t in views)
    return not static or sum(t.size_in_bytes() for t in views) > target.l1_bytes


ROW_BLOCK_COLUMNS = (1, 2, 4)  # the tile widths `vec.interleave_columns` takes


def c_row_block(c_type: MemRefType, columns: int, excluded: bool,
                counted: bool = False) -> RowBlock:  # fmt: skip
    """Whether a tile of `columns` columns of C is stored as a row-major block (`RowBlock`):
    where C's columns are adjacent and its rows are not, always when that row stride is
    static, else by a run-time test of it. Not for tiles on K pairs or atomic ones
    (`excluded`). A `counted` tile's columns past its count repeat the last one, which the
    block would not: the test then also asks that the count fills the tile."""
    rows, columns_stride = c_type.stride
    if excluded or rows == 1 or columns_stride != 1 or columns not in ROW_BLOCK_COLUMNS:
        return RowBlock.NO
    if isinstance(rows, int) and rows != columns:
        return RowBlock.NO
    return RowBlock.YES if isinstance(rows, int) and not counted else RowBlock.TESTED


def a_prefetch_steps(k: int | None) -> int:
    """How many k steps ahead a K loop of depth k (None: unknown) prefetches A."""
    deep = k is None or k > DEEP_A_PREFETCH_K
    return DEEP_A_PREFETCH_STEPS if deep else A_PREFETCH_STEPS


def _depth(inst: TileGemm | TileBatchGemm, a_type: MemRefType) -> int:
    """K: op(A)'s columns, or op(B)'s rows where A is a VNNI panel (its columns are pairs)."""
    if isinstance(inst, TileGemm) and inst.pairs:
        return inst.b.type.shape[1 if inst.trans_b is Transpose.T else 0]
    return a_type.shape[0] if inst.trans_a is Transpose.T else a_type.shape[1]


def _b_pairs_by_quads(inst: TileGemm | TileBatchGemm, k: int | None) -> bool:
    """Whether a one-vector dot tile takes the K pairs of B's even columns from one 128-bit
    load per QUAD_PAIRS pairs and in-lane shuffles instead of a broadcast load per pair:
    where B's columns run along K in memory and K holds a whole step of them. With one
    vector of A per K pair, the tile issues a broadcast load per dot product and the load
    ports, not the dot products, set its pace. Shuffling every column instead saturates the
    shuffle ports; half and half measured fastest (batches of bf16 8^3 1.32x, 16^3 1.18x,
    16x8x16 1.21x); tiles of two vectors ran slower (32^3 0.91-0.95x, 20x9x20 0.78-0.93x)."""
    b_type = (inst.panels()[1] if isinstance(inst, TileBatchGemm) else inst.b).type
    padded = isinstance(inst, TileGemm) and inst.padded
    b_k = 1 if inst.trans_b is Transpose.T else 0
    return not padded and b_type.stride[b_k] == 1 and (k is None or k >= 2 * QUAD_PAIRS)


def _quads_fit(inst: TileGemm | TileBatchGemm, target: Target) -> bool:
    """Whether a one-vector tile's quad steps fit the registers beside its accumulators: the
    step's four interleaved vectors of A, the columns they come from (LLVM loads all four
    steps' ahead), the interleave's index, B's repeated quad and its splats. Wider tiles take
    a broadcast load per pair: bf16 tiles of 1 x 19 to 1 x 28, which the tile model counts as
    fitting with one vector of A, spilled in their quad steps."""
    return inst.nr + QUAD_STEP_REGISTERS <= target.vector_registers


def _unpacks_a(inst: TileGemm | TileBatchGemm, k: int | None) -> bool:
    """Whether a dot tile interleaves A's columns with in-lane unpacks: A not packed into
    VNNI pairs already, and a K loop long enough (a batch-reduce loop always is)."""
    if isinstance(inst, TileBatchGemm):
        return True
    return not inst.pairs and unpacks_pay(k, inst.nr)


def split_pairs(inst: TileGemm | TileBatchGemm, a_type: MemRefType, compute: ScalarType,
                k: int | None, rows: float | int | None,
                lanes: int, vectors: int) -> int:  # fmt: skip
    """Leading vector pairs of a tile that widens bf16 A to f32 FMAs whose 2 * lanes rows
    of A are split into the even rows (shifted into the high halves) and the odd ones
    (their low halves cleared): two single-cycle integer instructions for the pair, where
    widening each vector in order takes a zero-extending load (a shuffle) and a shift, and
    shuffles and shifts share the FMA ports on Zen 3. The accumulators then hold rows out of
    C's order, put back once per tile (`split_pays`). Only pairs of rows that are all
    valid: 16-bit lanes take no masked loads on AVX2."""
    if a_type.element is not ScalarType.BF16 or compute is not ScalarType.F32:
        return 0
    if rows is None or not row_stride_is_unit(a_type, inst.trans_a):
        return 0
    if isinstance(inst, TileGemm) and not split_pays(k, inst.nr):
        return 0
    return min(int(rows) // (2 * lanes), vectors // 2)


def split_pays(k: int | None, columns: int) -> bool:
    """Whether a K loop of depth k repays the reordering of a split tile's accumulators
    (four shuffles per pair and column when C is loaded, four when stored): at least
    SPLIT_K_PER_COLUMN k steps per column. Measured on a Zen 3 against the same tiles
    unsplit (W4's bf16 batches in L2): 64^3 (2 x 5 and 2 x 4, K = 64) 1.15x, 32^3 (2 x 4)
    1.10x, 35x9x35 (5 x 2) 1.10x, 20x9x20 (3 x 3) 1.05x; 16^3 (2 x 4, four steps a column)
    0.98x and 56x9x9 (3 x 3, three) 0.90x, which keep their rows in order."""
    return k is None or k >= SPLIT_K_PER_COLUMN * columns


def unpacks_pay(k: int | None, columns: int) -> bool:
    """Whether a K loop of depth k repays reordering the accumulators' rows of a tile of
    `columns` columns (once when loaded from C, once when stored) for unpacking A's pairs
    within lanes: at least as many K pairs as columns. Measured against the in-order
    interleave (one vpermt2w per 16 rows and K pair): bf16 batch-reduce 64^3 x 32 1.12x,
    batches of 64x8x32 1.3x, 56x9x36 1.14x, 35x9x35 1.08-1.1x, 64x4x8 1.06x; 56x9x9
    (five K pairs, six columns) 0.94x."""
    return k is None or k // 2 >= columns


def _tail_lanes(
    rows: float | int | None, vectors: int, lanes: int, compute: ScalarType, narrow_compute: bool
) -> int | None:
    """Lanes of a narrower whole vector that the last vector of a tile of static rows can
    load and store instead of a masked one: 56 f32 rows on AVX-512 are three zmm and one
    ymm, 20 are one zmm and one xmm. No vector is then masked and the accumulators can start
    from C (W2 f32 56x9x9: 1.06-1.07x). The vector computes at full width (one broadcast
    of B serves all) unless the target's FMA units are narrower than its vectors
    (`narrow_compute`). Only in a K loop: in straight-line code (K unrolled) LLVM narrows
    the last vector's FMAs to the lanes stored, broadcasts B twice and spills. Tiles that
    gather A, scatter C or update C atomically keep a full-width mask, and so does a
    remainder that fills no narrower vector (a narrower masked vector computed at full
    width spilled the accumulators of f32 35x9x35), except where the narrow vector computes
    narrow: there the masked narrower vector saves FMA time (f32 35x9x35 in L2 on Zen 4:
    1.17-1.20x). bf16 dot tiles (always a K loop) narrow the same way: their last vector
    interleaves its rows of two columns alone (bf16 20x9x20: 1.08-1.09x; 24x9x24, whose two
    vectors would otherwise unpack together, 0.97-0.98x)."""
    if rows is None or vectors < 2:
        return None
    rest = int(rows) - (vectors - 1) * lanes
    narrow = narrowest_lanes(rest, compute, lanes) if rest > 0 else lanes
    return narrow if (rest == narrow or narrow_compute) and narrow < lanes else None


def narrowest_lanes(rows: int, compute: ScalarType, lanes: int) -> int:
    """Lanes of the vectors of a tile with a static number of rows: the target's full width,
    or for rows that fit half a vector or less, the narrowest power of two that holds them
    (at least 16 bytes: xmm). An 8-row f32 tile on AVX-512 then computes in whole ymm
    vectors, without masks, and starts its accumulators from C (W2 f32 8^3: 1.3-1.4x; bf16
    8^3 on vdpbf16ps, whose ymm form takes the same pairs: 1.23x)."""
    narrow = max(MIN_VECTOR_BYTES * 8 // compute.bits, 1 << max(0, rows - 1).bit_length())
    return min(lanes, narrow)


def uses_bf16_dot(
    inst: TileGemm | TileBatchGemm, target: Target, a_type: MemRefType, compute: ScalarType
) -> bool:
    """bf16 A and B into an f32 tile on a target whose vdpbf16ps outruns FMAs, A rows
    contiguous (otherwise the operands are widened to f32 for FMAs)."""
    b_type: MemRefType = (inst.panels()[1] if isinstance(inst, TileBatchGemm) else inst.b).type
    bf16 = a_type.element is ScalarType.BF16 and b_type.element is ScalarType.BF16
    contiguous = row_stride_is_unit(a_type, inst.trans_a)
    return target.bf16_gemm_by_dot and bf16 and compute is ScalarType.F32 and contiguous
