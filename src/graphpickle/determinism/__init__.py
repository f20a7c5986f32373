"""Deterministic payloads: equal graphs give equal bytes in every process.

``dumps(obj, deterministic=True)`` writes what ``canonical.py`` describes
(class ids from content, line numbers from the ``def``, sets sorted). Sets need
care: the C pickler writes builtin sets itself, in hash order, without asking
any hook. :func:`dump`, below, is the whole pipeline; each stage runs only when
the one before it leaves a set in hash order:

1. **C pass.** The C pickler writes the payload once. Unless that payload
   writes a set or frozenset of two or more members (its opcodes are walked,
   in C, following the unpickler's stack to count members), it is the answer,
   and stage 5 runs in that same walk
   (:func:`values.canonical_values_unless_sets`).
2. **List the sets.** A second pass of the C pickler lists every set it writes
   (its ``persistent_id`` notes each set it is shown and does not persist).
   (Without the C extension, stage 1 cannot count members: if no set has two
   or more, the first payload stands.)
3. **Sets first.** If every set holds plain values only (strings, numbers,
   tuples...), the object is written again behind a ``Prologue``: every set
   first, members sorted, grouped so that a set comes after the sets nested in
   its members, then the object, whose references to the sets the pickler's
   memo turns into references to their sorted copies. Walking the opcodes
   again confirms that no set was left in hash order.
4. **Python pass.** Otherwise (sets of objects, which written first would
   rebuild their members before the objects around them), or if a set was
   left in hash order, the pure-Python pickler writes the payload, sorting
   every set it meets where default mode writes it: right for any graph, and
   15-20x slower than the C pickler.

5. **Each value once.** Whichever pass wrote it, the payload goes through
   :func:`values.canonical_values`: every str, bytes, tuple and frozenset equal
   to one written before becomes a reference to it, so the bytes depend on
   values, not on which equal objects are one object. A lookup by content per
   such value, in a table whose slots a second walk, a few values ahead,
   fetches before they are read (``_values.c``). On the common path (no set
   to sort) this walk is also stage 1's.

Every pass honours the pickler's hooks (``persistent_id``, ``dispatch_table``,
``reducer_override``), so no pass writes or lists what the pickler would not.
This package sits below the pickler (``graphpickle.core``): a pickler hands
itself and its class to :func:`prepare` and :func:`dump`, and nothing here
imports it. ``graphpickle.fingerprint`` (in ``core/fingerprint.py``) hashes
deterministic payloads.
"""

from __future__ import annotations

import functools
import io
import itertools
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pickle import PickleBuffer
from typing import IO, Any, cast

from . import sets, values
from .canonical import (
    AnySet,
    DeterministicState,
    MemoRemap,
    Prologue,
    SortedSet,
    SortingPickler,
    canonical_order,
    is_plain,
    share_hooks,
)

__all__ = ["Passes", "dump", "prepare"]


def dump(pickler: Any, obj: Any) -> None:
    """Write the deterministic payload of ``obj`` to the output of ``pickler``,
    a ``Pickler`` made with ``deterministic=True``: the stages of the module's
    docstring, each only when the one before leaves a set in hash order."""
    passes: Passes = pickler._passes
    state: DeterministicState = pickler._state.deterministic
    state.reset(pickler)
    try:
        data, buffers = passes.run(pickler, obj)  # 1. C pass
        # 5. each equal value written once, in the walk that checks for sets:
        # None if a set is in hash order (stages 2-4, then 5 again)
        canonical = values.canonical_values_unless_sets(data)
        if canonical is None:
            met = _sets_met(pickler, state, obj)  # 2. list the sets
            # Sets of fewer than two members have no order to fix: the C
            # pickler writes them in place (and the last stage merges equal
            # frozensets among them).
            to_sort = [members for members in met if len(members) > 1]
            if not all(is_plain(member) for members in met for member in members):
                # Sets of objects: written first, they would rebuild their
                # members before the objects that hold them, and an object
                # hashed while half built fails to load.
                data, buffers = _python_pass(pickler, state, obj)  # 4. Python pass
            elif to_sort:
                data, buffers = passes.run(pickler, _prologue(pickler, state, to_sort, obj))  # 3.
                if sets.sets_to_sort(data):
                    data, buffers = _python_pass(pickler, state, obj)  # 4. Python pass
            canonical = values.canonical_values(data)  # 5. each equal value written once
        data = canonical
    finally:
        passes.clear()  # the payload and buffers stay alive only in the caller's hands
        state.reset(None)
    passes.output.write(data)
    if passes.buffer_callback is not None:
        for buffer in buffers:
            passes.buffer_callback(buffer)


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
    reducers: Mapping[type, Any] | None,
    reducer_lookup: Callable[[type], Any] | None,
    *,
    pickler_class: Callable[..., Any],
    quietly: Callable[[], AbstractContextManager[Any]],
) -> tuple[Passes, DeterministicState]:
    """What a ``Pickler(deterministic=True)`` needs: where its passes write, and
    its part of the pickler state. ``pickler_class`` is graphpickle's
    ``Pickler`` (the passes that compute class ids use it, not the caller's
    subclass); ``quietly()`` holds back capture warnings while they run."""
    if protocol < 4:
        raise ValueError(
            f"deterministic payloads need protocol 4 or 5, got {protocol}: "
            "older protocols write sets through a call the pickler cannot sort"
        )

    def plain_pickler(
        file: IO[bytes], callback: Callable[[PickleBuffer], Any] | None, protocol: int = protocol
    ) -> Any:
        return pickler_class(
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
        share_hooks(state.owner, pickler, reducer_override=False)
        pickler._state.deterministic = DeterministicState(class_payload, leave_out_class_ids=True)
        with quietly():  # the real payload warns, once
            pickler.dump(cls)
        return file.getvalue()

    state = DeterministicState(class_payload, leave_out_class_ids=False)
    return Passes(output, buffer_callback, plain_pickler), state


def _sets_met(pickler: Any, state: DeterministicState, obj: Any) -> list[AnySet]:
    """Every set and frozenset that a pass of ``pickler`` over ``obj`` writes,
    once each, in the order first met: a pass with the same hooks, whose
    ``persistent_id`` also notes each set it is shown, and whose output and
    buffers are dropped as they come."""
    met: list[AnySet] = []
    passes: Passes = pickler._passes
    discard = cast(IO[bytes], _Discard())
    lister = passes.plain_pickler(discard, _out_of_band if pickler.protocol >= 5 else None)
    share_hooks(pickler, lister, reducer_override=True)
    note_set = sets.note_set_function()
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


def _python_pass(
    pickler: Any, state: DeterministicState, obj: Any
) -> tuple[bytes, list[PickleBuffer]]:
    output = io.BytesIO()
    buffers: list[PickleBuffer] = []
    keep = None if pickler._passes.pass_callback is None else buffers.append
    python_pickler = SortingPickler(output, pickler, state, keep)
    pickler._state.globals_ref = {}
    python_pickler.dump(obj)
    return output.getvalue(), buffers
