"""The error the reference evaluator raises when a program does something the language leaves
undefined at run time (an index out of bounds, a view outside the memory it was given, a loop
that would never end), so that the oracle fails loudly instead of reading arbitrary memory."""

from __future__ import annotations

from nanotc.ir.core import Instruction


class EvaluationError(RuntimeError):
    """Undefined behaviour detected while evaluating a program.

    `where` is filled in by the interpreter with the source location, the instruction and the
    work-group id the first time the error passes through it.
    """

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.where: str | None = None

    def locate(self, inst: Instruction, group_id: int) -> None:
        if self.where is None:
            loc = f"{inst.loc}: " if inst.loc is not None else ""
            self.where = f"{loc}{inst.name}, work-group {group_id}"

    def __str__(self) -> str:
        return self.message if self.where is None else f"{self.where}: {self.message}"


def require(condition: bool, message: str) -> None:
    """Raise EvaluationError(message) unless `condition` holds."""
    if not condition:
        raise EvaluationError(message)
