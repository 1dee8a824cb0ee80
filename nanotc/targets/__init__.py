"""Targets as data: what the code generator may assume about a CPU.

Passes and nanokernel generators ask a `Target` for capabilities (vector width, number of
vector registers, FMA, masked memory operations, bf16 dot products, AMX tiles); nothing else
in the compiler tests for an instruction set by name. Built-in targets:

    host      the machine nanotc runs on, detected through LLVM
    avx512    AVX-512 (F, VL, BW, DQ) with FMA and the BF16 dot product
    avx2      AVX2 with FMA (16 ymm registers)
    amx       Sapphire Rapids: AVX-512 plus AMX tiles (assembly only where absent)
    generic   baseline x86-64: plain LLVM vectors on SSE2, no FMA
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from nanotc.ir.types import ScalarType


@dataclass(frozen=True)
class Target:
    name: str
    llvm_cpu: str
    llvm_features: str
    vector_bits: int
    vector_registers: int
    fma: bool
    masked_memory: bool  # masked vector loads/stores (AVX-512 k-masks)
    bf16_dot: bool  # vdpbf16ps
    amx: bool
    # without k-masks, loads and stores masked by the sign bits of a vector register (AVX's
    # vmaskmovps/pd): a nanokernel's masks of run-time rows then stay in one register each
    sign_masked_memory: bool = False
    # vdpbf16ps's flops per cycle over FMA's: 2 where it is a full-rate unit (Zen 4);
    # measured 0.5 on the AMX-era Intel cores (bench/peak.py), where widening bf16 to f32
    # for FMAs is faster and AMX tiles take the large bf16 gemms
    bf16_dot_rate: float = 2.0
    l1_bytes: int = 32 * 1024  # data cache per core
    l1_ways: int = 8  # its associativity: lines of one set
    l2_bytes: int = 1024 * 1024
    l3_bytes: int = 32 * 1024 * 1024  # the last level, shared by the cores
    line_bytes: int = 64  # cache line
    # full-width vector FMAs started per cycle (Zen 4 splits a 512-bit one over its two
    # 256-bit units: 1)
    fma_per_cycle: float = 2.0
    # width of the units that execute vector FMAs, where narrower than the vectors (else 0):
    # there a narrower vector's FMA costs its share of one, so a tile's short last vector
    # computes at its own width (Zen 4: 256, two per cycle)
    fma_unit_bits: int = 0
    # bytes per cycle of a batch member's compute at the peak above which the member is left
    # to the hardware prefetchers, where measured (else 0: never; `lowering.prefetch`)
    hardware_prefetch_bytes_per_cycle: float = 0.0
    # width of the vectors that stream operands from memory fastest, where narrower than the
    # registers (else 0): element-wise loops and reductions over operands of two L3s or more
    # use it (`codegen/llvm/blas_vector.py`; Zen 4: 256, 1.01-1.18x from memory)
    stream_vector_bits: int = 0
    # bytes of A's vectors per cycle that a K loop sustains from L2 into registers, where A
    # is read again for every column of tiles (the tile model charges the tiles that need
    # more; `register_tile.a_vector_cycles`)
    l2_bytes_per_cycle: float = 20.0
    # how much faster than that L2 streams A to a tile as tall as C, which reads each column
    # of A whole and in order, than to shorter tiles' scattered half columns, where A, B and
    # C stay in L2 (`register_tile.ranked`; Zen 4: in-cache 64x64x256 f32 ran 64 x 6 1.04-1.12x
    # faster than 32 x 14, f32 96^3 batches 1.02-1.07x)
    tall_stream_speedup: float = 2.0
    # the direct path and its K blocks reread an A that fits half of L2 where it lies, for
    # every column of tiles, rather than pack it (measured per CPU: `gemm_blocked.needs_blocking`)
    rereads_a_from_l2: bool = True
    # L2s the blocked path's A block fills where each A block passes over B's panels beyond L2
    # (B read in place, B and C past L2: `gemm_blocked.blocking`), where measured (else half
    # of one, as where B is in L2). Zen 4 ran two L2s (from L3) 1.02-1.04x faster (f64 2048^3
    # 512 rows against 128; f32 2048^3 1024 against 256); the Xeon with AMX that LLVM names
    # `rocketlake` (its hypervisor reports model 167) ran them 0.63x (f64 1024^3 and 2048^3,
    # 1008 rows against 240) and 0.89x (f32 1024^3, 2048 rows against 512: W1, one thread)
    a_block_l2s_over_memory: float = 0.5
    # the row-panel path's tiles ask for the next A block while they compute, and their K
    # loops then prefetch none of A (`gemm_in_place._k_blocks`); where measured slower (else
    # True), the K loops prefetch A ahead themselves, over K blocks of half of L2 rather than
    # of L1 (`gemm_in_place.panel_depth`)
    prefetches_next_panel_block: bool = True
    # k steps in one iteration of a K loop whose addressing is all static (measured per CPU:
    # `lowering.nanokernel.k_unroll`)
    k_unroll: int = 1
    # register tiles of this many vectors read B's broadcast once per vector, as each FMA's
    # memory operand, where measured (else 0: never; `lowering.nanokernel.reads_b_per_vector`)
    broadcast_operand_vectors: int = 0
    # broadcast loads per cycle the load ports sustain beside FMAs, where measured (else 0:
    # unknown); a one-vector tile whose FMAs issue faster shuffles B's elements out of
    # 128-bit loads instead (`lowering.nanokernel.fma_b_quads`)
    broadcast_loads_per_cycle: float = 0.0
    # the most full-width FMAs a k step of a small gemm's register tile holds before the tile
    # runs slower than its FMAs, where measured (else 0: no limit; `register_tile.crowded`)
    small_gemm_step_fmas: int = 0
    # batch members picked by the group id whose C's rows are one whole vector take tiles of
    # at most this many columns, where measured (else 0: any; `gemm_tiles.member_tile_model`)
    member_tile_columns: int = 0

    @property
    def bf16_gemm_by_dot(self) -> bool:
        """bf16 gemm tiles use vdpbf16ps (else they widen to f32 and use FMAs)."""
        return self.bf16_dot and self.bf16_dot_rate >= 1

    @property
    def fma_reads_broadcasts(self) -> bool:
        """An FMA takes one element broadcast from memory as an operand (AVX-512's {1toN},
        which comes with its masked memory operations): B's broadcasts need no registers."""
        return self.fma and self.masked_memory

    @property
    def narrow_fma_pays(self) -> bool:
        """A vector narrower than the registers computes faster than a full one."""
        return 0 < self.fma_unit_bits < self.vector_bits

    def fmas_per_cycle(self, bits: int) -> float:
        """Vector FMAs of `bits` bits started per cycle: a vector that fits the narrower FMA
        units (`fma_unit_bits`) goes to each unit on its own."""
        if 0 < bits <= self.fma_unit_bits < self.vector_bits:
            return self.fma_per_cycle * (self.vector_bits // self.fma_unit_bits)
        return self.fma_per_cycle

    def lanes(self, t: ScalarType) -> int:
        """Elements of type t in one vector register."""
        return max(1, self.vector_bits // max(8, t.bits))

    def stream_lanes(self, t: ScalarType) -> int:
        """Elements of type t in the vectors that stream operands from memory fastest."""
        bits = self.stream_vector_bits or self.vector_bits
        return max(1, min(bits, self.vector_bits) // max(8, t.bits))


AVX512 = Target(
    name="avx512",
    llvm_cpu="cooperlake",
    llvm_features="+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16,+fma",
    vector_bits=512,
    vector_registers=32,
    fma=True,
    masked_memory=True,
    bf16_dot=True,
    amx=False,
    l1_bytes=48 * 1024,
    l1_ways=12,
    l2_bytes=2 * 1024 * 1024,
)
AVX2 = Target(
    name="avx2",
    llvm_cpu="haswell",
    llvm_features="+avx2,+fma,-avx512f",
    vector_bits=256,
    vector_registers=16,
    fma=True,
    masked_memory=False,
    bf16_dot=False,
    amx=False,
    sign_masked_memory=True,
)
AMX = replace(
    AVX512,
    name="amx",
    llvm_cpu="sapphirerapids",
    llvm_features="+avx512f,+avx512vl,+avx512bw,+avx512dq,+avx512bf16,+fma,+amx-tile,+amx-bf16",
    amx=True,
    bf16_dot_rate=0.5,
)
GENERIC = Target(
    name="generic",
    llvm_cpu="x86-64",
    llvm_features="",
    vector_bits=128,
    vector_registers=16,
    fma=False,
    masked_memory=False,
    bf16_dot=False,
    amx=False,
)

BUILTIN = {t.name: t for t in (AVX512, AVX2, AMX, GENERIC)}


@lru_cache(maxsize=1)
def host() -> Target:
    """The running machine, described from LLVM's view of its CPU."""
    import llvmlite.binding as llvm

    from nanotc.runtime.interrupts import interrupts_held

    with interrupts_held():  # llvmlite's strings are freed twice if interrupted
        features = llvm.get_host_cpu_features()
        cpu = llvm.get_host_cpu_name()
    has = {name for name, on in features.items() if on}
    avx512 = {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= has
    return Target(
        name="host",
        llvm_cpu=cpu,
        llvm_features=features.flatten(),
        vector_bits=512 if avx512 else 256 if "avx2" in has else 128,
        vector_registers=32 if avx512 else 16,
        fma="fma" in has,
        masked_memory=avx512,
        bf16_dot=avx512 and "avx512bf16" in has,
        amx={"amx-tile", "amx-bf16"} <= has and _amx_permitted(),
        sign_masked_memory="avx" in has and not avx512,
        bf16_dot_rate=0.5 if "amx-bf16" in has else 2.0,
        l1_bytes=_cache_size(1, 32 * 1024),
        l1_ways=_cache_ways(1, 8),
        l2_bytes=_cache_size(2, 1024 * 1024),
        l3_bytes=_cache_size(3, 32 * 1024 * 1024),
        **MEASURED_RATES.get((cpu, 512 if avx512 else 256), {}),
    )


# Rates measured per CPU (LLVM's name) and vector width, where they differ from the defaults.
# Zen 4 with AVX-512: one 512-bit FMA a cycle on its two 256-bit units, or two of 256 bits
# (bench/peak.py: 117 GFLOP/s f32 at 3.6 GHz), 24 GB/s of memory bandwidth for one core, the rate
# from which W2's members ran faster left to the hardware prefetchers, and streams from memory
# 4-10% faster in 256-bit vectors than in 512-bit ones, and two-vector tiles ran up to 1.19x
# faster with B's broadcasts as their FMAs' memory operands, and ymm FMA tiles of one vector waited
# for their broadcasts of B at two loads a cycle (f32 8^3: 80 loads in 42 cycles, 32 of FMAs;
# docs/benchmarks.md).
#
# Zen 3 with AVX2: a K loop reading A from L2 ran at the FMA rate with 2 x 6 f32 tiles (64 bytes
# of A per 6 cycles) and at 0.70-0.75x with 2 x 4 (64 per 4) on 48x512x4608 and 49x512x4608, which
# is about 12 bytes a cycle; and A packed ran faster than A reread where it lies wherever A and B
# overflow half of L2 (with the K loops aligned: W3's 196x1024x256 1.02-1.09x, 49x2048x512
# 1.02-1.08x, 49x512x4608 1.3-1.5x, W1 f32 256^3 1.37-1.49x; reread, 196x1024x512 ran 0.72-0.77x
# and 196x256x1024 0.67-0.70x), where on Zen 4 rereading won (1.18x and 1.5x). Zen 3's short
# static K loops ran faster two k steps an iteration than one (paired, one process: W2 in L2 f32
# 32^3 1.13x, 64x64x256 1.06x, 56x9x9 1.02x, f64 16^3, 35x9x35 and 64^3 1.02x, none below 0.99x;
# W3's 3136x64x64, 196x256x2304 and 49x2048x512 1.04-1.05x, 12544x64x147 1.03x, 784x128x1152
# 1.02x). Zen 3's batches from memory ran faster with the software prefetches up to members of 20
# bytes a cycle of compute (f32 16x8x8 0.90-0.91x without, f64 8x8x16 0.92-0.94x, 56x9x9 at 15
# bytes 0.54x), slower from 24 (f32 and f64 8^3: 1.00-1.16x without, median 1.06x, eleven runs).
#
# The Xeon with AMX that LLVM names `rocketlake` (its hypervisor reports model 167): static K
# loops ran faster two k steps an iteration than one (paired, one process, same arrays): W2 in L2
# f32 32^3 1.04-1.06x (libxsmm's kernel takes four), 20x9x20 1.05x, f64 35x9x35 1.05x, f64
# 56x9x9 1.035x, f64 32^3 1.03x, the other W2 shapes 0.99-1.02x; W3 1.02x in total
# (12544x64x147 1.12-1.13x), W1's packed f32 panels 1024^3 1.06x and 2048^3 1.05x. Four steps
# ran f32 32^3 1.07x but K = 9 0.79-0.89x, and W3 0.99x in total (`bench.target_variants`).
# W3's row panels ran faster with their K loops prefetching A than with the tiles asking for
# the next A block (`bench.target_variants`, one thread: 3136x64x576 1.10x, 12544x64x147 and
# 784x128x512 1.08x, 3136x64x256 and 3136x128x256 1.04x, 196x256x1024 0.99x; W3 1.02x in total).
# Tiles as tall as C whose A streams from L2 ran no faster for it: the tiles the model picks
# without the tall stream's speedup (2 x 14 or 2 x 13 rather than 4 x 6, 4 x 4 or 6 x 4), in
# cache, paired in one process, A on a line / 16 bytes past one: f32 64x64x256 1.02x / 1.06x,
# 64x128x256 1.14-1.16x / 1.21-1.23x, 96x128x256 1.06x / 1.18x, 96x512x128 1.10x / 1.25x,
# f64 32x128x256 1.06x / 1.17x, 48x128x256 1.05x / 1.13x, 48x64x512 0.99x / 1.14x.
MEASURED_RATES: dict[tuple[str, int], dict[str, float | int | bool]] = {
    ("znver4", 512): {
        "fma_per_cycle": 1.0,
        "fma_unit_bits": 256,
        "hardware_prefetch_bytes_per_cycle": 6.7,
        "stream_vector_bits": 256,
        "broadcast_operand_vectors": 2,
        "broadcast_loads_per_cycle": 2.0,
        "small_gemm_step_fmas": 12,
        "member_tile_columns": 8,
        "a_block_l2s_over_memory": 2.0,
    },
    ("rocketlake", 512): {
        "k_unroll": 2,
        "prefetches_next_panel_block": False,
        "tall_stream_speedup": 1.0,
    },
    ("znver3", 256): {
        "l2_bytes_per_cycle": 12.0,
        "rereads_a_from_l2": False,
        "k_unroll": 2,
        "hardware_prefetch_bytes_per_cycle": 22.0,
    },
}


def _amx_permitted() -> bool:
    """The CPU has AMX, but Linux also has to grant its tile state to the process."""
    from nanotc.runtime import amx

    return amx.available()


def _cache_size(level: int, default: int) -> int:
    """Bytes of this CPU's data (or unified) cache of one level."""
    text = _cache_property(level, "size") or ""
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    digits = text.rstrip("KM")
    return int(digits) * scale if digits.isdigit() and int(digits) > 0 else default


def _cache_ways(level: int, default: int) -> int:
    """Associativity of this CPU's data (or unified) cache of one level."""
    text = _cache_property(level, "ways_of_associativity") or ""
    return int(text) if text.isdigit() and int(text) > 0 else default


def _cache_property(level: int, name: str) -> str | None:
    """One property of this CPU's data (or unified) cache of one level, from Linux sysfs."""
    from pathlib import Path

    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            if int((index / "level").read_text()) != level:
                continue
            if (index / "type").read_text().strip() == "Instruction":
                continue
            return (index / name).read_text().strip()
        except OSError:
            continue
    return None


def get(name: str | Target | None) -> Target:
    """A target by name (`host` when None)."""
    if isinstance(name, Target):
        return name
    if name is None or name == "host":
        return host()
    try:
        return BUILTIN[name]
    except KeyError:
        known = ", ".join(["host", *BUILTIN])
        raise ValueError(f"unknown target {name!r} (known: {known})") from None


def runs_on_host(target: Target) -> bool:
    """Whether code for `target` can execute here (its features are a subset of the host's).
    From `host()`'s features, read from LLVM once: a compile that the kernel cache answers
    calls no LLVM function."""
    return _enabled(target.llvm_features) <= _enabled(host().llvm_features)


@lru_cache(maxsize=16)
def _enabled(features: str) -> frozenset[str]:
    """The features a target turns on (read once per description: every compile asks)."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))
