"""Ahead-of-time use from C: the header declaring a program's kernels, and shared libraries.

`c_header(program)` declares, for every kernel, the two entry points of the calling
convention (`nanotc.codegen.abi`, docs/calling-convention.md) and three helpers:

    typedef struct NAME_args { ... } NAME_args;           one field per native argument
    static inline int32_t NAME_run(const NAME_args *, int64_t begin, int64_t end, int64_t size);
    static inline int32_t NAME_launch(const NAME_args *, int64_t group_size, int64_t chunk);

`NAME_run` runs one range of work-groups (give each thread of your own pool a range);
`NAME_launch` runs all of them, `chunk` at a time, in parallel when the including file is
compiled with OpenMP (`-fopenmp`), else in order on the calling thread; for AMX targets it
first asks Linux for the tile state (`nanotc_request_amx`). C types follow the
native types of `codegen.llvm.types.abi_type`: `i1` is `uint8_t`, f16 and bf16 scalars and data
are `uint16_t` bit patterns (a `half` at the interface would be `_Float16`).

`link_shared(object)` turns the position-independent object into a shared library's bytes with
the system C compiler (`$CC`, else `cc` or `gcc`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from llvmlite import ir

from nanotc.codegen import abi
from nanotc.codegen.llvm.types import abi_type
from nanotc.ir.core import Function, Program
from nanotc.ir.types import GroupType, MemRefType, ScalarType


class AotError(ValueError):
    """A program that cannot be declared in C, or a shared library that cannot be linked."""


_MEMORY_C_TYPES = {
    ScalarType.I1: "uint8_t",
    ScalarType.I8: "int8_t",
    ScalarType.I16: "int16_t",
    ScalarType.I32: "int32_t",
    ScalarType.I64: "int64_t",
    ScalarType.INDEX: "int64_t",
    ScalarType.F16: "uint16_t",
    ScalarType.BF16: "uint16_t",
    ScalarType.F32: "float",
    ScalarType.F64: "double",
}

_C_KEYWORDS = (
    "auto break case char const continue default do double else enum extern float for goto "
    "if inline int long register restrict return short signed sizeof static struct switch "
    "typedef union unsigned void volatile while _Bool _Complex _Imaginary bool true false "
    "alignas alignof nullptr static_assert thread_local typeof main"
)
# the header has an extern "C" block for C++ includers (`std`: their standard headers' namespace)
_CPP_KEYWORDS = (
    "and and_eq asm bitand bitor catch char8_t char16_t char32_t class co_await co_return "
    "co_yield compl concept const_cast consteval constexpr constinit decltype delete "
    "dynamic_cast explicit export friend mutable namespace new noexcept not not_eq operator or "
    "or_eq private protected public reinterpret_cast requires static_cast template this throw "
    "try typeid typename using virtual wchar_t xor xor_eq std"
)


def _c_library_names() -> tuple[frozenset[str], frozenset[str]]:
    """The functions, and the other names (macros, typedefs, objects, enumeration constants),
    that the C library's headers a caller plausibly includes take (`c_library_names.txt`,
    written by scripts/c_library_names.py from glibc's headers with _GNU_SOURCE)."""
    text = resources.files(__package__).joinpath("c_library_names.txt").read_text()
    sections: dict[str, set[str]] = {}
    current: set[str] = set()
    for line in text.splitlines():
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), set())
        elif line and not line.startswith("#"):
            current.add(line)
    return frozenset(sections["functions"]), frozenset(sections["names"])


# a kernel named after a library function would replace it in the whole program (its symbol
# interposes the library's), and gcc's built-in or the header's declaration conflicts with it
_C_LIBRARY_FUNCTIONS, _C_LIBRARY_NAMES = _c_library_names()
_RESERVED_C_NAMES = frozenset(
    [*_C_KEYWORDS.split(), *_CPP_KEYWORDS.split(), *_C_LIBRARY_NAMES]
)  # fmt: skip
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LAUNCH_NAMES = frozenset({*abi.LAUNCH_ARGS, "args", "slots", "chunk", "status"})
# NAME_run's parameters: a kernel of one of these names would be hidden where NAME_run calls it
_RUN_PARAMETERS = frozenset({*abi.LAUNCH_ARGS, "args"})


def scalar_c_type(t: ScalarType) -> str:
    """The C type of a scalar argument, from the native type the kernel is emitted with."""
    try:
        native = abi_type(t)
    except (NotImplementedError, KeyError):
        raise AotError(f"scalar parameters of type {t} have no C declaration yet") from None
    if isinstance(native, ir.HalfType):
        return "_Float16"
    if isinstance(native, ir.FloatType):
        return "float"
    if isinstance(native, ir.DoubleType):
        return "double"
    assert isinstance(native, ir.IntType), native
    return _MEMORY_C_TYPES[t]


def _usable(name: str) -> bool:
    """A C identifier no keyword, name of the C library's headers or implementation-reserved
    name (`_X...`, `__...`, or the header guards' NANOTC_ prefix) could break."""
    reserved = name in _RESERVED_C_NAMES or re.match(r"_[A-Z_]|NANOTC_", name)
    return bool(_IDENTIFIER.match(name)) and not reserved


def c_name(kernel: str) -> str:
    """`kernel` if it can be a C function name (the object's symbol is the kernel's name)."""
    if not _IDENTIFIER.match(kernel):
        why = "is not a C identifier"
    elif not _usable(kernel):
        why = (
            "is reserved in C or C++ (a keyword, a macro such as `linux` or `EINVAL`, a type,"
            " object or constant of the C library such as `stdout`, or a reserved prefix)"
        )
    elif kernel in _C_LIBRARY_FUNCTIONS:
        why = (
            "is a function of the C library (or POSIX), which its headers declare otherwise and"
            " whose symbol the kernel's would replace in the whole program"
        )
    elif kernel.startswith("nanotc_"):
        why = "takes the prefix of the header's own functions (nanotc_request_amx)"
    elif kernel in _RUN_PARAMETERS:
        why = "is a parameter of its C helper NAME_run, which calls it"
    else:
        return kernel
    raise AotError(f"kernel @{kernel} cannot be declared in C: its name {why} (rename it)")


def c_header(
    program: Program, guard: str = "NANOTC_KERNELS_H", banner: str = "", amx: bool = False
) -> str:
    """The C header of a program's kernels (see the module docstring). Its include guard is
    `guard` and a digest of the declarations, so that headers of different programs given the
    same file name can be included together. `amx`: the object uses AMX tiles, which a Linux
    process must ask for before its first tile instruction (`nanotc_request_amx`)."""
    _check_global_names(program)
    body = [*(_AMX_REQUEST if amx else [])]
    for func in program.functions:
        body += ["", *_kernel_declarations(func, amx)]
    digest = hashlib.sha256("\n".join(body).encode()).hexdigest()[:12].upper()
    guard = f"{guard}_{digest}"
    lines = [f"/* {line} */" if line else "" for line in banner.splitlines()]
    lines += [
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
        "#include <stdint.h>",
        "",
        "#ifdef __cplusplus",
        'extern "C" {',
        "#endif",
        *body,
        "",
        "#ifdef __cplusplus",
        "}",
        "#endif",
        "",
        f"#endif /* {guard} */",
        "",
    ]
    return "\n".join(lines)


# Linux keeps AMX tile data off for a process until it asks (arch_prctl ARCH_REQ_XCOMP_PERM for
# XFEATURE_XTILEDATA); a tile instruction before that kills it. The system call is made in
# assembly: <unistd.h> declares syscall() only in GNU modes, and differently in C and C++.
_AMX_REQUEST = [
    "",
    "#ifndef NANOTC_REQUEST_AMX",
    "#define NANOTC_REQUEST_AMX",
    "/* Asks Linux for the AMX tile state, which this object's kernels use: 0 once granted (any",
    " * thread of the process may then run them), else nonzero (no AMX on this CPU or kernel).",
    " * NAME_launch asks itself; call it once before calling NAME or NAME_run directly. */",
    "static inline int32_t nanotc_request_amx(void) {",
    "    long result;",
    '    __asm__ volatile("syscall" : "=a"(result) : "0"(158L), "D"(0x1023L), "S"(18L)',
    '                     : "rcx", "r11", "memory");',
    "    return result == 0 ? 0 : 1;",
    "}",
    "#endif",
]


HELPER_SUFFIXES = ("", "__packed", "_args", "_run", "_launch")


def _check_global_names(program: Program) -> None:
    """Each kernel declares its name with HELPER_SUFFIXES: no two kernels may share one."""
    owner: dict[str, str] = {}
    for func in program.functions:
        for suffix in HELPER_SUFFIXES:
            name = c_name(func.name) + suffix
            other = owner.setdefault(name, func.name)
            if other != func.name:
                first, second = sorted((other, func.name), key=len)
                raise AotError(
                    f"kernels @{first} and @{second} cannot be declared in one C header: "
                    f"both would declare {name} (rename one)"
                )


def _kernel_declarations(func: Function, amx: bool) -> list[str]:
    name = c_name(func.name)
    fields = _fields(func)
    launch = ["int64_t group_begin", "int64_t group_end", "int64_t group_size"]
    params = [_declare(ctype, field) for ctype, field, _ in fields]
    signature = ", ".join(f"%{p.name or i}: {p.type}" for i, p in enumerate(func.arguments))
    struct = [f"    {_declare(ctype, field)}; /* {meaning} */" for ctype, field, meaning in fields]
    call = [*(f"args->{field}" for _, field, _ in fields), "group_begin", "group_end", "group_size"]
    return [
        f"/* func @{func.name}({signature}) */",
        *_wrap(f"int32_t {name}(", [*params, *launch], ");"),
        *_wrap(f"int32_t {name}__packed(", ["const uint64_t *slots", *launch], ");"),
        "",
        f"typedef struct {name}_args {{",
        *(struct or ["    char unused_; /* no parameters */"]),
        f"}} {name}_args;",
        "",
        "/* Work-groups group_begin .. group_end-1 of a launch of group_size work-groups, on the",
        " * calling thread. 0, or 1 if scratch memory could not be allocated. */",
        *_wrap(f"static inline int32_t {name}_run(", [f"const {name}_args *args", *launch], ") {"),
        *(["    (void)args;"] if not fields else []),
        *_wrap(f"    return {name}(", call, ");"),
        "}",
        "",
        "/* All work-groups 0 .. group_size-1, `chunk` at a time (chunk <= 0: all at once); the",
        " * chunks run in parallel when compiled with -fopenmp. 0, or 1 if any chunk failed"
        + (", or 2 if Linux refused AMX. */" if amx else ". */"),
        *_wrap(
            f"static inline int32_t {name}_launch(",
            [f"const {name}_args *args", "int64_t group_size", "int64_t chunk"],
            ") {",
        ),
        *(["    if (nanotc_request_amx() != 0) return 2;"] if amx else []),
        "    if (chunk <= 0 || chunk > group_size) chunk = group_size > 0 ? group_size : 1;",
        "    int64_t chunks = group_size / chunk + (group_size % chunk != 0);",
        "    int32_t status = 0;",
        "#ifdef _OPENMP",
        "#pragma omp parallel for schedule(static) reduction(|:status)",
        "#endif",
        "    for (int64_t c = 0; c < chunks; ++c) {",
        "        int64_t left = group_size - c * chunk; /* no sum here can overflow */",
        "        int64_t end = left > chunk ? c * chunk + chunk : group_size;",
        f"        status |= {name}_run(args, c * chunk, end, group_size);",
        "    }",
        "    return status;",
        "}",
    ]


def _declare(ctype: str, name: str) -> str:
    return f"{ctype}{name}" if ctype.endswith("*") else f"{ctype} {name}"


def _wrap(head: str, items: list[str], tail: str, width: int = 100) -> list[str]:
    """`head` items joined by commas, then `tail`; continuation lines align after `head`."""
    lines, current = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else tail)
        if current not in (head, " " * len(head)) and len(current) + 1 + len(piece) > width:
            lines.append(current.rstrip())
            current = " " * len(head)
        current += piece if current.endswith(("(", " ")) else " " + piece
    lines.append(current if items else head + tail)
    return lines


def _fields(func: Function) -> list[tuple[str, str, str]]:
    """(C type, C name, meaning) of every native argument, in order: a parameter whose
    fields' names (`D`, `D_size0`, ...) clash with an earlier one's takes trailing `_`s."""
    bases = _parameter_names(func)
    native = abi.flatten(func)
    while True:
        out = []
        for arg in native:
            param = func.arguments[arg.param]
            label = f"%{param.name or arg.param}"
            out.append(_field(arg, bases[arg.param], param.type, label))
        clash = _first_clash(native, [field for _, field, _ in out])
        if clash is None:
            return out
        bases[clash] += "_"


def _first_clash(native: list[abi.NativeArg], fields: list[str]) -> int | None:
    """The parameter owning the first field whose name an earlier field has."""
    seen: set[str] = set()
    for arg, field in zip(native, fields):
        if field in seen:
            return arg.param
        seen.add(field)
    return None


def _field(arg: abi.NativeArg, base: str, t: object, label: str) -> tuple[str, str, str]:
    slot, mode = arg.slot, arg.mode
    if slot is abi.Slot.SCALAR:
        assert arg.scalar is not None
        return scalar_c_type(arg.scalar), base, label
    memref = t.memref if isinstance(t, GroupType) else t
    assert isinstance(memref, MemRefType)
    element = _MEMORY_C_TYPES[memref.element]
    table: dict[abi.Slot, tuple[str, str, str]] = {
        abi.Slot.DATA: (f"{element} *", base, f"{label}: element (0, ..., 0)"),
        abi.Slot.SHAPE: ("int64_t", f"{base}_size{mode}", f"{label}: size of mode {mode}"),
        abi.Slot.STRIDE: ("int64_t", f"{base}_stride{mode}", f"{label}: stride of mode {mode}"),
        abi.Slot.MEMBERS: (f"{element} **", base, f"{label}: data of each member"),
        abi.Slot.MEMBER_SHAPES: (
            "const int64_t *",
            f"{base}_sizes{mode}",
            f"{label}: size of mode {mode}, per member",
        ),
        abi.Slot.MEMBER_STRIDES: (
            "const int64_t *",
            f"{base}_strides{mode}",
            f"{label}: stride of mode {mode}, per member",
        ),
        abi.Slot.OFFSET: ("int64_t", f"{base}_offset", f"{label}: offset of every member"),
    }
    return table[slot]


def _parameter_names(func: Function) -> list[str]:
    """A C identifier per parameter: its own name when it is one and clashes with nothing."""
    names: list[str] = []
    for index, param in enumerate(func.arguments):
        name = param.name or ""
        if not _usable(name) or name in _LAUNCH_NAMES:
            name = f"arg{index}"
        while name in names:
            name += "_"
        names.append(name)
    return names


def header_guard(path: str | Path) -> str:
    stem = re.sub(r"[^A-Za-z0-9]", "_", Path(path).name).upper()
    return f"NANOTC_{stem}" if stem else "NANOTC_KERNELS_H"


# --- shared libraries -----------------------------------------------------------------------


def c_compiler() -> list[str]:
    """The system C compiler's command: `$CC` when set (its words, as make splits them; an error
    if its program cannot be found, rather than a silent substitute), else `cc`, else `gcc`."""
    try:
        chosen = shlex.split(os.environ.get("CC", ""))
    except ValueError as e:
        raise AotError(f"$CC cannot be split into words: {e}") from None
    if chosen:
        found = shutil.which(chosen[0])
        if found is None:
            raise AotError(f"$CC names {chosen[0]!r}, which is not an executable on PATH")
        return [found, *chosen[1:]]
    for candidate in ("cc", "gcc"):
        found = shutil.which(candidate)
        if found:
            return [found]
    raise AotError("no C compiler found to link a shared library (set $CC, or install gcc)")


def link_shared(object_code: bytes) -> bytes:
    """A shared library linked from a position-independent object, as bytes: the caller
    writes it in place whole (a failed link or write never leaves a partial library)."""
    compiler = c_compiler()
    with tempfile.TemporaryDirectory(prefix="nanotc-link-") as tmp:
        obj, library = Path(tmp) / "kernels.o", Path(tmp) / "kernels.so"
        obj.write_bytes(object_code)
        command = [*compiler, "-shared", "-o", str(library), str(obj), "-lm"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise AotError(f"could not run {compiler[0]}: {e}") from None
        if result.returncode != 0:
            raise AotError(f"linking failed ({' '.join(command)}):\n{result.stderr.strip()}")
        if not library.is_file():
            raise AotError(f"{compiler[0]} reported success but wrote no library")
        return library.read_bytes()
