"""Recipes: ready-made kernels for common GEMM shapes, with the signatures of the reference
implementation's recipes (tinytc's `tinytc_recipe_small_gemm_batched_create` and
`tinytc_recipe_tall_and_skinny_create`), as Python functions returning callable objects.

    gemm = nanotc.recipes.small_gemm_batched("f64", "n", "t", M, N, K, ldA, strideA, ldB,
                                             strideB, ldC, strideC)
    gemm(alpha, A, B, beta, C, howmany)          # C_g = alpha op(A_g) op(B_g) + beta C_g

    tas = nanotc.recipes.tall_and_skinny("f32", N, K)
    tas(alpha, A, B, beta, C)                    # C = alpha A B + beta C, A is M x K, M large

Each recipe is a program of two kernels, `gemm` and `gemm_beta0` (beta a literal 0, so C is
never read); a call picks `gemm_beta0` when beta is 0, as the reference does. The generated
source is the recipe's `source`; the compiled program its `compilation` (through the kernel
cache, so creating the same recipe again is fast).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from nanotc.api import Compilation, compile
from nanotc.ir.types import INDEX_MAX, ScalarType
from nanotc.lowering.register_tile import choose
from nanotc.runtime.arguments import numpy_dtype
from nanotc.runtime.interop import InteropError, as_ndarray
from nanotc.runtime.launcher import Launch
from nanotc.targets import Target, get

KERNELS = ("gemm", "gemm_beta0")


def scalar_type(ty: str | ScalarType | Any) -> ScalarType:
    """A floating-point element type from its name ("f32"), a ScalarType or a numpy dtype."""
    if isinstance(ty, ScalarType):
        found = ty
    else:
        names = {str(t): t for t in ScalarType}
        name = str(ty).removeprefix("torch.")  # torch.float32 names its numpy dtype
        if name not in names:
            unsupported = ValueError(f"unsupported element type {ty!r} (use f16, bf16, f32 or f64)")
            try:
                dtype = np.dtype(name if name != str(ty) else ty)
            except TypeError:
                raise unsupported from None
            matches = [t for t in ScalarType if t.is_float and numpy_dtype(t) == dtype]
            if not matches:
                raise unsupported
            name = str(matches[0])
        found = names[name]
    if not found.is_float:
        raise ValueError(f"recipes compute in floating point: {found} is not supported")
    return found


def transpose(flag: str | bool) -> str:
    """ "n" or "t" from "n"/"N"/"t"/"T" or a bool (True: transposed)."""
    if isinstance(flag, bool):
        return "t" if flag else "n"
    text = str(flag).lower()
    if text not in ("n", "t"):
        raise ValueError(f"transpose must be 'n' or 't', got {flag!r}")
    return text


class Recipe:
    """A compiled two-kernel program; subclasses bind arguments and launch."""

    def __init__(self, source: str, target: str | Target | None):
        self.source = source
        self.compilation: Compilation = compile(source, target, "<recipe>")

    def kernel_for(self, beta: Any) -> str:
        """`gemm_beta0` when beta is zero (C is then never read), else `gemm`."""
        return "gemm_beta0" if _is_zero(beta) else "gemm"


# --- small_gemm_batched --------------------------------------------------------------------


@dataclass(frozen=True)
class _Operand:
    name: str
    rows: int
    cols: int
    ld: int
    stride: int


class SmallGemmBatched(Recipe):
    """For g = 0 .. howmany-1: C_g = alpha op(A_g) op(B_g) + beta C_g (column-major; A_g
    starts at A + g strideA with leading dimension ldA, and so on)."""

    def __init__(self, ty: ScalarType, trans: tuple[str, str], mnk: tuple[int, int, int],
                 layout: Sequence[int], target: str | Target | None):  # fmt: skip
        m, n, k = mnk
        ld_a, stride_a, ld_b, stride_b, ld_c, stride_c = layout
        a_shape = (m, k) if trans[0] == "n" else (k, m)
        b_shape = (k, n) if trans[1] == "n" else (n, k)
        self.ty, self.trans, self.shape = ty, trans, mnk
        self.operands = (
            _Operand("A", *a_shape, ld_a, stride_a),
            _Operand("B", *b_shape, ld_b, stride_b),
            _Operand("C", m, n, ld_c, stride_c),
        )
        for op in self.operands:
            _check_layout(op)
        super().__init__(_small_gemm_source(ty, trans, self.operands), target)

    def prepare(self, alpha: Any, A: Any, B: Any, beta: Any, C: Any, howmany: int | None = None,
                *, num_threads: int | None = None) -> Launch:  # fmt: skip
        """Bind and check the arguments once; the returned launch runs every batch member.
        A, B, C: flat buffers (1-D, as the reference's pointers) or 3-D arrays whose last
        axis is the batch; `howmany` defaults to the batch extent of the 3-D ones."""
        arrays = [_array(op.name, v, self.ty) for op, v in zip(self.operands, (A, B, C))]
        count = _howmany(howmany, arrays)
        views = [_batch_view(op, a, count) for op, a in zip(self.operands, arrays)]
        kernel = self.compilation[self.kernel_for(beta)]
        return kernel.prepare(alpha, views[0], views[1], beta, views[2], group_size=count,
                              num_threads=num_threads)  # fmt: skip

    def __call__(self, alpha: Any, A: Any, B: Any, beta: Any, C: Any, howmany: int | None = None,
                 *, num_threads: int | None = None) -> None:  # fmt: skip
        self.prepare(alpha, A, B, beta, C, howmany, num_threads=num_threads)()


def small_gemm_batched(
    ty: str | ScalarType | Any,
    transA: str | bool,
    transB: str | bool,
    M: int,
    N: int,
    K: int,
    ldA: int,
    strideA: int,
    ldB: int,
    strideB: int,
    ldC: int,
    strideC: int,
    *,
    target: str | Target | None = None,
) -> SmallGemmBatched:
    """Batched small GEMMs with every size, leading dimension and batch stride static."""
    sizes = {"M": M, "N": N, "K": K, "ldA": ldA, "strideA": strideA, "ldB": ldB,
             "strideB": strideB, "ldC": ldC, "strideC": strideC}  # fmt: skip
    for name, value in sizes.items():
        _check_count(name, value)
    trans = (transpose(transA), transpose(transB))
    layout = (ldA, strideA, ldB, strideB, ldC, strideC)
    return SmallGemmBatched(scalar_type(ty), trans, (M, N, K), layout, target)


def _small_gemm_source(ty: ScalarType, trans: tuple[str, str], ops: Sequence[_Operand]) -> str:
    batched = [f"memref<{ty}x{o.rows}x{o.cols}x?,strided<1,{o.ld},{o.stride}>>" for o in ops]
    member = [f"memref<{ty}x{o.rows}x{o.cols},strided<1,{o.ld}>>" for o in ops]
    a, b, c = batched
    kernels = []
    for name, beta in (("gemm", "%beta"), ("gemm_beta0", "0.0")):
        kernels.append(f"""\
func @{name}(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{
    %g = group_id
    %a = subview %A[:,:,%g] : {a}
    %b = subview %B[:,:,%g] : {b}
    %c = subview %C[:,:,%g] : {c}
    gemm.{trans[0]}.{trans[1]} %alpha, %a, %b, {beta}, %c
        : {ty}, {member[0]}, {member[1]}, {ty}, {member[2]}
}}
""")
    return "\n".join(kernels)


def _check_layout(op: _Operand) -> None:
    if op.ld < max(1, op.rows):
        raise ValueError(f"ld{op.name} = {op.ld} is less than the {op.rows} rows of {op.name}")
    if op.stride < op.ld * op.cols:
        raise ValueError(
            f"stride{op.name} = {op.stride} is less than ld{op.name} x columns = "
            f"{op.ld * op.cols}: batch members of {op.name} would overlap"
        )


def _howmany(howmany: int | None, arrays: Sequence[np.ndarray]) -> int:
    if howmany is not None:
        _check_count("howmany", howmany)
        return int(howmany)
    batched = [a.shape[-1] for a in arrays if a.ndim == 3]
    if not batched:
        raise ValueError("howmany is needed when A, B and C are all flat buffers")
    return min(batched)


def _batch_view(op: _Operand, array: np.ndarray, howmany: int) -> np.ndarray:
    """A 3-D (rows x cols x howmany) view; a flat buffer is viewed with the recipe's ld and
    stride after checking that it holds every element."""
    if array.ndim == 3:
        if array.shape[-1] < howmany:
            raise ValueError(f"{op.name} holds {array.shape[-1]} batch members, {howmany} needed")
        return array
    if array.ndim != 1:
        raise ValueError(f"{op.name} must be a flat buffer or a 3-D array, got shape {array.shape}")
    if array.strides[0] != array.itemsize and array.size > 1:
        raise ValueError(f"{op.name}: a flat buffer must be contiguous")
    needed = 0 if howmany == 0 else (howmany - 1) * op.stride + (op.cols - 1) * op.ld + op.rows
    if array.size < needed:
        raise ValueError(
            f"{op.name} has {array.size} elements; {howmany} members with ld{op.name}={op.ld} "
            f"and stride{op.name}={op.stride} need {needed}"
        )
    item = array.itemsize
    strides = (item, op.ld * item, op.stride * item)
    return as_strided(array, (op.rows, op.cols, howmany), strides, writeable=array.flags.writeable)


# --- tall_and_skinny -----------------------------------------------------------------------


class TallAndSkinny(Recipe):
    """C = alpha A B + beta C with A M x K, B K x N, C M x N (column-major, any leading
    dimensions), M large: work-group g computes rows g*M_block_size.. of C."""

    def __init__(self, ty: ScalarType, sizes: dict[str, int | None], block: int,
                 target: str | Target | None):  # fmt: skip
        self.ty, self.sizes, self.M_block_size = ty, sizes, block
        super().__init__(_tall_and_skinny_source(ty, sizes, block), target)

    def groups(self, m: int) -> int:
        """Work-groups of a launch with M rows: one per block of rows."""
        return math.ceil(m / self.M_block_size)

    def prepare(self, alpha: Any, A: Any, B: Any, beta: Any, C: Any, *,
                num_threads: int | None = None) -> Launch:  # fmt: skip
        a, b, c = (_array(name, v, self.ty) for name, v in zip("ABC", (A, B, C)))
        for name, array in zip("ABC", (a, b, c)):
            if array.ndim != 2:
                raise ValueError(f"{name} must be a matrix, got shape {array.shape}")
        if a.shape[0] != c.shape[0]:
            raise ValueError(f"A has {a.shape[0]} rows and C {c.shape[0]}: they must agree (M)")
        kernel = self.compilation[self.kernel_for(beta)]
        return kernel.prepare(alpha, a, b, beta, c, group_size=self.groups(c.shape[0]),
                              num_threads=num_threads)  # fmt: skip

    def __call__(self, alpha: Any, A: Any, B: Any, beta: Any, C: Any, *,
                 num_threads: int | None = None) -> None:  # fmt: skip
        self.prepare(alpha, A, B, beta, C, num_threads=num_threads)()


def tall_and_skinny(
    ty: str | ScalarType | Any,
    N: int,
    K: int,
    M_block_size: int | None = None,
    *,
    target: str | Target | None = None,
) -> TallAndSkinny:
    """C = alpha A B + beta C for a tall A: M and the leading dimensions are dynamic."""
    return tall_and_skinny_specialized(ty, None, N, K, None, None, None, M_block_size,
                                       target=target)  # fmt: skip


def tall_and_skinny_specialized(
    ty: str | ScalarType | Any,
    M: int | None,
    N: int,
    K: int,
    ldA: int | None,
    ldB: int | None,
    ldC: int | None,
    M_block_size: int | None = None,
    *,
    target: str | Target | None = None,
) -> TallAndSkinny:
    """`tall_and_skinny` with M and the leading dimensions static where given (None:
    dynamic), like the reference's `..._create_specialized`. A block of rows is a view of A
    and C, so `M_block_size` is at most M and the static ldA and ldC."""
    element = scalar_type(ty)
    sizes = {"M": M, "N": N, "K": K, "ldA": ldA, "ldB": ldB, "ldC": ldC}
    for name, value in sizes.items():
        if value is not None:
            _check_count(name, value)
    rows = {"ldA": M, "ldB": K, "ldC": M}
    for name, value in rows.items():
        if sizes[name] is not None and value is not None and sizes[name] < max(1, value):  # type: ignore[operator]
            raise ValueError(f"{name} = {sizes[name]} is less than the {value} rows it spans")
    resolved = get(target)
    block = default_block_size(element, N, K, resolved) if M_block_size is None else M_block_size
    _check_count("M_block_size", block)
    if block == 0:
        raise ValueError("M_block_size must be positive")
    # a block of rows is a view of A and C: no taller than M or their static leading dimension
    limits = [v for v in (M, ldA, ldC) if v is not None]
    return TallAndSkinny(element, sizes, max(1, min([int(block), *limits])), resolved)


def default_block_size(ty: ScalarType, N: int, K: int, target: Target) -> int:
    """Rows per work-group: 256, or fewer when the block of A (rows x K) would not fit in a
    quarter of L2 (each column block of C re-reads it); always whole register tiles."""
    mr = choose(target, ty, None, N, K).mr
    fit = target.l2_bytes // 4 // max(1, K * ty.size)
    return max(mr, min(256, fit) // mr * mr)


def _tall_and_skinny_source(ty: ScalarType, sizes: dict[str, int | None], block: int) -> str:
    def dim(value: int | None) -> str:
        return "?" if value is None else str(value)

    m, n, k = dim(sizes["M"]), sizes["N"], sizes["K"]
    lda, ldb, ldc = dim(sizes["ldA"]), dim(sizes["ldB"]), dim(sizes["ldC"])
    a, b = f"memref<{ty}x{m}x{k},strided<1,{lda}>>", f"memref<{ty}x{k}x{n},strided<1,{ldb}>>"
    c = f"memref<{ty}x{m}x{n},strided<1,{ldc}>>"
    whole = sizes["M"] is not None and sizes["M"] % block == 0

    def gemm(rows: str, size: str, beta: str, indent: str) -> str:
        ab, cb = (
            f"memref<{ty}x{rows}x{k},strided<1,{lda}>>",
            f"memref<{ty}x{rows}x{n},strided<1,{ldc}>>",
        )
        return (
            f"{indent}%a = subview %A[%m:{size}, :] : {a}\n"
            f"{indent}%c = subview %C[%m:{size}, :] : {c}\n"
            f"{indent}gemm.n.n %alpha, %a, %B, {beta}, %c : {ty}, {ab}, {b}, {ty}, {cb}\n"
        )

    kernels = []
    for name, beta in (("gemm", "%beta"), ("gemm_beta0", "0.0")):
        head = (
            f"func @{name}(%alpha: {ty}, %A: {a}, %B: {b}, %beta: {ty}, %C: {c}) {{\n"
            f"    %g = group_id\n"
            f"    %m = arith.mul %g, {block} : index\n"
        )
        if sizes["M"] == 0:
            body = ""  # no rows, no work-groups: nothing to compute
        elif whole:
            body = gemm(str(block), str(block), beta, "    ")
        else:
            body = (
                f"    %M = size %C[0] : {c}\n"
                f"    %rest = arith.sub %M, %m : index\n"
                f"    %short = cmp.lt %rest, {block} : index\n"
                f"    if %short {{\n{gemm('?', '%rest', beta, '        ')}"
                f"    }} else {{\n{gemm(str(block), str(block), beta, '        ')}    }}\n"
            )
        kernels.append(head + body + "}\n")
    return "\n".join(kernels)


# --- arguments -----------------------------------------------------------------------------


def _array(name: str, value: Any, ty: ScalarType) -> np.ndarray:
    try:
        array = as_ndarray(value)
    except InteropError as e:
        raise ValueError(f"{name}: {e}") from None
    if array is None:
        raise ValueError(f"{name} must be an array or tensor, got {type(value).__name__}")
    if array.dtype != numpy_dtype(ty):
        raise ValueError(f"{name} must hold {ty} ({numpy_dtype(ty)}), got {array.dtype}")
    return array


def _check_count(name: str, value: Any) -> None:
    """Sizes, leading dimensions and strides are the language's index values (int64)."""
    if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    if value > INDEX_MAX:
        raise ValueError(f"{name} = {value} does not fit an index (at most 2**63 - 1)")


def _is_zero(value: Any) -> bool:
    try:
        return bool(value == 0)
    except (TypeError, ValueError):
        return False
