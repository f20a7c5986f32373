"""How each kind of object is reduced, and the per-type table the pickler uses.

A *handler* is called as ``handler(state, obj)`` (``state`` is the pickler's
``PicklerState``) and returns what
``__reduce__`` would, or ``NotImplemented`` to let the C pickler do exactly what
``pickle.dumps`` does. Returning ``NotImplemented`` for everything that can be
imported is what keeps graphpickle's output byte-identical to ``pickle``'s.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from pickle import PickleBuffer
from typing import Any

from .. import _cloudpickle_internals as cp
from .._cloudpickle_internals import REGISTERED_BY_VALUE
from ..determinism import canonical as _canonical
from ..determinism.canonical import DeterministicState
from ..errors import PicklingError
from . import captures as _captures
from . import fragments as _fragments
from .captures import warn_about_large_captures
from .native import speedups as _speedups
from .policy import (
    ByValueReason,
    class_reason,
    function_reason,
    module_reason,
    named_object_reason,
)
from .snapshots import class_snapshot, function_snapshot, refers_to, same_objects

__all__ = ["Reducer", "register_reducer", "unregister_reducer"]

Reducer = Callable[[Any], Any]
"""``reducer(obj)`` returns what ``obj.__reduce__()`` would (as with ``copyreg``)."""

ReducerLookup = Callable[[type], Reducer | None]
"""``lookup(cls)`` finds a reducer for a type the reducer tables do not name, or
returns ``None``: another library's registry. It is asked once per type; the
answer is remembered for every pickler given the same lookup function, until
:func:`forget_lookup` is called for it."""


class PicklerState:
    """What handlers need of their pickler: the protocol, cloudpickle's map
    from ``id(func.__globals__)`` to the globals dict the receiver will build
    (so that functions sharing globals here share them after loading too), and
    in deterministic mode what that mode needs (``None`` otherwise).

    ``make_fragment_pickler`` is set by the dask integration's ``dumps``, which
    can write a payload again: a remembered class may then go as a fragment (see
    ``fragments``),
    listed in ``fragments_used`` for the check after the dump;
    ``fragment_lookup`` is the pickler's reducer lookup."""

    __slots__ = (
        "by_value", "deterministic", "fragment_lookup", "fragments_used", "globals_ref",
        "make_fragment_pickler", "protocol",
    )  # fmt: skip

    def __init__(self, protocol: int, deterministic: DeterministicState | None = None) -> None:
        self.protocol = protocol
        self.deterministic = deterministic
        self.globals_ref: dict[int, dict[str, Any]] = {}
        # Set once anything is pickled by value: such payloads load only on the
        # same Python minor version (the wire envelope checks it).
        self.by_value = False
        self.make_fragment_pickler: _fragments.MakePickler | None = None
        self.fragment_lookup: ReducerLookup | None = None
        self.fragments_used: list[_fragments.Fragment] = []

    def reset(self) -> None:
        """Forget what a dump wrote: a pooled pickler (``_speedups.Dumper``) starts
        its next payload as a new pickler would (functions pickled by value then
        share no globals dict with those of an earlier payload)."""
        self.globals_ref = {}
        self.by_value = False
        self.fragments_used = []


Handler = Callable[[PicklerState, Any], Any]


def _remember_nothing(obj: Any) -> None:
    pass


# The C hook remembers the functions and classes the policy sent by reference
# and answers for them again, checking in C that they are still importable
# (see _speedups.c: what a hit checks). The Python hook asks the policy each time.
remember_by_reference: Callable[[Any], None] = (
    _remember_nothing if _speedups is None else _speedups.remember_by_reference
)


# --- by-value reductions remembered between payloads ---------------------------
#
# A scheduler sends the same notebook function or class in message after message.
# Its reduction (cloudpickle's state, the class dict copy) is remembered, per
# object, with a snapshot of every object it was built from (function_snapshot:
# code, defaults, keyword defaults, __dict__ and its entries, names, module,
# docstring, annotations, the globals the code reads and the closure cells'
# contents; for
# a class, its bases, names and every entry of its __dict__). The next payload
# reuses the reduction only if a new snapshot holds the very same objects: a
# rebound global, new defaults, a cell set to another value, an attribute set on
# the class all rebuild it. What the objects *contain* is written afresh in every
# payload, so a list mutated in place is seen as well. Functions and classes are
# remembered only when what makes them go by value cannot change without
# changing the snapshot (``__main__``, lambdas, closures, <locals>), only in
# default mode, and only if no capture was large enough to warn about (the
# warning stays once per payload). Memory: up to _MAX_REMEMBERED entries of
# each kind, each holding its reduction (so the captured values of its last
# payload) until its function or class is freed, the entry is rebuilt, or the
# capture threshold changes. Code objects are immutable: their reductions are
# remembered by identity (holding the code, up to _MAX_REMEMBERED).
_MAX_REMEMBERED = 512
_MISSING = object()
_REMEMBERED_REASONS = frozenset(
    {ByValueReason.MAIN, ByValueReason.LAMBDA, ByValueReason.CLOSURE, ByValueReason.LOCAL}
)
# id(obj) -> (weakref to obj, snapshot, what else the entry needs)
_functions: dict[int, tuple[Any, Any, Any]] = {}
_classes: dict[int, tuple[Any, Any, Any]] = {}
_codes: dict[int, tuple[types.CodeType, Any]] = {}


def forget_by_value() -> None:
    """Drop every remembered by-value reduction."""
    _functions.clear()
    _classes.clear()
    _codes.clear()


def _remember(table: dict[int, Any], obj: Any, snapshot: Any, extra: Any) -> None:
    if len(table) >= _MAX_REMEMBERED:
        table.clear()
    key = id(obj)

    def forget(_: object) -> None:  # the entry goes with the object (before its id is reused)
        table.pop(key, None)

    table[key] = (weakref.ref(obj, forget), snapshot, extra)


def _recall(table: dict[int, Any], obj: Any) -> Any:
    entry = table.get(id(obj))
    if entry is None or entry[0]() is not obj:
        return None
    return entry


def _reduce_function(state: PicklerState, func: types.FunctionType) -> Any:
    if state.deterministic is None:
        entry = _recall(_functions, func)
        if entry is not None:
            generation, names, packages, growable, parts = entry[2]
            make, code, closure, func_state, setstate = parts
            if (
                generation == _captures._generation
                and same_objects(function_snapshot(func, names, _MISSING), entry[1])
                and (not packages or _same_submodules(func, func_state[1], packages))
            ):
                state.by_value = True
                if growable is not None:  # a capture may have grown in place
                    sizes = _captures.growable_sizes(func, func_state)
                    # Checked again until a check finds them small (a fresh
                    # reduction warns in every payload).
                    if (sizes != growable or -1 in growable) and warn_about_large_captures(
                        func, func_state
                    ):
                        entry[2][3] = sizes
                base_globals = _base_globals(state, func)
                return (
                    make,
                    (code, base_globals, None, None, closure),
                    func_state,
                    None,
                    None,
                    setstate,
                )
    reason = function_reason(func)
    if reason is None:
        remember_by_reference(func)
        return NotImplemented
    state.by_value = True
    canonical = state.deterministic is not None
    reduction = cp.reduce_function_by_value(state, func, canonical=canonical)
    quiet = warn_about_large_captures(func, reduction[2])
    if quiet and not canonical and reason in _REMEMBERED_REASONS:
        make, (code, _, _, _, closure), func_state, _, _, setstate = reduction
        names = tuple(sorted(_global_names(func.__code__)))
        snapshot = function_snapshot(func, names, _MISSING)
        parts = (make, code, closure, func_state, setstate)
        # The submodules cloudpickle lists depend on sys.modules, not only on
        # the snapshot: with a package among the globals or cells, remember how
        # many modules sys.modules had (see _same_submodules).
        packages = [len(sys.modules)] if _captures_a_package(func, func_state[1]) else None
        # A recursive closure (its own cell) would be kept alive by its entry.
        if not refers_to((snapshot, func_state), func):
            growable = _captures.growable_sizes(func, func_state)
            extra = [_captures._generation, names, packages, growable, parts]
            _remember(_functions, func, snapshot, extra)
    return reduction


def _captures_a_package(func: types.FunctionType, slotstate: dict[str, Any]) -> bool:
    """Whether cloudpickle's submodule search looks at sys.modules for ``func``:
    a module with a ``__package__`` among its globals or closure contents."""
    for value in _dependencies(slotstate):
        if isinstance(value, types.ModuleType) and getattr(value, "__package__", None):
            return True
    return False


def _dependencies(slotstate: dict[str, Any]) -> list[Any]:
    values = list(slotstate["__globals__"].values())
    for cell in slotstate["__closure__"] or ():
        with contextlib.suppress(ValueError):  # an empty cell
            values.append(cell.cell_contents)
    return values


def _same_submodules(
    func: types.FunctionType, slotstate: dict[str, Any], packages: list[int]
) -> bool:
    """Whether the remembered list of submodules is still what cloudpickle would
    find. Searching sys.modules costs about ten dumps of the function, so it is
    searched again only once sys.modules has grown or shrunk; the remembered
    submodules must still be there under their names in any case. (Not seen: a
    submodule imported while an unrelated module is removed, between two
    payloads, leaving sys.modules as long as before.)"""
    submodules = slotstate["_cloudpickle_submodules"]
    modules = sys.modules
    for module in submodules:
        if modules.get(module.__name__) is not module:
            return False
    if packages[0] == len(modules):
        return True
    count = len(modules)
    found = cp.find_imported_submodules(func.__code__, _dependencies(slotstate))
    if len(found) != len(submodules) or any(
        a is not b for a, b in zip(found, submodules, strict=True)
    ):
        return False
    packages[0] = count
    return True


def _global_names(code: types.CodeType) -> set[str]:
    """Every name the code (and code nested in it) may read as a global: a
    superset (attribute names too), so a global defined later is seen."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _base_globals(state: PicklerState, func: types.FunctionType) -> dict[str, Any]:
    """The dict the receiver makes the function's globals from: one per module
    and payload, as cloudpickle shares it (state.globals_ref)."""
    return _module_base_globals(state, func.__globals__)


def _module_base_globals(state: PicklerState, module_globals: dict[str, Any]) -> dict[str, Any]:
    base = state.globals_ref.setdefault(id(module_globals), {})
    if not base:
        for name in ("__package__", "__name__", "__path__", "__file__"):
            if name in module_globals:
                base[name] = module_globals[name]
    return base


# Classes of `types` that are not importable by name (every code reduction names
# types.CodeType): their reductions are constant.
_builtin_type_reductions: dict[type, Any] = {}


def _reduce_class(state: PicklerState, cls: type) -> Any:
    builtin = _builtin_type_reductions.get(cls)
    if builtin is not None:
        return builtin
    if state.deterministic is None:
        entry = _recall(_classes, cls)
        if entry is not None and same_objects(class_snapshot(cls), entry[1]):
            state.by_value = True
            reduction, fragments = entry[2]
            if state.make_fragment_pickler is not None and state.protocol >= 5:
                fragment = _fragment(cls, fragments, state)
                if fragment is not None:
                    state.fragments_used.append(fragment)
                    return fragment.reduction(lambda g: _module_base_globals(state, g))
            return reduction
    reason = class_reason(cls)
    if reason is None:
        remember_by_reference(cls)
        return NotImplemented
    if cls in cp.BUILTIN_TYPES:  # types.FunctionType & co are references to `types`
        reduction = _builtin_type_reductions[cls] = cp.reduce_class_by_value(cls)
        return reduction
    state.by_value = True
    if state.deterministic is None:
        reduction = cp.reduce_class_by_value(cls)
        # Plain classes only: an ABC's registry or an enum's members live outside its dict.
        if type(cls) is type and reason in _REMEMBERED_REASONS:
            snapshot = class_snapshot(cls)
            # A method using super() (its __class__ cell) would keep it alive.
            if not refers_to((snapshot, reduction), cls):
                # Its fragments, by (protocol, reducer lookup), made from its second payload on.
                _remember(_classes, cls, snapshot, (reduction, {}))
        return reduction
    class_id = state.deterministic.class_id(cls)
    return cp.reduce_class_by_value(cls, canonical=True, tracker_id=class_id)


def _fragment(cls: type, fragments: dict[Any, Any], state: PicklerState) -> Any:
    """The fragment of a remembered class for this payload, built if need be;
    ``None`` if it has none (see ``fragments``)."""
    key = (state.protocol, state.fragment_lookup)
    fragment = fragments.get(key, _MISSING)
    if fragment is None or (fragment is not _MISSING and fragment.conflicted):
        return None
    if fragment is not _MISSING and fragment.current():
        return fragment
    lookup = state.fragment_lookup

    def has_reducer(kind: type) -> bool:
        if any(base in _global_reducers for base in kind.__mro__):
            return True
        return lookup is not None and lookup(kind) is not None

    assert state.make_fragment_pickler is not None
    previous = None if fragment is _MISSING else fragment
    fragments[key] = fragment = _fragments.build(
        cls, state.protocol, state.make_fragment_pickler, previous, _remembered_names, has_reducer
    )
    return fragment


def _remembered_names(func: types.FunctionType) -> tuple[tuple[str, ...], Any] | None:
    """The global names of a remembered by-value function whose snapshot says it
    all (no submodule search to repeat), and its remembered reduction's parts;
    ``None`` otherwise."""
    entry = _recall(_functions, func)
    if entry is None or entry[2][2] is not None:
        return None
    names: tuple[str, ...] = entry[2][1]
    return names, entry[2][4]


def _reduce_set_subclass(state: PicklerState, members: set[Any] | frozenset[Any]) -> Any:
    if state.deterministic is None:
        return NotImplemented
    return _canonical.reduce_set_subclass(state, members)


def _reduce_code(state: PicklerState, code: types.CodeType) -> Any:
    if state.deterministic is not None:
        return _canonical.reduce_code(state, code)
    entry = _codes.get(id(code))
    if entry is not None and entry[0] is code:
        return entry[1]
    reduction = cp.reduce_code(code)
    if len(_codes) >= _MAX_REMEMBERED:
        _codes.clear()
    _codes[id(code)] = (code, reduction)
    return reduction


def _reduce_module(state: PicklerState, module: types.ModuleType) -> Any:
    by_value = module_reason(module) is not None
    state.by_value |= by_value
    return cp.reduce_module(module, by_value=by_value)


def _reduce_method(state: PicklerState, method: types.MethodType) -> Any:
    # The standard reduction, getattr(owner, name), is kept whenever it finds this
    # very function again; a function bound by hand, or a name-mangled private
    # method, goes as MethodType(func, owner) instead.
    func = method.__func__
    try:
        found_again = getattr(method.__self__, func.__name__).__func__ is func
    except Exception:
        found_again = False
    if found_again:
        return NotImplemented
    return cp.reduce_method_by_value(method)


def _reduce_typevar(state: PicklerState, typevar: Any) -> Any:
    if named_object_reason(typevar, typevar.__name__) is None:
        return NotImplemented
    state.by_value = True
    return cp.reduce_typevar_by_value(typevar)


def _reduce_memoryview(state: PicklerState, view: memoryview) -> Any:
    """A flat byte view becomes a ``PickleBuffer``, so protocol 5 with a
    ``buffer_callback`` ships it out of band without a copy. Other views are
    rebuilt by casting a flat view back to their format and shape. Whether the
    view is read-only survives the round trip."""
    if view.format == "B" and view.ndim == 1 and view.c_contiguous:
        if state.protocol >= 5:
            return (memoryview, (PickleBuffer(view),))
        return (memoryview, (view.tobytes() if view.readonly else bytearray(view),))
    flat: Any  # typeshed types cast() by literal format; formats here are run-time values
    if view.c_contiguous:
        flat = view.cast("B")
    else:
        data = view.tobytes()
        flat = memoryview(data if view.readonly else bytearray(data))
    try:
        flat.cast(view.format, view.shape)
    except (TypeError, ValueError) as exc:
        raise PicklingError(
            f"cannot pickle a memoryview of format {view.format!r} and shape {view.shape}: "
            f"it cannot be rebuilt by memoryview.cast ({exc})"
        ) from exc
    return (memoryview.cast, (flat, view.format, view.shape))


def _adapt(reducer: Reducer) -> Handler:
    return lambda state, obj: reducer(obj)


_BUILTIN_HANDLERS: dict[type, Handler] = {
    **{cls: _adapt(reducer) for cls, reducer in cp.TYPE_REDUCERS.items()},
    types.FunctionType: _reduce_function,
    type: _reduce_class,
    types.ModuleType: _reduce_module,
    types.MethodType: _reduce_method,
    typing.TypeVar: _reduce_typevar,
    memoryview: _reduce_memoryview,
    types.CodeType: _reduce_code,
    # Made only by deterministic dumps (see determinism/canonical.py).
    _canonical.SortedSet: _canonical.reduce_sorted_set,
    _canonical.MemoRemap: _canonical.reduce_memo_remap,
    _canonical.Prologue: _canonical.reduce_prologue,
}

if _speedups is not None:
    _speedups.set_by_reference_policy(REGISTERED_BY_VALUE, _reduce_function, _reduce_class)
    # The C hook answers from these tables without calling the handlers (the
    # first thing each does is read them): every by-value function's payload
    # holds a code object and names types.CodeType, and a remembered function
    # is _reduce_function's first branch (an entry with packages or growable
    # captures to check again goes to Python).
    _speedups.set_remembered(
        _reduce_code, _builtin_type_reductions, _codes, _functions, vars(_captures), _MISSING
    )

_global_reducers: dict[type, Reducer] = {}
_global_reducers_lock = threading.Lock()


def register_reducer(cls: type, reducer: Reducer) -> None:
    """Reduce every instance of ``cls`` (and of its subclasses) with ``reducer``,
    in every pickler created from now on, wherever the instance sits in a graph.

    ``reducer(obj)`` returns what ``__reduce__`` would: ``(callable, args)`` and
    optionally state, list items, dict items and a state setter, as with
    ``copyreg``; returning ``NotImplemented`` falls back to the default. The most
    specific registration in the class's MRO wins; ``Pickler(reducers=...)``
    overrides this global table for one pickler.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_reducer() needs a class, got {type(cls).__qualname__}: {cls!r}")
    if not callable(reducer):
        raise TypeError(f"the reducer for {cls.__qualname__} is not callable: {reducer!r}")
    with _global_reducers_lock:
        _global_reducers[cls] = reducer
        _shared_dispatch.clear()
    _tables_changed()


def unregister_reducer(cls: type) -> None:
    """Remove a reducer added with :func:`register_reducer`."""
    with _global_reducers_lock:
        if _global_reducers.pop(cls, None) is None:
            raise KeyError(f"no reducer is registered for {cls.__module__}.{cls.__qualname__}")
        _shared_dispatch.clear()
    _tables_changed()


class TypeDispatch:
    """A map from a type to its handler (``None``: the C pickler's default).

    Misses are resolved once per type and remembered, so the pickler's hot path
    is a single dict lookup per object.
    """

    __slots__ = ("handlers", "lookup", "user_reducers")

    def __init__(
        self, user_reducers: dict[type, Reducer], lookup: ReducerLookup | None = None
    ) -> None:
        self.user_reducers = user_reducers
        self.lookup = lookup
        self.handlers: dict[type, Handler | None] = dict(_BUILTIN_HANDLERS)
        for cls, reducer in user_reducers.items():
            self.handlers[cls] = _adapt(reducer)

    def resolve(self, cls: type) -> Handler | None:
        """Find and remember the handler of a type seen for the first time."""
        handler: Handler | None = None
        for base in cls.__mro__[1:]:
            if base in self.user_reducers:
                handler = self.handlers[base]
                break
        else:
            reducer = None if self.lookup is None else self.lookup(cls)
            if reducer is not None:
                handler = _adapt(reducer)
            elif issubclass(cls, type):  # a metaclass: its instances are classes
                handler = _reduce_class
            elif issubclass(cls, set | frozenset):  # (exact sets never reach the hook)
                handler = _reduce_set_subclass
        self.handlers[cls] = handler
        return handler


# Picklers without reducers of their own share one table per reducer lookup
# (``None`` for most), so that creating a pickler costs no copy and each type is
# resolved once per process, not once per pickler. The cache of resolved types
# is bounded: it would otherwise keep every class ever pickled alive.
MAX_SHARED_TYPES = 4096
_shared_dispatch: dict[ReducerLookup | None, TypeDispatch] = {}

# Called when a shared table is dropped: picklers kept for reuse
# (``_pickler``'s pools) hold the table they were made with and must go.
_change_listeners: list[Callable[[], None]] = []


def on_tables_changed(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever a shared dispatch table is dropped."""
    _change_listeners.append(listener)


def _tables_changed() -> None:
    for listener in _change_listeners:
        listener()


def _forget_fragments() -> None:
    """A reducer table changed: a fragment may hold what an old reducer wrote."""
    for entry in list(_classes.values()):
        entry[2][1].clear()


on_tables_changed(_forget_fragments)


def forget_lookup(lookup: ReducerLookup) -> None:
    """Drop what picklers sharing ``lookup`` remembered of its answers: the
    registry behind it changed. Picklers created from now on ask again."""
    with _global_reducers_lock:
        _shared_dispatch.pop(lookup, None)
    _tables_changed()


def dispatch_for(
    local_reducers: Mapping[type, Reducer] | None, lookup: ReducerLookup | None = None
) -> TypeDispatch:
    """The dispatch table of a new pickler."""
    if local_reducers:
        for cls, reducer in local_reducers.items():
            if not isinstance(cls, type) or not callable(reducer):
                raise TypeError(f"reducers must map classes to callables, got {cls!r}: {reducer!r}")
        with _global_reducers_lock:
            user_reducers = {**_global_reducers, **local_reducers}
        return TypeDispatch(user_reducers, lookup)
    shared = _shared_dispatch.get(lookup)
    if shared is None or len(shared.handlers) > MAX_SHARED_TYPES:
        replaced = shared is not None or len(_shared_dispatch) > 64
        with _global_reducers_lock:
            if len(_shared_dispatch) > 64:  # lookups made on the fly: do not hoard them
                _shared_dispatch.clear()
            shared = _shared_dispatch[lookup] = TypeDispatch(dict(_global_reducers), lookup)
        if replaced:
            _tables_changed()
    return shared
