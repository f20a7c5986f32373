"""The one decision graphpickle makes: can the receiver import this, or must it
travel by value?

Everything here runs once per distinct function or class in a payload (the
pickler's memo catches repeats), so clarity wins over micro-optimisation.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .._cloudpickle_internals import REGISTERED_BY_VALUE

__all__ = [
    "ByValueReason",
    "list_registry_pickle_by_value",
    "register_pickle_by_value",
    "unregister_pickle_by_value",
]

#: Every set of module names registered for pickling by value that the policy
#: honours, read live (the C hook holds this very list): cloudpickle's, which
#: :func:`register_pickle_by_value` writes to, then those an integration adds
#: (Ray's vendored cloudpickle keeps its own: ``ray.cloudpickle.register_pickle_by_value``).
REGISTRIES: list[set[str]] = [REGISTERED_BY_VALUE]

# The script or notebook of the sender. ``__mp_main__`` is how a child started
# with ``spawn`` or ``forkserver`` names the parent's main module; no other
# process can import either by that name.
_MAIN_MODULES = frozenset({"__main__", "__mp_main__"})
_MISSING = object()
# Not importable by name, yet the C pickler has its own recipe for them.
_PICKLED_BY_STDLIB = frozenset({type(None), type(Ellipsis), type(NotImplemented)})


class ByValueReason:
    """Why an object is pickled by value (the strings appear in reports)."""

    MAIN = "__main__"
    LAMBDA = "lambda"
    CLOSURE = "closure"
    LOCAL = "local"
    REGISTERED = "registered module"
    NOT_IMPORTABLE = "not importable"


def register_pickle_by_value(module: types.ModuleType) -> None:
    """Pickle the functions, classes and modules of ``module`` (and of its
    submodules) by value from now on, wherever they sit in a graph.

    Use it for local modules that workers do not have. The registry is shared
    with ``cloudpickle.register_pickle_by_value``.
    """
    _check_module(module)
    if sys.modules.get(module.__name__) is not module:
        raise ValueError(
            f"module {module.__name__!r} is not in sys.modules; import it with an import "
            "statement before registering it"
        )
    REGISTERED_BY_VALUE.add(module.__name__)


def unregister_pickle_by_value(module: types.ModuleType) -> None:
    """Undo :func:`register_pickle_by_value` (or a registration in another
    registry the policy honours, such as Ray's)."""
    _check_module(module)
    holding = [registry for registry in REGISTRIES if module.__name__ in registry]
    if not holding:
        raise ValueError(f"module {module.__name__!r} is not registered for pickling by value")
    for registry in holding:
        registry.discard(module.__name__)


def add_registry(registry: set[str]) -> None:
    """Honour ``registry`` too, live, from now on (an integration's: another
    copy of cloudpickle keeps its own). Adding it again does nothing."""
    if type(registry) is not set:
        raise TypeError(f"a by-value registry is a set of module names, not {registry!r}")
    if not any(known is registry for known in REGISTRIES):
        REGISTRIES.append(registry)


def remove_registry(registry: set[str]) -> None:
    """Stop honouring a registry :func:`add_registry` added (cloudpickle's stays)."""
    REGISTRIES[:] = [
        known for known in REGISTRIES if known is REGISTERED_BY_VALUE or known is not registry
    ]


def _check_module(module: object) -> None:
    # ValueError, not TypeError: what cloudpickle raises, and code catches.
    if not isinstance(module, types.ModuleType):
        raise ValueError(f"expected a module object, got {type(module).__qualname__}: {module!r}")


def list_registry_pickle_by_value() -> set[str]:
    """The names of the modules registered for pickling by value, in every
    registry the policy honours (a copy)."""
    return set().union(*REGISTRIES)


def is_registered(module_name: str) -> bool:
    """Whether ``module_name`` or one of its parent packages is registered."""
    if not any(REGISTRIES):
        return False
    name = module_name
    while True:
        if any(name in registry for registry in REGISTRIES):
            return True
        parent, dot, _ = name.rpartition(".")
        if not dot:
            return False
        name = parent


def found_by_name(obj: object, module_name: str, qualname: str) -> bool:
    """Whether importing ``module_name`` and walking ``qualname`` gives ``obj`` back,
    which is what loading a by-reference pickle does."""
    target: Any = sys.modules.get(module_name)
    if target is None:
        # Not imported here (a module built at run time, or removed from
        # sys.modules): assume the receiver cannot import it either.
        return False
    for part in qualname.split("."):
        try:
            target = getattr(target, part, _MISSING)
        except Exception:  # a module __getattr__ with side effects
            return False
        if target is _MISSING:
            return False
    return target is obj


def reason_by_names(module_name: object, qualname: str) -> str | None:
    """Why a function must go by value, judged by its module and qualified
    names alone (``LOCAL`` for any ``<locals>`` name): a decision that depends
    on nothing else, so that a remembered reduction whose snapshot holds the
    very same two objects holds the same decision."""
    if isinstance(module_name, str) and module_name in _MAIN_MODULES:
        return ByValueReason.MAIN
    if "<lambda>" in qualname:
        return ByValueReason.LAMBDA
    if "<locals>" in qualname:
        return ByValueReason.LOCAL
    return None


def function_reason(func: types.FunctionType) -> str | None:
    """Why ``func`` must go by value, or ``None`` if a reference will do."""
    module_name = func.__module__
    qualname = func.__qualname__
    reason = reason_by_names(module_name, qualname)
    if reason == ByValueReason.LOCAL and func.__closure__:
        return ByValueReason.CLOSURE
    if reason is not None:
        return reason
    if module_name is None or not found_by_name(func, module_name, qualname):
        return ByValueReason.NOT_IMPORTABLE
    if is_registered(module_name):
        return ByValueReason.REGISTERED
    return None


def class_reason(cls: type) -> str | None:
    """Why the class ``cls`` must go by value, or ``None`` if a reference will do."""
    module_name = cls.__module__
    qualname = cls.__qualname__
    if module_name in _MAIN_MODULES:
        return ByValueReason.MAIN
    if "<locals>" in qualname:
        return ByValueReason.LOCAL
    if any(cls is stdlib for stdlib in _PICKLED_BY_STDLIB):  # (a metaclass may not hash)
        return None
    if not found_by_name(cls, module_name, qualname):
        return ByValueReason.NOT_IMPORTABLE
    if is_registered(module_name):
        return ByValueReason.REGISTERED
    return None


def named_object_reason(obj: Any, name: str) -> str | None:
    """The same decision for objects found by ``__module__`` and ``__name__``
    (``typing.TypeVar`` instances)."""
    module_name = getattr(obj, "__module__", None)
    if module_name in _MAIN_MODULES:
        return ByValueReason.MAIN
    if module_name is None or not found_by_name(obj, module_name, name):
        return ByValueReason.NOT_IMPORTABLE
    if is_registered(module_name):
        return ByValueReason.REGISTERED
    return None


def module_reason(module: types.ModuleType) -> str | None:
    """A module is rebuilt from its ``__dict__`` when registered or not importable;
    otherwise the receiver imports it by name."""
    name = module.__name__
    if is_registered(name):
        return ByValueReason.REGISTERED
    if sys.modules.get(name) is not module:
        return ByValueReason.NOT_IMPORTABLE
    return None
