"""One ``__main__`` namespace per receiving process (or interpreter), as under fork.

Shared by the integrations whose workers load ``__main__`` code by value
(``multiprocessing``, and ``futures``' executors). cloudpickle gives the
functions of each payload a globals dict of their own, so a global that an
``initializer`` sets is not what a later task's function reads. Here the
sender's ``__main__`` namespace travels as "the receiver's ``__main__``":
:class:`MainPickler` pickles it so, and :func:`loads_sharing_main` loads a
payload so that its functions run in the receiver's ``__main__``, which keeps
its own values where the payload brings others (a worker's globals are the
worker's).
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, TypeVar

from .._cloudpickle_internals import class_tracker_id
from ..core.pickler import BufferCallback, Pickler
from ..core.reducers import Reducer

T = TypeVar("T")


class MainGlobals(dict):  # type: ignore[type-arg]
    """The globals dict a payload's ``__main__`` functions are made with: it
    travels as "the receiver's ``__main__`` namespace", not as a dict of its own."""


def _main_namespace() -> dict[str, Any]:
    """In the receiver: its ``__main__``'s namespace. Inside
    :func:`loads_sharing_main`, the namespace is remembered first, so that what
    the payload's functions write into it (cloudpickle updates their globals)
    can be undone where the receiver had a value of its own."""
    namespace: dict[str, Any] = vars(sys.modules["__main__"])
    pending = getattr(_loading, "pending", None)
    if pending is not None and not pending:
        pending.append((namespace, dict(namespace)))
    return namespace


def _reduce_main_globals(_: MainGlobals) -> tuple[Any, ...]:
    return _main_namespace, ()


_REDUCERS: dict[type, Reducer] = {MainGlobals: _reduce_main_globals}


def reducer_lookup(cls: type) -> Reducer | None:
    """The ``reducer_lookup`` of a pickler whose payloads share the receiver's ``__main__``."""
    return _REDUCERS.get(cls)


def share_main(pickler: Pickler) -> None:
    """Before each dump of ``pickler`` (made with :func:`reducer_lookup`): this
    process's ``__main__`` functions get the receiver's ``__main__`` as globals."""
    main = sys.modules.get("__main__")
    if main is not None:
        pickler._state.globals_ref[id(vars(main))] = MainGlobals()


class MainPickler(Pickler):
    """graphpickle's pickler, one dump per instance, whose ``__main__`` functions
    load with the receiver's ``__main__`` as their globals."""

    def __init__(
        self,
        file: IO[bytes],
        protocol: int | None = None,
        buffer_callback: BufferCallback | None = None,
        *,
        deterministic: bool = False,
    ) -> None:
        super().__init__(
            file,
            protocol,
            buffer_callback,
            reducer_lookup=reducer_lookup,
            deterministic=deterministic,
        )
        share_main(self)


_loading = threading.local()
_MISSING = object()


def loads_sharing_main(load: Callable[[], T]) -> T:
    """``load()`` (which unpickles a payload), then the receiver's own values put
    back where the payload's ``__main__`` functions overwrote them."""
    outer = getattr(_loading, "pending", None)
    pending: list[tuple[dict[str, Any], dict[str, Any]]] = []
    _loading.pending = pending
    try:
        return load()
    finally:
        _loading.pending = outer
        if pending:
            namespace, before = pending[0]
            for name, value in before.items():
                if namespace.get(name, _MISSING) is not value:
                    namespace[name] = value


def dumps(obj: Any) -> bytes:
    """``obj`` pickled by a :class:`MainPickler`."""
    out = io.BytesIO()
    MainPickler(out).dump(obj)
    return out.getvalue()


# --- fork ------------------------------------------------------------------------

# Who asked for the hook below, each asked whether it is still wanted (None: always).
_fork_wanted: list[Callable[[], bool] | None] = []


def track_main_classes_before_forks(wanted: Callable[[], bool] | None = None) -> None:
    """From now on, before each fork (while ``wanted()``, if given): give each class
    of ``__main__`` its by-value id. A forked child then loads a payload naming
    that class as the class it inherited, which its ``__main__`` (shared with the
    payload's functions) holds, and sends its instances back as the parent's."""
    if wanted in _fork_wanted:
        return
    # (Never unregistered: `wanted` turns it off. Windows has no fork.)
    if not _fork_wanted and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_track_main_classes)
    _fork_wanted.append(wanted)


def _track_main_classes() -> None:
    if not any(wanted is None or wanted() for wanted in _fork_wanted):
        return
    main = sys.modules.get("__main__")
    for value in list(vars(main).values()) if main is not None else ():
        if isinstance(value, type) and value.__module__ == "__main__":
            class_tracker_id(value)
