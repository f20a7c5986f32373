"""``explain(obj)``: what in a graph is pickled by value, where, why, and how big.

"Why is my graph 400 MB?" usually has one answer: a function pickled by value
that captures something large. ``explain`` pickles the object as ``dumps``
would, then walks it in pickling order (:mod:`._walk`) and reports every object
pickled by value with its path (the same format as errors), its reason, the
bytes it pickles to on its own, and, for functions, what they capture.
"""

from __future__ import annotations

import enum
import io
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import _cloudpickle_internals as cp
from ..core.captures import captured_values, no_capture_warnings
from ..core.pickler import Pickler
from ..core.policy import class_reason, function_reason, module_reason
from ..core.reducers import PicklerState, Reducer
from ..core.walk import render_path, type_name, walk
from .scan import inspect

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
    """Objects pickled by value that share a kind and a name (the 500 closures a
    loop made count as one entry with ``count=500``)."""

    path: str  # where the first one sits
    kind: str  # "function", "class" or "module"
    name: str
    reason: str
    count: int
    nbytes: int  # bytes they span in the payload, what they pickle first included
    captures: tuple[Capture, ...] = ()  # of the first one, each measured on its own


@dataclass(frozen=True)
class ExplainReport:
    """The by-value content of one payload, largest first."""

    total_bytes: int
    protocol: int
    entries: tuple[ByValueEntry, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        count = sum(e.count for e in self.entries)
        lines = [
            f"payload: {_size(self.total_bytes)} (protocol {self.protocol}), "
            f"{count} object(s) pickled by value"
        ]
        if self.entries:
            lines.append(f"{'bytes':>10}  {'kind':8}  {'reason':17}  name  (first path)")
        for entry in self.entries:
            times = f" x{entry.count}" if entry.count > 1 else ""
            lines.append(
                f"{_size(entry.nbytes):>10}  {entry.kind:8}  {entry.reason:17}  "
                f"{entry.name}{times}  ({entry.path})"
            )
            for capture in entry.captures:
                size = "unpicklable" if capture.nbytes is None else _size(capture.nbytes)
                lines.append(f"{size:>10}    {capture.kind} {capture.name} ({capture.type})")
        return "\n".join(lines)


def explain(
    obj: Any, protocol: int | None = None, *, reducers: Mapping[type, Reducer] | None = None
) -> ExplainReport:
    """Pickle ``obj`` as ``dumps`` would and report what goes by value.

    Raises what ``dumps`` would (with the path) if ``obj`` cannot be pickled.
    An entry's bytes are those its objects span in the payload, from their
    constructor to the end of their state: the first function that pulls in a
    large global carries its bytes, and a by-value object nested in another
    counts in both. Captures are measured by pickling each on its own.
    """
    out = io.BytesIO()
    pickler = Pickler(out, protocol, reducers=reducers)
    with no_capture_warnings():  # the report shows the captures, measured
        pickler.dump(obj)
        found: dict[tuple[str, str], list[Any]] = {}
        for path, node in walk(pickler, obj):
            described = _describe(node)
            if described is not None:
                kind, name, reason = described
                found.setdefault((kind, name), [path, node, reason, 0])[3] += 1
        payload = out.getvalue()
        spans: dict[tuple[str, str], int] = {}
        for scanned in inspect(payload).by_value:
            key = (scanned.kind, scanned.name)
            spans[key] = spans.get(key, 0) + scanned.nbytes
        entries = [
            ByValueEntry(
                path=render_path(path),
                kind=kind,
                name=name,
                reason=reason,
                count=count,
                nbytes=spans.get((kind, _scan_name(node, name)), 0),
                captures=_captures(node, pickler.protocol, reducers),
            )
            for (kind, name), (path, node, reason, count) in found.items()
        ]
    entries.sort(key=lambda e: e.nbytes, reverse=True)
    return ExplainReport(len(payload), pickler.protocol, tuple(entries))


def _describe(node: Any) -> tuple[str, str, str] | None:
    """``(kind, name, reason)`` if ``node`` is pickled by value."""
    if type(node) is types.FunctionType:
        reason = function_reason(node)
        kind, name = "function", f"{node.__module__}.{node.__qualname__}"
    elif isinstance(node, type):
        # types.FunctionType and such: a tiny reference (a class of another
        # metaclass is not looked up: its metaclass may not hash)
        if type(node) is type and node in cp.BUILTIN_TYPES:
            return None
        reason = class_reason(node)
        kind, name = "class", f"{node.__module__}.{node.__qualname__}"
    elif isinstance(node, types.ModuleType):
        reason = module_reason(node)
        kind, name = "module", node.__name__
    else:
        return None
    return None if reason is None else (kind, name, reason)


def _scan_name(node: Any, name: str) -> str:
    """The name the static scan gives the same object (it sees what the payload holds)."""
    if isinstance(node, type):
        return node.__qualname__ if issubclass(node, enum.Enum) else node.__name__
    return name


def _captures(
    node: Any, protocol: int, reducers: Mapping[type, Reducer] | None
) -> tuple[Capture, ...]:
    if type(node) is not types.FunctionType:
        return ()
    state = cp.reduce_function_by_value(PicklerState(protocol), node)[2]
    captures = [
        Capture(name, kind, type_name(value), _pickled_size(value, protocol, reducers))
        for name, kind, value in captured_values(node, state)
    ]
    return tuple(sorted(captures, key=lambda c: c.nbytes or 0, reverse=True))


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
