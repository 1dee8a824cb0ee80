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
_VECTOR = re.compile(r"%[xyz]mm\d+")
_INDEXED = re.compile(r"\(%\w*,%\w+")  # (base,index[,scale]) or (,index,scale)
_NO_FALL_THROUGH = ("jmp", "ret", "ud2")  # mnemonics after which the next block is not run
_ENDS_BLOCK = ("j", "ret", "ud2")  # every jump, conditional or not


@dataclass(frozen=True)
class Loop:
    """A natural loop of the control-flow graph: the blocks of its header (`label`) and of
    every path back to it, with its inner loops, wherever the code layout places them."""

    label: str
    blocks: frozenset[int]  # indices of the function's basic blocks
    instructions: tuple[str, ...]  # of its blocks, in the order of the code

    def contains(self, other: Loop) -> bool:
        return other.blocks < self.blocks

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


@dataclass(frozen=True)
class _Block:
    label: str | None
    instructions: tuple[str, ...]
    successors: tuple[int, ...]


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


def vector_stack_accesses(assembly: str, function: str) -> list[str]:
    """The function's instructions that move a vector register to or from the stack: spills
    wherever they are, straight-line kernels (K unrolled completely) included. No vector
    register is callee-saved in the System V ABI, so none is saved in a prologue."""
    return [
        line
        for line in function_lines(assembly, function)
        if _STACK.search(line) and _VECTOR.search(line)
    ]


def loops(assembly: str, function: str) -> list[Loop]:
    """Every loop of a function: one per header, the natural loop of its back edges (jumps
    to a block that dominates the jump). Found on the control-flow graph, not the text, as
    LLVM may place an inner loop's blocks before or after its outer loop's."""
    blocks = _basic_blocks(function_lines(assembly, function))
    predecessors = _predecessors(blocks)
    dominators = _dominators(predecessors)
    bodies: dict[int, set[int]] = {}
    for tail, block in enumerate(blocks):
        for head in block.successors:
            if head in dominators[tail]:
                bodies.setdefault(head, set()).update(_natural_loop(predecessors, tail, head))
    return [
        Loop(
            blocks[head].label or f"<block {head}>",
            frozenset(body),
            tuple(i for b in sorted(body) for i in blocks[b].instructions),
        )
        for head, body in sorted(bodies.items())
    ]


def _basic_blocks(lines: list[str]) -> list[_Block]:
    """The function's basic blocks in code order: each starts at a label or after a jump."""
    pieces: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in lines:
        label = _LABEL.match(line)
        if label:
            pieces.append((label.group(1), []))
            continue
        pieces[-1][1].append(line)
        if line.lstrip().startswith(_ENDS_BLOCK):
            pieces.append((None, []))
    # the entry, labelled blocks and the blocks after conditional jumps
    pieces = [p for i, p in enumerate(pieces) if i == 0 or p[0] is not None or p[1]]
    index = {label: i for i, (label, _) in enumerate(pieces) if label is not None}
    return [
        _Block(label, tuple(x.strip() for x in body), _successors(body, i, len(pieces), index))
        for i, (label, body) in enumerate(pieces)
    ]


def _successors(body: list[str], i: int, count: int, index: dict[str, int]) -> tuple[int, ...]:
    """Where block `i` (of `count`) goes: its jump's target (when a label of the function:
    not for indirect jumps), then the next block unless it ends in jmp, ret or ud2."""
    last = body[-1] if body else ""
    target = _jump_target(last)
    successors = [index[target]] if target in index else []
    if not last.lstrip().startswith(_NO_FALL_THROUGH) and i + 1 < count:
        successors.append(i + 1)
    return tuple(successors)


def _dominators(predecessors: list[list[int]]) -> list[set[int]]:
    """For each block, the blocks on every path to it from the entry (iterated to a fixed
    point; unreachable blocks keep all blocks)."""
    everything = set(range(len(predecessors)))
    dominators = [{0}] + [set(everything) for _ in predecessors[1:]]
    changed = True
    while changed:
        changed = False
        for i in range(1, len(predecessors)):
            incoming = [dominators[p] for p in predecessors[i]]
            new = set.intersection(*incoming) | {i} if incoming else {i}
            if new != dominators[i]:
                dominators[i], changed = new, True
    return dominators


def _natural_loop(predecessors: list[list[int]], tail: int, head: int) -> set[int]:
    """The header and the blocks from which the back edge's `tail` is reached without
    passing through the header."""
    found = {head, tail}
    work = [tail] if tail != head else []
    while work:
        for p in predecessors[work.pop()]:
            if p not in found:
                found.add(p)
                work.append(p)
    return found


def _predecessors(blocks: list[_Block]) -> list[list[int]]:
    predecessors: list[list[int]] = [[] for _ in blocks]
    for i, block in enumerate(blocks):
        for j in block.successors:
            predecessors[j].append(i)
    return predecessors


def _jump_target(line: str) -> str | None:
    m = _JUMP.match(line)
    return m.group(1) if m else None


def hot_loops(assembly: str, function: str, mnemonic: str = "vfmadd") -> list[Loop]:
    """Innermost loops containing `mnemonic`: no loop inside them contains it."""
    with_op = [loop for loop in loops(assembly, function) if loop.count(mnemonic)]
    return [a for a in with_op if not any(a.contains(b) for b in with_op)]
