"""What a deterministic payload writes differently from a default one.

Default payloads of the same graph differ between processes in a few places.
Deterministic mode (``dumps(obj, deterministic=True)``) fixes each of them:

- Set and frozenset members come in hash order, which follows PYTHONHASHSEED
  for strings and bytes and the insertion history for everything else. They
  are written sorted (:func:`canonical_order`), as ``set(sorted members)``;
  so are the members of set subclasses that keep set's reduction.
- cloudpickle names each dynamic class with a random uuid4, so that a receiver
  loading the class twice keeps one class. Here the name is a hash of the
  class's content (:meth:`DeterministicState.class_id`): equal classes share
  it, classes that differ in anything never do.
- Code objects carry their first line number: it is written as 1, so moving a
  function down its file leaves its payload alone (on the receiver, tracebacks
  count lines from the ``def``). Their frozenset constants are sorted.
- The rest lives with cloudpickle's layouts in ``_cloudpickle_internals``
  (``canonical=True``): a class's ``__slotnames__`` cache and Python 3.13's
  ``__firstlineno__`` are left out, a function's module ``__file__`` and
  ``__path__`` are left out unless its code reads them, and lists built from
  unordered sources are sorted.

Whichever pass writes it, a payload ends in ``values.canonical_values``, which
writes each equal str, bytes, tuple and frozenset once, so that the bytes do not
depend on which equal values are one object.

The second pass of a dump whose data holds sets (``determinism/__init__.py``) is laid
out with :class:`Prologue` and :class:`MemoRemap`, reduced here as well.
"""

from __future__ import annotations

import hashlib
import io
import operator
import pickle
import types
from collections.abc import Callable, Sequence
from pickle import PickleBuffer
from typing import IO, Any, cast

from .. import _cloudpickle_internals as cp
from .._switches import CACHING
from ..errors import PicklingError
from . import values

AnySet = set[Any] | frozenset[Any]
_SORTED_AS_THEY_ARE = (str, bytes, int)
_PLAIN_SCALARS = frozenset({str, bytes, int, float, complex, bool, type(None)})


class DeterministicState:
    """Deterministic mode's part of a pickler's state.

    ``class_payload(state, cls)``, given by ``determinism.prepare``, returns a
    class's deterministic payload with class ids left out: what its id hashes
    (:func:`member_payload` is what orders set members with no natural order).
    ``owner`` is the pickler whose dump is running, whose hooks they honour;
    ``ordering`` holds the ids of the sets whose members are being ordered, and
    ``orders`` the orders found in this dump (see :func:`canonical_order`).
    """

    __slots__ = (
        "class_ids",
        "class_payload",
        "code_cache",
        "code_lines",
        "leave_out_class_ids",
        "ordering",
        "orders",
        "owner",
        "payloads",
        "placeholders",
    )

    def __init__(
        self,
        class_payload: Callable[[DeterministicState, type], bytes],
        *,
        leave_out_class_ids: bool,
    ) -> None:
        self.class_payload = class_payload
        self.leave_out_class_ids = leave_out_class_ids
        self.class_ids: dict[type, str] = {}
        self.code_cache = _code_cache  # see reduce_code
        # Where the caller wants them: the first line of each code object written
        # (deterministic payloads write 1), by id.
        self.code_lines: dict[int, int] | None = None
        self.ordering: set[int] = set()
        self.orders: dict[tuple[int, frozenset[int] | None], tuple[Any, list[Any], Any]] = {}
        self.placeholders = 0  # sets written as placeholders so far
        # member id -> (member, payload made in any context or None, payloads made)
        self.payloads: dict[int, tuple[Any, bytes | None, int]] = {}
        self.owner: Any = None

    def reset(self, owner: Any) -> None:
        """Start a dump by ``owner``: forget what the last one computed (a class
        or a function may have changed since)."""
        self.owner = owner
        self.code_cache = _current_code_cache()
        self.class_ids.clear()
        self.ordering.clear()
        self.orders.clear()
        self.payloads.clear()

    def class_id(self, cls: type) -> str | None:
        """The content hash that names ``cls`` on receivers (``None`` while
        computing a class id: the id cannot be part of what it hashes)."""
        if self.leave_out_class_ids:
            return None
        class_id = self.class_ids.get(cls)
        if class_id is None:
            # The class's own payload, with every class id left out: its name,
            # bases, methods (their code, defaults, closures, globals) and
            # attributes. Self-references resolve through the pickler's memo.
            class_id = hashlib.sha256(self.class_payload(self, cls)).hexdigest()[:32]
            self.class_ids[cls] = class_id
            cp.track_class(class_id, cls)
        return class_id


def member_key(member: Any, state: DeterministicState) -> tuple[Any, ...]:
    """A sort key that orders the members of any set the same way in every
    process: builtin scalars by value, tuples and frozensets member by member,
    anything else by its ``member_payload``. Each kind has its own tag, so keys
    of different kinds never compare their values."""
    kind = type(member)
    if kind is str:
        return ("s", member)
    if kind is int:
        return ("i", member)
    if kind is bytes:
        return ("y", member)
    if kind is float:
        return ("f", member.hex())  # a total order, NaN included
    if kind is bool:
        return ("b", member)
    if member is None:
        return ("n",)
    if kind is tuple:
        return ("t", tuple(member_key(item, state) for item in member))
    if kind is frozenset:
        return ("z", tuple(sorted(member_key(item, state) for item in member)))
    return ("o", member_payload(state, member))


def canonical_members(members: AnySet, state: DeterministicState) -> list[Any]:
    """The members of a set in the order deterministic payloads write them."""
    return canonical_order(members, state)[0]


def canonical_order(
    members: AnySet, state: DeterministicState
) -> tuple[list[Any], tuple[Any, ...]]:
    """The members of a set in canonical order, and a key that orders sets by
    content: (type name of the set, type name of its members when all are str,
    bytes or int and "" otherwise, the members or their keys). Equal keys,
    equal sets, when the members are plain values (see :func:`is_plain`)."""
    kinds = {type(member) for member in members}
    if len(kinds) == 1:
        kind = kinds.pop()
        if kind in _SORTED_AS_THEY_ARE:  # the common case, kept cheap
            ordered = sorted(members)
            return ordered, (type(members).__name__, kind.__name__, tuple(ordered))
    # A member's payload may reach this very set again (a parent and the set of
    # its children): member_payload writes it as a placeholder meanwhile. An
    # order found without any placeholder holds in any context; one that used
    # placeholders only where the same sets are being ordered. Both are
    # remembered: writing a set and ordering the set that holds it would
    # otherwise each order it again, twice per level of nesting.
    # Entries keep their set, and are used for that very set only: a set made
    # for one payload and freed could leave its id to another.
    context = (id(members), frozenset(state.ordering))
    for entry in (state.orders.get((id(members), None)), state.orders.get(context)):
        if entry is not None and entry[0] is members:
            return entry[1], entry[2]
    placeholders = state.placeholders
    state.ordering.add(id(members))
    try:
        keyed = [(member_key(member, state), member) for member in members]
    finally:
        state.ordering.discard(id(members))
    keyed.sort(key=_first)  # members with equal keys write equal bytes
    ordered = [member for _, member in keyed]
    key = (type(members).__name__, "", tuple(key for key, _ in keyed))
    any_context = state.placeholders == placeholders
    state.orders[(id(members), None) if any_context else context] = (members, ordered, key)
    return ordered, key


def is_plain(value: Any) -> bool:
    """Whether ``value`` is made of str, bytes, numbers, None, tuples and
    frozensets only: then equal sort keys mean equal values."""
    if type(value) in _PLAIN_SCALARS:
        return True
    if type(value) is tuple or type(value) is frozenset:
        return all(is_plain(item) for item in value)
    return False


def _first(pair: tuple[Any, Any]) -> Any:
    return pair[0]


class SortedSet:
    """Stands for a set or frozenset in a reduction: the pickler writes it as
    ``type(members)(ordered)``, ``ordered`` being its members in canonical
    order, never in hash order."""

    __slots__ = ("members", "ordered")

    def __init__(self, members: AnySet, ordered: list[Any]) -> None:
        self.members = members
        self.ordered = ordered


def reduce_sorted_set(state: Any, wrapper: SortedSet) -> tuple[Any, ...]:
    return _sorted(type(wrapper.members), wrapper.ordered)


def _sorted(kind: type, ordered: list[Any]) -> tuple[Any, ...]:
    """The reduction of a set or frozenset (``kind``) with its members in canonical
    order: a frozenset's as ``frozenset((members...))``, which the last stage
    (``values.py``) knows for a value and merges with equal frozensets."""
    return (kind, (tuple(ordered) if kind is frozenset else ordered,))


def reduce_set_subclass(state: Any, members: AnySet) -> Any:
    """An instance of a subclass of set or frozenset that keeps their reduction
    (``cls(list(members))`` and its ``__dict__``), with its members sorted;
    ``NotImplemented`` for a class that reduces itself otherwise."""
    cls = type(members)
    if cls.__reduce__ not in (set.__reduce__, frozenset.__reduce__) or (
        cls.__reduce_ex__ is not object.__reduce_ex__
    ):
        return NotImplemented
    rebuild, _, *rest = cast(tuple[Any, ...], members.__reduce__())
    return (rebuild, (canonical_members(members, state.deterministic),), *rest)


_CODE_FILENAME = "<dynamic-code>"


#: What deterministic dumps remember of code objects between dumps, as code
#: objects never change: each one's reduction, by ``id``, with the code object
#: kept alive so that its id stays its own.
CodeCache = dict[int, tuple[types.CodeType, tuple[Any, ...]]]

_MAX_CACHED_CODE = 2048  # code objects (and what they hold) kept alive at most
_code_cache: CodeCache = {}


def _current_code_cache() -> CodeCache:
    """The code cache for a dump that starts now; a dump keeps it to the end.
    When it grows too big, a new one replaces it for the dumps that start
    afterwards."""
    global _code_cache
    if not CACHING:  # (GRAPHPICKLE_NO_CACHE=1) one cache per dump
        return {}
    if len(_code_cache) > _MAX_CACHED_CODE:
        _code_cache = {}
    return _code_cache


def reduce_code(state: Any, code: types.CodeType) -> tuple[Any, ...]:
    """How deterministic payloads write a code object: first line 1 (its line
    table is relative to it), no file name of the sender's (cloudpickle 3.1.3
    writes ``<dynamic-code>`` too, earlier versions the sender's path), and
    constants as :func:`_sorted_constants` orders them.

    The reduction depends on the code object alone (immutable), so it is made
    once per code object and process, except where a frozenset constant's order
    needs the pickler's hooks (see :func:`_ordered_by_value`)."""
    canonical: DeterministicState = state.deterministic
    if canonical.code_lines is not None:
        canonical.code_lines[id(code)] = code.co_firstlineno
    cache = canonical.code_cache
    cached = cache.get(id(code))
    if cached is not None:
        return cached[1]
    rebuild, args = cp.reduce_code(code.replace(co_firstlineno=1, co_filename=_CODE_FILENAME))
    reduction = (rebuild, _sorted_constants(args, canonical))
    if _ordered_by_value(args):
        cache[id(code)] = (code, reduction)
    return reduction


def _sorted_constants(values: tuple[Any, ...], state: DeterministicState) -> tuple[Any, ...]:
    """``values`` (a code object's constructor arguments) with each frozenset,
    through tuples, in canonical order (the C pickler would write it in hash
    order: frozensets of constants come from ``in {...}`` tests)."""
    ordered = []
    for value in values:
        kind = type(value)
        if kind is tuple:
            value = _sorted_constants(value, state)
        elif kind is frozenset:
            members = _sorted_constants(tuple(canonical_members(value, state)), state)
            value = SortedSet(value, list(members))
        ordered.append(value)
    return tuple(ordered)


_KEYED_BY_VALUE = frozenset({str, bytes, int, float, bool, type(None)})


def _ordered_by_value(values: tuple[Any, ...]) -> bool:
    """Whether every frozenset among ``values`` (through tuples) orders its
    members by their values alone: :func:`member_key` orders anything else
    (complex numbers, ``...``) by a payload made with the pickler's hooks."""
    for value in values:
        kind = type(value)
        if kind is frozenset:
            if not all(_keyed_by_value(member) for member in value):
                return False
        elif kind is tuple and not _ordered_by_value(value):
            return False
    return True


def _keyed_by_value(value: Any) -> bool:
    kind = type(value)
    if kind is tuple or kind is frozenset:
        return all(_keyed_by_value(item) for item in value)
    return kind in _KEYED_BY_VALUE


class MemoRemap:
    """Placed after a group of :class:`SortedSet` in a :class:`Prologue`: makes
    the pickler's memo hold each wrapped set where a wrapper was written, so
    that every later reference to the set is a memo reference to that sorted
    copy. Written as an empty tuple.

    ``targets`` lists ``(wrapper, members, written)``: the memo entry of
    ``wrapper`` becomes that of ``members`` at the index ``written`` (a wrapper
    of equal content, or ``wrapper`` itself) was written at.
    """

    __slots__ = ("pickler", "targets")

    def __init__(
        self, pickler: Any, targets: Sequence[tuple[SortedSet, AnySet, SortedSet]]
    ) -> None:
        self.pickler = pickler
        self.targets = targets


def reduce_memo_remap(state: Any, remap: MemoRemap) -> tuple[Any, ...]:
    memo = remap.pickler.memo.copy()  # {id(obj): (memo index, obj)}
    # The pickler takes the object from each value and ignores the keys. Entries
    # are replaced, never added, so their count (the next memo index) stays
    # what the receiver counts. A set the pickler already wrote itself (reached
    # from its own members, through an object) keeps its entry: a second entry
    # for it would replace the first and lower the count. (If it has two or
    # more members, it was written in hash order and the dump takes the
    # pure-Python pass.)
    memo.update(
        (id(wrapper), (memo[id(written)][0], members))
        for wrapper, members, written in remap.targets
        if id(members) not in memo
    )
    remap.pickler.memo = memo
    return (tuple, ())


class Prologue:
    """The top object of a dump whose data holds sets: the sets first, sorted
    and grouped so that a set is written after every set nested in its members,
    then the object itself. Loads as the object
    (``operator.itemgetter(-1)((set1, ..., obj))``)."""

    __slots__ = ("items", "obj")

    def __init__(self, items: list[Any], obj: Any) -> None:
        self.items = items
        self.obj = obj


def reduce_prologue(state: Any, prologue: Prologue) -> tuple[Any, ...]:
    return (operator.itemgetter(-1), ((*prologue.items, prologue.obj),))


# --- what orders set members with no natural order ---------------------------

# How many times one member's payload may be made in a dump when it reaches
# sets being ordered (children that point at their parent, in sets): each
# context of sets being ordered around it gives another payload, and their
# number grows as 2^depth. A payload that reaches none is made once.
_PAYLOADS_PER_MEMBER = 64


def member_payload(state: DeterministicState, member: Any) -> bytes:
    """What orders a set member with no natural order: its payload, written in
    one pass by the pure-Python pickler with the dumping pickler's hooks, with
    the sets being ordered as placeholders (so a member that reaches its own
    set ends) and a digest of each buffer in place of the buffer."""
    known, payload, made = state.payloads.get(id(member), (None, None, 0))
    if known is not member:  # (an id freed and reused by another object)
        payload, made = None, 0
    if payload is not None:
        return payload
    if made >= _PAYLOADS_PER_MEMBER:
        raise PicklingError(
            f"deterministic mode cannot order the sets holding {type(member).__qualname__} "
            "objects in reasonable time: their payloads reach the sets that hold them "
            "(nodes that link to their neighbours or parent, in sets), which costs work "
            "that doubles with each level; keep such links in lists, or pickle without "
            "deterministic=True"
        )
    placeholders = state.placeholders
    file = io.BytesIO()
    buffers: list[PickleBuffer] = []
    SortingPickler(file, state.owner, state, buffers.append, protocol=5).dump(member)
    digests = (hashlib.sha256(buffer.raw()).digest() for buffer in buffers)
    payload = values.canonical_values(file.getvalue()) + b"".join(digests)
    any_context = state.placeholders == placeholders
    state.payloads[id(member)] = (member, payload if any_context else None, made + 1)
    return payload


def share_hooks(source: Any, target: Any, *, reducer_override: bool) -> None:
    """Give ``target`` the ``persistent_id``, ``dispatch_table`` (and
    ``reducer_override``) of ``source``, so that both write the same objects."""
    for name in ("persistent_id", "dispatch_table"):
        if hasattr(source, name):
            setattr(target, name, getattr(source, name))
    if reducer_override:
        target.reducer_override = source.reducer_override


class SortingPickler(pickle._Pickler):
    """The pure-Python pickler, which, unlike the C one, offers every object to
    ``reducer_override``, sets included: sets are written sorted (a set whose
    members are being ordered, as a placeholder), everything else goes to the
    hooks of ``pickler``."""

    def __init__(
        self,
        file: IO[bytes],
        pickler: Any,
        state: DeterministicState,
        buffer_callback: Callable[[PickleBuffer], Any] | None,
        protocol: int | None = None,
    ) -> None:
        super().__init__(file, protocol or pickler.protocol, buffer_callback=buffer_callback)
        self._pickler = pickler
        self._state = state
        share_hooks(pickler, self, reducer_override=False)

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is set or kind is frozenset:
            if id(obj) in self._state.ordering:
                self._state.placeholders += 1
                return (str, ("<graphpickle: a set being ordered>",))
            return _sorted(kind, canonical_members(obj, self._state))
        return self._pickler.reducer_override(obj)
