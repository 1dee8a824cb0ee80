"""The machine code of nanokernels: hot loops hold the target's FMA on full-width registers
and touch no stack (no spill), for representative gemm shapes on every built-in target."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import replace
from functools import cache

import numpy as np
import pytest

import nanotc
from nanotc.codegen import asm
from nanotc.codegen.llvm.blas_vector import CHAINS, FROM_MEMORY_L3_SHARE, GEMV_COLUMNS
from nanotc.lowering.choices import BLOCKED, CompileOptions, GemmChoice
from nanotc.lowering.gemm_blocked import in_place_columns
from nanotc.runtime import jit
from nanotc.targets import Target, get
from nanotc.tuning.tuner import Site, gemm_sites
from tests.jit.helpers import ZEN3, ZEN4, group_members, looped_members

W2_SHAPES = [(8, 8, 8), (16, 16, 16), (32, 32, 32), (64, 64, 64), (56, 9, 9), (35, 9, 35),
             (20, 9, 20), (64, 64, 256)]  # fmt: skip

# target -> (mnemonic of its multiply-add, register class of full-width vectors)
TARGETS = {
    "avx512": ("vfmadd", "zmm"),
    "avx2": ("vfmadd", "ymm"),
    "generic": ("mulp", "xmm"),
}


def blocked_site(text: str, target: Target) -> Site:
    """The blocked path's gemm site of kernel `k` (launched on arrays past half of L2)."""
    large = [np.empty(target.l2_bytes, np.uint8)]
    sites = gemm_sites(nanotc.load(text).function("k"), target, large)
    return next(site for site in sites if site.signature.path == BLOCKED)


@cache
def assembly(text: str, target: str | Target) -> str:
    return nanotc.compile(text, target=target).assembly()


VECTOR_BYTES = {"zmm": 64, "ymm": 32, "xmm": 16}


def vector_register(target: str, dt: str, rows: int) -> str:
    """The target's full-width vectors, or for a gemm of at most half a vector's rows the
    narrowest (xmm at least) that holds them."""
    full = VECTOR_BYTES[TARGETS[target][1]]
    needed = max(16, 1 << (rows * (8 if dt == "f64" else 4) - 1).bit_length())
    return next(r for r, size in VECTOR_BYTES.items() if size == min(full, needed))


def gemm_registers(target: str, dt: str, m: int) -> set[str]:
    """Vector registers the tiles of an M-row gemm may use: M's own, and where M is not a
    whole number of full vectors, that of a remainder tile of M mod lanes rows."""
    lanes = VECTOR_BYTES[TARGETS[target][1]] // (8 if dt == "f64" else 4)
    rows = [m] + ([m % lanes] if m % lanes else [])
    return {vector_register(target, dt, r) for r in rows}


def check_hot_loops(
    text: str, target: str, function: str = "k", registers: set[str] | None = None
) -> list[asm.Loop]:
    op, full = TARGETS[target]
    allowed = registers or {full}
    loops = asm.hot_loops(assembly(text, target), function, op)
    assert loops, "no loop with multiply-adds"
    for loop in loops:
        assert loop.stack_accesses() == [], f"{loop.label} touches the stack (spills)"
        fma_lines = [i for i in loop.instructions if i.startswith(op)]
        assert all(any(f"%{r}" in i for r in allowed) for i in fma_lines), (
            f"{loop.label}: narrow vectors"
        )
    return loops


@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", W2_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_batched_small_gemm(target: str, dt: str, shape: tuple[int, int, int]) -> None:
    check_hot_loops(
        group_members(dt, *shape), target, registers=gemm_registers(target, dt, shape[0])
    )


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("shape", [(56, 9, 9), (35, 9, 35), (64, 64, 64)], ids=str)
def test_batched_f16_gemm_spills_nothing(target: str, shape: tuple[int, int, int]) -> None:
    """f16 members (B copied into f32 scratch, A converted as loaded, no register reserved
    for it): FMAs on full registers, nothing on the stack in the hot loops."""
    check_hot_loops(group_members("f32", *shape, inputs="f16"), target,
                    registers=gemm_registers(target, "f32", shape[0]))  # fmt: skip


@pytest.mark.parametrize(("dt", "m", "register"), [("f32", 8, "ymm"), ("f32", 3, "xmm"),
                                                   ("f64", 4, "ymm"), ("f64", 2, "xmm")])  # fmt: skip
def test_short_tiles_use_narrower_whole_vectors(dt: str, m: int, register: str) -> None:
    """A gemm of at most half a vector's rows computes in the narrowest vectors that hold
    them: f32 8 x 8 x 8 on AVX-512 in ymm, with no lane masks, its accumulators started from
    C (no adds after the K loop)."""
    text = group_members(dt, m, 8, 8)
    (loop,) = check_hot_loops(text, "avx512", registers={register})
    assert "zmm" not in " ".join(loop.instructions)
    if m in (8, 4):  # whole vectors
        assert not any("{%k" in i for i in loop.instructions)
        assert loop.count("vadd") == 0


@pytest.mark.parametrize(("dt", "m", "tail", "rows"), [("f32", 56, "ymm", "3x16+8"),
                                                       ("f32", 20, "xmm", "1x16+4"),
                                                       ("f64", 20, "ymm", "2x8+4")])  # fmt: skip
def test_last_vector_narrower_and_whole(dt: str, m: int, tail: str, rows: str) -> None:
    """56 f32 rows are three zmm and a ymm, 20 a zmm and an xmm: in a K loop, the tile's last
    vector loads and stores the narrower vector whole, so no lane is masked and the
    accumulators start from C; the FMAs stay full width."""
    text = group_members(dt, m, 9, 20)
    assert f"{rows} rows" in nanotc.compile(text, target="avx512").nanokernels()
    for loop in check_hot_loops(text, "avx512"):
        body = " ".join(loop.instructions)
        assert "{%k" not in body and loop.count("vadd") == 0
        assert f"%{tail}" in body


SPLIT_FMA = replace(get("avx512"), name="avx512-split-fma", fma_unit_bits=256)


@pytest.mark.parametrize(("dt", "m", "rows", "narrow"), [("f32", 35, "2x16+4", "xmm"),
                                                         ("f32", 56, "3x16+8", "ymm"),
                                                         ("f64", 20, "2x8+4", "ymm"),
                                                         ("f64", 35, "4x8+4", "ymm"),
                                                         ("bf16", 35, "2x16+4", "xmm")])  # fmt: skip
def test_last_vector_computes_narrow_on_split_fma_units(
    dt: str, m: int, rows: str, narrow: str
) -> None:
    """On AVX-512 run by 256-bit units (Zen 4), a tile's narrowed last vector (whole, or
    three rows masked) multiplies in its own width: half or a quarter of a zmm FMA's time.
    B's element is broadcast once, to a zmm whose low part the narrow FMA reads (no
    broadcast from a register, a shuffle on an FMA port), and nothing spills."""
    text = bf16_gemm(m, 9, 20) if dt == "bf16" else group_members(dt, m, 9, 20)
    op = "vdpbf16ps" if dt == "bf16" else "vfmadd"
    compilation = nanotc.compile(text, target=SPLIT_FMA)
    plans = compilation.nanokernels()
    assert re.search(
        rf"{re.escape(rows)} rows x \d+ columns, \d+ accumulators \(the last in", plans
    )
    loops = asm.hot_loops(compilation.assembly(), "k", op)
    assert loops
    for loop in loops:
        products = [i for i in loop.instructions if i.startswith(op)]
        assert any(f"%{narrow}" in i for i in products) and any("%zmm" in i for i in products)
        assert not [i for i in loop.instructions if re.match(r"vp?broadcast\w*\s+%", i)]
        assert loop.stack_accesses() == []


@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("shape", [(8, 8, 8), (16, 16, 16)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("looped", [False, True], ids=["per-group", "loop"])
def test_tiles_address_operands_without_an_index(
    dt: str, shape: tuple[int, int, int], looped: bool
) -> None:
    """Each operand of a tile has a base register of its own: its FMAs with a memory operand
    and its stores of C take base + displacement addresses, not the batch member's index
    shared by A, B and C (an indexed FMA issues as two micro-ops on Intel cores). Members
    taken one per work-group, or in a loop of one work-group."""
    text = group_members(dt, *shape)
    if looped:
        m, _, k = shape
        members = f"%n = size %A[2] : memref<{dt}x{m}x{k}x?>\n  for %g = 0, %n {{"
        text = text.replace("%g = group_id", members).replace("\n}", "\n  }\n}")
    loops = asm.hot_loops(assembly(text, "avx512"), "k")
    assert loops
    for loop in loops:
        stores = [i for i in loop.indexed_accesses("vmov") if re.match(r"vmov\w+\s+%zmm", i)]
        assert loop.indexed_accesses("vfmadd") == [] and stores == [], loop.label


def test_avx512_uses_no_narrower_vectors_and_avx2_no_wider() -> None:
    text = group_members("f32", 64, 64, 256)
    assert "zmm" in assembly(text, "avx512")
    assert "zmm" not in assembly(text, "avx2")
    assert "vfmadd" not in assembly(text, "generic")  # the baseline x86-64 has no FMA


def test_large_tile_keeps_all_accumulators_in_registers() -> None:
    """The in-cache shape gets a tile of many accumulators (mv*nr near the register file)."""
    (loop, *_) = sorted(check_hot_loops(group_members("f32", 64, 64, 256), "avx512"),
                        key=lambda lp: -lp.count("vfmadd"))  # fmt: skip
    assert loop.count("vfmadd") >= 24
    assert len(loop.registers("zmm")) >= 26


def test_dynamic_sizes_and_runtime_alpha_beta() -> None:
    """The K loops stay spill-free. The per-tile epilogues (the loops that store C) may reload
    loop invariants LLVM hoisted out of the M loop (13 column offsets of a C with a runtime
    stride, the beta broadcast), once per tile, but never spill a vector to the stack."""
    text = """func @k(%a: f64, %b: f64, %A: memref<f64x?x?>, %B: memref<f64x?x?>, %C: memref<f64x?x?>) {
  gemm.n.t %a, %A, %B, %b, %C : f64, memref<f64x?x?>, memref<f64x?x?>, f64, memref<f64x?x?>
}"""
    loops = asm.hot_loops(assembly(text, "avx512"), "k")
    stores_c = re.compile(r"^vmov\w+\s+%zmm\d+, .*\((?!%rsp)")
    k_loops = [loop for loop in loops if not any(stores_c.match(i) for i in loop.instructions)]
    assert k_loops, "no K loop found"
    for loop in k_loops:
        assert loop.stack_accesses() == [], f"{loop.label} touches the stack (spills)"
    vector_spill = re.compile(r"^vmov\w+\s+%zmm\d+, -?\d*\(%rsp\)")
    for loop in loops:
        assert not any(vector_spill.match(i) for i in loop.instructions), loop.label


def test_batch_reduce_keeps_accumulators_across_the_batch() -> None:
    text = """func @k(%A: group<memref<f32x64x64>>, %B: memref<f32x64x64x16>, %C: memref<f32x64x64>) {
  for %i = 0, 16 {
    %a = load %A[%i] : group<memref<f32x64x64>>
    %b = subview %B[:,:,%i] : memref<f32x64x64x16>
    gemm.n.n 1.0, %a, %b, 1.0, %C : f32, memref<f32x64x64>, memref<f32x64x64>, f32, memref<f32x64x64>
  }
}"""
    compilation = nanotc.compile(text, target="avx512")
    assert "tile.batch_gemm" in compilation.tiled()
    check_hot_loops(text, "avx512")
    # C is loaded and stored once per tile, outside the batch loop: no vector store in a
    # loop that also holds the FMAs and the batch's pointer loads
    for loop in asm.hot_loops(assembly(text, "avx512"), "k"):
        assert not any(i.startswith("vmovups") and i.endswith(")") and "%zmm" in i.split(",")[0]
                       for i in loop.instructions)  # fmt: skip


def test_blocked_path_packs_and_stays_spill_free() -> None:
    t = "memref<f32x1024x1024>"  # A alone overflows half of L2
    text = f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {t}, {t}, f32, {t}
}}"""
    compilation = nanotc.compile(text, target="avx512")
    assert "tile.pack" in compilation.tiled()
    check_hot_loops(text, "avx512")


@pytest.mark.parametrize("target", ["avx512", "avx2"])
@pytest.mark.parametrize("shape", [(3136, 64, 576), (96, 512, 1000)], ids=str)
def test_in_place_paths_stay_spill_free(target: str, shape: tuple[int, int, int]) -> None:
    """W3's 3136x64x576 (row panels of A) and 96x512x1000 (K blocks): operands read in
    place (no packing), tiles in full-width registers, nothing spilled; the row panels' 3 x 8
    tile (on AVX-512) has its 24 FMAs in one K loop."""
    m, n, k = shape
    a, b, c = f"memref<f32x{m}x{k}>", f"memref<f32x{k}x{n}>", f"memref<f32x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert "tile.pack" not in nanotc.compile(text, target=target).tiled()
    loops = check_hot_loops(text, target)
    if target == "avx512" and m == 3136:
        assert any(loop.count("vfmadd") == 24 for loop in loops)


@pytest.mark.parametrize(
    ("shape", "path"),
    [((1000, 1000, 1000), "tile.pack"), ((1024, 1024, 1024), "tile.pack"),
     ((3136, 256, 64), "tile.line_lead"), ((12544, 64, 147), "tile.line_lead")],
    ids=str,
)  # fmt: skip
def test_avx2_tiles_on_whole_rows_of_a_hold_twelve_accumulators(
    shape: tuple[int, int, int], path: str
) -> None:
    """Without k registers, masks are vector registers, but tiles reading A from packed
    panels or row panels of whole vectors mask only C's epilogue: their K loops hold the
    2 x 6 tile's 12 accumulators (8 while masks were counted) and spill nothing, with the
    run-time rows of a block (M = 1000) and a run-time beta of the first K block."""
    m, n, k = shape
    a, b, c = f"memref<f32x{m}x{k}>", f"memref<f32x{k}x{n}>", f"memref<f32x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert path in nanotc.compile(text, target="avx2").tiled()
    loops = check_hot_loops(text, "avx2")
    assert max(loop.count("vfmadd") for loop in loops) == 12
    assert all(loop.count("vmaskmov") == 0 for loop in loops if loop.count("vfmadd") == 12)


@pytest.mark.parametrize(
    ("dt", "shape", "accumulators"),
    [("f32", (49, 2048, 512), 12), ("f64", (32, 32, 32), 12), ("f64", (20, 9, 20), 10)],
    ids=str,
)
def test_avx2_tiles_over_whole_vectors_of_m_take_no_mask_registers(
    dt: str, shape: tuple[int, int, int], accumulators: int
) -> None:
    """A static M of whole vectors (49 f32 rows: 48 in tiles, the last a dot product; 32 and
    20 f64 rows) is read without masks, so on AVX2 no register is kept for one: 2 x 6 and
    3 x 4 tiles (8 accumulators while a mask was counted) and 5 vectors by 2 columns (1 x 9
    before), spilling nothing."""
    m, n, k = shape
    a, b, c = f"memref<{dt}x{m}x{k}>", f"memref<{dt}x{k}x{n}>", f"memref<{dt}x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : {dt}, {a}, {b}, {dt}, {c}
}}"""
    loops = check_hot_loops(text, "avx2")
    assert max(loop.count("vfmadd") for loop in loops) == accumulators
    assert all(loop.count("vmaskmov") == 0 for loop in loops)


DYNAMIC_ROWS = {
    "gemm": """func @k(%A: memref<{t}x?x?>, %B: memref<{t}x?x?>, %C: memref<{t}x?x?>) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : {t}, memref<{t}x?x?>, memref<{t}x?x?>, {t}, memref<{t}x?x?>
}}""",
    "batch-reduce": """func @k(%A: memref<{t}x?x64x8>, %B: memref<{t}x64x6x8>, %C: memref<{t}x?x6>) {{
  for %j = 0, 8 {{
    %a = subview %A[:, :, %j] : memref<{t}x?x64x8>
    %b = subview %B[:, :, %j] : memref<{t}x64x6x8>
    gemm.n.n 1.0, %a, %b, 1.0, %C : {t}, memref<{t}x?x64>, memref<{t}x64x6>, {t}, memref<{t}x?x6>
  }}
}}""",
}


@pytest.mark.parametrize("kernel", sorted(DYNAMIC_ROWS))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_avx2_masks_of_run_time_rows_take_one_register_each(kernel: str, dt: str) -> None:
    """On AVX2 the K loops of tiles over a run-time number of rows load A with vmaskmov
    under masks computed once before the loop: no compare in the loop (LLVM recomputed an
    i1 mask's compare at every K step from two live registers, and a 2 x 5 tile spilled)."""
    text = DYNAMIC_ROWS[kernel].format(t=dt)
    loops = check_hot_loops(text, "avx2")
    assert any(loop.count("vmaskmov") for loop in loops)
    assert all(loop.count("vpcmp") == 0 for loop in loops)


MASKED_STORE = re.compile(r"vmaskmovp[sd]\s+%ymm\d+, %ymm\d+, -?\d*\(")
PLAIN_STORE = re.compile(r"vmovup[sd]\s+%ymm\d+, -?\d*\(%r(?!sp)")


@pytest.mark.parametrize("kernel", sorted(DYNAMIC_ROWS))
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_avx2_tiles_of_run_time_rows_store_whole_tiles_without_masks(kernel: str, dt: str) -> None:
    """A tile of a run-time number of rows stores C under masks only when the rows do not
    fill it: the whole-tile branch stores as many vectors without masks (Zen 3 takes about
    20 cycles per `vmaskmovps` store)."""
    code = assembly(DYNAMIC_ROWS[kernel].format(t=dt), "avx2")
    masked = len(MASKED_STORE.findall(code))
    assert masked > 0
    assert len(PLAIN_STORE.findall(code)) >= masked


def test_blocked_tiles_store_whole_tiles_without_masks() -> None:
    """The blocked path's row blocks have a run-time number of rows (`tile.min`) even where
    M divides into them: W3's 784x128x1152 stores its 16 x 6 tiles' 12 vectors plainly."""
    a, b, c = "memref<f32x784x1152>", "memref<f32x1152x128>", "memref<f32x784x128>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert "tile.pack" in nanotc.compile(text, target=ZEN3).tiled()
    code = assembly(text, ZEN3)
    assert len(PLAIN_STORE.findall(code)) >= 12 and MASKED_STORE.search(code)


BROADCAST_ADDRESS = re.compile(r"vbroadcasts[sd]\s+\(%(\w+),%\w+(?:,[248])?\)")


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_b_columns_of_a_run_time_stride_keep_a_register_each(dt: str) -> None:
    """W1's kernel (run-time sizes and strides, B read in place): each of the 2 x 6 tile's
    columns of B is broadcast from a base register of its own indexed by k, with no
    address arithmetic in the K loop (LLVM had rebuilt four of them from one base and the
    stride at every step)."""
    from bench import kernels

    loops = [
        loop
        for loop in check_hot_loops(kernels.column_blocks(dt, 1024), "avx2", "gemm")
        if loop.count("vfmadd") == 12
    ]
    assert loops
    for loop in loops:
        bases = [BROADCAST_ADDRESS.search(i) for i in loop.instructions]
        assert len({m.group(1) for m in bases if m}) == 6
        assert loop.count("lea") == 0


GROUP_BROADCAST = re.compile(r"vbroadcasts[sd]\s+\(%(\w+)(?:,%\w+,[248])?\)")


@pytest.mark.parametrize(
    ("target", "dt", "vectors"),
    [(ZEN3, "f32", 1), (ZEN3, "f64", 1), (get("avx512"), "f64", 2)],
    ids=["zen3-f32", "zen3-f64", "avx512-f64"],
)
def test_wide_tiles_walk_columns_of_a_run_time_stride_in_groups(
    target: Target, dt: str, vectors: int
) -> None:
    """W1's kernel in column blocks of 128: the small problems' branch takes 13-column tiles
    (one vector tall on Zen 3, two on AVX-512), wider than the general registers left for a
    base per column. Their 13 columns are broadcast from 4 group pointers (each plus 0-3
    strides), each moved by an add of its own per k step: no chain of adds rebuilding the
    columns (LLVM had made one of 11 adds), nothing spilled."""
    from bench import kernels

    text = kernels.column_blocks(dt, 128)
    assert "x 13 :" in nanotc.compile(text, target=target).tiled()
    loops = [
        loop
        for loop in asm.hot_loops(assembly(text, target), "gemm", "vfmadd")
        if loop.count("vfmadd") == 13 * vectors
    ]
    assert loops
    for loop in loops:
        assert loop.stack_accesses() == []
        bases = [GROUP_BROADCAST.search(i) for i in loop.instructions]
        assert len({m.group(1) for m in bases if m}) == 4
        assert loop.count("add") <= 4 + 1  # the groups' and A's pointers


def test_avx2_tiles_holding_b_columns_keep_the_registers_of_libxsmms() -> None:
    """W2's f32 56x9x9 on AVX2 takes 4 x 3 tiles that hold B's three broadcasts and load A
    a vector at a time (`register_tile.holds_b_columns`): per k step, 3 broadcasts, 4 loads
    of A and 12 FMAs on ymm registers, nothing spilled, as in libxsmm's AVX2 kernel."""
    text = group_members("f32", 56, 9, 9)
    assert "tile 32 x 3" in nanotc.compile(text, target="avx2").tiled()
    loops = [loop for loop in check_hot_loops(text, "avx2") if loop.count("vfmadd") == 12]
    assert loops
    for loop in loops:
        assert loop.count("vbroadcastss") == 3
        assert loop.count("vmovups") == 4


@pytest.mark.parametrize(("target", "steps"), [(ZEN3, 2), (get("avx2"), 1)], ids=["zen3", "avx2"])
def test_static_k_loops_take_the_targets_steps_per_iteration(target: Target, steps: int) -> None:
    """A K loop over static addresses runs `Target.k_unroll` k steps an iteration (two on
    Zen 3 and the AMX Xeon, measured; one elsewhere), spilling nothing: f32 32^3's 4 x 3
    tiles (members of a batch in cache), 12 FMAs a step."""
    text = looped_members("f32", 32, 32, 32)
    loops = asm.hot_loops(assembly(text, target), "k")
    assert max(loop.count("vfmadd") for loop in loops) == 12 * steps  # 4 x 3 (4 x 2 beside)
    assert all(loop.stack_accesses() == [] for loop in loops)


TWO_STEPS = replace(get("avx512"), name="avx512-two-steps", k_unroll=2)
"""AVX-512 taking two k steps an iteration, as the AMX Xeon (`rocketlake`) does."""


@pytest.mark.parametrize(
    ("dt", "shape", "tile", "steps"),
    [("f32", (35, 9, 35), "48 x 9", 1), ("f64", (64, 64, 64), "16 x 14", 1),
     ("f64", (35, 9, 35), "40 x 5", 2), ("f32", (64, 64, 64), "64 x 6", 2)],
    ids=str,
)  # fmt: skip
def test_k_loops_of_tiles_filling_the_registers_take_one_step(
    dt: str, shape: tuple[int, int, int], tile: str, steps: int
) -> None:  # fmt: skip
    """On 32 registers, a tile with more columns than vectors that leaves at most one
    register free beside its broadcast (3 x 9, 2 x 14) takes one k step an iteration of a
    target's two (`nanokernel.takes_one_step`: two spilled); 5 x 5 and 4 x 6 take two. No K
    loop spills."""
    text = looped_members(dt, *shape)
    compiled = nanotc.compile(text, target=TWO_STEPS, cache=False)
    assert f"tile {tile}" in compiled.tiled()
    assert f"unroll {steps}" in compiled.nanokernels()
    loops = asm.hot_loops(compiled.assembly(), "k")
    assert loops
    assert all(loop.stack_accesses() == [] for loop in loops)


@pytest.mark.parametrize(
    ("dt", "shape", "unrolled"),
    [("f32", (48, 9, 16), False), ("f32", (80, 5, 16), False), ("f32", (32, 14, 16), False),
     ("f64", (24, 9, 16), False), ("f32", (64, 6, 16), False), ("f32", (16, 16, 16), True),
     ("f64", (24, 8, 16), True), ("f32", (12, 30, 16), True)],
    ids=str,
)  # fmt: skip
@pytest.mark.parametrize("members", [looped_members, group_members], ids=["looped", "group"])
def test_lone_tiles_unroll_k_completely_only_where_two_steps_fit(
    dt: str, shape: tuple[int, int, int], unrolled: bool, members: Callable[..., str]
) -> None:  # fmt: skip
    """A tile that is all of C unrolls a K of up to 16 completely only where its
    accumulators, two steps' vectors of A and a broadcast fit the registers, or it is one
    vector tall (`register_tile.unrolled_steps_fit`); the others loop over K. On AVX-512
    (and the AMX Xeon) the straight-line 48 x 9 spilled 154 vector moves, 80 x 5 and 32 x 14
    over 130 as batch members. Nothing spills, in the loops or out of them."""
    for target in ("avx512", TWO_STEPS):
        compiled = nanotc.compile(members(dt, *shape), target=target, cache=False)
        assert ("for k (full)" in compiled.nanokernels()) is unrolled
        assert asm.vector_stack_accesses(compiled.assembly(), "k") == []


@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_k_loops_streaming_the_next_member_take_one_step(dt: str) -> None:
    """A K loop that prefetches the next work-group's member (`tile.gemm ... next`) takes
    one k step an iteration on a target of two (`nanokernel.k_unroll`: it waits on memory),
    while the same gemm looped over a batch in cache takes two."""
    streamed = nanotc.compile(group_members(dt, 35, 9, 35), target=ZEN3, cache=False)
    assert " next a " in streamed.tiled()
    assert set(re.findall(r"unroll (\d+)", streamed.nanokernels())) == {"1"}
    looped = nanotc.compile(looped_members(dt, 35, 9, 35), target=ZEN3, cache=False)
    assert set(re.findall(r"unroll (\d+)", looped.nanokernels())) == {"2"}


@pytest.mark.parametrize(("ty", "steps"), [("f32", 2), ("f64", 1)])
def test_blocked_f32_tiles_on_packed_a_take_the_targets_steps(ty: str, steps: int) -> None:
    """The blocked path's f32 tiles on packed panels of A run `Target.k_unroll` k steps an
    iteration though the rows and B's strides are known only at run time (W1's kernel:
    `unrolls_on_a_packed_panel`), spilling nothing; f64 tiles keep one step."""
    t = f"memref<{ty}x?x?>"
    text = f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {ty}, {t}, {t}, {ty}, {t}
}}"""
    loops = asm.hot_loops(assembly(text, ZEN3), "k")
    tiles = [loop for loop in loops if loop.count("vfmadd") in (12, 24)]  # 2 x 6 tiles
    assert max(loop.count("vfmadd") for loop in tiles) == 12 * steps
    assert all(loop.stack_accesses() == [] for loop in tiles)


def tiled_of(text: str) -> str:
    return nanotc.compile(text, target="avx512").tiled()


def test_k_loops_prefetch_a_and_unrolled_kernels_do_not() -> None:
    """A K loop over a contiguous A prefetches the lines of A a few steps ahead (one per 64
    bytes of the tile's rows); a fully unrolled small kernel has no loop to run ahead of."""
    t = "memref<f32x1024x1024>"
    text = f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {t}, {t}, f32, {t}
}}"""
    rows, columns = map(int, re.search(r"tile (\d+) x (\d+)", tiled_of(text)).groups())
    k_loops = [loop for loop in asm.hot_loops(assembly(text, "avx512"), "k")
               if loop.count("vfmadd") >= rows // 16 * columns]  # fmt: skip
    assert k_loops and all(loop.count("prefetcht0") == rows * 4 // 64 for loop in k_loops)
    # group views by another index than the group id: no next-group prefetches either
    small_text = (
        group_members("f32", 16, 16, 16)
        .replace("%g]", "%i]")
        .replace("%g = group_id", "%g = group_id\n  %i = arith.rem %g, 2 : index")
    )
    small = asm.hot_loops(assembly(small_text, "avx512"), "k")
    assert small and not any(loop.count("prefetch") for loop in small)


@pytest.mark.parametrize("target", ["avx512", "avx2"])
def test_long_k_loops_prefetch_a_further_ahead(target: str) -> None:
    """A K loop longer than 64 steps asks for A's lines 16 steps ahead, time enough for
    them to come from L3 (W3's 3136 x 64 x 256: the masked tiles of the rows around the row
    panels, A's columns 3136 floats apart: 16 x 12544 bytes); a batch member's short K loop
    (f64 64^3, A past half of L1) 4 steps ahead."""
    a, b, c = "memref<f32x3136x256>", "memref<f32x256x64>", "memref<f32x3136x64>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert "k+16]" in nanotc.compile(text, target=target).nanokernels()
    code = "\n".join(i for loop in asm.hot_loops(assembly(text, target), "k")
                     for i in loop.instructions)  # fmt: skip
    assert f"prefetcht0\t{16 * 3136 * 4}(" in code and f"\t{4 * 3136 * 4}(" not in code
    member = nanotc.compile(group_members("f64", 64, 64, 64), target=target).nanokernels()
    assert "k+4]" in member and "k+16]" not in member


@pytest.mark.parametrize(
    ("target", "dt", "shape", "prefetched"),
    [
        ("avx2", "f32", (32, 32, 32), False),  # A 4 KiB, K 32: stays in L1
        ("avx512", "f32", (32, 32, 32), False),
        ("avx2", "f64", (35, 9, 35), False),
        ("avx512", "f64", (35, 9, 35), False),
        ("avx2", "f32", (64, 64, 64), False),  # A 16 KiB: half of L1
        ("avx2", "f64", (64, 64, 64), True),  # A 32 KiB
        ("avx2", "f32", (20, 9, 20), True),  # K below 32: prefetches reach the next member
        ("avx2", "f32", (16, 16, 16), True),
    ],
)
def test_k_loops_over_an_a_that_stays_in_l1_prefetch_none_of_it(
    target: str, dt: str, shape: tuple[int, int, int], prefetched: bool
) -> None:
    """A batch member whose A stays in L1, with K from 32, finds A there in every column of
    tiles but the first, so its K loops ask for none of A's lines (`resident_a`); the
    next member's lines are still streamed."""
    text = group_members(dt, *shape)
    plans = nanotc.compile(text, target=target).nanokernels()
    assert ("prefetch A[" in plans) is prefetched
    assert "next a" in plans
    size = 4 if dt == "f32" else 8
    m = shape[0]
    a_prefetches = [
        i
        for loop in asm.hot_loops(assembly(text, target), "k")
        for i in loop.instructions
        if "prefetcht0" in i and f"\t{4 * m * size}(" in i
    ]
    assert bool(a_prefetches) is prefetched


@pytest.mark.parametrize(
    ("target", "dt", "shape", "fetched", "peeled"),
    [
        # 20 x 2 tiles: the first block peeled, three looped, then a 20 x 1 remainder
        ("avx2", "f64", (20, 9, 20), [False, True, True], True),
        # 32 x 3 and 24 x 3 tiles down each of three blocks
        (ZEN3, "f32", (56, 9, 9), [False, False, True, True], True),
        # two blocks of 16 x 6 in their loop, the remainder 16 x 4 on its own
        ("avx2", "f32", (16, 16, 16), [False, True], False),
        (ZEN3, "f64", (56, 9, 9), [False, True], False),  # one block, then the remainder
        (ZEN3, "f64", (8, 8, 16), [False], False),  # two blocks, no remainder: not peeled
        ("avx2", "f32", (32, 32, 32), [False, False], False),  # K 32: `resident_a`
        ("avx2", "f64", (96, 16, 24), [False, False], False),  # A 18 KiB: past half of L1
    ],
)
def test_only_the_first_column_block_prefetches_an_a_in_l1(
    target: str | Target, dt: str, shape: tuple[int, int, int], fetched: list[bool],
    peeled: bool,
) -> None:  # fmt: skip
    """A short K loop over an A that stays in L1 asks for A's lines in C's first column
    block of tiles only; the tiles of the later blocks find A in L1 (`tile.gemm.fetched`)
    and their K loops prefetch none of it. The first block leaves the loop over the
    blocks where three or more remain in it; else only the remainder's tiles gain."""
    text = group_members(dt, *shape)
    lines = nanotc.compile(text, target=target).tiled().splitlines()
    tiles = [line for line in lines if "tile.gemm" in line]
    assert [".fetched" in line for line in tiles] == fetched
    if peeled:
        assert re.search(r", 0\] rows", tiles[0])
        assert not any(re.search(r"for %\w+ = 0,", line) for line in lines)
    size = 4 if dt == "f32" else 8
    a_prefetching = [
        any("prefetcht0" in i and f"\t{4 * shape[0] * size}(" in i for i in loop.instructions)
        for loop in asm.hot_loops(assembly(text, target), "k")
    ]
    short = shape[2] < 32
    # LLVM may unroll a loop over two column blocks, repeating its K loop: compare runs
    assert _runs(a_prefetching) == _runs([short and not f for f in fetched])


def _runs(flags: list[bool]) -> list[bool]:
    """The flags with each run of equal neighbours taken once."""
    return [f for i, f in enumerate(flags) if i == 0 or flags[i - 1] != f]


def test_row_panel_tiles_prefetch_no_a_in_their_k_loops() -> None:
    """The tiles of W3's row panels on Zen 3 find A in L1, asked for by the tiles of the
    block before (`tile.gemm.fetched`): their K loops (2 x 6 and 2 x 4 tiles, two steps an
    iteration) hold no prefetch, where the masked one-vector tiles around the panels keep
    theirs, one per step."""
    a, b, c = "memref<f32x3136x576>", "memref<f32x576x64>", "memref<f32x3136x64>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    loops = asm.hot_loops(assembly(text, ZEN3), "k")
    prefetches = {(loop.count("vfmadd"), loop.count("prefetch")) for loop in loops}
    assert prefetches == {(24, 0), (16, 0), (6, 1), (4, 1)}


def test_blocked_path_reads_packed_panels_without_masks() -> None:
    """Packed A panels are zero-padded to whole tiles, so the K loop loads them unmasked even
    when the block's rows are only known at run time (M = 1000 is not a whole number of
    blocks): no lane masks built or applied in the K loop, only in C's epilogue."""
    t = "memref<f32x1000x1000>"
    text = f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {t}, {t}, f32, {t}
}}"""
    assert "tile.pack" in nanotc.compile(text, target="avx512").tiled()
    k_loops = [loop for loop in asm.hot_loops(assembly(text, "avx512"), "k")
               if loop.count("vfmadd") >= 16]  # fmt: skip
    assert k_loops
    for loop in k_loops:
        assert not any(i.startswith(("vpcmp", "kunpck", "kmov")) or "{%k" in i
                       for i in loop.instructions), loop.label  # fmt: skip


def test_small_tile_loads_all_of_c_before_storing() -> None:
    """A 21 x 9 C is two vectors per column, the second masked: every load of C comes
    before the first masked store, which would block forwarding to overlapping later loads."""
    lines = asm.function_lines(assembly(group_members("f32", 21, 9, 20), "avx512"), "k")
    masked_loads = [n for n, line in enumerate(lines) if "{%k" in line and "{z}" in line]
    masked_stores = [n for n, line in enumerate(lines)
                     if line.strip().startswith("vmovups") and "{%k" in line and "{z}" not in line]  # fmt: skip
    assert masked_loads and masked_stores
    assert max(masked_loads) < min(masked_stores)


def test_one_vector_tile_keeps_a_resident_and_streams_c_by_column_groups() -> None:
    """f32 16^3 on AVX-512 (`GemmNanokernel.column_group`): A's 16 vectors loaded once for
    both groups of eight columns, the first group's columns of C stored before the second
    group's FMAs, and nothing spilled."""
    (loop,) = check_hot_loops(group_members("f32", 16, 16, 16), "avx512")
    lines = loop.instructions
    fmas = [n for n, line in enumerate(lines) if line.startswith("vfmadd")]
    stores = [n for n, line in enumerate(lines) if re.match(r"vmovups\t%zmm\d+, ", line)]
    loads = [line for line in lines if re.match(r"vmovups\t\S*\(", line)]
    assert len(fmas) == 256 and len(stores) == 16
    assert len(loads) <= 32  # A's 16 vectors and at most C's 16 columns: A is not reloaded
    assert stores[7] < fmas[128] and stores[8] > fmas[-1]


@pytest.mark.parametrize(
    ("dt", "shape", "alpha"),
    [("f32", (16, 16, 16), "%alpha"), ("f64", (5, 16, 16), "1.0"), ("f64", (8, 24, 16), "%alpha"),
     ("f32", (12, 30, 16), "1.0")],
    ids=str,
)  # fmt: skip
def test_tiles_keeping_a_resident_do_not_spill(dt: str, shape: tuple[int, int, int],
                                               alpha: str) -> None:  # fmt: skip
    """Whole and masked rows, a run-time alpha's broadcast, and the AVX-512 target's
    prefetch of the next member's lines spread over the groups: nothing on the stack."""
    text = group_members(dt, *shape).replace("gemm.n.n 1.0,", f"gemm.n.n {alpha},")
    text = text.replace(") {", f", %alpha: {dt}) {{", 1) if alpha != "1.0" else text
    assert "(A resident)" in nanotc.compile(text, target="avx512").nanokernels()
    check_hot_loops(text, "avx512", registers=gemm_registers("avx512", dt, shape[0]))


def test_whole_vector_tiles_accumulate_onto_c() -> None:
    """C := C + A B on whole vectors starts the accumulators from C: no adds of C after the
    K loop."""
    text = group_members("f32", 64, 64, 64)
    assert "acc[0..3][0..5] := C[tile]" in nanotc.compile(text, target="avx512").nanokernels()
    assert "vaddps" not in assembly(text, "avx512")


@pytest.mark.parametrize(
    "body",
    [
        "axpby.n %a, %x, %b, %y : f32, memref<f32x?>, f32, memref<f32x?>",
        "hadamard %a, %x, %x, %b, %y : f32, memref<f32x?>, memref<f32x?>, f32, memref<f32x?>",
        "sum.n %a, %x, %b, %s : f32, memref<f32x?>, f32, memref<f32>",
        "gemv.t %a, %M, %x, %b, %y : f32, memref<f32x?x?>, memref<f32x?>, f32, memref<f32x?>",
        "gemv.n %a, %M, %x, %b, %y : f32, memref<f32x?x?>, memref<f32x?>, f32, memref<f32x?>",
    ],
    ids=lambda b: b.split()[0],
)
def test_memory_bound_instructions_use_full_vectors(body: str) -> None:
    text = (
        "func @k(%a: f32, %b: f32, %x: memref<f32x?>, %y: memref<f32x?>, %s: memref<f32>, "
        f"%M: memref<f32x?x?>) {{\n  {body}\n}}"
    )
    code = assembly(text, "avx512")
    assert "zmm" in code and "ymm" not in _vector_arithmetic(code)


def _vector_arithmetic(code: str) -> str:
    """Lines with vector adds, multiplies and multiply-adds (not shuffles of a reduction)."""
    ops = ("vadd", "vmul", "vfmadd")
    return "\n".join(line for line in code.splitlines() if line.strip().startswith(ops))


def bf16_gemm(m: int, n: int, k: int, out: str = "f32") -> str:
    a, b, c = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<{out}x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, {a}, {b}, f32, {c}
}}"""


@pytest.mark.parametrize(("dt", "inputs", "shape"), [("f32", "bf16", (24, 9, 20)),
                                                     ("f32", "bf16", (32, 32, 32)),
                                                     ("f32", None, (20, 9, 20)),
                                                     ("f64", None, (12, 9, 20))], ids=str)  # fmt: skip
def test_two_vector_tiles_read_b_per_vector(dt: str, inputs: str | None,
                                            shape: tuple[int, int, int]) -> None:  # fmt: skip
    """Dot tiles of two vectors on Zen 4, and FMA tiles of two whose last computes narrow,
    take B's broadcast as every multiply-add's memory operand ({1toN}, `b_per_vector`): no
    broadcast instruction in the hot loop, each product reads B, nothing spilled; the
    listing shows it. (bf16 24 rows: a tail of 8; one of 4, as 20x9x20's, takes K quads,
    `test_bf16_tail_quads`.)"""
    text = looped_members(dt, *shape, inputs=inputs)
    op = "vdpbf16ps" if inputs else "vfmadd"
    assert "{1toN}" in nanotc.compile(text, target=ZEN4).nanokernels()
    loops = asm.hot_loops(assembly(text, ZEN4), "k", op)
    assert loops
    for loop in loops:
        assert loop.stack_accesses() == [], f"{loop.label} touches the stack (spills)"
        assert loop.count("vbroadcast") == loop.count("vpbroadcast") == 0
        products = [i for i in loop.instructions if i.startswith(op)]
        assert products and all("{1to" in i for i in products), products


@pytest.mark.parametrize(("target", "text"), [
    (ZEN4, looped_members("f32", 35, 9, 35, inputs="bf16")),  # three vectors
    (ZEN4, looped_members("f32", 64, 6, 64)),  # four
    (ZEN4, bf16_gemm(20, 9, 20).replace("memref<bf16x20x9>", "memref<bf16x20x9,strided<1,?>>")),
    (ZEN4, looped_members("f32", 32, 32, 32)),  # two whole f32 vectors
    (ZEN4, group_members("f32", 32, 32, 32, inputs="bf16")),  # a member picked by the group id
    ("avx512", looped_members("f32", 20, 9, 20)),  # two, on a CPU where it is not measured
    ("avx2", looped_members("f32", 16, 6, 16)),  # two, but AVX2 FMAs read no broadcasts
], ids=["bf16-35x9x35", "f32-64x6x64", "run-time-column-stride", "f32-32x32x32",
        "group-member", "avx512", "avx2"])  # fmt: skip
def test_other_tiles_share_one_broadcast_per_column(target: str | Target, text: str) -> None:
    """Elsewhere a k step broadcasts each of B's elements once, for all of the tile's
    vectors: with three or four vectors the extra loads would cost more than the broadcasts,
    two whole f32 vectors ran slower, B's columns a run-time stride apart are not addressed
    per vector, a batch member picked
    by the group id is taken to come from memory (where the loads wait with the misses),
    AVX2 has no broadcast operands, and other AVX-512 CPUs are not measured (Intel's split
    indexed FMA operands)."""
    assert "{1toN}" not in nanotc.compile(text, target=target).nanokernels()


def test_short_k_dot_tiles_start_from_zero() -> None:
    """A bf16 dot tile of a short K with 12 or more accumulators starts them from zero and
    adds C after the K loop (its chains would otherwise wait for C's loads); a tile of 8
    keeps starting from C, and so does every f32 tile (`short_dot_chains`). (A batch
    member picked by the group id: elsewhere 56x9x9 holds A's pairs, `resident_pairs_tile`.)"""
    member = group_members("f32", 56, 9, 9, "bf16")
    plans = nanotc.compile(member, target="avx512").nanokernels()
    assert "acc[0..3][0..5] := 0" in plans and "acc[0..3][0..2] := 0" in plans
    assert "C[tile] := acc + C" in plans and ":= C[tile]" not in plans
    code = asm.function_lines(assembly(member, "avx512"), "k")
    assert sum(line.strip().startswith("vaddps") for line in code) == 4 * 9
    assert not any("(%rsp)" in line and "mm" in line for line in code)  # no vector spilled
    assert (
        "acc[0..0][0..7] := C[tile]" in nanotc.compile(bf16_gemm(8, 8, 8), "avx512").nanokernels()
    )


@pytest.mark.parametrize("shape", [(64, 64, 256), (35, 9, 35), (16, 16, 17)], ids=str)
def test_bf16_gemm_uses_vdpbf16ps_on_zmm(shape: tuple[int, int, int]) -> None:
    """On AVX512-BF16 (no AMX) a bf16 gemm's hot loop is vdpbf16ps on zmm, nothing spilled;
    odd K included (the last K step pairs with zeros)."""
    loops = asm.hot_loops(assembly(bf16_gemm(*shape), "avx512"), "k", "vdpbf16ps")
    assert loops
    for loop in loops:
        dots = [i for i in loop.instructions if i.startswith("vdpbf16ps")]
        assert dots and all("%zmm" in i for i in dots)
        assert loop.stack_accesses() == []


@pytest.mark.parametrize("out", ["bf16", "f16"])
def test_16_bit_outputs_keep_vdpbf16ps_tiles(out: str) -> None:
    """A bf16 gemm into a 16-bit C runs the K loops of the same gemm into an f32 C (on its
    f32 scratch): vdpbf16ps on zmm, nothing spilled."""

    def dots(c_type: str) -> list[int]:
        code = assembly(bf16_gemm(64, 64, 256, c_type), "avx512")
        loops = asm.hot_loops(code, "k", "vdpbf16ps")
        for loop in loops:
            products = [i for i in loop.instructions if i.startswith("vdpbf16ps")]
            assert all("%zmm" in i for i in products) and loop.stack_accesses() == []
        return [loop.count("vdpbf16ps") for loop in loops]

    assert dots(out) == dots("f32") and all(dots(out))


@pytest.mark.parametrize(
    ("shape", "unpacking"),
    [((35, 9, 35), {6: True, 3: True}), ((56, 9, 9), {6: False, 3: True})],
    ids=str,
)
def test_long_bf16_k_loops_unpack_a_within_lanes(shape: tuple[int, int, int],
                                                  unpacking: dict[int, bool]) -> None:  # fmt: skip
    """A gemm whose A is not packed interleaves A's columns in its K loop: rows 0-31 of
    columns k and k+1 by vpunpcklwd/vpunpckhwd where the K loop has at least as many pairs
    as the tile has columns (the accumulators' rows reordered once at each end), else each
    16 rows by one cross-lane vpermt2w (35x9x35 1.08-1.1x; 56x9x9's tiles of six columns,
    five K pairs, 0.94x unpacked). `unpacking`: tile columns -> unpacked. (Batch members
    picked by the group id: elsewhere 56x9x9 holds A's pairs, `resident_pairs_tile`.)"""
    compilation = nanotc.compile(group_members("f32", *shape, "bf16"), target="avx512")
    plans = compilation.nanokernels().split("nanokernel ")[1:]
    columns = [int(re.search(r"x (\d+) columns", plan).group(1)) for plan in plans]
    assert {n: "vunpck(l,h)wd" in plan for n, plan in zip(columns, plans)} == unpacking
    code = compilation.assembly()
    assert bool(re.search(r"vpunpck[lh]wd\s+%zmm", code)) == any(unpacking.values())
    for loop in asm.hot_loops(code, "k", "vdpbf16ps"):
        unpacks = [i for i in loop.instructions if i.startswith("vpunpck") and "%zmm" in i]
        words = loop.count("vpermt2w")
        # unpacking: one pair of vectors and a third interleaved alone, for 56 rows also
        # a fourth of eight rows (a ymm); interleaving alone (56 rows): four vectors
        alone = 2 if shape[0] == 56 else 1
        assert words == (len(unpacks) // 2 * alone if unpacks else 4)
        assert loop.stack_accesses() == []


def test_blocked_bf16_gemm_loads_packed_pairs_without_shuffles() -> None:
    """The blocked path keeps bf16 in A's pack, in VNNI pairs, and reads the pairs of a
    column-major B where they lie: the K loop of the full tiles is vdpbf16ps on zmm fed by
    plain loads of A's pairs and one broadcast from each of B's columns, with no
    interleaving shuffle and nothing spilled (the shuffles happen once, in A's pack)."""
    a, c = "memref<bf16x1024x1024>", "memref<f32x1024x1024>"  # A and B over half of L2
    text = f"""func @k(%A: {a}, %B: {a}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {a}, f32, {c}
}}"""
    tiled = nanotc.compile(text, target="avx512").tiled()
    assert "tile.pack.n.pairs %A" in tiled and "tile.gemm.n.n.pairs" in tiled
    assert not re.search(r"tile\.pack\S* %B", tiled)
    rows, columns = map(int, re.search(r"pairs .* tile (\d+) x (\d+)", tiled).groups())
    loops = [loop for loop in asm.hot_loops(assembly(text, "avx512"), "k", "vdpbf16ps")
             if loop.count("vdpbf16ps") >= rows // 16 * columns]  # fmt: skip
    assert loops
    for loop in loops:
        dots = [i for i in loop.instructions if i.startswith("vdpbf16ps")]
        assert all("%zmm" in i for i in dots)
        assert loop.count("vbroadcastss") * (rows // 16) == len(dots)  # a vector of 16 rows
        assert not [i for i in loop.instructions if i.startswith(("vperm", "vpunpck", "vpshuf"))]
        assert loop.stack_accesses() == []


@pytest.mark.parametrize(("dt", "target"), [("f32", "avx512"), ("f64", "avx512"), ("f32", "avx2")])
def test_blocked_tiles_read_b_in_place(dt: str, target: str) -> None:
    """The blocked path reads a column-major B where it lies: the K loop of the full tiles
    is FMAs on full-width registers fed by loads of A's packed panel and one broadcast from
    each of B's columns (at most three quarters of an L1 set's ways of them), nothing
    spilled."""
    t = f"memref<{dt}x1024x1024>"  # A alone overflows half of L2: no direct path
    text = f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {dt}, {t}, {t}, {dt}, {t}
}}"""
    tiled = nanotc.compile(text, target=target).tiled()
    assert "tile.pack.n %A" in tiled and not re.search(r"tile\.pack\S* %B", tiled)
    columns = in_place_columns(get(target))
    broadcast = "vbroadcastsd" if dt == "f64" else "vbroadcastss"
    loops = [loop for loop in check_hot_loops(text, target) if loop.count("vfmadd") >= 8]
    assert loops
    for loop in loops:
        broadcasts = loop.count(broadcast)
        assert 0 < broadcasts <= columns
        assert loop.count("vfmadd") % broadcasts == 0  # every column: the tile's vectors


def test_packed_pairs_leave_the_k_loop_without_shuffles() -> None:
    """A 64x64x11 bf16 gemm packs A into VNNI pairs once: its tiles' K loops hold vdpbf16ps
    on zmm, no interleaving shuffle and no spill (unpacked, each K pair took four vpermt2w:
    six K pairs are too few for unpacking within lanes; with four, one tile holds them)."""
    loops = asm.hot_loops(assembly(bf16_gemm(64, 64, 11), "avx512"), "k", "vdpbf16ps")
    assert loops
    for loop in loops:
        assert not [i for i in loop.instructions if i.startswith(("vperm", "vpunpck", "vpshuf"))]
        assert all("%zmm" in i for i in loop.instructions if i.startswith("vdpbf16ps"))
        assert loop.stack_accesses() == []


def test_whole_panels_pack_without_masks() -> None:
    """A pack copies a whole panel (kb rows of B, known only at run time) with unmasked
    vectors: the masks of a panel of over eight vectors would not fit the k registers and
    were reloaded from the stack for every vector. (B is packed here because a tuned tile
    of 13 columns is too wide to read it in place.)"""
    a, c = "memref<bf16x?x?>", "memref<f32x?x?>"
    text = f"""func @k(%A: {a}, %B: {a}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {a}, f32, {c}
}}"""
    site = blocked_site(text, get("avx512"))
    wide = CompileOptions.of({site.key: GemmChoice((2, 13))})
    compilation = nanotc.compile(text, target="avx512", options=wide)
    assert re.search(r"tile\.pack\S* %B", compilation.tiled())
    code = compilation.assembly()
    copies = [
        loop
        for loop in asm.hot_loops(code, "k", "vmovups")
        if loop.count("vmovups") >= 16 and not loop.count("vdpbf16ps")
    ]
    assert any(
        loop.stack_accesses() == [] and not any("{%k" in i for i in loop.instructions)
        for loop in copies
    )


@pytest.mark.parametrize("alpha", ["1.0", "%alpha"])
def test_wide_one_vector_bf16_tiles_do_not_spill(alpha: str) -> None:
    """Tiles of one vector by up to 28 columns, which the tuner may pick: their K pairs
    four at a time kept four vectors of A, their columns and B's quad beside 19 to 28
    accumulators and spilled in the K loop. Such tiles take a broadcast load per pair instead."""
    t = "memref<bf16x97x64>"
    text = f"""func @k(%A: {t}, %B: memref<bf16x64x64>, %C: memref<f32x97x64>, %alpha: f32) {{
  gemm.n.n {alpha}, %A, %B, 0.0, %C : f32, {t}, memref<bf16x64x64>, f32, memref<f32x97x64>
}}"""
    (site,) = gemm_sites(nanotc.load(text).function("k"), get("avx512"))
    for nr in (16, 18, 19, 21, 24, 28):
        options = CompileOptions.of({site.key: GemmChoice((1, nr))})
        code = nanotc.compile(text, target="avx512", options=options).assembly()
        loops = asm.hot_loops(code, "k", "vdpbf16ps")
        assert loops
        assert all(loop.stack_accesses() == [] for loop in loops), nr


def test_short_bf16_tiles_dot_in_narrower_whole_vectors() -> None:
    """bf16 8 x 8 x 8 on AVX512-BF16: vdpbf16ps on ymm, no lane masks and nothing spilled
    (as zmm with half the lanes masked it ran 0.81x as fast)."""
    code = assembly(bf16_gemm(8, 8, 8), "avx512")
    dots = [line for line in code.splitlines() if "vdpbf16ps" in line]
    assert dots and all("%ymm" in line and "%zmm" not in line for line in dots)
    assert "{%k" not in code and "(%rsp)" not in "".join(dots)


def test_blocked_tiles_prefetch_c_before_their_k_loop() -> None:
    """A blocked gemm's tiles read or write C only after a K loop of a whole K block: each
    asks for its lines of C (prefetchw) before the loop, none inside it. A tile starting
    from C (in cache, loaded at once) does not."""
    a = "memref<f32x?x?>"
    text = f"""func @k(%A: {a}, %B: {a}, %C: {a}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {a}, f32, {a}
}}"""
    compilation = nanotc.compile(text, target="avx512")
    assert "prefetchw every line of C[tile]" in compilation.nanokernels()
    code = compilation.assembly()
    # a 64 x 6 tile: one line per 16 rows and one for a column's last row
    assert code.count("prefetchw") >= 6 * 5
    loops = asm.hot_loops(code, "k", "vfmadd")
    assert loops and not any(loop.count("prefetchw") for loop in loops)
    in_cache = nanotc.compile(group_members("f32", 64, 64, 256), target="avx512")
    assert "prefetchw every line" not in in_cache.nanokernels()


@pytest.mark.parametrize("target", ["avx512", "avx2"])
@pytest.mark.parametrize(("k", "prefetched"), [(64, True), (147, True), (16, True), (8, False)])
def test_short_k_tiles_writing_c_prefetch_it_first(target: str, k: int, prefetched: bool) -> None:
    """W3's short-K row panels (C = A B, 3136 x 64 x K) store C into lines that were on their
    way from L3 or memory: from K = 16 on a tile asks for them before its K loop (none inside
    it); below that its loop is too short to hide the fetch. (Haswell, the avx2 target's
    CPU, has no prefetchw: LLVM asks for the lines with prefetcht0 there.)"""
    a, b, c = f"memref<f32x3136x{k}>", f"memref<f32x{k}x64>", "memref<f32x3136x64>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    compilation = nanotc.compile(text, target=target)
    assert ("prefetchw every line of C[tile]" in compilation.nanokernels()) is prefetched
    if target == "avx2":
        return
    code = compilation.assembly()
    assert ("prefetchw" in code) is prefetched
    loops = asm.hot_loops(code, "k", "vfmadd")
    assert loops and not any(loop.count("prefetchw") for loop in loops)


@pytest.mark.parametrize(
    ("dt", "shape", "prefetched"),
    [("bf16", (16, 16, 16), False), ("bf16", (64, 64, 64), False), ("f32", (35, 9, 35), False),
     ("bf16", (64, 64, 192), True)],
    ids=str,
)  # fmt: skip
def test_batch_members_within_l1_do_not_prefetch_c(dt: str, shape: tuple[int, int, int],
                                                   prefetched: bool) -> None:  # fmt: skip
    """Tiles writing C after their K loop ask for C's lines first, but not in a small gemm
    whose A, B and C span L1 at most together (`nanokernel.fetches_c_ahead`): a batch
    member's C comes with its A and B. A member past L1 (bf16 64x64x192: 64 KiB against the
    avx512 target's 48) still does."""
    text = group_members("f32", *shape, inputs=dt if dt != "f32" else None)
    listing = nanotc.compile(text, target="avx512").nanokernels()
    assert ("prefetchw every line of C[tile]" in listing) is prefetched
    assert "C[tile] := acc + C" in listing  # the tile reads and writes C after its K loop


def test_bf16_tile_narrows_its_last_vector() -> None:
    """bf16 20 x 9 x 20: the tile's last vector holds C's last four rows in an xmm, whose
    pairs two 8-byte loads and one vpunpcklwd make: no lane masks, nothing spilled."""
    compilation = nanotc.compile(bf16_gemm(20, 9, 20), target="avx512")
    plans = compilation.nanokernels()
    assert "1x16+4 rows" in plans
    assert "A[row+16:row+20, k]" in plans
    code = compilation.assembly()
    assert "{%k" not in code and "(%rsp)" not in code
    loops = asm.hot_loops(code, "k", "vdpbf16ps")
    for loop in loops:
        assert [i for i in loop.instructions if i.startswith("vpunpck")] == [
            next(i for i in loop.instructions if i.startswith("vpunpcklwd\t%xmm"))
        ]


def test_bf16_gemm_on_avx2_converts_and_uses_fma() -> None:
    """Without bf16 dot products, bf16 operands are widened to f32 and multiplied with FMAs."""
    code = assembly(bf16_gemm(64, 64, 256), "avx2")
    assert "vdpbf16ps" not in code
    check_hot_loops(bf16_gemm(64, 64, 256), "avx2")


def widened_bf16_gemm(m: int, n: int, k: int) -> str:
    """A bf16 gemm whose literal alpha 1 and beta 1 keep no broadcasts live: the widest tiles."""
    return bf16_gemm(m, n, k)


@pytest.mark.parametrize("target", ["avx2", ZEN3], ids=["avx2", "zen3"])
def test_widened_bf16_broadcasts_are_a_word_broadcast_and_an_and(target: str | Target) -> None:
    """B's bf16 element into f32 lanes: vpbroadcastw from memory (a load), then an and with
    the mask of the lanes' high halves held in a register; no scalar load, shift and move
    into a vector register (movzwl, shll, vmovd, vpbroadcastd) as before."""
    loops = asm.hot_loops(assembly(widened_bf16_gemm(64, 64, 256), target), "k")
    assert loops
    for loop in loops:
        assert loop.stack_accesses() == []
        broadcasts = [i for i in loop.instructions if i.startswith("vpbroadcastw")]
        assert broadcasts and all("(" in i for i in broadcasts)
        assert len([i for i in loop.instructions if i.startswith("vpand")]) >= len(broadcasts)
        assert not [i for i in loop.instructions if i.split()[0] in ("movzwl", "vmovd")]


def f16_gemm(n: int | str) -> str:
    """C += A B, A 64 x 256 and B 256 x n in f16, C f32."""
    a, b, c = "memref<f16x64x256>", f"memref<f16x256x{n}>", f"memref<f32x64x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, {a}, {b}, f32, {c}
}}"""


@pytest.mark.parametrize("target", ["avx2", ZEN3], ids=["avx2", "zen3"])
def test_f16_broadcasts_convert_a_word_broadcast(target: str | Target) -> None:
    """B's f16 element into f32 lanes in a K loop (a B of run-time size, which is not
    widened into scratch first): vpbroadcastw from memory, then vcvtph2ps of the broadcast;
    no scalar insert (vpinsrw) and conversion before a broadcast. The direct path's K loops
    are those that convert f16 and multiply (the blocked path's read f32 packs)."""
    loops = [
        loop
        for loop in asm.hot_loops(assembly(f16_gemm("?"), target), "k")
        if {"vcvtph2ps", "vfmadd231ps"} <= {i.split()[0] for i in loop.instructions}
    ]
    assert loops
    for loop in loops:
        assert loop.stack_accesses() == []
        broadcasts = [i for i in loop.instructions if i.startswith("vpbroadcastw")]
        assert broadcasts and all("(" in i and "%xmm" in i for i in broadcasts)
        converted = [i for i in loop.instructions if i.startswith("vcvtph2ps\t%xmm")]
        assert len(converted) >= len(broadcasts)
        assert not [i for i in loop.instructions if i.startswith("vpinsrw")]


@pytest.mark.parametrize("target", ["avx2", ZEN3], ids=["avx2", "zen3"])
def test_a_widened_f16_b_is_broadcast_as_f32(target: str | Target) -> None:
    """A static f16 B copied into f32 first (`lowering.gemm.widens_b`): its broadcasts in
    the K loop are vbroadcastss from memory, and the only conversions are A's vectors."""
    loops = asm.hot_loops(assembly(f16_gemm(64), target), "k")
    assert loops
    for loop in loops:
        assert loop.stack_accesses() == []
        mnemonics = [i.split()[0] for i in loop.instructions]
        assert "vbroadcastss" in mnemonics and "vpbroadcastw" not in mnemonics
        conversions = [i for i in loop.instructions if i.startswith("vcvtph2ps")]
        assert conversions and all("(" in i for i in conversions)  # A's, from memory


@pytest.mark.parametrize("target", ["avx2", ZEN3], ids=["avx2", "zen3"])
@pytest.mark.parametrize(("k", "split"), [(256, True), (8, False)])
def test_split_pairs_widen_a_with_a_shift_and_an_and(k: int, split: bool,
                                                     target: str | Target) -> None:  # fmt: skip
    """A tile with a long K widens its 16 rows of A from one load per half: the even rows
    shifted (vpslld), the odd ones an and that reads memory itself; no zero-extending
    vpmovzxwd, which a short K's tiles (rows in order) keep."""
    for loop in asm.hot_loops(assembly(widened_bf16_gemm(64, 64, k), target), "k"):
        mnemonics = [i.split()[0] for i in loop.instructions]
        assert ("vpmovzxwd" not in mnemonics) is split
        memory_ands = [i for i in loop.instructions if i.startswith("vpand") and "(" in i]
        assert bool(memory_ands) is split
        assert ("vpslld" in mnemonics) is True


def test_one_vector_tiles_take_one_k_step_an_iteration() -> None:
    """Zen 3 unrolls static K loops by two, but not those of one-vector tiles, where LLVM
    would write each sum into its broadcast's register (vfmadd213ps) and spill."""
    for inputs in ("f32", "bf16"):
        text = group_members("f32", 56, 9, 9, inputs)
        reserved = 2 if inputs == "bf16" else 0
        key = f"direct {inputs},{inputs},f32 n.n 56x9x9 r{reserved}"
        options = CompileOptions.of({key: GemmChoice(tile=(1, 9))})
        compilation = nanotc.compile(text, target=ZEN3, options=options)
        assert "tile 8 x 9" in compilation.tiled() and "unroll 1" in compilation.nanokernels()
        loops = asm.hot_loops(compilation.assembly(), "k")
        assert loops and all(loop.stack_accesses() == [] for loop in loops)
        assert all(not i.startswith("vfmadd213") for loop in loops for i in loop.instructions)


def test_bf16_gemm_widens_to_fma_where_the_dot_product_is_slow() -> None:
    """The amx target's vdpbf16ps runs at half the FMA flop rate (bf16_dot_rate 0.5): a bf16
    gemm too small to pack and too tall for exact AMX tiles widens its operands to f32 and
    uses FMAs on zmm."""
    code = assembly(bf16_gemm(100, 40, 8), "amx")
    assert "vdpbf16ps" not in code and "tdpbf16ps" not in code
    loops = asm.hot_loops(code, "k", "vfmadd")
    assert loops and all(loop.stack_accesses() == [] for loop in loops)


@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_static_transposed_a_is_packed_not_gathered(ty: str) -> None:
    """A static A^T is transposed into a column-major scratch in registers (`tile.pack.t`), so
    the hot loops load A's columns as vectors: no gathers, nothing spilled."""
    mem = f"memref<{ty}x64x64>"
    text = f"""func @k(%A: {mem}, %B: {mem}, %C: {mem}) {{
  gemm.t.n 1.0, %A, %B, 1.0, %C : {ty}, {mem}, {mem}, {ty}, {mem}
}}"""
    compilation = nanotc.compile(text, target="avx512")
    tiled = compilation.tiled()
    assert "tile.pack.t %A" in tiled and "tile.gemm.n.n" in tiled
    loops = asm.hot_loops(compilation.assembly(), "k", "vfmadd")
    assert loops
    for loop in loops:
        assert not any("gather" in i for i in loop.instructions)
        assert loop.stack_accesses() == []


SHUFFLES = ("vpermt2", "vunpck", "vshuf", "vperm2", "vinsert")


@pytest.mark.parametrize("target", ["avx512", "avx2", ZEN4], ids=["avx512", "avx2", "zen4"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_transposed_a_pack_takes_its_groups_of_vector_rows_in_a_loop(ty: str,
                                                                    target: str | Target) -> None:  # fmt: skip
    """A^T's panels (rows of whole vectors) are transposed a group of `lanes` rows at a
    time in a loop: all the kernel's shuffles are in that one loop, which keeps its row
    pointers and vectors in registers. Unrolled over a 64-row f32 panel's four groups, the
    pack held every group's vectors at once and spilled 40 of them each K chunk. (B of
    run-time strides: no dot products for a C of few rows, whose lane sums shuffle too.)"""
    mem, strided = f"memref<{ty}x?x?>", f"memref<{ty}x?x?,strided<?,?>>"
    text = f"""func @k(%A: {mem}, %B: {strided}, %C: {mem}) {{
  gemm.t.n 1.0, %A, %B, 1.0, %C : {ty}, {mem}, {strided}, {ty}, {mem}
}}"""
    code = nanotc.compile(text, target=target).assembly()
    kernel = asm.function_lines(code, "k")
    shuffles = sum(1 for line in kernel if line.strip().startswith(SHUFFLES))
    (loop,) = asm.hot_loops(code, "k", "vunpck")
    assert shuffles and sum(loop.count(m) for m in SHUFFLES) == shuffles
    assert loop.stack_accesses() == []


@pytest.mark.parametrize(
    ("body", "op"),
    [
        ("sum.n 1.0, %x, 0.0, %s : f32, memref<f32x?>, f32, memref<f32>", "vaddps"),
        ("gemv.t 1.0, %M, %x, 0.0, %y : f32, memref<f32x?x?>, memref<f32x?>, f32, memref<f32x?>",
         "vfmadd"),
    ],
    ids=["sum", "gemv.t"],
)  # fmt: skip
def test_reductions_keep_independent_partial_sums(body: str, op: str) -> None:
    """The main loops of a reduction (plain, and for a sum also realigned:
    `test_realigned_sums_...`) add into CHAINS different registers, so the adds do not wait
    for each other; the gemv.t loop loads one vector of x per step for all its columns."""
    text = (
        "func @k(%x: memref<f32x?>, %y: memref<f32x?>, %s: memref<f32>, "
        f"%M: memref<f32x?x?>) {{\n  {body}\n}}"
    )
    loops = [
        lp for lp in asm.hot_loops(assembly(text, "avx512"), "k", op) if lp.count(op) >= CHAINS
    ]
    assert len(loops) == 2  # gemv.t: GEMV_COLUMNS, then single ones; sum: realigned, plain
    for loop in loops:
        adds = [i for i in loop.instructions if i.startswith(op)]
        assert len({i.split()[-1] for i in adds}) == CHAINS
        assert loop.stack_accesses() == []
    plain = max((lp for lp in loops if not lp.count("vperm")), key=lambda lp: lp.count(op))
    if op == "vfmadd":  # every FMA reads A from memory; x comes from one load per GEMV_COLUMNS
        adds = [i for i in plain.instructions if i.startswith(op)]
        assert all("(" in i for i in adds)
        loads = [i for i in plain.instructions if i.startswith("vmovups") and "(" in i]
        assert len(loads) * GEMV_COLUMNS == len(adds)


@pytest.mark.parametrize(
    "body",
    [
        "sum.n 1.0, %x, 0.0, %s : f64, memref<f64x?>, f64, memref<f64>",
        "sum.t 1.0, %M, 0.0, %y : f64, memref<f64x?x?>, f64, memref<f64x?>",
    ],
    ids=["sum", "column sums"],
)
def test_realigned_sums_load_whole_lines_and_permute(body: str) -> None:
    """The realigned main loop (one stream off a vector boundary) reads only aligned vectors
    and makes each vector of the stream with one two-source permute: per step one load and
    one permute per add, nothing on the stack."""
    text = (
        "func @k(%x: memref<f64x?>, %y: memref<f64x?>, %s: memref<f64>, "
        f"%M: memref<f64x?x?>) {{\n  {body}\n}}"
    )
    (loop,) = [
        lp for lp in asm.hot_loops(assembly(text, "avx512"), "k", "vpermt2") if lp.count("vaddpd")
    ]
    adds = [i for i in loop.instructions if i.startswith("vaddpd")]
    permutes = [i for i in loop.instructions if re.match(r"vperm[it]2pd", i)]
    loads = [i for i in loop.instructions if "(" in i and i.startswith("vmov")]
    assert loads and all(i.startswith("vmovapd") for i in loads)
    assert len(permutes) == len(loads) == len(adds) == CHAINS
    assert all("(" not in i for i in adds)  # the permuted vectors, not memory
    assert loop.stack_accesses() == []


@pytest.mark.parametrize(("target", "register"), [("avx512", "zmm"), ("avx2", "ymm")])
def test_beta_zero_outputs_have_a_loop_of_non_temporal_stores(target: str, register: str
                                                              ) -> None:  # fmt: skip
    """A copy (beta 0) has, beside its plain main loop, one whose full vectors go around the
    caches (vmovntps, for outputs past PAST_L3_SHARE of L3, decided at run time),
    followed by a store fence; an axpby that reads its output (beta 0.5) has none."""
    v = "memref<f32x?>"
    copy = f"func @k(%x: {v}, %y: {v}) {{\n  axpby.n 1.0, %x, 0.0, %y : f32, {v}, f32, {v}\n}}"
    code = assembly(copy, target)
    (loop,) = asm.hot_loops(code, "k", "vmovntps")
    stores = [i for i in loop.instructions if i.startswith("vmovntps")]
    assert all(i.split()[1].startswith(f"%{register}") for i in stores)
    assert loop.stack_accesses() == []
    assert "sfence" in code
    assert len(asm.hot_loops(code, "k", "vmovups")) >= 1  # the plain loop, for the rest
    update = copy.replace("0.0, %y", "0.5, %y")
    assert "vmovnt" not in assembly(update, target)


@pytest.mark.parametrize(
    ("body", "multiplies"),
    [
        ("hadamard 1.5, %x, %y, 1.0, %z : f32, {v}, {v}, f32, {v}", 1),
        ("axpby.n 1.5, %x, 1.0, %z : f32, {v}, f32, {v}", 0),
    ],
    ids=["hadamard", "axpby"],
)
def test_beta_one_updates_fuse_alpha_into_one_fma(body: str, multiplies: int) -> None:
    """out += alpha * x is one FMA per vector (fewer operations waiting on each line from
    memory: W5 hadamard 1.02-1.27x), with no separate add."""
    v = "memref<f32x?>"
    text = f"func @k(%x: {v}, %y: {v}, %z: {v}) {{\n  {body.format(v=v)}\n}}"
    loops = asm.hot_loops(assembly(text, "avx512"), "k", "vfmadd")
    assert loops
    for loop in loops:  # LLVM may version or unroll the loop: per vector, the same
        vectors = loop.count("vfmadd")
        assert loop.count("vmulps") == multiplies * vectors
        assert loop.count("vaddps") == 0


STREAMING_AVX512 = replace(get("avx512"), name="avx512-stream-256", stream_vector_bits=256)
FROM_MEMORY_FLOATS = int(FROM_MEMORY_L3_SHARE * STREAMING_AVX512.l3_bytes) // 4


@pytest.mark.parametrize(
    ("body", "mnemonic"),
    [
        ("hadamard 1.5, %x, %y, 1.0, %z : f32, {v}, {v}, f32, {v}", "vfmadd"),
        ("sum.n 1.0, %x, 0.0, %s : f32, {v}, f32, memref<f32>", "vaddps"),
    ],
    ids=["hadamard", "sum"],
)
def test_loops_from_memory_use_the_targets_streaming_vectors(body: str, mnemonic: str) -> None:
    """On an AVX-512 target that streams memory faster in 256-bit vectors (as Zen 4 does), a
    dynamic extent has main loops on ymm registers, for operands of FROM_MEMORY_L3_SHARE of
    L3 or more, beside the zmm ones; a static extent that large only the ymm ones. Nothing on
    the stack."""

    def register_classes(extent: str) -> set[str]:
        v = f"memref<f32x{extent}>"
        text = f"func @k(%x: {v}, %y: {v}, %z: {v}, %s: memref<f32>) {{\n  {body.format(v=v)}\n}}"
        loops = asm.hot_loops(assembly(text, STREAMING_AVX512), "k", mnemonic)
        assert all(loop.stack_accesses() == [] for loop in loops)
        ops = [i for loop in loops for i in loop.instructions if i.startswith(mnemonic)]
        return {re.findall(r"%([xyz]mm)", i)[-1] for i in ops}

    assert register_classes("?") == {"ymm", "zmm"}
    assert register_classes(str(FROM_MEMORY_FLOATS)) == {"ymm"}
    assert register_classes(str(FROM_MEMORY_FLOATS // 4)) == {"zmm"}


L2_FLOATS = get("avx512").l2_bytes // 4


@pytest.mark.parametrize(
    ("elements", "realigned"),
    [(2048, False), (4096, True), (L2_FLOATS, True), (L2_FLOATS + 16, False)],
    ids=["8 KiB", "16 KiB", "L2", "past L2"],
)
def test_sums_realign_only_long_streams_that_fit_l2(elements: int, realigned: bool) -> None:
    """realign.pays: a static sum permutes aligned vectors only from MIN_STREAM_BYTES up to
    the target's L2 bytes; shorter and longer streams read split loads, as gemv.t always
    does."""
    v, s = f"memref<f32x{elements}>", "memref<f32>"
    text = f"func @k(%x: {v}, %s: {s}) {{\n  sum.n 1.0, %x, 0.0, %s : f32, {v}, f32, {s}\n}}"
    code = assembly(text, "avx512")
    assert ("vpermt2ps" in code or "vpermi2ps" in code) is realigned
    gemv = (
        "func @k(%M: memref<f32x8192x8>, %x: memref<f32x8192>, %y: memref<f32x8>) {\n"
        "  gemv.t 1.0, %M, %x, 0.0, %y : f32, memref<f32x8192x8>, memref<f32x8192>, f32, "
        "memref<f32x8>\n}"
    )
    assert "vperm" not in assembly(gemv, "avx512")


@pytest.mark.parametrize("dt", ["f32", "f64", "bf16"])
def test_packs_are_closed_to_the_loop_vectorizer(dt: str) -> None:
    """The blocked path's packs write their own vectors; LLVM's loop vectorizer, left to
    their element copies (K tails, partial panels), added a fifth to the compile time of a
    dynamic gemm and nothing to its speed. A user's scalar loop is still vectorised."""
    c = "f32" if dt == "bf16" else dt
    a, cm = f"memref<{dt}x?x?>", f"memref<{c}x?x?>"
    gemm = f"""func @k(%A: {a}, %B: {a}, %C: {cm}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {c}, {a}, {a}, {c}, {cm}
}}"""
    compilation = nanotc.compile(gemm, target="avx512", cache=False)
    assert "tile.pack" in compilation.tiled()
    assert "llvm.loop.vectorize.enable" in compilation.llvm_ir
    assert "vector.body" not in compilation.optimized_ir()
    loop = SCALAR_LOOP.format(element=c)
    assert "vector.body" in nanotc.compile(loop, target="avx512", cache=False).optimized_ir()


# a user's loop of scalar code: LLVM's loop vectorizer's work
SCALAR_LOOP = """func @double(%X: memref<{element}x?>) {{
  %n = size %X[0] : memref<{element}x?>
  for %i = 0, %n {{
    %x = load %X[%i] : memref<{element}x?>
    %y = arith.add %x, %x : {element}
    store %y, %X[%i] : memref<{element}x?>
  }}
}}"""


@pytest.mark.parametrize(("dt", "op"), [("f32", "t.t"), ("f64", "t.n"), ("bf16", "n.t")])
def test_pack_element_loops_are_not_unrolled(dt: str, op: str) -> None:
    """The packs' element-by-element loops (K tails of transposed panels, rows past a partial
    panel) are off the hot path: LLVM's unroller, left to them, copied the inner loops into
    every unrolled column and cost a quarter of a dynamic gemm's code generation. (A user's
    scalar loop beside the gemm puts the module through O2, which unrolls.)"""
    c = "f32" if dt == "bf16" else dt
    a, cm = f"memref<{dt}x?x?>", f"memref<{c}x?x?>"
    gemm = f"""func @k(%A: {a}, %B: {a}, %C: {cm}) {{
  gemm.{op} 1.0, %A, %B, 0.0, %C : {c}, {a}, {a}, {c}, {cm}
}}
{SCALAR_LOOP.format(element=c)}"""
    compilation = nanotc.compile(gemm, target="avx512", cache=False)
    assert compilation.pipeline is jit.Pipeline.O2
    assert "column.header" in compilation.llvm_ir and "pad.header" in compilation.llvm_ir
    blocks = re.findall(r"^([\w.-]+):", compilation.optimized_ir(), re.MULTILINE)
    remainders = [block for block in blocks if re.search(r"(epil|prol)", block)]
    assert remainders  # the gathered rows' copies are still unrolled, with remainder loops
    assert [block for block in remainders if block.startswith(("column", "pad"))] == []


@pytest.mark.parametrize("target", ["avx2", "avx512"])
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_pack_column_copies_are_not_unrolled(target: str, dt: str) -> None:
    """The packs' copies of whole columns (a vector load and store per panel row) run at the
    speed of memory unrolled or not (W1 1024^3, W3 784x128x1152, 49x512x4608: 0.98-1.04x on
    Zen 3), while LLVM's unrolled copies and their remainder loops took about a tenth of a
    dynamic gemm's optimisation and code generation: no loop of a dynamic gemm that packs
    A by columns is unrolled."""
    m = f"memref<{dt}x?x?>"
    gemm = f"""func @k(%A: {m}, %B: {m}, %C: {m}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : {dt}, {m}, {m}, {dt}, {m}
}}"""
    compilation = nanotc.compile(gemm, target=target, cache=False)
    assert "tile.pack.n" in compilation.tiled()
    blocks = re.findall(r"^([\w.-]+):", compilation.optimized_ir(), re.MULTILINE)
    assert [block for block in blocks if re.search(r"(epil|prol|unr)", block)] == []


@pytest.mark.parametrize("shape", [(8, 8, 8), (16, 16, 16), (16, 9, 17)], ids=str)
def test_one_vector_bf16_tiles_shuffle_half_of_b_pairs(shape: tuple[int, int, int]) -> None:
    """A one-vector dot tile broadcasts B's pairs for its odd columns from memory and picks
    those of its even columns from a 128-bit load by in-lane shuffles: per step of four K
    pairs, four shuffles and four broadcast operands per pair of columns, nothing spilled."""
    m, n, k = shape
    loops = asm.hot_loops(
        assembly(group_members("f32", m, n, k, "bf16"), "avx512"), "k", "vdpbf16ps"
    )
    loop = max(loops, key=lambda lp: lp.count("vdpbf16ps"))
    shuffles = [i for i in loop.instructions if i.startswith(("vpshufd", "vshufps"))]
    broadcasts = [i for i in loop.instructions if i.startswith("vdpbf16ps") and "{1to" in i]
    assert loop.count("vdpbf16ps") == 4 * n
    assert (len(shuffles), len(broadcasts)) == (4 * ((n + 1) // 2), 4 * (n // 2))
    assert loop.stack_accesses() == []


@pytest.mark.parametrize("shape", [(56, 9, 9), (20, 9, 20), (12, 16, 16)], ids=str)
def test_in_order_interleave_reads_a_by_plain_loads(shape: tuple[int, int, int]) -> None:
    """A vector whose K pairs come from one vpermt2w reads its two columns of A by plain
    loads into the low halves of registers: no broadcast load (vbroadcasti64x4 and the
    like), which on Zen 5 takes a shuffle slot beside the dot products. (12 rows: a masked
    vector, whose columns are not adjacent.)"""
    m, n, k = shape
    loops = asm.hot_loops(
        assembly(group_members("f32", m, n, k, "bf16"), "avx512"), "k", "vdpbf16ps"
    )
    loop = max(loops, key=lambda lp: lp.count("vdpbf16ps"))
    permutes = loop.count("vpermt2w")
    column_loads = [
        i for i in loop.instructions if re.match(r"vmovdqu(64|16)?\s|vmovups\s", i) and "(" in i
    ]
    assert permutes > 0 and len(column_loads) >= 2 * permutes
    assert [i for i in loop.instructions if i.startswith("vbroadcasti64x4")] == []
    assert loop.stack_accesses() == []


@pytest.mark.parametrize(("shape", "register"), [((8, 8, 8), "ymm"), ((16, 16, 16), "zmm"),
                                               ((4, 16, 16), "xmm")], ids=str)  # fmt: skip
def test_adjacent_columns_of_a_interleave_from_one_load(
    shape: tuple[int, int, int], register: str
) -> None:
    """A one-vector dot tile whose A columns are as long as its vector reads each K pair's
    two columns by one load into a single-source shuffle (vpermw; within the one 128-bit
    lane of an xmm, vpshufb): no vpermt2w, nothing spilled."""
    m, n, k = shape
    loops = asm.hot_loops(
        assembly(looped_members("f32", m, n, k, inputs="bf16"), "avx512"), "k", "vdpbf16ps"
    )
    loop = max(loops, key=lambda lp: lp.count("vdpbf16ps"))
    permutes = [i for i in loop.instructions if i.startswith(("vpermw", "vpshufb"))]
    pairs = loop.count("vdpbf16ps") // n
    assert len(permutes) == pairs and all(f"%{register}" in i for i in permutes)
    assert loop.count("vpermt2w") == 0
    assert loop.stack_accesses() == []


def _aligned_labels(text: str) -> set[str]:
    """Labels that a `.p2align 6` (64 bytes) directly precedes."""
    lines = [line.strip() for line in text.splitlines()]
    return {
        line.rstrip(":")
        for before, line in itertools.pairwise(lines)
        if line.endswith(":") and before.startswith(".p2align\t6")
    }


@pytest.mark.parametrize(
    ("text", "target", "op"),
    [
        (DYNAMIC_ROWS["gemm"].format(t="f64"), "avx2", "vfmadd"),
        (group_members("f32", 32, 32, 32), "avx2", "vfmadd"),
        (group_members("f32", 64, 64, 256), "avx512", "vfmadd"),
        (
            """func @k(%A: memref<bf16x64x256>, %B: memref<bf16x256x64>, %C: memref<f32x64x64>) {
  gemm.n.n 1.0, %A, %B, 1.0, %C : f32, memref<bf16x64x256>, memref<bf16x256x64>, f32, memref<f32x64x64>
}""",
            "avx512",
            "vdpbf16ps",
        ),
    ],
    ids=["dynamic-f64-avx2", "f32-32^3-avx2", "f32-64x64x256-avx512", "bf16-dot-avx512"],
)
def test_nanokernel_k_loops_start_on_a_cache_line(text: str, target: str, op: str) -> None:
    """Each nanokernel K loop starts on a 64-byte line: where unrelated code before it
    placed it decided up to 1.2x of its speed on Zen 3 (`helpers.LOOP_ON_A_LINE`)."""
    code = assembly(text, target)
    loops = [loop for loop in asm.hot_loops(code, "k", op) if loop.count(op) >= 4]
    assert loops
    assert {loop.label for loop in loops} <= _aligned_labels(code)


@pytest.mark.parametrize("target", ["avx512", "avx2"])
@pytest.mark.parametrize("shape", [(3136, 64, 64), (784, 100, 64)], ids=str)
def test_tiles_lined_up_on_a_stay_spill_free(target: str, shape: tuple[int, int, int]) -> None:
    """The direct path's tiles lined up on A's cache lines (`gemm_tiles.lines_up_rows`): the
    whole tiles' K loops load A without masks, the edge vectors' with them, and neither
    spills."""
    m, n, k = shape
    a, b, c = f"memref<f32x{m}x{k}>", f"memref<f32x{k}x{n}>", f"memref<f32x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    assert "tile.line_lead %A" in nanotc.compile(text, target=target).tiled()
    loops = check_hot_loops(text, target)
    mask = "{%k" if target == "avx512" else "vmaskmov"
    masked = [any(mask in i for i in loop.instructions) for loop in loops]
    assert False in masked and True in masked
