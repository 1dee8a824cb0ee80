"""Control flow and work-groups in the reference evaluator: for, foreach, if with results,
group_id and group_size, collectives inside loops, and run-time errors inside regions."""

from __future__ import annotations

import numpy as np
import pytest
from reference_helpers import load, nan_array, random_array, run, scalar_out

from nanotc.reference import EvaluationError, evaluate

LOOP_SUM = """func @k(%start: {ty}, %stop: {ty}, %step: {ty}, %out: memref<{ty}>) {{
    %zero = cast 0 : {ty} -> {ty}
    store %zero, %out[] : memref<{ty}>
    for %i = %start, %stop, %step : {ty} {{
        %s = load %out[] : memref<{ty}>
        %t = arith.add %s, %i : {ty}
        store %t, %out[] : memref<{ty}>
    }}
}}"""


@pytest.mark.parametrize("ty", ["index", "i32", "i8"])
@pytest.mark.parametrize(
    ("start", "stop", "step"), [(0, 10, 1), (3, 17, 4), (-5, 5, 3), (7, 7, 1), (9, 2, 1)]
)
def test_for_loop_range(ty: str, start: int, stop: int, step: int) -> None:
    out = scalar_out(ty)
    run(LOOP_SUM.format(ty=ty), start, stop, step, out)
    assert int(out[()]) == sum(range(start, stop, step))


def test_for_loop_near_the_end_of_its_type_does_not_wrap() -> None:
    out = scalar_out("i8")
    run(LOOP_SUM.format(ty="i8"), 120, 127, 5, out)  # 120, 125; 130 would wrap to -126
    assert int(out[()]) == np.int8(120 + 125 - 256)


@pytest.mark.parametrize(("ty", "start", "stop", "step"), [("index", 0, 4, 0), ("i32", -3, 4, -2)])
def test_for_loop_with_non_positive_step_runs_no_iteration(
    ty: str, start: int, stop: int, step: int
) -> None:
    out = scalar_out(ty)
    run(LOOP_SUM.format(ty=ty), start, stop, step, out)
    assert out[()] == 0


def test_for_default_step_and_constant_bounds() -> None:
    text = """func @k(%out: memref<f64x5>) {
        for %i = 0, 5 {
            %x = cast %i : index -> f64
            %y = arith.mul %x, %x : f64
            store %y, %out[%i] : memref<f64x5>
        }
    }"""
    out = nan_array((5,), "f64")
    run(text, out)
    np.testing.assert_array_equal(out, np.arange(5.0) ** 2)


def test_foreach_with_dynamic_bounds() -> None:
    text = """func @k(%a: memref<i32x?>, %lo: i32, %hi: i32) {
        foreach %i = %lo, %hi : i32 {
            %j = cast %i : i32 -> index
            %x = load %a[%j] : memref<i32x?>
            %y = arith.shl %x, 1 : i32
            store %y, %a[%j] : memref<i32x?>
        }
    }"""
    a = np.arange(10, dtype=np.int32)
    run(text, a, 2, 7)
    np.testing.assert_array_equal(a, [0, 1, 4, 6, 8, 10, 12, 7, 8, 9])


def test_if_with_results_and_without_else() -> None:
    text = """func @k(%x: i32, %out: memref<i32x2>) {
        %c = cmp.lt %x, 16 : i32
        %r, %s = if %c -> (i32, i32) {
            %d = arith.mul %x, 2 : i32
            yield %d, 1 : i32, i32
        } else {
            yield 16, %x : i32, i32
        }
        store %r, %out[0] : memref<i32x2>
        store %s, %out[1] : memref<i32x2>
        %big = cmp.gt %x, 100 : i32
        if %big {
            %z = cast 0 : i32 -> i32
            store %z, %out[0] : memref<i32x2>
        }
    }"""
    for x, expected in [(3, [6, 1]), (16, [16, 16]), (40, [16, 40]), (200, [0, 200])]:
        out = np.zeros(2, np.int32)
        run(text, x, out)
        assert out.tolist() == expected


def test_if_on_constant_condition() -> None:
    text = """func @k(%out: memref<f32>) {
        %v = if true -> (f32) { yield 1.5 : f32 } else { yield 2.5 : f32 }
        store %v, %out[] : memref<f32>
    }"""
    out = scalar_out("f32")
    run(text, out)
    assert out[()] == 1.5


def test_group_id_and_group_size() -> None:
    text = """func @k(%out: memref<index x 2 x ?>) {
        %id = group_id
        %n = group_size
        store %id, %out[0, %id] : memref<index x 2 x ?>
        store %n, %out[1, %id] : memref<index x 2 x ?>
    }"""
    out = np.full((2, 7), -1, np.int64, order="F")
    run(text, out, group_size=5)
    np.testing.assert_array_equal(out[0, :5], np.arange(5))
    np.testing.assert_array_equal(out[1, :5], 5)
    np.testing.assert_array_equal(out[:, 5:], -1)


def test_zero_work_groups_run_nothing_but_still_check_arguments() -> None:
    text = """func @k(%out: memref<f32x2>) {
        %x = cast 1.0 : f32 -> f32
        store %x, %out[0] : memref<f32x2>
    }"""
    out = np.zeros(2, np.float32)
    run(text, out, group_size=0)
    assert not out.any()
    with pytest.raises(ValueError, match="non-negative"):
        run(text, out, group_size=-1)


def test_batch_reduce_gemm_in_a_loop() -> None:
    """C := sum over k of A[:, :, k] @ B[:, :, k], a loop of gemms accumulating into C."""
    text = """func @k(%a: memref<f32x5x3x?>, %b: memref<f32x3x4x?>, %c: memref<f32x5x4>) {
        %n = size %a[2] : memref<f32x5x3x?>
        for %k = 0, %n {
            %ak = subview %a[:, :, %k] : memref<f32x5x3x?>
            %bk = subview %b[:, :, %k] : memref<f32x3x4x?>
            %first = cmp.eq %k, 0 : index
            %beta = if %first -> (f32) { yield 0.0 : f32 } else { yield 1.0 : f32 }
            gemm.n.n 1.0, %ak, %bk, %beta, %c
                : f32, memref<f32x5x3>, memref<f32x3x4>, f32, memref<f32x5x4>
        }
    }"""
    rng = np.random.default_rng(300)
    a, b = random_array(rng, (5, 3, 6), "f32"), random_array(rng, (3, 4, 6), "f32")
    c = nan_array((5, 4), "f32")
    run(text, a, b, c)
    expected = np.einsum("ikn,kjn->ij", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)


def test_error_inside_a_region_names_instruction_and_work_group() -> None:
    text = """func @k(%a: memref<f32x4>) {
        %id = group_id
        foreach %i = 0, 4 {
            %j = arith.add %i, %id : index
            %x = load %a[%j] : memref<f32x4>
            store %x, %a[%i] : memref<f32x4>
        }
    }"""
    with pytest.raises(EvaluationError) as info:
        run(text, np.zeros(4, np.float32), group_size=3)
    message = str(info.value)
    assert "5.18-44: load, work-group 1: index 4 out of bounds" in message


def test_function_name_with_or_without_at_and_unknown_name() -> None:
    program = load("func @first(%a: memref<f32>) {}\nfunc @second(%a: memref<f32>) {}")
    evaluate(program, "@second", [np.zeros((), np.float32)], 1)
    evaluate(program, "first", [np.zeros((), np.float32)], 1)
    with pytest.raises(KeyError, match="third"):
        evaluate(program, "third", [np.zeros((), np.float32)], 1)
