"""How graphpickle's ``ProcessPoolExecutor`` starts its ``spawn`` and ``forkserver`` workers.

The standard library's workers first run the parent's main script again (as
``__mp_main__``), so that functions pickled by reference as ``__main__.f`` resolve.
From a file that re-runs the script body in every worker; from stdin the script is
``<stdin>``, which cannot be run, and 3.14's fork server, which imports it too, dies.
graphpickle sends ``__main__`` code by value, so its workers skip that step, and the
fork server they come from is graphpickle's own, which imports graphpickle instead of
``__main__``. Whatever stops a worker before it runs anything is sent to the parent
(one message per worker, on a pipe of the pool), which names it in the pool's error.

POSIX only (``futures.py`` imports it there). Both rely on multiprocessing internals, the same from 3.11 to 3.15; ``check()`` says
which are missing, before a pool starts:

- a child loads its preparation data, which carries the process name, before it
  prepares (``spawn._main``); ``spawn.prepare`` reaches ``_fixup_main_from_path`` and
  ``_fixup_main_from_name`` through the module's globals, so a name that loads as
  this module's code can replace them in that child only;
- an error before the process object runs reaches ``sys.excepthook`` (``spawn_main``
  and the fork server's child both end there);
- ``popen_forkserver.Popen._launch``'s steps, repeated in ``_make_forkserver_popen`` to
  reach a ``ForkServer`` of our own (the standard one is shared by every pool of the
  process and its preload is the user's).
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import struct
import sys
import threading
import traceback
import weakref
from multiprocessing import context as mp_context
from multiprocessing import reduction, spawn, util
from typing import Any

from ..core.pickler import dumps, loads

# What graphpickle's workers skip or reach, by name (see the module's docstring).
_SPAWN_NAMES = ("_main", "prepare", "_fixup_main_from_path", "_fixup_main_from_name")
_FORKSERVER_NAMES = ("ForkServer", "read_signed")

# One report is one write of at most PIPE_BUF bytes, which POSIX makes atomic: the
# reports of workers that fail together do not interleave.
_HEADER = struct.Struct("<I")
_REPORT_MAX = getattr(select, "PIPE_BUF", 512) - _HEADER.size


def check(start_method: str) -> None:
    """Raise if this Python's multiprocessing lacks what the workers rely on."""
    missing = [f"multiprocessing.spawn.{n}" for n in _SPAWN_NAMES if not hasattr(spawn, n)]
    if start_method == "forkserver":
        from multiprocessing import forkserver, popen_forkserver

        missing += [
            f"multiprocessing.forkserver.{n}"
            for n in _FORKSERVER_NAMES
            if not hasattr(forkserver, n)
        ]
        if not hasattr(popen_forkserver.Popen, "_launch"):
            missing.append("multiprocessing.popen_forkserver.Popen._launch")
    if missing:
        raise RuntimeError(
            f"graphpickle's ProcessPoolExecutor does not know this Python's multiprocessing "
            f"(Python {sys.version.split()[0]}; missing: {', '.join(missing)}); "
            'pass mp_context=multiprocessing.get_context("fork") or use the standard executor'
        )


class Reports:
    """The pipe on which a pool's workers report why they could not start."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        # Non-blocking on both ends (the flag is the pipe's, shared by every copy of
        # the write end): a worker never waits on a full pipe, and the parent reads
        # what is there.
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        # Closed once nothing holds the pool (its context) or a settling future (its
        # state): a worker may start until then.
        weakref.finalize(self, os.close, self.read_fd)
        weakref.finalize(self, os.close, self.write_fd)
        self._lock = threading.Lock()
        self._unread = b""
        self._received: list[tuple[BaseException | None, str]] = []

    def received(self) -> list[tuple[BaseException | None, str]]:
        """Each report so far: the worker's exception (``None`` if it could not be
        loaded here) and its traceback as text."""
        with self._lock:
            while True:
                try:
                    chunk = os.read(self.read_fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                self._unread += chunk
            while len(self._unread) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(self._unread)
                if len(self._unread) < _HEADER.size + size:
                    break
                body = self._unread[_HEADER.size : _HEADER.size + size]
                self._unread = self._unread[_HEADER.size + size :]
                self._received.append(_unpack_report(body))
            return list(self._received)


def _unpack_report(body: bytes) -> tuple[BaseException | None, str]:
    # Never raises: the pool's error is made from this, in a future's callback.
    try:
        exc, text = loads(body)
    except Exception as error:
        return None, f"(the worker's report could not be read here: {error!r})"
    if isinstance(exc, bytes):  # the exception, pickled on its own (see send_report)
        try:
            exc = loads(exc)
        except Exception:  # a class this process lacks: the text still tells
            exc = None
    return exc, str(text)


def send_report(fd: int, exc: BaseException) -> None:
    """In a worker: tell the parent why this worker stops before it runs anything."""
    text = "".join(traceback.format_exception(exc))
    try:
        message = dumps((dumps(exc), text))
    except Exception:  # an exception pickle cannot take: its text still travels
        message = b""
    if not message or len(message) > _REPORT_MAX:
        # The end of the traceback, the exception's line included; at most 4 bytes
        # a character.
        message = dumps((None, text[-(_REPORT_MAX // 8) :]))
    with contextlib.suppress(OSError):  # a full or closed pipe: stderr still has it
        os.write(fd, _HEADER.pack(len(message)) + message)


# In a worker: the pool's report pipe, once the worker has started.
_report_fd: int | None = None


def worker_report_fd() -> int | None:
    return _report_fd


def _skip_main(_name: str) -> None:
    """Stands for ``spawn._fixup_main_from_path``/``_from_name`` in a worker: the
    calls carry their ``__main__`` code by value, so the script does not run again."""


def _starting(name: str, report_fd: Any) -> str:
    """In a new worker, while it loads its preparation data: skip the main script,
    send any error that stops the start to the parent, and give the process its name."""
    global _report_fd
    if _report_fd is None:
        _report_fd = report_fd.detach()
        spawn._fixup_main_from_path = _skip_main  # type: ignore[attr-defined]
        spawn._fixup_main_from_name = _skip_main  # type: ignore[attr-defined]
        previous = sys.excepthook

        def report(kind: type[BaseException], value: BaseException, tb: Any) -> None:
            if _report_fd is not None:
                send_report(_report_fd, value)
            previous(kind, value, tb)

        sys.excepthook = report
    return str(name)


class _WorkerName(str):
    """A worker's name in its preparation data, which loads as ``_starting(name, fd)``."""

    report_fd: int

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled while the process starts (reduction.DupFd needs that), once: the
        # process object itself is pickled with a plain name (``__getstate__``).
        return _starting, (str(self), reduction.DupFd(self.report_fd))


class _ProcessState:
    """The process object a worker loads: its name is a plain string there."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_name"] = str(state["_name"])
        return state


class _SpawnProcess(_ProcessState, mp_context.SpawnProcess):
    pass


class _ForkServer:
    """graphpickle's fork server, one per process, started with its first worker: it
    imports this module (and so graphpickle) where the standard one imports
    ``__main__``. Made lazily, with the ``Popen`` that reaches it:
    ``popen_forkserver`` does not import where fds cannot be sent."""

    lock = threading.Lock()
    popen: Any = None
    server: Any = None

    @classmethod
    def popen_class(cls) -> Any:
        with cls.lock:
            if cls.popen is None:
                cls.popen = _make_forkserver_popen()
            return cls.popen

    @classmethod
    def get(cls) -> Any:
        with cls.lock:
            if cls.server is None:
                from multiprocessing import forkserver

                cls.server = forkserver.ForkServer()
                cls.server.set_forkserver_preload([__name__])
            return cls.server


def _make_forkserver_popen() -> Any:
    from multiprocessing import forkserver, popen_forkserver

    class Popen(popen_forkserver.Popen):
        def _launch(self, process_obj: Any) -> None:
            # popen_forkserver.Popen._launch (3.11-3.15), with graphpickle's server.
            prep_data = spawn.get_preparation_data(process_obj._name)
            buf = io.BytesIO()
            mp_context.set_spawning_popen(self)
            try:
                reduction.dump(prep_data, buf)
                reduction.dump(process_obj, buf)
            finally:
                mp_context.set_spawning_popen(None)
            self.sentinel, w = _ForkServer.get().connect_to_new_process(
                self._fds  # type: ignore[attr-defined]  # popen_forkserver.Popen's own
            )
            parent_w = os.dup(w)
            self.finalizer = util.Finalize(self, _close_fds, (parent_w, self.sentinel))
            with open(w, "wb", closefd=True) as f:
                f.write(buf.getbuffer())
            self.pid = forkserver.read_signed(self.sentinel)

    return Popen


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


class _ForkServerProcess(_ProcessState, mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _ForkServer.popen_class()(process_obj)


_PROCESS_CLASSES: dict[str, type[Any]] = {
    "spawn": _SpawnProcess,
    "forkserver": _ForkServerProcess,
}


class WorkerContext:
    """A standard multiprocessing context whose ``Process`` starts graphpickle's
    workers; everything else is the context's own."""

    def __init__(self, base: Any, reports: Reports) -> None:
        self._base = base
        self._process_class = _PROCESS_CLASSES[base.get_start_method()]
        self._reports = reports

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def Process(self, *args: Any, **kwargs: Any) -> Any:
        process = self._process_class(*args, **kwargs)
        name = _WorkerName(process.name)
        name.report_fd = self._reports.write_fd
        process.name = name
        return process


def wraps(context: Any) -> bool:
    """Whether graphpickle starts this context's workers itself: the standard
    library's spawn and forkserver contexts (another context is used as given)."""
    return type(context) in (mp_context.SpawnContext, mp_context.ForkServerContext)
