"""Control flow natively against the reference evaluator: for (literal and run-time bounds and
steps, every loop type, ranges at the ends of the type, non-positive run-time steps), foreach,
if with and without else and with results, nesting, collective instructions inside loops and
branches, group_id / group_size, and launches split over threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from .helpers import DTYPES, TARGETS, check, fill_garbage, random_array

LOOP_TYPES = ("i8", "i16", "i32", "i64", "index")

LOOP_LOG = """func @k(%start: {ty}, %stop: {ty}, %step: {ty}, %log: memref<{ty}x?>,
                     %count: memref<index>) {{
    %zero = cast 0 : index -> index
    store %zero, %count[] : memref<index>
    for %i = {start}, {stop}{step} : {ty} {{
        %c = load %count[] : memref<index>
        store %i, %log[%c] : memref<{ty}x?>
        %d = arith.add %c, 1 : index
        store %d, %count[] : memref<index>
    }}
}}"""


def loop_log(ty: str, literal: bool, start: int, stop: int, step: int | None) -> str:
    if literal:
        step_text = "" if step is None else f", {step}"
        return LOOP_LOG.format(ty=ty, start=start, stop=stop, step=step_text)
    return LOOP_LOG.format(ty=ty, start="%start", stop="%stop", step=", %step")


def expected_log(start: int, stop: int, step: int) -> list[int]:
    return list(range(start, stop, step)) if step > 0 else []


RANGES = [(0, 10, 1), (3, 17, 4), (-5, 5, 3), (7, 7, 1), (9, 2, 1), (-20, -3, 7), (0, 1, 100)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("literal", [True, False], ids=["literal", "runtime"])
@pytest.mark.parametrize("ty", LOOP_TYPES)
def test_for_ranges(ty: str, literal: bool, target: str) -> None:
    for start, stop, step in RANGES:
        text = loop_log(ty, literal, start, stop, None if step == 1 and literal else step)
        log = fill_garbage(np.zeros(16, DTYPES[ty]))
        count = np.zeros((), np.int64)
        check(text, [start, stop, step, log, count], target=target)
        want = expected_log(start, stop, step)
        assert int(count) == len(want)
        assert list(log[: len(want)]) == want


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", LOOP_TYPES)
def test_for_with_non_positive_runtime_step_runs_no_iteration(ty: str, target: str) -> None:
    text = loop_log(ty, False, 0, 0, 0)
    for start, stop, step in [(0, 4, 0), (-3, 4, -2), (5, 1, -1)]:
        log, count = fill_garbage(np.zeros(16, DTYPES[ty])), np.zeros((), np.int64)
        check(text, [start, stop, step, log, count], target=target)
        assert int(count) == 0


def near_the_end(ty: str) -> list[tuple[int, int, int]]:
    bits = 64 if ty == "index" else int(ty[1:])
    top, bottom = 2 ** (bits - 1) - 1, -(2 ** (bits - 1)) + 1  # i64 MIN is no literal
    return [
        (top - 10, top, 4),  # top - 10, top - 6, top - 2; one more step passes the end
        (top - 3, top, 1),
        (bottom, bottom + 9, 3),
        (top - 2, top, 2 ** (bits - 2)),
    ]


LOOP_END_SCRIPT = """
import numpy as np, sys
sys.path.insert(0, {tests!r})
from jit.helpers import check
from jit.test_control_flow import loop_log, expected_log
ty, target, literal = {ty!r}, {target!r}, {literal!r}
for start, stop, step in {cases!r}:
    text = loop_log(ty, literal, start, stop, step)
    log, count = np.zeros(16, {dtype!r}), np.zeros((), np.int64)
    check(text, [start, stop, step, log, count], target=target)
    want = expected_log(start, stop, step)
    assert int(count) == len(want), (start, stop, step, int(count))
    assert [int(x) for x in log[: len(want)]] == want
print("ok")
"""


@pytest.mark.parametrize("literal", [True, False], ids=["literal", "runtime"])
@pytest.mark.parametrize("ty", LOOP_TYPES)
def test_for_near_the_end_of_its_type_does_not_wrap(ty: str, literal: bool) -> None:
    """The loop variable never wraps: a step that would carry it past the largest value of
    the loop type ends the loop (the reference's decision). Run in a child process: a loop
    that wraps never ends."""
    import os

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = LOOP_END_SCRIPT.format(
        tests=tests,
        ty=ty,
        target="host",
        literal=literal,
        cases=near_the_end(ty),
        dtype=DTYPES[ty].name,
    )
    try:
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"a {ty} loop ending near the type's maximum never terminated")
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", LOOP_TYPES)
def test_foreach_and_nested_loops(ty: str, target: str, rng) -> None:
    """out[i, j] = i * 10 + j over a foreach nest with run-time and literal bounds (including
    empty and negative ranges) and a for nested inside."""
    text = f"""func @k(%lo: {ty}, %hi: {ty}, %out: memref<i64x?x?>) {{
        foreach %i = %lo, %hi : {ty} {{
            for %j = 0, 4, 3 : {ty} {{
                %a = cast %i : {ty} -> i64
                %b = cast %j : {ty} -> i64
                %a10 = arith.mul %a, 10 : i64
                %v = arith.add %a10, %b : i64
                %ii = cast %i : {ty} -> index
                %jj = cast %j : {ty} -> index
                %r = arith.sub %ii, -3 : index
                store %v, %out[%r, %jj] : memref<i64x?x?>
            }}
        }}
        foreach %e = 5, 2 : {ty} {{
            %ee = cast %e : {ty} -> i64
            store %ee, %out[0, 0] : memref<i64x?x?>
        }}
    }}"""
    for lo, hi in [(-3, 9), (2, 3), (4, 4), (6, -1)]:
        out = np.full((12, 4), -1, np.int64, order="F")
        check(text, [lo, hi, out], target=target)
        for i in range(lo, hi):
            assert out[i + 3, 0] == i * 10 and out[i + 3, 3] == i * 10 + 3


IF_TEXT = """func @k(%x: memref<{ty}x?>, %out: memref<{ty}x?>, %flags: memref<i32x?>,
                   %sel: memref<f64x?>) {{
    %n = size %x[0] : memref<{ty}x?>
    foreach %i = 0, %n {{
        %v = load %x[%i] : memref<{ty}x?>
        %pos = cmp.gt %v, {zero} : {ty}
        %r, %f = if %pos -> ({ty}, i32) {{
            %d = arith.add %v, %v : {ty}
            yield %d, 1 : {ty}, i32
        }} else {{
            %big = cmp.lt %v, {minus_ten} : {ty}
            %w, %g = if %big -> ({ty}, i32) {{
                yield {minus_ten}, 2 : {ty}, i32
            }} else {{
                %m = arith.neg %v : {ty}
                yield %m, %v32 : {ty}, i32
            }}
            yield %w, %g : {ty}, i32
        }}
        store %r, %out[%i] : memref<{ty}x?>
        store %f, %flags[%i] : memref<i32x?>
        %odd = arith.rem %i, 2 : index
        %is_odd = cmp.eq %odd, 1 : index
        if %is_odd {{
            %s = cast %v : {ty} -> f64
            store %s, %sel[%i] : memref<f64x?>
        }}
        if false {{
            store 0, %flags[%i] : memref<i32x?>
        }}
    }}
}}"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ty", ["i8", "i32", "i64", "f32", "f64"])
def test_if_with_results_nesting_and_no_else(ty: str, target: str, rng) -> None:
    is_float = ty.startswith("f")
    text = IF_TEXT.format(
        ty=ty, zero="0.0" if is_float else "0", minus_ten="-10.0" if is_float else "-10"
    )
    # %v32 is the value as i32: insert the cast in the inner else branch
    text = text.replace(
        "                yield %m, %v32",
        f"                %v32 = cast %v : {ty} -> i32\n                yield %m, %v32",
    )
    text = text.replace("store 0, %flags[%i]", "%z = cast 0 : i32 -> i32\nstore %z, %flags[%i]")
    x = random_array(rng, (61,), ty) * (30 if is_float else 1)
    if not is_float:
        x = (x % 40 - 20).astype(DTYPES[ty])
    x[:3] = [0, -10, -11]
    out, flags = fill_garbage(np.zeros_like(x)), fill_garbage(np.zeros(61, np.int32))
    sel = fill_garbage(np.zeros(61))
    check(text, [x, out, flags, sel], target=target)
    v = x.astype(np.float64)
    want = np.where(v > 0, 2 * v, np.where(v < -10, -10, -v))
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=1e-6)
    assert (flags[v > 0] == 1).all() and (flags[v < -10] == 2).all()
    np.testing.assert_array_equal(sel[1::2], v[1::2])
    assert np.isnan(sel[::2]).all()


@pytest.mark.parametrize("target", TARGETS)
def test_if_results_of_every_scalar_type_and_literal_conditions(target: str) -> None:
    types = ["i1", "i8", "i16", "i32", "i64", "index", "f16", "f32", "f64"]
    values = {
        "i1": "true",
        "i8": "-7",
        "i16": "300",
        "i32": "-70000",
        "i64": "5000000000",
        "index": "-2",
        "f16": "0.5",
        "f32": "1.25",
        "f64": "-2.5e100",
    }
    params = ", ".join(f"%o{k}: memref<{t}x2>" for k, t in enumerate(types))
    names = ", ".join(f"%r{k}" for k in range(len(types)))
    other = {"i1": "false", "f16": "2.0", "f32": "3.0", "f64": "4.0"}
    lines = [f"func @k(%c: i1, {params}) {{"]
    for arm, cond in enumerate(["%c", "true"]):
        lines.append(f"{names.replace('%r', f'%a{arm}_')} = if {cond} -> ({', '.join(types)}) {{")
        lines.append(f"yield {', '.join(values[t] for t in types)} : {', '.join(types)}")
        lines.append("} else {")
        lines.append(f"yield {', '.join(other.get(t, '1') for t in types)} : {', '.join(types)}")
        lines.append("}")
        lines += [f"store %a{arm}_{k}, %o{k}[{arm}] : memref<{t}x2>" for k, t in enumerate(types)]
    lines.append("}")
    text = "\n".join(lines)
    for c in (True, False):
        outs = [np.zeros(2, DTYPES[t]) for t in types]
        check(text, [c, *outs], target=target)
        assert outs[3][1] == -70000 and outs[3][0] == (-70000 if c else 1)


# -- collective instructions inside control flow ---------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_collectives_in_loops_and_branches(target: str, rng) -> None:
    """A batch-reduce gemm in a for loop (accumulating into C), an axpby in one branch, a
    gemv in a loop with a run-time trip count, a sum of a subview chosen by the loop
    variable."""
    text = """func @k(%a: memref<f64x13x5x?>, %b: memref<f64x5x7x?>, %c: memref<f64x13x7>,
                      %x: memref<f64x7>, %y: memref<f64x13>, %n: index, %s: memref<f64x?>) {
        %batches = size %a[2] : memref<f64x13x5x?>
        for %k = 0, %batches {
            %ak = subview %a[:, :, %k] : memref<f64x13x5x?>
            %bk = subview %b[:, :, %k] : memref<f64x5x7x?>
            gemm.n.n 1.0, %ak, %bk, 1.0, %c
                : f64, memref<f64x13x5>, memref<f64x5x7>, f64, memref<f64x13x7>
        }
        %gid = group_id
        %even = arith.and %gid, 1 : index
        %is_even = cmp.eq %even, 0 : index
        if %is_even {
            axpby.n 0.5, %y, 2.0, %y : f64, memref<f64x13>, f64, memref<f64x13>
        } else {
            for %r = 0, %n {
                gemv.n 1.0, %c, %x, 1.0, %y
                    : f64, memref<f64x13x7>, memref<f64x7>, f64, memref<f64x13>
            }
        }
        for %j = 1, 7, 2 {
            %col = subview %c[:, %j] : memref<f64x13x7>
            %sj = subview %s[%j:1] : memref<f64x?>
            %sj0 = subview %sj[0] : memref<f64x1>
            sum.n 1.0, %col, 1.0, %sj0 : f64, memref<f64x13,strided<1>>, f64, memref<f64>
        }
    }"""
    text = text.replace("memref<f64x13,strided<1>>", "memref<f64x13>")
    a, b = random_array(rng, (13, 5, 4), "f64"), random_array(rng, (5, 7, 4), "f64")
    c, x, y = random_array(rng, (13, 7), "f64"), random_array(rng, (7,), "f64"), np.zeros(13)
    s = np.zeros(8)
    check(text, [a, b, c, x, y, 3, s], group_size=2, target=target, depth=64)


@pytest.mark.parametrize("target", TARGETS)
def test_group_id_and_group_size_split_over_threads(target: str) -> None:
    """Each work-group writes its id and the group size: with 1, 2 and 3 threads (more than
    the cores) every group runs exactly once."""
    text = """func @k(%ids: memref<index x ?>, %sizes: memref<index x ?>, %hits: memref<i32x?>) {
        %i = group_id
        %n = group_size
        store %i, %ids[%i] : memref<indexx?>
        store %n, %sizes[%i] : memref<indexx?>
        %h = load %hits[%i] : memref<i32x?>
        %h1 = arith.add %h, 1 : i32
        store %h1, %hits[%i] : memref<i32x?>
    }""".replace("index x ?", "indexx?")
    for groups in (1, 2, 7, 1000):
        for threads in (1, 2, 3):
            ids, sizes = np.full(groups, -1), np.full(groups, -1)
            hits = np.zeros(groups, np.int32)
            check(text, [ids, sizes, hits], group_size=groups, num_threads=threads, target=target)
            np.testing.assert_array_equal(ids, np.arange(groups))
            assert (sizes == groups).all() and (hits == 1).all()


def test_group_size_zero_runs_nothing() -> None:
    text = """func @k(%out: memref<i32x4>) {
        %z = cast 1 : i32 -> i32
        store %z, %out[0] : memref<i32x4>
    }"""
    out = np.zeros(4, np.int32)
    check(text, [out], group_size=0)
    assert not out.any()


@pytest.mark.parametrize("target", TARGETS)
def test_two_threads_give_the_same_result_as_one(target: str, rng) -> None:
    """A batched kernel (the reference's sample shape, float rounding included) is
    bit-identical whether its groups run on one thread or two."""
    from .helpers import compiled

    text = open_example()
    kernel = compiled(text, target)["fused_kernel"]
    groups = 37
    alpha = np.float32(0.75)
    a = random_array(rng, (16, 8, groups), "f32")
    b, c = random_array(rng, (8, 8), "f32"), random_array(rng, (8, 16), "f32")
    d = random_array(rng, (16, 16, groups), "f32")
    d1, d2 = d.copy(order="F"), d.copy(order="F")
    kernel(alpha, a, b, c, d1, group_size=groups, num_threads=1)
    kernel(alpha, a, b, c, d2, group_size=groups, num_threads=2)
    np.testing.assert_array_equal(d1, d2)
    check(text, [alpha, a, b, c, d], group_size=groups, num_threads=2, target=target, depth=16)


def open_example() -> str:
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    return (root / "examples" / "fused_kernel.ir").read_text()


def test_kernels_without_parameters_and_several_per_program() -> None:
    """A program with several functions compiles once; each kernel launches by name, one of
    them with no parameters at all."""
    text = """func @nothing() {
        %g = group_id
    }
    func @fill(%out: memref<indexx?>) {
        %g = group_id
        store %g, %out[%g] : memref<indexx?>
    }"""
    from .helpers import compiled

    compilation = compiled(text)
    assert sorted(compilation) == ["fill", "nothing"]
    compilation["nothing"](group_size=5, num_threads=2)
    out = np.full(6, -1)
    check(text, [out], group_size=5, name="fill")
    assert list(out) == [0, 1, 2, 3, 4, -1]


def test_prepared_launch_runs_again_on_the_same_arrays() -> None:
    """Kernel.prepare binds once; every call of the launch reads and writes the arrays as they
    are then."""
    from .helpers import compiled

    text = """func @k(%x: memref<f64x3>) {
        axpby.n 1.0, %x, 1.0, %x : f64, memref<f64x3>, f64, memref<f64x3>
    }"""
    x = np.array([1.0, -2.0, 0.5])
    launch = compiled(text)["k"].prepare(x, group_size=1)
    launch()
    launch()
    np.testing.assert_array_equal(x, [4.0, -8.0, 2.0])
