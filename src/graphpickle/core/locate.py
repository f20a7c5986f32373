"""Say where in a graph pickling failed, without changing what failed.

Runs only after a failure: walks the graph again in pickling order
(:mod:`._walk`) and stops at the first object whose reduction raises. The
success path never pays for it.

What the caller gets (see "Errors" in docs/api.md):

- an exception raised by an object's own reduction (``TypeError: cannot pickle
  '_thread.lock' object``, a ``ValueError`` from a ``__reduce__``, the C
  pickler's ``pickle.PicklingError``) keeps its type and its message, as with
  pickle and cloudpickle, so ``except TypeError`` and ``pytest.raises(...,
  match=...)`` keep working. It gains notes (``add_note``, printed under the
  message in every traceback, as Python 3.14 does for its own pickling errors)
  that say where the object sits, and the attributes ``graphpickle_path`` and
  ``graphpickle_type_name`` for code;
- graphpickle's own refusals are :class:`graphpickle.PicklingError`, whose
  message names the path (also in ``path`` and ``type_name``);
- a graph too deep to pickle, or a reduction that recurses without end, is a
  :class:`graphpickle.errors.DeepRecursionError`: a ``graphpickle.PicklingError``
  with cloudpickle's "deep recursion" wording and the path of the deepest
  object, that is also the ``RecursionError`` pickle raises.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import DeepRecursionError, PicklingError
from .policy import found_by_name
from .walk import WalkFailure, render_path, safe_repr, type_name, walk, walk_with_depth

_NOTE_PREFIX = "when pickling "
_ADVICE_PREFIX = "  to make it travel, give its type a reducer: "
# Python 3.14+ notes where the pickler was, one level a note, innermost first
# ("when serializing dict item 'x'", "when serializing tuple item 1").
_CPYTHON_PREFIX = "when serializing "
_DEEP_RECURSION = "Could not pickle object as excessively deep recursion required"
_FLATTEN = "flatten long chains (linked lists, deeply nested containers)"


def _deep_advice(pickler: Any) -> str:
    """What helps with a graph too deep to pickle, on this Python."""
    if sys.version_info >= (3, 14):
        # The C pickler recurses until the thread's C stack is nearly used up
        # (tens of thousands of levels on a default 8 MiB stack).
        return (
            f"{_FLATTEN} (from Python 3.14 the C pickler stops where the thread's C "
            "stack runs out: raising the recursion limit does not change it; pickling "
            "on a thread started after threading.stack_size() was raised goes deeper)"
        )
    if sys.version_info >= (3, 12):
        # The C pickler's depth is bounded by the interpreter's C recursion limit,
        # fixed when it is built, which sys.setrecursionlimit() does not change;
        # only pure-Python code (deterministic mode's Python pass) counts against
        # Python's recursion limit.
        advice = (
            f"{_FLATTEN} (from Python 3.12 the C pickler stops at a depth fixed when "
            "the interpreter is built: raising the recursion limit does not change it)"
        )
        if getattr(pickler, "_passes", None) is not None:
            advice += (
                "; deterministic mode's pure-Python pass also stops at Python's "
                f"recursion limit ({sys.getrecursionlimit()}), which "
                "sys.setrecursionlimit() raises"
            )
        return advice
    return f"{_FLATTEN} or raise the limit with sys.setrecursionlimit()"


def pickling_error(pickler: Any, root: Any, exc: Exception) -> Exception:
    """The exception a failed ``pickler.dump(root)`` raises: ``exc`` itself,
    located, or a :class:`graphpickle.PicklingError` chained to it."""
    if isinstance(exc, RecursionError):
        return _recursion_error(pickler, root)
    found = find_failure(pickler, root)
    if isinstance(exc, PicklingError):  # one of graphpickle's own refusals
        return _located_refusal(root, exc, found)
    _add_location(exc, root, found)
    return exc


def _located_refusal(root: Any, exc: PicklingError, found: tuple[str, Any] | None) -> PicklingError:
    if found is None:
        return PicklingError(
            f"cannot pickle {_describe(root)}: {exc}",
            path=None,
            type_name=type_name(root),
        )
    path, obj = found
    return PicklingError(
        f"cannot pickle the {type_name(obj)!r} object at {path}: {exc}\n  object: {safe_repr(obj)}",
        path=path,
        type_name=type_name(obj),
    )


def _add_location(exc: Exception, root: Any, found: tuple[str, Any] | None) -> None:
    """Notes for people, attributes for code; the type and message stay.

    One path: where Python 3.14+ noted the levels the pickler went through,
    graphpickle's note, the same levels written from the root as one
    expression, with the object and what to do about it, takes their place.
    An object graphpickle cannot find again keeps CPython's notes alone."""
    notes = getattr(exc, "__notes__", None)
    if not isinstance(notes, list):
        notes = []
    own = (_NOTE_PREFIX, _ADVICE_PREFIX)
    # An exception object raised again (a cached one) keeps only the latest notes.
    if hasattr(exc, "graphpickle_path"):
        notes[:] = [note for note in notes if not note.startswith(own)]
    path, obj = found if found is not None else (None, root)
    if path is not None:
        notes[:] = [note for note in notes if not note.startswith(_CPYTHON_PREFIX)]
        exc.add_note(f"{_NOTE_PREFIX}the {type_name(obj)!r} object at {path}: {safe_repr(obj)}")
        exc.add_note(
            f"{_ADVICE_PREFIX}graphpickle.register_reducer({_type_expression(obj)}, reducer)"
        )
    elif not any(note.startswith(_CPYTHON_PREFIX) for note in notes):
        exc.add_note(
            f"{_NOTE_PREFIX}{_describe(root)}: the object that failed could not be "
            "located (it failed only once, or outside a reduction)"
        )
    exc.graphpickle_path = path  # type: ignore[attr-defined]
    exc.graphpickle_type_name = type_name(obj)  # type: ignore[attr-defined]


def _type_expression(obj: Any) -> str:
    """An expression that names ``type(obj)`` and runs as written: its module's
    name for it (``_thread.LockType``: the type calls itself ``_thread.lock``,
    which is not an attribute), else ``type(x)``."""
    cls = type(obj)
    module_name = getattr(cls, "__module__", None)
    module = sys.modules.get(module_name) if isinstance(module_name, str) else None
    if module is not None:
        if found_by_name(cls, module.__name__, cls.__qualname__):
            return f"{module.__name__}.{cls.__qualname__}"
        for name, value in sorted(vars(module).items()):
            if value is cls and name.isidentifier():
                return f"{module.__name__}.{name}"
    return f"type(x)  # x: the {type_name(obj)!r} object"


def _recursion_error(pickler: Any, root: Any) -> DeepRecursionError:
    try:
        deepest = max(walk_with_depth(pickler, root), key=lambda node: node[1])
    except WalkFailure as failure:  # a reduction that recurses without end
        cause = failure.__cause__
        path = render_path(failure.path)
        return DeepRecursionError(
            f"{_DEEP_RECURSION}: reducing the {type_name(failure.obj)!r} object at "
            f"{path} raised {type(cause).__name__}: {cause}",
            path=path,
            type_name=type_name(failure.obj),
        )
    linked_path, depth, obj = deepest
    path = render_path(linked_path)
    return DeepRecursionError(
        f"{_DEEP_RECURSION}: {_describe(root)} nests {depth} levels deep, more than "
        f"the pickler can follow (the deepest object, a {type_name(obj)!r}, is at "
        f"{path}); {_deep_advice(pickler)}",
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
