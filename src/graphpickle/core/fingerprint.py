"""Content hashes from deterministic payloads: ``fingerprint``, and what dask's
tokenize hashes (``content_dumps``, class ids left out)."""

from __future__ import annotations

import hashlib
import io
import itertools
from collections.abc import Callable
from pickle import PickleBuffer
from typing import Any, cast

from ..determinism import Passes
from ..determinism.canonical import DeterministicState
from .pickler import Pickler, dumps
from .reducers import TypeDispatch, dispatch_for

__all__ = ["content_dumps", "fingerprint"]

_FINGERPRINT_DOMAIN = b"graphpickle.fingerprint/1\n"


def fingerprint(obj: Any) -> str:
    """A stable content hash of ``obj``, for cache keys: SHA-256 (hex) of its
    deterministic payload (protocol 5) and of each out-of-band buffer.

    Equal objects give equal fingerprints in any process and under any
    ``PYTHONHASHSEED``, for the same Python minor version and graphpickle and
    cloudpickle versions (payloads by value embed bytecode), within the limits
    of deterministic mode that docs/determinism.md lists.
    """
    buffers: list[PickleBuffer] = []
    data = dumps(obj, 5, buffer_callback=buffers.append, deterministic=True)
    digest = hashlib.sha256(_FINGERPRINT_DOMAIN)
    for part in itertools.chain([memoryview(data)], (buffer.raw() for buffer in buffers)):
        digest.update(part.nbytes.to_bytes(8, "little"))  # no two splits hash alike
        digest.update(part)
    return digest.hexdigest()


def content_dumps(
    obj: Any,
    buffer_callback: Callable[[PickleBuffer], Any],
    code_lines: dict[int, int] | None = None,
) -> bytes:
    """What a content hash needs, in one pass per class fewer: the deterministic
    payload of ``obj`` (protocol 5, every buffer out of band) with each class id
    written as ``None``. ``code_lines``, if given, receives the first line of
    each code object the payload writes (as 1), by the code object's id.

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
    dispatch = dispatch_for(None)
    try:
        pickler = _idle_content_picklers.pop()
    except IndexError:
        pickler = _ContentPickler(dispatch, buffer_callback)
    if pickler.dispatch is not dispatch:
        pickler = _ContentPickler(dispatch, buffer_callback)
    return pickler.dump(obj, buffer_callback, code_lines)


class _ContentPickler:
    """A deterministic pickler that leaves class ids out, and what content_dumps
    needs of it."""

    __slots__ = ("dispatch", "output", "passes", "pickler")

    def __init__(
        self, dispatch: TypeDispatch, buffer_callback: Callable[[PickleBuffer], Any]
    ) -> None:
        self.dispatch = dispatch  # the shared reducer table when it was made
        self.output = io.BytesIO()
        # (a callback, or its passes would write buffers in band)
        self.pickler = Pickler(self.output, 5, buffer_callback, deterministic=True)
        self.passes = cast(Passes, self.pickler._passes)
        cast(DeterministicState, self.pickler._state.deterministic).leave_out_class_ids = True

    def dump(
        self,
        obj: Any,
        buffer_callback: Callable[[PickleBuffer], Any],
        code_lines: dict[int, int] | None,
    ) -> bytes:
        passes, output = self.passes, self.output
        state = cast(DeterministicState, self.pickler._state.deterministic)
        passes.buffer_callback = buffer_callback
        state.code_lines = code_lines
        try:
            self.pickler.dump(obj)
        finally:
            passes.buffer_callback = None
            state.code_lines = None
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
