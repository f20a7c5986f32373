"""Snapshots: the objects a remembered reduction was built from, by identity.

A reduction remembered between payloads (``reducers``, ``fragments``) is reused
only while a new snapshot holds the very same objects as the one taken when it
was built. A snapshot is a tuple; ``same_objects`` compares two by identity,
item by item, looking into nested tuples.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Callable
from typing import Any

from .native import speedups as _speedups


def function_snapshot_in_python(
    func: types.FunctionType, names: tuple[str, ...], missing: Any
) -> tuple[Any, ...]:
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(missing)
    found = func.__globals__
    fields = (
        func.__code__, func.__defaults__, func.__kwdefaults__, func.__dict__, func.__name__,
        func.__qualname__, func.__module__, func.__doc__, func.__annotations__,
    )  # fmt: skip
    attributes = tuple(x for item in func.__dict__.items() for x in item)
    return (*fields, attributes, *(found.get(name, missing) for name in names), *cells)


def same_objects_in_python(a: Any, b: Any) -> bool:
    """The same objects, position by position, looking into nested tuples; exact
    ints compare by value (pickle writes an int by value, never as a memo
    reference: equal ints make the same payload)."""
    if a is b:
        return True
    if type(a) is int and type(b) is int:
        return bool(a == b)
    if type(a) is not tuple or type(b) is not tuple or len(a) != len(b):
        return False
    return all(same_objects_in_python(x, y) for x, y in zip(a, b, strict=True))


function_snapshot: Callable[[types.FunctionType, tuple[str, ...], Any], tuple[Any, ...]] = (
    function_snapshot_in_python if _speedups is None else _speedups.function_snapshot
)
same_objects: Callable[[Any, Any], bool] = (
    same_objects_in_python if _speedups is None else _speedups.same_objects
)


# The __dict__, __weakref__ and slot descriptors of a class refer to it; cloudpickle
# leaves them out of its reduction, and the snapshot does too (they would keep
# the class alive: see _refers_to).
OWN_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def class_snapshot(cls: type) -> tuple[Any, ...]:
    """Its metaclass, bases, names and ``__dict__`` entries, and what its direct
    bases hold under those names (cloudpickle leaves out an entry that is the
    very object a base holds: a base rebinding it changes the reduction)."""
    entries = cls.__dict__.copy()
    entries.pop("__dict__", None)  # (cloudpickle leaves both out whatever they hold)
    entries.pop("__weakref__", None)
    if "__slots__" in entries:
        entries = {k: v for k, v in entries.items() if type(v) not in OWN_DESCRIPTORS}
    bases = cls.__bases__
    if len(bases) == 1:
        inherited = bases[0].__dict__
        in_bases = tuple([inherited.get(name, _ABSENT) for name in entries])
    else:  # the first base holding a name wins, as in cloudpickle's merged dict
        in_bases = tuple(
            [next((b.__dict__[n] for b in bases if n in b.__dict__), _ABSENT) for n in entries]
        )
    return (type(cls), bases, cls.__name__, cls.__qualname__, tuple(entries.items()), in_bases)


_ABSENT = object()


# Types whose instances refer to nothing else: not looked into.
_LEAVES = frozenset({int, float, complex, bool, str, bytes, type(None), types.CodeType})
_REFERENCE_BUDGET = 1000


def refers_to(roots: Any, target: object) -> bool:
    """Whether ``target`` may be reachable from ``roots`` (else a remembered
    entry holding them would keep it alive: the table's weak reference would
    never die). Module globals are not followed (the module keeps what they
    hold alive anyway), nor classes other than <locals> ones; more than
    _REFERENCE_BUDGET objects to look at counts as reachable."""
    stack = [roots]
    seen: set[int] = set()
    while stack:
        value = stack.pop()
        if value is target:
            return True
        kind = type(value)
        if kind in _LEAVES or id(value) in seen:
            continue
        seen.add(id(value))
        if len(seen) > _REFERENCE_BUDGET:
            return True
        if kind is types.FunctionType:
            stack.extend(
                (value.__closure__, value.__defaults__, value.__kwdefaults__, value.__dict__)
            )
        elif kind is types.ModuleType:
            continue
        elif isinstance(value, type):
            if "<locals>" in value.__qualname__:
                stack.extend(v for v in vars(value).values() if type(v) not in OWN_DESCRIPTORS)
        else:
            stack.extend(gc.get_referents(value))
    return False
