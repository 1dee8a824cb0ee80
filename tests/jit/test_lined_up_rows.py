"""The direct path's row tiles start on A's cache lines (`gemm_tiles.lines_up_rows`): for a
static M of at least MIN_LINED_UP_VECTORS vectors whose columns all start at the same offset
in a line (and K of at least MIN_LINED_UP_DEPTH), the whole tiles begin at the first vector
boundary of A found at run time, and the rows before it and after the last whole tile take
masked one-vector tiles from one loop."""

from __future__ import annotations

import re

import pytest

from nanotc.lowering.gemm_tiles import MIN_LINED_UP_DEPTH, MIN_LINED_UP_VECTORS

from .helpers import compiled, runnable
from .test_gemm_blocked import check, expected, gemm_text, operands, path_of
from .test_gemm_in_place import at_line_offset, shapes_of

LINED_UP = {"f32": (784, 100, 64), "f64": (392, 37, 72)}  # 49 lines of columns, N tails


def _tiled(ty: str, shape: tuple[int, int, int], target: str = "host") -> str:
    m, n, k = shape
    return compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)), target).tiled()


@pytest.mark.parametrize("target", runnable("host", "avx2"))
@pytest.mark.parametrize("ty", ["f32", "f64"])
def test_tiles_lined_up_on_a_give_numpys_result_at_any_offset(ty: str, target: str,
                                                              rng) -> None:  # fmt: skip
    """Every offset of A in its line (a head of 0 to lanes - 1 rows, tails of every length),
    and C at an offset of its own, over the column blocks and the narrower remainder."""
    m, n, k = LINED_UP[ty]
    compilation = compiled(gemm_text(ty, "n", "n", shapes_of("n", "n", m, n, k)), target)
    tiled = compilation.tiled()
    assert path_of(tiled, m) == "direct" and "tile.line_lead %A" in tiled
    a, b, c = operands(rng, ty, "n", "n", m, n, k)
    want = expected(a, b, c, "n", "n", 0.5, 2.0)
    per_line = 64 // a.itemsize
    for a_offset, c_offset in [(0, 0), (1, 1), (per_line - 1, 0), (per_line // 2, 3)]:
        a_at, c_at = at_line_offset(a, a_offset), at_line_offset(c, c_offset)
        compilation["k"](0.5, a_at, b, 2.0, c_at, group_size=1)
        check(c_at, want, ty, k)


def test_whole_tiles_start_at_the_lead_and_one_loop_covers_the_edges() -> None:
    """Per column width (the blocks', then the remainder's), one kernel of whole tiles from
    the lead (`tile.line_lead` modulo the vector's lanes) and one of masked vectors, rows
    known at run time, for the rows around them."""
    tiled = _tiled("f32", LINED_UP["f32"])
    lead = re.search(r"(%\d+) = tile\.line_lead %A.*\n.*(%\d+) = arith\.rem \1, 16", tiled)
    assert lead is not None
    assert len(re.findall(rf"for %\d+ = {lead[2]}, %\d+, \d+ \{{", tiled)) == 2
    kernels = re.findall(r"rows (\S+) tile (\d+) x (\d+)", tiled)
    assert [(rows.isdigit(), height) for rows, height, _ in kernels] == [
        (True, "32"), (False, "16"), (True, "32"), (False, "16")
    ]  # fmt: skip
    widths = [width for _, _, width in kernels]
    assert widths[0] == widths[1] != widths[2] == widths[3]


@pytest.mark.parametrize(
    ("ty", "shape"),
    [("f32", (MIN_LINED_UP_VECTORS * 16 - 16, 64, 64)),  # one vector short
     ("f32", (611, 64, 64)),  # columns 611 floats apart start at different offsets
     ("f32", (1024, 64, MIN_LINED_UP_DEPTH - 1)),  # K loops shorter than measured
     ("f64", (MIN_LINED_UP_VECTORS * 8 - 8, 64, 64))],
    ids=str,
)  # fmt: skip
def test_short_or_unevenly_placed_columns_keep_their_tiles(
    ty: str, shape: tuple[int, int, int]
) -> None:
    """Below MIN_LINED_UP_VECTORS vectors of rows the masked edges cost more than whole lines
    save (f32 256x256x256 ran 0.94-0.97x lined up); columns at different offsets in their
    lines have no one boundary to start at; K below MIN_LINED_UP_DEPTH was not measured."""
    tiled = _tiled(ty, shape)
    assert path_of(tiled, shape[0]) == "direct" and "tile.line_lead" not in tiled


def test_a_of_another_type_than_c_keeps_its_tiles() -> None:
    """f32 A and B into f64 C: a vector of C's rows is half a vector of A's, and lining
    them up was not measured."""
    m, n, k = LINED_UP["f32"]
    a, b, c = f"memref<f32x{m}x{k}>", f"memref<f32x{k}x{n}>", f"memref<f64x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n 1.0, %A, %B, 0.0, %C : f64, {a}, {b}, f64, {c}
}}"""
    tiled = compiled(text).tiled()
    assert path_of(tiled, m) == "direct" and "tile.line_lead" not in tiled
