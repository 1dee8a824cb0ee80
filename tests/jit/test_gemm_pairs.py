"""bf16 gemms on AVX512-BF16 whose op(A) is packed once into VNNI pairs (`tile.pack.pairs`)
before C's register tiles read it (`tile.gemm.pairs`): which gemms take the pack, and their
results against float64 on the same bf16 values (f32 accumulation) for transposes, odd K,
M tails, general alpha and beta, and a loop over batch members.

What the compiler emits is checked on every host (compiling for AVX-512 needs no AVX-512);
the results only where the host runs AVX512-BF16 code (`runnable`, `needs_host`)."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from nanotc.targets import Target

from .helpers import SPLIT_FMA, compiled, looped_bf16_members, needs_host, runnable

BF16 = ml_dtypes.bfloat16

BF16_DOT: tuple[str | Target, ...] = ("avx512", SPLIT_FMA)
"""vdpbf16ps on 512-bit FMA units and on 256-bit ones (Zen 4), where a tile's narrowed last
vector computes in its own width."""


def gemm_text(m: int, n: int, k: int, ta: str, tb: str) -> str:
    a = f"memref<bf16x{k}x{m}>" if ta == "t" else f"memref<bf16x{m}x{k}>"
    b = f"memref<bf16x{n}x{k}>" if tb == "t" else f"memref<bf16x{k}x{n}>"
    c = f"memref<f32x{m}x{n}>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.{ta}.{tb} %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


def check(got: np.ndarray, want: np.ndarray, bound: np.ndarray, k: int) -> None:
    eps = float(np.finfo(np.float32).eps)
    assert np.all(np.abs(got - want) <= 4 * eps * (np.sqrt(k) + 4) * bound + 1e-30)


@pytest.mark.parametrize(("shape", "ta", "packed"), [
    ((64, 64, 9), "n", True),  # 13 columns of 64 x 5 tiles, five K pairs
    ((32, 64, 22), "n", True),
    ((64, 64, 8), "n", False),  # one tile holds A's four K pairs instead (`.resident`)
    ((64, 64, 64), "n", False),  # 32 K pairs: the tiles unpack A's pairs themselves
    ((64, 64, 64), "t", True),  # ... but not those of a transposed A
    ((35, 9, 5), "n", False),  # two columns of tiles: the pack costs more than it saves
    ((16, 16, 16), "n", False),  # one
], ids=str)  # fmt: skip
def test_a_is_packed_where_c_has_three_columns_of_tiles_and_k_is_short(
    shape: tuple[int, int, int], ta: str, packed: bool
) -> None:
    tiled = compiled(gemm_text(*shape, ta, "n"), "avx512").tiled()
    assert (f"tile.pack.{ta}.pairs" in tiled) is packed
    assert ("tile.gemm.n.n.pairs" in tiled) is packed


# (shape, op(A)): 33 rows of an untransposed A with so short a K hold its pairs instead
PACKED = [((64, 64, 9), "n"), ((64, 64, 9), "t"), ((33, 50, 7), "t"), ((70, 40, 7), "n"),
          ((70, 40, 7), "t")]  # fmt: skip
CASES = [(shape, ta, tb) for (shape, ta), tb in itertools.product(PACKED, "nt")]
CASE_IDS = [f"{shape}-{ta}{tb}" for shape, ta, tb in CASES]


@pytest.mark.parametrize("target", BF16_DOT, ids=["avx512", "split-fma"])
@pytest.mark.parametrize(("shape", "ta", "tb"), CASES, ids=CASE_IDS)
def test_short_k_packs_a_into_pairs(shape: tuple[int, int, int], ta: str, tb: str,
                                    target: str | Target) -> None:  # fmt: skip
    """The gemms whose results `test_packed_pairs_match_float64` checks take the pack, for
    either transpose of B and on either width of FMA units (compiled on any host)."""
    m, n, k = shape
    assert f"tile.pack.{ta}.pairs" in compiled(gemm_text(m, n, k, ta, tb), target).tiled()


@pytest.mark.parametrize("target", runnable(*BF16_DOT))
@pytest.mark.parametrize(("shape", "ta", "tb"), CASES, ids=CASE_IDS)
def test_packed_pairs_match_float64(shape: tuple[int, int, int], ta: str, tb: str,
                                    target: str | Target, rng) -> None:  # fmt: skip
    """Odd K pads the last pair with zeros; 33 and 70 rows leave a partial panel whose
    padding rows are zero; a transposed A is interleaved element by element. On 256-bit FMA
    units a narrowed last vector takes its pairs from the panel in its own width."""
    m, n, k = shape
    compilation = compiled(gemm_text(m, n, k, ta, tb), target)
    a = np.asfortranarray(rng.uniform(-1, 1, (k, m) if ta == "t" else (m, k))).astype(BF16)
    b = np.asfortranarray(rng.uniform(-1, 1, (n, k) if tb == "t" else (k, n))).astype(BF16)
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n))).astype(np.float32)
    x = a.astype(np.float64).T if ta == "t" else a.astype(np.float64)
    y = b.astype(np.float64).T if tb == "t" else b.astype(np.float64)
    want = -0.5 * c + 1.5 * (x @ y)
    bound = 0.5 * np.abs(c) + 1.5 * (np.abs(x) @ np.abs(y))
    compilation["k"](1.5, a, b, -0.5, c, group_size=1)
    check(c, want, bound, k)


BATCH = (48, 40, 13, 5)  # M, N, K and the number of members (K = 9: A's pairs held instead)


def batch_text() -> str:
    """W4's batched form: for every member i, C_i += A_i B_i."""
    return looped_bf16_members(*BATCH[:3])


def test_batch_members_each_pack_their_own_a() -> None:
    """W4's batched form: every member's A is packed before its tiles (compiled on any
    host; `test_batch_members_match_float64` runs it)."""
    assert "tile.pack.n.pairs" in compiled(batch_text(), "avx512").tiled()


@needs_host("avx512")
def test_batch_members_match_float64(rng) -> None:
    """Every member's C_i += A_i B_i, each from its own packed A, to f32 roundoff."""
    m, n, k, batch = BATCH
    compilation = compiled(batch_text(), "avx512")
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k, batch))).astype(BF16)
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n, batch))).astype(BF16)
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n, batch))).astype(np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = c + np.einsum("mki,kni->mni", x, y)
    bound = np.abs(c) + np.einsum("mki,kni->mni", np.abs(x), np.abs(y))
    compilation["k"](a, b, c, group_size=1)
    check(c, want, bound, k)


def literal_gemm_text(m: int, n: int, k: int, alpha: float, beta: float) -> str:
    """C = alpha A B + beta C with alpha and beta in the program (a beta of 1 lets the
    accumulators start from C)."""
    a, b, c = f"memref<bf16x{m}x{k}>", f"memref<bf16x{k}x{n}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
  gemm.n.n {alpha!r}, %A, %B, {beta!r}, %C : f32, {a}, {b}, f32, {c}
}}"""


UNPACKING_CASES = [
    ((64, 8, 32), 1.0, 1.0),  # accumulators from C, permuted into the unpack's row order
    ((32, 5, 20), -2.0, 0.5),  # alpha and beta in the epilogue, after the permute back
    ((30, 4, 9), 1.0, 1.0),  # a pair of vectors masked at row 30; odd K
    ((56, 3, 11), 0.5, 0.0),  # a pair, a third vector alone, a narrowed fourth; beta 0
    ((35, 9, 35), 1.0, 1.0),  # a pair and three rows: masked (narrowed on split units)
]


@pytest.mark.parametrize(("shape", "alpha", "beta"), UNPACKING_CASES, ids=str)
@pytest.mark.parametrize("target", BF16_DOT, ids=["avx512", "split-fma"])
def test_tiles_unpack_a_within_lanes(shape: tuple[int, int, int], alpha: float, beta: float,
                                     target: str | Target) -> None:  # fmt: skip
    """The gemms whose results `test_tiles_unpacking_a_match_float64` checks unpack A's K
    pairs within lanes in their nanokernels, on either width of FMA units (compiled on any
    host)."""
    m, n, k = shape
    compilation = compiled(literal_gemm_text(m, n, k, alpha, beta), target)
    assert "vunpck(l,h)wd" in compilation.nanokernels()


@pytest.mark.parametrize(("shape", "alpha", "beta"), UNPACKING_CASES, ids=str)
@pytest.mark.parametrize("target", runnable(*BF16_DOT))
def test_tiles_unpacking_a_match_float64(shape: tuple[int, int, int], alpha: float,
                                         beta: float, target: str | Target, rng) -> None:  # fmt: skip
    """Tiles that unpack A's K pairs within lanes (their accumulators' rows in the unpack's
    order, permuted from C and back) give C = alpha A B + beta C to f32 roundoff, also
    where the last vector computes in its own narrower width (256-bit FMA units)."""
    m, n, k = shape
    compilation = compiled(literal_gemm_text(m, n, k, alpha, beta), target)
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k))).astype(BF16)
    b = np.asfortranarray(rng.uniform(-1, 1, (k, n))).astype(BF16)
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n))).astype(np.float32)
    x, y = a.astype(np.float64), b.astype(np.float64)
    want = alpha * (x @ y) + beta * c
    bound = abs(alpha) * (np.abs(x) @ np.abs(y)) + abs(beta) * np.abs(c)
    compilation["k"](a, b, c, group_size=1)
    check(c, want, bound, k)


def dynamic_k_text(m: int, n: int) -> str:
    a, b, c = f"memref<bf16x{m}x?>", f"memref<bf16x?x{n}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%alpha: f32, %A: {a}, %B: {b}, %beta: f32, %C: {c}) {{
  gemm.n.n %alpha, %A, %B, %beta, %C : f32, {a}, {b}, f32, {c}
}}"""


QUAD_CASES = [
    ((8, 8, 8), "n", True, False),  # one step of four K pairs, nothing left
    ((16, 9, 17), "n", True, False),  # two steps, then an odd K's last pair; 5 + 4 columns
    ((5, 3, 12), "n", True, False),  # a masked vector; one step, then two pairs
    ((12, 7, 30), "n", True, True),  # K known at run time only
    ((16, 4, 7), "n", False, False),  # K short of one step
    ((8, 8, 16), "t", False, False),  # B's pairs not adjacent
    ((32, 8, 16), "n", False, False),  # two vectors: the broadcast loads keep pace
]


def one_vector_text(shape: tuple[int, int, int], tb: str, dynamic: bool) -> str:
    m, n, k = shape
    return dynamic_k_text(m, n) if dynamic else gemm_text(m, n, k, "n", tb)


@pytest.mark.parametrize(("shape", "tb", "quads", "dynamic"), QUAD_CASES, ids=str)
def test_one_vector_tiles_take_b_pairs_four_at_a_time(
    shape: tuple[int, int, int], tb: str, quads: bool, dynamic: bool
) -> None:
    """One-vector dot tiles load the K pairs of B's even columns 128 bits at a time and
    pick each by an in-lane shuffle, where K holds a step of four pairs and B's pairs are
    adjacent (compiled on any host; `test_one_vector_tiles_match_float64` runs them)."""
    compilation = compiled(one_vector_text(shape, tb, dynamic), "avx512")
    assert ("vbroadcast128 B" in compilation.nanokernels()) is quads


@pytest.mark.parametrize(("shape", "tb", "quads", "dynamic"), QUAD_CASES, ids=str)
@needs_host("avx512")
def test_one_vector_tiles_match_float64(
    shape: tuple[int, int, int], tb: str, quads: bool, dynamic: bool, rng
) -> None:
    """The one-vector dot tiles' results match float64 to f32 roundoff, whether they take
    B's pairs four at a time or not."""
    m, n, k = shape
    compilation = compiled(one_vector_text(shape, tb, dynamic), "avx512")
    a = np.asfortranarray(rng.uniform(-1, 1, (m, k))).astype(BF16)
    b = np.asfortranarray(rng.uniform(-1, 1, (n, k) if tb == "t" else (k, n))).astype(BF16)
    c = np.asfortranarray(rng.uniform(-1, 1, (m, n))).astype(np.float32)
    x = a.astype(np.float64)
    y = b.astype(np.float64).T if tb == "t" else b.astype(np.float64)
    want = -0.5 * c + 1.5 * (x @ y)
    bound = 0.5 * np.abs(c) + 1.5 * (np.abs(x) @ np.abs(y))
    compilation["k"](1.5, a, b, -0.5, c, group_size=1)
    check(c, want, bound, k)


SUBNORMAL_CASES = {
    "gemm": ("gemm.n.n 1.0, %a, %b, 0.0, %c", (16, 16), (16, 16), (16, 16)),
    "gemv": ("gemv.n 1.0, %a, %b, 0.0, %c", (16, 16), (16,), (16,)),
    "ger": ("ger 1.0, %a, %b, 0.0, %c", (16,), (16,), (16, 16)),
}


@pytest.mark.parametrize("case", list(SUBNORMAL_CASES))
@pytest.mark.parametrize("target", ["host", "avx2"])
def test_dot_products_flush_subnormals_as_the_instruction_does(case: str, target: str) -> None:
    """vdpbf16ps and AMX's tdpbf16ps take subnormal bf16 inputs as zero and flush subnormal
    results (whatever MXCSR says), so products of subnormal A run to 0 where bf16 gemms (and
    the gemv and ger that run as gemms) take either; tiles that widen bf16 to f32 for FMAs
    keep them (docs/language.md)."""
    body, *shapes = SUBNORMAL_CASES[case]
    a_type, b_type, c_type = (
        f"memref<{e}x{'x'.join(map(str, s))}>" for e, s in zip(("bf16", "bf16", "f32"), shapes)
    )
    text = f"""func @k(%a: {a_type}, %b: {b_type}, %c: {c_type}) {{
    {body} : f32, {a_type}, {b_type}, f32, {c_type}
}}"""
    compilation = compiled(text, target)
    a = np.full(shapes[0], 1e-39, BF16, order="F")  # subnormal in bf16 and f32
    b = np.ones(shapes[1], BF16, order="F")
    c = np.full(shapes[2], np.nan, np.float32, order="F")
    compilation["k"](a, b, c, group_size=1)
    exact = float(a.flat[0]) * (16 if case != "ger" else 1)
    by_dot = compilation.target.bf16_gemm_by_dot or "tile.amx_" in compilation.tiled()
    assert np.all(c == (0.0 if by_dot else np.float32(exact)))
