"""``explain(obj)``: what in a graph is pickled by value, where, why, and how big.

"Why is my graph 400 MB?" usually has one answer: a function pickled by value
that captures something large. ``explain`` pickles the object as ``dumps``
would, then walks it in pickling order (:mod:`._walk`) and reports every object
pickled by value with its path (the same format as errors), its reason, the
bytes it pickles to on its own, and, for functions, what they capture.
"""

from __future__ import annotations

import io
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from . import _cloudpickle_internals as cp
from ._captures import captured_values, no_capture_warnings
from ._pickler import Pickler
from ._policy import class_reason, function_reason, module_reason
from ._reducers import PicklerState, Reducer
from ._walk import render_path, type_name, walk

__all__ = ["ByValueEntry", "Capture", "ExplainReport", "explain"]


@dataclass(frozen=True)
class Capture:
    """A global or closure variable that a by-value function carries."""

    name: str
    kind: str  # "global" or "closure"
    type: str
    nbytes: int | None  # None: it cannot be pickled on its own


@dataclass(frozen=True)
class ByValueEntry:
    """One object pickled by value."""

    path: str
    kind: str  # "function", "class" or "module"
    name: str
    reason: str
    nbytes: int  # what the object pickles to on its own, captures included
    captures: tuple[Capture, ...] = ()


@dataclass(frozen=True)
class ExplainReport:
    """The by-value content of one payload, largest first."""

    total_bytes: int
    protocol: int
    entries: tuple[ByValueEntry, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"payload: {_size(self.total_bytes)} (protocol {self.protocol}), "
            f"{len(self.entries)} object(s) pickled by value"
        ]
        if self.entries:
            lines.append(f"{'bytes':>10}  {'kind':8}  {'reason':17}  name  (path)")
        for entry in self.entries:
            lines.append(
                f"{_size(entry.nbytes):>10}  {entry.kind:8}  {entry.reason:17}  "
                f"{entry.name}  ({entry.path})"
            )
            for capture in entry.captures:
                size = "unpicklable" if capture.nbytes is None else _size(capture.nbytes)
                lines.append(f"{size:>10}    {capture.kind} {capture.name} ({capture.type})")
        return "\n".join(lines)


def explain(
    obj: Any, protocol: int | None = None, *, reducers: Mapping[type, Reducer] | None = None
) -> ExplainReport:
    """Pickle ``obj`` as ``dumps`` would and report what goes by value.

    Raises :class:`graphpickle.PicklingError` (with the path) if ``obj`` cannot be
    pickled. Sizes are measured by pickling each by-value object, and each
    variable a by-value function captures, on its own (in-band), so they may
    overlap: a function that calls another by-value function counts it too.
    """
    out = io.BytesIO()
    pickler = Pickler(out, protocol, reducers=reducers)
    entries = []
    with no_capture_warnings():  # the report shows the captures, measured
        pickler.dump(obj)
        for path, node in walk(pickler, obj):
            entry = _entry(node, path, pickler.protocol, reducers)
            if entry is not None:
                entries.append(entry)
    entries.sort(key=lambda e: e.nbytes, reverse=True)
    return ExplainReport(len(out.getvalue()), pickler.protocol, tuple(entries))


def _entry(
    node: Any, path: Any, protocol: int, reducers: Mapping[type, Reducer] | None
) -> ByValueEntry | None:
    captures: tuple[Capture, ...] = ()
    if type(node) is types.FunctionType:
        reason = function_reason(node)
        kind = "function"
        if reason is not None:
            state = cp.reduce_function_by_value(PicklerState(protocol), node)[2]
            captures = tuple(
                _capture(name, capture_kind, value, protocol, reducers)
                for name, capture_kind, value in captured_values(node, state)
            )
            captures = tuple(sorted(captures, key=lambda c: c.nbytes or 0, reverse=True))
    elif isinstance(node, type):
        reason = class_reason(node)
        kind = "class"
        if node in cp.BUILTIN_TYPES:
            reason = None  # types.FunctionType and such: a tiny reference to `types`
    elif isinstance(node, types.ModuleType):
        reason = module_reason(node)
        kind = "module"
    else:
        return None
    if reason is None:
        return None
    name = node.__name__ if kind == "module" else f"{node.__module__}.{node.__qualname__}"
    return ByValueEntry(
        path=render_path(path),
        kind=kind,
        name=name,
        reason=reason,
        nbytes=_pickled_size(node, protocol, reducers) or 0,
        captures=captures,
    )


def _capture(
    name: str, kind: str, value: Any, protocol: int, reducers: Mapping[type, Reducer] | None
) -> Capture:
    return Capture(name, kind, type_name(value), _pickled_size(value, protocol, reducers))


def _pickled_size(value: Any, protocol: int, reducers: Mapping[type, Reducer] | None) -> int | None:
    out = io.BytesIO()
    try:
        Pickler(out, protocol, reducers=reducers).dump(value)
    except Exception:
        return None
    return len(out.getvalue())


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
