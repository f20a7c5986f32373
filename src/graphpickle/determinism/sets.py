"""Where a deterministic dump's payload writes sets (stages 1-3 of the
pipeline in ``__init__.py``). In C when ``_sets.c`` (beside this file) is built;
the Python versions are the reference, and tests set ``_sets`` to ``None`` to
run them.
"""

from __future__ import annotations

import pickletools
import types
from collections.abc import Callable
from typing import Any

from .. import _native

#: The VERSION of ``_sets.c`` this file expects.
VERSION = 1
NAMES = ("note_set", "sets_to_sort")


def _import() -> types.ModuleType:
    from . import _sets

    return _sets


_sets = _native.load("determinism", _import, VERSION, NAMES)


def sets_to_sort(data: bytes) -> bool:
    """Whether the pickle writes a set or frozenset of two or more members itself,
    in hash order. Without the C extension: whether it writes any set itself."""
    if _sets is not None:
        return bool(_sets.sets_to_sort(data))
    if b"\x8f" not in data and b"\x91" not in data:  # neither opcode's byte
        return False
    return any(op.name in ("EMPTY_SET", "FROZENSET") for op, _, _ in pickletools.genops(data))


def note_set_function() -> Callable[[list[Any], Any], None]:
    """``note_set(sink, obj)``: append ``obj`` to ``sink`` if it is an exact set
    or frozenset (a ``persistent_id`` that persists nothing, with the sink bound)."""
    return _note_set_in_python if _sets is None else _sets.note_set


def _note_set_in_python(sink: list[Any], obj: Any) -> None:
    if type(obj) is set or type(obj) is frozenset:
        sink.append(obj)
