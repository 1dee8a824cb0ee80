"""Prefetching the next work-group's operands of batched gemms: which gemms get it, streamed
by their tiles' K loops (f32/f64) or up front (`tile.prefetch`: the others, small ones), the
instructions it leaves, the tiles' shares covering every line, and results unchanged (the
last group prefetches itself).

What the compiler emits is checked on every host (compiling for AVX-512 needs no AVX-512);
results where the host runs the code (`runnable`, `needs_host`): avx512's and the Zen 4
host's on AVX-512 hosts, avx2's, which prefetches the same way, on every host."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import nanotc
from nanotc.codegen.asm import hot_loops
from nanotc.lowering.choices import CompileOptions, GemmChoice
from nanotc.lowering.prefetch import first_line, lines_asked, lines_per_step
from nanotc.targets import MEASURED_RATES, get, host
from nanotc.tuning.tuner import gemm_sites

from .helpers import ZEN3, ZEN4, compiled, looped_members, needs_host, runnable, runs_here

PREFETCHING = ("avx512", "avx2")
"""Targets whose batched gemms prefetch the next group: avx512, whose caches the rules were
written for, and avx2, whose code also runs on hosts without AVX-512."""


def batched(
    ty: str, m: int, n: int, k: int, index: str = "%g", ld: int | None = None, inputs: str = ""
) -> str:
    """C_g += A_g B_g; with `ld`, A and C are the first m rows of ld-row arrays; A and B of
    type `inputs` (default: C's)."""
    lda, ab = ld or m, inputs or ty
    a, b, c = f"memref<{ab}x{lda}x{k}x?>", f"memref<{ab}x{k}x{n}x?>", f"memref<{ty}x{lda}x{n}x?>"
    layout = f",strided<1,{lda}>" if ld else ""
    am, bm, cm = (
        f"memref<{ab}x{m}x{k}{layout}>",
        f"memref<{ab}x{k}x{n}>",
        f"memref<{ty}x{m}x{n}{layout}>",
    )
    rows = f"0:{m}" if ld else ":"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  %g = group_id
  %i = arith.rem %g, 2 : index
  %a = subview %A[{rows},:,{index}] : {a}
  %b = subview %B[:,:,{index}] : {b}
  %c = subview %C[{rows},:,{index}] : {c}
  gemm.n.n 1.0, %a, %b, 1.0, %c : {ty}, {am}, {bm}, {ty}, {cm}
}}"""


def tile_gemms(tiled: str) -> list[str]:
    return [line for line in tiled.splitlines() if "tile.gemm" in line]


def test_batched_tiles_stream_the_next_groups_operands() -> None:
    """Every tile names the next member's A, B and C; no prefetch before the gemm; the fully
    unrolled K steps of the one 16 x 16 tile prefetch all 16 lines of each view."""
    compilation = compiled(batched("f32", 16, 16, 16), "avx512")
    tiled = compilation.tiled()
    tiles = tile_gemms(tiled)
    assert tiles and all("next a %" in t and "next b %" in t and "next c %" in t for t in tiles)
    assert "tile.prefetch" not in tiled
    assert tiled.count("tile.min") == 1  # the next group, at most the last: once for all views
    code = compilation.assembly()
    assert code.count("prefetcht0") >= 2 * 16 and code.count("prefetchw") >= 16  # 1 KiB each


@pytest.mark.parametrize(("ty", "m"), [("f32", 64), ("f64", 64), ("f64", 128)])
def test_k_loops_prefetch_a_share_of_the_next_members_lines(ty: str, m: int) -> None:
    """Operands from a quarter of L1 to a quarter of L2 (f32 64^3: 48 KiB, which up front
    would evict the current member's lines; f64 128^3: 384 KiB): each K loop step asks for
    a line of the next A and B (prefetcht0) and C (prefetchw), not a burst before the gemm,
    until the tile has asked for its share, and the same lines of the later member into L2
    (prefetcht1). The QUIET_LOOP_STEPS or more steps after that run as a loop of their own
    that asks for none of the next member's lines."""
    compilation = compiled(batched(ty, m, m, m), "avx512")
    assert "next c %" in compilation.tiled()
    k_loops = hot_loops(compilation.assembly(), "k")
    asking = [loop for loop in k_loops if loop.count("prefetchw")]
    assert asking and len(asking) < len(k_loops)
    assert all(loop.count("prefetcht0") >= 2 for loop in asking)
    assert all(loop.count("prefetcht1") >= 3 for loop in asking)  # the later A, B and C
    assert not any(loop.stack_accesses() for loop in k_loops)


def test_k_loops_with_few_steps_after_the_share_keep_one_loop() -> None:
    """f32 32^3 (avx512's 32 x 8 tiles, a share of 16 lines of each view): 16 steps after
    the share, fewer than QUIET_LOOP_STEPS, so the K loop stays one loop, asking for the
    share's last line again."""
    k_loops = hot_loops(compiled(batched("f32", 32, 32, 32), "avx512").assembly(), "k")
    assert k_loops and all(loop.count("prefetchw") for loop in k_loops)


@pytest.mark.parametrize(
    ("m", "n", "k", "mr", "nr", "lines"),
    [(64, 64, 64, 64, 6, 256), (16, 16, 16, 16, 16, 16), (56, 9, 9, 64, 9, 32),
     (35, 9, 35, 48, 9, 78), (64, 64, 64, 16, 14, 512), (20, 9, 20, 32, 9, 2),
     (64, 64, 8, 16, 8, 600)],
)  # fmt: skip
def test_the_tiles_shares_cover_every_line(
    m: int, n: int, k: int, mr: int, nr: int, lines: int
) -> None:
    """C's tiles as gemm tiling makes them (column blocks of nr, the last one narrower; row
    tiles of mr, the last one masked): every line of a view in some tile's share, and no
    tile asking for more than its share rounded up to whole K steps, nor for lines of the
    tiles after it beyond that."""
    covered: set[int] = set()
    for col in range(0, n, nr):
        width = min(nr, n - col)
        for row in range(0, m, mr):
            first = first_line(col * m + row * width, lines, m * n)
            per_step = lines_per_step(lines, mr * width, m * n, k)
            asked = lines_asked(lines, mr * width, m * n, k)
            share = -(-mr * width * lines // (m * n))
            assert asked <= min(share + per_step - 1, k * per_step)
            covered.update(range(first, min(first + asked, lines)))
    assert covered == set(range(lines))


def test_a_tile_asks_for_no_lines_past_its_share() -> None:
    """The one 16 x 24 tile of f32 16x24x16 (avx512) runs as three groups of 8 columns, whose
    fully unrolled K steps each ask for their share of each next-member view and then for
    the share's last line again, not on into the next group's lines: in program order every
    view's lines are asked for once through, in order."""
    asked = _asked_lines(compiled(batched("f32", 16, 24, 16), "avx512").assembly())
    into_l1 = {key: lines for key, lines in asked.items() if key[0] != "prefetcht1"}
    assert len(into_l1) == 3  # next A, B (prefetcht0) and C (prefetchw)
    for lines in into_l1.values():
        assert lines == sorted(lines)
        assert set(lines) == set(range(max(lines) + 1))


def test_the_later_members_same_lines_go_to_l2() -> None:
    """`later 1` (the member after the next, one member on): after each line asked for
    into L1, the K step asks for the same line of the later member into L2 (prefetcht1, to
    be read even for C: x86 has no prefetchw into L2), one batch stride on from it (the
    stride as a constant displacement, no register of its own)."""
    compilation = compiled(batched("f32", 16, 24, 16), "avx512")
    assert all(" later 1 :" in t for t in tile_gemms(compilation.tiled()))
    asked = _asked_lines(compilation.assembly())
    strides = {"prefetcht0": [16 * 16 * 4, 16 * 24 * 4], "prefetchw": [16 * 24 * 4]}
    into_l1 = [(key, lines) for key, lines in asked.items() if key[0] != "prefetcht1"]
    for (kind, address), lines in into_l1:
        stride = asked[("prefetcht1", address)][0] * 64 - lines[0] * 64
        assert stride in strides[kind]
        assert asked[("prefetcht1", address)] == [line + stride // 64 for line in lines]
    assert len(asked) == 2 * len(into_l1) == 6


def _asked_lines(code: str) -> dict[tuple[str, str], list[int]]:
    """The lines each prefetch of the listing asks for, in program order, by its kind and
    address registers."""
    asked: dict[tuple[str, str], list[int]] = {}
    for kind, offset, address in re.findall(r"(prefetch\w+)\s+(-?\d*)\(([^)]*)\)", code):
        asked.setdefault((kind, address), []).append(int(offset or 0) // 64)
    return asked


DIAGONAL_C = """func @k(%A: memref<f32x16x16x?>, %B: memref<f32x16x16x?>,
        %C: memref<f32x16x16x4x4>) {
  %g = group_id
  %a = subview %A[:,:,%g] : memref<f32x16x16x?>
  %b = subview %B[:,:,%g] : memref<f32x16x16x?>
  %c = subview %C[:,:,%g,%g] : memref<f32x16x16x4x4>
  gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x16x16>, memref<f32x16x16>, f32, memref<f32x16x16>
}"""
"""C's member on the diagonal of two batch modes: one group on is both strides on."""


def test_a_member_picked_in_two_modes_moves_by_both_strides(rng) -> None:
    """The later C (`later 2`, as 16^3 is two members ahead on avx512) lies 2 x (256 + 1024)
    elements on from the next: each line asked for with prefetchw is asked for 10240 bytes
    on with prefetcht1; A's and B's 2 x 1024 bytes on. Results where the host runs avx512."""
    compilation = compiled(DIAGONAL_C, "avx512")
    assert all(" later 2 :" in t for t in tile_gemms(compilation.tiled()))
    asked = _asked_lines(compilation.assembly())
    for (kind, address), lines in asked.items():
        if kind != "prefetcht1":
            stride = 10240 if kind == "prefetchw" else 2048
            assert asked[("prefetcht1", address)] == [line + stride // 64 for line in lines]
    if runs_here("avx512"):
        a, b = (np.asfortranarray(rng.uniform(-1, 1, (16, 16, 4)).astype(np.float32)) for _ in "ab")
        c = np.asfortranarray(rng.uniform(-1, 1, (16, 16, 4, 4)).astype(np.float32))
        want = c.copy()
        for g in range(4):
            want[:, :, g, g] += a[:, :, g].astype(np.float64) @ b[:, :, g].astype(np.float64)
        compilation["k"](a, b, c, group_size=4)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * 16)


def test_no_later_member_where_a_batch_stride_is_dynamic() -> None:
    """The later member's lines are a constant stride from the next member's: with B's
    batch stride known only at run time, the tiles ask for the next member's lines only."""
    b_type = "memref<f32x64x64x?,strided<1,64,?>>"
    text = batched("f32", 64, 64, 64).replace("memref<f32x64x64x?>, %C", f"{b_type}, %C")
    text = text.replace("%B[:,:,%g] : memref<f32x64x64x?>", f"%B[:,:,%g] : {b_type}")
    compilation = compiled(text, "avx512")
    tiles = tile_gemms(compilation.tiled())
    assert tiles and all("next b %" in t and "later" not in t for t in tiles)
    code = compilation.assembly()
    assert "prefetcht1" not in code and "prefetcht0" in code


@pytest.mark.parametrize(
    ("ty", "m", "n", "k", "distance"),
    [("f32", 8, 8, 8, 8), ("f64", 8, 8, 8, 4), ("f32", 16, 16, 16, 2), ("f64", 16, 16, 16, 1),
     ("f64", 64, 64, 64, 1)],
)  # fmt: skip
def test_the_smallest_members_prefetch_further_ahead(
    ty: str, m: int, n: int, k: int, distance: int
) -> None:
    """As many members ahead as fill an eighth of L1 (6 KiB on avx512), at least one; the
    member whose lines go to L2 as far again ahead."""
    tiled = compiled(batched(ty, m, n, k), "avx512").tiled()
    assert set(re.findall(r"arith\.add %g, (\d+)", tiled)) == {str(distance)}
    assert set(re.findall(r" later (\d+) :", tiled)) == {str(distance)}


def test_small_gemms_the_tiles_do_not_stream_prefetch_up_front() -> None:
    """Operands the tiles do not stream (bf16 on AMX, packed) within a quarter of L1: the
    next group's views prefetched before the gemm."""
    tiled = compiled(batched("f32", 8, 8, 8, inputs="bf16"), "amx").tiled()
    assert tiled.count("tile.prefetch") == 3 and "next a" not in tiled


@pytest.mark.parametrize("shape", [(16, 16, 16), (64, 64, 64)], ids=str)
def test_f16_tiles_stream_the_next_groups_a_and_c(shape: tuple[int, int, int], rng) -> None:
    """f16 A runs the K loops of f32, which stream the next member's A and C (B is
    converted into a scratch first, not a group view): no prefetch up front, the K loops
    ask for the later member's lines too. Results where the host runs avx512."""
    compilation = compiled(batched("f32", *shape, inputs="f16"), "avx512")
    tiled = compilation.tiled()
    tiles = tile_gemms(tiled)
    assert tiles and all("next a %" in t and "next c %" in t and " later " in t for t in tiles)
    assert "tile.prefetch" not in tiled and "prefetcht1" in compilation.assembly()
    if runs_here("avx512"):
        m, n, k = shape
        a = np.asfortranarray(rng.uniform(-1, 1, (m, k, 5)).astype(np.float16))
        b = np.asfortranarray(rng.uniform(-1, 1, (k, n, 5)).astype(np.float16))
        c = np.asfortranarray(rng.uniform(-1, 1, (m, n, 5)).astype(np.float32))
        want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
        compilation["k"](a, b, c, group_size=5)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * k)


DOT_SHAPES = [(8, 8, 8), (64, 64, 64), (96, 96, 96), (20, 9, 21)]
"""bf16 batches into f32 whose dot-product tiles stream the next member (avx512, whose
hardware prefetchers are not relied on): B's pairs from quads (8^3), K pairs in one column
of tiles or several (64^3; 96^3, which also asks for C's lines up front), an odd K."""


@pytest.mark.parametrize("shape", DOT_SHAPES, ids=str)
def test_dot_product_tiles_stream_the_next_groups_operands(shape: tuple[int, int, int]) -> None:
    """Every K loop of pairs asks for the next member's lines into L1 and the later
    member's into L2, without spilling."""
    compilation = compiled(batched("f32", *shape, inputs="bf16"), "avx512")
    tiled = compilation.tiled()
    tiles = tile_gemms(tiled)
    assert tiles and all("next a %" in t and "next c %" in t and " later " in t for t in tiles)
    assert "tile.prefetch" not in tiled
    code = compilation.assembly()
    k_loops = hot_loops(code, "k", "vdpbf16ps")
    assert k_loops or shape == (8, 8, 8)  # 8^3: K unrolled, no loop
    for loop in k_loops:
        assert loop.count("prefetcht0") and loop.count("prefetchw") and loop.count("prefetcht1")
        assert not loop.stack_accesses()
    assert code.count("prefetcht1") >= 3


@pytest.mark.parametrize("target", runnable(ZEN4, "avx512"))
@pytest.mark.parametrize("shape", DOT_SHAPES, ids=str)
def test_dot_product_streamed_results(shape: tuple[int, int, int], target: object, rng) -> None:
    compilation = compiled(batched("f32", *shape, inputs="bf16"), target)
    assert "next a %" in compilation.tiled() or target is ZEN4  # Zen 4 leaves small ones
    check_bf16_batch(compilation, shape, 5, rng)


def check_bf16_batch(
    compilation: nanotc.Compilation, shape: tuple[int, int, int], batch: int,
    rng: np.random.Generator,
) -> None:  # fmt: skip
    """Runs kernel `k` (C_g += A_g B_g, bf16 A and B into f32) on `batch` random members,
    on one thread and on two, against float64."""
    m, n, k = shape
    bf16 = ml_dtypes.bfloat16
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, batch)).astype(bf16))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch)).astype(bf16))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch)).astype(np.float32))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    for threads in (1, 2):
        got = c.copy(order="F")
        compilation["k"](a, b, got, group_size=batch, num_threads=threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * k)


WIDENED_SHAPES = [(16, 16, 16), (56, 9, 9), (35, 9, 35)]
"""bf16 batches into f32 whose tiles stream the next member on targets that widen bf16."""


@pytest.mark.parametrize("target", ["avx2", ZEN3], ids=["avx2", "zen3"])
@pytest.mark.parametrize("shape", WIDENED_SHAPES, ids=str)
def test_widened_bf16_tiles_stream_the_next_groups_operands(
    shape: tuple[int, int, int], target: object
) -> None:
    """bf16 widened to f32 FMAs runs the K loops of f32, which stream the next member's
    lines; on a target with bf16 dot products its K loops of pairs stream them too."""
    text = batched("f32", *shape, inputs="bf16")
    tiled = compiled(text, target).tiled()
    tiles = tile_gemms(tiled)
    assert tiles and all("next a %" in t and "next c %" in t for t in tiles)
    assert "tile.prefetch" not in tiled
    assert "next a %" in compiled(text, "avx512").tiled()


@pytest.mark.parametrize("target", runnable("avx2", ZEN3))
@pytest.mark.parametrize("shape", WIDENED_SHAPES, ids=str)
def test_widened_bf16_streamed_results(shape: tuple[int, int, int], target: object, rng) -> None:
    check_bf16_batch(compiled(batched("f32", *shape, inputs="bf16"), target), shape, 7, rng)


def test_a_resident_tile_streams_per_k_pair(rng) -> None:
    """A tuned resident tile on a group member (K unrolled, A's pairs in registers) asks
    for one K pair's part of the next and later members' lines at each pair, and computes
    the product (avx512 where the host runs it)."""
    text = batched("f32", 48, 12, 8, inputs="bf16")
    (site,) = gemm_sites(nanotc.load(text).function("k"), get("avx512"))
    options = CompileOptions.of({site.key: GemmChoice((3, 12))})
    compilation = nanotc.compile(text, target="avx512", options=options, cache=False)
    (tile,) = tile_gemms(compilation.tiled())
    assert ".resident" in tile and "next a %" in tile and " later " in tile
    code = compilation.assembly()
    assert code.count("prefetcht1") >= 3 and code.count("prefetchw") >= 1
    if runs_here("avx512"):
        check_bf16_batch(compilation, (48, 12, 8), 4, rng)


@pytest.mark.parametrize(
    "text",
    [batched("f64", 192, 192, 192), batched("f32", 16, 16, 16, index="%i")],
    ids=["operands beyond a quarter of L2", "views not picked by the group id"],
)  # fmt: skip
def test_no_prefetch_where_it_would_not_help(text: str) -> None:
    tiled = compiled(text, "avx512").tiled()
    assert "tile.prefetch" not in tiled and "next a" not in tiled


RESULT_SHAPES = [
    ("f32", 20, 9, 20, None), ("f64", 20, 9, 20, None), ("f64", 64, 64, 64, None),
    ("f64", 72, 72, 72, 80), ("f32", 35, 9, 35, None), ("f32", 56, 9, 9, 64),
]  # fmt: skip
"""(type, M, N, K, leading dimension of A and C) of the batches `test_results_with_prefetching`
runs."""


@pytest.mark.parametrize("target", PREFETCHING)
@pytest.mark.parametrize(("ty", "m", "n", "k", "ld"), RESULT_SHAPES)
def test_batches_whose_results_are_checked_prefetch(
    ty: str, m: int, n: int, k: int, ld: int | None, target: str
) -> None:
    """Their tiles stream the next group's operands (compiled on any host)."""
    assert "next a %" in compiled(batched(ty, m, n, k, ld=ld), target).tiled()


@pytest.mark.parametrize("target", runnable(*PREFETCHING))
@pytest.mark.parametrize(("ty", "m", "n", "k", "ld"), RESULT_SHAPES)
def test_results_with_prefetching(
    ty: str, m: int, n: int, k: int, ld: int | None, target: str, rng
) -> None:
    dt = np.float32 if ty == "f32" else np.float64
    batch, rows = 7, ld or m
    a = np.asfortranarray(rng.uniform(-1, 1, (rows, k, batch)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (rows, n, batch)).astype(dt))
    want = c.copy()
    want[:m] += np.einsum("mkb,knb->mnb", a[:m].astype(np.float64), b.astype(np.float64))
    compilation = compiled(batched(ty, m, n, k, ld=ld), target)
    for threads in (1, 2):
        got = c.copy(order="F")
        compilation["k"](a, b, got, group_size=batch, num_threads=threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


NESTED = """func @k(%A: memref<f64x16x16x?>, %B: memref<f64x16x16x?>, %C: memref<f64x16x16x?>) {
  %g = group_id
  %a = subview %A[:,:,%g] : memref<f64x16x16x?>
  %b = subview %B[:,:,%g] : memref<f64x16x16x?>
  %odd = arith.rem %g, 2 : index
  %even = cmp.eq %odd, 0 : index
  if %even {
    %c = subview %C[:,:,%g] : memref<f64x16x16x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f64, memref<f64x16x16>, memref<f64x16x16>, f64, memref<f64x16x16>
  }
}"""
"""C's view and the gemm inside an `if` (even groups only), A's and B's outside."""


@pytest.mark.parametrize("target", PREFETCHING)
def test_views_in_nested_regions_get_next_views_where_they_dominate(target: str) -> None:
    """Each next view follows its own view; the group index ahead, computed after A's view,
    serves the view inside the `if` too (compiled on any host)."""
    tiled = compiled(NESTED, target).tiled()
    assert "next c %" in tiled and tiled.count("tile.min") == 1  # after A's view, reused inside


@pytest.mark.parametrize("target", runnable(*PREFETCHING))
def test_views_in_nested_regions_results(target: str, rng) -> None:
    """Only the even groups' C updated."""
    batch = 5
    a, b, c = (np.asfortranarray(rng.uniform(-1, 1, (16, 16, batch))) for _ in range(3))
    want = c.copy()
    want[:, :, ::2] += np.einsum("mkb,knb->mnb", a, b)[:, :, ::2]
    compiled(NESTED, target)["k"](a, b, c, group_size=batch, num_threads=2)
    np.testing.assert_allclose(c, want, rtol=1e-12, atol=1e-12)


def sibling_regions() -> str:
    """Gemms in both branches of an `if` (alpha 1 for even groups, -1 for odd ones), their
    views inside."""
    t, m = "memref<f32x8x8x?>", "memref<f32x8x8>"
    views = "\n".join(f"    %{x} = subview %{x.upper()}[:,:,%g] : {t}" for x in "abc")
    gemm = f"    gemm.n.n {{alpha}}, %a, %b, 1.0, %c : f32, {m}, {m}, f32, {m}"
    return f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
  %g = group_id
  %odd = arith.rem %g, 2 : index
  %even = cmp.eq %odd, 0 : index
  if %even {{
{views}
{gemm.format(alpha="1.0")}
  }} else {{
{views}
{gemm.format(alpha="-1.0")}
  }}
}}"""


@pytest.mark.parametrize("target", PREFETCHING)
def test_sibling_regions_compute_their_own_group_index_ahead(target: str) -> None:
    """A group index computed in one branch does not dominate the other, so each computes
    its own (compiled on any host)."""
    assert compiled(sibling_regions(), target).tiled().count("tile.min") == 2


@pytest.mark.parametrize("target", runnable(*PREFETCHING))
def test_sibling_regions_results(target: str, rng) -> None:
    batch = 5
    a, b, c = (
        np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32)) for _ in "abc"
    )
    product = np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    want = c + np.where(np.arange(batch) % 2 == 0, 1.0, -1.0) * product
    compiled(sibling_regions(), target)["k"](a, b, c, group_size=batch, num_threads=2)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


RUN_TIME_STRIDE_A = "memref<f32x8x8x?,strided<1,?,?>>"
RUN_TIME_STRIDE = f"""func @k(%A: {RUN_TIME_STRIDE_A}, %B: memref<f32x8x8x?>, %C: memref<f32x8x8x?>) {{
  %g = group_id
  %a = subview %A[:,:,%g] : {RUN_TIME_STRIDE_A}
  %b = subview %B[:,:,%g] : memref<f32x8x8x?>
  %c = subview %C[:,:,%g] : memref<f32x8x8x?>
  gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x8x8,strided<1,?>>, memref<f32x8x8>, f32, memref<f32x8x8>
}}"""
"""A batch whose A's column stride is known only at run time."""


@pytest.mark.parametrize("target", PREFETCHING)
def test_views_with_a_run_time_column_stride_are_prefetched_up_front(target: str) -> None:
    """No stream (A's lines are not static): the next group's views prefetched before the
    gemm at computed addresses (compiled on any host)."""
    assert compiled(RUN_TIME_STRIDE, target).tiled().count("tile.prefetch") == 3


@pytest.mark.parametrize("target", runnable(*PREFETCHING))
def test_views_with_a_run_time_column_stride_results(target: str, rng) -> None:
    batch = 5
    padded = np.asfortranarray(rng.uniform(-1, 1, (11, 8, batch)).astype(np.float32))
    a = padded[:8]  # column stride 11
    b = np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32))
    c = np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compiled(RUN_TIME_STRIDE, target)["k"](a, b, c, group_size=batch)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


HARDWARE_PREFETCHED = [
    ("f32", (16, 16, 16), "", False), ("f64", (16, 16, 16), "", False),
    ("f32", (8, 8, 8), "bf16", False), ("f32", (35, 9, 35), "", False),
    ("f32", (32, 32, 32), "", True), ("f64", (32, 32, 32), "", True),
    ("f64", (35, 9, 35), "", True), ("f32", (128, 9, 9), "", True),
    ("f32", (100, 4, 4), "", False), ("f32", (128, 4, 4), "", False),
    ("f32", (256, 2, 2), "", False), ("f64", (128, 2, 4), "", False),
    ("f32", (120, 8, 8), "", True), ("f32", (496, 2, 2), "", True),
    ("f64", (248, 2, 2), "", True),
]  # fmt: skip
"""(type, M x N x K, type of A and B, whether the compiler prefetches) of batches on the Zen
4 host, whose memory bandwidth is measured. Under a quarter of L1, f32 100x4x4 takes a tile
of 80 rows and one of 20, 128x4x4, 256x2x2 and f64 128x2x4 one of whole columns
(`choose_whole_columns`); f32 120x8x8 (whose column would load A 4.1 times a line), f32
496x2x2 and f64 248x2x2 (31 vectors a column) loop over row tiles."""


@pytest.mark.parametrize(("ty", "shape", "inputs", "prefetched"), HARDWARE_PREFETCHED)
def test_members_the_hardware_prefetches_are_left_to_it(
    ty: str, shape: tuple[int, int, int], inputs: str, prefetched: bool
) -> None:
    """On a target whose memory bandwidth is known, members under a quarter of L1 that take
    longer to load than to compute at its peak are left to its hardware prefetchers:
    neither streamed (f32, f64) nor prefetched up front (bf16), and their K loops prefetch
    no later columns of A. 32^3 computes longer, f64 35x9x35 (14.5 KiB) and f32 128x9x9
    (9.3 KiB) are larger, and the members whose tiles loop over row blocks read their
    columns in pieces: streamed (compiled on any host)."""
    compilation = compiled(batched(ty, *shape, inputs=inputs), ZEN4)
    tiled = compilation.tiled()
    assert ("next a %" in tiled or "tile.prefetch" in tiled) is prefetched
    # nor A's later columns in the K loop
    assert ("prefetch" in compilation.assembly()) is prefetched


def test_every_tile_of_a_member_looping_over_rows_streams() -> None:
    """The decision is the member's: f32 120x8x8 loops over two tiles of 48 rows, and its
    tile of 32 for the last 24 rows (at a constant row, out of the loop; alone it would
    loop) streams its share too."""
    tiled = compiled(batched("f32", 120, 8, 8), ZEN4).tiled()
    tiles = [line for line in tiled.splitlines() if "tile.gemm" in line]
    assert len(tiles) == 2 and "[96, %7] rows 24 tile 32 x 4" in tiles[1]
    assert all("next a %" in line and "later 1" in line for line in tiles)


def test_a_member_looping_over_rows_fetches_a_once() -> None:
    """f32 96x9x9 on Zen 4 in tuned 32 x 5 tiles (the model's before whole columns) loops
    them, then 32 x 4 tiles, down C's rows: both column blocks stream, and the second finds
    A in L1 (`fetched`), as for any streamed member of more than one column block
    (`gemm_tiles.fetches_a_once`): only the first block's K loop asks for A's later
    columns."""
    text = batched("f32", 96, 9, 9)
    (site,) = gemm_sites(nanotc.load(text).function("k"), ZEN4)
    options = CompileOptions.of({site.key: GemmChoice((2, 5))})
    compilation = nanotc.compile(text, target=ZEN4, options=options, cache=False)
    tiles = [line for line in compilation.tiled().splitlines() if "tile.gemm" in line]
    assert [".fetched" in line for line in tiles] == [False, True]
    assert all("next a %" in line for line in tiles)
    plans = compilation.nanokernels().split("@k: ")[1:]
    assert ["prefetch A[" in plan for plan in plans] == [True, False]


def test_loop_indexed_members_looping_over_rows_stay_with_the_hardware() -> None:
    """The same member in a loop of one work-group (a batch in L2, nothing to stream: in
    W2's cache variant f32 128x6x9 ran 0.95x with prefetch instructions) keeps K loops
    that ask for nothing, and no column block is told A is in L1."""
    compilation = compiled(looped_members("f32", 96, 9, 9), ZEN4)
    assert "rows 32 tile 32 x 5" in compilation.tiled()  # down the rows, as a member's were
    assert ".fetched" not in compilation.tiled()
    assert "prefetch" not in compilation.assembly()


@needs_host(ZEN4)
@pytest.mark.parametrize(("ty", "shape", "inputs", "prefetched"), HARDWARE_PREFETCHED)
def test_members_the_hardware_prefetches_results(
    ty: str, shape: tuple[int, int, int], inputs: str, prefetched: bool, rng
) -> None:
    """Results unchanged, prefetched or not."""
    m, n, k = shape
    dt, ab = (np.float32 if ty == "f32" else np.float64), (inputs or ty)
    source = ml_dtypes.bfloat16 if ab == "bf16" else dt
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, 5)).astype(source))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, 5)).astype(source))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, 5)).astype(dt))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compiled(batched(ty, m, n, k, inputs=inputs), ZEN4)["k"](a, b, c, group_size=5)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5 * k)


ZEN3_HARDWARE_PREFETCHED = [
    ("f32", (8, 8, 8), False), ("f64", (8, 8, 8), False),
    ("f32", (16, 8, 8), True), ("f64", (8, 8, 16), True),
]  # fmt: skip
"""(type, M x N x K, whether the compiler prefetches) of batches on the Zen 3 host: 8^3
needs 24 bytes a cycle of its compute, past the crossover measured there (22); f32 16x8x8
and f64 8x8x16 need 20."""


@pytest.mark.parametrize(("ty", "shape", "prefetched"), ZEN3_HARDWARE_PREFETCHED)
def test_zen3_leaves_only_the_smallest_members_to_the_hardware(
    ty: str, shape: tuple[int, int, int], prefetched: bool
) -> None:
    """Zen 3's hardware prefetchers keep up with a batch only where its members are tiny:
    8^3 is neither streamed nor prefetches A in its K loops; slightly larger members are
    streamed (compiled on any host)."""
    compilation = compiled(batched(ty, *shape), ZEN3)
    assert ("next a %" in compilation.tiled()) is prefetched
    assert ("prefetch" in compilation.assembly()) is prefetched


@needs_host(ZEN3)
@pytest.mark.parametrize(("ty", "shape", "prefetched"), ZEN3_HARDWARE_PREFETCHED)
def test_zen3_members_the_hardware_prefetches_results(
    ty: str, shape: tuple[int, int, int], prefetched: bool, rng
) -> None:
    m, n, k = shape
    dt = np.float32 if ty == "f32" else np.float64
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, 5)).astype(dt))
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, 5)).astype(dt))
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, 5)).astype(dt))
    want = c + np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))
    compiled(batched(ty, m, n, k), ZEN3)["k"](a, b, c, group_size=5)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_host_takes_the_rates_measured_for_its_cpu() -> None:
    import llvmlite.binding as llvm

    rates = MEASURED_RATES.get((llvm.get_host_cpu_name(), host().vector_bits), {})
    assert host().fma_per_cycle == rates.get("fma_per_cycle", 2.0)
    assert host().l2_bytes_per_cycle == rates.get("l2_bytes_per_cycle", 20.0)
    assert host().hardware_prefetch_bytes_per_cycle == rates.get(
        "hardware_prefetch_bytes_per_cycle", 0.0
    )
    assert host().fma_unit_bits == rates.get("fma_unit_bits", 0)
    assert host().stream_vector_bits == rates.get("stream_vector_bits", 0)


def test_every_member_is_prefetched_where_no_crossover_is_measured() -> None:
    target = get("avx512")
    assert target.hardware_prefetch_bytes_per_cycle == 0
    assert "next a %" in compiled(batched("f32", 16, 16, 16), target).tiled()


EMPTY_TYPES = [("f32", ""), ("f64", ""), ("f32", "bf16")]
EMPTY_SHAPES = [(4, 4, 0), (0, 4, 4), (4, 0, 4), (0, 0, 0)]


@pytest.mark.parametrize("target", ["avx512", "avx2", "generic"])
@pytest.mark.parametrize(("ty", "inputs"), EMPTY_TYPES)
@pytest.mark.parametrize("mnk", EMPTY_SHAPES)
def test_batches_of_empty_gemms_compile(
    target: str, ty: str, inputs: str, mnk: tuple[int, int, int]
) -> None:
    """An empty operand is not streamed (no lines to spread over no K steps) and an empty
    member is not prefetched: both were divisions by zero in the compiler (compiled on any
    host)."""
    assert "next a" not in compiled(batched(ty, *mnk, inputs=inputs), target).tiled()


@pytest.mark.parametrize("target", runnable("avx512", "avx2", "generic"))
@pytest.mark.parametrize(("ty", "inputs"), EMPTY_TYPES)
@pytest.mark.parametrize("mnk", EMPTY_SHAPES)
def test_batches_of_empty_gemms_run(
    target: str, ty: str, inputs: str, mnk: tuple[int, int, int]
) -> None:
    """Empty members run, doing nothing: K = 0 leaves C as it was (beta 1)."""
    m, n, k = mnk
    compilation = compiled(batched(ty, m, n, k, inputs=inputs), target)
    dtypes = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16}
    a = np.ones((m, k, 3), dtypes[inputs or ty], order="F")
    b = np.ones((k, n, 3), dtypes[inputs or ty], order="F")
    c = np.full((m, n, 3), 2.0, dtypes[ty], order="F")
    compilation["k"](a, b, c, group_size=3)
    assert (c == 2.0).all()
