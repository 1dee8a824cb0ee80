"""Permission to use AMX tiles in this process.

Linux keeps the AMX tile data state off until a process asks for it with
`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`; an AMX instruction before that kills
the process. The request is made once, before the first AMX kernel runs, and covers every
thread of the process.
"""

from __future__ import annotations

import ctypes
import platform
import threading

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

_lock = threading.Lock()
_enabled = False


class AmxUnavailable(RuntimeError):
    """The operating system refused AMX to this process."""


def enable() -> None:
    """Ask the kernel for the AMX tile state (idempotent); raise AmxUnavailable if refused."""
    global _enabled
    with _lock:
        if _enabled:
            return
        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
            raise AmxUnavailable("AMX kernels run only on Linux x86-64 here")
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) != 0:
            errno = ctypes.get_errno()
            raise AmxUnavailable(f"the kernel refused the AMX tile state (errno {errno})")
        _enabled = True


def available() -> bool:
    """Whether this process may run AMX instructions (asking for the permission if needed)."""
    try:
        enable()
    except AmxUnavailable:
        return False
    return True
