"""A dry run of the C unpickler: what ``pickle.loads`` would resolve and call.

``inspect`` reads opcodes in Python (``scan.py``). A scanner whose parser
differs from the loader's can be shown one program while the loader runs
another (frame lengths, odd spacing in text opcodes, errors only one of them
raises). So ``inspect`` also lets the real C unpickler (``_pickle.Unpickler``,
the one ``pickle.loads`` uses) read the bytes, with every global replaced by an
inert stand-in: ``find_class`` imports nothing and returns a class that
records what is done to it (one per name, or per call chain, and run) (called, instantiated, given state, items or
members). Nothing of the payload's runs; the C parser decides what the opcodes
are. ``_scan`` compares the two readings and flags any difference.

Stand-ins are classes (built by the metaclass :class:`_StandIn`) because the
NEWOBJ opcodes require a class, and a call's result may be one (a class pickled
by value, then instantiated).
"""

from __future__ import annotations

import _pickle
import copyreg
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.overrun import refuse_overrun

__all__ = ["DryRun", "Event", "dry_load"]


@dataclass(frozen=True)
class Event:
    """One thing the loader would do: ``kind`` is "global" (a name resolved),
    "call" (a global, or what a call returned, is called), or "change" (BUILD,
    SETITEM(S), APPEND(S) or ADDITEMS on a global or a call's result)."""

    kind: str
    name: str  # the global involved, or the call chain that produced the object: "f()"
    origin: str  # "global" or "call": was the object itself a global, or a call's result?
    root: str  # the global at the start of the chain
    depth: int = 0  # calls from the root to the object: "f()" is 1 (at most 9: "f()...")


@dataclass
class DryRun:
    events: list[Event] = field(default_factory=list)
    names: list[tuple[str, str]] = field(default_factory=list)  # what find_class got, in order
    pickles: int = 0  # pickles read to their STOP
    end: int = 0  # where the last complete pickle ended
    error: str | None = None  # why the C unpickler stopped, if it did before the end
    skipped: str | None = None  # why no dry run was made
    # One stand-in per (label, origin, root) and run: a payload of many calls
    # costs a lookup each, not a new class each.
    stand_ins: dict[tuple[str, str, str], Any] = field(default_factory=dict, repr=False)


class _StandIn(type):
    """The metaclass of stand-ins: each records what the loader does to it."""

    _run: DryRun
    _label: str
    _origin: str
    _root: str
    _depth: int

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:  # REDUCE, OBJ, INST
        cls._record("call")
        return cls._derive()

    def _record(cls, kind: str) -> None:
        cls._run.events.append(Event(kind, cls._label, cls._origin, cls._root, cls._depth))

    def _derive(cls) -> Any:
        """What calling this stand-in returns: the next one down the chain (a
        chain longer than _SHOWN_CALLS ends in one stand-in, "f()...")."""
        depth = min(cls._depth + 1, _SHOWN_CALLS + 1)
        return _stand_in(cls._run, _chain(cls._root, depth), "call", cls._root, depth)

    # BUILD looks up __setstate__ on the object; SETITEM(S) use __setitem__;
    # APPENDS, APPEND and ADDITEMS look up extend, append and add.
    def __setstate__(cls, state: Any) -> None:
        cls._record("change")

    def __setitem__(cls, key: Any, value: Any) -> None:
        cls._record("change")

    def extend(cls, items: Any) -> None:
        cls._record("change")

    def append(cls, item: Any) -> None:
        cls._record("change")

    def add(cls, item: Any) -> None:
        cls._record("change")


class _Base:
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # NEWOBJ, NEWOBJ_EX, OBJ
        stand_in: Any = cls
        stand_in._record("call")
        return stand_in._derive()


_SHOWN_CALLS = 8


def _chain(root: str, depth: int) -> str:
    """The label of what ``depth`` calls from ``root`` return: "f()()"."""
    return root + "()" * depth if depth <= _SHOWN_CALLS else f"{root}()..."


def _stand_in(run: DryRun, label: str, origin: str, root: str, depth: int = 0) -> Any:
    key = (label, origin, root)
    found = run.stand_ins.get(key)
    if found is None:
        namespace = {"_run": run, "_label": label, "_origin": origin, "_root": root}
        found = run.stand_ins[key] = _StandIn("stand_in", (_Base,), {**namespace, "_depth": depth})
    return found


class _DryUnpickler(_pickle.Unpickler):
    def __init__(self, file: io.BytesIO, run: DryRun) -> None:
        super().__init__(file, buffers=_endless_buffers(), encoding="latin1")
        self._run = run

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        self._run.names.append((module, name))
        self._run.events.append(Event("global", full, "global", full))
        return _stand_in(self._run, full, "global", full)

    def persistent_load(self, pid: Any) -> Any:
        return _stand_in(self._run, "<persistent id>", "call", "<persistent id>")


def _endless_buffers() -> Iterator[bytearray]:
    # The loader would take buffers from the caller; any will do to read on.
    return (bytearray() for _ in itertools.count())


def dry_load(data: bytes) -> DryRun:
    """Read every pickle in ``data`` with the C unpickler and inert stand-ins."""
    run = DryRun()
    # EXT opcodes look in this process's copyreg cache before calling
    # find_class: a real object from there would be really called.
    if copyreg._extension_cache:  # type: ignore[attr-defined]
        run.skipped = "this process has cached copyreg extensions, which the C unpickler would use"
        return run
    stream = io.BytesIO(data)
    while stream.tell() < len(data):
        try:
            refuse_overrun(memoryview(data)[stream.tell() :])
            _DryUnpickler(stream, run).load()
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
            return run
        run.pickles += 1
        run.end = stream.tell()
    return run
