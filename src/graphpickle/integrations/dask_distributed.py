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
import contextlib
import importlib
import io
import pickle
import sys
import uuid
import warnings
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, NoReturn

from .._switches import CACHING
from ..core import blocks, classes_first, connection
from ..core.pickler import (
    DEFAULT_PROTOCOL,
    Pickler,
    _loads_failed,
    _note_load_failure,
    accelerated_dumps,
    accelerated_loads,
)
from ..core.reducers import Reducer, forget_lookup

__all__ = ["dask_setup", "dumps", "install", "installed", "loads", "uninstall"]

HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL

# Types distributed always pickles itself, never through dask_serialize (see
# distributed.protocol.pickle._always_use_pickle_for): a class defined in numpy
# or pandas (its module's top-level name) that subclasses the base named here.
# The base is found in the class's MRO by its names, not in sys.modules: the
# per-type table checks the MRO and its classes' names on every use
# (reducers.names_read), nothing else.
_PICKLED_AS_IS_BASES = {"numpy": ("numpy", "ndarray"), "pandas": ("pandas.core.generic", "NDFrame")}

#: While distributed's protocol writes a message to a peer that said it loads
#: code blocks: True (a block in every payload), or the write's session of the
#: connection's blocks (once per connection: core/connection.py). Set around
#: distributed.protocol.dumps, read by dumps.
_CODE_BLOCKS: ContextVar[Any] = ContextVar("graphpickle_code_blocks", default=False)
#: The stream message's op, and the key of the mark in a connection's remote_info.
_CODE_BLOCKS_KEY = "graphpickle-code-blocks"
#: The key of a connection's Sender (the blocks its worker holds) in its remote_info.
_SENT_KEY = "graphpickle-blocks-held"
#: The write in progress on this task's connection (TCP.write, wrapped).
_WRITING: ContextVar[connection.Session | None] = ContextVar("graphpickle_writing", default=None)
#: This process's id for itself in the handshake: a restarted worker is another.
_INCARNATION = uuid.uuid4().hex


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
    return lambda obj: (deserialize, _serialized_alone(serialize, obj))


def _serialized_alone(serialize: Callable[[Any], Any], obj: Any) -> Any:
    """``serialize(obj)``, whose own pickles (which the worker may load later,
    or never) carry their code blocks themselves: none names a connection's."""
    token = _CODE_BLOCKS.set(_CODE_BLOCKS.get() is not False)
    try:
        return serialize(obj)
    finally:
        _CODE_BLOCKS.reset(token)


def _pickled_as_is(cls: type) -> bool:
    module: object = cls.__module__
    if not isinstance(module, str):  # (distributed's check is False then too)
        return False
    base = _PICKLED_AS_IS_BASES.get(module.partition(".")[0])
    return base is not None and any((c.__module__, c.__qualname__) == base for c in cls.__mro__)


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
    Pickler(
        out,
        protocol,
        buffer_callback=callback,
        reducer_lookup=_dask_serialize_lookup,
        code_blocks=_CODE_BLOCKS,
    ).dump(x)
    return out.getvalue()


def loads(x: Any, *, buffers: Any = ()) -> Any:
    """``distributed.protocol.pickle.loads``: a plain load (no graphpickle needed),
    with a note in words when it fails. Like stock distributed (and unlike
    ``graphpickle.loads``) it does not look for the malformed BYTEARRAY8 that
    crashes CPython's C unpickler: that walk would cost up to 10% of a load of
    the messages a cluster's own peers send it.

    A task's payload that cannot be loaded (it names a module this worker
    cannot import, say) loads as a task that raises that error when it runs
    (:func:`_load_failed`): that task fails, and the worker goes on. Stock
    distributed raises inside the worker's connection to the scheduler, which
    then stops reading: the task never ends, nor does any later one."""
    try:
        return _load(x, buffers)
    except Exception as exc:
        return _load_failed(exc, x)


def _load(x: Any, buffers: Any) -> Any:
    if classes_first.is_framed(x):
        return classes_first.load(x, buffers)
    token = connection.LOADING.set((x,))  # (the blocks it carries: blocks.function_ref)
    try:
        if buffers:
            return _pickle.loads(x, buffers=buffers)
        return _pickle.loads(x)
    finally:
        connection.LOADING.reset(token)


def _load_failed(exc: Exception, data: Any) -> Any:
    """``loads(data)`` raised ``exc``: a task's payload gives a task that raises
    ``exc`` (with its note) when it runs; anything else raises it."""
    # The blocks it carried are this connection's all the same: later payloads name them.
    parts: tuple[Any, ...] = (data,)
    if classes_first.is_framed(data):
        try:
            parts = classes_first.recover(data)
        except Exception:
            _loads_failed(exc, data)  # not a payload in two parts this worker can read
    else:
        blocks.recover(data)
    task_class = _task_class_of(*parts)
    if task_class is None:
        _loads_failed(exc, data)
    _note_load_failure(exc)
    exc.add_note(
        f"graphpickle: this {task_class.__name__}'s payload could not be loaded on this "
        "worker, so the task fails; the worker goes on"
    )
    from dask._task_spec import Task

    return Task(_UNLOADABLE_KEY, _raise_load_failure, exc)


_UNLOADABLE_KEY = "graphpickle-unloadable-task"


def _raise_load_failure(exc: Exception) -> NoReturn:
    raise exc


def _task_class_of(*parts: Any) -> type | None:
    """The dask task class (``dask._task_spec.GraphNode``'s) that a payload (its
    last part, if its classes go first) builds at its top level, read from its
    first opcodes (the class is pushed first, before its arguments); None for
    anything else, or unreadable bytes. Only failed loads are read."""
    task_spec = sys.modules.get("dask._task_spec")
    if task_spec is None:
        return None
    found: Any = None
    try:
        for index, name, _, pushed, _ in connection.pushes(*parts):
            if index < len(parts) - 1 or name == "PROTO" or name.endswith("UNICODE"):
                continue  # (the strings: the module and name of the global that follows)
            if name in ("STACK_GLOBAL", "BINGET", "LONG_BINGET") and type(pushed) is tuple:
                module, qualname = pushed
                if module == task_spec.__name__ and type(qualname) is str:
                    found = getattr(task_spec, qualname, None)
            break
    except Exception:
        return None  # not a pickle we can read: it fails as it is
    graph_node = getattr(task_spec, "GraphNode", None)
    if isinstance(found, type) and graph_node is not None and issubclass(found, graph_node):
        return found
    return None


# A scheduler pickles each task on its own: in C, on pooled picklers (see
# graphpickle.core.pickler), when the extension is built.
dumps = accelerated_dumps(
    dumps, _dask_serialize_lookup, "distributed", _CODE_BLOCKS, classes_first=True
)
loads = accelerated_loads(loads, "distributed", _load_failed)


# --- code blocks: a __main__ function's code made once per worker ------------
#
# A scheduler sends each task's function again in every task. To a worker that
# said it loads them, a remembered by-value function travels as a code block
# (graphpickle.core.blocks): the worker makes its code object once and a new
# function around it for each task. Who said so: a worker's plugin
# (install(client)), once graphpickle is installed there, sends _CODE_BLOCKS_KEY
# on its stream to the scheduler, which marks that very connection (its remote_info, which
# distributed hands to every write on it as context["recipient"]). A worker
# without graphpickle never says it, nor does a connection made before or
# elsewhere (a client, another worker): they get cloudpickle's reductions.
#
# A worker that keeps blocks (caching on) says so too: then each block goes once
# per connection, and a digest after it (core/connection.py). The scheduler's
# table of what the worker holds is the connection's own (in its remote_info: a
# new connection, a restarted worker, starts empty), committed when a write on
# it returned (TCP.write, wrapped); the worker's is kept per connection object
# (TCP.read, wrapped, says which connection a payload came from).


def _marking_recipients(protocol_dumps: Callable[..., Any]) -> Callable[..., Any]:
    """distributed.protocol.dumps(msg, serializers, on_error, context, ...), with
    _CODE_BLOCKS set while it writes for a recipient that said it loads blocks:
    the write's session if the recipient keeps them, else True."""

    def dumps_for_recipient(msg: Any, *args: Any, **kwargs: Any) -> Any:
        context = args[2] if len(args) > 2 else kwargs.get("context")
        recipient = context.get("recipient") if isinstance(context, dict) else None
        takes: Any = False
        if isinstance(recipient, dict) and recipient.get(_CODE_BLOCKS_KEY) == blocks.FORMAT:
            session = _WRITING.get()
            held = recipient.get(_SENT_KEY)
            takes = session if session is not None and session.sender is held else True
        token = _CODE_BLOCKS.set(takes)
        try:
            return protocol_dumps(msg, *args, **kwargs)
        finally:
            _CODE_BLOCKS.reset(token)

    dumps_for_recipient.__wrapped__ = protocol_dumps  # type: ignore[attr-defined]
    return dumps_for_recipient


def _committing_writes(write: Callable[..., Any]) -> Callable[..., Any]:
    """TCP.write: the blocks a write carried count as the receiver's once it
    returned (its frames are then in the stream, before any later write's)."""

    async def write_then_commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        info = getattr(self, "remote_info", None)
        held = info.get(_SENT_KEY) if isinstance(info, dict) else None
        if type(held) is not connection.Sender:
            return await write(self, *args, **kwargs)
        session = held.session()
        token = _WRITING.set(session)
        try:
            written = await write(self, *args, **kwargs)
        finally:
            _WRITING.reset(token)
        held.commit(session)
        return written

    write_then_commit.__wrapped__ = write  # type: ignore[attr-defined]
    return write_then_commit


_receivers: weakref.WeakKeyDictionary[Any, connection.Receiver] = weakref.WeakKeyDictionary()


def _receiving_reads(read: Callable[..., Any]) -> Callable[..., Any]:
    """TCP.read: the payloads of a message load with their connection's blocks
    (kept while the connection object lives)."""

    async def read_with_blocks(self: Any, *args: Any, **kwargs: Any) -> Any:
        receiver = _receivers.get(self)
        if receiver is None:
            receiver = _receivers.setdefault(self, connection.Receiver())
        token = connection.RECEIVER.set(receiver)
        try:
            return await read(self, *args, **kwargs)
        finally:
            connection.RECEIVER.reset(token)

    read_with_blocks.__wrapped__ = read  # type: ignore[attr-defined]
    return read_with_blocks


def _accept_code_blocks(dask_scheduler: Any) -> None:
    """In the scheduler: mark the stream of each worker whose plugin says it
    loads code blocks of this graphpickle's format; if it keeps them too (and
    caching is on here), give that connection a table of the blocks it holds,
    once the worker answered that every read of it keeps them (see
    :func:`_notice`)."""

    def worker_loads_blocks(
        worker: Any = None,
        format: Any = None,
        keeps: Any = False,
        incarnation: Any = None,
        **_: Any,
    ) -> None:
        stream = dask_scheduler.stream_comms.get(worker)
        comm = getattr(stream, "comm", None)
        if format != blocks.FORMAT or comm is None:
            return
        info = comm.remote_info
        info[_CODE_BLOCKS_KEY] = format
        if not (CACHING and type(comm) in _COMMS_WRAPPED and isinstance(incarnation, str)):
            return
        if keeps is True:  # the worker's answer comes back on this stream: see _notice
            with contextlib.suppress(Exception):  # (a stream closing: no blocks kept)
                stream.send({"op": _CODE_BLOCKS_KEY, "incarnation": incarnation})
        elif keeps == _READY:
            held = info.get(_SENT_KEY)
            if type(held) is not connection.Sender or held.incarnation != incarnation:
                info[_SENT_KEY] = connection.Sender(incarnation)

    dask_scheduler.stream_handlers[_CODE_BLOCKS_KEY] = worker_loads_blocks


#: The comm classes whose reads and writes are wrapped (distributed's TCP and TLS).
_COMMS_WRAPPED: set[type] = set()


def _wrap_comms() -> None:
    try:
        from distributed.comm.tcp import TCP, TLS
    except ImportError:
        return
    if TCP in _COMMS_WRAPPED:
        return
    _originals[("distributed.comm.tcp", "TCP.write")] = TCP.write
    _originals[("distributed.comm.tcp", "TCP.read")] = TCP.read
    TCP.write = _committing_writes(TCP.write)
    TCP.read = _receiving_reads(TCP.read)
    _COMMS_WRAPPED.update({TCP, TLS})


#: What a worker answers when every read of its scheduler's stream keeps blocks.
_READY = "ready"


def _notice(worker: Any) -> dict[str, Any]:
    """What a worker's plugin tells the scheduler: it loads blocks of this
    format, whether it keeps them per connection, and who it is.

    A read of the stream already waiting when ``install`` wrapped the reads
    (the worker reads its scheduler's stream from the start) does not keep
    blocks. So the scheduler answers on the stream, and only once the worker
    handled that answer (every read after the one that brought it is wrapped)
    does it say it is ready and the scheduler send a block only once."""
    keeps = CACHING and bool(_COMMS_WRAPPED)

    def scheduler_answered(incarnation: Any = None, **_: Any) -> None:
        if incarnation == _INCARNATION:
            worker.batched_send({**notice, "keeps": _READY})

    notice = {
        "op": _CODE_BLOCKS_KEY,
        "format": blocks.FORMAT,
        "keeps": keeps,
        "incarnation": _INCARNATION,
    }
    if keeps:
        worker.stream_handlers[_CODE_BLOCKS_KEY] = scheduler_answered
    return notice


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
    plugin's set-up and goes on pickling as stock distributed (what graphpickle
    writes loads with pickle and cloudpickle): distributed logs it, and for the
    workers already there ``install`` warns with their error
    (:class:`RuntimeWarning`) instead of raising it."""
    from distributed.protocol.serialize import register_serialization_family

    ours = {"dumps": dumps, "loads": loads}
    _wrap_comms()
    for module_name, name in _TARGETS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        if name not in vars(module):
            continue
        _originals.setdefault((module_name, name), vars(module)[name])
        setattr(module, name, ours[name])
    import distributed.protocol as protocol

    original = _originals.setdefault(("distributed.protocol", "dumps"), protocol.dumps)
    protocol.dumps = _marking_recipients(original)
    register_serialization_family("graphpickle", _family_dumps, _family_loads)
    if client is not None:
        from ._dask_workers import InstallOnWorkers

        client.run_on_scheduler(install)
        client.run_on_scheduler(_accept_code_blocks)
        try:
            client.register_plugin(InstallOnWorkers(install, _notice))
        except Exception as exc:  # distributed re-raises a worker's error, as text
            # The scheduler keeps the plugin for the workers that join later.
            warnings.warn(
                f"graphpickle: a worker could not install the dask integration ({exc}); "
                "it goes on pickling as stock distributed, and what graphpickle writes "
                "loads there with pickle and cloudpickle",
                RuntimeWarning,
                stacklevel=2,
            )


def uninstall() -> None:
    """Undo :func:`install` in this process."""
    for (module_name, name), original in _originals.items():
        owner: Any = importlib.import_module(module_name)
        if "." in name:  # a method of a class (the comms')
            class_name, name = name.split(".")
            owner = getattr(owner, class_name)
        setattr(owner, name, original)
    _originals.clear()
    _COMMS_WRAPPED.clear()


def installed() -> bool:
    """Whether this process pickles with graphpickle for distributed."""
    import distributed.protocol.pickle as protocol_pickle

    return protocol_pickle.dumps is dumps


def dask_setup(server: Any = None) -> None:
    """The ``--preload`` hook of ``dask scheduler`` and ``dask worker``."""
    install()
    from distributed import Scheduler

    if isinstance(server, Scheduler):
        _accept_code_blocks(server)
