"""Memory and views natively against the reference evaluator and numpy: load, store and size on
static, strided and dynamic memrefs; subview (indices, literal and value slices, `?`, `:`),
expand and fuse on random shapes and layouts; alloca on the stack and in heap scratch; groups
passed as lists, as one batched array and as `Group`s with an offset, with dynamic member
sizes and strides."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pytest

from nanotc.runtime.arguments import Group

from .helpers import (
    DTYPES,
    TARGETS,
    check,
    compiled,
    fill_garbage,
    random_array,
    run_native,
    run_reference,
    strided_view,
)

Extent = int | None  # None: dynamic


def memref(elem: str, shape: Sequence[Extent], strides: Sequence[Extent] | None = None) -> str:
    """memref type text; strides written out whenever given."""
    if not shape:
        return f"memref<{elem}>"
    dims = "".join(f"x{'?' if n is None else n}" for n in shape)
    if strides is None:
        return f"memref<{elem}{dims}>"
    layout = ",".join("?" if s is None else str(s) for s in strides)
    return f"memref<{elem}{dims},strided<{layout}>>"


def copy_out(src: str, src_t: str, dst: str, dst_t: str, order: int, tag: str = "c") -> list[str]:
    """Loops copying every element of `src` to the same index of `dst`; the outermost loop
    (over the last mode) is a foreach."""
    idx = ",".join(f"%{tag}i{k}" for k in range(order))
    lines = [f"%{tag}n{k} = size {src}[{k}] : {src_t}" for k in range(order)]
    for depth, k in enumerate(reversed(range(order))):
        loop = "foreach" if depth == 0 else "for"
        lines.append(f"{loop} %{tag}i{k} = 0, %{tag}n{k} {{")
    lines.append(f"%{tag}v = load {src}[{idx}] : {src_t}")
    lines.append(f"store %{tag}v, {dst}[{idx}] : {dst_t}")
    lines += ["}"] * order
    return lines


def dynamic_out(elem: str, order: int) -> str:
    """Packed output with dynamic sizes (a Fortran-ordered array of any shape fits)."""
    return memref(elem, [None] * order)


def function(params: Sequence[str], body: Sequence[str]) -> str:
    return "func @k(" + ", ".join(params) + ") {\n" + "\n".join(body) + "\n}"


def source_array(rng, elem: str, shape: tuple[int, ...], layout: str) -> tuple[np.ndarray, str]:
    """An array of `shape` and its parameter type: packed static, strided static (a view with
    gaps, strides written in the type) or dynamic (sizes and strides `?`)."""
    if layout == "packed":
        return random_array(rng, shape, elem), memref(elem, shape)
    steps = [int(rng.integers(1, 3)) for _ in shape]
    view = strided_view(rng, shape, elem, steps)
    strides = [s // view.itemsize for s in view.strides]
    if layout == "strided":
        # column-major with gaps: stride 0 is the step, later strides at least the extents
        return view, memref(elem, shape, strides)
    return view, memref(elem, [None] * len(shape), [None] * len(shape))


ELEMENTS = ("f32", "f64", "i8", "i16", "i32", "i64", "i1", "f16")


# -- load, store, size ----------------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["packed", "strided", "dynamic"])
@pytest.mark.parametrize("elem", ELEMENTS)
def test_load_store_copy(elem: str, layout: str, target: str, rng) -> None:
    shape = tuple(int(x) for x in rng.choice([1, 2, 3, 5, 7, 8, 13], 3))
    src, src_t = source_array(rng, elem, shape, layout)
    out_t = dynamic_out(elem, 3)
    text = function([f"%a: {src_t}", f"%b: {out_t}"], copy_out("%a", src_t, "%b", out_t, 3))
    out = fill_garbage(np.zeros(shape, DTYPES[elem], order="F"))
    outcome = check(text, [src, out], target=target)
    np.testing.assert_array_equal(outcome.native[1], src)


@pytest.mark.parametrize("target", TARGETS)
def test_order_zero_memrefs_and_negative_strides(target: str, rng) -> None:
    """memref<f64> takes a 0-d array or one element; a dynamic stride may be negative (a
    reversed view) and the element strides of a C-ordered array are accepted too."""
    vec = memref("f64", [None], [None])
    mat = memref("f64", [None, None], [None, None])
    text = function(
        ["%s: memref<f64>", "%one: memref<f64>", f"%v: {vec}", f"%m: {mat}", f"%o: {mat}"],
        [
            "%x = load %s[] : memref<f64>",
            "%y = load %v[0] : " + vec,
            "%z = arith.add %x, %y : f64",
            "store %z, %one[] : memref<f64>",
            *copy_out("%m", mat, "%o", mat, 2),
        ],
    )
    s, one = np.array(2.5), np.zeros(1)
    v = random_array(rng, (9,), "f64")[::-2]
    m = np.ascontiguousarray(random_array(rng, (5, 6), "f64"))[::-1]
    o = np.zeros((5, 6), order="F")
    check(text, [s, one, v, m, o], target=target)
    assert one[0] == 2.5 + v[0]
    np.testing.assert_array_equal(o, m)


def test_store_writes_nothing_outside_the_view(rng) -> None:
    """Stores through a strided view leave the gaps of the underlying array alone."""
    out_t = memref("i32", [None, None], [None, None])
    text = function(
        [f"%a: {memref('i32', [None, None])}", f"%b: {out_t}"],
        copy_out("%a", memref("i32", [None, None]), "%b", out_t, 2),
    )
    a = random_array(rng, (6, 4), "i32")
    base = np.full((20, 15), -7, np.int32, order="F")
    b = base[2:14:2, 3:15:3]
    run_native(text, [a, b])
    np.testing.assert_array_equal(b, a)
    assert np.count_nonzero(base == -7) == base.size - a.size


# -- subview --------------------------------------------------------------------------------


def random_slices(rng, shape: tuple[int, ...]) -> list[tuple[str, int, int]]:
    """Per mode (kind, offset, size): index (mode dropped), lit (offset:size), val
    (%o:%s), wild (offset:?), valwild (%o:?), all (:), mixed (%o:size)."""
    kinds = ["index", "lit", "val", "wild", "valwild", "all", "mixed"]
    slices = []
    for n in shape:
        kind = str(rng.choice(kinds))
        offset = int(rng.integers(0, n))
        size = int(rng.integers(1, n - offset + 1))
        if kind == "all":
            offset = 0
        slices.append((kind, offset, size))
    return slices


def subview_kernel(elem: str, src_t: str, shape, strides, slices) -> tuple[str, int]:
    """Kernel: view := subview %a[slices]; copy the view to %b; store its sizes to %sz."""
    parts, values, out_shape, out_strides = [], [], [], []
    for k, (kind, offset, size) in enumerate(slices):
        n, s = shape[k], strides[k]
        if kind == "index":
            parts.append(f"%o{k}" if k % 2 else str(offset))
            values.append(f"%o{k}")
            continue
        part, extent = {
            "lit": (f"{offset}:{size}", size),
            "val": (f"%o{k}:%s{k}", None),
            "wild": (f"{offset}:?", None if n is None else n - offset),
            "valwild": (f"%o{k}:?", None),
            "all": (":", n),
            "mixed": (f"%o{k}:{size}", size),
        }[kind]
        parts.append(part)
        values += [f"%o{k}", f"%s{k}"]
        out_shape.append(extent)
        out_strides.append(s)
    order = len(out_shape)
    view_t = memref(elem, out_shape, out_strides)
    out_t = dynamic_out(elem, order)
    params = [f"%a: {src_t}", f"%b: {out_t}", f"%sz: memref<indexx{max(order, 1)}>"]
    params += [f"{v}: index" for v in dict.fromkeys(values)]
    body = [f"%v = subview %a[{','.join(parts)}] : {src_t}"]
    body += copy_out("%v", view_t, "%b", out_t, order)
    body += [f"%z{k} = size %v[{k}] : {view_t}" for k in range(order)]
    body += [f"store %z{k}, %sz[{k}] : memref<indexx{max(order, 1)}>" for k in range(order)]
    return function(params, body), order


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["packed", "strided", "dynamic"])
def test_random_subviews(layout: str, target: str, rng) -> None:
    for _ in range(3):
        order = int(rng.integers(1, 4))
        limit = {1: 70, 2: 24, 3: 9}[order]
        shape = tuple(int(x) for x in rng.integers(1, limit + 1, order))
        elem = str(rng.choice(["f32", "f64", "i16", "i8"]))
        src, src_t = source_array(rng, elem, shape, layout)
        static_shape = shape if layout != "dynamic" else (None,) * order
        strides = (
            [s // src.itemsize for s in src.strides] if layout == "strided" else [None] * order
        )
        if layout == "packed":
            strides = list(np.cumprod((1,) + shape[:-1]))
        slices = random_slices(rng, shape)
        text, out_order = subview_kernel(elem, src_t, static_shape, strides, slices)
        index: list[object] = []
        for kind, offset, size in slices:
            if kind == "index":
                index.append(offset)
            elif kind in ("wild", "valwild"):
                index.append(slice(offset, None))
            elif kind == "all":
                index.append(slice(None))
            else:
                index.append(slice(offset, offset + size))
        expected = src[tuple(index)]
        out = fill_garbage(np.zeros(expected.shape, src.dtype, order="F"))
        sizes = np.zeros(max(out_order, 1), np.int64)
        scalars = []
        for kind, offset, size in slices:
            scalars += [offset] if kind == "index" else [offset, size]
        check(text, [src, out, sizes, *scalars], target=target)
        np.testing.assert_array_equal(out, expected)
        assert list(sizes[:out_order]) == list(expected.shape)


def test_subview_examples_of_the_reference() -> None:
    """The reference's own subview examples, their result types checked by the checker and
    their elements by numpy."""
    text = """func @k(%a: memref<f32x32x16>, %b: memref<f64x16x8>, %c: memref<f32x16x42x13>,
                      %i: index, %o1: memref<f32x8x4>, %o2: memref<f64x4>, %o3: memref<f64x4x1>,
                      %o4: memref<f32x4x?x7>, %o5: memref<f32x?>) {
        %1 = subview %a[4:8,8:4] : memref<f32x32x16>
        axpby.n 1.0, %1, 0.0, %o1 : f32, memref<f32x8x4,strided<1,32>>, f32, memref<f32x8x4>
        %2 = subview %b[2:4, %i] : memref<f64x16x8>
        axpby.n 1.0, %2, 0.0, %o2 : f64, memref<f64x4>, f64, memref<f64x4>
        %3 = subview %b[2:4, %i:1] : memref<f64x16x8>
        axpby.n 1.0, %3, 0.0, %o3 : f64, memref<f64x4x1,strided<1,16>>, f64, memref<f64x4x1>
        %4 = subview %c[2:4, %i:%i, 6:7] : memref<f32x16x42x13>
        %5 = subview %4[:, :, 3] : memref<f32x4x?x7,strided<1,16,672>>
        %6 = subview %o4[:, :, 3] : memref<f32x4x?x7>
        axpby.n 1.0, %5, 0.0, %6 : f32, memref<f32x4x?,strided<1,16>>, f32, memref<f32x4x?,strided<1,4>>
        %7 = subview %a[5:?, 2] : memref<f32x32x16>
        %8 = subview %7[%i:?] : memref<f32x27>
        axpby.n 1.0, %8, 0.0, %o5 : f32, memref<f32x?>, f32, memref<f32x?>
    }"""
    rng = np.random.default_rng(7)
    a, b = random_array(rng, (32, 16), "f32"), random_array(rng, (16, 8), "f64")
    c = random_array(rng, (16, 42, 13), "f32")
    i = 3
    outs = [
        np.zeros((8, 4), np.float32, order="F"),
        np.zeros(4),
        np.zeros((4, 1), order="F"),
        np.zeros((4, i, 7), np.float32, order="F"),
        np.zeros(27 - i, np.float32),
    ]
    check(text, [a, b, c, i, *outs])
    np.testing.assert_array_equal(outs[0], a[4:12, 8:12])
    np.testing.assert_array_equal(outs[1], b[2:6, i])
    np.testing.assert_array_equal(outs[2], b[2:6, i : i + 1])
    np.testing.assert_array_equal(outs[3][:, :, 3], c[2:6, i : 2 * i, 6 + 3])
    np.testing.assert_array_equal(outs[4], a[5 + i :, 2])


# -- expand, fuse ---------------------------------------------------------------------------

EXPAND_FORMS = ["lit", "lit?", "?lit", "val?", "valval", "litval"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", EXPAND_FORMS)
@pytest.mark.parametrize("layout", ["packed", "dynamic"])
def test_expand(form: str, layout: str, target: str, rng) -> None:
    """Mode 1 of an (m, p*q) matrix viewed as p x q, in every spelling of the expand shape."""
    m, p, q = (int(x) for x in rng.choice([1, 2, 3, 5, 7], 3))
    src, src_t = source_array(rng, "f32", (m, p * q), layout)
    dyn = layout == "dynamic"
    entries, extents = {
        "lit": (f"{p}x{q}", (p, q)),
        "lit?": (f"{p}x?", (p, None if dyn else q)),
        "?lit": (f"?x{q}", (None if dyn else p, q)),
        "val?": ("%p x ?", (None, None)),
        "valval": ("%p x %q", (None, None)),
        "litval": (f"{p} x %q", (p, None)),
    }[form]
    s0, s1 = (None, None) if dyn else (1, m)
    inner = None if s1 is None or extents[0] is None else s1 * extents[0]
    view_t = memref("f32", (None if dyn else m, *extents), (s0, s1, inner))
    out_t = dynamic_out("f32", 3)
    body = [f"%v = expand %a[1 -> {entries}] : {src_t}", *copy_out("%v", view_t, "%b", out_t, 3)]
    text = function([f"%a: {src_t}", f"%b: {out_t}", "%p: index", "%q: index"], body)
    out = fill_garbage(np.zeros((m, p, q), np.float32, order="F"))
    check(text, [src, out, p, q], target=target)
    for j1 in range(p):
        for j2 in range(q):
            np.testing.assert_array_equal(out[:, j1, j2], src[:, j1 + p * j2])


@pytest.mark.parametrize("target", TARGETS)
def test_expand_beside_a_zero_entry_infers_zero(target: str) -> None:
    """`?` beside a zero entry fits only an empty mode and is 0, static or not; a zero
    entry known only at run time must not reach the division (it would trap)."""
    text = function(
        ["%a: memref<f32x?>", "%e: memref<f32x0>", "%n: index", "%out: memref<indexx2>"],
        ["%v = expand %a[0 -> %n x ?] : memref<f32x?>",
         "%w = expand %e[0 -> 0 x ?] : memref<f32x0>",
         "%sv = size %v[1] : memref<f32x?x?,strided<1,?>>",
         "%sw = size %w[1] : memref<f32x0x?,strided<1,0>>",
         "store %sv, %out[0] : memref<indexx2>",
         "store %sw, %out[1] : memref<indexx2>"],
    )  # fmt: skip
    out = np.full(2, -1, np.int64)
    check(text, [np.zeros(0, np.float32), np.zeros(0, np.float32), 0, out], target=target)
    assert list(out) == [0, 0]
    out[:] = -1
    run_native(text, [np.zeros(6, np.float32), np.zeros(0, np.float32), 0, out], target=target)
    assert list(out) == [0, 0]  # not a valid expand (the reference refuses it), but no trap


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("first", "last"), [(0, 1), (1, 2), (0, 2)])
@pytest.mark.parametrize("layout", ["packed", "dynamic"])
def test_fuse(first: int, last: int, layout: str, target: str, rng) -> None:
    """Adjacent modes of a 3-d tensor viewed as one; the dynamic layout is a subview of a
    larger tensor that stays contiguous in the fused modes."""
    shape = tuple(int(x) for x in rng.choice([1, 2, 3, 4, 5, 7], 3))
    if layout == "packed":
        src, src_t = random_array(rng, shape, "f64"), memref("f64", shape)
        strides: list[Extent] = list(np.cumprod((1,) + shape[:-1]))
        sizes: list[Extent] = list(shape)
    else:
        big = random_array(rng, (shape[0], shape[1], shape[2] + 3), "f64")
        src = big[:, :, 2 : 2 + shape[2]] if first == 0 and last == 1 else big[:, :, : shape[2]]
        if last == 2:  # fusing the last mode needs it contiguous with the others
            src = random_array(rng, shape, "f64")
        src_t = memref("f64", [None] * 3, [None] * 3)
        strides, sizes = [None] * 3, [None] * 3
    fused = None if None in sizes[first : last + 1] else int(np.prod(sizes[first : last + 1]))
    view_shape = sizes[:first] + [fused] + sizes[last + 1 :]
    view_strides = strides[: first + 1] + strides[last + 1 :]
    view_t = memref("f64", view_shape, view_strides)
    order = len(view_shape)
    out_t = dynamic_out("f64", order)
    body = [f"%v = fuse %a[{first},{last}] : {src_t}", *copy_out("%v", view_t, "%b", out_t, order)]
    text = function([f"%a: {src_t}", f"%b: {out_t}"], body)
    new_shape = shape[:first] + (int(np.prod(shape[first : last + 1])),) + shape[last + 1 :]
    out = fill_garbage(np.zeros(new_shape, order="F"))
    check(text, [src, out], target=target)
    np.testing.assert_array_equal(out, np.reshape(src, new_shape, order="F"))


def views_with_unit_modes(rng) -> list[tuple[np.ndarray, int, int]]:
    """Views with modes of size 1 whose strides numpy chose freely, and modes to fuse: rows
    cut off a padded array, new axes (stride 0) before, between and after the others."""
    x = random_array(rng, (6, 2), "f64")
    padded = random_array(rng, (7, 1, 2), "f64")[:6]  # element strides 1, 7, 7
    return [
        (padded, 1, 2),
        (padded, 0, 1),
        (x[:, None, :], 1, 2),
        (x[:, None, :], 0, 1),
        (x[None, :, :], 0, 1),
        (x[:, :, None], 1, 2),
        (x[:, None, None, :], 1, 3),
        (x[:, None, None, :], 0, 2),
    ]


@pytest.mark.parametrize("target", TARGETS)
def test_fuse_across_modes_of_size_one_whatever_their_strides(target: str, rng) -> None:
    """A fused mode steps as its first mode of size above 1 does: the strides numpy gives
    modes of size 1 change nothing (fusing from one once read the padding row)."""
    for src, first, last in views_with_unit_modes(rng):
        order = src.ndim
        src_t = memref("f64", [None] * order, [None] * order)
        view_t = memref("f64", [None] * (order - last + first), [None] * (order - last + first))
        out_t = dynamic_out("f64", order - last + first)
        body = [
            f"%v = fuse %a[{first},{last}] : {src_t}",
            *copy_out("%v", view_t, "%b", out_t, order - last + first),
        ]
        text = function([f"%a: {src_t}", f"%b: {out_t}"], body)
        shape = src.shape
        new_shape = shape[:first] + (int(np.prod(shape[first : last + 1])),) + shape[last + 1 :]
        out = fill_garbage(np.zeros(new_shape, order="F"))
        check(text, [src, out], target=target)
        np.testing.assert_array_equal(out, np.reshape(src, new_shape, order="F"))


# -- alloca ---------------------------------------------------------------------------------

ALLOCA_KERNEL = """func @k(%x: memref<f32x{n}>, %out: memref<f32x{n}x{count}x?>) {{
    %g = group_id
    {allocas}
}}"""
ALLOCA_N = 37


def alloca_kernel(sizes: Sequence[int]) -> str:
    """Every alloca (all live at once) gets x scaled by its own factor plus the group id in
    its first elements and the group id in its last; then all are copied to the output, so two
    allocas sharing memory would show."""
    n = ALLOCA_N
    lines = []
    for k, size in enumerate(sizes):
        lines.append(f"%t{k} = alloca -> memref<f32x{size}>")
        lines.append(f"%v{k} = subview %t{k}[0:{n}] : memref<f32x{size}>")
        lines.append(f"%f{k} = cast %g : index -> f32")
        lines.append(f"%h{k} = arith.add %f{k}, {k + 1}.0 : f32")
        lines.append(f"axpby.n %h{k}, %x, 0.0, %v{k} : f32, memref<f32x{n}>, f32, memref<f32x{n}>")
        # also touch the far end of the big allocation
        lines.append(f"%e{k} = cast %g : index -> f32")
        lines.append(f"store %e{k}, %t{k}[{size - 1}] : memref<f32x{size}>")
    for k in range(len(sizes)):
        out_view = f"%o{k}"
        lines.append(f"{out_view} = subview %out[:, {k}, %g] : memref<f32x{n}x{len(sizes)}x?>")
        lines.append(
            f"axpby.n 1.0, %v{k}, 0.0, {out_view} : f32, memref<f32x{n}>, f32, memref<f32x{n}>"
        )
        lines.append(f"%r{k} = load %t{k}[{sizes[k] - 1}] : memref<f32x{sizes[k]}>")
        lines.append(f"%q{k} = arith.sub %r{k}, %e{k} : f32")
        lines.append(f"%y{k} = load %o{k}[0] : memref<f32x{n}>")
        lines.append(f"%z{k} = arith.add %y{k}, %q{k} : f32")
        lines.append(f"store %z{k}, %o{k}[0] : memref<f32x{n}>")
    return ALLOCA_KERNEL.format(n=n, count=len(sizes), allocas="\n    ".join(lines))


def test_kernels_with_numeric_names_and_heap_scratch() -> None:
    """`@0` is a valid name; its symbol must not meet llvmlite's numbered metadata (the heap
    scratch's branch weights are `!0`)."""
    text = alloca_kernel([64, 20000]).replace("func @k(", "func @0(", 1)
    out = np.zeros((ALLOCA_N, 2, 3), np.float32, order="F")
    x = np.ones(ALLOCA_N, np.float32)
    compilation = compiled(text)
    compilation["0"](x, out, group_size=3)
    reference = np.zeros_like(out)
    run_reference(text, [x, reference], 3)
    np.testing.assert_array_equal(out, reference)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("small", [40, 100]),
        ("larger than 64 KiB", [64, 20000]),  # 80 KB: heap scratch
        ("several totalling over 256 KiB", [64, 15000, 15000, 15000, 15000, 15000, 70000]),
    ],
)
def test_alloca(name: str, sizes: list[int], threads: int, rng) -> None:
    text = alloca_kernel(sizes)
    groups = 5
    x = random_array(rng, (ALLOCA_N,), "f32")
    out = fill_garbage(np.zeros((ALLOCA_N, len(sizes), groups), np.float32, order="F"))
    check(text, [x, out], group_size=groups, num_threads=threads)
    for g in range(groups):
        for k in range(len(sizes)):
            np.testing.assert_allclose(out[:, k, g], x * (g + k + 1), rtol=1e-6)


def test_alloca_placement_follows_the_limits() -> None:
    """The allocas above go where the design says: stack up to 64 KiB each and 256 KiB in
    total, the rest in heap scratch."""
    from nanotc.codegen.llvm.module import plan_scratch

    from .helpers import program

    prog = program(alloca_kernel([64, 15000, 15000, 15000, 15000, 15000, 70000]))
    offsets, scratch = plan_scratch(prog.functions[0])
    assert len(offsets) == 2  # the fifth 60 KB one and the 280 KB one
    assert scratch >= 15000 * 4 + 70000 * 4


@pytest.mark.parametrize("target", TARGETS)
def test_a_large_stack_frame_is_entered_a_page_at_a_time(target: str) -> None:
    """Four 60 KiB allocas make a 240 KiB frame. On a thread whose stack is smaller (musl's
    128 KiB default, a C pool's own size), one `sub $0x3c..., %rsp` jumped over the guard
    page, and the kernel wrote into another thread's stack. With stack probes, the prologue
    lowers the stack pointer at most a page at a time and touches each page."""
    from nanotc.codegen.asm import function_lines

    from .helpers import compiled

    asm = "\n".join(function_lines(compiled(alloca_kernel([15000] * 4), target).assembly(), "k"))
    drops = [int(m, 16) for m in re.findall(r"subq\s+\$0x([0-9a-f]+), %rsp", asm)]
    drops += [int(m) for m in re.findall(r"subq\s+\$(\d+), %rsp", asm)]
    assert drops and max(drops) <= 4096, drops
    assert re.search(r"movq\s+\$0, \(%rsp\)", asm)  # the probe of each page


@pytest.mark.parametrize("target", TARGETS)
def test_alloca_in_loops_and_branches(target: str, rng) -> None:
    """Allocas inside a for body and an if branch, of integer and i1 types, reused every
    iteration; their garbage is never read."""
    text = """func @k(%x: memref<i32x40>, %out: memref<i32x40x?>, %flags: memref<i1x40x?>) {
        %g = group_id
        %o = subview %out[:, %g] : memref<i32x40x?>
        %fl = subview %flags[:, %g] : memref<i1x40x?>
        for %it = 0, 3 {
            %t = alloca -> memref<i32x40>
            %it32 = cast %it : index -> i32
            foreach %i = 0, 40 {
                %v = load %x[%i] : memref<i32x40>
                %w = arith.mul %v, %it32 : i32
                store %w, %t[%i] : memref<i32x40>
            }
            axpby.n 1, %t, 1, %o : i32, memref<i32x40>, i32, memref<i32x40,strided<1>>
            lifetime_stop %t
        }
        %odd = arith.and %g, 1 : index
        %c = cmp.eq %odd, 1 : index
        if %c {
            %b = alloca -> memref<i1x40>
            foreach %i = 0, 40 {
                %v = load %x[%i] : memref<i32x40>
                %p = cmp.gt %v, 0 : i32
                store %p, %b[%i] : memref<i1x40>
            }
            barrier
            foreach %i = 0, 40 {
                %p = load %b[%i] : memref<i1x40>
                store %p, %fl[%i] : memref<i1x40>
            }
        }
    }"""
    x = random_array(rng, (40,), "i32")
    out = random_array(rng, (40, 4), "i32")
    flags = np.zeros((40, 4), np.bool_, order="F")
    start = out.copy()
    check(text, [x, out, flags], group_size=4, target=target)
    np.testing.assert_array_equal(out, start + 3 * x[:, None])
    np.testing.assert_array_equal(flags[:, 1], x > 0)
    assert not flags[:, 0].any()


# -- groups ---------------------------------------------------------------------------------

GROUP_COPY = """func @k(%g: group<memref<f32x4x3>{offset}>, %out: memref<f32x4x3x?>) {{
    %i = group_id
    %m = load %g[%i] : group<memref<f32x4x3>{offset}>
    %o = subview %out[:, :, %i] : memref<f32x4x3x?>
    axpby.n 1.0, %m, 0.0, %o : f32, memref<f32x4x3>, f32, memref<f32x4x3>
}}"""


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("form", ["list", "tuple", "batched", "batched-longer"])
def test_group_forms(form: str, target: str, rng) -> None:
    """A group as a list (or tuple) of arrays, or one Fortran array whose last axis is the
    group (it may hold more members than group_size)."""
    groups = 6
    batch = random_array(rng, (4, 3, groups + (2 if form == "batched-longer" else 0)), "f32")
    members = {
        "list": lambda: [np.asfortranarray(batch[..., i]) for i in range(groups)],
        "tuple": lambda: tuple(np.asfortranarray(batch[..., i]) for i in range(groups)),
        "batched": lambda: batch,
        "batched-longer": lambda: batch,
    }[form]()
    out = fill_garbage(np.zeros((4, 3, groups), np.float32, order="F"))
    check(GROUP_COPY.format(offset=""), [members, out], group_size=groups, target=target)
    np.testing.assert_array_equal(out, batch[..., :groups])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("offset", [0, 1, 5])
@pytest.mark.parametrize("static", [True, False])
def test_group_offset(offset: int, static: bool, target: str, rng) -> None:
    """Member i is seen `offset` elements after the start of array i: with `offset: ?` given
    by Group(members, offset), with a literal offset from a plain list."""
    groups = 4
    roots = [random_array(rng, (12 + offset + 2,), "f32") for _ in range(groups)]
    members = [r[:12].reshape((4, 3), order="F") for r in roots]
    text = GROUP_COPY.format(offset=f", offset: {offset if static else '?'}")
    arg = members if static else Group(members, offset=offset)
    out = fill_garbage(np.zeros((4, 3, groups), np.float32, order="F"))
    check(text, [arg, out], group_size=groups, target=target)
    for i, r in enumerate(roots):
        np.testing.assert_array_equal(out[..., i], r[offset : offset + 12].reshape(4, 3, order="F"))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("strided", [False, True])
def test_group_members_with_dynamic_sizes(strided: bool, target: str, rng) -> None:
    """Each member has its own shape (and, with dynamic strides, its own layout); the kernel
    reads them through `size` and writes row sums into a subview of the output."""
    member_t = memref("f64", [None, None], [None, None] if strided else None)
    offset = ", offset: ?" if strided else ""
    group_t = f"group<{member_t}{offset}>"
    text = f"""func @k(%g: {group_t}, %out: memref<f64x?x?>) {{
        %i = group_id
        %m = load %g[%i] : {group_t}
        %rows = size %m[0] : {member_t}
        %o = subview %out[0:%rows, %i] : memref<f64x?x?>
        sum.n 1.0, %m, 0.0, %o : f64, {member_t}, f64, memref<f64x?>
        %t = subview %out[%rows:?, %i] : memref<f64x?x?>
        %n = size %t[0] : memref<f64x?>
        %nf = cast %n : index -> f64
        foreach %r = 0, %n {{
            store %nf, %t[%r] : memref<f64x?>
        }}
    }}"""
    groups, members = 7, []
    for i in range(groups):
        m, n = (int(x) for x in rng.integers(1, 20, 2))
        if strided and i % 3 == 1:
            members.append(np.ascontiguousarray(random_array(rng, (m, n), "f64")))  # C order
        elif strided and i % 3 == 2:
            members.append(strided_view(rng, (m, n), "f64", (2, 3)))
        else:
            members.append(random_array(rng, (m, n), "f64"))
    arg = Group(members, offset=0) if strided else members
    out = fill_garbage(np.zeros((20, groups), order="F"))
    check(text, [arg, out], group_size=groups, target=target, depth=20)
    for i, member in enumerate(members):
        rows = member.shape[0]
        np.testing.assert_allclose(out[:rows, i], member.sum(axis=1), rtol=1e-12)
        assert (out[rows:, i] == 20 - rows).all()


@pytest.mark.parametrize("target", TARGETS)
def test_every_work_group_reads_every_member(target: str, rng) -> None:
    """load %g[%j] with %j a loop variable, not the group id: members are independent of the
    work-group that reads them; the offset applies to each."""
    text = """func @k(%g: group<memref<i64x?>, offset: ?>, %out: memref<i64x?>) {
        %i = group_id
        %n = group_size
        %acc0 = cast 0 : index -> i64
        %one = cast 1 : index -> i64
        for %j = 0, %n {
            %m = load %g[%j] : group<memref<i64x?>, offset: ?>
            %len = size %m[0] : memref<i64x?>
            %last = arith.sub %len, 1 : index
            %x = load %m[%last] : memref<i64x?>
            %s = load %out[%i] : memref<i64x?>
            %t = arith.add %s, %x : i64
            store %t, %out[%i] : memref<i64x?>
        }
    }"""
    groups = 5
    roots = [random_array(rng, (10 + i,), "i64") for i in range(groups)]
    members = [r[: 8 + i] for i, r in enumerate(roots)]
    out = np.zeros(groups, np.int64)
    check(text, [Group(members, offset=2), out], group_size=groups, target=target)
    total = sum(int(r[2 + 8 + i - 1]) for i, r in enumerate(roots))
    assert (out == total).all()
