"""dask.distributed on graphpickle: one pass instead of pickle, scan, cloudpickle.

``distributed.protocol.pickle.dumps`` runs ``pickle.dumps``, then a
``dask_serialize``-aware pickler if that raised, then ``cloudpickle.dumps`` of
the whole object if the bytes contain ``__main__`` or the top-level object's
module is registered by value. :func:`install` replaces it with one graphpickle
pass that also applies ``dask_serialize`` wherever a registered type sits in
the graph (stock distributed loses it when a ``__main__`` function sends the
graph to cloudpickle), and finds by-value modules however deeply nested.

In a client::

    import graphpickle.integrations.dask_distributed as gpd
    client = Client(...)
    gpd.install(client)          # this process, the scheduler and the current workers

For schedulers and workers started from the command line::

    dask scheduler --preload graphpickle.integrations.dask_distributed
    dask worker tcp://... --preload graphpickle.integrations.dask_distributed

The serialization family ``"graphpickle"`` is registered too, for
``Client(serializers=["graphpickle", ...], deserializers=[...])``.

Whether a type has a ``dask_serialize`` registration is looked up once per type
and remembered until the registries change: a registration (or its removal)
made at any time applies to the next ``dumps``, as with stock distributed.
"""

from __future__ import annotations

import _pickle
import importlib
import io
import pickle
import sys
from collections.abc import Callable
from typing import Any

from ..core.pickler import (
    DEFAULT_PROTOCOL,
    Pickler,
    _loads_failed,
    accelerated_dumps,
    accelerated_loads,
)
from ..core.reducers import Reducer, forget_lookup

__all__ = ["dask_setup", "dumps", "install", "installed", "loads", "uninstall"]

HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

# Types distributed always pickles itself, never through dask_serialize (see
# distributed.protocol.pickle._always_use_pickle_for).
_PICKLED_AS_IS_MODULES = ("numpy", "pandas")


class _TrackedDict(dict[Any, Any]):
    """A registry dict of ``dask_serialize``/``dask_deserialize`` that drops the
    remembered answers when a registration is made or removed. Reads stay the
    plain dict's."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        if dict.get(self, key, _UNSET) is not value:
            _registry_changed()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        _registry_changed()
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        _registry_changed()
        return super().pop(*args)

    def popitem(self) -> tuple[Any, Any]:
        _registry_changed()
        return super().popitem()

    def clear(self) -> None:
        _registry_changed()
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        _registry_changed()
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            _registry_changed()
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> _TrackedDict:  # type: ignore[misc]
        _registry_changed()
        return super().__ior__(other)


_UNSET = object()
_tracking = False


def _registry_changed() -> None:
    # Picklers created from now on ask the registries again; one in the middle of
    # a dump keeps the table it has. Nothing is checked on the dumps() path.
    forget_lookup(_dask_serialize_lookup)


def _track_registries() -> None:
    """Swap the registries' dicts for :class:`_TrackedDict` ones (once, before
    any answer is remembered)."""
    global _tracking
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    for registry in (dask_serialize, dask_deserialize):
        for name in ("_lookup", "_lazy"):
            table = getattr(registry, name)
            if type(table) is not _TrackedDict:
                setattr(registry, name, _TrackedDict(table))
    _tracking = True


def _dask_serialize_lookup(cls: type) -> Reducer | None:
    """A reducer that uses ``dask_serialize``/``dask_deserialize`` for ``cls``."""
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    if not _tracking:
        _track_registries()
    if cls is str or cls is bytes or _pickled_as_is(cls):
        return None
    try:
        serialize = dask_serialize.dispatch(cls)
        deserialize = dask_deserialize.dispatch(cls)
    except TypeError:
        return None
    return lambda obj: (deserialize, serialize(obj))


def _pickled_as_is(cls: type) -> bool:
    top = cls.__module__.partition(".")[0]
    if top not in _PICKLED_AS_IS_MODULES or top not in sys.modules:
        return False
    if top == "numpy":
        return issubclass(cls, sys.modules["numpy"].ndarray)
    return issubclass(cls, sys.modules["pandas"].core.generic.NDFrame)


def dumps(
    x: Any,
    *,
    buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None,
    protocol: int = HIGHEST_PROTOCOL,
) -> bytes:
    """``distributed.protocol.pickle.dumps``, in one graphpickle pass.

    As distributed's: protocol 4 keeps buffers in band (``buffer_callback`` is
    ignored), protocol 5 hands them to ``buffer_callback``."""
    protocol = protocol or HIGHEST_PROTOCOL
    callback = buffer_callback if protocol >= 5 else None
    out = io.BytesIO()
    Pickler(out, protocol, buffer_callback=callback, reducer_lookup=_dask_serialize_lookup).dump(x)
    return out.getvalue()


def loads(x: Any, *, buffers: Any = ()) -> Any:
    """``distributed.protocol.pickle.loads``: a plain load (no graphpickle needed),
    with a note in words when it fails. Like stock distributed (and unlike
    ``graphpickle.loads``) it does not look for the malformed BYTEARRAY8 that
    crashes CPython's C unpickler: that walk would cost up to 10% of a load of
    the messages a cluster's own peers send it."""
    try:
        if buffers:
            return _pickle.loads(x, buffers=buffers)
        return _pickle.loads(x)
    except Exception as exc:
        _loads_failed(exc, x)


# A scheduler pickles each task on its own: in C, on pooled picklers (see
# graphpickle.core.pickler), when the extension is built.
dumps = accelerated_dumps(dumps, _dask_serialize_lookup, "distributed")
loads = accelerated_loads(loads, "distributed")


def _family_dumps(x: Any, context: Any = None) -> tuple[dict[str, Any], list[Any]]:
    frames: list[Any] = [None]

    def keep(buffer: pickle.PickleBuffer) -> None:
        frames.append(memoryview(buffer))

    protocol = (context or {}).get("pickle-protocol", None) or DEFAULT_PROTOCOL
    frames[0] = dumps(x, buffer_callback=keep, protocol=protocol)
    writeable = tuple(not f.readonly for f in frames[1:])
    return {"serializer": "graphpickle", "writeable": writeable}, frames


def _family_loads(header: dict[str, Any], frames: list[Any]) -> Any:
    # The contract of distributed's pickle family: writable buffers come back
    # writable (a copy only if the transport gave read-only memory).
    buffers = []
    for frame, writeable in zip(frames[1:], header["writeable"], strict=True):
        view = memoryview(frame)
        if writeable and view.readonly:
            view = memoryview(bytearray(view))
        elif not writeable and not view.readonly:
            view = view.toreadonly()
        buffers.append(view)
    return loads(frames[0], buffers=buffers)


# Where distributed keeps its pickle functions: the module, and the modules that
# imported them by name (those a distributed version lacks are skipped).
_TARGETS = (
    ("distributed.protocol.pickle", "dumps"),
    ("distributed.protocol.pickle", "loads"),
    ("distributed.client", "dumps"),
    ("distributed.client", "loads"),
    ("distributed.scheduler", "dumps"),
    ("distributed.scheduler", "loads"),
    ("distributed.diagnostics.plugin", "dumps"),
    ("distributed.diagnostics.progressbar", "dumps"),
    ("distributed.shuffle._scheduler_plugin", "dumps"),
)
_originals: dict[tuple[str, str], Any] = {}


def install(client: Any = None) -> None:
    """Make this process (and, given a ``Client``, its scheduler and its
    workers) pickle with graphpickle instead of distributed's sequence.

    With a ``Client``, a worker plugin is registered with the scheduler, so
    that every worker installs it when it joins: the current ones, one started
    later (adaptive scaling), one its nanny restarted, every one after
    ``client.restart()``. A worker that cannot import graphpickle fails the
    plugin's set-up, which distributed logs, and goes on pickling as stock
    distributed: what graphpickle writes loads with pickle and cloudpickle."""
    from distributed.protocol.serialize import register_serialization_family

    ours = {"dumps": dumps, "loads": loads}
    for module_name, name in _TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if name not in vars(module):
            continue
        _originals.setdefault((module_name, name), vars(module)[name])
        setattr(module, name, ours[name])
    register_serialization_family("graphpickle", _family_dumps, _family_loads)
    if client is not None:
        from ._dask_workers import InstallOnWorkers

        client.run_on_scheduler(install)
        client.register_plugin(InstallOnWorkers(install))


def uninstall() -> None:
    """Undo :func:`install` in this process."""
    for (module_name, name), original in _originals.items():
        setattr(importlib.import_module(module_name), name, original)
    _originals.clear()


def installed() -> bool:
    """Whether this process pickles with graphpickle for distributed."""
    import distributed.protocol.pickle as protocol_pickle

    return protocol_pickle.dumps is dumps


def dask_setup(server: Any = None) -> None:
    """The ``--preload`` hook of ``dask scheduler`` and ``dask worker``."""
    install()
