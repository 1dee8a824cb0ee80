"""The benchmarks' quick mode runs in-process and yields validated, positive rates.

No speed is asserted. Peers other than numpy are used when installed and skipped otherwise
(CI has neither torch nor libxsmm); every implementation's result is checked against numpy
inside the benchmark before it is timed, so a wrong kernel fails these tests.
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from bench import (
    few_rows,
    harness,
    in_cache,
    launch,
    layouts,
    peak,
    w1_square,
    w2_batched,
    w3_resnet,
    w4_bf16,
    w5_blas,
)
from bench.harness import Row, Settings
from bench.peers import Peers, discover, memory
from nanotc import targets
from nanotc.codegen import asm
from nanotc.runtime import jit
from nanotc.runtime.aligned import LINE_BYTES

HAVE_TORCH = importlib.util.find_spec("torch") is not None

QUICK = replace(Settings(quick=True).quick_defaults(), repeats=1, budget=0.05)


@pytest.fixture(scope="module")
def peers() -> Peers:
    return discover()


def assert_rates(rows: list[Row]) -> None:
    assert rows
    for row in rows:
        assert math.isfinite(row.gflops(row.nanotc)) and row.gflops(row.nanotc) > 0
        assert "numpy" in row.peers
        for timing in row.peers.values():
            assert row.gflops(timing) > 0
        assert row.percent_peak is not None and row.percent_peak > 0
    table = harness.format_table(rows, harness.peer_order(rows))
    assert len(table.splitlines()) == len(rows) + 2


def test_w1_square(peers: Peers) -> None:
    rows = w1_square.run(QUICK, peers)
    assert_rates(rows)
    assert_peak_in_rounds(rows)
    assert {(r.dtype, r.threads) for r in rows} == {(d, t) for d in ("f32", "f64") for t in (1, 2)}


def test_w2_batched(peers: Peers) -> None:
    rows = w2_batched.run(QUICK, peers)
    assert_rates(rows)
    assert {r.variant for r in rows} == {"memory", "cache", "launch"}
    assert all(r.gbs(r.nanotc) for r in rows if r.variant == "memory")
    assert all(("stream" in r.peers) == (r.variant == "memory") for r in rows)  # gcc builds it
    launch = [r for r in rows if r.variant == "launch"]
    assert {r.shape.split()[1] for r in launch} == {"b8"}  # the quick launch batch


def test_w2_times_nanotc_on_aligned_copies_when_asked(
    monkeypatch: pytest.MonkeyPatch, peers: Peers
) -> None:
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    rows = w2_batched.run(settings, peers, [(56, 9, 9)], ["cache", "memory"], aligned_copy=True)
    assert all(r.gflops(r.peers["nanotc-aligned"]) > 0 for r in rows)
    right = w2_batched.Case.nanotc_call

    def on_the_originals(case: w2_batched.Case, arrays: tuple) -> object:
        return right(case, (case.a, case.b, case.c))

    # the copies left untouched: the aligned contender's own check must catch it
    monkeypatch.setattr(w2_batched.Case, "nanotc_call", on_the_originals)
    with pytest.raises(harness.ValidationError, match="nanotc-aligned"):
        w2_batched.run(settings, peers, [(56, 9, 9)], ["cache"], aligned_copy=True)


@pytest.mark.parametrize("shape", [(16, 16, 16), (56, 9, 9), (3, 5, 7)])
@pytest.mark.parametrize("threads", [1, 3])
def test_the_stream_moves_every_byte_and_changes_none(shape: tuple[int, int, int],
                                                      threads: int) -> None:  # fmt: skip
    """W2's stream reference reads A and B and writes C back as it was, members of any byte
    size (here not multiples of a 64-byte vector), sliced over any thread count."""
    driver = memory.load()
    assert not isinstance(driver, str), driver
    m, n, k = shape
    rng = np.random.default_rng(1)
    a, b, c = (
        np.asfortranarray(rng.uniform(-1, 1, (r, s, 37))) for r, s in ((m, k), (k, n), (m, n))
    )
    before = c.copy(order="F")
    assert driver.stream(a, b, c, 3, threads) > 0
    assert np.array_equal(c, before)


def test_the_stream_refuses_batches_it_would_misread() -> None:
    driver = memory.load()
    assert not isinstance(driver, str), driver
    a = np.asfortranarray(np.zeros((4, 4, 8)))
    with pytest.raises(ValueError, match="Fortran-ordered batches of one size"):
        driver.stream(a, a, np.zeros((4, 4, 8)), 1, 1)  # C ordered
    with pytest.raises(ValueError, match="Fortran-ordered batches of one size"):
        driver.stream(a, a, np.asfortranarray(np.zeros((4, 4, 9))), 1, 1)


def test_a_stream_that_changed_c_is_refused() -> None:
    rng = np.random.default_rng(2)
    a, b, c = (np.asfortranarray(rng.uniform(-1, 1, (4, 4, 6))) for _ in range(3))
    check = w2_batched.BatchCheck(a, b, c, rng)
    check.unchanged("stream")
    c[1, 2, 3] += 1
    with pytest.raises(harness.ValidationError, match="stream: C changed"):
        check.unchanged("stream")


def assert_peak_in_rounds(rows: list[Row]) -> None:
    """The rows' peaks were timed beside their kernels, and the peak loop is not a peer."""
    for row in rows:
        assert row.peak_in_rounds and row.peak is not None and row.peak > 0
        assert peak.CONTENDER not in row.peers


@pytest.mark.parametrize("name", ["avx512", "avx2", "host"])
def test_peak_loops_keep_their_chains_in_registers(name: str) -> None:
    """The peak loop is the core's arithmetic peak only if none of its accumulators spills:
    with AVX-512's 24 chains on AVX2's 16 registers it ran at 28-75% of the peak."""
    target = targets.get(name)
    for loop in peak.peak_loops(target):
        module = jit.optimize(peak.peak_module(loop, peak.chains_for(target)), target)
        mnemonic = "vdpbf16ps" if loop.name == "bf16" else "vfmadd"
        hot = asm.hot_loops(jit.assembly(module, target), "peak", mnemonic)
        assert len(hot) == 1 and hot[0].count(mnemonic) == peak.chains_for(target), loop.name
        assert hot[0].stack_accesses() == [], loop.name


def test_in_cache_times_the_peak_loop_beside_the_kernels(
    peers: Peers, monkeypatch: pytest.MonkeyPatch
) -> None:
    placements = []
    row = in_cache._row

    def placed_row(case: w2_batched.Case, peers: Peers, offset: int) -> Row:
        placements.append({x.ctypes.data % LINE_BYTES for x in (case.a, case.b, case.c)})
        return row(case, peers, offset)

    monkeypatch.setattr(in_cache, "_row", placed_row)
    rows = in_cache.run(QUICK, peers, shapes=((32, 32, 64),))
    assert_rates(rows)
    assert [(r.workload, r.dtype, r.shape) for r in rows] == [
        (workload, dtype, "32x32x64")
        for dtype in ("f32", "f64")
        for workload in ("in-cache", "in-cache+16")
    ]
    assert placements == [{0}, {16}, {0}, {16}]  # A, B and C on a line, then 16 bytes past
    assert_peak_in_rounds(rows)


def test_w3_resnet(peers: Peers) -> None:
    rows = w3_resnet.run(replace(QUICK, threads=(1,), dtypes=("f32",)), peers)
    assert_rates(rows)
    assert_peak_in_rounds(rows)
    assert [r.variant for r in rows[-2:]] == ["all", "resnet50"]
    layers = rows[:-2]
    total = sum(r.nanotc.seconds for r in layers)
    assert rows[-2].nanotc.seconds == pytest.approx(total)
    # the total's percent of peak: all the work over what the peak loop does in that time
    peak_work = sum(r.nanotc.seconds * r.peak for r in layers)
    assert rows[-2].percent_peak == pytest.approx(
        100 * sum(r.flops for r in layers) / peak_work / 1e9
    )
    # the total's ratio: each shape's paired ratio weighted by nanotc's time in it
    for peer in rows[-2].peers:
        paired = sum(r.nanotc.seconds * r.ratio(peer) for r in layers)
        assert rows[-2].ratio(peer) == pytest.approx(paired / total)


def test_table_i_is_the_papers() -> None:
    assert len(w3_resnet.TABLE_I) == 20
    assert sum(x.count for x in w3_resnet.TABLE_I) == 53
    assert (w3_resnet.TABLE_I[0].m, w3_resnet.TABLE_I[0].n, w3_resnet.TABLE_I[0].k) == (
        12544,
        64,
        147,
    )


def test_wrong_results_are_refused() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (16, 8)), rng.uniform(-1, 1, (8, 4))
    expected, bound = a @ b, np.abs(a) @ np.abs(b)
    got = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)
    harness.check_gemm("right", got, expected, bound, 8, np.float32)
    for wrong in (got + 1e-3 * (np.arange(got.size).reshape(got.shape) == 5), got * np.nan):
        with pytest.raises(harness.ValidationError):
            harness.check_gemm("wrong", wrong, expected, bound, 8, np.float32)


def test_csv(tmp_path, peers: Peers) -> None:  # type: ignore[no-untyped-def]
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    rows = w1_square.run(settings, peers, sizes=(32,), nb=8)
    path = harness.write_csv(rows, "test", tmp_path)
    header, line = path.read_text().splitlines()[:2]
    assert header.startswith("workload,variant,shape,dtype,threads")
    assert line.startswith("w1,,32x32x32,f32,1")


def test_a_wrong_kernel_stops_the_benchmark(monkeypatch: pytest.MonkeyPatch, peers: Peers) -> None:
    """beta = 0 instead of 1 in W2's kernel: the validation sweep must catch it."""
    right = w2_batched.kernels.batched

    def wrong(dtype: str, m: int, n: int, k: int) -> str:
        return right(dtype, m, n, k).replace("1.0, %c", "0.0, %c")

    monkeypatch.setattr(w2_batched.kernels, "batched", wrong)
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    with pytest.raises(harness.ValidationError, match="nanotc"):
        w2_batched.run(settings, peers, shapes=[(8, 8, 8)], variants=["memory"])


def test_w4_bf16(peers: Peers) -> None:
    """bf16 against nanotc's own f32 kernel (always) and bf16 peers where installed."""
    rows = w4_bf16.run(QUICK, peers)
    assert {r.variant for r in rows} == set(w4_bf16.PARTS)
    for row in rows:
        assert row.dtype == "bf16" and row.gflops(row.nanotc) > 0
        assert "f32" in row.peers and all(row.gflops(t) > 0 for t in row.peers.values())
    amx_peak = harness.measured_peaks().get("amx-bf16")  # timed once, at the start
    timed_once = [row for row in rows if amx_peak and row.peak == amx_peak * row.threads]
    assert bool(timed_once) == targets.host().amx  # the MLP's gemms take AMX tiles there
    assert all(not row.peak_in_rounds for row in timed_once)
    assert_peak_in_rounds([row for row in rows if row not in timed_once])  # vdpbf16ps or FMAs


def test_a_wrong_bf16_kernel_stops_the_memory_part(
    monkeypatch: pytest.MonkeyPatch, peers: Peers
) -> None:
    """alpha 2 in the bf16 kernel of W4's memory part: its validation sweep (from zeros, as
    the f32 kernel's after it) must catch it."""
    right = w4_bf16.kernels.batched

    def wrong(dtype: str, m: int, n: int, k: int, inputs: str | None = None) -> str:
        text = right(dtype, m, n, k, inputs)
        return text.replace("gemm.n.n 1.0", "gemm.n.n 2.0") if inputs else text

    monkeypatch.setattr(w4_bf16.kernels, "batched", wrong)
    settings = replace(QUICK, threads=(1,))
    with pytest.raises(harness.ValidationError, match="nanotc"):
        w4_bf16.run(settings, peers, parts=["memory"])


def test_a_wrong_bf16_output_stops_the_mlp_bf16c_part(
    monkeypatch: pytest.MonkeyPatch, peers: Peers
) -> None:
    """alpha 2 in the kernel into bf16 C: its check (bf16 tolerance) must catch it, while the
    f32 kernel beside it, which writes its own C, stays right."""
    right = w4_bf16.kernels.column_blocks

    def wrong(dtype: str, nb: int, beta: float = 0.0, inputs: str | None = None) -> str:
        text = right(dtype, nb, beta, inputs)
        return text.replace("gemm.n.n 1.0", "gemm.n.n 2.0") if dtype == "bf16" else text

    monkeypatch.setattr(w4_bf16.kernels, "column_blocks", wrong)
    settings = replace(QUICK, threads=(1,))
    with pytest.raises(harness.ValidationError, match="nanotc"):
        w4_bf16.run(settings, peers, parts=["mlp-bf16c"])
    assert w4_bf16.run(settings, peers, parts=["mlp"])  # the f32-output kernels are untouched


class LibxsmmWithoutBf16:
    """libxsmm as on a CPU below AVX-512 (its JIT target `hsw`): no bf16 kernel to dispatch,
    and any call of one is a failure of the benchmark."""

    def bf16_brgemm_missing(self, m: int, n: int, k: int) -> str:
        return "libxsmm dispatched no kernel for bf16 (JIT target hsw)"

    def bf16_brgemm(self, *args: object, **kwargs: object) -> float:
        raise AssertionError("called a kernel libxsmm does not have")


def test_w4_brgemm_notes_a_libxsmm_without_bf16_kernels() -> None:
    """The batch-reduce rows go on without the peer and say why (a Zen 3 stopped W4)."""
    settings = replace(QUICK, threads=(1,))
    rows = w4_bf16.run(settings, Peers(libxsmm=LibxsmmWithoutBf16()), ("brgemm",))
    assert rows and all("libxsmm" not in r.peers and "f32" in r.peers for r in rows)
    assert all(r.note == "libxsmm: libxsmm dispatched no kernel for bf16 (JIT target hsw)"
               for r in rows)  # fmt: skip


def test_w4_batched_shapes_and_batch_size(peers: Peers) -> None:
    """--shapes and --cache-kb pick the batched part's shapes and its batch: 16 KB of
    56x9x9 members (3186 bytes each, an even count) is 4 of them."""
    settings = replace(QUICK, threads=(1,))
    batches = w4_bf16.Batches(shapes=((56, 9, 9), (8, 8, 8)), cache_bytes=16_000)
    rows = w4_bf16.run(settings, peers, ("batched",), batches)
    assert [r.shape for r in rows] == ["56x9x9 b4", "8x8x8 b30"]
    assert all(r.gflops(r.nanotc) > 0 and "f32" in r.peers for r in rows)


def test_w4_command_line_reaches_the_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The options arrive in `run` as parsed: the parts and the batched part's Batches."""
    seen: dict[str, object] = {}

    def fake_run(settings: Settings, peers: Peers, parts: tuple[str, ...],
                 batches: w4_bf16.Batches) -> list[Row]:  # fmt: skip
        seen.update(parts=parts, batches=batches)
        return []

    monkeypatch.setattr(w4_bf16, "run", fake_run)
    monkeypatch.setattr(harness, "preamble", lambda settings: None)
    monkeypatch.setattr(harness, "report", lambda *args, spread: seen.update(spread=spread))
    w4_bf16.main(["--quick", "--parts", "batched", "--shapes", "20x9x20", "--cache-kb", "16",
                  "--no-csv", "--peers", "numpy"])  # fmt: skip
    assert seen == {"parts": ("batched",), "spread": False,
                    "batches": w4_bf16.Batches(((20, 9, 20),), 16_000)}  # fmt: skip
    w4_bf16.main(["--quick", "--parts", "batched", "--inputs", "f16", "--no-csv"])
    assert seen["batches"] == w4_bf16.Batches(inputs="f16")
    w4_bf16.main(["--quick", "--parts", "batched", "--offset", "16", "--no-csv"])
    assert seen["batches"] == w4_bf16.Batches(offset=16)
    w4_bf16.main(["--quick", "--parts", "batched", "--no-csv", "--spread"])
    assert seen["spread"] is True


@pytest.mark.parametrize("offset", [0, 16, 48])
def test_placed_copies_start_where_asked(offset: int) -> None:
    array = np.asfortranarray(np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5))
    copy = harness.placed(array, offset)
    assert copy.ctypes.data % harness.LINE_BYTES == offset
    assert copy.flags.f_contiguous and copy.dtype == array.dtype
    np.testing.assert_array_equal(copy, array)


@pytest.mark.parametrize("offset", [-4, 64, 6])
def test_placed_refuses_offsets_outside_a_line_or_between_elements(offset: int) -> None:
    with pytest.raises(ValueError, match=f"multiple of 4 below 64, got {offset}"):
        harness.placed(np.zeros(4, np.float32), offset)


def test_w4_batched_operands_start_at_the_offset(
    monkeypatch: pytest.MonkeyPatch, peers: Peers
) -> None:
    """Every operand the batched part's kernels get, bf16 and f32, starts `offset` bytes past
    a line: the two kernels compared are placed alike."""
    seen: list[int] = []
    compiled = w4_bf16.kernels.compiled

    def recording(source: str) -> w4_bf16.kernels.Kernel:
        kernel = compiled(source)

        def call(*args: object, **launch: int) -> None:
            seen.extend(a.ctypes.data % 64 for a in args if isinstance(a, np.ndarray))
            kernel(*args, **launch)

        return call

    monkeypatch.setattr(w4_bf16.kernels, "compiled", recording)
    settings = replace(QUICK, threads=(1,))
    batches = w4_bf16.Batches(shapes=((8, 8, 8),), cache_bytes=16_000, offset=48)
    (row,) = w4_bf16.run(settings, Peers(), ("batched",), batches)
    assert row.gflops(row.nanotc) > 0 and "f32" in row.peers
    assert len(seen) >= 6 and set(seen) == {48}


def test_w4_offset_option_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("2", "64", "x"):
        with pytest.raises(SystemExit):
            w4_bf16.main(["--quick", "--parts", "batched", "--offset", bad, "--no-csv"])
        assert f"expected a multiple of 4 below 64, got {bad!r}" in capsys.readouterr().err


def test_w4_batched_f16_inputs(peers: Peers) -> None:
    """--inputs f16: the batched part's members are f16 (the kernel's A and B too), checked
    and compared with nanotc's f32 kernel; torch's bf16 peer sits out."""
    settings = replace(QUICK, threads=(1,))
    batches = w4_bf16.Batches(shapes=((20, 9, 20),), cache_bytes=16_000, inputs="f16")
    (row,) = w4_bf16.run(settings, peers, ("batched",), batches)
    assert row.dtype == "f16" and row.gflops(row.nanotc) > 0
    assert set(row.peers) == {"f32"}


def test_w5_against_copy_bandwidth(peers: Peers) -> None:
    """Every instruction validated and timed on both variants; copy first, whose memcpy rate
    is every row's reference; peers' columns are in GB/s."""
    settings = replace(QUICK, threads=(1, 2), dtypes=("f64",))
    rows = w5_blas.run(settings, peers, ops=w5_blas.OPS)
    assert {(r.variant, r.shape.split()[0], r.threads) for r in rows} == {
        (v, op, t) for v in w5_blas.VARIANTS for op in w5_blas.OPS for t in (1, 2)
    }
    for row in rows:
        assert row.gbs(row.nanotc) > 0 and "numpy" in row.peers
        assert row.reference_gbs is not None and row.percent_copy > 0  # gcc builds memcpy
    copies = [r for r in rows if r.shape.startswith("copy")]
    assert all(r.reference_gbs == pytest.approx(r.gbs(r.peers["memcpy"])) for r in copies)
    assert all("openblas" in r.peers for r in rows if r.shape.split()[0] in w5_blas.CBLAS_OPS)
    table = harness.format_table(rows, harness.peer_order(rows))
    assert "% copy" in table.splitlines()[0] and "numpy GB/s" in table.splitlines()[0]


@pytest.mark.parametrize("op", ["axpby", "gemv.n", "sum"])
def test_w5_refuses_a_wrong_kernel(op: str, monkeypatch: pytest.MonkeyPatch, peers: Peers) -> None:
    right = w5_blas.kernels.sliced

    def wrong(name: str, dtype: str) -> str:  # alpha 1.25 instead of 1 or 1.5
        text = right(name, dtype)
        return (
            text.replace("1.0, %", "1.25, %").replace("1.5, %", "1.25, %") if name == op else text
        )

    monkeypatch.setattr(w5_blas.kernels, "sliced", wrong)
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    with pytest.raises(harness.ValidationError, match=f"nanotc {op}"):
        w5_blas.run(settings, peers, ops=[op], variants=["cache"])


def test_w5_places_operands_past_a_line(peers: Peers) -> None:
    """`--line-offset`: every operand starts that many bytes past a cache line, and the rows
    are still validated."""
    rng = np.random.default_rng(0)
    data = w5_blas.operands("gemv.t", "f32", 1 << 16, 2, rng, line_offset=16)
    assert all(a.ctypes.data % 64 == 16 for a in data.args.values())
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    rows = w5_blas.run(settings, peers, ops=["sum"], variants=["cache"], line_offset=16)
    assert [r.shape.split()[0] for r in rows] == ["copy", "sum"]


def test_layouts_validates_every_case() -> None:
    """Every case of row-major and transposed operands validated against float64 and timed
    beside numpy on the same arrays."""
    settings = replace(QUICK, threads=(1,), dtypes=("f32", "f64"))
    names = [*layouts.CASES, *layouts.BATCHES]
    rows = layouts.run(settings, names)
    assert [(r.shape.rsplit(" ", 1)[0], r.dtype) for r in rows] == [
        (name, dtype) for dtype in ("f32", "f64") for name in names
    ]
    for row, name in zip(rows, names * 2):
        assert row.gflops(row.nanotc) >= 0 and "numpy" in row.peers
        single = layouts.CASES.get(name)
        assert (row.bytes is None) == (single is None or single.gemm)


def test_layouts_refuses_an_unknown_case_as_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        layouts.main(["--quick", "--no-csv", "--cases", "gemm-rrr,batched-rrr"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --cases: unknown case 'batched-rrr' (choose from gemm-rrr," in err


@pytest.mark.parametrize(
    ("text", "case"), [("kernel_text", "sum.n-r"), ("batched_text", "batched-rrr 16x16x16")]
)
def test_layouts_refuses_a_wrong_kernel(text: str, case: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    right = getattr(layouts, text)
    monkeypatch.setattr(layouts, text, lambda *a: right(*a).replace(" 1.0, %", " 1.25, %"))
    settings = replace(QUICK, threads=(1,), dtypes=("f32",))
    with pytest.raises(harness.ValidationError, match=f"nanotc {re.escape(case)}"):
        layouts.run(settings, [case])


def test_launch_times_every_way_after_checking_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert launch.main(["--calls", "3", "--runs", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if re.match(r"\| \d+\^3", line)]
    assert len(rows) == len(launch.CASES)
    for row in rows:
        chunks, *microseconds = (float(x) for x in row.strip("|").split("|")[2:])
        assert chunks >= 1 and all(t > 0 for t in microseconds)
    scalars = [line.split("|") for line in out if re.match(r"\| b?f\d+ \|", line)]
    assert [row[1].strip() for row in scalars] == list(launch.SCALAR_TYPES)
    assert all(float(x) > 0 for row in scalars for x in row[2:-1])
    assert all(len(row) == len(launch.SCALAR_KINDS) + 3 for row in scalars)


def test_launch_refuses_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """beta = 0 instead of 1: C's values before the launch must count."""
    right = launch.kernels.batched
    monkeypatch.setattr(launch.kernels, "batched",
                        lambda *shape: right(*shape).replace("1.0, %c", "0.0, %c"))  # fmt: skip
    with pytest.raises(harness.ValidationError, match="call: wrong result"):
        launch.measure(launch.CASES[0], calls=1, runs=1)


def test_launch_refuses_a_wrong_axpby(monkeypatch: pytest.MonkeyPatch) -> None:
    compile_ = launch.kernels.compiled
    monkeypatch.setattr(launch.kernels, "compiled",
                        lambda source: compile_(source.replace("1.0, %y", "0.0, %y")))  # fmt: skip
    with pytest.raises(harness.ValidationError, match="bf16 axpby, a Python float: wrong result"):
        launch.scalar_launches("bf16")


def test_few_rows_times_every_case_after_checking_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert few_rows.main(["--calls", "1", "--runs", "1"]) == 0
    rows = [line.split("|") for line in capsys.readouterr().out.splitlines()
            if re.match(r"\| \d* ?x? ?(gemm|gemv|ger)", line)]  # fmt: skip
    assert len(rows) == len(few_rows.cases(np.random.default_rng(0), with_torch=HAVE_TORCH))
    assert all(float(row[2]) > 0 and float(row[4]) > 0 for row in rows)


def test_few_rows_refuses_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    compile_ = few_rows.kernels.compiled
    monkeypatch.setattr(few_rows.kernels, "compiled",
                        lambda source: compile_(source.replace("gemm.t.n 1.0", "gemm.t.n 2.0")))  # fmt: skip
    with pytest.raises(harness.ValidationError, match=r"gemm.t.n 1x1x5000: wrong result"):
        few_rows.cases(np.random.default_rng(0), with_torch=False)
