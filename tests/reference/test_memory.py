"""The reference evaluator's memory model: load, store, size, subview, expand, fuse, alloca,
groups, strided and dynamic memrefs, run-time bounds checks and argument validation."""

from __future__ import annotations

import numpy as np
import pytest
from reference_helpers import DTYPES, nan_array, random_array, run, scalar_out

from nanotc.reference import EvaluationError, memory
from nanotc.runtime.arguments import ArgumentError, Group

COPY_3X5 = """func @k(%a: memref<f32x3x5>, %b: memref<f32x3x5>) {
    foreach %i = 0, 3 {
        for %j = 0, 5 {
            %x = load %a[%i, %j] : memref<f32x3x5>
            store %x, %b[%i, %j] : memref<f32x3x5>
        }
    }
}"""


def test_load_store_element_i_j_is_array_i_j() -> None:
    rng = np.random.default_rng(1)
    a, b = random_array(rng, (3, 5), "f32"), nan_array((3, 5), "f32")
    run(COPY_3X5, a, b)
    np.testing.assert_array_equal(a, b)


def test_load_store_dynamic_strided() -> None:
    text = """func @k(%a: memref<i32x?x?,strided<?,?>>, %b: memref<i32x?x?,strided<?,?>>) {
        %m = size %a[0] : memref<i32x?x?,strided<?,?>>
        %n = size %a[1] : memref<i32x?x?,strided<?,?>>
        foreach %i = 0, %m {
            for %j = 0, %n {
                %x = load %a[%i, %j] : memref<i32x?x?,strided<?,?>>
                %y = arith.mul %x, 3 : i32
                store %y, %b[%i, %j] : memref<i32x?x?,strided<?,?>>
            }
        }
    }"""
    rng = np.random.default_rng(2)
    base = random_array(rng, (14, 9), "i32")
    a = base[::2, 1::3]  # element strides (2, 42)
    out = np.zeros((11, 6), np.int32, order="F")
    b = out[3:10, 1:4]
    run(text, a, b)
    np.testing.assert_array_equal(b, a * 3)
    assert np.count_nonzero(out) == np.count_nonzero(a)  # nothing outside the view written


def test_c_ordered_array_with_dynamic_strides() -> None:
    text = """func @k(%a: memref<f64x?x?,strided<?,?>>, %b: memref<f64x?x?>) {
        axpby.n 2.0, %a, 0.0, %b : f64, memref<f64x?x?,strided<?,?>>, f64, memref<f64x?x?>
    }"""
    a = np.arange(12.0).reshape(3, 4)  # row-major: element strides (4, 1)
    b = nan_array((3, 4), "f64")
    run(text, a, b)
    np.testing.assert_array_equal(b, 2 * a)


def test_order_zero_memref() -> None:
    text = """func @k(%a: memref<f64>, %b: memref<f64>) {
        %x = load %a[] : memref<f64>
        %y = arith.add %x, 1.5 : f64
        store %y, %b[] : memref<f64>
    }"""
    a, b = np.array(2.0), np.array([np.nan])  # a shape-(1,) array is accepted for order 0
    run(text, a, b)
    assert b[0] == 3.5


def test_size_of_dynamic_modes() -> None:
    text = """func @k(%a: memref<f32x4x?x?>, %out: memref<index x 3>) {
        %s0 = size %a[0] : memref<f32x4x?x?>
        %s1 = size %a[1] : memref<f32x4x?x?>
        %s2 = size %a[2] : memref<f32x4x?x?>
        store %s0, %out[0] : memref<index x 3>
        store %s1, %out[1] : memref<index x 3>
        store %s2, %out[2] : memref<index x 3>
    }"""
    out = np.zeros(3, np.int64)
    run(text, np.zeros((4, 7, 2), np.float32, order="F"), out)
    assert out.tolist() == [4, 7, 2]


# -- views ----------------------------------------------------------------------------------


def copy_view_kernel(source_type: str, view: str, view_type: str, out_type: str) -> str:
    """A kernel that copies a view of %a to %b with axpby."""
    return f"""func @k(%a: {source_type}, %b: {out_type}) {{
        %v = {view} : {source_type}
        axpby.n 1.0, %v, 0.0, %b : f32, {view_type}, f32, {out_type}
    }}"""


def copy_loops(view_type: str, out_type: str, order: int) -> str:
    """Nested loops copying every element of %v to %b (both of shape %b's sizes)."""
    indices = ", ".join(f"%i{k}" for k in range(order))
    sizes = "\n".join(f"%n{k} = size %b[{k}] : {out_type}" for k in range(order))
    opening = " ".join(f"for %i{k} = 0, %n{k} {{" for k in range(order))
    return f"""{sizes}
        {opening}
            %x = load %v[{indices}] : {view_type}
            store %x, %b[{indices}] : {out_type}
        {"}" * order}"""


def packed(shape: tuple[int, ...], element: str = "f32") -> str:
    return f"memref<{element}" + "".join(f"x{s}" for s in shape) + ">"


@pytest.mark.parametrize(
    ("view", "view_type", "expected"),
    [
        ("subview %a[2:4, 1:3]", "memref<f32x4x3,strided<1,8>>", lambda a: a[2:6, 1:4]),
        ("subview %a[:, 3]", "memref<f32x8>", lambda a: a[:, 3]),
        ("subview %a[5, :]", "memref<f32x6,strided<8>>", lambda a: a[5, :]),
        ("subview %a[3:?, 2:?]", "memref<f32x5x4,strided<1,8>>", lambda a: a[3:, 2:]),
        ("subview %a[0:1, 5:1]", "memref<f32x1x1,strided<1,8>>", lambda a: a[0:1, 5:6]),
    ],
)
def test_subview_static(view: str, view_type: str, expected: object) -> None:
    rng = np.random.default_rng(3)
    a = random_array(rng, (8, 6), "f32")
    want = expected(a)  # type: ignore[operator]
    b = nan_array(want.shape, "f32")
    run(copy_view_kernel("memref<f32x8x6>", view, view_type, packed(want.shape)), a, b)
    np.testing.assert_array_equal(b, want)


def test_subview_of_all_modes_is_an_order_0_view() -> None:
    text = """func @k(%a: memref<f32x8x6>, %i: index) {
        %v = subview %a[%i, 2] : memref<f32x8x6>
        %x = load %v[] : memref<f32>
        %y = arith.add %x, 1.0 : f32
        store %y, %v[] : memref<f32>
    }"""
    a = np.zeros((8, 6), np.float32, order="F")
    run(text, a, 3)
    assert a[3, 2] == 1 and np.count_nonzero(a) == 1


def test_subview_dynamic_offsets_and_sizes() -> None:
    ty = "memref<f32x?x?>"
    text = f"""func @k(%a: {ty}, %b: memref<f32x?x?,strided<1,?>>, %o: index, %n: index) {{
        %v = subview %a[%o:%n, %o:?] : {ty}
        axpby.n 1.0, %v, 0.0, %b : f32, memref<f32x?x?,strided<1,?>>, f32,
            memref<f32x?x?,strided<1,?>>
    }}"""
    rng = np.random.default_rng(4)
    for m, n, offset, size in [(13, 7, 2, 5), (5, 5, 0, 5), (17, 3, 2, 1)]:
        a = random_array(rng, (m, n), "f32")
        b = nan_array((size, n - offset), "f32")
        run(text, a, b, offset, size)
        np.testing.assert_array_equal(b, a[offset : offset + size, offset:])


def test_subview_out_of_bounds_raises() -> None:
    ty = "memref<f32x?>"
    text = f"""func @k(%a: {ty}, %b: memref<f32x?>, %o: index, %n: index) {{
        %v = subview %a[%o:%n] : {ty}
        axpby.n 1.0, %v, 0.0, %b : f32, memref<f32x?>, f32, memref<f32x?>
    }}"""
    a = np.zeros(10, np.float32)
    with pytest.raises(EvaluationError, match="out of bounds"):
        run(text, a, np.zeros(4, np.float32), 8, 4)
    with pytest.raises(EvaluationError, match="out of bounds"):
        run(text, a, np.zeros(4, np.float32), -1, 4)
    with pytest.raises(EvaluationError, match=r"2\.\d+-\d+: subview, work-group 0"):
        run(text, a, np.zeros(4, np.float32), 8, 4)


def test_load_index_out_of_bounds_raises() -> None:
    text = """func @k(%a: memref<f32x?>, %i: index, %b: memref<f32>) {
        %x = load %a[%i] : memref<f32x?>
        store %x, %b[] : memref<f32>
    }"""
    a = np.zeros(5, np.float32)
    with pytest.raises(EvaluationError, match="index 5 out of bounds"):
        run(text, a, 5, scalar_out("f32"))
    with pytest.raises(EvaluationError, match="index -1 out of bounds"):
        run(text, a, -1, scalar_out("f32"))


@pytest.mark.parametrize(
    ("mode", "shape_text", "result_shape"),
    [
        (1, "2x3", (4, 2, 3, 5)),
        (1, "?x3", (4, 2, 3, 5)),
        (0, "2x?", (2, 2, 6, 5)),
        (2, "5x1", (4, 6, 5, 1)),
    ],
)
def test_expand_static(mode: int, shape_text: str, result_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(5)
    a = random_array(rng, (4, 6, 5), "f32")
    result_type = packed(result_shape)
    text = f"""func @k(%a: memref<f32x4x6x5>, %b: {result_type}) {{
        %v = expand %a[{mode} -> {shape_text}] : memref<f32x4x6x5>
        {copy_loops(result_type, result_type, 4)}
    }}"""
    b = nan_array(result_shape, "f32")
    run(text, a, b)
    np.testing.assert_array_equal(b, a.reshape(result_shape, order="F"))


def test_expand_dynamic_with_values_and_inference() -> None:
    text = f"""func @k(%a: memref<f64x?x3>, %p: index, %b: memref<f64x?x?x3>) {{
        %v = expand %a[0 -> %p x ?] : memref<f64x?x3>
        {copy_loops("memref<f64x?x?x3>", "memref<f64x?x?x3>", 3)}
    }}"""
    a = np.asfortranarray(np.arange(36.0).reshape(12, 3))
    for p in (1, 3, 4, 12):
        b = nan_array((p, 12 // p, 3), "f64")
        run(text, a, p, b)
        np.testing.assert_array_equal(b, a.reshape((p, 12 // p, 3), order="F"))
    with pytest.raises(EvaluationError, match="does not divide"):
        run(text, a, 5, nan_array((5, 2, 3), "f64"))


def test_expand_strided_source_keeps_outer_stride() -> None:
    view_type = "memref<f32x2x4x3,strided<2,4,?>>"
    text = f"""func @k(%a: memref<f32x8x3,strided<2,?>>, %b: memref<f32x2x4x3>) {{
        %v = expand %a[0 -> 2x?] : memref<f32x8x3,strided<2,?>>
        {copy_loops(view_type, "memref<f32x2x4x3>", 3)}
    }}"""
    rng = np.random.default_rng(6)
    base = random_array(rng, (16, 5), "f32")
    a = base[::2, ::2]  # element strides (2, 32)
    b = nan_array((2, 4, 3), "f32")
    run(text, a, b)
    np.testing.assert_array_equal(b, a.reshape((2, 4, 3), order="F"))


def test_fuse_dynamic_and_invalid_dynamic_stride() -> None:
    ty = "memref<f32x?x?x2,strided<1,?,?>>"
    text = f"""func @k(%a: {ty}, %b: memref<f32x?x2,strided<1,?>>) {{
        %v = fuse %a[0, 1] : {ty}
        axpby.n 1.0, %v, 0.0, %b : f32, memref<f32x?x2,strided<1,?>>, f32,
            memref<f32x?x2,strided<1,?>>
    }}"""
    rng = np.random.default_rng(7)
    a = random_array(rng, (3, 4, 2), "f32")
    b = nan_array((12, 2), "f32")
    run(text, a, b)
    np.testing.assert_array_equal(b, a.reshape((12, 2), order="F"))
    padded = random_array(rng, (5, 4, 2), "f32")[:3]  # stride of mode 1 is 5, not 3
    with pytest.raises(EvaluationError, match="cannot be fused"):
        run(text, padded, nan_array((12, 2), "f32"))
    # a mode of size 1 never addresses memory, so its stride does not matter
    single = random_array(rng, (3, 4, 2), "f32")[:, 1:2]
    run(text, single, b[:3])
    np.testing.assert_array_equal(b[:3], single.reshape((3, 2), order="F"))


def test_fuse_steps_as_its_first_mode_of_size_above_one() -> None:
    """A new axis (stride 0) or a mode of size 1 with its next mode's stride starts the
    fused modes: the fused mode takes the stride of the first mode that is stepped."""
    x = np.asfortranarray(np.arange(12.0).reshape(6, 2))
    for view, first, last in (
        (x[:, None, :], 1, 2),
        (x[None, :, :], 0, 1),
        (x[:, None, None], 0, 2),
    ):
        fused = memory.fuse(view, first, last)
        np.testing.assert_array_equal(fused, x.reshape(fused.shape, order="F"))
    padded = np.asfortranarray(np.arange(14.0).reshape(7, 1, 2, order="F"))[:6]
    np.testing.assert_array_equal(memory.fuse(padded, 1, 2), padded[:, 0, :])
    with pytest.raises(EvaluationError, match="cannot be fused"):
        memory.fuse(padded, 0, 2)  # the padding row lies between the columns


# -- alloca ---------------------------------------------------------------------------------


def test_alloca_is_garbage_until_written() -> None:
    text = """func @k(%f: memref<f32x3>, %i: memref<i32x3>, %h: memref<bf16x3>) {
        %tf = alloca -> memref<f32x4x2,strided<1,5>>
        %ti = alloca -> memref<i32x4>
        %th = alloca -> memref<bf16x4>
        %z = cast 7 : i32 -> i32
        store %z, %ti[1] : memref<i32x4>
        %x = load %tf[3, 1] : memref<f32x4x2,strided<1,5>>
        %y = load %ti[0] : memref<i32x4>
        %w = load %ti[1] : memref<i32x4>
        %v = load %th[2] : memref<bf16x4>
        store %x, %f[0] : memref<f32x3>
        store %y, %i[0] : memref<i32x3>
        store %w, %i[1] : memref<i32x3>
        store %v, %h[0] : memref<bf16x3>
        lifetime_stop %tf
        barrier
    }"""
    f, i, h = np.zeros(3, np.float32), np.zeros(3, np.int32), np.zeros(3, DTYPES["bf16"])
    run(text, f, i, h)
    assert np.isnan(f[0])
    assert i[0] == 0x5A5A5A5A and i[1] == 7
    assert np.isnan(float(h[0]))


def test_gemm_into_alloca_with_beta_zero_ignores_garbage() -> None:
    text = """func @k(%a: memref<f64x3x3>, %b: memref<f64x3x3>) {
        %t = alloca -> memref<f64x3x3>
        axpby.n 2.0, %a, 0.0, %t : f64, memref<f64x3x3>, f64, memref<f64x3x3>
        axpby.n 1.0, %t, 1.0, %t : f64, memref<f64x3x3>, f64, memref<f64x3x3>
        axpby.n 1.0, %t, 0.0, %b : f64, memref<f64x3x3>, f64, memref<f64x3x3>
    }"""
    a, b = np.asfortranarray(np.arange(9.0).reshape(3, 3)), nan_array((3, 3), "f64")
    run(text, a, b)
    np.testing.assert_array_equal(b, 4 * a)


# -- groups ---------------------------------------------------------------------------------

GROUP_SCALE = """func @k(%g: group<memref<f32x?x2>{offset}>, %out: memref<f32x?x2x?>) {{
    %id = group_id
    %m = load %g[%id] : group<memref<f32x?x2>{offset}>
    %o = subview %out[:, :, %id] : memref<f32x?x2x?>
    axpby.n 3.0, %m, 0.0, %o : f32, memref<f32x?x2>, f32, memref<f32x?x2>
}}"""


def test_group_of_separate_arrays() -> None:
    rng = np.random.default_rng(8)
    members = [random_array(rng, (4, 2), "f32") for _ in range(5)]
    out = nan_array((4, 2, 5), "f32")
    run(GROUP_SCALE.format(offset=""), members, out, group_size=5)
    for g, m in enumerate(members):
        np.testing.assert_array_equal(out[:, :, g], 3 * m)


def test_group_of_one_batched_array() -> None:
    rng = np.random.default_rng(9)
    batch = random_array(rng, (4, 2, 6), "f32")
    out = nan_array((4, 2, 6), "f32")
    run(GROUP_SCALE.format(offset=""), batch, out, group_size=6)
    np.testing.assert_array_equal(out, 3 * batch)


def test_group_members_with_different_dynamic_sizes() -> None:
    text = """func @k(%g: group<memref<f64x?>>, %out: memref<f64x?>) {
        %id = group_id
        %m = load %g[%id] : group<memref<f64x?>>
        %o = subview %out[%id] : memref<f64x?>
        sum.n 1.0, %m, 0.0, %o : f64, memref<f64x?>, f64, memref<f64>
    }"""
    members = [np.arange(float(n)) for n in (1, 4, 9, 2)]
    out = nan_array((4,), "f64")
    run(text, members, out, group_size=4)
    np.testing.assert_array_equal(out, [m.sum() for m in members])


def test_group_dynamic_offset() -> None:
    rng = np.random.default_rng(10)
    buffers = [random_array(rng, (20,), "f32") for _ in range(3)]
    members = [b[:8].reshape((4, 2), order="F") for b in buffers]  # views into larger memory
    out = nan_array((4, 2, 3), "f32")
    run(GROUP_SCALE.format(offset=", offset: ?"), Group(members, offset=5), out, group_size=3)
    for g, buf in enumerate(buffers):
        np.testing.assert_array_equal(out[:, :, g], 3 * buf[5:13].reshape((4, 2), order="F"))


def test_group_static_offset() -> None:
    rng = np.random.default_rng(11)
    batch = random_array(rng, (4, 2, 3), "f32")
    out = nan_array((4, 2, 2), "f32")
    run(GROUP_SCALE.format(offset=", offset: 8"), batch, out, group_size=2)
    for g in range(2):  # member g starts 8 elements (one member) after batch[..., g]
        np.testing.assert_array_equal(out[:, :, g], 3 * batch[:, :, g + 1])


def test_group_offset_past_the_memory_is_an_argument_error() -> None:
    members = [np.zeros((4, 2), np.float32, order="F") for _ in range(2)]
    out = nan_array((4, 2, 2), "f32")
    with pytest.raises(ArgumentError) as info:
        run(GROUP_SCALE.format(offset=", offset: ?"), Group(members, 1), out, group_size=2)
    assert info.value.name == "g[0]"


# -- argument validation --------------------------------------------------------------------

SIGNATURE = """func @k(%alpha: f32, %n: i8, %a: memref<f32x4x3>, %g: group<memref<f64x2>>) {
  %i = group_id
  %m = load %g[%i] : group<memref<f64x2>>
}"""


def good_arguments() -> list[object]:
    return [np.float32(1), 3, np.zeros((4, 3), np.float32, order="F"), np.zeros((2, 5), order="F")]


@pytest.mark.parametrize(
    ("position", "value", "name"),
    [
        (0, "1.0", "alpha"),
        (1, 300, "n"),
        (1, 1.5, "n"),
        (2, np.zeros((4, 3), np.float64, order="F"), "a"),
        (2, np.zeros((4, 4), np.float32, order="F"), "a"),
        (2, np.zeros((4, 3), np.float32), "a"),  # C order: wrong static strides
        (2, np.zeros((4, 3, 1), np.float32), "a"),
        (2, [[0.0] * 3] * 4, "a"),
        (3, np.zeros((2, 2)), "g"),  # two members, indexed by group_id up to 2
        (3, [np.zeros(2), np.zeros(2), np.zeros(3)], "g[2]"),
        (3, 5, "g"),
    ],
)
def test_bad_arguments_raise_argument_error(position: int, value: object, name: str) -> None:
    args = good_arguments()
    args[position] = value
    with pytest.raises(ArgumentError) as info:
        run(SIGNATURE, *args, group_size=3)
    assert info.value.name == name
    assert f"%{name}" in str(info.value)


def test_good_arguments_and_argument_count() -> None:
    run(SIGNATURE, *good_arguments(), group_size=3)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        run(SIGNATURE, *good_arguments()[:3], group_size=3)
