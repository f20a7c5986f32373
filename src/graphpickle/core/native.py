"""The core's compiled extension (``_speedups.c``, beside this file), or ``None``.

Its Python versions: the hook (``Pickler.reducer_override``) and ``dumps``/``loads``
in ``pickler.py``, what a remembered reduction checks in ``reducers.py``, the
BYTEARRAY8 check in ``overrun.py``. Tests set ``pickler._speedups`` to ``None``
to run the Python hook.
"""

from __future__ import annotations

import types

from .. import _native

#: The VERSION of ``_speedups.c`` this package's Python files expect.
VERSION = 27
NAMES = (
    "Dispatch", "Dumper", "Loader", "Sink", "bytearray8_overruns", "function_ref",
    "function_snapshot", "held_snapshot", "held_unchanged", "make_function", "memo_gets", "modules_items", "remember_by_reference", "same_modules", "same_objects",
    "set_by_reference_policy", "set_function_layouts", "set_function_refs", "set_remembered",
    "set_session_reductions", "subimport",
    "ENTRY_FIELDS", "FUNCTION_FIELDS",
    "PARTS_FIELDS", "SET_LAYOUT", "SNAPSHOT_FIELDS",
)  # fmt: skip


def _import() -> types.ModuleType:
    from . import _speedups

    return _speedups


speedups = _native.load("core", _import, VERSION, NAMES)
