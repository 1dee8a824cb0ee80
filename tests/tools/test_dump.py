"""Every stage of a compile written to a directory: `--dump-dir` on the command line and
`NANOTC_DUMP_DIR` for kernels compiled from Python (cache hits included)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import nanotc
from nanotc.lowering.choices import CompileOptions, GemmChoice
from nanotc.stages import STAGES

from .cli import nanotc_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fused_kernel.ir"

EXPECTED = {
    "00-source.ir": "func @fused_kernel(",
    "01-checked.ir": "gemm.n.t 1.0",
    "02-tiled.ir": "tile.gemm",
    "03-nanokernels.txt": "@fused_kernel: tile.gemm",
    "04-llvm.ll": 'define i32 @"fused_kernel"(',
    "05-llvm-opt.ll": "fused_kernel__packed",
    "06-assembly.s": "fused_kernel:",
}


def check_stages(directory: Path) -> None:
    assert sorted(p.name for p in directory.iterdir() if p.name != "options.json") == sorted(
        name for name, _ in STAGES
    )
    for name, marker in EXPECTED.items():
        assert marker in (directory / name).read_text(), f"{name} lacks {marker!r}"


def test_compile_dump_dir_writes_every_stage(tmp_path: Path) -> None:
    result = nanotc_cli(
        "compile", str(EXAMPLE), "--emit", "obj", "-o", "k.o", "--dump-dir", "stages", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    check_stages(tmp_path / "stages")
    # the source is kept as written (comments included), the checked IR is canonical
    assert (tmp_path / "stages" / "00-source.ir").read_text() == EXAMPLE.read_text()


def test_run_dump_dir(tmp_path: Path) -> None:
    result = nanotc_cli(
        "run",
        str(EXAMPLE),
        "--kernel",
        "fused_kernel",
        "--group-size",
        "2",
        "--size",
        "D.2=2",
        "--repeat",
        "1",
        "--dump-dir",
        "out",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    check_stages(tmp_path / "out")


def test_environment_variable_dumps_python_compiles(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NANOTC_DUMP_DIR", str(tmp_path))
    text = EXAMPLE.read_text()
    nanotc.compile(text)
    hit = nanotc.compile(text)  # from the cache: the stages are computed for the dump
    assert hit.origin == "memory"
    (directory,) = tmp_path.iterdir()
    assert directory.name.startswith("fused_kernel-host-")
    check_stages(directory)
    tuned = CompileOptions.of({"direct f32,f32,f32 n.t 16x8x8 r0": GemmChoice((1, 4))})
    nanotc.compile(text, options=tuned)
    (other,) = [d for d in tmp_path.iterdir() if d != directory]
    choices = json.loads((other / "options.json").read_text())
    assert choices == {"direct f32,f32,f32 n.t 16x8x8 r0": {"tile": [1, 4]}}


@pytest.mark.parametrize("kind", ["a-file", "uncreatable"])
def test_a_dump_directory_that_cannot_be_written_only_warns(
    tmp_path: Path, monkeypatch, kind: str
) -> None:
    """The dump is lost, with a warning naming the variable; the kernel still compiles."""
    target = tmp_path / "file"
    target.write_text("")
    directory = target if kind == "a-file" else target / "below-a-file"
    monkeypatch.setenv("NANOTC_DUMP_DIR", str(directory))
    message = re.escape(f"NANOTC_DUMP_DIR={directory}: stages not written")
    with pytest.warns(RuntimeWarning, match=message):
        compilation = nanotc.compile(EXAMPLE.read_text(), cache=False)
    assert "fused_kernel" in list(compilation)


def test_source_with_undecodable_bytes_compiles_cached_and_dumps_as_it_was(
    tmp_path: Path, monkeypatch
) -> None:
    """Text read with errors="surrogateescape" holds lone surrogates: the kernel cache keys
    it, and the dump writes the original bytes back."""
    raw = EXAMPLE.read_bytes() + b"\n; \xff\n"
    text = raw.decode("utf-8", "surrogateescape")
    monkeypatch.setenv("NANOTC_DUMP_DIR", str(tmp_path))
    nanotc.compile(text)
    assert nanotc.compile(text).origin == "memory"
    (directory,) = tmp_path.iterdir()
    assert (directory / "00-source.ir").read_bytes() == raw
