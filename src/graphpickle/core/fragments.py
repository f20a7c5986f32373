"""A by-value class sent again and again: pickled once, embedded as bytes.

A scheduler sends instances of the same notebook class in message after message.
Each message must carry the whole class (any worker may be new to it), and
pickling a class dict afresh costs ten by-reference messages. So the second
time a remembered class (see ``reducers``: its snapshot unchanged) goes into a
payload of the dask integration's ``dumps`` (``pickler.dump_to_bytes``), it is
pickled once on its own, into a *fragment*, and later payloads embed those
bytes: the class reduces to
``functools.partial(_pickle.loads, buffers=G)(fragment)``, which any receiver
with cloudpickle loads (graphpickle not needed). (``graphpickle.dumps`` keeps
cloudpickle's payloads, which do not depend on what was sent before.)

What must hold for the bytes to be what pickling now would write:

- **The objects it was built from are unchanged.** Each object the fragment's
  pickler memoized that the class or a function reaches (dicts, lists, sets,
  cells, by-value functions, descriptors, instances such as dataclass fields,
  with their ``__class__``) is *watched*: its snapshot (the objects it holds, by
  identity) is taken again before each use; so is how those instances' types
  reduce (their classes' ``__reduce__`` & co., copyreg's table). Objects the
  reduction made for itself are not (they change with nothing); immutable ones
  need not be. The functions and classes it names by reference must still be
  found under their names, the capture threshold and cloudpickle's by-value
  registry must be unchanged, and a reducer table change drops every fragment
  (``reducers._forget_fragments``). A failed check builds it again; after
  ``_MAX_REBUILDS`` failures the class goes the usual way for good (something in
  it changes between messages). The bytes are pickled twice, around the snapshot:
  a change between the two (another thread) means no fragment.
- **It shares the receiver's globals dicts.** Functions of one module pickled in
  one payload share one globals dict when loaded (cloudpickle's rule). The
  fragment refers to its modules' dicts as out-of-band buffers that the loader
  supplies (``buffers=G``: the very dicts the rest of the payload uses).
- **It shares nothing else with the payload.** If the payload also holds one of
  the fragment's watched objects (a helper function, a config dict, the class's
  own fields dict) or an immutable one the class holds as a value (a tuple, a
  method's code), or two fragments hold the same object, it would load twice.
  After the dump
  the payload's memo is checked; on an overlap the fragment is marked and the
  payload is written again without it (``Pickler.dump`` to a file never uses
  fragments: what it wrote cannot be taken back). The buffers the first attempt
  handed to ``buffer_callback`` are not handed again: the second attempt replays
  its answers (a class whose state holds buffers gets no fragment, so both
  attempts see the same buffers in the same order).

Not given a fragment (the class keeps its usual reduction): classes whose
state holds an object of a kind without a known snapshot, a by-value class
other than itself, a by-value module, a module that is a package (cloudpickle's
submodule search depends on ``sys.modules``), a function not remembered by
``reducers`` (a registered module's, or one whose captures warned), or buffers.
Only in default mode, with protocol 5, only after a class's second payload.
Memory: per remembered class, protocol and reducer lookup, the bytes, the
watched objects and their snapshots, freed with the class's entry.
"""

from __future__ import annotations

import _pickle
import array
import copyreg
import functools
import gc
import io
import struct
import sys
import types
from collections.abc import Callable, Iterable
from pickle import PickleBuffer
from typing import Any

from .. import _cloudpickle_internals as cp
from .._cloudpickle_internals import REGISTERED_BY_VALUE
from ..errors import PicklingError
from . import captures as _captures
from .native import speedups as _speedups
from .policy import class_reason, found_by_name, function_reason, module_reason
from .snapshots import function_snapshot, refers_to, same_objects

__all__ = ["Fragment", "MakePickler", "Recorder", "Replay", "build", "conflicting"]

MakePickler = Callable[[io.BytesIO, int, Callable[[PickleBuffer], Any]], Any]
"""``make(file, protocol, buffer_callback)``: a graphpickle pickler with
fragments off, and the reducer lookup of the payload's own pickler."""

RememberedNames = Callable[[types.FunctionType], "tuple[tuple[str, ...], Any] | None"]
"""The global names of a by-value function's remembered reduction, and the
reduction (``reducers`` keeps it, and never changes it); ``None`` if it is not
remembered, or is checked in ways a snapshot is not (its submodules)."""

HasReducer = Callable[[type], bool]
"""Whether a type has a reducer of its own (``register_reducer``, a lookup)."""

_MISSING = object()
_MAX_REBUILDS = 3
# Never changed in place: nothing to watch (a tuple's items are memoized and
# watched on their own).
_IMMUTABLE = frozenset(
    {str, bytes, int, float, complex, bool, type(None), types.CodeType, tuple, frozenset, range}
)
_DEFAULT_REDUCE = {
    "__reduce_ex__": object.__reduce_ex__,
    "__reduce__": object.__reduce__,
    "__getstate__": object.__getstate__,
}
_REDUCE_ATTRIBUTES = (
    "__reduce_ex__",
    "__reduce__",
    "__getstate__",
    "__getnewargs_ex__",
    "__getnewargs__",
)
# Immutable objects whose identity a payload keeps (the memo): one the class
# holds must not be in the rest of the payload too.
_IDENTIFIED = frozenset({tuple, frozenset, bytes, types.CodeType})


# What a watched object's snapshot holds (see state_of_in_python).
WATCH_MAPPING, WATCH_COLLECTION, WATCH_CELL, WATCH_FUNCTION = range(4)
WATCH_ATTRIBUTES, WATCH_FOUND, WATCH_REDUCE = range(4, 7)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class whose dict can change
_WATCHED_KINDS: dict[type, tuple[int, Any]] = {
    dict: (WATCH_MAPPING, None),
    types.MappingProxyType: (WATCH_MAPPING, None),
    list: (WATCH_COLLECTION, None),
    set: (WATCH_COLLECTION, None),
    types.CellType: (WATCH_CELL, None),
    staticmethod: (WATCH_ATTRIBUTES, (False, ("__func__",))),  # what cloudpickle reduces
    classmethod: (WATCH_ATTRIBUTES, (False, ("__func__",))),
    property: (WATCH_ATTRIBUTES, (False, ("fget", "fset", "fdel", "__doc__"))),
}
Watched = tuple[int, Any, Any]  # (kind, object, what the kind needs)


def _items(obj: Any, out: list[Any]) -> None:
    if isinstance(obj, dict) or not isinstance(obj, list | set | frozenset):
        pairs = list(obj.items())
        out.append(len(pairs))
        for key, value in pairs:
            out += (key, value)
    else:
        members = list(obj)
        out.append(len(members))
        out += members


def _found(module_name: str, path: tuple[str, ...], missing: Any) -> Any:
    found: Any = sys.modules.get(module_name, missing)
    for name in path:
        if found is missing:
            break
        found = getattr(found, name, missing)
    return found


def state_of_in_python(watched: tuple[Watched, ...], missing: Any) -> tuple[Any, ...]:
    """The objects each watched object holds now, by identity, in one flat tuple:
    a mapping's length, keys and values; a list's or set's length and members; a
    cell's contents; a function's snapshot; an object's ``__dict__`` (as a
    mapping) and named attributes; what a module name and attribute path find.
    (``_speedups.state_of`` is the same in C.)"""
    out: list[Any] = []
    for kind, obj, extra in watched:
        if kind in (WATCH_MAPPING, WATCH_COLLECTION):
            _items(obj, out)
        elif kind == WATCH_CELL:
            try:
                out.append(obj.cell_contents)
            except ValueError:  # an empty cell
                out.append(missing)
        elif kind == WATCH_FUNCTION:
            out.append(function_snapshot(obj, extra, missing))
        elif kind == WATCH_ATTRIBUTES:
            has_dict, names = extra
            if has_dict:
                _items(obj.__dict__, out)
            out += (getattr(obj, name, missing) for name in names)
        elif kind == WATCH_FOUND:
            module_name, path = extra
            out.append(_found(module_name, path, missing))
        elif kind == WATCH_REDUCE:
            names, table = extra
            heap = [base for base in obj.__mro__ if base.__flags__ & _HEAP_TYPE]
            for name in names:
                out.append(next((b.__dict__[name] for b in heap if name in b.__dict__), missing))
            out.append(table.get(obj, missing))
        else:
            raise ValueError(f"state_of: a watched entry of kind {kind} is malformed")
    return tuple(out)


state_of: Callable[[tuple[Watched, ...], Any], tuple[Any, ...]] = (
    state_of_in_python if _speedups is None else _speedups.state_of
)


class Fragment:
    """A class pickled on its own, and what its bytes were built from."""

    __slots__ = (
        "conflicted", "data", "generation", "globals_order", "held", "ids", "pointers",
        "rebuilds", "registered", "snapshot", "watched",
    )  # fmt: skip

    def __init__(self, watched: tuple[Watched, ...], held: tuple[Any, ...]) -> None:
        self.data = b""
        self.globals_order: tuple[dict[str, Any], ...] = ()  # a module dict per NEXT_BUFFER
        self.watched = watched
        self.snapshot = state_of(watched, _MISSING)
        # The objects a payload must not hold besides (those found by name may):
        # the watched ones and the immutable ones the class holds (held alive here,
        # so that their ids stay theirs).
        self.held = held
        self.ids = frozenset(
            [id(obj) for kind, obj, _ in watched if kind != WATCH_FOUND] + [id(obj) for obj in held]
        )
        self.pointers = pointer_table(self.ids)
        self.generation = _captures._generation
        self.registered = frozenset(REGISTERED_BY_VALUE)
        self.conflicted = False
        self.rebuilds = 0

    def current(self) -> bool:
        """Whether pickling the class now would write these bytes."""
        if self.generation != _captures._generation or self.registered != REGISTERED_BY_VALUE:
            return False
        try:
            now = state_of(self.watched, _MISSING)
        except Exception:  # an attribute that raises now: build it again (or go whole)
            return False
        return same_objects(now, self.snapshot)

    def reduction(self, globals_for: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
        """The class's reduction in a payload whose functions of a module share
        ``globals_for(module_dict)``."""
        supplied = tuple([globals_for(module_globals) for module_globals in self.globals_order])
        return (functools.partial(_pickle.loads, buffers=supplied), (self.data,))


def build(
    cls: type,
    protocol: int,
    make: MakePickler,
    previous: Fragment | None,
    remembered_names: RememberedNames,
    has_reducer: HasReducer,
) -> Fragment | None:
    """Pickle ``cls`` on its own; ``None`` if it cannot be given a fragment
    (``previous``: the fragment this one replaces, if any)."""
    rebuilds = 0 if previous is None else previous.rebuilds + 1
    if rebuilds > _MAX_REBUILDS:
        return None
    seeds = _module_dicts(cls)
    for _ in range(3):  # a function of another module: add its dict and pickle again
        built = _pickle_alone(cls, protocol, make, seeds)
        if built is None:
            return None
        data, order, objects, missing = built
        if not missing:
            break
        found = {id(g): g for g in _function_globals(objects)}
        if any(key not in found for key in missing):
            return None
        seeds.extend(found[key] for key in missing)
    else:
        return None
    fragment = _describe(cls, objects, remembered_names, has_reducer)
    if fragment is None:
        return None
    # The snapshot was taken after the bytes were written: pickled again after it,
    # the same bytes say that nothing changed in between (another thread).
    again = _pickle_alone(cls, protocol, make, seeds)
    if again is None or again[0] != data:
        return None  # changing while it is pickled: it goes whole from now on
    fragment.data, fragment.globals_order, fragment.rebuilds = data, order, rebuilds
    return fragment


def _module_dicts(cls: type) -> list[dict[str, Any]]:
    dicts = []
    module = sys.modules.get(cls.__module__)
    if module is not None:
        dicts.append(vars(module))
    for value in vars(cls).values():
        func = getattr(value, "__func__", getattr(value, "fget", value))
        if isinstance(func, types.FunctionType) and all(func.__globals__ is not d for d in dicts):
            dicts.append(func.__globals__)
    return dicts


def _function_globals(objects: Iterable[Any]) -> list[dict[str, Any]]:
    return [obj.__globals__ for obj in objects if type(obj) is types.FunctionType]


def _pickle_alone(
    cls: type, protocol: int, make: MakePickler, seeds: list[dict[str, Any]]
) -> tuple[bytes, tuple[dict[str, Any], ...], list[Any], list[int]] | None:
    # A module's functions get a placeholder for their globals dict (the C
    # pickler writes NEXT_BUFFER for it, the loader's buffers= supplies the dict).
    placeholders = {id(g): PickleBuffer(bytearray(1)) for g in seeds}
    owners = {id(placeholders[id(g)]): g for g in seeds}
    order: list[dict[str, Any]] = []
    other_buffers: list[PickleBuffer] = []

    def callback(buffer: PickleBuffer) -> bool:
        owner = owners.get(id(buffer))
        if owner is None:
            other_buffers.append(buffer)
            return True
        order.append(owner)
        return False

    out = io.BytesIO()
    pickler = make(out, protocol, callback)
    pickler._state.globals_ref = dict(placeholders)
    try:
        pickler.dump(cls)
    except Exception:
        return None  # the payload's own pickling says what is wrong
    if other_buffers:
        return None
    missing = [k for k, v in pickler._state.globals_ref.items() if type(v) is not PickleBuffer]
    objects = [obj for _, obj in pickler.memo.copy().values()]
    pickler.clear_memo()
    return out.getvalue(), tuple(order), objects, missing


def _describe(
    cls: type, objects: list[Any], remembered_names: RememberedNames, has_reducer: HasReducer
) -> Fragment | None:
    """What to watch and check among the objects the fragment's pickler memoized."""
    memoized = {id(obj) for obj in objects}
    # The remembered reductions of its functions hold some of what the reduction made.
    reductions = [remembered_names(obj) for obj in objects if type(obj) is types.FunctionType]
    made_here = _made_by_the_reduction(objects, [r[1] for r in reductions if r is not None])
    watched: list[Watched] = []
    default_reduced: dict[type, None] = {}
    for obj in objects:
        kind = type(obj)
        if kind in _IMMUTABLE:
            continue
        if obj is cls or kind is PickleBuffer:
            continue
        if isinstance(obj, type) and obj in cp.BUILTIN_TYPES:
            continue  # types.CodeType & co: cloudpickle names them
        if kind is types.FunctionType and id(obj.__code__) in memoized:  # by value
            remembered = remembered_names(obj)
            if remembered is None:
                return None
            watched.append((WATCH_FUNCTION, obj, remembered[0]))
        elif (
            kind is types.FunctionType
            or isinstance(obj, type)
            # a module's C function (_thread.get_ident)
            or (kind is types.BuiltinFunctionType and isinstance(obj.__self__, types.ModuleType))
        ):
            if not _by_reference(obj):
                return None
            path = tuple(obj.__qualname__.split("."))
            watched.append((WATCH_FOUND, obj, (obj.__module__, path)))
        elif kind is types.ModuleType:
            if module_reason(obj) is not None or getattr(obj, "__package__", None):
                return None
        elif id(obj) in made_here:
            continue
        elif kind in _WATCHED_KINDS:
            watch, extra = _WATCHED_KINDS[kind]
            watched.append((watch, obj, extra))
        elif kind in cp.TYPE_REDUCERS:
            if kind.__module__ != "dataclasses":  # its field sentinels go by name
                return None
        elif _reduced_by_default(kind, has_reducer):
            slots = tuple(copyreg._slotnames(kind))  # type: ignore[attr-defined]
            names = ("__class__", *slots)  # __class__ can be assigned
            watched.append((WATCH_ATTRIBUTES, obj, (hasattr(obj, "__dict__"), names)))
            default_reduced[kind] = None
        else:
            return None
    # How those types reduce: a __reduce__ assigned or a copyreg registration made
    # later changes it (graphpickle's and a lookup's tables drop every fragment).
    for kind in default_reduced:
        watched.append((WATCH_REDUCE, kind, (_REDUCE_ATTRIBUTES, copyreg.dispatch_table)))
    if refers_to(tuple(obj for _, obj, _ in watched), cls):
        return None  # the entry would keep the class alive
    held = _immutables_held(cls, watched, memoized)
    try:
        return Fragment(tuple(watched), tuple(held))
    except Exception:  # a watched attribute that raises: no snapshot to compare with
        return None


def _by_reference(obj: Any) -> bool:
    """Whether the function or class ``obj`` is pickled by name, and found under
    it now (the policy's rules; a module's C function has only the second)."""
    if type(obj) is types.FunctionType:
        return function_reason(obj) is None
    if isinstance(obj, type):
        return class_reason(obj) is None and found_by_name(obj, obj.__module__, obj.__qualname__)
    return isinstance(obj.__module__, str) and found_by_name(obj, obj.__module__, obj.__qualname__)


def _immutables_held(cls: type, watched: list[Watched], memoized: set[int]) -> list[Any]:
    """The immutable objects of the fragment the class and its objects hold as
    values (a tuple attribute, a method's code and defaults): their identity is
    the payload's too (a code object's own tuples are not: nothing sees them).
    A str is left out: interned names are shared by everything."""
    roots: list[Any] = list(vars(cls).values())
    for watch, obj, _ in watched:
        if watch == WATCH_FUNCTION:
            roots += (obj.__code__, obj.__defaults__, *(obj.__kwdefaults__ or {}).values())
        elif watch not in (WATCH_FOUND, WATCH_REDUCE):
            roots += gc.get_referents(obj)
    held: dict[int, Any] = {}
    while roots:
        value = roots.pop()
        if type(value) in _IDENTIFIED and id(value) in memoized and id(value) not in held:
            if _not_a_singleton(value):
                held[id(value)] = value
            if type(value) is tuple or type(value) is frozenset:
                roots.extend(value)
    return list(held.values())


def _not_a_singleton(obj: Any) -> bool:
    """Whether ``obj``'s identity is its own: CPython shares the empty tuple and
    frozenset and one-byte bytes between everything that holds them."""
    if type(obj) is types.CodeType:
        return True
    return len(obj) > (1 if type(obj) is bytes else 0)


def _made_by_the_reduction(objects: list[Any], holders: list[Any]) -> set[int]:
    """The ids of the memoized objects that only other memoized objects made by
    the reduction hold (its tuples, state dicts, copies), or ``holders`` (the
    remembered reductions that hand them out again): nothing else can change
    them or hold them. The others are held from outside (a reference count above
    what those references explain), or by one of those."""
    inside: dict[int, int] = dict.fromkeys(map(id, objects), 0)
    for obj in (*objects, *holders):
        for referent in gc.get_referents(obj):
            if id(referent) in inside:
                inside[id(referent)] += 1
    # A fresh object, counted in the same loop, has only the list's references.
    objects.append(object())
    counts = [sys.getrefcount(obj) for obj in objects]
    baseline = counts.pop()
    objects.pop()
    held = [
        obj
        for obj, count in zip(objects, counts, strict=True)
        if count - baseline > inside[id(obj)]
    ]
    outside = {id(obj) for obj in held}
    while held:  # what an object held from outside holds is held from outside too
        for referent in gc.get_referents(held.pop()):
            if id(referent) in inside and id(referent) not in outside:
                outside.add(id(referent))
                held.append(referent)
    return {key for key in inside if key not in outside}


def _reduced_by_default(kind: type, has_reducer: HasReducer) -> bool:
    """Whether instances of ``kind`` pickle as ``object.__reduce_ex__`` does,
    from their ``__dict__`` and slots only, with a class found by name."""
    return (
        all(getattr(kind, name) is default for name, default in _DEFAULT_REDUCE.items())
        and not hasattr(kind, "__getnewargs_ex__")
        and not hasattr(kind, "__getnewargs__")
        and kind not in copyreg.dispatch_table
        and not has_reducer(kind)
        and class_reason(kind) is None
    )


def conflicting(pickler: Any, used: list[Fragment]) -> bool:
    """Whether the payload ``pickler`` just wrote also holds an object one of
    its fragments holds; each such fragment is marked not to be used again."""
    found = False
    for i, fragment in enumerate(used):
        holds = _memo_holds(pickler, fragment)
        # Two fragments are two pickles: an object both hold would load twice.
        shared = any(not fragment.ids.isdisjoint(other.ids) for other in used[i + 1 :])
        if holds or shared:
            fragment.conflicted = True
            found = True
    return found


def memo_holds_in_python(pickler: Any, ids: frozenset[int]) -> bool:
    """Whether ``pickler``'s memo holds an object whose id is in ``ids``."""
    return not ids.isdisjoint(pickler.memo.copy())


def pointer_table(ids: Iterable[int]) -> bytes:
    """``ids`` as ``_speedups.memo_holds`` reads them: sorted native pointers."""
    return array.array(_POINTER_CODE, sorted(ids)).tobytes()


_POINTER_CODE = "Q" if struct.calcsize("P") == 8 else "I"


def _memo_reader_agrees() -> bool:
    """Whether ``_speedups.memo_holds`` reads a C pickler's memo as
    ``Pickler.memo.copy()`` does (see _speedups.c: it reads the table in place)."""
    if _speedups is None:
        return False
    held = [[], {}, "text"]
    pickler = _pickle.Pickler(io.BytesIO(), 5)
    pickler.dump(held)
    ids = set(pickler.memo.copy())
    return (
        len(ids) == 4
        and all(_speedups.memo_holds(pickler, pointer_table([key])) is True for key in ids)
        and _speedups.memo_holds(pickler, pointer_table(ids | {id(ids)})) is True
        and _speedups.memo_holds(pickler, pointer_table([id(ids)])) is False
    )


#: Whether the C pickler's memo is read in place; memo.copy() otherwise.
memo_read_in_place = _memo_reader_agrees()


def _memo_holds(pickler: Any, fragment: Fragment) -> bool:
    """Whether ``pickler``'s memo holds one of the objects ``fragment`` holds."""
    if memo_read_in_place:
        holds: bool | None = _speedups.memo_holds(pickler, fragment.pointers)  # type: ignore[union-attr]
        if holds is not None:  # (None: not a C pickler's memo as _speedups knows it)
            return holds
    return memo_holds_in_python(pickler, fragment.ids)


class Recorder:
    """A ``buffer_callback`` that remembers the user's answers, in order."""

    __slots__ = ("answers", "callback")

    def __init__(self, callback: Callable[[PickleBuffer], Any]) -> None:
        self.callback = callback
        self.answers: list[Any] = []

    def __call__(self, buffer: PickleBuffer) -> Any:
        answer = self.callback(buffer)
        self.answers.append(answer)
        return answer


class Replay:
    """A ``buffer_callback`` that gives the answers of an earlier attempt at the
    same payload, without calling the user's callback again."""

    __slots__ = ("answers", "next")

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.next = 0

    def __call__(self, buffer: PickleBuffer) -> Any:
        if self.next >= len(self.answers):
            raise _changed_while_written()
        answer = self.answers[self.next]
        self.next += 1
        return answer

    def check_all_given(self) -> None:
        """After the payload written again: it must have handed out as many buffers."""
        if self.next != len(self.answers):
            raise _changed_while_written()


def _changed_while_written() -> PicklingError:
    return PicklingError(
        "the object changed while graphpickle wrote its payload again (to leave out a "
        "class fragment, see graphpickle.core.fragments): the buffers handed to "
        "buffer_callback the first time no longer match; pickle it again"
    )
