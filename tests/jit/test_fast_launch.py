"""Native launches on known layouts (`nanotc.runtime.fast_launch`): a launch whose arguments
match the record of a combination binding accepted runs without the Python path; every other
launch declines to the Python path, unchanged, which checks and reports as before."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from nanotc.ir.types import ScalarType
from nanotc.runtime import fast_launch, pool
from nanotc.runtime.arguments import ArgumentError, bind_scalar
from nanotc.runtime.launcher import MAX_THREADS, Kernel, default_threads

from .helpers import compiled

pytestmark = pytest.mark.skipif(
    not fast_launch.available(), reason="this interpreter's objects are not CPython's"
)

BATCH = """func @k(%alpha: f32, %A: memref<f32x8x8x?>, %B: memref<f32x8x8x?>, %C: memref<f32x8x8x?>) {
    %i = group_id
    %a = subview %A[:, :, %i] : memref<f32x8x8x?>
    %b = subview %B[:, :, %i] : memref<f32x8x8x?>
    %c = subview %C[:, :, %i] : memref<f32x8x8x?>
    gemm.n.n %alpha, %a, %b, 1.0, %c : f32, memref<f32x8x8>, memref<f32x8x8>, f32, memref<f32x8x8>
}"""


def operands(batch: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple(  # type: ignore[return-value]
        np.asfortranarray(rng.uniform(-1, 1, (8, 8, batch)).astype(np.float32)) for _ in range(3)
    )


def expected(alpha: float, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return c + alpha * np.einsum("mkb,knb->mnb", a.astype(np.float64), b.astype(np.float64))


class PythonPath:
    """Counts a kernel's entries into its Python path: known layouts, then binding (a launch
    may enter both)."""

    def __init__(self, kernel: Kernel):
        self.entries = 0
        known = kernel._known
        slot_values, prepare = known.slot_values, kernel.prepare

        def counted_slot_values(*args: Any) -> Any:
            self.entries += 1
            return slot_values(*args)

        def counted_prepare(*args: Any, **kwargs: Any) -> Any:
            self.entries += 1
            return prepare(*args, **kwargs)

        known.slot_values = counted_slot_values  # type: ignore[method-assign]
        kernel.prepare = counted_prepare  # type: ignore[method-assign]


@pytest.fixture
def kernel() -> Iterator[Kernel]:
    kernel = compiled(BATCH)["k"]
    assert kernel._fast is not None
    yield kernel
    kernel._fast.use(None)  # the next test's kernel (the same, cached) starts from nothing


def test_a_known_layout_launches_natively_on_fresh_arrays_and_scalars(kernel: Kernel) -> None:
    a, b, c = operands()
    kernel(1.0, a, b, c, group_size=6, num_threads=1)  # binding learns the layout
    python = PythonPath(kernel)
    for launch in range(4):
        a, b, c = operands(seed=launch + 1)
        want = expected(0.5 * launch, a, b, c)
        kernel(0.5 * launch, a, b, c, group_size=6 - launch, num_threads=1)
        done = 6 - launch
        np.testing.assert_allclose(c[:, :, :done], want[:, :, :done], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(c[:, :, done:], operands(seed=launch + 1)[2][:, :, done:])
    assert python.entries == 0


@pytest.mark.parametrize(
    "change",
    ["subclass", "equal_dtype", "shape", "group_int16", "alpha_longdouble"],
)
def test_other_launches_take_the_python_path_and_run_as_before(kernel: Kernel, change: str) -> None:
    a, b, c = operands()
    kernel(1.0, a, b, c, group_size=6, num_threads=1)
    python = PythonPath(kernel)
    alpha: Any = 1.0
    groups: Any = 6
    threads: Any = 1
    a, b, c = operands(seed=9)
    if change == "subclass":
        a = a.view(np.ma.MaskedArray).data.view(type("Sub", (np.ndarray,), {}))
    elif change == "equal_dtype":  # equal, but another dtype object
        b = b.view(np.dtype(np.float32, metadata={"unit": "m"}))
        assert b.dtype == np.float32
    elif change == "shape":
        a, b, c = operands(batch=7, seed=9)
        groups = 7
    elif change == "group_int16":  # numpy ints other than int64 and int32 are not read
        groups = np.int16(6)
    elif change == "alpha_longdouble":
        alpha = np.longdouble(1.0)
    want = expected(1.0, a, b, c)
    kernel(alpha, a, b, c, group_size=groups, num_threads=threads)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    assert python.entries >= 1


def test_thread_counts_past_the_cap_are_refused_where_the_pool_could_run_them(
    kernel: Kernel,
) -> None:
    """The native launch declines `num_threads` past MAX_THREADS, as binding refuses it,
    even where the pool has workers enough for its chunks (one per work-group)."""
    a, b, c = operands()
    kernel(1.0, a, b, c, group_size=6, num_threads=6)  # the pool grows to five workers
    kernel(1.0, a, b, c, group_size=6, num_threads=6)  # natively
    before = c.copy()
    with pytest.raises(ValueError, match=f"num_threads must be an integer from 1 to {MAX_THREADS}"):
        kernel(1.0, a, b, c, group_size=6, num_threads=MAX_THREADS + 1)
    np.testing.assert_array_equal(c, before)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        (("C_read_only",), {}, ArgumentError, "argument %C: expected a writeable array"),
        (("C_is_A",), {}, ArgumentError, "argument %C"),
        (("C_strided",), {}, ArgumentError, "argument %C: expected element stride 64 in mode 2"),
        (("alpha_huge",), {}, ArgumentError, "argument %alpha"),
        (("alpha_int",), {}, None, None),
        (("too_few",), {}, TypeError, "4 arguments"),
        ((), {"group_size": 7}, ArgumentError, "at least 7 elements in mode 2"),
        ((), {"group_size": True}, ValueError, "group_size"),
        ((), {"group_size": -1}, ValueError, "group_size"),
        ((), {"num_threads": 0}, ValueError, "num_threads"),
    ],
)
def test_launches_binding_refuses_are_refused_after_native_ones(
    kernel: Kernel, args: tuple, kwargs: dict, error: type | None, match: str | None
) -> None:
    a, b, c = operands()
    kernel(1.0, a, b, c, group_size=6, num_threads=1)
    kernel(1.0, a, b, c, group_size=6, num_threads=1)
    before = c.copy()
    launch: list[Any] = [1.0, a, b, c]
    if args == ("C_read_only",):
        c.flags.writeable = False
    elif args == ("C_is_A",):
        launch[3] = a
    elif args == ("C_strided",):
        launch[3] = np.asfortranarray(np.concatenate([c, c], axis=2))[:, :, ::2]
    elif args == ("alpha_huge",):
        launch[0] = 1e300  # rounds to an infinity in f32
    elif args == ("alpha_int",):
        launch[0] = 2
    elif args == ("too_few",):
        launch = launch[:3]
    options = {"group_size": 6, "num_threads": 1, **kwargs}
    if error is None:
        kernel(*launch, **options)
        np.testing.assert_allclose(c, expected(2.0, a, b, before), rtol=1e-5, atol=1e-5)
        return
    a_before = a.copy()
    with pytest.raises(error, match=match):
        kernel(*launch, **options)
    np.testing.assert_array_equal(c, before)
    np.testing.assert_array_equal(a, a_before)


def test_native_launches_release_the_gil_while_the_kernel_runs() -> None:
    """Another Python thread runs during a long native launch (a kernel of seconds' work,
    against a wait of a twentieth of a second)."""
    text = """func @spin(%A: memref<f64x64x64>, %B: memref<f64x64x64>, %C: memref<f64x64x64>,
                  %reps: index) {
    for %r = 0, %reps {
        gemm.n.n 1.0, %A, %B, 0.0, %C : f64, memref<f64x64x64>, memref<f64x64x64>, f64, memref<f64x64x64>
    }
}"""
    kernel = compiled(text)["spin"]
    a, b, c = (np.asfortranarray(np.eye(64)) for _ in range(3))
    kernel(a, b, c, 1, group_size=1)  # learned: the next launch is native
    done = threading.Event()

    def long_launch() -> None:
        kernel(a, b, c, 50_000, group_size=1)  # 26 GFLOP: a quarter second or more
        done.set()

    python = PythonPath(kernel)
    worker = threading.Thread(target=long_launch)
    worker.start()
    time.sleep(0.05)
    ran_during = not done.is_set()
    worker.join()
    assert ran_during
    assert python.entries == 0
    np.testing.assert_array_equal(c, np.eye(64))


def test_python_threads_launch_one_kernel_natively_at_once(kernel: Kernel) -> None:
    a, b, c = operands()
    kernel(1.0, a, b, c, group_size=6, num_threads=1)
    python = PythonPath(kernel)
    failures: list[str] = []

    def launches(seed: int) -> None:
        for launch in range(200):
            a, b, c = operands(seed=seed * 1000 + launch)
            want = expected(1.0, a, b, c)
            kernel(1.0, a, b, c, group_size=6, num_threads=1)
            if not np.allclose(c, want, rtol=1e-5, atol=1e-5):
                failures.append(f"thread {seed} launch {launch}")

    threads = [threading.Thread(target=launches, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert python.entries == 0


def test_the_record_in_use_follows_the_last_layout_launched_through_python(kernel: Kernel) -> None:
    """Two layouts in turn: each launch of the other one declines once, then is native."""
    small, large = operands(batch=6), operands(batch=9)
    kernel(1.0, *small, group_size=6, num_threads=1)
    kernel(1.0, *large, group_size=9, num_threads=1)
    python = PythonPath(kernel)
    for layout, groups in ((small, 6), (small, 6), (large, 9), (large, 9), (small, 6)):
        kernel(1.0, *layout, group_size=groups, num_threads=1)
    assert python.entries == 3  # each found in the known layouts


STORE_SCALAR = """func @k(%a: {t}, %y: memref<{t}x1>) {{
    store %a, %y[0] : memref<{t}x1>
}}"""
SIXTEEN_BITS = [("f16", np.float16), ("bf16", ml_dtypes.bfloat16)]


def rounding_cases() -> list[float]:
    """Random magnitudes from subnormal to near the f16 limit, and for every exponent the
    values at, just past and between the ties of f16's and bf16's last significand bits."""
    rng = np.random.default_rng(0)
    values = [float(v) for v in rng.standard_normal(3000) * 10.0 ** rng.integers(-12, 5, 3000)]
    f16_ties = [1 + 2**-11, 1 + 2**-11 + 2**-40, 1 + 3 * 2**-11, 1 + 3 * 2**-11 - 2**-40]
    # bf16's, and values f32 rounds onto them (3 * 2**-8 - 2**-30 rounds up to even only so)
    bf16_ties = [1 + 2**-8, 1 + 2**-8 + 2**-20, 1 + 3 * 2**-8, 1 + 3 * 2**-8 - 2**-30]
    fractions = [1, 1 + 2**-24, *f16_ties, *bf16_ties]
    for e in range(-30, 16):
        values += [sign * f * 2.0**e for f in fractions for sign in (1, -1)]
    return values + [0.0, -0.0, 65504.0, 65519.99, 5e-324, 3.3895313892515355e38]


@pytest.mark.parametrize(("t", "dtype"), SIXTEEN_BITS)
def test_f16_and_bf16_scalars_launch_natively_rounded_as_binding_rounds(t: str, dtype: Any) -> None:
    """Ties to even: numpy rounds a float to f16 directly, ml_dtypes to f32 and then bf16."""
    kernel = compiled(STORE_SCALAR.format(t=t))["k"]
    y = np.zeros(1, dtype)
    kernel(1.0, y, group_size=1)
    python = PythonPath(kernel)
    largest = 65519.99 if t == "f16" else 3.38e38  # below what rounds to an infinity
    for value in (v for v in rounding_cases() if abs(v) <= largest):
        kernel(value, y, group_size=1)
        assert y.view(np.uint16)[0] == np.array([dtype(value)]).view(np.uint16)[0], value
    assert python.entries == 0


@pytest.mark.parametrize(("t", "dtype"), SIXTEEN_BITS)
def test_f16_and_bf16_scalars_past_range_or_not_finite_take_the_python_path(
    t: str, dtype: Any
) -> None:
    """A finite value that rounds to an infinity is binding's to refuse; an infinity or a NaN
    is kept, as binding keeps it."""
    kernel = compiled(STORE_SCALAR.format(t=t))["k"]
    y = np.zeros(1, dtype)
    kernel(1.0, y, group_size=1)
    python = PythonPath(kernel)
    with pytest.raises(ArgumentError, match="argument %a: expected a real number within"):
        kernel(65520.0 if t == "f16" else 3.4e38, y, group_size=1)
    for kept in (math.inf, -math.inf):
        kernel(kept, y, group_size=1)
        assert float(y[0]) == kept
    kernel(math.nan, y, group_size=1)
    assert math.isnan(float(y[0]))
    assert python.entries >= 4


REALS = [("f64", np.float64), ("f32", np.float32), *SIXTEEN_BITS]


def every_number_read_natively() -> list[Any]:
    """Python floats, numpy float64s and float32s of the rounding cases, far past f32's range
    and at it; every f16 and bfloat16 bit pattern; Python, int64 and int32 integers around
    2^53 and the 16-bit limits."""
    rng = np.random.default_rng(1)
    huge = [float(v) for v in rng.standard_normal(300) * 10.0 ** rng.integers(-320, 308, 300)]
    doubles = rounding_cases() + huge + [3.4028235e38, 3.4028236e38, 3.5e38, math.inf, math.nan]
    with np.errstate(over="ignore"):
        singles = [np.float32(v) for v in doubles]
    patterns = np.arange(1 << 16, dtype=np.uint16)
    integers = [0, 1, -1, 255, 65504, 65519, 65520, 16777217, 2**31 - 1, -(2**31)]
    integers += [2**53 - 1, 2**53, 2**53 + 1, -(2**53), -(2**53) - 1, 2**62 + 1, -(2**63)]
    return [
        *doubles,
        *(np.float64(v) for v in doubles),
        *singles,
        *patterns.view(np.float16),
        *patterns.view(ml_dtypes.bfloat16),
        *integers,
        2**64,
        *(np.int64(v) for v in integers),
        *(np.int32(v) for v in integers if -(2**31) <= v < 2**31),
    ]


def bits(value: Any) -> int | None:
    """A stored scalar's bits; None for a NaN, whose payload binding and the native launch
    may quiet differently."""
    if math.isnan(float(value)):
        return None
    return int(np.array([value]).view(f"u{np.dtype(type(value)).itemsize}")[0])


@pytest.mark.parametrize(("t", "dtype"), REALS)
def test_numpy_scalars_and_integers_launch_natively_as_binding_binds_them(
    t: str, dtype: Any
) -> None:
    """Each number is stored by a launch and compared with binding's value of it
    (`bind_scalar`), or refused as binding refuses it. Only numbers the native code may not
    read (beyond 2^53, NaN and infinite 16-bit floats, or rounding to an infinity) enter
    the Python path."""
    kernel = compiled(STORE_SCALAR.format(t=t))["k"]
    y = np.zeros(1, dtype)
    kernel(1.0, y, group_size=1)
    python = PythonPath(kernel)
    declined = 0
    for value in every_number_read_natively():
        try:
            want = bind_scalar("%a", ScalarType(t), value)
        except ArgumentError:
            with pytest.raises(ArgumentError, match="argument %a"):
                kernel(value, y, group_size=1)
            continue
        entries = python.entries
        kernel(value, y, group_size=1)
        assert bits(y[0]) == bits(want), (type(value), value)
        if python.entries > entries:
            declined += 1
            assert not native_reads(value, t), (type(value), value)
    assert declined < 3000  # NaN patterns, infinities, integers past 2^53


def native_reads(value: Any, t: str) -> bool:
    """Whether the native launch is meant to read `value` for a scalar of type `t`."""
    if isinstance(value, int | np.integer):
        return abs(int(value)) <= 2**53
    finite = math.isfinite(float(value))
    if isinstance(value, np.float16 | ml_dtypes.bfloat16):
        return finite
    return finite or t in ("f32", "f64")  # f16 and bf16 refuse infinities natively


@pytest.mark.parametrize("t", ["i8", "i32", "i64", "index"])
def test_numpy_int64_and_int32_launch_natively_within_the_range(t: str) -> None:
    kernel = compiled(STORE_SCALAR.format(t=t))["k"]
    dtype = np.int64 if t == "index" else np.dtype(t.replace("i", "int"))
    y = np.zeros(1, dtype)
    kernel(1, y, group_size=np.int64(1))
    python = PythonPath(kernel)
    info = np.iinfo(dtype)
    for value in (np.int64(info.max), np.int64(info.min), np.int32(-5), np.int32(7)):
        if info.min <= value <= info.max:
            kernel(value, y, group_size=np.int32(1), num_threads=np.int64(1))
            assert y[0] == value
    assert python.entries == 0
    if t != "i64" and t != "index":
        with pytest.raises(ArgumentError, match="argument %a: expected an integer"):
            kernel(np.int64(info.max) + 1, y, group_size=1)
    with pytest.raises(ArgumentError, match="argument %a: expected an integer"):
        kernel(np.float64(1.0), y, group_size=1)


@pytest.mark.parametrize("threads", [2, 3, None])
def test_launches_of_several_chunks_run_natively_on_the_pool(kernel: Kernel, threads: int | None):
    """num_threads, or without it enough work-groups for each core (98 of f32 8^3 a thread)."""
    if threads is None and default_threads() < 2:
        pytest.skip("one core: a launch without num_threads is one chunk")
    pool.pool_for(3)  # two workers, published
    a, b, c = operands(batch=200)
    kernel(1.0, a, b, c, group_size=200, num_threads=threads)
    python = PythonPath(kernel)
    for launch in range(3):
        a, b, c = operands(batch=200, seed=launch + 1)
        want = expected(1.0, a, b, c)
        kernel(1.0, a, b, c, group_size=200 - launch, num_threads=threads)
        done = 200 - launch
        np.testing.assert_allclose(c[:, :, :done], want[:, :, :done], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(
            c[:, :, done:], operands(batch=200, seed=launch + 1)[2][:, :, done:]
        )
    assert python.entries == 0


def test_a_pool_another_launch_has_sends_the_launch_to_wait_in_python(kernel: Kernel) -> None:
    """The pool's `launching` word (its third) held as by another launch: the native launch
    declines; the Python path then waits for the pool, given back here on its entry."""
    process_pool = pool.pool_for(2)
    a, b, c = operands(batch=8)
    kernel(1.0, a, b, c, group_size=8, num_threads=2)
    launching = process_pool._state[16:24].view(np.int64)
    python = PythonPath(kernel)
    slot_values = kernel._known.slot_values

    def give_back_then_go_on(*args: Any) -> Any:
        launching[0] = 0
        return slot_values(*args)

    kernel._known.slot_values = give_back_then_go_on  # type: ignore[method-assign]
    launching[0] = 1
    want = expected(1.0, a, b, c)
    kernel(1.0, a, b, c, group_size=8, num_threads=2)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
    assert python.entries == 1
    assert launching[0] == 0


def test_a_pool_of_too_few_workers_grows_through_python_first(kernel: Kernel) -> None:
    threads = pool.pool_for(2).workers + 2
    a, b, c = operands(batch=threads)
    kernel(1.0, a, b, c, group_size=threads, num_threads=1)
    python = PythonPath(kernel)
    for _ in range(2):
        kernel(1.0, a, b, c, group_size=threads, num_threads=threads)
    assert python.entries == 1  # the first grows the pool; the second runs natively on it
    assert pool.pool_for(2).workers >= threads - 1
