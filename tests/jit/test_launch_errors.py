"""Every bad launch argument is a Python exception naming the argument, what was expected and
what was given, raised before any native code runs (the output the kernel would write first
stays untouched); the reference evaluator raises the same errors (it shares the binder)."""

from __future__ import annotations

import math
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from nanotc.runtime.arguments import ArgumentError, Group
from nanotc.runtime.launcher import MAX_THREADS

from .helpers import compiled, run_reference

KERNEL = """func @k(%out: memref<f32x4>, %a: memref<f32x4x3>, %d: memref<f64x?x?,strided<1,?>>,
                   %g: group<memref<i32x2x2>>, %h: group<memref<f32x3>, offset: ?>,
                   %s: group<memref<f32x3>, offset: 2>, %x: f32, %n: i8, %flag: i1,
                   %i: index) {
    %one = cast 1.0 : f32 -> f32
    foreach %j = 0, 4 {
        store %one, %out[%j] : memref<f32x4>
    }
    %gid = group_id
    %m = load %g[%gid] : group<memref<i32x2x2>>
    %z = cast 0 : index -> index
    %hm = load %h[%z] : group<memref<f32x3>, offset: ?>
    %sm = load %s[%gid] : group<memref<f32x3>, offset: 2>
}"""

GROUPS = 3


def good() -> dict[str, Any]:
    return {
        "out": np.zeros(4, np.float32),
        "a": np.zeros((4, 3), np.float32, order="F"),
        "d": np.zeros((5, 6), order="F"),
        "g": [np.zeros((2, 2), np.int32, order="F") for _ in range(GROUPS)],
        "h": Group([np.zeros(3, np.float32)], offset=0),
        "s": [np.zeros(6, np.float32)[:3] for _ in range(GROUPS)],
        "x": 1.5,
        "n": -7,
        "flag": True,
        "i": 12,
    }


def launch(args: dict[str, Any], runner: str = "native", **options: Any) -> None:
    values = list(args.values())
    kwargs = {"group_size": GROUPS} | options
    if runner == "native":
        compiled(KERNEL)["k"](*values, **kwargs)
    else:
        run_reference(KERNEL, values, kwargs["group_size"])


def test_the_good_arguments_launch() -> None:
    args = good()
    launch(args)
    assert (args["out"] == 1).all()


def bad_float32_strides() -> np.ndarray:
    memory = np.zeros(32, np.uint8)
    return as_strided(memory.view(np.float32), shape=(4, 3), strides=(6, 24))  # 6 bytes


def c_ordered() -> np.ndarray:
    return np.zeros((4, 3), np.float32)


def member_list(n: int, **replace: Any) -> list[np.ndarray]:
    members = [np.zeros((2, 2), np.int32, order="F") for _ in range(n)]
    for index, value in replace.items():
        members[int(index[1:])] = value
    return members


# (argument, bad value, pattern of the expected part, pattern of the actual part)
CASES = {
    "wrong dtype": ("a", np.zeros((4, 3), order="F"), r"float32 array", r"float64 array"),
    "wrong ndim": ("a", np.zeros(12, np.float32), r"array with 2 dimensions", r"shape \(12,\)"),
    "not an array": ("a", [[0.0] * 3] * 4, r"a numpy array for memref<f32x4x3>", r"list"),
    "static size": (
        "a",
        np.zeros((4, 5), np.float32, order="F"),
        r"size 3 in mode 1",
        r"shape \(4, 5\)",
    ),
    "static stride": ("a", c_ordered(), r"element stride 1 in mode 0", r"element strides \(3, 1\)"),
    "static stride of a view": (
        "a",
        np.zeros((8, 3), np.float32, order="F")[::2],
        r"element stride 1 in mode 0",
        r"element strides \(2, 8\)",
    ),
    "dynamic type, static stride": (
        "d",
        np.zeros((5, 6)),
        r"element stride 1 in mode 0",
        r"element strides \(6, 1\)",
    ),
    "non-multiple strides": (
        "a",
        bad_float32_strides(),
        r"multiples of the element size",
        r"float32 array of shape \(4, 3\) with byte strides \(6, 24\)",
    ),
    "too few group members": ("g", member_list(2), r"at least 3 group members", r"^2$"),
    "bad group member": (
        "g[1]",
        member_list(3, m1=np.zeros((2, 2), np.int64, order="F")),
        r"int32 array",
        r"int64 array",
    ),
    "group member size": (
        "g[2]",
        member_list(3, m2=np.zeros((2, 3), np.int32, order="F")),
        r"size 2 in mode 1",
        r"shape \(2, 3\)",
    ),
    "batched group ndim": (
        "g",
        np.zeros((2, 2), np.int32, order="F"),
        r"array with 3 dimensions \(last one indexes the group\)",
        r"shape \(2, 2\)",
    ),
    "batched group layout": (
        "g[0]",
        np.zeros((2, 2, GROUPS), np.int32),
        r"element stride",
        r"int32 array",
    ),
    "batched group stride": (
        "g",
        as_strided(np.zeros(64, np.int32), (2, 2, GROUPS), (4, 8, 18)),  # members 18 bytes apart
        r"multiples of the element size",
        r"int32 array of shape \(2, 2, 3\) with byte strides \(4, 8, 18\)",
    ),
    "group not a sequence": ("g", 5, r"a sequence of arrays or one batched array", r"int 5"),
    "negative offset": (
        "h",
        Group([np.zeros(3, np.float32)], offset=-1),
        r"a group offset from 0 to 9223372036854775807",
        r"-1",
    ),
    "offset past an index": (
        "h",
        Group([np.zeros(3, np.float32)], offset=1 << 64),
        r"a group offset from 0 to 9223372036854775807",
        r"18446744073709551616",
    ),
    "float offset": (
        "h",
        Group([np.zeros(3, np.float32)], offset=2.0),
        r"an integer group offset",
        r"float 2.0",
    ),
    "str offset": (
        "h",
        Group([np.zeros(3, np.float32)], offset="2"),
        r"an integer group offset",
        r"str '2'",
    ),
    "offset far past the memory": (
        "h[0]",
        Group([np.zeros(3, np.float32)], offset=np.int64(1 << 62)),
        r"memory for the member 4611686018427387904 elements after",
        r"shape \(3,\)",
    ),
    "offset past the memory": (
        "h[0]",
        Group([np.zeros(3, np.float32)], offset=1),
        r"memory for the member 1 elements after",
        r"shape \(3,\)",
    ),
    "static offset mismatch": (
        "s",
        Group([np.zeros(6, np.float32)[:3]] * GROUPS, offset=1),
        r"offset 2",
        r"offset 1",
    ),
    "static offset past the memory": (
        "s[0]",
        [np.zeros(4, np.float32)[:3]] * GROUPS,
        r"memory for the member 2 elements after",
        r"float32",
    ),
    "float for f32 given a string": ("x", "1.5", r"a real number \(f32\)", r"str '1.5'"),
    "bool for a float": ("x", True, r"a real number \(f32\)", r"bool True"),
    "array for a scalar": ("x", np.zeros(2), r"a real number", r"float64 array"),
    "f32 past its range": ("x", 1e39, r"a real number within f32's range", r"float 1e\+39"),
    "integer past every float": ("x", 10**400, r"within f32's range", r"int 1000"),
    "numpy f64 past f32": ("x", np.float64(-3.5e38), r"within f32's range", r"float64"),
    "long double past f64": ("x", np.longdouble("1e400"), r"within f32's range", r"longdouble"),
    "float for an integer": ("n", 1.0, r"an integer \(i8\)", r"float 1.0"),
    "bool for an integer": ("n", True, r"an integer \(i8\)", r"bool True"),
    "numpy bool for an integer": ("i", np.bool_(False), r"an integer \(index\)", r"bool"),
    "integer out of range": ("n", 300, r"an integer \(i8\) in \[-128, 127\]", r"300"),
    "negative out of range": ("n", -129, r"an integer \(i8\) in \[-128, 127\]", r"-129"),
    "numpy float for an integer": ("i", np.float64(3), r"an integer \(index\)", r"float64"),
    "i1 out of range": ("flag", 2, r"an integer \(i1\) in \[0, 1\]", r"2"),
    "index out of range": (
        "i",
        1 << 63,
        r"an integer \(index\) in \[-9223372036854775808, 9223372036854775807\]",
        r"9223372036854775808",
    ),
    "None for index": ("i", None, r"an integer \(index\)", r"NoneType None"),
}


@pytest.mark.parametrize("runner", ["native", "reference"])
@pytest.mark.parametrize("case", list(CASES))
def test_bad_argument(case: str, runner: str) -> None:
    name, value, expected, actual = CASES[case]
    args = good()
    args[name.split("[")[0]] = value
    with pytest.raises(ArgumentError) as info:
        launch(args, runner)
    error = info.value
    assert error.name == name
    assert re.search(expected, error.expected), error.expected
    assert re.search(actual, error.actual), error.actual
    message = str(error)
    assert message.startswith(f"argument %{name}: expected ") and error.actual in message
    assert isinstance(error, ValueError)
    assert not args["out"].any(), "native code ran before the error"


@pytest.mark.parametrize("runner", ["native", "reference"])
def test_wrong_number_of_arguments_names_the_parameters(runner: str) -> None:
    values = list(good().values())
    for wrong in (values[:-1], [*values, 1]):
        with pytest.raises(TypeError, match=r"@k takes 10 arguments \(%out, %a, .*%i\), \d+ given"):
            if runner == "native":
                compiled(KERNEL)["k"](*wrong, group_size=GROUPS)
            else:
                run_reference(KERNEL, wrong, GROUPS)


@pytest.mark.parametrize(
    "group_size",
    [-1, 1.5, "3", None, 2.0, 2**63, 2**64],
    ids=["negative", "float", "str", "None", "float2", "past-int64", "wraps-to-zero"],
)
def test_bad_group_size(group_size: Any) -> None:
    """Counts the native entry's int64 cannot hold are refused, not wrapped (also by a
    launch whose arrays have layouts bound before, which skips binding)."""
    launch(good())
    args = good()
    message = r"group_size must be an integer from 0 to 9223372036854775807, got "
    with pytest.raises(ValueError, match=message):
        launch(args, group_size=group_size)
    assert not args["out"].any()


@pytest.mark.parametrize(
    "threads",
    [0, -2, 1.0, "2", MAX_THREADS + 1, 2**40],
    ids=["zero", "negative", "float", "str", "past-the-cap", "huge"],
)
def test_bad_num_threads(threads: Any) -> None:
    """Counts past MAX_THREADS are refused before any thread starts (the pool would start one
    per chunk: tens of thousands before the system refused), also by a launch whose arrays
    have layouts bound before."""
    launch(good())
    args = good()
    message = rf"num_threads must be an integer from 1 to {MAX_THREADS}, got "
    with pytest.raises(ValueError, match=message):
        launch(args, num_threads=threads)
    assert not args["out"].any()


@pytest.mark.parametrize("option", ["group_size", "num_threads"])
def test_bool_is_not_a_count(option: str) -> None:
    """True is an int in Python, but never a group size or thread count (the reference
    evaluator rejects it as a group size too)."""
    args = good()
    with pytest.raises(ValueError, match=f"{option} must be"):
        launch(args, **{option: True})
    assert not args["out"].any()


def test_numpy_integers_are_counts() -> None:
    args = good()
    args["h"] = Group([np.zeros(6, np.float32)[:3]], offset=np.int64(3))  # and an offset
    launch(args, group_size=np.int64(GROUPS), num_threads=np.int32(2))
    assert (args["out"] == 1).all()


def test_error_in_the_last_group_member_stops_the_whole_launch() -> None:
    """Group members are all checked before any work-group runs."""
    args = good()
    args["g"] = member_list(3, m2=np.zeros((2, 2), np.float32, order="F"))
    with pytest.raises(ArgumentError, match=r"%g\[2\]"):
        launch(args, num_threads=2)
    assert not args["out"].any()


def test_a_layout_checked_before_does_not_let_a_wrong_one_through() -> None:
    """Launches remember the layouts (dtype, shape, strides) binding accepted and skip it for
    them: the same kernel launched with good arrays, then with each bad one, and good ones
    again, still refuses every bad one and reads every array at its own address."""
    text = """func @k(%x: memref<f32x4x3>, %y: memref<f32x4x3>) {
        axpby.n 1.0, %x, 0.0, %y : f32, memref<f32x4x3>, f32, memref<f32x4x3>
    }"""
    kernel = compiled(text)["k"]
    rng = np.random.default_rng(3)
    bad = {
        "C order": np.zeros((4, 3), np.float32),
        "f64": np.zeros((4, 3), order="F"),
        "3 x 4": np.zeros((3, 4), np.float32, order="F"),
        "retyped in place": np.zeros((4, 3), np.float32, order="F"),
    }
    for name, array in bad.items():
        x = np.asfortranarray(rng.standard_normal((4, 3), dtype=np.float32))
        y = np.zeros((4, 3), np.float32, order="F")
        kernel(x, y, group_size=1)
        np.testing.assert_array_equal(y, x)
        if name == "retyped in place":
            kernel(x, array, group_size=1)
            array.dtype = np.int32
            array[...] = 0
        with pytest.raises(ArgumentError, match="argument %y"):
            kernel(x, array, group_size=1)
        assert not array.any(), name


@pytest.mark.parametrize(
    ("element", "dtype", "largest", "overflowing"),
    [
        ("f16", np.float16, 65519.0, 65520.0),
        ("bf16", ml_dtypes.bfloat16, float.fromhex("0x1.fefffep127"), 3.4e38),
        ("f32", np.float32, float.fromhex("0x1.fffffefffp127"), float.fromhex("0x1.ffffffp127")),
    ],
)
def test_float_scalars_that_round_to_infinity_are_refused(
    element: str, dtype: type, largest: float, overflowing: float
) -> None:
    """The boundary is exact: a value that rounds to the type's largest finite one binds,
    the first that rounds to infinity does not; infinities and NaN given as such bind."""
    kernel = compiled(f"""func @k(%x: {element}, %out: memref<{element}x1>) {{
    %z = cast 0 : index -> index
    store %x, %out[%z] : memref<{element}x1>
}}""")["k"]
    out = np.zeros(1, dtype)
    for value in (largest, -largest, math.inf, -math.inf):
        kernel(value, out, group_size=1)
        assert float(out[0]) == float(dtype(value)) and (math.isinf(value) or math.isfinite(out[0]))
    for value in (overflowing, -overflowing):
        with pytest.raises(ArgumentError, match=f"within {element}'s range"):
            kernel(value, out, group_size=1)
    kernel(math.nan, out, group_size=1)
    assert math.isnan(out[0])


@pytest.mark.parametrize("element", ["f16", "bf16", "f32", "f64"])
def test_integers_past_int64_bind_to_float_scalars(element: str) -> None:
    """Python integers of any size are real numbers: rounded, or refused past the type's range."""
    dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32,
             "f64": np.float64}[element]  # fmt: skip
    kernel = compiled(f"""func @k(%x: {element}, %out: memref<{element}x1>) {{
    %z = cast 0 : index -> index
    store %x, %out[%z] : memref<{element}x1>
}}""")["k"]
    out = np.zeros(1, dtype)
    if element == "f16":
        with pytest.raises(ArgumentError, match="within f16's range"):
            kernel(2**63, out, group_size=1)
        return
    for value in (2**63, -(2**70), 3**60):
        kernel(value, out, group_size=1)
        assert float(out[0]) == float(dtype(float(value)))


def test_kernels_are_named_with_or_without_their_at() -> None:
    """`compilation["@k"]` is `compilation["k"]`, as `--kernel @k` is `--kernel k`; an unknown
    name lists the program's functions once with their `@`."""
    compilation = compiled(KERNEL)
    assert compilation["@k"] is compilation["k"]
    with pytest.raises(KeyError, match=r"no function @nope in program \(functions: @k\)"):
        compilation["@nope"]
