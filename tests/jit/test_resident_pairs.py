"""bf16 dot tiles that hold A's K pairs in registers (`tile.gemm.resident`): which static
gemms take one such tile over all of C, what it runs (A interleaved once, C a group of
columns at a time), and its results against float64 products of the same bf16 inputs, with
odd K, masked and narrowed last rows, a transposed B, alpha and beta."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc import targets
from nanotc.codegen import asm
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions, GemmChoice
from nanotc.tuning.tuner import gemm_sites, tile_candidates

from .helpers import group_members, looped_bf16_members

BF16 = ml_dtypes.bfloat16
AVX512 = "avx512"  # vdpbf16ps nanokernels: the code of the Zen 4 host, compiled anywhere
runs_bf16_dot = pytest.mark.skipif(
    not targets.runs_on_host(targets.get(AVX512)), reason="host lacks AVX512-BF16"
)


def gemm(m: int, n: int, k: int, trans_b: str = "n", alpha: float = 1.0,
         beta: float = 1.0) -> str:  # fmt: skip
    b_shape = f"{n}x{k}" if trans_b == "t" else f"{k}x{n}"
    a, b, c = f"memref<bf16x{m}x{k}>", f"memref<bf16x{b_shape}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.{trans_b} {alpha}, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}"""


def member(m: int, n: int, k: int) -> str:
    """The same gemm on a batch member picked by the group id."""
    return group_members("f32", m, n, k, inputs="bf16")


def tiles(text: str, target: str = AVX512, options: CompileOptions = DEFAULT_OPTIONS
          ) -> list[str]:  # fmt: skip
    """Each `tile.gemm` as its name and shape, e.g. `tile.gemm.n.n.resident 64 x 9` (not
    the next batch member's views it streams)."""
    tiled = nanotc.compile(text, target=target, options=options, cache=False).tiled()
    return [line.split()[0] + " " + line.split(" tile ")[1].split(" :")[0].split(" next ")[0]
            for line in tiled.splitlines() if "tile.gemm" in line]  # fmt: skip


@pytest.mark.parametrize(
    ("shape", "tile"),
    [((56, 9, 9), "64 x 9"), ((48, 12, 8), "48 x 12"), ((16, 32, 4), "16 x 32"),
     ((35, 9, 9), "48 x 9")],
    ids=str,
)  # fmt: skip
def test_a_gemm_wider_than_its_tile_takes_one_resident_tile(
    shape: tuple[int, int, int], tile: str
) -> None:
    """Where C would take several column tiles (each interleaving all of A again) and A's
    pairs, a group's accumulators and B's pair fit the registers, one tile covers C."""
    assert tiles(gemm(*shape)) == [f"tile.gemm.n.n.resident {tile}"]


@pytest.mark.parametrize(
    "text",
    [gemm(16, 16, 16), gemm(20, 9, 20), gemm(35, 9, 35), gemm(32, 32, 32), member(56, 9, 9),
     gemm(56, 9, 9).replace("bf16", "f32")],
    ids=["one-tile-16^3", "one-tile-20x9x20", "pairs-do-not-fit", "32^3-does-not-fit",
         "group-member", "f32"],
)  # fmt: skip
def test_other_gemms_keep_their_tiles(text: str) -> None:
    """Not where one tile covers C already (grouping its columns gained nothing), where A's
    pairs do not fit beside a group's accumulators, for a batch member picked by the group
    id (taken to come from memory, where the tiles ran 0.82-1.47x), nor without bf16."""
    assert not any(".resident" in t for t in tiles(text))


def test_no_resident_tile_without_bf16_dot_products() -> None:
    """AVX2 widens bf16 to f32 FMAs: its tiles hold no pairs."""
    assert not any(".resident" in t for t in tiles(gemm(56, 9, 9), "avx2"))


def test_the_tuner_starts_from_the_resident_tile_and_may_replace_it() -> None:
    """`nanotc tune` times the resident tile as the analytical choice; a tuned tile of the
    same shape keeps it resident, any other replaces it."""
    text = gemm(56, 9, 9)
    (site,) = gemm_sites(nanotc.load(text).function("k"), targets.get(AVX512))
    assert site.analytical.tile == (4, 9)

    def tuned(tile: tuple[int, int]) -> list[str]:
        return tiles(text, options=CompileOptions.of({site.key: GemmChoice(tile)}))

    assert tuned((4, 9)) == ["tile.gemm.n.n.resident 64 x 9"]
    assert tuned((4, 6)) == ["tile.gemm.n.n 64 x 6", "tile.gemm.n.n.fetched 64 x 3"]


def test_the_tuner_offers_the_resident_tile_to_members_of_the_group_id() -> None:
    """For a batch member picked by the group id the analytical choice keeps its tiles,
    and the resident tile is the tuner's first candidate: a tuned choice of it takes it."""
    text = member(48, 12, 8)
    (site,) = gemm_sites(nanotc.load(text).function("k"), targets.get(AVX512))
    assert site.analytical.tile == (3, 6) and site.resident == (3, 12)
    assert tile_candidates(site, targets.get(AVX512), 1) == [(3, 12)]
    options = CompileOptions.of({site.key: GemmChoice((3, 12))})
    assert tiles(text, options=options) == ["tile.gemm.n.n.resident 48 x 12"]
    assert tiles(text) == ["tile.gemm.n.n 48 x 6"]


def test_a_resident_tile_interleaves_a_once() -> None:
    """56x9x9: A's four vectors of each of five K pairs interleaved once before the loop
    over the groups of two columns (four pairs by vpermt2w, the odd last k zero-extended);
    the loop holds the group's 2 x 5 x 4 vdpbf16ps, no shuffle and no stack access, and the
    ninth column follows it. The listing shows the groups."""
    compilation = nanotc.compile(gemm(56, 9, 9), target=AVX512)
    code = compilation.assembly()
    (loop,) = asm.hot_loops(code, "k", "vdpbf16ps")
    assert loop.count("vdpbf16ps") == 2 * 5 * 4
    assert loop.count("vpermt2w") == 0 and loop.stack_accesses() == []
    lines = asm.function_lines(code, "k")
    assert sum(line.strip().startswith("vdpbf16ps") for line in lines) == 3 * 5 * 4
    assert sum(line.strip().startswith("vpermt2w") for line in lines) == 4 * 4
    assert not any("(%rsp)" in line and "mm" in line for line in lines)
    listing = compilation.nanokernels()
    assert "a0..a3[k] = vinterleave16 A[rows, k], A[rows, k+1] for every K pair" in listing
    assert "for each group of 2 columns" in listing
    assert "acc0_1 = vdpbf16ps acc0_1, a0[k], b" in listing


def test_wide_resident_tiles_compile_one_group() -> None:
    """The groups run in a loop, and a C wider than a tile can name (64 columns) takes a
    loop of such tiles: a 16 x 1024 C compiles to one group's code, 8 x 2 vdpbf16ps
    (unrolled, it took 3.7 s to compile), and the tuner starts from that tile."""
    text = gemm(16, 1024, 4)
    assert tiles(text) == ["tile.gemm.n.n.resident 16 x 64"]
    code = asm.function_lines(nanotc.compile(text, target=AVX512).assembly(), "k")
    assert sum(line.strip().startswith("vdpbf16ps") for line in code) == 8 * 2
    (site,) = gemm_sites(nanotc.load(text).function("k"), targets.get(AVX512))
    assert site.analytical.tile == (1, 64)


CASES = [
    ((56, 9, 9), "n", 1.0, 1.0),
    ((35, 9, 9), "n", 0.5, 0.0),  # masked last rows, C never read
    ((48, 12, 8), "t", 1.0, -2.0),  # B transposed: its pairs from two columns
    ((16, 32, 4), "n", 2.0, 1.0),
    ((33, 10, 7), "n", 1.0, 1.0),  # odd K, one row past two vectors
    ((40, 16, 6), "t", 1.0, 0.5),
    ((70, 40, 2), "n", 1.0, 1.0),  # masked last rows: every other group, then the others
    ((16, 100, 3), "n", 1.0, 1.0),  # tiles of 64 and 36 columns: groups of 8, then 4
]


@runs_bf16_dot
@pytest.mark.parametrize(("shape", "trans_b", "alpha", "beta"), CASES, ids=str)
def test_resident_tiles_compute_the_product(
    shape: tuple[int, int, int], trans_b: str, alpha: float, beta: float
) -> None:
    m, n, k = shape
    text = gemm(m, n, k, trans_b, alpha, beta)
    assert tiles(text)[0].startswith(f"tile.gemm.n.{trans_b}.resident ")
    rng = np.random.default_rng(m * n * k)
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(BF16))
    b_shape = (n, k) if trans_b == "t" else (k, n)
    b = np.asfortranarray(rng.uniform(-1, 1, b_shape).astype(BF16))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n)).astype(np.float32))
    op_b = b.astype(np.float64).T if trans_b == "t" else b.astype(np.float64)
    expected = alpha * a.astype(np.float64) @ op_b + beta * c.astype(np.float64)
    nanotc.compile(text, target=AVX512)["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * k)


@runs_bf16_dot
def test_batch_members_of_a_loop_hold_their_pairs() -> None:
    """Members picked by a loop (taken to be in cache) take the resident tile, each its own
    A's pairs."""
    m, n, k, count = 35, 9, 9, 6
    text = looped_bf16_members(m, n, k)
    assert tiles(text) == ["tile.gemm.n.n.resident 48 x 9"]
    rng = np.random.default_rng(1)
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, count)).astype(BF16))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, count)).astype(BF16))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, count)).astype(np.float32))
    expected = c + np.einsum("mki,kni->mni", a.astype(np.float64), b.astype(np.float64))
    nanotc.compile(text, target=AVX512)["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5 * k)


@runs_bf16_dot
def test_resident_tiles_on_views_of_larger_arrays() -> None:
    """A and C as views whose columns lie a larger stride apart than their rows: the pairs
    and C's groups address them by their strides, and nothing outside the views changes."""
    text = """func @k(%X: memref<bf16x40x12>, %B: memref<bf16x9x9>, %Y: memref<f32x48x12>) {
  %a = subview %X[2:35, 1:9] : memref<bf16x40x12>
  %c = subview %Y[5:35, 2:9] : memref<f32x48x12>
  gemm.n.n 1.0, %a, %B, 1.0, %c : f32, memref<bf16x35x9,strided<1,40>>, memref<bf16x9x9>, f32, memref<f32x35x9,strided<1,48>>
}"""
    assert tiles(text) == ["tile.gemm.n.n.resident 48 x 9"]
    rng = np.random.default_rng(3)
    x = np.asfortranarray(rng.uniform(-1, 1, (40, 12)).astype(BF16))
    b = np.asfortranarray(rng.uniform(-1, 1, (9, 9)).astype(BF16))
    y = np.asfortranarray(rng.uniform(-1, 1, (48, 12)).astype(np.float32))
    expected = y.astype(np.float64)
    expected[5:40, 2:11] += x[2:37, 1:10].astype(np.float64) @ b.astype(np.float64)
    nanotc.compile(text, target=AVX512)["k"](x, b, y, group_size=1)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-4)
