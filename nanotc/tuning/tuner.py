"""Measuring register-tile and blocking candidates of a kernel's gemms on this machine.

    result = tune(source, "kernel", arguments, group_size=N)   # stores the winners

The kernel's gemms are found as lowering will see them (after the blas2-as-gemm rewrite), each
under its signature (`lowering.choices`): the path it takes (direct register tiles,
batch-reduce tiles, packed blocks, in-place K blocks or row panels), types, transposes, static
shape, reserved registers. A gemm with a dynamic shape has both a direct and a blocked path;
the blocked one is tuned only when the launch's arrays exceed half of L2 (otherwise it never
runs at these sizes).

The search is coordinate-wise: gemm after gemm, with the others at their best so far, the
analytical choice is timed first, then the register tiles that fit the target's registers in
the order of the analytical model's estimate (`--tiles` of them), then, for packed blocks,
block sizes around the analytical ones. Every candidate compiles the whole program, checks
its results against the analytical program's on the same inputs, and is timed as the median
of launches of the kernel on the given arguments (each sample at least a few milliseconds). A
candidate replaces the incumbent only when at least `MIN_GAIN` faster, twice: a first win is
confirmed by timing the incumbent and the candidate again, so noise keeps the analytical
choice. A time budget stops the search between candidates.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nanotc.api import Compilation
from nanotc.api import compile as compile_program
from nanotc.check import load
from nanotc.ir.builder import Builder
from nanotc.ir.clone import clone_program
from nanotc.ir.core import Function, Program, Region
from nanotc.ir.instructions import Gemm, Transpose
from nanotc.ir.types import ScalarType
from nanotc.ir.values import Value
from nanotc.lowering.batch_reduce import batch_reduce_gemm
from nanotc.lowering.blas2_as_gemm import rewrite_blas2
from nanotc.lowering.choices import (
    BATCH,
    BLOCKED,
    DEFAULT_OPTIONS,
    DIRECT,
    K_BLOCKS,
    PANELS,
    CompileOptions,
    GemmChoice,
    GemmSignature,
    reads_whole_rows,
    signature,
    takes_small_gemm_rules,
)
from nanotc.lowering.gemm import direct_gemm, through_f32_scratch, whole_scratch_gemm
from nanotc.lowering.gemm_amx import amx_applies
from nanotc.lowering.gemm_blocked import (
    Blocking,
    blocked_reserved,
    blocked_tile,
    blocking,
    in_place_width,
    needs_blocking,
    packed_element,
)
from nanotc.lowering.gemm_in_place import in_place_path, in_place_tile
from nanotc.lowering.gemm_tiles import (
    Extents,
    direct_model_extents,
    gemm_extents,
    member_tile_model,
    resident_pairs_tile,
    rows_as_dots,
    supported,
    tile_reserved,
)
from nanotc.lowering.register_tile import RegisterTile, choose, ranked
from nanotc.lowering.row_major import transpose_row_major_gemms
from nanotc.runtime.arguments import arrays_of, bind_arguments, copy_argument
from nanotc.targets import Target, get, runs_on_host
from nanotc.transforms.flops import flops_per_group
from nanotc.tuning import database

MIN_GAIN = 0.03  # a candidate must be 3% faster than the incumbent to replace it
FINAL_ROUNDS = 2  # timings each of the analytical and the tuned choices for the reported gain
SAMPLE_SECONDS = 0.005  # each timed sample runs enough launches to last this long
Progress = Callable[[str], None]


class TuneError(ValueError):
    """A kernel that cannot be tuned here (no gemm to tune, a target this host cannot run)."""


@dataclass(frozen=True)
class Site:
    """One gemm signature of the kernel and what the analytical models choose for it."""

    signature: GemmSignature
    element: ScalarType
    analytical: GemmChoice
    packed: ScalarType | None = None  # what the blocked path's packs hold (block sizes)
    in_place_width: int = 0  # the widest blocked tile that reads B in place (block sizes)
    # M, N, K as the path's tile model sees them (blocks: any size, None)
    model_extents: Extents = (None, None, None)
    # the tile over all of C holding A's bf16 pairs, where a tuned choice may take it
    # (`gemm_tiles.resident_pairs_tile`)
    resident: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return self.signature.key()


@dataclass
class SiteResult:
    site: Site
    analytical_seconds: float
    best: GemmChoice
    best_seconds: float
    tried: int


@dataclass
class TuneResult:
    kernel: str
    target: Target
    analytical_seconds: float
    seconds: float
    flops: int | None
    sites: list[SiteResult] = field(default_factory=list)
    budget_exhausted: bool = False
    stored: bool = False

    @property
    def options(self) -> CompileOptions:
        return CompileOptions.of({r.site.key: r.best for r in self.sites})


def tune(
    source: str,
    kernel: str,
    arguments: Sequence[Any],
    group_size: int,
    *,
    target: str | Target | None = None,
    num_threads: int | None = None,
    budget: float = 20.0,
    tiles: int = 6,
    repeats: int = 5,
    store: bool = True,
    progress: Progress | None = None,
) -> TuneResult:
    """Search the choices of `kernel`'s gemms for these arguments; store the winners in the
    tuning database unless `store` is False. The arguments are copied, never modified."""
    say = progress or _stderr
    resolved = get(target)
    if not runs_on_host(resolved):
        raise TuneError(f"target {resolved.name!r} cannot run here, so it cannot be timed")
    if store:
        database.check_writable()
    func = load(source).function(kernel)
    bind_arguments(func, arguments, group_size)  # an unusable argument is refused by name
    arguments = [copy_argument(a) for a in arguments]  # numpy arrays from here on
    sites = gemm_sites(func, resolved, arguments)
    if not sites:
        raise TuneError(f"@{kernel} has no gemm that uses register tiles: nothing to tune")
    bench = _Bench(source, kernel, arguments, group_size, resolved, num_threads, repeats)
    deadline = time.monotonic() + budget
    say(
        f"tuning @{kernel} on {resolved.name} ({resolved.llvm_cpu}): {len(sites)} gemm "
        f"signature(s), budget {budget:g} s"
    )
    current = DEFAULT_OPTIONS
    bench.time(current)  # the first measurement also warms up memory, caches and threads
    analytical = bench.time(current)
    say(f"analytical choices: {_ms(analytical)}{_rate(bench.flops, analytical)}")
    result = TuneResult(kernel, resolved, analytical, analytical, bench.flops)
    for number, site in enumerate(sites, 1):
        say(f"[{number}/{len(sites)}] {site.key}")
        site_result = _tune_site(site, current, bench, result.seconds, tiles, deadline, say)
        result.sites.append(site_result)
        current = _with(current, site, site_result.best)
        result.seconds = site_result.best_seconds
        if time.monotonic() > deadline:
            result.budget_exhausted = True
    result.analytical_seconds, result.seconds = _final_times(bench, current)
    gain = result.analytical_seconds / result.seconds
    say(
        f"tuned: {_ms(result.seconds)}{_rate(bench.flops, result.seconds)}, {gain:.2f}x "
        f"the analytical choices ({_ms(result.analytical_seconds)}, timed again)"
    )
    if result.budget_exhausted:
        say("time budget reached: candidates left untried (raise --budget to try them)")
    # a site whose candidates the budget left untried holds no finding, only the model's choice
    measured = {r.site.key: _record(r, kernel) for r in result.sites if r.tried}
    if store and measured:
        path = database.record(resolved, measured)
        result.stored = True
        say(f"stored in {path}")
    elif store:
        say("nothing stored: no candidate was tried")
    return result


def _tune_site(
    site: Site,
    current: CompileOptions,
    bench: _Bench,
    incumbent_seconds: float,
    tiles: int,
    deadline: float,
    say: Progress,
) -> SiteResult:
    best, best_seconds, tried = site.analytical, incumbent_seconds, 0
    say(f"  {site.analytical.describe()} (analytical): {_ms(best_seconds)}")

    def consider(choice: GemmChoice) -> None:
        nonlocal best, best_seconds, tried
        if choice == best or time.monotonic() > deadline:
            return
        options = _with(current, site, choice)
        seconds = bench.time(options)
        tried += 1
        better = seconds < best_seconds * (1 - MIN_GAIN)
        if better:  # confirm against noise: time the incumbent and the candidate again
            incumbent = bench.time(_with(current, site, best))
            seconds = min(seconds, bench.time(options))
            best_seconds = min(best_seconds, incumbent)
            better = seconds < best_seconds * (1 - MIN_GAIN)
        say(f"  {choice.describe()}: {_ms(seconds)}{'  <- best so far' if better else ''}")
        if better:
            best, best_seconds = choice, seconds

    for tile in tile_candidates(site, bench.target, tiles):
        consider(GemmChoice(tile=tile, blocking=best.blocking))
    if site.signature.path == BLOCKED:
        assert best.tile is not None
        lanes = bench.target.lanes(site.element)
        for blocks in blocking_candidates(site, RegisterTile(*best.tile, lanes), bench.target):
            consider(GemmChoice(tile=best.tile, blocking=blocks))
    return SiteResult(site, incumbent_seconds, best, best_seconds, tried)


def _final_times(bench: _Bench, tuned: CompileOptions) -> tuple[float, float]:
    """The analytical and the tuned choices timed again in turns, best of FINAL_ROUNDS each.
    The search's first timing ran on colder caches and clocks than the rest (a 56x9x9 bf16
    batch: 0.171 ms, then 0.125 for the same code), so its numbers would overstate the gain,
    up to claiming one where the analytical choice won."""
    analytical: list[float] = []
    chosen: list[float] = []
    for _ in range(FINAL_ROUNDS):
        analytical.append(bench.time(DEFAULT_OPTIONS))
        chosen.append(analytical[-1] if tuned == DEFAULT_OPTIONS else bench.time(tuned))
    return min(analytical), min(chosen)


def _with(current: CompileOptions, site: Site, choice: GemmChoice) -> CompileOptions:
    """`current` with `choice` for the site; the analytical choice needs no entry (and
    compiles to the same code, so the compilation `_Bench` keeps is reused)."""
    return current if choice == site.analytical else current.with_choice(site.key, choice)


# --- the gemms of a kernel -----------------------------------------------------------------


def gemm_sites(func: Function, target: Target, arguments: Sequence[Any] = ()) -> list[Site]:
    """The distinct gemm signatures lowering will ask about, with their analytical choices:
    for a gemm whose path is decided at run time, the path the launch of `arguments` takes."""
    program = clone_program(Program([func]))
    (copy,) = program.functions
    rewrite_blas2(copy)  # gemv.n and ger become gemms, as in the lowering pipeline
    transpose_row_major_gemms(copy)
    launch = _Launch.of(copy, arguments, target)
    found: dict[str, Site] = {}
    for site in _sites(copy.body, target, launch):
        found.setdefault(site.key, site)
    return list(found.values())


@dataclass(frozen=True)
class _Launch:
    """What the tuner knows of the launch it times: the shapes of the arrays given for
    parameters, and whether all of them together exceed half of L2."""

    shapes: dict[Value, tuple[int, ...]]
    large: bool

    @staticmethod
    def of(func: Function, arguments: Sequence[Any], target: Target) -> _Launch:
        shapes = {
            param: tuple(array.shape)
            for param, array in zip(func.arguments, arguments)
            if isinstance(array, np.ndarray)
        }
        return _Launch(shapes, _arrays_exceed(arguments, target.l2_bytes // 2))

    def extents(self, g: Gemm) -> tuple[int, int, int] | None:
        """M, N and K of a gemm on whole matrices given as arguments (None otherwise)."""
        a, c = self.shapes.get(g.a), self.shapes.get(g.c)
        if a is None or c is None or len(a) != 2 or len(c) != 2:
            return None
        return c[0], c[1], a[0] if g.trans_a is Transpose.T else a[1]


def _sites(region: Region, target: Target, launch: _Launch) -> list[Site]:
    out: list[Site] = []
    for inst in region.instructions:
        batch = batch_reduce_gemm(inst)
        if batch is not None and not amx_applies(batch, target):
            out.append(_site(batch, BATCH, target))
            continue
        for nested in inst.regions():
            out.extend(_sites(nested, target, launch))
        # AMX gemms have fixed 16 x 16 tiles: nothing for the tuner to choose
        if not isinstance(inst, Gemm) or amx_applies(inst, target):
            continue
        tiled = whole_scratch_gemm(Builder(Region()), inst) if through_f32_scratch(inst) else inst
        if tiled is not None and supported(tiled):  # (a 16-bit C's: the gemm on its scratch)
            out.extend(_site(tiled, path, target) for path in _paths(tiled, target, launch))
    return out


def _paths(g: Gemm, target: Target, launch: _Launch) -> list[str]:
    """The paths lowering may take for `g`; where the choice is made at run time, the one
    this launch takes (both when its extents are not the arguments' own: then the blocked
    one only where the arrays exceed half of L2)."""
    if rows_as_dots(g):  # no register tiles: nothing to choose
        return []
    blocked = needs_blocking(Builder(Region()), g, target)
    if isinstance(blocked, bool):
        if not blocked:
            return [DIRECT]
        return [in_place_path(g, target) or BLOCKED]
    extents = launch.extents(g)
    if extents is not None:
        return [BLOCKED] if needs_blocking(Builder(Region()), g, target, extents) else [DIRECT]
    return [DIRECT, BLOCKED] if launch.large else [DIRECT]


def _site(g: Gemm, path: str, target: Target) -> Site:
    if path == DIRECT:  # the tiles read the copies the direct path makes (their types)
        g = direct_gemm(Builder(Region()), g, target)
    element = g.c.type.element
    extents = gemm_extents(g)
    if path == BLOCKED:
        reserved = blocked_reserved(g)
        tile = blocked_tile(g, target)
        packed = packed_element(g, target)
        width = in_place_width(g, target)
        blocks = _blocking(target, packed, tile, extents, width)
        choice = GemmChoice((tile.mv, tile.nr), (blocks.mc, blocks.kc, blocks.nc))
        return Site(signature(g, path, extents, reserved), element, choice, packed, width)
    modelled = direct_model_extents(g, target) if path == DIRECT else extents
    if path in (K_BLOCKS, PANELS):
        reserved = blocked_reserved(g)
        tile, _ = in_place_tile(g, path, target)
    else:
        reserved = tile_reserved(g, target)
        tile = _analytical_direct(g, path, target, modelled, reserved)
    choice = GemmChoice((tile.mv, tile.nr))
    held = resident_pairs_tile(g, target, reserved, members=True) if path == DIRECT else None
    resident = None if held is None else (held.mv, held.nr)
    return Site(signature(g, path, extents, reserved), element, choice,
                model_extents=modelled, resident=resident)  # fmt: skip


def _analytical_direct(g: Gemm, path: str, target: Target, modelled: Extents,
                       reserved: int) -> RegisterTile:  # fmt: skip
    """The direct and batch-reduce paths' analytical tile: one holding A's bf16 pairs where
    lowering takes it, else the tile model's."""
    resident = resident_pairs_tile(g, target, reserved) if path == DIRECT else None
    rules = takes_small_gemm_rules(signature(g, path, modelled, reserved))
    model = member_tile_model(g, target) if path == DIRECT else choose
    return resident or model(target, g.c.type.element, *modelled, reserved, small_gemm_rules=rules)


def _blocking(
    target: Target,
    packed: ScalarType,
    tile: RegisterTile,
    extents: tuple[int | None, int | None, int | None],
    width: int,
) -> Blocking:
    """The analytical block sizes of a blocked site for `tile`."""
    m, n, k = extents
    return blocking(target, packed, tile, k, n, m=m, b_in_place=tile.nr <= width)


def _arrays_exceed(arguments: Sequence[Any], limit: int) -> bool:
    total = 0
    for a in arguments:
        if isinstance(a, np.ndarray):
            total += a.nbytes
        elif isinstance(a, list | tuple):
            total += sum(x.nbytes for x in a if isinstance(x, np.ndarray))
    return total > limit


# --- candidates ----------------------------------------------------------------------------


def tile_candidates(site: Site, target: Target, count: int) -> list[tuple[int, int]]:
    """Register tiles that fit, best estimate first, after the tile holding A's bf16 pairs
    where the analytical choice is another (`Site.resident`). Left out: tiles wider than a
    static N, which run as the N-wide tile, and the analytical choice (so clipped)."""
    m, n, k = site.model_extents
    path, reserved = site.signature.path, site.signature.reserved
    rules = takes_small_gemm_rules(site.signature)
    tiles = ranked(target, site.element, m, n, k, reserved, reads_whole_rows(path), rules)
    assert site.analytical.tile is not None
    mv, nr = site.analytical.tile
    analytical = (mv, nr if n is None else min(nr, n))
    distinct = [(t.mv, t.nr) for t in tiles if n is None or t.nr <= n]
    held = [site.resident] if site.resident is not None else []
    out = [t for t in held + distinct if t != analytical]
    return out[: max(0, count)]


def blocking_candidates(
    site: Site, tile: RegisterTile, target: Target
) -> list[tuple[int, int, int]]:
    """Block sizes around the analytical ones for `tile`: kc and mc halved and doubled, and
    A blocks of one row of tiles (each tile then reuses its predecessor's A panel across
    the columns, and B's columns are read once per block). Those ran the one-thread bf16
    512x2048x2048 layer 1.04-1.05x and f32 2048^3 1.04-1.07x faster than the analytical
    A blocks, but the same layer on two threads 0.95x and f64 2048^3 0.98x: no rule found."""
    base = _blocking(target, site.packed or site.element, tile, site.signature.shape,
                     site.in_place_width)  # fmt: skip
    nc = max(tile.nr, base.nc // tile.nr * tile.nr)
    out: list[tuple[int, int, int]] = []
    for kc_scale in (1.0, 0.5, 2.0):
        for mc_scale in (1.0, 0.5, 2.0):
            kc = max(8, int(base.kc * kc_scale) // 8 * 8)
            mc = max(tile.mr, int(base.mc * mc_scale) // tile.mr * tile.mr)
            if (mc, kc, nc) not in out:
                out.append((mc, kc, nc))
    if (tile.mr, base.kc, nc) not in out:
        out.append((tile.mr, base.kc, nc))
    return out


# --- timing --------------------------------------------------------------------------------


class _Bench:
    """Compiles a program with given options and times its kernel on copies of the inputs
    (`arguments`: tune's own numpy copies, which no launch writes)."""

    def __init__(self, source: str, kernel: str, arguments: Sequence[Any], group_size: int,
                 target: Target, num_threads: int | None, repeats: int):  # fmt: skip
        self.source, self.kernel, self.target = source, kernel, target
        self.group_size, self.threads, self.repeats = group_size, num_threads, max(1, repeats)
        self.inputs = list(arguments)
        self.reference: list[Any] | None = None
        self._compiled: dict[CompileOptions, Compilation] = {}
        func = load(source).function(kernel)
        shapes = {
            id(p): a.shape for p, a in zip(func.arguments, arguments) if isinstance(a, np.ndarray)
        }
        self.flops = _flops(func, shapes, group_size)

    def time(self, options: CompileOptions) -> float:
        compilation = self._compiled.get(options)
        if compilation is None:
            compilation = compile_program(self.source, self.target, options=options, cache=False)
            self._check(compilation)
            self._compiled[options] = compilation
        args = [copy_argument(a) for a in self.inputs]
        launch = compilation[self.kernel].prepare(
            *args, group_size=self.group_size, num_threads=self.threads
        )
        return median_seconds(launch, self.repeats)

    def _check(self, compilation: Compilation) -> None:
        """Run once on fresh copies; the first (analytical) run is the reference."""
        args = [copy_argument(a) for a in self.inputs]
        compilation[self.kernel](*args, group_size=self.group_size, num_threads=self.threads)
        if self.reference is None:
            self.reference = args
            return
        for index, (got, want) in enumerate(zip(args, self.reference)):
            if not all(_close(g, w) for g, w in zip(arrays_of(got), arrays_of(want))):
                raise TuneError(
                    f"a candidate computed a different argument {index} than the analytical "
                    "choice: please report this as a nanotc bug"
                )


def median_seconds(launch: Callable[[], None], repeats: int) -> float:
    """Median seconds per launch over `repeats` samples of at least `SAMPLE_SECONDS`."""
    launch()  # warm-up: caches, the thread pool
    start = time.perf_counter()
    launch()
    once = max(time.perf_counter() - start, 1e-7)
    inner = max(1, min(1000, math.ceil(SAMPLE_SECONDS / once)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            launch()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.dtype.kind not in "fc":
        return bool(np.array_equal(got, want))
    a, b = got.astype(np.float64), want.astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    tolerance = 1e-3 if got.dtype.itemsize <= 4 else 1e-9
    finite = np.array_equal(np.isfinite(a), np.isfinite(b))
    return finite and bool(np.all(np.abs(a - b)[np.isfinite(b)] <= tolerance * scale))


def _flops(func: Function, shapes: dict[int, tuple[int, ...]], group_size: int) -> int | None:
    per_group = flops_per_group(func, shapes)
    return None if per_group is None else per_group * group_size


def _record(result: SiteResult, kernel: str) -> dict[str, Any]:
    return {
        **result.best.to_json(),
        "seconds": result.best_seconds,
        "analytical_seconds": result.analytical_seconds,
        "kernel": f"@{kernel}",
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def _rate(flops: int | None, seconds: float) -> str:
    return f" ({flops / seconds / 1e9:.1f} GFLOP/s)" if flops else ""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
