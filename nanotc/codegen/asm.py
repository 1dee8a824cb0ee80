"""Reading generated x86 assembly: the loops of a function and what their bodies contain.

Used by tests and `nanotc compile --emit asm` users to verify nanokernels: the hot loops
should hold the target's FMA (or dot-product) instructions on full-width registers and no
stack accesses (a vector register spilled inside a K loop costs a store and a load per
iteration).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^(\.?[\w.$]+):")
_JUMP = re.compile(r"^\s+j\w+\s+(\.?[\w.$]+)")
_STACK = re.compile(r"\(%rsp\)")  # %rbp is an ordinary register: no frame pointers
_INDEXED = re.compile(r"\(%\w*,%\w+")  # (base,index[,scale]) or (,index,scale)


@dataclass(frozen=True)
class Loop:
    """The lines from a label to the last jump back to it: a loop with its inner loops."""

    label: str
    start: int  # line index of the label
    end: int  # line index of the last back edge
    instructions: tuple[str, ...]

    def contains(self, other: Loop) -> bool:
        return self.start <= other.start and other.end <= self.end and self != other

    def count(self, mnemonic_prefix: str) -> int:
        return sum(1 for i in self.instructions if i.split()[0].startswith(mnemonic_prefix))

    def stack_accesses(self) -> list[str]:
        return [i for i in self.instructions if _STACK.search(i)]

    def indexed_accesses(self, *mnemonic_prefixes: str) -> list[str]:
        """Instructions of these kinds whose memory operand has an index register."""
        return [
            i
            for i in self.instructions
            if i.split()[0].startswith(mnemonic_prefixes) and _INDEXED.search(i)
        ]

    def registers(self, kind: str) -> set[str]:
        """Registers of one kind (`zmm`, `ymm`, `xmm`) named in the loop."""
        return set(re.findall(rf"%({kind}\d+)", " ".join(self.instructions)))


def function_lines(assembly: str, name: str) -> list[str]:
    """The instruction and label lines of one function (directives and comments dropped)."""
    lines = assembly.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}:"))
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith(".Lfunc_end")), len(lines)
    )
    body = lines[start + 1 : end]
    return [
        x for x in body if _LABEL.match(x) or (x.strip() and not x.lstrip().startswith((".", "#")))
    ]


def loops(assembly: str, function: str) -> list[Loop]:
    """Every loop of a function."""
    lines = function_lines(assembly, function)
    found = []
    for i, line in enumerate(lines):
        m = _LABEL.match(line)
        if not m:
            continue
        back = [j for j in range(i + 1, len(lines)) if _jump_target(lines[j]) == m.group(1)]
        if back:
            body = tuple(x.strip() for x in lines[i + 1 : back[-1] + 1] if not _LABEL.match(x))
            found.append(Loop(m.group(1), i, back[-1], body))
    return found


def _jump_target(line: str) -> str | None:
    m = _JUMP.match(line)
    return m.group(1) if m else None


def hot_loops(assembly: str, function: str, mnemonic: str = "vfmadd") -> list[Loop]:
    """Innermost loops containing `mnemonic`: no loop inside them contains it."""
    with_op = [loop for loop in loops(assembly, function) if loop.count(mnemonic)]
    return [a for a in with_op if not any(a.contains(b) for b in with_op)]
