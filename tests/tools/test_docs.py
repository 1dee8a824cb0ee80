"""The documentation's examples run: the tutorial's Python blocks in order, and the C program of
the calling convention against an object nanotc compiled. Links between the docs resolve."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def test_tutorial_python_blocks_run(capsys) -> None:
    namespace: dict[str, object] = {"__name__": "tutorial"}
    for number, code in enumerate(blocks(DOCS / "tutorial.md", "python"), 1):
        try:
            exec(compile(code, f"tutorial block {number}", "exec"), namespace)
        except Exception as e:
            pytest.fail(f"tutorial block {number} fails: {e!r}\n{code}")
    assert "[0. 2. 4. 6. 8.]" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_calling_convention_c_example_builds_and_runs(tmp_path: Path) -> None:
    (program,) = [b for b in blocks(DOCS / "calling-convention.md", "c") if "int main" in b]
    (tmp_path / "main.c").write_text(program)
    compiled = subprocess.run(
        [sys.executable, "-m", "nanotc", "compile", str(ROOT / "examples" / "fused_kernel.ir"),
         "--emit", "obj", "-o", "kernel.o", "--header", "kernel.h"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    built = subprocess.run(["gcc", "-O2", "-Wall", "main.c", "kernel.o", "-o", "main"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120)  # fmt: skip
    assert built.returncode == 0, built.stderr
    ran = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "0"  # inputs left at zero


def test_links_between_documents_resolve() -> None:
    for path in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target, section in re.findall(r"\]\(([^)#:]*\.md)?(?:#([^)]*))?\)", path.read_text()):
            linked = (path.parent / target) if target else path
            assert linked.exists(), f"{path.name} links to missing {target}"
            if section:
                assert section in heading_anchors(linked), f"{path.name}: no #{section} in {target}"


def heading_anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub makes them (code blocks skipped)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    headings = re.findall(r"^#+ (.*)$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
