"""bf16 gemm on AMX tiles: results against the reference evaluator on a host with AMX, and the
generated code of the `amx` target on any host (tdpbf16ps on tile registers, one tile
configuration, nothing spilled)."""

from __future__ import annotations

import itertools
import re

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets
from nanotc.codegen import asm
from tests.jit.helpers import check

AMX_HOST = targets.host().amx
# each shape with the instruction its gemm becomes: exact tiles (C up to 64 x 64, K up to 128,
# within the tile register budget), packed blocks, or vector nanokernels (too small to pack)
SHAPES = {
    (32, 32, 32): "tile.amx_small_gemm",
    (64, 64, 64): "tile.amx_small_gemm",
    (64, 64, 128): "tile.amx_small_gemm",  # four accumulators, four K chunks
    (16, 16, 16): "tile.amx_small_gemm",
    (8, 8, 8): "tile.amx_small_gemm",
    (1, 1, 1): "tile.amx_small_gemm",
    (35, 9, 35): "tile.amx_small_gemm",  # the last accumulator overlaps; odd K
    (56, 9, 9): "tile.amx_small_gemm",
    (20, 33, 20): "tile.amx_small_gemm",  # a 1-column N tail
    (17, 33, 70): "tile.amx_gemm",  # small, but its exact tiles would need 10 registers
    (100, 70, 1): "tile.gemm",  # too wide for exact tiles, too small to pack
    (17, 40, 600): "tile.amx_gemm",
    (300, 65, 513): "tile.amx_gemm",
    (40, 33, 1100): "tile.amx_gemm",  # two K blocks, the second partial
    (530, 70, 1030): "tile.amx_gemm",  # two row blocks and two K blocks, both partial
}


def gemm_text(m: int, n: int, k: int, ta: str, tb: str, out: str, dynamic: bool) -> str:
    a_shape, b_shape = ((k, m) if ta == "t" else (m, k)), ((n, k) if tb == "t" else (k, n))

    def ty(shape: tuple[int, int], element: str) -> str:
        return f"memref<{element}x{'?x?' if dynamic else 'x'.join(map(str, shape))}>"

    a, b, c = ty(a_shape, "bf16"), ty(b_shape, "bf16"), ty((m, n), out)
    return f"""func @k(%alpha: f32, %beta: f32, %A: {a}, %B: {b}, %C: {c}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


def uses(tiled: str, instruction: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(instruction)}[ .]", tiled) is not None


def arguments(m: int, n: int, k: int, ta: str, tb: str, out: str, beta: float, rng) -> list:
    a_shape, b_shape = ((k, m) if ta == "t" else (m, k)), ((n, k) if tb == "t" else (k, n))
    bf16 = ml_dtypes.bfloat16
    c = np.asfortranarray(rng.standard_normal((m, n))).astype(bf16 if out == "bf16" else np.float32)
    if beta == 0:
        c[...] = np.nan  # beta = 0 never reads C
    return [np.float32(0.5), np.float32(beta),
            np.asfortranarray(rng.standard_normal(a_shape)).astype(bf16),
            np.asfortranarray(rng.standard_normal(b_shape)).astype(bf16), c]  # fmt: skip


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(("ta", "tb"), list(itertools.product("nt", "nt")))
@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_amx_gemm_matches_reference(
    shape: tuple[int, int, int], ta: str, tb: str, out: str, rng
) -> None:
    text = gemm_text(*shape, ta, tb, out, dynamic=False)
    assert uses(nanotc.compile(text).tiled(), SHAPES[shape])  # a bf16 C: tiles into f32 scratch
    for beta in (0.0, 1.0, -2.0):
        check(text, arguments(*shape, ta, tb, out, beta, rng), depth=shape[2])


@pytest.mark.skipif(not AMX_HOST, reason="this host has no AMX")
@pytest.mark.parametrize(
    "shape",
    [(64, 64, 64), (300, 65, 513), (40, 33, 1100), (9, 7, 0)],
    ids=lambda s: "x".join(map(str, s)),
)
def test_amx_gemm_with_dynamic_sizes(shape: tuple[int, int, int], rng) -> None:
    """Beta 0 with K unknown until the launch: the first K block overwrites C, and a K of 0
    still zeroes it (C starts as NaNs)."""
    text = gemm_text(*shape, "n", "n", "f32", dynamic=True)
    assert uses(nanotc.compile(text).tiled(), "tile.amx_gemm")
    for beta in (0.0, 1.0, -2.0):
        check(text, arguments(*shape, "n", "n", "f32", beta, rng), depth=max(shape[2], 1))


@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("shape", [(2, 1, 5), (37, 20, 50), (300, 65, 513)], ids=str)
def test_c_with_a_row_stride_takes_no_amx_tiles(shape: tuple[int, int, int], out: str,
                                                rng) -> None:  # fmt: skip
    """A C whose rows lie apart (every other row of a larger matrix) cannot be a tile's
    rows: the vector paths compute it, and the rows between stay as they were. On the AMX
    host its tiles once stored C as if its columns were contiguous."""
    m, n, k = shape
    strided = f"memref<{out}x?x?,strided<?,?>>"
    text = f"""func @k(%A: memref<bf16x?x?>, %B: memref<bf16x?x?>, %C: {strided}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f32, memref<bf16x?x?>, memref<bf16x?x?>, f32, {strided}
}}"""
    tiled = nanotc.compile(text, target="amx").tiled()
    assert not uses(tiled, "tile.amx_gemm") and not uses(tiled, "tile.amx_small_gemm")
    bf16 = ml_dtypes.bfloat16
    a, b = (np.asfortranarray(rng.integers(-3, 4, s)).astype(bf16) for s in ((m, k), (k, n)))
    big = np.full((2 * m, n), -7.0, dtype=bf16 if out == "bf16" else np.float32, order="F")
    nanotc.compile(text)["k"](a, b, big[::2], group_size=1)
    want = a.astype(np.float64) @ b.astype(np.float64)  # small integers: exact in bf16 sums
    np.testing.assert_allclose(big[::2].astype(np.float64), want, rtol=1e-2 if out == "bf16" else 0)
    assert np.all(big[1::2] == -7.0)


Shape = tuple[int, int, int]


def two_gemms(first: Shape, second: Shape, outs: tuple[str, str]) -> str:
    """A kernel with two bf16 gemms of the given shapes and C types."""
    params, gemms = [], []
    for index, ((m, n, k), out) in enumerate(zip((first, second), outs)):
        a, b, c = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<{out}x{m}x{n}>"
        params += [f"%A{index}: {a}", f"%B{index}: {b}", f"%C{index}: {c}"]
        gemms.append(
            f"  gemm.n.n 1.0, %A{index}, %B{index}, 1.0, %C{index} : f32, {a}, {b}, f32, {c}"
        )
    return f"func @k({', '.join(params)}) {{\n" + "\n".join(gemms) + "\n}"


@pytest.mark.parametrize(
    ("first", "second", "out", "expected"),
    [
        # one shape family: both fit in the eight tile registers
        ((32, 32, 32), (64, 64, 64), "f32", ("tile.amx_small_gemm", "tile.amx_small_gemm")),
        # 35 x 9 x 35 takes seven registers of other shapes: 56 x 9 x 9 no longer fits, and
        # packed blocks would need all eight
        ((35, 9, 35), (56, 9, 9), "f32", ("tile.amx_small_gemm", "tile.gemm")),
        # the packed path takes all eight registers in the full shape; 32^3 uses only that one
        ((300, 65, 513), (32, 32, 32), "f32", ("tile.amx_gemm", "tile.amx_small_gemm")),
        # 20 x 9 x 20 does not fit beside it: vectors beat packing it, but they write no bf16
        ((300, 65, 513), (20, 9, 20), "f32", ("tile.amx_gemm", "tile.gemm")),
        ((300, 65, 513), (20, 9, 20), "bf16", ("tile.amx_gemm", "tile.amx_gemm")),
    ],
    ids=str,
)
def test_amx_gemms_of_a_function_share_the_tile_registers(
    first: Shape, second: Shape, out: str, expected: tuple[str, str], rng
) -> None:
    """LLVM configures the tile shapes once per function: a small gemm whose exact tiles would
    not fit beside the function's other AMX tiles takes packed blocks where those are all full
    tiles, else vector nanokernels; everything compiles and computes correctly."""
    text = two_gemms(first, second, ("f32", out))
    kinds = ("tile.amx_small_gemm", "tile.amx_gemm", "tile.gemm")
    tiled = nanotc.compile(text, target="amx").tiled().splitlines()
    lines = [line for line in tiled if any(uses(line, kind) for kind in kinds)]
    assert uses(lines[0], expected[0]) and uses(lines[-1], expected[1])
    if AMX_HOST:
        bf16 = ml_dtypes.bfloat16
        args = []
        for (m, n, k), c_type in zip(
            (first, second), (np.float32, bf16 if out == "bf16" else np.float32)
        ):
            args += [np.asfortranarray(rng.standard_normal(shape)).astype(dtype)
                     for shape, dtype in (((m, k), bf16), ((k, n), bf16), ((m, n), c_type))]  # fmt: skip
        check(text, args, depth=max(first[2], second[2]))


def test_small_amx_gemm_assembly() -> None:
    """The exact-tile path in a batch loop: tdpbf16ps, the tile configuration loaded once at
    function entry (never in the loop, so no call there either), no tile spilled."""
    text = """func @k(%A: memref<bf16x20x20x?>, %B: memref<bf16x20x9x?>, %C: memref<f32x20x9x?>) {
  %n = size %C[2] : memref<f32x20x9x?>
  for %i = 0, %n {
    %a = subview %A[:, :, %i] : memref<bf16x20x20x?>
    %b = subview %B[:, :, %i] : memref<bf16x20x9x?>
    %c = subview %C[:, :, %i] : memref<f32x20x9x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<bf16x20x20>, memref<bf16x20x9>, f32, memref<f32x20x9>
  }
}"""
    code = nanotc.compile(text, target="amx").assembly()
    assert code.count("ldtilecfg") == 1
    loops = asm.hot_loops(code, "k", "tdpbf16ps")
    assert loops
    for loop in loops:
        # two overlapping accumulators down M = 20, per member (LLVM may unroll the batch loop)
        assert loop.count("tdpbf16ps") in (2, 4)
        assert loop.count("ldtilecfg") == 0 and not any("call" in i for i in loop.instructions)
        assert [s for s in loop.stack_accesses() if "tmm" in s] == []


@pytest.mark.parametrize(("m", "k", "shuffles"), [(35, 35, 3), (20, 20, 2), (64, 16, 4)])
def test_exact_packs_interleave_one_k_pair_per_loop_step(m: int, k: int, shuffles: int) -> None:
    """A static A of an exact-tile gemm is packed in a loop over its K pairs: each step
    interleaves one pair of columns (a shuffle per group of 32 or 16 rows) and stores it,
    no vector goes through the stack. Unrolled, LLVM loaded every column first and spilled
    them, and the batch loop took twice as long to compile."""
    text = f"""func @k(%A: memref<bf16x{m}x{k}x?>, %B: memref<bf16x{k}x9x?>, %C: memref<f32x{m}x9x?>) {{
  %n = size %C[2] : memref<f32x{m}x9x?>
  for %i = 0, %n {{
    %a = subview %A[:, :, %i] : memref<bf16x{m}x{k}x?>
    %b = subview %B[:, :, %i] : memref<bf16x{k}x9x?>
    %c = subview %C[:, :, %i] : memref<f32x{m}x9x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<bf16x{m}x{k}>, memref<bf16x{k}x9>, f32, memref<f32x{m}x9>
  }}
}}"""
    code = nanotc.compile(text, target="amx").assembly()
    pair_loops = [lp for lp in asm.hot_loops(code, "k", "vpermt2w") if not lp.count("tdpbf16ps")]
    assert pair_loops
    for loop in pair_loops:
        assert loop.count("vpermt2w") == shuffles
        reloads = [
            i for i in loop.instructions if i.startswith("vmov") and "%rsp" in i.split(",")[0]
        ]
        assert reloads == []  # (the pack buffer itself may be on the stack: stores go there)


def test_amx_assembly_keeps_accumulators_in_tiles() -> None:
    code = nanotc.compile(gemm_text(256, 256, 512, "n", "n", "f32", False), target="amx").assembly()
    loops = asm.hot_loops(code, "k", "tdpbf16ps")
    assert loops
    for loop in loops:
        assert loop.count("tdpbf16ps") == 4 and loop.count("tileloadd") == 4
        assert loop.count("ldtilecfg") == 0  # configured once, outside the K loop
        assert not any(i.startswith("tilestored") for i in loop.instructions)
        # no tile or vector register goes through the stack (a general-purpose register
        # reload, when LLVM runs short of them, is one L1 load per 64+ cycles of tile work)
        assert [s for s in loop.stack_accesses() if "mm" in s] == []
    # each accumulator starts from its own tilezero: a copy of one zero tile to the others
    # would go through the stack
    assert not re.search(r"tileloadd\s+-?\d*\(%rsp", code)


def test_packed_blocks_stay_within_l2() -> None:
    """The MLP layer's loop nest: op(A)'s VNNI block is packed once per K block and row block,
    outside the loop over column blocks that packs op(B), and both packed blocks together
    take at most 1.25 MiB (L2 holds them while C streams)."""
    tiled = nanotc.compile(gemm_text(512, 1024, 1024, "n", "n", "f32", True), target="amx").tiled()
    packs = re.findall(r"alloca -> memref<bf16x(\d+)>", tiled)
    assert len(packs) == 2 and 2 * sum(map(int, packs)) <= 1.25 * 2**20

    def depth(instruction: str) -> int:
        (line,) = [line for line in tiled.splitlines() if instruction in line]
        return len(line) - len(line.lstrip())

    assert depth("tile.pack_amx.n.pairs") < depth("tile.pack_amx.t") < depth("tile.amx_gemm")


def test_packs_walk_their_source_along_its_contiguous_direction() -> None:
    """Column-major op(A) is packed chunk by chunk, the panels inner (down its columns); op(B)'s
    row panels take its K-contiguous columns panel by panel, the chunks inner."""
    mlp = gemm_text(512, 1024, 1024, "n", "n", "f32", True)
    llvm_ir = nanotc.compile(mlp, target="amx").llvm_ir
    loops = re.findall(r"^(chunk|panel)\.header[.\d]*:", llvm_ir, re.M)
    assert loops[:4] == ["chunk", "panel", "panel", "chunk"]  # A's pack, then B's


def test_beta_zero_overwrites_c_in_the_first_k_block() -> None:
    """No pass zeroes C before the K blocks when K is static: the first block's accumulate
    operand is 0 (min(pc, 1))."""
    text = gemm_text(300, 65, 2100, "n", "n", "f32", False).replace("%beta,", "0.0,")
    tiled = nanotc.compile(text, target="amx").tiled()
    assert "tile.scale" not in tiled
    assert re.search(r"accumulate %\d+", tiled) and re.search(r"tile\.min %\d+, 1\b", tiled)


def test_amx_code_refuses_to_run_without_amx(monkeypatch) -> None:
    """On a host without AMX, code for the amx target compiles (assembly, objects) but
    nanotc will not load it for running."""
    monkeypatch.setattr(nanotc.api, "runs_on_host", lambda target: False)
    compilation = nanotc.compile(gemm_text(64, 64, 64, "n", "n", "f32", False), target="amx")
    assert "tdpbf16ps" in compilation.assembly()
    with pytest.raises(RuntimeError, match="cannot run on this machine"):
        compilation["k"]


@pytest.mark.parametrize("shape", [(16, 16, 16), (35, 9, 35), (300, 65, 513)], ids=str)
@pytest.mark.parametrize(("ta", "tb"), [("t", "n"), ("n", "t"), ("t", "t")])
def test_transposed_operands_are_packed_with_whole_vector_shuffles(
    shape: tuple[int, int, int], ta: str, tb: str
) -> None:
    """A transposed A has its K values contiguous along rows, a transposed B its N values
    down columns: the AMX packs transpose 16 x 16 words of K pairs in registers instead of
    inserting bf16 values one by one."""
    code = nanotc.compile(gemm_text(*shape, ta, tb, "f32", False), target="amx").assembly()
    assert "vpinsrw" not in code and "vpextr" not in code
    assert code.count("vpermt2") + code.count("vunpck") + code.count("vshuf") >= 16
