"""What a kernel asks of a launch's sizes: operand modes a collective instruction pairs element
for element are equally long, and modes every work-group indexes by its id hold one element
per work-group. The checker compares static extents; the rest is compared at launch, on the
parameters the operands are views of, before any native code runs (a mismatch would make it
read or write past an array), and the same way by the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from nanotc.check import load
from nanotc.runtime.arguments import ArgumentError, Group
from nanotc.runtime.extents import (
    GroupIndexed,
    ParameterMode,
    SameExtent,
    group_indexed_modes,
    same_extents,
)

from .helpers import compiled, run_reference

V, M = "memref<f32x?>", "memref<f32x?x?>"

# kernel text, argument shapes that fit, and for a mismatch: (argument, shape) to give
# instead and the message's argument, its expected size and mode, the argument it follows
CASES = {
    "axpby": (f"axpby.n 1.0, %x, 0.0, %y : f32, {V}, f32, {V}", {"x": (5,), "y": (5,)},
              ("y", (7,)), ("y", 5, 0, "x")),
    "axpby.t": (f"axpby.t 1.0, %A, 0.0, %B : f32, {M}, f32, {M}",
                {"A": (3, 5), "B": (5, 3)}, ("B", (5, 4)), ("B", 3, 1, "A")),
    "hadamard": (f"hadamard 1.0, %x, %y, 0.0, %z : f32, {V}, {V}, f32, {V}",
                 {"x": (6,), "y": (6,), "z": (6,)}, ("x", (2,)), ("z", 2, 0, "x")),
    "sum.n": (f"sum.n 1.0, %A, 0.0, %y : f32, {M}, f32, {V}", {"A": (4, 3), "y": (4,)},
              ("y", (3,)), ("y", 4, 0, "A")),
    "sum.t": (f"sum.t 1.0, %A, 0.0, %y : f32, {M}, f32, {V}", {"A": (4, 3), "y": (3,)},
              ("y", (4,)), ("y", 3, 0, "A")),
    "gemv.n": (f"gemv.n 1.0, %A, %x, 0.0, %y : f32, {M}, {V}, f32, {V}",
               {"A": (4, 3), "x": (3,), "y": (4,)}, ("x", (9,)), ("x", 3, 0, "A")),
    "gemv.t": (f"gemv.t 1.0, %A, %x, 0.0, %y : f32, {M}, {V}, f32, {V}",
               {"A": (4, 3), "x": (4,), "y": (3,)}, ("y", (4,)), ("y", 3, 0, "A")),
    "ger": (f"ger 1.0, %x, %y, 0.0, %A : f32, {V}, {V}, f32, {M}",
            {"x": (4,), "y": (3,), "A": (4, 3)}, ("A", (4, 8)), ("A", 3, 1, "y")),
    "gemm.n.n": (f"gemm.n.n 1.0, %A, %B, 0.0, %C : f32, {M}, {M}, f32, {M}",
                 {"A": (4, 3), "B": (3, 2), "C": (4, 2)}, ("B", (5, 2)), ("B", 3, 0, "A")),
    "gemm.t.t": (f"gemm.t.t 1.0, %A, %B, 0.0, %C : f32, {M}, {M}, f32, {M}",
                 {"A": (3, 4), "B": (2, 3), "C": (4, 2)}, ("C", (4, 6)), ("C", 2, 1, "B")),
}  # fmt: skip


def _kernel_text(instruction: str, shapes: dict[str, tuple[int, ...]]) -> str:
    params = ", ".join(f"%{n}: {V if len(s) == 1 else M}" for n, s in shapes.items())
    return f"func @k({params}) {{\n    {instruction}\n}}"


def _arrays(shapes: dict[str, tuple[int, ...]], rng) -> list[np.ndarray]:
    return [np.asfortranarray(rng.uniform(-1, 1, s).astype(np.float32)) for s in shapes.values()]


@pytest.mark.parametrize("case", CASES)
def test_dynamic_extents_that_disagree_are_refused_at_launch(case: str, rng) -> None:
    """Sizes that fit launch; one mode off is refused naming the argument, the size and mode
    it must have, the argument it pairs with and the instruction, natively and by the
    reference evaluator alike."""
    instruction, shapes, (changed, shape), (name, size, mode, other) = CASES[case]
    text = _kernel_text(instruction, shapes)
    kernel = compiled(text)["k"]
    kernel(*_arrays(shapes, rng), group_size=1)
    wrong = _arrays({**shapes, changed: shape}, rng)
    message = (
        f"argument %{name}: expected size {size} in mode {mode}, as argument %{other} has"
        f" in mode .* \\(the {case.split('.')[0]} at 2.5 pairs their elements\\)"
    )
    with pytest.raises(ArgumentError, match=message):
        kernel(*wrong, group_size=1)
    with pytest.raises(ArgumentError, match=message):
        run_reference(text, wrong)


def test_a_mismatch_of_layouts_each_seen_before_is_refused_too(rng) -> None:
    """A launch whose arrays each have a layout an earlier launch bound skips binding; it
    still compares the sizes the kernel pairs (4 against 10^7 elements would read 40 MB past
    x)."""
    text = _kernel_text(CASES["axpby"][0], {"x": (4,), "y": (4,)})
    kernel = compiled(text)["k"]
    small, large = (np.zeros(4, np.float32),) * 2, (np.zeros(10**7, np.float32),) * 2
    kernel(small[0], small[1].copy(), group_size=1)
    kernel(large[0], large[1].copy(), group_size=1)
    with pytest.raises(ArgumentError, match="argument %y: expected size 4 in mode 0"):
        kernel(small[0], large[1].copy(), group_size=1)


BATCHED = """func @batched(%A: memref<f32x?x?x?>, %B: memref<f32x?x?x?>, %C: memref<f32x?x?x?>) {
    %g = group_id
    %a = subview %A[:, :, %g] : memref<f32x?x?x?>
    %b = subview %B[:, :, %g] : memref<f32x?x?x?>
    %c = subview %C[:, :, %g] : memref<f32x?x?x?>
    gemm.n.n 1.0, %a, %b, 1.0, %c : f32, memref<f32x?x?>, memref<f32x?x?>, f32, memref<f32x?x?>
}"""


def test_whole_modes_of_subviews_are_compared_and_slices_left_to_the_program(rng) -> None:
    """A batch's members (`subview %A[:, :, %g]`) pair modes 0 and 1 of the parameters; the
    batch mode is not paired. A slice (`0:%n`) decides its own size, so arrays of other
    lengths launch."""
    at = "the gemm at 6.5"
    assert same_extents(load(BATCHED).function("batched")) == (
        SameExtent(ParameterMode(0, 1), ParameterMode(1, 0), at),
        SameExtent(ParameterMode(0, 0), ParameterMode(2, 0), at),
        SameExtent(ParameterMode(1, 1), ParameterMode(2, 1), at),
    )
    kernel = compiled(BATCHED)["batched"]
    a, b, c = (np.zeros(s, np.float32, order="F") for s in ((4, 3, 2), (3, 5, 2), (4, 5, 2)))
    kernel(a, b, c, group_size=2)
    with pytest.raises(ArgumentError, match="argument %C: expected size 5 in mode 1"):
        kernel(a, b, np.zeros((4, 6, 2), np.float32, order="F"), group_size=2)
    sliced = f"""func @k(%x: {V}, %y: {V}, %n: index) {{
    %xs = subview %x[0:%n] : {V}
    %ys = subview %y[0:%n] : {V}
    axpby.n 1.0, %xs, 0.0, %ys : f32, {V}, f32, {V}
}}"""
    assert same_extents(load(sliced).function("k")) == ()
    x, y = rng.uniform(-1, 1, 9).astype(np.float32), np.zeros(5, np.float32)
    compiled(sliced)["k"](x, y, 5, group_size=1)
    np.testing.assert_array_equal(y, x[:5])


GROUPS = """func @grouped(%A: group<memref<f32x?x?>>, %B: memref<f32x?x?>,
                       %C: group<memref<f32x?x?>, offset: ?>) {
    %g = group_id
    %a = load %A[%g] : group<memref<f32x?x?>>
    %c = load %C[%g] : group<memref<f32x?x?>, offset: ?>
    gemm.n.n 1.0, %a, %B, 1.0, %c : f32, memref<f32x?x?>, memref<f32x?x?>, f32, memref<f32x?x?>
}"""


def test_group_members_are_compared_member_by_member(rng) -> None:
    """Each work-group's member of a group (`load %A[%g]`) pairs with the same member of
    another group, or with a whole array (a member that differs from it is the one named),
    over the launch's work-groups only: members past group_size may have any size."""
    pairs = same_extents(load(GROUPS).function("grouped"))
    assert ParameterMode(0, 1, member=True) in {p.first for p in pairs}
    kernel = compiled(GROUPS)["grouped"]

    def members(*shapes: tuple[int, int]) -> list[np.ndarray]:
        return [np.asfortranarray(rng.uniform(-1, 1, s).astype(np.float32)) for s in shapes]

    b = members((3, 2))[0]
    a, c = members((4, 3), (5, 3), (2, 3)), members((4, 2), (5, 2), (2, 2))
    kernel(a, b, Group(c), group_size=3)
    kernel(a + members((9, 9)), b, Group(c), group_size=3)  # member 3 is not launched
    with pytest.raises(
        ArgumentError,
        match=r"argument %C: expected size 5 in mode 0 of member 1, as argument %A has in mode"
        r" 0 of member 1 \(the gemm at 6\.5 pairs their elements\), got float32 array of"
        r" shape \(6, 2\)",
    ):
        kernel(a, b, Group(members((4, 2), (6, 2), (2, 2))), group_size=3)
    with pytest.raises(ArgumentError, match="argument %A: expected size 3 in mode 1 of member"
                       " 2, as argument %B has in mode 0"):  # fmt: skip
        kernel(members((4, 3), (5, 3), (2, 4)), b, Group(c), group_size=3)


SCALE_MEMBERS = """func @k(%x: memref<f32x4>, %Y: memref<f32x4x?>) {
    %g = group_id
    %whole = subview %Y[:, :] : memref<f32x4x?>
    %y = subview %whole[:, %g] : memref<f32x4x?>
    axpby.n 1.0, %x, 2.0, %y : f32, memref<f32x4>, f32, memref<f32x4>
}"""


def test_modes_indexed_by_group_id_hold_a_member_per_work_group(rng) -> None:
    """`subview %Y[:, %g]` in every work-group (here through a whole view of %Y) needs as
    many columns as work-groups: fewer are refused before any native code runs, natively,
    after a launch whose layout the fast path remembers, and by the reference evaluator (the
    last work-groups would write past %Y)."""
    assert group_indexed_modes(load(SCALE_MEMBERS).function("k")) == (
        GroupIndexed(1, 1, "the subview at 4.10"),
    )
    kernel = compiled(SCALE_MEMBERS)["k"]
    x = rng.uniform(-1, 1, 4).astype(np.float32)
    y = np.asfortranarray(rng.uniform(-1, 1, (4, 3)).astype(np.float32))
    want = 2 * y + x[:, None]
    kernel(x, y, group_size=3)
    np.testing.assert_array_equal(y, want)
    message = (
        r"argument %Y: expected at least 1000 elements in mode 1 \(the subview at 4\.10"
        r" indexes it by group_id, in each of the launch's 1000 work-groups\), got float32"
        r" array of shape \(4, 3\)"
    )
    with pytest.raises(ArgumentError, match=message):
        kernel(x, y, group_size=1000)
    with pytest.raises(ArgumentError, match=message):
        run_reference(SCALE_MEMBERS, [x, y], group_size=1000)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("access", ["load", "store"])
def test_loads_and_stores_at_group_id_of_a_static_mode(access: str) -> None:
    """An element at `%g` of a static mode: group_size past the mode is refused too."""
    body = ("%w = load %y[%g] : memref<f32x8>\n    store %w, %x[] : memref<f32>"
            if access == "load" else "store %v, %y[%g] : memref<f32x8>")  # fmt: skip
    text = f"""func @k(%y: memref<f32x8>, %v: f32, %x: memref<f32>) {{
    %g = group_id
    {body}
}}"""
    kernel = compiled(text)["k"]
    y, x = np.zeros(8, np.float32), np.zeros((), np.float32)
    kernel(y, 1.0, x, group_size=8)
    with pytest.raises(ArgumentError, match="argument %y: expected at least 9 elements in mode 0"):
        kernel(y, 1.0, x, group_size=9)


def test_indices_under_a_condition_are_left_to_the_program() -> None:
    """Work-groups past the array that test their id themselves launch."""
    text = f"""func @k(%y: {V}, %v: f32) {{
    %g = group_id
    %n = size %y[0] : {V}
    %inside = cmp.lt %g, %n : index
    if %inside {{
        store %v, %y[%g] : {V}
    }}
}}"""
    assert group_indexed_modes(load(text).function("k")) == ()
    y = np.zeros(3, np.float32)
    compiled(text)["k"](y, 1.0, group_size=10)
    np.testing.assert_array_equal(y, np.ones(3, np.float32))


MIXED_LOADS = """func @mixed(%A: group<memref<f32x?>>, %B: group<memref<f32x?>>, %i: index) {
    %g = group_id
    %a = load %A[%g] : group<memref<f32x?>>
    %b = load %B[%g] : group<memref<f32x?>>
    axpby.n 1.0, %a, 1.0, %b : f32, memref<f32x?>, f32, memref<f32x?>
    %first = load %A[%i] : group<memref<f32x?>>
}"""


@pytest.mark.parametrize("members", [0, 1, 2])
def test_a_group_every_work_group_loads_needs_a_member_each(members: int) -> None:
    """`load %A[%g]` in the function's body runs in every work-group, whatever other index
    another load of %A uses: fewer members than work-groups are refused (one member used to
    pass a size comparison by broadcasting, and the kernel read past the pointer table)."""
    b = [np.zeros(4, np.float32) for _ in range(3)]
    a = [np.ones(4, np.float32)] * members
    message = (
        rf"argument %A: expected at least 3 group members \(indexed by group_id\), got {members}"
    )
    with pytest.raises(ArgumentError, match=message):
        compiled(MIXED_LOADS)["mixed"](a, b, 0, group_size=3)
    with pytest.raises(ArgumentError, match=message):
        run_reference(MIXED_LOADS, [a, b, 0], group_size=3)
    compiled(MIXED_LOADS)["mixed"]([np.ones(4, np.float32)] * 4, b, 3, group_size=3)
    assert all((y == 1).all() for y in b)


def test_members_under_a_condition_are_compared_where_both_groups_have_them() -> None:
    """A group loaded by group_id only under an `if` (and elsewhere by another index) may have
    fewer members than work-groups; its members are compared with the other group's as far
    as both go."""
    text = """func @cond(%A: group<memref<f32x?>>, %B: group<memref<f32x?>>, %n: index) {
    %g = group_id
    %inside = cmp.lt %g, %n : index
    if %inside {
        %a = load %A[%g] : group<memref<f32x?>>
        %b = load %B[%g] : group<memref<f32x?>>
        axpby.n 1.0, %a, 1.0, %b : f32, memref<f32x?>, f32, memref<f32x?>
    }
    %first = load %A[0] : group<memref<f32x?>>
}"""
    kernel = compiled(text)["cond"]
    b = [np.zeros(4, np.float32) for _ in range(5)]
    kernel([np.ones(4, np.float32)] * 2, b, 2, group_size=5)
    assert [float(y[0]) for y in b] == [1, 1, 0, 0, 0]
    with pytest.raises(ArgumentError, match="argument %B: expected size 4 in mode 0 of member 0"):
        kernel([np.ones(4, np.float32)] * 2, [np.zeros(5, np.float32)] * 5, 2, group_size=5)
