"""Tuning: overrides reach lowering (and only valid ones), the gemm signatures a kernel has,
the tuning database, and `tune`/`nanotc tune` end to end with a tiny budget (no speed is
asserted: only that a winner is stored, later compiles use it, and results stay right)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import nanotc
from nanotc.lowering.choices import (
    BATCH,
    BLOCKED,
    DIRECT,
    K_BLOCKS,
    PANELS,
    CompileOptions,
    GemmChoice,
)
from nanotc.lowering.register_tile import choose
from nanotc.runtime.arguments import Group
from nanotc.targets import get
from nanotc.tuning import database, tuner
from nanotc.tuning.tuner import TuneError, gemm_sites, tile_candidates, tune

from .cli import nanotc_cli

AVX2 = get("avx2")


def square(n: int, dtype: str = "f32") -> str:
    t = f"memref<{dtype}x{n}x{n}>"
    return f"""func @k(%A: {t}, %B: {t}, %C: {t}) {{
    gemm.n.n 1.0, %A, %B, 0.0, %C : {dtype}, {t}, {t}, {dtype}, {t}
}}
"""


MIXED = """func @mixed(%A: group<memref<f64x8x8>>, %B: group<memref<f64x8x8>>, %C: memref<f64x8x8>,
              %x: memref<f64x?x?>, %y: memref<f64x?x3>, %M: memref<f64x?x?>,
              %n: index) {
    for %i = 0, %n {
        %a = load %A[%i] : group<memref<f64x8x8>>
        %b = load %B[%i] : group<memref<f64x8x8>>
        gemm.n.n 1.0, %a, %b, 1.0, %C : f64, memref<f64x8x8>, memref<f64x8x8>, f64, memref<f64x8x8>
    }
    %x3 = subview %x[:, 0:3] : memref<f64x?x?>
    gemm.n.n 1.0, %M, %x3, 0.0, %y : f64, memref<f64x?x?>, memref<f64x?x3,strided<1,?>>, f64, memref<f64x?x3>
}
"""


def tiles_of(tiled: str) -> set[str]:
    return set(re.findall(r"tile (\d+ x \d+)", tiled))


def test_override_replaces_the_analytical_tile() -> None:
    text = square(64)
    analytical = nanotc.compile(text, AVX2, options=CompileOptions())
    (site,) = gemm_sites(analytical.program.function("k"), AVX2)
    assert site.key == "direct f32,f32,f32 n.n 64x64x64 r0"
    tile = choose(AVX2, nanotc.ir.types.ScalarType.F32, 64, 64, 64)
    assert site.analytical.tile == (tile.mv, tile.nr)
    assert f"{tile.mr} x {tile.nr}" in tiles_of(analytical.tiled())
    tuned = nanotc.compile(text, AVX2, options=CompileOptions.of({site.key: GemmChoice((1, 3))}))
    assert tiles_of(tuned.tiled()) == {"8 x 3", "8 x 1"}  # 64 = 21 x 3 + 1 columns


def test_override_that_does_not_fit_the_registers_is_ignored() -> None:
    text = square(64)
    key = "direct f32,f32,f32 n.n 64x64x64 r0"
    spilling = nanotc.compile(text, AVX2, options=CompileOptions.of({key: GemmChoice((4, 8))}))
    analytical = nanotc.compile(text, AVX2, options=CompileOptions())
    assert spilling.tiled() == analytical.tiled()


def test_blocking_override_sets_the_block_loops() -> None:
    text = square(1024)
    (site,) = gemm_sites(nanotc.load(text).function("k"), AVX2)
    assert site.signature.path == BLOCKED and site.analytical.blocking is not None
    mv, nr = site.analytical.tile  # type: ignore[misc]
    mr = mv * AVX2.lanes(nanotc.ir.types.ScalarType.F32)
    choice = GemmChoice((mv, nr), (mr * 8, 64, nr * 24))
    tiled = nanotc.compile(text, AVX2, options=CompileOptions.of({site.key: choice})).tiled()
    assert f"= 0, 1024, {nr * 24} {{" in tiled  # nc
    assert "= 0, 1024, 64 {" in tiled  # kc
    assert f"= 0, 1024, {mr * 8} {{" in tiled  # mc
    not_whole = GemmChoice((mv, nr), (mr * 8 + 1, 64, nr * 24))
    ignored = nanotc.compile(text, AVX2, options=CompileOptions.of({site.key: not_whole}))
    assert ignored.tiled() == nanotc.compile(text, AVX2, options=CompileOptions()).tiled()


@pytest.mark.parametrize(
    ("shape", "path"), [((3136, 64, 576), PANELS), ((96, 512, 1000), K_BLOCKS)], ids=str
)
def test_in_place_site_and_its_tile_override(shape: tuple[int, int, int], path: str) -> None:
    """A tall A with a small B takes row panels, a small A with a large B K blocks: each is
    tuned under its own signature, whose tile override reaches its nanokernels."""
    m, n, k = shape
    a, b, c = f"memref<f32x{m}x{k}>", f"memref<f32x{k}x{n}>", f"memref<f32x{m}x{n}>"
    text = f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
    gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""
    (site,) = gemm_sites(nanotc.load(text).function("k"), AVX2)
    assert site.signature.path == path and site.analytical.blocking is None
    tuned = nanotc.compile(text, AVX2, options=CompileOptions.of({site.key: GemmChoice((2, 4))}))
    # row panels start on a cache line: the rows around them take one-vector tiles as wide
    edges = {"8 x 4"} if path == "panels" else set()
    assert tiles_of(tuned.tiled()) == {"16 x 4"} | edges


def _gemm(m: int, n: int, k: int, inputs: str, output: str = "f32", beta: str = "0.0") -> str:
    a, b, c = (f"memref<{inputs}x{m}x{k}>", f"memref<{inputs}x{k}x{n}>",
               f"memref<{output}x{m}x{n}>")  # fmt: skip
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
    gemm.n.n 1.0, %A, %B, {beta}, %C : f32, {a}, {b}, f32, {c}
}}"""


def _transposed_a(m: int, n: int, k: int, inputs: str) -> str:
    """C = A^T B: a static A^T the direct path packs column-major first (`packed_a`)."""
    a, b, c = f"memref<{inputs}x{k}x{m}>", f"memref<{inputs}x{k}x{n}>", f"memref<f32x{m}x{n}>"
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}) {{
    gemm.t.n 1.0, %A, %B, 0.0, %C : f32, {a}, {b}, f32, {c}
}}"""


def _batch_reduce(inputs: str) -> str:
    a, b, c = (f"group<memref<{inputs}x32x32>>", f"group<memref<{inputs}x32x32>>",
               "memref<f32x32x32>")  # fmt: skip
    return f"""func @k(%A: {a}, %B: {b}, %C: {c}, %n: index) {{
    for %i = 0, %n {{
        %a = load %A[%i] : {a}
        %b = load %B[%i] : {b}
        gemm.n.n 1.0, %a, %b, 1.0, %C : f32, memref<{inputs}x32x32>, memref<{inputs}x32x32>, f32, memref<f32x32x32>
    }}
}}"""


@pytest.mark.parametrize(
    ("text", "target"),
    [
        (_gemm(56, 9, 9, "bf16"), "avx512"),  # vdpbf16ps tiles keep two registers free
        (_gemm(56, 9, 9, "bf16"), "avx2"),  # widened bf16 keeps one
        (_gemm(40, 12, 16, "f16"), "avx512"),
        (_batch_reduce("bf16"), "avx512"),
        (_gemm(66, 8, 64, "f32", beta="1.0"), "avx512"),  # the last two rows are row dot products
        (_gemm(56, 9, 9, "bf16", "bf16", beta="1.0"), "avx2"),  # tiles on f32 scratch of C
        (_gemm(40, 12, 16, "f16", "f16"), "avx512"),
        (_transposed_a(32, 24, 32, "f32"), "avx2"),  # the tiles read A's pack
        (_transposed_a(32, 24, 32, "bf16"), "avx2"),  # widened into an f32 pack
    ],
    ids=[
        "bf16-dot",
        "bf16-avx2",
        "f16",
        "bf16-batch",
        "f32-row-dots",
        "bf16-c",
        "f16-c",
        "f32-packed-a",
        "bf16-packed-a",
    ],
)
def test_site_keys_and_choices_are_the_lowerings(text: str, target: str) -> None:
    """The tuner names each site as lowering does and predicts its tile, so a tuned tile
    reaches the kernel: for 16-bit operands, the registers their K steps need are part of
    the key."""
    t = get(target)
    analytical = nanotc.compile(text, t, options=CompileOptions())
    (site,) = gemm_sites(analytical.program.function("k"), t)
    n = site.signature.shape[1]
    assert n is not None
    lanes = t.lanes(nanotc.ir.types.ScalarType.F32)

    def printed(tile: tuple[int, int] | None) -> str:  # a tile wider than C runs as wide
        assert tile is not None
        return f"{tile[0] * lanes} x {min(tile[1], n)}"

    assert printed(site.analytical.tile) in tiles_of(analytical.tiled())
    other = tile_candidates(site, t, 1)[0]
    tuned = nanotc.compile(text, t, options=CompileOptions.of({site.key: GemmChoice(other)}))
    assert printed(other) in tiles_of(tuned.tiled())
    assert tuned.tiled() != analytical.tiled()


def test_gemm_sites_of_a_kernel() -> None:
    func = nanotc.load(MIXED).function("mixed")
    small = gemm_sites(func, AVX2)
    assert [(s.signature.path, s.signature.shape) for s in small] == [
        (BATCH, (8, 8, 8)),
        (DIRECT, (None, 3, None)),
    ]
    large = [np.zeros((600, 600))]  # arrays beyond half of L2: the blocked path may run
    paths = [s.signature.path for s in gemm_sites(func, AVX2, large)]
    assert paths == [BATCH, DIRECT, BLOCKED]


def test_tile_candidates_fit_and_leave_out_the_analytical_choice() -> None:
    (site,) = gemm_sites(nanotc.load(square(64)).function("k"), AVX2)
    options = tile_candidates(site, AVX2, 50)
    assert options and site.analytical.tile not in options
    assert all(  # AVX2 tiles with fewer columns than vectors hold B's broadcasts instead of A
        mv * nr + min(mv, nr) + 1 <= AVX2.vector_registers for mv, nr in options
    )
    assert any(nr < mv for mv, nr in options)
    assert len(tile_candidates(site, AVX2, 3)) == 3


def test_database_records_per_target(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    key = "direct f32,f32,f32 n.n 64x64x64 r0"
    database.record(AVX2, {key: {"tile": [1, 3], "seconds": 1.0}})
    assert database.options_for(AVX2).get(key) == GemmChoice((1, 3))
    assert database.options_for(get("generic")).gemms == ()
    monkeypatch.setenv("NANOTC_TUNING", "0")
    assert database.options_for(AVX2).gemms == ()
    monkeypatch.delenv("NANOTC_TUNING")
    assert database.forget(AVX2) == 1 and database.options_for(AVX2).gemms == ()
    (tmp_path / "tuning.json").write_text("{ damaged")
    assert database.options_for(AVX2).gemms == ()
    database.record(AVX2, {key: {"tile": [2, 2]}})  # a damaged file is replaced
    assert json.loads((tmp_path / "tuning.json").read_text())["format"] == database.FORMAT


@pytest.mark.parametrize(
    "record",
    [
        "a string",
        ["tile", 1, 3],
        {"tile": [2, 13, 1]},
        {"tile": [2]},
        {"tile": [1e400, 1]},
        {"tile": [2.0, 3]},
        {"tile": [0, 3]},
        {"tile": [True, 3]},
        {"tile": [1000, 1]},
        {"blocking": [256, 256]},
        {"blocking": [64, 10**12, 60]},
        {"tile": [2, 3], "blocking": "big"},
    ],
)
def test_a_malformed_record_is_skipped(tmp_path: Path, monkeypatch, record) -> None:
    """A hand edit can cost speed, never a compile: what does not parse is left out."""
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    key, good = "direct f32,f32,f32 n.n 64x64x64 r0", "direct f64,f64,f64 n.n 8x8x8 r0"
    target = database.target_id(AVX2)
    text = json.dumps({"format": 1, "targets": {target: {key: record, good: {"tile": [1, 3]}}}})
    (tmp_path / "tuning.json").write_text(text)  # 1e400 is written as Infinity
    assert database.options_for(AVX2).gemms == ((good, GemmChoice((1, 3))),)
    with pytest.raises(ValueError):
        GemmChoice.from_json(record)


@pytest.mark.parametrize(
    ("tile", "blocking"),
    [((2.5, 3), None), ((3.0, 4.0), None), (("a", 1), None), ((1,), None), ((0, 3), None),
     ((True, 3), None), (5, None), (None, (32.0, 64.0, 8.0)), (None, (32, 64)),
     (None, (32, 10**9, 8)), (None, (0, 64, 8))],
)  # fmt: skip
def test_a_choice_given_through_the_api_is_checked_as_a_record_is(tile, blocking) -> None:
    """numpy integers went through as IR values (a KeyError deep in code generation), floats
    gave bare TypeErrors, a float blocking gave ill-typed IR and a huge one a MemoryError at
    launch: the constructor now refuses what `from_json` refuses."""
    with pytest.raises(ValueError, match=r"positive integers|too large"):
        GemmChoice(tile, blocking)


def test_a_choice_of_numpy_integers_compiles(rng) -> None:
    text = square(64)
    (site,) = gemm_sites(nanotc.load(text).function("k"), AVX2)
    choice = GemmChoice((np.int64(1), np.int32(3)))
    assert choice == GemmChoice((1, 3)) and type(choice.tile[0]) is int
    compiled = nanotc.compile(text, AVX2, options=CompileOptions.of({site.key: choice}))
    a, b = (np.asfortranarray(rng.standard_normal((64, 64), dtype=np.float32)) for _ in "ab")
    c = np.zeros((64, 64), np.float32, order="F")
    compiled["k"](a, b, c, group_size=1)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("targets", [[], "x", {"some-target": []}, {"some-target": "x"}])
def test_a_database_of_the_wrong_shape_reads_as_empty_and_is_rewritten(
    tmp_path: Path, monkeypatch, targets
) -> None:
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    (tmp_path / "tuning.json").write_text(json.dumps({"format": 1, "targets": targets}))
    assert database.options_for(AVX2).gemms == ()
    key = "direct f32,f32,f32 n.n 64x64x64 r0"
    database.record(AVX2, {key: {"tile": [2, 2]}})
    assert database.options_for(AVX2).get(key) == GemmChoice((2, 2))
    assert nanotc_cli("cache").returncode == 0


def test_a_database_nested_past_the_parser_reads_as_empty(tmp_path: Path, monkeypatch) -> None:
    """json's parser gives up on deep nesting with a RecursionError: the damaged file must
    not stop compiles (it once did, even with cache=False) or `nanotc cache`."""
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    (tmp_path / "tuning.json").write_text("[" * 100_000)
    assert database.options_for(AVX2).gemms == ()
    assert nanotc.compile(BATCHED, cache=False)["bgemm"] is not None
    result = nanotc_cli("cache")
    assert result.returncode == 0 and "Traceback" not in result.stderr


BATCHED = """func @bgemm(%A: memref<f32x16x16x?>, %B: memref<f32x16x16x?>, %C: memref<f32x16x16x?>) {
    %g = group_id
    %a = subview %A[:, :, %g] : memref<f32x16x16x?>
    %b = subview %B[:, :, %g] : memref<f32x16x16x?>
    %c = subview %C[:, :, %g] : memref<f32x16x16x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x16x16>, memref<f32x16x16>, f32, memref<f32x16x16>
}
"""


def batched_arguments(rng: np.random.Generator) -> list[np.ndarray]:
    return [np.asfortranarray(rng.uniform(-1, 1, (16, 16, 8)).astype(np.float32)) for _ in "ABC"]


def test_an_unwritable_database_is_reported_before_the_search(tmp_path, monkeypatch, rng) -> None:
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    (tmp_path / "tuning.json").mkdir()
    messages: list[str] = []
    with pytest.raises(OSError, match="the tuning database is not a regular file"):
        tune(BATCHED, "bgemm", batched_arguments(rng), 8, progress=messages.append)
    assert messages == []  # nothing was timed
    result = tune(BATCHED, "bgemm", batched_arguments(rng), 8, budget=0.2, tiles=1, repeats=1,
                  store=False, progress=messages.append)  # fmt: skip
    assert not result.stored


def test_tune_stores_a_winner_that_later_compiles_use(tmp_path, monkeypatch, rng) -> None:
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    args = batched_arguments(rng)
    originals = [a.copy() for a in args]
    messages: list[str] = []
    result = tune(
        BATCHED,
        "bgemm",
        args,
        8,
        num_threads=1,
        budget=10.0,  # two tiles end the search; a loaded machine must not end it first
        tiles=2,
        repeats=1,
        progress=messages.append,
    )
    assert all(np.array_equal(a, b) for a, b in zip(args, originals))  # inputs untouched
    assert result.stored and messages[-1].startswith("stored in")
    (site,) = result.sites
    stored = database.entries(get(None))[site.site.key]
    assert tuple(stored["tile"]) == site.best.tile
    later = nanotc.compile(BATCHED)
    assert later.options.gemms == ((site.site.key, site.best),)
    c = args[2].copy(order="F")
    later["bgemm"](*args[:2], c, group_size=8)
    want = np.einsum("ikg,kjg->ijg", args[0].astype(np.float64), args[1]) + args[2]
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


STRIDED_AND_SHIFTED = """func @k(%A: memref<f32x8x8,strided<1,10>>, %C: group<memref<f32x8x8>, offset: ?>) {
    %g = group_id
    %c = load %C[%g] : group<memref<f32x8x8>, offset: ?>
    gemm.n.n 1.0, %A, %A, 1.0, %c : f32, memref<f32x8x8,strided<1,10>>, memref<f32x8x8,strided<1,10>>, f32, memref<f32x8x8>
}"""


def test_tune_takes_what_a_launch_takes_and_leaves_it_untouched(rng) -> None:
    """A view whose static strides the kernel requires, and a group whose offset reaches
    past its members into the memory around them: tuning times copies with the same layout
    (it refused the first and wrote into the second's arrays)."""
    a = np.asfortranarray(rng.uniform(-1, 1, (10, 8)).astype(np.float32))[:8]
    block = np.zeros(2 * 64 + 2, np.float32)
    members = [block[g * 64 : (g + 1) * 64].reshape(8, 8, order="F") for g in range(2)]
    arguments = [a, Group(members, offset=2)]
    nanotc.compile(STRIDED_AND_SHIFTED)["k"](*arguments, group_size=2)
    launched = block.copy()
    block[:] = 0
    result = tune(STRIDED_AND_SHIFTED, "k", arguments, 2, budget=2.0, tiles=1, repeats=1,
                  store=False, progress=lambda _: None)  # fmt: skip
    assert result.sites and not block.any()
    assert np.allclose(launched[2:66].reshape(8, 8, order="F"), a @ a, atol=1e-5)


def test_reported_gain_compares_timings_taken_alike(monkeypatch, rng) -> None:
    """The search's first timings run slow (cold caches, clocks); when no candidate wins
    once confirmed, the report must not turn that into a gain."""
    timings = iter([2.0, 2.0])  # the warm-up and the first analytical timing

    def time(self, options: CompileOptions) -> float:
        return next(timings, 1.0)

    monkeypatch.setattr(tuner._Bench, "time", time)
    messages: list[str] = []
    result = tune(BATCHED, "bgemm", batched_arguments(rng), 8, budget=5.0, tiles=3,
                  store=False, progress=messages.append)  # fmt: skip
    assert all(r.best == r.site.analytical for r in result.sites)
    assert result.seconds == result.analytical_seconds == 1.0
    assert "1.00x the analytical choices" in messages[-1]


def test_tune_refuses_kernels_without_gemms(rng) -> None:
    text = "func @k(%x: memref<f32x4>) {\n}\n"
    with pytest.raises(TuneError, match="nothing to tune"):
        tune(text, "k", [np.zeros(4, dtype=np.float32)], 1, store=False, progress=lambda m: None)


def test_tune_command_shows_progress_and_stores(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "k.ir").write_text(BATCHED)
    common = [
        "tune",
        "k.ir",
        "--kernel",
        "bgemm",
        "--group-size",
        "4",
        "--size",
        "A.2=4",
        "--size",
        "B.2=4",
        "--size",
        "C.2=4",
        "--budget",
        "1",
        "--tiles",
        "1",
        "--repeat",
        "1",
        "--threads",
        "1",
    ]
    dry = nanotc_cli(*common, "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert "analytical choices:" in dry.stderr and "[1/1] direct f32,f32,f32" in dry.stderr
    assert not (tmp_path / "cache" / "tuning.json").exists()
    stored = nanotc_cli(*common, cwd=tmp_path)
    assert stored.returncode == 0, stored.stderr
    assert (
        "stored in" in stored.stderr and "direct f32,f32,f32 n.n 16x16x16 r0: tile" in stored.stdout
    )
    assert (tmp_path / "cache" / "tuning.json").exists()


def test_tune_command_errors_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "k.ir").write_text("func @k(%x: memref<f32x4>) {\n}\n")
    result = nanotc_cli("tune", "k.ir", "--kernel", "k", "--group-size", "1", cwd=tmp_path)
    assert result.returncode == 1 and "nothing to tune" in result.stderr
    assert "Traceback" not in result.stderr
    missing = nanotc_cli("tune", "k.ir", "--kernel", "nope", "--group-size", "1", cwd=tmp_path)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr


@pytest.mark.parametrize("budget", ["nan", "-1", "x"])
def test_tune_budget_must_be_seconds(tmp_path: Path, budget: str) -> None:
    """`--budget nan` searched without end (no clock passes NaN), `-1` acted as 0."""
    (tmp_path / "k.ir").write_text(square(64))
    result = nanotc_cli("tune", "k.ir", "--kernel", "k", "--group-size", "1",
                        "--budget", budget, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2 and "argument --budget: expected" in result.stderr


def test_ctrl_c_stops_tune_with_one_line(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C during the search printed a Python traceback; it is now one line and the
    shell's status for SIGINT, and the database is left as it was."""
    import os
    import signal
    import subprocess
    import sys

    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    (tmp_path / "k.ir").write_text(square(256))
    command = [sys.executable, "-m", "nanotc", "tune", "k.ir", "--kernel", "k",
               "--group-size", "1", "--budget", "60"]  # fmt: skip
    child = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    seen = [child.stderr.readline() for _ in range(4)]  # the search's first candidate
    assert "(analytical)" in seen[-1], seen
    os.kill(child.pid, signal.SIGINT)
    _, rest = child.communicate(timeout=60)
    stderr = "".join(seen) + rest
    assert child.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "nanotc tune: interrupted"
    assert "Traceback" not in stderr and not (tmp_path / "tuning.json").exists()


DYNAMIC_NT = """func @k(%A: memref<f32x?x?>, %B: memref<f32x?x?>, %C: memref<f32x?x?>) {
  gemm.n.t 1.0, %A, %B, 0.0, %C : f32, memref<f32x?x?>, memref<f32x?x?>, f32, memref<f32x?x?>
}"""


@pytest.mark.parametrize(
    ("mnk", "path"),
    [((400, 400, 300), "direct"), ((1000, 1000, 1000), "blocked"), ((8, 8, 8), "direct")],
)
def test_a_path_decided_at_run_time_is_tuned_as_the_launch_takes_it(mnk, path: str) -> None:
    """400x400x300's arrays exceed half of L2 (1 MiB), but A and B fit it: the run-time
    test takes the direct path, so blocked candidates timed code that never ran
    (a 1 x 1 blocked tile timed the same as the analytical choice) and a noise winner was
    stored for every size of the signature."""
    m, n, k = mnk
    arrays = [np.zeros(shape, np.float32, order="F") for shape in ((m, k), (n, k), (m, n))]
    sites = gemm_sites(nanotc.load(DYNAMIC_NT).function("k"), get("avx512"), arrays)
    assert [site.key.split()[0] for site in sites] == [path]


def test_a_budget_that_tries_no_candidate_stores_nothing(tmp_path: Path, monkeypatch, rng) -> None:
    """Budget 0 stored every site's analytical choice as "tuned", pinning today's model in the
    database for later compiles."""
    monkeypatch.setenv("NANOTC_CACHE_DIR", str(tmp_path))
    a, b, c = (np.asfortranarray(rng.standard_normal((64, 64), dtype=np.float32)) for _ in "abc")
    messages: list[str] = []
    result = tune(square(64), "k", [a, b, c], 1, budget=0, progress=messages.append)
    assert all(site.tried == 0 for site in result.sites) and not result.stored
    assert messages[-1] == "nothing stored: no candidate was tried"
    assert database.entries(get(None)) == {}
