"""Shared machinery of the benchmarks: timing, rates, validation, tables, CSV and options.

Timing follows DESIGN.md ("Performance methodology") in interleaved rounds, with the median per
implementation (`compare`): the implementations of a configuration (nanotc and its peers) are
validated, then warmed up with untimed calls, then timed in rounds of one call each, in an order
shuffled per round. A sample is `time.perf_counter` wall time, or the seconds an implementation
measured itself when its call returns them, as the libxsmm driver does. Other tenants' load on a
shared machine comes in bursts of seconds; interleaving spreads a burst over every
implementation of a round instead of all samples of one, so nanotc/peer ratios drift less
between runs. A time budget bounds the rounds so slow implementations cost one round, not five.
Rates are GFLOP/s, the percentage of this machine's measured peak (`bench.peak`: timed in the
same rounds where a workload uses `compare_with_peak`, else per core at the start times the
thread count) and, for memory-bound variants, GB/s; every peer gets a column and the ratio
nanotc/peer (above 1: nanotc is faster), paired by round (`speed_ratio`), as is the percent
of a peak timed in the rounds.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import platform
import random
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers import NAMES as peer_names
from nanotc.cli.options import non_negative, positive, seconds
from nanotc.runtime.aligned import LINE_BYTES, empty_aligned

RESULTS = Path(__file__).resolve().parent / "results"
DTYPES: dict[str, type[np.floating[Any]]] = {"f32": np.float32, "f64": np.float64}
PEAK_KEYS = {"f32": "fp32", "f64": "fp64"}  # element type -> key of bench.peak.peaks()
PRECISIONS = ("fp32", "fp64", "bf16", "amx-bf16")  # every key bench.peak.peaks() may have
# thread counts from the command line: bench/peers/bench_threads.h's BENCH_MAX_THREADS, above
# which the C drivers (libxsmm, memcpy, stream) would run fewer threads than nanotc
MAX_THREADS = 256
PEAK_NOTE = "% peak: of the peak loop (bench/peak.py) on as many threads, in the same rounds"
# column order of the tables
PEER_ORDER = ("memcpy", "stream", "numpy", "openblas", "torch", "libxsmm", "blis")


class ValidationError(AssertionError):
    """An implementation computed a wrong result; the benchmark refuses to time it."""


@dataclass(frozen=True)
class Settings:
    """Options shared by every workload (see `add_common_options`)."""

    quick: bool = False
    threads: tuple[int, ...] = (1, 2)
    dtypes: tuple[str, ...] = ("f32", "f64")
    warmup: int = 1
    repeats: int = 5
    budget: float = 10.0  # seconds of timed calls per implementation and configuration, pooled
    peers: tuple[str, ...] | None = None  # None: every peer found
    seed: int = 0
    spread: bool = False  # tables print each paired ratio's range over the rounds

    def quick_defaults(self) -> Settings:
        """Few repetitions and a small budget: seconds per workload, for smoke tests."""
        return replace(self, warmup=1, repeats=min(self.repeats, 2), budget=min(self.budget, 0.5))


# --- timing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Median seconds per unit of work (one GEMM, one sweep over a batch) and its samples."""

    seconds: float
    samples: tuple[float, ...]

    @property
    def repeats(self) -> int:
        return len(self.samples)


def speed_ratio(ours: Timing, theirs: Timing) -> float:
    """How many times faster `ours` ran than `theirs` (theirs' seconds over ours'). Timings of
    the same rounds (`compare`: one sample each per round, so equally many) are paired: the
    median over the rounds of each round's ratio, so a burst of load that slows both in a
    round moves neither the ratio nor its median. Otherwise (totals, separate measurements)
    the ratio of the medians. On the Zen 3 machine, whose speed swung by up to 1.5x within a
    minute, a W3 row's ratio of medians read 0.77x where its paired rounds read 0.94-1.09x."""
    rounds = round_ratios(ours, theirs)
    return statistics.median(rounds) if rounds else theirs.seconds / ours.seconds


def round_ratios(ours: Timing, theirs: Timing) -> list[float]:
    """Each round's speed ratio of `ours` over `theirs`, for timings of the same rounds (else
    none). Their range shows what the median hides: on the Zen 4 machine a two-thread W4 row
    whose median read 1.60 had rounds from 1.33 to 1.87, as other tenants came and went."""
    if len(ours.samples) != len(theirs.samples) or len(ours.samples) < 2:
        return []
    return [t / o for o, t in zip(ours.samples, theirs.samples)]


def measure(
    run: Callable[[], float | None],
    *,
    warmup: int,
    repeats: int,
    budget: float,
    units: int = 1,
) -> Timing:
    """Call `run` `warmup` times untimed, then up to `repeats` times timed (at least once, and
    no more once `budget` seconds of timed calls have passed). A call may return the seconds it
    measured itself (a float); otherwise its wall time counts. Each sample is divided by `units`.
    For one implementation on its own (W3's launch overhead); `compare` times peers together."""
    for _ in range(warmup):
        run()
    samples: list[float] = []
    spent = 0.0
    while len(samples) < max(1, repeats):
        seconds, wall = _timed_call(lambda _: run(), 1)
        spent += wall
        samples.append(seconds / units)
        if spent >= budget:
            break
    return Timing(statistics.median(samples), tuple(samples))


def _timed_call(call: Callable[[int], float | None], reps: int) -> tuple[float, float]:
    """One call of `call(reps)`: the seconds it reports itself (else its wall time), and its
    wall time."""
    start = time.perf_counter()
    inner = call(reps)
    wall = time.perf_counter() - start
    seconds = inner if isinstance(inner, float) else wall
    if seconds <= 0:
        raise RuntimeError(f"implementation reported a non-positive time ({seconds})")
    return seconds, wall


def calibrate(run: Callable[[int], float | None], target: float, limit: int = 1 << 24) -> int:
    """Repetition count whose call to `run(count)` lasts about `target` seconds (at least 1).
    Each count is timed twice and the faster call counts: a first call can pay a one-off
    delay (a pool thread waking on an idle core took up to 4 ms here) that would otherwise
    set the count to 1 and leave every sample dominated by it."""
    count = 1
    while count < limit:
        seconds = min(_timed_call(run, count)[0] for _ in range(2))
        if seconds >= target / 4:
            return max(1, min(limit, round(count * target / seconds)))
        count *= 8
    return limit


def repeat(run: Callable[[], object]) -> Callable[[int], None]:
    """A contender's call made of a function that does the work once: `reps` calls of it."""

    def call(reps: int) -> None:
        for _ in range(reps):
            run()

    return call


SETTLE_SECONDS = 0.4  # pause before a timed call on several threads (see compare)
WARM_SECONDS = 0.1  # untimed calls after that pause, before the timed one


@dataclass(frozen=True)
class Contender:
    """One implementation in a `compare`.

    `call(reps)` does the work `reps` times and may return the seconds it measured itself (the
    libxsmm driver times its loop in C); else its wall time counts. `setting` is the context it
    runs in, e.g. its library's thread count: entered once for the whole comparison, since the
    libraries' settings do not interfere and the first call after switching a thread pool's size
    is slow. `check` replaces the comparison's check for a contender whose result lands in its
    own output (e.g. a bf16 torch tensor)."""

    name: str
    call: Callable[[int], float | None]
    setting: AbstractContextManager[Any] = field(default_factory=nullcontext)
    check: Callable[[str], None] | None = None


def compare(
    what: str,
    contenders: Sequence[Contender],
    check: Callable[[str], None],
    settings: Settings,
    call_seconds: float | None = None,
    threads: int = 1,
) -> dict[str, Timing]:
    """Validate, then time the contenders in interleaved rounds; {name: median per unit of work}.

    With every contender's setting entered: each contender's first call, `call(1)`, is checked
    (`check(f"{name} {what}")` raises on a wrong result) before any other call, so each
    validation starts from the state the previous check left (a check may reset the output).
    Then per contender: `reps` chosen by `calibrate` so that one call lasts about `call_seconds`
    (1 when not given) and `settings.warmup - 1` untimed calls (the validation call was the
    first). Then up to `settings.repeats` rounds, each timing one call of every contender in an
    order shuffled per round (seeded by `settings.seed`, so runs repeat it): load on a shared
    machine that comes and goes over seconds then slows every contender of a round alike instead
    of all samples of one. Rounds stop once the timed calls took `settings.budget` seconds per
    contender (at least one round). A sample is a call's seconds divided by its `reps`.

    Each timed call follows an untimed call of the same contender, so it finds the core as
    that contender leaves it: AMX units that another contender's work (or a pause) let idle
    run their first milliseconds slowly (torch's bf16 MLP layer ran at 420-480 GFLOP/s
    right after a 50 ms pause, 1000-1250 after an fp32 gemm, 1300 after itself). On more
    than one `threads` a pause of SETTLE_SECONDS comes first: the worker threads of the
    previous contender's library busy-wait for a while after its call returns and would take
    a core from this one (right after numpy's OpenBLAS on two threads, nanotc's W1 at
    n = 1024 ran at half its rate after pauses of up to 0.1 s, at 0.7-0.9 of it after
    0.3-1 s). After that pause the contender's untimed calls go on for WARM_SECONDS: the
    cores of this shared machine's virtual CPUs come back from the pause slowly (nanotc's
    two-thread MLP layer took 2.2-3.8 ms per call for the first 10 ms after it, 1.4 ms after
    20 ms of calls; one thread 3.25 ms for the first call, 2.8 after it). On the Zen 5
    machine the first call after 20 ms of calls still took 1.4-5.1 ms (torch's 1.4-2.7),
    after 100 ms 1.2-1.5 ms."""
    names = [c.name for c in contenders]
    if len(set(names)) != len(names):
        raise ValueError(f"contender names must differ: {names}")
    with ExitStack() as stack:
        for contender in contenders:
            stack.enter_context(contender.setting)
        for contender in contenders:
            contender.call(1)
            (contender.check or check)(f"{contender.name} {what}")
        reps = [_prepare(contender, settings.warmup, call_seconds) for contender in contenders]
        samples = _rounds(contenders, reps, settings, SETTLE_SECONDS if threads > 1 else 0.0)
    return {name: Timing(statistics.median(s), tuple(s)) for name, s in zip(names, samples)}


def _prepare(contender: Contender, warmup: int, call_seconds: float | None) -> int:
    """The contender's repetitions per call (calibrated when `call_seconds` is given), after
    making its untimed warm-up calls with that count."""
    reps = 1 if call_seconds is None else calibrate(contender.call, call_seconds)
    for _ in range(warmup - 1):
        contender.call(reps)
    return reps


def _rounds(
    contenders: Sequence[Contender], reps: Sequence[int], settings: Settings, settle: float
) -> list[list[float]]:
    """Samples per contender (in the contenders' order) from rounds of one timed call each,
    right after an untimed one (and before that a pause of `settle` seconds, if not 0)."""
    order = list(range(len(contenders)))
    shuffle = random.Random(settings.seed).shuffle
    samples: list[list[float]] = [[] for _ in contenders]
    spent = 0.0
    for _ in range(max(1, settings.repeats)):
        shuffle(order)
        for i in order:
            if settle:
                time.sleep(settle)
            _warm_up(contenders[i].call, reps[i], WARM_SECONDS if settle else 0.0)
            seconds, wall = _timed_call(contenders[i].call, reps[i])
            samples[i].append(seconds / reps[i])
            spent += wall
        if spent > settings.budget * len(contenders):
            break
    return samples


def _warm_up(call: Callable[[int], float | None], reps: int, seconds: float) -> None:
    """Untimed calls for at least `seconds` (at least one)."""
    end = time.perf_counter() + seconds
    call(reps)
    while time.perf_counter() < end:
        call(reps)


# --- correctness ---------------------------------------------------------------------------------


def check_gemm(
    what: str,
    got: np.ndarray,
    expected: np.ndarray,
    bound: np.ndarray,
    k: int,
    dtype: type[np.floating[Any]],
) -> None:
    """Raise `ValidationError` unless |got - expected| stays within rounding error.

    `expected` is computed in float64; `bound` is sum_k |a_ik b_kj| (+ |beta c_ij|), so the
    tolerance is a few units of roundoff of the element type times sqrt(k)-grown sums. Wrong
    indexing, a missing term or a wrong beta gives errors orders of magnitude larger."""
    eps = float(np.finfo(dtype).eps)
    got64 = np.asarray(got, dtype=np.float64)
    tolerance = 4 * eps * (math.sqrt(k) + 4) * bound + np.finfo(dtype).tiny
    error = np.abs(got64 - expected)
    bad = ~(error <= tolerance)  # also catches NaN
    if bad.any():
        index = np.unravel_index(
            int(np.argmax(np.where(bad, error - tolerance, -np.inf))), bad.shape
        )
        raise ValidationError(
            f"{what}: wrong result at {tuple(int(i) for i in index)}: got {got64[index]!r}, "
            f"expected {expected[index]!r} (tolerance {tolerance[index]:.3g}; "
            f"{int(bad.sum())} of {bad.size} elements wrong)"
        )


# --- results -------------------------------------------------------------------------------------


@dataclass
class Row:
    """One configuration of one workload: nanotc's timing and each peer's."""

    workload: str
    shape: str
    dtype: str
    threads: int
    flops: float  # per unit of work
    nanotc: Timing
    peers: dict[str, Timing] = field(default_factory=dict)
    peak: float | None = None  # GFLOP/s of `threads` cores for this dtype
    peak_in_rounds: bool = False  # the peak was timed in the same rounds as the implementations
    peak_loop: Timing | None = None  # its timing there (`peak` is its median rate)
    ratios: dict[str, float] = field(default_factory=dict)  # nanotc/peer, where not timed (totals)
    bytes: float | None = None  # memory traffic per unit of work, for memory-bound variants
    reference_gbs: float | None = None  # the machine's copy rate in the same run (W5's % copy)
    variant: str = ""
    params: str = ""  # how the configuration was set up (block size, batch, repetitions)
    note: str = ""  # anything that qualifies the numbers; printed under the table

    def gflops(self, timing: Timing) -> float:
        return self.flops / timing.seconds / 1e9

    def gbs(self, timing: Timing) -> float | None:
        return None if self.bytes is None else self.bytes / timing.seconds / 1e9

    @property
    def percent_peak(self) -> float | None:
        """nanotc's rate over the peak's; paired by round where the peak loop ran in the same
        rounds (`speed_ratio`)."""
        if not self.peak:
            return None
        if self.peak_loop is None:
            return 100 * self.gflops(self.nanotc) / self.peak
        loop_flops = self.peak * 1e9 * self.peak_loop.seconds
        return 100 * self.flops / loop_flops * speed_ratio(self.nanotc, self.peak_loop)

    @property
    def percent_copy(self) -> float | None:
        gbs = self.gbs(self.nanotc)
        return None if gbs is None or not self.reference_gbs else 100 * gbs / self.reference_gbs

    def ratio(self, peer: str) -> float | None:
        """nanotc's speed over the peer's (above 1: nanotc is faster), paired by round."""
        if peer in self.ratios:
            return self.ratios[peer]
        timing = self.peers.get(peer)
        return None if timing is None else speed_ratio(self.nanotc, timing)

    def ratio_range(self, peer: str) -> tuple[float, float] | None:
        """The lowest and highest of the rounds' ratios nanotc/peer (`round_ratios`), where
        the peer was timed in the same rounds."""
        timing = self.peers.get(peer)
        if timing is None or peer in self.ratios:  # not timed, or a ratio of totals
            return None
        rounds = round_ratios(self.nanotc, timing)
        return (min(rounds), max(rounds)) if rounds else None


# --- peaks and the machine -----------------------------------------------------------------------


def parse_peaks(text: str) -> dict[str, float]:
    """Parse `fp32=172,fp64=86` into {"fp32": 172.0, "fp64": 86.0}: keys of PRECISIONS,
    positive finite GFLOP/s (argparse.ArgumentTypeError otherwise)."""
    peaks = {}
    for item in (item.strip() for item in text.split(",")):
        if item:
            key, _, value = (part.strip() for part in item.partition("="))
            if key not in PRECISIONS:
                raise argparse.ArgumentTypeError(
                    f"unknown precision {key!r} in {item!r} (known: {', '.join(PRECISIONS)})"
                )
            try:
                gflops = float(value)
            except ValueError:
                gflops = math.nan
            if not 0 < gflops < math.inf:
                raise argparse.ArgumentTypeError(
                    f"expected {key}=GFLOP/s, a positive number, got {item!r}"
                )
            peaks[key] = gflops
    return peaks


_peak_override: dict[str, float] = {}


def override_peaks(peaks: dict[str, float]) -> None:
    """Use these per-core peaks (GFLOP/s) instead of measuring them, e.g. numbers measured on
    an idle machine; the `--peak` option and $NANOTC_BENCH_PEAK set them."""
    _peak_override.update(peaks)


@cache
def _measured() -> dict[str, float]:
    from bench import peak

    return peak.peaks()


def given_peaks() -> dict[str, float]:
    """The per-core peaks given by `--peak`, else by $NANOTC_BENCH_PEAK, by precision (the
    command line's replace the environment's, which its parser then never reads)."""
    return dict(_peak_override) or parse_peaks(os.environ.get("NANOTC_BENCH_PEAK", ""))


def measured_peaks() -> dict[str, float]:
    """Per-core peak GFLOP/s by precision: overrides, else measured once per process
    (bench.peak; a loaded machine measures low, so % peak then reads high)."""
    override = given_peaks()
    if {"fp32", "fp64"} <= override.keys():
        return override
    return {**_measured(), **override}


def peak_gflops(dtype: str, threads: int) -> float | None:
    return _peak_of(PEAK_KEYS.get(dtype), threads)


def _peak_of(precision: str | None, threads: int) -> float | None:
    per_core = measured_peaks().get(precision) if precision else None
    return None if per_core is None else per_core * threads


@dataclass(frozen=True)
class Peak:
    """GFLOP/s of a configuration's cores, and whether it was timed in the same rounds as the
    implementations (else measured at the start of the run, or given)."""

    gflops: float | None
    in_rounds: bool
    timing: Timing | None = None  # the peak loop's, where timed in the rounds


def compare_with_peak(
    what: str,
    contenders: Sequence[Contender],
    check: Callable[[str], None],
    settings: Settings,
    precision: str,
    call_seconds: float | None = None,
    threads: int = 1,
) -> tuple[dict[str, Timing], Peak]:
    """`compare` with the peak loop of `precision` (a key of bench.peak's peaks) on `threads`
    threads as one more contender: the timings of `contenders`, and the peak of `threads`
    cores measured in the same rounds. On this shared machine the clock moved by up to 1.2x
    between the start of a bench run and its last rows, which a peak measured once at the
    start puts into the percent of peak. A peak given by `--peak` is taken as given, as is
    the start's peak of a unit with no loop (AMX)."""
    loop = None if precision in given_peaks() else _peak_loop(precision, threads)
    if loop is None:
        timings = compare(what, contenders, check, settings, call_seconds, threads)
        return timings, Peak(_peak_of(precision, threads), in_rounds=False)
    peak_contender, flops = loop
    everyone = [*contenders, peak_contender]
    timings = compare(what, everyone, check, settings, call_seconds, threads)
    timing = timings.pop(peak_contender.name)
    return timings, Peak(flops / timing.seconds / 1e9, in_rounds=True, timing=timing)


def _peak_loop(precision: str, threads: int) -> tuple[Contender, float] | None:
    from bench import peak

    return peak.contender(precision, threads)


def last_level_cache() -> int | None:
    """Bytes of the largest CPU cache Linux reports (sysfs), or None."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * scale)
        except ValueError:
            continue
    return max(sizes, default=None)


# --- tables --------------------------------------------------------------------------------------


def _rate(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if value >= 10 else f"{value:.{digits + 1}f}"


def format_table(rows: Sequence[Row], peers: Sequence[str], spread: bool = False) -> str:
    """Aligned text table: one line per row, a rate (GFLOP/s; GB/s for rows measured against
    the copy bandwidth) and a ratio column per peer (`spread`: with its range over the
    rounds, `Row.ratio_range`)."""
    memory_bound = any(r.bytes is not None for r in rows)
    against_copy = any(r.reference_gbs is not None for r in rows)
    header = ["workload", "shape", "dtype", "thr", "nanotc GF/s", "% peak"]
    if memory_bound:
        header.append("nanotc GB/s")
    if against_copy:
        header.append("% copy")
    unit = "GB/s" if against_copy else "GF/s"  # memory-bound rows compare peers' bandwidth
    for peer in peers:
        header += [f"{peer} {unit}", f"nanotc/{peer}"]
    lines = [header]
    for r in rows:
        name = f"{r.workload}/{r.variant}" if r.variant else r.workload
        line = [name, r.shape, r.dtype, str(r.threads), _rate(r.gflops(r.nanotc))]
        line.append(_rate(r.percent_peak))
        if memory_bound:
            line.append(_rate(r.gbs(r.nanotc)))
        if against_copy:
            line.append(_rate(r.percent_copy))
        for peer in peers:
            timing, ratio = r.peers.get(peer), r.ratio(peer)
            rate = r.gbs if against_copy else r.gflops
            line.append("-" if timing is None else _rate(rate(timing)))
            line.append(_ratio(ratio, r.ratio_range(peer) if spread else None))
        lines.append(line)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    left = {0, 1, 2}
    text = [
        "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))
        )
        for line in lines
    ]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def _ratio(ratio: float | None, extent: tuple[float, float] | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" if extent is None else f"{ratio:.2f} ({extent[0]:.2f}-{extent[1]:.2f})"


def peer_order(rows: Sequence[Row]) -> list[str]:
    """Peers present in any row: the usual ones in a fixed order, then any others."""
    found: list[str] = []
    for r in rows:
        found += [p for p in r.peers if p not in found]
    return sorted(found, key=lambda p: PEER_ORDER.index(p) if p in PEER_ORDER else len(PEER_ORDER))


# --- CSV -----------------------------------------------------------------------------------------


@cache
def provenance() -> dict[str, str]:
    """Where the numbers come from: host, CPU, nanotc's git commit, date, load at start."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    try:
        root = Path(__file__).resolve().parent.parent
        commit = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": cpu,
        "cores": str(os.cpu_count() or ""),
        "commit": commit,
        "load": f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "",
    }


def write_csv(rows: Sequence[Row], name: str, directory: Path = RESULTS) -> Path:
    """Write rows to `directory/name-YYYYmmdd-HHMMSS.csv`; seconds, GFLOP/s, GB/s and ratios
    for nanotc and every peer, plus provenance columns."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = directory / f"{name}-{stamp}.csv"
    peers = peer_order(rows)
    columns = ["workload", "variant", "shape", "dtype", "threads", "flops", "bytes", "peak_gflops"]
    columns += ["peak_in_rounds", "nanotc_s", "nanotc_gflops", "nanotc_pct_peak", "nanotc_gbs"]
    columns += ["nanotc_pct_copy", "nanotc_repeats"]
    for p in peers:
        columns += [f"{p}_s", f"{p}_gflops", f"{p}_gbs", f"ratio_{p}", f"ratio_{p}_min"]
        columns += [f"ratio_{p}_max"]
    meta = provenance()
    columns += ["params", "note", *meta]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            record: dict[str, Any] = {
                "workload": r.workload,
                "variant": r.variant,
                "shape": r.shape,
                "dtype": r.dtype,
                "threads": r.threads,
                "flops": r.flops,
                "bytes": r.bytes,
                "peak_gflops": r.peak,
                "peak_in_rounds": r.peak_in_rounds,
                "nanotc_s": r.nanotc.seconds,
                "nanotc_gflops": r.gflops(r.nanotc),
                "nanotc_pct_peak": r.percent_peak,
                "nanotc_gbs": r.gbs(r.nanotc),
                "nanotc_pct_copy": r.percent_copy,
                "nanotc_repeats": r.nanotc.repeats,
                "params": r.params,
                "note": r.note,
                **meta,
            }
            for p, timing in r.peers.items():
                record[f"{p}_s"] = timing.seconds
                record[f"{p}_gflops"] = r.gflops(timing)
                record[f"{p}_gbs"] = r.gbs(timing)
                record[f"ratio_{p}"] = r.ratio(p)
                extent = r.ratio_range(p)
                if extent is not None:
                    record[f"ratio_{p}_min"], record[f"ratio_{p}_max"] = extent
            writer.writerow(record)
    return path


# --- operands ------------------------------------------------------------------------------------


def placed(array: np.ndarray, offset: int) -> np.ndarray:
    """A column-major copy of `array` whose data start `offset` bytes past a cache line.

    Where numpy puts a small array is malloc's choice, 0, 16, 32 or 48 bytes past a line and
    different in every process; a kernel whose C columns then straddle lines runs up to 1.17x
    slower (bf16 8^3 in L2), so a benchmark that compares kernels places their operands."""
    if not 0 <= offset < LINE_BYTES or offset % array.itemsize:
        raise ValueError(f"offset must be a multiple of {array.itemsize} below {LINE_BYTES}, "
                         f"got {offset}")  # fmt: skip
    buffer = empty_aligned(array.nbytes + LINE_BYTES, np.uint8)
    copy = np.ndarray(array.shape, array.dtype, buffer=buffer[offset:], order="F")
    copy[...] = array
    return copy


# --- command line and output ---------------------------------------------------------------------


def parse_list(convert: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    """A `type=` converter of comma-separated items, each by `convert` (which raises
    argparse.ArgumentTypeError saying what it expects); an empty list is refused, not taken
    for the option's default."""

    def parse(text: str) -> tuple[Any, ...]:
        items = [item for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        return tuple(convert(item) for item in items)

    return parse


def choice(names: Sequence[str], what: str) -> Callable[[str], str]:
    """A `type=` converter accepting one of `names` (`what` names one in the error)."""

    def convert(text: str) -> str:
        if text not in names:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r} (choose from {', '.join(names)})"
            )
        return text

    return convert


_dtype = choice(tuple(DTYPES), "dtype")
_peer = choice(peer_names, "peer")


def int_between(low: int, high: int, what: str) -> Callable[[str], int]:
    """A `type=` converter of an integer from `low` to `high` (`what` names one in the error)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high}, got {text!r}")
        return value

    return convert


def thread_count(text: str) -> int:
    """A thread count: from 1 to MAX_THREADS."""
    threads = positive(text)
    if threads > MAX_THREADS:
        raise argparse.ArgumentTypeError(
            f"expected at most {MAX_THREADS} threads (the peers' C drivers' limit), got {threads}"
        )
    return threads


def line_offset(multiple: int) -> Callable[[str], int]:
    """A `type=` converter of the bytes past a cache line where arrays start: a multiple of
    `multiple` (their element size: kernels and BLAS read whole elements) below LINE_BYTES."""

    def convert(text: str) -> int:
        try:
            offset = int(text)
        except ValueError:
            offset = -1
        if not 0 <= offset < LINE_BYTES or offset % multiple:
            expected = f"a multiple of {multiple} below" if multiple > 1 else "0 to"
            last = LINE_BYTES if multiple > 1 else LINE_BYTES - 1
            raise argparse.ArgumentTypeError(f"expected {expected} {last}, got {text!r}")
        return offset

    return convert


def amount(unit: int, name: str) -> Callable[[str], int]:
    """A `type=` converter of a positive number of `name` (`unit` bytes each, e.g. 10**6 for
    MB) into bytes, at most this machine's memory."""

    def convert(text: str) -> int:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"expected a positive number of {name}, got {text!r}")
        nbytes = max(1, int(value * unit))
        check_memory(nbytes, f"{text} {name}")
        return nbytes

    return convert


@cache
def physical_memory() -> int | None:
    """Bytes of this machine's memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(nbytes: int, what: str) -> None:
    """Refuse (argparse.ArgumentTypeError) arrays of `nbytes` that exceed this machine's memory:
    numpy would fail with a MemoryError mid-run, or the system kill the process."""
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise argparse.ArgumentTypeError(
            f"{what} needs {nbytes / 1e9:.3g} GB of arrays, more than this machine's "
            f"{memory / 1e9:.3g} GB of memory"
        )


def add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny sizes, few repetitions")
    parser.add_argument(
        "--threads",
        type=parse_list(thread_count),
        help=f"thread counts, e.g. 1,2 (at most {MAX_THREADS}, as the peers' C drivers)",
    )
    parser.add_argument("--dtypes", type=parse_list(_dtype), help="element types, e.g. f32,f64")
    parser.add_argument("--warmup", type=non_negative, default=1, help="untimed calls (default 1)")
    parser.add_argument("--repeats", type=positive, default=5, help="timed calls (default 5)")
    parser.add_argument(
        "--budget",
        type=seconds,
        default=10.0,
        help="seconds of timed calls per implementation and configuration, pooled over the "
        "interleaved rounds (default 10)",
    )
    parser.add_argument(
        "--peers",
        type=parse_list(_peer),
        default=os.environ.get("NANOTC_BENCH_PEERS") or None,  # parsed and checked as given
        help="peers to compare with: numpy,torch,libxsmm,blis (default: all found; "
        "also NANOTC_BENCH_PEERS)",
    )
    parser.add_argument(
        "--peak",
        type=parse_peaks,
        default=os.environ.get("NANOTC_BENCH_PEAK") or None,  # parsed and checked as given
        help="per-core peaks instead of measuring, e.g. fp32=172,fp64=86, GFLOP/s of "
        f"{', '.join(PRECISIONS)} (or NANOTC_BENCH_PEAK)",
    )
    parser.add_argument("--no-csv", action="store_true", help="do not write bench/results/*.csv")
    parser.add_argument(
        "--spread",
        action="store_true",
        help="print each ratio with its lowest and highest round, e.g. 1.60 (1.33-1.87)",
    )


def settings_from(
    args: argparse.Namespace, threads: Sequence[int], dtypes: Sequence[str]
) -> Settings:
    """Settings from parsed options, with a workload's default thread counts and dtypes."""
    if args.peak:
        override_peaks(args.peak)
    settings = Settings(
        quick=args.quick,
        threads=tuple(args.threads or threads),
        dtypes=tuple(args.dtypes or dtypes),
        warmup=args.warmup,
        repeats=args.repeats,
        budget=args.budget,
        peers=tuple(args.peers) if args.peers else None,
        spread=args.spread,
    )
    return settings.quick_defaults() if settings.quick else settings


def preamble(settings: Settings) -> None:
    """Print where and how the benchmarks run: CPU, commit, measured peaks, machine load."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    meta = provenance()
    peaks = ", ".join(f"{k} {v:.1f}" for k, v in measured_peaks().items())
    given = given_peaks()
    source = " (measured)"
    if given:
        rest = "" if {"fp32", "fp64"} <= given.keys() else "; others measured"
        source = f" (given: {', '.join(given)}{rest})"
    mode = "quick" if settings.quick else "full"
    print(
        f"nanotc benchmarks ({mode}): {meta['cpu']}, {meta['cores']} cores, commit {meta['commit']}"
    )
    print(f"peak per core, GFLOP/s{source}: {peaks}")
    if load > 0.5:
        print(f"warning: load average {load:.2f} at start: other processes compete for the cores")


def report(
    rows: Sequence[Row],
    title: str,
    notes: Sequence[str] = (),
    csv_name: str | None = None,
    directory: Path = RESULTS,
    spread: bool = False,
) -> None:
    """Print a titled table with its notes (`spread`: ratios with their range over the
    rounds); write the CSV (into `directory`) when `csv_name` is given."""
    print(f"\n== {title}")
    print(format_table(rows, peer_order(rows), spread))
    if any(r.peak_in_rounds for r in rows):
        notes = [*notes, PEAK_NOTE]
    for note in [*notes, *dict.fromkeys(r.note for r in rows if r.note)]:
        print(f"note: {note}")
    if csv_name and rows:
        print(f"csv: {write_csv(rows, csv_name, directory)}")
