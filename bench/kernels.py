"""The nanotc kernels the workloads time, as tiny-tensor-language text.

Each generator returns the source of one function; `compiled(source)` compiles it once per
process (`nanotc.compile`) and returns the callable kernel. Printing a source shows exactly what
a benchmark measures, e.g. `python -c "from bench import kernels; print(kernels.batched(...))"`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import nanotc

Kernel = Callable[..., None]  # kernel(*args, group_size=N, num_threads=T)


def memref(dtype: str, *shape: int | str) -> str:
    return f"memref<{dtype}x{'x'.join(str(s) for s in shape)}>"


def column_blocks(dtype: str, nb: int, beta: float = 0.0, inputs: str | None = None) -> str:
    """W1: C = A B (beta 0) with dynamic operands; work-group g computes the column block
    C[:, g*nb : (g+1)*nb] = A B[:, g*nb : (g+1)*nb]; launch with group_size = n / nb.
    `inputs`: the element type of A and B when it is not C's (bf16 into f32)."""
    inputs = inputs or dtype
    dyn, a_dyn = memref(dtype, "?", "?"), memref(inputs, "?", "?")
    block = f"memref<{dtype}x?x{nb},strided<1,?>>"  # the subview keeps the leading dimension
    b_block = f"memref<{inputs}x?x{nb},strided<1,?>>"
    return f"""\
func @gemm(%A: {a_dyn}, %B: {a_dyn}, %C: {dyn}) {{
    %g = group_id
    %j = arith.mul %g, {nb} : index
    %b = subview %B[:, %j:{nb}] : {a_dyn}
    %c = subview %C[:, %j:{nb}] : {dyn}
    gemm.n.n 1.0, %A, %b, {beta!r}, %c : {dtype}, {a_dyn}, {b_block}, {dtype}, {block}
}}
"""


def batched(dtype: str, m: int, n: int, k: int, inputs: str | None = None) -> str:
    """W2: C_i += A_i B_i; work-group g multiplies batch member g; group_size = batch.
    `inputs`: the element type of A and B when it is not C's (bf16 into f32)."""
    inputs = inputs or dtype
    a, b, c = memref(inputs, m, k, "?"), memref(inputs, k, n, "?"), memref(dtype, m, n, "?")
    am, bm, cm = memref(inputs, m, k), memref(inputs, k, n), memref(dtype, m, n)
    return f"""\
func @bgemm(%A: {a}, %B: {b}, %C: {c}) {{
    %g = group_id
    %a = subview %A[:, :, %g] : {a}
    %b = subview %B[:, :, %g] : {b}
    %c = subview %C[:, :, %g] : {c}
    gemm.n.n 1.0, %a, %b, 1.0, %c : {dtype}, {am}, {bm}, {dtype}, {cm}
}}
"""


def batched_repeated(dtype: str, m: int, n: int, k: int, inputs: str | None = None) -> str:
    """W2, cache-resident: the same C_i += A_i B_i, swept %reps times over a small batch inside
    one launch (so launch overhead is not measured). Work-group g owns the contiguous slice
    batch*g/G .. batch*(g+1)/G (G = group_size, launched as one group per thread) and sweeps it
    %reps times, like the libxsmm driver's threads. The batch must be a multiple of G.
    `inputs`: the element type of A and B when it is not C's (bf16 into f32)."""
    inputs = inputs or dtype
    a, b, c = memref(inputs, m, k, "?"), memref(inputs, k, n, "?"), memref(dtype, m, n, "?")
    am, bm, cm = memref(inputs, m, k), memref(inputs, k, n), memref(dtype, m, n)
    return f"""\
func @bgemm_repeated(%A: {a}, %B: {b}, %C: {c}, %reps: index) {{
    %g = group_id
    %groups = group_size
    %batch = size %C[2] : {c}
    %per = arith.div %batch, %groups : index
    %lo = arith.mul %g, %per : index
    %hi = arith.add %lo, %per : index
    for %r = 0, %reps {{
        for %i = %lo, %hi {{
            %a = subview %A[:, :, %i] : {a}
            %b = subview %B[:, :, %i] : {b}
            %c = subview %C[:, :, %i] : {c}
            gemm.n.n 1.0, %a, %b, 1.0, %c : {dtype}, {am}, {bm}, {dtype}, {cm}
        }}
    }}
}}
"""


def batch_reduce_repeated(dtype: str, m: int, n: int, k: int, inputs: str | None = None) -> str:
    """bf16 workload: C += sum_i A_i B_i over the whole batch (a batch-reduce loop), %reps
    times in one launch of one work-group."""
    inputs = inputs or dtype
    a, b, c = memref(inputs, m, k, "?"), memref(inputs, k, n, "?"), memref(dtype, m, n)
    am, bm = memref(inputs, m, k), memref(inputs, k, n)
    return f"""\
func @brgemm_repeated(%A: {a}, %B: {b}, %C: {c}, %reps: index) {{
    %count = size %A[2] : {a}
    for %r = 0, %reps {{
        for %i = 0, %count {{
            %a = subview %A[:, :, %i] : {a}
            %b = subview %B[:, :, %i] : {b}
            gemm.n.n 1.0, %a, %b, 1.0, %C : {dtype}, {am}, {bm}, {dtype}, {c}
        }}
    }}
}}
"""


def single(dtype: str, m: int, n: int, k: int, static: bool = True, empty: bool = False) -> str:
    """W3: one GEMM C = A B in one work-group, with the shape in the types (static) or not.
    `empty` leaves out the gemm: the same launch with no work, to measure launch overhead."""
    if static:
        a, b, c = memref(dtype, m, k), memref(dtype, k, n), memref(dtype, m, n)
    else:
        a = b = c = memref(dtype, "?", "?")
    body = "" if empty else f"    gemm.n.n 1.0, %A, %B, 0.0, %C : {dtype}, {a}, {b}, {dtype}, {c}\n"
    return f"func @gemm(%A: {a}, %B: {b}, %C: {c}) {{\n{body}}}\n"


def dynamic(dtype: str, trans: str = "n.n", row_major: bool = False) -> str:
    """One gemm of run-time sizes (`trans`: its transposes), on column-major operands or on
    row-major ones (numpy's C order: `strided<?,1>`)."""
    t = f"memref<{dtype}x?x?,strided<?,1>>" if row_major else memref(dtype, "?", "?")
    body = f"    gemm.{trans} 1.0, %A, %B, 0.0, %C : {dtype}, {t}, {t}, {dtype}, {t}\n"
    return f"func @gemm(%A: {t}, %B: {t}, %C: {t}) {{\n{body}}}\n"


@cache
def compiled(source: str) -> Kernel:
    """The one function of `source`, compiled for this machine (cached per process)."""
    compilation = nanotc.compile(source, name="<bench>")
    (name,) = list(compilation)
    return compilation[name]


# W5: one memory-bound instruction per kernel. Operands are dynamic; work-group g of G takes
# the g-th of G equal slices along `split` (the extent must divide evenly) and runs the
# instruction on it %reps times. Per instruction: its arguments as (name, rank), the argument
# and dimension whose extent is split, the slices as (view, argument, indices), and the
# instruction; `{v}` is the slice type
# of a vector, `{m}` of a matrix slice, `{t}` the element type.
_SLICED = {
    "copy": (
        (("x", 1), ("y", 1)), ("y", 0),
        (("xs", "x", "%lo:%per"), ("ys", "y", "%lo:%per")),
        "axpby.n 1.0, %xs, 0.0, %ys : {t}, {v}, {t}, {v}",
    ),
    "axpby": (
        (("x", 1), ("y", 1)), ("y", 0),
        (("xs", "x", "%lo:%per"), ("ys", "y", "%lo:%per")),
        "axpby.n 1.5, %xs, 0.5, %ys : {t}, {v}, {t}, {v}",
    ),
    "hadamard": (
        (("x", 1), ("y", 1), ("z", 1)), ("z", 0),
        (("xs", "x", "%lo:%per"), ("ys", "y", "%lo:%per"), ("zs", "z", "%lo:%per")),
        "hadamard 1.5, %xs, %ys, 1.0, %zs : {t}, {v}, {v}, {t}, {v}",
    ),
    "sum": (
        (("x", 1), ("s", 1)), ("x", 0),
        (("xs", "x", "%lo:%per"), ("ss", "s", "%g")),
        "sum.n 1.0, %xs, 0.0, %ss : {t}, {v}, {t}, memref<{t}>",
    ),
    "gemv.n": (
        (("a", 2), ("x", 1), ("y", 1)), ("a", 0),
        (("as", "a", "%lo:%per, :"), ("ys", "y", "%lo:%per")),
        "gemv.n 1.0, %as, %x, 0.0, %ys : {t}, {m}, {v}, {t}, {v}",
    ),
    "gemv.t": (
        (("a", 2), ("x", 1), ("y", 1)), ("a", 1),
        (("as", "a", ":, %lo:%per"), ("ys", "y", "%lo:%per")),
        "gemv.t 1.0, %as, %x, 0.0, %ys : {t}, {m}, {v}, {t}, {v}",
    ),
    "ger": (
        (("x", 1), ("y", 1), ("a", 2)), ("a", 1),
        (("ys", "y", "%lo:%per"), ("as", "a", ":, %lo:%per")),
        "ger 1.0, %x, %ys, 1.0, %as : {t}, {v}, {v}, {t}, {m}",
    ),
}  # fmt: skip
SLICED_OPS = tuple(_SLICED)


def sliced(op: str, dtype: str) -> str:
    """W5: `op` (one of SLICED_OPS) on work-group g's slice of its operands, %reps times.
    The slices are taken inside the loop: a loop of gers into one C taken outside it is a
    batch-reduce, which nanotc runs as one rank-%reps update (C moved once for all %reps)."""
    arguments, (split, dim), slices, instruction = _SLICED[op]
    types = {1: memref(dtype, "?"), 2: memref(dtype, "?", "?")}
    params = ", ".join(f"%{name}: {types[rank]}" for name, rank in arguments)
    rank_of = dict(arguments)
    views = "".join(
        f"        %{view} = subview %{source}[{index}] : {types[rank_of[source]]}\n"
        for view, source, index in slices
    )
    body = instruction.format(t=dtype, v=memref(dtype, "?"), m=f"memref<{dtype}x?x?,strided<1,?>>")
    return f"""\
func @w5({params}, %reps: index) {{
    %g = group_id
    %groups = group_size
    %extent = size %{split}[{dim}] : {types[rank_of[split]]}
    %per = arith.div %extent, %groups : index
    %lo = arith.mul %g, %per : index
    for %r = 0, %reps {{
{views}        {body}
    }}
}}
"""
