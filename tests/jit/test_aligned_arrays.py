"""nanotc.empty_aligned, zeros_aligned and aligned: arrays on a chosen boundary, in the
layouts kernels take, and kernels computing on them as on numpy's own arrays."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import nanotc

BATCHED_BF16 = """
func @bgemm(%A: memref<bf16x56x9x?>, %B: memref<bf16x9x9x?>, %C: memref<f32x56x9x?>) {
    %g = group_id
    %a = subview %A[:, :, %g] : memref<bf16x56x9x?>
    %b = subview %B[:, :, %g] : memref<bf16x9x9x?>
    %c = subview %C[:, :, %g] : memref<f32x56x9x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<bf16x56x9>, memref<bf16x9x9>, f32, memref<f32x56x9>
}
"""


def off_line(shape: tuple[int, ...], dtype: type, order: str = "F") -> np.ndarray:
    """An array whose data start 16 bytes past a 64-byte line, as numpy's large ones do."""
    element = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * element.itemsize
    buffer = np.zeros(nbytes + 128, np.uint8)
    start = -buffer.ctypes.data % 64 + 16
    return np.ndarray(shape, element, buffer=buffer[start : start + nbytes], order=order)


@pytest.mark.parametrize("alignment", [64, 128, 4096])
@pytest.mark.parametrize("order", ["F", "C"])
def test_data_start_on_the_boundary_in_the_asked_layout(alignment: int, order: str) -> None:
    for shape in [(1000, 100), (56, 9, 7), (0, 5), ()]:
        a = nanotc.empty_aligned(shape, np.float64, order=order, alignment=alignment)  # type: ignore[arg-type]
        assert a.ctypes.data % alignment == 0
        assert a.shape == shape and a.dtype == np.float64 and a.flags.writeable
        assert a.flags.f_contiguous if order == "F" else a.flags.c_contiguous


def test_nanotc_type_names_win_over_numpy_codes() -> None:
    assert nanotc.empty_aligned(4, "bf16").dtype == ml_dtypes.bfloat16
    assert nanotc.empty_aligned(4, "f16").dtype == np.float16  # numpy's "f16" is a float128
    assert nanotc.empty_aligned(4, "index").dtype == np.int64
    assert nanotc.empty_aligned(4, np.int32).dtype == np.int32


def test_zeros_are_zero_and_outlive_their_allocation() -> None:
    z = nanotc.zeros_aligned((300, 301), "f32")
    assert not z.any() and z.ctypes.data % 64 == 0
    z[299, 300] = 5.0  # the view keeps its buffer: writing after the call is safe
    assert z.sum() == 5.0


def test_aligned_keeps_an_aligned_array_and_copies_one_off_the_line() -> None:
    on_line = nanotc.zeros_aligned((8, 8))
    assert nanotc.aligned(on_line) is on_line
    off = off_line((40, 30), np.float32)
    off[...] = np.arange(1200, dtype=np.float32).reshape(40, 30)
    assert off.ctypes.data % 64 == 16
    copy = nanotc.aligned(off)
    assert copy.ctypes.data % 64 == 0 and copy.flags.f_contiguous
    np.testing.assert_array_equal(copy, off)


def test_aligned_copies_keep_row_major_and_make_views_column_major() -> None:
    row_major = off_line((40, 30), np.float32, order="C")
    copy = nanotc.aligned(row_major, alignment=8192)
    assert copy.flags.c_contiguous and not copy.flags.f_contiguous
    assert copy.ctypes.data % 8192 == 0
    view = off_line((40, 30), np.float64)[::2, 1::3]
    copy = nanotc.aligned(view)
    assert copy.flags.f_contiguous and copy.ctypes.data % 64 == 0
    np.testing.assert_array_equal(copy, view)


def test_an_impossible_size_says_which_array_it_was() -> None:
    with pytest.raises(
        MemoryError, match=r"shape \(1099511627776, 1099511627776\) and dtype float32"
    ):
        nanotc.empty_aligned((2**40, 2**40), "f32")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: nanotc.empty_aligned((3, 3), alignment=48), "power of two of at least 4 bytes"),
        (lambda: nanotc.empty_aligned((3, 3), np.float64, alignment=4), "got 4"),
        (lambda: nanotc.empty_aligned((3, 3), alignment=True), "got True"),
        (lambda: nanotc.empty_aligned((3, 3), order="K"), "order must be 'F' or 'C'"),
        (lambda: nanotc.empty_aligned((3, -1)), r"non-negative integers, got \(3, -1\)"),
        (lambda: nanotc.empty_aligned((3, 2.5)), "non-negative integers"),
        (lambda: nanotc.empty_aligned((3, True)), "non-negative integers"),
        (lambda: nanotc.aligned([1.0, 2.0]), "must be a numpy array, got list"),
        (lambda: nanotc.empty_aligned(4096, object), "hold no Python objects, got object"),
        (lambda: nanotc.zeros_aligned(8, [("x", "f4"), ("o", "O")]), "hold no Python objects"),
        (lambda: nanotc.aligned(np.array([1, None])[1:]), "hold no Python objects"),
    ],
)
def test_bad_requests_say_what_is_wrong(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError), match=message):
        call()


def test_a_batched_gemm_on_aligned_operands_computes_what_it_does_off_the_line(
    rng: np.random.Generator,
) -> None:
    kernel = nanotc.compile(BATCHED_BF16)["bgemm"]
    batch = 12
    shapes = [(56, 9, batch), (9, 9, batch), (56, 9, batch)]
    types = [ml_dtypes.bfloat16, ml_dtypes.bfloat16, np.float32]
    off = [off_line(s, t) for s, t in zip(shapes, types)]
    for x in off[:2]:
        x[...] = rng.standard_normal(x.shape).astype(x.dtype)
    on = [nanotc.aligned(x) for x in off]
    assert all(x.ctypes.data % 64 == 16 for x in off) and all(x.ctypes.data % 64 == 0 for x in on)
    kernel(*off, group_size=batch)
    kernel(*on, group_size=batch)
    np.testing.assert_array_equal(on[2], off[2])
    a, b = (x.astype(np.float64) for x in off[:2])
    np.testing.assert_allclose(on[2], np.einsum("mkb,knb->mnb", a, b), rtol=1e-5, atol=1e-5)
