"""`nanotc compile --emit ...` and `nanotc run ... --check` through the command line, in a
child process as a user runs them (small group sizes, except the README's main command)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fused_kernel.ir"

LOOP_KERNEL = """func @scale(%n: index, %alpha: f64, %x: memref<f64x?>, %y: group<memref<f64x?>>) {
    %g = group_id
    %yg = load %y[%g] : group<memref<f64x?>>
    foreach %i = 0, %n {
        %v = load %x[%i] : memref<f64x?>
        %w = arith.mul %v, %alpha : f64
        store %w, %yg[%i] : memref<f64x?>
    }
    axpby.n %alpha, %x, 1.0, %yg : f64, memref<f64x?>, f64, memref<f64x?>
}"""


def nanotc(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `python -m nanotc` (the installed `nanotc` script runs the same main)."""
    return subprocess.run(
        [sys.executable, "-m", "nanotc", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=os.environ | {"PYTHONHASHSEED": "0"},
    )


def test_readme_run_command_checks_against_the_reference() -> None:
    result = nanotc(
        "run",
        "examples/fused_kernel.ir",
        "--kernel",
        "fused_kernel",
        "--group-size",
        "1000",
        "--size",
        "D.2=1000",
        "--check",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("A", "B", "C", "D"):
        assert any(line.startswith(f"check %{name}: ") and line.endswith(" ok") for line in lines)
    assert "@fused_kernel: 1000 work-groups" in result.stdout and "GFLOP/s" in result.stdout


@pytest.mark.parametrize("target", ["avx2", "generic"])
def test_run_check_on_other_targets_and_two_threads(target: str) -> None:
    result = nanotc(
        "run",
        str(EXAMPLE),
        "--kernel",
        "fused_kernel",
        "--group-size",
        "5",
        "--size",
        "D.2=5",
        "--check",
        "--threads",
        "2",
        "--repeat",
        "1",
        "--target",
        target,
        "--seed",
        "3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count(" ok") == 4 and "MISMATCH" not in result.stdout


def test_run_check_with_integer_parameters_and_dynamic_group_members(tmp_path) -> None:
    path = tmp_path / "scale.ir"
    path.write_text(LOOP_KERNEL)
    result = nanotc(
        "run",
        str(path),
        "--kernel",
        "scale",
        "--group-size",
        "3",
        "--size",
        "n=7",
        "--size",
        "x.0=7",
        "--size",
        "y.0=7",
        "--check",
        "--repeat",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert "check %x: max relative error" in result.stdout
    assert "check %y: max relative error" in result.stdout and "MISMATCH" not in result.stdout


def test_run_reads_standard_input() -> None:
    """... and takes the kernel's name as programs write it too (`@fused_kernel`)."""
    result = nanotc(
        "run",
        "-",
        "--kernel",
        "@fused_kernel",
        "--group-size",
        "2",
        "--size",
        "D.2=2",
        "--check",
        "--repeat",
        "1",
        stdin=EXAMPLE.read_text(),
    )
    assert result.returncode == 0, result.stderr
    assert "MISMATCH" not in result.stdout


def test_run_takes_real_values_of_real_parameters() -> None:
    result = nanotc("run", str(EXAMPLE), "--kernel", "fused_kernel", "--group-size", "2",
                    "--size", "D.2=2", "--size", "alpha=2.5", "--check", "--repeat", "1")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "MISMATCH" not in result.stdout


def test_an_integer_parameter_refuses_a_real_value() -> None:
    text = "func @k(%n: i32, %A: memref<f32x4>) {\n}\n"
    result = nanotc("run", "-", "--kernel", "k", "--group-size", "1", "--size", "n=2.5",
                    stdin=text)  # fmt: skip
    assert result.returncode == 1
    assert "--size n=2.5: %n is an integer parameter" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--group-size", "2"], "--size D.2=VALUE"),
        (["--group-size", "2", "--size", "D.2=x"], "expected NAME=NUMBER"),
        (["--group-size", "2", "--size", "D.2=2.5"], "--size D.2=2.5: a size is an integer"),
        (["--group-size", "2", "--size", "D.2=2", "--size", "Q.0=1"], "Q.0"),
        (["--group-size", "2", "--size", "D.2=2", "--target", "sparc"], "unknown target"),
        (["--group-size", "2", "--size", "D.2=-2"], "--size D.2=-2: a size cannot be negative"),
        (["--group-size", "2", "--size", "D.2=10**15"], "expected NAME=NUMBER"),
        (["--group-size", "2", "--size", "D.2=1000000000000"], "%D: its random array does not"),
        (["--group-size", str(2**62), "--size", "D.2=5"], "%A: its random array does not"),
        (["--group-size", "2", "--size", f"D.2={2**62}"], "%D: its random array does not"),
        # a batch of fewer members than work-groups is refused before any code runs
        (["--group-size", "10", "--size", "D.2=5"], "expected at least 10 elements in mode 2"),
        (["--group-size", "2", "--size", "D.2=2", "--size", "%D.2=3"], "D.2 is given twice"),
    ],
    ids=[
        "missing size",
        "bad size",
        "real size",
        "unknown size",
        "unknown target",
        "negative size",
        "expression",
        "too large",
        "huge group size",
        "huge size",
        "out of bounds",
        "given twice",
    ],
)
def test_run_command_line_errors(args: list[str], message: str) -> None:
    result = nanotc("run", str(EXAMPLE), "--kernel", "fused_kernel", *args)
    assert result.returncode == 1
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--repeat", "0"], "argument --repeat: expected at least 1, got 0"),
        (["--threads", "0"], "argument --threads: expected at least 1, got 0"),
        (["--seed", "-1"], "argument --seed: expected at least 0, got -1"),
        (["--seed", "x"], "argument --seed: expected an integer, got 'x'"),
    ],
)
def test_run_options_out_of_range_are_named(option: list[str], message: str) -> None:
    args = ["--kernel", "fused_kernel", "--size", "D.2=2", *option]
    result = nanotc("run", str(EXAMPLE), "--group-size", "2", *args)
    assert result.returncode == 2  # an option argparse refuses, as documented
    assert message in result.stderr
    result = nanotc("run", str(EXAMPLE), "--group-size", "-1", *args[:4])
    assert "argument --group-size: expected at least 0, got -1" in result.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [("200", "--size n=200: argument %n: expected an integer (i8) in [-128, 127], got 200"),
     ("-129", "in [-128, 127], got -129"),
     ("2", "@k: 1 work-groups")],
)  # fmt: skip
def test_run_integer_scalars_must_fit_their_type(tmp_path, value: str, message: str) -> None:
    path = tmp_path / "k.ir"
    path.write_text("func @k(%n: i8) {\n}\n")
    result = nanotc("run", str(path), "--kernel", "k", "--group-size", "1", "--size", f"n={value}")
    assert message in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_run_check_counts_nan_and_infinities_both_sides_agree_on(tmp_path) -> None:
    path = tmp_path / "k.ir"
    path.write_text("""func @k(%A: memref<f32x?>) {
    %g = group_id
    %v = load %A[%g] : memref<f32x?>
    %zero = arith.sub %v, %v : f32
    %nan = arith.div %zero, %zero : f32
    %inf = arith.div %v, %zero : f32
    %sum = arith.add %nan, %inf : f32
    store %inf, %A[%g] : memref<f32x?>
}""")
    args = ["--kernel", "k", "--group-size", "4", "--size", "A.0=4", "--check", "--repeat", "1"]
    result = nanotc("run", str(path), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check %A: max relative error 0.00e+00 ok" in result.stdout


def test_run_file_that_is_not_utf8_names_the_place(tmp_path) -> None:
    path = tmp_path / "bad.ir"
    path.write_bytes(b"func @k() {\n  \xff\n}\n")
    result = nanotc("check", str(path))
    assert result.returncode == 1
    assert f"nanotc check: {path}:2.3: not UTF-8 text (byte 0xff)" in result.stderr


def test_run_invalid_program_reports_its_location(tmp_path) -> None:
    path = tmp_path / "bad.ir"
    path.write_text("func @k(%a: f32) {\n    %b = arith.add %a, %c : f32\n}\n")
    result = nanotc("run", str(path), "--kernel", "k", "--group-size", "1")
    assert result.returncode == 1
    assert f"{path}:2." in result.stderr and "Undefined identifier %c" in result.stderr


EMITS = {
    "ir": lambda out: "func @fused_kernel(" in out and "gemm.n.t" in out,
    "llvm": lambda out: "define" in out and "@fused_kernel__packed" in out,
    "llvm-raw": lambda out: 'define i32 @"fused_kernel"(' in out and "gid.header" in out,
    "asm": lambda out: "fused_kernel:" in out and "vfmadd" in out,
}


def test_compile_emits_every_stage(tmp_path) -> None:
    for emit, looks_right in EMITS.items():
        result = nanotc("compile", str(EXAMPLE), "--emit", emit)
        assert result.returncode == 0, result.stderr
        assert looks_right(result.stdout), f"--emit {emit}:\n{result.stdout[:500]}"
    obj = tmp_path / "kernel.o"
    result = nanotc("compile", str(EXAMPLE), "--emit", "obj", "-o", str(obj), "--target", "avx2")
    assert result.returncode == 0, result.stderr
    data = obj.read_bytes()
    assert data[:4] == b"\x7fELF" and b"fused_kernel__packed" in data


def test_compile_refuses_to_write_an_object_file_to_a_terminal() -> None:
    main, terminal = os.openpty()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "nanotc", "compile", str(EXAMPLE), "--emit", "obj"],
            stdout=terminal,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(terminal)
        os.close(main)
    assert result.returncode == 1
    assert "--emit obj writes a binary file, not to a terminal: -o KERNEL.o" in result.stderr


def test_compile_for_each_target_uses_its_registers() -> None:
    for target, wide, absent in [("avx2", "%ymm", "%zmm"), ("generic", "%xmm", "%ymm")]:
        result = nanotc("compile", str(EXAMPLE), "--emit", "asm", "--target", target)
        assert result.returncode == 0, result.stderr
        assert wide in result.stdout and absent not in result.stdout


STRIDED_KERNEL = """func @k(%A: group<memref<f32x5x4,strided<1,7>>>,
          %B: memref<f32x4x3,strided<1,6>>,
          %C: group<memref<f32x5x3,strided<2,11>>>) {
    %g = group_id
    %a = load %A[%g] : group<memref<f32x5x4,strided<1,7>>>
    %c = load %C[%g] : group<memref<f32x5x3,strided<2,11>>>
    gemm.n.n 1.0, %a, %B, 1.0, %c
        : f32, memref<f32x5x4,strided<1,7>>, memref<f32x4x3,strided<1,6>>, f32,
          memref<f32x5x3,strided<2,11>>
}"""


def test_run_makes_arrays_with_the_static_strides_of_their_types(tmp_path) -> None:
    """Padded and interleaved static layouts, for single memrefs and groups; the
    check runs the reference on copies that keep those layouts."""
    path = tmp_path / "k.ir"
    path.write_text(STRIDED_KERNEL)
    args = ["--kernel", "k", "--group-size", "6", "--check", "--repeat", "1"]
    result = nanotc("run", str(path), *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check %C: max relative error" in result.stdout and "MISMATCH" not in result.stdout


STATIC_OFFSET = """func @k(%g: group<memref<f32x4>, offset: 3>, %y: memref<f32x4x?>) {
    %gid = group_id
    %member = load %g[%gid] : group<memref<f32x4>, offset: 3>
    %first = load %member[0] : memref<f32x4>
    store %first, %y[0, %gid] : memref<f32x4x?>
}"""


def test_run_leaves_room_for_a_static_group_offset() -> None:
    """The last member is seen 3 elements past its start: the random batch `run` makes must
    reach that far, or its own argument check refuses it."""
    args = ["--kernel", "k", "--group-size", "4", "--size", "y.1=4", "--check", "--repeat", "1"]
    result = nanotc("run", "-", *args, stdin=STATIC_OFFSET)
    assert result.returncode == 0, result.stderr
    assert "check %y: max relative error 0.00e+00 ok" in result.stdout


def test_check_allows_f64_outputs_the_rounding_of_f32_values_that_feed_them() -> None:
    """blas.ir's f64 %yd sums an f32 vector that native code and the reference evaluator round
    an ulp apart: the tolerance is the least precise float's of the kernel."""
    sizes = ["Dyn.0=8", "Dyn.1=8", "Out.0=8", "Out.1=8", "dv.0=4"]
    args = ["--kernel", "blas", "--group-size", "4", "--threads", "1", "--seed", "1"]
    args += [item for size in sizes for item in ("--size", size)] + ["--check", "--repeat", "1"]
    result = nanotc("run", "tests/ir/valid/blas.ir", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "MISMATCH" not in result.stdout and "check %yd: " in result.stdout


@pytest.mark.parametrize(
    ("element", "tolerance"), [("f64", 1e-10), ("f32", 1e-4), ("f16", 2e-3), ("bf16", 1e-2)]
)
def test_check_tolerance_follows_the_least_precise_float(element: str, tolerance: float) -> None:
    from nanotc.check import load
    from nanotc.cli.run import check_tolerance

    text = f"""func @k(%x: memref<f64x4>, %y: memref<f64x4>) {{
    %v = load %x[0] : memref<f64x4>
    %narrow = cast %v : f64 -> {element}
    %wide = cast %narrow : {element} -> f64
    store %wide, %y[0] : memref<f64x4>
}}"""
    assert check_tolerance(load(text).function("k")) == tolerance
