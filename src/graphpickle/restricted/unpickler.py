"""Restricted loading: a pickle may build data, and do nothing else.

A pickle can call anything it can import. With ``loads(data, allowed=...)``:

- **Only allowed globals are resolved.** Before anything is imported, the
  name must be in the allow-list; a refused one raises
  :class:`ForbiddenGlobalError`. A name never resolves to a module, and never
  through one: ``datetime.sys`` and ``pathlib.os.system`` are refused even
  when ``datetime`` or ``pathlib`` are allowed.
- **Only objects the payload created are changed.** BUILD (``__setstate__``
  or the instance dict), SETITEM(S), APPEND(S) and ADDITEMS refuse a target
  that is a class, module, function, descriptor, or any object a global name
  resolved to in this load. That closes the rest of the known escapes:
  ``Fraction.__len__ = int`` through slot state, a module's dict rewritten
  through BUILD, ``sys.path`` extended through APPENDS.
- **What an opcode calls comes from the type.** BUILD calls the type's
  ``__setstate__``, APPEND(S) and ADDITEMS its ``append``, ``extend`` or
  ``add``, never what an instance's own dict holds (which an earlier BUILD
  could have filled with another allowed callable, to call it with payload
  data past the checks a call gets); a BUILD state never sets a dunder. Every
  ``__setstate__`` state passes the checks its type's constructor arguments
  would (``data_checks.check_state``).
- **EXT opcodes are refused**: they name globals through the receiver's
  ``copyreg`` registry, and a cached entry would skip the allow-list.
- **Only reviewed opcodes run.** The dispatch table is built from
  ``REVIEWED_OPCODES``, never copied whole from ``pickle``'s pure-Python
  unpickler: an opcode a later Python adds is refused by name until it has
  been reviewed here. The opcodes that call (INST, OBJ) or name globals through
  another table (EXT1/2/4) are implemented here, so that no check depends on
  which private method ``pickle``'s own implementation happens to call.
- **Work and memory are budgeted** (``budgets.py``): a tuple whose hash would
  visit more than a million items, hashing past the load's ``hashing`` budget
  in all, objects nested more than 10,000 deep, a length the data does not
  hold, a memo index past the data's length, allocations past ``memory``, and
  numbers past ``digits`` where they are made or converted raise
  :class:`BudgetExceededError` before the work or the allocation.

An allow-list is a collection of strings:

- ``"module.qualname"``: exactly that global (``"collections.OrderedDict"``,
  ``"zoneinfo.ZoneInfo._unpickle"``; a dotted qualname needs an exact entry);
- ``"module"``: the classes and functions *defined in* that module (what it
  imported from elsewhere, its constants and its dunders are not included);
- ``"package.*"``: the same for the package and all its submodules.

:data:`DATA_ONLY` (``data_only.py``) names exact objects. Extend it with set
union: ``graphpickle.DATA_ONLY | {"mypackage.Point"}``. Allow constructors of
data, never functions that return existing objects (a getter would hand the
payload state to change) or that call their arguments.

Functions pickled by value are code, so restricted loading refuses them (their
constructors live in ``cloudpickle``) with a message that says so.

The loader is CPython's pure-Python unpickler (``pickle._Unpickler``) with
these checks on its opcodes; the C unpickler has no hook for BUILD or SETITEM.
It is slower than ``pickle.loads`` on payloads of many small objects (the
docs/security.md has the numbers); out-of-band buffers are loaded without a copy.
"""

from __future__ import annotations

import _compat_pickle
import decimal
import fractions
import functools
import pickle
import pickletools
import reprlib
import struct
import sys
import types
from collections.abc import Iterable
from typing import IO, Any, ClassVar, NoReturn

from .._switches import READ_REFCOUNTS
from ..errors import ForbiddenGlobalError, UnpicklingError
from . import budgets
from .budgets import Allowance, Depths, Hashing, TupleWork, Walking, exceeded
from .data_checks import (
    Arguments,
    allocation,
    check_built,
    check_call,
    check_constructor,
    check_state,
    digits_problem,
    number_problem,
    reconstructor,
    unfolded,
)
from .data_only import DATA_ONLY

__all__ = ["DATA_ONLY", "AllowList"]

_BY_VALUE_MODULE = "cloudpickle.cloudpickle"

# What a payload may never change: code, namespaces and their descriptors.
# Exact builtin types that no opcode can change: a shared one (a small int, an
# interned string) that a call returns is left to fail as pickle fails.
_IMMUTABLE = frozenset({int, float, complex, str, bytes, bool, type(None), tuple, frozenset})

# What number_problem checks (a call's result of another type is no such number).
_NUMBERS = frozenset({decimal.Decimal, fractions.Fraction})

_NOT_DATA = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.CodeType,
    types.FrameType,
    types.MappingProxyType,
    property,
    classmethod,
    staticmethod,
)


class AllowList:
    """A compiled allow-list: exact globals, whole modules, package prefixes."""

    __slots__ = ("_entries", "_prefixes")

    def __init__(self, entries: Iterable[str]) -> None:
        if isinstance(entries, str):
            raise TypeError("allowed must be a collection of names, not a single string")
        entries = set(entries)
        self._prefixes = tuple(e[:-2] for e in entries if e.endswith(".*"))
        self._entries = frozenset(e for e in entries if not e.endswith(".*"))

    def allows(self, module: str, name: str) -> bool:
        """Whether the name may be looked up at all (before anything is imported)."""
        return self.exactly(module, name) or self.by_module(module, name)

    def exactly(self, module: str, name: str) -> bool:
        return f"{module}.{name}" in self._entries

    def by_module(self, module: str, name: str) -> bool:
        """Allowed by a module or package entry: plain names only. A dotted name
        walks attributes (protocol 4) and a dunder reaches the module's
        machinery (``__builtins__``, ``__loader__``), so both need exact entries."""
        if "." in name or name.startswith("__"):
            return False
        if module in self._entries:
            return True
        return any(module == p or module.startswith(p + ".") for p in self._prefixes)

    def defines(self, module: str, obj: Any) -> bool:
        """Whether ``obj`` (found in ``module`` by a module or package entry) is a
        class or function defined under that entry, not something it imported."""
        if not isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
            return False
        home = getattr(obj, "__module__", None)
        if not isinstance(home, str):
            return False
        if home == module and module in self._entries:
            return True
        return any(home == p or home.startswith(p + ".") for p in self._prefixes)


def _opcode(name: str) -> int:
    code: bytes = getattr(pickle, name)
    return code[0]


def _opcode_name(code: int) -> str | None:
    """The name pickletools gives an opcode's byte (None for a byte it does not know)."""
    return _OPCODE_NAMES.get(code)


_OPCODE_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}


# typeshed types pickle._Unpickler as the C Unpickler, without the opcode
# methods, stack and dispatch table this module works with.
_PythonUnpickler: Any = pickle._Unpickler


#: Every opcode restricted loading has reviewed, by name: what pickle's own
#: implementation does for it changes nothing the load did not make, or it is
#: checked or implemented below. No other opcode runs (see _refused_opcode).
REVIEWED_OPCODES = frozenset({
    # the frame, the protocol and the end
    "PROTO", "FRAME", "STOP",
    # atoms
    "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1",
    "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "BINBYTES",
    "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "NEXT_BUFFER", "READONLY_BUFFER",
    # containers made and filled (the filling ones are checked)
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_LIST", "LIST", "APPEND",
    "APPENDS", "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS",
    "FROZENSET",
    # the stack and the memo
    "MARK", "POP", "POP_MARK", "DUP", "PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE", "GET",
    "BINGET", "LONG_BINGET",
    # names, calls and state (each checked)
    "GLOBAL", "STACK_GLOBAL", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "INST", "OBJ", "BUILD",
    "EXT1", "EXT2", "EXT4", "PERSID", "BINPERSID",
})  # fmt: skip


def _refused_opcode(name: str) -> Any:
    def refuse(self: _RestrictedUnpickler) -> None:
        refused = ForbiddenGlobalError(
            f"restricted loading refused opcode {name}: this Python's pickle has it, "
            "and restricted loading has not reviewed what it does",
            name=f"opcode {name}",
        )
        refused.opcode, refused.offset = name, self._offset()  # (a walk stops before it)
        raise refused

    return refuse


def reviewed_table(table: dict[int, Any]) -> dict[int, Any]:
    """pickle's dispatch ``table`` with each opcode the review has not seen
    refused by name (none on 3.11-3.15: tests/test_restricted_opcodes.py)."""
    return {
        code: load
        if _opcode_name(code) in REVIEWED_OPCODES
        else _refused_opcode(_opcode_name(code) or f"0x{code:02x}")
        for code, load in table.items()
    }


class _RestrictedUnpickler(_PythonUnpickler):  # type: ignore[misc]
    dispatch: ClassVar[dict[int, Any]] = reviewed_table(_PythonUnpickler.dispatch)
    readline: Any  # (pickle sets it when loading starts: its frame reader's)

    def __init__(
        self,
        file: IO[bytes],
        allowed: AllowList,
        buffers: Iterable[Any] | None,
        **options: Any,
    ) -> None:
        super().__init__(file, buffers=buffers, **options)
        self._allowed = allowed
        # Every object a global name resolved to in this load, by id (the list
        # keeps them alive, so an id is never reused while loading).
        self._globals: dict[int, str] = {}
        self._names: dict[int, tuple[str, str]] = {}  # the globals find_class resolved
        self._keep: list[Any] = []
        self._stream = file
        self._tuple_work = TupleWork()
        self._depths = Depths()
        size = len(file.getbuffer()) if hasattr(file, "getbuffer") else None
        self._allowance = Allowance(size)
        self._hashing = Hashing(size)
        self._walking = Walking(size)

    # -- globals ---------------------------------------------------------------

    def find_class(self, module: str, name: str) -> Any:
        if self.proto < 3 and self.fix_imports:
            module, name = imported_name(module, name)
        full = f"{module}.{name}"
        allowed = self._allowed
        exact = allowed.exactly(module, name)
        if full == "builtins.getattr" and not exact:
            return self._getattr_of_global
        if not exact and not allowed.by_module(module, name):
            raise ForbiddenGlobalError(_refusal(module, name), name=full)
        sys.audit("pickle.find_class", module, name)
        __import__(module, level=0)
        obj: Any = sys.modules[module]
        for part in name.split("."):
            obj = getattr(obj, part)
            if isinstance(obj, types.ModuleType):
                raise ForbiddenGlobalError(
                    f"restricted loading refused {full}: {module}.{part} is a module, and "
                    "restricted loading never hands out a module or what is reached through one",
                    name=full,
                )
        if not exact and not allowed.defines(module, obj):
            home = getattr(obj, "__module__", None)
            raise ForbiddenGlobalError(
                f"restricted loading refused {full}: {module!r} is allowed as a module, which "
                f"covers the classes and functions it defines; this is a "
                f"{type(obj).__qualname__}" + (f" from {home}" if isinstance(home, str) else "")
                + f" (allow {full!r} exactly if it is data)",
                name=full,
            )  # fmt: skip
        special = _GUARDED.get(full)
        if special is not None:
            obj = special
        self._globals[id(obj)] = full
        self._names[id(obj)] = (module, name)
        self._keep.append(obj)
        return obj

    def _getattr_of_global(self, target: Any, attr: Any) -> Any:
        """``getattr`` as restricted loading provides it: ``getattr(G, "name")``
        for a global ``G`` this load resolved is the dotted global ``G.name``
        (how CPython pickles ``ZoneInfo._unpickle`` and methods of classes), and
        is resolved, checked and tracked as one. Anything else is refused."""
        found = self._names.get(id(target))
        if found is None or type(attr) is not str:
            raise ForbiddenGlobalError(
                f"restricted loading refused getattr({_describe(target)}, {_short(attr)}): "
                "getattr is allowed only as a global's attribute that the allow-list names",
                name="builtins.getattr",
            )
        module, name = found
        return self.find_class(module, f"{name}.{attr}")

    def load_ext1(self) -> None:
        self.get_extension(self.read(1)[0])

    def load_ext2(self) -> None:
        self.get_extension(int.from_bytes(self.read(2), "little"))

    def load_ext4(self) -> None:
        self.get_extension(int.from_bytes(self.read(4), "little", signed=True))

    def get_extension(self, code: int) -> None:
        raise ForbiddenGlobalError(
            f"restricted loading refused extension code {code}: EXT opcodes name globals "
            "through the receiver's copyreg registry, which the allow-list cannot check",
            name=f"copyreg extension {code}",
        )

    # -- changes of state --------------------------------------------------------

    def _check_target(self, target: Any, opcode: str) -> None:
        name = self._globals.get(id(target))
        if name is None and not isinstance(target, _NOT_DATA):
            return
        what = name or _describe(target)
        raise ForbiddenGlobalError(
            f"restricted loading refused {opcode} on {what}: a payload may change only "
            "the objects it creates, never a class, module, function or other global",
            name=what,
        )

    def _top_before_mark(self) -> Any:
        # SETITEMS, APPENDS and ADDITEMS change the object just below the mark.
        metastack = self.metastack
        if not metastack or not metastack[-1]:
            raise pickle.UnpicklingError("unpickling stack underflow")
        return metastack[-1][-1]

    def _below(self, depth: int) -> Any:
        if len(self.stack) < depth:
            raise pickle.UnpicklingError("unpickling stack underflow")
        return self.stack[-depth]

    # -- what calls return ----------------------------------------------------------

    def _note_if_shared(self) -> None:
        """After REDUCE, NEWOBJ(_EX), OBJ or INST: a result that something else
        already holds (a cache, a singleton such as ``numpy.dtype("f8", False,
        False)`` or pandas' ``NaT``, one of the call's own arguments) existed
        before the call. The payload did not create it, so it may not change it.
        A new object is held only by the stack: its count is ``_FRESH``, which
        was measured at import (``_fresh_references``)."""
        held = _references(self.stack)  # (before this frame holds it too)
        top = self.stack[-1]
        if type(top) in _IMMUTABLE:
            return  # BUILD, SETITEM(S), APPEND(S) on it fail, as with plain pickle
        if _FRESH is None or held > _FRESH:
            why = (
                "an object that existed before this load"
                if _FRESH is not None
                else "an object a call returned, which this interpreter's reference counts "
                "cannot tell from one that existed before this load"
            )
            self._globals.setdefault(id(top), f"{_describe(top)} ({why})")
            self._keep.append(top)

    def _check_call(self, func: Any, args: Any, kwargs: Any, opcode: str) -> Arguments:
        """Before a call: what it may allocate (the ``memory`` budget), and
        arguments that make an allowed name do more than build data
        (``data_checks.check_call``, ``check_constructor``)."""
        name = self._globals.get(id(func))
        found = Arguments(args, kwargs, work=self._tuple_work.counts)
        self._walking.charge(found.visited, opcode, self._offset)
        what = f"{name or 'the call'}(...)"
        self._allowance.allocate(allocation(name or "", args, found), opcode, self._offset, what)
        if found.shared:
            self._charge_unfolded((args, kwargs), found, opcode, what)
        if found.hashing:
            self._hashing.charge(found.hashing, opcode, self._offset)
        digits = digits_problem(name or "", args, kwargs, found)
        if digits is not None:
            raise exceeded("digits", opcode, self._offset(), f"{what} is {digits}")
        problem = check_constructor(func, args, kwargs)
        if problem is None and name is not None:
            problem = check_call(name, args, kwargs, found)
        if problem is not None:
            _refuse(f"{name or _describe(func)}(...)", problem, str(name))
        return found

    def _charge_unfolded(self, values: Any, found: Arguments, opcode: str, what: str) -> None:
        """Arguments that share containers: what walks them whole (a repr, numpy's
        dtype of nested fields) visits a shared one each time it is reached,
        charged to the ``memory`` budget as its items beyond those already
        charged (``ITEM_BYTES`` each), before the call."""
        cap = self._allowance.memory // budgets.ITEM_BYTES + found.visited
        items = unfolded(values, cap)
        if items > cap:
            raise exceeded(
                "memory",
                opcode,
                self._offset(),
                f"{what} is given containers that share containers: walked whole, they are "
                f"more than {cap:,} items, {budgets.ITEM_BYTES} bytes each, past the "
                f"{self._allowance.memory:,} bytes left for this load",
            )
        self._walking.charge(items, opcode, self._offset)
        extra = items - found.visited
        if extra > 0:
            self._allowance.allocate(
                extra * budgets.ITEM_BYTES,
                opcode,
                self._offset,
                f"{what}, walked whole through the containers its arguments share,",
            )

    def _check_built(self, obj: Any, opcode: str) -> None:
        problem = check_built(obj, given_state=opcode == "BUILD")
        if problem is not None:
            _refuse(opcode, f"it made {problem}", _describe(obj))

    def _after_call(self, opcode: str, args: Any, found: Arguments) -> None:
        self._note_if_shared()
        self._check_built(self.stack[-1], opcode)
        self._check_result(opcode, args, found)

    def _check_result(self, opcode: str, args: Any, found: Arguments) -> None:
        """After every call: a number past the ``digits`` budget is refused
        where it is made; what the result holds is in its arguments (its depth,
        and the work of hashing it, for a result that is not a tuple)."""
        top = self.stack[-1]
        kind = type(top)
        if kind in _NUMBERS:
            problem = number_problem(top)
            if problem is not None:
                raise exceeded("digits", opcode, self._offset(), f"it made {problem}")
        if issubclass(kind, tuple):
            self._count_if_tuple(opcode)
        elif found.visited + found.hashing > budgets.COUNTED_WORK:
            self._tuple_work.made(top, found.visited + found.hashing)
        self._holds(top, (args,), opcode)

    # -- budgets (budgets.py) ---------------------------------------------------

    def _offset(self) -> int | None:
        """Where the opcode being run starts in the data (for messages)."""
        try:
            position: int = self._stream.tell()
            frame = self._unframer.current_frame
            if frame is not None:
                position += frame.tell() - len(frame.getbuffer())
        except (AttributeError, OSError, ValueError):
            return None
        return max(position - 1, 0)

    def _count_if_tuple(self, opcode: str) -> None:
        top = self.stack[-1]
        if isinstance(top, tuple):
            self._tuple_work.count(top, opcode, self._offset)
            self._depths.holds(top, top, opcode, self._offset)

    def _holds(self, container: Any, items: Any, opcode: str) -> None:
        self._depths.holds(container, items, opcode, self._offset)

    def load_list(self) -> None:
        super().load_list()
        self._holds(self.stack[-1], self.stack[-1], "LIST")

    def load_dict(self) -> None:
        self._hash_keys("DICT", self.stack)  # (the items above the mark)
        super().load_dict()
        built = self.stack[-1]
        self._holds(built, [*built, *built.values()], "DICT")

    def load_frozenset(self) -> None:
        self._hash_keys("FROZENSET", self.stack)
        super().load_frozenset()
        self._holds(self.stack[-1], self.stack[-1], "FROZENSET")

    def _hash_keys(self, opcode: str, items: Any) -> None:
        """Before ``opcode`` hashes keys or members of ``items`` (what it takes
        off the stack, in order): the ``hashing`` budget (``budgets.HASHES``)."""
        self._hashing.placed(opcode, items, self._tuple_work.counts, self._offset)

    def load_int(self) -> None:
        self._load_number(_PythonUnpickler.load_int, "INT")

    def load_long(self) -> None:
        self._load_number(_PythonUnpickler.load_long, "LONG")

    def load_get(self) -> None:
        self._load_number(_PythonUnpickler.load_get, "GET")

    def _number_line(self, opcode: str) -> bytes:
        """The line of a number written as text: converting it takes time
        quadratic in its length, so its length is held to MAX_DIGITS whatever
        the process's own int limit (``sys.set_int_max_str_digits(0)`` lifts
        that one)."""
        offset = self._offset()
        line: bytes = self.readline()
        limit = budgets.MAX_DIGITS
        if len(line) > limit + 3:  # a sign, an "L", the newline
            raise exceeded(
                "digits", opcode, offset, f"it writes a number of more than {limit:,} digits"
            )
        return line

    def _load_number(self, load: Any, opcode: str) -> None:
        """pickle's own ``load`` on a checked line (it parses it as the version
        of Python running does)."""
        line = self._number_line(opcode)
        readline = self.readline
        self.readline = lambda: line
        try:
            load(self)
        finally:
            self.readline = readline

    def load_long_binput(self) -> None:
        offset = self._offset()
        (index,) = struct.unpack("<I", self.read(4))
        self._memo_budget(index, "LONG_BINPUT", offset)
        self.memo[index] = self.stack[-1]

    def load_put(self) -> None:
        offset = self._offset()
        index = int(self._number_line("PUT")[:-1])
        if index < 0:
            raise ValueError("negative PUT argument")
        self._memo_budget(index, "PUT", offset)
        self.memo[index] = self.stack[-1]

    def _memo_budget(self, index: int, opcode: str, offset: int | None) -> None:
        size = len(self._stream.getbuffer()) if hasattr(self._stream, "getbuffer") else None
        budgets.check_memo(index, size, opcode, offset)

    def load_bytearray8(self) -> None:
        """pickle allocates the declared length first: here it must be in the data."""
        offset = self._offset()
        (length,) = struct.unpack("<Q", self.read(8))
        frame = self._unframer.current_frame
        source = frame if frame is not None else self._stream
        if not hasattr(source, "getbuffer"):  # a stream: memory grows as the bytes come
            data = bytearray()
            while len(data) < length:
                chunk = self.read(min(length - len(data), 1 << 24))
                if not chunk:
                    raise pickle.UnpicklingError("pickle data was truncated")
                data += chunk
            self.append(data)
            return
        left = len(source.getbuffer()) - source.tell()
        if length > left:
            raise exceeded(
                "input",
                "BYTEARRAY8",
                offset,
                f"it declares {length:,} bytes and {left:,} follow",
            )
        data = bytearray(length)
        self.readinto(data)
        self.append(data)

    def load_reduce(self) -> None:
        args = self._below(1)
        found = self._check_call(self._below(2), args, None, "REDUCE")
        super().load_reduce()
        self._after_call("REDUCE", args, found)

    def load_newobj(self) -> None:
        args = self._below(1)
        found = self._check_call(self._below(2), args, None, "NEWOBJ")
        super().load_newobj()
        self._note_if_shared()
        self._check_result("NEWOBJ", args, found)

    def load_newobj_ex(self) -> None:
        args, kwargs = self._below(2), self._below(1)
        found = self._check_call(self._below(3), args, kwargs, "NEWOBJ_EX")
        super().load_newobj_ex()
        self._note_if_shared()
        self._check_result("NEWOBJ_EX", (args, kwargs), found)

    def load_inst(self) -> None:
        module = self.readline()[:-1].decode("ascii")
        name = self.readline()[:-1].decode("ascii")
        self._instantiate(self.find_class(module, name), self.pop_mark(), "INST")

    def load_obj(self) -> None:
        args = self.pop_mark()
        self._instantiate(args.pop(0), args, "OBJ")

    def _instantiate(self, klass: Any, args: list[Any], opcode: str) -> None:
        """INST and OBJ: the call pickle makes (a class with no arguments and no
        __getinitargs__ is only made, not initialized), checked as every call."""
        found = self._check_call(klass, tuple(args), None, opcode)
        made: Any = klass
        # (No local may hold the result: _after_call reads its reference count.)
        if args or not isinstance(klass, type) or hasattr(klass, "__getinitargs__"):
            self.append(made(*args))
        else:
            self.append(made.__new__(made))
        self._after_call(opcode, args, found)

    def load_build(self) -> None:
        """BUILD as pickle does it, with what it calls looked up on the type: an
        instance's own dict (which an earlier BUILD may have filled) never
        supplies the ``__setstate__`` it calls, and a state never sets a dunder
        (``__class__``, ``__setstate__``...) on an instance."""
        target, state = self._below(2), self._below(1)
        self._check_target(target, "BUILD")
        found = Arguments(state)
        self._walking.charge(found.visited, "BUILD", self._offset)
        what = f"BUILD on a {type(target).__name__}"
        self._allowance.allocate(allocation("", (), found), "BUILD", self._offset, what)
        if found.big_numbers:  # (a state is stored, not parsed: only its numbers count)
            # numpy and pandas convert what they hold: an object array's Decimal
            # of 10**999999 cast to int64 computes that power
            kind = type(target)
            name = f"{getattr(kind, '__module__', '')}.{kind.__qualname__}"
            digits = digits_problem(name, (state,), None, found)
            if digits is not None:
                raise exceeded("digits", "BUILD", self._offset(), f"{what} is {digits}")
        # (What a state sets is stored, not walked: the __setstate__ of what
        # DATA_ONLY allows keeps references, and a dict state hashes its keys.)
        for part in state if isinstance(state, tuple) and len(state) == 2 else (state,):
            if isinstance(part, dict):
                self._hashing.keys(part, self._tuple_work.counts, "BUILD", self._offset)
        setstate = _method_of_type(target, "__setstate__")
        # (Only a __setstate__ is given the state to read: without one, pickle
        # stores it in the instance's dict and attributes, or refuses it.)
        problem = None if setstate is None else check_state(target, state, found)
        if problem is not None:
            _refuse(f"BUILD on a {type(target).__qualname__}", problem, _describe(target))
        self.stack.pop()
        if setstate is not None:
            setstate(state)
        else:
            slotstate = None
            if isinstance(state, tuple) and len(state) == 2:
                state, slotstate = state
            if state:
                _refuse_dunders(target, state, "its dict")
                inst_dict = target.__dict__
                for key, value in state.items():
                    inst_dict[sys.intern(key) if type(key) is str else key] = value
            if slotstate:
                _refuse_dunders(target, slotstate, "its attributes")
                for key, value in slotstate.items():
                    setattr(target, key, value)
        self._holds(target, (state,), "BUILD")
        self._check_built(target, "BUILD")

    def load_setitem(self) -> None:
        target, key, value = self._below(3), self._below(2), self._below(1)
        self._check_target(target, "SETITEM")
        self._hash_keys("SETITEM", (key, value))
        self._holds(target, (key, value), "SETITEM")
        super().load_setitem()  # (obj[key] = value: __setitem__ comes from the type)

    def load_setitems(self) -> None:
        target = self._top_before_mark()
        self._check_target(target, "SETITEMS")
        self._hash_keys("SETITEMS", self.stack)  # (the items above the mark)
        self._holds(target, self.stack, "SETITEMS")
        super().load_setitems()

    # pickle calls the ``append``, ``extend`` and ``add`` an object has, its own
    # dict's included: here they come from its type.

    def load_append(self) -> None:
        target = self._below(2)
        self._check_target(target, "APPEND")
        value = self.stack.pop()
        self._holds(target, (value,), "APPEND")
        _type_method(target, "append")(value)

    def load_appends(self) -> None:
        target = self._top_before_mark()
        self._check_target(target, "APPENDS")
        items = self.pop_mark()
        self._holds(target, items, "APPENDS")
        extend = _method_of_type(target, "extend")
        if extend is not None:
            extend(items)
            return
        append = _type_method(target, "append")
        for item in items:
            append(item)

    def load_additems(self) -> None:
        target = self._top_before_mark()
        self._check_target(target, "ADDITEMS")
        items = self.pop_mark()
        self._hash_keys("ADDITEMS", items)
        self._holds(target, items, "ADDITEMS")
        if isinstance(target, set):
            set.update(target, items)
            return
        add = _type_method(target, "add")
        for item in items:
            add(item)


# The base class's table maps opcodes to its own functions: point the checked
# ones at the methods above.
for _op in (
    "BUILD", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "ADDITEMS",
    "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BYTEARRAY8", "LONG_BINPUT", "PUT", "LIST", "DICT",
    "FROZENSET", "INT", "LONG", "GET", "INST", "OBJ", "EXT1", "EXT2", "EXT4",
):  # fmt: skip
    _RestrictedUnpickler.dispatch[_opcode(_op)] = getattr(
        _RestrictedUnpickler, f"load_{_op.lower()}"
    )


def _counted(opcode: str) -> Any:
    """TUPLE, TUPLE1, TUPLE2 or TUPLE3 as pickle loads it, then counted."""
    load = _PythonUnpickler.dispatch[_opcode(opcode)]

    def load_and_count(self: _RestrictedUnpickler) -> None:
        load(self)
        self._count_if_tuple(opcode)

    return load_and_count


for _op in ("TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
    _RestrictedUnpickler.dispatch[_opcode(_op)] = _counted(_op)


def _references(stack: list[Any]) -> int:
    """The reference count of the top of ``stack``, as this function reads it
    (what the interpreter adds for the call, a local or a borrowed reference,
    differs by version: 3 for an object only the stack holds on 3.11-3.13, 2 on
    3.14 and 3.15)."""
    top = stack[-1]
    return sys.getrefcount(top)


def _fresh_references() -> int | None:
    """What ``_references`` reads for an object only a stack holds, if it reads
    one more for an object held once elsewhere too; None otherwise (an
    interpreter whose counts say nothing here: restricted loading then treats
    every call's result as existing before the load)."""
    if not READ_REFCOUNTS:
        return None
    fresh = _references([object()])
    held = object()
    return fresh if _references([held]) == fresh + 1 else None


_FRESH = _fresh_references()


def _method_of_type(obj: Any, name: str) -> Any:
    """``obj.name`` as a special method is looked up: on its type (through the
    MRO), never in its own dict; bound to ``obj``. None if the type has none."""
    for klass in type(obj).__mro__:
        attribute = klass.__dict__.get(name)
        if attribute is not None:
            get = getattr(type(attribute), "__get__", None)
            return attribute if get is None else get(attribute, obj, type(obj))
    return None


def _type_method(obj: Any, name: str) -> Any:
    method = _method_of_type(obj, name)
    if method is None:  # (pickle's AttributeError, with its words)
        raise AttributeError(f"'{type(obj).__qualname__}' object has no attribute '{name}'")
    return method


def is_dunder(name: Any) -> bool:
    """Whether ``name`` is a str of the ``__name__`` form a BUILD state may not set."""
    return type(name) is str and name.startswith("__") and name.endswith("__")


def _refuse_dunders(target: Any, state: Any, where: str) -> None:
    """A BUILD state may set plain attributes only: a dunder in an instance's
    dict would stand for the type's (for anything that looks it up on the
    instance), and one set as an attribute changes what the object is."""
    if not isinstance(state, dict):
        return  # pickle's own error follows
    for key in state:
        if is_dunder(key):
            _refuse(
                f"BUILD on a {type(target).__qualname__}",
                f"its state sets {key!r} in {where}; a state may set plain attributes only",
                _describe(target),
            )


def _refuse(what: str, problem: str, name: str) -> NoReturn:
    """Refuse ``what`` for a problem ``data_checks`` found."""
    raise ForbiddenGlobalError(f"restricted loading refused {what}: {problem}", name=name)


def _short(value: Any) -> str:
    """A payload's value in a message: bounded, since a payload can nest and
    share tuples so that their full repr is exponential."""
    return _REPR.repr(value)


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 60, 60


def _describe(obj: Any) -> str:
    if isinstance(obj, types.ModuleType):
        return f"the module {obj.__name__}"
    name = getattr(obj, "__qualname__", None)
    module = getattr(obj, "__module__", None)
    if isinstance(name, str):
        return f"{module}.{name}" if isinstance(module, str) else name
    return f"a {type(obj).__qualname__}"


def _last_item_getter(index: Any) -> Any:
    """``operator.itemgetter`` as restricted loading provides it: only what
    deterministic payloads use, ``itemgetter(-1)`` applied to a tuple. The real
    one would call ``__getitem__`` with any key on anything the list allows
    (pandas calls a callable key, a defaultdict its factory)."""
    if type(index) is not int or index != -1:
        raise ForbiddenGlobalError(
            f"restricted loading allows operator.itemgetter(-1) only, not itemgetter({_short(index)})",
            name="operator.itemgetter",
        )

    def last_item(items: Any) -> Any:
        if type(items) is not tuple:
            raise ForbiddenGlobalError(
                "restricted loading applies operator.itemgetter(-1) to tuples only, "
                f"not to {type(items).__qualname__}",
                name="operator.itemgetter",
            )
        return items[-1]

    return last_item


def _latin1_encode(text: Any, encoding: Any) -> bytes:
    """``_codecs.encode`` as restricted loading provides it: what protocols < 3
    write for bytes, ``encode(str, "latin1")``. Any other codec is looked up by
    name, which imports a module."""
    if type(text) is not str or encoding != "latin1":
        raise ForbiddenGlobalError(
            "restricted loading allows _codecs.encode(str, 'latin1') only, "
            f"not encode({type(text).__qualname__}, {_short(encoding)})",
            name="_codecs.encode",
        )
    return text.encode("latin1")


# Allowed globals that are replaced by a narrower function doing only what data uses.
_GUARDED = {
    "operator.itemgetter": _last_item_getter,
    "_codecs.encode": _latin1_encode,
    "copyreg._reconstructor": reconstructor,
}


def imported_name(module: str, name: str) -> tuple[str, str]:
    """The global that loading imports for ``module``/``name`` as written in a
    pickle of protocol < 3: Python 2 names (``__builtin__.set``) are mapped to
    Python 3 ones."""
    module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def compile_allowed(allowed: Iterable[str]) -> AllowList:
    if isinstance(allowed, AllowList):
        return allowed
    if isinstance(allowed, frozenset):
        return _compiled(allowed)  # DATA_ONLY and its unions: compiled once
    return AllowList(allowed)


@functools.lru_cache(maxsize=32)
def _compiled(allowed: frozenset[str]) -> AllowList:
    return AllowList(allowed)


def _refusal(module: str, name: str) -> str:
    full = f"{module}.{name}"
    if module == _BY_VALUE_MODULE:
        return (
            f"restricted loading refused {full}: the payload holds a function or class "
            "pickled by value, which is code; restricted loading never loads code"
        )
    if "." in name or name.startswith("__"):
        return (
            f"restricted loading refused the global {full}: a dotted or dunder name "
            f"needs an exact entry (add {full!r} if it is data)"
        )
    return (
        f"restricted loading refused the global {full}: it is not in the allow-list "
        f"(add {full!r} to allow it)"
    )


def restricted_load(
    file: IO[bytes],
    allowed: AllowList,
    buffers: Iterable[Any] | None,
    fix_imports: bool = True,
    encoding: str = "ASCII",
    errors: str = "strict",
) -> Any:
    """Load one pickle from ``file``, importing only what ``allowed`` names and
    changing only what it creates (the other arguments are ``pickle.load``'s)."""
    source: Any = file if hasattr(file, "getbuffer") else _GrowingReader(file)
    unpickler = _RestrictedUnpickler(
        source, allowed, buffers, fix_imports=fix_imports, encoding=encoding, errors=errors
    )
    start = file.tell() if hasattr(file, "getbuffer") else None
    try:
        return unpickler.load()
    except EOFError:
        raise  # the end of the stream: a loop of load() stops on it, as with pickle
    except Exception as exc:
        if isinstance(exc, pickle.UnpicklingError) and not isinstance(exc, ForbiddenGlobalError):
            raise  # a budget (which says where), or malformed data as pickle words it
        # (Every opcode before the failing one passed the budgets: the walk that
        # finds where is bounded.)
        where = None if start is None else _where(file, start, unpickler._offset())
        if isinstance(exc, ForbiddenGlobalError):
            if exc.opcode is None and where is not None:
                exc.opcode, exc.offset = where
            if exc.opcode is not None and exc.offset is not None:
                exc.add_note(f"graphpickle: refused at {exc.opcode}, byte {exc.offset}")
            raise
        if isinstance(exc, (IndexError, KeyError, struct.error)) and _raised_by_unpickler(exc):
            # The pure-Python unpickler's own slips on malformed input; the C one
            # (pickle.loads) says UnpicklingError, so restricted loading does too.
            raise pickle.UnpicklingError(_malformed(exc)) from exc
        # What an allowed constructor raised on the payload's arguments or state:
        # untrusted input fails with one family of exceptions, the cause chained.
        at = "" if where is None else f" at {where[0]}, byte {where[1]}"
        raise UnpicklingError(
            f"restricted loading stopped{at}: {type(exc).__name__}: {_cut(str(exc))}"
        ) from exc


class _GrowingReader:
    """A stream read so that memory grows as the bytes come: a length the
    payload declares (BINBYTES8 of 2**40) is read in pieces, where a file's own
    ``read(n)`` allocates ``n`` bytes first (the ``input`` budget, for streams;
    bytes in memory are sliced, never allocated ahead)."""

    __slots__ = ("_file",)
    _PIECE = 1 << 24

    def __init__(self, file: IO[bytes]) -> None:
        self._file = file

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n <= self._PIECE:
            return self._file.read(n)
        pieces = []
        while n > 0:
            piece = self._file.read(min(n, self._PIECE))
            if not piece:
                break
            pieces.append(piece)
            n -= len(piece)
        return b"".join(pieces)

    def readline(self) -> bytes:
        return self._file.readline()

    def tell(self) -> int:  # (for messages: where an opcode starts)
        return self._file.tell()


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(file: Any, start: int, end: int | None) -> tuple[str, int] | None:
    """The opcode that failed and its byte offset: the last opcode that starts
    at or before ``end``, where reading stopped (a walk of this pickle's
    opcodes, made only when a load fails)."""
    if end is None:
        return None
    found = None
    try:
        for opcode, _, position in pickletools.genops(bytes(file.getbuffer()[start:])):
            if start + (position or 0) > end:
                break
            found = (opcode.name, start + (position or 0))
    except ValueError:
        pass  # past the failure, the bytes may be anything
    return found


def _raising_frame(exc: BaseException) -> Any:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return None if tb is None else tb.tb_frame


def _raised_by_unpickler(exc: BaseException) -> bool:
    frame = _raising_frame(exc)
    return frame is not None and frame.f_code.co_filename in (pickle.__file__, __file__)


def _malformed(exc: BaseException) -> str:
    """What the C unpickler says of the same slip."""
    if isinstance(exc, IndexError):
        return "unpickling stack underflow"
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else "?"
        frame = _raising_frame(exc)
        if frame is not None and frame.f_code.co_name == "load" and isinstance(key, int):
            # A byte that is no opcode, shown as the C unpickler shows it.
            shown = chr(key) if 0x20 <= key < 0x7F else f"\\x{key:02x}"
            return f"invalid load key, '{shown}'."
        return f"Memo value not found at index {key}"
    return "pickle data was truncated"
