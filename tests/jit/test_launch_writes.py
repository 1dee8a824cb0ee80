"""What a kernel's writes ask of a launch's arrays, checked before any native code runs, the
same way by the reference evaluator:
- an array the kernel writes (a collective instruction's output, a store's target) must be
  writeable: a read-only one is refused with an ArgumentError naming the instruction;
- where a gemm, gemv, ger or sum would write one argument while reading another, the two
  must not share memory: refused naming both arguments and the instruction. Arguments whose
  arrays never share a byte launch, even where their address ranges interleave."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from nanotc.check import load
from nanotc.runtime.arguments import ArgumentError, Group
from nanotc.runtime.writes import DisjointPair, disjoint_pairs, written_parameters

from .helpers import compiled, run_reference

GEMM = """func @gemm(%A: memref<f32x8x8>, %B: memref<f32x8x8>, %C: memref<f32x8x8>) {
    gemm.n.n 1.0, %A, %B, 0.0, %C : f32, memref<f32x8x8>, memref<f32x8x8>, f32, memref<f32x8x8>
}"""

STRIDED = "memref<f32x8x8,strided<1,?>>"
GEMM_STRIDED = f"""func @gemm(%A: {STRIDED}, %B: memref<f32x8x8>, %C: {STRIDED}) {{
    gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {STRIDED}, memref<f32x8x8>, f32, {STRIDED}
}}"""

GEMV = """func @gemv(%A: memref<f32x8x8>, %x: memref<f32x8>, %y: memref<f32x8>) {
    gemv.n 1.0, %A, %x, 1.0, %y : f32, memref<f32x8x8>, memref<f32x8>, f32, memref<f32x8>
}"""

GER = """func @ger(%x: memref<f32x8>, %y: memref<f32x8>, %A: memref<f32x8x8>) {
    ger 1.0, %x, %y, 1.0, %A : f32, memref<f32x8>, memref<f32x8>, f32, memref<f32x8x8>
}"""

BATCHED = """func @batched(%A: group<memref<f32x4x4>>, %B: memref<f32x4x4x?>,
                       %C: group<memref<f32x4x4>>) {
    %i = group_id
    %a = load %A[%i] : group<memref<f32x4x4>>
    %b = subview %B[:, :, %i] : memref<f32x4x4x?>
    %c = load %C[%i] : group<memref<f32x4x4>>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
}"""

SHIFTED = """func @shifted(%A: group<memref<f32x4x4>>, %B: memref<f32x4x4>,
                       %C: group<memref<f32x4x4>, offset: ?>) {
    %i = group_id
    %a = load %A[%i] : group<memref<f32x4x4>>
    %c = load %C[%i] : group<memref<f32x4x4>, offset: ?>
    gemm.n.n 1.0, %a, %B, 1.0, %c : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
}"""

AXPBY = """func @axpby(%a: memref<f32x8>, %b: memref<f32x8>) {
    axpby.n 2.0, %a, 3.0, %b : f32, memref<f32x8>, f32, memref<f32x8>
}"""


def matrix(n: int = 8, value: float = 1.0) -> np.ndarray:
    return np.full((n, n), value, np.float32, order="F")


def refused(text: str, args: list[Any], output: str, operand: str, group_size: int = 1) -> None:
    """Both runners refuse the launch at `output`, naming `operand`; nothing is written."""
    message = f"argument %{output}: expected memory disjoint from argument %{operand}"
    refused_with(text, args, output, message, group_size)


def refused_with(text: str, args: list[Any], name: str, message: str, group_size: int = 1) -> None:
    """Both runners refuse the launch at argument `name` with `message`; nothing is written."""
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    with pytest.raises(ArgumentError, match=re.escape(message)) as caught:
        compiled(text)[load(text).functions[0].name](*args, group_size=group_size)
    assert caught.value.name == name
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ArgumentError, match=re.escape(message)):
        run_reference(text, args, group_size)


def read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def test_a_read_only_output_is_refused_and_read_only_inputs_launch() -> None:
    refused_with(GEMM, [matrix(), matrix(), read_only(matrix())], "C",
                 "argument %C: expected a writeable array (the gemm at 2.5 writes %C), got a"
                 " read-only float32 array of shape (8, 8)")  # fmt: skip
    c = matrix(value=0.0)
    compiled(GEMM)["gemm"](read_only(matrix()), read_only(matrix()), c, group_size=1)
    np.testing.assert_array_equal(c, 8.0)


def test_an_output_over_a_bytes_object_is_refused() -> None:
    """numpy marks a view of immutable memory read-only; the kernel must not write it."""
    memory = bytes(8 * 8 * 4)
    c = np.frombuffer(memory, np.float32).reshape(8, 8, order="F")
    refused_with(GEMM, [matrix(), matrix(), c], "C", "expected a writeable array")
    assert memory == bytes(8 * 8 * 4)


def test_a_known_layout_made_read_only_is_refused() -> None:
    """The launch that skips binding for known layouts tests the flag too."""
    kernel = compiled(GEMM)["gemm"]
    c = matrix(value=0.0)
    kernel(matrix(), matrix(), c, group_size=1)
    c.flags.writeable = False
    with pytest.raises(ArgumentError, match="expected a writeable array"):
        kernel(matrix(), matrix(), c, group_size=1)
    np.testing.assert_array_equal(c, 8.0)


def test_a_store_into_a_read_only_view_is_refused() -> None:
    text = """func @put(%x: f32, %C: memref<f32x8x8>) {
    %c = subview %C[:, 3] : memref<f32x8x8>
    store %x, %c[2] : memref<f32x8>
}"""
    refused_with(text, [np.float32(1.0), read_only(matrix())], "C",
                 "expected a writeable array (the store at 3.5 writes %C)")  # fmt: skip


def test_a_read_only_member_of_an_output_group_is_refused() -> None:
    outputs = [matrix(4, 0.0), read_only(matrix(4, 0.0)), matrix(4, 0.0)]
    b = np.ones((4, 4, 3), np.float32, order="F")
    refused_with(BATCHED, [[matrix(4) for _ in range(3)], b, outputs], "C[1]",
                 "argument %C[1]: expected a writeable array (the gemm at 7.5 writes %C)", 3)  # fmt: skip


def test_written_parameters_follow_views() -> None:
    text = """func @k(%A: group<memref<f32x4x4>>, %B: memref<f32x16>, %C: memref<f32x4x4x2>,
                      %x: memref<f32x4>, %y: memref<f32x4>) {
    %i = group_id
    %a = load %A[%i] : group<memref<f32x4x4>>
    %b = expand %B[0 -> 4x4] : memref<f32x16>
    axpby.n 1.0, %a, 1.0, %b : f32, memref<f32x4x4>, f32, memref<f32x4x4>
    %c = subview %C[:, :, 1] : memref<f32x4x4x2>
    %v = load %y[0] : memref<f32x4>
    store %v, %c[0, 0] : memref<f32x4x4>
    %t = alloca -> memref<f32x4x4>
    gemm.n.n 1.0, %a, %b, 0.0, %t : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
}"""
    assert written_parameters(load(text).functions[0]) == {
        1: "the axpby at 6.5",
        2: "the store at 9.5",
    }


def test_a_gemm_whose_output_is_its_operand_is_refused_with_where() -> None:
    a, c = matrix(), matrix(value=0.0)
    refused(GEMM, [a, c, c], "C", "B")
    with pytest.raises(ArgumentError, match=r"\(the gemm at 2\.5 writes %C while it reads %A\)"):
        compiled(GEMM)["gemm"](c, a, c, group_size=1)


def test_a_layout_bound_before_does_not_let_overlapping_arrays_through() -> None:
    """Launches of known layouts skip binding; they still test the arrays' byte ranges."""
    kernel = compiled(GEMM)["gemm"]
    a, c = matrix(), matrix(value=0.0)
    for _ in range(3):
        kernel(a, a, c, group_size=1)
    refused(GEMM, [c, a, c], "C", "A")
    refused(GEMM, [a, c[:], c], "C", "B")  # another view of the same memory


def test_disjoint_parts_of_one_array_launch() -> None:
    whole = np.zeros((8, 24), np.float32, order="F")
    a, b, c = whole[:, :8], whole[:, 8:16], whole[:, 16:]
    a[...], b[...] = 1.0, 2.0
    compiled(GEMM)["gemm"](a, b, c, group_size=1)
    np.testing.assert_array_equal(c, 16.0)


def test_interleaved_arrays_that_share_no_byte_launch_every_time() -> None:
    """Their address ranges meet, so launches of known layouts bind each time, and pass."""
    whole = np.zeros((8, 18), np.float32, order="F")
    a, c = whole[:, 0:16:2], whole[:, 1:17:2]  # columns alternate
    a[...] = 1.0
    b = matrix(value=0.5)
    for _ in range(3):
        compiled(GEMM_STRIDED)["gemm"](a, b, c, group_size=1)
        np.testing.assert_array_equal(c, 4.0)
    run_reference(GEMM_STRIDED, [a, b, c])
    refused(GEMM_STRIDED, [a, b, whole[:, 2::2]], "C", "A")  # A's columns 2, 4, ...


def test_operands_may_share_memory_with_each_other() -> None:
    a, c = matrix(value=2.0), matrix(value=0.0)
    compiled(GEMM)["gemm"](a, a, c, group_size=1)
    np.testing.assert_array_equal(c, 32.0)


def test_a_gemv_writing_a_column_of_its_matrix_is_refused() -> None:
    a = matrix()
    refused(GEMV, [a, np.ones(8, np.float32), a[:, 3]], "y", "A")


def test_a_ger_reading_a_column_of_its_output_is_refused() -> None:
    a = matrix()
    refused(GER, [a[:, 0], np.ones(8, np.float32), a], "A", "x")


def test_groups_sharing_a_member_are_refused() -> None:
    members = [matrix(4) for _ in range(3)]
    b = np.ones((4, 4, 3), np.float32, order="F")
    outputs = [matrix(4, 0.0), members[2], matrix(4, 0.0)]
    refused(BATCHED, [members, b, outputs], "C", "A", group_size=3)


def test_a_group_sharing_memory_with_a_batched_operand_is_refused() -> None:
    b = np.ones((4, 4, 3), np.float32, order="F")
    refused(BATCHED, [[matrix(4) for _ in range(3)], b, [b[:, :, 1]] * 3], "C", "B", 3)
    refused(BATCHED, [[matrix(4) for _ in range(3)], b, b], "C", "B", 3)


def test_groups_of_distinct_members_launch() -> None:
    members = [matrix(4) for _ in range(3)]
    outputs = [matrix(4, 0.0) for _ in range(3)]
    compiled(BATCHED)["batched"](members, np.ones((4, 4, 3), np.float32, order="F"), outputs,
                                 group_size=3)  # fmt: skip
    for c in outputs:
        np.testing.assert_array_equal(c, 4.0)


def test_group_members_are_tested_where_the_offset_puts_them() -> None:
    """C's member is the first 16 floats of a buffer, seen 16 elements on: refused where A's
    member is the last 16, launched where A's member is C's own array."""
    buffer = np.zeros(32, np.float32)
    first = buffer[:16].reshape(4, 4, order="F")
    last = buffer[16:].reshape(4, 4, order="F")
    last[...] = 1.0
    refused(SHIFTED, [[last], matrix(4), Group([first], offset=16)], "C", "A")
    compiled(SHIFTED)["shifted"]([last], matrix(4), Group([first], offset=0), group_size=1)
    np.testing.assert_array_equal(first, 4.0)
    compiled(SHIFTED)["shifted"]([first], matrix(4), Group([first], offset=16), group_size=1)
    np.testing.assert_array_equal(last, 17.0)  # 1 + (4 x 4 of C's fours)


def test_an_element_wise_instruction_may_read_what_it_writes() -> None:
    """axpby with both arguments one array scales it (docs/language.md)."""
    a = np.ones(8, np.float32)
    compiled(AXPBY)["axpby"](a, a, group_size=1)
    np.testing.assert_array_equal(a, 5.0)


def test_a_transposing_axpby_may_not_read_what_it_writes() -> None:
    """axpby.t writes element (i, j) from (j, i), which it may have written already: a matrix
    shared by its operand and output is refused at launch, as the checker refuses one value."""
    text = AXPBY.replace("axpby.n", "axpby.t").replace("f32x8", "f32x8x8")
    shared = matrix()
    refused(text, [shared, shared[:, :]], "b", "a")
    a, b = np.asfortranarray(np.arange(64, dtype=np.float32).reshape(8, 8)), matrix(value=0)
    compiled(text)["axpby"](a, b, group_size=1)
    np.testing.assert_array_equal(b, 2 * a.T)  # beta 3 times b's zeros


def test_pairs_follow_views_to_their_parameters() -> None:
    """Views through group loads, subviews, expand and fuse lead back to parameters; views
    of one parameter, and outputs that are not parameters' views, make no pair."""
    text = """func @k(%A: group<memref<f32x4x4>>, %B: memref<f32x16>, %C: memref<f32x4x4x2>,
                      %D: memref<f32x4x4>) {
    %i = group_id
    %a = load %A[%i] : group<memref<f32x4x4>>
    %b = expand %B[0 -> 4x4] : memref<f32x16>
    %c = subview %C[:, :, 0] : memref<f32x4x4x2>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
    %d = subview %C[:, :, 1] : memref<f32x4x4x2>
    gemm.n.n 1.0, %c, %D, 1.0, %d : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
    %t = alloca -> memref<f32x4x4>
    gemm.n.n 1.0, %a, %D, 0.0, %t : f32, memref<f32x4x4>, memref<f32x4x4>, f32, memref<f32x4x4>
}"""
    pairs = disjoint_pairs(load(text).functions[0])
    assert {(p.output, p.operand) for p in pairs} == {(2, 0), (2, 1), (2, 3)}
    assert pairs[0] == DisjointPair(2, 0, "the gemm at 7.5")


def test_an_output_that_repeats_an_element_is_refused_and_such_inputs_launch() -> None:
    """A stride of 0 makes several elements of one output one float: the result would depend
    on the order of the writes. Reading through such a view is fine."""
    column = np.zeros(8, np.float32)
    c = np.lib.stride_tricks.as_strided(column, (8, 8), (4, 0))  # writeable, 8 columns in one
    refused_with(GEMM_STRIDED, [matrix(), matrix(), c], "C",
                 "argument %C: expected an array of distinct elements (the gemm at 2.5 writes"
                 " %C), got float32 array of shape (8, 8) with element strides (1, 0), whose"
                 " mode 1 repeats one element")  # fmt: skip
    assert not column.any()
    a = np.lib.stride_tricks.as_strided(np.ones(8, np.float32), (8, 8), (4, 0))
    out = np.zeros((8, 8), np.float32, order="F")
    compiled(GEMM_STRIDED)["gemm"](a, matrix(), out, group_size=1)
    np.testing.assert_array_equal(out, 8.0)
    t = "memref<f32x?x?,strided<?,?>>"
    add = f"""func @add(%a: {t}, %b: {t}) {{
    axpby.n 1.0, %a, 1.0, %b : f32, {t}, f32, {t}
}}"""
    empty = np.lib.stride_tricks.as_strided(column[:0], (0, 8), (4, 0))  # no element at all
    compiled(add)["add"](empty, empty.copy(), group_size=1)
    with pytest.raises(ArgumentError, match="whose mode 1 repeats one element"):
        compiled(add)["add"](c.copy(), c, group_size=1)


def test_members_of_a_batched_output_group_may_share_memory() -> None:
    """Atomic updates of one C by every work-group are what a stride-0 batch axis is for."""
    text = BATCHED.replace("1.0, %c", "1.0, %c").replace("gemm.n.n", "gemm.n.n.atomic")
    c = np.lib.stride_tricks.as_strided(np.zeros((4, 4), np.float32, order="F"),
                                        (4, 4, 3), (4, 16, 0))  # fmt: skip
    b = np.ones((4, 4, 3), np.float32, order="F")
    compiled(text)["batched"]([matrix(4) for _ in range(3)], b, c, group_size=3)
    np.testing.assert_array_equal(c[:, :, 0], 12.0)


def test_an_output_whose_elements_overlap_is_refused_and_interleaved_ones_launch() -> None:
    """Strides that step less than a mode's span make elements share memory without any
    stride being 0 (`as_strided`); modes that interleave without meeting are fine."""
    from numpy.lib.stride_tricks import as_strided

    t = "memref<f32x?x?,strided<?,?>>"
    add = f"""func @add(%a: {t}, %b: {t}) {{
    axpby.n 1.0, %a, 1.0, %b : f32, {t}, f32, {t}
}}"""
    memory = np.zeros(64, np.float32)
    overlapping = as_strided(memory, (8, 6), (4, 8))  # element (2, 0) is element (0, 1)
    with pytest.raises(ArgumentError, match=r"argument %b: .*shape \(8, 6\) with element"
                       r" strides \(1, 2\), whose elements overlap"):  # fmt: skip
        compiled(add)["add"](np.ones((8, 6), np.float32), overlapping, group_size=1)
    assert not memory.any()
    interleaved = as_strided(memory, (2, 6), (4, 8))  # elements 0, 1, 2, ... 11: distinct
    compiled(add)["add"](np.ones((2, 6), np.float32), interleaved, group_size=1)
    np.testing.assert_array_equal(memory[:12], 1.0)


@pytest.mark.parametrize(
    ("shape", "byte_strides", "overlap"),
    [
        ((8, 6), (4, 32), False),  # column-major
        ((8, 6), (-4, 32), False),  # a reversed mode
        ((6, 8), (32, 4), False),  # row-major
        ((2, 6), (4, 8), False),  # interleaved modes
        ((3, 3), (4, 8), True),
        ((3, 3), (8, 4), True),
        ((4, 4), (2, 16), True),  # steps less than an element
        ((0, 5), (4, 0), False),  # no element
        ((1, 1, 5), (0, 0, 4), False),
        ((3000, 3000), (4, 4), True),  # past the exact count: the ordered test decides
    ],
)
def test_elements_overlap(shape: tuple[int, ...], byte_strides: tuple[int, ...],
                          overlap: bool) -> None:  # fmt: skip
    from nanotc.runtime.writes import elements_overlap

    assert elements_overlap(shape, byte_strides, 4) is overlap


def test_a_numpy_scalar_is_not_an_array_the_kernel_may_write() -> None:
    """numpy scalars are immutable: a kernel writing one would write a copy, and the result
    would be lost. Read-only parameters take them as 0-d arrays."""
    text = """func @double(%x: memref<f32>, %y: memref<f32>) {
    %v = load %x[] : memref<f32>
    %w = arith.add %v, %v : f32
    store %w, %y[] : memref<f32>
}"""
    y = np.zeros((), np.float32)
    compiled(text)["double"](np.float32(3), y, group_size=1)
    assert y == 6
    with pytest.raises(ArgumentError, match=r"argument %y: expected a writeable array \(the"
                       r" store at 4\.5 writes %y\), got a read-only float32 array of shape \(\)"):  # fmt: skip
        compiled(text)["double"](np.float32(3), np.float32(0), group_size=1)
