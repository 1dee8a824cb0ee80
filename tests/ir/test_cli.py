"""`nanotc check` and `nanotc dump` as a user runs them (`python -m nanotc`): exit codes,
stdout, and diagnostics on stderr named after the file or `<stdin>`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .irfiles import EXAMPLES, INVALID, ROOT

VALID_TEXT = "func @f(%a: f32) {\n    %b = arith.add %a, 1.0 : f32\n}\n"
INVALID_TEXT = "func @f(%a: f32) {\n    %b = arith.not %a : f32\n}\n"
INVALID_MESSAGE = (
    "2.10-27: Floating point type unsupported for instruction\n"
    "    %b = arith.not %a : f32\n"
    "         ~~~~~~~~~~~~~~~~~~\n"
)


def nanotc(*args: str, stdin: str = "", cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "nanotc", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_check_accepts_valid_file() -> None:
    result = nanotc("check", str(EXAMPLES / "fused_kernel.ir"))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_check_rejects_invalid_file_with_located_message(tmp_path: Path) -> None:
    path = tmp_path / "bad.ir"
    path.write_text(INVALID_TEXT)
    result = nanotc("check", "bad.ir", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == "bad.ir:" + INVALID_MESSAGE


def test_check_reads_stdin_as_stdin() -> None:
    ok = nanotc("check", "-", stdin=VALID_TEXT)
    assert (ok.returncode, ok.stderr) == (0, "")
    bad = nanotc("check", "-", stdin=INVALID_TEXT)
    assert (bad.returncode, bad.stderr) == (1, "<stdin>:" + INVALID_MESSAGE)


def test_check_reports_every_error_of_a_file() -> None:
    path = INVALID / "several_errors.ir"
    result = nanotc("check", str(path))
    assert result.returncode == 1
    headers = [line for line in result.stderr.splitlines() if line.startswith(str(path) + ":")]
    assert len(headers) == 6


def test_dump_prints_canonical_text_of_stdin() -> None:
    source = (
        "func @f(%a:memref<f32x4,strided<1>>)  {\n hadamard_product 1.0,%a,%a,0.0,%a\n"
        " :f32,memref<f32x4>,memref<f32x4>,f32,memref<f32x4> }"
    )
    result = nanotc("dump", "-", stdin=source)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == (
        "func @f(%a: memref<f32x4>) {\n"
        "    hadamard 1.0, %a, %a, 0.0, %a"
        " : f32, memref<f32x4>, memref<f32x4>, f32, memref<f32x4>\n"
        "}\n"
    )


@pytest.mark.parametrize("command", ["check", "dump"])
def test_missing_file_is_an_error(command: str, tmp_path: Path) -> None:
    result = nanotc(command, str(tmp_path / "missing.ir"))
    assert result.returncode == 1
    assert "missing.ir" in result.stderr
    assert "Traceback" not in result.stderr
