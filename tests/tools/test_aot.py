"""Ahead-of-time use from C: `nanotc compile --emit obj|shared --header`, then a C program built
with plain gcc against the header and the object (or the shared library) runs the kernels; its
printed results must equal numpy's on the same inputs."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nanotc
from nanotc.codegen.aot import AotError, c_header, scalar_c_type
from nanotc.ir.types import ScalarType

from .cli import nanotc_cli

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="gcc is not installed")

# every kind of native argument: scalars, a group with per-member sizes/strides and a dynamic
# offset, a static memref, a memref with dynamic sizes and strides; two kernels
KERNELS = """\
func @bgemm(%alpha: f32, %A: group<memref<f32x?x4>, offset: ?>, %B: memref<f32x4x3>,
            %C: memref<f32x?x3x?>) {
    %g = group_id
    %a = load %A[%g] : group<memref<f32x?x4>, offset: ?>
    %c = subview %C[:,:,%g] : memref<f32x?x3x?>
    gemm.n.n %alpha, %a, %B, 0.0, %c : f32, memref<f32x?x4>, memref<f32x4x3>, f32, memref<f32x?x3>
}
func @shift(%n: i32, %flag: i1, %x: memref<f64x?>) {
    %g = group_id
    %v = load %x[%g] : memref<f64x?>
    %k = cast %n : i32 -> f64
    %s = arith.add %v, %k : f64
    %t = if %flag -> (f64) { yield %s : f64 } else { yield %v : f64 }
    store %t, %x[%g] : memref<f64x?>
}
"""

M, GROUPS, OFFSET, LD = 5, 3, 2, 7  # member g is a 5x4 view, leading dimension 7, 2 elements in


def inputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (GROUPS, OFFSET + LD * 4)).astype(np.float32)  # flat member buffers
    b = np.asfortranarray(rng.uniform(-1, 1, (4, 3)).astype(np.float32))
    x = rng.uniform(-1, 1, 6)
    return a, b, x


def c_array(name: str, ctype: str, values: np.ndarray) -> str:
    body = ", ".join(repr(float(v)) for v in values.ravel(order="F"))
    return f"static {ctype} {name}[] = {{{body}}};"


def c_program(header: str) -> str:
    a, b, x = inputs()
    return f"""\
#include <stdio.h>
#include "{header}"
{c_array("a_data", "float", a.T)}
{c_array("b_data", "float", b)}
{c_array("x_data", "double", x)}
int main(int argc, char **argv) {{
    /* "chunked": two work-groups a chunk; "whole": one chunk larger than any sum allows */
    int64_t chunk = argc > 1 ? (argv[1][0] == 'w' ? INT64_MAX : 2) : 0;
    float *members[{GROUPS}];
    int64_t sizes[{GROUPS}], strides[{GROUPS}];
    for (int g = 0; g < {GROUPS}; ++g) {{
        members[g] = a_data + g * {OFFSET + LD * 4};
        sizes[g] = {M};
        strides[g] = {LD};
    }}
    static float c_data[{M} * 3 * {GROUPS}];
    bgemm_args args = {{0.5f, members, sizes, strides, {OFFSET}, b_data,
                       c_data, {M}, {GROUPS}, {M}, {M * 3}}};
    if (bgemm_launch(&args, {GROUPS}, chunk) != 0) return 1;
    for (int i = 0; i < {M} * 3 * {GROUPS}; ++i) printf("%.9g\\n", c_data[i]);
    shift_args s = {{3, 1, x_data, 6}};
    if (shift_run(&s, 0, 4, 6) != 0) return 1;  /* a range: work-groups 0..3 only */
    if (shift(-1, 0, x_data, 6, 4, 6, 6) != 0) return 1;  /* the entry itself, flag false */
    for (int i = 0; i < 6; ++i) printf("%.17g\\n", x_data[i]);
    return 0;
}}
"""


def expected() -> np.ndarray:
    a, b, x = inputs()
    out = []
    for g in range(GROUPS):
        member = a[g, OFFSET:].reshape(4, LD).T[:M]  # column-major, leading dimension LD
        out.append(0.5 * member.astype(np.float64) @ b.astype(np.float64))
    c = np.stack(out, axis=2).ravel(order="F")
    x = x.copy()
    x[:4] += 3
    return np.concatenate([c, x])


def build_and_run(
    tmp_path: Path,
    link: list[str],
    extra: list[str] = (),
    mode: str = "",  # type: ignore[assignment]
) -> np.ndarray:
    (tmp_path / "main.c").write_text(c_program("kernels.h"))
    exe = tmp_path / "main"
    cmd = [GCC, "-std=c11", "-O1", "-Wall", "-Werror", *extra, "main.c", *link, "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run(
        [str(exe), *([mode] if mode else ["chunked"] if extra else [])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    return np.array([float(v) for v in ran.stdout.split()])


@pytest.fixture(scope="module")
def aot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("aot")
    (directory / "kernels.ir").write_text(KERNELS)
    for emit, out in (("obj", "kernels.o"), ("shared", "libkernels.so")):
        result = nanotc_cli(
            "compile",
            "kernels.ir",
            "--emit",
            emit,
            "-o",
            out,
            "--header",
            "kernels.h",
            cwd=directory,
        )
        assert result.returncode == 0, result.stderr
    return directory


@needs_gcc
def test_c_program_with_the_object_file(aot_dir: Path) -> None:
    got = build_and_run(aot_dir, ["kernels.o"])
    np.testing.assert_allclose(got, expected(), rtol=1e-6, atol=1e-6)


@needs_gcc
def test_c_program_with_the_shared_library(aot_dir: Path) -> None:
    got = build_and_run(aot_dir, ["-L.", "-lkernels", "-Wl,-rpath,$ORIGIN"])
    np.testing.assert_allclose(got, expected(), rtol=1e-6, atol=1e-6)


@needs_gcc
def test_launch_helper_runs_chunks_in_parallel_with_openmp(aot_dir: Path) -> None:
    probe = subprocess.run(
        [GCC, "-fopenmp", "-x", "c", "-", "-o", str(aot_dir / "probe")],
        input="int main(void){return 0;}",
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip("gcc has no OpenMP here")
    got = build_and_run(aot_dir, ["kernels.o"], ["-fopenmp"])
    np.testing.assert_allclose(got, expected(), rtol=1e-6, atol=1e-6)


@needs_gcc
def test_launch_helper_with_a_chunk_past_every_sum(aot_dir: Path) -> None:
    got = build_and_run(aot_dir, ["kernels.o"], mode="whole")
    np.testing.assert_allclose(got, expected(), rtol=1e-6, atol=1e-6)


def test_shared_library_loads_with_ctypes(aot_dir: Path) -> None:
    lib = ctypes.CDLL(str(aot_dir / "libkernels.so"))
    lib.shift.restype = ctypes.c_int32
    lib.shift.argtypes = [ctypes.c_int32, ctypes.c_uint8, ctypes.c_void_p] + [ctypes.c_int64] * 4
    x = np.arange(5, dtype=np.float64)
    assert lib.shift(10, 1, x.ctypes.data, 5, 1, 3, 5) == 0
    assert x.tolist() == [0, 11, 12, 3, 4]


def test_header_declares_the_calling_convention() -> None:
    header = c_header(nanotc.load(KERNELS), "KERNELS_H")
    assert (
        "int32_t bgemm(float alpha, float **A, const int64_t *A_sizes0, const int64_t *A_strides1,"
        in header
    )
    assert "int64_t A_offset, float *B, float *C, int64_t C_size0, int64_t C_size2," in header
    assert "int32_t shift(int32_t n, uint8_t flag, double *x, int64_t x_size0," in header
    assert "int32_t shift__packed(const uint64_t *slots, int64_t group_begin" in header
    assert header.count("static inline int32_t") == 4  # _run and _launch per kernel
    guard = header.splitlines()[0].removeprefix("#ifndef ")
    assert re.fullmatch("KERNELS_H_[0-9A-F]{12}", guard)
    assert header.rstrip().endswith(f"#endif /* {guard} */")


def test_scalar_c_types_follow_the_native_types() -> None:
    assert scalar_c_type(ScalarType.I1) == "uint8_t"
    assert scalar_c_type(ScalarType.INDEX) == "int64_t"
    assert scalar_c_type(ScalarType.F16) == "uint16_t"  # the 16-bit pattern
    assert scalar_c_type(ScalarType.BF16) == "uint16_t"
    assert scalar_c_type(ScalarType.F64) == "double"


def test_names_that_are_not_c_identifiers_are_refused_or_renamed() -> None:
    with pytest.raises(AotError, match="its name is not a C identifier"):
        c_header(nanotc.load("func @0(%a: f32) {}\n"))
    for reserved in ("int", "int64_t", "new", "NANOTC_K"):
        with pytest.raises(AotError, match=f"@{reserved} cannot be .* is reserved in C or C"):
            c_header(nanotc.load(f"func @{reserved}(%a: f32) {{}}\n"))
    header = c_header(nanotc.load("func @k(%0: f32, %group_size: index, %int: i8) {}\n"))
    assert "int32_t k(float arg0, int64_t arg1, int8_t arg2, int64_t group_begin," in header


CLASHING = """\
func @k(%D: memref<f32x?>, %D_size0: index, %int64_t: f32, %NULL: f32, %INT8_MAX: i8,
        %class: f32, %NANOTC_K_H: f32) {}
"""


@needs_gcc
@pytest.mark.parametrize("language", ["c", "c++"])
def test_header_of_clashing_and_reserved_parameter_names_compiles(tmp_path, language) -> None:
    """A derived field (D_size0) clashing with a parameter, <stdint.h> typedefs and macros, C++
    keywords and the header guards' prefix are all renamed, so the header compiles as C and C++."""
    header = c_header(nanotc.load(CLASHING), "NANOTC_K_H")
    assert (
        "int32_t k(float *D, int64_t D_size0, int64_t D_size0_, float arg2, float arg3," in header
    )
    path = tmp_path / "k.h"
    path.write_text(header)
    compiler = GCC if language == "c" else shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    standard = "-std=c11" if language == "c" else "-std=c++11"
    cmd = [compiler, standard, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", language]
    built = subprocess.run([*cmd, str(path)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr


@pytest.mark.parametrize("other", ["k_args", "k_run", "k_launch"])
def test_kernels_whose_helpers_would_clash_are_refused(other: str) -> None:
    with pytest.raises(AotError, match=f"@k and @{other} cannot .* both would declare {other}"):
        c_header(nanotc.load(f"func @k(%a: f32) {{}}\nfunc @{other}(%a: f32) {{}}\n"))
    with pytest.raises(nanotc.CompileError, match="is the packed entry point of @k"):
        nanotc.load("func @k(%a: f32) {}\nfunc @k__packed(%a: f32) {}\n")  # even without C


@pytest.mark.parametrize("name", ["args", "group_begin", "group_end", "group_size"])
def test_kernels_named_after_a_helpers_parameter_are_refused(name: str) -> None:
    """NAME_run(args, group_begin, ...) calls NAME: a parameter of that name would hide it."""
    with pytest.raises(AotError, match=f"@{name} cannot .* is a parameter of its C helper"):
        c_header(nanotc.load(f"func @{name}(%a: f32) {{}}\n"))


def syntax_check(tmp_path: Path, source: str, language: str, *options: str) -> None:
    compiler = GCC if language == "c" else shutil.which("g++")
    if compiler is None:
        pytest.skip(f"no {language} compiler")
    (tmp_path / "main.c").write_text(source)
    cmd = [compiler, *options, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-x", language]
    built = subprocess.run([*cmd, "main.c"], capture_output=True, text=True, cwd=tmp_path)
    assert built.returncode == 0, built.stderr


@needs_gcc
@pytest.mark.parametrize("language", ["c", "c++"])
def test_names_gcc_predefines_as_macros_are_renamed_or_refused(tmp_path, language) -> None:
    """gcc's GNU modes (its default) define `linux` and `unix` as 1: a parameter so named is
    renamed, as are names common headers define as macros (`I`, `EOF`, `errno`) and the C
    library's objects and macros (`stdout`, `BUFSIZ`, `M_PI`, `isnan`, `INT_MAX`)."""
    library = ["stdout", "BUFSIZ", "RAND_MAX", "M_PI", "NAN", "isnan", "INT_MAX", "FLT_MAX"]
    names = ["unix", "linux", "I", "EOF", "errno", *library]
    text = f"func @k({', '.join(f'%{n}: f32' for n in names)}) {{}}\n"
    (tmp_path / "k.h").write_text(c_header(nanotc.load(text)))
    includes = "#include <complex.h>\n#include <errno.h>\n" if language == "c" else ""
    headers = ["stdio.h", "stdlib.h", "math.h", "limits.h", "float.h"]
    includes += "".join(f"#include <{h}>\n" for h in headers)
    syntax_check(tmp_path, includes + '#include "k.h"\n', language)
    for name in ("linux", *library):
        with pytest.raises(AotError, match=f"@{name} cannot be declared"):
            c_header(nanotc.load(f"func @{name}(%a: f32) {{}}\n"))


@needs_gcc
def test_headers_of_two_programs_with_one_file_name_include_together(tmp_path: Path) -> None:
    """The guard carries a digest of the declarations: a.h and A.h, or two kernel.h in two
    directories, do not hide each other; the same header included twice still does."""
    for directory, kernel in (("one", "ka"), ("two", "kb")):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "k.ir").write_text(f"func @{kernel}(%x: f32) {{}}\n")
        result = nanotc_cli("compile", "k.ir", "--header", "kernel.h", "--emit", "obj",
                            "-o", "k.o", cwd=tmp_path / directory)  # fmt: skip
        assert result.returncode == 0, result.stderr
    source = """#include "one/kernel.h"
#include "two/kernel.h"
#include "one/kernel.h"
int main(void) { ka_args a = {1.0f}; kb_args b = {2.0f}; return ka_run(&a, 0, 1, 1) | kb_run(&b, 0, 1, 1); }
"""
    syntax_check(tmp_path, source, "c", "-std=c99", "-pedantic")


@needs_gcc
@pytest.mark.parametrize("language", ["c", "c++"])
def test_amx_objects_ask_linux_for_the_tile_state(tmp_path: Path, language: str) -> None:
    """Linux kills a process at its first AMX instruction unless it asked for the tile state:
    NAME_launch of an AMX target asks first, and returns 2 where AMX is refused (here: a host
    without it) instead of dying; on an AMX host the kernel runs."""
    (tmp_path / "k.ir").write_text(
        "func @k(%A: memref<bf16x32x32>, %B: memref<bf16x32x32>, %C: memref<f32x32x32>) {\n"
        "    gemm.n.n 1.0, %A, %B, 0.0, %C : f32, memref<bf16x32x32>, memref<bf16x32x32>, f32,"
        " memref<f32x32x32>\n}\n"
    )
    result = nanotc_cli("compile", "k.ir", "--target", "amx", "--emit", "obj", "-o", "k.o",
                        "--header", "k.h", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (tmp_path / "main.c").write_text("""#include <stdio.h>
#include "k.h"
int main(void) {
    static uint16_t a[32 * 32], b[32 * 32];
    static float c[32 * 32];
    for (int i = 0; i < 32 * 32; ++i) a[i] = b[i] = 0x3f80; /* bf16 1.0 */
    k_args args = {a, b, c};
    int status = (int)k_launch(&args, 1, 0); /* before c[0] is read: C leaves the order of
                                                a call's arguments unspecified */
    printf("%d %g\\n", status, (double)c[0]);
    return 0;
}
""")
    compiler = GCC if language == "c" else shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ is not installed")
    cmd = [compiler, "-x", language, "-Wall", "-Werror", "main.c", "-x", "none", "k.o", "-o", "m"]
    built = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert built.returncode == 0, built.stderr
    ran = subprocess.run(["./m"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert ran.returncode == 0, ran.stderr
    expected = "0 32" if nanotc.targets.get(None).amx else "2 0"
    assert ran.stdout.split() == expected.split()


def test_header_in_a_missing_directory_fails_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "k.ir").write_text(KERNELS)
    args = ["--emit", "obj", "-o", "k.o", "--header", "no/k.h"]
    result = nanotc_cli("compile", "k.ir", *args, cwd=tmp_path)
    assert result.returncode == 1 and "--header no/k.h: no such directory" in result.stderr
    assert not (tmp_path / "k.o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "k.o", "--header", "./k.o"], "--header ./k.o is the output file too"),
        (["-o", "k.o", "--dump-dir", "k.ir"], "--dump-dir k.ir: not a directory"),
        (["-o", "k.o", "--dump-dir", "k.ir/stages"], "--dump-dir k.ir/stages: Not a directory"),
    ],
)
def test_output_places_that_cannot_work_fail_before_anything_is_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """The header once overwrote the object it was named after; a --dump-dir that is a file
    failed only after the output was written."""
    (tmp_path / "k.ir").write_text(KERNELS)
    result = nanotc_cli("compile", "k.ir", "--emit", "obj", *args, cwd=tmp_path)
    assert result.returncode == 1 and message in result.stderr
    assert not (tmp_path / "k.o").exists() and (tmp_path / "k.ir").read_text() == KERNELS


def test_shared_without_output_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "k.ir").write_text(KERNELS)
    result = nanotc_cli("compile", "k.ir", "--emit", "shared", cwd=tmp_path)
    assert result.returncode == 1 and "needs an output file" in result.stderr
    assert "Traceback" not in result.stderr


def _compile_shared(cwd: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "k.ir").write_text(KERNELS)
    return subprocess.run(
        [sys.executable, "-m", "nanotc", "compile", "k.ir", "--emit", "shared", "-o", "k.so"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def test_missing_c_compiler_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # neither cc nor gcc
    result = _compile_shared(tmp_path)
    assert result.returncode == 1 and "no C compiler found" in result.stderr
    assert "Traceback" not in result.stderr


def test_cc_naming_a_missing_compiler_is_an_error_not_a_substitute(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("CC", "no-such-compiler -O2")  # while cc and gcc are on PATH
    result = _compile_shared(tmp_path)
    assert result.returncode == 1
    assert "$CC names 'no-such-compiler'" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "k.so").exists()


def test_a_compiler_that_writes_no_library_is_an_error(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "k.so").write_bytes(b"an older library")
    monkeypatch.setenv("CC", "true")  # succeeds, writes nothing
    result = _compile_shared(tmp_path)
    assert result.returncode == 1 and "reported success but wrote no library" in result.stderr
    assert (tmp_path / "k.so").read_bytes() == b"an older library"


def test_a_write_that_fails_leaves_the_older_output_whole(tmp_path: Path) -> None:
    """A file size limit (as a full disk) stops the write: the error names the file, and the
    object file from before stays as it was, with no temporary file beside it."""
    import resource

    (tmp_path / "k.ir").write_text(KERNELS)
    assert nanotc_cli("compile", "k.ir", "--emit", "obj", "-o", "k.o", cwd=tmp_path).returncode == 0
    before = (tmp_path / "k.o").read_bytes()
    assert len(before) > 2048

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    result = subprocess.run(
        [sys.executable, "-m", "nanotc", "compile", "k.ir", "--emit", "asm", "-o", "k.o"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, preexec_fn=limit_file_size,
    )  # fmt: skip
    assert result.returncode == 1 and "nanotc compile: k.o: File too large" in result.stderr
    assert (tmp_path / "k.o").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.ir", "k.o"]


def test_outputs_keep_their_mode_and_devices_are_written_to(tmp_path: Path) -> None:
    (tmp_path / "k.ir").write_text(KERNELS)
    (tmp_path / "k.s").write_text("")
    (tmp_path / "k.s").chmod(0o640)
    assert nanotc_cli("compile", "k.ir", "-o", "k.s", cwd=tmp_path).returncode == 0
    assert (tmp_path / "k.s").stat().st_mode & 0o777 == 0o640
    assert "bgemm:" in (tmp_path / "k.s").read_text()
    assert nanotc_cli("compile", "k.ir", "-o", "/dev/null", cwd=tmp_path).returncode == 0
    assert Path("/dev/null").is_char_device()


def test_cc_with_options_links(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CC", "gcc -Wl,-soname,libnamed_by_cc.so")  # the option must reach gcc
    result = _compile_shared(tmp_path)
    assert result.returncode == 0, result.stderr
    assert b"libnamed_by_cc.so" in (tmp_path / "k.so").read_bytes()


@needs_gcc
@pytest.mark.parametrize("language", ["c", "c++"])
def test_kernels_named_after_c_library_functions_are_refused(tmp_path, language) -> None:
    """gcc has most of the C library's functions built in (and its headers declare them): a
    kernel declared as `int32_t printf(float)` breaks every program that includes the header,
    and its symbol would replace the library's. Parameters may take those names."""
    functions = ["printf", "puts", "exit", "malloc", "sqrt", "sqrtf", "fabsl", "strlen", "qsort"]
    for name in [*functions, "va_list", "nanotc_request_amx"]:
        with pytest.raises(AotError, match=f"@{name} cannot be declared in C"):
            c_header(nanotc.load(f"func @{name}(%a: f32) {{}}\n"))
    text = f"func @k({', '.join(f'%{n}: f32' for n in functions)}, %va_list: f32) {{}}\n"
    header = c_header(nanotc.load(text))
    assert "int32_t k(float printf, float puts," in header
    (tmp_path / "k.h").write_text(header)
    headers = ["stdio.h", "stdlib.h", "string.h", "math.h", "stdarg.h"]
    includes = "".join(f"#include <{h}>\n" for h in headers)
    syntax_check(tmp_path, includes + '#include "k.h"\n', language)


POSIX_AND_GNU_FUNCTIONS = ["write", "read", "close", "select", "sleep", "kill", "random",
                           "getline", "y0", "j1", "gamma", "finite", "significand"]  # fmt: skip
# macros, typedefs and constants of <float.h>, <errno.h>, <time.h>, <signal.h>, <limits.h> and
# <stdlib.h> that the hand-kept lists before c_library_names.txt let through
LIBRARY_NAMES = ["FLT_TRUE_MIN", "DBL_DECIMAL_DIG", "LDBL_MAX", "EINVAL", "ENOMEM",
                 "CLOCKS_PER_SEC", "SIGINT", "PATH_MAX", "lldiv_t", "greg_t"]  # fmt: skip


@needs_gcc
@pytest.mark.parametrize(
    ("language", "standard"), [("c", "-std=c11"), ("c", "-std=gnu17"), ("c++", "-std=c++17")]
)
def test_names_of_posix_and_gnu_headers_are_refused_or_renamed(
    tmp_path: Path, language: str, standard: str
) -> None:
    """A kernel @write replaced the C library's write() in the whole program (a shared
    library's write printed nothing); @y0 clashed with <math.h> in gcc's default mode and
    with its built-in under -Werror; @std broke the header beside any C++ standard header.
    Parameters named after the headers' macros and typedefs broke it after their headers;
    now they are renamed. Both lists come from scripts/c_library_names.py."""
    for name in [*POSIX_AND_GNU_FUNCTIONS, *LIBRARY_NAMES, "std"]:
        with pytest.raises(AotError, match=f"@{name} cannot be declared in C"):
            c_header(nanotc.load(f"func @{name}(%a: f32) {{}}\n"))
    text = f"func @k({', '.join(f'%{n}: f32' for n in LIBRARY_NAMES)}) {{}}\n"
    (tmp_path / "k.h").write_text(c_header(nanotc.load(text)))
    headers = ["stdio.h", "stdlib.h", "math.h", "float.h", "errno.h", "time.h", "signal.h"]
    headers += ["limits.h", "unistd.h", "pthread.h"]
    includes = "".join(f"#include <{h}>\n" for h in headers)
    if language == "c++":
        includes += "#include <vector>\n"
    syntax_check(tmp_path, includes + '#include "k.h"\n', language, standard)
