"""Say where in a graph pickling failed.

Runs only after a failure: walks the graph again in pickling order
(:mod:`._walk`) and stops at the first object whose reduction raises. The
success path never pays for it.
"""

from __future__ import annotations

import sys
from typing import Any

from ._walk import WalkFailure, render_path, safe_repr, type_name, walk
from .errors import PicklingError


def pickling_error(pickler: Any, root: Any, exc: Exception) -> PicklingError:
    """Build the exception for a failed ``pickler.dump(root)``."""
    if isinstance(exc, RecursionError):
        return PicklingError(
            f"cannot pickle {_describe(root)}: the object graph is nested deeper than "
            f"Python's recursion limit ({sys.getrecursionlimit()}) allows; flatten long "
            "chains (linked lists, deeply nested containers) or raise the limit with "
            "sys.setrecursionlimit()",
            path=None,
            type_name=type_name(root),
        )
    found = find_failure(pickler, root)
    if found is None:
        return PicklingError(
            f"cannot pickle {_describe(root)}: {type(exc).__name__}: {exc}",
            path=None,
            type_name=type_name(root),
        )
    path, obj = found
    return PicklingError(
        f"cannot pickle the {type_name(obj)!r} object at {path}: "
        f"{type(exc).__name__}: {exc}\n"
        f"  object: {safe_repr(obj)}\n"
        f"  to make it travel, give its type a reducer: "
        f"graphpickle.register_reducer({type_name(obj)}, reducer)",
        path=path,
        type_name=type_name(obj),
    )


def find_failure(pickler: Any, root: Any) -> tuple[str, Any] | None:
    """Return ``(path, obj)`` for the first object, in pickling order, that
    cannot be reduced, or ``None`` if every object reduces."""
    try:
        for _ in walk(pickler, root):
            pass
    except WalkFailure as failure:
        return render_path(failure.path), failure.obj
    return None


def _describe(obj: Any) -> str:
    return f"the {type_name(obj)!r} object {safe_repr(obj)}"
