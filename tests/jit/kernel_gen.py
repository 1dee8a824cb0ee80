"""A hypothesis strategy for random, well-defined kernels to run natively and on the reference.

A kernel has input and output memref parameters (static, dynamic and strided layouts), scalar
parameters, optionally a group and a batched output sliced by the group id, and a body of
random statements: collective instructions (axpby, gemm, gemv, ger, hadamard, sum; some
`.atomic`) on views, allocas initialised before use, elementwise foreach loops of loads and
stores (bounds literal or from `size`), for loops whose variable offsets subviews, ifs (with
and without else, some with results that become alpha), and scalar arithmetic. Views are
subviews, fused modes of packed matrices and expanded prefixes of unit-stride vectors.

Every program is well defined by construction: the generator knows every run-time size, so
subviews and loads stay in bounds, instruction shapes agree, an output never overlaps the
inputs of its instruction, and nothing is read before it is written (allocas are filled
first). Data are small integers, so most results are exact even in f32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .helpers import DTYPES, random_array, strided_view

MAX_DEPTH = 2


@dataclass(frozen=True)
class View:
    """A memref value: its run-time shape, which sizes and strides its type knows, and the
    parameter or alloca whose memory it views."""

    name: str
    shape: tuple[int, ...]
    static: tuple[bool, ...]
    strides: tuple[int | None, ...]  # static strides, None where the type has `?`
    root: str
    writable: bool

    def type(self, elem: str) -> str:
        if not self.shape:
            return f"memref<{elem}>"
        dims = "".join(f"x{n if s else '?'}" for n, s in zip(self.shape, self.static))
        strides = ",".join("?" if s is None else str(s) for s in self.strides)
        return f"memref<{elem}{dims},strided<{strides}>>"


@dataclass(frozen=True)
class LoopVar:
    name: str
    values: tuple[int, ...]  # every value it takes


@dataclass
class Scope:
    views: list[View] = field(default_factory=list)
    scalars: list[str] = field(default_factory=list)
    loops: list[LoopVar] = field(default_factory=list)


@dataclass
class Kernel:
    text: str
    make_args: Callable[[np.random.Generator], list[Any]]
    group_size: int


class KernelGen:
    def __init__(self, draw: Callable[[Any], Any]):
        self.draw = draw
        self.counter = 0
        self.lines: list[str] = []
        self.indent = 1
        self.params: list[str] = []
        self.arg_makers: list[Callable[[np.random.Generator], Any]] = []
        self.elem = self.choice(["f32", "f64", "f64", "f32", "i32", "i64"])
        self.is_int = self.elem.startswith("i")
        self.groups = self.draw(st.integers(1, 3))
        self.gemms = 0

    # -- small choices ----------------------------------------------------------------------
    def choice(self, options: list[Any]) -> Any:
        return self.draw(st.sampled_from(options))

    def chance(self, percent: int) -> bool:
        return self.draw(st.integers(0, 99)) < percent

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def literal(self) -> str:
        if self.is_int:
            return str(self.choice([0, 1, -1, 2, 3]))
        return self.choice(["0.0", "1.0", "-1.0", "2.0", "0.5", "-1.5"])

    # -- parameters -------------------------------------------------------------------------
    def memref_param(self, role: str, order: int) -> View:
        name = f"%{role}{len(self.params)}"
        shape = tuple(self.draw(st.integers(6, 12)) for _ in range(order))
        layout = self.choice(["static", "dynamic", "strided"])
        elem = self.elem
        if layout == "static":
            strides = tuple(int(np.prod(shape[:k])) for k in range(order))
            view = View(name, shape, (True,) * order, strides, name, role == "out")

            def make(rng: np.random.Generator) -> np.ndarray:
                return random_array(rng, shape, elem, integral=True)

        elif layout == "dynamic":
            strides = (1,) + (None,) * (order - 1)
            view = View(name, shape, (False,) * order, strides, name, role == "out")

            def make(rng: np.random.Generator) -> np.ndarray:
                return random_array(rng, shape, elem, integral=True)

        else:
            steps = tuple(self.draw(st.integers(1, 2)) for _ in range(order))
            view = View(name, shape, (False,) * order, (None,) * order, name, role == "out")

            def make(rng: np.random.Generator) -> np.ndarray:
                v = strided_view(rng, shape, elem, steps)
                v[...] = np.rint(v.astype(np.float64) * 4) if elem.startswith("f") else v
                return v

        self.params.append(f"{name}: {view.type(elem)}")
        self.arg_makers.append(make)
        return view

    def scalar_param(self) -> str:
        name = f"%s{len(self.params)}"
        self.params.append(f"{name}: {self.elem}")
        value = (
            self.choice([0.5, -1.0, 2.0, 1.0, 0.0])
            if not self.is_int
            else self.choice([1, -2, 3, 0])
        )
        dtype = DTYPES[self.elem].type
        self.arg_makers.append(lambda rng: dtype(value))
        return name

    def group_param(self, scope: Scope, gid: str) -> None:
        name = f"%grp{len(self.params)}"
        shape = (self.draw(st.integers(6, 9)), self.draw(st.integers(6, 9)))
        t = f"memref<{self.elem}x{shape[0]}x{shape[1]}>"
        self.params.append(f"{name}: group<{t}>")
        groups, elem = self.groups, self.elem
        self.arg_makers.append(
            lambda rng: [random_array(rng, shape, elem, integral=True) for _ in range(groups)]
        )
        member = self.fresh("m")
        self.emit(f"{member} = load {name}[{gid}] : group<{t}>")
        scope.views.append(View(member, shape, (True, True), (1, shape[0]), name, False))

    def batched_output(self, scope: Scope, gid: str) -> None:
        name = f"%bo{len(self.params)}"
        shape = (self.draw(st.integers(6, 9)), self.draw(st.integers(6, 9)))
        t = f"memref<{self.elem}x{shape[0]}x{shape[1]}x?>"
        self.params.append(f"{name}: {t}")
        full, elem = (*shape, self.groups), self.elem
        self.arg_makers.append(lambda rng: random_array(rng, full, elem, integral=True))
        slice_ = self.fresh("bg")
        self.emit(f"{slice_} = subview {name}[:, :, {gid}] : {t}")
        scope.views.append(View(slice_, shape, (True, True), (1, shape[0]), name, True))

    # -- views --------------------------------------------------------------------------------
    def offset(self, scope: Scope, limit: int) -> str:
        """An index operand in [0, limit]: a literal, or a loop variable that stays in range."""
        fitting = [v for v in scope.loops if max(v.values) <= limit and min(v.values) >= 0]
        if fitting and self.chance(40):
            return self.choice(fitting).name
        return str(self.draw(st.integers(0, limit)))

    def view(
        self, scope: Scope, shape: tuple[int, ...], writable: bool, avoid: set[str]
    ) -> View | None:
        """A subview of `shape` of some memref in scope (writable ones for outputs, never one
        over the memory of `avoid`), or None when nothing fits."""
        order = len(shape)
        if self.chance(15):
            reshaped = self.reshaped_view(scope, shape, writable, avoid)
            if reshaped is not None:
                return reshaped
        candidates = [
            v
            for v in scope.views
            if v.root not in avoid
            and (v.writable or not writable)
            and len(v.shape) >= order
            and (len(v.shape) - order) <= 1
            and len(v.shape) >= 1
        ]
        options = []
        for v in candidates:
            if len(v.shape) == order and all(a >= b for a, b in zip(v.shape, shape)):
                options.append((v, None))
            elif len(v.shape) == order + 1:
                for drop in range(len(v.shape)):
                    kept = v.shape[:drop] + v.shape[drop + 1 :]
                    if all(a >= b for a, b in zip(kept, shape)):
                        options.append((v, drop))
        if not options:
            return None
        source, drop = self.choice(options)
        if drop is None and source.shape == shape and self.chance(30):
            return source
        parts, sizes, static, strides = [], [], [], []
        need = iter(shape)
        for mode, n in enumerate(source.shape):
            if mode == drop:
                parts.append(self.offset(scope, n - 1))
                continue
            size = next(need)
            if size == n and self.chance(40):
                parts.append(":")
                static.append(source.static[mode])
            else:
                parts.append(f"{self.offset(scope, n - size)}:{size}")
                static.append(True)
            sizes.append(size)
            strides.append(source.strides[mode])
        name = self.fresh("v")
        self.emit(f"{name} = subview {source.name}[{','.join(parts)}] : {source.type(self.elem)}")
        return View(name, tuple(sizes), tuple(static), tuple(strides), source.root, writable)

    def reshaped_view(self, scope: Scope, shape: tuple[int, ...], writable: bool,
                      avoid: set[str]) -> View | None:  # fmt: skip
        """A vector as the fused modes of a packed matrix, or a matrix as the expanded prefix
        of a vector (unit stride): exercises fuse and expand inside computations."""
        e = self.elem
        if len(shape) == 1:
            packed = [
                v for v in scope.views
                if len(v.shape) == 2 and v.root not in avoid and (v.writable or not writable)
                and v.strides == (1, v.shape[0]) and v.shape[0] * v.shape[1] >= shape[0]
            ]  # fmt: skip
            if not packed:
                return None
            source = self.choice(packed)
            fused = self.fresh("f")
            self.emit(f"{fused} = fuse {source.name}[0,1] : {source.type(e)}")
            total = source.shape[0] * source.shape[1]
            whole = View(fused, (total,), (all(source.static),), (1,), source.root, writable)
            name = self.fresh("v")
            start = self.draw(st.integers(0, total - shape[0]))
            self.emit(f"{name} = subview {fused}[{start}:{shape[0]}] : {whole.type(e)}")
            return View(name, shape, (True,), (1,), source.root, writable)
        if len(shape) != 2:
            return None
        rows, cols = shape
        flat = self.view(scope, (rows * cols,), writable, avoid) if rows * cols <= 36 else None
        if flat is None or flat.strides[0] is None:
            return None
        name = self.fresh("x")
        stride = flat.strides[0]
        entries = self.choice([f"{rows}x{cols}", f"{rows}x?", f"?x{cols}"])
        self.emit(f"{name} = expand {flat.name}[0 -> {entries}] : {flat.type(e)}")
        # a `?` entry is inferred from the flat view's size: static only when that size is;
        # the second mode's stride steps over the rows, so it is as static as their count
        inferred = flat.static[0]
        static = (entries[0] != "?" or inferred, not entries.endswith("?") or inferred)
        column_stride = stride * rows if static[0] else None
        return View(name, shape, static, (stride, column_stride), flat.root, writable)

    # -- statements -----------------------------------------------------------------------------
    def scalar(self, scope: Scope) -> str:
        if scope.scalars and self.chance(50):
            return self.choice(scope.scalars)
        return self.literal()

    def statements(self, scope: Scope, depth: int, count: int) -> None:
        for _ in range(count):
            kind = self.choice(
                ["blas", "blas", "blas", "alloca", "foreach", "arith"]
                + (["for", "if"] if depth < MAX_DEPTH else [])
            )
            getattr(self, f"stmt_{kind}")(scope, depth)

    def nested(self, scope: Scope) -> Scope:
        return Scope(list(scope.views), list(scope.scalars), list(scope.loops))

    def stmt_blas(self, scope: Scope, depth: int) -> None:
        kind = self.choice(["axpby", "axpby1", "gemm", "gemv", "ger", "hadamard", "sum", "sum1"])
        if kind == "gemm":
            if self.gemms >= 3:
                kind = "gemv"
            self.gemms += 1
        m, n, k = (self.draw(st.integers(1, 6)) for _ in range(3))
        ta, tb = self.choice("nt"), self.choice("nt")

        def op_shape(rows: int, cols: int, t: str) -> tuple[int, int]:
            return (cols, rows) if t == "t" else (rows, cols)

        name, mods, ins, out = {
            "axpby": ("axpby", f".{ta}", [op_shape(m, n, ta)], (m, n)),
            "axpby1": ("axpby", f".{ta}", [(m,)], (m,)),
            "gemm": ("gemm", f".{ta}.{tb}", [op_shape(m, k, ta), op_shape(k, n, tb)], (m, n)),
            "gemv": ("gemv", f".{ta}", [op_shape(m, k, ta), (k,)], (m,)),
            "ger": ("ger", "", [(m,), (n,)], (m, n)),
            "hadamard": ("hadamard", "", [(m,), (m,)], (m,)),
            "sum": ("sum", f".{ta}", [op_shape(m, k, ta)], (m,)),
            "sum1": ("sum", f".{ta}", [(k,)], ()),
        }[kind]
        out_view = self.output_view(scope, out)
        if out_view is None:
            return
        in_views = [self.view(scope, s, False, {out_view.root}) for s in ins]
        if any(v is None for v in in_views):
            return
        alpha, beta = self.scalar(scope), self.scalar(scope)
        views = [*in_views, out_view]
        operands = ", ".join([alpha, *(v.name for v in in_views), beta, out_view.name])
        e = self.elem
        types = ", ".join([e, *(v.type(e) for v in in_views), e, out_view.type(e)])
        atomic = ".atomic" if self.chance(15) else ""
        self.emit(f"{name}{mods}{atomic} {operands} : {types}")
        assert all(v is not None for v in views)

    def output_view(self, scope: Scope, shape: tuple[int, ...]) -> View | None:
        if shape == ():  # sum of a vector: an element of a writable vector or matrix
            vector = self.view(scope, (1,), True, set())
            if vector is None:
                return None
            name = self.fresh("e")
            self.emit(f"{name} = subview {vector.name}[0] : {vector.type(self.elem)}")
            return View(name, (), (), (), vector.root, True)
        return self.view(scope, shape, True, set())

    def stmt_alloca(self, scope: Scope, depth: int) -> None:
        shape = (self.draw(st.integers(1, 6)), self.draw(st.integers(1, 6)))
        source = self.view(scope, shape, False, set())
        if source is None:
            return
        name = self.fresh("t")
        t = f"memref<{self.elem}x{shape[0]}x{shape[1]}>"
        self.emit(f"{name} = alloca -> {t}")
        view = View(name, shape, (True, True), (1, shape[0]), name, True)
        scale = self.scalar(scope)
        zero = "0" if self.is_int else "0.0"
        self.emit(
            f"axpby.n {scale}, {source.name}, {zero}, {name} : {self.elem}, "
            f"{source.type(self.elem)}, {self.elem}, {view.type(self.elem)}"
        )
        scope.views.append(view)

    def stmt_foreach(self, scope: Scope, depth: int) -> None:
        """out[i, j] := x[i, j] * s + out[i, j], elementwise in a foreach over i."""
        shape = (self.draw(st.integers(1, 6)), self.draw(st.integers(1, 3)))
        out = self.view(scope, shape, True, set())
        if out is None:
            return
        x = self.view(scope, shape, False, {out.root})
        if x is None:
            return
        s, e = self.scalar(scope), self.elem
        i, j = self.fresh("i"), self.fresh("j")
        a, b, c, d = (self.fresh("x") for _ in range(4))
        bounds = [str(shape[0]), str(shape[1])]
        if self.chance(50):  # the bounds as `size` of the output view
            for mode in range(2):
                bounds[mode] = self.fresh("n")
                self.emit(f"{bounds[mode]} = size {out.name}[{mode}] : {out.type(e)}")
        self.emit(f"foreach {i} = 0, {bounds[0]} {{")
        self.indent += 1
        self.emit(f"for {j} = 0, {bounds[1]} {{")
        self.indent += 1
        self.emit(f"{a} = load {x.name}[{i}, {j}] : {x.type(e)}")
        self.emit(f"{b} = arith.mul {a}, {s} : {e}")
        self.emit(f"{c} = load {out.name}[{i}, {j}] : {out.type(e)}")
        self.emit(f"{d} = arith.{self.choice(['add', 'sub'])} {b}, {c} : {e}")
        self.emit(f"store {d}, {out.name}[{i}, {j}] : {out.type(e)}")
        self.indent -= 1
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    def stmt_arith(self, scope: Scope, depth: int) -> None:
        name = self.fresh("a")
        if scope.loops and self.chance(50):
            loop = self.choice(scope.loops)
            self.emit(f"{name} = cast {loop.name} : index -> {self.elem}")
        else:
            op = self.choice(["add", "sub", "mul"])
            self.emit(f"{name} = arith.{op} {self.scalar(scope)}, {self.literal()} : {self.elem}")
        scope.scalars.append(name)

    def stmt_for(self, scope: Scope, depth: int) -> None:
        start, trips, step = self.draw(st.integers(0, 2)), self.draw(st.integers(0, 3)), 1
        if self.chance(30):
            step = 2
        stop = start + trips * step
        var = self.fresh("k")
        step_text = f", {step}" if step != 1 else ""
        self.emit(f"for {var} = {start}, {stop}{step_text} {{")
        inner = self.nested(scope)
        inner.loops.append(LoopVar(var, tuple(range(start, stop, step)) or (start,)))
        self.indent += 1
        self.statements(inner, depth + 1, self.draw(st.integers(1, 3)))
        self.indent -= 1
        self.emit("}")

    def stmt_if(self, scope: Scope, depth: int) -> None:
        cond = self.fresh("c")
        if scope.loops and self.chance(50):
            loop = self.choice(scope.loops)
            self.emit(f"{cond} = cmp.lt {loop.name}, {self.draw(st.integers(0, 3))} : index")
        elif self.chance(50):
            self.emit(f"{cond} = cmp.eq %gid, {self.draw(st.integers(0, 2))} : index")
        else:
            zero = "0" if self.is_int else "0.0"
            self.emit(f"{cond} = cmp.gt {self.scalar(scope)}, {zero} : {self.elem}")
        with_result = self.chance(40)
        with_else = with_result or self.chance(50)
        result = self.fresh("r")
        head = f"{result} = if {cond} -> ({self.elem}) {{" if with_result else f"if {cond} {{"
        self.emit(head)
        for arm in ("then", "else") if with_else else ("then",):
            if arm == "else":
                self.emit("} else {")
            self.indent += 1
            inner = self.nested(scope)
            self.statements(inner, depth + 1, self.draw(st.integers(0, 2)))
            if with_result:
                self.emit(f"yield {self.scalar(inner)} : {self.elem}")
            self.indent -= 1
        self.emit("}")
        if with_result:
            scope.scalars.append(result)

    # -- the kernel -----------------------------------------------------------------------------
    def kernel(self) -> Kernel:
        scope = Scope()
        self.emit("%gid = group_id")
        for _ in range(self.draw(st.integers(1, 3))):
            scope.views.append(self.memref_param("in", self.choice([2, 2, 1, 3])))
        for _ in range(self.draw(st.integers(1, 2))):
            scope.views.append(self.memref_param("out", self.choice([2, 2, 1])))
        scope.scalars.append(self.scalar_param())
        if self.chance(40):
            self.group_param(scope, "%gid")
        if self.chance(40):
            self.batched_output(scope, "%gid")
        self.statements(scope, 0, self.draw(st.integers(2, 6)))
        text = "func @k(" + ", ".join(self.params) + ") {\n" + "\n".join(self.lines) + "\n}"
        makers = list(self.arg_makers)
        return Kernel(text, lambda rng: [m(rng) for m in makers], self.groups)


@st.composite
def kernels(draw: Callable[[Any], Any]) -> Kernel:
    return KernelGen(draw).kernel()
