"""`.atomic` under contention: many work-groups on two threads accumulate (beta = 1) into one
shared output. With integer-valued floats every order of the additions gives the same exact
sum, so the native result must equal the reference's sequential one bit for bit; a lost
update shows as a difference. Covers every collective instruction, the atomicrmw add path
(f32, f64, i32, i64 with a literal beta of 1), the compare-exchange path (beta given at run
time, and i8 / i16 / f16 / bf16 outputs), and the nanokernel's atomic epilogue for gemm."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import DTYPES, check, compiled, fortran, random_array

GROUPS = 1024
M, N, K = 24, 12, 6

# per instruction: (modifiers, input shapes, output shape)
SHAPES = {
    "axpby": (".n", [(M, N)], (M, N)),
    "gemm": (".n.t", [(M, K), (N, K)], (M, N)),
    "gemv": (".t", [(K, M), (K,)], (M,)),
    "ger": ("", [(M,), (N,)], (M, N)),
    "hadamard": ("", [(M,), (M,)], (M,)),
    "sum": (".n", [(M, K)], (M,)),
    "sum_vector": (".n", [(K,)], ()),
}


def memref(ty: str, shape: tuple[int, ...]) -> str:
    return f"memref<{ty}{''.join(f'x{n}' for n in shape)}>"


def atomic_kernel(kind: str, ty: str, beta: str, out_ty: str | None = None) -> str:
    """Work-group g: out := alpha * P(inputs[g]) + beta * out, atomically. The inputs are
    group members (addresses read from a table), so the compiler cannot merge the updates of
    consecutive work-groups: every group really updates the shared output."""
    mods, in_shapes, out_shape = SHAPES[kind]
    out_ty = out_ty or ty
    name = "sum" if kind == "sum_vector" else kind
    params, lines, values, types = [], ["%g = group_id"], [], []
    for i, shape in enumerate(in_shapes):
        group = f"group<{memref(ty, shape)}>"
        params.append(f"%x{i}: {group}")
        lines.append(f"%v{i} = load %x{i}[%g] : {group}")
        values.append(f"%v{i}")
        types.append(memref(ty, shape))
    params += [f"%out: {memref(out_ty, out_shape)}", f"%alpha: {out_ty}", f"%beta: {out_ty}"]
    beta_text = "%beta" if beta == "runtime" else beta
    lines.append(
        f"{name}{mods}.atomic %alpha, {', '.join(values)}, {beta_text}, %out\n"
        f"    : {out_ty}, {', '.join(types)}, {out_ty}, {memref(out_ty, out_shape)}"
    )
    return "func @k(" + ", ".join(params) + ") {\n" + "\n".join(lines) + "\n}"


def inputs(kind: str, ty: str, rng, groups: int, small: bool = False) -> list[np.ndarray]:
    """One batched array per input (last axis: the group), integer-valued."""
    _, in_shapes, _ = SHAPES[kind]
    if small:  # f16 sums must stay below 2048 to be exact
        return [fortran(rng.integers(0, 2, (*s, groups)).astype(DTYPES[ty])) for s in in_shapes]
    return [random_array(rng, (*s, groups), ty, integral=True) for s in in_shapes]


def product(kind: str, xs: list[np.ndarray]) -> np.ndarray:
    """sum over the groups of P(inputs[g]), exactly (int64 / float64 of integer values)."""
    x = [a.astype(np.int64 if a.dtype.kind in "iu" else np.float64) for a in xs]
    if kind == "axpby":
        return x[0].sum(axis=-1)
    if kind == "gemm":
        return np.einsum("ikg,jkg->ij", x[0], x[1])
    if kind == "gemv":
        return np.einsum("kig,kg->i", x[0], x[1])
    if kind == "ger":
        return np.einsum("ig,jg->ij", x[0], x[1])
    if kind == "hadamard":
        return (x[0] * x[1]).sum(axis=-1)
    if kind == "sum":
        return x[0].sum(axis=(1, 2))
    return np.asarray(x[0].sum())


def run_atomic(
    text: str,
    kind: str,
    ty: str,
    out_ty: str,
    rng,
    groups: int = GROUPS,
    alpha: int = 2,
    small: bool = False,
    repeat: int = 3,
) -> None:
    """Native on two threads == out + alpha * sum_g P_g exactly, `repeat` launches; and
    native == reference on the first 16 groups."""
    xs = inputs(kind, ty, rng, groups, small)
    start = random_array(rng, SHAPES[kind][2], out_ty, integral=True)
    if small:
        start[...] = 1
    scalar = DTYPES[out_ty].type
    total = start.astype(np.float64 if out_ty.startswith("f") else np.int64)
    want = (total + alpha * product(kind, xs)).astype(DTYPES[out_ty])  # wraps for integers
    kernel = compiled(text)["k"]
    for _ in range(repeat):
        out = start.copy(order="F")
        kernel(*xs, out, scalar(alpha), scalar(1), group_size=groups, num_threads=2)
        np.testing.assert_array_equal(out, want)
    few = [fortran(x[..., :16]) for x in xs]
    check(
        text, [*few, start.copy(order="F"), scalar(alpha), scalar(1)], group_size=16, num_threads=2
    )


@pytest.mark.parametrize("beta", ["1.0", "runtime"])
@pytest.mark.parametrize("ty", ["f32", "f64"])
@pytest.mark.parametrize("kind", list(SHAPES))
def test_float_accumulation_is_exact(kind: str, ty: str, beta: str, rng) -> None:
    """atomicrmw fadd (literal beta 1) and the compare-exchange loop (run-time beta = 1)."""
    text = atomic_kernel(kind, ty, beta)
    run_atomic(text, kind, ty, ty, rng)


@pytest.mark.parametrize("ty", ["i8", "i16", "i32", "i64"])
@pytest.mark.parametrize("kind", ["axpby", "gemm", "ger", "sum"])
def test_integer_accumulation_is_exact(kind: str, ty: str, rng) -> None:
    """atomicrmw add for 32/64-bit outputs, compare-exchange for 8/16-bit ones (wrapping
    modular sums are order-independent too)."""
    text = atomic_kernel(kind, ty, "1")
    run_atomic(text, kind, ty, ty, rng)


@pytest.mark.parametrize("ty", ["f16", "bf16"])
@pytest.mark.parametrize("kind", ["axpby", "gemm", "hadamard"])
def test_half_output_accumulation_is_exact(kind: str, ty: str, rng) -> None:
    """A 16-bit output updates through a compare-exchange on its 16 bits (a gemm's tiles
    compute into private f32 scratch first: `lowering.gemm.through_f32_scratch`)."""
    text = atomic_kernel(kind, ty, "1.0")
    run_atomic(text, kind, ty, ty, rng, groups=64, alpha=1, small=True)


def test_gemm_nanokernel_atomic_epilogue_is_used() -> None:
    from nanotc.ir.printer import print_program

    text = atomic_kernel("gemm", "f32", "1.0")
    assert "tile.gemm" in print_program(compiled(text).lowered)
    assert "atomicrmw fadd" in compiled(text).llvm_ir


@pytest.mark.parametrize("kind", ["axpby", "gemm"])
def test_atomic_with_beta_zero_stores_whole_values(kind: str, rng) -> None:
    """beta = 0: each group stores alpha * P atomically; when all groups compute the same
    values the shared output holds exactly them (never a torn or mixed value), and the NaN
    it held is never read."""
    text = atomic_kernel(kind, "f64", "0.0")
    xs = [fortran(np.repeat(x[..., :1], GROUPS, axis=-1)) for x in inputs(kind, "f64", rng, 1)]
    out = np.full(SHAPES[kind][2], np.nan, order="F")
    compiled(text)["k"](*xs, out, np.float64(3), np.float64(0), group_size=GROUPS, num_threads=2)
    np.testing.assert_array_equal(out, 3 * product(kind, [x[..., :1] for x in xs]))
