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
import pickletools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.overrun import refuse_overrun
from ..errors import BudgetExceededError
from ..restricted import budgets

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
    refused: bool = False  # a budget refused the bytes before the C unpickler read them
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
    _events: dict[str, Event]  # what _record appends, by kind: made once per stand-in
    _derived: Any  # what _derive returns, once it has been asked

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:  # REDUCE, OBJ, INST
        cls._record("call")
        return cls._derive()

    def _record(cls, kind: str) -> None:
        cls._run.events.append(cls._events[kind])

    def _derive(cls) -> Any:
        """What calling this stand-in returns: the next one down the chain (a
        chain longer than _SHOWN_CALLS ends in one stand-in, "f()...")."""
        if cls._derived is None:
            depth = min(cls._depth + 1, _SHOWN_CALLS + 1)
            cls._derived = _stand_in(cls._run, _chain(cls._root, depth), "call", cls._root, depth)
        return cls._derived

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
        events = {kind: Event(kind, label, origin, root, depth) for kind in ("call", "change")}
        namespace = {"_run": run, "_label": label, "_origin": origin, "_root": root,
                     "_depth": depth, "_events": events, "_derived": None}  # fmt: skip
        found = run.stand_ins[key] = _StandIn("stand_in", (_Base,), namespace)
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


def long_text_number(data: bytes) -> int | None:
    """Where a number written as text (INT, LONG, PUT, GET) has more digits than
    restricted loading's ``digits`` budget, or None. Both readers of ``inspect``
    (pickletools and the C unpickler) would convert it, in time quadratic in its
    length once ``sys.set_int_max_str_digits(0)`` lifts CPython's own limit. A
    search of the bytes, before any opcode is read: it may find one inside a
    string too, and then fails closed."""
    found = re.search(rb"[ILpg][-+]?[0-9]{%d}" % (budgets.MAX_DIGITS + 1), data)
    return None if found is None else found.start()


def _over_budget(data: bytes) -> str | None:
    """Why the C unpickler must not read ``data`` for a dry run, or None.

    - A PUT at a memo index no pickler writes (past the number of bytes, each
      entry taking at least one): the C unpickler grows its memo to the index
      first, and a 12-byte pickle at index 2**27 allocates 1 GiB.
    - A tuple whose hash would visit more items than restricted loading's
      ``tuple_work`` budget (shared tuples counted each time they are reached):
      the dry run builds real dicts and sets, which would hash it for hours.
    - Keys and members whose hashing, in all, is past restricted loading's
      ``hashing`` budget: a tuple's hash is not cached, so a key within
      ``tuple_work`` placed thousands of times is hashed each time.

    The tuple and hashing charges are restricted loading's own
    (``budgets.TupleWork.count``, ``budgets.Hashing.placed``), made on a model
    of the stack that keeps each object's identity: every tuple is built, of
    stand-ins for what is not a tuple, and what an opcode leaves in place
    (DUP, BUILD, an empty SETITEMS...) stays the same object, as in the C
    unpickler. The walk stops where it cannot read on, as the C unpickler
    does, except on a value line only pickletools refuses, where it reads on
    (``_BudgetWalk.skip_text_value``)."""
    walk = _BudgetWalk(data)
    try:
        walk.run()
    except BudgetExceededError as exc:
        return f"BudgetExceededError: {exc}"
    except (ValueError, TypeError, IndexError, KeyError):
        pass  # bad data: the dry run says how the C unpickler fails on it
    return None


_VALUE = object()  # what the walk holds for anything but a tuple


class _BudgetWalk:
    """The stack and memo of ``_over_budget``'s walk; ``_STEPS`` holds what
    each opcode does to them that the budgets see (any other opcode: its stack
    effect, as pickletools states it, of stand-ins)."""

    __slots__ = ("data", "hashing", "memo", "metastack", "next", "offset", "stack", "tuples")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.stack: list[Any] = []
        self.metastack: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.tuples = budgets.TupleWork()
        self.hashing = budgets.Hashing(len(data))
        self.offset = 0  # where the opcode being read starts
        self.next = 0  # where the next opcode starts

    def where(self) -> int:
        return self.offset

    def run(self) -> None:
        data = self.data
        stream = io.BytesIO(data)
        while stream.tell() < len(data):
            try:
                self.read(stream)
            except ValueError:
                if not self.skip_text_value(stream):
                    raise

    def read(self, stream: io.BytesIO) -> None:
        """Walk the opcodes from the stream's position to a STOP (genops reads
        positions from the stream: offsets are the data's)."""
        self.next = stream.tell()
        for opcode, argument, at in pickletools.genops(stream):
            self.offset = at or 0
            _STEPS.get(opcode.name, _generic)(self, opcode.name, argument)
            self.next = stream.tell()

    def skip_text_value(self, stream: io.BytesIO) -> bool:
        """After pickletools refused the opcode at ``self.next``: if it is one
        that pushes a value written as a line (INT, LONG, FLOAT, STRING,
        UNICODE), the C unpickler may read what pickletools does not (``I0x1``:
        it parses ints in any base, and STRING in latin-1): push a stand-in
        and read on past the line. Anything else stops the C unpickler too
        (a truncated argument, an unknown opcode, a memo index)."""
        at = self.next
        end = self.data.find(b"\n", at + 1)
        if self.data[at : at + 1] not in _TEXT_VALUES or end < 0:
            return False
        self.stack.append(_VALUE)
        stream.seek(end + 1)
        return True

    def pop_mark(self) -> list[Any]:
        items, self.stack = self.stack, self.metastack.pop()
        return items

    def build(self, opcode: str, value: tuple[Any, ...]) -> None:
        self.tuples.count(value, opcode, self.where)
        self.stack.append(value)


def _generic(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    """Any other opcode: its stack effect (``_EFFECTS``), of stand-ins."""
    mark, pops, pushes = _EFFECTS[opcode]
    if mark:
        walk.pop_mark()
    if pops:
        if len(walk.stack) < pops:
            raise IndexError("stack underflow")
        del walk.stack[-pops:]
    if pushes:
        walk.stack.append(_VALUE)


def _put(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    index = len(walk.memo) if opcode == "MEMOIZE" else int(argument)
    budgets.check_memo(index, len(walk.data), opcode, walk.offset)
    walk.memo[index] = walk.stack[-1]


def _get(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.stack.append(walk.memo[int(argument)])


def _mark(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.metastack.append(walk.stack)
    walk.stack = []


def _pop(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    if walk.stack:
        walk.stack.pop()
    else:
        walk.pop_mark()


def _pop_mark(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.pop_mark()


def _dup(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.stack.append(walk.stack[-1])


def _empty_tuple(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.stack.append(())


def _tuple(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.build(opcode, tuple(walk.pop_mark()))


def _small_tuple(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    count = _TUPLE_SIZES[opcode]
    if len(walk.stack) < count:
        raise IndexError("stack underflow")
    items = tuple(walk.stack[-count:])
    del walk.stack[-count:]
    walk.build(opcode, items)


def _made_from_marked(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    """DICT and FROZENSET: a new container of the items above the mark."""
    walk.hashing.placed(opcode, walk.pop_mark(), walk.tuples.counts, walk.where)
    walk.stack.append(_VALUE)


def _fills_marked(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    """SETITEMS, APPENDS, ADDITEMS: the object below the mark stays."""
    items = walk.pop_mark()
    if not walk.stack:
        raise IndexError("no object below the mark")
    if opcode in budgets.HASHES:
        walk.hashing.placed(opcode, items, walk.tuples.counts, walk.where)


def _fills(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    """SETITEM, APPEND, BUILD: pop the operands; the target stays."""
    count = 2 if opcode == "SETITEM" else 1
    if len(walk.stack) <= count:
        raise IndexError("stack underflow")
    items = walk.stack[-count:]
    del walk.stack[-count:]
    if opcode in budgets.HASHES:
        walk.hashing.placed(opcode, items, walk.tuples.counts, walk.where)


def _keeps(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    """READONLY_BUFFER, FRAME, PROTO: the stack stays as it is."""


def _stop(walk: _BudgetWalk, opcode: str, argument: Any) -> None:
    walk.stack, walk.metastack, walk.memo = [], [], {}


def _effect(opcode: Any) -> tuple[bool, int, int]:
    """Whether an opcode pops to a mark, how many items it pops (below the
    mark, if it has one), and how many it pushes (at most one)."""
    before = opcode.stack_before
    mark = pickletools.markobject in before
    return (
        mark,
        before.index(pickletools.markobject) if mark else len(before),
        len(opcode.stack_after),
    )


_EFFECTS = {opcode.name: _effect(opcode) for opcode in pickletools.opcodes}
_TUPLE_SIZES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
# INT, LONG, FLOAT, STRING, UNICODE: one line, one value pushed.
_TEXT_VALUES = frozenset({b"I", b"L", b"F", b"S", b"V"})
_STEPS: dict[str, Any] = {
    **dict.fromkeys(("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"), _put),
    **dict.fromkeys(("GET", "BINGET", "LONG_BINGET"), _get),
    **dict.fromkeys(("TUPLE1", "TUPLE2", "TUPLE3"), _small_tuple),
    **dict.fromkeys(("DICT", "FROZENSET"), _made_from_marked),
    **dict.fromkeys(("SETITEMS", "APPENDS", "ADDITEMS"), _fills_marked),
    **dict.fromkeys(("SETITEM", "APPEND", "BUILD"), _fills),
    **dict.fromkeys(("READONLY_BUFFER", "FRAME", "PROTO"), _keeps),
    "MARK": _mark,
    "POP": _pop,
    "POP_MARK": _pop_mark,
    "DUP": _dup,
    "EMPTY_TUPLE": _empty_tuple,
    "TUPLE": _tuple,
    "STOP": _stop,
}


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
    over = _over_budget(data)
    if over is not None:
        run.error, run.refused = over, True
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
