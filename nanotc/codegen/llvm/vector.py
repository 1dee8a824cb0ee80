"""Vector operations for nanokernels, each one LLVM vector instruction or intrinsic:
splat (broadcast), lane masks, masked/strided loads and stores, fused multiply-add."""

from __future__ import annotations

from typing import NamedTuple

from llvmlite import ir

from nanotc.codegen.llvm import float16
from nanotc.codegen.llvm.helpers import as_value, intrinsic, opaque_value
from nanotc.codegen.llvm.types import I1, I32, I64, PTR, Dim, memory_type
from nanotc.ir.types import ScalarType

_SUFFIX = {"float": "f32", "double": "f64", "half": "f16", "i16": "i16", "i32": "i32", "i64": "i64"}


def vector_type(element: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(element, lanes)


def suffix(t: ir.VectorType) -> str:
    return f"v{t.count}{_SUFFIX[str(t.element)]}"


class _Zeros(ir.Constant):
    """A vector of zeros printed as LLVM's `zeroinitializer`, where llvmlite spells out each
    lane (formatted in Python, parsed again by LLVM: zeros were a tenth of the text of a
    gemm kernel's LLVM IR)."""

    def __init__(self, t: ir.VectorType):
        super().__init__(t, [ir.Constant(t.element, 0)] * t.count)

    def _get_reference(self) -> str:
        return "zeroinitializer"


def zeros(t: ir.VectorType) -> ir.Constant:
    return _Zeros(t)


class _Undefined(ir.Constant):
    """A vector of undefined lanes printed as LLVM's `undef` (`_Zeros`' reason)."""

    def __init__(self, t: ir.VectorType):
        super().__init__(t, ir.Undefined)

    def _get_reference(self) -> str:
        return "undef"


def undefined(t: ir.VectorType) -> ir.Constant:
    return _Undefined(t)


def splat(b: ir.IRBuilder, scalar: ir.Value, lanes: int) -> ir.Value:
    t = vector_type(scalar.type, lanes)
    single = b.insert_element(undefined(t), scalar, ir.Constant(I32, 0))
    return b.shuffle_vector(single, undefined(t), zeros(vector_type(I32, lanes)))


class Partial(NamedTuple):
    """A vector whose lanes fall into len(owners) equal segments, segment i holding partial
    sums of vector owners[i] (None: padding)."""

    vector: ir.Value
    owners: list[int | None]


def lane_sums(b: ir.IRBuilder, vectors: list[ir.Value]) -> list[Partial]:
    """Vectors whose lanes hold the sum of each given vector's lanes, in order (the last one
    padded). Vectors are folded in pairs: each step adds the two halves of every segment of
    two vectors into one vector (two shuffles and an add for two), until every lane holds
    one whole sum: about 3 instructions per sum where folding each vector alone takes 8."""
    lanes = vectors[0].type.count
    partials = [Partial(v, [i]) for i, v in enumerate(vectors)]
    while len(partials[0].owners) < lanes:
        paired = []
        for first in range(0, len(partials), 2):
            x = partials[first]
            y = partials[first + 1] if first + 1 < len(partials) else _padding(x, lanes)
            paired.append(_fold(b, x, y, lanes))
        partials = paired
    return partials


def _padding(like: Partial, lanes: int) -> Partial:
    return Partial(zeros(like.vector.type), [None] * len(like.owners))


def _fold(b: ir.IRBuilder, x: Partial, y: Partial, lanes: int) -> Partial:
    """Segments of x then of y, each half as long: the sums of their two halves."""
    segment = lanes // len(x.owners)
    half = segment // 2

    def picks(offset: int) -> ir.Constant:
        lanes_of = [
            base + s * segment + offset + t
            for base in (0, lanes)  # x's lanes, then y's (shufflevector numbering)
            for s in range(len(x.owners))
            for t in range(half)
        ]
        return ir.Constant(vector_type(I32, lanes), lanes_of)

    low = b.shuffle_vector(x.vector, y.vector, picks(0))
    high = b.shuffle_vector(x.vector, y.vector, picks(half))
    return Partial(b.fadd(low, high), x.owners + y.owners)


def bf16_high_halves(lanes: int) -> ir.Constant:
    """The mask of each 32-bit lane's high 16 bits: where a bf16 lies in the f32 it widens to."""
    return ir.Constant(vector_type(I32, lanes), [ir.Constant(I32, -0x10000)] * lanes)


def splat_bf16(b: ir.IRBuilder, bits: ir.Value, high: ir.Value) -> ir.Value:
    """A bf16 (its i16 bits) widened to f32 in every lane of `high` (`bf16_high_halves`):
    the 16 bits in both halves of each lane (vpbroadcastw from memory, a load), then the
    low halves cleared."""
    lanes = high.type.count
    halves = b.bitcast(splat(b, bits, 2 * lanes), high.type)
    return b.bitcast(b.and_(halves, high), vector_type(ir.FloatType(), lanes))


def splat_f16(b: ir.IRBuilder, bits: ir.Value, lanes: int) -> ir.Value:
    """An f16 (its i16 bits) widened to f32 in every one of `lanes` lanes: the 16 bits in
    each of `lanes` 16-bit lanes (vpbroadcastw from memory, a load), then all of them
    converted (vcvtph2ps). The broadcast is opaque, or LLVM folds the conversion of a
    broadcast into a scalar load, a conversion and a broadcast (vpinsrw, vcvtph2ps,
    vbroadcastss): W4-style f16 batches in L2 on a Zen 3 ran 1.6-2.2x faster with the two
    instructions."""
    splat_bits = opaque_value(b, splat(b, bits, lanes), "v")
    halves = b.bitcast(splat_bits, vector_type(ir.HalfType(), lanes))
    return b.fpext(halves, vector_type(ir.FloatType(), lanes))


def repeat(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """v's lanes repeated to fill `lanes` (a 128-bit v: vbroadcasti32x4)."""
    picks = [i % v.type.count for i in range(lanes)]
    return b.shuffle_vector(v, v, ir.Constant(vector_type(I32, lanes), picks))


def in_lane_splat(b: ir.IRBuilder, v: ir.Value, lane: int, group: int) -> ir.Value:
    """Lane `lane` of every group of `group` lanes, in all of that group (vpshufd)."""
    count = v.type.count
    picks = [i - i % group + lane for i in range(count)]
    return b.shuffle_vector(v, v, ir.Constant(vector_type(I32, count), picks))


def widen(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """v in a vector of `lanes` lanes, the lanes past v's zero (for a narrower load: the
    zero-extension its instruction already does, so no instruction)."""
    if lanes == v.type.count:
        return v
    picks = list(range(v.type.count)) + [v.type.count] * (lanes - v.type.count)
    return b.shuffle_vector(v, zeros(v.type), ir.Constant(vector_type(I32, lanes), picks))


def low_lanes(b: ir.IRBuilder, v: ir.Value, lanes: int) -> ir.Value:
    """The first `lanes` lanes of v (for a narrower store: the register's low part)."""
    if lanes == v.type.count:
        return v
    picks = ir.Constant(vector_type(I32, lanes), list(range(lanes)))
    return b.shuffle_vector(v, zeros(v.type), picks)


def static_mask(lanes: int, active: int) -> ir.Constant | None:
    """Mask of the first `active` lanes; None when all lanes are active."""
    if active >= lanes:
        return None
    return ir.Constant(
        vector_type(I1, lanes), [ir.Constant(I1, int(i < active)) for i in range(lanes)]
    )


def dynamic_mask(b: ir.IRBuilder, lanes: int, first_row: int, rows: ir.Value) -> ir.Value:
    """Lanes whose row first_row + lane is below `rows`. The count of such lanes is clamped
    in a scalar first, so one compare of 32-bit lanes makes the mask (one instruction, where
    comparing 64-bit rows would take one per 8 lanes and a merge)."""
    count = _clamp(b, b.sub(rows, ir.Constant(rows.type, first_row)), 0, lanes)
    narrow = b.trunc(count, I32) if rows.type != I32 else count
    iota = ir.Constant(vector_type(I32, lanes), list(range(lanes)))
    return b.icmp_signed("<", iota, splat(b, narrow, lanes))


def sign_mask(b: ir.IRBuilder, lanes: int, first_row: int, rows: ir.Value, bits: int) -> ir.Value:
    """`dynamic_mask` as the sign bits of `bits`-bit integer lanes, the mask operand of AVX's
    vmaskmovps/pd (`sign_masks`): `lanes` lanes loaded from a table of ones then zeros,
    `rows - first_row` lanes (clamped) before its zeros. LLVM turns a mask it can read as a
    compare into `llvm.masked.load`, sinks the compare into the loop that uses it, and on
    AVX2 then keeps both operands live and compares them again at every K step (two
    registers and an instruction per mask); a loaded mask stays in one register."""
    count = _clamp(b, b.sub(rows, ir.Constant(rows.type, first_row)), 0, lanes)
    t = ir.IntType(bits)
    start = b.sub(ir.Constant(count.type, lanes), count)
    ptr = b.gep(_mask_table(b.module, t, lanes), [start], source_etype=t)
    return b.load(ptr, typ=vector_type(t, lanes), align=bits // 8)


def _mask_table(module: ir.Module, t: ir.IntType, lanes: int) -> ir.GlobalVariable:
    """`lanes` all-ones `t` then `lanes` zeros, one constant per module."""
    name = f"nanotc.sign_mask_table.i{t.width}x{lanes}"
    if name in module.globals:
        return module.globals[name]
    table = ir.GlobalVariable(module, ir.ArrayType(t, 2 * lanes), name=name)
    table.global_constant = True
    table.linkage = "private"
    table.initializer = ir.Constant(table.value_type, [-1] * lanes + [0] * lanes)
    return table


def sign_masks(element: ScalarType, lanes: int) -> bool:
    """Whether vmaskmovps/pd load and store `lanes` elements of `element` (32 or 64 bits,
    in 128 or 256 bits): the operands `sign_mask` masks on AVX targets."""
    return element.bits in (32, 64) and element.bits * lanes in (128, 256)


def _sign_masked(name: str, t: ir.VectorType) -> str:
    """The AVX intrinsic that moves vectors of type t under a sign mask."""
    single = t.element == ir.FloatType()
    width = t.count * (32 if single else 64)
    return f"llvm.x86.avx.mask{name}.{'ps' if single else 'pd'}" + (".256" if width == 256 else "")


def _clamp(b: ir.IRBuilder, x: ir.Value, low: int, high: int) -> ir.Value:
    low_v, high_v = ir.Constant(x.type, low), ir.Constant(x.type, high)
    x = b.select(b.icmp_signed("<", x, low_v), low_v, x)
    return b.select(b.icmp_signed(">", x, high_v), high_v, x)


def load(
    b: ir.IRBuilder, t: ir.VectorType, ptr: ir.Value, mask: ir.Value | None, align: int
) -> ir.Value:
    if mask is None:
        return b.load(ptr, typ=t, align=align)
    if _is_sign_mask(mask):
        return intrinsic(b, _sign_masked("load", t), t, [ptr, mask])
    name = f"llvm.masked.load.{suffix(t)}.p0"
    return intrinsic(b, name, t, [ptr, ir.Constant(I32, align), mask, zeros(t)])


def store(
    b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value | None, align: int
) -> None:
    if mask is None:
        b.store(value, ptr, align=align)
        return
    if _is_sign_mask(mask):
        intrinsic(b, _sign_masked("store", value.type), ir.VoidType(), [ptr, mask, value])
        return
    name = f"llvm.masked.store.{suffix(value.type)}.p0"
    intrinsic(b, name, ir.VoidType(), [value, ptr, ir.Constant(I32, align), mask])


def _is_sign_mask(mask: ir.Value) -> bool:
    """A `sign_mask` (integer lanes), not a vector of i1."""
    return mask.type.element != I1


def store_around_caches(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, align: int) -> None:
    """A whole vector stored non-temporally (vmovntps, vmovntpd, vmovntdq) to an address
    aligned to its bytes: to memory, without first reading the line into the caches. Such
    stores are weakly ordered: a `store_fence` must follow them before another thread may
    read what they wrote."""
    stored = b.store(value, ptr, align=align)
    stored.set_metadata("nontemporal", b.module.add_metadata([ir.Constant(I32, 1)]))


def store_fence(b: ir.IRBuilder) -> None:
    """sfence: the non-temporal stores before it are visible before any store after it."""
    intrinsic(b, "llvm.x86.sse.sfence", ir.VoidType(), [])


def lane_pointers(
    b: ir.IRBuilder, base: ir.Value, element: ir.Type, stride: Dim, lanes: int
) -> ir.Value:
    """<lanes x ptr> to base[0], base[stride], ..., for strided access: one getelementptr
    of a vector of offsets (a pointer per lane, each inserted into the vector, had made a
    tile's scatter of C 16 instructions a vector, which LLVM spent compile time folding)."""
    t = vector_type(I64, lanes)
    lane = ir.Constant(t, list(range(lanes)))
    offsets = lane if stride == 1 else b.mul(lane, splat(b, as_value(b, stride), lanes))
    pointers = b.gep(base, [offsets], source_etype=element)
    pointers.type = vector_type(PTR, lanes)  # llvmlite types a getelementptr as one pointer
    return pointers


def gather(
    b: ir.IRBuilder, t: ir.VectorType, pointers: ir.Value, mask: ir.Value | None, align: int
) -> ir.Value:
    mask = mask if mask is not None else _all_lanes(t.count)
    name = f"llvm.masked.gather.{suffix(t)}.v{t.count}p0"
    return intrinsic(b, name, t, [pointers, ir.Constant(I32, align), mask, zeros(t)])


def scatter(
    b: ir.IRBuilder, value: ir.Value, pointers: ir.Value, mask: ir.Value | None, align: int
) -> None:
    t = value.type
    mask = mask if mask is not None else _all_lanes(t.count)
    name = f"llvm.masked.scatter.{suffix(t)}.v{t.count}p0"
    intrinsic(b, name, ir.VoidType(), [value, pointers, ir.Constant(I32, align), mask])


def _all_lanes(lanes: int) -> ir.Constant:
    return ir.Constant(vector_type(I1, lanes), [ir.Constant(I1, 1)] * lanes)


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value, fused: bool) -> ir.Value:
    """x * y + z: one fused instruction where the target has it, else multiply and add."""
    if fused:
        return intrinsic(b, f"llvm.fma.{suffix(x.type)}", x.type, [x, y, z])
    return b.fadd(b.fmul(x, y), z)


def interleave(b: ir.IRBuilder, low: ir.Value, high: ir.Value, count: int = 0) -> ir.Value:
    """The first `count` lanes (all when 0) of two vectors as one vector of 2 count: low[0],
    high[0], low[1], high[1], ... (two columns of bf16 into the K pairs of `vdpbf16ps` and
    AMX: the flat-to-VNNI shuffle)."""
    n, total = count or low.type.count, low.type.count
    order = [i // 2 + (total if i % 2 else 0) for i in range(2 * n)]
    return b.shuffle_vector(low, high, ir.Constant(vector_type(I32, 2 * n), order))


def interleave_columns(b: ir.IRBuilder, columns: list[ir.Value]) -> list[ir.Value]:
    """The lanes of 1, 2 or 4 equal vectors in row-major order: vectors whose concatenation
    is columns[0][0], columns[1][0], ..., columns[0][1], columns[1][1], ... (the columns of
    a register tile stored into a C whose rows are that many elements apart), by two-source
    shuffles: one per vector for 2 columns, two for 4."""
    if len(columns) == 1:
        return columns
    if len(columns) == 2:
        return list(_zip(b, columns[0], columns[1]))
    assert len(columns) == 4, "row-major blocks of 1, 2 or 4 columns"
    even_low, even_high = _zip(b, columns[0], columns[2])
    odd_low, odd_high = _zip(b, columns[1], columns[3])
    return [*_zip(b, even_low, odd_low), *_zip(b, even_high, odd_high)]


def _zip(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> tuple[ir.Value, ir.Value]:
    """x[0], y[0], x[1], y[1], ... over all their lanes, as two vectors of their width."""
    lanes = x.type.count
    t = vector_type(I32, lanes)
    picks = [i // 2 + (lanes if i % 2 else 0) for i in range(lanes)]
    low = b.shuffle_vector(x, y, ir.Constant(t, picks))
    high = b.shuffle_vector(x, y, ir.Constant(t, [pick + lanes // 2 for pick in picks]))
    return low, high


def deinterleave(b: ir.IRBuilder, v: ir.Value) -> tuple[ir.Value, ir.Value]:
    """v's even lanes and its odd lanes, each a vector of half v's lanes (`interleave`'s
    inverse)."""
    n = v.type.count // 2
    return tuple(  # type: ignore[return-value]
        b.shuffle_vector(v, v, ir.Constant(vector_type(I32, n), [2 * i + h for i in range(n)]))
        for h in (0, 1)
    )


def interleave_halves(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """The two halves of v interleaved: v[0], v[n], v[1], v[n+1], ... (n lanes a half: two
    adjacent columns of bf16 loaded as one vector into K pairs, by one vpermw)."""
    n = v.type.count // 2
    order = [i // 2 + (n if i % 2 else 0) for i in range(2 * n)]
    return b.shuffle_vector(v, v, ir.Constant(vector_type(I32, 2 * n), order))


def bf16_dot(b: ir.IRBuilder, acc: ir.Value, pairs: ir.Value, other: ir.Value) -> ir.Value:
    """vdpbf16ps: acc[i] += pairs[i].lo * other[i].lo + pairs[i].hi * other[i].hi, on bf16
    pairs packed in i32 lanes (LLVM upgrades this form to its bfloat signature)."""
    name = f"llvm.x86.avx512bf16.dpbf16ps.{32 * acc.type.count}"
    return intrinsic(b, name, acc.type, [acc, pairs, other])


def convert(b: ir.IRBuilder, value: ir.Value, to: ir.VectorType) -> ir.Value:
    """Float vector conversion (extension or rounding to nearest)."""
    src_bits = _bits(value.type.element)
    dst_bits = _bits(to.element)
    if src_bits == dst_bits:
        return value
    return b.fpext(value, to) if src_bits < dst_bits else b.fptrunc(value, to)


def memory_vector(element: ScalarType, lanes: int) -> ir.VectorType:
    """Vector type of `lanes` elements as they are stored (half, i16 bits for bf16, ...)."""
    return vector_type(memory_type(element), lanes)


def to_register(b: ir.IRBuilder, raw: ir.Value, element: ScalarType, to: ir.VectorType) -> ir.Value:
    """A vector loaded in its memory form to the float vector type `to` (exact widening of
    16-bit floats, then extension or rounding between f32 and f64)."""
    if element in float16.SIXTEEN_BIT:
        raw = float16.widen(b, raw, element)
    return convert(b, raw, to)


def to_memory(b: ir.IRBuilder, value: ir.Value, element: ScalarType) -> ir.Value:
    """A float vector in its register form to how `element` is stored (rounding)."""
    if element in float16.SIXTEEN_BIT:
        return float16.narrow(
            b, convert(b, value, vector_type(ir.FloatType(), value.type.count)), element
        )
    return convert(b, value, vector_type(memory_type(element), value.type.count))


def _bits(t: ir.Type) -> int:
    return {"half": 16, "float": 32, "double": 64}[str(t)]


def transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The transpose of a square block held as `lanes` vectors (a power of two): log2(lanes)
    butterfly stages, each exchanging the off-diagonal h x h blocks of every 2h x 2h block
    with one two-source shuffle per vector."""
    lanes = len(rows)
    h = lanes // 2
    while h:
        out = list(rows)
        for i in range(lanes):
            if i & h:
                continue
            low = [c if not c & h else lanes + c - h for c in range(lanes)]
            high = [c + h if not c & h else lanes + c for c in range(lanes)]
            out[i] = b.shuffle_vector(
                rows[i], rows[i + h], ir.Constant(vector_type(I32, lanes), low)
            )
            out[i + h] = b.shuffle_vector(
                rows[i], rows[i + h], ir.Constant(vector_type(I32, lanes), high)
            )
        rows = out
        h //= 2
    return rows
