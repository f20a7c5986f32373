"""Code blocks: by-value functions that a graphpickle receiver rebuilds cheaply.

A worker loads a ``__main__`` function or a lambda for every task that names
it. cloudpickle's reduction makes it rebuild the code object from its parts
(``CodeType(...)``) and then read a state dict of ten named slots, through
Python functions, every time. Between two graphpickle processes that both said
so (the dask integration asks each worker: ``integrations/dask_distributed.py``),
a function pickled by value travels instead in two parts the receiver rebuilds
for less, and nothing else changes:

- its **code object** as :func:`load_code` applied to ``marshal`` bytes of the
  code, as cloudpickle's receiver would have rebuilt it. The receiver keeps
  the code object it made for each such bytes string, keyed by the bytes
  themselves: the same bytes make the same code object, and a code object is
  immutable, so sharing it between the functions of many payloads changes
  nothing but ``is`` between them. Within one payload the code object is one
  object of the pickle (memoized), as in cloudpickle's.
- the **function** as :func:`make_function` applied to cloudpickle's own
  arguments and state, flat: ``(code, base_globals, closure, layout,
  attributes, *slot values)``, the slot values in cloudpickle's order (so no
  slot names travel). ``make_function`` does what cloudpickle's
  ``_make_function`` and ``_function_setstate`` do with what cloudpickle's
  reduction would have given them, so every value (defaults, globals, closure
  cells, annotations, attributes) is the payload's own object: the same
  identity and sharing as in cloudpickle's payload, and no value kept between
  payloads.

- a **class** (a ``__main__`` dataclass, say) as cloudpickle's reduction, its
  skeleton made by :func:`make_class` instead of cloudpickle's
  ``_make_skeleton_class``: the receiver looks the class up by its tracker id
  first, and makes the skeleton only if that could be seen (see
  ``_cloudpickle_internals.make_skeleton_class_as_loaded``). cloudpickle's makes
  one in every load, then drops it for the class it tracked. The class state
  is then applied as cloudpickle applies it.

Between two ends that said they keep them (``connection.py``), a code block
travels once per connection, as :func:`code_once`, and then as its digest,
:func:`code_ref`: the receiver hands back the code object it made from the
block that very connection sent.

There, a remembered function travels as a **function block** instead: the
``marshal`` bytes of ``(code block, layout, __name__, __qualname__,
__module__, __doc__, base-globals items)`` (the strings as UTF-8 bytes, in
a version 2 marshal: the same values always give the same block), the
immutable parts of cloudpickle's reduction (exact ``str``/``None`` values
only, the items ``__package__``, ``__name__`` and ``__file__``; anything else
keeps the form above). It travels once, as :func:`function_once`, then as its digest,
:func:`function_ref`; each payload still carries everything mutable
(attributes, annotations, defaults, closure, submodules, the globals the code
reads), so a receiver sees each change as a fresh load would. The base-globals
dict is still one fresh dict per module and payload, shared by that module's
functions in the payload: :func:`function_once` / :func:`function_ref` given only
the block make it from the block's items (the pickler memoizes it).

A payload with blocks needs graphpickle to load: it is written only for a
receiver that said it loads them.
"""

from __future__ import annotations

import marshal
import sys
import types
from collections.abc import Callable
from typing import Any

from .. import _cloudpickle_internals as cp
from .._switches import CACHING
from ..errors import UnpicklingError
from . import connection as _connection
from .native import speedups as _speedups

__all__ = [
    "FORMAT", "SENT_PARTS", "SLOT_KEYS", "HeldGlobals", "code_block", "code_once", "code_ref",
    "flat_state", "function_block", "function_once", "function_ref", "held_items", "layout_keys",
    "load_code", "make_class", "make_function", "sent_slots", "subimport",
]  # fmt: skip

#: The version of the layouts below, of code blocks once per connection and of
#: payloads with their classes first (classes_first.py); both ends must have the same.
FORMAT = 6

#: The largest code block sent or read: bigger code travels as cloudpickle's
#: reduction. A receiver keeps up to _MAX_KEPT code objects, or blocks of up to
#: _MAX_KEPT_BYTES in all, then starts afresh (a code object is about its block's
#: size again).
MAX_BLOCK = 256 * 1024
_MAX_KEPT = 2048
_MAX_KEPT_BYTES = 32 * 1024 * 1024
_kept: dict[bytes, types.CodeType] = {}
_kept_bytes = 0

# cloudpickle's slot state, by layout (3.14+: a function with deferred
# annotations has "__annotate__" where others have "__annotations__").
_SLOTS = (
    "__name__", "__qualname__", "__annotations__", "__kwdefaults__", "__defaults__",
    "__module__", "__doc__", "__closure__", "_cloudpickle_submodules", "__globals__",
)  # fmt: skip
_LAYOUTS = (_SLOTS, tuple("__annotate__" if s == "__annotations__" else s for s in _SLOTS))


def code_block(code: types.CodeType) -> bytes | None:
    """The block of ``code`` (``marshal`` bytes of the code object cloudpickle's
    receiver would rebuild from its reduction), or ``None`` if it is bigger
    than :data:`MAX_BLOCK` or cannot be made: the code then travels as
    cloudpickle's reduction, which pickle writes (a block is only a cheaper
    way to send what that reduction sends, so making one never fails a send)."""
    try:
        rebuild, args = cp.reduce_code(code)[:2]
        # marshal writes only exact builtin constants: a Decimal or an IntEnum
        # member put in co_consts by code.replace() raises ValueError here.
        block = marshal.dumps(rebuild(*args))
    except Exception:
        return None
    return block if len(block) <= MAX_BLOCK else None


def flat_state(state: Any) -> tuple[Any, ...] | None:
    """cloudpickle's function state ``(attributes, slots)`` as
    ``(layout, attributes, *slot values)``, or ``None`` for slots of another
    shape (another cloudpickle)."""
    try:
        attributes, slots = state
    except (TypeError, ValueError):
        return None
    if type(slots) is not dict:
        return None
    for layout, keys in enumerate(_LAYOUTS):
        if tuple(slots) == keys:
            return (layout, attributes, *slots.values())
    return None


def load_code(block: bytes) -> types.CodeType:
    """The code object of a code block (kept: the same bytes give the same
    object)."""
    if type(block) is not bytes:
        raise UnpicklingError(f"a graphpickle code block is bytes, not {type(block).__name__}")
    code = _kept.get(block) if CACHING else None
    if code is not None:
        return code
    if len(block) > MAX_BLOCK:
        raise UnpicklingError(
            f"a graphpickle code block of {len(block)} bytes: over {MAX_BLOCK}, refused"
        )
    try:
        code = marshal.loads(block)
    except (EOFError, ValueError, TypeError) as exc:
        raise UnpicklingError(f"a graphpickle code block is corrupted ({exc})") from exc
    if type(code) is not types.CodeType:
        raise UnpicklingError(
            f"a graphpickle code block holds a {type(code).__name__}, not code: refused"
        )
    if CACHING:
        _keep(block, code)
    return code


def code_once(block: bytes) -> types.CodeType:
    """:func:`load_code`, and the receiving connection holds the code under
    the block's digest, for :func:`code_ref` in its later payloads."""
    code = load_code(block)
    _connection.received(block, code)
    return code


def code_ref(digest: bytes) -> types.CodeType:
    """The code object of the block the receiving connection sent as
    :func:`code_once` under ``digest``; a clear error if it holds none."""
    try:
        return _connection.receiving_held(digest)
    except _connection.MissingBlock:
        block = _carried_here(digest)
        if block is None:
            raise
        return code_once(block)


def _carried_here(digest: bytes) -> bytes | None:
    """The block named ``digest`` that the payload being loaded carries
    (``connection.LOADING``), if any: it may be named before the call that
    carries it ran (a function reached again from its own closure, as a frozen
    slotted dataclass's ``__setattr__`` is through the class it checks, is
    written by its block's digest inside that call)."""
    for block in _connection.carried_by(*_connection.LOADING.get()):
        if _connection.digest(block) == digest:
            return block
    return None


def recover(*parts: Any) -> None:
    """A payload (or the parts of one: ``connection.pushes``) failed to load:
    the receiving connection holds the blocks it carried all the same (later
    payloads may name them), each checked as :func:`load_code` or
    :func:`function_once` checks it."""
    for block in _connection.carried_by(*parts):
        for read in (load_code, _read_function_block):  # (a block is one or the other)
            try:
                _connection.received(block, read(block))
            except UnpicklingError:
                continue
            break


# --- function blocks ----------------------------------------------------------

# The slots a function block holds, by position in _SLOTS (__name__,
# __qualname__, __module__, __doc__: exact str, or None but for the names);
# the others travel in every payload, in _SLOTS order.
_HELD_SLOTS = (0, 1, 5, 6)
_SENT_SLOTS = (2, 3, 4, 7, 8, 9)
#: What a function block's call carries after the block (``function_once``,
#: ``function_ref``), by name: the base globals, the closure, then what
#: :func:`sent_slots` sends (the attributes, the slots not held).
SENT_PARTS = ("base_globals", "closure", "attributes", *(_SLOTS[i] for i in _SENT_SLOTS))
#: Each layout's slot names, as a set (the slot state's keys).
SLOT_KEYS = frozenset(map(frozenset, _LAYOUTS))
# What a receiver holds of a function block (_read_function_block): its code,
# layout, held slots and base-globals items.
_HELD_PARTS = 3 + len(_HELD_SLOTS)
# The base-globals items a function block may hold (cloudpickle's but
# __path__, a package's list); each an exact str or None.
_HELD_ITEMS = frozenset({"__package__", "__name__", "__file__"})
# A function block is a code block and a few names.
_MAX_FUNCTION_BLOCK = MAX_BLOCK + 64 * 1024


class HeldGlobals(dict[str, Any]):
    """On the sender, one payload's base-globals dict of a module whose items
    function blocks hold: it pickles as :func:`function_once` or
    :func:`function_ref` of the first function block that names it in the
    payload (``sent_as``), and the functions of that module in the payload
    share it (memoized), as cloudpickle's share its dict."""

    __slots__ = ("sent_as",)
    sent_as: tuple[Any, ...] | None  # (set by whoever makes one: no __init__ to run)


def held_items(base: Any) -> tuple[tuple[str, Any], ...] | None:
    """The items of a base-globals dict as a function block holds them, or
    ``None`` if one cannot be held (a ``__path__``, a value not an exact str
    or None): such functions keep the form of :func:`make_function`."""
    if type(base) is not dict and type(base) is not HeldGlobals:
        return None
    items = tuple(base.items())
    for key, value in items:
        if key not in _HELD_ITEMS or (value is not None and type(value) is not str):
            return None
    return items


def function_block(
    code_block: bytes, flat: tuple[Any, ...], items: tuple[tuple[str, Any], ...]
) -> bytes | None:
    """The function block of a function whose code block is ``code_block``,
    whose flat state (:func:`flat_state`) is ``flat`` and whose base globals
    hold ``items``; ``None`` if a slot it holds is not an exact str (or None)."""
    slots = flat[2:]
    held = tuple(slots[i] for i in _HELD_SLOTS)
    if type(held[0]) is not str or type(held[1]) is not str:
        return None
    if any(value is not None and type(value) is not str for value in held[2:]):
        return None
    # marshal's bytes of a str depend on whether it is interned, and (version 3+)
    # on reference counts: the same function would give other bytes, and so
    # another block, each time one is made. Bytes in a version 2 marshal
    # depend on their value only.
    text = tuple(_utf8(value) for value in held)
    pairs = tuple((_utf8(key), _utf8(value)) for key, value in items)
    return marshal.dumps((code_block, flat[0], *text, pairs), 2)


def _utf8(text: str | None) -> bytes | None:
    return None if text is None else text.encode("utf-8", "surrogatepass")


def _text(data: Any) -> str | None:
    """A str (or None) a function block holds, or a clear error."""
    if data is None:
        return None
    if type(data) is not bytes:
        raise UnpicklingError("a graphpickle function block holds values of another kind: refused")
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise UnpicklingError(f"a graphpickle function block is corrupted ({exc})") from exc


def sent_slots(flat: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a payload of a function block carries of its flat state: the
    attributes, then the slots it does not hold."""
    slots = flat[2:]
    return (flat[1], *(slots[i] for i in _SENT_SLOTS))


def _read_function_block(block: Any) -> tuple[Any, ...]:
    """``(code, layout, name, qualname, module, doc, items)`` of a function
    block, each checked; a clear error for anything else."""
    if type(block) is not bytes:
        raise UnpicklingError(f"a graphpickle function block is bytes, not {type(block).__name__}")
    if len(block) > _MAX_FUNCTION_BLOCK:
        raise UnpicklingError(
            f"a graphpickle function block of {len(block)} bytes: over "
            f"{_MAX_FUNCTION_BLOCK}, refused"
        )
    try:
        parts = marshal.loads(block)
    except (EOFError, ValueError, TypeError) as exc:
        raise UnpicklingError(f"a graphpickle function block is corrupted ({exc})") from exc
    if type(parts) is not tuple or len(parts) != 7:
        raise UnpicklingError("a graphpickle function block of another shape: refused")
    code_block, layout, name, qualname, module, doc, pairs = parts
    if not (
        type(layout) is int
        and 0 <= layout < len(_LAYOUTS)
        and type(name) is bytes
        and type(qualname) is bytes
        and type(pairs) is tuple
        and all(type(pair) is tuple and len(pair) == 2 for pair in pairs)
    ):
        raise UnpicklingError("a graphpickle function block holds values of another kind: refused")
    items = {_text(key): _text(value) for key, value in pairs}
    if len(items) != len(pairs) or not items.keys() <= _HELD_ITEMS:
        raise UnpicklingError("a graphpickle function block holds values of another kind: refused")
    text = (_text(name), _text(qualname), _text(module), _text(doc))
    # (held across payloads: the items as a tuple, each payload's dict made from it)
    return (load_code(code_block), layout, *text, tuple(items.items()))


def _function(held: tuple[Any, ...], parts: tuple[Any, ...]) -> Any:
    if not parts:
        return dict(held[6])
    code, layout, name, qualname, module, doc, _ = held
    if len(parts) != 3 + len(_SENT_SLOTS):
        raise UnpicklingError(
            f"a function block's call takes {3 + len(_SENT_SLOTS)} values after the block, "
            f"not {len(parts)}"
        )
    base_globals, closure, attributes, annotations, kwdefaults, defaults = parts[:6]
    slot_closure, submodules, slot_globals = parts[6:]
    return make_function(
        code, base_globals, closure, layout, attributes, name, qualname, annotations,
        kwdefaults, defaults, module, doc, slot_closure, submodules, slot_globals,
    )  # fmt: skip


def subimport(name: str) -> types.ModuleType:
    """What cloudpickle's ``subimport`` does, under a name a payload on a
    connection already holds (graphpickle.core.blocks): the module imported
    by name, as ``__import__`` leaves it in ``sys.modules``."""
    __import__(name)
    return sys.modules[name]


def function_once(block: bytes, *parts: Any) -> Any:
    """``function_once(block, base_globals, closure, attributes, *sent)``: the
    function cloudpickle's receiver makes (:func:`make_function`) from a
    function block and what a payload carries besides (:func:`sent_slots`).
    ``function_once(block)`` alone: a new base-globals dict of the block's
    items (one per module and payload: the payload memoizes it; one name for
    both keeps payloads short). Either way the receiving connection holds the
    block under its digest, for :func:`function_ref` in its later payloads."""
    held = _read_function_block(block)
    _connection.received(block, held)
    return _function(held, parts)


def function_ref(digest: bytes, *parts: Any) -> Any:
    """:func:`function_once` of the block the receiving connection sent under
    ``digest`` (or that the payload being loaded carries); a clear error if
    it holds none."""
    try:
        held = _connection.receiving_function(digest)
    except _connection.MissingBlock:
        block = _carried_here(digest)
        if block is None:
            raise
        return function_once(block, *parts)
    return _function(held, parts)


def _keep(block: bytes, code: types.CodeType) -> None:
    global _kept_bytes
    if len(_kept) >= _MAX_KEPT or _kept_bytes + len(block) > _MAX_KEPT_BYTES:
        _kept.clear()
        _kept_bytes = 0
    _kept[block] = code
    _kept_bytes += len(block)


def layout_keys(layout: Any) -> tuple[str, ...] | None:
    """The slot names of a function layout (:func:`make_function`'s), or None."""
    return _LAYOUTS[layout] if type(layout) is int and 0 <= layout < len(_LAYOUTS) else None


def make_function(
    code: types.CodeType,
    base_globals: dict[str, Any],
    closure: tuple[Any, ...] | None,
    layout: int,
    attributes: dict[str, Any],
    *slot_values: Any,
) -> types.FunctionType:
    """The function cloudpickle's receiver makes from its reduction
    ``(_make_function, (code, base_globals, None, None, closure), (attributes,
    slots), None, None, _function_setstate)``, the slots given flat (see
    :func:`flat_state`). The C module's ``make_function`` does the same (and
    hands this anything of another shape)."""
    try:
        keys = _LAYOUTS[layout]
    except (IndexError, TypeError):
        raise UnpicklingError(f"no function layout {layout!r} in this graphpickle") from None
    if len(slot_values) != len(keys):
        raise UnpicklingError(
            f"a function of layout {layout} has {len(keys)} slots, not {len(slot_values)}"
        )
    return cp.make_function_as_loaded(code, base_globals, closure, attributes, keys, slot_values)


def make_class(
    type_constructor: Any,
    name: Any,
    bases: Any,
    type_kwargs: Any,
    class_tracker_id: Any,
    extra: Any,
) -> type:
    """The class cloudpickle's ``_make_skeleton_class`` gives for the same
    arguments (the tracked class, or a new skeleton), without making a skeleton
    that would be dropped unseen."""
    return cp.make_skeleton_class_as_loaded(
        type_constructor, name, bases, type_kwargs, class_tracker_id, extra
    )


#: The Python functions, which stay the reference.
make_function_in_python = make_function
function_ref_in_python = function_ref
subimport_in_python = subimport


def _in_c() -> (
    tuple[Callable[..., Any], Callable[..., Any], Callable[..., types.ModuleType]] | None
):
    """The C module's make_function, function_ref and subimport, given what
    they read; ``None`` without the C module (or one of other shapes)."""
    if _speedups is None:
        return None
    try:
        _speedups.set_function_layouts(
            cp.BUILTINS_OF_CLOUDPICKLE, _LAYOUTS, make_function_in_python
        )
        _speedups.set_function_refs(
            _connection.RECEIVER,
            _connection.Receiver,
            function_ref_in_python,
            _HELD_PARTS,
            3 + len(_SENT_SLOTS),
        )
    except ValueError:
        return None
    fast = (_speedups.make_function, _speedups.function_ref, _speedups.subimport)
    for function in fast:
        function.__module__ = __name__  # payloads name them as they name the Python functions
    return fast


# What payloads call, pickled by reference as graphpickle.core.blocks.<name>
# with the C module or without it (the same bytes).
make_function, function_ref, subimport = _in_c() or (
    make_function_in_python,
    function_ref_in_python,
    subimport_in_python,
)
