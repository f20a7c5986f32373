"""A classes' part's objects, reused by the receiver while nothing they are made of changed.

A task whose classes go first (``classes_first.py``) names a classes' part the
receiving connection holds. Loading that part for every task makes every
method, every dataclass ``Field`` and the class state anew: most of the task's
load. A fresh load would make the same objects again (objects of the same
values: tasks may share them, the one difference from a fresh cloudpickle load
allowed, identity across tasks) as long as nothing the last load made has
changed since, every global the part names is still the object that load
found, and the load calls nothing that could return something else or run
code of the user's. So the receiver reuses them while that holds.

**The walk** (once per part, at its second use: a part seen once is loaded
with its task) happens *inside* the part's load. A ``find_class`` of its own
(:class:`_Loading`) hands the load, in place of cloudpickle's
``_class_setstate``, a function that walks the state first and then applies
it: what the state holds was made by this load and is reached by no other
thread until it is on the class (a task running in another thread may change
the class at any time). The walk writes down *probes*, with what each reads
then: for each object the load made, what of it could change (every settable
field of a function, read from the function itself; a dict's or list's size and
items; a set's whole table and where ``pop()`` starts; a cell's contents; a
plain object's class, ``__dict__`` and slots; a classmethod's or staticmethod's
function and ``__dict__``; what a mappingproxy shows); for each global the
part names, each module a load imports (with the packages above it, and what
``__import__`` reads of its spec) and each lookup it makes, what it found, read
by dict lookups only (a global found through code, a module's ``__getattr__``
say, is not reused). Once the
load is over each class's ``__dict__`` is read, and must hold what its state
put there (else another thread changed it since, and the part is walked again
at the next task: :class:`_Raced`).

**It fails closed.** An object of a kind whose whole state the walk does not
know (a property, an instance of a C type or of a class with hooks such as
``__setstate__`` or ``__getattr__``, a class with a metaclass, a module made
by value, a dict key whose class hashes in Python); a reduction whose callable
is not one known to make a new object from its arguments (``_roles``: a
``getattr`` may return what a fresh load would look up again), found by a
symbolic walk of the part's opcodes (``opcode_walk.py``); a maker given what
its signature does not allow (``_SIGNATURES``: exact types, and made by this
load where it copies from or writes into it); a NEWOBJ of what is not a plain
class, or a BUILD of what a NEWOBJ did not make (or a second); an object made
and not memoized, or made (reached or not) of a kind whose making runs code of
the user's; a class whose making runs code (an ``__init_subclass__``); a part
that is not exactly one pickle, or whose load keeps code blocks on the
connection; any error of the walk: each makes the part not
reusable, and it is loaded with its task, as before (once: the walking task's
part loads after the walked load).

**The check** (every later task). ``_speedups.held_unchanged`` reads the probes
in C and compares what they read with what they read in the walk, by identity
(sizes by value), stopping at the first change. If anything changed, the part
is loaded and walked again (after a few changes in a row that came before the
walk paid off, or a walk that refused the part, it rests: it is loaded with
its task for a while, then walked again).

**The task's part** then loads with an unpickler whose memo is a copy of the
part's (``Unpickler.memo``): the task refers to the part's objects as one
unpickler would have it. CPython does not carry the memo's length over with the
copy, so the unpickler first loads a pickle that memoizes that many Nones
(:func:`_memo_prefix`); :data:`SEEDING` checks at import that this interpreter
loads a task's part this way as one unpickler loads both, and nothing is reused
if it does not. A task's part that gets the globals dict of one of the part's
functions (the task's own function of the same module: a payload has one such
dict per module) writes its function's globals into that dict as it loads;
reused, the dict would be every task's, and a task's load would reset a global
another task running had written. Such a task loads the part afresh, and so
does one that gets anything else in the part's memo the classes do not reach
(every object a pickle makes is memoized, or is an int, a float or a bool:
what is left is the reductions' arguments and states, which are not probed).

On by default (``GRAPHPICKLE_HELD_CLASSES=0`` turns it off, and so does
``GRAPHPICKLE_NO_CACHE=1``): fourteen reviews found ways a reused part could
differ from a fresh load, each now a test that fails without its fix
(docs/performance.md); the fifteenth found none, only losses of reuse. What
differs from a fresh load, on purpose (README, "Limits"): tasks share the
part's objects, so a change a task makes to them while another task runs is
seen by it (as a class attribute is, with cloudpickle's one class per
process), and what one task returns of them the next task's classes hold; a
reused part's globals are read from the modules dict, not imported again (no
``pickle.find_class`` audit event, no ``__import__`` call); and what a fresh
load drops (the class attributes it replaces) is not dropped again.
"""

from __future__ import annotations

import _pickle
import builtins
import copy
import functools
import gc
import importlib.machinery
import io
import operator
import pickle
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from .. import _cloudpickle_internals as cp
from .._switches import HELD_CLASSES
from . import blocks, connection, opcode_walk
from .native import speedups

__all__ = [
    "ENABLED", "MAX_HELD", "MAX_PART", "SEEDING", "NotReusable", "load", "load_together",
]  # fmt: skip

#: A receiver keeps the objects of at most this many classes' parts (the newest).
MAX_HELD = 16
#: A bigger classes' part is loaded for every task.
MAX_PART = 64 * 1024
#: A walk whose objects served this many tasks paid for itself: the change
#: that ends them is no strike. (A two-field dataclass's walk costs about 3 ms,
#: some 50 loads of its part; a reuse saves some 20 us of one.)
_PAYS_OFF = 128
#: Walks in a row that did not pay off (or raced) before the part rests: it is
#: loaded with its task for _FIRST_REST tasks, then walked again; each rest in a
#: row twice as long as the last, up to _LAST_REST (a part whose objects every
#: task changes costs about one walk per _LAST_REST tasks, some 1%, and a worker
#: whose tasks change it only for a while reuses it again afterwards).
_MAX_STRIKES = 3
_FIRST_REST = 128
_LAST_REST = 4096

#: The kinds of probe (_speedups.c's PROBE_..., in its order).
(
    _ATTR, _ITEMS, _CLASS_ITEMS, _LIST, _CELL, _GLOBAL, _MODULE, _ANNOTATIONS, _SET, _FUNCTION, _PLAIN,
    _MODULES, _ABSTRACT, _SUBCLASSES, _KEY, _TUPLE,
) = range(16)  # fmt: skip

#: Objects nothing can change (a frozenset: nothing but what it holds; a tuple's
#: items are probed: making a code object of it interns strs in it, in place).
_ATOMS = frozenset({
    str, bytes, int, float, complex, bool, type(None), type(...), type(NotImplemented),
    types.CodeType, types.GetSetDescriptorType, types.MemberDescriptorType,
    types.WrapperDescriptorType, types.MethodDescriptorType,
})  # fmt: skip

#: What a class may define that would run code of the user's when one of its
#: instances is made by a load, or when a probe reads its attributes.
_HOOKS = frozenset({
    "__getattribute__", "__getattr__", "__setattr__", "__delattr__", "__class__", "__new__",
    "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__getnewargs__",
    "__getnewargs_ex__", "__del__",
})  # fmt: skip

#: The C module (the probes are read in C; nothing is reused without it).
_speedups: Any = speedups
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement
_IMMUTABLETYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE (3.10+): setattr on it raises
_MISSING = object()  # what a probe reads where there is nothing (walked: nothing to walk)


class NotReusable(Exception):
    """A classes' part made an object whose whole state the walk does not know."""


def _function_attributes() -> tuple[tuple[str, bool], ...]:
    """``(name, settable)`` of each attribute a function's type defines in C,
    found on this interpreter, not listed: an attribute a new Python adds is
    probed too."""

    def probe() -> None: ...

    found: dict[str, bool] = {}
    for klass in type(probe).__mro__:
        for name, descriptor in vars(klass).items():
            kind = type(descriptor)
            if name in found or kind not in (
                types.GetSetDescriptorType,
                types.MemberDescriptorType,
            ):
                continue
            try:
                value = getattr(probe, name)
            except AttributeError:
                found[name] = True  # (unset on a new function: probed all the same)
                continue
            try:
                setattr(probe, name, value)
                found[name] = True
            except (AttributeError, TypeError):
                found[name] = False  # read-only (__globals__, __closure__, __class__...)
    return tuple(found.items())


_FUNCTION_ATTRIBUTES = _function_attributes()
_FUNCTION_DICT = vars(types.FunctionType)["__dict__"]
#: Whether the C module reads every settable attribute of a function from its
#: fields, in one probe (else each is read by name).
_FUNCTION_FIELDS = _speedups is not None and set(_speedups.FUNCTION_FIELDS) == {
    name for name, settable in _FUNCTION_ATTRIBUTES if settable
}


class _Walk:
    """The probes of what a part's load made (see the module's docstring), and
    what they read, each read when it was made."""

    def __init__(self) -> None:
        # What a fresh load would find, not make: the builtins a loaded
        # function's globals get, cloudpickle's dataclass sentinels, and the
        # part's globals (:meth:`find`, as the load finds them).
        self.seen: set[int] = {id(_MISSING)}
        self.found: set[int] = set()
        self.kept: list[Any] = []  # (what is seen stays alive: its id stays its own)
        for obj in (builtins, vars(builtins), cp.BUILTINS_OF_CLOUDPICKLE,
                    *cp.DATACLASS_SENTINELS.values()):  # fmt: skip
            self.find(obj)
        self.probes: list[tuple[Any, ...]] = []
        self.reading: list[Any] = []
        #: The classes reached, and those whose state the load applied (with it).
        self.classes: dict[int, type] = {}
        self.applied: dict[int, tuple[type, dict[str, Any]]] = {}
        #: The classes of plain objects, and the classes whose dicts are probed
        #: for their hooks (:meth:`hooks`).
        self.kinds: dict[int, type] = {}
        self.hooked: set[int] = set()
        self.mros: set[int] = set()
        self.subclassed: set[int] = set()
        #: cloudpickle's tracker's entries (by id).
        self.entries: Any = None
        #: The bases the part's class skeletons are made with.
        self.bases: list[type] = []
        #: The ids of what the load made (:func:`_made_by`).
        self.made_ids: set[int] = set()
        self.packages_read: set[str] = set()
        self.specs: set[int] = set()
        #: The digests of the blocks the part names (the connection must hold them).
        self.blocks: list[tuple[bytes, type]] = []
        # What find_class imports from and what cloudpickle's subimport returns
        # from must be one dict (the interpreter's and the one sys.modules
        # names): the probes read it.
        named, interpreter = self.read_all(_MODULES, vars(sys))
        if named is not interpreter:
            raise NotReusable("sys.modules is not the interpreter's modules")
        # cloudpickle's class trackers, which the walk asks as a load does
        # (each read in C, its class and its __dict__: getattr would run what a
        # class swapped in, or a key of the user's, defines): weakref's own
        # classes, str-keyed; the entries by id kept for tracked().
        for name, kind in zip(cp.TRACKER_NAMES, _TRACKER_KINDS, strict=True):
            tracker = self.read(_KEY, cp.CLOUDPICKLE_GLOBALS, name)
            found, attributes = self.read_all(_PLAIN, tracker, ())
            if found is not kind or type(attributes) is not dict or not _str_keyed(attributes):
                raise NotReusable("cloudpickle's class trackers")
            if kind is weakref.WeakValueDictionary:
                self.entries = self.read(_KEY, attributes, "data")

    def find(self, obj: Any) -> None:
        """``obj`` is found by the load (a global), not made by it."""
        if id(obj) in self.seen and id(obj) not in self.found:
            raise NotReusable("a global the walk took for made")
        self.seen.add(id(obj))
        self.found.add(id(obj))
        self.kept.append(obj)

    def read(self, *probe: Any) -> Any:
        """Probe ``probe`` from now on, and what it reads now."""
        return self.read_all(*probe)[0]

    def read_all(self, *probe: Any) -> tuple[Any, ...]:
        """Probe ``probe`` from now on, and all it reads now (the baseline)."""
        reading: tuple[Any, ...] = _speedups.held_snapshot((probe,), _MISSING)
        self.probes.append(probe)
        self.reading.extend(reading)
        return reading

    def walk(self, obj: Any) -> None:
        if id(type(obj)) in _ATOM_IDS or id(obj) in self.seen or _immutable_class(obj):
            return
        self.seen.add(id(obj))
        self.kept.append(obj)
        handler = _HANDLER_BY_ID.get(id(type(obj)))
        if handler is None:
            self.plain_class(type(obj))
            handler = _Walk.plain
        handler(self, obj)

    def walk_all(self, objects: Any) -> None:
        for obj in objects:
            self.walk(obj)

    def tuple_items(self, items: tuple[Any, ...]) -> None:
        # (Its items, which making a code object of it swaps for interned strs
        # in place; and 3.14+'s kept hash: a tuple a task hashed would skip its
        # items' __hash__ in every later task.)
        if items:
            self.read(_TUPLE, items)
        self.walk_all(items)

    def items(self, mapping: dict[Any, Any]) -> None:
        self.read(_ITEMS, mapping)
        self.hashed(mapping.keys())
        self.walk_all([*mapping.keys(), *mapping.values()])

    def made(self, obj: Any) -> None:
        """Check an object the load made that the classes do not reach (a
        reduction's argument or state): it is of a kind whose making runs no
        code of the user's (a plain object's class is checked again once the
        load is over), and its keys hash in C."""
        kind = type(obj)
        if id(obj) in self.seen or id(kind) in _ATOM_IDS or _immutable_class(obj):
            return
        if id(kind) in _HASHING:
            self.hashed(obj)
        elif kind is type:
            self.cls(obj)  # (a class made by the load: tracked, its state applied)
        elif id(kind) not in _HANDLER_BY_ID:
            self.plain_class(kind)

    def hashed(self, keys: Any) -> None:
        """A fresh load hashes each key (and compares equal ones): only keys
        that hash in C (:func:`_hashes_in_c`), whose hashing runs no code of the
        user's a reused part would skip."""
        for key in keys:
            if not _hashes_in_c(key):
                raise NotReusable(type(key))

    def frozen_mapping(self, mapping: Any) -> None:
        self.hashed(mapping.keys())
        self.walk_all([*mapping.keys(), *mapping.values()])

    def frozen_set(self, items: frozenset[Any]) -> None:
        self.hashed(items)
        self.walk_all(items)

    def mappingproxy(self, proxy: types.MappingProxyType[Any, Any]) -> None:
        # It cannot change what it shows: what it shows can (an exact dict only).
        shown = gc.get_referents(proxy)
        if len(shown) != 1 or type(shown[0]) is not dict:
            raise NotReusable(types.MappingProxyType)
        self.walk(shown[0])

    def list(self, items: list[Any]) -> None:
        self.read(_LIST, items)
        self.walk_all(list(items))

    def set(self, items: set[Any]) -> None:
        # (Its items and their order are not all of it: pop() starts where the
        # last pop left off, and an add may skip a slot a discard left. The
        # probe reads the whole table where it can: else no set is reused.)
        if not _SETS_PROBED:
            raise NotReusable(set)
        self.read(_SET, items)
        self.hashed(list(items))
        self.walk_all(list(items))

    def cell(self, cell: types.CellType) -> None:
        contents = self.read(_CELL, cell)
        if contents is not _MISSING:
            self.walk(contents)

    def module(self, module: types.ModuleType) -> None:
        # A module a fresh load would import by name; not one made by value.
        namespace = vars(module)
        if not _str_keyed(namespace):
            raise NotReusable(module)
        name = namespace.get("__name__")
        if type(name) is not str or self.imported(name) is not module:
            raise NotReusable(module)

    def imported(self, name: str) -> Any:
        """What ``__import__(name)`` leaves in sys.modules under ``name``, read
        with the packages above it (:meth:`packages`)."""
        self.packages(name)
        module, spec = self.read_all(_MODULE, name)
        self.spec(spec)
        return module

    def packages(self, name: str) -> None:
        """Read each package above the module ``name``: ``__import__(name)``
        imports one that is missing, and fails on one blocked by None."""
        parts = name.split(".")
        for end in range(1, len(parts)):
            package = ".".join(parts[:end])
            if package not in self.packages_read:
                self.packages_read.add(package)
                module, spec = self.read_all(_MODULE, package)
                if module is _MISSING:  # (not imported, or not a module the probe reads)
                    raise NotReusable(package)
                self.spec(spec)

    def finds(self, module: str, names: tuple[str, ...]) -> Any:
        """What ``find_class(module, ".".join(names))`` finds, read as the
        probe reads it (dict lookups only; missing where those cannot)."""
        self.packages(module)  # (find_class imports the module first)
        _, spec, found = self.read_all(_GLOBAL, module, names)
        self.spec(spec)
        return found

    def spec(self, spec: Any) -> None:
        """What ``__import__`` reads of a module's ``__spec__`` (the probes read
        the spec from the module's ``__dict__``): ``_initializing``, missing or
        False (true, a fresh load waits for another thread's import), read
        from a ModuleSpec's ``__dict__`` (probed, with its class's)."""
        if spec is None or id(spec) in self.specs:
            return
        if spec is _MISSING or type(spec) is not _MODULE_SPEC:
            # (missing from the module's dict, or a dict the probe does not
            # read: __import__'s getattr then goes on, to a __getattr__...)
            raise NotReusable(spec)
        self.specs.add(id(spec))
        self.kept.append(spec)
        self.hooks(_MODULE_SPEC)  # (first: then what is checked is what is probed)
        if any(name in _dict(klass) for klass in _mro(_MODULE_SPEC)[:-1] for name in _SPEC_HOOKS):
            raise NotReusable(_MODULE_SPEC)  # (a hook already there: object's is C)
        attributes = self.read_all(_PLAIN, spec, ())[1]
        if type(attributes) is not dict or not _str_keyed(attributes):
            raise NotReusable(spec)
        self.read(_ITEMS, attributes)
        if attributes.get("_initializing", False) is not False:
            raise NotReusable("a module being imported")

    def cls(self, cls: type) -> None:
        # A class cloudpickle tracks (a fresh load returns it, then applies its
        # state). It stays tracked while it is held: the tracker replaces no
        # class it holds, and holds this one weakly. What its state holds is
        # walked where the load applies it (:meth:`class_state`), and its
        # __dict__ read once the load is over (:meth:`published`).
        tracker = cp.tracked_id(cls) if type(cls) is type else None
        if tracker is None or cp.CLASSES_BY_TRACKER_ID.get(tracker) is not cls:
            raise NotReusable(cls)
        self.classes[id(cls)] = cls
        self.tracked(tracker)

    def tracked(self, tracker: str) -> None:
        """Probe the tracker's entry under ``tracker``, which a fresh load
        reads to find the class (a worker that drops it gets a new class from
        a fresh load)."""
        if type(self.entries) is not dict or self.read(_KEY, self.entries, tracker) is _MISSING:
            raise NotReusable(tracker)

    def subclasses(self, cls: type) -> None:
        """Probe ``cls``'s subclasses (setting an attribute on a class, as a
        fresh load does each of its state's, looks the name up along each
        subclass's MRO): none but classes this load applied a state to (probed
        as ``cls`` is). Another (a task's, not yet collected) is walked again
        later: probed, it would be kept alive."""
        if not _SUBCLASSES_PROBED:
            raise NotReusable("a class's subclasses are not probed on this Python")
        if id(cls) in self.subclassed:
            return
        self.subclassed.add(id(cls))
        self.read(_SUBCLASSES, cls)
        subclasses: list[type] = type.__subclasses__(cls)
        for subclass in subclasses:
            if id(subclass) not in self.applied:
                raise _Raced(subclass)
            self.subclasses(subclass)

    def class_state(self, cls: Any, state: Any) -> None:
        """Walk what ``_class_setstate(cls, state)`` is about to put on ``cls``:
        made by this load, and seen by no other thread until it is on the class."""
        if type(state) is not tuple or len(state) != 2 or type(state[0]) is not dict:
            raise NotReusable("a class state of another shape")
        clsdict, slotstate = state
        if type(slotstate) is not dict or slotstate or id(cls) in self.applied:
            raise NotReusable("a class state of another shape")
        if not _str_keyed(clsdict) or "_abc_impl" in clsdict:
            # (_class_setstate calls cls.register(...) for each item of this one)
            raise NotReusable("a class state applied by more than setattr")
        self.walk(cls)
        if self.classes.get(id(cls)) is not cls:
            raise NotReusable(cls)
        self.applied[id(cls)] = (self.classes[id(cls)], clsdict)
        self.walk_all([*clsdict.keys(), *clsdict.values()])

    def published(self) -> None:
        """Once the load is over: each class's __dict__, which must hold what its
        state put there (another thread's task may have changed it since: then
        :class:`_Raced`). What else it holds the load did not make and leaves
        alone: a fresh load shows it as it is, so it is not walked (the probe
        of the __dict__ reads what it is, by identity)."""
        if self.classes.keys() - self.applied.keys():
            raise NotReusable("a class reached whose state this load did not apply")
        # What the walk read in the load must be what the load left: not so if
        # the load changed a walked object after (a globals dict a later
        # function writes into), or another thread did once it was published.
        if not _speedups.held_unchanged(tuple(self.probes), tuple(self.reading), _MISSING):
            raise _Raced("changed since it was walked")
        for base in self.bases:  # (as the payload names them: a skeleton's, whose
            self.hooks(base)  # __init_subclass__ a fresh load would run)
            if not cp.no_code_runs_in_subclassing((base,)):  # (as probed: checked after)
                raise NotReusable(base)
        for kind in self.kinds.values():
            self.hooks(kind)
            if not _plain(kind):  # (the class as the load left it; read after its probes)
                raise NotReusable(kind)
            if self.read(_ABSTRACT, kind) is not False:  # (object.__new__ reads its flags)
                raise NotReusable(kind)
        for cls, clsdict in self.applied.values():
            # (a fresh load sets its state's attributes on it: CPython looks each
            # dunder up along its MRO, and along each subclass's)
            self.hooks(cls)
            self.subclasses(cls)
            reading = self.read_all(_CLASS_ITEMS, cls)
            if type(reading[0]) is not int:
                raise NotReusable(cls)
            items = dict(zip(reading[1::2], reading[2::2], strict=True))
            if any(
                id(value) in self.made_ids and id(value) not in self.seen
                for value in items.values()
            ):
                raise NotReusable(cls)  # (put there by the load, not by its state: unwalked)
            for key, value in clsdict.items():
                if key in _CLASS_SETTERS and key not in _CLASS_KEEPS:
                    raise NotReusable(key)  # (where would it be?)
                kept_as = _CLASS_KEEPS[key][key in items] if key in _CLASS_KEEPS else key
                if items.get(kept_as, _MISSING) is not value:
                    raise _Raced(cls)

    def function(self, func: types.FunctionType) -> None:
        # (its __dict__ made now: made by the first read of it, a task's
        # functools.wraps say, it would read as a change)
        _FUNCTION_DICT.__get__(func)
        if _FUNCTION_FIELDS:
            self.walk_all(self.read_all(_FUNCTION, func))
        for name, settable in _FUNCTION_ATTRIBUTES:
            if settable and _FUNCTION_FIELDS:
                continue
            if name == "__annotations__":  # (its field: reading it may call __annotate__)
                value = self.read(_ANNOTATIONS, func)
            elif settable:
                value = self.read(_ATTR, func, name)
            else:  # (read-only: __globals__, __closure__, __builtins__: what they hold is walked)
                value = getattr(func, name, _MISSING)
            self.walk(value)

    def alias(self, alias: Any) -> None:
        # A list[int] or an int | None (made by _alias or _union): read-only
        # fields, no __dict__ of its own; what it holds is walked (found
        # classes are probed where they are found).
        self.walk_all(_ALIASED[id(type(alias))](alias))

    def method_wrapper(self, wrapper: Any) -> None:
        # A classmethod or staticmethod: its function (a new __init__ can swap
        # it) and its __dict__ (the function's names, copied when it was made;
        # 3.14+ keeps its annotations there too, as they are read).
        func = self.read(_ATTR, wrapper, "__func__")
        if type(func) is not types.FunctionType or id(func) in self.found:
            # (a found function's names are copied again by a fresh load: unprobed)
            raise NotReusable(type(wrapper))
        self.walk(func)
        self.walk(self.read(_ATTR, wrapper, "__dict__"))

    def plain(self, obj: Any) -> None:
        slots = tuple(
            descriptor
            for klass in _mro(type(obj))[:-1]
            for descriptor in _dict(klass).values()
            if type(descriptor) is types.MemberDescriptorType
        )
        # Its class (found, or a by-value class: walked where its state is
        # applied), then its __dict__ and slots.
        self.walk_all(self.read_all(_PLAIN, obj, slots))

    def plain_class(self, kind: type) -> None:
        """Check that ``kind``'s instances are plain (:func:`_plain`) now, as
        the load made one, and again once the load is over (:meth:`hooks`): a
        by-value class may still be a bare skeleton here, whose hooks its state
        brings (a later load runs them)."""
        if not _plain(kind):
            raise NotReusable(kind)
        self.kinds[id(kind)] = kind

    def hooks(self, kind: type) -> None:
        """Probe ``kind``'s MRO, and the __dict__ of each class in it but object
        (a by-value class whose state this load applied is probed already; one
        whose state it did not apply is not reusable): a hook one gains later,
        which a fresh load would run, is a change."""
        if type(kind) is not type:
            raise NotReusable(kind)  # (a metaclass: its code may run)
        if id(kind) not in self.mros:
            self.mros.add(id(kind))
            self.read(_ATTR, kind, "__mro__")  # (a __bases__ set anywhere above makes another)
        for klass in _mro(kind)[:-1]:
            if id(klass) in self.applied or id(klass) in self.hooked:
                continue
            if type(klass) is not type:  # (a __bases__ set to one of another metaclass,
                raise NotReusable(klass)  # whose code would run as it is hashed or read)
            if cp.tracked_id(klass) is not None:
                raise NotReusable(klass)
            _dict(klass)  # (keys all strs: a lookup there compares no key with code)
            self.hooked.add(id(klass))
            self.read(_CLASS_ITEMS, klass)


_HANDLERS: dict[type, Callable[[_Walk, Any], None]] = {
    tuple: _Walk.tuple_items,
    frozenset: _Walk.frozen_set,
    dict: _Walk.items,
    list: _Walk.list,
    set: _Walk.set,
    types.MappingProxyType: _Walk.mappingproxy,
    types.CellType: _Walk.cell,
    types.ModuleType: _Walk.module,
    type: _Walk.cls,
    types.FunctionType: _Walk.function,
    classmethod: _Walk.method_wrapper,
    staticmethod: _Walk.method_wrapper,
    types.GenericAlias: _Walk.alias,
    types.UnionType: _Walk.alias,
}
if hasattr(builtins, "frozendict"):  # 3.15+: it holds what it holds
    _HANDLERS[builtins.frozendict] = _Walk.frozen_mapping
# (looked up by the id of an object's class: hashing a class may run its metaclass's code)
_HANDLER_BY_ID = {id(kind): handler for kind, handler in _HANDLERS.items()}
_ATOM_IDS = frozenset(map(id, _ATOMS))
#: What hashes its keys or items as it is made.
_HASHING = frozenset(
    id(kind) for kind in (dict, set, frozenset, getattr(builtins, "frozendict", dict))
)

#: What an alias holds, read with its type's own member descriptors (an
#: alias's getattr passes other names on to its origin class).
_ALIASED: dict[int, Callable[[Any], tuple[Any, ...]]] = {
    id(types.GenericAlias): lambda alias: (
        vars(types.GenericAlias)["__origin__"].__get__(alias),
        vars(types.GenericAlias)["__args__"].__get__(alias),  # (the tuple the load made: probed)
    ),
    id(types.UnionType): lambda union: (vars(types.UnionType)["__args__"].__get__(union),),
}

_TRACKER_KINDS: tuple[type, ...] = (weakref.WeakValueDictionary, weakref.WeakKeyDictionary)
_MODULE_SPEC = importlib.machinery.ModuleSpec
#: What would run code as ``__import__`` reads a spec's ``_initializing``.
_SPEC_HOOKS = ("__getattribute__", "__getattr__", "_initializing")
_TYPE_FLAGS = vars(type)["__flags__"]
# A class's MRO and __dict__ read with type's own descriptors: getattr would
# run a metaclass's __getattr__ (or a __mro__/__dict__ it defines).
_MRO = vars(type)["__mro__"]
_DICT = vars(type)["__dict__"]


def _mro(kind: type) -> tuple[type, ...]:
    mro: tuple[type, ...] = _MRO.__get__(kind)
    return mro


def _str_keyed(mapping: Any) -> bool:
    """Whether every key of ``mapping`` is an exact str: looking a name up among
    keys of the user's would hash and compare them with their code."""
    return all(type(key) is str for key in mapping)


def _dict(kind: type) -> Any:
    """``kind``'s ``__dict__``, whose keys must all be strs (:func:`_str_keyed`)."""
    namespace = _DICT.__get__(kind)
    if not _str_keyed(namespace):
        raise NotReusable(kind)
    return namespace


def _defines(kind: type, *names: str) -> bool:
    """Whether a class of ``kind``'s MRO defines one of ``names``."""
    return any(name in _dict(klass) for klass in _mro(kind) for name in names)


_SLOT_NAME = vars(types.MemberDescriptorType)["__name__"]
_SLOT_OWNER = vars(types.MemberDescriptorType)["__objclass__"]
_TYPE_SUBCLASS = 1 << 31  # Py_TPFLAGS_TYPE_SUBCLASS: a class (what __class__ cannot fake)
_DATA_DESCRIPTORS_OF_OBJECTS = frozenset({"__dict__", "__weakref__"})


def _immutable_class(obj: Any) -> bool:
    """A class whose attributes cannot be set (int, FunctionType, a C type)."""
    return bool(_TYPE_FLAGS.__get__(type(obj)) & _TYPE_SUBCLASS) and bool(
        _TYPE_FLAGS.__get__(obj) & _IMMUTABLETYPE
    )


def _hashes_in_c(key: Any) -> bool:
    """Whether hashing ``key`` and comparing it runs C only: a str, a number, a
    class of metaclass ``type``, a function, a code object...; a tuple or a
    frozenset of such."""
    kind = type(key)
    if kind is tuple or kind is frozenset:
        return all(_hashes_in_c(item) for item in key)
    if kind is types.CodeType:  # (hashed and compared with its constants)
        return all(_hashes_in_c(constant) for constant in key.co_consts)
    return id(kind) in _ATOM_IDS or kind is type or kind is types.FunctionType


def _plain(kind: type) -> bool:
    """Whether ``kind``'s instances are their ``__class__``, ``__dict__`` and
    slots and nothing else (classes of the user's with no hooks, on ``object``,
    whose only data descriptors are their slots and ``__dict__``), and each
    slot's name finds its own slot."""
    if type(kind) is not type or _mro(kind)[-1] is not object:
        return False
    for klass in _mro(kind)[:-1]:
        if not _TYPE_FLAGS.__get__(klass) & _HEAPTYPE or _HOOKS & _dict(klass).keys():
            return False
        for name, descriptor in _dict(klass).items():
            if name in _DATA_DESCRIPTORS_OF_OBJECTS and type(descriptor) is not (
                types.GetSetDescriptorType
            ):
                return False  # (BUILD reads __dict__ by getattr: another runs code)
            if type(descriptor) is types.MemberDescriptorType:
                # (a slot of this class's own, under its own name: one a state
                # put there under another name, or another class's, was not
                # there when the load filled an instance made before that state)
                owner = next(k for k in _mro(kind) if name in _dict(k))
                if (
                    _dict(owner)[name] is not descriptor
                    or _SLOT_NAME.__get__(descriptor) != name
                    or _SLOT_OWNER.__get__(descriptor) is not klass
                ):
                    return False
            elif _defines(type(descriptor), "__set__", "__delete__") and not (
                type(descriptor) is types.GetSetDescriptorType
                and name in _DATA_DESCRIPTORS_OF_OBJECTS
            ):
                return False  # (a property: setting its attribute runs code)
    return True


def _where_classes_keep() -> dict[str, tuple[str, str]]:
    """For each attribute a class's state may set through a descriptor of
    ``type``'s, the key of the class's __dict__ that then holds it: when the
    dict holds no item of the attribute's own name, and when it does (3.14
    keeps ``__annotations__`` as ``__annotations_cache__`` unless the dict has
    an ``__annotations__``, and ``__annotate__`` as ``__annotate_func__``).
    Found on this interpreter; an attribute it finds no such key for is left
    out, and a part whose state sets it is not reused."""

    def annotate(format: int) -> dict[str, Any]:
        return {}

    keeps: dict[str, tuple[str, str]] = {}
    for name, value, other in (
        ("__module__", "m", "n"), ("__doc__", "d", "e"), ("__annotations__", {}, {}),
        ("__type_params__", (), ((),)), ("__annotate__", annotate, lambda format: {}),
    ):  # fmt: skip
        try:
            bare, holding = type("probe", (), {}), type("probe", (), {name: value})
            setattr(bare, name, value)
            setattr(holding, name, other)
        except (AttributeError, TypeError):
            continue
        where = [
            [key for key, kept in vars(probe).items() if kept is set_]
            for probe, set_ in ((bare, value), (holding, other))
        ]
        if all(len(keys) == 1 for keys in where):
            keeps[name] = (where[0][0], where[1][0])
    return keeps


_CLASS_KEEPS = _where_classes_keep()
#: What setting on a class runs a descriptor of type's (not a plain dict item).
_CLASS_SETTERS = frozenset(
    name for name, value in vars(type).items() if type(value) is types.GetSetDescriptorType
)


class _Raced(NotReusable):
    """A class's __dict__ changed between the load and its reading, or it has
    a subclass not made by the load (a task's, not yet collected): walked
    again at the next task (a few times)."""


#: What a part's reductions may call, by role: ``make`` a new object from the
#: arguments (a function, a cell); ``class``, a class's skeleton (the tracked
#: class, which the walk checks), when making it runs no code of the user's;
#: ``module``, imported by name; ``types`` and ``sentinel``, lookups; the
#: results of the last three are probed; ``type of`` a constant (the
#: ``NoneType`` of an ``int | None``), a C type. Anything else
#: (``getattr``, a user's function) may return what a fresh load would look up
#: again: the part is not reused.
def _roles() -> dict[int, tuple[Any, str]]:
    roles: dict[int, tuple[Any, str]] = {}
    makers = (
        *cp.MAKERS, cp.MAKE_FUNCTION, cp.CLASS_SETSTATE, cp.FUNCTION_SETSTATE,
        blocks.make_function, blocks.make_function_in_python, blocks.function_once,
        blocks.function_ref, blocks.function_ref_in_python, blocks.code_once, blocks.code_ref,
        classmethod, staticmethod, types.MappingProxyType, types.CodeType, types.CellType,
        types.GenericAlias, functools.reduce, operator.getitem,
    )  # fmt: skip
    for role, objects in (
        ("make", makers),
        # (not cloudpickle's _make_skeleton_class: it makes a skeleton and drops
        # it, which stays among its base's __subclasses__() until collected)
        ("class", (blocks.make_class,)),
        ("module", (cp.subimport, blocks.subimport, blocks.subimport_in_python)),
        ("types", (cp.BUILTIN_TYPE,)),
        ("sentinel", (cp.DATACLASS_SENTINEL,)),
        ("type of", (type,)),
    ):
        for obj in objects:
            roles[id(obj)] = (obj, role)
    return roles


_ROLES = _roles()


def _value(
    symbol: opcode_walk.Symbol, globals_: dict[tuple[str, str], Any], memo: dict[int, Any]
) -> Any:
    """The object ``symbol`` stands for: a global, what was memoized, a constant,
    or a tuple of such (``_MISSING`` if it is none of those)."""
    if symbol.kind == "global":
        return globals_.get(symbol.value, _MISSING)
    if symbol.index is not None:
        return memo.get(symbol.index, _MISSING)
    if symbol.kind in ("str", "const"):
        return symbol.value
    if symbol.kind == "tuple":
        items = tuple(_value(item, globals_, memo) for item in symbol.value)
        return _MISSING if any(item is _MISSING for item in items) else items
    return _MISSING


_FROZENDICT = getattr(builtins, "frozendict", object())  # (a sentinel of its own: 3.11-3.14)


class _Made:
    """What a part's load made: the ids of its objects (:func:`_made_by`), and
    the items the pickle filled each dict it made with (before any callable
    was given it: what that callable read, though it may take items out)."""

    __slots__ = ("_dicts", "_globals", "_memo", "ids")

    def __init__(
        self,
        ids: set[int],
        dicts: dict[int, opcode_walk.Symbol],
        globals_: dict[tuple[str, str], Any],
        memo: dict[int, Any],
    ) -> None:
        self.ids, self._dicts, self._globals, self._memo = ids, dicts, globals_, memo

    def items(self, obj: Any) -> dict[str, Any] | None:
        """The str-keyed items the pickle set in ``obj``, a dict it made."""
        symbol = self._dicts.get(id(obj))
        if symbol is None:
            return None
        pairs, _ = symbol.value
        if any(key.kind != "str" for key, _ in pairs):
            return None
        return {key.value: _value(value, self._globals, self._memo) for key, value in pairs}


def _made_of(kind: type, obj: Any, made: _Made) -> bool:
    return type(obj) is kind and id(obj) in made.ids


def _made_dict(obj: Any, made: _Made) -> bool:
    """A dict this load made, keyed by exact strs (what a maker copies from or
    into: one a fresh load would find again would go stale, or be written)."""
    return _made_of(dict, obj, made) and _str_keyed(obj)


def _made_cells(obj: Any, made: _Made) -> bool:
    """None, or a tuple of cells this load made (a closure: written into, or copied)."""
    return obj is None or (
        type(obj) is tuple and all(_made_of(types.CellType, cell, made) for cell in obj)
    )


def _copied(globals_: Any, closure: Any, submodules: Any, made: _Made) -> bool:
    """What a function's receiver copies into it (its globals, its closure's
    contents) made by this load, and the submodules it imported modules."""
    return (
        _made_dict(globals_, made)
        and _made_cells(closure, made)
        and _made_of(list, submodules, made)
        and all(type(module) is types.ModuleType for module in submodules)
    )


def _slot_values(slots: dict[str, Any] | None, made: _Made) -> bool:
    """cloudpickle's slot state of a function, as its receiver applies it:
    :func:`_copied`, the rest set as attributes; no other key (a ``__dict__``
    would swap the function's dict for what it names)."""
    return (
        slots is not None
        and frozenset(slots) in blocks.SLOT_KEYS
        and _copied(
            slots["__globals__"], slots["__closure__"], slots["_cloudpickle_submodules"], made
        )
    )


def _made_function(args: tuple[Any, ...], made: _Made) -> bool:
    # _make_function(code, globals, name, argdefs, closure)
    return (
        len(args) == 5
        and type(args[0]) is types.CodeType
        and _made_dict(args[1], made)
        and (args[2] is None or type(args[2]) is str)
        and (args[3] is None or type(args[3]) is tuple)
        and _made_cells(args[4], made)
    )


def _state_of(args: tuple[Any, ...], kind: type, made: _Made) -> Any:
    """The state of ``(target, (attributes, rest))``, a maker's arguments that
    apply a state: a ``kind`` and a dict this load made; else ``_MISSING``."""
    if len(args) != 2 or not _made_of(kind, args[0], made):
        return _MISSING
    state = args[1]
    if type(state) is not tuple or len(state) != 2 or not _made_dict(state[0], made):
        return _MISSING
    return state


def _function_state_applied(args: tuple[Any, ...], made: _Made) -> bool:
    # _function_setstate(func, (attributes, slots)): it takes items out of slots
    state = _state_of(args, types.FunctionType, made)
    return (
        state is not _MISSING
        and _made_dict(state[1], made)
        and _slot_values(made.items(state[1]), made)
    )


def _class_state_applied(args: tuple[Any, ...], made: _Made) -> bool:
    # _class_setstate(cls, (clsdict, slotstate)), slotstate empty
    state = _state_of(args, type, made)
    return (
        state is not _MISSING
        and "_abc_impl" not in state[0]  # (its items go to cls.register)
        and _made_of(dict, state[1], made)
        and not state[1]
    )


def _function_of_layout(args: tuple[Any, ...], made: _Made) -> bool:
    # blocks.make_function(code, base_globals, closure, layout, attributes, *slot values)
    if len(args) < 5:
        return False
    keys = blocks.layout_keys(args[3])
    return (
        keys is not None
        and len(args) == 5 + len(keys)
        and type(args[0]) is types.CodeType
        and _made_dict(args[1], made)
        and _made_cells(args[2], made)
        and _made_dict(args[4], made)
        and _slot_values(dict(zip(keys, args[5:], strict=True)), made)
    )


def _function_of_block(args: tuple[Any, ...], made: _Made) -> bool:
    # function_once(block) or function_ref(digest): a new dict; with blocks.SENT_PARTS after it
    if not args or type(args[0]) is not bytes:
        return False
    if len(args) == 1:
        return True
    if len(args) != 1 + len(blocks.SENT_PARTS):
        return False
    sent = dict(zip(blocks.SENT_PARTS, args[1:], strict=True))
    return (
        _made_dict(sent["base_globals"], made)
        and _made_cells(sent["closure"], made)
        and _made_dict(sent["attributes"], made)
        and _copied(sent["__globals__"], sent["__closure__"], sent["_cloudpickle_submodules"], made)
    )


def _atoms(args: tuple[Any, ...], made: _Made) -> bool:
    # types.CodeType(...): ints, strs, bytes and tuples of such (an __index__ would run)
    return all(
        type(arg) in (int, str, bytes, type(None))
        or (type(arg) is tuple and _atoms(arg, made))
        or type(arg) is types.CodeType
        for arg in args
    )


def _stored(count: int) -> Callable[[tuple[Any, ...], _Made], bool]:
    """At most ``count`` arguments, each only stored (a cell's contents)."""
    return lambda args, made: len(args) <= count


def _wrapping(args: tuple[Any, ...], made: _Made) -> bool:
    # classmethod(f), staticmethod(f): f's names are copied; types.MappingProxyType(d)
    return len(args) == 1 and (
        _made_of(types.FunctionType, args[0], made) or _made_dict(args[0], made)
    )


#: The classes a part's ``list[int]`` may alias: C types, whose aliases hold
#: what they are given and run no code (an argument that is not a class is
#: asked for ``__typing_subst__`` and ``__parameters__`` once read: only
#: Ellipsis, a str and such an alias are allowed, which C answers; a class of
#: metaclass type, which hashes in C).
_ALIAS_ORIGINS = frozenset(map(id, (list, tuple, dict, set, frozenset, type)))


def _alias(args: tuple[Any, ...], made: _Made) -> bool:
    # types.GenericAlias(origin, arguments): list[str], dict[str, list[int]], tuple[int, ...]
    return (
        len(args) == 2
        and id(args[0]) in _ALIAS_ORIGINS
        and type(args[1]) is tuple
        and all(
            arg is ... or type(arg) is str or type(arg) is type
            or _made_of(types.GenericAlias, arg, made)
            for arg in args[1]
        )
    )  # fmt: skip


#: Whether ``UnionType[...]`` makes a union (3.14+: ``typing.Union``, how
#: cloudpickle sends one there).
_UNION_BY_ITEM = "__class_getitem__" in vars(types.UnionType)


def _union(args: tuple[Any, ...], made: _Made) -> bool:
    # functools.reduce(operator.or_, classes), or 3.14+'s
    # operator.getitem(UnionType, classes): int | None. Classes of metaclass
    # type (their | is type's, in C; another metaclass's may be the user's),
    # none twice (the result is then a new union, not one of them).
    if len(args) != 2 or type(args[1]) is not tuple:
        return False
    if not (args[0] is operator.or_ or (_UNION_BY_ITEM and args[0] is types.UnionType)):
        return False
    classes = args[1]
    return (
        len(classes) >= 2
        and all(type(cls) is type for cls in classes)
        and len({id(cls) for cls in classes}) == len(classes)
    )


def _code_of_block(args: tuple[Any, ...], made: _Made) -> bool:
    return len(args) == 1 and type(args[0]) is bytes


#: What each maker may be given, as the load passed it (:func:`_value`): exact
#: types, so that nothing of the user's runs as the maker reads its arguments
#: (an ``__iter__`` unpacking a state, a descriptor read as names are copied, an
#: ``__index__``); and made by this load, each container the maker copies from
#: or writes into (else it reads or writes what a fresh load would find again).
_SIGNATURES: dict[int, Callable[[tuple[Any, ...], _Made], bool]] = {
    id(maker): check
    for makers, check in (
        ((cp.MAKE_FUNCTION,), _made_function),
        ((cp.FUNCTION_SETSTATE,), _function_state_applied),
        ((cp.CLASS_SETSTATE,), _class_state_applied),
        ((blocks.make_function, blocks.make_function_in_python), _function_of_layout),
        (
            (blocks.function_once, blocks.function_ref, blocks.function_ref_in_python),
            _function_of_block,
        ),
        ((blocks.code_once, blocks.code_ref), _code_of_block),
        ((types.CodeType,), _atoms),
        ((classmethod, staticmethod, types.MappingProxyType), _wrapping),
        ((*cp.MAKERS, types.CellType), _stored(1)),
        ((types.GenericAlias,), _alias),
        ((functools.reduce, operator.getitem), _union),
    )
    for maker in makers
}  # fmt: skip


#: The makers that take a block's digest first, with the kind of entry a fresh
#: load needs under it (those that take the block keep it: a part whose load
#: keeps one is not reused).
_NAMES_A_BLOCK: dict[int, type] = {
    id(blocks.code_ref): types.CodeType,
    id(blocks.function_ref): tuple,
    id(blocks.function_ref_in_python): tuple,
}


def _made_by(
    read: opcode_walk.Reductions, globals_: dict[tuple[str, str], Any], memo: dict[int, Any]
) -> _Made:
    """What this load made: in the memo, from an empty container, a NEWOBJ, or
    a maker's or a class skeleton's call (a lookup's result, a global and a
    constant are found)."""
    ids: set[int] = set()
    dicts: dict[int, opcode_walk.Symbol] = {}
    for index, symbol in enumerate(read.memo):
        if symbol.index != index:
            continue  # (memoized again: its first index stands for it)
        if symbol.kind in ("list", "dict", "set", "new") or (
            symbol.kind == "call"
            and _role(_value(symbol.value[0], globals_, memo)) in ("make", "class")
        ):
            ids.add(id(memo[index]))
        if symbol.kind == "dict":
            dicts[id(memo[index])] = symbol
    return _Made(ids, dicts, globals_, memo)


def _made_without_code(
    metaclass: Any, name: Any, bases: Any, namespace: Any, tracker: Any, extra: Any
) -> bool:
    """Whether a fresh load's skeleton class (``_make_skeleton_class``) runs no
    code of the user's: no metaclass but ``type``, no ``__init_subclass__`` in
    its bases' MROs, a namespace of ``__module__`` only (a value's
    ``__set_name__`` would run), a tracker id that is a str (it is hashed).
    Then a reused part skips nothing a load runs."""
    return (
        metaclass is type
        and type(name) is str
        and cp.no_code_runs_in_subclassing(bases)
        and type(namespace) is dict
        and namespace.keys() <= {"__module__"}
        and type(namespace.get("__module__", "")) is str
        and type(tracker) is str
        and extra is None
    )


def _role(obj: Any) -> str | None:
    """What ``obj``, a reduction's callable, is to the walk (:func:`_roles`)."""
    known = _ROLES.get(id(obj))
    return known[1] if known is not None and known[0] is obj else None


def _check_reductions(
    read: opcode_walk.Reductions,
    globals_: dict[tuple[str, str], Any],
    memo: dict[int, Any],
    walk: _Walk,
) -> None:
    """Raise NotReusable unless each reduction makes a new object from what
    its maker may be given (:data:`_SIGNATURES`) or looks up what a probe reads
    again, each NEWOBJ makes a plain object, and each BUILD fills one (its
    ``__dict__``, and its slots only)."""
    made = _made_by(read, globals_, memo)
    walk.made_ids = made.ids
    for call in read.calls:
        maker, args = (_value(symbol, globals_, memo) for symbol in call.value)
        role = _role(maker)
        if type(args) is not tuple:
            raise NotReusable("a reduction's arguments")
        if role == "class":
            # (its namespace made by this load: one found could gain a value
            # whose __set_name__ a fresh load runs)
            if len(args) != 6 or not _made_without_code(*args) or not _made_dict(args[3], made):
                raise NotReusable("a class whose making runs code")
            walk.bases.extend(args[2])
        elif role in ("types", "sentinel", "module"):
            if len(args) != 1 or type(args[0]) is not str or call.index is None:
                raise NotReusable("a lookup")
            result, name = memo[call.index], args[0]
            if role == "types":
                reread = walk.finds("types", (name,))
            elif role == "module":
                reread = walk.imported(name)
            else:
                walk.read(_ITEMS, cp.DATACLASS_SENTINELS)
                reread = cp.DATACLASS_SENTINELS.get(name, _MISSING)
            if reread is not result:
                raise NotReusable("a lookup")
        elif role == "type of":  # (type(None): three arguments would make a class)
            if (
                len(args) != 1
                or id(type(args[0])) not in _ATOM_IDS
                or call.index is None
                or memo[call.index] is not type(args[0])
            ):
                raise NotReusable("a call of type")
        elif role != "make" or not _SIGNATURES[id(maker)](args, made):
            raise NotReusable(maker)
        elif id(maker) in _NAMES_A_BLOCK:
            # (a fresh load fails once the connection evicts it, or holds
            # another kind of entry under its digest)
            walk.blocks.append((args[0], _NAMES_A_BLOCK[id(maker)]))
    for symbol in read.hashed:  # (every key the load hashed, kept or dropped as a duplicate)
        key = _value(symbol, globals_, memo)
        if key is _MISSING or not _hashes_in_c(key):
            raise NotReusable("a key that hashes or compares in Python")
    for new in read.news:
        cls, arguments = (_value(symbol, globals_, memo) for symbol in new.value)
        if type(arguments) is not tuple or not (
            (type(cls) is type and _plain(cls) and not arguments)
            or (cls is _FROZENDICT and len(arguments) == 1 and _made_of(dict, arguments[0], made))
        ):
            # (object.__new__(cls) and nothing else: another __new__ runs code,
            # or makes what it is given into something found: a function of a
            # found globals dict; 3.15's frozendict copies a dict it was given)
            raise NotReusable("a NEWOBJ of what is not a plain class")
    built: set[int] = set()
    for target, state in read.builds:
        if target.kind != "new" or id(target) in built:
            # (a second BUILD finds a __setstate__ the first put in its __dict__)
            raise NotReusable("a BUILD onto what no NEWOBJ made, or a second")
        built.add(id(target))
        _check_build(_value(target.value[0], globals_, memo), _value(state, globals_, memo), made)


def _check_build(cls: type, state: Any, made: _Made) -> None:
    """A BUILD of an instance of the plain class ``cls``: a dict this load made
    (put into its ``__dict__``), or ``(that or None, slots)`` whose keys each
    name a slot of ``cls`` (set with ``setattr``: ``__dict__`` or ``__class__``
    would swap what the instance is made of)."""
    if type(state) is tuple and len(state) == 2:
        state, slots = state
        if not _made_dict(slots, made) or any(
            type(_class_attribute(cls, key)) is not types.MemberDescriptorType for key in slots
        ):
            raise NotReusable("a BUILD of what is not a slot")
        if state is None:
            return
    if not _made_dict(state, made):
        raise NotReusable("a BUILD of a state this load did not make")


def _class_attribute(cls: type, name: str) -> Any:
    """What ``cls``'s MRO finds for ``name`` (read from the dicts: no code runs)."""
    for klass in _mro(cls):
        found = _dict(klass).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


_class_setstate = cp.CLASS_SETSTATE  # (what _Loading calls: a test's seam)


def _refuse(reason: str) -> None:
    raise NotReusable(reason)


_CLASS_SETSTATE_NAME = (cp.CLASS_SETSTATE.__module__, cp.CLASS_SETSTATE.__qualname__)


class _Loading(_pickle.Unpickler):
    """The unpickler of a classes' part to reuse: it walks each class's state
    where the load applies it (cloudpickle's ``_class_setstate``), before it
    does, and notes the globals it finds."""

    def __init__(self, head: bytes, walk: _Walk) -> None:
        super().__init__(io.BytesIO(head))
        self.walk = walk
        self.globals: dict[tuple[str, str], Any] = {}
        self.failed: Exception | None = None
        self.apply_state = self._apply_state  # (one object: the memo holds it)

    def find_class(self, module: str, name: str) -> Any:
        obj = super().find_class(module, name)
        if self.globals.setdefault((module, name), obj) is not obj:
            # (another thread rebound it between two finds: the memo holds both)
            self.note(_refuse, f"{module}.{name} found as two objects")
        self.note(self.walk.find, obj)
        # (under its own name only: the part calls it there and nowhere else uses
        # it, checked before the load; found under another, the state it applies
        # goes unwalked: the part is not reused)
        if obj is cp.CLASS_SETSTATE:
            if (module, name) == _CLASS_SETSTATE_NAME:
                return self.apply_state
            self.note(_refuse, "_class_setstate under another name")
        return obj

    def _apply_state(self, cls: Any, state: Any) -> Any:
        self.note(self.walk.class_state, cls, state)  # (first: then it is on the class)
        return _class_setstate(cls, state)

    def note(self, step: Callable[..., None], *args: Any) -> None:
        """Run ``step`` of the walk: its failure fails the walk, not the load."""
        if self.failed is None:
            try:
                step(*args)
            except Exception as error:  # (the load goes on as it would anyway)
                self.failed = error


def _load_walked(head: bytes) -> tuple[Any, int, tuple[Any, ...] | None, bool]:
    """Load the classes' part ``head`` and walk it: ``(an unpickler holding the
    memo the load made, its size, (probes, reading, avoid) or None if it is not
    reusable, whether another thread's change is why)``. ``avoid``, a byte per
    memo index (empty if none is marked), marks what a task's part must not get
    for the part to be reused: what the load made that its classes do not reach
    (its reductions' arguments and states), and its functions' globals dicts.
    Raises NotReusable, before loading anything, for a part whose opcodes
    already say so (the caller then loads it with its task, once)."""
    try:
        read = opcode_walk.reductions(head)
    except opcode_walk.Unreadable as error:
        raise NotReusable(str(error)) from error
    if not read.only_called(_CLASS_SETSTATE_NAME):
        raise NotReusable("_class_setstate used but to be called")  # (the walk's would leak)
    walk = _Walk()
    loading = _Loading(head, walk)
    kept = [0]
    token = connection.KEPT.set(kept)  # (what this load keeps: not another thread's)
    try:
        root = loading.load()
    finally:
        connection.KEPT.reset(token)
    holder = _memo_of(loading)
    memo = holder.memo.copy()
    try:
        if loading.failed is not None:
            raise loading.failed
        if kept[0]:
            # Its load kept blocks on the connection (their newest copy), which
            # a fresh load does again: not skipped.
            raise NotReusable("blocks kept")
        _check_reductions(read, loading.globals, memo, walk)
        for (module, name), obj in loading.globals.items():
            # A fresh load finds it again, as find_class does.
            if walk.finds(module, tuple(name.split("."))) is not obj:
                raise _Raced((module, name))  # (another thread rebound it in the load)
        walk.walk(root)  # (nothing of it was published but its classes)
        for obj in memo.values():  # (what the classes do not reach: made all the same)
            walk.made(obj)
        walk.published()
        # (then a check passes over the items of the dicts no event touched
        # since a check that read them: _unchanged)
        if _DICTS_WATCHED:
            _speedups.held_watch(tuple(walk.probes))
    except _Raced:
        return holder, len(memo), None, True
    except RecursionError:
        return holder, len(memo), None, False
    except RuntimeError:  # (a dict another thread's task wrote while the walk read it)
        return holder, len(memo), None, True
    except Exception:  # (NotReusable; or what else the walk met)
        return holder, len(memo), None, False
    functions_globals = {
        id(obj.__globals__) for obj in walk.kept if type(obj) is types.FunctionType
    }
    avoided = [
        id(obj) in functions_globals
        or not (id(obj) in walk.seen or id(type(obj)) in _ATOM_IDS or _immutable_class(obj))
        for obj in (memo[index] for index in range(len(memo)))
    ]
    avoid = bytes(avoided) if any(avoided) else b""
    return (
        holder,
        len(memo),
        (tuple(walk.probes), tuple(walk.reading), avoid, tuple(walk.blocks)),
        False,
    )


class _Putting(_pickle.Unpickler):
    def persistent_load(self, pid: Any) -> Any:
        return cp.CLASS_SETSTATE


def _memo_of(loading: _Loading) -> Any:
    """An unpickler holding ``loading``'s memo with cloudpickle's
    ``_class_setstate`` where ``loading`` holds its own (a task's part may get
    it). The memo cannot be set from a dict (CPython fills the memo it then
    drops), so each such index is put as an unpickler puts it: ``BINPERSID``
    pushes the function, ``LONG_BINPUT`` memoizes it at that index."""
    memo: dict[int, Any] = loading.memo.copy()
    indices = [index for index, obj in memo.items() if obj is loading.apply_state]
    puts = b"".join(b"r" + index.to_bytes(4, "little") for index in indices)
    holder = _Putting(io.BytesIO(b"\x80\x05NQ" + puts + b"."))
    holder.memo = loading.memo
    holder.load()
    return holder


class _Held:
    """What a receiver knows of a classes' part it loaded: seen once (``probes``
    None, ``walked`` False), reusable (an unpickler holding the memo its load
    made; its probes, what they read then, the mask of memo entries a task's
    part must not get, the prefix that seeds its memo's length, the digests of
    the blocks it names, which the connection must still hold as their kinds; ``stale`` once
    a task loaded the part afresh), resting after ``strikes`` walks in a row
    that did not pay off (``walked``, no probes, ``rest`` tasks to go), or not
    reusable (``walked``, no probes, no rest). Never changed once made but for
    two counts, ``reuses`` and ``rest``, which decide only when to walk (a
    count two threads lose is a walk sooner or later), and ``since``, the count
    of watched dicts' events a check that read them all passed at (None: none
    yet; a stale one only makes the next check read them all), so a thread that
    read one uses one consistent state."""

    __slots__ = (
        "avoid", "blocks", "prefix", "probes", "reading", "rest", "reuses", "since", "stale",
        "strikes", "unpickler", "walked",
    )  # fmt: skip

    def __init__(
        self,
        strikes: int = 0,
        walked: bool = False,
        probes: tuple[Any, ...] | None = None,
        reading: tuple[Any, ...] = (),
        avoid: bytes = b"",
        unpickler: Any = None,
        prefix: bytes = b"",
        blocks: tuple[tuple[bytes, type], ...] = (),
        rest: int | None = None,
    ) -> None:
        self.strikes = strikes
        self.walked = walked
        self.probes = probes
        self.reading = reading
        self.avoid = avoid
        self.unpickler = unpickler
        self.prefix = prefix
        self.blocks = blocks
        self.rest = rest
        self.reuses = 0
        self.since: int | None = None
        self.stale = False

    def staled(self) -> _Held:
        """This part, loaded afresh since it was walked (by a task that could
        not reuse it): walked again by the next task that could."""
        stale = copy.copy(self)
        stale.stale = True
        return stale


def _resting(strikes: int) -> _Held:
    """A part struck out ``strikes`` walks in a row: loaded with its task for a
    while, twice as long at each strike past the last allowed."""
    rest = min(_FIRST_REST << (strikes - _MAX_STRIKES), _LAST_REST)
    return _Held(strikes, walked=True, rest=rest)


def _memo_prefix(size: int) -> bytes:
    """A pickle that memoizes ``size`` Nones: an unpickler that loaded it goes
    on memoizing from ``size`` (a task's part numbers its memo after its
    classes' part). In one frame: the unpickler reads it from its file at once."""
    frame = b"N" + b"\x94" * size + b"."
    return b"\x80\x05\x95" + len(frame).to_bytes(8, "little") + frame


def _load_with(unpickler: Any, prefix: bytes, body: Any, buffers: Any) -> Any:
    loader = _pickle.Unpickler(io.BytesIO(prefix + body), buffers=buffers)
    loader.load()
    loader.memo = unpickler.memo  # (a copy of its memo; the length stays the prefix's)
    return loader.load()


def _seeding_works() -> bool:
    """Whether a task's part loads after a memo copied from its classes' part
    as one unpickler loads the two (see the module's docstring)."""
    shared, other = ["a"], ["b"]
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=5)
    pickler.dump((shared, other))
    head = out.getvalue()
    out.seek(0)
    out.truncate()
    new: list[Any] = []
    pickler.dump((new, new, shared, other, [1], [2], shared, other))
    first = _pickle.Unpickler(io.BytesIO(head))
    held = first.load()
    try:
        loaded = _load_with(first, _memo_prefix(len(first.memo.copy())), out.getvalue(), ())
    except Exception:
        return False
    return (
        loaded[0] is loaded[1] and loaded[2] is loaded[6] is held[0] and loaded[3] is loaded[7] is held[1]
        and loaded[0] == [] and held == (["a"], ["b"])
    )  # fmt: skip


def _sets_probed() -> bool:
    """Whether the set probe reads all that a set's methods do (it reads
    CPython's set fields: checked here, not assumed): a set whose pop() and add
    left its items and their order as they were must read unlike a fresh one,
    and a fresh one like another."""
    if not _speedups.SET_LAYOUT:
        return False
    fresh, twin, popped = {1, 2, 3}, {1, 2, 3}, {1, 2, 3}
    popped.add(popped.pop())
    probes = ((_SET, fresh),)
    reading = _speedups.held_snapshot(probes, _MISSING)
    return (
        _speedups.held_unchanged(((_SET, twin),), reading, _MISSING)
        and not _speedups.held_unchanged(((_SET, popped),), reading, _MISSING)
    )  # fmt: skip


def _dicts_read() -> bool:
    """Whether the C module reads right, where it reads a dict's keys table
    (DICT_LAYOUT: a CPython internal, checked here, not assumed), that its keys
    are all exact strs: not so once a key of another kind, or a str
    subclass's, was put in it."""
    if not _speedups.DICT_LAYOUT:
        return True  # (the keys are read one by one)

    class Key(str):
        pass

    subclassed: dict[Any, int] = {"a": 1}
    other: dict[Any, int] = {"a": 1}
    subclassed[Key("b")] = 2
    other[2] = 3
    return (
        _speedups.str_keys({"a": 1}) and _speedups.str_keys(dict.fromkeys("ab"))
        and not _speedups.str_keys(subclassed) and not _speedups.str_keys(other)
    )  # fmt: skip


def _subclasses_probed() -> bool:
    """Whether the subclasses probe (SUBCLASS_LAYOUT: CPython's table of a
    class's subclasses) reads a new subclass as a change, and nothing else."""
    if not _speedups.SUBCLASS_LAYOUT:
        return False
    base = type("Probed", (), {})
    probes = ((_SUBCLASSES, base),)
    alone = _speedups.held_snapshot(probes, _MISSING)
    subclass = type("Subclass", (base,), {})
    again = _speedups.held_snapshot(probes, _MISSING)
    return (
        not _speedups.held_unchanged(probes, alone, _MISSING)
        and _speedups.held_unchanged(probes, again, _MISSING)
        and subclass in type.__subclasses__(base)
    )  # fmt: skip


def _watching_works() -> bool:
    """Whether a check that passed over watched dicts reads each change made to
    them since as a change: a dict's item set, a class's attribute set, and a
    plain object's attribute set, which its ``__dict__`` may hold in the
    object's inline values (3.13.0 fired no watcher's event for those stores:
    CPython's gh-125608, fixed in 3.13.1)."""
    probed: dict[str, Any] = {"a": 1}
    kind = type("Probed", (), {})
    instance = kind()
    instance.a = 1
    probes = ((_ITEMS, probed), (_CLASS_ITEMS, kind), (_ITEMS, vars(instance)))
    reading = _speedups.held_snapshot(probes, _MISSING)
    if _speedups.held_watch(probes) is not True:
        return False
    changes: tuple[tuple[Callable[[], None], Callable[[], None]], ...] = (
        (lambda: probed.__setitem__("a", 2), lambda: probed.__setitem__("a", 1)),
        (lambda: setattr(kind, "added", 1), lambda: delattr(kind, "added")),
        (lambda: setattr(instance, "a", 2), lambda: setattr(instance, "a", 1)),
    )
    for change, undo in changes:
        since = _speedups.held_unchanged_since(probes, reading, _MISSING, None)
        quiet = _speedups.held_unchanged_since(probes, reading, _MISSING, since)
        change()
        seen = _speedups.held_unchanged_since(probes, reading, _MISSING, since) is False
        undo()
        if type(since) is not int or quiet != since or not seen:
            return False
    return True


#: Whether this interpreter can reuse classes' parts (C module, the memo
#: seeding, and its reading of a dict's keys table where it reads it).
SEEDING = _speedups is not None and _seeding_works() and _dicts_read()
#: Whether a check passes over the items of watched dicts no event touched
#: since a check that read them (3.12+; else every check reads them all).
_DICTS_WATCHED = SEEDING and _watching_works()
#: Whether classes' parts are reused (``GRAPHPICKLE_HELD_CLASSES=0`` turns it off).
ENABLED = SEEDING and HELD_CLASSES
#: Whether a part may hold sets (else a part that holds one is not reused).
_SETS_PROBED = SEEDING and _sets_probed()
#: Whether a class's subclasses are probed (else no class is reused).
_SUBCLASSES_PROBED = SEEDING and _subclasses_probed()

_lock = threading.Lock()


def load(receiver: connection.Receiver, name: bytes, head: bytes, body: Any, buffers: Any) -> Any:
    """The task of a payload whose classes' part ``head`` (digest ``name``) the
    receiving connection holds. The first time, both parts load together; the
    second, the part is loaded on its own and walked; from then on its objects
    are reused while nothing they are made of changed, and loaded and walked
    again when something did. A walk whose objects were changed again before
    they paid off is a strike; after a few in a row the part rests (loads
    with its task) for a while, and is walked again after it."""
    held = receiver.loaded.get(name)
    if held is None:
        _hold(receiver, name, _Held())
        return load_together(head, body, buffers)
    strikes = held.strikes
    if held.walked and held.probes is None:
        if held.rest is None:  # (not reusable)
            return load_together(head, body, buffers)
        held.rest -= 1
        if held.rest > 0:
            return load_together(head, body, buffers)
        # (rested: walked again)
    else:
        if held.probes is not None:
            if _gets_avoided(held, body):
                # Loaded afresh: its state is applied again to the held classes,
                # so the next task that could reuse the part walks it again (no
                # strike: nothing of it changed).
                if not held.stale:
                    _hold(receiver, name, held.staled())
                return load_together(head, body, buffers)
            if not held.stale:
                if _unchanged(held) and _blocks_held(receiver, held):
                    held.reuses += 1
                    _used(receiver, name)
                    return _load_with(held.unpickler, held.prefix, body, buffers)
                # Changed: by a task, or by another load of the same classes (a
                # by-value payload, another connection), which applies their
                # state again. A walk whose objects served a while paid for itself.
                strikes = 0 if held.reuses >= _PAYS_OFF else strikes + 1
        if strikes >= _MAX_STRIKES:  # (or raced once too often)
            _hold(receiver, name, _resting(strikes))
            return load_together(head, body, buffers)
    try:
        unpickler, size, walked, raced = _load_walked(head)
    except NotReusable:
        _hold(receiver, name, _Held(strikes, walked=True))
        return load_together(head, body, buffers)
    prefix = _memo_prefix(size)
    if walked is not None:
        probes, reading, avoid, names = walked
        again = _Held(strikes, True, probes, reading, avoid, unpickler, prefix, names)
    else:
        # Raced (another thread's change): walked again at the next task, a few
        # times. Refused: that may be another thread's passing state too, found
        # or not, so it rests the longest rest, then is walked again.
        again = _Held(strikes + 1) if raced else _Held(strikes, walked=True, rest=_LAST_REST)
    try:
        # The walked load is this task's fresh load, whatever its part gets
        # (loading the part again would run its reductions twice); held once
        # the task's part is loaded (what it writes into a held globals dict
        # then shows as a change at the next task).
        return _load_with(unpickler, prefix, body, buffers)
    finally:
        _hold(receiver, name, again)


def _unchanged(held: _Held) -> bool:
    """Whether the probes read what they read after the walk (an error reading
    them counts as a change: the part is loaded again). The items of the dicts
    they read whole are passed over while no event of theirs came since the
    last check that read them (3.12+: dict watchers; ``_DICTS_WATCHED``)."""
    try:
        since = _speedups.held_unchanged_since(held.probes, held.reading, _MISSING, held.since)
    except Exception:
        return False
    if since is False:
        return False
    if _DICTS_WATCHED:  # (then the walk watched them: held_watch)
        held.since = since
    return True


def _blocks_held(receiver: connection.Receiver, held: _Held) -> bool:
    """Whether the connection still holds each block the part names, as the
    kind of entry a fresh load reads there."""
    return all(type(receiver.held.get(digest, (None,))[0]) is kind for digest, kind in held.blocks)


def _gets_avoided(held: _Held, body: Any) -> bool:
    """Whether the task's part gets what the part's load made that the classes
    do not reach, or the globals dict of one of the part's functions (the task's
    own function of the same module gets it: a payload has one per module, and
    that function's load writes its globals into it; reused, the dict would be
    every task's, and a task's load would reset a global another task running
    wrote). Such a task loads the part afresh."""
    return bool(held.avoid) and _speedups.memo_gets(body, held.avoid) is True


def _hold(receiver: connection.Receiver, name: bytes, held: _Held) -> None:
    with _lock:
        receiver.loaded[name] = held
        receiver.loaded.move_to_end(name)
        while len(receiver.loaded) > MAX_HELD:
            receiver.loaded.popitem(last=False)


def _used(receiver: connection.Receiver, name: bytes) -> None:
    """A reused part goes last in eviction order: the parts least recently used
    go first, not the part reused on every task (the sender does not mirror this
    table, so its order is the receiver's own to choose)."""
    with _lock:
        if name in receiver.loaded:  # (unless another thread evicted it)
            receiver.loaded.move_to_end(name)


def load_together(head: bytes, body: Any, buffers: Any) -> Any:
    """The task of a classes' part and a task's part, loaded by one unpickler."""
    unpickler = _pickle.Unpickler(io.BytesIO(head + body), buffers=buffers)
    unpickler.load()
    return unpickler.load()
