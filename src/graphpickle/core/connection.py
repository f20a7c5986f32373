"""Code blocks once per connection: what each end of one connection remembers.

A code block (``blocks.py``) is the same bytes in every task that names the
same code. Between two graphpickle processes joined by one connection (the dask
scheduler and one worker: ``integrations/dask_distributed.py``), the block
travels once, as ``blocks.code_once(block)``; after that a payload names it by
its digest, ``blocks.code_ref(digest)``, and the receiver hands back the code
object it made from the block that connection sent. A function block
(``blocks.function_once``/``function_ref``: a code block and the immutable
parts of a function) travels and is held the same way, in the same table, and
so does a task's classes' part (``classes_first.py``: held as its bytes).

- **The sender** (:class:`Sender`, one per connection) counts a block as held by
  the receiver only once the write that carried it returned: each write is a
  :class:`Session`, whose blocks are committed by :meth:`Sender.commit` after
  the write succeeded, and dropped if it raised. A ``dumps`` that fails takes
  its blocks back out of its session (:meth:`Session.mark`,
  :meth:`Session.undo`): no later payload names a block whose bytes were never
  written. A new connection, which a new or restarted receiver always is, has
  a new, empty Sender.
- **The receiver** (:class:`Receiver`, one per connection) keys what it stores
  by the digest it computes itself from the bytes it was sent: a digest names
  only code that this very connection sent; a forged or unknown one is a miss.
  A miss fails that payload's load with :class:`~graphpickle.errors.UnpicklingError`
  naming the digest. Blocks are stored as the load reads them, and those of a
  payload that fails to load are recovered from its bytes (``blocks.recover``).
  Memory is bounded (:data:`MAX_HELD`, :data:`MAX_HELD_BYTES`): the oldest
  blocks go first. The sender starts its table afresh at half those bounds, so
  the blocks it may still name are always the receiver's newest ones and are
  never evicted (while one write at a time carries blocks, as distributed's
  batched stream writes).

``GRAPHPICKLE_NO_CACHE=1`` turns it off on both ends: a receiver does not say it
keeps blocks, and a sender makes no session.
"""

from __future__ import annotations

import hashlib
import pickletools
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextvars import ContextVar
from types import CodeType
from typing import Any

from .._switches import CACHING
from ..errors import UnpicklingError

__all__ = ["MAX_HELD", "MAX_HELD_BYTES", "RECEIVER", "Receiver", "Sender", "Session", "digest"]

#: A receiver holds at most this many blocks of one connection, or this many
#: bytes of blocks; a sender counts half of each before it starts afresh.
MAX_HELD = 4096
MAX_HELD_BYTES = 64 * 1024 * 1024
DIGEST_SIZE = 16

#: The receiving connection's blocks while a payload of it loads (set by an
#: engine integration around its reads; None elsewhere: then nothing is kept,
#: and a reference is a miss).
RECEIVER: ContextVar[Receiver | None] = ContextVar("graphpickle_receiver", default=None)
#: The parts of the payload being loaded (pickles one unpickler loads in turn):
#: a block it carries is the connection's from the start of its load, even
#: where it is named inside the very call that carries it (``blocks``).
LOADING: ContextVar[tuple[Any, ...]] = ContextVar("graphpickle_loading", default=())
#: A count of the blocks kept while it is set (``held_classes``: a part whose
#: load keeps one is not reused), this context's only.
KEPT: ContextVar[list[int] | None] = ContextVar("graphpickle_kept", default=None)

_digests: dict[bytes, bytes] = {}
_digested = 0  # the bytes of the blocks _digests holds
_MAX_DIGESTED = 16 * 1024 * 1024


def digest(block: bytes) -> bytes:
    """The digest that names ``block`` (BLAKE2b, 16 bytes), remembered by the
    block's bytes (a sender names the same few blocks in payload after
    payload), for at most MAX_HELD blocks or 16 MiB of them."""
    global _digested
    found = _digests.get(block)
    if found is None:
        found = hashlib.blake2b(block, digest_size=DIGEST_SIZE).digest()
        if len(_digests) >= MAX_HELD or _digested + len(block) > _MAX_DIGESTED:
            _digests.clear()
            _digested = 0
        if len(block) <= _MAX_DIGESTED:
            _digests[block] = found
            _digested += len(block)
    return found


class Sender:
    """One connection's table of the blocks its receiver holds. ``incarnation``
    is the receiver's own id for itself (it said it in the handshake)."""

    __slots__ = ("_lock", "held", "held_bytes", "incarnation")

    def __init__(self, incarnation: Any = None) -> None:
        self.incarnation = incarnation
        self.held: dict[bytes, int] = {}
        self.held_bytes = 0
        self._lock = threading.Lock()

    def session(self) -> Session:
        """What one write to the receiver carries."""
        return Session(self)

    def commit(self, session: Session) -> None:
        """The write of ``session`` returned: its blocks are the receiver's."""
        with self._lock:
            for name, size in session.carried.items():
                if name in self.held:
                    continue
                if len(self.held) >= MAX_HELD // 2 or self.held_bytes + size > MAX_HELD_BYTES // 2:
                    # Afresh: the receiver evicts only older blocks than those
                    # named from now on (it holds twice as many).
                    self.held.clear()
                    self.held_bytes = 0
                self.held[name] = size
                self.held_bytes += size


class Session:
    """The blocks one write carries (the same block once per write: a later
    payload of the same write names it)."""

    __slots__ = ("carried", "carried_bytes", "forgotten", "sender")

    def __init__(self, sender: Sender) -> None:
        self.sender = sender
        self.carried: dict[bytes, int] = {}  # (in the order carried)
        self.carried_bytes = 0
        self.forgotten = 0  # how many times forget() ran

    def carries(self, block: bytes, name: bytes) -> bool:
        """Whether a payload of this write carries ``block``, whose digest is
        ``name`` (``blocks.code_once``), or names it by its digest
        (``blocks.code_ref``: the receiver holds it, or an earlier payload of
        this write carried it)."""
        if name in self.sender.held or name in self.carried:
            return False
        if len(self.carried) >= MAX_HELD // 2 or self.carried_bytes > MAX_HELD_BYTES // 2:
            self.forget()  # (a write of many blocks: the first may be evicted by now)
        self.carried[name] = len(block)
        self.carried_bytes += len(block)
        return True

    def forget(self) -> None:
        """A ``dumps`` of this write failed: what it carried was not sent, and
        nothing carried so far is named again in this write (a later payload
        carries the block again)."""
        self.carried.clear()
        self.carried_bytes = 0
        self.forgotten += 1

    def mark(self) -> tuple[int, int]:
        """Where what a payload carries starts (for :meth:`undo`)."""
        return (self.forgotten, len(self.carried))

    def undo(self, mark: tuple[int, int]) -> None:
        """A payload whose dump started at ``mark`` is written again: what it
        carried was not sent (everything, if the write forgot since)."""
        forgotten, size = mark
        if forgotten != self.forgotten:
            self.forget()
            return
        for name in list(self.carried)[size:]:
            self.carried_bytes -= self.carried.pop(name)


def dump_failed(blocks: ContextVar[Any] | None) -> None:
    """A ``dumps`` whose pickler had the context variable ``blocks`` failed."""
    session = blocks.get(None) if blocks is not None else None
    if type(session) is Session:
        session.forget()


class Receiver:
    """One connection's blocks, by the digest of their bytes (computed here)."""

    __slots__ = ("_lock", "held", "held_bytes", "loaded")

    def __init__(self) -> None:
        # (a code block's code object, a function block's parts: a tuple, or
        # a classes' part: its bytes)
        self.held: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        self.held_bytes = 0
        # the objects of classes' parts it loaded, by digest (held_classes.py)
        self.loaded: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def keep(self, block: bytes, value: Any) -> bytes:
        """Hold ``value``, made from ``block``, under the block's digest (the
        newest; the oldest blocks go beyond the bounds); return the digest."""
        name = hashlib.blake2b(block, digest_size=DIGEST_SIZE).digest()
        with self._lock:
            old = self.held.pop(name, None)
            if old is not None:
                self.held_bytes -= old[1]
            while self.held and (
                len(self.held) >= MAX_HELD or self.held_bytes + len(block) > MAX_HELD_BYTES
            ):
                _, (_, size) = self.held.popitem(last=False)
                self.held_bytes -= size
            self.held[name] = (value, len(block))
            self.held_bytes += len(block)
        return name

    def code(self, name: bytes) -> CodeType:
        """The code object this connection sent under ``name``."""
        found = self.held.get(name) if type(name) is bytes else None
        if found is None or type(found[0]) is not CodeType:
            raise MissingBlock(name)
        return found[0]

    def function(self, name: bytes) -> tuple[Any, ...]:
        """The parts of the function block this connection sent under ``name``."""
        found = self.held.get(name) if type(name) is bytes else None
        if found is None or type(found[0]) is not tuple:
            raise MissingBlock(name, "function")
        return found[0]

    def classes(self, name: bytes) -> bytes:
        """The classes' part (``classes_first.py``) this connection sent under ``name``."""
        found = self.held.get(name) if type(name) is bytes else None
        if found is None or type(found[0]) is not bytes:
            raise MissingBlock(name, "classes")
        return found[0]


class MissingBlock(UnpicklingError):
    """A payload names a block (by ``name``, its digest) that this connection
    does not hold."""

    def __init__(self, name: Any, kind: str = "code") -> None:
        super().__init__(_miss(name, kind))
        self.name = name


def _miss(name: Any, kind: str = "code") -> str:
    shown = name.hex() if type(name) is bytes else repr(name)
    return (
        f"graphpickle: this worker holds no {kind} block {shown} from this connection "
        "(evicted, or sent on another connection): this task fails, the worker goes on. "
        "Submit the task again; if it keeps failing, set GRAPHPICKLE_NO_CACHE=1 on the "
        "scheduler and the workers to send code in every task"
    )


def receiving_held(name: bytes) -> CodeType:
    """``blocks.code_ref``'s answer: the current connection's code for ``name``."""
    receiver = RECEIVER.get()
    if receiver is None:
        raise MissingBlock(name)
    return receiver.code(name)


def receiving_function(name: bytes) -> tuple[Any, ...]:
    """``blocks.function_ref``'s answer: the current connection's function
    block for ``name``."""
    receiver = RECEIVER.get()
    if receiver is None:
        raise MissingBlock(name, "function")
    return receiver.function(name)


def receiving_classes(name: bytes) -> bytes:
    """The current connection's classes' part for ``name`` (``classes_first.parts``)."""
    receiver = RECEIVER.get()
    if receiver is None:
        raise MissingBlock(name, "classes")
    return receiver.classes(name)


def received(block: bytes, value: Any) -> bytes | None:
    """``blocks.code_once`` (or ``function_once``) made ``value`` from
    ``block``: the current connection holds it (if a connection is receiving,
    and caching is on), under the digest returned (else None)."""
    receiver = RECEIVER.get()
    if receiver is not None and CACHING:
        counted = KEPT.get()
        if counted is not None:
            counted[0] += 1
        return receiver.keep(block, value)
    return None


# The calls whose first argument is a block (a function block's call pushes a
# MARK first: it has more arguments than TUPLE3 takes).
_ONCE = frozenset(("graphpickle.core.blocks", name) for name in ("code_once", "function_once"))
_STRINGS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"})
_BYTES = frozenset({"SHORT_BINBYTES", "BINBYTES", "BINBYTES8"})


def pushes(*parts: Any) -> Iterator[tuple[int, str, Any, Any, Any]]:
    """``(part, opcode name, argument, pushed, pushed before)`` for each opcode
    of ``parts``, pickles loaded one after the other by one unpickler (one
    memo: a payload with its classes first). What an opcode pushed is read only
    for strings, globals (``(module, name)``) and memo gets of those; None for
    anything else. Raises what ``pickletools.genops`` raises on bad bytes."""
    memo: list[Any] = []
    for index, data in enumerate(parts):
        # What the last two opcodes pushed (via the memo too).
        before: Any = None
        last: Any = None
        arg: Any
        for opcode, arg, _ in pickletools.genops(memoryview(data).tobytes()):
            name = opcode.name
            if name == "MEMOIZE":
                memo.append(last)
                continue
            if name in ("FRAME", "MARK"):
                continue
            pushed: Any = None
            if name in _STRINGS:
                pushed = arg
            elif name in ("BINGET", "LONG_BINGET"):
                pushed = memo[arg] if 0 <= arg < len(memo) else None
            elif name == "STACK_GLOBAL":
                pushed = (before, last)
            yield index, name, arg, pushed, last
            before, last = last, pushed


def carried_by(*parts: Any) -> list[bytes]:
    """The bytes of each ``code_once`` (or ``function_once``) call a payload of
    the current connection makes (its parts, if its classes go first: see
    :func:`pushes`), read from its opcodes (``blocks.recover`` holds them when
    the payload failed to load); none if no connection is receiving, or caching
    is off."""
    if RECEIVER.get() is None or not CACHING:
        return []
    found: list[bytes] = []
    try:
        for _, name, arg, _, before in pushes(*parts):
            if name in _BYTES and before in _ONCE:
                found.append(arg)
    except Exception:
        pass  # read what could be read: the payload fails as it is
    return found
