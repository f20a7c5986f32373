"""Deterministic payloads: equal graphs give equal bytes in every process.

``dumps(obj, deterministic=True)`` writes what ``_canonical.py`` describes
(class ids from content, line numbers from the ``def``, sets sorted). Sets need
care: the C pickler writes builtin sets itself, in hash order, without asking
any hook. A deterministic dump therefore runs in up to four steps:

1. The C pickler writes the payload once. Unless that payload writes a set or
   frozenset of two or more members (its opcodes are walked, in C, following
   the unpickler's stack to count members), it is the answer: the cost over a
   default dump is that walk, a few percent.
2. Otherwise a second pass of the C pickler lists every set it writes (its
   ``persistent_id`` notes each set it is shown and does not persist).
   (Without the C extension, step 1 cannot count members: if no set has two
   or more, the first payload stands.)
3. If every set holds plain values only (strings, numbers, tuples...), the
   object is written again behind a ``Prologue``: every set first, members
   sorted, grouped so that a set comes after the sets nested in its members,
   then the object, whose references to the sets the pickler's memo turns into
   references to their sorted copies. Walking the opcodes again confirms that
   no set was left in hash order.
4. Otherwise (sets of objects, which written first would rebuild their members
   before the objects around them), or if a set was left in hash order, the
   pure-Python pickler writes the payload, sorting every set it meets where
   default mode writes it: right for any graph, and 15-20x slower than the C
   pickler.

Every pass honours the pickler's hooks (``persistent_id``, ``dispatch_table``,
``reducer_override``), so no pass writes or lists what the pickler would not.

:func:`fingerprint` hashes a deterministic payload and its out-of-band buffers;
:func:`content_dumps` writes what a content hash needs (class ids left out),
for dask's tokenize.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import pickle
import pickletools
from collections.abc import Callable, Mapping
from pickle import PickleBuffer
from typing import IO, Any, cast

from . import _pickler, _reducers
from ._canonical import (
    AnySet,
    DeterministicState,
    MemoRemap,
    Prologue,
    SortedSet,
    canonical_members,
    canonical_order,
    is_plain,
)
from ._captures import no_capture_warnings
from ._reducers import Reducer, ReducerLookup
from .errors import PicklingError

__all__ = ["fingerprint"]

_FINGERPRINT_DOMAIN = b"graphpickle.fingerprint/1\n"


def fingerprint(obj: Any) -> str:
    """A stable content hash of ``obj``, for cache keys: SHA-256 (hex) of its
    deterministic payload (protocol 5) and of each out-of-band buffer.

    Equal objects give equal fingerprints in any process and under any
    ``PYTHONHASHSEED``, for the same Python minor version and graphpickle and
    cloudpickle versions (payloads by value embed bytecode), within the limits
    of deterministic mode that the README lists.
    """
    buffers: list[PickleBuffer] = []
    data = _pickler.dumps(obj, 5, buffer_callback=buffers.append, deterministic=True)
    digest = hashlib.sha256(_FINGERPRINT_DOMAIN)
    for part in itertools.chain([memoryview(data)], (buffer.raw() for buffer in buffers)):
        digest.update(part.nbytes.to_bytes(8, "little"))  # no two splits hash alike
        digest.update(part)
    return digest.hexdigest()


def content_dumps(obj: Any, buffer_callback: Callable[[PickleBuffer], Any]) -> bytes:
    """What a content hash needs, in one pass per class fewer: the deterministic
    payload of ``obj`` (protocol 5, every buffer out of band) with each class id
    written as ``None``.

    A class id is a hash of the class's payload, which the payload holds anyway,
    so leaving it out loses nothing a hash could tell apart, and saves the extra
    pass over each class that computing its id costs. The payload still loads,
    but a receiver does not recognise a class it loaded before (one class per
    load): for hashing, not for shipping. (:func:`fingerprint` hashes the
    shipped payload, and keeps its values.)
    """
    # Making a deterministic pickler and freeing it cost about a fifth of a
    # small function's dump: idle ones are kept, each dumping for one caller at
    # a time (a nested call takes another), until the reducer tables they were
    # made with change.
    dispatch = _reducers.dispatch_for(None)
    try:
        pickler = _idle_content_picklers.pop()
    except IndexError:
        pickler = _ContentPickler(dispatch, buffer_callback)
    if pickler.dispatch is not dispatch:
        pickler = _ContentPickler(dispatch, buffer_callback)
    return pickler.dump(obj, buffer_callback)


class _ContentPickler:
    """A deterministic pickler that leaves class ids out, and what content_dumps
    needs of it."""

    __slots__ = ("dispatch", "output", "passes", "pickler")

    def __init__(
        self, dispatch: _reducers.TypeDispatch, buffer_callback: Callable[[PickleBuffer], Any]
    ) -> None:
        self.dispatch = dispatch  # the shared reducer table when it was made
        self.output = io.BytesIO()
        # (a callback, or its passes would write buffers in band)
        self.pickler = _pickler.Pickler(self.output, 5, buffer_callback, deterministic=True)
        self.passes = cast(Passes, self.pickler._passes)
        cast(DeterministicState, self.pickler._state.deterministic).leave_out_class_ids = True

    def dump(self, obj: Any, buffer_callback: Callable[[PickleBuffer], Any]) -> bytes:
        passes, output = self.passes, self.output
        passes.buffer_callback = buffer_callback
        try:
            self.pickler.dump(obj)
        finally:
            passes.buffer_callback = None
        data = output.getvalue()
        output.seek(0)
        output.truncate()
        # Nothing of this dump may stay alive in an idle pickler. (One whose dump
        # failed is dropped, above.)
        self.pickler.clear_memo()
        self.pickler._state.globals_ref = {}
        if len(_idle_content_picklers) < _MAX_IDLE_CONTENT_PICKLERS:
            _idle_content_picklers.append(self)
        return data


_MAX_IDLE_CONTENT_PICKLERS = 4
_idle_content_picklers: list[_ContentPickler] = []


class Passes:
    """The output side of a deterministic pickler.

    Each pass writes into ``pass_output`` (and its buffers into
    ``pass_buffers``); only the final payload reaches the caller's file and
    buffer callback. ``plain_pickler(file, buffer_callback)`` makes a
    deterministic ``Pickler`` (not the caller's subclass) with the same
    protocol and reducers.
    """

    def __init__(
        self,
        output: IO[bytes],
        buffer_callback: Callable[[PickleBuffer], Any] | None,
        plain_pickler: Callable[[IO[bytes], Callable[[PickleBuffer], Any] | None], Any],
    ) -> None:
        self.output = output
        self.buffer_callback = buffer_callback
        self.plain_pickler = plain_pickler
        self.pass_output = io.BytesIO()
        self.pass_buffers: list[PickleBuffer] = []
        self.pass_callback = None if buffer_callback is None else self.pass_buffers.append

    def run(self, pickler: Any, obj: Any) -> tuple[bytes, list[PickleBuffer]]:
        """One pass of ``pickler`` (whose output is ``pass_output``) over ``obj``."""
        self.clear()
        pickler.clear_memo()
        pickler._state.globals_ref = {}
        pickler._dump_raw(obj)
        return self.pass_output.getvalue(), list(self.pass_buffers)

    def clear(self) -> None:
        self.pass_output.seek(0)
        self.pass_output.truncate()
        self.pass_buffers.clear()


def prepare(
    output: IO[bytes],
    protocol: int,
    buffer_callback: Callable[[PickleBuffer], Any] | None,
    reducers: Mapping[type, Reducer] | None,
    reducer_lookup: ReducerLookup | None,
) -> tuple[Passes, DeterministicState]:
    """What a ``Pickler(deterministic=True)`` needs: where its passes write, and
    its part of the pickler state."""
    if protocol < 4:
        raise ValueError(
            f"deterministic payloads need protocol 4 or 5, got {protocol}: "
            "older protocols write sets through a call the pickler cannot sort"
        )

    def plain_pickler(
        file: IO[bytes], callback: Callable[[PickleBuffer], Any] | None, protocol: int = protocol
    ) -> _pickler.Pickler:
        return _pickler.Pickler(
            file,
            protocol,
            buffer_callback=callback,
            reducers=reducers,
            reducer_lookup=reducer_lookup,
            deterministic=True,
        )

    def class_payload(state: DeterministicState, cls: type) -> bytes:
        # What a class id hashes: its deterministic payload with the same
        # reducers and hooks (graphpickle's reducer_override: a subclass's own
        # would compute class ids again), class ids left out.
        file = io.BytesIO()
        pickler = plain_pickler(file, None, 5)
        _share_hooks(state.owner, pickler, reducer_override=False)
        pickler._state.deterministic = DeterministicState(
            class_payload, _member_payload, leave_out_class_ids=True
        )
        with no_capture_warnings():  # the real payload warns, once
            pickler.dump(cls)
        return file.getvalue()

    state = DeterministicState(class_payload, _member_payload, leave_out_class_ids=False)
    return Passes(output, buffer_callback, plain_pickler), state


# How many times one member's payload may be made in a dump when it reaches
# sets being ordered (children that point at their parent, in sets): each
# context of sets being ordered around it gives another payload, and their
# number grows as 2^depth. A payload that reaches none is made once.
_PAYLOADS_PER_MEMBER = 64


def _member_payload(state: DeterministicState, member: Any) -> bytes:
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
    _SortingPickler(file, state.owner, state, buffers.append, protocol=5).dump(member)
    digests = (hashlib.sha256(buffer.raw()).digest() for buffer in buffers)
    payload = file.getvalue() + b"".join(digests)
    any_context = state.placeholders == placeholders
    state.payloads[id(member)] = (member, payload if any_context else None, made + 1)
    return payload


def dump(pickler: Any, obj: Any) -> None:
    """Write the deterministic payload of ``obj`` to the output of ``pickler``,
    a ``Pickler`` made with ``deterministic=True``."""
    passes: Passes = pickler._passes
    state: DeterministicState = pickler._state.deterministic
    state.reset(pickler)
    try:
        data, buffers = passes.run(pickler, obj)
        if _sets_to_sort(data):
            sets = _sets_met(pickler, state, obj)
            if not all(is_plain(member) for members in sets for member in members):
                # Sets of objects: written first, they would rebuild their
                # members before the objects that hold them, and an object
                # hashed while half built fails to load. The Python pass writes
                # everything where default mode does.
                data, buffers = _python_pass(pickler, state, obj)
            elif any(len(members) > 1 for members in sets):
                data, buffers = passes.run(pickler, _prologue(pickler, state, sets, obj))
                if _sets_to_sort(data):
                    data, buffers = _python_pass(pickler, state, obj)
    finally:
        passes.clear()  # the payload and buffers stay alive only in the caller's hands
        state.reset(None)
    passes.output.write(data)
    if passes.buffer_callback is not None:
        for buffer in buffers:
            passes.buffer_callback(buffer)


def _sets_met(pickler: Any, state: DeterministicState, obj: Any) -> list[AnySet]:
    """Every set and frozenset that a pass of ``pickler`` over ``obj`` writes,
    once each, in the order first met: a pass with the same hooks, whose
    ``persistent_id`` also notes each set it is shown, and whose output and
    buffers are dropped as they come."""
    met: list[AnySet] = []
    passes: Passes = pickler._passes
    discard = cast(IO[bytes], _Discard())
    lister = passes.plain_pickler(discard, _out_of_band if pickler.protocol >= 5 else None)
    _share_hooks(pickler, lister, reducer_override=True)
    speedups = _pickler._speedups
    note_set = _note_set_in_python if speedups is None else speedups.note_set
    persistent_id = getattr(pickler, "persistent_id", None)
    if persistent_id is None:
        lister.persistent_id = functools.partial(note_set, met)  # persists nothing
    else:

        def noting_persistent_id(obj: Any) -> Any:
            persisted = persistent_id(obj)
            if persisted is None:  # a persisted set is not written, nor listed
                note_set(met, obj)
            return persisted

        lister.persistent_id = noting_persistent_id
    lister._dump_raw(obj)
    return list({id(members): members for members in met}.values())


def _share_hooks(source: Any, target: Any, *, reducer_override: bool) -> None:
    """Give ``target`` the ``persistent_id``, ``dispatch_table`` (and
    ``reducer_override``) of ``source``, so that both write the same objects."""
    for name in ("persistent_id", "dispatch_table"):
        if hasattr(source, name):
            setattr(target, name, getattr(source, name))
    if reducer_override:
        target.reducer_override = source.reducer_override


class _Discard:
    """A file that drops what is written to it."""

    def write(self, data: Any) -> int:
        return len(memoryview(data))


def _out_of_band(buffer: PickleBuffer) -> None:
    """A buffer callback that keeps buffers out of the payload, and nowhere."""


def _prologue(pickler: Any, state: DeterministicState, sets: list[AnySet], obj: Any) -> Prologue:
    """``obj`` behind its sets, in an order that depends on their content only:
    by nesting depth (a set after those in its members), then type and members.

    Only sets of plain values (:func:`is_plain`) come here. Equal frozensets
    become one object: every reference goes to the first copy. Which of two
    such frozensets met inside other sets comes first follows the hash order,
    so keeping them apart could not be deterministic; they are immutable and
    equal, so only ``is`` can tell. Mutable sets keep their identities.
    """
    depths: dict[int, int] = {}
    entries = []
    for members in sets:
        ordered, key = canonical_order(members, state)
        depth = 0 if key[1] else _nesting_depth(members, depths)  # key[1]: scalars only
        entries.append((depth, key, SortedSet(members, ordered)))
    entries.sort(key=lambda entry: entry[:2])
    items: list[Any] = []
    for _, group in itertools.groupby(entries, key=lambda entry: entry[0]):
        targets = []
        first_of_content: dict[Any, SortedSet] = {}
        for _, key, wrapper in group:
            written = wrapper
            if type(wrapper.members) is frozenset:
                written = first_of_content.setdefault(key, wrapper)
            targets.append((wrapper, wrapper.members, written))
            items.append(wrapper)
        items.append(MemoRemap(pickler, targets))
    return Prologue(items, obj)


def _nesting_depth(members: AnySet, depths: dict[int, int]) -> int:
    """0 for a set with no frozenset in its members (looking through tuples),
    else one more than the deepest such frozenset."""
    depth = depths.get(id(members))
    if depth is not None:
        return depth
    depth = 0
    pending = [m for m in members if type(m) is tuple or type(m) is frozenset]
    while pending:
        member = pending.pop()
        if type(member) is tuple:
            pending.extend(member)
        elif type(member) is frozenset:
            depth = max(depth, 1 + _nesting_depth(member, depths))
    depths[id(members)] = depth
    return depth


class _SortingPickler(pickle._Pickler):
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
        _share_hooks(pickler, self, reducer_override=False)

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is set or kind is frozenset:
            if id(obj) in self._state.ordering:
                self._state.placeholders += 1
                return (str, ("<graphpickle: a set being ordered>",))
            return (kind, (canonical_members(obj, self._state),))
        return self._pickler.reducer_override(obj)


def _python_pass(
    pickler: Any, state: DeterministicState, obj: Any
) -> tuple[bytes, list[PickleBuffer]]:
    output = io.BytesIO()
    buffers: list[PickleBuffer] = []
    keep = None if pickler._passes.pass_callback is None else buffers.append
    python_pickler = _SortingPickler(output, pickler, state, keep)
    pickler._state.globals_ref = {}
    python_pickler.dump(obj)
    return output.getvalue(), buffers


def _sets_to_sort(data: bytes) -> bool:
    """Whether the pickle writes a set or frozenset of two or more members itself,
    in hash order. Without the C extension: whether it writes any set itself."""
    speedups = _pickler._speedups
    if speedups is not None:
        return bool(speedups.sets_to_sort(data))
    if b"\x8f" not in data and b"\x91" not in data:  # neither opcode's byte
        return False
    return any(op.name in ("EMPTY_SET", "FROZENSET") for op, _, _ in pickletools.genops(data))


def _note_set_in_python(sink: list[AnySet], obj: Any) -> None:
    """``_speedups.note_set``: append ``obj`` to ``sink`` if it is a set."""
    if type(obj) is set or type(obj) is frozenset:
        sink.append(obj)
