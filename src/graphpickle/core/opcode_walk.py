"""What a pickle's opcodes call and change, read symbolically, without loading it.

A reused classes' part (``held_classes.py``) must call nothing but known makers
and change nothing its load did not make. This walk runs the opcodes over a
stack of symbols (:class:`Symbol`): which global each ``REDUCE`` calls and with
what, which object each ``BUILD``, ``APPEND(S)``, ``SETITEM(S)`` and
``ADDITEMS`` changes, and how often each global is pushed. It reads only the
opcodes of :data:`OPCODES` and insists on what keeps the reading exact: every
object an opcode makes is memoized at once (so a check of the memo sees it),
and items are only added to a container the pickle made empty (whose filling
runs no code). What it cannot read that way raises :class:`Unreadable`.
"""

from __future__ import annotations

import pickletools
from typing import Any

__all__ = ["OPCODES", "Reductions", "Symbol", "Unreadable", "reductions"]


class Unreadable(ValueError):
    """A pickle the walk cannot read exactly (the reason is the message)."""


#: The opcodes the walk reads (what protocol 4 and 5 writers write, without
#: buffers out of band or persistent ids).
OPCODES = frozenset({
    "PROTO", "FRAME", "MEMOIZE", "BINGET", "LONG_BINGET", "SHORT_BINUNICODE", "BINUNICODE",
    "BINUNICODE8", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BYTEARRAY8", "BININT", "BININT1",
    "BININT2", "LONG1", "LONG4", "BINFLOAT", "NONE", "NEWTRUE", "NEWFALSE", "EMPTY_TUPLE", "TUPLE1",
    "TUPLE2", "TUPLE3", "TUPLE", "MARK", "EMPTY_LIST", "APPEND", "APPENDS", "EMPTY_DICT", "SETITEM",
    "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET", "STACK_GLOBAL", "REDUCE", "NEWOBJ", "BUILD",
    "POP", "POP_MARK", "DUP", "STOP",
})  # fmt: skip


class Symbol:
    """What an opcode pushed, as far as :func:`reductions` needs it: a
    ``str`` or a ``const`` (its value), a ``global`` ``(module, name)``, a
    ``call`` ``(callable, arguments)`` (REDUCE), a ``new`` ``(class,
    arguments)`` (NEWOBJ), a ``tuple`` of symbols, an empty ``list``, ``dict``
    or ``set`` (a dict's value: its items, ``(key, value)`` symbols, as the
    pickle sets them, and the str keys among them), or ``other``; its memo
    index; and whether a REDUCE or a BUILD was given it (``given``: a dict is
    filled no more after)."""

    __slots__ = ("given", "index", "kind", "value")

    def __init__(self, kind: str, value: Any = None) -> None:
        self.kind = kind
        self.value = value
        self.index: int | None = None
        self.given = False


def _give(symbol: Symbol) -> None:
    """``symbol`` is given to a REDUCE or a BUILD: a dict in it (or in a tuple
    of it) is what the callable reads, and is filled no more."""
    if symbol.kind == "dict":
        symbol.given = True
    elif symbol.kind == "tuple":
        for item in symbol.value:
            _give(item)


_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8"})
#: Opcodes that make an object (running code: a class's __new__, a key's
#: __hash__), which must be memoized at once.
_MAKES = frozenset({"REDUCE", "NEWOBJ", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_SET", "FROZENSET"})
#: Constants, as their opcodes push them (what carries no argument: its value).
_CONSTANTS = {"NONE": None, "NEWTRUE": True, "NEWFALSE": False}
_CONSTANT_OPCODES = frozenset({
    "SHORT_BINBYTES", "BINBYTES", "BINBYTES8", "BININT", "BININT1", "BININT2", "LONG1", "LONG4",
    "BINFLOAT", *_CONSTANTS,
})  # fmt: skip


class Reductions:
    """What :func:`reductions` reads of a pickle, as symbols: each REDUCE
    (``calls``), each NEWOBJ (``news``), each BUILD's target and state
    (``builds``), what each memo index holds (``memo``), every dict key and
    set or frozenset item the load hashes (``hashed``: also those it drops as
    equal to one before), and how many times each global is pushed
    (``pushes``)."""

    __slots__ = ("builds", "calls", "hashed", "memo", "news", "pushes")

    def __init__(self) -> None:
        self.calls: list[Symbol] = []
        self.news: list[Symbol] = []
        self.builds: list[tuple[Symbol, Symbol]] = []
        self.memo: list[Symbol] = []
        self.hashed: list[Symbol] = []
        self.pushes: dict[Any, int] = {}

    def only_called(self, name: tuple[str, str]) -> bool:
        """Whether the global ``name`` is pushed only to be called by a REDUCE."""
        called = sum(1 for call in self.calls if call.value[0].value == name)
        return self.pushes.get(name, 0) == called


#: What the opcodes that add items fill: only an exact container the pickle made
#: empty (EMPTY_LIST, EMPTY_DICT, EMPTY_SET), whose filling runs no code of the user's.
_FILLS = {
    "APPEND": "list", "APPENDS": "list", "SETITEM": "dict", "SETITEMS": "dict", "ADDITEMS": "set",
}  # fmt: skip
_EMPTY = {"EMPTY_LIST": "list", "EMPTY_DICT": "dict", "EMPTY_SET": "set"}
#: How many items above the object they fill the filling opcodes pop (None: down to the mark).
_FILL_COUNTS = {"APPEND": 1, "SETITEM": 2, "APPENDS": None, "SETITEMS": None, "ADDITEMS": None}


def reductions(head: bytes) -> Reductions:
    """What the pickle ``head`` calls, makes and changes (:class:`Reductions`),
    read from its opcodes as an unpickler runs them. Raises Unreadable for an
    opcode the walk does not know, an object made and not memoized, items
    added to what the pickle did not make empty, or bytes that are not
    exactly one pickle (what follows its STOP, or a frame past its end, would
    be read as part of what comes after it)."""
    try:
        return _read(head)
    except Unreadable:
        raise
    except Exception as error:  # (not a pickle genops reads; a stack it underflows)
        raise Unreadable(f"not a pickle the walk reads: {error!r}") from error


def _read(head: bytes) -> Reductions:
    stack: list[Symbol] = []
    marks: list[int] = []
    read = Reductions()
    calls, memo = read.calls, read.memo

    def push(symbol: Symbol) -> None:
        stack.append(symbol)
        if symbol.kind == "global":
            read.pushes[symbol.value] = read.pushes.get(symbol.value, 0) + 1

    def down_to_mark() -> list[Symbol]:
        mark = marks.pop()
        items = stack[mark:]
        del stack[mark:]
        return items

    arg: Any
    position: Any
    unmemoized: str | None = None
    for opcode, arg, position in pickletools.genops(head):
        name = opcode.name
        if name not in OPCODES:
            raise Unreadable(name)
        if name == "FRAME" and position + 9 + arg > len(head):
            raise Unreadable("a frame past the pickle's end")
        if (name == "PROTO") != (position == 0) or (name == "PROTO" and arg < 4):
            # (below 4, find_class renames globals through _compat_pickle's
            # tables, and reads no dotted names)
            raise Unreadable("not a pickle of protocol 4 or 5 from its first byte")
        if name in ("PROTO", "FRAME"):
            continue
        if unmemoized is not None and name != "MEMOIZE" and (unmemoized, name) != ("REDUCE", "POP"):
            # (what it made is then in the memo, where the walk checks its kind;
            # a REDUCE's result may be dropped: _class_setstate's)
            raise Unreadable(f"{unmemoized} not memoized")
        unmemoized = name if name in _MAKES else None
        if name == "STOP":
            if position + 1 != len(head):
                raise Unreadable("bytes after the pickle's STOP")
            return read
        if name in _FILL_COUNTS:
            count = _FILL_COUNTS[name]
            target = stack[marks[-1] - 1] if count is None else stack[-count - 1]
            if target.kind != _FILLS[name]:
                # (an object's append, extend, __setitem__ or add: its code runs)
                raise Unreadable(f"{name} onto what is not an empty {_FILLS[name]}")
            items = down_to_mark() if count is None else stack[-count:]
            if count is not None:
                del stack[-count:]
            if target.kind == "dict":
                _fill(target, items)
                read.hashed.extend(items[::2])
            elif target.kind == "set":
                read.hashed.extend(items)
        elif name == "BUILD":
            state = stack.pop()
            _give(state)
            read.builds.append((stack[-1], state))
        elif name == "MEMOIZE":
            if stack[-1].index is None:
                stack[-1].index = len(memo)
            memo.append(stack[-1])
        elif name in ("BINGET", "LONG_BINGET"):
            push(memo[arg])
        elif name == "MARK":
            marks.append(len(stack))
        elif name in _STRINGS:
            stack.append(Symbol("str", arg))
        elif name in _CONSTANT_OPCODES:
            stack.append(Symbol("const", _CONSTANTS.get(name, arg)))
        elif name == "STACK_GLOBAL":
            qualname, module = stack.pop(), stack.pop()
            if module.kind != "str" or qualname.kind != "str":
                # (a name the load made: the walk would not know the global)
                raise Unreadable("a global named by what the load made")
            push(Symbol("global", (module.value, qualname.value)))
        elif name == "REDUCE":
            arguments, callable_ = stack.pop(), stack.pop()
            _give(arguments)
            calls.append(Symbol("call", (callable_, arguments)))
            stack.append(calls[-1])
        elif name == "NEWOBJ":
            arguments, cls = stack.pop(), stack.pop()
            read.news.append(Symbol("new", (cls, arguments)))
            stack.append(read.news[-1])
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = stack[-count:]
            del stack[-count:]
            stack.append(Symbol("tuple", tuple(items)))
        elif name in ("TUPLE", "EMPTY_TUPLE"):
            stack.append(Symbol("tuple", tuple(down_to_mark()) if name == "TUPLE" else ()))
        elif name in ("FROZENSET", "POP_MARK"):
            items = down_to_mark()
            if name == "FROZENSET":
                read.hashed.extend(items)
                stack.append(Symbol("other"))
        elif name == "POP":
            if marks and marks[-1] == len(stack):
                marks.pop()
            else:
                stack.pop()
        elif name == "DUP":
            push(stack[-1])
        else:  # (an empty container; a bytearray)
            kind = _EMPTY.get(name, "other")
            stack.append(Symbol(kind, ([], set()) if kind == "dict" else None))
    raise Unreadable("no STOP")


def _fill(target: Symbol, items: list[Symbol]) -> None:
    """Note the items SETITEM(S) sets in the dict ``target``: before any
    callable was given it, each str key once (what a pickler writes), so that
    its items are what each callable given it read."""
    if target.given:
        raise Unreadable("a dict filled after a callable was given it")
    pairs, names = target.value
    for key, value in zip(items[::2], items[1::2], strict=True):
        if key.kind == "str":
            if key.value in names:
                raise Unreadable(f"the key {key.value!r} set twice")
            names.add(key.value)
        pairs.append((key, value))
