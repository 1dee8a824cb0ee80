"""Launches on arrays of layouts bound before skip binding (`launcher.KnownLayouts`): they must
still read every argument afresh (addresses, scalars) and refuse what binding refuses."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from nanotc.runtime import arguments
from nanotc.runtime.arguments import ArgumentError, data_address
from nanotc.runtime.launcher import SlotBuffers

from .helpers import compiled

AXPBY = """func @k(%alpha: f32, %x: memref<f32x?>, %y: memref<f32x?>) {
    axpby.n %alpha, %x, 0.0, %y : f32, memref<f32x?>, f32, memref<f32x?>
}"""


def test_known_layouts_still_read_each_launchs_arrays_and_scalars() -> None:
    kernel = compiled(AXPBY)["k"]
    rng = np.random.default_rng(5)
    for launch in range(4):
        x = rng.standard_normal(37, dtype=np.float32)
        y = np.zeros(37, np.float32)
        alpha = float(launch + 1)
        kernel(alpha, x, y, group_size=1, num_threads=1 + launch % 2)
        np.testing.assert_array_equal(y, alpha * x)
    assert kernel._known.slot_values((2.0, x, y), 1) is not None  # the layout is known by now


def test_a_new_size_of_a_known_dtype_gets_its_own_slots() -> None:
    """The dynamic size is part of the layout: a shorter x must not reuse 37's slots."""
    kernel = compiled(AXPBY)["k"]
    for n in (37, 5, 37, 0, 5):
        x, y = np.arange(n, dtype=np.float32), np.full(n + 3, -1.0, np.float32)
        kernel(1.0, x, y[:n], group_size=1)
        np.testing.assert_array_equal(y[:n], x)
        assert (y[n:] == -1).all(), n


@pytest.mark.parametrize(
    "bad, name",
    [((True, "x"), "alpha"), ((1.0, "x64"), "x"), ((1.0, "strided"), "x"), ((1.0, "list"), "x")],
)
def test_after_good_launches_bad_arguments_are_still_refused(bad: tuple, name: str) -> None:
    kernel = compiled(AXPBY)["k"]
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    kernel(1.0, x, y, group_size=1)
    kernel(1.0, x, y, group_size=1)
    alpha, which = bad
    value = {
        "x": x,
        "x64": np.ones(8),
        "strided": np.ones(16, np.float32)[::2],  # dynamic strides are not in this type
        "list": [1.0] * 8,
    }[which]
    y[:] = 0
    with pytest.raises(ArgumentError, match=f"argument %{name}"):
        kernel(alpha, value, y, group_size=1)
    assert not y.any()


def test_launches_in_flight_never_share_a_slot_array() -> None:
    buffers = SlotBuffers(3)
    first, second = buffers.take([1, 2, 3]), buffers.take([4, 5])
    assert first[1] != second[1]
    assert list(first[0]) == [1, 2, 3] and list(second[0])[:2] == [4, 5]
    buffers.give(first)
    assert buffers.take([7, 8, 9])[1] == first[1]  # a returned array is reused


@pytest.mark.parametrize(
    "array",
    [
        np.arange(10.0),
        np.arange(24, dtype=np.float32).reshape(4, 6, order="F")[1:, 2:],
        np.arange(10)[::-2],
        np.empty(0, np.int32),
        np.ones((3, 3)).T,
        np.ma.masked_array(np.arange(5.0)),  # a subclass has the same object layout
    ],
)
def test_data_address_is_the_arrays_first_element(array: np.ndarray) -> None:
    assert data_address(array) == array.ctypes.data


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="reads CPython objects")
def test_cpython_arrays_give_their_address_from_the_object_header() -> None:
    assert object.__basicsize__ == arguments._DATA_POINTER_OFFSET


SCALARS = """func @k(%a: {t}, %y: memref<{t}x1>) {{
    store %a, %y[0] : memref<{t}x1>
}}"""

EDGE_FLOATS = [0.0, -0.0, 1.5, -1e-40, 5e-324, 6e-8, 3e-8, 65504.0, 65519.0, 3.4028235e38,
               1e300, np.inf, -np.inf, np.nan, float.fromhex("0x1.fffffefffffffp127"),
               *np.array([0x7FF8_0000_0000_0123, 0xFFF0_0400_0000_0000], np.uint64).view(
                   np.float64).tolist()]  # fmt: skip


@pytest.mark.parametrize("t", ["f16", "f32", "f64", "bf16", "i1", "i8", "i16", "i32", "i64"])
def test_python_numbers_take_the_quick_slot_path_with_bindings_bits_and_errors(t: str) -> None:
    """A Python float or int fills its slot without binding (`_plain_number_slot`); its bits,
    and what it refuses, must be binding's: nearest-even rounding, infinities kept, values that
    would round to an infinity or do not fit refused, NaNs of every payload kept by numpy."""
    kernel = compiled(SCALARS.format(t=t))["k"]
    dtype = arguments.numpy_dtype(kernel.function.arguments[0].type)
    y = np.zeros(1, dtype)
    kernel(dtype.type(0), y, group_size=1)  # the layout is known from here on
    rng = np.random.default_rng(11)
    if dtype.kind == "f" or t == "bf16":
        randoms = rng.integers(0, 2**64, 300, dtype=np.uint64).view(np.float64).tolist()
        values = EDGE_FLOATS + randoms + (rng.standard_normal(300) * 1e4).tolist()
    else:
        values = [0, 1, -1, 2, 127, 128, -129, 2**15, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63),
                  2**64, *rng.integers(-(2**40), 2**40, 50).tolist()]  # fmt: skip
    for value in values:
        slots = kernel._known.slot_values((value, y), 1)
        try:
            expected = arguments.bind_scalar("a", kernel.function.arguments[0].type, value)
        except ArgumentError:
            assert slots is None, value  # binding reports it
            with pytest.raises(ArgumentError, match="%a"):
                kernel(value, y, group_size=1)
            continue
        assert slots is not None, value
        bits = int(np.array(expected).view(f"u{dtype.itemsize}"))
        assert slots[0] == bits, (value, hex(slots[0]), hex(bits))
        kernel(value, y, group_size=1)
        assert y.view(f"u{dtype.itemsize}")[0] == bits, value


class _ClaimsToBeAnArray:
    """An object whose `__class__` says ndarray, with the layout of an array launched before:
    read as an array, its header would give a wild data address."""

    def __init__(self, like: np.ndarray):
        self.dtype, self.shape, self.strides = like.dtype, like.shape, like.strides

    @property
    def __class__(self) -> type:
        return np.ndarray


def test_an_object_claiming_a_known_arrays_class_and_layout_goes_to_binding() -> None:
    kernel = compiled(AXPBY)["k"]
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    kernel(1.0, x, y, group_size=1)
    impostor = _ClaimsToBeAnArray(x)
    assert isinstance(impostor, np.ndarray)  # what `__class__` tells isinstance
    assert kernel._known.slot_values((1.0, impostor, y), 1) is None
    with pytest.raises(ArgumentError, match="argument %x"):
        kernel(1.0, impostor, y, group_size=1)


def test_combinations_of_layouts_are_remembered_up_to_a_bound() -> None:
    kernel = compiled(AXPBY)["k"]
    for n in range(1, 3 * kernel._known._KEPT):
        x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
        kernel(2.0, x, y, group_size=1)
        np.testing.assert_array_equal(y, 2 * x)
        assert 1 <= len(kernel._known._known) <= kernel._known._KEPT
    assert kernel._known.slot_values((2.0, x, y), 1) is not None


class _ShapeRaises:
    """A foreign object whose layout attributes raise (as a torch nested tensor's `shape`)."""

    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError("no sizes")

    dtype, strides = np.dtype(np.float32), (4,)


def test_the_known_layouts_ask_nothing_of_objects_that_are_not_numpy_arrays() -> None:
    kernel = compiled(AXPBY)["k"]
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    kernel(1.0, x, y, group_size=1)
    assert kernel._known.slot_values((1.0, _ShapeRaises(), y), 1) is None
    with pytest.raises(ArgumentError, match="argument %x: expected a numpy array"):
        kernel(1.0, _ShapeRaises(), y, group_size=1)
