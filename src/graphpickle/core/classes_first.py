"""A task's by-value classes once per connection: the classes first, then the task.

A dask task whose argument is an instance of a ``__main__`` dataclass carries the
whole class (its skeleton, its fields, its methods) in every payload: about eight
times the bytes of the same task with an importable class. The class cannot
travel as a pickle of its own that the task names, because the two would share
objects (the ``__main__`` globals dict its methods and the task's function
share, say), and a split pickle would make two of each.

So, on a connection whose receiver keeps blocks (``connection.py``), the pooled
dask pickler (``_speedups.Dumper``, ``restart=``) writes such a task in two
parts with **one pickler**: ``dump(classes)``, then ``dump(task)``. A pickler's
memo carries over from one dump to the next, and an unpickler's from one load to
the next, so the task refers to the classes' objects as one payload would; and
the classes' part starts at memo 0, so it is the same bytes in every payload
that pickles the same classes in the same state. It travels once, and then as
the digest of its bytes:

- ``b"\\xff" KEEP <length: 4 bytes LE> <classes' part> <task's part>``: the
  receiver keeps the classes' part under the digest it computes of it (before
  loading anything: it keeps them even if the task fails to load);
- ``b"\\xff" NAMED <digest: 16 bytes> <task's part>``: the classes' part this
  connection sent under that digest (a miss fails that task, naming the digest);
- ``b"\\xff" ONCE <length> <classes' part> <task's part>``: a part bigger than
  :data:`MAX_PART`, never kept.

No pickle starts with ``0xff``. The receiver loads the classes' part with the
task, as if it were inline (the class state is applied in every load, as
cloudpickle applies it), or, unless ``GRAPHPICKLE_HELD_CLASSES=0``, reuses the
objects its last load of the part made while nothing they are made of changed
(``held_classes.py``). One thing a load can observe differs (README, "Limits"):
the classes' state is applied before the task's other objects load, not where
the first instance appears in the task.

How the sender finds the classes: it does not guess them. A pooled pickler
dumps the task; the first by-value class it meets raises :class:`ClassesFirst`
(``reducers._reduce_class``), and :func:`restart` dumps again with that class
first, then any other class met the same way (at most :data:`MAX_CLASSES`; later
ones stay inline). So the classes' part holds exactly the classes the task
pickles by value. What the task's dump met before the class is reduced again
(a ``__reduce__`` there runs twice). A class met after a buffer went out of band
to the caller's ``buffer_callback`` is written inline (a restart would hand that
buffer over twice), and so is one met after the dump wrote its first frame (64
KiB) or a large ``bytes`` out to the sink (a restart would write it again); the
classes' part is written with every buffer in band (a held part cannot name a
buffer of another message).
"""

from __future__ import annotations

import _pickle
from typing import Any

from ..errors import UnpicklingError
from . import blocks, connection, held_classes

__all__ = [
    "MARKER", "MAX_CLASSES", "MAX_PART", "ClassesFirst", "is_framed", "load", "parts", "recover", "restart", "split",
]  # fmt: skip

#: The first byte of a payload in two parts (no pickle opcode is 0xff).
MARKER = 0xFF
_KEEP, _NAMED, _ONCE = 1, 2, 3
_LENGTH = 4
#: At most this many classes go first in one payload; a task with more writes
#: the others inline.
MAX_CLASSES = 8
#: A classes' part bigger than this travels with every payload (ONCE): a
#: receiver holds a connection's parts within connection.MAX_HELD_BYTES.
MAX_PART = connection.MAX_HELD_BYTES // 64


class ClassesFirst(Exception):
    """A pooled pickler met ``cls``, a by-value class, in a task it writes for a
    connection: the task is written again with the class first (never seen
    outside ``_speedups.Dumper``)."""

    def __init__(self, cls: type) -> None:
        super().__init__(cls)
        self.cls = cls


def restart(pickler: Any, sink: Any, obj: Any, first: ClassesFirst, callback: Any) -> bytes:
    """The payload of ``obj`` with its by-value classes first (the Dumper calls it
    when a dump of ``obj`` on ``pickler`` raised ``first``)."""
    state = pickler._state
    session = state.blocks.get(None)
    # Where this payload's blocks start in its write (reducers._carries marks it).
    mark = sink.mark if sink.mark is not None else session.mark()
    classes = [first.cls]
    while True:
        # What the failed dump wrote, and the blocks it counted as carried, are
        # forgotten: the dumps below carry them again.
        sink.take()
        session.undo(mark)
        _pickle.Pickler.clear_memo(pickler)
        state.reset()
        state.class_part = True  # (its own classes: bases, annotations, inline)
        _pickle.Pickler.dump(pickler, tuple(classes))
        head = sink.take()
        state.class_part = len(classes) >= MAX_CLASSES
        sink.lend(callback)
        try:
            _pickle.Pickler.dump(pickler, obj)
        except ClassesFirst as more:
            classes.append(more.cls)
            continue
        finally:
            sink.lend(None)
        body = sink.take()
        state.class_part = False
        return _frame(head, body, session)


def _frame(head: bytes, body: bytes, session: connection.Session) -> bytes:
    size = len(head).to_bytes(_LENGTH, "little")
    if len(head) > MAX_PART:
        return b"".join((bytes((MARKER, _ONCE)), size, head, body))
    name = connection.digest(head)
    if session.carries(head, name):
        return b"".join((bytes((MARKER, _KEEP)), size, head, body))
    return b"".join((bytes((MARKER, _NAMED)), name, body))


def is_framed(data: Any) -> bool:
    """Whether ``data`` is a payload in two parts."""
    if type(data) is bytes:
        return data[:1] == _MARKER_BYTE
    try:
        return bool(memoryview(data).cast("B")[0] == MARKER)
    except (TypeError, ValueError, IndexError):
        return False


_MARKER_BYTE = bytes((MARKER,))


def split(data: Any) -> tuple[int, bytes, Any]:
    """A framed payload's kind, its classes' part (a digest, for NAMED) and its
    task's part (bytes, or a memoryview of what is not bytes), as they are written."""
    view = data if type(data) is bytes else memoryview(data).cast("B")
    size = len(view)
    kind = view[1] if size > 1 else None
    if kind == _NAMED:
        start = 2
        end = start + connection.DIGEST_SIZE
    elif kind in (_KEEP, _ONCE) and size >= 2 + _LENGTH:
        start = 2 + _LENGTH
        end = start + int.from_bytes(view[2:start], "little")
    else:
        raise UnpicklingError(f"graphpickle: a payload in two parts of unknown kind {kind}")
    if end > size:
        raise UnpicklingError("graphpickle: a payload in two parts is shorter than its header says")
    return kind, bytes(view[start:end]), view[end:]


def parts(
    data: Any, receiver: connection.Receiver | None = None
) -> tuple[bytes | None, bytes, Any]:
    """The digest of a framed payload's classes' part (None if it is not held),
    that part, and its task's part: the classes' part kept by the receiving
    connection (KEEP), or the one it holds (NAMED; ``receiver``, if given, is
    the receiving connection's)."""
    kind, head, body = split(data)
    if kind == _NAMED:
        held = connection.receiving_classes(head) if receiver is None else receiver.classes(head)
        return head, held, body
    if kind == _KEEP and len(head) <= MAX_PART:
        return connection.received(head, head), head, body
    return None, head, body


def recover(data: Any) -> tuple[Any, ...]:
    """The parts of a framed payload that failed to load, its classes' part
    first (left out if the connection does not hold the one it names), whose
    blocks the connection holds all the same (``blocks.recover``: the task's
    part reads the classes' part's memo)."""
    kind, head, body = split(data)
    parts: tuple[Any, ...] = (head, body)
    if kind == _NAMED:
        try:
            parts = (connection.receiving_classes(head), body)
        except UnpicklingError:
            parts = (body,)
    blocks.recover(*parts)
    return parts


def load(data: Any, buffers: Any = ()) -> Any:
    """The task of a framed payload: its classes' part, then its task's part,
    loaded by one unpickler, or loaded after the objects the receiving
    connection's last load of that classes' part made, if nothing they are
    made of changed since (``held_classes.py``)."""
    receiver = connection.RECEIVER.get()
    name, head, body = parts(data, receiver)
    token = connection.LOADING.set((head, body))
    try:
        if (
            name is None
            or receiver is None
            or not held_classes.ENABLED
            or len(head) > held_classes.MAX_PART
        ):
            return held_classes.load_together(head, body, buffers)
        return held_classes.load(receiver, name, head, body, buffers)
    finally:
        connection.LOADING.reset(token)
