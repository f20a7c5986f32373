"""The last stage of every deterministic dump: bytes that depend on values, never
on which equal objects are the same object.

The pickler's memo works by identity: a string met twice as one object is
written once and then referenced (a memo GET), two equal strings that are
distinct objects are written twice. Which equal strings, bytes and tuples
share one object differs between processes and between a graph and the same
graph loaded back (interning, a receiver that interns the names of code it
rebuilds, cloudpickle re-applying a class dict with new strings), so the memo
would carry it into the bytes.

:func:`canonical_values` rewrites a protocol 4 or 5 payload so that each value
is written once: the first time an immutable builtin value is memoized (a
``str``, ``bytes``, ``tuple`` or ``frozenset``, compared by type and content,
items by the same rule; a call of ``builtins.frozenset`` on a tuple, which is
how deterministic payloads write sorted frozensets, is that frozenset), it is
kept; every later equal one, written out again, becomes a reference to the
first. Memo indices are renumbered and the payload
is framed anew (frames of 64 KiB, data of 64 KiB or more outside frames, as
``pickle.py`` frames). A receiver gets equal objects; among equal immutable
values only ``is`` can tell the difference. Objects of any other type keep the
identities of the graph: two equal lists stay two lists.

A tuple is merged only when its whole construction can go: every item is a
reference or a value met before, so that no memo entry dies with it. Tuples
that contain themselves through a mutable item (written, popped, then
referenced) keep their construction, which is the same for equal graphs.

The C version lives in ``_values.c`` beside this file (where a second walk
ahead of the first fetches the table's slots before they are read, and
:func:`canonical_values_unless_sets` also answers the first stage's question,
whether a set is in hash order); this one is the reference, which tests
compare it with, and the fallback without the C parts.
"""

from __future__ import annotations

import pickletools
import struct
import types
from typing import Any, cast

from .. import _native
from . import sets

#: The VERSION of ``_values.c`` this file expects.
VERSION = 2
NAMES = ("canonical_values", "canonical_values_unless_sets")
FRAME_TARGET = 64 * 1024  # as pickle.py frames: data this long goes outside frames
_FRAME_SIZE_MIN = 4

_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
_BYTES = frozenset({"SHORT_BINBYTES", "BINBYTES", "BINBYTES8"})
_ATOMS = frozenset(
    {"NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "LONG4"}
    | {"BINFLOAT", "EMPTY_TUPLE"}
)
_NEW_OBJECTS = frozenset(
    {"EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET", "BYTEARRAY8", "NEXT_BUFFER"}
    | {"GLOBAL", "EXT1", "EXT2", "EXT4", "PERSID"}
)
_CALLS = {"REDUCE": 2, "NEWOBJ": 2, "NEWOBJ_EX": 3, "STACK_GLOBAL": 2, "BINPERSID": 1}
_FILLS = {"APPEND": 1, "SETITEM": 2, "BUILD": 1}  # pop these, change the object below
_TUPLES = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_VALUE_KINDS = frozenset("sbtz")  # str, bytes, tuple, frozenset


def _import() -> types.ModuleType:
    from . import _values

    return _values


_values = _native.load("values", _import, VERSION, NAMES)


def canonical_values(data: bytes) -> bytes:
    """``data``, a whole protocol 4 or 5 pickle, with each equal immutable
    value written once (module docstring). ValueError if ``data`` is not such
    a pickle, or holds opcodes those protocols' picklers do not write."""
    if _values is not None:
        return bytes(_values.canonical_values(data))
    return _canonical_values(data)


def canonical_values_unless_sets(data: bytes) -> bytes | None:
    """``None`` if :func:`sets.sets_to_sort` says that ``data`` writes a set in
    hash order, else :func:`canonical_values` of it: the first stage's check and
    the last stage in one walk (the C walk stops at the first set of two or
    more members; without it, the two run one after the other)."""
    if _values is not None:
        result = _values.canonical_values_unless_sets(data)
        return None if result is None else bytes(result)
    if sets.sets_to_sort(data):
        return None
    return _canonical_values(data)


class _Entry:
    """An item of the unpickler's stack: ``key`` says what it is (a value's
    type tag and content, ``("r", index)`` for a memoized object, ``("u", n)``
    for one never memoized, ``None`` for a mark); ``start`` is where its
    construction starts in the output, ``memo`` the memo count then."""

    __slots__ = ("key", "memo", "start")

    def __init__(self, key: Any, start: int, memo: int) -> None:
        self.key = key
        self.start = start
        self.memo = memo


def _canonical_values(data: bytes) -> bytes:
    if data[:1] != b"\x80" or len(data) < 2 or data[1] not in (4, 5):
        raise ValueError("canonical_values() reads protocol 4 and 5 pickles only")
    try:
        ops = [(op.name, arg, cast(int, pos)) for op, arg, pos in pickletools.genops(data)]
    except ValueError as exc:  # (genops stops at STOP: data after it is checked below)
        raise ValueError(f"canonical_values(): {exc}") from None
    ends = [pos for _, _, pos in ops[1:]] + [ops[-1][2] + 1]  # (genops ends with STOP)
    walk = _Walk(data)
    dispatch = _DISPATCH
    for (name, arg, pos), end in zip(ops, ends, strict=True):
        handler = dispatch.get(name)
        if handler is None:
            raise ValueError(f"canonical_values(): {name} is not written by protocol 4 or 5")
        if handler(walk, name, arg, pos, end):
            return _framed(data[:2], walk.out)
    raise ValueError("canonical_values(): the pickle has no STOP")


class _Walk:
    """The state of one :func:`_canonical_values` pass. Each opcode has its
    handler in ``_DISPATCH`` (as ``pickle.py``'s unpickler has ``dispatch``):
    ``handler(walk, name, arg, pos, end)``, true at STOP."""

    __slots__ = (
        "data",
        "frozenset_type",
        "indices",
        "old_memo",
        "out",
        "stack",
        "unique",
        "written",
    )

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.out: list[bytes] = []  # one chunk per opcode, PROTO apart
        self.stack: list[_Entry] = []
        self.old_memo: list[Any] = []  # the input's memo index -> key
        self.indices: dict[Any, int] = {}  # a value's key -> its output memo index
        self.written = 0  # output memo entries
        self.unique = 0
        self.frozenset_type: Any = _FROZENSET_TYPE  # builtins.frozenset, once memoized

    # -- the stack ------------------------------------------------------------------

    def pop_to_mark(self) -> tuple[_Entry, list[_Entry]]:
        stack = self.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].key is None:
                items = stack[i + 1 :]
                mark = stack[i]
                del stack[i:]
                return mark, items
        raise ValueError("canonical_values(): no mark")

    def pop(self, n: int) -> list[_Entry]:
        stack = self.stack
        if len(stack) < n or any(entry.key is None for entry in stack[len(stack) - n :]):
            raise ValueError("canonical_values(): stack underflow")
        items = stack[len(stack) - n :]
        del stack[len(stack) - n :]
        return items

    def copy(self, pos: int, end: int) -> int:
        """Write the opcode as it is; return where it starts in the output."""
        start = len(self.out)
        self.out.append(self.data[pos:end])
        return start

    def new_unique(self) -> tuple[str, int]:
        self.unique += 1
        return ("u", self.unique)

    def top_object(self, name: str) -> None:
        """What APPEND(S), SETITEM(S), ADDITEMS and BUILD fill: an object, not a value."""
        if not self.stack or self.stack[-1].key is None or self.stack[-1].key[0] in _VALUE_KINDS:
            raise ValueError(f"canonical_values(): {name} with no object to fill")

    # -- the opcodes: each returns true at STOP -------------------------------------

    def proto(self, name: str, arg: Any, pos: int, end: int) -> bool:
        if pos != 0:
            raise ValueError("canonical_values(): PROTO after the start")
        return False

    def frame(self, name: str, arg: Any, pos: int, end: int) -> bool:
        return False  # framed anew at the end

    def memoize(self, name: str, arg: Any, pos: int, end: int) -> bool:
        stack = self.stack
        if not stack or stack[-1].key is None:
            raise ValueError("canonical_values(): MEMOIZE with nothing to memoize")
        top = stack[-1]
        key = top.key
        if key[0] in _VALUE_KINDS:
            index = self.indices.get(key)
            if index is not None and top.memo == self.written:
                del self.out[top.start :]  # its whole construction: nothing memoized in it
                self.out.append(_get(index))
                self.old_memo.append(key)
                return False
            if index is None:
                self.indices[key] = self.written
            else:  # a construction that memoized more: kept, as a new entry
                key = top.key = ("r", self.written)
        else:
            if key == _FROZENSET_TYPE:
                self.frozenset_type = ("r", self.written)
            key = top.key = ("r", self.written)
        self.old_memo.append(key)
        self.written += 1
        self.out.append(self.data[pos:end])
        return False

    def get(self, name: str, arg: Any, pos: int, end: int) -> bool:
        if not 0 <= arg < len(self.old_memo):
            raise ValueError(f"canonical_values(): memo index {arg} is not set")
        key = self.old_memo[arg]
        start = len(self.out)
        self.out.append(_get(key[1] if key[0] == "r" else self.indices[key]))
        self.stack.append(_Entry(key, start, self.written))
        return False

    def stop(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        if len(self.stack) != 1 or self.stack[0].key is None:
            raise ValueError("canonical_values(): STOP with a stack of other than one item")
        if end != len(self.data):
            raise ValueError("canonical_values(): data after STOP")
        return True

    def mark(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.stack.append(_Entry(None, self.copy(pos, end), self.written))
        return False

    def string(self, name: str, arg: Any, pos: int, end: int) -> bool:
        start = self.copy(pos, end)
        content = self.data[pos + 1 + _LENGTH_SIZE[name] : end]
        self.stack.append(_Entry((_KIND[name], content), start, self.written))
        return False

    def atom(self, name: str, arg: Any, pos: int, end: int) -> bool:
        start = self.copy(pos, end)
        self.stack.append(_Entry(("a", self.out[-1]), start, self.written))
        return False

    def new_object(self, name: str, arg: Any, pos: int, end: int) -> bool:
        start = self.copy(pos, end)
        self.stack.append(_Entry(self.new_unique(), start, self.written))
        return False

    def small_tuple(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        items = self.pop(_TUPLES[name])
        key = ("t", tuple(item.key for item in items))
        self.stack.append(_Entry(key, items[0].start, items[0].memo))
        return False

    def marked_value(self, name: str, arg: Any, pos: int, end: int) -> bool:
        """TUPLE and FROZENSET: a value made of the marked items."""
        self.copy(pos, end)
        mark, items = self.pop_to_mark()
        key = ("t" if name == "TUPLE" else "z", tuple(item.key for item in items))
        self.stack.append(_Entry(key, mark.start, mark.memo))
        return False

    def marked_object(self, name: str, arg: Any, pos: int, end: int) -> bool:
        """LIST, DICT, OBJ, INST: an object made of the marked items."""
        self.copy(pos, end)
        mark, _ = self.pop_to_mark()
        self.stack.append(_Entry(self.new_unique(), mark.start, mark.memo))
        return False

    def call(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        items = self.pop(_CALLS[name])
        key: Any = self.new_unique()
        if name == "STACK_GLOBAL" and [item.key for item in items] == _FROZENSET_NAME:
            key = _FROZENSET_TYPE
        elif name == "REDUCE" and items[0].key in (_FROZENSET_TYPE, self.frozenset_type):
            key = _frozenset_called(items[1].key, key)
        self.stack.append(_Entry(key, items[0].start, items[0].memo))
        return False

    def fill(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        self.pop(_FILLS[name])
        self.top_object(name)
        return False

    def fill_marked(self, name: str, arg: Any, pos: int, end: int) -> bool:
        """APPENDS, SETITEMS, ADDITEMS."""
        self.copy(pos, end)
        self.pop_to_mark()
        self.top_object(name)
        return False

    def pop_one(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        if not self.stack:
            raise ValueError("canonical_values(): POP of an empty stack")
        self.stack.pop()
        return False

    def pop_mark(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        self.pop_to_mark()
        return False

    def readonly_buffer(self, name: str, arg: Any, pos: int, end: int) -> bool:
        self.copy(pos, end)
        if not self.stack or self.stack[-1].key is None:
            raise ValueError("canonical_values(): READONLY_BUFFER with no buffer")
        return False


_KIND = dict.fromkeys(_STRINGS, "s") | dict.fromkeys(_BYTES, "b")
_LENGTH_SIZE = {name: 1 if name.startswith("SHORT_") else 8 if name.endswith("8") else 4
                for name in _KIND}  # fmt: skip
# Each opcode protocols 4 and 5 write, and its handler; any other is refused.
_DISPATCH: dict[str, Any] = {
    "PROTO": _Walk.proto,
    "FRAME": _Walk.frame,
    "MEMOIZE": _Walk.memoize,
    "BINGET": _Walk.get,
    "LONG_BINGET": _Walk.get,
    "STOP": _Walk.stop,
    "MARK": _Walk.mark,
    **dict.fromkeys(_KIND, _Walk.string),
    **dict.fromkeys(_ATOMS, _Walk.atom),
    **dict.fromkeys(_NEW_OBJECTS, _Walk.new_object),
    **dict.fromkeys(_TUPLES, _Walk.small_tuple),
    "TUPLE": _Walk.marked_value,
    "FROZENSET": _Walk.marked_value,
    **dict.fromkeys(("LIST", "DICT", "OBJ", "INST"), _Walk.marked_object),
    **dict.fromkeys(_CALLS, _Walk.call),
    **dict.fromkeys(_FILLS, _Walk.fill),
    **dict.fromkeys(("APPENDS", "SETITEMS", "ADDITEMS"), _Walk.fill_marked),
    "POP": _Walk.pop_one,
    "POP_MARK": _Walk.pop_mark,
    "READONLY_BUFFER": _Walk.readonly_buffer,
}


_FROZENSET_NAME = [("s", b"builtins"), ("s", b"frozenset")]
_FROZENSET_TYPE = ("u", 0)  # builtins.frozenset, not memoized yet


def _frozenset_called(args: Any, otherwise: Any) -> Any:
    """What a call of builtins.frozenset on ``args`` makes: the frozenset (a value)
    of the members of a tuple, as deterministic payloads write sorted frozensets
    (``frozenset((a, b))``); ``otherwise`` for other arguments."""
    if args[0] == "t" and len(args[1]) == 1:
        members = args[1][0]
        if members[0] == "t":
            return ("z", members[1])
        if members == ("a", b")"):  # EMPTY_TUPLE
            return ("z", ())
    return otherwise


def _get(index: int) -> bytes:
    if index < 256:
        return b"h" + bytes((index,))
    return b"j" + struct.pack("<I", index)


def _framed(proto: bytes, chunks: list[bytes]) -> bytes:
    """``proto`` then the opcodes in ``chunks``, framed as ``pickle.py`` frames."""
    parts = [proto]
    frame: list[bytes] = []
    size = 0

    def commit() -> None:
        nonlocal size
        if size >= _FRAME_SIZE_MIN:
            parts.append(b"\x95" + struct.pack("<Q", size))
        parts.extend(frame)
        frame.clear()
        size = 0

    for chunk in chunks:
        if len(chunk) >= FRAME_TARGET:
            commit()
            parts.append(chunk)
            continue
        frame.append(chunk)
        size += len(chunk)
        if size >= FRAME_TARGET:
            commit()
    commit()
    return b"".join(parts)
