"""Code blocks: a by-value function sent as bytes that its receiver keeps.

A worker loads a ``__main__`` function or a lambda for every task that names
it: cloudpickle's reduction rebuilds the code object and the function from
their parts each time. Between two graphpickle processes that both said so (the
dask integration asks each worker: ``integrations/dask_distributed.py``), a
*sealed* function travels instead as ``load_block(block, base_globals)``:

- ``block`` is ``marshal`` bytes of the function's parts (``(FORMAT, code,
  name, qualname, module, doc, defaults, globals)``), made
  once per remembered function (``reducers.py`` keeps it in the function's
  entry, so it is as current as the entry's snapshot);
- ``base_globals`` is the payload's globals dict for the function's module,
  which cloudpickle shares between the functions of one module in one payload
  (``PicklerState.globals_ref``): a block and the other functions of its module
  in the same payload share it too.

The receiver keeps what ``marshal.loads`` gave for each ``block`` it has seen,
keyed by the bytes themselves (the same bytes, the same parts: nothing to
verify), and builds each task's function from those parts with cloudpickle's own
reconstructors, as a fresh load of cloudpickle's reduction would: a new
function, with its own annotations dict, in the payload's globals dict.

What may be kept and shared between the functions built from one block is
immutable by construction: the parts are what ``marshal`` can make, and both
ends accept only a code object, strings, and values built of ``None``,
``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``tuple`` and
``frozenset`` (:func:`is_constant`). A function is *sealed* when everything its
reduction holds is such a value: no closure, no attributes, no keyword
defaults, no annotations, no module or function among its globals. Anything
else travels as cloudpickle's reduction, as before.
"""

from __future__ import annotations

import marshal
import types
from typing import Any

from .. import _cloudpickle_internals as cp
from .._switches import CACHING
from ..errors import UnpicklingError

__all__ = ["FORMAT", "is_constant", "load_block", "sealed_block"]

#: The version of the block layout below; both ends must have the same.
FORMAT = 1

_CONSTANT_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})
_CONSTANT_DEPTH = 20
#: The largest block sent or read (bigger functions travel as cloudpickle's
#: reduction): a receiver keeps up to _MAX_KEPT of them (then starts afresh).
MAX_BLOCK = 64 * 1024
_MAX_KEPT = 1024
_kept: dict[bytes, tuple[Any, ...]] = {}


def is_constant(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is built only of immutable values of exact builtin
    types, which may be shared between the functions built from one block."""
    kind = type(value)
    if kind in _CONSTANT_ATOMS:
        return True
    if (kind is tuple or kind is frozenset) and depth < _CONSTANT_DEPTH:
        return all(is_constant(item, depth + 1) for item in value)
    return False


def sealed_block(code: types.CodeType, state: Any) -> bytes | None:
    """The block of a function whose by-value reduction holds ``code`` and
    ``state`` (cloudpickle's ``(attributes, slots)``, as ``reducers.py``
    verified it), or ``None`` if the function is not sealed. ``code`` is the
    code object as the receiver rebuilds it from cloudpickle's reduction of the
    function's code."""
    try:
        attributes, slots = state
        parts = (
            FORMAT, code, slots["__name__"], slots["__qualname__"], slots["__module__"],
            slots["__doc__"], slots["__defaults__"], tuple(slots["__globals__"].items()),
        )  # fmt: skip
        annotations = slots["__annotations__"]
        submodules = slots["_cloudpickle_submodules"]
        sealed = (
            type(attributes) is dict
            and not attributes
            and slots["__closure__"] is None
            and slots["__kwdefaults__"] is None
            and type(submodules) is list
            and not submodules
            and type(annotations) is dict  # (3.14+: a deferred __annotate__ is not sealed)
            and not annotations
            and _is_layout(parts)
        )
    except (TypeError, ValueError, KeyError, AttributeError):
        return None
    if not sealed:
        return None
    block = marshal.dumps(parts)
    return block if len(block) <= MAX_BLOCK else None


def _is_layout(parts: Any) -> bool:
    """Whether ``parts`` is a block's layout with only constants in it: what
    a sender may send and a receiver may keep."""
    if type(parts) is not tuple or len(parts) != 8:
        return False
    fmt, code, name, qualname, module, doc, defaults, global_items = parts
    return (
        fmt == FORMAT
        and type(code) is types.CodeType
        and not code.co_freevars
        and type(name) is str
        and type(qualname) is str
        and type(module) is str
        and (doc is None or type(doc) is str)
        and (defaults is None or (type(defaults) is tuple and is_constant(defaults)))
        and type(global_items) is tuple
        and all(
            type(item) is tuple and len(item) == 2 and type(item[0]) is str and is_constant(item[1])
            for item in global_items
        )
    )


def load_block(block: bytes, base_globals: dict[str, Any]) -> types.FunctionType:
    """The function a block describes, made in ``base_globals`` as cloudpickle's
    loader makes a function pickled by value (what a payload calls)."""
    parts = _kept.get(block) if CACHING else None
    if parts is None:
        parts = _parts_of(block)
    _, code, name, qualname, module, doc, defaults, global_items = parts
    # cloudpickle's slot state, in its order (_function_getstate's), with a new
    # annotations dict and globals dict for each function, as a fresh load has.
    slots = {
        "__name__": name,
        "__qualname__": qualname,
        "__annotations__": {},
        "__kwdefaults__": None,
        "__defaults__": defaults,
        "__module__": module,
        "__doc__": doc,
        "__closure__": None,
        "_cloudpickle_submodules": [],
        "__globals__": dict(global_items),
    }
    return cp.make_function_as_loaded(code, base_globals, ({}, slots))


def _parts_of(block: Any) -> tuple[Any, ...]:
    """A block's parts, checked (and kept, so that the same bytes are read once)."""
    if type(block) is not bytes:
        raise UnpicklingError(f"a graphpickle code block is bytes, not {type(block).__name__}")
    if len(block) > MAX_BLOCK:
        raise UnpicklingError(
            f"a graphpickle code block of {len(block)} bytes: over {MAX_BLOCK}, refused"
        )
    try:
        parts = marshal.loads(block)
    except (EOFError, ValueError, TypeError) as exc:
        raise UnpicklingError(f"a graphpickle code block is corrupted ({exc})") from exc
    if not _is_layout(parts):
        raise UnpicklingError(
            f"not a graphpickle code block of format {FORMAT} holding only constants: "
            "refused, nothing of it runs"
        )
    if CACHING:
        if len(_kept) >= _MAX_KEPT:
            _kept.clear()
        _kept[block] = parts
    return parts  # type: ignore[no-any-return]
