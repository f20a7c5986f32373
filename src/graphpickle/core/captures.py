"""What a by-value function carries with it: its globals and closure variables.

The most common cause of a huge graph is a notebook function that closes over a
big DataFrame or array: the function is pickled by value, and with it what it
captures, in every payload. ``dumps`` warns about it (:class:`LargeCaptureWarning`)
from a cheap size estimate; :func:`graphpickle.explain` measures exactly.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import types
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import LargeCaptureWarning

__all__ = ["get_large_capture_threshold", "set_large_capture_threshold"]

DEFAULT_LARGE_CAPTURE_BYTES = 1_000_000
_threshold: int | None = DEFAULT_LARGE_CAPTURE_BYTES
# Counts threshold changes: a by-value reduction remembered under an earlier
# threshold was checked against that one (graphpickle._reducers).
_generation = 0

# The estimate stops looking inside containers after this many items.
_ESTIMATE_ITEM_BUDGET = 10_000

# explain() measures captures itself and turns the warning off while it works.
_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("graphpickle_quiet", default=False)


@contextlib.contextmanager
def no_capture_warnings() -> Iterator[None]:
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def set_large_capture_threshold(nbytes: int | None) -> None:
    """Warn when a function pickled by value captures more than ``nbytes`` in one
    global or closure variable (default 1 MB); ``None`` turns the warning off."""
    global _threshold, _generation
    if nbytes is not None and (not isinstance(nbytes, int) or nbytes < 0):
        raise ValueError(f"the threshold must be a non-negative int or None, got {nbytes!r}")
    _threshold = nbytes
    _generation += 1


def get_large_capture_threshold() -> int | None:
    return _threshold


def captured_values(func: types.FunctionType, state: Any) -> list[tuple[str, str, Any]]:
    """``(name, "global" | "closure", value)`` for what ``func`` carries, read
    from the state of its by-value reduction (cloudpickle's slot state)."""
    slotstate = state[1]
    found = [(name, "global", value) for name, value in slotstate["__globals__"].items()]
    cells = slotstate["__closure__"] or ()
    for name, cell in zip(func.__code__.co_freevars, cells, strict=False):
        try:
            found.append((name, "closure", cell.cell_contents))
        except ValueError:  # an empty cell
            continue
    return found


# Captures that are never large, or that are checked on their own when they are
# pickled by value themselves: skipped without estimating.
_NEVER_LARGE = frozenset(
    {int, float, bool, complex, type(None), types.FunctionType, types.ModuleType, type}
)


# Captures whose size cannot change without being rebound (which a remembered
# reduction's snapshot sees).
_FIXED_SIZE = _NEVER_LARGE | {str, bytes}


def _module_builtin(value: Any) -> bool:
    """A builtin function of a module (``len``, ``_thread.get_ident``), which
    pickle writes by reference; not a builtin method bound to an object
    (``items.append`` carries ``items``)."""
    if type(value) is not types.BuiltinFunctionType:
        return False
    owner = value.__self__
    return owner is None or type(owner) is types.ModuleType


def growable_sizes(func: types.FunctionType, state: Any) -> tuple[int, ...] | None:
    """The ``len()`` of each global or closure variable of ``func`` that could
    grow in place (a list, a dict, an array, a tuple holding one), ``None`` if
    there is none; -1 for one without a length. A remembered reduction of
    ``func`` is checked again for large captures when these change (or a
    capture has no length): an item that grows inside an unchanged container is
    not seen."""
    sizes = []
    for _, _, value in captured_values(func, state):
        if type(value) not in _FIXED_SIZE and not _module_builtin(value):
            try:
                sizes.append(len(value))
            except TypeError:
                sizes.append(-1)
    return tuple(sizes) if sizes else None


def warn_about_large_captures(func: types.FunctionType, state: Any) -> bool:
    """Warn (once per function and payload: the memo reduces each function once)
    about each global or closure variable of ``func`` larger than the threshold.

    Return whether the captures were checked and none was large: only then may
    the reduction be reused for a later payload without checking again."""
    threshold = _threshold
    if _quiet.get():
        return False
    if threshold is None:
        return True
    small = True
    for name, kind, value in captured_values(func, state):
        if type(value) not in _NEVER_LARGE and not _module_builtin(value):
            size = estimate_nbytes(value)
            if size > threshold:
                small = False
                warnings.warn(
                    f"{func.__module__}.{func.__qualname__} is pickled by value and captures "
                    f"{kind} {name!r} ({type(value).__qualname__}, about {size / 1e6:.1f} MB), "
                    "which travels inside every payload that holds the function; pass it as "
                    "an argument (out of band with protocol 5) or load it on the worker",
                    LargeCaptureWarning,
                    stacklevel=_caller_stacklevel(),
                )
    return small


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside
    graphpickle (the caller of ``dumps``), however deep the pickling went."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def estimate_nbytes(value: Any) -> int:
    """A cheap estimate of how many bytes ``value`` pickles to."""
    budget = [_ESTIMATE_ITEM_BUDGET]
    return _estimate(value, budget)


def _estimate(value: Any, budget: list[int]) -> int:
    budget[0] -= 1
    if isinstance(value, int | float | None):
        return 5  # pickle writes small ints in 2-5 bytes, floats in 9
    if isinstance(value, str):
        return len(value)
    try:
        return memoryview(value).nbytes  # bytes, bytearray, arrays, numpy
    except TypeError:
        pass
    nbytes = getattr(value, "nbytes", None)  # numpy scalars, pandas Series
    if isinstance(nbytes, int):
        return nbytes
    memory_usage = getattr(value, "memory_usage", None)  # pandas DataFrame
    if callable(memory_usage):
        try:
            return int(memory_usage(deep=False).sum())
        except Exception:
            pass
    if isinstance(value, dict):
        items = (x for item in value.items() for x in item)
        return 2 + _estimate_items(items, len(value) * 2, budget)
    if isinstance(value, list | tuple | set | frozenset):
        return 2 + _estimate_items(value, len(value), budget)
    return sys.getsizeof(value)


def _estimate_items(items: Iterable[Any], count: int, budget: list[int]) -> int:
    """Sum the estimates of ``items``; past the budget, extrapolate from those seen."""
    total = seen = 0
    for item in items:
        if budget[0] <= 0:
            break
        total += _estimate(item, budget)
        seen += 1
    if seen and seen < count:
        total = total * count // seen
    return total
