"""`nanotc run`: launch a kernel on random data, optionally validate it, report its speed.

Arguments are made from the kernel's signature: float scalars and all arrays random
(Fortran order, so default layouts match; a static stride is kept, the modes after it follow
on packed), integer scalars and every dynamic size from
`--size NAME=VALUE` (NAME is a scalar parameter, or PARAM.MODE for a dynamic mode size of a
memref or group member), groups as one array whose last axis is the group. A dynamic size or
integer scalar not given is an error that names it: guessing sizes could make the kernel
index out of bounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nanotc.ir.core import Function, walk
from nanotc.ir.types import DYNAMIC, GroupType, MemRefType, ScalarType, Type, numpy_dtype
from nanotc.runtime.arguments import ArgumentError, bind_scalar
from nanotc.transforms.flops import flops_per_group


class RunError(Exception):
    """A problem with the command line of `nanotc run` (not with the program)."""


def parse_sizes(items: Sequence[str]) -> dict[str, int | float]:
    """`--size NAME=VALUE` items by name: integers, or reals for real parameters."""
    sizes: dict[str, int | float] = {}
    for item in items:
        name, _, value = item.partition("=")
        name = name.lstrip("%")
        if name in sizes:
            raise RunError(f"--size {item!r}: {name} is given twice")
        sizes[name] = _number(item, value)
    return sizes


def _number(item: str, text: str) -> int | float:
    """`text` as an integer where it is one, else as a real."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise RunError(f"--size {item!r}: expected NAME=NUMBER") from None


def make_arguments(
    func: Function, group_size: int, sizes: Mapping[str, int | float], rng: np.random.Generator
) -> list[Any]:
    args = []
    for param in func.arguments:
        name = param.name or str(param.index)
        try:
            args.append(_argument(name, param.type, group_size, sizes, rng))
        except MemoryError:
            raise RunError(f"%{name}: its random array does not fit in memory") from None
    unused = set(sizes) - _size_names(func)
    if unused:
        raise RunError(
            f"--size names no dynamic size or integer parameter: {', '.join(sorted(unused))}"
        )
    return args


def _size_names(func: Function) -> set[str]:
    names = set()
    for p in func.arguments:
        t = p.type
        memref = t.memref if isinstance(t, GroupType) else t
        if isinstance(memref, MemRefType):
            names.update(f"{p.name}.{m}" for m in memref.dynamic_shape_modes)
        elif isinstance(t, ScalarType):
            names.add(p.name or "")
    return names


def _argument(
    name: str, t: Type, groups: int, sizes: Mapping[str, int | float], rng: np.random.Generator
) -> Any:
    if isinstance(t, ScalarType):
        if name in sizes:
            value = sizes[name]
            if t.is_int and not isinstance(value, int):
                raise RunError(f"--size {name}={value}: %{name} is an integer parameter")
            return _scalar(name, t, value)
        if t.is_int:
            raise RunError(f"integer parameter %{name} needs a value: --size {name}=VALUE")
        return numpy_dtype(t).type(rng.uniform(-1, 1))
    if isinstance(t, MemRefType):
        return random_array(t, _shape(name, t, sizes), rng)
    assert isinstance(t, GroupType)
    # the kernel sees each member a static offset past its start: room for the last one's
    past_end = 0 if t.offset is DYNAMIC else t.offset
    return random_array(t.memref, (*_shape(name, t.memref, sizes), groups), rng, past_end)


def _scalar(name: str, t: ScalarType, value: int | float) -> Any:
    """`value` bound as a launch binds the parameter (refused unless the type holds it)."""
    try:
        return bind_scalar(name, t, value)
    except ArgumentError as e:
        raise RunError(f"--size {name}={value}: {e}") from None


def _shape(name: str, t: MemRefType, sizes: Mapping[str, int | float]) -> tuple[int, ...]:
    shape = []
    for mode, size in enumerate(t.shape):
        if size is None:
            key = f"{name}.{mode}"
            if key not in sizes:
                raise RunError(
                    f"dynamic size of mode {mode} of %{name} needs a value: --size {key}=VALUE"
                )
            size = sizes[key]
            if not isinstance(size, int):
                raise RunError(f"--size {key}={size}: a size is an integer")
            if size < 0:
                raise RunError(f"--size {key}={size}: a size cannot be negative")
        shape.append(size)
    return tuple(shape)


def random_array(t: MemRefType, shape: tuple[int, ...], rng: np.random.Generator,
                 past_end: int = 0) -> np.ndarray:  # fmt: skip
    """Random values in an array of `shape` (a group's batch axis last) laid out with the
    type's static strides, in memory with `past_end` more random elements after it.
    MemoryError where it cannot be had (numpy's ValueError past its largest dimension too)."""
    strides = layout_strides(t, shape)
    footprint = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if 0 not in shape else 0
    try:
        block = _random_values(t.element, footprint + past_end, rng)
    except ValueError:
        raise MemoryError(f"{footprint + past_end} elements") from None
    itemsize = block.dtype.itemsize
    # a view whose base is the block (as_strided's is not), so that binding sees the memory
    # past the end as the array's own
    return np.ndarray(shape, block.dtype, block, 0, tuple(s * itemsize for s in strides))


def layout_strides(t: MemRefType, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides for `shape`: a mode's static stride where the type has one; the
    others, in order, each the first stride past the modes placed before it, the static ones
    first (packed column-major when no stride is static; row-major for `strided<?,1>`, whose
    rows the static stride 1 places, where counting only the modes before it made strides
    (1, 1), every row on top of the next)."""
    static = [t.stride[mode] if mode < t.order else DYNAMIC for mode in range(len(shape))]
    strides = list(static)
    for mode, stride in enumerate(static):
        if stride is DYNAMIC:
            placed = [(n, s) for n, s in zip(shape, strides) if s is not DYNAMIC]
            strides[mode] = 1 + sum((max(n, 1) - 1) * s for n, s in placed)
    return tuple(strides)  # type: ignore[arg-type]


def _random_values(element: ScalarType, count: int, rng: np.random.Generator) -> np.ndarray:
    if element.is_float:
        data = rng.uniform(-1, 1, size=count)
    elif element is ScalarType.I1:
        data = rng.integers(0, 2, size=count)
    else:
        data = rng.integers(-8, 8, size=count)
    return data.astype(numpy_dtype(element))


@dataclass(frozen=True)
class Timing:
    median: float
    best: float
    runs: int


def time_launches(launch: Any, repeat: int) -> Timing:
    launch()  # warm-up: first touch of memory, thread pool start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        launch()
        times.append(time.perf_counter() - start)
    return Timing(statistics.median(times), min(times), repeat)


def total_flops(func: Function, group_size: int, args: Sequence[Any]) -> int | None:
    shapes = {id(p): a.shape for p, a in zip(func.arguments, args) if isinstance(a, np.ndarray)}
    per_group = flops_per_group(func, shapes)
    return None if per_group is None else per_group * group_size


def compare_outputs(
    func: Function, native: Sequence[Any], reference: Sequence[Any]
) -> list[tuple[str, float, bool]]:
    """Per array parameter: (name, max relative error, within the tolerance of the least
    precise float the kernel computes in, which may feed any output)."""
    tolerance = check_tolerance(func)
    report = []
    for p, got, want in zip(func.arguments, native, reference):
        if not isinstance(got, np.ndarray):
            continue
        a, b = got.astype(np.float64).ravel(), want.astype(np.float64).ravel()
        # NaN where both are NaN and infinities both have are agreement, not errors
        alike = (np.isnan(a) & np.isnan(b)) | (np.isinf(b) & (a == b))
        differ, finite = a[~alike], b[~alike]
        scale = max(1.0, float(np.max(np.abs(finite[np.isfinite(finite)]), initial=0.0)))
        error = float(np.max(np.abs(differ - finite), initial=0.0)) / scale
        ok = error <= tolerance
        report.append((p.name or "?", error, ok))
    return report


# the relative error `--check` allows where a kernel computes in a float type: native code and
# the reference evaluator may sum in other orders, and round differently once or twice
_TOLERANCE = {
    ScalarType.BF16: 1e-2,
    ScalarType.F16: 2e-3,
    ScalarType.F32: 1e-4,
    ScalarType.F64: 1e-10,
}


def check_tolerance(func: Function) -> float:
    """The tolerance of the least precise float among the kernel's parameters, operands and
    results (an f64 sum of f32 products carries the f32 rounding)."""
    values = [*func.arguments]
    for inst in walk(func.body):
        values.extend(inst.operand_values())
        values.extend(inst.results)
    elements = {_element(v.type) for v in values}
    return max(
        (_TOLERANCE[e] for e in elements if e in _TOLERANCE), default=_TOLERANCE[ScalarType.F64]
    )


def _element(t: Type) -> ScalarType | None:
    if isinstance(t, GroupType):
        return t.memref.element
    if isinstance(t, MemRefType):
        return t.element
    return t if isinstance(t, ScalarType) else None
