"""Snapshots: the objects a remembered reduction was built from, by identity.

A by-value function's reduction remembered between payloads (``reducers``) is
reused only while a new snapshot holds the very same objects as the one its
reduction was verified against. A snapshot is one flat tuple, taken with no
Python code running in between (in C), and ``same_objects`` compares two by
identity, position by position. The layout (``SNAPSHOT_FIELDS``, then the
globals, the cells' contents and the attributes) is the C module's too: it
exports its own, and ``reducers`` checks that the two agree before it lets the
C hook answer.
"""

from __future__ import annotations

import gc
import itertools
import sys
import types
from collections.abc import Callable
from typing import Any

from .native import speedups as _speedups

SNAPSHOT_FIELDS = (
    "code", "defaults", "kwdefaults", "name", "qualname", "module", "doc", "annotations", "closure",
)  # fmt: skip


def function_snapshot_in_python(
    func: types.FunctionType, names: tuple[str, ...], missing: Any
) -> tuple[Any, ...]:
    """What ``func``'s by-value reduction is built from: ``SNAPSHOT_FIELDS``,
    the value of each global in ``names``, each closure cell's contents, and
    the keys and values of its ``__dict__`` (``missing`` for a global or a
    cell without a value). Its "annotations" are its ``__annotate__`` where it
    has one (3.14+: deferred annotations travel as the function that computes
    them, never read), else its annotations as they are: call it once
    ``func.__annotations__`` has been made (reading it makes the dict)."""
    cells = []
    for cell in func.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(missing)
    found = func.__globals__
    fixed = (
        func.__code__, func.__defaults__, func.__kwdefaults__, func.__name__, func.__qualname__,
        func.__module__, func.__doc__, _annotations_as_sent(func), func.__closure__,
    )  # fmt: skip
    return (
        *fixed,
        *(found.get(name, missing) for name in names),
        *cells,
        *itertools.chain.from_iterable(func.__dict__.items()),
    )


def _annotations_as_sent(func: types.FunctionType) -> Any:
    annotate = getattr(func, "__annotate__", None)
    return func.__annotations__ if annotate is None else annotate


def same_objects_in_python(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two flat tuples of the same objects, position by position; exact ints
    compare by value (pickle writes an int by value, never as a memo
    reference: equal ints make the same payload)."""
    if a is b:
        return True
    if len(a) != len(b):
        return False
    return all(
        x is y or (type(x) is int and type(y) is int and x == y) for x, y in zip(a, b, strict=True)
    )


def modules_items_in_python() -> tuple[Any, ...]:
    """``sys.modules``'s keys and values, flat, in order: what cloudpickle's
    submodule search reads."""
    return tuple(itertools.chain.from_iterable(sys.modules.copy().items()))


def _modules_items_in_c() -> tuple[Any, ...]:
    # The C module's is one tuple while sys.modules does not change, which
    # same_modules then recognises without a walk; None if sys.modules is not
    # an exact dict.
    assert _speedups is not None
    items: tuple[Any, ...] | None = _speedups.modules_items()
    return modules_items_in_python() if items is None else items


def same_modules_in_python(items: tuple[Any, ...]) -> bool:
    """Whether ``sys.modules`` holds the very keys and values of ``items``."""
    return same_objects_in_python(modules_items_in_python(), items)


function_snapshot: Callable[[types.FunctionType, tuple[str, ...], Any], tuple[Any, ...]] = (
    function_snapshot_in_python if _speedups is None else _speedups.function_snapshot
)
same_objects: Callable[[tuple[Any, ...], tuple[Any, ...]], bool] = (
    same_objects_in_python if _speedups is None else _speedups.same_objects
)
modules_items: Callable[[], tuple[Any, ...]] = (
    modules_items_in_python if _speedups is None else _modules_items_in_c
)
same_modules: Callable[[tuple[Any, ...]], bool] = (
    same_modules_in_python if _speedups is None else _speedups.same_modules
)


# The __dict__, __weakref__ and slot descriptors of a class refer to it: not
# followed (see refers_to).
OWN_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


# Types whose instances refer to nothing else: not looked into.
_LEAVES = frozenset({int, float, complex, bool, str, bytes, type(None), types.CodeType})
_REFERENCE_BUDGET = 1000


def _closure_to_follow(func: types.FunctionType) -> Any:
    """``func``'s closure, but for the ``__classdict__`` cell (3.14+: the class's
    dict, which an ``__annotate__`` of a class or of its methods reads) of a
    class that is not <locals>: such a class is not followed either."""
    closure = func.__closure__
    names = func.__code__.co_freevars
    if closure is None or "__classdict__" not in names or "<locals>" in func.__qualname__:
        return closure
    return [cell for cell, name in zip(closure, names, strict=False) if name != "__classdict__"]


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
                (
                    _closure_to_follow(value),
                    value.__defaults__,
                    value.__kwdefaults__,
                    value.__dict__,
                )
            )
        elif kind is types.ModuleType:
            continue
        elif isinstance(value, type):
            if "<locals>" in value.__qualname__:
                stack.extend(v for v in vars(value).values() if type(v) not in OWN_DESCRIPTORS)
        else:
            stack.extend(gc.get_referents(value))
    return False
