"""`nanotc tune`, `nanotc bench`, `nanotc peak` and `nanotc cache`.

`bench` and `peak` run the benchmark suite of the source tree (`bench/`, next to the `nanotc`
package; it is not installed with nanotc), so they work in a checkout, where `pip install -e .`
puts them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from nanotc import targets
from nanotc.check import load
from nanotc.cli.compile import UsageError, read_source
from nanotc.cli.options import kernel_name, non_negative, positive, seconds
from nanotc.cli.run import make_arguments, parse_sizes
from nanotc.lowering.choices import GemmChoice
from nanotc.runtime import cache as kernel_cache
from nanotc.tuning import database
from nanotc.tuning.tuner import tune

# --- tune ----------------------------------------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    text, name = read_source(args.file)
    func = load(text, name).function(args.kernel)
    rng = np.random.default_rng(args.seed)
    arguments = make_arguments(func, args.group_size, parse_sizes(args.size), rng)
    result = tune(
        text,
        args.kernel,
        arguments,
        args.group_size,
        target=args.target,
        num_threads=args.threads,
        budget=args.budget,
        tiles=args.tiles,
        repeats=args.repeat,
        store=not args.dry_run,
    )
    for site in result.sites:
        print(f"{site.site.key}: {site.best.describe()}")
    return 0


def add_tune_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "tune",
        help="measure register tiles and block sizes of a kernel's gemms; store the winners",
        description="Time register-tile and blocking candidates of the kernel's gemms on random "
        "data of the given sizes (as `nanotc run` makes it), and store the fastest in the "
        "tuning database, which later compiles for this target use.",
    )
    p.add_argument("file", help="program file, or - for standard input")
    p.add_argument("--kernel", type=kernel_name, required=True, help="name of the function to tune")
    p.add_argument("--group-size", type=non_negative, required=True,
                   help="number of work-groups")  # fmt: skip
    p.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="integer parameter or dynamic size (PARAM.MODE); repeatable")  # fmt: skip
    p.add_argument("--budget", type=seconds, default=20.0, help="seconds of search (default 20)")
    p.add_argument("--tiles", type=positive, default=6,
                   help="register tiles tried per gemm (default 6)")  # fmt: skip
    p.add_argument("--repeat", type=positive, default=5,
                   help="timed samples per candidate (median)")  # fmt: skip
    p.add_argument("--threads", type=positive, default=None,
                   help="worker threads (default: all cores)")  # fmt: skip
    p.add_argument("--seed", type=non_negative, default=0, help="seed of the random inputs")
    p.add_argument("--target", default=None, help="target name (default: host)")
    p.add_argument("--dry-run", action="store_true", help="report the winners without storing")
    p.set_defaults(run=cmd_tune)


# --- bench and peak ------------------------------------------------------------------------


def bench_package(module: str = "bench") -> ModuleType:
    """A module of the repository's `bench` package (importable from a source checkout)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "bench" / "__init__.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == "bench":
            raise UsageError(
                "the benchmark suite (bench/) ships with nanotc's source tree, not with the "
                "installed package: run this from a checkout installed with `pip install -e .`"
            ) from None
        raise


def cmd_bench(arguments: Sequence[str]) -> int:
    """`nanotc bench [PART ...] [OPTION ...]`: the leading words name workloads, the rest are
    options of `python -m bench`, passed on unchanged."""
    runner = bench_package("bench.__main__")
    rest = list(arguments)
    parts = []
    while rest and not rest[0].startswith("-"):
        parts.append(rest.pop(0))
    options = [*rest, *(["--workloads", ",".join(parts)] if parts else [])]
    return int(runner.main(options, prog="nanotc bench"))


def cmd_peak(args: argparse.Namespace) -> int:
    peak = bench_package("bench.peak")
    target = targets.host()
    print(f"host: cpu {target.llvm_cpu}, {target.vector_bits}-bit vectors")
    for name, gflops in peak.peaks(target).items():
        print(f"{name} peak: {gflops:7.1f} GFLOP/s per core")
    return 0


def add_bench_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    b = sub.add_parser(
        "bench",
        help="run the benchmark suite (bench/) against the peers found installed",
        description="Run the workloads of bench/ (all, or those named) against every peer "
        "found (numpy, torch, libxsmm, BLIS, numpy's CBLAS, memcpy): a table of GFLOP/s (GB/s "
        "for W5), %% of this machine's measured peak and the ratio to each peer, a CSV and, "
        "with matplotlib, a PNG chart in "
        "bench/results/. Options after the parts are those of `python -m bench` "
        "(--quick, --threads, --dtypes, --peers, --peak, --repeats, --budget, --no-csv, "
        "--no-chart, ...).",
    )
    b.add_argument(
        "parts",
        nargs="*",
        metavar="PART",
        help="w1, w2, w3, w4, w5, in-cache, layouts (default: all)",
    )
    p = sub.add_parser("peak", help="measure this machine's per-core peak GFLOP/s")
    p.set_defaults(run=cmd_peak)


# --- cache ---------------------------------------------------------------------------------


def cmd_cache(args: argparse.Namespace) -> int:
    store = kernel_cache.KernelCache(kernel_cache.cache_directory())
    if args.action == "dir":
        print(store.directory)
    elif args.action == "clear":
        removed = store.clear()
        tuned = database.forget() if args.tuning else 0
        extra = f" and {tuned} tuning records" if args.tuning else ""
        print(f"removed {removed} cached kernels{extra} from {store.directory}")
    else:
        info = store.info()
        mode = kernel_cache.mode_from_environment()
        print(f"directory: {info.directory}")
        print(f"state: {_state(mode, info.directory)}")
        print(f"entries: {info.entries} ({info.bytes / 2**20:.1f} MiB)")
        records = database.entries(targets.host())
        tuned = {key: r for key, r in records.items() if _usable(r)}
        ignored = len(records) - len(tuned)
        ignoring = f" ({ignored} malformed records, which compiles ignore)" if ignored else ""
        print(f"tuned gemm signatures for this host: {len(tuned)}{ignoring}")
        for key, record in sorted(tuned.items()):
            print(f"  {key}: {record.get('tile')} {record.get('blocking') or ''}".rstrip())
    return 0


def _usable(record: dict[str, object]) -> bool:
    """Whether compiles take a tuning record (`database.options_for` skips the others)."""
    try:
        GemmChoice.from_json(record)
    except ValueError:
        return False
    return True


def _state(mode: str, directory: Path) -> str:
    """The cache's state as compiles will find it: a directory that is a file holds nothing
    (compiled code is then kept in memory only)."""
    if mode == "off":
        return "disabled (NANOTC_CACHE)"
    if mode == "disk" and directory.exists() and not directory.is_dir():
        return f"memory only ({directory} is not a directory)"
    return mode


def add_cache_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    c = sub.add_parser(
        "cache",
        help="show or clear the kernel cache and the tuning database",
        description="The kernel cache keeps compiled kernels on disk ($NANOTC_CACHE_DIR, "
        "default ~/.cache/nanotc; NANOTC_CACHE=0 disables it).",
    )
    c.add_argument("action", nargs="?", choices=["info", "clear", "dir"], default="info")
    c.add_argument(
        "--tuning", action="store_true", help="with clear: forget the tuning results too"
    )
    c.set_defaults(run=cmd_cache)
