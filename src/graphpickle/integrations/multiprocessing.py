"""The standard library's ``multiprocessing`` (and so ``ProcessPoolExecutor``) on graphpickle.

From Python 3.14 ``forkserver`` is the default start method on Linux: workers no
longer inherit the parent's ``__main__``, so a function or class defined in a
notebook, a ``python -c`` string or a script piped to ``python -`` cannot reach
them by reference, and lambdas and closures never could. One call at the top of
the notebook or script fixes that for every start method::

    import graphpickle.integrations.multiprocessing as gpmp

    gpmp.install()

What :func:`install` changes, in this process and in every child it starts (each
child installs it again while it loads its preparation data, before its process
object):

- ``ForkingPickler.dumps`` (connections, ``Queue``, ``SimpleQueue``, ``Pool``'s task
  and result queues, ``Manager`` proxies) and ``reduction.dump`` (the process
  object and its preparation data under spawn and forkserver) pickle with
  graphpickle: by reference where the receiver can import, by value where it
  cannot. The reducers registered with ``ForkingPickler.register`` (connections,
  sockets, semaphores, shared ctypes) still apply.
- ``ForkingPickler.loads`` is ``pickle.loads``, except that the ``__main__``
  functions a payload brings share one namespace per process, the receiver's
  ``__main__``, as under fork: a global an ``initializer`` sets is what the tasks
  read, and a payload adds the globals its functions use without overwriting
  those the receiver has.
- ``spawn.get_preparation_data`` leaves out the main module: workers and the
  forkserver do not run the main script again (nor try to run ``<stdin>``).
- ``Pool`` workers report a task they cannot load (a module they lack) as that
  task's exception and keep serving, where the stock worker dies and the pool
  hangs (cpython#79492); the parent reports a result it cannot load the same way.
- Before each fork, the ``__main__`` classes get the ids their by-value payloads
  carry, so that a forked child loads them as the class it inherited.

:func:`uninstall` puts every name back. A Python whose ``multiprocessing``
differs from what this module was checked against makes :func:`install` raise
:class:`MultiprocessingIntegrationError` before it changes anything.
"""

from __future__ import annotations

import _pickle
import concurrent.futures.process as _executor
import copyreg
import io
import multiprocessing.forkserver as _forkserver
import multiprocessing.pool as _pool
import multiprocessing.queues as _queues
import multiprocessing.reduction as _reduction
import multiprocessing.spawn as _spawn
import os
import pickle
import pickletools
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import IO, Any, TypeVar

from ..core.pickler import Pickler, _note_load_failure
from ..core.reducers import on_tables_changed
from . import _main_namespace

__all__ = [
    "SUPPORTED_PYTHONS",
    "MultiprocessingIntegrationError",
    "install",
    "installed",
    "uninstall",
]

#: The Python minor versions whose ``multiprocessing`` this module was checked against.
SUPPORTED_PYTHONS = ((3, 11), (3, 12), (3, 13), (3, 14), (3, 15))

#: This module, as a forkserver preloads it (its children then start with it imported).
_PRELOAD = __name__


class MultiprocessingIntegrationError(RuntimeError):
    """This Python's ``multiprocessing`` is not one this integration knows how to change."""


# --- pickling ------------------------------------------------------------------


#: True while this integration pickles: a remembered by-value function travels
#: as a code block (graphpickle.core.blocks), whose code object each receiver
#: makes once and keeps. Every receiver loads blocks: a child of this process
#: installs this module before it loads anything else, and a message of this
#: integration already needs graphpickle to load (``_main_namespace``).
_CODE_BLOCKS: ContextVar[bool] = ContextVar("graphpickle_mp_code_blocks", default=False)


class _ForkingPickler(Pickler):
    """graphpickle's pickler with ``ForkingPickler``'s registered reducers, whose
    ``__main__`` functions travel with the receiver's ``__main__`` as globals."""

    def __init__(self, file: IO[bytes], protocol: int | None = None) -> None:
        super().__init__(
            file, protocol, reducer_lookup=_main_namespace.reducer_lookup, code_blocks=_CODE_BLOCKS
        )
        self.tables: tuple[dict[Any, Any], dict[Any, Any]] = ({}, {})
        self.prepare()

    def dump(self, obj: Any) -> None:
        # (Set here, in the thread that dumps: Pool's task handler is a thread
        # of its own, and a new thread starts with an empty context.)
        token = _CODE_BLOCKS.set(True)
        try:
            super().dump(obj)
        finally:
            _CODE_BLOCKS.reset(token)

    def prepare(self) -> None:
        """Before each dump: ForkingPickler's table (copyreg's, then what
        ``register()`` added), and the receiver's ``__main__`` for this
        ``__main__``'s functions."""
        extra = vars(_reduction.ForkingPickler)["_extra_reducers"]
        if self.tables != (copyreg.dispatch_table, extra):  # (changed since: copied again)
            self.tables = (dict(copyreg.dispatch_table), dict(extra))
            self.dispatch_table = {**copyreg.dispatch_table, **extra}
        _main_namespace.share_main(self)


class _Reusable(threading.local):
    """This thread's pickler for ``ForkingPickler.dumps``, reused from message to
    message (making one costs more than pickling a task), while no other dump
    of this thread uses it and no reducer table changed since."""

    current: tuple[_ForkingPickler, io.BytesIO] | None = None
    generation = -1
    busy = False


_reusable = _Reusable()
#: A message larger than this goes out without a copy (in a pickler of its own).
_COPIED_UP_TO = 1 << 20


def _drop_reusable() -> None:
    _generation[0] += 1  # each thread's pickler goes at its next dump


_generation = [0]
on_tables_changed(_drop_reusable)


def _dumps(cls: type, obj: Any, protocol: int | None = None) -> bytes | memoryview:
    """``ForkingPickler.dumps``."""
    slot = _reusable
    if protocol is not None or slot.busy:
        out = io.BytesIO()
        _ForkingPickler(out, protocol).dump(obj)
        return out.getbuffer()
    current = slot.current
    if current is None or slot.generation != _generation[0]:
        out = io.BytesIO()
        current = slot.current = _ForkingPickler(out), out
        slot.generation = _generation[0]
    else:
        current[0].prepare()
    pickler, out = current
    slot.busy = True
    try:
        pickler.dump(obj)
        if out.tell() > _COPIED_UP_TO:
            slot.current = None
            return out.getbuffer()
        return out.getvalue()
    finally:
        slot.busy = False
        if slot.current is current:
            out.seek(0)
            out.truncate()
            pickler.clear_memo()
            pickler._state.reset()


def _dump(obj: Any, file: IO[bytes], protocol: int | None = None) -> None:
    """``multiprocessing.reduction.dump``."""
    _ForkingPickler(file, protocol).dump(obj)


def _loads(data: Any, /, **kwargs: Any) -> Any:
    """``ForkingPickler.loads``: ``pickle.loads``, its ``__main__`` functions in the
    receiver's ``__main__`` (fork's semantics: the worker's globals are the worker's)."""
    try:
        return _main_namespace.loads_sharing_main(lambda: _pickle.loads(data, **kwargs))
    except Exception as exc:
        _note_load_failure(exc)
        raise


# --- children --------------------------------------------------------------------


class _InstallInChild:
    """In the preparation data: loading it installs graphpickle in the child,
    before the process object is loaded."""

    def __reduce__(self) -> tuple[Any, ...]:
        return install, ()


def _get_preparation_data(name: str) -> dict[str, Any]:
    """``spawn.get_preparation_data`` without the main module (the child would
    run the main script again, or fail to find ``<stdin>``), with graphpickle."""
    data: dict[str, Any] = _originals[("spawn", "get_preparation_data")](name)
    data.pop("init_main_from_path", None)
    data.pop("init_main_from_name", None)
    data["graphpickle"] = _InstallInChild()
    return data


def _active() -> bool:
    """Whether the at-fork hook of :func:`install` is wanted (it is never removed)."""
    return bool(_originals)


# --- Pool workers that never lose a task -----------------------------------------


def _task_ids(data: Any) -> tuple[int, int] | None:
    """``(job, index)`` of a Pool task or result (a tuple that starts with two
    ints) read from its pickle without loading it; ``None`` for another shape."""
    ids: list[int] = []
    try:
        for opcode, argument, _ in pickletools.genops(bytes(data)):
            if opcode.name in ("PROTO", "FRAME", "MARK"):
                continue
            if not isinstance(argument, int) or opcode.name not in _INT_OPCODES:
                return None
            ids.append(argument)
            if len(ids) == 2:
                return ids[0], ids[1]
    except Exception:  # not a pickle at all
        return None
    return None


_INT_OPCODES = frozenset({"BININT", "BININT1", "BININT2", "LONG1", "LONG4", "INT", "LONG"})


def _raise(exc: BaseException) -> None:
    raise exc


class _Proxy:
    """A queue as a worker sees it, but for the methods a subclass defines."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


#: What a message's bytes say it is: a Pool task's (job, chunk), or a call's work_id.
_Item = TypeVar("_Item")


def _load_or_fail_alone(
    data: bytes,
    item_of: Callable[[bytes], _Item | None],
    note: Callable[[_Item], str],
    failing: Callable[[_Item, Exception], Any],
) -> Any:
    """``data`` loaded; or, where it cannot be and ``item_of`` reads which task,
    result or call it is from the bytes, ``failing(item, exc)``: that one item
    fails with the error (noted), and the reader keeps serving."""
    try:
        return _loads(data)
    except Exception as exc:
        item = item_of(data)
        if item is None:
            raise
        exc.add_note(note(item))
        return failing(item, exc)


class _GuardedQueue(_Proxy):
    """A Pool worker's view of its task queue: a task it cannot load becomes a
    task that raises why (the stock worker dies on it and the task is lost)."""

    def get(self) -> Any:
        queue = self._queue
        with queue._rlock:
            data = queue._reader.recv_bytes()
        return _load_or_fail_alone(
            data,
            _task_ids,
            lambda ids: (
                f"graphpickle: pool worker {os.getpid()} could not load this task "
                f"(job {ids[0]}, chunk {ids[1]}); it keeps serving"
            ),
            lambda ids, exc: (*ids, _raise, (exc,), {}),
        )


class _ReportingQueue(_Proxy):
    """A Pool worker's view of its result queue: a result that cannot be pickled
    fails with its path in the message (the stock worker sends ``repr(exc)``,
    which leaves out the notes that name the path)."""

    def put(self, obj: Any) -> None:
        try:
            self._queue.put(obj)
        except Exception as exc:
            notes = "; ".join(getattr(exc, "__notes__", ()))
            raise pickle.PicklingError(f"{type(exc).__name__}: {exc} ({notes})") from exc


def _worker(inqueue: Any, outqueue: Any, *args: Any) -> Any:
    """``multiprocessing.pool.worker`` with the guarded queues."""
    worker = _originals.get(("pool", "worker"), _stock_worker)
    if not isinstance(inqueue, _queues.SimpleQueue):  # a ThreadPool's: nothing is pickled
        return worker(inqueue, outqueue, *args)
    return worker(_GuardedQueue(inqueue), _ReportingQueue(outqueue), *args)


_stock_worker = vars(_pool)["worker"]


class _GuardedResults:
    """The parent's ``Pool._quick_get``: a result it cannot load fails its task
    (the stock result thread dies on it, and the pool hangs)."""

    def __init__(self, reader: Any) -> None:
        self._reader = reader

    def __call__(self) -> Any:
        return _load_or_fail_alone(
            self._reader.recv_bytes(),
            _task_ids,
            lambda ids: f"graphpickle: the parent could not load the result of job {ids[0]}",
            lambda ids, exc: (*ids, (False, exc)),
        )


def _setup_queues(self: Any) -> None:
    """``Pool._setup_queues``, with results read through :class:`_GuardedResults`."""
    _originals[("Pool", "_setup_queues")](self)
    self._quick_get = _GuardedResults(self._outqueue._reader)


def _call_id(data: Any) -> int | None:
    """The ``work_id`` of a ``ProcessPoolExecutor`` call item, read from its pickle
    without loading it (the first int after the string ``"work_id"``)."""
    after_key = False
    try:
        for opcode, argument, _ in pickletools.genops(bytes(data)):
            if after_key and opcode.name in _INT_OPCODES and isinstance(argument, int):
                return argument
            if argument == "work_id":
                after_key = True
            elif after_key and opcode.name not in ("MEMOIZE", "PUT", "BINPUT", "LONG_BINPUT"):
                return None
    except Exception:  # not a pickle at all
        return None
    return None


class _GuardedCallQueue(_Proxy):
    """A ``ProcessPoolExecutor`` worker's view of its call queue: a call it cannot
    load becomes a call that raises why (the stock worker dies on it, and the
    executor breaks for good)."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        queue = self._queue
        if not block or timeout is not None:
            return queue.get(block, timeout)
        with queue._rlock:
            data = queue._recv_bytes()
        queue._sem.release()
        return _load_or_fail_alone(
            data,
            _call_id,
            lambda _: (
                f"graphpickle: executor worker {os.getpid()} could not load this call; "
                "it keeps serving"
            ),
            lambda work_id, exc: _executor._CallItem(work_id, _raise, (exc,), {}),
        )


def _executor_worker(call_queue: Any, *args: Any, **kwargs: Any) -> Any:
    """``concurrent.futures.process._process_worker`` with the guarded call queue."""
    worker = _originals.get(("executor", "_process_worker"), _stock_executor_worker)
    return worker(_GuardedCallQueue(call_queue), *args, **kwargs)


_stock_executor_worker = vars(_executor)["_process_worker"]


# --- install ---------------------------------------------------------------------

# (holder, attribute name) -> what install() put there; filled by _check().
_TARGETS: dict[tuple[str, str], tuple[Any, Any]] = {
    ("ForkingPickler", "dumps"): (_reduction.ForkingPickler, classmethod(_dumps)),
    ("ForkingPickler", "loads"): (_reduction.ForkingPickler, staticmethod(_loads)),
    ("reduction", "dump"): (_reduction, _dump),
    ("spawn", "get_preparation_data"): (_spawn, _get_preparation_data),
    ("pool", "worker"): (_pool, _worker),
    ("Pool", "_setup_queues"): (_pool.Pool, _setup_queues),
    ("executor", "_process_worker"): (_executor, _executor_worker),
}

_originals: dict[tuple[str, str], Any] = {}
_original_preload: list[str] | None = None


def _params(function: Any) -> tuple[str, ...]:
    code = getattr(function, "__code__", None)
    return () if code is None else code.co_varnames[: code.co_argcount]


def _names(function: Any) -> tuple[str, ...]:
    code = getattr(function, "__code__", None)
    return () if code is None else code.co_names


def _check() -> None:
    """Everything install() relies on, checked before anything changes."""
    version = sys.version_info[:2]
    if version not in SUPPORTED_PYTHONS:
        raise MultiprocessingIntegrationError(
            f"graphpickle's multiprocessing integration was checked against Python "
            f"{', '.join(f'{a}.{b}' for a, b in SUPPORTED_PYTHONS)}, not "
            f"{version[0]}.{version[1]}: nothing was installed"
        )
    forking = vars(_reduction.ForkingPickler)
    expected = {
        # What the stock names are, and what about them this module relies on.
        ("ForkingPickler", "dumps"): isinstance(forking.get("dumps"), classmethod)
        and _params(forking["dumps"].__func__) == ("cls", "obj", "protocol"),
        ("ForkingPickler", "loads"): forking.get("loads") is pickle.loads,
        ("reduction", "dump"): _params(_reduction.dump) == ("obj", "file", "protocol"),
        ("spawn", "get_preparation_data"): _params(_spawn.get_preparation_data) == ("name",),
        ("pool", "worker"): _params(vars(_pool)["worker"])
        == ("inqueue", "outqueue", "initializer", "initargs", "maxtasks", "wrap_exception"),
        ("executor", "_process_worker"): _params(vars(_executor)["_process_worker"])[:2]
        == ("call_queue", "result_queue"),
        ("Pool", "_setup_queues"): {"_outqueue", "_reader", "_quick_get"}
        <= set(_names(vars(_pool.Pool)["_setup_queues"])),
    }
    problems = [
        f"{holder}.{name}"
        for (holder, name), ok in expected.items()
        if not ok and (holder, name) not in _originals
    ]
    checks = {
        "ForkingPickler._extra_reducers": type(forking.get("_extra_reducers")) is dict,
        "SimpleQueue.get": {"_rlock", "_reader", "recv_bytes", "_ForkingPickler", "loads"}
        <= set(_names(_queues.SimpleQueue.get)),
        "Queue.get": {"_rlock", "_recv_bytes", "_sem", "_ForkingPickler", "loads"}
        <= set(_names(_queues.Queue.get)),
        "ProcessPoolExecutor's worker start": any(
            "_process_worker" in _names(spawner)
            for spawner in (
                vars(_executor.ProcessPoolExecutor).get("_spawn_process"),
                vars(_executor).get("_spawn_worker"),  # (3.14+)
            )
        ),
        "concurrent.futures.process._CallItem": _params(_executor._CallItem.__init__)
        == ("self", "work_id", "fn", "args", "kwargs"),
        "Pool._repopulate_pool_static": "worker"
        in _names(vars(_pool.Pool)["_repopulate_pool_static"].__func__),
        "forkserver._forkserver._preload_modules": type(
            getattr(getattr(_forkserver, "_forkserver", None), "_preload_modules", None)
        )
        is list,
        "forkserver.main": "main_path" in _params(_forkserver.main),
    }
    problems += [name for name, ok in checks.items() if not ok]
    if problems:
        raise MultiprocessingIntegrationError(
            f"this Python's multiprocessing ({sys.version.split()[0]}) differs from what "
            f"graphpickle knows at {', '.join(problems)}: nothing was installed"
        )


def _preload_modules() -> list[str]:
    """The modules the forkserver imports when it starts (``set_forkserver_preload``)."""
    preload: list[str] = vars(_forkserver._forkserver)["_preload_modules"]
    return preload


def install() -> None:
    """Make this process, and every child it starts, pickle with graphpickle
    wherever ``multiprocessing`` pickles (see the module's docstring).

    Raises :class:`MultiprocessingIntegrationError`, having changed nothing, on
    a Python whose ``multiprocessing`` this module does not know. Calling it
    again does nothing more."""
    global _original_preload
    _check()
    for key, (holder, replacement) in _TARGETS.items():  # nothing below can fail half-way
        if key in _originals:
            continue
        _originals[key] = vars(holder)[key[1]]
        setattr(holder, key[1], replacement)
    preload = _preload_modules()
    if _original_preload is None and _PRELOAD not in preload:
        # The forkserver imports graphpickle once; its children start with it.
        _original_preload = list(preload)
        preload.append(_PRELOAD)
    _main_namespace.track_main_classes_before_forks(_active)


def uninstall() -> None:
    """Undo :func:`install` in this process (children keep theirs until they exit)."""
    global _original_preload
    for key, original in _originals.items():
        holder = _TARGETS[key][0]
        setattr(holder, key[1], original)
    _originals.clear()
    if _original_preload is not None:
        _preload_modules()[:] = _original_preload
        _original_preload = None


def installed() -> bool:
    """Whether this process pickles with graphpickle wherever ``multiprocessing`` pickles."""
    return bool(_originals) and all(
        vars(holder).get(name) is replacement
        for (_, name), (holder, replacement) in _TARGETS.items()
    )
