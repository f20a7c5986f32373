"""How each kind of object is reduced, and the per-type table the pickler uses.

A *handler* is called as ``handler(state, obj)`` (``state`` is the pickler's
``PicklerState``) and returns what
``__reduce__`` would, or ``NotImplemented`` to let the C pickler do exactly what
``pickle.dumps`` does. Returning ``NotImplemented`` for everything that can be
imported is what keeps graphpickle's output byte-identical to ``pickle``'s.
"""

from __future__ import annotations

import ast
import copyreg
import importlib
import operator
import re
import sys
import threading
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from pickle import PickleBuffer
from typing import Any

from .. import _cloudpickle_internals as cp
from .._switches import CACHING
from ..determinism import canonical as _canonical
from ..determinism.canonical import DeterministicState
from ..errors import PicklingError
from . import blocks as _blocks
from . import captures as _captures
from . import connection as _connection
from . import snapshots as _snapshots
from .captures import warn_about_large_captures
from .classes_first import ClassesFirst
from .native import speedups as _speedups
from .policy import (
    REGISTRIES,
    ByValueReason,
    class_reason,
    function_reason,
    module_reason,
    named_object_reason,
    reason_by_names,
)
from .snapshots import (
    function_snapshot,
    modules_items,
    refers_to,
    same_modules,
    same_objects,
)

__all__ = ["Reducer", "register_reducer", "unregister_reducer"]

Reducer = Callable[[Any], Any]
"""``reducer(obj)`` returns what ``obj.__reduce__()`` would (as with ``copyreg``)."""

ReducerLookup = Callable[[type], Reducer | None]
"""``lookup(cls)`` finds a reducer for a type the reducer tables do not name, or
returns ``None``: another library's registry. It is asked once per type; the
answer is remembered for every pickler given the same lookup function, while
the type's MRO and the ``__module__`` and ``__qualname__`` of each class in it
are the same (checked on every use), until :func:`forget_lookup` is called for
it (what else the lookup reads)."""


class PicklerState:
    """What handlers need of their pickler: the protocol, cloudpickle's map
    from ``id(func.__globals__)`` to the globals dict the receiver will build
    (so that functions sharing globals here share them after loading too),
    in deterministic mode what that mode needs (``None`` otherwise), and
    whether code blocks may be sent."""

    __slots__ = (
        "blocks",
        "by_value",
        "class_part",
        "deterministic",
        "globals_ref",
        "protocol",
        "sink",
    )

    def __init__(
        self,
        protocol: int,
        deterministic: DeterministicState | None = None,
        blocks: ContextVar[Any] | None = None,
    ) -> None:
        self.protocol = protocol
        self.deterministic = deterministic
        # While this is true, remembered by-value functions and code objects
        # travel as code blocks (see blocks.py): set by an engine integration
        # whose receiver said it loads them.
        self.blocks = blocks
        self.globals_ref: dict[int, dict[str, Any]] = {}
        # Set once anything is pickled by value: such payloads load only on the
        # same Python minor version (the wire envelope checks it).
        self.by_value = False
        # A pooled dask pickler's Sink (pickler.accelerated_dumps): then a
        # by-value class met in a task for a connection raises ClassesFirst,
        # unless class_part is set (see classes_first.py). None elsewhere.
        self.sink: Any = None
        self.class_part = False

    def reset(self) -> None:
        """Forget what a dump wrote: a pooled pickler (``_speedups.Dumper``) starts
        its next payload as a new pickler would (functions pickled by value then
        share no globals dict with those of an earlier payload)."""
        self.globals_ref = {}
        self.by_value = False


Handler = Callable[[PicklerState, Any], Any]


def _remember_nothing(obj: Any) -> None:
    pass


# The C hook remembers the functions and classes the policy sent by reference
# and answers for them again, checking in C that they are still importable
# (see _speedups.c: what a hit checks). The Python hook asks the policy each time.
remember_by_reference: Callable[[Any], None] = (
    _remember_nothing if _speedups is None or not CACHING else _speedups.remember_by_reference
)


# --- by-value function reductions remembered between payloads -----------------
#
# A scheduler sends the same notebook function in message after message. Its
# reduction (cloudpickle's state: the globals it uses, its defaults, closure,
# attributes, submodules) is remembered, per function, with a snapshot of every
# object the reduction is built from (snapshots.function_snapshot), taken
# *before* the reduction. The reduction is remembered only if it is verified to
# be exactly what cloudpickle builds from that snapshot (_built_from): a change
# by another thread while it was built, or a reduction of a shape this module
# does not know (another cloudpickle, another Python), leaves it unremembered.
# The next payload reuses it only if a new snapshot holds the very same objects,
# so a reused reduction is always the one a fresh reduction would give. What the
# objects *contain* is written afresh in every payload (a list mutated in place
# is seen). Functions are remembered only when why they go by value depends on
# the snapshot alone (``__main__``, lambdas, closures, <locals>), in default
# mode, when no capture was large enough to warn about, and when the entry
# would not keep the function alive. Memory: up to _MAX_REMEMBERED entries,
# each holding its reduction (the captured values of its last payload) until
# its function is freed or the entry is rebuilt. Code objects are immutable:
# their reductions are remembered by identity (holding the code, up to
# _MAX_REMEMBERED).
_MAX_REMEMBERED = 512
_MISSING = object()
_REMEMBERED_REASONS = frozenset(
    {ByValueReason.MAIN, ByValueReason.LAMBDA, ByValueReason.CLOSURE, ByValueReason.LOCAL}
)
# A function that goes by value because its module does not hold it (3.14+:
# every dataclass's __init__.__annotate__, of module dataclasses) is remembered
# too, but its names do not decide that: each reuse asks the policy again
# (in Python: the C hook leaves such entries to it).
_RECHECKED_REASONS = frozenset({ByValueReason.NOT_IMPORTABLE})
# An entry of _functions (id(func) -> entry) and the parts of its reduction, by
# position; _speedups.c reads both (its ENTRY_FIELDS and PARTS_FIELDS).
ENTRY_FIELDS = (
    "ref", "snapshot", "names", "modules", "growable", "generation", "parts", "block", "recheck",
)  # fmt: skip
PARTS_FIELDS = ("make", "code", "closure", "state", "setstate")
_REF, _SNAPSHOT, _NAMES, _MODULES, _GROWABLE, _GENERATION, _PARTS, _BLOCK, _RECHECK = range(
    len(ENTRY_FIELDS)
)
_functions: dict[int, tuple[Any, ...]] = {}
_codes: dict[int, tuple[types.CodeType, Any, Any]] = {}
# What cloudpickle's function state holds (_function_getstate's slot state).
# (and one of "__annotations__" and "__annotate__": cp.function_state)
_SLOT_KEYS = frozenset({
    "__name__", "__qualname__", "__kwdefaults__", "__defaults__",
    "__module__", "__doc__", "__closure__", "_cloudpickle_submodules", "__globals__",
})  # fmt: skip


def forget_by_value() -> None:
    """Drop every remembered by-value reduction."""
    _functions.clear()
    _codes.clear()
    _function_blocks.clear()


def _remember(func: types.FunctionType, entry: tuple[Any, ...]) -> None:
    """Keep ``entry`` (its first item a weak reference to ``func``)."""
    if len(_functions) >= _MAX_REMEMBERED:
        _functions.clear()
    _functions[id(func)] = entry


def _weak_ref(func: types.FunctionType) -> Any:
    key, table = id(func), _functions  # (the table itself: module globals go at exit)

    def forget(_: object) -> None:  # the entry goes with the function (before its id is reused)
        table.pop(key, None)

    return weakref.ref(func, forget)


def _recall(func: types.FunctionType) -> tuple[Any, ...] | None:
    entry = _functions.get(id(func))
    if entry is None or entry[_REF]() is not func:
        return None
    return entry


def _reduce_function(state: PicklerState, func: types.FunctionType) -> Any:
    if state.deterministic is None:
        reused = _reuse(state, func)
        if reused is not None:
            return reused
    reason = function_reason(func)
    if reason is None:
        remember_by_reference(func)
        return NotImplemented
    state.by_value = True
    canonical = state.deterministic is not None
    # Globals that are not an exact dict are read through the mapping, by
    # cloudpickle as by LOAD_GLOBAL: no snapshot of them can be verified.
    if (
        canonical
        or not CACHING
        or (reason not in _REMEMBERED_REASONS and reason not in _RECHECKED_REASONS)
        or type(func.__globals__) is not dict
    ):
        reduction = cp.reduce_function_by_value(state, func, canonical=canonical)
        warn_about_large_captures(func, reduction[2])
        return reduction
    if getattr(func, "__annotate__", None) is None:  # (3.14+: deferred ones are not read)
        func.__annotations__  # noqa: B018  (made now: the reduction reads it, and the snapshot must see it)
    # The names are those of this code object; the entry is kept only if the
    # snapshot holds this very code (another thread may swap __code__ between).
    code = func.__code__
    names = cp.code_global_names(code)
    recheck = reason in _RECHECKED_REASONS
    snapshot = function_snapshot(func, names, _MISSING)
    modules = modules_items() if _module_dependencies(snapshot, names) else None
    reduction = cp.reduce_function_by_value(state, func)
    # What the capture check below sees, read before it runs (another thread may
    # grow a capture or change the threshold meanwhile: the entry then checks again).
    generation = _captures._generation
    growable = _captures.growable_sizes(func, reduction[2])
    if (
        warn_about_large_captures(func, reduction[2])
        and _decided_by_snapshot(snapshot, code, recheck)
        and _built_from(reduction, snapshot, names, modules)
    ):
        make, (code, _, _, _, closure), func_state, _, _, setstate = reduction
        # A recursive closure (its own cell) would be kept alive by its entry.
        if not refers_to((snapshot, func_state), func):
            entry = (
                _weak_ref(func), snapshot, names, _modules_entry(snapshot, names, modules),
                growable, generation, (make, code, closure, func_state, setstate),
                _block_of(func_state), recheck,
            )  # fmt: skip
            _remember(func, entry)
            if entry[_BLOCK] is not None and _blocks_wanted(state):
                return _block_reduction(state, func, entry)
    return reduction


def _decided_by_snapshot(snapshot: tuple[Any, ...], code: types.CodeType, recheck: bool) -> bool:
    """Whether what the entry depends on is all in ``snapshot``: the code its
    global names were read from, and a reason to go by value that the
    snapshot's own names give (another thread may change ``__code__``,
    ``__module__`` or ``__qualname__`` while the reduction is made), unless the
    entry asks the policy again at each reuse (``recheck``). A new snapshot of
    the very same objects then means the same names and the same decision."""
    fixed = dict(zip(_snapshots.SNAPSHOT_FIELDS, snapshot, strict=False))
    return fixed["code"] is code and (
        recheck or reason_by_names(fixed["module"], fixed["qualname"]) in _REMEMBERED_REASONS
    )


def _split(snapshot: tuple[Any, ...], names: tuple[str, ...]) -> tuple[Any, ...]:
    """A snapshot's parts: its fixed fields (a dict), the globals' values, the
    cells' contents, the attributes' keys and values (flat)."""
    fixed = dict(zip(_snapshots.SNAPSHOT_FIELDS, snapshot, strict=False))
    start = len(_snapshots.SNAPSHOT_FIELDS)
    cells = start + len(names)
    attributes = cells + len(fixed["closure"] or ())
    return fixed, snapshot[start:cells], snapshot[cells:attributes], snapshot[attributes:]


def _dependencies(snapshot: tuple[Any, ...], names: tuple[str, ...]) -> list[Any]:
    """The globals and cell contents that cloudpickle's submodule search reads."""
    _, values, cells, _ = _split(snapshot, names)
    return [value for value in (*values, *cells) if value is not _MISSING]


def _module_dependencies(snapshot: tuple[Any, ...], names: tuple[str, ...]) -> list[Any]:
    return [v for v in _dependencies(snapshot, names) if isinstance(v, types.ModuleType)]


def _built_from(
    reduction: Any, snapshot: tuple[Any, ...], names: tuple[str, ...], modules: Any
) -> bool:
    """Whether ``reduction`` is exactly what cloudpickle builds from the objects
    in ``snapshot`` (and, if its dependencies include modules, from
    ``sys.modules`` as ``modules`` holds it): the same objects where it holds
    them, equal copies where it copies (names, attribute keys). Anything of
    another shape is not verified, and so not remembered."""
    try:
        _, newargs, (attributes, slots), _, _, _ = reduction
        code, _, no_name, no_defaults, closure = newargs
    except (TypeError, ValueError):
        return False
    fixed, values, _, attribute_items = _split(snapshot, names)
    if not (
        _slots_shaped(slots, attributes)
        and code is fixed["code"]
        and no_name is None
        and no_defaults is None
        and (closure is None) == (fixed["closure"] is None)
        and _same_slots(slots, fixed)
    ):
        return False
    expected_globals = [(n, v) for n, v in zip(names, values, strict=True) if v is not _MISSING]
    expected_attributes = list(zip(attribute_items[0::2], attribute_items[1::2], strict=True))
    if not (
        _same_pairs(slots["__globals__"], expected_globals)
        and _same_pairs(attributes, expected_attributes)
    ):
        return False
    submodules = slots["_cloudpickle_submodules"]
    expected = (
        [] if modules is None else cp.submodules_in(code, _dependencies(snapshot, names), modules)
    )
    return type(submodules) is list and _same_list(submodules, expected)


def _annotations_slot(slots: dict[str, Any]) -> str:
    """Where cloudpickle's slot state keeps annotations: 3.14's deferred ones
    as ``__annotate__``, else ``__annotations__``."""
    return "__annotations__" if "__annotations__" in slots else "__annotate__"


def _slots_shaped(slots: Any, attributes: Any) -> bool:
    """cloudpickle's slot state and attributes: two dicts, the slots' keys those it writes."""
    return (
        type(slots) is dict
        and slots.keys() == _SLOT_KEYS | {_annotations_slot(slots)}
        and type(attributes) is dict
    )


def _same_slots(slots: dict[str, Any], fixed: dict[str, Any]) -> bool:
    """The slot state holds the snapshot's objects where cloudpickle holds them,
    equal names where it copies them."""
    return (
        all(slots[f"__{field}__"] is fixed[field] for field in _SHARED_FIELDS)
        and slots[_annotations_slot(slots)] is fixed["annotations"]
        and slots["__name__"] == fixed["name"]
        and slots["__qualname__"] == fixed["qualname"]
    )


# The fields cloudpickle's slot state holds as they are (not copies).
_SHARED_FIELDS = ("closure", "defaults", "kwdefaults", "module", "doc")


def _same_pairs(made: dict[str, Any], expected: list[tuple[str, Any]]) -> bool:
    """A dict cloudpickle made: equal keys, the same values, in order."""
    return len(made) == len(expected) and all(
        key == name and value is found
        for (key, value), (name, found) in zip(made.items(), expected, strict=True)
    )


def _same_list(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _modules_entry(snapshot: tuple[Any, ...], names: tuple[str, ...], modules: Any) -> Any:
    """What a remembered reduction's submodules depend on besides the snapshot:
    ``sys.modules`` (its keys and values), and the names and packages of the
    modules among the function's dependencies; ``None`` when there are none."""
    if modules is None:
        return None
    return modules, _module_names(snapshot, names)


def _module_names(snapshot: tuple[Any, ...], names: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(
        (getattr(m, "__name__", None), getattr(m, "__package__", None))
        for m in _module_dependencies(snapshot, names)
    )


def _reuse(state: PicklerState, func: types.FunctionType) -> Any:
    """The remembered reduction of ``func`` for this payload, if a new snapshot
    (and, for one that depends on them, sys.modules) shows that a fresh
    reduction would be the same; ``None`` otherwise. The C hook answers the
    entries without modules or growable captures itself, as this does."""
    entry = _recall(func)
    if entry is None or entry[_GENERATION] != _captures._generation:
        return None
    names = entry[_NAMES]
    if not same_objects(function_snapshot(func, names, _MISSING), entry[_SNAPSHOT]):
        return None
    if entry[_RECHECK] and function_reason(func) not in _RECHECKED_REASONS:
        return None  # (importable now, say: a fresh decision follows)
    make, code, closure, func_state, setstate = entry[_PARTS]
    # Which dependencies are modules is asked again (isinstance, as cloudpickle
    # asks it: an object's __class__ may come to say ModuleType).
    if entry[_MODULES] is None:
        if _module_dependencies(entry[_SNAPSHOT], names):
            return None
    elif not _same_submodules(func, entry):
        return None
    state.by_value = True
    growable = entry[_GROWABLE]
    if growable is not None:  # a capture may have grown in place
        sizes = _captures.growable_sizes(func, func_state)
        # Checked again until a check finds them small (a fresh reduction
        # warns in every payload).
        if (sizes != growable or -1 in growable) and warn_about_large_captures(func, func_state):
            _functions[id(func)] = (*entry[:_GROWABLE], sizes, *entry[_GROWABLE + 1 :])
    if entry[_BLOCK] is not None and _blocks_wanted(state):
        return _block_reduction(state, func, entry)
    return (
        make,
        (code, _base_globals(state, func), None, None, closure),
        func_state,
        None,
        None,
        setstate,
    )


def _block_of(func_state: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(make_function, flat state)``: how a remembered function travels to a
    receiver that loads code blocks (see blocks.py); ``None`` for a state of
    a shape blocks.py does not know."""
    flat = _blocks.flat_state(func_state)
    return None if flat is None else (_blocks.make_function, flat)


def _blocks_wanted(state: PicklerState) -> bool:
    """Whether this dump sends code blocks: its context variable holds True (a
    block in every payload) or a connection's session (see connection.py; the
    C hook asks the same: blocks_wanted)."""
    if state.blocks is None:
        return False
    wanted = state.blocks.get(False)
    return wanted is not False and wanted is not None


def _carries(state: PicklerState, session: _connection.Session, block: bytes, name: bytes) -> bool:
    """``session.carries(block, name)``; a pooled dask pickler's first block of a
    payload marks where the payload starts in the session, so that a restart
    with the classes first (classes_first.restart) undoes what it carried."""
    sink = state.sink
    if sink is not None and sink.mark is None:
        sink.mark = session.mark()
    return session.carries(block, name)


def _session(state: PicklerState) -> _connection.Session | None:
    """The connection's session this dump writes for, if any (caching on)."""
    wanted = state.blocks.get(False) if state.blocks is not None else None
    return wanted if type(wanted) is _connection.Session and CACHING else None


def _block_reduction(state: PicklerState, func: types.FunctionType, entry: tuple[Any, ...]) -> Any:
    """cloudpickle's reduction of a remembered function, flat, for
    blocks.make_function (the C hook makes the same), or on a connection
    (a session) as its function block, once, then its digest."""
    make, flat = entry[_BLOCK]
    _, code, closure, _, _ = entry[_PARTS]
    session = _session(state)
    if session is not None:
        held = _held_reduction(state, session, func.__globals__, code, closure, flat)
        if held is not None:
            return held
    # The payload's globals dict for the function's module, which the other
    # functions of that module in the same payload share (as in cloudpickle's).
    return (make, (code, _base_globals(state, func), closure, *flat))


# Function blocks made, by id of the flat state they were made from:
# (flat, code, items, block, what a payload sends of flat, the module's
# values its items were read from or None, the block's digest). The C hook
# answers session dumps of remembered functions from these where the answer
# is the same as before (_speedups.c: held_function_reduction), and hands the
# others to _block_reduction, once their snapshot is checked.
_function_blocks: dict[int, tuple[Any, ...]] = {}


def _held_reduction(
    state: PicklerState,
    session: _connection.Session,
    module_globals: dict[str, Any],
    code: types.CodeType,
    closure: Any,
    flat: tuple[Any, ...],
) -> Any:
    """``function_once(block, ...)`` or ``function_ref(digest, ...)``, what a
    remembered function's payload carries besides its function block
    (blocks.sent_slots); ``None`` where no block can hold its immutable parts."""
    made = _function_blocks.get(id(flat))
    if made is not None and (made[0] is not flat or made[1] is not code):
        made = None
    base = state.globals_ref.get(id(module_globals))
    if base is None:  # this payload's first function of that module
        values = _base_values(module_globals)
        if made is not None and made[5] is not None and same_objects(made[5], values):
            items = made[2]
        else:
            items = _blocks.held_items(_module_items(module_globals))
            made = None
        if items is None:
            return None
        base = state.globals_ref[id(module_globals)] = _blocks.HeldGlobals(items)
        base.sent_as = None
    else:  # (an exact dict written by an earlier reduction travels as it is)
        values = None
        items = _blocks.held_items(base)
        if items is None:
            return None
        if made is not None and made[2] != items:
            made = None
    if made is None:
        code_block = _code_block(code)
        block = None if code_block is None else _blocks.function_block(code_block, flat, items)
        if block is None:
            return None
        if len(_function_blocks) >= _MAX_REMEMBERED:
            _function_blocks.clear()
        made = _function_blocks[id(flat)] = (
            flat, code, items, block, _blocks.sent_slots(flat), values,
            _connection.digest(block),
        )  # fmt: skip
    carried = _carries(state, session, made[3], made[6])
    named = made[3] if carried else made[6]
    make = _blocks.function_once if carried else _blocks.function_ref
    if type(base) is _blocks.HeldGlobals and base.sent_as is None:
        # Made from the first block that names it, before that block's call.
        base.sent_as = (make, (named,))
    return (make, (named, base, closure, *made[4]))


_BASE_NAMES = ("__package__", "__name__", "__path__", "__file__")  # cloudpickle's


def _base_values(module_globals: dict[str, Any]) -> tuple[Any, ...]:
    """What base globals are made of in a module's globals (_MISSING where
    none; the C hook reads the same: held_function_reduction)."""
    get = module_globals.get
    return (get("__package__", _MISSING), get("__name__", _MISSING),
            get("__path__", _MISSING), get("__file__", _MISSING))  # fmt: skip


def _code_block(code: types.CodeType) -> bytes | None:
    """The code block of ``code``, as _reduce_code remembers it."""
    entry = _codes.get(id(code))
    sent_as = entry[2] if entry is not None and entry[0] is code else None
    if sent_as is not None and sent_as[0] is _blocks.load_code:
        return sent_as[1][0]  # type: ignore[no-any-return]
    return _blocks.code_block(code)


def _reduce_held_globals(state: PicklerState, base: Any) -> Any:
    """A payload's base globals whose items a function block holds: made from
    that block on the receiver, or (written first by another reduction) as a
    plain dict."""
    if base.sent_as is not None:
        return base.sent_as
    return (dict, (dict(base),))


def _same_submodules(func: types.FunctionType, entry: tuple[Any, ...]) -> bool:
    """Whether cloudpickle's submodule search would find the remembered
    submodules again: sys.modules holds the same keys and values (a check of
    pointers), or, after a change, the same search over it finds the very same
    modules (the entry then remembers the new sys.modules)."""
    modules, module_names = entry[_MODULES]
    snapshot, names = entry[_SNAPSHOT], entry[_NAMES]
    if _module_names(snapshot, names) != module_names:
        return False
    if same_modules(modules):
        return True
    now = modules_items()
    submodules = entry[_PARTS][3][1]["_cloudpickle_submodules"]
    if not _same_list(
        cp.submodules_in(func.__code__, _dependencies(snapshot, names), now), submodules
    ):
        return False
    _functions[id(func)] = (*entry[:_MODULES], (now, module_names), *entry[_MODULES + 1 :])
    return True


def _base_globals(state: PicklerState, func: types.FunctionType) -> dict[str, Any]:
    """The dict the receiver makes the function's globals from: one per module
    and payload, as cloudpickle shares it (state.globals_ref)."""
    return _module_base_globals(state, func.__globals__)


def _module_base_globals(state: PicklerState, module_globals: dict[str, Any]) -> dict[str, Any]:
    base = state.globals_ref.setdefault(id(module_globals), {})
    if not base:
        base.update(_module_items(module_globals))
    return base


def _module_items(module_globals: dict[str, Any]) -> dict[str, Any]:
    """What cloudpickle's base globals hold of a module's globals."""
    return {name: module_globals[name] for name in _BASE_NAMES if name in module_globals}


# Classes of `types` that are not importable by name (every code reduction names
# types.CodeType): their reductions are constant.
_builtin_type_reductions: dict[type, Any] = {}


def _reduce_class(state: PicklerState, cls: type) -> Any:
    # A class's reduction is not remembered between payloads: checking that a
    # remembered one still holds reads what building it reads (its dict, and
    # what its bases hold under the same names).
    # Both tables hold classes of metaclass `type` only; a class of another
    # metaclass is never looked up in them: its metaclass may define __eq__
    # without __hash__, and pickle writes such a class by reference.
    plain = type(cls) is type
    builtin = _builtin_type_reductions.get(cls) if plain else None
    if builtin is not None:
        return builtin
    reason = class_reason(cls)
    if reason is None:
        remember_by_reference(cls)
        return NotImplemented
    if not plain and type(cls) in copyreg.dispatch_table:
        # Its metaclass's reducer (copyreg.pickle), which pickle uses for it.
        return NotImplemented
    if plain and cls in cp.BUILTIN_TYPES:  # types.FunctionType & co are references to `types`
        reduction = _builtin_type_reductions[cls] = cp.reduce_class_by_value(cls)
        return reduction
    state.by_value = True
    # On a pooled dask pickler, for a connection, before anything went out of the
    # dump: the Dumper writes the task again, this class first (classes_first.py).
    sink = state.sink
    restart = sink is not None and not state.class_part and not (sink.handed or sink.written)
    if restart and _session(state) is not None:
        raise ClassesFirst(cls)
    if state.deterministic is None:
        reduction = cp.reduce_class_by_value(cls)
        if _blocks_wanted(state) and reduction[0] is cp.make_skeleton_class:
            return (_blocks.make_class, *reduction[1:])
        return reduction
    class_id = state.deterministic.class_id(cls)
    return cp.reduce_class_by_value(cls, canonical=True, tracker_id=class_id)


def _reduce_set_subclass(state: PicklerState, members: set[Any] | frozenset[Any]) -> Any:
    if state.deterministic is None:
        return NotImplemented
    return _canonical.reduce_set_subclass(state, members)


def _reduce_code(state: PicklerState, code: types.CodeType) -> Any:
    if state.deterministic is not None:
        return _canonical.reduce_code(state, code)
    blocks = _blocks_wanted(state)
    entry = _codes.get(id(code))
    if entry is not None and entry[0] is not code:
        entry = None
    answer: Any = None if entry is None else entry[2 if blocks else 1]
    if answer is None:
        reduction = cp.reduce_code(code) if entry is None else entry[1]
        sent_as = None  # the reduction when blocks are wanted: made the first time they are
        if blocks:
            block = _blocks.code_block(code)
            sent_as = reduction if block is None else (_blocks.load_code, (block,))
        if CACHING:
            if len(_codes) >= _MAX_REMEMBERED:
                _codes.clear()
            _codes[id(code)] = (code, reduction, sent_as)  # (the C hook reads these too)
        answer = reduction if sent_as is None else sent_as
    session = _session(state) if blocks else None
    if session is not None and answer[0] is _blocks.load_code:
        block = answer[1][0]  # once per connection, then its digest
        digest = _connection.digest(block)
        carried = _carries(state, session, block, digest)
        return (_blocks.code_once, (block,)) if carried else (_blocks.code_ref, (digest,))
    return answer


def _reduce_module(state: PicklerState, module: types.ModuleType) -> Any:
    by_value = module_reason(module) is not None
    state.by_value |= by_value
    reduction = cp.reduce_module(module, by_value=by_value)
    if not by_value and _session(state) is not None:
        # (a payload on a connection names graphpickle.core.blocks already)
        return (_blocks.subimport, reduction[1])
    return reduction


def _reduce_method(state: PicklerState, method: types.MethodType) -> Any:
    # The standard reduction, getattr(owner, name), is kept whenever it finds this
    # very function again on an owner the receiver imports; a function bound by
    # hand, a name-mangled private method, or an owner whose class goes by value
    # goes as MethodType(func, owner) instead. For the last: the method may be
    # reached while its class is being rebuilt (Ray's actor metadata holds the
    # class's bound methods, and the methods' closures hold that metadata), when
    # getattr would find nothing, or another copy of the function.
    func = method.__func__
    owner = method.__self__
    try:
        found_again = getattr(owner, func.__name__).__func__ is func
    except Exception:
        found_again = False
    if found_again and class_reason(owner if isinstance(owner, type) else type(owner)) is None:
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


# 3.15's `lazy import` binds a proxy of this type in a module's dict until the
# name is first used; pickle cannot write it.
_LAZY_IMPORT: type | None = getattr(types, "LazyImportType", None)
_LAZY_NAME = re.compile(r"<lazy_import '([\w.]+)'>")


def _reduce_lazy_import(state: PicklerState, lazy: Any) -> Any:
    """A lazily imported name that a by-value function uses: the function would
    see the imported object, so it is imported now, in the sender, as the first
    use of the name would, and pickled in the proxy's place."""
    try:
        imported = lazy.resolve()
    except Exception as exc:
        raise PicklingError(
            f"a lazy import is pickled as what it imports, and importing {lazy!r} "
            f"failed ({type(exc).__name__}: {exc})"
        ) from exc
    # resolve() of `lazy import a.b.c` returns a, without importing a.b.c (3.15.2),
    # where a use of the name imports it: the whole name (which only the repr
    # gives) is imported too, and pickled first, so that the receiver imports it.
    named = _LAZY_NAME.fullmatch(repr(lazy))
    whole = named[1] if named is not None else ""
    if isinstance(imported, types.ModuleType) and whole.startswith(imported.__name__ + "."):
        return (operator.getitem, ((importlib.import_module(whole), imported), 1))
    return (operator.getitem, ((imported,), 0))


# 3.14's forward references (annotationlib.ForwardRef: what a dataclass field's
# type, or annotations read as FORWARDREF, hold for a name not defined yet).
_FORWARD_REF: type | None = getattr(sys.modules.get("annotationlib"), "ForwardRef", None)


def _reduce_forward_ref(state: PicklerState, ref: Any) -> Any:
    """A forward reference, as ``object.__reduce_ex__`` has it, but for the
    namespaces it is evaluated in: the globals of the module it was made in,
    which pickle would copy whole (a notebook's every variable), and for one
    written in a class body the class's own dict (``__cell__``'s
    ``__classdict__``). It travels with the names its expression reads from
    each, as a function travels with the globals its code names (missing ones
    left out: evaluating it raises ``NameError`` where it would on the
    sender)."""
    reduction = ref.__reduce_ex__(state.protocol)
    try:
        rebuild, args, (dict_state, slots), *rest = reduction
    except (TypeError, ValueError):
        return reduction  # a shape this Python does not give: pickled as pickle would
    names = _forward_ref_names(ref)
    slots = dict(slots)
    found = slots.get("__globals__")
    if type(found) is dict:
        slots["__globals__"] = {n: found[n] for n in names if n in found}
    cells = slots.get("__cell__")
    if type(cells) is dict:  # name -> cell; the class's whole dict as __classdict__
        slots["__cell__"] = {
            name: cp.class_names_cell(cell, names) if name == "__classdict__" else cell
            for name, cell in cells.items()
        }
    return (rebuild, args, (dict_state, slots), *rest)


def _forward_ref_names(ref: Any) -> list[str]:
    """The names a forward reference's expression reads, in order, read from
    its syntax tree or its text (never evaluated)."""
    node = getattr(ref, "__ast_node__", None)
    if isinstance(node, str):
        return [node]
    if node is None:
        try:
            node = ast.parse(ref.__forward_arg__, mode="eval")
        except Exception:  # no text, or no expression: it names nothing
            return []
    return list(dict.fromkeys(n.id for n in ast.walk(node) if isinstance(n, ast.Name)))


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
    _blocks.HeldGlobals: _reduce_held_globals,
    **({} if _LAZY_IMPORT is None else {_LAZY_IMPORT: _reduce_lazy_import}),
    **({} if _FORWARD_REF is None else {_FORWARD_REF: _reduce_forward_ref}),
    # Made only by deterministic dumps (see determinism/canonical.py).
    _canonical.SortedSet: _canonical.reduce_sorted_set,
    _canonical.MemoRemap: _canonical.reduce_memo_remap,
    _canonical.Prologue: _canonical.reduce_prologue,
}


def _layouts_agree(module: Any) -> bool:
    """Whether the C module reads entries and snapshots as this package lays them out."""
    return bool(
        module.ENTRY_FIELDS == ENTRY_FIELDS
        and module.PARTS_FIELDS == PARTS_FIELDS
        and module.SNAPSHOT_FIELDS == _snapshots.SNAPSHOT_FIELDS
    )


if _speedups is not None:
    _speedups.set_by_reference_policy(
        REGISTRIES, _reduce_function, _reduce_class, _reduce_module, cp.subimport
    )
    # The C hook answers from these tables without calling the handlers (the
    # first thing each does is read them): every by-value function's payload
    # holds a code object and names types.CodeType, and a remembered function
    # is _reduce_function's first branch (an entry whose modules or growable
    # captures changed goes to Python). It answers a module that goes by
    # reference itself (set_by_reference_policy above). A C module that lays them out
    # otherwise (built from another version) is not handed them: the handlers
    # then answer every object.
    if _layouts_agree(_speedups):
        _speedups.set_remembered(
            _reduce_code, _builtin_type_reductions, _codes, _functions, vars(_captures), _MISSING
        )
        # On a connection: a remembered function's block (once checked), and
        # modules named by blocks.subimport, as the handlers answer.
        _speedups.set_session_reductions(
            _block_reduction,
            _blocks.subimport,
            _function_blocks if CACHING else None,  # (where the receiver holds a block)
            _blocks.HeldGlobals,
            _connection.Session,
            _blocks.function_ref,
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


_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: its attributes cannot be set


def _names_fixed(cls: type) -> bool:
    """Whether ``cls``'s ``__module__`` and ``__qualname__`` cannot change: an
    immutable type of metaclass ``type``, or one read through ``type``'s
    ``__getattribute__`` where every class involved (its metaclass's MRO and its
    own) is immutable (numpy's dtype classes, of metaclass ``_DTypeMeta``)."""
    meta: Any = type(cls)
    if meta is type:
        return bool(cls.__flags__ & _IMMUTABLE_TYPE)
    return meta.__getattribute__ is type.__getattribute__ and all(
        k.__flags__ & _IMMUTABLE_TYPE for k in (*meta.__mro__, *cls.__mro__)
    )


def names_read(mro: tuple[type, ...]) -> tuple[Any, ...]:
    """What a reducer lookup may read of the classes in ``mro`` besides the MRO
    itself: each class's ``__module__`` and ``__qualname__`` (dask's dispatch
    reads every class's module, the dask integration a base's names), flat, as
    ``(class, module, qualname, ...)``, for the classes whose names can change."""
    return tuple(
        item for c in mro if not _names_fixed(c) for item in (c, c.__module__, c.__qualname__)
    )


def _same_name(now: object, read: object) -> bool:
    # The very object, or an equal exact str (a static type's names are made
    # anew at each read); comparing them runs no code.
    return now is read or (type(now) is str and type(read) is str and now == read)


def same_names(read: tuple[Any, ...]) -> bool:
    """Whether each class in ``read`` (:func:`names_read`'s) still has those
    names (a read that raises is a miss: resolving again raises it)."""
    try:
        return all(
            _same_name(c.__module__, module) and _same_name(c.__qualname__, qualname)
            for c, module, qualname in zip(read[0::3], read[1::3], read[2::3], strict=True)
        )
    except Exception:
        return False


class TypeDispatch:
    """A map from a type to its handler (``None``: the C pickler's default).

    Misses are resolved once per type and remembered, so the pickler's hot path
    is a single dict lookup per object. A resolved handler is stored with every
    input its answer read: ``(handler, mro)``, or ``(handler, mro, names)`` if a
    reducer lookup was asked (:func:`names_read`: a lookup may read the names of
    the classes in the MRO). Assigning ``__bases__`` (to the type or to one of
    its bases) replaces the MRO with a new tuple, so the hook uses a handler
    only while ``type(obj).__mro__`` is still that very tuple, and those
    classes still have those very names (read first: a read may run code), and
    resolves again otherwise. The types named by the tables themselves map to
    their handler as it is.
    """

    __slots__ = ("handlers", "lookup", "user_reducers")

    def __init__(
        self, user_reducers: dict[type, Reducer], lookup: ReducerLookup | None = None
    ) -> None:
        self.user_reducers = user_reducers
        self.lookup = lookup
        self.handlers: dict[type, Handler | tuple[Any, ...] | None] = dict(_BUILTIN_HANDLERS)
        for cls, reducer in user_reducers.items():
            self.handlers[cls] = _adapt(reducer)

    def resolve(self, cls: type) -> Handler | None:
        """Find and remember the handler of a type seen for the first time (or
        whose MRO changed since)."""
        # Inputs are read first: a change made while resolving misses next time.
        mro = cls.__mro__
        handler: Handler | None = None
        names: tuple[Any, ...] | None = None
        for base in mro[1:]:
            if base in self.user_reducers:
                handler = _adapt(self.user_reducers[base])
                break
        else:
            reducer = None
            if self.lookup is not None:
                names = names_read(mro)
                reducer = self.lookup(cls)
            if reducer is not None:
                handler = _adapt(reducer)
            elif issubclass(cls, type):  # a metaclass: its instances are classes
                handler = _reduce_class
            elif issubclass(cls, set | frozenset):  # (exact sets never reach the hook)
                handler = _reduce_set_subclass
        self.handlers[cls] = (handler, mro) if names is None else (handler, mro, names)
        return handler

    @staticmethod
    def still(entry: tuple[Any, ...], cls: type) -> bool:
        """Whether a resolved entry holds for ``cls`` now (the C hook checks the
        same): its names first, as reading them may run code."""
        return (len(entry) == 2 or same_names(entry[2])) and entry[1] is cls.__mro__


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
    if not CACHING:  # each pickler resolves every type afresh, for its own dumps only
        with _global_reducers_lock:
            return TypeDispatch(dict(_global_reducers), lookup)
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
