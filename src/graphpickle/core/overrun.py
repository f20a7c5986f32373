"""Refuse the one kind of malformed pickle that crashes CPython's C unpickler.

The C unpickler (CPython 3.11-3.14) allocates a BYTEARRAY8's bytearray before
it reads the bytes. When the declared length is too large to allocate, the
half-made bytearray is freed with an uninitialized export count: the process
prints ``SystemError: deallocated bytearray object has exported buffers`` or
crashes. Any such length runs past the end of the data, so ``loads`` refuses
the pickle first, with the unpickler's own words for data that ends too soon.

3.15's unpickler reads the bytes in pieces as they come and refuses the data
without allocating: there ``NEEDED`` is false and ``loads`` (the C one too)
skips the check. ``tests/test_overrun.py`` runs plain ``pickle.loads`` on each
overrun in a child under a memory limit, on every Python, and fails if
``NEEDED`` says otherwise than what the unpickler does.

``bytearray8_overruns`` is in C when the extension is built (``_speedups.c``,
the same answer); this Python one is the reference.
"""

from __future__ import annotations

import functools
import pickle
import sys
from typing import Any

from .native import speedups as _speedups

#: Whether the C unpickler needs the check (see above).
NEEDED = sys.version_info < (3, 15)

_BYTEARRAY8 = 0x96
_STOP = ord(".")
_TRUNCATED = "pickle data was truncated"


def _past_end(data: bytes, i: int) -> bool:
    """Whether data[i], read as BYTEARRAY8, declares more bytes than follow
    (and few enough for the unpickler to try to allocate them)."""
    if data[i] != _BYTEARRAY8 or len(data) - i <= 8:
        return False
    # Past sys.maxsize the unpickler raises OverflowError before it allocates.
    return len(data) - i - 9 < int.from_bytes(data[i + 1 : i + 9], "little") <= sys.maxsize


def _bytearray8_overruns_in_python(data: Any) -> bool:
    """Whether the unpickler, reading ``data``, meets a BYTEARRAY8 that declares
    more bytes than the data holds (False for what is not contiguous bytes). A
    scan for the opcode's byte comes first; the opcode walk runs only when one
    could be such an opcode."""
    try:
        raw = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
    except TypeError:
        return False  # not contiguous bytes: the unpickler's own error says so
    i = raw.find(_BYTEARRAY8)
    while i >= 0 and not _past_end(raw, i):
        i = raw.find(_BYTEARRAY8, i + 1)
    if i < 0:
        return False
    position: int | None = 0
    while position is not None and position < len(raw) and raw[position] != _STOP:
        if _past_end(raw, position):
            return True
        position = _skip_opcode(raw, position)
    return False


def _skip_opcode(data: bytes, i: int) -> int | None:
    """The position after the opcode at ``i`` and its argument; ``None`` where
    the unpickler would stop with an error (the data ends, or no opcode)."""
    layout = _argument_layouts().get(data[i])
    if layout is None:
        return None
    i += 1
    if layout == "line" or layout == "line2":
        for _ in range(1 if layout == "line" else 2):
            newline = data.find(b"\n", i)
            if newline < 0:
                return None
            i = newline + 1
        return i
    size, counted, signed = layout
    if not counted:
        return i + size if i + size <= len(data) else None
    if i + size > len(data):
        return None
    length = int.from_bytes(data[i : i + size], "little", signed=signed)
    i += size
    return i + length if 0 <= length <= len(data) - i else None


@functools.cache
def _argument_layouts() -> dict[int, Any]:
    """Each opcode's argument, from pickletools (imported on first need): a
    line, two lines, or (bytes, whether they are a length, whether signed)."""
    import pickletools

    counted = {
        pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
        pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
        pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
        pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
    }
    layouts: dict[int, Any] = {}
    for opcode in pickletools.opcodes:
        argument = opcode.arg
        code = ord(opcode.code)
        if argument is None:
            layouts[code] = (0, False, False)
        elif argument.n >= 0:
            layouts[code] = (argument.n, False, False)
        elif argument.n == pickletools.UP_TO_NEWLINE:
            layouts[code] = "line2" if argument.name == "stringnl_noescape_pair" else "line"
        else:
            size, signed = counted[argument.n]
            layouts[code] = (size, True, signed)
    return layouts


bytearray8_overruns = (
    _bytearray8_overruns_in_python if _speedups is None else _speedups.bytearray8_overruns
)


def refuse_overrun(data: Any) -> None:
    """Raise ``pickle.UnpicklingError`` if ``data`` (bytes-like) holds a
    BYTEARRAY8 the C unpickler must not read; anything else passes."""
    if NEEDED and bytearray8_overruns(data):
        raise pickle.UnpicklingError(_TRUNCATED)
