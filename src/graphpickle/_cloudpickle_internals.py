"""Every use of cloudpickle's private internals, in one module.

graphpickle decides *which* objects go by value; cloudpickle decides *how* a
function, class or module is written by value and how the receiver rebuilds it.
Payloads therefore reference only cloudpickle's reconstructors, and a receiver
needs cloudpickle, never graphpickle.

cloudpickle does not promise these names are stable. The supported range is
pinned in ``pyproject.toml`` (``SUPPORTED_VERSIONS`` below says the same), and
``tests/test_cloudpickle_internals.py`` fails loudly if any of them moves.
Importing this module raises ``ImportError`` with a clear message if a name is
missing, rather than failing later in the middle of a ``dumps``.
"""

from __future__ import annotations

import logging
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, Protocol

import cloudpickle
from cloudpickle import cloudpickle as _cp

SUPPORTED_VERSIONS = ">=3.1.0,<3.2"

_REQUIRED = (
    "_PICKLE_BY_VALUE_MODULES",
    "_DYNAMIC_CLASS_TRACKER_BY_ID",
    "_DYNAMIC_CLASS_TRACKER_BY_CLASS",
    "_DYNAMIC_CLASS_TRACKER_LOCK",
    "_BUILTIN_TYPE_NAMES",
    "_class_reduce",
    "_code_reduce",
    "_dynamic_class_reduce",
    "_function_getstate",
    "_function_setstate",
    "_class_setstate",
    "_builtin_type",
    "_get_dataclass_field_type_sentinel",
    "_DATACLASSE_FIELD_TYPE_SENTINELS",
    "_make_cell",
    "_make_empty_cell",
    "_make_function",
    "_make_skeleton_class",
    "_method_reduce",
    "_module_reduce",
    "_decompose_typevar",
    "_make_typevar",
    "subimport",
    "dynamic_subimport",
    "_find_imported_submodules",
    "_extract_code_globals",
    "_get_cell_contents",
)
_missing = [name for name in _REQUIRED if not hasattr(_cp, name)]
if _missing or not hasattr(_cp.Pickler, "_function_getnewargs"):
    raise ImportError(
        f"graphpickle needs cloudpickle{SUPPORTED_VERSIONS}; the installed "
        f"cloudpickle {cloudpickle.__version__} lacks {_missing or ['Pickler._function_getnewargs']}"
    )

Reduction = tuple[Any, ...]

#: How a child started with ``spawn`` or ``forkserver`` names the parent's main module.
SPAWNED_MAIN = "__mp_main__"

#: Names of the modules registered for pickling by value. This is cloudpickle's
#: own set, so a module registered through either library is honoured by both.
REGISTERED_BY_VALUE: set[str] = _cp._PICKLE_BY_VALUE_MODULES


def registry_of(vendored: types.ModuleType) -> set[str] | None:
    """The by-value registry of another copy of cloudpickle's module (Ray
    vendors one as ``ray.cloudpickle.cloudpickle``, whose
    ``register_pickle_by_value`` writes to a set of its own), or ``None`` if
    it keeps none where cloudpickle 3.x keeps it. The set itself, read live."""
    registry = vars(vendored).get("_PICKLE_BY_VALUE_MODULES")
    return registry if type(registry) is set else None


#: ``find_imported_submodules(code, top_level_dependencies)``: the submodules a
#: function's code reaches through the modules it uses (``xml.dom`` through
#: ``xml``), which a by-value payload imports on the receiver.
find_imported_submodules: Callable[[types.CodeType, list[Any]], list[Any]] = (
    _cp._find_imported_submodules
)


def code_global_names(code: types.CodeType) -> tuple[str, ...]:
    """The globals a function's by-value reduction holds, if its module has
    them: the names its code (and code nested in it) reads, writes or deletes
    as globals, in cloudpickle's order. A function of the code alone."""
    return tuple(_cp._extract_code_globals(code))


def submodules_in(
    code: types.CodeType, dependencies: list[Any], modules: tuple[Any, ...]
) -> list[Any]:
    """What ``find_imported_submodules(code, dependencies)`` finds when
    ``sys.modules`` holds ``modules`` (its keys and values, flat, in order):
    the same search, over a snapshot instead of the live dict, so that a
    remembered reduction can be checked against the state it was built in.
    ``tests/test_cloudpickle_internals.py`` compares the two."""
    names = set(code.co_names)
    found = []
    for dependency in dependencies:
        if isinstance(dependency, types.ModuleType) and getattr(dependency, "__package__", None):
            prefix = dependency.__name__ + "."
            for name, module in zip(modules[0::2], modules[1::2], strict=True):
                tokens = set(name[len(prefix) :].split(".")) if name is not None else None
                if tokens is not None and name.startswith(prefix) and not tokens - names:
                    found.append(module)
    return found


#: Types that ``types`` exposes but that are not importable under their own
#: ``__module__``/``__qualname__`` (``types.FunctionType`` is ``builtins.function``).
BUILTIN_TYPES = frozenset(_cp._BUILTIN_TYPE_NAMES)


class _FunctionGlobalsHolder(Protocol):
    """What ``cloudpickle.Pickler._function_getnewargs`` reads from its pickler."""

    globals_ref: dict[int, dict[str, Any]]


def reduce_function_by_value(
    pickler: _FunctionGlobalsHolder, func: types.FunctionType, *, canonical: bool = False
) -> Reduction:
    """Reduce ``func`` to its code, defaults, closure and the globals it uses.

    Functions reduced through the same ``pickler`` that shared a globals dict when
    pickled share one again when loaded (``pickler.globals_ref`` keeps the map).
    ``canonical`` leaves out what differs between processes and machines: the
    module's ``__file__`` and ``__path__`` (unless the code reads them, which puts
    them among the globals it uses) and the import order of its submodules; it
    writes ``__mp_main__`` as ``__main__`` (see :func:`_main_as_main`), and
    closure cells as copies (see :func:`_copy_cell`).
    """
    newargs = _cp.Pickler._function_getnewargs(pickler, func)
    state, slotstate = function_state(func)
    if canonical:
        base_globals = newargs[1]  # (code, base_globals, name, defaults, closure)
        base_globals.pop("__file__", None)
        base_globals.pop("__path__", None)
        if base_globals.get("__name__") == SPAWNED_MAIN and base_globals.get("__package__") == "":
            base_globals["__package__"] = None  # the parent's __main__ has None: no package
        if "__name__" in base_globals:
            base_globals["__name__"] = _main_as_main(base_globals["__name__"])
        slotstate["__module__"] = _main_as_main(slotstate["__module__"])
        slotstate["_cloudpickle_submodules"] = _in_name_order(slotstate["_cloudpickle_submodules"])
        closure = slotstate["__closure__"]
        if closure is not None:
            slotstate["__closure__"] = tuple(_copy_cell(cell) for cell in closure)
    return (_cp._make_function, newargs, (state, slotstate), None, None, _cp._function_setstate)


def make_function_as_loaded(
    code: types.CodeType,
    base_globals: dict[str, Any],
    closure: Any,
    attributes: dict[str, Any],
    slot_keys: tuple[str, ...],
    slot_values: tuple[Any, ...],
) -> types.FunctionType:
    """The function a receiver of :func:`reduce_function_by_value`'s reduction
    builds: ``_make_function(code, base_globals, None, None, closure)`` then
    ``_function_setstate(func, (attributes, dict(zip(slot_keys,
    slot_values))))``, step for step, without the slot dict (what
    ``core/blocks.py`` sends). ``tests/test_cloudpickle_internals.py``
    compares the two."""
    builtins = BUILTINS_OF_CLOUDPICKLE
    base_globals["__builtins__"] = builtins
    func = types.FunctionType(code, base_globals, None, None, closure)
    func.__dict__.update(attributes)
    slots = dict(zip(slot_keys, slot_values, strict=True))
    base_globals.update(slots.pop("__globals__"))
    base_globals["__builtins__"] = builtins
    slot_closure = slots.pop("__closure__")
    slots.pop("_cloudpickle_submodules")  # (loading them imported them)
    if slot_closure is not None:
        for i, cell in enumerate(slot_closure):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            func.__closure__[i].cell_contents = value  # type: ignore[index]
    for name, value in slots.items():
        setattr(func, name, value)
    return func


#: What cloudpickle's reconstructors set as a function's ``__builtins__`` (their
#: module's own).
BUILTINS_OF_CLOUDPICKLE = vars(_cp)["__builtins__"]


def function_state(func: types.FunctionType) -> tuple[dict[str, Any], dict[str, Any]]:
    """cloudpickle's state of a function pickled by value: ``(attributes, slot
    state)``, which its ``_function_setstate`` applies on the receiver
    (``setattr`` for each slot); cloudpickle's own ``_function_getstate``, but
    for what Python 3.14's deferred annotations add:

    - A function that has an ``__annotate__`` travels with it, not with its
      ``__annotations__``: reading those evaluates them, which fails for a name
      imported only under ``if TYPE_CHECKING:`` and may run code the sender
      never ran. The receiver computes them when they are read, as the sender
      would (a ``NameError`` where the sender would raise one).
    - An ``__annotate__`` of a class or of a method reads names from the class
      body (its ``__classdict__`` cell holds the class's own dict) and from the
      module (``LOAD_FROM_DICT_OR_GLOBALS``, which cloudpickle's list of
      globals does not look for): it travels with the names its code reads from
      either, not with the whole class dict.
    """
    annotate = getattr(func, "__annotate__", None)
    reads_class = "__classdict__" in func.__code__.co_freevars
    if annotate is None and not reads_class:
        state: tuple[dict[str, Any], dict[str, Any]] = _cp._function_getstate(func)
        return state
    return _deferred_function_state(func, annotate, reads_class)


def _deferred_function_state(
    func: types.FunctionType, annotate: Any, reads_class: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``_function_getstate(func)`` with :func:`function_state`'s changes: the
    same slots in the same order, the same copies of the names (cloudpickle
    copies them so that interning cannot change the memo), the same submodules.
    ``tests/test_cloudpickle_internals.py`` compares the two."""
    code = func.__code__
    annotations = (
        ("__annotations__", func.__annotations__)
        if annotate is None
        else ("__annotate__", annotate)
    )
    closure = func.__closure__
    names = list(code_global_names(code))
    if reads_class:
        read = _names_read(code)
        names += [name for name in read if name not in names]
        closure = _with_class_names(func, read)
    slotstate = {
        "__name__": "".join(func.__name__),
        "__qualname__": "".join(func.__qualname__),
        annotations[0]: annotations[1],
        "__kwdefaults__": func.__kwdefaults__,
        "__defaults__": func.__defaults__,
        "__module__": func.__module__,
        "__doc__": func.__doc__,
        "__closure__": closure,
    }
    found = func.__globals__
    func_globals = {k: found[k] for k in names if k in found}
    cells = [_cp._get_cell_contents(cell) for cell in closure or ()]
    slotstate["_cloudpickle_submodules"] = _cp._find_imported_submodules(
        code, [*func_globals.values(), *cells]
    )
    slotstate["__globals__"] = func_globals
    return {"".join(k): v for k, v in func.__dict__.items()}, slotstate


def _names_read(code: types.CodeType) -> list[str]:
    """Every name ``code`` and the code nested in it name, in order."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += [name for name in _names_read(const) if name not in names]
    return names


def _with_class_names(func: types.FunctionType, read: list[str]) -> tuple[types.CellType, ...]:
    """``func``'s closure, its ``__classdict__`` cell replaced by
    :func:`class_names_cell`."""
    return tuple(
        class_names_cell(cell, read) if var == "__classdict__" else cell
        for cell, var in zip(func.__closure__ or (), func.__code__.co_freevars, strict=True)
    )


def class_names_cell(cell: types.CellType, read: list[str]) -> types.CellType:
    """A ``__classdict__`` cell (3.14+: the class's own dict, which annotations
    written in a class body read names from) as it travels: a new cell with the
    names ``read`` that the class's dict has, not the whole dict (its
    descriptors, caches and every method)."""
    contents = _cp._get_cell_contents(cell)
    if type(contents) is not dict:
        return cell
    return types.CellType({name: contents[name] for name in read if name in contents})


# Where Python 3.14+ keeps a class's deferred annotations in its dict: the
# function that computes them, and what reading them once left.
_ANNOTATION_KEYS = ("__annotate_func__", "__annotations_cache__")


def _keep_deferred_annotations(cls: type, clsdict: dict[str, Any]) -> None:
    """A class whose annotations are deferred (3.14+: it has an ``__annotate__``)
    travels with it, as a function does (:func:`function_state`), where
    cloudpickle leaves it out and the receiver's class has no annotations at
    all. ``_class_setstate`` sets ``__annotate__`` as any attribute; the
    annotations are computed on the receiver when read, as on the sender (the
    copy a first reading cached is left out: it is computed again)."""
    annotate = getattr(cls, "__annotate__", None)
    if annotate is None:
        return
    for key in _ANNOTATION_KEYS:
        clsdict.pop(key, None)
    clsdict["__annotate__"] = annotate


def _in_name_order(submodules: list[Any]) -> list[Any]:
    """The submodules cloudpickle found, by the ``sys.modules`` key each was
    found under (the search matches keys: a value need not be a module, nor
    have a ``__name__``), rather than in import order."""
    if len(submodules) < 2:
        return submodules
    found_under = {id(module): name for name, module in sys.modules.copy().items()}
    return sorted(submodules, key=lambda module: found_under.get(id(module), ""))


def reduce_class_by_value(
    cls: type, *, canonical: bool = False, tracker_id: str | None = None
) -> Reduction:
    """Reduce a class that the receiver cannot import to a rebuildable skeleton.

    ``canonical`` names the class ``tracker_id`` instead of a random uuid4 and
    leaves out what changes with the class's use or place: the ``__slotnames__``
    cache that pickling an instance adds, and ``__firstlineno__`` (3.13+); it
    sorts the registered virtual subclasses of an ABC (a WeakSet's order),
    writes ``__mp_main__`` as ``__main__``, and leaves out what equals its
    base's by value (see :func:`_drop_inherited_values`).
    """
    if cls in BUILTIN_TYPES:
        reduction: Reduction = _cp._class_reduce(cls)
        return reduction
    # Calling the dynamic reducer directly (not ``_class_reduce``) matters for
    # ``__mp_main__``: cloudpickle would otherwise pickle it by reference.
    reduction = _cp._dynamic_class_reduce(cls)
    _keep_deferred_annotations(cls, reduction[2][0])
    if not canonical:
        return reduction
    rebuild, newargs, (clsdict, slotstate), *rest = reduction
    clsdict.pop("__slotnames__", None)
    clsdict.pop("__firstlineno__", None)
    _drop_inherited_values(cls, clsdict)
    if isinstance(clsdict.get("_abc_impl"), list):
        clsdict["_abc_impl"].sort(key=lambda c: (c.__module__, c.__qualname__))
    if cls.__module__ == SPAWNED_MAIN:
        # In the skeleton's arguments (type_kwargs of _make_skeleton_class,
        # module of _make_skeleton_enum) and in the class dict.
        main = _main_as_main(SPAWNED_MAIN)
        if rebuild is _cp._make_skeleton_enum:
            newargs = (*newargs[:4], main, *newargs[5:])
        elif "__module__" in newargs[3]:
            newargs[3]["__module__"] = main
        if "__module__" in clsdict:
            clsdict["__module__"] = main
    # The tracker id is the next-to-last argument of _make_skeleton_enum (bases,
    # name, qualname, members, module, tracker_id, extra) and _make_skeleton_class
    # (metaclass, name, bases, type_kwargs, tracker_id, extra).
    index = len(newargs) - 2
    newargs = (*newargs[:index], tracker_id, *newargs[index + 1 :])
    return (rebuild, newargs, (clsdict, slotstate), *rest)


_PLAIN_VALUES = (str, bytes, int, float, complex, bool, type(None))


def _drop_inherited_values(cls: type, clsdict: dict[str, Any]) -> None:
    """Leave out of ``clsdict`` each plain value (a str, bytes or number) equal
    to the one the class inherits under that name.

    cloudpickle leaves out what *is* the base's (``_extract_class_dict``): an
    identity test, which a receiver fails where the sender passed. The
    receiver's ``__module__`` strings, for one, are loaded (or re-applied by
    cloudpickle onto a class it already tracks) as objects of their own, so a
    subclass's dict would gain an entry and its payload would change. Left out,
    such a value is inherited on load: equal, as the sender's was.
    """
    if len(cls.__bases__) == 1:
        inherited: Any = cls.__bases__[0].__dict__
    else:
        inherited = {}
        for base in reversed(cls.__bases__):
            inherited.update(base.__dict__)
    for name in [name for name, value in clsdict.items() if type(value) in _PLAIN_VALUES]:
        value, base_value = clsdict[name], inherited.get(name, _MISSING)
        if type(base_value) is type(value) and base_value == value:
            del clsdict[name]


_MISSING = object()


def _main_as_main(name: Any) -> Any:
    """A module name as deterministic payloads write it: ``__mp_main__`` (the
    main script as a ``spawn``ed child names it) as ``__main__``, so that a
    parent and its children write the same bytes for the same code. The
    receiver's function then reads ``__name__ == "__main__"``, as the code did
    where it was written."""
    return "__main__" if name == SPAWNED_MAIN else name


def _copy_cell(cell: types.CellType) -> types.CellType:
    """A new cell holding what ``cell`` holds (an empty one for an empty cell).

    Functions made together share closure cells (Python 3.13's dataclasses
    build ``__init__``, ``__setattr__``, ``__repr__``... in one ``exec``, so a
    frozen dataclass's ``__setattr__`` and ``__delattr__`` share theirs), and the
    memo writes a shared cell once. A receiver never shares them:
    ``_function_setstate`` copies each cell's contents into the function's own
    new cells, so re-pickling what it loaded would write every cell. Payload
    cells only carry values, so writing each function's as copies loads the
    same functions and gives the same bytes in both processes.
    """
    try:
        return types.CellType(cell.cell_contents)
    except ValueError:  # an empty cell
        return types.CellType()


def track_class(tracker_id: str, cls: type) -> None:
    """Let this process load payloads naming ``tracker_id`` as ``cls`` itself, as
    cloudpickle does for the uuid4s it draws (unless the id is taken already)."""
    with _cp._DYNAMIC_CLASS_TRACKER_LOCK:
        _cp._DYNAMIC_CLASS_TRACKER_BY_ID.setdefault(tracker_id, cls)


def make_skeleton_class_as_loaded(
    type_constructor: Any,
    name: Any,
    bases: Any,
    type_kwargs: Any,
    class_tracker_id: Any,
    extra: Any,
) -> type:
    """What cloudpickle's ``_make_skeleton_class(...)`` returns, without making
    the skeleton when the class is tracked already and making it could not be
    seen: cloudpickle makes one, then returns the tracked class in its place
    (``_lookup_class_or_track``). Making it runs no code of the user's when
    the metaclass is ``type``, the one base is a subclassable class of
    metaclass ``type`` whose MRO defines no ``__init_subclass__`` but object's,
    and the namespace holds ``__module__`` only, a str (a value's
    ``__set_name__`` would run). ``tests/test_cloudpickle_internals.py``
    compares the two."""
    if (
        class_tracker_id is not None
        and type_constructor is type
        and no_code_runs_in_subclassing(bases)
        and type(name) is str
        and type(type_kwargs) is dict
        and type_kwargs.keys() <= {"__module__"}
        and type(type_kwargs.get("__module__", "")) is str
    ):
        with _cp._DYNAMIC_CLASS_TRACKER_LOCK:
            tracked = _cp._DYNAMIC_CLASS_TRACKER_BY_ID.get(class_tracker_id)
            if tracked is not None:
                _cp._DYNAMIC_CLASS_TRACKER_BY_CLASS[tracked] = class_tracker_id
                return tracked  # type: ignore[no-any-return]
    skeleton: type = _cp._make_skeleton_class(
        type_constructor, name, bases, type_kwargs, class_tracker_id, extra
    )
    return skeleton


#: cloudpickle's reconstructor of a class (not an enum) by value.
make_skeleton_class = _cp._make_skeleton_class

_SUBCLASSABLE = 1 << 10  # Py_TPFLAGS_BASETYPE


def no_code_runs_in_subclassing(bases: Any) -> bool:
    """Whether ``type(name, bases, {"__module__": ...})`` neither runs code of
    the user's nor can fail: one base, a class of metaclass ``type`` that can
    be subclassed, with no ``__init_subclass__`` in its MRO but object's (and
    dicts keyed by strs only: looking a name up among other keys runs their
    ``__eq__``)."""
    if type(bases) is not tuple or len(bases) != 1:
        return False
    base = bases[0]
    if type(base) is not type or not base.__flags__ & _SUBCLASSABLE:
        return False
    return all(
        klass is object
        or (
            type(klass) is type  # (another metaclass's code runs as its __dict__ is read)
            and all(type(key) is str for key in klass.__dict__)
            and "__init_subclass__" not in klass.__dict__
        )
        for klass in base.__mro__
    )


def reduce_code(code: types.CodeType) -> Reduction:
    reduction: Reduction = _cp._code_reduce(code)
    return reduction


#: cloudpickle's reconstructor of a module the receiver imports by name.
subimport = _cp.subimport


def reduce_module(module: types.ModuleType, *, by_value: bool) -> Reduction:
    """A module is re-imported by name, or rebuilt from its ``__dict__``."""
    if by_value:
        state = dict(module.__dict__)
        state.pop("__builtins__", None)  # may hold unpicklable objects; rebuilt on load
        return (_cp.dynamic_subimport, (module.__name__, state))
    return (subimport, (module.__name__,))


def reduce_method_by_value(method: types.MethodType) -> Reduction:
    reduction: Reduction = _cp._method_reduce(method)
    return reduction


def reduce_typevar_by_value(typevar: Any) -> Reduction:
    return (_cp._make_typevar, _cp._decompose_typevar(typevar))


def _type_reducers() -> dict[type, Callable[[Any], Reduction]]:
    """cloudpickle's reducers for types the standard pickler cannot handle.

    Left out on purpose: the types the standard library pickles itself (loggers)
    so that output stays byte-identical to ``pickle.dumps``; and the types
    graphpickle reduces with its own rules (functions, classes, modules, methods,
    TypeVars, memoryviews, code objects). Non-type keys (cloudpickle also registers the
    ``abc.abstractmethod`` function) never match ``type(obj)`` and are skipped.
    """
    own_rules = {types.ModuleType, types.MethodType, typing.TypeVar, memoryview, types.CodeType}
    stdlib_handles = {logging.Logger, logging.RootLogger}
    return {
        cls: reducer
        for cls, reducer in _cp.Pickler._dispatch_table.items()
        if isinstance(cls, type) and cls not in own_rules and cls not in stdlib_handles
    }


TYPE_REDUCERS = _type_reducers()


def class_tracker_id(cls: type) -> str:
    """The id under which payloads name ``cls`` when it travels by value (drawn
    and tracked now if it has none): a process forked after this loads such
    payloads as ``cls`` itself."""
    tracker_id: str = _cp._get_or_create_tracker_id(cls)
    return tracker_id


#: The classes cloudpickle's receiver tracks (weakly), by the id their payloads
#: name: ``_make_skeleton_class`` returns the class tracked under its id.
CLASSES_BY_TRACKER_ID: typing.MutableMapping[str, type] = _cp._DYNAMIC_CLASS_TRACKER_BY_ID
#: Where a load finds the tracker: cloudpickle's module globals, under this name.
CLOUDPICKLE_GLOBALS: dict[str, Any] = vars(_cp)
#: The names of its two class trackers there (by id, by class).
TRACKER_NAMES = ("_DYNAMIC_CLASS_TRACKER_BY_ID", "_DYNAMIC_CLASS_TRACKER_BY_CLASS")


#: What a payload's reductions call that a receiver reusing a classes' part
#: (core/held_classes.py) must know: what applies a class's state; what makes
#: a function, a cell; and two lookups (``_builtin_type(name)`` is
#: ``getattr(types, name)``; the dataclass sentinel is an item of a dict).
CLASS_SETSTATE: Callable[[type, Any], type] = _cp._class_setstate
FUNCTION_SETSTATE: Callable[..., Any] = _cp._function_setstate
MAKE_FUNCTION: Callable[..., Any] = _cp._make_function
MAKERS: tuple[Callable[..., Any], ...] = (_cp._make_cell, _cp._make_empty_cell)
BUILTIN_TYPE: Callable[[str], type] = _cp._builtin_type
DATACLASS_SENTINEL: Callable[[str], Any] = _cp._get_dataclass_field_type_sentinel
DATACLASS_SENTINELS: dict[str, Any] = _cp._DATACLASSE_FIELD_TYPE_SENTINELS


def tracked_id(cls: type) -> str | None:
    """The id under which this process tracks ``cls`` (None if it does not)."""
    with _cp._DYNAMIC_CLASS_TRACKER_LOCK:
        found: str | None = _cp._DYNAMIC_CLASS_TRACKER_BY_CLASS.get(cls)
    return found
