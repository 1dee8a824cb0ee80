"""A hypothesis strategy for random well-formed programs, built with the builder API.

Programs have several functions with scalar, memref (static and dynamic shapes, default and
custom strides) and group arguments, and bodies of random instructions whose operands are
chosen among the values in scope so that every rule of the reference holds: arith, cmp and
cast on matching scalar types, in-bounds loads and stores, subview/expand/fuse on compatible
shapes and strides, for/foreach/if (with results and yields), collective instructions only in
mixed regions, and the linear-algebra instructions on operands of consistent shapes (found in
scope or allocated on the spot). Some values get names, some of them clashing, so that the
printer's naming is exercised too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from nanotc.ir import instructions as ins
from nanotc.ir.builder import Builder
from nanotc.ir.core import Function, Program, Region, RegionKind
from nanotc.ir.types import DYNAMIC, Extent, GroupType, MemRefType, ScalarType, packed_strides
from nanotc.ir.values import Constant, Value

S = ScalarType
INTS = (S.I8, S.I16, S.I32, S.I64, S.INDEX)
FLOATS = (S.F32, S.F64, S.F16, S.BF16)
SCALARS = (S.I1, *INTS, *FLOATS)
ELEMENTS = (S.F32, S.F64, S.F32, S.F64, S.I32, S.I64, S.F16, S.I8, S.INDEX, S.I1, S.BF16)
SIZES = (1, 2, 3, 4, 8, 16, DYNAMIC)
FLOAT_LITERALS = (0.0, 1.0, -1.0, 0.5, 2.5, -0.0, 1e-3, 3.0e8, 1e300, 5e-324, 0.1)
NAMES = ("x", "n", "nx", "x1", "a", "tmp", "0", "1", "12", "i", "v_2", "alpha", "A", "B")
MAX_DEPTH = 3
MAX_REGION_LENGTH = 6


class ProgramGen:
    """Draws one program; `draw` is hypothesis' draw function of a composite strategy."""

    def __init__(self, draw: Callable[[Any], Any]):
        self.draw = draw

    # -- small choices ----------------------------------------------------------------------
    def choice(self, options: Any) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def chance(self, p: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < p * 100

    def int_between(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def maybe_name(self, value: Value) -> Value:
        if self.chance(0.4):
            value.name = self.choice(NAMES)
        return value

    # -- types ------------------------------------------------------------------------------
    def memref_type(self, static: bool = False, order: int | None = None) -> MemRefType:
        element = self.choice(ELEMENTS)
        order = self.int_between(0, 3) if order is None else order
        sizes = [s for s in SIZES if not (static and s is DYNAMIC)]
        shape = tuple(self.choice(sizes) for _ in range(order))
        if self.chance(0.6):
            return MemRefType.packed(element, shape)
        return MemRefType(element, shape, self.strides(shape, static))

    def strides(self, shape: tuple[Extent, ...], static: bool) -> tuple[Extent, ...]:
        """Strides obeying 1 <= S1, S(i-1)*s(i-1) <= S(i), with gaps and dynamic entries."""
        strides: list[Extent] = []
        least: Extent = 1
        for mode, size in enumerate(shape):
            if not static and self.chance(0.25):
                stride: Extent = DYNAMIC
            elif least is DYNAMIC:
                # after a dynamic extent: large enough for any static view of the modes before
                stride = 4096**mode
            else:
                stride = least + self.choice((0, 0, 1, 3))
            strides.append(stride)
            least = DYNAMIC if stride is DYNAMIC or size is DYNAMIC else stride * size
        return tuple(strides)

    def argument_type(self) -> Any:
        kind = self.int_between(0, 9)
        if kind <= 3:
            return self.choice(SCALARS)
        if kind <= 8:
            return self.memref_type()
        return GroupType(self.memref_type(), self.choice((0, 0, 3, DYNAMIC)))

    # -- literals ---------------------------------------------------------------------------
    def constant(self, t: ScalarType) -> Constant:
        if t is S.I1:
            return Constant(self.int_between(0, 1), t)
        if t.is_float:
            return Constant(self.choice(FLOAT_LITERALS), t)
        lo, hi = t.int_range()
        lo, hi = max(lo, -(2**63) + 1), min(hi, 2**63 - 1)  # the literal range of the language
        if self.chance(0.8):
            lo, hi = max(lo, -100), min(hi, 100)
        return Constant(self.int_between(lo, hi), t)

    # -- programs ---------------------------------------------------------------------------
    def program(self) -> Program:
        count = self.int_between(1, 3)
        choices = st.sampled_from(["kernel", "f", "g_1", "0", "fused"])
        names = self.draw(st.lists(choices, min_size=count, max_size=count, unique=True))
        return Program([self.function(name) for name in names])

    def function(self, name: str) -> Function:
        func = Function(name, Region())
        self.attributes(func)
        arg_names = self.draw(
            st.lists(st.sampled_from(NAMES), max_size=len(NAMES) // 2, unique=True)
        )
        for arg in arg_names:
            func.body.add_param(self.argument_type(), arg)
        body = RegionGen(self, list(func.body.params), spmd=False, depth=0)
        body.fill(func.body, self.int_between(1, 2 * MAX_REGION_LENGTH))
        return func

    def attributes(self, func: Function) -> None:
        subgroup = self.choice((None, 1, 4, 8, 16, 32, 64))
        func.subgroup_size = subgroup
        if self.chance(0.5):
            rows = (subgroup or 1) * self.int_between(1, 4)
            func.work_group_size = (rows, self.int_between(1, max(1, 1024 // rows)))


class RegionGen:
    """Appends random instructions to one region; `scope` are the values visible in it."""

    def __init__(self, gen: ProgramGen, scope: list[Value], spmd: bool, depth: int):
        self.gen = gen
        self.scope = list(scope)
        self.spmd = spmd
        self.depth = depth
        self.b: Builder

    def fill(self, region: Region, length: int | None = None) -> None:
        self.b = Builder(region)
        if length is None:
            length = self.gen.int_between(0, MAX_REGION_LENGTH)
        makers = [
            self.group_id, self.arith, self.unary, self.cast, self.cmp, self.load, self.store,
            self.size, self.subview, self.expand, self.fuse,
        ]  # fmt: skip
        if not self.spmd:
            makers += [self.alloca, self.barrier, self.blas, self.blas, self.lifetime_stop]
        if self.depth < MAX_DEPTH:
            makers += [self.for_, self.if_] + ([] if self.spmd else [self.foreach])
        for _ in range(length):
            self.gen.choice(makers)()

    def define(self, *values: Value) -> None:
        for v in values:
            self.scope.append(self.gen.maybe_name(v))

    # -- operands ---------------------------------------------------------------------------
    def values(self, pred: Callable[[Value], bool]) -> list[Value]:
        return [v for v in self.scope if pred(v)]

    def scalar(self, t: ScalarType, constants: bool = True) -> Value:
        """A value of type t from scope, or a literal of t."""
        found = self.values(lambda v: v.type == t)
        if found and (not constants or self.gen.chance(0.6)):
            return self.gen.choice(found)
        return self.gen.constant(t)

    def index(self, below: Extent = DYNAMIC) -> Value | int:
        """An index operand: an index value, or a literal in 0 .. below-1 (a plain int
        sometimes, which the builder turns into an index constant)."""
        found = self.values(lambda v: v.type == S.INDEX)
        if found and (below == 0 or self.gen.chance(0.4)):
            return self.gen.choice(found)
        k = self.gen.int_between(0, 7 if below is DYNAMIC else max(0, below - 1))
        return k if self.gen.chance(0.5) else Constant(k, S.INDEX)

    def memrefs(self, pred: Callable[[MemRefType], bool] = lambda t: True) -> list[Value]:
        return self.values(lambda v: isinstance(v.type, MemRefType) and pred(v.type))

    def scalar_type_in_scope(self) -> ScalarType:
        found = [v.type for v in self.values(lambda v: isinstance(v.type, ScalarType))]
        return (
            self.gen.choice(found) if found and self.gen.chance(0.7) else self.gen.choice(SCALARS)
        )

    # -- replicated instructions ------------------------------------------------------------
    def group_id(self) -> None:
        self.define(self.b.group_id() if self.gen.chance() else self.b.group_size())

    def arith(self) -> None:
        t = self.scalar_type_in_scope()
        if t is S.I1:
            ops = [ins.BinaryOp.AND, ins.BinaryOp.OR, ins.BinaryOp.XOR]
        else:
            ops = [op for op in ins.BinaryOp if t.is_int or not op.integer_only]
        lhs, rhs = self.scalar(t), self.scalar(t)
        self.define(self.b.arith(self.gen.choice(ops), lhs, rhs))

    def unary(self) -> None:
        t = self.scalar_type_in_scope()
        ops = [op for op in ins.UnaryOp if not (op.integer_only and t.is_float)]
        if t is S.I1:
            ops = [ins.UnaryOp.NOT]
        self.define(self.b.add(ins.ArithUnary, op=self.gen.choice(ops), a=self.scalar(t)))

    def cast(self) -> None:
        a = self.scalar(self.scalar_type_in_scope())
        self.define(self.b.add(ins.Cast, a=a, to=self.gen.choice(SCALARS)))

    def cmp(self) -> None:
        t = self.scalar_type_in_scope()
        lhs, rhs = self.scalar(t), self.scalar(t)
        self.define(self.b.cmp(self.gen.choice(list(ins.CmpCond)), lhs, rhs))

    def load(self) -> None:
        groups = self.values(lambda v: isinstance(v.type, GroupType))
        if groups and self.gen.chance(0.3):
            self.define(self.b.load(self.gen.choice(groups), [self.index()]))
            return
        found = self.memrefs()
        if found:
            m = self.gen.choice(found)
            self.define(self.b.load(m, [self.index(s) for s in m.type.shape]))

    def store(self) -> None:
        scalars = {v.type for v in self.values(lambda v: isinstance(v.type, ScalarType))}
        found = self.memrefs(lambda t: t.element in scalars)
        if found:
            m = self.gen.choice(found)
            value = self.scalar(m.type.element, constants=False)
            self.b.store(value, m, [self.index(s) for s in m.type.shape])

    def size(self) -> None:
        found = self.memrefs(lambda t: t.order > 0)
        if found:
            m = self.gen.choice(found)
            self.define(self.b.size(m, self.gen.int_between(0, m.type.order - 1)))

    def subview(self) -> None:
        found = self.memrefs(lambda t: t.order > 0)
        if not found:
            return
        m = self.gen.choice(found)
        offsets: list[Any] = []
        sizes: list[Any] = []
        for bound in m.type.shape:
            kind = self.gen.int_between(0, 4)
            if kind == 0:  # a single index drops the mode
                offsets.append(self.index(bound))
                sizes.append(None)
            elif kind == 1:  # `:`
                offsets.append(0)
                sizes.append("?")
            elif kind == 2:  # offset:?
                offsets.append(self.index(bound))
                sizes.append("?")
            elif kind == 3 and bound is not DYNAMIC:  # static offset:size in bounds
                start = self.gen.int_between(0, bound - 1)
                offsets.append(start)
                sizes.append(self.gen.int_between(1, bound - start))
            else:  # sizes from values
                offsets.append(self.index(bound))
                found_index = self.values(lambda v: v.type == S.INDEX)
                sizes.append(self.gen.choice(found_index) if found_index else "?")
        self.define(self.b.subview(m, offsets, sizes))

    def expand(self) -> None:
        found = self.memrefs(lambda t: t.order > 0)
        if not found:
            return
        m = self.gen.choice(found)
        mode = self.gen.int_between(0, m.type.order - 1)
        size = m.type.shape[mode]
        indices = self.values(lambda v: v.type == S.INDEX)
        if size is DYNAMIC:
            entries: list[Any] = list(
                self.gen.draw(st.permutations([self.gen.choice((2, 4)), "?"]))
            )
        else:
            entries = _factors(self.gen, size, self.gen.int_between(2, 3))
            if self.gen.chance(0.4):
                entries[self.gen.int_between(0, len(entries) - 1)] = "?"
        if indices and self.gen.chance(0.3):
            entries = [e if e == "?" else self.gen.choice(indices) for e in entries]
        shape = [Constant(None, S.INDEX) if e == "?" else e for e in entries]
        self.define(self.b.add(ins.Expand, source=m, mode=mode, shape=shape))

    def fuse(self) -> None:
        candidates = []
        for m in self.memrefs(lambda t: t.order > 1):
            t = m.type
            for i in range(t.order):
                for j in range(i + 1, t.order):
                    if all(_fusable(t, k) for k in range(i, j)):
                        candidates.append((m, i, j))
        if candidates:
            m, i, j = self.gen.choice(candidates)
            self.define(self.b.add(ins.Fuse, source=m, first=i, last=j))

    # -- collective instructions (mixed regions only) ---------------------------------------
    def alloca(self, shape: tuple[Extent, ...] | None = None) -> Value:
        if shape is None:
            t = self.gen.memref_type(static=True)
        else:
            concrete = tuple(self.gen.choice((1, 2, 4, 8)) if s is None else s for s in shape)
            element = self.gen.choice((S.F32, S.F64, S.F16))
            t = MemRefType(element, concrete, packed_strides(concrete))
        result = self.b.alloca(t)
        self.define(result)
        return result

    def barrier(self) -> None:
        self.b.add(ins.Barrier)

    def lifetime_stop(self) -> None:
        found = self.values(lambda v: isinstance(getattr(v, "owner", None), ins.Alloca))
        if found:
            self.b.add(ins.LifetimeStop, target=self.gen.choice(found))

    def tensor(self, want: tuple[Extent, ...], avoid: tuple[Value, ...] = ()) -> Value:
        """A non-boolean memref of len(want) modes whose sizes are compatible with `want`
        (None: any size), from scope or a fresh alloca; not one of `avoid` (an instruction's
        output must not be one of its operands)."""

        def fits(t: MemRefType) -> bool:
            return (
                t.order == len(want)
                and t.element is not S.I1
                and all(w is None or s is None or w == s for w, s in zip(want, t.shape))
            )

        found = [v for v in self.memrefs(fits) if v not in avoid]
        if found and self.gen.chance(0.7):
            return self.gen.choice(found)
        return self.alloca(want)

    def alpha_beta(self) -> tuple[Value, Value]:
        t = self.gen.choice((S.F32, S.F64, S.F32, S.I32))
        return self.scalar(t), self.scalar(t)

    def blas(self) -> None:
        kind = self.gen.choice(("gemm", "gemv", "ger", "hadamard", "axpby", "sum"))
        alpha, beta = self.alpha_beta()
        atomic = self.gen.chance(0.2)
        trans = [self.gen.choice(list(ins.Transpose)) for _ in range(2)]
        common = dict(alpha=alpha, beta=beta, atomic=atomic)
        if kind == "gemm":
            a = self.tensor((None, None))
            m, k = _op(a.type.shape, trans[0])
            b = self.tensor(_op((k, None), trans[1]))
            n = _op(b.type.shape, trans[1])[1]
            c = self.tensor((m, n), avoid=(a, b))
            self.b.add(ins.Gemm, trans_a=trans[0], trans_b=trans[1], a=a, b=b, c=c, **common)
        elif kind == "gemv":
            a = self.tensor((None, None))
            m, k = _op(a.type.shape, trans[0])
            b = self.tensor((k,))
            c = self.tensor((m,), avoid=(b,))
            self.b.add(ins.Gemv, trans_a=trans[0], a=a, b=b, c=c, **common)
        elif kind == "ger":
            a, b = self.tensor((None,)), self.tensor((None,))
            c = self.tensor((a.type.shape[0], b.type.shape[0]))
            self.b.add(ins.Ger, a=a, b=b, c=c, **common)
        elif kind == "hadamard":
            a = self.tensor((None,))
            b = self.tensor(a.type.shape)
            size = a.type.shape[0] if a.type.shape[0] is not None else b.type.shape[0]
            self.b.add(ins.Hadamard, a=a, b=b, c=self.tensor((size,)), **common)
        elif kind == "axpby":
            a = self.tensor((None,) * self.gen.int_between(1, 2))
            transposing = trans[0] is ins.Transpose.T and a.type.order == 2
            b = self.tensor(_op(a.type.shape, trans[0]), avoid=(a,) if transposing else ())
            self.b.add(ins.Axpby, trans=trans[0], a=a, b=b, **common)
        else:
            a = self.tensor((None,) * self.gen.int_between(1, 2))
            out = () if a.type.order == 1 else (_op(a.type.shape, trans[0])[0],)
            self.b.add(ins.Sum, trans=trans[0], a=a, b=self.tensor(out), **common)

    # -- control flow -----------------------------------------------------------------------
    def loop_bounds(self) -> tuple[ScalarType, Value, Value]:
        t = self.gen.choice((S.INDEX, S.INDEX, S.INDEX, S.I32, S.I64, S.I16))
        return t, self.scalar(t), self.scalar(t)

    def nested(self, region: Region, extra: list[Value], spmd: bool) -> RegionGen:
        inner = RegionGen(self.gen, self.scope + extra, spmd, self.depth + 1)
        inner.fill(region)
        return inner

    def for_(self) -> None:
        t, start, stop = self.loop_bounds()
        step = None
        if self.gen.chance(0.5):
            values = self.values(lambda v: v.type == t)
            positive = Constant(self.gen.int_between(1, 4), t)
            step = self.gen.choice(values) if values and self.gen.chance(0.3) else positive
        body = Region()
        var = self.gen.maybe_name(body.add_param(t))
        self.b.add(ins.For, start=start, stop=stop, step=step, loop_type=t, body=body)
        self.nested(body, [var], self.spmd)

    def foreach(self) -> None:
        t, start, stop = self.loop_bounds()
        body = Region(RegionKind.SPMD)
        var = self.gen.maybe_name(body.add_param(t))
        self.b.add(ins.Foreach, start=start, stop=stop, loop_type=t, body=body)
        self.nested(body, [var], spmd=True)

    def if_(self) -> None:
        cond = self.scalar(S.I1)
        returns = tuple(self.gen.choice(SCALARS) for _ in range(self.gen.int_between(0, 3)))
        then = Region()
        otherwise = Region() if returns or self.gen.chance() else None
        results = self.b.add(ins.If, cond=cond, returns=returns, then=then, otherwise=otherwise)
        for region in (then, otherwise):
            if region is not None:
                inner = self.nested(region, [], self.spmd)
                if returns:
                    values = [inner.scalar(t) for t in returns]
                    inner.b.add(ins.Yield, values=values)
        if returns:
            self.define(*(results if isinstance(results, tuple) else (results,)))


def _factors(gen: ProgramGen, size: int, count: int) -> list[int]:
    """`count` positive factors whose product is `size`."""
    factors = []
    for _ in range(count - 1):
        factor = gen.choice([d for d in range(1, size + 1) if size % d == 0])
        factors.append(factor)
        size //= factor
    return [*factors, size]


def _fusable(t: MemRefType, k: int) -> bool:
    """The compatibility condition S(k)*s(k) = S(k+1), where all three are known."""
    stride, size, following = t.stride[k], t.shape[k], t.stride[k + 1]
    return None in (stride, size, following) or stride * size == following


def _op(shape: tuple[Extent, ...], trans: ins.Transpose) -> tuple[Extent, ...]:
    return shape[::-1] if trans is ins.Transpose.T and len(shape) == 2 else shape


@st.composite
def programs(draw: Callable[[Any], Any]) -> Program:
    return ProgramGen(draw).program()


def instruction_count(program: Program) -> int:
    from nanotc.ir.core import walk

    return sum(1 for f in program.functions for _ in walk(f.body))
