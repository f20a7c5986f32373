"""Walk an object graph the way the pickler saves it, with the path to each object.

The C pickler never says where it is in a graph. This walk reduces every object
as the pickler would (the pickler's own ``reducer_override``, dispatch table,
``__reduce_ex__``) and visits what each reduction saves, in the same order, each
object once (as the pickler's memo does). It serves the error path
(:mod:`._locate`) and the diagnostics (:mod:`.diagnostics`); ``dumps`` never
runs it.

Paths start at ``root`` and read like Python where they can:
``root['tasks'][('x', 3)].args[1]``. ``[k]`` is a container item, ``.name`` an
attribute (from the object's state, or a reduction argument that the object
holds under that name), ``<arg i>`` another argument of the object's reduction
(what its class is called with on load), ``<key k>`` a dict key and
``<element i>`` a set element.
"""

from __future__ import annotations

import copyreg
import reprlib
import types
from collections.abc import Iterator
from pickle import PickleBuffer
from typing import Any

from ..errors import PicklingError
from .policy import found_by_name

ATOMS = frozenset({type(None), bool, int, float, str, bytes, bytearray})
_MAX_PATH_SEGMENTS = 40

# A path is a linked list (parent, segment) so that extending it is O(1).
Path = tuple[Any, str] | None

# repr() of a whole graph can be huge or recurse without end: cap both.
_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxstring = _repr.maxother = 120


class WalkFailure(Exception):
    """Reducing the object at ``path`` raised (chained as ``__cause__``)."""

    def __init__(self, path: Path, obj: Any) -> None:
        super().__init__(render_path(path))
        self.path = path
        self.obj = obj


def walk(pickler: Any, root: Any) -> Iterator[tuple[Path, Any]]:
    """Yield ``(path, obj)`` for every object that pickling ``root`` with
    ``pickler`` saves, atoms left out, in pickling order, each once.

    Raises :class:`WalkFailure` at the first object whose reduction fails."""
    for path, _, obj in walk_with_depth(pickler, root):
        yield path, obj


def walk_with_depth(pickler: Any, root: Any) -> Iterator[tuple[Path, int, Any]]:
    """:func:`walk`, with each object's depth (the number of segments of its path)."""
    stack: list[tuple[Any, Path, int]] = [(root, None, 0)]
    seen: set[int] = set()
    keep_alive: list[Any] = []  # reductions build temporaries; keep their ids unique
    while stack:
        obj, path, depth = stack.pop()
        cls = type(obj)
        # (a class of another metaclass may not hash: it is no atom)
        if (type(cls) is type and cls in ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        keep_alive.append(obj)
        yield path, depth, obj
        try:
            children = _children(pickler, obj)
        except Exception as exc:
            raise WalkFailure(path, obj) from exc
        stack.extend((child, (path, segment), depth + 1) for segment, child in reversed(children))


def _children(pickler: Any, obj: Any) -> list[tuple[str, Any]]:
    """What pickling ``obj`` saves next, in order, with the path segment of each."""
    persistent_id = getattr(pickler, "persistent_id", None)
    if persistent_id is not None:
        pid = persistent_id(obj)
        if pid is not None:
            return [("<persistent id>", pid)]
    cls = type(obj)
    if cls is dict:
        children = []
        for key, value in obj.items():
            children.append((f"<key {safe_repr(key)}>", key))
            children.append((f"[{safe_repr(key)}]", value))
        return children
    if cls is list or cls is tuple:
        return [(f"[{i}]", item) for i, item in enumerate(obj)]
    if cls is set or cls is frozenset:
        return [(f"<element {i}>", item) for i, item in enumerate(obj)]
    if cls is PickleBuffer:
        if pickler.protocol < 5:
            raise PicklingError("a PickleBuffer needs protocol 5")
        return []
    return _reduction_children(obj, _reduce(pickler, obj))


def _reduce(pickler: Any, obj: Any) -> Any:
    """The reduction the C pickler would use for ``obj`` (``None``: a global)."""
    reduction = pickler.reducer_override(obj)
    if reduction is not NotImplemented:
        return reduction
    table = getattr(pickler, "dispatch_table", copyreg.dispatch_table)
    if type(obj) is types.FunctionType or type(obj) is type:
        _check_global(obj, obj.__qualname__)
        return None
    reducer = table.get(type(obj))
    if reducer is not None:
        return reducer(obj)
    if isinstance(obj, type):  # a class with a metaclass: saved as a global
        _check_global(obj, obj.__qualname__)
        return None
    return obj.__reduce_ex__(pickler.protocol)


def _reduction_children(obj: Any, reduction: Any) -> list[tuple[str, Any]]:
    if reduction is None:
        return []
    if isinstance(reduction, str):
        _check_global(obj, reduction)
        return []
    if not isinstance(reduction, tuple) or not 2 <= len(reduction) <= 6:
        raise PicklingError(f"the reduction of {type_name(obj)} is not a 2- to 6-tuple")
    func, args, state, list_items, dict_items, _ = reduction + (None,) * (6 - len(reduction))
    children: list[tuple[str, Any]] = []
    if getattr(func, "__name__", None) in ("__newobj__", "__newobj_ex__") and args:
        children.append(("<class>", args[0]))
        args = args[1:]
    else:
        children.append(("<reduce callable>", func))
    if type(obj) is types.CellType:
        children.extend((".cell_contents", arg) for arg in args)
    else:
        children.extend((_arg_segment(obj, i, arg), arg) for i, arg in enumerate(args))
    if list_items is not None:
        children.extend((f"[{i}]", item) for i, item in enumerate(list_items))
    if dict_items is not None:
        children.extend((f"[{safe_repr(k)}]", v) for k, v in dict_items)
    children.extend(_state_children(state))
    return children


def _arg_segment(obj: Any, index: int, arg: Any) -> str:
    """``.name`` when ``obj`` holds ``arg`` in an attribute or slot of that name
    (a ``__reduce__`` that passes its fields to the class), else ``<arg i>``."""
    if type(arg) not in ATOMS:
        names = list(getattr(obj, "__dict__", {}))
        for cls in type(obj).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            names.extend([slots] if isinstance(slots, str) else slots)
        for name in names:
            try:
                if getattr(obj, name) is arg:
                    return f".{name}"
            except Exception:
                continue
    return f"<arg {index}>"


def _state_children(state: Any) -> list[tuple[str, Any]]:
    if state is None:
        return []
    parts = state if type(state) is tuple and len(state) == 2 else (state,)
    if not all(part is None or type(part) is dict for part in parts):
        return [("<state>", state)]
    children = []
    for part in parts:
        for name, value in (part or {}).items():
            segment = f".{name}" if isinstance(name, str) else f"<state {safe_repr(name)}>"
            children.append((segment, value))
    return children


def _check_global(obj: Any, name: str) -> None:
    """Fail as the pickler's save_global would if ``obj`` is not importable."""
    module_name = getattr(obj, "__module__", None)
    if not isinstance(module_name, str) or not found_by_name(obj, module_name, name):
        raise PicklingError(f"it is not found as {module_name}.{name}")


def render_path(path: Path) -> str:
    segments: list[str] = []
    while path is not None:
        path, segment = path
        segments.append(segment)
    segments.reverse()
    if len(segments) > _MAX_PATH_SEGMENTS:
        hidden = len(segments) - _MAX_PATH_SEGMENTS
        segments = [*segments[:10], f"...({hidden} more)...", *segments[-30:]]
    return "root" + "".join(segments)


def type_name(obj: Any) -> str:
    cls = type(obj)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def safe_repr(obj: Any) -> str:
    try:
        return _repr.repr(obj)
    except Exception:
        return f"<{type_name(obj)} object with a failing repr>"
