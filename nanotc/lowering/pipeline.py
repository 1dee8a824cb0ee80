"""The lowering pipeline: which passes run, in order, between the checked program and LLVM.

Each pass is a small frozen dataclass with `run(func, target, options)` that rewrites one
function of a copy of the program in place (`options`: tuned choices, `lowering.choices`).
The default pipeline, in order:

0. blas2-as-gemm: gemv.n and ger become gemms on vector views (one-column / K=1 tiles);
1. batch-reduce: loops of gemms accumulating into one C become `tile.batch_gemm` tiles, which
   keep C in registers across the whole loop;
1a. row-major-gemms: a gemm into a row-major C becomes its transposed problem, into C's
   transposed view (`lowering/row_major.py`);
1b. pair-members: on AMX targets, a loop over a dense batch of tiny bf16 gemms multiplies two
   members per tile product (`lowering/pair_members.py`);
2. prefetch-next-group: small gemms on group-indexed views whose tiles will not stream the
   next work-group's operands prefetch them up front (`lowering/prefetch.py`);
3. gemm-tiles: the remaining gemms become loops around register-tile microkernels, directly on
   the operands or, for operands larger than the caches, on packed blocks;
4. stream-next-group: register tiles on group-indexed f32/f64 views get the next work-group's
   views, a share of whose lines their K loops prefetch (`lowering/prefetch.py`);
5. pack-ahead: loops of small AMX gemms pack each iteration's VNNI operand one iteration
   ahead (`lowering/pack_ahead.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from nanotc.ir.clone import clone_program
from nanotc.ir.core import Function, Program
from nanotc.lowering.batch_reduce import lower_batch_reduce
from nanotc.lowering.blas2_as_gemm import rewrite_blas2
from nanotc.lowering.choices import DEFAULT_OPTIONS, CompileOptions
from nanotc.lowering.gemm import lower_gemms
from nanotc.lowering.pack_ahead import pack_ahead
from nanotc.lowering.pair_members import pair_members
from nanotc.lowering.prefetch import prefetch_next_group, stream_next_group
from nanotc.lowering.row_major import transpose_row_major_gemms
from nanotc.targets import Target


class Pass(Protocol):
    name: str

    def run(self, func: Function, target: Target, options: CompileOptions) -> None: ...


@dataclass(frozen=True)
class GemmTiles:
    name: str = "gemm-tiles"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        lower_gemms(func, target, options)


@dataclass(frozen=True)
class BatchReduce:
    name: str = "batch-reduce"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        lower_batch_reduce(func, target, options)


@dataclass(frozen=True)
class PairMembers:
    name: str = "pair-members"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        pair_members(func, target)


@dataclass(frozen=True)
class PrefetchNextGroup:
    name: str = "prefetch-next-group"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        prefetch_next_group(func, target)


@dataclass(frozen=True)
class StreamNextGroup:
    name: str = "stream-next-group"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        stream_next_group(func, target)


@dataclass(frozen=True)
class Blas2AsGemm:
    name: str = "blas2-as-gemm"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        rewrite_blas2(func)


@dataclass(frozen=True)
class RowMajorGemms:
    name: str = "row-major-gemms"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        transpose_row_major_gemms(func)


@dataclass(frozen=True)
class PackAhead:
    name: str = "pack-ahead"

    def run(self, func: Function, target: Target, options: CompileOptions) -> None:
        pack_ahead(func)


DEFAULT_PIPELINE: tuple[Pass, ...] = (
    Blas2AsGemm(),
    BatchReduce(),
    RowMajorGemms(),
    PairMembers(),
    PrefetchNextGroup(),
    GemmTiles(),
    StreamNextGroup(),
    PackAhead(),
)


def lower(
    program: Program,
    target: Target,
    pipeline: tuple[Pass, ...] = DEFAULT_PIPELINE,
    options: CompileOptions = DEFAULT_OPTIONS,
) -> Program:
    """A lowered copy of a checked program; the program itself is left as it was. `options`
    override the analytical register tiles and blockings of chosen gemms (tuning)."""
    lowered = clone_program(program)
    for func in lowered.functions:
        for p in pipeline:
            p.run(func, target, options)
    return lowered
